#!/usr/bin/env python3
"""Writes an N-layer Llama-style decoder as ONNX (the ops and layout of tests/onnx/models'
llama_layer, repeated: RMSNorm, GQA attention with RoPE, SwiGLU MLP), for timing `fbc import`
and the -O3 compile of a whole model:

    python3 tests/bench/onnx_llama.py --layers 16 --dim 256 -o /tmp/llama16.onnx
    fbc import /tmp/llama16.onnx -o /tmp/llama16.fbir && fbc /tmp/llama16.fbir -O3 --target mali

Weights are random (values do not change the compile); the width is reduced so the file stays
small (Llama 3.2-1B is 16 layers of width 2048: 4.9 GB of f32 weights).
"""
import argparse
import math
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "onnx", "models"))
from build import F32, Graph  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("-o", "--output", required=True)
    a = ap.parse_args()
    B, S, D, V = 1, a.seq, a.dim, a.vocab
    HD = 64
    HQ, HKV, FF = D // HD, max(1, D // HD // 4), 4 * D
    g = Graph("llama", np.random.default_rng(0))
    g.inputs += [
        helper.make_tensor_value_info("input_ids", TensorProto.INT64, [B, S]),
        helper.make_tensor_value_info("cos", TensorProto.FLOAT, [S, HD]),
        helper.make_tensor_value_info("sin", TensorProto.FLOAT, [S, HD]),
    ]
    g.outputs.append(helper.make_tensor_value_info("logits", TensorProto.FLOAT, [B, S, V]))

    def rms(x, prefix):
        w = g.init(f"{prefix}.weight", np.ones(D, dtype=F32))
        p = g.op("Pow", [x, g.scalar("two", 2.0)])
        m = g.op("ReduceMean", [p], axes=[-1], keepdims=1)
        r = g.op("Reciprocal", [g.op("Sqrt", [g.op("Add", [m, g.scalar("eps", 1e-5)])])])
        return g.op("Mul", [g.op("Mul", [x, r]), w])

    half = g.i64("axes", [-1])
    s0, e0 = g.i64("s0", [0]), g.i64("e0", [HD // 2])
    s1, e1 = g.i64("s1", [HD // 2]), g.i64("e1", [HD])
    rep_axes = g.i64("rep_axes", [2])
    rep_shape = g.i64("rep_shape", [B, HKV, HQ // HKV, S, HD])
    rep_out = g.i64("rep_out", [B, HQ, S, HD])
    mask = g.init("causal_mask", np.triu(np.full((S, S), -1e9, dtype=F32), k=1))

    def heads(t, n, tag):
        t = g.op("Reshape", [t, g.i64(f"{tag}_shape", [B, S, n, HD]) if f"{tag}_shape" not in g.init_names else f"{tag}_shape"])
        return g.op("Transpose", [t], perm=[0, 2, 1, 3])

    def rope(t):
        x1 = g.op("Slice", [t, s0, e0, half])
        x2 = g.op("Slice", [t, s1, e1, half])
        rot = g.op("Concat", [g.op("Neg", [x2]), x1], axis=-1)
        return g.op("Add", [g.op("Mul", [t, "cos"]), g.op("Mul", [rot, "sin"])])

    def repeat(t):
        t = g.op("Expand", [g.op("Unsqueeze", [t, rep_axes]), rep_shape])
        return g.op("Reshape", [t, rep_out])

    x = g.op("Gather", [g.weight("embed", [V, D], 0.2), "input_ids"], axis=0)
    for l in range(a.layers):
        p = f"layers.{l}"
        h = rms(x, f"{p}.input_layernorm")
        q = rope(heads(g.op("MatMul", [h, g.weight(f"{p}.q", [D, HQ * HD], 0.02)]), HQ, "q"))
        k = rope(heads(g.op("MatMul", [h, g.weight(f"{p}.k", [D, HKV * HD], 0.02)]), HKV, "kv"))
        v = heads(g.op("MatMul", [h, g.weight(f"{p}.v", [D, HKV * HD], 0.02)]), HKV, "kv")
        k, v = repeat(k), repeat(v)
        sc = g.op("MatMul", [q, g.op("Transpose", [k], perm=[0, 1, 3, 2])])
        sc = g.op("Add", [g.op("Mul", [sc, g.scalar("scale", 1 / math.sqrt(HD))]), mask])
        ctx = g.op("MatMul", [g.op("Softmax", [sc], axis=-1), v])
        ctx = g.op("Transpose", [ctx], perm=[0, 2, 1, 3])
        ctx = g.op("Reshape", [ctx, g.i64("merge", [0, 0, -1]) if "merge" not in g.init_names else "merge"])
        x = g.op("Add", [x, g.op("MatMul", [ctx, g.weight(f"{p}.o", [HQ * HD, D], 0.02)])])
        h = rms(x, f"{p}.post_attention_layernorm")
        gate = g.op("MatMul", [h, g.weight(f"{p}.gate", [D, FF], 0.02)])
        up = g.op("MatMul", [h, g.weight(f"{p}.up", [D, FF], 0.02)])
        act = g.op("Mul", [g.op("Mul", [gate, g.op("Sigmoid", [gate])]), up])
        x = g.op("Add", [x, g.op("MatMul", [act, g.weight(f"{p}.down", [FF, D], 0.02)])])
    x = rms(x, "norm")
    g.op("MatMul", [x, g.weight("lm_head", [D, V], 0.02)], out="logits")
    model = g.model()
    onnx.checker.check_model(model)
    onnx.save(model, a.output)
    print(f"{a.output}: {len(model.graph.node)} nodes, {os.path.getsize(a.output)} bytes")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Build three small transformer models in ONNX, with reference data.

Writes, for each model <name> in (bert_layer, llama_layer, vit_layer):
    tests/onnx/models/<name>/model.onnx
    tests/onnx/models/<name>/test_data_set_0/input_<i>.pb
    tests/onnx/models/<name>/test_data_set_0/output_<i>.pb
in the layout of ONNX's backend node tests (serialized TensorProtos named after
the graph inputs/outputs). Expected outputs are produced by onnxruntime's CPU
execution provider and cross-checked against a plain numpy implementation.

Opset 17 (default domain only), IR version 8. Deterministic
(numpy.random.default_rng(0)).

Regenerate with:
    pip install onnx==1.23.2 onnxruntime==1.32.0 numpy && python3 tests/onnx/models/build.py
"""
from __future__ import annotations

import math
import os
import shutil
from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8
HERE = os.path.dirname(os.path.abspath(__file__))

# Op types the fbc ONNX importer supports; every node must be one of these.
ALLOWED_OPS = frozenset(
    """MatMul Gemm Add Sub Mul Div Pow Sqrt Reciprocal Neg Exp Tanh Erf Sigmoid
    Softmax ReduceMean LayerNormalization Reshape Transpose Unsqueeze Concat
    Slice Gather Expand Cast Constant Shape Identity""".split()
)

F32 = np.float32


class Graph:
    """Tiny helper around onnx.helper for building a graph node by node."""

    def __init__(self, name: str, rng: np.random.Generator):
        self.name = name
        self.rng = rng
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.init_names: set[str] = set()
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self.weights: dict[str, np.ndarray] = {}  # for the numpy reference
        self._n = 0

    def fresh(self, hint: str) -> str:
        self._n += 1
        return f"{hint}_{self._n}"

    # ---- initializers -------------------------------------------------
    def init(self, name: str, arr: np.ndarray) -> str:
        assert name not in self.init_names, name
        self.init_names.add(name)
        self.inits.append(numpy_helper.from_array(arr, name))
        self.weights[name] = arr
        return name

    def weight(self, name: str, shape, std: float) -> str:
        return self.init(name, (self.rng.standard_normal(shape) * std).astype(F32))

    def i64(self, name: str, values) -> str:
        return self.init(name, np.asarray(values, dtype=np.int64))

    def scalar(self, name: str, value: float) -> str:
        if name in self.init_names:
            return name
        return self.init(name, np.asarray(value, dtype=F32))

    # ---- nodes --------------------------------------------------------
    def op(self, op_type: str, inputs, hint: str | None = None, out: str | None = None, **attrs) -> str:
        assert op_type in ALLOWED_OPS, op_type
        out = out or self.fresh(hint or op_type.lower())
        self.nodes.append(
            helper.make_node(op_type, list(inputs), [out], name=f"{op_type}_{len(self.nodes)}", **attrs)
        )
        return out

    def const(self, value: float, hint: str = "c") -> str:
        """Scalar float32 via a Constant node (as PyTorch's exporter emits)."""
        out = self.fresh(hint)
        self.nodes.append(
            helper.make_node(
                "Constant", [], [out], name=f"Constant_{len(self.nodes)}",
                value=numpy_helper.from_array(np.asarray(value, dtype=F32), out),
            )
        )
        return out

    def model(self) -> onnx.ModelProto:
        g = helper.make_graph(self.nodes, self.name, self.inputs, self.outputs, self.inits)
        m = helper.make_model(
            g,
            opset_imports=[helper.make_opsetid("", OPSET)],
            ir_version=IR_VERSION,
            producer_name="fbc tests/onnx/models/build.py",
        )
        return m


# ---------------------------------------------------------------------------
# shared building blocks
# ---------------------------------------------------------------------------

def gelu_erf(g: Graph, x: str) -> str:
    """x * 0.5 * (1 + erf(x / sqrt(2))) in the node order PyTorch exports."""
    d = g.op("Div", [x, g.const(1.4142135381698608, "sqrt2")], "gelu_div")
    e = g.op("Erf", [d], "gelu_erf")
    a = g.op("Add", [e, g.const(1.0, "one")], "gelu_add")
    m = g.op("Mul", [x, a], "gelu_mul")
    return g.op("Mul", [m, g.const(0.5, "half")], "gelu_half")


def layer_norm(g: Graph, x: str, prefix: str, dim: int) -> str:
    gamma = g.init(f"{prefix}.weight", (1.0 + g.rng.standard_normal(dim) * 0.1).astype(F32))
    beta = g.init(f"{prefix}.bias", (g.rng.standard_normal(dim) * 0.05).astype(F32))
    return g.op("LayerNormalization", [x, gamma, beta], prefix.replace(".", "_"), axis=-1, epsilon=1e-5)


def mha(g: Graph, x: str, prefix: str, b: int, s: int, d: int, h: int, use_gemm: bool) -> str:
    """Multi-head self-attention with biases (BERT / ViT style); x: [b, s, d]."""
    hd = d // h
    heads = g.i64(f"{prefix}.heads_shape", [b, s, h, hd])
    proj = {}
    for n in ("query", "key", "value"):
        w = g.weight(f"{prefix}.{n}.weight", [d, d], 0.1)
        bias = g.weight(f"{prefix}.{n}.bias", [d], 0.02)
        t = g.op("Add", [g.op("MatMul", [x, w], f"{n}_mm"), bias], f"{n}_add")
        t = g.op("Reshape", [t, heads], f"{n}_heads")
        proj[n] = g.op("Transpose", [t], f"{n}_bhsd", perm=[0, 2, 1, 3])
    kt = g.op("Transpose", [proj["key"]], "key_t", perm=[0, 1, 3, 2])
    scores = g.op("MatMul", [proj["query"], kt], "scores")
    scores = g.op("Mul", [scores, g.scalar(f"{prefix}.scale", 1.0 / math.sqrt(hd))], "scores_scaled")
    probs = g.op("Softmax", [scores], "probs", axis=-1)
    ctx = g.op("MatMul", [probs, proj["value"]], "ctx")
    ctx = g.op("Transpose", [ctx], "ctx_bshd", perm=[0, 2, 1, 3])
    wo = g.weight(f"{prefix}.output.weight", [d, d], 0.1)
    bo = g.weight(f"{prefix}.output.bias", [d], 0.02)
    if use_gemm:
        ctx = g.op("Reshape", [ctx, g.i64(f"{prefix}.flat_shape", [-1, d])], "ctx_2d")
        o = g.op("Gemm", [ctx, wo, bo], "attn_out_2d", alpha=1.0, beta=1.0)
        return g.op("Reshape", [o, g.i64(f"{prefix}.out_shape", [b, s, d])], "attn_out")
    ctx = g.op("Reshape", [ctx, g.i64(f"{prefix}.merge_shape", [0, 0, d])], "ctx_merged")
    return g.op("Add", [g.op("MatMul", [ctx, wo], "attn_out_mm"), bo], "attn_out")


def mlp_gelu(g: Graph, x: str, prefix: str, d: int, f: int) -> str:
    w1 = g.weight(f"{prefix}.fc1.weight", [d, f], 0.1)
    b1 = g.weight(f"{prefix}.fc1.bias", [f], 0.02)
    w2 = g.weight(f"{prefix}.fc2.weight", [f, d], 0.1)
    b2 = g.weight(f"{prefix}.fc2.bias", [d], 0.02)
    t = g.op("Add", [g.op("MatMul", [x, w1], "fc1_mm"), b1], "fc1")
    t = gelu_erf(g, t)
    return g.op("Add", [g.op("MatMul", [t, w2], "fc2_mm"), b2], "fc2")


def rms_norm(g: Graph, x: str, prefix: str, dim: int) -> str:
    w = g.init(f"{prefix}.weight", (1.0 + g.rng.standard_normal(dim) * 0.1).astype(F32))
    p = g.op("Pow", [x, g.scalar("two", 2.0)], "rms_pow")
    m = g.op("ReduceMean", [p], "rms_mean", axes=[-1], keepdims=1)
    m = g.op("Add", [m, g.scalar("rms_eps", 1e-5)], "rms_add")
    r = g.op("Reciprocal", [g.op("Sqrt", [m], "rms_sqrt")], "rms_rcp")
    return g.op("Mul", [g.op("Mul", [x, r], "rms_norm"), w], "rms_out")


# ---------------------------------------------------------------------------
# numpy references
# ---------------------------------------------------------------------------

def np_ln(x, w, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def np_softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def np_gelu(x):
    from math import erf
    return x * 0.5 * (1.0 + np.vectorize(erf)(x / math.sqrt(2.0)))


def np_mha(x, W, p, h, gemm=False):
    b, s, d = x.shape
    hd = d // h
    def heads(t):
        return t.reshape(b, s, h, hd).transpose(0, 2, 1, 3)
    q = heads(x @ W[f"{p}.query.weight"] + W[f"{p}.query.bias"])
    k = heads(x @ W[f"{p}.key.weight"] + W[f"{p}.key.bias"])
    v = heads(x @ W[f"{p}.value.weight"] + W[f"{p}.value.bias"])
    pr = np_softmax(q @ k.transpose(0, 1, 3, 2) / math.sqrt(hd))
    c = (pr @ v).transpose(0, 2, 1, 3).reshape(b, s, d)
    return c @ W[f"{p}.output.weight"] + W[f"{p}.output.bias"]


def np_mlp(x, W, p):
    t = np_gelu(x @ W[f"{p}.fc1.weight"] + W[f"{p}.fc1.bias"])
    return t @ W[f"{p}.fc2.weight"] + W[f"{p}.fc2.bias"]


def np_rms(x, w, eps=1e-5):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


# ---------------------------------------------------------------------------
# models
# ---------------------------------------------------------------------------

def build_bert(rng):
    B, S, D, H, F = 2, 16, 64, 4, 256
    g = Graph("bert_layer", rng)
    g.inputs.append(helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, S, D]))
    g.outputs.append(helper.make_tensor_value_info("y", TensorProto.FLOAT, [B, S, D]))
    a = mha(g, "x", "attention", B, S, D, H, use_gemm=True)
    h1 = layer_norm(g, g.op("Add", [a, "x"], "attn_residual"), "attention.ln", D)
    f = mlp_gelu(g, h1, "ffn", D, F)
    g.op("LayerNormalization",
         [g.op("Add", [f, h1], "ffn_residual"),
          g.init("ffn.ln.weight", (1.0 + rng.standard_normal(D) * 0.1).astype(F32)),
          g.init("ffn.ln.bias", (rng.standard_normal(D) * 0.05).astype(F32))],
         out="y", axis=-1, epsilon=1e-5)
    inputs = {"x": rng.standard_normal((B, S, D)).astype(F32)}

    def ref(inp, W):
        x = inp["x"].astype(np.float64)
        h1 = np_ln(x + np_mha(x, W, "attention", H), W["attention.ln.weight"], W["attention.ln.bias"])
        return {"y": np_ln(h1 + np_mlp(h1, W, "ffn"), W["ffn.ln.weight"], W["ffn.ln.bias"])}

    return g, inputs, ref


def rope_tables(seq: int, hd: int, theta: float = 10000.0):
    inv_freq = 1.0 / (theta ** (np.arange(0, hd, 2, dtype=np.float64) / hd))
    freqs = np.outer(np.arange(seq, dtype=np.float64), inv_freq)  # [seq, hd/2]
    emb = np.concatenate([freqs, freqs], axis=-1)  # [seq, hd] (rotate_half convention)
    return np.cos(emb).astype(F32), np.sin(emb).astype(F32)


def build_llama(rng):
    B, S, D, V = 1, 16, 64, 64
    HQ, HKV, HD, FF = 4, 2, 16, 128
    g = Graph("llama_layer", rng)
    g.inputs += [
        helper.make_tensor_value_info("input_ids", TensorProto.INT64, [B, S]),
        helper.make_tensor_value_info("cos", TensorProto.FLOAT, [S, HD]),
        helper.make_tensor_value_info("sin", TensorProto.FLOAT, [S, HD]),
    ]
    g.outputs.append(helper.make_tensor_value_info("logits", TensorProto.FLOAT, [B, S, V]))

    emb = g.weight("embed_tokens.weight", [V, D], 0.2)
    x = g.op("Gather", [emb, "input_ids"], "embed", axis=0)  # [1, 16, 64]

    h = rms_norm(g, x, "input_layernorm", D)
    wq = g.weight("self_attn.q_proj.weight", [D, HQ * HD], 0.1)
    wk = g.weight("self_attn.k_proj.weight", [D, HKV * HD], 0.1)
    wv = g.weight("self_attn.v_proj.weight", [D, HKV * HD], 0.1)
    wo = g.weight("self_attn.o_proj.weight", [HQ * HD, D], 0.1)

    def heads(t, n, hint):
        t = g.op("Reshape", [t, g.i64(f"{hint}_heads_shape", [B, S, n, HD])], f"{hint}_heads")
        return g.op("Transpose", [t], f"{hint}_bhsd", perm=[0, 2, 1, 3])

    q = heads(g.op("MatMul", [h, wq], "q_mm"), HQ, "q")  # [1,4,16,16]
    k = heads(g.op("MatMul", [h, wk], "k_mm"), HKV, "k")  # [1,2,16,16]
    v = heads(g.op("MatMul", [h, wv], "v_mm"), HKV, "v")  # [1,2,16,16]

    half_axes = g.i64("rope.axes", [-1])
    first_s, first_e = g.i64("rope.first_starts", [0]), g.i64("rope.first_ends", [HD // 2])
    second_s, second_e = g.i64("rope.second_starts", [HD // 2]), g.i64("rope.second_ends", [HD])

    def rope(t, hint):
        x1 = g.op("Slice", [t, first_s, first_e, half_axes], f"{hint}_x1")
        x2 = g.op("Slice", [t, second_s, second_e, half_axes], f"{hint}_x2")
        rot = g.op("Concat", [g.op("Neg", [x2], f"{hint}_negx2"), x1], f"{hint}_rot", axis=-1)
        return g.op("Add", [g.op("Mul", [t, "cos"], f"{hint}_cos"),
                            g.op("Mul", [rot, "sin"], f"{hint}_sin")], f"{hint}_rope")

    q, k = rope(q, "q"), rope(k, "k")

    rep_axes = g.i64("repeat_kv.axes", [2])
    rep_shape = g.i64("repeat_kv.expand_shape", [B, HKV, HQ // HKV, S, HD])
    rep_out = g.i64("repeat_kv.out_shape", [B, HQ, S, HD])

    def repeat_kv(t, hint):
        t = g.op("Unsqueeze", [t, rep_axes], f"{hint}_unsq")
        t = g.op("Expand", [t, rep_shape], f"{hint}_expand")
        return g.op("Reshape", [t, rep_out], f"{hint}_rep")

    k, v = repeat_kv(k, "k"), repeat_kv(v, "v")
    scores = g.op("MatMul", [q, g.op("Transpose", [k], "k_t", perm=[0, 1, 3, 2])], "scores")
    scores = g.op("Mul", [scores, g.scalar("self_attn.scale", 1.0 / math.sqrt(HD))], "scores_scaled")
    mask = np.triu(np.full((S, S), -1e9, dtype=F32), k=1)
    scores = g.op("Add", [scores, g.init("causal_mask", mask)], "scores_masked")
    probs = g.op("Softmax", [scores], "probs", axis=-1)
    ctx = g.op("MatMul", [probs, v], "ctx")
    ctx = g.op("Transpose", [ctx], "ctx_bshd", perm=[0, 2, 1, 3])
    ctx = g.op("Reshape", [ctx, g.i64("ctx_shape", [0, 0, -1])], "ctx_merged")
    x = g.op("Add", [x, g.op("MatMul", [ctx, wo], "o_proj")], "attn_residual")

    h = rms_norm(g, x, "post_attention_layernorm", D)
    wg = g.weight("mlp.gate_proj.weight", [D, FF], 0.1)
    wu = g.weight("mlp.up_proj.weight", [D, FF], 0.1)
    wd = g.weight("mlp.down_proj.weight", [FF, D], 0.1)
    gate = g.op("MatMul", [h, wg], "gate")
    silu = g.op("Mul", [gate, g.op("Sigmoid", [gate], "gate_sigmoid")], "silu")
    up = g.op("MatMul", [h, wu], "up")
    down = g.op("MatMul", [g.op("Mul", [silu, up], "swiglu"), wd], "down")
    x = g.op("Add", [x, down], "mlp_residual")

    x = rms_norm(g, x, "norm", D)
    g.op("MatMul", [x, g.weight("lm_head.weight", [D, V], 0.2)], out="logits")

    cos, sin = rope_tables(S, HD)
    inputs = {
        "input_ids": rng.integers(0, V, size=(B, S), dtype=np.int64),
        "cos": cos,
        "sin": sin,
    }

    def ref(inp, W):
        x = W["embed_tokens.weight"].astype(np.float64)[inp["input_ids"]]
        c, s_ = inp["cos"].astype(np.float64), inp["sin"].astype(np.float64)

        def hd(t, n):
            return t.reshape(B, S, n, HD).transpose(0, 2, 1, 3)

        def rot(t):
            return np.concatenate([-t[..., HD // 2:], t[..., :HD // 2]], -1)

        h = np_rms(x, W["input_layernorm.weight"])
        q = hd(h @ W["self_attn.q_proj.weight"], HQ)
        k = hd(h @ W["self_attn.k_proj.weight"], HKV)
        v = hd(h @ W["self_attn.v_proj.weight"], HKV)
        q, k = q * c + rot(q) * s_, k * c + rot(k) * s_
        k, v = np.repeat(k, HQ // HKV, axis=1), np.repeat(v, HQ // HKV, axis=1)
        p = np_softmax(q @ k.transpose(0, 1, 3, 2) / math.sqrt(HD) + W["causal_mask"])
        ctx = (p @ v).transpose(0, 2, 1, 3).reshape(B, S, HQ * HD)
        x = x + ctx @ W["self_attn.o_proj.weight"]
        h = np_rms(x, W["post_attention_layernorm.weight"])
        gt = h @ W["mlp.gate_proj.weight"]
        x = x + ((gt / (1 + np.exp(-gt))) * (h @ W["mlp.up_proj.weight"])) @ W["mlp.down_proj.weight"]
        return {"logits": np_rms(x, W["norm.weight"]) @ W["lm_head.weight"]}

    return g, inputs, ref


def build_vit(rng):
    B, C, IMG, P, D, H, F = 1, 3, 32, 8, 64, 4, 128
    NP = IMG // P  # 4 patches per side
    S = NP * NP + 1
    g = Graph("vit_layer", rng)
    g.inputs.append(helper.make_tensor_value_info("pixels", TensorProto.FLOAT, [B, C, IMG, IMG]))
    g.outputs.append(helper.make_tensor_value_info("y", TensorProto.FLOAT, [B, S, D]))

    t = g.op("Reshape", ["pixels", g.i64("patch.split_shape", [B, C, NP, P, NP, P])], "patch_split")
    t = g.op("Transpose", [t], "patch_perm", perm=[0, 2, 4, 1, 3, 5])  # [1,4,4,3,8,8]
    t = g.op("Reshape", [t, g.i64("patch.flat_shape", [B, NP * NP, C * P * P])], "patch_flat")
    t = g.op("Add", [g.op("MatMul", [t, g.weight("patch.weight", [C * P * P, D], 0.05)], "patch_mm"),
                     g.weight("patch.bias", [D], 0.02)], "patch_embed")
    cls = g.weight("cls_token", [B, 1, D], 0.2)
    t = g.op("Concat", [cls, t], "with_cls", axis=1)
    x = g.op("Add", [t, g.weight("pos_embed", [B, S, D], 0.2)], "embeddings")

    a = mha(g, layer_norm(g, x, "layernorm_before", D), "attention", B, S, D, H, use_gemm=False)
    x = g.op("Add", [a, x], "attn_residual")
    m = mlp_gelu(g, layer_norm(g, x, "layernorm_after", D), "mlp", D, F)
    x = g.op("Add", [m, x], "mlp_residual")
    g.op("LayerNormalization",
         [x, g.init("layernorm.weight", (1.0 + rng.standard_normal(D) * 0.1).astype(F32)),
          g.init("layernorm.bias", (rng.standard_normal(D) * 0.05).astype(F32))],
         out="y", axis=-1, epsilon=1e-5)
    inputs = {"pixels": rng.standard_normal((B, C, IMG, IMG)).astype(F32)}

    def ref(inp, W):
        px = inp["pixels"].astype(np.float64)
        t = px.reshape(B, C, NP, P, NP, P).transpose(0, 2, 4, 1, 3, 5).reshape(B, NP * NP, C * P * P)
        t = t @ W["patch.weight"] + W["patch.bias"]
        x = np.concatenate([W["cls_token"].astype(np.float64), t], 1) + W["pos_embed"]
        x = x + np_mha(np_ln(x, W["layernorm_before.weight"], W["layernorm_before.bias"]), W, "attention", H)
        x = x + np_mlp(np_ln(x, W["layernorm_after.weight"], W["layernorm_after.bias"]), W, "mlp")
        return {"y": np_ln(x, W["layernorm.weight"], W["layernorm.bias"])}

    return g, inputs, ref


# ---------------------------------------------------------------------------

def write_case(name, g: Graph, inputs, ref):
    model = g.model()
    onnx.checker.check_model(model, full_check=True)
    ops = Counter(n.op_type for n in model.graph.node)
    assert set(ops) <= ALLOWED_OPS, set(ops) - ALLOWED_OPS

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    in_names = [i.name for i in model.graph.input]
    out_names = [o.name for o in model.graph.output]
    outs = sess.run(out_names, {k: inputs[k] for k in in_names})

    W = {k: v.astype(np.float64) if v.dtype == F32 else v for k, v in g.weights.items()}
    expect = ref(inputs, W)
    for n, o in zip(out_names, outs):
        r = expect[n]
        assert o.shape == r.shape, (name, n, o.shape, r.shape)
        err = float(np.max(np.abs(o - r)))
        assert np.allclose(o, r, rtol=1e-4, atol=1e-4), (name, n, err)
        assert np.all(np.isfinite(o))

    d = os.path.join(HERE, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(os.path.join(d, "test_data_set_0"))
    onnx.save(model, os.path.join(d, "model.onnx"))
    for i, n in enumerate(in_names):
        with open(os.path.join(d, "test_data_set_0", f"input_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(inputs[n], n).SerializeToString())
    for i, (n, o) in enumerate(zip(out_names, outs)):
        with open(os.path.join(d, "test_data_set_0", f"output_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(o, n).SerializeToString())

    size = os.path.getsize(os.path.join(d, "model.onnx"))
    print(f"{name}: {size} bytes, {len(model.graph.node)} nodes")
    for i, n in enumerate(in_names):
        print(f"  input_{i}  {n} {inputs[n].dtype} {list(inputs[n].shape)}")
    for i, (n, o) in enumerate(zip(out_names, outs)):
        print(f"  output_{i} {n} {o.dtype} {list(o.shape)}  mean|y|={np.abs(o).mean():.3f} "
              f"max|y|={np.abs(o).max():.3f}  max|ort-numpy|={np.max(np.abs(o - expect[n])):.2e}")
    print("  ops: " + ", ".join(f"{k}x{v}" for k, v in sorted(ops.items())))


def main():
    print(f"onnx {onnx.__version__}, onnxruntime {ort.__version__}, numpy {np.__version__}")
    rng = np.random.default_rng(0)
    for name, builder in (("bert_layer", build_bert), ("llama_layer", build_llama), ("vit_layer", build_vit)):
        g, inputs, ref = builder(rng)
        write_case(name, g, inputs, ref)


if __name__ == "__main__":
    main()

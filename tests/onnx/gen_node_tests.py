#!/usr/bin/env python3
"""Generate the subset of ONNX backend *node* tests that fbc claims to support.

Writes tests/onnx/node/<case>/model.onnx and
tests/onnx/node/<case>/test_data_set_<k>/{input,output}_<i>.pb, in the same
layout as onnx/backend/test/data/node, plus tests/onnx/node/INDEX.tsv and
tests/onnx/README.md.

Regenerate with:
    pip install onnx==1.23.2 numpy && python3 tests/onnx/gen_node_tests.py

The output is deterministic for a given onnx version (numpy is seeded before
the test cases are collected, and the output folder is wiped first).
"""
from __future__ import annotations

import os
import shutil
import sys

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

# Op types (default ONNX domain) that the fbc importer claims to support.
# A node test case is kept only if *every* node of its graph is in this set.
CLAIMED_OPS = frozenset(
    [
        "MatMul", "Gemm", "Add", "Sub", "Mul", "Div", "Pow", "Sqrt",
        "Reciprocal", "Neg", "Exp", "Log", "Tanh", "Erf", "Sigmoid", "Relu",
        "Softmax", "LogSoftmax", "ReduceMean", "ReduceSum", "ReduceMax",
        "LayerNormalization", "Reshape", "Transpose", "Squeeze", "Unsqueeze",
        "Concat", "Split", "Slice", "Gather", "Expand", "Where", "Cast",
        "Constant", "ConstantOfShape", "Shape", "Identity", "Gelu", "Max",
        "Min",
    ]
)

# Keep the whole tree under this many bytes (sum of file sizes, i.e. what git
# stores; `du -sh` reports more because of per-file block overhead); the largest
# cases are dropped (and listed in the README) until it fits.
SIZE_LIMIT = 8 * 1000 * 1000

ONNX_VERSION = "1.23.2"

HERE = os.path.dirname(os.path.abspath(__file__))
OUT_DIR = os.path.join(HERE, "node")
README = os.path.join(HERE, "README.md")

DEFAULT_DOMAINS = ("", "ai.onnx")


def graph_has_subgraphs(graph: onnx.GraphProto) -> bool:
    for node in graph.node:
        for attr in node.attribute:
            if attr.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
                return True
    return False


def is_tensor_value(v) -> bool:
    return isinstance(v, (np.ndarray, TensorProto)) or np.isscalar(v)


def dtype_name(v) -> str:
    if isinstance(v, TensorProto):
        # e.g. BFLOAT16 / FLOAT8E4M3FN stored directly as TensorProto
        try:
            return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(v.data_type)).name
        except Exception:  # noqa: BLE001
            return TensorProto.DataType.Name(v.data_type).lower()
    return np.asarray(v).dtype.name


def to_proto(v, name: str) -> TensorProto:
    if isinstance(v, TensorProto):
        t = TensorProto()
        t.CopyFrom(v)
        t.name = name
        return t
    return numpy_helper.from_array(np.asarray(v), name)


def select(case) -> tuple[bool, str]:
    """Return (keep, reason)."""
    model = case.model
    if case.kind != "node" or model is None or not case.data_sets:
        return False, "no model/data"
    g = model.graph
    if len(model.functions) > 0:
        return False, "model-local functions"
    if graph_has_subgraphs(g):
        return False, "subgraphs"
    for node in g.node:
        if node.domain not in DEFAULT_DOMAINS or node.op_type not in CLAIMED_OPS:
            return False, f"op {node.domain}:{node.op_type}"
    for vi in list(g.input) + list(g.output):
        if not vi.type.HasField("tensor_type"):
            return False, "non-tensor graph io"
    for inputs, outputs in case.data_sets:
        if len(inputs) != len(g.input) or len(outputs) != len(g.output):
            return False, "io count mismatch"
        if not all(is_tensor_value(v) for v in list(inputs) + list(outputs)):
            return False, "non-tensor data"
    return True, ""


def write_case(case) -> None:
    model = case.model
    g = model.graph
    case_dir = os.path.join(OUT_DIR, case.name)
    os.makedirs(case_dir)
    with open(os.path.join(case_dir, "model.onnx"), "wb") as f:
        f.write(model.SerializeToString())
    for k, (inputs, outputs) in enumerate(case.data_sets):
        ds = os.path.join(case_dir, f"test_data_set_{k}")
        os.makedirs(ds)
        for i, v in enumerate(inputs):
            with open(os.path.join(ds, f"input_{i}.pb"), "wb") as f:
                f.write(to_proto(v, g.input[i].name).SerializeToString())
        for i, v in enumerate(outputs):
            with open(os.path.join(ds, f"output_{i}.pb"), "wb") as f:
                f.write(to_proto(v, g.output[i].name).SerializeToString())


def file_bytes(path: str) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for n in files:
            total += os.path.getsize(os.path.join(root, n))
    return total


def index_row(case) -> list[str]:
    model = case.model
    ops = ",".join(sorted({n.op_type for n in model.graph.node}))
    opset = next(
        (str(o.version) for o in model.opset_import if o.domain in DEFAULT_DOMAINS), ""
    )
    inputs, outputs = case.data_sets[0]
    in_dt = ",".join(dtype_name(v) for v in inputs)
    out_dt = ",".join(dtype_name(v) for v in outputs)
    return [case.name, ops, opset, in_dt, out_dt, repr(case.rtol), repr(case.atol)]


def main() -> int:
    if onnx.__version__ != ONNX_VERSION:
        print(
            f"warning: onnx {onnx.__version__} installed, data was generated "
            f"with {ONNX_VERSION}; output may differ",
            file=sys.stderr,
        )
    np.random.seed(0)
    from onnx.backend.test.case.node import collect_testcases

    cases = collect_testcases(None)

    kept = {}
    for case in cases:
        ok, _ = select(case)
        if ok:
            if case.name in kept:
                raise SystemExit(f"duplicate case name {case.name}")
            kept[case.name] = case

    if os.path.exists(OUT_DIR):
        shutil.rmtree(OUT_DIR)
    os.makedirs(OUT_DIR)
    for name in sorted(kept):
        write_case(kept[name])

    # Enforce the size budget by dropping the largest cases.
    sizes = {n: file_bytes(os.path.join(OUT_DIR, n)) for n in kept}
    total = sum(sizes.values())
    excluded = []
    for n in sorted(sizes, key=lambda n: (-sizes[n], n)):
        if total <= SIZE_LIMIT:
            break
        shutil.rmtree(os.path.join(OUT_DIR, n))
        total -= sizes[n]
        excluded.append((n, sizes[n]))
        del kept[n]

    with open(os.path.join(OUT_DIR, "INDEX.tsv"), "w") as f:
        f.write(
            "\t".join(
                ["name", "ops", "opset", "input_dtypes", "output_dtypes", "rtol", "atol"]
            )
            + "\n"
        )
        for name in sorted(kept):
            f.write("\t".join(index_row(kept[name])) + "\n")

    write_readme(len(kept), excluded)
    print(f"kept {len(kept)} cases, ~{total / 1e6:.2f} MB; excluded for size: {len(excluded)}")
    return 0


def write_readme(n_cases: int, excluded: list[tuple[str, int]]) -> None:
    lines = [
        "# ONNX backend node tests (subset)",
        "",
        "`node/` holds the ONNX backend *node* test cases (from",
        f"`onnx.backend.test.case.node.collect_testcases`, onnx {ONNX_VERSION}) whose",
        "graphs use only op types the fbc ONNX importer claims to support. The",
        "layout is the same as `onnx/backend/test/data/node`:",
        "`node/<case>/model.onnx` and `node/<case>/test_data_set_<k>/{input,output}_<i>.pb`",
        "(serialized `TensorProto`s named after the graph inputs/outputs).",
        "`node/INDEX.tsv` lists every case with its ops, default-domain opset,",
        "input/output dtypes and rtol/atol.",
        "",
        "The claimed op list (`CLAIMED_OPS`) is defined in `gen_node_tests.py`; a",
        "case (including `_expanded` function-body variants) is kept only if every",
        "node in its graph is a claimed op and all of its data are plain tensors.",
        "",
        "Regenerate (deterministic; wipes `node/` first):",
        "",
        "```sh",
        f"pip install onnx=={ONNX_VERSION} numpy && python3 tests/onnx/gen_node_tests.py",
        "```",
        "",
        f"Cases: {n_cases}.",
    ]
    if excluded:
        lines += ["", "Excluded for size (largest cases, to stay under ~8 MB):", ""]
        lines += [f"- `{n}` ({s / 1e6:.2f} MB)" for n, s in excluded]
    with open(README, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())

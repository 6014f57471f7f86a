//! `fbc import`: the ONNX backend node tests of every op fbc claims (`tests/onnx/node`, written
//! by `tests/onnx/gen_node_tests.py` from the `onnx` wheel), imported and run on the reference
//! interpreter against ONNX's expected outputs with ONNX's tolerances; the generated table in
//! `docs/onnx.md` must match what this run measured (`FBC_UPDATE_DOCS=1` rewrites it). Small
//! transformer models (`tests/onnx/models`, expected outputs from onnxruntime) through
//! `fbc import` and `fbc run` on the interpreter, the CPU JIT and OpenCL. The command's errors.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use fbc_onnx::{DType, HostTensor, Output};
use fbc_runtime::interp::{Interpreter, Value};
use fbc_runtime::reference::Tensor;

use common::{fbc, scratch};

use safetensors::Dtype;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn to_value(t: &HostTensor) -> Value {
    let shape = t.shape.clone();
    let n = t.numel();
    match t.dtype {
        DType::F64 => Value::F64(Tensor::new(shape, (0..n).map(|i| t.get(i)).collect()).unwrap()),
        d if d.is_float() => {
            Value::F32(Tensor::new(shape, (0..n).map(|i| t.get(i) as f32).collect()).unwrap())
        }
        _ => Value::I32(Tensor::new(shape, (0..n).map(|i| t.get(i) as i32).collect()).unwrap()),
    }
}

/// `|got − want| ≤ atol + rtol·|want|` everywhere (NaN where NaN is expected), as ONNX's
/// backend tests compare.
fn close(got: &[f64], want: &HostTensor, rtol: f64, atol: f64) -> Result<(), String> {
    if got.len() != want.numel() {
        return Err(format!("{} values, expected {}", got.len(), want.numel()));
    }
    for (i, &g) in got.iter().enumerate() {
        let w = want.get(i);
        let ok = if w.is_nan() {
            g.is_nan()
        } else if w.is_infinite() {
            g == w
        } else {
            (g - w).abs() <= atol + rtol * w.abs()
        };
        if !ok {
            return Err(format!("element {i}: {g} against {w}"));
        }
    }
    Ok(())
}

/// Imports and runs one case on the interpreter. Integer and boolean inputs are bound at import
/// time (fbc folds shapes, axes and masks; its run-time tensors are float, or i32 indices).
fn run_case(dir: &Path, rtol: f64, atol: f64) -> Result<(), String> {
    let case = fbc_onnx::case::load(dir).map_err(|e| format!("data: {e}"))?;
    let mut options = fbc_onnx::Options::default();
    for (name, t) in &case.inputs {
        if !t.dtype.is_float() {
            options.constant_inputs.insert(name.clone(), t.clone());
        }
    }
    let imported = fbc_onnx::import(&case.model, Some(dir), &options)
        .map_err(|e| format!("import: {}", e[0]))?;
    let diags = fbc_ir::verify_module(&imported.module);
    if let Some(d) = diags.first() {
        return Err(format!("verify: {}", d.message));
    }
    let given: HashMap<&str, &HostTensor> =
        case.inputs.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let mut values = Vec::new();
    for (name, _, _) in &imported.inputs {
        values.push(to_value(given.get(name.as_str()).ok_or(format!("no data for `{name}`"))?));
    }
    values.extend(imported.weights.iter().map(|(_, t)| to_value(t)));
    let results = Interpreter::new(&imported.module)
        .run("forward", values)
        .map_err(|e| format!("run: {e}"))?;
    for ((name, o), (_, want)) in imported.outputs.iter().zip(&case.outputs) {
        let got: Vec<f64> = match o {
            Output::Result(i) => results[*i].to_f64_vec(),
            Output::Constant(t) => (0..t.numel()).map(|i| t.get(i)).collect(),
        };
        close(&got, want, rtol, atol).map_err(|e| format!("output `{name}`: {e}"))?;
    }
    Ok(())
}

/// Whether a failure is an exclusion: a data type fbc has no tensor type for.
fn excluded(reason: &str) -> bool {
    reason.contains("data type")
}

fn node_table() -> String {
    let index = std::fs::read_to_string(root().join("tests/onnx/node/INDEX.tsv")).unwrap();
    let mut per_op: BTreeMap<String, (usize, usize, usize)> = BTreeMap::new();
    let mut failures = Vec::new();
    let (mut passed, mut total, mut excl) = (0, 0, 0);
    for line in index.lines().skip(1) {
        let cols: Vec<&str> = line.split('\t').collect();
        let (name, ops) = (cols[0], cols[1]);
        let rtol: f64 = cols[5].parse().unwrap();
        let atol: f64 = cols[6].parse().unwrap();
        let r = run_case(&root().join("tests/onnx/node").join(name), rtol, atol);
        total += 1;
        let is_excl = matches!(&r, Err(e) if excluded(e));
        for op in ops.split(',') {
            let e = per_op.entry(op.to_string()).or_default();
            e.1 += 1;
            if r.is_ok() {
                e.0 += 1;
            } else if is_excl {
                e.2 += 1;
            }
        }
        match r {
            Ok(()) => passed += 1,
            Err(e) if is_excl => {
                excl += 1;
                failures.push(format!("| `{name}` | excluded | {} |", e.replace('|', "\\|")));
            }
            Err(e) => failures.push(format!("| `{name}` | fails | {} |", e.replace('|', "\\|"))),
        }
    }
    let mut s = format!(
        "{passed} of {} node tests pass ({:.1}%); {excl} more are excluded (a data type fbc has \
         no tensor type for); {total} in all.\n\n| op | passed | run | excluded |\n|---|---|---|---|\n",
        total - excl,
        100.0 * passed as f64 / (total - excl).max(1) as f64
    );
    for (op, (p, t, x)) in &per_op {
        s.push_str(&format!("| {op} | {p} | {} | {x} |\n", t - x));
    }
    s.push_str("\nEvery test that does not pass, and why:\n\n| test | | reason |\n|---|---|---|\n");
    for f in failures {
        s.push_str(&f);
        s.push('\n');
    }
    s
}

const BEGIN: &str = "<!-- node-tests:begin (generated by compiler/driver/tests/onnx.rs) -->\n";
const END: &str = "<!-- node-tests:end -->";

#[test]
fn onnx_node_tests_match_the_table_in_the_docs() {
    let table = node_table();
    let path = root().join("docs/onnx.md");
    let doc = std::fs::read_to_string(&path).unwrap_or_default();
    let (head, rest) = doc.split_once(BEGIN).unwrap_or((&doc, END));
    let tail = rest.split_once(END).map_or("\n", |(_, t)| t);
    let want = format!("{head}{BEGIN}{table}{END}{tail}");
    if std::env::var_os("FBC_UPDATE_DOCS").is_some() {
        std::fs::write(&path, &want).unwrap();
    }
    assert!(
        doc == want,
        "docs/onnx.md's node-test table is stale; regenerate with FBC_UPDATE_DOCS=1 cargo test \
         -p fbc --test onnx\n\n{table}"
    );
}

/// The named tensors as safetensors bytes (floats as f32, integers as i32: `fbc run`'s inputs).
fn safetensors_of(tensors: &[(String, HostTensor)]) -> Vec<u8> {
    let data: Vec<(Dtype, Vec<u8>)> = tensors
        .iter()
        .map(|(_, t)| {
            if t.dtype.is_float() {
                (Dtype::F32, (0..t.numel()).flat_map(|i| (t.get(i) as f32).to_le_bytes()).collect())
            } else {
                (Dtype::I32, (0..t.numel()).flat_map(|i| (t.get(i) as i32).to_le_bytes()).collect())
            }
        })
        .collect();
    let views: Vec<(&str, safetensors::tensor::TensorView<'_>)> = tensors
        .iter()
        .zip(&data)
        .map(|((n, t), (d, b))| {
            (n.as_str(), safetensors::tensor::TensorView::new(*d, t.shape.clone(), b).unwrap())
        })
        .collect();
    safetensors::serialize(views, None).unwrap()
}

/// Where `fbc import` puts a model's initializers.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Weights {
    /// `--weights-out FILE`: arguments, bound from the file.
    File,
    /// `--inline-weights`: dense constants in the `.fbir`.
    Inline,
}

/// `fbc import` of a model of `tests/onnx/models`, then `fbc run` on each target; every output
/// within 1e-4 of onnxruntime's, relative to the output's largest magnitude.
fn check_model(name: &str, targets: &[&str], weights_to: Weights) {
    let dir = root().join("tests/onnx/models").join(name);
    let case = fbc_onnx::case::load(&dir).unwrap();
    let work = scratch(&format!("onnx-{name}-{weights_to:?}"));
    let (fbir, weights) = (work.join("m.fbir"), work.join("w.safetensors"));
    let model = dir.join("model.onnx");
    let mut import = vec!["import", model.to_str().unwrap(), "-o", fbir.to_str().unwrap()];
    match weights_to {
        Weights::File => import.extend(["--weights-out", weights.to_str().unwrap()]),
        Weights::Inline => import.push("--inline-weights"),
    }
    let o = fbc(&import);
    assert_eq!(o.code, 0, "{}", o.stderr);
    if weights_to == Weights::Inline {
        let text = std::fs::read_to_string(&fbir).unwrap();
        assert!(text.contains("value = dense<\"0x"), "no dense constant in {}", fbir.display());
        assert!(!weights.exists());
    }
    // The graph's inputs in a file of their own, beside the weights `fbc import` wrote.
    let inputs = work.join("inputs.safetensors");
    std::fs::write(&inputs, safetensors_of(&case.inputs)).unwrap();
    for target in targets {
        let out = work.join(format!("out-{target}.safetensors"));
        let mut run = vec!["run", fbir.to_str().unwrap()];
        if weights_to == Weights::File {
            run.extend(["--inputs", weights.to_str().unwrap()]);
        }
        run.extend([
            "--inputs",
            inputs.to_str().unwrap(),
            "--outputs",
            out.to_str().unwrap(),
            "--target",
            target,
            "-O3",
        ]);
        let o = fbc(&run);
        assert_eq!(o.code, 0, "{name} on {target}: {}", o.stderr);
        let (_, got) = common::f32_tensor(&out, "result0");
        let want = &case.outputs[0].1;
        let want: Vec<f32> = (0..want.numel()).map(|i| want.get(i) as f32).collect();
        assert_eq!(got.len(), want.len(), "{name} on {target}");
        let e = common::rel_err(&got, &want);
        assert!(e <= 1e-4, "{name} on {target}: largest error {e:e} of the largest output");
    }
}

const CPU_TARGETS: &[&str] = &["cpu", "cpu-jit"];

#[test]
fn a_bert_layer_matches_onnxruntime() {
    check_model("bert_layer", CPU_TARGETS, Weights::File);
}

#[test]
fn a_llama_layer_with_rope_and_gqa_matches_onnxruntime() {
    check_model("llama_layer", CPU_TARGETS, Weights::File);
}

#[test]
fn a_vit_layer_matches_onnxruntime() {
    check_model("vit_layer", CPU_TARGETS, Weights::File);
}

#[test]
fn models_with_inline_weights_match_onnxruntime() {
    for name in ["llama_layer", "vit_layer"] {
        check_model(name, CPU_TARGETS, Weights::Inline);
    }
}

#[cfg(feature = "opencl")]
#[test]
fn the_onnx_models_match_onnxruntime_on_opencl() {
    if !common::have_device() {
        return;
    }
    for name in ["bert_layer", "llama_layer", "vit_layer"] {
        check_model(name, &["opencl"], Weights::File);
    }
    check_model("llama_layer", &["opencl"], Weights::Inline);
}

// ----- errors -----

use fbc_onnx::proto::{
    attr_type, data_type, tensor_shape_proto, type_proto, AttributeProto, GraphProto, Message,
    ModelProto, NodeProto, OperatorSetIdProto, StringStringEntryProto, TensorProto,
    TensorShapeProto, TypeProto, ValueInfoProto,
};

fn tensor_input(name: &str, dims: &[Result<i64, &str>]) -> ValueInfoProto {
    use tensor_shape_proto::dimension::Value as D;
    let dim = dims
        .iter()
        .map(|d| tensor_shape_proto::Dimension {
            value: Some(match d {
                Ok(v) => D::DimValue(*v),
                Err(p) => D::DimParam(p.to_string()),
            }),
        })
        .collect();
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: data_type::FLOAT,
                shape: Some(TensorShapeProto { dim }),
            })),
        }),
    }
}

fn node(name: &str, op: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
    NodeProto {
        name: name.into(),
        op_type: op.into(),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

fn model(nodes: Vec<NodeProto>, inputs: Vec<ValueInfoProto>, inits: Vec<TensorProto>) -> Vec<u8> {
    let out = nodes.last().map(|n| n.output[0].clone()).unwrap_or_default();
    ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto { domain: String::new(), version: 17 }],
        producer_name: "fbc tests".into(),
        graph: Some(GraphProto {
            name: "g".into(),
            node: nodes,
            initializer: inits,
            input: inputs,
            output: vec![ValueInfoProto { name: out, r#type: None }],
            value_info: vec![],
        }),
    }
    .encode_to_vec()
}

/// Runs `fbc import` on `bytes` (written as `m.onnx` in a scratch folder) with `extra`
/// arguments; returns the result and whether the output file exists.
fn import_bytes(tag: &str, bytes: &[u8], extra: &[&str]) -> (common::Out, bool) {
    let dir = scratch(&format!("onnx-err-{tag}"));
    let src = dir.join("m.onnx");
    std::fs::write(&src, bytes).unwrap();
    let out = dir.join("m.fbir");
    let _ = std::fs::remove_file(&out);
    let mut args = vec!["import", src.to_str().unwrap(), "-o", out.to_str().unwrap()];
    args.extend(extra);
    let o = fbc(&args);
    (o, out.exists())
}

#[test]
fn every_unsupported_node_is_reported_and_nothing_is_written() {
    let bytes = model(
        vec![
            node("conv1", "Conv", &["x", "w"], &["c"]),
            node("mm", "MatMul", &["c", "w"], &["d"]),
            node("", "LSTM", &["d"], &["e"]),
        ],
        vec![tensor_input("x", &[Ok(2), Ok(4)]), tensor_input("w", &[Ok(4), Ok(4)])],
        vec![],
    );
    let (o, written) = import_bytes("unsupported", &bytes, &[]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(!written);
    let lines: Vec<&str> =
        o.stderr.lines().map(|l| l.split_once(": ").map_or(l, |x| x.1)).collect();
    assert_eq!(
        lines,
        [
            "error: node `conv1` (Conv): op `Conv` is not supported",
            "error: node `#2` (LSTM): op `LSTM` is not supported",
            "2 errors",
        ],
        "{}",
        o.stderr
    );
}

#[test]
fn symbolic_dimensions_must_be_bound_with_shape() {
    let bytes = model(
        vec![node("r", "Relu", &["x"], &["y"])],
        vec![tensor_input("x", &[Err("batch"), Ok(8)])],
        vec![],
    );
    let (o, written) = import_bytes("symbolic", &bytes, &[]);
    assert_eq!(o.code, 1);
    assert!(!written);
    assert!(
        o.stderr.contains(
            "error: input `x`: dimension 0 is `batch`: bind it with --shape batch=N or --shape x=.."
        ),
        "{}",
        o.stderr
    );
    let (o, written) = import_bytes("symbolic-bound", &bytes, &["--shape", "batch=3"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(written);
    let (o, _) = import_bytes("symbolic-whole", &bytes, &["--shape", "x=5x8"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
}

fn raw_init(name: &str, dims: &[i64], raw: Vec<u8>) -> TensorProto {
    TensorProto {
        name: name.into(),
        dims: dims.to_vec(),
        data_type: data_type::FLOAT,
        raw_data: raw,
        ..Default::default()
    }
}

#[test]
fn hostile_models_are_errors_not_crashes() {
    let add = |init: TensorProto| {
        model(
            vec![node("a", "Add", &["x", "w"], &["y"])],
            vec![tensor_input("x", &[Ok(2)])],
            vec![init],
        )
    };
    let external = |location: &str, offset: &str| TensorProto {
        name: "w".into(),
        dims: vec![2],
        data_type: data_type::FLOAT,
        data_location: 1,
        external_data: vec![
            StringStringEntryProto { key: "location".into(), value: location.into() },
            StringStringEntryProto { key: "offset".into(), value: offset.into() },
            StringStringEntryProto { key: "length".into(), value: "8".into() },
        ],
        ..Default::default()
    };
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("garbage", b"\xff\xff\xff\xff not a protobuf".to_vec(), "not an ONNX model"),
        ("short-raw", add(raw_init("w", &[2], vec![0; 7])), "the raw data has 7 bytes"),
        ("negative-dim", add(raw_init("w", &[-3], vec![])), "negative dimension -3"),
        (
            "overflowing-dims",
            add(raw_init("w", &[1 << 40, 1 << 40, 1 << 40], vec![])),
            "too many elements",
        ),
        ("escaping-location", add(external("../secret.bin", "0")), "must be a relative path"),
        ("past-the-end", add(external("w.bin", "4")), "lie past the end of the file"),
        (
            "huge-constant",
            model(
                vec![NodeProto {
                    attribute: vec![AttributeProto {
                        name: "value".into(),
                        r#type: attr_type::TENSOR,
                        t: Some(raw_init("", &[1], 0f32.to_le_bytes().to_vec())),
                        ..Default::default()
                    }],
                    ..node("big", "ConstantOfShape", &["s"], &["y"])
                }],
                vec![],
                vec![TensorProto {
                    name: "s".into(),
                    dims: vec![2],
                    data_type: data_type::INT64,
                    int64_data: vec![1 << 20, 1 << 20],
                    ..Default::default()
                }],
            ),
            "too large",
        ),
    ];
    for (tag, bytes, want) in cases {
        let dir = scratch(&format!("onnx-err-{tag}"));
        std::fs::write(dir.join("w.bin"), [0u8; 8]).unwrap();
        let (o, written) = import_bytes(tag, &bytes, &[]);
        assert_eq!(o.code, 1, "{tag}: {}", o.stderr);
        assert!(!written, "{tag}");
        assert!(o.stderr.contains(want), "{tag}: {}", o.stderr);
    }
}

/// Random byte flips of a real model: the importer errors or returns a module that verifies,
/// and never panics (the cargo-fuzz target `onnx` runs the same property without a bound).
#[test]
fn mutated_models_never_crash_the_importer() {
    let bytes = std::fs::read(root().join("tests/onnx/models/bert_layer/model.onnx")).unwrap();
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let (mut ok, mut refused) = (0, 0);
    for _ in 0..300 {
        let mut m = bytes.clone();
        for _ in 0..1 + next() % 8 {
            let i = (next() % m.len() as u64) as usize;
            m[i] = next() as u8;
        }
        match fbc_onnx::import(&m, None, &fbc_onnx::Options::default()) {
            Ok(imported) => {
                assert!(fbc_ir::verify_module(&imported.module).is_empty());
                ok += 1;
            }
            Err(e) => {
                assert!(!e.is_empty());
                refused += 1;
            }
        }
    }
    assert_eq!(ok + refused, 300);
}

//! `fbc run` as a user meets it: safetensors inputs and outputs, exact input error messages,
//! malformed files, deterministic random inputs, entry selection, unsupported targets, errors
//! located at the failing op, and the LoRA example end to end.

mod common;

use common::{fbc, scratch, write};

use std::path::Path;

use safetensors::{Dtype, SafeTensors};

fn path(dir: &Path, name: &str) -> String {
    dir.join(name).to_string_lossy().into_owned()
}

/// A tensor to write: name, dtype, shape, little-endian bytes.
type Spec<'a> = (&'a str, Dtype, Vec<usize>, Vec<u8>);

/// A safetensors file of the given tensors, written with the safetensors crate itself.
fn safetensors_file(tensors: &[Spec<'_>]) -> Vec<u8> {
    let views: Vec<(&str, safetensors::tensor::TensorView<'_>)> = tensors
        .iter()
        .map(|(n, d, s, b)| (*n, safetensors::tensor::TensorView::new(*d, s.clone(), b).unwrap()))
        .collect();
    safetensors::serialize(views, None).unwrap()
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn f32_values(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
}

/// `y = relu(x · w + 1)` and `s = Σ x`, so both results can be worked out by hand.
const MLP: &str = "\
func.func @f(%x: tensor<2x3xf32>, %w: tensor<3x2xf32>) -> (tensor<2x2xf32>, tensor<f32>) {
  %one = tensor.constant {value = 1.0} : () -> tensor<2x2xf32>
  %0 = tensor.matmul %x, %w
  %1 = tensor.add %0, %one
  %2 = tensor.relu %1
  %3 = tensor.reduce_sum %x {axes = [0, 1]}
  func.return %2, %3 : (tensor<2x2xf32>, tensor<f32>) -> ()
}
";

fn mlp_inputs() -> Vec<u8> {
    safetensors_file(&[
        ("x", Dtype::F32, vec![2, 3], f32_bytes(&[1.0, 2.0, 3.0, -4.0, -5.0, -6.0])),
        ("w", Dtype::F32, vec![3, 2], f32_bytes(&[1.0, 0.0, 0.0, 1.0, 1.0, 1.0])),
    ])
}

#[test]
fn safetensors_round_trip() {
    let dir = scratch("round-trip");
    let ir = write(&dir, "mlp.fbir", MLP.as_bytes());
    let inputs = write(&dir, "in.safetensors", &mlp_inputs());
    let out = path(&dir, "out.safetensors");
    let o = fbc(&["run", &ir, "--inputs", &inputs, "--outputs", &out]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(o.stdout, "", "no summary without -v when writing --outputs");
    let bytes = std::fs::read(&out).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let mut names = st.names();
    names.sort();
    assert_eq!(names, ["result0", "result1"]);
    // x·w: row (1, 2, 3) gives (1 + 3, 2 + 3) = (4, 5); row (-4, -5, -6) gives (-10, -11).
    // Plus one, relu: (5, 6), (0, 0). Σ x = 6 - 15 = -9.
    let r0 = st.tensor("result0").unwrap();
    assert_eq!((r0.dtype(), r0.shape()), (Dtype::F32, &[2usize, 2][..]));
    assert_eq!(f32_values(r0.data()), [5.0, 6.0, 0.0, 0.0]);
    let r1 = st.tensor("result1").unwrap();
    assert_eq!((r1.dtype(), r1.shape()), (Dtype::F32, &[][..]));
    assert_eq!(f32_values(r1.data()), [-9.0]);
    let (_, meta) = SafeTensors::read_metadata(&bytes).unwrap();
    assert_eq!(meta.metadata().as_ref().and_then(|m| m.get("fbc.entry")).unwrap(), "@f");

    // -v prints the summary too, and the time on stderr.
    let o = fbc(&["run", &ir, "--inputs", &inputs, "--outputs", &out, "-v"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(
        o.stdout,
        "result0: tensor<2x2xf32>  min 0 max 6 mean 2.75\n  [5, 6, 0, 0]\n\
         result1: tensor<f32>  min -9 max -9 mean -9\n  [-9]\n"
    );
    assert!(o.stderr.starts_with("ran @f in "), "{}", o.stderr);
}

#[test]
fn f16_ids_and_f64_mode() {
    let dir = scratch("types");
    let ir = "\
func.func @f(%t: tensor<3x2xf16>, %ids: tensor<2xi32>) -> (tensor<2x2xf16>, tensor<2xi32>) {
  %0 = tensor.embedding %t, %ids
  %1 = tensor.scale %0 {factor = 3.0}
  func.return %1, %ids : (tensor<2x2xf16>, tensor<2xi32>) -> ()
}
";
    let ir = write(&dir, "e.fbir", ir.as_bytes());
    let table: Vec<u8> = [0.5f32, 1.0, 0.1, 2.0, -1.0, 4.0]
        .iter()
        .flat_map(|&x| half::f16::from_f32(x).to_le_bytes())
        .collect();
    let ids: Vec<u8> = [2i32, 1].iter().flat_map(|x| x.to_le_bytes()).collect();
    let inputs = write(
        &dir,
        "in.safetensors",
        &safetensors_file(&[
            ("t", Dtype::F16, vec![3, 2], table),
            ("ids", Dtype::I32, vec![2], ids.clone()),
        ]),
    );
    let out = path(&dir, "out.safetensors");
    let o = fbc(&["run", &ir, "--inputs", &inputs, "--outputs", &out]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let bytes = std::fs::read(&out).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let r0 = st.tensor("result0").unwrap();
    assert_eq!(r0.dtype(), Dtype::F16);
    let got: Vec<f32> = r0
        .data()
        .chunks_exact(2)
        .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
        .collect();
    // Rows 2 and 1 of the f16 table, times 3, rounded to f16: 0.1 is 0.0999755859375 in f16, and
    // 3 × that = 0.2999267578125, whose nearest f16 is 0.29980469 (ulp 2^-12 = 0.000244).
    assert_eq!(got, [-3.0, 12.0, 0.299_804_7, 6.0]);
    let r1 = st.tensor("result1").unwrap();
    assert_eq!((r1.dtype(), r1.data()), (Dtype::I32, &ids[..]));

    // --f64: F64 input accepted for an f32 argument, float results written as F64.
    let ir2 = write(
        &dir,
        "s.fbir",
        b"func.func @g(%x: tensor<2xf32>) -> tensor<2xf32> {\n  %0 = tensor.scale %x {factor = 0.1}\n  func.return %0 : tensor<2xf32>\n}\n",
    );
    let x: Vec<u8> = [1.0f64, 3.0].iter().flat_map(|x| x.to_le_bytes()).collect();
    let in2 = write(&dir, "x64.safetensors", &safetensors_file(&[("x", Dtype::F64, vec![2], x)]));
    let o = fbc(&["run", &ir2, "--inputs", &in2, "--outputs", &out, "--f64"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let bytes = std::fs::read(&out).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let r = st.tensor("result0").unwrap();
    assert_eq!(r.dtype(), Dtype::F64);
    let got: Vec<f64> =
        r.data().chunks_exact(8).map(|b| f64::from_le_bytes(b.try_into().unwrap())).collect();
    assert_eq!(got, [0.1, 0.30000000000000004]);
    // Without --f64 the same F64 input is mis-typed.
    let o = fbc(&["run", &ir2, "--inputs", &in2]);
    assert_eq!(o.code, 1);
    assert_eq!(
        o.stderr,
        format!("{in2}: error: input `x`: expected tensor<2xf32>, found F64 [2]\n")
    );
}

#[test]
fn input_errors_name_the_input_and_both_types() {
    let dir = scratch("input-errors");
    let ir = write(&dir, "mlp.fbir", MLP.as_bytes());
    let cases: Vec<(&str, Vec<Spec<'_>>, String)> = vec![
        (
            "shape",
            vec![
                ("x", Dtype::F32, vec![2, 4], f32_bytes(&[0.0; 8])),
                ("w", Dtype::F32, vec![3, 2], f32_bytes(&[0.0; 6])),
            ],
            "input `x`: expected tensor<2x3xf32>, found F32 [2, 4]".into(),
        ),
        (
            "dtype",
            vec![
                ("x", Dtype::F32, vec![2, 3], f32_bytes(&[0.0; 6])),
                ("w", Dtype::I32, vec![3, 2], vec![0; 24]),
            ],
            "input `w`: expected tensor<3x2xf32>, found I32 [3, 2]".into(),
        ),
        (
            "missing",
            vec![("x", Dtype::F32, vec![2, 3], f32_bytes(&[0.0; 6]))],
            "input `w`: missing (tensor<3x2xf32>); add it to the inputs file or pass \
             --random-inputs SEED"
                .into(),
        ),
        (
            "extra",
            vec![
                ("x", Dtype::F32, vec![2, 3], f32_bytes(&[0.0; 6])),
                ("w", Dtype::F32, vec![3, 2], f32_bytes(&[0.0; 6])),
                ("z", Dtype::F32, vec![1], f32_bytes(&[0.0])),
            ],
            "input `z` (F32 [1]): @f has no argument of that name (arguments: x, w)".into(),
        ),
    ];
    for (name, tensors, message) in cases {
        let inputs = write(&dir, &format!("{name}.safetensors"), &safetensors_file(&tensors));
        let out = path(&dir, &format!("{name}.out"));
        let o = fbc(&["run", &ir, "--inputs", &inputs, "--outputs", &out]);
        assert_eq!(o.code, 1, "{name}: {}", o.stderr);
        assert_eq!(o.stderr, format!("{inputs}: error: {message}\n"), "{name}");
        assert!(!Path::new(&out).exists(), "{name}: a failed run leaves no output");
    }
    // Several problems are all reported, one line each.
    let inputs = write(
        &dir,
        "two.safetensors",
        &safetensors_file(&[("x", Dtype::F16, vec![2, 3], vec![0; 12])]),
    );
    let o = fbc(&["run", &ir, "--inputs", &inputs]);
    assert_eq!(
        o.stderr,
        format!(
            "{inputs}: error: input `x`: expected tensor<2x3xf32>, found F16 [2, 3]\n\
             {inputs}: error: input `w`: missing (tensor<3x2xf32>); add it to the inputs file or \
             pass --random-inputs SEED\n"
        )
    );
    // No inputs at all.
    let o = fbc(&["run", &ir]);
    assert_eq!(o.code, 1);
    assert_eq!(
        o.stderr.lines().next().unwrap(),
        format!(
            "{ir}: error: input `x`: missing (tensor<2x3xf32>); pass --inputs IN.safetensors or \
             --random-inputs SEED"
        )
    );
}

#[test]
fn malformed_safetensors_files_are_errors() {
    let dir = scratch("malformed");
    let ir = write(&dir, "mlp.fbir", MLP.as_bytes());
    let good = mlp_inputs();
    let mut huge_header = good.clone();
    huge_header[..8].copy_from_slice(&u64::MAX.to_le_bytes());
    let mut bad_json = good.clone();
    bad_json[8] = b'!';
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty", vec![]),
        ("short", vec![1, 2, 3]),
        ("garbage", b"this is not a safetensors file at all".to_vec()),
        ("truncated", good[..good.len() - 4].to_vec()),
        ("header-length", huge_header),
        ("header-json", bad_json),
    ];
    for (name, bytes) in cases {
        let inputs = write(&dir, &format!("{name}.safetensors"), &bytes);
        let o = fbc(&["run", &ir, "--inputs", &inputs]);
        assert_eq!(o.code, 1, "{name}: {}", o.stderr);
        let prefix = format!("{inputs}: error: not a valid safetensors file: ");
        assert!(o.stderr.starts_with(&prefix), "{name}: {}", o.stderr);
        assert!(!o.stderr.contains("panicked"), "{name}: {}", o.stderr);
    }
    let missing = path(&dir, "nope.safetensors");
    let o = fbc(&["run", &ir, "--inputs", &missing]);
    assert_eq!(o.code, 1);
    assert!(o.stderr.starts_with(&format!("{missing}: error: cannot read: ")), "{}", o.stderr);
}

#[test]
fn random_inputs_are_deterministic() {
    let dir = scratch("random");
    let ir = write(&dir, "mlp.fbir", MLP.as_bytes());
    let run = |seed: &str, out: &str, extra: &[&str]| {
        let o = path(&dir, out);
        let mut args = vec!["run", &ir, "--random-inputs", seed, "--outputs", &o];
        args.extend_from_slice(extra);
        let r = fbc(&args);
        assert_eq!(r.code, 0, "{}", r.stderr);
        std::fs::read(&o).unwrap()
    };
    let a = run("42", "a.safetensors", &[]);
    let b = run("42", "b.safetensors", &[]);
    let c = run("43", "c.safetensors", &[]);
    assert_eq!(a, b, "same seed, same bytes");
    assert_ne!(a, c, "another seed, other values");
    // Giving x explicitly does not change the random w: the result is x·w of the same w.
    let x = [1.0f32, 0.0, 0.0, 0.0, 0.0, 0.0];
    let inputs = write(
        &dir,
        "x.safetensors",
        &safetensors_file(&[("x", Dtype::F32, vec![2, 3], f32_bytes(&x))]),
    );
    let partial = run("42", "p.safetensors", &["--inputs", &inputs]);
    let st = SafeTensors::deserialize(&partial).unwrap();
    let y = f32_values(st.tensor("result0").unwrap().data());
    // Row 0 is relu(w[0, :] + 1) with w uniform in [-1, 1): in [0, 2); row 1 is relu(0 + 1) = 1.
    assert!(y[..2].iter().all(|v| (0.0..2.0).contains(v)), "{y:?}");
    assert_eq!(&y[2..], [1.0, 1.0]);
    assert_eq!(f32_values(st.tensor("result1").unwrap().data()), [1.0]);
}

#[test]
fn entry_selection() {
    let dir = scratch("entry");
    let two = "\
func.func @a(%x: tensor<2xf32>) -> tensor<2xf32> {
  %0 = tensor.neg %x
  func.return %0 : tensor<2xf32>
}
func.func @b() -> tensor<2xf32> {
  %0 = tensor.constant {value = 7.0} : () -> tensor<2xf32>
  func.return %0 : tensor<2xf32>
}
";
    let ir = write(&dir, "two.fbir", two.as_bytes());
    let o = fbc(&["run", &ir]);
    assert_eq!(o.code, 2);
    assert_eq!(
        o.stderr,
        format!(
            "fbc: error: {ir} has several functions and none is named `main`; choose one with \
             --entry: @a, @b\n"
        )
    );
    let o = fbc(&["run", &ir, "--entry", "c"]);
    assert_eq!(o.code, 2);
    assert_eq!(
        o.stderr,
        format!("fbc: error: --entry @c: no function of that name; {ir} has @a, @b\n")
    );
    for name in ["b", "@b"] {
        let o = fbc(&["run", &ir, "--entry", name]);
        assert_eq!(o.code, 0, "{}", o.stderr);
        assert_eq!(o.stdout, "result0: tensor<2xf32>  min 7 max 7 mean 7\n  [7, 7]\n");
    }
    // `main` is the default among several functions.
    let with_main = two.replace("@b", "@main");
    let ir = write(&dir, "main.fbir", with_main.as_bytes());
    let o = fbc(&["run", &ir]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.contains("[7, 7]"), "{}", o.stdout);
    let empty = write(&dir, "empty.fbir", b"module @m {\n}\n");
    let o = fbc(&["run", &empty]);
    assert_eq!(
        (o.code, o.stderr),
        (
            1,
            format!(
                "{empty}:2:1: error: the module has no function to run\n  |\n2 | }}\n  | ^ the \
                 module ends here\n"
            )
        )
    );
}

#[test]
fn unsupported_targets_and_check() {
    let dir = scratch("target");
    let ir = write(&dir, "mlp.fbir", MLP.as_bytes());
    // (`--target opencl` is covered by tests/opencl.rs.)
    let o = fbc(&["run", &ir, "--target", "vulkan", "--random-inputs", "1"]);
    assert_eq!(o.code, 2);
    assert_eq!(
        o.stderr,
        "fbc: error: --target vulkan is not yet supported by `fbc run`; supported now: cpu, cpu-jit, cpu-llvm, opencl\n"
    );
    let o = fbc(&["run", &ir, "--check", "--random-inputs", "1"]);
    assert_eq!(o.code, 2);
    assert!(o.stderr.starts_with("fbc: error: --check is not yet supported"), "{}", o.stderr);
    let o = fbc(&["run", &ir, "--random-inputs", "minus-one"]);
    assert_eq!(o.code, 2, "{}", o.stderr);
}

#[test]
fn run_time_errors_point_at_the_op() {
    let dir = scratch("kernel-error");
    let src = "func.func @f(%t: tensor<3x2xf32>, %ids: tensor<2xi32>) -> tensor<2x2xf32> {\n  %0 = tensor.embedding %t, %ids\n  func.return %0 : tensor<2x2xf32>\n}\n";
    let ir = write(&dir, "e.fbir", src.as_bytes());
    let ids: Vec<u8> = [0i32, 3].iter().flat_map(|x| x.to_le_bytes()).collect();
    let inputs = write(
        &dir,
        "in.safetensors",
        &safetensors_file(&[
            ("t", Dtype::F32, vec![3, 2], f32_bytes(&[0.0; 6])),
            ("ids", Dtype::I32, vec![2], ids),
        ]),
    );
    let o = fbc(&["run", &ir, "--inputs", &inputs]);
    assert_eq!(o.code, 1);
    assert!(
        o.stderr.starts_with(&format!(
            "{ir}:2:3: error: `tensor.embedding` failed: embedding: id 3 at index [1] is out of \
             range 0..3"
        )),
        "{}",
        o.stderr
    );
    // Random ids respect the table: the same function runs with --random-inputs.
    let o = fbc(&["run", &ir, "--random-inputs", "5"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
}

/// The LoRA attention block of the examples (hidden 2048, 4 frozen 2048² projections): `@loss`
/// runs on random inputs and gives a finite, positive mean squared error.
#[test]
fn lora_example_loss_runs() {
    let dir = scratch("lora");
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/lora_attention.fbir");
    let out = path(&dir, "loss.safetensors");
    let start = std::time::Instant::now();
    let o = fbc(&["run", example, "--entry", "loss", "--random-inputs", "3", "--outputs", &out]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(start.elapsed().as_secs() < 30, "took {:?}", start.elapsed());
    let bytes = std::fs::read(&out).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let loss = st.tensor("result0").unwrap();
    assert_eq!(loss.shape(), &[] as &[usize]);
    let v = f32_values(loss.data())[0];
    assert!(v.is_finite() && v > 0.0, "loss {v}");
}

/// `y = x · w + b` with `w` a dense list and `b` MLIR's hex form (little-endian f32: 1, -2):
/// both results worked out by hand.
const DENSE: &str = "\
func.func @f(%x: tensor<2x3xf32>) -> tensor<2x2xf32> {
  %w = tensor.constant {value = dense<[[1, 0], [0, 1], [1, 1]]>} : () -> tensor<3x2xf32>
  %b = tensor.constant {value = dense<\"0x0000803F000000C0\">} : () -> tensor<2xf32>
  %0 = tensor.matmul %x, %w
  %1 = tensor.add %0, %b
  func.return %1 : tensor<2x2xf32>
}
";

/// Dense constants are host tensors that the lowered function uploads like arguments: every
/// target computes with their elements, at -O0 and at -O3 for a GPU profile (R-Tile layouts).
#[test]
fn dense_constants_run_on_every_target() {
    let dir = scratch("dense");
    let ir = write(&dir, "dense.fbir", DENSE.as_bytes());
    let x = safetensors_file(&[(
        "x",
        Dtype::F32,
        vec![2, 3],
        f32_bytes(&[1.0, 2.0, 3.0, -4.0, -5.0, -6.0]),
    )]);
    let inputs = write(&dir, "in.safetensors", &x);
    #[allow(unused_mut)]
    let mut targets = vec!["cpu", "cpu-jit"];
    #[cfg(feature = "opencl")]
    if common::have_device() {
        targets.push("opencl");
    }
    for target in targets {
        for opt in ["-O0", "-O3"] {
            let out = path(&dir, &format!("out-{target}{opt}.safetensors"));
            let o = fbc(&[
                "run",
                &ir,
                "--inputs",
                &inputs,
                "--outputs",
                &out,
                "--target",
                target,
                opt,
                "--profile",
                "mali",
            ]);
            assert_eq!(o.code, 0, "{target} {opt}: {}", o.stderr);
            let bytes = std::fs::read(&out).unwrap();
            let st = SafeTensors::deserialize(&bytes).unwrap();
            // [1+3+1, 2+3-2], [-4-6+1, -5-6-2]
            assert_eq!(
                f32_values(st.tensor("result0").unwrap().data()),
                [5.0, 3.0, -9.0, -13.0],
                "{target} {opt}"
            );
        }
    }
    // The lowered function makes each constant on the host and uploads it.
    let o = fbc(&[&ir, "-O3", "--target", "mali", "--emit", "memory"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    for line in [
        "%w = tensor.constant {value = dense<[1.0, 0.0, 0.0, 1.0, 1.0, 1.0]>} : () -> tensor<3x2xf32>",
        "%b = tensor.constant {value = dense<\"0x0000803F000000C0\">} : () -> tensor<2xf32>",
    ] {
        assert!(o.stdout.lines().any(|l| l.trim() == line), "{line}\n{}", o.stdout);
    }
    assert!(o.stdout.contains("memory.upload %w"), "{}", o.stdout);
}

/// `--emit opencl -o DIR` writes the constants beside the kernels, named in the manifest, and
/// replaces such a directory on the next run.
#[test]
fn opencl_output_carries_the_constants() {
    let dir = scratch("dense-emit");
    let ir = write(&dir, "dense.fbir", DENSE.as_bytes());
    let out = dir.join("cl");
    for _ in 0..2 {
        let o = fbc(&[&ir, "-O3", "--target", "mali", "--emit", "opencl", "-o", &path(&out, "")]);
        assert_eq!(o.code, 0, "{}", o.stderr);
    }
    let bytes = std::fs::read(out.join("dense.constants.safetensors")).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let mut names = st.names();
    names.sort();
    assert_eq!(names, ["f/b", "f/w"]);
    assert_eq!(f32_values(st.tensor("f/w").unwrap().data()), [1.0, 0.0, 0.0, 1.0, 1.0, 1.0]);
    assert_eq!(st.tensor("f/b").unwrap().shape(), [2]);
    assert_eq!(f32_values(st.tensor("f/b").unwrap().data()), [1.0, -2.0]);
    let manifest = std::fs::read_to_string(out.join("dense.manifest.json")).unwrap();
    let m = fbc_codegen::opencl::Manifest::from_json(&manifest).unwrap();
    let f = m.function("f").unwrap();
    let names: Vec<&str> = f.constants.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["w", "b"]);
}

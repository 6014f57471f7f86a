//! Helpers shared by the command-line tests: run the built `fbc`, scratch directories.

#![allow(dead_code)] // Each test binary uses its own subset.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use fbc_ir::pass::Statistics;
use fbc_ir::{Module, PassContext, PassManager, SourceFile};

pub struct Out {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Runs the `fbc` binary built for these tests.
pub fn fbc(args: &[&str]) -> Out {
    fbc_env(args, &[])
}

/// Runs the `fbc` binary built for these tests with environment variables `env` set.
pub fn fbc_env(args: &[&str], env: &[(&str, &Path)]) -> Out {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fbc"));
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("fbc runs");
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A fresh directory for one test (per process, so parallel test binaries never share one).
pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("fbc-test-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// Writes `bytes` to `dir/name` and returns the path as text.
pub fn write(dir: &Path, name: &str, bytes: &[u8]) -> String {
    let p = dir.join(name);
    std::fs::write(&p, bytes).expect("write");
    p.to_string_lossy().into_owned()
}

/// The files of the op corpus (`tests/ir/ops/*.fbir`), sorted.
pub fn op_corpus() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/ir/ops");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/ir/ops")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "fbir"))
        .collect();
    files.sort();
    assert!(files.len() >= 6, "the op corpus is missing: {files:?}");
    files
}

/// Generates one Llama layer's training step (`fbc gen llama3.2-1b --layers 1 --seq 8 --vocab 64
/// --lora-rank 2 --training`: its LoRA gradients and the loss, every forward and backward op kind
/// of a decoder) into `llama.fbir` of scratch directory `name`, and returns the path.
pub fn training_step(name: &str) -> PathBuf {
    let path = scratch(name).join("llama.fbir");
    let o = fbc(&[
        "gen",
        "llama3.2-1b",
        "--layers",
        "1",
        "--seq",
        "8",
        "--vocab",
        "64",
        "--lora-rank",
        "2",
        "--training",
        "-o",
        path.to_str().unwrap_or_default(),
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    path
}

// ----- f16 images (`half_images.rs`, `opencl.rs`) -----

/// One function `@main` with the given arguments, body and result.
pub fn main_module(args: &str, body: &str, ret: &str) -> String {
    format!("func.func @main({args}) -> {ret} {{\n{body}\n  func.return %r : {ret}\n}}\n")
}

/// The cases of the f16 image tests: a matmul, a small attention (matmul, scale, softmax, matmul) and a matmul with an
/// elementwise chain (bias, gelu, residual) fused as its epilogue.
pub fn half_image_cases() -> Vec<(&'static str, String)> {
    // Sizes where -O3 for the generic profile chooses R-Tiles in images.
    vec![
        (
            "matmul",
            main_module(
                "%a: tensor<64x64xf32>, %b: tensor<64x64xf32>",
                "  %r = tensor.matmul %a, %b : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>",
                "tensor<64x64xf32>",
            ),
        ),
        (
            "attention",
            main_module(
                "%q: tensor<2x64x64xf32>, %k: tensor<2x64x64xf32>, %v: tensor<2x64x64xf32>",
                "  %s = tensor.matmul %q, %k {transpose_b = true} : (tensor<2x64x64xf32>, tensor<2x64x64xf32>) -> tensor<2x64x64xf32>\n  \
                 %s1 = tensor.scale %s {factor = 0.125} : (tensor<2x64x64xf32>) -> tensor<2x64x64xf32>\n  \
                 %p = tensor.softmax %s1 {axis = -1} : (tensor<2x64x64xf32>) -> tensor<2x64x64xf32>\n  \
                 %r = tensor.matmul %p, %v : (tensor<2x64x64xf32>, tensor<2x64x64xf32>) -> tensor<2x64x64xf32>",
                "tensor<2x64x64xf32>",
            ),
        ),
        (
            "elementwise_chain",
            main_module(
                "%x: tensor<64x64xf32>, %w: tensor<64x64xf32>, %b: tensor<64xf32>, %y: tensor<64x64xf32>",
                "  %m = tensor.matmul %x, %w : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>\n  \
                 %mb = tensor.add %m, %b : (tensor<64x64xf32>, tensor<64xf32>) -> tensor<64x64xf32>\n  \
                 %g = tensor.gelu %mb : (tensor<64x64xf32>) -> tensor<64x64xf32>\n  \
                 %r = tensor.add %g, %y : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>",
                "tensor<64x64xf32>",
            ),
        ),
    ]
}

pub fn parse(text: &str) -> Module {
    let file = Arc::new(SourceFile::new("t.fbir", text));
    fbc_ir::parse_module(&file, &fbc_dialects::registry()).unwrap_or_else(|d| panic!("{d:?}"))
}

/// `text` at -O3, lowered for `profile` (`half`: f16 images); the pipeline's error as text.
pub fn lower_o3(
    text: &str,
    half: bool,
    profile: &fbc_target::HardwareProfile,
) -> Result<(Module, Statistics), String> {
    lower_at(text, 3, half, profile, "auto")
}

/// `text` at `-O3` (f32 images) with lower-to-memory's `split-k` option `split`.
pub fn lower_o3_with(
    text: &str,
    profile: &fbc_target::HardwareProfile,
    split: &str,
) -> Result<Module, String> {
    lower_at(text, 3, false, profile, split).map(|(m, _)| m)
}

/// `text` at `-O0` with lower-to-memory's `split-k` option `split`.
pub fn lower_o0_with(
    text: &str,
    profile: &fbc_target::HardwareProfile,
    split: &str,
) -> Result<Module, String> {
    lower_at(text, 0, false, profile, split).map(|(m, _)| m)
}

/// `text` at `-O0`, lowered for `profile` (buffers only); the pipeline's error as text.
pub fn lower_o0(text: &str, profile: &fbc_target::HardwareProfile) -> Result<Module, String> {
    lower_at(text, 0, false, profile, "auto").map(|(m, _)| m)
}

/// `text` at `-O1` (its layouts as written), lowered for `profile`.
pub fn lower_o1(text: &str, profile: &fbc_target::HardwareProfile) -> Result<Module, String> {
    lower_at(text, 1, false, profile, "auto").map(|(m, _)| m)
}

/// `text` at `-O level`, lowered for `profile` (`half`: f16 images; `split`: the `split-k`
/// option).
fn lower_at(
    text: &str,
    level: u8,
    half: bool,
    profile: &fbc_target::HardwareProfile,
    split: &str,
) -> Result<(Module, Statistics), String> {
    let reg = fbc_dialects::registry();
    let mut m = parse(text);
    // The lowering takes the profile from the pass context (it need not be a builtin one).
    let pipeline = [
        fbc_transforms::pipeline_for_level(level).to_string(),
        format!("lower-to-memory{{half-images={half} split-k={split}}},plan-memory"),
    ]
    .iter()
    .filter(|p| !p.is_empty())
    .cloned()
    .collect::<Vec<_>>()
    .join(",");
    let steps = fbc_transforms::default_registry().parse_pipeline(&pipeline).expect("pipeline");
    let mut pm = PassManager::new(steps);
    pm.instrumentation.verify_each = true;
    let mut cx = PassContext::new(&reg);
    cx.target = profile;
    pm.run(&mut m, &mut cx, &mut |_| {}).map_err(|d| format!("{d:?}"))?;
    Ok((m, cx.stats))
}

/// Writes the lowered module `m` as OpenCL C with `kernels` and runs its `@main` on the device
/// with `inputs`: the output, and the run's results or the error's text.
#[cfg(feature = "opencl")]
pub fn run_main_on_device(
    m: &Module,
    kernels: fbc_codegen::opencl::KernelOptions,
    inputs: &[fbc_runtime::interp::Value],
) -> (fbc_codegen::opencl::Output, Result<fbc_runtime::device::opencl::RunOutput, String>) {
    let opts = fbc_codegen::opencl::Options { kernels, ..Default::default() };
    let out = fbc_codegen::opencl::Writer::new(opts).write(m).expect("OpenCL C");
    let run = fbc_runtime::device::opencl::run(
        &out.source,
        &out.manifest,
        "main",
        inputs,
        &fbc_runtime::device::opencl::RunOptions::default(),
    )
    .map_err(|e| e.to_string());
    (out, run)
}

/// Whether an OpenCL device is there; panics under CI when none is (no silent skips), and
/// prints a notice otherwise.
#[cfg(feature = "opencl")]
pub fn have_device() -> bool {
    if !fbc_runtime::device::opencl::devices().is_empty() {
        return true;
    }
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("CI=true but no OpenCL device was found: install pocl-opencl-icd (see .ci/run)");
    }
    eprintln!("notice: no OpenCL device; skipping (this would fail with CI=true)");
    false
}

/// The printed inference module (`fbc gen MODEL --inference`) of `model` with one layer,
/// `seq` prompt tokens, a vocabulary of `vocab` and `max_seq` cache positions.
pub fn inference_module(model: &str, seq: u64, vocab: u64, max_seq: u64) -> String {
    inference_module_layers(model, 1, seq, vocab, max_seq)
}

/// [`inference_module`] with `layers` layers.
pub fn inference_module_layers(
    model: &str,
    layers: u64,
    seq: u64,
    vocab: u64,
    max_seq: u64,
) -> String {
    let opts = fbc_models::Options {
        layers: Some(layers),
        seq: Some(seq),
        vocab: Some(vocab),
        inference: true,
        max_seq: Some(max_seq),
        ..Default::default()
    };
    let m = fbc_models::build(model, &opts).unwrap_or_else(|e| panic!("{model}: {e}"));
    fbc_ir::print_module(&m)
}

// ----- checks against reference outputs (`onnx.rs`, `hf.rs`) -----

/// Tensor `name` (F32) of the safetensors file at `path`: its shape and values.
pub fn f32_tensor(path: &Path, name: &str) -> (Vec<usize>, Vec<f32>) {
    let bytes = std::fs::read(path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let t = st.tensor(name).unwrap_or_else(|e| panic!("{}: {name}: {e}", path.display()));
    let v =
        t.data().chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    (t.shape().to_vec(), v)
}

/// Largest |got − want| over the largest |want|.
pub fn rel_err(got: &[f32], want: &[f32]) -> f64 {
    assert_eq!(got.len(), want.len());
    let scale = want.iter().fold(0f64, |m, &w| m.max(f64::from(w).abs()));
    let err = got.iter().zip(want).fold(0f64, |m, (&g, &w)| m.max(f64::from(g - w).abs()));
    err / scale
}

/// Whether an OpenCL device is there, in an fbc built with the `opencl` feature ([`have_device`]:
/// under `CI=true` a missing device fails); `false` without the feature.
pub fn opencl_device() -> bool {
    #[cfg(feature = "opencl")]
    return have_device();
    #[cfg(not(feature = "opencl"))]
    return false;
}

/// A safetensors file of `tensors` (name, dtype, shape, raw bytes) at `dir/name`.
pub fn safetensors_file(
    dir: &Path,
    name: &str,
    tensors: &[(&str, safetensors::Dtype, Vec<usize>, Vec<u8>)],
) -> String {
    use safetensors::tensor::TensorView;
    let views: std::collections::HashMap<String, TensorView<'_>> = tensors
        .iter()
        .map(|(n, d, s, b)| ((*n).to_string(), TensorView::new(*d, s.clone(), b).unwrap()))
        .collect();
    let bytes = safetensors::serialize(&views, None).unwrap();
    write(dir, name, &bytes)
}

/// `n` deterministic f32 values in [-scale, scale], as little-endian bytes.
pub fn pseudo(n: usize, seed: u64, scale: f32) -> Vec<u8> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .flat_map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (((s >> 33) as f32 / (1u64 << 31) as f32 * 2.0 - 1.0) * scale).to_le_bytes()
        })
        .collect()
}

/// The f32 values of `result0` in the outputs file `path`.
pub fn logits(path: &Path) -> Vec<f32> {
    let bytes = std::fs::read(path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let v = st.tensor("result0").unwrap();
    v.data().chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
}

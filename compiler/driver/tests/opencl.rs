//! Generated OpenCL kernels run on a real device (PoCL in CI) and compared with the reference
//! interpreter through `fbc run --target opencl --check`, whose bound is
//! `|device - reference| <= 1e-5 + 1e-4·(|reference| + max|reference|)` per element.
//!
//! No silent skips: without an OpenCL device these tests fail when `CI=true` and only print a
//! notice and pass when `CI` is unset (a developer machine without PoCL).
#![cfg(feature = "opencl")]

use std::path::PathBuf;

use clap::Parser as _;
use fbc::{Cli, Driver};

/// Whether a device is there; panics under CI when none is.
fn have_device() -> bool {
    if !fbc_runtime::opencl::devices().is_empty() {
        return true;
    }
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("CI=true but no OpenCL device was found: install pocl-opencl-icd (see .ci/run)");
    }
    eprintln!("notice: no OpenCL device; skipping (this would fail with CI=true)");
    false
}

fn write_tmp(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("fbc-opencl-tests-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write");
    p
}

/// `fbc run FILE --target opencl -O LEVEL --random-inputs 7 --check [extra]`.
fn check(path: &std::path::Path, level: u8, extra: &[&str]) -> Result<(), String> {
    let mut args = vec![
        "fbc".to_string(),
        "run".into(),
        path.display().to_string(),
        "--target".into(),
        "opencl".into(),
        format!("-O{level}"),
        "--random-inputs".into(),
        "7".into(),
        "--check".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let cli = Cli::try_parse_from(&args).map_err(|e| e.to_string())?;
    Driver::default().run(&cli).map_err(|e| format!("{e:?}"))
}

/// One function `@main` with the given arguments, body and result.
fn module(args: &str, body: &str, ret: &str) -> String {
    format!("func.func @main({args}) -> {ret} {{\n{body}\n  func.return %r : {ret}\n}}\n")
}

fn run_cases(cases: &[(&str, String)]) {
    if !have_device() {
        return;
    }
    let mut failed = Vec::new();
    for (name, text) in cases {
        let p = write_tmp(&format!("{name}.fbir"), text);
        for level in [0, 3] {
            if let Err(e) = check(&p, level, &[]) {
                failed.push(format!("{name} -O{level}: {e}"));
            }
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

const X: &str = "%x: tensor<3x5x7xf32>";

fn unary(op: &str, attrs: &str) -> String {
    module(X, &format!("  %r = tensor.{op} %x {attrs}"), "tensor<3x5x7xf32>")
}

#[test]
fn elementwise_ops() {
    let mut cases = Vec::new();
    for op in ["add", "sub", "mul", "div", "max", "min", "ge"] {
        let text = module(
            "%x: tensor<3x5x7xf32>, %y: tensor<5x1xf32>",
            &format!("  %r = tensor.{op} %x, %y"),
            "tensor<3x5x7xf32>",
        );
        cases.push((op, text));
    }
    for op in ["neg", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "silu", "gelu"] {
        cases.push((op, unary(op, "")));
    }
    cases.push(("gelu_tanh", unary("gelu", "{approximate = \"tanh\"}")));
    cases.push(("scale", unary("scale", "{factor = -0.375}")));
    run_cases(&cases);
}

#[test]
fn matmul_reductions_and_norms() {
    let cases = vec![
        (
            "matmul",
            module(
                "%a: tensor<2x3x17x19xf32>, %b: tensor<19x23xf32>",
                "  %r = tensor.matmul %a, %b",
                "tensor<2x3x17x23xf32>",
            ),
        ),
        (
            "matmul_t",
            module(
                "%a: tensor<3x19x17xf32>, %b: tensor<1x23x19xf32>",
                "  %r = tensor.matmul %a, %b {transpose_a = true, transpose_b = true}",
                "tensor<3x17x23xf32>",
            ),
        ),
        (
            "matmul_k0_big",
            module(
                "%a: tensor<40x70xf32>, %b: tensor<70x33xf32>",
                "  %r = tensor.matmul %a, %b",
                "tensor<40x33xf32>",
            ),
        ),
        (
            "reduce_sum",
            unary_to("reduce_sum", "{axes = [0, 2], keepdim = true}", "tensor<1x5x1xf32>"),
        ),
        ("reduce_max", unary_to("reduce_max", "{axes = [1]}", "tensor<3x7xf32>")),
        ("reduce_mean", unary_to("reduce_mean", "{axes = [-1]}", "tensor<3x5xf32>")),
        ("softmax", unary("softmax", "{axis = 1}")),
        (
            "layernorm",
            module(
                "%x: tensor<3x5x7xf32>, %g: tensor<5xf32>, %b: tensor<5xf32>",
                "  %r = tensor.layernorm %x, %g, %b {axis = 1, eps = 1.0e-3}",
                "tensor<3x5x7xf32>",
            ),
        ),
        (
            "rmsnorm",
            module(
                "%x: tensor<3x5x7xf32>, %g: tensor<7xf32>",
                "  %r = tensor.rmsnorm %x, %g",
                "tensor<3x5x7xf32>",
            ),
        ),
    ];
    run_cases(&cases);
}

fn unary_to(op: &str, attrs: &str, ret: &str) -> String {
    module(X, &format!("  %r = tensor.{op} %x {attrs}"), ret)
}

#[test]
fn data_movement_and_remap() {
    let cases = vec![
        ("transpose", unary_to("transpose", "{perm = [2, 0, 1]}", "tensor<7x3x5xf32>")),
        ("reshape", module(X, "  %t = tensor.reshape %x {shape = [15, 7]}\n  %r = tensor.neg %t", "tensor<15x7xf32>")),
        ("broadcast", module("%x: tensor<5x1xf32>", "  %r = tensor.broadcast %x {shape = [3, 5, 4]}", "tensor<3x5x4xf32>")),
        ("slice", unary_to("slice", "{start = [1, 0, 2], end = [3, 4, 7]}", "tensor<2x4x5xf32>")),
        ("concat", module("%x: tensor<3x5x7xf32>, %y: tensor<3x2x7xf32>", "  %r = tensor.concat %x, %y, %x {axis = 1}", "tensor<3x12x7xf32>")),
        ("remap", module("%x: tensor<6x4xf32>", "  %r = layout.remap %x {map = (d0, d1, d2) -> (d0 * 2 + d2 floordiv 4, d2 mod 4), shape = [3, 1, 8]}", "tensor<3x1x8xf32>")),
        ("assign", module("%x: tensor<6x4xf32>", "  %t = layout.assign %x {layout = #layout.linear}\n  %r = tensor.exp %t", "tensor<6x4xf32>")),
    ];
    run_cases(&cases);
}

/// A small multi-head attention block; at -O3 `index-elim` turns its reshape/transpose chains
/// into `layout.remap`s, so the generated remap kernels are exercised.
const ATTENTION: &str = r#"module @attn {
  func.func @mha(%x: tensor<1x8x16xf32>, %wq: tensor<16x16xf32>, %wk: tensor<16x16xf32>, %wv: tensor<16x16xf32>, %wo: tensor<16x16xf32>) -> tensor<1x8x16xf32> {
    %q = tensor.matmul %x, %wq
    %q1 = tensor.reshape %q {shape = [1, 8, 2, 8]}
    %q2 = tensor.transpose %q1 {perm = [0, 2, 1, 3]}
    %k = tensor.matmul %x, %wk
    %k1 = tensor.reshape %k {shape = [1, 8, 2, 8]}
    %k2 = tensor.transpose %k1 {perm = [0, 2, 1, 3]}
    %v = tensor.matmul %x, %wv
    %v1 = tensor.reshape %v {shape = [1, 8, 2, 8]}
    %v2 = tensor.transpose %v1 {perm = [0, 2, 1, 3]}
    %s = tensor.matmul %q2, %k2 {transpose_b = true}
    %s1 = tensor.scale %s {factor = 0.35355339}
    %p = tensor.softmax %s1 {axis = -1}
    %o = tensor.matmul %p, %v2
    %o1 = tensor.transpose %o {perm = [0, 2, 1, 3]}
    %o2 = tensor.reshape %o1 {shape = [1, 8, 16]}
    %y = tensor.matmul %o2, %wo
    func.return %y : tensor<1x8x16xf32>
  }
}
"#;

#[test]
fn attention_at_o0_and_o3() {
    if !have_device() {
        return;
    }
    let p = write_tmp("attn.fbir", ATTENTION);
    for level in [0, 3] {
        check(&p, level, &[]).unwrap_or_else(|e| panic!("-O{level}: {e}"));
    }
    // The -O3 module really contains remaps (else this test would not cover them).
    let out = p.with_extension("cl.d");
    let cli = Cli::try_parse_from([
        "fbc",
        p.to_str().unwrap_or_default(),
        "-O3",
        "--emit",
        "opencl",
        "-o",
        out.to_str().unwrap_or_default(),
    ])
    .expect("cli");
    Driver::default().run(&cli).expect("emit");
    let cl = std::fs::read_to_string(out.join("attn.cl")).expect("attn.cl written");
    assert!(cl.contains("// layout.remap at"), "no remap kernel at -O3:\n{cl}");
    assert!(out.join("attn.manifest.json").exists());
}

#[test]
fn a_missing_device_is_an_error() {
    // (That `--check` rejects wrong results is unit-tested on `compare` in run_cmd/opencl.rs.)
    if !have_device() {
        return;
    }
    let p = write_tmp("neg.fbir", &unary("neg", ""));
    check(&p, 0, &[]).expect("neg passes");
    let e = check(&p, 0, &["--device", "99"]).expect_err("device 99 does not exist");
    assert!(e.contains("device 99"), "{e}");
}

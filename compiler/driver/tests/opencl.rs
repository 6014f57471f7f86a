//! Generated OpenCL kernels run on a real device (PoCL in CI) and compared with the reference
//! interpreter through `fbc run --target opencl --check`, whose bound is
//! `|device - reference| <= 1e-5 + 1e-4·(|reference| + max|reference|)` per element: every op at
//! -O0 and at -O3 with each layout strategy, attention, generated training steps; the OpenCL C
//! compiles as CL1.2 and CL3.0; images larger than the device allows are refused clearly;
//! `--substitute-kernel`, the program cache, `fbc bench --json` and `--timeline`.
//!
//! No silent skips: without an OpenCL device these tests fail when `CI=true` and only print a
//! notice and pass when `CI` is unset (a developer machine without PoCL).
#![cfg(feature = "opencl")]

use std::path::PathBuf;

use clap::Parser as _;
use fbc::{Cli, Driver};

mod common;

use common::have_device;

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

/// The compilations every case runs under: -O0, and -O3 with each layout strategy.
const CONFIGS: &[(u8, &str)] = &[(0, "fblayout"), (3, "fblayout"), (3, "reuse"), (3, "convert")];

fn run_cases(cases: &[(&str, String)]) {
    if !have_device() {
        return;
    }
    let mut failed = Vec::new();
    for (name, text) in cases {
        let p = write_tmp(&format!("{name}.fbir"), text);
        for &(level, strategy) in CONFIGS {
            if let Err(e) = check(&p, level, &["--layout-strategy", strategy]) {
                failed.push(format!("{name} -O{level} {strategy}: {e}"));
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

/// Reductions with few outputs and at least 128 values each run a work-group per output (a tree
/// in local memory combines the work-items' partial results): reductions along one and along
/// several dimensions, lengths that are and are not multiples of the group, into buffers and
/// (at -O3) R-Tile images, each matching the interpreter.
#[test]
fn long_reductions_run_a_work_group_per_output() {
    let r = "%x: tensor<6x300xf32>";
    let cases = vec![
        ("long_softmax", module(r, "  %r = tensor.softmax %x {axis = -1}", "tensor<6x300xf32>")),
        ("long_reduce_max", module(r, "  %r = tensor.reduce_max %x {axes = [1]}", "tensor<6xf32>")),
        (
            "long_reduce_sum_two_axes",
            module(
                "%x: tensor<9x3x40xf32>",
                "  %r = tensor.reduce_sum %x {axes = [0, 2], keepdim = true}",
                "tensor<1x3x1xf32>",
            ),
        ),
        (
            "long_rmsnorm",
            module(
                "%x: tensor<4x257xf32>, %g: tensor<257xf32>",
                "  %r = tensor.rmsnorm %x, %g",
                "tensor<4x257xf32>",
            ),
        ),
        (
            "long_layernorm",
            module(
                "%x: tensor<5x128xf32>, %g: tensor<128xf32>, %b: tensor<128xf32>",
                "  %r = tensor.layernorm %x, %g, %b {axis = 1, eps = 1.0e-3}",
                "tensor<5x128xf32>",
            ),
        ),
    ];
    if have_device() {
        let p = write_tmp("long_reduce_max_src.fbir", &cases[1].1);
        let src = emitted(&p, "long_reduce_max_src");
        assert!(src.contains("One work-group of 256 per output"), "{src}");
        assert!(src.contains("barrier(CLK_LOCAL_MEM_FENCE)"), "{src}");
        // Softmax is a row kernel: a work-group per row as well.
        let p = write_tmp("long_softmax_src.fbir", &cases[0].1);
        let src = emitted(&p, "long_softmax_src");
        assert!(src.contains("A row kernel: one work-group of 256 per row"), "{src}");
    }
    run_cases(&cases);
}

/// Row kernels on the device against the reference executor (the interpreter on the same
/// lowered module): a work-group per row (rows of at least 128 values) and a work-item per row,
/// rows read a value or a texel at a time, buffer and whole-texel image outputs, every row-wise
/// op. The tree of a work-group adds in another order than the reference: within `--check`'s
/// bound of the row's magnitude.
#[test]
fn row_kernels_match_the_reference_executor() {
    if !have_device() {
        return;
    }
    let rtile = "#layout.rtile<tile = [4, 8], horizontal = 1>";
    let softmax = |r: u64, c: u64, layout: &str| {
        let t = format!("tensor<{r}x{c}xf32>");
        module(
            &format!("%x: {t}"),
            &format!("  %r = tensor.softmax %x {{axis = -1{layout}}} : ({t}) -> {t}"),
            &t,
        )
    };
    let rows = |op: &str| {
        let t = "tensor<6x300xf32>";
        let v = "tensor<300xf32>";
        let body = match op {
            "layernorm_grad" => format!("  %r, %dg, %db = tensor.layernorm_grad %x, %g, %dy : ({t}, {v}, {t}) -> ({t}, {v}, {v})"),
            "rmsnorm_grad" => format!("  %r, %dg = tensor.rmsnorm_grad %x, %g, %dy : ({t}, {v}, {t}) -> ({t}, {v})"),
            _ => format!("  %r = tensor.softmax_grad %x, %dy {{axis = -1}} : ({t}, {t}) -> {t}"),
        };
        module(&format!("%x: {t}, %g: {v}, %dy: {t}"), &body, t)
    };
    let ce = module(
        "%x: tensor<5x700xf32>, %l: tensor<5xi32>, %dl: tensor<f32>",
        "  %r = tensor.cross_entropy_grad %x, %l, %dl : (tensor<5x700xf32>, tensor<5xi32>, tensor<f32>) -> tensor<5x700xf32>",
        "tensor<5x700xf32>",
    );
    // (case, text, what its kernel's comment says)
    let cases = [
        ("row_group_values", softmax(6, 300, ""), "one work-group of 256 per row. Each statistic: every work-item combines every 256th value"),
        ("row_items_values", softmax(40, 20, ""), "one work-item per row, a value a step"),
        ("row_items_texels", softmax(8, 16, &format!(", fbc.layout = {rtile}")), "one work-item per row, a texel (four values) a step"),
        ("row_group_texels", softmax(4, 512, &format!(", fbc.layout = {rtile}")), "one work-group of 128 per row. Each statistic: every work-item combines every 128th texel (four values)"),
        ("row_layernorm_grad", rows("layernorm_grad"), "one work-group of 256 per row"),
        ("row_rmsnorm_grad", rows("rmsnorm_grad"), "one work-group of 256 per row"),
        ("row_softmax_grad", rows("softmax_grad"), "one work-group of 256 per row"),
        ("row_cross_entropy_grad", ce, "one work-group of 256 per row"),
    ];
    let mali = fbc_target::builtin("mali").expect("mali");
    for (name, text, form) in cases {
        let original = common::parse(&text);
        let inputs = fbc_runtime::interp::random_inputs(&original, "main", 5).expect("inputs");
        let lowered = common::lower_o1(&text, &mali).expect("lowers");
        let f = lowered.find_func("main").expect("main");
        let reference = fbc_runtime::interp::Interpreter::new(&lowered)
            .run_id(f, inputs.clone())
            .expect("reference executor");
        let kernels = fbc_codegen::opencl::KernelOptions::for_target(&mali);
        let (out, run) = write_and_run_main(&lowered, kernels, &inputs, name);
        assert!(
            out.source.contains(&format!("// A row kernel: {form}")),
            "{name}:\n{}",
            out.source
        );
        let r = reference[0].as_f32().expect("f32").data().to_vec();
        let d = run.results[0].as_f32().expect("f32").data().to_vec();
        assert_eq!(r.len(), d.len(), "{name}");
        let scale = r.iter().fold(0f32, |m, v| m.max(v.abs()));
        for (i, (a, b)) in r.iter().zip(&d).enumerate() {
            assert!(
                (a - b).abs() <= 1e-5 + 1e-4 * (a.abs() + scale),
                "{name}[{i}]: {a} against {b}"
            );
        }
    }
}

/// Reductions with few outputs whose reads move along the outputs (column sums: the reduction
/// is strided) and at least 128 values each run 32 outputs per work-group with 8 work-items on
/// each and a tree: output counts and reduction lengths that are not multiples of 32 and 8, one
/// and two reduced axes, `max`, a mean's epilogue and a skinny product's split-K sum (256
/// partials), each matching the interpreter.
#[test]
fn column_reductions_run_thirty_two_outputs_per_work_group() {
    let cases = vec![
        (
            "column_sum",
            module(
                "%x: tensor<300x45xf32>",
                "  %r = tensor.reduce_sum %x {axes = [0]}",
                "tensor<45xf32>",
            ),
        ),
        (
            "column_max",
            module(
                "%x: tensor<130x70xf32>",
                "  %r = tensor.reduce_max %x {axes = [0]}",
                "tensor<70xf32>",
            ),
        ),
        (
            "column_mean_two_axes",
            module(
                "%x: tensor<15x9x33xf32>",
                "  %r = tensor.reduce_mean %x {axes = [0, 1]}",
                "tensor<33xf32>",
            ),
        ),
        (
            "skinny_split_sum",
            module(
                "%x: tensor<40x8192xf32>, %a: tensor<8192x3xf32>",
                "  %r = tensor.matmul %x, %a",
                "tensor<40x3xf32>",
            ),
        ),
    ];
    if have_device() {
        let p = write_tmp("column_sum_src.fbir", &cases[0].1);
        let src = emitted(&p, "column_sum_src");
        assert!(src.contains("32 outputs per work-group, 8 work-items on each"), "{src}");
    }
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
    for &(level, strategy) in CONFIGS {
        check(&p, level, &["--layout-strategy", strategy])
            .unwrap_or_else(|e| panic!("-O{level} {strategy}: {e}"));
    }
}

/// The module's OpenCL C, written by `fbc FILE -O3 --target mali -o DIR` (OpenCL is the default
/// output for a GPU target).
fn emitted(p: &std::path::Path, name: &str) -> String {
    let out = p.with_extension("cl.d");
    let o = common::fbc(&[
        p.to_str().unwrap_or_default(),
        "-O3",
        "--target",
        "mali",
        "-o",
        out.to_str().unwrap_or_default(),
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(out.join(format!("{name}.manifest.json")).exists());
    std::fs::read_to_string(out.join(format!("{name}.cl"))).expect("the .cl is written")
}

#[test]
fn emitted_source_compiles_as_opencl_1_2_and_3_0() {
    use fbc_runtime::device::opencl::{run, Cache, RunOptions};
    use fbc_runtime::interp::Value;
    use fbc_runtime::reference::Tensor;
    if !have_device() {
        return;
    }
    let p = write_tmp("attn_std.fbir", ATTENTION);
    let src = emitted(&p, "attn");
    let manifest = std::fs::read_to_string(p.with_extension("cl.d").join("attn.manifest.json"))
        .expect("manifest");
    let manifest = fbc_codegen::opencl::Manifest::from_json(&manifest).expect("reads back");
    // -O3 for mali keeps tensors in R-Tile textures and uses the tiled contraction.
    assert!(src.contains("image2d_t"), "no texture at -O3:\n{src}");
    let f = manifest.function("mha").expect("@mha");
    let inputs: Vec<Value> = f
        .args
        .iter()
        .map(|a| {
            let shape: Vec<usize> = a.shape.iter().map(|&d| d as usize).collect();
            let n = shape.iter().product();
            Value::F32(Tensor::new(shape, vec![0.5; n]).expect("tensor"))
        })
        .collect();
    for std in ["-cl-std=CL1.2", "-cl-std=CL3.0"] {
        let opts =
            RunOptions { build_options: std.into(), cache: Cache::Off, ..RunOptions::default() };
        let r =
            run(&src, &manifest, "mha", &inputs, &opts).unwrap_or_else(|e| panic!("{std}: {e}"));
        assert_eq!(r.results.len(), 1);
    }
}

#[test]
fn generated_training_steps_match_the_interpreter() {
    if !have_device() {
        return;
    }
    // One Llama layer, its LoRA gradients and the loss: every forward and backward op kind of
    // a decoder (embedding, RMSNorm, RoPE, attention, SwiGLU, cross-entropy).
    let path = common::training_step("ocl-train");
    for &(level, strategy) in CONFIGS {
        check(&path, level, &["--layout-strategy", strategy, "--entry", "loss_grad"])
            .unwrap_or_else(|e| panic!("-O{level} {strategy}: {e}"));
    }
}

/// One buffer copied into an image of `width` texels and back.
fn image_module(width: u64) -> String {
    let n = width * 4;
    format!(
        r#"func.func @main(%x: tensor<{n}xf32>) -> tensor<{n}xf32> {{
  %b = memory.upload %x {{layout = #layout.linear}} : (tensor<{n}xf32>) -> !memory.buffer<{n}, f32>
  %i = memory.alloc : () -> !memory.image2d<[{width}, 1], f32>
  memory.launch %b, %i {{kernel = "to_image", source = "layout.convert", domain = [1, {width}, 4], iterators = ["parallel", "parallel", "parallel"], maps = [(d0, d1, d2) -> (d1 * 4 + d2), (d0, d1, d2) -> (d1, d0, d2)], body = "x0 * 2.0"}} : (!memory.buffer<{n}, f32>, !memory.image2d<[{width}, 1], f32>) -> ()
  %o = memory.alloc : () -> !memory.buffer<{n}, f32>
  memory.launch %i, %o {{kernel = "from_image", source = "layout.convert", domain = [{width}, 4], iterators = ["parallel", "parallel"], maps = [(d0, d1) -> (d0, 0, d1), (d0, d1) -> (d0 * 4 + d1)], body = "x0 + 1.0"}} : (!memory.image2d<[{width}, 1], f32>, !memory.buffer<{n}, f32>) -> ()
  %y = memory.download %o {{layout = #layout.linear}} : (!memory.buffer<{n}, f32>) -> tensor<{n}xf32>
  func.return %y : tensor<{n}xf32>
}}
"#
    )
}

#[test]
fn images_round_trip_and_too_large_images_are_refused() {
    if !have_device() {
        return;
    }
    // A lowered module runs as it is (no lowering), through an image and back: 2x + 1.
    let small = write_tmp("img_small.fbir", &image_module(5));
    let dir = common::scratch("ocl-img");
    let x: Vec<f32> = (0..20).map(|i| i as f32 * 0.25 - 2.0).collect();
    let inputs = common::write(&dir, "x.safetensors", &safetensors_f32("x", &x));
    let out = dir.join("y.safetensors");
    let o = common::fbc(&[
        "run",
        small.to_str().unwrap_or_default(),
        "--target",
        "opencl",
        "--inputs",
        &inputs,
        "--outputs",
        out.to_str().unwrap_or_default(),
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let y = read_safetensors_f32(&std::fs::read(&out).expect("outputs"), "result0");
    let want: Vec<f32> = x.iter().map(|v| v * 2.0 + 1.0).collect();
    assert_eq!(y, want);
    // 2^20 texels wide is beyond any device's image2d limit.
    let big = write_tmp("img_big.fbir", &image_module(1 << 20));
    let o = common::fbc(&[
        "run",
        big.to_str().unwrap_or_default(),
        "--target",
        "opencl",
        "--random-inputs",
        "3",
    ]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(
        o.stderr.contains("image `i` is 1048576 x 1 texels, larger than the device's maximum"),
        "{}",
        o.stderr
    );
}

/// `C = A·B` (32×24 by 24×32) written into an image (texel `(n / 4, m)`, channel `n mod 4`) by
/// the tiled contraction's texel store, then copied to a buffer.
const MATMUL_TO_IMAGE: &str = r#"func.func @main(%a: tensor<768xf32>, %b: tensor<768xf32>) -> tensor<1024xf32> {
  %ma = memory.upload %a {layout = #layout.linear} : (tensor<768xf32>) -> !memory.buffer<768, f32>
  %mb = memory.upload %b {layout = #layout.linear} : (tensor<768xf32>) -> !memory.buffer<768, f32>
  %i = memory.alloc : () -> !memory.image2d<[8, 32], f32>
  memory.launch %ma, %mb, %i {kernel = "mm", source = "tensor.matmul", domain = [32, 8, 4, 24], iterators = ["parallel", "parallel", "parallel", "reduction"], maps = [(d0, d1, d2, d3) -> (d0 * 24 + d3), (d0, d1, d2, d3) -> (d3 * 32 + d1 * 4 + d2), (d0, d1, d2, d3) -> (d1, d0, d2)], body = "x0 * x1", combine = "add", epilogue = "acc + 0.5"} : (!memory.buffer<768, f32>, !memory.buffer<768, f32>, !memory.image2d<[8, 32], f32>) -> ()
  %o = memory.alloc : () -> !memory.buffer<1024, f32>
  memory.launch %i, %o {kernel = "back", source = "layout.convert", domain = [32, 32], iterators = ["parallel", "parallel"], maps = [(d0, d1) -> (d1 floordiv 4, d0, d1 mod 4), (d0, d1) -> (d0 * 32 + d1)], body = "x0"} : (!memory.image2d<[8, 32], f32>, !memory.buffer<1024, f32>) -> ()
  %y = memory.download %o {layout = #layout.linear} : (!memory.buffer<1024, f32>) -> tensor<1024xf32>
  func.return %y : tensor<1024xf32>
}
"#;

/// Two vectors of quarters and halves: their products and sums of up to a few hundred of them
/// are exact in f32, in any order.
fn exact_inputs(n: usize) -> (Vec<f32>, Vec<f32>) {
    let a = (0..n).map(|i| ((i * 7) % 13) as f32 * 0.25 - 1.5).collect();
    let b = (0..n).map(|i| ((i * 5) % 11) as f32 * 0.5 - 2.0).collect();
    (a, b)
}

/// `fbc run` of the memory-level module `text` (arguments `a`, `b`) on the device, dumping its
/// kernels: the outputs file and the dump folder.
fn run_exact(name: &str, text: &str, a: &[f32], b: &[f32]) -> (PathBuf, PathBuf) {
    let dir = common::scratch(&format!("ocl-{name}"));
    let p = write_tmp(&format!("{name}.fbir"), text);
    let inputs = common::write(&dir, "ab.safetensors", &safetensors_ab(a, b));
    let (out, dump) = (dir.join("c.safetensors"), dir.join("kernels"));
    let o = common::fbc(&[
        "run",
        p.to_str().unwrap_or_default(),
        "--target",
        "opencl",
        "--inputs",
        &inputs,
        "--outputs",
        out.to_str().unwrap_or_default(),
        "--dump-kernels",
        dump.to_str().unwrap_or_default(),
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    (out, dump)
}

#[test]
fn a_contraction_into_an_image_is_tiled_and_exact() {
    if !have_device() {
        return;
    }
    let (a, b) = exact_inputs(768);
    let (out, dump) = run_exact("mm_image", MATMUL_TO_IMAGE, &a, &b);
    let mm = std::fs::read_to_string(dump.join("mm.cl")).expect("mm.cl");
    // The generic 16×16 group would leave half its columns idle on 32 columns of 4-wide
    // texels: it becomes 8×32.
    assert!(
        mm.contains("reqd_work_group_size(8, 32, 1)") && mm.contains("acc3 = acc[i][3]"),
        "{mm}"
    );
    let c = read_safetensors_f32(&std::fs::read(&out).expect("outputs"), "result0");
    for m in 0..32 {
        for n in 0..32 {
            // Sums of exact products of quarters and halves: exact in f32 in any order.
            let want: f32 = (0..24).map(|k| a[m * 24 + k] * b[k * 32 + n]).sum::<f32>() + 0.5;
            assert_eq!(c[m * 32 + n], want, "C[{m}, {n}]");
        }
    }
}

/// Two contractions on images whose channels the tiled kernel stages a texel at a time: in `mm1`
/// `a`'s channel runs along the reduction and `b`'s along the columns, in `mm2` `a`'s along the
/// rows and `b`'s along the reduction. `pack_*` copy the linear inputs into the images.
const TEXEL_STAGING: &str = r#"func.func @main(%a: tensor<1024xf32>, %b: tensor<1024xf32>) -> (tensor<1024xf32>, tensor<1024xf32>, tensor<1024xf32>, tensor<1024xf32>, tensor<1024xf32>, tensor<1024xf32>) {
  %ma = memory.upload %a {layout = #layout.linear} : (tensor<1024xf32>) -> !memory.buffer<1024, f32>
  %mb = memory.upload %b {layout = #layout.linear} : (tensor<1024xf32>) -> !memory.buffer<1024, f32>
  %ia = memory.alloc : () -> !memory.image2d<[8, 32], f32>
  memory.launch %ma, %ia {kernel = "pack_a", source = "layout.convert", domain = [32, 8, 4], iterators = ["parallel", "parallel", "parallel"], maps = [(d0, d1, d2) -> (d0 * 32 + d1 * 4 + d2), (d0, d1, d2) -> (d1, d0, d2)], body = "x0"} : (!memory.buffer<1024, f32>, !memory.image2d<[8, 32], f32>) -> ()
  %ib = memory.alloc : () -> !memory.image2d<[8, 32], f32>
  memory.launch %mb, %ib {kernel = "pack_b", source = "layout.convert", domain = [32, 8, 4], iterators = ["parallel", "parallel", "parallel"], maps = [(d0, d1, d2) -> (d0 * 32 + d1 * 4 + d2), (d0, d1, d2) -> (d1, d0, d2)], body = "x0"} : (!memory.buffer<1024, f32>, !memory.image2d<[8, 32], f32>) -> ()
  %c1 = memory.alloc : () -> !memory.buffer<1024, f32>
  memory.launch %ia, %ib, %c1 {kernel = "mm1", source = "tensor.matmul", domain = [32, 8, 4, 8, 4], iterators = ["parallel", "parallel", "parallel", "reduction", "reduction"], maps = [(d0, d1, d2, d3, d4) -> (d3, d0, d4), (d0, d1, d2, d3, d4) -> (d1, d3 * 4 + d4, d2), (d0, d1, d2, d3, d4) -> (d0 * 32 + d1 * 4 + d2)], body = "x0 * x1", combine = "add"} : (!memory.image2d<[8, 32], f32>, !memory.image2d<[8, 32], f32>, !memory.buffer<1024, f32>) -> ()
  %ja = memory.alloc : () -> !memory.image2d<[32, 8], f32>
  memory.launch %ma, %ja {kernel = "pack_a2", source = "layout.convert", domain = [8, 32, 4], iterators = ["parallel", "parallel", "parallel"], maps = [(d0, d1, d2) -> (d0 * 128 + d1 * 4 + d2), (d0, d1, d2) -> (d1, d0, d2)], body = "x0"} : (!memory.buffer<1024, f32>, !memory.image2d<[32, 8], f32>) -> ()
  %jb = memory.alloc : () -> !memory.image2d<[32, 8], f32>
  memory.launch %mb, %jb {kernel = "pack_b2", source = "layout.convert", domain = [8, 32, 4], iterators = ["parallel", "parallel", "parallel"], maps = [(d0, d1, d2) -> (d0 * 128 + d1 * 4 + d2), (d0, d1, d2) -> (d1, d0, d2)], body = "x0"} : (!memory.buffer<1024, f32>, !memory.image2d<[32, 8], f32>) -> ()
  %c2 = memory.alloc : () -> !memory.buffer<1024, f32>
  memory.launch %ja, %jb, %c2 {kernel = "mm2", source = "tensor.matmul", domain = [8, 4, 32, 8, 4], iterators = ["parallel", "parallel", "parallel", "reduction", "reduction"], maps = [(d0, d1, d2, d3, d4) -> (d3 * 4 + d4, d0, d1), (d0, d1, d2, d3, d4) -> (d2, d3, d4), (d0, d1, d2, d3, d4) -> ((d0 * 4 + d1) * 32 + d2)], body = "x0 * x1", combine = "add"} : (!memory.image2d<[32, 8], f32>, !memory.image2d<[32, 8], f32>, !memory.buffer<1024, f32>) -> ()
  %c3 = memory.alloc : () -> !memory.buffer<1024, f32>
  memory.launch %ia, %ib, %c3 {kernel = "mm3", source = "tensor.matmul", domain = [32, 8, 4, 32], iterators = ["parallel", "parallel", "parallel", "reduction"], maps = [(d0, d1, d2, d3) -> (d3 mod 32 floordiv 4, d0, d3 mod 4), (d0, d1, d2, d3) -> (d1, d3, d2), (d0, d1, d2, d3) -> (d0 * 32 + d1 * 4 + d2)], body = "x0 * x1", combine = "add"} : (!memory.image2d<[8, 32], f32>, !memory.image2d<[8, 32], f32>, !memory.buffer<1024, f32>) -> ()
  %c4 = memory.alloc : () -> !memory.buffer<1024, f32>
  memory.launch %ja, %jb, %c4 {kernel = "mm4", source = "tensor.matmul", domain = [8, 4, 32, 32], iterators = ["parallel", "parallel", "parallel", "reduction"], maps = [(d0, d1, d2, d3) -> (d3, d0, d1), (d0, d1, d2, d3) -> (d2, d3 floordiv 4, d3 mod 4), (d0, d1, d2, d3) -> ((d0 * 4 + d1) * 32 + d2)], body = "x0 * x1", combine = "add"} : (!memory.image2d<[32, 8], f32>, !memory.image2d<[32, 8], f32>, !memory.buffer<1024, f32>) -> ()
  %c5 = memory.alloc : () -> !memory.buffer<1024, f32>
  memory.launch %ia, %ib, %c5 {kernel = "mm5", source = "tensor.matmul", domain = [32, 8, 4, 32], iterators = ["parallel", "parallel", "parallel", "reduction"], maps = [(d0, d1, d2, d3) -> (d3 floordiv 4 mod 8, d0, d3 mod 4), (d0, d1, d2, d3) -> (d1, d3, d2), (d0, d1, d2, d3) -> (d0 * 32 + d1 * 4 + d2)], body = "x0 * x1", combine = "add"} : (!memory.image2d<[8, 32], f32>, !memory.image2d<[8, 32], f32>, !memory.buffer<1024, f32>) -> ()
  %c6 = memory.alloc : () -> !memory.buffer<1024, f32>
  memory.launch %ja, %jb, %c6 {kernel = "mm6", source = "tensor.matmul", domain = [8, 4, 32, 32], iterators = ["parallel", "parallel", "parallel", "reduction"], maps = [(d0, d1, d2, d3) -> (d3, d0, d1), (d0, d1, d2, d3) -> (d2, d3 floordiv 16 * 4 + d3 floordiv 4 mod 4, d3 mod 4), (d0, d1, d2, d3) -> ((d0 * 4 + d1) * 32 + d2)], body = "x0 * x1", combine = "add"} : (!memory.image2d<[32, 8], f32>, !memory.image2d<[32, 8], f32>, !memory.buffer<1024, f32>) -> ()
  %y1 = memory.download %c1 {layout = #layout.linear} : (!memory.buffer<1024, f32>) -> tensor<1024xf32>
  %y2 = memory.download %c2 {layout = #layout.linear} : (!memory.buffer<1024, f32>) -> tensor<1024xf32>
  %y3 = memory.download %c3 {layout = #layout.linear} : (!memory.buffer<1024, f32>) -> tensor<1024xf32>
  %y4 = memory.download %c4 {layout = #layout.linear} : (!memory.buffer<1024, f32>) -> tensor<1024xf32>
  %y5 = memory.download %c5 {layout = #layout.linear} : (!memory.buffer<1024, f32>) -> tensor<1024xf32>
  %y6 = memory.download %c6 {layout = #layout.linear} : (!memory.buffer<1024, f32>) -> tensor<1024xf32>
  func.return %y1, %y2, %y3, %y4, %y5, %y6 : (tensor<1024xf32>, tensor<1024xf32>, tensor<1024xf32>, tensor<1024xf32>, tensor<1024xf32>, tensor<1024xf32>) -> ()
}
"#;

/// A matmul into a padded R-Tile image (30×30 in 4×4 tiles: 32×32 texel rows and columns, 2 of
/// each padding) reading a padded block R-Tile: `-O1` keeps the layouts written here.
const PADDED_MATMUL: &str = r#"func.func @main(%x: tensor<30x40xf32>, %w: tensor<40x30xf32>) -> (tensor<30x30xf32>, tensor<30x30xf32>) attributes {fbc.arg_layouts = [#layout.linear, #layout.rtile<tile = [4, 8], horizontal = 1, pad = [0, 2]>]} {
  %y = tensor.matmul %x, %w {fbc.layout = #layout.rtile<tile = [4, 4], horizontal = 1, pad = [2, 2]>} : (tensor<30x40xf32>, tensor<40x30xf32>) -> tensor<30x30xf32>
  %r = tensor.tanh %y : (tensor<30x30xf32>) -> tensor<30x30xf32>
  func.return %y, %r : (tensor<30x30xf32>, tensor<30x30xf32>) -> ()
}
"#;

#[test]
fn a_contraction_into_a_padded_image_is_tiled_under_its_guard() {
    if !have_device() {
        return;
    }
    let p = write_tmp("padded_matmul.fbir", PADDED_MATMUL);
    let dump = common::scratch("ocl-padded").join("kernels");
    check(&p, 1, &["--dump-kernels", dump.to_str().unwrap_or_default()])
        .unwrap_or_else(|e| panic!("{e}"));
    let mm = std::fs::read_to_string(dump.join("main_matmul_y.cl")).expect("dumped");
    // Tiled; padded rows of x and padded columns of w are not read (x four values a load along
    // the reduction, under the guard of its rows); padding is stored as 0.
    assert!(mm.contains("reqd_work_group_size"), "{mm}");
    assert!(
        mm.contains(
            "((row < 30) ? (*(__global const float4*)(x0 + (((row * 40) + kk)))) : (float4)(0.0f))"
        ),
        "{mm}"
    );
    assert!(mm.contains("((row < 30 && (((col / 4) * 4) + 3) < 30) ? acc3 : 0.0f)"), "{mm}");
}

/// Convolutions the tiled contraction runs as implicit GEMMs: each input tap read under the
/// select of its zero padding (proven in range there, so unchecked), padding on every side,
/// stride, dilation, a bias and a residual in the epilogue, a 1×1 convolution.
const CONVS: &str = r#"func.func @main(%x: tensor<2x8x12x12xf32>, %w: tensor<16x8x3x3xf32>, %b: tensor<16xf32>, %r: tensor<2x16x12x12xf32>, %w1: tensor<16x8x1x1xf32>) -> (tensor<2x16x12x12xf32>, tensor<2x16x6x6xf32>, tensor<2x16x12x12xf32>, tensor<2x16x12x12xf32>) {
  %same = tensor.conv2d %x, %w, %b {padding = [1, 1]} : (tensor<2x8x12x12xf32>, tensor<16x8x3x3xf32>, tensor<16xf32>) -> tensor<2x16x12x12xf32>
  %res = tensor.add %same, %r : (tensor<2x16x12x12xf32>, tensor<2x16x12x12xf32>) -> tensor<2x16x12x12xf32>
  %strided = tensor.conv2d %x, %w {padding = [1, 1], stride = [2, 2]} : (tensor<2x8x12x12xf32>, tensor<16x8x3x3xf32>) -> tensor<2x16x6x6xf32>
  %dilated = tensor.conv2d %x, %w {dilation = [2, 2], padding = [2, 2]} : (tensor<2x8x12x12xf32>, tensor<16x8x3x3xf32>) -> tensor<2x16x12x12xf32>
  %one = tensor.conv2d %x, %w1 : (tensor<2x8x12x12xf32>, tensor<16x8x1x1xf32>) -> tensor<2x16x12x12xf32>
  func.return %res, %strided, %dilated, %one : (tensor<2x16x12x12xf32>, tensor<2x16x6x6xf32>, tensor<2x16x12x12xf32>, tensor<2x16x12x12xf32>) -> ()
}
"#;

#[test]
fn convolutions_are_implicit_gemms_under_their_padding() {
    if !have_device() {
        return;
    }
    let p = write_tmp("convs.fbir", CONVS);
    for level in [1, 3] {
        let dump = common::scratch(&format!("ocl-convs-{level}")).join("kernels");
        check(&p, level, &["--dump-kernels", dump.to_str().unwrap_or_default()])
            .unwrap_or_else(|e| panic!("-O{level}: {e}"));
        let mut convs = 0;
        for entry in std::fs::read_dir(&dump).expect("dumped") {
            let path = entry.expect("entry").path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
            if !name.contains("conv2d") {
                continue;
            }
            convs += 1;
            let src = std::fs::read_to_string(&path).expect("read");
            // The tiled template, and no load checked at run time.
            assert!(src.contains("reqd_work_group_size"), "-O{level} {name}:\n{src}");
            assert!(!src.contains("fbc_ldf(x"), "-O{level} {name}:\n{src}");
        }
        assert_eq!(convs, 4, "-O{level}");
    }
}

/// Channel-packed (NC4HW4, `pack = "c"`) layouts chosen by hand: an argument converted into
/// them, a strided convolution reading them and writing them with its ReLU fused, a 1×1
/// convolution reading that, and a group norm + SiLU writing them. `C = 6` leaves half of the
/// second group of channels as padding.
const NC4HW4: &str = r#"func.func @main(%x: tensor<2x6x9x10xf32>, %w: tensor<8x6x3x3xf32>, %b: tensor<8xf32>, %w2: tensor<5x8x1x1xf32>, %g: tensor<8xf32>, %w3: tensor<6x8x3x3xf32>) -> (tensor<2x5x5x5xf32>, tensor<2x6x5x5xf32>) {
  %xp = layout.assign %x {layout = #layout.rtile<tile = [3, 4], horizontal = 3, pack = "c", pad = [0, 2]>} : (tensor<2x6x9x10xf32>) -> tensor<2x6x9x10xf32>
  %wp = layout.assign %w {layout = #layout.rtile<tile = [3, 3], horizontal = 3, pack = "c", pad = [0, 0]>} : (tensor<8x6x3x3xf32>) -> tensor<8x6x3x3xf32>
  %c = tensor.conv2d %xp, %wp, %b {fbc.layout = #layout.rtile<tile = [5, 5], horizontal = 3, pack = "c", pad = [0, 0]>, padding = [1, 1, 1, 1], stride = [2, 2]} : (tensor<2x6x9x10xf32>, tensor<8x6x3x3xf32>, tensor<8xf32>) -> tensor<2x8x5x5xf32>
  %r = tensor.relu %c {fbc.layout = #layout.rtile<tile = [5, 5], horizontal = 2, pack = "c", pad = [0, 0]>} : (tensor<2x8x5x5xf32>) -> tensor<2x8x5x5xf32>
  %d = tensor.conv2d %r, %w2 : (tensor<2x8x5x5xf32>, tensor<5x8x1x1xf32>) -> tensor<2x5x5x5xf32>
  %n = tensor.group_norm %c, %g, %b {groups = 2, fbc.layout = #layout.rtile<tile = [5, 5], horizontal = 3, pack = "c", pad = [0, 0]>} : (tensor<2x8x5x5xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x8x5x5xf32>
  %s = tensor.silu %n {fbc.layout = #layout.rtile<tile = [5, 5], horizontal = 3, pack = "c", pad = [0, 0]>} : (tensor<2x8x5x5xf32>) -> tensor<2x8x5x5xf32>
  %e = tensor.conv2d %s, %w3 {padding = "same"} : (tensor<2x8x5x5xf32>, tensor<6x8x3x3xf32>) -> tensor<2x6x5x5xf32>
  func.return %d, %e : tensor<2x5x5x5xf32>, tensor<2x6x5x5xf32>
}
"#;

#[test]
fn channel_packed_textures_give_the_interpreters_numbers() {
    if !have_device() {
        return;
    }
    let p = write_tmp("nc4hw4.fbir", NC4HW4);
    let dump = common::scratch("ocl-nc4hw4").join("kernels");
    check(&p, 1, &["--dump-kernels", dump.to_str().unwrap_or_default()])
        .unwrap_or_else(|e| panic!("{e}"));
    // The strided convolution writes its texels directly: a work-item per output texel, four
    // output channels (one accumulator each), input and weight read from their textures.
    let conv = dumped_kernel(&dump, "main_conv2d_c");
    assert!(conv.contains("float acc3") && conv.contains("write_imagef(x3"), "{conv}");
    assert!(conv.contains("read_imagef(x0") && conv.contains("read_imagef(x1"), "{conv}");
    // The 1×1 convolution over channel-packed input (8 channels: whole texels) steps through
    // the texels: one read per four channels, each value taken from it.
    let one = dumped_kernel(&dump, "main_conv2d_d");
    assert!(one.contains("for (int d6 = 0; d6 < 2; ++d6)") && !one.contains("d7"), "{one}");
    assert_eq!(one.matches("read_imagef(").count(), 1, "{one}");
    assert!(one.contains("acc += (t0.s3 * x1["), "{one}");
    // The ReLU moves texels between two channel-packed layouts (its tile grid transposed).
    let relu = dumped_kernel(&dump, "main_relu_r");
    assert!(relu.contains("read_imagef(x0") && relu.contains("write_imagef(x1"), "{relu}");
    // A row kernel cannot write four rows at once: the group norm's statistics are their own
    // launches and its SiLU epilogue writes the packed texels.
    let silu = dumped_kernel(&dump, "main_silu_s");
    assert!(silu.contains("write_imagef("), "{silu}");
    // The CPU JIT runs the same storage maps.
    let cli = Cli::try_parse_from([
        "fbc",
        "run",
        p.to_str().unwrap_or_default(),
        "--target",
        "cpu-jit",
        "-O1",
        "--random-inputs",
        "7",
        "--check",
    ])
    .expect("parses");
    Driver::default().run(&cli).unwrap_or_else(|e| panic!("{e:?}"));
}

/// `-O3` for mali chooses channel-packed texels for the inputs and filters of two grouped
/// convolutions (`rtile-select`'s convolution model; `compiler/transforms/tests/global_layout.rs`
/// has the figures): their launches are the direct kernel, a work-item per output texel stepping
/// through the input's and the filter's texels, not a contraction template; the numbers are the
/// interpreter's.
#[test]
fn convolutions_chosen_channel_packed_at_o3_run_the_direct_kernel() {
    if !have_device() {
        return;
    }
    let src = "func.func @main(%x: tensor<2x32x16x16xf32>, %w: tensor<32x4x3x3xf32>, %b: tensor<32xf32>, %g: tensor<32xf32>, %w2: tensor<32x4x3x3xf32>) -> tensor<2x32x16x16xf32> {
  %n = tensor.group_norm %x, %g, %b {groups = 8} : (tensor<2x32x16x16xf32>, tensor<32xf32>, tensor<32xf32>) -> tensor<2x32x16x16xf32>
  %s = tensor.silu %n : (tensor<2x32x16x16xf32>) -> tensor<2x32x16x16xf32>
  %c = tensor.conv2d %s, %w, %b {groups = 8, padding = [1, 1]} : (tensor<2x32x16x16xf32>, tensor<32x4x3x3xf32>, tensor<32xf32>) -> tensor<2x32x16x16xf32>
  %r = tensor.relu %c : (tensor<2x32x16x16xf32>) -> tensor<2x32x16x16xf32>
  %e = tensor.conv2d %r, %w2 {groups = 8, padding = \"same\"} : (tensor<2x32x16x16xf32>, tensor<32x4x3x3xf32>) -> tensor<2x32x16x16xf32>
  func.return %e : tensor<2x32x16x16xf32>
}
";
    let p = write_tmp("grouped_conv.fbir", src);
    let dump = common::scratch("ocl-grouped-conv").join("kernels");
    check(&p, 3, &["--profile", "mali", "--dump-kernels", dump.to_str().unwrap_or_default()])
        .unwrap_or_else(|e| panic!("{e}"));
    for name in ["main_conv2d_r", "main_conv2d_e"] {
        let k = dumped_kernel(&dump, name);
        assert!(!k.contains("reqd_work_group_size"), "{name}: a template\n{k}");
        // Input and filter both in texels of four channels.
        assert!(k.contains("read_imagef(x0") && k.contains("read_imagef(x1"), "{name}:\n{k}");
    }
    // The first writes the channel-packed texels the second reads, four output channels a
    // work-item; the second, the linear result, one.
    assert!(dumped_kernel(&dump, "main_conv2d_r").contains("float acc3"));
    assert!(!dumped_kernel(&dump, "main_conv2d_e").contains("float acc3"));
}

/// Products concatenated along their columns store their parts directly (no copy kernel): the
/// skinny kernel (6 and 8 columns) and the tiled one (50, split along k on the nvidia profile,
/// whose sum stores), at offsets that are not whole texels.
#[test]
fn concatenated_products_store_their_own_columns() {
    if !have_device() {
        return;
    }
    let src = "func.func @main(%x: tensor<64x64xf32>, %a: tensor<64x6xf32>, %b: tensor<64x50xf32>, %c: tensor<64x8xf32>) -> tensor<64x64xf32> {
  %p = tensor.matmul %x, %a : (tensor<64x64xf32>, tensor<64x6xf32>) -> tensor<64x6xf32>
  %q = tensor.matmul %x, %b : (tensor<64x64xf32>, tensor<64x50xf32>) -> tensor<64x50xf32>
  %t = tensor.matmul %x, %c : (tensor<64x64xf32>, tensor<64x8xf32>) -> tensor<64x8xf32>
  %s = tensor.tanh %t : (tensor<64x8xf32>) -> tensor<64x8xf32>
  %r = tensor.concat %p, %q, %s {axis = 1} : (tensor<64x6xf32>, tensor<64x50xf32>, tensor<64x8xf32>) -> tensor<64x64xf32>
  func.return %r : tensor<64x64xf32>
}
";
    let p = write_tmp("concatenated_products.fbir", src);
    for (profile, tiled) in [("generic", "main_matmul_r_1"), ("nvidia", "main_matmul_r_1_partial")]
    {
        let dump = common::scratch(&format!("ocl-concat-{profile}")).join("kernels");
        check(&p, 3, &["--profile", profile, "--dump-kernels", dump.to_str().unwrap_or_default()])
            .unwrap_or_else(|e| panic!("{profile}: {e}"));
        let mut names: Vec<String> = std::fs::read_dir(&dump)
            .expect("dump")
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.starts_with("main_"))
            .collect();
        names.sort();
        assert!(names.iter().all(|n| !n.contains("concat")), "{profile}: {names:?}");
        for k in ["main_matmul_r_0", "main_matmul_r_2", tiled] {
            assert!(dumped_kernel(&dump, k).contains("reqd_work_group_size"), "{profile} {k}");
        }
    }
}

/// With the nvidia profile (`[compute] four_wide_items`), a launch into a buffer whose last
/// dimension runs along aligned quads of the output and of every input reading it computes four
/// values a work-item, each input read with one `vload4` and the four stored with one
/// `vstore4`: an elementwise sum with a broadcast bias (three `vload4`s) and a column sum (a
/// reduction: one a step). A transposed operand (not quads along the last dimension) or a last
/// dimension of 30 keeps a work-item per value, as every launch does with the generic profile.
/// All match the interpreter at -O0 and -O2.
#[test]
fn four_values_a_work_item_where_every_operand_runs_along_aligned_quads() {
    if !have_device() {
        return;
    }
    let src = "func.func @main(%a: tensor<6x64xf32>, %b: tensor<6x64xf32>, %c: tensor<64xf32>, %t: tensor<64x6xf32>, %u: tensor<6x30xf32>, %v: tensor<6x30xf32>) -> (tensor<6x64xf32>, tensor<64xf32>, tensor<6x64xf32>, tensor<6x30xf32>) {
  %s = tensor.add %a, %b : (tensor<6x64xf32>, tensor<6x64xf32>) -> tensor<6x64xf32>
  %sc = tensor.add %s, %c : (tensor<6x64xf32>, tensor<64xf32>) -> tensor<6x64xf32>
  %r = tensor.reduce_sum %b {axes = [0], keepdim = false} : (tensor<6x64xf32>) -> tensor<64xf32>
  %tt = tensor.transpose %t {perm = [1, 0]} : (tensor<64x6xf32>) -> tensor<6x64xf32>
  %m = tensor.mul %tt, %a : (tensor<6x64xf32>, tensor<6x64xf32>) -> tensor<6x64xf32>
  %w = tensor.mul %u, %v : (tensor<6x30xf32>, tensor<6x30xf32>) -> tensor<6x30xf32>
  func.return %sc, %r, %m, %w : (tensor<6x64xf32>, tensor<64xf32>, tensor<6x64xf32>, tensor<6x30xf32>) -> ()
}
";
    let p = write_tmp("quads.fbir", src);
    for (level, profile) in [(0, "nvidia"), (2, "nvidia"), (2, "generic")] {
        let dump = common::scratch(&format!("ocl-quads-{level}-{profile}")).join("kernels");
        let dumped = dump.to_str().unwrap_or_default();
        check(&p, level, &["--profile", profile, "--dump-kernels", dumped])
            .unwrap_or_else(|e| panic!("-O{level} {profile}: {e}"));
        for (k, loads) in
            [("main_add_sc", 3), ("main_reduce_sum_r", 1), ("main_mul_m", 0), ("main_mul_w", 0)]
        {
            let loads = if profile == "nvidia" { loads } else { 0 };
            let text = dumped_kernel(&dump, k);
            assert_eq!(text.matches("vload4(0, x").count(), loads, "-O{level} {k}:\n{text}");
            let wide = loads > 0;
            assert_eq!(text.contains("const int dq = gid"), wide, "-O{level} {k}:\n{text}");
            assert_eq!(text.contains("vstore4((float4)("), wide, "-O{level} {k}:\n{text}");
            let acc = text.contains("vstore4((float4)(acc0, acc1, acc2, acc3)");
            assert_eq!(acc, wide && k.contains("reduce"), "-O{level} {profile} {k}:\n{text}");
        }
    }
}

/// A safetensors file with the F32 vectors `a` and `b`.
fn safetensors_ab(a: &[f32], b: &[f32]) -> Vec<u8> {
    let (na, nb) = (a.len() * 4, b.len() * 4);
    let header = format!(
        r#"{{"a":{{"dtype":"F32","shape":[{}],"data_offsets":[0,{na}]}},"b":{{"dtype":"F32","shape":[{}],"data_offsets":[{na},{}]}}}}"#,
        a.len(),
        b.len(),
        na + nb
    );
    let mut bytes = Vec::new();
    bytes.extend((header.len() as u64).to_le_bytes());
    bytes.extend(header.as_bytes());
    for x in a.iter().chain(b) {
        bytes.extend(x.to_le_bytes());
    }
    bytes
}

#[test]
fn contractions_stage_whole_texels_along_any_side() {
    if !have_device() {
        return;
    }
    let (a, b) = exact_inputs(1024);
    let (out, dump) = run_exact("texel_staging", TEXEL_STAGING, &a, &b);
    let src = |k: &str| dumped_kernel(&dump, k);
    let (mm1, mm2) = (src("mm1"), src("mm2"));
    // mm1: `a` four reduction steps per texel, `b` four columns per texel.
    assert!(mm1.contains("As[4 * (t / ") && mm1.contains("vstore4(v, 0, &Bs["), "{mm1}");
    // mm2: `a` four rows per texel, `b` four reduction steps per texel.
    assert!(mm2.contains("vstore4(v, 0, &As[") && mm2.contains("Bs[4 * (t / "), "{mm2}");
    // mm3 and mm4: mm1 and mm2 with the reduction one dimension whose value mod 4 is the
    // channel (x and y read it only divided by 4): the same texels, staged whole.
    let (mm3, mm4) = (src("mm3"), src("mm4"));
    assert!(mm3.contains("As[4 * (t / ") && mm3.contains("vstore4(v, 0, &Bs["), "{mm3}");
    assert!(mm4.contains("vstore4(v, 0, &As[") && mm4.contains("Bs[4 * (t / "), "{mm4}");
    // mm5 and mm6: the texel's coordinates an R-Tile's operations of `d3 floordiv 4`
    // (`d3 floordiv 4 mod 8`, `d3 floordiv 16 * 4 + d3 floordiv 4 mod 4`): whole texels too.
    let (mm5, mm6) = (src("mm5"), src("mm6"));
    assert!(mm5.contains("As[4 * (t / ") && mm5.contains("vstore4(v, 0, &Bs["), "{mm5}");
    assert!(mm6.contains("vstore4(v, 0, &As[") && mm6.contains("Bs[4 * (t / "), "{mm6}");
    for k in [&mm1, &mm2, &mm3, &mm4, &mm5, &mm6] {
        assert!(k.contains("a, b staged a texel at a time"), "{k}");
        assert!(!k.contains("fbc_ch(read"), "no single-channel reads: {k}");
    }
    let bytes = std::fs::read(&out).expect("outputs");
    let (c1, c2) =
        (read_safetensors_f32(&bytes, "result0"), read_safetensors_f32(&bytes, "result1"));
    assert_eq!(c1, read_safetensors_f32(&bytes, "result2"), "mm3 = mm1");
    assert_eq!(c2, read_safetensors_f32(&bytes, "result3"), "mm4 = mm2");
    assert_eq!(c1, read_safetensors_f32(&bytes, "result4"), "mm5 = mm1");
    assert_eq!(c2, read_safetensors_f32(&bytes, "result5"), "mm6 = mm2");
    // Image element (x, y, c) of a [W, H] image packed from v is v[(y·W + x)·4 + c].
    let a2 = |m: usize, k: usize| a[((m / 4) * 32 + k) * 4 + m % 4];
    let b2 = |k: usize, n: usize| b[((k / 4) * 32 + n) * 4 + k % 4];
    for m in 0..32 {
        for n in 0..32 {
            // Sums of exact products of quarters and halves: exact in f32 in any order.
            let want1: f32 = (0..32).map(|k| a[m * 32 + k] * b[k * 32 + n]).sum();
            assert_eq!(c1[m * 32 + n], want1, "C1[{m}, {n}]");
            let want2: f32 = (0..32).map(|k| a2(m, k) * b2(k, n)).sum();
            assert_eq!(c2[m * 32 + n], want2, "C2[{m}, {n}]");
        }
    }
}

/// Row reductions over an R-Tile image whose channel is the innermost reduced dimension: 8 rows
/// of 32 texels (128 values each), summed and maximised; the image unpacked (doubled) into a
/// buffer where its channel runs along four consecutive elements, and transposed where it
/// does not.
const TEXEL_REDUCTION: &str = r#"func.func @main(%a: tensor<1024xf32>, %b: tensor<1024xf32>) -> (tensor<8xf32>, tensor<8xf32>, tensor<1024xf32>, tensor<1024xf32>) {
  %ma = memory.upload %a {layout = #layout.linear} : (tensor<1024xf32>) -> !memory.buffer<1024, f32>
  %ia = memory.alloc : () -> !memory.image2d<[32, 8], f32>
  memory.launch %ma, %ia {kernel = "pack", source = "layout.convert", domain = [8, 32, 4], iterators = ["parallel", "parallel", "parallel"], maps = [(d0, d1, d2) -> (d0 * 128 + d1 * 4 + d2), (d0, d1, d2) -> (d1, d0, d2)], body = "x0"} : (!memory.buffer<1024, f32>, !memory.image2d<[32, 8], f32>) -> ()
  %s = memory.alloc : () -> !memory.buffer<8, f32>
  memory.launch %ia, %s {kernel = "row_sum", source = "tensor.reduce_sum", domain = [8, 32, 4], iterators = ["parallel", "reduction", "reduction"], maps = [(d0, d1, d2) -> (d1, d0, d2), (d0, d1, d2) -> (d0)], body = "x0", combine = "add"} : (!memory.image2d<[32, 8], f32>, !memory.buffer<8, f32>) -> ()
  %m = memory.alloc : () -> !memory.buffer<8, f32>
  memory.launch %ia, %m {kernel = "row_max", source = "tensor.reduce_max", domain = [8, 32, 4], iterators = ["parallel", "reduction", "reduction"], maps = [(d0, d1, d2) -> (d1, d0, d2), (d0, d1, d2) -> (d0)], body = "x0", combine = "max"} : (!memory.image2d<[32, 8], f32>, !memory.buffer<8, f32>) -> ()
  %u = memory.alloc : () -> !memory.buffer<1024, f32>
  memory.launch %ia, %u {kernel = "unpack", source = "layout.convert", domain = [8, 32, 4], iterators = ["parallel", "parallel", "parallel"], maps = [(d0, d1, d2) -> (d1, d0, d2), (d0, d1, d2) -> (d0 * 128 + d1 * 4 + d2)], body = "x0 * 2.0"} : (!memory.image2d<[32, 8], f32>, !memory.buffer<1024, f32>) -> ()
  %t = memory.alloc : () -> !memory.buffer<1024, f32>
  memory.launch %ia, %t {kernel = "unpack_t", source = "layout.convert", domain = [8, 32, 4], iterators = ["parallel", "parallel", "parallel"], maps = [(d0, d1, d2) -> (d1, d0, d2), (d0, d1, d2) -> (d2 * 256 + d1 * 8 + d0)], body = "x0"} : (!memory.image2d<[32, 8], f32>, !memory.buffer<1024, f32>) -> ()
  %ys = memory.download %s {layout = #layout.linear} : (!memory.buffer<8, f32>) -> tensor<8xf32>
  %ym = memory.download %m {layout = #layout.linear} : (!memory.buffer<8, f32>) -> tensor<8xf32>
  %yu = memory.download %u {layout = #layout.linear} : (!memory.buffer<1024, f32>) -> tensor<1024xf32>
  %yt = memory.download %t {layout = #layout.linear} : (!memory.buffer<1024, f32>) -> tensor<1024xf32>
  func.return %ys, %ym, %yu, %yt : (tensor<8xf32>, tensor<8xf32>, tensor<1024xf32>, tensor<1024xf32>) -> ()
}
"#;

/// A work-group reduction over an image whose channel is the innermost reduced dimension reads
/// a texel per step (one `read_imagef` for four values, combined in channel order), with one
/// work-item per texel at most (32 texels: a group of 32), and gives the exact sums and maxima.
/// An elementwise launch from that image into four consecutive, aligned buffer elements per
/// texel computes them in one work-item and stores them with one `vstore4`; into a transposed
/// buffer it stores one element per work-item. Both give the image's values.
#[test]
fn image_reads_take_whole_texels_in_reductions_and_four_wide_stores() {
    if !have_device() {
        return;
    }
    let (a, b) = exact_inputs(1024);
    let (out, dump) = run_exact("texel_reduction", TEXEL_REDUCTION, &a, &b);
    for k in ["row_sum", "row_max"] {
        let body = dumped_kernel(&dump, k);
        assert!(body.contains("One work-group of 32 per output: each work-item combines every 32th texel (four values, in channel order)"), "{body}");
        assert!(body.contains("t0.s3") && !body.contains("fbc_ch(read"), "{body}");
    }
    let (unpack, unpack_t) = (dumped_kernel(&dump, "unpack"), dumped_kernel(&dump, "unpack_t"));
    assert!(unpack.contains("if (gid >= 256) return;") && unpack.contains("vstore4("), "{unpack}");
    assert!(unpack_t.contains("if (gid >= 1024) return;"), "{unpack_t}");
    assert!(!unpack_t.contains("vstore4"), "{unpack_t}");
    let bytes = std::fs::read(&out).expect("outputs");
    let (sum, max) =
        (read_safetensors_f32(&bytes, "result0"), read_safetensors_f32(&bytes, "result1"));
    let doubled: Vec<f32> = a.iter().map(|v| v * 2.0).collect();
    assert_eq!(read_safetensors_f32(&bytes, "result2"), doubled, "unpacked");
    let t = read_safetensors_f32(&bytes, "result3");
    for (i, &v) in a.iter().enumerate() {
        let (row, x, c) = (i / 128, (i / 4) % 32, i % 4);
        assert_eq!(t[c * 256 + x * 8 + row], v, "transposed {i}");
    }
    for r in 0..8 {
        let row = &a[r * 128..(r + 1) * 128];
        // Quarters and halves: exact in f32 in any order.
        assert_eq!(sum[r], row.iter().sum::<f32>(), "sum of row {r}");
        assert_eq!(max[r], row.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v)), "max of row {r}");
    }
}

/// Kernel `name` as `--dump-kernels` wrote it into `dump`, from its `__kernel` on (without the
/// helpers every source starts with).
fn dumped_kernel(dump: &std::path::Path, name: &str) -> String {
    let src = std::fs::read_to_string(dump.join(format!("{name}.cl"))).expect("dumped");
    let at = src.find("__kernel").unwrap_or_else(|| panic!("{name}: no kernel\n{src}"));
    src[at..].to_string()
}

/// A safetensors file with one F32 vector.
fn safetensors_f32(name: &str, v: &[f32]) -> Vec<u8> {
    let header = format!(
        r#"{{"{name}":{{"dtype":"F32","shape":[{}],"data_offsets":[0,{}]}}}}"#,
        v.len(),
        v.len() * 4
    );
    let mut b = (header.len() as u64).to_le_bytes().to_vec();
    b.extend(header.as_bytes());
    for x in v {
        b.extend(x.to_le_bytes());
    }
    b
}

/// The F32 tensor `name` of a safetensors file.
fn read_safetensors_f32(bytes: &[u8], name: &str) -> Vec<f32> {
    let n = u64::from_le_bytes(bytes[..8].try_into().expect("header length")) as usize;
    let h: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).expect("header");
    let off = &h[name]["data_offsets"];
    let (s, e) = (off[0].as_u64().expect("start") as usize, off[1].as_u64().expect("end") as usize);
    assert_eq!(h[name]["dtype"], "F32");
    bytes[8 + n + s..8 + n + e]
        .chunks(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[test]
fn a_substituted_kernel_is_the_one_that_runs() {
    if !have_device() {
        return;
    }
    let dir = common::scratch("ocl-subst");
    let p = write_tmp("subst.fbir", &unary("neg", ""));
    let dump = dir.join("kernels");
    let run = |extra: &[&str]| {
        let mut args = vec![
            "run",
            p.to_str().unwrap_or_default(),
            "--target",
            "opencl",
            "-O0",
            "--random-inputs",
            "7",
            "--check",
        ];
        args.extend_from_slice(extra);
        common::fbc(&args)
    };
    let o = run(&["--dump-kernels", dump.to_str().unwrap_or_default()]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let name = "main_neg_r";
    let text =
        std::fs::read_to_string(dump.join(format!("{name}.cl"))).expect("one .cl per kernel");
    assert!(dump.join("subst.cl").exists(), "and the whole source");
    // The dumped kernel substituted as it is: same numbers.
    let same = dir.join("same.cl");
    std::fs::write(&same, &text).expect("write");
    let o = run(&["--substitute-kernel", &format!("{name}={}", same.display())]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    // A kernel that negates twice: the check fails, so the substitute ran.
    let body = text.split("__kernel").nth(1).expect("a kernel").replace("(-", "(");
    let wrong = dir.join("wrong.cl");
    std::fs::write(&wrong, format!("__kernel{body}")).expect("write");
    // The failed check is located at the function and leaves no outputs file.
    let outputs = dir.join("out.safetensors");
    let o = run(&[
        "--substitute-kernel",
        &format!("{name}={}", wrong.display()),
        "--outputs",
        outputs.to_str().unwrap_or_default(),
    ]);
    assert_eq!(o.code, 1, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stderr.starts_with(&format!(
            "{}:1:11: error: OpenCL results differ from the reference interpreter: result0\n",
            p.display()
        )),
        "{}",
        o.stderr
    );
    assert!(!outputs.exists(), "a failed check writes no outputs");
    // A kernel that does not compile: the build log cites its line of the source.
    let broken = dir.join("broken.cl");
    std::fs::write(
        &broken,
        format!(
            "__kernel void {name}(__global const float* x0, __global float* x1) {{\n  oops;\n}}\n"
        ),
    )
    .expect("write");
    let o = run(&["--substitute-kernel", &format!("{name}={}", broken.display())]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(o.stderr.contains(": oops;\n  | in the substituted kernel main_neg_r"), "{}", o.stderr);
    let o = run(&["--substitute-kernel", &format!("nope={}", wrong.display())]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("no kernel `nope`"), "{}", o.stderr);
}

#[test]
fn the_program_cache_hits_on_the_second_run_and_survives_corruption() {
    if !have_device() {
        return;
    }
    let dir = common::scratch("ocl-cache");
    let cache = dir.join("cache");
    let p = write_tmp("cache.fbir", &unary("exp", ""));
    let run = || {
        let p = p.to_str().unwrap_or_default();
        let args = ["run", p, "--target", "opencl", "--random-inputs", "1", "--check", "-v"];
        let o = common::fbc_env(&args, &[("FBC_CACHE_DIR", &cache)]);
        assert_eq!(o.code, 0, "{}", o.stderr);
        o.stderr
    };
    assert!(run().contains("program cache: Miss"));
    assert!(run().contains("program cache: Hit"));
    for e in std::fs::read_dir(cache.join("opencl")).expect("entries") {
        let e = e.expect("entry").path();
        std::fs::write(&e, b"garbage").expect("corrupt");
    }
    assert!(run().contains("program cache: Miss"), "a corrupt entry is rebuilt");
    assert!(run().contains("program cache: Hit"));
}

#[test]
fn bench_json_has_the_documented_shape() {
    if !have_device() {
        return;
    }
    let p = write_tmp("bench.fbir", ATTENTION);
    let o = common::fbc(&[
        "bench",
        p.to_str().unwrap_or_default(),
        "--compare",
        "fblayout,reuse",
        "--repeat",
        "2",
        "--json",
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let j: serde_json::Value = serde_json::from_str(&o.stdout).expect("JSON");
    assert_eq!(j["repeat"], 2);
    let runs = j["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[0]["strategy"], "fblayout");
    assert_eq!(runs[1]["strategy"], "reuse");
    for r in runs {
        let kernels = r["kernels"].as_array().expect("kernels");
        assert_eq!(r["kernel_count"].as_u64(), Some(kernels.len() as u64));
        assert!(r["conversion_kernels"].as_u64() <= Some(kernels.len() as u64));
        assert!(r["peak_bytes"].as_u64().is_some_and(|b| b > 0), "{r}");
        // Enqueueing a launch costs the host some time, never a second.
        assert!(
            r["host_ns_per_launch"].as_u64().is_some_and(|n| n > 0 && n < 1_000_000_000),
            "{r}"
        );
        let total: u64 = kernels.iter().map(|k| k["median_ns"].as_u64().unwrap_or(0)).sum();
        assert_eq!(r["total_ns"].as_u64(), Some(total));
        for k in kernels {
            for key in [
                "kernel",
                "source",
                "median_ns",
                "flops",
                "bytes",
                "gflops",
                "gbps",
                "tiled",
                "conversion",
            ] {
                assert!(!k[key].is_null(), "{key} missing in {k}");
            }
        }
        // The 5 matmuls: 2·8·16·16 + ... flops > 0 in total.
        assert!(kernels.iter().map(|k| k["flops"].as_u64().unwrap_or(0)).sum::<u64>() > 0);
    }
    assert_eq!(j["time_ratio_to_first"]["fblayout"], 1.0);
    let o = common::fbc(&["bench", p.to_str().unwrap_or_default(), "--repeat", "1"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.contains("strategy fblayout (-O3):"), "{}", o.stdout);
}

/// `examples/matmul_fb.fbir` at a size PoCL runs in moments: the weight read by two matmuls
/// that reduce along different axes, which the convert strategy converts.
const MATMUL_FB_SMALL: &str = r#"func.func @matmul_fb(%a: tensor<64x128xf32>, %b: tensor<128x256xf32>, %do: tensor<64x256xf32>) -> (tensor<64x256xf32>, tensor<64x128xf32>) {
  %o = tensor.matmul %a, %b : (tensor<64x128xf32>, tensor<128x256xf32>) -> tensor<64x256xf32>
  %da = tensor.matmul %do, %b {transpose_b = true} : (tensor<64x256xf32>, tensor<128x256xf32>) -> tensor<64x128xf32>
  func.return %o, %da : (tensor<64x256xf32>, tensor<64x128xf32>) -> ()
}
"#;

/// `fbc bench --timeline`: one row per strategy compared, one bar per launch the run reports
/// (convert's conversion kernels drawn as conversions), the first at the run's start; and the
/// progress bars never reach standard output, nor a standard error that is not a terminal, with
/// `-q` on either side of `bench` or without it.
#[test]
fn bench_timeline_draws_every_launch_and_progress_stays_off_a_pipe() {
    if !have_device() {
        return;
    }
    let p = write_tmp("timeline.fbir", MATMUL_FB_SMALL);
    let p = p.to_str().unwrap_or_default();
    let html = common::scratch("timeline").join("t.html");
    let t = html.to_str().unwrap_or_default();
    let o = common::fbc(&[
        "bench",
        p,
        "--compare",
        "fblayout,convert",
        "--repeat",
        "1",
        "--json",
        "--timeline",
        t,
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let j: serde_json::Value = serde_json::from_str(&o.stdout).expect("JSON");
    let html = std::fs::read_to_string(&html).expect("the timeline is written");
    let rows: Vec<&str> = html.split("<g class=\"row\">").skip(1).collect();
    let runs = j["runs"].as_array().expect("runs");
    assert_eq!(rows.len(), runs.len());
    for (row, run) in rows.iter().zip(runs) {
        let kernels = run["kernels"].as_array().expect("kernels");
        assert_eq!(row.matches("<rect class=\"k k-").count(), kernels.len(), "{row}");
        for k in kernels {
            let name = k["kernel"].as_str().unwrap_or_default();
            assert!(row.contains(&format!("<title>{name}\n")), "{name} in {row}");
            assert!(k["last_ns"].as_u64().is_some_and(|n| n > 0), "{k}");
        }
        assert_eq!(kernels[0]["start_ns"], 0, "{run}");
        // One in-order queue: each launch starts once the one before it ended.
        let span = |k: &serde_json::Value| {
            let (s, n) = (k["start_ns"].as_u64().unwrap_or(0), k["last_ns"].as_u64().unwrap_or(0));
            (s, s + n)
        };
        for w in kernels.windows(2) {
            assert!(span(&w[1]).0 >= span(&w[0]).1, "{} starts before {} ends", w[1], w[0]);
        }
        let conversions = row.matches("<rect class=\"k k-conversion\"").count() as u64;
        assert_eq!(Some(conversions), run["conversion_kernels"].as_u64(), "{row}");
    }
    assert!(runs[1]["conversion_kernels"].as_u64() > Some(0), "convert converts");
    let plain = common::fbc(&["bench", p, "--repeat", "2"]);
    assert_eq!(plain.code, 0, "{}", plain.stderr);
    for o in [
        plain,
        common::fbc(&["-q", "bench", p, "--repeat", "2"]),
        common::fbc(&["bench", p, "--repeat", "2", "-q"]),
    ] {
        assert_eq!(o.code, 0, "{}", o.stderr);
        assert!(o.stdout.starts_with(&format!("{p} on ")), "{}", o.stdout);
        for s in [&o.stdout, &o.stderr] {
            assert!(!s.contains(['\r', '\u{1b}', '█', '░']), "progress drawn: {s:?}");
        }
    }
}

#[test]
fn a_missing_device_is_an_error() {
    // (That `--check` rejects wrong results is unit-tested on `compare` in run_cmd/check.rs.)
    if !have_device() {
        return;
    }
    let p = write_tmp("neg.fbir", &unary("neg", ""));
    check(&p, 0, &[]).expect("neg passes");
    let e = check(&p, 0, &["--device", "99"]).expect_err("device 99 does not exist");
    assert!(e.contains("device 99"), "{e}");
}

// ----- contraction parameters -----

/// `@main(a, b) = a · b` for an `m × n` product over `k`, `a` stored `[k, m]` where `ta` and `b`
/// stored `[n, k]` where `tb` (one of them transposed at most).
fn matmul_module(m: u64, n: u64, k: u64, ta: bool, tb: bool) -> String {
    let (ash, bsh) = (if ta { [k, m] } else { [m, k] }, if tb { [n, k] } else { [k, n] });
    let attrs = match (ta, tb) {
        (true, _) => " {transpose_a = true}",
        (_, true) => " {transpose_b = true}",
        _ => "",
    };
    let (at, bt) = (
        format!("tensor<{}x{}xf32>", ash[0], ash[1]),
        format!("tensor<{}x{}xf32>", bsh[0], bsh[1]),
    );
    common::main_module(
        &format!("%a: {at}, %b: {bt}"),
        &format!("  %r = tensor.matmul %a, %b{attrs} : ({at}, {bt}) -> tensor<{m}x{n}xf32>"),
        &format!("tensor<{m}x{n}xf32>"),
    )
}

/// Every register block and staging depth a profile may set (edge tiles included: M, N, K not
/// multiples of the block or of the step, K shorter than one step, two-column and rank-8 sides),
/// for buffer operands (-O0: loaded one value or, where 4 divides, four values at a time, row-major
/// or transposed) and R-Tile image operands (-O3), gives the reference executor's
/// results within `--check`'s bound (each output sums in the reference's order; the device may
/// fuse a multiply-add). Two tests, so that the test runner runs the levels side by side.
#[test]
fn every_contraction_parameter_set_matches_the_reference_executor_on_buffers() {
    every_contraction_parameter_set_matches_the_reference_executor(false);
}

#[test]
fn every_contraction_parameter_set_matches_the_reference_executor_on_images() {
    every_contraction_parameter_set_matches_the_reference_executor(true);
}

fn every_contraction_parameter_set_matches_the_reference_executor(o3: bool) {
    if !have_device() {
        return;
    }
    // Sides of at most 16 outputs take the skinny kernel instead: see the next test.
    // (M, N, K, transpose_a, transpose_b): odd extents (scalar loads only); extents that 4
    // divides but no block or k step does, the operands row-major or transposed, so that buffer
    // operands load four values at a time along the reduction or along their rows/columns.
    let shapes: [(u64, u64, u64, bool, bool); 7] = [
        (37, 29, 9, false, false),
        (70, 130, 67, false, false),
        (300, 17, 33, false, false),
        (64, 64, 64, false, false),
        (36, 44, 20, false, false),
        (36, 44, 20, true, false),
        (52, 28, 12, false, true),
    ];
    // Edge register blocks and k steps, with and without register prefetch (a tile smaller
    // than the work-group, a share that is not a whole number of items per work-item), then
    // every parameter set `fbc tune` may pick.
    let edges: [fbc::tuning::Candidate; 6] = [
        ([16, 16], [1, 1], 1, 4, true, false),
        ([16, 16], [1, 1], 1, 4, true, true),
        ([16, 16], [2, 8], 4, 4, true, false),
        ([16, 16], [2, 8], 4, 4, true, true),
        ([16, 16], [8, 2], 64, 1, true, false),
        ([16, 16], [8, 2], 64, 1, true, true),
    ];
    let params: Vec<fbc::tuning::Candidate> =
        edges.iter().chain(fbc::tuning::CANDIDATES).copied().collect();
    for (m, n, k, ta, tb) in shapes {
        // Four-wide buffer loads are on by default; the shapes that 4 divides run with and
        // without them on buffers (-O0; at -O3 the operands are images), over a few edge and
        // tuner sets (each set is a kernel that PoCL compiles, for minutes in all when cold).
        let quad_shape = k % 4 == 0 && m % 4 == 0 && n % 4 == 0 && m != 64;
        if quad_shape && o3 {
            continue;
        }
        let quad_sets = [edges[1], edges[3], params[edges.len()], params[edges.len() + 6]];
        let (sets, widths): (&[fbc::tuning::Candidate], &[bool]) =
            if quad_shape { (&quad_sets, &[true, false]) } else { (&params, &[true]) };
        let text = matmul_module(m, n, k, ta, tb);
        let original = common::parse(&text);
        let inputs = fbc_runtime::interp::random_inputs(&original, "main", 5).expect("inputs");
        let mut quads = 0;
        for (&cand, &vector_loads) in sets.iter().flat_map(|c| widths.iter().map(move |w| (c, w))) {
            let prefetch = cand.5;
            let profile = fbc_target::builtin("generic").expect("generic");
            let lowered = if o3 {
                common::lower_o3(&text, false, &profile).expect("lowers").0
            } else {
                common::lower_o0(&text, &profile).expect("lowers")
            };
            let f = lowered.find_func("main").expect("main");
            let want = fbc_runtime::interp::Interpreter::new(&lowered)
                .run_id(f, inputs.clone())
                .expect("reference executor");
            let case = format!(
                "{m}x{n}x{k} ta={ta} tb={tb} -O{} {cand:?} vector_loads={vector_loads}",
                if o3 { 3 } else { 0 }
            );
            let mut kernels = fbc::tuning::with_candidate(&profile, cand);
            kernels.contraction.vector_loads = vector_loads;
            let (out, got) = write_and_run_main(&lowered, kernels, &inputs, &case);
            assert!(out.manifest.functions[0].launches().any(|l| l.tiled), "{case}: not tiled");
            assert_eq!(out.source.contains("Bs_next[u] = "), prefetch, "{case}: prefetch");
            let loaded = out.source.contains("loaded as float4");
            assert!(vector_loads || !loaded, "{case}: four-wide loads where they are off");
            quads += usize::from(loaded);
            within_check_bound(&want[0], &got.results[0], &case);
        }
        // Buffer operands (all of them at -O0) load four values at a time where 4 divides.
        assert!(!quad_shape || quads > 0, "{m}x{n}x{k}: no four-wide loads");
    }
}

/// Products with a side of at most 16 outputs (LoRA's rank side) run the skinny kernel, in both
/// of its forms (lanes along the reduction where the wide operand is contiguous along it, lanes
/// along the wide side where it is contiguous along that), on buffers (-O0) and R-Tile images
/// (-O3), and give the reference executor's results within `--check`'s bound: ranks 1, 2, 3, 4,
/// 8 and 16 on either side (rank 1: a matrix-vector product), reductions that the lanes' stride does not divide (19, 33, 70, 600)
/// and one shorter than the 32 lanes, split in two (`split-k=2`, chunks and a tail) and
/// unsplit. A product without a skinny kernel is one whose reduction (chunk) is shorter than
/// `fbc_target::SKINNY_WIDE_MIN_K`, which the tiled kernel takes where the lanes would run
/// along the wide side.
#[test]
fn skinny_contractions_match_the_reference_executor() {
    if !have_device() {
        return;
    }
    // (M, K, N, transpose_a, transpose_b)
    let shapes: [(u64, u64, u64, bool, bool); 13] = [
        // Matrix-vector products (a decode step's projections): one row, or one column.
        (1, 2048, 512, false, false),
        // Lanes along k over several trips (batches of prefetched trips: see below), a wide
        // side that the group's block does not divide, and three outputs a row.
        (100, 1000, 8, false, false),
        (600, 1024, 3, false, false),
        (1, 300, 260, false, true),
        (700, 290, 1, false, false),
        (512, 40, 8, false, false),
        (300, 33, 2, false, false),
        (1000, 70, 4, false, true),
        (37, 19, 16, false, false),
        (16, 600, 700, true, false),
        (3, 256, 1024, true, false),
        (640, 96, 8, true, false),
        (8, 512, 256, false, false),
    ];
    let mut forms = std::collections::BTreeSet::new();
    let mut prefetched = 0;
    let profile = fbc_target::builtin("generic").expect("generic");
    for (m, k, n, ta, tb) in shapes {
        let text = matmul_module(m, n, k, ta, tb);
        let original = common::parse(&text);
        let inputs = fbc_runtime::interp::random_inputs(&original, "main", 5).expect("inputs");
        for (o3, split) in [(false, "off"), (false, "2"), (true, "off"), (true, "2")] {
            let lowered = if o3 {
                common::lower_o3_with(&text, &profile, split).expect("lowers")
            } else {
                common::lower_o0_with(&text, &profile, split).expect("lowers")
            };
            let f = lowered.find_func("main").expect("main");
            let want = fbc_runtime::interp::Interpreter::new(&lowered)
                .run_id(f, inputs.clone())
                .expect("reference executor");
            let case =
                format!("{m}x{k}x{n} ta={ta} tb={tb} -O{} split-k {split}", if o3 { 3 } else { 0 });
            let kernels = fbc_codegen::opencl::KernelOptions::for_target(&profile);
            let (out, got) = write_and_run_main(&lowered, kernels.clone(), &inputs, &case);
            let form = out.source.lines().find_map(|l| {
                let l = l.trim_start().strip_prefix("// skinny ")?;
                Some(if l.contains("work-items along k") { "k" } else { "wide" })
            });
            // Lanes along k with the reads of up to 4 trips issued together: the same sums in
            // the same order, so the same bits.
            if form == Some("k") {
                let mut batched = kernels;
                batched.skinny.prefetch_trips = 4;
                let (out4, got4) = write_and_run_main(&lowered, batched, &inputs, &case);
                if out4.source.contains("all issued before the first of their barriers") {
                    prefetched += 1;
                }
                let bits = |v: &fbc_runtime::interp::Value| -> Vec<u32> {
                    v.as_f32().expect("f32").data().iter().map(|x| x.to_bits()).collect()
                };
                assert_eq!(bits(&got.results[0]), bits(&got4.results[0]), "{case}: prefetched");
            }
            // In row-major buffers (-O0) the wide operand is contiguous along k where it is
            // `a` untransposed or `b` transposed; R-Tile images (-O3) may place it either way.
            let along_k = if n <= fbc_target::SKINNY_SIDE && m >= n { !ta } else { tb };
            let chunk = if split == "2" { k / 2 } else { k };
            match form {
                Some(form) => _ = forms.insert((o3, form)),
                None => assert!(
                    chunk < fbc_target::SKINNY_WIDE_MIN_K && (o3 || !along_k),
                    "{case}: no skinny kernel\n{}",
                    out.source
                ),
            }
            within_check_bound(&want[0], &got.results[0], &case);
        }
    }
    let all: std::collections::BTreeSet<_> =
        [(false, "k"), (false, "wide"), (true, "k"), (true, "wide")].into_iter().collect();
    assert_eq!(forms, all, "both forms at both levels");
    assert!(prefetched >= 4, "{prefetched} kernels with batches of prefetched trips");
}

/// Asserts that the f32 result `got` is within `--check`'s bound of the reference `want` (the
/// device may fuse `acc + a·b` into one rounding, and sum in another order).
fn within_check_bound(
    want: &fbc_runtime::interp::Value,
    got: &fbc_runtime::interp::Value,
    case: &str,
) {
    let (w, g) = (want.as_f32().expect("f32"), got.as_f32().expect("f32"));
    let big = w.data().iter().fold(0.0f32, |m, x| m.max(x.abs()));
    assert_eq!(g.data().len(), w.data().len(), "{case}");
    for (i, (x, y)) in g.data().iter().zip(w.data()).enumerate() {
        let bound = 1e-5 + 1e-4 * (y.abs() + big);
        assert!((x - y).abs() <= bound, "{case}: element {i}: {x} vs {y}");
    }
}

/// Writes the lowered module `lowered` as OpenCL C with `kernels` and runs its `@main` on the
/// device with `inputs` (a failure panics naming `case`).
fn write_and_run_main(
    lowered: &fbc_ir::Module,
    kernels: fbc_codegen::opencl::KernelOptions,
    inputs: &[fbc_runtime::interp::Value],
    case: &str,
) -> (fbc_codegen::opencl::Output, fbc_runtime::device::opencl::RunOutput) {
    let (out, run) = common::run_main_on_device(lowered, kernels, inputs);
    (out, run.unwrap_or_else(|e| panic!("{case}: {e}")))
}

// ----- f16 images -----

/// The spacing of `f16` numbers at `x` (`2^-24` below the normal range).
fn f16_ulp(x: f32) -> f64 {
    let a = f64::from(x.abs());
    if a < 2f64.powi(-14) {
        return 2f64.powi(-24);
    }
    2f64.powi(a.log2().floor() as i32 - 10)
}

/// The matmul, attention and elementwise-chain cases of `half_images.rs`, lowered at -O3 with f16
/// images for the generic profile, run on the device and by the reference executor (the
/// interpreter on the lowered module) on the same inputs.
#[test]
fn half_images_on_the_device_match_the_reference_executor() {
    if !have_device() {
        return;
    }
    let generic = fbc_target::builtin("generic").expect("generic");
    for (name, text) in common::half_image_cases() {
        let original = common::parse(&text);
        let inputs = fbc_runtime::interp::random_inputs(&original, "main", 11).expect("inputs");
        let (lowered, stats) = common::lower_o3(&text, true, &generic).expect("lowers");
        assert!(stats.get("lower-to-memory", "half-images") > 0, "{name}: no f16 images");
        let f = lowered.find_func("main").expect("main");
        let reference = fbc_runtime::interp::Interpreter::new(&lowered)
            .run_id(f, inputs.clone())
            .expect("reference executor");
        let mut kernels = fbc_codegen::opencl::KernelOptions::for_target(&generic);
        kernels.tiled = true;
        let (_, run) = write_and_run_main(&lowered, kernels, &inputs, name);
        let r = reference[0].as_f32().expect("f32").data().to_vec();
        let d = run.results[0].as_f32().expect("f32").data().to_vec();
        assert_eq!(r.len(), d.len());
        let exact = r.iter().zip(&d).filter(|(a, b)| a.to_bits() == b.to_bits()).count();
        let worst = r
            .iter()
            .zip(&d)
            .map(|(&a, &b)| (f64::from(a) - f64::from(b)).abs() / f16_ulp(a))
            .fold(0.0f64, f64::max);
        eprintln!("{name}: {exact} of {} bit-identical, worst {worst:.3} f16 ulp", r.len());
        assert!(worst <= 1.0, "{name}: {worst} f16 ulp from the reference executor");
        // The tiled contraction sums in the reference's order and the device rounds to nearest
        // even like `round_f16` (PoCL, measured): the matmul is bit-identical. (The others may
        // differ where the device's `exp`/`erf` differ from libm's in the last f32 bit.)
        if name == "matmul" {
            assert_eq!(exact, r.len(), "{name}");
        }
    }
}

/// A buffer written into an f16 image by a launch (the device rounds at `write_imagef`) and
/// copied back to a buffer.
const HALF_ROUNDING: &str = r#"func.func @main(%x: tensor<12xf32>) -> tensor<12xf32> {
  %b = memory.upload %x {layout = #layout.linear} : (tensor<12xf32>) -> !memory.buffer<12, f32>
  %i = memory.alloc : () -> !memory.image2d<[3, 1], f16>
  memory.launch %b, %i {kernel = "to_half", source = "layout.convert", domain = [1, 3, 4], iterators = ["parallel", "parallel", "parallel"], maps = [(d0, d1, d2) -> (d1 * 4 + d2), (d0, d1, d2) -> (d1, d0, d2)], body = "x0"} : (!memory.buffer<12, f32>, !memory.image2d<[3, 1], f16>) -> ()
  %o = memory.alloc : () -> !memory.buffer<12, f32>
  memory.launch %i, %o {kernel = "from_half", source = "layout.convert", domain = [3, 4], iterators = ["parallel", "parallel"], maps = [(d0, d1) -> (d0, 0, d1), (d0, d1) -> (d0 * 4 + d1)], body = "x0"} : (!memory.image2d<[3, 1], f16>, !memory.buffer<12, f32>) -> ()
  %y = memory.download %o {layout = #layout.linear} : (!memory.buffer<12, f32>) -> tensor<12xf32>
  func.return %y : tensor<12xf32>
}
"#;

#[test]
fn half_image_stores_round_to_nearest_even_on_the_device() {
    if !have_device() {
        return;
    }
    let x: Vec<f32> = vec![
        1.0001,
        1.0009,
        1.0 + 2f32.powi(-11),
        1.0 + 3.0 * 2f32.powi(-11),
        65519.0,
        65520.0,
        2f32.powi(-25),
        0.75 * 2f32.powi(-24),
        0.1,
        -1.0009,
        1.0e6,
        1.0e-8,
    ];
    // Round to nearest, ties to even (a device rounding toward zero would give 1 + 2^-10 for the
    // fourth, 65504 for the sixth and the eleventh, and 0 for the eighth).
    let want: Vec<f32> = vec![
        1.0,
        1.0 + 2f32.powi(-10),
        1.0,
        1.0 + 2f32.powi(-9),
        65504.0,
        f32::INFINITY,
        0.0,
        2f32.powi(-24),
        0.099_975_586,
        -(1.0 + 2f32.powi(-10)),
        f32::INFINITY,
        0.0,
    ];
    let dir = common::scratch("ocl-half-rounding");
    let p = write_tmp("half_rounding.fbir", HALF_ROUNDING);
    let inputs = common::write(&dir, "x.safetensors", &safetensors_f32("x", &x));
    let out = dir.join("y.safetensors");
    let run = |target: &str| {
        let o = common::fbc(&[
            "run",
            p.to_str().unwrap_or_default(),
            "--target",
            target,
            "--inputs",
            &inputs,
            "--outputs",
            out.to_str().unwrap_or_default(),
        ]);
        assert_eq!(o.code, 0, "{target}: {}", o.stderr);
        read_safetensors_f32(&std::fs::read(&out).expect("outputs"), "result0")
    };
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    // The reference executor (the interpreter runs the lowered module), the JIT and the device.
    assert_eq!(bits(&run("cpu")), bits(&want));
    assert_eq!(bits(&run("cpu-jit")), bits(&want));
    assert_eq!(bits(&run("opencl")), bits(&want));
}

#[test]
fn attention_with_half_images_passes_check_with_the_f16_bound() {
    if !have_device() {
        return;
    }
    let (_, text) = &common::half_image_cases()[1];
    let p = write_tmp("attention_half.fbir", text);
    let p = p.to_str().unwrap_or_default();
    let args = ["run", p, "--target", "opencl", "--random-inputs", "5", "--check"];
    let max_abs = |o: &common::Out| -> f64 {
        o.stdout
            .lines()
            .filter_map(|l| l.split("max abs error ").nth(1))
            .filter_map(|s| s.split(',').next())
            .filter_map(|s| s.trim().parse::<f64>().ok())
            .fold(f64::NAN, f64::max)
    };
    let o = common::fbc(&[&args[..], &["--half-images"]].concat());
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert!(o.stdout.contains("3.90625e-3·(|model| + max|model|)"), "{}", o.stdout);
    assert!(o.stdout.contains("check passed"), "{}", o.stdout);
    let half = max_abs(&o);
    let o = common::fbc(&args);
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert!(!o.stdout.contains("f16"), "{}", o.stdout);
    let full = max_abs(&o);
    // f16 storage is really on the device: its error is far above f32 storage's, and far below
    // the results (softmax-weighted averages of values in [-1, 1)).
    assert!(half > 10.0 * full && half < 1e-2, "f16 images {half:e}, f32 images {full:e}");
}

/// A safetensors file of an `F32` tensor `f` (shape `fs`) and an `I32` tensor `i` (shape `is`).
fn safetensors_f32_i32(f: (&str, &[u64], &[f32]), i: (&str, &[u64], &[i32])) -> Vec<u8> {
    let (nf, ni) = (f.2.len() * 4, i.2.len() * 4);
    let shape = |s: &[u64]| s.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
    let header = format!(
        r#"{{"{}":{{"dtype":"F32","shape":[{}],"data_offsets":[0,{nf}]}},"{}":{{"dtype":"I32","shape":[{}],"data_offsets":[{nf},{}]}}}}"#,
        f.0,
        shape(f.1),
        i.0,
        shape(i.1),
        nf + ni
    );
    let mut b = (header.len() as u64).to_le_bytes().to_vec();
    b.extend(header.as_bytes());
    f.2.iter().for_each(|x| b.extend(x.to_le_bytes()));
    i.2.iter().for_each(|x| b.extend(x.to_le_bytes()));
    b
}

/// Data-dependent indices out of range (embedding ids of -2^31, the table size and 2^31-1;
/// cross-entropy labels of -2^31, the class count and 2^31-1) stop every back end with an error
/// at the op (exit 1, no outputs file): the interpreter names the id or label, the CPU JIT and
/// the OpenCL kernels (which check the gather when they run: PoCL's device memory is this
/// process's heap, unchecked they crashed or read another row) the same offset and point, in
/// the reference executor's words. In range, `--check` passes.
#[test]
fn out_of_range_ids_and_labels_are_located_errors_on_every_back_end() {
    if !have_device() {
        return;
    }
    let dir = common::scratch("gathers");
    let emb = common::write(
        &dir,
        "emb.fbir",
        module(
            "%table: tensor<10x4xf32>, %ids: tensor<3xi32>",
            "  %r = tensor.embedding %table, %ids : (tensor<10x4xf32>, tensor<3xi32>) -> tensor<3x4xf32>",
            "tensor<3x4xf32>",
        )
        .as_bytes(),
    );
    let ce = common::write(
        &dir,
        "ce.fbir",
        module(
            "%x: tensor<4x5xf32>, %labels: tensor<4xi32>",
            "  %r = tensor.cross_entropy %x, %labels : (tensor<4x5xf32>, tensor<4xi32>) -> tensor<f32>",
            "tensor<f32>",
        )
        .as_bytes(),
    );
    let table: Vec<f32> = (0..40).map(|v| v as f32).collect();
    let logits: Vec<f32> = (0..20).map(|v| v as f32 * 0.1).collect();
    // (file, inputs, what the interpreter says, what the kernels say)
    let mut cases = Vec::new();
    for (id, off) in [(i32::MIN, -8589934592i64), (10, 40), (i32::MAX, 8589934588)] {
        let inputs = safetensors_f32_i32(("table", &[10, 4], &table), ("ids", &[3], &[2, id, 0]));
        cases.push((
            &emb,
            common::write(&dir, &format!("emb{id}.safetensors"), &inputs),
            format!("embedding: id {id} at index [1] is out of range 0..10"),
            format!("x0[{off}] is outside operand 0 (40 elements) at domain index [1, 0]"),
        ));
    }
    // Label 5 would read the next row's first logit (offset 15) without the lowering's check.
    for (label, off) in [(i32::MIN, i64::from(i32::MIN)), (5, 20), (i32::MAX, 2147483662)] {
        let inputs =
            safetensors_f32_i32(("x", &[4, 5], &logits), ("labels", &[4], &[1, 0, label, 4]));
        cases.push((
            &ce,
            common::write(&dir, &format!("ce{label}.safetensors"), &inputs),
            format!("cross_entropy: label {label} at index [2] is out of range 0..5"),
            format!("x3[{off}] is outside operand 3 (20 elements) at domain index [0, 2]"),
        ));
    }
    let mut failed = Vec::new();
    for (file, inputs, interp, kernel) in &cases {
        for (target, level) in [
            ("cpu", "-O3"),
            ("cpu-jit", "-O0"),
            ("cpu-jit", "-O3"),
            ("opencl", "-O0"),
            ("opencl", "-O3"),
        ] {
            let out = dir.join("out.safetensors");
            let _ = std::fs::remove_file(&out);
            let o = common::fbc(&[
                "run",
                file,
                "--inputs",
                inputs,
                "--target",
                target,
                level,
                "--outputs",
                out.to_str().unwrap_or_default(),
            ]);
            let want = if target == "cpu" { interp } else { kernel };
            let at = format!("{file}:2:3: error: ");
            let ok = o.code == 1
                && o.stderr.starts_with(&at)
                && o.stderr.lines().next().is_some_and(|l| l.ends_with(want.as_str()))
                && !out.exists();
            if !ok {
                failed.push(format!("{target} {level} {inputs}: exit {}\n{}", o.code, o.stderr));
            }
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
    // In range, the checked gathers compute the interpreter's values.
    let ok = std::path::Path::new(&emb);
    check(ok, 3, &[]).expect("embedding -O3");
    check(ok, 0, &[]).expect("embedding -O0");
    let ok = std::path::Path::new(&ce);
    check(ok, 3, &[]).expect("cross_entropy -O3");
    check(ok, 0, &[]).expect("cross_entropy -O0");
}

/// Accesses the bounds prover leaves undecided are checked by the kernel when it runs (a remap
/// whose map is too irregular for the prover's budget: the same error and point as the CPU
/// JIT); accesses it refutes are verifier errors before any device work, however large the
/// domain (10^12 points under a guard).
#[test]
fn undecided_accesses_are_checked_and_refuted_ones_never_run() {
    if !have_device() {
        return;
    }
    let dir = common::scratch("opencl-bounds");
    let text = "func.func @main(%x: tensor<10006xf32>) -> tensor<1000x1000xf32> {\n  %y = layout.remap %x {map = (d0, d1) -> ((d0 * d1 + d0 * 7919 + d1 * 104729) mod 10007), shape = [1000, 1000]} : (tensor<10006xf32>) -> tensor<1000x1000xf32>\n  func.return %y : tensor<1000x1000xf32>\n}\n";
    let file = common::write(&dir, "remap.fbir", text.as_bytes());
    for level in ["-O0", "-O3"] {
        let o = common::fbc(&["run", &file, "--random-inputs", "1", "--target", "opencl", level]);
        assert_eq!(o.code, 1, "{}", o.stderr);
        let first = o.stderr.lines().next().unwrap_or_default();
        assert!(
            first.starts_with(&format!("{file}:2:3: error: `memory.launch`: kernel `main_copy_y`: operand 0 (!memory.buffer<10006, f32>) accessed at element 10006, outside its 10006 elements (domain index [")),
            "{}",
            o.stderr
        );
    }
    let huge = "func.func @main(%x: tensor<8xf32>) -> tensor<8xf32> {\n  %m = memory.upload %x {layout = #layout.linear} : (tensor<8xf32>) -> !memory.buffer<8, f32>\n  %o = memory.alloc : () -> !memory.buffer<8, f32>\n  memory.launch %m, %o {kernel = \"k\", domain = [1000000, 1000000], iterators = [\"parallel\", \"parallel\"], maps = [(d0, d1) -> (d0 + d1), (d0, d1) -> (d0 + d1)], body = \"x0\", guard = (d0, d1) -> (d0 + d1), guard_bounds = [8]} : (!memory.buffer<8, f32>, !memory.buffer<8, f32>) -> ()\n  %y = memory.download %o {layout = #layout.linear} : (!memory.buffer<8, f32>) -> tensor<8xf32>\n  func.return %y : tensor<8xf32>\n}\n";
    let file = common::write(&dir, "huge.fbir", huge.as_bytes());
    let out = dir.join("huge.safetensors");
    for target in ["opencl", "cpu-jit", "cpu"] {
        let start = std::time::Instant::now();
        let o = common::fbc(&[
            "run",
            &file,
            "--random-inputs",
            "1",
            "--target",
            target,
            "--outputs",
            out.to_str().unwrap_or_default(),
        ]);
        assert_eq!(o.code, 1, "{}", o.stderr);
        assert!(
            o.stderr.starts_with(&format!("{file}:4:3: error: operand 1 (!memory.buffer<8, f32>) is written at offset 8 at d0=1, d1=7, outside its 8 elements")),
            "{target}: {}",
            o.stderr
        );
        assert!(!out.exists());
        assert!(start.elapsed().as_secs() < 10, "{target}: {:?}", start.elapsed());
    }
}

/// Every file of a `--dump-kernels` directory, concatenated.
fn dumped(dir: &std::path::Path) -> String {
    let mut names: Vec<_> =
        std::fs::read_dir(dir).expect("dump dir").flatten().map(|e| e.path()).collect();
    names.sort();
    names.iter().map(|p| std::fs::read_to_string(p).unwrap_or_default()).collect()
}

/// `fbc tune` times parameter sets on the device and writes a database keyed by the device's
/// name and driver and by shape class; the next run on that device writes the contraction with
/// the tuned parameters (its comment says so) and still matches the interpreter. A database for
/// another device, of another version or cut short is ignored with a warning (exit 0, results
/// still checked), never an error.
#[test]
fn tune_writes_a_database_that_runs_use_and_unusable_ones_are_ignored() {
    if !have_device() {
        return;
    }
    let dir = common::scratch("tune");
    let file = common::write(
        &dir,
        "mm.fbir",
        common::main_module(
            "%a: tensor<64x96xf32>, %b: tensor<96x80xf32>",
            "  %r = tensor.matmul %a, %b : (tensor<64x96xf32>, tensor<96x80xf32>) -> tensor<64x80xf32>",
            "tensor<64x80xf32>",
        )
        .as_bytes(),
    );
    let db = dir.join("tuning.json");
    let db_s = db.to_string_lossy().into_owned();
    let o =
        common::fbc(&["tune", &file, "-O0", "--budget", "1", "--repeat", "1", "--tuning", &db_s]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    // -O0 for `generic` puts the first operand in an image.
    let shape = "b1_m64_n80_k96_ibb";
    assert!(o.stdout.contains(shape) && o.stdout.contains("wrote"), "{}", o.stdout);
    let text = std::fs::read_to_string(&db).expect("database written");
    let parsed = fbc_codegen::opencl::TuningDb::parse(&text).expect("parses");
    let devices = fbc_runtime::device::opencl::devices();
    let dev = &devices[0];
    let entries = parsed.for_device(&dev.name, &dev.driver).expect("entries for the device");
    let t = entries.shapes.get(shape).expect("the matmul's shape class");
    assert!(t.ns > 0 && t.ns <= t.default_ns, "{t:?}");
    // The run uses it.
    let run = |db: &str, tag: &str| {
        let dump = dir.join(format!("dump-{tag}"));
        let d = dump.to_string_lossy().into_owned();
        let o = common::fbc(&[
            "run",
            &file,
            "--target",
            "opencl",
            "-O0",
            "--random-inputs",
            "3",
            "--check",
            "--tuning",
            db,
            "--dump-kernels",
            &d,
        ]);
        assert_eq!(o.code, 0, "{tag}: {}", o.stderr);
        assert!(o.stdout.contains("check passed"), "{tag}: {}", o.stdout);
        (o.stderr, dumped(&dump))
    };
    let (err, src) = run(&db_s, "tuned");
    assert!(err.is_empty(), "{err}");
    let want = format!(
        "// Tuned for this device (fbc tune, shape {shape}): group [{}, {}], per_item [{}, {}], tile_k {}",
        t.group[0], t.group[1], t.per_item[0], t.per_item[1], t.tile_k
    );
    assert!(src.contains(&want), "{want}\n{src}");
    // Unusable databases.
    let foreign =
        text.replace(&format!("\"device\": \"{}\"", dev.name), "\"device\": \"Other GPU\"");
    let version = text.replacen("\"version\": 1", "\"version\": 7", 1);
    let cut = &text[..text.len() / 2];
    for (tag, body, why) in [
        (
            "foreign",
            foreign.as_str(),
            format!("no entries for {} (driver {}); it has Other GPU", dev.name, dev.driver),
        ),
        ("version", version.as_str(), "version 7 (this fbc reads version 1)".to_string()),
        ("cut", cut, "EOF while parsing".to_string()),
    ] {
        let p = common::write(&dir, &format!("{tag}.json"), body.as_bytes());
        let (err, src) = run(&p, tag);
        assert!(
            err.contains(&format!("fbc: warning: ignoring tuning database {p}: {why}")),
            "{tag}: {err}"
        );
        assert!(!src.contains("Tuned for this device"), "{tag}");
    }
}

// ----- memory held -----

/// `src` (a memory-dialect file) after `fbc opt --passes plan-memory`, written under `dir`.
fn planned(src: &str, dir: &std::path::Path) -> String {
    let out = dir.join("planned.fbir");
    let out = out.to_str().expect("utf-8 path").to_string();
    let o = common::fbc(&["opt", src, "--passes", "plan-memory", "-o", &out]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    out
}

/// The first run's figures of `fbc bench FILE --json ARGS`.
fn bench_json(file: &str, args: &[&str]) -> serde_json::Value {
    let o = common::fbc(&[&["bench", file, "--json"], args].concat());
    assert_eq!(o.code, 0, "{}", o.stderr);
    let v: serde_json::Value = serde_json::from_str(&o.stdout).expect("JSON");
    v["runs"][0].clone()
}

/// The runtime's allocation tracker, on the functions of `tests/ir/passes/plan-memory.fbir`
/// planned. Under `--device-memory planned` the device holds exactly plan-memory's slots
/// (`planned_bytes`), with one object per slot; the default pool reuses an object only for
/// storage of its exact size, so it holds what is live at once where sizes repeat (`@f`: 516
/// bytes, as planned) and more than the plan where they do not (`@pad`: the dead upload's 240
/// bytes are not reused for %z's 144; `@grow`: a 16-byte object is not grown to 32;
/// `@stranded`: 484 bytes, the 4-byte upload and both 40-byte buffers on their own, against
/// the plan's 480 and 440 live at once; `@nested`: every object on its own, 512 bytes, where
/// the plan's slot of a [4, 2] image later holds a [2, 2] one, read and written in its corner).
#[test]
fn the_device_holds_what_is_live_at_once_and_bench_reports_it_beside_the_plan() {
    if !have_device() {
        return;
    }
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/ir/passes/plan-memory.fbir");
    let p = planned(src, &common::scratch("memory-held"));
    // (entry, live at once, planned, held by the pool, slots)
    for (entry, live, plan, pooled, slots) in [
        ("f", 516, 516, 516, 3),
        ("pad", 816, 816, 960, 3),
        ("stranded", 440, 480, 484, 3),
        ("grow", 48, 48, 64, 2),
        ("nested", 256, 384, 512, 3),
    ] {
        let run = bench_json(&p, &["--entry", entry, "--repeat", "1"]);
        assert_eq!(run["peak_bytes"], live, "@{entry}: live at once");
        assert_eq!(run["planned_bytes"], plan, "@{entry}: planned");
        assert_eq!(run["device_peak_bytes"], pooled, "@{entry}: held by the pool");
        let run =
            bench_json(&p, &["--entry", entry, "--repeat", "2", "--device-memory", "planned"]);
        assert_eq!(run["device_peak_bytes"], plan, "@{entry}: held as planned");
        assert_eq!(run["objects_made"], slots, "@{entry}: one object per slot, made once");
        check(std::path::Path::new(&p), 3, &["--entry", entry, "--device-memory", "planned"])
            .unwrap_or_else(|e| panic!("@{entry}: {e}"));
    }
}

/// A training step (one Llama layer, forward and backward) under `--device-memory planned`:
/// tenants of a slot share one device object, whatever their sizes, and the results are the
/// interpreter's; the device holds the plan's peak.
#[test]
fn a_training_step_runs_in_plan_memorys_slots() {
    if !have_device() {
        return;
    }
    let path = common::training_step("ocl-train-planned");
    for &(level, strategy) in &CONFIGS[..2] {
        let args =
            ["--layout-strategy", strategy, "--entry", "loss_grad", "--device-memory", "planned"];
        check(&path, level, &args).unwrap_or_else(|e| panic!("-O{level} {strategy}: {e}"));
    }
    let p = path.to_str().expect("utf-8 path");
    let run = bench_json(
        p,
        &["-O3", "--entry", "loss_grad", "--repeat", "1", "--device-memory", "planned"],
    );
    assert_eq!(run["device_peak_bytes"], run["planned_bytes"]);
    assert!(run["planned_bytes"].as_u64() >= run["peak_bytes"].as_u64());
}

/// `--device-memory`: on a schedule whose later storage fits no freed object (`%b`, `%c` are
/// smaller than `%x` and `%a`), the pool keeps every object (704 bytes: 256 + 256 + 64 + 128),
/// while `live-peak` releases `%x`'s before making `%b` and holds the live peak, 512 bytes, and
/// `planned` holds plan-memory's two slots (`%x` then `%b`, `%a` then `%c`: 512 bytes, two
/// objects); the results are the interpreter's either way.
#[test]
fn device_memory_live_peak_holds_no_more_than_is_live_at_once() {
    if !have_device() {
        return;
    }
    let text = "\
func.func @h(%x: tensor<64xf32>) -> tensor<32xf32> {
  %x_m = memory.upload %x {layout = #layout.linear} : (tensor<64xf32>) -> !memory.buffer<64, f32>
  %a_m = memory.alloc : () -> !memory.buffer<64, f32>
  memory.launch %x_m, %a_m {body = \"exp(x0)\", domain = [64], iterators = [\"parallel\"], kernel = \"h_exp_a\", maps = [(d0) -> (d0), (d0) -> (d0)], source = \"tensor.exp\"} : (!memory.buffer<64, f32>, !memory.buffer<64, f32>) -> ()
  %b_m = memory.alloc : () -> !memory.buffer<16, f32>
  memory.launch %a_m, %b_m {body = \"x0\", domain = [16], iterators = [\"parallel\"], kernel = \"h_head_b\", maps = [(d0) -> (d0), (d0) -> (d0)], source = \"tensor.slice\"} : (!memory.buffer<64, f32>, !memory.buffer<16, f32>) -> ()
  %c_m = memory.alloc : () -> !memory.buffer<32, f32>
  memory.launch %b_m, %c_m {body = \"x0 * 2.0\", domain = [32], iterators = [\"parallel\"], kernel = \"h_tile_c\", maps = [(d0) -> (d0 mod 16), (d0) -> (d0)], source = \"tensor.tile\"} : (!memory.buffer<16, f32>, !memory.buffer<32, f32>) -> ()
  %c = memory.download %c_m {layout = #layout.linear} : (!memory.buffer<32, f32>) -> tensor<32xf32>
  func.return %c : tensor<32xf32>
}
";
    let src = write_tmp("device-memory.fbir", text);
    let p = planned(src.to_str().expect("utf-8 path"), &common::scratch("device-memory"));
    // Objects made over the three runs (a warm-up and two timed): the pool makes the first run's
    // four and no more; live-peak releases objects to stay at the live peak and makes them
    // again in every run.
    for (mode, held) in [("pooled", 704), ("live-peak", 512), ("planned", 512)] {
        let run = bench_json(&p, &["--repeat", "2", "--device-memory", mode]);
        assert_eq!(run["peak_bytes"], 512, "{mode}: live at once");
        assert_eq!(run["device_peak_bytes"], held, "{mode}: held on the device");
        let made = run["objects_made"].as_u64().unwrap_or(0);
        if mode == "pooled" {
            assert_eq!(made, 4, "{mode}: objects made in three runs");
        } else if mode == "planned" {
            assert_eq!(made, 2, "{mode}: objects made in three runs");
        } else {
            assert!(made > 3 * 2, "{mode}: {made} objects made in three runs");
        }
        let path = std::path::Path::new(&p);
        check(path, 3, &["--device-memory", mode]).unwrap_or_else(|e| panic!("{mode}: {e}"));
    }
}

/// `tensor.update_slice` written in place with its offset as a map symbol: an offset from which
/// the update does not fit is an error at the op (exit status 1, no output file) on the
/// interpreter, the CPU JIT and the device, each saying what was out of range; in range, the
/// device's result is the interpreter's bit for bit.
#[test]
fn update_slice_offsets_are_checked_on_every_back_end() {
    let text = "func.func @main(%cache: tensor<2x3x6x4xf32>, %new: tensor<2x3x2x4xf32>, %pos: tensor<i32>) -> tensor<2x3x6x4xf32> {\n  %c = tensor.update_slice %cache, %new, %pos {axis = 2} : (tensor<2x3x6x4xf32>, tensor<2x3x2x4xf32>, tensor<i32>) -> tensor<2x3x6x4xf32>\n  func.return %c : tensor<2x3x6x4xf32>\n}\n";
    let p = write_tmp("update_slice.fbir", text);
    let inputs = |pos: i32| {
        let cache: Vec<u8> = (0..144).flat_map(|i| (i as f32).to_le_bytes()).collect();
        let new: Vec<u8> = (0..48).flat_map(|i| (-1.0 - i as f32).to_le_bytes()).collect();
        let pos = pos.to_le_bytes().to_vec();
        use safetensors::Dtype;
        fn view(
            dtype: Dtype,
            shape: Vec<usize>,
            data: &[u8],
        ) -> safetensors::tensor::TensorView<'_> {
            safetensors::tensor::TensorView::new(dtype, shape, data).expect("view")
        }
        let tensors = vec![
            ("cache", view(Dtype::F32, vec![2, 3, 6, 4], &cache)),
            ("new", view(Dtype::F32, vec![2, 3, 2, 4], &new)),
            ("pos", view(Dtype::I32, vec![], &pos)),
        ];
        let bytes = safetensors::tensor::serialize(tensors, None).expect("serialize");
        let path = write_tmp(&format!("update_slice_{pos:?}.safetensors"), "");
        std::fs::write(&path, bytes).expect("write");
        path
    };
    let run = |pos: i32, target: &str, out: &std::path::Path| {
        common::fbc(&[
            "run",
            p.to_str().unwrap_or_default(),
            "--inputs",
            inputs(pos).to_str().unwrap_or_default(),
            "--target",
            target,
            "--outputs",
            out.to_str().unwrap_or_default(),
        ])
    };
    let device = have_device();
    let cases = [
        ("cpu", "update_slice: offset 5 is out of range: 2 slices from it must fit in 6 along axis 2, so it must be from 0 to 4"),
        ("cpu-jit", "kernel `main_update_slice_c`: symbol s0 (element 0 of operand 1) is 5, outside 0..=4"),
        ("opencl", "kernel `main_update_slice_c`: the symbol read from operand 1 is 5, outside 0..=4 (nothing was written)"),
    ];
    for (target, message) in cases {
        if target == "opencl" && !device {
            continue;
        }
        let out = p.with_extension(format!("{target}.bad.safetensors"));
        let o = run(5, target, &out);
        assert_eq!(o.code, 1, "{target}: {}", o.stderr);
        let first = o.stderr.lines().next().unwrap_or_default();
        assert!(first.starts_with(&format!("{}:2:3: error: ", p.display())), "{target}: {first}");
        assert!(first.ends_with(message), "{target}: {first}");
        assert!(!out.exists(), "{target}: an output file was left behind");
    }
    // In range: the device writes the window in place, as the interpreter computes it.
    let want = p.with_extension("cpu.safetensors");
    assert_eq!(run(3, "cpu", &want).code, 0);
    for target in ["cpu-jit", "opencl"] {
        if target == "opencl" && !device {
            continue;
        }
        let got = p.with_extension(format!("{target}.safetensors"));
        let o = run(3, target, &got);
        assert_eq!(o.code, 0, "{target}: {}", o.stderr);
        let (a, b) = (std::fs::read(&want).expect("read"), std::fs::read(&got).expect("read"));
        assert_eq!(
            read_safetensors_f32(&a, "result0"),
            read_safetensors_f32(&b, "result0"),
            "{target}"
        );
    }
}

/// `fbc generate` on the device gives the interpreter's tokens (a one-layer Llama, random
/// weights), and reports the device memory a call held and the bytes a decode step moved.
#[test]
fn generate_on_the_device_gives_the_interpreters_tokens() {
    if !have_device() {
        return;
    }
    let text = common::inference_module("llama3.2-1b", 6, 48, 12);
    let p = write_tmp("generate.fbir", &text);
    let p = p.to_str().unwrap_or_default();
    let run = |extra: &[&str]| {
        let mut args =
            vec!["generate", p, "--random-weights", "5", "--prompt", "3,17,8", "--max-new", "3"];
        args.extend_from_slice(extra);
        let o = common::fbc(&args);
        assert_eq!(o.code, 0, "{extra:?}: {}", o.stderr);
        o
    };
    let reference = run(&[]);
    let device = run(&["--target", "opencl"]);
    assert_eq!(device.stdout, reference.stdout);
    assert!(device.stderr.contains(", peak device memory "), "{}", device.stderr);
    // The weights and the caches stay on the device: a decode step uploads the token, the
    // position and two RoPE rows of 64, and reads back 48 logits.
    let moved = "; the last decode step uploaded 520 bytes and read back 192\n";
    assert!(device.stderr.ends_with(moved), "{}", device.stderr);
    // With the nvidia profile's merged launches (the K and V cache updates one launch), the
    // same: the merged launch writes both caches in place.
    let merged = run(&["--target", "opencl", "--profile", "nvidia"]);
    assert_eq!(merged.stdout, reference.stdout);
    assert!(merged.stderr.ends_with(moved), "{}", merged.stderr);
    // The same tokens without the fused attention kernel (its caches too are updated in place).
    let unfused = run(&["--target", "opencl", "--disable-pass", "fuse-attention"]);
    assert_eq!(unfused.stdout, reference.stdout);
    assert!(unfused.stderr.ends_with(moved), "{}", unfused.stderr);
    // Under a budget of two thirds of what the unconstrained run held (a one-layer model: its
    // gated MLP's weights alone are more than half), the same tokens: every
    // weight goes up at every call (preloaded or streamed during earlier launches), the caches
    // stay on the device, and the device never holds more than the budget.
    let peak = |log: &str| -> u64 {
        let at = log.find(", peak device memory ").expect("a peak") + ", peak device memory ".len();
        log[at..].split_whitespace().next().and_then(|w| w.parse().ok()).expect("a number")
    };
    let budget = peak(&device.stderr) / 3 * 2;
    let tight = run(&["--target", "opencl", "--memory-budget", &budget.to_string()]);
    assert_eq!(tight.stdout, reference.stdout);
    assert!(peak(&tight.stderr) <= budget, "{budget}: {}", tight.stderr);
    let up = tight.stderr.split("uploaded ").nth(1).and_then(|t| t.split(' ').next());
    let up: u64 = up.and_then(|u| u.parse().ok()).expect("uploaded bytes");
    assert!(up > 100 * 520, "{}", tight.stderr);
    // On other targets the flag is refused.
    let o = common::fbc(&[
        "generate",
        p,
        "--random-weights",
        "5",
        "--prompt",
        "3",
        "--memory-budget",
        "1MiB",
    ]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("--memory-budget is for --target opencl"), "{}", o.stderr);
}

/// `text` lowered at -O3 for the generic profile, and its OpenCL C and manifest.
fn generic_o3_opencl(text: &str) -> (fbc_ir::Module, fbc_codegen::opencl::Output) {
    let profile = fbc_target::builtin("generic").expect("generic");
    let m = common::lower_o3_with(text, &profile, "auto").expect("lowers");
    let opts = fbc_codegen::opencl::Options {
        kernels: fbc_codegen::opencl::KernelOptions::for_target(&profile),
        ..Default::default()
    };
    let out = fbc_codegen::opencl::Writer::new(opts).write(&m).expect("OpenCL C");
    (m, out)
}

/// A session keeps the weights and the caches on the device: a one-layer Llama's `@prefill`
/// and two `@decode` steps through one [`Session`] (weights uploaded at the first call, caches
/// updated in place and never read back) give the bits of three separate runs that upload
/// everything and carry the caches through the host; a decode step then moves only the token,
/// the position, the RoPE rows and the logits; a key that holds nothing is an error.
#[test]
fn a_session_keeps_weights_and_caches_on_the_device() {
    use fbc_runtime::device::opencl::{run, Input, RunOptions, Session};
    use fbc_runtime::interp::Value;
    use fbc_runtime::reference::Tensor;
    if !have_device() {
        return;
    }
    let text = common::inference_module("llama3.2-1b", 4, 48, 12);
    let (m, out) = generic_o3_opencl(&text);
    let man = &out.manifest;
    let i32s = |shape: Vec<usize>, v: Vec<i32>| Value::I32(Tensor::new(shape, v).expect("i32"));
    // Random weights, RoPE rows and caches (the same weights in both functions: the seed and
    // the argument index are), then the tokens and the position.
    let args = |func: &str, tokens: Vec<i32>, pos: i32| {
        let mut v = fbc_runtime::interp::random_inputs(&m, func, 3).expect("inputs");
        v[0] = i32s(vec![1, tokens.len()], tokens);
        v[1] = i32s(Vec::new(), vec![pos]);
        v
    };
    let calls = [("prefill", vec![3, 17, 8, 1], 0), ("decode", vec![5], 4), ("decode", vec![9], 5)];
    let caches = |func: &str| -> Vec<usize> {
        let f = man.function(func).expect("function");
        (0..f.args.len()).filter(|&i| f.args[i].name.ends_with("_cache")).collect()
    };
    // Three runs, each uploading everything; the caches go through the host.
    let ro = RunOptions::default();
    let mut want = Vec::new();
    let mut carried: Vec<Value> = Vec::new();
    for (func, tokens, pos) in &calls {
        let mut host = args(func, tokens.clone(), *pos);
        for (&i, c) in caches(func).iter().zip(carried.drain(..)) {
            host[i] = c;
        }
        let mut r = run(&out.source, man, func, &host, &ro).expect("run").results;
        carried = r.split_off(1);
        want.push(r.remove(0));
    }
    // One session: weights and caches kept under their names.
    let mut session = Session::new(&out.source, man, &ro).expect("session");
    for (c, (func, tokens, pos)) in calls.iter().enumerate() {
        let host = args(func, tokens.clone(), *pos);
        let f = man.function(func).expect("function");
        let in_place = session.in_place(func).expect("in place");
        let cache_args = caches(func);
        // Each cache result is downloaded from the storage its argument was uploaded into.
        for (r, &a) in cache_args.iter().enumerate() {
            assert_eq!(in_place[1 + r], Some(a), "{func}: cache {a}");
        }
        let inputs: Vec<Input<'_>> = host
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let key = f.args[i].name.as_str();
                match i {
                    0..=3 => Input::Host(v),
                    _ => Input::Keep { key, value: (c == 0).then_some(v) },
                }
            })
            .collect();
        let only_logits: Vec<bool> = (0..f.results.len()).map(|r| r == 0).collect();
        let o = session.call(func, &inputs, Some(&only_logits)).expect("call");
        assert!(o.results[1..].iter().all(Option::is_none));
        let logits = o.results[0].as_ref().expect("logits");
        assert_eq!(
            logits.as_f32().expect("f32").data(),
            want[c].as_f32().expect("f32").data(),
            "call {c} (@{func})"
        );
        if c > 0 {
            // tokens (1 i32), pos, two RoPE rows of 64, and back 48 logits.
            assert_eq!((o.uploaded_bytes, o.downloaded_bytes), (4 + 4 + 2 * 64 * 4, 48 * 4));
        }
    }
    // A fresh session holds nothing under a key.
    let mut fresh = Session::new(&out.source, man, &ro).expect("session");
    let host = args("decode", vec![1], 0);
    let f = man.function("decode").expect("decode");
    let inputs: Vec<Input<'_>> =
        host.iter()
            .enumerate()
            .map(|(i, v)| {
                if i < 4 {
                    Input::Host(v)
                } else {
                    Input::Keep { key: &f.args[i].name, value: None }
                }
            })
            .collect();
    let e = fresh.call("decode", &inputs, None).expect_err("nothing kept").to_string();
    assert_eq!(
        e,
        format!(
            "argument 4 ({}) of @decode: nothing is kept under `{}` and no value was given",
            f.args[4].name, f.args[4].name
        )
    );
}

/// A kept value in another storage form: `@a` keeps `w` as a linear buffer, `@b` reads it as an
/// R-Tile image (generic profile, -O3); `@b` called with the key alone reads the buffer back
/// and uploads it as the image, and gives the bits of a run that uploads `w` itself; both forms
/// stay, so a second `@b` and a second `@a` move no byte of `w`. Held (`Input::Held`), the new
/// form is uploaded from the caller's value instead and replaces the other.
#[test]
fn a_kept_value_moves_to_another_storage_form() {
    use fbc_runtime::device::opencl::{run, Input, RunOptions, Session};
    if !have_device() {
        return;
    }
    let text = "module @forms {
  func.func @a(%w: tensor<256x256xf32>) -> tensor<256x256xf32> {
    %r = tensor.add %w, %w : (tensor<256x256xf32>, tensor<256x256xf32>) -> tensor<256x256xf32>
    func.return %r : tensor<256x256xf32>
  }
  func.func @b(%x: tensor<128x256xf32>, %w: tensor<256x256xf32>) -> tensor<128x256xf32> {
    %r = tensor.matmul %x, %w : (tensor<128x256xf32>, tensor<256x256xf32>) -> tensor<128x256xf32>
    func.return %r : tensor<128x256xf32>
  }
}";
    let (m, out) = generic_o3_opencl(text);
    let man = &out.manifest;
    // The two uploads of `w`: a buffer of 65536 floats, and an image.
    let w_storage = |func: &str, arg: usize| {
        let f = man.function(func).expect("function");
        f.steps
            .iter()
            .find_map(|s| match s {
                fbc_codegen::opencl::Step::Upload { arg: a, storage, .. } if *a == arg => {
                    Some(f.storage[*storage].clone())
                }
                _ => None,
            })
            .expect("upload")
    };
    let (wa, wb) = (w_storage("a", 0), w_storage("b", 1));
    assert_eq!(wa.kind, fbc_codegen::opencl::StorageKind::Buffer);
    assert!(matches!(wb.kind, fbc_codegen::opencl::StorageKind::Image2d { .. }), "{wb:?}");
    let a_in = fbc_runtime::interp::random_inputs(&m, "a", 4).expect("inputs");
    let mut b_in = fbc_runtime::interp::random_inputs(&m, "b", 5).expect("inputs");
    b_in[1] = a_in[0].clone();
    let ro = RunOptions::default();
    let want = run(&out.source, man, "b", &b_in, &ro).expect("run").results;
    let mut s = Session::new(&out.source, man, &ro).expect("session");
    let first = s.call("a", &[Input::Keep { key: "w", value: Some(&a_in[0]) }], None).expect("a");
    assert_eq!(first.uploaded_bytes, wa.bytes);
    let b_args = [Input::Host(&b_in[0]), Input::Keep { key: "w", value: None }];
    let b = s.call("b", &b_args, None).expect("b");
    let bits = |v: &fbc_runtime::interp::Value| v.as_f32().expect("f32").data().to_vec();
    assert_eq!(bits(b.results[0].as_ref().expect("r")), bits(&want[0]));
    // x and w's image uploaded; w's buffer and the result read back.
    let result_bytes = 128 * 256 * 4;
    assert_eq!(b.uploaded_bytes, 128 * 256 * 4 + wb.bytes);
    assert_eq!(b.downloaded_bytes, wa.bytes + result_bytes);
    assert_eq!(s.kept_bytes(), wa.bytes + wb.bytes);
    let again = s.call("b", &b_args, None).expect("b again");
    assert_eq!((again.uploaded_bytes, again.downloaded_bytes), (128 * 256 * 4, result_bytes));
    let a = s.call("a", &[Input::Keep { key: "w", value: None }], None).expect("a again");
    assert_eq!((a.uploaded_bytes, a.downloaded_bytes), (0, 256 * 256 * 4));
    // Passed as held (the caller still has the value), a form the key does not hold is uploaded
    // from the value and replaces the other form: nothing is read back and one form stays.
    let mut s = Session::new(&out.source, man, &ro).expect("session");
    let held = Input::Held { key: "w", value: &a_in[0] };
    let first = s.call("a", &[held], None).expect("a");
    assert_eq!((first.uploaded_bytes, s.kept_bytes()), (wa.bytes, wa.bytes));
    let b_args = [Input::Host(&b_in[0]), held];
    let b = s.call("b", &b_args, None).expect("b");
    assert_eq!(bits(b.results[0].as_ref().expect("r")), bits(&want[0]));
    assert_eq!((b.uploaded_bytes, b.downloaded_bytes), (128 * 256 * 4 + wb.bytes, result_bytes));
    assert_eq!(s.kept_bytes(), wb.bytes);
    let again = s.call("b", &b_args, None).expect("b again");
    assert_eq!((again.uploaded_bytes, again.downloaded_bytes), (128 * 256 * 4, result_bytes));
    let a = s.call("a", &[held], None).expect("a again");
    assert_eq!((a.uploaded_bytes, s.kept_bytes()), (wa.bytes, wa.bytes));
}

/// A kept argument that a function overwrites without returning it (an update in place of a
/// dead input) is dropped after the call: the next call cannot take the stale value for it.
#[test]
fn a_kept_argument_overwritten_and_not_returned_is_dropped() {
    use fbc_runtime::device::opencl::{run, Input, RunOptions, Session};
    use fbc_runtime::interp::Value;
    use fbc_runtime::reference::Tensor;
    if !have_device() {
        return;
    }
    let text = "module @inplace {
  func.func @c(%cache: tensor<1x1x8x4xf32>, %new: tensor<1x1x1x4xf32>, %pos: tensor<i32>) -> tensor<1x1x8x4xf32> {
    %u = tensor.update_slice %cache, %new, %pos {axis = 2} : (tensor<1x1x8x4xf32>, tensor<1x1x1x4xf32>, tensor<i32>) -> tensor<1x1x8x4xf32>
    %r = tensor.add %u, %u : (tensor<1x1x8x4xf32>, tensor<1x1x8x4xf32>) -> tensor<1x1x8x4xf32>
    func.return %r : tensor<1x1x8x4xf32>
  }
}";
    let (m, out) = generic_o3_opencl(text);
    let man = &out.manifest;
    let mut inputs = fbc_runtime::interp::random_inputs(&m, "c", 6).expect("inputs");
    inputs[2] = Value::I32(Tensor::new(Vec::new(), vec![3]).expect("pos"));
    let ro = RunOptions::default();
    let want = run(&out.source, man, "c", &inputs, &ro).expect("run").results;
    let mut s = Session::new(&out.source, man, &ro).expect("session");
    // The cache's storage is written by the update but the result is another storage.
    assert_eq!(s.in_place("c").expect("in place"), [None]);
    let call = |s: &mut Session, value| {
        let args =
            [Input::Keep { key: "cache", value }, Input::Host(&inputs[1]), Input::Host(&inputs[2])];
        s.call("c", &args, None)
    };
    let first = call(&mut s, Some(&inputs[0])).expect("first call");
    let bits = |v: &Value| v.as_f32().expect("f32").data().to_vec();
    assert_eq!(bits(first.results[0].as_ref().expect("r")), bits(&want[0]));
    assert_eq!(s.kept_bytes(), 0);
    let e = call(&mut s, None).expect_err("the overwritten value is gone").to_string();
    assert_eq!(e, "argument 0 (cache) of @c: nothing is kept under `cache` and no value was given");
}

#[test]
fn short_products_store_four_columns_at_once_and_match_the_interpreter() {
    if !have_device() {
        return;
    }
    // 132 columns: the last block of 128 is partly past the end, so a run of four may be
    // skipped whole; K = 40 is short enough for four-wide stores.
    let text = module(
        "%a: tensor<2x64x40xf32>, %b: tensor<40x132xf32>",
        "  %y = tensor.matmul %a, %b : (tensor<2x64x40xf32>, tensor<40x132xf32>) -> tensor<2x64x132xf32>\n  %r = tensor.scale %y {factor = 0.5} : (tensor<2x64x132xf32>) -> tensor<2x64x132xf32>",
        "tensor<2x64x132xf32>",
    );
    let p = write_tmp("quad_store.fbir", &text);
    for level in [1, 3] {
        let dump = p.with_extension(format!("O{level}.dump"));
        let d = dump.to_str().unwrap_or_default();
        check(&p, level, &["--profile", "nvidia", "--dump-kernels", d])
            .unwrap_or_else(|e| panic!("-O{level}: {e}"));
        let stores = std::fs::read_dir(&dump)
            .expect("dumped")
            .filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok())
            .filter(|src| src.contains("*(__global float4*)(x"))
            .count();
        assert!(stores >= 1, "-O{level}: no four-wide store in {}", dump.display());
    }
}

/// Rank-8 products into textures whose channel is the rank (a LoRA `x · A` stored as an
/// image): `y` with the lanes along the reduction (`x` contiguous along it), `z` along the rows
/// (`xᵀ` read transposed, a reduction long enough for them).
const NARROW_TEXELS: &str = r#"func.func @main(%x: tensor<256x320xf32>, %xt: tensor<1024x256xf32>, %w: tensor<320x8xf32>, %wl: tensor<1024x8xf32>) -> (tensor<256x8xf32>, tensor<256x8xf32>, tensor<256x8xf32>) {
  %y = tensor.matmul %x, %w {fbc.layout = #layout.rtile<tile = [64, 4], horizontal = 1, pad = [0, 0]>} : (tensor<256x320xf32>, tensor<320x8xf32>) -> tensor<256x8xf32>
  %z = tensor.matmul %xt, %wl {transpose_a = true, fbc.layout = #layout.rtile<tile = [64, 4], horizontal = 1, pad = [0, 0]>} : (tensor<1024x256xf32>, tensor<1024x8xf32>) -> tensor<256x8xf32>
  %t = tensor.tanh %z : (tensor<256x8xf32>) -> tensor<256x8xf32>
  func.return %y, %z, %t : (tensor<256x8xf32>, tensor<256x8xf32>, tensor<256x8xf32>) -> ()
}
"#;

#[test]
fn skinny_products_into_textures_store_a_texel_of_four_narrow_outputs() {
    if !have_device() {
        return;
    }
    let p = write_tmp("narrow_texels.fbir", NARROW_TEXELS);
    let dump = p.with_extension("dump");
    let d = dump.to_str().unwrap_or_default();
    check(&p, 1, &["--split-k", "off", "--dump-kernels", d]).unwrap_or_else(|e| panic!("{e}"));
    for (k, lanes) in [("main_matmul_y", "work-items along k"), ("main_matmul_z", "along row")] {
        let body = dumped_kernel(&dump, k);
        assert!(body.contains(lanes), "{body}");
        assert!(
            body.contains("// A texel of four col indices per store.")
                && body.contains("(float4)(acc0, acc1, acc2, acc3)"),
            "{body}"
        );
    }
}

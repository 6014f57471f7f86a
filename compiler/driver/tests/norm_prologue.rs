//! Prologue fusion (issue 14, `[skinny] norm_prologue`): an RMSNorm whose every reader is a thin
//! product over its normalised axis moves into those products, which sum the squares of the row
//! as a statistic and scale their sum by it. Checked here: which launches remain (and where the
//! fusion must not happen), the lowered module's numbers against the interpreter on the tensor
//! module, and every back end on the fused launches against the reference executor: the OpenCL
//! skinny kernel (lanes along the wide side and along k, split in one launch or not), the
//! OpenCL simple form, and the Cranelift JIT.

mod common;

use fbc_dialects::memory::Kernel;
use fbc_runtime::interp::{Interpreter, Value};

/// The nvidia profile with the prologue fusion on or off.
fn profile(on: bool) -> fbc_target::HardwareProfile {
    let mut p = fbc_target::builtin("nvidia").expect("nvidia");
    p.skinny.norm_prologue = on;
    p
}

/// `@main`: `rows` rows of `k` normalised, then read by two products to `n` outputs (the second
/// with its weight transposed: lanes along k), the first with a residual added in its epilogue,
/// both returned; with `extra`, the normalised row is also read by an addition (no fusion then).
fn norm_then_products(rows: u64, k: u64, n: u64, extra: bool) -> String {
    let x = format!("tensor<{rows}x{k}xf32>");
    let o = format!("tensor<{rows}x{n}xf32>");
    let g = format!("tensor<{k}xf32>");
    let (w, wt) = (format!("tensor<{k}x{n}xf32>"), format!("tensor<{n}x{k}xf32>"));
    let (more, out) = if extra {
        (
            format!(
                "  %e = tensor.add %nx, %x : ({x}, {x}) -> {x}\n  %es = tensor.reduce_sum %e {{axes = [1], keepdim = true}} : ({x}) -> tensor<{rows}x1xf32>\n  %r = tensor.add %kk, %es : ({o}, tensor<{rows}x1xf32>) -> {o}\n"
            ),
            "%r",
        )
    } else {
        (String::new(), "%kk")
    };
    format!(
        "func.func @main(%x: {x}, %g: {g}, %wq: {w}, %wk: {wt}, %res: {o}) -> ({o}, {o}) {{
  %nx = tensor.rmsnorm %x, %g {{eps = 1.0e-05}} : ({x}, {g}) -> {x}
  %q = tensor.matmul %nx, %wq : ({x}, {w}) -> {o}
  %q2 = tensor.add %q, %res : ({o}, {o}) -> {o}
  %kk = tensor.matmul %nx, %wk {{transpose_b = true}} : ({x}, {wt}) -> {o}
{more}  func.return %q2, {out} : {o}, {o}
}}
"
    )
}

/// `@main`: one row of `k` normalised, read by up and gate, gate's epilogue `SiLU(acc) · up`.
fn norm_then_gated(k: u64, n: u64) -> String {
    let (x, g, w, o) = (
        format!("tensor<1x{k}xf32>"),
        format!("tensor<{k}xf32>"),
        format!("tensor<{k}x{n}xf32>"),
        format!("tensor<1x{n}xf32>"),
    );
    format!(
        "func.func @main(%x: {x}, %g: {g}, %wu: {w}, %wg: {w}) -> {o} {{
  %nx = tensor.rmsnorm %x, %g {{eps = 1.0e-05}} : ({x}, {g}) -> {x}
  %u = tensor.matmul %nx, %wu : ({x}, {w}) -> {o}
  %gt = tensor.matmul %nx, %wg : ({x}, {w}) -> {o}
  %s = tensor.silu %gt : ({o}) -> {o}
  %h = tensor.mul %s, %u : ({o}, {o}) -> {o}
  func.return %h : {o}
}}
"
    )
}

fn kernels(m: &fbc_ir::Module) -> Vec<Kernel> {
    m.all_ops()
        .filter(|&o| m.op(o).def.is("memory.launch"))
        .map(|o| Kernel::from_op(m.op(o)).expect("launch"))
        .collect()
}

fn data(v: &Value) -> Vec<f32> {
    v.as_f32().expect("f32").data().to_vec()
}

/// `got` within the contraction tolerance of `want` (relative to its largest magnitude).
fn close(case: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{case}");
    let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        assert!((a - b).abs() <= 1e-5 + 1e-4 * (b.abs() + scale), "{case}[{i}]: {a} against {b}");
    }
}

/// The lowered module of `text` at -O3 for `p` with split-K `split`, its launches, and the
/// interpreter's results on the tensor module and on the lowered one (the reference executor)
/// for random inputs.
fn lowered(
    text: &str,
    p: &fbc_target::HardwareProfile,
    split: &str,
) -> (fbc_ir::Module, Vec<Kernel>, Vec<Value>, Vec<Value>, Vec<Value>) {
    let original = common::parse(text);
    let inputs = fbc_runtime::interp::random_inputs(&original, "main", 7).expect("inputs");
    let before = Interpreter::new(&original).run("main", inputs.clone()).expect("interpreter");
    let m = common::lower_o3_with(text, p, split).expect("lowers");
    let f = m.find_func("main").expect("main");
    let after = Interpreter::new(&m).run_id(f, inputs.clone()).expect("reference executor");
    let ks = kernels(&m);
    (m, ks, inputs, before, after)
}

/// Decode-like rows (1 and 3) and a product as long as a prompt of 16 (the most that is
/// thin): the normalisation is gone, both products carry its statistic, `1/sqrt(mean(x²) +
/// eps)`, and their epilogues scale by it; the numbers are the tensor module's.
#[test]
fn a_normalisation_read_only_by_thin_products_moves_into_them() {
    for (rows, k) in [(1, 256), (3, 64), (16, 128)] {
        let text = norm_then_products(rows, k, 48, false);
        let (_, ks, _, before, after) = lowered(&text, &profile(true), "auto");
        let case = format!("rows {rows}, k {k}");
        assert!(ks.iter().all(|k| k.source != "tensor.rmsnorm"), "{case}: {ks:#?}");
        let fused: Vec<&Kernel> = ks.iter().filter(|k| !k.stats.is_empty()).collect();
        assert_eq!(fused.len(), 2, "{case}");
        for f in &fused {
            assert!(f.source.starts_with("tensor.matmul"), "{case}: {}", f.source);
            assert!(f.source.contains("tensor.rmsnorm"), "{case}: {}", f.source);
            assert_eq!(
                f.stats[0].to_string(),
                format!("add: x0 * x0; 1.0 / sqrt(acc / {k}.0 + 1.0e-5)"),
                "{case}"
            );
            let epilogue = f.epilogue.as_ref().expect("an epilogue").to_string();
            assert!(epilogue.contains("acc * s0"), "{case}: {epilogue}");
        }
        for (a, b) in after.iter().zip(&before) {
            close(&case, &data(a), &data(b));
        }
    }
}

/// No fusion where the profile leaves it off, where another op reads the normalised row, where
/// the rows are more than `SKINNY_SIDE`, or where one reader reads another's output (up and
/// gate: the OpenCL writer runs them in the same work-groups one after the other).
#[test]
fn the_normalisation_stays_where_the_fusion_does_not_apply() {
    let cases = [
        ("profile off", norm_then_products(1, 128, 48, false), profile(false)),
        ("another reader", norm_then_products(1, 128, 48, true), profile(true)),
        ("17 rows", norm_then_products(17, 64, 48, false), profile(true)),
        ("up and gate", norm_then_gated(256, 64), profile(true)),
    ];
    for (case, text, p) in cases {
        let (_, ks, _, before, after) = lowered(&text, &p, "auto");
        assert_eq!(ks.iter().filter(|k| k.source == "tensor.rmsnorm").count(), 1, "{case}");
        assert!(ks.iter().all(|k| k.stats.is_empty() || k.is_row()), "{case}");
        for (a, b) in after.iter().zip(&before) {
            close(case, &data(a), &data(b));
        }
    }
}

/// With `[skinny] norm_prologue_pairs` the normalisation read by up and gate moves into both,
/// and the merged launch that runs them in the same work-groups (each summing the statistic:
/// every group, or in a split the group that adds a block's chunks) gives the reference
/// executor's numbers on the OpenCL device, which give the tensor module's.
#[test]
fn a_normalisation_read_by_up_and_gate_moves_into_both_where_the_profile_says() {
    let mut p = profile(true);
    p.skinny.norm_prologue_pairs = true;
    for (k, n, mode) in [(256, 256, "off"), (2048, 256, "auto")] {
        let case = format!("k {k}, n {n}, split-k {mode}");
        let (m, ks, inputs, before, after) = lowered(&norm_then_gated(k, n), &p, mode);
        assert!(ks.iter().all(|k| k.source != "tensor.rmsnorm"), "{case}: {ks:#?}");
        assert_eq!(ks.iter().filter(|k| !k.stats.is_empty()).count(), 2, "{case}: {ks:#?}");
        for (a, b) in after.iter().zip(&before) {
            close(&case, &data(a), &data(b));
        }
        if !common::have_device() {
            continue;
        }
        let opts = fbc_codegen::opencl::KernelOptions::for_target(&p);
        let (out, run) = common::run_main_on_device(&m, opts, &inputs);
        assert!(out.source.contains("in one launch"), "{case}: not merged:\n{}", out.source);
        let stats = out.source.matches("The statistics over the whole reduction").count();
        assert_eq!(stats, 2, "{case}:\n{}", out.source);
        let run = run.unwrap_or_else(|e| panic!("{case}: {e}"));
        for (a, b) in run.results.iter().zip(&after) {
            close(&case, &data(a), &data(b));
        }
    }
}

/// The fused launches on the OpenCL device against the reference executor: in the skinny
/// kernel (the statistic summed by every work-group, or in a split by the group that adds the
/// chunks), with lanes along the wide side and along k, and where the product is too short or
/// too narrow for it (k 64 over one row with lanes along the wide side, 48 outputs), in the
/// simple form.
#[test]
fn fused_products_run_on_opencl_as_the_reference_executor_computes_them() {
    if !common::have_device() {
        return;
    }
    // Chunks of at least 128 for a matrix-vector product's lanes along the wide side (the
    // shipped profile says 64), so that one over 64 takes the simple form.
    let mut p = profile(true);
    p.skinny.matvec_min_k = 128;
    let skinny = "The statistics over the whole reduction";
    let simple = "float fbc_sa0";
    let wide = "work-items along col";
    let along_k = "work-items along k share";
    let split = "Split-K: chunk sk";
    // (rows, k, n, split-K, what the kernels' text shows, and does not)
    for (rows, k, n, mode, forms, not) in [
        (1, 256, 256, "off", vec![skinny, wide, along_k], vec![simple, split]),
        (3, 2048, 256, "auto", vec![skinny, wide, split], vec![simple]),
        (1, 64, 256, "off", vec![skinny, along_k, simple], vec![wide]),
        (1, 256, 48, "off", vec![simple], vec![skinny]),
    ] {
        let case = format!("rows {rows}, k {k}, n {n}, split-k {mode}");
        let text = norm_then_products(rows, k, n, false);
        let (m, _, inputs, _, after) = lowered(&text, &p, mode);
        let opts = fbc_codegen::opencl::KernelOptions::for_target(&p);
        let (out, run) = common::run_main_on_device(&m, opts, &inputs);
        for f in forms {
            assert!(out.source.contains(f), "{case}: {f}:\n{}", out.source);
        }
        for f in not {
            assert!(!out.source.contains(f), "{case}: not {f}:\n{}", out.source);
        }
        let run = run.unwrap_or_else(|e| panic!("{case}: {e}"));
        assert_eq!(run.results.len(), 2, "{case}");
        for (a, b) in run.results.iter().zip(&after) {
            close(&case, &data(a), &data(b));
        }
    }
}

/// Without its measured rates the nvidia profile keeps a decode step's rows in R-Tile images:
/// the fused products read and write textures, still the reference executor's numbers.
#[test]
fn fused_products_on_textures_match_the_reference_executor() {
    if !common::have_device() {
        return;
    }
    let p = fbc_target::HardwareProfile { measured: None, ..profile(true) };
    for (rows, k, n) in [(1, 256, 256), (3, 64, 48)] {
        let case = format!("rows {rows}, k {k}, n {n}");
        let (m, ks, inputs, _, after) = lowered(&norm_then_products(rows, k, n, false), &p, "auto");
        assert_eq!(ks.iter().filter(|k| !k.stats.is_empty()).count(), 2, "{case}: {ks:#?}");
        let opts = fbc_codegen::opencl::KernelOptions::for_target(&p);
        let (out, run) = common::run_main_on_device(&m, opts, &inputs);
        for form in ["read_imagef", "write_imagef"] {
            assert!(out.source.contains(form), "{case}: {form}\n{}", out.source);
        }
        let run = run.unwrap_or_else(|e| panic!("{case}: {e}"));
        for (a, b) in run.results.iter().zip(&after) {
            close(&case, &data(a), &data(b));
        }
    }
}

/// The Cranelift JIT computes the statistic at every output, as the reference executor does.
#[test]
fn fused_products_run_on_the_jit_as_the_reference_executor_computes_them() {
    for (rows, k) in [(1, 256), (3, 64)] {
        let case = format!("rows {rows}, k {k}");
        let text = norm_then_products(rows, k, 48, false);
        let (m, _, inputs, _, after) = lowered(&text, &profile(true), "auto");
        let f = m.find_func("main").expect("main");
        let (out, _) = fbc_runtime::device::cpu_jit::run(&m, f, inputs, Default::default())
            .unwrap_or_else(|e| panic!("{case}: {e:?}"));
        assert_eq!(out.len(), 2, "{case}");
        for (a, b) in out.iter().zip(&after) {
            close(&case, &data(a), &data(b));
        }
    }
}

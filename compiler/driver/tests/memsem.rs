//! Defined memory semantics (fbc issue 20): the same memory-dialect module gives the same,
//! documented results on the reference executor, the Cranelift JIT and OpenCL (PoCL in CI):
//! a download of storage nothing wrote (zeros), launches reading their own output (the contents
//! before the launch), zero-extent domains, and integer arithmetic (wrapping, `MIN / -1 = MIN`,
//! `MIN % -1 = 0`, saturating `int()`); division by zero and `int(NaN)` fail the run on all
//! three (OpenCL through the error buffer). Also: the generated models need no fill
//! and no snapshot, and a fill is emitted exactly where storage may be read before it is written.
//!
//! Without an OpenCL device (or without `--features opencl`) the OpenCL leg is skipped with a
//! notice, except under `CI=true`, where it fails.

use fbc_codegen::opencl::{Manifest, Options, Step, Writer};
use fbc_runtime::device::cpu_jit::JitLauncher;
use fbc_runtime::interp::{Interpreter, Value};
use fbc_runtime::reference::Tensor;

mod common;

/// The results of `@main` on the reference executor.
fn reference(text: &str, inputs: &[Value]) -> Result<Vec<Value>, String> {
    let m = common::parse(text);
    Interpreter::new(&m).run("main", inputs.to_vec()).map_err(|e| e.to_string())
}

/// The results of `@main` with its launches on the JIT.
fn jit(text: &str, inputs: &[Value]) -> Result<Vec<Value>, String> {
    let m = common::parse(text);
    let mut l = JitLauncher::new()?;
    Interpreter::new(&m)
        .run_with_launcher("main", inputs.to_vec(), &mut l)
        .map_err(|e| e.to_string())
}

/// The OpenCL C and manifest of `text`.
fn written(text: &str) -> (String, Manifest) {
    let m = common::parse(text);
    let out = Writer::new(Options::default()).write(&m).expect("writes");
    (out.source, out.manifest)
}

/// The results of `@main` on the OpenCL device; `None` when there is none (and not under CI).
fn opencl(text: &str, inputs: &[Value]) -> Option<Vec<Value>> {
    opencl_result(text, inputs).map(|r| r.expect("runs on the device"))
}

/// The outcome of `@main` on the OpenCL device (the error's text on failure); `None` when there
/// is none (and not under CI).
#[cfg(feature = "opencl")]
fn opencl_result(text: &str, inputs: &[Value]) -> Option<Result<Vec<Value>, String>> {
    use fbc_runtime::device::opencl::{devices, run, Cache, RunOptions};
    if devices().is_empty() {
        assert!(
            !std::env::var("CI").is_ok_and(|v| v == "true"),
            "CI=true but no OpenCL device was found"
        );
        eprintln!("notice: no OpenCL device; the OpenCL leg is skipped");
        return None;
    }
    let (source, manifest) = written(text);
    let opts = RunOptions { cache: Cache::Off, ..RunOptions::default() };
    Some(
        run(&source, &manifest, "main", inputs, &opts)
            .map(|o| o.results)
            .map_err(|e| e.to_string()),
    )
}

#[cfg(not(feature = "opencl"))]
fn opencl_result(_: &str, _: &[Value]) -> Option<Result<Vec<Value>, String>> {
    eprintln!("notice: built without `opencl`; the OpenCL leg is skipped");
    None
}

/// Runs `text` on the three back ends and checks every result against `want` (bit for bit).
fn same_everywhere(text: &str, inputs: &[Value], want: &[Value]) {
    assert_eq!(reference(text, inputs).expect("reference runs"), want, "reference executor");
    assert_eq!(jit(text, inputs).expect("JIT runs"), want, "JIT");
    if let Some(got) = opencl(text, inputs) {
        assert_eq!(got, want, "OpenCL");
    }
}

fn f32s(v: Vec<f32>) -> Value {
    let n = v.len();
    Value::F32(Tensor::new(vec![n], v).expect("tensor"))
}

fn i32s(v: Vec<i32>) -> Value {
    let n = v.len();
    Value::I32(Tensor::new(vec![n], v).expect("tensor"))
}

fn steps(m: &Manifest, pick: fn(&Step) -> bool) -> usize {
    m.functions.iter().flat_map(|f| &f.steps).filter(|s| pick(s)).count()
}

fn fills(m: &Manifest) -> usize {
    steps(m, |s| matches!(s, Step::Fill { .. }))
}

fn copies(m: &Manifest) -> usize {
    steps(m, |s| matches!(s, Step::Copy { .. }))
}

const N: usize = 4096;

#[test]
fn storage_nothing_wrote_downloads_as_zeros() {
    // The first allocation is written with 7.0 and freed, so on a device the second may get its
    // memory back; half of the third is written by a launch, the rest never.
    let text = format!(
        r#"func.func @main() -> (tensor<{N}xf32>, tensor<{N}xf32>, tensor<{N}xf32>) {{
  %a = memory.alloc : () -> !memory.buffer<{N}, f32>
  memory.launch %a {{kernel = "seven", domain = [{N}], iterators = ["parallel"], maps = [(d0) -> (d0)], body = "7.0"}} : (!memory.buffer<{N}, f32>) -> ()
  %t = memory.download %a {{layout = #layout.linear}} : (!memory.buffer<{N}, f32>) -> tensor<{N}xf32>
  memory.dealloc %a : !memory.buffer<{N}, f32>
  %b = memory.alloc : () -> !memory.buffer<{N}, f32>
  %u = memory.alloc : () -> !memory.buffer<{N}, f32>
  memory.launch %u {{kernel = "every_other", domain = [{h}], iterators = ["parallel"], maps = [(d0) -> (d0 * 2)], body = "1.0"}} : (!memory.buffer<{N}, f32>) -> ()
  %yb = memory.download %b {{layout = #layout.linear}} : (!memory.buffer<{N}, f32>) -> tensor<{N}xf32>
  %yu = memory.download %u {{layout = #layout.linear}} : (!memory.buffer<{N}, f32>) -> tensor<{N}xf32>
  func.return %t, %yb, %yu : (tensor<{N}xf32>, tensor<{N}xf32>, tensor<{N}xf32>) -> ()
}}
"#,
        h = N / 2
    );
    // `%b` is read unwritten, `%u` is read after a strided half write: both need the fill; `%a`
    // is fully written before it is read.
    let (_, m) = written(&text);
    assert_eq!(fills(&m), 2);
    let half: Vec<f32> = (0..N).map(|i| if i % 2 == 0 { 1.0 } else { 0.0 }).collect();
    same_everywhere(&text, &[], &[f32s(vec![7.0; N]), f32s(vec![0.0; N]), f32s(half)]);
}

#[test]
fn partial_writes_that_cover_the_storage_need_no_fill() {
    // Two launches write the halves of `%o` (a concat), then it is read: no fill. The
    // interleaved halves of `%p` (even then odd elements) cover it too.
    let text = format!(
        r#"func.func @main() -> (tensor<{N}xf32>, tensor<{N}xf32>) {{
  %o = memory.alloc : () -> !memory.buffer<{N}, f32>
  memory.launch %o {{kernel = "lo", domain = [{h}], iterators = ["parallel"], maps = [(d0) -> (d0)], body = "1.0"}} : (!memory.buffer<{N}, f32>) -> ()
  memory.launch %o {{kernel = "hi", domain = [{h}], iterators = ["parallel"], maps = [(d0) -> (d0 + {h})], body = "2.0"}} : (!memory.buffer<{N}, f32>) -> ()
  %p = memory.alloc : () -> !memory.buffer<{N}, f32>
  memory.launch %p {{kernel = "even", domain = [{h}], iterators = ["parallel"], maps = [(d0) -> (d0 * 2)], body = "3.0"}} : (!memory.buffer<{N}, f32>) -> ()
  memory.launch %p {{kernel = "odd", domain = [{h}], iterators = ["parallel"], maps = [(d0) -> (d0 * 2 + 1)], body = "4.0"}} : (!memory.buffer<{N}, f32>) -> ()
  %y = memory.download %o {{layout = #layout.linear}} : (!memory.buffer<{N}, f32>) -> tensor<{N}xf32>
  %z = memory.download %p {{layout = #layout.linear}} : (!memory.buffer<{N}, f32>) -> tensor<{N}xf32>
  func.return %y, %z : (tensor<{N}xf32>, tensor<{N}xf32>) -> ()
}}
"#,
        h = N / 2
    );
    let (_, m) = written(&text);
    assert_eq!(fills(&m), 0);
    let want_o: Vec<f32> = (0..N).map(|i| if i < N / 2 { 1.0 } else { 2.0 }).collect();
    let want_p: Vec<f32> = (0..N).map(|i| if i % 2 == 0 { 3.0 } else { 4.0 }).collect();
    same_everywhere(&text, &[], &[f32s(want_o), f32s(want_p)]);
}

#[test]
fn launches_reading_their_own_output_see_it_before_the_launch() {
    // `%o = 0, 1, .., N-1`; then shifted left (`o[i] = o[i + 1]`, through `x0[e]` of the output)
    // and `%p` (a copy) shifted right through an input operand that is the output storage too
    // (`p[i + 1] = p[i]`): every read sees the contents before the launch.
    let text = format!(
        r#"func.func @main() -> (tensor<{N}xf32>, tensor<{N}xf32>) {{
  %o = memory.alloc : () -> !memory.buffer<{N}, f32>
  memory.launch %o {{kernel = "iota", domain = [{N}], iterators = ["parallel"], maps = [(d0) -> (d0)], body = "float(d0)"}} : (!memory.buffer<{N}, f32>) -> ()
  %p = memory.alloc : () -> !memory.buffer<{N}, f32>
  memory.launch %o, %p {{kernel = "copy", domain = [{N}], iterators = ["parallel"], maps = [(d0) -> (d0), (d0) -> (d0)], body = "x0"}} : (!memory.buffer<{N}, f32>, !memory.buffer<{N}, f32>) -> ()
  memory.launch %o {{kernel = "shift_left", domain = [{m}], iterators = ["parallel"], maps = [(d0) -> (d0)], body = "x0[d0 + 1]"}} : (!memory.buffer<{N}, f32>) -> ()
  memory.launch %p, %p {{kernel = "shift_right", domain = [{m}], iterators = ["parallel"], maps = [(d0) -> (d0), (d0) -> (d0 + 1)], body = "x0 * 10.0"}} : (!memory.buffer<{N}, f32>, !memory.buffer<{N}, f32>) -> ()
  %y = memory.download %o {{layout = #layout.linear}} : (!memory.buffer<{N}, f32>) -> tensor<{N}xf32>
  %z = memory.download %p {{layout = #layout.linear}} : (!memory.buffer<{N}, f32>) -> tensor<{N}xf32>
  func.return %y, %z : (tensor<{N}xf32>, tensor<{N}xf32>) -> ()
}}
"#,
        m = N - 1
    );
    let (src, m) = written(&text);
    assert_eq!(copies(&m), 2);
    assert_eq!(fills(&m), 0);
    // The snapshot is a read-only parameter before the output.
    assert!(src.contains("__kernel void shift_left(__global const float* x0, __global float* x1)"));
    let want_o: Vec<f32> = (0..N).map(|i| (i + 1).min(N - 1) as f32).collect();
    let want_p: Vec<f32> =
        (0..N).map(|i| if i == 0 { 0.0 } else { (i - 1) as f32 * 10.0 }).collect();
    same_everywhere(&text, &[], &[f32s(want_o), f32s(want_p)]);
}

#[test]
fn an_image_launch_reading_its_own_output_reads_a_snapshot() {
    // A row of W texels reversed in place: texel x gets texel W-1-x (before the launch) + 1.
    const W: usize = 64;
    let text = format!(
        r#"func.func @main(%x: tensor<{n}xf32>) -> tensor<{n}xf32> {{
  %b = memory.upload %x {{layout = #layout.linear}} : (tensor<{n}xf32>) -> !memory.buffer<{n}, f32>
  %i = memory.alloc : () -> !memory.image2d<[{W}, 1], f32>
  memory.launch %b, %i {{kernel = "to_image", domain = [{W}, 4], iterators = ["parallel", "parallel"], maps = [(d0, d1) -> (d0 * 4 + d1), (d0, d1) -> (d0, 0, d1)], body = "x0"}} : (!memory.buffer<{n}, f32>, !memory.image2d<[{W}, 1], f32>) -> ()
  memory.launch %i, %i {{kernel = "reverse", domain = [{W}, 4], iterators = ["parallel", "parallel"], maps = [(d0, d1) -> ({w1} - d0, 0, d1), (d0, d1) -> (d0, 0, d1)], body = "x0 + 1.0"}} : (!memory.image2d<[{W}, 1], f32>, !memory.image2d<[{W}, 1], f32>) -> ()
  %o = memory.alloc : () -> !memory.buffer<{n}, f32>
  memory.launch %i, %o {{kernel = "from_image", domain = [{W}, 4], iterators = ["parallel", "parallel"], maps = [(d0, d1) -> (d0, 0, d1), (d0, d1) -> (d0 * 4 + d1)], body = "x0"}} : (!memory.image2d<[{W}, 1], f32>, !memory.buffer<{n}, f32>) -> ()
  %y = memory.download %o {{layout = #layout.linear}} : (!memory.buffer<{n}, f32>) -> tensor<{n}xf32>
  func.return %y : tensor<{n}xf32>
}}
"#,
        n = W * 4,
        w1 = W - 1
    );
    let (_, m) = written(&text);
    assert_eq!((copies(&m), fills(&m)), (1, 0));
    let x: Vec<f32> = (0..W * 4).map(|i| i as f32).collect();
    let want: Vec<f32> = (0..W * 4).map(|i| ((W - 1 - i / 4) * 4 + i % 4) as f32 + 1.0).collect();
    same_everywhere(&text, &[f32s(x)], &[f32s(want)]);
}

#[test]
fn zero_extent_domains_write_nothing_or_the_identity() {
    // `%e`: an empty parallel domain writes nothing (zeros stay). `%s`: an empty sum is 0, then
    // the epilogue adds 2; `%m`: an empty max is -inf, then `max(acc, -5)`. `%c`: a contraction
    // shape (rows x columns x reduction large enough for the tiled kernel) with no batch.
    let text = r#"func.func @main(%a: tensor<128xf32>, %b: tensor<128xf32>) -> (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<256xf32>) {
  %e = memory.alloc : () -> !memory.buffer<8, f32>
  memory.launch %e {kernel = "empty", domain = [0, 8], iterators = ["parallel", "parallel"], maps = [(d0, d1) -> (d0 * 8 + d1)], body = "1.0"} : (!memory.buffer<8, f32>) -> ()
  %s = memory.alloc : () -> !memory.buffer<8, f32>
  memory.launch %s {kernel = "empty_sum", domain = [8, 0], iterators = ["parallel", "reduction"], maps = [(d0, d1) -> (d0)], body = "1.0", combine = "add", epilogue = "acc + 2.0"} : (!memory.buffer<8, f32>) -> ()
  %m = memory.alloc : () -> !memory.buffer<8, f32>
  memory.launch %m {kernel = "empty_max", domain = [8, 0], iterators = ["parallel", "reduction"], maps = [(d0, d1) -> (d0)], body = "1.0", combine = "max", epilogue = "max(acc, -5.0)"} : (!memory.buffer<8, f32>) -> ()
  %ua = memory.upload %a {layout = #layout.linear} : (tensor<128xf32>) -> !memory.buffer<128, f32>
  %ub = memory.upload %b {layout = #layout.linear} : (tensor<128xf32>) -> !memory.buffer<128, f32>
  %c = memory.alloc : () -> !memory.buffer<256, f32>
  memory.launch %ua, %ub, %c {kernel = "no_batch", domain = [0, 16, 16, 8], iterators = ["parallel", "parallel", "parallel", "reduction"], maps = [(d0, d1, d2, d3) -> (d1 * 8 + d3), (d0, d1, d2, d3) -> (d3 * 16 + d2), (d0, d1, d2, d3) -> (d0 * 256 + d1 * 16 + d2)], body = "x0 * x1", combine = "add"} : (!memory.buffer<128, f32>, !memory.buffer<128, f32>, !memory.buffer<256, f32>) -> ()
  %ye = memory.download %e {layout = #layout.linear} : (!memory.buffer<8, f32>) -> tensor<8xf32>
  %ys = memory.download %s {layout = #layout.linear} : (!memory.buffer<8, f32>) -> tensor<8xf32>
  %ym = memory.download %m {layout = #layout.linear} : (!memory.buffer<8, f32>) -> tensor<8xf32>
  %yc = memory.download %c {layout = #layout.linear} : (!memory.buffer<256, f32>) -> tensor<256xf32>
  func.return %ye, %ys, %ym, %yc : (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<256xf32>) -> ()
}
"#;
    let (_, m) = written(text);
    // The empty launches write nothing: `%e` and `%c` are filled; `%s` and `%m` are written.
    assert_eq!(fills(&m), 2);
    let ab = f32s((0..128).map(|i| i as f32 * 0.5 + 1.0).collect());
    same_everywhere(
        text,
        &[ab.clone(), ab],
        &[f32s(vec![0.0; 8]), f32s(vec![2.0; 8]), f32s(vec![-5.0; 8]), f32s(vec![0.0; 256])],
    );
}

/// `i64::MIN` in the payload language.
const MIN: &str = "(-9223372036854775807 - 1)";

/// One `i32` buffer of `exprs.len()` elements, element `i` = `exprs[i]` (a `select` chain on
/// `d0`).
fn int_module(exprs: &[String]) -> String {
    let n = exprs.len();
    let mut body = String::from("0");
    for (i, e) in exprs.iter().enumerate().rev() {
        body = format!("select(d0 == {i}, {e}, {body})");
    }
    format!(
        r#"func.func @main() -> tensor<{n}xi32> {{
  %o = memory.alloc : () -> !memory.buffer<{n}, i32>
  memory.launch %o {{kernel = "ints", domain = [{n}], iterators = ["parallel"], maps = [(d0) -> (d0)], body = "{body}"}} : (!memory.buffer<{n}, i32>) -> ()
  %y = memory.download %o {{layout = #layout.linear}} : (!memory.buffer<{n}, i32>) -> tensor<{n}xi32>
  func.return %y : tensor<{n}xi32>
}}
"#
    )
}

#[test]
fn integer_arithmetic_wraps_and_floors_identically() {
    // The divisors depend on `d0` so that no compiler folds them; `d0 - d0 - 1` is -1.
    let m1 = "(d0 - d0 - 1)";
    let cases: Vec<(String, i32)> = vec![
        // MIN / -1 = MIN: its high 32 bits, and a comparison.
        (format!("({MIN} / {m1}) / 4294967296"), i32::MIN),
        (format!("({MIN} / {m1}) == {MIN}"), 1),
        (format!("{MIN} % {m1}"), 0),
        (format!("{MIN} % (d0 - d0 + 3)"), 1), // floor: MIN = 3·q + 1
        (format!("{MIN} / (d0 - d0 + 3) / 4294967296"), -715827883),
        ("(-7) / (d0 - d0 + 2)".into(), -4),
        ("(-7) % (d0 - d0 + 2)".into(), 1),
        ("7 % (d0 - d0 - 2)".into(), -1),
        ("7 / (d0 - d0 - 2)".into(), -4),
        // A constant power of two divides by a shift and a mask: floor semantics still.
        ("(d0 - d0 - 7) / 2".into(), -4),
        ("(d0 - d0 - 7) % 4".into(), 1),
        ("(d0 - d0 - 9) / 8".into(), -2),
        ("(d0 - d0 - 9) % 8".into(), 7),
        (format!("({MIN} + d0 - d0) / 2 / 4294967296"), -1073741824),
        (format!("({MIN} + d0 - d0) % 16"), 0),
        // Wrapping add, sub, mul, neg, abs.
        ("(9223372036854775807 + d0 - d0 + 1) == (-9223372036854775807 - 1)".into(), 1),
        (format!("({MIN} - 1 + d0 - d0) == 9223372036854775807"), 1),
        (
            "(9223372036854775807 * (d0 - d0 + 3)) % 4294967296".into(),
            -3_i64.rem_euclid(1 << 32) as i32,
        ),
        ("(3037000500 * (d0 - d0 + 3037000500)) / 4294967296".into(), -2147483648),
        (format!("(-({MIN} + d0 - d0)) == {MIN}"), 1),
        (format!("abs({MIN} + d0 - d0) == {MIN}"), 1),
        // An i32 store keeps the low 32 bits.
        ("4294967297 + 5 + d0 - d0".into(), 6),
        ("2147483648 + d0 - d0".into(), i32::MIN),
        // int(): toward zero, saturating.
        ("int(-2.5 + float(d0 - d0))".into(), -2),
        ("int(1.0e30 + float(d0 - d0)) == 9223372036854775807".into(), 1),
        (format!("int(-1.0e30 + float(d0 - d0)) == {MIN}"), 1),
        ("int(inf + float(d0 - d0)) / 4294967296".into(), i32::MAX),
        (format!("int(-inf + float(d0 - d0)) == {MIN}"), 1),
        ("int(9.3e18 + float(d0 - d0)) == 9223372036854775807".into(), 1),
    ];
    let exprs: Vec<String> = cases.iter().map(|(e, _)| e.clone()).collect();
    let want = i32s(cases.iter().map(|&(_, v)| v).collect());
    same_everywhere(&int_module(&exprs), &[], &[want]);
}

#[test]
fn division_by_zero_and_int_of_nan_fail_on_every_back_end() {
    for (e, fault) in [
        ("5 / (d0 - d0)", "kernel `ints`: integer division by zero in 5 / 0"),
        ("(d0 - 7) % (d0 - d0)", "kernel `ints`: integer division by zero in -7 % 0"),
        ("int(nan + float(d0))", "kernel `ints`: int() of NaN"),
    ] {
        let text = int_module(&[e.to_string()]);
        let r = reference(&text, &[]).expect_err("the reference executor fails");
        assert!(r.contains(fault), "{r}");
        let j = jit(&text, &[]).expect_err("the JIT fails");
        assert!(j.contains(fault), "{j}");
        let (source, m) = written(&text);
        let kernel = &source[source.find("__kernel").expect("a kernel")..];
        let checked = ["fbc_idivc(", "fbc_imodc(", "fbc_tointc("];
        assert!(checked.iter().any(|c| kernel.contains(c)), "{kernel}");
        assert_eq!(steps(&m, |s| matches!(s, Step::Launch(l) if l.fault_id.is_some())), 1);
        if let Some(got) = opencl_result(&text, &[]) {
            let o = got.expect_err("the OpenCL run fails");
            assert!(o.contains(fault), "{o}");
        }
    }
    // A non-zero constant divisor and int() of an integer need no check; a power of two
    // divides by a shift.
    let (source, m) = written(&int_module(&["(d0 - 7) / 3 + (d0 % 2) + int(d0)".into()]));
    let kernel = &source[source.find("__kernel").expect("a kernel")..];
    assert!(kernel.contains("fbc_idiv(") && !kernel.contains("fbc_err"), "{kernel}");
    assert!(kernel.contains(" & 1L)") && !kernel.contains("fbc_imod("), "{kernel}");
    assert_eq!(steps(&m, |s| matches!(s, Step::Launch(l) if l.fault_id.is_some())), 0);
}

#[test]
fn generated_models_need_no_fill_and_no_snapshot() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let llama = common::training_step("memsem-llama");
    let files = [root.join("examples/attention.fbir"), root.join("examples/matmul_fb.fbir"), llama];
    for f in &files {
        for level in ["-O0", "-O3"] {
            for strategy in ["fblayout", "reuse", "convert"] {
                let dir = common::scratch(&format!(
                    "memsem-{}{level}{strategy}",
                    f.file_stem().unwrap_or_default().to_string_lossy()
                ));
                let o = common::fbc(&[
                    f.to_str().unwrap_or_default(),
                    level,
                    "--layout-strategy",
                    strategy,
                    "--target",
                    "generic",
                    "-o",
                    dir.to_str().unwrap_or_default(),
                ]);
                assert_eq!(o.code, 0, "{}", o.stderr);
                let manifest = std::fs::read_dir(&dir)
                    .expect("output dir")
                    .filter_map(Result::ok)
                    .map(|e| e.path())
                    .find(|p| p.to_string_lossy().ends_with(".manifest.json"))
                    .expect("a manifest");
                let m = Manifest::from_json(&std::fs::read_to_string(&manifest).expect("read"))
                    .expect("manifest");
                let allocs = steps(&m, |s| matches!(s, Step::Alloc { .. }));
                assert!(allocs > 0);
                assert_eq!(
                    (fills(&m), copies(&m)),
                    (0, 0),
                    "{} {level} {strategy}: {allocs} allocs",
                    f.display()
                );
            }
        }
    }
}

//! Inputs at scale (issue 20): huge shapes fail at once with an error naming the tensor, its size
//! and the limit, without allocating (every runner, a small `--max-memory` so nothing large is
//! ever attempted); `--max-memory` parsing; long elementwise chains compile at `-O3 --target mali`
//! (fusion keeps payloads within what the verifier reads back) and compute the interpreter's
//! numbers; a payload of 20,000 terms is written as OpenCL.

mod common;

use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{fbc, scratch, write};

/// What a refused run must look like: exit 1, no output file, quickly, and `expected` on stderr.
fn refused(args: &[&str], out: &Path, expected: &[&str]) {
    let start = Instant::now();
    let o = fbc(args);
    let took = start.elapsed();
    assert_eq!(o.code, 1, "{args:?}: {}", o.stderr);
    for e in expected {
        assert!(o.stderr.contains(e), "{args:?}: expected `{e}` in:\n{}", o.stderr);
    }
    assert!(!o.stderr.contains("panicked"), "{}", o.stderr);
    assert!(!out.exists(), "{args:?} left {}", out.display());
    assert!(took < Duration::from_secs(10), "{args:?} took {took:?}");
}

const HUGE_ARG: &str = "\
func.func @main(%x: tensor<1048576x1048576xf32>) -> tensor<1048576x1048576xf32> {
  %r = tensor.relu %x : (tensor<1048576x1048576xf32>) -> tensor<1048576x1048576xf32>
  func.return %r : (tensor<1048576x1048576xf32>) -> ()
}
";

#[test]
fn a_huge_argument_is_refused_before_inputs_are_made() {
    let dir = scratch("scale-huge-arg");
    let ir = write(&dir, "huge.fbir", HUGE_ARG.as_bytes());
    let out = dir.join("out.safetensors");
    let o = out.to_str().unwrap();
    for target in ["cpu", "cpu-jit"] {
        refused(
            &[
                "run",
                &ir,
                "--target",
                target,
                "--random-inputs",
                "1",
                "--max-memory",
                "64M",
                "--outputs",
                o,
            ],
            &out,
            &["huge.fbir:1:11: error: tensor %x (tensor<1048576x1048576xf32>) needs \
                 4398046511104 bytes (4.0 TiB), over the memory limit of 67108864 bytes \
                 (64.0 MiB) (set it with --max-memory)"],
        );
    }
}

#[test]
fn a_shape_whose_size_overflows_is_refused_without_a_panic() {
    let dir = scratch("scale-overflow");
    let text = HUGE_ARG.replace("1048576x1048576", "2147483648x2147483648");
    let ir = write(&dir, "overflow.fbir", text.as_bytes());
    let out = dir.join("out.safetensors");
    let o = out.to_str().unwrap();
    for target in ["cpu", "cpu-jit"] {
        refused(
            &["run", &ir, "--target", target, "--random-inputs", "1", "--outputs", o],
            &out,
            &["tensor %x (tensor<2147483648x2147483648xf32>) needs more than 2^64 bytes"],
        );
    }
}

#[test]
fn a_huge_constant_is_refused_at_its_op_on_the_interpreter_and_the_jit() {
    let dir = scratch("scale-constant");
    let text = "\
func.func @main(%x: tensor<4xf32>) -> tensor<1048576x1048576xf32> {
  %c = tensor.constant {value = 1.0} : () -> tensor<1048576x1048576xf32>
  func.return %c : (tensor<1048576x1048576xf32>) -> ()
}
";
    let ir = write(&dir, "constant.fbir", text.as_bytes());
    let out = dir.join("out.safetensors");
    let o = out.to_str().unwrap();
    for target in ["cpu", "cpu-jit"] {
        refused(
            &[
                "run",
                &ir,
                "--target",
                target,
                "--random-inputs",
                "1",
                "--max-memory",
                "1G",
                "--outputs",
                o,
            ],
            &out,
            &["constant.fbir:2:3: error: tensor %c (tensor<1048576x1048576xf32>) needs \
                 4398046511104 bytes (4.0 TiB), over the memory limit of 1073741824 bytes \
                 (1.0 GiB)"],
        );
    }
}

#[test]
fn values_live_together_are_summed() {
    // Three 4 MiB tensors, each under a 10 MiB limit; the add holds all three at once.
    let dir = scratch("scale-live");
    let text = "\
func.func @main(%x: tensor<1024x1024xf32>, %y: tensor<1024x1024xf32>) -> tensor<1024x1024xf32> {
  %r = tensor.add %x, %y : (tensor<1024x1024xf32>, tensor<1024x1024xf32>) -> tensor<1024x1024xf32>
  func.return %r : (tensor<1024x1024xf32>) -> ()
}
";
    let ir = write(&dir, "live.fbir", text.as_bytes());
    let out = dir.join("out.safetensors");
    let o = out.to_str().unwrap();
    refused(
        &["run", &ir, "--random-inputs", "1", "--max-memory", "10M", "--outputs", o],
        &out,
        &["live.fbir:2:3: error: everything live at this `tensor.add` (in @main) needs \
             12582912 bytes (12.0 MiB), over the memory limit of 10485760 bytes (10.0 MiB)"],
    );
    let ok = fbc(&["run", &ir, "--random-inputs", "1", "--max-memory", "16M", "--outputs", o]);
    assert_eq!(ok.code, 0, "{}", ok.stderr);
    assert!(out.exists());
}

#[test]
fn a_huge_memory_alloc_is_refused_at_its_op() {
    let dir = scratch("scale-alloc");
    let text = "\
func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {
  %m = memory.alloc : () -> !memory.buffer<4611686018427387904, f32>
  %ma = memory.upload %a {layout = #layout.linear} : (tensor<4xf32>) -> !memory.buffer<4, f32>
  %c = memory.download %ma {layout = #layout.linear} : (!memory.buffer<4, f32>) -> tensor<4xf32>
  func.return %c : (tensor<4xf32>) -> ()
}
";
    let ir = write(&dir, "alloc.fbir", text.as_bytes());
    let out = dir.join("out.safetensors");
    let o = out.to_str().unwrap();
    for target in ["cpu", "cpu-jit"] {
        refused(
            &["run", &ir, "--target", target, "--random-inputs", "1", "--outputs", o],
            &out,
            &["alloc.fbir:2:3: error: storage %m (!memory.buffer<4611686018427387904, f32>) needs more than 2^64 bytes"],
        );
    }
}

#[test]
fn max_memory_takes_sizes_with_units_and_refuses_bad_ones() {
    let dir = scratch("scale-max-memory");
    let text = "\
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %r = tensor.relu %x : (tensor<4xf32>) -> tensor<4xf32>
  func.return %r : (tensor<4xf32>) -> ()
}
";
    let ir = write(&dir, "small.fbir", text.as_bytes());
    for good in ["1048576", "512M", "8G", "64KiB", "1.5g"] {
        let o = fbc(&["run", &ir, "--random-inputs", "1", "--max-memory", good]);
        assert_eq!(o.code, 0, "--max-memory {good}: {}", o.stderr);
    }
    for (bad, why) in [
        ("12Q", "unknown unit; use K, M, G or T"),
        ("0", "the size must be at least 1 byte"),
        ("G", "expected a number"),
        ("99999999999T", "more than 2^64 bytes"),
    ] {
        let o = fbc(&["run", &ir, "--random-inputs", "1", "--max-memory", bad]);
        assert_eq!(o.code, 2, "--max-memory {bad}: {}", o.stderr);
        assert!(o.stderr.contains(&format!("invalid size `{bad}`: {why}")), "{}", o.stderr);
    }
    // Too small for the run itself: an input error at the argument.
    let o = fbc(&["run", &ir, "--random-inputs", "1", "--max-memory", "8"]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(o.stderr.contains("tensor %x (tensor<4xf32>) needs 16 bytes"), "{}", o.stderr);
}

#[test]
fn bench_parse_refuses_an_ops_count_beyond_the_limit() {
    let start = Instant::now();
    let o = fbc(&["bench-parse", "--ops", "99999999999999"]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(
        o.stderr.contains("--ops 99999999999999: the generated module would need about"),
        "{}",
        o.stderr
    );
    assert!(start.elapsed() < Duration::from_secs(10));
    let o = fbc(&["bench-parse", "--ops", "1024", "--max-memory", "1M"]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("over the memory limit of 1048576 bytes (1.0 MiB)"), "{}", o.stderr);
    let o = fbc(&["bench-parse", "--ops", "200", "--repeat", "1", "--max-memory", "1M"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
}

/// A chain of `n` elementwise ops on a `shape` tensor, alternating mul and add with `%b`.
fn chain(n: usize, shape: &str) -> String {
    let t = format!("tensor<{shape}xf32>");
    let mut s = format!("func.func @main(%x: {t}, %b: {t}) -> {t} {{\n");
    let mut last = "x".to_string();
    for i in 0..n {
        let op = if i % 2 == 0 { "mul" } else { "add" };
        let _ = writeln!(s, "  %v{i} = tensor.{op} %{last}, %b : ({t}, {t}) -> {t}");
        last = format!("v{i}");
    }
    let _ = writeln!(s, "  func.return %{last} : ({t}) -> ()\n}}");
    s
}

#[test]
fn long_elementwise_chains_compile_for_mali() {
    let dir = scratch("scale-chain");
    for n in [300, 10_000] {
        let ir = write(&dir, &format!("chain{n}.fbir"), chain(n, "64x64").as_bytes());
        let out = dir.join(format!("chain{n}"));
        let o = fbc(&[&ir, "-O3", "--target", "mali", "-o", out.to_str().unwrap()]);
        assert_eq!(o.code, 0, "{n} ops: {}", o.stderr);
        let json = std::fs::read_to_string(out.join(format!("chain{n}.manifest.json")));
        let m = fbc_codegen::opencl::Manifest::from_json(&json.expect("the manifest"))
            .expect("a manifest");
        // Fused in launches of at most 64 levels: about n / 64 of them, not n.
        let launches = m.functions[0].launches().count();
        assert!(launches >= n / 64 && launches <= n / 32 + 2, "{n} ops: {launches} launches");
        // Their kernels repeat (alternating mul and add): each distinct one is written once.
        let cl = std::fs::read_to_string(out.join(format!("chain{n}.cl"))).expect("the .cl");
        let kernels = cl.matches("__kernel").count();
        assert!(kernels < launches && kernels <= 4, "{n} ops: {kernels} kernels");
    }
}

#[test]
fn a_fused_long_chain_computes_the_interpreters_numbers() {
    let dir = scratch("scale-chain-jit");
    let ir = write(&dir, "chain.fbir", chain(300, "4x8").as_bytes());
    let o = fbc(&["run", &ir, "--target", "cpu-jit", "--random-inputs", "3", "--check"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.contains("result0"), "{}", o.stdout);
}

#[cfg(feature = "opencl")]
#[test]
fn a_fused_long_chain_computes_the_interpreters_numbers_on_opencl() {
    let dir = scratch("scale-chain-ocl");
    let ir = write(&dir, "chain.fbir", chain(300, "4x8").as_bytes());
    let o = fbc(&["run", &ir, "--target", "opencl", "--random-inputs", "3", "--check"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
}

/// A lowered module whose launch body is `x0 + x1 + x0 + ...` with `terms` terms.
fn long_payload(terms: usize) -> String {
    let mut body = String::from("x0");
    for i in 1..terms {
        let _ = write!(body, " {} x{}", if i % 3 == 0 { "*" } else { "+" }, i % 2);
    }
    format!(
        "func.func @main(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {{
  %ma = memory.upload %a {{layout = #layout.linear}} : (tensor<4xf32>) -> !memory.buffer<4, f32>
  %mb = memory.upload %b {{layout = #layout.linear}} : (tensor<4xf32>) -> !memory.buffer<4, f32>
  %mc = memory.alloc : () -> !memory.buffer<4, f32>
  memory.launch %ma, %mb, %mc {{kernel = \"long\", domain = [4], iterators = [\"parallel\"], maps = [(d0) -> (d0), (d0) -> (d0), (d0) -> (d0)], body = \"{body}\"}} : (!memory.buffer<4, f32>, !memory.buffer<4, f32>, !memory.buffer<4, f32>) -> ()
  %c = memory.download %mc {{layout = #layout.linear}} : (!memory.buffer<4, f32>) -> tensor<4xf32>
  func.return %c : (tensor<4xf32>) -> ()
}}
"
    )
}

#[test]
fn a_payload_of_20000_terms_is_written_as_opencl_and_runs() {
    let dir = scratch("scale-payload");
    let ir = write(&dir, "payload.fbir", long_payload(20_000).as_bytes());
    let out = dir.join("payload");
    let o = fbc(&[&ir, "--target", "mali", "--emit", "opencl", "-o", out.to_str().unwrap()]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let cl = std::fs::read_to_string(out.join("payload.cl")).expect("the .cl");
    assert_eq!(cl.matches("x1[").count() + cl.matches("x0[").count(), 20_000);
    // The reference executor and the JIT agree on it too.
    let o = fbc(&["run", &ir, "--random-inputs", "1"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let j = fbc(&["run", &ir, "--target", "cpu-jit", "--random-inputs", "1"]);
    assert_eq!(j.code, 0, "{}", j.stderr);
    assert_eq!(o.stdout, j.stdout);
}

#[test]
fn a_payload_too_deep_to_parse_is_reported_briefly() {
    let dir = scratch("scale-deep");
    let deep = format!("{}x0{}", "exp(".repeat(300), ")".repeat(300));
    let text = long_payload(2).replace("x0 + x1", &deep);
    let ir = write(&dir, "deep.fbir", text.as_bytes());
    let o = fbc(&[&ir, "--target", "mali", "--emit", "opencl"]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(o.stderr.contains("expression nested deeper than 200 levels"), "{}", o.stderr);
    let first = o.stderr.lines().next().unwrap_or_default();
    assert!(first.contains("...") && first.len() < 400, "{first}");
}

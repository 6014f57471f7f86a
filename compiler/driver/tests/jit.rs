//! `fbc run --target cpu-jit` (and, with the `llvm` feature, `cpu-llvm`: [`TARGETS`]): every
//! function of the op corpus (`tests/ir/ops`) and a generated one-layer training step, lowered
//! and run as native code, checked against the reference interpreter on the unlowered module
//! (`--check`, the bound of `--target opencl --check`); elementwise results bit-identical to
//! `--target cpu`, and LLVM's bit-identical to Cranelift's; errors located at the launch.

use std::path::{Path, PathBuf};

mod common;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The CPU JIT targets of this build.
const TARGETS: &[&str] = &[
    "cpu-jit",
    #[cfg(feature = "llvm")]
    "cpu-llvm",
];

/// `fbc run FILE --entry F --target T -O LEVEL --random-inputs 7 --check [extra]`.
fn check(
    target: &str,
    path: &Path,
    entry: &str,
    level: u8,
    extra: &[&str],
) -> Result<String, String> {
    let p = path.to_string_lossy().into_owned();
    let o = format!("-O{level}");
    let mut args = vec!["run", &p, "--entry", entry, "--target", target, &o];
    args.extend(["--random-inputs", "7", "--check"]);
    args.extend_from_slice(extra);
    let out = common::fbc(&args);
    if out.code == 0 && out.stdout.contains("check passed") {
        Ok(out.stdout)
    } else {
        Err(format!("exit {}\n{}\n{}", out.code, out.stdout, out.stderr))
    }
}

fn functions(text: &str) -> Vec<String> {
    text.split("func.func @")
        .skip(1)
        .filter_map(|s| s.split('(').next())
        .map(str::to_string)
        .collect()
}

#[test]
fn every_op_file_matches_the_interpreter() {
    let files = common::op_corpus();
    let mut failed = Vec::new();
    let mut ran = 0;
    for f in &files {
        let text = std::fs::read_to_string(f).expect("readable");
        for func in functions(&text) {
            for (level, strategy) in
                [(0, "fblayout"), (3, "fblayout"), (3, "reuse"), (3, "convert")]
            {
                for target in TARGETS {
                    ran += 1;
                    if let Err(e) = check(target, f, &func, level, &["--layout-strategy", strategy])
                    {
                        failed.push(format!(
                            "{} @{func} {target} -O{level} {strategy}: {e}",
                            f.display()
                        ));
                    }
                }
            }
        }
    }
    assert!(ran >= 9 * 4 * TARGETS.len(), "{ran} runs");
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
}

#[test]
fn generated_training_step_matches_the_interpreter() {
    // One Llama layer, its LoRA gradients and the loss: embedding, RMSNorm, RoPE, attention,
    // SwiGLU, cross-entropy, forward and backward.
    let path = common::training_step("jit-train");
    for (level, strategy) in [(0, "fblayout"), (3, "fblayout")] {
        for target in TARGETS {
            let out = check(target, &path, "loss_grad", level, &["--layout-strategy", strategy])
                .unwrap_or_else(|e| panic!("{target} -O{level} {strategy}: {e}"));
            // Every result of the step was compared.
            assert!(out.matches("check result").count() >= 3, "{out}");
        }
    }
}

#[test]
fn elementwise_results_are_bit_identical_to_the_interpreter() {
    let dir = common::scratch("jit-bits");
    let f = repo().join("tests/ir/ops/elementwise.fbir");
    let f = f.to_string_lossy();
    let run = |target: &str, entry: &str| {
        let out = dir.join(format!("{target}-{entry}.safetensors"));
        let o = common::fbc(&[
            "run",
            &f,
            "--entry",
            entry,
            "--target",
            target,
            "-O0",
            "--random-inputs",
            "3",
            "--outputs",
            out.to_str().unwrap_or_default(),
        ]);
        assert_eq!(o.code, 0, "{target} @{entry}: {}", o.stderr);
        std::fs::read(out).expect("outputs written")
    };
    for (entry, target) in
        ["binary", "unary"].into_iter().flat_map(|e| TARGETS.iter().map(move |t| (e, *t)))
    {
        let (jit, cpu) = (run(target, entry), run("cpu", entry));
        // Same header, same f32 bits; a NaN may differ in sign and payload (the lowering
        // computes `relu` as the memory dialect's `max`, which returns the canonical NaN).
        let n = 8 + u64::from_le_bytes(cpu[..8].try_into().expect("header length")) as usize;
        assert_eq!(jit[..n], cpu[..n], "{target} @{entry}");
        assert_eq!(jit.len(), cpu.len());
        for (a, b) in jit[n..].chunks(4).zip(cpu[n..].chunks(4)) {
            let f = |c: &[u8]| f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            let (a, b) = (f(a), f(b));
            assert!(
                a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
                "{target} @{entry}: {a} vs {b}"
            );
        }
    }
}

const GATHER: &str = r#"func.func @main(%table: tensor<10x4xf32>, %ids: tensor<3xi32>) -> tensor<3x4xf32> {
  %mi = memory.upload %ids {layout = #layout.linear} : (tensor<3xi32>) -> !memory.buffer<3, i32>
  %mt = memory.upload %table {layout = #layout.linear} : (tensor<10x4xf32>) -> !memory.buffer<40, f32>
  %me = memory.alloc : () -> !memory.buffer<12, f32>
  memory.launch %mi, %mt, %me {kernel = "embed", domain = [3, 4], iterators = ["parallel", "parallel"], maps = [(i, d) -> (i), (i, d) -> (0), (i, d) -> (i * 4 + d)], body = "x1[x0 * 4 + d1]"} : (!memory.buffer<3, i32>, !memory.buffer<40, f32>, !memory.buffer<12, f32>) -> ()
  %e = memory.download %me {layout = #layout.linear} : (!memory.buffer<12, f32>) -> tensor<3x4xf32>
  func.return %e : (tensor<3x4xf32>) -> ()
}
"#;

#[test]
fn faults_are_located_at_the_launch_and_flags_checked() {
    let dir = common::scratch("jit-errors");
    // A lowered module runs as it is; an output map that writes past the output is refused
    // by the verifier before anything runs: an error at the launch (line 5) with the point.
    let bad = GATHER.replace("(i, d) -> (i * 4 + d)]", "(i, d) -> (i * 4 + d + 40)]");
    let p = common::write(&dir, "gather.fbir", bad.as_bytes());
    let o = common::fbc(&["run", &p, "--target", "cpu-jit", "--random-inputs", "1"]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(
        o.stderr.contains("gather.fbir:5:3: error: operand 2 (!memory.buffer<12, f32>) is written at offset 40 at d0=0, d1=0, outside its 12 elements"),
        "{}",
        o.stderr
    );
    // An id past the table: the gather's run-time check, at the launch, with the offset and
    // the point.
    let header = r#"{"ids":{"dtype":"I32","shape":[3],"data_offsets":[0,12]}}"#;
    let mut ids = (header.len() as u64).to_le_bytes().to_vec();
    ids.extend(header.as_bytes());
    [2i32, 10, 0].iter().for_each(|v| ids.extend(v.to_le_bytes()));
    let inputs = common::write(&dir, "ids.safetensors", &ids);
    let p = common::write(&dir, "gather_ok.fbir", GATHER.as_bytes());
    for target in TARGETS {
        let o = common::fbc(&[
            "run",
            &p,
            "--target",
            target,
            "--random-inputs",
            "1",
            "--inputs",
            &inputs,
        ]);
        assert_eq!(o.code, 1, "{target}: {}", o.stderr);
        assert!(
            o.stderr.contains("gather_ok.fbir:5:3: error: `memory.launch`: kernel `embed`: x1[40] is outside operand 1 (40 elements) at domain index [1, 0]"),
            "{target}: {}",
            o.stderr
        );
    }
    let o = common::fbc(&["run", &p, "--target", "cpu-jit", "--f64", "--random-inputs", "1"]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("--f64 with --target cpu-jit"), "{}", o.stderr);
}

#[test]
fn verbose_reports_launches_and_the_cache() {
    // Two identical elementwise ops at -O0 (no fusion): two launches, one compiled kernel.
    let dir = common::scratch("jit-verbose");
    let p = common::write(
        &dir,
        "twice.fbir",
        b"func.func @main(%x: tensor<4x8xf32>, %y: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {\n  %a = tensor.exp %x : (tensor<4x8xf32>) -> tensor<4x8xf32>\n  %b = tensor.exp %y : (tensor<4x8xf32>) -> tensor<4x8xf32>\n  func.return %a, %b : (tensor<4x8xf32>, tensor<4x8xf32>) -> ()\n}\n",
    );
    let o = common::fbc(&["run", &p, "--target", "cpu-jit", "-O0", "--random-inputs", "1", "-v"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stderr.contains(": 2 launches (0 packed contractions, 0 split over up to "),
        "small launches run on one thread: {}",
        o.stderr
    );
    assert!(o.stderr.contains(" threads), 1 kernels compiled in"), "{}", o.stderr);
}

#[test]
fn threads_give_bit_identical_training_steps() {
    // The generated step on 1 and on 4 threads (FBC_JIT_THREADS), and without packed
    // contractions (FBC_JIT_PACKED=0): identical output bytes; the large launches do run split,
    // the contractions packed.
    let path = common::training_step("jit-threads");
    let dir = common::scratch("jit-threads-out");
    let p = path.to_string_lossy();
    let run = |threads: &str, packed: &str| {
        let out = dir.join(format!("t{threads}-{packed}.safetensors"));
        let args = [
            "run",
            &p,
            "--entry",
            "loss_grad",
            "--target",
            "cpu-jit",
            "--random-inputs",
            "5",
            "-v",
            "--outputs",
            out.to_str().unwrap_or_default(),
        ];
        let o = common::fbc_env(
            &args,
            &[("FBC_JIT_THREADS", Path::new(threads)), ("FBC_JIT_PACKED", Path::new(packed))],
        );
        assert_eq!(o.code, 0, "{threads} threads: {}", o.stderr);
        (std::fs::read(out).expect("outputs written"), o.stderr)
    };
    let ((one, log1), (four, log4), (plain, log0)) = (run("1", "1"), run("4", "1"), run("4", "0"));
    // The number before `what` in `-v`'s launch summary.
    let count = |log: &str, what: &str| -> u64 {
        log.split(what)
            .next()
            .and_then(|s| s.rsplit([' ', '(']).next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no `{what}` in {log}"))
    };
    assert!(log1.contains(" split over up to 1 threads)"), "{log1}");
    assert_eq!(count(&log1, " split over up to"), 0, "{log1}");
    assert!(count(&log4, " split over up to 4 threads") > 0, "{log4}");
    assert!(count(&log4, " packed contractions") > 0, "{log4}");
    assert_eq!(count(&log0, " packed contractions"), 0, "{log0}");
    assert!(one == four, "outputs differ between 1 and 4 threads");
    assert!(four == plain, "outputs differ with and without packed contractions");
    let g = common::write(&dir, "gather.fbir", GATHER.as_bytes());
    let o = common::fbc_env(
        &["run", &g, "--target", "cpu-jit", "--random-inputs", "1"],
        &[("FBC_JIT_THREADS", Path::new("0"))],
    );
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(
        o.stderr.contains("FBC_JIT_THREADS=`0`: expected a positive number of threads"),
        "{}",
        o.stderr
    );
}

/// A `layout.remap` whose map the bounds prover can neither prove nor refute within its budget
/// passes the verifier; where it reads outside its operand at run time, the error is at the
/// remap op (the copy kernel of a returned view is located at the op that made the view, not
/// at `func.return`) and names the interpreter's point.
#[test]
fn a_remap_fault_is_located_at_the_remap() {
    let dir = common::scratch("jit-remap");
    let text = "func.func @main(%x: tensor<10006xf32>) -> tensor<1000x1000xf32> {\n  %y = layout.remap %x {map = (d0, d1) -> ((d0 * d1 + d0 * 7919 + d1 * 104729) mod 10007), shape = [1000, 1000]} : (tensor<10006xf32>) -> tensor<1000x1000xf32>\n  func.return %y : tensor<1000x1000xf32>\n}\n";
    let file = common::write(&dir, "remap.fbir", text.as_bytes());
    let at = format!("{file}:2:3: error: ");
    let o = common::fbc(&["run", &file, "--random-inputs", "1"]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(
        o.stderr.starts_with(&format!(
            "{at}`layout.remap`: result index [21, 777] reads x[10006], outside x's shape [10006]"
        )),
        "{}",
        o.stderr
    );
    for level in ["-O0", "-O3"] {
        let o = common::fbc(&["run", &file, "--random-inputs", "1", "--target", "cpu-jit", level]);
        assert_eq!(o.code, 1, "{}", o.stderr);
        let first = o.stderr.lines().next().unwrap_or_default();
        assert_eq!(
            first,
            format!(
                "{at}`memory.launch`: kernel `main_copy_y`: operand 0 (!memory.buffer<10006, f32>) \
                 accessed at element 10006, outside its 10006 elements (domain index [21, 777])"
            ),
            "{}",
            o.stderr
        );
    }
}

#[cfg(feature = "llvm")]
#[test]
fn llvm_training_step_is_bit_identical_to_cranelift() {
    // The generated one-layer step with its kernels compiled by LLVM (for this CPU and for a
    // generic one) writes the very bytes the Cranelift JIT writes: same semantics, no
    // reassociation.
    let path = common::training_step("llvm-train");
    let dir = common::scratch("llvm-train-out");
    let p = path.to_string_lossy();
    let run = |target: &str, extra: &[&str]| {
        let out = dir.join(format!("{target}{}.safetensors", extra.join("")));
        let mut args = vec!["run", &p, "--entry", "loss_grad", "--target", target];
        args.extend(["--random-inputs", "5", "--outputs", out.to_str().unwrap_or_default()]);
        args.extend_from_slice(extra);
        let o = common::fbc(&args);
        assert_eq!(o.code, 0, "{target} {extra:?}: {}", o.stderr);
        std::fs::read(out).expect("outputs written")
    };
    let cranelift = run("cpu-jit", &[]);
    assert!(run("cpu-llvm", &[]) == cranelift, "cpu-llvm differs from cpu-jit");
    assert!(run("cpu-llvm", &["--cpu", "generic"]) == cranelift, "--cpu generic differs");
    let o = common::fbc(&["run", &p, "--target", "cpu-llvm", "--cpu", "pentium"]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("--cpu pentium: expected `host` or `generic`"), "{}", o.stderr);
}

#[cfg(not(feature = "llvm"))]
#[test]
fn cpu_llvm_needs_the_llvm_feature() {
    let dir = common::scratch("no-llvm");
    let g = common::write(&dir, "gather.fbir", GATHER.as_bytes());
    let o = common::fbc(&["run", &g, "--target", "cpu-llvm", "--random-inputs", "1"]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("built with the `llvm` feature"), "{}", o.stderr);
}

#[test]
fn cpu_is_only_for_cpu_llvm() {
    let dir = common::scratch("cpu-flag");
    let g = common::write(&dir, "gather.fbir", GATHER.as_bytes());
    for target in ["cpu", "cpu-jit"] {
        let o = common::fbc(&["run", &g, "--target", target, "--cpu", "generic"]);
        assert_eq!(o.code, 2, "{}", o.stderr);
        assert!(o.stderr.contains("--cpu is for --target cpu-llvm"), "{}", o.stderr);
    }
}

#[test]
fn bench_times_every_launch_on_the_cpu() {
    // The matmul-fb pair at a small size, fblayout against convert: every launch timed, the
    // contractions packed, convert's conversion kernels counted, totals the sums of the medians.
    let dir = common::scratch("jit-bench");
    let p = common::write(
        &dir,
        "mmfb.fbir",
        b"func.func @mmfb(%a: tensor<32x64xf32>, %b: tensor<64x96xf32>, %do: tensor<32x96xf32>) -> (tensor<32x96xf32>, tensor<32x64xf32>) {\n  %o = tensor.matmul %a, %b : (tensor<32x64xf32>, tensor<64x96xf32>) -> tensor<32x96xf32>\n  %da = tensor.matmul %do, %b {transpose_b = true} : (tensor<32x96xf32>, tensor<64x96xf32>) -> tensor<32x64xf32>\n  func.return %o, %da : (tensor<32x96xf32>, tensor<32x64xf32>) -> ()\n}\n",
    );
    let o = common::fbc(&[
        "bench",
        &p,
        "--target",
        "cpu-jit",
        "--compare",
        "fblayout,convert",
        "--repeat",
        "2",
        "--json",
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let j: serde_json::Value = serde_json::from_str(&o.stdout).expect("JSON");
    assert_eq!(j["repeat"], 2);
    assert!(j["device"].as_str().is_some_and(|d| d.contains("cpu-jit")), "{j}");
    let runs = j["runs"].as_array().expect("runs");
    let names: Vec<&str> = runs.iter().filter_map(|r| r["strategy"].as_str()).collect();
    assert_eq!(names, ["fblayout", "convert"]);
    for r in runs {
        let kernels = r["kernels"].as_array().expect("kernels");
        assert_eq!(r["kernel_count"].as_u64(), Some(kernels.len() as u64));
        let total: u64 = kernels.iter().map(|k| k["median_ns"].as_u64().unwrap_or(0)).sum();
        assert_eq!(r["total_ns"].as_u64(), Some(total), "{r}");
        let matmuls: Vec<&serde_json::Value> =
            kernels.iter().filter(|k| k["source"] == "tensor.matmul").collect();
        assert_eq!(matmuls.len(), 2, "{r}");
        for k in matmuls {
            assert_eq!(k["packed"], true, "{k}");
            // 2·32·96·64 and 2·32·64·96 multiply-adds.
            assert_eq!(k["flops"].as_u64(), Some(2 * 32 * 96 * 64), "{k}");
        }
    }
    assert_eq!(runs[0]["conversion_kernels"], 0);
    assert!(runs[1]["conversion_kernels"].as_u64().is_some_and(|n| n > 0), "{}", runs[1]);
    assert_eq!(j["time_ratio_to_first"]["fblayout"], 1.0);
    // The table, and the OpenCL-only options refused.
    let o = common::fbc(&["bench", &p, "--target", "cpu-jit", "--repeat", "1"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.contains("on this CPU (cpu-jit, up to "), "{}", o.stdout);
    assert!(o.stdout.contains("tensor.matmul [packed]"), "{}", o.stdout);
    let o = common::fbc(&["bench", &p, "--target", "cpu-jit", "--plain-kernels"]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(
        o.stderr.contains("--plain-kernels, --split-k and --device are for --target opencl"),
        "{}",
        o.stderr
    );
    let o = common::fbc(&["bench", &p, "--target", "mali"]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("`fbc bench` runs on opencl, cpu-jit or cpu-llvm"), "{}", o.stderr);
}

//! Split-K contractions (`--split-k`) on the CPU JIT and on OpenCL (PoCL in CI): the results
//! pass `--check` against the interpreter for edge shapes, and are bit-identical from run to run
//! and across JIT thread counts; `fbc bench --split-k auto,off` runs both side by side.
//!
//! The OpenCL tests need the `opencl` feature and a device; without a device they fail when
//! `CI=true` and only print a notice otherwise, as `tests/opencl.rs` does.

use std::path::{Path, PathBuf};

mod common;

/// Edge shapes of split contractions: `K = 70` (not a multiple of 4 or 16), `K = 3` (shorter
/// than 4: not split), ranks 1, 3 and 16, `M = 1`, `N = 1`, both operands transposed, a batched
/// product with a broadcast operand, and an epilogue (scale, tanh).
const EDGES: &str = include_str!("../../transforms/tests/split_k_edges.fbir");

/// A LoRA-sized skinny product, large enough that the JIT runs its launches on several threads
/// and OpenCL uses the tiled kernel for the partial sums: `x·A` (128×4096 · 4096×8) and the
/// weight gradient of `A`, `xᵀ·g` (4096×128 · 128×8 → 4096×8, `K = 128`).
const LORA: &str = r#"func.func @lora(%x: tensor<128x4096xf32>, %a: tensor<4096x8xf32>, %g: tensor<128x8xf32>) -> (tensor<128x8xf32>, tensor<4096x8xf32>) {
  %xa = tensor.matmul %x, %a : (tensor<128x4096xf32>, tensor<4096x8xf32>) -> tensor<128x8xf32>
  %da = tensor.matmul %x, %g {transpose_a = true} : (tensor<128x4096xf32>, tensor<128x8xf32>) -> tensor<4096x8xf32>
  func.return %xa, %da : (tensor<128x8xf32>, tensor<4096x8xf32>) -> ()
}
"#;

fn file(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write");
    p
}

/// `fbc run FILE --target T --random-inputs 7 [extra]`, which must succeed; returns stdout.
fn run(path: &Path, target: &str, extra: &[&str], env: &[(&str, &Path)]) -> String {
    let p = path.to_string_lossy().into_owned();
    let mut args = vec!["run", &p, "--target", target, "--random-inputs", "7"];
    args.extend_from_slice(extra);
    let o = common::fbc_env(&args, env);
    assert_eq!(o.code, 0, "fbc {args:?}\n{}\n{}", o.stdout, o.stderr);
    o.stdout
}

/// Checks every result against the interpreter with `--split-k` at several chunk counts.
fn check_edges(target: &str) {
    let dir = common::scratch(&format!("split-k-edges-{target}"));
    let p = file(&dir, "edges.fbir", EDGES);
    for s in ["off", "3", "4", "16", "64"] {
        for level in ["-O0", "-O3"] {
            let out = run(&p, target, &["--split-k", s, level, "--check"], &[]);
            assert!(out.contains("check passed"), "split-k={s} {level}: {out}");
            assert_eq!(out.matches("check result").count(), 7, "{out}");
        }
    }
}

/// The results of `fbc run --target T ... --outputs`, as bytes.
fn outputs(path: &Path, target: &str, split: &str, tag: &str, env: &[(&str, &Path)]) -> Vec<u8> {
    outputs_for(path, target, split, "cpu", tag, env)
}

/// [`outputs`] for hardware profile `profile`.
fn outputs_for(
    path: &Path,
    target: &str,
    split: &str,
    profile: &str,
    tag: &str,
    env: &[(&str, &Path)],
) -> Vec<u8> {
    let name = Path::new(profile).file_stem().and_then(|n| n.to_str()).unwrap_or("profile");
    let out = path.with_file_name(format!("out-{target}-{split}-{name}-{tag}.safetensors"));
    let o = out.to_string_lossy().into_owned();
    run(path, target, &["--split-k", split, "--profile", profile, "--outputs", &o], env);
    std::fs::read(&out).expect("outputs written")
}

#[test]
fn jit_split_contractions_match_the_interpreter() {
    check_edges("cpu-jit");
}

#[test]
fn jit_split_results_are_bit_identical_across_runs_and_thread_counts() {
    let dir = common::scratch("split-k-jit-bits");
    let p = file(&dir, "lora.fbir", LORA);
    let out = run(&p, "cpu-jit", &["--split-k", "16", "--check"], &[]);
    assert!(out.contains("check passed"), "{out}");
    let one = Path::new("1");
    let three = Path::new("3");
    let base = outputs(&p, "cpu-jit", "16", "a", &[("FBC_JIT_THREADS", one)]);
    assert_eq!(base, outputs(&p, "cpu-jit", "16", "b", &[("FBC_JIT_THREADS", one)]));
    assert_eq!(base, outputs(&p, "cpu-jit", "16", "c", &[("FBC_JIT_THREADS", three)]));
    assert_eq!(base, outputs(&p, "cpu-jit", "16", "d", &[]));
    // Splitting changes the summation order, so the unsplit results differ in some bits (the
    // comparison above would not notice a split that did not happen).
    assert_ne!(base, outputs(&p, "cpu-jit", "off", "e", &[]));
}

#[cfg(feature = "opencl")]
mod opencl {
    use super::*;

    fn have_device() -> bool {
        if !fbc_runtime::device::opencl::devices().is_empty() {
            return true;
        }
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("CI=true but no OpenCL device was found: install pocl-opencl-icd");
        }
        eprintln!("notice: no OpenCL device; skipping (this would fail with CI=true)");
        false
    }

    #[test]
    fn opencl_split_contractions_match_the_interpreter() {
        if have_device() {
            check_edges("opencl");
        }
    }

    #[test]
    fn opencl_split_results_are_bit_identical_across_runs() {
        if !have_device() {
            return;
        }
        let dir = common::scratch("split-k-opencl-bits");
        let p = file(&dir, "lora.fbir", LORA);
        let out = run(&p, "opencl", &["--split-k", "16", "--check"], &[]);
        assert!(out.contains("check passed"), "{out}");
        let base = outputs(&p, "opencl", "16", "a", &[]);
        assert_eq!(base, outputs(&p, "opencl", "16", "b", &[]));
        assert_ne!(base, outputs(&p, "opencl", "off", "c", &[]));
    }

    /// The nvidia profile splits skinny products in one launch (`skinny.one_launch_split`: the
    /// last work-group of a block adds the chunks' partial sums): the edge shapes pass `--check`
    /// at every chunk count, the results repeat bit for bit, and a decode step (its products
    /// written into padded R-Tile images a texel at a time) passes `--check`.
    #[test]
    fn opencl_one_launch_splits_match_the_interpreter_and_repeat() {
        if !have_device() {
            return;
        }
        let dir = common::scratch("split-k-one-launch");
        assert!(fbc_target::builtin("nvidia").expect("nvidia").skinny.one_launch_split);
        let nv = "nvidia";
        let p = file(&dir, "edges.fbir", EDGES);
        for s in ["3", "16", "64"] {
            let out = run(&p, "opencl", &["--split-k", s, "--profile", nv, "--check"], &[]);
            assert!(out.contains("check passed"), "split-k={s}: {out}");
        }
        let p = file(&dir, "lora.fbir", LORA);
        let base = outputs_for(&p, "opencl", "16", nv, "a", &[]);
        assert_eq!(base, outputs_for(&p, "opencl", "16", nv, "b", &[]));
        assert_ne!(base, outputs_for(&p, "opencl", "off", nv, "c", &[]));
        let p = file(&dir, "inf.fbir", &common::inference_module("llama3.2-1b", 4, 48, 12));
        let emitted = dir.join("cl");
        let o = common::fbc(&[
            p.to_str().unwrap(),
            "-O3",
            "--target",
            nv,
            "--emit",
            "opencl",
            "-o",
            emitted.to_str().unwrap(),
        ]);
        assert_eq!(o.code, 0, "{}", o.stderr);
        let cl = std::fs::read_to_string(emitted.join("llama3_2_1b.cl")).expect("the .cl");
        assert!(cl.contains("// tensor.matmul[split-k 32 in one launch]"), "the Q projection");
        assert!(cl.contains("atomic_inc(fbc_count + fbc_block) == 31"), "32 chunks");
        assert!(!cl.contains("decode_matmul_l0_q_partial"), "no second launch");
        let out = run(&p, "opencl", &["--entry", "decode", "-O3", "--profile", nv, "--check"], &[]);
        assert!(out.contains("check passed"), "{out}");
    }

    #[test]
    fn bench_runs_split_k_choices_side_by_side() {
        if !have_device() {
            return;
        }
        let dir = common::scratch("split-k-bench");
        let p = file(&dir, "lora.fbir", LORA);
        let p = p.to_string_lossy().into_owned();
        let args = ["bench", &p, "--profile", "nvidia", "--split-k", "auto,off", "--repeat", "1"];
        let o = common::fbc(&args);
        assert_eq!(o.code, 0, "{}", o.stderr);
        let t = &o.stdout;
        // For the nvidia profile (132 compute units: at most 264 work-groups of the skinny
        // kernel) x·A (128 × 8 outputs, lanes along k: 8 groups, K = 4096) splits by 32, in one
        // launch of the skinny kernel, and xᵀ·g (4096 × 8 outputs, lanes along the 4096: 32
        // groups, K = 128) by 4, into chunks of 32, too short for lanes along the wide side:
        // the tiled kernel runs them, then a sum.
        assert!(t.contains("strategy fblayout split-k=auto (-O3): 3 kernels"), "{t}");
        assert!(t.contains("strategy fblayout split-k=off (-O3): 2 kernels"), "{t}");
        assert!(t.contains("tensor.matmul[split-k 32 in one launch] [skinny]"), "{t}");
        assert!(t.contains("tensor.matmul[split-k 4] [tiled]"), "{t}");
        assert!(t.contains("device time relative to fblayout split-k=auto"), "{t}");
        // For the generic profile (4 compute units: at most 8 groups) neither splits.
        let args = ["bench", &p, "--profile", "generic", "--split-k", "auto", "--repeat", "1"];
        let o = common::fbc(&args);
        assert_eq!(o.code, 0, "{}", o.stderr);
        let t = &o.stdout;
        assert!(t.contains("strategy fblayout split-k=auto (-O3): 2 kernels"), "{t}");
        assert!(!t.contains("[split-k"), "{t}");
    }
}

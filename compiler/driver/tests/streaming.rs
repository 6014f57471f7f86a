//! Weight streaming on the device: `fbc run --target opencl --memory-budget B` lowers with
//! `plan-weight-streaming{budget=B}`, uploads each streamed weight during the launch the plan
//! starts it at (on a second queue), and never holds more than `B` on the device; the results
//! are the interpreter's (`--check`). Runs on PoCL in CI; without an OpenCL device it prints a
//! notice, except under `CI=true`, where it fails.

mod common;

use common::{fbc, opencl_device, scratch};

/// `layers` layers `h = tanh(h · W_i)`, `x: [rows, width]`, each `W_i: [width, width]`.
fn deep_mlp(layers: usize, rows: u64, width: u64) -> String {
    let t = format!("tensor<{rows}x{width}xf32>");
    let w = format!("tensor<{width}x{width}xf32>");
    let args: Vec<String> = (0..layers).map(|i| format!(", %w{i}: {w}")).collect();
    let mut body = String::new();
    let mut h = "%x".to_string();
    for i in 0..layers {
        body.push_str(&format!(
            "  %m{i} = tensor.matmul {h}, %w{i} : ({t}, {w}) -> {t}\n  %h{i} = tensor.tanh %m{i} : ({t}) -> {t}\n"
        ));
        h = format!("%h{i}");
    }
    format!(
        "func.func @deep(%x: {t}{}) -> {t} {{\n{body}  func.return {h} : {t}\n}}\n",
        args.concat()
    )
}

/// The width of [`quarter_mlp`]'s layers.
const WIDTH: u64 = 128;

/// `deep_mlp(layers, 16, WIDTH)` written to `deep.fbir` in the scratch folder `name`: the
/// folder, the file's path, and a budget of a quarter of its weights' bytes (each 64 KiB).
fn quarter_mlp(name: &str, layers: usize) -> (std::path::PathBuf, String, u64) {
    let dir = scratch(name);
    let path = common::write(&dir, "deep.fbir", deep_mlp(layers, 16, WIDTH).as_bytes());
    (dir, path, layers as u64 * WIDTH * WIDTH * 4 / 4)
}

/// The number before `what` in the budget line `fbc run` prints.
fn figure(report: &str, what: &str) -> u64 {
    let line = report.lines().find(|l| l.starts_with("memory budget")).expect("the budget line");
    let at = line.find(what).unwrap_or_else(|| panic!("`{what}` in {line}"));
    line[..at]
        .split_whitespace()
        .last()
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("a number before `{what}` in {line}"))
}

#[test]
fn a_quarter_of_the_weights_is_enough_and_never_exceeded() {
    if !opencl_device() {
        return;
    }
    // 12 weights of 64 KiB (768 KiB); activations of 8 KiB.
    let (_, path, budget) = quarter_mlp("streaming-quarter", 12);
    for level in ["-O1", "-O3"] {
        let out = fbc(&[
            "run",
            &path,
            "--target",
            "opencl",
            level,
            "--random-inputs",
            "7",
            "--check",
            "--memory-budget",
            &budget.to_string(),
        ]);
        assert_eq!(out.code, 0, "{level}: {}", out.stderr);
        let peak = figure(&out.stderr, "bytes; streamed");
        let streamed = figure(&out.stderr, "bytes in");
        let uploads = figure(&out.stderr, "uploads");
        assert!(peak <= budget, "{level}: peak {peak} over the budget {budget}: {}", out.stderr);
        // Most weights arrive during earlier launches; the device never holds them all.
        assert!(uploads >= 8, "{level}: {}", out.stderr);
        assert!(streamed >= uploads * WIDTH * WIDTH * 4, "{level}: {}", out.stderr);
        assert!(out.stdout.contains("result0"), "{level}: {}", out.stdout);
    }
}

/// A call of several runs (`--runs`) copies the streamed weights into pinned host memory
/// once, before its first run: every later transfer reads them from there, and the last run's
/// results are still the interpreter's.
#[test]
fn repeated_runs_stream_from_pinned_host_copies() {
    if !opencl_device() {
        return;
    }
    let (_, path, budget) = quarter_mlp("streaming-pinned", 8);
    let budget = budget.to_string();
    let run = |runs: &str| {
        fbc(&[
            "run",
            &path,
            "--target",
            "opencl",
            "-O3",
            "--random-inputs",
            "3",
            "--check",
            "--memory-budget",
            &budget,
            "--runs",
            runs,
        ])
    };
    let out = run("3");
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("check passed"), "{}", out.stdout);
    let streamed = figure(&out.stderr, "bytes in");
    assert!(streamed >= 4 * WIDTH * WIDTH * 4, "{}", out.stderr);
    assert_eq!(figure(&out.stderr, "bytes from pinned host memory"), streamed, "{}", out.stderr);
    // One run makes no pinned copies.
    let out = run("1");
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(!out.stderr.contains("pinned"), "{}", out.stderr);
    assert_eq!(figure(&out.stderr, "bytes in"), streamed, "{}", out.stderr);
    // `--runs` is the device's.
    let out = fbc(&["run", &path, "--random-inputs", "3", "--runs", "2"]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("--runs is for --target opencl"), "{}", out.stderr);
}

#[test]
fn a_budget_below_what_one_launch_needs_is_an_error_that_names_the_minimum() {
    let dir = scratch("streaming-infeasible");
    let path = common::write(&dir, "deep.fbir", deep_mlp(3, 16, 128).as_bytes());
    let run = |budget: &str| {
        fbc(&[
            "run",
            &path,
            "--target",
            "opencl",
            "-O3",
            "--random-inputs",
            "1",
            "--check",
            "--memory-budget",
            budget,
        ])
    };
    let out = run("60KiB");
    if !cfg!(feature = "opencl") {
        assert_eq!(out.code, 2, "{}", out.stderr);
        return;
    }
    // For the generic profile the first product is split along its reduction: launch 0 holds
    // `x` (8 KiB), `w0` (64 KiB) and the partial sums (4 × 8 KiB): 104 KiB.
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(
        out.stderr.contains(
            "deep.fbir:1:11: error: plan-weight-streaming: a budget of 61440 bytes (60.00 KiB) \
             is below the 106496 bytes (104.00 KiB) that @deep needs at least (launch 0, \
             `deep_matmul_h0_partial`)"
        ),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("= note: the minimum feasible budget is 106496 bytes"),
        "{}",
        out.stderr
    );
    // The minimum is enough, on the device too.
    if opencl_device() {
        let out = run("106496");
        assert_eq!(out.code, 0, "{}", out.stderr);
        assert!(figure(&out.stderr, "bytes; streamed") <= 106_496, "{}", out.stderr);
        assert!(figure(&out.stderr, "uploads") >= 2, "{}", out.stderr);
    }
}

#[test]
fn the_runtime_refuses_to_go_past_the_budget_of_an_unplanned_module() {
    if !opencl_device() {
        return;
    }
    let dir = scratch("streaming-unplanned");
    let path = common::write(&dir, "deep.fbir", deep_mlp(4, 16, 128).as_bytes());
    // Lowered without a plan: every weight is uploaded before the first launch.
    let lowered = dir.join("deep.mem.fbir");
    let out = fbc(&[&path, "-O0", "--emit", "memory", "-o", lowered.to_str().unwrap()]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let lowered = lowered.to_str().unwrap();
    let out = fbc(&[
        "run",
        lowered,
        "--target",
        "opencl",
        "--random-inputs",
        "1",
        "--memory-budget",
        "200KiB",
    ]);
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(
        out.stderr.contains("error: the device memory budget of 204800 bytes is exceeded: storage"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("needs 65536 bytes while"), "{}", out.stderr);
    // The same module under a budget that holds it runs.
    let out = fbc(&[
        "run",
        lowered,
        "--target",
        "opencl",
        "--random-inputs",
        "1",
        "--memory-budget",
        "1MiB",
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(figure(&out.stderr, "uploads"), 0, "{}", out.stderr);
}

#[test]
fn memory_budget_is_for_opencl() {
    let dir = scratch("streaming-target");
    let path = common::write(&dir, "deep.fbir", deep_mlp(2, 4, 8).as_bytes());
    let out = fbc(&["run", &path, "--random-inputs", "1", "--memory-budget", "1MiB"]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("--memory-budget is for --target opencl"), "{}", out.stderr);
    let out = fbc(&["run", &path, "--target", "opencl", "--memory-budget", "12 parsecs"]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("unknown unit"), "{}", out.stderr);
}

/// A safetensors file of the deep chain's weights `w0..w{layers-1}` (`width` × `width`).
fn chain_weights(dir: &std::path::Path, layers: usize, width: usize) -> String {
    use safetensors::tensor::TensorView;
    let bytes: Vec<Vec<u8>> = (0..layers)
        .map(|l| {
            (0..width * width)
                .flat_map(|k| ((((k * 7 + l * 13) % 23) as f32 - 11.0) / 64.0).to_le_bytes())
                .collect()
        })
        .collect();
    let views: std::collections::HashMap<String, TensorView<'_>> = bytes
        .iter()
        .enumerate()
        .map(|(l, b)| {
            (
                format!("w{l}"),
                TensorView::new(safetensors::Dtype::F32, vec![width, width], b).unwrap(),
            )
        })
        .collect();
    common::write(dir, "w.safetensors", &safetensors::serialize(&views, None).unwrap())
}

#[test]
fn streamed_weights_are_read_from_their_file_during_the_run() {
    if !opencl_device() {
        return;
    }
    let dir = scratch("streaming-lazy");
    let (layers, width) = (12, 128usize);
    let path = common::write(&dir, "deep.fbir", deep_mlp(layers, 16, width as u64).as_bytes());
    let st = chain_weights(&dir, layers, width);
    let fbw = dir.join("w.fbw");
    let fbw = fbw.to_str().unwrap();
    let o = fbc(&["pack", &st, "-o", fbw]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let run = |out: &str, extra: &[&str]| {
        let out = dir.join(out);
        let mut args = vec![
            "run",
            &path,
            "--target",
            "opencl",
            "--weights",
            fbw,
            "--random-inputs",
            "3",
            "--outputs",
            out.to_str().unwrap(),
            "-v",
        ];
        args.extend_from_slice(extra);
        let o = fbc(&args);
        (o.code, std::fs::read(out).unwrap_or_default(), o.stderr)
    };
    let (code, whole, _) = run("whole.st", &[]);
    assert_eq!(code, 0);
    let (code, streamed, log) = run("streamed.st", &["--memory-budget", "196608"]);
    assert_eq!(code, 0, "{log}");
    // The same numbers, every weight the plan streams read from the file during the run.
    assert_eq!(whole, streamed);
    assert!(log.contains("streamed weight(s) from"), "{log}");
    assert!(figure(&log, "bytes; streamed") <= 196_608, "{log}");
    // Several runs: each weight is read from the file once, into pinned host memory, and
    // every run's transfers read it there.
    let (code, repeated, log) = run("repeated.st", &["--memory-budget", "196608", "--runs", "3"]);
    assert_eq!(code, 0, "{log}");
    assert_eq!(whole, repeated);
    let streamed = figure(&log, "bytes in");
    assert!(streamed >= 4 * (width * width * 4) as u64, "{log}");
    assert_eq!(figure(&log, "bytes from pinned host memory"), streamed, "{log}");
    // A damaged tile of a streamed weight fails the run at that weight, and writes nothing.
    let mut bytes = std::fs::read(fbw).unwrap();
    let w = fbc_runtime::weights::Weights::new(&bytes[..]).unwrap();
    let last = w.tensor("w11").unwrap().tiles[0].offset as usize;
    bytes[last + 5] ^= 0x40;
    std::fs::write(fbw, &bytes).unwrap();
    for runs in ["1", "3"] {
        let (code, out, log) = run("damaged.st", &["--memory-budget", "196608", "--runs", runs]);
        assert_eq!(code, 1, "{log}");
        assert!(out.is_empty(), "{log}");
        assert!(
            log.contains("tensor `w11`, tile 0: checksum mismatch (the file is corrupted)"),
            "{log}"
        );
    }
}

/// The largest minimum budget an infeasible-budget error states (one per function).
fn log_min(log: &str) -> u64 {
    log.match_indices("the minimum feasible budget is ")
        .filter_map(|(at, m)| log[at + m.len()..].split(' ').next()?.parse().ok())
        .max()
        .unwrap_or_else(|| panic!("no minimum in {log}"))
}

/// `--kv-tiling`: a decode step's KV caches are streamed in before their layer and written back
/// after it, so a budget too small to keep them all on the device (the plan's error without
/// the flag) runs with it, holds no more than the budget, and gives the same numbers.
#[test]
fn kv_tiling_keeps_the_caches_of_other_layers_off_the_device() {
    let dir = scratch("streaming-kv");
    let path = dir.join("kv.fbir");
    let path = path.to_str().unwrap();
    let o = fbc(&[
        "gen",
        "llama3.2-1b",
        "--inference",
        "--layers",
        "2",
        "--seq",
        "4",
        "--max-seq",
        "2048",
        "--vocab",
        "48",
        "-o",
        path,
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let run = |out: &str, extra: &[&str]| {
        let out = dir.join(out);
        let mut args = vec![
            "run",
            path,
            "--entry",
            "decode",
            "--target",
            "opencl",
            "--random-inputs",
            "2",
            "--outputs",
            out.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let o = fbc(&args);
        (o.code, std::fs::read(out).unwrap_or_default(), o.stderr)
    };
    let budget = "140000000";
    let (code, _, log) = run("plain.st", &["--memory-budget", budget]);
    if !cfg!(feature = "opencl") {
        assert_eq!(code, 2, "{log}");
        return;
    }
    assert_eq!(code, 1, "{log}");
    assert!(log.contains("error: plan-weight-streaming: a budget of 140000000 bytes"), "{log}");
    let min = log_min(&log);
    if !opencl_device() {
        return;
    }
    let (code, whole, log) = run("whole.st", &[]);
    assert_eq!(code, 0, "{log}");
    // Without the flag, the minimum budget the plan states is enough on the device, where
    // the fused attention takes two kernels (the plan counts launch ops, the runtime kernels).
    let (code, plain, log) = run("plain.st", &["--memory-budget", &min.to_string()]);
    assert_eq!(code, 0, "{log}");
    assert_eq!(whole, plain);
    assert!(figure(&log, "bytes; streamed") <= min, "{log}");
    let (code, tiled, log) = run("tiled.st", &["--memory-budget", budget, "--kv-tiling"]);
    assert_eq!(code, 0, "{log}");
    assert_eq!(whole, tiled);
    assert!(figure(&log, "bytes; streamed") <= 140_000_000, "{log}");
    // Two layers' keys and values, [1, 8, 2048, 64] f32 each.
    assert!(
        log.contains("; wrote 16777216 bytes back to the host after their last launch"),
        "{log}"
    );
}

/// A tied LM head whose table (`[1024, 64]`, 256 KiB) and logits (64 KiB) do not fit a 300 KiB
/// budget together: `split-weight-rows` (first under a budget, tiles of an eighth of it) reads
/// the table in row tiles of 128 rows, each streamed on its own, while the embedding reads it
/// whole at the start. Without the pass the plan's minimum is above the budget.
#[test]
fn a_table_the_budget_cannot_hold_with_its_logits_streams_in_row_tiles() {
    let dir = scratch("streaming-row-tiles");
    let text = "func.func @lm(%tokens: tensor<1x16xi32>, %table: tensor<1024x64xf32>, %w: tensor<64x64xf32>) -> tensor<1x16x1024xf32> {
  %e = tensor.embedding %table, %tokens : (tensor<1024x64xf32>, tensor<1x16xi32>) -> tensor<1x16x64xf32>
  %m = tensor.matmul %e, %w : (tensor<1x16x64xf32>, tensor<64x64xf32>) -> tensor<1x16x64xf32>
  %h = tensor.tanh %m : (tensor<1x16x64xf32>) -> tensor<1x16x64xf32>
  %logits = tensor.matmul %h, %table {transpose_b = true} : (tensor<1x16x64xf32>, tensor<1024x64xf32>) -> tensor<1x16x1024xf32>
  func.return %logits : tensor<1x16x1024xf32>
}
";
    let path = common::write(&dir, "lm.fbir", text.as_bytes());
    let run = |extra: &[&str]| {
        let mut a = vec![
            "run",
            &path,
            "--target",
            "opencl",
            "-O3",
            "--random-inputs",
            "5",
            "--check",
            "--memory-budget",
            "300KiB",
        ];
        a.extend_from_slice(extra);
        fbc(&a)
    };
    let out = run(&["--disable-pass", "split-weight-rows"]);
    if !cfg!(feature = "opencl") {
        assert_eq!(out.code, 2, "{}", out.stderr);
        return;
    }
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(
        out.stderr.contains("lm.fbir:1:11: error: plan-weight-streaming: a budget of 307200 bytes (300.00 KiB) is below the"),
        "{}",
        out.stderr
    );
    if !opencl_device() {
        return;
    }
    let out = run(&[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("check passed"), "{}", out.stdout);
    assert!(figure(&out.stderr, "bytes; streamed") <= 307_200, "{}", out.stderr);
    // The eight tiles (32 KiB each) and `w` stream; the whole table is there from the start.
    assert_eq!(figure(&out.stderr, "uploads"), 9, "{}", out.stderr);
    assert_eq!(figure(&out.stderr, "bytes in"), 8 * 32_768 + 16_384, "{}", out.stderr);
    // Weights read from a `.fbw` during the run (each tile cut from the table as it is
    // made), in one run and in three from pinned host copies: the numbers of the whole run.
    use safetensors::tensor::TensorView;
    let values = |n: usize, k: usize| -> Vec<u8> {
        (0..n).flat_map(|i| ((((i * 7 + k) % 23) as f32 - 11.0) / 32.0).to_le_bytes()).collect()
    };
    let (table, w) = (values(1024 * 64, 1), values(64 * 64, 2));
    let views = std::collections::HashMap::from([
        (
            "table".to_string(),
            TensorView::new(safetensors::Dtype::F32, vec![1024, 64], &table).unwrap(),
        ),
        ("w".to_string(), TensorView::new(safetensors::Dtype::F32, vec![64, 64], &w).unwrap()),
    ]);
    let st = common::write(&dir, "w.safetensors", &safetensors::serialize(&views, None).unwrap());
    let fbw = dir.join("w.fbw");
    let fbw = fbw.to_str().unwrap();
    let o = fbc(&["pack", &st, "-o", fbw]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let from_file = |name: &str, extra: &[&str]| {
        let out = dir.join(name);
        let mut a = vec!["run", &path, "--target", "opencl", "-O3", "--weights", fbw];
        a.extend_from_slice(&["--random-inputs", "5", "--outputs", out.to_str().unwrap(), "-v"]);
        a.extend_from_slice(extra);
        let o = fbc(&a);
        assert_eq!(o.code, 0, "{name}: {}", o.stderr);
        (std::fs::read(out).unwrap(), o.stderr)
    };
    let (whole, _) = from_file("whole.st", &[]);
    let (tiled, log) = from_file("tiled.st", &["--memory-budget", "300KiB"]);
    assert_eq!(whole, tiled, "{log}");
    assert!(log.contains("streamed weight(s) from"), "{log}");
    let (repeated, log) = from_file("repeated.st", &["--memory-budget", "300KiB", "--runs", "3"]);
    assert_eq!(whole, repeated, "{log}");
    assert_eq!(figure(&log, "bytes from pinned host memory"), figure(&log, "bytes in"), "{log}");
}

/// `fbc generate` on a one-layer Llama with a tied table of 8192 × 2048 (67 MB): with
/// whole weights the table stays on the device from the embedding to the logits, beside the
/// layer's weights; in row tiles it is whole only for the embedding. A budget between the two
/// minimums gives the unconstrained run's tokens and holds no more than the budget.
#[test]
fn generate_streams_a_tied_table_in_row_tiles() {
    let dir = scratch("streaming-generate-tiles");
    let text = common::inference_module("llama3.2-1b", 4, 8192, 8);
    let path = common::write(&dir, "g.fbir", text.as_bytes());
    let run = |extra: &[&str]| {
        let mut a = vec!["generate", &path, "--target", "opencl", "--random-weights", "4"];
        a.extend_from_slice(&["--prompt", "3,17", "--max-new", "1"]);
        a.extend_from_slice(extra);
        fbc(&a)
    };
    if !cfg!(feature = "opencl") {
        return;
    }
    let tiled_min = log_min(&run(&["--memory-budget", "1000"]).stderr);
    let whole = run(&["--memory-budget", "1000", "--disable-pass", "split-weight-rows"]);
    let whole_min = log_min(&whole.stderr);
    // The table is most of the difference.
    assert!(whole_min > tiled_min + 60_000_000, "{tiled_min} {whole_min}");
    if !opencl_device() {
        return;
    }
    let budget = ((tiled_min + whole_min) / 2).to_string();
    let plain = run(&[]);
    assert_eq!(plain.code, 0, "{}", plain.stderr);
    let tiled = run(&["--memory-budget", &budget]);
    assert_eq!(tiled.code, 0, "{}", tiled.stderr);
    assert_eq!(tiled.stdout, plain.stdout);
    let at = tiled.stderr.find(", peak device memory ").expect("a peak") + 21;
    let peak: u64 = tiled.stderr[at..].split(' ').next().and_then(|w| w.parse().ok()).unwrap();
    assert!(peak <= budget.parse().unwrap(), "{budget}: {}", tiled.stderr);
}

/// `fbc bench --memory-budget` splits the streamed run's device time into transfers, launches
/// alone and idle time (they add up to the whole), and `--timeline` draws one strip per upload.
#[test]
fn bench_shows_where_a_streamed_run_spent_its_time() {
    if !opencl_device() {
        return;
    }
    let (dir, path, budget) = quarter_mlp("streaming-bench", 12);
    let budget = budget.to_string();
    let html = dir.join("t.html");
    let out = fbc(&[
        "bench",
        &path,
        "--memory-budget",
        &budget,
        "--repeat",
        "2",
        "--timeline",
        html.to_str().unwrap_or_default(),
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let text = format!("{}{}", out.stdout, out.stderr);
    let line = text
        .lines()
        .find(|l| l.contains("from the first launch or transfer"))
        .unwrap_or_else(|| panic!("no breakdown line: {text}"));
    // "... : W ms = T ms with a transfer under way + A ms of launches alone + I ms idle; ..."
    let ms: Vec<f64> = line
        .split_whitespace()
        .zip(line.split_whitespace().skip(1))
        .filter(|(_, unit)| unit.trim_end_matches(';') == "ms")
        .filter_map(|(v, _)| v.parse().ok())
        .collect();
    assert!(ms.len() >= 5, "{line}");
    let (wall, parts) = (ms[0], ms[1] + ms[2] + ms[3]);
    assert!((wall - parts).abs() <= 0.002, "{line}");
    assert!(ms[1] > 0.0, "{line}");
    let uploads = text
        .lines()
        .find(|l| l.contains("memory budget"))
        .and_then(|l| l.split(" uploads").next()?.split_whitespace().last()?.parse::<usize>().ok())
        .unwrap_or_else(|| panic!("no upload count: {text}"));
    let page = std::fs::read_to_string(&html).expect("the timeline");
    assert_eq!(page.matches("<rect class=\"t\"").count(), uploads, "{text}");
    assert!(uploads >= 8, "{text}");
}

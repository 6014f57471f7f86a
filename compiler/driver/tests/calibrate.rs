//! `fbc calibrate` on a real device (PoCL in CI): the profile it writes parses back (and
//! round-trips through the plain writer, `[measured]` included), every command that takes a
//! profile accepts it, its measured numbers are positive and finite and agree with the device's
//! own answers, each replaced number is annotated and every other keeps the base's comment;
//! `--base` takes a builtin name or a file (a malformed one is a located error); and the
//! runtime's probe, which runs the micro-benchmarks, times what it is given and refuses what it
//! cannot run. No assertion is about how fast anything is.
//!
//! No silent skips: without an OpenCL device these tests fail when `CI=true` and only print a
//! notice and pass when `CI` is unset (a developer machine without PoCL).
#![cfg(feature = "opencl")]

mod common;

use common::have_device;

use fbc_runtime::device::opencl::{
    device_facts, probe, DeviceSel, OpenClError, Probe, ProbeArg, ProbeLaunch, ProbeStorage,
    RunOptions,
};
use fbc_target::{from_path, from_toml, HardwareProfile};

/// matmul-fb's three products at 64 x 64 x 64.
const MATMUL_FB: &str = r#"func.func @matmul_fb(%a: tensor<64x64xf32>, %b: tensor<64x64xf32>, %do: tensor<64x64xf32>) -> (tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>) {
  %o = tensor.matmul %a, %b : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
  %da = tensor.matmul %do, %b {transpose_b = true} : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
  %db = tensor.matmul %a, %do {transpose_a = true} : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
  func.return %o, %da, %db : (tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>) -> ()
}
"#;

/// `fbc calibrate --quick -o DIR/NAME [extra]`: the profile's path, text and stdout.
fn calibrate(dir: &std::path::Path, name: &str, extra: &[&str]) -> (String, String, String) {
    let out = dir.join(name);
    let out = out.to_str().unwrap_or_default().to_string();
    let mut args = vec!["calibrate", "--quick", "-o", out.as_str()];
    args.extend(extra);
    let o = common::fbc(&args);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let text = std::fs::read_to_string(&out).expect("the profile is written");
    (out, text, o.stdout)
}

/// The line of `text` that sets `key` (at the start of a line).
fn line<'t>(text: &'t str, key: &str) -> &'t str {
    let prefix = format!("{key} = ");
    text.lines().find(|l| l.starts_with(&prefix)).unwrap_or_else(|| panic!("{key} in\n{text}"))
}

#[test]
fn calibrate_writes_a_profile_that_every_command_accepts() {
    if !have_device() {
        return;
    }
    let dir = common::scratch("calibrate");
    let (path, text, stdout) = calibrate(&dir, "pocl.toml", &[]);
    assert!(stdout.contains(&format!("wrote {path}")), "{stdout}");
    let facts = device_facts(&DeviceSel::default()).expect("the device answers");

    // It parses back, and round-trips through the plain writer with its [measured] table.
    let p: HardwareProfile = from_path(std::path::Path::new(&path)).expect("parses back");
    assert_eq!(from_toml(&p.to_toml()).expect("plain text parses"), p);
    assert_eq!(from_toml(&text).expect("parses"), p);

    // The device's own answers replace the base's.
    assert_eq!(p.devices, std::slice::from_ref(&facts.name));
    assert_eq!(p.compute.compute_units, facts.compute_units);
    assert_eq!(u64::from(p.compute.max_work_group_size), facts.max_work_group_size);
    assert_eq!(p.compute.local_mem_bytes, facts.local_mem_bytes);
    assert_eq!(p.compute.fp16, facts.fp16);
    assert_eq!(p.image.supported, facts.image_support);

    // The measured numbers: present for what PoCL can measure, positive and finite.
    let m = p.measured.as_ref().expect("[measured]");
    assert_eq!(
        (m.device.as_str(), m.driver.as_str()),
        (facts.name.as_str(), facts.driver.as_str())
    );
    assert!(m.quick);
    let mut rates = vec![
        ("buffer_row_gbps", m.buffer_row_gbps),
        ("buffer_column_gbps", m.buffer_column_gbps),
        ("contraction_buffer_gflops", m.contraction_buffer_gflops),
        ("launch_host_us", m.launch_host_us),
        ("launch_interval_us", m.launch_interval_us),
    ];
    if facts.image_support {
        rates.extend([
            ("image_row_gbps", m.image_row_gbps),
            ("image_column_gbps", m.image_column_gbps),
            ("image_tile_gbps", m.image_tile_gbps),
            ("contraction_image_gflops", m.contraction_image_gflops),
        ]);
        assert_eq!(m.texture_blocks.len(), 11, "every probe shape is timed");
    }
    for (name, rate) in &rates {
        let v = rate.unwrap_or_else(|| panic!("{name} not measured:\n{text}")).get();
        assert!(v.is_finite() && v > 0.0, "{name} = {v}");
        // Each measured figure is annotated with the device, driver and date.
        let note =
            format!("# measured by fbc calibrate on {} ({}) {}: ", m.device, m.driver, m.date);
        assert!(line(&text, name).contains(&note), "{name}: {}", line(&text, name));
    }
    for b in &m.texture_blocks {
        assert!(b.ns.get().is_finite() && b.ns.get() > 0.0, "{b:?}");
    }
    for v in [p.memory.dram_bandwidth_gbps, p.compute.peak_f32_gflops] {
        assert!(v.is_finite() && v > 0.0, "{v}");
    }
    assert_eq!(Some(p.memory.dram_bandwidth_gbps), m.buffer_row_gbps.map(|r| r.get()));
    // The hardware peak stays the base's (the contraction rates are evidence only).
    let generic = fbc_target::builtin("generic").expect("generic");
    assert_eq!(p.compute.peak_f32_gflops, generic.compute.peak_f32_gflops);
    assert!(!line(&text, "peak_f32_gflops").contains("measured by fbc calibrate"));
    // Replaced numbers carry the note; the others keep the base's (generic's) comments.
    for key in ["compute_units", "local_mem_bytes", "dram_bandwidth_gbps"] {
        assert!(line(&text, key).contains("# measured by fbc calibrate on "), "{key}");
    }
    assert_eq!(
        line(&text, "l1_bytes"),
        "l1_bytes = 16384 # [mali] smallest documented L1 among the targets"
    );
    assert!(text.starts_with("# Calibrated by `fbc calibrate` on "), "{text}");
    assert!(text.contains("# Hardware profile: conservative portable defaults"), "{text}");
    // --quick's probe is too small to fit a block: generic's stays, and the report says why.
    assert_eq!((p.texture_cache.block_h, p.texture_cache.block_w), (4, 4));
    assert!(stdout.contains("cells are too few to trust a fit"), "{stdout}");

    // Every command that takes a profile takes it.
    let input = common::write(&dir, "mm.fbir", MATMUL_FB.as_bytes());
    let emitted = dir.join("mm.opencl");
    let o = common::fbc(&[
        &input,
        "-O3",
        "--target",
        &path,
        "-o",
        emitted.to_str().unwrap_or_default(),
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(emitted.join("mm.cl").exists());
    let o = common::fbc(&["bench", &input, "--profile", &path, "--repeat", "1", "--json"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let j: serde_json::Value = serde_json::from_str(&o.stdout).expect("JSON");
    assert_eq!(j["profile"], path.as_str());
    let o = common::fbc(&[
        "run",
        &input,
        "--target",
        "opencl",
        "--profile",
        &path,
        "--random-inputs",
        "3",
        "--check",
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.contains("check passed"), "{}", o.stdout);
    let html = dir.join("mm.html");
    let o = common::fbc(&[
        "viz",
        &input,
        "-O3",
        "--target",
        &path,
        "-o",
        html.to_str().unwrap_or_default(),
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);

    // Calibrated again over its own output, the earlier [measured] table is replaced, not kept
    // twice, and the result still reads back.
    let (_, again, _) = calibrate(&dir, "again.toml", &["--base", &path]);
    assert_eq!(again.matches("\n[measured]\n").count(), 1, "{again}");
    assert_eq!(again.matches("# Calibrated by `fbc calibrate` on ").count(), 1, "{again}");
    from_toml(&again).expect("parses back");
    // No progress bar reaches standard output or a standard error that is not a terminal.
    let o = common::fbc(&["calibrate", "--quick", "-o", &path]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    for s in [&o.stdout, &o.stderr] {
        assert!(!s.contains(['\r', '\u{1b}', '█', '░']), "progress drawn: {s:?}");
    }
}

#[test]
fn calibrate_starts_from_the_base_it_is_given() {
    if !have_device() {
        return;
    }
    let dir = common::scratch("calibrate-base");
    let (_, text, stdout) = calibrate(&dir, "from-nvidia.toml", &["--base", "nvidia"]);
    assert!(stdout.contains("base profile `nvidia`"), "{stdout}");
    let p = from_toml(&text).expect("parses back");
    let nvidia = fbc_target::builtin("nvidia").expect("nvidia");
    // What is not measured is nvidia's, with nvidia's source beside it.
    assert_eq!(p.texture_cache.l2_bytes, nvidia.texture_cache.l2_bytes);
    assert_eq!(line(&text, "l2_bytes"), "l2_bytes = 52428800 # [hop] 50 MB L2 (taken as 50 MiB)");
    assert_eq!(p.contraction, nvidia.contraction);
    assert!(text.contains("#   [sweep]  Measured on the lent H200"), "the base's references stay");

    // A base file that does not parse is an input error at its line and column.
    let generic = include_str!("../../../dialects/target/profiles/generic.toml");
    let bad =
        common::write(&dir, "bad.toml", generic.replace("fp16 = false", "fp16 = 1").as_bytes());
    let row = generic.lines().position(|l| l.starts_with("fp16 = false")).unwrap_or(0) + 1;
    let out = dir.join("never.toml");
    let o = common::fbc(&[
        "calibrate",
        "--quick",
        "--base",
        &bad,
        "-o",
        out.to_str().unwrap_or_default(),
    ]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(o.stderr.starts_with(&format!("{bad}:{row}:8: error: ")), "{}", o.stderr);
    assert!(!out.exists(), "nothing is written");
    // An unknown builtin and an unknown device are command-line errors.
    let o = common::fbc(&[
        "calibrate",
        "--quick",
        "--base",
        "phone",
        "-o",
        out.to_str().unwrap_or_default(),
    ]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("unknown target"), "{}", o.stderr);
    let o = common::fbc(&[
        "calibrate",
        "--quick",
        "--device",
        "99",
        "-o",
        out.to_str().unwrap_or_default(),
    ]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("device 99"), "{}", o.stderr);
    assert!(!out.exists(), "nothing is written");
}

/// The runtime's probe: each launch's timed repetitions, one event each, starting in queue
/// order; storage it cannot make or a kernel argument it has not are errors, before anything
/// runs where they can be known before.
#[test]
fn the_probe_times_its_launches_and_refuses_what_it_cannot_run() {
    if !have_device() {
        return;
    }
    let facts = device_facts(&DeviceSel::default()).expect("facts");
    let empty = |repeat| ProbeLaunch {
        kernel: "fbc_cal_empty".into(),
        args: vec![ProbeArg::Storage(0)],
        global: vec![1],
        local: None,
        repeat,
    };
    let rows = ProbeLaunch {
        kernel: "fbc_cal_buffer_rows".into(),
        args: vec![ProbeArg::Storage(1), ProbeArg::Storage(0), ProbeArg::Int(16), ProbeArg::Int(4)],
        global: vec![16, 8],
        local: None,
        repeat: 2,
    };
    let p = Probe {
        source: fbc_kernels::CALIBRATE.to_string(),
        storage: vec![
            ProbeStorage::Buffer { floats: 16 * 8 },
            ProbeStorage::Buffer { floats: 16 * 32 * 4 },
        ],
        launches: vec![empty(3), rows],
    };
    let out = probe(&p, &RunOptions::default()).expect("runs");
    assert_eq!(out.facts, facts);
    assert_eq!(out.launches.len(), 2);
    let t = &out.launches[0];
    assert_eq!((t.ns.len(), t.starts.len()), (3, 3));
    assert_eq!(t.starts[0], 0);
    assert!(t.starts.windows(2).all(|w| w[0] <= w[1]), "{:?}", t.starts);
    assert!(t.host_ns > 0);
    assert_eq!(out.launches[1].ns.len(), 2);

    // Storage that the memory limit cannot hold (its size overflows), an argument the probe has
    // not, an image larger than the device's.
    let huge = Probe { storage: vec![ProbeStorage::Buffer { floats: u64::MAX }], ..p.clone() };
    assert!(matches!(probe(&huge, &RunOptions::default()), Err(OpenClError::Memory(_))));
    let missing = Probe {
        launches: vec![ProbeLaunch { args: vec![ProbeArg::Storage(7)], ..empty(1) }],
        ..p.clone()
    };
    let e = probe(&missing, &RunOptions::default()).expect_err("no storage 7");
    assert!(e.to_string().contains("storage 7"), "{e}");
    let side = facts.image2d_max[0].saturating_add(1);
    let wide = Probe { storage: vec![ProbeStorage::Image { width: side, height: 1 }], ..p };
    assert!(matches!(probe(&wide, &RunOptions::default()), Err(OpenClError::Unsupported(_))));
}

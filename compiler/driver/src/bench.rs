//! `fbc bench-parse`: front-end throughput on a generated module.
//!
//! Generates a function of N ops (a mix of elementwise, matmul, reshape, transpose and reduction
//! ops with full signatures, as printed IR has), then times each stage separately: lexing and
//! parsing to the AST, building the IR, verifying, and printing. Each stage runs `repeat` times and
//! the fastest run is reported, the usual way to read a benchmark on a shared, noisy machine.
//! Memory is the growth of the resident set while the module is alive, per op.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fbc_dialects::kind::LayoutOp;
use fbc_ir::{OpRegistry, SourceFile};

use crate::cli::BenchArgs;

/// Text of a module with `n` ops (plus the return).
pub fn generate(n: usize) -> String {
    let mut s = String::with_capacity(n * 110);
    s.push_str("module @bench {\n  func.func @main(%a: tensor<8x16xf32>, %w: tensor<16x16xf32>) -> tensor<8x16xf32> {\n");
    let t = "tensor<8x16xf32>";
    let mut last = "a".to_string();
    for i in 0..n {
        let v = format!("v{i}");
        match i % 8 {
            0 => writeln!(s, "    %{v} = tensor.add %{last}, %a : ({t}, {t}) -> {t}"),
            1 => writeln!(s, "    %{v} = tensor.matmul %{last}, %w : ({t}, tensor<16x16xf32>) -> {t}"),
            2 => writeln!(s, "    %{v} = tensor.exp %{last} : ({t}) -> {t}"),
            3 => writeln!(s, "    %{v} = tensor.reshape %{last} {{shape = [8, 4, 4]}} : ({t}) -> tensor<8x4x4xf32>"),
            4 => writeln!(s, "    %{v} = tensor.transpose %{last} {{perm = [0, 2, 1]}} : (tensor<8x4x4xf32>) -> tensor<8x4x4xf32>"),
            5 => writeln!(s, "    %{v} = tensor.reshape %{last} {{shape = [8, 16]}} : (tensor<8x4x4xf32>) -> {t}"),
            6 => writeln!(s, "    %{v} = tensor.scale %{last} {{factor = 0.5}} : ({t}) -> {t}"),
            _ => writeln!(s, "    %{v} = tensor.mul %{last}, %{last} : ({t}, {t}) -> {t}"),
        }
        .expect("writing to a String");
        last = v;
    }
    let _ = writeln!(s, "    func.return %{last} : {t}\n  }}\n}}");
    s
}

fn best<T>(repeat: usize, mut f: impl FnMut() -> T) -> (Duration, T) {
    let mut best = Duration::MAX;
    let mut out = None;
    for _ in 0..repeat.max(1) {
        let start = Instant::now();
        let r = f();
        best = best.min(start.elapsed());
        out = Some(r);
    }
    (best, out.expect("ran at least once"))
}

fn rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Bytes the benchmark holds per generated op at its peak (the text, the AST, the module and the
/// printed text together): the peak resident set of `fbc bench-parse --ops 1000000 --repeat 1`
/// was 1,998,832 KiB (`/usr/bin/time -f %M`, release build), 2047 bytes per op.
pub const BYTES_PER_OP: u64 = 2048;

/// Checks `--ops` against the memory limit before anything is generated: the error names the
/// estimate and the limit (a command-line error).
pub fn check_ops(ops: usize, limit: u64) -> Result<(), String> {
    let need = (ops as u64).checked_mul(BYTES_PER_OP);
    if need.is_some_and(|n| n <= limit) {
        return Ok(());
    }
    Err(format!(
        "--ops {ops}: the generated module would need about {} ({BYTES_PER_OP} bytes per op), \
         over the memory limit of {}; lower --ops or raise --max-memory",
        fbc_runtime::limits::describe_bytes(need),
        fbc_runtime::limits::describe_bytes(Some(limit))
    ))
}

/// Runs the benchmark and returns the report (a table, or JSON).
pub fn run(registry: &OpRegistry, ops: usize, repeat: usize, json: bool) -> Result<String, String> {
    let text = generate(ops);
    let file = Arc::new(SourceFile::new("bench.fbir", text));
    let (t_parse, ast) = best(repeat, || fbc_grammar::parse(&file.text));
    let ast = ast.map_err(|d| fbc_grammar::diag::render_all(&file, &d))?;
    let rss_before = rss_kib();
    let (t_build, module) = best(repeat, || fbc_ir::build_module(&ast, registry));
    let module = module.map_err(|d| fbc_grammar::diag::render_all(&file, &d))?;
    let rss_after = rss_kib();
    let (t_verify, errors) = best(repeat, || fbc_ir::verify_module(&module));
    if !errors.is_empty() {
        return Err(fbc_grammar::diag::render_all(&file, &errors));
    }
    let (t_print, printed) = best(repeat, || fbc_ir::print_module(&module));
    let n = module.num_ops() as f64;
    let front = t_parse + t_build + t_verify;
    let per_s = |d: Duration| n / d.as_secs_f64();
    let bytes_per_op = match (rss_before, rss_after) {
        (Some(b), Some(a)) => Some((a.saturating_sub(b) * 1024) as f64 / n),
        _ => None,
    };
    if json {
        return Ok(format!(
            "{}\n",
            serde_json::json!({
                "ops": module.num_ops(),
                "bytes": file.text.len(),
                "parse_s": t_parse.as_secs_f64(),
                "build_s": t_build.as_secs_f64(),
                "verify_s": t_verify.as_secs_f64(),
                "print_s": t_print.as_secs_f64(),
                "parse_verify_ops_per_s": per_s(front),
                "print_ops_per_s": per_s(t_print),
                "module_bytes_per_op": bytes_per_op,
                "printed_bytes": printed.len(),
            })
        ));
    }
    let mut s = String::new();
    let _ = writeln!(
        s,
        "module: {} ops, {} bytes of text (best of {repeat})",
        module.num_ops(),
        file.text.len()
    );
    for (stage, d) in
        [("parse", t_parse), ("build", t_build), ("verify", t_verify), ("print", t_print)]
    {
        let _ =
            writeln!(s, "  {stage:<8} {:>9.3} ms  {:>12.0} ops/s", d.as_secs_f64() * 1e3, per_s(d));
    }
    let _ = writeln!(s, "  parse+build+verify: {:.0} ops/s", per_s(front));
    if let Some(b) = bytes_per_op {
        let _ =
            writeln!(s, "  module memory: {b:.0} bytes/op (resident set growth while building)");
    }
    Ok(s)
}

// ----- fbc bench: kernels on a device ---------------------------------------------------------

/// One kernel's figures (median device time of the timed runs).
#[derive(Debug, Clone, serde::Serialize)]
pub struct KernelFigures {
    pub kernel: String,
    pub source: String,
    pub tiled: bool,
    pub skinny: bool,
    /// A packed contraction of the CPU back ends.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub packed: bool,
    pub conversion: bool,
    pub median_ns: u64,
    /// Where the launch lay in the last timed run: its start after the run's first launch
    /// started, and its device time (`--timeline` draws these).
    pub start_ns: u64,
    pub last_ns: u64,
    pub flops: u64,
    pub bytes: u64,
    pub gflops: f64,
    pub gbps: f64,
}

/// The figures of one strategy.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct StrategyFigures {
    pub strategy: String,
    pub level: u8,
    pub kernels: Vec<KernelFigures>,
    pub kernel_count: usize,
    pub conversion_kernels: usize,
    /// Share of the total device time spent in conversion kernels.
    pub conversion_share: f64,
    pub total_ns: u64,
    pub gflops: f64,
    pub gbps: f64,
    /// Peak bytes of live storage (the manifest's schedule after plan-memory): the lower bound.
    pub peak_bytes: u64,
    /// Bytes of storage under plan-memory's slots ([`FunctionManifest::planned_bytes`]).
    ///
    /// [`FunctionManifest::planned_bytes`]: fbc_codegen::opencl::FunctionManifest::planned_bytes
    pub planned_bytes: u64,
    /// The most bytes of storage objects the device held at once (the runtime's tracker).
    pub device_peak_bytes: u64,
    /// Storage objects the runtime made over all runs (not taken from its pool).
    pub objects_made: u64,
    /// plan-memory's statistics, when it ran.
    pub plan_memory: std::collections::BTreeMap<String, f64>,
    /// Host time to enqueue one launch (argument setting and `clEnqueueNDRangeKernel`; kernel
    /// objects are reused across runs), the mean over a run's launches of the median run.
    pub host_ns_per_launch: u64,
    /// Under `--memory-budget`: what the last run streamed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub streaming: Option<StreamingFigures>,
}

/// The weight streaming of a run under `--memory-budget` (its last timed run).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct StreamingFigures {
    pub budget: u64,
    /// Uploads made on the transfer queue during earlier launches, and their bytes.
    pub uploads: u64,
    pub bytes: u64,
    /// Bytes of them transferred from pinned host copies (a run after the first).
    pub pinned_bytes: u64,
    /// Device time of those transfers, and the part of it during which a launch ran.
    pub transfer_ns: u64,
    pub hidden_ns: u64,
    /// From the start of the run's first launch to the end of its last.
    pub span_ns: u64,
    /// Each transfer's start after the run's first launch started (negative: before it) and its
    /// device time (`--timeline` draws these).
    pub transfers: Vec<(i64, u64)>,
    /// Where the time went (the runtime's split of the last run's timeline).
    pub overlap: fbc_runtime::device::TimeSplit,
}

/// The `fblayout` run among `runs` and the runs that took less device time than it: what
/// `fbc bench --compare` warns about, since FBLayout's layout choice should never lose to a
/// baseline. `None` without a `fblayout` run.
pub fn fblayout_losses(
    runs: &[StrategyFigures],
) -> Option<(&StrategyFigures, Vec<&StrategyFigures>)> {
    let fb = runs.iter().find(|r| r.strategy == "fblayout")?;
    let faster = runs
        .iter()
        .filter(|r| r.strategy != fb.strategy && r.total_ns > 0 && r.total_ns < fb.total_ns)
        .collect();
    Some((fb, faster))
}

/// Rates in units per second, 0 for no time.
fn per_s(units: u64, ns: u64) -> f64 {
    if ns == 0 {
        0.0
    } else {
        units as f64 / ns as f64
    }
}

/// A launch's device times as the runtime measured them (`fbc_runtime`'s `LaunchTime`, which
/// exists only with OpenCL): the median of the timed runs, and the last timed run's start and
/// duration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchTimes {
    pub median_ns: u64,
    pub start_ns: u64,
    pub last_ns: u64,
}

/// The figures of a run's launch times against the manifest of its function.
pub fn figures(
    strategy: &str,
    level: u8,
    f: &fbc_codegen::opencl::FunctionManifest,
    times: &[LaunchTimes],
    plan_memory: std::collections::BTreeMap<String, f64>,
    launch_host_ns: u64,
    device_peak_bytes: u64,
) -> StrategyFigures {
    let kernels: Vec<KernelFigures> = f
        .launches()
        .zip(times)
        .map(|(l, t)| KernelFigures {
            kernel: l.kernel.clone(),
            source: l.source.clone(),
            tiled: l.tiled,
            skinny: l.skinny,
            packed: false,
            conversion: l.source.contains(LayoutOp::Convert.name()),
            median_ns: t.median_ns,
            start_ns: t.start_ns,
            last_ns: t.last_ns,
            flops: l.flops,
            bytes: l.bytes,
            gflops: per_s(l.flops, t.median_ns),
            gbps: per_s(l.bytes, t.median_ns),
        })
        .collect();
    StrategyFigures {
        peak_bytes: f.peak_bytes,
        planned_bytes: f.planned_bytes(),
        device_peak_bytes,
        plan_memory,
        host_ns_per_launch: launch_host_ns / (kernels.len().max(1) as u64),
        ..totals(strategy, level, kernels)
    }
}

/// The figures of a strategy whose launches are `kernels`: their count, conversions and
/// totals (the memory and host figures left at 0).
fn totals(strategy: &str, level: u8, kernels: Vec<KernelFigures>) -> StrategyFigures {
    let total_ns: u64 = kernels.iter().map(|k| k.median_ns).sum();
    let conv_ns: u64 = kernels.iter().filter(|k| k.conversion).map(|k| k.median_ns).sum();
    StrategyFigures {
        strategy: strategy.to_string(),
        level,
        kernel_count: kernels.len(),
        conversion_kernels: kernels.iter().filter(|k| k.conversion).count(),
        conversion_share: if total_ns == 0 { 0.0 } else { conv_ns as f64 / total_ns as f64 },
        total_ns,
        gflops: per_s(kernels.iter().map(|k| k.flops).sum(), total_ns),
        gbps: per_s(kernels.iter().map(|k| k.bytes).sum(), total_ns),
        kernels,
        ..Default::default()
    }
}

/// The table of one strategy.
pub fn table(s: &StrategyFigures) -> String {
    let mut t = String::new();
    let _ = write!(
        t,
        "strategy {} (-O{}): {} kernels ({} conversions, {:.1}% of the time), {:.3} ms, {:.2} GFLOP/s, {:.2} GB/s",
        s.strategy,
        s.level,
        s.kernel_count,
        s.conversion_kernels,
        s.conversion_share * 100.0,
        s.total_ns as f64 * 1e-6,
        s.gflops,
        s.gbps,
    );
    if s.peak_bytes > 0 {
        // A device run: the manifest's memory plan and the runtime's figures.
        let _ = write!(
            t,
            ", peak memory {} bytes planned, {} live at once (x{:.2}), {} held on the device (x{:.2}), host {:.1} us per launch",
            s.planned_bytes,
            s.peak_bytes,
            s.planned_bytes as f64 / s.peak_bytes.max(1) as f64,
            s.device_peak_bytes,
            s.device_peak_bytes as f64 / s.peak_bytes.max(1) as f64,
            s.host_ns_per_launch as f64 * 1e-3
        );
    }
    t.push('\n');
    if let Some(st) = &s.streaming {
        let _ = writeln!(
            t,
            "  memory budget {} bytes: streamed {} bytes in {} uploads ({} from pinned host memory), {:.3} ms of transfers, {:.3} ms ({:.0}%) hidden behind launches; the last run's launches span {:.3} ms",
            st.budget,
            st.bytes,
            st.uploads,
            st.pinned_bytes,
            st.transfer_ns as f64 * 1e-6,
            st.hidden_ns as f64 * 1e-6,
            100.0 * st.hidden_ns as f64 / st.transfer_ns.max(1) as f64,
            st.span_ns as f64 * 1e-6
        );
        let o = &st.overlap;
        let ms = |ns: u64| ns as f64 * 1e-6;
        let _ = writeln!(
            t,
            "  from the first launch or transfer to the end of the last: {:.3} ms = {:.3} ms with a transfer under way + {:.3} ms of launches alone + {:.3} ms idle; {:.3} ms of launches; {:.2}x max(launches, transfers)",
            ms(o.wall_ns),
            ms(o.transfer_ns),
            ms(o.alone_ns),
            ms(o.idle_ns),
            ms(o.compute_ns),
            o.wall_ns as f64 / o.compute_ns.max(o.transfer_ns).max(1) as f64
        );
    }
    let _ = writeln!(
        t,
        "  {:<40} {:<28} {:>11} {:>9} {:>9}",
        "kernel", "source", "median ms", "GFLOP/s", "GB/s"
    );
    for k in &s.kernels {
        let mut src = k.source.clone();
        if k.tiled {
            src.push_str(" [tiled]");
        } else if k.skinny {
            src.push_str(" [skinny]");
        } else if k.packed {
            src.push_str(" [packed]");
        }
        let _ = writeln!(
            t,
            "  {:<40} {:<28} {:>11.4} {:>9.2} {:>9.2}",
            k.kernel,
            src,
            k.median_ns as f64 * 1e-6,
            k.gflops,
            k.gbps
        );
    }
    t
}

/// `fbc bench`: on an OpenCL device ([`opencl`]) or on this CPU ([`cpu`]); `quiet` (`-q`)
/// hides the progress bars.
pub(crate) fn device(
    driver: &crate::Driver,
    a: &BenchArgs,
    quiet: bool,
) -> Result<(), crate::Failure> {
    match a.target.as_str() {
        "opencl" => opencl(driver, a, quiet),
        "cpu-jit" | "cpu-llvm" => cpu(driver, a),
        other => Err(crate::Failure::Usage(format!(
            "--target {other}: `fbc bench` runs on opencl, cpu-jit or cpu-llvm"
        ))),
    }
}

/// The layout strategies `--compare` names (default: `--layout-strategy`'s, else fblayout).
fn strategies(a: &BenchArgs) -> Vec<crate::cli::LayoutStrategy> {
    if a.compare.is_empty() {
        vec![a.lower.layout_strategy.unwrap_or(crate::cli::LayoutStrategy::Fblayout)]
    } else {
        a.compare.clone()
    }
}

/// `fbc bench --target cpu-jit|cpu-llvm`: the entry function compiled per strategy as `fbc
/// run` compiles it for that target, run once to compile its kernels and `--repeat` times
/// more, each launch's time in native code the median of those runs (the JIT's threads as for
/// `fbc run`: `FBC_JIT_THREADS`).
fn cpu(driver: &crate::Driver, a: &BenchArgs) -> Result<(), crate::Failure> {
    use crate::Failure;
    use fbc_runtime::interp::Mode;

    let backend = a.lower.cpu_backend(&a.target)?;
    if a.plain_kernels || !a.split_k.is_empty() || a.device.device != "0" {
        return Err(Failure::Usage(format!(
            "--plain-kernels, --split-k and --device are for --target opencl, not {}",
            a.target
        )));
    }
    let (file, module) = driver.load(&a.file)?;
    let func = crate::run_cmd::entry(&module, a.entry.as_deref(), &file)?;
    let fname = module.func(func).name.clone();
    crate::run_cmd::check_memory(&file, &module, func, Mode::F32)?;
    let inputs = crate::run_cmd::io::read_inputs(
        &module,
        func,
        crate::run_cmd::io::Sources {
            inputs: a.inputs.as_slice(),
            weights: a.weights.as_deref(),
            seed: Some(a.seed),
            ..Default::default()
        },
        Mode::F32,
        &file.name,
    )?;
    let mut session = a.lower.session(driver, fbc_transforms::lower::SplitK::Auto)?;
    let mut runs = Vec::new();
    let mut threads = 0;
    for s in strategies(a) {
        session.strategy = s.strategy();
        let mut lowered = module.clone();
        session.compile(&file, &mut lowered)?;
        let lfunc = crate::run_cmd::lowered_func(&lowered, &fname, &file)?;
        crate::run_cmd::check_memory(&file, &lowered, lfunc, Mode::F32)?;
        let (timed, stats) =
            fbc_runtime::device::cpu_jit::bench(&lowered, lfunc, &inputs, backend, a.repeat)
                .map_err(|e| crate::run_cmd::located(&file, &e))?;
        threads = stats.threads;
        runs.push(cpu_figures(s.cli_name(), session.level, &timed));
    }
    let device = format!("this CPU ({}, up to {threads} threads)", a.target);
    report(a, &device, &runs)
}

/// The figures of a strategy's CPU runs: per launch (the same launches in every run), the
/// median of its times; the last run's as its start and duration.
fn cpu_figures(
    strategy: &str,
    level: u8,
    timed: &[Vec<fbc_runtime::device::cpu_jit::LaunchTime>],
) -> StrategyFigures {
    let last = timed.last().map(Vec::as_slice).unwrap_or_default();
    let mut start = 0;
    let kernels: Vec<KernelFigures> = last
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let mut ns: Vec<u64> = timed.iter().filter_map(|r| r.get(i)).map(|t| t.ns).collect();
            ns.sort_unstable();
            let median_ns = ns.get(ns.len() / 2).copied().unwrap_or(0);
            let k = KernelFigures {
                kernel: l.kernel.clone(),
                source: l.source.clone(),
                tiled: false,
                skinny: false,
                packed: l.packed,
                conversion: l.source.contains(LayoutOp::Convert.name()),
                median_ns,
                start_ns: start,
                last_ns: l.ns,
                flops: l.flops,
                bytes: l.bytes,
                gflops: per_s(l.flops, median_ns),
                gbps: per_s(l.bytes, median_ns),
            };
            start += l.ns;
            k
        })
        .collect();
    totals(strategy, level, kernels)
}

#[cfg(not(feature = "opencl"))]
fn opencl(_driver: &crate::Driver, _a: &BenchArgs, _quiet: bool) -> Result<(), crate::Failure> {
    Err(crate::run_cmd::opencl::no_opencl())
}

/// `fbc bench` on an OpenCL device.
#[cfg(feature = "opencl")]
fn opencl(driver: &crate::Driver, a: &BenchArgs, quiet: bool) -> Result<(), crate::Failure> {
    use crate::run_cmd::opencl as rc;
    use crate::Failure;
    use fbc_runtime::device::opencl::{DeviceSel, Progress, RunOptions};

    let strategies = strategies(a);
    let splits = if a.split_k.is_empty() {
        vec![fbc_transforms::lower::SplitK::Auto]
    } else {
        a.split_k.clone()
    };
    let mut variants = Vec::new();
    for s in &strategies {
        for &k in &splits {
            variants.push((*s, k));
        }
    }
    let mut runs = Vec::new();
    let mut device_name = String::new();
    // One session (the profile resolved once), its strategy and split-K set per variant.
    let mut session = a.lower.session(driver, fbc_transforms::lower::SplitK::Auto)?;
    session.memory_budget = a.device.memory_budget;
    session.kv_tiling = a.device.kv_tiling;
    for (s, split_k) in variants {
        session.strategy = s.strategy();
        session.lowering.split_k = split_k;
        let tuned = rc::device_tuning(a.device.tuning.as_deref(), &a.device.device);
        let c = rc::compile(&session, &a.file, a.entry.as_deref(), !a.plain_kernels, tuned)?;
        let fname = c.entry_name();
        let inputs = c.inputs(crate::run_cmd::io::Sources {
            inputs: a.inputs.as_slice(),
            weights: a.weights.as_deref(),
            seed: Some(a.seed),
            ..Default::default()
        })?;
        let label = if a.split_k.is_empty() {
            s.cli_name().to_string()
        } else {
            format!("{} split-k={split_k}", s.cli_name())
        };
        let mut opts = RunOptions {
            device: DeviceSel::parse(&a.device.device),
            repeat: a.repeat.max(1),
            device_memory: a.device.device_memory.runtime(),
            memory_budget: a.device.memory_budget,
            ..RunOptions::default()
        };
        let bar = crate::progress::bar(opts.runs() as u64, label.clone(), quiet || a.json);
        let ticks = bar.clone();
        opts.progress =
            Some(Progress(std::sync::Arc::new(move |done| ticks.set_position(done as u64))));
        let res = fbc_runtime::device::opencl::run(
            &c.out.source,
            &c.out.manifest,
            &fname,
            &inputs,
            &opts,
        );
        bar.finish_and_clear();
        let res = res.map_err(|e| rc::device_failure(&c.file.name, &e))?;
        device_name = res.device.clone();
        let f = c
            .out
            .manifest
            .function(&fname)
            .ok_or_else(|| Failure::Usage(format!("no function @{fname} in the manifest")))?;
        let times: Vec<LaunchTimes> = res
            .launches
            .iter()
            .map(|l| LaunchTimes {
                median_ns: l.median_ns(),
                start_ns: l.start_ns,
                last_ns: l.ns.last().copied().unwrap_or(0),
            })
            .collect();
        let plan: std::collections::BTreeMap<String, f64> = c
            .stats
            .counters
            .iter()
            .filter(|((pass, _), _)| pass == "plan-memory")
            .map(|((_, k), v)| (k.clone(), *v as f64))
            .collect();
        let host_ns = res.launch_host_ns;
        let mut fig =
            figures(&label, session.level, f, &times, plan, host_ns, res.device_peak_bytes);
        fig.objects_made = res.objects_made;
        fig.streaming = a.device.memory_budget.map(|budget| StreamingFigures {
            budget,
            uploads: res.streaming.uploads,
            bytes: res.streaming.bytes,
            pinned_bytes: res.streaming.pinned_bytes,
            transfer_ns: res.streaming.transfer_ns,
            hidden_ns: res.streaming.hidden_ns,
            span_ns: times.iter().map(|t| t.start_ns + t.last_ns).max().unwrap_or(0),
            transfers: res.streaming.transfers.clone(),
            overlap: res.streaming.split,
        });
        runs.push(fig);
    }
    report(a, &device_name, &runs)
}

/// What `fbc bench` prints for `runs` on `device_name`: a warning for each baseline faster than
/// fblayout, the timeline file, then the tables (or the JSON object) and the ratios.
fn report(
    a: &BenchArgs,
    device_name: &str,
    runs: &[StrategyFigures],
) -> Result<(), crate::Failure> {
    if let Some((fb, faster)) = fblayout_losses(runs) {
        for r in faster {
            eprintln!(
                "fbc: warning: {}: fblayout is slower than {}: {:.3} ms against {:.3} ms (x{:.3})",
                a.file.display(),
                r.strategy,
                fb.total_ns as f64 * 1e-6,
                r.total_ns as f64 * 1e-6,
                fb.total_ns as f64 / r.total_ns as f64,
            );
        }
    }
    if let Some(path) = &a.timeline {
        let html = crate::timeline::html(
            &a.file.display().to_string(),
            device_name,
            a.repeat.max(1),
            runs,
        );
        crate::output::write_atomic(path, html.as_bytes())?;
    }
    let base = runs.first().map_or(0, |r| r.total_ns);
    let ratios: Vec<(String, f64)> = runs
        .iter()
        .map(|r| {
            (r.strategy.clone(), if base == 0 { 0.0 } else { r.total_ns as f64 / base as f64 })
        })
        .collect();
    let text = if a.json {
        let j = serde_json::json!({
            "file": a.file.display().to_string(),
            "device": device_name,
            "profile": a.lower.profile,
            "repeat": a.repeat.max(1),
            "runs": runs,
            "time_ratio_to_first": ratios.iter().map(|(s, r)| (s.clone(), serde_json::json!(r))).collect::<serde_json::Map<_, _>>(),
        });
        serde_json::to_string_pretty(&j).unwrap_or_default() + "\n"
    } else {
        let mut t = format!(
            "{} on {device_name}, median of {} run(s) after a warm-up\n",
            a.file.display(),
            a.repeat.max(1)
        );
        for r in runs {
            t.push_str(&table(r));
        }
        if runs.len() > 1 {
            let parts: Vec<String> = ratios.iter().map(|(s, r)| format!("{s} {r:.3}")).collect();
            let _ =
                writeln!(t, "device time relative to {}: {}", runs[0].strategy, parts.join(", "));
        }
        t
    };
    crate::output::write_text(None, &text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(strategy: &str, total_ns: u64) -> StrategyFigures {
        StrategyFigures { strategy: strategy.into(), level: 3, total_ns, ..Default::default() }
    }

    #[test]
    fn a_baseline_faster_than_fblayout_is_reported() {
        let names = |runs: &[StrategyFigures]| {
            fblayout_losses(runs).map(|(fb, faster)| {
                (fb.total_ns, faster.iter().map(|r| r.strategy.clone()).collect::<Vec<_>>())
            })
        };
        let runs = [run("fblayout", 1000), run("reuse", 999), run("convert", 1000)];
        assert_eq!(names(&runs), Some((1000, vec!["reuse".to_string()])));
        // fblayout not first, both baselines faster; a tie or a slower baseline is no loss.
        let runs = [run("convert", 10), run("fblayout", 30), run("reuse", 20)];
        assert_eq!(names(&runs), Some((30, vec!["convert".to_string(), "reuse".to_string()])));
        assert_eq!(names(&[run("fblayout", 5), run("reuse", 5)]), Some((5, vec![])));
        // Without a fblayout run, or a baseline that recorded no time.
        assert_eq!(names(&[run("reuse", 1), run("convert", 2)]), None);
        assert_eq!(names(&[run("fblayout", 5), run("reuse", 0)]), Some((5, vec![])));
    }
}

//! `plan-weight-streaming{budget=BYTES}`: the seed FlashMem's overlap plan. After
//! `plan-memory`, decides for every weight of a memory-dialect function whether it is preloaded
//! (on the device before the first launch) or streamed in during earlier launches, so that at
//! no launch the resident weights and the other live bytes exceed the budget, and as much of the
//! transfer as possible hides behind launches within their load capacity.
//!
//! A **weight** is a `memory.upload` of a function argument that no launch writes (an argument
//! a launch writes, such as a KV cache updated in place, stays resident as it is) and that a
//! launch reads; it is streamed whole (one tile = one upload). Everything else — allocations,
//! other uploads, constants — counts as live bytes at each launch from plan-memory's lifetimes
//! ([`crate::plan_memory::storage_of`]). Time steps are launches in schedule order.
//!
//! Each launch's **load capacity** (FlashMem's `C_ℓ`) comes from its class (Table 5:
//! compute-bound, memory-bound, mixed), decided by its arithmetic intensity (the launch's
//! [`fbc_dialects::memory::Kernel::flops`] over its operands' bytes) against the profile's ridge
//! point, and its estimated duration; see [`fbc_target::StreamingParams`].
//!
//! The plan comes from a tiered fallback (FlashMem Sec. 3.2, C4), each solver tier under what is
//! left of the time limit:
//!
//! 1. the mixed-integer program of [`solve`] with hard capacities;
//! 2. the same with capacities relaxed (bytes beyond a launch's capacity cost their bytes);
//! 3. preloading more: weights their whole window's capacity cannot hide are preloaded where the
//!    budget allows, windows are shortened to a quarter, capacities relaxed;
//! 4. the greedy plan of [`Schedule::greedy`], always a plan.
//!
//! A budget below [`Schedule::min_budget`] is an error located at the function, stating the
//! minimum. The plan is written as attributes of each weight's `memory.upload` (`stream_from`,
//! `stream_bytes`; none: preloaded) and the function's `fbc.stream_tier`; back ends ignore them
//! for now, so numbers are unchanged. [`simulate_func`] reads a plan back from the IR and checks
//! it.
//!
//! Statistics: `functions`, `weights`, `preloaded-bytes`, `streamed-bytes`, `hidden-bytes`
//! (streamed within capacity), `solver-ms`, `worst-tier`, and per solver tier that gave no plan
//! `solver-infeasible`, `solver-no-solution` or `solver-rejected`; the record `plan-weight-streaming`
//! has per function the tier, time, launches per class, bytes, hidden fraction and the minimum
//! budget.

pub mod model;
pub mod solve;

use std::time::{Duration, Instant};

use fbc_dialects::kind::MemoryOp;
use fbc_dialects::memory::{Kernel, MemType};
use fbc_ir::pass::{OptionKind, OptionSpec, PassInfo, PassRegistry};
use fbc_ir::{Attr, Diagnostic, FuncId, Module, Op, Pass, PassContext, ValueDef};
use fbc_target::HardwareProfile;

pub use model::{
    human_bytes, Launch, LaunchClass, Load, PlanError, Schedule, Simulation, Tier, Weight,
};

/// The pass's registered name.
pub const NAME: &str = "plan-weight-streaming";

/// Attribute of a streamed weight's `memory.upload`: the launch (its index among the function's
/// launches) during which loading starts.
pub const STREAM_FROM: &str = "stream_from";
/// Attribute of a streamed weight's `memory.upload`: bytes loaded during each launch from
/// `stream_from` on.
pub const STREAM_BYTES: &str = "stream_bytes";
/// Function attribute: the tier that produced the plan.
pub const STREAM_TIER: &str = "fbc.stream_tier";

/// How the error of a budget below a function's minimum starts (the driver then tries row
/// tiles, `split-weight-rows`).
pub const TOO_SMALL: &str = "plan-weight-streaming: a budget of ";

/// Default solver time limit over all solver tiers, in milliseconds.
pub const DEFAULT_TIME_LIMIT_MS: i64 = 10_000;
/// Default load window: launches before its first use a weight may start loading in.
pub const DEFAULT_WINDOW: i64 = 16;

/// Registers `plan-weight-streaming`.
pub fn register(r: &mut PassRegistry) {
    r.register(PassInfo::new(
        NAME,
        "plan which weights are preloaded and which stream in behind earlier launches under a memory budget (FlashMem)",
        vec![
            OptionSpec::new(
                "budget",
                OptionKind::Str,
                None,
                "device memory budget: bytes, or with a unit (512MiB, 2GiB, 1.5GB)",
            ),
            OptionSpec::new(
                "time-limit",
                OptionKind::Int,
                Some("10000"),
                "solver time limit in milliseconds, over all solver tiers",
            ),
            OptionSpec::new(
                "window",
                OptionKind::Int,
                Some("16"),
                "launches before its first use a weight may start loading in (the solver's)",
            ),
            OptionSpec::new(
                "kv-tiling",
                OptionKind::Bool,
                Some("false"),
                "also stream arguments updated in place and returned (KV caches): loaded before their first launch, written back and released after their last",
            ),
        ],
        |o| {
            let budget = parse_bytes(o.str("budget").unwrap_or(""))?;
            let ms = o.int("time-limit").unwrap_or(DEFAULT_TIME_LIMIT_MS);
            let window = o.int("window").unwrap_or(DEFAULT_WINDOW);
            if ms < 0 {
                return Err(format!("{NAME}: `time-limit` must be ≥ 0, found {ms}"));
            }
            if window < 1 {
                return Err(format!("{NAME}: `window` must be ≥ 1, found {window}"));
            }
            Ok(Box::new(PlanWeightStreaming {
                budget,
                time_limit: Duration::from_millis(ms.unsigned_abs()),
                window: usize::try_from(window).unwrap_or(usize::MAX),
                kv_tiling: o.bool("kv-tiling"),
            }))
        },
    ));
}

/// A byte count: digits with an optional fraction, then an optional unit `B`, `KiB`, `MiB`,
/// `GiB`, `TiB` (powers of 1024) or `KB`, `MB`, `GB`, `TB` (powers of 1000); case-insensitive,
/// spaces allowed between. Errors name `plan-weight-streaming`'s `budget`.
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    parse_bytes_option(NAME, "budget", text)
}

/// [`parse_bytes`] for option `option` of pass `pass`, which the errors name.
pub fn parse_bytes_option(pass: &str, option: &str, text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = (&t[..split], t[split..].trim());
    let scale: f64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        "tib" => 1024.0f64.powi(4),
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        _ => return Err(format!("{pass}: `{option}` has an unknown unit in `{text}` (B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)")),
    };
    let bad = || {
        format!("{pass}: `{option}` must be a number of bytes with an optional unit (512MiB), found `{text}`")
    };
    if num.is_empty() {
        return Err(bad());
    }
    if !num.contains('.') && scale == 1.0 {
        return num.parse::<u64>().map_err(|_| bad());
    }
    let x: f64 = num.parse().map_err(|_| bad())?;
    let bytes = (x * scale).floor();
    if !(bytes.is_finite() && bytes >= 0.0 && bytes < u64::MAX as f64) {
        return Err(bad());
    }
    Ok(bytes as u64)
}

/// The `plan-weight-streaming` pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanWeightStreaming {
    pub budget: u64,
    /// Over all solver tiers of one function.
    pub time_limit: Duration,
    pub window: usize,
    /// Arguments updated in place and returned (KV caches) are streamed too: loaded like a
    /// weight before their first launch, and resident until their last launch, after which the
    /// runtime writes them back and releases them.
    pub kv_tiling: bool,
}

/// One function's schedule and the ops it was read from.
#[derive(Debug, Clone)]
pub struct FuncSchedule {
    pub schedule: Schedule,
    /// The `memory.launch` ops, in schedule order.
    pub launches: Vec<Op>,
    /// The weights' `memory.upload` ops, in the order of `schedule.weights`.
    pub uploads: Vec<Op>,
}

/// The arithmetic intensity below which (as a fraction of the ridge point) a launch that is not
/// a row kernel counts as memory-bound; from there to the ridge point it is mixed.
const MEMORY_BOUND_BELOW_RIDGE: f64 = 0.25;

/// Class and load capacity of a launch with `flops`, `bytes` of operands, and whether it is a
/// row kernel or attention (FlashMem's hierarchical operators).
pub fn launch_capacity(
    p: &HardwareProfile,
    flops: u64,
    bytes: u64,
    hierarchical: bool,
) -> (LaunchClass, u64) {
    let peak = p.compute.peak_f32_gflops.max(1e-9) * 1e9;
    let bw = p.memory.dram_bandwidth_gbps.max(1e-9) * 1e9;
    let ridge = peak / bw;
    let intensity = flops as f64 / (bytes.max(1) as f64);
    let class = if hierarchical {
        LaunchClass::Mixed
    } else if intensity >= ridge {
        LaunchClass::ComputeBound
    } else if intensity < ridge * MEMORY_BOUND_BELOW_RIDGE {
        LaunchClass::MemoryBound
    } else {
        LaunchClass::Mixed
    };
    let st = &p.streaming;
    let factor = match class {
        LaunchClass::ComputeBound => st.compute_bound,
        LaunchClass::MemoryBound => st.memory_bound,
        LaunchClass::Mixed => st.mixed,
    };
    let seconds = (flops as f64 / peak).max(bytes as f64 / bw);
    let capacity = seconds * p.transfer_gbps().max(0.0) * 1e9 * factor;
    (
        class,
        if capacity.is_finite() && capacity > 0.0 {
            capacity.min(u64::MAX as f64) as u64
        } else {
            0
        },
    )
}

/// The schedule of function `f` for profile `p` (see the module docs for what a weight is).
pub fn schedule_of(m: &Module, f: FuncId, p: &HardwareProfile) -> FuncSchedule {
    schedule_with(m, f, p, false)
}

/// [`schedule_of`], with `inout`: arguments that launches update in place and that the
/// function downloads (KV caches) are streamed too, resident from their load to their last
/// launch (the runtime writes them back and releases them then; `kv-tiling`).
pub fn schedule_with(m: &Module, f: FuncId, p: &HardwareProfile, inout: bool) -> FuncSchedule {
    let body = &m.func(f).body;
    let launch_at: Vec<usize> =
        (0..body.len()).filter(|&i| MemoryOp::Launch.is(m.op(body[i]))).collect();
    let launches: Vec<Op> = launch_at.iter().map(|&i| body[i]).collect();
    // The launch ordinal of each op index: launches at or before it, minus one.
    let launches_upto = |i: usize| launch_at.partition_point(|&j| j <= i);
    let storage = crate::plan_memory::storage_of(m, f);
    let mut weights = Vec::new();
    let mut uploads = Vec::new();
    let mut is_weight = vec![false; storage.len()];
    for (k, s) in storage.iter().enumerate() {
        if !s.upload {
            continue;
        }
        let d = m.op(s.op);
        let from_arg =
            d.operands.first().is_some_and(|&v| matches!(m.value(v).def, ValueDef::Arg { .. }));
        let uses = &m.value(s.value).uses;
        let written = uses.iter().any(|u| {
            let o = m.op(u.op);
            MemoryOp::Launch.is(o) && u.index as usize + 1 == o.operands.len()
        });
        let read_at: Vec<usize> = uses
            .iter()
            .filter(|u| MemoryOp::Launch.is(m.op(u.op)))
            .filter_map(|u| launches.iter().position(|&l| l == u.op))
            .collect();
        let Some(&first_use) = read_at.iter().min() else { continue };
        let downloaded = uses.iter().any(|u| MemoryOp::Download.is(m.op(u.op)));
        if !from_arg || (written && !(inout && downloaded)) {
            continue;
        }
        // Resident until plan-memory frees it: the last launch at or before its death; an
        // argument updated in place until its last launch (then written back).
        let last_use = if written {
            read_at.iter().copied().max().unwrap_or(first_use)
        } else {
            launches_upto(s.life.end).saturating_sub(1).max(first_use)
        };
        weights.push(Weight { bytes: s.ty.bytes(), first_use, last_use });
        uploads.push(s.op);
        is_weight[k] = true;
    }
    let mut sched = Vec::with_capacity(launches.len());
    for (t, &op) in launches.iter().enumerate() {
        let i = launch_at[t];
        let live = storage
            .iter()
            .zip(&is_weight)
            .filter(|(s, &w)| !w && s.life.start <= i && i <= s.life.end)
            .map(|(s, _)| s.ty.bytes())
            .fold(0u64, u64::saturating_add);
        let d = m.op(op);
        let bytes = d
            .operands
            .iter()
            .filter_map(|&v| MemType::from_type(m.value_type(v)))
            .map(|t| t.bytes())
            .fold(0u64, u64::saturating_add);
        let (class, capacity) = match Kernel::from_op(d) {
            Ok(k) => {
                launch_capacity(p, k.flops(), bytes, !k.stats.is_empty() || k.attention.is_some())
            }
            Err(_) => (LaunchClass::Mixed, 0),
        };
        sched.push(Launch { live, capacity, class });
    }
    FuncSchedule { schedule: Schedule { launches: sched, weights }, launches, uploads }
}

/// The loads the attributes of `fs`'s uploads record (no `stream_from`: preloaded).
pub fn loads_of(m: &Module, fs: &FuncSchedule) -> Vec<Load> {
    fs.uploads
        .iter()
        .map(|&op| {
            let d = m.op(op);
            match (
                d.attr(STREAM_FROM).and_then(Attr::as_int),
                d.attr(STREAM_BYTES).and_then(Attr::as_ints),
            ) {
                (Some(from), Some(bytes)) => Load::Stream {
                    from: usize::try_from(from).unwrap_or(usize::MAX),
                    bytes: bytes.into_iter().map(|b| u64::try_from(b).unwrap_or(0)).collect(),
                },
                _ => Load::Preload,
            }
        })
        .collect()
}

/// Reads the plan of function `f` back from its attributes and simulates it under `budget`.
pub fn simulate_func(
    m: &Module,
    f: FuncId,
    p: &HardwareProfile,
    budget: u64,
) -> Result<Simulation, PlanError> {
    // A plan that streams an argument updated in place was made with `kv-tiling`.
    let inout = m.func(f).body.iter().any(|&op| {
        let d = m.op(op);
        MemoryOp::Upload.is(d)
            && d.attr(STREAM_FROM).is_some()
            && d.results.first().is_some_and(|&r| {
                m.value(r).uses.iter().any(|u| {
                    let o = m.op(u.op);
                    MemoryOp::Launch.is(o) && u.index as usize + 1 == o.operands.len()
                })
            })
    });
    let fs = schedule_with(m, f, p, inout);
    fs.schedule.simulate(&loads_of(m, &fs), budget)
}

/// A plan and how it was found.
#[derive(Debug, Clone, PartialEq)]
pub struct Planned {
    pub loads: Vec<Load>,
    pub tier: Tier,
    /// The solver proved the plan optimal (tiers 1-3).
    pub optimal: bool,
    pub sim: Simulation,
    /// Wall time of the whole planning.
    pub elapsed: Duration,
    /// Why each tier before this one gave no plan.
    pub failures: Vec<(Tier, Failure)>,
}

/// Why a solver tier gave no plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The program has no solution (tier 1 at a tight budget, typically).
    Infeasible,
    /// The time limit passed without a solution, or the solver failed (microlp reports a
    /// singular factorisation on some programs).
    NoSolution(String),
    /// The plan failed the simulator (a capacity exceeded after rounding to whole bytes).
    Rejected,
}

/// The tiered fallback for schedule `s` under `budget` (at least [`Schedule::min_budget`]).
pub fn plan(s: &Schedule, budget: u64, time_limit: Duration, window: usize) -> Planned {
    let start = Instant::now();
    // A limit too far to add to the clock is no limit.
    let deadline = start.checked_add(time_limit);
    let left = || deadline.map_or(time_limit, |d| d.saturating_duration_since(Instant::now()));
    let mut failures = Vec::new();
    let done = |loads: Vec<Load>, tier: Tier, optimal: bool| {
        let sim = s.simulate(&loads, budget).ok()?;
        if tier == Tier::Solver && sim.over_capacity.iter().any(|&b| b > 0) {
            return None;
        }
        Some(Planned { loads, tier, optimal, sim, elapsed: start.elapsed(), failures: Vec::new() })
    };
    if s.weights.iter().all(|w| w.first_use == 0) {
        // Nothing to decide: every weight is read by launch 0.
        if let Some(p) = done(vec![Load::Preload; s.weights.len()], Tier::Solver, true) {
            return p;
        }
    } else {
        // Hints: the greedy plan (tiers 2, 3: capacities relaxed, it is a plan there), and for
        // tier 1 the same with the weights loaded beyond a capacity preloaded, one by one, where
        // the budget allows (FlashMem's fallback; no hint where it does not).
        let starts_of = |loads: &[Load]| -> Vec<Option<usize>> {
            loads
                .iter()
                .map(|l| match l {
                    Load::Preload => None,
                    Load::Stream { from, .. } => Some(*from),
                })
                .collect()
        };
        // Starts no earlier than the program's window allows.
        let greedy: Vec<Option<usize>> = starts_of(&s.greedy(budget))
            .into_iter()
            .zip(&s.weights)
            .map(|(a, w)| a.map(|a| a.max(w.first_use.saturating_sub(window.max(1)))))
            .collect();
        let mut tight = s.clone();
        for l in &mut tight.launches {
            l.capacity = solve::hard_capacity(l.capacity);
        }
        let hard_hint =
            tight.within_capacity(&greedy, budget).map(|l| starts_of(&l)).unwrap_or_default();
        let tiers = [(Tier::Solver, true, 2), (Tier::Relaxed, false, 2), (Tier::Preload, false, 1)];
        for (tier, hard, share) in tiers {
            let limit = left() / share;
            if limit.is_zero() {
                break;
            }
            let (preload, window) = if tier == Tier::Preload {
                (preload_more(s, budget), window.div_ceil(4))
            } else {
                (Vec::new(), window)
            };
            let hint = if hard { &hard_hint } else { &greedy };
            let setup = solve::Setup {
                budget,
                hard_capacity: hard,
                window,
                preload: &preload,
                hint,
                time_limit: limit,
            };
            match solve::solve(s, &setup) {
                Ok(sol) => match done(sol.loads, tier, sol.optimal) {
                    Some(mut p) => {
                        p.failures = failures;
                        return p;
                    }
                    None => failures.push((tier, Failure::Rejected)),
                },
                Err(why) => failures.push((tier, why)),
            }
        }
    }
    let greedy = s.greedy(budget);
    let mut p = done(greedy.clone(), Tier::Greedy, false).unwrap_or_else(|| Planned {
        // Only below the minimum budget, which the pass reports before planning.
        sim: Simulation::default(),
        loads: greedy,
        tier: Tier::Greedy,
        optimal: false,
        elapsed: start.elapsed(),
        failures: Vec::new(),
    });
    p.failures = failures;
    p
}

/// Tier 3's preloads: weights whose bytes exceed the capacity of every launch before their
/// first use (they cannot be hidden whatever the plan), by first use, each while the budget
/// holds it from launch 0 on top of the just-in-time residency of the others.
fn preload_more(s: &Schedule, budget: u64) -> Vec<bool> {
    let mut at: Vec<u64> = s.launches.iter().map(|l| l.live).collect();
    for (w, load) in s.just_in_time().iter().enumerate() {
        let from = match load {
            Load::Preload => 0,
            Load::Stream { from, .. } => *from,
        };
        for a in at.iter_mut().take(s.weights[w].last_use + 1).skip(from) {
            *a = a.saturating_add(s.weights[w].bytes);
        }
    }
    let mut order: Vec<usize> = (0..s.weights.len()).collect();
    order.sort_by_key(|&w| (s.weights[w].first_use, w));
    let mut preload = vec![false; s.weights.len()];
    for w in order {
        let wt = s.weights[w];
        if wt.first_use == 0 {
            continue;
        }
        let window: u64 =
            s.launches[..wt.first_use].iter().map(|l| l.capacity).fold(0, u64::saturating_add);
        let extra = 0..wt.first_use - 1;
        if wt.bytes > window && extra.clone().all(|t| at[t].saturating_add(wt.bytes) <= budget) {
            for t in extra {
                at[t] += wt.bytes;
            }
            preload[w] = true;
        }
    }
    preload
}

impl Pass for PlanWeightStreaming {
    fn name(&self) -> &str {
        NAME
    }

    fn run(&mut self, m: &mut Module, cx: &mut PassContext<'_>) -> Result<(), Vec<Diagnostic>> {
        let mut errors = Vec::new();
        let mut records = Vec::new();
        let mut plans = Vec::new();
        for f in m.func_ids().collect::<Vec<_>>() {
            let fs = schedule_with(m, f, cx.target, self.kv_tiling);
            if fs.launches.is_empty() {
                // Not a memory-dialect schedule (or nothing runs): nothing to plan.
                continue;
            }
            let (min, at) = fs.schedule.min_budget();
            if self.budget < min {
                let func = m.func(f);
                let what = fs
                    .launches
                    .get(at)
                    .and_then(|&op| {
                        m.op(op).attr("kernel").and_then(Attr::as_str).map(str::to_string)
                    })
                    .map_or_else(String::new, |k| format!(" (launch {at}, `{k}`)"));
                errors.push(
                    Diagnostic::error(format!(
                        "{TOO_SMALL}{} bytes ({}) is below the {} bytes ({}) that @{} needs at least{what}",
                        self.budget,
                        human_bytes(self.budget),
                        min,
                        human_bytes(min),
                        func.name,
                    ))
                    .at(func.name_span)
                    .with_note(format!("the minimum feasible budget is {min} bytes: a launch's live bytes, the weights it reads and those loading during it for the next launch")),
                );
                continue;
            }
            plans.push((f, fs));
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        let (mut worst, mut ms) = (0i64, 0u128);
        for (f, fs) in plans {
            let p = plan(&fs.schedule, self.budget, self.time_limit, self.window);
            for (&op, load) in fs.uploads.iter().zip(&p.loads) {
                m.op_mut(op).attrs.retain(|(k, _)| k != STREAM_FROM && k != STREAM_BYTES);
                if let Load::Stream { from, bytes } = load {
                    m.set_attr(
                        op,
                        STREAM_FROM,
                        Attr::Int(i64::try_from(*from).unwrap_or(i64::MAX)),
                    );
                    m.set_attr(
                        op,
                        STREAM_BYTES,
                        Attr::ints(bytes.iter().map(|&b| i64::try_from(b).unwrap_or(i64::MAX))),
                    );
                }
            }
            let func = m.func_mut(f);
            func.attrs.retain(|(k, _)| k != STREAM_TIER);
            func.attrs.push((STREAM_TIER.to_string(), Attr::Int(p.tier as i64)));
            let weights = fs.schedule.weights.len();
            let class_count =
                |c: LaunchClass| fs.schedule.launches.iter().filter(|l| l.class == c).count();
            let counters = [
                ("functions", 1),
                ("weights", weights as u64),
                ("preloaded-bytes", p.sim.preloaded_bytes),
                ("streamed-bytes", p.sim.streamed_bytes),
                ("hidden-bytes", p.sim.hidden_bytes),
            ];
            for (k, v) in counters {
                cx.stats.add(NAME, k, i64::try_from(v).unwrap_or(i64::MAX));
            }
            for (_, why) in &p.failures {
                let k = match why {
                    Failure::Infeasible => "solver-infeasible",
                    Failure::NoSolution(_) => "solver-no-solution",
                    Failure::Rejected => "solver-rejected",
                };
                cx.stats.add(NAME, k, 1);
            }
            worst = worst.max(p.tier as i64);
            ms += p.elapsed.as_millis();
            records.push(serde_json::json!({
                "function": m.func(f).name,
                "tier": p.tier as i64,
                "optimal": u8::from(p.optimal),
                "time-ms": p.elapsed.as_millis() as u64,
                "weights": weights,
                "launches": fs.schedule.launches.len(),
                "compute-bound": class_count(LaunchClass::ComputeBound),
                "memory-bound": class_count(LaunchClass::MemoryBound),
                "mixed": class_count(LaunchClass::Mixed),
                "preloaded-bytes": p.sim.preloaded_bytes,
                "streamed-bytes": p.sim.streamed_bytes,
                "hidden-bytes": p.sim.hidden_bytes,
                "hidden-fraction": p.sim.hidden_fraction(),
                "peak-bytes": p.sim.peak,
                "min-budget": fs.schedule.min_budget().0,
            }));
        }
        cx.stats.add(NAME, "solver-ms", i64::try_from(ms).unwrap_or(i64::MAX));
        let prev = cx.stats.get(NAME, "worst-tier");
        if worst > prev {
            cx.stats.add(NAME, "worst-tier", worst - prev);
        }
        cx.stats.records.insert(NAME.to_string(), serde_json::Value::Array(records));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_take_units() {
        assert_eq!(parse_bytes("1000"), Ok(1000));
        assert_eq!(parse_bytes("512MiB"), Ok(512 << 20));
        assert_eq!(parse_bytes("2 GiB"), Ok(2 << 30));
        assert_eq!(parse_bytes("1.5GB"), Ok(1_500_000_000));
        assert_eq!(parse_bytes("3kib"), Ok(3072));
        assert!(parse_bytes("").is_err());
        assert!(parse_bytes("MiB").is_err());
        assert!(parse_bytes("-5").is_err());
        assert!(parse_bytes("5 bits").unwrap_err().contains("unknown unit"));
        assert!(parse_bytes("99999999999999999999").is_err());
        assert!(parse_bytes("1e30GiB").is_err());
    }

    /// Tier 3's program: a 100-byte weight that the 20 bytes of capacity before its first use
    /// cannot hide is preloaded where the budget holds it from launch 0, and the rest is solved
    /// with quarter windows (here one launch) and relaxed capacities.
    #[test]
    fn tier_3_preloads_what_no_plan_can_hide() {
        let l = |live| Launch { live, capacity: 10, class: LaunchClass::Mixed };
        let s = Schedule {
            launches: vec![l(0), l(0), l(0)],
            weights: vec![
                Weight { bytes: 100, first_use: 2, last_use: 2 },
                Weight { bytes: 15, first_use: 2, last_use: 2 },
            ],
        };
        assert_eq!(s.min_budget(), (115, 1));
        assert_eq!(preload_more(&s, 115), vec![true, false]);
        let setup = solve::Setup {
            budget: 115,
            hard_capacity: false,
            window: DEFAULT_WINDOW as usize / 4,
            preload: &[true, false],
            hint: &[],
            time_limit: Duration::from_secs(5),
        };
        let sol = solve::solve(&s, &setup).expect("a plan");
        assert_eq!(sol.loads, vec![Load::Preload, Load::Stream { from: 0, bytes: vec![10, 5] }]);
        // With 20 live bytes at launch 0 the preload does not fit.
        let mut s2 = s.clone();
        s2.launches[0].live = 20;
        assert_eq!(preload_more(&s2, 115), vec![false, false]);
    }

    #[test]
    fn launch_classes_follow_the_ridge_point() {
        let p = fbc_target::builtin("nvidia").expect("nvidia");
        // Ridge: 66908 GFLOP/s over 4800 GB/s, about 13.9 FLOP per byte.
        assert_eq!(launch_capacity(&p, 100 << 20, 1 << 20, false).0, LaunchClass::ComputeBound);
        assert_eq!(launch_capacity(&p, 1 << 20, 1 << 20, false).0, LaunchClass::MemoryBound);
        assert_eq!(launch_capacity(&p, 5 << 20, 1 << 20, false).0, LaunchClass::Mixed);
        assert_eq!(launch_capacity(&p, 1 << 20, 1 << 20, true).0, LaunchClass::Mixed);
        // A memory-bound launch of 4.8 MB runs 1 µs: at the profile's transfer rate times 0.25.
        let (_, c) = launch_capacity(&p, 0, 4_800_000, false);
        let want = 1e-6 * p.transfer_gbps() * 1e9 * 0.25;
        assert!((c as f64 - want).abs() <= 1.0, "{c} against {want}");
        assert_eq!(launch_capacity(&p, 0, 0, false).1, 0);
    }
}

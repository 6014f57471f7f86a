//! `plan-weight-streaming` (the seed FlashMem's overlap plan): exact plans of a hand-worked
//! schedule for each tier, the infeasible budget's diagnostic, plans read back from the IR and
//! checked by the simulator (budget, loads before first use), a property test over random
//! schedules (every tier's plan within the budget), the interpreter's numbers unchanged, and
//! the six generated models planned within the time limit.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use fbc_ir::{Attr, Module, PassContext, PassManager, SourceFile};
use fbc_target::HardwareProfile;
use fbc_transforms::weight_streaming::{
    plan, schedule_of, simulate_func, Launch, LaunchClass, Load, Schedule, Tier, Weight,
};
use proptest::prelude::*;

use common::*;

/// Four launches over 64-float buffers; `%x` (256 B) is read by launch 0, `%w1` (256 B) by
/// launch 2, `%w2` (512 B) by launch 3. Live bytes that are not weights: 512 (`%a`), 768 (`%a`,
/// `%b`), 512, 512. Every launch moves 768 bytes but the last (1024). Just in time, launch 2
/// holds 512 live, `%w1` and `%w2` loading for launch 3: 1280 bytes, the minimum budget.
const FOUR: &str = r#"func.func @f(%x: tensor<64xf32>, %w1: tensor<64xf32>, %w2: tensor<128xf32>) -> tensor<64xf32> {
  %x_m = memory.upload %x {layout = #layout.linear} : (tensor<64xf32>) -> !memory.buffer<64, f32>
  %w1_m = memory.upload %w1 {layout = #layout.linear} : (tensor<64xf32>) -> !memory.buffer<64, f32>
  %w2_m = memory.upload %w2 {layout = #layout.linear} : (tensor<128xf32>) -> !memory.buffer<128, f32>
  %a = memory.alloc : () -> !memory.buffer<128, f32>
  memory.launch %x_m, %a {body = "x0 + 1.0", domain = [128], iterators = ["parallel"], kernel = "a", maps = [(d0) -> (d0 mod 64), (d0) -> (d0)]} : (!memory.buffer<64, f32>, !memory.buffer<128, f32>) -> ()
  %b = memory.alloc : () -> !memory.buffer<64, f32>
  memory.launch %a, %b {body = "x0 * 2.0", domain = [64], iterators = ["parallel"], kernel = "b", maps = [(d0) -> (d0 + 64), (d0) -> (d0)]} : (!memory.buffer<128, f32>, !memory.buffer<64, f32>) -> ()
  %c = memory.alloc : () -> !memory.buffer<64, f32>
  memory.launch %b, %w1_m, %c {body = "x0 + x1", domain = [64], iterators = ["parallel"], kernel = "c", maps = [(d0) -> (d0), (d0) -> (d0), (d0) -> (d0)]} : (!memory.buffer<64, f32>, !memory.buffer<64, f32>, !memory.buffer<64, f32>) -> ()
  %d = memory.alloc : () -> !memory.buffer<64, f32>
  memory.launch %c, %w2_m, %d {body = "x0 * x1", domain = [64], iterators = ["parallel"], kernel = "d", maps = [(d0) -> (d0), (d0) -> (d0 + 64), (d0) -> (d0)]} : (!memory.buffer<64, f32>, !memory.buffer<128, f32>, !memory.buffer<64, f32>) -> ()
  %y = memory.download %d {layout = #layout.linear} : (!memory.buffer<64, f32>) -> tensor<64xf32>
  func.return %y : tensor<64xf32>
}
"#;

/// A profile where every launch is memory-bound and its capacity is `factor` × the bytes it
/// moves: DRAM and transfers at 1 GB/s, a peak no launch comes near.
fn profile(factor: f64) -> HardwareProfile {
    let mut p = fbc_target::builtin("generic").expect("generic").clone();
    p.compute.peak_f32_gflops = 1e9;
    p.memory.dram_bandwidth_gbps = 1.0;
    p.streaming.transfer_gbps = Some(1.0);
    p.streaming.memory_bound = factor;
    p.validate().expect("valid profile");
    p
}

/// `FOUR` through plan-memory and `plan-weight-streaming{opts}`.
fn planned(opts: &str, p: &HardwareProfile) -> (Module, fbc_ir::pass::Statistics) {
    let mut m = parse(FOUR);
    run_for(&mut m, "plan-memory", p);
    let st = run_for(&mut m, &format!("plan-weight-streaming{{{opts}}}"), p);
    (m, st)
}

/// Each weight's plan as written on its upload, by argument name.
fn attrs(m: &Module) -> Vec<(String, Option<i64>, Option<Vec<i64>>)> {
    m.all_ops()
        .filter(|&o| m.op(o).def.is("memory.upload"))
        .map(|o| {
            let d = m.op(o);
            let name = m.value(d.operands[0]).name.as_deref().unwrap_or("").to_string();
            (
                name,
                d.attr("stream_from").and_then(Attr::as_int),
                d.attr("stream_bytes").and_then(Attr::as_ints),
            )
        })
        .collect()
}

fn tier(m: &Module) -> Option<i64> {
    let f = m.func_ids().next().expect("a function");
    m.func(f).attr("fbc.stream_tier").and_then(Attr::as_int)
}

fn sched(p: &HardwareProfile) -> Schedule {
    let mut m = parse(FOUR);
    run_for(&mut m, "plan-memory", p);
    let f = m.func_ids().next().expect("f");
    schedule_of(&m, f, p).schedule
}

#[test]
fn the_schedule_of_a_function() {
    let s = sched(&profile(0.25));
    let live: Vec<u64> = s.launches.iter().map(|l| l.live).collect();
    let caps: Vec<u64> = s.launches.iter().map(|l| l.capacity).collect();
    assert_eq!(live, vec![512, 768, 512, 512]);
    assert_eq!(caps, vec![192, 192, 192, 256]);
    assert!(s.launches.iter().all(|l| l.class == LaunchClass::MemoryBound));
    assert_eq!(
        s.weights,
        vec![
            Weight { bytes: 256, first_use: 0, last_use: 0 },
            Weight { bytes: 256, first_use: 2, last_use: 2 },
            Weight { bytes: 512, first_use: 3, last_use: 3 },
        ]
    );
    assert_eq!(s.min_budget(), (1280, 2));
}

/// With room to spare, tier 1: the launches before launch 3 take 576 bytes, not both weights
/// (768); preloading `%w1` (256) hides more than preloading `%w2` (512), and `%w2` needs all
/// three launches: 192, 192 and 128 bytes.
#[test]
fn tier_1_preloads_what_the_capacity_cannot_hide() {
    let p = profile(0.25);
    let (m, st) = planned("budget=4KiB", &p);
    assert_eq!(
        attrs(&m),
        vec![
            ("x".into(), None, None),
            ("w1".into(), None, None),
            ("w2".into(), Some(0), Some(vec![192, 192, 128])),
        ]
    );
    assert_eq!(tier(&m), Some(1));
    assert_eq!(st.get("plan-weight-streaming", "worst-tier"), 1);
    assert_eq!(st.get("plan-weight-streaming", "preloaded-bytes"), 512);
    assert_eq!(st.get("plan-weight-streaming", "streamed-bytes"), 512);
    assert_eq!(st.get("plan-weight-streaming", "hidden-bytes"), 512);
    let sim = simulate_func(&m, m.func_ids().next().unwrap(), &p, 4096).expect("a plan");
    assert_eq!(sim.resident, vec![1024, 768, 768, 512]);
    assert_eq!(sim.over_capacity, vec![0; 4]);
}

/// At the minimum budget, `%w2` cannot be resident at launch 1 (768 live and `%w1`), so the
/// capacity cannot hide it and preloading it does not fit: tier 1 is infeasible. Relaxed, `%w2`
/// loads during launch 2 (192 hidden, 320 beyond), `%w1` during launches 0 and 1.
#[test]
fn tier_2_relaxes_the_capacities_at_the_minimum_budget() {
    let p = profile(0.25);
    let (m, st) = planned("budget=1280", &p);
    assert_eq!(st.get("plan-weight-streaming", "solver-infeasible"), 1);
    assert_eq!(
        attrs(&m),
        vec![
            ("x".into(), None, None),
            ("w1".into(), Some(0), Some(vec![192, 64])),
            ("w2".into(), Some(2), Some(vec![512])),
        ]
    );
    assert_eq!(tier(&m), Some(2));
    let sim = simulate_func(&m, m.func_ids().next().unwrap(), &p, 1280).expect("a plan");
    assert_eq!(sim.peak, 1280);
    assert_eq!(sim.over_capacity, vec![0, 0, 320, 0]);
    assert_eq!(sim.unhidden_bytes(), 256 + 320);
}

/// With no time for the solver, the greedy tier: here the same plan as tier 2.
#[test]
fn no_time_gives_the_greedy_tier() {
    let p = profile(0.25);
    let (m, st) = planned("budget=1280 time-limit=0", &p);
    assert_eq!(tier(&m), Some(4));
    assert_eq!(st.get("plan-weight-streaming", "worst-tier"), 4);
    assert_eq!(
        attrs(&m),
        vec![
            ("x".into(), None, None),
            ("w1".into(), Some(0), Some(vec![192, 64])),
            ("w2".into(), Some(2), Some(vec![512])),
        ]
    );
    simulate_func(&m, m.func_ids().next().unwrap(), &p, 1280).expect("a plan");
}

/// No capacity at all (the class factor 0): nothing can be hidden, so tier 1 preloads every
/// weight where the budget allows; at the minimum budget it cannot (launch 0 would hold
/// 1536), and tier 2 streams each weight just in time.
#[test]
fn no_capacity_streams_just_in_time() {
    let p = profile(0.0);
    let (m, _) = planned("budget=4096", &p);
    assert_eq!(tier(&m), Some(1));
    assert!(attrs(&m).iter().all(|(_, from, _)| from.is_none()), "{:?}", attrs(&m));
    let (m, _) = planned("budget=1280", &p);
    assert_eq!(tier(&m), Some(2));
    assert_eq!(
        attrs(&m),
        vec![
            ("x".into(), None, None),
            ("w1".into(), Some(1), Some(vec![256])),
            ("w2".into(), Some(2), Some(vec![512])),
        ]
    );
}

#[test]
fn a_budget_below_the_minimum_is_a_located_error() {
    let p = profile(0.25);
    let file = Arc::new(SourceFile::new("t.fbir", FOUR));
    let reg = fbc_dialects::registry();
    let mut m = fbc_ir::parse_module(&file, &reg).expect("parses");
    run_for(&mut m, "plan-memory", &p);
    let steps = fbc_transforms::default_registry()
        .parse_pipeline("plan-weight-streaming{budget=1279}")
        .expect("pipeline");
    let mut cx = PassContext::new(&reg);
    cx.target = &p;
    let err = PassManager::new(steps).run(&mut m, &mut cx, &mut |_| {}).expect_err("infeasible");
    let text = fbc_grammar::diag::render_all(&file, &err);
    let want = "t.fbir:1:11: error: plan-weight-streaming: a budget of 1279 bytes (1.25 KiB) is below the 1280 bytes (1.25 KiB) that @f needs at least (launch 2, `c`)";
    assert!(text.starts_with(want), "{text}");
    assert!(
        text.contains("= note: the minimum feasible budget is 1280 bytes: a launch's live bytes, the weights it reads and those loading during it for the next launch"),
        "{text}"
    );
}

#[test]
fn bad_options_are_refused_before_any_pass_runs() {
    let r = fbc_transforms::default_registry();
    for (pipeline, want) in [
        ("plan-weight-streaming", "budget"),
        ("plan-weight-streaming{budget=12parsecs}", "unknown unit"),
        ("plan-weight-streaming{budget=1GiB window=0}", "`window` must be ≥ 1"),
        ("plan-weight-streaming{budget=1GiB time-limit=-1}", "`time-limit` must be ≥ 0"),
    ] {
        // A missing option is refused as the pipeline is read, a bad value as the pass is made.
        let e = match r.parse_pipeline(pipeline) {
            Err(e) => e.message,
            Ok(steps) => {
                steps[0].info.instantiate(&steps[0].options).map(|_| ()).expect_err(pipeline)
            }
        };
        assert!(e.contains(want), "{pipeline}: {e}");
    }
}

/// The plan is attributes only: the interpreter computes the same numbers, and the IR prints
/// and parses back with them (the verifier accepts them).
#[test]
fn the_plan_leaves_the_numbers_alone_and_round_trips() {
    let p = profile(0.25);
    let mut before = parse(FOUR);
    run_for(&mut before, "plan-memory", &p);
    let (after, _) = planned("budget=1280", &p);
    same_numbers(&before, &after, "plan-weight-streaming");
    let text = fbc_ir::print_module(&after);
    assert!(text.contains("stream_bytes = [192, 64], stream_from = 0"), "{text}");
    assert_eq!(fbc_ir::print_module(&parse(&text)), text);
}

/// The verifier's rules for the two attributes.
#[test]
fn stream_attributes_are_verified() {
    let reg = fbc_dialects::registry();
    let up = |attrs: &str| {
        format!(
            "func.func @f(%w: tensor<4xf32>) {{\n  %m = memory.upload %w {{layout = #layout.linear{attrs}}} : (tensor<4xf32>) -> !memory.buffer<4, f32>\n  func.return\n}}\n"
        )
    };
    let ok = up(", stream_from = 1, stream_bytes = [10, 6]");
    fbc_ir::parse_module(&Arc::new(SourceFile::new("t.fbir", &ok)), &reg).expect("valid");
    for (attrs, want) in [
        (", stream_from = 1", "`stream_from` needs `stream_bytes`"),
        (", stream_bytes = [16]", "`stream_bytes` needs `stream_from`"),
        (", stream_from = -1, stream_bytes = [16]", "`stream_from` must be ≥ 0, found -1"),
        (", stream_from = 0, stream_bytes = []", "`stream_bytes` must not be empty"),
        (", stream_from = 0, stream_bytes = [20, -4]", "entries must be ≥ 0, found -4"),
        (
            ", stream_from = 0, stream_bytes = [8]",
            "`stream_bytes` add up to 8 bytes, but the result !memory.buffer<4, f32> has 16",
        ),
    ] {
        let src = up(attrs);
        let e = fbc_ir::parse_module(&Arc::new(SourceFile::new("t.fbir", &src)), &reg)
            .expect_err(attrs);
        let text = format!("{e:?}");
        assert!(text.contains(want), "{attrs}: {text}");
    }
}

/// Random schedules: every tier's plan (solver tiers forced by the time limit and the
/// capacities) meets the budget, loads each weight whole before its first use, and tier 1 never
/// loads beyond a launch's capacity.
fn arb_schedule() -> impl Strategy<Value = Schedule> {
    (2usize..9)
        .prop_flat_map(|n| {
            let launches = prop::collection::vec((0u64..400, 0u64..300), n);
            let weights = prop::collection::vec((1u64..300, 0..n, 0..n), 1..6);
            (launches, weights)
        })
        .prop_map(|(launches, weights)| Schedule {
            launches: launches
                .into_iter()
                .map(|(live, capacity)| Launch { live, capacity, class: LaunchClass::Mixed })
                .collect(),
            weights: weights
                .into_iter()
                .map(|(bytes, a, b)| Weight { bytes, first_use: a.min(b), last_use: a.max(b) })
                .collect(),
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    #[test]
    fn every_plan_fits_its_budget(s in arb_schedule(), slack in 0u64..600) {
        let budget = s.min_budget().0 + slack;
        for limit in [Duration::from_secs(5), Duration::ZERO] {
            let p = plan(&s, budget, limit, 4);
            let sim = s.simulate(&p.loads, budget);
            prop_assert!(sim.is_ok(), "{:?} tier {:?}: {:?}", s, p.tier, sim);
            let sim = sim.unwrap();
            prop_assert!(sim.peak <= budget);
            if p.tier == Tier::Solver {
                prop_assert!(sim.over_capacity.iter().all(|&b| b == 0), "{:?}", sim);
            }
            if limit.is_zero() {
                prop_assert!(p.tier == Tier::Greedy || s.weights.iter().all(|w| w.first_use == 0));
            }
            // The greedy plan is a plan too.
            prop_assert!(s.simulate(&s.greedy(budget), budget).is_ok());
            // No plan hides more than the capacity before each weight's first use.
            let unhidden_floor: u64 = s.weights.iter().filter(|w| w.first_use == 0).map(|w| w.bytes).sum();
            prop_assert!(sim.unhidden_bytes() >= unhidden_floor);
        }
    }
}

/// The six generated models of Table 3, one layer each at small sizes, lowered for `mali`:
/// every function gets a plan at a quarter of its weight bytes plus the minimum budget's other
/// bytes, within the time limit, and the plan read back from the IR meets the budget.
#[test]
fn the_six_generated_models_get_plans_within_the_time_limit() {
    let p = &fbc_target::builtin("mali").expect("mali");
    let limit_ms = 5000u64;
    for model in [
        "llama3.2-1b",
        "qwen2.5-1.5b",
        "gemma2-2b",
        "bert-large",
        "vit-large",
        "whisper-large-decoder",
    ] {
        let opts = fbc_models::Options {
            layers: Some(1),
            seq: Some(8),
            batch: Some(1),
            vocab: Some(64),
            lora_rank: Some(2),
            ..Default::default()
        };
        let opts = match model {
            "vit-large" => fbc_models::Options { seq: None, vocab: None, ..opts },
            "bert-large" => fbc_models::Options { vocab: None, ..opts },
            "whisper-large-decoder" => fbc_models::Options { encoder_len: Some(8), ..opts },
            _ => opts,
        };
        let mut m = fbc_models::build(model, &opts).unwrap_or_else(|e| panic!("{model}: {e:?}"));
        run_for(&mut m, &fbc_transforms::lowering_pipeline(Default::default()), p);
        for f in m.func_ids().collect::<Vec<_>>() {
            let s = schedule_of(&m, f, p).schedule;
            let weights: u64 = s.weights.iter().map(|w| w.bytes).sum();
            let (min, _) = s.min_budget();
            let peak_live = s.launches.iter().map(|l| l.live).max().unwrap_or(0);
            // A quarter of the weights plus the live peak (at least the minimum), and room for
            // every weight at once.
            for budget in [(weights / 4 + peak_live).max(min), weights + peak_live] {
                let t = Instant::now();
                let planned = plan(&s, budget, Duration::from_millis(limit_ms), 16);
                let ms = t.elapsed().as_millis();
                eprintln!(
                    "| {model} | {} | {} | {} | {} | {budget} | {min} | {} ({}) | {ms} | {:.1}% |",
                    m.func(f).name,
                    s.launches.len(),
                    s.weights.len(),
                    weights,
                    planned.tier as u8,
                    planned.tier.name(),
                    planned.sim.hidden_fraction() * 100.0,
                );
                // The time limit, with room for building the program and the greedy tier.
                assert!(ms <= u128::from(limit_ms) + 2000, "{model}: {ms} ms");
                let sim =
                    s.simulate(&planned.loads, budget).unwrap_or_else(|e| panic!("{model}: {e}"));
                assert!(sim.peak <= budget);
            }
        }
        // Through the pass: the plan written on the IR reads back within the budget.
        let budget = m
            .func_ids()
            .map(|f| {
                let s = schedule_of(&m, f, p).schedule;
                let w: u64 = s.weights.iter().map(|w| w.bytes).sum();
                (w / 4 + s.launches.iter().map(|l| l.live).max().unwrap_or(0)).max(s.min_budget().0)
            })
            .max()
            .unwrap_or(0);
        run_for(
            &mut m,
            &format!("plan-weight-streaming{{budget={budget} time-limit={limit_ms}}}"),
            p,
        );
        for f in m.func_ids() {
            simulate_func(&m, f, p, budget).unwrap_or_else(|e| panic!("{model}: {e}"));
        }
    }
}

#[test]
fn loads_display() {
    assert_eq!(Load::Stream { from: 2, bytes: vec![3, 4] }.to_string(), "stream from 2: [3, 4]");
    assert_eq!(Load::Preload.to_string(), "preload");
}

/// A decoder's inference module (`@prefill`, `@decode`, a KV cache per layer updated in place):
/// the caches are written by launches, so they are live bytes, never weights; every other
/// argument upload a launch reads is one.
#[test]
fn kv_caches_written_in_place_are_not_weights() {
    let p = &fbc_target::builtin("mali").expect("mali");
    let opts = fbc_models::Options {
        layers: Some(1),
        seq: Some(4),
        vocab: Some(64),
        lora_rank: Some(0),
        inference: true,
        max_seq: Some(16),
        ..Default::default()
    };
    let mut m = fbc_models::build("llama3.2-1b", &opts).unwrap_or_else(|e| panic!("{e:?}"));
    run_for(&mut m, &fbc_transforms::lowering_pipeline(Default::default()), p);
    let mut caches = 0;
    for f in m.func_ids().collect::<Vec<_>>() {
        let fs = schedule_of(&m, f, p);
        for &op in &fs.uploads {
            let arg = m.value(m.op(op).operands[0]).name.as_deref().unwrap_or("").to_string();
            assert!(!arg.contains("cache"), "@{}: {arg} taken for a weight", m.func(f).name);
        }
        for op in m.func(f).body.iter().copied().filter(|&o| m.op(o).def.is("memory.upload")) {
            let arg = m.value(m.op(op).operands[0]).name.as_deref().unwrap_or("").to_string();
            caches += usize::from(arg.contains("cache"));
        }
        let s = &fs.schedule;
        let budget = s.min_budget().0 + s.weights.iter().map(|w| w.bytes).sum::<u64>() / 2;
        let planned = plan(s, budget, Duration::from_secs(5), 16);
        s.simulate(&planned.loads, budget).expect("a plan");
    }
    assert!(caches >= 4, "no KV cache uploads found ({caches})");
}

/// The largest budget and time limit the options take plan without overflowing.
#[test]
fn extreme_options_plan_without_panicking() {
    let p = profile(0.25);
    let (m, _) = planned("budget=18446744073709551615 time-limit=9223372036854775807", &p);
    assert_eq!(tier(&m), Some(1));
    simulate_func(&m, m.func_ids().next().unwrap(), &p, u64::MAX).expect("a plan");
}

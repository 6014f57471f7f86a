//! The simplification driver: e-graph saturation under limits, cost-based
//! extraction, and the "never worse, never wrong" guards.
//!
//! Invariants:
//! * **Limits are not errors.** Hitting the node, iteration or time limit
//!   stops saturation; the best expression found so far is extracted.
//!   Inputs with more nodes than the node limit, or deeper than
//!   [`MAX_DEPTH`], are returned unchanged without building an e-graph.
//! * **Never costlier.** The output is the extracted term only if its
//!   [`Cost`] is strictly lower than the input's; otherwise the input itself
//!   is returned.
//! * **Defence in depth.** Unless `Limits::verify_samples == 0`, the output is
//!   checked against the input by evaluation ([`crate::check_refines`]) and
//!   rejected (input returned) on any disagreement. The rules are meant to be
//!   sound on their own; this guard only limits the damage of a bug.
//! * Deterministic for a given input when no time limit is hit (egg's
//!   `deterministic` feature, stable cost tie-breaking).

use std::time::Duration;

use egg::{Extractor, Runner};

use crate::analysis::IndexAnalysis;
use crate::cost::{Cost, CostModel};
use crate::expr::Expr;
use crate::lang::{from_rec_expr, to_rec_expr};
use crate::map::IndexMap;
use crate::parse::MAX_DEPTH;
use crate::presimplify::presimplify;
use crate::ranges::Ranges;
use crate::rules;
use crate::verify::check_refines;

/// Budget for one simplification (per expression).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Stop growing the e-graph beyond this many e-nodes.
    pub node_limit: usize,
    /// Stop after this many rewrite iterations.
    pub iter_limit: usize,
    /// Stop saturating after this much wall-clock time.
    pub time_limit: Duration,
    /// Points evaluated by the post-check (0 disables it).
    pub verify_samples: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            node_limit: 10_000,
            iter_limit: 30,
            time_limit: Duration::from_millis(200),
            verify_samples: 256,
        }
    }
}

/// What happened during a simplification (not serialised).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Outcome {
    /// A cheaper equivalent expression was found.
    Improved,
    /// Nothing cheaper was found; the input is returned.
    #[default]
    NotImproved,
    /// The input exceeded the node limit or `MAX_DEPTH`; not attempted.
    Skipped,
    /// The candidate failed the evaluation check; the input is returned.
    RejectedByVerifier,
}

/// Diagnostics of one run (not part of the JSON form).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RunReport {
    /// Outcome of the run.
    pub outcome: Outcome,
    /// Why saturation stopped (egg's stop reason), empty if not run.
    pub stop_reason: String,
    /// Rewrite iterations performed.
    pub iterations: usize,
    /// E-nodes in the final e-graph.
    pub egraph_nodes: usize,
}

/// Result of [`simplify`]. Serialises to JSON with exactly the fields
/// `input`, `output` (text form), `divmod_before`, `divmod_after`,
/// `cost_before`, `cost_after`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Simplified {
    /// The expression given.
    pub input: Expr,
    /// The simplified expression (equal to `input` on the ranges).
    pub output: Expr,
    /// `floordiv`/`ceildiv`/`mod` nodes in the input.
    pub divmod_before: usize,
    /// `floordiv`/`ceildiv`/`mod` nodes in the output.
    pub divmod_after: usize,
    /// Cost of the input under the GPU cost model.
    pub cost_before: u64,
    /// Cost of the output under the GPU cost model.
    pub cost_after: u64,
    /// Diagnostics.
    #[serde(skip)]
    pub report: RunReport,
}

impl Simplified {
    fn new(input: &Expr, output: Expr, report: RunReport) -> Simplified {
        Simplified {
            divmod_before: input.count_divmod(),
            divmod_after: output.count_divmod(),
            cost_before: input.cost(),
            cost_after: output.cost(),
            input: input.clone(),
            output,
            report,
        }
    }
}

/// Simplifies `expr` assuming each ranged variable lies in its half-open
/// range. The result is equal to `expr` wherever `expr` is defined within
/// the ranges, and never costs more.
pub fn simplify(expr: &Expr, ranges: &Ranges, limits: &Limits) -> Simplified {
    if expr.node_count() > limits.node_limit || expr.depth() > MAX_DEPTH {
        let report = RunReport { outcome: Outcome::Skipped, ..RunReport::default() };
        return Simplified::new(expr, expr.clone(), report);
    }
    let input_cost = Cost::of_expr(expr);
    // The cheap exact identities first (`presimplify`): the e-graph then starts from a smaller
    // tree, usually ten times faster. Where that answer still divides, the e-graph also runs
    // from the input as written (an identity applied early can hide a cheaper form, such as
    // `(80·x + y) mod 160` as `80·(x mod 2) + y`), and the cheaper answer wins.
    let pre = presimplify(expr, ranges);
    let mut best: Option<(Cost, Expr)> = None;
    let consider = |cost: Cost, e: Expr, best: &mut Option<(Cost, Expr)>| {
        if cost < input_cost && best.as_ref().is_none_or(|(c, _)| cost < *c) {
            *best = Some((cost, e));
        }
    };
    let mut report = RunReport::default();
    if pre != *expr {
        consider(Cost::of_expr(&pre), pre.clone(), &mut best);
        report = saturate(&pre, ranges, limits, &mut |c, e| consider(c, e, &mut best));
    }
    if best.as_ref().is_none_or(|(_, e)| e.count_divmod() > 0) {
        let second = saturate(expr, ranges, limits, &mut |c, e| consider(c, e, &mut best));
        report.iterations += second.iterations;
        report.egraph_nodes = report.egraph_nodes.max(second.egraph_nodes);
        report.stop_reason = second.stop_reason;
    }
    let Some((_, candidate)) = best else {
        return Simplified::new(expr, expr.clone(), report);
    };
    if limits.verify_samples > 0
        && check_refines(expr, &candidate, ranges, limits.verify_samples).is_err()
    {
        report.outcome = Outcome::RejectedByVerifier;
        return Simplified::new(expr, expr.clone(), report);
    }
    report.outcome = Outcome::Improved;
    Simplified::new(expr, candidate, report)
}

/// Runs the rewrite rules from `start` and hands `found` the cheapest tree of its e-class
/// with its cost, when that is cheaper than `start`.
fn saturate(
    start: &Expr,
    ranges: &Ranges,
    limits: &Limits,
    found: &mut dyn FnMut(Cost, Expr),
) -> RunReport {
    let runner = Runner::<_, _, ()>::new(IndexAnalysis::new(ranges))
        .with_node_limit(limits.node_limit)
        .with_iter_limit(limits.iter_limit)
        .with_time_limit(limits.time_limit)
        .with_expr(&to_rec_expr(start))
        .run(rules::all());
    let report = RunReport {
        outcome: Outcome::NotImproved,
        stop_reason: runner.stop_reason.as_ref().map(|r| format!("{r:?}")).unwrap_or_default(),
        iterations: runner.iterations.len(),
        egraph_nodes: runner.egraph.total_number_of_nodes(),
    };
    let Some(&root) = runner.roots.first() else { return report };
    let extractor = Extractor::new(&runner.egraph, CostModel);
    // Compare costs before building the tree: a strictly cheaper tree has
    // fewer operations than the input, so it is small, whereas an arbitrary
    // extracted DAG could unfold to an exponentially large tree.
    let best_cost = extractor.find_best_cost(root);
    if best_cost < Cost::of_expr(start) {
        let (_, best) = extractor.find_best(root);
        if let Some(e) = from_rec_expr(&best) {
            found(best_cost, e);
        }
    }
    report
}

/// Totals of [`simplify_map`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct MapSimplified {
    /// The map given.
    pub input: IndexMap,
    /// The simplified map.
    pub output: IndexMap,
    /// Per-result details.
    pub results: Vec<Simplified>,
    /// Sum over results of `divmod_before`.
    pub divmod_before: usize,
    /// Sum over results of `divmod_after`.
    pub divmod_after: usize,
    /// Sum over results of `cost_before`.
    pub cost_before: u64,
    /// Sum over results of `cost_after`.
    pub cost_after: u64,
}

/// Simplifies every result of `map` (each with its own `limits` budget).
pub fn simplify_map(map: &IndexMap, ranges: &Ranges, limits: &Limits) -> (IndexMap, MapSimplified) {
    let results: Vec<Simplified> =
        map.results.iter().map(|e| simplify(e, ranges, limits)).collect();
    let output = IndexMap {
        dims: map.dims.clone(),
        symbols: map.symbols.clone(),
        results: results.iter().map(|s| s.output.clone()).collect(),
    };
    let stats = MapSimplified {
        input: map.clone(),
        output: output.clone(),
        divmod_before: results.iter().map(|s| s.divmod_before).sum(),
        divmod_after: results.iter().map(|s| s.divmod_after).sum(),
        cost_before: results.iter().fold(0u64, |a, s| a.saturating_add(s.cost_before)),
        cost_after: results.iter().fold(0u64, |a, s| a.saturating_add(s.cost_after)),
        results,
    };
    (output, stats)
}

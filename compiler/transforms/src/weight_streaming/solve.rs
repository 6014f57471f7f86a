//! The overlap plan as a mixed-integer program (FlashMem's LC-OPG, Sec. 3.2), solved by
//! good_lp's pure-Rust microlp back end under a time limit.
//!
//! Per weight `w` first read by launch `f > 0` (one read by launch 0 is preloaded: nothing runs
//! before it), with a window of launches `[s, f - 1]` it may load during (the `window` launches
//! before its first use; FlashMem's structured constraints that keep the search small):
//!
//! - `p_w ∈ {0, 1}`: preloaded;
//! - `u_{w,t} ∈ {0, 1}` for `t` in the window: resident at launch `t`, non-decreasing in `t`,
//!   `u_{w,f-1} = 1`, `u_{w,s} ≥ p_w`;
//! - `y_{w,t} ∈ [0, 1]`: the fraction of `w` loaded during launch `t`, `y_{w,t} ≤ u_{w,t}`
//!   (in tier 1 `y_{w,t} ≤ (C_t / b_w) · u_{w,t}`, a tighter relaxation),
//!   `Σ_t y_{w,t} + p_w = 1`.
//!
//! Budget at launch `t`: the live bytes, the weights certainly resident (read at or before `t`
//! and still used after), `Σ b_w u_{w,t}` over windows containing `t`, and `Q_t`, the preloaded
//! weights whose window starts after `t` (`Q_t = Q_{t+1} + Σ_{s_w = t+1} b_w p_w`, a chain, so
//! each `p_w` appears once) fit the budget. Capacity at launch `t`: `Σ b_w y_{w,t} ≤ C_t` — hard
//! in tier 1, `≤ C_t + o_t` with `o_t ≥ 0` paid in the objective in tiers 2 and 3.
//!
//! Objective: bytes whose transfer is not hidden (`Σ b_w p_w + Σ o_t`), then, a thousandth as
//! much, the loading distance (`Σ b_w u_{w,t}`: resident bytes during windows), which prefers
//! loading late. Bytes are scaled by the largest weight so coefficients stay near 1. A hint
//! (a plan's starts) seeds the search; the solver ignores one that breaks a constraint.
//!
//! The solver decides who is preloaded and where each stream starts; the bytes per launch are
//! then given out exactly, in integers, by [`Schedule::fill`] (earliest first use first, which
//! finds a schedule within the capacities whenever the fractional one exists).

use std::time::Duration;

use good_lp::{
    microlp, variable, Expression, ProblemVariables, ResolutionError, Solution, SolutionStatus,
    SolverModel, Variable, WithInitialSolution, WithTimeLimit,
};

use super::model::{Load, Schedule};
use super::Failure;

/// One solver call's settings.
#[derive(Debug, Clone)]
pub struct Setup<'a> {
    pub budget: u64,
    /// Capacities are limits (tier 1) rather than paid for (tiers 2, 3).
    pub hard_capacity: bool,
    /// Launches before its first use a weight may start loading in.
    pub window: usize,
    /// Weights fixed as preloaded (tier 3); empty: none.
    pub preload: &'a [bool],
    /// A plan to start from, per weight its first load launch (`None`: preloaded); the solver
    /// ignores it where it breaks a constraint. Empty: none.
    pub hint: &'a [Option<usize>],
    pub time_limit: Duration,
}

/// A solver plan: the loads, and whether the solver proved it optimal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Solved {
    pub loads: Vec<Load>,
    pub optimal: bool,
}

struct WeightVars {
    start: usize,
    p: Variable,
    u: Vec<Variable>,
    y: Vec<Variable>,
}

/// A capacity as tier 1's program takes it: less a margin (a millionth, at least a byte)
/// against the solver's tolerances, so that the bytes given out in integers stay within the
/// capacity itself.
pub fn hard_capacity(c: u64) -> u64 {
    c.saturating_sub((c / 1_000_000).max(1))
}

/// Solves the program of `s` under `setup`.
pub fn solve(s: &Schedule, setup: &Setup<'_>) -> Result<Solved, Failure> {
    let n = s.launches.len();
    let scale = s.weights.iter().map(|w| w.bytes).max().unwrap_or(1).max(1) as f64;
    let b = |w: usize| s.weights[w].bytes as f64 / scale;
    let mut vars = ProblemVariables::new();
    // Bytes certainly at each launch (live, and weights certainly resident), scaled.
    let mut fixed: Vec<f64> = s.launches.iter().map(|l| l.live as f64 / scale).collect();
    let mut wv: Vec<Option<WeightVars>> = Vec::with_capacity(s.weights.len());
    for (w, wt) in s.weights.iter().enumerate() {
        let preloaded = wt.first_use == 0 || setup.preload.get(w).copied().unwrap_or(false);
        let from = if preloaded { 0 } else { wt.first_use };
        for f in fixed.iter_mut().take(wt.last_use + 1).skip(from) {
            *f += b(w);
        }
        if preloaded {
            wv.push(None);
            continue;
        }
        let start = wt.first_use.saturating_sub(setup.window.max(1));
        let len = wt.first_use - start;
        let p = vars.add(variable().binary());
        let u: Vec<Variable> = (0..len)
            .map(|i| {
                if i + 1 == len {
                    vars.add(variable().binary().min(1))
                } else {
                    vars.add(variable().binary())
                }
            })
            .collect();
        let y: Vec<Variable> = (0..len).map(|_| vars.add(variable().min(0).max(1))).collect();
        wv.push(Some(WeightVars { start, p, u, y }));
    }
    let q: Vec<Variable> = (0..n).map(|_| vars.add(variable().min(0))).collect();
    let o: Vec<Variable> = if setup.hard_capacity {
        Vec::new()
    } else {
        (0..n).map(|_| vars.add(variable().min(0))).collect()
    };

    let distance_weight = 1e-3 / (setup.window.max(1) as f64 + 1.0);
    let mut objective = Expression::default();
    for (w, v) in wv.iter().enumerate() {
        if let Some(v) = v {
            objective += b(w) * v.p;
            for &u in &v.u {
                objective += distance_weight * b(w) * u;
            }
        }
    }
    for &o in &o {
        objective += o;
    }

    // The hint as values of the binaries; the solver completes the rest.
    let mut initial = Vec::new();
    for (w, v) in wv.iter().enumerate() {
        let (Some(v), Some(&hint)) = (v, setup.hint.get(w)) else { continue };
        initial.push((v.p, if hint.is_none() { 1.0 } else { 0.0 }));
        for (i, &u) in v.u.iter().enumerate() {
            let resident = hint.is_none_or(|a| v.start + i >= a);
            initial.push((u, if resident { 1.0 } else { 0.0 }));
        }
    }
    let mut model = vars
        .minimise(objective)
        .using(microlp)
        .with_initial_solution(initial)
        .with_time_limit(setup.time_limit.as_secs_f64());
    let budget = setup.budget as f64 / scale;
    // Per launch: the window terms of the budget and of the capacity.
    let mut mem: Vec<Expression> = (0..n).map(|_| Expression::default()).collect();
    let mut cap: Vec<Expression> = (0..n).map(|_| Expression::default()).collect();
    // The preloads whose window starts at each launch, for the chain Q.
    let mut q_in: Vec<Expression> = (0..=n).map(|_| Expression::default()).collect();
    for (w, v) in wv.iter().enumerate() {
        let Some(v) = v else { continue };
        let mut sum_y = Expression::from(v.p);
        for i in 0..v.u.len() {
            let t = v.start + i;
            mem[t] += b(w) * v.u[i];
            cap[t] += b(w) * v.y[i];
            // Loading only while resident; with hard capacities, no more of the weight than
            // the launch's capacity holds, `y ≤ most · u`, which tightens the relaxation where
            // the capacity is small (below a thousandth of the weight, as the bound `y ≤ most`
            // with `y ≤ u`: tiny coefficients made microlp's factorisation singular).
            let most = if setup.hard_capacity {
                (hard_capacity(s.launches[t].capacity) as f64 / s.weights[w].bytes.max(1) as f64)
                    .min(1.0)
            } else {
                1.0
            };
            if most >= 1e-3 {
                model.add_constraint((Expression::from(v.y[i]) - most * v.u[i]).leq(0));
            } else {
                model.add_constraint((Expression::from(v.y[i]) - v.u[i]).leq(0));
                model.add_constraint(Expression::from(v.y[i]).leq(most));
            }
            if i + 1 < v.u.len() {
                model.add_constraint((Expression::from(v.u[i]) - v.u[i + 1]).leq(0));
            }
            sum_y += v.y[i];
        }
        model.add_constraint(sum_y.eq(1));
        model.add_constraint((Expression::from(v.p) - v.u[0]).leq(0));
        q_in[v.start] += b(w) * v.p;
    }
    for t in 0..n {
        // Q_t = Q_{t+1} + (preloads whose window starts at t + 1).
        let next = if t + 1 < n { Expression::from(q[t + 1]) } else { Expression::default() };
        let chain = Expression::from(q[t]) - next - std::mem::take(&mut q_in[t + 1]);
        model.add_constraint(chain.eq(0));
        let m = std::mem::take(&mut mem[t]) + q[t];
        model.add_constraint(m.leq(budget - fixed[t]));
        let c = std::mem::take(&mut cap[t]);
        let capacity = s.launches[t].capacity as f64;
        if setup.hard_capacity {
            model.add_constraint(c.leq(hard_capacity(s.launches[t].capacity) as f64 / scale));
        } else {
            model.add_constraint((c - o[t]).leq(capacity / scale));
        }
    }
    let sol = model.solve().map_err(|e| match e {
        ResolutionError::Infeasible => Failure::Infeasible,
        e => Failure::NoSolution(e.to_string()),
    })?;
    let optimal = matches!(sol.status(), SolutionStatus::Optimal);
    let starts: Vec<Option<usize>> = wv
        .iter()
        .map(|v| {
            let v = v.as_ref()?;
            if sol.value(v.p) > 0.5 {
                return None;
            }
            let first = v.u.iter().position(|&u| sol.value(u) > 0.5).unwrap_or(v.u.len() - 1);
            Some(v.start + first)
        })
        .collect();
    Ok(Solved { loads: s.fill(&starts), optimal })
}

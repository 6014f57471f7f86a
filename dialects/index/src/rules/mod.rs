//! Rewrite rules, grouped by topic, plus the helpers they are built with.
//!
//! # Policy (applies to every submodule)
//!
//! 1. **Only sound rules.** A rule `lhs => rhs` may fire only if, for every
//!    variable assignment inside the user's ranges where `lhs` is *defined*,
//!    `rhs` is defined too and has the same value. Refining an undefined
//!    `lhs` (e.g. `(x floordiv 0) * 0 => 0`) is allowed; turning a defined
//!    `lhs` into an undefined `rhs` is not. In particular every new
//!    intermediate that could overflow (`a*b` of two constants, a re-bracketed
//!    sum, a distributed product) is guarded by a side condition that proves
//!    it fits in `i64`, using the interval analysis.
//! 2. **Side conditions are explicit** and consult the analysis
//!    ([`Facts`]): constants, intervals and known divisors. Rules whose
//!    right-hand side needs a computed constant (`a*b`, `log2 c`, ...) are
//!    written as [`Computed`] appliers that return `None` when the condition
//!    fails.
//! 3. **No blanket associativity.** Commutativity is unconditional (it at
//!    most doubles a class), but re-bracketing is bounded: constants are only
//!    merged or moved outward, and general re-association only happens between
//!    addends that mention a common variable (the only case where a residue or
//!    recombination rule can then fire). Distribution is only over constants.
//! 4. **Constant folding lives in the analysis** ([`crate::analysis`]),
//!    not in rules, so every e-class whose value is fixed becomes a literal.
//! 5. **Merges are one-directional in definedness.** An e-class records
//!    "equal wherever the left side is defined", so a class may hold members
//!    less defined than others (`(x + y) - y` next to `x`). Extraction picks
//!    the cheapest member, which in this rule set is never the less-defined
//!    left side; the evaluation check in [`crate::simplify`] backs this up.
//! 6. Every rule has a name and a soundness test (see `tests.rs`): a rule
//!    without a test template fails the test suite.

use std::sync::OnceLock;

use egg::{Applier, ConditionalApplier, Id, Pattern, PatternAst, Rewrite, Subst, Symbol, Var};

use crate::analysis::{Facts, IndexAnalysis, IndexEGraph};
use crate::expr::BinOp;
use crate::lang::{binop_node, IndexLang};

pub(crate) mod algebra;
pub(crate) mod bounds;
pub(crate) mod identities;
pub(crate) mod nesting;
pub(crate) mod recombine;
pub(crate) mod residue;
pub(crate) mod strength;

#[cfg(test)]
mod tests;

/// A rewrite over the index language.
pub(crate) type IRewrite = Rewrite<IndexLang, IndexAnalysis>;

/// All rules, built once.
pub(crate) fn all() -> &'static [IRewrite] {
    static RULES: OnceLock<Vec<IRewrite>> = OnceLock::new();
    RULES.get_or_init(|| {
        let mut v = Vec::new();
        v.extend(identities::rules());
        v.extend(algebra::rules());
        v.extend(bounds::rules());
        v.extend(residue::rules());
        v.extend(nesting::rules());
        v.extend(recombine::rules());
        v.extend(strength::rules());
        v
    })
}

/// Names of all rewrite rules, in application order.
pub fn rule_names() -> Vec<String> {
    all().iter().map(|r| r.name.to_string()).collect()
}

/// A pattern variable. Patterns are static text checked by the tests.
pub(crate) fn var(name: &str) -> Var {
    name.parse().unwrap_or_else(|e| panic!("static pattern variable {name}: {e}"))
}

fn pattern(src: &str) -> Pattern<IndexLang> {
    src.parse().unwrap_or_else(|e| panic!("static pattern {src}: {e}"))
}

/// Unconditional rewrite between two patterns.
pub(crate) fn rewrite(name: &str, lhs: &str, rhs: &str) -> IRewrite {
    Rewrite::new(name, pattern(lhs), pattern(rhs))
        .unwrap_or_else(|e| panic!("static rule {name}: {e}"))
}

/// Rewrite to a pattern, guarded by a side condition.
pub(crate) fn rewrite_if<C>(name: &str, lhs: &str, rhs: &str, cond: C) -> IRewrite
where
    C: Fn(&IndexEGraph, &Subst) -> bool + Send + Sync + 'static,
{
    let applier = ConditionalApplier {
        condition: move |eg: &mut IndexEGraph, _: Id, s: &Subst| cond(eg, s),
        applier: pattern(rhs),
    };
    Rewrite::new(name, pattern(lhs), applier).unwrap_or_else(|e| panic!("static rule {name}: {e}"))
}

/// Rewrite whose right-hand side is built by code; `build` returns `None`
/// when the side condition does not hold.
pub(crate) fn rewrite_with<F>(name: &str, lhs: &str, build: F) -> IRewrite
where
    F: Fn(&mut IndexEGraph, &Subst) -> Option<Id> + Send + Sync + 'static,
{
    Rewrite::new(name, pattern(lhs), Computed(build))
        .unwrap_or_else(|e| panic!("static rule {name}: {e}"))
}

/// An applier that computes the replacement e-class and unions it with the
/// matched one.
pub(crate) struct Computed<F>(F);

impl<F> Applier<IndexLang, IndexAnalysis> for Computed<F>
where
    F: Fn(&mut IndexEGraph, &Subst) -> Option<Id>,
{
    fn apply_one(
        &self,
        egraph: &mut IndexEGraph,
        eclass: Id,
        subst: &Subst,
        _searcher_ast: Option<&PatternAst<IndexLang>>,
        _rule_name: Symbol,
    ) -> Vec<Id> {
        match (self.0)(egraph, subst) {
            Some(id) if egraph.union(eclass, id) => vec![eclass],
            _ => vec![],
        }
    }
}

// ---- helpers used by the rule modules -------------------------------------

/// Facts of the class bound to `v`.
pub(crate) fn facts(eg: &IndexEGraph, s: &Subst, v: Var) -> Facts {
    eg[s[v]].data
}

/// Constant bound to `v`, if any.
pub(crate) fn konst(eg: &IndexEGraph, s: &Subst, v: Var) -> Option<i64> {
    facts(eg, s, v).constant
}

/// Positive constant bound to `v`, if any.
pub(crate) fn pos_konst(eg: &IndexEGraph, s: &Subst, v: Var) -> Option<i64> {
    konst(eg, s, v).filter(|c| *c > 0)
}

/// `k` if `c == 2^k` with `c > 0`.
pub(crate) fn log2_exact(c: i64) -> Option<i64> {
    (c > 0 && c.count_ones() == 1).then(|| i64::from(c.trailing_zeros()))
}

/// True when the class bound to `v` is provably non-negative.
pub(crate) fn nonneg(eg: &IndexEGraph, s: &Subst, v: Var) -> bool {
    facts(eg, s, v).range.is_nonneg()
}

/// Adds a literal.
pub(crate) fn num(eg: &mut IndexEGraph, c: i64) -> Id {
    eg.add(IndexLang::Num(c))
}

/// Adds `a op b`.
pub(crate) fn bin(eg: &mut IndexEGraph, op: BinOp, a: Id, b: Id) -> Id {
    eg.add(binop_node(op, a, b))
}

//! Commutativity, bounded re-association, constant distribution and
//! subtraction/negation normalisation: the glue that lets the residue and
//! recombination patterns see their operands side by side.
//!
//! Policy (bounding the search, see also the module policy in `rules`):
//! * `+`, `*`, `&` commutativity is unconditional: it adds at most one node
//!   per e-class.
//! * Constants are merged (`(a + c1) + c2 => a + (c1+c2)`) and moved outward
//!   (`(a + c) + b => (a + b) + c`) but never used to re-bracket otherwise.
//! * General re-association of sums only happens between two addends that
//!   share a variable (Bloom signature in the analysis): independent
//!   dimensions (`d0*K0 + d1*K1 + ...`) are never shuffled, so the e-graph
//!   stays linear in the number of unrelated addends.
//! * Any new intermediate (`a + b`, `a * c`, `c1 + c2`) must provably fit in
//!   `i64` (interval analysis), otherwise the rule does not fire: a sum that
//!   is defined in one bracketing may overflow in another.

use super::{bin, facts, konst, num, rewrite, rewrite_if, rewrite_with, var, IRewrite};
use crate::analysis::IndexEGraph;
use crate::expr::BinOp;
use egg::{Subst, Var};

fn share(eg: &IndexEGraph, s: &Subst, x: Var, y: Var) -> bool {
    facts(eg, s, x).vars & facts(eg, s, y).vars != 0
}

fn add_fits(eg: &IndexEGraph, s: &Subst, x: Var, y: Var) -> bool {
    facts(eg, s, x).range.checked_add(facts(eg, s, y).range).is_some()
}

fn mul_fits(eg: &IndexEGraph, s: &Subst, x: Var, y: Var) -> bool {
    facts(eg, s, x).range.checked_mul(facts(eg, s, y).range).is_some()
}

pub(crate) fn rules() -> Vec<IRewrite> {
    let (a, b, c) = (var("?a"), var("?b"), var("?c"));
    let (c1, c2) = (var("?c1"), var("?c2"));
    vec![
        rewrite("add-comm", "(+ ?a ?b)", "(+ ?b ?a)"),
        rewrite("mul-comm", "(* ?a ?b)", "(* ?b ?a)"),
        rewrite("and-comm", "(& ?a ?b)", "(& ?b ?a)"),
        // (a + c1) + c2: if both sums are defined, a + (c1 + c2) is the same
        // value and the folded constant must exist.
        rewrite_with("add-const-assoc", "(+ (+ ?a ?c1) ?c2)", move |eg, s| {
            let k = konst(eg, s, c1)?.checked_add(konst(eg, s, c2)?)?;
            let k = num(eg, k);
            Some(bin(eg, BinOp::Add, s[a], k))
        }),
        rewrite_with("mul-const-assoc", "(* (* ?a ?c1) ?c2)", move |eg, s| {
            let k = konst(eg, s, c1)?.checked_mul(konst(eg, s, c2)?)?;
            let k = num(eg, k);
            Some(bin(eg, BinOp::Mul, s[a], k))
        }),
        rewrite_if("add-const-outward", "(+ (+ ?a ?c) ?b)", "(+ (+ ?a ?b) ?c)", move |eg, s| {
            konst(eg, s, c).is_some() && konst(eg, s, b).is_none() && add_fits(eg, s, a, b)
        }),
        rewrite_if("add-assoc-shared", "(+ (+ ?a ?b) ?c)", "(+ ?a (+ ?b ?c))", move |eg, s| {
            share(eg, s, b, c) && add_fits(eg, s, b, c)
        }),
        rewrite_if(
            "add-assoc-shared-left",
            "(+ ?a (+ ?b ?c))",
            "(+ (+ ?a ?b) ?c)",
            move |eg, s| share(eg, s, a, b) && add_fits(eg, s, a, b),
        ),
        rewrite_if("add-swap-shared", "(+ (+ ?a ?b) ?c)", "(+ (+ ?a ?c) ?b)", move |eg, s| {
            share(eg, s, a, c) && add_fits(eg, s, a, c)
        }),
        rewrite_if("mul-distribute-const", "(* (+ ?a ?b) ?c)", "(+ (* ?a ?c) (* ?b ?c))", {
            move |eg, s| konst(eg, s, c).is_some() && mul_fits(eg, s, a, c) && mul_fits(eg, s, b, c)
        }),
        // a - c => a + (-c), so constant offsets merge via add-const-assoc.
        rewrite_with("sub-const-to-add", "(- ?a ?c)", move |eg, s| {
            let k = konst(eg, s, c)?.checked_neg()?;
            let k = num(eg, k);
            Some(bin(eg, BinOp::Add, s[a], k))
        }),
        rewrite("sub-self", "(- ?a ?a)", "0"),
        rewrite("add-sub-cancel", "(- (+ ?a ?b) ?b)", "?a"),
        rewrite("sub-add-cancel", "(+ (- ?a ?b) ?b)", "?a"),
        // a + (-b) is defined iff -b is, and then equals a - b exactly.
        rewrite("add-neg-to-sub", "(+ ?a (neg ?b))", "(- ?a ?b)"),
        rewrite("neg-neg", "(neg (neg ?a))", "?a"),
        // a * -1 overflows exactly when -a does.
        rewrite("mul-neg-one", "(* ?a -1)", "(neg ?a)"),
    ]
}

//! Algebraic identities: neutral and absorbing elements, and division-like
//! operations whose result is known without looking at the dividend.
//!
//! Policy: these rules only ever shrink an expression. Each is sound for all
//! defined inputs: e.g. `0 floordiv a => 0` turns the undefined case
//! `a <= 0` into a defined one, which is an allowed refinement, and
//! `a floordiv a => 1` is correct because the left side is only defined for
//! `a > 0`. Constant folding itself is done by the analysis, not here.

use super::{facts, pos_konst, rewrite, rewrite_if, var, IRewrite};

pub(crate) fn rules() -> Vec<IRewrite> {
    let (a, c) = (var("?a"), var("?c"));
    vec![
        rewrite("add-zero", "(+ ?a 0)", "?a"),
        rewrite("sub-zero", "(- ?a 0)", "?a"),
        // 0 - a overflows exactly when -a does (a = i64::MIN).
        rewrite("zero-sub", "(- 0 ?a)", "(neg ?a)"),
        rewrite("mul-one", "(* ?a 1)", "?a"),
        rewrite("mul-zero", "(* ?a 0)", "0"),
        rewrite("floordiv-one", "(floordiv ?a 1)", "?a"),
        rewrite("ceildiv-one", "(ceildiv ?a 1)", "?a"),
        rewrite("mod-one", "(mod ?a 1)", "0"),
        rewrite("floordiv-zero-dividend", "(floordiv 0 ?a)", "0"),
        rewrite("ceildiv-zero-dividend", "(ceildiv 0 ?a)", "0"),
        rewrite("mod-zero-dividend", "(mod 0 ?a)", "0"),
        // Defined only for a > 0, where the quotient is 1 and the rest 0.
        rewrite("floordiv-self", "(floordiv ?a ?a)", "1"),
        rewrite("ceildiv-self", "(ceildiv ?a ?a)", "1"),
        rewrite("mod-self", "(mod ?a ?a)", "0"),
        // Symbolic strides: (a*b) floordiv b is defined only for b > 0, and
        // then exact.
        rewrite("floordiv-mul-self", "(floordiv (* ?a ?b) ?b)", "?a"),
        rewrite("mod-mul-self", "(mod (* ?a ?b) ?b)", "0"),
        rewrite("shl-zero", "(<< ?a 0)", "?a"),
        rewrite("shr-zero", "(>> ?a 0)", "?a"),
        rewrite("and-zero", "(& ?a 0)", "0"),
        rewrite("and-all-ones", "(& ?a -1)", "?a"),
        rewrite("and-self", "(& ?a ?a)", "?a"),
        rewrite("min-self", "(min ?a ?a)", "?a"),
        rewrite("max-self", "(max ?a ?a)", "?a"),
        // Divisibility analysis: a is a multiple of c > 0.
        rewrite_if("mod-of-multiple", "(mod ?a ?c)", "0", move |eg, s| {
            pos_konst(eg, s, c).is_some_and(|c| facts(eg, s, a).is_multiple_of(c))
        }),
    ]
}

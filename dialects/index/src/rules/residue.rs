//! Residue elimination: division and modulo of sums and products where the
//! divisibility analysis proves part of the dividend is a multiple of the
//! divisor.
//!
//! Policy: a sum is only split under a division when one addend is provably
//! a multiple of the constant divisor `c > 0` (its known divisor is a
//! multiple of `c`). With `a = c*m`: `(a + b) floordiv c = m + b floordiv c`
//! and `(a + b) mod c = b mod c` hold for *every* `b` under floor semantics,
//! so no range facts are needed. The "small addend" rules use ranges instead:
//! if `g = gcd(divisor(x), c)` and `0 <= b < g`, adding `b` never crosses a
//! multiple of `c`. Products with constant factors are divided exactly when
//! one constant divides the other. Results never contain a larger
//! intermediate than the input, so no overflow guard is needed except where
//! noted.

use super::{bin, facts, konst, num, pos_konst, rewrite_if, rewrite_with, var, IRewrite};
use crate::analysis::IndexEGraph;
use crate::expr::BinOp;
use egg::{Subst, Var};

/// `c` is a positive constant dividing every value of `a`.
fn divides(eg: &IndexEGraph, s: &Subst, c: Var, a: Var) -> bool {
    pos_konst(eg, s, c).is_some_and(|c| facts(eg, s, a).is_multiple_of(c))
}

/// `0 <= b < gcd(divisor(x), c)` for a positive constant `c`.
fn small_addend(eg: &IndexEGraph, s: &Subst, x: Var, b: Var, c: Var) -> bool {
    let Some(c) = pos_konst(eg, s, c) else { return false };
    let dx = facts(eg, s, x).divisor;
    let mut g = c.unsigned_abs();
    let mut d = dx;
    while d != 0 {
        (g, d) = (d, g % d);
    }
    let rb = facts(eg, s, b).range;
    rb.lo >= 0 && rb.hi.unsigned_abs() < g
}

pub(crate) fn rules() -> Vec<IRewrite> {
    let (a, b, c, x) = (var("?a"), var("?b"), var("?c"), var("?x"));
    let split = "(+ (floordiv ?a ?c) (floordiv ?b ?c))";
    vec![
        rewrite_if("floordiv-split-left", "(floordiv (+ ?a ?b) ?c)", split, move |eg, s| {
            divides(eg, s, c, a)
        }),
        rewrite_if("floordiv-split-right", "(floordiv (+ ?a ?b) ?c)", split, move |eg, s| {
            divides(eg, s, c, b)
        }),
        // (a - c*m) floordiv c = a floordiv c - m.
        rewrite_if(
            "floordiv-sub-split",
            "(floordiv (- ?a ?b) ?c)",
            "(- (floordiv ?a ?c) (floordiv ?b ?c))",
            move |eg, s| divides(eg, s, c, b),
        ),
        rewrite_if("mod-drop-left", "(mod (+ ?a ?b) ?c)", "(mod ?b ?c)", move |eg, s| {
            divides(eg, s, c, a)
        }),
        rewrite_if("mod-drop-right", "(mod (+ ?a ?b) ?c)", "(mod ?a ?c)", move |eg, s| {
            divides(eg, s, c, b)
        }),
        rewrite_if("mod-sub-drop", "(mod (- ?a ?b) ?c)", "(mod ?a ?c)", move |eg, s| {
            divides(eg, s, c, b)
        }),
        // (x * a) floordiv b = x * (a / b) when b | a.
        rewrite_with("floordiv-mul-exact", "(floordiv (* ?x ?a) ?b)", move |eg, s| {
            let (ka, kb) = (konst(eg, s, a)?, pos_konst(eg, s, b)?);
            if ka % kb != 0 {
                return None;
            }
            let q = num(eg, ka / kb);
            Some(bin(eg, BinOp::Mul, s[x], q))
        }),
        // (x * a) floordiv b = x floordiv (b / a) when a > 0 and a | b.
        rewrite_with("floordiv-mul-cancel", "(floordiv (* ?x ?a) ?b)", move |eg, s| {
            let (ka, kb) = (pos_konst(eg, s, a)?, pos_konst(eg, s, b)?);
            if kb % ka != 0 {
                return None;
            }
            let q = num(eg, kb / ka);
            Some(bin(eg, BinOp::FloorDiv, s[x], q))
        }),
        // (x * a) mod b = (x mod (b / a)) * a when a > 0 and a | b.
        rewrite_with("mod-mul-scale", "(mod (* ?x ?a) ?b)", move |eg, s| {
            let (ka, kb) = (pos_konst(eg, s, a)?, pos_konst(eg, s, b)?);
            if kb % ka != 0 {
                return None;
            }
            let q = num(eg, kb / ka);
            let r = bin(eg, BinOp::Mod, s[x], q);
            Some(bin(eg, BinOp::Mul, r, s[a]))
        }),
        rewrite_if("floordiv-small-addend", "(floordiv (+ ?x ?b) ?c)", "(floordiv ?x ?c)", {
            move |eg, s| small_addend(eg, s, x, b, c)
        }),
        rewrite_if("floordiv-small-addend-rev", "(floordiv (+ ?b ?x) ?c)", "(floordiv ?x ?c)", {
            move |eg, s| small_addend(eg, s, x, b, c)
        }),
        rewrite_if("mod-small-addend", "(mod (+ ?x ?b) ?c)", "(+ (mod ?x ?c) ?b)", {
            move |eg, s| small_addend(eg, s, x, b, c)
        }),
        rewrite_if("mod-small-addend-rev", "(mod (+ ?b ?x) ?c)", "(+ (mod ?x ?c) ?b)", {
            move |eg, s| small_addend(eg, s, x, b, c)
        }),
    ]
}

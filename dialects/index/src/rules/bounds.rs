//! Interval-driven rules: division and modulo whose quotient is fixed by the
//! value range of the dividend, and `min`/`max`/masks decided by ranges.
//!
//! Policy: the dividend's interval `[lo, hi]` comes from the analysis (user
//! ranges propagated through every operator). If `lo` and `hi` fall in the
//! same period of a constant divisor `c > 0`, i.e. `lo floordiv c ==
//! hi floordiv c == k`, then for every defined value the quotient is `k` and
//! the remainder is `x - k*c`; the rules fire only then. `k*c` is computed
//! with overflow checks. The common case `k = 0` (`0 <= x < c`) gives
//! `x floordiv c => 0` and `x mod c => x`.

use super::{bin, facts, konst, num, pos_konst, rewrite_if, rewrite_with, var, IRewrite};
use crate::expr::BinOp;

pub(crate) fn rules() -> Vec<IRewrite> {
    let (x, c, a, b, m) = (var("?x"), var("?c"), var("?a"), var("?b"), var("?m"));
    vec![
        rewrite_with("floordiv-bounded", "(floordiv ?x ?c)", move |eg, s| {
            let c = pos_konst(eg, s, c)?;
            let r = facts(eg, s, x).range;
            let k = r.lo.div_euclid(c);
            (k == r.hi.div_euclid(c)).then(|| num(eg, k))
        }),
        rewrite_with("ceildiv-bounded", "(ceildiv ?x ?c)", move |eg, s| {
            let c = pos_konst(eg, s, c)?;
            let r = facts(eg, s, x).range;
            let k = BinOp::CeilDiv.apply(r.lo, c)?;
            (Some(k) == BinOp::CeilDiv.apply(r.hi, c)).then(|| num(eg, k))
        }),
        rewrite_with("mod-bounded", "(mod ?x ?c)", move |eg, s| {
            let c = pos_konst(eg, s, c)?;
            let r = facts(eg, s, x).range;
            let k = r.lo.div_euclid(c);
            if k != r.hi.div_euclid(c) {
                return None;
            }
            if k == 0 {
                return Some(s[x]);
            }
            let kc = k.checked_mul(c)?;
            let kc = num(eg, kc);
            Some(bin(eg, BinOp::Sub, s[x], kc))
        }),
        rewrite_if("min-left-bounded", "(min ?a ?b)", "?a", move |eg, s| {
            facts(eg, s, a).range.hi <= facts(eg, s, b).range.lo
        }),
        rewrite_if("min-right-bounded", "(min ?a ?b)", "?b", move |eg, s| {
            facts(eg, s, b).range.hi <= facts(eg, s, a).range.lo
        }),
        rewrite_if("max-left-bounded", "(max ?a ?b)", "?a", move |eg, s| {
            facts(eg, s, a).range.lo >= facts(eg, s, b).range.hi
        }),
        rewrite_if("max-right-bounded", "(max ?a ?b)", "?b", move |eg, s| {
            facts(eg, s, b).range.lo >= facts(eg, s, a).range.hi
        }),
        // x & (2^k - 1) is x when 0 <= x <= 2^k - 1: no bit of x is cleared.
        rewrite_if("and-mask-bounded", "(& ?x ?m)", "?x", move |eg, s| {
            let Some(mask) = konst(eg, s, m) else { return false };
            let r = facts(eg, s, x).range;
            mask >= 0 && (mask.unsigned_abs() + 1).is_power_of_two() && r.lo >= 0 && r.hi <= mask
        }),
    ]
}

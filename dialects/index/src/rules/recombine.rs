//! Recombination: a value split into quotient and remainder and put back
//! together is the value itself. This is what makes composed
//! delinearize/linearize index maps collapse.
//!
//! Policy: these are exact identities of floor division for any positive
//! divisor, and their left sides are only defined for positive divisors, so
//! the plain forms need no side condition. Forms with extra constants check
//! that the constants fit (`a == c*m` computed with overflow checks).
//! * `(x floordiv c)*c + x mod c = x` (both addend orders);
//! * `(x floordiv c)*(c*m) + (x mod c)*m = x*m`;
//! * `((x floordiv c) mod m)*c + x mod c = x mod (c*m)`;
//! * `x - (x floordiv c)*c = x mod c` and `x - x mod c = (x floordiv c)*c`.

use super::{bin, konst, num, pos_konst, rewrite, rewrite_with, var, IRewrite};
use crate::expr::BinOp;

pub(crate) fn rules() -> Vec<IRewrite> {
    let (x, c, a, m) = (var("?x"), var("?c"), var("?a"), var("?m"));
    vec![
        rewrite("recombine-divmod", "(+ (* (floordiv ?x ?c) ?c) (mod ?x ?c))", "?x"),
        rewrite("recombine-divmod-rev", "(+ (mod ?x ?c) (* (floordiv ?x ?c) ?c))", "?x"),
        rewrite_with(
            "recombine-scaled",
            "(+ (* (floordiv ?x ?c) ?a) (* (mod ?x ?c) ?m))",
            move |eg, s| {
                let kc = pos_konst(eg, s, c)?;
                let km = konst(eg, s, m)?;
                (kc.checked_mul(km)? == konst(eg, s, a)?).then(|| bin(eg, BinOp::Mul, s[x], s[m]))
            },
        ),
        rewrite_with(
            "recombine-mod",
            "(+ (* (mod (floordiv ?x ?c) ?m) ?c) (mod ?x ?c))",
            move |eg, s| {
                let k = pos_konst(eg, s, c)?.checked_mul(pos_konst(eg, s, m)?)?;
                let k = num(eg, k);
                Some(bin(eg, BinOp::Mod, s[x], k))
            },
        ),
        rewrite("recombine-sub-mod", "(- ?x (* (floordiv ?x ?c) ?c))", "(mod ?x ?c)"),
        rewrite("recombine-sub-floor", "(- ?x (mod ?x ?c))", "(* (floordiv ?x ?c) ?c)"),
    ]
}

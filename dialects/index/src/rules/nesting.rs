//! Nested division/modulo by constants, and `ceildiv` lowering.
//!
//! Policy: all divisors are positive constants (`a, b > 0`). Identities used
//! (floor semantics):
//! * `(x floordiv a) floordiv b = x floordiv (a*b)`, guarded by `a*b` fitting
//!   in `i64`;
//! * `(x mod a) mod b = x mod b` when `b | a` (the FBLayout rule
//!   `i mod Ca mod Cb = i mod Cb` for tile-aligned dimensions);
//! * `(x mod a) floordiv b = 0` when `a <= b`, and
//!   `= (x floordiv b) mod (a/b)` when `b | a`;
//! * `x ceildiv c = (x + c - 1) floordiv c`, guarded by `x + c - 1` provably
//!   not overflowing (interval analysis).

use super::{bin, facts, num, pos_konst, rewrite_if, rewrite_with, var, IRewrite};
use crate::expr::BinOp;

pub(crate) fn rules() -> Vec<IRewrite> {
    let (x, a, b, c) = (var("?x"), var("?a"), var("?b"), var("?c"));
    vec![
        rewrite_with("floordiv-floordiv", "(floordiv (floordiv ?x ?a) ?b)", move |eg, s| {
            let k = pos_konst(eg, s, a)?.checked_mul(pos_konst(eg, s, b)?)?;
            let k = num(eg, k);
            Some(bin(eg, BinOp::FloorDiv, s[x], k))
        }),
        rewrite_if("mod-mod", "(mod (mod ?x ?a) ?b)", "(mod ?x ?b)", move |eg, s| {
            match (pos_konst(eg, s, a), pos_konst(eg, s, b)) {
                (Some(ka), Some(kb)) => ka % kb == 0,
                _ => false,
            }
        }),
        rewrite_if("floordiv-mod-vanish", "(floordiv (mod ?x ?a) ?b)", "0", move |eg, s| {
            match (pos_konst(eg, s, a), pos_konst(eg, s, b)) {
                (Some(ka), Some(kb)) => ka <= kb,
                _ => false,
            }
        }),
        rewrite_with("floordiv-of-mod", "(floordiv (mod ?x ?a) ?b)", move |eg, s| {
            let (ka, kb) = (pos_konst(eg, s, a)?, pos_konst(eg, s, b)?);
            if ka % kb != 0 {
                return None;
            }
            let m = num(eg, ka / kb);
            let q = bin(eg, BinOp::FloorDiv, s[x], s[b]);
            Some(bin(eg, BinOp::Mod, q, m))
        }),
        rewrite_with("ceildiv-to-floordiv", "(ceildiv ?x ?c)", move |eg, s| {
            let kc = pos_konst(eg, s, c)?;
            let r = facts(eg, s, x).range;
            if i128::from(r.hi) + i128::from(kc) - 1 > i128::from(i64::MAX) {
                return None;
            }
            let bias = num(eg, kc - 1);
            let sum = bin(eg, BinOp::Add, s[x], bias);
            Some(bin(eg, BinOp::FloorDiv, sum, s[c]))
        }),
    ]
}

//! Power-of-two strength reduction (FBLayout Sec. 4.3.2), plus the inverse
//! readings of user-written shifts and masks.
//!
//! Policy:
//! * Forward reductions fire only for a provably non-negative operand
//!   (interval `lo >= 0`): `x floordiv 2^k => x >> k`, `x mod 2^k => x & (2^k-1)`,
//!   `x * 2^k => x << k`. Under this crate's semantics (arithmetic `>>`,
//!   two's-complement `&`) they would hold for negative `x` as well, but the
//!   guard keeps the output correct for back ends that emit unsigned shifts.
//! * Inverse readings (`x >> k => x floordiv 2^k`, `x << k => x * 2^k`,
//!   `x & (2^k-1) => x mod 2^k`) are exact identities of the semantics for
//!   every `x`; they let residue and recombination rules see through shifts
//!   the user wrote. Only `k <= 62` is used so `2^k` is an `i64`.

use super::{bin, konst, log2_exact, nonneg, num, rewrite_with, var, IRewrite};
use crate::expr::BinOp;

pub(crate) fn rules() -> Vec<IRewrite> {
    let (x, c, k, m) = (var("?x"), var("?c"), var("?k"), var("?m"));
    vec![
        rewrite_with("floordiv-pow2-to-shr", "(floordiv ?x ?c)", move |eg, s| {
            let sh = log2_exact(konst(eg, s, c)?)?;
            if !nonneg(eg, s, x) {
                return None;
            }
            let sh = num(eg, sh);
            Some(bin(eg, BinOp::Shr, s[x], sh))
        }),
        rewrite_with("mod-pow2-to-and", "(mod ?x ?c)", move |eg, s| {
            let kc = konst(eg, s, c)?;
            log2_exact(kc)?;
            if !nonneg(eg, s, x) {
                return None;
            }
            let mask = num(eg, kc - 1);
            Some(bin(eg, BinOp::And, s[x], mask))
        }),
        rewrite_with("mul-pow2-to-shl", "(* ?x ?c)", move |eg, s| {
            let sh = log2_exact(konst(eg, s, c)?)?;
            if !nonneg(eg, s, x) {
                return None;
            }
            let sh = num(eg, sh);
            Some(bin(eg, BinOp::Shl, s[x], sh))
        }),
        rewrite_with("shr-to-floordiv", "(>> ?x ?k)", move |eg, s| {
            let sh = konst(eg, s, k).filter(|v| (0..=62).contains(v))?;
            let p = num(eg, 1i64 << sh);
            Some(bin(eg, BinOp::FloorDiv, s[x], p))
        }),
        rewrite_with("shl-to-mul", "(<< ?x ?k)", move |eg, s| {
            let sh = konst(eg, s, k).filter(|v| (0..=62).contains(v))?;
            let p = num(eg, 1i64 << sh);
            Some(bin(eg, BinOp::Mul, s[x], p))
        }),
        rewrite_with("and-mask-to-mod", "(& ?x ?m)", move |eg, s| {
            let mask = konst(eg, s, m).filter(|v| (0..(1i64 << 62)).contains(v))?;
            let p = mask + 1;
            log2_exact(p)?;
            let p = num(eg, p);
            Some(bin(eg, BinOp::Mod, s[x], p))
        }),
    ]
}

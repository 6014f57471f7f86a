//! A cheap normalisation run before the e-graph: one bottom-up pass of exact identities of
//! floor division and modulo by positive constants over linear sums, with the value intervals
//! of the [`Ranges`].
//!
//! The maps lowering composes are naive (every reshape linearises and delinearises), so their
//! trees repeat `x floordiv a floordiv b`, `(x floordiv c)·c + x mod c` and `(a·c + b) mod c`
//! many levels deep. The e-graph finds all of these, but it pays for every node of the input on
//! every iteration, and most of its work on a large map is rediscovering them. Here they cost a
//! single walk:
//!
//! - shifts and masks by constants become the affine operators they equal (`x >> k` is
//!   `x floordiv 2^k`, `x << k` is `x·2^k`, `x & (2^k − 1)` is `x mod 2^k`);
//! - sums are flattened into `Σ kᵢ·atomᵢ + c`, constants folded, multiplications by constants
//!   distributed;
//! - `(x floordiv a) floordiv b = x floordiv (a·b)`; `(x mod m) floordiv c = (x floordiv c) mod
//!   (m/c)` and `(x mod m) mod c = x mod c` when `c` divides `m`;
//! - `(Σ kᵢ·aᵢ + r) floordiv c = Σ (kᵢ/c)·aᵢ + r floordiv c` and `(Σ kᵢ·aᵢ + r) mod c =
//!   r mod c` for the terms whose `kᵢ` is a multiple of `c`, where that removes the division
//!   (`r floordiv c` a constant, `r mod c` without its `mod`): a remainder still divided would
//!   hide the sum that digit recombination has to find whole;
//! - `x floordiv c = k` and `x mod c = x − k·c` when `x`'s interval lies in `[k·c, k·c + c)`;
//! - `m·k·(x floordiv (d·m)) + k·((x floordiv d) mod m) = k·(x floordiv d)` (mixed-radix digits
//!   recombined, `d = 1` included).
//!
//! Every step is an identity over the integers, so the result equals the input wherever the
//! input is defined; [`crate::simplify`] still checks its final answer against the input. A
//! product of coefficients that would overflow leaves the subexpression as it was.

use crate::analysis::interval_of;
use crate::expr::{BinOp, Expr};
use crate::interval::Interval;
use crate::ranges::Ranges;

/// `e` normalised (see the module docs); never more operations than in `e` unless a
/// distribution of a constant over a sum adds them.
///
/// The result is kept only when every one of its intermediate values provably fits `i64` on the
/// whole box of `ranges` (every variable ranged): then it is defined wherever `e` is, and equal.
/// Otherwise (an unranged variable, a possible overflow) `e` comes back unchanged.
pub fn presimplify(e: &Expr, ranges: &Ranges) -> Expr {
    let norm = Norm { ranges };
    let out = norm.expr(e);
    if norm.exact_interval(&out).is_some() {
        out
    } else {
        e.clone()
    }
}

struct Norm<'r> {
    ranges: &'r Ranges,
}

/// A flattened sum `Σ coef·atom + constant`.
#[derive(Debug, Clone, Default)]
struct Sum {
    terms: Vec<(i64, Expr)>,
    constant: i64,
}

impl Sum {
    /// `self + k·s`, or `None` on overflow.
    fn add_scaled(&mut self, s: Sum, k: i64) -> Option<()> {
        for (c, a) in s.terms {
            self.push(c.checked_mul(k)?, a)?;
        }
        self.constant = self.constant.checked_add(s.constant.checked_mul(k)?)?;
        Some(())
    }

    /// Adds `k·atom`, merging with an equal atom.
    fn push(&mut self, k: i64, atom: Expr) -> Option<()> {
        if let Some(t) = self.terms.iter_mut().find(|(_, a)| *a == atom) {
            t.0 = t.0.checked_add(k)?;
        } else {
            self.terms.push((k, atom));
        }
        self.terms.retain(|(c, _)| *c != 0);
        Some(())
    }

    /// The sum as a tree: terms in order (`atom`, `atom * k`, subtracted when `k < 0`), then the
    /// constant.
    fn build(self) -> Expr {
        let mut out: Option<Expr> = None;
        for (k, atom) in self.terms {
            let (neg, mag) = if k < 0 { (true, k.unsigned_abs()) } else { (false, k as u64) };
            let term = match i64::try_from(mag) {
                Ok(1) => atom,
                Ok(m) => Expr::binary(BinOp::Mul, atom, Expr::Const(m)),
                // |i64::MIN|: keep the negative coefficient as a factor.
                Err(_) => Expr::binary(BinOp::Mul, atom, Expr::Const(k)),
            };
            out = Some(match (out, neg && mag <= i64::MAX as u64) {
                (None, true) => Expr::negate(term),
                (None, false) => term,
                (Some(acc), true) => Expr::binary(BinOp::Sub, acc, term),
                (Some(acc), false) => Expr::binary(BinOp::Add, acc, term),
            });
        }
        match (out, self.constant) {
            (None, c) => Expr::Const(c),
            (Some(e), 0) => e,
            (Some(e), c) if c < 0 && c != i64::MIN => Expr::binary(BinOp::Sub, e, Expr::Const(-c)),
            (Some(e), c) => Expr::binary(BinOp::Add, e, Expr::Const(c)),
        }
    }
}

/// `x floordiv d` as `(x, d)`; any other atom as `(atom, 1)`.
fn quotient_parts(e: &Expr) -> (&Expr, i64) {
    match e {
        Expr::Bin(BinOp::FloorDiv, x, d) => match **d {
            Expr::Const(d) if d > 0 => (x, d),
            _ => (e, 1),
        },
        _ => (e, 1),
    }
}

/// `(x floordiv d) mod m` (or `x mod m`, `d = 1`) as `(x, d, m)`.
fn digit_parts(e: &Expr) -> Option<(&Expr, i64, i64)> {
    match e {
        Expr::Bin(BinOp::Mod, z, m) => match **m {
            Expr::Const(m) if m > 0 => {
                let (x, d) = quotient_parts(z);
                Some((x, d, m))
            }
            _ => None,
        },
        _ => None,
    }
}

fn pow2(k: i64) -> Option<i64> {
    (0..63).contains(&k).then(|| 1i64 << k)
}

impl Norm<'_> {
    /// The interval of `e` when every intermediate value fits `i64` for all points of the box;
    /// `None` for an unranged variable, a possible overflow or division by a non-positive
    /// number. Only such an interval may decide a quotient: the pass builds terms that are not
    /// in the input (a remainder `r` of `(Σ kᵢ·aᵢ + r) floordiv c`), which may overflow where
    /// the input is defined, and the clamped intervals of [`interval_of`] describe only the
    /// values a term takes where it is defined.
    fn exact_interval(&self, e: &Expr) -> Option<Interval> {
        match e {
            Expr::Const(c) => Some(Interval::point(*c)),
            Expr::Var(v) => self.ranges.get(v).map(|(lo, hi)| Interval { lo, hi: hi - 1 }),
            Expr::Neg(a) => self.exact_interval(a)?.checked_neg(),
            Expr::Bin(op, a, b) => {
                let (a, b) = (self.exact_interval(a)?, self.exact_interval(b)?);
                match op {
                    BinOp::Add => a.checked_add(b),
                    BinOp::Sub => a.checked_sub(b),
                    BinOp::Mul => a.checked_mul(b),
                    BinOp::FloorDiv | BinOp::CeilDiv | BinOp::Mod if b.lo > 0 => {
                        Some(interval_of(*op, a, b))
                    }
                    BinOp::Shl if b.lo >= 0 && b.hi < 63 => {
                        a.checked_mul(Interval { lo: 1 << b.lo, hi: 1 << b.hi })
                    }
                    BinOp::Shr if b.lo >= 0 && b.hi < 64 => Some(interval_of(*op, a, b)),
                    BinOp::And | BinOp::Min | BinOp::Max => Some(interval_of(*op, a, b)),
                    _ => None,
                }
            }
        }
    }

    fn expr(&self, e: &Expr) -> Expr {
        match e {
            Expr::Const(_) | Expr::Var(_) => e.clone(),
            Expr::Neg(a) => {
                let n = Expr::negate(self.expr(a));
                match self.sum_of(&n) {
                    Some(s) => s.build(),
                    None => n,
                }
            }
            Expr::Bin(op, a, b) => {
                let (a, b) = (self.expr(a), self.expr(b));
                self.binary(*op, a, b)
            }
        }
    }

    /// `a op b` of normalised operands, normalised.
    fn binary(&self, op: BinOp, a: Expr, b: Expr) -> Expr {
        if let (Expr::Const(x), Expr::Const(y)) = (&a, &b) {
            if let Some(v) = op.apply(*x, *y) {
                return Expr::Const(v);
            }
        }
        let c = match b {
            Expr::Const(c) => Some(c),
            _ => None,
        };
        match (op, c) {
            (BinOp::Shl, Some(k)) if pow2(k).is_some() => {
                self.linear(Expr::binary(BinOp::Mul, a, Expr::Const(pow2(k).unwrap_or(1))))
            }
            (BinOp::Shr, Some(k)) if pow2(k).is_some() => self.floordiv(a, pow2(k).unwrap_or(1)),
            (BinOp::And, Some(m))
                if m >= 0 && m.checked_add(1).is_some_and(|p| (p as u64).is_power_of_two()) =>
            {
                self.modulo(a, m + 1)
            }
            (BinOp::FloorDiv, Some(c)) if c > 0 => self.floordiv(a, c),
            (BinOp::Mod, Some(c)) if c > 0 => self.modulo(a, c),
            (BinOp::Add | BinOp::Sub | BinOp::Mul, _) => self.linear(Expr::binary(op, a, b)),
            _ => Expr::binary(op, a, b),
        }
    }

    /// A sum, difference or product of normalised operands as a flattened, recombined sum.
    fn linear(&self, e: Expr) -> Expr {
        match self.sum_of(&e) {
            Some(s) => self.recombine(s).build(),
            None => e,
        }
    }

    /// The flattened sum of `e` (`None` on coefficient overflow).
    fn sum_of(&self, e: &Expr) -> Option<Sum> {
        let mut s = Sum::default();
        match e {
            Expr::Const(c) => s.constant = *c,
            Expr::Neg(a) => s.add_scaled(self.sum_of(a)?, -1)?,
            Expr::Bin(BinOp::Add, a, b) => {
                s.add_scaled(self.sum_of(a)?, 1)?;
                s.add_scaled(self.sum_of(b)?, 1)?;
            }
            Expr::Bin(BinOp::Sub, a, b) => {
                s.add_scaled(self.sum_of(a)?, 1)?;
                s.add_scaled(self.sum_of(b)?, -1)?;
            }
            Expr::Bin(BinOp::Mul, a, b) => match (&**a, &**b) {
                (x, Expr::Const(k)) | (Expr::Const(k), x) => s.add_scaled(self.sum_of(x)?, *k)?,
                _ => s.push(1, e.clone())?,
            },
            _ => s.push(1, e.clone())?,
        }
        Some(s)
    }

    /// Merges digit pairs `m·k·(x floordiv (d·m)) + k·((x floordiv d) mod m)` into
    /// `k·(x floordiv d)` until none is left.
    fn recombine(&self, mut s: Sum) -> Sum {
        'again: loop {
            for j in 0..s.terms.len() {
                let (kb, ref digit) = s.terms[j];
                let Some((x, d, m)) = digit_parts(digit) else { continue };
                let (Some(dm), Some(ka)) = (d.checked_mul(m), kb.checked_mul(m)) else { continue };
                let found = s.terms.iter().position(|(k, a)| {
                    *k == ka && {
                        let (y, q) = quotient_parts(a);
                        q == dm && y == x
                    }
                });
                let Some(i) = found else { continue };
                let merged = if d == 1 { x.clone() } else { self.floordiv(x.clone(), d) };
                s.terms[i] = (kb, merged);
                s.terms.remove(j);
                // Equal atoms may now meet.
                let terms = std::mem::take(&mut s.terms);
                for (k, a) in terms {
                    if s.push(k, a.clone()).is_none() {
                        return s;
                    }
                }
                continue 'again;
            }
            return s;
        }
    }

    /// `x floordiv c` for `c > 0`, normalised.
    fn floordiv(&self, x: Expr, c: i64) -> Expr {
        if c == 1 {
            return x;
        }
        if let Expr::Const(v) = x {
            return Expr::Const(v.div_euclid(c));
        }
        let (y, d) = quotient_parts(&x);
        if d > 1 {
            if let Some(dc) = d.checked_mul(c) {
                return self.floordiv(y.clone(), dc);
            }
        }
        if let Some((y, 1, m)) = digit_parts(&x) {
            if m % c == 0 {
                let q = self.floordiv(y.clone(), c);
                return self.modulo(q, m / c);
            }
        }
        if let Some(s) = self.sum_of(&x) {
            let (mut q, mut r) = (Sum::default(), Sum::default());
            for (k, a) in s.terms {
                if k % c == 0 {
                    q.terms.push((k / c, a));
                } else {
                    r.terms.push((k, a));
                }
            }
            q.constant = s.constant.div_euclid(c);
            r.constant = s.constant.rem_euclid(c);
            // Only when the division goes entirely: a remainder still divided would hide `x`,
            // which digit recombination needs to see whole in every place it occurs.
            if !q.terms.is_empty() || q.constant != 0 {
                if let Expr::Const(k) = self.floordiv(r.build(), c) {
                    if let Some(total) = q.constant.checked_add(k) {
                        q.constant = total;
                        return self.recombine(q).build();
                    }
                }
            }
        }
        if let Some(iv) = self.exact_interval(&x) {
            if iv.lo.div_euclid(c) == iv.hi.div_euclid(c) {
                return Expr::Const(iv.lo.div_euclid(c));
            }
        }
        Expr::binary(BinOp::FloorDiv, x, Expr::Const(c))
    }

    /// `x mod c` for `c > 0`, normalised.
    fn modulo(&self, x: Expr, c: i64) -> Expr {
        if c == 1 {
            return Expr::Const(0);
        }
        if let Expr::Const(v) = x {
            return Expr::Const(v.rem_euclid(c));
        }
        if let Some((y, d, m)) = digit_parts(&x) {
            if m % c == 0 {
                let inner = if d == 1 {
                    y.clone()
                } else {
                    Expr::binary(BinOp::FloorDiv, y.clone(), Expr::Const(d))
                };
                return self.modulo(inner, c);
            }
        }
        if let Some(s) = self.sum_of(&x) {
            let before = s.terms.len();
            let mut r = Sum { terms: Vec::new(), constant: s.constant.rem_euclid(c) };
            r.terms = s.terms.into_iter().filter(|(k, _)| k % c != 0).collect();
            // Likewise only when the modulo goes entirely.
            if r.terms.len() < before || r.constant != s.constant {
                let rest = self.modulo(r.build(), c);
                if !matches!(rest, Expr::Bin(BinOp::Mod, ..)) {
                    return rest;
                }
            }
        }
        if let Some(iv) =
            self.exact_interval(&x).filter(|iv| iv.lo.div_euclid(c) == iv.hi.div_euclid(c))
        {
            let k = iv.lo.div_euclid(c);
            if k == 0 {
                return x;
            }
            if let Some(kc) = k.checked_mul(c) {
                return self.linear(Expr::binary(BinOp::Sub, x, Expr::Const(kc)));
            }
        }
        Expr::binary(BinOp::Mod, x, Expr::Const(c))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn norm(src: &str, ranges: &[&str]) -> String {
        let r = Ranges::from_specs(ranges.iter().copied()).expect("ranges");
        let e = Expr::parse(src).expect("parses");
        let out = presimplify(&e, &r);
        // Equal on every point of the box.
        crate::check_refines(&e, &out, &r, 2000).unwrap_or_else(|m| panic!("{src} -> {out}: {m}"));
        out.to_string()
    }

    #[test]
    fn nested_quotients_and_digits_recombine() {
        assert_eq!(norm("x floordiv 4 floordiv 8", &["x=0:4096"]), "x floordiv 32");
        assert_eq!(norm("x floordiv 8 * 8 + x mod 8", &["x=0:4096"]), "x");
        assert_eq!(
            norm("x floordiv 256 * 256 + (x floordiv 8 mod 32) * 8 + x mod 8", &["x=0:65536"]),
            "x"
        );
        assert_eq!(norm("(x mod 64) mod 8", &["x=0:4096"]), "x mod 8");
        assert_eq!(norm("(x mod 64) floordiv 8", &["x=0:4096"]), "x floordiv 8 mod 8");
        // Digits of a sum that no division splits: x = (x floordiv 77)·77 + digits of 7 and 11.
        assert_eq!(
            norm(
                "((d1 floordiv 8 * 14 + d0 mod 28) floordiv 77 * 11 + (d1 floordiv 8 * 14 + d0 mod 28) mod 77 floordiv 7) * 7 + (d1 floordiv 8 * 14 + d0 mod 28) mod 77 mod 7",
                &["d0=0:140", "d1=0:88"]
            ),
            "d1 floordiv 8 * 14 + d0 mod 28"
        );
    }

    #[test]
    fn multiples_of_the_divisor_leave_the_division() {
        assert_eq!(norm("(d0 * 64 + d1) floordiv 64", &["d0=0:8", "d1=0:64"]), "d0");
        assert_eq!(norm("(d0 * 64 + d1) mod 64", &["d0=0:8", "d1=0:64"]), "d1");
        // A remainder that stays divided keeps the whole sum (recombination needs it whole).
        assert_eq!(
            norm("(d0 * 64 + d1 + 3) floordiv 32", &["d0=0:8", "d1=0:64"]),
            "(d0 * 64 + d1 + 3) floordiv 32"
        );
        // Negative values: floor semantics.
        assert_eq!(norm("(x * 4 - 1) floordiv 4", &["x=-8:8"]), "x - 1");
    }

    #[test]
    fn shifts_and_masks_become_affine() {
        assert_eq!(norm("(x << 3) >> 3", &["x=0:100"]), "x");
        assert_eq!(norm("(x * 8 + y) & 7", &["x=0:100", "y=0:8"]), "y");
    }

    #[test]
    fn terms_that_may_overflow_decide_no_quotient() {
        // Defined at x = 0 only (1 floordiv 4 = 0). The remainder split of `(A − (2⁶³ − 2))
        // floordiv 4` builds `A + 2`, which overflows there; its clamped interval once made
        // the quotient -1.
        assert_eq!(
            norm("(9223372036854775807 << x) mod 2 floordiv 4", &["x=0:8"]),
            "(9223372036854775807 << x) mod 2 floordiv 4"
        );
        assert_eq!(norm("((x << 3) + 7) floordiv 8", &["x=0:8"]), "x");
        assert_eq!(norm("min(x, 3) floordiv 4", &["x=0:8"]), "0");
    }

    #[test]
    fn unknown_ranges_keep_their_divisions() {
        assert_eq!(norm("x mod 8", &[]), "x mod 8");
        assert_eq!(norm("x floordiv 8", &["x=0:100"]), "x floordiv 8");
    }
}

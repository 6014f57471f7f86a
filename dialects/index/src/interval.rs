//! Sound interval arithmetic over `i64` for the e-graph analysis.
//!
//! An [`Interval`] `[lo, hi]` (inclusive) claims: *every defined value* of the
//! expression lies in `[lo, hi]`. Unknown is `[i64::MIN, i64::MAX]`.
//!
//! Invariants:
//! * `lo <= hi` always.
//! * Every operation is computed exactly in `i128` and then clamped to the
//!   `i64` range. Clamping is sound because values outside `i64` are
//!   overflows, i.e. undefined, so they need not be covered.
//! * When an operation is undefined on the whole input box (e.g. a divisor
//!   interval with no positive value) the result is the full interval: there
//!   is no defined value to describe, so any claim is vacuously true, and the
//!   full interval is the least surprising one.

/// Inclusive integer interval `[lo, hi]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Interval {
    /// Smallest possible value.
    pub lo: i64,
    /// Largest possible value.
    pub hi: i64,
}

fn floor_div(a: i128, b: i128) -> i128 {
    // Callers guarantee b > 0.
    a.div_euclid(b)
}

fn ceil_div(a: i128, b: i128) -> i128 {
    -(-a).div_euclid(b)
}

impl Interval {
    /// The unknown interval.
    pub const FULL: Interval = Interval { lo: i64::MIN, hi: i64::MAX };

    /// `[lo, hi]`, or `None` when empty.
    pub fn new(lo: i64, hi: i64) -> Option<Interval> {
        (lo <= hi).then_some(Interval { lo, hi })
    }

    /// The single value `c`.
    pub fn point(c: i64) -> Interval {
        Interval { lo: c, hi: c }
    }

    /// Exact `[lo, hi]` in `i128`, clamped into `i64` (see module docs).
    pub fn clamped(lo: i128, hi: i128) -> Interval {
        let clamp = |v: i128| v.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64;
        let (lo, hi) = (clamp(lo), clamp(hi));
        if lo <= hi {
            Interval { lo, hi }
        } else {
            Interval::FULL
        }
    }

    /// `[lo, hi]` in `i128` if it fits `i64` entirely; used by side conditions
    /// that must prove an intermediate result cannot overflow.
    pub fn exact(lo: i128, hi: i128) -> Option<Interval> {
        let lo = i64::try_from(lo).ok()?;
        let hi = i64::try_from(hi).ok()?;
        Interval::new(lo, hi)
    }

    fn wide(self) -> (i128, i128) {
        (i128::from(self.lo), i128::from(self.hi))
    }

    /// The value if the interval has exactly one element.
    pub fn singleton(self) -> Option<i64> {
        (self.lo == self.hi).then_some(self.lo)
    }

    /// True when every value is `>= 0`.
    pub fn is_nonneg(self) -> bool {
        self.lo >= 0
    }

    /// Intersection, `None` when disjoint.
    pub fn intersect(self, other: Interval) -> Option<Interval> {
        Interval::new(self.lo.max(other.lo), self.hi.min(other.hi))
    }

    /// Interval of `a + b`, or `None` if some sum could overflow.
    pub fn checked_add(self, b: Interval) -> Option<Interval> {
        let ((al, ah), (bl, bh)) = (self.wide(), b.wide());
        Interval::exact(al + bl, ah + bh)
    }

    /// Interval of `a - b`, or `None` if some difference could overflow.
    pub fn checked_sub(self, b: Interval) -> Option<Interval> {
        let ((al, ah), (bl, bh)) = (self.wide(), b.wide());
        Interval::exact(al - bh, ah - bl)
    }

    /// Interval of `-a`, or `None` if `a` may be `i64::MIN` (whose negation overflows).
    pub fn checked_neg(self) -> Option<Interval> {
        let (l, h) = self.wide();
        Interval::exact(-h, -l)
    }

    /// Interval of `a * b`, or `None` if some product could overflow.
    pub fn checked_mul(self, b: Interval) -> Option<Interval> {
        let (lo, hi) = self.mul_wide(b);
        Interval::exact(lo, hi)
    }

    fn mul_wide(self, b: Interval) -> (i128, i128) {
        let ((al, ah), (bl, bh)) = (self.wide(), b.wide());
        let c = [al * bl, al * bh, ah * bl, ah * bh];
        let lo = c.iter().copied().min().unwrap_or(i128::MIN);
        let hi = c.iter().copied().max().unwrap_or(i128::MAX);
        (lo, hi)
    }

    fn add_iv(self, b: Interval) -> Interval {
        let ((al, ah), (bl, bh)) = (self.wide(), b.wide());
        Interval::clamped(al + bl, ah + bh)
    }

    fn sub_iv(self, b: Interval) -> Interval {
        let ((al, ah), (bl, bh)) = (self.wide(), b.wide());
        Interval::clamped(al - bh, ah - bl)
    }

    fn neg_iv(self) -> Interval {
        let (l, h) = self.wide();
        Interval::clamped(-h, -l)
    }

    fn mul_iv(self, b: Interval) -> Interval {
        let (lo, hi) = self.mul_wide(b);
        Interval::clamped(lo, hi)
    }

    /// Only the positive part of a divisor matters: other divisors make the
    /// operation undefined.
    fn positive_divisor(self) -> Option<(i128, i128)> {
        (self.hi >= 1).then(|| (i128::from(self.lo.max(1)), i128::from(self.hi)))
    }

    /// Floor/ceil division is monotone in the dividend and, for a fixed
    /// dividend, monotone in the (positive) divisor, so the extremes are at
    /// the corners of the box.
    fn div_corners(self, b: Interval, f: fn(i128, i128) -> i128) -> Interval {
        let Some((bl, bh)) = b.positive_divisor() else { return Interval::FULL };
        let (al, ah) = self.wide();
        let c = [f(al, bl), f(al, bh), f(ah, bl), f(ah, bh)];
        let lo = c.iter().copied().min().unwrap_or(i128::MIN);
        let hi = c.iter().copied().max().unwrap_or(i128::MAX);
        Interval::clamped(lo, hi)
    }

    /// `a floordiv b`
    pub fn floordiv(self, b: Interval) -> Interval {
        self.div_corners(b, floor_div)
    }

    /// `a ceildiv b`
    pub fn ceildiv(self, b: Interval) -> Interval {
        self.div_corners(b, ceil_div)
    }

    /// `a mod b`
    pub fn modulo(self, b: Interval) -> Interval {
        let Some((bl, bh)) = b.positive_divisor() else { return Interval::FULL };
        let (al, ah) = self.wide();
        if al >= 0 && ah < bl {
            // Smaller than every possible divisor: mod is the identity.
            return self;
        }
        if bl == bh && floor_div(al, bl) == floor_div(ah, bl) {
            // One period of a constant divisor: mod is a shift by k*c.
            let k = floor_div(al, bl) * bl;
            return Interval::clamped(al - k, ah - k);
        }
        let mut hi = bh - 1;
        if al >= 0 {
            // For non-negative a, a mod b <= a.
            hi = hi.min(ah);
        }
        Interval::clamped(0, hi)
    }

    /// Valid shift amounts `[0, 63]` of `b`, or `None` if there are none.
    fn shift_amounts(self) -> Option<(u32, u32)> {
        if self.hi < 0 || self.lo > 63 {
            return None;
        }
        let lo = u32::try_from(self.lo.max(0)).ok()?;
        let hi = u32::try_from(self.hi.min(63)).ok()?;
        Some((lo, hi))
    }

    fn shl_iv(self, b: Interval) -> Interval {
        let Some((kl, kh)) = b.shift_amounts() else { return Interval::FULL };
        let (al, ah) = self.wide();
        let (pl, ph) = (1i128 << kl, 1i128 << kh);
        let c = [al * pl, al * ph, ah * pl, ah * ph];
        let lo = c.iter().copied().min().unwrap_or(i128::MIN);
        let hi = c.iter().copied().max().unwrap_or(i128::MAX);
        Interval::clamped(lo, hi)
    }

    fn shr_iv(self, b: Interval) -> Interval {
        let Some((kl, kh)) = b.shift_amounts() else { return Interval::FULL };
        let (al, ah) = self.wide();
        let (pl, ph) = (1i128 << kl, 1i128 << kh);
        let c = [floor_div(al, pl), floor_div(al, ph), floor_div(ah, pl), floor_div(ah, ph)];
        let lo = c.iter().copied().min().unwrap_or(i128::MIN);
        let hi = c.iter().copied().max().unwrap_or(i128::MAX);
        Interval::clamped(lo, hi)
    }

    /// `a & b` on two's complement.
    pub fn and(self, b: Interval) -> Interval {
        match (self.is_nonneg(), b.is_nonneg()) {
            // The result's bits are a subset of each non-negative operand's.
            (true, true) => Interval { lo: 0, hi: self.hi.min(b.hi) },
            (true, false) => Interval { lo: 0, hi: self.hi },
            (false, true) => Interval { lo: 0, hi: b.hi },
            (false, false) if self.hi < 0 && b.hi < 0 => {
                // Both negative: sign bit stays set and, read as unsigned
                // (same order for negatives), a & b <= min(a, b).
                Interval { lo: i64::MIN, hi: self.hi.min(b.hi) }
            }
            (false, false) => Interval::FULL,
        }
    }

    /// `min(a, b)`
    pub fn min(self, b: Interval) -> Interval {
        Interval { lo: self.lo.min(b.lo), hi: self.hi.min(b.hi) }
    }

    /// `max(a, b)`
    pub fn max(self, b: Interval) -> Interval {
        Interval { lo: self.lo.max(b.lo), hi: self.hi.max(b.hi) }
    }
}

macro_rules! impl_binop {
    ($trait:ident, $method:ident, $impl:ident, $doc:literal) => {
        #[doc = $doc]
        impl std::ops::$trait for Interval {
            type Output = Interval;
            fn $method(self, b: Interval) -> Interval {
                self.$impl(b)
            }
        }
    };
}
impl_binop!(Add, add, add_iv, "Interval of `a + b`.");
impl_binop!(Sub, sub, sub_iv, "Interval of `a - b`.");
impl_binop!(Mul, mul, mul_iv, "Interval of `a * b`.");
impl_binop!(Shl, shl, shl_iv, "Interval of `a << b`, i.e. `a * 2^b`.");
impl_binop!(Shr, shr, shr_iv, "Interval of `a >> b`, i.e. `a floordiv 2^b`.");

/// Interval of `-a`.
impl std::ops::Neg for Interval {
    type Output = Interval;
    fn neg(self) -> Interval {
        self.neg_iv()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expr::BinOp;

    fn iv(lo: i64, hi: i64) -> Interval {
        Interval { lo, hi }
    }

    /// Brute-force check: every defined result of `op` over the box lies in
    /// the computed interval.
    #[test]
    fn every_op_is_sound_on_small_boxes() {
        let boxes = [
            iv(-9, -3),
            iv(-5, 5),
            iv(0, 0),
            iv(0, 7),
            iv(1, 1),
            iv(3, 12),
            iv(2, 2),
            iv(-1, 70),
            iv(60, 66),
        ];
        for op in BinOp::ALL {
            for a in boxes {
                for b in boxes {
                    let r = crate::analysis::interval_of(op, a, b);
                    for x in a.lo..=a.hi {
                        for y in b.lo..=b.hi {
                            if let Some(v) = op.apply(x, y) {
                                assert!(
                                    r.lo <= v && v <= r.hi,
                                    "{op:?} {a:?} {b:?}: {x},{y} -> {v} not in {r:?}"
                                );
                            }
                        }
                    }
                }
            }
        }
        for a in boxes {
            let r = -a;
            assert!(r.lo == -a.hi && r.hi == -a.lo);
        }
    }

    #[test]
    fn extreme_values_clamp() {
        assert_eq!(Interval::FULL + Interval::point(1), iv(i64::MIN + 1, i64::MAX));
        assert_eq!(Interval::FULL * Interval::FULL, Interval::FULL);
        assert_eq!(-Interval::FULL, iv(i64::MIN + 1, i64::MAX));
        assert_eq!(Interval::FULL.floordiv(Interval::point(0)), Interval::FULL);
        assert!(Interval::FULL.checked_add(Interval::point(1)).is_none());
        assert!(Interval::point(i64::MIN).checked_neg().is_none());
        assert_eq!(iv(-3, 5).checked_neg(), Some(iv(-5, 3)));
        assert!(iv(i64::MIN, 0).checked_sub(Interval::point(1)).is_none());
        assert_eq!(iv(0, 7).checked_sub(iv(1, 2)), Some(iv(-2, 6)));
        assert_eq!(iv(0, 63).modulo(Interval::point(64)), iv(0, 63));
        assert_eq!(iv(64, 100).modulo(Interval::point(64)), iv(0, 36));
    }
}

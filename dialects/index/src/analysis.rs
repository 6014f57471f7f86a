//! The e-class analysis: constant value, value interval, known divisor and a
//! variable-set signature per e-class.
//!
//! Every fact is a claim about *the defined values* of the e-class, under the
//! user's variable ranges:
//! * `constant = Some(c)`: every defined value is `c`;
//! * `range = [lo, hi]`: every defined value is in `[lo, hi]`;
//! * `divisor = d`: every defined value is a multiple of `d` (`d = 0` means
//!   the value is always `0`, a multiple of everything; `d = 1` is "unknown");
//! * `vars`: a 64-bit Bloom signature of the variables mentioned. It is only a
//!   *heuristic* used to bound reassociation (never for soundness), so false
//!   positives merely cost a little search.
//!
//! Invariants:
//! * `make` only derives facts that hold for every defined value (see
//!   [`crate::interval`] for the interval rules, [`divisor_of`] for divisors).
//! * `merge` only combines facts that are both true of the same class, so it
//!   may *strengthen* them (intersect intervals, lcm divisors). Contradictory
//!   facts can only come from classes that are never defined; they are kept
//!   as they are (no panic).
//! * `merge` strengthens a class's interval or divisor at most
//!   [`MAX_REFINEMENTS`] times; later refinements are dropped (a weaker fact
//!   is still true). Without the bound, a cycle of classes that are never
//!   defined (where anything can be proven, `u = u + 1` included) narrows an
//!   interval by one per round, 2⁶⁴ rounds: egg's rebuild would not return.
//! * `modify` adds the literal for every constant class (constant folding,
//!   including constants proven by intervals) and prunes the class to its
//!   leaves, which keeps the e-graph small.

use std::collections::HashMap;

use egg::{Analysis, DidMerge, EGraph, Id, Language, Symbol};

use crate::expr::{self, BinOp};
use crate::interval::Interval;
use crate::lang::{binop_of, IndexLang};
use crate::ranges::Ranges;

/// Facts known about one e-class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Facts {
    /// The constant value, if known.
    pub constant: Option<i64>,
    /// Bounds on the value.
    pub range: Interval,
    /// Every value is a multiple of this (0 = always zero, 1 = unknown).
    pub divisor: u64,
    /// Bloom signature of mentioned variables (heuristic only).
    pub vars: u64,
    /// How many times `merge` has strengthened `range` or `divisor`.
    refinements: u8,
}

/// The most times `merge` strengthens one class's interval or divisor (see the module docs).
pub(crate) const MAX_REFINEMENTS: u8 = 32;

impl Facts {
    fn of_constant(c: i64) -> Facts {
        Facts {
            constant: Some(c),
            range: Interval::point(c),
            divisor: c.unsigned_abs(),
            vars: 0,
            refinements: 0,
        }
    }

    /// Facts derived by `make`: nothing refined yet.
    fn derived(constant: Option<i64>, range: Interval, divisor: u64, vars: u64) -> Facts {
        Facts { constant, range, divisor, vars, refinements: 0 }
    }

    /// The same claims, whatever the refinement counts.
    fn same_claims(&self, other: &Facts) -> bool {
        (self.constant, self.range, self.divisor, self.vars)
            == (other.constant, other.range, other.divisor, other.vars)
    }

    /// Makes the facts consistent with each other: a singleton interval is a
    /// constant and a constant fixes the interval and divisor.
    fn normalized(mut self) -> Facts {
        if self.constant.is_none() {
            self.constant = self.range.singleton();
        }
        if let Some(c) = self.constant {
            self.range = Interval::point(c);
            self.divisor = c.unsigned_abs();
        }
        self
    }

    /// True when `c > 0` divides every value.
    pub fn is_multiple_of(&self, c: i64) -> bool {
        c > 0 && self.divisor % c.unsigned_abs() == 0
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// lcm, or the larger argument if the lcm overflows (both are sound).
fn lcm_or_max(a: u64, b: u64) -> u64 {
    if a == 0 || b == 0 {
        return 0;
    }
    (a / gcd(a, b)).checked_mul(b).unwrap_or(a.max(b))
}

fn pow2_divisor(d: u64) -> u64 {
    if d == 0 {
        0
    } else {
        1u64 << d.trailing_zeros()
    }
}

/// Known divisor of `a op b` from the divisors (and constants) of `a`, `b`.
///
/// Soundness sketch per operator: sums/differences/min/max keep every common
/// divisor (gcd); a product of multiples of `da` and `db` is a multiple of
/// `da*db`; `(m*da) floordiv c` is the exact `m*(da/c)` when `c | da`;
/// `a mod b = a - b*q` keeps `gcd(da, db)`; `a & b` keeps the zero low bits of
/// either operand.
pub(crate) fn divisor_of(op: BinOp, a: &Facts, b: &Facts) -> u64 {
    let (da, db) = (a.divisor, b.divisor);
    match op {
        BinOp::Add | BinOp::Sub | BinOp::Min | BinOp::Max => gcd(da, db),
        BinOp::Mul => da.checked_mul(db).unwrap_or(da.max(db)),
        BinOp::FloorDiv | BinOp::CeilDiv => match b.constant {
            Some(c) if c > 0 && da % c.unsigned_abs() == 0 => da / c.unsigned_abs(),
            _ => 1,
        },
        BinOp::Mod => gcd(da, db),
        BinOp::Shl => match b.constant.and_then(|k| u32::try_from(k).ok()).filter(|k| *k < 64) {
            Some(k) => da.checked_mul(1u64 << k).unwrap_or(da),
            None => da,
        },
        BinOp::Shr => match b.constant.and_then(|k| u32::try_from(k).ok()).filter(|k| *k < 64) {
            Some(k) if da % (1u64 << k) == 0 => da >> k,
            _ => 1,
        },
        BinOp::And => {
            if da == 0 || db == 0 {
                0
            } else {
                pow2_divisor(da).max(pow2_divisor(db))
            }
        }
    }
}

/// The interval of `a op b`: the one place each operator's interval rule is chosen.
pub(crate) fn interval_of(op: BinOp, a: Interval, b: Interval) -> Interval {
    match op {
        BinOp::Add => a + b,
        BinOp::Sub => a - b,
        BinOp::Mul => a * b,
        BinOp::FloorDiv => a.floordiv(b),
        BinOp::CeilDiv => a.ceildiv(b),
        BinOp::Mod => a.modulo(b),
        BinOp::Shl => a << b,
        BinOp::Shr => a >> b,
        BinOp::And => a.and(b),
        BinOp::Min => a.min(b),
        BinOp::Max => a.max(b),
    }
}

/// Stable 64-bit hash of a name (FNV-1a); egg's `Symbol` ids are not stable
/// across runs and the heuristic must be deterministic.
fn var_bit(name: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    1u64 << (h % 64)
}

/// The analysis, parameterised by the user's variable ranges.
#[derive(Debug, Default, Clone)]
pub struct IndexAnalysis {
    ranges: HashMap<Symbol, Interval>,
}

impl IndexAnalysis {
    /// Analysis assuming `ranges` (half-open) for the named variables.
    pub fn new(ranges: &Ranges) -> Self {
        let ranges = ranges
            .iter()
            .filter_map(|(name, (lo, hi))| {
                // Ranges guarantees lo < hi, so hi - 1 >= lo.
                Interval::new(lo, hi.checked_sub(1)?).map(|iv| (Symbol::from(name), iv))
            })
            .collect();
        IndexAnalysis { ranges }
    }
}

/// The e-graph type used throughout the crate.
pub type IndexEGraph = EGraph<IndexLang, IndexAnalysis>;

impl Analysis<IndexLang> for IndexAnalysis {
    type Data = Facts;

    fn make(egraph: &mut IndexEGraph, enode: &IndexLang, _id: Id) -> Facts {
        let f = |id: &Id| egraph[*id].data;
        let facts = match enode {
            IndexLang::Num(c) => Facts::of_constant(*c),
            IndexLang::Symbol(s) => Facts::derived(
                None,
                egraph.analysis.ranges.get(s).copied().unwrap_or(Interval::FULL),
                1,
                var_bit(s.as_str()),
            ),
            IndexLang::Neg(a) => {
                let a = f(a);
                Facts::derived(a.constant.and_then(expr::neg), -a.range, a.divisor, a.vars)
            }
            other => {
                let (Some(op), [a, b]) = (binop_of(other), other.children()) else {
                    return Facts::derived(None, Interval::FULL, 1, 0);
                };
                let (a, b) = (f(a), f(b));
                let constant = match (a.constant, b.constant) {
                    (Some(x), Some(y)) => op.apply(x, y),
                    _ => None,
                };
                Facts::derived(
                    constant,
                    interval_of(op, a.range, b.range),
                    divisor_of(op, &a, &b),
                    a.vars | b.vars,
                )
            }
        };
        facts.normalized()
    }

    fn merge(&mut self, to: &mut Facts, from: Facts) -> DidMerge {
        let before = *to;
        let mut merged = *to;
        if merged.constant.is_none() {
            merged.constant = from.constant;
        }
        merged.refinements = to.refinements.max(from.refinements);
        if merged.refinements < MAX_REFINEMENTS {
            let range = merged.range.intersect(from.range).unwrap_or(merged.range);
            let divisor = lcm_or_max(merged.divisor, from.divisor);
            if (range, divisor) != (merged.range, merged.divisor) {
                (merged.range, merged.divisor) = (range, divisor);
                merged.refinements += 1;
            }
        }
        merged.vars &= from.vars;
        let merged = merged.normalized();
        *to = merged;
        DidMerge(!merged.same_claims(&before), !merged.same_claims(&from))
    }

    fn modify(egraph: &mut IndexEGraph, id: Id) {
        if let Some(c) = egraph[id].data.constant {
            let lit = egraph.add(IndexLang::Num(c));
            egraph.union(id, lit);
            // A constant class needs no other representation: dropping the
            // operator nodes keeps rules from re-deriving facts about it.
            egraph[id].nodes.retain(|n| n.is_leaf());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lang::to_rec_expr;
    use crate::Expr;

    fn facts(src: &str, ranges: &Ranges) -> Facts {
        let mut eg = IndexEGraph::new(IndexAnalysis::new(ranges));
        let id = eg.add_expr(&to_rec_expr(&Expr::parse(src).expect("parses")));
        eg.rebuild();
        eg[id].data
    }

    #[test]
    fn divisors_and_ranges() {
        let r = Ranges::from_specs(["x=0:64", "y=0:2048"]).expect("ranges");
        assert_eq!(facts("x * 64", &r).divisor, 64);
        assert_eq!(facts("x * 64 + y * 96", &r).divisor, 32);
        assert_eq!(facts("(x * 64) floordiv 16", &r).divisor, 4);
        assert_eq!(facts("x << 3", &r).divisor, 8);
        assert_eq!(facts("(x * 48) mod 32", &r).divisor, 16);
        assert_eq!(facts("(x * 8) & y", &r).divisor, 8);
        assert_eq!(facts("x floordiv 64", &r).constant, Some(0));
        assert_eq!(facts("y mod 4096", &r).range, Interval { lo: 0, hi: 2047 });
        assert_eq!(facts("3 * 4 - 2", &r).constant, Some(10));
        assert_eq!(facts("3 floordiv 0", &r).constant, None);
        assert_eq!(facts("q", &r).range, Interval::FULL);
    }
}

//! Equivalence checking by evaluation: exhaustive on small domains, seeded
//! random sampling (plus range edges and special values) on large ones.
//!
//! Used twice: as the test oracle for every rewrite rule, and as a cheap
//! defence-in-depth guard in [`crate::simplify`] (a rejected rewrite falls
//! back to the input). It checks *refinement*: wherever the input evaluates
//! to a value, the output must evaluate to the same value; where the input is
//! undefined the output may be anything.
//!
//! Invariants: deterministic (fixed seed), never panics, evaluates at most
//! `budget` points (at least one).

use std::collections::BTreeMap;

use crate::expr::Expr;
use crate::ranges::Ranges;

/// A variable assignment on which the output disagrees with the input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counterexample {
    /// The assignment.
    pub env: BTreeMap<String, i64>,
    /// Value of the input there.
    pub input: Option<i64>,
    /// Value of the output there.
    pub output: Option<i64>,
}

impl std::fmt::Display for Counterexample {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "at {:?}: input = {:?}, output = {:?}", self.env, self.input, self.output)
    }
}

/// SplitMix64: tiny, good enough, and reproducible.
#[derive(Debug, Clone)]
pub(crate) struct SplitMix(pub(crate) u64);

impl SplitMix {
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[lo, hi)`; requires `lo < hi`.
    pub(crate) fn in_range(&mut self, lo: i64, hi: i64) -> i64 {
        let span = (i128::from(hi) - i128::from(lo)).max(1) as u128;
        let off = u128::from(self.next_u64()) % span;
        i64::try_from(i128::from(lo) + off as i128).unwrap_or(lo)
    }
}

/// Values tried for variables without a range.
const SPECIAL: [i64; 18] = [
    0,
    1,
    -1,
    2,
    -2,
    3,
    7,
    8,
    63,
    64,
    65,
    -64,
    -65,
    1000,
    i64::MIN,
    i64::MAX,
    i64::MIN + 1,
    i64::MAX - 1,
];

fn sample(rng: &mut SplitMix, range: Option<(i64, i64)>) -> i64 {
    match range {
        Some((lo, hi)) => {
            if rng.next_u64() % 4 == 0 {
                let mid = i64::try_from((i128::from(lo) + i128::from(hi)) / 2).unwrap_or(lo);
                let edges = [
                    lo,
                    lo.saturating_add(1).min(hi - 1),
                    hi - 1,
                    hi.saturating_sub(2).max(lo),
                    mid,
                ];
                edges[(rng.next_u64() % edges.len() as u64) as usize]
            } else {
                rng.in_range(lo, hi)
            }
        }
        None => match rng.next_u64() % 3 {
            0 => SPECIAL[(rng.next_u64() % SPECIAL.len() as u64) as usize],
            1 => rng.in_range(-4096, 4096),
            _ => rng.next_u64() as i64,
        },
    }
}

/// Checks that `output` refines `input` over the variables' ranges.
///
/// If every variable is ranged and the domain has at most `budget` points,
/// the check is exhaustive (a proof for that domain); otherwise `budget`
/// deterministic samples are tried. Returns the number of points checked.
pub fn check_refines(
    input: &Expr,
    output: &Expr,
    ranges: &Ranges,
    budget: usize,
) -> Result<usize, Counterexample> {
    let mut names: Vec<String> = input.vars().into_iter().collect();
    for v in output.vars() {
        if !names.contains(&v) {
            names.push(v);
        }
    }
    names.sort();
    let domains: Vec<Option<(i64, i64)>> = names.iter().map(|n| ranges.get(n)).collect();
    let budget = budget.max(1);

    let mut values: Vec<i64> = domains.iter().map(|d| d.map_or(0, |(lo, _)| lo)).collect();
    let check = |values: &[i64]| -> Result<(), Counterexample> {
        let env = |name: &str| names.iter().position(|n| n == name).map(|i| values[i]);
        let Some(want) = input.eval(&env) else { return Ok(()) };
        let got = output.eval(&env);
        if got == Some(want) {
            Ok(())
        } else {
            Err(Counterexample {
                env: names.iter().cloned().zip(values.iter().copied()).collect(),
                input: Some(want),
                output: got,
            })
        }
    };

    let size: Option<u128> = domains.iter().try_fold(1u128, |acc, d| {
        let (lo, hi) = (*d)?;
        acc.checked_mul((i128::from(hi) - i128::from(lo)) as u128)
    });
    if let Some(size) = size.filter(|s| *s <= budget as u128) {
        // Odometer over the full product domain.
        for _ in 0..size {
            check(&values)?;
            for (i, d) in domains.iter().enumerate() {
                let Some((lo, hi)) = *d else { continue };
                if values[i] + 1 < hi {
                    values[i] += 1;
                    break;
                }
                values[i] = lo;
            }
        }
        return Ok(size as usize);
    }

    let mut rng = SplitMix(0x5eed_1dea_f00d_cafe);
    check(&values)?;
    for _ in 1..budget {
        for (v, d) in values.iter_mut().zip(&domains) {
            *v = sample(&mut rng, *d);
        }
        check(&values)?;
    }
    Ok(budget)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_counterexamples_and_accepts_refinements() {
        let r = Ranges::from_specs(["x=0:100"]).expect("ranges");
        let x = Expr::var("x");
        let a = Expr::parse("x mod 64").expect("parses");
        assert_eq!(check_refines(&a, &(x.clone() & 63.into()), &r, 1000), Ok(100));
        assert!(check_refines(&a, &x, &r, 1000).is_err());
        // Undefined input: anything goes.
        let undef = Expr::parse("x floordiv 0").expect("parses");
        assert!(check_refines(&undef, &Expr::Const(7), &r, 1000).is_ok());
        // Unranged variables are sampled, including extreme values.
        let e = Expr::parse("y + 1 - 1").expect("parses");
        assert!(check_refines(&e, &Expr::var("y"), &Ranges::new(), 200).is_ok());
        assert!(check_refines(&Expr::var("y"), &e, &Ranges::new(), 200).is_err());
    }
}

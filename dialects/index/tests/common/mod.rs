//! Shared helpers for the integration tests: exhaustive/sampled equivalence
//! assertions and small constructors.
#![allow(dead_code)]

use fbc_index::{check_refines, simplify, Expr, Limits, Ranges, Simplified};

/// Largest domain checked exhaustively; larger ones are sampled.
pub const EXHAUSTIVE_POINTS: usize = 1 << 18;

/// Asserts that `output` equals `input` wherever `input` is defined inside
/// `ranges`: exhaustively for domains up to `EXHAUSTIVE_POINTS`, otherwise on
/// that many deterministic samples (edges and special values included).
pub fn assert_equivalent(input: &Expr, output: &Expr, ranges: &Ranges) {
    if let Err(cex) = check_refines(input, output, ranges, EXHAUSTIVE_POINTS) {
        panic!("`{input}` and `{output}` differ {cex}");
    }
}

pub fn ranges(specs: &[&str]) -> Ranges {
    Ranges::from_specs(specs).expect("valid range specs")
}

pub fn parse(src: &str) -> Expr {
    Expr::parse(src).unwrap_or_else(|e| panic!("`{src}`: {e}"))
}

/// Limits for tests: generous time (debug builds on a loaded 2-core box),
/// verifier off so the rules themselves are what is tested.
pub fn test_limits() -> Limits {
    Limits { time_limit: std::time::Duration::from_secs(5), verify_samples: 0, ..Limits::default() }
}

/// Simplifies with `test_limits` and checks equivalence.
pub fn simplify_checked(src: &str, specs: &[&str]) -> Simplified {
    let r = ranges(specs);
    let e = parse(src);
    let s = simplify(&e, &r, &test_limits());
    assert_equivalent(&e, &s.output, &r);
    assert!(s.cost_after <= s.cost_before, "{src}: cost went up: {s:?}");
    s
}

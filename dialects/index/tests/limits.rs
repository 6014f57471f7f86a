//! Runner limits: hitting a node, iteration or time limit is not an error,
//! returns promptly, and still yields a correct, never-costlier result.

mod common;

use std::time::{Duration, Instant};

use common::{parse, ranges};
use fbc_index::{check_refines, simplify, Expr, Limits, Outcome};

/// A sum of many quotient/remainder terms of one variable: every pair of
/// addends shares `x`, so bounded re-association has the most work to do.
fn explosive(terms: usize) -> Expr {
    let mut e = parse("x mod 64");
    for i in 1..terms {
        let k = 1i64 << (i % 20);
        let t = parse(&format!("(x floordiv {k}) mod {} * {k}", 3 + i % 5));
        e = e + t;
    }
    e
}

#[test]
fn time_limit_is_respected() {
    let e = explosive(120);
    let r = ranges(&["x=0:1000000"]);
    let limits = Limits {
        node_limit: 1_000_000,
        iter_limit: 1_000,
        time_limit: Duration::from_millis(100),
        verify_samples: 64,
    };
    let t = Instant::now();
    let s = simplify(&e, &r, &limits);
    let took = t.elapsed();
    // Generous slack for unoptimised builds on a busy machine: egg checks the
    // limit between rule applications, and extraction runs afterwards.
    assert!(took < Duration::from_secs(3), "took {took:?}: {:?}", s.report);
    assert!(s.report.stop_reason.contains("TimeLimit"), "{:?}", s.report);
    assert!(s.cost_after <= s.cost_before);
    // Large domain and large expression: sample rather than enumerate.
    assert!(check_refines(&e, &s.output, &r, 4096).is_ok());
}

#[test]
fn node_limit_is_respected() {
    let e = explosive(15);
    let r = ranges(&["x=0:1000000"]);
    let limits = Limits {
        node_limit: 300,
        iter_limit: 1_000,
        time_limit: Duration::from_secs(10),
        verify_samples: 64,
    };
    let s = simplify(&e, &r, &limits);
    assert!(s.report.stop_reason.contains("NodeLimit"), "{:?}", s.report);
    assert!(s.cost_after <= s.cost_before);
    // Large domain and large expression: sample rather than enumerate.
    assert!(check_refines(&e, &s.output, &r, 4096).is_ok());
}

#[test]
fn iteration_limit_is_respected() {
    let e = parse("(x floordiv 64) * 64 + x mod 64");
    let limits = Limits { iter_limit: 1, ..Limits::default() };
    let s = simplify(&e, &fbc_index::Ranges::new(), &limits);
    assert_eq!(s.report.iterations, 1);
    assert!(s.report.stop_reason.contains("IterationLimit"), "{:?}", s.report);
}

#[test]
fn oversized_input_is_returned_unchanged() {
    let mut e = parse("x");
    for i in 0..400 {
        e = e + parse(&format!("y{i} mod 7"));
    }
    // Deeper than MAX_DEPTH (left-leaning chain of 400 additions is fine,
    // but the node count exceeds the limit below).
    let limits = Limits { node_limit: 500, ..Limits::default() };
    let t = Instant::now();
    let s = simplify(&e, &fbc_index::Ranges::new(), &limits);
    assert!(t.elapsed() < Duration::from_secs(1));
    assert_eq!(s.report.outcome, Outcome::Skipped);
    assert_eq!(s.output, e);
    // Programmatically built trees deeper than MAX_DEPTH are skipped too.
    let mut deep = parse("x");
    for _ in 0..(fbc_index::MAX_DEPTH + 10) {
        deep = -deep;
    }
    let s = simplify(&deep, &fbc_index::Ranges::new(), &Limits::default());
    assert_eq!(s.report.outcome, Outcome::Skipped);
    assert_eq!(s.divmod_before, 0);
}

#[test]
fn never_costlier_than_input() {
    for src in ["x", "x + y", "x floordiv 3", "min(x, y) mod 5", "x * y + 7"] {
        let e = parse(src);
        let s = simplify(&e, &fbc_index::Ranges::new(), &Limits::default());
        assert_eq!(s.output, e, "{src} should already be optimal");
        assert_eq!(s.cost_after, s.cost_before);
    }
}

/// Expressions that are never defined let the rules prove anything, cycles such as `u = u + 1`
/// included; the analysis must still reach its fixed point (each of these once narrowed an
/// interval by one per round of egg's rebuild, 2⁶⁴ rounds). Run on a thread so that a
/// regression fails here instead of hanging the suite.
#[test]
fn never_defined_inputs_return() {
    let inputs = [
        "min(v - -2 floordiv 128, -1 ceildiv 8 ceildiv 0)",
        "(v + 1) mod (u floordiv 6) mod 1 ceildiv 0",
        "((-3 << 255) - -(1)) ceildiv (min(2, -1 ceildiv 2) ceildiv 0)",
    ];
    let (send, receive) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for src in inputs {
            let e = parse(src);
            let s = simplify(&e, &fbc_index::Ranges::new(), &common::test_limits());
            let _ = send.send((e, s.output));
        }
    });
    for src in inputs {
        let (e, out) = receive
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("`{src}` did not come back within 60 s"));
        check_refines(&e, &out, &fbc_index::Ranges::new(), 4096)
            .unwrap_or_else(|c| panic!("`{e}` => `{out}`: {c:?}"));
    }
}

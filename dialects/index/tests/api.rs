//! Public API behaviour: parsing and printing, range specs, index maps and
//! the JSON form of map simplification.

mod common;

use common::{ranges, simplify_checked, test_limits};
use fbc_index::{simplify, simplify_map, Expr, IndexMap, Limits, MapError, Ranges};

#[test]
fn paper_rule_nested_mod() {
    // FBLayout Sec. 4.3.2: i mod Ca mod Cb = i mod Cb when Cb | Ca.
    let s = simplify_checked("i mod 96 mod 32", &["i=0:100000"]);
    assert_eq!(s.output.to_string(), "i & 31");
    // Without a range, i may be negative: still eliminated, but no `&`.
    let s = simplify_checked("i mod 96 mod 32", &[]);
    assert_eq!(s.output.to_string(), "i mod 32");
    let s = simplify_checked("i mod 96 mod 12", &["i=0:100000"]);
    assert_eq!(s.output.to_string(), "i mod 12");
}

#[test]
fn symbolic_strides() {
    let m =
        IndexMap::parse("(d0, d1)[s0] -> ((d0 * s0 + d1) floordiv s0, (d0 * s0) mod s0)").unwrap();
    let (out, _) = simplify_map(&m, &Ranges::new(), &test_limits());
    assert_eq!(out.results[1], Expr::Const(0));
    assert_eq!(out.eval(&[3, 1, 4]), m.eval(&[3, 1, 4]));
}

#[test]
fn simplify_map_json() {
    let m = IndexMap::parse("(d0, d1) -> (d0 floordiv 4, d1 mod 64)").unwrap();
    assert_eq!(m.to_string(), "(d0, d1) -> (d0 floordiv 4, d1 mod 64)");
    let r = ranges(&["d0=0:4", "d1=0:4096"]);
    let (out, stats) = simplify_map(&m, &r, &Limits::default());
    assert_eq!(out.to_string(), "(d0, d1) -> (0, d1 & 63)");
    let v = serde_json::to_value(&stats).unwrap();
    assert_eq!(v["input"], "(d0, d1) -> (d0 floordiv 4, d1 mod 64)");
    assert_eq!(v["output"], "(d0, d1) -> (0, d1 & 63)");
    assert_eq!(v["divmod_before"], 2);
    assert_eq!(v["divmod_after"], 0);
    assert_eq!(v["results"][1]["output"], "d1 & 63");
}

#[test]
fn compose_errors() {
    let f = IndexMap::parse("(a, b) -> (a + b)").unwrap();
    let g = IndexMap::parse("(x) -> (x, x, x)").unwrap();
    assert_eq!(f.compose(&g), Err(MapError::Arity { outer_dims: 2, inner_results: 3 }));
    let e = IndexMap::parse("(a) -> (a +)").unwrap_err();
    assert_eq!(e.offset, 11);
}

#[test]
fn range_specs() {
    let mut r = Ranges::new();
    r.add_spec("d0=0:64").unwrap();
    assert_eq!(r.get("d0"), Some((0, 64)));
    let err = Ranges::parse_spec("d0=64:0").unwrap_err();
    assert!(err.to_string().contains("d0=64:0"), "{err}");
    let err = Ranges::parse_spec("d0=0:1.5").unwrap_err();
    assert_eq!(err.offset, 5);
}

#[test]
fn deterministic_output() {
    let e = Expr::parse("(x floordiv 8) mod 16 * 8 + x mod 8 + (y * 64 + z) floordiv 64").unwrap();
    let r = ranges(&["x=0:4096", "y=0:64", "z=0:64"]);
    let first = simplify(&e, &r, &test_limits());
    for _ in 0..3 {
        assert_eq!(simplify(&e, &r, &test_limits()).output, first.output);
    }
    assert_eq!(first.output.to_string(), "(x & 127) + y");
}

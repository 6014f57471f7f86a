//! "start => goal" tests: concrete index expressions and composed FBLayout
//! maps that must simplify to a known form (checked for equivalence too).

mod common;

use common::{assert_equivalent, ranges, simplify_checked, test_limits};
use fbc_index::{simplify_map, IndexMap};

fn goal(src: &str, specs: &[&str], want: &str) {
    let s = simplify_checked(src, specs);
    assert_eq!(s.output.to_string(), want, "`{src}` with {specs:?}: {:?}", s.report);
}

const D: [&str; 3] = ["d0=0:512", "d1=0:2048", "x=0:100000"];

#[test]
fn residue_of_linearized_index() {
    goal("(d0 * 2048 + d1) floordiv 2048", &D, "d0");
    goal("(d0 * 2048 + d1) mod 2048", &D, "d1");
    goal("(d1 + d0 * 2048) floordiv 2048", &D, "d0");
    // Two equally cheap forms exist (`(d0 << 11) + d1 >> 6` and
    // `(d0 << 5) + (d1 >> 6)`); only require that one of them is found.
    let s = simplify_checked("(d0 * 2048 + d1) floordiv 64", &D);
    assert_eq!((s.divmod_after, s.cost_after), (0, 3), "{}", s.output);
}

#[test]
fn nested_mod_is_strength_reduced() {
    goal("d1 mod 2048 mod 64", &D, "d1 & 63");
    goal("d1 floordiv 4 floordiv 16", &D, "d1 >> 6");
}

#[test]
fn recombination() {
    goal("(x floordiv 64) * 64 + x mod 64", &[], "x");
    goal("x mod 64 + (x floordiv 64) * 64", &[], "x");
    goal("64 * (x floordiv 64) + x mod 64", &[], "x");
    goal("((x floordiv 64) mod 32) * 64 + x mod 64", &D, "x & 2047");
    goal("x - (x floordiv 7) * 7", &[], "x mod 7");
}

#[test]
fn bounded_divmod_removal() {
    goal("d0 floordiv 512", &D, "0");
    goal("d0 mod 512", &D, "d0");
    goal("(d0 + 512) mod 512", &D, "d0");
    goal("d0 ceildiv 1024", &["d0=1:512"], "1");
    goal("min(d0, 600)", &D, "d0");
}

#[test]
fn ceildiv_lowering() {
    goal("d0 ceildiv 64", &D, "d0 + 63 >> 6");
}

#[test]
fn non_power_of_two_keeps_division() {
    let s = simplify_checked("(d0 * 96 + d1) floordiv 3", &D);
    assert_eq!(s.output.to_string(), "(d0 << 5) + d1 floordiv 3");
}

/// FBLayout attention: flat output index of the transposed (B, H, S, HD)
/// tensor mapped back to the flat index of the (B, S, D) source, through the
/// reshape (B, S, D) -> (B, S, H, HD) and the transpose. S=512, H=32, HD=64,
/// D=2048, B=2.
#[test]
fn attention_reshape_transpose_chain_has_no_divmod() {
    let flatten_in = IndexMap::parse("(b, s, d) -> (b * 1048576 + s * 2048 + d)").unwrap();
    let reshape = IndexMap::parse("(b, s, h, hd) -> (b, s, h * 64 + hd)").unwrap();
    let transpose = IndexMap::parse("(b, h, s, hd) -> (b, s, h, hd)").unwrap();
    let delin_out = IndexMap::parse(
        "(o) -> (o floordiv 1048576, (o floordiv 32768) mod 32, (o floordiv 64) mod 512, o mod 64)",
    )
    .unwrap();
    let composed = flatten_in
        .compose(&reshape)
        .and_then(|m| m.compose(&transpose))
        .and_then(|m| m.compose(&delin_out))
        .unwrap();
    assert_eq!(composed.dims, ["o"]);
    assert_eq!(composed.count_divmod(), 6);
    let r = ranges(&["o=0:2097152"]);
    let (out, stats) = simplify_map(&composed, &r, &test_limits());
    assert_eq!(stats.divmod_after, 0, "{out}");
    assert!(stats.cost_after < stats.cost_before);
    assert_equivalent(&composed.results[0], &out.results[0], &r);
    // Spot-check against the un-composed chain.
    for o in [0, 1, 63, 64, 32767, 32768, 1048575, 1048576, 2097151] {
        let step = delin_out.eval(&[o]).unwrap();
        let step = transpose.eval(&step).unwrap();
        let step = reshape.eval(&step).unwrap();
        let want = flatten_in.eval(&step).unwrap();
        assert_eq!(out.eval(&[o]), Some(want), "o = {o}");
    }
}

/// Delinearize then re-linearize with the same shape is the identity.
#[test]
fn delinearize_linearize_is_identity() {
    let lin = IndexMap::parse("(b, s, h, hd) -> (b * 1048576 + s * 2048 + h * 64 + hd)").unwrap();
    let delin = IndexMap::parse(
        "(o) -> (o floordiv 1048576, (o floordiv 2048) mod 512, (o floordiv 64) mod 32, o mod 64)",
    )
    .unwrap();
    let composed = lin.compose(&delin).unwrap();
    let r = ranges(&["o=0:2097152"]);
    let (out, stats) = simplify_map(&composed, &r, &test_limits());
    assert_eq!(out.to_string(), "(o) -> (o)", "{stats:?}");
    // And the other way round: linearize then delinearize.
    let back = delin.compose(&lin).unwrap();
    let r = ranges(&["b=0:2", "s=0:512", "h=0:32", "hd=0:64"]);
    let (out, _) = simplify_map(&back, &r, &test_limits());
    assert_eq!(out.to_string(), "(b, s, h, hd) -> (b, s, h, hd)");
}

#[test]
fn json_fields() {
    let s = simplify_checked("(x floordiv 64) * 64 + x mod 64", &[]);
    let v = serde_json::to_value(&s).unwrap();
    let obj = v.as_object().unwrap();
    let keys: Vec<&str> = obj.keys().map(String::as_str).collect();
    assert_eq!(keys.len(), 6, "{keys:?}");
    for k in ["input", "output", "divmod_before", "divmod_after", "cost_before", "cost_after"] {
        assert!(obj.contains_key(k), "{k}");
    }
    assert_eq!(obj["input"], "x floordiv 64 * 64 + x mod 64");
    assert_eq!(obj["output"], "x");
    assert_eq!(obj["divmod_before"], 2);
    assert_eq!(obj["divmod_after"], 0);
    assert_eq!(obj["cost_before"], 85);
    assert_eq!(obj["cost_after"], 0);
}

//! Property tests: random expressions over small-ranged variables simplify
//! to something equal on the whole domain (checked exhaustively); printing
//! round-trips through the parser; the parser never panics.

mod common;

use std::time::Duration;

use common::assert_equivalent;
use fbc_index::{check_refines, simplify, BinOp, Expr, Limits, Ranges};
use proptest::prelude::*;

fn constant() -> impl Strategy<Value = i64> {
    prop_oneof![
        4 => -3i64..=9,
        3 => (0u32..8).prop_map(|k| 1i64 << k),
        2 => prop::sample::select(vec![12i64, 24, 48, 96, 63, 255, 2048, -64]),
        1 => prop::sample::select(vec![i64::MAX, i64::MIN, 1i64 << 62]),
    ]
}

fn expr(vars: &'static [&'static str]) -> impl Strategy<Value = Expr> {
    let leaf = prop_oneof![
        3 => prop::sample::select(vars).prop_map(Expr::var),
        2 => constant().prop_map(Expr::Const),
    ];
    leaf.prop_recursive(5, 40, 2, |inner| {
        prop_oneof![
            8 => (prop::sample::select(BinOp::ALL.to_vec()), inner.clone(), inner.clone())
                .prop_map(|(op, a, b)| Expr::binary(op, a, b)),
            // Divisions by constants are the interesting case: bias towards them.
            6 => (
                prop::sample::select(vec![BinOp::FloorDiv, BinOp::Mod, BinOp::CeilDiv, BinOp::Mul]),
                inner.clone(),
                constant(),
            )
                .prop_map(|(op, a, c)| Expr::binary(op, a, Expr::Const(c))),
            1 => inner.prop_map(Expr::negate),
        ]
    })
}

fn limits() -> Limits {
    Limits {
        node_limit: 5_000,
        iter_limit: 20,
        time_limit: Duration::from_millis(500),
        verify_samples: 0,
    }
}

fn small_ranges() -> Ranges {
    Ranges::from_specs(["x=0:8", "y=-4:4", "z=0:16"]).expect("ranges")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn simplify_is_sound_on_small_domains(e in expr(&["x", "y", "z"])) {
        let r = small_ranges();
        let s = simplify(&e, &r, &limits());
        prop_assert!(s.cost_after <= s.cost_before);
        prop_assert!(
            check_refines(&e, &s.output, &r, 1 << 16).is_ok(),
            "{} => {}: {:?}", e, s.output, check_refines(&e, &s.output, &r, 1 << 16)
        );
    }

    #[test]
    fn simplify_is_sound_on_index_like_domains(e in expr(&["i", "j"])) {
        let r = Ranges::from_specs(["i=0:128", "j=0:64"]).expect("ranges");
        let s = simplify(&e, &r, &limits());
        assert_equivalent(&e, &s.output, &r);
    }

    #[test]
    fn simplify_is_sound_without_ranges(e in expr(&["u", "v"])) {
        let s = simplify(&e, &Ranges::new(), &limits());
        prop_assert!(
            check_refines(&e, &s.output, &Ranges::new(), 4096).is_ok(),
            "{} => {}", e, s.output
        );
    }

    #[test]
    fn display_round_trips(e in expr(&["x", "y", "d0"])) {
        let text = e.to_string();
        prop_assert_eq!(Expr::parse(&text), Ok(e), "{}", text);
    }

    #[test]
    fn parser_never_panics(src in "[a-z0-9 +*&<>()\\-,\\[\\]]{0,60}") {
        let _ = Expr::parse(&src);
        let _ = fbc_index::IndexMap::parse(&src);
    }

    #[test]
    fn parser_never_panics_on_token_soup(
        toks in prop::collection::vec(
            prop::sample::select(vec![
                "x", "1", "99999999999999999999", "-", "+", "*", "(", ")", "floordiv",
                "mod", "ceildiv", "min", "max", ",", "<<", ">>", "&", "->", "[", "]",
            ]),
            0..40,
        )
    ) {
        let src = toks.join(" ");
        let _ = Expr::parse(&src);
        let _ = fbc_index::IndexMap::parse(&src);
    }
}

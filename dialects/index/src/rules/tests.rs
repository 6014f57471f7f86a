//! Per-rule soundness tests.
//!
//! Every rule has a test built from LHS templates whose `#1`, `#2`, `#3`
//! placeholders are filled with random constants (small, negative, powers
//! of two, masks, and `i64` extremes, so that side conditions are both met
//! and violated) and whose variables `x`, `y`, `z` get random small ranges
//! (or none). For each instance the rule is run *alone* on the e-graph; then
//! every e-node in the e-class of every original sub-term is turned back into
//! a term and checked, by exhaustive evaluation over the variables' ranges
//! (sampling when a variable is unbounded), to refine that sub-term. The full
//! simplifier's output is checked the same way. Each rule must fire on at
//! least one instance, and `every_rule_has_a_test` fails if a rule is added
//! without templates.

use std::collections::BTreeSet;

use egg::{Extractor, Id, Language, RecExpr, Runner};

use super::{all, IRewrite};
use crate::analysis::{IndexAnalysis, IndexEGraph};
use crate::cost::CostModel;
use crate::expr::Expr;
use crate::lang::{binop_of, from_rec_expr, to_rec_expr, IndexLang};
use crate::ranges::Ranges;
use crate::simplify::{simplify, Limits};
use crate::verify::{check_refines, SplitMix};

/// Instances tried per template.
const INSTANCES: usize = 40;
/// Points evaluated per check (exhaustive below this domain size).
const POINTS: usize = 1 << 13;

const CONSTANTS: [i64; 26] =
    [1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32, 63, 64, 96, 128, 0, 1, 2, 4, 8, 3, 15, 31, 62, 255];
const NEGATIVE: [i64; 6] = [-1, -2, -3, -4, -8, -64];
const EXTREME: [i64; 6] = [i64::MAX, i64::MIN, i64::MAX - 3, i64::MIN + 1, 1 << 62, -(1 << 40)];
const RANGES: [Option<(i64, i64)>; 10] = [
    Some((0, 8)),
    Some((0, 64)),
    Some((-16, 16)),
    Some((0, 70)),
    Some((5, 37)),
    Some((-40, -1)),
    Some((60, 70)),
    Some((0, 1)),
    Some((-3, 40)),
    None,
];

fn pick<T: Copy>(rng: &mut SplitMix, xs: &[T]) -> T {
    xs[(rng.next_u64() % xs.len() as u64) as usize]
}

fn random_constant(rng: &mut SplitMix) -> i64 {
    match rng.next_u64() % 20 {
        0..=14 => pick(rng, &CONSTANTS),
        15..=17 => pick(rng, &NEGATIVE),
        _ => pick(rng, &EXTREME),
    }
}

fn instantiate(template: &str, rng: &mut SplitMix) -> Option<(Expr, Ranges)> {
    let c1 = random_constant(rng);
    let c2 = random_constant(rng);
    let c3 = random_constant(rng);
    let c12 = c1.checked_mul(c2)?;
    let text = template
        .replace("#12", &format!("({c12})"))
        .replace("#1", &format!("({c1})"))
        .replace("#2", &format!("({c2})"))
        .replace("#3", &format!("({c3})"));
    let expr = Expr::parse(&text).unwrap_or_else(|e| panic!("template `{template}`: {e}"));
    let mut ranges = Ranges::new();
    for v in ["x", "y", "z"] {
        if let Some((lo, hi)) = pick(rng, &RANGES) {
            ranges.insert(v, lo, hi).expect("valid test range");
        }
    }
    Some((expr, ranges))
}

/// Term for one e-node, with children replaced by their cheapest terms.
fn node_term(ex: &Extractor<'_, CostModel, IndexLang, IndexAnalysis>, node: &IndexLang) -> Expr {
    let child = |id: Id| -> Expr {
        from_rec_expr(&ex.find_best(id).1).expect("extracted child is shallow")
    };
    match node {
        IndexLang::Num(c) => Expr::Const(*c),
        IndexLang::Symbol(s) => Expr::Var(s.as_str().to_string()),
        IndexLang::Neg(a) => Expr::negate(child(*a)),
        other => {
            let op = binop_of(other).expect("binary node");
            let [a, b] = other.children() else { panic!("binary node with wrong arity") };
            Expr::binary(op, child(*a), child(*b))
        }
    }
}

/// Runs `rule` alone on `expr` and checks every e-node of the root e-class
/// (children replaced by their cheapest terms) against the input. Returns
/// whether the rule fired and whether the analysis folded the root to a
/// constant (which pre-empts rules that the analysis subsumes).
///
/// Only the root class is checked against the input: rules are directional
/// (`lhs` is refined by `rhs`), so the class of a *sub*-term such as `x` may
/// legitimately gain a less-defined member like `(x + y) - y` once
/// `(x + y) - y => x` fires; the input itself is never such a member.
fn check_instance(rule: &IRewrite, expr: &Expr, ranges: &Ranges) -> (bool, bool) {
    let rec: RecExpr<IndexLang> = to_rec_expr(expr);
    let runner: Runner<IndexLang, IndexAnalysis> = Runner::new(IndexAnalysis::new(ranges))
        .with_expr(&rec)
        .with_iter_limit(3)
        .with_node_limit(5_000)
        .run([rule]);
    let fired = runner.iterations.iter().any(|it| it.applied.contains_key(&rule.name));
    let root = runner.roots[0];
    let folded = runner.egraph[root].data.constant.is_some();
    let ex = Extractor::new(&runner.egraph, CostModel);
    for node in &runner.egraph[root].nodes {
        let term = node_term(&ex, node);
        if let Err(cex) = check_refines(expr, &term, ranges, POINTS) {
            panic!("rule {}: `{expr}` => `{term}` is unsound {cex} (ranges {ranges:?})", rule.name);
        }
    }
    (fired, folded)
}

/// Rules that the analysis pre-empts on their own templates (interval or
/// constant facts fold the matched class to a literal before the rule can
/// match). They stay in the rule set to keep it self-contained; their tests
/// accept "folded" in place of "fired".
const SUBSUMED_BY_ANALYSIS: [&str; 6] = [
    "mul-zero",
    "mod-one",
    "and-zero",
    "floordiv-bounded",
    "ceildiv-bounded",
    "floordiv-mod-vanish",
];

fn check_rule(name: &str, templates: &[&str]) {
    let rule = all().iter().find(|r| r.name.as_str() == name);
    let rule = rule.unwrap_or_else(|| panic!("no rule named {name}"));
    let seed = name.bytes().fold(0xabcdu64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
    let mut rng = SplitMix(seed);
    let limits = Limits { verify_samples: 0, ..Limits::default() };
    let (mut fired, mut folded) = (0, 0);
    for template in templates {
        for _ in 0..INSTANCES {
            let Some((expr, ranges)) = instantiate(template, &mut rng) else { continue };
            let (f, c) = check_instance(rule, &expr, &ranges);
            fired += usize::from(f);
            folded += usize::from(c);
            let out = simplify(&expr, &ranges, &limits).output;
            if let Err(cex) = check_refines(&expr, &out, &ranges, POINTS) {
                panic!("simplify(`{expr}`) = `{out}` is unsound {cex} (ranges {ranges:?})");
            }
        }
    }
    if SUBSUMED_BY_ANALYSIS.contains(&name) {
        assert!(fired + folded > 0, "rule {name}: neither fired nor folded on {templates:?}");
    } else {
        assert!(fired > 0, "rule {name} never fired on its templates {templates:?}");
    }
}

macro_rules! rule_tests {
    ($( $test:ident : $rule:literal => [$($t:literal),+ $(,)?] ),+ $(,)?) => {
        const TESTED: &[&str] = &[$($rule),+];
        $(
            #[test]
            fn $test() {
                check_rule($rule, &[$($t),+]);
            }
        )+
    };
}

rule_tests! {
    // identities
    add_zero: "add-zero" => ["x + 0", "x floordiv #1 + 0"],
    sub_zero: "sub-zero" => ["x - 0"],
    zero_sub: "zero-sub" => ["0 - x", "0 - x * #1"],
    mul_one: "mul-one" => ["x * 1"],
    mul_zero: "mul-zero" => ["x * 0", "x floordiv #1 * 0"],
    floordiv_one: "floordiv-one" => ["x floordiv 1"],
    ceildiv_one: "ceildiv-one" => ["x ceildiv 1"],
    mod_one: "mod-one" => ["x mod 1"],
    floordiv_zero_dividend: "floordiv-zero-dividend" => ["0 floordiv x"],
    ceildiv_zero_dividend: "ceildiv-zero-dividend" => ["0 ceildiv x"],
    mod_zero_dividend: "mod-zero-dividend" => ["0 mod x"],
    floordiv_self: "floordiv-self" => ["x floordiv x", "(x + #1) floordiv (x + #1)"],
    ceildiv_self: "ceildiv-self" => ["x ceildiv x"],
    mod_self: "mod-self" => ["x mod x", "(x * y) mod (x * y)"],
    floordiv_mul_self: "floordiv-mul-self" => ["x * y floordiv y", "x * #1 floordiv #1"],
    mod_mul_self: "mod-mul-self" => ["x * y mod y", "(x + y) * z mod z"],
    shl_zero: "shl-zero" => ["x << 0"],
    shr_zero: "shr-zero" => ["x >> 0"],
    and_zero: "and-zero" => ["x & 0"],
    and_all_ones: "and-all-ones" => ["x & -1"],
    and_self: "and-self" => ["x & x"],
    min_self: "min-self" => ["min(x, x)"],
    max_self: "max-self" => ["max(x, x)"],
    mod_of_multiple: "mod-of-multiple" => ["(x * #1) mod #2", "(x * #1 + y * #2) mod #3"],
    // algebra
    add_comm: "add-comm" => ["x + y", "x * #1 + y"],
    mul_comm: "mul-comm" => ["x * y", "x * #1"],
    and_comm: "and-comm" => ["x & y", "x & #1"],
    add_const_assoc: "add-const-assoc" => ["x + #1 + #2"],
    mul_const_assoc: "mul-const-assoc" => ["x * #1 * #2"],
    add_const_outward: "add-const-outward" => ["x + #1 + y", "x * #2 + #1 + y * #3"],
    add_assoc_shared: "add-assoc-shared" => ["y + x + x * #1", "y + x floordiv #1 + x mod #1"],
    add_assoc_shared_left: "add-assoc-shared-left" => ["x + (x * #1 + y)"],
    add_swap_shared: "add-swap-shared" => ["x + y + x * #1"],
    mul_distribute_const: "mul-distribute-const" => ["(x + y) * #1", "(x + #2) * #1"],
    sub_const_to_add: "sub-const-to-add" => ["x - #1"],
    sub_self: "sub-self" => ["x - x", "x floordiv #1 - x floordiv #1"],
    add_sub_cancel: "add-sub-cancel" => ["x + y - y"],
    sub_add_cancel: "sub-add-cancel" => ["x - y + y"],
    add_neg_to_sub: "add-neg-to-sub" => ["x + -y"],
    neg_neg: "neg-neg" => ["--x"],
    mul_neg_one: "mul-neg-one" => ["x * -1"],
    // bounds
    floordiv_bounded: "floordiv-bounded" => ["x floordiv #1", "(x + #2) floordiv #1"],
    ceildiv_bounded: "ceildiv-bounded" => ["x ceildiv #1", "(x + #2) ceildiv #1"],
    mod_bounded: "mod-bounded" => ["x mod #1", "(x + #2) mod #1"],
    min_left_bounded: "min-left-bounded" => ["min(x, y + #1)"],
    min_right_bounded: "min-right-bounded" => ["min(x + #1, y)"],
    max_left_bounded: "max-left-bounded" => ["max(x, y + #1)"],
    max_right_bounded: "max-right-bounded" => ["max(x + #1, y)"],
    and_mask_bounded: "and-mask-bounded" => ["x & #1", "(x + #2) & #1"],
    // residue
    floordiv_split_left: "floordiv-split-left" => ["(x * #1 + y) floordiv #2"],
    floordiv_split_right: "floordiv-split-right" => ["(y + x * #1) floordiv #2"],
    floordiv_sub_split: "floordiv-sub-split" => ["(y - x * #1) floordiv #2"],
    mod_drop_left: "mod-drop-left" => ["(x * #1 + y) mod #2"],
    mod_drop_right: "mod-drop-right" => ["(y + x * #1) mod #2"],
    mod_sub_drop: "mod-sub-drop" => ["(y - x * #1) mod #2"],
    floordiv_mul_exact: "floordiv-mul-exact" => ["x * #1 floordiv #2", "x * #12 floordiv #1"],
    floordiv_mul_cancel: "floordiv-mul-cancel" => ["x * #1 floordiv #2", "x * #1 floordiv #12"],
    mod_mul_scale: "mod-mul-scale" => ["x * #1 mod #2", "x * #1 mod #12"],
    floordiv_small_addend: "floordiv-small-addend" => ["(x * #1 + y) floordiv #2", "(x * #1 + y) floordiv #12"],
    floordiv_small_addend_rev: "floordiv-small-addend-rev" => ["(y + x * #1) floordiv #2", "(y + x * #1) floordiv #12"],
    mod_small_addend: "mod-small-addend" => ["(x * #1 + y) mod #2", "(x * #1 + y) mod #12"],
    mod_small_addend_rev: "mod-small-addend-rev" => ["(y + x * #1) mod #2", "(y + x * #1) mod #12"],
    // nesting
    floordiv_floordiv: "floordiv-floordiv" => ["x floordiv #1 floordiv #2"],
    mod_mod: "mod-mod" => ["x mod #1 mod #2", "x mod #12 mod #1"],
    floordiv_mod_vanish: "floordiv-mod-vanish" => ["x mod #1 floordiv #2"],
    floordiv_of_mod: "floordiv-of-mod" => ["x mod #1 floordiv #2", "x mod #12 floordiv #1"],
    ceildiv_to_floordiv: "ceildiv-to-floordiv" => ["x ceildiv #1", "(x + #2) ceildiv #1"],
    // recombine
    recombine_divmod: "recombine-divmod" => ["x floordiv #1 * #1 + x mod #1"],
    recombine_divmod_rev: "recombine-divmod-rev" => ["x mod #1 + x floordiv #1 * #1"],
    recombine_scaled: "recombine-scaled" => ["x floordiv #1 * #12 + x mod #1 * #2"],
    recombine_mod: "recombine-mod" => ["x floordiv #1 mod #2 * #1 + x mod #1"],
    recombine_sub_mod: "recombine-sub-mod" => ["x - x floordiv #1 * #1"],
    recombine_sub_floor: "recombine-sub-floor" => ["x - x mod #1"],
    // strength reduction
    floordiv_pow2_to_shr: "floordiv-pow2-to-shr" => ["x floordiv #1", "(x + y) floordiv #1"],
    mod_pow2_to_and: "mod-pow2-to-and" => ["x mod #1", "(x - y) mod #1"],
    mul_pow2_to_shl: "mul-pow2-to-shl" => ["x * #1", "(x + #2) * #1"],
    shr_to_floordiv: "shr-to-floordiv" => ["x >> #1"],
    shl_to_mul: "shl-to-mul" => ["x << #1"],
    and_mask_to_mod: "and-mask-to-mod" => ["x & #1", "(x - y) & #1"],
}

#[test]
fn every_rule_has_a_test() {
    let tested: BTreeSet<&str> = TESTED.iter().copied().collect();
    assert_eq!(tested.len(), TESTED.len(), "a rule is tested twice");
    let names = super::rule_names();
    let defined: BTreeSet<&str> = names.iter().map(String::as_str).collect();
    assert_eq!(defined.len(), names.len(), "duplicate rule names");
    let untested: Vec<_> = defined.difference(&tested).collect();
    assert!(untested.is_empty(), "rules without soundness tests: {untested:?}");
    let unknown: Vec<_> = tested.difference(&defined).collect();
    assert!(unknown.is_empty(), "tests for unknown rules: {unknown:?}");
}

/// Constant folding is done by the analysis: random constant trees must fold
/// to exactly their value, and undefined ones must not fold.
#[test]
fn constant_folding_matches_eval() {
    let mut rng = SplitMix(7);
    let ops = crate::expr::BinOp::ALL;
    for _ in 0..2000 {
        let mut e = Expr::Const(random_constant(&mut rng));
        for _ in 0..(rng.next_u64() % 4 + 1) {
            let op = pick(&mut rng, &ops);
            let c = Expr::Const(random_constant(&mut rng));
            e = if rng.next_u64() % 2 == 0 {
                Expr::binary(op, e, c)
            } else {
                Expr::binary(op, c, e)
            };
            if rng.next_u64() % 5 == 0 {
                e = Expr::negate(e);
            }
        }
        let mut eg = IndexEGraph::new(IndexAnalysis::default());
        let id = eg.add_expr(&to_rec_expr(&e));
        eg.rebuild();
        let want = e.eval(&|_| None);
        assert_eq!(eg[id].data.constant.filter(|_| want.is_some()), want, "{e}");
        if want.is_none() {
            // Undefined expressions may be refined, but simplify must not
            // invent a value where the input has one.
            continue;
        }
        let out = simplify(&e, &Ranges::new(), &Limits::default()).output;
        assert_eq!(out, Expr::Const(want.unwrap_or_default()), "{e}");
    }
}

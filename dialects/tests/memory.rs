//! The memory dialect: types, the scalar expression language (print → parse round trip, errors,
//! evaluation), `Kernel` ↔ attributes, and the verifier rules of every memory op with their
//! exact messages and places.

mod common;

use common::{module_text, only_error, parse};
use fbc_dialects::memory::scalar::{apply_bin, FnEnv};
use fbc_dialects::memory::{
    Combine, Iter, Kernel, MemType, Scalar, ScalarBin, ScalarUn, ScalarValue, StorageKind,
};
use fbc_index::{Expr, IndexMap};
use fbc_ir::{ElemType, OpTraits, Type};
use proptest::prelude::*;

// ----- types -----

fn ty(text: &str) -> Type {
    let m = parse(&module_text(&[text], "")).unwrap_or_else(|d| panic!("{text}: {d:?}"));
    m.value_type(m.funcs[0].args[0]).clone()
}

/// The type as written, without the memory dialect's type check (which `parse` runs on function
/// signatures): for the types that check refuses.
fn unchecked_ty(text: &str) -> Type {
    let src = module_text(&[text], "");
    let ast = fbc_grammar::parse(&src).unwrap_or_else(|d| panic!("{text}: {d:?}"));
    let m = fbc_ir::build_module(&ast, &fbc_ir::OpRegistry::new())
        .unwrap_or_else(|d| panic!("{text}: {d:?}"));
    m.value_type(m.funcs[0].args[0]).clone()
}

#[test]
fn mem_types_read_and_print() {
    let b = MemType::from_type(&ty("!memory.buffer<4096, f32>")).unwrap();
    assert_eq!(b, MemType { elem: ElemType::F32, storage: StorageKind::Buffer { elems: 4096 } });
    assert_eq!(b.to_type().to_string(), "!memory.buffer<4096, f32>");
    assert_eq!((b.elems(), b.bytes(), b.coords()), (4096, 16384, 1));
    let i = MemType::from_type(&ty("!memory.image2d<[16, 64], f32>")).unwrap();
    assert_eq!(i, MemType::image(16, 64));
    assert_eq!(i.to_type().to_string(), "!memory.image2d<[16, 64], f32>");
    assert_eq!((i.elems(), i.coords()), (4096, 3));
    // `WxH` reads the same.
    assert_eq!(MemType::from_type(&ty("!memory.image2d<16x64, f32>")), Some(i));
    assert_eq!(
        MemType::from_type(&ty("!memory.buffer<3, i32>")),
        Some(MemType::buffer(3, ElemType::I32))
    );
    for bad in [
        "!memory.image2d<[16, 64], i32>",
        "!memory.buffer<4, f16>",
        "!memory.buffer<-1, f32>",
        "!memory.image2d<[0, 4], f32>",
        "!memory.image2d<[4], f32>",
        "!memory.texture<4, f32>",
        "tensor<4xf32>",
    ] {
        assert_eq!(MemType::from_type(&unchecked_ty(bad)), None, "{bad}");
        // A function signature with such a type does not parse.
        if bad.starts_with("!memory") {
            assert!(parse(&module_text(&[bad], "")).is_err(), "{bad}");
        }
    }
    assert_eq!(
        MemType::parse_type(&unchecked_ty("!memory.image2d<[16, 64], i32>")).unwrap_err(),
        "the element type of !memory.image2d<[16, 64], i32> must be f32 or f16, found `i32`"
    );
    // f16 images: 2 bytes an element, read and written as f32 values.
    let h = MemType::from_type(&ty("!memory.image2d<[16, 64], f16>")).unwrap();
    assert_eq!(h, MemType::image_f16(16, 64));
    assert_eq!(h.to_type().to_string(), "!memory.image2d<[16, 64], f16>");
    assert_eq!((h.elems(), h.bytes(), i.bytes()), (4096, 8192, 16384));
    assert_eq!((h.value_elem(), h.is_half(), i.is_half()), (ElemType::F32, true, false));
    assert_eq!(i.to_half_image(), h);
    assert_eq!(b.to_half_image(), b, "buffers stay f32");
    assert_eq!(
        MemType::parse_type(&unchecked_ty("!memory.buffer<4, f16>")).unwrap_err(),
        "the element type of !memory.buffer<4, f16> must be f32, i32 or i8, found `f16`"
    );
}

// ----- scalar expressions -----

fn rt(text: &str) -> String {
    let e = Scalar::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
    let printed = e.to_string();
    assert_eq!(Scalar::parse(&printed).unwrap(), e, "{text} → {printed}");
    printed
}

#[test]
fn scalar_printing_is_minimal_and_canonical() {
    assert_eq!(rt("x0*x1"), "x0 * x1");
    assert_eq!(rt("(x0 * x1) + x2"), "x0 * x1 + x2");
    assert_eq!(rt("x0 * (x1 + x2)"), "x0 * (x1 + x2)");
    assert_eq!(rt("x0 - (x1 - x2)"), "x0 - (x1 - x2)");
    assert_eq!(rt("(x0 - x1) - x2"), "x0 - x1 - x2");
    assert_eq!(rt("-(x0 + 1)"), "-(x0 + 1)");
    assert_eq!(rt("- 2"), "-2");
    assert_eq!(rt("-(2)"), "-(2)");
    assert_eq!(rt("-x0 * x1"), "-x0 * x1");
    assert_eq!(rt("x0 * -2.5"), "x0 * -2.5");
    assert_eq!(rt("1e-5 + acc"), "1.0e-5 + acc");
    assert_eq!(rt("max(acc,-inf) + 2"), "max(acc, -inf) + 2");
    // NaN is not equal to itself: compare the printed forms.
    let nan = Scalar::parse("nan - -nan").unwrap();
    assert_eq!(nan.to_string(), "nan - nan");
    assert_eq!(rt("-(inf)"), "-(inf)");
    assert_eq!(rt("x1[x0 * 64 + d1]"), "x1[x0 * 64 + d1]");
    assert_eq!(
        rt("select(d0 < 3 && !(d1 == 0), exp(x0), rsqrt(acc + 1.0e-5))"),
        "select(d0 < 3 && !(d1 == 0), exp(x0), rsqrt(acc + 1.0e-5))"
    );
    assert_eq!(rt("a || b".replace('a', "x0").replace('b', "x1").as_str()), "x0 || x1");
    assert_eq!(rt("(x0 || x1) && x2"), "(x0 || x1) && x2");
    assert_eq!(rt("int(x0) % 4 / 2"), "int(x0) % 4 / 2");
    assert_eq!(rt("float(d0)"), "float(d0)");
    assert_eq!(rt("-9223372036854775808"), "-9223372036854775808");
}

#[test]
fn scalar_parse_errors_have_offsets() {
    let err = |t: &str| Scalar::parse(t).unwrap_err().to_string();
    assert_eq!(err("x0 +"), "expected an expression, found the end (at byte 4)");
    assert_eq!(err("x0 * (x1"), "expected `)` to close `(`, found the end (at byte 8)");
    assert_eq!(err("x0 x1"), "unexpected `x1` after the expression (at byte 3)");
    assert_eq!(
        err("foo(x0)"),
        "unknown name `foo`; expected xK, dK, sK, acc, inf, nan or a call (exp, log, sqrt, rsqrt, \
         tanh, erf, sigmoid, abs, floor, int, float, max, min, select) (at byte 0)"
    );
    assert_eq!(
        err("max(x0)"),
        "expected `,` between the arguments of `max` (it takes 2), found `)` (at byte 6)"
    );
    assert_eq!(err("1.e3"), "expected digits after `.` in a float literal (at byte 2)");
    assert_eq!(
        err("99999999999999999999"),
        "integer literal `99999999999999999999` does not fit in 64 bits (at byte 0)"
    );
    assert_eq!(err("x01"), "`x01`: an index has no leading zeros (at byte 0)");
    assert_eq!(err("2x"), "unexpected `x` in a number (at byte 1)");
    let deep = format!("{}x0{}", "(".repeat(500), ")".repeat(500));
    assert!(err(&deep).starts_with("expression nested deeper than 200 levels"));
    let neg = format!("{}x0", "-".repeat(500));
    assert!(err(&neg).starts_with("expression nested deeper than 200 levels"));
}

#[test]
fn scalar_count_ops() {
    let e = Scalar::parse("exp(x0 - x1) * 2.0 + x2[d0]").unwrap();
    assert_eq!(e.count_ops(), 4);
    assert_eq!(Scalar::parse("x0").unwrap().count_ops(), 0);
    // A convolution's padding test is index arithmetic: the product alone is a flop.
    let conv = Scalar::parse("select(d2 + (d5 + -1) >= 0 && d2 + (d5 + -1) < 64, x0 * x1, 0.0)");
    assert_eq!(conv.unwrap().count_ops(), 1);
    // Arithmetic on a statistic, `acc` and a float literal counts; an offset on dims does not.
    assert_eq!(Scalar::parse("acc * s0 + 1.0 / (2.0 + 3.0)").unwrap().count_ops(), 4);
    assert_eq!(Scalar::parse("x0[d0 * 4 + d1] * 2.0").unwrap().count_ops(), 1);
}

fn eval(text: &str, inputs: &[ScalarValue], dims: &[i64]) -> Result<ScalarValue, String> {
    let e = Scalar::parse(text).unwrap();
    let mut env = FnEnv {
        input: |k: usize| inputs.get(k).copied().ok_or_else(|| format!("no x{k}")),
        load: |k: usize, off: i64| Ok(ScalarValue::Int(k as i64 * 1000 + off)),
        dim: |k: usize| dims.get(k).copied().ok_or_else(|| format!("no d{k}")),
        acc: Some(ScalarValue::F32(0.5)),
    };
    e.eval(&mut env)
}

#[test]
fn scalar_evaluation() {
    use ScalarValue::{Int, F32};
    assert_eq!(eval("x0 * x1 + acc", &[F32(2.0), F32(3.0)], &[]), Ok(F32(6.5)));
    // Integer arithmetic floors; mixed converts to f32.
    assert_eq!(eval("-7 / 2", &[], &[]), Ok(Int(-4)));
    assert_eq!(eval("-7 % 2", &[], &[]), Ok(Int(1)));
    assert_eq!(eval("d0 / 2.0", &[], &[7]), Ok(F32(3.5)));
    assert_eq!(eval("x0[d1 * 4 + 1]", &[], &[0, 3]), Ok(Int(13)));
    assert_eq!(eval("x0 < 1.0 && d0 != 0", &[F32(0.5)], &[2]), Ok(Int(1)));
    assert_eq!(eval("select(d0, 1.0, 2.0)", &[], &[0]), Ok(F32(2.0)));
    assert_eq!(eval("int(-2.7) + int(2.7)", &[], &[]), Ok(Int(0)));
    assert_eq!(eval("sigmoid(0.0)", &[], &[]), Ok(F32(0.5)));
    assert_eq!(eval("1 / 0", &[], &[]), Err("integer division by zero in 1 / 0".into()));
    assert_eq!(eval("x0 % 2.0", &[F32(1.0)], &[]), Err("`%` on f32 values".into()));
    // NaN propagates through max and min.
    let nan = eval("max(nan, 1.0)", &[], &[]).unwrap();
    assert!(matches!(nan, F32(v) if v.is_nan()));
    assert_eq!(apply_bin(ScalarBin::Div, Int(i64::MIN), Int(-1)), Ok(Int(i64::MIN)));
    assert_eq!(apply_bin(ScalarBin::Rem, Int(i64::MIN), Int(-1)), Ok(Int(0)));
}

fn arb_scalar() -> impl Strategy<Value = Scalar> {
    let leaf = prop_oneof![
        (-1000i64..1000).prop_map(Scalar::Int),
        any::<i64>().prop_map(Scalar::Int),
        prop_oneof![
            (-1.0e6f64..1.0e6),
            Just(f64::INFINITY),
            Just(f64::NEG_INFINITY),
            Just(-0.0),
            Just(1.0e-30)
        ]
        .prop_map(Scalar::Float),
        (0usize..4).prop_map(Scalar::In),
        (0usize..4).prop_map(Scalar::Dim),
        Just(Scalar::Acc),
    ];
    leaf.prop_recursive(6, 64, 3, |inner| {
        let un = prop_oneof![
            Just(ScalarUn::Neg),
            Just(ScalarUn::Not),
            Just(ScalarUn::Exp),
            Just(ScalarUn::Rsqrt),
            Just(ScalarUn::Erf),
            Just(ScalarUn::ToInt),
            Just(ScalarUn::ToFloat),
        ];
        let bin = prop_oneof![
            Just(ScalarBin::Add),
            Just(ScalarBin::Sub),
            Just(ScalarBin::Mul),
            Just(ScalarBin::Div),
            Just(ScalarBin::Rem),
            Just(ScalarBin::Max),
            Just(ScalarBin::Min),
            Just(ScalarBin::Lt),
            Just(ScalarBin::Eq),
            Just(ScalarBin::Ne),
            Just(ScalarBin::And),
            Just(ScalarBin::Or),
        ];
        prop_oneof![
            (un, inner.clone()).prop_map(|(u, e)| Scalar::Un(u, Box::new(e))),
            (bin, inner.clone(), inner.clone()).prop_map(|(b, x, y)| Scalar::Bin(
                b,
                Box::new(x),
                Box::new(y)
            )),
            (inner.clone(), inner.clone(), inner.clone()).prop_map(|(c, a, b)| Scalar::Select(
                Box::new(c),
                Box::new(a),
                Box::new(b)
            )),
            ((0usize..3), inner).prop_map(|(k, e)| Scalar::Load(k, Box::new(e))),
        ]
    })
}

proptest! {
    #[test]
    fn scalar_print_parse_round_trips(e in arb_scalar()) {
        let printed = e.to_string();
        let back = Scalar::parse(&printed).map_err(|err| TestCaseError::fail(format!("{printed}: {err}")))?;
        prop_assert_eq!(&back, &e, "printed as {}", printed);
    }

    #[test]
    fn scalar_parse_never_panics(s in "[-+*/%()<>=!&|x0-9d.e ,\\[\\]a-z]{0,40}") {
        let _ = Scalar::parse(&s);
    }
}

// ----- kernels and attributes -----

const MATMUL: &str = "memory.launch %a0, %a1, %a2 {kernel = \"mm\", source = \"tensor.matmul\", \
    domain = [4, 3, 8], iterators = [\"parallel\", \"parallel\", \"reduction\"], \
    maps = [(d0, d1, d2) -> (d0 * 8 + d2), (d0, d1, d2) -> (d2 * 3 + d1), (d0, d1, d2) -> (d0 * 3 + d1)], \
    body = \"x0*x1\", combine = \"add\", epilogue = \"acc+1.0\"}";
const MM_ARGS: [&str; 3] =
    ["!memory.buffer<32, f32>", "!memory.buffer<24, f32>", "!memory.buffer<12, f32>"];

#[test]
fn kernel_from_op_and_back() {
    let m = parse(&module_text(&MM_ARGS, MATMUL)).unwrap_or_else(|d| panic!("{d:?}"));
    let op = m.op(m.funcs[0].body[0]);
    let k = Kernel::from_op(op).unwrap();
    assert_eq!(k.name, "mm");
    assert_eq!(k.source, "tensor.matmul");
    assert_eq!(k.domain, vec![4, 3, 8]);
    assert_eq!(k.iterators, vec![Iter::Parallel, Iter::Parallel, Iter::Reduction]);
    assert_eq!(k.parallel_dims(), 2);
    assert_eq!(k.output(), 2);
    assert_eq!(k.combine, Some(Combine::Add));
    assert_eq!(k.body.to_string(), "x0 * x1");
    assert_eq!(k.epilogue.as_ref().map(ToString::to_string).as_deref(), Some("acc + 1.0"));
    let attrs = k.to_attrs();
    let names: Vec<&str> = attrs.iter().map(|(n, _)| n.as_str()).collect();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    assert_eq!(names, sorted, "canonical order");
    assert_eq!(Kernel::from_attrs(&attrs).unwrap(), k);
    // The op's attributes are the canonical ones, up to the printing of body and epilogue.
    assert_eq!(op.attrs.len(), attrs.len());
    assert!(Kernel::from_op(m.op(m.funcs[0].body[1])).is_err(), "func.return is not a launch");
}

#[test]
fn every_memory_op_is_documented() {
    let ops: Vec<&str> = fbc_dialects::memory::ops().map(|d| d.name).collect();
    assert_eq!(
        ops,
        ["memory.alloc", "memory.dealloc", "memory.upload", "memory.download", "memory.launch"]
    );
    for def in fbc_dialects::memory::ops() {
        assert!(!def.summary.is_empty() && !def.summary.contains('\n'), "summary of {}", def.name);
        assert!(def.doc.contains("**Verifier:**"), "doc of {} lists its rules", def.name);
        assert_eq!(def.class, None, "{}", def.name);
        for a in def.attrs {
            assert!(!a.doc.is_empty(), "attribute {} of {}", a.name, def.name);
            assert!(
                def.doc.contains(&format!("`{}`", a.name)),
                "doc of {} mentions `{}`",
                def.name,
                a.name
            );
        }
    }
}

#[test]
fn memory_ops_are_not_pure() {
    let r = common::registry();
    for name in
        ["memory.alloc", "memory.dealloc", "memory.upload", "memory.download", "memory.launch"]
    {
        let d = r.get(name).unwrap_or_else(|| panic!("{name} is not registered"));
        let OpTraits { pure, terminator, .. } = d.traits;
        assert!(!pure && !terminator, "{name}");
    }
}

/// The one error of `body` on a function with `args`: (message, label).
fn err(args: &[&str], body: &str) -> (String, Option<String>) {
    let d = only_error(&module_text(args, body));
    (d.message, d.label)
}

fn launch_err(args: &[&str], attrs: &str) -> (String, Option<String>) {
    let ops: Vec<String> = (0..args.len()).map(|i| format!("%a{i}")).collect();
    // With the signature written, the verifier reports at the attribute (building without one
    // reports at the op, while inferring its results).
    err(
        args,
        &format!("memory.launch {} {{{attrs}}} : ({}) -> ()", ops.join(", "), args.join(", ")),
    )
}

fn at(attr: &str) -> Option<String> {
    Some(format!("attribute `{attr}` of memory.launch"))
}

const B4: &str = "!memory.buffer<4, f32>";

#[test]
fn launch_verifier_rules() {
    let ok = "kernel = \"k\", domain = [4], iterators = [\"parallel\"], maps = [(d0) -> (d0), (d0) -> (d0)], body = \"x0\"";
    assert!(parse(&module_text(&[B4, B4], &format!("memory.launch %a0, %a1 {{{ok}}}"))).is_ok());
    let cases: &[(&str, &str, &str)] = &[
        (
            "kernel = \"k\", domain = [4], iterators = [\"parallel\"], maps = [(d0) -> (d0)], body = \"x0\"",
            "`maps` has 1 entries, but the launch has 2 operands — `maps` of memory.launch",
            "maps",
        ),
        (
            "kernel = \"k\", domain = [4, 2], iterators = [\"reduction\", \"parallel\"], maps = [(d0, d1) -> (d0), (d0, d1) -> (d0)], body = \"x0\", combine = \"add\"",
            "every \"parallel\" iterator must come before every \"reduction\", \"row\" or \"key\" one — `iterators` of memory.launch",
            "iterators",
        ),
        (
            "kernel = \"k\", domain = [4, 2], iterators = [\"parallel\", \"reduction\"], maps = [(d0, d1) -> (d0), (d0, d1) -> (d0)], body = \"x0\"",
            "the domain has reduction dimensions, so `combine` (\"add\" or \"max\") is required",
            "",
        ),
        (
            "kernel = \"k\", domain = [4], iterators = [\"parallel\"], maps = [(d0) -> (d0), (d0) -> (d0)], body = \"x0\", combine = \"add\"",
            "`combine` is only allowed when the domain has reduction dimensions — `combine` of memory.launch",
            "combine",
        ),
        (
            "kernel = \"k\", domain = [4], iterators = [\"parallel\"], maps = [(d0) -> (d0), (d0, d1) -> (d0)], body = \"x0\"",
            "map 1 has 2 dimensions, but the domain has 1 — `maps` of memory.launch",
            "maps",
        ),
        (
            "kernel = \"k\", domain = [4], iterators = [\"parallel\"], maps = [(d0) -> (d0, 0), (d0) -> (d0)], body = \"x0\"",
            "map 0 has 2 results, but operand 0 (!memory.buffer<4, f32>) needs 1 (the element offset) for a buffer — `maps` of memory.launch",
            "maps",
        ),
        (
            "kernel = \"k\", domain = [4], iterators = [\"parallel\"], maps = [(d0) -> (d0), (d0) -> (d0)], body = \"x0 +\"",
            "`body` does not parse: expected an expression, found the end (at byte 4): \"x0 +\" — `body` of memory.launch",
            "body",
        ),
        (
            "kernel = \"k\", domain = [4], iterators = [\"parallel\"], maps = [(d0) -> (d0), (d0) -> (d0)], body = \"x2\"",
            "`x2` refers to operand 2, but the launch has 2 operands — `body` of memory.launch",
            "body",
        ),
        (
            "kernel = \"k\", domain = [4], iterators = [\"parallel\"], maps = [(d0) -> (d0), (d0) -> (d0)], body = \"acc\"",
            "`acc` is only allowed in an epilogue — `body` of memory.launch",
            "body",
        ),
        (
            "kernel = \"k\", domain = [4], iterators = [\"parallel\"], maps = [(d0) -> (d0), (d0) -> (d0)], body = \"d1\"",
            "`d1` is not a domain dimension (the domain has 1) — `body` of memory.launch",
            "body",
        ),
        (
            "kernel = \"k\", domain = [4], iterators = [\"parallel\"], maps = [(d0) -> (d0), (d0) -> (d0)], body = \"x0[1.0]\"",
            "the element offset of `x0[..]` must be an integer, found an f32 expression `1.0` — `body` of memory.launch",
            "body",
        ),
        (
            "kernel = \"k\", domain = [4, 2], iterators = [\"parallel\", \"reduction\"], maps = [(d0, d1) -> (d0 * 2 + d1), (d0, d1) -> (d0)], body = \"x0\", combine = \"add\", epilogue = \"acc * x0\"",
            "the epilogue reads `x0`, whose map uses the reduction dimension `d1`; it runs once per parallel point — `epilogue` of memory.launch",
            "epilogue",
        ),
        (
            "kernel = \"k\", domain = [4, 2], iterators = [\"parallel\", \"reduction\"], maps = [(d0, d1) -> (d0 * 2 + d1), (d0, d1) -> (d0)], body = \"x0\", combine = \"add\", epilogue = \"acc + float(d1)\"",
            "the epilogue reads `d1`, a reduction dimension; it runs once per parallel point — `epilogue` of memory.launch",
            "epilogue",
        ),
        (
            "kernel = \"k\", domain = [4], iterators = [\"parallel\"], maps = [(d0) -> (d0), (d0) -> (d0)], body = \"x0\", guard = (d0) -> (d0)",
            "`guard` needs `guard_bounds` — `guard` of memory.launch",
            "guard",
        ),
        (
            "kernel = \"k\", domain = [4], iterators = [\"parallel\"], maps = [(d0) -> (d0), (d0) -> (d0)], body = \"x0\", guard = (d0) -> (d0), guard_bounds = [3, 4]",
            "`guard_bounds` has 2 entries, but the `guard` map has 1 results — `guard_bounds` of memory.launch",
            "guard_bounds",
        ),
        (
            "kernel = \"k\", domain = [4], iterators = [\"parallel\"], maps = [(d0) -> (d0), (d0) -> (d0)], body = \"x0 % 2\"",
            "`%` needs two integer operands, found `x0 % 2` — `body` of memory.launch",
            "body",
        ),
        // Row kernels: statistics exactly with row dimensions, read in order.
        (
            "kernel = \"k\", domain = [2, 2], iterators = [\"parallel\", \"row\"], maps = [(d0, d1) -> (d0 * 2 + d1), (d0, d1) -> (d0 * 2 + d1)], body = \"x0\"",
            "the domain has row dimensions, so `stats` (at least one statistic) is required",
            "",
        ),
        (
            "kernel = \"k\", domain = [4], iterators = [\"parallel\"], maps = [(d0) -> (d0), (d0) -> (d0)], body = \"x0\", stats = [\"max: x0\"]",
            "`stats` is only allowed when the domain has row or reduction dimensions — `stats` of memory.launch",
            "stats",
        ),
        (
            "kernel = \"k\", domain = [2, 2], iterators = [\"row\", \"reduction\"], maps = [(d0, d1) -> (d0 * 2 + d1), (d0, d1) -> (d0)], body = \"x0\", combine = \"add\", stats = [\"max: x0\"]",
            "a launch has \"reduction\" or \"row\" iterators, not both — `iterators` of memory.launch",
            "iterators",
        ),
        (
            "kernel = \"k\", domain = [2, 2], iterators = [\"parallel\", \"row\"], maps = [(d0, d1) -> (d0 * 2 + d1), (d0, d1) -> (d0 * 2 + d1)], body = \"x0\", stats = [\"max: x0 + s0\"]",
            "statistic 0: `s0`: the first statistic reads no statistic — `stats` of memory.launch",
            "stats",
        ),
        (
            "kernel = \"k\", domain = [2, 2], iterators = [\"parallel\", \"row\"], maps = [(d0, d1) -> (d0 * 2 + d1), (d0, d1) -> (d0 * 2 + d1)], body = \"x0\", stats = [\"max: x0\", \"add: x0 - s1\"]",
            "statistic 1: `s1` is not computed before statistic 1 (it may read s0 to s0) — `stats` of memory.launch",
            "stats",
        ),
        (
            "kernel = \"k\", domain = [2, 2], iterators = [\"parallel\", \"row\"], maps = [(d0, d1) -> (d0 * 2 + d1), (d0, d1) -> (d0 * 2 + d1)], body = \"x0 - s1\", stats = [\"max: x0\"]",
            "`s1` refers to statistic 1, but the launch has 1 — `body` of memory.launch",
            "body",
        ),
        (
            "kernel = \"k\", domain = [4], iterators = [\"parallel\"], maps = [(d0) -> (d0), (d0) -> (d0)], body = \"x0 - s0\"",
            "`s0` reads a statistic, but the launch has no `stats` — `body` of memory.launch",
            "body",
        ),
        (
            "kernel = \"k\", domain = [2, 2], iterators = [\"parallel\", \"row\"], maps = [(d0, d1) -> (d0 * 2 + d1), (d0, d1) -> (d0 * 2 + d1)], body = \"x0\", stats = [\"sum: x0\"]",
            "statistic 0: the combine of a statistic must be `add` or `max`, found `sum` — `stats` of memory.launch",
            "stats",
        ),
        (
            "kernel = \"k\", domain = [2, 2], iterators = [\"parallel\", \"row\"], maps = [(d0, d1) -> (d0 * 2 + d1), (d0, d1) -> (d0 * 2 + d1)], body = \"x0\", stats = [\"add: x0; acc * x0\"]",
            "statistic 0: the epilogue reads `x0`, whose map uses the reduction dimension `d1`; it runs once per parallel point — `stats` of memory.launch",
            "stats",
        ),
        // A reduction's statistics: combined beside the body, read by epilogues only.
        (
            "kernel = \"k\", domain = [2, 2], iterators = [\"parallel\", \"reduction\"], maps = [(d0, d1) -> (d0 * 2 + d1), (d0, d1) -> (d0)], body = \"x0 * s0\", combine = \"add\", stats = [\"add: x0 * x0\"]",
            "`s0`: the body of a reduction is combined before its statistics are known; only the epilogue reads them — `body` of memory.launch",
            "body",
        ),
        (
            "kernel = \"k\", domain = [2, 2], iterators = [\"parallel\", \"reduction\"], maps = [(d0, d1) -> (d0 * 2 + d1), (d0, d1) -> (d0)], body = \"x0\", combine = \"add\", stats = [\"add: x0 * x0\", \"max: x0 - s0\"]",
            "statistic 1: `s0`: a statistic of a reduction is combined beside the others; only statistic epilogues read earlier statistics — `stats` of memory.launch",
            "stats",
        ),
        (
            "kernel = \"k\", domain = [2, 2], iterators = [\"parallel\", \"reduction\"], maps = [(d0, d1) -> (d0 * 2 + d1), (d0, d1) -> (d0)], body = \"x0\", combine = \"add\", stats = [\"add: x0 * x0\"], epilogue = \"acc * s1\"",
            "`s1` refers to statistic 1, but the launch has 1 — `epilogue` of memory.launch",
            "epilogue",
        ),
        // Symbols: [operand, lo, hi] each, an i32 input, as many in every map that has any.
        (
            "kernel = \"k\", domain = [4], iterators = [\"parallel\"], maps = [(d0) -> (d0), (d0)[s0] -> (d0 + s0)], body = \"x0\", symbols = [[0, 3, 1]]",
            "entry 0 of `symbols` must be [operand, lo, hi] with operand ≥ 0 and 0 ≤ lo ≤ hi, found `[0, 3, 1]` — `symbols` of memory.launch",
            "symbols",
        ),
        (
            "kernel = \"k\", domain = [4], iterators = [\"parallel\"], maps = [(d0) -> (d0), (d0)[s0] -> (d0 + s0)], body = \"x0\", symbols = [[1, 0, 0]]",
            "symbol 0 reads operand 1, but the launch has 1 inputs — `symbols` of memory.launch",
            "symbols",
        ),
        (
            "kernel = \"k\", domain = [4], iterators = [\"parallel\"], maps = [(d0) -> (d0), (d0)[s0, s1] -> (d0 + s0)], body = \"x0\", symbols = [[0, 0, 0]]",
            "map 1 has 2 symbols, but the launch binds 1 (`symbols`) — `maps` of memory.launch",
            "maps",
        ),
        (
            "kernel = \"k\", domain = [4], iterators = [\"parallel\"], maps = [(d0) -> (d0), (d0)[s0] -> (d0 + s0)], body = \"x0\", symbols = [[0, 0, 0]]",
            "symbol 0 reads element 0 of operand 0, which must be an i32 buffer of at least one element, found !memory.buffer<4, f32> — `symbols` of memory.launch",
            "symbols",
        ),
        (
            "kernel = \"k\", domain = [2, 2], iterators = [\"parallel\", \"row\"], maps = [(d0, d1) -> (d0 * 2 + d1), (d0, d1) -> (d0 * 2 + d1)], body = \"x0\", stats = [\"add: x0\"], epilogue = \"acc\"",
            "a row kernel has no `epilogue`: its body is computed at every point, after the statistics — `epilogue` of memory.launch",
            "epilogue",
        ),
    ];
    let select = launch_err(
        &[B4, B4],
        "kernel = \"k\", domain = [4], iterators = [\"parallel\"], maps = [(d0) -> (d0), (d0) -> (d0)], body = \"select(d0 < 2, x0, 1)\"",
    );
    assert_eq!(
        select,
        (
            "the branches of `select` must have the same kind, found f32 and integer in `select(d0 < 2, x0, 1)` — `body` of memory.launch".to_string(),
            at("body")
        )
    );
    for (attrs, msg, attr) in cases {
        // An absent attribute's error is at the op.
        let place = if attr.is_empty() { None } else { at(attr) };
        assert_eq!(launch_err(&[B4, B4], attrs), (msg.to_string(), place), "{attrs}");
    }
}

#[test]
fn launch_storage_rules() {
    let img = "!memory.image2d<[2, 3], f32>";
    // An image output: the channel is the last parallel dimension, extent 4, third map result.
    let good = "kernel = \"k\", domain = [3, 2, 4], iterators = [\"parallel\", \"parallel\", \"parallel\"], maps = [(a, b, c) -> (b, a, c), (a, b, c) -> (b, a, c)], body = \"x0\"";
    assert!(parse(&module_text(&[img, img], &format!("memory.launch %a0, %a1 {{{good}}}"))).is_ok());
    assert_eq!(
        launch_err(&[img, img], "kernel = \"k\", domain = [3, 2, 4], iterators = [\"parallel\", \"parallel\", \"parallel\"], maps = [(a, b, c) -> (b, a, c), (a, b, c) -> (b, a, 0)], body = \"x0\""),
        ("the output (operand 1) is an image, so the channel result of its map must be `c` (the last parallel dimension), found `0` — `maps` of memory.launch".into(), at("maps"))
    );
    assert_eq!(
        launch_err(&[img, img], "kernel = \"k\", domain = [3, 8], iterators = [\"parallel\", \"parallel\"], maps = [(a, b) -> (b, a, 0), (a, b) -> (b, a, 0)], body = \"x0\""),
        ("the output (operand 1) is an image, so the last parallel dimension must be the channel, of extent 4; the domain is [3, 8] with 2 parallel dimension(s) — `domain` of memory.launch".into(), at("domain"))
    );
    assert_eq!(
        launch_err(&[img, B4], "kernel = \"k\", domain = [4], iterators = [\"parallel\"], maps = [(d0) -> (0, 0, 0), (d0) -> (d0)], body = \"x0[d0]\""),
        ("`x0[..]` loads from operand 0, an image; only buffers can be loaded at an offset — `body` of memory.launch".into(), at("body"))
    );
    assert_eq!(
        launch_err(&["!memory.buffer<4, i32>"], "kernel = \"k\", domain = [4], iterators = [\"parallel\"], maps = [(d0) -> (d0)], body = \"1.0\""),
        ("the output (operand 0, !memory.buffer<4, i32>) holds integers, but the kernel computes f32 values (use int(..)) — `body` of memory.launch".into(), at("body"))
    );
    assert_eq!(
        launch_err(&["tensor<4xf32>", B4], "kernel = \"k\", domain = [4], iterators = [\"parallel\"], maps = [(d0) -> (d0), (d0) -> (d0)], body = \"x0\""),
        ("expected a memory type (!memory.buffer or !memory.image2d), found tensor<4xf32> — operand 0 of memory.launch".into(), Some("operand 0 of memory.launch".into()))
    );
}

#[test]
fn upload_and_download_rules() {
    let t = "tensor<6x6xf32>";
    let rt = "#layout.rtile<tile = [4, 4], horizontal = 1, pad = [2, 2]>";
    // Inferred: linear → buffer, R-Tile → image, R-Tile with storage = "buffer" → texel array.
    for (layout, want) in [
        ("#layout.linear", "!memory.buffer<36, f32>"),
        (rt, "!memory.image2d<[2, 8], f32>"),
        (
            "#layout.rtile<tile = [4, 4], horizontal = 1, pad = [2, 2], storage = \"buffer\">",
            "!memory.buffer<64, f32>",
        ),
    ] {
        assert_eq!(common::infer(&[t], &format!("memory.upload %a0 {{layout = {layout}}}")), want);
    }
    // An image too large for the device may be written as its texel array in a buffer.
    let text = module_text(
        &[t],
        &format!("%m = memory.upload %a0 {{layout = {rt}}} : ({t}) -> !memory.buffer<64, f32>"),
    );
    assert!(parse(&text).is_ok());
    let e = err(
        &[t],
        &format!(
            "%m = memory.upload %a0 {{layout = {rt}}} : ({t}) -> !memory.image2d<[8, 2], f32>"
        ),
    );
    assert_eq!(e.0, format!("tensor<6x6xf32> in {} needs an image of [2, 8] texels, found !memory.image2d<[8, 2], f32> — `layout` of memory.upload", fbc_dialects::layout::Layout::from_attr(&rtile_attr(rt)).unwrap()));
    assert_eq!(e.1.as_deref(), Some("attribute `layout` of memory.upload"));
    let e = err(
        &["!memory.buffer<35, f32>"],
        "%t = memory.download %a0 {layout = #layout.linear} : (!memory.buffer<35, f32>) -> tensor<6x6xf32>",
    );
    assert_eq!(e.0, "tensor<6x6xf32> in #layout.linear needs a buffer of 36 elements, found !memory.buffer<35, f32> — `layout` of memory.download");
    let e = err(&["!memory.buffer<36, f32>"], "%t = memory.download %a0 {layout = #layout.linear}");
    assert_eq!(e.0, "the result type of `memory.download` cannot be inferred; write the signature (and the result types cannot be inferred)");
    let e = err(&[], "%m = memory.alloc");
    assert_eq!(e.0, "the result type of `memory.alloc` cannot be inferred; write the signature (and the result types cannot be inferred)");
    let e = err(&["tensor<4xf16>"], "%m = memory.upload %a0 {layout = #layout.linear}");
    assert_eq!(e.0, "memory holds f32, i32 or i8 elements, found tensor<4xf16> — `layout` of memory.upload (and the result types cannot be inferred)");
    let e = err(&["tensor<4xi32>"], "%m = memory.upload %a0 {layout = #layout.linear} : (tensor<4xi32>) -> !memory.buffer<4, f32>");
    assert_eq!(e.0, "!memory.buffer<4, f32> holds f32, but the tensor is tensor<4xi32> — `layout` of memory.upload");
    let e = err(&["tensor<4xf32>"], "memory.dealloc %a0 : (tensor<4xf32>) -> ()");
    assert_eq!(e.0, "expected a memory type (!memory.buffer or !memory.image2d), found tensor<4xf32> — operand 0 of memory.dealloc");
    let e = err(&[], "%m = memory.alloc {slot = -1} : () -> !memory.buffer<4, f32>");
    assert_eq!(
        (e.0.as_str(), e.1.as_deref()),
        ("`slot` must be ≥ 0, found -1", Some("attribute `slot` of memory.alloc"))
    );
    let e = err(
        &["tensor<4xf32>"],
        "%m = memory.upload %a0 {layout = #layout.linear, slot = -2} : (tensor<4xf32>) -> !memory.buffer<4, f32>",
    );
    assert_eq!(
        (e.0.as_str(), e.1.as_deref()),
        ("`slot` must be ≥ 0, found -2", Some("attribute `slot` of memory.upload"))
    );
}

/// `rows = [start, count]`: the storage holds that row tile of the operand, whose type the
/// layout and the result type describe; a range outside axis 0 is the attribute's error.
#[test]
fn upload_of_a_row_tile() {
    let t = "tensor<6x5xf32>";
    let up = |rows: &str| format!("memory.upload %a0 {{layout = #layout.linear, rows = {rows}}}");
    assert_eq!(common::infer(&[t], &up("[2, 3]")), "!memory.buffer<15, f32>");
    assert_eq!(common::infer(&[t], &up("[0, 6]")), "!memory.buffer<30, f32>");
    let rt = "#layout.rtile<tile = [4, 4], horizontal = 1, pad = [0, 3]>";
    assert_eq!(
        common::infer(&[t], &format!("memory.upload %a0 {{layout = {rt}, rows = [2, 4]}}")),
        "!memory.image2d<[2, 4], f32>"
    );
    // The whole operand's storage is not the tile's.
    let e = err(&[t], &format!("%m = {} : ({t}) -> !memory.buffer<30, f32>", up("[2, 3]")));
    assert_eq!(e.0, "tensor<3x5xf32> in #layout.linear needs a buffer of 15 elements, found !memory.buffer<30, f32> — `layout` of memory.upload");
    for (rows, msg) in [
        (
            "[4, 3]",
            "rows 4..7 are not a non-empty range of the operand's 6 — `rows` of memory.upload",
        ),
        (
            "[1, 0]",
            "rows 1..1 are not a non-empty range of the operand's 6 — `rows` of memory.upload",
        ),
        ("[-1, 2]", "start and count must be ≥ 0, found [-1, 2] — `rows` of memory.upload"),
        ("[1, 2, 3]", "expected [start, count], found [1, 2, 3] — `rows` of memory.upload"),
    ] {
        let e = err(&[t], &format!("%m = {} : ({t}) -> !memory.buffer<15, f32>", up(rows)));
        assert_eq!(e.0, msg, "{rows}");
        assert_eq!(e.1.as_deref(), Some("attribute `rows` of memory.upload"), "{rows}");
    }
    let e = err(
        &["tensor<f32>"],
        &format!("%m = {} : (tensor<f32>) -> !memory.buffer<1, f32>", up("[0, 1]")),
    );
    assert_eq!(e.0, "the operand tensor<f32> has no rows — `rows` of memory.upload");
}

fn rtile_attr(text: &str) -> fbc_ir::Attr {
    let m = parse(&module_text(
        &["tensor<6x6xf32>"],
        &format!("%r = layout.assign %a0 {{layout = {text}}}"),
    ))
    .unwrap();
    m.op(m.funcs[0].body[0]).attr("layout").cloned().unwrap()
}

// ----- robustness -----

fn any_mem_type() -> impl Strategy<Value = Type> {
    use fbc_ir::types::DialectType;
    use fbc_ir::Attr;
    let n = prop_oneof![Just(0i64), Just(4), Just(-1), Just(i64::MAX), any::<i64>()];
    let elem = prop_oneof![Just(ElemType::F32), Just(ElemType::I32), Just(ElemType::F16)];
    prop_oneof![
        (n.clone(), elem.clone()).prop_map(|(n, e)| (
            "buffer",
            vec![(None, Attr::Int(n)), (None, Attr::Type(Type::Scalar(e)))]
        )),
        (n.clone(), n, elem).prop_map(|(w, h, e)| (
            "image2d",
            vec![(None, Attr::ints([w, h])), (None, Attr::Type(Type::Scalar(e)))]
        )),
        Just(("image2d", vec![])),
    ]
    .prop_map(|(name, params)| {
        Type::Dialect(Box::new(DialectType { dialect: "memory".into(), name: name.into(), params }))
    })
    .boxed()
    .prop_union(
        prop_oneof![Just(vec![6u64, 6]), Just(vec![]), Just(vec![u64::MAX, 2])]
            .prop_map(|s| Type::tensor(s, ElemType::F32))
            .boxed(),
    )
}

fn any_launch_attr() -> impl Strategy<Value = (String, fbc_ir::Attr)> {
    use fbc_ir::Attr;
    prop_oneof![
        Just(("domain".to_string(), Attr::ints([4, 2]))),
        Just(("domain".to_string(), Attr::ints([i64::MAX, i64::MAX]))),
        Just(("domain".to_string(), Attr::ints([-1]))),
        Just((
            "iterators".to_string(),
            Attr::Array(vec![Attr::Str("parallel".into()), Attr::Str("reduction".into())])
        )),
        Just(("iterators".to_string(), Attr::Array(vec![Attr::Int(3)]))),
        prop_oneof![Just("x0 * x1"), Just("acc"), Just("x9[d0]"), Just("(("), Just("d7")]
            .prop_map(|b| ("body".to_string(), Attr::Str(b.into()))),
        prop_oneof![Just("add"), Just("max"), Just("min")]
            .prop_map(|c| ("combine".to_string(), Attr::Str(c.into()))),
        Just(("epilogue".to_string(), Attr::Str("acc + x0".into()))),
        Just(("kernel".to_string(), Attr::Str("k".into()))),
        Just(("guard_bounds".to_string(), Attr::ints([3]))),
        Just(("layout".to_string(), Attr::Int(1))),
        Just(("slot".to_string(), Attr::Int(-5))),
        proptest::collection::vec(
            prop_oneof![
                Just(vec![Expr::Var("d0".into())]),
                Just(vec![Expr::Var("d1".into()), Expr::Var("d0".into()), Expr::Const(0)]),
                Just(vec![Expr::Var("zz".into())]),
            ],
            0..4
        )
        .prop_map(|ms| {
            let dims = vec!["d0".to_string(), "d1".to_string()];
            let maps = ms
                .into_iter()
                .map(|results| Attr::Map(IndexMap { dims: dims.clone(), symbols: vec![], results }))
                .collect();
            ("maps".to_string(), Attr::Array(maps))
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// No memory op's verifier panics, whatever its operand types, result types and attributes.
    #[test]
    fn no_memory_verifier_panics(
        operands in proptest::collection::vec(any_mem_type(), 0..4),
        results in proptest::collection::vec(any_mem_type(), 0..2),
        attrs in proptest::collection::vec(any_launch_attr(), 0..8),
    ) {
        let mut attrs: Vec<(String, fbc_ir::Attr)> = attrs;
        attrs.sort_by(|a, b| a.0.cmp(&b.0));
        attrs.dedup_by(|a, b| a.0 == b.0);
        for def in fbc_dialects::memory::ops() {
            let mut m = fbc_ir::Module::new(None);
            let view = fbc_ir::OpView {
                module: &m,
                op: fbc_ir::Op(u32::MAX),
                operand_types: &operands,
                attrs: &attrs,
                func: fbc_ir::FuncId(0),
            };
            let _ = (def.infer)(&view);
            let f = m.add_func("f", operands.clone(), vec![]);
            let args = m.func(f).args.clone();
            m.append_op(f, def, &args, attrs.clone(), results.clone(), Default::default());
            let ret = common::registry().expect("func.return");
            m.append_op(f, ret, &[], vec![], vec![], Default::default());
            let _ = fbc_ir::verify_module(&m);
        }
    }
}

//! Every accepted syntax form, checked through its sketch, plus spans on a few.

use super::{attr, ok, op, sketch};
use crate::ast::*;
use crate::diag::Span;

const ATTENTION: &str = r#"// line comment
module @attention attributes {fbc.version = 1} {
  func.func @forward(%x: tensor<1x512x2048xf32>, %wq: tensor<2048x2048xf32>) -> (tensor<1x32x512x64xf32>) {
    %q = tensor.matmul %x, %wq : (tensor<1x512x2048xf32>, tensor<2048x2048xf32>) -> tensor<1x512x2048xf32>
    %1 = tensor.reshape %q {shape = [1, 512, 32, 64]} : (tensor<1x512x2048xf32>) -> tensor<1x512x32x64xf32> loc("a.py":3:7)
    %a, %b = tensor.foo %1 {m = #layout.rtile<tile = [4, 4], order = "row", map = (d0, d1) -> (d0 floordiv 4, d1 mod 64)>, t = !memory.image2d<64x64, f32>, s = @other, f = -1.5e-3, on = true, u}
    func.return %2 : tensor<1x32x512x64xf32>
  }
  func.func @g() -> tensor<f32> {
  }
}
"#;

#[test]
fn the_spec_example() {
    let m = ok(ATTENTION);
    let expected = r#"module @attention attributes {fbc.version = 1} {
  func.func @forward(%x: tensor<1x512x2048xf32>, %wq: tensor<2048x2048xf32>) -> (tensor<1x32x512x64xf32>) {
    %q = tensor.matmul %x, %wq : (tensor<1x512x2048xf32>, tensor<2048x2048xf32>) -> (tensor<1x512x2048xf32>)
    %1 = tensor.reshape %q {shape = [1, 512, 32, 64]} : (tensor<1x512x2048xf32>) -> (tensor<1x512x32x64xf32>) loc("a.py":3:7)
    %a, %b = tensor.foo %1 {m = #layout.rtile<tile = [4, 4], order = "row", map = (d0, d1) -> ((d0 floordiv 4), (d1 mod 64))>, t = !memory.image2d<[64, 64], f32>, s = @other, f = -0.0015, on = true, u}
    func.return %2 : (tensor<1x32x512x64xf32>) -> ()
  }
  func.func @g() -> (tensor<f32>) {
  }
}"#;
    assert_eq!(sketch::module(&m), expected);
}

#[test]
fn sketches_reparse_to_themselves() {
    let first = sketch::module(&ok(ATTENTION));
    // `64x64` came back as `[64, 64]`, which is fine as a parameter value too.
    assert_eq!(sketch::module(&ok(&first)), first);
}

#[test]
fn spans_point_at_the_text() {
    let m = ok(ATTENTION);
    let text = |s: Span| &ATTENTION[s.start as usize..s.end as usize];
    assert_eq!(text(m.span), &ATTENTION[ATTENTION.find("module").unwrap()..ATTENTION.len() - 1]);
    assert_eq!(text(m.name.as_ref().unwrap().span), "@attention");
    let f = &m.funcs[0];
    assert!(text(f.span).starts_with("func.func @forward(") && text(f.span).ends_with('}'));
    assert_eq!(text(f.args[1].span), "%wq: tensor<2048x2048xf32>");
    assert_eq!(text(f.args[1].name.span), "%wq");
    assert_eq!(text(f.args[1].ty.span), "tensor<2048x2048xf32>");
    let reshape = &f.body[1];
    assert_eq!(
        text(reshape.span),
        "%1 = tensor.reshape %q {shape = [1, 512, 32, 64]} : (tensor<1x512x2048xf32>) -> \
         tensor<1x512x32x64xf32> loc(\"a.py\":3:7)"
    );
    assert_eq!(text(reshape.name.span), "tensor.reshape");
    assert_eq!(text(reshape.operands[0].span), "%q");
    assert_eq!(text(reshape.attrs[0].span), "shape = [1, 512, 32, 64]");
    assert_eq!(text(reshape.attrs[0].value.span), "[1, 512, 32, 64]");
    let sig = reshape.sig.as_ref().unwrap();
    assert_eq!(text(sig.span), "(tensor<1x512x2048xf32>) -> tensor<1x512x32x64xf32>");
    assert_eq!(text(reshape.loc.as_ref().unwrap().span), "loc(\"a.py\":3:7)");
    let foo = &f.body[2];
    assert_eq!(text(foo.results[1].span), "%b");
    let AttrKind::Dialect { params, .. } = &foo.attrs[0].value.kind else { panic!() };
    assert_eq!(text(params[2].span), "map = (d0, d1) -> (d0 floordiv 4, d1 mod 64)");
    let AttrKind::Map(map) = &params[2].value.kind else { panic!() };
    assert_eq!(text(map.results[0].span), "d0 floordiv 4");
    assert_eq!(text(foo.attrs[3].span), "f = -1.5e-3");
    assert_eq!(text(foo.attrs[3].value.span), "-1.5e-3");
    assert_eq!(text(foo.attrs[5].span), "u");
    assert_eq!(text(foo.attrs[5].value.span), "u");
}

#[test]
fn module_wrapper_is_optional() {
    for src in ["", "  // only a comment\n", "\r\n\t "] {
        let m = ok(src);
        assert_eq!((m.name, m.attrs.len(), m.funcs.len()), (None, 0, 0));
        assert_eq!(m.span, Span::new(0, src.len()));
    }
    assert_eq!(sketch::module(&ok("module {}")), "module {\n}");
    assert_eq!(sketch::module(&ok("module @m {}")), "module @m {\n}");
    assert_eq!(sketch::module(&ok(r#"module @"odd name" {}"#)), "module @odd name {\n}");
    assert_eq!(
        sketch::module(&ok("module attributes {a, b = 2} {}")),
        "module attributes {a, b = 2} {\n}"
    );
    let bare = ok("func.func @a() {}\nfunc.func @b() {}");
    assert_eq!(bare.name, None);
    assert_eq!(bare.funcs.iter().map(|f| f.name.name.as_str()).collect::<Vec<_>>(), ["a", "b"]);
}

#[test]
fn function_headers() {
    let sig = |src: &str| {
        let m = ok(src);
        let s = sketch::module(&m);
        s.lines().nth(1).unwrap().trim().to_string()
    };
    assert_eq!(sig("func.func @f() {}"), "func.func @f() -> () {");
    assert_eq!(sig("func.func @f() -> () {}"), "func.func @f() -> () {");
    assert_eq!(sig("func.func @f() -> f32 {}"), "func.func @f() -> (f32) {");
    assert_eq!(
        sig("func.func @f(%a: i32) -> (f32, tensor<2xi8>) {}"),
        "func.func @f(%a: i32) -> (f32, tensor<2xi8>) {"
    );
    assert_eq!(
        sig("func.func @f() -> f32 attributes {entry, n = 2} {}"),
        "func.func @f() -> (f32) attributes {entry, n = 2} {"
    );
    let m = ok("func.func @f() {} loc(\"m.py\":10:2)");
    assert_eq!(
        m.funcs[0].loc.as_ref().map(|l| (l.file.as_deref(), l.line, l.col)),
        Some((Some("m.py"), 10, 2))
    );
}

#[test]
fn op_shapes() {
    assert_eq!(op("func.return"), "func.return");
    assert_eq!(op("x.y %a"), "x.y %a");
    assert_eq!(op("%r = x.y"), "%r = x.y");
    assert_eq!(op("%r0, %r1 = x.y %a, %b"), "%r0, %r1 = x.y %a, %b");
    assert_eq!(
        op("%0 = tensor.reduce_sum %q.1 {axes = [1]}"),
        "%0 = tensor.reduce_sum %q.1 {axes = [1]}"
    );
    assert_eq!(op("%a-b = a.b.c %$x"), "%a-b = a.b.c %$x");
    assert_eq!(op("x.y loc(unknown)"), "x.y loc(unknown)");
    assert_eq!(op("x.y {} : () -> ()"), "x.y : () -> ()");
}

#[test]
fn op_signatures() {
    let sig = |s: &str| op(&format!("x.y %a : {s}"));
    assert_eq!(sig("(f32, i32) -> f32"), "x.y %a : (f32, i32) -> (f32)");
    assert_eq!(sig("(f32) -> (f32, i1)"), "x.y %a : (f32) -> (f32, i1)");
    assert_eq!(sig("() -> index"), "x.y %a : () -> (index)");
    assert_eq!(sig("f32 -> f64"), "x.y %a : (f32) -> (f64)");
    assert_eq!(sig("tensor<4xf32>"), "x.y %a : (tensor<4xf32>) -> ()");
    assert_eq!(sig("!d.t<1> -> (!d.t, f16)"), "x.y %a : (!d.t<1>) -> (!d.t, f16)");
}

#[test]
fn newlines_are_not_significant() {
    let one_line =
        "func.func @f(%a: f32) { %b = x.y %a %c = x.z %b, %a w.v %c %d, %e = u.v func.return %e }";
    let m = ok(one_line);
    let ops: Vec<String> = m.funcs[0].body.iter().map(sketch::op).collect();
    assert_eq!(ops, ["%b = x.y %a", "%c = x.z %b, %a", "w.v %c", "%d, %e = u.v", "func.return %e"]);
    let spread = "func.func\n@f\n(\n%a\n:\nf32\n)\n{\n%b\n=\nx.y\n%a\n}";
    assert_eq!(sketch::op(&ok(spread).funcs[0].body[0]), "%b = x.y %a");
}

#[test]
fn types() {
    let ty = |t: &str| op(&format!("x.y : {t}"));
    for elem in ["f32", "f16", "bf16", "f64", "i32", "i8", "i64", "i1", "index"] {
        assert_eq!(ty(&format!("tensor<2x3x{elem}>")), format!("x.y : (tensor<2x3x{elem}>) -> ()"));
        assert_eq!(ty(elem), format!("x.y : ({elem}) -> ()"));
    }
    let m = ok("func.func @f(%a: tensor<2x3xf32>, %b: tensor<f32>, %c: tensor<0xf32>, %d: tensor<0x4xi8>) {}");
    let kinds: Vec<&TypeKind> = m.funcs[0].args.iter().map(|a| &a.ty.kind).collect();
    assert_eq!(
        kinds,
        [
            &TypeKind::Tensor { dims: vec![2, 3], elem: "f32".into() },
            &TypeKind::Tensor { dims: vec![], elem: "f32".into() },
            &TypeKind::Tensor { dims: vec![0], elem: "f32".into() },
            &TypeKind::Tensor { dims: vec![0, 4], elem: "i8".into() },
        ]
    );
    assert_eq!(ty("tensor < 2x3xf32 >"), "x.y : (tensor<2x3xf32>) -> ()");
    assert_eq!(ty("!memory.buf"), "x.y : (!memory.buf) -> ()");
    assert_eq!(ty("!memory.image2d<64x64, f32>"), "x.y : (!memory.image2d<[64, 64], f32>) -> ()");
    let m = ok("func.func @f(%a: !memory.image2d<64x64, f32>) {}");
    let TypeKind::Dialect { dialect, name, params } = &m.funcs[0].args[0].ty.kind else { panic!() };
    assert_eq!((dialect.as_str(), name.as_str()), ("memory", "image2d"));
    assert_eq!(
        params[0].value.kind,
        AttrKind::Array(vec![
            Attr { kind: AttrKind::Int(64), span: Span::new(33, 35) },
            Attr { kind: AttrKind::Int(64), span: Span::new(36, 38) },
        ])
    );
}

#[test]
fn big_dimensions_fit_u128() {
    let m = ok("func.func @f(%a: tensor<100000000000000000000000x340282366920938463463374607431768211455xf32>) {}");
    let TypeKind::Tensor { dims, .. } = &m.funcs[0].args[0].ty.kind else { panic!() };
    assert_eq!(dims, &[100_000_000_000_000_000_000_000, u128::MAX]);
}

#[test]
fn integer_and_float_attributes() {
    assert_eq!(attr("42"), "42");
    assert_eq!(attr("-7"), "-7");
    assert_eq!(attr("0x1F"), "31");
    assert_eq!(attr("-0xff"), "-255");
    assert_eq!(attr("170141183460469231731687303715884105727"), i128::MAX.to_string());
    assert_eq!(attr("-170141183460469231731687303715884105728"), i128::MIN.to_string());
    assert_eq!(attr("1.0"), "1.0");
    assert_eq!(attr("1.0e-5"), "1e-5");
    assert_eq!(attr("-2.5E3"), "-2500.0");
    assert_eq!(attr("3."), "3.0");
    assert_eq!(attr("2e3"), "2000.0");
    assert_eq!(attr("- 1"), "-1");
}

#[test]
fn other_attributes() {
    assert_eq!(attr("true"), "true");
    assert_eq!(attr("false"), "false");
    assert_eq!(attr(r#""a\"b\\c\nd\te\41""#), r#""a\"b\\c\nd\teA""#);
    assert_eq!(attr(r#""\C3\A9""#), "\"\u{e9}\"");
    assert_eq!(attr("[]"), "[]");
    assert_eq!(attr("[1, [2, [3.5, \"s\"]], []]"), "[1, [2, [3.5, \"s\"]], []]");
    assert_eq!(attr("@other"), "@other");
    assert_eq!(attr("@\"with space\""), "@with space");
    assert_eq!(attr("tensor<4xf32>"), "tensor<4xf32>");
    assert_eq!(attr("i32"), "i32");
    assert_eq!(attr("!d.t<a = 1>"), "!d.t<a = 1>");
    assert_eq!(attr("#layout.rowmajor"), "#layout.rowmajor");
    assert_eq!(attr("#a.b<>"), "#a.b");
    assert_eq!(attr("#a.b<#c.d<1>>"), "#a.b<#c.d<1>>");
    assert_eq!(
        attr("#a.b.c<x = tensor<2xf32>, f32, mod = 1, true>"),
        "#a.b.c<x = tensor<2xf32>, f32, mod = 1, true>"
    );
    let m = ok("func.func @f() { x.y {k = #layout.rtile.v2} }");
    let AttrKind::Dialect { dialect, name, params } = &m.funcs[0].body[0].attrs[0].value.kind
    else {
        panic!()
    };
    assert_eq!((dialect.as_str(), name.as_str(), params.len()), ("layout", "rtile.v2", 0));
}

#[test]
fn keys_may_be_keywords_or_strings() {
    assert_eq!(
        op("x.y {module, tensor = 1, mod = 2, f32 = 3, loc = 4, \"quoted key\" = 5, a.b = 6}"),
        "x.y {module, tensor = 1, mod = 2, f32 = 3, loc = 4, quoted key = 5, a.b = 6}"
    );
}

#[test]
fn affine_maps_and_precedence() {
    assert_eq!(attr("(d0, d1) -> (d0, d1)"), "(d0, d1) -> (d0, d1)");
    assert_eq!(attr("() -> ()"), "() -> ()");
    assert_eq!(attr("(d0)[s0, s1] -> (d0 + s0)"), "(d0)[s0, s1] -> ((d0 + s0))");
    assert_eq!(attr("(i, j) -> (i + j * 2 - 3)"), "(i, j) -> (((i + (j * 2)) - 3))");
    assert_eq!(attr("(a) -> (a - a - a)"), "(a) -> (((a - a) - a))");
    assert_eq!(
        attr("(a) -> (a * 2 floordiv 3 ceildiv 4 mod 5)"),
        "(a) -> (((((a * 2) floordiv 3) ceildiv 4) mod 5))"
    );
    assert_eq!(attr("(a) -> (-a * 2, - -a, a - -1)"), "(a) -> ((-a * 2), --a, (a - -1))");
    assert_eq!(
        attr("(a, b) -> ((a + b) * 64 + b mod 64)"),
        "(a, b) -> ((((a + b) * 64) + (b mod 64)))"
    );
    // Scalar-type-like names are fine as dimensions.
    assert_eq!(attr("(i0, f1) -> (i0 + f1)"), "(i0, f1) -> ((i0 + f1))");
}

#[test]
fn affine_spans_include_parentheses() {
    let src = "func.func @f() { x.y {k = (a, b) -> ((a + b) * 64)} }";
    let m = ok(src);
    let AttrKind::Map(map) = &m.funcs[0].body[0].attrs[0].value.kind else { panic!() };
    let text = |s: Span| &src[s.start as usize..s.end as usize];
    assert_eq!(text(map.span), "(a, b) -> ((a + b) * 64)");
    let ExprKind::Bin(BinOp::Mul, lhs, _) = &map.results[0].kind else { panic!() };
    assert_eq!(text(lhs.span), "(a + b)");
    assert_eq!(text(map.results[0].span), "(a + b) * 64");
}

#[test]
fn locations() {
    let m = ok("func.func @f() { x.y loc(\"dir/a \\\"b\\\".py\":3:17) x.z loc(unknown) }");
    let locs: Vec<_> = m.funcs[0].body.iter().map(|o| o.loc.clone().unwrap()).collect();
    assert_eq!(
        (locs[0].file.as_deref(), locs[0].line, locs[0].col),
        (Some("dir/a \"b\".py"), 3, 17)
    );
    assert_eq!((locs[1].file.as_deref(), locs[1].line, locs[1].col), (None, 0, 0));
}

#[test]
fn unit_attributes() {
    let m = ok("func.func @f() { x.y {u, v = 1, w} }");
    let attrs = &m.funcs[0].body[0].attrs;
    assert_eq!(attrs[0].value.kind, AttrKind::Unit);
    assert_eq!(attrs[2].value.kind, AttrKind::Unit);
    assert_eq!(attrs[0].name.name, "u");
}

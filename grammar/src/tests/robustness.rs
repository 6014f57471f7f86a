//! Inputs built to break the parser: none may panic, overflow the stack or take long.

use proptest::prelude::*;

use super::{errors, ok};
use crate::{parse, parse_bytes, MAX_ERRORS, MAX_NESTING};

/// The messages of a failed parse, without rendering (some of these inputs are huge).
fn messages(src: &str) -> Vec<String> {
    parse(src).expect_err("should not parse").into_iter().map(|d| d.message).collect()
}

#[test]
fn empty_and_blank_inputs() {
    assert!(ok("").funcs.is_empty());
    assert!(parse_bytes(b"").is_ok());
    assert!(parse_bytes(b"\n\r\n\t  // x").is_ok());
}

#[test]
fn invalid_utf8_is_one_located_error() {
    let d = parse_bytes(b"func.func @f() {\xff\xfe}").unwrap_err();
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].message, "file is not valid UTF-8");
    assert_eq!(d[0].span, Some(crate::Span::new(16, 17)));
    // A sequence cut off by the end of the file.
    let d = parse_bytes(b"ab\xe2\x82").unwrap_err();
    assert_eq!(d[0].span, Some(crate::Span::new(2, 4)));
}

#[test]
fn binary_junk() {
    let junk: Vec<u8> =
        (0..20_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    assert!(parse_bytes(&junk).is_err());
    let lossy = String::from_utf8_lossy(&junk);
    assert!(parse(&lossy).is_err());
}

#[test]
fn nul_bytes() {
    assert_eq!(messages("\0"), ["unexpected character '\\u{0}'"]);
    assert_eq!(
        messages("func.func @f() {\0}\0\0"),
        ["unexpected character '\\u{0}'", "unexpected characters '\\u{0}\\u{0}'"]
    );
}

#[test]
fn deep_nesting_is_rejected_before_parsing() {
    let n = 200_000;
    for (open, prefix) in [
        ("[", "func.func @f() { x.y {k = "),
        ("{", ""),
        ("(", "func.func @f() { x.y {k = "),
        ("<", "func.func @f() { x.y {k = #a.b"),
    ] {
        let src = format!("{prefix}{}", open.repeat(n));
        let d = parse(&src).unwrap_err();
        let deep: Vec<_> =
            d.iter().filter(|d| d.message == "brackets are nested too deeply").collect();
        assert_eq!(deep.len(), 1, "{open}");
        // It points at the first bracket past the limit.
        let at = deep[0].span.unwrap().start as usize;
        let depth = |s: &str| {
            s.matches(['(', '[', '{', '<']).count() - s.matches([')', ']', '}', '>']).count()
        };
        assert_eq!((&src[at..at + 1], depth(&src[..=at])), (open, MAX_NESTING + 1));
    }
    // Exactly at the limit is fine.
    let inner = format!("{}1{}", "[".repeat(MAX_NESTING - 3), "]".repeat(MAX_NESTING - 3));
    ok(&format!("func.func @f() {{ x.y {{k = {inner}}} }}"));
}

#[test]
fn long_affine_chains_are_capped() {
    let sum = format!("func.func @f() {{ x.y {{k = (d0) -> ({}d0)}} }}", "d0 + ".repeat(100_000));
    assert_eq!(messages(&sum), ["affine expression is nested too deeply"]);
    let negs = format!("func.func @f() {{ x.y {{k = (d0) -> ({}d0)}} }}", "- ".repeat(100_000));
    assert_eq!(messages(&negs), ["affine expression is nested too deeply"]);
    let fine =
        format!("func.func @f() {{ x.y {{k = (d0) -> ({}d0)}} }}", "d0 + ".repeat(MAX_NESTING - 1));
    ok(&fine);
}

#[test]
fn five_megabyte_line() {
    let op = "%a = tensor.add %b, %c {k = [1, 2.5, \"s\"]} : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32> ";
    let body = op.repeat(5_000_000 / op.len() + 1);
    assert!(body.len() >= 5_000_000);
    let m = ok(&format!("func.func @f() {{ {body} }}"));
    assert_eq!(m.funcs[0].body.len(), 5_000_000 / op.len() + 1);
    // One huge token.
    let ident = format!("func.func @f() {{ x.{} }}", "y".repeat(5_000_000));
    assert_eq!(ok(&ident).funcs[0].body[0].name.name.len(), 5_000_002);
    let string = format!("func.func @f() {{ x.y {{s = \"{}", "z".repeat(5_000_000));
    assert!(messages(&string).contains(&"unterminated string literal".to_string()));
}

#[test]
fn huge_literals_are_located_errors() {
    let dims = "func.func @f(%a: tensor<2x10000000000000000000000000000000000000000xf32>) {}";
    assert_eq!(
        errors(dims),
        "t.fbir:1:27: error: integer literal is too large
  |
1 | func.func @f(%a: tensor<2x10000000000000000000000000000000000000000xf32>) {}
  |                           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
"
    );
    let ints = "func.func @f() { x.y {a = 170141183460469231731687303715884105728, b = -170141183460469231731687303715884105729, c = 0x100000000000000000000000000000000, d = 99999999999999999999999999999999999999999999} }";
    assert_eq!(messages(ints), vec!["integer literal is too large"; 4]);
    let spans: Vec<_> = parse(ints).unwrap_err().iter().map(|d| d.span.unwrap()).collect();
    let texts: Vec<&str> = spans.iter().map(|s| &ints[s.start as usize..s.end as usize]).collect();
    assert_eq!(texts[1], "-170141183460469231731687303715884105729");
    assert_eq!(messages("func.func @f() { x.y {f = 1e999} }"), ["float literal is out of range"]);
    assert_eq!(
        messages("func.func @f() { x.y loc(\"a\":4294967296:1) }"),
        ["integer literal is too large"]
    );
    assert_eq!(messages("func.func @f() { x.y {m = (d0) -> (d0 + 999999999999999999999999999999999999999999)} }"), ["integer literal is too large"]);
    assert_eq!(
        messages("func.func @f() { x.y {m = #a.b<99999999999999999999999999999999999999999x2>} }"),
        ["integer literal is too large"]
    );
}

#[test]
fn error_count_is_capped() {
    let src = "$ ".repeat(MAX_ERRORS * 3);
    let d = parse(&src).unwrap_err();
    assert_eq!(d.len(), MAX_ERRORS + 1);
    assert_eq!(d.last().unwrap().message, format!("too many errors; stopped after {MAX_ERRORS}"));
    let src = "func.func @f() { ".to_string() + &"%a = = ".repeat(MAX_ERRORS * 3) + "}";
    let d = parse(&src).unwrap_err();
    assert!(d.len() <= MAX_ERRORS + 2, "{}", d.len());
}

#[test]
fn twenty_thousand_ops() {
    let mut src =
        String::from("module @big {\n  func.func @f(%v0: tensor<4x4xf32>) -> tensor<4x4xf32> {\n");
    for i in 1..=20_000 {
        src.push_str(&format!(
            "    %v{i} = tensor.add %v{}, %v0 {{alpha = 1.5, axes = [0, 1]}} : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32> loc(\"big.py\":{i}:5)\n",
            i - 1
        ));
    }
    src.push_str("    func.return %v20000 : tensor<4x4xf32>\n  }\n}\n");
    let m = ok(&src);
    let body = &m.funcs[0].body;
    assert_eq!(body.len(), 20_001);
    assert_eq!(body[19_999].results[0].name, "v20000");
    assert_eq!(body[19_999].operands[0].name, "v19999");
    assert_eq!(body[19_999].loc.as_ref().unwrap().line, 20_000);
}

/// Fragments that are tokens of `.fbir` or near misses of them.
const SOUP: &[&str] = &[
    "module",
    "func.func",
    "func.return",
    "tensor.add",
    "@f",
    "@\"q\"",
    "%a",
    "%0",
    "=",
    ",",
    ":",
    "->",
    "-",
    "+",
    "*",
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    "<",
    ">",
    "tensor",
    "2x3x",
    "f32",
    "i32",
    "index",
    "64x64",
    "0xf32",
    "1",
    "-2",
    "1.5e-3",
    "\"s\"",
    "\"unterminated",
    "\"\\q\"",
    "#a.b",
    "#a",
    "!d.t",
    "!",
    "#",
    "loc",
    "unknown",
    "floordiv",
    "mod",
    "ceildiv",
    "true",
    "attributes",
    "d0",
    "\0",
    "$",
    "é",
    "\n",
    " ",
    "//c\n",
    "99999999999999999999999999999999999999999",
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn token_soup_never_panics(parts in proptest::collection::vec(proptest::sample::select(SOUP), 0..80)) {
        let src = parts.join(" ");
        match parse(&src) {
            Ok(_) => {}
            Err(d) => {
                prop_assert!(!d.is_empty());
                // Every diagnostic is located inside the text and renders.
                for diag in &d {
                    let span = diag.span.expect("located");
                    prop_assert!(span.start <= span.end && span.end as usize <= src.len());
                }
                let _ = crate::diag::render_all(&crate::SourceFile::new("t.fbir", src.clone()), &d);
            }
        }
    }

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = parse_bytes(&bytes);
    }

    #[test]
    fn glued_soup_never_panics(parts in proptest::collection::vec(proptest::sample::select(SOUP), 0..60)) {
        // Without separators, fragments glue into new tokens (`%a=`, `2x3xf32`, `1.5e-3x`).
        let _ = parse(&parts.concat());
    }
}

//! Error recovery and the exact text of diagnostics.

use super::errors;
use crate::diag::{render_all, SourceFile};

#[test]
fn every_syntax_error_of_a_file_is_reported() {
    let src = r#"module @m {
  func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
    %a = tensor.add %x, : (tensor<4xf32>) -> tensor<4xf32>
    %b = tensor.scale %a {factor = } : (tensor<4xf32>) -> tensor<4xf32>
    %c = tensor.foo %b {k = [1, , 3], s = "tab\q"}
    %d = 5
    func.return %c : tensor<4xf32
  }
  func.func @g() -> tensor<2xfoo> {
  }
}
"#;
    assert_eq!(
        errors(src),
        r#"t.fbir:3:25: error: expected value name, found `:`
  |
3 |     %a = tensor.add %x, : (tensor<4xf32>) -> tensor<4xf32>
  |                         ^
t.fbir:4:36: error: expected attribute value, found `}`
  |
4 |     %b = tensor.scale %a {factor = } : (tensor<4xf32>) -> tensor<4xf32>
  |                                    ^
t.fbir:5:33: error: expected attribute value, found `,`
  |
5 |     %c = tensor.foo %b {k = [1, , 3], s = "tab\q"}
  |                                 ^
t.fbir:5:47: error: unknown escape sequence in string literal
  |
5 |     %c = tensor.foo %b {k = [1, , 3], s = "tab\q"}
  |                                               ^^
  = note: escapes are `\"`, `\\`, `\n`, `\t` and `\XX` (two hex digits)
t.fbir:6:10: error: expected op name, found `5`
  |
6 |     %d = 5
  |          ^
t.fbir:8:3: error: expected `>`, found `}`
  |
8 |   }
  |   ^
t.fbir:9:30: error: expected element type, found `foo`
  |
9 |   func.func @g() -> tensor<2xfoo> {
  |                              ^^^
"#
    );
}

#[test]
fn lexer_errors_do_not_stop_the_parse() {
    let src = "func.func @f() {\n  %a = x.y {s = \"ok\"} $ loc(\"a.py\":1:2)\n  %b = x.z {t = \"open\n  x.w %a, %b\n}\n";
    assert_eq!(
        errors(src),
        r#"t.fbir:2:23: error: unexpected character '$'
  |
2 |   %a = x.y {s = "ok"} $ loc("a.py":1:2)
  |                       ^
t.fbir:3:17: error: unterminated string literal
  |
3 |   %b = x.z {t = "open
  |                 ^^^^^ missing closing `"` on this line
t.fbir:4:3: error: expected one of `,` or `}`, found `x.w`
  |
4 |   x.w %a, %b
  |   ^^^
"#
    );
}

#[test]
fn a_broken_function_header_recovers_at_its_body() {
    let src = "func.func @g( {\n %a = x.y %b,\n}\nfunc.func @h() attributes {a = = 1} { %a = = }";
    assert_eq!(
        errors(src),
        "t.fbir:1:15: error: expected one of `)` or value name, found `{`
  |
1 | func.func @g( {
  |               ^
t.fbir:3:1: error: expected value name, found `}`
  |
3 | }
  | ^
t.fbir:4:32: error: expected attribute value, found `=`
  |
4 | func.func @h() attributes {a = = 1} { %a = = }
  |                                ^
t.fbir:4:44: error: expected op name, found `=`
  |
4 | func.func @h() attributes {a = = 1} { %a = = }
  |                                            ^
"
    );
}

#[test]
fn braces_after_an_error_do_not_close_the_function() {
    // Recovery skips the rest of a broken op as a whole: the `}` of its attributes must not end
    // the function, nor its signature count as a second error.
    let src = "func.func @f(%x: f32, %y: , %z: f32) -> {\n  %a = x.y %x, {k = 1} : (f32) -> f32\n  %b = x.z %a, [1] {k = 1} : (f32) -> f32 loc(unknown)\n  %c = x.w %b,\n}\n";
    assert_eq!(
        errors(src),
        "t.fbir:1:27: error: expected type, found `,`
  |
1 | func.func @f(%x: f32, %y: , %z: f32) -> {
  |                           ^
t.fbir:1:41: error: expected one of `(` or type, found `{`
  |
1 | func.func @f(%x: f32, %y: , %z: f32) -> {
  |                                         ^
t.fbir:2:16: error: expected value name, found `{`
  |
2 |   %a = x.y %x, {k = 1} : (f32) -> f32
  |                ^
t.fbir:3:16: error: expected value name, found `[`
  |
3 |   %b = x.z %a, [1] {k = 1} : (f32) -> f32 loc(unknown)
  |                ^
t.fbir:5:1: error: expected value name, found `}`
  |
5 | }
  | ^
"
    );
}

#[test]
fn nul_dialect_names_and_affine_errors() {
    let src = "func.func @f() {\n  %a = x.y \0 %a\n  x.z {m = #a<1>, n = !b}\n  x.q {e = (d0) -> (d0 + )}\n}\nmodule {}";
    assert_eq!(
        errors(src),
        "t.fbir:2:12: error: unexpected character '\\u{0}'
  |
2 |   %a = x.y \u{FFFD} %a
  |            ^
t.fbir:3:12: error: `#a` is missing its dialect
  |
3 |   x.z {m = #a<1>, n = !b}
  |            ^^ write it as `#dialect.name`
t.fbir:3:23: error: `!b` is missing its dialect
  |
3 |   x.z {m = #a<1>, n = !b}
  |                       ^^ write it as `!dialect.name`
t.fbir:4:26: error: expected one of `(`, `-`, identifier, or integer, found `)`
  |
4 |   x.q {e = (d0) -> (d0 + )}
  |                          ^
t.fbir:6:1: error: expected one of `func.func` or `loc`, found `module`
  |
6 | module {}
  | ^^^^^^
"
    );
}

#[test]
fn end_of_file_and_trailing_junk() {
    assert_eq!(
        errors("module { func.func @f() {"),
        "t.fbir:1:26: error: expected one of `}`, op name, or result name, found end of file
  |
1 | module { func.func @f() {
  |                          ^
"
    );
    assert_eq!(
        errors("module @m { func.func @f() { } } junk"),
        "t.fbir:1:34: error: expected end of file, found `junk`
  |
1 | module @m { func.func @f() { } } junk
  |                                  ^^^^
"
    );
    assert_eq!(
        errors("%a = x.y"),
        "t.fbir:1:1: error: expected one of `func.func` or `module`, found `%a`
  |
1 | %a = x.y
  | ^^
"
    );
}

#[test]
fn expected_sets_read_as_words() {
    let first = |src: &str| crate::parse(src).unwrap_err()[0].message.clone();
    assert_eq!(
        first("func.func @f() { x.y %a ] }"),
        "expected one of `,`, `:`, `loc`, `{`, `}`, op name, or result name, found `]`"
    );
    assert_eq!(
        first("func.func @f() { x.y {k = #a.b<x = >} }"),
        "expected one of attribute value or shape, found `>`"
    );
    assert_eq!(
        first("func.func @f() { x.y {k = #a.b<=>} }"),
        "expected one of `>`, attribute value, identifier, or shape, found `=`"
    );
    assert_eq!(first("func.func @f() { x.y {k} : }"), "expected one of `(` or type, found `}`");
    assert_eq!(
        first("func.func @f() { x.y {k} : tensor<> }"),
        "expected one of dimension list or element type, found `>`"
    );
    assert_eq!(first("func.func @f() { x.y {1} }"), "expected one of `}` or identifier, found `1`");
    assert_eq!(
        first("func.func @f() { x.y loc(1) }"),
        "expected one of `unknown` or string, found `1`"
    );
    assert_eq!(first("func.func f() {}"), "expected symbol, found `f`");
    let long = format!("func.func @f() {{ x.y {{k = 1 {} }} }}", "a".repeat(100));
    assert_eq!(first(&long), format!("expected one of `,` or `}}`, found `{}...`", "a".repeat(40)));
}

#[test]
fn invalid_utf8_renders_with_a_lossy_snippet() {
    let bytes = b"func.func @f() {\n  x.y {s = \"\xff\"}\n}\n";
    let d = crate::parse_bytes(bytes).unwrap_err();
    let file = SourceFile::new("t.fbir", String::from_utf8_lossy(bytes));
    assert_eq!(
        render_all(&file, &d),
        "t.fbir:2:13: error: file is not valid UTF-8
  |
2 |   x.y {s = \"\u{FFFD}\"}
  |             ^ this byte sequence is not UTF-8
"
    );
}

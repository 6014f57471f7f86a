//! The `.fbir` lexer: source text to a flat vector of spanned token kinds.
//!
//! Scanning is done by a [`logos`] state machine (no backtracking); this module adds the three
//! things a context-free DFA cannot do on its own:
//!
//! - **Dimension lists.** `tensor<2x3xf32>` is lexed like MLIR does: a run `2x3x` is one
//!   [`Tok::Dims`] token followed by the element type, and `64x64` (no trailing `x`) is a
//!   [`Tok::Shape`]. Right after `tensor <` the lexer is in *dims mode*, where `0xf32` means a
//!   zero-sized dimension of `f32` rather than the hex literal `0xf32`.
//! - **Result definitions.** Newlines are not significant, so `%a = x.y %b = z.w` needs two tokens
//!   of lookahead to tell whether `%b` is an operand of `x.y` or starts the next op. The stream
//!   looks past each `%v, %v, ...` run and marks its values [`Tok::DefValue`] when `=` follows,
//!   which keeps the grammar LR(1).
//! - **Keywords.** Identifiers are scanned by one rule and classified here, so that a keyword is
//!   still usable as an attribute key (`{mod = 1}`) without fighting logos priorities.
//!
//! Tokens carry no payload: their text is `src[start..end]`, so lexing allocates nothing per
//! token, and they are produced as the parser asks, so no token array is ever built. Every
//! lexical error is recorded and lexing goes on: a run of bad characters is dropped (one
//! diagnostic per run), an unterminated string still yields a [`Tok::Str`] token.

use std::cell::RefCell;
use std::collections::VecDeque;

use logos::{Lexer, Logos};

use crate::diag::{Diagnostic, Span};

/// What the scanner sees; [`lex`] turns these into [`Tok`]s.
#[derive(Logos, Debug, Clone, Copy, PartialEq, Eq)]
#[logos(extras = Mode)]
#[logos(skip r"[ \t\r\n\f]+")]
// A comment runs to the end of its line by definition, so the greedy repetition is intended.
#[logos(skip(r"//[^\n]*", allow_greedy = true))]
enum Raw {
    #[token("(")]
    LParen,
    #[token(")")]
    RParen,
    #[token("[")]
    LBracket,
    #[token("]")]
    RBracket,
    #[token("{")]
    LBrace,
    #[token("}")]
    RBrace,
    #[token("<")]
    Lt,
    #[token(">")]
    Gt,
    #[token(",")]
    Comma,
    #[token(":")]
    Colon,
    #[token("=")]
    Eq,
    // Its own token so that the `>` of `->` never closes a `<...>` parameter list.
    #[token("->")]
    Arrow,
    #[token("-")]
    Minus,
    #[token("+")]
    Plus,
    #[token("*")]
    Star,
    #[regex(r"[A-Za-z_][A-Za-z0-9_$.]*")]
    Ident,
    #[regex(r"%[A-Za-z0-9_$.\-]+")]
    Value,
    #[regex(r"@[A-Za-z0-9_$.\-]+")]
    Symbol,
    #[token("@\"", lex_string)]
    QuotedSymbol(bool),
    #[regex(r"#[A-Za-z_][A-Za-z0-9_$.]*")]
    Hash,
    #[regex(r"![A-Za-z_][A-Za-z0-9_$.]*")]
    Bang,
    #[regex("[0-9]", lex_number)]
    Number(Num),
    #[token("\"", lex_string)]
    Str(bool),
}

/// Lexer state set by [`lex`] before each token.
#[derive(Debug, Default, Clone, Copy)]
struct Mode {
    /// Right after `tensor <`: numbers are dimension lists, never hex.
    dims: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Num {
    Int,
    Hex,
    Float,
    Dims,
    Shape,
}

/// A token kind; the parser's terminal type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tok {
    LParen,
    RParen,
    LBracket,
    RBracket,
    LBrace,
    RBrace,
    Lt,
    Gt,
    Comma,
    Colon,
    Eq,
    Arrow,
    Minus,
    Plus,
    Star,
    KwModule,
    KwAttributes,
    KwFuncFunc,
    KwTrue,
    KwFalse,
    KwLoc,
    KwUnknown,
    KwFloorDiv,
    KwCeilDiv,
    KwMod,
    KwTensor,
    /// `f32`, `bf16`, `i1`, `index`, ...
    ScalarType,
    /// An identifier without dots (`d0`, `shape`).
    BareIdent,
    /// An identifier with dots: an op name (`tensor.add`) or a dotted key (`fbc.version`).
    DottedIdent,
    /// `%v` used as an operand or argument.
    Value,
    /// `%v` in the result list of an op (followed, through commas, by `=`).
    DefValue,
    Symbol,
    QuotedSymbol,
    /// `#dialect.name`
    Hash,
    /// `!dialect.name`
    Bang,
    Int,
    HexInt,
    Float,
    /// A string literal; its span includes the quotes (the closing one may be missing).
    Str,
    /// `2x3x`: a dimension list ending in `x`, followed by an element type.
    Dims,
    /// `64x64`: a shape inside dialect parameters.
    Shape,
}

/// One token: a kind and its byte range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Token {
    pub tok: Tok,
    pub start: u32,
    pub end: u32,
}

/// The tokens of a source, produced on demand for the parser.
///
/// Besides lexing it keeps two invariants the parser relies on:
/// - **Bounded nesting.** Brackets (`(`, `[`, `{`, `<`) opened deeper than `max_depth` end the
///   stream with an error, so no deep tree is ever built (the AST is dropped, compared and printed
///   recursively).
/// - **Bounded errors.** Once `diags` holds `max_errors` entries (the parser's own count too), the
///   stream ends.
///
/// Lexical errors go straight into `diags`. When the stream ends early, [`Tokens::stopped_at`]
/// says how many diagnostics there were at that point; later ones are about the cut-off end.
#[derive(Debug)]
pub struct Tokens<'s, 'd> {
    src: &'s str,
    lexer: Lexer<'s, Raw>,
    diags: &'d RefCell<Vec<Diagnostic>>,
    max_errors: usize,
    max_depth: usize,
    depth: usize,
    /// The last two tokens scanned, for dims mode.
    prev: [Tok; 2],
    /// The current run of unrecognized characters, reported once it ends.
    bad: Option<(usize, usize)>,
    /// Tokens scanned but not yet handed out; the first `ready` of them are final.
    pending: VecDeque<Token>,
    ready: usize,
    done: bool,
    stopped_at: Option<usize>,
}

impl<'s, 'd> Tokens<'s, 'd> {
    /// `src.len()` must fit in `u32`; the caller checks.
    pub fn new(
        src: &'s str,
        diags: &'d RefCell<Vec<Diagnostic>>,
        max_errors: usize,
        max_depth: usize,
    ) -> Self {
        Tokens {
            src,
            lexer: Raw::lexer_with_extras(src, Mode::default()),
            diags,
            max_errors,
            max_depth,
            depth: 0,
            prev: [Tok::Comma; 2],
            bad: None,
            pending: VecDeque::new(),
            ready: 0,
            done: false,
            stopped_at: None,
        }
    }

    /// The number of diagnostics when the stream was cut short (too deep or too many errors).
    pub fn stopped_at(&self) -> Option<usize> {
        self.stopped_at
    }

    fn error(&self, d: Diagnostic) {
        self.diags.borrow_mut().push(d);
    }

    fn full(&self) -> bool {
        self.diags.borrow().len() >= self.max_errors
    }

    fn stop(&mut self) -> Option<Token> {
        self.done = true;
        self.stopped_at = Some(self.diags.borrow().len());
        None
    }

    fn flush_bad(&mut self) {
        if let Some(run) = self.bad.take() {
            self.error(bad_chars(self.src, run));
        }
    }

    /// Lexes the next token (before result-name marking).
    fn scan(&mut self) -> Option<Token> {
        if self.done {
            return None;
        }
        loop {
            self.lexer.extras.dims = self.prev == [Tok::KwTensor, Tok::Lt];
            let Some(result) = self.lexer.next() else {
                self.flush_bad();
                self.done = true;
                return None;
            };
            let span = self.lexer.span();
            let Ok(raw) = result else {
                self.bad = match self.bad {
                    Some((start, end)) if end == span.start => Some((start, span.end)),
                    run => {
                        if let Some(run) = run {
                            self.error(bad_chars(self.src, run));
                        }
                        Some((span.start, span.end))
                    }
                };
                if self.full() {
                    self.bad = None;
                    return self.stop();
                }
                continue;
            };
            self.flush_bad();
            let tok = self.convert(raw, span.start, span.end);
            match tok {
                Tok::LParen | Tok::LBracket | Tok::LBrace | Tok::Lt => {
                    self.depth += 1;
                    if self.depth > self.max_depth {
                        self.error(
                            Diagnostic::error("brackets are nested too deeply")
                                .at(Span::new(span.start, span.end))
                                .with_note(format!(
                                    "at most {} levels of nesting are allowed",
                                    self.max_depth
                                )),
                        );
                        return self.stop();
                    }
                }
                // Unbalanced closers are the grammar's to report.
                Tok::RParen | Tok::RBracket | Tok::RBrace | Tok::Gt => {
                    self.depth = self.depth.saturating_sub(1)
                }
                _ => {}
            }
            if self.full() {
                return self.stop();
            }
            self.prev = [self.prev[1], tok];
            // `as u32` cannot truncate: sources are shorter than 4 GiB.
            return Some(Token { tok, start: span.start as u32, end: span.end as u32 });
        }
    }

    fn convert(&self, raw: Raw, start: usize, end: usize) -> Tok {
        match raw {
            Raw::LParen => Tok::LParen,
            Raw::RParen => Tok::RParen,
            Raw::LBracket => Tok::LBracket,
            Raw::RBracket => Tok::RBracket,
            Raw::LBrace => Tok::LBrace,
            Raw::RBrace => Tok::RBrace,
            Raw::Lt => Tok::Lt,
            Raw::Gt => Tok::Gt,
            Raw::Comma => Tok::Comma,
            Raw::Colon => Tok::Colon,
            Raw::Eq => Tok::Eq,
            Raw::Arrow => Tok::Arrow,
            Raw::Minus => Tok::Minus,
            Raw::Plus => Tok::Plus,
            Raw::Star => Tok::Star,
            Raw::Ident => classify_ident(&self.src[start..end]),
            Raw::Value => Tok::Value,
            Raw::Symbol => Tok::Symbol,
            Raw::Hash => Tok::Hash,
            Raw::Bang => Tok::Bang,
            Raw::Number(Num::Int) => Tok::Int,
            Raw::Number(Num::Hex) => Tok::HexInt,
            Raw::Number(Num::Float) => Tok::Float,
            Raw::Number(Num::Dims) => Tok::Dims,
            Raw::Number(Num::Shape) => Tok::Shape,
            Raw::Str(closed) | Raw::QuotedSymbol(closed) => {
                if !closed {
                    self.error(
                        Diagnostic::error("unterminated string literal")
                            .at(Span::new(start, end))
                            .with_label("missing closing `\"` on this line"),
                    );
                }
                if matches!(raw, Raw::Str(_)) {
                    Tok::Str
                } else {
                    Tok::QuotedSymbol
                }
            }
        }
    }

    /// Makes `pending` hold at least `n` tokens, if the input has them.
    fn fill(&mut self, n: usize) {
        while self.pending.len() < n {
            match self.scan() {
                Some(t) => self.pending.push_back(t),
                None => return,
            }
        }
    }

    /// Makes the first pending token final. A `%v` starts a run `%v, %v, ...`; all of its values
    /// are result definitions if `=` follows the run, uses otherwise.
    fn resolve(&mut self) {
        self.fill(1);
        if self.pending.front().is_none_or(|t| t.tok != Tok::Value) {
            self.ready = self.pending.len().min(1);
            return;
        }
        let mut last = 0;
        loop {
            self.fill(last + 3);
            let at = |k: usize| self.pending.get(k).map(|t| t.tok);
            if at(last + 1) == Some(Tok::Comma) && at(last + 2) == Some(Tok::Value) {
                last += 2;
                continue;
            }
            if at(last + 1) == Some(Tok::Eq) {
                for k in (0..=last).step_by(2) {
                    self.pending[k].tok = Tok::DefValue;
                }
            }
            self.ready = last + 1;
            return;
        }
    }
}

impl Iterator for Tokens<'_, '_> {
    type Item = Token;

    fn next(&mut self) -> Option<Token> {
        if self.ready == 0 {
            self.resolve();
        }
        let t = self.pending.pop_front()?;
        self.ready -= 1;
        Some(t)
    }
}

fn classify_ident(text: &str) -> Tok {
    match text {
        "module" => Tok::KwModule,
        "attributes" => Tok::KwAttributes,
        "func.func" => Tok::KwFuncFunc,
        "true" => Tok::KwTrue,
        "false" => Tok::KwFalse,
        "loc" => Tok::KwLoc,
        "unknown" => Tok::KwUnknown,
        "floordiv" => Tok::KwFloorDiv,
        "ceildiv" => Tok::KwCeilDiv,
        "mod" => Tok::KwMod,
        "tensor" => Tok::KwTensor,
        "index" => Tok::ScalarType,
        _ if is_sized_scalar(text) => Tok::ScalarType,
        _ if text.contains('.') => Tok::DottedIdent,
        _ => Tok::BareIdent,
    }
}

/// `f32`, `bf16`, `i8`, `si32`, `ui8`: a scalar type prefix and a bit width.
fn is_sized_scalar(text: &str) -> bool {
    let width = ["bf", "si", "ui", "f", "i"].iter().find_map(|p| text.strip_prefix(p));
    width.is_some_and(|w| !w.is_empty() && w.bytes().all(|b| b.is_ascii_digit()))
}

/// The diagnostic for a run of characters no token starts with.
fn bad_chars(src: &str, (start, end): (usize, usize)) -> Diagnostic {
    let text = &src[start..end];
    let shown: String = text.chars().take(16).map(show_char).collect();
    let more = if text.chars().nth(16).is_some() { "..." } else { "" };
    let message = if text.chars().nth(1).is_none() {
        format!("unexpected character '{shown}'")
    } else {
        format!("unexpected characters '{shown}{more}'")
    };
    Diagnostic::error(message).at(Span::new(start, end))
}

/// A character as it appears in a message: printable ones as is, the rest as `\u{..}`.
fn show_char(c: char) -> String {
    if c.is_control() || c.is_whitespace() || c == '\u{FFFD}' || is_invisible(c) {
        c.escape_unicode().to_string()
    } else {
        c.to_string()
    }
}

/// Format characters that render as nothing (zero-width spaces, BOM, bidi controls).
fn is_invisible(c: char) -> bool {
    matches!(c, '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2060}'..='\u{2064}' | '\u{FEFF}')
}

/// Scans a string body after its opening quote; returns whether the closing quote was found.
/// A string never spans lines: an unterminated one ends before the newline, so the rest of the
/// file is still lexed normally.
fn lex_string(lex: &mut Lexer<'_, Raw>) -> bool {
    let bytes = lex.remainder().as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                lex.bump(i + 1);
                return true;
            }
            b'\n' => break,
            // Skipping one byte after `\` may land inside a multi-byte character; that is fine,
            // continuation bytes are never `"`, `\` or a newline, and every stop is at one.
            b'\\' if bytes.get(i + 1).is_some_and(|&b| b != b'\n') => i += 2,
            _ => i += 1,
        }
    }
    lex.bump(i.min(bytes.len()));
    false
}

/// Scans a number after its first digit: decimal or hex integer, float, `2x3x` dimension list or
/// `64x64` shape.
fn lex_number(lex: &mut Lexer<'_, Raw>) -> Num {
    let first = lex.slice().as_bytes()[0];
    let rest = lex.remainder().as_bytes();
    let digits = |from: usize| {
        rest.get(from..).map_or(0, |s| s.iter().take_while(|b| b.is_ascii_digit()).count())
    };
    if !lex.extras.dims
        && first == b'0'
        && matches!(rest.first(), Some(b'x' | b'X'))
        && rest.get(1).is_some_and(u8::is_ascii_hexdigit)
    {
        let n = 1 + rest[1..].iter().take_while(|b| b.is_ascii_hexdigit()).count();
        lex.bump(n);
        return Num::Hex;
    }
    let mut i = digits(0);
    let exponent = |at: usize| -> usize {
        if !matches!(rest.get(at), Some(b'e' | b'E')) {
            return 0;
        }
        let sign = usize::from(matches!(rest.get(at + 1), Some(b'+' | b'-')));
        match digits(at + 1 + sign) {
            0 => 0,
            n => 1 + sign + n,
        }
    };
    if rest.get(i) == Some(&b'.') {
        i += 1;
        i += digits(i);
        i += exponent(i);
        lex.bump(i);
        return Num::Float;
    }
    let e = exponent(i);
    if e > 0 {
        lex.bump(i + e);
        return Num::Float;
    }
    let mut groups = 0;
    while rest.get(i) == Some(&b'x') {
        let n = digits(i + 1);
        if n == 0 {
            // `2x3x` followed by an element type.
            lex.bump(i + 1);
            return Num::Dims;
        }
        i += 1 + n;
        groups += 1;
    }
    lex.bump(i);
    if groups > 0 {
        Num::Shape
    } else {
        Num::Int
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lex(src: &str, max_errors: usize) -> (Vec<Token>, Vec<Diagnostic>) {
        let diags = RefCell::new(Vec::new());
        let tokens = Tokens::new(src, &diags, max_errors, 256).collect();
        (tokens, diags.into_inner())
    }

    fn kinds(src: &str) -> Vec<Tok> {
        let (tokens, errors) = lex(src, 100);
        assert!(errors.is_empty(), "{errors:?}");
        tokens.iter().map(|t| t.tok).collect()
    }

    fn texts(src: &str) -> Vec<&str> {
        lex(src, 100).0.iter().map(|t| &src[t.start as usize..t.end as usize]).collect()
    }

    #[test]
    fn dims_shapes_and_numbers() {
        use Tok::*;
        assert_eq!(kinds("tensor<2x3xf32>"), [KwTensor, Lt, Dims, ScalarType, Gt]);
        assert_eq!(texts("tensor<2x3xf32>")[2], "2x3x");
        assert_eq!(kinds("tensor<0xf32>"), [KwTensor, Lt, Dims, ScalarType, Gt]);
        assert_eq!(kinds("0xf32 0x1F 64x64 4xf32"), [HexInt, HexInt, Shape, Dims, ScalarType]);
        assert_eq!(kinds("1.0 1.0e-5 2.5E3 1e5 7 1."), [Float, Float, Float, Float, Int, Float]);
        assert_eq!(kinds("2e x"), [Int, BareIdent, BareIdent]);
    }

    #[test]
    fn results_are_marked_through_commas() {
        use Tok::*;
        let src = "%a = x.y %b, %c %d, %e = z.w";
        assert_eq!(
            kinds(src),
            [
                DefValue,
                Eq,
                DottedIdent,
                Value,
                Comma,
                Value,
                DefValue,
                Comma,
                DefValue,
                Eq,
                DottedIdent
            ]
        );
        assert_eq!(kinds("x.y %b = z.w"), [DottedIdent, DefValue, Eq, DottedIdent]);
    }

    #[test]
    fn keywords_and_idents() {
        use Tok::*;
        assert_eq!(
            kinds("module func.func func.return mod modx i32 i bf16 index fbc.version tensor.add"),
            [
                KwModule,
                KwFuncFunc,
                DottedIdent,
                KwMod,
                BareIdent,
                ScalarType,
                BareIdent,
                ScalarType,
                ScalarType,
                DottedIdent,
                DottedIdent
            ]
        );
        assert_eq!(
            kinds("(d0) -> (d0 - 1) // c\n"),
            [LParen, BareIdent, RParen, Arrow, LParen, BareIdent, Minus, Int, RParen]
        );
    }

    #[test]
    fn bad_characters_are_grouped_and_lexing_goes_on() {
        let (tokens, errors) = lex("a $$ b \0 c \"x\nd", 100);
        assert_eq!(tokens.len(), 5);
        let messages: Vec<_> =
            errors.iter().map(|e| (e.message.as_str(), e.span.unwrap())).collect();
        assert_eq!(
            messages,
            [
                ("unexpected characters '$$'", Span::new(2, 4)),
                ("unexpected character '\\u{0}'", Span::new(7, 8)),
                ("unterminated string literal", Span::new(11, 13)),
            ]
        );
    }
}

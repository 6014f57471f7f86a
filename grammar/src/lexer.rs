//! The `.fbir` lexer: source text to a stream of spanned token kinds.
//!
//! Scanning is done by a [`logos`] state machine (no backtracking), keywords included; this
//! module adds what a context-free DFA cannot do on its own:
//!
//! - **Dimension lists.** `tensor<2x3xf32>` written without spaces (nearly always) is one
//!   [`Tok::TensorType`] token. Otherwise it is lexed like MLIR does: a run `2x3x` is one
//!   [`Tok::Dims`] token followed by the element type, and `64x64` (no trailing `x`) is a
//!   [`Tok::Shape`]. Right after `tensor <` the lexer is in *dims mode*, where `0xf32` means a
//!   zero-sized dimension of `f32` rather than the hex literal `0xf32`.
//! - **Result definitions.** Newlines are not significant, so `%a = x.y %b = z.w` needs two tokens
//!   of lookahead to tell whether `%b` is an operand of `x.y` or starts the next op. The stream
//!   peeks past each `%v, %v, ...` run in the source and marks its values [`Tok::DefValue`] when
//!   `=` follows, which keeps the grammar LR(1).
//! - **Limits.** Bracket nesting and the number of errors are bounded (see [`Tokens`]).
//!
//! Tokens carry no payload: their text is `src[start..end]`, so lexing allocates nothing per
//! token, and they are produced as the parser asks, so no token array is ever built. Every
//! lexical error is recorded and lexing goes on: a run of bad characters is dropped (one
//! diagnostic per run), an unterminated string still yields a [`Tok::Str`] token.

use std::cell::RefCell;

use logos::{Lexer, Logos};

use crate::diag::{Diagnostic, Span};

/// A token kind: what logos scans, and the parser's terminal type.
///
/// Keywords and scalar types are exact tokens or higher-priority patterns, so logos tells them
/// from identifiers inside its DFA; being tokens, they are still accepted as attribute keys by the
/// grammar (`{mod = 1}`).
#[derive(Logos, Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[logos(extras = Mode)]
#[logos(skip r"[ \t\r\n\f]+")]
// A comment runs to the end of its line by definition, so the greedy repetition is intended.
#[logos(skip(r"//[^\n]*", allow_greedy = true))]
pub enum Tok {
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
    #[token("module")]
    KwModule,
    #[token("attributes")]
    KwAttributes,
    #[token("func.func")]
    KwFuncFunc,
    #[token("true")]
    KwTrue,
    #[token("false")]
    KwFalse,
    #[token("loc")]
    KwLoc,
    #[token("unknown")]
    KwUnknown,
    #[token("floordiv")]
    KwFloorDiv,
    #[token("ceildiv")]
    KwCeilDiv,
    #[token("mod")]
    KwMod,
    #[token("tensor")]
    KwTensor,
    /// `dense<...>`, the elements of a tensor constant.
    #[token("dense")]
    KwDense,
    /// A whole `tensor<2x3xf32>` written without spaces, as nearly all are: one token instead of
    /// five halves the lexer's and the parser's work on typical IR. Anything else (spaces, an
    /// unknown element type) lexes piece by piece and takes the grammar's general rule, with its
    /// precise errors.
    #[regex(r"tensor<([0-9]+x)*((bf|f|i|si|ui)[0-9]+|index)>")]
    TensorType,
    /// `f32`, `bf16`, `i1`, `si8`, `index`, ...
    #[token("index")]
    #[regex(r"(bf|f|i|si|ui)[0-9]+", priority = 10)]
    ScalarType,
    /// An identifier without dots (`d0`, `shape`).
    #[regex(r"[A-Za-z_][A-Za-z0-9_$]*")]
    BareIdent,
    /// An identifier with dots: an op name (`tensor.add`) or a dotted key (`fbc.version`).
    #[regex(r"[A-Za-z_][A-Za-z0-9_$]*\.[A-Za-z0-9_$.]*")]
    DottedIdent,
    /// `%v` used as an operand or argument; `%v#2` is result 2 of a group defined as `%v:N`
    /// (MLIR's form of multi-result ops).
    #[regex(r"%[A-Za-z0-9_$.\-]+(#[0-9]+)?")]
    Value,
    /// `%v` in the result list of an op (followed, through commas, by `=`); made by [`Tokens`].
    DefValue,
    #[regex(r"@[A-Za-z0-9_$.\-]+")]
    Symbol,
    #[token("@\"", |lex| lex_string(lex, Tok::QuotedSymbol, Tok::OpenQuotedSymbol))]
    QuotedSymbol,
    /// `#dialect.name`
    #[regex(r"#[A-Za-z_][A-Za-z0-9_$.]*")]
    Hash,
    /// `!dialect.name`
    #[regex(r"![A-Za-z_][A-Za-z0-9_$.]*")]
    Bang,
    #[regex("[0-9]", lex_number)]
    Int,
    HexInt,
    Float,
    /// A string literal; its span includes the quotes (the closing one may be missing).
    #[token("\"", |lex| lex_string(lex, Tok::Str, Tok::OpenStr))]
    Str,
    /// `2x3x`: a dimension list ending in `x`, followed by an element type.
    Dims,
    /// `64x64`: a shape inside dialect parameters.
    Shape,
    /// An unterminated string; [`Tokens`] reports it and hands the parser a [`Tok::Str`].
    OpenStr,
    /// An unterminated quoted symbol, handed on as a [`Tok::QuotedSymbol`].
    OpenQuotedSymbol,
}

/// Lexer state set by [`Tokens`] before each token.
#[derive(Debug, Default, Clone, Copy)]
pub struct Mode {
    /// Right after `tensor <`: numbers are dimension lists, never hex.
    dims: bool,
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
    lexer: Lexer<'s, Tok>,
    diags: &'d RefCell<Vec<Diagnostic>>,
    max_errors: usize,
    max_depth: usize,
    depth: usize,
    /// The last token scanned, for dims mode.
    last: Tok,
    /// The current run of unrecognized characters, reported once it ends.
    bad: Option<(usize, usize)>,
    /// Where the last `%v, %v, ...` run classified ends (the byte after it) and whether it
    /// defines results; values starting before that end belong to it.
    run: (usize, bool),
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
            lexer: Tok::lexer_with_extras(src, Mode::default()),
            diags,
            max_errors,
            max_depth,
            depth: 0,
            last: Tok::Comma,
            bad: None,
            run: (0, false),
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
            let Some(result) = self.lexer.next() else {
                self.flush_bad();
                self.done = true;
                return None;
            };
            let span = self.lexer.span();
            let Ok(mut tok) = result else {
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
            if self.bad.is_some() {
                self.flush_bad();
            }
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
                Tok::OpenStr | Tok::OpenQuotedSymbol => {
                    self.error(
                        Diagnostic::error("unterminated string literal")
                            .at(Span::new(span.start, span.end))
                            .with_label("missing closing `\"` on this line"),
                    );
                    tok = if tok == Tok::OpenStr { Tok::Str } else { Tok::QuotedSymbol };
                }
                _ => {}
            }
            if self.full() {
                return self.stop();
            }
            self.lexer.extras.dims = tok == Tok::Lt && self.last == Tok::KwTensor;
            self.last = tok;
            // `as u32` cannot truncate: sources are shorter than 4 GiB.
            return Some(Token { tok, start: span.start as u32, end: span.end as u32 });
        }
    }

    /// Whether the `%v` at `start..end` defines a result: it does if its run `%v, %v, ...` is
    /// followed by `=`. Found by peeking at the source bytes (a run only holds values, commas,
    /// whitespace and comments), and remembered for the rest of the run so long runs stay linear.
    fn value_kind(&mut self, start: usize, end: usize) -> Tok {
        if start >= self.run.0 {
            let bytes = self.src.as_bytes();
            let mut i = skip_trivia(bytes, skip_group_count(bytes, end));
            while bytes.get(i) == Some(&b',') {
                let v = skip_trivia(bytes, i + 1);
                let name = bytes
                    .get(v + 1..)
                    .map_or(0, |rest| rest.iter().take_while(|&&b| is_value_char(b)).count());
                if bytes.get(v) != Some(&b'%') || name == 0 {
                    break;
                }
                i = skip_trivia(bytes, skip_group_count(bytes, v + 1 + name));
            }
            self.run = (i, bytes.get(i) == Some(&b'='));
        }
        if self.run.1 {
            Tok::DefValue
        } else {
            Tok::Value
        }
    }
}

impl Iterator for Tokens<'_, '_> {
    type Item = Token;

    fn next(&mut self) -> Option<Token> {
        let mut t = self.scan()?;
        if t.tok == Tok::Value {
            t.tok = self.value_kind(t.start as usize, t.end as usize);
        }
        Some(t)
    }
}

/// Past the `:N` of a result group `%r:N` at `i` (no space inside, as MLIR writes it), or `i`.
fn skip_group_count(bytes: &[u8], i: usize) -> usize {
    let digits =
        bytes.get(i + 1..).map_or(0, |r| r.iter().take_while(|b| b.is_ascii_digit()).count());
    if bytes.get(i) == Some(&b':') && digits > 0 {
        i + 1 + digits
    } else {
        i
    }
}

/// The first byte at or after `i` that is not whitespace or in a `//` comment.
fn skip_trivia(bytes: &[u8], mut i: usize) -> usize {
    loop {
        match bytes.get(i) {
            Some(b' ' | b'\t' | b'\r' | b'\n' | b'\x0c') => i += 1,
            Some(b'/') if bytes.get(i + 1) == Some(&b'/') => {
                i += bytes[i..].iter().position(|&b| b == b'\n').unwrap_or(bytes.len() - i);
            }
            _ => return i,
        }
    }
}

/// The characters of a value name after `%` (the lexer's `%[A-Za-z0-9_$.\-]+`).
fn is_value_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'$' | b'.' | b'-' | b'#')
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

/// Scans a string body after its opening quote; `closed` if the closing quote was found.
/// A string never spans lines: an unterminated one ends before the newline, so the rest of the
/// file is still lexed normally.
fn lex_string(lex: &mut Lexer<'_, Tok>, closed: Tok, open: Tok) -> Tok {
    let bytes = lex.remainder().as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                lex.bump(i + 1);
                return closed;
            }
            b'\n' => break,
            // Skipping one byte after `\` may land inside a multi-byte character; that is fine,
            // continuation bytes are never `"`, `\` or a newline, and every stop is at one.
            b'\\' if bytes.get(i + 1).is_some_and(|&b| b != b'\n') => i += 2,
            _ => i += 1,
        }
    }
    lex.bump(i.min(bytes.len()));
    open
}

/// Scans a number after its first digit: decimal or hex integer, float, `2x3x` dimension list or
/// `64x64` shape.
fn lex_number(lex: &mut Lexer<'_, Tok>) -> Tok {
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
        return Tok::HexInt;
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
        return Tok::Float;
    }
    let e = exponent(i);
    if e > 0 {
        lex.bump(i + e);
        return Tok::Float;
    }
    let mut groups = 0;
    while rest.get(i) == Some(&b'x') {
        let n = digits(i + 1);
        if n == 0 {
            // `2x3x` followed by an element type.
            lex.bump(i + 1);
            return Tok::Dims;
        }
        i += 1 + n;
        groups += 1;
    }
    lex.bump(i);
    if groups > 0 {
        Tok::Shape
    } else {
        Tok::Int
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
        assert_eq!(kinds("tensor<2x3xf32> tensor<index> tensor<0xf32>"), [TensorType; 3]);
        assert_eq!(kinds("tensor<2x3xf32 >"), [KwTensor, Lt, Dims, ScalarType, Gt]);
        assert_eq!(texts("tensor< 2x3xf32>")[2], "2x3x");
        assert_eq!(kinds("tensor< 0xf32>"), [KwTensor, Lt, Dims, ScalarType, Gt]);
        assert_eq!(kinds("tensor<2xfoo>"), [KwTensor, Lt, Dims, BareIdent, Gt]);
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
    fn result_runs_look_through_comments_and_newlines() {
        use Tok::*;
        assert_eq!(kinds("%a, // c\n %b\n= x.y"), [DefValue, Comma, DefValue, Eq, DottedIdent]);
        assert_eq!(kinds("x.y %a, %b, %c"), [DottedIdent, Value, Comma, Value, Comma, Value]);
        assert_eq!(
            kinds("x.y %a, %b, %c = z.w"),
            [DottedIdent, DefValue, Comma, DefValue, Comma, DefValue, Eq, DottedIdent]
        );
        // A run is looked at once, however long, so this is linear.
        let run = format!("{}%z = x.y", "%a, ".repeat(200_000));
        assert_eq!(lex(&run, 10).0.iter().filter(|t| t.tok == DefValue).count(), 200_001);
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

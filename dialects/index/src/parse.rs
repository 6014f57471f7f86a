//! Lexer and recursive-descent parser for the MLIR-affine-style text syntax of
//! expressions and index maps.
//!
//! Grammar (loosest binding first, all binary operators left-associative):
//!
//! ```text
//! expr   := and
//! and    := shift ( '&' shift )*
//! shift  := sum ( ('<<' | '>>') sum )*
//! sum    := term ( ('+' | '-') term )*
//! term   := unary ( ('*' | 'floordiv' | 'ceildiv' | 'mod') unary )*
//! unary  := '-' INT | '-' unary | atom
//! atom   := INT | IDENT | '(' expr ')' | ('min' | 'max') '(' expr ',' expr ')'
//! map    := '(' idents? ')' ( '[' idents? ']' )? '->' '(' exprs? ')'
//! ```
//!
//! `-` directly followed by an integer literal is the negative literal (so
//! `-9223372036854775808` is `i64::MIN`); otherwise it is a `Neg` node.
//!
//! Invariants: the parser never panics and never recurses without bound.
//! Parenthesis / unary-minus / call nesting is capped at [`MAX_NESTING`], and
//! the height of the produced tree (which left-associative chains such as
//! `a + a + ... + a` grow without nesting) is capped at [`MAX_DEPTH`]; both
//! limits are reported as [`ParseError`]s with the byte offset of the token
//! that crossed them. Integer literals that do not fit `i64` are errors too.

use crate::expr::{BinOp, Expr};

/// Maximum nesting of parentheses, unary minus and `min`/`max` calls.
pub const MAX_NESTING: usize = 256;

/// Maximum height of an expression tree accepted by the parser (and produced
/// by composition). Keeps every recursive algorithm well inside the stack.
pub const MAX_DEPTH: usize = 512;

/// Reserved words: they can never be variable names.
const KEYWORDS: [&str; 5] = ["floordiv", "ceildiv", "mod", "min", "max"];

/// A syntax error with the byte offset where it was detected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("parse error at byte {offset}: {message}")]
pub struct ParseError {
    /// Byte offset into the parsed string.
    pub offset: usize,
    /// Human-readable description.
    pub message: String,
}

impl ParseError {
    pub(crate) fn new(offset: usize, message: impl Into<String>) -> Self {
        ParseError { offset, message: message.into() }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Tok {
    /// Magnitude of a literal; up to 2^63 so that `-2^63` can be written.
    Int(u64),
    Ident(String),
    Plus,
    Minus,
    Star,
    Amp,
    Shl,
    Shr,
    LParen,
    RParen,
    LBracket,
    RBracket,
    Comma,
    Arrow,
    Eof,
}

impl Tok {
    fn describe(&self) -> String {
        match self {
            Tok::Int(n) => format!("integer `{n}`"),
            Tok::Ident(s) => format!("`{s}`"),
            Tok::Plus => "`+`".into(),
            Tok::Minus => "`-`".into(),
            Tok::Star => "`*`".into(),
            Tok::Amp => "`&`".into(),
            Tok::Shl => "`<<`".into(),
            Tok::Shr => "`>>`".into(),
            Tok::LParen => "`(`".into(),
            Tok::RParen => "`)`".into(),
            Tok::LBracket => "`[`".into(),
            Tok::RBracket => "`]`".into(),
            Tok::Comma => "`,`".into(),
            Tok::Arrow => "`->`".into(),
            Tok::Eof => "end of input".into(),
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Token {
    pub(crate) tok: Tok,
    pub(crate) offset: usize,
}

const INT_LIMIT: u64 = 1 << 63;

fn lex(src: &str) -> Result<Vec<Token>, ParseError> {
    let bytes = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        let start = i;
        let two = |next: u8| bytes.get(i + 1) == Some(&next);
        let tok = match c {
            b' ' | b'\t' | b'\n' | b'\r' => {
                i += 1;
                continue;
            }
            b'0'..=b'9' => {
                let mut value: u64 = 0;
                while i < bytes.len() && bytes[i].is_ascii_digit() {
                    value = value
                        .checked_mul(10)
                        .and_then(|v| v.checked_add(u64::from(bytes[i] - b'0')))
                        .filter(|v| *v <= INT_LIMIT)
                        .ok_or_else(|| {
                            ParseError::new(start, "integer literal does not fit in 64 bits")
                        })?;
                    i += 1;
                }
                out.push(Token { tok: Tok::Int(value), offset: start });
                continue;
            }
            b'A'..=b'Z' | b'a'..=b'z' | b'_' => {
                while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                    i += 1;
                }
                out.push(Token { tok: Tok::Ident(src[start..i].to_string()), offset: start });
                continue;
            }
            b'+' => Tok::Plus,
            b'*' => Tok::Star,
            b'&' => Tok::Amp,
            b'(' => Tok::LParen,
            b')' => Tok::RParen,
            b'[' => Tok::LBracket,
            b']' => Tok::RBracket,
            b',' => Tok::Comma,
            b'-' if two(b'>') => Tok::Arrow,
            b'-' => Tok::Minus,
            b'<' if two(b'<') => Tok::Shl,
            b'>' if two(b'>') => Tok::Shr,
            _ => {
                // Report the whole (possibly multi-byte) character.
                let ch = src[i..].chars().next().unwrap_or('?');
                return Err(ParseError::new(i, format!("unexpected character `{ch}`")));
            }
        };
        i += match tok {
            Tok::Arrow | Tok::Shl | Tok::Shr => 2,
            _ => 1,
        };
        out.push(Token { tok, offset: start });
    }
    out.push(Token { tok: Tok::Eof, offset: src.len() });
    Ok(out)
}

/// Parser state over a token stream.
pub(crate) struct Parser {
    toks: Vec<Token>,
    pos: usize,
    nesting: usize,
}

type Parsed = Result<(Expr, usize), ParseError>;

impl Parser {
    pub(crate) fn new(src: &str) -> Result<Self, ParseError> {
        Ok(Parser { toks: lex(src)?, pos: 0, nesting: 0 })
    }

    pub(crate) fn peek(&self) -> &Token {
        // The stream always ends with Eof and `bump` never moves past it.
        &self.toks[self.pos.min(self.toks.len() - 1)]
    }

    pub(crate) fn bump(&mut self) -> Token {
        let t = self.peek().clone();
        if self.pos + 1 < self.toks.len() {
            self.pos += 1;
        }
        t
    }

    pub(crate) fn error_here(&self, what: &str) -> ParseError {
        let t = self.peek();
        ParseError::new(t.offset, format!("expected {what}, found {}", t.tok.describe()))
    }

    pub(crate) fn expect(&mut self, tok: &Tok, what: &str) -> Result<usize, ParseError> {
        if &self.peek().tok == tok {
            Ok(self.bump().offset)
        } else {
            Err(self.error_here(what))
        }
    }

    pub(crate) fn expect_eof(&self) -> Result<(), ParseError> {
        match self.peek().tok {
            Tok::Eof => Ok(()),
            _ => Err(self.error_here("end of input")),
        }
    }

    /// Parses an identifier that is not a keyword.
    pub(crate) fn ident(&mut self) -> Result<(String, usize), ParseError> {
        match &self.peek().tok {
            Tok::Ident(s) if !KEYWORDS.contains(&s.as_str()) => {
                let t = self.bump();
                match t.tok {
                    Tok::Ident(s) => Ok((s, t.offset)),
                    _ => Err(ParseError::new(t.offset, "expected identifier")),
                }
            }
            _ => Err(self.error_here("identifier")),
        }
    }

    /// Parses one full expression (not requiring end of input).
    pub(crate) fn expr(&mut self) -> Result<Expr, ParseError> {
        self.level(1).map(|(e, _)| e)
    }

    fn enter(&mut self, offset: usize) -> Result<(), ParseError> {
        self.nesting += 1;
        if self.nesting > MAX_NESTING {
            return Err(ParseError::new(
                offset,
                format!("expression nested deeper than {MAX_NESTING} levels"),
            ));
        }
        Ok(())
    }

    fn leave(&mut self) {
        self.nesting = self.nesting.saturating_sub(1);
    }

    fn binop_at(&self, level: u8) -> Option<BinOp> {
        let op = match (&self.peek().tok, level) {
            (Tok::Amp, 1) => BinOp::And,
            (Tok::Shl, 2) => BinOp::Shl,
            (Tok::Shr, 2) => BinOp::Shr,
            (Tok::Plus, 3) => BinOp::Add,
            (Tok::Minus, 3) => BinOp::Sub,
            (Tok::Star, 4) => BinOp::Mul,
            (Tok::Ident(s), 4) => match s.as_str() {
                "floordiv" => BinOp::FloorDiv,
                "ceildiv" => BinOp::CeilDiv,
                "mod" => BinOp::Mod,
                _ => return None,
            },
            _ => return None,
        };
        Some(op)
    }

    /// Binary levels 1..=4 by precedence climbing; the loop (not recursion)
    /// handles left-associative chains, so only nesting recurses.
    fn level(&mut self, level: u8) -> Parsed {
        if level > 4 {
            return self.unary();
        }
        let (mut lhs, mut depth) = self.level(level + 1)?;
        while let Some(op) = self.binop_at(level) {
            let at = self.bump().offset;
            let (rhs, rdepth) = self.level(level + 1)?;
            depth = 1 + depth.max(rdepth);
            if depth > MAX_DEPTH {
                return Err(ParseError::new(
                    at,
                    format!("expression tree deeper than {MAX_DEPTH} levels"),
                ));
            }
            lhs = Expr::binary(op, lhs, rhs);
        }
        Ok((lhs, depth))
    }

    fn unary(&mut self) -> Parsed {
        if self.peek().tok != Tok::Minus {
            return self.atom();
        }
        let at = self.bump().offset;
        if let Tok::Int(n) = self.peek().tok {
            self.bump();
            // n <= 2^63 is guaranteed by the lexer, so -n always fits.
            let value = i64::try_from(-i128::from(n))
                .map_err(|_| ParseError::new(at, "integer literal does not fit in 64 bits"))?;
            return Ok((Expr::Const(value), 1));
        }
        self.enter(at)?;
        let (inner, depth) = self.unary()?;
        self.leave();
        let depth = depth + 1;
        if depth > MAX_DEPTH {
            return Err(ParseError::new(
                at,
                format!("expression tree deeper than {MAX_DEPTH} levels"),
            ));
        }
        Ok((Expr::negate(inner), depth))
    }

    fn atom(&mut self) -> Parsed {
        let t = self.peek().clone();
        match t.tok {
            Tok::Int(n) => {
                self.bump();
                let value = i64::try_from(n).map_err(|_| {
                    ParseError::new(t.offset, "integer literal does not fit in i64")
                })?;
                Ok((Expr::Const(value), 1))
            }
            Tok::LParen => {
                self.bump();
                self.enter(t.offset)?;
                let inner = self.level(1)?;
                self.expect(&Tok::RParen, "`)`")?;
                self.leave();
                Ok(inner)
            }
            Tok::Ident(ref s) if s == "min" || s == "max" => {
                let op = if s == "min" { BinOp::Min } else { BinOp::Max };
                self.bump();
                self.enter(t.offset)?;
                self.expect(&Tok::LParen, &format!("`(` after `{s}`"))?;
                let (a, da) = self.level(1)?;
                self.expect(&Tok::Comma, "`,`")?;
                let (b, db) = self.level(1)?;
                self.expect(&Tok::RParen, "`)`")?;
                self.leave();
                let depth = 1 + da.max(db);
                if depth > MAX_DEPTH {
                    return Err(ParseError::new(
                        t.offset,
                        format!("expression tree deeper than {MAX_DEPTH} levels"),
                    ));
                }
                Ok((Expr::binary(op, a, b), depth))
            }
            Tok::Ident(ref s) if KEYWORDS.contains(&s.as_str()) => {
                Err(ParseError::new(t.offset, format!("expected an operand, found keyword `{s}`")))
            }
            Tok::Ident(s) => {
                self.bump();
                Ok((Expr::Var(s), 1))
            }
            _ => Err(self.error_here("an operand")),
        }
    }
}

impl Expr {
    /// Parses MLIR-affine-style text such as `d0 floordiv 4 + d1 mod 64`.
    ///
    /// Never panics; malformed input, literals outside `i64` and nesting
    /// beyond [`MAX_NESTING`] / [`MAX_DEPTH`] are reported as [`ParseError`].
    pub fn parse(src: &str) -> Result<Expr, ParseError> {
        let mut p = Parser::new(src)?;
        let e = p.expr()?;
        p.expect_eof()?;
        Ok(e)
    }
}

impl std::str::FromStr for Expr {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Expr::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Expr {
        Expr::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn precedence_and_associativity() {
        assert_eq!(p("a + b * c").to_string(), "a + b * c");
        assert_eq!(p("(a + b) * c").to_string(), "(a + b) * c");
        assert_eq!(p("a - b - c"), p("(a - b) - c"));
        assert_eq!(p("a & b << 2 + c * 3"), p("a & (b << (2 + (c * 3)))"));
        assert_eq!(p("d0 floordiv 4 + d1 mod 64").to_string(), "d0 floordiv 4 + d1 mod 64");
        assert_eq!(p("-x floordiv 2"), Expr::binary(BinOp::FloorDiv, -Expr::var("x"), 2.into()));
        assert_eq!(p("-5"), Expr::Const(-5));
        assert_eq!(p("- (5)"), -Expr::Const(5));
        assert_eq!(p("-9223372036854775808"), Expr::Const(i64::MIN));
        assert_eq!(p("min(a, max(b, 3))").to_string(), "min(a, max(b, 3))");
    }

    #[test]
    fn errors_are_located() {
        let e = Expr::parse("d0 + ").unwrap_err();
        assert_eq!(e.offset, 5);
        let e = Expr::parse("d0 $ 1").unwrap_err();
        assert_eq!(e.offset, 3);
        let e = Expr::parse("9223372036854775808").unwrap_err();
        assert_eq!(e.offset, 0);
        let e = Expr::parse("1 + 99999999999999999999999").unwrap_err();
        assert_eq!(e.offset, 4);
        let e = Expr::parse("mod + 1").unwrap_err();
        assert_eq!(e.offset, 0);
        let e = Expr::parse("(a + b").unwrap_err();
        assert_eq!(e.offset, 6);
        let e = Expr::parse("a b").unwrap_err();
        assert_eq!(e.offset, 2);
        assert!(Expr::parse("").is_err());
        assert!(Expr::parse("é").is_err());
        assert!(Expr::parse("min(a)").is_err());
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_crash() {
        let deep = format!("{}x{}", "(".repeat(100_000), ")".repeat(100_000));
        assert!(Expr::parse(&deep).unwrap_err().message.contains("nested"));
        let minus = format!("{}x", "-".repeat(100_000));
        assert!(Expr::parse(&minus).is_err());
        let chain = vec!["x"; 100_000].join(" + ");
        assert!(Expr::parse(&chain).unwrap_err().message.contains("deeper"));
        let ok = format!("{}x{}", "(".repeat(MAX_NESTING), ")".repeat(MAX_NESTING));
        assert_eq!(Expr::parse(&ok), Ok(Expr::var("x")));
    }
}

//! [`Scalar`] expressions: the text form of `body` and `epilogue` (parser and printer, which
//! round-trip), their static kinds, evaluation, and an operation count for benchmarks.
//!
//! Grammar, loosest binding first (every binary level is left associative):
//!
//! ```text
//! expr    := and ('||' and)*
//! and     := cmp ('&&' cmp)*
//! cmp     := add (('<' | '<=' | '>' | '>=' | '==' | '!=') add)*
//! add     := mul (('+' | '-') mul)*
//! mul     := unary (('*' | '/' | '%') unary)*
//! unary   := '-' unary | '!' unary | primary
//! primary := INT | FLOAT | 'inf' | 'nan' | 'xK' | 'xK' '[' expr ']' | 'dK' | 'acc'
//!          | CALL '(' expr (',' expr)* ')' | '(' expr ')'
//! ```
//!
//! A `-` directly before a literal is part of the literal (`-2` is `Int(-2)`), so a negation of a
//! literal prints as `-(2)`. The printer writes the fewest parentheses that parse back to the
//! same tree.

use std::fmt::{self, Write as _};

use fbc_ir::ElemType;

use super::kernel::{Scalar, ScalarBin, ScalarUn};

/// Why a `body` or `epilogue` string does not parse: a message and the byte offset in the string.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message} (at byte {offset})")]
pub struct ScalarError {
    /// Byte offset into the expression text.
    pub offset: usize,
    pub message: String,
}

/// A value a scalar expression computes: `f32`, or a 64-bit integer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ScalarValue {
    /// An `f32`.
    F32(f32),
    /// A 64-bit integer (dims, integer literals, reads of `i32` storage).
    Int(i64),
}

impl ScalarValue {
    /// As `f32` (integers convert, rounding to nearest).
    pub fn as_f32(self) -> f32 {
        match self {
            ScalarValue::F32(v) => v,
            ScalarValue::Int(v) => v as f32,
        }
    }

    /// Whether the value is non-zero (the truth of a condition).
    pub fn truth(self) -> bool {
        match self {
            ScalarValue::F32(v) => v != 0.0,
            ScalarValue::Int(v) => v != 0,
        }
    }
}

/// The static kind of a scalar expression.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScalarKind {
    /// `f32`.
    Float,
    /// 64-bit integer.
    Int,
}

impl ScalarKind {
    /// The kind of values read from storage of element type `e`.
    pub fn of_elem(e: ElemType) -> ScalarKind {
        if e.is_float() {
            ScalarKind::Float
        } else {
            ScalarKind::Int
        }
    }

    /// For messages: `f32` or `integer`.
    pub fn name(self) -> &'static str {
        match self {
            ScalarKind::Float => "f32",
            ScalarKind::Int => "integer",
        }
    }
}

const UNARY_CALLS: &[(&str, ScalarUn)] = &[
    ("exp", ScalarUn::Exp),
    ("log", ScalarUn::Log),
    ("sqrt", ScalarUn::Sqrt),
    ("rsqrt", ScalarUn::Rsqrt),
    ("tanh", ScalarUn::Tanh),
    ("erf", ScalarUn::Erf),
    ("sigmoid", ScalarUn::Sigmoid),
    ("abs", ScalarUn::Abs),
    ("floor", ScalarUn::Floor),
    ("int", ScalarUn::ToInt),
    ("float", ScalarUn::ToFloat),
];

impl ScalarUn {
    /// The call name (`exp`), or `-` / `!` for the prefix operators.
    pub fn name(self) -> &'static str {
        match self {
            ScalarUn::Neg => "-",
            ScalarUn::Not => "!",
            _ => UNARY_CALLS.iter().find(|(_, u)| *u == self).map_or("?", |(n, _)| n),
        }
    }

    /// Whether it is a transcendental function (counted as one op like the others, listed for
    /// cost models that weigh them).
    pub fn is_transcendental(self) -> bool {
        matches!(
            self,
            ScalarUn::Exp
                | ScalarUn::Log
                | ScalarUn::Sqrt
                | ScalarUn::Rsqrt
                | ScalarUn::Tanh
                | ScalarUn::Erf
                | ScalarUn::Sigmoid
        )
    }
}

impl ScalarBin {
    /// The operator's text (`+`), or the call name for `max` and `min`.
    pub fn symbol(self) -> &'static str {
        match self {
            ScalarBin::Add => "+",
            ScalarBin::Sub => "-",
            ScalarBin::Mul => "*",
            ScalarBin::Div => "/",
            ScalarBin::Rem => "%",
            ScalarBin::Max => "max",
            ScalarBin::Min => "min",
            ScalarBin::Lt => "<",
            ScalarBin::Le => "<=",
            ScalarBin::Gt => ">",
            ScalarBin::Ge => ">=",
            ScalarBin::Eq => "==",
            ScalarBin::Ne => "!=",
            ScalarBin::And => "&&",
            ScalarBin::Or => "||",
        }
    }

    /// Binding strength of the infix operators (higher binds tighter); `max`/`min` are calls.
    fn prec(self) -> u8 {
        match self {
            ScalarBin::Or => 1,
            ScalarBin::And => 2,
            ScalarBin::Lt
            | ScalarBin::Le
            | ScalarBin::Gt
            | ScalarBin::Ge
            | ScalarBin::Eq
            | ScalarBin::Ne => 3,
            ScalarBin::Add | ScalarBin::Sub => 4,
            ScalarBin::Mul | ScalarBin::Div | ScalarBin::Rem => 5,
            ScalarBin::Max | ScalarBin::Min => PREC_ATOM,
        }
    }

    fn is_comparison(self) -> bool {
        self.prec() == 3
    }
}

const PREC_UNARY: u8 = 6;
const PREC_ATOM: u8 = 7;

// ----- parsing -----------------------------------------------------------------------------------

impl Scalar {
    /// Parses the text form documented in [`kernel`](super::kernel).
    pub fn parse(text: &str) -> Result<Scalar, ScalarError> {
        let mut p = Parser { s: text.as_bytes(), pos: 0, depth: 0 };
        let e = p.expr()?;
        p.skip_ws();
        if p.pos < p.s.len() {
            return Err(p.err(format!("unexpected `{}` after the expression", p.rest_token())));
        }
        Ok(e)
    }
}

/// Nesting limit of the parser, so that hostile input cannot overflow the stack (left-associative
/// chains such as `x0 + x1 + ... + xN` do not nest: the parser loops over them).
pub const MAX_DEPTH: usize = 200;

/// The deepest tree a pass may build: its text form nests at most `2·64 + 1 <` [`MAX_DEPTH`]
/// levels in the parser, so whatever a pass makes the verifier reads back.
pub const MAX_TREE_DEPTH: usize = 64;

/// `text` for a message: whole when short, else about 60 characters around byte `offset` with
/// `...` where it was cut.
pub fn excerpt(text: &str, offset: usize) -> String {
    const WIDTH: usize = 60;
    if text.len() <= WIDTH + 20 {
        return text.to_string();
    }
    let floor = |mut i: usize| {
        i = i.min(text.len());
        while !text.is_char_boundary(i) {
            i -= 1;
        }
        i
    };
    let start = floor(offset.saturating_sub(WIDTH / 2));
    let end = floor(start + WIDTH);
    let pre = if start > 0 { "..." } else { "" };
    let post = if end < text.len() { "..." } else { "" };
    format!("{pre}{}{post}", &text[start..end])
}

struct Parser<'a> {
    s: &'a [u8],
    pos: usize,
    depth: usize,
}

impl Parser<'_> {
    fn err(&self, message: impl Into<String>) -> ScalarError {
        ScalarError { offset: self.pos, message: message.into() }
    }

    fn skip_ws(&mut self) {
        while self.pos < self.s.len() && self.s[self.pos].is_ascii_whitespace() {
            self.pos += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.skip_ws();
        self.s.get(self.pos).copied()
    }

    fn rest_token(&self) -> String {
        let rest = &self.s[self.pos..];
        let n = rest.iter().take_while(|c| !c.is_ascii_whitespace()).count().clamp(1, 12);
        String::from_utf8_lossy(&rest[..n.min(rest.len())]).into_owned()
    }

    /// Consumes `tok` if it comes next.
    fn eat(&mut self, tok: &str) -> bool {
        self.skip_ws();
        if self.s[self.pos..].starts_with(tok.as_bytes()) {
            self.pos += tok.len();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, tok: &str, what: &str) -> Result<(), ScalarError> {
        if self.eat(tok) {
            Ok(())
        } else if self.peek().is_none() {
            Err(self.err(format!("expected `{tok}` {what}, found the end")))
        } else {
            Err(self.err(format!("expected `{tok}` {what}, found `{}`", self.rest_token())))
        }
    }

    fn enter(&mut self) -> Result<(), ScalarError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.err(format!("expression nested deeper than {MAX_DEPTH} levels")));
        }
        Ok(())
    }

    fn expr(&mut self) -> Result<Scalar, ScalarError> {
        self.enter()?;
        let r = self.binary(1);
        self.depth -= 1;
        r
    }

    /// The binary operator at the cursor, if its precedence is `prec`; not consumed.
    fn bin_op(&mut self, prec: u8) -> Option<(ScalarBin, usize)> {
        self.skip_ws();
        let rest = &self.s[self.pos..];
        let two = |a: &[u8]| rest.starts_with(a);
        let op = match prec {
            1 if two(b"||") => (ScalarBin::Or, 2),
            2 if two(b"&&") => (ScalarBin::And, 2),
            3 if two(b"<=") => (ScalarBin::Le, 2),
            3 if two(b">=") => (ScalarBin::Ge, 2),
            3 if two(b"==") => (ScalarBin::Eq, 2),
            3 if two(b"!=") => (ScalarBin::Ne, 2),
            3 if two(b"<") => (ScalarBin::Lt, 1),
            3 if two(b">") => (ScalarBin::Gt, 1),
            4 if two(b"+") => (ScalarBin::Add, 1),
            4 if two(b"-") => (ScalarBin::Sub, 1),
            5 if two(b"*") => (ScalarBin::Mul, 1),
            5 if two(b"/") => (ScalarBin::Div, 1),
            5 if two(b"%") => (ScalarBin::Rem, 1),
            _ => return None,
        };
        Some(op)
    }

    fn binary(&mut self, prec: u8) -> Result<Scalar, ScalarError> {
        if prec == PREC_UNARY {
            return self.unary();
        }
        let mut lhs = self.binary(prec + 1)?;
        while let Some((op, len)) = self.bin_op(prec) {
            self.pos += len;
            let rhs = self.binary(prec + 1)?;
            lhs = Scalar::Bin(op, Box::new(lhs), Box::new(rhs));
        }
        Ok(lhs)
    }

    fn unary(&mut self) -> Result<Scalar, ScalarError> {
        self.enter()?;
        let r = self.unary_inner();
        self.depth -= 1;
        r
    }

    fn unary_inner(&mut self) -> Result<Scalar, ScalarError> {
        match self.peek() {
            Some(b'-') => {
                self.pos += 1;
                self.skip_ws();
                if self.s.get(self.pos).is_some_and(u8::is_ascii_digit) {
                    return self.number(true);
                }
                for (word, v) in [("inf", f64::NEG_INFINITY), ("nan", -f64::NAN)] {
                    let rest = &self.s[self.pos..];
                    let ends = |n: usize| {
                        rest.get(n).is_none_or(|c| !(c.is_ascii_alphanumeric() || *c == b'_'))
                    };
                    if rest.starts_with(word.as_bytes()) && ends(word.len()) {
                        self.pos += word.len();
                        return Ok(Scalar::Float(v));
                    }
                }
                Ok(Scalar::Un(ScalarUn::Neg, Box::new(self.unary()?)))
            }
            Some(b'!') => {
                self.pos += 1;
                Ok(Scalar::Un(ScalarUn::Not, Box::new(self.unary()?)))
            }
            _ => self.primary(),
        }
    }

    fn primary(&mut self) -> Result<Scalar, ScalarError> {
        match self.peek() {
            None => Err(self.err("expected an expression, found the end")),
            Some(b'(') => {
                self.pos += 1;
                let e = self.expr()?;
                self.expect(")", "to close `(`")?;
                Ok(e)
            }
            Some(c) if c.is_ascii_digit() => self.number(false),
            Some(c) if c.is_ascii_alphabetic() || c == b'_' => self.word(),
            Some(_) => {
                Err(self.err(format!("expected an expression, found `{}`", self.rest_token())))
            }
        }
    }

    /// An integer or float literal (the cursor is on its first digit); `neg` when a `-` preceded.
    fn number(&mut self, neg: bool) -> Result<Scalar, ScalarError> {
        let start = self.pos;
        let digits = |p: &mut Parser<'_>| {
            while p.s.get(p.pos).is_some_and(u8::is_ascii_digit) {
                p.pos += 1;
            }
        };
        digits(self);
        let mut float = false;
        if self.s.get(self.pos) == Some(&b'.') {
            float = true;
            self.pos += 1;
            let f = self.pos;
            digits(self);
            if self.pos == f {
                return Err(self.err("expected digits after `.` in a float literal"));
            }
        }
        if matches!(self.s.get(self.pos), Some(b'e' | b'E')) {
            float = true;
            self.pos += 1;
            if matches!(self.s.get(self.pos), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            let f = self.pos;
            digits(self);
            if self.pos == f {
                return Err(self.err("expected digits in the exponent of a float literal"));
            }
        }
        if self.s.get(self.pos).is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_') {
            return Err(self.err(format!("unexpected `{}` in a number", self.rest_token())));
        }
        // Only ASCII digits, `.`, `e`, signs were consumed.
        let text = std::str::from_utf8(&self.s[start..self.pos]).unwrap_or("0");
        if float {
            let v: f64 = text.parse().map_err(|_| ScalarError {
                offset: start,
                message: format!("malformed float literal `{text}`"),
            })?;
            Ok(Scalar::Float(if neg { -v } else { v }))
        } else {
            let v: i128 = text.parse().unwrap_or(i128::MAX);
            let v = if neg { -v } else { v };
            i64::try_from(v).map(Scalar::Int).map_err(|_| ScalarError {
                offset: start,
                message: format!("integer literal `{text}` does not fit in 64 bits"),
            })
        }
    }

    fn word(&mut self) -> Result<Scalar, ScalarError> {
        let start = self.pos;
        while self.s.get(self.pos).is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_') {
            self.pos += 1;
        }
        let w = std::str::from_utf8(&self.s[start..self.pos]).unwrap_or("");
        let index = |digits: &str| -> Result<usize, ScalarError> {
            if digits.len() > 1 && digits.starts_with('0') {
                return Err(ScalarError {
                    offset: start,
                    message: format!("`{w}`: an index has no leading zeros"),
                });
            }
            digits.parse::<u32>().map(|v| v as usize).map_err(|_| ScalarError {
                offset: start,
                message: format!("`{w}`: index out of range"),
            })
        };
        let numeric = |rest: &str| !rest.is_empty() && rest.bytes().all(|c| c.is_ascii_digit());
        match w {
            "acc" => return Ok(Scalar::Acc),
            "inf" => return Ok(Scalar::Float(f64::INFINITY)),
            "nan" => return Ok(Scalar::Float(f64::NAN)),
            _ => {}
        }
        if let Some(rest) = w.strip_prefix('x').filter(|r| numeric(r)) {
            let k = index(rest)?;
            if self.eat("[") {
                let off = self.expr()?;
                self.expect("]", "to close the element offset")?;
                return Ok(Scalar::Load(k, Box::new(off)));
            }
            return Ok(Scalar::In(k));
        }
        if let Some(rest) = w.strip_prefix('d').filter(|r| numeric(r)) {
            return Ok(Scalar::Dim(index(rest)?));
        }
        if let Some(rest) = w.strip_prefix('s').filter(|r| numeric(r)) {
            return Ok(Scalar::Stat(index(rest)?));
        }
        let call = |n: usize| -> Option<&'static str> {
            match (w, n) {
                ("max" | "min", 2) | ("select", 3) => Some(""),
                _ => None,
            }
        };
        let un = UNARY_CALLS.iter().find(|(n, _)| *n == w).map(|(_, u)| *u);
        let arity = if un.is_some() {
            1
        } else if call(2).is_some() {
            2
        } else if call(3).is_some() {
            3
        } else {
            return Err(ScalarError {
                offset: start,
                message: format!(
                    "unknown name `{w}`; expected xK, dK, sK, acc, inf, nan or a call ({}, max, min, select)",
                    UNARY_CALLS.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
                ),
            });
        };
        self.expect("(", &format!("after `{w}`"))?;
        let mut args = Vec::with_capacity(arity);
        for i in 0..arity {
            if i > 0 {
                self.expect(",", &format!("between the arguments of `{w}` (it takes {arity})"))?;
            }
            args.push(self.expr()?);
        }
        self.expect(")", &format!("to close `{w}(` (it takes {arity} argument(s))"))?;
        let mut it = args.into_iter().map(Box::new);
        let mut next = || it.next().unwrap_or_else(|| Box::new(Scalar::Int(0)));
        Ok(match (un, w) {
            (Some(u), _) => Scalar::Un(u, next()),
            (None, "max") => Scalar::Bin(ScalarBin::Max, next(), next()),
            (None, "min") => Scalar::Bin(ScalarBin::Min, next(), next()),
            _ => {
                let (c, a, b) = (next(), next(), next());
                Scalar::Select(c, a, b)
            }
        })
    }
}

// ----- printing ----------------------------------------------------------------------------------

impl Scalar {
    /// Binding strength of this expression's printed form.
    fn prec(&self) -> u8 {
        match self {
            Scalar::Int(v) if *v < 0 => PREC_UNARY,
            Scalar::Float(v) if v.is_sign_negative() && !v.is_nan() => PREC_UNARY,
            Scalar::Un(ScalarUn::Neg | ScalarUn::Not, _) => PREC_UNARY,
            Scalar::Bin(op, _, _) => op.prec(),
            _ => PREC_ATOM,
        }
    }

    /// Writes the expression with the fewest parentheses, without recursion: an explicit stack
    /// of pending nodes and text, so a payload of any depth prints in time linear in its size.
    fn write(&self, f: &mut fmt::Formatter<'_>, min_prec: u8) -> fmt::Result {
        enum Task<'a> {
            Node(&'a Scalar, u8),
            Text(&'static str),
        }
        let mut stack = vec![Task::Node(self, min_prec)];
        while let Some(task) = stack.pop() {
            let (e, min_prec) = match task {
                Task::Text(t) => {
                    f.write_str(t)?;
                    continue;
                }
                Task::Node(e, p) => (e, p),
            };
            let paren = e.prec() < min_prec;
            if paren {
                f.write_char('(')?;
                stack.push(Task::Text(")"));
            }
            // Pushed in reverse: the last pushed is written first.
            match e {
                Scalar::Int(v) => write!(f, "{v}")?,
                Scalar::Float(v) => write_float(f, *v)?,
                Scalar::In(k) => write!(f, "x{k}")?,
                Scalar::Load(k, a) => {
                    write!(f, "x{k}[")?;
                    stack.extend([Task::Text("]"), Task::Node(a, 0)]);
                }
                Scalar::Dim(k) => write!(f, "d{k}")?,
                Scalar::Stat(k) => write!(f, "s{k}")?,
                Scalar::Acc => f.write_str("acc")?,
                Scalar::Un(op @ (ScalarUn::Neg | ScalarUn::Not), a) => {
                    f.write_str(op.name())?;
                    // `-(2)`: a `-` right before a literal would read as part of it.
                    let literal = matches!(**a, Scalar::Int(_) | Scalar::Float(_))
                        && *op == ScalarUn::Neg
                        && a.prec() == PREC_ATOM;
                    stack.push(Task::Node(a, if literal { PREC_ATOM + 1 } else { PREC_UNARY }));
                }
                Scalar::Un(op, a) => {
                    write!(f, "{}(", op.name())?;
                    stack.extend([Task::Text(")"), Task::Node(a, 0)]);
                }
                Scalar::Bin(op @ (ScalarBin::Max | ScalarBin::Min), a, b) => {
                    write!(f, "{}(", op.symbol())?;
                    stack.extend([
                        Task::Text(")"),
                        Task::Node(b, 0),
                        Task::Text(", "),
                        Task::Node(a, 0),
                    ]);
                }
                Scalar::Bin(op, a, b) => {
                    let p = op.prec();
                    let sym = match op {
                        ScalarBin::Add => " + ",
                        ScalarBin::Sub => " - ",
                        ScalarBin::Mul => " * ",
                        ScalarBin::Div => " / ",
                        ScalarBin::Rem => " % ",
                        ScalarBin::Lt => " < ",
                        ScalarBin::Le => " <= ",
                        ScalarBin::Gt => " > ",
                        ScalarBin::Ge => " >= ",
                        ScalarBin::Eq => " == ",
                        ScalarBin::Ne => " != ",
                        ScalarBin::And => " && ",
                        ScalarBin::Or => " || ",
                        ScalarBin::Max | ScalarBin::Min => unreachable!("calls are above"),
                    };
                    stack.extend([Task::Node(b, p + 1), Task::Text(sym), Task::Node(a, p)]);
                }
                Scalar::Select(c, a, b) => {
                    f.write_str("select(")?;
                    stack.extend([
                        Task::Text(")"),
                        Task::Node(b, 0),
                        Task::Text(", "),
                        Task::Node(a, 0),
                        Task::Text(", "),
                        Task::Node(c, 0),
                    ]);
                }
            }
        }
        Ok(())
    }
}

/// A float literal that reads back to the same `f64`: always with a `.` or an exponent;
/// `inf`, `-inf`, `nan`.
fn write_float(f: &mut fmt::Formatter<'_>, v: f64) -> fmt::Result {
    if v.is_nan() {
        return f.write_str("nan");
    }
    if v.is_infinite() {
        return f.write_str(if v > 0.0 { "inf" } else { "-inf" });
    }
    fbc_ir::attr::write_float(f, v)
}

impl fmt::Display for Scalar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write(f, 0)
    }
}

/// Dropped without recursion: a payload of any depth is freed with an explicit stack.
impl Drop for Scalar {
    fn drop(&mut self) {
        fn detach(e: &mut Scalar, out: &mut Vec<Scalar>) {
            let mut take = |b: &mut Box<Scalar>| {
                if !matches!(
                    **b,
                    Scalar::Float(_)
                        | Scalar::Int(_)
                        | Scalar::In(_)
                        | Scalar::Dim(_)
                        | Scalar::Stat(_)
                        | Scalar::Acc
                ) {
                    out.push(std::mem::replace(&mut **b, Scalar::Acc));
                }
            };
            match e {
                Scalar::Load(_, a) | Scalar::Un(_, a) => take(a),
                Scalar::Bin(_, a, b) => {
                    take(a);
                    take(b);
                }
                Scalar::Select(c, a, b) => {
                    take(c);
                    take(a);
                    take(b);
                }
                _ => {}
            }
        }
        let mut pending = Vec::new();
        detach(self, &mut pending);
        while let Some(mut e) = pending.pop() {
            // `e`'s children are detached first, so dropping `e` itself recurses no further.
            detach(&mut e, &mut pending);
        }
    }
}

// ----- analysis ----------------------------------------------------------------------------------

impl Scalar {
    /// Calls `f` on this expression and every subexpression, parents first (left to right),
    /// without recursion.
    pub fn visit(&self, f: &mut dyn FnMut(&Scalar)) {
        let mut stack = vec![self];
        while let Some(e) = stack.pop() {
            f(e);
            match e {
                Scalar::Load(_, a) | Scalar::Un(_, a) => stack.push(a),
                Scalar::Bin(_, a, b) => stack.extend([&**b, &**a]),
                Scalar::Select(c, a, b) => stack.extend([&**b, &**a, &**c]),
                _ => {}
            }
        }
    }

    /// The direct subexpressions, left to right.
    pub fn children(&self) -> impl Iterator<Item = &Scalar> {
        let (a, b, c): (Option<&Scalar>, Option<&Scalar>, Option<&Scalar>) = match self {
            Scalar::Load(_, a) | Scalar::Un(_, a) => (Some(a), None, None),
            Scalar::Bin(_, a, b) => (Some(a), Some(b), None),
            Scalar::Select(c, a, b) => (Some(c), Some(a), Some(b)),
            _ => (None, None, None),
        };
        a.into_iter().chain(b).chain(c)
    }

    /// Number of nodes (leaves included).
    pub fn size(&self) -> usize {
        let mut n = 0;
        self.visit(&mut |_| n += 1);
        n
    }

    /// Height of the tree: 1 for a leaf. Computed without recursion. The text form of an
    /// expression of depth `d` nests at most `2·d + 1` levels deep in the parser, so depths up
    /// to [`MAX_TREE_DEPTH`] always read back.
    pub fn depth(&self) -> usize {
        let mut deepest = 0;
        let mut stack = vec![(self, 1usize)];
        while let Some((e, d)) = stack.pop() {
            deepest = deepest.max(d);
            stack.extend(e.children().map(|c| (c, d + 1)));
        }
        deepest
    }

    /// Arithmetic operations on data per evaluation (a flop estimate): every unary and binary
    /// operator whose operands read storage, a statistic, `acc` or a float literal counts 1,
    /// transcendental functions too. Index arithmetic on domain indices and integer literals
    /// alone (a convolution's padding test, a gather's offset) counts 0, as do `select`, leaves
    /// and loads.
    pub fn count_ops(&self) -> u64 {
        // (ops counted, whether the subexpression reads data), bottom up.
        fn walk(e: &Scalar) -> (u64, bool) {
            let (mut n, mut data) = (0, false);
            for c in e.children() {
                let (cn, cd) = walk(c);
                n += cn;
                data |= cd;
            }
            match e {
                Scalar::In(_)
                | Scalar::Load(..)
                | Scalar::Stat(_)
                | Scalar::Acc
                | Scalar::Float(_) => (n, true),
                Scalar::Un(..) | Scalar::Bin(..) => (n + u64::from(data), data),
                _ => (n, data),
            }
        }
        walk(self).0
    }

    /// Whether evaluating the expression can fail by its arithmetic alone: an integer `/` or `%`
    /// whose divisor is not a non-zero literal (division by zero), or `int()` of an f32 value
    /// (NaN). `operand` and `acc` as for [`Scalar::kind`].
    pub fn arithmetic_can_fail(
        &self,
        operand: &dyn Fn(usize) -> Option<ScalarKind>,
        acc: Option<ScalarKind>,
    ) -> bool {
        let int = |e: &Scalar| e.kind(operand, acc).ok() == Some(ScalarKind::Int);
        let mut fails = false;
        self.visit(&mut |e| {
            fails = fails
                || match e {
                    Scalar::Bin(ScalarBin::Div | ScalarBin::Rem, a, b) => {
                        !matches!(**b, Scalar::Int(v) if v != 0) && int(a) && int(b)
                    }
                    Scalar::Un(ScalarUn::ToInt, a) => !int(a),
                    _ => false,
                };
        });
        fails
    }

    /// The static kind of the expression, or why it is ill-kinded. `operand` gives the kind of
    /// each operand's elements (`None` if there is no such operand), `acc` the kind of
    /// [`Scalar::Acc`] (`None` where it may not appear).
    pub fn kind(
        &self,
        operand: &dyn Fn(usize) -> Option<ScalarKind>,
        acc: Option<ScalarKind>,
    ) -> Result<ScalarKind, String> {
        use ScalarKind::{Float, Int};
        // Post-order with an explicit stack (no recursion, so any depth is fine): a node is
        // finished once its children's kinds are on `kinds`, left to right.
        enum Task<'a> {
            Visit(&'a Scalar),
            Finish(&'a Scalar),
        }
        let mut stack = vec![Task::Visit(self)];
        let mut kinds: Vec<ScalarKind> = Vec::new();
        while let Some(task) = stack.pop() {
            let e = match task {
                Task::Visit(e) => {
                    let leaf = match e {
                        Scalar::Float(_) => Some(Float),
                        Scalar::Int(_) | Scalar::Dim(_) => Some(Int),
                        Scalar::Stat(_) => Some(Float),
                        Scalar::In(k) => {
                            Some(operand(*k).ok_or_else(|| format!("`x{k}`: no operand {k}"))?)
                        }
                        Scalar::Acc => Some(acc.ok_or("`acc` is only allowed in an epilogue")?),
                        Scalar::Load(k, _) => {
                            operand(*k).ok_or_else(|| format!("`x{k}[..]`: no operand {k}"))?;
                            None
                        }
                        _ => None,
                    };
                    match leaf {
                        Some(k) => kinds.push(k),
                        None => {
                            stack.push(Task::Finish(e));
                            let children: Vec<&Scalar> = e.children().collect();
                            stack.extend(children.into_iter().rev().map(Task::Visit));
                        }
                    }
                    continue;
                }
                Task::Finish(e) => e,
            };
            let n = e.children().count();
            let ks = kinds.split_off(kinds.len() - n);
            let k = match e {
                Scalar::Load(k, off) => {
                    if ks[0] != Int {
                        return Err(format!(
                            "the element offset of `x{k}[..]` must be an integer, found an f32 \
                             expression `{}`",
                            off.brief()
                        ));
                    }
                    operand(*k).unwrap_or(Int)
                }
                Scalar::Un(op, _) => match op {
                    ScalarUn::Neg | ScalarUn::Abs | ScalarUn::Floor => ks[0],
                    ScalarUn::Not | ScalarUn::ToInt => Int,
                    _ => Float,
                },
                Scalar::Bin(op, _, _) => {
                    let (ka, kb) = (ks[0], ks[1]);
                    let logical =
                        op.is_comparison() || matches!(op, ScalarBin::And | ScalarBin::Or);
                    if logical || (ka == Int && kb == Int) {
                        Int
                    } else if *op == ScalarBin::Rem {
                        return Err(format!(
                            "`%` needs two integer operands, found `{}`",
                            e.brief()
                        ));
                    } else {
                        Float
                    }
                }
                Scalar::Select(..) => {
                    let (ka, kb) = (ks[1], ks[2]);
                    if ka != kb {
                        return Err(format!(
                            "the branches of `select` must have the same kind, found {} and {} \
                             in `{}`",
                            ka.name(),
                            kb.name(),
                            e.brief()
                        ));
                    }
                    ka
                }
                _ => unreachable!("leaves are finished when visited"),
            };
            kinds.push(k);
        }
        Ok(kinds.pop().unwrap_or(Int))
    }

    /// The printed expression, cut to about 60 characters for a message.
    pub fn brief(&self) -> String {
        excerpt(&self.to_string(), 0)
    }
}

// ----- evaluation --------------------------------------------------------------------------------

/// What an expression reads while it is evaluated; see [`Scalar::eval`].
pub trait ScalarEnv {
    /// Operand `k` at its index map, at the current point.
    fn input(&mut self, k: usize) -> Result<ScalarValue, String>;
    /// Operand `k` (a buffer) at element `offset`.
    fn load(&mut self, k: usize, offset: i64) -> Result<ScalarValue, String>;
    /// Domain index `k` at the current point.
    fn dim(&mut self, k: usize) -> Result<i64, String>;
    /// The reduction result (epilogues only).
    fn acc(&mut self) -> Result<ScalarValue, String>;
    /// Row statistic `k` of the current parallel point (row kernels only).
    fn stat(&mut self, k: usize) -> Result<ScalarValue, String> {
        Err(format!("`s{k}`: no row statistics here"))
    }
}

/// A [`ScalarEnv`] made of closures.
#[allow(missing_debug_implementations)]
pub struct FnEnv<I, L, D> {
    /// `input(k)`: operand `k` at its map.
    pub input: I,
    /// `load(k, offset)`: operand `k` at an element offset.
    pub load: L,
    /// `dim(k)`: domain index `k`.
    pub dim: D,
    /// The reduction result, in an epilogue.
    pub acc: Option<ScalarValue>,
}

impl<I, L, D> ScalarEnv for FnEnv<I, L, D>
where
    I: FnMut(usize) -> Result<ScalarValue, String>,
    L: FnMut(usize, i64) -> Result<ScalarValue, String>,
    D: FnMut(usize) -> Result<i64, String>,
{
    fn input(&mut self, k: usize) -> Result<ScalarValue, String> {
        (self.input)(k)
    }
    fn load(&mut self, k: usize, offset: i64) -> Result<ScalarValue, String> {
        (self.load)(k, offset)
    }
    fn dim(&mut self, k: usize) -> Result<i64, String> {
        (self.dim)(k)
    }
    fn acc(&mut self) -> Result<ScalarValue, String> {
        self.acc.ok_or_else(|| "`acc` read outside an epilogue".to_string())
    }
}

/// `f32` maximum that propagates NaN (the tensor dialect's `max`).
pub fn fmax_nan(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() {
        f32::NAN
    } else if a >= b {
        a
    } else {
        b
    }
}

/// `f32` minimum that propagates NaN.
pub fn fmin_nan(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() {
        f32::NAN
    } else if a <= b {
        a
    } else {
        b
    }
}

/// The value an `f16` image stores for `x`: `x` rounded to the nearest `f16` (ties to even),
/// as an `f32`. Beyond `f16`'s range (`|x| >= 65520`) it is `±inf`; below its smallest subnormal
/// (`2^-24`) it rounds to a subnormal or `±0`; NaN stays NaN. Every store into an `f16` image
/// (upload, launch output) goes through it in the reference executor and the JIT, and
/// `write_imagef` to a `CL_HALF_FLOAT` image does the same on a device that rounds to nearest even.
pub fn round_f16(x: f32) -> f32 {
    half::f16::from_f32(x).to_f32()
}

/// `1 / (1 + e^-x)` without overflow, exactly as the reference interpreter computes it.
pub fn sigmoid_f32(x: f32) -> f32 {
    if x >= 0.0 {
        (1.0 + (-x).exp()).recip()
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

/// A unary operator on a value; the semantics every back end must reproduce.
pub fn apply_un(op: ScalarUn, v: ScalarValue) -> Result<ScalarValue, String> {
    use ScalarValue::{Int, F32};
    Ok(match (op, v) {
        (ScalarUn::Neg, Int(a)) => Int(a.wrapping_neg()),
        (ScalarUn::Neg, F32(a)) => F32(-a),
        (ScalarUn::Not, v) => Int(i64::from(!v.truth())),
        (ScalarUn::Abs, Int(a)) => Int(a.wrapping_abs()),
        (ScalarUn::Abs, F32(a)) => F32(a.abs()),
        (ScalarUn::Floor, Int(a)) => Int(a),
        (ScalarUn::Floor, F32(a)) => F32(a.floor()),
        (ScalarUn::ToInt, Int(a)) => Int(a),
        (ScalarUn::ToInt, F32(a)) => {
            if a.is_nan() {
                return Err("int() of NaN".into());
            }
            // Saturating, truncating toward zero.
            Int(a as i64)
        }
        (ScalarUn::ToFloat, v) => F32(v.as_f32()),
        (op, v) => {
            let a = v.as_f32();
            F32(match op {
                ScalarUn::Exp => a.exp(),
                ScalarUn::Log => a.ln(),
                ScalarUn::Sqrt => a.sqrt(),
                ScalarUn::Rsqrt => a.sqrt().recip(),
                ScalarUn::Tanh => a.tanh(),
                ScalarUn::Erf => libm::erff(a),
                ScalarUn::Sigmoid => sigmoid_f32(a),
                _ => a,
            })
        }
    })
}

/// A binary operator on two values; the semantics every back end must reproduce.
pub fn apply_bin(op: ScalarBin, a: ScalarValue, b: ScalarValue) -> Result<ScalarValue, String> {
    use ScalarValue::{Int, F32};
    let cmp = |o: Option<std::cmp::Ordering>| -> ScalarValue {
        use std::cmp::Ordering::{Equal, Greater, Less};
        Int(i64::from(match op {
            ScalarBin::Lt => o == Some(Less),
            ScalarBin::Le => matches!(o, Some(Less | Equal)),
            ScalarBin::Gt => o == Some(Greater),
            ScalarBin::Ge => matches!(o, Some(Greater | Equal)),
            ScalarBin::Eq => o == Some(Equal),
            _ => o != Some(Equal),
        }))
    };
    Ok(match (a, b) {
        _ if op == ScalarBin::And => Int(i64::from(a.truth() && b.truth())),
        _ if op == ScalarBin::Or => Int(i64::from(a.truth() || b.truth())),
        (Int(x), Int(y)) => match op {
            ScalarBin::Add => Int(x.wrapping_add(y)),
            ScalarBin::Sub => Int(x.wrapping_sub(y)),
            ScalarBin::Mul => Int(x.wrapping_mul(y)),
            ScalarBin::Div | ScalarBin::Rem if y == 0 => {
                return Err(format!("integer division by zero in {x} {} 0", op.symbol()))
            }
            ScalarBin::Div => Int(floor_div(x, y)),
            ScalarBin::Rem => Int(x.wrapping_sub(floor_div(x, y).wrapping_mul(y))),
            ScalarBin::Max => Int(x.max(y)),
            ScalarBin::Min => Int(x.min(y)),
            _ => cmp(x.partial_cmp(&y)),
        },
        _ => {
            let (x, y) = (a.as_f32(), b.as_f32());
            match op {
                ScalarBin::Add => F32(x + y),
                ScalarBin::Sub => F32(x - y),
                ScalarBin::Mul => F32(x * y),
                ScalarBin::Div => F32(x / y),
                ScalarBin::Rem => return Err("`%` on f32 values".into()),
                ScalarBin::Max => F32(fmax_nan(x, y)),
                ScalarBin::Min => F32(fmin_nan(x, y)),
                _ => cmp(x.partial_cmp(&y)),
            }
        }
    })
}

/// Floor division of integers (`y != 0`), wrapping on `i64::MIN / -1`.
fn floor_div(x: i64, y: i64) -> i64 {
    let q = x.wrapping_div(y);
    if x.wrapping_rem(y) != 0 && ((x < 0) != (y < 0)) {
        q - 1
    } else {
        q
    }
}

impl Scalar {
    /// Evaluates the expression, reading through `env`. Both branches of `select` are
    /// evaluated only as far as needed: the chosen one.
    pub fn eval(&self, env: &mut dyn ScalarEnv) -> Result<ScalarValue, String> {
        self.eval_at(env, 0)
    }

    /// Recursive evaluation for the usual shallow payloads; below [`MAX_TREE_DEPTH`] levels it
    /// continues with [`Scalar::eval_iter`], which uses no stack of its own.
    fn eval_at(&self, env: &mut dyn ScalarEnv, depth: usize) -> Result<ScalarValue, String> {
        if depth > MAX_TREE_DEPTH {
            return self.eval_iter(env);
        }
        let depth = depth + 1;
        Ok(match self {
            Scalar::Float(v) => ScalarValue::F32(*v as f32),
            Scalar::Int(v) => ScalarValue::Int(*v),
            Scalar::In(k) => env.input(*k)?,
            Scalar::Load(k, e) => {
                let off = e.eval_at(env, depth)?;
                load(env, *k, off)?
            }
            Scalar::Dim(k) => ScalarValue::Int(env.dim(*k)?),
            Scalar::Stat(k) => env.stat(*k)?,
            Scalar::Acc => env.acc()?,
            Scalar::Un(op, e) => apply_un(*op, e.eval_at(env, depth)?)?,
            Scalar::Bin(op, a, b) => {
                let a = a.eval_at(env, depth)?;
                apply_bin(*op, a, b.eval_at(env, depth)?)?
            }
            Scalar::Select(c, a, b) => {
                if c.eval_at(env, depth)?.truth() {
                    a.eval_at(env, depth)?
                } else {
                    b.eval_at(env, depth)?
                }
            }
        })
    }

    /// [`Scalar::eval`] with an explicit stack: the same values, in the same order of reads.
    fn eval_iter(&self, env: &mut dyn ScalarEnv) -> Result<ScalarValue, String> {
        enum Task<'a> {
            Visit(&'a Scalar),
            Load(usize),
            Un(ScalarUn),
            Bin(ScalarBin),
            /// The condition is on the value stack: visit one of the branches.
            Pick(&'a Scalar, &'a Scalar),
        }
        let mut stack = vec![Task::Visit(self)];
        let mut vals: Vec<ScalarValue> = Vec::new();
        let pop = |vals: &mut Vec<ScalarValue>| vals.pop().ok_or("internal: empty value stack");
        while let Some(task) = stack.pop() {
            match task {
                Task::Visit(e) => match e {
                    Scalar::Float(v) => vals.push(ScalarValue::F32(*v as f32)),
                    Scalar::Int(v) => vals.push(ScalarValue::Int(*v)),
                    Scalar::In(k) => vals.push(env.input(*k)?),
                    Scalar::Dim(k) => vals.push(ScalarValue::Int(env.dim(*k)?)),
                    Scalar::Stat(k) => vals.push(env.stat(*k)?),
                    Scalar::Acc => vals.push(env.acc()?),
                    Scalar::Load(k, a) => stack.extend([Task::Load(*k), Task::Visit(a)]),
                    Scalar::Un(op, a) => stack.extend([Task::Un(*op), Task::Visit(a)]),
                    Scalar::Bin(op, a, b) => {
                        stack.extend([Task::Bin(*op), Task::Visit(b), Task::Visit(a)]);
                    }
                    Scalar::Select(c, a, b) => stack.extend([Task::Pick(a, b), Task::Visit(c)]),
                },
                Task::Load(k) => {
                    let off = pop(&mut vals)?;
                    vals.push(load(env, k, off)?);
                }
                Task::Un(op) => {
                    let a = pop(&mut vals)?;
                    vals.push(apply_un(op, a)?);
                }
                Task::Bin(op) => {
                    let b = pop(&mut vals)?;
                    let a = pop(&mut vals)?;
                    vals.push(apply_bin(op, a, b)?);
                }
                Task::Pick(a, b) => {
                    let c = pop(&mut vals)?;
                    stack.push(Task::Visit(if c.truth() { a } else { b }));
                }
            }
        }
        Ok(pop(&mut vals)?)
    }
}

/// `x{k}[off]`.
fn load(env: &mut dyn ScalarEnv, k: usize, off: ScalarValue) -> Result<ScalarValue, String> {
    match off {
        ScalarValue::Int(off) => env.load(k, off),
        ScalarValue::F32(_) => Err(format!("the element offset of `x{k}[..]` is not an integer")),
    }
}

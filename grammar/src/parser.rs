//! The parse driver and the helpers the grammar's actions call.
//!
//! [`parse`] runs the generated LR(1) parser on the lexer's token stream, which ends early at
//! bracket nesting deeper than [`MAX_NESTING`] (the AST is dropped, compared and printed
//! recursively, so deep trees must never exist) or after [`MAX_ERRORS`] errors. Every problem
//! goes into one [`Sink`]: lexer errors, errors the parser recovered from, and literal errors
//! found by actions. The file parses only if the sink stays empty; diagnostics come back sorted
//! by position.
//!
//! Affine expressions can nest without brackets (`d0 + d0 + ...`, `- - d0`); their depth is
//! tracked while building ([`DExpr`]) and capped at [`MAX_NESTING`] too.

use std::cell::RefCell;
use std::convert::Infallible;

use lalrpop_util::{ErrorRecovery, ParseError};

use crate::ast::{
    Arg, Attr, AttrKind, BinOp, Expr, ExprKind, Func, Ident, Module, NamedAttr, Op, Param, Type,
    TypeKind,
};
use crate::diag::{Diagnostic, Span};
use crate::grammar;
use crate::lexer::{Tok, Tokens};

/// The deepest bracket (`(`, `[`, `{`, `<`) or affine expression nesting accepted.
pub const MAX_NESTING: usize = 256;

/// Parsing stops once this many errors are recorded; the last diagnostic then says so.
pub const MAX_ERRORS: usize = 1000;

/// The most results one `%r:N` group may define (an op with more is not a real program, and a
/// count is not allowed to make the parser allocate without bound).
pub const MAX_GROUP: usize = 4096;

type Error = ParseError<usize, Tok, Infallible>;

/// Parses a whole `.fbir` file. See [`crate::parse`].
pub fn parse(src: &str) -> Result<Module, Vec<Diagnostic>> {
    // Spans are `u32`; one byte of headroom keeps `end` representable too.
    if src.len() >= u32::MAX as usize {
        return Err(vec![Diagnostic::error("file is too large (4 GiB or more)")]);
    }
    let sink = Sink { diags: RefCell::new(Vec::new()), built: RefCell::default() };
    let mut tokens = Tokens::new(src, &sink.diags, MAX_ERRORS, MAX_NESTING);
    let stream =
        tokens.by_ref().map(|t| Ok::<_, Infallible>((t.start as usize, t.tok, t.end as usize)));
    let result = grammar::FileParser::new().parse(src, &sink, stream);
    if let Some(n) = tokens.stopped_at() {
        // The parser saw the input end where the stream was cut; what it said about that end is
        // noise.
        sink.diags.borrow_mut().truncate(n);
        return Err(sink.finish());
    }
    match result {
        Ok(module) if sink.is_empty() => Ok(*module),
        Ok(_) => Err(sink.finish()),
        Err(e) => {
            sink.push(describe(src, &e));
            Err(sink.finish())
        }
    }
}

/// Parses bytes that should be UTF-8 text. See [`crate::parse_bytes`].
pub fn parse_bytes(bytes: &[u8]) -> Result<Module, Vec<Diagnostic>> {
    match std::str::from_utf8(bytes) {
        Ok(src) => parse(src),
        Err(e) => {
            let start = e.valid_up_to();
            let end = start + e.error_len().unwrap_or(bytes.len() - start);
            Err(vec![Diagnostic::error("file is not valid UTF-8")
                .at(Span::new(start, end))
                .with_label("this byte sequence is not UTF-8")])
        }
    }
}

/// Where every diagnostic of one parse goes, shared by the token stream and the actions, and
/// where the actions build the large nodes.
///
/// Large nodes (ops, functions, attributes) are not passed up the LR parser's value stack: every
/// stack slot is as big as its largest value, and the parser moves slots on each shift and
/// reduce, so one 200-byte node type made parsing several times slower. Instead an action
/// pushes the node here and the enclosing rule takes it back: a function takes all ops pushed
/// since its body began, a bracket takes everything pushed above the stack height recorded at
/// its opening token. Error recovery can leave stray nodes behind; they only ever end up in a
/// tree that is thrown away, because any error makes the parse fail.
#[derive(Debug)]
pub struct Sink {
    diags: RefCell<Vec<Diagnostic>>,
    built: RefCell<Built>,
}

#[derive(Debug, Default)]
struct Built {
    funcs: Vec<Func>,
    body: Vec<Op>,
    args: Vec<Arg>,
    attrs: Vec<Attr>,
    named: Vec<NamedAttr>,
    params: Vec<Param>,
}

/// The elements of `stack` above `height`; empty if recovery left the stack lower.
fn above<T>(stack: &mut Vec<T>, height: usize) -> Vec<T> {
    if height <= stack.len() {
        stack.split_off(height)
    } else {
        Vec::new()
    }
}

/// The span of a literal token, as the grammar hands it to helpers.
#[derive(Debug, Clone, Copy)]
pub struct Lit {
    pub l: usize,
    pub r: usize,
}

/// An affine expression with the depth of its tree.
#[derive(Debug)]
pub struct DExpr {
    pub expr: Expr,
    pub depth: usize,
}

impl DExpr {
    pub fn leaf(kind: ExprKind, l: usize, r: usize) -> DExpr {
        DExpr { expr: Expr { kind, span: Span::new(l, r) }, depth: 1 }
    }

    /// The same expression, its span grown to cover surrounding parentheses.
    pub fn widen(mut self, l: usize, r: usize) -> DExpr {
        self.expr.span = Span::new(l, r);
        self
    }
}

impl Sink {
    /// A result name as defined: `%r#0` is how one result of a group is used, never defined.
    pub fn result(&self, name: Ident) -> Vec<Ident> {
        if name.name.contains('#') {
            let base = name.name.split('#').next().unwrap_or_default();
            self.push(
                Diagnostic::error(format!("`%{}` cannot be defined", name.name))
                    .at(name.span)
                    .with_label("a result use, not a definition")
                    .with_note(format!(
                        "a group of results is defined as `%{base}:N` and used as `%{base}#0` .. \
                         `%{base}#N-1`"
                    )),
            );
        }
        vec![name]
    }

    /// The results of MLIR's `%r:N`: `r#0` .. `r#N-1`, each spanning the group.
    pub fn result_group(&self, src: &str, name: Ident, count: Lit) -> Vec<Ident> {
        let text = &src[count.l..count.r];
        let span = Span::new(name.span.start as usize, count.r);
        let group = self.result(name);
        match text.parse::<usize>() {
            Ok(n) if (1..=MAX_GROUP).contains(&n) => {
                (0..n).map(|i| Ident { name: format!("{}#{i}", group[0].name), span }).collect()
            }
            _ => {
                self.error(
                    &format!("a result group has 1 to {MAX_GROUP} results, found `{text}`"),
                    count.l,
                    count.r,
                );
                group
            }
        }
    }

    /// An op name without a dialect: `return` and `call`, as mlir-opt prints the func dialect's
    /// ops inside a `func.func`, are `func.return` and `func.call`; anything else is an error.
    pub fn bare_op_name(&self, src: &str, l: usize, r: usize) -> Ident {
        let text = &src[l..r];
        let name = match text {
            "return" | "call" => format!("func.{text}"),
            _ => {
                self.push(
                    Diagnostic::error(format!("`{text}` is not an op name"))
                        .at(Span::new(l, r))
                        .with_label("expected `dialect.op`")
                        .with_note("without a dialect, only `return` and `call` (of func) are ops"),
                );
                text.to_string()
            }
        };
        Ident { name, span: Span::new(l, r) }
    }

    /// `name @callee(operands)`: fbc's generic `name operands {callee = @callee}`.
    pub fn call_form(&self, mut op: Op, callee: Ident) -> Op {
        if op.name.name != "func.call" {
            self.push(
                Diagnostic::error(format!("`{}` has no `@callee(...)` form", op.name.name))
                    .at(callee.span)
                    .with_label("only func.call is written with its callee first"),
            );
        }
        let span = callee.span;
        let value = Attr { kind: AttrKind::Symbol(callee.name), span };
        op.attrs.insert(0, NamedAttr { name: Ident { name: "callee".into(), span }, value, span });
        op
    }

    fn push(&self, d: Diagnostic) {
        self.diags.borrow_mut().push(d);
    }

    fn error(&self, message: &str, l: usize, r: usize) {
        self.push(Diagnostic::error(message).at(Span::new(l, r)));
    }

    fn is_empty(&self) -> bool {
        self.diags.borrow().is_empty()
    }

    /// All diagnostics, sorted by position (stable, so one place keeps the order found).
    fn finish(self) -> Vec<Diagnostic> {
        let mut diags = self.diags.into_inner();
        diags.sort_by_key(|d| d.span.map(|s| (s.start, s.end)));
        if diags.len() >= MAX_ERRORS {
            diags.push(Diagnostic::error(format!("too many errors; stopped after {MAX_ERRORS}")));
        }
        diags
    }

    pub fn push_func(&self, f: Func) {
        self.built.borrow_mut().funcs.push(f);
    }

    pub fn take_funcs(&self) -> Vec<Func> {
        std::mem::take(&mut self.built.borrow_mut().funcs)
    }

    pub fn push_op(&self, op: Op) {
        self.built.borrow_mut().body.push(op);
    }

    pub fn take_body(&self) -> Vec<Op> {
        std::mem::take(&mut self.built.borrow_mut().body)
    }

    pub fn push_arg(&self, arg: Arg) {
        self.built.borrow_mut().args.push(arg);
    }

    pub fn take_args(&self) -> Vec<Arg> {
        std::mem::take(&mut self.built.borrow_mut().args)
    }

    /// Pushes an attribute value.
    pub fn attr(&self, kind: AttrKind, l: usize, r: usize) {
        self.built.borrow_mut().attrs.push(Attr { kind, span: Span::new(l, r) });
    }

    /// The attribute value pushed last (a unit placeholder if recovery lost it).
    fn pop_attr(&self, l: usize, r: usize) -> Attr {
        let popped = self.built.borrow_mut().attrs.pop();
        popped.unwrap_or(Attr { kind: AttrKind::Unit, span: Span::new(l, r) })
    }

    /// `dense<X>` from `X`, the attribute value pushed last.
    pub fn dense(&self, l: usize, r: usize) {
        let inner = self.pop_attr(l, r);
        self.attr(AttrKind::Dense(Box::new(inner)), l, r);
    }

    pub fn attr_height(&self) -> usize {
        self.built.borrow().attrs.len()
    }

    pub fn attrs_since(&self, height: usize) -> Vec<Attr> {
        above(&mut self.built.borrow_mut().attrs, height)
    }

    /// Pushes `name = <the last attribute value>`.
    pub fn push_named(&self, name: Ident, l: usize, r: usize) {
        let value = self.pop_attr(l, r);
        self.built.borrow_mut().named.push(NamedAttr { name, value, span: Span::new(l, r) });
    }

    /// Pushes the unit attribute `name`.
    pub fn push_unit(&self, name: Ident, l: usize, r: usize) {
        let value = Attr { kind: AttrKind::Unit, span: Span::new(l, r) };
        self.built.borrow_mut().named.push(NamedAttr { name, value, span: Span::new(l, r) });
    }

    pub fn named_height(&self) -> usize {
        self.built.borrow().named.len()
    }

    pub fn named_since(&self, height: usize) -> Vec<NamedAttr> {
        above(&mut self.built.borrow_mut().named, height)
    }

    /// Pushes a dialect parameter whose value is the last attribute value.
    pub fn push_param(&self, key: Option<Ident>, l: usize, r: usize) {
        let value = self.pop_attr(l, r);
        self.built.borrow_mut().params.push(Param { key, value, span: Span::new(l, r) });
    }

    pub fn param_height(&self) -> usize {
        self.built.borrow().params.len()
    }

    pub fn params_since(&self, height: usize) -> Vec<Param> {
        above(&mut self.built.borrow_mut().params, height)
    }

    /// Records an error the parser recovered from.
    pub fn recovered(&self, src: &str, e: &ErrorRecovery<usize, Tok, Infallible>) {
        self.push(describe(src, &e.error));
    }

    /// An identifier from the token `src[l..r]`, without its `sigil` bytes (`%`, `@`).
    pub fn ident(src: &str, l: usize, r: usize, sigil: usize) -> Ident {
        Ident { name: src[l + sigil..r].to_string(), span: Span::new(l, r) }
    }

    /// Decodes a string body starting at `body` up to its closing quote (or the token's end
    /// `r`, for an unterminated one, already reported by the lexer).
    pub fn string(&self, src: &str, body: usize, r: usize) -> String {
        let text = &src.as_bytes()[body..r];
        // Fast path: most strings (file names, layout names) have no escapes.
        if !text.contains(&b'\\') {
            let end = text.iter().position(|&b| b == b'"').unwrap_or(text.len());
            return src[body..body + end].to_string();
        }
        let mut out = Vec::with_capacity(text.len());
        let mut i = 0;
        while i < text.len() {
            match text[i] {
                b'"' => break,
                b'\\' => {
                    let hex = |b: Option<&u8>| b.and_then(|&b| (b as char).to_digit(16));
                    let (byte, len) = match text.get(i + 1) {
                        Some(b'"') => (Some(b'"'), 2),
                        Some(b'\\') => (Some(b'\\'), 2),
                        Some(b'n') => (Some(b'\n'), 2),
                        Some(b't') => (Some(b'\t'), 2),
                        _ => match (hex(text.get(i + 1)), hex(text.get(i + 2))) {
                            // Two hex digits are one byte; `as u8` is exact as both are < 16.
                            (Some(h), Some(l)) => (Some((h * 16 + l) as u8), 3),
                            _ => (None, 1),
                        },
                    };
                    match byte {
                        Some(b) => out.push(b),
                        None => {
                            let at = body + i;
                            let end = src[at + 1..]
                                .chars()
                                .next()
                                .map_or(at + 1, |c| at + 1 + c.len_utf8());
                            self.push(
                                Diagnostic::error("unknown escape sequence in string literal")
                                    .at(Span::new(at, end))
                                    .with_note("escapes are `\\\"`, `\\\\`, `\\n`, `\\t` and `\\XX` (two hex digits)"),
                            );
                        }
                    }
                    i += len;
                }
                b => {
                    out.push(b);
                    i += 1;
                }
            }
        }
        String::from_utf8(out).unwrap_or_else(|e| {
            self.error(
                "string literal is not valid UTF-8 after unescaping",
                body - 1,
                (body + i + 1).min(r),
            );
            String::from_utf8_lossy(e.as_bytes()).into_owned()
        })
    }

    /// The magnitude of the integer token `src[l..r]`, decimal or `0x` hex, if it fits `u128`.
    fn magnitude(src: &str, l: usize, r: usize) -> Option<u128> {
        let text = &src[l..r];
        match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
            Some(hex) => u128::from_str_radix(hex, 16).ok(),
            None => decimal(text.as_bytes()),
        }
    }

    /// An integer attribute; `-` is at `l` when `digits > l`.
    pub fn int(&self, src: &str, l: usize, digits: usize, r: usize) -> AttrKind {
        let negative = digits > l;
        let value = Self::magnitude(src, digits, r).and_then(|m| {
            if negative {
                // `-(2^127)` is `i128::MIN`, which `wrapping_neg` of the cast gives exactly.
                (m <= 1u128 << 127).then(|| (m as i128).wrapping_neg())
            } else {
                i128::try_from(m).ok()
            }
        });
        AttrKind::Int(value.unwrap_or_else(|| {
            self.too_large(l, r);
            0
        }))
    }

    fn too_large(&self, l: usize, r: usize) {
        self.error("integer literal is too large", l, r);
    }

    /// A float attribute; `-` is at `l` when `digits > l`.
    pub fn float(&self, src: &str, l: usize, digits: usize, r: usize) -> AttrKind {
        // The lexer only makes float tokens Rust's float syntax accepts; `unwrap_or` is a guard.
        let v: f64 = src[digits..r].parse().unwrap_or(0.0);
        if v.is_infinite() {
            self.error("float literal is out of range", l, r);
        }
        AttrKind::Float(if digits > l { -v } else { v })
    }

    /// A line or column number of a `loc(...)`.
    pub fn u32(&self, src: &str, lit: Lit) -> u32 {
        match Self::magnitude(src, lit.l, lit.r).and_then(|m| u32::try_from(m).ok()) {
            Some(v) => v,
            None => {
                self.push(
                    Diagnostic::error("integer literal is too large")
                        .at(Span::new(lit.l, lit.r))
                        .with_label(format!("line and column numbers are at most {}", u32::MAX)),
                );
                0
            }
        }
    }

    /// The dimensions of a `2x3x` token.
    pub fn dims(&self, src: &str, lit: Lit) -> Vec<u128> {
        let text = &src.as_bytes()[lit.l..lit.r];
        let mut dims = Vec::with_capacity(text.iter().filter(|&&b| b == b'x').count());
        // Fast path: dimensions below 10^19 (all real ones) accumulate in a `u64`.
        let mut v = 0u64;
        let mut start = 0;
        for (i, &b) in text.iter().enumerate() {
            if b != b'x' {
                v = v.wrapping_mul(10).wrapping_add(u64::from(b - b'0'));
                continue;
            }
            if i - start < 20 {
                dims.push(u128::from(v));
            } else {
                dims.push(decimal(&text[start..i]).unwrap_or_else(|| {
                    self.too_large(lit.l + start, lit.l + i);
                    0
                }));
            }
            v = 0;
            start = i + 1;
        }
        dims
    }

    /// The type of a whole-tensor token `tensor<2x3xf32>` at `src[l..r]`, in one pass.
    pub fn tensor_type(&self, src: &str, l: usize, r: usize) -> Type {
        // Between `tensor<` and `>`: `[0-9]+x` groups, then an element type, which never starts
        // with a digit.
        let (body_l, body_r) = (l + "tensor<".len(), r - 1);
        let body = &src.as_bytes()[body_l..body_r];
        let mut dims = Vec::new();
        let mut i = 0;
        while body.get(i).is_some_and(u8::is_ascii_digit) {
            let start = i;
            let mut v = 0u64;
            while let Some(&d @ b'0'..=b'9') = body.get(i) {
                v = v.wrapping_mul(10).wrapping_add(u64::from(d - b'0'));
                i += 1;
            }
            // Up to 19 digits always fit `u64`; longer ones take the slow, checked path.
            dims.push(if i - start < 20 {
                u128::from(v)
            } else {
                decimal(&body[start..i]).unwrap_or_else(|| {
                    self.too_large(body_l + start, body_l + i);
                    0
                })
            });
            // Skip the `x`.
            i += 1;
        }
        Type {
            kind: TypeKind::Tensor { dims, elem: src[body_l + i..body_r].to_string() },
            span: Span::new(l, r),
        }
    }

    /// Pushes `64x64` as an array attribute of its integers.
    pub fn shape(&self, src: &str, l: usize, r: usize) {
        let mut elems = Vec::new();
        self.groups(src, l, r, |v, gl, gr| {
            let v = i128::try_from(v).unwrap_or_else(|_| {
                self.too_large(gl, gr);
                0
            });
            elems.push(Attr { kind: AttrKind::Int(v), span: Span::new(gl, gr) });
        });
        self.attr(AttrKind::Array(elems), l, r);
    }

    /// Calls `each(value, start, end)` for the `x`-separated numbers of `src[l..r]`; too large
    /// ones are reported and read as 0.
    fn groups(&self, src: &str, l: usize, r: usize, mut each: impl FnMut(u128, usize, usize)) {
        let bytes = src.as_bytes();
        let mut i = l;
        while i < r {
            let start = i;
            while i < r && bytes[i].is_ascii_digit() {
                i += 1;
            }
            if i > start {
                let v = decimal(&bytes[start..i]).unwrap_or_else(|| {
                    self.too_large(start, i);
                    0
                });
                each(v, start, i);
            }
            // Skip the `x`.
            i += 1;
        }
    }

    /// Splits `#dialect.name` / `!dialect.name` (token `src[l..r]`) at its first dot.
    pub fn dialect_name(&self, src: &str, l: usize, r: usize) -> (String, String) {
        let text = &src[l + 1..r];
        match text.split_once('.') {
            Some((d, n)) if !d.is_empty() && !n.is_empty() => (d.to_string(), n.to_string()),
            _ => {
                self.push(
                    Diagnostic::error(format!("`{}` is missing its dialect", &src[l..r]))
                        .at(Span::new(l, r))
                        .with_label(format!("write it as `{}dialect.name`", &src[l..l + 1])),
                );
                (String::new(), text.to_string())
            }
        }
    }

    /// An integer constant in an affine expression.
    pub fn int_expr(&self, src: &str, l: usize, r: usize) -> ExprKind {
        match self.int(src, l, l, r) {
            AttrKind::Int(v) => ExprKind::Const(v),
            _ => ExprKind::Const(0),
        }
    }

    pub fn bin(&self, op: BinOp, a: DExpr, b: DExpr, l: usize, r: usize) -> DExpr {
        let depth = a.depth.max(b.depth) + 1;
        let kind = ExprKind::Bin(op, Box::new(a.expr), Box::new(b.expr));
        self.capped(kind, depth, a.depth.max(b.depth), l, r)
    }

    pub fn neg(&self, e: DExpr, l: usize, r: usize) -> DExpr {
        let depth = e.depth + 1;
        self.capped(ExprKind::Neg(Box::new(e.expr)), depth, e.depth, l, r)
    }

    /// Builds the node unless it is too deep; then it is replaced by a leaf `0`, reported once
    /// (when the limit is first crossed), and stays "too deep" so enclosing nodes collapse too.
    fn capped(
        &self,
        kind: ExprKind,
        depth: usize,
        child_depth: usize,
        l: usize,
        r: usize,
    ) -> DExpr {
        if depth <= MAX_NESTING {
            return DExpr { expr: Expr { kind, span: Span::new(l, r) }, depth };
        }
        if child_depth <= MAX_NESTING {
            self.push(
                Diagnostic::error("affine expression is nested too deeply")
                    .at(Span::new(l, r))
                    .with_note(format!("at most {MAX_NESTING} levels of nesting are allowed")),
            );
        }
        DExpr {
            expr: Expr { kind: ExprKind::Const(0), span: Span::new(l, r) },
            depth: MAX_NESTING + 1,
        }
    }
}

/// The value of ASCII decimal digits, if it fits `u128` (`str::parse` for `u128` is slow on the
/// short numbers that are nearly all of them).
fn decimal(digits: &[u8]) -> Option<u128> {
    if digits.len() <= 19 {
        // 19 digits always fit `u64`.
        let v = digits.iter().fold(0u64, |v, &d| v * 10 + u64::from(d - b'0'));
        return Some(u128::from(v));
    }
    digits.iter().try_fold(0u128, |v, &d| v.checked_mul(10)?.checked_add(u128::from(d - b'0')))
}

/// A parse error as a rustc-like diagnostic: `expected one of ..., found ...`.
fn describe(src: &str, e: &Error) -> Diagnostic {
    match e {
        ParseError::UnrecognizedToken { token: (l, _, r), expected } => Diagnostic::error(format!(
            "{}, found {}",
            expected_phrase(expected),
            found(src, *l, *r)
        ))
        .at(Span::new(*l, *r)),
        ParseError::UnrecognizedEof { location, expected } => {
            Diagnostic::error(format!("{}, found end of file", expected_phrase(expected)))
                .at(Span::new(*location, *location))
        }
        ParseError::ExtraToken { token: (l, _, r) } => {
            Diagnostic::error(format!("unexpected {}", found(src, *l, *r))).at(Span::new(*l, *r))
        }
        // The lexer hands the parser only valid tokens; kept total rather than panicking.
        ParseError::InvalidToken { location } => {
            Diagnostic::error("invalid token").at(Span::new(*location, *location))
        }
        ParseError::User { error } => match *error {},
    }
}

/// A token's text for a message, in backticks, cut if long.
fn found(src: &str, l: usize, r: usize) -> String {
    let text = &src[l..r];
    match text.char_indices().nth(40) {
        Some((cut, _)) => format!("`{}...`", &text[..cut]),
        None => format!("`{text}`"),
    }
}

/// Terminals that start an attribute value; when all are expected they read "attribute value".
const ATTR_START: &[&str] = &[
    "Int",
    "HexInt",
    "Float",
    "\"-\"",
    "\"true\"",
    "\"false\"",
    "Str",
    "\"[\"",
    "Symbol",
    "QuotedSymbol",
    "\"tensor\"",
    "TensorType",
    "ScalarType",
    "Bang",
    "Hash",
    "\"(\"",
    "\"dense\"",
];

/// Terminals that start a type.
const TYPE_START: &[&str] = &["\"tensor\"", "TensorType", "ScalarType", "Bang"];

/// Terminals that are an identifier where a key is expected.
const KEY_WORDS: &[&str] = &[
    "BareIdent",
    "DottedIdent",
    "ScalarType",
    "Str",
    "\"module\"",
    "\"attributes\"",
    "\"func.func\"",
    "\"true\"",
    "\"false\"",
    "\"loc\"",
    "\"unknown\"",
    "\"floordiv\"",
    "\"ceildiv\"",
    "\"mod\"",
    "\"tensor\"",
    "\"dense\"",
];

/// Turns lalrpop's expected terminals into `expected X` / `expected one of X, Y, or Z`, grouping
/// sets of terminals into what a person would call them.
fn expected_phrase(expected: &[String]) -> String {
    let mut rest: Vec<&str> = expected.iter().map(String::as_str).collect();
    let mut groups: Vec<&str> = Vec::new();
    let mut take_group = |rest: &mut Vec<&str>, set: &[&str], name: &'static str, all: bool| {
        let hit = if all {
            set.iter().all(|t| rest.contains(t))
        } else {
            set.iter().any(|t| rest.contains(t))
        };
        if hit {
            rest.retain(|t| !set.contains(t));
            groups.push(name);
        }
    };
    // Where an op starts, a bare identifier is one of func's ops written without `func.`
    // (`return`, `call`): still an op name to the reader, not any identifier.
    if rest.contains(&"DottedIdent") && !rest.contains(&"\"true\"") {
        rest.retain(|t| *t != "BareIdent");
    }
    take_group(&mut rest, ATTR_START, "attribute value", true);
    take_group(&mut rest, TYPE_START, "type", true);
    if rest.contains(&"BareIdent") {
        take_group(&mut rest, KEY_WORDS, "identifier", false);
    }
    let mut words: Vec<String> = Vec::new();
    let mut names: Vec<&str> = Vec::new();
    for t in rest {
        match t.strip_prefix('"').and_then(|t| t.strip_suffix('"')) {
            Some(lit) => words.push(format!("`{lit}`")),
            None => names.push(match t {
                "Int" | "HexInt" => "integer",
                "Float" => "float",
                "Str" => "string",
                "Value" => "value name",
                "DefValue" => "result name",
                "Symbol" | "QuotedSymbol" => "symbol",
                "Hash" => "dialect attribute",
                "Bang" => "dialect type",
                "Dims" => "dimension list",
                "Shape" => "shape",
                "DottedIdent" => "op name",
                "BareIdent" => "identifier",
                "ScalarType" => "element type",
                other => other,
            }),
        }
    }
    words.sort();
    names.extend(groups);
    names.sort_unstable();
    names.dedup();
    words.extend(names.into_iter().map(str::to_string));
    match words.as_slice() {
        [] => "expected end of file".to_string(),
        [one] => format!("expected {one}"),
        [a, b] => format!("expected one of {a} or {b}"),
        [init @ .., last] => format!("expected one of {}, or {last}", init.join(", ")),
    }
}

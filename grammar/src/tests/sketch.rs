//! A compact, span-free rendering of the AST for assertions.
//!
//! It prints `.fbir` again, except that every binary affine expression is fully parenthesized
//! (so tests see the precedence the parser chose) and floats use Rust's `{:?}`. Reparsing a
//! sketch gives the same sketch, which the tests use as a round-trip check.

use std::fmt::Write as _;

use crate::ast::*;

pub fn module(m: &Module) -> String {
    let mut out = String::from("module");
    if let Some(name) = &m.name {
        let _ = write!(out, " @{}", name.name);
    }
    if !m.attrs.is_empty() {
        let _ = write!(out, " attributes {}", dict(&m.attrs));
    }
    out.push_str(" {\n");
    for f in &m.funcs {
        func(&mut out, f);
    }
    out.push('}');
    out
}

fn func(out: &mut String, f: &Func) {
    let args: Vec<String> =
        f.args.iter().map(|a| format!("%{}: {}", a.name.name, ty(&a.ty))).collect();
    let _ =
        write!(out, "  func.func @{}({}) -> ({})", f.name.name, args.join(", "), types(&f.results));
    if !f.attrs.is_empty() {
        let _ = write!(out, " attributes {}", dict(&f.attrs));
    }
    out.push_str(" {\n");
    for o in &f.body {
        let _ = writeln!(out, "    {}", op(o));
    }
    out.push_str("  }");
    if let Some(l) = &f.loc {
        let _ = write!(out, " {}", loc(l));
    }
    out.push('\n');
}

pub fn op(o: &Op) -> String {
    let mut out = String::new();
    if !o.results.is_empty() {
        let rs: Vec<String> = o.results.iter().map(|r| format!("%{}", r.name)).collect();
        let _ = write!(out, "{} = ", rs.join(", "));
    }
    out.push_str(&o.name.name);
    if !o.operands.is_empty() {
        let os: Vec<String> = o.operands.iter().map(|r| format!("%{}", r.name)).collect();
        let _ = write!(out, " {}", os.join(", "));
    }
    if !o.attrs.is_empty() {
        let _ = write!(out, " {}", dict(&o.attrs));
    }
    if let Some(s) = &o.sig {
        let _ = write!(out, " : ({}) -> ({})", types(&s.inputs), types(&s.outputs));
    }
    if let Some(l) = &o.loc {
        let _ = write!(out, " {}", loc(l));
    }
    out
}

fn loc(l: &Loc) -> String {
    match &l.file {
        Some(f) => format!("loc({f:?}:{}:{})", l.line, l.col),
        None => "loc(unknown)".to_string(),
    }
}

fn types(ts: &[Type]) -> String {
    ts.iter().map(ty).collect::<Vec<_>>().join(", ")
}

pub fn ty(t: &Type) -> String {
    match &t.kind {
        TypeKind::Tensor { dims, elem } => {
            let ds: String = dims.iter().map(|d| format!("{d}x")).collect();
            format!("tensor<{ds}{elem}>")
        }
        TypeKind::Scalar(s) => s.clone(),
        TypeKind::Dialect { dialect, name, params } => {
            format!("!{dialect}.{name}{}", params_of(params))
        }
    }
}

fn params_of(ps: &[Param]) -> String {
    if ps.is_empty() {
        return String::new();
    }
    let ps: Vec<String> = ps
        .iter()
        .map(|p| match &p.key {
            Some(k) => format!("{} = {}", k.name, attr(&p.value)),
            None => attr(&p.value),
        })
        .collect();
    format!("<{}>", ps.join(", "))
}

fn dict(attrs: &[NamedAttr]) -> String {
    let es: Vec<String> = attrs
        .iter()
        .map(|a| match a.value.kind {
            AttrKind::Unit => a.name.name.clone(),
            _ => format!("{} = {}", a.name.name, attr(&a.value)),
        })
        .collect();
    format!("{{{}}}", es.join(", "))
}

pub fn attr(a: &Attr) -> String {
    match &a.kind {
        AttrKind::Int(v) => v.to_string(),
        AttrKind::Float(v) => format!("{v:?}"),
        AttrKind::Bool(b) => b.to_string(),
        AttrKind::Str(s) => format!("{s:?}"),
        AttrKind::Array(xs) => format!("[{}]", xs.iter().map(attr).collect::<Vec<_>>().join(", ")),
        AttrKind::Symbol(s) => format!("@{s}"),
        AttrKind::Type(t) => ty(t),
        AttrKind::Dialect { dialect, name, params } => {
            format!("#{dialect}.{name}{}", params_of(params))
        }
        AttrKind::Map(m) => {
            let ids = |v: &[Ident]| v.iter().map(|i| i.name.clone()).collect::<Vec<_>>().join(", ");
            let syms =
                if m.symbols.is_empty() { String::new() } else { format!("[{}]", ids(&m.symbols)) };
            let rs: Vec<String> = m.results.iter().map(expr).collect();
            format!("({}){syms} -> ({})", ids(&m.dims), rs.join(", "))
        }
        AttrKind::Dense(inner) => format!("dense<{}>", attr(inner)),
        AttrKind::Unit => "unit".to_string(),
    }
}

pub fn expr(e: &Expr) -> String {
    match &e.kind {
        ExprKind::Var(v) => v.clone(),
        ExprKind::Const(c) => c.to_string(),
        ExprKind::Neg(x) => format!("-{}", expr(x)),
        ExprKind::Bin(op, a, b) => {
            let op = match op {
                BinOp::Add => "+",
                BinOp::Sub => "-",
                BinOp::Mul => "*",
                BinOp::FloorDiv => "floordiv",
                BinOp::CeilDiv => "ceildiv",
                BinOp::Mod => "mod",
            };
            format!("({} {op} {})", expr(a), expr(b))
        }
    }
}

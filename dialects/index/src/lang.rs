//! The egg language mirroring [`Expr`], and conversions between the two.
//!
//! Invariants:
//! * Operators map 1:1 between `Expr` and [`IndexLang`] (unary minus is the
//!   `neg` operator so that it can never be confused with binary `-`).
//! * `Num` is declared before `Symbol`: egg's pattern parser tries variants
//!   in order and `Symbol` accepts any text, so numbers must win.
//! * Converting back to `Expr` refuses trees deeper than
//!   [`MAX_DEPTH`](crate::MAX_DEPTH) (returns `None`), so the recursive
//!   `Expr` algorithms stay within the stack on extracted results too.

use egg::{define_language, Id, Language, RecExpr, Symbol};

use crate::expr::{BinOp, Expr};
use crate::parse::MAX_DEPTH;

define_language! {
    /// E-graph node type of the index language.
    pub enum IndexLang {
        "+" = Add([Id; 2]),
        "-" = Sub([Id; 2]),
        "*" = Mul([Id; 2]),
        "floordiv" = FloorDiv([Id; 2]),
        "ceildiv" = CeilDiv([Id; 2]),
        "mod" = Mod([Id; 2]),
        "<<" = Shl([Id; 2]),
        ">>" = Shr([Id; 2]),
        "&" = And([Id; 2]),
        "min" = Min([Id; 2]),
        "max" = Max([Id; 2]),
        "neg" = Neg(Id),
        Num(i64),
        Symbol(Symbol),
    }
}

/// The binary operator of a node, if it is one.
pub(crate) fn binop_of(node: &IndexLang) -> Option<BinOp> {
    Some(match node {
        IndexLang::Add(_) => BinOp::Add,
        IndexLang::Sub(_) => BinOp::Sub,
        IndexLang::Mul(_) => BinOp::Mul,
        IndexLang::FloorDiv(_) => BinOp::FloorDiv,
        IndexLang::CeilDiv(_) => BinOp::CeilDiv,
        IndexLang::Mod(_) => BinOp::Mod,
        IndexLang::Shl(_) => BinOp::Shl,
        IndexLang::Shr(_) => BinOp::Shr,
        IndexLang::And(_) => BinOp::And,
        IndexLang::Min(_) => BinOp::Min,
        IndexLang::Max(_) => BinOp::Max,
        IndexLang::Neg(_) | IndexLang::Num(_) | IndexLang::Symbol(_) => return None,
    })
}

/// Builds the node `a op b`.
pub(crate) fn binop_node(op: BinOp, a: Id, b: Id) -> IndexLang {
    let c = [a, b];
    match op {
        BinOp::Add => IndexLang::Add(c),
        BinOp::Sub => IndexLang::Sub(c),
        BinOp::Mul => IndexLang::Mul(c),
        BinOp::FloorDiv => IndexLang::FloorDiv(c),
        BinOp::CeilDiv => IndexLang::CeilDiv(c),
        BinOp::Mod => IndexLang::Mod(c),
        BinOp::Shl => IndexLang::Shl(c),
        BinOp::Shr => IndexLang::Shr(c),
        BinOp::And => IndexLang::And(c),
        BinOp::Min => IndexLang::Min(c),
        BinOp::Max => IndexLang::Max(c),
    }
}

/// Appends `e` to `out` and returns the id of its root. Recursion depth is
/// bounded by the depth of `e`, which callers check against `MAX_DEPTH`.
pub(crate) fn push_expr(e: &Expr, out: &mut RecExpr<IndexLang>) -> Id {
    match e {
        Expr::Const(c) => out.add(IndexLang::Num(*c)),
        Expr::Var(v) => out.add(IndexLang::Symbol(Symbol::from(v.as_str()))),
        Expr::Neg(a) => {
            let a = push_expr(a, out);
            out.add(IndexLang::Neg(a))
        }
        other => match other.as_binary() {
            Some((op, a, b)) => {
                let a = push_expr(a, out);
                let b = push_expr(b, out);
                out.add(binop_node(op, a, b))
            }
            None => out.add(IndexLang::Num(0)),
        },
    }
}

/// Converts an `Expr` to an egg `RecExpr`.
pub(crate) fn to_rec_expr(e: &Expr) -> RecExpr<IndexLang> {
    let mut out = RecExpr::default();
    push_expr(e, &mut out);
    out
}

/// Converts the sub-term rooted at `root` of a `RecExpr` back to an `Expr`,
/// or `None` if it is deeper than `MAX_DEPTH`.
pub(crate) fn from_rec_expr_at(rec: &RecExpr<IndexLang>, root: Id) -> Option<Expr> {
    // Depths first, iteratively: RecExpr nodes only point to earlier nodes.
    let nodes = rec.as_ref();
    let mut depth = vec![0usize; nodes.len()];
    for (i, n) in nodes.iter().enumerate() {
        depth[i] = 1 + n.children().iter().map(|c| depth[usize::from(*c)]).max().unwrap_or(0);
    }
    if *depth.get(usize::from(root))? > MAX_DEPTH {
        return None;
    }
    Some(build(nodes, root))
}

/// Converts a whole `RecExpr` (root = last node).
pub(crate) fn from_rec_expr(rec: &RecExpr<IndexLang>) -> Option<Expr> {
    let last = rec.as_ref().len().checked_sub(1)?;
    from_rec_expr_at(rec, Id::from(last))
}

fn build(nodes: &[IndexLang], id: Id) -> Expr {
    let node = &nodes[usize::from(id)];
    match node {
        IndexLang::Num(c) => Expr::Const(*c),
        IndexLang::Symbol(s) => Expr::Var(s.as_str().to_string()),
        IndexLang::Neg(a) => Expr::negate(build(nodes, *a)),
        other => {
            let [a, b] = match other.children() {
                [a, b] => [*a, *b],
                _ => return Expr::Const(0),
            };
            match binop_of(other) {
                Some(op) => Expr::binary(op, build(nodes, a), build(nodes, b)),
                None => Expr::Const(0),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_rec_expr() {
        let e = Expr::parse("min(-x, 3) + (y floordiv 4) * -2 - (z mod 8 << 1 >> 2 & 7)")
            .expect("parses");
        let rec = to_rec_expr(&e);
        assert_eq!(from_rec_expr(&rec), Some(e));
        let p: egg::Pattern<IndexLang> = "(+ ?a -1)".parse().expect("pattern");
        assert!(p.to_string().contains("-1"));
    }
}

//! Evaluation of index maps (`fbc_ir::AffineMap`) on concrete indices, with MLIR affine
//! semantics: `floordiv`, `ceildiv` and `mod` need a positive divisor, `mod` is floor modulo (the
//! result is in `[0, divisor)`), and every operation is checked — an overflow makes the value
//! undefined rather than wrapping. The arithmetic is [`fbc_ir::attr::eval_binop`]'s (one
//! definition for the IR); `fbc_index::Expr::eval` has the same semantics, so a map simplified
//! there evaluates the same here.

use fbc_ir::{AffineExpr, AffineMap};

/// The outcome of evaluating a map at one index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MapEval {
    /// One value per map result.
    Ok(Vec<i64>),
    /// The index has the wrong number of entries, or the map has symbols (no values for them).
    Arity,
    /// A division by a non-positive number, an overflow, or a name that is not a dimension.
    Undefined,
}

/// Evaluates `map` with its dimensions bound to `idx`.
pub fn eval_map(map: &AffineMap, idx: &[i64]) -> MapEval {
    if idx.len() != map.dims.len() || !map.symbols.is_empty() {
        return MapEval::Arity;
    }
    let env = |name: &str| map.dims.iter().position(|d| d == name).map(|k| idx[k]);
    let mut out = Vec::with_capacity(map.results.len());
    for e in &map.results {
        match eval_expr(e, &env) {
            Some(v) => out.push(v),
            None => return MapEval::Undefined,
        }
    }
    MapEval::Ok(out)
}

/// The value of `e` with variables looked up in `env`; `None` when undefined
/// ([`AffineExpr::eval`]).
pub fn eval_expr(e: &AffineExpr, env: &dyn Fn(&str) -> Option<i64>) -> Option<i64> {
    e.eval(env)
}

/// The source index that `layout.remap` reads for result index `idx`: `map(idx)`. `None` when
/// `idx` does not have one entry per map dimension, the map has symbols, or the map is undefined
/// there. Range checking against the source shape is the caller's (the interpreter reports an
/// out-of-range read as an error).
pub fn remap_source_index(map: &AffineMap, idx: &[i64]) -> Option<Vec<i64>> {
    match eval_map(map, idx) {
        MapEval::Ok(v) => Some(v),
        MapEval::Arity | MapEval::Undefined => None,
    }
}

#[cfg(test)]
mod tests {
    use fbc_ir::attr::BinOp;

    use super::*;

    fn var(s: &str) -> Box<AffineExpr> {
        Box::new(AffineExpr::Var(s.into()))
    }

    fn c(v: i64) -> Box<AffineExpr> {
        Box::new(AffineExpr::Const(v))
    }

    #[test]
    fn floor_semantics() {
        let env = |n: &str| (n == "x").then_some(-7);
        let fd = AffineExpr::Bin(BinOp::FloorDiv, var("x"), c(2));
        let cd = AffineExpr::Bin(BinOp::CeilDiv, var("x"), c(2));
        let md = AffineExpr::Bin(BinOp::Mod, var("x"), c(2));
        assert_eq!(eval_expr(&fd, &env), Some(-4));
        assert_eq!(eval_expr(&cd, &env), Some(-3));
        assert_eq!(eval_expr(&md, &env), Some(1));
        let by_zero = AffineExpr::Bin(BinOp::Mod, var("x"), c(0));
        assert_eq!(eval_expr(&by_zero, &env), None);
        let overflow = AffineExpr::Bin(BinOp::Mul, c(i64::MAX), c(2));
        assert_eq!(eval_expr(&overflow, &env), None);
        let min_ceil = AffineExpr::Bin(BinOp::CeilDiv, c(i64::MIN), c(2));
        assert_eq!(eval_expr(&min_ceil, &env), Some(i64::MIN / 2));
    }
}

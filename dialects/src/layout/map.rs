//! Evaluation of index maps (`fbc_index::IndexMap`) on concrete indices, with MLIR affine
//! semantics: `floordiv`, `ceildiv` and `mod` need a positive divisor, `mod` is floor modulo (the
//! result is in `[0, divisor)`), and every operation is checked — an overflow makes the value
//! undefined rather than wrapping. The arithmetic is `fbc_index::BinOp::apply`'s, the one
//! definition of what an index operator means.

use fbc_index::IndexMap;

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

/// Evaluates `map` with its dimensions bound to `idx` (`IndexMap::eval`, told apart by why it
/// fails).
pub fn eval_map(map: &IndexMap, idx: &[i64]) -> MapEval {
    if idx.len() != map.dims.len() || !map.symbols.is_empty() {
        return MapEval::Arity;
    }
    map.eval(idx).map_or(MapEval::Undefined, MapEval::Ok)
}

/// The source index that `layout.remap` reads for result index `idx`: `map(idx)`. `None` when
/// `idx` does not have one entry per map dimension, the map has symbols, or the map is undefined
/// there. Range checking against the source shape is the caller's (the interpreter reports an
/// out-of-range read as an error).
pub fn remap_source_index(map: &IndexMap, idx: &[i64]) -> Option<Vec<i64>> {
    match eval_map(map, idx) {
        MapEval::Ok(v) => Some(v),
        MapEval::Arity | MapEval::Undefined => None,
    }
}

#[cfg(test)]
mod tests {
    use fbc_index::{BinOp, Expr};

    use super::*;

    fn var(s: &str) -> Box<Expr> {
        Box::new(Expr::Var(s.into()))
    }

    fn c(v: i64) -> Box<Expr> {
        Box::new(Expr::Const(v))
    }

    #[test]
    fn floor_semantics() {
        let m = IndexMap { dims: vec!["x".into()], symbols: vec![], results: vec![Expr::var("x")] };
        assert_eq!(eval_map(&m, &[-7]), MapEval::Ok(vec![-7]));
        assert_eq!(eval_map(&m, &[1, 2]), MapEval::Arity);
        let env = |n: &str| (n == "x").then_some(-7);
        let fd = Expr::Bin(BinOp::FloorDiv, var("x"), c(2));
        let cd = Expr::Bin(BinOp::CeilDiv, var("x"), c(2));
        let md = Expr::Bin(BinOp::Mod, var("x"), c(2));
        assert_eq!(fd.eval(&env), Some(-4));
        assert_eq!(cd.eval(&env), Some(-3));
        assert_eq!(md.eval(&env), Some(1));
        let by_zero = Expr::Bin(BinOp::Mod, var("x"), c(0));
        assert_eq!(by_zero.eval(&env), None);
        let overflow = Expr::Bin(BinOp::Mul, c(i64::MAX), c(2));
        assert_eq!(overflow.eval(&env), None);
        let min_ceil = Expr::Bin(BinOp::CeilDiv, c(i64::MIN), c(2));
        assert_eq!(min_ceil.eval(&env), Some(i64::MIN / 2));
    }
}

//! Index maps of the FTI-D ops and their composition (paper Sec. 4.3.2, Eq. 3-4).
//!
//! Every map goes from a result index to the operand index it reads, with dimensions named
//! `d0, d1, ...` after the result's axes: `y[d] = x[map(d)]`. Composing a chain's maps from the
//! source outwards gives one map from the sink's indices to the source's, the `layout.remap` that
//! replaces the chain. The maps are built in their naive form (a reshape linearises and
//! delinearises with `floordiv`/`mod` on every axis) so that `divmod.before` counts what a
//! compiler without simplification would execute; `index-simplify` then reduces them.
//!
//! Conversions to and from the IR's `AffineMap` live here too. The index language has shifts and
//! masks the IR's maps do not; converting back spells `x >> k` as `x floordiv 2^k`, `x & (2^k-1)`
//! as `x mod 2^k` and `x << k` as `x * 2^k`, which are equal for every integer (floor semantics and
//! two's complement), so a printed map means exactly what the simplifier proved. Back ends lower
//! power-of-two div/mod to shifts.

use fbc_dialects::kind::{LayoutOp, OpKind, TensorOp};
use fbc_index::{BinOp as IndexOp, Expr, IndexMap};
use fbc_ir::attr::BinOp;
use fbc_ir::{AffineExpr, AffineMap, Attr, Module, Op};

fn dims(rank: usize) -> Vec<String> {
    (0..rank).map(fbc_index::dim_name).collect()
}

fn d(k: usize) -> Expr {
    Expr::dim(k)
}

/// `y = transpose(x, perm)`: `y.shape[k] = x.shape[perm[k]]`, so `x[a]` is read from the result
/// axis `k` with `perm[k] = a`.
pub fn transpose_map(perm: &[usize]) -> IndexMap {
    let mut results = vec![Expr::Const(0); perm.len()];
    for (k, &a) in perm.iter().enumerate() {
        results[a] = d(k);
    }
    IndexMap { dims: dims(perm.len()), symbols: Vec::new(), results }
}

fn strides(shape: &[u64]) -> Vec<i64> {
    let mut s = vec![1i64; shape.len()];
    for k in (0..shape.len().saturating_sub(1)).rev() {
        s[k] = s[k + 1].saturating_mul(shape[k + 1] as i64);
    }
    s
}

/// `y = reshape(x)`: linearise the result index row-major, delinearise into `x`'s shape.
pub fn reshape_map(in_shape: &[u64], out_shape: &[u64]) -> IndexMap {
    let out_strides = strides(out_shape);
    let mut linear: Option<Expr> = None;
    for (k, &s) in out_strides.iter().enumerate() {
        if out_shape[k] == 1 {
            continue;
        }
        let term = if s == 1 { d(k) } else { Expr::Mul(Box::new(d(k)), Box::new(Expr::Const(s))) };
        linear = Some(match linear {
            None => term,
            Some(l) => Expr::Add(Box::new(l), Box::new(term)),
        });
    }
    let linear = linear.unwrap_or(Expr::Const(0));
    let in_strides = strides(in_shape);
    let results = in_shape
        .iter()
        .enumerate()
        .map(|(a, &n)| {
            if n == 1 {
                return Expr::Const(0);
            }
            let q = if in_strides[a] == 1 {
                linear.clone()
            } else {
                Expr::FloorDiv(Box::new(linear.clone()), Box::new(Expr::Const(in_strides[a])))
            };
            // The outermost axis needs no `mod`: the linear index is below the element count.
            if a == 0 {
                q
            } else {
                Expr::Mod(Box::new(q), Box::new(Expr::Const(n as i64)))
            }
        })
        .collect();
    IndexMap { dims: dims(out_shape.len()), symbols: Vec::new(), results }
}

/// `y = broadcast(x, shape)`: NumPy alignment at the last axis; size-1 axes read index 0.
pub fn broadcast_map(in_shape: &[u64], out_shape: &[u64]) -> IndexMap {
    IndexMap {
        dims: dims(out_shape.len()),
        symbols: Vec::new(),
        results: broadcast_results(in_shape, out_shape),
    }
}

/// The results of [`broadcast_map`] alone.
pub fn broadcast_results(in_shape: &[u64], out_shape: &[u64]) -> Vec<Expr> {
    let lead = out_shape.len() - in_shape.len();
    in_shape
        .iter()
        .enumerate()
        .map(
            |(a, &n)| if n == 1 && out_shape[a + lead] != 1 { Expr::Const(0) } else { d(a + lead) },
        )
        .collect()
}

/// The result-to-operand map of a chain op, `None` for ops that are not index remappings.
pub fn op_map(m: &Module, op: Op) -> Option<IndexMap> {
    let data = m.op(op);
    let in_shape = m.value_type(*data.operands.first()?).as_tensor()?.shape.to_vec();
    let out_shape = m.value_type(*data.results.first()?).as_tensor()?.shape.to_vec();
    match OpKind::of_op(data)? {
        OpKind::Tensor(TensorOp::Transpose) => {
            let perm: Option<Vec<usize>> = data
                .attr("perm")?
                .as_ints()?
                .into_iter()
                .map(|p| usize::try_from(p).ok())
                .collect();
            Some(transpose_map(&perm?))
        }
        OpKind::Tensor(TensorOp::Reshape) => Some(reshape_map(&in_shape, &out_shape)),
        OpKind::Tensor(TensorOp::Broadcast) => Some(broadcast_map(&in_shape, &out_shape)),
        OpKind::Layout(LayoutOp::Remap) => match data.attr("map")? {
            Attr::Map(map) => Some(to_index_map(map)),
            _ => None,
        },
        _ => None,
    }
}

/// Composes a chain's maps, given from the source outwards (Eq. 4: `f_1 ∘ f_2 ∘ ... ∘ f_n`).
pub fn compose_chain(maps: &[IndexMap]) -> Option<IndexMap> {
    let (first, rest) = maps.split_first()?;
    rest.iter().try_fold(first.clone(), |acc, m| acc.compose(m).ok())
}

/// The index language's operator for an IR operator (the IR's six are a subset).
fn index_op(op: BinOp) -> IndexOp {
    match op {
        BinOp::Add => IndexOp::Add,
        BinOp::Sub => IndexOp::Sub,
        BinOp::Mul => IndexOp::Mul,
        BinOp::FloorDiv => IndexOp::FloorDiv,
        BinOp::CeilDiv => IndexOp::CeilDiv,
        BinOp::Mod => IndexOp::Mod,
    }
}

/// The IR operator of an index-language operator, `None` for those the IR lacks.
fn ir_op(op: IndexOp) -> Option<BinOp> {
    Some(match op {
        IndexOp::Add => BinOp::Add,
        IndexOp::Sub => BinOp::Sub,
        IndexOp::Mul => BinOp::Mul,
        IndexOp::FloorDiv => BinOp::FloorDiv,
        IndexOp::CeilDiv => BinOp::CeilDiv,
        IndexOp::Mod => BinOp::Mod,
        IndexOp::Shl | IndexOp::Shr | IndexOp::And | IndexOp::Min | IndexOp::Max => return None,
    })
}

/// An IR index expression in the index language (exactly: the IR's operators are a subset with
/// the same semantics).
pub fn to_index_expr(e: &AffineExpr) -> Expr {
    match e {
        AffineExpr::Var(v) => Expr::Var(v.clone()),
        AffineExpr::Const(c) => Expr::Const(*c),
        AffineExpr::Neg(a) => Expr::negate(to_index_expr(a)),
        AffineExpr::Bin(op, a, b) => {
            Expr::binary(index_op(*op), to_index_expr(a), to_index_expr(b))
        }
    }
}

/// An IR map in the index language.
pub fn to_index_map(m: &AffineMap) -> IndexMap {
    IndexMap {
        dims: m.dims.clone(),
        symbols: m.symbols.clone(),
        results: m.results.iter().map(to_index_expr).collect(),
    }
}

fn pow2_of_mask(m: i64) -> Option<i64> {
    (m >= 0 && (m as u64).wrapping_add(1).is_power_of_two()).then(|| m + 1)
}

/// Back to the IR's affine syntax; `None` for `min`/`max` or shifts by non-constants.
pub fn from_index_expr(e: &Expr) -> Option<AffineExpr> {
    let konst = |c: i64| Box::new(AffineExpr::Const(c));
    Some(match e {
        Expr::Const(c) => AffineExpr::Const(*c),
        Expr::Var(v) => AffineExpr::Var(v.clone()),
        Expr::Neg(a) => AffineExpr::Neg(Box::new(from_index_expr(a)?)),
        Expr::Shl(a, b) => match **b {
            Expr::Const(k) if (0..63).contains(&k) => {
                AffineExpr::Bin(BinOp::Mul, Box::new(from_index_expr(a)?), konst(1 << k))
            }
            _ => return None,
        },
        Expr::Shr(a, b) => match **b {
            Expr::Const(k) if (0..63).contains(&k) => {
                AffineExpr::Bin(BinOp::FloorDiv, Box::new(from_index_expr(a)?), konst(1 << k))
            }
            _ => return None,
        },
        Expr::And(a, b) => match (&**a, &**b) {
            (x, Expr::Const(m)) | (Expr::Const(m), x) => {
                AffineExpr::Bin(BinOp::Mod, Box::new(from_index_expr(x)?), konst(pow2_of_mask(*m)?))
            }
            _ => return None,
        },
        other => {
            let (op, a, b) = other.as_binary()?;
            AffineExpr::Bin(
                ir_op(op)?,
                Box::new(from_index_expr(a)?),
                Box::new(from_index_expr(b)?),
            )
        }
    })
}

/// Back to an IR map; `None` when a result uses what the IR cannot spell
/// ([`from_index_expr`]).
pub fn from_index_map(m: &IndexMap) -> Option<AffineMap> {
    Some(AffineMap {
        dims: m.dims.clone(),
        symbols: m.symbols.clone(),
        results: m.results.iter().map(from_index_expr).collect::<Option<_>>()?,
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const IR_OPS: [BinOp; 6] =
        [BinOp::Add, BinOp::Sub, BinOp::Mul, BinOp::FloorDiv, BinOp::CeilDiv, BinOp::Mod];

    /// IR expressions over `d0..d2`, with divisors of every sign and the i64 extremes.
    fn ir_expr() -> impl Strategy<Value = AffineExpr> {
        let leaf = prop_oneof![
            (0usize..3).prop_map(|k| AffineExpr::Var(format!("d{k}"))),
            (-70i64..70).prop_map(AffineExpr::Const),
            prop_oneof![Just(i64::MAX), Just(i64::MIN)].prop_map(AffineExpr::Const),
        ];
        leaf.prop_recursive(4, 24, 2, |inner| {
            prop_oneof![
                inner.clone().prop_map(|a| AffineExpr::Neg(Box::new(a))),
                (0usize..6, inner.clone(), inner).prop_map(|(k, a, b)| AffineExpr::Bin(
                    IR_OPS[k],
                    Box::new(a),
                    Box::new(b)
                )),
            ]
        })
    }

    proptest! {
        /// The IR's evaluator (`AffineExpr::eval`, behind the interpreter's `layout.remap`) and
        /// the index language's (behind every simplification) are twins: they must agree on
        /// every expression, undefined results included, and the conversion must round-trip.
        #[test]
        fn ir_and_index_semantics_agree(e in ir_expr(), v in prop::array::uniform3(-100i64..100)) {
            let env = |n: &str| match n {
                "d0" => Some(v[0]),
                "d1" => Some(v[1]),
                "d2" => Some(v[2]),
                _ => None,
            };
            let ix = to_index_expr(&e);
            prop_assert_eq!(e.eval(&env), ix.eval(&env), "{}", e);
            prop_assert_eq!(fbc_dialects::layout::map::eval_expr(&e, &env), ix.eval(&env));
            prop_assert_eq!(from_index_expr(&ix), Some(e.clone()));
        }
    }

    fn eval(m: &IndexMap, idx: &[i64]) -> Vec<i64> {
        m.eval(idx).expect("defined")
    }

    #[test]
    fn transpose_reads_the_permuted_axis() {
        // y = transpose(x, [0, 2, 1, 3]): y[b, h, s, e] = x[b, s, h, e]
        let m = transpose_map(&[0, 2, 1, 3]);
        assert_eq!(eval(&m, &[1, 2, 3, 4]), vec![1, 3, 2, 4]);
        let m = transpose_map(&[2, 0, 1]);
        // y.shape = [x2, x0, x1]; y[i, j, k] = x[j, k, i]
        assert_eq!(eval(&m, &[7, 8, 9]), vec![8, 9, 7]);
    }

    #[test]
    fn reshape_delinearises_row_major() {
        let m = reshape_map(&[6, 4], &[2, 3, 4]);
        // y[1, 2, 3] is element 1*12 + 2*4 + 3 = 23 = x[5, 3]
        assert_eq!(eval(&m, &[1, 2, 3]), vec![5, 3]);
        assert_eq!(m.count_divmod(), 2);
    }

    #[test]
    fn broadcast_reads_index_zero_on_size_one_axes() {
        let m = broadcast_map(&[4, 1], &[2, 4, 6]);
        assert_eq!(eval(&m, &[1, 3, 5]), vec![3, 0]);
    }

    #[test]
    fn the_attention_chain_composes_to_the_direct_gather() {
        // (B,S,D) -> (B,S,H,HD) -> (B,H,S,HD) with S=8, H=2, HD=4.
        let r = reshape_map(&[1, 8, 8], &[1, 8, 2, 4]);
        let t = transpose_map(&[0, 2, 1, 3]);
        let m = compose_chain(&[r, t]).unwrap();
        for h in 0..2 {
            for s in 0..8 {
                for e in 0..4 {
                    assert_eq!(eval(&m, &[0, h, s, e]), vec![0, s, h * 4 + e]);
                }
            }
        }
    }

    #[test]
    fn shifts_and_masks_come_back_as_pow2_div_mod() {
        let e = Expr::parse("(d0 >> 6) + (d1 & 63) + (d2 << 2)").unwrap();
        let a = from_index_expr(&e).unwrap();
        assert_eq!(a.to_string(), "d0 floordiv 64 + d1 mod 64 + d2 * 4");
        assert!(from_index_expr(&Expr::parse("d0 & 5").unwrap()).is_none());
        assert!(from_index_expr(&Expr::parse("min(d0, 3)").unwrap()).is_none());
        let back = to_index_expr(&a);
        for (x, y, z) in [(0, 0, 0), (-65, 64, -3), (1000, 127, 9)] {
            let env = |n: &str| match n {
                "d0" => Some(x),
                "d1" => Some(y),
                "d2" => Some(z),
                _ => None,
            };
            assert_eq!(back.eval(&env), e.eval(&env));
        }
    }
}

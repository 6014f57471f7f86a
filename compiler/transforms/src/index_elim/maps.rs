//! Index maps of the FTI-D ops and their composition (paper Sec. 4.3.2, Eq. 3-4).
//!
//! Every map goes from a result index to the operand index it reads, with dimensions named
//! `d0, d1, ...` after the result's axes: `y[d] = x[map(d)]`. Composing a chain's maps from the
//! source outwards gives one map from the sink's indices to the source's, the `layout.remap` that
//! replaces the chain. The maps are built in their naive form (a reshape linearises and
//! delinearises with `floordiv`/`mod` on every axis) so that `divmod.before` counts what a
//! compiler without simplification would execute; `index-simplify` then reduces them.
//!
//! The maps are `fbc_index::IndexMap`s, the type `Attr::Map` holds. The simplifier may introduce
//! shifts and masks, which the IR's (affine) maps do not spell; `IndexMap::to_affine` writes them
//! back as power-of-two `floordiv`/`mod`/`*`, equal for every integer, so a printed map means
//! exactly what the simplifier proved. Back ends lower power-of-two div/mod to shifts.

use fbc_dialects::kind::{LayoutOp, OpKind, TensorOp};
use fbc_index::{BinOp as IndexOp, Expr, IndexMap};
use fbc_ir::{Attr, Module, Op};

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
        let term = if s == 1 {
            d(k)
        } else {
            Expr::Bin(IndexOp::Mul, Box::new(d(k)), Box::new(Expr::Const(s)))
        };
        linear = Some(match linear {
            None => term,
            Some(l) => Expr::Bin(IndexOp::Add, Box::new(l), Box::new(term)),
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
                Expr::Bin(
                    IndexOp::FloorDiv,
                    Box::new(linear.clone()),
                    Box::new(Expr::Const(in_strides[a])),
                )
            };
            // The outermost axis needs no `mod`: the linear index is below the element count.
            if a == 0 {
                q
            } else {
                Expr::Bin(IndexOp::Mod, Box::new(q), Box::new(Expr::Const(n as i64)))
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
            Attr::Map(map) => Some(map.clone()),
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

#[cfg(test)]
mod tests {
    use super::*;

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
}

//! Deterministic random inputs for any function: for `fbc run --random-inputs SEED` and for
//! translation validation.
//!
//! - Float arguments (f32, f16, bf16, f64): uniform in `[-1, 1)`. f32 values are multiples of
//!   2^-23 (24 random bits), f64 values multiples of 2^-52; f16/bf16 values are f32 draws rounded
//!   to the type. Uniform values in a unit range keep every op of a transformer graph (exp,
//!   softmax, normalisations, products of a few hundred terms) well away from overflow.
//! - i32 arguments are ids or labels: uniform in `[0, bound)`, where `bound` is the tightest
//!   limit of the argument's uses ([`index_bound`]): the table's row count `V` where it feeds
//!   `tensor.embedding`, the class count `C` of `tensor.cross_entropy(_grad)`'s logits, `vocab` of
//!   `tensor.embedding_grad`, followed through data movement (reshape, transpose, broadcast,
//!   slice, concat) and into callees of `func.call`. An i32 argument with no such use gets
//!   `[0, 2)` ([`DEFAULT_INDEX_BOUND`]).
//!
//! Each argument has its own stream, derived from the seed and the argument's position, so an
//! argument's values do not change when other arguments are given explicitly instead.

use std::collections::HashSet;

use fbc_dialects::kind::{FuncOp, OpKind, TensorOp as T};
use fbc_ir::{ElemType, FuncId, Module, Type};

use super::error::InterpError;
use super::value::Value;
use super::{arg_name, find_func};
use crate::reference::{round_bf16, round_f16, Tensor};

/// The range `[0, DEFAULT_INDEX_BOUND)` of random i32 arguments that feed no indexing op.
pub const DEFAULT_INDEX_BOUND: u64 = 2;

/// SplitMix64 (Steele, Lea, Flood 2014): tiny, seedable, statistically fine for test data.
#[derive(Debug, Clone)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[-1, 1)` with 24 random bits: exact in f32.
    fn unit_f32(&mut self) -> f32 {
        ((self.next_u64() >> 40) as f32) * (1.0 / (1u32 << 23) as f32) - 1.0
    }

    /// Uniform in `[-1, 1)` with 53 random bits.
    fn unit_f64(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64) * (1.0 / (1u64 << 52) as f64) - 1.0
    }
}

/// The random stream of argument `index` under `seed`.
fn stream(seed: u64, index: usize) -> SplitMix64 {
    let mut s =
        SplitMix64(seed ^ (index as u64).wrapping_add(1).wrapping_mul(0xD1B5_4A32_D192_ED03));
    // One draw decorrelates neighbouring seeds and indices.
    s.next_u64();
    s
}

/// Random values for every argument of the function named `func` (see the module docs).
pub fn random_inputs(module: &Module, func: &str, seed: u64) -> Result<Vec<Value>, InterpError> {
    let id = find_func(module, func)?;
    (0..module.func(id).args.len()).map(|i| random_input(module, id, i, seed)).collect()
}

/// A random value for argument `index` of `func`, in the natural storage of its type (f32, f16
/// and bf16 as `F32` holding values of the type; f64 as `F64`; i32 as `I32`).
pub fn random_input(
    module: &Module,
    func: FuncId,
    index: usize,
    seed: u64,
) -> Result<Value, InterpError> {
    let f = module.func(func);
    let ty = f.args.get(index).map(|&a| module.value_type(a));
    let unsupported = || InterpError::UnsupportedArgument {
        func: f.name.clone(),
        index,
        name: arg_name(module, func, index),
        ty: ty.map_or_else(|| "missing".to_string(), ToString::to_string),
    };
    let Some(Type::Tensor(t)) = ty else { return Err(unsupported()) };
    let shape: Vec<usize> = t
        .shape
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| unsupported()))
        .collect::<Result<_, _>>()?;
    let mut rng = stream(seed, index);
    let too_large = |_| unsupported();
    Ok(match t.elem {
        ElemType::F32 => {
            Value::F32(Tensor::from_fn(&shape, |_| rng.unit_f32()).map_err(too_large)?)
        }
        ElemType::F16 => {
            Value::F32(Tensor::from_fn(&shape, |_| round_f16(rng.unit_f32())).map_err(too_large)?)
        }
        ElemType::BF16 => {
            Value::F32(Tensor::from_fn(&shape, |_| round_bf16(rng.unit_f32())).map_err(too_large)?)
        }
        ElemType::F64 => {
            Value::F64(Tensor::from_fn(&shape, |_| rng.unit_f64()).map_err(too_large)?)
        }
        // Packed weights: every byte value, so every INT4 nibble, is as likely.
        ElemType::I8 => Value::I32(
            Tensor::from_fn(&shape, |_| i32::from(rng.next_u64() as u8 as i8))
                .map_err(too_large)?,
        ),
        ElemType::I32 => {
            let bound = index_bound(module, func, index)
                .unwrap_or(DEFAULT_INDEX_BOUND)
                .clamp(1, i32::MAX as u64 + 1);
            // `bound` ≤ 2^31, so the remainder fits in i32; the modulo bias (< 2^-32) is
            // irrelevant for test data.
            Value::I32(
                Tensor::from_fn(&shape, |_| (rng.next_u64() % bound) as i32).map_err(too_large)?,
            )
        }
        _ => return Err(unsupported()),
    })
}

/// The exclusive upper bound that argument `index` of `func` must respect as an index: the
/// tightest bound of its uses by indexing ops, through data movement and calls (see the module
/// docs); `None` when no use constrains it.
pub fn index_bound(module: &Module, func: FuncId, index: usize) -> Option<u64> {
    let arg = *module.func(func).args.get(index)?;
    bound_of(module, arg, &mut HashSet::new())
}

fn bound_of(module: &Module, v: fbc_ir::Value, seen: &mut HashSet<fbc_ir::Value>) -> Option<u64> {
    if !seen.insert(v) {
        return None;
    }
    let dim = |op: &fbc_ir::OpData, operand: usize, axis: usize| {
        let t = module.value_type(*op.operands.get(operand)?).as_tensor()?;
        t.shape.get(axis).copied()
    };
    let mut bound: Option<u64> = None;
    for u in &module.value(v).uses {
        let op = module.op(u.op);
        if op.erased {
            continue;
        }
        let b = match (OpKind::of_op(op), u.index) {
            (Some(OpKind::Tensor(T::Embedding)), 1) => dim(op, 0, 0),
            (Some(OpKind::Tensor(T::CrossEntropy | T::CrossEntropyGrad)), 1) => dim(op, 0, 1),
            // The offsets from which `update` fits: `0 ..= dest - update` along the axis.
            (Some(OpKind::Tensor(T::UpdateSlice)), 2) => {
                let t = module.value_type(*op.operands.first()?).as_tensor()?;
                let axis = op.attr("axis").and_then(fbc_ir::Attr::as_int)?;
                let axis = fbc_dialects::tensor::normalize_axis(axis, t.rank())?;
                dim(op, 0, axis).zip(dim(op, 1, axis)).map(|(size, n)| size - n + 1)
            }
            // A query position: below the key positions, so that masks mask something.
            (Some(OpKind::Tensor(T::CausalMask)), 0) => op
                .attr("shape")
                .and_then(fbc_ir::Attr::as_ints)
                .and_then(|s| s.get(1).and_then(|&m| u64::try_from(m).ok())),
            (Some(OpKind::Tensor(T::Attention)), i) if i as usize + 1 == op.operands.len() => {
                dim(op, 1, 2)
            }
            (Some(OpKind::Tensor(T::EmbeddingGrad)), 0) => {
                op.attr("vocab").and_then(fbc_ir::Attr::as_int).and_then(|n| u64::try_from(n).ok())
            }
            (
                Some(OpKind::Tensor(
                    T::Reshape | T::Transpose | T::Broadcast | T::Slice | T::Concat,
                )),
                _,
            ) => op.results.first().and_then(|&r| bound_of(module, r, seen)),
            (Some(OpKind::Func(FuncOp::Call)), i) => {
                let callee = op.attr("callee").and_then(|a| match a {
                    fbc_ir::Attr::Symbol(s) => module.find_func(s),
                    _ => None,
                });
                callee
                    .and_then(|c| module.func(c).args.get(i as usize).copied())
                    .and_then(|a| bound_of(module, a, seen))
            }
            // Every other use reads values, not indices.
            _ => None,
        };
        bound = match (bound, b) {
            (Some(x), Some(y)) => Some(x.min(y)),
            (x, y) => x.or(y),
        };
    }
    bound
}

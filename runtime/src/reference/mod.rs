//! Reference kernels: the numeric golden oracle of fbc.
//!
//! One plain, obviously-correct CPU implementation of every op of the tensor dialect (see
//! `docs/ir.md` and the starting contract's tensor-dialect table), plus the dedicated backward
//! helpers that autodiff emits. The interpreter dispatches IR ops to these functions; the
//! kernels themselves know nothing of the IR.
//!
//! # Conventions
//!
//! - Data is a [`Tensor<T>`]: dense, row-major, owned, any rank including 0. Float kernels are
//!   generic over [`Real`] (`f32`, the default, and `f64`, which the gradient checks use); ids
//!   and labels are `Tensor<i32>`; data-movement kernels ([`reshape`], [`transpose`],
//!   [`slice`](fn@slice), [`concat`](fn@concat), [`broadcast`]) take any `T: Copy`.
//!   `f16`/`bf16` tensors are computed in `f32` and rounded after every op
//!   ([`Precision::round`], [`round_to_f16`], [`round_to_bf16`]).
//! - Binary elementwise ops broadcast as NumPy does ([`broadcast_shapes`]); backward helpers
//!   never broadcast `dy`, and return gradients in their operands' own shapes.
//! - Axes are `i64`, negative ones counting from the end; float attributes (`eps`, `factor`) are
//!   `f64` and rounded to `T`.
//! - Nothing panics on a bad shape, axis, permutation, id or label: every such case is a
//!   [`KernelError`] naming the op and the offending value.
//! - Accumulation happens in `T`, in a fixed order (row-major), so results are deterministic and
//!   bit-reproducible across runs. Matmul is the exception to the fixed order: its core is
//!   `matrixmultiply`'s blocked, possibly FMA-using GEMM (`gemm.rs`, the crate's only `unsafe`),
//!   which sums over `k` in blocks; it is deterministic on one machine and within the usual
//!   `k·ε·Σ|a·b|` of the left-to-right sum.

mod error;
mod gemm;
mod layout;
mod scalar;
mod tensor;

pub mod conv;
pub mod elementwise;
pub mod grad;
pub mod matmul;
pub mod nn;
pub mod quant;
pub mod reduce;
pub mod shape;

#[cfg(test)]
mod testing;
#[cfg(test)]
mod tests;

pub use conv::{
    conv2d, conv2d_grad_input, conv2d_grad_weight, group_norm, group_norm_grad, upsample,
    Conv2dParams,
};
pub use elementwise::{
    add, div, erf, exp, gelu, log, max, min, mul, neg, pow, relu, rsqrt, scale, select, sigmoid,
    silu, sqrt, sub, tanh, GeluApproximation,
};
pub use error::{KernelError, Result};
pub use grad::{
    concat_grad, cross_entropy_grad, embedding_grad, gelu_grad, layernorm_grad, matmul_grad,
    max_grad, min_grad, reduce_max_grad, reduce_mean_grad, reduce_sum_grad, relu_grad,
    rmsnorm_grad, rope_grad, sigmoid_grad, silu_grad, softmax_grad, tanh_grad, transpose_grad,
};
pub use layout::{contiguous_strides, normalize_axis};
pub use matmul::matmul;
pub use nn::{
    attention, causal_mask, cross_entropy, embedding, layernorm, log_softmax, rmsnorm, rope,
    softmax, AttentionOptions,
};
pub use quant::dequantize;
pub use reduce::{reduce_max, reduce_mean, reduce_sum, reduce_to_shape};
pub use scalar::{round_bf16, round_f16, round_to_bf16, round_to_f16, Precision, Real};
pub use shape::{
    broadcast, concat, inverse_permutation, reshape, slice, slice_grad, transpose, update_slice,
};
pub use tensor::{broadcast_shapes, Tensor};

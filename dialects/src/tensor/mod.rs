//! The `tensor` dialect: value-semantics tensor ops of transformer training graphs, with their
//! verifiers, result-type inference and FBLayout classes.
//!
//! Conventions shared by every op (`docs/ir.md`; `docs/ops.md`, generated from these definitions,
//! is the op reference):
//! - tensors are indexed row-major; axes may be negative (`-1` is the last axis);
//! - elementwise binary ops broadcast as NumPy does ([`broadcast_shapes`]) and require both
//!   operands to have the same element type;
//! - math requires a float element type (f32, f16, bf16, f64); integer tensors (i32) are accepted
//!   where they make sense: indices (`embedding`'s ids, `cross_entropy`'s labels), data movement
//!   (`reshape`, `transpose`, `broadcast`, `slice`, `concat`) and `constant`;
//! - every op is pure; a result whose element count overflows u64 is an error;
//! - each op declares its FBLayout class (paper Sec. 4.1, Table 1), decided by two questions:
//!   does the backward need forward tensors (FTD) or not (FTI), and do forward and backward access
//!   tensors with the same pattern (C) or not (D). Ops the paper's table does not list justify
//!   their class in their documentation.
//!
//! The ops are grouped in several statics ([`GROUPS`]); [`register`] adds them all to a registry.
//! [`crate::kind::TensorOp`] names each of them as a typed kind.

mod common;
pub mod constant;
pub mod conv;
pub mod elementwise;
pub mod grad;
pub mod matmul;
pub mod nn;
pub mod quant;
pub mod reduce;
pub mod shape;

pub use common::{broadcast_shapes, broadcasts_to, normalize_axis, BroadcastError};
pub use constant::splat;
pub use conv::{Conv2dAttrs, Padding};

use fbc_ir::{AttrDef, AttrKind, OpDef, OpRegistry};

/// Every group of tensor ops, in documentation order.
pub static GROUPS: &[&[OpDef]] = &[
    constant::OPS,
    elementwise::OPS,
    matmul::OPS,
    reduce::OPS,
    nn::OPS,
    conv::OPS,
    quant::OPS,
    shape::OPS,
    grad::OPS,
];

/// All tensor ops.
pub fn ops() -> impl Iterator<Item = &'static OpDef> {
    GROUPS.iter().flat_map(|g| g.iter())
}

/// The tensor op named `name` (`tensor.add`).
pub fn find(name: &str) -> Option<&'static OpDef> {
    ops().find(|d| d.name == name)
}

/// Registers every tensor op in `registry`.
pub fn register(registry: &mut OpRegistry) {
    for g in GROUPS {
        registry.register_all(g);
    }
}

/// `axis`, an integer defaulting to the last axis.
pub(crate) const AXIS_LAST: AttrDef = AttrDef::optional(
    "axis",
    AttrKind::Int,
    "-1",
    "the axis the op works along; negative values count from the end",
);

/// `eps`, the variance epsilon of normalizations.
pub(crate) const EPS: AttrDef = AttrDef::optional(
    "eps",
    AttrKind::Float,
    "1.0e-5",
    "added to the variance (or mean square) before the square root; finite and ≥ 0",
);

/// `approximate` of GELU.
pub(crate) const APPROXIMATE: AttrDef = AttrDef::optional(
    "approximate",
    AttrKind::Enum(&["none", "tanh"]),
    "\"none\"",
    "\"none\": the exact erf form; \"tanh\": the tanh approximation",
);

/// Default `eps` of normalizations.
pub(crate) const DEFAULT_EPS: f64 = 1e-5;

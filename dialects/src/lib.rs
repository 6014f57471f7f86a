//! The dialects of fbc: `tensor` (value-semantics ops of training graphs, their verifiers and
//! result-type inference, and FBLayout classes), `layout` (R-Tile layouts, explicit conversions
//! and index remaps) and `memory` (buffers, image2d textures, kernels, allocation).
//!
//! [`registry`] gives an [`fbc_ir::OpRegistry`] holding the IR core's `func` ops and every op
//! declared here; [`kind`] gives each of them a typed kind ([`kind::OpKind`]) that consumers
//! match on instead of names.

pub mod kind;
pub mod layout;
pub mod memory;
pub mod tensor;

/// The registry of every op fbc knows: `func.*` (from the IR core), `tensor.*`, `layout.*` and
/// `memory.*`.
pub fn registry() -> fbc_ir::OpRegistry {
    let mut r = fbc_ir::OpRegistry::new();
    tensor::register(&mut r);
    layout::register(&mut r);
    memory::register(&mut r);
    r
}

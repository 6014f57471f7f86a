//! The dialects of fbc: `tensor` (value-semantics ops of training graphs, their verifiers and
//! result-type inference, and FBLayout classes). The `layout` and `memory` dialects will join it.
//!
//! [`registry`] gives an [`fbc_ir::OpRegistry`] holding the IR core's `func` ops and every op
//! declared here.

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

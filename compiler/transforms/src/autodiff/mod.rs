//! Reverse-mode automatic differentiation (issue 3). Not yet written: registers nothing.

use fbc_ir::pass::PassRegistry;

/// Registers the autodiff passes.
pub fn register(_registry: &mut PassRegistry) {}

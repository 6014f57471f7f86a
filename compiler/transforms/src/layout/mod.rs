//! The FBLayout passes (issue 4). Not yet written: registers nothing.

use fbc_ir::pass::PassRegistry;

/// Registers the FBLayout passes.
pub fn register(_registry: &mut PassRegistry) {}

//! The reference executor of the memory dialect (`exec`): storage contents and the host copies
//! between tensors and storage (`storage.rs`: [`MemData`], [`pack`], [`unpack`]), the meaning of
//! one `memory.launch` (`launch.rs`: [`run_kernel`]), and the [`Launcher`] trait through which the
//! interpreter runs launches (the reference semantics, or native code from the JIT).
//!
//! Every back end (the OpenCL C writer, the Cranelift JIT) is checked against this module, so it
//! follows `fbc_dialects::memory::kernel`'s definition literally:
//!
//! - the parallel sub-domain is walked row-major; at each point the guard is tested, the
//!   reduction sub-domain is folded row-major from the combine's identity (`acc = acc + v` in
//!   `f32`, the reference interpreter's summation order), the epilogue is applied and the result
//!   is stored at the output map; where the guard fails the output element becomes 0;
//! - index maps are evaluated with MLIR's floor `floordiv`/`mod` (and checked arithmetic); an
//!   undefined map or an access outside an operand's storage is an error, never a panic;
//! - an image is its texel array: element `(x, y, c)` of a `W × H` image is `(y·W + x)·4 + c`;
//! - an `f16` image is held as `f32` values that `f16` represents exactly: [`pack`] and every
//!   store of a launch into it round to the nearest `f16` with
//!   [`round_f16`](fbc_dialects::memory::scalar::round_f16), so the executor models a device's
//!   `CL_HALF_FLOAT` image value for value.
//!
//! Speed: maps and expressions are compiled once per launch (maps that are linear in the domain
//! indices become dot products, expressions a flat stack program); nothing is allocated per point.

mod launch;
mod storage;
#[cfg(test)]
pub(crate) mod tests;

pub use launch::run_kernel;
pub use storage::{pack, unpack, MemData};

use fbc_dialects::memory::{Kernel, MemType};

// ----- launchers -----------------------------------------------------------------------------------

/// Executes `memory.launch` ops for the interpreter: the reference executor by default
/// ([`ReferenceLauncher`]); a back end (the Cranelift JIT) plugs in native code through
/// [`Interpreter::run_with_launcher`](crate::interp::Interpreter::run_with_launcher).
pub trait Launcher {
    /// Runs kernel `k` on `operands` (inputs, then the output; one per entry of `types`). The
    /// kernel has verified against `types`; the operands hold storage of those types.
    fn launch(
        &mut self,
        k: &Kernel,
        types: &[MemType],
        operands: &mut [&mut MemData],
    ) -> Result<(), String>;
}

/// The reference semantics: [`run_kernel`].
#[derive(Debug, Clone, Copy, Default)]
pub struct ReferenceLauncher;

impl Launcher for ReferenceLauncher {
    fn launch(
        &mut self,
        k: &Kernel,
        types: &[MemType],
        operands: &mut [&mut MemData],
    ) -> Result<(), String> {
        run_kernel(k, types, operands)
    }
}

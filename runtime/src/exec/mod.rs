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

/// Runs one ordinary launch on its operands (the reference executor, or a back end's).
pub type StepRunner<'a> =
    dyn FnMut(&Kernel, &[MemType], &mut [&mut MemData]) -> Result<(), String> + 'a;

/// Runs an attention launch as its definition: the three steps of
/// [`Kernel::attention_parts`] over two zeroed scratch buffers, each through `step` (the
/// reference executor, or a back end's own launch of an ordinary kernel). An operand a step
/// reads twice (`q` and its rotated half) is read from a copy the second time.
pub fn run_attention(
    k: &Kernel,
    types: &[MemType],
    operands: &mut [&mut MemData],
    step: &mut StepRunner<'_>,
) -> Result<(), String> {
    let parts = k.attention_parts().map_err(|e| format!("kernel `{}`: {e}", k.name))?;
    // The launch's own symbols first, so that an error names its operands.
    launch::symbol_values(k, operands)?;
    let n = operands.len();
    // The scratch is the executor's own allocation: checked against the memory limit like storage.
    let mut scratch = Vec::with_capacity(parts.scratch.len());
    for t in &parts.scratch {
        let what = format_args!("the scratch {t} of attention launch `{}`", k.name);
        let n = crate::limits::check_elems(what, Some(t.elems()), 4)?;
        scratch.push(MemData::F32(vec![0.0; n]));
    }
    let all: Vec<MemType> = types.iter().chain(&parts.scratch).copied().collect();
    for (sk, ops) in &parts.steps {
        if ops.iter().any(|&o| o >= all.len()) {
            return Err(format!("kernel `{}`: step `{}` names a missing operand", k.name, sk.name));
        }
        let slot = |o: usize, operands: &mut [&mut MemData], scratch: &mut [MemData]| {
            let m: &mut MemData = if o < n { operands[o] } else { &mut scratch[o - n] };
            std::mem::replace(m, MemData::F32(Vec::new()))
        };
        let mut taken: Vec<MemData> = Vec::with_capacity(ops.len());
        for (i, &o) in ops.iter().enumerate() {
            match ops[..i].iter().position(|&p| p == o) {
                Some(first) => {
                    let copy = taken[first].clone();
                    taken.push(copy);
                }
                None => taken.push(slot(o, operands, &mut scratch)),
            }
        }
        let t: Vec<MemType> = ops.iter().map(|&o| all[o]).collect();
        let r = {
            let mut refs: Vec<&mut MemData> = taken.iter_mut().collect();
            step(sk, &t, &mut refs)
        };
        for (i, (&o, m)) in ops.iter().zip(taken).enumerate() {
            if ops[..i].contains(&o) {
                continue;
            }
            if o < n {
                *operands[o] = m;
            } else {
                scratch[o - n] = m;
            }
        }
        r.map_err(|e| format!("{e} (step `{}` of attention launch `{}`)", sk.name, k.name))?;
    }
    Ok(())
}

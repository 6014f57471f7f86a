//! Calling compiled kernels: the only unsafe code of the CPU back end.
//!
//! A compiled kernel is `extern "C" fn(*const *mut u8) -> u32`. It reads operand `k` only at
//! element offsets in `[0, types[k].elems())` (every access is either proven in range at compile
//! time or checked at run time, see the `lower` module) and writes only its last operand. So it
//! is sound to call exactly when each pointer is valid for reads and writes of that many
//! elements of the operand's element type, the output does not alias anything else, and nothing
//! else accesses the storage during the call: [`call`] establishes all three from `&mut` slices
//! whose lengths and element types it checks against the types the kernel was compiled for.
//! A kernel with an interchanged reduction also gets a scratch array of accumulators, allocated
//! here with the length it was compiled for.
#![allow(unsafe_code)]

use cranelift_jit::JITModule;
use fbc_dialects::memory::MemType;
use fbc_ir::ElemType;

/// One operand's host storage: a buffer's elements, or an image's texel array (`4·W·H` values,
/// element `(y·W + x)·4 + c`).
#[derive(Debug)]
pub enum OperandMut<'a> {
    F32(&'a mut [f32]),
    I32(&'a mut [i32]),
}

impl OperandMut<'_> {
    /// A shorter borrow of the same storage.
    pub fn reborrow(&mut self) -> OperandMut<'_> {
        match self {
            OperandMut::F32(s) => OperandMut::F32(s),
            OperandMut::I32(s) => OperandMut::I32(s),
        }
    }

    pub(super) fn to_owned_data(&self) -> Owned {
        match self {
            OperandMut::F32(s) => Owned::F32(s.to_vec()),
            OperandMut::I32(s) => Owned::I32(s.to_vec()),
        }
    }

    fn len(&self) -> usize {
        match self {
            OperandMut::F32(s) => s.len(),
            OperandMut::I32(s) => s.len(),
        }
    }

    fn elem(&self) -> ElemType {
        match self {
            OperandMut::F32(_) => ElemType::F32,
            OperandMut::I32(_) => ElemType::I32,
        }
    }

    fn as_mut_ptr(&mut self) -> *mut u8 {
        match self {
            OperandMut::F32(s) => s.as_mut_ptr().cast(),
            OperandMut::I32(s) => s.as_mut_ptr().cast(),
        }
    }
}

/// A copy of an operand's storage.
pub(super) enum Owned {
    F32(Vec<f32>),
    I32(Vec<i32>),
}

impl Owned {
    pub(super) fn as_operand(&mut self) -> OperandMut<'_> {
        match self {
            Owned::F32(v) => OperandMut::F32(v),
            Owned::I32(v) => OperandMut::I32(v),
        }
    }
}

type KernelFn = unsafe extern "C" fn(*const *mut u8) -> u32;

/// Calls the kernel at `code`, compiled for `types`, on `operands`. `Err(message)` when the
/// operands do not match the types (nothing ran); `Ok(Err(code))` when the kernel stopped with a
/// fault code.
pub(super) fn call(
    code: *const u8,
    types: &[MemType],
    scratch: Option<u64>,
    operands: &mut [OperandMut<'_>],
) -> Result<Result<(), u32>, String> {
    if operands.len() != types.len() {
        return Err(format!("{} operands given, the kernel takes {}", operands.len(), types.len()));
    }
    for (k, (o, t)) in operands.iter().zip(types).enumerate() {
        let want = usize::try_from(t.elems())
            .map_err(|_| format!("operand {k} ({t}) does not fit in memory"))?;
        // An `f16` image is held as `f32` values (each exact in `f16`).
        if o.len() != want || o.elem() != t.value_elem() {
            return Err(format!(
                "operand {k} has {} {} elements, the kernel was compiled for {t} ({want} {} elements)",
                o.len(),
                o.elem().name(),
                t.value_elem().name()
            ));
        }
    }
    let mut ptrs: Vec<*mut u8> = operands.iter_mut().map(OperandMut::as_mut_ptr).collect();
    // The accumulators of an interchanged reduction, read and written at `[0, n)` only.
    let mut acc: Vec<f32> = match scratch {
        Some(n) => vec![
            0.0;
            usize::try_from(n)
                .map_err(|_| format!("{n} accumulators do not fit in memory"))?
        ],
        None => Vec::new(),
    };
    if scratch.is_some() {
        ptrs.push(acc.as_mut_ptr().cast());
    }
    // SAFETY: `code` is the finalized address of a function this module's `Jit` compiled with the
    // signature `KernelFn` (one pointer parameter, an `i32` result, the host's C calling
    // convention), and the `Jit` that owns the code outlives this call (`Jit::run` borrows it).
    let f: KernelFn = unsafe { std::mem::transmute::<*const u8, KernelFn>(code) };
    // SAFETY: see the module doc. `ptrs[k]` points at `types[k].elems()` elements of
    // `types[k].elem` (checked above), valid for reads and writes for the whole call because the
    // slices are exclusively borrowed; distinct `&mut` slices do not overlap; the kernel accesses
    // no element outside those ranges, and `ptrs` outlives the call. With `scratch`, the last
    // pointer is `acc`'s, `n` elements that the kernel compiled with that `scratch` indexes
    // only by the loop over a dimension of extent `n`; `acc` lives until the function returns.
    let rc = unsafe { f(ptrs.as_ptr()) };
    drop(acc);
    Ok(if rc == 0 { Ok(()) } else { Err(rc) })
}

/// Releases the module's code memory. Called only when the owning `Jit` is dropped, after its
/// table of compiled functions is cleared, so no address into the module survives.
pub(super) fn free(module: JITModule) {
    // SAFETY: `Jit` never hands out addresses of compiled code (only `KernelId` indices), and
    // it calls this from `drop` with the only copies of the addresses already cleared.
    unsafe { module.free_memory() }
}

//! Calling compiled kernels: the unsafe code the CPU back ends share.
//!
//! A compiled kernel is `extern "C" fn(*const *mut u8, i64, i64) -> u32`. It reads operand `k`
//! only at element offsets in `[0, types[k].elems())` (every access is either proven in range at
//! compile time or checked at run time, see each back end's `lower` module, whatever chunk it is
//! given) and writes only its last operand. So it is sound to call exactly when each pointer is
//! valid for reads and writes of that many elements of the operand's element type, the output
//! does not alias anything else, and nothing else accesses the storage during the call: [`call`]
//! establishes all three from `&mut` slices whose lengths and element types it checks against the
//! types the kernel was compiled for.
//! A kernel with an interchanged reduction (its accumulators) or a packed contraction (its
//! panels and accumulator tile) also gets a scratch array, allocated here with the length it was
//! compiled for.
//!
//! Threads: [`call`] may run the kernel on several chunks of its split dimension at once, as
//! tasks of rayon's thread pool (no thread is started per launch), each with its own operand
//! table and scratch array. Inputs are then read by
//! several threads (no one writes them); the output is written by several threads, which is
//! sound only when no element is written by two chunks: the caller passes several chunks only
//! when `parallel::Split::chunks` proved their writes disjoint and the kernel does not read its
//! output.
#![allow(unsafe_code)]

use fbc_dialects::memory::MemType;
use fbc_ir::ElemType;

/// One operand's host storage: a buffer's elements, or an image's texel array (`4·W·H` values,
/// element `(y·W + x)·4 + c`).
#[derive(Debug)]
pub enum OperandMut<'a> {
    F32(&'a mut [f32]),
    I32(&'a mut [i32]),
    /// An `i8` buffer (packed weights; kernels only read it).
    I8(&'a mut [i8]),
}

impl OperandMut<'_> {
    /// A shorter borrow of the same storage.
    pub fn reborrow(&mut self) -> OperandMut<'_> {
        match self {
            OperandMut::F32(s) => OperandMut::F32(s),
            OperandMut::I32(s) => OperandMut::I32(s),
            OperandMut::I8(s) => OperandMut::I8(s),
        }
    }

    pub(super) fn to_owned_data(&self) -> Owned {
        match self {
            OperandMut::F32(s) => Owned::F32(s.to_vec()),
            OperandMut::I32(s) => Owned::I32(s.to_vec()),
            OperandMut::I8(s) => Owned::I8(s.to_vec()),
        }
    }

    fn len(&self) -> usize {
        match self {
            OperandMut::F32(s) => s.len(),
            OperandMut::I32(s) => s.len(),
            OperandMut::I8(s) => s.len(),
        }
    }

    fn elem(&self) -> ElemType {
        match self {
            OperandMut::F32(_) => ElemType::F32,
            OperandMut::I32(_) => ElemType::I32,
            OperandMut::I8(_) => ElemType::I8,
        }
    }

    fn as_mut_ptr(&mut self) -> *mut u8 {
        match self {
            OperandMut::F32(s) => s.as_mut_ptr().cast(),
            OperandMut::I32(s) => s.as_mut_ptr().cast(),
            OperandMut::I8(s) => s.as_mut_ptr().cast(),
        }
    }
}

/// A copy of an operand's storage.
pub(super) enum Owned {
    F32(Vec<f32>),
    I32(Vec<i32>),
    I8(Vec<i8>),
}

impl Owned {
    pub(super) fn as_operand(&mut self) -> OperandMut<'_> {
        match self {
            Owned::F32(v) => OperandMut::F32(v),
            Owned::I32(v) => OperandMut::I32(v),
            Owned::I8(v) => OperandMut::I8(v),
        }
    }
}

type KernelFn = unsafe extern "C" fn(*const *mut u8, i64, i64) -> u32;

/// The operand base pointers, shared by the threads of one call.
#[derive(Clone, Copy)]
struct Bases<'p>(&'p [*mut u8]);

// SAFETY: the pointers are only dereferenced by the kernel calls of `call`, all of which end
// before `call` returns (the pool's scope ends first), while the storage is exclusively
// borrowed by `call`; concurrent accesses are reads of inputs and writes of disjoint output
// elements (module doc).
unsafe impl Send for Bases<'_> {}

/// Calls the kernel at `code`, compiled for `types`, on `operands`, once per chunk `[lo, hi)`
/// of its split dimension (as tasks of rayon's pool when there are several; several
/// chunks only when their writes are proven disjoint, see the module doc). `Err(message)` when
/// the operands do not match the types (nothing ran); `Ok(Err(code))` when a chunk stopped with
/// a fault code: the first such chunk in order.
pub(super) fn call(
    code: *const u8,
    types: &[MemType],
    scratch: Option<u64>,
    operands: &mut [OperandMut<'_>],
    chunks: &[(i64, i64)],
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
    let scratch = match scratch {
        Some(n) => {
            Some(usize::try_from(n).map_err(|_| format!("{n} accumulators do not fit in memory"))?)
        }
        None => None,
    };
    let ptrs: Vec<*mut u8> = operands.iter_mut().map(OperandMut::as_mut_ptr).collect();
    let bases = Bases(&ptrs);
    // SAFETY: `code` is the finalized address of a function a back end of this crate compiled
    // with the signature `KernelFn` (a pointer and two `i64` parameters, an `i32` result, the
    // host's C calling convention; see `Codegen::emit`), and the `Jit` that owns the code
    // outlives this call (`Jit::run` borrows it).
    let f: KernelFn = unsafe { std::mem::transmute::<*const u8, KernelFn>(code) };
    let run = move |bases: Bases<'_>, (lo, hi): (i64, i64)| -> u32 {
        let mut table = bases.0.to_vec();
        // The accumulators of an interchanged reduction, read and written at `[0, n)` only;
        // one array per chunk.
        let mut acc: Vec<f32> = vec![0.0; scratch.unwrap_or(0)];
        if scratch.is_some() {
            table.push(acc.as_mut_ptr().cast());
        }
        // SAFETY: see the module doc. `table[k]` points at `types[k].elems()` elements of
        // `types[k].elem` (checked above), valid for reads and writes for the whole call because
        // the slices are exclusively borrowed by `call`, which outlives every chunk's call;
        // distinct `&mut` slices do not overlap; the kernel accesses no element outside those
        // ranges (any `lo`, `hi` are clamped by the code); chunks running at once only read the
        // inputs and write disjoint output elements (the caller's proof). With `scratch`, the
        // last pointer is this chunk's own `acc`, `n` elements that the kernel compiled with
        // that `scratch` indexes only below `n` (by the loop over a dimension of extent `n`, or
        // at the packed contraction's panel and tile offsets); `acc` and `table` live until the
        // function returns.
        let rc = unsafe { f(table.as_ptr(), lo, hi) };
        drop(acc);
        rc
    };
    let codes: Vec<u32> = match chunks {
        [] => Vec::new(),
        [one] => vec![run(bases, *one)],
        [first, rest @ ..] => {
            // The chunks as tasks of rayon's pool, each writing its own code; the scope ends
            // when every task has.
            let mut codes = vec![0u32; chunks.len()];
            let (head, tail) = codes.split_at_mut(1);
            rayon::scope(move |s| {
                for (code, &c) in tail.iter_mut().zip(rest) {
                    s.spawn(move |_| *code = run(bases, c));
                }
                head[0] = run(bases, *first);
            });
            codes
        }
    };
    Ok(match codes.into_iter().find(|&rc| rc != 0) {
        None => Ok(()),
        Some(rc) => Err(rc),
    })
}

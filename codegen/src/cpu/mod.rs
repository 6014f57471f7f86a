//! What the CPU back ends share: the compiled-kernel table and its cache, running a kernel on
//! host storage (operand checks, the snapshot of an output the kernel reads, the scratch array
//! of an interchanged reduction, the split over threads) and the loop-nest analysis.
//!
//! A back end ([`Codegen`]: [`crate::cranelift`], and [`crate::llvm`] with the `llvm` feature)
//! only turns a checked [`Kernel`] and the [`Nest`] chosen here into a native function
//! `extern "C" fn(operands: *const *mut u8, lo: i64, hi: i64) -> u32` with the semantics the
//! [`crate::cranelift`] module documents (index maps, payload arithmetic, reduction order, bounds
//! checks, fault codes); [`Jit`] does everything else, so both back ends run kernels the same
//! way, with the same threads and the same faults.

pub(crate) mod exec;
pub(crate) mod lower;
pub(crate) mod math;
pub(crate) mod nest;
pub(crate) mod parallel;

use std::cell::Cell;
use std::collections::HashMap;
use std::fmt;

use fbc_dialects::memory::{Kernel, MemType};

pub use exec::OperandMut;
pub use nest::{GemmShape, Nest};
pub use parallel::{CALL_WEIGHT, MIN_POINTS_PER_THREAD, THREADS_ENV};

/// The environment variable that turns packed contractions off (`0`) in the JITs made by
/// `Jit::new` and `LlvmJit::new`, for comparisons: every result is the same either way.
pub const PACKED_ENV: &str = "FBC_JIT_PACKED";

/// Why a kernel could not be compiled or run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The back end does not support this machine (or could not be set up for it).
    #[error("the CPU JIT does not support this machine: {0}")]
    Host(String),
    /// The JIT's configuration is invalid (`FBC_JIT_THREADS` is not a positive number).
    #[error("{0}")]
    Config(String),
    /// The kernel is invalid for its operand types, or uses something the JIT cannot compile.
    #[error("kernel `{kernel}`: {message}")]
    Kernel { kernel: String, message: String },
    /// The code generator (`backend`: `Cranelift`, `LLVM`) rejected the generated function, or
    /// LLVM's verifier did (a bug of that back end).
    #[error("kernel `{kernel}`: {backend} failed: {message}")]
    Codegen { kernel: String, backend: &'static str, message: String },
    /// The operands passed to a compiled kernel do not match the types it was compiled for.
    #[error("kernel `{kernel}`: {message}")]
    Operands { kernel: String, message: String },
    /// The kernel stopped at run time (an out-of-bounds access, a division by zero, ...).
    #[error("kernel `{kernel}`: {reason}")]
    Runtime { kernel: String, reason: Fault },
}

/// What stopped a running kernel; decoded from the native function's return code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Operand `k` read at its index map outside its storage.
    ReadOutOfBounds(usize),
    /// Operand `k` loaded (`xK[e]`) at an offset outside its storage.
    LoadOutOfBounds(usize),
    /// The output map (operand `k`) pointed outside the output storage.
    WriteOutOfBounds(usize),
    /// Integer `/` or `%` by zero in the payload.
    DivisionByZero,
    /// `int(..)` of NaN.
    IntOfNan,
    /// A map of operand `k` divided by a non-positive number (undefined); `k` = operand count
    /// for the guard map.
    MapUndefined(usize),
    /// Symbol `j` of the maps was outside its range (nothing was written).
    SymbolOutOfRange(usize),
    /// A code this back end does not produce (never expected).
    Unknown(u32),
}

impl Fault {
    const READ: u32 = 1;
    const LOAD: u32 = 2;
    const WRITE: u32 = 3;
    const DIV0: u32 = 4;
    const INT_NAN: u32 = 5;
    const MAP: u32 = 6;
    const SYMBOL: u32 = 7;

    /// The return code of the native function.
    pub fn code(self) -> u32 {
        let op = |k: usize| u32::try_from(k).unwrap_or(u32::MAX >> 8).min(u32::MAX >> 8) << 8;
        match self {
            Fault::ReadOutOfBounds(k) => Self::READ | op(k),
            Fault::LoadOutOfBounds(k) => Self::LOAD | op(k),
            Fault::WriteOutOfBounds(k) => Self::WRITE | op(k),
            Fault::DivisionByZero => Self::DIV0,
            Fault::IntOfNan => Self::INT_NAN,
            Fault::MapUndefined(k) => Self::MAP | op(k),
            Fault::SymbolOutOfRange(j) => Self::SYMBOL | op(j),
            Fault::Unknown(c) => c,
        }
    }

    /// Decodes a non-zero return code.
    pub(crate) fn from_code(code: u32) -> Fault {
        let k = (code >> 8) as usize;
        match code & 0xff {
            Self::READ => Fault::ReadOutOfBounds(k),
            Self::LOAD => Fault::LoadOutOfBounds(k),
            Self::WRITE => Fault::WriteOutOfBounds(k),
            Self::DIV0 => Fault::DivisionByZero,
            Self::INT_NAN => Fault::IntOfNan,
            Self::MAP => Fault::MapUndefined(k),
            Self::SYMBOL => Fault::SymbolOutOfRange(k),
            _ => Fault::Unknown(code),
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::ReadOutOfBounds(k) => {
                write!(f, "operand {k} read out of bounds (its index map leaves the storage)")
            }
            Fault::LoadOutOfBounds(k) => write!(f, "`x{k}[..]` loads out of bounds"),
            Fault::WriteOutOfBounds(k) => {
                write!(f, "the output (operand {k}) written out of bounds")
            }
            Fault::DivisionByZero => f.write_str("integer division by zero"),
            Fault::IntOfNan => f.write_str("int() of NaN"),
            Fault::MapUndefined(k) => {
                write!(f, "the index map of operand {k} divides by a non-positive number")
            }
            Fault::SymbolOutOfRange(j) => {
                write!(f, "symbol s{j} of the maps is outside its range (nothing was written)")
            }
            Fault::Unknown(c) => write!(f, "unknown error code {c}"),
        }
    }
}

/// A compiled kernel of a [`Jit`]; valid only with the `Jit` that made it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KernelId(usize);

/// A code generator of a CPU back end: emits one kernel as a native function.
pub trait Codegen {
    /// The code generator's name in errors (`Cranelift`, `LLVM`).
    const NAME: &'static str;

    /// Compiles `kernel` (checked against `types`, the snapshot operand already inserted) with
    /// the loop nest `nest` into a native function `extern "C" fn(*const *mut u8, i64, i64) ->
    /// u32` and returns its address, which must stay valid while `self` lives. The function
    /// must access operand `k` only at element offsets in `[0, types[k].elems())` and the
    /// scratch array (with `nest.scratch` or `nest.gemm`, of `Nest::scratch_len` elements) only
    /// below its length, for any `lo` and `hi`, and write only the last operand (the `exec`
    /// module's contract). `Err` with the kernel's
    /// own errors ([`Error::Kernel`]) or the code generator's ([`Error::Codegen`]).
    fn emit(&mut self, kernel: &Kernel, types: &[MemType], nest: Nest) -> Result<*const u8, Error>;

    /// The register and cache blocking of the packed contraction nest
    /// (`nest::gemm`) in this code generator's vectors; `None`: contractions take the plain
    /// nest.
    fn gemm_shape(&self) -> Option<GemmShape>;

    /// Sets what [`Codegen::gemm_shape`] returns.
    fn set_gemm_shape(&mut self, shape: Option<GemmShape>);
}

struct Compiled {
    name: String,
    /// The operand types of the native function (with the snapshot operand, see `snapshot`).
    types: Vec<MemType>,
    code: *const u8,
    /// The kernel reads its output operand: the native function takes one more operand, a copy
    /// of the output before the launch, inserted before the output (reads see the contents
    /// before the launch, as in the reference executor).
    snapshot: bool,
    /// Accumulators of an interchanged reduction (`nest::interchange`): the native function
    /// takes a scratch array of that many `f32` after its operands.
    scratch: Option<u64>,
    /// How the launch may be split over threads; `None`: always in one piece.
    split: Option<parallel::Split>,
    /// Compiled as a packed contraction (`nest::gemm`).
    packed: bool,
}

/// A CPU JIT: a code generator `C`, the kernels it compiled and their cache, and how launches
/// are split over threads.
pub struct Jit<C> {
    codegen: C,
    kernels: Vec<Compiled>,
    cache: HashMap<String, KernelId>,
    hits: u64,
    threads: usize,
    min_points: u64,
    /// Runs split over more than one thread.
    parallel_runs: Cell<u64>,
}

impl<C: Codegen> fmt::Debug for Jit<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Jit")
            .field("codegen", &C::NAME)
            .field("kernels", &self.kernels.len())
            .field("cache_hits", &self.hits)
            .field("threads", &self.threads)
            .finish_non_exhaustive()
    }
}

impl<C: Codegen> Jit<C> {
    /// A JIT around `codegen` running launches on at most `threads` threads (0 counts as 1).
    pub(crate) fn with_codegen(codegen: C, threads: usize) -> Jit<C> {
        Jit {
            codegen,
            kernels: Vec::new(),
            cache: HashMap::new(),
            hits: 0,
            threads: threads.max(1),
            min_points: MIN_POINTS_PER_THREAD,
            parallel_runs: Cell::new(0),
        }
    }

    /// The thread count of a new JIT: `FBC_JIT_THREADS` ([`THREADS_ENV`]) or, when that is not
    /// set, as many as the machine has cores; an error when the variable is not a positive
    /// number.
    pub(crate) fn default_threads() -> Result<usize, Error> {
        parallel::default_threads().map_err(Error::Config)
    }

    /// No packed contractions when `FBC_JIT_PACKED` ([`PACKED_ENV`]) is `0`; `1` or unset
    /// keeps the code generator's blocking; an error for another value.
    pub(crate) fn packed_from_env(&mut self) -> Result<(), Error> {
        match std::env::var(PACKED_ENV).as_deref() {
            Err(std::env::VarError::NotPresent) | Ok("1") => Ok(()),
            Ok("0") => {
                self.set_gemm_shape(None);
                Ok(())
            }
            _ => Err(Error::Config(format!("{PACKED_ENV}: expected 0 or 1"))),
        }
    }

    /// The code generator.
    pub(crate) fn codegen_mut(&mut self) -> &mut C {
        &mut self.codegen
    }

    /// Runs later launches on at most `threads` threads (0 counts as 1).
    pub fn set_threads(&mut self, threads: usize) {
        self.threads = threads.max(1);
    }

    /// The most threads one launch runs on.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Gives each thread of a split launch at least `points` domain points of work (parallel
    /// points times the reduction extent, times 1 + [`CALL_WEIGHT`] per transcendental call of
    /// the payload; default [`MIN_POINTS_PER_THREAD`]): smaller launches run on fewer threads,
    /// or on the calling thread alone.
    pub fn set_min_points_per_thread(&mut self, points: u64) {
        self.min_points = points.max(1);
    }

    /// Number of [`Jit::run`] calls that ran on more than one thread.
    pub fn parallel_runs(&self) -> u64 {
        self.parallel_runs.get()
    }

    /// Whether kernel `id` was compiled as a packed contraction (see [`Jit::set_gemm_shape`]).
    pub fn packed(&self, id: KernelId) -> bool {
        self.kernels.get(id.0).is_some_and(|k| k.packed)
    }

    /// Number of distinct native functions compiled so far.
    pub fn compiled(&self) -> usize {
        self.kernels.len()
    }

    /// Number of [`Jit::compile`] calls answered from the cache.
    pub fn cache_hits(&self) -> u64 {
        self.hits
    }

    /// Compiles the contractions of later [`Jit::compile`] calls as packed contractions with
    /// `shape` (the code generator's own by default), or (`None`) in the plain nest; kernels
    /// compiled before are not found in the cache any more.
    pub fn set_gemm_shape(&mut self, shape: Option<GemmShape>) {
        self.codegen.set_gemm_shape(shape);
        self.cache.clear();
    }

    /// The packed contraction's blocking of later compiles ([`Jit::set_gemm_shape`]).
    pub fn gemm_shape(&self) -> Option<GemmShape> {
        self.codegen.gemm_shape()
    }

    /// Compiles `kernel` for operands of `types` (inputs, then the output), or returns the
    /// function compiled earlier for the same attributes and types.
    pub fn compile(&mut self, kernel: &Kernel, types: &[MemType]) -> Result<KernelId, Error> {
        let key = cache_key(kernel, types);
        if let Some(&id) = self.cache.get(&key) {
            self.hits += 1;
            return Ok(id);
        }
        let p = Prepared::new(kernel, types, self.codegen.gemm_shape())?;
        let code = self.codegen.emit(&p.kernel, &p.types, p.nest)?;
        let kid = KernelId(self.kernels.len());
        self.kernels.push(Compiled {
            name: p.kernel.name.clone(),
            code,
            snapshot: p.snapshot,
            scratch: p.nest.scratch_len(),
            split: p.split(),
            packed: p.nest.gemm.is_some(),
            types: p.types,
        });
        self.cache.insert(key, kid);
        Ok(kid)
    }

    /// Runs a compiled kernel on `operands` (inputs, then the output), which must have exactly the
    /// types the kernel was compiled for; split over up to [`Jit::threads`] threads when large
    /// enough and provably race-free (see the module docs), with the same results and faults as
    /// on one thread.
    pub fn run(&self, id: KernelId, operands: &mut [OperandMut<'_>]) -> Result<(), Error> {
        let k = self.kernels.get(id.0).ok_or_else(|| Error::Operands {
            kernel: format!("#{}", id.0),
            message: "no such compiled kernel in this JIT".into(),
        })?;
        let given = operands.len() + usize::from(k.snapshot);
        if given != k.types.len() {
            return Err(Error::Operands {
                kernel: k.name.clone(),
                message: format!(
                    "{} operands given, the kernel takes {}",
                    operands.len(),
                    k.types.len() - usize::from(k.snapshot)
                ),
            });
        }
        let chunks = match &k.split {
            Some(s) => s.chunks(self.threads, self.min_points),
            None => vec![(0, i64::MAX)],
        };
        let called = if k.snapshot {
            let Some((out, inputs)) = operands.split_last_mut() else {
                return Err(Error::Operands {
                    kernel: k.name.clone(),
                    message: "no operands given".into(),
                });
            };
            let mut copy = out.to_owned_data();
            let mut with_copy: Vec<OperandMut<'_>> =
                inputs.iter_mut().map(OperandMut::reborrow).collect();
            with_copy.push(copy.as_operand());
            with_copy.push(out.reborrow());
            exec::call(k.code, &k.types, k.scratch, &mut with_copy, &chunks)
        } else {
            exec::call(k.code, &k.types, k.scratch, operands, &chunks)
        };
        let called =
            called.map_err(|message| Error::Operands { kernel: k.name.clone(), message })?;
        if chunks.len() > 1 {
            self.parallel_runs.set(self.parallel_runs.get() + 1);
        }
        called.map_err(|code| Error::Runtime {
            kernel: k.name.clone(),
            reason: Fault::from_code(code),
        })
    }

    /// [`Jit::compile`] then [`Jit::run`].
    pub fn launch(
        &mut self,
        kernel: &Kernel,
        types: &[MemType],
        operands: &mut [OperandMut<'_>],
    ) -> Result<(), Error> {
        let id = self.compile(kernel, types)?;
        self.run(id, operands)
    }
}

/// A checked kernel as a back end compiles it: with the snapshot operand where it reads its
/// output, and the loop nest chosen for the code generator's blocking.
pub(crate) struct Prepared {
    /// The kernel (with the snapshot operand's map when `snapshot`).
    pub kernel: Kernel,
    /// The native function's operand types (with the snapshot operand).
    pub types: Vec<MemType>,
    /// The kernel reads its output: the native function takes a copy of the output before the
    /// launch as one more operand, before the output.
    pub snapshot: bool,
    pub nest: Nest,
}

impl Prepared {
    /// Checks `kernel` against `types` and chooses its nest for the packed blocking `gemm`.
    pub(crate) fn new(
        kernel: &Kernel,
        types: &[MemType],
        gemm: Option<GemmShape>,
    ) -> Result<Prepared, Error> {
        kernel
            .check(types)
            .map_err(|e| Error::Kernel { kernel: kernel.name.clone(), message: e.message })?;
        let snapshot = fbc_dialects::memory::init::reads_output(kernel);
        let (kernel, types) = with_snapshot(kernel, types, snapshot);
        let nest = Nest::of(&kernel, &types, gemm);
        Ok(Prepared { kernel, types, snapshot, nest })
    }

    /// How a launch may be split over threads; `None`: always in one piece.
    pub(crate) fn split(&self) -> Option<parallel::Split> {
        parallel::Split::new(&self.kernel, &self.types, self.nest.split, self.snapshot)
    }
}

/// With `snapshot`, the kernel with one more operand before the output: the copy of the output
/// that reads of the output see (same map and type); the output moves one place up.
fn with_snapshot(k: &Kernel, types: &[MemType], snapshot: bool) -> (Kernel, Vec<MemType>) {
    let mut k = k.clone();
    let mut types = types.to_vec();
    if snapshot {
        let out = k.output();
        k.maps.insert(out, k.maps[out].clone());
        types.insert(out, types[out]);
    }
    (k, types)
}

/// The attributes that decide the code (everything but the kernel's name and source) and the
/// operand types.
pub(crate) fn cache_key(kernel: &Kernel, types: &[MemType]) -> String {
    let mut key = String::new();
    for (name, attr) in kernel.to_attrs() {
        if name != "kernel" && name != "source" {
            key.push_str(&name);
            key.push('=');
            key.push_str(&attr.to_string());
            key.push(';');
        }
    }
    for t in types {
        key.push_str(&t.to_string());
        key.push(';');
    }
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fault_codes_round_trip() {
        for f in [
            Fault::ReadOutOfBounds(3),
            Fault::LoadOutOfBounds(0),
            Fault::WriteOutOfBounds(7),
            Fault::DivisionByZero,
            Fault::IntOfNan,
            Fault::MapUndefined(2),
        ] {
            assert_eq!(Fault::from_code(f.code()), f);
        }
        assert_eq!(Fault::from_code(0xff), Fault::Unknown(0xff));
    }
}

//! The Cranelift CPU back end: every `memory.launch` compiled to native code at run time.
//!
//! [`Jit`] turns one [`Kernel`] with its operand types into a native function
//! `extern "C" fn(operands: *const *mut u8, lo: i64, hi: i64) -> u32` (one base pointer per
//! operand, inputs then the output; the chunk `[lo, hi)` of the outermost loop; 0 on success,
//! an error code otherwise) and runs it on host storage ([`OperandMut`]). The function is a
//! loop nest in Cranelift IR: the parallel dimensions outside, the guard, the reduction
//! dimensions inside with the accumulator as a block parameter, then the epilogue and one store
//! (a reduction that reads an input down a column is interchanged: the reduction outside one
//! parallel dimension, with a scratch array of accumulators, which keeps every element's
//! combine order). Its semantics are exactly [`Kernel`]'s and the reference
//! executor's:
//!
//! - index maps are `i64` arithmetic with floor `floordiv`/`mod`/`ceildiv` (power-of-two divisors
//!   become shifts and masks, which have floor semantics for any sign); an image operand is its
//!   texel array, element `(y·W + x)·4 + c`;
//! - payload arithmetic is `f32` or wrapping `i64` with floor `/` and `%`; `max`/`min` propagate
//!   NaN; `exp log tanh erf sigmoid` call the very Rust functions the reference evaluator calls
//!   (registered as JIT symbols), so results are bit-identical; `sqrt floor abs` are native;
//! - reductions combine in row-major order over the reduction dimensions, like the reference;
//! - an `f16` image is held as `f32` values and read as `f32`; the value stored into one is
//!   rounded by a call to the reference's `round_f16`, so it is bit-identical too.
//!
//! Safety of generated code: every storage access is checked against its operand's length (an
//! image: each coordinate against its extent). A check that an interval analysis of the map over
//! the (guard-narrowed) domain proves redundant is left out; every other check is a compare and
//! a branch to an exit that returns an error code, so a miscompiled map reports an error rather
//! than reading or writing out of bounds. Integer division by zero, `int(NaN)` and a non-positive
//! map divisor are errors too (the reference's errors), never a trap. A map whose intermediate
//! values could overflow 64 bits is rejected at compile time.
//!
//! Compiled kernels are cached by their attributes (without the name) and operand types, so the
//! launches of one run that compute the same thing share one function.
//!
//! Threads: the outermost loop of the nest takes a chunk `[lo, hi)` as two more parameters
//! (`fn(operands, lo: i64, hi: i64) -> u32`), and [`Jit::run`] runs a large enough launch as
//! one chunk per thread on scoped threads when that is provably race-free (the kernel does not
//! read its output, and interval analysis of the output map shows the chunks write disjoint
//! elements; see the `parallel` module). Every element is still computed by one thread in the
//! same order, so results do not depend on the thread count; a fault is the first failing
//! chunk's, the one a single-threaded run reports. The thread count is
//! `std::thread::available_parallelism()` or [`THREADS_ENV`] (`FBC_JIT_THREADS`), or
//! [`Jit::set_threads`].

mod exec;
mod lower;
mod math;
mod parallel;

use std::cell::Cell;
use std::collections::HashMap;
use std::fmt;

use cranelift_codegen::ir::{AbiParam, UserFuncName};
use cranelift_codegen::settings::{self, Configurable};
use cranelift_frontend::FunctionBuilderContext;
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{FuncId, Linkage, Module};
use fbc_dialects::memory::{Kernel, MemType};

pub use exec::OperandMut;
pub use parallel::{CALL_WEIGHT, MIN_POINTS_PER_THREAD, THREADS_ENV};

/// Why a kernel could not be compiled or run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// Cranelift has no back end for this machine.
    #[error("the CPU JIT does not support this machine: {0}")]
    Host(String),
    /// The JIT's configuration is invalid (`FBC_JIT_THREADS` is not a positive number).
    #[error("{0}")]
    Config(String),
    /// The kernel is invalid for its operand types, or uses something the JIT cannot compile.
    #[error("kernel `{kernel}`: {message}")]
    Kernel { kernel: String, message: String },
    /// Cranelift rejected the generated function (a bug of this back end).
    #[error("kernel `{kernel}`: Cranelift failed: {message}")]
    Codegen { kernel: String, message: String },
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
    pub(crate) fn code(self) -> u32 {
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

struct Compiled {
    name: String,
    /// The operand types of the native function (with the snapshot operand, see `snapshot`).
    types: Vec<MemType>,
    code: *const u8,
    /// The kernel reads its output operand: the native function takes one more operand, a copy
    /// of the output before the launch, inserted before the output (reads see the contents
    /// before the launch, as in the reference executor).
    snapshot: bool,
    /// Accumulators of an interchanged reduction (`lower::interchange`): the native function
    /// takes a scratch array of that many `f32` after its operands.
    scratch: Option<u64>,
    /// How the launch may be split over threads; `None`: always in one piece.
    split: Option<parallel::Split>,
}

/// The JIT: a Cranelift module for the host, the compiled kernels and their cache.
pub struct Jit {
    /// `None` only while being dropped.
    module: Option<JITModule>,
    fctx: FunctionBuilderContext,
    kernels: Vec<Compiled>,
    cache: HashMap<String, KernelId>,
    math: math::Imports,
    hits: u64,
    threads: usize,
    min_points: u64,
    /// Runs split over more than one thread.
    parallel_runs: Cell<u64>,
}

impl fmt::Debug for Jit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Jit")
            .field("kernels", &self.kernels.len())
            .field("cache_hits", &self.hits)
            .field("threads", &self.threads)
            .finish_non_exhaustive()
    }
}

impl Jit {
    /// A JIT for the host machine (Cranelift's `speed` optimisation level, host CPU features),
    /// running launches on `FBC_JIT_THREADS` threads ([`THREADS_ENV`]) or, when that is not set,
    /// as many as the machine has cores; an error when the variable is not a positive number.
    pub fn new() -> Result<Jit, Error> {
        let threads = parallel::default_threads().map_err(Error::Config)?;
        let mut jit = Jit::with_threads(1)?;
        jit.set_threads(threads);
        Ok(jit)
    }

    /// A JIT for the host machine running launches on at most `threads` threads (1: on the
    /// calling thread only); the environment is not consulted.
    pub fn with_threads(threads: usize) -> Result<Jit, Error> {
        let mut flags = settings::builder();
        let host = |e: &dyn fmt::Display| Error::Host(e.to_string());
        flags.set("opt_level", "speed").map_err(|e| host(&e))?;
        // Long-range calls to the math functions; absolute addresses.
        flags.set("use_colocated_libcalls", "false").map_err(|e| host(&e))?;
        flags.set("is_pic", "false").map_err(|e| host(&e))?;
        let isa = cranelift_native::builder()
            .map_err(|e| host(&e))?
            .finish(settings::Flags::new(flags))
            .map_err(|e| host(&e))?;
        let mut builder = JITBuilder::with_isa(isa, cranelift_module::default_libcall_names());
        for (name, ptr) in math::symbols() {
            builder.symbol(name, ptr);
        }
        let mut module = JITModule::new(builder);
        let math = math::Imports::declare(&mut module).map_err(|e| host(&e))?;
        Ok(Jit {
            module: Some(module),
            fctx: FunctionBuilderContext::new(),
            kernels: Vec::new(),
            cache: HashMap::new(),
            math,
            hits: 0,
            threads: threads.max(1),
            min_points: MIN_POINTS_PER_THREAD,
            parallel_runs: Cell::new(0),
        })
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

    /// Number of distinct native functions compiled so far.
    pub fn compiled(&self) -> usize {
        self.kernels.len()
    }

    /// Number of [`Jit::compile`] calls answered from the cache.
    pub fn cache_hits(&self) -> u64 {
        self.hits
    }

    /// Compiles `kernel` for operands of `types` (inputs, then the output), or returns the
    /// function compiled earlier for the same attributes and types.
    pub fn compile(&mut self, kernel: &Kernel, types: &[MemType]) -> Result<KernelId, Error> {
        let key = cache_key(kernel, types);
        if let Some(&id) = self.cache.get(&key) {
            self.hits += 1;
            return Ok(id);
        }
        let kerr = |message: String| Error::Kernel { kernel: kernel.name.clone(), message };
        kernel.check(types).map_err(|e| kerr(e.message))?;
        let snapshot = fbc_dialects::memory::init::reads_output(kernel);
        let (kernel, types) = &with_snapshot(kernel, types, snapshot);
        let cg = |e: &dyn fmt::Display| Error::Codegen {
            kernel: kernel.name.clone(),
            message: e.to_string(),
        };
        let module = self.module.as_mut().ok_or_else(|| cg(&"the JIT module is gone"))?;
        let mut ctx = module.make_context();
        kernel_signature(&mut ctx.func, module);
        let symbol = format!("fbc_kernel_{}", self.kernels.len());
        let id: FuncId = module
            .declare_function(&symbol, Linkage::Local, &ctx.func.signature)
            .map_err(|e| cg(&e))?;
        ctx.func.name = UserFuncName::user(0, id.as_u32());
        let nest = lower_body(module, &mut self.fctx, &self.math, &mut ctx.func, kernel, types)
            .map_err(kerr)?;
        module.define_function(id, &mut ctx).map_err(|e| cg(&format!("{e:?}")))?;
        module.clear_context(&mut ctx);
        module.finalize_definitions().map_err(|e| cg(&e))?;
        let code = module.get_finalized_function(id);
        let kid = KernelId(self.kernels.len());
        self.kernels.push(Compiled {
            name: kernel.name.clone(),
            types: types.clone(),
            code,
            snapshot,
            scratch: nest.scratch.map(|(_, n)| n),
            split: parallel::Split::new(kernel, types, nest.split, snapshot),
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

    /// The Cranelift IR of `kernel` after lowering (before optimisation), for tests and debugging.
    pub fn ir_text(&mut self, kernel: &Kernel, types: &[MemType]) -> Result<String, Error> {
        let kerr = |message: String| Error::Kernel { kernel: kernel.name.clone(), message };
        kernel.check(types).map_err(|e| kerr(e.message))?;
        let module = self.module.as_mut().ok_or_else(|| kerr("the JIT module is gone".into()))?;
        let mut func = cranelift_codegen::ir::Function::new();
        kernel_signature(&mut func, module);
        lower_body(module, &mut self.fctx, &self.math, &mut func, kernel, types).map_err(kerr)?;
        Ok(func.display().to_string())
    }
}

/// Sets the signature every kernel function has: the operand table's address and the chunk of
/// the split dimension in, the fault code (`i32`, 0 when none) out.
fn kernel_signature(func: &mut cranelift_codegen::ir::Function, module: &JITModule) {
    let ptr = module.target_config().pointer_type();
    func.signature.params.push(AbiParam::new(ptr));
    // The chunk `[lo, hi)` of the split dimension (see `lower::split_dim`).
    func.signature.params.push(AbiParam::new(cranelift_codegen::ir::types::I64));
    func.signature.params.push(AbiParam::new(cranelift_codegen::ir::types::I64));
    func.signature.returns.push(AbiParam::new(cranelift_codegen::ir::types::I32));
}

/// Lowers `kernel` for operands of `types` into `func` (its signature set), with the math
/// imports declared in it; returns the reduction interchange used ([`lower::interchange`]) and
/// the dimension split into chunks ([`lower::split_dim`]).
fn lower_body(
    module: &mut JITModule,
    fctx: &mut FunctionBuilderContext,
    math: &math::Imports,
    func: &mut cranelift_codegen::ir::Function,
    kernel: &Kernel,
    types: &[MemType],
) -> Result<lower::Nest, String> {
    let refs = math.in_func(module, func);
    let scratch = lower::interchange(kernel, types);
    let nest = lower::Nest { scratch, split: lower::split_dim(kernel, scratch) };
    lower::lower(func, fctx, kernel, types, module.target_config(), &refs, nest)?;
    Ok(nest)
}

impl Drop for Jit {
    fn drop(&mut self) {
        if let Some(module) = self.module.take() {
            self.kernels.clear();
            exec::free(module);
        }
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
fn cache_key(kernel: &Kernel, types: &[MemType]) -> String {
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

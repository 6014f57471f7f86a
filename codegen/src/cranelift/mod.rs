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
//! one chunk per thread, as tasks of rayon's pool, when that is provably race-free (the kernel does not
//! read its output, and interval analysis of the output map shows the chunks write disjoint
//! elements; see the `parallel` module). Every element is still computed by one thread in the
//! same order, so results do not depend on the thread count; a fault is the first failing
//! chunk's, the one a single-threaded run reports. The thread count is
//! `std::thread::available_parallelism()` or [`THREADS_ENV`] (`FBC_JIT_THREADS`), or
//! [`Jit::set_threads`].
//!
//! Everything but the code generation (the kernel table and cache, operand checks, threads,
//! the nest analysis) is [`crate::cpu`]'s, shared with the LLVM back end; [`Jit`] is
//! [`crate::cpu::Jit`] with this module's [`Cranelift`] code generator.

mod emit;
mod math;

use std::fmt;

use cranelift_codegen::ir::{AbiParam, UserFuncName};
use cranelift_codegen::settings::{self, Configurable};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{FuncId, Linkage, Module};
use fbc_dialects::memory::{Kernel, MemType};

use crate::cpu::lower::LowerError;
use crate::cpu::{Codegen, GemmShape, Nest};
pub use crate::cpu::{
    Error, Fault, KernelId, OperandMut, CALL_WEIGHT, MIN_POINTS_PER_THREAD, THREADS_ENV,
};

/// The Cranelift JIT: [`crate::cpu::Jit`] with the [`Cranelift`] code generator.
pub type Jit = crate::cpu::Jit<Cranelift>;

/// The Cranelift code generator: a JIT module for the host and the math imports.
pub struct Cranelift {
    /// `None` only while being dropped.
    module: Option<JITModule>,
    fctx: FunctionBuilderContext,
    math: math::Imports,
    /// Functions defined so far (their symbols are numbered).
    defined: usize,
    /// The packed contraction's blocking ([`GEMM_SHAPE`] unless set).
    gemm: Option<GemmShape>,
}

impl fmt::Debug for Cranelift {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cranelift").field("defined", &self.defined).finish_non_exhaustive()
    }
}

impl Cranelift {
    /// A code generator for the host machine (Cranelift's `speed` optimisation level, host CPU
    /// features).
    fn new() -> Result<Cranelift, Error> {
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
        for (name, ptr) in crate::cpu::math::symbols() {
            builder.symbol(name, ptr);
        }
        let mut module = JITModule::new(builder);
        let math = math::Imports::declare(&mut module).map_err(|e| host(&e))?;
        Ok(Cranelift {
            module: Some(module),
            fctx: FunctionBuilderContext::new(),
            math,
            defined: 0,
            gemm: Some(GEMM_SHAPE),
        })
    }

    /// Compiles contractions later compiled as packed contractions with `shape`, or (`None`) in
    /// the plain nest.
    pub fn set_gemm_shape(&mut self, shape: Option<GemmShape>) {
        self.gemm = shape;
    }
}

/// The packed contraction's blocking in Cranelift's 128-bit vectors: 4 rows by 2 vectors of 4
/// lanes (8 accumulator registers, 2 for the `b` row, 1 for the `a` value), cache blocks of 96
/// rows, 512 columns and 256 reduction steps.
pub const GEMM_SHAPE: GemmShape =
    GemmShape { mr: 4, lanes: 4, vectors: 2, mc: 96, nc: 512, kc: 256 };

impl Codegen for Cranelift {
    const NAME: &'static str = "Cranelift";

    fn emit(&mut self, kernel: &Kernel, types: &[MemType], nest: Nest) -> Result<*const u8, Error> {
        let cg = |e: &dyn fmt::Display| Error::Codegen {
            kernel: kernel.name.clone(),
            backend: Self::NAME,
            message: e.to_string(),
        };
        let module = self.module.as_mut().ok_or_else(|| cg(&"the JIT module is gone"))?;
        let mut ctx = module.make_context();
        kernel_signature(&mut ctx.func, module);
        let symbol = format!("fbc_kernel_{}", self.defined);
        let id: FuncId = module
            .declare_function(&symbol, Linkage::Local, &ctx.func.signature)
            .map_err(|e| cg(&e))?;
        ctx.func.name = UserFuncName::user(0, id.as_u32());
        lower_body(module, &mut self.fctx, &self.math, &mut ctx.func, kernel, types, nest)
            .map_err(|e| e.into_error(&kernel.name, Self::NAME))?;
        module.define_function(id, &mut ctx).map_err(|e| cg(&format!("{e:?}")))?;
        module.clear_context(&mut ctx);
        module.finalize_definitions().map_err(|e| cg(&e))?;
        self.defined += 1;
        Ok(module.get_finalized_function(id))
    }

    fn gemm_shape(&self) -> Option<GemmShape> {
        self.gemm
    }

    fn set_gemm_shape(&mut self, shape: Option<GemmShape>) {
        self.gemm = shape;
    }
}

impl Jit {
    /// A JIT for the host machine (Cranelift's `speed` optimisation level, host CPU features),
    /// running launches on `FBC_JIT_THREADS` threads ([`THREADS_ENV`]) or, when that is not set,
    /// as many as the machine has cores, with packed contractions unless `FBC_JIT_PACKED=0`
    /// ([`crate::cpu::PACKED_ENV`]); an error when a variable has another value.
    pub fn new() -> Result<Jit, Error> {
        let threads = Jit::default_threads()?;
        let mut jit = Jit::with_threads(threads)?;
        jit.packed_from_env()?;
        Ok(jit)
    }

    /// A JIT for the host machine running launches on at most `threads` threads (1: on the
    /// calling thread only); the environment is not consulted.
    pub fn with_threads(threads: usize) -> Result<Jit, Error> {
        Ok(Jit::with_codegen(Cranelift::new()?, threads))
    }

    /// The Cranelift IR of `kernel` after lowering (before optimisation), for tests and debugging.
    pub fn ir_text(&mut self, kernel: &Kernel, types: &[MemType]) -> Result<String, Error> {
        let kerr = |message: String| Error::Kernel { kernel: kernel.name.clone(), message };
        kernel.check(types).map_err(|e| kerr(e.message))?;
        let cl = self.codegen_mut();
        let module = cl.module.as_mut().ok_or_else(|| kerr("the JIT module is gone".into()))?;
        let mut func = cranelift_codegen::ir::Function::new();
        kernel_signature(&mut func, module);
        let nest = Nest::of(kernel, types, cl.gemm);
        lower_body(module, &mut cl.fctx, &cl.math, &mut func, kernel, types, nest)
            .map_err(|e| e.into_error(&kernel.name, Cranelift::NAME))?;
        Ok(func.display().to_string())
    }
}

/// Sets the signature every kernel function has: the operand table's address and the chunk of
/// the split dimension in, the fault code (`i32`, 0 when none) out.
fn kernel_signature(func: &mut cranelift_codegen::ir::Function, module: &JITModule) {
    let ptr = module.target_config().pointer_type();
    func.signature.params.push(AbiParam::new(ptr));
    // The chunk `[lo, hi)` of the split dimension (see `nest::split_dim`).
    func.signature.params.push(AbiParam::new(cranelift_codegen::ir::types::I64));
    func.signature.params.push(AbiParam::new(cranelift_codegen::ir::types::I64));
    func.signature.returns.push(AbiParam::new(cranelift_codegen::ir::types::I32));
}

/// Lowers `kernel` for operands of `types` into `func` (its signature set) with the loop nest
/// `nest`, with the math imports declared in it.
fn lower_body(
    module: &mut JITModule,
    fctx: &mut FunctionBuilderContext,
    math: &math::Imports,
    func: &mut cranelift_codegen::ir::Function,
    kernel: &Kernel,
    types: &[MemType],
    nest: Nest,
) -> Result<(), LowerError> {
    let refs = math.in_func(module, func);
    let config = module.target_config();
    let mut e = emit::ClEmit::new(FunctionBuilder::new(func, fctx), &refs, config.pointer_type());
    crate::cpu::lower::lower(&mut e, kernel, types, nest)?;
    e.finish(config);
    Ok(())
}

impl Drop for Cranelift {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        if let Some(module) = self.module.take() {
            // SAFETY: the only addresses into the module's code are those `emit` returned, held
            // by the `crate::cpu::Jit` that owns this code generator and dropped with it (it
            // never hands them out, only `KernelId` indices), so none is used after this.
            unsafe { module.free_memory() }
        }
    }
}

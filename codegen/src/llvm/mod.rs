//! The LLVM CPU back end (feature `llvm`): every `memory.launch` compiled to native code by
//! LLVM 19 at run time, for `fbc run --target cpu-llvm`.
//!
//! [`LlvmJit`] is [`crate::cpu::Jit`] with the [`Llvm`] code generator, so everything but the
//! code generation is the Cranelift JIT's: the ABI of a compiled kernel
//! (`extern "C" fn(operands: *const *mut u8, lo: i64, hi: i64) -> u32`), the operand checks,
//! the snapshot of an output the kernel reads, the scratch array of an interchanged reduction,
//! the split of a launch over threads when it is provably race-free, the fault codes and the
//! kernel cache (see [`crate::cranelift`] and [`crate::cpu`]).
//!
//! Each kernel becomes one LLVM module with one function, emitted by the lowering both back ends
//! share (`crate::cpu::lower`, through this module's `emit`), so with exactly the Cranelift back
//! end's semantics (same nest, same floor-division map arithmetic, same bounds
//! checks returning fault codes, NaN-propagating `max`/`min`, calls of the same Rust functions for
//! `exp log tanh erf sigmoid` and the `f16` rounding, reductions in row-major order without
//! reassociation), so results are bit-identical to the reference executor. It is checked by
//! LLVM's verifier (a failure is an [`Error::Codegen`] naming the kernel, never an abort), then
//! optimised by the new pass manager's `default<O3>` pipeline for the target CPU (the host's,
//! with its features, or `generic`: [`Cpu`]) and compiled by MCJIT; LLVM vectorises the loops over
//! parallel dimensions, never the floating-point reductions (that would reassociate them).

pub mod aot;
mod emit;

use std::fmt;

use fbc_dialects::memory::{Kernel, MemType};
use inkwell::context::Context;
use inkwell::execution_engine::ExecutionEngine;
use inkwell::passes::PassBuilderOptions;
use inkwell::targets::{
    CodeModel, InitializationConfig, RelocMode, Target, TargetMachine, TargetTriple,
};
use inkwell::OptimizationLevel;

use crate::cpu::{Codegen, GemmShape, Nest};
pub use crate::cpu::{Error, Fault, KernelId, OperandMut};

/// The LLVM JIT: [`crate::cpu::Jit`] with the [`Llvm`] code generator.
pub type LlvmJit = crate::cpu::Jit<Llvm>;

/// The CPU the code is compiled for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Cpu {
    /// This machine's CPU and its features (`-mcpu=native`).
    #[default]
    Host,
    /// The target's baseline (`generic`: SSE2 on x86-64), for code that runs on any CPU of the
    /// architecture.
    Generic,
}

impl Cpu {
    /// `host` or `generic`.
    pub fn parse(s: &str) -> Option<Cpu> {
        match s {
            "host" | "native" => Some(Cpu::Host),
            "generic" => Some(Cpu::Generic),
            _ => None,
        }
    }
}

/// The packed contraction's blocking for a CPU with `features` (LLVM's `+avx512f,...` list):
/// 6 rows by 2 vectors of 16 lanes with AVX-512 (12 of its 32 vector registers accumulate),
/// else of 8 lanes (two 256-bit registers each with AVX, four 128-bit ones with SSE only);
/// cache blocks of 96 rows, 512 columns and 256 reduction steps.
pub fn gemm_shape(features: &str) -> GemmShape {
    let lanes = if features.split(',').any(|f| f == "+avx512f") { 16 } else { 8 };
    GemmShape { mr: 6, lanes, vectors: 2, mc: 96, nc: 512, kc: 256 }
}

/// The LLVM code generator: a context, the target machine the passes optimise for, and one
/// MCJIT execution engine per compiled kernel (which holds its code).
pub struct Llvm {
    /// Declared before `context` and cleared in `drop` before it is freed: each engine owns a
    /// module of the context.
    engines: Vec<ExecutionEngine<'static>>,
    machine: TargetMachine,
    triple: TargetTriple,
    cpu: String,
    features: String,
    /// The packed contraction's blocking ([`gemm_shape`] of the CPU unless set).
    gemm: Option<GemmShape>,
    /// Leaked in [`Llvm::new`], freed in `drop` after the engines; see [`leak_context`].
    context: &'static Context,
}

impl fmt::Debug for Llvm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Llvm")
            .field("cpu", &self.cpu)
            .field("kernels", &self.engines.len())
            .finish_non_exhaustive()
    }
}

impl Llvm {
    /// A code generator for this machine's architecture and `cpu`, for the JIT.
    pub fn new(cpu: Cpu) -> Result<Llvm, Error> {
        Llvm::with_machine(cpu, RelocMode::Default, CodeModel::JITDefault)
    }

    /// A code generator for this machine's architecture and `cpu` whose target machine writes
    /// code with relocation model `reloc` and code model `model` (position-independent objects
    /// for [`aot`]).
    fn with_machine(cpu: Cpu, reloc: RelocMode, model: CodeModel) -> Result<Llvm, Error> {
        Target::initialize_native(&InitializationConfig::default()).map_err(Error::Host)?;
        let triple = TargetMachine::get_default_triple();
        let target = Target::from_triple(&triple).map_err(|e| Error::Host(e.to_string()))?;
        let (name, features) = match cpu {
            Cpu::Host => (
                TargetMachine::get_host_cpu_name().to_string(),
                TargetMachine::get_host_cpu_features().to_string(),
            ),
            Cpu::Generic => ("generic".to_string(), String::new()),
        };
        let machine = target
            .create_target_machine(
                &triple,
                &name,
                &features,
                OptimizationLevel::Aggressive,
                reloc,
                model,
            )
            .ok_or_else(|| Error::Host(format!("LLVM has no target machine for {triple}")))?;
        Ok(Llvm {
            engines: Vec::new(),
            machine,
            triple,
            gemm: Some(gemm_shape(&features)),
            cpu: name,
            features,
            context: leak_context(),
        })
    }

    /// The CPU name the code is compiled for (`znver3`, `generic`, ...).
    pub fn cpu_name(&self) -> &str {
        &self.cpu
    }

    /// The optimised LLVM IR of `kernel` (checked against `types`) as [`LlvmJit`] would compile
    /// it, for tests and debugging.
    pub fn ir_text(&self, kernel: &Kernel, types: &[MemType]) -> Result<String, Error> {
        kernel
            .check(types)
            .map_err(|e| Error::Kernel { kernel: kernel.name.clone(), message: e.message })?;
        let module =
            self.module(kernel, types, Nest::of(kernel, types, self.gemm_shape()), "fbc_kernel")?;
        Ok(module.print_to_string().to_string())
    }

    /// The verified and optimised module of `kernel` with its function named `name`.
    fn module(
        &self,
        kernel: &Kernel,
        types: &[MemType],
        nest: Nest,
        name: &str,
    ) -> Result<inkwell::module::Module<'static>, Error> {
        let module = self.context.create_module(&kernel.name);
        module.set_triple(&self.triple);
        module.set_data_layout(&self.machine.get_target_data().get_data_layout());
        let emitted = emit::LlvmEmit::new(self.context, &module, name, (&self.cpu, &self.features))
            .and_then(|mut e| {
                crate::cpu::lower::lower(&mut e, kernel, types, nest)?;
                e.finish()
            });
        emitted.map_err(|e| e.into_error(&kernel.name, Self::NAME))?;
        self.verify_and_optimise(&module, &kernel.name)?;
        Ok(module)
    }

    /// Checks `module` with LLVM's verifier (which reports, never aborts) and optimises it with
    /// the `default<O3>` pipeline for the target machine; a rejection is an [`Error::Codegen`]
    /// naming `kernel`.
    fn verify_and_optimise(
        &self,
        module: &inkwell::module::Module<'static>,
        kernel: &str,
    ) -> Result<(), Error> {
        let cg = |message: String| Error::Codegen {
            kernel: kernel.into(),
            backend: Self::NAME,
            message,
        };
        module.verify().map_err(|m| cg(format!("the verifier rejected the IR: {m}")))?;
        module
            .run_passes("default<O3>", &self.machine, PassBuilderOptions::create())
            .map_err(|m| cg(format!("the O3 pipeline: {m}")))
    }
}

impl Codegen for Llvm {
    const NAME: &'static str = "LLVM";

    fn emit(&mut self, kernel: &Kernel, types: &[MemType], nest: Nest) -> Result<*const u8, Error> {
        let cg = |message: String| Error::Codegen {
            kernel: kernel.name.clone(),
            backend: Self::NAME,
            message,
        };
        let name = format!("fbc_kernel_{}", self.engines.len());
        let module = self.module(kernel, types, nest, &name)?;
        let engine = module
            .create_jit_execution_engine(OptimizationLevel::Aggressive)
            .map_err(|m| cg(format!("creating the JIT: {m}")))?;
        // The math functions the kernel calls, by name (those the optimiser kept).
        for (symbol, address) in crate::cpu::math::symbols() {
            if let Some(f) = module.get_function(symbol) {
                engine.add_global_mapping(&f, address as usize);
            }
        }
        let address =
            engine.get_function_address(&name).map_err(|e| cg(format!("no code: {e}")))?;
        self.engines.push(engine);
        Ok(address as *const u8)
    }

    fn gemm_shape(&self) -> Option<GemmShape> {
        self.gemm
    }

    fn set_gemm_shape(&mut self, shape: Option<GemmShape>) {
        self.gemm = shape;
    }
}

impl LlvmJit {
    /// A JIT for the host CPU running launches on `FBC_JIT_THREADS` threads
    /// ([`crate::cpu::THREADS_ENV`]) or, when that is not set, as many as the machine has
    /// cores; an error when the variable is not a positive number.
    pub fn new() -> Result<LlvmJit, Error> {
        LlvmJit::for_cpu(Cpu::Host)
    }

    /// [`LlvmJit::new`] compiling for `cpu`.
    pub fn for_cpu(cpu: Cpu) -> Result<LlvmJit, Error> {
        let threads = LlvmJit::default_threads()?;
        let mut jit = LlvmJit::with_options(threads, cpu)?;
        jit.packed_from_env()?;
        Ok(jit)
    }

    /// A JIT for `cpu` running launches on at most `threads` threads; the environment is not
    /// consulted.
    pub fn with_options(threads: usize, cpu: Cpu) -> Result<LlvmJit, Error> {
        Ok(LlvmJit::with_codegen(Llvm::new(cpu)?, threads))
    }

    /// The code generator (its CPU, the IR of a kernel).
    pub fn llvm(&mut self) -> &mut Llvm {
        self.codegen_mut()
    }
}

/// A new context that lives until [`free_context`]: the execution engines, stored next to it in
/// [`Llvm`], borrow it.
fn leak_context() -> &'static Context {
    Box::leak(Box::new(Context::create()))
}

/// Frees a context made by [`leak_context`].
#[allow(unsafe_code)]
fn free_context(context: &'static Context) {
    // SAFETY: `context` comes from `Box::leak` in `leak_context` and is freed once, by the drop
    // of the one `Llvm` that holds it, after that `Llvm`'s engines (and with them every module
    // of the context) are dropped; nothing else borrows it (`Llvm` hands out no modules, only
    // code addresses and IR text).
    drop(unsafe { Box::from_raw(std::ptr::from_ref(context).cast_mut()) });
}

impl Drop for Llvm {
    fn drop(&mut self) {
        self.engines.clear();
        free_context(self.context);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verifier_failures_are_errors_naming_the_kernel() {
        // A function whose block has no terminator: invalid IR, as a bug of the emitter would
        // make. The verifier's report comes back as an error, the process goes on.
        let llvm = Llvm::new(Cpu::Generic).expect("an LLVM code generator");
        let module = llvm.context.create_module("bad");
        let f = module.add_function("f", llvm.context.void_type().fn_type(&[], false), None);
        llvm.context.append_basic_block(f, "entry");
        match llvm.verify_and_optimise(&module, "attention_scores") {
            Err(Error::Codegen { kernel, backend, message }) => {
                assert_eq!((kernel.as_str(), backend), ("attention_scores", "LLVM"));
                assert!(message.starts_with("the verifier rejected the IR: "), "{message}");
            }
            other => panic!("expected a verifier error, got {other:?}"),
        }
        // A valid module passes and is optimised.
        let module = llvm.context.create_module("good");
        let f = module.add_function("g", llvm.context.void_type().fn_type(&[], false), None);
        let b = llvm.context.create_builder();
        b.position_at_end(llvm.context.append_basic_block(f, "entry"));
        b.build_return(None).expect("a return");
        assert_eq!(llvm.verify_and_optimise(&module, "g"), Ok(()));
    }
}

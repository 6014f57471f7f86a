//! A compile session: what one compilation is for (the hardware profile, resolved once; the `-O`
//! level; the layout strategy; the lowering options) and the steps every command takes with it.
//!
//! The command line builds one [`Session`] per command from its arguments and calls its steps;
//! tests and plugin authors do the same without going through argument parsing:
//!
//! ```
//! # use std::sync::Arc;
//! let driver = fbc::Driver::default();
//! let session = fbc::Session::for_target(&driver, "mali").expect("a builtin profile");
//! let text = "func.func @f(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
//!   %y = tensor.relu %x : (tensor<4x8xf32>) -> tensor<4x8xf32>
//!   func.return %y : tensor<4x8xf32>
//! }";
//! let file = Arc::new(fbc_ir::SourceFile::new("f.fbir", text));
//! let mut module = fbc_ir::parse_module(&file, &driver.ops).expect("valid input");
//! session.compile(&file, &mut module).expect("optimised and lowered");
//! let out = session.emit_opencl(&module, true, Default::default()).expect("OpenCL C");
//! assert!(out.source.contains("__kernel"));
//! ```
//!
//! Every pipeline of a session runs with its profile in `PassContext::target`; no pass and no
//! writer looks a target name up again.

use fbc_codegen::opencl::{KernelOptions, Options, Output, Writer};
use fbc_dialects::kind::{FuncOp, OpKind};
use fbc_ir::pass::{Instrumentation, Statistics, Timings};
use fbc_ir::{FuncId, Module, SourceFile};
use fbc_runtime::interp::Value;
use fbc_target::HardwareProfile;
use fbc_transforms::global_layout::Strategy;
use fbc_transforms::LoweringOptions;

use crate::{Driver, Failure};

/// One compilation's settings, with the driver whose registries it runs.
#[derive(Debug, Clone)]
pub struct Session<'d> {
    pub driver: &'d Driver,
    /// The hardware profile every pass and writer of the session compiles for.
    pub profile: HardwareProfile,
    /// The `-O` level of [`Session::optimize`] (0 to 3).
    pub level: u8,
    /// The layout strategy of `-O3` (Sec. 4.4 and the Sec. 2.3 baselines).
    pub strategy: Strategy,
    /// The options of `lower-to-memory` besides the profile.
    pub lowering: LoweringOptions,
    /// What the pass manager does between passes (`--verify-each`, `--print-ir-after`, ...).
    pub instrumentation: Instrumentation,
    /// Passes left out of the `-O` pipeline (`--disable-pass`).
    pub disabled: Vec<String>,
    /// A device memory budget in bytes (`--memory-budget`): [`Session::lower`] then ends with
    /// `plan-weight-streaming` for it, and [`Session::compile`] cuts weights into row tiles
    /// where the plan needs it.
    pub memory_budget: Option<u64>,
    /// With a budget: `plan-weight-streaming{kv-tiling=true}` (`--kv-tiling`).
    pub kv_tiling: bool,
}

impl<'d> Session<'d> {
    /// A session for `profile` at `-O3` with the fblayout strategy and the default lowering;
    /// the IR is verified after every pass in debug builds.
    pub fn new(driver: &'d Driver, profile: HardwareProfile) -> Session<'d> {
        Session {
            driver,
            profile,
            level: 3,
            strategy: Strategy::FbLayout,
            lowering: LoweringOptions::default(),
            instrumentation: Instrumentation {
                verify_each: cfg!(debug_assertions),
                ..Instrumentation::default()
            },
            disabled: Vec::new(),
            memory_budget: None,
            kv_tiling: false,
        }
    }

    /// `names` if each is a registered pass (a usage error naming the first that is not).
    pub fn checked_passes(&self, names: &[String]) -> Result<Vec<String>, Failure> {
        for n in names {
            if self.driver.passes.get(n).is_none() {
                return Err(Failure::Usage(format!(
                    "--disable-pass: no pass named `{n}` (see `fbc passes`)"
                )));
            }
        }
        Ok(names.to_vec())
    }

    /// [`Session::new`] for the profile `name_or_path` names: a builtin name (an unknown one is a
    /// command-line error) or a profile file (a malformed one is an input error at its line).
    pub fn for_target(driver: &'d Driver, name_or_path: &str) -> Result<Session<'d>, Failure> {
        Ok(Session::new(driver, crate::hardware_profile(name_or_path)?))
    }

    /// Runs the `-O level` pipeline with the session's strategy, with the pipelines registered
    /// at its extension points (by crates and plugins that add passes) around it. Returns the
    /// pass timings and statistics.
    pub fn optimize(
        &self,
        file: &SourceFile,
        module: &mut Module,
    ) -> Result<(Timings, Statistics), Failure> {
        self.optimize_with(file, module, None)
    }

    /// [`Session::optimize`], first running `split-weight-rows{max-bytes=TILE}` where `tile`
    /// says so.
    fn optimize_with(
        &self,
        file: &SourceFile,
        module: &mut Module,
        tile: Option<u64>,
    ) -> Result<(Timings, Statistics), Failure> {
        let mut base = fbc_transforms::pipeline(self.level, self.strategy);
        if let Some(tile) = tile {
            let split = format!("{}{{max-bytes={tile}}}", fbc_transforms::split_weight_rows::NAME);
            base = if base.is_empty() { split } else { format!("{split},{base}") };
        }
        let base = fbc_transforms::without_passes(&base, &self.disabled);
        let pipeline = self.driver.passes.extended_pipeline(&base);
        self.run(file, module, &pipeline)
    }

    /// Lowers an optimised module to the memory dialect (`lower-to-memory` with the session's
    /// options, then `plan-memory`, then under a memory budget `plan-weight-streaming`) unless
    /// it is lowered already. Returns the passes' statistics (plan-memory's peak bytes among
    /// them).
    pub fn lower(&self, file: &SourceFile, module: &mut Module) -> Result<Statistics, Failure> {
        if is_lowered(module) {
            return Ok(Statistics::default());
        }
        let mut pipeline = fbc_transforms::lowering_pipeline(self.lowering);
        if let Some(b) = self.memory_budget {
            let kv = if self.kv_tiling { " kv-tiling=true" } else { "" };
            pipeline.push_str(&format!(",plan-weight-streaming{{budget={b}{kv}}}"));
        }
        let (_, stats) = self.run(file, module, &pipeline)?;
        Ok(stats)
    }

    /// [`Session::optimize`] then [`Session::lower`], unless the module is lowered already, and
    /// the verifier over the result: nothing runs before the lowered module verifies, so a
    /// launch the bounds prover shows out of bounds is an error at its op here, whatever the
    /// build's pass-manager checks. What every command that runs a module does before it runs
    /// it. Returns the lowering passes' statistics.
    pub fn compile(&self, file: &SourceFile, module: &mut Module) -> Result<Statistics, Failure> {
        if is_lowered(module) {
            // An input that is already lowered was verified when it was loaded.
            return Ok(Statistics::default());
        }
        let Some(budget) = self.memory_budget else {
            return self.compile_with(file, module, None);
        };
        // Under a budget the plan of whole weights is tried first; where it finds the budget
        // too small (a weight read transposed, such as a tied LM head's table, that the budget
        // cannot hold with what is live beside it), weights read so stream in row tiles of an
        // eighth of the budget (`split-weight-rows`), which costs the table's bytes a second
        // time where other ops read it whole, so it is not the first choice.
        let mut whole = module.clone();
        match self.compile_with(file, &mut whole, None) {
            Ok(stats) => {
                *module = whole;
                Ok(stats)
            }
            Err(Failure::Input(e)) if e.contains(fbc_transforms::weight_streaming::TOO_SMALL) => {
                // Only where the split runs and finds a weight to cut (on a copy, the pass
                // alone): else the second compile would end in the same error.
                let tile = (budget / 8).max(1);
                let split =
                    format!("{}{{max-bytes={tile}}}", fbc_transforms::split_weight_rows::NAME);
                let split = fbc_transforms::without_passes(&split, &self.disabled);
                if split.is_empty() {
                    return Err(Failure::Input(e));
                }
                let (_, stats) = self.run(file, &mut module.clone(), &split)?;
                let key = (fbc_transforms::split_weight_rows::NAME.to_string(), "weights".into());
                if stats.counters.get(&key).copied().unwrap_or(0) == 0 {
                    return Err(Failure::Input(e));
                }
                self.compile_with(file, module, Some(tile))
            }
            Err(e) => Err(e),
        }
    }

    /// [`Session::compile`] with `split-weight-rows` first where `tile` says so.
    fn compile_with(
        &self,
        file: &SourceFile,
        module: &mut Module,
        tile: Option<u64>,
    ) -> Result<Statistics, Failure> {
        self.optimize_with(file, module, tile)?;
        let stats = self.lower(file, module)?;
        let errors = fbc_ir::verify::verify_module(module);
        if !errors.is_empty() {
            return Err(Failure::input(file, &errors));
        }
        Ok(stats)
    }

    /// OpenCL C and the launch manifest of a lowered module, with the kernel shapes of the
    /// session's profile (`tiled`: the tiled contraction kernel where it applies; `tuned`:
    /// `fbc tune`'s parameters by contraction shape class). A launch the writer cannot handle is
    /// an input error at its location.
    pub fn emit_opencl(
        &self,
        lowered: &Module,
        tiled: bool,
        tuned: crate::tuning::Entries,
    ) -> Result<Output, Failure> {
        let mut kernels = KernelOptions::for_target(&self.profile);
        kernels.tiled = tiled;
        kernels.tuned = tuned;
        let opts = Options { kernels, ..Options::default() };
        Writer::new(opts).write(lowered).map_err(|e| Failure::Input(format!("{e}\n")))
    }

    /// Runs function `func` of a lowered module on this CPU through the JIT of `backend`
    /// (Cranelift or LLVM): its results and the JIT's counters. A launch that fails is an input
    /// error at its op.
    pub fn jit(
        &self,
        file: &SourceFile,
        lowered: &Module,
        func: FuncId,
        inputs: Vec<Value>,
        backend: fbc_runtime::device::cpu_jit::Backend,
    ) -> Result<(Vec<Value>, fbc_runtime::device::cpu_jit::JitStats), Failure> {
        fbc_runtime::device::cpu_jit::run_with(
            lowered,
            func,
            inputs,
            fbc_runtime::interp::Options::default(),
            backend,
        )
        .map_err(|e| crate::run_cmd::located(file, &e))
    }

    /// Runs a pipeline text with the session's profile and instrumentation.
    pub fn run(
        &self,
        file: &SourceFile,
        module: &mut Module,
        pipeline: &str,
    ) -> Result<(Timings, Statistics), Failure> {
        self.driver.run_pipeline(file, module, pipeline, &self.profile, &self.instrumentation)
    }
}

/// Whether every function body holds only memory ops (and `func.return`): the module is already
/// lowered, and the lowering pipeline is skipped.
pub fn is_lowered(module: &Module) -> bool {
    module.func_ids().all(|f| {
        module.func(f).body.iter().all(|&op| {
            matches!(
                OpKind::of_op(module.op(op)),
                Some(OpKind::Memory(_) | OpKind::Func(FuncOp::Return))
            )
        })
    })
}

/// Whether any value of the module is an `f16` image (`--half-images` storage).
pub fn has_half_images(module: &Module) -> bool {
    module
        .values
        .iter()
        .any(|v| fbc_dialects::memory::MemType::from_type(&v.ty).is_some_and(|t| t.is_half()))
}

//! Lowered modules on native code: a [`Launcher`] that runs every `memory.launch` through
//! `fbc-codegen`'s Cranelift JIT (or, with the `llvm` feature, its LLVM back end: [`Backend`])
//! instead of the reference executor ([`run_kernel`]).
//!
//! The interpreter keeps doing what is not a launch (uploads pack by layout, downloads unpack,
//! allocations, frees), so a lowered function run with [`JitLauncher`] differs from the reference
//! run only in who executes the kernels; the JIT computes the reference's values bit for bit
//! (see `fbc_codegen::cranelift`). Compiled kernels are cached by attributes and operand types
//! for the launcher's lifetime. No unsafe code here: the one call into native code, with its
//! checks, is `fbc_codegen::cranelift`'s.
//!
//! [`run_kernel`]: crate::exec::run_kernel

use std::time::{Duration, Instant};

use fbc_codegen::cpu::{Codegen, Jit};
use fbc_codegen::cranelift::{Cranelift, OperandMut};
use fbc_dialects::memory::{Kernel, MemType};
use fbc_ir::{FuncId, Module};

use crate::exec::{run_kernel, Launcher, MemData};
use crate::interp::{InterpError, Interpreter, Options, Value};

/// Counters of a [`JitLauncher`]'s work.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JitStats {
    /// `memory.launch` ops executed.
    pub launches: u64,
    /// Distinct native functions compiled.
    pub compiled: u64,
    /// Time spent compiling (Cranelift, including the cache look-ups).
    pub compile_time: Duration,
    /// Time spent in native code.
    pub run_time: Duration,
    /// The most threads one launch may run on (`FBC_JIT_THREADS`, else the core count).
    pub threads: usize,
    /// Launches that ran split over more than one thread.
    pub parallel_launches: u64,
    /// Launches that ran as packed contractions (`fbc_codegen::cpu::Jit::set_gemm_shape`).
    pub packed_launches: u64,
}

/// Which back end compiles the launches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Backend {
    /// The Cranelift JIT (`--target cpu-jit`).
    #[default]
    Cranelift,
    /// LLVM, for this CPU or a generic one (`--target cpu-llvm`).
    #[cfg(feature = "llvm")]
    Llvm(fbc_codegen::llvm::Cpu),
}

/// One launch as [`bench`] timed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchTime {
    pub kernel: String,
    pub source: String,
    /// Time in native code (the compiled kernel's calls on every thread, until the last ends).
    pub ns: u64,
    /// It ran as a packed contraction.
    pub packed: bool,
    /// The kernel's floating-point operations and the bytes of its operands.
    pub flops: u64,
    pub bytes: u64,
}

/// Runs launches as native code compiled by code generator `C`; see the module docs.
#[derive(Debug)]
pub struct JitLauncher<C: Codegen = Cranelift> {
    jit: Jit<C>,
    stats: JitStats,
    /// The launches of the current run, in order, when [`bench`] records them.
    times: Option<Vec<LaunchTime>>,
}

impl JitLauncher {
    /// A launcher for the host CPU; an error when Cranelift does not support it.
    pub fn new() -> Result<JitLauncher, String> {
        Ok(JitLauncher::with_jit(fbc_codegen::cranelift::Jit::new().map_err(|e| e.to_string())?))
    }
}

#[cfg(feature = "llvm")]
impl JitLauncher<fbc_codegen::llvm::Llvm> {
    /// A launcher compiling with LLVM for `cpu`; an error when LLVM cannot be set up for this
    /// machine.
    pub fn llvm(cpu: fbc_codegen::llvm::Cpu) -> Result<Self, String> {
        let jit = fbc_codegen::llvm::LlvmJit::for_cpu(cpu).map_err(|e| e.to_string())?;
        Ok(JitLauncher::with_jit(jit))
    }
}

impl<C: Codegen> JitLauncher<C> {
    fn with_jit(jit: Jit<C>) -> JitLauncher<C> {
        JitLauncher { jit, stats: JitStats::default(), times: None }
    }

    /// What the launcher has done so far.
    pub fn stats(&self) -> JitStats {
        JitStats {
            compiled: self.jit.compiled() as u64,
            threads: self.jit.threads(),
            parallel_launches: self.jit.parallel_runs(),
            ..self.stats
        }
    }

    /// The JIT, to configure its threads ([`Jit::set_threads`]).
    pub fn jit_mut(&mut self) -> &mut Jit<C> {
        &mut self.jit
    }
}

impl<C: Codegen> Launcher for JitLauncher<C> {
    fn launch(
        &mut self,
        k: &Kernel,
        types: &[MemType],
        operands: &mut [&mut MemData],
    ) -> Result<(), String> {
        if k.attention.is_some() {
            // Its definition's three ordinary launches, each compiled like any other.
            return crate::exec::run_attention(k, types, operands, &mut |sk, t, ops| {
                self.launch(sk, t, ops)
            });
        }
        let start = Instant::now();
        let id = self.jit.compile(k, types).map_err(|e| e.to_string())?;
        let compiled = Instant::now();
        let mut views: Vec<OperandMut<'_>> = operands
            .iter_mut()
            .map(|m| match &mut **m {
                MemData::F32(v) => OperandMut::F32(v),
                MemData::I32(v) => OperandMut::I32(v),
                MemData::I8(v) => OperandMut::I8(v),
            })
            .collect();
        let native = Instant::now();
        let r = self.jit.run(id, &mut views);
        let ns = u64::try_from(native.elapsed().as_nanos()).unwrap_or(u64::MAX);
        drop(views);
        if let Some(times) = &mut self.times {
            times.push(LaunchTime {
                kernel: k.name.clone(),
                source: k.source.clone(),
                ns,
                packed: self.jit.packed(id),
                flops: k.flops(),
                bytes: types.iter().map(MemType::bytes).sum(),
            });
        }
        self.stats.launches += 1;
        self.stats.packed_launches += u64::from(self.jit.packed(id));
        self.stats.compile_time += compiled - start;
        self.stats.run_time += compiled.elapsed();
        match r {
            Ok(()) => Ok(()),
            Err(e @ fbc_codegen::cpu::Error::Runtime { .. }) => {
                // The native code reports only the kind of fault; the reference executor, run
                // again on copies of the operands, finds the same first fault in the same order
                // and words it with the offending value and point, as the other back ends do.
                let mut copies: Vec<MemData> = operands.iter().map(|m| (**m).clone()).collect();
                let mut refs: Vec<&mut MemData> = copies.iter_mut().collect();
                Err(match run_kernel(k, types, &mut refs) {
                    Err(message) => message,
                    Ok(()) => e.to_string(),
                })
            }
            Err(e) => Err(e.to_string()),
        }
    }
}

/// Runs function `func` of a lowered `module` with its launches compiled by the Cranelift JIT;
/// returns the results and the launcher's counters.
pub fn run(
    module: &Module,
    func: FuncId,
    inputs: Vec<Value>,
    options: Options,
) -> Result<(Vec<Value>, JitStats), InterpError> {
    run_with(module, func, inputs, options, Backend::Cranelift)
}

/// [`run`] with the launches compiled by `backend`.
pub fn run_with(
    module: &Module,
    func: FuncId,
    inputs: Vec<Value>,
    options: Options,
    backend: Backend,
) -> Result<(Vec<Value>, JitStats), InterpError> {
    let mut launcher = launcher(module, func, backend)?;
    let out = Interpreter::with_options(module, options).run_id_with_launcher(
        func,
        inputs,
        launcher.as_launcher(),
    )?;
    Ok((out, launcher.stats()))
}

/// Runs `func` once to compile its kernels and warm up, then `repeat` times more (at least
/// once), recording every launch of those runs: per run, its launches in order, and the
/// launcher's counters (over all runs).
pub fn bench(
    module: &Module,
    func: FuncId,
    inputs: &[Value],
    backend: Backend,
    repeat: usize,
) -> Result<(Vec<Vec<LaunchTime>>, JitStats), InterpError> {
    let mut launcher = launcher(module, func, backend)?;
    let interp = Interpreter::with_options(module, Options::default());
    let mut runs = Vec::new();
    for run in 0..=repeat.max(1) {
        launcher.record(run > 0);
        interp.run_id_with_launcher(func, inputs.to_vec(), launcher.as_launcher())?;
        runs.extend(launcher.recorded());
    }
    Ok((runs, launcher.stats()))
}

/// A [`JitLauncher`] of either code generator, as [`run_with`] and [`bench`] drive it.
trait CpuLauncher {
    fn as_launcher(&mut self) -> &mut dyn Launcher;
    fn stats(&self) -> JitStats;
    /// Records the launches of the runs that follow (`on`), or not.
    fn record(&mut self, on: bool);
    /// The launches recorded since [`CpuLauncher::record`], if it was on.
    fn recorded(&mut self) -> Option<Vec<LaunchTime>>;
}

impl<C: Codegen> CpuLauncher for JitLauncher<C> {
    fn as_launcher(&mut self) -> &mut dyn Launcher {
        self
    }
    fn stats(&self) -> JitStats {
        JitLauncher::stats(self)
    }
    fn record(&mut self, on: bool) {
        self.times = on.then(Vec::new);
    }
    fn recorded(&mut self) -> Option<Vec<LaunchTime>> {
        self.times.take()
    }
}

/// The launcher of `backend`; an error of `func` when the back end cannot be set up.
fn launcher(
    module: &Module,
    func: FuncId,
    backend: Backend,
) -> Result<Box<dyn CpuLauncher>, InterpError> {
    let setup = |message| InterpError::Op {
        op: "memory.launch".into(),
        message,
        span: module.func(func).span,
    };
    Ok(match backend {
        Backend::Cranelift => Box::new(JitLauncher::new().map_err(setup)?),
        #[cfg(feature = "llvm")]
        Backend::Llvm(cpu) => Box::new(JitLauncher::llvm(cpu).map_err(setup)?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::tests::{parse, EMBED};
    use crate::exec::ReferenceLauncher;
    use crate::interp::random_inputs;
    use crate::reference::Tensor;

    /// Runs `@f` with the reference executor and with the JIT on the same random inputs; the
    /// results must be identical (bit for bit: `Value`'s equality compares the f32 data). With
    /// the `llvm` feature the LLVM back end must compute the same bits too.
    fn same(text: &str) -> (Vec<Value>, JitStats) {
        let m = parse(text);
        let inputs = random_inputs(&m, "f", 11).unwrap();
        let want = Interpreter::new(&m)
            .run_with_launcher("f", inputs.clone(), &mut ReferenceLauncher)
            .unwrap();
        let mut out = None;
        // On one thread, and on four with every launch split as far as it provably can be.
        for threads in [1, 4] {
            let mut jit = JitLauncher::new().unwrap();
            jit.jit_mut().set_threads(threads);
            jit.jit_mut().set_min_points_per_thread(1);
            let got =
                Interpreter::new(&m).run_with_launcher("f", inputs.clone(), &mut jit).unwrap();
            for (g, w) in got.iter().zip(&want) {
                let bits =
                    |v: &Value| v.to_f64_vec().iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(g), bits(w), "{threads} threads: jit {g:?}\nreference {w:?}");
            }
            assert_eq!(got.len(), want.len());
            if threads == 1 {
                assert_eq!(jit.stats().parallel_launches, 0);
            }
            out = Some((got, jit.stats()));
        }
        #[cfg(feature = "llvm")]
        {
            let mut jit = JitLauncher::llvm(fbc_codegen::llvm::Cpu::Host).unwrap();
            jit.jit_mut().set_min_points_per_thread(1);
            let got =
                Interpreter::new(&m).run_with_launcher("f", inputs.clone(), &mut jit).unwrap();
            let bits = |v: &Value| v.to_f64_vec().iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(
                got.iter().map(bits).collect::<Vec<_>>(),
                want.iter().map(bits).collect::<Vec<_>>()
            );
        }
        out.expect("two runs")
    }

    const MATMUL: &str = r#"
func.func @f(%a: tensor<5x7xf32>, %b: tensor<7x3xf32>, %c: tensor<3xf32>) -> tensor<5x3xf32> {
  %ma = memory.upload %a {layout = #layout.linear} : (tensor<5x7xf32>) -> !memory.buffer<35, f32>
  %mb = memory.upload %b {layout = #layout.linear} : (tensor<7x3xf32>) -> !memory.buffer<21, f32>
  %mc = memory.upload %c {layout = #layout.linear} : (tensor<3xf32>) -> !memory.buffer<3, f32>
  %mo = memory.alloc : () -> !memory.buffer<15, f32>
  memory.launch %ma, %mb, %mc, %mo {kernel = "mm", domain = [5, 3, 7], iterators = ["parallel", "parallel", "reduction"], maps = [(i, j, k) -> (i * 7 + k), (i, j, k) -> (k * 3 + j), (i, j, k) -> (j), (i, j, k) -> (i * 3 + j)], body = "x0 * x1", combine = "add", epilogue = "tanh(acc + x2)"} : (!memory.buffer<35, f32>, !memory.buffer<21, f32>, !memory.buffer<3, f32>, !memory.buffer<15, f32>) -> ()
  %mr = memory.alloc : () -> !memory.buffer<15, f32>
  memory.launch %mo, %mr {kernel = "mm2", domain = [5, 3, 7], iterators = ["parallel", "parallel", "reduction"], maps = [(i, j, k) -> (i * 3 + j), (i, j, k) -> (i * 3 + j)], body = "x0", combine = "max"} : (!memory.buffer<15, f32>, !memory.buffer<15, f32>) -> ()
  %o = memory.download %mr {layout = #layout.linear} : (!memory.buffer<15, f32>) -> tensor<5x3xf32>
  func.return %o : (tensor<5x3xf32>) -> ()
}"#;

    #[test]
    fn matmul_epilogue_and_max_match_the_reference() {
        let (_, stats) = same(MATMUL);
        assert_eq!((stats.launches, stats.compiled), (2, 2));
        // Both launches split along their 5 rows on 4 threads.
        assert_eq!((stats.threads, stats.parallel_launches), (4, 2));
    }

    #[test]
    fn rtile_image_with_guard_matches_the_reference() {
        let rt = "#layout.rtile<tile = [4, 4], horizontal = 1, pad = [2, 2]>";
        same(&format!(
            r#"
func.func @f(%x: tensor<6x6xf32>) -> tensor<6x6xf32> {{
  %i = memory.upload %x {{layout = {rt}}} : (tensor<6x6xf32>) -> !memory.image2d<[2, 8], f32>
  %o = memory.alloc : () -> !memory.image2d<[2, 8], f32>
  memory.launch %i, %o {{kernel = "gelu", domain = [8, 2, 4], iterators = ["parallel", "parallel", "parallel"], maps = [(y, x, c) -> (x, y, c), (y, x, c) -> (x, y, c)], body = "x0 * 0.5 * (1.0 + erf(x0 * 0.70710677))", guard = (y, x, c) -> (y, x * 4 + c), guard_bounds = [6, 6]}} : (!memory.image2d<[2, 8], f32>, !memory.image2d<[2, 8], f32>) -> ()
  %y = memory.download %o {{layout = {rt}}} : (!memory.image2d<[2, 8], f32>) -> tensor<6x6xf32>
  func.return %y : (tensor<6x6xf32>) -> ()
}}"#
        ));
    }

    #[test]
    fn gathers_match_and_fault_at_the_op() {
        same(EMBED);
        let m = parse(EMBED);
        let table =
            Value::F32(Tensor::new(vec![10, 4], (0..40).map(|v| v as f32).collect()).unwrap());
        let bad = Value::I32(Tensor::new(vec![3], vec![2, 10, 0]).unwrap());
        let e = run(&m, FuncId(0), vec![table, bad], Options::default()).unwrap_err();
        // Worded as the reference executor words it: the offset and the point.
        assert_eq!(
            e.to_string(),
            "`memory.launch`: kernel `embed`: x1[40] is outside operand 1 (40 elements) at domain index [1, 0]"
        );
        let InterpError::Op { span, .. } = e else { panic!("{e:?}") };
        assert_eq!(span.start as usize, EMBED.find("memory.launch %mi").unwrap());
    }

    #[test]
    fn identical_launches_compile_once() {
        let twice = MATMUL.replace(
            "%o = memory.download %mr",
            "%mr2 = memory.alloc : () -> !memory.buffer<15, f32>\n  memory.launch %mo, %mr2 {kernel = \"again\", domain = [5, 3, 7], iterators = [\"parallel\", \"parallel\", \"reduction\"], maps = [(i, j, k) -> (i * 3 + j), (i, j, k) -> (i * 3 + j)], body = \"x0\", combine = \"max\"} : (!memory.buffer<15, f32>, !memory.buffer<15, f32>) -> ()\n  %o = memory.download %mr2",
        );
        let (_, stats) = same(&twice);
        assert_eq!((stats.launches, stats.compiled), (3, 2));
    }
}

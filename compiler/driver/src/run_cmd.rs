//! `fbc run`: executes one function of a `.fbir` module with the reference interpreter.
//!
//! ```text
//! fbc run FILE.fbir [--entry NAME] [--inputs IN.safetensors] [--outputs OUT.safetensors]
//!                   [--random-inputs SEED] [--target cpu] [--f64] [-v]
//! ```
//!
//! - The function is `--entry` (with or without `@`), else the module's only function, else
//!   `main`; otherwise the command lists the functions and asks for `--entry` (exit 2).
//! - Inputs are tensors of the safetensors file named like the arguments (`x` for `%x`); the file
//!   is memory-mapped and each tensor converted once. Accepted dtypes: F32, F16, BF16, F64, I32,
//!   matching the argument's element type; with `--f64` a float argument also accepts F64. With
//!   `--random-inputs SEED`, every argument the file does not give gets deterministic random
//!   values (floats uniform in [-1, 1), i32 ids uniform below the bound their uses imply, else in
//!   [0, 2); see `fbc_runtime::interp::random_inputs`). A missing, extra, mis-typed or mis-shaped
//!   input is an error naming it and both types (exit 1), as is a malformed file.
//! - Results are `result0`, `result1`, ... With `--outputs` they are written (atomically) to a
//!   safetensors file in their declared dtype (every float as F64 with `--f64`); with `-v`, or
//!   without `--outputs`, a summary of each (type, min/max/mean, first values) goes to stdout.
//! - `--target cpu-jit [-O LEVEL] [--layout-strategy S] [--profile P] [--check]` lowers the
//!   module like `--target opencl` and runs every kernel as native code compiled by Cranelift
//!   (see `run_cmd/jit.rs`); `--target cpu-llvm [--cpu host|generic]` the same with the kernels
//!   compiled by LLVM (fbc built with the `llvm` feature, else exit 2).
//! - `--target opencl [--device N|NAME] [-O LEVEL] [--layout-strategy S] [--profile P]
//!   [--dump-kernels DIR] [--substitute-kernel NAME=FILE.cl] [--check]` compiles the module (at
//!   -O3 by default), lowers it to the memory dialect, runs the generated kernels on an OpenCL
//!   device and, with `--check`, compares every result with this interpreter (see
//!   `run_cmd/opencl.rs`); it needs fbc built with the `opencl` feature. Other targets, and
//!   `--check` on `cpu`, are not supported (exit 2).
//! - `--max-memory SIZE` (`512M`, `8G`, plain bytes; default half of the available memory)
//!   bounds what the run holds at once: the interpreter's live values, and for `opencl` and
//!   `cpu-jit` the lowered storage too. It is checked before inputs are made or read, so a huge
//!   shape fails at once, located at the op (or the function, for an argument), exit 1.
//! - `--runs N` (with `--target opencl`) runs the function N times in one call and keeps the
//!   last run's results (what `--check` compares): the later runs reuse what the first made
//!   on the device, and under a budget read the streamed weights from pinned host copies.
//! - `--memory-budget BYTES` (with `--target opencl`) lowers with `plan-weight-streaming` for
//!   the budget and runs under it: streamed weights are uploaded during the launches the plan
//!   names, on a second queue, and the device never holds more than the budget (a run that
//!   would is an error). A line on stderr gives the peak, the bytes streamed and the transfer
//!   time hidden behind launches.
//! - `--f32-weights W.safetensors` (any target) also runs this interpreter on the f32 weights
//!   that the run's quantised ones were made from and reports each result's distance from it
//!   (`run_cmd/f32_weights.rs`).
//! - `--half-images` (with `--target opencl|cpu-jit`) lowers with `f16` image2d textures
//!   (`lower-to-memory{half-images=true}`); `--check` then uses the `f16` bound of
//!   `run_cmd/check.rs`. A kernel error while running (an id out of
//!   range, say) is reported at the op, `FILE:LINE:COL: error: ...` (exit 1).

mod check;
mod f32_weights;
pub(crate) mod io;
mod jit;
pub(crate) mod mapped;
pub(crate) mod opencl;

pub(crate) use opencl::devices;

use std::fmt::Write as _;
use std::time::Instant;

use fbc_ir::{FuncId, Module, SourceFile, Type};
use fbc_runtime::interp::{Interpreter, Mode, Options, Value};

use crate::cli::RunArgs;
use crate::{Driver, Failure};

pub(crate) fn run(driver: &Driver, a: &RunArgs) -> Result<(), Failure> {
    fbc_runtime::limits::set_max_memory(a.max_memory.unwrap_or(0));
    if a.device.memory_budget.is_some() && a.target != "opencl" {
        return Err(Failure::Usage("--memory-budget is for --target opencl".into()));
    }
    if a.runs != 1 && a.target != "opencl" {
        return Err(Failure::Usage("--runs is for --target opencl".into()));
    }
    if a.lower.cpu.is_some() && a.target != "cpu-llvm" {
        return Err(Failure::Usage("--cpu is for --target cpu-llvm".into()));
    }
    if a.target == "cpu-jit" || a.target == "cpu-llvm" {
        return jit::run(driver, a);
    }
    if a.target == "opencl" {
        return opencl::run(driver, a);
    }
    if a.target != "cpu" {
        return Err(Failure::Usage(format!(
            "--target {} is not yet supported by `fbc run`; supported now: cpu, cpu-jit, \
             cpu-llvm, opencl",
            a.target
        )));
    }
    if a.lower.half_images {
        return Err(Failure::Usage(
            "--half-images sets the storage of lowered kernels; it needs --target opencl or \
             cpu-jit (the interpreter computes on tensors)"
                .into(),
        ));
    }
    if a.check {
        return Err(Failure::Usage(
            "--check is not yet supported: it compares a device target's results with the \
             reference interpreter, and the only target so far, cpu, is the interpreter"
                .into(),
        ));
    }
    let (file, module) = driver.load(&a.file)?;
    let func = entry(&module, a.entry.as_deref(), &file)?;
    let mode = if a.f64 { Mode::F64 } else { Mode::F32 };
    check_memory(&file, &module, func, mode)?;
    let inputs = io::read_inputs(&module, func, a.sources(), mode, &file.name)?;

    let start = Instant::now();
    let interp = Interpreter::with_options(&module, Options { mode, ..Options::default() });
    let results = interp.run_id(func, inputs).map_err(|e| located(&file, &e))?;
    let elapsed = start.elapsed();
    let mut text = String::new();
    if a.verbose || a.outputs.is_none() {
        let result_types = &module.func(func).result_types;
        for (i, (v, ty)) in results.iter().zip(result_types).enumerate() {
            text.push_str(&summary(&format!("result{i}"), ty, v));
        }
    }
    f32_weights::compare(a, &file, &module, func, &results, &mut text)?;

    if let Some(path) = &a.outputs {
        let bytes = io::encode_outputs(&module, func, &results)?;
        crate::output::write_atomic(path, &bytes)?;
    }
    if a.verbose {
        eprintln!(
            "ran @{} in {:.3} s ({} mode)",
            module.func(func).name,
            elapsed.as_secs_f64(),
            if a.f64 { "f64" } else { "f32" }
        );
    }
    if !text.is_empty() {
        crate::output::write_text(None, &text)?;
    }
    Ok(())
}

/// The function to run: `--entry`, else the only function, else `main`.
pub(crate) fn entry(
    module: &Module,
    requested: Option<&str>,
    source: &SourceFile,
) -> Result<FuncId, Failure> {
    let file = source.name.as_str();
    let names = || {
        let all: Vec<String> = module.funcs.iter().map(|f| format!("@{}", f.name)).collect();
        all.join(", ")
    };
    if let Some(name) = requested {
        let name = name.strip_prefix('@').unwrap_or(name);
        return module.find_func(name).ok_or_else(|| {
            Failure::Usage(if module.funcs.is_empty() {
                format!("--entry @{name}: {file} has no functions")
            } else {
                format!("--entry @{name}: no function of that name; {file} has {}", names())
            })
        });
    }
    match module.funcs.len() {
        0 => {
            // At the last character of the text (the module's closing brace, say).
            let end = source.text.trim_end().len();
            let last = end.saturating_sub(1);
            let d = fbc_ir::Diagnostic::error("the module has no function to run")
                .at(fbc_ir::Span::new(last, end))
                .with_label("the module ends here");
            Err(Failure::input(source, &[d]))
        }
        1 => Ok(FuncId(0)),
        _ => module.find_func("main").ok_or_else(|| {
            Failure::Usage(format!(
                "{file} has several functions and none is named `main`; choose one with \
                 --entry: {}",
                names()
            ))
        }),
    }
}

/// Function `fname` of `lowered`, the module an entry point of `file` was lowered to.
pub(crate) fn lowered_func(
    lowered: &Module,
    fname: &str,
    file: &SourceFile,
) -> Result<FuncId, Failure> {
    lowered.find_func(fname).ok_or_else(|| {
        Failure::Input(format!("{}: error: @{fname} disappeared while lowering\n", file.name))
    })
}

/// Fails, located at the op or the function, when running `func` in `mode` would hold more than
/// the memory limit (`--max-memory`) at once; nothing has been allocated yet.
pub(crate) fn check_memory(
    file: &SourceFile,
    module: &Module,
    func: FuncId,
    mode: Mode,
) -> Result<(), Failure> {
    fbc_runtime::interp::check_memory(module, func, mode).map(|_| ()).map_err(|e| located(file, &e))
}

/// An interpreter error rendered at its op, as the compiler renders diagnostics.
pub(crate) fn located(file: &SourceFile, e: &fbc_runtime::InterpError) -> Failure {
    Failure::input(file, &[e.to_diagnostic()])
}

/// How many leading values a summary shows.
const SHOWN: usize = 8;

/// `result0: tensor<2x3xf32>  min -1 max 2.5 mean 0.25` and a line with the first values.
pub(crate) fn summary(name: &str, ty: &Type, v: &Value) -> String {
    let values = v.to_f64_vec();
    let finite: Vec<f64> = values.iter().copied().filter(|x| !x.is_nan()).collect();
    let nans = values.len() - finite.len();
    let mut s = format!("{name}: {ty}");
    if !finite.is_empty() {
        let min = finite.iter().copied().fold(f64::INFINITY, f64::min);
        let max = finite.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let mean = finite.iter().sum::<f64>() / finite.len() as f64;
        let _ = write!(s, "  min {} max {} mean {}", num(v, min), num(v, max), num(v, mean));
    }
    if nans > 0 {
        let _ = write!(s, "  ({nans} NaN)");
    }
    let shown: Vec<String> = values.iter().take(SHOWN).map(|&x| num(v, x)).collect();
    let more = if values.len() > SHOWN { ", ..." } else { "" };
    let _ = writeln!(s, "\n  [{}{more}]", shown.join(", "));
    s
}

/// A number as its storage prints it: shortest round-trip form of f32 for f32 data.
fn num(v: &Value, x: f64) -> String {
    match v {
        Value::F32(_) => format!("{}", x as f32),
        _ => format!("{x}"),
    }
}

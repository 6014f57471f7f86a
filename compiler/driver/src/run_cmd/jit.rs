//! `fbc run --target cpu-jit`: the module lowered to the memory dialect, every launch compiled
//! to native code by the Cranelift back end (`fbc_codegen::cranelift`) and run on this CPU.
//!
//! The module is compiled at `-O LEVEL` (default `-O3`) with `--layout-strategy` (default
//! fblayout) and lowered with `fbc_transforms::lowering_pipeline` for hardware profile
//! `--profile` (default `generic`: R-Tiles and images as for a GPU, so the JIT runs the same
//! kernels the OpenCL back end would); an input that is already lowered runs as it is. Inputs are
//! read as for the interpreter, outputs written the same way. With `--check` the original module
//! also runs in the reference interpreter (f64 and f32) and every result is compared with the
//! bound and the report of `--target opencl --check` (`run_cmd/opencl.rs`); with `-v` the launch
//! count, the compile and native times go to stderr.

use std::time::Instant;

use fbc_runtime::interp::{Interpreter, Mode, Options, Value};

use super::opencl::{compare, ATOL, RTOL};
use super::RunArgs;
use crate::{Driver, Failure};

pub(crate) fn run(driver: &Driver, a: &RunArgs) -> Result<(), Failure> {
    if a.f64 {
        return Err(Failure::Usage(
            "not yet supported: --f64 with --target cpu-jit (kernels compute in f32)".into(),
        ));
    }
    for (flag, given) in [
        ("--dump-kernels", a.dump_kernels.is_some()),
        ("--substitute-kernel", !a.substitute_kernel.is_empty()),
    ] {
        if given {
            return Err(Failure::Usage(format!("{flag} is for --target opencl, not cpu-jit")));
        }
    }
    let (level, strategy) = a.opencl_level();
    let profile = fbc_target::builtin(&a.profile).map_err(|e| Failure::Usage(e.to_string()))?;
    let (file, module) = driver.load(&a.file)?;
    let func = super::entry(&module, a.entry.as_deref(), &file.name)?;
    let fname = module.func(func).name.clone();
    let compile_start = Instant::now();
    let mut lowered = module.clone();
    let instr = Default::default();
    if !crate::opencl_emit::is_lowered(&lowered) {
        let pipeline = fbc_transforms::pipeline(level, strategy.strategy());
        driver.run_pipeline(&file, &mut lowered, &pipeline, Some(&profile), &instr)?;
        crate::opencl_emit::lower(driver, &file, &mut lowered, &a.profile, &instr)?;
    }
    let lowering = compile_start.elapsed();
    let lfunc = lowered.find_func(&fname).ok_or_else(|| {
        Failure::Input(format!("{}: error: @{fname} disappeared while lowering\n", file.name))
    })?;
    let inputs = super::io::read_inputs(
        &module,
        func,
        a.inputs.as_deref(),
        a.random_inputs,
        Mode::F32,
        &file.name,
    )?;
    let start = Instant::now();
    let (results, stats) =
        fbc_runtime::jit::run(&lowered, lfunc, inputs.clone(), Options::default())
            .map_err(|e| super::located(&file, &e))?;
    let elapsed = start.elapsed();
    if a.verbose {
        eprintln!(
            "ran @{fname} with the CPU JIT in {:.3} s: {} launches, {} kernels compiled in \
             {:.3} s, {:.3} s in native code (compile and lower: {:.3} s)",
            elapsed.as_secs_f64(),
            stats.launches,
            stats.compiled,
            stats.compile_time.as_secs_f64(),
            stats.run_time.as_secs_f64(),
            lowering.as_secs_f64()
        );
    }
    if let Some(path) = &a.outputs {
        let bytes = super::io::encode_outputs(&module, func, &results)?;
        crate::output::write_atomic(path, &bytes)?;
    }
    let types = &module.func(func).result_types;
    let mut text = String::new();
    if a.verbose || a.outputs.is_none() {
        for (i, (v, ty)) in results.iter().zip(types).enumerate() {
            text.push_str(&super::summary(&format!("result{i}"), ty, v));
        }
    }
    if a.check {
        // The comparison of `--target opencl --check`: against the f64 interpreter, with the
        // f32 interpreter's own error as slack.
        let wide: Vec<Value> = inputs.iter().map(widen).collect();
        let reference = Interpreter::new(&module)
            .run_id(func, inputs)
            .map_err(|e| super::located(&file, &e))?;
        let reference64 =
            Interpreter::with_options(&module, Options { mode: Mode::F64, ..Default::default() })
                .run_id(func, wide)
                .map_err(|e| super::located(&file, &e))?;
        let mut failed = Vec::new();
        for (i, ((r32, r), d)) in reference.iter().zip(&reference64).zip(&results).enumerate() {
            let r = r.to_f64_vec();
            let e32 = compare(&r, &r32.to_f64_vec(), 0.0).0;
            let e32 = if e32.is_finite() { e32 } else { 0.0 };
            let (max_abs, max_rel, bad) = compare(&r, &d.to_f64_vec(), 8.0 * e32);
            text.push_str(&format!(
                "check result{i}: max abs error {max_abs:.3e}, max rel error {max_rel:.3e} \
                 (reference f32: {e32:.3e}), {bad} element(s) outside {ATOL:e} + \
                 {RTOL:e}·(|ref| + max|ref|) + 8·{e32:.3e}\n"
            ));
            if bad > 0 {
                failed.push(format!("result{i}"));
            }
        }
        if !failed.is_empty() {
            crate::output::write_text(None, &text)?;
            return Err(Failure::Input(format!(
                "{}: error: CPU JIT results differ from the reference interpreter: {}\n",
                file.name,
                failed.join(", ")
            )));
        }
        text.push_str("check passed\n");
    }
    if !text.is_empty() {
        crate::output::write_text(None, &text)?;
    }
    Ok(())
}

/// A value in f64 (the f64 interpreter's inputs): f32 data widened, other data as it is.
fn widen(v: &Value) -> Value {
    match v {
        Value::F32(t) => {
            let d: Vec<f64> = t.data().iter().map(|&x| f64::from(x)).collect();
            match fbc_runtime::reference::Tensor::new(t.shape().to_vec(), d) {
                Ok(t) => Value::F64(t),
                Err(_) => v.clone(),
            }
        }
        _ => v.clone(),
    }
}

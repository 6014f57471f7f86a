//! `fbc run --target cpu-jit|cpu-llvm`: the module lowered to the memory dialect, every launch
//! compiled to native code by the Cranelift back end (`fbc_codegen::cranelift`) or, for
//! `cpu-llvm`, by LLVM (`fbc_codegen::llvm`, for `--cpu host|generic`), and run on this CPU.
//!
//! The module is compiled at `-O LEVEL` (default `-O3`) with `--layout-strategy` (default
//! fblayout) and lowered (`Session::compile`) for hardware profile
//! `--profile` (default `generic`: R-Tiles and images as for a GPU, so the JIT runs the same
//! kernels the OpenCL back end would); an input that is already lowered runs as it is. Inputs are
//! read as for the interpreter, outputs written the same way. With `--check` the original module
//! also runs in the reference interpreter (f64 and f32) and every result is compared with the
//! bound and the report of `--target opencl --check` (`run_cmd/check.rs`); with `-v` the launch
//! count, the compile and native times go to stderr.

use std::time::Instant;

use fbc_runtime::interp::Mode;

use crate::cli::RunArgs;
use crate::{Driver, Failure};

pub(crate) fn run(driver: &Driver, a: &RunArgs) -> Result<(), Failure> {
    let backend = a.lower.cpu_backend(&a.target)?;
    let target = &a.target;
    if a.f64 {
        return Err(Failure::Usage(format!(
            "not yet supported: --f64 with --target {target} (kernels compute in f32)"
        )));
    }
    for (flag, given) in [
        ("--dump-kernels", a.dump_kernels.is_some()),
        ("--substitute-kernel", !a.substitute_kernel.is_empty()),
    ] {
        if given {
            return Err(Failure::Usage(format!("{flag} is for --target opencl, not {target}")));
        }
    }
    let name = if a.target == "cpu-llvm" { "LLVM JIT" } else { "CPU JIT" };
    let session = a.lower.session(driver, a.split_k)?;
    let (file, module) = driver.load(&a.file)?;
    let func = super::entry(&module, a.entry.as_deref(), &file)?;
    let fname = module.func(func).name.clone();
    super::check_memory(&file, &module, func, Mode::F32)?;
    let compile_start = Instant::now();
    let mut lowered = module.clone();
    session.compile(&file, &mut lowered)?;
    let lowering = compile_start.elapsed();
    let lfunc = super::lowered_func(&lowered, &fname, &file)?;
    super::check_memory(&file, &lowered, lfunc, Mode::F32)?;
    let inputs = super::io::read_inputs(&module, func, a.sources(), Mode::F32, &file.name)?;
    let start = Instant::now();
    let (results, stats) = session.jit(&file, &lowered, lfunc, inputs.clone(), backend)?;
    let elapsed = start.elapsed();
    if a.verbose {
        eprintln!(
            "ran @{fname} with the {name} in {:.3} s: {} launches ({} packed contractions, {} \
             split over up to {} threads), {} kernels compiled in {:.3} s, {:.3} s in native \
             code (compile and lower: {:.3} s)",
            elapsed.as_secs_f64(),
            stats.launches,
            stats.packed_launches,
            stats.parallel_launches,
            stats.threads,
            stats.compiled,
            stats.compile_time.as_secs_f64(),
            stats.run_time.as_secs_f64(),
            lowering.as_secs_f64()
        );
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
        let half = super::check::HalfModel::of(&lowered, &fname, &file, false)?;
        super::check::check(&file, &module, func, inputs, &results, name, half, &mut text)?;
    }
    super::f32_weights::compare(a, &file, &module, func, &results, &mut text)?;
    // Written only once the run (and its check) succeeded: a failure leaves no outputs file.
    if let Some(path) = &a.outputs {
        let bytes = super::io::encode_outputs(&module, func, &results)?;
        crate::output::write_atomic(path, &bytes)?;
    }
    if !text.is_empty() {
        crate::output::write_text(None, &text)?;
    }
    Ok(())
}

//! `fbc run --target opencl` and `fbc devices`.
//!
//! The module is compiled at `-O LEVEL`, written by the OpenCL C writer, and run on device
//! `--device N` with the inputs `fbc run` reads for the interpreter. With `--check` the original
//! module also runs in the reference interpreter (f32) and every result is compared:
//! `|device - reference| <= ATOL + RTOL * (|reference| + max |reference|)` elementwise, with the
//! maximum absolute and relative errors printed per result; any element outside the bound fails
//! the run (exit 1). The `max |reference|` term is there because f32 sums in another order (the
//! tiled matmul, a reduction loop) differ by about `K·ε·Σ|terms|`, which for a result near zero
//! is far more than `ε·|result|`.
//! Without the `opencl` feature both commands answer that fbc was built without OpenCL (exit 2).

use crate::{Driver, Failure};

use super::RunArgs;

/// Absolute part of the `--check` bound.
pub(crate) const ATOL: f64 = 1e-5;
/// Relative part of the `--check` bound.
pub(crate) const RTOL: f64 = 1e-4;

#[cfg(not(feature = "opencl"))]
fn no_opencl() -> Failure {
    Failure::Usage(
        "not yet supported: this fbc was built without the `opencl` feature \
         (cargo build --features opencl)"
            .into(),
    )
}

#[cfg(not(feature = "opencl"))]
pub(crate) fn run(_driver: &Driver, _a: &RunArgs) -> Result<(), Failure> {
    Err(no_opencl())
}

#[cfg(not(feature = "opencl"))]
pub(crate) fn devices() -> Result<(), Failure> {
    Err(no_opencl())
}

#[cfg(feature = "opencl")]
pub(crate) fn devices() -> Result<(), Failure> {
    let list = fbc_runtime::opencl::devices();
    if list.is_empty() {
        return Err(Failure::Usage(
            "no OpenCL platform or device found (install an ICD, e.g. pocl-opencl-icd)".into(),
        ));
    }
    let mut text = String::new();
    for d in list {
        text.push_str(&format!(
            "{}: {} — {} ({}, {})\n",
            d.index, d.name, d.platform, d.vendor, d.version
        ));
    }
    crate::output::write_text(None, &text)
}

#[cfg(feature = "opencl")]
pub(crate) fn run(driver: &Driver, a: &RunArgs) -> Result<(), Failure> {
    use fbc_runtime::interp::{Interpreter, Mode, Value};

    if a.f64 {
        return Err(Failure::Usage("not yet supported: --f64 with --target opencl".into()));
    }
    let (file, module) = driver.load(&a.file)?;
    let func = super::entry(&module, a.entry.as_deref(), &file.name)?;
    let fname = module.func(func).name.clone();
    let inputs = super::io::read_inputs(
        &module,
        func,
        a.inputs.as_deref(),
        a.random_inputs,
        Mode::F32,
        &file.name,
    )?;
    let mut compiled = module.clone();
    let pipeline = fbc_transforms::pipeline_for_level(a.opt_level);
    driver.run_pipeline(&file, &mut compiled, pipeline, None, &Default::default())?;
    let out = super::super::opencl_emit::generate(&compiled)?;
    let mut data = Vec::new();
    for (k, v) in inputs.iter().enumerate() {
        match v {
            Value::F32(t) => data.push(t.data().to_vec()),
            _ => {
                return Err(Failure::Usage(format!(
                    "not yet supported: argument {k} of @{fname} is {} data (OpenCL runs f32 only)",
                    v.storage_name()
                )))
            }
        }
    }
    let res = fbc_runtime::opencl::run(&out.source, &out.manifest, &fname, &data, a.device)
        .map_err(|e| Failure::Input(format!("{}: error: {e}\n", file.name)))?;
    let types = &module.func(func).result_types;
    let mut text = String::new();
    if a.verbose {
        eprintln!("ran @{fname} on {} in {:.3} s", res.device, res.kernel_seconds);
    }
    for (i, (v, ty)) in res.results.iter().zip(types).enumerate() {
        let shape: Vec<usize> = ty
            .as_tensor()
            .map(|t| t.shape.iter().map(|&d| d as usize).collect())
            .unwrap_or_default();
        let t = fbc_runtime::reference::Tensor::new(shape, v.clone())
            .map_err(|e| Failure::Input(format!("{}: error: result {i}: {e}\n", file.name)))?;
        text.push_str(&super::summary(&format!("result{i}"), ty, &Value::F32(t)));
    }
    if a.check {
        let reference = Interpreter::new(&module)
            .run_id(func, inputs)
            .map_err(|e| super::located(&file, &e))?;
        let mut failed = Vec::new();
        for (i, (r, d)) in reference.iter().zip(&res.results).enumerate() {
            let (max_abs, max_rel, bad) = compare(&r.to_f64_vec(), d);
            text.push_str(&format!(
                "check result{i}: max abs error {max_abs:.3e}, max rel error {max_rel:.3e}, \
                 {bad} element(s) outside {ATOL:e} + {RTOL:e}·(|ref| + max|ref|)\n"
            ));
            if bad > 0 {
                failed.push(format!("result{i}"));
            }
        }
        if !failed.is_empty() {
            crate::output::write_text(None, &text)?;
            return Err(Failure::Input(format!(
                "{}: error: OpenCL results differ from the reference interpreter: {}\n",
                file.name,
                failed.join(", ")
            )));
        }
        text.push_str("check passed\n");
    }
    crate::output::write_text(None, &text)
}

/// `(max abs error, max rel error, elements outside the bound)`; NaN must match NaN.
#[cfg(feature = "opencl")]
pub(crate) fn compare(reference: &[f64], device: &[f32]) -> (f64, f64, usize) {
    let (mut max_abs, mut max_rel, mut bad) = (0.0f64, 0.0f64, 0usize);
    let scale = reference.iter().filter(|r| r.is_finite()).fold(0.0f64, |m, r| m.max(r.abs()));
    if reference.len() != device.len() {
        return (f64::INFINITY, f64::INFINITY, reference.len().max(device.len()));
    }
    for (&r, &d) in reference.iter().zip(device) {
        let d = f64::from(d);
        if r.is_nan() || d.is_nan() {
            bad += usize::from(r.is_nan() != d.is_nan());
            continue;
        }
        if r == d {
            continue;
        }
        let err = (r - d).abs();
        max_abs = max_abs.max(err);
        if r != 0.0 {
            max_rel = max_rel.max(err / r.abs());
        }
        if err > ATOL + RTOL * (r.abs() + scale) {
            bad += 1;
        }
    }
    (max_abs, max_rel, bad)
}

#[cfg(all(test, feature = "opencl"))]
mod tests {
    use super::compare;

    #[test]
    fn compare_rejects_perturbed_results_and_nan_mismatches() {
        let r = [1.0, -2.0, 1000.0, f64::NAN];
        assert_eq!(compare(&r, &[1.0, -2.0, 1000.0, f32::NAN]).2, 0);
        // Within 1e-5 + 1e-4·(|ref| + 1000): fine; 0.5 off is not.
        assert_eq!(compare(&r, &[1.05, -2.0, 1000.0, f32::NAN]).2, 0);
        assert_eq!(compare(&r, &[1.5, -2.0, 1000.0, f32::NAN]).2, 1);
        assert_eq!(compare(&r, &[1.0, -2.0, 1000.0, 0.0]).2, 1);
        assert_eq!(compare(&r, &[1.0]).2, 4);
    }
}

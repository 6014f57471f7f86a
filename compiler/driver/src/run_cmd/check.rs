//! `--check` of `fbc run --target opencl` and `--target cpu-jit`: the original module also runs in
//! the reference interpreter, in f64 and in f32, on the same inputs, and every result of the
//! target is compared with the f64 one:
//! `|result - ref64| <= ATOL + RTOL * (|ref64| + max |ref64|) + 8 * E32` elementwise, where
//! `E32 = max |ref32 - ref64|` over the result is the error the interpreter's own f32 computation
//! makes (see `run_cmd/opencl.rs` for why each term is there).

use fbc_ir::{FuncId, Module, SourceFile};
use fbc_runtime::interp::{Interpreter, Mode, Options, Value};

use crate::Failure;

/// Absolute part of the `--check` bound.
const ATOL: f64 = 1e-5;
/// Relative part of the `--check` bound.
const RTOL: f64 = 1e-4;

/// Runs `func` of `module` in the f32 and f64 interpreters on `inputs` and compares each of
/// `results` (what `target` computed, e.g. "OpenCL") with them: one `check result{i}: ...` line
/// per result is appended to `text`, then `check passed`. When a result is outside the bound,
/// `text` is written to stdout and the error names the failing results.
pub(crate) fn check(
    file: &SourceFile,
    module: &Module,
    func: FuncId,
    inputs: Vec<Value>,
    results: &[Value],
    target: &str,
    text: &mut String,
) -> Result<(), Failure> {
    let wide: Vec<Value> = inputs.iter().map(widen).collect();
    let reference =
        Interpreter::new(module).run_id(func, inputs).map_err(|e| super::located(file, &e))?;
    let opts64 = Options { mode: Mode::F64, ..Default::default() };
    let reference64 = Interpreter::with_options(module, opts64)
        .run_id(func, wide)
        .map_err(|e| super::located(file, &e))?;
    let mut failed = Vec::new();
    for (i, ((r32, r), d)) in reference.iter().zip(&reference64).zip(results).enumerate() {
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
        crate::output::write_text(None, text)?;
        return Err(Failure::Input(format!(
            "{}: error: {target} results differ from the reference interpreter: {}\n",
            file.name,
            failed.join(", ")
        )));
    }
    text.push_str("check passed\n");
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

/// `(max abs error, max rel error, elements outside the bound)` of `device` against
/// `reference`, the bound being `ATOL + RTOL·(|ref| + max|ref|) + slack`; NaN must match NaN.
fn compare(reference: &[f64], device: &[f64], slack: f64) -> (f64, f64, usize) {
    let (mut max_abs, mut max_rel, mut bad) = (0.0f64, 0.0f64, 0usize);
    let scale = reference.iter().filter(|r| r.is_finite()).fold(0.0f64, |m, r| m.max(r.abs()));
    if reference.len() != device.len() {
        return (f64::INFINITY, f64::INFINITY, reference.len().max(device.len()));
    }
    for (&r, &d) in reference.iter().zip(device) {
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
        if err > ATOL + RTOL * (r.abs() + scale) + slack {
            bad += 1;
        }
    }
    (max_abs, max_rel, bad)
}

#[cfg(test)]
mod tests {
    use super::compare;

    #[test]
    fn compare_rejects_perturbed_results_and_nan_mismatches() {
        let r = [1.0, -2.0, 1000.0, f64::NAN];
        assert_eq!(compare(&r, &[1.0, -2.0, 1000.0, f64::NAN], 0.0).2, 0);
        // Within 1e-5 + 1e-4·(|ref| + 1000): fine; 0.5 off is not, unless the slack allows it.
        assert_eq!(compare(&r, &[1.05, -2.0, 1000.0, f64::NAN], 0.0).2, 0);
        assert_eq!(compare(&r, &[1.5, -2.0, 1000.0, f64::NAN], 0.0).2, 1);
        assert_eq!(compare(&r, &[1.5, -2.0, 1000.0, f64::NAN], 0.5).2, 0);
        assert_eq!(compare(&r, &[1.0, -2.0, 1000.0, 0.0], 0.0).2, 1);
        assert_eq!(compare(&r, &[1.0], 0.0).2, 4);
    }
}

//! `--check` of `fbc run --target opencl` and `--target cpu-jit`: the original module also runs in
//! the reference interpreter, in f64 and in f32, on the same inputs, and every result of the
//! target is compared with the f64 one:
//! `|result - ref64| <= ATOL + RTOL * (|ref64| + max |ref64|) + 8 * E32` elementwise, where
//! `E32 = max |ref32 - ref64|` over the result is the error the interpreter's own f32 computation
//! makes (see `run_cmd/opencl.rs` for why each term is there).
//!
//! With `f16` image storage (`--half-images`) every value stored in an image is rounded to `f16`,
//! a relative error of up to `2^-11` per store. How far that moves a result from the f64
//! interpreter depends on the computation, not only on `2^-11`: on `examples/attention.fbir` with
//! random inputs the logits reach ~10^3, where one `f16` step is 0.5, and the softmax turns that
//! into a 2% change of the output. So the pass/fail comparison is with a reference that rounds the
//! same way: the reference executor running the lowered module (the `f16` storage model; an
//! OpenCL run is compared with the CPU JIT's run of it, which equals the reference executor bit
//! for bit and is much faster), with the bound `ATOL + RTOL_F16·(|model| + max|model|)`,
//! `RTOL_F16 = 8·2^-11 ≈ 3.9e-3`: the device may round an `f16` store the other way where its
//! `f32` arithmetic differs in the last bit (a different `exp`, say), and such a difference may
//! pass through a few more stores. The error against the f64 interpreter — the cost of `f16`
//! storage — and the model's own are reported next to it.

use fbc_ir::{FuncId, Module, SourceFile};
use fbc_runtime::interp::{Interpreter, Mode, Options, Value};

use crate::Failure;

/// Absolute part of the `--check` bound.
const ATOL: f64 = 1e-5;
/// Relative part of the `--check` bound.
const RTOL: f64 = 1e-4;
/// Relative part of the bound with `f16` image storage: eight `f16` roundings (`2^-11` each).
pub(crate) const RTOL_F16: f64 = 8.0 / 2048.0;

/// The `f16` storage model a `--half-images` run is checked against: function `func` of the
/// lowered module, run by the reference executor, or (`jit`) by the CPU JIT, which equals it bit
/// for bit and is far faster on large modules (what an OpenCL run is checked against).
#[derive(Debug, Clone, Copy)]
pub(crate) struct HalfModel<'a> {
    pub module: &'a Module,
    pub func: FuncId,
    pub jit: bool,
}

impl<'a> HalfModel<'a> {
    /// The model of function `fname` of `lowered` (the module an entry point of `file` was
    /// lowered to), when that lowering stored images as `f16`; `jit` as in [`HalfModel`].
    pub(crate) fn of(
        lowered: &'a Module,
        fname: &str,
        file: &SourceFile,
        jit: bool,
    ) -> Result<Option<HalfModel<'a>>, Failure> {
        if !crate::has_half_images(lowered) {
            return Ok(None);
        }
        let func = super::lowered_func(lowered, fname, file)?;
        Ok(Some(HalfModel { module: lowered, func, jit }))
    }
}

/// Runs `func` of `module` in the f32 and f64 interpreters on `inputs` and compares each of
/// `results` (what `target` computed, e.g. "OpenCL") with them: one `check result{i}: ...` line
/// per result is appended to `text`, then `check passed`. When a result is outside the bound,
/// `text` is written to stdout and the error names the failing results. With `half` (the target
/// stored images as `f16`) the bound is against that model instead (see the module docs).
#[allow(clippy::too_many_arguments)]
pub(crate) fn check(
    file: &SourceFile,
    module: &Module,
    func: FuncId,
    inputs: Vec<Value>,
    results: &[Value],
    target: &str,
    half: Option<HalfModel<'_>>,
    text: &mut String,
) -> Result<(), Failure> {
    let model = match half {
        Some(h) => {
            text.push_str(&format!(
                "check: f16 image storage: each result against the reference executor on the \
                 lowered module (its f16 model) within {ATOL:e} + {RTOL_F16:e}·(|model| + \
                 max|model|); errors against the f64 interpreter reported\n"
            ));
            let run = if h.jit {
                fbc_runtime::device::cpu_jit::run(
                    h.module,
                    h.func,
                    inputs.clone(),
                    Options::default(),
                )
                .map(|(v, _)| v)
            } else {
                Interpreter::new(h.module).run_id(h.func, inputs.clone())
            };
            Some(run.map_err(|e| super::located(file, &e))?)
        }
        None => None,
    };
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
        let e32 = compare(&r, &r32.to_f64_vec(), 0.0, RTOL).0;
        let e32 = if e32.is_finite() { e32 } else { 0.0 };
        let d = d.to_f64_vec();
        let (max_abs, max_rel, bad) = compare(&r, &d, 8.0 * e32, RTOL);
        let bad = match model.as_ref().and_then(|m| m.get(i)) {
            None => {
                text.push_str(&format!(
                    "check result{i}: max abs error {max_abs:.3e}, max rel error {max_rel:.3e} \
                     (reference f32: {e32:.3e}), {bad} element(s) outside {ATOL:e} + \
                     {RTOL:e}·(|ref| + max|ref|) + 8·{e32:.3e}\n"
                ));
                bad
            }
            Some(m) => {
                let m = m.to_f64_vec();
                let e16 = compare(&r, &m, 0.0, RTOL).0;
                let (m_abs, _, bad) = compare(&m, &d, 0.0, RTOL_F16);
                // Agreeing with the model is not enough where f16's range (±65504) was exceeded:
                // an element that is NaN or infinite while the interpreter's is finite fails.
                let overflow =
                    r.iter().zip(&d).filter(|(r, d)| r.is_finite() && !d.is_finite()).count();
                text.push_str(&format!(
                    "check result{i}: max abs error {max_abs:.3e}, max rel error {max_rel:.3e} \
                     (f16 model: {e16:.3e}, reference f32: {e32:.3e}); against the f16 model: \
                     max abs error {m_abs:.3e}, {bad} element(s) outside the bound; {overflow} \
                     element(s) not finite where the interpreter's are\n"
                ));
                bad + overflow
            }
        };
        if bad > 0 {
            failed.push(format!("result{i}"));
        }
    }
    if !failed.is_empty() {
        crate::output::write_text(None, text)?;
        let what = if half.is_some() {
            "the reference executor's f16 storage model, or leave f16's range"
        } else {
            "the reference interpreter"
        };
        let f = module.func(func);
        let d = fbc_ir::Diagnostic::error(format!(
            "{target} results differ from {what}: {}",
            failed.join(", ")
        ))
        .at(f.name_span)
        .with_label(format!("results of @{}", f.name));
        return Err(Failure::input(file, &[d]));
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
/// `reference`, the bound being `ATOL + rtol·(|ref| + max|ref|) + slack`; NaN must match NaN.
fn compare(reference: &[f64], device: &[f64], slack: f64, rtol: f64) -> (f64, f64, usize) {
    let (mut max_abs, mut max_rel, mut bad) = (0.0f64, 0.0f64, 0usize);
    let scale = reference.iter().filter(|r| r.is_finite()).fold(0.0f64, |m, r| m.max(r.abs()));
    if reference.len() != device.len() {
        return (f64::INFINITY, f64::INFINITY, reference.len().max(device.len()));
    }
    for (&r, &d) in reference.iter().zip(device) {
        if r.is_nan() || d.is_nan() {
            if r.is_nan() != d.is_nan() {
                bad += 1;
                (max_abs, max_rel) = (f64::INFINITY, f64::INFINITY);
            }
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
        if err > ATOL + rtol * (r.abs() + scale) + slack {
            bad += 1;
        }
    }
    (max_abs, max_rel, bad)
}

#[cfg(test)]
mod tests {
    use super::{compare, RTOL, RTOL_F16};

    #[test]
    fn compare_rejects_perturbed_results_and_nan_mismatches() {
        let r = [1.0, -2.0, 1000.0, f64::NAN];
        assert_eq!(compare(&r, &[1.0, -2.0, 1000.0, f64::NAN], 0.0, RTOL).2, 0);
        // Within 1e-5 + 1e-4·(|ref| + 1000): fine; 0.5 off is not, unless the slack allows it.
        assert_eq!(compare(&r, &[1.05, -2.0, 1000.0, f64::NAN], 0.0, RTOL).2, 0);
        assert_eq!(compare(&r, &[1.5, -2.0, 1000.0, f64::NAN], 0.0, RTOL).2, 1);
        assert_eq!(compare(&r, &[1.5, -2.0, 1000.0, f64::NAN], 0.5, RTOL).2, 0);
        assert_eq!(compare(&r, &[1.0, -2.0, 1000.0, 0.0], 0.0, RTOL).2, 1);
        // A NaN where the reference has a number is an infinite error, not none.
        assert_eq!(compare(&[1.0], &[f64::NAN], 0.0, RTOL), (f64::INFINITY, f64::INFINITY, 1));
        assert_eq!(compare(&r, &[1.0], 0.0, RTOL).2, 4);
    }

    #[test]
    fn the_f16_bound_allows_f16_rounding_and_no_more() {
        // 1000 stored as f16 is exact; 1000.49 rounds to 1000.5 (f16 spacing 0.5 in [512, 1024)).
        let r = [1000.49, 1.0];
        let stored = [f64::from(half::f16::from_f64(1000.49).to_f32()), 1.0];
        assert_eq!(stored[0], 1000.5);
        assert_eq!(compare(&r, &stored, 0.0, RTOL_F16).2, 0);
        // The f32 bound 1e-4·(1000.49 + 1000.49) ≈ 0.2 also takes this one; a result 10 off
        // (a wrong kernel) is outside both, and 5 off is inside only the f16 bound (≈ 7.8).
        assert_eq!(compare(&r, &[1005.0, 1.0], 0.0, RTOL_F16).2, 0);
        assert_eq!(compare(&r, &[1005.0, 1.0], 0.0, RTOL).2, 1);
        assert_eq!(compare(&r, &[1010.0, 1.0], 0.0, RTOL_F16).2, 1);
    }
}

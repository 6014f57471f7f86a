//! Translation validation: run one function of two modules (before and after a transformation)
//! on the same random inputs and compare every result.
//!
//! Two elements `before`, `after` agree when `|after - before| ≤ atol + rtol·|before|`, or both
//! are NaN, or both are the same infinity. A mismatch is reported with the worst element (the
//! one that exceeds its tolerance by the largest factor): its index, both values, and the
//! absolute and relative errors, plus the largest errors over the whole result.

use std::fmt::Write as _;

use fbc_ir::Module;

use super::random::random_inputs;
use super::value::Value;
use super::{find_func, Interpreter};

/// How close two results must be.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tolerance {
    /// Relative tolerance, scaled by `|before|`.
    pub rtol: f64,
    /// Absolute tolerance.
    pub atol: f64,
}

impl Tolerance {
    /// For f32 computations that reorder or fuse arithmetic: `rtol = 1e-5`, `atol = 1e-6`.
    pub const F32: Tolerance = Tolerance { rtol: 1e-5, atol: 1e-6 };
    /// Bit-for-bit equality (NaNs equal).
    pub const EXACT: Tolerance = Tolerance { rtol: 0.0, atol: 0.0 };

    pub fn new(rtol: f64, atol: f64) -> Tolerance {
        Tolerance { rtol, atol }
    }
}

impl Default for Tolerance {
    fn default() -> Tolerance {
        Tolerance::F32
    }
}

/// Runs `func` of `before` and of `after` on the same random inputs (from `seed`, see
/// [`random_inputs`]; index bounds are taken from `before`) in f32 mode, and compares every
/// result within `tol`. `Err` explains the first difference: a missing function, a changed
/// signature, an error in either run, or the worst mismatching element of a result.
pub fn check_equivalent(
    before: &Module,
    after: &Module,
    func: &str,
    seed: u64,
    tol: Tolerance,
) -> Result<(), String> {
    let fb = find_func(before, func).map_err(|e| format!("before: {e}"))?;
    let fa = find_func(after, func).map_err(|e| format!("after the transformation: {e}"))?;
    let sig = |m: &Module, f| {
        let d = m.func(f);
        let args: Vec<String> = d.args.iter().map(|&a| m.value_type(a).to_string()).collect();
        let res: Vec<String> = d.result_types.iter().map(ToString::to_string).collect();
        format!("({}) -> ({})", args.join(", "), res.join(", "))
    };
    let (sb, sa) = (sig(before, fb), sig(after, fa));
    if sb != sa {
        return Err(format!("@{func} changed its signature: {sb} before, {sa} after"));
    }
    let inputs = random_inputs(before, func, seed).map_err(|e| format!("random inputs: {e}"))?;
    let want = Interpreter::new(before)
        .run_id(fb, inputs.clone())
        .map_err(|e| format!("running @{func} before the transformation failed: {e}"))?;
    let got = Interpreter::new(after)
        .run_id(fa, inputs)
        .map_err(|e| format!("running @{func} after the transformation failed: {e}"))?;
    for (i, (w, g)) in want.iter().zip(&got).enumerate() {
        let ty = &before.func(fb).result_types[i];
        compare_values(w, g, tol)
            .map_err(|e| format!("@{func} (seed {seed}), result {i} ({ty}): {e}"))?;
    }
    Ok(())
}

/// Compares `after` against the reference `before` within `tol` (see the module docs); `Err`
/// describes the worst element.
pub fn compare_values(before: &Value, after: &Value, tol: Tolerance) -> Result<(), String> {
    if before.shape() != after.shape() {
        return Err(format!("shape {:?} before, {:?} after", before.shape(), after.shape()));
    }
    if before.is_float() != after.is_float() {
        return Err(format!("{before} before, {after} after"));
    }
    let (b, a) = (before.to_f64_vec(), after.to_f64_vec());
    let mut bad = 0usize;
    // (excess factor, flat index) of the worst mismatch; largest absolute and relative errors.
    let mut worst: Option<(f64, usize)> = None;
    let (mut max_abs, mut max_rel) = (0.0f64, 0.0f64);
    for (i, (&x, &y)) in b.iter().zip(&a).enumerate() {
        let same = x == y || (x.is_nan() && y.is_nan());
        if same {
            continue;
        }
        let abs = (y - x).abs();
        let rel = if x != 0.0 { abs / x.abs() } else { f64::INFINITY };
        max_abs = max_abs.max(abs);
        max_rel = max_rel.max(rel);
        let allowed = tol.atol + tol.rtol * x.abs();
        // NaN against a number, or infinities of different sign, are never within tolerance.
        if abs.is_nan() || abs > allowed || abs.is_infinite() {
            bad += 1;
            let excess = if allowed > 0.0 { abs / allowed } else { f64::INFINITY };
            let excess = if excess.is_nan() { f64::INFINITY } else { excess };
            if worst.is_none_or(|(e, _)| excess > e) {
                worst = Some((excess, i));
            }
        }
    }
    let Some((_, i)) = worst else { return Ok(()) };
    let index = unravel(i, before.shape());
    let (x, y) = (b[i], a[i]);
    let mut msg = String::new();
    let _ = write!(
        msg,
        "{bad} of {} elements differ beyond rtol {:e}, atol {:e}; worst at {index:?}: before {x}, \
         after {y} (abs err {:e}, rel err {:e}); largest abs err {max_abs:e}, rel err {max_rel:e}",
        b.len(),
        tol.rtol,
        tol.atol,
        (y - x).abs(),
        if x != 0.0 { (y - x).abs() / x.abs() } else { f64::INFINITY },
    );
    Err(msg)
}

/// The multi-index of flat position `flat` in a row-major `shape`.
fn unravel(mut flat: usize, shape: &[usize]) -> Vec<usize> {
    let mut index = vec![0; shape.len()];
    for (slot, &d) in index.iter_mut().zip(shape).rev() {
        if d > 0 {
            *slot = flat % d;
            flat /= d;
        }
    }
    index
}

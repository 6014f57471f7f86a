//! Evaluation of ops on tensors known at import time. Exporters compute shapes at run time
//! (`Shape → Gather → Unsqueeze → Concat → Reshape`) and build masks and scalars from constants;
//! fbc's shapes are static, so those subgraphs are evaluated here and never reach the IR.
//! Values are computed in f64 by the reference kernels of `fbc_runtime::reference` (the
//! semantics the interpreter gives the same ops) and rounded to the result's ONNX type.

/// Row-major strides of a shape.
pub use fbc_runtime::reference::contiguous_strides as strides;
use fbc_runtime::reference::{self as r, Tensor};

use crate::host::{numel, DType, Data, HostTensor, MAX_FOLDED_ELEMS};

/// NumPy broadcasting of two shapes.
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> Result<Vec<usize>, String> {
    r::broadcast_shapes(a, b).map_err(|e| e.to_string())
}

/// Refuses a folded result of `shape` that would be too large to hold.
fn check_size(shape: &[usize]) -> Result<(), String> {
    let n = numel(shape)?;
    if n > MAX_FOLDED_ELEMS {
        return Err(format!("a constant of {n} elements is too large to fold"));
    }
    Ok(())
}

/// `t`'s values as a reference tensor in f64.
fn to_ref(t: &HostTensor) -> Result<Tensor<f64>, String> {
    Tensor::new(t.shape.clone(), (0..t.numel()).map(|i| t.get(i)).collect())
        .map_err(|e| e.to_string())
}

/// A reference kernel's f64 result as a tensor of `dtype`.
fn from_ref(dtype: DType, t: r::Result<Tensor<f64>>) -> Result<HostTensor, String> {
    let t = t.map_err(|e| e.to_string())?;
    Ok(HostTensor::from_f64(dtype, t.shape().to_vec(), t.data().iter().copied()))
}

/// A tensor of `shape` whose element at each index is `src`'s element at `f(index)` (a flat
/// index into `src`): the gathers the reference kernels have no form for (strided slices,
/// `Gather` of known values).
pub fn gather_by(
    src: &HostTensor,
    shape: Vec<usize>,
    f: impl Fn(&[usize]) -> usize,
) -> Result<HostTensor, String> {
    check_size(&shape)?;
    let flat = Tensor::from_fn(&shape, f).map_err(|e| e.to_string())?.into_data();
    let data = match &src.data {
        Data::F32(v) => Data::F32(flat.iter().map(|&i| v[i]).collect()),
        Data::F64(v) => Data::F64(flat.iter().map(|&i| v[i]).collect()),
        Data::I64(v) => Data::I64(flat.iter().map(|&i| v[i]).collect()),
    };
    Ok(HostTensor { dtype: src.dtype, shape, data })
}

/// `t` broadcast to `shape`.
pub fn broadcast_to(t: &HostTensor, shape: &[usize]) -> Result<HostTensor, String> {
    check_size(shape)?;
    from_ref(t.dtype, r::broadcast(&to_ref(t)?, shape))
}

/// An elementwise op on broadcast operands, computed in f64; the result has type `dtype`.
pub fn elementwise(
    xs: &[&HostTensor],
    dtype: DType,
    f: impl Fn(&[f64]) -> f64,
) -> Result<HostTensor, String> {
    let mut shape: Vec<usize> = Vec::new();
    for x in xs {
        shape = broadcast_shapes(&shape, &x.shape)?;
    }
    check_size(&shape)?;
    let full = xs
        .iter()
        .map(|x| r::broadcast(&to_ref(x)?, &shape).map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    let mut args = vec![0.0; xs.len()];
    let vals = (0..numel(&shape)?).map(|i| {
        for (a, x) in args.iter_mut().zip(&full) {
            *a = x.data()[i];
        }
        f(&args)
    });
    Ok(HostTensor::from_f64(dtype, shape.clone(), vals))
}

/// `t` with its dimensions permuted (`out.shape[i] = t.shape[perm[i]]`).
pub fn transpose(t: &HostTensor, perm: &[usize]) -> Result<HostTensor, String> {
    from_ref(t.dtype, r::transpose(&to_ref(t)?, perm))
}

/// `t[start[d] + i * step[d]]` along every axis, `shape` elements each.
pub fn strided_slice(
    t: &HostTensor,
    start: &[i64],
    step: &[i64],
    shape: Vec<usize>,
) -> Result<HostTensor, String> {
    if step.iter().all(|&s| s == 1) {
        let lo: Vec<usize> = start.iter().map(|&s| s as usize).collect();
        let hi: Vec<usize> = lo.iter().zip(&shape).map(|(&s, &n)| s + n).collect();
        return from_ref(t.dtype, r::slice(&to_ref(t)?, &lo, &hi));
    }
    let st = strides(&t.shape);
    gather_by(t, shape, |i| {
        i.iter().enumerate().map(|(d, &x)| (start[d] + x as i64 * step[d]) as usize * st[d]).sum()
    })
}

/// Concatenation along `axis`.
pub fn concat(xs: &[&HostTensor], axis: usize) -> Result<HostTensor, String> {
    let first = xs.first().ok_or("Concat of nothing")?;
    let ts = xs.iter().map(|x| to_ref(x)).collect::<Result<Vec<_>, _>>()?;
    let refs: Vec<&Tensor<f64>> = ts.iter().collect();
    from_ref(first.dtype, r::concat(&refs, axis as i64))
}

/// Which reduction [`reduce`] computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reduction {
    Sum,
    Mean,
    Max,
}

/// A reduction of `t` over `axes`, kept with size 1 when `keep`.
pub fn reduce(
    t: &HostTensor,
    kind: Reduction,
    axes: &[usize],
    keep: bool,
) -> Result<HostTensor, String> {
    let x = to_ref(t)?;
    let axes: Vec<i64> = axes.iter().map(|&a| a as i64).collect();
    let out = match kind {
        Reduction::Sum => r::reduce_sum(&x, &axes, keep),
        Reduction::Mean => r::reduce_mean(&x, &axes, keep),
        // The maximum of booleans over no element is false, not the -inf the float identity
        // would round to (true).
        Reduction::Max if t.dtype == DType::Bool => {
            r::reduce_max(&x, &axes, keep).map(|m| m.map(|v| v.max(0.0)))
        }
        Reduction::Max => r::reduce_max(&x, &axes, keep),
    };
    from_ref(t.dtype, out)
}

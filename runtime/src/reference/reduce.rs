//! Reductions over a set of axes, and [`reduce_to_shape`], the adjoint of broadcasting.
//!
//! All of them walk the input once in row-major order and accumulate into the output element
//! that the input element maps to, so the summation order is fixed (row-major over the reduced
//! elements) and the results are deterministic.

use super::elementwise::max1;
use super::error::{KernelError, Result};
use super::layout::{axes_mask, broadcast_strides, Offsets};
use super::scalar::Real;
use super::tensor::{broadcast_shapes_named, Tensor};

/// `tensor.reduce_sum`: the sum over `axes`.
///
/// `axes` may be negative (counting from the end) and must be distinct; an empty list reduces
/// nothing (NumPy's `axis=()`), and reducing every axis gives a rank-0 tensor. With `keepdim`
/// the reduced axes stay as extent 1, otherwise they are removed. The sum of no elements is 0.
pub fn reduce_sum<T: Real>(x: &Tensor<T>, axes: &[i64], keepdim: bool) -> Result<Tensor<T>> {
    reduce("reduce_sum", x, axes, keepdim, T::zero(), |acc, v| acc + v)
}

/// `tensor.reduce_max`: the maximum over `axes` (same axis rules as [`reduce_sum`]); NaN if any
/// reduced element is NaN; the maximum of no elements is `-inf`.
pub fn reduce_max<T: Real>(x: &Tensor<T>, axes: &[i64], keepdim: bool) -> Result<Tensor<T>> {
    reduce("reduce_max", x, axes, keepdim, T::neg_infinity(), max1)
}

/// `tensor.reduce_mean`: [`reduce_sum`] divided by the number of reduced elements (the product of
/// the reduced extents); the mean of no elements is NaN (0/0).
pub fn reduce_mean<T: Real>(x: &Tensor<T>, axes: &[i64], keepdim: bool) -> Result<Tensor<T>> {
    let mask = axes_mask("reduce_mean", axes, x.rank())?;
    let count: usize = x.shape().iter().zip(&mask).filter(|(_, &m)| m).map(|(d, _)| d).product();
    let sum = reduce("reduce_mean", x, axes, keepdim, T::zero(), |acc, v| acc + v)?;
    let count = T::lit(count as f64);
    Ok(sum.map(|s| s / count))
}

/// The shape of a reduction's result: with `keepdim` the reduced axes become 1, without they are
/// dropped.
pub(crate) fn reduced_shape(shape: &[usize], mask: &[bool], keepdim: bool) -> Vec<usize> {
    shape
        .iter()
        .zip(mask)
        .filter_map(|(&d, &m)| match (m, keepdim) {
            (false, _) => Some(d),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect()
}

fn reduce<T: Real>(
    op: &'static str,
    x: &Tensor<T>,
    axes: &[i64],
    keepdim: bool,
    init: T,
    f: impl Fn(T, T) -> T,
) -> Result<Tensor<T>> {
    let mask = axes_mask(op, axes, x.rank())?;
    let kept = reduced_shape(x.shape(), &mask, true);
    Ok(accumulate(x, &kept, init, f).reshaped(reduced_shape(x.shape(), &mask, keepdim)))
}

/// Folds every element of `x` into the element of a tensor of shape `target` (same rank as `x`,
/// each extent equal to `x`'s or 1) that it broadcasts from.
fn accumulate<T: Real>(
    x: &Tensor<T>,
    target: &[usize],
    init: T,
    f: impl Fn(T, T) -> T,
) -> Tensor<T> {
    let n: usize = target.iter().product();
    let mut out = vec![init; n];
    let strides = broadcast_strides(target, x.shape());
    for (o, &v) in Offsets::new(x.shape(), &strides, 0).zip(x.data()) {
        out[o] = f(out[o], v);
    }
    Tensor::from_parts(target.to_vec(), out)
}

impl<T: Copy> Tensor<T> {
    /// The same data under a shape with the same element count (checked by the caller).
    pub(crate) fn reshaped(self, shape: Vec<usize>) -> Self {
        Tensor::from_parts(shape, self.into_data())
    }
}

/// The gradient of broadcasting: sums `x` down to `shape`, where `shape` broadcasts to
/// `x.shape()` (NumPy rules). Leading axes that `shape` lacks are summed away, and axes where
/// `shape` has 1 but `x` does not are summed with the extent kept as 1. If `y =
/// broadcast(a, x.shape())` then `reduce_to_shape(dy, a.shape())` is `da`. Errors when `shape`
/// does not broadcast to `x.shape()`.
pub fn reduce_to_shape<T: Real>(x: &Tensor<T>, shape: &[usize]) -> Result<Tensor<T>> {
    const OP: &str = "reduce_to_shape";
    let fits = shape.len() <= x.rank()
        && broadcast_shapes_named(OP, shape, x.shape()).is_ok_and(|s| s == x.shape());
    if !fits {
        return Err(KernelError::shape(
            OP,
            format!("shape {shape:?} does not broadcast to {:?}", x.shape()),
        ));
    }
    let lead = x.rank() - shape.len();
    let mut aligned = vec![1; lead];
    aligned.extend_from_slice(shape);
    Ok(accumulate(x, &aligned, T::zero(), |acc, v| acc + v).reshaped(shape.to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// x[i, j, k] = 12 i + 4 j + k over [2, 3, 4].
    fn iota() -> Tensor<f64> {
        Tensor::from_fn(&[2, 3, 4], |i| (12 * i[0] + 4 * i[1] + i[2]) as f64).unwrap()
    }

    #[test]
    fn sums_over_single_and_multiple_axes() {
        let x = Tensor::new(vec![2, 3], vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
        assert_eq!(reduce_sum(&x, &[0], false).unwrap().data(), &[5.0, 7.0, 9.0]);
        let r = reduce_sum(&x, &[-1], true).unwrap();
        assert_eq!((r.shape(), r.data()), (&[2usize, 1][..], &[6.0f32, 15.0][..]));
        let all = reduce_sum(&x, &[0, 1], false).unwrap();
        assert_eq!((all.rank(), all.data()), (0, &[21.0f32][..]));
        assert_eq!(reduce_sum(&x, &[], false).unwrap(), x);

        // Σ_{i,k} (12 i + 4 j + k) = 48 + 32 j + 12.
        let s = reduce_sum(&iota(), &[0, 2], true).unwrap();
        assert_eq!((s.shape(), s.data()), (&[1usize, 3, 1][..], &[60.0, 92.0, 124.0][..]));
        let s = reduce_sum(&iota(), &[2, -3], false).unwrap();
        assert_eq!((s.shape(), s.data()), (&[3usize][..], &[60.0, 92.0, 124.0][..]));
    }

    #[test]
    fn max_and_mean() {
        let m = reduce_max(&iota(), &[1], false).unwrap();
        assert_eq!(m.shape(), &[2, 4]);
        assert_eq!(m.data(), &[8.0, 9.0, 10.0, 11.0, 20.0, 21.0, 22.0, 23.0]);
        let m = reduce_max(&iota(), &[-1, 0], true).unwrap();
        assert_eq!((m.shape(), m.data()), (&[1usize, 3, 1][..], &[15.0, 19.0, 23.0][..]));
        let mean = reduce_mean(&iota(), &[-1, -3], false).unwrap();
        assert_eq!(mean.data(), &[7.5, 11.5, 15.5]);
        let x = Tensor::from_vec(vec![-3.0f32, f32::NAN, 1.0]);
        assert!(reduce_max(&x, &[0], false).unwrap().data()[0].is_nan());
    }

    #[test]
    fn empty_reductions_use_identities() {
        let e = Tensor::<f64>::zeros(&[2, 0]).unwrap();
        assert_eq!(reduce_sum(&e, &[1], false).unwrap().data(), &[0.0, 0.0]);
        assert_eq!(reduce_max(&e, &[1], false).unwrap().data(), &[f64::NEG_INFINITY; 2]);
        assert!(reduce_mean(&e, &[1], false).unwrap().data()[0].is_nan());
        assert_eq!(reduce_sum(&e, &[0], true).unwrap().shape(), &[1, 0]);
    }

    #[test]
    fn bad_axes_are_errors() {
        let x = iota();
        assert_eq!(
            reduce_sum(&x, &[3], false),
            Err(KernelError::Axis { op: "reduce_sum", axis: 3, rank: 3 })
        );
        assert!(matches!(reduce_max(&x, &[-4], false), Err(KernelError::Axis { .. })));
        assert!(matches!(reduce_mean(&x, &[0, -3], false), Err(KernelError::DuplicateAxis { .. })));
        assert!(reduce_sum(&Tensor::scalar(1.0f32), &[0], false).is_err());
    }

    #[test]
    fn reduce_to_shape_sums_broadcast_axes() {
        let x = iota();
        let r = reduce_to_shape(&x, &[3, 1]).unwrap();
        // Σ_{i,k} over x = 60 + 32 j, kept as [3, 1].
        assert_eq!((r.shape(), r.data()), (&[3usize, 1][..], &[60.0, 92.0, 124.0][..]));
        let r = reduce_to_shape(&x, &[4]).unwrap();
        // Σ_{i,j} (12 i + 4 j + k) = 36 + 24 + 6 k.
        assert_eq!(r.data(), &[60.0, 66.0, 72.0, 78.0]);
        let r = reduce_to_shape(&x, &[]).unwrap();
        assert_eq!(r.data(), &[(0..24).sum::<i32>() as f64]);
        assert_eq!(reduce_to_shape(&x, &[2, 3, 4]).unwrap(), x);
        assert!(reduce_to_shape(&x, &[2]).is_err());
        assert!(reduce_to_shape(&x, &[1, 2, 3, 4]).is_err());
    }
}

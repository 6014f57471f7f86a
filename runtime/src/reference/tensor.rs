//! `Tensor<T>`: a dense, row-major, owned n-dimensional array, and NumPy broadcasting.
//!
//! Invariant: `data.len()` is the product of `shape` (1 for rank 0), and that product — indeed
//! the product of the shape's non-zero extents — fits in `usize`. Every constructor checks it, so
//! kernels index without re-checking. The element type is a parameter: `Tensor<f32>` (the
//! default) and `Tensor<f64>` for float data (see [`Real`]), `Tensor<i32>` for ids and labels.
//! Shape-only kernels (reshape, transpose, slice, ...) work for any `T: Copy`.

use num_traits::Zero;

use super::error::{KernelError, Result};
use super::layout::{broadcast_strides, checked_alloc, checked_numel, contiguous_strides, Offsets};
use super::scalar::Real;

/// A dense row-major tensor with element type `T` (default `f32`).
#[derive(Debug, Clone, PartialEq)]
pub struct Tensor<T = f32> {
    shape: Vec<usize>,
    data: Vec<T>,
}

impl<T> Tensor<T> {
    /// The extents of the axes, outermost first (empty for rank 0).
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The number of axes.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// The number of elements (1 for rank 0).
    pub fn numel(&self) -> usize {
        self.data.len()
    }

    /// Row-major strides in elements: `strides()[k]` is the flat distance between neighbours
    /// along axis `k`.
    pub fn strides(&self) -> Vec<usize> {
        contiguous_strides(&self.shape)
    }

    /// The elements in row-major order.
    pub fn data(&self) -> &[T] {
        &self.data
    }

    /// The elements in row-major order, writable (the shape cannot change through this).
    pub fn data_mut(&mut self) -> &mut [T] {
        &mut self.data
    }

    /// The element buffer, consuming the tensor.
    pub fn into_data(self) -> Vec<T> {
        self.data
    }
}

impl<T: Copy> Tensor<T> {
    /// A tensor of shape `shape` holding `data` in row-major order; errors when the lengths
    /// disagree.
    pub fn new(shape: impl Into<Vec<usize>>, data: Vec<T>) -> Result<Self> {
        let shape = shape.into();
        let expected = checked_numel("tensor", &shape)?;
        if data.len() != expected {
            return Err(KernelError::DataLength { op: "tensor", shape, len: data.len(), expected });
        }
        Ok(Tensor { shape, data })
    }

    /// Wraps parts whose lengths the calling kernel has already made consistent.
    pub(crate) fn from_parts(shape: Vec<usize>, data: Vec<T>) -> Self {
        debug_assert_eq!(shape.iter().product::<usize>(), data.len());
        Tensor { shape, data }
    }

    /// A rank-0 tensor holding `value`.
    pub fn scalar(value: T) -> Self {
        Tensor { shape: Vec::new(), data: vec![value] }
    }

    /// A rank-1 tensor holding `data`.
    pub fn from_vec(data: Vec<T>) -> Self {
        Tensor { shape: vec![data.len()], data }
    }

    /// A tensor of shape `shape` with every element `value` (`tensor.constant`).
    pub fn full(shape: &[usize], value: T) -> Result<Self> {
        let n = checked_alloc::<T>("full", shape)?;
        Ok(Tensor { shape: shape.to_vec(), data: vec![value; n] })
    }

    /// A tensor of shape `shape` whose element at multi-index `i` is `f(i)`; `f` is called in
    /// row-major order.
    pub fn from_fn(shape: &[usize], mut f: impl FnMut(&[usize]) -> T) -> Result<Self> {
        let n = checked_alloc::<T>("from_fn", shape)?;
        let mut data = Vec::with_capacity(n);
        let mut index = vec![0usize; shape.len()];
        for _ in 0..n {
            data.push(f(&index));
            for axis in (0..shape.len()).rev() {
                index[axis] += 1;
                if index[axis] < shape[axis] {
                    break;
                }
                index[axis] = 0;
            }
        }
        Ok(Tensor { shape: shape.to_vec(), data })
    }

    /// The element at multi-index `index`; errors when the index has the wrong length or
    /// exceeds an extent.
    pub fn get(&self, index: &[usize]) -> Result<T> {
        if index.len() != self.shape.len() || index.iter().zip(&self.shape).any(|(i, d)| i >= d) {
            return Err(KernelError::Index {
                op: "get",
                index: index.to_vec(),
                shape: self.shape.clone(),
            });
        }
        let flat: usize = index.iter().zip(self.strides()).map(|(i, s)| i * s).sum();
        Ok(self.data[flat])
    }

    /// `f` applied to every element; same shape.
    pub fn map<U: Copy>(&self, f: impl FnMut(T) -> U) -> Tensor<U> {
        Tensor { shape: self.shape.clone(), data: self.data.iter().copied().map(f).collect() }
    }

    /// `f` applied pairwise after broadcasting both operands to
    /// [`broadcast_shapes`]`(self.shape, other.shape)`.
    pub fn zip<U: Copy, V: Copy>(
        &self,
        other: &Tensor<U>,
        f: impl FnMut(T, U) -> V,
    ) -> Result<Tensor<V>> {
        zip_with("zip", self, other, f)
    }

    /// This tensor broadcast (NumPy rules) to `shape`: `shape` must have at least this rank, and
    /// each of this tensor's extents, aligned to the right, must equal the target extent or be 1.
    pub fn broadcast_to(&self, shape: &[usize]) -> Result<Self> {
        broadcast_to_named("broadcast", self, shape)
    }
}

impl<T: Copy + Zero> Tensor<T> {
    /// A tensor of shape `shape` filled with zeros.
    pub fn zeros(shape: &[usize]) -> Result<Self> {
        Tensor::full(shape, T::zero())
    }
}

impl<T: Real> Tensor<T> {
    /// The same values in another float type (`f32` to `f64` is exact; `f64` to `f32` rounds to
    /// nearest).
    pub fn cast<U: Real>(&self) -> Tensor<U> {
        self.map(|v| U::lit(v.as_f64()))
    }
}

/// The NumPy broadcast of two shapes: align them to the right, pad the shorter with 1s, and in
/// each axis the extents must be equal or one of them 1 (the result takes the other). Extents of 0
/// broadcast like any other (so `[0]` with `[1]` gives `[0]`).
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    broadcast_shapes_named("broadcast", a, b)
}

pub(crate) fn broadcast_shapes_named(
    op: &'static str,
    a: &[usize],
    b: &[usize],
) -> Result<Vec<usize>> {
    let rank = a.len().max(b.len());
    let mut out = Vec::with_capacity(rank);
    for k in 0..rank {
        let da = if k + a.len() >= rank { a[k + a.len() - rank] } else { 1 };
        let db = if k + b.len() >= rank { b[k + b.len() - rank] } else { 1 };
        out.push(match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => return Err(KernelError::Broadcast { op, lhs: a.to_vec(), rhs: b.to_vec() }),
        });
    }
    checked_numel(op, &out)?;
    Ok(out)
}

pub(crate) fn broadcast_to_named<T: Copy>(
    op: &'static str,
    x: &Tensor<T>,
    shape: &[usize],
) -> Result<Tensor<T>> {
    let fits = shape.len() >= x.rank()
        && x.shape.iter().rev().zip(shape.iter().rev()).all(|(&d, &t)| d == t || d == 1);
    if !fits {
        return Err(KernelError::Broadcast { op, lhs: x.shape.clone(), rhs: shape.to_vec() });
    }
    checked_numel(op, shape)?;
    let strides = broadcast_strides(&x.shape, shape);
    let data = Offsets::new(shape, &strides, 0).map(|o| x.data[o]).collect();
    Ok(Tensor { shape: shape.to_vec(), data })
}

/// `f` applied pairwise to broadcast operands; errors name `op`.
pub(crate) fn zip_with<T: Copy, U: Copy, V: Copy>(
    op: &'static str,
    a: &Tensor<T>,
    b: &Tensor<U>,
    mut f: impl FnMut(T, U) -> V,
) -> Result<Tensor<V>> {
    if a.shape == b.shape {
        let data = a.data.iter().zip(&b.data).map(|(&x, &y)| f(x, y)).collect();
        return Ok(Tensor { shape: a.shape.clone(), data });
    }
    let shape = broadcast_shapes_named(op, &a.shape, &b.shape)?;
    let sa = broadcast_strides(&a.shape, &shape);
    let sb = broadcast_strides(&b.shape, &shape);
    let data = Offsets::new(&shape, &sa, 0)
        .zip(Offsets::new(&shape, &sb, 0))
        .map(|(i, j)| f(a.data[i], b.data[j]))
        .collect();
    Ok(Tensor { shape, data })
}

/// Errors unless `a` and `b` have identical shapes (for gradient helpers, which never broadcast).
pub(crate) fn same_shape<T, U>(op: &'static str, a: &Tensor<T>, b: &Tensor<U>) -> Result<()> {
    if a.shape == b.shape {
        Ok(())
    } else {
        Err(KernelError::shape(
            op,
            format!("operands must have the same shape, got {:?} and {:?}", a.shape, b.shape),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constructors_check_lengths() {
        let t = Tensor::new(vec![2, 3], vec![0, 1, 2, 3, 4, 5]).unwrap();
        assert_eq!(t.numel(), 6);
        assert_eq!(t.strides(), vec![3, 1]);
        assert_eq!(t.get(&[1, 2]), Ok(5));
        assert!(t.get(&[2, 0]).is_err());
        assert!(t.get(&[1]).is_err());
        assert_eq!(
            Tensor::new(vec![2, 2], vec![1.0f32; 3]),
            Err(KernelError::DataLength { op: "tensor", shape: vec![2, 2], len: 3, expected: 4 })
        );
        assert!(Tensor::<f32>::zeros(&[usize::MAX, 3]).is_err());
        let s = Tensor::scalar(2.5f64);
        assert_eq!((s.rank(), s.numel(), s.get(&[])), (0, 1, Ok(2.5)));
        assert_eq!(Tensor::new(vec![], vec![1i32]).unwrap(), Tensor::scalar(1));
        assert!(Tensor::new(vec![], Vec::<i32>::new()).is_err());
        let e = Tensor::<f32>::zeros(&[2, 0, 3]).unwrap();
        assert_eq!((e.numel(), e.shape()), (0, &[2usize, 0, 3][..]));
    }

    #[test]
    fn from_fn_walks_row_major() {
        let t = Tensor::from_fn(&[2, 3], |i| (10 * i[0] + i[1]) as i32).unwrap();
        assert_eq!(t.data(), &[0, 1, 2, 10, 11, 12]);
        assert_eq!(Tensor::from_fn(&[], |_| 7).unwrap().data(), &[7]);
    }

    #[test]
    fn broadcasting_follows_numpy() {
        assert_eq!(broadcast_shapes(&[3, 1], &[1, 4]), Ok(vec![3, 4]));
        assert_eq!(broadcast_shapes(&[2, 1, 3], &[4, 1]), Ok(vec![2, 4, 3]));
        assert_eq!(broadcast_shapes(&[], &[2, 2]), Ok(vec![2, 2]));
        assert_eq!(broadcast_shapes(&[0], &[1]), Ok(vec![0]));
        assert!(broadcast_shapes(&[3], &[4]).is_err());
        assert!(broadcast_shapes(&[2, 3], &[3, 3]).is_err());

        let a = Tensor::new(vec![3, 1], vec![0, 10, 20]).unwrap();
        let b = Tensor::new(vec![1, 4], vec![1, 2, 3, 4]).unwrap();
        let c = a.zip(&b, |x, y| x + y).unwrap();
        assert_eq!(c.shape(), &[3, 4]);
        assert_eq!(c.data(), &[1, 2, 3, 4, 11, 12, 13, 14, 21, 22, 23, 24]);

        let r = Tensor::from_vec(vec![1, 2]).broadcast_to(&[2, 2, 2]).unwrap();
        assert_eq!(r.data(), &[1, 2, 1, 2, 1, 2, 1, 2]);
        assert!(Tensor::from_vec(vec![1, 2]).broadcast_to(&[2, 3]).is_err());
        assert!(Tensor::from_vec(vec![1, 2]).broadcast_to(&[]).is_err());
        assert_eq!(Tensor::scalar(5).broadcast_to(&[2]).unwrap().data(), &[5, 5]);
    }

    #[test]
    fn cast_between_float_types() {
        let t = Tensor::from_vec(vec![0.1f64, 1.5]);
        assert_eq!(t.cast::<f32>().data(), &[0.1f32, 1.5]);
        assert_eq!(t.cast::<f32>().cast::<f64>().data()[1], 1.5);
    }
}

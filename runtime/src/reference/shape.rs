//! Data-movement kernels: reshape, transpose, broadcast, slice, concat, and the zero-padding
//! adjoint of slice.
//!
//! They move elements without arithmetic, so they work for every `T: Copy` — `Tensor<i32>` ids
//! as well as float data — and are exact.

use num_traits::Zero;

use super::error::{KernelError, Result};
use super::layout::{checked_numel, contiguous_strides, normalize_axis, split_at_axis, Offsets};
use super::tensor::{broadcast_to_named, Tensor};

/// `tensor.reshape`: the same elements in the same row-major order under `shape`, which must
/// hold exactly as many elements.
pub fn reshape<T: Copy>(x: &Tensor<T>, shape: &[usize]) -> Result<Tensor<T>> {
    let n = checked_numel("reshape", shape)?;
    if n != x.numel() {
        return Err(KernelError::shape(
            "reshape",
            format!(
                "cannot reshape {:?} ({} elements) to {shape:?} ({n} elements)",
                x.shape(),
                x.numel()
            ),
        ));
    }
    Ok(Tensor::from_parts(shape.to_vec(), x.data().to_vec()))
}

/// Errors unless `perm` is a permutation of `0..rank`.
fn check_permutation(op: &'static str, perm: &[usize], rank: usize) -> Result<()> {
    let mut seen = vec![false; rank];
    let ok = perm.len() == rank
        && perm.iter().all(|&p| p < rank && !std::mem::replace(&mut seen[p], true));
    if ok {
        Ok(())
    } else {
        Err(KernelError::Permutation { op, perm: perm.to_vec(), rank })
    }
}

/// `tensor.transpose`: axes reordered by `perm`, a permutation of `0..rank`:
/// `out.shape[k] = x.shape[perm[k]]` and `out[i] = x[j]` where `j[perm[k]] = i[k]`.
pub fn transpose<T: Copy>(x: &Tensor<T>, perm: &[usize]) -> Result<Tensor<T>> {
    check_permutation("transpose", perm, x.rank())?;
    let strides = x.strides();
    let shape: Vec<usize> = perm.iter().map(|&p| x.shape()[p]).collect();
    let read: Vec<usize> = perm.iter().map(|&p| strides[p]).collect();
    let data = Offsets::new(&shape, &read, 0).map(|o| x.data()[o]).collect();
    Ok(Tensor::from_parts(shape, data))
}

/// The permutation that undoes `perm`: `transpose(transpose(x, perm), inverse_permutation(perm))
/// == x`. Errors when `perm` is not a permutation.
pub fn inverse_permutation(perm: &[usize]) -> Result<Vec<usize>> {
    check_permutation("inverse_permutation", perm, perm.len())?;
    let mut inverse = vec![0; perm.len()];
    for (k, &p) in perm.iter().enumerate() {
        inverse[p] = k;
    }
    Ok(inverse)
}

/// `tensor.broadcast`: `x` broadcast to `shape` with NumPy rules (see [`Tensor::broadcast_to`]).
pub fn broadcast<T: Copy>(x: &Tensor<T>, shape: &[usize]) -> Result<Tensor<T>> {
    broadcast_to_named("broadcast", x, shape)
}

/// Errors unless `start` and `end` give one `start <= end <= extent` range per axis.
fn check_window(
    op: &'static str,
    shape: &[usize],
    start: &[usize],
    end: &[usize],
) -> Result<Vec<usize>> {
    if start.len() != shape.len() || end.len() != shape.len() {
        return Err(KernelError::shape(
            op,
            format!("start {start:?} and end {end:?} need one entry per axis of shape {shape:?}"),
        ));
    }
    (0..shape.len())
        .map(|k| {
            if start[k] <= end[k] && end[k] <= shape[k] {
                Ok(end[k] - start[k])
            } else {
                Err(KernelError::shape(
                    op,
                    format!(
                        "axis {k}: range {}..{} is not within 0..{}",
                        start[k], end[k], shape[k]
                    ),
                ))
            }
        })
        .collect()
}

/// `tensor.slice`: `x[start[0]..end[0], start[1]..end[1], ...]`, one half-open range per axis
/// with `0 <= start <= end <= extent` (no negative indices, no steps); the result's shape is
/// `end - start`.
pub fn slice<T: Copy>(x: &Tensor<T>, start: &[usize], end: &[usize]) -> Result<Tensor<T>> {
    let shape = check_window("slice", x.shape(), start, end)?;
    let strides = x.strides();
    let data = if shape.contains(&0) {
        Vec::new()
    } else {
        let base = start.iter().zip(&strides).map(|(s, st)| s * st).sum();
        Offsets::new(&shape, &strides, base).map(|o| x.data()[o]).collect()
    };
    Ok(Tensor::from_parts(shape, data))
}

/// The adjoint of [`slice`](fn@slice): a zero tensor of `input_shape` with `dy` written at
/// offset `start` (so `end = start + dy.shape()`). Errors when `dy` does not fit there.
pub fn slice_grad<T: Copy + Zero>(
    dy: &Tensor<T>,
    input_shape: &[usize],
    start: &[usize],
) -> Result<Tensor<T>> {
    const OP: &str = "slice_grad";
    if start.len() != input_shape.len() || dy.rank() != input_shape.len() {
        return Err(KernelError::shape(
            OP,
            format!(
                "dy {:?}, start {start:?} and input shape {input_shape:?} must have one \
                 entry per axis",
                dy.shape()
            ),
        ));
    }
    let end: Vec<usize> =
        start.iter().zip(dy.shape()).map(|(&s, &d)| s.saturating_add(d)).collect();
    check_window(OP, input_shape, start, &end)?;
    let mut out = Tensor::zeros(input_shape)?;
    paste(&mut out, dy, start);
    Ok(out)
}

/// Writes `src` over the window of `out` that has `src`'s shape and starts at `start` (one
/// entry per axis). The caller has checked that the window fits.
fn paste<T: Copy>(out: &mut Tensor<T>, src: &Tensor<T>, start: &[usize]) {
    if src.numel() == 0 {
        return;
    }
    let strides = contiguous_strides(out.shape());
    let base = start.iter().zip(&strides).map(|(s, st)| s * st).sum();
    let data = out.data_mut();
    for (o, &v) in Offsets::new(src.shape(), &strides, base).zip(src.data()) {
        data[o] = v;
    }
}

/// `tensor.update_slice`: `dest` with `update` written over it along `axis` (negative counts
/// from the end) from `offset` on. `update` must equal `dest` on every other axis; an offset
/// from which `update` does not fit (`offset < 0` or `offset + n > dest.shape[axis]`) is an
/// error, and nothing is written.
pub fn update_slice<T: Copy>(
    dest: &Tensor<T>,
    update: &Tensor<T>,
    axis: i64,
    offset: i64,
) -> Result<Tensor<T>> {
    const OP: &str = "update_slice";
    let axis = normalize_axis(OP, axis, dest.rank())?;
    let compatible = update.rank() == dest.rank()
        && (0..dest.rank()).all(|k| k == axis || update.shape()[k] == dest.shape()[k]);
    if !compatible {
        return Err(KernelError::shape(
            OP,
            format!(
                "update {:?} does not match dest {:?} on the axes other than {axis}",
                update.shape(),
                dest.shape()
            ),
        ));
    }
    let (n, size) = (update.shape()[axis], dest.shape()[axis]);
    let start =
        usize::try_from(offset).ok().filter(|&o| o.checked_add(n).is_some_and(|e| e <= size));
    let Some(start) = start else {
        return Err(KernelError::shape(
            OP,
            format!(
                "offset {offset} is out of range: {n} slices from it must fit in {size} along axis {axis}, so it must be from 0 to {}",
                size.saturating_sub(n)
            ),
        ));
    };
    let mut at = vec![0; dest.rank()];
    at[axis] = start;
    let mut out = dest.clone();
    paste(&mut out, update, &at);
    Ok(out)
}

/// `tensor.concat`: `xs` joined along `axis` (negative counts from the end). All inputs need the
/// same rank and the same extents on every other axis; at least one input is required.
pub fn concat<T: Copy>(xs: &[&Tensor<T>], axis: i64) -> Result<Tensor<T>> {
    const OP: &str = "concat";
    let Some(first) = xs.first() else {
        return Err(KernelError::shape(OP, "needs at least one input"));
    };
    let axis = normalize_axis(OP, axis, first.rank())?;
    let mut shape = first.shape().to_vec();
    shape[axis] = 0;
    for (i, x) in xs.iter().enumerate() {
        let compatible = x.rank() == first.rank()
            && (0..x.rank()).all(|k| k == axis || x.shape()[k] == first.shape()[k]);
        if !compatible {
            return Err(KernelError::shape(
                OP,
                format!(
                    "input {i} has shape {:?}, incompatible with input 0 {:?} along axis {axis}",
                    x.shape(),
                    first.shape()
                ),
            ));
        }
        shape[axis] = shape[axis]
            .checked_add(x.shape()[axis])
            .ok_or_else(|| KernelError::TooLarge { op: OP, shape: first.shape().to_vec() })?;
    }
    let n = checked_numel(OP, &shape)?;
    let (outer, _, inner) = split_at_axis(&shape, axis);
    let mut data = Vec::with_capacity(n);
    for o in 0..outer {
        for x in xs {
            let chunk = x.shape()[axis] * inner;
            data.extend_from_slice(&x.data()[o * chunk..(o + 1) * chunk]);
        }
    }
    Ok(Tensor::from_parts(shape, data))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iota(shape: &[usize]) -> Tensor<i32> {
        let mut n = 0;
        Tensor::from_fn(shape, |_| {
            n += 1;
            n - 1
        })
        .unwrap()
    }

    #[test]
    fn reshape_keeps_order() {
        let x = iota(&[2, 3]);
        let r = reshape(&x, &[3, 1, 2]).unwrap();
        assert_eq!((r.shape(), r.data()), (&[3usize, 1, 2][..], x.data()));
        assert!(reshape(&x, &[4]).is_err());
        assert_eq!(reshape(&Tensor::scalar(3), &[1, 1]).unwrap().data(), &[3]);
    }

    #[test]
    fn transpose_by_hand() {
        let x = iota(&[2, 3]);
        let t = transpose(&x, &[1, 0]).unwrap();
        assert_eq!((t.shape(), t.data()), (&[3usize, 2][..], &[0, 3, 1, 4, 2, 5][..]));
        // out.shape[k] = x.shape[perm[k]]: [2, 3, 4] under [2, 0, 1] is [4, 2, 3], and
        // out[k, i, j] = x[i, j, k] = 12 i + 4 j + k.
        let x = iota(&[2, 3, 4]);
        let t = transpose(&x, &[2, 0, 1]).unwrap();
        assert_eq!(t.shape(), &[4, 2, 3]);
        assert_eq!(&t.data()[..7], &[0, 4, 8, 12, 16, 20, 1]);
        assert_eq!(t.get(&[3, 1, 2]), Ok(23));
        let inv = inverse_permutation(&[2, 0, 1]).unwrap();
        assert_eq!(inv, vec![1, 2, 0]);
        assert_eq!(transpose(&t, &inv).unwrap(), x);
        for bad in [&[0, 0, 1][..], &[0, 1], &[0, 1, 3]] {
            assert!(matches!(transpose(&x, bad), Err(KernelError::Permutation { .. })));
        }
    }

    #[test]
    fn slice_and_its_adjoint() {
        let x = iota(&[3, 4]);
        let s = slice(&x, &[1, 1], &[3, 3]).unwrap();
        assert_eq!((s.shape(), s.data()), (&[2usize, 2][..], &[5, 6, 9, 10][..]));
        assert_eq!(slice(&x, &[3, 0], &[3, 4]).unwrap().shape(), &[0, 4]);
        assert!(slice(&x, &[2, 0], &[1, 4]).is_err());
        assert!(slice(&x, &[0, 0], &[3, 5]).is_err());
        assert!(slice(&x, &[0], &[3]).is_err());
        let g = slice_grad(&s, &[3, 4], &[1, 1]).unwrap();
        assert_eq!(g.data(), &[0, 0, 0, 0, 0, 5, 6, 0, 0, 9, 10, 0]);
        assert!(slice_grad(&s, &[3, 4], &[2, 1]).is_err());
        assert!(slice_grad(&s, &[3, 4], &[usize::MAX, 1]).is_err());
    }

    #[test]
    fn concat_along_axes() {
        let a = iota(&[2, 2]);
        let b = Tensor::new(vec![2, 1], vec![7, 8]).unwrap();
        let c = concat(&[&a, &b], -1).unwrap();
        assert_eq!((c.shape(), c.data()), (&[2usize, 3][..], &[0, 1, 7, 2, 3, 8][..]));
        let c = concat(&[&a, &a], 0).unwrap();
        assert_eq!(c.data(), &[0, 1, 2, 3, 0, 1, 2, 3]);
        assert!(concat(&[&a, &b], 0).is_err());
        assert!(concat::<i32>(&[], 0).is_err());
        assert!(concat(&[&a, &iota(&[4])], 0).is_err());
        assert!(matches!(concat(&[&a], 2), Err(KernelError::Axis { .. })));
    }

    #[test]
    fn broadcast_op() {
        let x = Tensor::new(vec![2, 1], vec![1.5f32, 2.5]).unwrap();
        assert_eq!(broadcast(&x, &[2, 2]).unwrap().data(), &[1.5, 1.5, 2.5, 2.5]);
        assert!(matches!(broadcast(&x, &[3, 2]), Err(KernelError::Broadcast { .. })));
    }
}

//! Index arithmetic shared by the kernels: row-major strides, broadcast strides, axis
//! normalisation and an odometer that walks a shape under arbitrary strides.
//!
//! Every kernel that reorders or broadcasts data does it by walking its *output* shape in
//! row-major order with [`Offsets`] and the input's (possibly zero or permuted) strides, so no
//! kernel materialises an intermediate index tensor.

use super::error::{KernelError, Result};

/// The number of elements of `shape`, or `TooLarge` when the product of its non-zero extents
/// overflows `usize`.
///
/// Ignoring zeros is deliberate: every tensor shape passes through here, so afterwards any
/// product of any subset of its extents (a stride, an outer or inner block size) fits as well.
pub(crate) fn checked_numel(op: &'static str, shape: &[usize]) -> Result<usize> {
    let nonzero = shape
        .iter()
        .filter(|&&d| d != 0)
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| KernelError::TooLarge { op, shape: shape.to_vec() })?;
    Ok(if shape.contains(&0) { 0 } else { nonzero })
}

/// [`checked_numel`] of a new buffer of `T`s, also checked against the memory limit
/// ([`crate::limits`]).
pub(crate) fn checked_alloc<T>(op: &'static str, shape: &[usize]) -> Result<usize> {
    let n = checked_numel(op, shape)?;
    let bytes = (n as u64).checked_mul(std::mem::size_of::<T>() as u64);
    crate::limits::check_bytes(format_args!("a tensor of shape {shape:?}"), bytes)
        .map_err(|e| KernelError::Memory { op, message: e.to_string() })?;
    Ok(n)
}

/// Row-major (C-order) strides of `shape`, in elements.
pub fn contiguous_strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![0; shape.len()];
    let mut acc = 1usize;
    for (stride, &dim) in strides.iter_mut().zip(shape).rev() {
        *stride = acc;
        acc = acc.saturating_mul(dim);
    }
    strides
}

/// The strides that read a contiguous tensor of shape `from` as if it had been broadcast to
/// `to`: leading (missing) axes and axes of extent 1 that `to` stretches get stride 0.
///
/// The caller guarantees that `from` broadcasts to `to`.
pub(crate) fn broadcast_strides(from: &[usize], to: &[usize]) -> Vec<usize> {
    let lead = to.len() - from.len();
    let own = contiguous_strides(from);
    (0..to.len())
        .map(|k| {
            if k < lead {
                0
            } else {
                let d = from[k - lead];
                if d == 1 && to[k] != 1 {
                    0
                } else {
                    own[k - lead]
                }
            }
        })
        .collect()
}

/// The multi-index of flat position `flat` in a row-major tensor of shape `shape`.
pub(crate) fn unravel(mut flat: usize, shape: &[usize]) -> Vec<usize> {
    let mut index = vec![0; shape.len()];
    for (slot, &dim) in index.iter_mut().zip(shape).rev() {
        if dim > 0 {
            *slot = flat % dim;
            flat /= dim;
        }
    }
    index
}

/// `axis` (which may count from the end, as `-1` for the last) resolved to `0..rank`.
pub fn normalize_axis(op: &'static str, axis: i64, rank: usize) -> Result<usize> {
    let r = i64::try_from(rank).unwrap_or(i64::MAX);
    let resolved = if axis < 0 { axis.checked_add(r) } else { Some(axis) };
    match resolved {
        Some(a) if (0..r).contains(&a) => Ok(a as usize),
        _ => Err(KernelError::Axis { op, axis, rank }),
    }
}

/// A mask of the axes listed in `axes` (each resolved as by [`normalize_axis`]); an axis listed
/// twice is an error.
pub(crate) fn axes_mask(op: &'static str, axes: &[i64], rank: usize) -> Result<Vec<bool>> {
    let mut mask = vec![false; rank];
    for &axis in axes {
        let a = normalize_axis(op, axis, rank)?;
        if std::mem::replace(&mut mask[a], true) {
            return Err(KernelError::DuplicateAxis { op, axis: a });
        }
    }
    Ok(mask)
}

/// `(outer, len, inner)` for `shape` split around `axis`: element `(o, i, j)` of the axis view
/// lives at flat offset `(o * len + i) * inner + j`.
pub(crate) fn split_at_axis(shape: &[usize], axis: usize) -> (usize, usize, usize) {
    let outer = shape[..axis].iter().product();
    let inner = shape[axis + 1..].iter().product();
    (outer, shape[axis], inner)
}

/// An odometer over a row-major index space that yields, for each index in order, the flat
/// offset `sum(index[k] * strides[k])`.
#[derive(Debug, Clone)]
pub(crate) struct Offsets {
    shape: Vec<usize>,
    strides: Vec<usize>,
    index: Vec<usize>,
    offset: usize,
    remaining: usize,
}

impl Offsets {
    /// Walks `shape` (whose element count the caller has checked) under `strides`, starting at
    /// `base`.
    pub(crate) fn new(shape: &[usize], strides: &[usize], base: usize) -> Self {
        debug_assert_eq!(shape.len(), strides.len());
        Offsets {
            shape: shape.to_vec(),
            strides: strides.to_vec(),
            index: vec![0; shape.len()],
            offset: base,
            remaining: shape.iter().product(),
        }
    }
}

impl Iterator for Offsets {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        if self.remaining == 0 {
            return None;
        }
        let current = self.offset;
        self.remaining -= 1;
        if self.remaining > 0 {
            for axis in (0..self.shape.len()).rev() {
                self.index[axis] += 1;
                self.offset += self.strides[axis];
                if self.index[axis] < self.shape[axis] {
                    break;
                }
                // Carry: the offset has advanced by exactly shape[axis] strides on this axis.
                self.offset -= self.strides[axis] * self.shape[axis];
                self.index[axis] = 0;
            }
        }
        Some(current)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl ExactSizeIterator for Offsets {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strides_and_offsets() {
        assert_eq!(contiguous_strides(&[2, 3, 4]), vec![12, 4, 1]);
        assert_eq!(contiguous_strides(&[]), Vec::<usize>::new());
        // A [3, 2] view of a row-major [2, 3] tensor, i.e. its transpose.
        let got: Vec<usize> = Offsets::new(&[3, 2], &[1, 3], 0).collect();
        assert_eq!(got, vec![0, 3, 1, 4, 2, 5]);
        assert_eq!(Offsets::new(&[], &[], 7).collect::<Vec<_>>(), vec![7]);
        assert_eq!(Offsets::new(&[2, 0], &[1, 1], 0).count(), 0);
        assert_eq!(broadcast_strides(&[3, 1], &[2, 3, 4]), vec![0, 1, 0]);
        assert_eq!(unravel(23, &[2, 3, 4]), vec![1, 2, 3]);
    }

    #[test]
    fn axes_resolve_and_reject() {
        assert_eq!(normalize_axis("t", -1, 3), Ok(2));
        assert_eq!(normalize_axis("t", 2, 3), Ok(2));
        assert!(normalize_axis("t", 3, 3).is_err());
        assert!(normalize_axis("t", -4, 3).is_err());
        assert!(normalize_axis("t", i64::MIN, 3).is_err());
        assert!(normalize_axis("t", 0, 0).is_err());
        assert_eq!(axes_mask("t", &[0, -1], 3), Ok(vec![true, false, true]));
        assert_eq!(
            axes_mask("t", &[1, -2], 3),
            Err(KernelError::DuplicateAxis { op: "t", axis: 1 })
        );
        assert_eq!(checked_numel("t", &[usize::MAX, 2]).ok(), None);
        assert_eq!(checked_numel("t", &[usize::MAX, 0]), Ok(0));
        assert_eq!(checked_numel("t", &[0, usize::MAX, 2]).ok(), None);
    }
}

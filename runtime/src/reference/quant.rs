//! `tensor.dequantize`: packed INT8/INT4 rows and their per-group scales as f32 values, decoded
//! row by row by the `.fbw` reader's own [`decode_row`] (one definition of the nibble order and
//! of `q · s`).

use super::error::{KernelError, Result};
use super::tensor::Tensor;
use crate::weights::quant::{decode_row, Quant};

const OP: &str = "dequantize";

/// The f32 values of `packed` (`[..., B]`, one byte per element as a value in `-128..=127`:
/// how the interpreter holds an `i8` tensor) with `scales` (`[..., ⌈cols/group⌉]`), stored as
/// `scheme` (`Int8` or `Int4`) in rows of `cols` values with one scale per `group` values.
pub fn dequantize(
    packed: &Tensor<i32>,
    scales: &Tensor<f32>,
    scheme: Quant,
    group: usize,
    cols: usize,
) -> Result<Tensor<f32>> {
    let shape_err = |message: String| KernelError::shape(OP, message);
    if !scheme.is_quantised() || group == 0 || cols == 0 {
        return Err(KernelError::Attribute {
            op: OP,
            message: format!("scheme {}, group {group}, cols {cols}", scheme.name()),
        });
    }
    let (Some((&bytes, lead)), Some((&groups, slead))) =
        (packed.shape().split_last(), scales.shape().split_last())
    else {
        return Err(shape_err("`packed` and `scales` must have rank ≥ 1".into()));
    };
    if bytes as u64 != scheme.row_bytes(cols as u64)
        || groups as u64 != scheme.groups(cols as u64, group as u64)
        || lead != slead
    {
        return Err(shape_err(format!(
            "{} rows of {cols} values in groups of {group} do not fit `packed` {:?} and \
             `scales` {:?}",
            scheme.name(),
            packed.shape(),
            scales.shape()
        )));
    }
    let mut out = Vec::with_capacity(packed.data().len() / bytes.max(1) * cols);
    let mut row = Vec::with_capacity(bytes);
    for (p, s) in packed.data().chunks(bytes.max(1)).zip(scales.data().chunks(groups.max(1))) {
        row.clear();
        for &b in p {
            let b = i8::try_from(b).map_err(|_| {
                KernelError::shape(OP, format!("packed value {b} is not a byte (-128..=127)"))
            })?;
            row.push(b as u8);
        }
        decode_row(scheme, &row, s, cols, group, &mut out);
    }
    let mut shape = lead.to_vec();
    shape.push(cols);
    Tensor::new(shape, out)
}

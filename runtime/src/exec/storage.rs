//! Storage contents and the host copies between tensors and storage, by layout.

use fbc_dialects::layout::Layout;
use fbc_dialects::memory::scalar::round_f16;
use fbc_dialects::memory::{check_storage, MemType, ScalarValue, StorageKind};
use fbc_ir::{ElemType, TensorType};

use crate::interp::budget::mem_elems;
use crate::interp::Value;
use crate::reference::Tensor;

/// The contents of one storage: `f32` or `i32` elements (an image: its texel array).
#[derive(Debug, Clone, PartialEq)]
pub enum MemData {
    /// `f32` storage (buffers and images; an `f16` image's values, each exact in `f16`).
    F32(Vec<f32>),
    /// `i32` buffers.
    I32(Vec<i32>),
    /// `i8` buffers (packed weights).
    I8(Vec<i8>),
}

impl MemData {
    /// Zero-filled storage of type `ty`; an error when it does not fit in memory's address space.
    pub fn zeroed(ty: MemType) -> Result<MemData, String> {
        // The host copy holds f32 (an f16 image's values too), i32 or i8 elements.
        let bytes = ty.value_elem().bytes();
        let n = crate::limits::check_elems(format_args!("storage {ty}"), mem_elems(&ty), bytes)?;
        Ok(match ty.value_elem() {
            ElemType::I32 => MemData::I32(vec![0; n]),
            ElemType::I8 => MemData::I8(vec![0; n]),
            _ => MemData::F32(vec![0.0; n]),
        })
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            MemData::F32(v) => v.len(),
            MemData::I32(v) => v.len(),
            MemData::I8(v) => v.len(),
        }
    }

    /// Whether it holds no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Elements `start..start + len`: the row tile of row-major (linear) contents; an error
    /// where the range is not inside them.
    pub fn range(&self, start: usize, len: usize) -> Result<MemData, String> {
        let end = start.checked_add(len).filter(|&e| e <= self.len()).ok_or_else(|| {
            format!(
                "elements {start}..{} are past the {} stored",
                start.saturating_add(len),
                self.len()
            )
        })?;
        Ok(match self {
            MemData::F32(v) => MemData::F32(v[start..end].to_vec()),
            MemData::I32(v) => MemData::I32(v[start..end].to_vec()),
            MemData::I8(v) => MemData::I8(v[start..end].to_vec()),
        })
    }

    /// Whether the contents can be storage of type `ty` (element type and count).
    pub fn fits(&self, ty: MemType) -> bool {
        let kind_ok = matches!(
            (self, ty.value_elem()),
            (MemData::F32(_), ElemType::F32)
                | (MemData::I32(_), ElemType::I32)
                | (MemData::I8(_), ElemType::I8)
        );
        kind_ok && self.len() as u64 == ty.elems()
    }

    /// Element `i` as a payload value.
    pub(crate) fn get(&self, i: usize) -> Option<ScalarValue> {
        match self {
            MemData::F32(v) => v.get(i).map(|&x| ScalarValue::F32(x)),
            MemData::I32(v) => v.get(i).map(|&x| ScalarValue::Int(i64::from(x))),
            MemData::I8(v) => v.get(i).map(|&x| ScalarValue::Int(i64::from(x))),
        }
    }
}

/// Where element `idx` (row-major over `shape`) of a tensor lives in storage `ty` under
/// `layout`: row-major for a linear buffer, else the texel array offset of its texel.
struct Placement {
    linear: bool,
    width: u64,
}

impl Placement {
    fn new(layout: &Layout, shape: &[u64], ty: MemType) -> Result<Placement, String> {
        let linear = matches!((layout, ty.storage), (Layout::Linear, StorageKind::Buffer { .. }));
        let width = match ty.storage {
            StorageKind::Image { width, .. } => width,
            StorageKind::Buffer { .. } => {
                layout.image_extent(shape).ok_or("the image extent overflows")?[0]
            }
        };
        Ok(Placement { linear, width })
    }

    fn offset(&self, layout: &Layout, shape: &[u64], flat: usize, idx: &[u64]) -> Option<usize> {
        if self.linear {
            return Some(flat);
        }
        let t = layout.texel_of(shape, idx)?;
        let o = t.y.checked_mul(self.width)?.checked_add(t.x)?.checked_mul(4)?.checked_add(t.c)?;
        usize::try_from(o).ok()
    }

    /// Calls `f(flat, idx, offset)` for each of the first `n` elements of a tensor of `shape`
    /// (every element), in row-major order, stopping at its first error.
    ///
    /// Seen as rows (every index but the last) of `w` columns, the offset of element
    /// `(row, j)` is the offset of `(row, 0)` plus that of `(0, j)` less that of `(0, 0)`: a
    /// linear image places the row and the column's texel apart, and an R-Tile
    /// (`RTile::texel_of`) takes the tile's origin and the texel's place in it from the row's
    /// indices and from the column's as two sums (the batch slice, the packed channel and the
    /// tile row from the first; the tile column, the block and the channel from the second).
    /// So one texel computation a row and a table of the columns give every offset; a row
    /// whose last element is not where that sum says (or whose first has no place) is placed
    /// element by element, as [`Placement::offset`] does for each.
    fn each(
        &self,
        layout: &Layout,
        shape: &[u64],
        n: usize,
        mut f: impl FnMut(usize, &[u64], Option<usize>) -> Result<(), String>,
    ) -> Result<(), String> {
        let mut idx = vec![0u64; shape.len()];
        let w = shape.last().map_or(1, |&d| usize::try_from(d).unwrap_or(usize::MAX));
        if self.linear || shape.is_empty() || w == 0 {
            for flat in 0..n {
                f(flat, &idx, self.offset(layout, shape, flat, &idx))?;
                next_index(&mut idx, shape);
            }
            return Ok(());
        }
        let last = shape.len() - 1;
        // Offsets of row 0's columns, relative to its first.
        let mut cols = Vec::with_capacity(w);
        let origin = self.offset(layout, shape, 0, &idx);
        for j in 0..w {
            idx[last] = j as u64;
            let o = self.offset(layout, shape, j, &idx);
            cols.push(origin.zip(o).and_then(|(a, b)| b.checked_sub(a)));
        }
        idx[last] = 0;
        let mut flat = 0;
        while flat < n {
            let base = self.offset(layout, shape, flat, &idx);
            let end = flat + w - 1;
            idx[last] = (w - 1) as u64;
            let at = |j: usize| base.zip(cols[j]).and_then(|(b, c)| b.checked_add(c));
            let by_sum = at(w - 1).is_some() && at(w - 1) == self.offset(layout, shape, end, &idx);
            idx[last] = 0;
            for j in 0..w {
                let o = if by_sum { at(j) } else { self.offset(layout, shape, flat, &idx) };
                f(flat, &idx, o)?;
                idx[last] = j as u64 + 1;
                flat += 1;
            }
            idx[last] = w as u64 - 1;
            next_index(&mut idx, shape);
        }
        Ok(())
    }
}

/// Steps a row-major multi-index over `shape`; false after the last one.
fn next_index(idx: &mut [u64], shape: &[u64]) -> bool {
    for k in (0..idx.len()).rev() {
        idx[k] += 1;
        if idx[k] < shape[k] {
            return true;
        }
        idx[k] = 0;
    }
    false
}

fn tensor_type(shape: &[u64], elem: ElemType) -> TensorType {
    TensorType::new(shape.to_vec(), elem)
}

/// Places tensor `t` (of shape `shape`) in new storage of type `ty` by `layout`; elements no
/// tensor element maps to are 0. Float tensors are stored as `f32` (an `F64` value, in the
/// interpreter's f64 mode, is rounded to nearest), and into an `f16` image rounded on to the
/// nearest `f16`; `i32` tensors as `i32`.
pub fn pack(layout: &Layout, shape: &[u64], t: &Value, ty: MemType) -> Result<MemData, String> {
    // An i8 tensor (packed weights) is held as i32 values, and placed in an i8 buffer.
    let elem = match (t.is_float(), ty.elem) {
        (true, _) => ElemType::F32,
        (false, ElemType::I8) => ElemType::I8,
        (false, _) => ElemType::I32,
    };
    check_storage(layout, &tensor_type(shape, elem), ty)?;
    if !t.shape().iter().map(|&d| d as u64).eq(shape.iter().copied()) {
        return Err(format!("the tensor is {t}, expected shape {shape:?}"));
    }
    let mut out = MemData::zeroed(ty)?;
    let place = Placement::new(layout, shape, ty)?;
    let n = t.numel();
    let half = ty.is_half();
    let misplaced = |idx: &[u64]| format!("element {idx:?} has no place in {ty} under {layout}");
    // The element of `d` at offset `o`, where there is one.
    fn at<T>(d: &mut [T], o: Option<usize>) -> Option<&mut T> {
        o.and_then(|o| d.get_mut(o))
    }
    match (t, &mut out) {
        (Value::F32(x), MemData::F32(d)) => {
            let x = x.data();
            place.each(layout, shape, n, |flat, idx, o| {
                let e = at(d, o).ok_or_else(|| misplaced(idx))?;
                *e = if half { round_f16(x[flat]) } else { x[flat] };
                Ok(())
            })?;
        }
        (Value::F64(x), MemData::F32(d)) => {
            let x = x.data();
            place.each(layout, shape, n, |flat, idx, o| {
                let v = x[flat] as f32;
                *at(d, o).ok_or_else(|| misplaced(idx))? = if half { round_f16(v) } else { v };
                Ok(())
            })?;
        }
        (Value::I32(x), MemData::I32(d)) => {
            let x = x.data();
            place.each(layout, shape, n, |flat, idx, o| {
                *at(d, o).ok_or_else(|| misplaced(idx))? = x[flat];
                Ok(())
            })?;
        }
        // The interpreter holds an i8 tensor's bytes as i32 values in range (`coerce`).
        (Value::I32(x), MemData::I8(d)) => {
            let x = x.data();
            place.each(layout, shape, n, |flat, idx, o| {
                let v = i8::try_from(x[flat]).map_err(|_| misplaced(idx))?;
                *at(d, o).ok_or_else(|| misplaced(idx))? = v;
                Ok(())
            })?;
        }
        _ if n > 0 => return Err(misplaced(&vec![0; shape.len()])),
        _ => {}
    }
    Ok(out)
}

/// The tensor of shape `shape` that storage `m` of type `ty` holds by `layout` (the inverse of
/// [`pack`]; padding is ignored): `Value::F32` or `Value::I32` as the storage is (`F32` for an
/// `f16` image).
pub fn unpack(layout: &Layout, shape: &[u64], m: &MemData, ty: MemType) -> Result<Value, String> {
    let elem = ty.value_elem();
    check_storage(layout, &tensor_type(shape, elem), ty)?;
    if !m.fits(ty) {
        return Err(format!("the storage holds {} elements, not a {ty}", m.len()));
    }
    let place = Placement::new(layout, shape, ty)?;
    let dims: Vec<usize> = shape
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| format!("dimension {d} is too large")))
        .collect::<Result<_, _>>()?;
    let numel = shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d));
    // The offsets (8 bytes each) and the tensor (4 bytes each) are held together.
    let n = crate::limits::check_elems(
        format_args!("the download of a tensor of shape {shape:?}"),
        numel,
        12,
    )?;
    let mut offsets = Vec::with_capacity(n);
    place.each(layout, shape, n, |_, idx, o| {
        let o = o
            .filter(|&o| o < m.len())
            .ok_or_else(|| format!("element {idx:?} has no place in {ty} under {layout}"))?;
        offsets.push(o);
        Ok(())
    })?;
    let err = |e: crate::reference::KernelError| e.to_string();
    Ok(match m {
        MemData::F32(d) => {
            Value::F32(Tensor::new(dims, offsets.iter().map(|&o| d[o]).collect()).map_err(err)?)
        }
        MemData::I32(d) => {
            Value::I32(Tensor::new(dims, offsets.iter().map(|&o| d[o]).collect()).map_err(err)?)
        }
        MemData::I8(d) => Value::I32(
            Tensor::new(dims, offsets.iter().map(|&o| i32::from(d[o])).collect()).map_err(err)?,
        ),
    })
}

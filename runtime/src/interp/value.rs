//! Run-time values of the interpreter, and how IR element types are stored in each [`Mode`].
//!
//! A [`Value`] is a dense tensor of `f32`, `f64` or `i32`. IR types map onto these storages:
//!
//! | IR element type | `Mode::F32` | `Mode::F64` |
//! |---|---|---|
//! | f32 | `F32` | `F64` |
//! | f16, bf16 | `F32`, rounded to f16/bf16 after every op | `F64`, not rounded |
//! | f64 | `F64` | `F64` |
//! | i32 | `I32` | `I32` |
//! | i8 | `I32`, each value in `-128..=127` | `I32`, likewise |
//!
//! Other element types (i64, i1, index) have no storage: an op producing one is reported as
//! unsupported. The f64 mode exists for gradient checks, where the point is to see the math without
//! storage rounding, so it does not round 16-bit types either.

use std::fmt;

use fbc_ir::{ElemType, TensorType};

use crate::reference::{round_bf16, round_f16, Precision, Real, Tensor};

/// A tensor value: what function arguments, op results and function results are at run time.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// f32 data; also f16 and bf16 tensors in [`Mode::F32`], holding rounded values.
    F32(Tensor<f32>),
    /// f64 data: f64 tensors, and every float tensor in [`Mode::F64`].
    F64(Tensor<f64>),
    /// i32 data: ids and labels.
    I32(Tensor<i32>),
}

impl Value {
    /// The extents of the tensor.
    pub fn shape(&self) -> &[usize] {
        match self {
            Value::F32(t) => t.shape(),
            Value::F64(t) => t.shape(),
            Value::I32(t) => t.shape(),
        }
    }

    /// The number of elements.
    pub fn numel(&self) -> usize {
        match self {
            Value::F32(t) => t.numel(),
            Value::F64(t) => t.numel(),
            Value::I32(t) => t.numel(),
        }
    }

    /// The storage type's name: `f32`, `f64` or `i32`.
    pub fn storage_name(&self) -> &'static str {
        match self {
            Value::F32(_) => "f32",
            Value::F64(_) => "f64",
            Value::I32(_) => "i32",
        }
    }

    /// Rows `start..start + count` of axis 0 (the other axes whole): what a `memory.upload`
    /// with `rows = [start, count]` stores. An error where the range is not inside axis 0.
    pub fn rows(&self, start: u64, count: u64) -> Result<Value, String> {
        fn cut<T: Copy>(t: &Tensor<T>, start: u64, count: u64) -> Result<Tensor<T>, String> {
            let shape = t.shape();
            let n = shape.first().copied().unwrap_or(0) as u64;
            let end = start.checked_add(count).filter(|&e| e <= n && count > 0);
            let Some(end) = end else {
                return Err(format!(
                    "rows {start}..{} are not a non-empty range of a tensor of shape {shape:?}",
                    start.saturating_add(count)
                ));
            };
            let row: usize = shape[1..].iter().product();
            let (a, b) = (start as usize * row, end as usize * row);
            let mut s = shape.to_vec();
            s[0] = count as usize;
            Tensor::new(s, t.data()[a..b].to_vec()).map_err(|e| e.to_string())
        }
        Ok(match self {
            Value::F32(t) => Value::F32(cut(t, start, count)?),
            Value::F64(t) => Value::F64(cut(t, start, count)?),
            Value::I32(t) => Value::I32(cut(t, start, count)?),
        })
    }

    /// The value, or its rows `rows = [start, count]` ([`Value::rows`]; `None`: all of it).
    pub fn row_tile(&self, rows: Option<[u64; 2]>) -> Result<std::borrow::Cow<'_, Value>, String> {
        match rows {
            None => Ok(std::borrow::Cow::Borrowed(self)),
            Some([start, count]) => self.rows(start, count).map(std::borrow::Cow::Owned),
        }
    }

    /// Whether the storage is a float type.
    pub fn is_float(&self) -> bool {
        !matches!(self, Value::I32(_))
    }

    /// Every element widened to `f64` (exact for all three storages), in row-major order.
    pub fn to_f64_vec(&self) -> Vec<f64> {
        match self {
            Value::F32(t) => t.data().iter().map(|&v| f64::from(v)).collect(),
            Value::F64(t) => t.data().to_vec(),
            Value::I32(t) => t.data().iter().map(|&v| f64::from(v)).collect(),
        }
    }

    pub fn as_f32(&self) -> Option<&Tensor<f32>> {
        match self {
            Value::F32(t) => Some(t),
            _ => None,
        }
    }

    pub fn as_f64(&self) -> Option<&Tensor<f64>> {
        match self {
            Value::F64(t) => Some(t),
            _ => None,
        }
    }

    pub fn as_i32(&self) -> Option<&Tensor<i32>> {
        match self {
            Value::I32(t) => Some(t),
            _ => None,
        }
    }
}

impl From<Tensor<f32>> for Value {
    fn from(t: Tensor<f32>) -> Value {
        Value::F32(t)
    }
}

impl From<Tensor<f64>> for Value {
    fn from(t: Tensor<f64>) -> Value {
        Value::F64(t)
    }
}

impl From<Tensor<i32>> for Value {
    fn from(t: Tensor<i32>) -> Value {
        Value::I32(t)
    }
}

impl fmt::Display for Value {
    /// `f32 [2, 3]`: the storage and the shape.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {:?}", self.storage_name(), self.shape())
    }
}

/// How float ops are computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Mode {
    /// Each float type in its own precision: f32 (and f16/bf16, rounded after every op) in `f32`,
    /// f64 in `f64`. What the program means.
    #[default]
    F32,
    /// Every float op in `f64`, nothing rounded to a narrower type: the oracle of gradient checks.
    F64,
}

/// Where a value of one IR element type lives in a mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Storage {
    /// `Value::F32`, rounded to the precision after every op.
    F32(Precision),
    F64,
    I32,
}

impl Storage {
    /// The storage of `elem` in `mode`; `None` for element types the interpreter does not run.
    pub(crate) fn of(elem: ElemType, mode: Mode) -> Option<Storage> {
        Some(match (elem, mode) {
            // An i8 tensor (packed weights) is held as i32 values in `-128..=127`, as f16 is
            // held in f32: `coerce` checks the range of arguments.
            (ElemType::I32 | ElemType::I8, _) => Storage::I32,
            (ElemType::F64, _) => Storage::F64,
            (ElemType::F32 | ElemType::F16 | ElemType::BF16, Mode::F64) => Storage::F64,
            (ElemType::F32, Mode::F32) => Storage::F32(Precision::F32),
            (ElemType::F16, Mode::F32) => Storage::F32(Precision::F16),
            (ElemType::BF16, Mode::F32) => Storage::F32(Precision::Bf16),
            _ => return None,
        })
    }

    /// A scalar (an attribute such as `factor`, or a constant's value) as this storage holds it:
    /// rounded to f16/bf16 where the storage is.
    pub(crate) fn round_scalar(self, v: f64) -> f64 {
        match self {
            Storage::F32(Precision::F16) => f64::from(round_f16(v as f32)),
            Storage::F32(Precision::Bf16) => f64::from(round_bf16(v as f32)),
            Storage::F32(Precision::F32) => f64::from(v as f32),
            Storage::F64 | Storage::I32 => v,
        }
    }

    /// `v` as this storage holds it after an op: f16/bf16 results rounded; others unchanged.
    pub(crate) fn round(self, v: Value) -> Value {
        match (self, v) {
            (Storage::F32(p), Value::F32(t)) => Value::F32(p.round(t)),
            (_, v) => v,
        }
    }
}

/// `v`, given for an argument of type `ty`, converted to `ty`'s storage in `mode`: a float
/// argument accepts `F32` or `F64` data (widened exactly, or rounded to nearest, then to f16/bf16
/// where the type is); an i32 argument needs `I32` data; shapes must be equal. `Err` carries what
/// was found, for the caller's message.
pub(crate) fn coerce(v: Value, ty: &TensorType, mode: Mode) -> Result<Value, Value> {
    let shape_ok = v.shape().iter().map(|&d| d as u64).eq(ty.shape.iter().copied());
    let Some(storage) = Storage::of(ty.elem, mode) else { return Err(v) };
    if !shape_ok {
        return Err(v);
    }
    Ok(match (storage, v) {
        (Storage::I32, Value::I32(t))
            if ty.elem == ElemType::I8 && t.data().iter().any(|&b| i8::try_from(b).is_err()) =>
        {
            return Err(Value::I32(t))
        }
        (Storage::I32, v @ Value::I32(_)) => v,
        (Storage::F64, Value::F32(t)) => Value::F64(t.cast()),
        (Storage::F64, v @ Value::F64(_)) => v,
        (Storage::F32(p), Value::F32(t)) => Value::F32(p.round(t)),
        (Storage::F32(p), Value::F64(t)) => Value::F32(p.round(t.cast())),
        (_, v) => return Err(v),
    })
}

/// The element types kernels run on, and how they sit in a [`Value`].
pub(crate) trait Elem: Copy + Default + 'static {
    /// The tensor inside `v`, when `v` holds this type.
    fn unwrap(v: &Value) -> Option<&Tensor<Self>>;
    /// A constant's value in this type (the verifier checked that integer constants fit).
    fn from_f64(v: f64) -> Self;
    /// The storage name, for messages.
    const NAME: &'static str;
}

impl Elem for f32 {
    fn unwrap(v: &Value) -> Option<&Tensor<f32>> {
        v.as_f32()
    }
    fn from_f64(v: f64) -> f32 {
        v as f32
    }
    const NAME: &'static str = "f32";
}

impl Elem for f64 {
    fn unwrap(v: &Value) -> Option<&Tensor<f64>> {
        v.as_f64()
    }
    fn from_f64(v: f64) -> f64 {
        v
    }
    const NAME: &'static str = "f64";
}

impl Elem for i32 {
    fn unwrap(v: &Value) -> Option<&Tensor<i32>> {
        v.as_i32()
    }
    fn from_f64(v: f64) -> i32 {
        // `as` saturates; the verifier has already checked the value is a whole i32.
        v as i32
    }
    const NAME: &'static str = "i32";
}

/// Float element types: [`Elem`] plus the reference kernels' arithmetic.
pub(crate) trait FloatElem: Elem + Real {}
impl FloatElem for f32 {}
impl FloatElem for f64 {}

//! Tensors known while importing: initializers, `Constant` nodes and everything folded from them
//! (shape arithmetic above all: `Shape → Gather → Concat → Reshape`). Each keeps its ONNX data
//! type; floats are held as `f32` (`float`, `float16`, `bfloat16`) or `f64` (`double`), integers
//! and booleans as `i64`.

use std::path::Path;

use fbc_ir::ElemType;

use crate::proto::{data_type as dt, TensorProto};

/// The data types an imported tensor may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    F16,
    BF16,
    F64,
    I64,
    I32,
    I8,
    U8,
    Bool,
}

impl DType {
    pub fn from_onnx(t: i32) -> Option<DType> {
        Some(match t {
            dt::FLOAT => DType::F32,
            dt::FLOAT16 => DType::F16,
            dt::BFLOAT16 => DType::BF16,
            dt::DOUBLE => DType::F64,
            dt::INT64 => DType::I64,
            dt::INT32 => DType::I32,
            dt::INT8 => DType::I8,
            dt::UINT8 => DType::U8,
            dt::BOOL => DType::Bool,
            _ => return None,
        })
    }

    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16 | DType::F64)
    }

    /// The element type of a run-time tensor of this type in the IR. Integer tensors become
    /// `i32` (fbc's index type: run-time integers are gather indices), booleans have none.
    pub fn elem(self) -> Option<ElemType> {
        Some(match self {
            DType::F32 => ElemType::F32,
            DType::F16 => ElemType::F16,
            DType::BF16 => ElemType::BF16,
            DType::F64 => ElemType::F64,
            DType::I64 | DType::I32 | DType::I8 | DType::U8 => ElemType::I32,
            DType::Bool => return None,
        })
    }

    /// The data type of a run-time tensor of element type `e`.
    pub fn of_elem(e: ElemType) -> Option<DType> {
        Some(match e {
            ElemType::F32 => DType::F32,
            ElemType::F16 => DType::F16,
            ElemType::BF16 => DType::BF16,
            ElemType::F64 => DType::F64,
            ElemType::I32 => DType::I32,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "float",
            DType::F16 => "float16",
            DType::BF16 => "bfloat16",
            DType::F64 => "double",
            DType::I64 => "int64",
            DType::I32 => "int32",
            DType::I8 => "int8",
            DType::U8 => "uint8",
            DType::Bool => "bool",
        }
    }

    /// Rounds `x` to this type (integers truncate toward zero and saturate, as a C cast of an
    /// in-range value does; booleans are `x != 0`).
    pub fn round(self, x: f64) -> f64 {
        match self {
            DType::F32 => x as f32 as f64,
            DType::F16 => half::f16::from_f64(x).to_f64(),
            DType::BF16 => half::bf16::from_f64(x).to_f64(),
            DType::F64 => x,
            DType::I64 => x.trunc().clamp(i64::MIN as f64, i64::MAX as f64),
            DType::I32 => x.trunc().clamp(i32::MIN as f64, i32::MAX as f64),
            DType::I8 => x.trunc().clamp(-128.0, 127.0),
            DType::U8 => x.trunc().clamp(0.0, 255.0),
            DType::Bool => f64::from(u8::from(x != 0.0)),
        }
    }
}

/// Element values, by width.
#[derive(Debug, Clone, PartialEq)]
pub enum Data {
    /// `float`, `float16`, `bfloat16` (the latter two already rounded to their type).
    F32(Vec<f32>),
    F64(Vec<f64>),
    /// Every integer type and `bool` (0 or 1).
    I64(Vec<i64>),
}

/// A tensor whose values are known at import time.
#[derive(Debug, Clone, PartialEq)]
pub struct HostTensor {
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub data: Data,
}

/// The most elements a tensor made while importing may have (a `ConstantOfShape` or `Expand`
/// of constants); an initializer's size is bounded by the file it comes from.
pub const MAX_FOLDED_ELEMS: usize = 1 << 24;

/// The element count of `shape`, or an error when it overflows.
pub fn numel(shape: &[usize]) -> Result<usize, String> {
    shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or_else(|| format!("a tensor of shape {} has too many elements", fmt_shape(shape)))
}

/// `[2, 3]` as `2x3` (`scalar` for rank 0).
pub fn fmt_shape<T: std::fmt::Display>(shape: &[T]) -> String {
    if shape.is_empty() {
        "scalar".to_string()
    } else {
        shape.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("x")
    }
}

impl HostTensor {
    pub fn numel(&self) -> usize {
        match &self.data {
            Data::F32(v) => v.len(),
            Data::F64(v) => v.len(),
            Data::I64(v) => v.len(),
        }
    }

    pub fn get(&self, i: usize) -> f64 {
        match &self.data {
            Data::F32(v) => f64::from(v[i]),
            Data::F64(v) => v[i],
            Data::I64(v) => v[i] as f64,
        }
    }

    /// A tensor of `dtype` and `shape` from values computed in f64, rounded to the type.
    pub fn from_f64(
        dtype: DType,
        shape: Vec<usize>,
        vals: impl Iterator<Item = f64>,
    ) -> HostTensor {
        let data = match dtype {
            DType::F64 => Data::F64(vals.collect()),
            d if d.is_float() => Data::F32(vals.map(|x| d.round(x) as f32).collect()),
            d => Data::I64(vals.map(|x| d.round(x) as i64).collect()),
        };
        HostTensor { dtype, shape, data }
    }

    /// A 1-D `int64` tensor of `values` (shapes, `value_ints`).
    pub fn from_i64s(values: Vec<i64>) -> HostTensor {
        HostTensor { dtype: DType::I64, shape: vec![values.len()], data: Data::I64(values) }
    }

    /// The same values in `dtype` (rounded, or truncated and saturated to an integer type).
    pub fn cast(&self, dtype: DType) -> HostTensor {
        HostTensor::from_f64(dtype, self.shape.clone(), (0..self.numel()).map(|i| self.get(i)))
    }

    /// Integer values (of an integer or boolean tensor).
    pub fn ints(&self) -> Option<&[i64]> {
        match &self.data {
            Data::I64(v) => Some(v),
            _ => None,
        }
    }

    /// The value of every element when all are equal (and there is at least one).
    pub fn splat(&self) -> Option<f64> {
        let first = (self.numel() > 0).then(|| self.get(0))?;
        (0..self.numel()).all(|i| self.get(i).to_bits() == first.to_bits()).then_some(first)
    }

    /// Little-endian bytes of the values in `dtype`'s IR storage (`f32`, `f16`, `bf16`, `f64`;
    /// integers as `i32`), for a safetensors file.
    pub fn le_bytes(&self) -> Vec<u8> {
        let n = self.numel();
        match self.dtype {
            DType::F16 => {
                (0..n).flat_map(|i| half::f16::from_f64(self.get(i)).to_le_bytes()).collect()
            }
            DType::BF16 => {
                (0..n).flat_map(|i| half::bf16::from_f64(self.get(i)).to_le_bytes()).collect()
            }
            DType::F64 => (0..n).flat_map(|i| self.get(i).to_le_bytes()).collect(),
            d if d.is_float() => (0..n).flat_map(|i| (self.get(i) as f32).to_le_bytes()).collect(),
            _ => (0..n).flat_map(|i| (self.get(i) as i32).to_le_bytes()).collect(),
        }
    }

    /// Decodes a `TensorProto`; `base` is the model's folder, where external data files are
    /// looked up (never outside it).
    pub fn decode(t: &TensorProto, base: Option<&Path>) -> Result<HostTensor, String> {
        let dtype = DType::from_onnx(t.data_type).ok_or_else(|| {
            format!("data type {} is not supported", crate::proto::data_type::name(t.data_type))
        })?;
        let mut shape = Vec::with_capacity(t.dims.len());
        for &d in &t.dims {
            shape.push(usize::try_from(d).map_err(|_| format!("negative dimension {d}"))?);
        }
        let n = numel(&shape)?;
        let external;
        let raw: &[u8] = if t.data_location == 1 {
            external = read_external(t, base)?;
            &external
        } else {
            &t.raw_data
        };
        let width = match dtype {
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::F64 | DType::I64 => 8,
            DType::I8 | DType::U8 | DType::Bool => 1,
        };
        let count_err = |have: usize| {
            format!(
                "{} holds {have} values for a tensor of shape {}",
                dtype.name(),
                fmt_shape(&shape)
            )
        };
        if !raw.is_empty() || t.data_location == 1 {
            if raw.len() != n.checked_mul(width).ok_or_else(|| count_err(0))? {
                return Err(format!(
                    "the raw data has {} bytes, a {} tensor of shape {} needs {}",
                    raw.len(),
                    dtype.name(),
                    fmt_shape(&shape),
                    n.saturating_mul(width)
                ));
            }
            let chunks = raw.chunks_exact(width);
            let data = match dtype {
                DType::F32 => Data::F32(
                    chunks.map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
                ),
                DType::F16 => Data::F32(
                    chunks.map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
                ),
                DType::BF16 => Data::F32(
                    chunks.map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
                ),
                DType::F64 => Data::F64(
                    chunks.map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8]))).collect(),
                ),
                DType::I64 => Data::I64(
                    chunks.map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8]))).collect(),
                ),
                DType::I32 => Data::I64(
                    chunks
                        .map(|c| i64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]])))
                        .collect(),
                ),
                DType::I8 => Data::I64(chunks.map(|c| i64::from(c[0] as i8)).collect()),
                DType::U8 => Data::I64(chunks.map(|c| i64::from(c[0])).collect()),
                DType::Bool => Data::I64(chunks.map(|c| i64::from(c[0] != 0)).collect()),
            };
            return Ok(HostTensor { dtype, shape, data });
        }
        // Typed fields: float16/bfloat16/int8/uint8/bool/int32 travel in `int32_data` (the
        // 16-bit floats as their bit patterns).
        let data = match dtype {
            DType::F32 => Data::F32(t.float_data.clone()),
            DType::F64 => Data::F64(t.double_data.clone()),
            DType::I64 => Data::I64(t.int64_data.clone()),
            DType::F16 => Data::F32(
                t.int32_data.iter().map(|&b| half::f16::from_bits(b as u16).to_f32()).collect(),
            ),
            DType::BF16 => Data::F32(
                t.int32_data.iter().map(|&b| half::bf16::from_bits(b as u16).to_f32()).collect(),
            ),
            DType::Bool => Data::I64(t.int32_data.iter().map(|&b| i64::from(b != 0)).collect()),
            DType::I32 | DType::I8 | DType::U8 => {
                Data::I64(t.int32_data.iter().map(|&b| i64::from(b)).collect())
            }
        };
        let have = match &data {
            Data::F32(v) => v.len(),
            Data::F64(v) => v.len(),
            Data::I64(v) => v.len(),
        };
        if have != n {
            return Err(count_err(have));
        }
        Ok(HostTensor { dtype, shape, data })
    }
}

/// The bytes of an external-data tensor: `location` (a relative path inside the model's folder),
/// `offset` and `length` from `external_data`, each checked before the file is read.
fn read_external(t: &TensorProto, base: Option<&Path>) -> Result<Vec<u8>, String> {
    let get = |k: &str| t.external_data.iter().find(|e| e.key == k).map(|e| e.value.as_str());
    let location = get("location").ok_or("external data without a `location`")?;
    let rel = Path::new(location);
    if rel.is_absolute() || rel.components().any(|c| !matches!(c, std::path::Component::Normal(_)))
    {
        return Err(format!(
            "external data location `{location}` must be a relative path inside the model's folder"
        ));
    }
    let base =
        base.ok_or("external data needs the model's folder (the model was not read from a file)")?;
    let path = base.join(rel);
    let parse = |k: &str| -> Result<Option<u64>, String> {
        get(k)
            .map(|v| {
                v.parse::<u64>().map_err(|_| format!("external data `{k}` = `{v}` is not a number"))
            })
            .transpose()
    };
    let offset = parse("offset")?.unwrap_or(0);
    let len_given = parse("length")?;
    let file_len = std::fs::metadata(&path)
        .map_err(|e| format!("cannot read external data `{}`: {e}", path.display()))?
        .len();
    let length = len_given.unwrap_or(file_len.saturating_sub(offset));
    offset.checked_add(length).filter(|&e| e <= file_len).ok_or_else(|| {
        format!(
            "external data `{location}`: bytes {offset}..{} lie past the end of the file ({file_len} bytes)",
            offset.saturating_add(length)
        )
    })?;
    let mut file = std::fs::File::open(&path)
        .map_err(|e| format!("cannot read external data `{}`: {e}", path.display()))?;
    let mut bytes = vec![0u8; usize::try_from(length).map_err(|_| "external data too large")?];
    use std::io::{Read as _, Seek as _};
    file.seek(std::io::SeekFrom::Start(offset))
        .and_then(|_| file.read_exact(&mut bytes))
        .map_err(|e| format!("cannot read external data `{}`: {e}", path.display()))?;
    Ok(bytes)
}

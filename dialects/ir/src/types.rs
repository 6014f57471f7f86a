//! Types of IR values: ranked tensors, scalars and dialect types.
//!
//! Types are small values compared structurally; a tensor's shape is a list of static `u64`
//! dimensions. Element counts are computed with overflow checks: a shape whose element count does
//! not fit in 64 bits is rejected when the type is built from text (see `from_ast`).

use std::fmt;

use smallvec::SmallVec;

use crate::attr::Attr;

/// Element types of tensors (and builtin scalar types).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ElemType {
    F32,
    F16,
    BF16,
    F64,
    I32,
    I8,
    I64,
    I1,
    Index,
}

impl ElemType {
    pub const ALL: [ElemType; 9] = [
        ElemType::F32,
        ElemType::F16,
        ElemType::BF16,
        ElemType::F64,
        ElemType::I32,
        ElemType::I8,
        ElemType::I64,
        ElemType::I1,
        ElemType::Index,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ElemType::F32 => "f32",
            ElemType::F16 => "f16",
            ElemType::BF16 => "bf16",
            ElemType::F64 => "f64",
            ElemType::I32 => "i32",
            ElemType::I8 => "i8",
            ElemType::I64 => "i64",
            ElemType::I1 => "i1",
            ElemType::Index => "index",
        }
    }

    pub fn parse(s: &str) -> Option<ElemType> {
        ElemType::ALL.into_iter().find(|e| e.name() == s)
    }

    pub fn is_float(self) -> bool {
        matches!(self, ElemType::F32 | ElemType::F16 | ElemType::BF16 | ElemType::F64)
    }

    pub fn is_int(self) -> bool {
        !self.is_float()
    }

    /// Storage size of one element in bytes (`i1` is stored as a byte).
    pub fn bytes(self) -> u64 {
        match self {
            ElemType::F64 | ElemType::I64 | ElemType::Index => 8,
            ElemType::F32 | ElemType::I32 => 4,
            ElemType::F16 | ElemType::BF16 => 2,
            ElemType::I8 | ElemType::I1 => 1,
        }
    }
}

impl fmt::Display for ElemType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Dimensions of a ranked tensor; most tensors have rank 4 or less.
pub type Shape = SmallVec<[u64; 4]>;

/// A statically shaped tensor type `tensor<2x3xf32>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TensorType {
    pub shape: Shape,
    pub elem: ElemType,
}

impl TensorType {
    pub fn new(shape: impl Into<Shape>, elem: ElemType) -> TensorType {
        TensorType { shape: shape.into(), elem }
    }

    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// Number of elements, `None` on overflow.
    pub fn numel(&self) -> Option<u64> {
        self.shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d))
    }
}

/// A type defined by a dialect: `!memory.image2d<64x64, f32>`.
#[derive(Debug, Clone, PartialEq, Hash, Eq)]
pub struct DialectType {
    pub dialect: String,
    pub name: String,
    pub params: Vec<(Option<String>, Attr)>,
}

/// The type of an SSA value.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Type {
    Tensor(TensorType),
    Scalar(ElemType),
    Dialect(Box<DialectType>),
    /// Stands in for the type of a value whose definition failed to verify, so that one mistake is
    /// reported once rather than at every use. Never present in a module that verified.
    Unknown,
}

impl Type {
    pub fn tensor(shape: impl Into<Shape>, elem: ElemType) -> Type {
        Type::Tensor(TensorType::new(shape, elem))
    }

    pub fn as_tensor(&self) -> Option<&TensorType> {
        match self {
            Type::Tensor(t) => Some(t),
            _ => None,
        }
    }

    pub fn is_unknown(&self) -> bool {
        matches!(self, Type::Unknown)
    }
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("tensor<")?;
        for d in &self.shape {
            write!(f, "{d}x")?;
        }
        write!(f, "{}>", self.elem)
    }
}

impl fmt::Display for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Type::Tensor(t) => t.fmt(f),
            Type::Scalar(e) => e.fmt(f),
            Type::Dialect(d) => {
                write!(f, "!{}.{}", d.dialect, d.name)?;
                crate::attr::write_params(f, &d.params)
            }
            Type::Unknown => f.write_str("<<unknown>>"),
        }
    }
}

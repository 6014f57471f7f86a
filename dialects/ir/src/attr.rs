//! Attribute values attached to ops. Index maps are [`fbc_index::IndexMap`]s.
//!
//! Attributes are plain values. Floats compare and hash by their bit pattern so that attribute
//! dictionaries can key CSE tables; `-0.0` and `0.0` are therefore different attributes, which is
//! what a compiler that must not change results wants.

use std::fmt::{self, Write as _};
use std::hash::{Hash, Hasher};

/// Index maps (`Attr::Map`) are `fbc_index`'s, the one index-expression type of fbc.
pub use fbc_index::{BinOp, IndexMap};

pub use crate::dense::Dense;
use crate::types::Type;

#[derive(Debug, Clone)]
pub enum Attr {
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(String),
    Array(Vec<Attr>),
    Symbol(String),
    Type(Type),
    Dialect(Box<DialectAttr>),
    Map(IndexMap),
    /// `dense<...>`: the elements of a tensor constant (see [`Dense`]).
    Dense(Dense),
    Unit,
}

/// `#dialect.name<key = value, ...>`; keys are optional, order is significant.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DialectAttr {
    pub dialect: String,
    pub name: String,
    pub params: Vec<(Option<String>, Attr)>,
}

impl DialectAttr {
    pub fn param(&self, key: &str) -> Option<&Attr> {
        self.params.iter().find(|(k, _)| k.as_deref() == Some(key)).map(|(_, v)| v)
    }
}

impl PartialEq for Attr {
    fn eq(&self, other: &Attr) -> bool {
        match (self, other) {
            (Attr::Int(a), Attr::Int(b)) => a == b,
            (Attr::Float(a), Attr::Float(b)) => a.to_bits() == b.to_bits(),
            (Attr::Bool(a), Attr::Bool(b)) => a == b,
            (Attr::Str(a), Attr::Str(b)) => a == b,
            (Attr::Array(a), Attr::Array(b)) => a == b,
            (Attr::Symbol(a), Attr::Symbol(b)) => a == b,
            (Attr::Type(a), Attr::Type(b)) => a == b,
            (Attr::Dialect(a), Attr::Dialect(b)) => a == b,
            (Attr::Map(a), Attr::Map(b)) => a == b,
            (Attr::Dense(a), Attr::Dense(b)) => a == b,
            (Attr::Unit, Attr::Unit) => true,
            _ => false,
        }
    }
}

impl Eq for Attr {}

impl Hash for Attr {
    fn hash<H: Hasher>(&self, h: &mut H) {
        std::mem::discriminant(self).hash(h);
        match self {
            Attr::Int(v) => v.hash(h),
            Attr::Float(v) => v.to_bits().hash(h),
            Attr::Bool(v) => v.hash(h),
            Attr::Str(v) | Attr::Symbol(v) => v.hash(h),
            Attr::Array(v) => v.hash(h),
            Attr::Type(v) => v.hash(h),
            Attr::Dialect(v) => v.hash(h),
            Attr::Map(v) => v.hash(h),
            Attr::Dense(v) => v.hash(h),
            Attr::Unit => {}
        }
    }
}

impl Attr {
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Attr::Int(v) => Some(*v),
            _ => None,
        }
    }

    /// Floats, and integers read as floats (`factor = 2` means 2.0).
    pub fn as_float(&self) -> Option<f64> {
        match self {
            Attr::Float(v) => Some(*v),
            Attr::Int(v) => Some(*v as f64),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Attr::Bool(v) => Some(*v),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Attr::Str(v) => Some(v),
            _ => None,
        }
    }

    pub fn as_dense(&self) -> Option<&Dense> {
        match self {
            Attr::Dense(d) => Some(d),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[Attr]> {
        match self {
            Attr::Array(v) => Some(v),
            _ => None,
        }
    }

    /// An array of integers.
    pub fn as_ints(&self) -> Option<Vec<i64>> {
        self.as_array()?.iter().map(Attr::as_int).collect()
    }

    pub fn ints(values: impl IntoIterator<Item = i64>) -> Attr {
        Attr::Array(values.into_iter().map(Attr::Int).collect())
    }

    /// A short name of the attribute's kind, for diagnostics.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Attr::Int(_) => "integer",
            Attr::Float(_) => "float",
            Attr::Bool(_) => "boolean",
            Attr::Str(_) => "string",
            Attr::Array(_) => "array",
            Attr::Symbol(_) => "symbol",
            Attr::Type(_) => "type",
            Attr::Dialect(_) => "dialect attribute",
            Attr::Map(_) => "index map",
            Attr::Dense(_) => "dense elements",
            Attr::Unit => "unit",
        }
    }
}

/// Writes a float so that it reads back to the same bits and always looks like a float.
pub fn write_float(f: &mut impl fmt::Write, v: f64) -> fmt::Result {
    if v.is_nan() || v.is_infinite() {
        // Not expressible in the grammar's literal syntax; MLIR writes the bit pattern.
        return write!(f, "0x{:016X}", v.to_bits());
    }
    let s = format!("{v:?}");
    match s.find(['e', 'E']) {
        Some(e) if !s[..e].contains('.') => write!(f, "{}.0{}", &s[..e], &s[e..]),
        _ => f.write_str(&s),
    }
}

fn write_str_lit(f: &mut fmt::Formatter<'_>, s: &str) -> fmt::Result {
    f.write_char('"')?;
    for c in s.chars() {
        match c {
            '"' => f.write_str("\\\"")?,
            '\\' => f.write_str("\\\\")?,
            '\n' => f.write_str("\\n")?,
            '\t' => f.write_str("\\t")?,
            c if (c as u32) < 0x20 || c as u32 == 0x7f => write!(f, "\\{:02X}", c as u32)?,
            c => f.write_char(c)?,
        }
    }
    f.write_char('"')
}

pub(crate) fn write_params(
    f: &mut fmt::Formatter<'_>,
    params: &[(Option<String>, Attr)],
) -> fmt::Result {
    if params.is_empty() {
        return Ok(());
    }
    f.write_char('<')?;
    for (i, (k, v)) in params.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        if let Some(k) = k {
            write!(f, "{k} = ")?;
        }
        write!(f, "{v}")?;
    }
    f.write_char('>')
}

impl fmt::Display for Attr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Attr::Int(v) => write!(f, "{v}"),
            Attr::Float(v) => write_float(f, *v),
            Attr::Bool(v) => write!(f, "{v}"),
            Attr::Str(s) => write_str_lit(f, s),
            Attr::Array(items) => {
                f.write_char('[')?;
                for (i, a) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{a}")?;
                }
                f.write_char(']')
            }
            Attr::Symbol(s) => write!(f, "@{s}"),
            Attr::Type(t) => write!(f, "{t}"),
            Attr::Dialect(d) => {
                write!(f, "#{}.{}", d.dialect, d.name)?;
                write_params(f, &d.params)
            }
            Attr::Map(m) => write!(f, "{m}"),
            Attr::Dense(d) => write!(f, "{d}"),
            Attr::Unit => f.write_str("unit"),
        }
    }
}

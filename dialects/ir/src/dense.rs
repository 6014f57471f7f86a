//! `dense<...>`: the elements of a tensor constant, as MLIR writes them.
//!
//! Two spellings, both MLIR's:
//!
//! - a list of numbers, `dense<[1.0, -2, 3.5]>` (nested brackets, MLIR's per-dimension form, are
//!   read as the same row-major list) or one number, `dense<0.5>` (a splat);
//! - a hex string of the elements' little-endian bytes, `dense<"0x0000803F00000040">`, MLIR's form
//!   for large constants and the one fbc writes for imported weights.
//!
//! The attribute has no type of its own: the op that holds it gives its elements a type (the
//! result type of `tensor.constant`), and [`Dense::decode`] reads them in it. A list holds finite
//! numbers only (the grammar has no literal for the others); the hex form holds any bits.

use std::fmt::{self, Write as _};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use crate::types::ElemType;

/// The elements of a `dense<...>` attribute, shared (cloning an op's attributes copies no data).
#[derive(Debug, Clone)]
pub enum Dense {
    /// `dense<[...]>` or `dense<x>`: numbers, row-major.
    Values(Arc<[f64]>),
    /// `dense<"0x...">`: little-endian element bytes.
    Hex(Arc<[u8]>),
}

impl Dense {
    /// A list of numbers; `None` when one is not finite (a list cannot spell it).
    pub fn from_values(values: Vec<f64>) -> Option<Dense> {
        values.iter().all(|v| v.is_finite()).then(|| Dense::Values(values.into()))
    }

    /// Little-endian element bytes.
    pub fn from_le_bytes(bytes: Vec<u8>) -> Dense {
        Dense::Hex(bytes.into())
    }

    /// The hex form of `s` (`0x` then an even number of hex digits, either case).
    pub fn parse_hex(s: &str) -> Result<Dense, String> {
        let digits = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")).ok_or_else(|| {
            "expected a string of hex digits that starts with `0x` in `dense<...>`".to_string()
        })?;
        if digits.len() % 2 != 0 {
            return Err(format!(
                "expected an even number of hex digits in `dense<\"0x...\">`, found {}",
                digits.len()
            ));
        }
        let nibble = |i: usize, c: u8| {
            (c as char).to_digit(16).map(|d| d as u8).ok_or_else(|| {
                format!(
                    "expected a hex digit in `dense<\"0x...\">`, found `{}` at {}",
                    c as char, i
                )
            })
        };
        let b = digits.as_bytes();
        let mut out = Vec::with_capacity(b.len() / 2);
        for i in (0..b.len()).step_by(2) {
            out.push(nibble(i, b[i])? << 4 | nibble(i + 1, b[i + 1])?);
        }
        Ok(Dense::Hex(out.into()))
    }

    /// How many elements of `elem` it holds; an error when the bytes are not a whole number of
    /// elements.
    pub fn len_in(&self, elem: ElemType) -> Result<u64, String> {
        match self {
            Dense::Values(v) => Ok(v.len() as u64),
            Dense::Hex(b) => {
                let size = elem.bytes();
                let n = b.len() as u64;
                if n % size != 0 {
                    return Err(format!(
                        "expected a multiple of {size} bytes (one {elem} element is {size}), \
                         found {n}"
                    ));
                }
                Ok(n / size)
            }
        }
    }

    /// The elements as `elem` values, widened to `f64` (an integer type's as whole numbers).
    /// Errors: bytes that are not whole elements; a number that `elem` cannot hold (a fraction or
    /// an out-of-range value for an integer type, `i1` other than 0 or 1).
    pub fn decode(&self, elem: ElemType) -> Result<Vec<f64>, String> {
        let values: Vec<f64> = match self {
            Dense::Values(v) => v.to_vec(),
            Dense::Hex(b) => {
                self.len_in(elem)?;
                let size = elem.bytes() as usize;
                let c = b.chunks_exact(size);
                match elem {
                    ElemType::F32 => {
                        c.map(|c| f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]]))).collect()
                    }
                    ElemType::F64 => {
                        c.map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8]))).collect()
                    }
                    ElemType::F16 => {
                        c.map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f64()).collect()
                    }
                    ElemType::BF16 => {
                        c.map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f64()).collect()
                    }
                    ElemType::I32 => {
                        c.map(|c| f64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]]))).collect()
                    }
                    ElemType::I8 => c.map(|c| f64::from(c[0] as i8)).collect(),
                    ElemType::I1 => c.map(|c| f64::from(c[0])).collect(),
                    ElemType::I64 | ElemType::Index => c
                        .map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as f64)
                        .collect(),
                }
            }
        };
        if let Some((lo, hi)) = int_range(elem) {
            if let Some((i, v)) = values
                .iter()
                .enumerate()
                .find(|(_, v)| !(v.fract() == 0.0 && **v >= lo as f64 && **v < (hi + 1) as f64))
            {
                return Err(format!(
                    "expected whole numbers that fit in {elem} ({lo} to {hi}), found {v} at \
                     element {i}"
                ));
            }
        }
        Ok(values)
    }

    /// The one value of a one-element list (MLIR's splat spelling `dense<x>`).
    pub fn splat(&self) -> Option<f64> {
        match self {
            Dense::Values(v) if v.len() == 1 => Some(v[0]),
            _ => None,
        }
    }
}

/// The integers integer type `e` holds, as `lo..=hi`; `None` for float types.
pub fn int_range(e: ElemType) -> Option<(i128, i128)> {
    Some(match e {
        ElemType::I1 => (0, 1),
        ElemType::I8 => (i128::from(i8::MIN), i128::from(i8::MAX)),
        ElemType::I32 => (i128::from(i32::MIN), i128::from(i32::MAX)),
        ElemType::I64 | ElemType::Index => (i128::from(i64::MIN), i128::from(i64::MAX)),
        _ => return None,
    })
}

impl PartialEq for Dense {
    fn eq(&self, other: &Dense) -> bool {
        match (self, other) {
            (Dense::Values(a), Dense::Values(b)) => {
                Arc::ptr_eq(a, b)
                    || (a.len() == b.len()
                        && a.iter().zip(b.iter()).all(|(x, y)| x.to_bits() == y.to_bits()))
            }
            (Dense::Hex(a), Dense::Hex(b)) => Arc::ptr_eq(a, b) || a == b,
            _ => false,
        }
    }
}

impl Eq for Dense {}

impl Hash for Dense {
    fn hash<H: Hasher>(&self, h: &mut H) {
        match self {
            Dense::Values(v) => {
                0u8.hash(h);
                v.len().hash(h);
                v.iter().for_each(|x| x.to_bits().hash(h));
            }
            Dense::Hex(b) => {
                1u8.hash(h);
                b.hash(h);
            }
        }
    }
}

impl fmt::Display for Dense {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("dense<")?;
        match self {
            Dense::Values(v) if v.len() == 1 => crate::attr::write_float(f, v[0])?,
            Dense::Values(v) => {
                f.write_char('[')?;
                for (i, &x) in v.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    crate::attr::write_float(f, x)?;
                }
                f.write_char(']')?;
            }
            Dense::Hex(b) => {
                f.write_str("\"0x")?;
                const HEX: &[u8; 16] = b"0123456789ABCDEF";
                let mut s = String::with_capacity(b.len() * 2);
                for &x in b.iter() {
                    s.push(HEX[usize::from(x >> 4)] as char);
                    s.push(HEX[usize::from(x & 15)] as char);
                }
                f.write_str(&s)?;
                f.write_char('"')?;
            }
        }
        f.write_char('>')
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_reads_little_endian_elements_by_type() {
        let d = Dense::parse_hex("0x0000803F000000C0").unwrap();
        assert_eq!(d.decode(ElemType::F32).unwrap(), vec![1.0, -2.0]);
        assert_eq!(d.len_in(ElemType::F16).unwrap(), 4);
        assert_eq!(d.decode(ElemType::I32).unwrap(), vec![1_065_353_216.0, -1_073_741_824.0]);
        assert_eq!(d.to_string(), "dense<\"0x0000803F000000C0\">");
        let e = Dense::parse_hex("0x0000803F00").unwrap();
        assert_eq!(
            e.decode(ElemType::F32).unwrap_err(),
            "expected a multiple of 4 bytes (one f32 element is 4), found 5"
        );
    }

    #[test]
    fn bad_hex_strings_are_errors() {
        assert_eq!(
            Dense::parse_hex("00").unwrap_err(),
            "expected a string of hex digits that starts with `0x` in `dense<...>`"
        );
        assert_eq!(
            Dense::parse_hex("0x123").unwrap_err(),
            "expected an even number of hex digits in `dense<\"0x...\">`, found 3"
        );
        assert_eq!(
            Dense::parse_hex("0x12G4").unwrap_err(),
            "expected a hex digit in `dense<\"0x...\">`, found `G` at 2"
        );
    }

    #[test]
    fn integer_types_take_whole_numbers_in_range() {
        let d = Dense::from_values(vec![1.0, 2.5]).unwrap();
        assert_eq!(
            d.decode(ElemType::I32).unwrap_err(),
            "expected whole numbers that fit in i32 (-2147483648 to 2147483647), found 2.5 at \
             element 1"
        );
        let b = Dense::parse_hex("0x0102").unwrap();
        assert!(b.decode(ElemType::I1).unwrap_err().contains("found 2 at element 1"));
        assert_eq!(b.decode(ElemType::I8).unwrap(), vec![1.0, 2.0]);
        assert!(Dense::from_values(vec![f64::NAN]).is_none());
    }

    #[test]
    fn lists_print_as_written_and_compare_by_bits() {
        let d = Dense::from_values(vec![1.0, -0.0, 1e-5]).unwrap();
        assert_eq!(d.to_string(), "dense<[1.0, -0.0, 1.0e-5]>");
        assert_ne!(d, Dense::from_values(vec![1.0, 0.0, 1e-5]).unwrap());
        assert_eq!(Dense::from_values(vec![0.5]).unwrap().to_string(), "dense<0.5>");
        assert_eq!(Dense::from_values(vec![0.5]).unwrap().splat(), Some(0.5));
    }
}

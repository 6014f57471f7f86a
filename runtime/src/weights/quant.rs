//! Weight storage types and the quantisation of one row.
//!
//! Quantised weights are symmetric with one f32 scale per group of `group` consecutive values
//! of the last dimension (a row; the last group of a row may be shorter): INT8 stores
//! `q = round(x / s)` in `-127..=127` with `s = max|x| / 127`; INT4 stores `q` in `-7..=7` with
//! `s = max|x| / 7`, as `q + 8` in a nibble, two values a byte (the even-indexed value in the low
//! nibble), each row starting on a byte. A group of zeros has scale 0 and dequantises to zeros.
//! Dequantisation is `q · s` in f32: what a kernel reading packed weights computes.

use serde::{Deserialize, Serialize};

/// How a tensor's values are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Quant {
    F32,
    F16,
    Int8,
    Int4,
}

impl Quant {
    pub fn name(self) -> &'static str {
        match self {
            Quant::F32 => "f32",
            Quant::F16 => "f16",
            Quant::Int8 => "int8",
            Quant::Int4 => "int4",
        }
    }

    pub fn parse(s: &str) -> Option<Quant> {
        [Quant::F32, Quant::F16, Quant::Int8, Quant::Int4].into_iter().find(|q| q.name() == s)
    }

    /// Whether values carry per-group scales.
    pub fn is_quantised(self) -> bool {
        matches!(self, Quant::Int8 | Quant::Int4)
    }

    /// Bytes of one row of `len` values (scales not included).
    pub fn row_bytes(self, len: u64) -> u64 {
        match self {
            Quant::F32 => len * 4,
            Quant::F16 => len * 2,
            Quant::Int8 => len,
            Quant::Int4 => len.div_ceil(2),
        }
    }

    /// Groups of a row of `len` values (0 without scales).
    pub fn groups(self, len: u64, group: u64) -> u64 {
        if self.is_quantised() {
            len.div_ceil(group.max(1))
        } else {
            0
        }
    }

    /// The largest quantised magnitude.
    fn qmax(self) -> f32 {
        match self {
            Quant::Int4 => 7.0,
            _ => 127.0,
        }
    }
}

/// Appends row `x` stored as `q` (groups of `group` values) to `values`, and its scales to
/// `scales`.
pub fn encode_row(q: Quant, x: &[f32], group: usize, values: &mut Vec<u8>, scales: &mut Vec<f32>) {
    match q {
        Quant::F32 => values.extend(x.iter().flat_map(|v| v.to_le_bytes())),
        Quant::F16 => {
            values.extend(x.iter().flat_map(|&v| half::f16::from_f32(v).to_bits().to_le_bytes()))
        }
        Quant::Int8 | Quant::Int4 => {
            let start = values.len();
            let mut codes = Vec::with_capacity(x.len());
            for chunk in x.chunks(group.max(1)) {
                let amax = chunk.iter().fold(0.0f32, |m, v| m.max(v.abs()));
                let s = if amax > 0.0 && amax.is_finite() { amax / q.qmax() } else { 0.0 };
                scales.push(s);
                for &v in chunk {
                    let c = if s > 0.0 { (v / s).round().clamp(-q.qmax(), q.qmax()) } else { 0.0 };
                    codes.push(c as i8);
                }
            }
            if q == Quant::Int8 {
                values.extend(codes.iter().map(|&c| c as u8));
            } else {
                for pair in codes.chunks(2) {
                    let lo = (pair[0] + 8) as u8;
                    let hi = pair.get(1).map_or(8, |&c| (c + 8) as u8);
                    values.push(lo | (hi << 4));
                }
            }
            debug_assert_eq!(values.len() - start, q.row_bytes(x.len() as u64) as usize);
        }
    }
}

/// Decodes one row of `len` values stored as `q` from `values` (exactly
/// [`Quant::row_bytes`]) with its `scales` (one per group) into `out`.
pub fn decode_row(
    q: Quant,
    values: &[u8],
    scales: &[f32],
    len: usize,
    group: usize,
    out: &mut Vec<f32>,
) {
    let group = group.max(1);
    match q {
        Quant::F32 => {
            out.extend(values.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])))
        }
        Quant::F16 => out.extend(
            values
                .chunks_exact(2)
                .map(|b| half::f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32()),
        ),
        Quant::Int8 => out.extend(
            values.iter().enumerate().map(|(k, &b)| f32::from(b as i8) * scales[k / group]),
        ),
        Quant::Int4 => out.extend((0..len).map(|k| {
            let b = values[k / 2];
            let nib = if k % 2 == 0 { b & 0xF } else { b >> 4 };
            f32::from(nib as i8 - 8) * scales[k / group]
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(q: Quant, x: &[f32], group: usize) -> Vec<f32> {
        let (mut v, mut s) = (Vec::new(), Vec::new());
        encode_row(q, x, group, &mut v, &mut s);
        assert_eq!(v.len() as u64, q.row_bytes(x.len() as u64));
        assert_eq!(s.len() as u64, q.groups(x.len() as u64, group as u64));
        let mut out = Vec::new();
        decode_row(q, &v, &s, x.len(), group, &mut out);
        out
    }

    #[test]
    fn hand_worked_codes() {
        // Group [1, -2, 0.5]: s = 2/127; codes 64, -127, 32 (63.5 rounds away from zero).
        let mut v = Vec::new();
        let mut s = Vec::new();
        encode_row(Quant::Int8, &[1.0, -2.0, 0.5], 3, &mut v, &mut s);
        assert_eq!(v, vec![64, (-127i8) as u8, 32]);
        assert_eq!(s, vec![2.0 / 127.0]);
        // INT4, s = 7/7 = 1: codes 7, -7, 1 as nibbles 15, 1, 9; low nibble first.
        let (mut v, mut s) = (Vec::new(), Vec::new());
        encode_row(Quant::Int4, &[7.0, -7.0, 1.0], 4, &mut v, &mut s);
        assert_eq!(v, vec![15 | (1 << 4), 9 | (8 << 4)]);
        assert_eq!(s, vec![1.0]);
    }

    #[test]
    fn errors_are_within_half_a_step_per_group() {
        let x: Vec<f32> = (0..200).map(|k| ((k * 37 % 101) as f32 - 50.0) * 0.013).collect();
        for (q, group) in
            [(Quant::Int8, 64usize), (Quant::Int8, 200), (Quant::Int4, 64), (Quant::Int4, 33)]
        {
            let y = round_trip(q, &x, group);
            for (g, (xs, ys)) in x.chunks(group).zip(y.chunks(group)).enumerate() {
                let amax = xs.iter().fold(0.0f32, |m, v| m.max(v.abs()));
                let step = amax / q.qmax();
                for (a, b) in xs.iter().zip(ys) {
                    assert!((a - b).abs() <= step / 2.0 * 1.0001, "{q:?} group {g}: {a} vs {b}");
                }
            }
        }
        assert_eq!(round_trip(Quant::F32, &x, 1), x);
        let h = round_trip(Quant::F16, &x, 1);
        assert!(x.iter().zip(&h).all(|(a, b)| (a - b).abs() <= a.abs() * 1e-3));
    }

    #[test]
    fn zero_groups_and_odd_lengths() {
        assert_eq!(round_trip(Quant::Int4, &[0.0; 5], 64), vec![0.0; 5]);
        assert_eq!(round_trip(Quant::Int8, &[0.0, 3.0, 0.0], 1), vec![0.0, 3.0, 0.0]);
    }
}

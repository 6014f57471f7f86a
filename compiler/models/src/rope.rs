//! Rotary position embedding tables for the host: the `rope_cos`/`rope_sin` arguments of the
//! decoders' functions, which keep position arithmetic out of the graphs (`decoder.rs`).
//!
//! Frequency `i` of a head of `head_dim` is `theta^(-2i/head_dim)` (`transformers`'
//! `_compute_default_rope_parameters`), with Llama 3's scaling where the model has it
//! (`_compute_llama3_parameters`); position `p`'s row holds `cos(p·f_i)` (and `sin`) for every
//! `i`, twice: once for each half of the head, as `rotate_half` expects. Computed in f64,
//! rounded to f32 once.
//!
//! An inference module records its model's settings on each function as `fbc.rope = [theta]` or
//! `[theta, factor, low_freq_factor, high_freq_factor, original_max_positions]`, so that `fbc
//! generate` builds the same tables without the model at hand.

use fbc_ir::Attr;

pub use super::config::{Llama3Scaling, Rope};

/// The function attribute an inference module records its RoPE settings in.
pub const ATTR: &str = "fbc.rope";

/// The `head_dim / 2` frequencies of `rope`.
pub fn frequencies(rope: &Rope, head_dim: u64) -> Vec<f64> {
    let d = head_dim as f64;
    (0..head_dim / 2)
        .map(|i| {
            let f = 1.0 / rope.theta.powf(2.0 * i as f64 / d);
            match rope.llama3 {
                None => f,
                Some(s) => {
                    let wavelen = 2.0 * std::f64::consts::PI / f;
                    let (low, high) = (
                        s.original_max_positions / s.low_freq_factor,
                        s.original_max_positions / s.high_freq_factor,
                    );
                    if wavelen < high {
                        f
                    } else if wavelen > low {
                        f / s.factor
                    } else {
                        let smooth = (s.original_max_positions / wavelen - s.low_freq_factor)
                            / (s.high_freq_factor - s.low_freq_factor);
                        (1.0 - smooth) * f / s.factor + smooth * f
                    }
                }
            }
        })
        .collect()
}

/// The `[n, head_dim]` tables `(cos, sin)` of positions `first .. first + n`, row-major.
pub fn tables(rope: &Rope, head_dim: u64, first: u64, n: u64) -> (Vec<f32>, Vec<f32>) {
    let freqs = frequencies(rope, head_dim);
    let len = (n * head_dim) as usize;
    let (mut cos, mut sin) = (Vec::with_capacity(len), Vec::with_capacity(len));
    for p in first..first + n {
        // Each frequency in both halves of the head.
        for &f in freqs.iter().chain(&freqs) {
            let a = p as f64 * f;
            cos.push(a.cos() as f32);
            sin.push(a.sin() as f32);
        }
    }
    (cos, sin)
}

/// `rope` as the value of [`ATTR`].
pub fn to_attr(rope: &Rope) -> Attr {
    let mut v = vec![rope.theta];
    if let Some(s) = rope.llama3 {
        v.extend([s.factor, s.low_freq_factor, s.high_freq_factor, s.original_max_positions]);
    }
    Attr::Array(v.into_iter().map(Attr::Float).collect())
}

/// The settings [`to_attr`] wrote; `None` for anything else.
pub fn from_attr(a: &Attr) -> Option<Rope> {
    let v: Vec<f64> = a.as_array()?.iter().map(Attr::as_float).collect::<Option<_>>()?;
    let ok = |x: f64| x.is_finite() && x > 0.0;
    match v[..] {
        [theta] if ok(theta) => Some(Rope { theta, llama3: None }),
        [theta, factor, low, high, orig]
            if [theta, factor, low, high, orig].into_iter().all(ok) && high > low =>
        {
            Some(Rope {
                theta,
                llama3: Some(Llama3Scaling {
                    factor,
                    low_freq_factor: low,
                    high_freq_factor: high,
                    original_max_positions: orig,
                }),
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hand-worked frequencies: theta 10000, head 4 → 1 and 0.01; Llama 3's scaling keeps the
    /// short wavelength, divides the long one by the factor and interpolates in between.
    #[test]
    fn frequencies_follow_the_formulas() {
        let plain = Rope { theta: 10000.0, llama3: None };
        assert_eq!(frequencies(&plain, 4), vec![1.0, 0.01]);
        let s = Llama3Scaling {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_positions: 1000.0,
        };
        let scaled = Rope { theta: 10000.0, llama3: Some(s) };
        // head 8: 1, 0.1, 0.01, 0.001; wavelengths 6.3, 62.8, 628, 6283 against 250 and 1000.
        let f = frequencies(&scaled, 8);
        assert_eq!(f[0], 1.0);
        assert!((f[1] - 0.1).abs() < 1e-15);
        let wavelen = 2.0 * std::f64::consts::PI / 0.01;
        let smooth = (1000.0 / wavelen - 1.0) / 3.0;
        assert!((f[2] - ((1.0 - smooth) * 0.01 / 8.0 + smooth * 0.01)).abs() < 1e-15);
        assert!((f[3] - 0.001 / 8.0).abs() < 1e-18);
    }

    #[test]
    fn tables_repeat_each_frequency_in_both_halves() {
        let rope = Rope { theta: 10000.0, llama3: None };
        let (cos, sin) = tables(&rope, 4, 2, 2);
        let row = |p: f64| [p.cos(), (p * 0.01).cos(), p.cos(), (p * 0.01).cos()].map(|x| x as f32);
        assert_eq!(cos[..4], row(2.0));
        assert_eq!(cos[4..], row(3.0));
        assert_eq!(sin[1], (2.0f64 * 0.01).sin() as f32);
        assert_eq!(sin[3], sin[1]);
    }

    #[test]
    fn the_attribute_round_trips_and_refuses_nonsense() {
        for rope in [Rope { theta: 500000.0, llama3: None }, super::super::config::LLAMA32_1B.rope]
        {
            assert_eq!(from_attr(&to_attr(&rope)), Some(rope));
        }
        let floats = |v: &[f64]| Attr::Array(v.iter().map(|&x| Attr::Float(x)).collect());
        assert_eq!(from_attr(&floats(&[0.0])), None);
        assert_eq!(from_attr(&floats(&[1e4, 8.0, 4.0, 1.0, 1e3])), None); // high <= low
        assert_eq!(from_attr(&floats(&[1e4, 8.0])), None);
        assert_eq!(from_attr(&Attr::Int(3)), None);
    }
}

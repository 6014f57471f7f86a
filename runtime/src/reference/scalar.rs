//! The element types the reference kernels compute in, and rounding to 16-bit floats.
//!
//! [`Real`] is implemented for `f32` (the default: what `tensor<..xf32>` means) and `f64` (used by
//! gradient checks, where finite differences need the extra precision). `f16` and `bf16` tensors
//! are not a separate element type: the interpreter computes them in `f32` and rounds every op's
//! result with [`Precision::round`], which is how mixed-precision hardware behaves when each
//! kernel stores its output in the narrow type.

use std::fmt::{Debug, Display};
use std::str::FromStr;

use super::error::KernelError;
use super::tensor::Tensor;

/// A float element type of the reference kernels: `f32` or `f64`.
pub trait Real:
    num_traits::Float + num_traits::FloatConst + Default + Debug + Display + Send + Sync + 'static
{
    /// The error function, to within about one ulp (libm's port of musl's `erf`/`erff`).
    fn erf(self) -> Self;
    /// An `f64` constant or attribute (such as `eps` or a scale factor) in this type, rounded to
    /// nearest.
    fn lit(value: f64) -> Self;
    /// This value widened (exactly) to `f64`.
    fn as_f64(self) -> f64;
    /// `c = a · b` for an `m×k` `a` and a `k×n` `b`, each read through (row, column) element
    /// strides, into the row-major `m×n` `c`: the GEMM core of [`matmul`](super::matmul()),
    /// implemented by `matrixmultiply` for `f32` and `f64` (see `reference/gemm.rs`). Errors when a
    /// matrix does not fit its slice.
    #[doc(hidden)]
    #[allow(clippy::too_many_arguments)]
    fn gemm(
        m: usize,
        k: usize,
        n: usize,
        a: (&[Self], usize, usize),
        b: (&[Self], usize, usize),
        c: &mut [Self],
    ) -> Result<(), KernelError>;
}

/// Forwards [`Real::gemm`] to the bounds-checked `matrixmultiply` wrapper.
fn gemm_via<T: super::gemm::GemmElem>(
    m: usize,
    k: usize,
    n: usize,
    a: (&[T], usize, usize),
    b: (&[T], usize, usize),
    c: &mut [T],
) -> Result<(), KernelError> {
    use super::gemm::MatRef;
    let a = MatRef { data: a.0, rs: a.1, cs: a.2 };
    let b = MatRef { data: b.0, rs: b.1, cs: b.2 };
    super::gemm::gemm(m, k, n, a, b, c)
}

impl Real for f32 {
    fn erf(self) -> Self {
        libm::erff(self)
    }
    fn lit(value: f64) -> Self {
        value as f32
    }
    fn as_f64(self) -> f64 {
        f64::from(self)
    }
    fn gemm(
        m: usize,
        k: usize,
        n: usize,
        a: (&[Self], usize, usize),
        b: (&[Self], usize, usize),
        c: &mut [Self],
    ) -> Result<(), KernelError> {
        gemm_via(m, k, n, a, b, c)
    }
}

impl Real for f64 {
    fn erf(self) -> Self {
        libm::erf(self)
    }
    fn lit(value: f64) -> Self {
        value
    }
    fn as_f64(self) -> f64 {
        self
    }
    fn gemm(
        m: usize,
        k: usize,
        n: usize,
        a: (&[Self], usize, usize),
        b: (&[Self], usize, usize),
        c: &mut [Self],
    ) -> Result<(), KernelError> {
        gemm_via(m, k, n, a, b, c)
    }
}

/// `x` rounded to the nearest IEEE binary16 value (ties to even; overflow gives ±inf), returned
/// as `f32`.
pub fn round_f16(x: f32) -> f32 {
    half::f16::from_f32(x).to_f32()
}

/// `x` rounded to the nearest bfloat16 value (ties to even; NaN stays NaN), returned as `f32`.
pub fn round_bf16(x: f32) -> f32 {
    half::bf16::from_f32(x).to_f32()
}

/// Every element of `x` rounded to binary16 (see [`round_f16`]).
pub fn round_to_f16(x: &Tensor<f32>) -> Tensor<f32> {
    x.map(round_f16)
}

/// Every element of `x` rounded to bfloat16 (see [`round_bf16`]).
pub fn round_to_bf16(x: &Tensor<f32>) -> Tensor<f32> {
    x.map(round_bf16)
}

/// The storage precision of a float tensor whose arithmetic the interpreter does in `f32`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Precision {
    /// `f32`: results are stored as computed.
    #[default]
    F32,
    /// `f16`: each op's result is rounded to binary16.
    F16,
    /// `bf16`: each op's result is rounded to bfloat16.
    Bf16,
}

impl Precision {
    /// `x` as it would be stored in this precision (a no-op for [`Precision::F32`]).
    pub fn round(self, x: Tensor<f32>) -> Tensor<f32> {
        match self {
            Precision::F32 => x,
            Precision::F16 => round_to_f16(&x),
            Precision::Bf16 => round_to_bf16(&x),
        }
    }
}

impl FromStr for Precision {
    type Err = KernelError;

    /// Parses an element-type name of the IR: `f32`, `f16` or `bf16`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "f32" => Ok(Precision::F32),
            "f16" => Ok(Precision::F16),
            "bf16" => Ok(Precision::Bf16),
            other => Err(KernelError::Attribute {
                op: "precision",
                message: format!("unknown float type {other:?} (expected f32, f16 or bf16)"),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erf_matches_known_values() {
        // Values of erf from Abramowitz & Stegun, table 7.1, and erf(x) ~ 2x/sqrt(pi) near 0.
        let cases: [(f64, f64); 7] = [
            (0.0, 0.0),
            (0.5, 0.520_499_877_813_046_5),
            (1.0, 0.842_700_792_949_714_9),
            (2.0, 0.995_322_265_018_952_7),
            (-3.0, -0.999_977_909_503_001_4),
            (1e-3, 0.001_128_378_790_969_236_5),
            (4.5, 0.999_999_999_803_383_9),
        ];
        for (x, want) in cases {
            let got = Real::erf(x);
            assert!((got - want).abs() <= 1e-15 * want.abs().max(1e-300), "erf({x}) = {got}");
            let got32 = Real::erf(x as f32);
            assert!((f64::from(got32) - want).abs() <= 2e-7 * want.abs(), "erff({x}) = {got32}");
        }
    }

    #[test]
    fn f16_rounds_to_nearest_even() {
        // binary16 has 10 fraction bits: the ulp of 1.0 is 2^-10.
        let ulp = 2f32.powi(-10);
        assert_eq!(round_f16(1.0 + ulp / 2.0), 1.0); // tie, even is 1.0
        assert_eq!(round_f16(1.0 + 1.5 * ulp), 1.0 + 2.0 * ulp); // tie, even is 1 + 2 ulp
        assert_eq!(round_f16(1.0 + 0.6 * ulp), 1.0 + ulp);
        assert_eq!(round_f16(65504.0), 65504.0);
        assert_eq!(round_f16(65520.0), f32::INFINITY);
        assert!(round_f16(f32::NAN).is_nan());
    }

    #[test]
    fn bf16_rounds_to_nearest_even() {
        // bfloat16 has 7 fraction bits: the ulp of 1.0 is 2^-7.
        let ulp = 2f32.powi(-7);
        assert_eq!(round_bf16(1.0 + ulp / 2.0), 1.0);
        assert_eq!(round_bf16(1.0 + 1.5 * ulp), 1.0 + 2.0 * ulp);
        // 3e38 = 1.7632.. * 2^127; 7 fraction bits keep 226/128 = 1.765625.
        assert_eq!(round_bf16(3.0e38), 1.765_625 * 2f32.powi(127));
        assert!(round_bf16(f32::NAN).is_nan());
    }

    #[test]
    fn precision_rounds_tensors() {
        let x = Tensor::from_vec(vec![1.0f32 + 2f32.powi(-9), 0.1]);
        assert_eq!(Precision::F32.round(x.clone()), x);
        assert_eq!(Precision::F16.round(x.clone()).data(), &[1.0 + 2f32.powi(-9), 0.099_975_586]);
        assert_eq!(Precision::Bf16.round(x).data(), &[1.0, 0.100_097_656]);
        assert_eq!("bf16".parse::<Precision>(), Ok(Precision::Bf16));
        assert!("f8".parse::<Precision>().is_err());
    }
}

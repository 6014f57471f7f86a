//! Elementwise kernels: the broadcasting binary ops and the unary activations of the tensor
//! dialect.
//!
//! Binary ops broadcast their operands as NumPy does ([`broadcast_shapes`]) and name themselves
//! in the error when the shapes do not broadcast. Unary ops never fail. NaN inputs give NaN
//! outputs everywhere (including `max`, `min` and `relu`), so a NaN produced upstream stays
//! visible in the oracle's results instead of being silently cleaned.
//!
//! [`broadcast_shapes`]: super::tensor::broadcast_shapes

use std::str::FromStr;

use super::error::{KernelError, Result};
use super::scalar::Real;
use super::tensor::{zip_with, Tensor};

/// `tensor.add`: `a + b`, broadcasting.
pub fn add<T: Real>(a: &Tensor<T>, b: &Tensor<T>) -> Result<Tensor<T>> {
    zip_with("add", a, b, |x, y| x + y)
}

/// `tensor.sub`: `a - b`, broadcasting.
pub fn sub<T: Real>(a: &Tensor<T>, b: &Tensor<T>) -> Result<Tensor<T>> {
    zip_with("sub", a, b, |x, y| x - y)
}

/// `tensor.mul`: `a · b`, broadcasting.
pub fn mul<T: Real>(a: &Tensor<T>, b: &Tensor<T>) -> Result<Tensor<T>> {
    zip_with("mul", a, b, |x, y| x * y)
}

/// `tensor.div`: `a / b`, broadcasting; IEEE semantics (`x / 0` is ±inf, `0 / 0` is NaN).
pub fn div<T: Real>(a: &Tensor<T>, b: &Tensor<T>) -> Result<Tensor<T>> {
    zip_with("div", a, b, |x, y| x / y)
}

/// `tensor.max`: the larger of `a` and `b`, broadcasting; NaN if either is NaN.
pub fn max<T: Real>(a: &Tensor<T>, b: &Tensor<T>) -> Result<Tensor<T>> {
    zip_with("max", a, b, max1)
}

/// `tensor.min`: the smaller of `a` and `b`, broadcasting; NaN if either is NaN.
pub fn min<T: Real>(a: &Tensor<T>, b: &Tensor<T>) -> Result<Tensor<T>> {
    zip_with("min", a, b, min1)
}

/// `tensor.pow`: `a ^ b`, broadcasting, with C's `pow` (`powf`) semantics.
pub fn pow<T: Real>(a: &Tensor<T>, b: &Tensor<T>) -> Result<Tensor<T>> {
    zip_with("pow", a, b, T::powf)
}

/// `tensor.select`: `a` where `mask` is nonzero, else `b`, broadcasting the three operands.
pub fn select<T: Real>(mask: &Tensor<T>, a: &Tensor<T>, b: &Tensor<T>) -> Result<Tensor<T>> {
    let shape = super::tensor::broadcast_shapes(mask.shape(), a.shape())?;
    let shape = super::tensor::broadcast_shapes(&shape, b.shape())?;
    let m = mask.broadcast_to(&shape)?;
    let chosen = m.zip(&a.broadcast_to(&shape)?, |m, x| (m != T::zero(), x))?;
    zip_with("select", &chosen, &b.broadcast_to(&shape)?, |(take, x), y| if take { x } else { y })
}

/// `tensor.erf`: the Gauss error function.
pub fn erf<T: Real>(x: &Tensor<T>) -> Tensor<T> {
    x.map(T::erf)
}

/// NaN-propagating maximum of two scalars.
pub(crate) fn max1<T: Real>(x: T, y: T) -> T {
    if x.is_nan() || y.is_nan() {
        T::nan()
    } else if x >= y {
        x
    } else {
        y
    }
}

/// NaN-propagating minimum of two scalars.
pub(crate) fn min1<T: Real>(x: T, y: T) -> T {
    if x.is_nan() || y.is_nan() {
        T::nan()
    } else if x <= y {
        x
    } else {
        y
    }
}

/// `tensor.neg`: `-x`.
pub fn neg<T: Real>(x: &Tensor<T>) -> Tensor<T> {
    x.map(|v| -v)
}

/// `tensor.exp`: `e^x`.
pub fn exp<T: Real>(x: &Tensor<T>) -> Tensor<T> {
    x.map(T::exp)
}

/// `tensor.log`: the natural logarithm; `log(0) = -inf`, negative inputs give NaN.
pub fn log<T: Real>(x: &Tensor<T>) -> Tensor<T> {
    x.map(T::ln)
}

/// `tensor.sqrt`: the square root; negative inputs give NaN.
pub fn sqrt<T: Real>(x: &Tensor<T>) -> Tensor<T> {
    x.map(T::sqrt)
}

/// `tensor.rsqrt`: `1 / sqrt(x)`; `rsqrt(0) = +inf`.
pub fn rsqrt<T: Real>(x: &Tensor<T>) -> Tensor<T> {
    x.map(|v| v.sqrt().recip())
}

/// `tensor.tanh`: the hyperbolic tangent.
pub fn tanh<T: Real>(x: &Tensor<T>) -> Tensor<T> {
    x.map(T::tanh)
}

/// `tensor.sigmoid`: `1 / (1 + e^-x)`, evaluated without overflow for any `x` (as `e^x / (1 +
/// e^x)` when `x < 0`).
pub fn sigmoid<T: Real>(x: &Tensor<T>) -> Tensor<T> {
    x.map(sigmoid1)
}

pub(crate) fn sigmoid1<T: Real>(x: T) -> T {
    if x >= T::zero() {
        (T::one() + (-x).exp()).recip()
    } else {
        let e = x.exp();
        e / (T::one() + e)
    }
}

/// `tensor.relu`: `max(x, 0)`; `relu(-0.0) = 0`, `relu(NaN) = NaN`.
pub fn relu<T: Real>(x: &Tensor<T>) -> Tensor<T> {
    x.map(|v| if v > T::zero() || v.is_nan() { v } else { T::zero() })
}

/// `tensor.silu`: `x · sigmoid(x)`.
pub fn silu<T: Real>(x: &Tensor<T>) -> Tensor<T> {
    x.map(|v| v * sigmoid1(v))
}

/// Which formula `tensor.gelu` evaluates (its `approximate` attribute).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum GeluApproximation {
    /// `approximate = "none"`: the exact `0.5·x·(1 + erf(x/√2))`.
    #[default]
    None,
    /// `approximate = "tanh"`: `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`.
    Tanh,
}

impl FromStr for GeluApproximation {
    type Err = KernelError;

    /// Parses the attribute value: `"none"` or `"tanh"`.
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "none" => Ok(GeluApproximation::None),
            "tanh" => Ok(GeluApproximation::Tanh),
            other => Err(KernelError::Attribute {
                op: "gelu",
                message: format!("approximate must be \"none\" or \"tanh\", got {other:?}"),
            }),
        }
    }
}

/// √(2/π), the tanh-form GELU's scale.
pub(crate) const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;
/// The cubic coefficient of the tanh-form GELU.
pub(crate) const GELU_CUBIC: f64 = 0.044_715;

/// `tensor.gelu`: with [`GeluApproximation::None`], `0.5·x·(1 + erf(x/√2))` (erf from libm,
/// about one ulp); with [`GeluApproximation::Tanh`], `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`.
pub fn gelu<T: Real>(x: &Tensor<T>, approximate: GeluApproximation) -> Tensor<T> {
    let half = T::lit(0.5);
    match approximate {
        GeluApproximation::None => {
            x.map(|v| half * v * (T::one() + (v * T::FRAC_1_SQRT_2()).erf()))
        }
        GeluApproximation::Tanh => {
            let (k, c) = (T::lit(SQRT_2_OVER_PI), T::lit(GELU_CUBIC));
            x.map(|v| half * v * (T::one() + (k * (v + c * v * v * v)).tanh()))
        }
    }
}

/// `tensor.scale`: `x · factor`, with `factor` rounded to `T` first.
pub fn scale<T: Real>(x: &Tensor<T>, factor: f64) -> Tensor<T> {
    let f = T::lit(factor);
    x.map(|v| v * f)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v64(data: &[f64]) -> Tensor<f64> {
        Tensor::from_vec(data.to_vec())
    }

    fn assert_close(got: &[f64], want: &[f64], tol: f64) {
        assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() <= tol * w.abs().max(1.0), "got {got:?}, want {want:?}");
        }
    }

    #[test]
    fn binary_ops_broadcast_3x1_with_1x4() {
        let a = Tensor::new(vec![3, 1], vec![1.0f32, 2.0, 4.0]).unwrap();
        let b = Tensor::new(vec![1, 4], vec![1.0f32, 2.0, -1.0, 0.5]).unwrap();
        let s = add(&a, &b).unwrap();
        assert_eq!(s.shape(), &[3, 4]);
        assert_eq!(s.data(), &[2.0, 3.0, 0.0, 1.5, 3.0, 4.0, 1.0, 2.5, 5.0, 6.0, 3.0, 4.5]);
        assert_eq!(
            sub(&a, &b).unwrap().data(),
            &[0.0, -1.0, 2.0, 0.5, 1.0, 0.0, 3.0, 1.5, 3.0, 2.0, 5.0, 3.5]
        );
        assert_eq!(
            mul(&a, &b).unwrap().data(),
            &[1.0, 2.0, -1.0, 0.5, 2.0, 4.0, -2.0, 1.0, 4.0, 8.0, -4.0, 2.0]
        );
        assert_eq!(
            div(&a, &b).unwrap().data(),
            &[1.0, 0.5, -1.0, 2.0, 2.0, 1.0, -2.0, 4.0, 4.0, 2.0, -4.0, 8.0]
        );
        assert_eq!(
            max(&a, &b).unwrap().data(),
            &[1.0, 2.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0, 4.0, 4.0, 4.0, 4.0]
        );
        assert_eq!(
            min(&a, &b).unwrap().data(),
            &[1.0, 1.0, -1.0, 0.5, 1.0, 2.0, -1.0, 0.5, 1.0, 2.0, -1.0, 0.5]
        );
        // A rank-0 operand broadcasts against anything.
        assert_eq!(add(&Tensor::scalar(1.0f32), &a).unwrap().data(), &[2.0, 3.0, 5.0]);
    }

    #[test]
    fn binary_ops_reject_incompatible_shapes() {
        let a = Tensor::<f32>::zeros(&[2, 3]).unwrap();
        let b = Tensor::<f32>::zeros(&[4]).unwrap();
        assert_eq!(
            add(&a, &b),
            Err(KernelError::Broadcast { op: "add", lhs: vec![2, 3], rhs: vec![4] })
        );
        assert!(matches!(div(&b, &a), Err(KernelError::Broadcast { op: "div", .. })));
    }

    #[test]
    fn max_and_min_propagate_nan() {
        let a = v64(&[f64::NAN, 1.0]);
        let b = v64(&[0.0, f64::NAN]);
        assert!(max(&a, &b).unwrap().data().iter().all(|v| v.is_nan()));
        assert!(min(&a, &b).unwrap().data().iter().all(|v| v.is_nan()));
    }

    #[test]
    fn unary_ops_on_hand_values() {
        let x = v64(&[-2.0, 0.0, 1.0, 4.0]);
        assert_eq!(neg(&x).data(), &[2.0, -0.0, -1.0, -4.0]);
        assert_eq!(relu(&x).data(), &[0.0, 0.0, 1.0, 4.0]);
        assert_eq!(scale(&x, 0.5).data(), &[-1.0, 0.0, 0.5, 2.0]);
        assert_close(sqrt(&v64(&[4.0, 2.25])).data(), &[2.0, 1.5], 0.0);
        assert_close(rsqrt(&v64(&[4.0, 0.25])).data(), &[0.5, 2.0], 0.0);
        assert_eq!(rsqrt(&v64(&[0.0])).data(), &[f64::INFINITY]);
        assert_close(exp(&v64(&[0.0, 1.0])).data(), &[1.0, std::f64::consts::E], 1e-15);
        assert_close(log(&v64(&[1.0, std::f64::consts::E])).data(), &[0.0, 1.0], 1e-15);
        // tanh(ln 2) = (2 - 1/2) / (2 + 1/2) = 0.6
        assert_close(tanh(&v64(&[std::f64::consts::LN_2])).data(), &[0.6], 1e-15);
        // sigmoid(ln 3) = 3/4; sigmoid(-ln 3) = 1/4
        let l3 = 3f64.ln();
        assert_close(sigmoid(&v64(&[l3, -l3, 0.0])).data(), &[0.75, 0.25, 0.5], 1e-15);
        // silu(ln 3) = 0.75 ln 3
        assert_close(silu(&v64(&[l3])).data(), &[0.75 * l3], 1e-15);
        assert!(relu(&v64(&[f64::NAN])).data()[0].is_nan());
    }

    #[test]
    fn sigmoid_saturates_without_nan() {
        let x = Tensor::from_vec(vec![-1000.0f32, 1000.0, -90.0]);
        let y = sigmoid(&x);
        assert_eq!(&y.data()[..2], &[0.0, 1.0]);
        assert!(y.data()[2] > 0.0 && y.data()[2] < 1e-38);
        assert_eq!(silu(&x).data()[..2], [-0.0, 1000.0]);
    }

    #[test]
    fn gelu_erf_form_matches_known_values() {
        // Φ(1) = 0.841344746068542948..., so gelu(1) = Φ(1) and gelu(-1) = -(1 - Φ(1)).
        let x = v64(&[1.0, -1.0, 0.0, 0.5, 3.0]);
        let want = [
            0.841_344_746_068_542_9,
            -0.158_655_253_931_457_07,
            0.0,
            0.345_731_230_637_006_56,
            2.995_950_305_905_11,
        ];
        assert_close(gelu(&x, GeluApproximation::None).data(), &want, 1e-15);
        let y32 = gelu(&x.cast::<f32>(), GeluApproximation::None).cast::<f64>();
        assert_close(y32.data(), &want, 3e-7);
    }

    #[test]
    fn gelu_tanh_form_matches_known_values() {
        let x = v64(&[1.0, -0.5, 2.0]);
        let want = [0.841_191_990_608_276_8, -0.154_285_990_174_856_06, 1.954_597_694_087_775];
        assert_close(gelu(&x, GeluApproximation::Tanh).data(), &want, 1e-15);
        assert_eq!("tanh".parse(), Ok(GeluApproximation::Tanh));
        assert_eq!("none".parse(), Ok(GeluApproximation::None));
        assert!("erf".parse::<GeluApproximation>().is_err());
    }
}

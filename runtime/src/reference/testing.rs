//! Test support: a seeded generator of random tensors and a central finite-difference gradient
//! checker in `f64`.
//!
//! The checker compares an analytic gradient with `(L(x + h·e_i) - L(x - h·e_i)) / 2h` for every
//! element `i`, where `L` is a scalar loss (usually `Σ f(x)·w` for a random upstream gradient
//! `w`). With `h = 1e-6` the truncation error is `O(h²)` and the rounding error about
//! `1e-16·|L|/h`, both far below the tolerance `1e-6·|g| + 1e-7`.

use super::tensor::Tensor;

/// A SplitMix64 generator: deterministic, seedable, and good enough for test data.
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[lo, hi)`.
    pub(crate) fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        let unit = (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        lo + (hi - lo) * unit
    }

    /// A tensor of `shape` with elements uniform in `[lo, hi)`.
    pub(crate) fn tensor(&mut self, shape: &[usize], lo: f64, hi: f64) -> Tensor<f64> {
        Tensor::from_fn(shape, |_| self.uniform(lo, hi)).unwrap()
    }

    /// A tensor of `shape` with integers uniform in `0..bound`.
    pub(crate) fn ids(&mut self, shape: &[usize], bound: usize) -> Tensor<i32> {
        Tensor::from_fn(shape, |_| (self.next_u64() % bound as u64) as i32).unwrap()
    }
}

/// `Σ a·b` over two tensors of the same shape.
pub(crate) fn dot(a: &Tensor<f64>, b: &Tensor<f64>) -> f64 {
    assert_eq!(a.shape(), b.shape(), "dot of different shapes");
    a.data().iter().zip(b.data()).map(|(x, y)| x * y).sum()
}

/// Asserts that `analytic` is the gradient of `loss` at `x`, element by element, by central
/// differences with step `1e-6`.
pub(crate) fn check_grad(
    what: &str,
    x: &Tensor<f64>,
    analytic: &Tensor<f64>,
    loss: impl Fn(&Tensor<f64>) -> f64,
) {
    const H: f64 = 1e-6;
    assert_eq!(x.shape(), analytic.shape(), "{what}: gradient shape");
    let mut probe = x.clone();
    for i in 0..x.numel() {
        let orig = x.data()[i];
        probe.data_mut()[i] = orig + H;
        let up = loss(&probe);
        probe.data_mut()[i] = orig - H;
        let down = loss(&probe);
        probe.data_mut()[i] = orig;
        let numeric = (up - down) / (2.0 * H);
        let exact = analytic.data()[i];
        let tol = 1e-6 * exact.abs().max(numeric.abs()) + 1e-7;
        assert!(
            (exact - numeric).abs() <= tol,
            "{what}: element {i} of shape {:?}: analytic {exact}, finite difference {numeric}",
            x.shape()
        );
    }
}

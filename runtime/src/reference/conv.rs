//! Reference kernels of the convolutional ops: `conv2d` and its input and weight gradients,
//! `group_norm` and its gradient, nearest `upsample`.
//!
//! The three convolution kernels walk the same taps in the same order ([`Conv2dGeometry::taps`]):
//! every `(output element, input element, weight element)` triple that the definition multiplies,
//! padding taps (outside the input) left out. The forward accumulates `x·w` into the output, the
//! input gradient `dy·w` into `dx`, the weight gradient `dy·x` into `dw`; so the three are adjoint
//! by construction, and the tests check them against finite differences and a separate naive
//! definition anyway.

use super::error::{KernelError, Result};
use super::nn::check_param;
use super::scalar::Real;
use super::tensor::Tensor;

/// A convolution's attributes with padding resolved (`"same"` already turned into numbers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conv2dParams {
    /// `[sh, sw]`, each ≥ 1.
    pub stride: [usize; 2],
    /// `[top, left, bottom, right]`.
    pub padding: [usize; 4],
    /// `[dh, dw]`, each ≥ 1.
    pub dilation: [usize; 2],
    /// ≥ 1, dividing both channel counts.
    pub groups: usize,
}

impl Default for Conv2dParams {
    fn default() -> Self {
        Conv2dParams { stride: [1, 1], padding: [0; 4], dilation: [1, 1], groups: 1 }
    }
}

/// The shapes of one convolution, checked: input `[N, C, H, W]`, weight `[O, C/groups, KH, KW]`,
/// output `[N, O, OH, OW]`.
#[derive(Debug, Clone)]
struct Conv2dGeometry {
    x: [usize; 4],
    w: [usize; 4],
    out: [usize; 4],
    p: Conv2dParams,
}

impl Conv2dGeometry {
    fn new(op: &'static str, x: &[usize], w: &[usize], p: Conv2dParams) -> Result<Self> {
        let bad = |message: String| KernelError::shape(op, message);
        let x4: [usize; 4] =
            x.try_into().map_err(|_| bad(format!("the input must be [N, C, H, W], got {x:?}")))?;
        let w4: [usize; 4] = w
            .try_into()
            .map_err(|_| bad(format!("the weight must be [O, C/groups, KH, KW], got {w:?}")))?;
        let [n, c, h, wd] = x4;
        let [o, cg, kh, kw] = w4;
        let g = p.groups;
        if p.stride.contains(&0) || p.dilation.contains(&0) || g == 0 {
            return Err(bad(format!("stride, dilation and groups must be ≥ 1, got {p:?}")));
        }
        if c % g != 0 || o % g != 0 || cg != c / g {
            return Err(bad(format!(
                "groups = {g} must divide C = {c} and O = {o}, and the weight {w:?} must have \
                 C/groups channels"
            )));
        }
        let mut out = [n, o, 0, 0];
        for (a, (input, k)) in [(h, kh), (wd, kw)].into_iter().enumerate() {
            let padded = input + p.padding[a] + p.padding[a + 2];
            let ext = p.dilation[a] * k.saturating_sub(1) + 1;
            if k == 0 || ext > padded {
                return Err(bad(format!(
                    "the dilated kernel {ext} does not fit in the padded input {padded} along \
                     spatial axis {a}"
                )));
            }
            out[2 + a] = (padded - ext) / p.stride[a] + 1;
        }
        Ok(Conv2dGeometry { x: x4, w: w4, out, p })
    }

    /// Calls `f(out_index, x_index, w_index)` (flat row-major offsets) for every product of the
    /// convolution whose input position lies inside the input, in row-major order of
    /// `(n, o, oh, ow, c, kh, kw)`.
    fn taps(&self, mut f: impl FnMut(usize, usize, usize)) {
        let [n, c, h, w] = self.x;
        let [o, cg, kh, kw] = self.w;
        let [_, _, oh, ow] = self.out;
        let og = o / self.p.groups;
        let [sh, sw] = self.p.stride;
        let [dh, dw] = self.p.dilation;
        let [top, left, _, _] = self.p.padding;
        let mut oi = 0;
        for b in 0..n {
            for oc in 0..o {
                let c0 = (oc / og) * cg;
                for i in 0..oh {
                    for j in 0..ow {
                        for ci in 0..cg {
                            for p in 0..kh {
                                let Some(ih) =
                                    (i * sh + p * dh).checked_sub(top).filter(|&v| v < h)
                                else {
                                    continue;
                                };
                                for q in 0..kw {
                                    let Some(iw) =
                                        (j * sw + q * dw).checked_sub(left).filter(|&v| v < w)
                                    else {
                                        continue;
                                    };
                                    let xi = ((b * c + c0 + ci) * h + ih) * w + iw;
                                    let wi = ((oc * cg + ci) * kh + p) * kw + q;
                                    f(oi, xi, wi);
                                }
                            }
                        }
                        oi += 1;
                    }
                }
            }
        }
    }
}

/// `tensor.conv2d`: the cross-correlation of `x` `[N, C, H, W]` with `w`
/// `[O, C/groups, KH, KW]` under `p`, plus `bias` `[O]` per output channel when given.
pub fn conv2d<T: Real>(
    x: &Tensor<T>,
    w: &Tensor<T>,
    bias: Option<&Tensor<T>>,
    p: &Conv2dParams,
) -> Result<Tensor<T>> {
    const OP: &str = "conv2d";
    let geo = Conv2dGeometry::new(OP, x.shape(), w.shape(), *p)?;
    let mut out = Tensor::zeros(&geo.out)?;
    if let Some(b) = bias {
        check_param(OP, "bias", b, geo.out[1])?;
        let plane = geo.out[2] * geo.out[3];
        for (k, v) in out.data_mut().iter_mut().enumerate() {
            *v = b.data()[(k / plane) % geo.out[1]];
        }
    }
    let (xd, wd, od) = (x.data(), w.data(), out.data_mut());
    geo.taps(|oi, xi, wi| od[oi] = od[oi] + xd[xi] * wd[wi]);
    Ok(out)
}

/// Errors unless `dy` has the convolution's output shape.
fn check_dy<T>(op: &'static str, geo: &Conv2dGeometry, dy: &Tensor<T>) -> Result<()> {
    if dy.shape() == geo.out {
        return Ok(());
    }
    Err(KernelError::shape(
        op,
        format!("dy must have the output shape {:?}, got {:?}", geo.out, dy.shape()),
    ))
}

/// `tensor.conv2d_grad_input`: the gradient of [`conv2d`] with respect to an input of shape
/// `x_shape`, for the output gradient `dy` and the weight `w`.
pub fn conv2d_grad_input<T: Real>(
    dy: &Tensor<T>,
    w: &Tensor<T>,
    x_shape: &[usize],
    p: &Conv2dParams,
) -> Result<Tensor<T>> {
    const OP: &str = "conv2d_grad_input";
    let geo = Conv2dGeometry::new(OP, x_shape, w.shape(), *p)?;
    check_dy(OP, &geo, dy)?;
    let mut dx = Tensor::zeros(x_shape)?;
    let (gd, wd, out) = (dy.data(), w.data(), dx.data_mut());
    geo.taps(|oi, xi, wi| out[xi] = out[xi] + gd[oi] * wd[wi]);
    Ok(dx)
}

/// `tensor.conv2d_grad_weight`: the gradient of [`conv2d`] with respect to a weight of shape
/// `w_shape`, for the input `x` and the output gradient `dy`.
pub fn conv2d_grad_weight<T: Real>(
    x: &Tensor<T>,
    dy: &Tensor<T>,
    w_shape: &[usize],
    p: &Conv2dParams,
) -> Result<Tensor<T>> {
    const OP: &str = "conv2d_grad_weight";
    let geo = Conv2dGeometry::new(OP, x.shape(), w_shape, *p)?;
    check_dy(OP, &geo, dy)?;
    let mut dw = Tensor::zeros(w_shape)?;
    let (xd, gd, out) = (x.data(), dy.data(), dw.data_mut());
    geo.taps(|oi, xi, wi| out[wi] = out[wi] + gd[oi] * xd[xi]);
    Ok(dw)
}

/// The shape of a group norm's input: `(N, C, spatial size)`, checked against `groups` and the
/// per-channel parameters.
fn group_norm_dims<T>(
    op: &'static str,
    x: &Tensor<T>,
    params: &[(&str, &Tensor<T>)],
    groups: usize,
) -> Result<(usize, usize, usize)> {
    let s = x.shape();
    if s.len() < 2 {
        return Err(KernelError::shape(op, format!("x must be [N, C, ...], got {s:?}")));
    }
    let (n, c) = (s[0], s[1]);
    if groups == 0 || c % groups != 0 {
        return Err(KernelError::shape(op, format!("groups = {groups} must divide C = {c}")));
    }
    for (name, t) in params {
        check_param(op, name, t, c)?;
    }
    Ok((n, c, s[2..].iter().product()))
}

/// Calls `f(channel, offsets)` per `(sample, group)` block of a `[N, C, spatial]` tensor: the
/// flat offsets of the block's elements in row-major order, each with its channel.
fn for_each_group(
    (n, c, sp): (usize, usize, usize),
    groups: usize,
    mut f: impl FnMut(&[(usize, usize)]),
) {
    let cg = c / groups;
    let mut block = Vec::with_capacity(cg * sp);
    for b in 0..n {
        for g in 0..groups {
            block.clear();
            for ch in g * cg..(g + 1) * cg {
                let base = (b * c + ch) * sp;
                block.extend((base..base + sp).map(|o| (ch, o)));
            }
            f(&block);
        }
    }
}

/// Mean and `1/√(biased variance + eps)` of a group's elements.
fn group_stats<T: Real>(data: &[T], block: &[(usize, usize)], eps: T) -> (T, T) {
    let m = T::lit(block.len() as f64);
    let mean = block.iter().fold(T::zero(), |s, &(_, o)| s + data[o]) / m;
    let var = block.iter().fold(T::zero(), |s, &(_, o)| {
        let d = data[o] - mean;
        s + d * d
    }) / m;
    (mean, (var + eps).sqrt().recip())
}

/// `tensor.group_norm`: normalises `x` `[N, C, ...]` over each sample's groups of `C/groups`
/// channels and all spatial positions (biased variance), then scales by `gamma[c]` and shifts by
/// `beta[c]`.
pub fn group_norm<T: Real>(
    x: &Tensor<T>,
    gamma: &Tensor<T>,
    beta: &Tensor<T>,
    groups: usize,
    eps: f64,
) -> Result<Tensor<T>> {
    const OP: &str = "group_norm";
    let dims = group_norm_dims(OP, x, &[("gamma", gamma), ("beta", beta)], groups)?;
    let eps = T::lit(eps);
    let mut out = x.clone();
    let (xd, gm, bt, od) = (x.data(), gamma.data(), beta.data(), out.data_mut());
    for_each_group(dims, groups, |block| {
        let (mean, r) = group_stats(xd, block, eps);
        for &(ch, o) in block {
            od[o] = (xd[o] - mean) * r * gm[ch] + bt[ch];
        }
    });
    Ok(out)
}

/// The gradient of [`group_norm`] with respect to `(x, gamma, beta)`: per group, with
/// `x̂ = (x - mean)·r` and `g = dy·gamma[c]`, `dx = r·(g - mean(g) - x̂·mean(g·x̂))`;
/// `dgamma[c] = Σ dy·x̂` and `dbeta[c] = Σ dy` over samples and positions.
pub fn group_norm_grad<T: Real>(
    x: &Tensor<T>,
    gamma: &Tensor<T>,
    dy: &Tensor<T>,
    groups: usize,
    eps: f64,
) -> Result<(Tensor<T>, Tensor<T>, Tensor<T>)> {
    const OP: &str = "group_norm_grad";
    if dy.shape() != x.shape() {
        return Err(KernelError::shape(
            OP,
            format!("dy must have x's shape {:?}, got {:?}", x.shape(), dy.shape()),
        ));
    }
    let dims = group_norm_dims(OP, x, &[("gamma", gamma)], groups)?;
    let eps = T::lit(eps);
    let mut dx = x.clone();
    let mut dgamma = vec![T::zero(); dims.1];
    let mut dbeta = vec![T::zero(); dims.1];
    let (xd, gm, gd, out) = (x.data(), gamma.data(), dy.data(), dx.data_mut());
    for_each_group(dims, groups, |block| {
        let (mean, r) = group_stats(xd, block, eps);
        let m = T::lit(block.len() as f64);
        let (mut sum_g, mut sum_gx) = (T::zero(), T::zero());
        for &(ch, o) in block {
            let xhat = (xd[o] - mean) * r;
            let g = gd[o] * gm[ch];
            sum_g = sum_g + g;
            sum_gx = sum_gx + g * xhat;
            dgamma[ch] = dgamma[ch] + gd[o] * xhat;
            dbeta[ch] = dbeta[ch] + gd[o];
        }
        let (mean_g, mean_gx) = (sum_g / m, sum_gx / m);
        for &(ch, o) in block {
            let xhat = (xd[o] - mean) * r;
            out[o] = r * (gd[o] * gm[ch] - mean_g - xhat * mean_gx);
        }
    });
    Ok((dx, Tensor::from_vec(dgamma), Tensor::from_vec(dbeta)))
}

/// `tensor.upsample` (nearest): `out[n, c, i, j] = x[n, c, i / scale, j / scale]` for `x`
/// `[N, C, H, W]` and `scale ≥ 1`.
pub fn upsample<T: Copy>(x: &Tensor<T>, scale: usize) -> Result<Tensor<T>> {
    const OP: &str = "upsample";
    let &[n, c, h, w] = x.shape() else {
        return Err(KernelError::shape(OP, format!("x must be [N, C, H, W], got {:?}", x.shape())));
    };
    if scale == 0 {
        return Err(KernelError::shape(OP, "scale must be ≥ 1".to_string()));
    }
    let shape = [n, c, h * scale, w * scale];
    let xd = x.data();
    Tensor::from_fn(&shape, |i| xd[((i[0] * c + i[1]) * h + i[2] / scale) * w + i[3] / scale])
}

#[cfg(test)]
mod tests {
    use super::super::testing::{check_grad, dot, Rng};
    use super::*;

    fn t(shape: &[usize], data: &[f64]) -> Tensor<f64> {
        Tensor::new(shape.to_vec(), data.to_vec()).unwrap()
    }

    fn params(
        stride: [usize; 2],
        padding: [usize; 4],
        dilation: [usize; 2],
        groups: usize,
    ) -> Conv2dParams {
        Conv2dParams { stride, padding, dilation, groups }
    }

    /// The definition, written independently of [`Conv2dGeometry::taps`]: zero-pad the input into
    /// a larger tensor first, then sum over every tap with no bounds test.
    fn naive(
        x: &Tensor<f64>,
        w: &Tensor<f64>,
        bias: Option<&Tensor<f64>>,
        p: &Conv2dParams,
    ) -> Tensor<f64> {
        let [n, c, h, wd] = x.shape().try_into().unwrap();
        let [o, cg, kh, kw] = w.shape().try_into().unwrap();
        let [t, l, b, r] = p.padding;
        let (ph, pw) = (h + t + b, wd + l + r);
        let padded = Tensor::from_fn(&[n, c, ph, pw], |i| {
            let (y, z) = (i[2].wrapping_sub(t), i[3].wrapping_sub(l));
            if y < h && z < wd {
                x.get(&[i[0], i[1], y, z]).unwrap()
            } else {
                0.0
            }
        })
        .unwrap();
        let oh = (ph - (p.dilation[0] * (kh - 1) + 1)) / p.stride[0] + 1;
        let ow = (pw - (p.dilation[1] * (kw - 1) + 1)) / p.stride[1] + 1;
        let per_group = o / p.groups;
        Tensor::from_fn(&[n, o, oh, ow], |i| {
            let mut s = bias.map_or(0.0, |b| b.data()[i[1]]);
            for ci in 0..cg {
                let ch = (i[1] / per_group) * cg + ci;
                for y in 0..kh {
                    for z in 0..kw {
                        let row = i[2] * p.stride[0] + y * p.dilation[0];
                        let col = i[3] * p.stride[1] + z * p.dilation[1];
                        s += padded.get(&[i[0], ch, row, col]).unwrap()
                            * w.get(&[i[1], ci, y, z]).unwrap();
                    }
                }
            }
            s
        })
        .unwrap()
    }

    #[test]
    fn conv2d_matches_hand_worked_values() {
        let x = t(&[1, 1, 3, 3], &[1., 2., 3., 4., 5., 6., 7., 8., 9.]);
        // w = [[1, 0], [0, -1]]: out[i, j] = x[i, j] - x[i + 1, j + 1] = -4 everywhere.
        let w = t(&[1, 1, 2, 2], &[1., 0., 0., -1.]);
        let y = conv2d(&x, &w, None, &Conv2dParams::default()).unwrap();
        assert_eq!((y.shape(), y.data()), (&[1, 1, 2, 2][..], &[-4., -4., -4., -4.][..]));
        // Padding 1 all round (5x5), stride 2: outputs at padded rows/cols {0, 2}, i.e. input
        // rows/cols {-1, 1}; the tap (1, 1) reads x[r + 1, c + 1] with weight -1, the tap (0, 0)
        // reads x[r, c]: [0 - 1, 0 - 3; 0 - 7, 5 - 9] + 0.5.
        let p = params([2, 2], [1, 1, 1, 1], [1, 1], 1);
        let y = conv2d(&x, &w, Some(&t(&[1], &[0.5])), &p).unwrap();
        assert_eq!(y.data(), &[-0.5, -2.5, -6.5, -3.5]);
        // Dilation 2: a 2x2 kernel of ones spans 3x3 and reads the corners 1 + 3 + 7 + 9.
        let ones = t(&[1, 1, 2, 2], &[1.; 4]);
        let y = conv2d(&x, &ones, None, &params([1, 1], [0; 4], [2, 2], 1)).unwrap();
        assert_eq!((y.shape(), y.data()), (&[1, 1, 1, 1][..], &[20.][..]));
        // Two groups of one channel: each output channel sees only its own input channel.
        let x2 = t(&[1, 2, 1, 1], &[2., 3.]);
        let w2 = t(&[2, 1, 1, 1], &[10., 100.]);
        let y = conv2d(&x2, &w2, None, &params([1, 1], [0; 4], [1, 1], 2)).unwrap();
        assert_eq!(y.data(), &[20., 300.]);
        // Asymmetric padding [top, left, bottom, right] = [0, 1, 1, 0] with a 1x1 kernel shifts
        // the image right and down by nothing: it adds a zero column on the left, a zero row below.
        let one = t(&[1, 1, 1, 1], &[1.]);
        let y = conv2d(
            &t(&[1, 1, 1, 2], &[7., 8.]),
            &one,
            None,
            &params([1, 1], [0, 1, 1, 0], [1, 1], 1),
        )
        .unwrap();
        assert_eq!((y.shape(), y.data()), (&[1, 1, 2, 3][..], &[0., 7., 8., 0., 0., 0.][..]));
    }

    /// Stride, padding, dilation and groups in combination, each a case the naive definition
    /// and the kernel must agree on.
    fn configurations() -> Vec<([usize; 4], [usize; 4], Conv2dParams)> {
        vec![
            ([2, 3, 5, 6], [4, 3, 3, 3], Conv2dParams::default()),
            ([1, 4, 7, 5], [6, 2, 3, 2], params([2, 1], [1, 0, 2, 1], [1, 1], 2)),
            ([2, 2, 6, 6], [2, 2, 2, 3], params([1, 2], [2, 2, 2, 2], [2, 1], 1)),
            ([1, 6, 5, 5], [6, 1, 3, 3], params([2, 2], [1, 1, 1, 1], [1, 2], 6)),
            ([1, 3, 4, 4], [3, 3, 1, 1], params([3, 3], [0; 4], [1, 1], 1)),
        ]
    }

    #[test]
    fn conv2d_matches_a_naive_definition() {
        let mut rng = Rng::new(7);
        for (xs, ws, p) in configurations() {
            let x = rng.tensor(&xs, -1.0, 1.0);
            let w = rng.tensor(&ws, -1.0, 1.0);
            let b = rng.tensor(&ws[..1], -1.0, 1.0);
            let got = conv2d(&x, &w, Some(&b), &p).unwrap();
            let want = naive(&x, &w, Some(&b), &p);
            assert_eq!(got.shape(), want.shape(), "{p:?}");
            for (g, e) in got.data().iter().zip(want.data()) {
                assert!((g - e).abs() < 1e-12, "{p:?}: {g} vs {e}");
            }
        }
    }

    #[test]
    fn conv2d_grads_match_finite_differences() {
        let mut rng = Rng::new(11);
        for (xs, ws, p) in configurations() {
            let x = rng.tensor(&xs, -1.0, 1.0);
            let w = rng.tensor(&ws, -1.0, 1.0);
            let b = rng.tensor(&ws[..1], -1.0, 1.0);
            let y = conv2d(&x, &w, Some(&b), &p).unwrap();
            let dy = rng.tensor(y.shape(), -1.0, 1.0);
            let dx = conv2d_grad_input(&dy, &w, &xs, &p).unwrap();
            check_grad("dx", &x, &dx, |x| dot(&naive(x, &w, Some(&b), &p), &dy));
            let dw = conv2d_grad_weight(&x, &dy, &ws, &p).unwrap();
            check_grad("dw", &w, &dw, |w| dot(&naive(&x, w, Some(&b), &p), &dy));
            // The bias gradient autodiff builds: dy summed over N, OH and OW.
            let db = super::super::reduce_sum(&dy, &[0, 2, 3], false).unwrap();
            check_grad("dbias", &b, &db, |b| dot(&naive(&x, &w, Some(b), &p), &dy));
        }
    }

    #[test]
    fn conv_kernels_reject_bad_shapes() {
        let x = Tensor::<f64>::zeros(&[1, 4, 3, 3]).unwrap();
        let w = Tensor::<f64>::zeros(&[2, 3, 2, 2]).unwrap();
        let e = conv2d(&x, &w, None, &Conv2dParams::default()).unwrap_err();
        assert!(e.to_string().contains("groups = 1 must divide C = 4"), "{e}");
        let w = Tensor::<f64>::zeros(&[2, 4, 4, 1]).unwrap();
        let e = conv2d(&x, &w, None, &Conv2dParams::default()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "conv2d: the dilated kernel 4 does not fit in the padded input 3 along spatial axis 0"
        );
        let w = Tensor::<f64>::zeros(&[2, 4, 1, 1]).unwrap();
        let dy = Tensor::<f64>::zeros(&[1, 2, 3, 2]).unwrap();
        assert!(conv2d_grad_input(&dy, &w, &[1, 4, 3, 3], &Conv2dParams::default()).is_err());
        assert!(conv2d_grad_weight(&x, &dy, &[2, 4, 1, 1], &Conv2dParams::default()).is_err());
    }

    #[test]
    fn group_norm_matches_hand_worked_values() {
        // Channels [1, 3] and [5, 7]. One group: mean 4, variance (9 + 1 + 1 + 9)/4 = 5.
        let x = t(&[1, 2, 2], &[1., 3., 5., 7.]);
        let (ones, zeros) = (t(&[2], &[1., 1.]), t(&[2], &[0., 0.]));
        let y = group_norm(&x, &ones, &zeros, 1, 0.0).unwrap();
        let s = 5f64.sqrt();
        for (g, e) in y.data().iter().zip([-3. / s, -1. / s, 1. / s, 3. / s]) {
            assert!((g - e).abs() < 1e-12, "{g} vs {e}");
        }
        // Two groups: each channel alone, mean 2 (resp. 6) and variance 1, so x̂ = [-1, 1]; then
        // gamma [2, 3] and beta [0, 1].
        let y = group_norm(&x, &t(&[2], &[2., 3.]), &t(&[2], &[0., 1.]), 2, 0.0).unwrap();
        assert_eq!(y.data(), &[-2., 2., -2., 4.]);
        assert!(group_norm(&x, &ones, &zeros, 3, 0.0).is_err());
    }

    #[test]
    fn group_norm_grad_matches_finite_differences() {
        let mut rng = Rng::new(3);
        for (shape, groups) in [(vec![2, 6, 3, 2], 3), (vec![1, 4, 5], 1), (vec![3, 4], 4)] {
            let x = rng.tensor(&shape, -2.0, 2.0);
            let gamma = rng.tensor(&shape[1..2], 0.5, 1.5);
            let beta = rng.tensor(&shape[1..2], -1.0, 1.0);
            let dy = rng.tensor(&shape, -1.0, 1.0);
            let eps = 1e-3;
            let (dx, dg, db) = group_norm_grad(&x, &gamma, &dy, groups, eps).unwrap();
            let loss = |x: &Tensor<f64>, g: &Tensor<f64>, b: &Tensor<f64>| {
                dot(&group_norm(x, g, b, groups, eps).unwrap(), &dy)
            };
            check_grad("dx", &x, &dx, |x| loss(x, &gamma, &beta));
            check_grad("dgamma", &gamma, &dg, |g| loss(&x, g, &beta));
            check_grad("dbeta", &beta, &db, |b| loss(&x, &gamma, b));
        }
    }

    #[test]
    fn upsample_repeats_each_pixel_in_a_block() {
        let x = t(&[1, 1, 2, 2], &[1., 2., 3., 4.]);
        let y = upsample(&x, 2).unwrap();
        assert_eq!(y.shape(), &[1, 1, 4, 4]);
        #[rustfmt::skip]
        let want = [1., 1., 2., 2.,
                    1., 1., 2., 2.,
                    3., 3., 4., 4.,
                    3., 3., 4., 4.];
        assert_eq!(y.data(), &want);
        assert_eq!(upsample(&x, 1).unwrap().data(), x.data());
        assert!(upsample(&x, 0).is_err());
        assert!(upsample(&t(&[4], &[0.; 4]), 2).is_err());
    }
}

//! Where a forward convolution's input is best stored: channel-packed texels (`pack = "c"`,
//! MNN's NC4HW4) read by the direct kernel, or any other layout read by the implicit GEMM of the
//! tiled contraction template. The same roofline as [`super::perf_model`], applied to the two
//! kernels fbc writes for `tensor.conv2d`.
//!
//! # The two kernels
//!
//! A convolution `x [N, C, H, W] ⊛ w [O, C/g, KH, KW] → y [N, O, OH, OW]` with `g` groups is, per
//! group, a product `[O/g × K] · [K × P]` with `K = (C/g)·KH·KW` and `P = N·OH·OW`.
//!
//! - **Implicit GEMM** (`lower/ops/conv.rs` over a linear or `pack = "w"` input), in the
//!   contraction template the OpenCL writer picks:
//!   - *tiled*: a work-group computes a `TM × TN` block of outputs (`TM` output channels, `TN`
//!     positions) in reduction steps of `tile_k`: `TM = per_item[1]·wg_y`, `TN =
//!     per_item[0]·wg_x` from the profile's `[contraction]` and its first preferred work-group
//!     shape. Padding: each group's `O/g`, `P` and `K` are rounded up to `TM`, `TN`, `tile_k`;
//!   - *skinny*, where a group has at most `SKINNY_SIDE` (16) output channels: its `j = O/g`
//!     outputs of each row of `8·⌊16/j⌋` positions a work-group (`fbc_kernels::Skinny`'s lanes
//!     along the reduction, 16 outputs a work-item); the positions rounded up to that.
//! - **Direct** (a `pack = "c"` input whose groups are whole texels, `C/g` a multiple of 4): the
//!   OpenCL writer's plain kernel (`codegen/src/opencl/kernel.rs` routes a reduction whose
//!   innermost dimension is an input texel's channel there), a work-item per output texel —
//!   four output channels at one position — stepping through the input's texels (four channels
//!   each) tap by tap; a work-group covers `wg_x·wg_y` positions. Padding: `O/g` rounded up to
//!   4 (a texel of outputs), `P` to the work-group. The texel of outputs is what it writes when
//!   `global-layout` gives its result the input's packing (it does where the result's readers
//!   take any layout); writing a linear result it computes one output a work-item, which the
//!   model does not distinguish.
//!
//! # The estimate
//!
//! For a kernel whose work-group computes an `a × b` block of outputs, every reduction step
//! moves `a + b` operand values for `2·a·b` FLOPs: `AI = 2·a·b / ((a + b)·e)` FLOP per byte (as
//! `perf_model`'s conventional and R-Tile kernels). With `util` the real share of the padded
//! work and `occupancy = min(1, work-groups / compute units)`:
//!
//! ```text
//! GFLOPS = min(peak, AI · DRAM bandwidth) · occupancy · util,   seconds = FLOPs / GFLOPS
//! ```
//!
//! (padded work costs both compute and the bandwidth of its operands; idle compute units
//! neither compute nor fetch). The direct kernel's block is 4 channels × the work-group's
//! positions, so its AI is about `8 / e` against the tiled GEMM's `2·TM·TN / ((TM + TN)·e)`:
//! the model keeps the GEMM for wide convolutions and gives the direct kernel the groups where a
//! GEMM block is mostly padding, or where the skinny kernel's block is narrower than the direct
//! kernel's texel of outputs.
//!
//! **Against the device.** `tests/bench/h200.sh` part `nc4hw4` timed the direct kernel and the
//! implicit GEMM on four SD 1.5 convolutions (batch 2, 64 × 64 latents) on an H100 (session
//! 14): the direct kernel was 5.6× slower on `conv_in` (4 → 320), 16.6× on `conv_mid` (320 →
//! 320), 2.1× on `conv_out` (320 → 4, skinny) and 7.0× on the stride-2 `conv_down`. On the
//! nvidia profile the model gives 4.4×, 5.9×, 3.7× and 2.1×: the same choice at every shape.

use fbc_dialects::kind::TensorOp as T;
use fbc_dialects::layout::{Intra, Pack, RTile, Storage};
use fbc_dialects::tensor::Conv2dAttrs;
use fbc_ir::{Module, Op, Type};
use fbc_target::HardwareProfile;

use super::perf_model::{matmul_ai, work_group};

/// Values per texel.
const CH: u64 = 4;

/// A forward convolution as the model sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConvShape {
    /// Batch, input channels, output channels, groups.
    pub n: u64,
    pub c: u64,
    pub o: u64,
    pub groups: u64,
    /// `KH·KW`.
    pub taps: u64,
    /// `OH·OW`.
    pub positions: u64,
    pub elem_bytes: u64,
}

impl ConvShape {
    /// The shape of `tensor.conv2d` op `op`; `None` for any other op or a malformed one.
    pub fn of(m: &Module, op: Op) -> Option<ConvShape> {
        let d = m.op(op);
        if !T::Conv2d.is(d) {
            return None;
        }
        let a = Conv2dAttrs::read(d.name(), |n| d.attr(n)).ok()?;
        let shape = |v| match m.value_type(v) {
            Type::Tensor(t) if t.rank() == 4 => Some((t.shape.to_vec(), t.elem.bytes())),
            _ => None,
        };
        let ((xs, e), (ws, _), (ys, _)) = (
            shape(*d.operands.first()?)?,
            shape(*d.operands.get(1)?)?,
            shape(*d.results.first()?)?,
        );
        let groups = a.groups.max(1);
        (xs[1] % groups == 0 && ys[1] % groups == 0).then_some(ConvShape {
            n: xs[0],
            c: xs[1],
            o: ys[1],
            groups,
            taps: ws[2] * ws[3],
            positions: ys[2] * ys[3],
            elem_bytes: e,
        })
    }

    /// Input channels per group.
    pub fn cg(&self) -> u64 {
        self.c / self.groups
    }

    /// Output channels per group.
    pub fn og(&self) -> u64 {
        self.o / self.groups
    }

    /// `2·N·O·OH·OW·(C/g)·KH·KW`.
    pub fn flops(&self) -> f64 {
        2.0 * (self.n * self.o * self.positions) as f64 * (self.cg() * self.taps) as f64
    }

    /// Whether the direct kernel can read a channel-packed input: each group whole texels.
    pub fn direct_applies(&self) -> bool {
        self.cg() % CH == 0
    }
}

/// One kernel's estimate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KernelEstimate {
    /// `"tiled"`, `"skinny"` or `"direct"`.
    pub kernel: &'static str,
    /// FLOP per operand byte of the work-group's block of outputs.
    pub ai: f64,
    pub occupancy: f64,
    /// Real work / padded work.
    pub util: f64,
    pub gflops: f64,
    pub seconds: f64,
}

/// Both kernels for one convolution (`direct`: `None` where it does not apply).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ConvEstimate {
    pub gemm: KernelEstimate,
    pub direct: Option<KernelEstimate>,
}

impl ConvEstimate {
    /// Seconds the direct kernel saves over the GEMM (negative: it loses; `None`: no direct).
    pub fn direct_saves(&self) -> Option<f64> {
        self.direct.map(|d| self.gemm.seconds - d.seconds)
    }
}

fn round_up(x: u64, to: u64) -> u64 {
    x.div_ceil(to.max(1)) * to.max(1)
}

fn kernel(
    p: &HardwareProfile,
    s: &ConvShape,
    kernel: &'static str,
    ai: f64,
    work_groups: u64,
    util: f64,
) -> KernelEstimate {
    let cu = u64::from(p.compute.compute_units).max(1);
    let occupancy = (work_groups as f64 / cu as f64).min(1.0);
    let roof = p.compute.peak_f32_gflops.min(ai * p.memory.dram_bandwidth_gbps);
    let gflops = roof * occupancy * util;
    let seconds = if gflops > 0.0 { s.flops() / (gflops * 1e9) } else { f64::INFINITY };
    KernelEstimate { kernel, ai, occupancy, util, gflops, seconds }
}

/// Both kernels' estimates for `s` on `p` (see the module docs).
pub fn estimate(p: &HardwareProfile, s: &ConvShape) -> ConvEstimate {
    let [wx, wy] = work_group(p);
    let e = s.elem_bytes;
    let cp = &p.contraction;
    let (tm, tn) = (u64::from(cp.per_item[1]).max(1) * wy, u64::from(cp.per_item[0]).max(1) * wx);
    let tk = u64::from(cp.tile_k).max(1);
    let (m, n, k) = (s.og(), s.n * s.positions, s.cg() * s.taps);
    let util = |real: [u64; 3], padded: [u64; 3]| {
        real.iter().zip(padded).map(|(&r, p)| r as f64 / p.max(1) as f64).product::<f64>()
    };
    let gemm = if m <= fbc_target::SKINNY_SIDE {
        let rows = 8 * (16 / m.max(1)).max(1);
        kernel(
            p,
            s,
            "skinny",
            matmul_ai(m, rows, e),
            s.groups * n.div_ceil(rows),
            util([n, 1, 1], [round_up(n, rows), 1, 1]),
        )
    } else {
        kernel(
            p,
            s,
            "tiled",
            matmul_ai(tm, tn, e),
            s.groups * m.div_ceil(tm) * n.div_ceil(tn),
            util([m, n, k], [round_up(m, tm), round_up(n, tn), round_up(k, tk)]),
        )
    };
    let direct = s.direct_applies().then(|| {
        let positions = wx * wy;
        kernel(
            p,
            s,
            "direct",
            matmul_ai(CH, positions, e),
            s.groups * m.div_ceil(CH) * n.div_ceil(positions),
            util([m, n, 1], [round_up(m, CH), round_up(n, positions), 1]),
        )
    });
    ConvEstimate { gemm, direct }
}

/// The channel-packed layout of a `[N, C, H, W]` tensor: one tile per `H × W` plane of texels
/// (MNN's NC4HW4 image, the planes of each four channels stacked), so that the direct kernel's
/// windows are 2-D neighbourhoods of the texture; a buffer of the same texels where the image
/// exceeds the device's limits. `None` below rank 3.
pub fn channel_packed(p: &HardwareProfile, shape: &[u64]) -> Option<RTile> {
    let r = shape.len();
    if r < 3 {
        return None;
    }
    let tile = [shape[r - 2].max(1), shape[r - 1].max(1)];
    let horizontal = (r - 1) as u64;
    let t =
        RTile::packed_for_shape(shape, tile, Intra::Rows, horizontal, Pack::C, Storage::Image2d)
            .ok()?;
    let fits = t.image.is_some_and(|[w, h]| {
        p.image.supported && w <= u64::from(p.image.max_width) && h <= u64::from(p.image.max_height)
    });
    if fits {
        Some(t)
    } else {
        RTile::packed_for_shape(shape, tile, Intra::Rows, horizontal, Pack::C, Storage::Buffer).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(name: &str) -> HardwareProfile {
        fbc_target::builtin(name).unwrap()
    }

    fn conv(c: u64, o: u64, groups: u64, side: u64) -> ConvShape {
        ConvShape { n: 2, c, o, groups, taps: 9, positions: side * side, elem_bytes: 4 }
    }

    /// The mali profile by hand: work-group 32 × 8, 4 × 4 outputs a work-item, k step 16, 12
    /// cores, 2476 GFLOP/s, 85.6 GB/s.
    #[test]
    fn mali_by_hand() {
        let p = profile("mali");
        // SD 1.5's 320 → 320 convolution at 64 × 64: the GEMM block is 32 × 128, AI =
        // 2·32·128 / (160·4) = 12.8 FLOP/B → 1095.68 GFLOP/s, no padding (320 = 10·32,
        // 8192 = 64·128, 2880 = 180·16). The direct kernel: 4 × 256, AI = 2048 / 1040 →
        // 168.57 GFLOP/s.
        let est = estimate(&p, &conv(320, 320, 1, 64));
        assert!((est.gemm.ai - 12.8).abs() < 1e-12);
        assert!((est.gemm.gflops - 12.8 * 85.6).abs() < 1e-9, "{est:?}");
        assert_eq!(est.gemm.util, 1.0);
        let d = est.direct.unwrap();
        assert!((d.gflops - 2048.0 / 1040.0 * 85.6).abs() < 1e-9, "{d:?}");
        assert!(est.direct_saves().unwrap() < 0.0);
        // 80 groups of 4 channels: 4 outputs a group take the skinny kernel, 4 × 32 a
        // work-group (AI = 256 / 144), against the direct kernel's 4 × 256.
        let est = estimate(&p, &conv(320, 320, 80, 64));
        assert_eq!((est.gemm.kernel, est.gemm.util), ("skinny", 1.0));
        assert!((est.gemm.gflops - 256.0 / 144.0 * 85.6).abs() < 1e-9, "{est:?}");
        assert!(est.direct_saves().unwrap() > 0.0, "{est:?}");
        // Three input channels: no whole texel per group, no direct kernel.
        assert_eq!(estimate(&p, &conv(3, 32, 1, 64)).direct, None);
    }

    /// On the nvidia profile (work-group 16 × 16, 8 × 8 outputs a work-item) the GEMM's
    /// 128 × 128 blocks are compute-bound (AI 32 FLOP/B × 4800 GB/s is above the peak) with 320
    /// of 384 rows real; the direct kernel is bandwidth-bound: 5.9× slower, the order the H100
    /// measured.
    #[test]
    fn nvidia_keeps_the_gemm_for_wide_convolutions() {
        let p = profile("nvidia");
        let est = estimate(&p, &conv(320, 320, 1, 64));
        let gemm = p.compute.peak_f32_gflops * 320.0 / 384.0;
        assert!((est.gemm.gflops - gemm).abs() < 1e-9, "{est:?}");
        let direct = 2048.0 / 1040.0 * 4800.0;
        let d = est.direct.unwrap();
        assert!((d.gflops - direct).abs() < 1e-9, "{d:?}");
        assert!((d.seconds / est.gemm.seconds - gemm / direct).abs() < 1e-9);
        // A grouped 1 × 1 convolution, 4 channels into 32 a group: a 128 × 128 block holds 32
        // of its rows and 4 of its 16 reduction steps (util 1/16), so the direct kernel, its
        // texels all real, is ahead (on mali's 32-row blocks it is not: util 1/4).
        let grouped = ConvShape { taps: 1, ..conv(40, 320, 10, 64) };
        let est = estimate(&p, &grouped);
        assert_eq!((est.gemm.kernel, est.gemm.util), ("tiled", 1.0 / 16.0));
        assert!((est.gemm.gflops - p.compute.peak_f32_gflops / 16.0).abs() < 1e-9);
        assert!(est.direct_saves().unwrap() > 0.0, "{est:?}");
        assert!(estimate(&profile("mali"), &grouped).direct_saves().unwrap() < 0.0);
        // SD 1.5's conv_out, 320 → 4: skinny, 4 × 32 a work-group (AI 256 / 144) over 256
        // work-groups; the direct kernel's 32 work-groups of 256 positions keep 32 of the 132
        // compute units busy. On mali's 12 units both are full and the direct kernel is ahead.
        let out = conv(320, 4, 1, 64);
        let est = estimate(&p, &out);
        assert!((est.gemm.gflops - 256.0 / 144.0 * 4800.0).abs() < 1e-9, "{est:?}");
        let d = est.direct.unwrap();
        assert!((d.gflops - direct * 32.0 / 132.0).abs() < 1e-9, "{d:?}");
        assert!(est.direct_saves().unwrap() < 0.0);
        assert!(estimate(&profile("mali"), &out).direct_saves().unwrap() > 0.0);
    }

    /// The four convolutions `h200.sh` part `nc4hw4` timed on an H100: the direct kernel
    /// slower at each, by the ratios the module docs quote.
    #[test]
    fn the_measured_order_on_the_nvidia_profile() {
        let p = profile("nvidia");
        let down = ConvShape { positions: 32 * 32, ..conv(320, 320, 1, 64) };
        let shapes = [conv(4, 320, 1, 64), conv(320, 320, 1, 64), conv(320, 4, 1, 64), down];
        let ratios: Vec<f64> = shapes
            .iter()
            .map(|s| {
                let est = estimate(&p, s);
                (est.direct.unwrap().seconds / est.gemm.seconds * 10.0).round() / 10.0
            })
            .collect();
        assert_eq!(ratios, [4.4, 5.9, 3.7, 2.1]);
    }

    #[test]
    fn channel_packed_planes() {
        let p = profile("mali");
        let t = channel_packed(&p, &[2, 6, 9, 10]).unwrap();
        assert_eq!((t.tile, t.pack, t.storage), ([9, 10], Pack::C, Storage::Image2d));
        // 10 texels wide; 2 samples × 2 groups of channels × 9 rows.
        assert_eq!(t.image, Some([10, 36]));
        // 8192 × 8192 images: 2 × 80 × 64 rows do not fit, the texels go to a buffer.
        let g = profile("generic");
        let t = channel_packed(&g, &[2, 320, 64, 64]).unwrap();
        assert_eq!((t.storage, t.image), (Storage::Buffer, Some([64, 10240])));
        assert_eq!(channel_packed(&p, &[4, 4]), None);
    }
}

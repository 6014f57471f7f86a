//! The analytic performance model of R-Tile selection (FBLayout Eq. 2):
//! `Performance(layout, op) = GFLOPS × MemEfficiency`, computed from a hardware profile before
//! anything runs. Everything the model assumes is in this module, so a measured profile (or a
//! measured model) can replace it.
//!
//! # What is modelled
//!
//! A *consumer* reduces a tensor `T` (seen as `B` stacked `[H, W]` matrices, RGBA-packed along
//! `W`) along one of its two tiled axes, `r`; the other tiled axis, `p`, is parallel. The work is
//! split into *paths*: a work-group owns an extent of `p` and walks the whole of `r` in *steps*.
//!
//! - **R-Tile kernel** (any `#layout.rtile`): a path is one row (or column) of the tile grid: its
//!   `p` extent is the tile's extent along `p`, and each step loads one whole tile — the paper's
//!   tile invariance (Sec. 4.2): the same tiles are loaded whatever the reduction direction.
//! - **Conventional kernel** (the `#layout.linear` baseline, the layout-reuse strategy of MNN):
//!   one work-item per output texel, work-groups of the profile's first preferred shape
//!   `[wx, wy]`. The `p` extent is `4·wx` elements when `p` is the axis the consumer's output is
//!   packed along (matmul operand `b`, and plain reductions) and `wy` otherwise (operand `a`);
//!   each step reads 4 elements along `r` (one texel if `r = W`, four rows if `r = H`).
//!
//! **Memory.** A step's footprint is a rectangle of texels (a tile footprint, or a slab of the
//! row-major image); the texture cache fetches it in `C_h × C_w`-texel blocks (the profile's
//! `block_h × block_w`, Eq. 1), or in `line_bytes` lines for data in a buffer (then a block is
//! one texel row `line_bytes / texel_bytes` wide). A step's blocks stay cached for the next step
//! of the same path only if they fit the work-group's share of L1, `l1_bytes /
//! RESIDENT_WORK_GROUPS`; otherwise other work-groups evict them first (the streaming assumption
//! of the paper's Supplementary experiment, and of "strided access wastes cache lines that cannot
//! be reused before eviction"). Blocks are never shared between paths: work-groups run on
//! different cores with their own L1. So
//!
//! ```text
//! fetched(path) = Σ_steps |blocks(step)| − (retained ? |blocks(step) ∩ blocks(previous step)| : 0)
//! MemEfficiency = Σ_paths minimal bytes / Σ_paths fetched · block_bytes
//! ```
//!
//! where the minimal bytes of a path are its real (unpadded) elements times the element size.
//!
//! **Compute.** A roofline: `GFLOPS = min(peak · occupancy · pad_util, AI · DRAM bandwidth)`, with
//! - `occupancy = min(1, work-groups / compute_units)`;
//! - `pad_util` = real elements / padded elements of `T` (tile kernels compute on padding);
//! - `AI` (FLOP per byte of the operands moved): a matmul R-Tile kernel computes a square output
//!   block of the tile's `p` extent `t` per step, `AI = 2·t·t / ((t + t)·e) = t / e`; the
//!   conventional kernel's output block is `wy × 4·wx`, `AI = 2·a·b / ((a + b)·e)`; a plain
//!   reduction does one operation per element read, `AI = 1 / e`.
//!
//! `GFLOPS` here excludes cache efficiency on purpose: Eq. 2 multiplies it in once, as
//! `MemEfficiency`.
//!
//! # Known limits
//!
//! The block geometry of the builtin profiles is assumed, not measured (see their TOML; `fbc
//! calibrate` fits it to a device's read times and writes a profile with it); the
//! kernel shapes are those of fbc's templates, not tuned per device; cross-path sharing through
//! L2 is ignored (it favours no candidate over another for aligned tiles).

use fbc_dialects::layout::{Layout, Matrix, RTile, Storage};
use fbc_target::HardwareProfile;

/// Work-groups assumed to share one core's L1 at a time (latency hiding needs at least two).
pub const RESIDENT_WORK_GROUPS: u64 = 2;

/// Elements per texel (RGBA).
const CH: u64 = 4;

/// Most steps (over all paths) the model walks for one score; beyond it the model declines
/// (returns `None`) rather than spend unbounded time on an absurd shape or a tiny tile.
pub const MAX_STEPS: u64 = 1 << 24;

/// One of the two tiled axes of a tensor: `H` is axis `rank-2`, `W` is axis `rank-1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Axis2 {
    H,
    W,
}

impl Axis2 {
    pub fn other(self) -> Axis2 {
        match self {
            Axis2::H => Axis2::W,
            Axis2::W => Axis2::H,
        }
    }

    /// The tensor axis number for a tensor of rank `rank ≥ 2`.
    pub fn axis(self, rank: usize) -> usize {
        match self {
            Axis2::H => rank - 2,
            Axis2::W => rank - 1,
        }
    }
}

/// How a consumer uses the tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConsumerKind {
    /// A matmul operand. `p_is_out_last`: the tensor's parallel axis is the axis the matmul's
    /// result is packed along (operand `b`; `false` for `a`). `other`: the result's extent
    /// along the other operand's parallel axis (`N` for `a`, `M` for `b`). `out_batch`: the
    /// product of the result's batch dimensions.
    Matmul { p_is_out_last: bool, other: u64, out_batch: u64 },
    /// A reduction along one axis (reduce_*, softmax, norms): one operation per element.
    Reduction,
}

/// One reduction op reading the tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Consumer {
    /// The tiled axis it reduces.
    pub reduce: Axis2,
    pub kind: ConsumerKind,
}

/// The tensor being laid out.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TensorDesc {
    pub shape: Vec<u64>,
    pub elem_bytes: u64,
}

/// The model's estimate for one (layout, consumer) pair.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Score {
    /// Attainable GFLOP/s (roofline), before memory efficiency.
    pub gflops: f64,
    /// Minimal bytes / modelled bytes, in `(0, 1]`.
    pub mem_eff: f64,
    /// `gflops · mem_eff`: the Eq. 2 term.
    pub perf: f64,
    pub minimal_bytes: u64,
    pub modelled_bytes: u64,
    /// Cache blocks fetched, over all paths.
    pub fetched_blocks: u64,
    pub work_groups: u64,
}

/// Cache geometry for data stored as `storage`: `(block_h, block_w)` in texels and bytes per block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    pub bh: u64,
    pub bw: u64,
    pub block_bytes: u64,
}

impl Geometry {
    pub fn of(profile: &HardwareProfile, storage: Storage, elem_bytes: u64) -> Geometry {
        let texel = u64::from(profile.image.channels).max(1) * elem_bytes.max(1);
        match storage {
            Storage::Image2d => {
                let (bh, bw) = (
                    u64::from(profile.texture_cache.block_h).max(1),
                    u64::from(profile.texture_cache.block_w).max(1),
                );
                Geometry { bh, bw, block_bytes: bh * bw * texel }
            }
            Storage::Buffer => {
                let line = u64::from(profile.texture_cache.line_bytes).max(1);
                let bw = (line / texel).max(1);
                Geometry { bh: 1, bw, block_bytes: bw * texel }
            }
        }
    }
}

/// A rectangle of texels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rect {
    pub x: u64,
    pub y: u64,
    pub w: u64,
    pub h: u64,
}

/// The block ranges `[bx0, bx1) × [by0, by1)` a rectangle touches (empty for an empty rect).
fn block_range(r: Rect, g: Geometry) -> (u64, u64, u64, u64) {
    if r.w == 0 || r.h == 0 {
        return (0, 0, 0, 0);
    }
    (r.x / g.bw, (r.x + r.w).div_ceil(g.bw), r.y / g.bh, (r.y + r.h).div_ceil(g.bh))
}

fn range_count((x0, x1, y0, y1): (u64, u64, u64, u64)) -> u64 {
    x1.saturating_sub(x0) * y1.saturating_sub(y0)
}

fn range_overlap(a: (u64, u64, u64, u64), b: (u64, u64, u64, u64)) -> u64 {
    let w = a.1.min(b.1).saturating_sub(a.0.max(b.0));
    let h = a.3.min(b.3).saturating_sub(a.2.max(b.2));
    w * h
}

/// FBLayout Eq. 1 for a rectangle at its real position: the cache blocks it spans.
pub fn n_cache(r: Rect, g: Geometry) -> u64 {
    range_count(block_range(r, g))
}

/// Blocks fetched along one path of steps, with the retention rule of the module docs.
pub fn fetched_along(steps: &[Rect], g: Geometry, l1_share: u64) -> u64 {
    fetched_iter(steps.iter().copied(), g, l1_share)
}

/// [`fetched_along`] over steps produced on the fly (`score` walks up to [`MAX_STEPS`] of them;
/// storing them cost more in fresh page allocations than the arithmetic).
fn fetched_iter(steps: impl Iterator<Item = Rect>, g: Geometry, l1_share: u64) -> u64 {
    let mut total = 0;
    let mut prev: Option<(u64, u64, u64, u64)> = None;
    for s in steps {
        let b = block_range(s, g);
        let n = range_count(b);
        let kept = match prev {
            Some(p) if n.saturating_mul(g.block_bytes) <= l1_share => range_overlap(b, p),
            _ => 0,
        };
        total += n - kept;
        prev = Some(b);
    }
    total
}

/// Accumulates the paths of one `score`.
///
/// Paths of a kernel repeat the same step pattern at different origins, and a path's fetched
/// blocks only depend on its steps relative to the block grid: translating every step by a
/// whole number of blocks (`bw` texels across, `bh` down) changes no block count or overlap.
/// So each path is keyed by its first step's origin modulo the block size (plus whatever
/// varies its pattern) and walked once per key: the same integers as walking every path, at a
/// tiny fraction of the steps (large tensors have millions).
struct Walk {
    g: Geometry,
    l1_share: u64,
    /// Fetched blocks per `(x0 % bw, y0 % bh, pattern)`.
    memo: std::collections::HashMap<(u64, u64, u64), u64>,
    /// Blocks fetched, paths walked, and their minimal bytes, so far.
    fetched: u64,
    paths: u64,
    minimal: u64,
}

impl Walk {
    fn new(g: Geometry, l1_share: u64) -> Walk {
        let memo = std::collections::HashMap::new();
        Walk { g, l1_share, memo, fetched: 0, paths: 0, minimal: 0 }
    }

    /// One path whose first step is at texel `(x0, y0)`; `pattern` must identify the steps'
    /// positions relative to it (and their sizes) among the paths of this walk. `steps` is only
    /// evaluated the first time a key is seen.
    fn path(
        &mut self,
        (x0, y0): (u64, u64),
        pattern: u64,
        minimal: u64,
        steps: impl Iterator<Item = Rect>,
    ) {
        let (g, share) = (self.g, self.l1_share);
        let key = (x0 % g.bw, y0 % g.bh, pattern);
        let n = *self.memo.entry(key).or_insert_with(|| fetched_iter(steps, g, share));
        self.fetched += n;
        self.paths += 1;
        self.minimal += minimal;
    }
}

/// Where a `#layout.linear` tensor lives: an image if the device supports images and the
/// row-major image fits its limits, else a buffer.
pub fn linear_storage(profile: &HardwareProfile, shape: &[u64]) -> Storage {
    match Layout::Linear.image_extent(shape) {
        Some([w, h])
            if profile.image.supported
                && w <= u64::from(profile.image.max_width)
                && h <= u64::from(profile.image.max_height) =>
        {
            Storage::Image2d
        }
        _ => Storage::Buffer,
    }
}

/// Walks the paths of the conventional kernel over a linear tensor.
fn linear_paths(m: Matrix, t: &TensorDesc, c: &Consumer, wg: [u64; 2], walk: &mut Walk) {
    let pe = match c.kind {
        ConsumerKind::Matmul { p_is_out_last: false, .. } => wg[1],
        _ => CH * wg[0],
    }
    .max(1);
    for b in 0..m.batch {
        let y_base = b * m.h;
        match c.reduce {
            // p = W: a path is `pe` columns; steps are 4 rows deep. Paths differ only in
            // origin and width.
            Axis2::H => {
                for p0 in (0..m.w).step_by(pe as usize) {
                    let p1 = (p0 + pe).min(m.w);
                    let (x0, x1) = (p0 / CH, p1.div_ceil(CH));
                    let steps = (0..m.h).step_by(CH as usize).map(|k| Rect {
                        x: x0,
                        y: y_base + k,
                        w: x1 - x0,
                        h: CH.min(m.h - k),
                    });
                    walk.path((x0, y_base), x1 - x0, (p1 - p0) * m.h * t.elem_bytes, steps);
                }
            }
            // p = H: a path is `pe` rows; steps are one texel wide. Paths differ only in
            // origin and height.
            Axis2::W => {
                for p0 in (0..m.h).step_by(pe as usize) {
                    let p1 = (p0 + pe).min(m.h);
                    let steps = (0..m.w.div_ceil(CH)).map(|j| Rect {
                        x: j,
                        y: y_base + p0,
                        w: 1,
                        h: p1 - p0,
                    });
                    walk.path((0, y_base + p0), p1 - p0, (p1 - p0) * m.w * t.elem_bytes, steps);
                }
            }
        }
    }
}

/// Walks the paths of the R-Tile kernel: one per tile row (reducing W) or tile column (reducing
/// H). `None` if a tile origin overflows.
fn rtile_paths(
    m: Matrix,
    t: &TensorDesc,
    rt: &RTile,
    reduce: Axis2,
    walk: &mut Walk,
) -> Option<()> {
    let (gh, gw) = rt.grid(m);
    let (fh, fw) = rt.footprint();
    let [th, tw] = rt.tile;
    let rank = t.shape.len();
    let origin = |b, a, c| rt.tile_origin_in(rank, (gh, gw), (fh, fw), b, a, c);
    // Origins grow with every index (checked products and sums of them), so if the last tile's
    // does not overflow, none does; and the last tile is on some path. Checking it up front
    // lets paths with a known pattern be skipped without changing when `None` is returned.
    origin(m.batch - 1, gh - 1, gw - 1)?;
    let (n_p, n_r) = match reduce {
        Axis2::H => (gw, gh),
        Axis2::W => (gh, gw),
    };
    let at = |b, q, i| {
        let (a, c) = if reduce == Axis2::H { (i, q) } else { (q, i) };
        origin(b, a, c).expect("bounded by the last tile's origin")
    };
    for b in 0..m.batch {
        for q in 0..n_p {
            // Origins are affine in the tile indices: every path steps through the same
            // offsets from its first tile, with equal footprints.
            let steps = (0..n_r).map(|i| {
                let (x, y) = at(b, q, i);
                Rect { x, y, w: fw, h: fh }
            });
            let real = match reduce {
                Axis2::H => (m.w.min((q + 1) * tw) - q * tw) * m.h,
                Axis2::W => (m.h.min((q + 1) * th) - q * th) * m.w,
            };
            walk.path(at(b, q, 0), 0, real * t.elem_bytes, steps);
        }
    }
    Some(())
}

/// Arithmetic intensity (FLOP per byte) of a matmul kernel computing `a × b` output blocks.
pub(crate) fn matmul_ai(a: u64, b: u64, elem_bytes: u64) -> f64 {
    let (a, b) = (a as f64, b as f64);
    2.0 * a * b / ((a + b) * elem_bytes.max(1) as f64)
}

/// Seconds a layout conversion of a tensor of `bytes` takes: it reads and writes the tensor
/// once at the DRAM bandwidth.
pub fn convert_time(p: &HardwareProfile, bytes: u64) -> f64 {
    2.0 * bytes as f64 / (p.memory.dram_bandwidth_gbps.max(1e-9) * 1e9)
}

/// The profile's first preferred work-group `[x, y]` (16 × 16 where it lists none): the shape
/// the model gives the conventional kernels.
pub(crate) fn work_group(profile: &HardwareProfile) -> [u64; 2] {
    profile
        .compute
        .preferred_work_groups
        .first()
        .map_or([16, 16], |w| [u64::from(w[0]).max(1), u64::from(w[1]).max(1)])
}

/// The model's estimate for `layout` serving `consumer` on `tensor` (see the module docs).
/// `None` when the tensor has rank < 2, an empty dimension, or the layout does not fit it.
pub fn score(
    profile: &HardwareProfile,
    tensor: &TensorDesc,
    layout: &Layout,
    consumer: &Consumer,
) -> Option<Score> {
    if tensor.shape.len() < 2 || tensor.shape.contains(&0) {
        return None;
    }
    let m = Matrix::of(&tensor.shape)?;
    let e = tensor.elem_bytes.max(1);
    let wg = work_group(profile);
    // Bound the work before walking anything; the tensor's bytes (the sum of the paths'
    // minimal bytes) must fit in u64.
    m.batch.checked_mul(m.h)?.checked_mul(m.w)?.checked_mul(e)?;
    let steps = match layout {
        Layout::Linear => m.batch.checked_mul(m.h.div_ceil(CH))?.checked_mul(m.w.div_ceil(CH))?,
        Layout::RTile(rt) => {
            let (gh, gw) = rt.grid(m);
            m.batch.checked_mul(gh)?.checked_mul(gw)?
        }
    };
    if steps > MAX_STEPS {
        return None;
    }
    let storage = match layout {
        Layout::Linear => linear_storage(profile, &tensor.shape),
        Layout::RTile(rt) => rt.storage,
    };
    let g = Geometry::of(profile, storage, e);
    let share = profile.texture_cache.l1_bytes / RESIDENT_WORK_GROUPS;
    let mut walk = Walk::new(g, share);
    let (ai, pad_util, out_block) = match layout {
        Layout::Linear => {
            linear_paths(m, tensor, consumer, wg, &mut walk);
            let ai = match consumer.kind {
                ConsumerKind::Matmul { .. } => matmul_ai(wg[1], CH * wg[0], e),
                ConsumerKind::Reduction => 1.0 / e as f64,
            };
            // The output extent one work-group covers along the other operand's axis.
            let out_block = match consumer.kind {
                ConsumerKind::Matmul { p_is_out_last: true, .. } => wg[1],
                _ => CH * wg[0],
            };
            (ai, 1.0, out_block)
        }
        // The model's consumers reduce a tiled axis with one element per channel along W; a
        // texel of channel-packed layout holds four slices' values, which it does not model:
        // it declines to score those (`conv_model` weighs them for a convolution's input).
        Layout::RTile(rt) if rt.pack != fbc_dialects::layout::Pack::W => return None,
        Layout::RTile(rt) => {
            rtile_paths(m, tensor, rt, consumer.reduce, &mut walk)?;
            let t_p = match consumer.reduce {
                Axis2::H => rt.tile[1],
                Axis2::W => rt.tile[0],
            };
            let ai = match consumer.kind {
                ConsumerKind::Matmul { .. } => matmul_ai(t_p, t_p, e),
                ConsumerKind::Reduction => 1.0 / e as f64,
            };
            let (gh, gw) = rt.grid(m);
            let padded = (gh * rt.tile[0]) as f64 * (gw * rt.tile[1]) as f64;
            let pad_util = (m.h * m.w) as f64 / padded;
            (ai, pad_util, t_p)
        }
    };
    let (fetched, minimal, n_paths) = (walk.fetched, walk.minimal, walk.paths);
    let modelled = fetched.checked_mul(g.block_bytes)?;
    let mem_eff = if modelled == 0 { 0.0 } else { (minimal as f64 / modelled as f64).min(1.0) };
    let work_groups = match consumer.kind {
        ConsumerKind::Matmul { other, out_batch, .. } => {
            // Paths of one batch slice, times the output blocks along the other axis and the
            // result's batch (a broadcast weight is streamed once per result batch).
            let per_slice = n_paths / m.batch.max(1);
            per_slice * other.div_ceil(out_block.max(1)) * out_batch.max(m.batch)
        }
        ConsumerKind::Reduction => n_paths,
    };
    let cu = u64::from(profile.compute.compute_units).max(1);
    let occupancy = (work_groups as f64 / cu as f64).min(1.0);
    let compute = profile.compute.peak_f32_gflops * occupancy * pad_util;
    let memory = ai * profile.memory.dram_bandwidth_gbps;
    let gflops = compute.min(memory);
    Some(Score {
        gflops,
        mem_eff,
        perf: gflops * mem_eff,
        minimal_bytes: minimal,
        modelled_bytes: modelled,
        fetched_blocks: fetched,
        work_groups,
    })
}

/// Where an R-Tile whose image fits the device is best kept, from what `fbc calibrate` measured
/// on it (the profile's `[measured]` table): `image2d` unless the measured rates say a buffer
/// serves `consumers` sooner.
///
/// Each consumer takes `max(bytes / read rate, FLOPs / contraction rate)` of the storage, and a
/// matrix-vector product (one side at most one texel row, 4: this tensor's parallel extent, as
/// for a decode step's activations, or the other side, as for its weights) `bytes / read rate`:
/// it runs the skinny kernel, which streams its operands, not the tiled one. The read rates are
/// `buffer_row_gbps` for a buffer (an R-Tile in a buffer is read a whole texel row of a tile at
/// a time, coalesced) and `image_tile_gbps` (else `image_row_gbps`) for an image; the
/// contraction rates are the tiled kernel's on each storage.
/// A matmul consumer does `2 · |T| · other` FLOPs, a reduction one per element. Without every
/// one of those figures (the builtin `mali`/`adreno` profiles, a `--quick` calibration, a device
/// without images) nothing is measured to decide by and the image stays; a tensor no reduction
/// reads stays an image too, unless it is at most one texel row high (`h ≤ 4`: a decode step's
/// activations), which is read once, at the read rate.
pub fn measured_storage(
    profile: &HardwareProfile,
    tensor: &TensorDesc,
    consumers: &[Consumer],
) -> Storage {
    let Some(m) = profile.measured.as_ref().filter(|m| !m.quick) else { return Storage::Image2d };
    let rates = (|| {
        let image_read = m.image_tile_gbps.or(m.image_row_gbps)?.get();
        Some([
            (m.buffer_row_gbps?.get(), m.contraction_buffer_gflops?.get()),
            (image_read, m.contraction_image_gflops?.get()),
        ])
    })();
    let Some([buffer, image]) = rates else { return Storage::Image2d };
    let Some(m) = Matrix::of(&tensor.shape) else { return Storage::Image2d };
    // A tensor of at most one texel row a slice (a decode step's activations) that no
    // reduction reads is read once, by elementwise kernels or attention: as a stream.
    let one_row = m.h <= CH;
    if consumers.is_empty() && !one_row {
        return Storage::Image2d;
    }
    let elems = tensor.shape.iter().product::<u64>() as f64;
    let bytes = elems * tensor.elem_bytes.max(1) as f64;
    let time = |(read_gbps, gflops): (f64, f64)| -> f64 {
        if consumers.is_empty() {
            return bytes / read_gbps;
        }
        consumers
            .iter()
            .map(|c| match c.kind {
                // A matrix-vector product (a side of at most one texel row, this tensor's or
                // the other operand's) streams its operands once: the read rate bounds it.
                ConsumerKind::Matmul { other, .. }
                    if other.min(match c.reduce {
                        Axis2::H => m.w,
                        Axis2::W => m.h,
                    }) <= CH =>
                {
                    bytes / read_gbps
                }
                ConsumerKind::Matmul { other, .. } => {
                    (bytes / read_gbps).max(2.0 * elems * other as f64 / gflops)
                }
                ConsumerKind::Reduction => bytes / read_gbps,
            })
            .sum()
    };
    if time(buffer) < time(image) {
        Storage::Buffer
    } else {
        Storage::Image2d
    }
}

/// Eq. 2's objective for one layout: the sum of `perf` over the consumers (a consumer the layout
/// cannot be scored for contributes 0).
pub fn total(
    profile: &HardwareProfile,
    tensor: &TensorDesc,
    layout: &Layout,
    consumers: &[Consumer],
) -> f64 {
    consumers.iter().filter_map(|c| score(profile, tensor, layout, c)).map(|s| s.perf).sum()
}

/// The cache blocks touched by one reduction path — the elements `[p0, p0 + len)` along the
/// parallel axis, all of the reduced axis, in batch slice 0 — as a union (each block once).
/// This is Eq. 1 applied to a traversal rather than a tile: the number Fig. 8 compares.
pub fn path_blocks(
    profile: &HardwareProfile,
    shape: &[u64],
    elem_bytes: u64,
    layout: &Layout,
    reduce: Axis2,
    p0: u64,
    len: u64,
) -> Option<u64> {
    let m = Matrix::of(shape)?;
    let (n_r, p_end) = match reduce {
        Axis2::H => (m.h, (p0.checked_add(len)?).min(m.w)),
        Axis2::W => (m.w, (p0.checked_add(len)?).min(m.h)),
    };
    if n_r.checked_mul(p_end.saturating_sub(p0))? > MAX_STEPS {
        return None;
    }
    let storage = match layout {
        Layout::Linear => linear_storage(profile, shape),
        Layout::RTile(r) => r.storage,
    };
    let g = Geometry::of(profile, storage, elem_bytes);
    let rank = shape.len();
    let mut blocks = std::collections::BTreeSet::new();
    for p in p0..p_end {
        for r in 0..n_r {
            let (i, j) = if reduce == Axis2::H { (r, p) } else { (p, r) };
            let mut idx = vec![0u64; rank];
            idx[rank - 2] = i;
            idx[rank - 1] = j;
            let t = layout.texel_of(shape, &idx)?;
            blocks.insert((t.x / g.bw, t.y / g.bh));
        }
    }
    Some(blocks.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fbc_dialects::layout::Intra;

    fn mali() -> HardwareProfile {
        fbc_target::builtin("mali").unwrap()
    }

    fn adreno() -> HardwareProfile {
        fbc_target::builtin("adreno").unwrap()
    }

    const B: [u64; 2] = [2048, 8192];

    fn b_tensor() -> TensorDesc {
        TensorDesc { shape: B.to_vec(), elem_bytes: 4 }
    }

    /// matmul_fb.fbir: B is operand `b` of the forward (reduces K = H, M = 512) and, transposed,
    /// of the backward dA = dO·Bᵀ (reduces N = W, M = 512).
    fn fwd() -> Consumer {
        Consumer {
            reduce: Axis2::H,
            kind: ConsumerKind::Matmul { p_is_out_last: true, other: 512, out_batch: 1 },
        }
    }

    fn bwd() -> Consumer {
        Consumer {
            reduce: Axis2::W,
            kind: ConsumerKind::Matmul { p_is_out_last: true, other: 512, out_batch: 1 },
        }
    }

    /// The storage the measured rates choose: the nvidia profile's `[measured]` table (buffer
    /// reads 3692 GB/s against image tiles 3207, the tiled contraction 33.1 against 41.0 TFLOP/s
    /// on them). By hand for a 2048 × 2048 f32 weight (16.8 MB, 4.19 M elements):
    /// - read by a matrix-vector product: buffer `max(16.8e6 / 3692e9, 8.4e6 / 33.1e12)` =
    ///   4.54 µs against image 16.8e6 / 3207e9 = 5.23 µs: a buffer;
    /// - by a product of 16 rows: buffer `max(4.54, 134.2e6 / 33.1e12 = 4.05)` = 4.54 µs against
    ///   image `max(5.23, 3.27)`: still a buffer; of 32 rows: 8.11 µs against `max(5.23, 6.55)`:
    ///   an image; of 512 rows (a prefill): 130 against 105 µs: an image.
    #[test]
    fn measured_rates_keep_matrix_vector_operands_in_buffers() {
        let nvidia = fbc_target::builtin("nvidia").unwrap();
        let w = TensorDesc { shape: vec![2048, 2048], elem_bytes: 4 };
        let rows = |other| Consumer {
            reduce: Axis2::H,
            kind: ConsumerKind::Matmul { p_is_out_last: true, other, out_batch: 1 },
        };
        let pick = |p: &HardwareProfile, cs: &[Consumer]| measured_storage(p, &w, cs);
        assert_eq!(pick(&nvidia, &[rows(1)]), Storage::Buffer);
        assert_eq!(pick(&nvidia, &[rows(16)]), Storage::Buffer);
        assert_eq!(pick(&nvidia, &[rows(32)]), Storage::Image2d);
        assert_eq!(pick(&nvidia, &[rows(512)]), Storage::Image2d);
        // Both: the prefill's product outweighs the decode's.
        assert_eq!(pick(&nvidia, &[rows(1), rows(512)]), Storage::Image2d);
        // A reduction reads once: the faster read wins.
        let red = Consumer { reduce: Axis2::W, kind: ConsumerKind::Reduction };
        assert_eq!(pick(&nvidia, &[red]), Storage::Buffer);
        // Nothing reads it, nothing measured, a quick calibration, a missing rate: an image.
        assert_eq!(pick(&nvidia, &[]), Storage::Image2d);
        assert_eq!(pick(&mali(), &[rows(1)]), Storage::Image2d);
        let mut quick = nvidia.clone();
        quick.measured.as_mut().unwrap().quick = true;
        assert_eq!(pick(&quick, &[rows(1)]), Storage::Image2d);
        let mut partial = nvidia.clone();
        partial.measured.as_mut().unwrap().contraction_buffer_gflops = None;
        assert_eq!(pick(&partial, &[rows(1)]), Storage::Image2d);
        // A decode step's activation, one row of 2048 read as the left side of a product
        // with a 2048-wide weight: a matrix-vector product all the same (the read rate), not
        // 8.4 MFLOP at the tiled kernel's rate; read by no reduction (by attention, elementwise
        // kernels), read once. A tensor of 512 rows read by no reduction stays an image.
        let x = TensorDesc { shape: vec![1, 1, 2048], elem_bytes: 4 };
        let left = Consumer {
            reduce: Axis2::W,
            kind: ConsumerKind::Matmul { p_is_out_last: false, other: 2048, out_batch: 1 },
        };
        assert_eq!(measured_storage(&nvidia, &x, &[left]), Storage::Buffer);
        assert_eq!(measured_storage(&nvidia, &x, &[]), Storage::Buffer);
        assert_eq!(measured_storage(&mali(), &x, &[]), Storage::Image2d);
        let tall = TensorDesc { shape: vec![512, 2048], elem_bytes: 4 };
        assert_eq!(measured_storage(&nvidia, &tall, &[]), Storage::Image2d);
        assert_eq!(measured_storage(&nvidia, &tall, &[left]), Storage::Image2d);
        // Images measured faster than buffers: the image stays.
        let mut images = nvidia.clone();
        images.measured.as_mut().unwrap().image_tile_gbps = fbc_target::Positive::new(4000.0);
        assert_eq!(pick(&images, &[rows(1)]), Storage::Image2d);
    }

    fn rt(shape: &[u64], tile: [u64; 2], intra: Intra, hz: u64) -> Layout {
        Layout::RTile(RTile::for_shape(shape, tile, intra, hz, Storage::Image2d).unwrap())
    }

    fn close(a: f64, b: f64) {
        assert!((a - b).abs() < 1e-6 * b.abs().max(1.0), "{a} vs {b}");
    }

    #[test]
    fn geometry() {
        // Mali: 4 x 8 texel blocks of RGBA f32 (16 B): 512 B; a buffer line is 4 texels.
        assert_eq!(
            Geometry::of(&mali(), Storage::Image2d, 4),
            Geometry { bh: 4, bw: 8, block_bytes: 512 }
        );
        assert_eq!(
            Geometry::of(&mali(), Storage::Buffer, 4),
            Geometry { bh: 1, bw: 4, block_bytes: 64 }
        );
        // Adreno: 4 x 16 blocks of RGBA f16 (8 B): 512 B.
        assert_eq!(Geometry::of(&adreno(), Storage::Image2d, 2).block_bytes, 512);
    }

    #[test]
    fn n_cache_counts_blocks_at_their_position() {
        let g = Geometry { bh: 4, bw: 8, block_bytes: 512 };
        // A 4 x 8 rectangle aligned: one block; shifted by one texel each way: four.
        assert_eq!(n_cache(Rect { x: 0, y: 0, w: 8, h: 4 }, g), 1);
        assert_eq!(n_cache(Rect { x: 1, y: 1, w: 8, h: 4 }, g), 4);
        // A one-texel column of 8 rows: 2 blocks (the Fig. 8(a) vertical traversal).
        assert_eq!(n_cache(Rect { x: 0, y: 0, w: 1, h: 8 }, g), 2);
        assert_eq!(n_cache(Rect { x: 0, y: 0, w: 0, h: 8 }, g), 0);
    }

    #[test]
    fn retention() {
        let g = Geometry { bh: 4, bw: 8, block_bytes: 512 };
        // Eight one-texel steps across one block: fetched once if retained, eight times if not.
        let steps: Vec<Rect> = (0..8).map(|x| Rect { x, y: 0, w: 1, h: 4 }).collect();
        assert_eq!(fetched_along(&steps, g, 512), 1);
        assert_eq!(fetched_along(&steps, g, 511), 8);
    }

    #[test]
    fn linear_baseline_by_hand() {
        // Forward on mali: work-groups [32, 8]; operand b's paths are 4·32 = 128 columns (32
        // texels) and each step is 4 rows: exactly one row of 4 aligned blocks, no waste.
        let p = mali();
        let s = score(&p, &b_tensor(), &Layout::Linear, &fwd()).unwrap();
        close(s.mem_eff, 1.0);
        // 64 paths x 512 steps x 4 blocks.
        assert_eq!(s.fetched_blocks, 64 * 512 * 4);
        // AI = 2·8·128 / (136·4) = 3.7647 FLOP/B; x 85.6 GB/s = 322.26 GFLOP/s (memory-bound).
        close(s.gflops, 2.0 * 8.0 * 128.0 / (136.0 * 4.0) * 85.6);
        // Backward: paths of 128 rows; a step is a 128 x 1 texel column = 32 blocks of 512 B =
        // 16 KiB > 8 KiB (half of L1): refetched every step, 1 texel column of 8 used.
        let s = score(&p, &b_tensor(), &Layout::Linear, &bwd()).unwrap();
        close(s.mem_eff, 1.0 / 8.0);
        assert_eq!(s.fetched_blocks, 16 * 2048 * 32);
        // Adreno: [64, 4] work-groups, 4 x 16 blocks: the backward uses 1 column of 16.
        let s = score(&adreno(), &b_tensor(), &Layout::Linear, &bwd()).unwrap();
        close(s.mem_eff, 1.0 / 16.0);
        let s = score(&adreno(), &b_tensor(), &Layout::Linear, &fwd()).unwrap();
        close(s.mem_eff, 1.0);
    }

    #[test]
    fn rtile_serves_both_directions() {
        let p = mali();
        // 32 x 128 tiles, blocks of [4, 32] (8 texels = C_w): 128 x 8-texel footprints, aligned.
        let l = rt(&B, [32, 128], Intra::Block { bh: 4, bw: 32 }, 1);
        for c in [fwd(), bwd()] {
            let s = score(&p, &b_tensor(), &l, &c).unwrap();
            close(s.mem_eff, 1.0);
            assert_eq!(s.fetched_blocks, 2048 * 8192 / (4 * 8 * 4), "every block once");
        }
        // Forward: t_p = tw = 128: AI = 32 FLOP/B, 32 x 85.6 = 2739 > 2476 peak: compute-bound.
        let s = score(&p, &b_tensor(), &l, &fwd()).unwrap();
        close(s.gflops, 2476.0);
        // 64 tile columns x 512/128 output blocks = 256 work-groups ≥ 12 cores.
        assert_eq!(s.work_groups, 256);
        // Backward: t_p = th = 32: AI = 8, 8 x 85.6 = 684.8 GFLOP/s.
        let s = score(&p, &b_tensor(), &l, &bwd()).unwrap();
        close(s.gflops, 684.8);
        close(total(&p, &b_tensor(), &l, &[fwd(), bwd()]), 2476.0 + 684.8);
        // The linear baseline: 322.26 + 322.26 / 8.
        let lin = 2.0 * 8.0 * 128.0 / (136.0 * 4.0) * 85.6;
        close(total(&p, &b_tensor(), &Layout::Linear, &[fwd(), bwd()]), lin * 1.125);
    }

    #[test]
    fn fig8_paths() {
        // The [8, 16] tensor of Fig. 8 in 4 x 4 tiles; one path is one texel column (4 elements)
        // reduced along H, or one row reduced along W.
        let p = mali();
        let s = [8u64, 16];
        let by_w = rt(&s, [4, 4], Intra::Rows, 1);
        let by_h = rt(&s, [4, 4], Intra::Rows, 0);
        let pb = |l: &Layout, r: Axis2, len| path_blocks(&p, &s, 4, l, r, 0, len).unwrap();
        // Reduce Dim2 (H): linear walks 8 rows down one texel column: 2 blocks of 4 rows.
        assert_eq!(pb(&Layout::Linear, Axis2::H, 4), 2);
        // R-Tile with H horizontal: the two tiles of the path sit side by side, 4 rows x 2
        // texels: one block (the Z-shaped path of Fig. 8(b), right).
        assert_eq!(pb(&by_h, Axis2::H, 4), 1);
        assert_eq!(pb(&by_w, Axis2::H, 4), 2);
        // Reduce Dim1 (W): one row of 4 texels, horizontal in linear and in W-horizontal tiles.
        assert_eq!(pb(&Layout::Linear, Axis2::W, 1), 1);
        assert_eq!(pb(&by_w, Axis2::W, 1), 1);
        // With the grid transposed the row's 4 tiles are stacked: rows 0, 4, 8, 12: 4 blocks.
        assert_eq!(pb(&by_h, Axis2::W, 1), 4);
    }

    #[test]
    fn narrow_tiles_reuse_blocks_only_along_the_path() {
        // 4 x 4 tiles are one texel wide: with W horizontal, a W-reduction's consecutive tiles
        // share blocks (retained: one block is 512 B); with H horizontal they are 4 rows apart.
        let p = mali();
        let t = TensorDesc { shape: vec![64, 64], elem_bytes: 4 };
        let c = Consumer { reduce: Axis2::W, kind: ConsumerKind::Reduction };
        let good = score(&p, &t, &rt(&[64, 64], [4, 4], Intra::Rows, 1), &c).unwrap();
        let bad = score(&p, &t, &rt(&[64, 64], [4, 4], Intra::Rows, 0), &c).unwrap();
        // Good: 16 paths of 16 tiles, 2 blocks per path (8 texels per block): 32 blocks.
        assert_eq!(good.fetched_blocks, 32);
        close(good.mem_eff, 1.0);
        // Bad: each tile is alone in its block's column range: 16 x 16 blocks, 1/8 used.
        assert_eq!(bad.fetched_blocks, 256);
        close(bad.mem_eff, 1.0 / 8.0);
        // A reduction is memory-bound at 1 FLOP per 4 B: 85.6 / 4 GFLOP/s; 16 paths ≥ 12 cores.
        close(good.gflops, 21.4);
    }

    #[test]
    fn padding_and_occupancy_lower_gflops() {
        // A 40 x 40 tensor in 32 x 32 tiles: 64 x 64 padded, pad_util = 1600 / 4096; 2 tile
        // columns x 1 output block: 2 work-groups of 12 cores.
        let p = mali();
        let t = TensorDesc { shape: vec![40, 40], elem_bytes: 4 };
        let c = Consumer {
            reduce: Axis2::H,
            kind: ConsumerKind::Matmul { p_is_out_last: true, other: 32, out_batch: 1 },
        };
        let s = score(&p, &t, &rt(&[40, 40], [32, 32], Intra::Rows, 1), &c).unwrap();
        assert_eq!(s.work_groups, 2);
        close(s.gflops, (2476.0_f64 * (2.0 / 12.0) * (1600.0 / 4096.0)).min(8.0 * 85.6));
        // Minimal bytes count real elements only.
        assert_eq!(s.minimal_bytes, 40 * 40 * 4);
    }

    #[test]
    fn unusable_inputs_give_none() {
        let p = mali();
        let t = TensorDesc { shape: vec![16], elem_bytes: 4 };
        assert!(score(&p, &t, &Layout::Linear, &fwd()).is_none());
        let t = TensorDesc { shape: vec![0, 16], elem_bytes: 4 };
        assert!(score(&p, &t, &Layout::Linear, &fwd()).is_none());
        // 2^40 elements: 2^36 steps, beyond MAX_STEPS; the model declines instead of hanging.
        let t = TensorDesc { shape: vec![1 << 20, 1 << 20], elem_bytes: 4 };
        assert!(score(&p, &t, &Layout::Linear, &fwd()).is_none());
        assert!(path_blocks(&p, &t.shape, 4, &Layout::Linear, Axis2::H, 0, 64).is_none());
    }
}

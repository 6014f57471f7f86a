//! One `__kernel` from one [`Kernel`]: the plain form (one work-item per parallel point, loops
//! over the reduction) and the tiled contraction (`fbc_kernels::contraction`).
//!
//! Index maps become C integer expressions over the domain indices `d0..dn` (all non-negative),
//! computed in `int` where the bounds prover's interval arithmetic shows that every
//! subexpression of every map fits in 32 bits over the whole domain, else in `long` (the kernel's
//! comment says why: see [`index_width`]); `floordiv`/`mod` are C's `/`/`%` where the dividend
//! is provably non-negative and the divisor a positive constant, else the
//! `fbc_floordiv`/`fbc_mod` helpers of the prelude, which round toward -inf. Scalar values are
//! `float` or `long` as [`Kernel`]'s typing rules say; integer payload arithmetic goes through
//! the prelude's `fbc_iadd`..`fbc_imod`, `fbc_toint`, `fbc_toi32` (wrapping, floor division with
//! `MIN / -1 = MIN`, saturating conversions: never C's undefined behaviour); where a divisor is
//! not a non-zero constant, or `int()` takes a float, the kernel uses the checked forms
//! (`fbc_idivc`, `fbc_imodc`, `fbc_tointc`), which record a division by zero or `int(NaN)` in
//! the error buffer like a failed bounds check.

mod attention;
mod decode;
mod row;

use std::borrow::Cow;
use std::cell::{Cell, RefCell};
use std::fmt::Write as _;

use fbc_dialects::memory::{
    Combine, Iter, Kernel, LaunchBounds, MemType, Scalar, ScalarBin, ScalarKind, ScalarUn,
    StorageKind,
};
use fbc_index::{Expr, IndexMap};
use fbc_ir::attr::BinOp;
use fbc_ir::ElemType;

/// How kernels are shaped (from the target profile).
#[derive(Debug, Clone)]
pub struct KernelOptions {
    /// Work-group shape `[x, y]` of the tiled contraction.
    pub group: [u64; 2],
    /// Work-group size of the plain kernels (one dimension).
    pub group_1d: u64,
    /// Local memory a work-group may use.
    pub local_mem_bytes: u64,
    /// Most work-items per group.
    pub max_group: u64,
    /// Use the tiled contraction where it applies.
    pub tiled: bool,
    /// The tiled contraction's register block, k step, staging order and local read width.
    pub contraction: fbc_target::ContractionParams,
    /// The skinny contraction's rows of lanes and the matrix-vector products' shortest
    /// reduction (see [`fbc_target::SkinnyParams`]).
    pub skinny: fbc_target::SkinnyParams,
    /// Keys of a flash-decoding chunk (the profile's `[attention] decode_chunk`).
    pub decode_chunk: u64,
    /// Work-groups a query block's keys may be split over, each at most this fraction of the
    /// tiles of the longest block (the profile's `[attention] prompt_splits`).
    pub prompt_splits: u64,
    /// Work-items the whole device keeps in flight (`compute_units × resident_work_items`): a
    /// reduction with at most a quarter as many outputs runs a work-group per output (see
    /// [`group_reduction`]).
    pub resident: u64,
    /// Tuned parameters by contraction shape class (`fbc tune`, [`super::tuning`]): a tiled
    /// contraction whose class has an entry takes its work-group and parameters instead of
    /// `group` and `contraction`.
    pub tuned: std::sync::Arc<std::collections::BTreeMap<String, super::tuning::Tuned>>,
    /// Plain kernels may compute four values a work-item (the profile's `[compute]
    /// four_wide_items`; `Cx::quad_lane`).
    pub four_wide: bool,
}

impl Default for KernelOptions {
    fn default() -> KernelOptions {
        KernelOptions {
            group: [16, 16],
            group_1d: 64,
            local_mem_bytes: 32768,
            max_group: 256,
            tiled: true,
            contraction: fbc_target::ContractionParams::default(),
            skinny: fbc_target::SkinnyParams::default(),
            decode_chunk: u64::from(fbc_target::AttentionParams::default().decode_chunk),
            prompt_splits: 1,
            resident: 4 * 2048,
            tuned: Default::default(),
            four_wide: false,
        }
    }
}

impl KernelOptions {
    /// The options a hardware profile implies: its first preferred work-group shape that fits its
    /// maximum group size, its local memory and its contraction parameters.
    pub fn for_target(t: &fbc_target::HardwareProfile) -> KernelOptions {
        let max = u64::from(t.compute.max_work_group_size.max(1));
        let group = t
            .compute
            .preferred_work_groups
            .iter()
            .map(|g| [u64::from(g[0]), u64::from(g[1])])
            .find(|g| g[0] * g[1] <= max && g[0] > 0 && g[1] > 0)
            .unwrap_or([8, 8]);
        KernelOptions {
            group,
            group_1d: u64::from(t.compute.simd_width.max(1)).max(64).min(max),
            local_mem_bytes: t.compute.local_mem_bytes,
            max_group: max,
            tiled: true,
            contraction: t.contraction,
            skinny: t.skinny,
            decode_chunk: u64::from(t.attention.decode_chunk),
            prompt_splits: u64::from(t.attention.prompt_splits),
            resident: u64::from(t.compute.compute_units.max(1))
                * u64::from(t.compute.resident_work_items.max(1)),
            tuned: Default::default(),
            four_wide: t.compute.four_wide_items,
        }
    }
}

/// A written kernel and how to launch it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Emitted {
    pub source: String,
    pub global: Vec<u64>,
    pub local: Option<Vec<u64>>,
    pub tiled: bool,
    /// The kernel is the skinny contraction (`fbc_kernels::skinny`).
    pub skinny: bool,
    /// The kernel checks accesses when it runs and takes the error buffer as its last
    /// parameter (`__global int* fbc_err`, [`FAULT_INTS`] ints), where a failed check records
    /// the fault id it was written with.
    pub checked: bool,
    /// The shape class of a tiled contraction (`super::tuning::shape_key`), what `fbc tune`
    /// measures and its database is keyed by.
    pub shape: Option<String>,
    /// The kernel combines partial results in this one launch (the skinny kernel's split-K,
    /// `fbc_kernels::Skinny::split`; a split attention launch's chunks): the elements of its two
    /// scratch buffers, `f32` partial sums and `int` counts that must be
    /// zero before the first launch (each launch leaves them zero), which it takes after its
    /// operands.
    pub split: Option<(u64, u64)>,
    /// The skinny kernel written as a part of a merged launch (`fbc_kernels::merge`), where its
    /// form allows one and the profile's `[skinny] merge_launches` is on: the writer runs
    /// neighbouring launches of one shape as one.
    pub part: Option<fbc_kernels::SkinnyPart>,
    /// The kernel is the simple form (one work-item per output point, no work-group
    /// cooperation): the writer may run it as a part of a merged launch.
    pub simple: bool,
}

/// Ints of the error buffer: see the prelude's `fbc_fault` for the layout.
pub const FAULT_INTS: usize = 26;

/// How many domain indices a fault records (the rest of a deeper domain is not recorded).
pub const FAULT_DIMS: usize = 8;

/// The largest power of two no larger than `x` (1 for `x ≤ 1`).
fn floor_pow2(x: u64) -> u64 {
    1u64 << (63 - x.max(1).leading_zeros())
}

/// The global and local sizes of one work-item per item, in work-groups of the profile's
/// one-dimensional size (at least one group).
fn item_grid(items: u64, opts: &KernelOptions) -> (u64, u64) {
    let g = opts.group_1d.clamp(1, opts.max_group.max(1));
    (items.div_ceil(g).max(1) * g, g)
}

/// The shortest reduction (in values) that takes a work-group per output ([`group_reduction`],
/// and a row kernel's rows).
const GROUP_MIN_REDUCED: u64 = 128;

/// The first of the four consecutive values of its last parallel dimension that a work-item
/// of a four-wide plain kernel computes (`Cx::quad_lane`).
const QUAD_BASE: &str = "(4 * dq)";

/// The work-group size of the group-reduction form of a reduction with `items` outputs, each
/// combining `reduced` values, or `None` for the plain form (one work-item per output, looping
/// over the reduction). A reduction with few outputs (at most a quarter of what the device keeps
/// in flight, `opts.resident`) and a long reduction (at least 128 values), which the caller
/// checks reads along its innermost reduction dimension, runs one work-group per output instead:
/// its work-items stride the reduction (neighbours read neighbouring values), and a tree in local
/// memory combines their partial results, in an order fixed by the group size (so results are
/// the same run to run). The group is the largest power of two up to 256 (and the
/// device's limit) that is no larger than the reduction.
pub fn group_reduction(items: u64, reduced: u64, opts: &KernelOptions) -> Option<u64> {
    if reduced < GROUP_MIN_REDUCED || items.saturating_mul(4) > opts.resident {
        return None;
    }
    let most = 256.min(opts.max_group).min(reduced);
    (most >= 2).then(|| floor_pow2(most))
}

/// The shape `[C, L]` of the column-group form of a reduction with `items` outputs, each
/// combining `reduced` values, or `None`. For a reduction with few outputs whose reads move
/// along the outputs, not along the reduction (a column sum, the sum of split-K partials laid
/// out `[S, P]`), where [`group_reduction`] does not apply: a work-group of `C × L` work-items
/// takes `C` neighbouring outputs (their reads coalesce) and `L` work-items on each, which stride
/// the reduction; a tree in local memory combines the `L` partial results of each output in a
/// fixed order. One work-item per output would leave the device idle behind a serial loop.
pub fn column_reduction(items: u64, reduced: u64, opts: &KernelOptions) -> Option<[u64; 2]> {
    const COLS: u64 = 32;
    // Measured on the H200 (`tests/bench/h200.sh`, parts lora and reduce): the sums of 256
    // split-K partials take 0.67-0.8x the time of one work-item per output, those of 16 or 64
    // about the same or more (a tree of three steps for two to eight values a work-item).
    const MIN_REDUCED: u64 = 128;
    if reduced < MIN_REDUCED || items.saturating_mul(4) > opts.resident {
        return None;
    }
    let group = 256.min(opts.max_group);
    let lanes = group / COLS;
    (lanes >= 2).then(|| [COLS, floor_pow2(lanes)])
}

/// The C statement that combines value `v` into accumulator `acc` (`max` propagates NaN).
fn combine_into(comb: Combine, acc: &str, v: &str) -> String {
    match comb {
        Combine::Add => format!("{acc} += {v};"),
        Combine::Max => {
            format!("{{ const float v = {v}; {acc} = (isnan(v) || v > {acc}) ? v : {acc}; }}")
        }
    }
}

/// Writes kernel `k`, whose operands have `types`, under the comment lines `comment`. Every
/// access the bounds prover (`fbc_dialects::memory::bounds`) does not prove in range, and every
/// data-dependent `xK[e]` load, is checked when the kernel runs; a failed check records
/// `fault_id` (non-zero) in the error buffer (see [`Emitted::checked`]).
pub fn emit(
    k: &Kernel,
    types: &[MemType],
    comment: &str,
    opts: &KernelOptions,
    fault_id: u32,
) -> Result<Emitted, String> {
    k.check(types).map_err(|e| e.message)?;
    if k.attention.is_none() {
        check(k, types)?;
    }
    let bounds = k.bounds(types);
    let kind = |i: usize| types.get(i).map(|t| ScalarKind::of_elem(t.elem));
    let body_kind = k.body.kind(&kind, None).ok();
    let arithmetic = k.body.arithmetic_can_fail(&kind, None)
        || k.epilogue.as_ref().is_some_and(|e| e.arithmetic_can_fail(&kind, body_kind))
        || k.stats.iter().any(|st| {
            st.body.arithmetic_can_fail(&kind, None)
                || st.epilogue.as_ref().is_some_and(|e| e.arithmetic_can_fail(&kind, None))
        });
    // Symbols are checked against their ranges when the kernel runs.
    let checked = bounds.any_checked() || arithmetic || !k.symbols.is_empty();
    let (w, wide);
    let comment = match index_width(k) {
        Ok(()) => {
            w = Width::Int;
            comment
        }
        Err(why) => {
            w = Width::Long;
            wide = format!("{comment}// 64-bit indices: {why}.\n");
            &wide
        }
    };
    let cx = Cx {
        k,
        types,
        texels: RefCell::new(None),
        in_select: Cell::new(0),
        quad_lane: Cell::new(None),
        bounds,
        checked,
        fault_id,
        w,
        coords: RefCell::new(Vec::new()),
        reads_as: RefCell::new(Vec::new()),
    };
    if k.attention.is_some() {
        return cx.attention(comment, opts);
    }
    if k.is_row() {
        if !k.symbols.is_empty() {
            return Err("a row kernel with symbols is not supported".into());
        }
        return cx.row(comment, opts);
    }
    // Generated contractions are always proven; a checked one takes the plain kernel. So does
    // the direct convolution over channel-packed texels (`rtile-select`'s convolution model
    // chose it: `compiler/transforms/src/layout/conv_model.rs`): a `tensor.conv2d` launch whose
    // innermost reduction dimension (`[KH, KW, C/4, 4]`, `lower/ops/conv.rs`) is an input
    // texel's channel, which the plain kernel reads once for its four values. (A product over
    // an R-Tile packed along its reduction also ends in such a dimension and stays a template:
    // it stages whole texels.)
    let direct_conv = k.source.starts_with("tensor.conv2d") && cx.texel_innermost();
    if opts.tiled && !checked && !direct_conv {
        if let Some(e) = cx.contraction(comment, opts)? {
            return Ok(e);
        }
    }
    cx.plain(comment, opts)
}

fn check(k: &Kernel, types: &[MemType]) -> Result<(), String> {
    let n = k.domain.len();
    if k.maps.is_empty() || k.maps.len() != types.len() {
        return Err(format!("{} maps for {} operands", k.maps.len(), types.len()));
    }
    if k.iterators.len() != n {
        return Err(format!("{} iterators for a {n}-dimensional domain", k.iterators.len()));
    }
    if k.iterators[k.parallel_dims()..].contains(&Iter::Parallel) {
        return Err("a parallel dimension after a reduction dimension".into());
    }
    for (i, (m, t)) in k.maps.iter().zip(types).enumerate() {
        if m.dims.len() != n || !(m.symbols.is_empty() || m.symbols.len() == k.symbols.len()) {
            return Err(format!(
                "map of operand {i} is not over the {n} domain dimensions and the launch's symbols"
            ));
        }
        if m.results.len() != t.coords() {
            return Err(format!(
                "map of operand {i} has {} results, its storage has {} coordinates",
                m.results.len(),
                t.coords()
            ));
        }
        // f16 images hold f32 values: `read_imagef`/`write_imagef` convert (core OpenCL 1.2).
        if matches!(t.storage, StorageKind::Image { .. })
            && !matches!(t.elem, ElemType::F32 | ElemType::F16)
        {
            return Err(format!("operand {i} is an image of {}", t.elem.name()));
        }
        if !matches!(t.value_elem(), ElemType::F32 | ElemType::I32 | ElemType::I8) {
            return Err(format!("operand {i} has elements of {}", t.elem.name()));
        }
    }
    if let Some(g) = &k.guard {
        if g.map.dims.len() != n || g.map.results.len() != g.bounds.len() {
            return Err("guard map does not fit the domain or its bounds".into());
        }
    }
    let has_red = k.parallel_dims() < n && !k.is_row();
    if has_red != k.combine.is_some() {
        return Err("a combine is required exactly when there are reduction dimensions".into());
    }
    Ok(())
}

/// Whether dimension `d` appears in `e`.
fn uses(e: &Expr, d: &str) -> bool {
    match e {
        Expr::Var(v) => v == d,
        Expr::Const(_) => false,
        Expr::Neg(a) => uses(a, d),
        Expr::Bin(_, a, b) => uses(a, d) || uses(b, d),
    }
}

/// Whether `e` has one value over each aligned run `4q .. 4q + 3` of dimension `d` (the other
/// dimensions fixed): `d` is read only through a floor division by a multiple of 4 (or a shift
/// by at least 2) of an expression that is `4·Q + d mod 4`, `Q` itself constant over the run,
/// and any operation of such values (an R-Tile's `d floordiv 4 mod 8`, the texel's column in
/// its tile, or `d floordiv 32 mod 2`, its row). A texel whose channel is `d mod 4` then holds
/// the four values of a run, read at once.
fn texel_invariant(e: &Expr, d: &str) -> bool {
    use fbc_index::BinOp as O;
    if !uses(e, d) {
        return true;
    }
    match e {
        Expr::Neg(a) => texel_invariant(a, d),
        // An operation of values constant over the run is too.
        Expr::Bin(_, a, b) if texel_invariant(a, d) && texel_invariant(b, d) => true,
        Expr::Bin(O::FloorDiv, a, c) => {
            matches!(**c, Expr::Const(c) if c > 0 && c % 4 == 0) && quad(a, d)
        }
        Expr::Bin(O::Shr, a, s) => matches!(**s, Expr::Const(2..=62)) && quad(a, d),
        _ => false,
    }
}

/// Whether `e` is `4·Q + d mod 4` with `Q` constant over each aligned run of four values of `d`
/// (see [`texel_invariant`]).
fn quad(e: &Expr, d: &str) -> bool {
    use fbc_index::BinOp as O;
    let four = |c: &Expr| matches!(c, Expr::Const(c) if *c > 0 && c % 4 == 0);
    match e {
        Expr::Var(v) => v == d,
        Expr::Bin(O::Mod, a, c) => four(c) && quad(a, d),
        Expr::Bin(O::And, a, m) => {
            matches!(**m, Expr::Const(m) if m >= 3 && (m + 1) & m == 0) && quad(a, d)
        }
        Expr::Bin(O::Add, a, b) => (quad(a, d) && step(b, d)) || (step(a, d) && quad(b, d)),
        Expr::Bin(O::Sub, a, b) => quad(a, d) && step(b, d),
        _ => false,
    }
}

/// Whether `e` is a multiple of 4 that is constant over each aligned run of four values of `d`.
fn step(e: &Expr, d: &str) -> bool {
    use fbc_index::BinOp as O;
    let four = |c: &Expr| matches!(c, Expr::Const(c) if c % 4 == 0);
    texel_invariant(e, d)
        && match e {
            Expr::Const(c) => c % 4 == 0,
            Expr::Neg(a) => step(a, d),
            Expr::Bin(O::Add | O::Sub, a, b) => step(a, d) && step(b, d),
            Expr::Bin(O::Mul, a, b) => four(a) || four(b),
            Expr::Bin(O::Shl, _, s) => matches!(**s, Expr::Const(2..=62)),
            _ => false,
        }
}

/// Whether `e` is `d mod 4` (or `d & 3`, or `d` itself where `d` has extent 4): the channel of
/// a texel that holds four consecutive values of `d`.
fn channel_of(e: &Expr, d: &str, extent: u64) -> bool {
    use fbc_index::BinOp as O;
    match e {
        Expr::Var(v) => v == d && extent == 4,
        Expr::Bin(O::Mod, a, c) => **c == Expr::Const(4) && quad(a, d),
        Expr::Bin(O::And, a, m) => **m == Expr::Const(3) && quad(a, d),
        _ => false,
    }
}

/// Whether payload `e` reads domain index `d` as a value (`Scalar::Dim`).
fn reads_dim(e: &Scalar, d: usize) -> bool {
    let mut found = false;
    e.visit(&mut |s| found |= matches!(s, Scalar::Dim(x) if *x == d));
    found
}

fn map_uses(m: &IndexMap, dim: usize) -> bool {
    m.dims.get(dim).is_some_and(|d| m.results.iter().any(|e| uses(e, d)))
}

/// Whether `e` is non-negative for non-negative dimension values.
fn nonneg(e: &Expr) -> bool {
    match e {
        Expr::Var(_) => true,
        Expr::Const(c) => *c >= 0,
        Expr::Neg(_) => false,
        Expr::Bin(op, a, b) => match op {
            BinOp::Add | BinOp::Mul => nonneg(a) && nonneg(b),
            BinOp::FloorDiv | BinOp::CeilDiv | BinOp::Mod => {
                nonneg(a) && matches!(**b, Expr::Const(c) if c > 0)
            }
            BinOp::Sub | BinOp::Shl | BinOp::Shr | BinOp::And | BinOp::Min | BinOp::Max => false,
        },
    }
}

/// The C integer type of a kernel's index arithmetic: domain indices, flattened work-item ids and
/// map expressions (payload integers are always `long`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Width {
    Int,
    Long,
}

impl Width {
    pub(crate) fn ty(self) -> &'static str {
        match self {
            Width::Int => "int",
            Width::Long => "long",
        }
    }

    /// The literal `v` of this type.
    pub(crate) fn lit(self, v: impl std::fmt::Display) -> String {
        match self {
            Width::Int => v.to_string(),
            Width::Long => format!("{v}L"),
        }
    }
}

/// Work-items or reduction steps a launch may flatten into one `int` index: a 32-bit index
/// still has room for the rounding of the global size up to whole work-groups.
const INT_POINTS: u128 = 1 << 30;

/// The index width of kernel `k`: `int` where every index is proven to fit, else `long` with the
/// reason. Proven means the product of the parallel extents (the flattened work-item id) and that
/// of the reduction extents are each at most 2^30, and interval arithmetic over the domain box
/// keeps every subexpression of every operand and guard map inside the 32-bit range.
pub(crate) fn index_width(k: &Kernel) -> Result<(), String> {
    let p = k.parallel_dims().min(k.domain.len());
    let points = |ds: &[u64]| ds.iter().fold(1u128, |a, &e| a.saturating_mul(u128::from(e)));
    let Some(mut domain) = fbc_dialects::memory::bounds::domain_box(&k.domain) else {
        return Ok(()); // no point at all
    };
    // The maps' variables are the dimensions, then the symbols.
    domain.extend(k.symbols.iter().map(|s| fbc_index::Interval { lo: s.lo, hi: s.hi }));
    for (what, ds) in [("parallel", &k.domain[..p]), ("reduction", &k.domain[p..])] {
        let n = points(ds);
        if n > INT_POINTS {
            return Err(format!("{n} {what} points exceed 2^30"));
        }
    }
    let fits = |m: &IndexMap| {
        m.results.iter().all(|e| {
            fbc_dialects::memory::bounds::Ix::of(e, &m.vars())
                .is_some_and(|ix| ix.fits_i32(&domain))
        })
    };
    for (i, m) in k.maps.iter().enumerate() {
        if !fits(m) {
            return Err(format!("the map of x{i} may leave the 32-bit range"));
        }
    }
    match &k.guard {
        Some(g) if !fits(&g.map) => Err("the guard map may leave the 32-bit range".into()),
        _ => Ok(()),
    }
}

/// An index-map expression as C over the dimension values `dims`, in width `w`.
fn affine(e: &Expr, names: &[String], dims: &[String], w: Width) -> Result<String, String> {
    Ok(match e {
        Expr::Var(v) => {
            let i = names.iter().position(|d| d == v).ok_or(format!("unknown map variable {v}"))?;
            dims[i].clone()
        }
        Expr::Const(c) if w == Width::Int => c.to_string(),
        Expr::Const(c) => int_lit(*c),
        Expr::Neg(a) => format!("(-{})", affine(a, names, dims, w)?),
        Expr::Bin(op, a, b) => {
            let fast = nonneg(a) && matches!(**b, Expr::Const(c) if c > 0);
            let (x, y) = (affine(a, names, dims, w)?, affine(b, names, dims, w)?);
            match op {
                BinOp::Add => format!("({x} + {y})"),
                BinOp::Sub => format!("({x} - {y})"),
                BinOp::Mul => format!("({x} * {y})"),
                BinOp::FloorDiv if fast => format!("({x} / {y})"),
                BinOp::Mod if fast => format!("({x} % {y})"),
                BinOp::CeilDiv if fast => format!("(({x} + {y} - {}) / {y})", w.lit(1)),
                BinOp::FloorDiv => format!("fbc_floordiv({x}, {y})"),
                BinOp::CeilDiv => format!("fbc_ceildiv({x}, {y})"),
                BinOp::Mod => format!("fbc_mod({x}, {y})"),
                // The IR's maps are affine (the verifier checks it).
                BinOp::Shl | BinOp::Shr | BinOp::And | BinOp::Min | BinOp::Max => {
                    return Err(format!("`{}` in an index map is not affine", op.name()))
                }
            }
        }
    })
}

/// One side of a contraction's product `L · R` (see [`Cx::contraction`]): an operand read at
/// its map, or an expression of operands and indices that reads no accumulator, statistic or
/// data-dependent offset (`(q - 8) · s` of a packed INT4 weight, decoded as it is staged).
#[derive(Clone)]
struct Side<'e> {
    expr: &'e Scalar,
    /// The operands it reads, and the operand that stands for it where one must: the largest
    /// (the packed weight, not its scales).
    operands: Vec<usize>,
    primary: usize,
    /// Domain indices the expression reads itself (not through a map).
    dims: Vec<usize>,
}

impl<'e> Side<'e> {
    fn plain(&self) -> bool {
        matches!(self.expr, Scalar::In(_))
    }
}

/// How a contraction's parallel dimensions are grouped (see [`Cx::contraction`]).
struct Split {
    batch: Vec<usize>,
    rows: Vec<usize>,
    cols: Vec<usize>,
}

/// The two operands of a contraction as the tiled and skinny forms read them: their positions,
/// their scalar reads over `row`/`col` and `kk`, and their texel reads where they have one.
struct Sides<'a> {
    a: usize,
    b: usize,
    /// Whether each side is its operand read at its map (not an expression of operands: a
    /// packed weight decoded where it is read), so that it can be read four values at a time.
    plain: [bool; 2],
    /// Whether each side's reads move to neighbouring memory along the innermost reduction
    /// dimension, and along the side's own innermost row (column) dimension.
    along_k: [bool; 2],
    along_outer: [bool; 2],
    a_at: &'a str,
    b_at: &'a str,
    a_tex: &'a Option<(String, fbc_kernels::Along)>,
    b_tex: &'a Option<(String, fbc_kernels::Along)>,
    /// An expression side's values at 4, 8 or 16 consecutive indices of its own rows
    /// (columns) from a multiple of that, as a `float4`, `float8` or `float16`, with their
    /// count (see [`Cx::expr_texel`]).
    expr_tex: [Option<(String, u64)>; 2],
    /// The domain indices as C expressions over `row` (`a`) or `col` (`b`) and `kk`.
    a_dims: &'a [String],
    b_dims: &'a [String],
}

/// A contraction's extents: rows `m`, columns `n`, reduction `k`, batches, and the statements
/// that declare the batch indices from `bz`.
#[derive(Clone, Copy)]
struct Shape<'a> {
    split: &'a Split,
    m: u64,
    n: u64,
    k: u64,
    batches: u64,
    batch_decl: &'a str,
    /// The output is an image written a texel (four columns) at a time.
    texel_store: bool,
}

/// The value of each dimension in `dims` (in domain order, the last fastest) from their
/// flattened index `var`, as C expressions of width `w`.
fn flatten(dims: &[usize], var: &str, domain: &[u64], w: Width) -> Vec<(usize, String)> {
    let mut stride: u64 = dims.iter().map(|&d| domain[d]).product();
    dims.iter()
        .enumerate()
        .map(|(i, &d)| {
            let ext = domain[d];
            stride /= ext.max(1);
            let q =
                if stride == 1 { var.to_string() } else { format!("({var} / {})", w.lit(stride)) };
            let e = if i == 0 { q } else { format!("({q} % {})", w.lit(ext)) };
            (d, e)
        })
        .collect()
}

/// A float literal in OpenCL C.
/// An integer literal of the payload as a C `long` (`i64::MIN` has no literal of its own).
fn int_lit(v: i64) -> String {
    if v == i64::MIN {
        "(-9223372036854775807L - 1L)".into()
    } else {
        format!("{v}L")
    }
}

pub(crate) fn flit(v: f64) -> String {
    let f = v as f32;
    if f.is_nan() {
        "NAN".into()
    } else if f.is_infinite() {
        if f > 0.0 {
            "INFINITY".into()
        } else {
            "(-INFINITY)".into()
        }
    } else {
        let s = format!("{f:?}");
        let s = if s.contains(['.', 'e', 'E']) { s } else { format!("{s}.0") };
        format!("{s}f")
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ty {
    F,
    I,
}

/// The value of each dimension of extents `exts` (in domain order, the last fastest) from their
/// flattened index `var` (`var / stride % extent`), as C expressions of width `w`: the plain
/// kernel's work-item and strided-reduction indices ([`flatten`] is the tiled kernel's).
fn unflatten(var: &str, exts: &[u64], w: Width) -> Vec<String> {
    let mut stride: u64 = exts.iter().product();
    exts.iter()
        .enumerate()
        .map(|(i, &ext)| {
            stride /= ext.max(1);
            let (st, ext) = (w.lit(stride), w.lit(ext));
            match (i, stride) {
                (0, 1) => var.to_string(),
                (0, _) => format!("{var} / {st}"),
                (_, 1) => format!("{var} % {ext}"),
                _ => format!("({var} / {st}) % {ext}"),
            }
        })
        .collect()
}

/// A piece of an expression's text: literal text, or the text of node `n` (see `Cx::scalar`).
enum Piece {
    /// Text: mostly the fixed punctuation and calls around operands, borrowed.
    Lit(Cow<'static, str>),
    Of(usize),
}

/// The text of the last node of `built`, written out without recursion.
fn write_out(built: &[(Vec<Piece>, Ty)]) -> String {
    let mut out = String::new();
    let Some(last) = built.len().checked_sub(1) else { return out };
    let mut stack: Vec<std::slice::Iter<'_, Piece>> = vec![built[last].0.iter()];
    while let Some(top) = stack.last_mut() {
        match top.next() {
            Some(Piece::Lit(s)) => out.push_str(s),
            Some(Piece::Of(n)) => stack.push(built[*n].0.iter()),
            None => {
                stack.pop();
            }
        }
    }
    out
}

fn as_f((s, t): (String, Ty)) -> String {
    match t {
        Ty::F => s,
        Ty::I => format!("(float)({s})"),
    }
}

struct Cx<'a> {
    k: &'a Kernel,
    types: &'a [MemType],
    /// Texel reads hoisted into `const float4` variables: `(read expression, variable)`. `None`
    /// where reads are not hoisted.
    texels: RefCell<Option<Vec<(String, String)>>>,
    /// How many `select` branches the expression being written is inside: a read there may be
    /// out of range when the branch is not taken, so it is never hoisted.
    in_select: Cell<u32>,
    /// While a four-wide plain kernel writes its value at lane `c` of four consecutive values
    /// of dimension `d` (`(d, c)`; the lane's index `4·dq + c`): a buffer input whose offset
    /// runs over aligned quads along `d` is read with one `vload4` at `4·dq`, hoisted with the
    /// texels, and its lane `c` taken.
    quad_lane: Cell<Option<(usize, u64)>>,
    /// What the bounds prover proved of every access.
    bounds: LaunchBounds,
    /// Some access is checked: the kernel takes `fbc_err`.
    checked: bool,
    /// The id a failed check records.
    fault_id: u32,
    /// The width of index arithmetic (see [`index_width`]).
    w: Width,
    /// The last text of each operand coordinate (`4·operand + result`), with the domain
    /// dimension texts it was made for: a payload reads an operand at the same point many times.
    coords: RefCell<Vec<Option<Coord>>>,
    /// Buffer reads written as given text instead of at their map, by operand (a packed
    /// weight's byte taken from a vector read once for four wide indices: see
    /// [`Cx::expr_texel`]); empty outside such an expression.
    reads_as: RefCell<Vec<Option<String>>>,
}

/// A coordinate's text and the domain dimension texts it was written for.
type Coord = (Vec<String>, String);

/// The values scalar expressions see: a C expression per domain dimension and the accumulator.
struct Env<'a> {
    dims: &'a [String],
    acc: &'a str,
}

impl Cx<'_> {
    fn out(&self) -> usize {
        self.k.output()
    }

    fn is_image(&self, i: usize) -> bool {
        matches!(self.types[i].storage, StorageKind::Image { .. })
    }

    fn ctype(&self, i: usize) -> &'static str {
        match self.types[i].elem {
            ElemType::I32 => "int",
            // Packed weights: signed bytes, only read.
            ElemType::I8 => "char",
            _ => "float",
        }
    }

    /// Whether operand `i` holds integers (`int` or `char`), read as `long` values.
    fn is_int(&self, i: usize) -> bool {
        matches!(self.types[i].elem, ElemType::I32 | ElemType::I8)
    }

    fn params(&self) -> String {
        let out = self.out();
        let mut ps = Vec::new();
        for i in 0..self.types.len() {
            ps.push(match (self.is_image(i), i == out) {
                (true, false) => format!("__read_only image2d_t x{i}"),
                (true, true) => format!("__write_only image2d_t x{i}"),
                (false, false) => format!("__global const {}* x{i}", self.ctype(i)),
                (false, true) => format!("__global {}* x{i}", self.ctype(i)),
            });
        }
        if self.checked {
            ps.push("__global int* fbc_err".into());
        }
        ps.join(", ")
    }

    /// The statements that read each symbol of the maps (element 0 of its operand) and end the
    /// kernel, recording a fault of kind 7 (the operand, the value and the range), when it is
    /// outside its range: every work-item checks before it writes anything.
    fn symbol_prologue(&self) -> String {
        self.symbol_checks(true)
    }

    /// The symbols' reads and checks; `returns`: a work-item ends at a symbol out of range.
    /// Otherwise (kernels with barriers, which every work-item of a group must reach) every
    /// work-item reads `fbc_ok` (0 when a symbol is out of range: the kernel then reads and
    /// writes nothing), work-item 0 records the fault, and the symbols read as their `lo`.
    fn symbol_checks(&self, returns: bool) -> String {
        let mut s = String::new();
        let ix = self.w.ty();
        if !returns {
            s.push_str("  int fbc_ok = 1;\n");
        }
        for (j, sym) in self.k.symbols.iter().enumerate() {
            let (k, lo, hi) = (sym.operand, sym.lo, sym.hi);
            let fault = format!(
                "fbc_fault(fbc_err, {}, 7, {k}, (long)fbc_sym{j}, {lo}L, {hi}L, 0, 0L, 0L, 0L, 0L, 0L, 0L, 0L, 0L);",
                self.fault_id
            );
            // Read-only where a work-item returns; else reset to `lo` when out of range.
            let konst = if returns { "const " } else { "" };
            let _ = writeln!(s, "  {konst}{ix} fbc_sym{j} = ({ix})x{k}[0];");
            if returns {
                let _ = writeln!(
                    s,
                    "  if (fbc_sym{j} < {lo} || fbc_sym{j} > {hi}) {{ {fault} return; }}"
                );
            } else {
                let _ = writeln!(
                    s,
                    "  if (fbc_sym{j} < {lo} || fbc_sym{j} > {hi}) {{\n    if (get_local_id(0) == 0) {fault}\n    fbc_ok = 0;\n    fbc_sym{j} = {lo};\n  }}"
                );
            }
        }
        s
    }

    /// The arguments every check passes after its own: the error buffer, the fault id, and
    /// (after `kind`/operand arguments the caller writes) the rank and the domain point.
    fn fault_args(&self, dims: &[String]) -> String {
        let mut pt: Vec<String> = dims.iter().take(FAULT_DIMS).cloned().collect();
        pt.resize(FAULT_DIMS, "0L".into());
        format!("{}, {}", dims.len(), pt.join(", "))
    }

    /// The closing arguments of a checked arithmetic helper (`fbc_idivc`, `fbc_imodc`,
    /// `fbc_tointc`): `, fbc_err, id, rank, point)`.
    fn arith_fault_args(&self, dims: &[String]) -> String {
        format!(", fbc_err, {}, {})", self.fault_id, self.fault_args(dims))
    }

    /// Whether the innermost dimension, a reduction of extent 4, is the channel of an input
    /// image's texel (x and y the same over it) read through a proven map: a step of it can
    /// read that texel once for its four values.
    fn texel_innermost(&self) -> bool {
        let (k, n) = (self.k, self.k.domain.len());
        n > k.parallel_dims() + 1
            && k.domain[n - 1] == 4
            && (0..k.maps.len())
                .any(|i| i != self.out() && !self.map_checked(i) && self.texel_holds(i, n - 1))
    }

    /// Whether each texel operand `i` reads holds four consecutive values of domain dimension
    /// `d`: an image whose channel is `d` (extent 4) or `d mod 4` (extent a multiple of 4),
    /// its x and y the same over each aligned run of four values of `d` (see
    /// [`texel_invariant`]).
    fn texel_holds(&self, i: usize, d: usize) -> bool {
        let (m, extent) = (&self.k.maps[i], self.k.domain[d]);
        let v = &m.dims[d];
        self.is_image(i)
            && extent % 4 == 0
            && channel_of(&m.results[2], v, extent)
            && m.results[..2].iter().all(|e| texel_invariant(e, v))
    }

    /// Whether buffer operand `i`'s element offset steps by exactly one along domain dimension
    /// `d`, from the origin (a layout heuristic: only the staging order depends on it).
    fn unit_stride(&self, i: usize, d: usize) -> bool {
        let mp = &self.k.maps[i];
        if self.is_image(i) || mp.results.len() != 1 {
            return false;
        }
        let at = |v: i64| {
            mp.results[0]
                .eval(&|name| Some(if mp.dims.get(d).is_some_and(|x| x == name) { v } else { 0 }))
        };
        matches!((at(0), at(1)), (Some(x), Some(y)) if y - x == 1)
    }

    /// Whether operand `i` read at its map moves to the neighbouring element along domain
    /// dimension `d` (a buffer), or its texel's x coordinate or channel moves with `d` (an
    /// image: neighbouring work-items then read the same or neighbouring texels of a row).
    fn moves_along(&self, i: usize, d: usize) -> bool {
        if !self.is_image(i) {
            return self.unit_stride(i, d);
        }
        let m = &self.k.maps[i];
        m.dims.get(d).is_some_and(|v| {
            m.results.first().is_some_and(|e| uses(e, v))
                || m.results.get(2).is_some_and(|e| uses(e, v))
        })
    }

    /// Whether some input read at its map moves to the neighbouring element (buffer) or channel
    /// or texel (image) along domain dimension `d`: then work-items that take neighbouring
    /// values of `d` read neighbouring memory.
    fn reads_along(&self, d: usize) -> bool {
        let out = self.out();
        (0..self.k.maps.len()).filter(|&i| i != out).any(|i| {
            if !self.is_image(i) {
                return self.unit_stride(i, d);
            }
            let m = &self.k.maps[i];
            let var = m.dims.get(d).map(|v| Expr::Var(v.clone()));
            m.results.get(2) == var.as_ref() || m.results.first() == var.as_ref()
        })
    }

    /// Whether reads and writes of operand `i` at its map are checked.
    fn map_checked(&self, i: usize) -> bool {
        self.checked && self.bounds.map_checked(i)
    }

    fn coord(&self, i: usize, r: usize, dims: &[String]) -> Result<String, String> {
        // Storage maps have one result (a buffer offset) or three (an image's x, y, channel):
        // four slots per operand hold them all.
        let m = &self.k.maps[i];
        if !m.symbols.is_empty() {
            // The symbols' values, read at the kernel's start (`symbol_prologue`).
            let names = m.vars();
            let mut texts = dims.to_vec();
            texts.extend((0..m.symbols.len()).map(|j| format!("fbc_sym{j}")));
            return affine(&m.results[r], &names, &texts, self.w);
        }
        if r >= 4 {
            return affine(&m.results[r], &m.dims, dims, self.w);
        }
        let slot = 4 * i + r;
        if let Some(Some((at, text))) = self.coords.borrow().get(slot) {
            if at.as_slice() == dims {
                return Ok(text.clone());
            }
        }
        let text = affine(&m.results[r], &m.dims, dims, self.w)?;
        let mut coords = self.coords.borrow_mut();
        if coords.len() <= slot {
            coords.resize(slot + 1, None);
        }
        coords[slot] = Some((dims.to_vec(), text.clone()));
        Ok(text)
    }

    /// Operand `i` read at its map.
    fn read(&self, i: usize, dims: &[String]) -> Result<(String, Ty), String> {
        if i >= self.types.len() {
            return Err(format!("x{i}: no operand {i}"));
        }
        if i == self.out() && self.is_image(i) {
            return Err(format!("x{i}: the output image is write-only"));
        }
        if let Some(Some(text)) = self.reads_as.borrow().get(i) {
            return Ok(self.typed(i, text.clone()));
        }
        if self.is_image(i) && self.map_checked(i) {
            let (x, y, c) =
                (self.coord(i, 0, dims)?, self.coord(i, 1, dims)?, self.coord(i, 2, dims)?);
            let StorageKind::Image { width, height } = self.types[i].storage else {
                return Err(format!("x{i}: not an image"));
            };
            let v = format!(
                "fbc_rdch(x{i}, {x}, {y}, {c}, {width}L, {height}L, fbc_err, {}, {i}, {})",
                self.fault_id,
                self.fault_args(dims)
            );
            return Ok((v, Ty::F));
        }
        if self.is_image(i) {
            let (x, y) = (self.coord(i, 0, dims)?, self.coord(i, 1, dims)?);
            let mut texel = format!("read_imagef(x{i}, fbc_smp, (int2)((int){x}, (int){y}))");
            if let Some(v) = self.hoist(&texel) {
                texel = v;
            }
            let c = self.coord(i, 2, dims)?;
            let v = match c.strip_suffix('L').unwrap_or(&c) {
                ch @ ("0" | "1" | "2" | "3") => format!("{texel}.s{ch}"),
                _ => format!("fbc_ch({texel}, {c})"),
            };
            return Ok((v, Ty::F));
        }
        if let Some((d, c)) = self.quad_lane.get() {
            if i != self.out() && self.quad_offsets(i, &[d]) && self.in_select.get() == 0 {
                let mut at = dims.to_vec();
                at[d] = QUAD_BASE.to_string();
                let read = format!("vload4(0, x{i} + ({}))", self.coord(i, 0, &at)?);
                if let Some(v) = self.hoist(&read) {
                    return Ok((format!("{v}.s{c}"), Ty::F));
                }
            }
        }
        let off = self.coord(i, 0, dims)?;
        if self.map_checked(i) {
            return Ok(self.typed(i, self.checked_load(i, &off, 1, dims)));
        }
        Ok(self.typed(i, format!("x{i}[{off}]")))
    }

    /// The `const float4` variable holding `read` where reads are hoisted (`texels`): the one
    /// already declared for it, else a new one, but inside a `select` branch (a read there may
    /// be out of range when the branch is not taken) only one read anyway; `None` otherwise.
    fn hoist(&self, read: &str) -> Option<String> {
        let mut texels = self.texels.borrow_mut();
        let list = texels.as_mut()?;
        if let Some((_, v)) = list.iter().find(|(e, _)| e == read) {
            return Some(v.clone());
        }
        if self.in_select.get() != 0 {
            return None;
        }
        let v = format!("t{}", list.len());
        list.push((read.to_string(), v.clone()));
        Some(v)
    }

    /// Buffer operand `i` read at element offset `off` (a C `long`) with its bounds checked:
    /// `kind` 1 for a read at its map, 2 for an `xK[e]` load.
    fn checked_load(&self, i: usize, off: &str, kind: u32, dims: &[String]) -> String {
        let f = match self.types[i].elem {
            ElemType::I32 => "fbc_ldi",
            ElemType::I8 => "fbc_ldc",
            _ => "fbc_ldf",
        };
        format!(
            "{f}(x{i}, {off}, {}L, fbc_err, {}, {kind}, {i}, {})",
            self.types[i].elems(),
            self.fault_id,
            self.fault_args(dims)
        )
    }

    /// The statement storing `v` (already of the output's C type) into a buffer output at
    /// offset `off`, checked when the output map is not proven.
    fn buffer_store(&self, off: &str, v: &str, dims: &[String]) -> String {
        let out = self.out();
        if !self.map_checked(out) {
            return format!("x{out}[{off}] = {v};");
        }
        let f = if self.types[out].elem == ElemType::I32 { "fbc_sti" } else { "fbc_stf" };
        format!(
            "{f}(x{out}, {off}, {}L, {v}, fbc_err, {}, {out}, {});",
            self.types[out].elems(),
            self.fault_id,
            self.fault_args(dims)
        )
    }

    /// The statement writing texel value `v` (a `float4`) into the image output at `(x, y)`,
    /// checked when the output map is not proven.
    fn image_store(&self, x: &str, y: &str, v: &str, dims: &[String]) -> String {
        let out = self.out();
        match self.types[out].storage {
            StorageKind::Image { width, height } if self.map_checked(out) => format!(
                "fbc_wrimg(x{out}, {x}, {y}, {width}L, {height}L, {v}, fbc_err, {}, {out}, {});",
                self.fault_id,
                self.fault_args(dims)
            ),
            _ => format!("write_imagef(x{out}, (int2)((int){x}, (int){y}), {v});"),
        }
    }

    fn typed(&self, i: usize, v: String) -> (String, Ty) {
        if self.is_int(i) {
            (format!("(long){v}"), Ty::I)
        } else {
            (v, Ty::F)
        }
    }

    /// The OpenCL C expression of `root` and its type. Built without recursion and in time
    /// linear in the payload: the nodes are listed in post-order (children left to right, so
    /// operands are read in the order of a recursive walk), each node's text is a list of
    /// literal pieces and references to its children's texts, and the root's text is flattened
    /// once at the end.
    fn scalar(&self, root: &Scalar, env: &Env<'_>) -> Result<(String, Ty), String> {
        // Post-order: each node with its select-branch nesting and its children's indices.
        struct Node<'s> {
            e: &'s Scalar,
            sel: u32,
            kids: Vec<usize>,
        }
        let mut nodes: Vec<Node<'_>> = Vec::new();
        let mut stack: Vec<(&Scalar, u32, bool)> = vec![(root, 0, false)];
        let mut finished: Vec<usize> = Vec::new();
        while let Some((e, sel, expanded)) = stack.pop() {
            let n = e.children().count();
            if !expanded && n > 0 {
                stack.push((e, sel, true));
                let select = matches!(e, Scalar::Select(..));
                let children: Vec<&Scalar> = e.children().collect();
                for (i, c) in children.into_iter().enumerate().rev() {
                    stack.push((c, sel + u32::from(select && i > 0), false));
                }
            } else {
                let kids = finished.split_off(finished.len() - n);
                nodes.push(Node { e, sel, kids });
                finished.push(nodes.len() - 1);
            }
        }
        let base = self.in_select.get();
        let mut built: Vec<(Vec<Piece>, Ty)> = Vec::with_capacity(nodes.len());
        let result = (|| {
            for n in &nodes {
                self.in_select.set(base + n.sel);
                let b = self.node(n.e, &n.kids, &built, env)?;
                built.push(b);
            }
            Ok::<(), String>(())
        })();
        self.in_select.set(base);
        result?;
        let ty = built.last().map_or(Ty::F, |b| b.1);
        Ok((write_out(&built), ty))
    }

    /// The text pieces and type of node `e` whose children are `kids` (already in `built`).
    fn node(
        &self,
        e: &Scalar,
        kids: &[usize],
        built: &[(Vec<Piece>, Ty)],
        env: &Env<'_>,
    ) -> Result<(Vec<Piece>, Ty), String> {
        use Piece::{Lit, Of};
        let ty = |i: usize| built[kids[i]].1;
        // Child `i` as a float: `(float)(...)` around an integer.
        let f = |i: usize| -> Vec<Piece> {
            match ty(i) {
                Ty::F => vec![Of(kids[i])],
                Ty::I => vec![Lit("(float)(".into()), Of(kids[i]), Lit(")".into())],
            }
        };
        let of = |i: usize| vec![Of(kids[i])];
        // `pre` a `mid` b `post`.
        fn join(
            pre: impl Into<Cow<'static, str>>,
            a: Vec<Piece>,
            mid: impl Into<Cow<'static, str>>,
            b: Vec<Piece>,
            post: impl Into<Cow<'static, str>>,
        ) -> Vec<Piece> {
            let mut v = Vec::with_capacity(a.len() + b.len() + 3);
            v.push(Lit(pre.into()));
            v.extend(a);
            v.push(Lit(mid.into()));
            v.extend(b);
            v.push(Lit(post.into()));
            v
        }
        fn wrap(
            pre: impl Into<Cow<'static, str>>,
            a: Vec<Piece>,
            post: impl Into<Cow<'static, str>>,
        ) -> Vec<Piece> {
            let mut v = Vec::with_capacity(a.len() + 2);
            v.push(Lit(pre.into()));
            v.extend(a);
            v.push(Lit(post.into()));
            v
        }
        Ok(match e {
            Scalar::Float(v) => (vec![Lit(flit(*v).into())], Ty::F),
            Scalar::Int(v) => (vec![Lit(int_lit(*v).into())], Ty::I),
            Scalar::In(i) => {
                let (s, t) = self.read(*i, env.dims)?;
                (vec![Lit(s.into())], t)
            }
            Scalar::Load(i, offset) => {
                if *i >= self.types.len() || self.is_image(*i) {
                    return Err(format!("x{i}[...]: operand {i} is not a buffer"));
                }
                if ty(0) != Ty::I {
                    return Err(format!("x{i}[...]: the offset is not an integer"));
                }
                let v = if self.checked && self.bounds.load_checked(*i, offset) {
                    // The checked load's call around the offset's text.
                    let call = self.checked_load(*i, "\u{0}", 2, env.dims);
                    let (pre, post) = call.split_once('\u{0}').unwrap_or((&call, ""));
                    wrap(pre.to_string(), of(0), post.to_string())
                } else {
                    wrap(format!("x{i}["), of(0), "]")
                };
                if self.is_int(*i) {
                    (wrap("(long)", v, ""), Ty::I)
                } else {
                    (v, Ty::F)
                }
            }
            Scalar::Dim(d) => (
                vec![Lit(env
                    .dims
                    .get(*d)
                    .ok_or(format!("d{d}: no such dimension"))?
                    .clone()
                    .into())],
                Ty::I,
            ),
            Scalar::Acc => (vec![Lit(env.acc.to_string().into())], Ty::F),
            // A row kernel declares its statistics as `fbc_s0`, `fbc_s1`, ... before they are read.
            Scalar::Stat(k) => (vec![Lit(format!("fbc_s{k}").into())], Ty::F),
            Scalar::Un(op, _) => {
                let t = ty(0);
                let call = |name: &str| (wrap(format!("{name}("), f(0), ")"), Ty::F);
                match op {
                    ScalarUn::Neg if t == Ty::I => (wrap("fbc_ineg(", of(0), ")"), Ty::I),
                    ScalarUn::Neg => (wrap("(-", of(0), ")"), t),
                    ScalarUn::Not => (wrap("(long)(", of(0), " == 0)"), Ty::I),
                    ScalarUn::Exp => call("exp"),
                    ScalarUn::Log => call("log"),
                    ScalarUn::Sqrt => call("sqrt"),
                    ScalarUn::Rsqrt => (wrap("(1.0f / sqrt(", f(0), "))"), Ty::F),
                    ScalarUn::Tanh => call("tanh"),
                    ScalarUn::Erf => call("erf"),
                    ScalarUn::Sigmoid => call("fbc_sigmoid"),
                    ScalarUn::Abs if t == Ty::I => (wrap("fbc_iabs(", of(0), ")"), Ty::I),
                    ScalarUn::Abs => (wrap("fabs(", of(0), ")"), Ty::F),
                    ScalarUn::Floor if t == Ty::I => (of(0), Ty::I),
                    ScalarUn::Floor => (wrap("floor(", of(0), ")"), Ty::F),
                    ScalarUn::ToInt if t == Ty::I => (of(0), Ty::I),
                    ScalarUn::ToInt if self.checked => {
                        (wrap("fbc_tointc(", of(0), self.arith_fault_args(env.dims)), Ty::I)
                    }
                    ScalarUn::ToInt => (wrap("fbc_toint(", of(0), ")"), Ty::I),
                    ScalarUn::ToFloat => (f(0), Ty::F),
                }
            }
            Scalar::Bin(op, _, _) => {
                let int = ty(0) == Ty::I && ty(1) == Ty::I;
                let cmp = |o: &str| {
                    let (x, y) = if int { (of(0), of(1)) } else { (f(0), f(1)) };
                    (join("(long)(", x, format!(" {o} "), y, ")"), Ty::I)
                };
                match op {
                    ScalarBin::Lt => cmp("<"),
                    ScalarBin::Le => cmp("<="),
                    ScalarBin::Gt => cmp(">"),
                    ScalarBin::Ge => cmp(">="),
                    ScalarBin::Eq => cmp("=="),
                    ScalarBin::Ne => cmp("!="),
                    ScalarBin::And => {
                        (join("(long)((", of(0), " != 0) && (", of(1), " != 0))"), Ty::I)
                    }
                    ScalarBin::Or => {
                        (join("(long)((", of(0), " != 0) || (", of(1), " != 0))"), Ty::I)
                    }
                    _ if int => {
                        let (x, y) = (of(0), of(1));
                        // A divisor that is not a non-zero literal is checked where the kernel is.
                        let divisor_checked = self.checked
                            && !matches!(e, Scalar::Bin(_, _, b) if matches!(**b, Scalar::Int(v) if v != 0));
                        // Floor division and modulo by a power of two are an arithmetic shift
                        // and a mask on two's complement `long`s (OpenCL C fills a negative
                        // value's vacated bits with ones): the packed INT4/INT8 decode's `/ 16`
                        // and `% 16` without the helpers' branches.
                        let pow2 = match e {
                            Scalar::Bin(_, _, b) => match **b {
                                Scalar::Int(v) if v >= 2 && (v as u64).is_power_of_two() => v,
                                _ => 0,
                            },
                            _ => 0,
                        };
                        let s = match op {
                            ScalarBin::Div if pow2 != 0 => {
                                let shift = pow2.trailing_zeros().to_string();
                                join("(", x, " >> ", vec![Lit(shift.into())], ")")
                            }
                            ScalarBin::Rem if pow2 != 0 => {
                                join("(", x, " & ", vec![Lit(int_lit(pow2 - 1).into())], ")")
                            }
                            ScalarBin::Div | ScalarBin::Rem if divisor_checked => {
                                let f =
                                    if *op == ScalarBin::Div { "fbc_idivc(" } else { "fbc_imodc(" };
                                join(f, x, ", ", y, self.arith_fault_args(env.dims))
                            }
                            ScalarBin::Add => join("fbc_iadd(", x, ", ", y, ")"),
                            ScalarBin::Sub => join("fbc_isub(", x, ", ", y, ")"),
                            ScalarBin::Mul => join("fbc_imul(", x, ", ", y, ")"),
                            ScalarBin::Div => join("fbc_idiv(", x, ", ", y, ")"),
                            ScalarBin::Rem => join("fbc_imod(", x, ", ", y, ")"),
                            ScalarBin::Max => join("max(", x, ", ", y, ")"),
                            _ => join("min(", x, ", ", y, ")"),
                        };
                        (s, Ty::I)
                    }
                    _ => {
                        let (x, y) = (f(0), f(1));
                        let s = match op {
                            ScalarBin::Add => join("(", x, " + ", y, ")"),
                            ScalarBin::Sub => join("(", x, " - ", y, ")"),
                            ScalarBin::Mul => join("(", x, " * ", y, ")"),
                            ScalarBin::Div => join("(", x, " / ", y, ")"),
                            ScalarBin::Max => join("fbc_fmax(", x, ", ", y, ")"),
                            ScalarBin::Min => join("fbc_fmin(", x, ", ", y, ")"),
                            _ => return Err("`%` on floats".into()),
                        };
                        (s, Ty::F)
                    }
                }
            }
            Scalar::Select(..) => {
                let both_int = ty(1) == Ty::I && ty(2) == Ty::I;
                let (a, b, t) = if both_int { (of(1), of(2), Ty::I) } else { (f(1), f(2), Ty::F) };
                let mut v = vec![Lit("((".into()), Of(kids[0]), Lit(") != 0 ? ".into())];
                v.extend(a);
                v.push(Lit(" : ".into()));
                v.extend(b);
                v.push(Lit(")".into()));
                (v, t)
            }
        })
    }

    /// The side `e` of a contraction's product, or `None` where it reads the output, an
    /// accumulator, a statistic or a data-dependent offset, or no operand.
    fn side<'e>(&self, e: &'e Scalar) -> Option<Side<'e>> {
        let out = self.out();
        let (mut operands, mut dims, mut ok) = (Vec::new(), Vec::new(), true);
        e.visit(&mut |s| match s {
            Scalar::In(i) if *i != out && *i < self.types.len() && !operands.contains(i) => {
                operands.push(*i);
            }
            Scalar::In(i) if *i != out && *i < self.types.len() => {}
            Scalar::Dim(d) => dims.push(*d),
            Scalar::In(_) | Scalar::Load(..) | Scalar::Stat(_) | Scalar::Acc => ok = false,
            _ => {}
        });
        let size = |i: usize| self.types[i].elems();
        let primary = operands.iter().copied().max_by_key(|&i| (size(i), std::cmp::Reverse(i)))?;
        if !ok {
            return None;
        }
        let side = Side { expr: e, operands, primary, dims };
        // An operand read whole is staged as it is stored: f32 values (an `f16` image reads as
        // f32). An expression is computed in registers from whatever it reads, where no read
        // needs a fault check.
        let ok = if side.plain() {
            self.types[side.primary].value_elem() == ElemType::F32
        } else {
            !self.checked
        };
        ok.then_some(side)
    }

    /// Whether side `s` (its operand, for a plain side) uses domain dimension `d`.
    fn side_uses(&self, s: &Side<'_>, d: usize) -> bool {
        s.dims.contains(&d) || s.operands.iter().any(|&i| map_uses(&self.k.maps[i], d))
    }

    /// Whether side `s`'s reads move to neighbouring memory along the innermost dimension of
    /// `group` (the reduction, or the side's rows or columns, in domain order):
    /// [`Cx::moves_along`] of a plain side's operand. For an expression, its largest operand
    /// must step by one along the innermost dimension of the group that its map reads, the
    /// later ones read by the expression alone (the nibble of a packed INT4 byte: neighbouring
    /// values share a byte).
    fn side_moves(&self, s: &Side<'_>, group: &[usize]) -> bool {
        let Some(&last) = group.last() else { return false };
        if s.plain() {
            return self.moves_along(s.primary, last);
        }
        let m = &self.k.maps[s.primary];
        match group.iter().rev().find(|&&d| map_uses(m, d)) {
            Some(&d) => self.unit_stride(s.primary, d),
            None => false,
        }
    }

    /// The parallel dimensions of a contraction `L · R`: rows are read by side `a` only,
    /// columns by side `b` only, batches by both or neither. `None` without rows or columns.
    fn split_parallel(&self, a: &Side<'_>, b: &Side<'_>) -> Option<Split> {
        let mut s = Split { batch: Vec::new(), rows: Vec::new(), cols: Vec::new() };
        for d in 0..self.k.parallel_dims() {
            match (self.side_uses(a, d), self.side_uses(b, d)) {
                (true, false) => s.rows.push(d),
                (false, true) => s.cols.push(d),
                _ => s.batch.push(d),
            }
        }
        // A product with one row or one column (a matrix-vector product: a decode step's
        // projections) has that side as a dimension of extent 1 that no map reads: it is the
        // missing side, so the product is still a contraction (the skinny kernel's, with one
        // narrow output, reads the wide operand once, coalesced).
        for side in [&mut s.rows, &mut s.cols] {
            if side.is_empty() {
                // Or the padding of such a side: a dimension no operand reads whose points
                // past the first the guard excludes (a decode step's row in an R-Tile image).
                let padding = |d: usize| self.k.guard.as_ref().is_some_and(|g| map_uses(&g.map, d));
                let unit = s.batch.iter().rposition(|&d| {
                    (self.k.domain[d] == 1 || padding(d))
                        && !self.side_uses(a, d)
                        && !self.side_uses(b, d)
                });
                if let Some(i) = unit {
                    side.push(s.batch.remove(i));
                }
            }
        }
        (!s.rows.is_empty() && !s.cols.is_empty()).then_some(s)
    }

    /// Whether operand `i` (an output's columns, or an input's reduction, rows or columns) is an
    /// `f32` buffer whose offset moves by `0, 1, 2, 3` over four consecutive values of `cols`
    /// (domain dimensions flattened in domain order) from a multiple of 4, and is a multiple of
    /// 4 there for every point: the innermost column dimension `d` of extent > 1 has
    /// an extent that 4 divides, and the offset is `4·Q + d mod 4` with `Q` constant over each
    /// aligned run of four values of `d` ([`quad`]: `d`, or `d mod 32`, plus multiples of 4 such
    /// as an R-Tile's `(d floordiv 32) * 2048`).
    fn quad_offsets(&self, i: usize, cols: &[usize]) -> bool {
        let domain = &self.k.domain;
        let Some(&inner) = cols.iter().rev().find(|&&d| domain[d] > 1) else { return false };
        let m = &self.k.maps[i];
        if self.is_image(i)
            || self.types[i].elem != ElemType::F32
            || self.map_checked(i)
            || !m.symbols.is_empty()
            || m.results.len() != 1
            || domain[inner] % 4 != 0
        {
            return false;
        }
        m.dims.get(inner).is_some_and(|v| quad(&m.results[0], v))
    }

    /// An expression side's values at `n` (4, 8 or 16) consecutive indices `o .. o + n - 1`
    /// of its own rows or columns `wide` (flattened in domain order, `o` a multiple of `n`:
    /// `dims` are the domain indices there), as a `floatN`, where every operand it reads is a
    /// buffer whose offset is linear in the domain indices and over those indices either stays
    /// put (a packed weight's scale: read once), steps by one (INT8 bytes: one `charN` read) or
    /// by one every second index (INT4 bytes, two values a byte: one `char(N/2)` read), the
    /// vector aligned for every value of the indices. `None` otherwise, or for a plain side or
    /// under a select.
    fn expr_texel(
        &self,
        side: &Side<'_>,
        dims: &[String],
        wide: &[usize],
        selected: bool,
        n: u64,
    ) -> Result<Option<(String, u64)>, String> {
        let domain = &self.k.domain;
        if side.plain() || selected || self.checked {
            return Ok(None);
        }
        // The indices from `o` move the innermost wide dimension of extent > 1 by 0..n - 1 (an
        // extent that n divides), or it by `c % 2` and the one before by `c / 2` (an extent of 2
        // inside one that n / 2 divides: an INT4 weight's nibble inside its byte).
        let by = |f: fn(i64) -> i64| (0..n as i64).map(f).collect::<Vec<i64>>();
        let mut inner = wide.iter().copied().filter(|&d| domain[d] > 1).rev();
        let run: Vec<(usize, Vec<i64>)> = match (inner.next(), inner.next()) {
            (Some(d), _) if domain[d] % n == 0 => vec![(d, by(|c| c))],
            (Some(d), Some(e)) if domain[d] == 2 && domain[e] % (n / 2) == 0 => {
                vec![(d, by(|c| c % 2)), (e, by(|c| c / 2))]
            }
            _ => return Ok(None),
        };
        // The step of a dimension's values at `o`: n (or n / 2) for the run's outer dimension,
        // any for the rest (the inner one of a pair is 0 there).
        let base_step = |d: usize| -> i64 {
            match run.as_slice() {
                [(r, _)] if *r == d => n as i64,
                [(inner, _), _] if *inner == d => 0,
                [_, (outer, _)] if *outer == d => n as i64 / 2,
                _ => 1,
            }
        };
        // Per operand: its offset at `o` and the length of the vector read there (1: one value
        // read for every index).
        let mut reads: Vec<Option<(String, i64)>> = vec![None; self.types.len()];
        for &i in &side.operands {
            let m = &self.k.maps[i];
            if self.is_image(i)
                || self.map_checked(i)
                || !m.symbols.is_empty()
                || m.results.len() != 1
            {
                return Ok(None);
            }
            let e = &m.results[0];
            let coef = |d: usize| m.dims.get(d).and_then(|v| e.linear_coefficient(v));
            let Some(coefs) = (0..m.dims.len()).map(coef).collect::<Option<Vec<i64>>>() else {
                return Ok(None);
            };
            let delta: Vec<i64> = (0..n as usize)
                .map(|c| run.iter().map(|(d, by)| coefs[*d] * by[c]).sum())
                .collect();
            let align = if delta.iter().all(|&x| x == 0) {
                1
            } else if delta == by(|c| c) {
                n as i64
            } else if delta == by(|c| c / 2) {
                n as i64 / 2
            } else {
                return Ok(None);
            };
            // The offset at `o` is a multiple of the vector's length for every point.
            let origin = e.eval(&|_| Some(0));
            let aligned = origin.is_some_and(|c| c % align == 0)
                && (0..m.dims.len()).all(|d| (coefs[d] * base_step(d)) % align == 0);
            if !aligned {
                return Ok(None);
            }
            reads[i] = Some((self.coord(i, 0, dims)?, align));
        }
        let mut values = Vec::with_capacity(n as usize);
        for c in 0..n as usize {
            let mut dims_c = dims.to_vec();
            for (d, by) in &run {
                dims_c[*d] = format!("({} + {})", dims[*d], self.w.lit(by[c]));
            }
            let overrides: Vec<Option<String>> = reads
                .iter()
                .enumerate()
                .map(|(i, r)| {
                    let (off, len) = r.as_ref()?;
                    Some(match *len {
                        1 => format!("x{i}[{off}]"),
                        len => {
                            let comp = if len == n as i64 { c } else { c / 2 };
                            format!(
                                "(*(__global const {}{len}*)(x{i} + ({off}))).s{comp:x}",
                                self.ctype(i)
                            )
                        }
                    })
                })
                .collect();
            *self.reads_as.borrow_mut() = overrides;
            let value = self.scalar(side.expr, &Env { dims: &dims_c, acc: "0.0f" });
            self.reads_as.borrow_mut().clear();
            values.push(as_f(value?));
        }
        Ok(Some((format!("((float{n})({}))", values.join(", ")), n)))
    }

    /// The `float4` an image output is written with, from its four channel values: for an `f16`
    /// image each is rounded to the nearest `f16` first (`fbc_rte_half4`), since `write_imagef`
    /// may round to zero (the OpenCL specification allows either) and the reference executor
    /// rounds to nearest even.
    fn texel_value(&self, channels: &str) -> String {
        if self.types[self.out()].is_half() {
            format!("fbc_rte_half4((float4)({channels}))")
        } else {
            format!("(float4)({channels})")
        }
    }

    /// The statement writing the texel of the output image at `dims` (the channel at 0) from
    /// its four channels' `values`, each 0 where its guard (when it has one) fails.
    fn texel_store(
        &self,
        values: Vec<(String, Ty)>,
        guards: &[Option<String>],
        dims: &[String],
    ) -> Result<String, String> {
        let out = self.out();
        let (x, y) = (self.coord(out, 0, dims)?, self.coord(out, 1, dims)?);
        let vs: Vec<String> = values
            .into_iter()
            .zip(guards)
            .map(|(v, g)| match g {
                Some(g) => format!("({g} ? {} : 0.0f)", as_f(v)),
                None => as_f(v),
            })
            .collect();
        let v = self.texel_value(&vs.join(", "));
        Ok(self.image_store(&x, &y, &v, dims))
    }

    /// The whole texel operand `i` (an image) reads at `dims`, as a `float4` expression.
    fn texel(&self, i: usize, dims: &[String]) -> Result<String, String> {
        let (x, y) = (self.coord(i, 0, dims)?, self.coord(i, 1, dims)?);
        Ok(format!("read_imagef(x{i}, fbc_smp, (int2)((int){x}, (int){y}))"))
    }

    /// The guard condition at `dims` (`None`: no guard).
    fn guard(&self, dims: &[String]) -> Result<Option<String>, String> {
        self.guard_where(dims, |_| true)
    }

    /// The conditions `i` of the guard for which `pick(i)` holds, at `dims` (`None`: no guard).
    fn guard_where(
        &self,
        dims: &[String],
        pick: impl Fn(usize) -> bool,
    ) -> Result<Option<String>, String> {
        let Some(g) = &self.k.guard else { return Ok(None) };
        let mut parts = Vec::new();
        for (i, (e, b)) in g.map.results.iter().zip(&g.bounds).enumerate() {
            if !pick(i) {
                continue;
            }
            let v = affine(e, &g.map.dims, dims, self.w)?;
            if !nonneg(e) {
                parts.push(format!("{v} >= 0"));
            }
            let b = if i32::try_from(*b).is_ok() { self.w.lit(b) } else { format!("{b}L") };
            parts.push(format!("{v} < {b}"));
        }
        Ok(Some(if parts.is_empty() { "1".into() } else { parts.join(" && ") }))
    }

    /// The value to store, converted to the output's element type.
    fn store_value(&self, v: (String, Ty)) -> String {
        if self.types[self.out()].elem == ElemType::I32 {
            match v.1 {
                Ty::I => format!("fbc_toi32({})", v.0),
                Ty::F => format!("(int)({})", v.0),
            }
        } else {
            as_f(v)
        }
    }

    /// Declares the texels hoisted while writing the channels' expressions (and stops hoisting):
    /// each read once into a `const float4`, under the OR of the channels' `guards` when there
    /// are any (a texel is in range wherever a channel that reads it is computed).
    fn declare_texels(&self, s: &mut String, indent: &str, guards: &[Option<String>]) {
        let texels = self.texels.borrow_mut().take().unwrap_or_default();
        let any: Vec<&str> = guards.iter().flatten().map(String::as_str).collect();
        if !texels.is_empty() && !any.is_empty() {
            let _ = writeln!(s, "{indent}const int any_ok = {};", any.join(" || "));
        }
        for (e, v) in &texels {
            if any.is_empty() {
                let _ = writeln!(s, "{indent}const float4 {v} = {e};");
            } else {
                let _ = writeln!(s, "{indent}const float4 {v} = any_ok ? {e} : (float4)(0.0f);");
            }
        }
    }

    /// One work-item per parallel point (per texel for an image output).
    fn plain(&self, comment: &str, opts: &KernelOptions) -> Result<Emitted, String> {
        let k = self.k;
        let p = k.parallel_dims();
        let n = k.domain.len();
        let out = self.out();
        let image_out = self.is_image(out);
        // An elementwise launch into an f32 buffer whose last dimension (extent 4) is the
        // channel of an input image and runs along four aligned, consecutive output elements
        // (`4·Q + d`): a work-item computes the four from one texel read and stores them with
        // one `vstore4`.
        let vec_out = !image_out
            && k.combine.is_none()
            && k.guard.is_none()
            && n == p
            && p > 0
            && k.domain[p - 1] == 4
            && self.types[out].elem == ElemType::F32
            && !self.map_checked(out)
            && quad(&k.maps[out].results[0], &k.maps[out].dims[p - 1])
            && (0..k.maps.len())
                .any(|i| i != out && !self.map_checked(i) && self.texel_holds(i, p - 1));
        // A launch into an f32 buffer whose last parallel dimension (extent a multiple of 4,
        // above 4) runs along aligned quads of the output and of every input that reads it (all
        // buffers), which the payload does not read as an index: a work-item computes four
        // consecutive values of it (`4·dq + 0..3`), reads each such input with one `vload4`
        // a step, and stores the four with one `vstore4`. A split-K sum over few slots then
        // keeps four times the bytes in flight per load.
        let quad4 = opts.four_wide
            && !image_out
            && !vec_out
            && k.guard.is_none()
            && k.stats.is_empty()
            && p > 0
            && k.domain[p - 1] > 4
            && k.domain[p - 1] % 4 == 0
            && self.types[out].elem == ElemType::F32
            && !self.map_checked(out)
            && quad(&k.maps[out].results[0], &k.maps[out].dims[p - 1])
            && !reads_dim(&k.body, p - 1)
            && !k.epilogue.as_ref().is_some_and(|e| reads_dim(e, p - 1))
            && {
                let readers: Vec<usize> = (0..k.maps.len())
                    .filter(|&i| i != out && map_uses(&k.maps[i], p - 1))
                    .collect();
                !readers.is_empty() && readers.iter().all(|&i| self.quad_offsets(i, &[p - 1]))
            };
        // The work-item dimensions: every parallel dim, except the channel of an image output
        // (or of a four-wide store).
        let wi = if vec_out {
            p - 1
        } else if image_out {
            if p == 0 || k.domain[p - 1] != 4 {
                return Err(
                    "an image output needs the channel (extent 4) as its last parallel dimension"
                        .into(),
                );
            }
            let m = &k.maps[out];
            if m.results[2] != Expr::Var(m.dims[p - 1].clone())
                || map_uses(
                    &IndexMap {
                        dims: m.dims.clone(),
                        symbols: vec![],
                        results: m.results[..2].to_vec(),
                    },
                    p - 1,
                )
            {
                return Err("the output image's channel must be the last parallel dimension, and x and y must not depend on it".into());
            }
            p - 1
        } else {
            p
        };
        // A four-wide kernel's work-items: a quarter of the points along its last dimension.
        let mut item_dims = k.domain[..wi].to_vec();
        if quad4 {
            item_dims[p - 1] /= 4;
        }
        let items: u64 = item_dims.iter().product();
        let reduced: u64 = k.domain[p..].iter().product();
        // A reduction with statistics takes the simple form: a work-item per output point,
        // each statistic then the sum in loops of its own (the skinny kernel is the fast one).
        let side_stats = !k.stats.is_empty();
        let group =
            if k.combine.is_some() && !side_stats && !quad4 && n > p && self.reads_along(n - 1) {
                group_reduction(items, reduced, opts)
            } else {
                None
            };
        // A group reduction whose innermost reduced dimension is the channel of an input image
        // (extent 4, x and y not depending on it) reads a texel per step: each work-item
        // combines the four values of every `g`th texel, in channel order.
        let by_texel = group.is_some() && !image_out && k.guard.is_none() && self.texel_innermost();
        // Its work-items stride the texels: at most one per texel.
        let group = match group {
            Some(g) if by_texel => Some(g.min(floor_pow2(reduced / 4))),
            g => g,
        };
        let columns = if group.is_none()
            && !side_stats
            && !quad4
            && k.combine.is_some()
            && n > p
            && !image_out
            && wi > 0
            && self.reads_along(wi - 1)
        {
            column_reduction(items, reduced, opts)
        } else {
            None
        };
        // A work-item's own reduction whose innermost dimension (extent 4) is the channel of an
        // input image, x and y the same over it (a convolution over channel-packed texels):
        // each step reads whole texels and takes their four values, for every output channel.
        let texel_steps = group.is_none()
            && columns.is_none()
            && !side_stats
            && !quad4
            && k.combine.is_some()
            && self.texel_innermost();
        // The dimensions a work-item's own reduction loops over (texel steps unroll the last).
        let looped = if texel_steps { n - 1 } else { n };
        // Where the reduction is strided across a work-group: the first value and the stride
        // of each work-item.
        let strided = match (group, columns) {
            (Some(g), _) => Some(("lid", g)),
            (None, Some([_, l])) => Some(("lane", l)),
            (None, None) => None,
        };
        let channels: Vec<Option<u64>> =
            if image_out || vec_out || quad4 { (0..4).map(Some).collect() } else { vec![None] };
        let (w, ix) = (self.w, self.w.ty());
        let mut s = String::new();
        s.push_str(comment);
        let _ = writeln!(s, "__kernel void {}({}) {{", k.name, self.params());
        s.push_str(&self.symbol_prologue());
        if let Some(g) = group {
            let what = if by_texel { "texel (four values, in channel order)" } else { "value" };
            let _ = writeln!(
                s,
                "  // One work-group of {g} per output: each work-item combines every {g}th {what}, a tree combines theirs.\n  __local float fbc_red[{}];\n  const {ix} gid = get_group_id(0);\n  const int lid = (int)get_local_id(0);",
                g * channels.len() as u64
            );
        } else if let Some([c, l]) = columns {
            let _ = writeln!(
                s,
                "  // {c} outputs per work-group, {l} work-items on each: work-item (c, l) combines every {l}th value of output c, a tree combines the {l}.\n  __local float fbc_red[{}];\n  const int lid = (int)get_local_id(0);\n  const int lane = lid / {c};\n  const {ix} col = ({ix})get_group_id(0) * {} + lid % {c};\n  // Past the last output: recompute the last one (every work-item takes part in the tree).\n  const {ix} gid = col < {} ? col : {};",
                c * l,
                w.lit(c),
                w.lit(items),
                w.lit(items.saturating_sub(1))
            );
        } else {
            let _ = writeln!(
                s,
                "  const {ix} gid = get_global_id(0);\n  if (gid >= {}) return;",
                w.lit(items)
            );
        }
        for (i, e) in unflatten("gid", &item_dims, w).into_iter().enumerate() {
            if quad4 && i == p - 1 {
                let _ = writeln!(s, "  const {ix} dq = {e};");
            } else {
                let _ = writeln!(s, "  const {ix} d{i} = {e};");
            }
        }
        let names: Vec<String> = (0..n).map(|i| format!("d{i}")).collect();
        // dims per channel, and the epilogue's dims (reduction dims at 0).
        let dims_of = |c: Option<u64>| -> Vec<String> {
            let mut d = names.clone();
            if let Some(c) = c {
                d[p - 1] = if quad4 { format!("({QUAD_BASE} + {})", w.lit(c)) } else { w.lit(c) };
            }
            d
        };
        // A four-wide kernel's lane of a channel (see `Cx::quad_lane`).
        let quad_lane = |c: Option<u64>| c.filter(|_| quad4).map(|c| (p - 1, c));
        let suffix = |c: Option<u64>| c.map_or(String::new(), |c| c.to_string());
        let mut guards = Vec::new();
        for &c in &channels {
            let g = self.guard(&dims_of(c))?;
            if let Some(g) = &g {
                let _ = writeln!(s, "  const int ok{} = {g};", suffix(c));
            }
            guards.push(g.map(|_| format!("ok{}", suffix(c))));
        }
        let mut values = Vec::new();
        if let Some(comb) = k.combine {
            let init = match comb {
                Combine::Add => "0.0f",
                Combine::Max => "(-INFINITY)",
            };
            for &c in &channels {
                let _ = writeln!(s, "  float acc{} = {init};", suffix(c));
            }
            if side_stats {
                s.push_str(&self.side_statistics(&channels, &guards)?);
            }
            let mut indent = String::from("  ");
            match strided {
                Some((first, g)) if n == p + 1 => {
                    let red = w.lit(reduced);
                    let _ =
                        writeln!(s, "  for ({ix} d{p} = {first}; d{p} < {red}; d{p} += {g}) {{");
                    indent.push_str("  ");
                }
                Some((first, g)) => {
                    let (steps, outer) = if by_texel {
                        (reduced / 4, &k.domain[p..n - 1])
                    } else {
                        (reduced, &k.domain[p..])
                    };
                    let _ =
                        writeln!(s, "  for ({ix} r = {first}; r < {}; r += {g}) {{", w.lit(steps));
                    indent.push_str("  ");
                    for (j, e) in unflatten("r", outer, w).into_iter().enumerate() {
                        let _ = writeln!(s, "{indent}const {ix} d{} = {e};", p + j);
                    }
                }
                None => {
                    for (i, ext) in k.domain[..looped].iter().enumerate().skip(p) {
                        let ext = w.lit(ext);
                        let _ = writeln!(s, "{indent}for ({ix} d{i} = 0; d{i} < {ext}; ++d{i}) {{");
                        indent.push_str("  ");
                    }
                }
            }
            // The four channels of an image output share their input texels: each is read once
            // per step, into a `float4` (see the elementwise case below).
            if image_out || by_texel || texel_steps || quad4 {
                *self.texels.borrow_mut() = Some(Vec::new());
            }
            let mut lines = String::new();
            if by_texel {
                // The channel dimension at 0..3: the four reads share one texel.
                for c in 0..4 {
                    let mut dims = names.clone();
                    dims[n - 1] = w.lit(c);
                    let v = as_f(self.scalar(&k.body, &Env { dims: &dims, acc: "0.0f" })?);
                    let _ = writeln!(lines, "{indent}{}", combine_into(comb, "acc", &v));
                }
            }
            // With texel steps, the channel dimension at 0..3 for every output channel: one
            // read per texel.
            let lanes: Vec<Option<u64>> =
                if texel_steps { (0..4).map(Some).collect() } else { vec![None] };
            for (&c, g) in channels.iter().zip(&guards).filter(|_| !by_texel) {
                for &lane in &lanes {
                    let mut dims = dims_of(c);
                    if let Some(l) = lane {
                        dims[n - 1] = w.lit(l);
                    }
                    self.quad_lane.set(quad_lane(c));
                    let v = self.scalar(&k.body, &Env { dims: &dims, acc: "0.0f" });
                    self.quad_lane.set(None);
                    let v = as_f(v?);
                    let update = combine_into(comb, &format!("acc{}", suffix(c)), &v);
                    match g {
                        Some(g) => {
                            let _ = writeln!(lines, "{indent}if ({g}) {update}");
                        }
                        None => {
                            let _ = writeln!(lines, "{indent}{update}");
                        }
                    }
                }
            }
            self.declare_texels(&mut s, &indent, &guards);
            s.push_str(&lines);
            if let Some([c, l]) = columns {
                s.push_str("  }\n");
                let _ = writeln!(
                    s,
                    "  fbc_red[lid] = acc;\n  barrier(CLK_LOCAL_MEM_FENCE);\n  for (int h = {}; h > 0; h >>= 1) {{\n    if (lane < h) {{",
                    l / 2
                );
                let update = combine_into(comb, "acc", &format!("fbc_red[lid + h * {c}]"));
                let _ = writeln!(s, "      {update} fbc_red[lid] = acc;");
                let _ = writeln!(
                    s,
                    "    }}\n    barrier(CLK_LOCAL_MEM_FENCE);\n  }}\n  if (lane != 0 || col >= {}) return;",
                    w.lit(items)
                );
            } else if let Some(g) = group {
                s.push_str("  }\n");
                let acc = |c: Option<u64>| format!("acc{}", suffix(c));
                let slot = |c: usize, off: &str| match c as u64 * g {
                    0 => format!("fbc_red[lid{off}]"),
                    base => format!("fbc_red[{base} + lid{off}]"),
                };
                for (ci, &c) in channels.iter().enumerate() {
                    let _ = writeln!(s, "  {} = {};", slot(ci, ""), acc(c));
                }
                s.push_str("  barrier(CLK_LOCAL_MEM_FENCE);\n");
                let _ = writeln!(
                    s,
                    "  for (int h = {}; h > 0; h >>= 1) {{\n    if (lid < h) {{",
                    g / 2
                );
                for (ci, &c) in channels.iter().enumerate() {
                    let a = acc(c);
                    let update = combine_into(comb, &a, &slot(ci, " + h"));
                    let _ = writeln!(s, "      {update} {} = {a};", slot(ci, ""));
                }
                s.push_str(
                    "    }\n    barrier(CLK_LOCAL_MEM_FENCE);\n  }\n  if (lid != 0) return;\n",
                );
            } else {
                for i in (p..looped).rev() {
                    indent.truncate(indent.len() - 2);
                    let _ = writeln!(s, "{indent}}} // d{i}");
                }
            }
            for &c in &channels {
                let mut dims = dims_of(c);
                for d in dims.iter_mut().skip(p) {
                    *d = w.lit(0);
                }
                let a = format!("acc{}", suffix(c));
                let v = match &k.epilogue {
                    // The epilogue reads this point's statistics as `fbc_sK`.
                    Some(e) if side_stats => {
                        let sfx = suffix(c);
                        // Read where it is written (no texel of the loop's declarations).
                        *self.texels.borrow_mut() = None;
                        let (v, ty) = self.scalar(e, &Env { dims: &dims, acc: &a })?;
                        let ctype = if ty == Ty::F { "float" } else { "long" };
                        let _ = writeln!(
                            s,
                            "  {ctype} v{sfx};
  {{"
                        );
                        for si in 0..k.stats.len() {
                            let _ = writeln!(s, "    const float fbc_s{si} = fbc_sv{si}_{sfx};");
                        }
                        let _ = writeln!(
                            s,
                            "    v{sfx} = {v};
  }}"
                        );
                        (format!("v{sfx}"), ty)
                    }
                    Some(e) => self.scalar(e, &Env { dims: &dims, acc: &a })?,
                    None => (a, Ty::F),
                };
                values.push(v);
            }
        } else {
            // The channels of a texel usually read the same input texels: each is read once,
            // into a `float4`, when at least one channel's guard holds (a texel is in range
            // wherever a channel that reads it is computed).
            if image_out || vec_out || quad4 {
                *self.texels.borrow_mut() = Some(Vec::new());
            }
            let mut lines = String::new();
            for (&c, g) in channels.iter().zip(&guards) {
                let dims = dims_of(c);
                self.quad_lane.set(quad_lane(c));
                let v = self.scalar(&k.body, &Env { dims: &dims, acc: "0.0f" });
                self.quad_lane.set(None);
                let v = v?;
                let v = match &k.epilogue {
                    Some(e) => {
                        let a = format!("v{}", suffix(c));
                        let body = match g {
                            Some(g) => format!("{g} ? {} : 0.0f", as_f(v)),
                            None => as_f(v),
                        };
                        let _ = writeln!(lines, "  const float {a} = {body};");
                        self.scalar(e, &Env { dims: &dims, acc: &a })?
                    }
                    None => v,
                };
                values.push(v);
            }
            self.declare_texels(&mut s, "  ", &guards);
            s.push_str(&lines);
        }
        if image_out {
            let mut dims = dims_of(Some(0));
            for d in dims.iter_mut().skip(p) {
                *d = w.lit(0);
            }
            let _ = writeln!(s, "  {}", self.texel_store(values, &guards, &dims)?);
        } else if vec_out || quad4 {
            let mut dims = dims_of(Some(0));
            if quad4 {
                dims[p - 1] = QUAD_BASE.to_string();
            }
            for d in dims.iter_mut().skip(p) {
                *d = w.lit(0);
            }
            let off = self.coord(out, 0, &dims)?;
            let vs: Vec<String> = values.into_iter().map(as_f).collect();
            let _ = writeln!(s, "  vstore4((float4)({}), 0, x{out} + ({off}));", vs.join(", "));
        } else {
            let mut dims = dims_of(None);
            for d in dims.iter_mut().skip(p) {
                *d = w.lit(0);
            }
            let off = self.coord(out, 0, &dims)?;
            let v = values.into_iter().next().ok_or("no value")?;
            let v = self.store_value(v);
            let v = match &guards[0] {
                Some(g) => {
                    let zero = if self.types[out].elem == ElemType::I32 { "0" } else { "0.0f" };
                    format!("{g} ? {v} : {zero}")
                }
                None => v,
            };
            let _ = writeln!(s, "  {}", self.buffer_store(&off, &v, &dims));
        }
        s.push_str("}\n");
        let grid = match (group, columns) {
            (Some(g), _) => (items * g, g),
            (None, Some([c, l])) => (items.div_ceil(c) * c * l, c * l),
            (None, None) => item_grid(items, opts),
        };
        Ok(Emitted { simple: group.is_none() && columns.is_none(), ..self.flat(s, grid) })
    }

    /// The statements computing a reduction's statistics at the work-item's output point, for
    /// each channel `c` of `channels` (`fbc_svK_c`, or `fbc_svK` without channels): statistic K
    /// combined over the reduction dimensions in domain order where the channel's guard
    /// (`guards`) holds, then its epilogue, which reads the earlier ones as `fbc_sJ`.
    fn side_statistics(
        &self,
        channels: &[Option<u64>],
        guards: &[Option<String>],
    ) -> Result<String, String> {
        let k = self.k;
        let (p, n) = (k.parallel_dims(), k.domain.len());
        let (w, ix) = (self.w, self.w.ty());
        let mut s = String::new();
        for (&c, g) in channels.iter().zip(guards) {
            let sfx = c.map_or(String::new(), |c| c.to_string());
            let mut dims: Vec<String> = (0..n).map(|i| format!("d{i}")).collect();
            if let Some(c) = c {
                dims[p - 1] = w.lit(c);
            }
            let mut at_zero = dims.clone();
            for d in at_zero.iter_mut().skip(p) {
                *d = w.lit(0);
            }
            for (si, st) in k.stats.iter().enumerate() {
                let init = match st.combine {
                    Combine::Add => "0.0f",
                    Combine::Max => "(-INFINITY)",
                };
                let _ = writeln!(
                    s,
                    "  // s{si}: {st}
  float fbc_sa{si}_{sfx} = {init};"
                );
                let mut indent = String::from("  ");
                if let Some(g) = g {
                    let _ = writeln!(s, "{indent}if ({g}) {{");
                    indent.push_str("  ");
                }
                for (i, ext) in k.domain.iter().enumerate().skip(p) {
                    let _ = writeln!(
                        s,
                        "{indent}for ({ix} d{i} = 0; d{i} < {}; ++d{i}) {{",
                        w.lit(*ext)
                    );
                    indent.push_str("  ");
                }
                let v = as_f(self.scalar(&st.body, &Env { dims: &dims, acc: "0.0f" })?);
                let _ = writeln!(
                    s,
                    "{indent}{}",
                    combine_into(st.combine, &format!("fbc_sa{si}_{sfx}"), &v)
                );
                while indent.len() > 2 {
                    indent.truncate(indent.len() - 2);
                    let _ = writeln!(s, "{indent}}}");
                }
                let acc = format!("fbc_sa{si}_{sfx}");
                let v = match &st.epilogue {
                    Some(e) => as_f(self.scalar(e, &Env { dims: &at_zero, acc: &acc })?),
                    None => acc,
                };
                let _ = writeln!(
                    s,
                    "  float fbc_sv{si}_{sfx};
  {{"
                );
                for sj in 0..si {
                    let _ = writeln!(s, "    const float fbc_s{sj} = fbc_sv{sj}_{sfx};");
                }
                let _ = writeln!(
                    s,
                    "    fbc_sv{si}_{sfx} = {v};
  }}"
                );
            }
        }
        Ok(s)
    }

    /// A one-dimensional launch of `source`, of `(global, local)` work-items (not a
    /// contraction).
    fn flat(&self, source: String, (global, local): (u64, u64)) -> Emitted {
        Emitted {
            source,
            global: vec![global],
            local: Some(vec![local]),
            tiled: false,
            skinny: false,
            checked: self.checked,
            shape: None,
            split: None,
            part: None,
            simple: false,
        }
    }

    /// The tiled contraction, where `k` is one: `acc += xa * xb` over the reduction dimensions,
    /// `f32` values, any guard whose conditions each read rows or columns (not both). The
    /// parallel dimensions fall into rows (read by `xa` only), columns (read by `xb` only) and
    /// batches (the rest); rows, columns and the reduction are each flattened in domain order, so
    /// the reduction still runs in domain order. An image output needs its channel among the
    /// columns (then a work-item stores a whole texel).
    fn contraction(&self, comment: &str, opts: &KernelOptions) -> Result<Option<Emitted>, String> {
        let k = self.k;
        let p = k.parallel_dims();
        let nd = k.domain.len();
        let out = self.out();
        if k.combine != Some(Combine::Add) || p < 2 || nd == p {
            return Ok(None);
        }
        // An f16 image reads and writes f32 values (`read_imagef`/`write_imagef` convert).
        if self.types[out].value_elem() != ElemType::F32 {
            return Ok(None);
        }
        // `L * R`, or `select(c, L * R, 0)` where `c` reads the indices of one side only (a
        // convolution's zero padding: that side's staging reads 0 where `c` fails, the implicit
        // GEMM). Each side is an operand, or an expression of operands that the staging
        // computes (`Cx::side`).
        let (product, select) = match &k.body {
            Scalar::Select(c, p, z) if matches!(**z, Scalar::Float(v) if v == 0.0) => {
                (&**p, Some(&**c))
            }
            body => (body, None),
        };
        let Scalar::Bin(ScalarBin::Mul, l, r) = product else { return Ok(None) };
        // Statistics (a normalisation fused in front) only in the skinny kernel, without a
        // guard or a select.
        let side_stats = !k.stats.is_empty();
        if side_stats && (k.guard.is_some() || select.is_some()) {
            return Ok(None);
        }
        let (Some(l), Some(r)) = (self.side(l), self.side(r)) else { return Ok(None) };
        let texel = self.is_image(out);
        // The last parallel dimension is best a column: it is usually the output's contiguous
        // one (neighbouring work-items then store neighbouring elements), and an image
        // output's channel must be the last column.
        let mut orders: Vec<(Side<'_>, Side<'_>, Split)> = Vec::new();
        for (a, b) in [(&l, &r), (&r, &l)] {
            if let Some(split) = self.split_parallel(a, b) {
                orders.push((a.clone(), b.clone(), split));
            }
        }
        let last_col = |s: &Split| s.cols.last() == Some(&(p - 1));
        let pick = match orders.iter().position(|(_, _, s)| last_col(s)) {
            Some(i) => Some(i),
            None if !texel && !orders.is_empty() => Some(0),
            None => None,
        };
        let Some((side_a, side_b, split)) = pick.and_then(|i| orders.into_iter().nth(i)) else {
            return Ok(None);
        };
        let (a, b) = (side_a.primary, side_b.primary);
        let plain = [side_a.plain(), side_b.plain()];
        let ext = |ds: &[usize]| -> u64 { ds.iter().map(|&d| k.domain[d]).product() };
        let red: Vec<usize> = (p..nd).collect();
        // A guard (the padding of an R-Tile output) is fine when each of its conditions depends
        // on rows or on columns (and batches), never on both or on the reduction: the staging of
        // `xa` skips padded rows, that of `xb` padded columns (their reads could be out of
        // range), and the store writes 0 where the whole guard fails.
        // Per condition: (reads rows, reads columns); one reading neither (batches only)
        // applies to the staging of both operands.
        let mut reads = Vec::new();
        if let Some(g) = &k.guard {
            for e in &g.map.results {
                let used = |ds: &[usize]| ds.iter().any(|&d| uses(e, &g.map.dims[d]));
                let (r, c) = (used(&split.rows), used(&split.cols));
                if used(&red) || (r && c) {
                    return Ok(None);
                }
                reads.push((r, c));
            }
        }
        let guarded = k.guard.is_some();
        let (m, n, kk) = (ext(&split.rows), ext(&split.cols), ext(&red));
        let batches = ext(&split.batch);
        // No batch: nothing is written, and the template's grid always has a batch.
        if m * n < 256 || kk < 8 || batches == 0 {
            return Ok(None);
        }
        let shape =
            super::tuning::shape_key(batches, m, n, kk, [a, b, out].map(|i| self.is_image(i)));
        let tuned = opts.tuned.get(&shape);
        let (group0, params) = match tuned {
            Some(t) => (t.group, t.params(opts.contraction)),
            None => (opts.group, opts.contraction),
        };
        let tuned_comment;
        let comment = match tuned {
            Some(t) => {
                tuned_comment = format!(
                    "{comment}// Tuned for this device (fbc tune, shape {shape}): group [{}, {}], per_item [{}, {}], tile_k {}, local_vector {}, stage_along_k {}, prefetch {}.\n",
                    t.group[0], t.group[1], t.per_item[0], t.per_item[1], t.tile_k, t.local_vector, t.stage_along_k, t.prefetch
                );
                tuned_comment.as_str()
            }
            None => comment,
        };
        let w = self.w;
        let mut dims: Vec<String> = (0..nd).map(|i| format!("d{i}")).collect();
        let mut batch_decl = String::new();
        for (d, e) in flatten(&split.batch, "bz", &k.domain, w) {
            let _ = writeln!(batch_decl, "  const {} d{d} = {e};", w.ty());
        }
        for (d, e) in flatten(&split.rows, "row", &k.domain, w)
            .into_iter()
            .chain(flatten(&split.cols, "col", &k.domain, w))
            .chain(flatten(&red, "kk", &k.domain, w))
        {
            dims[d] = e;
        }
        let zero = |ds: &[usize]| {
            let mut v = dims.clone();
            for &d in ds {
                v[d] = w.lit(0);
            }
            v
        };
        let (a_dims, b_dims) = (zero(&split.cols), zero(&split.rows));
        let (mut a_ok, mut b_ok) = (
            self.guard_where(&a_dims, |i| !reads[i].1)?,
            self.guard_where(&b_dims, |i| !reads[i].0)?,
        );
        // The select's side: the operand whose indices (batches, its rows or columns, the
        // reduction) are all the condition reads.
        let mut select_side = None;
        if let Some(c) = select {
            let mut read = vec![false; nd];
            c.visit(&mut |s| {
                if let Scalar::Dim(d) = s {
                    if let Some(r) = read.get_mut(*d) {
                        *r = true;
                    }
                }
            });
            let reads_any = |ds: &[usize]| ds.iter().any(|&d| read[d]);
            let mut loads = false;
            c.visit(&mut |s| {
                loads |=
                    matches!(s, Scalar::In(_) | Scalar::Load(..) | Scalar::Stat(_) | Scalar::Acc)
            });
            let side = match (reads_any(&split.rows), reads_any(&split.cols)) {
                _ if loads => return Ok(None),
                (true, true) => return Ok(None),
                (false, true) => 1,
                _ => 0,
            };
            let dims = if side == 0 { &a_dims } else { &b_dims };
            let (cond, _) = self.scalar(c, &Env { dims, acc: "0.0f" })?;
            let ok = if side == 0 { &mut a_ok } else { &mut b_ok };
            *ok = Some(match ok.take() {
                Some(g) => format!("({g}) && ({cond})"),
                None => cond,
            });
            select_side = Some(side);
        }
        let when = |ok: &Option<String>, v: String, zero: &str| match ok {
            Some(ok) => format!("(({ok}) ? {v} : {zero})"),
            None => v,
        };
        let at = |side: &Side<'_>, dims: &[String]| -> Result<String, String> {
            Ok(as_f(self.scalar(side.expr, &Env { dims, acc: "0.0f" })?))
        };
        let a_at = when(&a_ok, at(&side_a, &a_dims)?, "0.0f");
        let b_at = when(&b_ok, at(&side_b, &b_dims)?, "0.0f");
        // Texel-wide staging: the operand's channel is the innermost dimension of the reduction
        // or of its own rows/columns (extent 4), or that dimension mod 4 (extent a multiple of
        // 4), and x and y are the same over each aligned run of four of its values.
        // Whether a condition of the guard reads rows (side 0) or columns (side 1).
        let guard_reads = |side: usize| reads.iter().any(|rc: &(bool, bool)| [rc.0, rc.1][side]);
        let texel_read = |i: usize,
                          ds: &[String],
                          along: [(&[usize], fbc_kernels::Along); 2],
                          outer_ok: bool| {
            along.into_iter().find_map(|(axis, al)| {
                // Under a guard only along the reduction: four rows or columns of one texel
                // could be partly padding, and the guard is checked once per texel (the
                // skinny kernel also reads along a side no condition reads: `outer_ok`).
                if guarded && al == fbc_kernels::Along::Outer && !outer_ok {
                    return None;
                }
                let j = *axis.last()?;
                self.texel_holds(i, j).then(|| self.texel(i, ds).map(|t| (t, al)))
            })
        };
        use fbc_kernels::Along;
        let zero4 = "(float4)(0.0f)";
        let a_read = |outer_ok| {
            texel_read(a, &a_dims, [(&red, Along::K), (&split.rows, Along::Outer)], outer_ok)
                .transpose()
                .map(|t| t.map(|(t, al)| (when(&a_ok, t, zero4), al)))
        };
        let b_read = |outer_ok| {
            texel_read(b, &b_dims, [(&split.cols, Along::Outer), (&red, Along::K)], outer_ok)
                .transpose()
                .map(|t| t.map(|(t, al)| (when(&b_ok, t, zero4), al)))
        };
        // A texel is staged under one condition (not where a select decides per element), and
        // holds the operand's values (not an expression's).
        let a_read = |outer_ok| {
            if select_side == Some(0) || !plain[0] {
                Ok(None)
            } else {
                a_read(outer_ok)
            }
        };
        let b_read = |outer_ok| {
            if select_side == Some(1) || !plain[1] {
                Ok(None)
            } else {
                b_read(outer_ok)
            }
        };
        let (a_tex, b_tex) = (a_read(false)?, b_read(false)?);
        let mut s_dims = zero(&red);
        let value = |s_dims: &[String], acc: &str| -> Result<String, String> {
            Ok(match &k.epilogue {
                Some(e) => as_f(self.scalar(e, &Env { dims: s_dims, acc })?),
                None => acc.to_string(),
            })
        };
        let mut vector_store = None;
        let store = if texel {
            let mut vs = Vec::new();
            for c in 0..4 {
                s_dims[p - 1] = w.lit(c);
                let v = value(&s_dims, &format!("acc{c}"))?;
                vs.push(when(&self.guard(&s_dims)?, v, "0.0f"));
            }
            let (x, y) = (self.coord(out, 0, &s_dims)?, self.coord(out, 1, &s_dims)?);
            format!(
                "write_imagef(x{out}, (int2)((int){x}, (int){y}), {});",
                self.texel_value(&vs.join(", "))
            )
        } else {
            let v = when(&self.guard(&s_dims)?, value(&s_dims, "acc")?, "0.0f");
            let off = self.coord(out, 0, &s_dims)?;
            let store = format!("x{out}[{off}] = {v};");
            // Four columns at once where the reduction is short and the offset allows it.
            if !side_stats
                && kk <= fbc_target::VECTOR_STORE_MAX_K
                && self.quad_offsets(out, &split.cols)
            {
                vector_store = Some((v, format!("x{out} + ({off})")));
            }
            store
        };
        // The skinny kernel: wide rows where the columns are narrow, else wide columns. A guard
        // may read the narrow side (padding rows or columns: their narrow values read as 0, their
        // outputs stored as 0), not the wide one; an image output takes wide columns (a texel of
        // four a store).
        let rows_wide = n <= fbc_target::SKINNY_SIDE && m >= n;
        let wide_side = usize::from(!rows_wide);
        // An image output with the rows wide stores texels of four columns (the narrow side).
        if m.min(n) <= fbc_target::SKINNY_SIDE && !guard_reads(wide_side) && (!texel || n % 4 == 0)
        {
            let (a_tex, b_tex) = (a_read(!guard_reads(0))?, b_read(!guard_reads(1))?);
            // An expression side's values along its own rows (columns), `packed_values` at a
            // time in a matrix-vector product (the other side's extent `j` of 1), else four;
            // four where the wider vector does not fit.
            let expr_tex = |side: &Side<'_>, dims: &[String], wide: &[usize], i, j: u64, ok| {
                let wanted = if j == 1 { u64::from(opts.skinny.packed_values) } else { 4 };
                let mut tex = None;
                for v in std::iter::once(wanted).chain((wanted != 4).then_some(4)) {
                    tex = self.expr_texel(side, dims, wide, select_side == Some(i), v)?;
                    if tex.is_some() {
                        break;
                    }
                }
                let zero = "0.0f";
                Ok::<_, String>(tex.map(|(t, v)| (when(ok, t, &format!("(float{v})({zero})")), v)))
            };
            let sides = Sides {
                a,
                b,
                plain,
                along_k: [self.side_moves(&side_a, &red), self.side_moves(&side_b, &red)],
                along_outer: [
                    self.side_moves(&side_a, &split.rows),
                    self.side_moves(&side_b, &split.cols),
                ],
                a_at: &a_at,
                b_at: &b_at,
                a_tex: &a_tex,
                b_tex: &b_tex,
                expr_tex: [
                    expr_tex(&side_a, &a_dims, &split.rows, 0, n, &a_ok)?,
                    expr_tex(&side_b, &b_dims, &split.cols, 1, m, &b_ok)?,
                ],
                a_dims: &a_dims,
                b_dims: &b_dims,
            };
            let shape = Shape {
                split: &split,
                m,
                n,
                k: kk,
                batches,
                batch_decl: &batch_decl,
                texel_store: texel,
            };
            if let Some(e) = self.skinny(comment, &sides, &shape, &store, opts)? {
                return Ok(Some(e));
            }
        }
        if side_stats {
            return Ok(None);
        }
        let mut group = group0;
        while group[0] * group[1] > opts.max_group && (group[0] > 1 || group[1] > 1) {
            if group[0] >= group[1] {
                group[0] = (group[0] / 2).max(1);
            } else {
                group[1] = (group[1] / 2).max(1);
            }
        }
        // A side shorter than the group leaves work-items idle: move them to the other side.
        let px_min = if texel { 4 } else { 1 };
        while group[0] > 1 && group[0] * px_min > n && group[1] * 2 <= m {
            group = [group[0] / 2, group[1] * 2];
        }
        while group[1] > 1 && group[1] > m && group[0] * 2 * px_min <= n {
            group = [group[0] * 2, group[1] / 2];
        }
        // Fewer outputs per work-item than the profile's register block when the product is
        // small along a side: the largest power of two `p ≤ most` with `p · g ≤ ext` (at least 1).
        let per = |ext: u64, g: u64, most: u64| {
            let mut p = most.max(1);
            while p > 1 && ext < p * g {
                p /= 2;
            }
            p
        };
        // A buffer operand whose offset steps by one along the innermost reduction dimension and
        // not along its innermost row (column) is staged with the reduction fastest.
        let along_k = |i: usize, outer: &[usize]| {
            params.stage_along_k
                && self.unit_stride(i, nd - 1)
                && !outer.last().is_some_and(|&d| self.unit_stride(i, d))
        };
        let along_k = |side: usize, outer: &[usize]| {
            let (s, i) = if side == 0 { (&side_a, a) } else { (&side_b, b) };
            if s.plain() {
                along_k(i, outer)
            } else {
                params.stage_along_k && self.side_moves(s, &red) && !self.side_moves(s, outer)
            }
        };
        let most = params.per_item.map(|p| u64::from(p.max(1)));
        let mut c = fbc_kernels::Contraction {
            name: &k.name,
            params: &self.params(),
            comment,
            m,
            n,
            k: kk,
            batches,
            batch_decl: &batch_decl,
            a_at: &a_at,
            b_at: &b_at,
            a_texel: None,
            b_texel: None,
            store: &store,
            vector_store: vector_store.as_ref().map(|(v, at)| (v.as_str(), at.as_str())),
            group,
            per_item: [
                if texel { 4 } else { per(n, group[0], most[0]) },
                per(m, group[1], most[1]),
            ],
            tile_k: u64::from(params.tile_k.max(1)),
            texel_store: texel,
            k_fastest: [along_k(0, &split.rows), along_k(1, &split.cols)],
            local_vector: u64::from(params.local_vector),
            index: w.ty(),
            prefetch: params.prefetch,
        };
        while c.local_bytes() > opts.local_mem_bytes && c.tile_k > 1 {
            c.tile_k /= 2;
        }
        // Texel staging needs whole texels per step: `tile_k` (along `kk`) or the block (along
        // rows or columns) a multiple of 4.
        let [bn, bm] = c.block();
        let fits = |along: Along, block: u64| match along {
            Along::K => c.tile_k % 4 == 0,
            Along::Outer => block % 4 == 0,
        };
        // A buffer operand four values a load where its offset runs over aligned quads along
        // the reduction (first for `a`) or its rows or columns (not under a guard, which is
        // checked once per quad).
        let quad_read = |i: usize,
                         side: usize,
                         ds: &[String],
                         ok: &Option<String>,
                         along: [(&[usize], Along); 2]|
         -> Result<Option<(String, Along)>, String> {
            if !params.vector_loads || select_side == Some(side) || !plain[side] {
                return Ok(None);
            }
            let Some((_, al)) = along
                .into_iter()
                .find(|&(axis, al)| !(guarded && al == Along::Outer) && self.quad_offsets(i, axis))
            else {
                return Ok(None);
            };
            let off = self.coord(i, 0, ds)?;
            let quad = format!("(*(__global const float4*)(x{i} + ({off})))");
            Ok(Some((when(ok, quad, zero4), al)))
        };
        let a_quad = match a_tex {
            None => {
                quad_read(a, 0, &a_dims, &a_ok, [(&red, Along::K), (&split.rows, Along::Outer)])?
            }
            Some(_) => None,
        };
        let b_quad = match b_tex {
            None => {
                quad_read(b, 1, &b_dims, &b_ok, [(&split.cols, Along::Outer), (&red, Along::K)])?
            }
            Some(_) => None,
        };
        // An image's texels, else a buffer's quads, where the tile holds whole ones.
        fn staged<'s>(
            image: &'s Option<(String, Along)>,
            quad: &'s Option<(String, Along)>,
            fits: impl Fn(Along) -> bool,
        ) -> Option<fbc_kernels::TexelRead<'s>> {
            let ((texel, along), buffer) = match (image, quad) {
                (Some(t), _) => (t, false),
                (None, Some(q)) => (q, true),
                (None, None) => return None,
            };
            fits(*along).then_some(fbc_kernels::TexelRead { texel, along: *along, buffer })
        }
        c.a_texel = staged(&a_tex, &a_quad, |al| fits(al, bm));
        c.b_texel = staged(&b_tex, &b_quad, |al| fits(al, bn));
        if c.local_bytes() > opts.local_mem_bytes {
            return Ok(None);
        }
        let global = c.global().to_vec();
        Ok(Some(Emitted {
            source: fbc_kernels::contraction(&c),
            global,
            local: Some(vec![group[0], group[1], 1]),
            tiled: true,
            skinny: false,
            checked: false,
            shape: Some(shape),
            split: None,
            part: None,
            simple: false,
        }))
    }

    /// The skinny form of a contraction with a side of at most [`fbc_target::SKINNY_SIDE`]
    /// outputs (see [`fbc_kernels::Skinny`]), or `None` where its wide operand is read neither
    /// contiguously along the reduction nor along its wide index, or only along its wide index
    /// over a reduction shorter than [`fbc_target::SkinnyParams::wide_min_k`] (the tiled kernel
    /// then runs).
    fn skinny(
        &self,
        comment: &str,
        sides: &Sides<'_>,
        shape: &Shape<'_>,
        store: &str,
        opts: &KernelOptions,
    ) -> Result<Option<Emitted>, String> {
        use fbc_kernels::{Along, Lanes};
        let Shape { split, m, n, k, batches, batch_decl, texel_store: texel } = *shape;
        let nd = self.k.domain.len();
        // The wide side: rows (operand `a`) where the columns are narrow, else columns (`b`).
        let rows_wide = n <= fbc_target::SKINNY_SIDE && m >= n;
        // An image output's texels hold four columns: four wide indices a store, or with the
        // rows wide four narrow ones.
        let (texel_store, narrow_texel) = (texel && !rows_wide, texel && rows_wide);
        // Split-K never splits a launch into such an image in one launch (`split_k.rs`).
        if narrow_texel && (self.k.split.is_some() || !self.k.stats.is_empty()) {
            return Ok(None);
        }
        let (op, at, tex, dims, narrow_at, (w, j)) = if rows_wide {
            (sides.a, sides.a_at, sides.a_tex, sides.a_dims, sides.b_at, (m, n))
        } else {
            (sides.b, sides.b_at, sides.b_tex, sides.b_dims, sides.a_at, (n, m))
        };
        let (wide_i, narrow_i) = if rows_wide { (0, 1) } else { (1, 0) };
        let last = if rows_wide { split.rows.last() } else { split.cols.last() };
        // A buffer contiguous along the innermost dimension of the lanes' index, whose extent
        // is a multiple of 4, is read four values at a time (`vload4`: the four are in one
        // run of that dimension, from an index that is a multiple of 4).
        let vload = |d: usize| -> Option<String> {
            let ok = sides.plain[wide_i]
                && !self.is_image(op)
                && !self.map_checked(op)
                && self.k.domain[d] % 4 == 0
                && self.unit_stride(op, d);
            ok.then(|| self.coord(op, 0, dims).ok())
                .flatten()
                .map(|off| format!("vload4(0, x{op} + ({off}))"))
        };
        let (lanes, texel) = match tex {
            Some((t, Along::K)) => (Lanes::K, Some(t.clone())),
            Some((t, Along::Outer)) => (Lanes::Wide, Some(t.clone())),
            // An expression's lanes along `k` cannot store texels (below): it takes the arms
            // after this one.
            None if sides.along_k[wide_i] && (sides.plain[wide_i] || !texel_store) => {
                (Lanes::K, vload(nd - 1))
            }
            // An expression (a packed weight's decode) whose values at 4 to 16 consecutive
            // wide indices come from one vector read (`Cx::expr_texel`).
            None if sides.expr_tex[wide_i].is_some() => {
                (Lanes::Wide, sides.expr_tex[wide_i].as_ref().map(|(t, _)| t.clone()))
            }
            None if sides.along_outer[wide_i] => (Lanes::Wide, last.and_then(|&d| vload(d))),
            // An expression (a packed weight's decode) into an image: lanes along the wide
            // side, each reading its own wide index's values down the reduction. Those reads
            // are not coalesced, but every wide index has its lanes, where the tiled kernel,
            // with one row, gives the whole product to a few work-groups.
            None if !sides.plain[wide_i] && texel_store => (Lanes::Wide, None),
            None => return Ok(None),
        };
        if lanes == Lanes::Wide && k < opts.skinny.wide_min_k(j) {
            return Ok(None);
        }
        // A texel store needs the lanes along the wide side (a block of whole texels).
        if texel_store && lanes != Lanes::Wide {
            return Ok(None);
        }
        let texel = texel.as_deref();
        let texel_values = match (&tex, &sides.expr_tex[wide_i]) {
            (None, Some((_, v))) if texel.is_some() => *v,
            _ => 4,
        };
        let group = fbc_kernels::Skinny::group_for(
            lanes,
            j,
            if texel.is_some() { texel_values } else { 1 },
            [u64::from(opts.skinny.wide_lanes), u64::from(opts.skinny.wide_rows)],
            opts.max_group,
            opts.local_mem_bytes,
        );
        let params = self.params();
        let (wide, narrow) = if rows_wide { ("row", "col") } else { ("col", "row") };
        let wide_dims = if rows_wide { &split.rows } else { &split.cols };
        let narrow_dims = if rows_wide { sides.b_dims } else { sides.a_dims };
        let Some(prologue) = self.skinny_statistics(narrow, narrow_dims, wide_dims, j, k, group)?
        else {
            return Ok(None);
        };
        // The store reads its point's statistics.
        let with_stats;
        let store = if self.k.stats.is_empty() {
            store
        } else {
            let reads: String = (0..self.k.stats.len())
                .map(|si| format!("const float fbc_s{si} = fbc_sv{si}[{narrow}]; "))
                .collect();
            with_stats = format!("{{ {reads}{store} }}");
            &with_stats
        };
        let s = fbc_kernels::Skinny {
            name: &self.k.name,
            params: &params,
            comment,
            wide,
            narrow,
            w,
            j,
            k,
            batches,
            batch_decl,
            wide_at: at,
            wide_texel: texel,
            texel_values,
            narrow_at,
            narrow_k_fastest: sides.along_k[narrow_i],
            store,
            texel_store,
            narrow_texel,
            split: self.k.split,
            lanes,
            group,
            index: self.w.ty(),
            part: false,
            prologue: &prologue,
            prefetch: u64::from(opts.skinny.prefetch_trips),
        };
        if s.local_bytes() > opts.local_mem_bytes {
            return Ok(None);
        }
        Ok(Some(Emitted {
            source: fbc_kernels::skinny(&s),
            global: s.global().to_vec(),
            local: Some(vec![group[0], group[1], 1]),
            tiled: false,
            skinny: true,
            checked: false,
            shape: None,
            split: s.scratch(),
            // Written twice only where the writer may merge it.
            part: if opts.skinny.merge_launches { fbc_kernels::skinny_part(&s) } else { None },
            simple: false,
        }))
    }

    /// The skinny kernel's statements computing a reduction's statistics (see
    /// [`fbc_kernels::Skinny::prologue`]): `float fbc_svK[j]`, statistic K at each narrow index
    /// (`narrow`, whose domain indices with `kk` are `dims`), the work-group of `group` taking
    /// every G-th point of the reduction of `k` points and adding theirs by a tree in `red`.
    /// Empty without statistics; `None` where a statistic reads the wide side (`wide`
    /// dimensions): it would differ along the block.
    fn skinny_statistics(
        &self,
        narrow: &str,
        dims: &[String],
        wide: &[usize],
        j: u64,
        k: u64,
        group: [u64; 2],
    ) -> Result<Option<String>, String> {
        let kn = self.k;
        if kn.stats.is_empty() {
            return Ok(Some(String::new()));
        }
        if wide.iter().any(|&d| kn.stats_read_dim(d)) {
            return Ok(None);
        }
        let (w, ix) = (self.w, self.w.ty());
        let g = group[0] * group[1];
        let half = g.next_power_of_two() / 2;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "  // The statistics over the whole reduction (a normalisation fused in front): every
  // work-item takes every {g}th point, a tree in `red` adds the group's partials.
  float {};
  {{
    __local float* fbc_t = (__local float*)red;
    const int fbc_l = (int)(get_local_id(1) * {} + get_local_id(0));
    for (int j = 0; j < {j}; ++j) {{
      const {ix} {narrow} = j;",
            (0..kn.stats.len()).map(|si| format!("fbc_sv{si}[{j}]")).collect::<Vec<_>>().join(", "),
            group[0]
        );
        for (si, st) in kn.stats.iter().enumerate() {
            let init = match st.combine {
                Combine::Add => "0.0f",
                Combine::Max => "(-INFINITY)",
            };
            let v = as_f(self.scalar(&st.body, &Env { dims, acc: "0.0f" })?);
            let acc = format!("fbc_a{si}");
            let _ = writeln!(
                s,
                "      // s{si}: {st}
      float {acc} = {init};
      for ({ix} kk = fbc_l; kk < {}; kk += {g}) {}
      fbc_t[fbc_l] = {acc};
      barrier(CLK_LOCAL_MEM_FENCE);
      for (int h = {half}; h > 0; h >>= 1) {{
        if (fbc_l < h && fbc_l + h < {g}) {{ {} fbc_t[fbc_l] = {acc}; }}
        barrier(CLK_LOCAL_MEM_FENCE);
      }}",
                w.lit(k),
                combine_into(st.combine, &acc, &v),
                combine_into(st.combine, &acc, "fbc_t[fbc_l + h]"),
            );
            let result = match &st.epilogue {
                Some(e) => as_f(self.scalar(e, &Env { dims, acc: "fbc_t[0]" })?),
                None => "fbc_t[0]".to_string(),
            };
            // Every work-item has read the sum before the next one overwrites `red`.
            let _ = writeln!(
                s,
                "      const float fbc_s{si} = {result};
      fbc_sv{si}[j] = fbc_s{si};
      barrier(CLK_LOCAL_MEM_FENCE);"
            );
        }
        s.push_str(
            "    }
  }
",
        );
        Ok(Some(s))
    }
}

#[cfg(test)]
mod tests {
    use super::{channel_of, texel_invariant};
    use fbc_index::Expr;

    fn e(s: &str) -> Expr {
        s.parse().unwrap_or_else(|err| panic!("{s}: {err:?}"))
    }

    /// Where `texel_invariant` says yes, the expression takes one value over every aligned run
    /// of four values of `d7` (checked for `d7 < 128` and a spread of the other dimensions);
    /// where it says no, some run gives two values.
    #[test]
    fn texel_invariance_is_what_evaluation_shows() {
        let cases = [
            ("d1 floordiv 16 * 8 + d7 mod 32 floordiv 4", true),
            ("d0 * 128 + (d3 + (d1 mod 16 * 2 + d7 floordiv 32) * 4)", true),
            ("(d7 + d1 * 8) floordiv 4", true),
            ("(d1 * 4 + d7) mod 64 floordiv 8", true),
            ("(d7 & 31) >> 2", true),
            ("(d7 - d1 * 4) floordiv 4 + d1", true),
            ("d1 + 3", true),
            // An R-Tile image's texel coordinates along the reduction (the Llama step's
            // attention probabilities under fblayout): operations of invariant values.
            ("(d0 * 256 + d7) floordiv 64 * 8 + d7 floordiv 4 mod 8", true),
            ("d7 floordiv 32 mod 2 * 4 + (d2 * 1024 + d1)", true),
            ("d7 floordiv 4 mod 3", true),
            ("min(d7 floordiv 4, d1) + max(d7 >> 3, 2)", true),
            ("d7 mod 8 floordiv 2", false),
            ("d7 mod 8 mod 3", false),
            ("min(d7, d1)", false),
            ("d7 floordiv 2", false),
            ("(d7 + d1) floordiv 4", false),
            ("(d7 + 2) floordiv 4", false),
            ("d7 mod 6 floordiv 4", false),
            ("d7 mod 4", false),
            ("d7 >> 1", false),
            ("(d7 * 2) floordiv 4", false),
        ];
        for (src, want) in cases {
            let x = e(src);
            assert_eq!(texel_invariant(&x, "d7"), want, "{src}");
            let mut constant = true;
            for d1 in [0, 1, 3, 5, 17] {
                for q in 0..32 {
                    let at = |r: i64| {
                        x.eval(&|v| match v {
                            "d7" => Some(4 * q + r),
                            "d1" => Some(d1),
                            _ => Some(2),
                        })
                        .expect("evaluates")
                    };
                    constant &= (1..4).all(|r| at(r) == at(0));
                }
            }
            assert_eq!(constant, want, "{src}: evaluation");
        }
    }

    #[test]
    fn texel_channels() {
        assert!(channel_of(&e("d7 mod 4"), "d7", 64));
        assert!(channel_of(&e("d7 & 3"), "d7", 64));
        assert!(channel_of(&e("(d7 + d1 * 4) mod 4"), "d7", 64));
        assert!(channel_of(&e("d7"), "d7", 4));
        assert!(!channel_of(&e("d7"), "d7", 8));
        assert!(!channel_of(&e("d7 mod 8"), "d7", 64));
        assert!(!channel_of(&e("(d7 + 1) mod 4"), "d7", 64));
        assert!(!channel_of(&e("d1 mod 4"), "d7", 64));
    }
}

//! Split-K: a contraction whose output is small next to its reduction is computed in two (or
//! three) launches instead of one.
//!
//! A matmul launch over `[P..., K]` (parallel dimensions `P`, one reduction of extent `K`) gives
//! the device only `∏P` work-items, each running a `K`-long serial sum: with LoRA's rank-8 side
//! (`x·A`, 512×8192 · 8192×8) that is 4096 work-items for 34 MFLOP. Split by `S` it becomes
//!
//! 1. **partial sums** over `[S, P..., Kc]` with `Kc = K div S`: chunk `s` sums `k = s·Kc + kc`
//!    into a linear scratch tensor `[S', P...]` at `(s, p...)`; the chunk index is a parallel
//!    dimension (a batch of the tiled contraction kernel), so the launch has `S·∏P` outputs;
//! 2. **tail** (only when `R = K − S·Kc > 0`): the last `R` values of `k`, `k = S·Kc + r`, summed
//!    into slot `S` of the scratch (`S' = S + 1`; without a tail `S' = S`);
//! 3. **sum** over `[P..., S']`: the `S'` partials added in slot order, then the original
//!    epilogue, guard and output map (the launch writes what the unsplit one wrote).
//!
//! All three are ordinary launches: every back end runs them, deterministically (a fixed
//! summation order, no atomics). Only the association of the sum changes, so results agree with
//! the unsplit kernel within f32 rounding of a reordered sum.
//!
//! The split is chosen per contraction by the `split-k` option of `lower-to-memory`:
//! `off`, a fixed `N` (every contraction with `K ≥ N` splits by `N`), or `auto`, which splits
//! only where the output cannot fill the device. With `fill = compute_units ×
//! resident_work_items` of the hardware profile (2048 resident work-items per compute unit
//! unless the profile says otherwise: a Hopper SM holds 2048 threads; a CPU core under PoCL runs
//! one vector of work-items at a time), a product whose output has a side of at most
//! `fbc_target::SKINNY_SIDE` (16) outputs, which the OpenCL writer gives the skinny kernel (a
//! few outputs per work-item, work-items sharing the reads of a chunk), splits into at most
//! two of its work-groups per compute unit (see `skinny_chunks`). Any other contraction has `W = ⌈∏P / (px·py)⌉` work-items (the tiled kernel
//! computes the profile's `px × py` register block per work-item), a contraction with
//! `W ≤ fill / 2` splits by the largest power of two `S ≥ 2` with `W·S ≤ tiled` and `K / S ≥ 256`
//! (each chunk long enough to amortise its launch share and the final sum; `tiled =
//! compute_units × contraction.resident_work_items`, the tiled kernel's own occupancy, `fill`
//! unless the profile says otherwise; at least 2), or `K / S ≥ 32` with `W·S ≤ fill`
//! for a skinny output, `W ≤ fill / 256` (LoRA's rank-8 side: there the device idles unless
//! the reduction is cut finer).

use fbc_dialects::kind::TensorOp;
use fbc_dialects::memory::{Combine, Scalar, ScalarBin};
use fbc_index::{BinOp as IndexOp, Expr};
use fbc_ir::{Diagnostic, ElemType};
use fbc_target::HardwareProfile;

use super::fusion::map_scalar;
use super::{compose, dim, identity, LKernel, Lower, Operand};

/// The shortest reduction chunk `auto` makes.
const MIN_CHUNK: u64 = 256;

/// The shortest chunk (tiled kernel) for a tiny output: one of at most `fill / TINY`
/// work-items.
const MIN_TINY_CHUNK: u64 = 32;

/// See [`MIN_TINY_CHUNK`]: on the H200, 1056 work-items, eight per compute unit.
const TINY: u64 = 256;

/// The `split-k` option of `lower-to-memory`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SplitK {
    /// Split where the output is too small to fill the device (see the module doc).
    Auto,
    /// Never split.
    Off,
    /// Split every contraction whose reduction has at least `N` elements into `N` chunks.
    Fixed(u64),
}

impl SplitK {
    /// Reads `auto`, `off` or a chunk count `N ≥ 2`.
    pub fn parse(s: &str) -> Result<SplitK, String> {
        match s {
            "auto" => Ok(SplitK::Auto),
            "off" => Ok(SplitK::Off),
            _ => match s.parse::<u64>() {
                Ok(n) if n >= 2 => Ok(SplitK::Fixed(n)),
                _ => Err(format!(
                    "split-k must be `auto`, `off` or a number of chunks ≥ 2, found `{s}`"
                )),
            },
        }
    }

    /// The number of chunks `S` for a contraction with `outputs` parallel points and a
    /// reduction of `k` elements, whose output matrix has `shape`; `None`: no split.
    pub fn chunks(
        self,
        outputs: u64,
        shape: ProductShape,
        k: u64,
        profile: &HardwareProfile,
    ) -> Option<u64> {
        match self {
            SplitK::Off => None,
            SplitK::Fixed(n) => (k >= n).then_some(n),
            SplitK::Auto => {
                let c = &profile.compute;
                let fill =
                    u64::from(c.compute_units.max(1)) * u64::from(c.resident_work_items.max(1));
                if let ProductShape::Skinny { narrow, lanes_along_k, decoded } = shape {
                    return skinny_chunks(outputs, narrow, lanes_along_k, decoded, k, profile);
                }
                // The tiled kernel computes a register block of outputs per work-item.
                let [px, py] = profile.contraction.per_item;
                let items = outputs.div_ceil(u64::from(px.max(1)) * u64::from(py.max(1)));
                if items == 0 || items.saturating_mul(2) > fill {
                    return None;
                }
                // The chunks fill the tiled kernel's own occupancy (`contraction.
                // resident_work_items`, below the compute unit's where its register block
                // limits it): on an H100 (`fbc bench --split-k auto,2,4,off`, one call, partial
                // sums and their sum) MHA C1's 512×2048·2048×2048 projections took 0.126 ms in
                // 8 chunks (the compute unit's occupancy) against 0.114 in 4, matmul-fb's dA
                // (K = 8192) 0.428 in 16 against 0.403 in 4, its forward (512×8192 outputs) 0.467
                // in 4 against 0.453 in 2 and 0.569 unsplit. At least two, where the product
                // leaves half the compute units' occupancy idle (the test above).
                let tiled_fill = profile
                    .contraction
                    .resident_work_items
                    .map_or(fill, |r| u64::from(c.compute_units.max(1)) * u64::from(r.max(1)));
                // A very small output (at most `fill / 256` work-items) leaves most of the
                // device idle even split into 256-long chunks; it takes shorter ones. On the
                // H200 (`tests/bench/h200.sh`, part lora) the seven LoRA products of a Llama
                // step, in the tiled kernel before the skinny one, took 0.147 ms with them
                // against 0.170 ms with 256-long chunks, side by side.
                let tiny = items.saturating_mul(TINY) <= fill;
                let (min_chunk, fill) =
                    if tiny { (MIN_TINY_CHUNK, fill) } else { (MIN_CHUNK, tiled_fill) };
                let mut s = 1u64;
                while s * 2 <= k / min_chunk && items.saturating_mul(s * 2) <= fill {
                    s *= 2;
                }
                if !tiny && s < 2 && k / min_chunk >= 2 {
                    s = 2;
                }
                (s >= 2).then_some(s)
            }
        }
    }
}

/// The output matrix of a contraction, as split-K's choice needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProductShape {
    /// A side of at most `fbc_target::SKINNY_SIDE` outputs, `narrow`: the skinny kernel, whose
    /// lanes run along the reduction where the wide operand's last index is the reduction (its
    /// contiguous one in a row-major or R-Tile layout), else along the wide side.
    /// `decoded`: the wide side is a packed weight's decode, whose lanes along the wide side
    /// read `skinny.packed_values` values a trip in a matrix-vector product.
    Skinny { narrow: u64, lanes_along_k: bool, decoded: bool },
    /// Anything else: the tiled kernel.
    Tiled,
}

/// Split-K for the skinny kernel: the largest power of two `S ≥ 2` that gives the device at
/// most `skinny.groups_per_cu` work-groups per compute unit (2 unless the profile says
/// otherwise; `skinny.matvec_groups_per_cu` for a matrix-vector product where it is set),
/// with chunks no shorter than one trip of the lanes (128 values along k: 32 lanes reading a
/// texel of four; 32 along the wide side, `skinny.matvec_min_k` for a matrix-vector product).
/// A work-group covers `16 · narrow` outputs with its lanes along k (8 rows of lanes, up to 16
/// outputs each) and `4 · wide_lanes · narrow` along the wide side (a texel of four wide
/// indices a lane; 32 lanes unless the profile says otherwise). On the H200 (`tests/bench/h200.sh`, part lora, one call) the weight gradients
/// 2048×512 · 512×8 took 0.011 ms split by 16 (256 groups) against 0.0185 by 4, and
/// 8192×512 · 512×8 0.0186 ms by 4 (256 groups) against 0.0254 by 16. Chunks that short along
/// the wide side (below `fbc_target::SKINNY_WIDE_MIN_K`) then run in the tiled kernel, faster
/// still at these counts (see that constant); the counts stay the ones measured best.
fn skinny_chunks(
    outputs: u64,
    narrow: u64,
    lanes_along_k: bool,
    decoded: bool,
    k: u64,
    profile: &HardwareProfile,
) -> Option<u64> {
    let sk = &profile.skinny;
    // A matrix-vector product (one narrow output: a decode step's projections) keeps its chunks
    // long enough for the skinny kernel's lanes along the wide side (`matvec_min_k`); a wider
    // narrow side cuts to 32 and runs short chunks in the tiled kernel.
    let wide_min = if narrow == 1 { u64::from(sk.matvec_min_k.max(1)) } else { 32 };
    // A lane reads a texel of four wide values a trip, or a decoded weight's `packed_values`
    // in a matrix-vector product.
    let values = if decoded && narrow == 1 { u64::from(sk.packed_values.max(1)) } else { 4 };
    let wide_block = values * u64::from(sk.wide_lanes.max(1));
    let (per_group, min_chunk) = if lanes_along_k { (16, 128) } else { (wide_block, wide_min) };
    let groups = outputs.div_ceil(per_group * narrow.max(1)).max(1);
    let most = sk.groups_per_cu(narrow).max(1) * u64::from(profile.compute.compute_units.max(1));
    let mut s = 1u64;
    while groups.saturating_mul(s * 2) <= most && s * 2 <= k / min_chunk {
        s *= 2;
    }
    (s >= 2).then_some(s)
}

impl std::fmt::Display for SplitK {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SplitK::Auto => f.write_str("auto"),
            SplitK::Off => f.write_str("off"),
            SplitK::Fixed(n) => write!(f, "{n}"),
        }
    }
}

/// Whether `k` is a contraction split-K applies to: a matmul (with its fused epilogue, and a
/// packed weight's decode fused into its operand) summing over exactly one reduction
/// dimension, reading no explicit offsets in its body.
fn splittable(k: &LKernel) -> bool {
    let mut loads = false;
    k.body.visit(&mut |s| loads |= matches!(s, Scalar::Load(..)));
    let matmul = TensorOp::Matmul.name();
    let contraction = match k.source.as_slice() {
        [first, ..] if *first == matmul => true,
        [first, second, ..] => *first == TensorOp::Dequantize.name() && *second == matmul,
        _ => false,
    };
    contraction && k.combine == Some(Combine::Add) && k.domain.len() == k.n_par + 1 && !loads
}

/// The parallel dimensions of matmul launch `k` (domain `[P..., K]`) by the side of its
/// product `L · R` that reads them, as the OpenCL writer splits them: rows are read by `L`
/// only, columns by `R` only, and the rest are batches. A side may be several dimensions (a
/// packed weight's output side runs over its groups and their members) or none (a
/// matrix-vector product's unit side).
struct Sides {
    rows: Vec<usize>,
    cols: Vec<usize>,
    /// The operand of each side that reads the most elements of it (its wide operand).
    primary: [Option<usize>; 2],
    /// Whether each side is an expression of its operands (a packed weight's decode), not one
    /// operand read as it is.
    decoded: [bool; 2],
}

impl Sides {
    fn of(k: &LKernel) -> Option<Sides> {
        let np = k.n_par;
        let (l, r) = match &k.body {
            Scalar::Bin(ScalarBin::Mul, l, r) => (l, r),
            _ => return None,
        };
        let reads = |side: &Scalar| {
            let (mut ops, mut dims) = (Vec::new(), Vec::new());
            side.visit(&mut |s| match s {
                Scalar::In(i) if !ops.contains(i) => ops.push(*i),
                Scalar::Dim(d) => dims.push(*d),
                _ => {}
            });
            (ops, dims)
        };
        let (lr, rr) = (reads(l), reads(r));
        let uses = |(ops, dims): &(Vec<usize>, Vec<usize>), d: usize| {
            let name = fbc_index::dim_name(d);
            dims.contains(&d)
                || ops.iter().any(|&i| {
                    k.inputs.get(i).is_some_and(|o| o.map.iter().any(|e| e.vars().contains(&name)))
                })
        };
        let decoded = [!matches!(**l, Scalar::In(_)), !matches!(**r, Scalar::In(_))];
        let mut s = Sides { rows: Vec::new(), cols: Vec::new(), primary: [None, None], decoded };
        for d in 0..np {
            match (uses(&lr, d), uses(&rr, d)) {
                (true, false) => s.rows.push(d),
                (false, true) => s.cols.push(d),
                _ => {}
            }
        }
        // The operand of a side reading most of its dimensions' points.
        let ext = |ds: &[usize]| -> u64 { ds.iter().map(|&d| k.domain[d]).product() };
        for (slot, (side, ds)) in [(&lr, &s.rows), (&rr, &s.cols)].into_iter().enumerate() {
            let points = |i: usize| {
                let mine: Vec<usize> =
                    ds.iter().copied().filter(|&d| uses(&(vec![i], Vec::new()), d)).collect();
                ext(&mine)
            };
            s.primary[slot] =
                side.0.iter().copied().max_by_key(|&i| (points(i), std::cmp::Reverse(i)));
        }
        Some(s)
    }
}

/// The output shape of matmul launch `k`: skinny where its rows or its columns (see [`Sides`])
/// number at most `fbc_target::SKINNY_SIDE`, its lanes along k where the wide side's operand
/// steps by one element along the reduction (its contiguous index in a row-major or R-Tile
/// layout), and whether the wide side holds the last parallel dimension.
fn shape(k: &LKernel) -> (ProductShape, bool) {
    let np = k.n_par;
    let Some(s) = Sides::of(k) else { return (ProductShape::Tiled, false) };
    let ext = |ds: &[usize]| -> u64 { ds.iter().map(|&d| k.domain[d]).product() };
    let (m, n) = (ext(&s.rows), ext(&s.cols));
    if m.min(n) > fbc_target::SKINNY_SIDE {
        return (ProductShape::Tiled, false);
    }
    let rows_wide = n <= fbc_target::SKINNY_SIDE && m >= n;
    let side = usize::from(!rows_wide);
    let (wide, primary) = if rows_wide { (&s.rows, s.primary[0]) } else { (&s.cols, s.primary[1]) };
    let lanes_along_k =
        primary.and_then(|i| k.inputs.get(i)).and_then(|o| o.map.last()).is_some_and(|e| {
            *e == dim(np) || e.linear_coefficient(&fbc_index::dim_name(np)) == Some(1)
        });
    let wide_is_last = wide.contains(&(np - 1));
    let decoded = s.decoded[side];
    (ProductShape::Skinny { narrow: m.min(n), lanes_along_k, decoded }, wide_is_last)
}

/// `e` with domain index `Dim(i)` replaced by `dims[i]`.
fn subst_dims(e: &Scalar, dims: &[Scalar]) -> Scalar {
    map_scalar(e, &mut |s| match s {
        Scalar::Dim(i) => dims.get(*i).cloned(),
        _ => None,
    })
}

/// `Dim(a)·c + Dim(b)` (`a` absent: `c + Dim(b)`), the scalar form of a chunk's `k`.
fn k_scalar(chunk: Option<usize>, c: u64, b: usize) -> Scalar {
    let base = match chunk {
        Some(a) => {
            Scalar::Bin(ScalarBin::Mul, Box::new(Scalar::Dim(a)), Box::new(Scalar::Int(c as i64)))
        }
        None => Scalar::Int(c as i64),
    };
    Scalar::Bin(ScalarBin::Add, Box::new(base), Box::new(Scalar::Dim(b)))
}

/// Splits every contraction `policy` chooses to; returns how many were split.
pub(crate) fn split(
    l: &mut Lower<'_>,
    policy: SplitK,
    profile: &HardwareProfile,
) -> Result<usize, Diagnostic> {
    if policy == SplitK::Off {
        return Ok(0);
    }
    let mut out = Vec::with_capacity(l.kernels.len());
    let mut count = 0;
    for k in std::mem::take(&mut l.kernels) {
        let np = k.n_par;
        let chosen = if splittable(&k) {
            let outputs: u64 = k.domain[..np].iter().product();
            policy.chunks(outputs, shape(&k).0, k.domain[np], profile)
        } else {
            None
        };
        match chosen {
            Some(s) if one_launch(l, &k, s, profile) => {
                out.push(LKernel {
                    split: Some(s),
                    note: format!("[split-k {s} in one launch]"),
                    ..k
                });
                count += 1;
            }
            // Launches of partial sums would each need the statistics (a normalisation fused
            // in front): such a product stays whole.
            Some(s) if k.stats.is_empty() => {
                out.extend(split_one(l, &k, s)?);
                count += 1;
            }
            _ => out.push(k),
        }
    }
    l.kernels = out;
    Ok(count)
}

/// Whether the split of `k` into `s` chunks runs in one launch of the skinny kernel (the
/// profile's `skinny.one_launch_split`), the launch keeping its domain with the `split_k` hint:
/// where the OpenCL writer gives the skinny kernel each chunk, lanes along k or chunks of at least
/// `wide_min_k` along the wide side, and an image output is written along its columns (then
/// the lanes run along them).
fn one_launch(l: &Lower<'_>, k: &LKernel, s: u64, profile: &HardwareProfile) -> bool {
    let (ProductShape::Skinny { narrow, lanes_along_k, .. }, wide_is_last) = shape(k) else {
        return false;
    };
    let np = k.n_par;
    let chunk = k.domain[np] / s;
    let image = l.storages[l.tensors[k.out.t].storage].ty.is_image();
    profile.skinny.one_launch_split
        && if lanes_along_k {
            !image
        } else {
            chunk >= profile.skinny.wide_min_k(narrow) && (!image || wide_is_last)
        }
}

/// The launches of `k` split into `s` chunks (see the module doc).
fn split_one(l: &mut Lower<'_>, k: &LKernel, s: u64) -> Result<Vec<LKernel>, Diagnostic> {
    let np = k.n_par;
    let kk = k.domain[np];
    let par = &k.domain[..np];
    let chunk = kk / s;
    let tail = kk - s * chunk;
    let slots = s + u64::from(tail > 0);
    let mut shape = vec![slots];
    shape.extend_from_slice(par);
    let name = format!("{}_partial", l.storages[l.tensors[k.out.t].storage].name);
    let scratch = l.temp(&shape, ElemType::F32, name, k.span)?;
    let tag = |what: &str| format!("[split-k {s}{what}]");
    let mut kernels = Vec::with_capacity(3);
    // The partial sums and the tail compute the body only: the operands it reads, and the
    // contraction alone as their source (the epilogue's ops run in the sum).
    let (body_inputs, body) = only_read(&k.body, &k.inputs);
    let matmul = TensorOp::Matmul.name();
    let ops = k.source.iter().position(|s| *s == matmul).map_or(1, |i| i + 1);
    let source = k.source[..ops].to_vec();

    // Partial sums over [S, P..., Kc]: old d_i → d_(i+1), old k → d0·Kc + d_(np+1).
    let mut with: Vec<Expr> = (1..=np).map(dim).collect();
    with.push(Expr::Bin(
        IndexOp::Add,
        Box::new(Expr::Bin(IndexOp::Mul, Box::new(dim(0)), Box::new(Expr::Const(chunk as i64)))),
        Box::new(dim(np + 1)),
    ));
    let mut dims: Vec<Scalar> = (1..=np).map(Scalar::Dim).collect();
    dims.push(k_scalar(Some(0), chunk, np + 1));
    let mut domain = vec![s];
    domain.extend_from_slice(par);
    domain.push(chunk);
    kernels.push(LKernel {
        result: format!("{}_partial", k.result),
        note: tag(""),
        domain,
        n_par: np + 1,
        source: source.clone(),
        inputs: body_inputs
            .iter()
            .map(|o| Operand { map: compose(&o.map, &with), ..o.clone() })
            .collect(),
        out: Operand { t: scratch, map: identity(np + 1), gather: false },
        body: subst_dims(&body, &dims),
        epilogue: None,
        ..k.clone()
    });

    // The tail over [P..., R] into slot S: old k → S·Kc + d_np.
    if tail > 0 {
        let start = s * chunk;
        let mut with: Vec<Expr> = (0..np).map(dim).collect();
        with.push(Expr::Bin(IndexOp::Add, Box::new(Expr::Const(start as i64)), Box::new(dim(np))));
        let mut dims: Vec<Scalar> = (0..np).map(Scalar::Dim).collect();
        dims.push(k_scalar(None, start, np));
        let mut domain = par.to_vec();
        domain.push(tail);
        let mut out_map = vec![Expr::Const(s as i64)];
        out_map.extend((0..np).map(dim));
        kernels.push(LKernel {
            result: format!("{}_tail", k.result),
            note: tag(" tail"),
            domain,
            source,
            inputs: body_inputs
                .iter()
                .map(|o| Operand { map: compose(&o.map, &with), ..o.clone() })
                .collect(),
            out: Operand { t: scratch, map: out_map, gather: false },
            body: subst_dims(&body, &dims),
            epilogue: None,
            ..k.clone()
        });
    }

    // The sum over [P..., S'] of scratch[d_np, d0..], then the original epilogue, whose operands
    // (read at parallel dimensions only) keep their maps.
    let mut read = vec![dim(np)];
    read.extend((0..np).map(dim));
    let mut inputs = vec![Operand { t: scratch, map: read, gather: false }];
    let epilogue = k.epilogue.as_ref().map(|e| {
        let (used, e) = only_read(e, &k.inputs);
        inputs.extend(used);
        renumber(&e, &|i| i + 1)
    });
    let mut domain = par.to_vec();
    domain.push(slots);
    kernels.push(LKernel {
        note: tag(" sum"),
        domain,
        inputs,
        body: Scalar::In(0),
        epilogue,
        ..k.clone()
    });
    Ok(kernels)
}

/// The operands of `inputs` that `e` reads, in order of first read, and `e` reading them by
/// their position in that list.
pub(super) fn only_read(e: &Scalar, inputs: &[Operand]) -> (Vec<Operand>, Scalar) {
    let mut to: Vec<Option<usize>> = vec![None; inputs.len()];
    let mut used = Vec::new();
    e.visit(&mut |x| {
        if let Scalar::In(i) | Scalar::Load(i, _) = x {
            if let Some(slot @ None) = to.get_mut(*i) {
                *slot = Some(used.len());
                used.push(inputs[*i].clone());
            }
        }
    });
    let e = renumber(e, &|i| to.get(i).copied().flatten().unwrap_or(i));
    (used, e)
}

/// `e` with operand `i` renumbered to `to(i)`.
fn renumber(e: &Scalar, to: &dyn Fn(usize) -> usize) -> Scalar {
    map_scalar(e, &mut |s| match s {
        Scalar::In(i) => Some(Scalar::In(to(*i))),
        Scalar::Load(i, off) => Some(Scalar::Load(to(*i), Box::new(renumber(off, to)))),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_parse() {
        assert_eq!(SplitK::parse("auto"), Ok(SplitK::Auto));
        assert_eq!(SplitK::parse("off"), Ok(SplitK::Off));
        assert_eq!(SplitK::parse("16"), Ok(SplitK::Fixed(16)));
        for bad in ["1", "0", "-4", "yes", ""] {
            assert!(SplitK::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn auto_splits_skinny_products_to_fill_the_device() {
        let nv = fbc_target::builtin("nvidia").unwrap();
        let k_lanes = ProductShape::Skinny { narrow: 8, lanes_along_k: true, decoded: false };
        let w_lanes = ProductShape::Skinny { narrow: 8, lanes_along_k: false, decoded: false };
        let tiled = ProductShape::Tiled;
        // Skinny, on 132 CUs: at most 264 work-groups of 128 (lanes along k) or 1024 outputs.
        assert_eq!(SplitK::Auto.chunks(512 * 8, k_lanes, 8192, &nv), Some(8)); // LoRA down x·A
        assert_eq!(SplitK::Auto.chunks(512 * 8, k_lanes, 2048, &nv), Some(8)); // LoRA q x·A
        assert_eq!(SplitK::Auto.chunks(512 * 8, k_lanes, 512, &nv), Some(4)); // chunks of 128
        assert_eq!(SplitK::Auto.chunks(2048 * 8, w_lanes, 512, &nv), Some(16)); // dA = xᵀ·d(xa)
        assert_eq!(SplitK::Auto.chunks(8192 * 8, w_lanes, 512, &nv), Some(4)); // dA of down
        let w16 = ProductShape::Skinny { narrow: 16, lanes_along_k: false, decoded: false };
        assert_eq!(SplitK::Auto.chunks(8192 * 16, w16, 512, &nv), Some(4));
        // Matrix-vector products (a decode step): chunks of at least the nvidia profile's
        // `matvec_min_k`, 64, along the wide side, and at most `matvec_groups_per_cu` = 8
        // work-groups per compute unit (1056).
        let gemv = ProductShape::Skinny { narrow: 1, lanes_along_k: false, decoded: false };
        assert_eq!((nv.skinny.matvec_min_k, nv.skinny.matvec_groups_per_cu), (64, Some(8)));
        assert_eq!(SplitK::Auto.chunks(2048, gemv, 2048, &nv), Some(32)); // Q (the chunks bound it)
        assert_eq!(SplitK::Auto.chunks(512, gemv, 2048, &nv), Some(32)); // K of GQA (64)

        // The gate (64 work-groups) and the down projection (16, 8192 long): the work-groups
        // bound them, 16 and 64 chunks.
        assert_eq!(SplitK::Auto.chunks(8192, gemv, 2048, &nv), Some(16));
        assert_eq!(SplitK::Auto.chunks(2048, gemv, 8192, &nv), Some(64));
        // `groups_per_cu`'s 2 allow 264 work-groups: the gate in 4.
        let mut nv = nv.clone();
        nv.skinny.matvec_groups_per_cu = None;
        assert_eq!(SplitK::Auto.chunks(8192, gemv, 2048, &nv), Some(4));
        assert_eq!(SplitK::Auto.chunks(2048, gemv, 511, &nv), Some(4)); // chunks of 127 and 128
        assert_eq!(SplitK::Auto.chunks(2048, gemv, 127, &nv), None); // one chunk of 64 only
        nv.skinny.matvec_min_k = 128;
        assert_eq!(SplitK::Auto.chunks(2048, gemv, 511, &nv), Some(2)); // chunks of 255 and 256
        assert_eq!(SplitK::Auto.chunks(2048, gemv, 255, &nv), None); // one chunk of 128 only

        // A packed weight's matrix-vector product: `packed_values` wide values a lane, so fewer
        // work-groups along the wide side and more chunks (16: 2048 / 128).
        let packed = ProductShape::Skinny { narrow: 1, lanes_along_k: false, decoded: true };
        let mut nv16 = nv.clone();
        nv16.skinny.packed_values = 16;
        assert_eq!(SplitK::Auto.chunks(8192, gemv, 2048, &nv16), Some(4)); // f32: unchanged
        assert_eq!(SplitK::Auto.chunks(8192, packed, 2048, &nv16), Some(16));
        assert_eq!(nv.skinny.packed_values, 8);
        assert_eq!(SplitK::Auto.chunks(8192, packed, 2048, &nv), Some(8)); // 8 values a lane
        let mut nv4 = nv.clone();
        nv4.skinny.packed_values = 4;
        assert_eq!(SplitK::Auto.chunks(8192, packed, 2048, &nv4), Some(4)); // as f32
        let packed8 = ProductShape::Skinny { narrow: 8, lanes_along_k: false, decoded: true };
        assert_eq!(SplitK::Auto.chunks(8192 * 8, packed8, 512, &nv16), Some(4)); // texels of 4
        assert_eq!(SplitK::Auto.chunks(512 * 8, k_lanes, 255, &nv), None); // K too short to chunk
        assert_eq!(SplitK::Auto.chunks(8192 * 8 * 8, k_lanes, 8192, &nv), None); // device full

        // Not skinny: the tiled kernel's 8 × 8 outputs per work-item, chunks of at least 256
        // within the tiled kernel's 132 × 512 = 67584 work-items (`contraction.
        // resident_work_items`), at least 2 where the product splits (at most 270336 / 2
        // work-items), or 32 long within 270336 where at most 270336 / 256 = 1056 work-items.
        assert_eq!(nv.contraction.resident_work_items, Some(512));
        assert_eq!(SplitK::Auto.chunks(32 * 32, tiled, 8192, &nv), Some(256));
        assert_eq!(SplitK::Auto.chunks(1057 * 64, tiled, 2048, &nv), Some(8));
        assert_eq!(SplitK::Auto.chunks(512 * 512, tiled, 2048, &nv), Some(8)); // K projection (GQA)
        assert_eq!(SplitK::Auto.chunks(512 * 2048, tiled, 2048, &nv), Some(4)); // Q projection
        assert_eq!(SplitK::Auto.chunks(512 * 2048, tiled, 8192, &nv), Some(4)); // down
        assert_eq!(SplitK::Auto.chunks(512 * 8192, tiled, 2048, &nv), Some(2)); // gate: at least 2
        assert_eq!(SplitK::Auto.chunks(512 * 8192, tiled, 511, &nv), None); // one 256-long chunk
        assert_eq!(SplitK::Auto.chunks(2048 * 8192, tiled, 512, &nv), None); // dB of gate: full

        // Without the tiled kernel's own occupancy, the compute unit's: 16 and 4 chunks.
        let mut whole = nv.clone();
        whole.contraction.resident_work_items = None;
        assert_eq!(SplitK::Auto.chunks(512 * 2048, tiled, 8192, &whole), Some(16));
        assert_eq!(SplitK::Auto.chunks(512 * 8192, tiled, 2048, &whole), Some(4));
        let generic = fbc_target::builtin("generic").unwrap();
        // 4 CUs: at most 8 work-groups.
        assert_eq!(SplitK::Auto.chunks(512 * 8, k_lanes, 8192, &generic), None);
        assert_eq!(SplitK::Auto.chunks(128 * 8, k_lanes, 4096, &generic), None);
        assert_eq!(SplitK::Auto.chunks(32 * 8, k_lanes, 4096, &generic), Some(4));
        assert_eq!(SplitK::Auto.chunks(2048 * 8, w_lanes, 512, &generic), None);
        assert_eq!(SplitK::Auto.chunks(32 * 32, tiled, 8192, &generic), Some(32));
        assert_eq!(SplitK::Auto.chunks(512 * 2048, tiled, 2048, &generic), None);
        let cpu = fbc_target::builtin("cpu").unwrap();
        assert_eq!(SplitK::Auto.chunks(64, tiled, 8192, &cpu), Some(32));
        assert_eq!(SplitK::Fixed(7).chunks(1 << 30, k_lanes, 100, &cpu), Some(7));
        assert_eq!(SplitK::Fixed(7).chunks(4, tiled, 6, &cpu), None);
        assert_eq!(SplitK::Off.chunks(4, tiled, 1 << 20, &cpu), None);
    }
}

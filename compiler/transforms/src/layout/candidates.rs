//! R-Tile shape candidates (FBLayout Alg. 1) and their physical mapping (Sec. 4.2).
//!
//! For a tensor `[.., H, W]` of element size `e` on a profile with subgroup `sg`, RGBA texels
//! (`texel = 4·e` bytes), cache line `L`, cache blocks `C_h × C_w` texels and L1 `l1_bytes`:
//!
//! **Initial pool.** Per dimension `D`: the powers of two 4, 8, .., 256, the divisors of `D` in
//! `4..=256`, and `D` itself when `D < 4`; the pool is every pair `(th, tw)`.
//!
//! **C1, computation alignment** (`IsWarpAligned ∧ IsISACompatible`):
//! - every *parallel* tiled axis of the tensor has a tile extent that is a multiple of `sg` — an
//!   axis is parallel when some reduction consumer does not reduce it, or when the tensor is
//!   the result of an FTD-D op (its writer's lanes run along both axes). This is the paper's
//!   "tile dimensions must be multiples of the warp size" where lanes are laid along that
//!   dimension; a dimension only ever reduced is walked by every lane and needs no alignment;
//! - a tile is a whole number of subgroup loads: `th · ceil(tw/4)` texels is a multiple of `sg`
//!   (one lane per texel, no idle lanes);
//! - the ISA constraint: `read_imagef` returns whole RGBA texels, so a tile must not split one:
//!   `tw` is a multiple of 4.
//!
//! **C2, memory alignment** (`FitsInCache ∧ IsCacheLineAligned`):
//! - the tile's texels fit the L1 texture cache: `th · ceil(tw/4) · texel ≤ l1_bytes`;
//! - a tile row is whole cache lines or a whole fraction of one:
//!   `row = ceil(tw/4) · texel`, `row mod L = 0` or `L mod row = 0`.
//!
//! **C3, shape compatibility**: padding ratio `(Hp·Wp − H·W) / (H·W) ≤ max_padding` (10% by
//! default), `Hp`, `Wp` the dimensions rounded up to tile multiples.
//!
//! **Physical mapping** of each survivor (Sec. 4.2): intra-tile `"rows"` when the tile is at most
//! one cache block wide (`ceil(tw/4) ≤ C_w`), else `"block"` with the `[bh, bw]` that minimizes
//! Eq. 1 for the tile's footprint (`bw` a multiple of 4 dividing `tw` with `bw/4 ≤ C_w`; ties to
//! the widest `bw`; `bh` the largest divisor of `th` not above `C_h`, so a block is at most one
//! cache block high); inter-tile row-major with the *more traversed* axis horizontal:
//! `traversals(axis) = Σ over consumers reducing that axis of the tiles along it` (the length of
//! the reduction path in tiles), ties to `W` (the natural arrangement); storage `image2d` when the
//! device has images and the image fits its limits, else `buffer`.

use fbc_dialects::layout::{Intra, Matrix, RTile, Storage};
use fbc_target::HardwareProfile;

use super::perf_model::{self, Axis2, Consumer, TensorDesc};

/// Default C3 threshold.
pub const DEFAULT_MAX_PADDING: f64 = 0.10;

/// Largest tile extent in the initial pool.
const POOL_MAX: u64 = 256;

/// What the candidate generator needs to know about a tensor.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CandidateInput {
    pub shape: Vec<u64>,
    pub elem_bytes: u64,
    /// Whether each tiled axis (`[H, W]`) is parallel in some use (C1).
    pub parallel: [bool; 2],
    /// The reduction consumers, for the inter-tile arrangement.
    pub consumers: Vec<Consumer>,
}

/// The tile shapes left after each stage of Alg. 1, and the mapped candidates.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CandidateReport {
    pub initial: Vec<[u64; 2]>,
    pub after_c1: Vec<[u64; 2]>,
    pub after_c2: Vec<[u64; 2]>,
    pub after_c3: Vec<[u64; 2]>,
    pub candidates: Vec<RTile>,
}

/// The initial pool of one dimension, sorted.
pub fn dim_pool(d: u64) -> Vec<u64> {
    let mut v: Vec<u64> = (2..=8).map(|k| 1u64 << k).collect();
    v.extend((4..=POOL_MAX.min(d)).filter(|x| d % x == 0));
    if d < 4 && d > 0 {
        v.push(d);
    }
    v.sort_unstable();
    v.dedup();
    v
}

fn texels(tile: [u64; 2]) -> u64 {
    tile[0] * tile[1].div_ceil(4)
}

/// C1 for one tile.
pub fn c1(p: &HardwareProfile, tile: [u64; 2], parallel: [bool; 2]) -> bool {
    let sg = u64::from(p.compute.subgroup_size).max(1);
    let dims_aligned = (0..2).all(|k| !parallel[k] || tile[k] % sg == 0);
    dims_aligned && texels(tile) % sg == 0 && tile[1] % 4 == 0
}

/// C2 for one tile.
pub fn c2(p: &HardwareProfile, tile: [u64; 2], elem_bytes: u64) -> bool {
    let texel = u64::from(p.image.channels).max(1) * elem_bytes.max(1);
    let line = u64::from(p.texture_cache.line_bytes).max(1);
    let fits = texels(tile).saturating_mul(texel) <= p.texture_cache.l1_bytes;
    let row = tile[1].div_ceil(4) * texel;
    fits && (row % line == 0 || line % row == 0)
}

/// The C3 padding ratio of `tile` on a `[.., h, w]` tensor.
pub fn padding_ratio(m: Matrix, tile: [u64; 2]) -> f64 {
    let real = (m.h * m.w) as f64;
    if real == 0.0 {
        return 0.0;
    }
    let hp = m.h.div_ceil(tile[0]) * tile[0];
    let wp = m.w.div_ceil(tile[1]) * tile[1];
    (hp as f64 * wp as f64 - real) / real
}

/// Alg. 1 on one tensor, then the physical mapping of every survivor.
pub fn generate(p: &HardwareProfile, input: &CandidateInput, max_padding: f64) -> CandidateReport {
    let Some(m) = Matrix::of(&input.shape) else { return CandidateReport::default() };
    if input.shape.len() < 2 || m.h == 0 || m.w == 0 {
        return CandidateReport::default();
    }
    let (ph, pw) = (dim_pool(m.h), dim_pool(m.w));
    let initial: Vec<[u64; 2]> =
        ph.iter().flat_map(|&th| pw.iter().map(move |&tw| [th, tw])).collect();
    let after_c1: Vec<_> = initial.iter().copied().filter(|&t| c1(p, t, input.parallel)).collect();
    let after_c2: Vec<_> =
        after_c1.iter().copied().filter(|&t| c2(p, t, input.elem_bytes)).collect();
    let after_c3: Vec<_> =
        after_c2.iter().copied().filter(|&t| padding_ratio(m, t) <= max_padding).collect();
    let candidates = after_c3
        .iter()
        .filter_map(|&t| physical_mapping(p, &input.shape, input.elem_bytes, t, &input.consumers))
        .collect();
    CandidateReport { initial, after_c1, after_c2, after_c3, candidates }
}

/// The intra-tile mapping of a tile on the profile (see the module docs).
pub fn intra_mapping(p: &HardwareProfile, tile: [u64; 2]) -> Intra {
    let (ch, cw) =
        (u64::from(p.texture_cache.block_h).max(1), u64::from(p.texture_cache.block_w).max(1));
    let [th, tw] = tile;
    if tw.div_ceil(4) <= cw {
        return Intra::Rows;
    }
    // N_cache of the footprint (th·tw/bw rows, bw/4 texels) when aligned to the block grid.
    let best = (4..=tw.min(4 * cw))
        .step_by(4)
        .filter(|bw| tw % bw == 0)
        .map(|bw| ((th * (tw / bw)).div_ceil(ch) * (bw / 4).div_ceil(cw), bw))
        .min_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
    match best {
        Some((_, bw)) => {
            let bh = (1..=th.min(ch)).rev().find(|d| th % d == 0).unwrap_or(1);
            Intra::Block { bh, bw }
        }
        None => Intra::Rows,
    }
}

/// `traversals(axis)`: Σ over the consumers reducing `axis` of the tiles along it.
pub fn traversals(m: Matrix, tile: [u64; 2], consumers: &[Consumer]) -> [u64; 2] {
    let (gh, gw) = (m.h.div_ceil(tile[0]), m.w.div_ceil(tile[1]));
    let mut t = [0, 0];
    for c in consumers {
        match c.reduce {
            Axis2::H => t[0] += gh,
            Axis2::W => t[1] += gw,
        }
    }
    t
}

/// The full R-Tile for `tile` on a tensor of `shape` (elements of `elem_bytes`) read by
/// `consumers`; `None` when the shape cannot hold it (rank < 2). It is stored in an `image2d`
/// when the image fits the device and the profile's measured rates do not favour a buffer
/// ([`perf_model::measured_storage`]), else in a buffer.
pub fn physical_mapping(
    p: &HardwareProfile,
    shape: &[u64],
    elem_bytes: u64,
    tile: [u64; 2],
    consumers: &[Consumer],
) -> Option<RTile> {
    let m = Matrix::of(shape)?;
    let rank = shape.len();
    if rank < 2 {
        return None;
    }
    let intra = intra_mapping(p, tile);
    let [th_trav, tw_trav] = traversals(m, tile, consumers);
    let horizontal = if th_trav > tw_trav { Axis2::H } else { Axis2::W }.axis(rank) as u64;
    let mut t = RTile::for_shape(shape, tile, intra, horizontal, Storage::Image2d).ok()?;
    let [w, h] = t.image?;
    let fits = p.image.supported
        && w <= u64::from(p.image.max_width)
        && h <= u64::from(p.image.max_height);
    if !fits {
        // In a buffer the tile's rows stay rows: blocks stacked for a texture's 2-D cache
        // serve no cache there.
        t = RTile::for_shape(shape, tile, Intra::Rows, horizontal, Storage::Buffer).ok()?;
    } else {
        let desc = TensorDesc { shape: shape.to_vec(), elem_bytes };
        t.storage = perf_model::measured_storage(p, &desc, consumers);
    }
    Some(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::perf_model::ConsumerKind;

    fn mali() -> HardwareProfile {
        fbc_target::builtin("mali").unwrap()
    }

    #[test]
    fn pools() {
        assert_eq!(dim_pool(2048), [4, 8, 16, 32, 64, 128, 256]);
        assert_eq!(dim_pool(40), [4, 5, 8, 10, 16, 20, 32, 40, 64, 128, 256]);
        assert_eq!(dim_pool(3), [3, 4, 8, 16, 32, 64, 128, 256]);
        assert_eq!(dim_pool(768).len(), 7 + 6, "adds 6, 12, 24, 48, 96, 192");
    }

    #[test]
    fn c1_c2_by_hand() {
        let p = mali();
        // sg = 32: both parallel needs both multiples of 32.
        assert!(c1(&p, [32, 64], [true, true]));
        assert!(!c1(&p, [16, 64], [true, true]));
        // Only W parallel: th = 4 is fine, 4·ceil(32/4) = 32 texels.
        assert!(c1(&p, [4, 32], [false, true]));
        // 4 x 4 = 4 texels: not a whole subgroup; tw = 6 splits a texel.
        assert!(!c1(&p, [4, 4], [false, false]));
        assert!(!c1(&p, [64, 6], [false, false]));
        // L1 16 KiB of 16-byte texels: 1024 texels. 32 x 128 = 1024 fits, 64 x 128 does not.
        assert!(c2(&p, [32, 128], 4));
        assert!(!c2(&p, [64, 128], 4));
        // Rows of 12 elements = 3 texels = 48 B: neither a multiple nor a fraction of 64 B.
        assert!(!c2(&p, [4, 12], 4));
        assert!(c2(&p, [4, 8], 4), "32 B rows: two per line");
    }

    #[test]
    fn intra_by_hand() {
        let p = mali(); // C_h x C_w = 4 x 8 texels
        assert_eq!(intra_mapping(&p, [32, 32]), Intra::Rows, "8 texels wide = C_w");
        // 32 x 128 is 32 texels wide: blocks of 32 elements (8 texels) minimize Eq. 1 at
        // 128 rows / 4 x 1 = 32 blocks (the tile's 1024 texels / 32 per block); bh = C_h.
        assert_eq!(intra_mapping(&p, [32, 128]), Intra::Block { bh: 4, bw: 32 });
        // A 2-row tile: rows would span ceil(2/4) x 4 = 4 half-empty blocks; blocks of 32
        // stacked make 8 x 8 texels = 2 blocks.
        assert_eq!(intra_mapping(&p, [2, 128]), Intra::Block { bh: 2, bw: 32 });
    }

    #[test]
    fn horizontal_follows_traversals() {
        let p = mali();
        let red = |r| Consumer { reduce: r, kind: ConsumerKind::Reduction };
        // [8, 16] in 4 x 4 tiles: 2 tiles along H, 4 along W.
        let t = physical_mapping(&p, &[8, 16], 4, [4, 4], &[red(Axis2::W)]).unwrap();
        assert_eq!(t.horizontal, 1);
        let t = physical_mapping(&p, &[8, 16], 4, [4, 4], &[red(Axis2::H)]).unwrap();
        assert_eq!(t.horizontal, 0);
        // Both: 2 (H) vs 4 (W): W.
        let t = physical_mapping(&p, &[8, 16], 4, [4, 4], &[red(Axis2::H), red(Axis2::W)]).unwrap();
        assert_eq!(t.horizontal, 1);
        // Nothing reduces it: W, the natural arrangement.
        let t = physical_mapping(&p, &[2, 8, 16], 4, [4, 4], &[]).unwrap();
        assert_eq!(t.horizontal, 2);
        assert_eq!(traversals(Matrix { batch: 1, h: 8, w: 16 }, [4, 4], &[red(Axis2::H)]), [2, 0]);
    }

    #[test]
    fn too_large_for_an_image_goes_to_a_buffer() {
        // 8192 x 8192 images. 32 x 32 tiles are 8 texels wide > C_w = 4: in an image, blocks
        // of 16 elements, 64 x 4 texels a tile; 4096 tiles across make 16384 texels, too wide.
        let p = fbc_target::builtin("generic").unwrap();
        let t = physical_mapping(&p, &[64, 131072], 4, [32, 32], &[]).unwrap();
        // In a buffer the tile's rows stay rows.
        assert_eq!(t.intra, Intra::Rows);
        assert_eq!(t.storage, Storage::Buffer);
        // Its extent as rows: 4096 tiles of 8 texels across, 2 tiles of 32 rows down.
        assert_eq!(t.image, Some([32768, 64]));
    }
}

//! The layout attributes: `#layout.linear` and `#layout.rtile<...>`, their Rust forms
//! ([`Layout`], [`RTile`]), validation, and the physical mapping an R-Tile stands for.
//!
//! # `#layout.linear`
//!
//! Row-major: element `[b..., i, j]` of a tensor `[B..., H, W]` is texel `(x = j / 4, y = b·H + i)`,
//! channel `j mod 4`, of an image `ceil(W / 4)` texels wide and `B·H` high (`B` the product of the
//! leading dimensions). It takes no parameters; it prints as `#layout.linear` (`#layout.linear<>`
//! reads the same).
//!
//! # `#layout.rtile<...>` (FBLayout Sec. 4.2, Fig. 10)
//!
//! An R-Tile cuts the last two dimensions `[H, W]` of a tensor of rank ≥ 2 into tiles of
//! `tile = [th, tw]` elements and places them in a 2D texture in two levels. Parameters, in the
//! canonical (printed) order:
//!
//! | key | value | default | meaning |
//! |---|---|---|---|
//! | `tile` | `[th, tw]` | required | tile extent along axis `rank-2` (h) and `rank-1` (w), in elements, each in `1..=65536` |
//! | `intra` | `"rows"` or `"block"` | `"rows"` | element order inside a tile (below) |
//! | `block` | `[bh, bw]` | only with `"block"` | sub-block of a tile, `bh` divides `th`, `bw` divides `tw` |
//! | `inter` | `"row-major"` | `"row-major"` | tiles are placed row-major in the image |
//! | `horizontal` | axis | required | the tensor axis (`rank-2` or `rank-1`) whose tile index runs along the image width |
//! | `pack` | `"w"` or `"c"` | `"w"` | what the 4 RGBA channels of a texel hold: 4 consecutive footprint columns (`"w"`), or 4 consecutive values of axis `rank-3` at one position (`"c"`, MNN's NC4HW4) |
//! | `pad` | `[ph, pw]` | `[0, 0]` | elements of padding after `H` and `W`: `H + ph` and `W + pw` are tile multiples, `ph < th`, `pw < tw` |
//! | `image` | `[width, height]` | absent | the texel extent of the whole image (filled in by the compiler; checked against the tensor when present) |
//! | `storage` | `"image2d"` or `"buffer"` | `"image2d"` | an OpenCL `image2d_t`, or a buffer holding the same texel array row by row (when the image exceeds the device limits) |
//!
//! **Intra-tile.** A tile's *footprint* is the rectangle of texels it occupies. With `"rows"`
//! element `(r, c)` of the tile sits at footprint row `r`, column `c` (`th` rows, `ceil(tw/4)`
//! texels wide): horizontal strips. With `"block"` the tile is cut into `(th/bh)·(tw/bw)` blocks of
//! `bh × bw`, stacked in one column in row-major block order: element `(r, c)` is in block
//! `(p, q) = (r / bh, c / bw)` and sits at footprint row `(p·(tw/bw) + q)·bh + r mod bh`, column
//! `c mod bw` (`th·tw/bw` rows, `ceil(bw/4)` texels wide). Choosing `ceil(bw/4)` equal to the cache
//! block width `C_w` makes a wide tile as compact as Eq. 1 allows.
//!
//! **Inter-tile.** Tile `(a, c)` (a-th along h, c-th along w) of batch slice `b`, with a grid of
//! `gh = (H+ph)/th` by `gw = (W+pw)/tw` tiles and a footprint of `fh × fw` texels, has its
//! footprint's top-left texel at
//! - `horizontal = rank-1`: `x = c·fw`, `y = (b·gh + a)·fh` (the natural arrangement);
//! - `horizontal = rank-2`: `x = a·fw`, `y = (b·gw + c)·fh` (the tile grid transposed, so that
//!   walking along h moves right — Fig. 8(b), right panel).
//!
//! The image is `gw·fw × B·gh·fh` texels (horizontal = w) or `gh·fw × B·gw·fh` (horizontal = h).
//!
//! **Channel packing** (`pack = "c"`, rank ≥ 3). The channels of a texel hold 4 consecutive
//! values of axis `rank-3` (`P` values, the channels `C` of an NCHW tensor) at one position `(i,
//! j)`, as MNN's NC4HW4 does: element `[o.., p, i, j]` is channel `p mod 4` of the texel that
//! element `(i, j)` of batch slice `b = o·⌈P/4⌉ + p floordiv 4` occupies, where the tensor is now
//! `B = O·⌈P/4⌉` stacked `[H, W]` matrices of texels (`O` the product of the axes before `rank-3`).
//! A tile position is a whole texel, so a footprint is `th` rows × `tw` texels (`"rows"`) or
//! `th·tw/bw` rows × `bw` texels (`"block"`); everything else is as above. The channels past `P` in
//! the last group of 4 are padding (0). Reading one texel gives 4 channels at once: what a direct
//! convolution (or a 1×1 convolution) wants, and for an `[N, C, L]` tensor exactly the texels of
//! its `[N, L, C]` transpose in `pack = "w"` rows.

use std::fmt;

use fbc_ir::{Attr, DialectAttr, TensorType};

/// Largest tile extent accepted, so that products of tile and grid sizes stay far from overflow.
pub const MAX_TILE: u64 = 65536;

/// RGBA: elements per texel.
pub const CHANNELS: u64 = 4;

/// Why a layout attribute is malformed or does not fit a tensor. The message is complete (it
/// names the attribute and the parameter); verifiers add where it was found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct LayoutError(pub String);

fn err<T>(msg: impl Into<String>) -> Result<T, LayoutError> {
    Err(LayoutError(msg.into()))
}

/// A tensor layout: linear (row-major) or an R-Tile.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Layout {
    Linear,
    RTile(RTile),
}

/// Element order inside a tile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Intra {
    /// Horizontal strips: the tile's rows, as they are (`tile_w ≤ C_w`, Sec. 4.2).
    Rows,
    /// Blocks of `bh × bw` elements stacked in one column (`tile_w > C_w`).
    Block { bh: u64, bw: u64 },
}

/// Where the texels live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Storage {
    Image2d,
    Buffer,
}

impl Storage {
    pub fn name(self) -> &'static str {
        match self {
            Storage::Image2d => "image2d",
            Storage::Buffer => "buffer",
        }
    }
}

/// What the 4 channels of a texel hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Pack {
    /// 4 consecutive footprint columns (elements along the tile's width).
    #[default]
    W,
    /// 4 consecutive values of axis `rank-3` at one position (NC4HW4).
    C,
}

impl Pack {
    pub fn name(self) -> &'static str {
        match self {
            Pack::W => "w",
            Pack::C => "c",
        }
    }

    /// The packing printed as `name` (`"w"` or `"c"`).
    pub fn from_name(name: &str) -> Option<Pack> {
        [Pack::W, Pack::C].into_iter().find(|p| p.name() == name)
    }

    /// The packing as manifests and weight files record it: absent for the default `"w"`.
    pub fn recorded(self) -> Option<String> {
        (self != Pack::W).then(|| self.name().to_string())
    }

    /// The packing such a record names (absent: `"w"`); `None` for an unknown name.
    pub fn from_record(record: Option<&str>) -> Option<Pack> {
        record.map_or(Some(Pack::W), Pack::from_name)
    }

    /// Elements of one footprint row a texel holds: 4 (`"w"`) or 1 (`"c"`).
    pub fn per_texel(self) -> u64 {
        match self {
            Pack::W => CHANNELS,
            Pack::C => 1,
        }
    }
}

/// `#layout.rtile<...>`; see the module documentation for the meaning of each field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RTile {
    /// `[th, tw]`, elements along axis rank-2 and rank-1.
    pub tile: [u64; 2],
    pub intra: Intra,
    /// The tensor axis whose tiles run along the image width.
    pub horizontal: u64,
    pub pack: Pack,
    /// `[ph, pw]`.
    pub pad: [u64; 2],
    /// `[width, height]` in texels, once known.
    pub image: Option<[u64; 2]>,
    pub storage: Storage,
}

/// A texel address: column `x`, row `y`, RGBA channel `c`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Texel {
    pub x: u64,
    pub y: u64,
    pub c: u64,
}

/// A tensor seen as `batch` stacked `[h, w]` matrices (its last two dimensions; a rank-1 tensor is
/// one row, a rank-0 tensor one element).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Matrix {
    pub batch: u64,
    pub h: u64,
    pub w: u64,
}

impl Matrix {
    /// `None` if the batch product overflows.
    pub fn of(shape: &[u64]) -> Option<Matrix> {
        let r = shape.len();
        let (h, w) = match r {
            0 => (1, 1),
            1 => (1, shape[0]),
            _ => (shape[r - 2], shape[r - 1]),
        };
        let batch = shape[..r.saturating_sub(2)].iter().try_fold(1u64, |a, &d| a.checked_mul(d))?;
        Some(Matrix { batch, h, w })
    }

    /// Splits a full index into (batch slice, row, column).
    fn split(&self, shape: &[u64], idx: &[u64]) -> Option<(u64, u64, u64)> {
        if idx.len() != shape.len() || idx.iter().zip(shape).any(|(i, d)| i >= d) {
            return None;
        }
        let r = shape.len();
        let (i, j) = match r {
            0 => (0, 0),
            1 => (0, idx[0]),
            _ => (idx[r - 2], idx[r - 1]),
        };
        let mut b = 0u64;
        for k in 0..r.saturating_sub(2) {
            b = b.checked_mul(shape[k])?.checked_add(idx[k])?;
        }
        Some((b, i, j))
    }
}

impl Layout {
    /// Reads `#layout.linear` or `#layout.rtile<...>`.
    pub fn from_attr(a: &Attr) -> Result<Layout, LayoutError> {
        let Attr::Dialect(d) = a else {
            return err(format!(
                "expected a layout attribute (#layout.linear or #layout.rtile<...>), found {} `{a}`",
                a.kind_name()
            ));
        };
        match (d.dialect.as_str(), d.name.as_str()) {
            ("layout", "linear") => {
                if d.params.is_empty() {
                    Ok(Layout::Linear)
                } else {
                    err(format!("#layout.linear takes no parameters, found {}", d.params.len()))
                }
            }
            ("layout", "rtile") => RTile::from_dialect(d).map(Layout::RTile),
            _ => err(format!(
                "expected a layout attribute (#layout.linear or #layout.rtile<...>), found `{a}`"
            )),
        }
    }

    pub fn to_attr(&self) -> Attr {
        match self {
            Layout::Linear => Attr::Dialect(Box::new(DialectAttr {
                dialect: "layout".into(),
                name: "linear".into(),
                params: Vec::new(),
            })),
            Layout::RTile(t) => t.to_attr(),
        }
    }

    /// Whether the layout can hold a tensor of type `t`.
    pub fn check_type(&self, t: &TensorType) -> Result<(), LayoutError> {
        match self {
            Layout::Linear => Ok(()),
            Layout::RTile(r) => r.check_type(t),
        }
    }

    /// The texel holding element `idx` of a tensor of shape `shape`; `None` when `idx` is out of
    /// range or the layout does not fit the shape.
    pub fn texel_of(&self, shape: &[u64], idx: &[u64]) -> Option<Texel> {
        match self {
            Layout::Linear => {
                let m = Matrix::of(shape)?;
                let (b, i, j) = m.split(shape, idx)?;
                Some(Texel {
                    x: j / CHANNELS,
                    y: b.checked_mul(m.h)?.checked_add(i)?,
                    c: j % CHANNELS,
                })
            }
            Layout::RTile(r) => r.texel_of(shape, idx),
        }
    }

    /// `[width, height]` of the texel array holding a tensor of shape `shape`.
    pub fn image_extent(&self, shape: &[u64]) -> Option<[u64; 2]> {
        match self {
            Layout::Linear => {
                let m = Matrix::of(shape)?;
                Some([m.w.div_ceil(CHANNELS), m.batch.checked_mul(m.h)?])
            }
            Layout::RTile(r) => r.image_extent(shape),
        }
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.to_attr())
    }
}

impl fmt::Display for RTile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.to_attr())
    }
}

const RTILE_KEYS: &[&str] =
    &["tile", "intra", "block", "inter", "horizontal", "pack", "pad", "image", "storage"];

/// A `[a, b]` pair of integers in `lo..=hi`, or an error naming `key`.
fn pair(v: &Attr, key: &str, what: &str, lo: u64, hi: u64) -> Result<[u64; 2], LayoutError> {
    let bad = || {
        LayoutError(format!(
            "`{key}` of #layout.rtile must be {what}, two integers in {lo}..={hi}, found `{v}`"
        ))
    };
    let ints = v.as_ints().ok_or_else(bad)?;
    match ints.as_slice() {
        &[a, b] => {
            let a = u64::try_from(a).map_err(|_| bad())?;
            let b = u64::try_from(b).map_err(|_| bad())?;
            if (lo..=hi).contains(&a) && (lo..=hi).contains(&b) {
                Ok([a, b])
            } else {
                Err(bad())
            }
        }
        _ => Err(bad()),
    }
}

fn choice<'a>(v: &'a Attr, key: &str, options: &[&str]) -> Result<&'a str, LayoutError> {
    let quoted: Vec<String> = options.iter().map(|o| format!("\"{o}\"")).collect();
    match v.as_str() {
        Some(s) if options.contains(&s) => Ok(s),
        _ => err(format!("`{key}` of #layout.rtile must be {}, found `{v}`", quoted.join(" or "))),
    }
}

impl RTile {
    /// An R-Tile for a tensor of `shape` (rank ≥ 2): padding and image extent computed.
    pub fn for_shape(
        shape: &[u64],
        tile: [u64; 2],
        intra: Intra,
        horizontal: u64,
        storage: Storage,
    ) -> Result<RTile, LayoutError> {
        RTile::packed_for_shape(shape, tile, intra, horizontal, Pack::W, storage)
    }

    /// [`RTile::for_shape`] with a packing (`"c"` needs rank ≥ 3).
    pub fn packed_for_shape(
        shape: &[u64],
        tile: [u64; 2],
        intra: Intra,
        horizontal: u64,
        pack: Pack,
        storage: Storage,
    ) -> Result<RTile, LayoutError> {
        let mut t = RTile { tile, intra, horizontal, pack, pad: [0, 0], image: None, storage };
        t.check_intrinsic()?;
        let m = Matrix::of(shape).ok_or_else(|| LayoutError("shape overflows".into()))?;
        let least = if pack == Pack::C { 3 } else { 2 };
        if shape.len() < least {
            return err(format!(
                "#layout.rtile{} needs a tensor of rank ≥ {least}, found rank {}",
                if pack == Pack::C { " with pack = \"c\"" } else { "" },
                shape.len()
            ));
        }
        t.pad = [pad_to(m.h, tile[0]), pad_to(m.w, tile[1])];
        t.image = Some(t.image_extent(shape).ok_or_else(|| {
            LayoutError("the image extent of #layout.rtile overflows 64 bits".into())
        })?);
        Ok(t)
    }

    /// Reads `#layout.rtile<...>` (any parameter order; every parameter keyed, none twice).
    pub fn from_attr(a: &Attr) -> Result<RTile, LayoutError> {
        match Layout::from_attr(a)? {
            Layout::RTile(t) => Ok(t),
            Layout::Linear => err("expected #layout.rtile<...>, found #layout.linear"),
        }
    }

    fn from_dialect(d: &DialectAttr) -> Result<RTile, LayoutError> {
        let mut seen: Vec<&str> = Vec::new();
        for (i, (k, _)) in d.params.iter().enumerate() {
            let Some(k) = k.as_deref() else {
                return err(format!(
                    "parameter {i} of #layout.rtile has no key; write `key = value` (keys: {})",
                    RTILE_KEYS.join(", ")
                ));
            };
            if !RTILE_KEYS.contains(&k) {
                return err(format!(
                    "unknown parameter `{k}` of #layout.rtile; its parameters: {}",
                    RTILE_KEYS.join(", ")
                ));
            }
            if seen.contains(&k) {
                return err(format!("parameter `{k}` of #layout.rtile is given twice"));
            }
            seen.push(k);
        }
        let tile = match d.param("tile") {
            Some(v) => pair(v, "tile", "[tile_h, tile_w]", 1, MAX_TILE)?,
            None => return err("#layout.rtile requires `tile = [tile_h, tile_w]`"),
        };
        let horizontal = match d.param("horizontal") {
            Some(Attr::Int(h)) if *h >= 0 => *h as u64,
            Some(v) => {
                return err(format!(
                    "`horizontal` of #layout.rtile must be a tensor axis (an integer ≥ 0), found `{v}`"
                ))
            }
            None => {
                return err(
                    "#layout.rtile requires `horizontal = AXIS`, the axis whose tiles run along the image width",
                )
            }
        };
        let intra_name = match d.param("intra") {
            Some(v) => choice(v, "intra", &["rows", "block"])?,
            None => "rows",
        };
        let intra = match (intra_name, d.param("block")) {
            ("rows", None) => Intra::Rows,
            ("rows", Some(_)) => {
                return err("`block` of #layout.rtile is only allowed with intra = \"block\"")
            }
            (_, None) => {
                return err("intra = \"block\" of #layout.rtile requires `block = [bh, bw]`")
            }
            (_, Some(v)) => {
                let [bh, bw] = pair(v, "block", "[block_h, block_w]", 1, MAX_TILE)?;
                Intra::Block { bh, bw }
            }
        };
        if let Some(v) = d.param("inter") {
            choice(v, "inter", &["row-major"])?;
        }
        let pack = match d.param("pack") {
            Some(v) => Pack::from_name(choice(v, "pack", &["w", "c"])?).unwrap_or_default(),
            None => Pack::W,
        };
        let pad = match d.param("pad") {
            Some(v) => pair(v, "pad", "[pad_h, pad_w]", 0, MAX_TILE)?,
            None => [0, 0],
        };
        let image = match d.param("image") {
            Some(v) => Some(pair(v, "image", "[width, height] in texels", 1, i64::MAX as u64)?),
            None => None,
        };
        let storage = match d.param("storage") {
            Some(v) => match choice(v, "storage", &["image2d", "buffer"])? {
                "image2d" => Storage::Image2d,
                _ => Storage::Buffer,
            },
            None => Storage::Image2d,
        };
        let t = RTile { tile, intra, horizontal, pack, pad, image, storage };
        t.check_intrinsic()?;
        Ok(t)
    }

    /// Rules that need no tensor: block divisibility, padding below one tile.
    fn check_intrinsic(&self) -> Result<(), LayoutError> {
        let [th, tw] = self.tile;
        if th == 0 || tw == 0 || th > MAX_TILE || tw > MAX_TILE {
            return err(format!(
                "`tile` of #layout.rtile must be [tile_h, tile_w], two integers in 1..={MAX_TILE}, found `[{th}, {tw}]`"
            ));
        }
        if let Intra::Block { bh, bw } = self.intra {
            if bh == 0 || bw == 0 || th % bh != 0 || tw % bw != 0 {
                return err(format!(
                    "`block` [{bh}, {bw}] of #layout.rtile must divide `tile` [{th}, {tw}]"
                ));
            }
        }
        let [ph, pw] = self.pad;
        if ph >= th || pw >= tw {
            return err(format!(
                "`pad` [{ph}, {pw}] of #layout.rtile must be less than `tile` [{th}, {tw}] in each dimension"
            ));
        }
        Ok(())
    }

    /// The canonical attribute: every parameter but `block` (only with `"block"`) and `image`
    /// (only when known), in the documented order.
    pub fn to_attr(&self) -> Attr {
        let mut p: Vec<(Option<String>, Attr)> = Vec::new();
        let mut push = |k: &str, v: Attr| p.push((Some(k.to_string()), v));
        push("tile", Attr::ints(self.tile.iter().map(|&x| x as i64)));
        match self.intra {
            Intra::Rows => push("intra", Attr::Str("rows".into())),
            Intra::Block { bh, bw } => {
                push("intra", Attr::Str("block".into()));
                push("block", Attr::ints([bh as i64, bw as i64]));
            }
        }
        push("inter", Attr::Str("row-major".into()));
        push("horizontal", Attr::Int(self.horizontal as i64));
        push("pack", Attr::Str(self.pack.name().into()));
        push("pad", Attr::ints(self.pad.iter().map(|&x| x as i64)));
        if let Some([w, h]) = self.image {
            push("image", Attr::ints([w as i64, h as i64]));
        }
        push("storage", Attr::Str(self.storage.name().into()));
        Attr::Dialect(Box::new(DialectAttr {
            dialect: "layout".into(),
            name: "rtile".into(),
            params: p,
        }))
    }

    /// Whether this R-Tile can hold a tensor of type `t`: rank ≥ 2, `horizontal` one of the two
    /// tiled axes, `pad` exactly what makes both dimensions tile multiples, `image` (if given)
    /// the extent the mapping needs.
    pub fn check_type(&self, t: &TensorType) -> Result<(), LayoutError> {
        let r = t.rank() as u64;
        if r < 2 {
            return err(format!("#layout.rtile needs a tensor of rank ≥ 2, found {t}"));
        }
        if r < 3 && self.pack == Pack::C {
            return err(format!(
                "#layout.rtile with pack = \"c\" packs axis rank-3 and needs a tensor of rank ≥ 3, found {t}"
            ));
        }
        if self.horizontal != r - 2 && self.horizontal != r - 1 {
            return err(format!(
                "`horizontal` of #layout.rtile must be axis {} or {} (the tiled axes of {t}), found {}",
                r - 2,
                r - 1,
                self.horizontal
            ));
        }
        let m = Matrix::of(&t.shape)
            .ok_or_else(|| LayoutError(format!("{t} has more elements than fit in 64 bits")))?;
        let want = [pad_to(m.h, self.tile[0]), pad_to(m.w, self.tile[1])];
        if want != self.pad {
            return err(format!(
                "`pad` of #layout.rtile must be [{}, {}] for {t} with tile [{}, {}], found [{}, {}]",
                want[0], want[1], self.tile[0], self.tile[1], self.pad[0], self.pad[1]
            ));
        }
        if let Some(have) = self.image {
            let want = self.image_extent(&t.shape).ok_or_else(|| {
                LayoutError(format!("the image of #layout.rtile for {t} overflows 64 bits"))
            })?;
            if have != want {
                return err(format!(
                    "`image` of #layout.rtile must be [{}, {}] (width, height in texels) for {t}, found [{}, {}]",
                    want[0], want[1], have[0], have[1]
                ));
            }
        }
        Ok(())
    }

    /// `(fh, fw)`: a tile's footprint in texel rows and texel columns.
    pub fn footprint(&self) -> (u64, u64) {
        let [th, tw] = self.tile;
        let per = self.pack.per_texel();
        match self.intra {
            Intra::Rows => (th, tw.div_ceil(per)),
            Intra::Block { bw, .. } => (th * (tw / bw.max(1)), bw.div_ceil(per)),
        }
    }

    /// The tensor as the stacked `[h, w]` matrices of texel positions the tiles cut: the
    /// tensor's own ([`Matrix::of`]) for `pack = "w"`; for `"c"` every group of 4 along axis
    /// `rank-3` is a slice of its own (`batch = O·⌈P/4⌉`). `None` on overflow, or for `"c"`
    /// below rank 3.
    pub fn slices(&self, shape: &[u64]) -> Option<Matrix> {
        let m = Matrix::of(shape)?;
        match self.pack {
            Pack::W => Some(m),
            Pack::C => {
                let r = shape.len().checked_sub(3)?;
                let outer = shape[..r].iter().try_fold(1u64, |a, &d| a.checked_mul(d))?;
                Some(Matrix { batch: outer.checked_mul(shape[r].div_ceil(CHANNELS))?, ..m })
            }
        }
    }

    /// `(gh, gw)`: tiles along h and w of one batch slice of a `[.., h, w]` tensor.
    pub fn grid(&self, m: Matrix) -> (u64, u64) {
        (m.h.div_ceil(self.tile[0]), m.w.div_ceil(self.tile[1]))
    }

    /// Whether tile indices along h run along the image width (the grid is transposed).
    fn h_horizontal(&self, rank: usize) -> bool {
        rank >= 2 && self.horizontal as usize == rank - 2
    }

    /// Top-left texel of tile `(a, c)` of batch slice `b` (no range checks beyond overflow).
    pub fn tile_origin(&self, shape: &[u64], b: u64, a: u64, c: u64) -> Option<(u64, u64)> {
        let m = Matrix::of(shape)?;
        self.tile_origin_in(shape.len(), self.grid(m), self.footprint(), b, a, c)
    }

    /// [`RTile::tile_origin`] with the tensor's rank, [`RTile::grid`] and [`RTile::footprint`]
    /// given: the performance model walks millions of tiles of one tensor, and recomputing them
    /// (several divisions) per tile dominated its time.
    pub fn tile_origin_in(
        &self,
        rank: usize,
        (gh, gw): (u64, u64),
        (fh, fw): (u64, u64),
        b: u64,
        a: u64,
        c: u64,
    ) -> Option<(u64, u64)> {
        let (col, row) = if self.h_horizontal(rank) {
            (a, b.checked_mul(gw)?.checked_add(c)?)
        } else {
            (c, b.checked_mul(gh)?.checked_add(a)?)
        };
        Some((col.checked_mul(fw)?, row.checked_mul(fh)?))
    }

    /// `[width, height]` in texels of the image holding a tensor of `shape`.
    pub fn image_extent(&self, shape: &[u64]) -> Option<[u64; 2]> {
        let m = self.slices(shape)?;
        let (gh, gw) = self.grid(m);
        let (fh, fw) = self.footprint();
        let (across, down) = if self.h_horizontal(shape.len()) { (gh, gw) } else { (gw, gh) };
        Some([across.checked_mul(fw)?, m.batch.checked_mul(down)?.checked_mul(fh)?])
    }

    /// The texel holding element `idx` of a tensor of `shape` (see the module docs); `None` when
    /// `idx` is out of range, the rank is below 2, or arithmetic overflows.
    pub fn texel_of(&self, shape: &[u64], idx: &[u64]) -> Option<Texel> {
        if shape.len() < 2 {
            return None;
        }
        let (b, i, j) = Matrix::of(shape)?.split(shape, idx)?;
        // With `pack = "c"`: slice `o·⌈P/4⌉ + p/4`, channel `p mod 4`.
        let (b, lane) = match self.pack {
            Pack::W => (b, None),
            Pack::C => {
                let r = shape.len().checked_sub(3)?;
                let (p, groups) = (idx[r], shape[r].div_ceil(CHANNELS));
                let outer = b / shape[r].max(1);
                (outer.checked_mul(groups)?.checked_add(p / CHANNELS)?, Some(p % CHANNELS))
            }
        };
        let [th, tw] = self.tile;
        let (a, c) = (i / th, j / tw);
        let (r, s) = (i % th, j % tw);
        let (fr, fc) = match self.intra {
            Intra::Rows => (r, s),
            Intra::Block { bh, bw } => {
                let (p, q) = (r / bh, s / bw);
                ((p * (tw / bw) + q) * bh + r % bh, s % bw)
            }
        };
        let (x0, y0) = self.tile_origin(shape, b, a, c)?;
        let per = self.pack.per_texel();
        let c = lane.unwrap_or(fc % CHANNELS);
        Some(Texel { x: x0.checked_add(fc / per)?, y: y0.checked_add(fr)?, c })
    }
}

/// Padding that makes `d` a multiple of `t` (`t ≥ 1`).
pub fn pad_to(d: u64, t: u64) -> u64 {
    let t = t.max(1);
    (t - d % t) % t
}

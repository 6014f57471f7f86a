//! The `.fbw` layout and its validation.
//!
//! ```text
//! 0      header (64 bytes, little endian)
//!          magic        8  "FBCW\0\x01\r\n"
//!          version      u32  1
//!          flags        u32  0
//!          manifest_off u64  where the manifest starts
//!          manifest_len u64
//!          manifest_crc u32  CRC-32 (IEEE) of the manifest bytes
//!          reserved     u32  0
//!          file_len     u64  the whole file's length
//!          reserved     16   zeros
//! 4096   tiles, each at a multiple of 4096: values of its rows, then their f32 scales
//! ...    manifest: UTF-8 JSON (Manifest), after the last tile
//! ```

use serde::{Deserialize, Serialize};

use fbc_dialects::layout::{Intra, Layout, Pack, RTile, Storage};
use fbc_dialects::memory::MemType;

use super::quant::{decode_row, Quant};
use crate::exec::{unpack, MemData};

pub const MAGIC: [u8; 8] = *b"FBCW\0\x01\r\n";
pub const VERSION: u32 = 1;
pub const HEADER_LEN: usize = 64;
/// Tiles start at multiples of this (a page: a tile maps and uploads without a copy).
pub const ALIGN: u64 = 4096;
/// Limits that keep a hostile manifest from asking for absurd work before any check fails.
pub const MAX_MANIFEST: u64 = 1 << 30;
pub const MAX_RANK: usize = 8;
pub const MAX_ELEMS: u64 = 1 << 40;

/// One tile: rows `rows[0]..rows[1]` of a tensor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TileEntry {
    pub rows: [u64; 2],
    pub offset: u64,
    pub size: u64,
    pub crc32: u32,
}

/// The storage form a compiled module uploads a tensor in (`fbc pack --for`): the RGBA `f32`
/// texels of its R-Tile image, stored row of texels by row, so that a run uploads them as they
/// are. The R-Tile follows from the shape and these parameters (`RTile::for_shape`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Stored {
    /// The layout as the IR prints it (`#layout.rtile<...>`), for people and tools: checked
    /// against the parameters.
    pub layout: String,
    pub tile: [u64; 2],
    /// `[bh, bw]` of `intra = "block"`; absent for `"rows"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block: Option<[u64; 2]>,
    pub horizontal: u64,
    /// `"c"` when the texels pack axis rank-3 (NC4HW4); absent for `"w"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pack: Option<String>,
    /// `[width, height]` of the image, in texels.
    pub texels: [u64; 2],
}

impl Stored {
    /// The storage form of R-Tile `r` (an image), or `None` for a buffer or an R-Tile whose
    /// image extent is not known.
    pub fn of(r: &RTile) -> Option<Stored> {
        if r.storage != Storage::Image2d {
            return None;
        }
        Some(Stored {
            layout: Layout::RTile(*r).to_string(),
            tile: r.tile,
            block: match r.intra {
                Intra::Rows => None,
                Intra::Block { bh, bw } => Some([bh, bw]),
            },
            horizontal: r.horizontal,
            pack: r.pack.recorded(),
            texels: r.image?,
        })
    }

    /// The R-Tile of a tensor of `shape` stored so: its parameters valid for the shape, its
    /// image `texels`, its printed form `layout`.
    pub fn rtile(&self, shape: &[u64]) -> Result<RTile, String> {
        let intra = match self.block {
            Some([bh, bw]) => Intra::Block { bh, bw },
            None => Intra::Rows,
        };
        let rank = shape.len() as u64;
        let h = self.horizontal;
        if rank < 2 || (h.checked_add(2) != Some(rank) && h.checked_add(1) != Some(rank)) {
            return Err(format!(
                "an R-Tile of a rank-{rank} tensor with horizontal axis {}: the axis must be \
                 one of the last two",
                self.horizontal
            ));
        }
        let pack = Pack::from_record(self.pack.as_deref()).ok_or_else(|| {
            format!("an R-Tile packing `{}` (\"w\" or \"c\")", self.pack.as_deref().unwrap_or(""))
        })?;
        let st = Storage::Image2d;
        let r = RTile::packed_for_shape(shape, self.tile, intra, self.horizontal, pack, st)
            .map_err(|e| e.0)?;
        if r.image != Some(self.texels) {
            return Err(format!(
                "its R-Tile is an image of {:?} texels, not {:?}",
                r.image.unwrap_or_default(),
                self.texels
            ));
        }
        let text = Layout::RTile(r).to_string();
        if text != self.layout {
            return Err(format!("the layout `{}` is not its parameters' `{text}`", self.layout));
        }
        Ok(r)
    }
}

/// One tensor of the file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TensorEntry {
    pub name: String,
    pub shape: Vec<u64>,
    pub dtype: Quant,
    /// Values per scale along the last dimension (quantised dtypes only; 0 otherwise).
    #[serde(default)]
    pub group: u64,
    /// The decoder layer the tensor belongs to, read from its name (`layers.3.`, `l3_`).
    #[serde(default)]
    pub layer: Option<u64>,
    /// Stored as the texels of the R-Tile image a compiled module uploads it in (f32 only);
    /// its tiles then hold rows of texels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<Stored>,
    pub tiles: Vec<TileEntry>,
}

impl TensorEntry {
    /// `(rows, row length)`: the product of all dimensions but the last, and the last (a
    /// scalar is one row of one value); for a stored tensor the image's rows of texels, each
    /// `4 · width` values.
    pub fn rows(&self) -> (u64, u64) {
        if let Some(s) = &self.storage {
            return (s.texels[1], s.texels[0].saturating_mul(4));
        }
        match self.shape.split_last() {
            None => (1, 1),
            Some((&last, lead)) => (lead.iter().product(), last),
        }
    }

    /// Bytes of a tile of `n` rows: values, then scales.
    pub fn tile_bytes(&self, n: u64) -> u64 {
        let (_, len) = self.rows();
        n * (self.dtype.row_bytes(len) + 4 * self.dtype.groups(len, self.group))
    }
}

/// The manifest: every tensor in file order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub format: String,
    pub version: u32,
    pub tensors: Vec<TensorEntry>,
}

/// Why a weight file was refused. Messages name the tensor and tile where there is one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WeightError {
    #[error("not an fbc weight file (bad magic)")]
    Magic,
    #[error("weight file version {0} is not supported (this fbc reads version {VERSION})")]
    Version(u32),
    #[error("truncated: the header says {expected} bytes, the file has {actual}")]
    Truncated { expected: u64, actual: u64 },
    #[error("the manifest's checksum does not match (the file is corrupted)")]
    ManifestChecksum,
    #[error("bad manifest: {0}")]
    Manifest(String),
    #[error("tensor `{tensor}`: {what}")]
    Tensor { tensor: String, what: String },
    #[error("tensor `{tensor}`, tile {tile}: checksum mismatch (the file is corrupted)")]
    TileChecksum { tensor: String, tile: usize },
    #[error("no tensor `{0}` in the weight file")]
    Missing(String),
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(x)
}

/// The header's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub manifest_off: u64,
    pub manifest_len: u64,
    pub manifest_crc: u32,
    pub file_len: u64,
}

impl Header {
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        h[..8].copy_from_slice(&MAGIC);
        h[8..12].copy_from_slice(&VERSION.to_le_bytes());
        h[16..24].copy_from_slice(&self.manifest_off.to_le_bytes());
        h[24..32].copy_from_slice(&self.manifest_len.to_le_bytes());
        h[32..36].copy_from_slice(&self.manifest_crc.to_le_bytes());
        h[40..48].copy_from_slice(&self.file_len.to_le_bytes());
        h
    }

    fn decode(b: &[u8]) -> Result<Header, WeightError> {
        if b.len() < HEADER_LEN {
            return Err(if b.len() >= 8 && b[..8] == MAGIC {
                WeightError::Truncated { expected: HEADER_LEN as u64, actual: b.len() as u64 }
            } else {
                WeightError::Magic
            });
        }
        if b[..8] != MAGIC {
            return Err(WeightError::Magic);
        }
        let version = u32_at(b, 8);
        if version != VERSION {
            return Err(WeightError::Version(version));
        }
        Ok(Header {
            manifest_off: u64_at(b, 16),
            manifest_len: u64_at(b, 24),
            manifest_crc: u32_at(b, 32),
            file_len: u64_at(b, 40),
        })
    }
}

/// A validated view of a weight file's bytes.
#[derive(Debug)]
pub struct Weights<B: AsRef<[u8]>> {
    bytes: B,
    manifest: Manifest,
}

fn tensor_err(t: &TensorEntry, what: impl Into<String>) -> WeightError {
    WeightError::Tensor { tensor: t.name.clone(), what: what.into() }
}

/// Checks one tensor's entry against the file: shape, dtype, group, and that its tiles cover
/// its rows in order, each aligned, inside the data region and of the size its rows need.
fn check_tensor(t: &TensorEntry, data_end: u64) -> Result<(), WeightError> {
    if t.name.is_empty() {
        return Err(WeightError::Manifest("a tensor has an empty name".into()));
    }
    if t.shape.len() > MAX_RANK {
        return Err(tensor_err(t, format!("rank {} exceeds {MAX_RANK}", t.shape.len())));
    }
    let elems = t.shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d));
    match elems {
        Some(n) if n <= MAX_ELEMS => {}
        _ => return Err(tensor_err(t, format!("shape {:?} is too large", t.shape))),
    }
    if let Some(st) = &t.storage {
        if t.dtype != Quant::F32 {
            return Err(tensor_err(t, format!("a stored tensor is f32, not {}", t.dtype.name())));
        }
        // The texels' values, and the arithmetic on them below, stay in range.
        let [w, h] = st.texels;
        if w.checked_mul(h).and_then(|n| n.checked_mul(4)).is_none_or(|n| n > MAX_ELEMS) {
            return Err(tensor_err(t, format!("an image of {w} x {h} texels is too large")));
        }
        st.rtile(&t.shape).map_err(|e| tensor_err(t, format!("storage: {e}")))?;
    }
    let (rows, len) = t.rows();
    if t.dtype.is_quantised() {
        if t.group == 0 || t.group > len.max(1) {
            return Err(tensor_err(t, format!("group {} does not fit rows of {len}", t.group)));
        }
    } else if t.group != 0 {
        return Err(tensor_err(t, format!("a {} tensor has no groups", t.dtype.name())));
    }
    let mut next = 0u64;
    for (k, tile) in t.tiles.iter().enumerate() {
        let [a, b] = tile.rows;
        if a != next || b <= a || b > rows {
            return Err(tensor_err(
                t,
                format!("tile {k} covers rows {a}..{b}, expected from {next} within 0..{rows}"),
            ));
        }
        next = b;
        if tile.offset % ALIGN != 0 || tile.offset < ALIGN {
            return Err(tensor_err(
                t,
                format!(
                    "tile {k} starts at {}, not a multiple of {ALIGN} past the header",
                    tile.offset
                ),
            ));
        }
        let end = tile.offset.checked_add(tile.size);
        if end.is_none_or(|e| e > data_end) {
            return Err(tensor_err(
                t,
                format!(
                    "tile {k} ({} bytes at {}) runs past the tiles' end at {data_end}",
                    tile.size, tile.offset
                ),
            ));
        }
        let want = t.tile_bytes(b - a);
        if tile.size != want {
            return Err(tensor_err(
                t,
                format!("tile {k} holds {} bytes, its {} rows need {want}", tile.size, b - a),
            ));
        }
    }
    if next != rows && rows > 0 {
        return Err(tensor_err(t, format!("tiles cover rows 0..{next} of {rows}")));
    }
    Ok(())
}

impl<B: AsRef<[u8]>> Weights<B> {
    /// Validates `bytes` as a weight file: header, manifest (checksum, JSON, every tensor's
    /// entry) and the tiles' layout (in range, aligned, sized, disjoint). Tile contents are
    /// checked by their checksums when read.
    pub fn new(bytes: B) -> Result<Weights<B>, WeightError> {
        let b = bytes.as_ref();
        let h = Header::decode(b)?;
        let actual = b.len() as u64;
        if h.file_len != actual {
            return Err(WeightError::Truncated { expected: h.file_len, actual });
        }
        let m_end = h.manifest_off.checked_add(h.manifest_len);
        if h.manifest_len > MAX_MANIFEST
            || h.manifest_off < HEADER_LEN as u64
            || m_end.is_none_or(|e| e > actual)
        {
            return Err(WeightError::Manifest(format!(
                "{} bytes at {} lie outside the file of {actual} bytes",
                h.manifest_len, h.manifest_off
            )));
        }
        let raw = &b[h.manifest_off as usize..(h.manifest_off + h.manifest_len) as usize];
        if crc32fast::hash(raw) != h.manifest_crc {
            return Err(WeightError::ManifestChecksum);
        }
        let manifest: Manifest =
            serde_json::from_slice(raw).map_err(|e| WeightError::Manifest(e.to_string()))?;
        if manifest.format != "fbc-weights" || manifest.version != VERSION {
            return Err(WeightError::Manifest(format!(
                "format `{}` version {}, expected `fbc-weights` version {VERSION}",
                manifest.format, manifest.version
            )));
        }
        // Tiles lie between the header's page and the manifest.
        let data_end = h.manifest_off;
        let mut names = std::collections::HashSet::new();
        let mut spans = Vec::new();
        for t in &manifest.tensors {
            check_tensor(t, data_end)?;
            if !names.insert(t.name.as_str()) {
                return Err(tensor_err(t, "appears twice"));
            }
            spans.extend(
                t.tiles.iter().enumerate().map(|(k, x)| (x.offset, x.size, t.name.as_str(), k)),
            );
        }
        spans.sort_unstable();
        for w in spans.windows(2) {
            let ((o1, s1, n1, k1), (o2, _, n2, k2)) = (w[0], w[1]);
            if o1 + s1 > o2 {
                return Err(WeightError::Manifest(format!(
                    "tile {k1} of `{n1}` overlaps tile {k2} of `{n2}`"
                )));
            }
        }
        Ok(Weights { bytes, manifest })
    }

    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    pub fn tensor(&self, name: &str) -> Result<&TensorEntry, WeightError> {
        self.manifest
            .tensors
            .iter()
            .find(|t| t.name == name)
            .ok_or_else(|| WeightError::Missing(name.into()))
    }

    /// The bytes of tile `k` of `t` (values, then scales), after its checksum matched.
    pub fn tile(&self, t: &TensorEntry, k: usize) -> Result<&[u8], WeightError> {
        let tile = t.tiles.get(k).ok_or_else(|| tensor_err(t, format!("no tile {k}")))?;
        // In range: validated by `new`.
        let b = &self.bytes.as_ref()[tile.offset as usize..(tile.offset + tile.size) as usize];
        if crc32fast::hash(b) != tile.crc32 {
            return Err(WeightError::TileChecksum { tensor: t.name.clone(), tile: k });
        }
        Ok(b)
    }

    /// Checks every tile's checksum.
    pub fn verify(&self) -> Result<(), WeightError> {
        for t in &self.manifest.tensors {
            for k in 0..t.tiles.len() {
                self.tile(t, k)?;
            }
        }
        Ok(())
    }

    /// Tensor `name`'s values in f32 (quantised ones dequantised, stored ones read out of their
    /// texels), row-major.
    pub fn dequantize(&self, name: &str) -> Result<Vec<f32>, WeightError> {
        let t = self.tensor(name)?;
        if let Some((r, texels)) = self.texels(name)? {
            let [w, h] = r.image.unwrap_or_default();
            let v =
                unpack(&Layout::RTile(r), &t.shape, &MemData::F32(texels), MemType::image(w, h))
                    .map_err(|e| tensor_err(t, format!("storage: {e}")))?;
            return match v {
                crate::interp::Value::F32(x) => Ok(x.into_data()),
                _ => Err(tensor_err(t, "storage: not f32 values")),
            };
        }
        self.decode_rows(t, 0, t.rows().0)
    }

    /// Rows `first..first + n` of tensor `name`'s values in f32, counted as the tensor's rows
    /// (every dimension but the last: [`TensorEntry::rows`]), read from only the tiles that
    /// hold them (each checked). A tensor stored as texels is read whole and cut.
    pub fn dequantize_rows(&self, name: &str, first: u64, n: u64) -> Result<Vec<f32>, WeightError> {
        let t = self.tensor(name)?;
        let (rows, len) = t.rows();
        let end = first.checked_add(n).filter(|&e| e <= rows && n > 0).ok_or_else(|| {
            tensor_err(
                t,
                format!("rows {first}..{} are not rows of its {rows}", first.saturating_add(n)),
            )
        })?;
        if t.storage.is_some() {
            let all = self.dequantize(name)?;
            let (a, b) = ((first * len) as usize, (end * len) as usize);
            return all
                .get(a..b)
                .map(<[f32]>::to_vec)
                .ok_or_else(|| tensor_err(t, "rows past its values"));
        }
        self.decode_rows(t, first, end)
    }

    /// Rows `first..end` of `t` (stored by rows) decoded to f32, from the tiles holding them,
    /// each checked (`new` checked that the tiles cover every row once, in order).
    fn decode_rows(&self, t: &TensorEntry, first: u64, end: u64) -> Result<Vec<f32>, WeightError> {
        let (_, len) = t.rows();
        let group = t.group.max(1) as usize;
        let row_bytes = t.dtype.row_bytes(len) as usize;
        let groups = t.dtype.groups(len, t.group) as usize;
        let mut out = Vec::with_capacity((end.saturating_sub(first) * len) as usize);
        for (k, tile) in t.tiles.iter().enumerate() {
            let [lo, hi] = tile.rows;
            if hi <= first || lo >= end {
                continue;
            }
            let (values, scales) = self.tile_parts(t, k)?;
            for (r, v) in values.chunks_exact(row_bytes.max(1)).enumerate() {
                if !(first..end).contains(&(lo + r as u64)) {
                    continue;
                }
                let s = &scales[r * groups..(r + 1) * groups];
                decode_row(t.dtype, v, s, len as usize, group, &mut out);
            }
        }
        Ok(out)
    }

    /// A stored tensor's R-Tile and texel values (`4 · width · height`, row by row, as an image
    /// upload takes them), each tile's checksum checked; `None` for a tensor stored by rows.
    pub fn texels(&self, name: &str) -> Result<Option<(RTile, Vec<f32>)>, WeightError> {
        let t = self.tensor(name)?;
        let Some(st) = &t.storage else { return Ok(None) };
        let r = st.rtile(&t.shape).map_err(|e| tensor_err(t, format!("storage: {e}")))?;
        let (values, _) = self.packed(name)?;
        let texels =
            values.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        Ok(Some((r, texels)))
    }

    /// Tensor `name`'s stored rows as they are (`row_bytes` each, row-major: for INT8/INT4 the
    /// packed bytes a kernel reads, see `tensor.dequantize`) and its scales (`groups` per row,
    /// row-major; none for f32/f16), each tile's checksum checked.
    pub fn packed(&self, name: &str) -> Result<(Vec<u8>, Vec<f32>), WeightError> {
        let t = self.tensor(name)?;
        let (rows, len) = t.rows();
        let mut values = Vec::with_capacity((rows * t.dtype.row_bytes(len)) as usize);
        let mut scales = Vec::with_capacity((rows * t.dtype.groups(len, t.group)) as usize);
        for k in 0..t.tiles.len() {
            let (v, s) = self.tile_parts(t, k)?;
            values.extend_from_slice(v);
            scales.extend(s);
        }
        Ok((values, scales))
    }

    /// Tile `k` of `t` split into its rows' values and their scales (as f32).
    fn tile_parts(&self, t: &TensorEntry, k: usize) -> Result<(&[u8], Vec<f32>), WeightError> {
        let (_, len) = t.rows();
        let b = self.tile(t, k)?;
        let tile = &t.tiles[k];
        let n = (tile.rows[1] - tile.rows[0]) as usize;
        // In range: `new` checked the tile's size against its rows.
        let (values, scale_bytes) = b.split_at(n * t.dtype.row_bytes(len) as usize);
        let scales = scale_bytes
            .chunks_exact(4)
            .map(|s| f32::from_le_bytes([s[0], s[1], s[2], s[3]]))
            .collect();
        Ok((values, scales))
    }
}

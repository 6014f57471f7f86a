//! Writing a weight file: tensors streamed in as f32 rows, tiles written as they fill.

use std::io::{Seek, SeekFrom, Write};

use super::format::{Header, Manifest, Stored, TensorEntry, TileEntry, ALIGN, HEADER_LEN, VERSION};
use super::quant::{encode_row, Quant};

/// How tensors are stored.
#[derive(Debug, Clone, PartialEq)]
pub struct PackOptions {
    /// The storage of tensors of rank ≥ 2 (weights; vectors — norms, biases — stay f32).
    pub quant: Quant,
    /// Values per scale of INT8/INT4 (clamped to the row length).
    pub group: u64,
    /// A tile holds at most this many bytes (at least one row).
    pub tile_bytes: u64,
    /// Layers `[0, first)` and `[L - last, L)` of `L` take `mixed_quant` instead (`--mixed`).
    pub mixed: Option<(u64, u64, Quant)>,
}

impl Default for PackOptions {
    fn default() -> PackOptions {
        PackOptions { quant: Quant::F32, group: 64, tile_bytes: 1 << 20, mixed: None }
    }
}

/// The decoder layer a tensor name names: the first dot- or underscore-separated part that is
/// a number, or `l`/`layer`/`layers` followed by one (`layers.3.wq`, `l3_wq`, `h.3.attn`).
pub fn layer_of(name: &str) -> Option<u64> {
    let parts: Vec<&str> = name.split(['.', '_', '/']).collect();
    for p in &parts {
        if let Ok(n) = p.parse::<u64>() {
            return Some(n);
        }
        for prefix in ["layers", "layer", "l"] {
            if let Some(n) = p.strip_prefix(prefix).and_then(|r| r.parse::<u64>().ok()) {
                return Some(n);
            }
        }
    }
    None
}

/// Streams tensors into a `.fbw` file.
#[derive(Debug)]
pub struct Packer<W: Write + Seek> {
    out: W,
    at: u64,
    opts: PackOptions,
    layers: Option<u64>,
    tensors: Vec<TensorEntry>,
}

impl<W: Write + Seek> Packer<W> {
    /// `layers`: the model's layer count, for `--mixed` (the largest layer in the names + 1).
    pub fn new(mut out: W, opts: PackOptions, layers: Option<u64>) -> std::io::Result<Packer<W>> {
        // The header is written last, once the manifest's place is known.
        out.write_all(&[0u8; HEADER_LEN])?;
        Ok(Packer { out, at: HEADER_LEN as u64, opts, layers, tensors: Vec::new() })
    }

    /// The storage of tensor `name` of `shape` under the options.
    pub fn quant_for(&self, name: &str, shape: &[u64]) -> Quant {
        if shape.len() < 2 {
            return Quant::F32;
        }
        if let (Some((first, last, q)), Some(l), Some(n)) =
            (self.opts.mixed, layer_of(name), self.layers)
        {
            if l < first || l + last >= n {
                return q;
            }
        }
        self.opts.quant
    }

    fn pad_to_page(&mut self) -> std::io::Result<()> {
        let pad = self.at.next_multiple_of(ALIGN) - self.at;
        self.out.write_all(&vec![0u8; pad as usize])?;
        self.at += pad;
        Ok(())
    }

    /// Adds a tensor; `values` are its f32 values, row-major.
    pub fn add(&mut self, name: &str, shape: &[u64], values: &[f32]) -> std::io::Result<()> {
        let dtype = self.quant_for(name, shape);
        let mut t = TensorEntry {
            name: name.to_string(),
            shape: shape.to_vec(),
            dtype,
            group: 0,
            layer: layer_of(name),
            storage: None,
            tiles: Vec::new(),
        };
        let (_, len) = t.rows();
        if dtype.is_quantised() {
            t.group = self.opts.group.clamp(1, len.max(1));
        }
        self.write_rows(t, values)
    }

    /// Adds a tensor stored as the texels of its R-Tile image (`fbc pack --for`): `texels` are
    /// the image's `4 · width · height` f32 values, row of texels by row, as `exec::pack`
    /// places the tensor.
    pub fn add_stored(
        &mut self,
        name: &str,
        shape: &[u64],
        storage: Stored,
        texels: &[f32],
    ) -> std::io::Result<()> {
        let t = TensorEntry {
            name: name.to_string(),
            shape: shape.to_vec(),
            dtype: Quant::F32,
            group: 0,
            layer: layer_of(name),
            storage: Some(storage),
            tiles: Vec::new(),
        };
        self.write_rows(t, texels)
    }

    /// Writes `values`, the rows of `t` (see [`TensorEntry::rows`]), as tiles.
    fn write_rows(&mut self, mut t: TensorEntry, values: &[f32]) -> std::io::Result<()> {
        let (name, shape, dtype) = (t.name.clone(), t.shape.clone(), t.dtype);
        let (rows, len) = t.rows();
        if values.len() as u64 != rows * len {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("tensor `{name}`: {} values for shape {shape:?}", values.len()),
            ));
        }
        let per_tile = (self.opts.tile_bytes / t.tile_bytes(1).max(1)).max(1);
        let mut r = 0;
        while r < rows {
            let n = per_tile.min(rows - r);
            let (mut bytes, mut scales) = (Vec::new(), Vec::new());
            for row in r..r + n {
                let x = &values[(row * len) as usize..((row + 1) * len) as usize];
                encode_row(dtype, x, t.group as usize, &mut bytes, &mut scales);
            }
            bytes.extend(scales.iter().flat_map(|s| s.to_le_bytes()));
            self.pad_to_page()?;
            let tile = TileEntry {
                rows: [r, r + n],
                offset: self.at,
                size: bytes.len() as u64,
                crc32: crc32fast::hash(&bytes),
            };
            self.out.write_all(&bytes)?;
            self.at += tile.size;
            t.tiles.push(tile);
            r += n;
        }
        self.tensors.push(t);
        Ok(())
    }

    /// Writes the manifest and the header; returns the writer and the manifest.
    pub fn finish(mut self) -> std::io::Result<(W, Manifest)> {
        let manifest =
            Manifest { format: "fbc-weights".into(), version: VERSION, tensors: self.tensors };
        let raw = serde_json::to_vec(&manifest).map_err(std::io::Error::other)?;
        let manifest_off = self.at;
        self.out.write_all(&raw)?;
        let file_len = manifest_off + raw.len() as u64;
        let header = Header {
            manifest_off,
            manifest_len: raw.len() as u64,
            manifest_crc: crc32fast::hash(&raw),
            file_len,
        };
        self.out.seek(SeekFrom::Start(0))?;
        self.out.write_all(&header.encode())?;
        self.out.flush()?;
        Ok((self.out, manifest))
    }
}

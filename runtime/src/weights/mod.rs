//! Tiled weight files (`.fbw`): `fbc pack` writes them, runs read them memory-mapped.
//!
//! The format (`docs/weights.md` is its reference): a 64-byte header, tiles of each tensor at
//! 4 KiB-aligned offsets (a tile is a range of rows — the product of all dimensions but the last
//! — stored as f32, f16, INT8 or INT4 with its per-group f32 scales after the values), and at the
//! end a JSON manifest naming every tensor (shape, dtype, quantisation, layer) and its tiles (row
//! range, offset, size, CRC-32). The header records the manifest's place, length and checksum
//! and the file's length, so a truncated or corrupted file is found before any tile is read.
//!
//! - [`format`]: the header, the manifest, and [`format::Weights`]: a validated view over the
//!   bytes of a file. Nothing in a file is trusted before validation: every offset is checked
//!   against the file, tiles against each other (no overlap), sizes against shapes, and each
//!   tile's checksum when it is read. A hostile file is an error, never a panic or a read
//!   outside the bytes;
//! - [`quant`]: INT8 and INT4 weight-only quantisation (symmetric, one f32 scale per group of
//!   the last dimension) and f16, and their dequantisation;
//! - [`writer`]: [`writer::Packer`], which streams tensors into a file through `Write + Seek`
//!   without holding more than one tile in memory.

pub mod format;
pub mod quant;
pub mod writer;

pub use format::{Manifest, Stored, TensorEntry, TileEntry, WeightError, Weights};
pub use quant::Quant;
pub use writer::{PackOptions, Packer};

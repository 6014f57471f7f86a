//! `.fbw` weight files: written by the packer, read back through the validating reader; every
//! kind of damage a file can have is a clear error, and random damage never panics.

use std::io::Cursor;

use fbc_dialects::layout::RTile;
use fbc_runtime::weights::format::{Header, HEADER_LEN};
use fbc_runtime::weights::{Manifest, PackOptions, Packer, Quant, Stored, WeightError, Weights};
use proptest::prelude::*;

fn values(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|k| {
            (((k as u32).wrapping_mul(2654435761).wrapping_add(seed) >> 8) % 2001) as f32 / 1000.0
                - 1.0
        })
        .collect()
}

/// A small model's weights: two layers of a [8, 96] and a [96, 40] matrix and a norm vector.
fn model() -> Vec<(String, Vec<u64>, Vec<f32>)> {
    let mut out = Vec::new();
    for l in 0..2 {
        out.push((format!("layers.{l}.wq"), vec![8, 96], values(8 * 96, l)));
        out.push((format!("layers.{l}.w2"), vec![96, 40], values(96 * 40, 10 + l)));
        out.push((format!("layers.{l}.norm"), vec![96], values(96, 20 + l)));
    }
    out
}

fn pack(opts: PackOptions) -> Vec<u8> {
    let mut p = Packer::new(Cursor::new(Vec::new()), opts, Some(2)).unwrap();
    for (n, s, v) in model() {
        p.add(&n, &s, &v).unwrap();
    }
    p.finish().unwrap().0.into_inner()
}

fn small_tiles(quant: Quant) -> PackOptions {
    PackOptions { quant, group: 32, tile_bytes: 1000, mixed: None }
}

/// Replaces the manifest of `file` by `edit`'s version, with a header that matches it.
fn rewrite(file: &[u8], edit: impl FnOnce(&mut Manifest)) -> Vec<u8> {
    let w = Weights::new(file).unwrap();
    let mut m = w.manifest().clone();
    edit(&mut m);
    // The manifest stays where it was: after the last tile.
    let off = file.len() as u64 - manifest_len(file);
    let raw = serde_json::to_vec(&m).unwrap();
    let mut out = file[..off as usize].to_vec();
    out.extend_from_slice(&raw);
    let h = Header {
        manifest_off: off,
        manifest_len: raw.len() as u64,
        manifest_crc: crc32fast::hash(&raw),
        file_len: out.len() as u64,
    };
    out[..HEADER_LEN].copy_from_slice(&h.encode());
    out
}

/// A change to a manifest (the hostile cases).
type Edit = Box<dyn FnOnce(&mut Manifest)>;

fn manifest_len(file: &[u8]) -> u64 {
    u64::from_le_bytes(file[24..32].try_into().unwrap())
}

#[test]
fn packed_values_read_back_exactly_in_f32_and_within_a_half_step_quantised() {
    for quant in [Quant::F32, Quant::F16, Quant::Int8, Quant::Int4] {
        let file = pack(small_tiles(quant));
        let w = Weights::new(&file[..]).unwrap();
        w.verify().unwrap();
        for (n, shape, x) in model() {
            let t = w.tensor(&n).unwrap();
            let y = w.dequantize(&n).unwrap();
            assert_eq!(y.len(), x.len());
            if shape.len() == 1 || quant == Quant::F32 {
                // Vectors stay f32.
                assert_eq!(t.dtype, Quant::F32);
                assert_eq!(y, x, "{n}");
                continue;
            }
            assert_eq!(t.dtype, quant);
            let len = shape[1] as usize;
            let bound = |row: &[f32], k: usize| match quant {
                Quant::F16 => row[k].abs() * 1e-3,
                _ => {
                    let g = &row[k / 32 * 32..(k / 32 * 32 + 32).min(len)];
                    let amax = g.iter().fold(0.0f32, |m, v| m.max(v.abs()));
                    amax / if quant == Quant::Int4 { 7.0 } else { 127.0 } / 2.0 * 1.0001
                }
            };
            for (r, (xr, yr)) in x.chunks(len).zip(y.chunks(len)).enumerate() {
                for k in 0..len {
                    assert!(
                        (xr[k] - yr[k]).abs() <= bound(xr, k),
                        "{n} [{r}, {k}]: {} vs {}",
                        xr[k],
                        yr[k]
                    );
                }
            }
            // Tiles: whole rows, at most 1000 bytes unless one row is larger, on 4 KiB pages
            // (the 96 x 40 matrices need several).
            assert!(t.tiles.len() > 1 || !n.ends_with("w2"), "{n}");
            for tile in &t.tiles {
                assert_eq!(tile.offset % 4096, 0);
                assert!(tile.size <= 1000 || tile.rows[1] - tile.rows[0] == 1);
            }
        }
    }
}

#[test]
fn quantised_files_are_four_and_eight_times_smaller() {
    let bytes = |q| -> u64 {
        let file = pack(PackOptions { quant: q, group: 64, tile_bytes: 1 << 20, mixed: None });
        let w = Weights::new(&file[..]).unwrap();
        w.manifest()
            .tensors
            .iter()
            .filter(|t| t.shape.len() == 2)
            .flat_map(|t| &t.tiles)
            .map(|t| t.size)
            .sum()
    };
    let (f, i8, i4) = (bytes(Quant::F32), bytes(Quant::Int8), bytes(Quant::Int4));
    // Values 4x and 8x smaller, plus one f32 scale per 64 values (2 of 96, 1 of 40 per row).
    assert_eq!(f, 4 * (2 * (8 * 96 + 96 * 40)));
    assert_eq!(i8, 2 * (8 * (96 + 2 * 4) + 96 * (40 + 4)));
    assert_eq!(i4, 2 * (8 * (48 + 2 * 4) + 96 * (20 + 4)));
}

#[test]
fn mixed_precision_keeps_the_first_and_last_layers() {
    let mut p = Packer::new(
        Cursor::new(Vec::new()),
        PackOptions {
            quant: Quant::Int4,
            group: 64,
            tile_bytes: 1 << 20,
            mixed: Some((1, 1, Quant::Int8)),
        },
        Some(4),
    )
    .unwrap();
    for l in 0..4 {
        p.add(&format!("l{l}_wq"), &[4, 64], &values(256, l)).unwrap();
    }
    let (_, m) = p.finish().unwrap();
    let dtypes: Vec<Quant> = m.tensors.iter().map(|t| t.dtype).collect();
    assert_eq!(dtypes, [Quant::Int8, Quant::Int4, Quant::Int4, Quant::Int8]);
    assert_eq!(
        m.tensors.iter().map(|t| t.layer).collect::<Vec<_>>(),
        [Some(0), Some(1), Some(2), Some(3)]
    );
}

fn err(bytes: &[u8]) -> WeightError {
    match Weights::new(bytes) {
        Err(e) => e,
        Ok(w) => w.verify().expect_err("a damaged file must not verify"),
    }
}

#[test]
fn damaged_files_are_clear_errors() {
    let file = pack(small_tiles(Quant::Int8));
    // Truncated anywhere: the header's length disagrees (or the header itself is cut).
    assert_eq!(
        err(&file[..file.len() - 1]),
        WeightError::Truncated { expected: file.len() as u64, actual: file.len() as u64 - 1 }
    );
    assert_eq!(err(&file[..40]), WeightError::Truncated { expected: 64, actual: 40 });
    assert_eq!(
        err(
            b"PK\x03\x04 not a weight file at all, just bytes....................................."
        ),
        WeightError::Magic
    );
    let mut v = file.clone();
    v[8] = 2;
    assert_eq!(err(&v), WeightError::Version(2));
    // A flipped bit in a tile: that tile's checksum; in the manifest: the manifest's.
    let w = Weights::new(&file[..]).unwrap();
    let t = w.tensor("layers.1.w2").unwrap().clone();
    let mut v = file.clone();
    v[(t.tiles[2].offset + 5) as usize] ^= 0x10;
    assert_eq!(err(&v), WeightError::TileChecksum { tensor: "layers.1.w2".into(), tile: 2 });
    let mut v = file.clone();
    let at = file.len() - 10;
    v[at] ^= 1;
    assert_eq!(err(&v), WeightError::ManifestChecksum);
}

#[test]
fn hostile_manifests_are_refused_before_any_tile_is_read() {
    let file = pack(small_tiles(Quant::Int4));
    let end = file.len() as u64;
    let cases: Vec<(Edit, &str)> = vec![
        (
            Box::new(|m| m.tensors[0].tiles[0].offset = 1 << 40),
            "tensor `layers.0.wq`: tile 0 (480 bytes at 1099511627776) runs past the tiles' end at",
        ),
        (Box::new(|m| m.tensors[0].tiles[0].offset = u64::MAX - 4095), "runs past the tiles' end"),
        (Box::new(|m| m.tensors[1].tiles[0].offset += 8), "tile 0 starts at"),
        (Box::new(|m| m.tensors[1].tiles[1].offset = m.tensors[1].tiles[0].offset), "overlaps"),
        (Box::new(|m| m.tensors[1].tiles[0].size += 4), "bytes, its"),
        (Box::new(|m| m.tensors[1].tiles[0].rows = [0, 1 << 50]), "tile 0 covers rows"),
        (
            Box::new(|m| {
                m.tensors[1].tiles.pop();
            }),
            "tiles cover rows",
        ),
        (Box::new(|m| m.tensors[1].shape = vec![1 << 30, 1 << 30, 1 << 30]), "is too large"),
        (Box::new(|m| m.tensors[1].shape = vec![1; 9]), "rank 9 exceeds 8"),
        (Box::new(|m| m.tensors[1].group = 0), "group 0 does not fit"),
        (
            Box::new(|m| m.tensors[2].group = 4),
            "tensor `layers.0.norm`: a f32 tensor has no groups",
        ),
        (
            Box::new(|m| {
                let t = m.tensors[0].clone();
                m.tensors.push(t);
            }),
            "appears twice",
        ),
        (Box::new(|m| m.version = 7), "expected `fbc-weights` version 1"),
    ];
    for (edit, want) in cases {
        let e = err(&rewrite(&file, edit)).to_string();
        assert!(e.contains(want), "{e} should say {want}");
    }
    // A manifest the header places past the end.
    let mut v = file.clone();
    v[16..24].copy_from_slice(&(end + 1).to_le_bytes());
    assert!(err(&v).to_string().contains("lie outside the file"));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// Random damage (bytes overwritten, the file cut) is an error or a valid file, never a
    /// panic; what validates also verifies or fails its checksums cleanly, and dequantises.
    #[test]
    fn random_damage_never_panics(
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..8),
        cut in proptest::option::of(any::<prop::sample::Index>()),
    ) {
        let mut v = pack(small_tiles(Quant::Int4));
        for (at, byte) in edits {
            let k = at.index(v.len());
            v[k] = byte;
        }
        if let Some(c) = cut {
            let n = c.index(v.len());
            v.truncate(n);
        }
        if let Ok(w) = Weights::new(&v[..]) {
            let names: Vec<String> = w.manifest().tensors.iter().map(|t| t.name.clone()).collect();
            for n in names {
                let _ = w.dequantize(&n);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Manifests with random numbers in them, checksummed so that validation itself is what
    /// meets them: an error or a file whose every read stays in its bytes.
    #[test]
    fn random_manifest_numbers_never_panic(
        tensor in any::<prop::sample::Index>(),
        tile in any::<prop::sample::Index>(),
        field in 0usize..6,
        value in prop_oneof![any::<u64>(), 0u64..70_000, Just(u64::MAX), Just(0)],
    ) {
        let file = pack(small_tiles(Quant::Int8));
        let v = rewrite(&file, |m| {
            let i = tensor.index(m.tensors.len());
            let t = &mut m.tensors[i];
            let k = tile.index(t.tiles.len().max(1)).min(t.tiles.len().saturating_sub(1));
            match field {
                0 => t.tiles[k].offset = value,
                1 => t.tiles[k].size = value,
                2 => t.tiles[k].rows[1] = value,
                3 => t.shape[0] = value,
                4 => t.group = value,
                _ => t.tiles[k].rows[0] = value,
            }
        });
        if let Ok(w) = Weights::new(&v[..]) {
            let names: Vec<String> = w.manifest().tensors.iter().map(|t| t.name.clone()).collect();
            for n in names {
                let _ = w.dequantize(&n);
            }
        }
    }
}

/// A file with `w [12, 40]` stored as the texels of an R-Tile image (tile [4, 16], blocks of
/// [4, 8]) beside a tensor stored by rows.
fn stored_file() -> (Vec<u8>, Vec<f32>, RTile) {
    use fbc_dialects::layout::{Intra, Layout, Storage};
    let shape = [12u64, 40];
    let v = values(12 * 40, 7);
    let r = RTile::for_shape(&shape, [4, 16], Intra::Block { bh: 4, bw: 8 }, 1, Storage::Image2d)
        .unwrap();
    let [w, h] = r.image.unwrap();
    let t = fbc_runtime::reference::Tensor::new(vec![12, 40], v.clone()).unwrap();
    let texels = fbc_runtime::exec::pack(
        &Layout::RTile(r),
        &shape,
        &fbc_runtime::interp::Value::F32(t),
        fbc_dialects::memory::MemType::image(w, h),
    )
    .unwrap();
    let fbc_runtime::exec::MemData::F32(texels) = texels else { panic!("f32 texels") };
    let opts = PackOptions { tile_bytes: 600, ..small_tiles(Quant::Int8) };
    let mut p = Packer::new(Cursor::new(Vec::new()), opts, None).unwrap();
    p.add_stored("w", &shape, Stored::of(&r).unwrap(), &texels).unwrap();
    p.add("other", &[3, 32], &values(96, 8)).unwrap();
    (p.finish().unwrap().0.into_inner(), v, r)
}

#[test]
fn stored_tensors_read_back_as_their_values_and_their_texels() {
    let (file, v, r) = stored_file();
    let w = Weights::new(&file[..]).unwrap();
    w.verify().unwrap();
    let t = w.tensor("w").unwrap();
    let [tw, th] = r.image.unwrap();
    // Rows of texels: 4 · width values each, several tiles (600-byte tiles).
    assert_eq!(t.rows(), (th, 4 * tw));
    assert!(t.tiles.len() > 1, "{:?}", t.tiles);
    assert_eq!(w.dequantize("w").unwrap(), v);
    let (r2, texels) = w.texels("w").unwrap().unwrap();
    assert_eq!(r2, r);
    assert_eq!(texels.len() as u64, 4 * tw * th);
    // Every value is in its texel, padding is zero.
    let nonzero = texels.iter().filter(|x| **x != 0.0).count();
    assert_eq!(nonzero, v.iter().filter(|x| **x != 0.0).count());
    // The other tensor is stored by rows, quantised, and has no texels.
    assert!(w.texels("other").unwrap().is_none());
    assert_eq!(w.tensor("other").unwrap().dtype, Quant::Int8);
}

#[test]
fn channel_packed_stored_tensors_read_back() {
    use fbc_dialects::layout::{Intra, Layout, Pack, Storage};
    // A conv weight [O = 3, C = 6, 3, 3] with its input channels in RGBA (NC4HW4): two groups
    // of 4 channels per output channel, the second half padding.
    let shape = [3u64, 6, 3, 3];
    let v = values(3 * 6 * 9, 11);
    let r =
        RTile::packed_for_shape(&shape, [3, 3], Intra::Rows, 3, Pack::C, Storage::Image2d).unwrap();
    let [w, h] = r.image.unwrap();
    assert_eq!([w, h], [3, 3 * 2 * 3]);
    let t = fbc_runtime::reference::Tensor::new(vec![3, 6, 3, 3], v.clone()).unwrap();
    let packed = fbc_runtime::exec::pack(
        &Layout::RTile(r),
        &shape,
        &fbc_runtime::interp::Value::F32(t),
        fbc_dialects::memory::MemType::image(w, h),
    )
    .unwrap();
    let fbc_runtime::exec::MemData::F32(texels) = packed else { panic!("f32 texels") };
    // Element [1, 5, 2, 0] is channel 1 of texel (0, (1·2 + 1)·3 + 2) = (0, 11).
    assert_eq!(texels[(11 * w as usize) * 4 + 1], v[54 + 5 * 9 + 2 * 3]);
    let mut p = Packer::new(Cursor::new(Vec::new()), small_tiles(Quant::Int8), None).unwrap();
    let st = Stored::of(&r).unwrap();
    assert_eq!(st.pack.as_deref(), Some("c"));
    p.add_stored("w", &shape, st, &texels).unwrap();
    let file = p.finish().unwrap().0.into_inner();
    let wf = Weights::new(&file[..]).unwrap();
    wf.verify().unwrap();
    assert_eq!(wf.dequantize("w").unwrap(), v);
    let (r2, back) = wf.texels("w").unwrap().unwrap();
    assert_eq!((r2, back), (r, texels));
    // An unknown packing, and channel packing of a matrix, are refused.
    let e =
        err(&rewrite(&file, |m| m.tensors[0].storage.as_mut().unwrap().pack = Some("z".into())));
    assert!(e.to_string().contains("an R-Tile packing `z` (\"w\" or \"c\")"), "{e}");
    let e = err(&rewrite(&file, |m| {
        m.tensors[0].shape = vec![18, 9];
        m.tensors[0].storage.as_mut().unwrap().horizontal = 1;
    }));
    assert!(e.to_string().contains("needs a tensor of rank ≥ 3"), "{e}");
}

#[test]
fn stored_forms_that_do_not_fit_their_tensor_are_refused() {
    let (file, _, _) = stored_file();
    let cases: Vec<(Edit, &str)> = vec![
        (
            Box::new(|m| m.tensors[0].storage.as_mut().unwrap().texels = [10, 9]),
            "tensor `w`: storage: its R-Tile is an image of [",
        ),
        (
            Box::new(|m| m.tensors[0].storage.as_mut().unwrap().tile = [0, 16]),
            "tensor `w`: storage: `tile` of #layout.rtile must be",
        ),
        (
            Box::new(|m| m.tensors[0].storage.as_mut().unwrap().block = Some([3, 8])),
            "must divide `tile`",
        ),
        (
            Box::new(|m| m.tensors[0].storage.as_mut().unwrap().horizontal = u64::MAX),
            "with horizontal axis 18446744073709551615: the axis must be one of the last two",
        ),
        (
            Box::new(|m| m.tensors[0].storage.as_mut().unwrap().layout = "#layout.linear".into()),
            "storage: the layout `#layout.linear` is not its parameters'",
        ),
        (
            Box::new(|m| m.tensors[0].storage.as_mut().unwrap().texels = [u64::MAX, 2]),
            "an image of 18446744073709551615 x 2 texels is too large",
        ),
        (
            Box::new(|m| {
                let st = m.tensors[0].storage.clone();
                m.tensors[1].storage = st;
            }),
            "tensor `other`: a stored tensor is f32, not int8",
        ),
        (Box::new(|m| m.tensors[0].shape = vec![480]), "an R-Tile of a rank-1 tensor"),
    ];
    for (edit, want) in cases {
        let e = err(&rewrite(&file, edit)).to_string();
        assert!(e.contains(want), "{e} should say {want}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Random numbers in a stored tensor's form: an error or a file whose texels and values
    /// read back, never a panic.
    #[test]
    fn random_stored_forms_never_panic(
        field in 0usize..6,
        a in prop_oneof![any::<u64>(), 0u64..600, Just(u64::MAX), Just(0)],
        b in prop_oneof![any::<u64>(), 0u64..600, Just(u64::MAX), Just(0)],
    ) {
        let (file, _, _) = stored_file();
        let v = rewrite(&file, |m| {
            let t = &mut m.tensors[0];
            let st = t.storage.as_mut().expect("stored");
            match field {
                0 => st.tile = [a, b],
                1 => st.block = Some([a, b]),
                2 => st.horizontal = a,
                3 => st.texels = [a, b],
                4 => t.shape = vec![a, b],
                _ => st.block = None,
            }
        });
        if let Ok(w) = Weights::new(&v[..]) {
            let _ = w.texels("w");
            let _ = w.dequantize("w");
        }
    }
}

/// `dequantize_rows` gives the rows `dequantize` gives, for any range, reading only the tiles
/// that hold them: a damaged tile elsewhere does not fail it; a range outside is an error.
#[test]
fn a_row_range_reads_only_its_tiles() {
    for quant in [Quant::F32, Quant::Int8, Quant::Int4] {
        let file = pack(small_tiles(quant));
        let w = Weights::new(&file[..]).unwrap();
        let all = w.dequantize("layers.1.w2").unwrap();
        let t = w.tensor("layers.1.w2").unwrap().clone();
        assert!(t.tiles.len() > 2, "{quant:?}");
        for (first, n) in [(0, 96), (0, 1), (5, 30), (95, 1), (40, 56)] {
            let rows = w.dequantize_rows("layers.1.w2", first, n).unwrap();
            assert_eq!(
                rows,
                all[first as usize * 40..(first + n) as usize * 40],
                "{quant:?} {first}+{n}"
            );
        }
        // The last tile damaged: the rows of the first tile still read; all of them do not.
        let mut bad = file.clone();
        let last = t.tiles.last().unwrap();
        bad[last.offset as usize + 3] ^= 0x10;
        let w = Weights::new(&bad[..]).unwrap();
        let head = t.tiles[0].rows[1];
        assert!(w.dequantize_rows("layers.1.w2", 0, head).is_ok(), "{quant:?}");
        let e = w.dequantize_rows("layers.1.w2", 0, 96).unwrap_err().to_string();
        assert!(e.contains("checksum mismatch"), "{e}");
        let e = w.dequantize_rows("layers.1.w2", 90, 7).unwrap_err().to_string();
        assert!(e.contains("rows 90..97 are not rows of its 96"), "{e}");
        let e = w.dequantize_rows("layers.1.w2", 3, 0).unwrap_err().to_string();
        assert!(e.contains("rows 3..3 are not rows of its 96"), "{e}");
    }
}

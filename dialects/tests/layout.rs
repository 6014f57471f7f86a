//! The layout dialect: attribute parsing, printing and validation, the R-Tile physical mapping,
//! index map evaluation, and every verifier rule of `layout.assign`, `layout.convert` and
//! `layout.remap` with its exact message.

mod common;

use std::collections::HashSet;

use common::{assert_err, infer, module_text, only_error, parse};
use fbc_dialects::layout::{
    remap_source_index, Intra, Layout, Matrix, Pack, RTile, Storage, Texel,
};
use fbc_ir::{Attr, ElemType, FbClass, TensorType};

const T816: &str = "tensor<8x16xf32>";

/// Attribute `key` of the first op of a module built from `op` on `args`.
fn op_attr(args: &[&str], op: &str, key: &str) -> Attr {
    let text = module_text(args, &format!("%r0 = {op}"));
    let m = parse(&text).unwrap_or_else(|d| panic!("{text}\n{d:?}"));
    let o = m.op(m.funcs[0].body[0]);
    o.attr(key).cloned().unwrap_or_else(|| panic!("no `{key}` on {op}"))
}

/// The `layout` attribute of the first op.
fn assign_attr(args: &[&str], op: &str) -> Attr {
    op_attr(args, op, "layout")
}

fn assign_err(args: &[&str], layout: &str, msg: &str) {
    assert_err(
        args,
        &format!("layout.assign %a0 {{layout = {layout}}}"),
        &format!("{msg} — `layout` of layout.assign"),
        "attribute `layout` of layout.assign",
    );
}

// ----- attributes -----

#[test]
fn rtile_round_trip_is_canonical() {
    // Parameters in any order and with defaults left out read as the canonical form.
    let a = assign_attr(
        &[T816],
        "layout.assign %a0 {layout = #layout.rtile<horizontal = 1, tile = [4, 4]>}",
    );
    let t = RTile::from_attr(&a).unwrap();
    assert_eq!(
        t,
        RTile {
            tile: [4, 4],
            intra: Intra::Rows,
            horizontal: 1,
            pack: Pack::W,
            pad: [0, 0],
            image: None,
            storage: Storage::Image2d
        }
    );
    assert_eq!(
        t.to_attr().to_string(),
        "#layout.rtile<tile = [4, 4], intra = \"rows\", inter = \"row-major\", horizontal = 1, \
         pack = \"w\", pad = [0, 0], storage = \"image2d\">"
    );
    // The full form prints back to itself, through the module printer too.
    let full = "#layout.rtile<tile = [32, 128], intra = \"block\", block = [4, 32], inter = \
                \"row-major\", horizontal = 1, pack = \"w\", pad = [0, 0], image = [512, 8192], \
                storage = \"image2d\">";
    let text = module_text(
        &["tensor<2048x8192xf32>"],
        &format!("%r0 = layout.assign %a0 {{layout = {full}}}"),
    );
    let m = parse(&text).unwrap();
    let printed = fbc_ir::print_module(&m);
    assert!(printed.contains(full), "{printed}");
    let again = fbc_ir::print_module(&parse(&printed).unwrap());
    assert_eq!(printed, again);
    let a = m.op(m.funcs[0].body[0]).attr("layout").unwrap();
    assert_eq!(RTile::from_attr(a).unwrap().to_attr(), *a);
}

#[test]
fn linear_round_trip() {
    for written in ["#layout.linear", "#layout.linear<>"] {
        let a = assign_attr(&[T816], &format!("layout.assign %a0 {{layout = {written}}}"));
        assert_eq!(Layout::from_attr(&a), Ok(Layout::Linear));
        assert_eq!(a.to_string(), "#layout.linear");
        assert_eq!(Layout::Linear.to_attr(), a);
    }
}

#[test]
fn for_shape_fills_padding_and_image() {
    let t = RTile::for_shape(&[100, 60], [32, 16], Intra::Rows, 1, Storage::Image2d).unwrap();
    // 100 → 128 (pad 28), 60 → 64 (pad 4); 4 x 4 tiles of 32 rows x 4 texels.
    assert_eq!(t.pad, [28, 4]);
    assert_eq!(t.image, Some([16, 128]));
    let tt = TensorType::new(vec![100u64, 60], ElemType::F32);
    assert_eq!(t.check_type(&tt), Ok(()));
    // Horizontal = 0 transposes the tile grid: 4 tiles across of 4 texels, 4 tiles down of 32.
    let h = RTile::for_shape(&[100, 60], [32, 16], Intra::Rows, 0, Storage::Image2d).unwrap();
    assert_eq!(h.image, Some([16, 128]));
    let wide = RTile::for_shape(
        &[3, 64, 256],
        [4, 256],
        Intra::Block { bh: 4, bw: 32 },
        2,
        Storage::Image2d,
    )
    .unwrap();
    // Footprint: 8 blocks of 4 rows stacked = 32 rows, 8 texels; 16 x 1 tiles per slice.
    assert_eq!(wide.footprint(), (32, 8));
    assert_eq!(wide.image, Some([8, 3 * 16 * 32]));
    assert!(RTile::for_shape(&[8], [4, 4], Intra::Rows, 0, Storage::Image2d).is_err());
}

/// Every element gets its own (texel, channel), inside the image: the mapping is injective.
fn assert_injective(l: &Layout, shape: &[u64]) {
    let [w, h] = l.image_extent(shape).unwrap();
    let numel: u64 = shape.iter().product();
    let mut seen = HashSet::new();
    let mut idx = vec![0u64; shape.len()];
    for _ in 0..numel {
        let t = l.texel_of(shape, &idx).unwrap_or_else(|| panic!("{l} {idx:?}"));
        assert!(t.x < w && t.y < h && t.c < 4, "{l}: {idx:?} -> {t:?} outside {w}x{h}");
        assert!(seen.insert(t), "{l}: {idx:?} shares {t:?}");
        for k in (0..shape.len()).rev() {
            idx[k] += 1;
            if idx[k] < shape[k] {
                break;
            }
            idx[k] = 0;
        }
    }
    let mut past = shape.to_vec();
    let last = past.len() - 1;
    past[last] = shape[last];
    assert_eq!(l.texel_of(shape, &past), None, "out-of-range index");
}

#[test]
fn physical_mapping_is_injective() {
    let shapes: [&[u64]; 3] = [&[8, 16], &[2, 12, 20], &[5, 7]];
    for shape in shapes {
        assert_injective(&Layout::Linear, shape);
        let r = shape.len() as u64;
        for tile in [[4, 4], [4, 8], [3, 12], [8, 16]] {
            let mut intras = vec![Intra::Rows];
            if tile[1] % 4 == 0 && tile[1] > 4 {
                intras.push(Intra::Block { bh: 1, bw: 4 });
            }
            if tile[0] % 2 == 0 {
                intras.push(Intra::Block { bh: 2, bw: tile[1] });
            }
            for intra in intras {
                for hz in [r - 2, r - 1] {
                    let t = RTile::for_shape(shape, tile, intra, hz, Storage::Image2d).unwrap();
                    assert_injective(&Layout::RTile(t), shape);
                }
            }
        }
    }
}

#[test]
fn fig8_tile_positions() {
    // Fig. 8(b): [Dim2 = 8, Dim1 = 16] in 4 x 4 tiles (one texel wide, four rows high).
    let shape = [8u64, 16];
    let w = RTile::for_shape(&shape, [4, 4], Intra::Rows, 1, Storage::Image2d).unwrap();
    let h = RTile::for_shape(&shape, [4, 4], Intra::Rows, 0, Storage::Image2d).unwrap();
    assert_eq!(w.image, Some([4, 8]));
    assert_eq!(h.image, Some([2, 16]));
    // Element (5, 6): tile (1, 1), row 1, column 2 of it.
    assert_eq!(w.texel_of(&shape, &[5, 6]), Some(Texel { x: 1, y: 5, c: 2 }));
    // Transposed grid: tile (a = 1, c = 1) sits at x = a, y = c * 4.
    assert_eq!(h.texel_of(&shape, &[5, 6]), Some(Texel { x: 1, y: 5, c: 2 }));
    // Tile (0, 3) — far right in the natural grid, bottom of the transposed one.
    assert_eq!(w.texel_of(&shape, &[0, 12]), Some(Texel { x: 3, y: 0, c: 0 }));
    assert_eq!(h.texel_of(&shape, &[0, 12]), Some(Texel { x: 0, y: 12, c: 0 }));
    // Tile (1, 0): below in the natural grid, to the right in the transposed one.
    assert_eq!(w.texel_of(&shape, &[4, 0]), Some(Texel { x: 0, y: 4, c: 0 }));
    assert_eq!(h.texel_of(&shape, &[4, 0]), Some(Texel { x: 1, y: 0, c: 0 }));
    assert_eq!(Matrix::of(&shape), Some(Matrix { batch: 1, h: 8, w: 16 }));
}

#[test]
fn block_intra_mapping() {
    // One 2 x 16 tile in blocks of 2 x 8: block (0, 1) is stacked under block (0, 0).
    let shape = [2u64, 16];
    let t = RTile::for_shape(&shape, [2, 16], Intra::Block { bh: 2, bw: 8 }, 1, Storage::Image2d)
        .unwrap();
    assert_eq!(t.footprint(), (4, 2));
    assert_eq!(t.texel_of(&shape, &[1, 5]), Some(Texel { x: 1, y: 1, c: 1 }));
    assert_eq!(t.texel_of(&shape, &[1, 13]), Some(Texel { x: 1, y: 3, c: 1 }));
}

#[test]
fn channel_packing_puts_four_channels_in_a_texel() {
    // NC4HW4: [N = 2, C = 6, H = 3, W = 5] in 3 x 4 tiles of texels; C = 6 makes two groups of
    // 4 channels (the second half padding), so 2·2 = 4 slices of 3 x 8 (padded) positions.
    let shape = [2u64, 6, 3, 5];
    let t =
        RTile::packed_for_shape(&shape, [3, 4], Intra::Rows, 3, Pack::C, Storage::Image2d).unwrap();
    assert_eq!(t.pad, [0, 3]);
    assert_eq!(t.footprint(), (3, 4), "a position is a whole texel: 4 texels across");
    assert_eq!(t.slices(&shape), Some(Matrix { batch: 4, h: 3, w: 5 }));
    assert_eq!(t.image, Some([8, 12]), "2 tiles of 4 texels across, 4 slices of 3 rows");
    // [1, 5, 2, 4]: slice 1·2 + 5/4 = 3, channel 5 mod 4 = 1; tile (0, 1), row 2, column 0.
    assert_eq!(t.texel_of(&shape, &[1, 5, 2, 4]), Some(Texel { x: 4, y: 11, c: 1 }));
    // Its neighbour along C shares the texel: channels 4 and 5 are one read.
    assert_eq!(t.texel_of(&shape, &[1, 4, 2, 4]), Some(Texel { x: 4, y: 11, c: 0 }));
    assert_eq!(t.texel_of(&shape, &[0, 3, 0, 0]), Some(Texel { x: 0, y: 0, c: 3 }));
    assert_eq!(t.texel_of(&shape, &[0, 6, 0, 0]), None, "C is 6");
    // The tile grid transposed (horizontal = H): tile (a, c) at x = a·4, y = (b·2 + c)·3.
    let h =
        RTile::packed_for_shape(&shape, [3, 4], Intra::Rows, 2, Pack::C, Storage::Image2d).unwrap();
    assert_eq!(h.image, Some([4, 24]));
    assert_eq!(h.texel_of(&shape, &[1, 5, 2, 4]), Some(Texel { x: 0, y: 23, c: 1 }));
    // Blocks stack `bw` texels wide, as with "w" but counted in texels.
    let b = RTile::packed_for_shape(
        &[1, 4, 2, 8],
        [2, 8],
        Intra::Block { bh: 2, bw: 4 },
        3,
        Pack::C,
        Storage::Image2d,
    )
    .unwrap();
    assert_eq!(b.footprint(), (4, 4));
    assert_eq!(b.texel_of(&[1, 4, 2, 8], &[0, 2, 1, 6]), Some(Texel { x: 2, y: 3, c: 2 }));
    for l in [t, h, b] {
        let s: &[u64] = if l == b { &[1, 4, 2, 8] } else { &shape };
        assert_injective(&Layout::RTile(l), s);
    }
    // The attribute reads and prints `pack = "c"`.
    let a = assign_attr(
        &["tensor<2x6x3x5xf32>"],
        "layout.assign %a0 {layout = #layout.rtile<tile = [3, 4], horizontal = 3, pack = \"c\", pad = [0, 3]>}",
    );
    let r = RTile::from_attr(&a).unwrap();
    assert_eq!(r.pack, Pack::C);
    assert_eq!(
        r.to_attr().to_string(),
        "#layout.rtile<tile = [3, 4], intra = \"rows\", inter = \"row-major\", horizontal = 3, \
         pack = \"c\", pad = [0, 3], storage = \"image2d\">"
    );
}

// ----- layout.assign -----

#[test]
fn assign_infers_its_operand_type() {
    assert_eq!(infer(&[T816], "layout.assign %a0 {layout = #layout.linear}"), T816);
    assert_eq!(
        infer(
            &["tensor<2x8x16xf16>"],
            "layout.assign %a0 {layout = #layout.rtile<tile = [4, 8], horizontal = 1, pad = [0, 0]>}"
        ),
        "tensor<2x8x16xf16>"
    );
    assert_eq!(
        infer(
            &["tensor<10x16xf32>"],
            "layout.assign %a0 {layout = #layout.rtile<tile = [4, 16], horizontal = 0, pad = [2, 0], image = [12, 4]>}"
        ),
        "tensor<10x16xf32>"
    );
}

#[test]
fn assign_operand_and_attribute_kind() {
    assert_err(
        &["f32"],
        "layout.assign %a0 {layout = #layout.linear}",
        "expected a tensor, found f32 — operand 0 (`x`) of layout.assign",
        "operand 0 of layout.assign",
    );
    assign_err(
        &[T816],
        "3",
        "expected a layout attribute (#layout.linear or #layout.rtile<...>), found integer `3`",
    );
    assign_err(
        &[T816],
        "#foo.rtile<tile = [4, 4]>",
        "expected a layout attribute (#layout.linear or #layout.rtile<...>), found `#foo.rtile<tile = [4, 4]>`",
    );
    assign_err(&[T816], "#layout.linear<x = 1>", "#layout.linear takes no parameters, found 1");
}

/// The one error of `op` on `args`, written with and without its signature: a missing required
/// attribute is reported by the generic verifier on both paths.
fn missing_attr(args: &[&str], op: &str, msg: &str, note: &str) {
    for sig in ["", " : (tensor<8x16xf32>) -> tensor<8x16xf32>"] {
        let d = only_error(&module_text(args, &format!("%r0 = {op}{sig}")));
        assert_eq!(d.message, msg, "{op}{sig}");
        assert_eq!(d.notes, [note], "{op}{sig}");
    }
}

#[test]
fn assign_missing_layout() {
    missing_attr(
        &[T816],
        "layout.assign %a0",
        "`layout.assign` requires attribute `layout`",
        "`layout` is any attribute: #layout.linear or #layout.rtile<...>",
    );
}

#[test]
fn rtile_parameter_rules() {
    let keys = "tile, intra, block, inter, horizontal, pack, pad, image, storage";
    let cases: &[(&str, String)] = &[
        (
            "#layout.rtile<[4, 4]>",
            format!("parameter 0 of #layout.rtile has no key; write `key = value` (keys: {keys})"),
        ),
        (
            "#layout.rtile<tile = [4, 4], horizontal = 1, colour = \"red\">",
            format!("unknown parameter `colour` of #layout.rtile; its parameters: {keys}"),
        ),
        (
            "#layout.rtile<tile = [4, 4], horizontal = 1, tile = [8, 8]>",
            "parameter `tile` of #layout.rtile is given twice".into(),
        ),
        ("#layout.rtile<horizontal = 1>", "#layout.rtile requires `tile = [tile_h, tile_w]`".into()),
        (
            "#layout.rtile<tile = [0, 4], horizontal = 1>",
            "`tile` of #layout.rtile must be [tile_h, tile_w], two integers in 1..=65536, found `[0, 4]`"
                .into(),
        ),
        (
            "#layout.rtile<tile = [4], horizontal = 1>",
            "`tile` of #layout.rtile must be [tile_h, tile_w], two integers in 1..=65536, found `[4]`"
                .into(),
        ),
        (
            "#layout.rtile<tile = [4, 131072], horizontal = 1>",
            "`tile` of #layout.rtile must be [tile_h, tile_w], two integers in 1..=65536, found `[4, 131072]`"
                .into(),
        ),
        (
            "#layout.rtile<tile = [4, 4]>",
            "#layout.rtile requires `horizontal = AXIS`, the axis whose tiles run along the image width"
                .into(),
        ),
        (
            "#layout.rtile<tile = [4, 4], horizontal = -1>",
            "`horizontal` of #layout.rtile must be a tensor axis (an integer ≥ 0), found `-1`".into(),
        ),
        (
            "#layout.rtile<tile = [4, 4], horizontal = 1, intra = \"cols\">",
            "`intra` of #layout.rtile must be \"rows\" or \"block\", found `\"cols\"`".into(),
        ),
        (
            "#layout.rtile<tile = [4, 4], horizontal = 1, block = [2, 2]>",
            "`block` of #layout.rtile is only allowed with intra = \"block\"".into(),
        ),
        (
            "#layout.rtile<tile = [4, 4], horizontal = 1, intra = \"block\">",
            "intra = \"block\" of #layout.rtile requires `block = [bh, bw]`".into(),
        ),
        (
            "#layout.rtile<tile = [4, 8], horizontal = 1, intra = \"block\", block = [3, 4]>",
            "`block` [3, 4] of #layout.rtile must divide `tile` [4, 8]".into(),
        ),
        (
            "#layout.rtile<tile = [4, 4], horizontal = 1, inter = \"col-major\">",
            "`inter` of #layout.rtile must be \"row-major\", found `\"col-major\"`".into(),
        ),
        (
            "#layout.rtile<tile = [4, 4], horizontal = 1, pack = \"h\">",
            "`pack` of #layout.rtile must be \"w\" or \"c\", found `\"h\"`".into(),
        ),
        (
            "#layout.rtile<tile = [4, 4], horizontal = 1, pad = [4, 0]>",
            "`pad` [4, 0] of #layout.rtile must be less than `tile` [4, 4] in each dimension".into(),
        ),
        (
            "#layout.rtile<tile = [4, 4], horizontal = 1, image = [0, 8]>",
            "`image` of #layout.rtile must be [width, height] in texels, two integers in \
             1..=9223372036854775807, found `[0, 8]`"
                .into(),
        ),
        (
            "#layout.rtile<tile = [4, 4], horizontal = 1, storage = \"texture\">",
            "`storage` of #layout.rtile must be \"image2d\" or \"buffer\", found `\"texture\"`".into(),
        ),
    ];
    for (attr, msg) in cases {
        assign_err(&[T816], attr, msg);
    }
}

#[test]
fn rtile_type_rules() {
    let d = assert_err(
        &["tensor<16xf32>"],
        "layout.assign %a0 {layout = #layout.rtile<tile = [4, 4], horizontal = 0>}",
        "#layout.rtile needs a tensor of rank ≥ 2, found tensor<16xf32> — `layout` of layout.assign",
        "attribute `layout` of layout.assign",
    );
    assert_eq!(d.notes, ["operand 0 (`x`) is tensor<16xf32>"]);
    assign_err(
        &["tensor<2x8x16xf32>"],
        "#layout.rtile<tile = [4, 4], horizontal = 0>",
        "`horizontal` of #layout.rtile must be axis 1 or 2 (the tiled axes of tensor<2x8x16xf32>), found 0",
    );
    assign_err(
        &["tensor<10x16xf32>"],
        "#layout.rtile<tile = [4, 4], horizontal = 1>",
        "`pad` of #layout.rtile must be [2, 0] for tensor<10x16xf32> with tile [4, 4], found [0, 0]",
    );
    assign_err(
        &[T816],
        "#layout.rtile<tile = [4, 4], horizontal = 0, image = [4, 8]>",
        "`image` of #layout.rtile must be [2, 16] (width, height in texels) for tensor<8x16xf32>, found [4, 8]",
    );
    assign_err(
        &[T816],
        "#layout.rtile<tile = [4, 4], horizontal = 1, pack = \"c\">",
        "#layout.rtile with pack = \"c\" packs axis rank-3 and needs a tensor of rank ≥ 3, found tensor<8x16xf32>",
    );
    // With channel packing the image counts groups of 4 along axis rank-3: 2 x 6 x 8 x 16 is
    // 2·2 slices of 8 rows, 16 texels across.
    assign_err(
        &["tensor<2x6x8x16xf32>"],
        "#layout.rtile<tile = [4, 4], horizontal = 3, pack = \"c\", image = [4, 64]>",
        "`image` of #layout.rtile must be [16, 32] (width, height in texels) for tensor<2x6x8x16xf32>, found [4, 64]",
    );
}

// ----- layout.convert -----

#[test]
fn convert() {
    assert_eq!(
        infer(
            &[T816],
            "layout.convert %a0 {from = #layout.linear, to = #layout.rtile<tile = [4, 4], horizontal = 0>}"
        ),
        T816
    );
    assert_err(
        &[T816],
        "layout.convert %a0 {from = #layout.linear, to = #layout.rtile<tile = [4, 4], horizontal = 2>}",
        "`horizontal` of #layout.rtile must be axis 0 or 1 (the tiled axes of tensor<8x16xf32>), \
         found 2 — `to` of layout.convert",
        "attribute `to` of layout.convert",
    );
    assert_err(
        &[T816],
        "layout.convert %a0 {from = \"linear\", to = #layout.linear}",
        "expected a layout attribute (#layout.linear or #layout.rtile<...>), found string \
         `\"linear\"` — `from` of layout.convert",
        "attribute `from` of layout.convert",
    );
    missing_attr(
        &[T816],
        "layout.convert %a0 {from = #layout.linear}",
        "`layout.convert` requires attribute `to`",
        "`to` is any attribute: the layout of the result",
    );
}

// ----- layout.remap -----

#[test]
fn remap_infers_the_shape() {
    // A transpose and a reshape written as index maps.
    assert_eq!(
        infer(&[T816], "layout.remap %a0 {map = (d0, d1) -> (d1, d0), shape = [16, 8]}"),
        "tensor<16x8xf32>"
    );
    assert_eq!(
        infer(
            &[T816],
            "layout.remap %a0 {map = (d0, d1, d2) -> (d0 * 4 + d1, d2), shape = [2, 4, 16]}"
        ),
        "tensor<2x4x16xf32>"
    );
    assert_eq!(
        infer(
            &[T816],
            "layout.remap %a0 {map = (d0) -> (d0 floordiv 16, d0 mod 16), shape = [128]}"
        ),
        "tensor<128xf32>"
    );
    // An empty result reads nothing, so no corner is checked.
    assert_eq!(
        infer(&[T816], "layout.remap %a0 {map = (d0) -> (d0 + 100, 0), shape = [0]}"),
        "tensor<0xf32>"
    );
}

#[test]
fn remap_rules() {
    let place = "attribute `map` of layout.remap";
    assert_err(
        &[T816],
        "layout.remap %a0 {map = [1, 0], shape = [16, 8]}",
        "`map` must be an index map such as (d0, d1) -> (d1, d0), found array `[1, 0]`",
        place,
    );
    assert_err(
        &[T816],
        "layout.remap %a0 {map = (d0, d1)[s0] -> (d1, d0), shape = [16, 8]}",
        "expected an index map without symbols, found 1 — `map` of layout.remap",
        place,
    );
    let d = assert_err(
        &[T816],
        "layout.remap %a0 {map = (d0, d1, d2) -> (d1, d0), shape = [16, 8]}",
        "expected 2 dimensions (the rank of `shape`), found 3 — `map` of layout.remap",
        place,
    );
    assert_eq!(d.notes, ["`shape` is [16, 8]"]);
    let d = assert_err(
        &[T816],
        "layout.remap %a0 {map = (d0, d1) -> (d1), shape = [16, 8]}",
        "expected 2 results (the rank of `x`), found 1 — `map` of layout.remap",
        place,
    );
    assert_eq!(d.notes, ["operand 0 (`x`) is tensor<8x16xf32>"]);
    assert_err(
        &[T816],
        "layout.remap %a0 {map = (d0, d1) -> (d0, d1), shape = [16, 8]}",
        "the index map sends [8, 0] to [8, 0], outside tensor<8x16xf32> — `map` of layout.remap",
        place,
    );
    // Out of range only inside the box (every corner is in range): the witness is exact.
    assert_err(
        &["tensor<8x8xf32>"],
        "layout.remap %a0 {map = (d0, d1) -> (d0 * (7 - d0) * 100000000, d1), shape = [8, 8]}",
        "the index map sends [1, 0] to [600000000, 0], outside tensor<8x8xf32> — `map` of layout.remap",
        place,
    );
    assert_err(
        &["tensor<8x8xf32>"],
        "layout.remap %a0 {map = (d0, d1) -> ((d0 * 5) mod 11, d1), shape = [8, 8]}",
        "the index map sends [2, 0] to [10, 0], outside tensor<8x8xf32> — `map` of layout.remap",
        place,
    );
    // In range though not monotonic: d0 * (7 - d0) <= 12.
    assert_eq!(
        infer(&["tensor<13xf32>"], "layout.remap %a0 {map = (d0) -> (d0 * (7 - d0)), shape = [8]}"),
        "tensor<8xf32>"
    );
    assert_err(
        &[T816],
        "layout.remap %a0 {map = (d0, d1) -> (d1 mod 0, d0), shape = [16, 8]}",
        "the index map is undefined at [0, 0] (a division by a non-positive number, or an \
         overflow) — `map` of layout.remap",
        place,
    );
    assert_err(
        &[T816],
        "layout.remap %a0 {map = (d0, d1) -> (d1, d0), shape = [16, -8]}",
        "expected a non-negative dimension, found -8 — element 1 of `shape` of layout.remap",
        "attribute `shape` of layout.remap",
    );
    assert_err(
        &["tensor<2xf32>"],
        "layout.remap %a0 {map = (d0, d1, d2) -> (0), shape = [4294967296, 4294967296, 2]}",
        "the result tensor<4294967296x4294967296x2xf32> of layout.remap has more elements than \
         fit in 64 bits",
        "attribute `shape` of layout.remap",
    );
    missing_attr(
        &[T816],
        "layout.remap %a0 {shape = [16, 8]}",
        "`layout.remap` requires attribute `map`",
        "`map` is any attribute: (d0, ..) -> (e0, ..): result index to source index",
    );
}

#[test]
fn remap_source_index_evaluates_the_map() {
    let a = op_attr(
        &[T816],
        "layout.remap %a0 {map = (d0, d1, d2) -> (d0 * 4 + d1, d2 floordiv 2 + d2 mod 2), shape = [2, 4, 16]}",
        "map",
    );
    let Attr::Map(map) = a else { panic!("{a}") };
    assert_eq!(remap_source_index(&map, &[1, 3, 5]), Some(vec![7, 3]));
    assert_eq!(remap_source_index(&map, &[0, 0, 0]), Some(vec![0, 0]));
    // Negative indices evaluate with floor semantics; range checks are the caller's.
    assert_eq!(remap_source_index(&map, &[0, 0, -3]), Some(vec![0, -1]));
    assert_eq!(remap_source_index(&map, &[1, 3]), None, "arity");
    let Attr::Map(bad) =
        op_attr(&[T816], "layout.remap %a0 {map = (d0, d1) -> (d1, d0), shape = [16, 8]}", "map")
    else {
        panic!()
    };
    assert_eq!(remap_source_index(&bad, &[i64::MAX, 0]), Some(vec![0, i64::MAX]));
}

// ----- the registry -----

#[test]
fn layout_ops_are_registered_and_documented() {
    let reg = fbc_dialects::registry();
    let expected = [
        ("layout.assign", None),
        ("layout.convert", Some(FbClass::FtiD)),
        ("layout.remap", Some(FbClass::FtiD)),
    ];
    for (name, class) in expected {
        let def = reg.get(name).unwrap_or_else(|| panic!("{name} is not registered"));
        assert_eq!(def.class, class, "class of {name}");
        assert!(def.traits.pure && !def.traits.elementwise && !def.traits.terminator, "{name}");
        assert!(!def.summary.is_empty() && !def.summary.contains('\n'), "summary of {name}");
        assert!(def.doc.contains("**Verifier:**"), "doc of {name} lists its rules");
        assert!(def.doc.contains("**FBLayout class:**"), "doc of {name} justifies its class");
        if let Some(c) = class {
            assert!(def.doc.contains(c.name()), "doc of {name} names {c}");
        }
        for a in def.attrs {
            assert!(
                def.doc.contains(&format!("`{}`", a.name)),
                "doc of {name} mentions {}",
                a.name
            );
        }
    }
    assert_eq!(fbc_dialects::layout::ops().count(), expected.len());
    assert!(reg.dialects().contains(&"layout"));
}

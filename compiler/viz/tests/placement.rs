//! Placement views of small tensors: hand-worked texel positions, Eq. 1 counts, and exact SVG
//! snapshots (the output is deterministic).

use fbc_dialects::layout::{Intra, Layout, Matrix, RTile, Storage};
use fbc_viz::placement::{blocks_spanned, window, Window};
use fbc_viz::{placement_svg, Placement};

fn rtile(shape: &[u64], tile: [u64; 2], intra: Intra, horizontal: u64) -> Layout {
    Layout::RTile(RTile::for_shape(shape, tile, intra, horizontal, Storage::Image2d).unwrap())
}

fn svg(shape: &[u64], layout: &Layout, max_side: u64) -> String {
    placement_svg(&Placement { name: "%t", shape, layout, cache_block: [4, 8], max_side }).unwrap()
}

/// Fig. 8(b) of the paper: an [8, 16] tensor in 4 x 4 tiles, the tile grid along w (left panel)
/// and transposed so that h runs along the width (right panel).
#[test]
fn figure_8_tiles_land_where_the_paper_puts_them() {
    let shape = [8, 16];
    let along_w = rtile(&shape, [4, 4], Intra::Rows, 1);
    let along_h = rtile(&shape, [4, 4], Intra::Rows, 0);
    // Row 5, columns 4..=7: row 1 of tile (1, 1). Grid 2 x 4 tiles of 4 x 1 texels. Along w
    // the tile's origin is (x = 1, y = 4): the run fills texel (1, 5), channels r to a.
    let s = svg(&shape, &along_w, 64);
    assert!(
        s.contains("<title>[5, 4..=7]: texels (1, 5) channel r to (1, 5) channel a</title>"),
        "{s}"
    );
    // Along h, tile (a, c) starts at x = a, y = c·4: row 2, columns 12..=15 (tile (0, 3))
    // fill texel (0, 14).
    let s = svg(&shape, &along_h, 64);
    assert!(
        s.contains("<title>[2, 12..=15]: texels (0, 14) channel r to (0, 14) channel a</title>"),
        "{s}"
    );
    // Every row of every tile is one run: 8 rows x 4 tiles.
    assert_eq!(s.matches("]: texels (").count(), 32);
    assert!(s.contains("image 2 x 16 texels"), "{s}");
    let s = svg(&shape, &along_w, 64);
    assert!(s.contains("image 4 x 8 texels"), "{s}");
}

#[test]
fn linear_rows_fill_texel_rows() {
    let s = svg(&[3, 10], &Layout::Linear, 64);
    // A row is one run: 10 elements from texel (0, 2) channel r to texel (2, 2) channel g (the
    // last texel of a row partly empty).
    assert!(
        s.contains("<title>[2, 0..=9]: texels (0, 2) channel r to (2, 2) channel g</title>"),
        "{s}"
    );
    assert!(s.contains("image 3 x 3 texels"), "{s}");
}

#[test]
fn padding_is_drawn_but_maps_nowhere() {
    // [6, 6] in 4 x 4 tiles: padded to 8 x 8.
    let l = rtile(&[6, 6], [4, 4], Intra::Rows, 1);
    let s = svg(&[6, 6], &l, 64);
    // Rows 0-5 end in two padding columns; rows 6 and 7 are padding throughout.
    assert!(s.contains("<title>[0, 6..=7] padding</title>"), "{s}");
    assert!(s.contains("<title>[7, 0..=7] padding</title>"), "{s}");
    assert!(
        s.contains("<title>[5, 4..=5]: texels (1, 5) channel r to (1, 5) channel g</title>"),
        "{s}"
    );
    assert_eq!(s.matches("padding</title>").count(), 6 + 2);
}

#[test]
fn windows_keep_whole_tiles() {
    let m = Matrix::of(&[512, 2048]).unwrap();
    let l = rtile(&[512, 2048], [4, 128], Intra::Block { bh: 4, bw: 32 }, 0);
    // 16 tiles of 4 rows fit in 64; a 128-wide tile does not: the window cuts it at 64.
    assert_eq!(window(m, &l, 64), Window { rows: 64, cols: 64 });
    let l = rtile(&[512, 2048], [12, 20], Intra::Rows, 1);
    assert_eq!(window(m, &l, 64), Window { rows: 60, cols: 60 });
    assert_eq!(
        window(Matrix::of(&[3, 10]).unwrap(), &Layout::Linear, 64),
        Window { rows: 3, cols: 10 }
    );
}

#[test]
fn eq_1_counts_the_blocks_a_rectangle_spans_where_it_is() {
    // A 4 x 8-texel footprint aligned to 4 x 8 blocks: one block; shifted by one texel: four.
    assert_eq!(blocks_spanned(0, 0, 8, 4, [4, 8]), 1);
    assert_eq!(blocks_spanned(1, 1, 8, 4, [4, 8]), 4);
    // 16 rows x 1 texel: four blocks down.
    assert_eq!(blocks_spanned(0, 0, 1, 16, [4, 8]), 4);
    assert_eq!(blocks_spanned(0, 0, 0, 16, [4, 8]), 0);
}

#[test]
fn a_layout_that_does_not_fit_is_an_error() {
    let l = rtile(&[8, 16], [4, 4], Intra::Rows, 1);
    let r = placement_svg(&Placement {
        name: "%t",
        shape: &[8],
        layout: &l,
        cache_block: [4, 8],
        max_side: 64,
    });
    let e = r.unwrap_err();
    assert!(e.contains("rank"), "{e}");
}

#[test]
fn snapshot_of_figure_8_along_h() {
    insta::assert_snapshot!(svg(&[8, 16], &rtile(&[8, 16], [4, 4], Intra::Rows, 0), 64));
}

#[test]
fn snapshot_of_blocked_tiles() {
    let shape = [8, 64];
    insta::assert_snapshot!(svg(
        &shape,
        &rtile(&shape, [4, 64], Intra::Block { bh: 4, bw: 32 }, 1),
        64
    ));
}

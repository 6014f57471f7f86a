//! One tensor's placement: its logical `[H, W]` grid cut into tiles, and where each element lands
//! in the image2d texel array (texel `x, y`, RGBA channel), with the texture-cache blocks of
//! FBLayout Eq. 1 drawn over the texels.
//!
//! The view shows batch slice 0 and, of a large tensor, a window of whole tiles at the top left
//! (at most `max_side` elements along each side, at least one tile): the layout repeats tile by
//! tile, and a picture of every element of a 4096 × 4096 tensor shows nothing. The window, the
//! image's full extent and the batch count are written in the caption.
//!
//! Colours are per tile for an R-Tile (tile `(a, c)` gets colour `a·gw + c`), per row for
//! `#layout.linear` (a row fills consecutive texels of one image row), odd blocks of a blocked
//! tile lighter; padding cells of a tiled layout are grey. Every element cell of the logical grid has a `<title>` naming its texel and
//! channel, so a browser shows the mapping on hover.

use fbc_dialects::layout::attr::CHANNELS;
use fbc_dialects::layout::{Intra, Layout, Matrix};
use fbc_ir::{ElemType, TensorType};

use crate::svg::{Svg, PALETTE};

/// What to draw.
#[derive(Debug, Clone)]
pub struct Placement<'a> {
    /// The tensor's name (its SSA name).
    pub name: &'a str,
    pub shape: &'a [u64],
    pub layout: &'a Layout,
    /// The texture-cache block `[C_h, C_w]` in texels (the hardware profile's `block_h`,
    /// `block_w`).
    pub cache_block: [u64; 2],
    /// Most elements drawn along each side of the window.
    pub max_side: u64,
}

/// The window of the logical grid the view draws: `rows × cols` elements from `(0, 0)`,
/// padding included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub rows: u64,
    pub cols: u64,
}

/// The window: whole tiles while they fit in `max_side`, else `max_side` (a tile larger than
/// the window is cut).
pub fn window(m: Matrix, layout: &Layout, max_side: u64) -> Window {
    let max_side = max_side.max(1);
    match layout {
        Layout::Linear => Window { rows: m.h.min(max_side), cols: m.w.min(max_side) },
        Layout::RTile(r) => {
            let side = |extent: u64, pad: u64, t: u64| {
                let whole = if t <= max_side { max_side / t * t } else { max_side };
                (extent + pad).min(whole)
            };
            Window { rows: side(m.h, r.pad[0], r.tile[0]), cols: side(m.w, r.pad[1], r.tile[1]) }
        }
    }
}

/// Texel `(x, y)` and channel of element `(i, j)` of batch slice 0, `None` for padding.
fn texel(p: &Placement<'_>, i: u64, j: u64) -> Option<(u64, u64, u64)> {
    let r = p.shape.len();
    let mut idx = vec![0u64; r];
    match r {
        0 => {}
        1 => idx[0] = j,
        _ => {
            idx[r - 2] = i;
            idx[r - 1] = j;
        }
    }
    let t = p.layout.texel_of(p.shape, &idx)?;
    Some((t.x, t.y, t.c))
}

/// Cells of odd-numbered blocks of a blocked tile are drawn lighter, so that the blocks show
/// in both panels (they are stacked in one column of the footprint).
fn shade(layout: &Layout, i: u64, j: u64) -> &'static str {
    match layout {
        Layout::RTile(r) => match r.intra {
            Intra::Block { bh, bw } => {
                let (ri, cj) = (i % r.tile[0].max(1), j % r.tile[1].max(1));
                let block = (ri / bh.max(1)) * (r.tile[1] / bw.max(1)) + cj / bw.max(1);
                if block % 2 == 1 {
                    r#" fill-opacity="0.55""#
                } else {
                    ""
                }
            }
            Intra::Rows => "",
        },
        Layout::Linear => "",
    }
}

/// The colour group of element `(i, j)`: its tile (R-Tile) or its row (linear).
fn group(layout: &Layout, m: Matrix, i: u64, j: u64) -> usize {
    match layout {
        Layout::Linear => i as usize,
        Layout::RTile(r) => {
            let gw = (m.w + r.pad[1]) / r.tile[1].max(1);
            ((i / r.tile[0].max(1)) * gw + j / r.tile[1].max(1)) as usize
        }
    }
}

/// A layout in a few words (`R-Tile 4x64, intra blocks 4x32, horizontal axis 2, image2d`).
pub fn short_layout(layout: &Layout) -> String {
    match layout {
        Layout::Linear => "linear".into(),
        Layout::RTile(r) => {
            let intra = match r.intra {
                Intra::Rows => "rows".to_string(),
                Intra::Block { bh, bw } => format!("blocks {bh}x{bw}"),
            };
            format!(
                "R-Tile {}x{}, intra {intra}, horizontal axis {}, {}",
                r.tile[0],
                r.tile[1],
                r.horizontal,
                r.storage.name()
            )
        }
    }
}

/// Cache blocks of `[C_h, C_w]` texels that the texel rectangle `x0..x0+w, y0..y0+h` spans at
/// its position (what the performance model counts as Eq. 1 for a tile).
pub fn blocks_spanned(x0: u64, y0: u64, w: u64, h: u64, [ch, cw]: [u64; 2]) -> u64 {
    if w == 0 || h == 0 {
        return 0;
    }
    let (ch, cw) = (ch.max(1), cw.max(1));
    let across = (x0 + w - 1) / cw - x0 / cw + 1;
    let down = (y0 + h - 1) / ch - y0 / ch + 1;
    across * down
}

/// The class of colour group `k` (`.c0` .. `.c11` in the style sheet: shorter than a fill per
/// cell, which matters at thousands of cells).
fn fill_class(k: usize) -> String {
    format!(r#"class="c{}""#, k % PALETTE.len())
}

fn channel(c: u64) -> char {
    ['r', 'g', 'b', 'a'][(c % CHANNELS) as usize]
}

fn style() -> String {
    let fills: String =
        PALETTE.iter().enumerate().map(|(k, c)| format!(".c{k}{{fill:{c}}}")).collect();
    format!("{STYLE}{fills}")
}

const STYLE: &str = ".grid{fill:none;stroke:#333;stroke-width:0.3}\
.pad{fill:#d9d9d9}\
.tileedge{fill:none;stroke:#000;stroke-width:1.2}\
.cache{fill:none;stroke:#c00;stroke-width:1;stroke-dasharray:4 2}\
.cap{font-size:12px}.small{font-size:10px;fill:#444}";

/// The placement view as a standalone SVG document; `Err` when the layout does not fit the
/// shape.
pub fn placement_svg(p: &Placement<'_>) -> Result<String, String> {
    let m = Matrix::of(p.shape).ok_or("the tensor's shape overflows")?;
    p.layout
        .check_type(&TensorType::new(p.shape.to_vec(), ElemType::F32))
        .map_err(|e| e.to_string())?;
    let extent =
        p.layout.image_extent(p.shape).ok_or("the layout does not fit the tensor's shape")?;
    let win = window(m, p.layout, p.max_side);
    let biggest = win.rows.max(win.cols).max(1);
    let s = (480 / biggest).clamp(4, 16) as f64;
    // Texels the window's elements occupy (batch slice 0).
    let mut cells = Vec::new();
    let (mut img_w, mut img_h) = (0u64, 0u64);
    for i in 0..win.rows {
        for j in 0..win.cols {
            let t = if i < m.h && j < m.w { texel(p, i, j) } else { None };
            if let Some((x, y, _)) = t {
                img_w = img_w.max(x + 1);
                img_h = img_h.max(y + 1);
            }
            cells.push((i, j, t));
        }
    }
    let (left, top) = (20.0, 76.0);
    let logical_w = win.cols as f64 * s;
    let logical_h = win.rows as f64 * s;
    let img_x = left + logical_w + 60.0;
    let texel_w = s * CHANNELS as f64;
    let width = img_x + img_w as f64 * texel_w + 20.0;
    let height = top + logical_h.max(img_h as f64 * s) + 64.0;
    let mut svg = Svg::new(width.max(520.0), height);
    let shape_text = p.shape.iter().map(u64::to_string).collect::<Vec<_>>().join("x");
    svg.text(
        left,
        18.0,
        r#"class="cap" font-weight="bold""#,
        &format!("{} : {shape_text}", p.name),
    );
    svg.text(left, 34.0, r#"class="cap""#, &short_layout(p.layout));
    let mut cap = format!(
        "image {} x {} texels; drawn: elements [0, {}) x [0, {}) of {} x {}",
        extent[0], extent[1], win.rows, win.cols, m.h, m.w
    );
    if m.batch > 1 {
        cap.push_str(&format!(", batch slice 0 of {}", m.batch));
    }
    svg.text(left, 50.0, r#"class="small""#, &cap);
    svg.text(left, top - 4.0, r#"class="small""#, "logical [row, col]");
    svg.text(img_x, top - 4.0, r#"class="small""#, "image2d texels (x, y), RGBA channels");
    // The logical grid, a rectangle per run of a row whose elements share a fill and sit in
    // consecutive channels of one texel row (a tile's row, a block's row, a linear row):
    // thousands of cells would make pages of megabytes, runs keep every position readable.
    let mut k = 0;
    while k < cells.len() {
        let (i, j0, t0) = cells[k];
        let fill_of = |j: u64, t: Option<(u64, u64, u64)>| {
            t.map(|_| fill_class(group(p.layout, m, i, j)) + shade(p.layout, i, j))
        };
        let fill = fill_of(j0, t0);
        let mut end = k + 1;
        while end < cells.len() {
            let (ni, nj, nt) = cells[end];
            let (_, pj, pt) = cells[end - 1];
            let next = match (pt, nt) {
                (Some((px, py, pc)), Some((x, y, c))) => y == py && x * 4 + c == px * 4 + pc + 1,
                (None, None) => true,
                _ => false,
            };
            if ni != i || nj != pj + 1 || !next || fill_of(nj, nt) != fill {
                break;
            }
            end += 1;
        }
        let (_, j1, t1) = cells[end - 1];
        let cols = if j1 == j0 { format!("{j0}") } else { format!("{j0}..={j1}") };
        let (x, y, w) = (left + j0 as f64 * s, top + i as f64 * s, (j1 - j0 + 1) as f64 * s);
        match (fill, t0, t1) {
            (Some(fill), Some((x0, y0, c0)), Some((x1, _, c1))) => {
                let title = if end - k == 1 {
                    format!("[{i}, {cols}]: texel ({x0}, {y0}) channel {}", channel(c0))
                } else {
                    format!(
                        "[{i}, {cols}]: texels ({x0}, {y0}) channel {} to ({x1}, {y0}) channel {}",
                        channel(c0),
                        channel(c1)
                    )
                };
                svg.rect(x, y, w, s, &fill, Some(&title));
            }
            _ => svg.rect(x, y, w, s, r#"class="pad""#, Some(&format!("[{i}, {cols}] padding"))),
        }
        k = end;
    }
    svg.rect(left, top, logical_w, logical_h, r#"class="grid""#, None);
    if let Layout::RTile(r) = p.layout {
        let mut a = 0;
        while a < win.rows {
            let mut c = 0;
            while c < win.cols {
                let h = r.tile[0].min(win.rows - a) as f64 * s;
                let w = r.tile[1].min(win.cols - c) as f64 * s;
                svg.rect(
                    left + c as f64 * s,
                    top + a as f64 * s,
                    w,
                    h,
                    r#"class="tileedge""#,
                    None,
                );
                c += r.tile[1].max(1);
            }
            a += r.tile[0].max(1);
        }
    }
    // The texels: runs of consecutive channels of one texel row with one fill.
    let mut placed: Vec<(u64, u64, String)> = cells
        .iter()
        .filter_map(|&(i, j, t)| {
            let (tx, ty, c) = t?;
            Some((
                ty,
                tx * CHANNELS + c,
                fill_class(group(p.layout, m, i, j)) + shade(p.layout, i, j),
            ))
        })
        .collect();
    placed.sort();
    let mut k = 0;
    while k < placed.len() {
        let (y, at, fill) = &placed[k];
        let mut end = k + 1;
        while end < placed.len()
            && placed[end].0 == *y
            && placed[end].1 == placed[end - 1].1 + 1
            && placed[end].2 == *fill
        {
            end += 1;
        }
        let w = (end - k) as f64 * s;
        svg.rect(img_x + *at as f64 * s, top + *y as f64 * s, w, s, fill, None);
        k = end;
    }
    // Texel edges: a line per texel column and row, not a rectangle per texel.
    let (img_r, img_b) = (img_x + img_w as f64 * texel_w, top + img_h as f64 * s);
    for x in 0..=img_w {
        let at = img_x + x as f64 * texel_w;
        svg.line(at, top, at, img_b, r#"class="grid""#);
    }
    for y in 0..=img_h {
        let at = top + y as f64 * s;
        svg.line(img_x, at, img_r, at, r#"class="grid""#);
    }
    // Texture-cache blocks over the drawn texels.
    let [ch, cw] = [p.cache_block[0].max(1), p.cache_block[1].max(1)];
    let mut by = 0;
    while by < img_h {
        let mut bx = 0;
        while bx < img_w {
            let w = cw.min(img_w - bx) as f64 * texel_w;
            let h = ch.min(img_h - by) as f64 * s;
            svg.rect(
                img_x + bx as f64 * texel_w,
                top + by as f64 * s,
                w,
                h,
                r#"class="cache""#,
                None,
            );
            bx += cw;
        }
        by += ch;
    }
    let foot = match p.layout {
        Layout::RTile(r) => {
            let (fh, fw) = r.footprint();
            let (x0, y0) = r.tile_origin(p.shape, 0, 0, 0).unwrap_or((0, 0));
            let n = blocks_spanned(x0, y0, fw, fh, [ch, cw]);
            svg.rect(
                img_x + x0 as f64 * texel_w,
                top + y0 as f64 * s,
                (fw.min(img_w)) as f64 * texel_w,
                (fh.min(img_h)) as f64 * s,
                r#"class="tileedge""#,
                None,
            );
            format!("tile (0, 0): footprint {fh} x {fw} texels, spans {n} cache block(s) of {ch} x {cw} texels (Eq. 1)")
        }
        Layout::Linear => {
            let n = blocks_spanned(0, 0, img_w, img_h, [ch, cw]);
            format!("the drawn texels span {n} cache block(s) of {ch} x {cw} texels")
        }
    };
    svg.text(left, height - 26.0, r#"class="small""#, &foot);
    svg.text(
        left,
        height - 10.0,
        r#"class="small""#,
        "dashed red: texture-cache blocks; bold: tile edges",
    );
    Ok(svg.finish(&style()))
}

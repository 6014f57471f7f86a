//! Tile propagation legality (paper Sec. 4.3.1): can a chain's composed map move whole R-Tiles?
//!
//! A chain `sink = f(source)` of reshapes, transposes and broadcasts is replaced by a tile-level
//! remapping only if every tile of the sink's R-Tile (`th × tw` over its last two axes) is a whole
//! tile of the source, with its elements in the same order. Writing a sink index as
//! `d_{r-2} = th·T_r + a`, `d_{r-1} = tw·T_c + b` (tile coordinates `T`, in-tile offsets `a`, `b`),
//! the composed map must, once simplified by the egg simplifier under the index ranges:
//!
//! 1. **R-Tile dimension dependency**: read every source axis but the last two without `a` or `b`,
//!    and source rows `e` with `e mod th = a` and `e floordiv th` free of offsets — the tile's rows
//!    stay the rows of one source tile;
//! 2. **intra-tile continuity**: the same for the source's last axis with `tw` and `b` — the
//!    tile's innermost axis keeps stride 1 (a transpose that moves it scatters the tile);
//! 3. **tile boundary preservation**: implied by the two: `e = th·(e floordiv th) + a` starts every
//!    tile at a multiple of the tile size, so a split such as hidden 768 → 12 heads × 64 must cut
//!    between tiles (`tw` = 64 or 8 pass, 48 fails). A failure where the remainder still depends
//!    on the offset (the tile wraps across a source tile) is reported under this name.
//!
//! Splitting `e` by `mod`/`floordiv` (rather than subtracting the offset) lets the simplifier use
//! its residue rules, which are exactly the facts these checks need.
//!
//! The checks are proofs by the simplifier, so they are conservative: what it cannot prove is
//! illegal. When they hold, the tile-level map (Eq. 3) sends sink tile coordinates to source tile
//! coordinates: `(.., T_r, T_c) -> (.., rows floordiv th, cols floordiv tw)`.

use std::collections::HashMap;

use fbc_index::{simplify, BinOp as IndexOp, Expr, IndexMap, Limits, Ranges};

/// Why a chain cannot keep a tile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Illegal {
    /// Which of the paper's checks failed.
    pub check: &'static str,
    pub detail: String,
}

impl std::fmt::Display for Illegal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.check, self.detail)
    }
}

/// `e` is a sum with exactly one `+offset` term and no other term mentioning an offset: the
/// offset keeps stride 1, so a failure is about where tiles start, not about continuity.
fn offset_plus_base(e: &Expr, offset: &str) -> bool {
    fn terms<'e>(e: &'e Expr, positive: bool, out: &mut Vec<(bool, &'e Expr)>) {
        match e {
            Expr::Bin(IndexOp::Add, a, b) => {
                terms(a, positive, out);
                terms(b, positive, out);
            }
            Expr::Bin(IndexOp::Sub, a, b) => {
                terms(a, positive, out);
                terms(b, !positive, out);
            }
            other => out.push((positive, other)),
        }
    }
    let mut ts = Vec::new();
    terms(e, true, &mut ts);
    let target = Expr::Var(offset.to_string());
    let hits = ts.iter().filter(|(p, t)| *p && **t == target).count();
    hits == 1 && ts.iter().filter(|(_, t)| **t != target).all(|(_, t)| !has_offsets(t))
}

fn has_offsets(e: &Expr) -> bool {
    let v = e.vars();
    v.contains("tile_a") || v.contains("tile_b")
}

/// Checks `map` (sink index → source index) for tile `[th, tw]`; returns the tile-level map.
pub fn check_tile(
    map: &IndexMap,
    sink: &[u64],
    source: &[u64],
    tile: [u64; 2],
    limits: &Limits,
) -> Result<IndexMap, Illegal> {
    let (r, q) = (sink.len(), source.len());
    let [th, tw] = tile;
    if r < 2 || q < 2 {
        return Err(Illegal {
            check: "R-Tile dimension dependency",
            detail: format!("an R-Tile needs two axes; the chain goes from rank {q} to rank {r}"),
        });
    }
    if th == 0 || tw == 0 {
        return Err(Illegal {
            check: "R-Tile dimension dependency",
            detail: format!("tile [{th}, {tw}] is empty"),
        });
    }
    let clamp = |x: u64| i64::try_from(x).unwrap_or(i64::MAX);
    let mut ranges = Ranges::new();
    let mut subst: HashMap<String, Expr> = HashMap::new();
    for (k, &n) in sink.iter().enumerate().take(r - 2) {
        let _ = ranges.insert(format!("d{k}"), 0, clamp(n).max(1));
    }
    // Tiles cover the padded extent (R-Tile pads the last two axes up to whole tiles); a map that
    // sends padding onto another tile's data fails the checks below like any other misalignment.
    let _ = ranges.insert("tile_r", 0, clamp(sink[r - 2].div_ceil(th)).max(1));
    let _ = ranges.insert("tile_c", 0, clamp(sink[r - 1].div_ceil(tw)).max(1));
    let _ = ranges.insert("tile_a", 0, clamp(th));
    let _ = ranges.insert("tile_b", 0, clamp(tw));
    let split = |t: &str, size: u64, off: &str| {
        Expr::Bin(
            IndexOp::Add,
            Box::new(Expr::Bin(
                IndexOp::Mul,
                Box::new(Expr::Var(t.into())),
                Box::new(Expr::Const(clamp(size))),
            )),
            Box::new(Expr::Var(off.into())),
        )
    };
    subst.insert(format!("d{}", r - 2), split("tile_r", th, "tile_a"));
    subst.insert(format!("d{}", r - 1), split("tile_c", tw, "tile_b"));
    // First simplify on the real index box: that is where the map has to be right, and the
    // naive reshape arithmetic (`((b·S + s)·D + ..) floordiv (S·D)`) only collapses when the
    // simplifier knows `s < S`. The simplified formula then extends over the tile padding.
    let mut real = Ranges::new();
    for (k, &n) in sink.iter().enumerate() {
        let _ = real.insert(format!("d{k}"), 0, clamp(n).max(1));
    }
    let results: Vec<Expr> = map
        .results
        .iter()
        .map(|e| simplify(e, &real, limits).output.substitute_all(&subst))
        .collect();
    let simp = |e: Expr| simplify(&e, &ranges, limits).output;

    let mut tile_results = Vec::with_capacity(q);
    for (k, e) in results.iter().enumerate().take(q - 2) {
        let s = simp(e.clone());
        if has_offsets(&s) {
            return Err(Illegal {
                check: "R-Tile dimension dependency",
                detail: format!("source axis {k} changes within a tile: {s}"),
            });
        }
        tile_results.push(s);
    }
    // `e = size * (e floordiv size) + e mod size`: if `e mod size` is exactly the in-tile offset
    // and `e floordiv size` does not depend on offsets, `e` is a tile start (a multiple of `size`,
    // which is tile boundary preservation) plus the offset with stride 1.
    let axis = |e: &Expr, size: u64, offset: &str, check: &'static str, what: &str| {
        let size_e = Expr::Const(clamp(size));
        let rem = simp(Expr::Bin(IndexOp::Mod, Box::new(e.clone()), Box::new(size_e.clone())));
        let quot = simp(Expr::Bin(IndexOp::FloorDiv, Box::new(e.clone()), Box::new(size_e)));
        if rem == Expr::Var(offset.to_string()) && !has_offsets(&quot) {
            return Ok(quot);
        }
        let whole = simp(e.clone());
        let check =
            if offset_plus_base(&whole, offset) { "tile boundary preservation" } else { check };
        Err(Illegal {
            check,
            detail: format!(
                "the tile's {what} do not map to whole {what} of a source tile: {whole}"
            ),
        })
    };
    let rows = axis(&results[q - 2], th, "tile_a", "R-Tile dimension dependency", "rows")?;
    let cols = axis(&results[q - 1], tw, "tile_b", "intra-tile continuity", "columns")?;
    tile_results.push(rows);
    tile_results.push(cols);
    let mut dims: Vec<String> = (0..r - 2).map(|k| format!("d{k}")).collect();
    dims.push("tile_r".into());
    dims.push("tile_c".into());
    Ok(IndexMap { dims, symbols: Vec::new(), results: tile_results })
}

/// Alternative tiles to try when `tile` fails (Sec. 4.3.1: "we attempt recovery through
/// alternative R-Tile configurations"): the same area halved step by step in width, then in
/// height, largest first, down to one texel (4 elements) wide.
pub fn alternatives(tile: [u64; 2]) -> Vec<[u64; 2]> {
    let [th, tw] = tile;
    let mut out = Vec::new();
    let mut w = tw;
    while w >= 4 {
        let mut h = th;
        while h >= 1 {
            if [h, w] != tile {
                out.push([h, w]);
            }
            h /= 2;
        }
        w /= 2;
    }
    out.sort_by_key(|t| std::cmp::Reverse(t[0] * t[1]));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index_elim::maps::{compose_chain, reshape_map, transpose_map};

    fn limits() -> Limits {
        Limits { time_limit: std::time::Duration::from_secs(5), ..Limits::default() }
    }

    /// (1, S, H*HD) -> (1, S, H, HD) -> (1, H, S, HD), the attention chain of Fig. 12.
    fn attention(s: u64, h: u64, hd: u64) -> IndexMap {
        compose_chain(&[reshape_map(&[1, s, h * hd], &[1, s, h, hd]), transpose_map(&[0, 2, 1, 3])])
            .unwrap()
    }

    #[test]
    fn heads_of_64_keep_tiles_64_and_8_wide() {
        // Sec. 4.3.1: hidden 768 = 12 heads x 64; tile_w 64 or 8 preserve the tile boundaries.
        let m = attention(16, 12, 64);
        for tw in [64, 8] {
            let t = check_tile(&m, &[1, 12, 16, 64], &[1, 16, 768], [4, tw], &limits());
            let t = t.unwrap_or_else(|e| panic!("tile_w {tw}: {e}"));
            // Sink tile (b, h, T_r, T_c) is source tile (b, T_r, h * 64/tw + T_c).
            assert_eq!(t.eval(&[0, 3, 2, 0]).unwrap(), vec![0, 2, 3 * 64 / tw as i64]);
        }
    }

    #[test]
    fn a_tile_that_straddles_heads_is_rejected() {
        // Heads of 48: a 16-wide tile fits three times per head.
        let m = attention(16, 4, 48);
        let t = check_tile(&m, &[1, 4, 16, 48], &[1, 16, 192], [4, 16], &limits()).unwrap();
        assert_eq!(t.eval(&[0, 2, 1, 2]).unwrap(), vec![0, 1, 2 * 3 + 2]);
        // Heads of 64 with a 48-wide tile (Sec. 4.3.1's misalignment): a tile would straddle two
        // heads, so the tile cannot propagate through the split.
        let m = attention(16, 12, 64);
        let e = check_tile(&m, &[1, 12, 16, 64], &[1, 16, 768], [4, 48], &limits()).unwrap_err();
        assert_eq!(e.check, "tile boundary preservation", "{e}");
    }

    #[test]
    fn a_transpose_of_the_innermost_axis_breaks_continuity() {
        let m = transpose_map(&[0, 2, 1]);
        let e = check_tile(&m, &[2, 16, 16], &[2, 16, 16], [4, 4], &limits()).unwrap_err();
        assert!(
            e.check == "R-Tile dimension dependency" || e.check == "intra-tile continuity",
            "{e}"
        );
    }

    #[test]
    fn alternatives_shrink_from_the_largest() {
        assert_eq!(alternatives([2, 8])[..3], [[1, 8], [2, 4], [1, 4]]);
    }
}

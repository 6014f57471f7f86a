//! `split-weight-rows{max-bytes=N}`: cuts a weight argument larger than `N` bytes that a
//! product reads transposed (`tensor.matmul %x, %W {transpose_b = true}`, `W` of shape
//! `[N_out, K]`: a tied LM head reading the embedding table) into row tiles of at most `N`
//! bytes, each read by a product of its own; their outputs are concatenated along the last
//! axis, so the function computes the same values (rows `a..b` of `W` give output columns
//! `a..b`).
//!
//! Each tile is a `tensor.slice` of the argument marked [`ROW_TILE`]; `lower-to-memory` gives
//! such a slice its own `memory.upload {rows = [start, count]}` rather than a view, so that
//! `plan-weight-streaming` streams, keeps and frees each tile on its own: a weight larger than
//! a memory budget allows at once then streams in tiles (the seed's tile-granular weight
//! files). Other readers of the argument (the embedding gather that reads the same table)
//! keep reading it whole. The driver runs the pass first under `--memory-budget B`, with
//! `max-bytes` = B / 8.
//!
//! Tiles hold a multiple of 64 rows where the weight has more than 64 (the last tile takes
//! what is left), as many as `max-bytes` needs, at most [`MAX_TILES`].
//!
//! Statistics: `weights` (arguments split), `products` (products replaced), `tiles`.

use fbc_dialects::kind::TensorOp as T;
use fbc_ir::pass::{OptionKind, OptionSpec, PassInfo, PassRegistry};
use fbc_ir::{Attr, Diagnostic, Module, Op, Pass, PassContext, TensorType, Type};

/// The pass's registered name.
pub const NAME: &str = "split-weight-rows";

/// The discardable unit attribute of a `tensor.slice` that `lower-to-memory` uploads on its
/// own (a row tile of an argument).
pub const ROW_TILE: &str = "fbc.row_tile";

/// Rows of a tile are a multiple of this (where the weight has more).
pub const ROW_MULTIPLE: u64 = 64;

/// Registers `split-weight-rows`.
pub fn register(r: &mut PassRegistry) {
    r.register(PassInfo::new(
        NAME,
        "cut weights a product reads transposed into row tiles of at most max-bytes, each uploaded and streamed on its own",
        vec![OptionSpec::new(
            "max-bytes",
            OptionKind::Str,
            None,
            "the largest tile: bytes, or with a unit (64MiB)",
        )],
        |o| {
            let text = o.str("max-bytes").unwrap_or("");
            let max = crate::weight_streaming::parse_bytes_option(NAME, "max-bytes", text)?;
            if max == 0 {
                return Err(format!("{NAME}: `max-bytes` must be > 0"));
            }
            Ok(Box::new(SplitWeightRows { max_bytes: max }))
        },
    ));
}

/// The pass: row tiles of at most `max_bytes`.
#[derive(Debug, Clone, Copy)]
pub struct SplitWeightRows {
    pub max_bytes: u64,
}

/// The most tiles a weight is cut into: a budget too small for tiles of `rows / MAX_TILES`
/// rows would not hold the rest of the function either, and thousands of one-row tiles only
/// slow the passes after.
pub const MAX_TILES: u64 = 64;

/// The row ranges `(start, count)` that cut `rows` rows of `row_bytes` bytes each into tiles
/// of at most `max_bytes` (at least one row a tile, at most [`MAX_TILES`] tiles), a multiple
/// of [`ROW_MULTIPLE`] rows each but the last where `rows` is larger than it.
pub fn row_tiles(rows: u64, row_bytes: u64, max_bytes: u64) -> Vec<(u64, u64)> {
    let fit = (max_bytes / row_bytes.max(1)).max(1).max(rows.div_ceil(MAX_TILES));
    let per = if rows > ROW_MULTIPLE && fit >= ROW_MULTIPLE {
        fit / ROW_MULTIPLE * ROW_MULTIPLE
    } else {
        fit
    };
    let mut tiles = Vec::new();
    let mut start = 0;
    while start < rows {
        let n = per.min(rows - start);
        tiles.push((start, n));
        start += n;
    }
    tiles
}

impl Pass for SplitWeightRows {
    fn name(&self) -> &str {
        NAME
    }

    fn run(&mut self, m: &mut Module, cx: &mut PassContext<'_>) -> Result<(), Vec<Diagnostic>> {
        let slice = cx.registry.expect(T::Slice.name());
        let matmul = cx.registry.expect(T::Matmul.name());
        let concat = cx.registry.expect(T::Concat.name());
        let (mut weights, mut products, mut tiles) = (0, 0, 0);
        for f in m.func_ids().collect::<Vec<_>>() {
            for w in m.func(f).args.clone() {
                let Some(wt) = m.value_type(w).as_tensor().cloned() else { continue };
                let [rows, cols] = wt.shape[..] else { continue };
                let Some(bytes) = wt.numel().map(|n| n.saturating_mul(wt.elem.bytes())) else {
                    continue;
                };
                if bytes <= self.max_bytes {
                    continue;
                }
                let readers: Vec<Op> = m
                    .value(w)
                    .uses
                    .iter()
                    .filter(|u| u.index == 1 && transposed_product(m, u.op))
                    .map(|u| u.op)
                    .collect();
                if readers.is_empty() {
                    continue;
                }
                let cut = row_tiles(rows, bytes / rows.max(1), self.max_bytes);
                if cut.len() < 2 {
                    continue;
                }
                weights += 1;
                let wname = m.value(w).name.clone().unwrap_or_else(|| "w".into());
                for op in readers {
                    let d = m.op(op);
                    let (span, x, old) = (d.span, d.operands[0], d.results[0]);
                    let attrs = d.attrs.clone();
                    let Some(out) = m.value_type(old).as_tensor().cloned() else { continue };
                    let oname = m.value(old).name.clone().unwrap_or_else(|| "y".into());
                    let mut at = m.func(f).body.iter().position(|&o| o == op).unwrap_or(0);
                    let mut parts = Vec::with_capacity(cut.len());
                    for (i, &(start, n)) in cut.iter().enumerate() {
                        let ints = |v: [u64; 2]| {
                            Attr::Array(v.iter().map(|&k| Attr::Int(k as i64)).collect())
                        };
                        let tile_ty = Type::Tensor(TensorType::new(vec![n, cols], wt.elem));
                        let s_attrs = vec![
                            ("start".to_string(), ints([start, 0])),
                            ("end".to_string(), ints([start + n, cols])),
                            (ROW_TILE.to_string(), Attr::Unit),
                        ];
                        let s = m.create_op(f, slice, &[w], s_attrs, vec![tile_ty], span);
                        m.insert_op_at(f, at, s);
                        at += 1;
                        let tile = m.op(s).results[0];
                        m.set_value_name(tile, format!("{wname}_rows{i}"));
                        let mut shape = out.shape.to_vec();
                        if let Some(last) = shape.last_mut() {
                            *last = n;
                        }
                        let part_ty = Type::Tensor(TensorType::new(shape, out.elem));
                        let p =
                            m.create_op(f, matmul, &[x, tile], attrs.clone(), vec![part_ty], span);
                        m.insert_op_at(f, at, p);
                        at += 1;
                        let part = m.op(p).results[0];
                        m.set_value_name(part, format!("{oname}_rows{i}"));
                        parts.push(part);
                        tiles += 1;
                    }
                    let axis = vec![("axis".to_string(), Attr::Int(-1))];
                    let c = m.create_op(f, concat, &parts, axis, vec![Type::Tensor(out)], span);
                    m.insert_op_at(f, at, c);
                    let joined = m.op(c).results[0];
                    m.set_value_name(joined, oname);
                    m.replace_all_uses(old, joined);
                    m.erase_op(op);
                    products += 1;
                }
            }
        }
        cx.stats.add(NAME, "weights", weights);
        cx.stats.add(NAME, "products", products);
        cx.stats.add(NAME, "tiles", tiles);
        Ok(())
    }
}

/// Whether `op` is a `tensor.matmul` reading its second operand transposed and its first not.
fn transposed_product(m: &Module, op: Op) -> bool {
    let d = m.op(op);
    let flag = |k: &str| d.attr(k).is_some_and(|a| matches!(a, Attr::Bool(true)));
    !d.erased && T::Matmul.is(d) && flag("transpose_b") && !flag("transpose_a")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiles_are_multiples_of_64_rows_but_the_last() {
        // Llama 3.2-1B's table (128256 rows of 8 KiB) under an eighth of a quarter of its f32
        // weights (154,476,800 bytes): 18857 rows fit, so 294 · 64 = 18816 a tile.
        let t = row_tiles(128_256, 8192, 154_476_800);
        assert_eq!(t.len(), 7);
        assert!(t.iter().enumerate().all(|(i, &(s, _))| s == i as u64 * 18_816));
        assert!(t[..6].iter().all(|&(_, n)| n == 18_816));
        assert_eq!(t[6], (112_896, 15_360));
        // Fewer rows than the multiple: as many as fit.
        assert_eq!(row_tiles(48, 100, 1000), vec![(0, 10), (10, 10), (20, 10), (30, 10), (40, 8)]);
        // A row larger than the tile: one row a tile.
        assert_eq!(row_tiles(3, 100, 50), vec![(0, 1), (1, 1), (2, 1)]);
        // Fits whole.
        assert_eq!(row_tiles(100, 4, 1000), vec![(0, 100)]);
        // At most 64 tiles: 8192 rows of 8 KiB under 125 bytes are 64 tiles of 128 rows.
        let t = row_tiles(8192, 8192, 125);
        assert_eq!(t.len(), 64);
        assert!(t.iter().all(|&(_, n)| n == 128));
        // More than 64 rows but fewer than 64 fit: as many as fit.
        assert_eq!(row_tiles(100, 10, 250), vec![(0, 25), (25, 25), (50, 25), (75, 25)]);
    }
}

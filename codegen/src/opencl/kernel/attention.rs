//! The OpenCL forms of an attention launch (`fbc_dialects::memory::attention`): few queries
//! per head (a decode step) take grouped flash-decoding (`decode.rs`): the keys cut into chunks
//! over many work-groups, the query heads that share a key head in one, the chunks' partials
//! combined in the same launch; 64 queries per head or more (a prompt) take the query-block
//! form here (`attention_blocks`, the flash-attention dataflow). Both read only the keys each
//! query sees (`lo .. hi`: `hi = min(M, last + 1)`, `lo = max(0, last + 1 - window)` with
//! `causal`), run every sum in a fixed order (the same results run to run) and differ from the
//! reference executor's three steps (`attention_parts`) by the order of the sums and the
//! rescaling only.

use std::fmt::Write as _;

use fbc_dialects::memory::attention::{COS, K, Q, SIN, V};

use super::{affine, unflatten, Cx, Emitted, KernelOptions};

impl Cx<'_> {
    pub(super) fn attention(&self, comment: &str, opts: &KernelOptions) -> Result<Emitted, String> {
        let k = self.k;
        k.attention_dims().ok_or("not an attention launch")?;
        if (0..k.maps.len()).any(|i| self.map_checked(i)) {
            return Err("an attention launch whose accesses the bounds prover leaves open".into());
        }
        let (_, n) = k.attention_dims().ok_or("not an attention launch")?;
        if self.is_image(self.out()) && !self.texel_holds(self.out(), n) {
            return Err("an attention launch writing an image whose texels do not each hold four consecutive values of the head".into());
        }
        if let Some(e) = self.attention_blocks(comment, opts)? {
            return Ok(e);
        }
        self.attention_grouped(comment, opts)?.ok_or_else(|| {
            "an attention launch whose head does not fit the device's local memory or a work-item's registers".into()
        })
    }
}

/// A query point's indices `dims` followed by `e` and `j` (the head dimension and the key).
pub(super) fn at(dims: &[String], e: &str, j: &str) -> Vec<String> {
    let mut d = dims.to_vec();
    d.push(e.to_string());
    d.push(j.to_string());
    d
}

impl Cx<'_> {
    /// Declares the query point's indices `d0, d1, ..` as `exprs` into `s` and, where the
    /// launch is causal, `fbc_last` (the last key the query sees); returns the indices' names
    /// and the first and past-the-last key the query sees.
    pub(super) fn query_point(
        &self,
        s: &mut String,
        exprs: &[String],
    ) -> Result<(Vec<String>, String, String), String> {
        let k = self.k;
        let (a, n) = k.attention_dims().ok_or("not an attention launch")?;
        let keys = k.domain[n + 1];
        let (w, ix) = (self.w, self.w.ty());
        let mut dims = Vec::with_capacity(exprs.len());
        for (i, e) in exprs.iter().enumerate() {
            let _ = writeln!(s, "  const {ix} d{i} = {e};");
            dims.push(format!("d{i}"));
        }
        let Some(e) = self.last_key(&dims)? else { return Ok((dims, w.lit(0), w.lit(keys))) };
        let _ = writeln!(s, "  const {ix} fbc_last = {e};");
        let hi = format!("min(({ix}){}, fbc_last + 1)", w.lit(keys));
        let lo = if a.window > 0 {
            format!("max(({ix})0, fbc_last + 1 - {})", w.lit(a.window))
        } else {
            w.lit(0)
        };
        Ok((dims, lo, hi))
    }

    /// The last key the query at point `dims` sees (the `causal` map over the point and the
    /// launch's symbols), or `None` without a causal map.
    fn last_key(&self, dims: &[String]) -> Result<Option<String>, String> {
        let k = self.k;
        let Some(last) = k.attention_dims().and_then(|(a, _)| a.last.as_ref()) else {
            return Ok(None);
        };
        let mut texts = at(dims, &self.w.lit(0), &self.w.lit(0));
        texts.extend((0..k.symbols.len()).map(|j| format!("fbc_sym{j}")));
        affine(&last.results[0], &last.vars(), &texts, self.w).map(Some)
    }

    /// The launch's parameters with the split's scratch, `fbc_part` (partial results) and
    /// `fbc_count` (the runs or chunks counted in), before the error buffer where there is one.
    pub(super) fn params_with_split(&self) -> String {
        let params = self.params();
        let part = "__global float* fbc_part, __global int* fbc_count";
        match params.find(", __global int* fbc_err") {
            Some(at) => format!("{}, {part}{}", &params[..at], &params[at..]),
            None => format!("{params}, {part}"),
        }
    }

    /// The query at point `dims` and head index `e`, rotated (RoPE) where the launch says so.
    pub(super) fn rotated_query(&self, dims: &[String]) -> Result<String, String> {
        let k = self.k;
        let (a, n) = k.attention_dims().ok_or("not an attention launch")?;
        let (hd, w) = (k.domain[n], self.w);
        let e_dims = at(dims, "e", &w.lit(0));
        let qv = self.read(Q, &e_dims)?.0;
        if !a.rope {
            return Ok(qv);
        }
        let half = hd / 2;
        let partner = format!("(e < {h} ? e + {h} : e - {h})", h = w.lit(half));
        let rot = self.read(Q, &at(dims, &partner, &w.lit(0)))?.0;
        let (c, sn) = (self.read(COS, &e_dims)?.0, self.read(SIN, &e_dims)?.0);
        Ok(format!("{qv} * {c} + (e < {} ? -({rot}) : {rot}) * {sn}", w.lit(half)))
    }

    /// The loop storing the `D` outputs of the query point `dims` (`value(e)`: the C
    /// expression of output `e`), shared by the `n` work-items `lane`: a value each into a
    /// buffer, a texel of four each into an image (whose texels hold four consecutive values
    /// of the head: checked by [`Cx::attention`]). `i`: the lines' indentation.
    pub(super) fn output_loop(
        &self,
        dims: &[String],
        lane: &str,
        n: u64,
        value: impl Fn(&str) -> String,
        i: &str,
    ) -> Result<String, String> {
        let head = self.k.attention_dims().ok_or("not an attention launch")?.1;
        let (w, ix) = (self.w, self.w.ty());
        let hd = w.lit(self.k.domain[head]);
        let d = at(dims, "e", &w.lit(0));
        if self.is_image(self.out()) {
            let values = (0..4)
                .map(|c| {
                    (
                        value(&if c == 0 { "e".to_string() } else { format!("e + {c}") }),
                        super::Ty::F,
                    )
                })
                .collect();
            let store = self.texel_store(values, &[None, None, None, None], &d)?;
            return Ok(format!(
                "{i}for ({ix} e = {lane} * 4; e < {hd}; e += {}) {{\n{i}  {store}\n{i}}}",
                4 * n
            ));
        }
        let off = self.coord(self.out(), 0, &d)?;
        let store = self.buffer_store(&off, &value("e"), &d);
        Ok(format!("{i}for ({ix} e = {lane}; e < {hd}; e += {n}) {{\n{i}  {store}\n{i}}}"))
    }
}

/// The query-block form's tiles, `(queries of a work-group, keys of a tile)`, the largest
/// first: the first whose local memory fits the device is taken (64 × 32 for a head of 64 in
/// 48 KiB, 32 × 32 in 32 KiB).
const BLOCK_SHAPES: [(u64, u64); 4] = [(64, 32), (32, 32), (32, 16), (16, 16)];

/// Query rows of a work-item of the query-block form: each holds the scores and output values
/// of rows `r, r + Q/4, r + Q/2, r + 3Q/4` of its work-group's `Q` queries.
const BLOCK_ROWS: u64 = 4;

/// Work-items along the keys of a tile (and along the head's values) per row group: each
/// scores keys `c, c + 8, ..` of a tile and holds values `c, c + 8, ..` (or float4s of them) of
/// its rows' outputs.
const BLOCK_LANES: u64 = 8;

/// The fewest queries per head that take the query-block form (a prompt): a shorter attention
/// (a decode step's one query) takes flash-decoding, whose chunks give it work-groups.
pub(crate) const BLOCK_MIN_QUERIES: u64 = 64;

/// Local memory of the query-block form for `bq` queries, tiles of `bk` keys and head size
/// `hd`, with `ixb`-byte indices: the query block (its rows padded by four floats, so the
/// float4 reads of neighbouring rows fall in different banks; the outputs reuse it), the key
/// tile (padded alike), the value tile, the scores (padded by four), each row's values of its
/// [`BLOCK_LANES`] work-items (their greatest scores of a tile; at the end their sums) and the
/// rows' key ranges.
fn block_local_bytes(bq: u64, bk: u64, hd: u64, ixb: u64) -> u64 {
    4 * (bq * (hd + 4) + bk * (hd + 4) + bk * hd + bq * (bk + 4) + BLOCK_LANES * bq) + 2 * bq * ixb
}

impl Cx<'_> {
    /// The query-block form (FLAT, the flash-attention dataflow) of an attention launch with
    /// many queries per head, or `None` where it does not apply (fewer than
    /// [`BLOCK_MIN_QUERIES`] queries along the innermost query dimension, keys or values that
    /// move with the query, a head size not a multiple of [`BLOCK_LANES`], or no shape of
    /// [`BLOCK_SHAPES`] that fits the device's local memory and work-group):
    ///
    /// ```text
    /// work-group: Q queries of one head (2·Q work-items), keys of all Q in tiles of K:
    ///   q block (RoPE applied as it is loaded) into local memory, two work-items a query
    ///   per tile: keys and values staged into local memory (coalesced along e)
    ///     work-item (r, c): the scores of its 4 rows × K/8 keys, register-blocked: per four
    ///       values of e, 4 float4 reads of q and K/8 of k for 16·K/8 products; each row's
    ///       greatest of them into local memory
    ///     work-item (r, c): m' = max(m, the row's 8 greatest) (in lane order; every work-item
    ///       of the row the same), p_j = exp(s_j - m') for its keys, its own share of the
    ///       row's sum l_c = l_c·exp(m - m') + Σ p_j (in key order), o = o·exp(m - m')
    ///     work-item (r, c): o += p · v over its 4 rows × D/8 values (float4s of v where D
    ///       is a multiple of 32), in key order
    ///   l = Σ_c l_c (in lane order); out = o / l, through local memory, stored two
    ///   work-items a query
    /// ```
    ///
    /// Each key and value is read from memory once per Q queries; the scores never leave
    /// local memory, and both products read four values from local memory per four to eight
    /// multiply-adds (the 16-queries form before it, one query per 8 work-items, read two per
    /// one: 0.237 ms for the attention of a 512-token Llama 3.2-1B prefill on an H100, slower
    /// than the unfused products and softmax). Masked keys (after `last`, before the window)
    /// score `-inf`; a tile a row sees none of leaves its sums alone. Every sum runs in a fixed
    /// order: the same bits every run.
    fn attention_blocks(
        &self,
        comment: &str,
        opts: &KernelOptions,
    ) -> Result<Option<Emitted>, String> {
        let k = self.k;
        let (a, n) = k.attention_dims().ok_or("not an attention launch")?;
        let (hd, keys) = (k.domain[n], k.domain[n + 1]);
        let (w, ix) = (self.w, self.w.ty());
        let Some(qd) = n.checked_sub(1) else { return Ok(None) };
        let queries = k.domain[qd];
        let moves = |i: usize| super::map_uses(&k.maps[i], qd);
        if queries < BLOCK_MIN_QUERIES || hd % BLOCK_LANES != 0 || moves(K) || moves(V) {
            return Ok(None);
        }
        let ixb = if ix == "int" { 4 } else { 8 };
        let lanes = BLOCK_LANES;
        let Some((bq, bk)) = BLOCK_SHAPES.into_iter().find(|&(bq, bk)| {
            bq / BLOCK_ROWS * lanes <= opts.max_group
                && block_local_bytes(bq, bk, hd, ixb) <= opts.local_mem_bytes
        }) else {
            return Ok(None);
        };
        let g = bq / BLOCK_ROWS * lanes;
        // Work-items per query when loading the queries and storing the outputs.
        let ql = g / bq;
        let stride = bq / BLOCK_ROWS;
        // The values of a row a work-item holds: float4s where the head allows.
        let vw = if hd % (4 * lanes) == 0 { 4 } else { 1 };
        let (vt, vc) = if vw == 4 { ("float4", hd / (4 * lanes)) } else { ("float", hd / lanes) };
        let kc = bk / lanes;
        let blocks_q = queries.div_ceil(bq);
        let outer: u64 = k.domain[..qd].iter().product();
        let mut s = String::new();
        s.push_str(comment);
        // Runs of each block's key tiles, one work-group each (`[attention] prompt_splits`).
        let runs = opts.prompt_splits.clamp(1, 16);
        let params = if runs > 1 { self.params_with_split() } else { self.params() };
        let _ = writeln!(
            s,
            "__kernel __attribute__((reqd_work_group_size({g}, 1, 1)))\nvoid {}({params}) {{",
            k.name
        );
        // The block's index among the launch's, and (split) the run's.
        let gq = if runs > 1 {
            let _ = writeln!(
                s,
                "  // Run fbc_sp of the block's {runs} runs of key tiles.\n  const {ix} fbc_gq = get_group_id(0) / {runs};\n  const int fbc_sp = (int)(get_group_id(0) % {runs});\n  __local int fbc_done;"
            );
            "fbc_gq"
        } else {
            "get_group_id(0)"
        };
        let _ = writeln!(
            s,
            "  // Attention, query blocks (FLAT): a work-group of {g} per {bq} queries of a head, keys in tiles of {bk} staged in local memory, online softmax; work-item (r, c) holds rows r + {stride}·i (i < {BLOCK_ROWS}), scores keys c + {lanes}·j (j < {kc}) and holds {vc} {vt} of each row's outputs.\n  __local float fbc_q[{bq}][{}] __attribute__((aligned(16)));\n  __local float fbc_k[{bk}][{}] __attribute__((aligned(16)));\n  __local float fbc_v[{bk}][{hd}] __attribute__((aligned(16)));\n  __local float fbc_p[{bq}][{}] __attribute__((aligned(16)));\n  __local float fbc_mx[{bq}][{lanes}];\n  __local {ix} fbc_lo[{bq}], fbc_hi[{bq}];\n  const int lid = (int)get_local_id(0);\n  const int fbc_qi = lid / {ql}, fbc_ln = lid % {ql};\n  const {ix} fbc_outer = {gq} / {blocks_q};\n  const {ix} fbc_qv = ({gq} % {blocks_q}) * {bq} + fbc_qi;\n  const int fbc_have = fbc_qv < {};",
            hd + 4,
            hd + 4,
            bk + 4,
            w.lit(queries)
        );
        s.push_str(&self.symbol_checks(false));
        // The query point's indices: the outer ones from the group, the query from the block;
        // a work-item past the last query reads query 0's row and stores nothing.
        let mut exprs: Vec<String> = unflatten("fbc_outer", &k.domain[..qd], w);
        exprs.push(format!("(fbc_have ? fbc_qv : ({ix})0)"));
        // This query's keys, and the block's: every query's range, the least start and the
        // greatest end (an empty range where a symbol is out of range).
        let (dims, lo, hi) = self.query_point(&mut s, &exprs)?;
        let at = |e: &str, j: &str| at(&dims, e, j);
        let _ = writeln!(
            s,
            "  const {ix} fbc_j0 = {lo};\n  const {ix} fbc_j1 = (fbc_ok && fbc_have) ? {hi} : fbc_j0;\n  if (fbc_ln == 0) {{\n    fbc_lo[fbc_qi] = fbc_j0;\n    fbc_hi[fbc_qi] = fbc_j1;\n  }}"
        );
        let qv = self.rotated_query(&dims)?;
        let _ = writeln!(
            s,
            "  for ({ix} e = fbc_ln; e < {}; e += {ql}) fbc_q[fbc_qi][e] = {qv};\n  barrier(CLK_LOCAL_MEM_FENCE);\n  {ix} fbc_blo = fbc_lo[0], fbc_bhi = fbc_hi[0];\n  for (int i = 1; i < {bq}; ++i) {{\n    if (fbc_hi[i] > fbc_lo[i]) {{\n      fbc_blo = fbc_bhi > fbc_blo ? min(fbc_blo, fbc_lo[i]) : fbc_lo[i];\n      fbc_bhi = max(fbc_bhi, fbc_hi[i]);\n    }}\n  }}\n  const int fbc_r = lid / {lanes}, fbc_c = lid % {lanes};\n  {ix} fbc_rlo[{BLOCK_ROWS}], fbc_rhi[{BLOCK_ROWS}];\n  {vt} fbc_o[{BLOCK_ROWS}][{vc}];\n  for (int i = 0; i < {BLOCK_ROWS}; ++i) {{\n    fbc_rlo[i] = fbc_lo[fbc_r + {stride} * i];\n    fbc_rhi[i] = fbc_hi[fbc_r + {stride} * i];\n    for (int h = 0; h < {vc}; ++h) fbc_o[i][h] = 0.0f;\n  }}\n  // Each row's running maximum, and this work-item's share of its sum.\n  float fbc_m[{BLOCK_ROWS}], fbc_l[{BLOCK_ROWS}];\n  for (int i = 0; i < {BLOCK_ROWS}; ++i) {{\n    fbc_m[i] = -INFINITY;\n    fbc_l[i] = 0.0f;\n  }}",
            w.lit(hd)
        );
        let (kv, vv) =
            (self.read(K, &at("fbc_e", "fbc_jt"))?.0, self.read(V, &at("fbc_e", "fbc_jt"))?.0);
        let mut score = format!("fbc_s[i][j] * {}", f32_lit(a.scale));
        if a.softcap > 0.0 {
            let (c, r) = (f32_lit(a.softcap), f32_lit(1.0 / a.softcap));
            score = format!("{c} * tanh(({score}) * {r})");
        }
        // Four floats of a local row as one float4, and a work-item's `vt` of a row's values.
        let lv =
            |arr: &str, row: &str, col: &str| format!("*(__local float4*)&{arr}[{row}][{col}]");
        let v_at = format!("fbc_c * {vw} + {} * h", lanes * vw);
        let values = |arr: &str, row: &str| {
            if vw == 4 {
                lv(arr, row, &v_at)
            } else {
                format!("{arr}[{row}][{v_at}]")
            }
        };
        // The local row of this work-item's row i.
        let row = format!("fbc_r + {stride} * i");
        let (q4, k4) = (lv("fbc_q", &row, "e"), lv("fbc_k", &format!("fbc_c + {lanes} * j"), "e"));
        let p4 = lv("fbc_p", &row, "t");
        let vread = values("fbc_v", "t + u");
        // The value step, four keys at a time: key t + u of the tile, the rows' scores p.s{u}.
        let mut pv = String::new();
        for u in 0..4 {
            let _ = write!(
                pv,
                "\n      {{\n        const int u = {u};\n        {vt} fbc_vv[{vc}];\n        for (int h = 0; h < {vc}; ++h) fbc_vv[h] = {vread};\n        for (int i = 0; i < {BLOCK_ROWS}; ++i)\n          for (int h = 0; h < {vc}; ++h) fbc_o[i][h] = fma(({vt})(fbc_pt[i].s{u}), fbc_vv[h], fbc_o[i][h]);\n      }}"
            );
        }
        // The keys this work-group scores: the block's, or its run's whole tiles of them.
        let (k0, k1) = if runs > 1 {
            // A run takes at most `fbc_span` tiles, the share of the longest block: the keys the
            // launch's last query sees (causal without a window: a prompt of 512 over a cache of
            // 2048 sees 512), else all of them. A block with fewer tiles uses fewer runs (its
            // tiles split evenly between them, never more than `runs`), and a run past the
            // block's last returns at once: a causal prompt's first blocks run whole in one
            // work-group, without partials to combine.
            let mut final_query = dims.clone();
            final_query[qd] = w.lit(queries - 1);
            let longest = match self.last_key(&final_query)? {
                Some(e) if a.window == 0 => {
                    format!("clamp(({e}) + 1, ({ix})0, ({ix}){})", w.lit(keys))
                }
                _ => w.lit(keys),
            };
            let _ = writeln!(
                s,
                "  // The block's tiles in at most {runs} runs of at most fbc_span (one run where they fit), each run's share even.\n  const {ix} fbc_span = max(({ix})1, (({longest}) + {}) / {});\n  const {ix} fbc_tiles = (fbc_bhi - fbc_blo + {}) / {bk};\n  const {ix} fbc_used = min(({ix}){runs}, max(({ix})1, (fbc_tiles + fbc_span - 1) / fbc_span));\n  if (fbc_sp >= fbc_used) return;\n  const {ix} fbc_per = (fbc_tiles + fbc_used - 1) / fbc_used;\n  const {ix} fbc_k0 = fbc_blo + min(({ix})fbc_sp * fbc_per, fbc_tiles) * {bk};\n  const {ix} fbc_k1 = min(fbc_bhi, fbc_blo + min(({ix})(fbc_sp + 1) * fbc_per, fbc_tiles) * {bk});",
                bk * runs - 1,
                bk * runs,
                bk - 1,
            );
            ("fbc_k0", "fbc_k1")
        } else {
            ("fbc_blo", "fbc_bhi")
        };
        // Staging a tile: each work-item's share of its keys and values into registers first,
        // every read in flight at once and issued before the barrier (other work-items may
        // still be on the last tile), then into local memory. On an H100 (the 512-token Llama
        // 3.2-1B prefill, one work-group a block) one call measured 0.1066 ms against 0.124 ms
        // staged a value at a time, a later one 0.1253 / 0.1231 against 0.1253 / 0.1266 ms: no
        // gain shown side by side, kept as it is not slower. A share of more than 16 values (a
        // head of over 64 in a small block) keeps the loop of single values rather than spill.
        // A tile is a whole number of shares: `g` = 2·(block rows) divides `bk · hd` for every
        // block shape and a head of a multiple of 8 (what takes this form).
        let (tile, per) = (bk * hd, bk * hd / g);
        debug_assert_eq!(tile % g, 0, "a tile of {bk} x {hd} in shares of {g}");
        let stage = if per <= 16 {
            format!(
                "    float fbc_kr[{per}], fbc_vr[{per}];\n    for (int u = 0; u < {per}; ++u) {{\n      const int fbc_t = lid + {g} * u;\n      const {ix} fbc_jt = fbc_t0 + fbc_t / {hd}, fbc_e = fbc_t % {hd};\n      const int fbc_in = fbc_jt < fbc_bhi;\n      fbc_kr[u] = fbc_in ? {kv} : 0.0f;\n      fbc_vr[u] = fbc_in ? {vv} : 0.0f;\n    }}\n    barrier(CLK_LOCAL_MEM_FENCE);\n    for (int u = 0; u < {per}; ++u) {{\n      const int fbc_t = lid + {g} * u;\n      fbc_k[fbc_t / {hd}][fbc_t % {hd}] = fbc_kr[u];\n      fbc_v[fbc_t / {hd}][fbc_t % {hd}] = fbc_vr[u];\n    }}\n"
            )
        } else {
            format!(
                "    barrier(CLK_LOCAL_MEM_FENCE);\n    for (int fbc_t = lid; fbc_t < {tile}; fbc_t += {g}) {{\n      const {ix} fbc_jt = fbc_t0 + fbc_t / {hd}, fbc_e = fbc_t % {hd};\n      const int fbc_in = fbc_jt < fbc_bhi;\n      fbc_k[fbc_t / {hd}][fbc_t % {hd}] = fbc_in ? {kv} : 0.0f;\n      fbc_v[fbc_t / {hd}][fbc_t % {hd}] = fbc_in ? {vv} : 0.0f;\n    }}\n"
            )
        };
        let _ = writeln!(
            s,
            "  for ({ix} fbc_t0 = {k0}; fbc_t0 < {k1}; fbc_t0 += {bk}) {{\n{stage}    barrier(CLK_LOCAL_MEM_FENCE);\n    // Scores: rows fbc_r + {stride}·i against keys fbc_c + {lanes}·j, four values of e at a time.\n    float fbc_s[{BLOCK_ROWS}][{kc}];\n    for (int i = 0; i < {BLOCK_ROWS}; ++i)\n      for (int j = 0; j < {kc}; ++j) fbc_s[i][j] = 0.0f;\n    for (int e = 0; e < {hd}; e += 4) {{\n      float4 fbc_qe[{BLOCK_ROWS}], fbc_ke[{kc}];\n      for (int i = 0; i < {BLOCK_ROWS}; ++i) fbc_qe[i] = {q4};\n      for (int j = 0; j < {kc}; ++j) fbc_ke[j] = {k4};\n      for (int i = 0; i < {BLOCK_ROWS}; ++i)\n        for (int j = 0; j < {kc}; ++j)\n          fbc_s[i][j] = fma(fbc_qe[i].w, fbc_ke[j].w, fma(fbc_qe[i].z, fbc_ke[j].z, fma(fbc_qe[i].y, fbc_ke[j].y, fma(fbc_qe[i].x, fbc_ke[j].x, fbc_s[i][j]))));\n    }}\n    // Masked keys score -inf; each row's greatest score of this work-item's keys.\n    for (int i = 0; i < {BLOCK_ROWS}; ++i) {{\n      float fbc_pm = -INFINITY;\n      for (int j = 0; j < {kc}; ++j) {{\n        const {ix} fbc_j = fbc_t0 + fbc_c + {lanes} * j;\n        fbc_s[i][j] = (fbc_j >= fbc_rlo[i] && fbc_j < fbc_rhi[i]) ? {score} : -INFINITY;\n        fbc_pm = fmax(fbc_pm, fbc_s[i][j]);\n      }}\n      fbc_mx[fbc_r + {stride} * i][fbc_c] = fbc_pm;\n    }}\n    barrier(CLK_LOCAL_MEM_FENCE);\n    // Each row's new maximum (its {lanes} work-items' greatest, in lane order: every one of\n    // them the same), this work-item's probabilities, its share of the row's sum and the\n    // rescaled outputs. A tile a row sees none of (and none before it) leaves them alone.\n    for (int i = 0; i < {BLOCK_ROWS}; ++i) {{\n      float fbc_mn = fbc_m[i];\n      for (int c = 0; c < {lanes}; ++c) fbc_mn = fmax(fbc_mn, fbc_mx[fbc_r + {stride} * i][c]);\n      const float fbc_a = fbc_mn == -INFINITY ? 1.0f : exp(fbc_m[i] - fbc_mn);\n      float fbc_ps = 0.0f;\n      for (int j = 0; j < {kc}; ++j) {{\n        const float x = fbc_s[i][j];\n        const float fbc_pe = x == -INFINITY ? 0.0f : exp(x - fbc_mn);\n        fbc_p[fbc_r + {stride} * i][fbc_c + {lanes} * j] = fbc_pe;\n        fbc_ps += fbc_pe;\n      }}\n      fbc_l[i] = fbc_l[i] * fbc_a + fbc_ps;\n      fbc_m[i] = fbc_mn;\n      for (int h = 0; h < {vc}; ++h) fbc_o[i][h] *= fbc_a;\n    }}\n    barrier(CLK_LOCAL_MEM_FENCE);\n    for (int t = 0; t < {bk}; t += 4) {{\n      float4 fbc_pt[{BLOCK_ROWS}];\n      for (int i = 0; i < {BLOCK_ROWS}; ++i) fbc_pt[i] = {p4};{pv}\n    }}\n  }}",
        );
        let store =
            self.output_loop(&dims, "fbc_ln", ql, |e| format!("fbc_q[fbc_qi][{e}]"), "  ")?;
        let o_at = values("fbc_q", &row);
        // out = o / l, written by the work-group that scored all of the block's keys.
        let direct = format!(
            "  // out = o / l, l the sum of the row's {lanes} shares (in lane order), through the query\n  // block's local memory.\n  for (int i = 0; i < {BLOCK_ROWS}; ++i) fbc_mx[fbc_r + {stride} * i][fbc_c] = fbc_l[i];\n  barrier(CLK_LOCAL_MEM_FENCE);\n  for (int i = 0; i < {BLOCK_ROWS}; ++i) {{\n    float fbc_d = 0.0f;\n    for (int c = 0; c < {lanes}; ++c) fbc_d += fbc_mx[fbc_r + {stride} * i][c];\n    for (int h = 0; h < {vc}; ++h) {o_at} = fbc_o[i][h] / fbc_d;\n  }}\n  barrier(CLK_LOCAL_MEM_FENCE);\n  if (!fbc_ok || !fbc_have) return;\n{store}\n"
        );
        if runs > 1 {
            // A block in one run: its outputs as without the split.
            let _ = writeln!(s, "  if (fbc_used == 1) {{");
            for line in direct.lines() {
                let _ = writeln!(s, "  {line}");
            }
            let _ = writeln!(s, "    return;\n  }}");
            // Each run's partials, `[block, run, query, D + 2]`: the outputs before dividing,
            // then the row's maximum and sum; the last run to finish combines them.
            let sp = hd + 2;
            let x = format!("(p * {bq} + fbc_q0) * {sp} + {v_at}");
            let (put, get) = if vw == 4 {
                (
                    format!("vstore4(fbc_o[i][h], 0, fbc_at + fbc_q0 * {sp} + {v_at});"),
                    format!(
                        "(float4)(fbc_all[{x}], fbc_all[{x} + 1], fbc_all[{x} + 2], fbc_all[{x} + 3])"
                    ),
                )
            } else {
                (format!("fbc_at[fbc_q0 * {sp} + {v_at}] = fbc_o[i][h];"), format!("fbc_all[{x}]"))
            };
            let _ = writeln!(
                s,
                "  // The run's partials: the outputs before dividing, the rows' maxima and sums (the\n  // {lanes} shares in lane order).\n  for (int i = 0; i < {BLOCK_ROWS}; ++i) fbc_mx[fbc_r + {stride} * i][fbc_c] = fbc_l[i];\n  barrier(CLK_LOCAL_MEM_FENCE);\n  __global float* fbc_at = fbc_part + ((long)fbc_gq * {runs} + fbc_sp) * {};\n  for (int i = 0; i < {BLOCK_ROWS}; ++i) {{\n    const int fbc_q0 = fbc_r + {stride} * i;\n    for (int h = 0; h < {vc}; ++h) {put}\n    if (fbc_c == 0) {{\n      float fbc_d = 0.0f;\n      for (int c = 0; c < {lanes}; ++c) fbc_d += fbc_mx[fbc_q0][c];\n      fbc_at[fbc_q0 * {sp} + {hd}] = fbc_m[i];\n      fbc_at[fbc_q0 * {sp} + {}] = fbc_d;\n    }}\n  }}\n  mem_fence(CLK_GLOBAL_MEM_FENCE);\n  barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);\n  // A symbol out of range: no group counts itself in, none combines (the counts stay zero).\n  if (lid == 0) fbc_done = fbc_ok && atomic_inc(fbc_count + fbc_gq) == fbc_used - 1;\n  barrier(CLK_LOCAL_MEM_FENCE);\n  if (!fbc_done) return;\n  mem_fence(CLK_GLOBAL_MEM_FENCE);\n  // Read past the caches that could hold another group's partials; out = Σ o·w / Σ l·w over\n  // the runs in order, w = exp(m - max m).\n  const volatile __global float* fbc_all = fbc_part + (long)fbc_gq * {runs} * {};\n  for (int i = 0; i < {BLOCK_ROWS}; ++i) {{\n    const int fbc_q0 = fbc_r + {stride} * i;\n    float fbc_mm = -INFINITY;\n    for (int p = 0; p < fbc_used; ++p) fbc_mm = fmax(fbc_mm, fbc_all[(p * {bq} + fbc_q0) * {sp} + {hd}]);\n    float fbc_d = 0.0f;\n    {vt} fbc_sum[{vc}];\n    for (int h = 0; h < {vc}; ++h) fbc_sum[h] = 0.0f;\n    for (int p = 0; p < fbc_used; ++p) {{\n      const float fbc_mp = fbc_all[(p * {bq} + fbc_q0) * {sp} + {hd}];\n      const float fbc_w = fbc_mp == -INFINITY ? 0.0f : exp(fbc_mp - fbc_mm);\n      fbc_d += fbc_all[(p * {bq} + fbc_q0) * {sp} + {}] * fbc_w;\n      for (int h = 0; h < {vc}; ++h) fbc_sum[h] += fbc_w * {get};\n    }}\n    for (int h = 0; h < {vc}; ++h) {} = fbc_sum[h] / fbc_d;\n  }}\n  barrier(CLK_LOCAL_MEM_FENCE);\n  if (lid == 0) fbc_count[fbc_gq] = 0;\n  if (!fbc_ok || !fbc_have) return;\n{store}\n}}",
                bq * sp,
                hd + 1,
                bq * sp,
                hd + 1,
                values("fbc_q", "fbc_q0"),
            );
            let mut e = self.flat(s, (outer.max(1) * blocks_q * runs * g, g));
            let blocks = outer.max(1) * blocks_q;
            let part = blocks
                .checked_mul(runs * bq * sp)
                .ok_or("the attention's partials have more elements than fit in 64 bits")?;
            e.split = Some((part, blocks));
            return Ok(Some(e));
        }
        s.push_str(&direct);
        s.push_str("}\n");
        Ok(Some(self.flat(s, (outer.max(1) * blocks_q * g, g))))
    }
}

/// An `f32` literal of OpenCL C.
pub(super) fn f32_lit(v: f64) -> String {
    let v = v as f32;
    if v.is_finite() {
        format!("{v:?}f")
    } else if v > 0.0 {
        "INFINITY".into()
    } else {
        "(-INFINITY)".into()
    }
}

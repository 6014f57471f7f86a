//! The OpenCL form of an attention launch (`fbc_dialects::memory::attention`): flash-decoding.
//! The key positions are cut into chunks of `C` keys; one work-group of `G ≥ C` work-items per
//! query point and chunk, one key per work-item for the scores and `G / D` work-items per
//! output lane for the values, so a query's keys are read by many work-groups at once:
//!
//! ```text
//! q' = q (RoPE applied as it is loaded) into local memory
//! keys lo .. hi:  hi = min(M, last + 1), lo = max(0, last + 1 - window) (with `causal`)
//! work-group (p, c), keys j = c·C + t of lo .. hi:
//!     the chunk's keys staged E values at a time into local memory (coalesced: neighbouring
//!     work-items read neighbouring values of a key), then
//!     work-item t: s_t = cap(scale · q'·k_j)            (the dot product in e order)
//!     m = max_t s_t, w_t = exp(s_t - m), l = Σ_t w_t     (trees in local memory)
//!     o[e] = Σ_t w_t · v_j[e]                           (work-items along e, coalesced)
//!     one chunk: out = o / l; else the partial (o, m, l) into scratch, and the last
//!     work-group of the query point to count itself in combines them: M = max_c m_c,
//!     out[e] = Σ_c o_c[e]·exp(m_c - M) / Σ_c l_c·exp(m_c - M)
//! ```
//!
//! The combine is part of the same launch, as the skinny kernel's split-K sum is (one launch a
//! layer less in a decode step; the partials are a buffer of the launch, the counts the
//! function's split-K counts, and the last group leaves its count zero). A chunk outside
//! `lo .. hi` stores `m = -inf`, which the combine skips: a decode step at position `pos` reads
//! `pos + 1` keys, not the whole cache. Every sum runs in a fixed order, so results are the same run to run;
//! they differ from the reference executor's three steps (`attention_parts`) by the order of
//! the sums and the rescaling only.

use std::fmt::Write as _;

use fbc_dialects::memory::attention::{COS, K, Q, SIN, V};

use super::{affine, floor_pow2, unflatten, Cx, Emitted, KernelOptions};

/// Work-items of an attention work-group.
const GROUP: u64 = 128;

/// Values of each key a work-group stages at a time: the largest power of two up to 32 that
/// divides the head dimension `hd`, so the key block (`C × E`, padded to `E + 1` a key against
/// bank conflicts) takes a few KiB of local memory whatever the head size, and 32 neighbouring
/// work-items read 32 neighbouring values of one key (a 128-byte line) where `hd` allows. A
/// work-item reading its own key's values one at a time instead (the earlier form) made every
/// load of a warp touch 32 lines: the 16-layer Llama decode step's attention took 0.039 ms a
/// layer on the H200, 200 GB/s on its keys and values.
fn key_block(hd: u64) -> u64 {
    1 << hd.trailing_zeros().min(5)
}

impl Cx<'_> {
    pub(super) fn attention(&self, comment: &str, opts: &KernelOptions) -> Result<Emitted, String> {
        let k = self.k;
        let (a, n) = k.attention_dims().ok_or("not an attention launch")?;
        let (hd, keys) = (k.domain[n], k.domain[n + 1]);
        let points: u64 = k.domain[..n].iter().product();
        let (w, ix) = (self.w, self.w.ty());
        let g = floor_pow2(GROUP.min(opts.max_group.max(1)));
        // Keys of a chunk (at most the work-group; the profile's `[attention] decode_chunk`):
        // short chunks give a decode step's few queries many work-groups, and each work-item of
        // the value step few keys (latency, not bandwidth, bounds one work-group).
        let ck = opts.decode_chunk.clamp(1, g);
        let eb = key_block(hd);
        let chunks = keys.div_ceil(ck).max(1);
        // Key subsets of the output step: work-items (r, e) for e < D, r < R.
        let subsets = (g / hd).max(1);
        let out = self.out();
        if (0..k.maps.len()).any(|i| self.map_checked(i)) {
            return Err("an attention launch whose accesses the bounds prover leaves open".into());
        }
        if let Some(e) = self.attention_blocks(comment, opts)? {
            return Ok(e);
        }
        let mut s = String::new();
        s.push_str(comment);
        let mut params = self.params();
        if chunks > 1 {
            let part = "__global float* fbc_part, __global int* fbc_count";
            params = match params.find(", __global int* fbc_err") {
                Some(at) => format!("{}, {part}{}", &params[..at], &params[at..]),
                None => format!("{params}, {part}"),
            };
        }
        let _ = writeln!(s, "__kernel void {}({params}) {{", k.name);
        let _ = writeln!(
            s,
            "  // Attention, flash-decoding: a work-group of {g} per query point and chunk of {ck} keys ({chunks} chunk(s)), a key per work-item, its values staged {eb} at a time; {}.\n  __local float fbc_q[{hd}];\n  __local float fbc_k[{ck}][{}];\n  __local float fbc_p[{ck}];\n  __local float fbc_red[{g}];\n  __local float fbc_o[{}];\n{}  const {ix} gid = get_group_id(0) / {chunks};\n  const {ix} fbc_c = get_group_id(0) % {chunks};\n  const int lid = (int)get_local_id(0);",
            if chunks > 1 {
                "the last group of a query point to finish combines the partials"
            } else {
                "the output written here"
            },
            eb + 1,
            subsets * hd,
            if chunks > 1 { "  __local int fbc_done;\n" } else { "" }
        );
        // Barriers follow: a symbol out of range makes the group read and write nothing.
        s.push_str(&self.symbol_checks(false));
        // The keys this query sees, and this chunk's share of them.
        let (dims, lo, hi) = self.query_point(&mut s, &unflatten("gid", &k.domain[..n], w))?;
        let at = |e: &str, j: &str| at(&dims, e, j);
        let _ = writeln!(
            s,
            "  const {ix} fbc_j0 = max({lo}, fbc_c * {ck});\n  const {ix} fbc_j1 = fbc_ok ? min({hi}, (fbc_c + 1) * {ck}) : fbc_j0;"
        );
        // The query, rotated as it is loaded.
        let qv = self.rotated_query(&dims)?;
        let _ = writeln!(
            s,
            "  for ({ix} e = lid; e < {}; e += {g}) {{\n    fbc_q[e] = {qv};\n  }}\n  barrier(CLK_LOCAL_MEM_FENCE);",
            w.lit(hd)
        );
        // The score of this work-item's key: the chunk's keys staged `eb` values at a time
        // (value `e0 + t % eb` of key `t / eb` by work-item `t`, zero past the chunk), each
        // work-item adding its key's products in e order. Every work-item meets the barriers.
        let kv = self.read(K, &at(&format!("(e0 + fbc_t % {})", w.lit(eb)), "fbc_jt"))?.0;
        let mut score = format!("fbc_dot * {}", f32_lit(a.scale));
        if a.softcap > 0.0 {
            let (c, r) = (f32_lit(a.softcap), f32_lit(1.0 / a.softcap));
            score = format!("{c} * tanh(({score}) * {r})");
        }
        // A work-item's values of a staging round are all read before any is stored: the reads
        // (a few of them, from global memory) are in flight together instead of one after
        // another.
        let staged = ck * eb;
        let trips = staged.div_ceil(g);
        let within = if staged % g == 0 { String::new() } else { format!("fbc_t < {staged} && ") };
        let _ = writeln!(
            s,
            "  const {ix} fbc_j = fbc_j0 + lid;\n  float fbc_dot = 0.0f;\n  for ({ix} e0 = 0; e0 < {hdl}; e0 += {ebl}) {{\n    float fbc_kr[{trips}];\n    #pragma unroll\n    for (int fbc_i = 0; fbc_i < {trips}; ++fbc_i) {{\n      const int fbc_t = lid + fbc_i * {g};\n      const {ix} fbc_jt = fbc_j0 + fbc_t / {ebl};\n      fbc_kr[fbc_i] = {within}fbc_jt < fbc_j1 ? {kv} : 0.0f;\n    }}\n    if (e0 > 0) barrier(CLK_LOCAL_MEM_FENCE);\n    #pragma unroll\n    for (int fbc_i = 0; fbc_i < {trips}; ++fbc_i) {{\n      const int fbc_t = lid + fbc_i * {g};\n      {}fbc_k[fbc_t / {eb}][fbc_t % {eb}] = fbc_kr[fbc_i];\n    }}\n    barrier(CLK_LOCAL_MEM_FENCE);\n    if (lid < {ck}) {{\n      #pragma unroll\n      for (int e = 0; e < {eb}; ++e) fbc_dot += fbc_q[e0 + e] * fbc_k[lid][e];\n    }}\n  }}\n  float fbc_s = -INFINITY;\n  if (fbc_j < fbc_j1) fbc_s = {score};\n  fbc_red[lid] = fbc_s;",
            if within.is_empty() { String::new() } else { format!("if (fbc_t < {staged}) ") },
            hdl = w.lit(hd),
            ebl = w.lit(eb),
        );
        let tree = |combine: &str| {
            format!(
                "  barrier(CLK_LOCAL_MEM_FENCE);\n  for (int h = {}; h > 0; h >>= 1) {{\n    if (lid < h) fbc_red[lid] = {combine};\n    barrier(CLK_LOCAL_MEM_FENCE);\n  }}\n",
                g / 2
            )
        };
        s.push_str(&tree("fmax(fbc_red[lid], fbc_red[lid + h])"));
        let _ = writeln!(
            s,
            "  const float fbc_m = fbc_red[0];\n  const float fbc_w = fbc_j < fbc_j1 ? exp(fbc_s - fbc_m) : 0.0f;\n  if (lid < {ck}) fbc_p[lid] = fbc_w;\n  barrier(CLK_LOCAL_MEM_FENCE);\n  fbc_red[lid] = fbc_w;"
        );
        s.push_str(&tree("fbc_red[lid] + fbc_red[lid + h]"));
        // The weighted values: work-item (r, e) sums keys t ≡ r (mod R) of the chunk.
        let vv = self.read(V, &at("fbc_e", "(fbc_j0 + t)"))?.0;
        let _ = writeln!(
            s,
            "  const float fbc_l = fbc_red[0];\n  const {ix} fbc_n = fbc_j1 - fbc_j0;\n  for (int fbc_i = lid; fbc_i < {rd}; fbc_i += {g}) {{\n    const {ix} fbc_e = fbc_i % {hd};\n    float fbc_a = 0.0f;\n    #pragma unroll 8\n    for ({ix} t = fbc_i / {hd}; t < fbc_n; t += {subsets}) fbc_a += fbc_p[t] * {vv};\n    fbc_o[fbc_i] = fbc_a;\n  }}\n  barrier(CLK_LOCAL_MEM_FENCE);",
            rd = subsets * hd
        );
        let sum_o = (0..subsets).map(|r| format!("fbc_o[{} + e]", r * hd)).collect::<Vec<_>>();
        let stride = hd + 2;
        let d = at("e", &w.lit(0));
        let off = self.coord(out, 0, &d)?;
        if chunks > 1 {
            // Partials: [points, chunks, D + 2] = o, then m and l. The last group of the point
            // to count itself in combines them, every sum in a fixed order (the same bits every
            // run) and no load waiting on another: the greatest m by a tree over the group, then
            // per block of G chunks each work-item one chunk's factor f_c = exp(m_c - M) into
            // local memory (and its l_c·f_c into its own sum), and work-item (r, e) the chunks
            // ≡ r (mod R) of the block's o_c[e]·f_c; out[e] = Σ_r o_r[e] / Σ l_c·f_c.
            let combined =
                self.buffer_store(&off, &format!("({}) / fbc_lc", sum_o.join(" + ")), &d);
            let _ = writeln!(
                s,
                "  __global float* fbc_at = fbc_part + ((long)gid * {chunks} + fbc_c) * {stride};\n  if (!fbc_ok) return;\n  for ({ix} e = lid; e < {hdl}; e += {g}) fbc_at[e] = fbc_j0 < fbc_j1 ? {} : 0.0f;\n  if (lid == 0) {{\n    fbc_at[{hd}] = fbc_j0 < fbc_j1 ? fbc_m : -INFINITY;\n    fbc_at[{}] = fbc_j0 < fbc_j1 ? fbc_l : 0.0f;\n  }}\n  mem_fence(CLK_GLOBAL_MEM_FENCE);\n  barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);\n  if (lid == 0) fbc_done = atomic_inc(fbc_count + gid) == {};\n  barrier(CLK_LOCAL_MEM_FENCE);\n  if (!fbc_done) return;\n  mem_fence(CLK_GLOBAL_MEM_FENCE);\n  // Read past the caches that could hold another group's partial.\n  const volatile __global float* fbc_all = fbc_part + (long)gid * {};\n  float fbc_mc = -INFINITY;\n  for (int c = lid; c < {chunks}; c += {g}) fbc_mc = fmax(fbc_mc, fbc_all[c * {stride} + {hd}]);\n  fbc_red[lid] = fbc_mc;\n{}  fbc_mc = fbc_red[0];\n  float fbc_lc = 0.0f;\n  for (int fbc_i = lid; fbc_i < {rd}; fbc_i += {g}) fbc_o[fbc_i] = 0.0f;\n  for (int c0 = 0; c0 < {chunks}; c0 += {g}) {{\n    barrier(CLK_LOCAL_MEM_FENCE);\n    if (c0 + lid < {chunks}) {{\n      const int c = c0 + lid;\n      const float mc = fbc_all[c * {stride} + {hd}];\n      const float f = mc == -INFINITY ? 0.0f : exp(mc - fbc_mc);\n      fbc_lc += fbc_all[c * {stride} + {}] * f;\n      fbc_red[lid] = f;\n    }}\n    barrier(CLK_LOCAL_MEM_FENCE);\n    for (int fbc_i = lid; fbc_i < {rd}; fbc_i += {g}) {{\n      const int e = fbc_i % {hd};\n      float fbc_a = fbc_o[fbc_i];\n      for (int c = fbc_i / {hd}; c < {g} && c0 + c < {chunks}; c += {subsets}) fbc_a += fbc_all[(c0 + c) * {stride} + e] * fbc_red[c];\n      fbc_o[fbc_i] = fbc_a;\n    }}\n  }}\n  barrier(CLK_LOCAL_MEM_FENCE);\n  fbc_red[lid] = fbc_lc;\n{}  fbc_lc = fbc_red[0];\n  for ({ix} e = lid; e < {hdl}; e += {g}) {{\n    {combined}\n  }}\n  if (lid == 0) fbc_count[gid] = 0;\n}}",
                sum_o.join(" + "),
                hd + 1,
                chunks - 1,
                chunks * stride,
                tree("fmax(fbc_red[lid], fbc_red[lid + h])"),
                hd + 1,
                tree("fbc_red[lid] + fbc_red[lid + h]"),
                hdl = w.lit(hd),
                rd = subsets * hd,
            );
        } else {
            let store = self.buffer_store(&off, &format!("({}) / fbc_l", sum_o.join(" + ")), &d);
            let _ = writeln!(
                s,
                "  if (!fbc_ok) return;\n  for ({ix} e = lid; e < {}; e += {g}) {{\n    {store}\n  }}\n}}",
                w.lit(hd)
            );
        }
        let mut e = self.flat(s, (points.max(1) * chunks * g, g));
        if chunks > 1 {
            let part = points
                .checked_mul(chunks)
                .and_then(|n| n.checked_mul(stride))
                .ok_or("the attention's partials have more elements than fit in 64 bits")?;
            e.split = Some((part, points));
        }
        Ok(e)
    }
}

/// A query point's indices `dims` followed by `e` and `j` (the head dimension and the key).
fn at(dims: &[String], e: &str, j: &str) -> Vec<String> {
    let mut d = dims.to_vec();
    d.push(e.to_string());
    d.push(j.to_string());
    d
}

impl Cx<'_> {
    /// Declares the query point's indices `d0, d1, ..` as `exprs` into `s` and, where the
    /// launch is causal, `fbc_last` (the last key the query sees); returns the indices' names
    /// and the first and past-the-last key the query sees.
    fn query_point(
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
        let Some(last) = &a.last else { return Ok((dims, w.lit(0), w.lit(keys))) };
        let mut texts = at(&dims, &w.lit(0), &w.lit(0));
        texts.extend((0..k.symbols.len()).map(|j| format!("fbc_sym{j}")));
        let e = affine(&last.results[0], &last.vars(), &texts, w)?;
        let _ = writeln!(s, "  const {ix} fbc_last = {e};");
        let hi = format!("min(({ix}){}, fbc_last + 1)", w.lit(keys));
        let lo = if a.window > 0 {
            format!("max(({ix})0, fbc_last + 1 - {})", w.lit(a.window))
        } else {
            w.lit(0)
        };
        Ok((dims, lo, hi))
    }

    /// The query at point `dims` and head index `e`, rotated (RoPE) where the launch says so.
    fn rotated_query(&self, dims: &[String]) -> Result<String, String> {
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
/// tile (padded alike), the value tile, the scores (padded by four), the rows' key ranges, their
/// rescale factors and their sums.
fn block_local_bytes(bq: u64, bk: u64, hd: u64, ixb: u64) -> u64 {
    4 * (bq * (hd + 4) + bk * (hd + 4) + bk * hd + bq * (bk + 4) + 2 * bq) + 2 * bq * ixb
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
    ///       values of e, 4 float4 reads of q and K/8 of k for 16·K/8 products
    ///     work-item r < Q:  m' = max(m, the row's K scores) (in key order),
    ///                       p_j = exp(s_j - m'), l = l·exp(m - m') + Σ p_j (in key order)
    ///     work-item (r, c): o = o·exp(m - m') + p · v over its 4 rows × D/8 values
    ///                       (float4s of v where D is a multiple of 32), in key order
    ///   out = o / l, through local memory, stored two work-items a query
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
        let hd = k.domain[n];
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
        let out = self.out();
        let mut s = String::new();
        s.push_str(comment);
        let params = self.params();
        let _ = writeln!(
            s,
            "__kernel __attribute__((reqd_work_group_size({g}, 1, 1)))\nvoid {}({params}) {{",
            k.name
        );
        let _ = writeln!(
            s,
            "  // Attention, query blocks (FLAT): a work-group of {g} per {bq} queries of a head, keys in tiles of {bk} staged in local memory, online softmax; work-item (r, c) holds rows r + {stride}·i (i < {BLOCK_ROWS}), scores keys c + {lanes}·j (j < {kc}) and holds {vc} {vt} of each row's outputs.\n  __local float fbc_q[{bq}][{}] __attribute__((aligned(16)));\n  __local float fbc_k[{bk}][{}] __attribute__((aligned(16)));\n  __local float fbc_v[{bk}][{hd}] __attribute__((aligned(16)));\n  __local float fbc_p[{bq}][{}] __attribute__((aligned(16)));\n  __local float fbc_al[{bq}], fbc_ls[{bq}];\n  __local {ix} fbc_lo[{bq}], fbc_hi[{bq}];\n  const int lid = (int)get_local_id(0);\n  const int fbc_qi = lid / {ql}, fbc_ln = lid % {ql};\n  const {ix} fbc_outer = get_group_id(0) / {blocks_q};\n  const {ix} fbc_qv = (get_group_id(0) % {blocks_q}) * {bq} + fbc_qi;\n  const int fbc_have = fbc_qv < {};",
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
            "  for ({ix} e = fbc_ln; e < {}; e += {ql}) fbc_q[fbc_qi][e] = {qv};\n  barrier(CLK_LOCAL_MEM_FENCE);\n  {ix} fbc_blo = fbc_lo[0], fbc_bhi = fbc_hi[0];\n  for (int i = 1; i < {bq}; ++i) {{\n    if (fbc_hi[i] > fbc_lo[i]) {{\n      fbc_blo = fbc_bhi > fbc_blo ? min(fbc_blo, fbc_lo[i]) : fbc_lo[i];\n      fbc_bhi = max(fbc_bhi, fbc_hi[i]);\n    }}\n  }}\n  const int fbc_r = lid / {lanes}, fbc_c = lid % {lanes};\n  {ix} fbc_rlo[{BLOCK_ROWS}], fbc_rhi[{BLOCK_ROWS}];\n  {vt} fbc_o[{BLOCK_ROWS}][{vc}];\n  for (int i = 0; i < {BLOCK_ROWS}; ++i) {{\n    fbc_rlo[i] = fbc_lo[fbc_r + {stride} * i];\n    fbc_rhi[i] = fbc_hi[fbc_r + {stride} * i];\n    for (int h = 0; h < {vc}; ++h) fbc_o[i][h] = 0.0f;\n  }}\n  // Row lid's running maximum and sum (work-items lid < {bq}).\n  float fbc_m = -INFINITY, fbc_l = 0.0f;",
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
        let _ = writeln!(
            s,
            "  for ({ix} fbc_t0 = fbc_blo; fbc_t0 < fbc_bhi; fbc_t0 += {bk}) {{\n    barrier(CLK_LOCAL_MEM_FENCE);\n    for (int fbc_t = lid; fbc_t < {}; fbc_t += {g}) {{\n      const {ix} fbc_jt = fbc_t0 + fbc_t / {hd}, fbc_e = fbc_t % {hd};\n      const int fbc_in = fbc_jt < fbc_bhi;\n      fbc_k[fbc_t / {hd}][fbc_t % {hd}] = fbc_in ? {kv} : 0.0f;\n      fbc_v[fbc_t / {hd}][fbc_t % {hd}] = fbc_in ? {vv} : 0.0f;\n    }}\n    barrier(CLK_LOCAL_MEM_FENCE);\n    // Scores: rows fbc_r + {stride}·i against keys fbc_c + {lanes}·j, four values of e at a time.\n    float fbc_s[{BLOCK_ROWS}][{kc}];\n    for (int i = 0; i < {BLOCK_ROWS}; ++i)\n      for (int j = 0; j < {kc}; ++j) fbc_s[i][j] = 0.0f;\n    for (int e = 0; e < {hd}; e += 4) {{\n      float4 fbc_qe[{BLOCK_ROWS}], fbc_ke[{kc}];\n      for (int i = 0; i < {BLOCK_ROWS}; ++i) fbc_qe[i] = {q4};\n      for (int j = 0; j < {kc}; ++j) fbc_ke[j] = {k4};\n      for (int i = 0; i < {BLOCK_ROWS}; ++i)\n        for (int j = 0; j < {kc}; ++j)\n          fbc_s[i][j] = fma(fbc_qe[i].w, fbc_ke[j].w, fma(fbc_qe[i].z, fbc_ke[j].z, fma(fbc_qe[i].y, fbc_ke[j].y, fma(fbc_qe[i].x, fbc_ke[j].x, fbc_s[i][j]))));\n    }}\n    // Masked keys score -inf.\n    for (int i = 0; i < {BLOCK_ROWS}; ++i)\n      for (int j = 0; j < {kc}; ++j) {{\n        const {ix} fbc_j = fbc_t0 + fbc_c + {lanes} * j;\n        fbc_p[fbc_r + {stride} * i][fbc_c + {lanes} * j] = (fbc_j >= fbc_rlo[i] && fbc_j < fbc_rhi[i]) ? {score} : -INFINITY;\n      }}\n    barrier(CLK_LOCAL_MEM_FENCE);\n    if (lid < {bq}) {{\n      float fbc_mn = fbc_m;\n      for (int t = 0; t < {bk}; ++t) fbc_mn = fmax(fbc_mn, fbc_p[lid][t]);\n      // A tile this row sees none of (and none before it) leaves the sums as they are.\n      const float fbc_a = fbc_mn == -INFINITY ? 1.0f : exp(fbc_m - fbc_mn);\n      float fbc_ps = 0.0f;\n      for (int t = 0; t < {bk}; ++t) {{\n        const float x = fbc_p[lid][t];\n        const float fbc_pe = x == -INFINITY ? 0.0f : exp(x - fbc_mn);\n        fbc_p[lid][t] = fbc_pe;\n        fbc_ps += fbc_pe;\n      }}\n      fbc_l = fbc_l * fbc_a + fbc_ps;\n      fbc_m = fbc_mn;\n      fbc_al[lid] = fbc_a;\n    }}\n    barrier(CLK_LOCAL_MEM_FENCE);\n    for (int i = 0; i < {BLOCK_ROWS}; ++i) {{\n      const float fbc_a = fbc_al[fbc_r + {stride} * i];\n      for (int h = 0; h < {vc}; ++h) fbc_o[i][h] *= fbc_a;\n    }}\n    for (int t = 0; t < {bk}; t += 4) {{\n      float4 fbc_pt[{BLOCK_ROWS}];\n      for (int i = 0; i < {BLOCK_ROWS}; ++i) fbc_pt[i] = {p4};{pv}\n    }}\n  }}",
            bk * hd
        );
        let d = at("e", &w.lit(0));
        let off = self.coord(out, 0, &d)?;
        let store = self.buffer_store(&off, "fbc_q[fbc_qi][e]", &d);
        let o_at = values("fbc_q", &row);
        let _ = writeln!(
            s,
            "  // out = o / l, through the query block's local memory.\n  if (lid < {bq}) fbc_ls[lid] = fbc_l;\n  barrier(CLK_LOCAL_MEM_FENCE);\n  for (int i = 0; i < {BLOCK_ROWS}; ++i) {{\n    const float fbc_d = fbc_ls[fbc_r + {stride} * i];\n    for (int h = 0; h < {vc}; ++h) {o_at} = fbc_o[i][h] / fbc_d;\n  }}\n  barrier(CLK_LOCAL_MEM_FENCE);\n  if (!fbc_ok || !fbc_have) return;\n  for ({ix} e = fbc_ln; e < {}; e += {ql}) {{\n    {store}\n  }}\n}}",
            w.lit(hd)
        );
        Ok(Some(self.flat(s, (outer.max(1) * blocks_q * g, g))))
    }
}

/// An `f32` literal of OpenCL C.
fn f32_lit(v: f64) -> String {
    let v = v as f32;
    if v.is_finite() {
        format!("{v:?}f")
    } else if v > 0.0 {
        "INFINITY".into()
    } else {
        "(-INFINITY)".into()
    }
}

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

/// Keys of a chunk (at most the work-group): short chunks give a decode step's few queries
/// many work-groups, and each work-item of the value step few keys (latency, not bandwidth,
/// bounds one work-group: measured on the H200, chunks of 128 keys took 25 µs a launch where
/// only one chunk per head had keys).
const CHUNK: u64 = 64;

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
        let ck = CHUNK.min(g);
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
        let _ = writeln!(
            s,
            "  const {ix} fbc_j = fbc_j0 + lid;\n  float fbc_dot = 0.0f;\n  for ({ix} e0 = 0; e0 < {hdl}; e0 += {ebl}) {{\n    if (e0 > 0) barrier(CLK_LOCAL_MEM_FENCE);\n    for (int fbc_t = lid; fbc_t < {}; fbc_t += {g}) {{\n      const {ix} fbc_jt = fbc_j0 + fbc_t / {ebl};\n      fbc_k[fbc_t / {eb}][fbc_t % {eb}] = fbc_jt < fbc_j1 ? {kv} : 0.0f;\n    }}\n    barrier(CLK_LOCAL_MEM_FENCE);\n    if (lid < {ck}) {{\n      #pragma unroll\n      for (int e = 0; e < {eb}; ++e) fbc_dot += fbc_q[e0 + e] * fbc_k[lid][e];\n    }}\n  }}\n  float fbc_s = -INFINITY;\n  if (fbc_j < fbc_j1) fbc_s = {score};\n  fbc_red[lid] = fbc_s;",
            ck * eb,
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
            // to count itself in adds them in chunk order (the same bits every run).
            let combined = self.buffer_store(&off, "fbc_oc / fbc_lc", &d);
            let _ = writeln!(
                s,
                "  __global float* fbc_at = fbc_part + ((long)gid * {chunks} + fbc_c) * {stride};\n  if (!fbc_ok) return;\n  for ({ix} e = lid; e < {hdl}; e += {g}) fbc_at[e] = fbc_j0 < fbc_j1 ? {} : 0.0f;\n  if (lid == 0) {{\n    fbc_at[{hd}] = fbc_j0 < fbc_j1 ? fbc_m : -INFINITY;\n    fbc_at[{}] = fbc_j0 < fbc_j1 ? fbc_l : 0.0f;\n  }}\n  mem_fence(CLK_GLOBAL_MEM_FENCE);\n  barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);\n  if (lid == 0) fbc_done = atomic_inc(fbc_count + gid) == {};\n  barrier(CLK_LOCAL_MEM_FENCE);\n  if (!fbc_done) return;\n  mem_fence(CLK_GLOBAL_MEM_FENCE);\n  // Read past the caches that could hold another group's partial.\n  const volatile __global float* fbc_all = fbc_part + (long)gid * {};\n  float fbc_mc = -INFINITY;\n  for (int c = 0; c < {chunks}; ++c) fbc_mc = fmax(fbc_mc, fbc_all[c * {stride} + {hd}]);\n  for ({ix} e = lid; e < {hdl}; e += {g}) {{\n    float fbc_lc = 0.0f, fbc_oc = 0.0f;\n    for (int c = 0; c < {chunks}; ++c) {{\n      const float mc = fbc_all[c * {stride} + {hd}];\n      if (mc == -INFINITY) continue;\n      const float f = exp(mc - fbc_mc);\n      fbc_lc += fbc_all[c * {stride} + {}] * f;\n      fbc_oc += fbc_all[c * {stride} + e] * f;\n    }}\n    {combined}\n  }}\n  if (lid == 0) fbc_count[gid] = 0;\n}}",
                sum_o.join(" + "),
                hd + 1,
                chunks - 1,
                chunks * stride,
                hd + 1,
                hdl = w.lit(hd),
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

/// Queries of a work-group of the query-block form.
const BLOCK_QUERIES: u64 = 16;

/// Keys of a tile of the query-block form.
const BLOCK_KEYS: u64 = 32;

/// Work-items per query of the query-block form: each holds `D / 8` of its query's output
/// values and scores four keys of a tile.
const BLOCK_LANES: u64 = 8;

/// The fewest queries per head that take the query-block form (a prompt): a shorter attention
/// (a decode step's one query) takes flash-decoding, whose chunks give it work-groups.
pub(crate) const BLOCK_MIN_QUERIES: u64 = 64;

impl Cx<'_> {
    /// The query-block form (FLAT, the flash-attention dataflow) of an attention launch with
    /// many queries per head, or `None` where it does not apply (fewer than
    /// [`BLOCK_MIN_QUERIES`] queries along the innermost query dimension, keys or values that
    /// move with the query, a head size not a multiple of [`BLOCK_LANES`], or local memory too
    /// small):
    ///
    /// ```text
    /// work-group: 16 queries of one head (8 work-items each), keys of all 16 in tiles of 32:
    ///   q block (RoPE applied as it is loaded) into local memory
    ///   per tile: keys and values staged into local memory (coalesced along e)
    ///     work-item (q, l): scores of keys l, l + 8, l + 16, l + 24 (the dot product in e order)
    ///     m' = max(m, max of the tile's scores)           (the query's 32, in key order)
    ///     p_j = exp(s_j - m'), l = l·exp(m - m') + Σ p_j  (in key order)
    ///     o[e] = o[e]·exp(m - m') + Σ_j p_j · v_j[e]      (its D / 8 values of e, in key order)
    ///   out = o / l
    /// ```
    ///
    /// Each key and value is read from memory once per 16 queries instead of once per query;
    /// the scores never leave local memory. Masked keys (after `last`, before the window) score
    /// `-inf`; a tile a query sees none of leaves its sums alone. Every sum runs in a fixed
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
        let (bq, bk, lanes) = (BLOCK_QUERIES, BLOCK_KEYS, BLOCK_LANES);
        let g = bq * lanes;
        let Some(qd) = n.checked_sub(1) else { return Ok(None) };
        let queries = k.domain[qd];
        let local = 4 * (bq * hd + bk * (hd + 1) + bk * hd + bq * bk + 2 * bq);
        let moves = |i: usize| super::map_uses(&k.maps[i], qd);
        if queries < BLOCK_MIN_QUERIES
            || hd % lanes != 0
            || moves(K)
            || moves(V)
            || g > opts.max_group
            || local > opts.local_mem_bytes
        {
            return Ok(None);
        }
        let per = hd / lanes;
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
            "  // Attention, query blocks (FLAT): a work-group of {g} per {bq} queries of a head ({lanes} work-items a query, {per} output values each), the keys in tiles of {bk} staged in local memory, online softmax.\n  __local float fbc_q[{bq}][{hd}];\n  __local float fbc_k[{bk}][{}];\n  __local float fbc_v[{bk}][{hd}];\n  __local float fbc_p[{bq}][{bk}];\n  __local {ix} fbc_lo[{bq}], fbc_hi[{bq}];\n  const int lid = (int)get_local_id(0);\n  const int fbc_qi = lid / {lanes}, fbc_ln = lid % {lanes};\n  const {ix} fbc_outer = get_group_id(0) / {blocks_q};\n  const {ix} fbc_qv = (get_group_id(0) % {blocks_q}) * {bq} + fbc_qi;\n  const int fbc_have = fbc_qv < {};",
            hd + 1,
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
            "  for ({ix} e = fbc_ln; e < {}; e += {lanes}) fbc_q[fbc_qi][e] = {qv};\n  barrier(CLK_LOCAL_MEM_FENCE);\n  {ix} fbc_blo = fbc_lo[0], fbc_bhi = fbc_hi[0];\n  for (int i = 1; i < {bq}; ++i) {{\n    if (fbc_hi[i] > fbc_lo[i]) {{\n      fbc_blo = fbc_bhi > fbc_blo ? min(fbc_blo, fbc_lo[i]) : fbc_lo[i];\n      fbc_bhi = max(fbc_bhi, fbc_hi[i]);\n    }}\n  }}\n  float fbc_m = -INFINITY, fbc_l = 0.0f;\n  float fbc_o[{per}];\n  for (int i = 0; i < {per}; ++i) fbc_o[i] = 0.0f;",
            w.lit(hd)
        );
        let (kv, vv) =
            (self.read(K, &at("fbc_e", "fbc_jt"))?.0, self.read(V, &at("fbc_e", "fbc_jt"))?.0);
        let mut score = format!("fbc_dot * {}", f32_lit(a.scale));
        if a.softcap > 0.0 {
            let (c, r) = (f32_lit(a.softcap), f32_lit(1.0 / a.softcap));
            score = format!("{c} * tanh(({score}) * {r})");
        }
        let each = bk / lanes;
        let _ = writeln!(
            s,
            "  for ({ix} fbc_t0 = fbc_blo; fbc_t0 < fbc_bhi; fbc_t0 += {bk}) {{\n    barrier(CLK_LOCAL_MEM_FENCE);\n    for (int fbc_t = lid; fbc_t < {}; fbc_t += {g}) {{\n      const {ix} fbc_jt = fbc_t0 + fbc_t / {hd}, fbc_e = fbc_t % {hd};\n      const int fbc_in = fbc_jt < fbc_bhi;\n      fbc_k[fbc_t / {hd}][fbc_t % {hd}] = fbc_in ? {kv} : 0.0f;\n      fbc_v[fbc_t / {hd}][fbc_t % {hd}] = fbc_in ? {vv} : 0.0f;\n    }}\n    barrier(CLK_LOCAL_MEM_FENCE);\n    // Scores of keys fbc_ln + {lanes}·c of the tile; masked ones -inf.\n    float fbc_s[{each}];\n    float fbc_mt = -INFINITY;\n    for (int c = 0; c < {each}; ++c) {{\n      const int kj = fbc_ln + {lanes} * c;\n      const {ix} fbc_j = fbc_t0 + kj;\n      float fbc_dot = 0.0f;\n      for (int e = 0; e < {hd}; ++e) fbc_dot += fbc_q[fbc_qi][e] * fbc_k[kj][e];\n      fbc_s[c] = (fbc_j >= fbc_j0 && fbc_j < fbc_j1) ? {score} : -INFINITY;\n      fbc_p[fbc_qi][kj] = fbc_s[c];\n    }}\n    barrier(CLK_LOCAL_MEM_FENCE);\n    for (int t = 0; t < {bk}; ++t) fbc_mt = fmax(fbc_mt, fbc_p[fbc_qi][t]);\n    const float fbc_mn = fmax(fbc_m, fbc_mt);\n    // A tile this query sees none of (and none before it) leaves the sums as they are.\n    const float fbc_al = fbc_mn == -INFINITY ? 1.0f : exp(fbc_m - fbc_mn);\n    barrier(CLK_LOCAL_MEM_FENCE);\n    for (int c = 0; c < {each}; ++c)\n      fbc_p[fbc_qi][fbc_ln + {lanes} * c] = fbc_s[c] == -INFINITY ? 0.0f : exp(fbc_s[c] - fbc_mn);\n    barrier(CLK_LOCAL_MEM_FENCE);\n    float fbc_ps = 0.0f;\n    for (int t = 0; t < {bk}; ++t) fbc_ps += fbc_p[fbc_qi][t];\n    fbc_l = fbc_l * fbc_al + fbc_ps;\n    for (int i = 0; i < {per}; ++i) {{\n      const int e = fbc_ln + {lanes} * i;\n      float fbc_a = fbc_o[i] * fbc_al;\n      for (int t = 0; t < {bk}; ++t) fbc_a += fbc_p[fbc_qi][t] * fbc_v[t][e];\n      fbc_o[i] = fbc_a;\n    }}\n    fbc_m = fbc_mn;\n  }}",
            bk * hd
        );
        let d = at("e", &w.lit(0));
        let off = self.coord(out, 0, &d)?;
        let store = self.buffer_store(&off, "fbc_o[i] / fbc_l", &d);
        let _ = writeln!(
            s,
            "  if (!fbc_ok || !fbc_have) return;\n  for (int i = 0; i < {per}; ++i) {{\n    const {ix} e = fbc_ln + {lanes} * i;\n    {store}\n  }}\n}}"
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

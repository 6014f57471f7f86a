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
        let mut dims: Vec<String> = unflatten("gid", &k.domain[..n], w);
        for (i, e) in dims.iter_mut().enumerate() {
            let _ = writeln!(s, "  const {ix} d{i} = {e};");
            *e = format!("d{i}");
        }
        let at = |e: &str, j: &str| {
            let mut d = dims.clone();
            d.push(e.to_string());
            d.push(j.to_string());
            d
        };
        // The keys this query sees, and this chunk's share of them.
        let (lo, hi) = match &a.last {
            Some(last) => {
                let mut texts = at(&w.lit(0), &w.lit(0));
                texts.extend((0..k.symbols.len()).map(|j| format!("fbc_sym{j}")));
                let e = affine(&last.results[0], &last.vars(), &texts, w)?;
                let _ = writeln!(s, "  const {ix} fbc_last = {e};");
                let hi = format!("min(({ix}){}, fbc_last + 1)", w.lit(keys));
                let lo = if a.window > 0 {
                    format!("max(({ix})0, fbc_last + 1 - {})", w.lit(a.window))
                } else {
                    w.lit(0)
                };
                (lo, hi)
            }
            None => (w.lit(0), w.lit(keys)),
        };
        let _ = writeln!(
            s,
            "  const {ix} fbc_j0 = max({lo}, fbc_c * {ck});\n  const {ix} fbc_j1 = fbc_ok ? min({hi}, (fbc_c + 1) * {ck}) : fbc_j0;"
        );
        // The query, rotated as it is loaded.
        let e_dims = at("e", &w.lit(0));
        let mut qv = self.read(Q, &e_dims)?.0;
        if a.rope {
            let half = hd / 2;
            let partner = format!("(e < {h} ? e + {h} : e - {h})", h = w.lit(half));
            let rot = self.read(Q, &at(&partner, &w.lit(0)))?.0;
            let (c, sn) = (self.read(COS, &e_dims)?.0, self.read(SIN, &e_dims)?.0);
            qv = format!("{qv} * {c} + (e < {} ? -({rot}) : {rot}) * {sn}", w.lit(half));
        }
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

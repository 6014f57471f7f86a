//! The grouped form of flash-decoding: the attention of few queries per head (a decode step),
//! where the query heads that read one key/value head (grouped-query attention, `h floordiv g`
//! in the key and value maps) are one work-group's. The keys are cut into chunks of `C`; one
//! work-group of `G` work-items per group of `H` query points and chunk:
//!
//! ```text
//! the chunk's keys and values: every load of the work-group issued at once (a work-item's
//!   share held in registers), the keys stored into local memory, the H queries (RoPE applied
//!   as they are loaded) beside them
//! team h (G / H work-items, one query head), lane t:
//!     s_j = cap(scale · q'_h·k_j) for keys j ≡ t of the chunk  (e in order, k read from local)
//!     (m, l) of the lane's scores, then a tree over the team: m_h = max s, l_h = Σ exp(s - m_h)
//!     p_hj = exp(s_j - m_h) into local memory, the values into the keys' place
//!     o_h[e] = Σ_j p_hj · v_j[e]  (lanes along e, key subsets where the team is wider than D)
//! one chunk: out = o / l; else (o, m, l) into scratch, and the last work-group of the query
//!   group to count itself in combines every chunk's: team h takes head h, each lane some
//!   chunks' (m, l) folded by a tree, then out[e] = Σ_c o_c[e]·exp(m_c - M) / L, the partials
//!   read beside the (m, l) where a work-item's registers hold them all, else a batch of chunks
//!   at a time after them, a batch's loads in flight together
//! ```
//!
//! Against the one-head form before it (a work-group per query head and chunk, the keys staged
//! 32 values at a time, then the values read), a key and value is read from memory once per
//! `H` heads instead of once per head, a work-group's loads wait for memory once instead of
//! once per staging round and once more for the values, and the softmax's two trees are one
//! tree of (max, sum) pairs over a team: on a lent H100 the 16-layer Llama 3.2-1B decode
//! step's attention launches took 14.1-16.2 µs against 17.1-19.6 µs at position 2047
//! (`tests/bench/h200.sh` part `bins`). Every sum runs in a fixed order: the same bits run to
//! run.

use std::fmt::Write as _;

use fbc_dialects::memory::attention::{K, V};
use fbc_index::{BinOp, Expr, IndexMap};

use super::attention::{at, f32_lit};
use super::{floor_pow2, map_uses, unflatten, Cx, Emitted, KernelOptions};

/// Work-items of a work-group.
const GROUP: u64 = 128;

/// The most query heads a work-group takes (its teams stay at least 16 work-items wide).
const MAX_HEADS: u64 = 8;

/// Values of the chunk's keys (and as many of its values) a work-item holds in registers: a
/// chunk has at most `STAGE_REGS · G / D` keys (64 of a head of 64, 16 of a head of 256), all
/// read at once.
const STAGE_REGS: u64 = 32;

/// Partial values a work-item of the combine holds in registers: where all of its chunks' fit,
/// it reads them beside the chunks' maxima and sums (one wait for memory); otherwise in
/// batches of this many after them.
const COMBINE_REGS: u64 = 64;

/// How dimension `d` enters `m`'s results: `None` where it appears other than as `d floordiv g`
/// (one `g` throughout), `Some(None)` where it does not appear, `Some(Some(g))` otherwise.
fn quotient_of(m: &IndexMap, d: usize) -> Option<Option<u64>> {
    fn walk(e: &Expr, name: &str, g: &mut Option<u64>) -> bool {
        match e {
            Expr::Var(v) => v != name,
            Expr::Const(_) => true,
            Expr::Neg(a) => walk(a, name, g),
            Expr::Bin(BinOp::FloorDiv, a, b) if matches!(&**a, Expr::Var(v) if v == name) => {
                match **b {
                    Expr::Const(c) if c > 0 && g.is_none_or(|x| x == c as u64) => {
                        *g = Some(c as u64);
                        true
                    }
                    _ => false,
                }
            }
            Expr::Bin(_, a, b) => walk(a, name, g) && walk(b, name, g),
        }
    }
    let name = m.dims.get(d)?;
    let mut g = None;
    m.results.iter().all(|e| walk(e, name, &mut g)).then_some(g)
}

/// The query dimension whose neighbouring points share keys and values, and how many of them
/// a work-group takes (a power of two up to [`MAX_HEADS`] dividing the dimension's extent and
/// the heads per key head); `(0, 1)` where none do.
fn shared_heads(
    k: &fbc_dialects::memory::Kernel,
    n: usize,
    last: Option<&IndexMap>,
) -> (usize, u64) {
    for d in 0..n {
        if last.is_some_and(|l| map_uses(l, d)) {
            continue;
        }
        let (Some(kq), Some(vq)) = (quotient_of(&k.maps[K], d), quotient_of(&k.maps[V], d)) else {
            continue;
        };
        let extent = k.domain[d];
        let g = match (kq, vq) {
            (Some(a), Some(b)) if a == b => a,
            (Some(a), None) | (None, Some(a)) => a,
            (None, None) => extent,
            _ => continue,
        };
        let mut h = MAX_HEADS;
        while h > 1 && (g % h != 0 || extent % h != 0) {
            h /= 2;
        }
        if h > 1 {
            return (d, h);
        }
    }
    (0, 1)
}

impl Cx<'_> {
    /// The grouped flash-decoding kernel (module docs) of an attention launch, or `None` where
    /// a head is wider than `STAGE_REGS · G` values or one key's local memory does not fit the
    /// device.
    pub(super) fn attention_grouped(
        &self,
        comment: &str,
        opts: &KernelOptions,
    ) -> Result<Option<Emitted>, String> {
        let k = self.k;
        let (a, n) = k.attention_dims().ok_or("not an attention launch")?;
        let (hd, keys) = (k.domain[n], k.domain[n + 1]);
        let points: u64 = k.domain[..n].iter().product();
        let (w, ix) = (self.w, self.w.ty());
        let g = floor_pow2(GROUP.min(opts.max_group.max(1)));
        let (gd, heads) = shared_heads(k, n, a.last.as_ref());
        let heads = heads.min(g);
        let team = g / heads;
        // Key subsets of the value step: a team wider than the head sums keys t ≡ r (mod R).
        let subsets = (team / hd).max(1);
        // The keys, then the values, in one local array.
        let local_bytes = |ck: u64| {
            let chunks = keys.div_ceil(ck).max(1);
            let factors = if chunks > 1 { heads * chunks } else { 0 };
            4 * (ck * (hd + 1)
                + heads * hd
                + heads * ck
                + 2 * g
                + heads * subsets * hd
                + factors
                + 1)
        };
        let mut ck = floor_pow2(opts.decode_chunk.min(STAGE_REGS * g / hd.max(1)).max(1));
        while ck > 1 && local_bytes(ck) > opts.local_mem_bytes {
            ck /= 2;
        }
        if ck * hd > STAGE_REGS * g || local_bytes(ck) > opts.local_mem_bytes {
            return Ok(None);
        }
        let chunks = keys.div_ceil(ck).max(1);
        let groups = points / heads;
        let out = self.out();

        let mut s = String::new();
        s.push_str(comment);
        let params = if chunks > 1 { self.params_with_split() } else { self.params() };
        let _ = writeln!(
            s,
            "__kernel __attribute__((reqd_work_group_size({g}, 1, 1)))\nvoid {}({params}) {{",
            k.name
        );
        let factors = if chunks > 1 {
            format!("  __local float fbc_f[{heads}][{chunks}];\n")
        } else {
            String::new()
        };
        let _ = writeln!(
            s,
            "  // Attention, flash-decoding: a work-group of {g} per {heads} query head(s) sharing their keys and chunk of {ck} keys ({chunks} chunk(s)), a team of {team} work-items per head; {}.\n  __local float fbc_k[{ck}][{}];\n  __local float fbc_q[{heads}][{hd}];\n  __local float fbc_p[{heads}][{ck}];\n  __local float fbc_rm[{g}], fbc_rl[{g}];\n  __local float fbc_o[{heads}][{}];\n{factors}{}  const {ix} gid = get_group_id(0) / {chunks};\n  const {ix} fbc_c = get_group_id(0) % {chunks};\n  const int lid = (int)get_local_id(0);\n  const int fbc_h = lid / {team}, fbc_ln = lid % {team};",
            if chunks > 1 {
                "the last group of a query group to finish combines the partials"
            } else {
                "the output written here"
            },
            hd + 1,
            subsets * hd,
            if chunks > 1 { "  __local int fbc_done;\n" } else { "" }
        );
        // Barriers follow: a symbol out of range makes the group read and write nothing.
        s.push_str(&self.symbol_checks(false));
        // The group's first query point (head `heads · i` along dimension `gd`), the keys its
        // heads see (the `causal` map does not read `gd`) and this chunk's share of them.
        let mut gdom = k.domain[..n].to_vec();
        gdom[gd] /= heads;
        let mut exprs = unflatten("gid", &gdom, w);
        if heads > 1 {
            exprs[gd] = format!("({}) * {}", exprs[gd], w.lit(heads));
        }
        let (dims, lo, hi) = self.query_point(&mut s, &exprs)?;
        let head_dims = |h: &str| {
            let mut d = dims.clone();
            if heads > 1 {
                d[gd] = format!("({} + {h})", d[gd]);
            }
            d
        };
        let _ = writeln!(
            s,
            "  const {ix} fbc_j0 = max({lo}, fbc_c * {ckl});\n  const {ix} fbc_j1 = fbc_ok ? min({hi}, (fbc_c + 1) * {ckl}) : fbc_j0;\n  const {ix} fbc_n = fbc_j1 - fbc_j0;",
            ckl = w.lit(ck)
        );
        // The chunk's keys and values: value `x % D` of key `x / D` by work-item `x mod G`,
        // every read issued before any is stored (zero past the chunk's keys); the keys into
        // local memory now, the values into the same array once the scores are taken.
        let total = ck * hd;
        let per = total.div_ceil(g);
        let guard = if per * g == total { String::new() } else { format!("fbc_x < {total} && ") };
        let stored =
            if per * g == total { String::new() } else { format!("if (fbc_x < {total}) ") };
        let kv = |i: usize| self.read(i, &at(&dims, "fbc_e", "fbc_jt")).map(|r| r.0);
        let (kr, vr) = (kv(K)?, kv(V)?);
        let stage = |arr: &str| {
            format!(
                "  #pragma unroll\n  for (int i = 0; i < {per}; ++i) {{\n    const int fbc_x = lid + i * {g};\n    {stored}fbc_k[fbc_x / {hd}][fbc_x % {hd}] = {arr}[i];\n  }}"
            )
        };
        let _ = writeln!(
            s,
            "  float fbc_kr[{per}], fbc_vr[{per}];\n  #pragma unroll\n  for (int i = 0; i < {per}; ++i) {{\n    const int fbc_x = lid + i * {g};\n    const {ix} fbc_jt = fbc_j0 + fbc_x / {hd}, fbc_e = fbc_x % {hd};\n    const int fbc_in = {guard}fbc_jt < fbc_j1;\n    fbc_kr[i] = fbc_in ? {kr} : 0.0f;\n    fbc_vr[i] = fbc_in ? {vr} : 0.0f;\n  }}\n{}",
            stage("fbc_kr")
        );
        // The queries, rotated as they are loaded.
        let qv = self.rotated_query(&head_dims("fbc_qh"))?;
        let _ = writeln!(
            s,
            "  for (int fbc_i = lid; fbc_i < {}; fbc_i += {g}) {{\n    const int fbc_qh = fbc_i / {hd};\n    const {ix} e = fbc_i % {hd};\n    fbc_q[fbc_qh][e] = {qv};\n  }}\n  barrier(CLK_LOCAL_MEM_FENCE);",
            heads * hd
        );
        // Scores: lane t of team h scores keys t, t + T, .. of the chunk.
        let mut score = format!("fbc_dot * {}", f32_lit(a.scale));
        if a.softcap > 0.0 {
            let (c, r) = (f32_lit(a.softcap), f32_lit(1.0 / a.softcap));
            score = format!("{c} * tanh(({score}) * {r})");
        }
        let ns = ck.div_ceil(team);
        let unroll = 1u64 << hd.trailing_zeros().min(4);
        let _ = writeln!(
            s,
            "  float fbc_m = -INFINITY, fbc_l = 0.0f;\n  for (int u = 0; u < {ns}; ++u) {{\n    const int t = fbc_ln + u * {team};\n    float fbc_dot = 0.0f;\n    if (t < fbc_n) {{\n      #pragma unroll {unroll}\n      for (int e = 0; e < {hd}; ++e) fbc_dot = fma(fbc_q[fbc_h][e], fbc_k[t][e], fbc_dot);\n    }}\n    const float fbc_s = t < fbc_n ? {score} : -INFINITY;\n    if (t < {ck}) fbc_p[fbc_h][t] = fbc_s;\n    fbc_m = fmax(fbc_m, fbc_s);\n  }}\n  for (int t = fbc_ln; t < {ck}; t += {team}) fbc_l += fbc_p[fbc_h][t] == -INFINITY ? 0.0f : exp(fbc_p[fbc_h][t] - fbc_m);"
        );
        s.push_str(&pair_tree(team));
        // Each lane turns its own scores into weights (no barrier before it); the values take
        // the keys' place (the tree's barriers end every read of the keys).
        let _ = writeln!(
            s,
            "  const float fbc_mh = fbc_rm[fbc_h * {team}], fbc_lh = fbc_rl[fbc_h * {team}];\n  for (int t = fbc_ln; t < {ck}; t += {team}) {{\n    const float x = fbc_p[fbc_h][t];\n    fbc_p[fbc_h][t] = x == -INFINITY ? 0.0f : exp(x - fbc_mh);\n  }}\n{}\n  barrier(CLK_LOCAL_MEM_FENCE);",
            stage("fbc_vr")
        );
        // The weighted values: lane (r, e) sums keys t ≡ r (mod R) of value e.
        let _ = writeln!(
            s,
            "  for (int fbc_i = fbc_ln; fbc_i < {rd}; fbc_i += {team}) {{\n    const int fbc_r = fbc_i / {hd}, fbc_e = fbc_i % {hd};\n    float fbc_a = 0.0f;\n    #pragma unroll 8\n    for ({ix} t = fbc_r; t < fbc_n; t += {subsets}) fbc_a = fma(fbc_p[fbc_h][t], fbc_k[t][fbc_e], fbc_a);\n    fbc_o[fbc_h][fbc_i] = fbc_a;\n  }}\n  barrier(CLK_LOCAL_MEM_FENCE);",
            rd = subsets * hd
        );
        let sum_at = |e: &str| {
            (0..subsets)
                .map(|r| format!("fbc_o[fbc_h][{} + {e}]", r * hd))
                .collect::<Vec<_>>()
                .join(" + ")
        };
        let sum_o = sum_at("e");
        let dims_h = head_dims("fbc_h");
        let stride = hd + 2;
        if chunks == 1 {
            let store = self.output_loop(
                &dims_h,
                "fbc_ln",
                team,
                |e| format!("({}) / fbc_lh", sum_at(&format!("({e})"))),
                "    ",
            )?;
            let _ = writeln!(s, "  if (fbc_ok) {{\n{store}\n  }}\n}}");
        } else {
            let ne = hd.div_ceil(team);
            let preload = chunks * ne <= COMBINE_REGS;
            // A buffer takes each lane's values from its registers; an image, whole texels of
            // them through local memory (the partial sums' array, free by now).
            let store = if self.is_image(out) {
                format!(
                    "  for (int v = 0; v < {ne}; ++v) {{\n    const {ix} e = fbc_ln + v * {team};\n    if (e < {hdl}) fbc_o[fbc_h][e] = fbc_acc[v] / fbc_lc;\n  }}\n  barrier(CLK_LOCAL_MEM_FENCE);\n{}",
                    self.output_loop(&dims_h, "fbc_ln", team, |e| format!("fbc_o[fbc_h][{e}]"), "  ")?,
                    hdl = w.lit(hd)
                )
            } else {
                let d = at(&dims_h, "e", &w.lit(0));
                let off = self.coord(out, 0, &d)?;
                format!(
                    "  for (int v = 0; v < {ne}; ++v) {{\n    const {ix} e = fbc_ln + v * {team};\n    if (e < {hdl}) {{\n      {}\n    }}\n  }}",
                    self.buffer_store(&off, "fbc_acc[v] / fbc_lc", &d),
                    hdl = w.lit(hd)
                )
            };
            // Lane t's values t, t + T, .. of chunks c0 + u (u < n) into fbc_x.
            // (`i`: the lines' indentation.)
            let load_x = |c0: &str, n: u64, xin: &str, i: &str| {
                format!(
                    "{i}float fbc_x[{n}][{ne}];\n{i}#pragma unroll\n{i}for (int u = 0; u < {n}; ++u)\n{i}  for (int v = 0; v < {ne}; ++v) {{\n{i}    const int e = fbc_ln + v * {team};\n{i}    fbc_x[u][v] = ({xin}e < {hd}) ? fbc_all[({c0} + u) * {stride} + e] : 0.0f;\n{i}  }}"
                )
            };
            let fold_x = |n: u64, f: &str, i: &str| {
                format!(
                    "{i}#pragma unroll\n{i}for (int u = 0; u < {n}; ++u) {{\n{i}  const float f = {f};\n{i}  for (int v = 0; v < {ne}; ++v) fbc_acc[v] = fma(fbc_x[u][v], f, fbc_acc[v]);\n{i}}}"
                )
            };
            let (early, values) = if preload {
                (
                    format!("{}\n", load_x("0", chunks, "", "  ")),
                    format!("  // Lane t: values t, t + T, .. (read above).\n  float fbc_acc[{ne}];\n  for (int v = 0; v < {ne}; ++v) fbc_acc[v] = 0.0f;\n{}", fold_x(chunks, "fbc_f[fbc_h][u]", "  ")),
                )
            } else {
                // Batches of chunks; the last one short where they do not divide the chunks.
                let batch = chunks.min((COMBINE_REGS / 2 / ne).max(1));
                let (xin, factor) = if chunks % batch == 0 {
                    (String::new(), "fbc_f[fbc_h][c0 + u]".to_string())
                } else {
                    (
                        format!("c0 + u < {chunks} && "),
                        format!("(c0 + u < {chunks} ? fbc_f[fbc_h][c0 + u] : 0.0f)"),
                    )
                };
                (
                    String::new(),
                    format!("  // Lane t: values t, t + T, ..; {batch} chunks' partials read at a time.\n  float fbc_acc[{ne}];\n  for (int v = 0; v < {ne}; ++v) fbc_acc[v] = 0.0f;\n  for (int c0 = 0; c0 < {chunks}; c0 += {batch}) {{\n{}\n{}\n  }}", load_x("c0", batch, &xin, "    "), fold_x(batch, &factor, "    ")),
                )
            };
            let _ = writeln!(
                s,
                "  // Partials: [query group, head, chunk, D + 2] = o, then m and l.\n  __global float* fbc_at = fbc_part + (((long)gid * {heads} + fbc_h) * {chunks} + fbc_c) * {stride};\n  if (fbc_ok) {{\n    for ({ix} e = fbc_ln; e < {hdl}; e += {team}) fbc_at[e] = {sum_o};\n    if (fbc_ln == 0) {{\n      fbc_at[{hd}] = fbc_mh;\n      fbc_at[{}] = fbc_lh;\n    }}\n  }}\n  mem_fence(CLK_GLOBAL_MEM_FENCE);\n  barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);\n  // A symbol out of range: no group counts itself in, none combines (the counts stay zero).\n  if (lid == 0) fbc_done = fbc_ok && atomic_inc(fbc_count + gid) == {};\n  barrier(CLK_LOCAL_MEM_FENCE);\n  if (!fbc_done) return;\n  mem_fence(CLK_GLOBAL_MEM_FENCE);\n  // Read past the caches that could hold another group's partial.\n  const volatile __global float* fbc_all = fbc_part + ((long)gid * {heads} + fbc_h) * {};\n{early}  fbc_m = -INFINITY;\n  fbc_l = 0.0f;\n  for (int c = fbc_ln; c < {chunks}; c += {team}) {{\n    const float mc = fbc_all[c * {stride} + {hd}], lc = fbc_all[c * {stride} + {}];\n    fbc_f[fbc_h][c] = mc;\n    const float mm = fmax(fbc_m, mc);\n    fbc_l = mm == -INFINITY ? 0.0f : fbc_l * exp(fbc_m - mm) + lc * exp(mc - mm);\n    fbc_m = mm;\n  }}",
                hd + 1,
                chunks - 1,
                chunks * stride,
                hd + 1,
                hdl = w.lit(hd),
            );
            s.push_str(&pair_tree(team));
            let _ = writeln!(
                s,
                "  const float fbc_mc = fbc_rm[fbc_h * {team}], fbc_lc = fbc_rl[fbc_h * {team}];\n  for (int c = fbc_ln; c < {chunks}; c += {team}) {{\n    const float mc = fbc_f[fbc_h][c];\n    fbc_f[fbc_h][c] = mc == -INFINITY ? 0.0f : exp(mc - fbc_mc);\n  }}\n  barrier(CLK_LOCAL_MEM_FENCE);\n{values}\n{store}\n  if (lid == 0) fbc_count[gid] = 0;\n}}"
            );
        }
        let mut e = self.flat(s, (groups.max(1) * chunks * g, g));
        if chunks > 1 {
            let part = points
                .checked_mul(chunks)
                .and_then(|n| n.checked_mul(stride))
                .ok_or("the attention's partials have more elements than fit in 64 bits")?;
            e.split = Some((part, groups.max(1)));
        }
        Ok(Some(e))
    }
}

/// The tree that folds each team's `(fbc_m, fbc_l)` pairs (a maximum and a sum of exponentials
/// below it) into its first lane's `fbc_rm`, `fbc_rl`, every team at once.
fn pair_tree(team: u64) -> String {
    format!(
        "  fbc_rm[lid] = fbc_m;\n  fbc_rl[lid] = fbc_l;\n  for (int w = {}; w > 0; w >>= 1) {{\n    barrier(CLK_LOCAL_MEM_FENCE);\n    if (fbc_ln < w) {{\n      const float m1 = fbc_rm[lid], m2 = fbc_rm[lid + w];\n      const float mm = fmax(m1, m2);\n      fbc_rl[lid] = mm == -INFINITY ? 0.0f : fbc_rl[lid] * exp(m1 - mm) + fbc_rl[lid + w] * exp(m2 - mm);\n      fbc_rm[lid] = mm;\n    }}\n  }}\n  barrier(CLK_LOCAL_MEM_FENCE);\n",
        team / 2
    )
}

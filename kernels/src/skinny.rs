//! The skinny contraction: a product whose output is narrow on one side (at most 16 rows or
//! columns, `fbc_target::SKINNY_SIDE`: LoRA's rank side) is bound by reading its wide operand, not by
//! arithmetic. The tiled kernel would compute a whole register block for a side of 8 and leave
//! most of every work-group idle; this kernel instead gives each work-item a few outputs along the
//! narrow side for all of them at once, reads the wide operand once, coalesced, and adds the
//! work-items' partial sums in local memory.

use std::fmt::Write as _;

use super::fill;

/// Outputs (narrow side × wide indices) a work-item of [`Lanes::K`] accumulates at most.
const OUTS_PER_ITEM: u64 = 16;

/// How the work-items of a group share the reading of the wide operand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lanes {
    /// The wide operand is contiguous along the reduction: `group[0]` lanes stride `kk` (a
    /// texel of four `kk` at a time where it is an image read along `kk`), each lane holds
    /// partial sums of a few wide indices, and the lanes' partials are added at the end.
    K,
    /// The wide operand is contiguous along the wide index: `group[0]` lanes take neighbouring
    /// wide indices (a texel of four at a time where it is an image read along them) and
    /// `group[1]` lanes stride `kk`.
    Wide,
}

/// The holes of the skinny template: `out[wide, narrow] = epilogue(Σ_kk wide_at · narrow_at)`.
/// The expressions are C text over the names `wide` and `narrow` (`row` and `col` in either
/// order), `kk` and the batch indices declared by `batch_decl` from `bz`.
#[derive(Debug, Clone)]
pub struct Skinny<'a> {
    pub name: &'a str,
    pub params: &'a str,
    pub comment: &'a str,
    /// The variable of the wide side (`row` or `col`) and of the narrow one.
    pub wide: &'a str,
    pub narrow: &'a str,
    /// Extents: wide side, narrow side (at most 16), reduction.
    pub w: u64,
    pub j: u64,
    pub k: u64,
    pub batches: u64,
    pub batch_decl: &'a str,
    /// The wide operand at `(wide, kk)` as a `float`.
    pub wide_at: &'a str,
    /// The wide operand as a `float4` texel: four consecutive `kk` ([`Lanes::K`], `kk` a
    /// multiple of 4) or four consecutive wide indices ([`Lanes::Wide`], `wide` a multiple of 4),
    /// which the extent along them is a multiple of; with [`Lanes::Wide`], `texel_values`
    /// consecutive wide indices as a `float8` or `float16` (a packed weight's decode).
    pub wide_texel: Option<&'a str>,
    /// Values of [`Skinny::wide_texel`]: 4, or 8 or 16 with [`Lanes::Wide`].
    pub texel_values: u64,
    /// The narrow operand at `(narrow, kk)` as a `float`.
    pub narrow_at: &'a str,
    /// The narrow operand is contiguous along the reduction (else along the narrow index):
    /// how [`Lanes::K`] stages it in local memory, neighbouring work-items reading neighbouring
    /// values.
    pub narrow_k_fastest: bool,
    /// One statement storing `float acc`, the output at `(wide, narrow)`; with
    /// [`Skinny::texel_store`], storing `acc0..acc3`, the outputs at `wide + 0..3`.
    pub store: &'a str,
    /// The store writes a whole texel, four wide indices from a multiple of 4 ([`Lanes::Wide`]
    /// only; the wide extent is a multiple of 4).
    pub texel_store: bool,
    /// The store writes a whole texel of four narrow indices from a multiple of 4 (the narrow
    /// extent a multiple of 4; any lanes; not with [`Skinny::split`], which splits no such
    /// launch): `store` stores `acc0..acc3`, the outputs at `narrow + 0..3` (an image output
    /// whose channel is the narrow side: a LoRA `x · A` whose rank-8 result is a texture).
    pub narrow_texel: bool,
    /// Split-K in one launch (the launch's `split_k` hint): the reduction cut into chunks that
    /// work-groups of their own sum, the last group of a block to finish adding the chunks'
    /// partial sums in chunk order (see [`Skinny::chunks`]). The kernel then takes two more
    /// parameters after `params`: `__global float* fbc_part` and `__global int* fbc_count`,
    /// of [`Skinny::scratch`] elements, the counts zero before the first launch (each launch
    /// leaves them zero).
    pub split: Option<u64>,
    pub lanes: Lanes,
    /// Work-group shape `[x, y]`, from [`Skinny::group_for`].
    pub group: [u64; 2],
    pub index: &'a str,
    /// Write the kernel's body alone, as one part of a merged launch ([`skinny_part`]): no
    /// signature and no `__local` declarations (the merged kernel's), the group's block
    /// counted from [`PART_FIRST`] and the split's blocks numbered over [`PART_BLOCKS`].
    pub part: bool,
    /// Statements that compute the statistics `store` reads (a normalisation fused in front of
    /// the product: `float fbc_svK[j]`), using `red` as scratch, every work-item of the group
    /// taking part (they contain barriers) and ending with a barrier; empty without. They run
    /// before the partial sums, or in a split, in the group that adds the chunks, before it
    /// stores (the other groups never need them).
    pub prologue: &'a str,
    /// [`Lanes::K`]: the most trips whose reads a work-item issues together, before the first
    /// of their barriers (its wide values in registers, and the narrow values it stages), so
    /// that a group keeps that many trips' bytes in flight instead of one; the batch is the
    /// largest divisor of the trips within this and [`PREFETCH_VALUES`] registers. 1: a trip's
    /// reads at that trip.
    pub prefetch: u64,
}

/// Registers a work-item of [`Lanes::K`] holds at most for a batch of prefetched trips: wide
/// values (the rows it shares times the values per read, per trip); the narrow values it stages
/// take at most half as many.
pub const PREFETCH_VALUES: u64 = 64;

impl Skinny<'_> {
    /// Values per read of the wide operand: [`Skinny::texel_values`] for a texel, else 1.
    pub fn v(&self) -> u64 {
        if self.wide_texel.is_some() {
            self.texel_values
        } else {
            1
        }
    }

    /// Wide indices a work-item of [`Lanes::K`] accumulates (its outputs at most
    /// `OUTS_PER_ITEM`); 1 for [`Lanes::Wide`] (times [`Skinny::v`]).
    pub fn rb(&self) -> u64 {
        rows_per_item(self.lanes, self.j)
    }

    /// Wide indices one work-group covers.
    pub fn block(&self) -> u64 {
        block(self.lanes, self.group, self.j, self.v())
    }

    /// Bytes of local memory the kernel uses.
    pub fn local_bytes(&self) -> u64 {
        local_bytes(self.lanes, self.group, self.j, self.v())
    }

    /// The global work size `[x, y, z]`: the batches times the chunks along z.
    pub fn global(&self) -> [u64; 3] {
        let [gx, gy] = self.group;
        let groups = self.blocks();
        let z = self.batches.max(1) * self.chunks().map_or(1, |(s, _)| s);
        match self.lanes {
            Lanes::K => [gx, groups * gy, z],
            Lanes::Wide => [groups * gx, gy, z],
        }
    }

    /// Work-groups along the wide side (per batch and chunk).
    pub fn blocks(&self) -> u64 {
        self.w.div_ceil(self.block()).max(1)
    }

    /// Trips of [`Lanes::K`] whose reads are issued together (see [`Skinny::prefetch`]), for a
    /// chunk (or the reduction) of `trips` trips.
    pub fn batch(&self, trips: u64) -> u64 {
        let most = self
            .prefetch
            .min(PREFETCH_VALUES / (self.rb() * self.v()).max(1))
            .min(PREFETCH_VALUES / 2 / self.staged_per_item().max(1));
        if self.lanes != Lanes::K || most < 2 {
            return 1;
        }
        (1..=most.min(trips)).rev().find(|d| trips % d == 0).unwrap_or(1)
    }

    /// [`Lanes::K`]: the narrow values of a trip (`step × j`) each work-item stages, at most.
    fn staged_per_item(&self) -> u64 {
        (self.step() * self.j).div_ceil(self.group[0] * self.group[1])
    }

    /// The reduction's step per trip: the lanes times their values ([`Lanes::K`]) or the rows
    /// of lanes ([`Lanes::Wide`]).
    fn step(&self) -> u64 {
        match self.lanes {
            Lanes::K => self.group[0] * self.v(),
            Lanes::Wide => self.group[1],
        }
    }

    /// The split, `(chunks, chunk length)`: [`Skinny::split`]'s count with each chunk a whole
    /// number of trips (so texel reads along k stay aligned), `None` where fewer than two
    /// chunks remain.
    pub fn chunks(&self) -> Option<(u64, u64)> {
        let s = self.split?;
        let step = self.step();
        let len = self.k.div_ceil(s.max(1)).div_ceil(step) * step;
        let n = self.k.div_ceil(len);
        (n >= 2).then_some((n, len))
    }

    /// Elements of the split's two scratch buffers: `f32` partial sums (a block's outputs per
    /// batch, block and chunk) and `int` counts (one per batch and block).
    pub fn scratch(&self) -> Option<(u64, u64)> {
        let (n, _) = self.chunks()?;
        let counts = self.batches.max(1) * self.blocks();
        Some((counts * n * self.block() * self.j, counts))
    }

    /// The work-group: 32 lanes along the coalesced index (a warp of neighbouring reads) and
    /// up to 8 rows of them (with [`Lanes::Wide`], `wide = [lanes, rows]`), within `max_group`
    /// work-items and `local_bytes` of local memory.
    pub fn group_for(
        lanes: Lanes,
        j: u64,
        v: u64,
        wide: [u64; 2],
        max_group: u64,
        local_limit: u64,
    ) -> [u64; 2] {
        let too_big =
            |g: [u64; 2]| g[0] * g[1] > max_group || local_bytes(lanes, g, j, v) > local_limit;
        let mut group = match lanes {
            Lanes::K => [32, 8],
            Lanes::Wide => [wide[0].max(1), wide[1].max(1)],
        };
        while group[1] > 1 && too_big(group) {
            group[1] /= 2;
        }
        while group[0] > 1 && too_big(group) {
            group[0] /= 2;
        }
        group
    }
}

/// [`Skinny::rb`] for a narrow side of `j`.
fn rows_per_item(lanes: Lanes, j: u64) -> u64 {
    match lanes {
        Lanes::K => (OUTS_PER_ITEM / j.max(1)).max(1),
        Lanes::Wide => 1,
    }
}

/// [`Skinny::block`] for `group`, a narrow side of `j` and `v` values per read.
fn block(lanes: Lanes, group: [u64; 2], j: u64, v: u64) -> u64 {
    match lanes {
        Lanes::K => group[1] * rows_per_item(lanes, j),
        Lanes::Wide => group[0] * v,
    }
}

/// [`Skinny::local_bytes`] for `group`, a narrow side of `j` and `v` values per read: the
/// lanes' partials and, along k, one trip's narrow values.
fn local_bytes(lanes: Lanes, group: [u64; 2], j: u64, v: u64) -> u64 {
    let [gx, gy] = group;
    4 * match lanes {
        Lanes::K => gy * rows_per_item(lanes, j) * j * (gx + 1) + v * gx * (j + 1),
        Lanes::Wide => j * gy * block(lanes, group, j, v),
    }
}
/// The skinny contraction kernel of `s` (see [`Lanes`] for its two forms).
pub fn skinny(s: &Skinny<'_>) -> String {
    let [gx, gy] = s.group;
    let (ix, j, w, wide, narrow) = (s.index, s.j, s.w, s.wide, s.narrow);
    let (rb, v) = (s.rb(), s.v());
    // A constant trip count (the compiler unrolls it); the last trip checks the end where the
    // lanes' stride does not divide the reduction (or the chunk).
    let step = s.step();
    let chunks = s.chunks();
    let (len, kbase, kend) = match chunks {
        Some((n, len)) => {
            let end = if n * len == s.k { format!("k_lo + {len}") } else { "k_hi".to_string() };
            (len, "k_lo + ".to_string(), end)
        }
        None => (s.k, String::new(), s.k.to_string()),
    };
    let trips = len.div_ceil(step);
    let batch = s.batch(trips);
    let exact = len % step == 0 && chunks.is_none_or(|(n, len)| n * len == s.k);
    // Lanes along k meet the group's barriers every trip: past the end they skip the trip's
    // arithmetic instead of leaving the loop.
    let (tail, tail_end) = match (s.lanes, exact) {
        (_, true) => (String::new(), String::new()),
        (Lanes::K, false) => (format!("    if (k0 < {kend}) {{\n"), "    }\n".to_string()),
        (Lanes::Wide, false) => (format!("      if (kk >= {kend}) break;\n"), String::new()),
    };
    let mut acc = String::new();
    let channels = ["x", "y", "z", "w"];
    let template = match (s.lanes, s.wide_texel) {
        (Lanes::K, None) => {
            let _ = writeln!(
                acc,
                "    {{\n      const {ix} kk = k0;\n      for (int r = 0; r < {rb}; ++r) {{\n        const {ix} {wide} = w0 + r;\n        if ({wide} >= {w}) break;\n        const float wv = {};\n        for (int j = 0; j < {j}; ++j) part[r][j] += wv * nvs[0][lx][j];\n      }}\n    }}",
                if batch > 1 { "wvs[p][r]" } else { s.wide_at }
            );
            SKINNY_K
        }
        (Lanes::K, Some(t)) => {
            let sum: Vec<String> = channels
                .iter()
                .enumerate()
                .map(|(c, ch)| format!("part[r][j] += tv.{ch} * nvs[{c}][lx][j];"))
                .collect();
            let _ = writeln!(
                acc,
                "    for (int r = 0; r < {rb}; ++r) {{\n      const {ix} {wide} = w0 + r, kk = k0;\n      if ({wide} >= {w}) break;\n      const float4 tv = {};\n      for (int j = 0; j < {j}; ++j) {{ {} }}\n    }}",
                if batch > 1 { "wvs[p][r]" } else { t },
                sum.join(" ")
            );
            SKINNY_K
        }
        (Lanes::Wide, None) => {
            let _ = writeln!(
                acc,
                "      const {ix} {wide} = wl;\n      const float wv = {};\n      for (int j = 0; j < {j}; ++j) {{ const {ix} {narrow} = j; part[0][j] += wv * ({}); }}",
                s.wide_at, s.narrow_at
            );
            SKINNY_W
        }
        (Lanes::Wide, Some(t)) => {
            // A float4's channels by name, a float8's or float16's by number.
            let sum: Vec<String> = (0..v as usize)
                .map(|c| {
                    let ch = if v == 4 { channels[c].to_string() } else { format!("s{c:x}") };
                    format!("part[{c}][j] += tv.{ch} * nv;")
                })
                .collect();
            let _ = writeln!(
                acc,
                "      const {ix} {wide} = wl;\n      const float{v} tv = {t};\n      for (int j = 0; j < {j}; ++j) {{\n        const {ix} {narrow} = j;\n        const float nv = {};\n        {}\n      }}",
                s.narrow_at,
                sum.join(" ")
            );
            SKINNY_W
        }
    };
    // Lanes along k: one trip's reads at a time, or a batch's before its barriers (the
    // trip's statements one level deeper).
    let (template, tail, acc, tail_end) = if s.lanes == Lanes::K {
        let trip = if batch > 1 { SKINNY_K_BATCH } else { SKINNY_K_TRIP };
        let deeper = |text: &str| {
            if batch > 1 {
                text.lines().map(|l| format!("  {l}\n")).collect()
            } else {
                text.to_string()
            }
        };
        (template.replace("{{trip_loop}}", trip), deeper(&tail), deeper(&acc), deeper(&tail_end))
    } else {
        (template.to_string(), tail, acc, tail_end)
    };
    // A batch's reads: the wide operand where its row and `kk` are in range (zero elsewhere),
    // the narrow values where the work-item has one to stage.
    let per = s.staged_per_item();
    let mut guards = Vec::new();
    if w % s.block() != 0 {
        guards.push(format!("{wide} < {w}"));
    }
    if !exact {
        guards.push(format!("kk < {kend}"));
    }
    let (wide_type, read) = match s.wide_texel {
        Some(t) => ("float4", t),
        None => ("float", s.wide_at),
    };
    let wide_read = if guards.is_empty() {
        read.to_string()
    } else {
        format!("{} ? {read} : ({wide_type})(0.0f)", guards.join(" && "))
    };
    let (q_guard, q_if) = if per * gx * gy == step * j {
        (String::new(), String::new())
    } else {
        (format!("q < {} && ", step * j), format!("if (q < {}) ", step * j))
    };
    let bz_decl = match chunks {
        None => format!("  const {ix} bz = get_global_id(2);\n"),
        Some((n, len)) => {
            let mut d = format!(
                "  // Split-K: chunk sk of {n} ({len} long) of batch bz.\n  const {ix} bz = get_global_id(2) / {n};\n  const int sk = (int)(get_global_id(2) % {n});\n  const {ix} k_lo = ({ix})sk * {len};\n"
            );
            if n * len != s.k {
                let _ = writeln!(d, "  const {ix} k_hi = min(k_lo + {len}, ({ix}){});", s.k);
            }
            d
        }
    };
    let split_decl = if chunks.is_some() { "  __local int fbc_last;\n" } else { "" };
    // The staging order of the narrow operand: along the reduction where it is contiguous
    // along it (`Bᵀ` read as `b[j, kk]`), else along the narrow index (`A[kk, j]`).
    let (kq, jq, stage_order) = if s.narrow_k_fastest {
        (format!("q % {step}"), format!("q / {step}"), "k")
    } else {
        (format!("q / {j}"), format!("q % {j}"), s.narrow)
    };
    let notes = match v {
        1 => String::new(),
        4 => "; the wide operand read four values at a time".to_string(),
        v => format!("; the wide operand read {v} values at a time"),
    };
    let finish = finish(s);
    let num = |x: u64| x.to_string();
    let (head, block_id, red_decl, split_decl, end) = if s.part {
        (String::new(), format!("(get_group_id(0) - {PART_FIRST})"), String::new(), "", "")
    } else {
        (
            format!(
                "{}__kernel __attribute__((reqd_work_group_size({gx}, {gy}, 1)))\nvoid {}({}) {{\n",
                s.comment,
                s.name,
                params(s)
            ),
            "get_group_id(0)".to_string(),
            format!("  __local float red[{j}][{gy}][{}];\n", s.block()),
            split_decl,
            "}",
        )
    };
    let text = fill(
        &template,
        &[
            ("batch", &num(batch)),
            ("wide_type", wide_type),
            ("wide_read", &wide_read),
            ("per", &num(per)),
            ("q_guard", &q_guard),
            ("q_if", &q_if),
            ("head", &head),
            ("block_id", &block_id),
            ("red_decl", &red_decl),
            ("end", end),
            ("comment", s.comment),
            ("lanes", &num(gx)),
            ("gy", &num(gy)),
            ("name", s.name),
            ("params", &params(s)),
            ("w", &num(w)),
            ("k", &num(s.k)),
            ("kbase", &kbase),
            ("kend", &kend),
            ("j", &num(j)),
            ("wide", wide),
            ("narrow", narrow),
            ("batches", &num(s.batches.max(1))),
            ("rb", &num(rb)),
            ("v", &num(v)),
            ("bw", &num(s.block())),
            ("outs", &num(rb * j)),
            ("notes", &notes),
            ("trips", &num(trips)),
            ("step", &num(step)),
            ("tail", &tail),
            ("tail_end", &tail_end),
            ("kq", &kq),
            ("jq", &jq),
            ("stage_order", stage_order),
            ("group", &num(gx * gy)),
            ("narrow_at", s.narrow_at),
            ("ix", ix),
            ("bz_decl", &bz_decl),
            ("batch_decl", s.batch_decl),
            ("split_decl", split_decl),
            ("accumulate", &acc),
            ("finish", &finish),
            ("prologue", if chunks.is_some() { "" } else { s.prologue }),
        ],
    );
    // A part's body ends at its last statement (the template's `{{end}}` line is empty).
    if s.part {
        format!("{}\n", text.trim_end())
    } else {
        text
    }
}

/// The parameter list: the launch's, then the split's scratch buffers.
fn params(s: &Skinny<'_>) -> String {
    match s.chunks() {
        Some(_) => format!("{}, __global float* fbc_part, __global int* fbc_count", s.params),
        None => s.params.to_string(),
    }
}

/// The statements after the group's partial sums are in `red` (and a barrier): each output's
/// sum over the group, stored; or, split, written to the chunk's slot of `fbc_part`, and the
/// last group of the block to count itself in adds the chunks' slots in chunk order and stores.
/// A block's outputs are numbered `o`: wide-major along k ([`Lanes::K`]: `red[ly][o % outs]`
/// holds `o` for row of lanes `o / outs`), narrow-major along the wide side.
fn finish(s: &Skinny<'_>) -> String {
    let (ix, j, w, wide, narrow) = (s.index, s.j, s.w, s.wide, s.narrow);
    let [gx, gy] = s.group;
    let (bw, group, outs) = (s.block(), gx * gy, s.rb() * j);
    // The group's sum of block output `o` (an int expression) from `red`.
    let group_sum = |o: &str| {
        match s.lanes {
        Lanes::K => format!(
            "float acc = 0.0f;\n    for (int l = 0; l < {gx}; ++l) acc += red[({o}) / {outs}][({o}) % {outs}][l];"
        ),
        Lanes::Wide => format!(
            "float acc = 0.0f;\n    for (int y = 0; y < {gy}; ++y) acc += red[({o}) / {bw}][y][({o}) % {bw}];"
        ),
    }
    };
    // The group's index along the wide side, and the indices of block output `o`.
    let (blk, lid) = match s.lanes {
        Lanes::K => ("get_group_id(1)", "lid"),
        Lanes::Wide => ("get_group_id(0)", "(ly * {gx} + lx)"),
    };
    let lid = lid.replace("{gx}", &gx.to_string());
    let (wide_of, narrow_of) = match s.lanes {
        Lanes::K => (format!("({ix}){blk} * {bw} + o / {j}"), format!("o % {j}")),
        Lanes::Wide => (format!("w0 + o % {bw}"), format!("o / {bw}")),
    };
    if s.narrow_texel {
        // A texel of four narrow indices: the block outputs `o + 0..3` of a row of lanes along
        // k (wide-major), or `o + 0..3 × bw` of lanes along the wide side (narrow-major).
        let (from, step, texels, first, wide_now, narrow_now, add) = match s.lanes {
            Lanes::K => (
                "lx".to_string(),
                gx,
                outs / 4,
                "t * 4".to_string(),
                format!("w0 + o / {j}"),
                format!("o % {j}"),
                format!("for (int l = 0; l < {gx}; ++l) acc{{c}} += red[ly][o + {{c}}][l];"),
            ),
            Lanes::Wide => (
                lid.clone(),
                group,
                j / 4 * bw,
                format!("(t / {bw}) * 4 * {bw} + t % {bw}"),
                format!("w0 + o % {bw}"),
                format!("o / {bw}"),
                format!("for (int y = 0; y < {gy}; ++y) acc{{c}} += red[{narrow} + {{c}}][y][o % {bw}];"),
            ),
        };
        let sums: String = (0..4)
            .map(|c| {
                format!("    float acc{c} = 0.0f;\n    {}\n", add.replace("{c}", &c.to_string()))
            })
            .collect();
        return format!(
            "  // A texel of four {narrow} indices per store.\n  for (int t = {from}; t < {texels}; t += {step}) {{\n    const int o = {first};\n    const {ix} {wide} = {wide_now}, {narrow} = {narrow_now};\n    if ({wide} >= {w}) continue;\n{sums}    {}\n  }}\n",
            s.store
        );
    }
    let Some((n, _)) = s.chunks() else {
        return match (s.lanes, s.texel_store) {
            // Lanes along k: row of lanes ly stores its own outputs (lane order within).
            (Lanes::K, _) => format!(
                "  for (int o = lx; o < {outs}; o += {gx}) {{\n    const {ix} {wide} = w0 + o / {j}, {narrow} = o % {j};\n    if ({wide} >= {w}) break;\n    float acc = 0.0f;\n    for (int l = 0; l < {gx}; ++l) acc += red[ly][o][l];\n    {}\n  }}\n",
                s.store
            ),
            (Lanes::Wide, false) => format!(
                "  for (int o = ly * {gx} + lx; o < {j} * {bw}; o += {gx} * {gy}) {{\n    const int j = o / {bw}, q = o % {bw};\n    const {ix} {wide} = w0 + q, {narrow} = j;\n    if ({wide} >= {w}) continue;\n    float acc = 0.0f;\n    for (int y = 0; y < {gy}; ++y) acc += red[j][y][q];\n    {}\n  }}\n",
                s.store
            ),
            (Lanes::Wide, true) => format!(
                "  // A texel of four {wide} indices per store.\n  for (int t = {lid}; t < {j} * {}; t += {group}) {{\n    const int o = t * 4;\n    const {ix} {wide} = {wide_of}, {narrow} = {narrow_of};\n    if ({wide} >= {w}) continue;\n{}    {}\n  }}\n",
                bw / 4,
                (0..4)
                    .map(|c| format!(
                        "    float acc{c} = 0.0f;\n    for (int y = 0; y < {gy}; ++y) acc{c} += red[{narrow}][y][o % {bw} + {c}];\n"
                    ))
                    .collect::<String>(),
                s.store
            ),
        };
    };
    let size = j * bw;
    // A part's body marks where its pieces start (`merge` runs a pair's pieces in turn).
    let (blocks, slot, [ids, mine, count, combine]) = if s.part {
        (PART_BLOCKS.to_string(), PART_SLOT, [MARK_IDS, MARK_SLOT, MARK_COUNT, MARK_COMBINE])
    } else {
        (s.blocks().to_string(), "", [""; 4])
    };
    let mut f = String::new();
    let _ = write!(
        f,
        "  // Split-K: the group's sums of chunk sk into its slot; the last of the {n} groups of this\n  // block to count itself in adds the {n} slots in chunk order (the same bits every run).\n{ids}  const int fbc_lid = {lid};\n  const {ix} fbc_block = bz * {blocks} + {blk}{slot};\n{mine}  __global float* fbc_mine = fbc_part + (fbc_block * {n} + sk) * {size};\n  for (int o = fbc_lid; o < {size}; o += {group}) {{\n    {}\n    fbc_mine[o] = acc;\n  }}\n{count}  mem_fence(CLK_GLOBAL_MEM_FENCE);\n  barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);\n  if (fbc_lid == 0) fbc_last = atomic_inc(fbc_count + fbc_block) == {};\n  barrier(CLK_LOCAL_MEM_FENCE);\n  if (!fbc_last) return;\n{combine}{}  mem_fence(CLK_GLOBAL_MEM_FENCE);\n  // Read past the caches that could hold another group's slot.\n  const volatile __global float* fbc_all = fbc_part + fbc_block * {n} * {size};\n",
        group_sum("o"),
        n - 1,
        s.prologue,
    );
    let sum = |acc: &str, o: &str| {
        format!(
            "    float {acc} = 0.0f;\n    for (int c = 0; c < {n}; ++c) {acc} += fbc_all[c * {size} + {o}];\n"
        )
    };
    if s.texel_store {
        let _ = write!(
            f,
            "  for (int t = fbc_lid; t < {j} * {}; t += {group}) {{\n    const int o = t * 4;\n    const {ix} {wide} = {wide_of}, {narrow} = {narrow_of};\n    if ({wide} >= {w}) continue;\n{}    {}\n  }}\n",
            bw / 4,
            (0..4).map(|c| sum(&format!("acc{c}"), &format!("o + {c}"))).collect::<String>(),
            s.store
        );
    } else {
        let _ = write!(
            f,
            "  for (int o = fbc_lid; o < {size}; o += {group}) {{\n    const {ix} {wide} = {wide_of}, {narrow} = {narrow_of};\n    if ({wide} >= {w}) continue;\n{}    {}\n  }}\n",
            sum("acc", "o"),
            s.store
        );
    }
    if s.part {
        f.push_str(MARK_RESET);
    }
    f.push_str("  if (fbc_lid == 0) fbc_count[fbc_block] = 0;\n");
    f
}

/// Where a part's body ([`Skinny::part`]) counts its work-groups from: the first group of the
/// merged launch that runs it ([`merge`] writes the number in).
pub const PART_FIRST: &str = "FBC_PART_FIRST";

/// A split's blocks per batch in a merged launch's scratch, which number a part's blocks
/// ([`merge`] writes the number in).
pub const PART_BLOCKS: &str = "FBC_PART_BLOCKS";

/// Added to a split part's block number in the scratch (` + N`, or nothing): the second part of
/// a pair keeps its partial sums apart from the first's ([`merge`] writes it in).
pub const PART_SLOT: &str = "FBC_PART_SLOT";

/// Where a split part's pieces start in its body: the group's ids, its partial sums, the count,
/// the combine and the count's reset ([`merge`] runs a pair's pieces in turn).
const MARK_IDS: &str = "//FBC_IDS\n";
const MARK_SLOT: &str = "//FBC_SLOT\n";
const MARK_COUNT: &str = "//FBC_COUNT\n";
const MARK_COMBINE: &str = "//FBC_COMBINE\n";
const MARK_RESET: &str = "//FBC_RESET\n";

/// One launch of the skinny kernel ([`Lanes::Wide`]) written so that it can run as a part of one
/// launch with others ([`merge`]): launches of the same work-group, narrow side, block and split
/// that neither reads what another writes (a decode step's Q, K and V projections of one
/// normalised row) then cost one launch instead of several; and a part whose epilogue reads the
/// previous part's output at its own output point (a decode step's gate projection, whose
/// `SiLU(gate) · up` reads up) runs in the same work-groups as that part, after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkinnyPart {
    pub name: String,
    /// The launch's own kernel comment.
    pub comment: String,
    /// Its parameters, `x0`, `x1`, ... in order (the split's scratch not among them).
    pub params: Vec<String>,
    /// The body ([`Skinny::part`]).
    pub body: String,
    /// Work-groups along the wide side (per batch and chunk).
    pub blocks: u64,
    /// The wide extent.
    pub wide: u64,
    /// What parts of one launch must share: the work-group, the narrow side, the wide indices
    /// a group covers, the batches and the split `(chunks, chunk length)`.
    pub key: (u64, u64, u64, u64, u64, Option<(u64, u64)>),
    /// This part reads the previous part's output, at its own output point and in its epilogue
    /// only, over the same domain: [`merge`] runs both in the same work-groups, the previous
    /// first (set by the caller, which knows the launches' maps; `false` from [`skinny_part`]).
    pub after_previous: bool,
}

/// `s` as a part of a merged launch, where its form allows one: lanes along the wide side
/// (`s.part` is ignored: the body is written with it on).
pub fn skinny_part(s: &Skinny<'_>) -> Option<SkinnyPart> {
    if s.lanes != Lanes::Wide || s.narrow_texel {
        return None;
    }
    let part = Skinny { part: true, ..s.clone() };
    Some(SkinnyPart {
        name: s.name.to_string(),
        comment: s.comment.to_string(),
        params: s.params.split(", ").map(str::to_string).collect(),
        body: skinny(&part),
        blocks: s.blocks(),
        wide: s.w,
        key: (s.group[0], s.group[1], s.j, s.block(), s.batches.max(1), s.chunks()),
        after_previous: false,
    })
}

/// A merged launch of skinny parts: its kernel, global work size and split scratch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Merged {
    pub source: String,
    pub global: [u64; 3],
    /// Elements of the split's scratch (partial sums, counts), as [`Skinny::scratch`].
    pub scratch: Option<(u64, u64)>,
}

/// `text`'s lines indented by two spaces, the piece marks dropped.
fn indent(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines().filter(|l| !l.starts_with("//FBC_")) {
        if !line.is_empty() {
            out.push_str("  ");
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// `text` between marks `from` and `to` (the start and the end where `None`).
fn piece<'t>(text: &'t str, from: Option<&str>, to: Option<&str>) -> &'t str {
    let start = from.and_then(|m| text.find(m)).unwrap_or(0);
    let end = to.and_then(|m| text.find(m)).unwrap_or(text.len());
    &text[start..end.max(start)]
}

/// One kernel `name` that runs `parts` (at least one, all of one [`SkinnyPart::key`]) as one
/// launch: the work-groups along the wide side are the parts' in order, and each group runs
/// the body of the part its index falls in (a branch the whole group takes, so the bodies'
/// barriers stay uniform); a part [`SkinnyPart::after_previous`] runs in the previous part's
/// groups, after it (split: both parts' partial sums, one count, then the previous part's
/// combine and store, a barrier, and this part's, whose epilogue reads what the group just
/// stored). The parameters are every part's in order (a later part's `xN` renamed `pP_xN`, which
/// its body reads through `#define`), then the split's scratch, whose blocks are numbered over
/// the whole launch.
pub fn merge(name: &str, parts: &[SkinnyPart]) -> Merged {
    let (gx, gy, j, bw, batches, chunks) = parts[0].key;
    // Units of work-groups: a part, or a part and the one after it.
    let mut units: Vec<(usize, Option<usize>)> = Vec::new();
    for (i, p) in parts.iter().enumerate() {
        match units.last_mut() {
            Some((a, b @ None)) if p.after_previous && *a + 1 == i => *b = Some(i),
            _ => units.push((i, None)),
        }
    }
    let groups: u64 = units.iter().map(|&(a, _)| parts[a].blocks).sum();
    // Scratch blocks per batch: every group's, then the second parts' of pairs.
    let stride =
        groups + units.iter().filter_map(|&(_, b)| b.map(|b| parts[b].blocks)).sum::<u64>();
    let names: Vec<&str> = parts.iter().map(|p| p.name.as_str()).collect();
    let mut comment = format!(
        "// {} in one launch\n// (skinny products; a work-group runs the part its index along the wide side falls in):\n",
        names.join(", ")
    );
    let mut params = Vec::new();
    for (i, p) in parts.iter().enumerate() {
        params.extend(p.params.iter().map(|q| match q.rsplit_once(' ') {
            Some((ty, x)) if i > 0 => format!("{ty} p{i}_{x}"),
            _ => q.clone(),
        }));
    }
    // Part `i`'s text indented, its parameters renamed around it (none for the first part).
    let renamed = |i: usize, text: &str| {
        let names: Vec<&str> = if i > 0 {
            parts[i].params.iter().filter_map(|q| q.rsplit(' ').next()).collect()
        } else {
            Vec::new()
        };
        let mut out = String::new();
        for x in &names {
            out.push_str(&format!("#define {x} p{i}_{x}\n"));
        }
        out.push_str(&indent(text));
        for x in &names {
            out.push_str(&format!("#undef {x}\n"));
        }
        out
    };
    // The same in a block of its own (a pair's pieces declare the same names).
    let scoped = |i: usize, text: &str| format!("{{\n{}}}\n", renamed(i, text));
    let mut bodies = String::new();
    let (mut first, mut extra) = (0, groups);
    for (u, &(a, b)) in units.iter().enumerate() {
        let blocks = parts[a].blocks;
        let _ = writeln!(comment, "//   groups [{first}, {}): {}", first + blocks, parts[a].name);
        let fill = |i: usize, slot: &str| {
            parts[i]
                .body
                .replace(PART_FIRST, &first.to_string())
                .replace(PART_BLOCKS, &stride.to_string())
                .replace(PART_SLOT, slot)
        };
        let mut text = match b {
            // A single part's body needs no block of its own: the branch is one.
            None => renamed(a, &fill(a, "")),
            Some(b) => {
                let _ = writeln!(
                    comment,
                    "//   the same groups, after it: {} (its epilogue reads {}'s output)",
                    parts[b].name, parts[a].name
                );
                let (ta, tb) = (fill(a, ""), fill(b, &format!(" + {}", extra - first)));
                extra += parts[b].blocks;
                if chunks.is_none() {
                    format!(
                        "{}barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);\n{}",
                        scoped(a, &ta),
                        scoped(b, &tb)
                    )
                } else {
                    // The declarations a later piece needs again: the body's before its
                    // partial sums (less comments), then the group's ids.
                    let pre = |t: &str| -> String {
                        let head = &t[..t.find("  float part[").unwrap_or(0)];
                        let head: String = head
                            .lines()
                            .filter(|l| !l.trim_start().starts_with("//"))
                            .map(|l| format!("{l}\n"))
                            .collect();
                        format!("{head}{}", piece(t, Some(MARK_IDS), Some(MARK_SLOT)))
                    };
                    let with = |t: &str, from: &str, to: Option<&str>| {
                        format!("{}{}", pre(t), piece(t, Some(from), to))
                    };
                    [
                        scoped(a, piece(&ta, None, Some(MARK_COUNT))),
                        "barrier(CLK_LOCAL_MEM_FENCE);\n".to_string(),
                        scoped(b, piece(&tb, None, Some(MARK_COUNT))),
                        scoped(a, &with(&ta, MARK_COUNT, Some(MARK_COMBINE))),
                        scoped(a, &with(&ta, MARK_COMBINE, Some(MARK_RESET))),
                        "barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);\n".to_string(),
                        scoped(b, &with(&tb, MARK_COMBINE, Some(MARK_RESET))),
                        scoped(a, &with(&ta, MARK_RESET, None)),
                    ]
                    .concat()
                }
            }
        };
        if b.is_some() {
            text = indent(&indent(&text));
        }
        let cond = if u == 0 {
            format!("  if (get_group_id(0) < {}) {{\n", first + blocks)
        } else if u + 1 == units.len() {
            " else {\n".to_string()
        } else {
            format!(" else if (get_group_id(0) < {}) {{\n", first + blocks)
        };
        bodies.push_str(&cond);
        bodies.push_str(&text);
        bodies.push_str("  }");
        first += blocks;
    }
    for p in parts {
        comment.push_str(&p.comment);
    }
    let split = chunks.is_some();
    if split {
        params.push("__global float* fbc_part".into());
        params.push("__global int* fbc_count".into());
    }
    let source = format!(
        "{comment}__kernel __attribute__((reqd_work_group_size({gx}, {gy}, 1)))\nvoid {name}({}) {{\n  __local float red[{j}][{gy}][{bw}];\n{}{bodies}\n}}\n",
        params.join(", "),
        if split { "  __local int fbc_last;\n" } else { "" },
    );
    let n = chunks.map_or(1, |(n, _)| n);
    Merged {
        source,
        global: [groups * gx, gy, batches * n],
        scratch: chunks.map(|(n, _)| (batches * stride * n * bw * j, batches * stride)),
    }
}

/// The skinny kernel whose lanes run along the reduction ([`Lanes::K`]), with named holes; its
/// trip loop, the hole `trip_loop`, is `skinny_k_trip.cl` or `skinny_k_batch.cl`, filled in first.
pub const SKINNY_K: &str = include_str!("../skinny_k.cl");

/// [`SKINNY_K`]'s trip loop, a trip's reads at that trip.
const SKINNY_K_TRIP: &str = include_str!("../skinny_k_trip.cl");

/// [`SKINNY_K`]'s trip loop in batches of trips whose reads are issued together
/// ([`Skinny::prefetch`]).
const SKINNY_K_BATCH: &str = include_str!("../skinny_k_batch.cl");

/// The skinny kernel whose lanes run along the wide index ([`Lanes::Wide`]), with named holes.
pub const SKINNY_W: &str = include_str!("../skinny_w.cl");

#[cfg(test)]
mod tests {
    use super::*;

    fn base(lanes: Lanes, texel: bool, j: u64) -> Skinny<'static> {
        Skinny {
            name: "k",
            params: "__global const float* x0, __global const float* x1, __global float* x2",
            comment: "",
            wide: "row",
            narrow: "col",
            w: 1000,
            j,
            k: 70,
            batches: 3,
            batch_decl: "  const int d0 = bz;\n",
            wide_at: "x0[row * 70 + kk]",
            wide_texel: texel.then_some("vload4(0, x0 + row * 70 + kk)"),
            narrow_at: "x1[kk * 8 + col]",
            narrow_k_fastest: false,
            store: "x2[row * 8 + col] = acc;",
            texel_store: false,
            narrow_texel: false,
            split: None,
            lanes,
            texel_values: 4,
            group: Skinny::group_for(lanes, j, if texel { 4 } else { 1 }, [32, 8], 256, 48 * 1024),
            index: "int",
            part: false,
            prologue: "",
            prefetch: 1,
        }
    }

    #[test]
    fn lanes_along_k_share_a_few_rows_and_add_their_partials_in_lane_order() {
        let s = base(Lanes::K, false, 8);
        assert_eq!((s.group, s.rb(), s.block()), ([32, 8], 2, 16));
        // 1000 rows in blocks of 16: 63 groups of 8 rows of lanes; 3 batches.
        assert_eq!(s.global(), [32, 63 * 8, 3]);
        // The lanes' partials (8 rows of lanes × 16 outputs × 33) and one trip's narrow values.
        assert_eq!(s.local_bytes(), 4 * (8 * 16 * 33 + 32 * 9));
        let src = skinny(&s);
        // 70 is not a multiple of the 32 lanes: three trips, lanes past the end skip the last
        // one's arithmetic but meet its barriers.
        assert!(
            src.contains("for (int t = 0; t < 3; ++t) {\n    const int kb = (int)t * 32;"),
            "{src}"
        );
        assert!(src.contains("    const int k0 = kb + lx * 1;\n    if (k0 < 70) {\n"), "{src}");
        // The narrow operand staged along its narrow index, zero past the reduction.
        assert!(src.contains("for (int q = lid; q < 32 * 8; q += 256) {\n      const int kq = q / 8, j = q % 8;\n      const int kk = kb + kq, col = j;\n      nvs[kq % 1][kq / 1][j] = kk < 70 ? x1[kk * 8 + col] : 0.0f;"), "{src}");
        assert!(src.contains("const float wv = x0[row * 70 + kk];\n        for (int j = 0; j < 8; ++j) part[r][j] += wv * nvs[0][lx][j];"), "{src}");
        assert!(
            src.contains(
                "for (int l = 0; l < 32; ++l) acc += red[ly][o][l];\n    x2[row * 8 + col] = acc;"
            ),
            "{src}"
        );
        assert!(!src.contains("{{"), "{src}");
        // A texel of four along k: 32 lanes × 4 per trip; a narrow operand contiguous along k
        // is staged along k.
        let t = skinny(&Skinny { k: 256, narrow_k_fastest: true, ..base(Lanes::K, true, 8) });
        assert!(
            t.contains("for (int t = 0; t < 2; ++t) {\n    const int kb = (int)t * 128;"),
            "{t}"
        );
        assert!(t.contains("const int kq = q % 128, j = q / 128;"), "{t}");
        assert!(
            t.contains("part[r][j] += tv.x * nvs[0][lx][j]; part[r][j] += tv.y * nvs[1][lx][j];"),
            "{t}"
        );
    }

    #[test]
    fn lanes_along_k_issue_the_reads_of_a_batch_of_trips_before_its_barriers() {
        // 8192 long in texels along k: 64 trips of 128; 2 rows a work-item, 4 values a read.
        let s = Skinny { k: 8192, prefetch: 8, ..base(Lanes::K, true, 8) };
        assert_eq!(s.batch(64), 8);
        // The batch divides the trips, within the profile's count and the registers: 16 rows
        // of 4 values (a narrow side of 1) leave one trip; no batch across the wide side.
        assert_eq!((s.batch(6), s.batch(7), s.batch(1)), (6, 7, 1));
        assert_eq!(Skinny { prefetch: 16, ..s.clone() }.batch(64), 8);
        assert_eq!(Skinny { prefetch: 16, ..base(Lanes::K, true, 1) }.batch(64), 1);
        assert_eq!(Skinny { prefetch: 1, ..s.clone() }.batch(64), 1);
        assert_eq!(Skinny { prefetch: 8, ..base(Lanes::Wide, true, 8) }.batch(64), 1);
        let src = skinny(&s);
        assert!(src.contains("for (int t0 = 0; t0 < 64; t0 += 8) {"), "{src}");
        // Every read of the batch first (1000 rows: the last block's past the end read zero),
        // each work-item's 4 of the trip's 128 x 8 narrow values into registers.
        assert!(src.contains("float4 wvs[8][2];\n    float nvr[8][4];"), "{src}");
        assert!(
            src.contains(
                "wvs[p][r] = row < 1000 ? vload4(0, x0 + row * 70 + kk) : (float4)(0.0f);"
            ),
            "{src}"
        );
        assert!(src.contains("nvr[p][i] = kk < 8192 ? x1[kk * 8 + col] : 0.0f;"), "{src}");
        // Then each trip stages its narrow values from registers between the barriers and
        // adds from the registered wide values.
        assert!(
            src.contains("if (t0 + p > 0) barrier(CLK_LOCAL_MEM_FENCE);\n      for (int i = 0; i < 4; ++i) {\n        const int q = lid + i * 256;\n        const int kq = q / 8, j = q % 8;\n        nvs[kq % 4][kq / 4][j] = nvr[p][i];"),
            "{src}"
        );
        assert!(src.contains("        const float4 tv = wvs[p][r];\n"), "{src}");
        assert!(!src.contains("{{"), "{src}");
        // One trip a batch is today's loop, word for word.
        let one = skinny(&Skinny { prefetch: 1, ..s.clone() });
        assert!(one.contains("for (int t = 0; t < 64; ++t) {"), "{one}");
        assert!(!one.contains("wvs"), "{one}");
        // A reduction the step does not divide: zero past the end, a staging share that is not
        // whole (128 x 3 values over 256 work-items, two each: the first 384 values), 5 rows
        // of 4 values a work-item (3 trips within the registers: 2, which divides 8; the 40
        // rows a group divide the 1000).
        let odd = skinny(&Skinny { k: 1000, prefetch: 4, ..base(Lanes::K, true, 3) });
        assert!(odd.contains("for (int t0 = 0; t0 < 8; t0 += 2) {"), "{odd}");
        assert!(odd.contains("wvs[p][r] = kk < 1000 ? vload4"), "{odd}");
        assert!(odd.contains("nvr[p][i] = q < 384 && kk < 1000 ?"), "{odd}");
        assert!(odd.contains("if (q < 384) nvs[kq % 4][kq / 4][j] = nvr[p][i];"), "{odd}");
        assert!(odd.contains("      if (k0 < 1000) {\n"), "{odd}");
    }

    #[test]
    fn lanes_along_the_wide_side_stride_k_in_rows_of_the_group() {
        let s = Skinny { wide: "col", narrow: "row", ..base(Lanes::Wide, true, 8) };
        // 32 lanes × a texel of 4 columns: 128 columns a group; local memory 8 × 8 × 128 floats.
        assert_eq!((s.group, s.v(), s.block()), ([32, 8], 4, 128));
        assert_eq!(s.global(), [8 * 32, 8, 3]);
        assert_eq!(s.local_bytes(), 4 * 8 * 8 * 128);
        let src = skinny(&s);
        // 70 over 8 rows of lanes: 9 trips, the last checked.
        assert!(src.contains("for (int t = 0; t < 9; ++t) {\n      const int kk = (int)ly + (int)t * 8;\n      if (kk >= 70) break;\n"), "{src}");
        assert!(
            src.contains(
                "const int col = wl;\n      const float4 tv = vload4(0, x0 + row * 70 + kk);"
            ),
            "{src}"
        );
        assert!(src.contains("part[0][j] += tv.x * nv; part[1][j] += tv.y * nv;"), "{src}");
        assert!(src.contains("const int col = w0 + q, row = j;"), "{src}");
        // Sixteen outputs a side and texels: the local sums (16 × 8 × 128 floats) do not fit
        // 48 KiB, so the group has fewer rows of lanes.
        let wide16 = Skinny::group_for(Lanes::Wide, 16, 4, [32, 8], 256, 48 * 1024);
        assert_eq!(wide16, [32, 4]);
        // A device of 64 work-items a group.
        assert_eq!(Skinny::group_for(Lanes::K, 8, 1, [32, 8], 64, 48 * 1024), [32, 2]);
        // A matrix-vector product with 32 rows of lanes (a group of 1024 work-items, 16 KiB
        // of partial sums); on a device of 256 work-items a group, 8 rows; 8 lanes of 128 rows.
        assert_eq!(Skinny::group_for(Lanes::Wide, 1, 4, [32, 32], 1024, 48 * 1024), [32, 32]);
        assert_eq!(Skinny::group_for(Lanes::Wide, 1, 4, [32, 32], 256, 48 * 1024), [32, 8]);
        assert_eq!(Skinny::group_for(Lanes::Wide, 1, 4, [8, 128], 1024, 48 * 1024), [8, 128]);
    }

    #[test]
    fn parts_of_one_shape_run_as_one_launch_each_group_in_its_own_part() {
        let wide = |name: &'static str, w: u64, split: Option<u64>| Skinny {
            name,
            wide: "col",
            narrow: "row",
            w,
            k: 256,
            split,
            ..base(Lanes::Wide, true, 8)
        };
        // Blocks of 128 columns: 2 and 1 groups.
        let (a, b) = (wide("qa", 256, Some(2)), wide("qb", 128, Some(2)));
        let (pa, pb) = (skinny_part(&a).expect("a part"), skinny_part(&b).expect("a part"));
        assert_eq!((pa.blocks, pb.blocks, pa.key == pb.key), (2, 1, true));
        let m = merge("q_ab", &[pa, pb.clone()]);
        // Three groups along the wide side, the batches times the chunks along z.
        assert_eq!(m.global, [3 * 32, 8, 3 * 2]);
        // Partial sums of every batch, block and chunk; a count per batch and block.
        assert_eq!(m.scratch, Some((3 * 3 * 2 * 128 * 8, 3 * 3)));
        let src = &m.source;
        assert!(src.contains("void q_ab(__global const float* x0, __global const float* x1, __global float* x2, __global const float* p1_x0, __global const float* p1_x1, __global float* p1_x2, __global float* fbc_part, __global int* fbc_count) {\n  __local float red[8][8][128];\n  __local int fbc_last;\n  if (get_group_id(0) < 2) {\n"), "{src}");
        // The second part counts its groups from 2, its blocks over all three, and reads its
        // own parameters.
        assert!(
            src.contains("  } else {\n#define x0 p1_x0\n#define x1 p1_x1\n#define x2 p1_x2\n"),
            "{src}"
        );
        assert!(src.contains("const int w0 = (int)(get_group_id(0) - 2) * 128;"), "{src}");
        assert!(src.contains("const int fbc_block = bz * 3 + get_group_id(0);"), "{src}");
        assert!(src.ends_with("#undef x0\n#undef x1\n#undef x2\n  }\n}\n"), "{src}");
        assert!(!src.contains(PART_FIRST) && !src.contains(PART_BLOCKS), "{src}");
        // A part's body is the kernel's own, less its signature and local declarations.
        let own = skinny(&a);
        let body = skinny(&Skinny { part: true, ..a.clone() })
            .replace(&format!("({PART_FIRST})"), "0")
            .replace(PART_FIRST, "0")
            .replace("(get_group_id(0) - 0)", "get_group_id(0)")
            .replace(PART_BLOCKS, "2")
            .replace(PART_SLOT, "")
            .lines()
            .filter(|l| !l.starts_with("//FBC_"))
            .map(|l| format!("{l}\n"))
            .collect::<String>();
        let decls = "  __local float red[8][8][128];\n  __local int fbc_last;\n";
        let (_, own_body) = own.split_once(") {\n").expect("a signature");
        assert_eq!(own_body.replacen(decls, "", 1), format!("{body}}}\n"));
        // Lanes along k, and parts of another split, are not parts of this shape.
        assert!(skinny_part(&base(Lanes::K, false, 8)).is_none());
        assert_ne!(skinny_part(&wide("qc", 128, Some(4))).map(|p| p.key), Some(pb.key));
    }

    #[test]
    fn a_part_after_the_previous_runs_in_its_groups_and_reads_what_they_stored() {
        let wide = |name: &'static str, store: &'static str, split: Option<u64>| Skinny {
            name,
            wide: "col",
            narrow: "row",
            w: 256,
            k: 256,
            split,
            store,
            ..base(Lanes::Wide, true, 8)
        };
        let up = wide("up", "x2[row * 256 + col] = acc;", Some(2));
        let gate = wide("gate", "x3[row * 256 + col] = acc * x2[row * 256 + col];", Some(2));
        let (pu, mut pg) = (skinny_part(&up).unwrap(), skinny_part(&gate).unwrap());
        pg.params.push("__global float* x3".into());
        pg.after_previous = true;
        let m = merge("up_gate", &[pu.clone(), pg.clone()]);
        // Two groups along the wide side run both; the scratch holds four blocks per batch.
        assert_eq!(m.global, [2 * 32, 8, 3 * 2]);
        assert_eq!(m.scratch, Some((3 * 4 * 2 * 128 * 8, 3 * 4)));
        let src = &m.source;
        // One branch: both parts' partial sums (the second's blocks after the first's), one
        // count, the first part's store, a barrier, then the second's.
        assert!(src.contains("  if (get_group_id(0) < 2) {\n    {\n"), "{src}");
        assert!(!src.contains(" else "), "{src}");
        assert!(src.contains("const int fbc_block = bz * 4 + get_group_id(0);"), "{src}");
        assert!(src.contains("const int fbc_block = bz * 4 + get_group_id(0) + 2;"), "{src}");
        assert_eq!(src.matches("atomic_inc").count(), 1, "{src}");
        let first_store = src.find("    x2[row * 256 + col] = acc;").expect("up's store");
        let barrier = src[first_store..]
            .find("barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);")
            .expect("a barrier")
            + first_store;
        let gate_store = src.find("x3[row * 256 + col] = acc * x2").expect("gate's store");
        assert!(first_store < barrier && barrier < gate_store, "{src}");
        assert!(src.contains("#define x3 p1_x3"), "{src}");
        assert!(!src.contains("FBC_"), "{src}");
        // Unsplit: the first part's whole body, a barrier, the second's.
        let (u1, mut g1) = (skinny_part(&wide("up", "x2[col] = acc;", None)).unwrap(), pg.clone());
        g1.body = skinny_part(&wide("gate", "x3[col] = acc * x2[col];", None)).unwrap().body;
        g1.key = u1.key;
        let m = merge("up_gate", &[u1, g1]);
        assert_eq!(m.scratch, None);
        assert!(
            m.source.contains(
                "    }\n    barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);\n    {\n"
            ),
            "{}",
            m.source
        );
    }
}

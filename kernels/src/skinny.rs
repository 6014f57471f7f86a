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
    /// which the extent along them is a multiple of.
    pub wide_texel: Option<&'a str>,
    /// The narrow operand at `(narrow, kk)` as a `float`.
    pub narrow_at: &'a str,
    /// The narrow operand is contiguous along the reduction (else along the narrow index):
    /// how [`Lanes::K`] stages it in local memory, neighbouring work-items reading neighbouring
    /// values.
    pub narrow_k_fastest: bool,
    /// One statement storing `float acc`, the output at `(wide, narrow)`.
    pub store: &'a str,
    pub lanes: Lanes,
    /// Work-group shape `[x, y]`, from [`Skinny::group_for`].
    pub group: [u64; 2],
    pub index: &'a str,
}

impl Skinny<'_> {
    /// Values per read of the wide operand: 4 for a texel, else 1.
    pub fn v(&self) -> u64 {
        if self.wide_texel.is_some() {
            4
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

    /// The global work size `[x, y, z]`.
    pub fn global(&self) -> [u64; 3] {
        let [gx, gy] = self.group;
        let groups = self.w.div_ceil(self.block()).max(1);
        match self.lanes {
            Lanes::K => [gx, groups * gy, self.batches.max(1)],
            Lanes::Wide => [groups * gx, gy, self.batches.max(1)],
        }
    }

    /// The work-group: 32 lanes along the coalesced index (a warp of neighbouring reads) and
    /// up to 8 rows of them (with [`Lanes::Wide`], `wide = [lanes, rows]`), within `max_group`
    /// work-items and `local_bytes` of local memory.
    pub fn group_for(
        lanes: Lanes,
        j: u64,
        texel: bool,
        wide: [u64; 2],
        max_group: u64,
        local_limit: u64,
    ) -> [u64; 2] {
        let v = if texel { 4 } else { 1 };
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
    let mut acc = String::new();
    let channels = ["x", "y", "z", "w"];
    let template = match (s.lanes, s.wide_texel) {
        (Lanes::K, None) => {
            let _ = writeln!(
                acc,
                "    {{\n      const {ix} kk = k0;\n      for (int r = 0; r < {rb}; ++r) {{\n        const {ix} {wide} = w0 + r;\n        if ({wide} >= {w}) break;\n        const float wv = {};\n        for (int j = 0; j < {j}; ++j) part[r][j] += wv * nvs[0][lx][j];\n      }}\n    }}",
                s.wide_at
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
                "    for (int r = 0; r < {rb}; ++r) {{\n      const {ix} {wide} = w0 + r, kk = k0;\n      if ({wide} >= {w}) break;\n      const float4 tv = {t};\n      for (int j = 0; j < {j}; ++j) {{ {} }}\n    }}",
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
            let sum: Vec<String> = channels
                .iter()
                .enumerate()
                .map(|(c, ch)| format!("part[{c}][j] += tv.{ch} * nv;"))
                .collect();
            let _ = writeln!(
                acc,
                "      const {ix} {wide} = wl;\n      const float4 tv = {t};\n      for (int j = 0; j < {j}; ++j) {{\n        const {ix} {narrow} = j;\n        const float nv = {};\n        {}\n      }}",
                s.narrow_at,
                sum.join(" ")
            );
            SKINNY_W
        }
    };
    // A constant trip count (the compiler unrolls it); the last trip checks the end where the
    // lanes' stride does not divide the reduction.
    let step = match s.lanes {
        Lanes::K => gx * v,
        Lanes::Wide => gy,
    };
    let trips = s.k.div_ceil(step);
    // Lanes along k meet the group's barriers every trip: past the end they skip the trip's
    // arithmetic instead of leaving the loop.
    let (tail, tail_end) = match (s.lanes, s.k % step == 0) {
        (_, true) => (String::new(), String::new()),
        (Lanes::K, false) => (format!("    if (k0 < {}) {{\n", s.k), "    }\n".to_string()),
        (Lanes::Wide, false) => (format!("      if (kk >= {}) break;\n", s.k), String::new()),
    };
    // The staging order of the narrow operand: along the reduction where it is contiguous
    // along it (`Bᵀ` read as `b[j, kk]`), else along the narrow index (`A[kk, j]`).
    let (kq, jq, stage_order) = if s.narrow_k_fastest {
        (format!("q % {step}"), format!("q / {step}"), "k")
    } else {
        (format!("q / {j}"), format!("q % {j}"), s.narrow)
    };
    let notes = if v == 4 { "; the wide operand read four values at a time" } else { "" };
    let num = |x: u64| x.to_string();
    fill(
        template,
        &[
            ("comment", s.comment),
            ("lanes", &num(gx)),
            ("gy", &num(gy)),
            ("name", s.name),
            ("params", s.params),
            ("w", &num(w)),
            ("k", &num(s.k)),
            ("j", &num(j)),
            ("wide", wide),
            ("narrow", narrow),
            ("batches", &num(s.batches.max(1))),
            ("rb", &num(rb)),
            ("v", &num(v)),
            ("bw", &num(s.block())),
            ("outs", &num(rb * j)),
            ("notes", notes),
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
            ("batch_decl", s.batch_decl),
            ("accumulate", &acc),
            ("store", s.store),
        ],
    )
}

/// The skinny kernel whose lanes run along the reduction ([`Lanes::K`]), with named holes.
pub const SKINNY_K: &str = include_str!("../skinny_k.cl");

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
            lanes,
            group: Skinny::group_for(lanes, j, texel, [32, 8], 256, 48 * 1024),
            index: "int",
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
        let wide16 = Skinny::group_for(Lanes::Wide, 16, true, [32, 8], 256, 48 * 1024);
        assert_eq!(wide16, [32, 4]);
        // A device of 64 work-items a group.
        assert_eq!(Skinny::group_for(Lanes::K, 8, false, [32, 8], 64, 48 * 1024), [32, 2]);
        // A matrix-vector product with 32 rows of lanes (a group of 1024 work-items, 16 KiB
        // of partial sums); on a device of 256 work-items a group, 8 rows; 8 lanes of 128 rows.
        assert_eq!(Skinny::group_for(Lanes::Wide, 1, true, [32, 32], 1024, 48 * 1024), [32, 32]);
        assert_eq!(Skinny::group_for(Lanes::Wide, 1, true, [32, 32], 256, 48 * 1024), [32, 8]);
        assert_eq!(Skinny::group_for(Lanes::Wide, 1, true, [8, 128], 1024, 48 * 1024), [8, 128]);
    }
}

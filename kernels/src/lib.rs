//! OpenCL C templates of fbc, as `.cl` files.
//!
//! The OpenCL C writer (`fbc_codegen::opencl`) builds most kernels expression by expression from a
//! launch's [`Kernel`](../fbc_dialects/memory/struct.Kernel.html) description. What is fixed text
//! lives here, as OpenCL C files loaded with `include_str!`: `prelude.cl`, the [`PRELUDE`] of
//! helpers every generated source starts with, and `contraction.cl`, the [`CONTRACTION`] template
//! (a register-blocked, local-memory-tiled matrix product) whose named holes [`contraction`]
//! fills with the tile shapes, staging loops and index arithmetic of one launch ([`fill`]), and
//! `skinny_k.cl`/`skinny_w.cl`, the two forms of the [`skinny`] contraction for products with a
//! narrow side; `calibrate.cl`, the micro-benchmarks of `fbc calibrate` ([`CALIBRATE`]).

use std::fmt::Write as _;

mod skinny;
pub use skinny::{
    merge, skinny, skinny_part, Lanes, Merged, Skinny, SkinnyPart, PART_BLOCKS, PART_FIRST,
    PREFETCH_VALUES, SKINNY_K, SKINNY_W,
};

/// The helpers every generated source starts with: MLIR floor division and modulo for index
/// arithmetic that may see negative operands, NaN-propagating `max`/`min` (OpenCL's `fmax`
/// drops NaN; the tensor dialect propagates it), an overflow-safe sigmoid, round-to-nearest-even
/// `f16` rounding for stores into `f16` images, channel selection from a texel, the one
/// sampler every image read uses (unnormalised integer coordinates, no filtering, no addressing
/// mode: reads are always in range), and the payload's integer arithmetic without C's undefined
/// behaviour (wrapping `+ - * neg abs`, floor `/ %` with `MIN / -1 = MIN`, saturating `int()`,
/// the low 32 bits for an `i32` store).
pub const PRELUDE: &str = include_str!("../prelude.cl");

/// The micro-benchmarks of `fbc calibrate`, a program of its own (no prelude): buffer reads in
/// row order (consecutive work-items read consecutive `float4`s) and column order (a line
/// apart), `image2d` reads by work-group footprint (rows, columns, tiles tiling the image; or
/// footprints standing alone on a grid, the texture-block probe), and an empty kernel.
pub const CALIBRATE: &str = include_str!("../calibrate.cl");

/// Which index of a staged operand a [`TexelRead`] runs along: four consecutive values of it are
/// the four channels of one texel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Along {
    /// The reduction index `kk`.
    K,
    /// The other index: `row` for `a`, `col` for `b`.
    Outer,
}

/// A staged operand read one RGBA texel at a time: `texel` is a `float4` expression over the same
/// variables as the scalar form, whose channel `c` is the operand at index `i + c` along `along`
/// for an index `i` that is a multiple of 4. The extent along `along` is a multiple of 4. An
/// image's texel, or an aligned `float4` of a buffer.
#[derive(Debug, Clone, Copy)]
pub struct TexelRead<'a> {
    pub texel: &'a str,
    pub along: Along,
    /// An aligned `float4` of a buffer rather than an image's texel. Along [`Along::K`] the
    /// neighbouring work-items then read neighbouring `float4`s along the reduction (one row's
    /// 16-byte reads are one coalesced segment), into a tile padded like
    /// [`Contraction::k_fastest`]'s; an image's texels are read down a column of the tile's
    /// rows or columns (they lie in the texture cache's 2-D block).
    pub buffer: bool,
}

/// The holes of the [`contraction`] template: `out[row, col] = epilogue(Σ_k a(row, k) · b(k, col))`
/// over a batch of independent products.
///
/// The expressions are C text over fixed variable names: batch indices `bN` (declared by
/// `batch_decl` from `bz`), `row`, `col`, and the reduction index `kk`, all of type `index`.
#[derive(Debug, Clone)]
pub struct Contraction<'a> {
    /// The kernel name.
    pub name: &'a str,
    /// The parameter list, without parentheses.
    pub params: &'a str,
    /// Comment lines (each starting with `//`) above the kernel.
    pub comment: &'a str,
    /// Rows, columns and reduction length.
    pub m: u64,
    pub n: u64,
    pub k: u64,
    /// Number of batches (the third global dimension).
    pub batches: u64,
    /// Statements that declare the batch indices from `bz` (may be empty).
    pub batch_decl: &'a str,
    /// `a(row, kk)` as a `float` expression (it may not use `col`).
    pub a_at: &'a str,
    /// `b(kk, col)` as a `float` expression (it may not use `row`).
    pub b_at: &'a str,
    /// `a` staged a texel at a time instead of through `a_at`.
    pub a_texel: Option<TexelRead<'a>>,
    /// `b` staged a texel at a time instead of through `b_at`.
    pub b_texel: Option<TexelRead<'a>>,
    /// One statement storing the `float acc` of output `(row, col)`; with `texel_store`, the
    /// statements storing `acc0..acc3`, outputs `(row, col..col + 3)` (`col` a multiple of 4).
    pub store: &'a str,
    /// Each work-item owns 4 consecutive columns (`per_item[0]` is 4) and stores them together:
    /// an image output, written one RGBA texel at a time.
    pub texel_store: bool,
    /// A buffer output whose four consecutive columns from a multiple of 4 are four consecutive
    /// elements from a multiple of 4: `(value, at)`, the `float` value of output `(row, col)`
    /// (reading `acc`) and the `__global float*` of output `(row, col)` (`col` a multiple of 4).
    /// Where the columns are read as `float4` (each work-item owns runs of 4 consecutive ones)
    /// the four are stored as one `float4` (a 16-byte store: a quarter of the store
    /// instructions, each lane writing a whole 16 bytes instead of one element in four).
    pub vector_store: Option<(&'a str, &'a str)>,
    /// Work-group shape `[x, y]` in work-items (x runs along columns).
    pub group: [u64; 2],
    /// Outputs per work-item `[along columns, along rows]` (register blocking).
    pub per_item: [u64; 2],
    /// Reduction elements staged in local memory per step.
    pub tile_k: u64,
    /// Stage `a` (`[0]`) or `b` (`[1]`) with the reduction index fastest: consecutive work-items
    /// load consecutive `kk` (coalesced where the operand is contiguous along the reduction),
    /// into a tile row padded by one element so that their local stores fall in distinct banks.
    /// Not for texel-staged operands, nor for `b` with `texel_store`.
    pub k_fastest: [bool; 2],
    /// Local-memory reads of the inner loop: 4 reads a side whose `per_item` is a multiple of 4
    /// as `float4` (a work-item's outputs along it then run in groups of 4 consecutive ones,
    /// the groups strided by 4 × the group size); 1 reads scalars (outputs strided by the group
    /// size). A `texel_store` kernel always reads its columns as one `float4`.
    pub local_vector: u64,
    /// The C type of the index variables: `int` where the caller proved that every index
    /// expression fits in 32 bits (cheaper on every GPU: 64-bit multiplies and divisions are
    /// emulated), else `long`.
    pub index: &'a str,
    /// Register prefetch: each k step's global loads are issued before the previous step's
    /// arithmetic (into registers, stored into the tiles after it), so that they overlap it
    /// instead of stalling the work-group at the barrier. Costs a work-item's share of both
    /// tiles in registers.
    pub prefetch: bool,
}

impl Contraction<'_> {
    /// Output columns and rows a work-group computes.
    pub fn block(&self) -> [u64; 2] {
        [self.group[0] * self.per_item[0], self.group[1] * self.per_item[1]]
    }

    /// Bytes of local memory the kernel uses.
    pub fn local_bytes(&self) -> u64 {
        let [bn, bm] = self.block();
        (bn + bm + self.pad(0) + self.pad(1)) * self.tile_k * 4
    }

    /// The padding of the staged tile of operand `i` (0 `a`, 1 `b`) when it is staged with the
    /// reduction fastest: one element, or four where the tile is read as `float4` (rows stay
    /// aligned); else none.
    fn pad(&self, i: usize) -> u64 {
        let t = if i == 0 { self.a_texel } else { self.b_texel };
        // A buffer's quads along the reduction are staged with it fastest, whatever
        // `k_fastest` says; an image's texels never are.
        let quads_k = t.is_some_and(|t| t.along == Along::K && t.buffer);
        let texel = t.is_some() && !quads_k;
        if !(self.k_fastest[i] || quads_k) || texel || (i == 1 && self.texel_store) {
            0
        } else if self.vec(i) {
            4
        } else {
            1
        }
    }

    /// Whether operand `i`'s tile (0 `a`: rows, 1 `b`: columns) is read as `float4`.
    fn vec(&self, i: usize) -> bool {
        let p = self.per_item[1 - i];
        (i == 1 && self.texel_store) || (self.local_vector == 4 && p % 4 == 0)
    }

    /// The global work size `[x, y, z]` (a whole number of work-groups).
    pub fn global(&self) -> [u64; 3] {
        let [bn, bm] = self.block();
        [
            self.n.div_ceil(bn).max(1) * self.group[0],
            self.m.div_ceil(bm).max(1) * self.group[1],
            self.batches.max(1),
        ]
    }
}

/// One operand's staging into local memory: `tile[kk - k0][outer - outer0]` for a `tk × block`
/// tile.
struct Stage<'a> {
    tile: &'a str,
    outer: &'a str,
    extent: u64,
    block: u64,
    at: &'a str,
    texel: Option<TexelRead<'a>>,
    /// The reduction index runs fastest over the work-items (the tile is padded).
    k_fastest: bool,
}

/// One operand's staging split into its parts: item `t` of the tile (an element, or a texel of
/// four elements along `kk` or along the outer index) is loaded as `value` (of C type `ty`) after
/// the declarations `decl` of its indices, and `store` writes that value, `v`, into the tile.
struct Staging {
    items: u64,
    ty: &'static str,
    decl: String,
    value: String,
    store: String,
}

/// The parts of staging `st` for the k step starting at `kb` (a C expression).
fn staging(st: &Stage<'_>, p: Steps<'_>, kb: &str) -> Staging {
    let Stage { tile, outer, extent, block: bx, at, texel, k_fastest } = *st;
    let Steps { k, tk, ix, .. } = p;
    let o0 = format!("{outer}0");
    let texel_value =
        |texel: &str| format!("({outer} < {extent} && kk < {k}) ? {texel} : (float4)(0.0f)");
    match texel {
        Some(TexelRead { texel, along: Along::K, buffer }) => {
            // `t` counts along `kk` (a texel at a time) fastest for a buffer, else along `outer`.
            let q4 = tk / 4;
            let (o, q) = if buffer {
                (format!("t / {q4}"), format!("t % {q4}"))
            } else {
                (format!("t % {bx}"), format!("t / {bx}"))
            };
            Staging {
                items: q4 * bx,
                ty: "float4",
                decl: format!("const {ix} {outer} = {o0} + {o}, kk = {kb} + 4 * ({q});"),
                value: texel_value(texel),
                store: ["x", "y", "z", "w"]
                    .iter()
                    .enumerate()
                    .map(|(c, ch)| format!("{tile}[4 * ({q}) + {c}][{o}] = v.{ch};"))
                    .collect::<Vec<_>>()
                    .join(" "),
            }
        }
        Some(TexelRead { texel, along: Along::Outer, .. }) => {
            let q4 = bx / 4;
            Staging {
                items: tk * q4,
                ty: "float4",
                decl: format!("const {ix} {outer} = {o0} + 4 * (t % {q4}), kk = {kb} + t / {q4};"),
                value: texel_value(texel),
                store: format!("vstore4(v, 0, &{tile}[t / {q4}][4 * (t % {q4})]);"),
            }
        }
        None => {
            // `t` counts along `outer` fastest, or along `kk` fastest.
            let (o, q) = if k_fastest {
                (format!("t / {tk}"), format!("t % {tk}"))
            } else {
                (format!("t % {bx}"), format!("t / {bx}"))
            };
            Staging {
                items: tk * bx,
                ty: "float",
                decl: format!("const {ix} {outer} = {o0} + {o}, kk = {kb} + {q};"),
                value: format!("({outer} < {extent} && kk < {k}) ? {at} : 0.0f"),
                store: format!("{tile}[{q}][{o}] = v;"),
            }
        }
    }
}

/// The loop that stages one tile for the k step at `k0`, spread over the work-group's
/// work-items.
fn stage(s: &mut String, st: &Stage<'_>, p: Steps<'_>) {
    let g = staging(st, p, "k0");
    let _ = writeln!(s, "    for (int t = lid; t < {}; t += {}) {{", g.items, p.threads);
    let _ = writeln!(
        s,
        "      {}\n      const {} v = {};\n      {}\n    }}",
        g.decl, g.ty, g.value, g.store
    );
}

/// The registers holding a work-item's share of a prefetched tile (see
/// [`Contraction::prefetch`]): `items` spread over `threads` work-items.
fn prefetch_regs(st: &Stage<'_>, g: &Staging, threads: u64) -> (String, u64) {
    (format!("{}_next", st.tile), g.items.div_ceil(threads))
}

/// The loop over a work-item's share `u` of staging `g`, its item `t`, with the statements
/// `body`.
fn per_share(s: &mut String, indent: &str, g: &Staging, threads: u64, body: [&str; 2]) {
    let per = g.items.div_ceil(threads);
    let _ = writeln!(s, "{indent}for (int u = 0; u < {per}; ++u) {{");
    let _ = writeln!(s, "{indent}  const int t = lid + u * {threads};");
    let inner = if g.items % threads == 0 {
        format!("{indent}  ")
    } else {
        let _ = writeln!(s, "{indent}  if (t < {}) {{", g.items);
        format!("{indent}    ")
    };
    for line in body {
        let _ = writeln!(s, "{inner}{line}");
    }
    if g.items % threads != 0 {
        let _ = writeln!(s, "{indent}  }}");
    }
    let _ = writeln!(s, "{indent}}}");
}

/// What every staging of a kernel shares: the reduction length, the k step, the work-group's
/// work-items and the index type.
#[derive(Clone, Copy)]
struct Steps<'a> {
    k: u64,
    tk: u64,
    threads: u64,
    ix: &'a str,
}

/// Loads the k step at `kb` of staging `st` into its prefetch registers (global loads only).
fn prefetch_load(s: &mut String, indent: &str, st: &Stage<'_>, p: Steps<'_>, kb: &str) {
    let g = staging(st, p, kb);
    let (regs, _) = prefetch_regs(st, &g, p.threads);
    per_share(s, indent, &g, p.threads, [&g.decl, &format!("{regs}[u] = {};", g.value)]);
}

/// Writes the prefetch registers of staging `st` into its local tile.
fn prefetch_store(s: &mut String, st: &Stage<'_>, p: Steps<'_>) {
    let g = staging(st, p, "k0");
    let (regs, _) = prefetch_regs(st, &g, p.threads);
    per_share(s, "    ", &g, p.threads, [&format!("const {} v = {regs}[u];", g.ty), &g.store]);
}

/// A tiled, register-blocked contraction kernel.
///
/// A work-group of `group = [gx, gy]` work-items computes a block of `gy·py` rows by `gx·px`
/// columns; each work-item owns `py × px` outputs, strided by the group size (so neighbouring
/// work-items touch neighbouring columns), or, along a side read as `float4` (see
/// [`Contraction::local_vector`]), in groups of 4 consecutive ones strided by 4 × the group size.
/// Per step of `tile_k` along the reduction, the group
/// stages `a` for its rows and `b` for its columns in `__local` memory (zero outside the domain),
/// then every work-item accumulates its outputs from there. With `texel_store` a work-item's
/// columns are 4 consecutive ones instead, stored together as one texel of an image output. The reduction runs in increasing `k`,
/// one term at a time per output, like the reference interpreter.
pub fn contraction(c: &Contraction<'_>) -> String {
    let [gx, gy] = c.group;
    let [px, py] = c.per_item;
    let [bn, bm] = c.block();
    let tk = c.tile_k;
    let (m, n, k) = (c.m, c.n, c.k);
    let threads = gx * gy;
    let ix = c.index;
    let sides = |pick: &dyn Fn(usize) -> bool, what: &str| -> String {
        let v: Vec<&str> =
            ["a", "b"].into_iter().enumerate().filter(|&(i, _)| pick(i)).map(|(_, x)| x).collect();
        if v.is_empty() {
            String::new()
        } else {
            format!("; {} {what}", v.join(", "))
        }
    };
    let texel = |i: usize| if i == 0 { c.a_texel } else { c.b_texel };
    let mut notes = sides(&|i| c.pad(i) > 0, "staged along k")
        + &sides(&|i| texel(i).is_some_and(|t| !t.buffer), "staged a texel at a time")
        + &sides(&|i| texel(i).is_some_and(|t| t.buffer), "loaded as float4")
        + &sides(&|i| c.vec(i), "read as float4");
    if c.prefetch {
        notes.push_str("; the next step prefetched into registers");
    }
    // A tile read as float4 is declared as float4 (aligned) and staged through a float view:
    // each work-item reads 4 consecutive rows or columns at once (4 scalar reads at a stride of
    // 4 would hit the same local-memory banks).
    let mut tiles = String::new();
    for (i, (tile, block)) in [("As", bm), ("Bs", bn)].into_iter().enumerate() {
        let w = block + c.pad(i);
        if c.vec(i) {
            let _ = writeln!(tiles, "  __local float4 {tile}4[{tk}][{}];", w / 4);
            let _ = writeln!(
                tiles,
                "  __local float (*{tile})[{w}] = (__local float (*)[{w}]){tile}4;"
            );
        } else {
            let _ = writeln!(tiles, "  __local float {tile}[{tk}][{w}];");
        }
    }
    let a = Stage {
        tile: "As",
        outer: "row",
        extent: m,
        block: bm,
        at: c.a_at,
        texel: c.a_texel,
        k_fastest: c.pad(0) > 0,
    };
    let b = Stage {
        tile: "Bs",
        outer: "col",
        extent: n,
        block: bn,
        at: c.b_at,
        texel: c.b_texel,
        k_fastest: c.pad(1) > 0,
    };
    let steps = Steps { k, tk, threads, ix };
    let (mut first_loads, mut stage_text, mut next_loads) =
        (String::new(), String::new(), String::new());
    if c.prefetch {
        // The first step's operands in registers; each step stores them into the tiles, then
        // loads the next step's while it computes.
        for st in [&a, &b] {
            let g = staging(st, steps, "0");
            let (regs, n) = prefetch_regs(st, &g, threads);
            let _ = writeln!(first_loads, "  {} {regs}[{n}];", g.ty);
            prefetch_load(&mut first_loads, "  ", st, steps, "0");
            prefetch_store(&mut stage_text, st, steps);
        }
        let _ = writeln!(next_loads, "    if (k0 + {tk} < {k}) {{");
        for st in [&a, &b] {
            prefetch_load(&mut next_loads, "      ", st, steps, &format!("(k0 + {tk})"));
        }
        next_loads.push_str("    }\n");
    } else {
        for st in [&a, &b] {
            stage(&mut stage_text, st, steps);
        }
    }
    // A whole step every time (a constant trip count the compiler unrolls): the staging wrote
    // zeros past the reduction, and adding 0·0 to a sum that started at +0 changes no bit.
    let mut reads = String::new();
    for (i, (v, tile, p, l, g)) in
        [("a", "As", py, "ly", gy), ("b", "Bs", px, "lx", gx)].into_iter().enumerate()
    {
        if c.vec(i) {
            let _ = writeln!(
                reads,
                "      for (int i = 0; i < {}; ++i) {{\n        const float4 v = {tile}4[q][{l} + i * {g}];\n        {v}[4 * i] = v.x; {v}[4 * i + 1] = v.y; {v}[4 * i + 2] = v.z; {v}[4 * i + 3] = v.w;\n      }}",
                p / 4
            );
        } else {
            let _ = writeln!(
                reads,
                "      for (int i = 0; i < {p}; ++i) {v}[i] = {tile}[q][{l} + i * {g}];"
            );
        }
    }
    // The rows and columns a work-item owns: groups of 4 consecutive ones strided by 4 × the
    // group size where read as float4, else one strided by the group size.
    let at = |i: usize, x: &str, l: &str, g: u64| {
        if c.vec(i) {
            format!("({x} / 4) * {} + {l} * 4 + {x} % 4", 4 * g)
        } else {
            format!("{l} + {x} * {g}")
        }
    };
    let mut store = String::new();
    if let (Some((value, at)), true, false) = (c.vector_store, c.vec(1), c.texel_store) {
        // Written out per run of four (no loop): the accumulators stay registers indexed by
        // constants.
        for j in 0..px / 4 {
            let _ = writeln!(store, "    {{");
            let _ = writeln!(store, "      const {ix} colb = col0 + {} + lx * 4;", j * 4 * gx);
            let _ = writeln!(store, "      if (colb >= {n}) continue;");
            store.push_str("      float4 v;\n");
            for (q, comp) in ["x", "y", "z", "w"].into_iter().enumerate() {
                let _ = writeln!(
                    store,
                    "      {{ const {ix} col = colb + {q}; const float acc_q = acc[i][{}]; {{ const float acc = acc_q; v.{comp} = {value}; }} }}",
                    4 * j + q as u64
                );
            }
            let _ = writeln!(
                store,
                "      {{ const {ix} col = colb; *(__global float4*)({at}) = v; }}"
            );
            store.push_str("    }\n");
        }
    } else if c.texel_store {
        let _ = writeln!(store, "    const {ix} col = col0 + lx * {px};");
        let _ = writeln!(store, "    if (col >= {n}) break;");
        store.push_str(
            "    const float acc0 = acc[i][0], acc1 = acc[i][1], acc2 = acc[i][2], acc3 = acc[i][3];\n",
        );
        let _ = writeln!(store, "    {}", c.store);
    } else {
        let _ = writeln!(store, "    for (int j = 0; j < {px}; ++j) {{");
        let _ = writeln!(store, "      const {ix} col = col0 + {};", at(1, "j", "lx", gx));
        let _ = writeln!(store, "      if (col >= {n}) break;");
        store.push_str("      const float acc_ij = acc[i][j];\n");
        let _ = writeln!(store, "      {{ const float acc = acc_ij; {} }}", c.store);
        store.push_str("    }\n");
    }
    let num = |v: u64| v.to_string();
    fill(
        CONTRACTION,
        &[
            ("comment", c.comment),
            ("gx", &num(gx)),
            ("gy", &num(gy)),
            ("name", c.name),
            ("params", c.params),
            ("m", &num(m)),
            ("n", &num(n)),
            ("k", &num(k)),
            ("batches", &num(c.batches.max(1))),
            ("bm", &num(bm)),
            ("bn", &num(bn)),
            ("py", &num(py)),
            ("px", &num(px)),
            ("tk", &num(tk)),
            ("notes", &notes),
            ("ix", ix),
            ("batch_decl", c.batch_decl),
            ("tiles", &tiles),
            ("first_loads", &first_loads),
            ("stage", &stage_text),
            ("next_loads", &next_loads),
            ("reads", &reads),
            ("row_at", &at(0, "i", "ly", gy)),
            ("store", &store),
        ],
    )
}

/// The tiled contraction kernel as OpenCL C with named holes (`{{name}}`), which [`contraction`]
/// fills: the fixed structure of the kernel is this file; what varies with the parameters (the
/// tile declarations, the staging and prefetch loops, the register reads, the store) is built in
/// Rust and put in its hole.
pub const CONTRACTION: &str = include_str!("../contraction.cl");

/// `template` with every hole `{{name}}` replaced by the text `holes` gives for `name`. The
/// templates are this crate's own files: a hole without text is a bug here, and panics (every
/// test that writes a kernel finds it).
pub fn fill(template: &str, holes: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(template.len() * 2);
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.find("}}").expect("an unterminated hole in a kernel template");
        let name = &after[..end];
        let text = holes.iter().find(|(n, _)| *n == name).map(|(_, t)| *t);
        out.push_str(
            text.unwrap_or_else(|| panic!("the kernel template's hole `{name}` has no text")),
        );
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contraction_sizes_follow_the_parameters() {
        let c = Contraction {
            name: "k",
            params: "__global const float* x0, __global const float* x1, __global float* x2",
            comment: "// test\n",
            m: 100,
            n: 70,
            k: 33,
            batches: 3,
            batch_decl: "",
            a_at: "x0[row * 33 + kk]",
            b_at: "x1[kk * 70 + col]",
            a_texel: None,
            b_texel: None,
            store: "x2[bz * 7000 + row * 70 + col] = acc;",
            group: [16, 8],
            per_item: [2, 4],
            tile_k: 8,
            texel_store: false,
            vector_store: None,
            k_fastest: [false, false],
            local_vector: 1,
            index: "long",
            prefetch: false,
        };
        assert_eq!(c.block(), [32, 32]);
        assert_eq!(c.global(), [3 * 16, 4 * 8, 3]);
        assert_eq!(c.local_bytes(), (32 + 32) * 8 * 4);
        let src = contraction(&c);
        assert!(src.contains("reqd_work_group_size(16, 8, 1)"), "{src}");
        assert!(src.contains("__local float As[8][32];"), "{src}");
        assert!(src.contains("(row < 100 && kk < 33) ? x0[row * 33 + kk] : 0.0f"), "{src}");
        assert!(src.contains("x2[bz * 7000 + row * 70 + col] = acc;"), "{src}");
        assert!(
            src.contains(
                "      const long row = row0 + t % 32, kk = k0 + t / 32;\n      const float v = (row < 100 && kk < 33) ? x0[row * 33 + kk] : 0.0f;\n      As[t / 32][t % 32] = v;\n"
            ),
            "{src}"
        );
        // `a` staged with the reduction fastest: the tile row padded by one element.
        let along_k = Contraction { k_fastest: [true, false], ..c };
        assert_eq!(along_k.local_bytes(), (32 + 33) * 8 * 4);
        let src = contraction(&along_k);
        assert!(src.contains("__local float As[8][33];"), "{src}");
        assert!(src.contains("const long row = row0 + t / 8, kk = k0 + t % 8;"), "{src}");
        assert!(
            src.contains(
                "(row < 100 && kk < 33) ? x0[row * 33 + kk] : 0.0f;\n      As[t % 8][t / 8] = v;"
            ),
            "{src}"
        );
        assert!(src.contains("k step 8; a staged along k"), "{src}");
        assert!(src.contains("const float v = (col < 70"), "{src}");
        assert!(src.contains("Bs[t / 32][t % 32] = v;"), "{src}");
        assert!(src.contains("#pragma unroll\n    for (int q = 0; q < 8; ++q) {"), "{src}");
        // float4 reads of `a` (4 rows a work-item): aligned rows padded by 4; `b` (2 columns) stays
        // scalar.
        let vec = Contraction { k_fastest: [true, false], local_vector: 4, ..c };
        assert_eq!(vec.local_bytes(), (32 + 36) * 8 * 4);
        let src = contraction(&vec);
        assert!(src.contains("__local float4 As4[8][9];"), "{src}");
        assert!(src.contains("__local float (*As)[36] = (__local float (*)[36])As4;"), "{src}");
        assert!(src.contains("__local float Bs[8][32];"), "{src}");
        assert!(src.contains("const float4 v = As4[q][ly + i * 8];"), "{src}");
        assert!(src.contains("for (int i = 0; i < 2; ++i) b[i] = Bs[q][lx + i * 16];"), "{src}");
        assert!(src.contains("const long row = row0 + (i / 4) * 32 + ly * 4 + i % 4;"), "{src}");
        assert!(src.contains("const long col = col0 + lx + j * 16;"), "{src}");
        assert!(src.contains("a staged along k; a read as float4"), "{src}");
        // 32-bit indices and register prefetch, at k step 2: each tile is 2 x 32 = 64 items,
        // one for each of the first 64 of the 128 work-items.
        let pf =
            Contraction { index: "int", prefetch: true, tile_k: 2, k_fastest: [true, false], ..c };
        let src = contraction(&pf);
        assert!(
            src.contains("k step 2; a staged along k; the next step prefetched into registers"),
            "{src}"
        );
        assert!(src.contains("  const int row0 = (int)get_group_id(1) * 32, col0 = (int)get_group_id(0) * 32;\n  const int bz = get_global_id(2);\n"), "{src}");
        assert!(
            !src.contains("const long") && !src.contains("(long)") && !src.contains("for (long"),
            "{src}"
        );
        assert!(
            src.contains(
                "  float As_next[1];\n  for (int u = 0; u < 1; ++u) {\n    const int t = lid + u * 128;\n    if (t < 64) {\n      const int row = row0 + t / 2, kk = 0 + t % 2;\n      As_next[u] = (row < 100 && kk < 33) ? x0[row * 33 + kk] : 0.0f;\n    }\n  }\n"
            ),
            "{src}"
        );
        assert!(
            src.contains(
                "  for (int k0 = 0; k0 < 33; k0 += 2) {\n    for (int u = 0; u < 1; ++u) {\n      const int t = lid + u * 128;\n      if (t < 64) {\n        const float v = As_next[u];\n        As[t % 2][t / 2] = v;\n      }\n    }\n    for (int u = 0; u < 1; ++u) {\n      const int t = lid + u * 128;\n      if (t < 64) {\n        const float v = Bs_next[u];\n        Bs[t / 32][t % 32] = v;\n      }\n    }\n    barrier(CLK_LOCAL_MEM_FENCE);\n    if (k0 + 2 < 33) {\n      for (int u = 0; u < 1; ++u) {\n        const int t = lid + u * 128;\n        if (t < 64) {\n          const int row = row0 + t / 2, kk = (k0 + 2) + t % 2;\n"
            ),
            "{src}"
        );
        // Without prefetch the staging loops stride the tile.
        let src =
            contraction(&Contraction { index: "int", tile_k: 2, k_fastest: [true, false], ..c });
        assert!(src.contains("    for (int t = lid; t < 64; t += 128) {\n      const int row = row0 + t / 2, kk = k0 + t % 2;\n"), "{src}");
        assert!(!src.contains("_next"), "{src}");
    }
}

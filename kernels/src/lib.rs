//! OpenCL C templates of fbc, as data.
//!
//! The OpenCL C writer (`fbc_codegen::opencl`) builds most kernels expression by expression from a
//! launch's [`Kernel`](../fbc_dialects/memory/struct.Kernel.html) description. What is fixed text
//! lives here: the [`PRELUDE`] of helpers every generated source starts with, and the
//! [`contraction`] template (a register-blocked, local-memory-tiled matrix product) whose holes the
//! writer fills with the index arithmetic of one launch.

use std::fmt::Write as _;

/// The helpers every generated source starts with: MLIR floor division and modulo for index
/// arithmetic that may see negative operands, NaN-propagating `max`/`min` (OpenCL's `fmax`
/// drops NaN; the tensor dialect propagates it), an overflow-safe sigmoid, round-to-nearest-even
/// `f16` rounding for stores into `f16` images, channel selection from a texel, the one
/// sampler every image read uses (unnormalised integer coordinates, no filtering, no addressing
/// mode: reads are always in range), and the payload's integer arithmetic without C's undefined
/// behaviour (wrapping `+ - * neg abs`, floor `/ %` with `MIN / -1 = MIN`, saturating `int()`,
/// the low 32 bits for an `i32` store).
pub const PRELUDE: &str = "\
// Floor division and modulo with MLIR affine-map semantics (rounding toward -inf).
inline long fbc_floordiv(long a, long b) { long q = a / b; return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q; }
inline long fbc_ceildiv(long a, long b) { return -fbc_floordiv(-a, b); }
inline long fbc_mod(long a, long b) { return a - fbc_floordiv(a, b) * b; }
inline long fbc_iabs(long a) { return a < 0 ? as_long(0UL - as_ulong(a)) : a; }
// max/min that propagate NaN, as the tensor dialect does.
inline float fbc_fmax(float a, float b) { return (isnan(a) || isnan(b)) ? NAN : fmax(a, b); }
inline float fbc_fmin(float a, float b) { return (isnan(a) || isnan(b)) ? NAN : fmin(a, b); }
inline float fbc_sigmoid(float a) { return a >= 0.0f ? 1.0f / (1.0f + exp(-a)) : exp(a) / (1.0f + exp(a)); }
// Each channel rounded to the nearest f16 (ties to even), as a float: what an f16 image holds.
// write_imagef to a CL_HALF_FLOAT image may round toward zero; values already exact in f16 are
// stored unchanged. vstore_half/vload_half are core OpenCL (no cl_khr_fp16).
inline float4 fbc_rte_half4(float4 v) { ushort h[4]; vstore_half4_rte(v, 0, (__private half*)h); return vload_half4(0, (__private half*)h); }
// Channel c of a texel.
inline float fbc_ch(float4 v, long c) { return c == 0 ? v.x : (c == 1 ? v.y : (c == 2 ? v.z : v.w)); }
__constant sampler_t fbc_smp = CLK_NORMALIZED_COORDS_FALSE | CLK_ADDRESS_NONE | CLK_FILTER_NEAREST;
// Run-time checks, for accesses the compiler could not prove in range (data-dependent offsets)
// and for payload arithmetic that can fail (integer division by zero, int() of NaN). A failed
// check does not touch memory (a read gives 0, a write is skipped) and records the run's first
// fault in the error buffer e (the first atomic_cmpxchg of e[0] wins): e[0] the launch's fault
// id, e[1] kind (1 read, 2 load, 3 write, 4 `/` by 0, 5 `%` by 0, 6 int() of NaN), e[2] operand
// (-1 for arithmetic), e[3..8] the coordinates (offset, or x, y, channel; the dividend for kinds
// 4 and 5) as lo/hi halves, e[9] the domain rank, e[10..25] the domain point.
#define FBC_PT long p0, long p1, long p2, long p3, long p4, long p5, long p6, long p7
inline void fbc_half(__global int* e, int at, long v) { e[at] = (int)v; e[at + 1] = (int)(v >> 32); }
inline void fbc_fault(__global int* e, int id, int kind, int op, long v0, long v1, long v2, int rank, FBC_PT) {
  if (atomic_cmpxchg((volatile __global int*)e, 0, id) != 0) return;
  e[1] = kind; e[2] = op; fbc_half(e, 3, v0); fbc_half(e, 5, v1); fbc_half(e, 7, v2); e[9] = rank;
  fbc_half(e, 10, p0); fbc_half(e, 12, p1); fbc_half(e, 14, p2); fbc_half(e, 16, p3);
  fbc_half(e, 18, p4); fbc_half(e, 20, p5); fbc_half(e, 22, p6); fbc_half(e, 24, p7);
}
#define FBC_PASS p0, p1, p2, p3, p4, p5, p6, p7
inline float fbc_ldf(__global const float* x, long o, long n, __global int* e, int id, int kind, int op, int rank, FBC_PT) {
  if (o >= 0 && o < n) return x[o];
  fbc_fault(e, id, kind, op, o, 0, 0, rank, FBC_PASS); return 0.0f;
}
inline int fbc_ldi(__global const int* x, long o, long n, __global int* e, int id, int kind, int op, int rank, FBC_PT) {
  if (o >= 0 && o < n) return x[o];
  fbc_fault(e, id, kind, op, o, 0, 0, rank, FBC_PASS); return 0;
}
inline void fbc_stf(__global float* x, long o, long n, float v, __global int* e, int id, int op, int rank, FBC_PT) {
  if (o >= 0 && o < n) x[o] = v; else fbc_fault(e, id, 3, op, o, 0, 0, rank, FBC_PASS);
}
inline void fbc_sti(__global int* x, long o, long n, int v, __global int* e, int id, int op, int rank, FBC_PT) {
  if (o >= 0 && o < n) x[o] = v; else fbc_fault(e, id, 3, op, o, 0, 0, rank, FBC_PASS);
}
inline float fbc_rdch(__read_only image2d_t x, long px, long py, long c, long w, long h, __global int* e, int id, int op, int rank, FBC_PT) {
  if (px >= 0 && px < w && py >= 0 && py < h && c >= 0 && c < 4) return fbc_ch(read_imagef(x, fbc_smp, (int2)((int)px, (int)py)), c);
  fbc_fault(e, id, 1, op, px, py, c, rank, FBC_PASS); return 0.0f;
}
inline void fbc_wrimg(__write_only image2d_t x, long px, long py, long w, long h, float4 v, __global int* e, int id, int op, int rank, FBC_PT) {
  if (px >= 0 && px < w && py >= 0 && py < h) write_imagef(x, (int2)((int)px, (int)py), v);
  else fbc_fault(e, id, 3, op, px, py, 0, rank, FBC_PASS);
}
// Payload integers: 64-bit two's complement that wraps (computed on ulong: signed overflow is
// undefined in C), floor division and modulo with MIN / -1 = MIN and MIN % -1 = 0.
inline long fbc_iadd(long a, long b) { return as_long(as_ulong(a) + as_ulong(b)); }
inline long fbc_isub(long a, long b) { return as_long(as_ulong(a) - as_ulong(b)); }
inline long fbc_imul(long a, long b) { return as_long(as_ulong(a) * as_ulong(b)); }
inline long fbc_ineg(long a) { return as_long(0UL - as_ulong(a)); }
// A zero divisor gives 0 here; the checked forms below (used wherever a divisor is not a
// non-zero constant) record it (kinds 4 and 5) in the error buffer, so that the run fails as on
// the reference executor and the CPU JIT.
inline long fbc_idiv(long a, long b) {
  if (b == 0) return 0;
  if (b == -1) return fbc_ineg(a);
  const long q = a / b;
  return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q;
}
inline long fbc_imod(long a, long b) {
  if (b == 0 || b == -1) return 0;
  const long r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
inline long fbc_idivc(long a, long b, __global int* e, int id, int rank, FBC_PT) {
  if (b == 0) fbc_fault(e, id, 4, -1, a, 0, 0, rank, FBC_PASS);
  return fbc_idiv(a, b);
}
inline long fbc_imodc(long a, long b, __global int* e, int id, int rank, FBC_PT) {
  if (b == 0) fbc_fault(e, id, 5, -1, a, 0, 0, rank, FBC_PASS);
  return fbc_imod(a, b);
}
// int(x): toward zero, saturating at the long range (convert_long_sat_rtz); NaN gives 0, and the
// checked form records it (kind 6).
inline long fbc_toint(float x) { return convert_long_sat_rtz(x); }
inline long fbc_tointc(float x, __global int* e, int id, int rank, FBC_PT) {
  if (isnan(x)) fbc_fault(e, id, 6, -1, 0, 0, 0, rank, FBC_PASS);
  return convert_long_sat_rtz(x);
}
// The i32 element a long stores: the low 32 bits (as_int: no implementation-defined conversion).
inline int fbc_toi32(long a) { return as_int((uint)as_ulong(a)); }
";

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
/// for an index `i` that is a multiple of 4. The extent along `along` is a multiple of 4.
#[derive(Debug, Clone, Copy)]
pub struct TexelRead<'a> {
    pub texel: &'a str,
    pub along: Along,
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
        let texel = if i == 0 { self.a_texel.is_some() } else { self.b_texel.is_some() };
        if !self.k_fastest[i] || texel || (i == 1 && self.texel_store) {
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
        Some(TexelRead { texel, along: Along::K }) => Staging {
            items: tk / 4 * bx,
            ty: "float4",
            decl: format!("const {ix} {outer} = {o0} + t % {bx}, kk = {kb} + 4 * (t / {bx});"),
            value: texel_value(texel),
            store: ["x", "y", "z", "w"]
                .iter()
                .enumerate()
                .map(|(q, ch)| format!("{tile}[4 * (t / {bx}) + {q}][t % {bx}] = v.{ch};"))
                .collect::<Vec<_>>()
                .join(" "),
        },
        Some(TexelRead { texel, along: Along::Outer }) => {
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
    let mut s = String::new();
    s.push_str(c.comment);
    let _ = writeln!(
        s,
        "__kernel __attribute__((reqd_work_group_size({gx}, {gy}, 1)))\nvoid {}({}) {{",
        c.name, c.params
    );
    let sides = |pick: &dyn Fn(usize) -> bool, what: &str| -> String {
        let v: Vec<&str> =
            ["a", "b"].into_iter().enumerate().filter(|&(i, _)| pick(i)).map(|(_, x)| x).collect();
        if v.is_empty() {
            String::new()
        } else {
            format!("; {} {what}", v.join(", "))
        }
    };
    let mut notes =
        sides(&|i| c.pad(i) > 0, "staged along k") + &sides(&|i| c.vec(i), "read as float4");
    if c.prefetch {
        notes.push_str("; the next step prefetched into registers");
    }
    let _ = writeln!(s, "  // [{m} x {k}] x [{k} x {n}], {} batch(es); block {bm} x {bn}, {py} x {px} outputs per work-item, k step {tk}{notes}", c.batches.max(1));
    s.push_str("  const int lx = get_local_id(0), ly = get_local_id(1);\n");
    s.push_str("  const int lid = ly * ");
    let _ = writeln!(s, "{gx} + lx;");
    let _ = writeln!(
        s,
        "  const {ix} row0 = ({ix})get_group_id(1) * {bm}, col0 = ({ix})get_group_id(0) * {bn};"
    );
    let _ = writeln!(s, "  const {ix} bz = get_global_id(2);");
    s.push_str(c.batch_decl);
    // A tile read as float4 is declared as float4 (aligned) and staged through a float view:
    // each work-item reads 4 consecutive rows or columns at once (4 scalar reads at a stride of
    // 4 would hit the same local-memory banks).
    for (i, (tile, block)) in [("As", bm), ("Bs", bn)].into_iter().enumerate() {
        let w = block + c.pad(i);
        if c.vec(i) {
            let _ = writeln!(s, "  __local float4 {tile}4[{tk}][{}];", w / 4);
            let _ =
                writeln!(s, "  __local float (*{tile})[{w}] = (__local float (*)[{w}]){tile}4;");
        } else {
            let _ = writeln!(s, "  __local float {tile}[{tk}][{w}];");
        }
    }
    let _ = writeln!(s, "  float acc[{py}][{px}];");
    let _ = writeln!(
        s,
        "  for (int i = 0; i < {py}; ++i)\n    for (int j = 0; j < {px}; ++j) acc[i][j] = 0.0f;"
    );
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
    if c.prefetch {
        // The first step's operands in registers; each step stores them into the tiles, then
        // loads the next step's while it computes.
        for st in [&a, &b] {
            let g = staging(st, steps, "0");
            let (regs, n) = prefetch_regs(st, &g, threads);
            let _ = writeln!(s, "  {} {regs}[{n}];", g.ty);
            prefetch_load(&mut s, "  ", st, steps, "0");
        }
    }
    let _ = writeln!(s, "  for ({ix} k0 = 0; k0 < {k}; k0 += {tk}) {{");
    if c.prefetch {
        for st in [&a, &b] {
            prefetch_store(&mut s, st, steps);
        }
        s.push_str("    barrier(CLK_LOCAL_MEM_FENCE);\n");
        let _ = writeln!(s, "    if (k0 + {tk} < {k}) {{");
        for st in [&a, &b] {
            prefetch_load(&mut s, "      ", st, steps, &format!("(k0 + {tk})"));
        }
        s.push_str("    }\n");
    } else {
        for st in [&a, &b] {
            stage(&mut s, st, steps);
        }
        s.push_str("    barrier(CLK_LOCAL_MEM_FENCE);\n");
    }
    // A whole step every time (a constant trip count the compiler unrolls): the staging wrote
    // zeros past the reduction, and adding 0·0 to a sum that started at +0 changes no bit.
    let _ = writeln!(s, "    #pragma unroll\n    for (int q = 0; q < {tk}; ++q) {{");
    let _ = writeln!(s, "      float a[{py}], b[{px}];");
    for (i, (v, tile, p, l, g)) in
        [("a", "As", py, "ly", gy), ("b", "Bs", px, "lx", gx)].into_iter().enumerate()
    {
        if c.vec(i) {
            let _ = writeln!(
                s,
                "      for (int i = 0; i < {}; ++i) {{\n        const float4 v = {tile}4[q][{l} + i * {g}];\n        {v}[4 * i] = v.x; {v}[4 * i + 1] = v.y; {v}[4 * i + 2] = v.z; {v}[4 * i + 3] = v.w;\n      }}",
                p / 4
            );
        } else {
            let _ = writeln!(
                s,
                "      for (int i = 0; i < {p}; ++i) {v}[i] = {tile}[q][{l} + i * {g}];"
            );
        }
    }
    let _ = writeln!(
        s,
        "      for (int i = 0; i < {py}; ++i)\n        for (int j = 0; j < {px}; ++j) acc[i][j] += a[i] * b[j];"
    );
    s.push_str("    }\n    barrier(CLK_LOCAL_MEM_FENCE);\n  }\n");
    // The rows and columns a work-item owns: groups of 4 consecutive ones strided by 4 × the
    // group size where read as float4, else one strided by the group size.
    let at = |i: usize, x: &str, l: &str, g: u64| {
        if c.vec(i) {
            format!("({x} / 4) * {} + {l} * 4 + {x} % 4", 4 * g)
        } else {
            format!("{l} + {x} * {g}")
        }
    };
    let _ = writeln!(s, "  for (int i = 0; i < {py}; ++i) {{");
    let _ = writeln!(s, "    const {ix} row = row0 + {};", at(0, "i", "ly", gy));
    let _ = writeln!(s, "    if (row >= {m}) break;");
    if c.texel_store {
        let _ = writeln!(s, "    const {ix} col = col0 + lx * {px};");
        let _ = writeln!(s, "    if (col >= {n}) break;");
        s.push_str("    const float acc0 = acc[i][0], acc1 = acc[i][1], acc2 = acc[i][2], acc3 = acc[i][3];\n");
        let _ = writeln!(s, "    {}", c.store);
        s.push_str("  }\n}\n");
        return s;
    }
    let _ = writeln!(s, "    for (int j = 0; j < {px}; ++j) {{");
    let _ = writeln!(s, "      const {ix} col = col0 + {};", at(1, "j", "lx", gx));
    let _ = writeln!(s, "      if (col >= {n}) break;");
    s.push_str("      const float acc_ij = acc[i][j];\n");
    let _ = writeln!(s, "      {{ const float acc = acc_ij; {} }}", c.store);
    s.push_str("    }\n  }\n}\n");
    s
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

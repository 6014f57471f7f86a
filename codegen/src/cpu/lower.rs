//! Lowering one [`Kernel`] to a native function `(operands: ptr, lo: i64, hi: i64) -> i32`,
//! once for both CPU back ends: [`lower`] walks the kernel and says what to compute through the
//! [`Emit`] trait, which Cranelift (`crate::cranelift::emit`) and LLVM (`crate::llvm::emit`)
//! implement with their own instructions. The semantics therefore live here only.
//!
//! Shape of the generated code (`P` parallel, `R` reduction dimensions):
//!
//! ```text
//! entry:   base_k = operands[k]                       (one load per operand)
//! for p in P (row-major, do-while loops, extent-1 dimensions are the constant 0; the
//!             outermost loop, the split dimension, over [max(lo, 0), min(hi, extent))):
//!     if guard(p):  acc = identity; for r in R: acc = combine(acc, body(p, r))
//!                   v = epilogue(acc)
//!     else:         v = 0
//!     out[map_out(p, 0)] = v
//! return 0
//! exit(code): return code                             (every failed check branches here)
//! ```
//!
//! Loop indices, accumulators and the values of branches are [`Emit::slot`]s (Cranelift
//! variables, LLVM stack slots that SROA promotes), so SSA construction is the back end's.
//!
//! An interchanged reduction ([`interchange`](super::nest::interchange)) runs, at each point of
//! the other parallel dimensions, `acc[j] = identity` for every `j`, then for `r` in R, for `j`:
//! `acc[j] = combine(acc[j], body)`, then the epilogue and store for every `j` ([`Lower::row`]).
//!
//! Invariants the generated code keeps (the `exec` module relies on them): every load and store
//! is at an element offset proven, by [`Iv`] interval analysis of its map over the ranges of the
//! domain indices in scope, to lie inside its operand, or is preceded by a check that branches
//! to `exit` otherwise; no instruction can trap or be undefined (divisions have a positive
//! divisor, or a divisor checked non-zero and not `-1`). Index arithmetic never wraps: intervals
//! are computed in `i128` and a map that could leave `i64` is rejected, so map arithmetic is
//! emitted as non-wrapping (`nsw`).
//!
//! Payload semantics are exactly the reference evaluator's: `f32` arithmetic in the expression's
//! order (no reassociation, no contraction), wrapping `i64` integers with floor `/` and `%`,
//! NaN-propagating `max`/`min`, comparisons with IEEE unordered semantics, `exp log tanh erf
//! sigmoid` by calls of the reference's functions.

use std::collections::HashMap;

use fbc_dialects::memory::{
    Combine, Kernel, MemType, Scalar, ScalarBin, ScalarKind, ScalarUn, StorageKind,
};
use fbc_index::{Expr, IndexMap};
use fbc_ir::attr::BinOp;
use fbc_ir::ElemType;

use super::nest::{dims_of, div_iv, within, Gemm, Iv, Nest};
use super::Fault;

/// Why lowering failed: the kernel cannot be compiled (its own error), or the code generator
/// refused an instruction (a bug of that back end).
#[derive(Debug)]
pub(crate) enum LowerError {
    Kernel(String),
    /// Only LLVM's builder can refuse an instruction; Cranelift's builder cannot fail.
    #[cfg_attr(not(feature = "llvm"), allow(dead_code))]
    Codegen(String),
}

impl From<String> for LowerError {
    fn from(m: String) -> LowerError {
        LowerError::Kernel(m)
    }
}

impl From<&str> for LowerError {
    fn from(m: &str) -> LowerError {
        LowerError::Kernel(m.to_string())
    }
}

impl LowerError {
    /// The error of kernel `kernel` compiled by code generator `backend`.
    pub(crate) fn into_error(self, kernel: &str, backend: &'static str) -> super::Error {
        match self {
            LowerError::Kernel(message) => super::Error::Kernel { kernel: kernel.into(), message },
            LowerError::Codegen(message) => {
                super::Error::Codegen { kernel: kernel.into(), backend, message }
            }
        }
    }
}

pub(crate) type R<T> = Result<T, LowerError>;

/// A native scalar type of a slot, a load or a store (truth values, the results of
/// comparisons, are the code generator's own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ty {
    I32,
    /// A byte of an `i8` buffer: only loaded, as an `I32` value (sign-extended).
    I8,
    I64,
    F32,
    /// A vector of this many `f32` lanes (the packed contraction's registers, see
    /// [`Lower::gemm`]): loaded and stored at any 4-byte alignment, in slots, `fbin` lane by lane.
    F32x(u32),
}

/// Integer operations on `i64` (and `And`, `Or`, `Xor` on truth values too).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IOp {
    Add,
    Sub,
    Mul,
    /// Truncating; never called with a zero divisor, nor `i64::MIN / -1`.
    SDiv,
    SRem,
    UDiv,
    URem,
    And,
    Or,
    Xor,
    /// Arithmetic shift right.
    AShr,
    SMax,
    SMin,
}

/// Integer comparisons.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ICmp {
    Eq,
    Ne,
    Slt,
    Sle,
    Sgt,
    Sge,
    Ult,
    Uge,
}

/// `f32` arithmetic (IEEE, no fast-math).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FOp {
    Add,
    Sub,
    Mul,
    Div,
}

/// `f32` comparisons: ordered, except `Une` (unordered or not equal) and `Uno` (unordered).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FCmp {
    Oeq,
    Une,
    Olt,
    Ole,
    Ogt,
    Oge,
    Uno,
}

/// One-operand `f32` instructions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FUn {
    Neg,
    Abs,
    Floor,
    Sqrt,
}

/// What a code generator provides to [`lower`]: values, instructions, stack slots (mutable
/// variables), blocks and branches, in its own IR. Every method emits at the current position.
pub(crate) trait Emit {
    /// A value of the function.
    type V: Copy;
    /// A basic block.
    type Block: Copy;
    /// A mutable variable of one [`Ty`].
    type Slot: Copy;

    /// Entry `k` of the operand table (the function's first parameter): a base pointer.
    fn table(&mut self, k: usize) -> R<Self::V>;
    /// The chunk `[lo, hi)` parameters.
    fn chunk(&mut self) -> R<(Self::V, Self::V)>;
    fn iconst(&mut self, v: i64) -> R<Self::V>;
    fn fconst(&mut self, v: f32) -> R<Self::V>;
    /// The zero of `ty` (`I32` or `F32`).
    fn zero(&mut self, ty: Ty) -> R<Self::V>;
    /// `a op b` on `i64`; `nsw`: the result is known not to wrap.
    fn ibin(&mut self, op: IOp, a: Self::V, b: Self::V, nsw: bool) -> R<Self::V>;
    fn ineg(&mut self, a: Self::V, nsw: bool) -> R<Self::V>;
    /// `|a|`, wrapping at `i64::MIN`.
    fn iabs(&mut self, a: Self::V) -> R<Self::V>;
    fn icmp(&mut self, cc: ICmp, a: Self::V, b: Self::V) -> R<Self::V>;
    fn not(&mut self, a: Self::V) -> R<Self::V>;
    /// A truth value as the `i64` 0 or 1.
    fn bool_to_i64(&mut self, a: Self::V) -> R<Self::V>;
    fn sext_i32(&mut self, a: Self::V) -> R<Self::V>;
    fn trunc_i32(&mut self, a: Self::V) -> R<Self::V>;
    fn i64_to_f32(&mut self, a: Self::V) -> R<Self::V>;
    /// Saturating conversion (never called on NaN).
    fn f32_to_i64(&mut self, a: Self::V) -> R<Self::V>;
    /// `c ? a : b`, both already computed.
    fn select(&mut self, c: Self::V, a: Self::V, b: Self::V) -> R<Self::V>;
    /// `a op b` on `f32` or, lane by lane, on two vectors of one [`Ty::F32x`] type.
    fn fbin(&mut self, op: FOp, a: Self::V, b: Self::V) -> R<Self::V>;
    /// A vector of `lanes` copies of the `f32` value `a`.
    fn splat(&mut self, a: Self::V, lanes: u32) -> R<Self::V>;
    fn fun(&mut self, op: FUn, a: Self::V) -> R<Self::V>;
    fn fcmp(&mut self, cc: FCmp, a: Self::V, b: Self::V) -> R<Self::V>;
    /// A call of the reference's `exp log tanh erf sigmoid` (`crate::cpu::math`).
    fn math(&mut self, op: ScalarUn, a: Self::V) -> R<Self::V>;
    /// A call of the reference's rounding to `f16`.
    fn round_f16(&mut self, a: Self::V) -> R<Self::V>;
    /// Element `index` (of type `elem`, `I32` or `F32`) of the array at `base`; with `elem` a
    /// [`Ty::F32x`], the `f32` elements `index..index + lanes`; with `elem` [`Ty::I8`], the
    /// byte `index` sign-extended to an `I32` value.
    fn load(&mut self, elem: Ty, base: Self::V, index: Self::V) -> R<Self::V>;
    /// Stores `v` (of type `elem`) at element `index` of the array at `base`.
    fn store(&mut self, elem: Ty, base: Self::V, index: Self::V, v: Self::V) -> R<()>;
    /// A new variable of type `ty`.
    fn slot(&mut self, ty: Ty) -> R<Self::Slot>;
    fn get(&mut self, s: Self::Slot) -> R<Self::V>;
    fn set(&mut self, s: Self::Slot, v: Self::V) -> R<()>;
    fn block(&mut self) -> Self::Block;
    fn jump(&mut self, to: Self::Block) -> R<()>;
    fn branch(&mut self, c: Self::V, then: Self::Block, other: Self::Block) -> R<()>;
    /// Continues emitting in `b`.
    fn switch_to(&mut self, b: Self::Block);
    /// Returns `code` from the function when `c` holds (an unlikely branch).
    fn fail_if(&mut self, c: Self::V, code: u32) -> R<()>;
    /// Returns 0 from the function.
    fn ret_ok(&mut self) -> R<()>;
}

/// Whether every result of `map` is a sum (with constant factors) of terms that each read
/// dimensions of at most one of the groups `a` and `b` (masks of dimensions): then, with the
/// other dimensions fixed, the offset it gives is `f(a) + g(b)` (an image's offset
/// `(y·W + x)·4 + c` is a linear combination of its results).
fn separable(map: &IndexMap, a: u64, b: u64) -> bool {
    let side = |e: &Expr| -> Option<u8> {
        let vars = e.vars();
        let reads = |mask: u64| {
            map.dims.iter().enumerate().any(|(d, n)| mask & (1u64 << d) != 0 && vars.contains(n))
        };
        match (reads(a), reads(b)) {
            (true, true) => None,
            (true, false) => Some(1),
            (false, true) => Some(2),
            (false, false) => Some(0),
        }
    };
    fn split(e: &Expr, side: &dyn Fn(&Expr) -> Option<u8>) -> bool {
        if side(e).is_some() {
            return true;
        }
        match e {
            Expr::Bin(BinOp::Add | BinOp::Sub, x, y) => split(x, side) && split(y, side),
            Expr::Bin(BinOp::Mul, x, y) => {
                (matches!(**y, Expr::Const(_)) && split(x, side))
                    || (matches!(**x, Expr::Const(_)) && split(y, side))
            }
            Expr::Neg(x) => split(x, side),
            _ => false,
        }
    }
    map.results.iter().all(|e| split(e, &side))
}

/// A payload value: `f32`, or a 64-bit integer.
#[derive(Debug, Clone, Copy)]
enum V<T> {
    F(T),
    I(T),
}

impl<T> V<T> {
    fn kind(&self) -> ScalarKind {
        match self {
            V::F(_) => ScalarKind::Float,
            V::I(_) => ScalarKind::Int,
        }
    }
}

struct Lower<'a, 'e, E: Emit> {
    e: &'e mut E,
    k: &'a Kernel,
    types: &'a [MemType],
    bases: Vec<E::V>,
    /// Current value of each domain index.
    dims: Vec<E::V>,
    /// Range of each domain index where the code being emitted runs.
    ranges: Vec<Iv>,
    /// Operands already read at their map at the current point (`x0` used twice loads once).
    reads: HashMap<usize, V<E::V>>,
    /// The reduction result, while the epilogue is emitted.
    acc: Option<V<E::V>>,
    /// The row statistics computed so far at the current parallel point (a row kernel).
    stats: Vec<E::V>,
    /// The launch's symbols (read and checked at entry) and their ranges.
    syms: Vec<(E::V, Iv)>,
    /// Base of the accumulator row of an interchanged reduction.
    scratch: Option<E::V>,
    /// The dimension whose loop runs over the chunk `[lo, hi)` given by the caller (clamped to
    /// `[0, extent]`) instead of its whole extent; see [`split_dim`](super::nest::split_dim).
    split: Option<(usize, E::V, E::V)>,
}

/// Emits `kernel` (already checked against `types`) through `e`, positioned at the function's
/// entry: with `nest.split = Some(d)`, the loop over dimension `d` runs over
/// `[max(lo, 0), min(hi, extent))` only (nothing when that is empty); without, `lo` and `hi` are
/// ignored. Ends with the return of 0.
pub(crate) fn lower<E: Emit>(
    e: &mut E,
    kernel: &Kernel,
    types: &[MemType],
    Nest { scratch, split, gemm }: Nest,
) -> R<()> {
    for (k, t) in types.iter().enumerate() {
        if i64::try_from(t.elems()).is_err() {
            return Err(
                format!("operand {k} ({t}) has more elements than the JIT can index").into()
            );
        }
    }
    let bases = (0..types.len()).map(|k| e.table(k)).collect::<R<Vec<_>>>()?;
    let scratch_base = match (scratch, gemm) {
        (None, None) => None,
        _ => Some(e.table(types.len())?),
    };
    let zero = e.iconst(0)?;
    let split = match split {
        Some(d) => {
            let n = kernel
                .domain
                .get(d)
                .and_then(|&n| i64::try_from(n).ok())
                .ok_or_else(|| format!("internal: no dimension {d} to split"))?;
            let (lo, hi) = e.chunk()?;
            // The chunk clamped to the extent, so the index ranges of the interval analysis
            // hold whatever the caller passes.
            let lo = e.ibin(IOp::SMax, lo, zero, false)?;
            let n = e.iconst(n)?;
            let hi = e.ibin(IOp::SMin, hi, n, false)?;
            Some((d, lo, hi))
        }
        None => None,
    };
    let rank = kernel.domain.len();
    let mut l = Lower {
        e,
        k: kernel,
        types,
        bases,
        dims: vec![zero; rank],
        ranges: vec![Iv::point(0); rank],
        reads: HashMap::new(),
        acc: None,
        stats: Vec::new(),
        syms: Vec::new(),
        scratch: scratch_base,
        split,
    };
    // The symbols: element 0 of their operands, each checked against its range before anything
    // runs (every chunk of a split launch checks, so a bad value writes nothing anywhere).
    for (j, sym) in kernel.symbols.iter().enumerate() {
        let v = l.e.load(Ty::I32, l.bases[sym.operand], zero)?;
        let v = l.e.sext_i32(v)?;
        let (lo, hi) = (l.e.iconst(sym.lo)?, l.e.iconst(sym.hi)?);
        let low = l.e.icmp(ICmp::Slt, v, lo)?;
        let high = l.e.icmp(ICmp::Sgt, v, hi)?;
        let bad = l.e.ibin(IOp::Or, low, high, false)?;
        l.e.fail_if(bad, Fault::SymbolOutOfRange(j).code())?;
        l.syms.push((v, Iv { lo: sym.lo, hi: sym.hi }));
    }
    let np = kernel.parallel_dims();
    // An empty parallel sub-domain writes nothing; an empty reduction leaves every accumulator
    // at the identity and the epilogue still runs ([`Lower::compute`]), as in the reference
    // executor.
    if !kernel.domain[..np].contains(&0) {
        if kernel.is_row() {
            if scratch.is_some() {
                return Err("internal: a row kernel cannot be interchanged".into());
            }
            l.nest(0, np, &mut |l| l.row_point())?;
        } else if let Some(g) = gemm {
            l.gemm(g)?;
        } else if let Some((j, _)) = scratch {
            let outer: Vec<usize> = (0..np).filter(|&d| d != j).collect();
            l.nest_dims(&outer, &mut |l| l.row(j))?;
        } else {
            l.nest(0, np, &mut |l| l.point())?;
        }
    }
    l.e.ret_ok()
}

type LoopBody<'x, 'a, 'e, E> = dyn FnMut(&mut Lower<'a, 'e, E>) -> R<()> + 'x;
type CountBody<'x, 'a, 'e, E> = dyn FnMut(&mut Lower<'a, 'e, E>, <E as Emit>::V) -> R<()> + 'x;

impl<'a, 'e, E: Emit> Lower<'a, 'e, E> {
    /// Loops over domain dimensions `from..to` (row-major). Every extent is > 0.
    fn nest(&mut self, from: usize, to: usize, body: &mut LoopBody<'_, 'a, 'e, E>) -> R<()> {
        let dims: Vec<usize> = (from..to).collect();
        self.nest_dims(&dims, body)
    }

    /// [`Lower::nest`] over the domain dimensions `dims`, the first outermost: do-while loops,
    /// the index in a slot; extent-1 dimensions are the constant 0.
    fn nest_dims(&mut self, dims: &[usize], body: &mut LoopBody<'_, 'a, 'e, E>) -> R<()> {
        let Some((&from, rest)) = dims.split_first() else {
            return body(self);
        };
        let extent = self.k.domain[from];
        if extent == 1 {
            self.dims[from] = self.e.iconst(0)?;
            self.ranges[from] = Iv::point(0);
            return self.nest_dims(rest, body);
        }
        let n =
            i64::try_from(extent).map_err(|_| format!("domain extent {extent} is too large"))?;
        let index = self.e.slot(Ty::I64)?;
        let head = self.e.block();
        let done = self.e.block();
        let chunk = self.split.filter(|&(d, ..)| d == from).map(|(_, lo, hi)| (lo, hi));
        let (start, end) = match chunk {
            Some((lo, hi)) => (lo, hi),
            None => (self.e.iconst(0)?, self.e.iconst(n)?),
        };
        self.e.set(index, start)?;
        if chunk.is_some() {
            let any = self.e.icmp(ICmp::Slt, start, end)?;
            self.e.branch(any, head, done)?;
        } else {
            self.e.jump(head)?;
        }
        self.e.switch_to(head);
        let i = self.e.get(index)?;
        self.dims[from] = i;
        self.ranges[from] = Iv { lo: 0, hi: n - 1 };
        self.nest_dims(rest, body)?;
        let one = self.e.iconst(1)?;
        let next = self.e.ibin(IOp::Add, i, one, true)?;
        self.e.set(index, next)?;
        let more = self.e.icmp(ICmp::Slt, next, end)?;
        self.e.branch(more, head, done)?;
        self.e.switch_to(done);
        Ok(())
    }

    fn fail_if(&mut self, cond: E::V, fault: Fault) -> R<()> {
        self.e.fail_if(cond, fault.code())
    }

    // ----- index maps ----------------------------------------------------------------------

    /// One map result at the current point, with its interval. `who` names the map's owner in
    /// faults (an operand index, or the operand count for the guard).
    fn affine(&mut self, e: &Expr, map: &IndexMap, who: usize) -> R<(E::V, Iv)> {
        let (v, iv) = match e {
            Expr::Var(name) => match map.dims.iter().position(|d| d == name) {
                Some(j) => (self.dims[j], Some(self.ranges[j])),
                None => {
                    let (v, iv) = map
                        .symbols
                        .iter()
                        .position(|s| s == name)
                        .and_then(|j| self.syms.get(j).copied())
                        .ok_or_else(|| {
                            format!("map {map} uses `{name}`, which is not one of its dimensions or bound symbols")
                        })?;
                    (v, Some(iv))
                }
            },
            Expr::Const(c) => (self.e.iconst(*c)?, Some(Iv::point(*c))),
            Expr::Neg(a) => {
                let (a, ia) = self.affine(a, map, who)?;
                (self.e.ineg(a, true)?, ia.checked_neg())
            }
            Expr::Bin(op, a, c) => {
                let (a, ia) = self.affine(a, map, who)?;
                let (c, ic) = self.affine(c, map, who)?;
                match op {
                    BinOp::Add => (self.e.ibin(IOp::Add, a, c, true)?, ia.checked_add(ic)),
                    BinOp::Sub => (self.e.ibin(IOp::Sub, a, c, true)?, ia.checked_sub(ic)),
                    BinOp::Mul => (self.e.ibin(IOp::Mul, a, c, true)?, ia.checked_mul(ic)),
                    BinOp::FloorDiv | BinOp::CeilDiv | BinOp::Mod => {
                        let (v, iv) = self.map_div(*op, (a, ia), (c, ic), who)?;
                        (v, Some(iv))
                    }
                    // The IR's maps are affine (the verifier checks it).
                    BinOp::Shl | BinOp::Shr | BinOp::And | BinOp::Min | BinOp::Max => {
                        return Err(
                            format!("`{}` in the index map {map} is not affine", op.name()).into()
                        )
                    }
                }
            }
        };
        let Some(iv) = iv else {
            return Err(format!(
                "the index map {map} can leave the 64-bit range over the domain {:?}",
                self.k.domain
            )
            .into());
        };
        // A value known exactly is a constant, which lets the code generator fold what uses it.
        Ok(match iv.singleton() {
            Some(c) if !matches!(e, Expr::Const(_)) => (self.e.iconst(c)?, iv),
            _ => (v, iv),
        })
    }

    /// `floordiv`, `ceildiv`, `mod` with MLIR semantics: the divisor must be positive (else the
    /// map is undefined: a fault), the results are floor-rounded.
    fn map_div(
        &mut self,
        op: BinOp,
        (a, ia): (E::V, Iv),
        (c, ic): (E::V, Iv),
        who: usize,
    ) -> R<(E::V, Iv)> {
        let mut ic = ic;
        if ic.lo <= 0 {
            let zero = self.e.iconst(0)?;
            let bad = self.e.icmp(ICmp::Sle, c, zero)?;
            self.fail_if(bad, Fault::MapUndefined(who))?;
            ic = Iv { lo: 1, hi: ic.hi.max(1) };
        }
        let iv = div_iv(op, ia, ic);
        // Constant divisor: the cheap forms.
        if let Some(d) = ic.singleton() {
            if within(ia, 0, d - 1) {
                return Ok(match op {
                    BinOp::Mod => (a, iv),
                    BinOp::FloorDiv => (self.e.iconst(0)?, iv),
                    _ => {
                        // ceildiv of [0, d) is 0 or 1.
                        let zero = self.e.iconst(0)?;
                        let nz = self.e.icmp(ICmp::Ne, a, zero)?;
                        (self.e.bool_to_i64(nz)?, iv)
                    }
                });
            }
            if d.count_ones() == 1 {
                let s = self.e.iconst(i64::from(d.trailing_zeros()))?;
                let v = match op {
                    BinOp::FloorDiv => self.e.ibin(IOp::AShr, a, s, false)?,
                    BinOp::Mod => {
                        let m = self.e.iconst(d - 1)?;
                        self.e.ibin(IOp::And, a, m, false)?
                    }
                    _ => {
                        if ia.checked_add(Iv::point(d - 1)).is_none() {
                            return Err("a `ceildiv` can leave the 64-bit range".into());
                        }
                        let m = self.e.iconst(d - 1)?;
                        let t = self.e.ibin(IOp::Add, a, m, true)?;
                        self.e.ibin(IOp::AShr, t, s, false)?
                    }
                };
                return Ok((v, iv));
            }
            if ia.lo >= 0 {
                // A dividend (ceildiv: plus `d - 1`) proven below 2^31 is divided in 32 bits:
                // the same quotient, but a division by a constant then becomes a 32-bit
                // multiply-high, which vector units have (x86 has no 64-bit one, so a loop
                // dividing `i64`s is not vectorised).
                let top = if op == BinOp::CeilDiv { ia.hi.checked_add(d - 1) } else { Some(ia.hi) };
                let Some(top) = top else {
                    return Err("a `ceildiv` can leave the 64-bit range".into());
                };
                let narrow = top <= i64::from(i32::MAX);
                let a = if op == BinOp::CeilDiv {
                    let m = self.e.iconst(d - 1)?;
                    self.e.ibin(IOp::Add, a, m, true)?
                } else {
                    a
                };
                let (a, dv) = if narrow {
                    let dv = self.e.iconst(d)?;
                    (self.e.trunc_i32(a)?, self.e.trunc_i32(dv)?)
                } else {
                    (a, self.e.iconst(d)?)
                };
                let rem = if op == BinOp::Mod { IOp::URem } else { IOp::UDiv };
                let v = self.e.ibin(rem, a, dv, false)?;
                let v = if narrow { self.e.sext_i32(v)? } else { v };
                return Ok((v, iv));
            }
        }
        // General case, divisor `c > 0` here: truncating division and a floor correction.
        let v = match op {
            BinOp::FloorDiv => self.floor_divmod(a, c)?.0,
            BinOp::Mod => self.floor_divmod(a, c)?.1,
            _ => {
                // ceildiv(a, c) = -floordiv(-a, c); `-a` fits because `a`'s interval is in i64
                // and was produced by checked steps except at i64::MIN.
                if ia.lo == i64::MIN {
                    return Err("a `ceildiv` can leave the 64-bit range".into());
                }
                let na = self.e.ineg(a, false)?;
                let q = self.floor_divmod(na, c)?.0;
                self.e.ineg(q, false)?
            }
        };
        Ok((v, iv))
    }

    /// Floor quotient and remainder of `a / c` for `c > 0`.
    fn floor_divmod(&mut self, a: E::V, c: E::V) -> R<(E::V, E::V)> {
        let q = self.e.ibin(IOp::SDiv, a, c, false)?;
        let qc = self.e.ibin(IOp::Mul, q, c, false)?;
        let r = self.e.ibin(IOp::Sub, a, qc, false)?;
        let zero = self.e.iconst(0)?;
        let neg = self.e.icmp(ICmp::Slt, r, zero)?;
        let one = self.e.bool_to_i64(neg)?;
        let q = self.e.ibin(IOp::Sub, q, one, false)?;
        let fix = self.e.select(neg, c, zero)?;
        let r = self.e.ibin(IOp::Add, r, fix, false)?;
        Ok((q, r))
    }

    /// The checked element offset of operand `k` at its map, at the current point.
    fn offset(&mut self, k: usize, fault: Fault) -> R<E::V> {
        let map = &self.k.maps[k];
        let t = self.types[k];
        let len = t.elems() as i64;
        match t.storage {
            StorageKind::Buffer { .. } => {
                let (v, iv) = self.affine(&map.results[0], map, k)?;
                self.check_range(v, iv, len, fault)?;
                Ok(v)
            }
            StorageKind::Image { width, height } => {
                let mut c = Vec::with_capacity(3);
                for (i, ext) in [width as i64, height as i64, 4].into_iter().enumerate() {
                    let (v, iv) = self.affine(&map.results[i], map, k)?;
                    self.check_range(v, iv, ext, fault)?;
                    c.push(v);
                }
                let w = self.e.iconst(width as i64)?;
                let row = self.e.ibin(IOp::Mul, c[1], w, true)?;
                let texel = self.e.ibin(IOp::Add, row, c[0], true)?;
                let four = self.e.iconst(4)?;
                let t4 = self.e.ibin(IOp::Mul, texel, four, true)?;
                self.e.ibin(IOp::Add, t4, c[2], true)
            }
        }
    }

    /// Faults unless `0 <= v < len`; nothing when the interval proves it.
    fn check_range(&mut self, v: E::V, iv: Iv, len: i64, fault: Fault) -> R<()> {
        if !within(iv, 0, len - 1) {
            let n = self.e.iconst(len)?;
            let bad = self.e.icmp(ICmp::Uge, v, n)?;
            self.fail_if(bad, fault)?;
        }
        Ok(())
    }

    /// The element type of operand `k` in native code.
    fn elem(&self, k: usize) -> Ty {
        match self.types[k].elem {
            ElemType::I32 => Ty::I32,
            ElemType::I8 => Ty::I8,
            _ => Ty::F32,
        }
    }

    fn load(&mut self, k: usize, offset: E::V) -> R<V<E::V>> {
        let elem = self.elem(k);
        let v = self.e.load(elem, self.bases[k], offset)?;
        Ok(match elem {
            Ty::I32 | Ty::I8 => V::I(self.e.sext_i32(v)?),
            _ => V::F(v),
        })
    }

    // ----- one parallel point ----------------------------------------------------------------

    /// The output element of the current parallel point: guard, reduction, epilogue, store.
    fn point(&mut self) -> R<()> {
        let np = self.k.parallel_dims();
        self.zero_dims(np)?;
        let value = self.guarded(&mut |l| {
            let v = l.compute()?;
            // The reduction's loops left their indices behind: the store is at index 0.
            l.zero_dims(np)?;
            Ok(v)
        })?;
        self.store_out(value)
    }

    /// The output's element type in native code (`I32` or `F32`).
    fn out_ty(&self) -> Ty {
        self.elem(self.k.output())
    }

    /// Domain indices `from..` at 0 (their loops are not running), with that range.
    fn zero_dims(&mut self, from: usize) -> R<()> {
        for r in from..self.k.domain.len() {
            self.dims[r] = self.e.iconst(0)?;
            self.ranges[r] = Iv::point(0);
        }
        Ok(())
    }

    /// Stores `value` into the output at its map, at the current point.
    fn store_out(&mut self, value: E::V) -> R<()> {
        let out = self.k.output();
        let off = self.offset(out, Fault::WriteOutOfBounds(out))?;
        self.e.store(self.out_ty(), self.bases[out], off, value)
    }

    /// The value `value` emits (of the output's type) where the guard holds at the current
    /// point, else 0; while `value` is emitted the index ranges are narrowed to where the guard
    /// holds.
    fn guarded(&mut self, value: &mut dyn FnMut(&mut Self) -> R<E::V>) -> R<E::V> {
        let Some((cond, narrowed)) = self.guard()? else { return value(self) };
        let out_ty = self.out_ty();
        let slot = self.e.slot(out_ty)?;
        let then = self.e.block();
        let other = self.e.block();
        let merge = self.e.block();
        self.e.branch(cond, then, other)?;
        self.e.switch_to(then);
        let saved = std::mem::replace(&mut self.ranges, narrowed);
        let v = value(self)?;
        self.ranges = saved;
        self.e.set(slot, v)?;
        self.e.jump(merge)?;
        self.e.switch_to(other);
        let zero = self.e.zero(out_ty)?;
        self.e.set(slot, zero)?;
        self.e.jump(merge)?;
        self.e.switch_to(merge);
        self.e.get(slot)
    }

    /// `acc = combine(acc, v)` on `acc`, an `f32`.
    fn combine(&mut self, combine: Combine, acc: E::V, v: V<E::V>) -> R<E::V> {
        let v = self.as_f(v)?;
        match combine {
            Combine::Add => self.e.fbin(FOp::Add, acc, v),
            Combine::Max => self.fmax(acc, v),
        }
    }

    /// `body` combined over domain dimensions `from..to` in row-major order from the combine's
    /// identity.
    fn reduce(&mut self, body: &Scalar, combine: Combine, from: usize, to: usize) -> R<E::V> {
        let slot = self.e.slot(Ty::F32)?;
        let init = self.e.fconst(combine.identity())?;
        self.e.set(slot, init)?;
        self.nest(from, to, &mut |l| {
            l.reads.clear();
            let v = l.scalar(body)?;
            let acc = l.e.get(slot)?;
            let acc = l.combine(combine, acc, v)?;
            l.e.set(slot, acc)
        })?;
        self.e.get(slot)
    }

    /// One row of a row kernel at the current parallel point: each statistic combined over the
    /// row dimensions in row-major order from the combine's identity, then its epilogue; then
    /// the body stored at every row point (0 where the guard fails), as the reference executor
    /// computes it.
    fn row_point(&mut self) -> R<()> {
        let k = self.k;
        let np = k.parallel_dims();
        let rank = k.domain.len();
        let out_ty = self.out_ty();
        self.statistics(false)?;
        self.nest(np, rank, &mut |l| {
            let value = l.guarded(&mut |l| {
                l.reads.clear();
                let v = l.scalar(&l.k.body)?;
                l.finish(v, out_ty)
            })?;
            l.store_out(value)
        })?;
        self.zero_dims(np)
    }

    /// All points of parallel dimension `j` at once, for an interchanged reduction: the
    /// accumulators of the row live in the scratch array, the reduction loops are outside and
    /// dimension `j` inside, so each output element is still combined in row-major reduction
    /// order (bit-identical to [`Lower::point`]) while the inputs are read along their
    /// contiguous dimension (the inner loop a vectoriser can take).
    fn row(&mut self, j: usize) -> R<()> {
        let np = self.k.parallel_dims();
        let rank = self.k.domain.len();
        let (scratch, combine) = match (self.scratch, self.k.combine) {
            (Some(s), Some(c)) if j < np && self.k.guard.is_none() => (s, c),
            _ => {
                return Err(
                    "internal: interchanged lowering of a kernel that does not allow it".into()
                )
            }
        };
        let out = self.k.output();
        let out_ty = self.out_ty();
        // The accumulator of the current index of dimension `j` is element `dims[j]` of the
        // scratch array: in `[0, extent)`, its length, by construction of the loop.
        self.zero_dims(np)?;
        self.nest_dims(&[j], &mut |l| {
            let init = l.e.fconst(combine.identity())?;
            l.e.store(Ty::F32, scratch, l.dims[j], init)
        })?;
        self.nest(np, rank, &mut |l| {
            l.nest_dims(&[j], &mut |l| {
                l.reads.clear();
                let v = l.scalar(&l.k.body)?;
                let acc = l.e.load(Ty::F32, scratch, l.dims[j])?;
                let acc = l.combine(combine, acc, v)?;
                l.e.store(Ty::F32, scratch, l.dims[j], acc)
            })
        })?;
        self.zero_dims(np)?;
        self.nest_dims(&[j], &mut |l| {
            let acc = V::F(l.e.load(Ty::F32, scratch, l.dims[j])?);
            let v = l.finish(acc, out_ty)?;
            let off = l.offset(out, Fault::WriteOutOfBounds(out))?;
            l.e.store(out_ty, l.bases[out], off, v)
        })
    }

    // ----- the packed contraction -----------------------------------------------------------

    /// `for (v = start; v < end; v += step) body(v)` (`step > 0`, `end + step` in `i64`).
    fn count(
        &mut self,
        start: E::V,
        end: E::V,
        step: i64,
        body: &mut CountBody<'_, 'a, 'e, E>,
    ) -> R<()> {
        let index = self.e.slot(Ty::I64)?;
        let head = self.e.block();
        let done = self.e.block();
        self.e.set(index, start)?;
        let any = self.e.icmp(ICmp::Slt, start, end)?;
        self.e.branch(any, head, done)?;
        self.e.switch_to(head);
        let v = self.e.get(index)?;
        body(self, v)?;
        let step = self.e.iconst(step)?;
        let next = self.e.ibin(IOp::Add, v, step, true)?;
        self.e.set(index, next)?;
        let more = self.e.icmp(ICmp::Slt, next, end)?;
        self.e.branch(more, head, done)?;
        self.e.switch_to(done);
        Ok(())
    }

    /// [`Lower::count`] from the constant `start` to `end`.
    fn count_from(
        &mut self,
        start: i64,
        end: E::V,
        step: i64,
        body: &mut CountBody<'_, 'a, 'e, E>,
    ) -> R<()> {
        let start = self.e.iconst(start)?;
        self.count(start, end, step, body)
    }

    /// `a · c + d` on non-negative `i64` values known not to overflow (scratch offsets, block
    /// indices: products of block sizes and domain extents).
    fn mul_add(&mut self, a: E::V, c: i64, d: E::V) -> R<E::V> {
        let c = self.e.iconst(c)?;
        let ac = self.e.ibin(IOp::Mul, a, c, true)?;
        self.e.ibin(IOp::Add, ac, d, true)
    }

    /// `v + c` (no overflow).
    fn add_const(&mut self, v: E::V, c: i64) -> R<E::V> {
        let c = self.e.iconst(c)?;
        self.e.ibin(IOp::Add, v, c, true)
    }

    /// The points of the dimensions of bit mask `group`, walked as one row-major index: its
    /// bounds, the caller's chunk when the split dimension is one of them (every dimension of
    /// the group before it has one point: the split dimension is the first with more), else
    /// all of them.
    fn group_span(&mut self, group: u64) -> R<(E::V, E::V)> {
        let dims: Vec<usize> = dims_of(group).collect();
        let total = dims.iter().map(|&d| self.k.domain[d] as i64).product::<i64>();
        match self.split {
            Some((s, lo, hi)) if dims.contains(&s) => {
                let inner =
                    dims.iter().filter(|&&d| d > s).map(|&d| self.k.domain[d] as i64).product();
                let inner = self.e.iconst(inner)?;
                let lo = self.e.ibin(IOp::Mul, lo, inner, true)?;
                let hi = self.e.ibin(IOp::Mul, hi, inner, true)?;
                Ok((lo, hi))
            }
            _ => Ok((self.e.iconst(0)?, self.e.iconst(total)?)),
        }
    }

    /// Sets the dimensions of bit mask `group` to the point at row-major index `index` (in
    /// `[0, points)`) of their extents.
    fn set_group(&mut self, group: u64, index: E::V) -> R<()> {
        let dims: Vec<usize> = dims_of(group).collect();
        let mut rest = index;
        for (n, &d) in dims.iter().enumerate().rev() {
            let ext = self.k.domain[d] as i64;
            let v = if ext == 1 {
                self.e.iconst(0)?
            } else if n == 0 || dims[..n].iter().all(|&o| self.k.domain[o] == 1) {
                rest
            } else {
                let c = self.e.iconst(ext)?;
                let q = self.e.ibin(IOp::UDiv, rest, c, false)?;
                let v = self.e.ibin(IOp::URem, rest, c, false)?;
                rest = q;
                v
            };
            self.at(d, v);
        }
        Ok(())
    }

    /// The reduction dimensions as a bit mask.
    fn reduction_group(&self) -> u64 {
        (self.k.parallel_dims()..self.k.domain.len()).fold(0, |m, d| m | 1 << d)
    }

    /// Sets domain index `d` to `v`, which lies in the dimension's extent.
    fn at(&mut self, d: usize, v: E::V) {
        self.dims[d] = v;
        self.ranges[d] = Iv { lo: 0, hi: self.k.domain[d] as i64 - 1 };
    }

    /// A packed contraction ([`Gemm`]), at every point of the other parallel dimensions:
    /// BLIS's loop nest over the `i` × `j` block of this chunk. For each `nc`-column block,
    /// each `mc`-row block: the accumulator tile (`mc × nc` in the scratch array) at the
    /// identity; for each `kc`-step block of the reduction, in order, the `a` and `b` values
    /// packed into panels (`mr` rows, or `nr` columns, per reduction step, contiguous; rows and
    /// columns past the block's edge repeat its last one and are never stored) and the
    /// register-blocked product of every pair of panels added into the tile; then the
    /// epilogue and the store of each of the block's points. Every output element is the
    /// `add` of its products in reduction order from the identity, exactly as in
    /// [`Lower::point`]: vectors hold `nr` distinct columns, never parts of one sum.
    fn gemm(&mut self, g: Gemm) -> R<()> {
        let np = self.k.parallel_dims();
        let outer: Vec<usize> = (0..np).filter(|&d| (g.i | g.j) & (1 << d) == 0).collect();
        self.zero_dims(np)?;
        self.nest_dims(&outer, &mut |l| l.gemm_block(g))
    }

    fn gemm_block(&mut self, g: Gemm) -> R<()> {
        let scratch =
            self.scratch.ok_or("internal: a packed contraction without its scratch array")?;
        let sh = g.shape;
        let (mr, nr, lanes) = (i64::from(sh.mr), i64::from(sh.nr()), sh.lanes);
        let (mc, nc, kc) = (i64::from(sh.mc), i64::from(sh.nc), i64::from(sh.kc));
        let [_, bp, ct, deltas, _] = sh.layout().map(|x| x as i64);
        let np = self.k.parallel_dims();
        let kn = self.k.domain[np..].iter().map(|&n| n as i64).product::<i64>();
        let kn = self.e.iconst(kn)?;
        let (i_lo, i_hi) = self.group_span(g.i)?;
        let (j_lo, j_hi) = self.group_span(g.j)?;
        let identity = self.e.fconst(Combine::Add.identity())?;
        let identity = self.e.splat(identity, lanes)?;
        self.count(j_lo, j_hi, nc, &mut |l, jc| {
            let ncv = l.block_len(j_hi, jc, nc)?;
            let nb = l.panels(ncv, nr)?;
            l.count(i_lo, i_hi, mc, &mut |l, ic| {
                let mcv = l.block_len(i_hi, ic, mc)?;
                let ma = l.panels(mcv, mr)?;
                let tile_end = l.e.iconst(ct + mc * nc)?;
                l.count_from(ct, tile_end, i64::from(lanes), &mut |l, t| {
                    l.e.store(Ty::F32x(lanes), scratch, t, identity)
                })?;
                l.count_from(0, kn, kc, &mut |l, k0| {
                    let kb = l.block_len(kn, k0, kc)?;
                    let packs = [
                        (g.a, g.a_plain, g.a_left, g.i, g.j, ic, i_hi, ma, mr, 0),
                        (g.b, g.b_plain, !g.a_left, g.j, g.i, jc, j_hi, nb, nr, bp),
                    ];
                    // In the body's order, so that the operands are read in the same order.
                    let order = if g.a_left { [0, 1] } else { [1, 0] };
                    for n in order {
                        let (o, plain, left, d, other, first, end, count, width, at) = packs[n];
                        // A factor that is an expression is computed where it is packed.
                        let expr = if plain { None } else { l.factor(left) };
                        l.pack(o, expr, d, other, first, end, count, width, k0, kb, at, deltas)?;
                    }
                    l.count_from(0, nb, 1, &mut |l, q| {
                        l.count_from(0, ma, 1, &mut |l, p| l.micro(g, p, q, kb))
                    })
                })?;
                // The epilogue and the store of each point of the block.
                let zero = l.e.iconst(0)?;
                l.count_from(0, mcv, 1, &mut |l, rr| {
                    let i = l.e.ibin(IOp::Add, ic, rr, true)?;
                    l.set_group(g.i, i)?;
                    let row = l.mul_add(rr, nc, zero)?;
                    let row = l.add_const(row, ct)?;
                    l.count_from(0, ncv, 1, &mut |l, cc| {
                        let j = l.e.ibin(IOp::Add, jc, cc, true)?;
                        l.set_group(g.j, j)?;
                        l.zero_dims(np)?;
                        let t = l.e.ibin(IOp::Add, row, cc, true)?;
                        let acc = V::F(l.e.load(Ty::F32, scratch, t)?);
                        let out_ty = l.out_ty();
                        let v = l.finish(acc, out_ty)?;
                        l.store_out(v)
                    })
                })
            })
        })
    }

    /// `min(end - start, size)`: the length of the block at `start` (`start < end`).
    fn block_len(&mut self, end: E::V, start: E::V, size: i64) -> R<E::V> {
        let left = self.e.ibin(IOp::Sub, end, start, true)?;
        let size = self.e.iconst(size)?;
        self.e.ibin(IOp::SMin, left, size, false)
    }

    /// `⌈len / width⌉` for `len ≥ 0`: the panels a block of `len` rows or columns takes.
    fn panels(&mut self, len: E::V, width: i64) -> R<E::V> {
        let up = self.add_const(len, width - 1)?;
        let w = self.e.iconst(width)?;
        self.e.ibin(IOp::UDiv, up, w, false)
    }

    /// The left (`left`) or right factor of the body's product.
    fn factor(&self, left: bool) -> Option<&'a Scalar> {
        let k: &'a Kernel = self.k;
        match &k.body {
            Scalar::Bin(ScalarBin::Mul, x, y) => Some(if left { &**x } else { &**y }),
            _ => None,
        }
    }

    /// Packs operand `o` (or the factor `expr` of the product, computed at each point: a
    /// packed weight decoded once per block of steps) for reduction steps `k0..k0 + kb`:
    /// `count` panels of `width` indices
    /// of dimension group `d` from `first` (past `end - 1`, the index `end - 1` again), each
    /// panel `kb` steps of `width` contiguous values, at scratch offset `at` (panel `p`, step
    /// `kk`, lane `w` at `at + (p·kb + kk)·width + w`). The group `other`, which `o` does not
    /// read, is at its first point. `deltas`: where `kc` `i32`s of scratch are free for
    /// [`Lower::pack_separable`].
    #[allow(clippy::too_many_arguments)]
    fn pack(
        &mut self,
        o: usize,
        expr: Option<&'a Scalar>,
        d: u64,
        other: u64,
        first: E::V,
        end: E::V,
        count: E::V,
        width: i64,
        k0: E::V,
        kb: E::V,
        at: i64,
        deltas: i64,
    ) -> R<()> {
        let scratch =
            self.scratch.ok_or("internal: a packed contraction without its scratch array")?;
        let reduction = self.reduction_group();
        let zero = self.e.iconst(0)?;
        let one = self.e.iconst(1)?;
        let last = self.e.ibin(IOp::Sub, end, one, true)?;
        self.set_group(other, zero)?;
        let small = self.types[o].elems() < 1 << 31;
        if expr.is_none() && small && separable(&self.k.maps[o], d, reduction) {
            return self
                .pack_separable(o, d, reduction, first, last, count, width, k0, kb, at, deltas);
        }
        self.count_from(0, count, 1, &mut |l, p| {
            let panel = l.e.ibin(IOp::Mul, p, kb, true)?;
            let p0 = l.mul_add(p, width, first)?;
            l.count_from(0, kb, 1, &mut |l, kk| {
                let k = l.e.ibin(IOp::Add, k0, kk, true)?;
                l.set_group(reduction, k)?;
                let step = l.e.ibin(IOp::Add, panel, kk, true)?;
                let base = l.mul_add(step, width, zero)?;
                let base = l.add_const(base, at)?;
                let w_end = l.e.iconst(width)?;
                l.count_from(0, w_end, 1, &mut |l, w| {
                    let x = l.e.ibin(IOp::Add, p0, w, true)?;
                    let x = l.e.ibin(IOp::SMin, x, last, false)?;
                    l.set_group(d, x)?;
                    let v = match expr {
                        Some(e) => {
                            // Its reads at this point, not at the previous one, and none
                            // left for code outside this loop.
                            l.reads.clear();
                            let v = l.scalar(e)?;
                            l.reads.clear();
                            v
                        }
                        None => {
                            let off = l.offset(o, Fault::ReadOutOfBounds(o))?;
                            l.load(o, off)?
                        }
                    };
                    let v = l.as_f(v)?;
                    let t = l.e.ibin(IOp::Add, base, w, true)?;
                    l.e.store(Ty::F32, scratch, t, v)
                })
            })
        })
    }

    /// [`Lower::pack`] of an operand whose offset is a sum of a function of the reduction
    /// indices and one of the packed group's (`separable`): `off(k, x) = off(k₀, x) + (off(k,
    /// x₀) − off(k₀, x₀))`, exactly. The reduction steps' deltas `off(k, x₀) − off(k₀, x₀)` are
    /// computed once per block of steps into the scratch array (as `i32`: the operand has fewer
    /// than 2^31 elements), each panel's `width` column offsets `off(k₀, x)` once (unrolled), and
    /// an element then costs two adds, a load and a store instead of the group's division into
    /// its dimensions and the map (which dominated products with a long reduction: measured in
    /// `tests/bench/cpu_llama.sh`). The elements are read along whichever of the two indices
    /// moves least in memory (a transposed weight: down its columns), so that consecutive reads
    /// share cache lines.
    #[allow(clippy::too_many_arguments)]
    fn pack_separable(
        &mut self,
        o: usize,
        d: u64,
        reduction: u64,
        first: E::V,
        last: E::V,
        count: E::V,
        width: i64,
        k0: E::V,
        kb: E::V,
        at: i64,
        deltas: i64,
    ) -> R<()> {
        let scratch =
            self.scratch.ok_or("internal: a packed contraction without its scratch array")?;
        let zero = self.e.iconst(0)?;
        let along_k = self.moves_less(o, reduction, d);
        // The deltas of this block of reduction steps, at the first column.
        self.set_group(d, first)?;
        self.set_group(reduction, k0)?;
        let origin = self.offset(o, Fault::ReadOutOfBounds(o))?;
        self.count_from(0, kb, 1, &mut |l, kk| {
            let k = l.e.ibin(IOp::Add, k0, kk, true)?;
            l.set_group(reduction, k)?;
            let off = l.offset(o, Fault::ReadOutOfBounds(o))?;
            let delta = l.e.ibin(IOp::Sub, off, origin, true)?;
            let delta = l.e.trunc_i32(delta)?;
            let t = l.add_const(kk, deltas)?;
            l.e.store(Ty::I32, scratch, t, delta)
        })?;
        self.count_from(0, count, 1, &mut |l, p| {
            let panel = l.e.ibin(IOp::Mul, p, kb, true)?;
            let p0 = l.mul_add(p, width, first)?;
            l.set_group(reduction, k0)?;
            let mut columns = Vec::with_capacity(width as usize);
            for w in 0..width {
                let x = l.add_const(p0, w)?;
                let x = l.e.ibin(IOp::SMin, x, last, false)?;
                l.set_group(d, x)?;
                columns.push(l.offset(o, Fault::ReadOutOfBounds(o))?);
            }
            // Element (kk, w) of the panel: read at column w's offset plus step kk's delta,
            // stored at (panel + kk)·width + w.
            let element = |l: &mut Self, kk: E::V, w: usize| -> R<()> {
                let t = l.add_const(kk, deltas)?;
                let delta = l.e.load(Ty::I32, scratch, t)?;
                let delta = l.e.sext_i32(delta)?;
                let off = l.e.ibin(IOp::Add, columns[w], delta, true)?;
                let v = l.load(o, off)?;
                let v = l.as_f(v)?;
                let step = l.e.ibin(IOp::Add, panel, kk, true)?;
                let t = l.mul_add(step, width, zero)?;
                let t = l.add_const(t, at + w as i64)?;
                l.e.store(Ty::F32, scratch, t, v)
            };
            if along_k {
                for w in 0..columns.len() {
                    l.count_from(0, kb, 1, &mut |l, kk| element(l, kk, w))?;
                }
                Ok(())
            } else {
                l.count_from(0, kb, 1, &mut |l, kk| {
                    (0..columns.len()).try_for_each(|w| element(l, kk, w))
                })
            }
        })
    }

    /// Whether operand `o`'s offset moves less with one step of group `a` (its innermost
    /// dimension of more than one point) than with one of group `b`, the other dimensions at 0.
    fn moves_less(&self, o: usize, a: u64, b: u64) -> bool {
        let step = |g: u64| -> Option<i64> {
            let map = &self.k.maps[o];
            let d = dims_of(g).filter(|&d| self.k.domain[d] > 1).last()?;
            let mut at = vec![0i64; map.dims.len() + map.symbols.len()];
            for (j, s) in self.k.symbols.iter().enumerate() {
                at[map.dims.len() + j] = s.lo;
            }
            let offset = |at: &[i64]| -> Option<i64> {
                let r = map.eval(at)?;
                match self.types[o].storage {
                    StorageKind::Buffer { .. } => r.first().copied(),
                    StorageKind::Image { width, .. } => {
                        Some((r.get(1)? * width as i64 + r.first()?) * 4 + r.get(2)?)
                    }
                }
            };
            let base = offset(&at)?;
            at[d] = 1;
            Some((offset(&at)? - base).abs())
        };
        matches!((step(a), step(b)), (Some(x), Some(y)) if x < y)
    }

    /// The register block of `a` panel `p` and `b` panel `q` over `kb` reduction steps: its
    /// `mr × nr` accumulators (`mr · vectors` vectors) from the tile, `acc += a · b` (or
    /// `b · a`, the body's order) lane by lane at each step, back into the tile.
    fn micro(&mut self, g: Gemm, p: E::V, q: E::V, kb: E::V) -> R<()> {
        let scratch =
            self.scratch.ok_or("internal: a packed contraction without its scratch array")?;
        let sh = g.shape;
        let (mr, nr, lanes) = (i64::from(sh.mr), i64::from(sh.nr()), sh.lanes);
        let vty = Ty::F32x(lanes);
        let nc = i64::from(sh.nc);
        let [ap, bp, ct, _, _] = sh.layout().map(|x| x as i64);
        let zero = self.e.iconst(0)?;
        // Panel bases: a at ap + p·kb·mr, b at bp + q·kb·nr.
        let pk = self.e.ibin(IOp::Mul, p, kb, true)?;
        let pa = self.mul_add(pk, mr, zero)?;
        let pa = self.add_const(pa, ap)?;
        let qk = self.e.ibin(IOp::Mul, q, kb, true)?;
        let pb = self.mul_add(qk, nr, zero)?;
        let pb = self.add_const(pb, bp)?;
        // Tile element (p·mr + row, q·nr + v·lanes) at ct + (p·mr + row)·nc + q·nr + v·lanes.
        let row0 = self.mul_add(p, mr * nc, zero)?;
        let col0 = self.mul_add(q, nr, zero)?;
        let corner = self.e.ibin(IOp::Add, row0, col0, true)?;
        let corner = self.add_const(corner, ct)?;
        let mut accs = Vec::new();
        let mut tile = Vec::new();
        for row in 0..mr {
            for v in 0..i64::from(sh.vectors) {
                let t = self.add_const(corner, row * nc + v * i64::from(lanes))?;
                let s = self.e.slot(vty)?;
                let x = self.e.load(vty, scratch, t)?;
                self.e.set(s, x)?;
                accs.push(s);
                tile.push(t);
            }
        }
        self.count_from(0, kb, 1, &mut |l, kk| {
            let ka = l.mul_add(kk, mr, pa)?;
            let kbv = l.mul_add(kk, nr, pb)?;
            let mut bs = Vec::new();
            for v in 0..i64::from(sh.vectors) {
                let t = l.add_const(kbv, v * i64::from(lanes))?;
                bs.push(l.e.load(vty, scratch, t)?);
            }
            for row in 0..mr {
                let t = l.add_const(ka, row)?;
                let a = l.e.load(Ty::F32, scratch, t)?;
                let a = l.e.splat(a, lanes)?;
                for (v, &b) in bs.iter().enumerate() {
                    let prod = if g.a_left {
                        l.e.fbin(FOp::Mul, a, b)?
                    } else {
                        l.e.fbin(FOp::Mul, b, a)?
                    };
                    let s = accs[row as usize * bs.len() + v];
                    let acc = l.e.get(s)?;
                    let acc = l.e.fbin(FOp::Add, acc, prod)?;
                    l.e.set(s, acc)?;
                }
            }
            Ok(())
        })?;
        for (s, t) in accs.into_iter().zip(tile) {
            let x = self.e.get(s)?;
            self.e.store(vty, scratch, t, x)?;
        }
        Ok(())
    }

    /// The guard condition (`None`: none, or always true) and the index ranges where it holds.
    fn guard(&mut self) -> R<Option<(E::V, Vec<Iv>)>> {
        let Some(g) = &self.k.guard else { return Ok(None) };
        let who = self.types.len();
        let mut cond: Option<E::V> = None;
        let mut narrowed = self.ranges.clone();
        for (e, &bound) in g.map.results.iter().zip(&g.bounds) {
            let bound =
                i64::try_from(bound).map_err(|_| format!("guard bound {bound} is too large"))?;
            let hi = bound - 1;
            let (v, iv) = self.affine(e, &g.map, who)?;
            if let Expr::Var(name) = e {
                if let Some(j) = g.map.dims.iter().position(|d| d == name) {
                    // Where the guard never holds, the code is unreachable: keep the range.
                    if let Some(n) = Iv::new(0, hi).and_then(|g| g.intersect(narrowed[j])) {
                        narrowed[j] = n;
                    }
                }
            }
            if within(iv, 0, hi) {
                continue;
            }
            let b = self.e.iconst(bound)?;
            let ok = self.e.icmp(ICmp::Ult, v, b)?;
            cond = Some(match cond {
                None => ok,
                Some(c) => self.e.ibin(IOp::And, c, ok, false)?,
            });
        }
        Ok(cond.map(|c| (c, narrowed)))
    }

    /// The (guarded) value of the current parallel point, converted to the output's type.
    fn compute(&mut self) -> R<E::V> {
        let np = self.k.parallel_dims();
        let rank = self.k.domain.len();
        let acc = match self.k.combine {
            None => {
                self.reads.clear();
                self.scalar(&self.k.body)?
            }
            Some(combine) if self.k.domain[np..].contains(&0) => {
                self.statistics(true)?;
                V::F(self.e.fconst(combine.identity())?)
            }
            Some(combine) => {
                self.statistics(false)?;
                let r = self.reduce(&self.k.body, combine, np, rank)?;
                self.zero_dims(np)?;
                V::F(r)
            }
        };
        let out_ty = self.out_ty();
        self.finish(acc, out_ty)
    }

    /// A reduction's statistics at the current parallel point into `self.stats`, in order:
    /// each combined over the reduction in row-major order (`empty`: the reduction has no
    /// point, each at its identity), then its epilogue.
    fn statistics(&mut self, empty: bool) -> R<()> {
        let k = self.k;
        let np = k.parallel_dims();
        self.stats.clear();
        for st in &k.stats {
            let acc = if empty {
                self.e.fconst(st.combine.identity())?
            } else {
                let acc = self.reduce(&st.body, st.combine, np, k.domain.len())?;
                self.zero_dims(np)?;
                acc
            };
            let v = match &st.epilogue {
                Some(e) => {
                    self.reads.clear();
                    self.acc = Some(V::F(acc));
                    let v = self.scalar(e);
                    self.acc = None;
                    let v = v?;
                    self.as_f(v)?
                }
                None => acc,
            };
            self.stats.push(v);
        }
        Ok(())
    }

    /// The epilogue applied to `acc`, converted to the output's storage type `out_ty`.
    fn finish(&mut self, acc: V<E::V>, out_ty: Ty) -> R<E::V> {
        let v = match &self.k.epilogue {
            Some(e) => {
                self.reads.clear();
                self.acc = Some(acc);
                let v = self.scalar(e);
                self.acc = None;
                v?
            }
            None => acc,
        };
        match (out_ty, v) {
            (Ty::I32, V::I(i)) => self.e.trunc_i32(i),
            (Ty::I32, V::F(_)) => {
                Err("the kernel computes f32 values for an integer output".into())
            }
            (_, v) if self.types[self.k.output()].is_half() => {
                // An `f16` image stores the value rounded to `f16`: the reference's function.
                let f = self.as_f(v)?;
                self.e.round_f16(f)
            }
            (_, v) => self.as_f(v),
        }
    }

    // ----- payload ---------------------------------------------------------------------------

    fn as_f(&mut self, v: V<E::V>) -> R<E::V> {
        match v {
            V::F(f) => Ok(f),
            V::I(i) => self.e.i64_to_f32(i),
        }
    }

    /// Truth value of a payload value (non-zero; NaN is true).
    fn truth(&mut self, v: V<E::V>) -> R<E::V> {
        match v {
            V::I(i) => {
                let z = self.e.iconst(0)?;
                self.e.icmp(ICmp::Ne, i, z)
            }
            V::F(f) => {
                let z = self.e.fconst(0.0)?;
                self.e.fcmp(FCmp::Une, f, z)
            }
        }
    }

    fn bool_int(&mut self, b: E::V) -> R<V<E::V>> {
        Ok(V::I(self.e.bool_to_i64(b)?))
    }

    /// NaN-propagating maximum, exactly `fmax_nan`: NaN if either is NaN, else `a` if `a >= b`.
    fn fmax(&mut self, a: E::V, b: E::V) -> R<E::V> {
        self.fpick(a, b, FCmp::Oge)
    }

    fn fmin(&mut self, a: E::V, b: E::V) -> R<E::V> {
        self.fpick(a, b, FCmp::Ole)
    }

    fn fpick(&mut self, a: E::V, b: E::V, cc: FCmp) -> R<E::V> {
        let uno = self.e.fcmp(FCmp::Uno, a, b)?;
        let take_a = self.e.fcmp(cc, a, b)?;
        let r = self.e.select(take_a, a, b)?;
        let nan = self.e.fconst(f32::NAN)?;
        self.e.select(uno, nan, r)
    }

    fn kind_of(&self, e: &Scalar) -> Result<ScalarKind, String> {
        let types = self.types;
        let operand = move |k: usize| types.get(k).map(|t| ScalarKind::of_elem(t.elem));
        e.kind(&operand, self.acc.as_ref().map(V::kind))
    }

    /// Whether evaluating `e` can fault (a bounds check, a division, `int` of NaN): such a
    /// `select` branch is only evaluated when taken.
    fn may_fail(&self, e: &Scalar) -> bool {
        let mut fails = false;
        e.visit(&mut |s| {
            fails |= match s {
                Scalar::Load(..) => true,
                Scalar::In(k) => !self.reads.contains_key(k),
                Scalar::Bin(ScalarBin::Div | ScalarBin::Rem, a, b) => {
                    self.kind_of(a).ok() != Some(ScalarKind::Float)
                        && self.kind_of(b).ok() != Some(ScalarKind::Float)
                }
                Scalar::Un(ScalarUn::ToInt, a) => self.kind_of(a).ok() != Some(ScalarKind::Int),
                _ => false,
            }
        });
        fails
    }

    fn scalar(&mut self, e: &Scalar) -> R<V<E::V>> {
        // A left-nested chain `((a op b) op c) op ...` (what `a op b op c` parses to, of any
        // length) is walked in a loop, left operand first as always: only right operands and
        // other nodes recurse, and those nest no deeper than the payload parser and fusion allow.
        if let Scalar::Bin(..) = e {
            let mut spine: Vec<(ScalarBin, &Scalar)> = Vec::new();
            let mut base = e;
            while let Scalar::Bin(op, a, c) = base {
                spine.push((*op, c));
                base = a;
            }
            let mut acc = self.scalar(base)?;
            for (op, c) in spine.into_iter().rev() {
                let vc = self.scalar(c)?;
                let pow2 = match *c {
                    Scalar::Int(d) if d > 0 && d.count_ones() == 1 => Some(d),
                    _ => None,
                };
                acc = self.binary(op, acc, vc, pow2)?;
            }
            return Ok(acc);
        }
        Ok(match e {
            Scalar::Float(x) => V::F(self.e.fconst(*x as f32)?),
            Scalar::Int(x) => V::I(self.e.iconst(*x)?),
            Scalar::Dim(d) => V::I(
                *self.dims.get(*d).ok_or_else(|| format!("`d{d}` is not a domain dimension"))?,
            ),
            Scalar::Acc => self.acc.ok_or("`acc` outside an epilogue")?,
            Scalar::Stat(k) => V::F(
                *self.stats.get(*k).ok_or_else(|| format!("`s{k}` read before it is computed"))?,
            ),
            Scalar::In(k) => {
                if let Some(v) = self.reads.get(k) {
                    return Ok(*v);
                }
                if *k >= self.types.len() {
                    return Err(format!("`x{k}`: no operand {k}").into());
                }
                let off = self.offset(*k, Fault::ReadOutOfBounds(*k))?;
                let v = self.load(*k, off)?;
                self.reads.insert(*k, v);
                v
            }
            Scalar::Load(k, e) => {
                let off = match self.scalar(e)? {
                    V::I(i) => i,
                    V::F(_) => {
                        return Err(
                            format!("the element offset of `x{k}[..]` is not an integer").into()
                        )
                    }
                };
                let t = self.types.get(*k).ok_or_else(|| format!("`x{k}[..]`: no operand {k}"))?;
                let len = self.e.iconst(t.elems() as i64)?;
                let bad = self.e.icmp(ICmp::Uge, off, len)?;
                self.fail_if(bad, Fault::LoadOutOfBounds(*k))?;
                self.load(*k, off)?
            }
            Scalar::Un(op, a) => {
                let a = self.scalar(a)?;
                self.unary(*op, a)?
            }
            Scalar::Bin(..) => {
                return Err("internal: chains of binary operators are walked above".into())
            }
            Scalar::Select(c, a, o) => {
                let c = self.scalar(c)?;
                let cond = self.truth(c)?;
                let mismatch = || format!("the branches of `{e}` have different kinds");
                if !self.may_fail(a) && !self.may_fail(o) {
                    let va = self.scalar(a)?;
                    let vo = self.scalar(o)?;
                    match (va, vo) {
                        (V::F(x), V::F(y)) => V::F(self.e.select(cond, x, y)?),
                        (V::I(x), V::I(y)) => V::I(self.e.select(cond, x, y)?),
                        _ => return Err(mismatch().into()),
                    }
                } else {
                    let then = self.e.block();
                    let other = self.e.block();
                    let merge = self.e.block();
                    self.e.branch(cond, then, other)?;
                    let saved = self.reads.clone();
                    self.e.switch_to(then);
                    let va = self.scalar(a)?;
                    let (slot, x) = match va {
                        V::F(x) => (self.e.slot(Ty::F32)?, x),
                        V::I(x) => (self.e.slot(Ty::I64)?, x),
                    };
                    self.e.set(slot, x)?;
                    self.e.jump(merge)?;
                    // Reads in one branch do not dominate the other branch or the merge.
                    self.reads.clone_from(&saved);
                    self.e.switch_to(other);
                    let vo = self.scalar(o)?;
                    self.reads = saved;
                    let y = match (va, vo) {
                        (V::F(_), V::F(y)) | (V::I(_), V::I(y)) => y,
                        _ => return Err(mismatch().into()),
                    };
                    self.e.set(slot, y)?;
                    self.e.jump(merge)?;
                    self.e.switch_to(merge);
                    let r = self.e.get(slot)?;
                    match va {
                        V::F(_) => V::F(r),
                        V::I(_) => V::I(r),
                    }
                }
            }
        })
    }

    fn unary(&mut self, op: ScalarUn, a: V<E::V>) -> R<V<E::V>> {
        Ok(match (op, a) {
            (ScalarUn::Neg, V::I(i)) => V::I(self.e.ineg(i, false)?),
            (ScalarUn::Neg, V::F(f)) => V::F(self.e.fun(FUn::Neg, f)?),
            (ScalarUn::Not, v) => {
                let t = self.truth(v)?;
                let n = self.e.not(t)?;
                self.bool_int(n)?
            }
            (ScalarUn::Abs, V::I(i)) => V::I(self.e.iabs(i)?),
            (ScalarUn::Abs, V::F(f)) => V::F(self.e.fun(FUn::Abs, f)?),
            (ScalarUn::Floor | ScalarUn::ToInt, V::I(i)) => V::I(i),
            (ScalarUn::Floor, V::F(f)) => V::F(self.e.fun(FUn::Floor, f)?),
            (ScalarUn::ToInt, V::F(f)) => {
                let nan = self.e.fcmp(FCmp::Uno, f, f)?;
                self.fail_if(nan, Fault::IntOfNan)?;
                V::I(self.e.f32_to_i64(f)?)
            }
            (ScalarUn::ToFloat, v) => V::F(self.as_f(v)?),
            (ScalarUn::Sqrt, v) => {
                let f = self.as_f(v)?;
                V::F(self.e.fun(FUn::Sqrt, f)?)
            }
            (ScalarUn::Rsqrt, v) => {
                let f = self.as_f(v)?;
                let s = self.e.fun(FUn::Sqrt, f)?;
                let one = self.e.fconst(1.0)?;
                V::F(self.e.fbin(FOp::Div, one, s)?)
            }
            (op, v) => {
                let f = self.as_f(v)?;
                V::F(self.e.math(op, f)?)
            }
        })
    }

    /// A binary operator; `pow2` is the right operand when it is a power-of-two literal.
    fn binary(&mut self, op: ScalarBin, a: V<E::V>, c: V<E::V>, pow2: Option<i64>) -> R<V<E::V>> {
        use ScalarBin as B;
        if matches!(op, B::And | B::Or) {
            let (x, y) = (self.truth(a)?, self.truth(c)?);
            let r = self.e.ibin(if op == B::And { IOp::And } else { IOp::Or }, x, y, false)?;
            return self.bool_int(r);
        }
        let int_cc = match op {
            B::Lt => Some(ICmp::Slt),
            B::Le => Some(ICmp::Sle),
            B::Gt => Some(ICmp::Sgt),
            B::Ge => Some(ICmp::Sge),
            B::Eq => Some(ICmp::Eq),
            B::Ne => Some(ICmp::Ne),
            _ => None,
        };
        if let (V::I(x), V::I(y)) = (a, c) {
            if let Some(cc) = int_cc {
                let r = self.e.icmp(cc, x, y)?;
                return self.bool_int(r);
            }
            let simple = match op {
                B::Add => Some(IOp::Add),
                B::Sub => Some(IOp::Sub),
                B::Mul => Some(IOp::Mul),
                B::Max => Some(IOp::SMax),
                B::Min => Some(IOp::SMin),
                _ => None,
            };
            if let Some(iop) = simple {
                return Ok(V::I(self.e.ibin(iop, x, y, false)?));
            }
            return Ok(V::I(match op {
                B::Div | B::Rem => match pow2 {
                    // Arithmetic shift and mask are floor division and floor modulo by 2^s.
                    Some(d) if op == B::Div => {
                        let s = self.e.iconst(i64::from(d.trailing_zeros()))?;
                        self.e.ibin(IOp::AShr, x, s, false)?
                    }
                    Some(d) => {
                        let m = self.e.iconst(d - 1)?;
                        self.e.ibin(IOp::And, x, m, false)?
                    }
                    None => self.int_divmod(op, x, y)?,
                },
                _ => return Err(format!("`{}` on integers", op.symbol()).into()),
            }));
        }
        let (x, y) = (self.as_f(a)?, self.as_f(c)?);
        let float_cc = match op {
            B::Lt => Some(FCmp::Olt),
            B::Le => Some(FCmp::Ole),
            B::Gt => Some(FCmp::Ogt),
            B::Ge => Some(FCmp::Oge),
            B::Eq => Some(FCmp::Oeq),
            // Unordered or different: NaN != x holds.
            B::Ne => Some(FCmp::Une),
            _ => None,
        };
        if let Some(cc) = float_cc {
            let r = self.e.fcmp(cc, x, y)?;
            return self.bool_int(r);
        }
        Ok(V::F(match op {
            B::Add => self.e.fbin(FOp::Add, x, y)?,
            B::Sub => self.e.fbin(FOp::Sub, x, y)?,
            B::Mul => self.e.fbin(FOp::Mul, x, y)?,
            B::Div => self.e.fbin(FOp::Div, x, y)?,
            B::Max => self.fmax(x, y)?,
            B::Min => self.fmin(x, y)?,
            _ => return Err(format!("`{}` needs two integer operands", op.symbol()).into()),
        }))
    }

    /// Floor `/` or `%` of two integers, exactly the reference's: a zero divisor faults,
    /// `i64::MIN / -1` wraps (computed as `-x / 1`, which is defined).
    fn int_divmod(&mut self, op: ScalarBin, x: E::V, y: E::V) -> R<E::V> {
        let (zero, one, m1) = (self.e.iconst(0)?, self.e.iconst(1)?, self.e.iconst(-1)?);
        let is_zero = self.e.icmp(ICmp::Eq, y, zero)?;
        self.fail_if(is_zero, Fault::DivisionByZero)?;
        let is_m1 = self.e.icmp(ICmp::Eq, y, m1)?;
        let nx = self.e.ineg(x, false)?;
        let xs = self.e.select(is_m1, nx, x)?;
        let ys = self.e.select(is_m1, one, y)?;
        let q = self.e.ibin(IOp::SDiv, xs, ys, false)?;
        let r = self.e.ibin(IOp::SRem, xs, ys, false)?;
        // q - 1 when the division is inexact and the signs differ.
        let rnz = self.e.icmp(ICmp::Ne, r, zero)?;
        let sx = self.e.icmp(ICmp::Slt, xs, zero)?;
        let sy = self.e.icmp(ICmp::Slt, ys, zero)?;
        let differ = self.e.ibin(IOp::Xor, sx, sy, false)?;
        let fix = self.e.ibin(IOp::And, rnz, differ, false)?;
        let fix = self.e.bool_to_i64(fix)?;
        let q = self.e.ibin(IOp::Sub, q, fix, false)?;
        if op == ScalarBin::Div {
            return Ok(q);
        }
        let qy = self.e.ibin(IOp::Mul, q, y, false)?;
        self.e.ibin(IOp::Sub, x, qy, false)
    }
}

#[cfg(test)]
mod tests {
    use super::separable;

    fn map(text: &str) -> fbc_index::IndexMap {
        text.parse().expect("a map")
    }

    #[test]
    fn separable_maps_are_sums_of_one_sided_terms() {
        // R-Tile texel maps: every term reads rows (d0) or reduction (d1, d2) dimensions alone.
        let m = map("(d0, d1, d2) -> (d2 + d1 floordiv 2 * 4, d1 mod 2 * 4 + d0 * 8, d0 mod 4)");
        assert!(separable(&m, 0b110, 0b001));
        assert!(separable(&map("(d0, d1) -> ((d1 * 4 + 3) * 20 - d0 * 2)"), 0b01, 0b10));
        // A `mod` or a product of both sides is not.
        assert!(!separable(&map("(d0, d1) -> ((d0 * 512 + d1) mod 768)"), 0b01, 0b10));
        assert!(!separable(&map("(d0, d1) -> (d0 * d1)"), 0b01, 0b10));
        // A dimension of neither group (fixed while packing) may go anywhere.
        assert!(separable(&map("(d0, d1, d2) -> ((d0 * 8 + d2) mod 5 + d1)"), 0b010, 0b100));
    }
}

//! Lowering one [`Kernel`] to an LLVM function `i32 (ptr operands, i64 lo, i64 hi)`.
//!
//! The loop nest, the checks and the payload arithmetic are the Cranelift back end's
//! (`crate::cranelift::lower`, whose module docs describe the shape), instruction for
//! instruction where the semantics are concerned: `i64` index maps with floor division, every
//! access proven in range by the shared interval analysis ([`crate::cpu::nest`]) or checked with
//! a branch to a block returning the fault code, integer payloads wrapping, `f32` payloads
//! without fast-math flags (no reassociation, no contraction into FMA), NaN-propagating
//! `max`/`min` as compare and select, reductions combined in row-major order. LLVM optimises what
//! this emits at O3; the only freedoms it gets are those that keep every value bit-identical:
//!
//! - loop indices and accumulators are `alloca`s that SROA turns into registers, and map
//!   arithmetic carries `nsw` (the interval analysis proved it cannot leave `i64`), which lets
//!   scalar evolution see the affine accesses;
//! - the loops over parallel dimensions have independent iterations, so the loop vectoriser may
//!   vectorise them (a contiguous elementwise kernel, the inner parallel loop of an interchanged
//!   reduction); reduction loops keep their scalar `f32` chain, since without `reassoc` LLVM does
//!   not reorder a floating-point sum;
//! - fault branches are marked unlikely (`llvm.expect`).

use std::collections::HashMap;

use fbc_dialects::memory::{
    Combine, Kernel, MemType, Scalar, ScalarBin, ScalarKind, ScalarUn, StorageKind,
};
use fbc_index::{Expr, IndexMap};
use fbc_ir::attr::BinOp;
use fbc_ir::ElemType;
use inkwell::attributes::{Attribute, AttributeLoc};
use inkwell::basic_block::BasicBlock;
use inkwell::builder::{Builder, BuilderError};
use inkwell::context::Context;
use inkwell::intrinsics::Intrinsic;
use inkwell::module::Module;
use inkwell::types::{BasicTypeEnum, FloatType, IntType};
use inkwell::values::{BasicValueEnum, FloatValue, FunctionValue, IntValue, PointerValue};
use inkwell::{FloatPredicate, IntPredicate};

use crate::cpu::math::{FUNCS, ROUND_F16};
use crate::cpu::nest::{div_iv, within, Iv, Nest};
use crate::cpu::Fault;

/// Why lowering failed: the kernel is not compilable (its own error), or the builder refused an
/// instruction (a bug of this back end).
#[derive(Debug)]
pub(crate) enum LowerError {
    Kernel(String),
    Builder(String),
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

impl From<BuilderError> for LowerError {
    fn from(e: BuilderError) -> LowerError {
        LowerError::Builder(e.to_string())
    }
}

type R<T> = Result<T, LowerError>;

/// A payload value: `f32`, or a 64-bit integer.
#[derive(Debug, Clone, Copy)]
enum V<'c> {
    F(FloatValue<'c>),
    I(IntValue<'c>),
}

impl V<'_> {
    fn kind(self) -> ScalarKind {
        match self {
            V::F(_) => ScalarKind::Float,
            V::I(_) => ScalarKind::Int,
        }
    }
}

/// The element type of the output in native code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OutTy {
    I32,
    F32,
}

/// The functions a kernel calls: the shared math functions (declared by name, mapped to their
/// addresses by the JIT) and the intrinsics.
struct Callees<'c> {
    math: Vec<(ScalarUn, FunctionValue<'c>)>,
    round_f16: FunctionValue<'c>,
    floor: FunctionValue<'c>,
    sqrt: FunctionValue<'c>,
    fabs: FunctionValue<'c>,
    fptosi_sat: FunctionValue<'c>,
    smax: FunctionValue<'c>,
    smin: FunctionValue<'c>,
    iabs: FunctionValue<'c>,
    expect: FunctionValue<'c>,
}

impl<'c> Callees<'c> {
    fn declare(cx: &'c Context, module: &Module<'c>) -> R<Callees<'c>> {
        let f32t = cx.f32_type();
        let i64t = cx.i64_type();
        let sig = f32t.fn_type(&[f32t.into()], false);
        // Pure functions of their argument: calls may be hoisted, merged or dropped.
        let attrs = [
            cx.create_enum_attribute(Attribute::get_named_enum_kind_id("nounwind"), 0),
            cx.create_enum_attribute(Attribute::get_named_enum_kind_id("willreturn"), 0),
            cx.create_enum_attribute(Attribute::get_named_enum_kind_id("memory"), 0),
        ];
        let declare = |name: &str| {
            let f = module.add_function(name, sig, None);
            for a in attrs {
                f.add_attribute(AttributeLoc::Function, a);
            }
            f
        };
        let intrinsic = |name: &str, tys: &[BasicTypeEnum<'c>]| {
            Intrinsic::find(name)
                .and_then(|i| i.get_declaration(module, tys))
                .ok_or_else(|| LowerError::Builder(format!("LLVM has no intrinsic `{name}`")))
        };
        Ok(Callees {
            math: FUNCS.iter().map(|&(name, op)| (op, declare(name))).collect(),
            round_f16: declare(ROUND_F16),
            floor: intrinsic("llvm.floor", &[f32t.into()])?,
            sqrt: intrinsic("llvm.sqrt", &[f32t.into()])?,
            fabs: intrinsic("llvm.fabs", &[f32t.into()])?,
            fptosi_sat: intrinsic("llvm.fptosi.sat", &[i64t.into(), f32t.into()])?,
            smax: intrinsic("llvm.smax", &[i64t.into()])?,
            smin: intrinsic("llvm.smin", &[i64t.into()])?,
            iabs: intrinsic("llvm.abs", &[i64t.into()])?,
            expect: intrinsic("llvm.expect", &[cx.bool_type().into()])?,
        })
    }
}

struct Lower<'a, 'c> {
    cx: &'c Context,
    b: Builder<'c>,
    /// Positioned in the first block, where every `alloca` goes.
    allocas: Builder<'c>,
    func: FunctionValue<'c>,
    k: &'a Kernel,
    types: &'a [MemType],
    callees: Callees<'c>,
    i64t: IntType<'c>,
    f32t: FloatType<'c>,
    bases: Vec<PointerValue<'c>>,
    /// Current value of each domain index.
    dims: Vec<IntValue<'c>>,
    /// Range of each domain index where the code being emitted runs.
    ranges: Vec<Iv>,
    /// Operands already read at their map at the current point (`x0` used twice loads once).
    reads: HashMap<usize, V<'c>>,
    /// The reduction result, while the epilogue is emitted.
    acc: Option<V<'c>>,
    /// The row statistics computed so far at the current parallel point (a row kernel).
    stats: Vec<FloatValue<'c>>,
    /// The launch's symbols (read and checked at entry) and their ranges.
    syms: Vec<(IntValue<'c>, Iv)>,
    /// Base of the accumulator row of an interchanged reduction.
    scratch: Option<PointerValue<'c>>,
    /// The dimension whose loop runs over the chunk `[lo, hi)` given by the caller (clamped to
    /// `[0, extent]`); see [`crate::cpu::nest::split_dim`].
    split: Option<(usize, IntValue<'c>, IntValue<'c>)>,
}

/// Defines function `name` of `module`, `i32 (ptr, i64, i64)`, computing `kernel` (already
/// checked against `types`) with the loop nest `nest`, for the CPU `cpu` with `features` (its
/// `target-cpu` and `target-features` attributes). With `nest.split = Some(d)`, the loop over
/// dimension `d` runs over `[max(lo, 0), min(hi, extent))` only.
pub(crate) fn lower<'c>(
    cx: &'c Context,
    module: &Module<'c>,
    name: &str,
    kernel: &Kernel,
    types: &[MemType],
    Nest { scratch, split }: Nest,
    (cpu, features): (&str, &str),
) -> R<()> {
    for (k, t) in types.iter().enumerate() {
        if i64::try_from(t.elems()).is_err() {
            return Err(
                format!("operand {k} ({t}) has more elements than the JIT can index").into()
            );
        }
    }
    let i64t = cx.i64_type();
    let i32t = cx.i32_type();
    let f32t = cx.f32_type();
    let ptr = cx.ptr_type(inkwell::AddressSpace::default());
    let fty = i32t.fn_type(&[ptr.into(), i64t.into(), i64t.into()], false);
    let func = module.add_function(name, fty, None);
    func.add_attribute(
        AttributeLoc::Function,
        cx.create_enum_attribute(Attribute::get_named_enum_kind_id("nounwind"), 0),
    );
    func.add_attribute(AttributeLoc::Function, cx.create_string_attribute("target-cpu", cpu));
    if !features.is_empty() {
        func.add_attribute(
            AttributeLoc::Function,
            cx.create_string_attribute("target-features", features),
        );
    }
    let callees = Callees::declare(cx, module)?;
    let first = cx.append_basic_block(func, "allocas");
    let entry = cx.append_basic_block(func, "entry");
    let allocas = cx.create_builder();
    allocas.position_at_end(first);
    let b = cx.create_builder();
    b.position_at_end(entry);
    let param = |i: u32| {
        func.get_nth_param(i).ok_or_else(|| LowerError::Builder(format!("no parameter {i}")))
    };
    let table = param(0)?.into_pointer_value();
    let (lo, hi) = (param(1)?.into_int_value(), param(2)?.into_int_value());
    let slot = |b: &Builder<'c>, k: usize| -> R<PointerValue<'c>> {
        let at = gep(b, ptr.into(), table, i64t.const_int(k as u64, false))?;
        Ok(b.build_load(ptr, at, "base")?.into_pointer_value())
    };
    let bases = (0..types.len()).map(|k| slot(&b, k)).collect::<R<Vec<_>>>()?;
    let scratch_base = match scratch {
        Some(_) => Some(slot(&b, types.len())?),
        None => None,
    };
    let zero = i64t.const_zero();
    let split = match split {
        Some(d) => {
            let n = kernel
                .domain
                .get(d)
                .and_then(|&n| i64::try_from(n).ok())
                .ok_or_else(|| format!("internal: no dimension {d} to split"))?;
            // The chunk clamped to the extent, so the index ranges of the interval analysis
            // hold whatever the caller passes.
            let lo = call2(&b, callees.smax, lo, zero)?;
            let hi = call2(&b, callees.smin, hi, i64t.const_int(n as u64, true))?;
            Some((d, lo, hi))
        }
        None => None,
    };
    let rank = kernel.domain.len();
    let mut l = Lower {
        cx,
        b,
        allocas,
        func,
        k: kernel,
        types,
        callees,
        i64t,
        f32t,
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
        let v = l.b.build_load(i32t, l.bases[sym.operand], "sym")?.into_int_value();
        let v = l.b.build_int_s_extend(v, i64t, "sym")?;
        let low = l.b.build_int_compare(IntPredicate::SLT, v, l.iconst(sym.lo), "")?;
        let high = l.b.build_int_compare(IntPredicate::SGT, v, l.iconst(sym.hi), "")?;
        let bad = l.b.build_or(low, high, "")?;
        l.fail_if(bad, Fault::SymbolOutOfRange(j))?;
        l.syms.push((v, Iv { lo: sym.lo, hi: sym.hi }));
    }
    let np = kernel.parallel_dims();
    // An empty parallel sub-domain writes nothing; an empty reduction leaves every accumulator
    // at the identity and the epilogue still runs, as in the reference executor.
    if !kernel.domain[..np].contains(&0) {
        if kernel.is_row() {
            if scratch.is_some() {
                return Err("internal: a row kernel cannot be interchanged".into());
            }
            l.nest(0, np, &mut |l| l.row_point())?;
        } else if let Some((j, _)) = scratch {
            let outer: Vec<usize> = (0..np).filter(|&d| d != j).collect();
            l.nest_dims(&outer, &mut |l| l.row(j))?;
        } else {
            l.nest(0, np, &mut |l| l.point())?;
        }
    }
    l.b.build_return(Some(&i32t.const_zero()))?;
    l.allocas.build_unconditional_branch(entry)?;
    Ok(())
}

/// `&base[index]` for elements of type `ty`.
#[allow(unsafe_code)]
fn gep<'c>(
    b: &Builder<'c>,
    ty: BasicTypeEnum<'c>,
    base: PointerValue<'c>,
    index: IntValue<'c>,
) -> R<PointerValue<'c>> {
    // SAFETY: inkwell marks GEPs unsafe because an out-of-bounds `inbounds` GEP is poison in
    // LLVM. Every index given here is in bounds of its object when the address is computed:
    // an operand's element offset proven or checked in range (see the module docs), a slot of
    // the operand table (one per operand, plus the scratch array's), an accumulator of the
    // scratch array indexed by the loop over its own extent.
    Ok(unsafe { b.build_in_bounds_gep(ty, base, &[index], "addr")? })
}

/// A call of a two-argument `i64` intrinsic.
fn call2<'c>(
    b: &Builder<'c>,
    f: FunctionValue<'c>,
    x: IntValue<'c>,
    y: IntValue<'c>,
) -> R<IntValue<'c>> {
    let c = b.build_call(f, &[x.into(), y.into()], "")?;
    Ok(basic(c.try_as_basic_value().basic())?.into_int_value())
}

/// The result of a call that returns a value.
fn basic(v: Option<BasicValueEnum<'_>>) -> R<BasicValueEnum<'_>> {
    v.ok_or_else(|| LowerError::Builder("a call without a result".into()))
}

type LoopBody<'x, 'a, 'c> = dyn FnMut(&mut Lower<'a, 'c>) -> R<()> + 'x;

impl<'a, 'c> Lower<'a, 'c> {
    fn iconst(&self, v: i64) -> IntValue<'c> {
        self.i64t.const_int(v as u64, true)
    }

    fn fconst(&self, v: f32) -> FloatValue<'c> {
        self.f32t.const_float(f64::from(v))
    }

    /// A new block of the function.
    fn block(&self, name: &str) -> BasicBlock<'c> {
        self.cx.append_basic_block(self.func, name)
    }

    /// The block being emitted into.
    fn here(&self) -> R<BasicBlock<'c>> {
        self.b.get_insert_block().ok_or_else(|| LowerError::Builder("no insertion block".into()))
    }

    /// A stack slot of type `ty`, in the first block (so SROA promotes it to registers).
    fn slot(&self, ty: BasicTypeEnum<'c>) -> R<PointerValue<'c>> {
        Ok(self.allocas.build_alloca(ty, "slot")?)
    }

    /// Loops over domain dimensions `from..to` (row-major). Every extent is > 0.
    fn nest(&mut self, from: usize, to: usize, body: &mut LoopBody<'_, 'a, 'c>) -> R<()> {
        let dims: Vec<usize> = (from..to).collect();
        self.nest_dims(&dims, body)
    }

    /// [`Lower::nest`] over the domain dimensions `dims`, the first outermost: do-while loops
    /// with the index in a stack slot; extent-1 dimensions are the constant 0.
    fn nest_dims(&mut self, dims: &[usize], body: &mut LoopBody<'_, 'a, 'c>) -> R<()> {
        let Some((&from, rest)) = dims.split_first() else {
            return body(self);
        };
        let extent = self.k.domain[from];
        if extent == 1 {
            self.dims[from] = self.iconst(0);
            self.ranges[from] = Iv::point(0);
            return self.nest_dims(rest, body);
        }
        let n =
            i64::try_from(extent).map_err(|_| format!("domain extent {extent} is too large"))?;
        let index = self.slot(self.i64t.into())?;
        let head = self.block("loop");
        let done = self.block("done");
        let chunk = self.split.filter(|&(d, ..)| d == from).map(|(_, lo, hi)| (lo, hi));
        let (start, end) = match chunk {
            Some((lo, hi)) => (lo, hi),
            None => (self.iconst(0), self.iconst(n)),
        };
        self.b.build_store(index, start)?;
        if chunk.is_some() {
            let any = self.b.build_int_compare(IntPredicate::SLT, start, end, "")?;
            self.b.build_conditional_branch(any, head, done)?;
        } else {
            self.b.build_unconditional_branch(head)?;
        }
        self.b.position_at_end(head);
        let i = self.b.build_load(self.i64t, index, "i")?.into_int_value();
        self.dims[from] = i;
        self.ranges[from] = Iv { lo: 0, hi: n - 1 };
        self.nest_dims(rest, body)?;
        let next = self.b.build_int_nsw_add(i, self.iconst(1), "next")?;
        self.b.build_store(index, next)?;
        let more = self.b.build_int_compare(IntPredicate::SLT, next, end, "")?;
        self.b.build_conditional_branch(more, head, done)?;
        self.b.position_at_end(done);
        Ok(())
    }

    /// Returns `fault`'s code from the function when `cond` (an `i1`) holds (marked unlikely).
    fn fail_if(&mut self, cond: IntValue<'c>, fault: Fault) -> R<()> {
        let fail = self.block("fault");
        let cont = self.block("ok");
        let never = self.cx.bool_type().const_zero();
        let c = self.b.build_call(self.callees.expect, &[cond.into(), never.into()], "")?;
        let cond = basic(c.try_as_basic_value().basic())?.into_int_value();
        self.b.build_conditional_branch(cond, fail, cont)?;
        self.b.position_at_end(fail);
        let code = self.cx.i32_type().const_int(u64::from(fault.code()), false);
        self.b.build_return(Some(&code))?;
        self.b.position_at_end(cont);
        Ok(())
    }

    // ----- index maps ----------------------------------------------------------------------

    /// One map result at the current point, with its interval. `who` names the map's owner in
    /// faults (an operand index, or the operand count for the guard). The interval analysis
    /// proved every step in `i64`, so map arithmetic is `nsw`.
    fn affine(&mut self, e: &Expr, map: &IndexMap, who: usize) -> R<(IntValue<'c>, Iv)> {
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
            Expr::Const(c) => (self.iconst(*c), Some(Iv::point(*c))),
            Expr::Neg(a) => {
                let (a, ia) = self.affine(a, map, who)?;
                (self.b.build_int_nsw_neg(a, "")?, ia.checked_neg())
            }
            Expr::Bin(op, a, c) => {
                let (a, ia) = self.affine(a, map, who)?;
                let (c, ic) = self.affine(c, map, who)?;
                match op {
                    BinOp::Add => (self.b.build_int_nsw_add(a, c, "")?, ia.checked_add(ic)),
                    BinOp::Sub => (self.b.build_int_nsw_sub(a, c, "")?, ia.checked_sub(ic)),
                    BinOp::Mul => (self.b.build_int_nsw_mul(a, c, "")?, ia.checked_mul(ic)),
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
        Ok(match iv.singleton() {
            Some(c) => (self.iconst(c), iv),
            None => (v, iv),
        })
    }

    /// `floordiv`, `ceildiv`, `mod` with MLIR semantics: the divisor must be positive (else the
    /// map is undefined: a fault), the results are floor-rounded.
    fn map_div(
        &mut self,
        op: BinOp,
        (a, ia): (IntValue<'c>, Iv),
        (c, ic): (IntValue<'c>, Iv),
        who: usize,
    ) -> R<(IntValue<'c>, Iv)> {
        let mut ic = ic;
        if ic.lo <= 0 {
            let bad = self.b.build_int_compare(IntPredicate::SLE, c, self.iconst(0), "")?;
            self.fail_if(bad, Fault::MapUndefined(who))?;
            ic = Iv { lo: 1, hi: ic.hi.max(1) };
        }
        let iv = div_iv(op, ia, ic);
        // Constant divisor: the cheap forms.
        if let Some(d) = ic.singleton() {
            if within(ia, 0, d - 1) {
                return Ok(match op {
                    BinOp::Mod => (a, iv),
                    BinOp::FloorDiv => (self.iconst(0), iv),
                    _ => {
                        // ceildiv of [0, d) is 0 or 1.
                        let nz =
                            self.b.build_int_compare(IntPredicate::NE, a, self.iconst(0), "")?;
                        (self.b.build_int_z_extend(nz, self.i64t, "")?, iv)
                    }
                });
            }
            if d.count_ones() == 1 {
                let s = self.iconst(i64::from(d.trailing_zeros()));
                let v = match op {
                    BinOp::FloorDiv => self.b.build_right_shift(a, s, true, "")?,
                    BinOp::Mod => self.b.build_and(a, self.iconst(d - 1), "")?,
                    _ => {
                        if ia.checked_add(Iv::point(d - 1)).is_none() {
                            return Err("a `ceildiv` can leave the 64-bit range".into());
                        }
                        let t = self.b.build_int_nsw_add(a, self.iconst(d - 1), "")?;
                        self.b.build_right_shift(t, s, true, "")?
                    }
                };
                return Ok((v, iv));
            }
            if ia.lo >= 0 {
                let dv = self.iconst(d);
                let v = match op {
                    BinOp::FloorDiv => self.b.build_int_unsigned_div(a, dv, "")?,
                    BinOp::Mod => self.b.build_int_unsigned_rem(a, dv, "")?,
                    _ => {
                        let t = self.b.build_int_nsw_add(a, self.iconst(d - 1), "")?;
                        self.b.build_int_unsigned_div(t, dv, "")?
                    }
                };
                return Ok((v, iv));
            }
        }
        // General case, divisor `c > 0` here: truncating division and a floor correction.
        let v = match op {
            BinOp::FloorDiv => self.floor_divmod(a, c)?.0,
            BinOp::Mod => self.floor_divmod(a, c)?.1,
            _ => {
                // ceildiv(a, c) = -floordiv(-a, c).
                if ia.lo == i64::MIN {
                    return Err("a `ceildiv` can leave the 64-bit range".into());
                }
                let na = self.b.build_int_neg(a, "")?;
                let q = self.floor_divmod(na, c)?.0;
                self.b.build_int_neg(q, "")?
            }
        };
        Ok((v, iv))
    }

    /// Floor quotient and remainder of `a / c` for `c > 0`.
    fn floor_divmod(
        &mut self,
        a: IntValue<'c>,
        c: IntValue<'c>,
    ) -> R<(IntValue<'c>, IntValue<'c>)> {
        let q = self.b.build_int_signed_div(a, c, "")?;
        let qc = self.b.build_int_mul(q, c, "")?;
        let r = self.b.build_int_sub(a, qc, "")?;
        let neg = self.b.build_int_compare(IntPredicate::SLT, r, self.iconst(0), "")?;
        let one = self.b.build_int_z_extend(neg, self.i64t, "")?;
        let q = self.b.build_int_sub(q, one, "")?;
        let fix = self.b.build_select(neg, c, self.iconst(0), "")?.into_int_value();
        let r = self.b.build_int_add(r, fix, "")?;
        Ok((q, r))
    }

    /// The checked element offset of operand `k` at its map, at the current point.
    fn offset(&mut self, k: usize, fault: Fault) -> R<IntValue<'c>> {
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
                let mut c = [self.iconst(0); 3];
                for (i, ext) in [width as i64, height as i64, 4].into_iter().enumerate() {
                    let (v, iv) = self.affine(&map.results[i], map, k)?;
                    self.check_range(v, iv, ext, fault)?;
                    c[i] = v;
                }
                let row = self.b.build_int_nsw_mul(c[1], self.iconst(width as i64), "")?;
                let texel = self.b.build_int_nsw_add(row, c[0], "")?;
                let t4 = self.b.build_int_nsw_mul(texel, self.iconst(4), "")?;
                Ok(self.b.build_int_nsw_add(t4, c[2], "")?)
            }
        }
    }

    /// Faults unless `0 <= v < len`; nothing when the interval proves it.
    fn check_range(&mut self, v: IntValue<'c>, iv: Iv, len: i64, fault: Fault) -> R<()> {
        if !within(iv, 0, len - 1) {
            let bad = self.b.build_int_compare(IntPredicate::UGE, v, self.iconst(len), "")?;
            self.fail_if(bad, fault)?;
        }
        Ok(())
    }

    /// The element type of operand `k` in native code.
    fn elem_ty(&self, k: usize) -> BasicTypeEnum<'c> {
        match self.types[k].elem {
            ElemType::I32 => self.cx.i32_type().into(),
            _ => self.f32t.into(),
        }
    }

    fn address(&mut self, k: usize, offset: IntValue<'c>) -> R<PointerValue<'c>> {
        gep(&self.b, self.elem_ty(k), self.bases[k], offset)
    }

    fn load(&mut self, k: usize, offset: IntValue<'c>) -> R<V<'c>> {
        let addr = self.address(k, offset)?;
        let v = self.b.build_load(self.elem_ty(k), addr, "x")?;
        Ok(match self.types[k].elem {
            ElemType::I32 => V::I(self.b.build_int_s_extend(v.into_int_value(), self.i64t, "")?),
            _ => V::F(v.into_float_value()),
        })
    }

    // ----- one parallel point ----------------------------------------------------------------

    /// The output element of the current parallel point: guard, reduction, epilogue, store.
    fn point(&mut self) -> R<()> {
        let np = self.k.parallel_dims();
        self.zero_dims(np);
        let out_ty = self.out_ty();
        let value = self.guarded(out_ty, &mut |l| {
            let v = l.compute(out_ty)?;
            // The reduction's loops left their indices behind: the store is at index 0.
            l.zero_dims(np);
            Ok(v)
        })?;
        self.store_out(value)
    }

    fn out_ty(&self) -> OutTy {
        match self.types[self.k.output()].elem {
            ElemType::I32 => OutTy::I32,
            _ => OutTy::F32,
        }
    }

    /// Domain indices `from..` at 0 (their loops are not running), with that range.
    fn zero_dims(&mut self, from: usize) {
        for r in from..self.k.domain.len() {
            self.dims[r] = self.iconst(0);
            self.ranges[r] = Iv::point(0);
        }
    }

    /// Stores `value` into the output at its map, at the current point.
    fn store_out(&mut self, value: BasicValueEnum<'c>) -> R<()> {
        let out = self.k.output();
        let off = self.offset(out, Fault::WriteOutOfBounds(out))?;
        let addr = self.address(out, off)?;
        self.b.build_store(addr, value)?;
        Ok(())
    }

    /// The value `value` emits (of type `out_ty`) where the guard holds at the current point,
    /// else 0; while `value` is emitted the index ranges are narrowed to where the guard holds.
    fn guarded(
        &mut self,
        out_ty: OutTy,
        value: &mut dyn FnMut(&mut Self) -> R<BasicValueEnum<'c>>,
    ) -> R<BasicValueEnum<'c>> {
        let Some((cond, narrowed)) = self.guard()? else { return value(self) };
        let then = self.block("guard");
        let other = self.block("pad");
        let merge = self.block("merge");
        self.b.build_conditional_branch(cond, then, other)?;
        self.b.position_at_end(then);
        let saved = std::mem::replace(&mut self.ranges, narrowed);
        let v = value(self)?;
        self.ranges = saved;
        let from_then = self.here()?;
        self.b.build_unconditional_branch(merge)?;
        self.b.position_at_end(other);
        let zero: BasicValueEnum<'c> = match out_ty {
            OutTy::I32 => self.cx.i32_type().const_zero().into(),
            OutTy::F32 => self.f32t.const_zero().into(),
        };
        self.b.build_unconditional_branch(merge)?;
        self.b.position_at_end(merge);
        let phi = self.b.build_phi(v.get_type(), "v")?;
        phi.add_incoming(&[(&v, from_then), (&zero, other)]);
        Ok(phi.as_basic_value())
    }

    /// `acc = combine(acc, v)` on the accumulator in `slot`.
    fn combine_into(&mut self, slot: PointerValue<'c>, combine: Combine, v: V<'c>) -> R<()> {
        let v = self.as_f(v)?;
        let acc = self.b.build_load(self.f32t, slot, "acc")?.into_float_value();
        let acc = match combine {
            Combine::Add => self.b.build_float_add(acc, v, "")?,
            Combine::Max => self.fmax(acc, v)?,
        };
        self.b.build_store(slot, acc)?;
        Ok(())
    }

    /// The value of `body` combined over domain dimensions `from..to` in row-major order from
    /// the combine's identity (in a stack slot that SROA makes a register).
    fn reduce(
        &mut self,
        body: &Scalar,
        combine: Combine,
        from: usize,
        to: usize,
    ) -> R<FloatValue<'c>> {
        let slot = self.slot(self.f32t.into())?;
        self.b.build_store(slot, self.fconst(combine.identity()))?;
        self.nest(from, to, &mut |l| {
            l.reads.clear();
            let v = l.scalar(body)?;
            l.combine_into(slot, combine, v)
        })?;
        Ok(self.b.build_load(self.f32t, slot, "acc")?.into_float_value())
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
        self.stats.clear();
        for st in &k.stats {
            let acc = self.reduce(&st.body, st.combine, np, rank)?;
            self.zero_dims(np);
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
        self.nest(np, rank, &mut |l| {
            let value = l.guarded(out_ty, &mut |l| {
                l.reads.clear();
                let v = l.scalar(&l.k.body)?;
                l.finish(v, out_ty)
            })?;
            l.store_out(value)
        })?;
        self.zero_dims(np);
        Ok(())
    }

    /// All points of parallel dimension `j` at once, for an interchanged reduction: the
    /// accumulators of the row live in the scratch array, the reduction loops are outside and
    /// dimension `j` inside, so each output element is still combined in row-major reduction
    /// order (bit-identical to [`Lower::point`]) while the inputs are read along their
    /// contiguous dimension; the inner loop over `j` is the one LLVM vectorises.
    fn row(&mut self, j: usize) -> R<()> {
        let np = self.k.parallel_dims();
        let rank = self.k.domain.len();
        let combine = match (self.scratch, self.k.combine) {
            (Some(_), Some(c)) if j < np && self.k.guard.is_none() => c,
            _ => {
                return Err(
                    "internal: interchanged lowering of a kernel that does not allow it".into()
                )
            }
        };
        let out = self.k.output();
        let out_ty = self.out_ty();
        self.zero_dims(np);
        self.nest_dims(&[j], &mut |l| {
            let addr = l.acc_addr(j)?;
            l.b.build_store(addr, l.fconst(combine.identity()))?;
            Ok(())
        })?;
        self.nest(np, rank, &mut |l| {
            l.nest_dims(&[j], &mut |l| {
                l.reads.clear();
                let v = l.scalar(&l.k.body)?;
                let addr = l.acc_addr(j)?;
                l.combine_into(addr, combine, v)
            })
        })?;
        self.zero_dims(np);
        self.nest_dims(&[j], &mut |l| {
            let addr = l.acc_addr(j)?;
            let acc = V::F(l.b.build_load(l.f32t, addr, "acc")?.into_float_value());
            let v = l.finish(acc, out_ty)?;
            let off = l.offset(out, Fault::WriteOutOfBounds(out))?;
            let addr = l.address(out, off)?;
            l.b.build_store(addr, v)?;
            Ok(())
        })?;
        Ok(())
    }

    /// Address of the accumulator of the current index of dimension `j`: in `[0, extent)`,
    /// the scratch array's length, by construction of the loop.
    fn acc_addr(&mut self, j: usize) -> R<PointerValue<'c>> {
        let base = self.scratch.ok_or("internal: no scratch array")?;
        gep(&self.b, self.f32t.into(), base, self.dims[j])
    }

    /// The guard condition (`None`: none, or always true) and the index ranges where it holds.
    fn guard(&mut self) -> R<Option<(IntValue<'c>, Vec<Iv>)>> {
        let Some(g) = &self.k.guard else { return Ok(None) };
        let who = self.types.len();
        let mut cond: Option<IntValue<'c>> = None;
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
            let ok = self.b.build_int_compare(IntPredicate::ULT, v, self.iconst(bound), "")?;
            cond = Some(match cond {
                None => ok,
                Some(c) => self.b.build_and(c, ok, "")?,
            });
        }
        Ok(cond.map(|c| (c, narrowed)))
    }

    /// The (guarded) value of the current parallel point, converted to the output's storage
    /// type `out_ty`.
    fn compute(&mut self, out_ty: OutTy) -> R<BasicValueEnum<'c>> {
        let np = self.k.parallel_dims();
        let rank = self.k.domain.len();
        let acc = match self.k.combine {
            None => {
                self.reads.clear();
                self.scalar(&self.k.body)?
            }
            Some(combine) if self.k.domain[np..].contains(&0) => {
                V::F(self.fconst(combine.identity()))
            }
            Some(combine) => {
                let r = self.reduce(&self.k.body, combine, np, rank)?;
                self.zero_dims(np);
                V::F(r)
            }
        };
        self.finish(acc, out_ty)
    }

    /// The epilogue applied to `acc`, converted to the output's storage type `out_ty`.
    fn finish(&mut self, acc: V<'c>, out_ty: OutTy) -> R<BasicValueEnum<'c>> {
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
        Ok(match (out_ty, v) {
            (OutTy::I32, V::I(i)) => self.b.build_int_truncate(i, self.cx.i32_type(), "")?.into(),
            (OutTy::I32, V::F(_)) => {
                return Err("the kernel computes f32 values for an integer output".into())
            }
            (OutTy::F32, v) if self.types[self.k.output()].is_half() => {
                // An `f16` image stores the value rounded to `f16`: the reference's function.
                let f = self.as_f(v)?;
                let c = self.b.build_call(self.callees.round_f16, &[f.into()], "")?;
                basic(c.try_as_basic_value().basic())?
            }
            (OutTy::F32, v) => self.as_f(v)?.into(),
        })
    }

    // ----- payload ---------------------------------------------------------------------------

    fn as_f(&mut self, v: V<'c>) -> R<FloatValue<'c>> {
        Ok(match v {
            V::F(f) => f,
            V::I(i) => self.b.build_signed_int_to_float(i, self.f32t, "")?,
        })
    }

    /// `i1` truth of a value (non-zero; NaN is true).
    fn truth(&mut self, v: V<'c>) -> R<IntValue<'c>> {
        Ok(match v {
            V::I(i) => self.b.build_int_compare(IntPredicate::NE, i, self.iconst(0), "")?,
            V::F(f) => {
                self.b.build_float_compare(FloatPredicate::UNE, f, self.f32t.const_zero(), "")?
            }
        })
    }

    fn bool_int(&mut self, b: IntValue<'c>) -> R<V<'c>> {
        Ok(V::I(self.b.build_int_z_extend(b, self.i64t, "")?))
    }

    /// NaN-propagating maximum, exactly `fmax_nan`: NaN if either is NaN, else `a` if `a >= b`.
    fn fmax(&mut self, a: FloatValue<'c>, b: FloatValue<'c>) -> R<FloatValue<'c>> {
        self.fpick(a, b, FloatPredicate::OGE)
    }

    fn fmin(&mut self, a: FloatValue<'c>, b: FloatValue<'c>) -> R<FloatValue<'c>> {
        self.fpick(a, b, FloatPredicate::OLE)
    }

    fn fpick(
        &mut self,
        a: FloatValue<'c>,
        b: FloatValue<'c>,
        cc: FloatPredicate,
    ) -> R<FloatValue<'c>> {
        let uno = self.b.build_float_compare(FloatPredicate::UNO, a, b, "")?;
        let take_a = self.b.build_float_compare(cc, a, b, "")?;
        let r = self.b.build_select(take_a, a, b, "")?.into_float_value();
        let nan = self.fconst(f32::NAN);
        Ok(self.b.build_select(uno, nan, r, "")?.into_float_value())
    }

    fn kind_of(&self, e: &Scalar) -> Result<ScalarKind, String> {
        let types = self.types;
        let operand = move |k: usize| types.get(k).map(|t| ScalarKind::of_elem(t.elem));
        e.kind(&operand, self.acc.map(V::kind))
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

    fn scalar(&mut self, e: &Scalar) -> R<V<'c>> {
        // A left-nested chain `((a op b) op c) op ...` is walked in a loop, left operand first:
        // only right operands and other nodes recurse.
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
            Scalar::Float(x) => V::F(self.fconst(*x as f32)),
            Scalar::Int(x) => V::I(self.iconst(*x)),
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
                let len = t.elems() as i64;
                let bad = self.b.build_int_compare(IntPredicate::UGE, off, self.iconst(len), "")?;
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
                if !self.may_fail(a) && !self.may_fail(o) {
                    let va = self.scalar(a)?;
                    let vo = self.scalar(o)?;
                    match (va, vo) {
                        (V::F(x), V::F(y)) => {
                            V::F(self.b.build_select(cond, x, y, "")?.into_float_value())
                        }
                        (V::I(x), V::I(y)) => {
                            V::I(self.b.build_select(cond, x, y, "")?.into_int_value())
                        }
                        _ => {
                            return Err(format!("the branches of `{e}` have different kinds").into())
                        }
                    }
                } else {
                    let then = self.block("then");
                    let other = self.block("else");
                    let merge = self.block("merge");
                    self.b.build_conditional_branch(cond, then, other)?;
                    let saved = self.reads.clone();
                    self.b.position_at_end(then);
                    let va = self.scalar(a)?;
                    let from_then = self.here()?;
                    self.b.build_unconditional_branch(merge)?;
                    // Reads in one branch do not dominate the other branch or the merge.
                    self.reads.clone_from(&saved);
                    self.b.position_at_end(other);
                    let vo = self.scalar(o)?;
                    let from_other = self.here()?;
                    self.reads = saved;
                    self.b.build_unconditional_branch(merge)?;
                    self.b.position_at_end(merge);
                    match (va, vo) {
                        (V::F(x), V::F(y)) => {
                            let phi = self.b.build_phi(self.f32t, "sel")?;
                            phi.add_incoming(&[(&x, from_then), (&y, from_other)]);
                            V::F(phi.as_basic_value().into_float_value())
                        }
                        (V::I(x), V::I(y)) => {
                            let phi = self.b.build_phi(self.i64t, "sel")?;
                            phi.add_incoming(&[(&x, from_then), (&y, from_other)]);
                            V::I(phi.as_basic_value().into_int_value())
                        }
                        _ => {
                            return Err(format!("the branches of `{e}` have different kinds").into())
                        }
                    }
                }
            }
        })
    }

    /// A call of a one-argument intrinsic or math function returning `f32`.
    fn call_f(&mut self, f: FunctionValue<'c>, x: FloatValue<'c>) -> R<FloatValue<'c>> {
        let c = self.b.build_call(f, &[x.into()], "")?;
        Ok(basic(c.try_as_basic_value().basic())?.into_float_value())
    }

    fn unary(&mut self, op: ScalarUn, a: V<'c>) -> R<V<'c>> {
        Ok(match (op, a) {
            (ScalarUn::Neg, V::I(i)) => V::I(self.b.build_int_neg(i, "")?),
            (ScalarUn::Neg, V::F(f)) => V::F(self.b.build_float_neg(f, "")?),
            (ScalarUn::Not, v) => {
                let t = self.truth(v)?;
                let n = self.b.build_not(t, "")?;
                self.bool_int(n)?
            }
            (ScalarUn::Abs, V::I(i)) => {
                // `llvm.abs(x, false)`: |i64::MIN| wraps to i64::MIN, like Cranelift's `iabs`.
                let poison = self.cx.bool_type().const_zero();
                let c = self.b.build_call(self.callees.iabs, &[i.into(), poison.into()], "")?;
                V::I(basic(c.try_as_basic_value().basic())?.into_int_value())
            }
            (ScalarUn::Abs, V::F(f)) => V::F(self.call_f(self.callees.fabs, f)?),
            (ScalarUn::Floor | ScalarUn::ToInt, V::I(i)) => V::I(i),
            (ScalarUn::Floor, V::F(f)) => V::F(self.call_f(self.callees.floor, f)?),
            (ScalarUn::ToInt, V::F(f)) => {
                let nan = self.b.build_float_compare(FloatPredicate::UNO, f, f, "")?;
                self.fail_if(nan, Fault::IntOfNan)?;
                let c = self.b.build_call(self.callees.fptosi_sat, &[f.into()], "")?;
                V::I(basic(c.try_as_basic_value().basic())?.into_int_value())
            }
            (ScalarUn::ToFloat, v) => V::F(self.as_f(v)?),
            (ScalarUn::Sqrt, v) => {
                let f = self.as_f(v)?;
                V::F(self.call_f(self.callees.sqrt, f)?)
            }
            (ScalarUn::Rsqrt, v) => {
                let f = self.as_f(v)?;
                let s = self.call_f(self.callees.sqrt, f)?;
                V::F(self.b.build_float_div(self.fconst(1.0), s, "")?)
            }
            (op, v) => {
                let f = self.as_f(v)?;
                let callee = self
                    .callees
                    .math
                    .iter()
                    .find(|(o, _)| *o == op)
                    .map(|(_, c)| *c)
                    .ok_or_else(|| format!("no native code for `{}`", op.name()))?;
                V::F(self.call_f(callee, f)?)
            }
        })
    }

    /// A binary operator; `pow2` is the right operand when it is a power-of-two literal.
    fn binary(&mut self, op: ScalarBin, a: V<'c>, c: V<'c>, pow2: Option<i64>) -> R<V<'c>> {
        use ScalarBin as B;
        if matches!(op, B::And | B::Or) {
            let (x, y) = (self.truth(a)?, self.truth(c)?);
            let r = if op == B::And {
                self.b.build_and(x, y, "")?
            } else {
                self.b.build_or(x, y, "")?
            };
            return self.bool_int(r);
        }
        let int_cc = |op: B| match op {
            B::Lt => Some(IntPredicate::SLT),
            B::Le => Some(IntPredicate::SLE),
            B::Gt => Some(IntPredicate::SGT),
            B::Ge => Some(IntPredicate::SGE),
            B::Eq => Some(IntPredicate::EQ),
            B::Ne => Some(IntPredicate::NE),
            _ => None,
        };
        if let (V::I(x), V::I(y)) = (a, c) {
            if let Some(cc) = int_cc(op) {
                let r = self.b.build_int_compare(cc, x, y, "")?;
                return self.bool_int(r);
            }
            return Ok(V::I(match op {
                B::Add => self.b.build_int_add(x, y, "")?,
                B::Sub => self.b.build_int_sub(x, y, "")?,
                B::Mul => self.b.build_int_mul(x, y, "")?,
                B::Max => call2(&self.b, self.callees.smax, x, y)?,
                B::Min => call2(&self.b, self.callees.smin, x, y)?,
                B::Div | B::Rem => match pow2 {
                    // Arithmetic shift and mask are floor division and floor modulo by 2^s.
                    Some(d) if op == B::Div => {
                        let s = self.iconst(i64::from(d.trailing_zeros()));
                        self.b.build_right_shift(x, s, true, "")?
                    }
                    Some(d) => self.b.build_and(x, self.iconst(d - 1), "")?,
                    None => self.int_divmod(op, x, y)?,
                },
                _ => return Err(format!("`{}` on integers", op.symbol()).into()),
            }));
        }
        let (x, y) = (self.as_f(a)?, self.as_f(c)?);
        let float_cc = match op {
            B::Lt => Some(FloatPredicate::OLT),
            B::Le => Some(FloatPredicate::OLE),
            B::Gt => Some(FloatPredicate::OGT),
            B::Ge => Some(FloatPredicate::OGE),
            B::Eq => Some(FloatPredicate::OEQ),
            // Unordered or different: NaN != x holds.
            B::Ne => Some(FloatPredicate::UNE),
            _ => None,
        };
        if let Some(cc) = float_cc {
            let r = self.b.build_float_compare(cc, x, y, "")?;
            return self.bool_int(r);
        }
        Ok(V::F(match op {
            B::Add => self.b.build_float_add(x, y, "")?,
            B::Sub => self.b.build_float_sub(x, y, "")?,
            B::Mul => self.b.build_float_mul(x, y, "")?,
            B::Div => self.b.build_float_div(x, y, "")?,
            B::Max => self.fmax(x, y)?,
            B::Min => self.fmin(x, y)?,
            _ => return Err(format!("`{}` needs two integer operands", op.symbol()).into()),
        }))
    }

    /// Floor `/` or `%` of two integers, exactly the reference's: a zero divisor faults,
    /// `i64::MIN / -1` wraps (computed as `-x / 1`, which is defined).
    fn int_divmod(&mut self, op: ScalarBin, x: IntValue<'c>, y: IntValue<'c>) -> R<IntValue<'c>> {
        let zero = self.b.build_int_compare(IntPredicate::EQ, y, self.iconst(0), "")?;
        self.fail_if(zero, Fault::DivisionByZero)?;
        let m1 = self.b.build_int_compare(IntPredicate::EQ, y, self.iconst(-1), "")?;
        let nx = self.b.build_int_neg(x, "")?;
        let xs = self.b.build_select(m1, nx, x, "")?.into_int_value();
        let ys = self.b.build_select(m1, self.iconst(1), y, "")?.into_int_value();
        let q = self.b.build_int_signed_div(xs, ys, "")?;
        let r = self.b.build_int_signed_rem(xs, ys, "")?;
        // q - 1 when the division is inexact and the signs differ.
        let rnz = self.b.build_int_compare(IntPredicate::NE, r, self.iconst(0), "")?;
        let sx = self.b.build_int_compare(IntPredicate::SLT, xs, self.iconst(0), "")?;
        let sy = self.b.build_int_compare(IntPredicate::SLT, ys, self.iconst(0), "")?;
        let differ = self.b.build_xor(sx, sy, "")?;
        let fix = self.b.build_and(rnz, differ, "")?;
        let fix = self.b.build_int_z_extend(fix, self.i64t, "")?;
        let q = self.b.build_int_sub(q, fix, "")?;
        if op == ScalarBin::Div {
            return Ok(q);
        }
        let qy = self.b.build_int_mul(q, y, "")?;
        Ok(self.b.build_int_sub(x, qy, "")?)
    }
}

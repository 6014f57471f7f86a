//! Lowering one [`Kernel`] to a Cranelift function `(operands: ptr, lo: i64, hi: i64) -> i32`.
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
//! An interchanged reduction ([`interchange`](crate::cpu::nest::interchange)) runs, at each point of the other parallel
//! dimensions, `acc[j] = identity` for every `j`, then for `r` in R, for `j`:
//! `acc[j] = combine(acc[j], body)`, then the epilogue and store for every `j` ([`Lower::row`]).
//!
//! Invariants the generated code keeps (the `exec` module relies on them): every load and store
//! is at an element offset proven, by [`Iv`] interval analysis of its map over the ranges of the
//! domain indices in scope, to lie inside its operand, or is preceded by a check that branches
//! to `exit` otherwise; no instruction can trap (divisions have a positive divisor, or a
//! divisor checked non-zero and not `-1`). Index arithmetic never wraps: intervals are computed
//! in `i128` and a map that could leave `i64` is rejected.

use std::collections::HashMap;

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::types::{F32, I32, I64};
use cranelift_codegen::ir::Block;
use cranelift_codegen::ir::{BlockArg, Function, InstBuilder, MemFlagsData, Type, Value};
use cranelift_codegen::isa::TargetFrontendConfig;
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use fbc_dialects::memory::{
    Combine, Kernel, MemType, Scalar, ScalarBin, ScalarKind, ScalarUn, StorageKind,
};
use fbc_index::{Expr, IndexMap};
use fbc_ir::attr::BinOp;
use fbc_ir::ElemType;

use super::math::FuncRefs;
use crate::cpu::nest::{div_iv, within, Iv, Nest};
use crate::cpu::Fault;

/// A payload value: `f32`, or a 64-bit integer.
#[derive(Debug, Clone, Copy)]
enum V {
    F(Value),
    I(Value),
}

impl V {
    fn kind(self) -> ScalarKind {
        match self {
            V::F(_) => ScalarKind::Float,
            V::I(_) => ScalarKind::Int,
        }
    }
}

struct Lower<'a, 'f> {
    b: FunctionBuilder<'f>,
    k: &'a Kernel,
    types: &'a [MemType],
    math: &'a FuncRefs,
    ptr: Type,
    bases: Vec<Value>,
    /// Current value of each domain index.
    dims: Vec<Value>,
    /// Range of each domain index where the code being emitted runs.
    ranges: Vec<Iv>,
    /// The error exit (one `i32` parameter: the code).
    exit: Block,
    /// Operands already read at their map at the current point (`x0` used twice loads once).
    reads: HashMap<usize, V>,
    /// The reduction result, while the epilogue is emitted.
    acc: Option<V>,
    /// The row statistics computed so far at the current parallel point (a row kernel).
    stats: Vec<Value>,
    /// The launch's symbols (read and checked at entry) and their ranges.
    syms: Vec<(Value, Iv)>,
    /// Base of the accumulator row of an interchanged reduction (see [`crate::cpu::nest::interchange`]).
    scratch: Option<Value>,
    /// The dimension whose loop runs over the chunk `[lo, hi)` given by the caller (clamped to
    /// `[0, extent]`) instead of its whole extent; see [`crate::cpu::nest::split_dim`].
    split: Option<(usize, Value, Value)>,
}

/// Emits `kernel` (already checked against `types`) into `func`, whose signature is
/// `(ptr, lo: i64, hi: i64) -> i32`: with `nest.split = Some(d)`, the loop over dimension `d` runs
/// over `[max(lo, 0), min(hi, extent))` only (nothing when that is empty); without, `lo` and
/// `hi` are ignored.
pub(crate) fn lower(
    func: &mut Function,
    fctx: &mut FunctionBuilderContext,
    kernel: &Kernel,
    types: &[MemType],
    fconfig: TargetFrontendConfig,
    math: &FuncRefs,
    Nest { scratch, split }: Nest,
) -> Result<(), String> {
    let ptr = fconfig.pointer_type();
    for (k, t) in types.iter().enumerate() {
        if i64::try_from(t.elems()).is_err() {
            return Err(format!("operand {k} ({t}) has more elements than the JIT can index"));
        }
    }
    let mut b = FunctionBuilder::new(func, fctx);
    let entry = b.create_block();
    b.append_block_params_for_function_params(entry);
    let exit = b.create_block();
    b.append_block_param(exit, I32);
    b.set_cold_block(exit);
    b.switch_to_block(entry);
    let args = b.block_params(entry)[0];
    let bases = (0..types.len())
        .map(|k| {
            b.ins().load(ptr, MemFlagsData::trusted(), args, (k * ptr.bytes() as usize) as i32)
        })
        .collect();
    let scratch_base = scratch.map(|_| {
        b.ins().load(
            ptr,
            MemFlagsData::trusted(),
            args,
            (types.len() * ptr.bytes() as usize) as i32,
        )
    });
    let zero = b.ins().iconst(I64, 0);
    let split = match split {
        Some(d) => {
            let n = kernel
                .domain
                .get(d)
                .and_then(|&n| i64::try_from(n).ok())
                .ok_or_else(|| format!("internal: no dimension {d} to split"))?;
            let params = b.block_params(entry).to_vec();
            let (lo, hi) = (params[1], params[2]);
            // The chunk clamped to the extent, so the index ranges of the interval analysis
            // hold whatever the caller passes.
            let lo = b.ins().smax(lo, zero);
            let n = b.ins().iconst(I64, n);
            let hi = b.ins().smin(hi, n);
            Some((d, lo, hi))
        }
        None => None,
    };
    let rank = kernel.domain.len();
    let mut l = Lower {
        b,
        k: kernel,
        types,
        math,
        ptr,
        bases,
        dims: vec![zero; rank],
        ranges: vec![Iv::point(0); rank],
        exit,
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
        let v = l.b.ins().load(I32, MemFlagsData::trusted(), l.bases[sym.operand], 0);
        let v = l.b.ins().sextend(I64, v);
        let low = l.b.ins().icmp_imm_s(IntCC::SignedLessThan, v, sym.lo);
        let high = l.b.ins().icmp_imm_s(IntCC::SignedGreaterThan, v, sym.hi);
        let bad = l.b.ins().bor(low, high);
        l.fail_if(bad, Fault::SymbolOutOfRange(j));
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
            l.nest(0, np, Vec::new(), &mut |l, _| {
                l.row_point()?;
                Ok(Vec::new())
            })?;
        } else if let Some((j, _)) = scratch {
            let outer: Vec<usize> = (0..np).filter(|&d| d != j).collect();
            l.nest_dims(&outer, Vec::new(), &mut |l, _| {
                l.row(j)?;
                Ok(Vec::new())
            })?;
        } else {
            l.nest(0, np, Vec::new(), &mut |l, _| {
                l.point()?;
                Ok(Vec::new())
            })?;
        }
    }
    let ok = l.b.ins().iconst(I32, 0);
    l.b.ins().return_(&[ok]);
    l.b.switch_to_block(exit);
    let code = l.b.block_params(exit)[0];
    l.b.ins().return_(&[code]);
    l.b.seal_all_blocks();
    l.b.finalize(fconfig);
    Ok(())
}

type LoopBody<'x, 'a, 'f> =
    dyn FnMut(&mut Lower<'a, 'f>, Vec<Value>) -> Result<Vec<Value>, String> + 'x;

impl<'a, 'f> Lower<'a, 'f> {
    fn iconst(&mut self, v: i64) -> Value {
        self.b.ins().iconst(I64, v)
    }

    /// Loops over domain dimensions `from..to` (row-major), threading `carried` values (all of
    /// the same types as `body` returns) through the iterations. Every extent is > 0.
    fn nest(
        &mut self,
        from: usize,
        to: usize,
        carried: Vec<Value>,
        body: &mut LoopBody<'_, 'a, 'f>,
    ) -> Result<Vec<Value>, String> {
        let dims: Vec<usize> = (from..to).collect();
        self.nest_dims(&dims, carried, body)
    }

    /// [`Lower::nest`] over the domain dimensions `dims`, the first outermost.
    fn nest_dims(
        &mut self,
        dims: &[usize],
        carried: Vec<Value>,
        body: &mut LoopBody<'_, 'a, 'f>,
    ) -> Result<Vec<Value>, String> {
        let Some((&from, rest)) = dims.split_first() else {
            return body(self, carried);
        };
        let extent = self.k.domain[from];
        if extent == 1 {
            self.dims[from] = self.iconst(0);
            self.ranges[from] = Iv::point(0);
            return self.nest_dims(rest, carried, body);
        }
        let n =
            i64::try_from(extent).map_err(|_| format!("domain extent {extent} is too large"))?;
        let tys: Vec<Type> = carried.iter().map(|&v| self.b.func.dfg.value_type(v)).collect();
        let head = self.b.create_block();
        let done = self.b.create_block();
        self.b.append_block_param(head, I64);
        for &t in &tys {
            self.b.append_block_param(head, t);
            self.b.append_block_param(done, t);
        }
        let chunk = self.split.filter(|&(d, ..)| d == from).map(|(_, lo, hi)| (lo, hi));
        let (start, end) = match chunk {
            Some((lo, hi)) => (lo, Some(hi)),
            None => (self.iconst(0), None),
        };
        let leave: Vec<BlockArg> = carried.iter().copied().map(BlockArg::from).collect();
        let args: Vec<BlockArg> =
            std::iter::once(start).chain(carried).map(BlockArg::from).collect();
        match end {
            Some(hi) => {
                let any = self.b.ins().icmp(IntCC::SignedLessThan, start, hi);
                self.b.ins().brif(any, head, &args, done, &leave);
            }
            None => {
                self.b.ins().jump(head, &args);
            }
        }
        self.b.switch_to_block(head);
        let params = self.b.block_params(head).to_vec();
        self.dims[from] = params[0];
        self.ranges[from] = Iv { lo: 0, hi: n - 1 };
        let out = self.nest_dims(rest, params[1..].to_vec(), body)?;
        let next = self.b.ins().iadd_imm_s(params[0], 1);
        let more = match end {
            Some(hi) => self.b.ins().icmp(IntCC::SignedLessThan, next, hi),
            None => self.b.ins().icmp_imm_s(IntCC::SignedLessThan, next, n),
        };
        let again: Vec<BlockArg> =
            std::iter::once(next).chain(out.iter().copied()).map(BlockArg::from).collect();
        let leave: Vec<BlockArg> = out.into_iter().map(BlockArg::from).collect();
        self.b.ins().brif(more, head, &again, done, &leave);
        self.b.switch_to_block(done);
        Ok(self.b.block_params(done).to_vec())
    }

    /// Branches to the error exit with `fault` when `cond` (an `i8` truth value) holds.
    fn fail_if(&mut self, cond: Value, fault: Fault) {
        let cont = self.b.create_block();
        let code = self.b.ins().iconst(I32, i64::from(fault.code()));
        self.b.ins().brif(cond, self.exit, &[BlockArg::from(code)], cont, &[]);
        self.b.switch_to_block(cont);
    }

    // ----- index maps ----------------------------------------------------------------------

    /// One map result at the current point, with its interval. `who` names the map's owner in
    /// faults (an operand index, or the operand count for the guard).
    fn affine(&mut self, e: &Expr, map: &IndexMap, who: usize) -> Result<(Value, Iv), String> {
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
                (self.b.ins().ineg(a), ia.checked_neg())
            }
            Expr::Bin(op, a, c) => {
                let (a, ia) = self.affine(a, map, who)?;
                let (c, ic) = self.affine(c, map, who)?;
                match op {
                    BinOp::Add => (self.b.ins().iadd(a, c), ia.checked_add(ic)),
                    BinOp::Sub => (self.b.ins().isub(a, c), ia.checked_sub(ic)),
                    BinOp::Mul => (self.b.ins().imul(a, c), ia.checked_mul(ic)),
                    BinOp::FloorDiv | BinOp::CeilDiv | BinOp::Mod => {
                        let (v, iv) = self.map_div(*op, (a, ia), (c, ic), who)?;
                        (v, Some(iv))
                    }
                    // The IR's maps are affine (the verifier checks it).
                    BinOp::Shl | BinOp::Shr | BinOp::And | BinOp::Min | BinOp::Max => {
                        return Err(format!("`{}` in the index map {map} is not affine", op.name()))
                    }
                }
            }
        };
        let Some(iv) = iv else {
            return Err(format!(
                "the index map {map} can leave the 64-bit range over the domain {:?}",
                self.k.domain
            ));
        };
        // A value known exactly is a constant, which lets Cranelift fold what uses it.
        Ok(match iv.singleton() {
            Some(c) if !matches!(e, Expr::Const(_)) => (self.iconst(c), iv),
            _ => (v, iv),
        })
    }

    /// `floordiv`, `ceildiv`, `mod` with MLIR semantics: the divisor must be positive (else the
    /// map is undefined: a fault), the results are floor-rounded.
    fn map_div(
        &mut self,
        op: BinOp,
        (a, ia): (Value, Iv),
        (c, ic): (Value, Iv),
        who: usize,
    ) -> Result<(Value, Iv), String> {
        let mut ic = ic;
        if ic.lo <= 0 {
            let bad = self.b.ins().icmp_imm_s(IntCC::SignedLessThanOrEqual, c, 0);
            self.fail_if(bad, Fault::MapUndefined(who));
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
                        let nz = self.b.ins().icmp_imm_s(IntCC::NotEqual, a, 0);
                        (self.b.ins().uextend(I64, nz), iv)
                    }
                });
            }
            if d.count_ones() == 1 {
                let s = i64::from(d.trailing_zeros());
                let v = match op {
                    BinOp::FloorDiv => self.b.ins().sshr_imm_s(a, s),
                    BinOp::Mod => self.b.ins().band_imm_s(a, d - 1),
                    _ => {
                        if ia.checked_add(Iv::point(d - 1)).is_none() {
                            return Err("a `ceildiv` can leave the 64-bit range".into());
                        }
                        let t = self.b.ins().iadd_imm_s(a, d - 1);
                        self.b.ins().sshr_imm_s(t, s)
                    }
                };
                return Ok((v, iv));
            }
            if ia.lo >= 0 {
                let dv = self.iconst(d);
                let v = match op {
                    BinOp::FloorDiv => self.b.ins().udiv(a, dv),
                    BinOp::Mod => self.b.ins().urem(a, dv),
                    _ => {
                        let t = self.b.ins().iadd_imm_s(a, d - 1);
                        self.b.ins().udiv(t, dv)
                    }
                };
                return Ok((v, iv));
            }
        }
        // General case, divisor `c > 0` here: truncating division and a floor correction.
        let v = match op {
            BinOp::FloorDiv => self.floor_divmod(a, c).0,
            BinOp::Mod => self.floor_divmod(a, c).1,
            _ => {
                // ceildiv(a, c) = -floordiv(-a, c); `-a` fits because `a`'s interval is in i64
                // and was produced by checked steps except at i64::MIN.
                if ia.lo == i64::MIN {
                    return Err("a `ceildiv` can leave the 64-bit range".into());
                }
                let na = self.b.ins().ineg(a);
                let q = self.floor_divmod(na, c).0;
                self.b.ins().ineg(q)
            }
        };
        Ok((v, iv))
    }

    /// Floor quotient and remainder of `a / c` for `c > 0`.
    fn floor_divmod(&mut self, a: Value, c: Value) -> (Value, Value) {
        let q = self.b.ins().sdiv(a, c);
        let qc = self.b.ins().imul(q, c);
        let r = self.b.ins().isub(a, qc);
        let neg = self.b.ins().icmp_imm_s(IntCC::SignedLessThan, r, 0);
        let one = self.b.ins().uextend(I64, neg);
        let q = self.b.ins().isub(q, one);
        let zero = self.dims_zero();
        let fix = self.b.ins().select(neg, c, zero);
        let r = self.b.ins().iadd(r, fix);
        (q, r)
    }

    fn dims_zero(&mut self) -> Value {
        self.iconst(0)
    }

    /// The checked element offset of operand `k` at its map, at the current point.
    fn offset(&mut self, k: usize, fault: Fault) -> Result<Value, String> {
        let map = &self.k.maps[k];
        let t = self.types[k];
        let len = t.elems() as i64;
        match t.storage {
            StorageKind::Buffer { .. } => {
                let (v, iv) = self.affine(&map.results[0], map, k)?;
                self.check_range(v, iv, len, fault);
                Ok(v)
            }
            StorageKind::Image { width, height } => {
                let mut c = [self.dims_zero(); 3];
                for (i, ext) in [width as i64, height as i64, 4].into_iter().enumerate() {
                    let (v, iv) = self.affine(&map.results[i], map, k)?;
                    self.check_range(v, iv, ext, fault);
                    c[i] = v;
                }
                let row = self.b.ins().imul_imm_s(c[1], width as i64);
                let texel = self.b.ins().iadd(row, c[0]);
                let t4 = self.b.ins().ishl_imm_s(texel, 2);
                Ok(self.b.ins().iadd(t4, c[2]))
            }
        }
    }

    /// Faults unless `0 <= v < len`; nothing when the interval proves it.
    fn check_range(&mut self, v: Value, iv: Iv, len: i64, fault: Fault) {
        if !within(iv, 0, len - 1) {
            let bad = self.b.ins().icmp_imm_u(IntCC::UnsignedGreaterThanOrEqual, v, len);
            self.fail_if(bad, fault);
        }
    }

    fn address(&mut self, k: usize, offset: Value) -> Value {
        let bytes = self.b.ins().ishl_imm_s(offset, 2);
        let bytes = if self.ptr == I64 { bytes } else { self.b.ins().ireduce(self.ptr, bytes) };
        self.b.ins().iadd(self.bases[k], bytes)
    }

    fn load(&mut self, k: usize, offset: Value) -> V {
        let addr = self.address(k, offset);
        match self.types[k].elem {
            ElemType::I32 => {
                let v = self.b.ins().load(I32, MemFlagsData::trusted(), addr, 0);
                V::I(self.b.ins().sextend(I64, v))
            }
            _ => V::F(self.b.ins().load(F32, MemFlagsData::trusted(), addr, 0)),
        }
    }

    // ----- one parallel point ----------------------------------------------------------------

    /// The output element of the current parallel point: guard, reduction, epilogue, store.
    fn point(&mut self) -> Result<(), String> {
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

    /// The output's element type in native code (`i32` or `f32`).
    fn out_ty(&self) -> Type {
        match self.types[self.k.output()].elem {
            ElemType::I32 => I32,
            _ => F32,
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
    fn store_out(&mut self, value: Value) -> Result<(), String> {
        let out = self.k.output();
        let off = self.offset(out, Fault::WriteOutOfBounds(out))?;
        let addr = self.address(out, off);
        self.b.ins().store(MemFlagsData::trusted(), value, addr, 0);
        Ok(())
    }

    /// The value `value` emits (of type `out_ty`) where the guard holds at the current point,
    /// else 0; while `value` is emitted the index ranges are narrowed to where the guard holds.
    fn guarded(
        &mut self,
        out_ty: Type,
        value: &mut dyn FnMut(&mut Self) -> Result<Value, String>,
    ) -> Result<Value, String> {
        let Some((cond, narrowed)) = self.guard()? else { return value(self) };
        let then = self.b.create_block();
        let other = self.b.create_block();
        let merge = self.b.create_block();
        self.b.append_block_param(merge, out_ty);
        self.b.ins().brif(cond, then, &[], other, &[]);
        self.b.switch_to_block(then);
        let saved = std::mem::replace(&mut self.ranges, narrowed);
        let v = value(self)?;
        self.ranges = saved;
        self.b.ins().jump(merge, &[BlockArg::from(v)]);
        self.b.switch_to_block(other);
        let zero =
            if out_ty == I32 { self.b.ins().iconst(I32, 0) } else { self.b.ins().f32const(0.0) };
        self.b.ins().jump(merge, &[BlockArg::from(zero)]);
        self.b.switch_to_block(merge);
        Ok(self.b.block_params(merge)[0])
    }

    /// One row of a row kernel at the current parallel point: each statistic combined over the
    /// row dimensions in row-major order from the combine's identity, then its epilogue; then
    /// the body stored at every row point (0 where the guard fails), as the reference executor
    /// computes it.
    fn row_point(&mut self) -> Result<(), String> {
        let k = self.k;
        let np = k.parallel_dims();
        let rank = k.domain.len();
        let out_ty = self.out_ty();
        self.stats.clear();
        for st in &k.stats {
            let init = self.b.ins().f32const(st.combine.identity());
            let acc = self.nest(np, rank, vec![init], &mut |l, acc| {
                l.reads.clear();
                let v = l.scalar(&st.body)?;
                let v = l.as_f(v);
                Ok(vec![match st.combine {
                    Combine::Add => l.b.ins().fadd(acc[0], v),
                    Combine::Max => l.fmax(acc[0], v),
                }])
            })?;
            self.zero_dims(np);
            let v = match &st.epilogue {
                Some(e) => {
                    self.reads.clear();
                    self.acc = Some(V::F(acc[0]));
                    let v = self.scalar(e);
                    self.acc = None;
                    let v = v?;
                    self.as_f(v)
                }
                None => acc[0],
            };
            self.stats.push(v);
        }
        self.nest(np, rank, Vec::new(), &mut |l, _| {
            let value = l.guarded(out_ty, &mut |l| {
                l.reads.clear();
                let v = l.scalar(&l.k.body)?;
                l.finish(v, out_ty)
            })?;
            l.store_out(value)?;
            Ok(Vec::new())
        })?;
        self.zero_dims(np);
        Ok(())
    }

    /// All points of parallel dimension `j` at once, for an interchanged reduction: the
    /// accumulators of the row live in the scratch array, the reduction loops are outside and
    /// dimension `j` inside, so each output element is still combined in row-major reduction
    /// order (bit-identical to [`Lower::point`]) while the inputs are read along their
    /// contiguous dimension.
    fn row(&mut self, j: usize) -> Result<(), String> {
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
        self.nest_dims(&[j], Vec::new(), &mut |l, _| {
            let init = l.b.ins().f32const(combine.identity());
            let addr = l.acc_addr(j);
            l.b.ins().store(MemFlagsData::trusted(), init, addr, 0);
            Ok(Vec::new())
        })?;
        self.nest(np, rank, Vec::new(), &mut |l, _| {
            l.nest_dims(&[j], Vec::new(), &mut |l, _| {
                l.reads.clear();
                let v = l.scalar(&l.k.body)?;
                let v = l.as_f(v);
                let addr = l.acc_addr(j);
                let acc = l.b.ins().load(F32, MemFlagsData::trusted(), addr, 0);
                let acc = match combine {
                    Combine::Add => l.b.ins().fadd(acc, v),
                    Combine::Max => l.fmax(acc, v),
                };
                l.b.ins().store(MemFlagsData::trusted(), acc, addr, 0);
                Ok(Vec::new())
            })
        })?;
        self.zero_dims(np);
        self.nest_dims(&[j], Vec::new(), &mut |l, _| {
            let addr = l.acc_addr(j);
            let acc = V::F(l.b.ins().load(F32, MemFlagsData::trusted(), addr, 0));
            let v = l.finish(acc, out_ty)?;
            let off = l.offset(out, Fault::WriteOutOfBounds(out))?;
            let addr = l.address(out, off);
            l.b.ins().store(MemFlagsData::trusted(), v, addr, 0);
            Ok(Vec::new())
        })?;
        Ok(())
    }

    /// Address of the accumulator of the current index of dimension `j`: in `[0, extent)`,
    /// the scratch array's length, by construction of the loop.
    fn acc_addr(&mut self, j: usize) -> Value {
        let base = self.scratch.unwrap_or(self.bases[0]);
        let bytes = self.b.ins().ishl_imm_s(self.dims[j], 2);
        let bytes = if self.ptr == I64 { bytes } else { self.b.ins().ireduce(self.ptr, bytes) };
        self.b.ins().iadd(base, bytes)
    }

    /// The guard condition (`None`: none, or always true) and the index ranges where it holds.
    fn guard(&mut self) -> Result<Option<(Value, Vec<Iv>)>, String> {
        let Some(g) = &self.k.guard else { return Ok(None) };
        let who = self.types.len();
        let mut cond: Option<Value> = None;
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
            let ok = self.b.ins().icmp_imm_u(IntCC::UnsignedLessThan, v, bound);
            cond = Some(match cond {
                None => ok,
                Some(c) => self.b.ins().band(c, ok),
            });
        }
        Ok(cond.map(|c| (c, narrowed)))
    }

    /// The (guarded) value of the current parallel point, converted to the output's storage
    /// type `out_ty`.
    fn compute(&mut self, out_ty: Type) -> Result<Value, String> {
        let np = self.k.parallel_dims();
        let rank = self.k.domain.len();
        let acc = match self.k.combine {
            None => {
                self.reads.clear();
                self.scalar(&self.k.body)?
            }
            Some(combine) if self.k.domain[np..].contains(&0) => {
                V::F(self.b.ins().f32const(combine.identity()))
            }
            Some(combine) => {
                let init = self.b.ins().f32const(combine.identity());
                {
                    let r = self.nest(np, rank, vec![init], &mut |l, acc| {
                        l.reads.clear();
                        let v = l.scalar(&l.k.body)?;
                        let v = l.as_f(v);
                        Ok(vec![match combine {
                            Combine::Add => l.b.ins().fadd(acc[0], v),
                            Combine::Max => l.fmax(acc[0], v),
                        }])
                    })?;
                    self.zero_dims(np);
                    V::F(r[0])
                }
            }
        };
        self.finish(acc, out_ty)
    }

    /// The epilogue applied to `acc`, converted to the output's storage type `out_ty`.
    fn finish(&mut self, acc: V, out_ty: Type) -> Result<Value, String> {
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
        Ok(match (out_ty == I32, v) {
            (true, V::I(i)) => self.b.ins().ireduce(I32, i),
            (true, V::F(_)) => {
                return Err("the kernel computes f32 values for an integer output".into())
            }
            (false, v) if self.types[self.k.output()].is_half() => {
                // An `f16` image stores the value rounded to `f16`: the reference's function.
                let f = self.as_f(v);
                let call = self.b.ins().call(self.math.round_f16(), &[f]);
                self.b.inst_results(call)[0]
            }
            (false, v) => self.as_f(v),
        })
    }

    // ----- payload ---------------------------------------------------------------------------

    fn as_f(&mut self, v: V) -> Value {
        match v {
            V::F(f) => f,
            V::I(i) => self.b.ins().fcvt_from_sint(F32, i),
        }
    }

    /// `i8` truth of a value (non-zero; NaN is true).
    fn truth(&mut self, v: V) -> Value {
        match v {
            V::I(i) => self.b.ins().icmp_imm_s(IntCC::NotEqual, i, 0),
            V::F(f) => {
                let z = self.b.ins().f32const(0.0);
                self.b.ins().fcmp(FloatCC::NotEqual, f, z)
            }
        }
    }

    fn bool_int(&mut self, b: Value) -> V {
        V::I(self.b.ins().uextend(I64, b))
    }

    /// NaN-propagating maximum, exactly `fmax_nan`: NaN if either is NaN, else `a` if `a >= b`.
    fn fmax(&mut self, a: Value, b: Value) -> Value {
        self.fpick(a, b, FloatCC::GreaterThanOrEqual)
    }

    fn fmin(&mut self, a: Value, b: Value) -> Value {
        self.fpick(a, b, FloatCC::LessThanOrEqual)
    }

    fn fpick(&mut self, a: Value, b: Value, cc: FloatCC) -> Value {
        let uno = self.b.ins().fcmp(FloatCC::Unordered, a, b);
        let take_a = self.b.ins().fcmp(cc, a, b);
        let r = self.b.ins().select(take_a, a, b);
        let nan = self.b.ins().f32const(f32::NAN);
        self.b.ins().select(uno, nan, r)
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

    fn scalar(&mut self, e: &Scalar) -> Result<V, String> {
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
            Scalar::Float(x) => V::F(self.b.ins().f32const(*x as f32)),
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
                    return Err(format!("`x{k}`: no operand {k}"));
                }
                let off = self.offset(*k, Fault::ReadOutOfBounds(*k))?;
                let v = self.load(*k, off);
                self.reads.insert(*k, v);
                v
            }
            Scalar::Load(k, e) => {
                let off = match self.scalar(e)? {
                    V::I(i) => i,
                    V::F(_) => {
                        return Err(format!("the element offset of `x{k}[..]` is not an integer"))
                    }
                };
                let t = self.types.get(*k).ok_or_else(|| format!("`x{k}[..]`: no operand {k}"))?;
                let len = t.elems() as i64;
                let bad = self.b.ins().icmp_imm_u(IntCC::UnsignedGreaterThanOrEqual, off, len);
                self.fail_if(bad, Fault::LoadOutOfBounds(*k));
                self.load(*k, off)
            }
            Scalar::Un(op, a) => {
                let a = self.scalar(a)?;
                self.unary(*op, a)?
            }
            Scalar::Bin(..) => unreachable!("chains of binary operators are walked above"),
            Scalar::Select(c, a, o) => {
                let c = self.scalar(c)?;
                let cond = self.truth(c);
                if !self.may_fail(a) && !self.may_fail(o) {
                    let va = self.scalar(a)?;
                    let vo = self.scalar(o)?;
                    match (va, vo) {
                        (V::F(x), V::F(y)) => V::F(self.b.ins().select(cond, x, y)),
                        (V::I(x), V::I(y)) => V::I(self.b.ins().select(cond, x, y)),
                        _ => return Err(format!("the branches of `{e}` have different kinds")),
                    }
                } else {
                    let then = self.b.create_block();
                    let other = self.b.create_block();
                    let merge = self.b.create_block();
                    self.b.ins().brif(cond, then, &[], other, &[]);
                    let saved = self.reads.clone();
                    self.b.switch_to_block(then);
                    let va = self.scalar(a)?;
                    let (x, ty) = match va {
                        V::F(x) => (x, F32),
                        V::I(x) => (x, I64),
                    };
                    self.b.append_block_param(merge, ty);
                    self.b.ins().jump(merge, &[BlockArg::from(x)]);
                    // Reads in one branch do not dominate the other branch or the merge.
                    self.reads.clone_from(&saved);
                    self.b.switch_to_block(other);
                    let vo = self.scalar(o)?;
                    self.reads = saved;
                    let y = match (va, vo) {
                        (V::F(_), V::F(y)) | (V::I(_), V::I(y)) => y,
                        _ => return Err(format!("the branches of `{e}` have different kinds")),
                    };
                    self.b.ins().jump(merge, &[BlockArg::from(y)]);
                    self.b.switch_to_block(merge);
                    let r = self.b.block_params(merge)[0];
                    let wrap = if ty == F32 { V::F } else { V::I };
                    wrap(r)
                }
            }
        })
    }

    fn unary(&mut self, op: ScalarUn, a: V) -> Result<V, String> {
        Ok(match (op, a) {
            (ScalarUn::Neg, V::I(i)) => V::I(self.b.ins().ineg(i)),
            (ScalarUn::Neg, V::F(f)) => V::F(self.b.ins().fneg(f)),
            (ScalarUn::Not, v) => {
                let t = self.truth(v);
                let n = self.b.ins().bxor_imm_s(t, 1);
                self.bool_int(n)
            }
            (ScalarUn::Abs, V::I(i)) => V::I(self.b.ins().iabs(i)),
            (ScalarUn::Abs, V::F(f)) => V::F(self.b.ins().fabs(f)),
            (ScalarUn::Floor | ScalarUn::ToInt, V::I(i)) => V::I(i),
            (ScalarUn::Floor, V::F(f)) => V::F(self.b.ins().floor(f)),
            (ScalarUn::ToInt, V::F(f)) => {
                let nan = self.b.ins().fcmp(FloatCC::Unordered, f, f);
                self.fail_if(nan, Fault::IntOfNan);
                V::I(self.b.ins().fcvt_to_sint_sat(I64, f))
            }
            (ScalarUn::ToFloat, v) => V::F(self.as_f(v)),
            (ScalarUn::Sqrt, v) => {
                let f = self.as_f(v);
                V::F(self.b.ins().sqrt(f))
            }
            (ScalarUn::Rsqrt, v) => {
                let f = self.as_f(v);
                let s = self.b.ins().sqrt(f);
                let one = self.b.ins().f32const(1.0);
                V::F(self.b.ins().fdiv(one, s))
            }
            (op, v) => {
                let f = self.as_f(v);
                let callee = self
                    .math
                    .get(op)
                    .ok_or_else(|| format!("no native code for `{}`", op.name()))?;
                let call = self.b.ins().call(callee, &[f]);
                V::F(self.b.inst_results(call)[0])
            }
        })
    }

    /// A binary operator; `pow2` is the right operand when it is a power-of-two literal.
    fn binary(&mut self, op: ScalarBin, a: V, c: V, pow2: Option<i64>) -> Result<V, String> {
        use ScalarBin as B;
        if matches!(op, B::And | B::Or) {
            let (x, y) = (self.truth(a), self.truth(c));
            let r = if op == B::And { self.b.ins().band(x, y) } else { self.b.ins().bor(x, y) };
            return Ok(self.bool_int(r));
        }
        let int_cc = |op: B| match op {
            B::Lt => Some(IntCC::SignedLessThan),
            B::Le => Some(IntCC::SignedLessThanOrEqual),
            B::Gt => Some(IntCC::SignedGreaterThan),
            B::Ge => Some(IntCC::SignedGreaterThanOrEqual),
            B::Eq => Some(IntCC::Equal),
            B::Ne => Some(IntCC::NotEqual),
            _ => None,
        };
        if let (V::I(x), V::I(y)) = (a, c) {
            if let Some(cc) = int_cc(op) {
                let r = self.b.ins().icmp(cc, x, y);
                return Ok(self.bool_int(r));
            }
            return Ok(V::I(match op {
                B::Add => self.b.ins().iadd(x, y),
                B::Sub => self.b.ins().isub(x, y),
                B::Mul => self.b.ins().imul(x, y),
                B::Max => self.b.ins().smax(x, y),
                B::Min => self.b.ins().smin(x, y),
                B::Div | B::Rem => match pow2 {
                    // Arithmetic shift and mask are floor division and floor modulo by 2^s.
                    Some(d) if op == B::Div => {
                        self.b.ins().sshr_imm_s(x, i64::from(d.trailing_zeros()))
                    }
                    Some(d) => self.b.ins().band_imm_s(x, d - 1),
                    None => self.int_divmod(op, x, y),
                },
                _ => return Err(format!("`{}` on integers", op.symbol())),
            }));
        }
        let (x, y) = (self.as_f(a), self.as_f(c));
        let float_cc = match op {
            B::Lt => Some(FloatCC::LessThan),
            B::Le => Some(FloatCC::LessThanOrEqual),
            B::Gt => Some(FloatCC::GreaterThan),
            B::Ge => Some(FloatCC::GreaterThanOrEqual),
            B::Eq => Some(FloatCC::Equal),
            // Unordered or different: NaN != x holds.
            B::Ne => Some(FloatCC::NotEqual),
            _ => None,
        };
        if let Some(cc) = float_cc {
            let r = self.b.ins().fcmp(cc, x, y);
            return Ok(self.bool_int(r));
        }
        Ok(V::F(match op {
            B::Add => self.b.ins().fadd(x, y),
            B::Sub => self.b.ins().fsub(x, y),
            B::Mul => self.b.ins().fmul(x, y),
            B::Div => self.b.ins().fdiv(x, y),
            B::Max => self.fmax(x, y),
            B::Min => self.fmin(x, y),
            _ => return Err(format!("`{}` needs two integer operands", op.symbol())),
        }))
    }

    /// Floor `/` or `%` of two integers, exactly the reference's: a zero divisor faults,
    /// `i64::MIN / -1` wraps (computed as `-x / 1`, which cannot trap).
    fn int_divmod(&mut self, op: ScalarBin, x: Value, y: Value) -> Value {
        let zero = self.b.ins().icmp_imm_s(IntCC::Equal, y, 0);
        self.fail_if(zero, Fault::DivisionByZero);
        let m1 = self.b.ins().icmp_imm_s(IntCC::Equal, y, -1);
        let nx = self.b.ins().ineg(x);
        let one = self.iconst(1);
        let xs = self.b.ins().select(m1, nx, x);
        let ys = self.b.ins().select(m1, one, y);
        let q = self.b.ins().sdiv(xs, ys);
        let r = self.b.ins().srem(xs, ys);
        // q - 1 when the division is inexact and the signs differ.
        let rnz = self.b.ins().icmp_imm_s(IntCC::NotEqual, r, 0);
        let sx = self.b.ins().icmp_imm_s(IntCC::SignedLessThan, xs, 0);
        let sy = self.b.ins().icmp_imm_s(IntCC::SignedLessThan, ys, 0);
        let differ = self.b.ins().bxor(sx, sy);
        let fix = self.b.ins().band(rnz, differ);
        let fix = self.b.ins().uextend(I64, fix);
        let q = self.b.ins().isub(q, fix);
        if op == ScalarBin::Div {
            return q;
        }
        let qy = self.b.ins().imul(q, y);
        self.b.ins().isub(x, qy)
    }
}

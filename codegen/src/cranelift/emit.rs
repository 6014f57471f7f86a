//! The Cranelift side of the shared lowering (`crate::cpu::lower`): [`Emit`] in Cranelift IR
//! through a `FunctionBuilder`. Truth values are `i8`, slots are frontend variables (SSA
//! construction makes their block parameters), faults branch to one cold exit block that
//! returns its `i32` parameter.

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::types::{F32, F32X4, I32, I64, I8};
use cranelift_codegen::ir::{Block, BlockArg, InstBuilder, MemFlagsData, Type, Value};
use cranelift_frontend::{FunctionBuilder, Variable};
use fbc_dialects::memory::ScalarUn;

use super::math::FuncRefs;
use crate::cpu::lower::{Emit, FCmp, FOp, FUn, ICmp, IOp, LowerError, Ty, R};

/// Emits into the function being built by `b`.
pub(crate) struct ClEmit<'a, 'f> {
    pub(crate) b: FunctionBuilder<'f>,
    math: &'a FuncRefs,
    ptr: Type,
    /// The error exit (one `i32` parameter: the code).
    exit: Block,
    /// The operand table's address and the chunk `lo`, `hi`.
    params: [Value; 3],
}

impl<'a, 'f> ClEmit<'a, 'f> {
    /// Starts the function `(ptr, i64, i64) -> i32` of `b` (its signature set): the entry block
    /// with the parameters, and the exit block.
    pub(crate) fn new(mut b: FunctionBuilder<'f>, math: &'a FuncRefs, ptr: Type) -> Self {
        let entry = b.create_block();
        b.append_block_params_for_function_params(entry);
        let exit = b.create_block();
        b.append_block_param(exit, I32);
        b.set_cold_block(exit);
        b.switch_to_block(entry);
        let p = b.block_params(entry);
        let params = [p[0], p[1], p[2]];
        ClEmit { b, math, ptr, exit, params }
    }

    /// Emits the exit block and finishes the function.
    pub(crate) fn finish(mut self, config: cranelift_codegen::isa::TargetFrontendConfig) {
        self.b.switch_to_block(self.exit);
        let code = self.b.block_params(self.exit)[0];
        self.b.ins().return_(&[code]);
        self.b.seal_all_blocks();
        self.b.finalize(config);
    }

    fn ty(&self, t: Ty) -> Type {
        match t {
            Ty::I32 => I32,
            Ty::I8 => I8,
            Ty::I64 => I64,
            Ty::F32 => F32,
            // Only 4 lanes (128-bit SIMD): `splat` refuses other counts, so no value or slot of
            // another vector type is ever made.
            Ty::F32x(_) => F32X4,
        }
    }

    /// The flags of an access of `elem`: a scalar is aligned, a vector only to its lanes.
    fn flags(elem: Ty) -> MemFlagsData {
        match elem {
            Ty::F32x(_) => MemFlagsData::new().with_notrap(),
            _ => MemFlagsData::trusted(),
        }
    }

    /// `base + size·index`, the address of an element of `elem` (4 bytes, a byte for `I8`).
    fn address(&mut self, elem: Ty, base: Value, index: Value) -> Value {
        let bytes = if elem == Ty::I8 { index } else { self.b.ins().ishl_imm_s(index, 2) };
        let bytes = if self.ptr == I64 { bytes } else { self.b.ins().ireduce(self.ptr, bytes) };
        self.b.ins().iadd(base, bytes)
    }

    fn call(&mut self, callee: cranelift_codegen::ir::FuncRef, a: Value) -> Value {
        let call = self.b.ins().call(callee, &[a]);
        self.b.inst_results(call)[0]
    }
}

impl Emit for ClEmit<'_, '_> {
    type V = Value;
    type Block = Block;
    type Slot = Variable;

    fn table(&mut self, k: usize) -> R<Value> {
        let at = i32::try_from(k * self.ptr.bytes() as usize)
            .map_err(|_| LowerError::Kernel(format!("{k} operands are too many")))?;
        Ok(self.b.ins().load(self.ptr, MemFlagsData::trusted(), self.params[0], at))
    }

    fn chunk(&mut self) -> R<(Value, Value)> {
        Ok((self.params[1], self.params[2]))
    }

    fn iconst(&mut self, v: i64) -> R<Value> {
        Ok(self.b.ins().iconst(I64, v))
    }

    fn fconst(&mut self, v: f32) -> R<Value> {
        Ok(self.b.ins().f32const(v))
    }

    fn zero(&mut self, ty: Ty) -> R<Value> {
        Ok(match ty {
            Ty::F32 => self.b.ins().f32const(0.0),
            t => {
                let t = self.ty(t);
                self.b.ins().iconst(t, 0)
            }
        })
    }

    fn ibin(&mut self, op: IOp, a: Value, c: Value, _nsw: bool) -> R<Value> {
        let i = self.b.ins();
        Ok(match op {
            IOp::Add => i.iadd(a, c),
            IOp::Sub => i.isub(a, c),
            IOp::Mul => i.imul(a, c),
            IOp::SDiv => i.sdiv(a, c),
            IOp::SRem => i.srem(a, c),
            IOp::UDiv => i.udiv(a, c),
            IOp::URem => i.urem(a, c),
            IOp::And => i.band(a, c),
            IOp::Or => i.bor(a, c),
            IOp::Xor => i.bxor(a, c),
            IOp::AShr => i.sshr(a, c),
            IOp::SMax => i.smax(a, c),
            IOp::SMin => i.smin(a, c),
        })
    }

    fn ineg(&mut self, a: Value, _nsw: bool) -> R<Value> {
        Ok(self.b.ins().ineg(a))
    }

    fn iabs(&mut self, a: Value) -> R<Value> {
        Ok(self.b.ins().iabs(a))
    }

    fn icmp(&mut self, cc: ICmp, a: Value, c: Value) -> R<Value> {
        let cc = match cc {
            ICmp::Eq => IntCC::Equal,
            ICmp::Ne => IntCC::NotEqual,
            ICmp::Slt => IntCC::SignedLessThan,
            ICmp::Sle => IntCC::SignedLessThanOrEqual,
            ICmp::Sgt => IntCC::SignedGreaterThan,
            ICmp::Sge => IntCC::SignedGreaterThanOrEqual,
            ICmp::Ult => IntCC::UnsignedLessThan,
            ICmp::Uge => IntCC::UnsignedGreaterThanOrEqual,
        };
        Ok(self.b.ins().icmp(cc, a, c))
    }

    fn not(&mut self, a: Value) -> R<Value> {
        Ok(self.b.ins().bxor_imm_s(a, 1))
    }

    fn bool_to_i64(&mut self, a: Value) -> R<Value> {
        Ok(self.b.ins().uextend(I64, a))
    }

    fn sext_i32(&mut self, a: Value) -> R<Value> {
        Ok(self.b.ins().sextend(I64, a))
    }

    fn trunc_i32(&mut self, a: Value) -> R<Value> {
        Ok(self.b.ins().ireduce(I32, a))
    }

    fn i64_to_f32(&mut self, a: Value) -> R<Value> {
        Ok(self.b.ins().fcvt_from_sint(F32, a))
    }

    fn f32_to_i64(&mut self, a: Value) -> R<Value> {
        Ok(self.b.ins().fcvt_to_sint_sat(I64, a))
    }

    fn select(&mut self, c: Value, a: Value, b: Value) -> R<Value> {
        Ok(self.b.ins().select(c, a, b))
    }

    fn fbin(&mut self, op: FOp, a: Value, c: Value) -> R<Value> {
        let i = self.b.ins();
        Ok(match op {
            FOp::Add => i.fadd(a, c),
            FOp::Sub => i.fsub(a, c),
            FOp::Mul => i.fmul(a, c),
            FOp::Div => i.fdiv(a, c),
        })
    }

    fn splat(&mut self, a: Value, lanes: u32) -> R<Value> {
        if lanes != 4 {
            return Err(LowerError::Kernel(format!(
                "internal: Cranelift vectors have 4 f32 lanes, not {lanes}"
            )));
        }
        Ok(self.b.ins().splat(F32X4, a))
    }

    fn fun(&mut self, op: FUn, a: Value) -> R<Value> {
        let i = self.b.ins();
        Ok(match op {
            FUn::Neg => i.fneg(a),
            FUn::Abs => i.fabs(a),
            FUn::Floor => i.floor(a),
            FUn::Sqrt => i.sqrt(a),
        })
    }

    fn fcmp(&mut self, cc: FCmp, a: Value, c: Value) -> R<Value> {
        let cc = match cc {
            FCmp::Oeq => FloatCC::Equal,
            FCmp::Une => FloatCC::NotEqual,
            FCmp::Olt => FloatCC::LessThan,
            FCmp::Ole => FloatCC::LessThanOrEqual,
            FCmp::Ogt => FloatCC::GreaterThan,
            FCmp::Oge => FloatCC::GreaterThanOrEqual,
            FCmp::Uno => FloatCC::Unordered,
        };
        Ok(self.b.ins().fcmp(cc, a, c))
    }

    fn math(&mut self, op: ScalarUn, a: Value) -> R<Value> {
        let callee = self
            .math
            .get(op)
            .ok_or_else(|| LowerError::Kernel(format!("no native code for `{}`", op.name())))?;
        Ok(self.call(callee, a))
    }

    fn round_f16(&mut self, a: Value) -> R<Value> {
        let callee = self.math.round_f16();
        Ok(self.call(callee, a))
    }

    fn load(&mut self, elem: Ty, base: Value, index: Value) -> R<Value> {
        let addr = self.address(elem, base, index);
        if elem == Ty::I8 {
            return Ok(self.b.ins().sload8(I32, Self::flags(elem), addr, 0));
        }
        let ty = self.ty(elem);
        Ok(self.b.ins().load(ty, Self::flags(elem), addr, 0))
    }

    fn store(&mut self, elem: Ty, base: Value, index: Value, v: Value) -> R<()> {
        if elem == Ty::I8 {
            return Err(LowerError::Kernel("a store into an i8 buffer".into()));
        }
        let addr = self.address(elem, base, index);
        self.b.ins().store(Self::flags(elem), v, addr, 0);
        Ok(())
    }

    fn slot(&mut self, ty: Ty) -> R<Variable> {
        let ty = self.ty(ty);
        Ok(self.b.declare_var(ty))
    }

    fn get(&mut self, s: Variable) -> R<Value> {
        Ok(self.b.use_var(s))
    }

    fn set(&mut self, s: Variable, v: Value) -> R<()> {
        self.b.def_var(s, v);
        Ok(())
    }

    fn block(&mut self) -> Block {
        self.b.create_block()
    }

    fn jump(&mut self, to: Block) -> R<()> {
        self.b.ins().jump(to, &[]);
        Ok(())
    }

    fn branch(&mut self, c: Value, then: Block, other: Block) -> R<()> {
        self.b.ins().brif(c, then, &[], other, &[]);
        Ok(())
    }

    fn switch_to(&mut self, b: Block) {
        self.b.switch_to_block(b);
    }

    fn fail_if(&mut self, c: Value, code: u32) -> R<()> {
        let cont = self.b.create_block();
        let code = self.b.ins().iconst(I32, i64::from(code));
        self.b.ins().brif(c, self.exit, &[BlockArg::from(code)], cont, &[]);
        self.b.switch_to_block(cont);
        Ok(())
    }

    fn ret_ok(&mut self) -> R<()> {
        let ok = self.b.ins().iconst(I32, 0);
        self.b.ins().return_(&[ok]);
        Ok(())
    }
}

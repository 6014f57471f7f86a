//! The LLVM side of the shared lowering (`crate::cpu::lower`): [`Emit`] in LLVM IR through
//! inkwell. Values are `BasicValueEnum`s (truth values `i1`), slots are `alloca`s in the first
//! block (which SROA promotes to registers), faults return their code from a block of their own,
//! entered through `llvm.expect` (unlikely). Integer arithmetic carries `nsw` only where the
//! lowering says it cannot wrap (index maps); `f32` instructions carry no fast-math flags, so
//! LLVM neither reassociates nor contracts them and every value is the reference's.

use fbc_dialects::memory::ScalarUn;
use inkwell::attributes::{Attribute, AttributeLoc};
use inkwell::basic_block::BasicBlock;
use inkwell::builder::{Builder, BuilderError};
use inkwell::context::Context;
use inkwell::intrinsics::Intrinsic;
use inkwell::module::Module;
use inkwell::types::{BasicTypeEnum, IntType, VectorType};
use inkwell::values::{
    BasicValue, BasicValueEnum, FloatMathValue, FunctionValue, InstructionValue, IntValue,
    PointerValue,
};
use inkwell::{AddressSpace, FloatPredicate, IntPredicate};

use crate::cpu::lower::{Emit, FCmp, FOp, FUn, ICmp, IOp, LowerError, Ty, R};
use crate::cpu::math::{FUNCS, ROUND_F16};

impl From<BuilderError> for LowerError {
    fn from(e: BuilderError) -> LowerError {
        LowerError::Codegen(e.to_string())
    }
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
                .ok_or_else(|| LowerError::Codegen(format!("LLVM has no intrinsic `{name}`")))
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

/// Emits into function `func` of a module of `cx`.
pub(crate) struct LlvmEmit<'c> {
    cx: &'c Context,
    b: Builder<'c>,
    /// Positioned in the first block, where every `alloca` goes.
    allocas: Builder<'c>,
    /// The block after the `alloca`s, where the code starts.
    entry: BasicBlock<'c>,
    func: FunctionValue<'c>,
    callees: Callees<'c>,
    i64t: IntType<'c>,
}

impl<'c> LlvmEmit<'c> {
    /// Declares function `name`, `i32 (ptr, i64, i64)`, in `module` for the CPU `cpu` with
    /// `features` (its `target-cpu` and `target-features` attributes), and starts it.
    pub(crate) fn new(
        cx: &'c Context,
        module: &Module<'c>,
        name: &str,
        (cpu, features): (&str, &str),
    ) -> R<LlvmEmit<'c>> {
        let i64t = cx.i64_type();
        let ptr = cx.ptr_type(AddressSpace::default());
        let fty = cx.i32_type().fn_type(&[ptr.into(), i64t.into(), i64t.into()], false);
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
        Ok(LlvmEmit { cx, b, allocas, entry, func, callees, i64t })
    }

    /// Ends the `alloca` block with the jump to the code.
    pub(crate) fn finish(self) -> R<()> {
        self.allocas.build_unconditional_branch(self.entry)?;
        Ok(())
    }

    fn ty(&self, t: Ty) -> BasicTypeEnum<'c> {
        match t {
            Ty::I32 => self.cx.i32_type().into(),
            Ty::I8 => self.cx.i8_type().into(),
            Ty::I64 => self.i64t.into(),
            Ty::F32 => self.cx.f32_type().into(),
            Ty::F32x(lanes) => self.cx.f32_type().vec_type(lanes).into(),
        }
    }

    /// The address of element `index` of the array of `elem`s at `base`, and the alignment
    /// of an access of `elem` there: a vector is `f32` elements at a 4-byte alignment.
    fn element(
        &self,
        elem: Ty,
        base: BasicValueEnum<'c>,
        index: BasicValueEnum<'c>,
    ) -> R<(PointerValue<'c>, u32)> {
        let (ty, align) = match elem {
            Ty::F32x(_) => (self.ty(Ty::F32), 4),
            t => (self.ty(t), 0),
        };
        Ok((gep(&self.b, ty, base.into_pointer_value(), int(index))?, align))
    }

    fn param(&self, i: u32) -> R<BasicValueEnum<'c>> {
        self.func.get_nth_param(i).ok_or_else(|| LowerError::Codegen(format!("no parameter {i}")))
    }

    /// The result of a call of `f` on `args`.
    fn call(&self, f: FunctionValue<'c>, args: &[BasicValueEnum<'c>]) -> R<BasicValueEnum<'c>> {
        let args: Vec<_> = args.iter().map(|&a| a.into()).collect();
        let c = self.b.build_call(f, &args, "")?;
        c.try_as_basic_value()
            .basic()
            .ok_or_else(|| LowerError::Codegen("a call without a result".into()))
    }
}

/// The integer operand `v`.
fn int(v: BasicValueEnum<'_>) -> IntValue<'_> {
    v.into_int_value()
}

impl<'c> Emit for LlvmEmit<'c> {
    type V = BasicValueEnum<'c>;
    type Block = BasicBlock<'c>;
    type Slot = (PointerValue<'c>, BasicTypeEnum<'c>);

    fn table(&mut self, k: usize) -> R<Self::V> {
        let ptr = self.cx.ptr_type(AddressSpace::default());
        let table = self.param(0)?.into_pointer_value();
        let at = gep(&self.b, ptr.into(), table, self.i64t.const_int(k as u64, false))?;
        Ok(self.b.build_load(ptr, at, "base")?)
    }

    fn chunk(&mut self) -> R<(Self::V, Self::V)> {
        Ok((self.param(1)?, self.param(2)?))
    }

    fn iconst(&mut self, v: i64) -> R<Self::V> {
        Ok(self.i64t.const_int(v as u64, true).into())
    }

    fn fconst(&mut self, v: f32) -> R<Self::V> {
        Ok(self.cx.f32_type().const_float(f64::from(v)).into())
    }

    fn zero(&mut self, ty: Ty) -> R<Self::V> {
        Ok(self.ty(ty).const_zero())
    }

    fn ibin(&mut self, op: IOp, a: Self::V, c: Self::V, nsw: bool) -> R<Self::V> {
        let (a, c, b) = (int(a), int(c), &self.b);
        Ok(match op {
            IOp::Add if nsw => b.build_int_nsw_add(a, c, "")?,
            IOp::Sub if nsw => b.build_int_nsw_sub(a, c, "")?,
            IOp::Mul if nsw => b.build_int_nsw_mul(a, c, "")?,
            IOp::Add => b.build_int_add(a, c, "")?,
            IOp::Sub => b.build_int_sub(a, c, "")?,
            IOp::Mul => b.build_int_mul(a, c, "")?,
            IOp::SDiv => b.build_int_signed_div(a, c, "")?,
            IOp::SRem => b.build_int_signed_rem(a, c, "")?,
            IOp::UDiv => b.build_int_unsigned_div(a, c, "")?,
            IOp::URem => b.build_int_unsigned_rem(a, c, "")?,
            IOp::And => b.build_and(a, c, "")?,
            IOp::Or => b.build_or(a, c, "")?,
            IOp::Xor => b.build_xor(a, c, "")?,
            IOp::AShr => b.build_right_shift(a, c, true, "")?,
            IOp::SMax => return self.call(self.callees.smax, &[a.into(), c.into()]),
            IOp::SMin => return self.call(self.callees.smin, &[a.into(), c.into()]),
        }
        .into())
    }

    fn ineg(&mut self, a: Self::V, nsw: bool) -> R<Self::V> {
        Ok(if nsw {
            self.b.build_int_nsw_neg(int(a), "")?
        } else {
            self.b.build_int_neg(int(a), "")?
        }
        .into())
    }

    fn iabs(&mut self, a: Self::V) -> R<Self::V> {
        // `llvm.abs(x, false)`: |i64::MIN| wraps to i64::MIN, like Cranelift's `iabs`.
        let poison = self.cx.bool_type().const_zero();
        self.call(self.callees.iabs, &[a, poison.into()])
    }

    fn icmp(&mut self, cc: ICmp, a: Self::V, c: Self::V) -> R<Self::V> {
        let cc = match cc {
            ICmp::Eq => IntPredicate::EQ,
            ICmp::Ne => IntPredicate::NE,
            ICmp::Slt => IntPredicate::SLT,
            ICmp::Sle => IntPredicate::SLE,
            ICmp::Sgt => IntPredicate::SGT,
            ICmp::Sge => IntPredicate::SGE,
            ICmp::Ult => IntPredicate::ULT,
            ICmp::Uge => IntPredicate::UGE,
        };
        Ok(self.b.build_int_compare(cc, int(a), int(c), "")?.into())
    }

    fn not(&mut self, a: Self::V) -> R<Self::V> {
        Ok(self.b.build_not(int(a), "")?.into())
    }

    fn bool_to_i64(&mut self, a: Self::V) -> R<Self::V> {
        Ok(self.b.build_int_z_extend(int(a), self.i64t, "")?.into())
    }

    fn sext_i32(&mut self, a: Self::V) -> R<Self::V> {
        Ok(self.b.build_int_s_extend(int(a), self.i64t, "")?.into())
    }

    fn trunc_i32(&mut self, a: Self::V) -> R<Self::V> {
        Ok(self.b.build_int_truncate(int(a), self.cx.i32_type(), "")?.into())
    }

    fn i64_to_f32(&mut self, a: Self::V) -> R<Self::V> {
        Ok(self.b.build_signed_int_to_float(int(a), self.cx.f32_type(), "")?.into())
    }

    fn f32_to_i64(&mut self, a: Self::V) -> R<Self::V> {
        self.call(self.callees.fptosi_sat, &[a])
    }

    fn select(&mut self, c: Self::V, a: Self::V, b: Self::V) -> R<Self::V> {
        Ok(self.b.build_select(int(c), a, b, "")?)
    }

    fn fbin(&mut self, op: FOp, a: Self::V, c: Self::V) -> R<Self::V> {
        fn on<'c, T: FloatMathValue<'c>>(b: &Builder<'c>, op: FOp, a: T, c: T) -> R<T> {
            Ok(match op {
                FOp::Add => b.build_float_add(a, c, "")?,
                FOp::Sub => b.build_float_sub(a, c, "")?,
                FOp::Mul => b.build_float_mul(a, c, "")?,
                FOp::Div => b.build_float_div(a, c, "")?,
            })
        }
        Ok(match (a, c) {
            (BasicValueEnum::VectorValue(a), BasicValueEnum::VectorValue(c)) => {
                on(&self.b, op, a, c)?.into()
            }
            (a, c) => on(&self.b, op, a.into_float_value(), c.into_float_value())?.into(),
        })
    }

    fn splat(&mut self, a: Self::V, lanes: u32) -> R<Self::V> {
        let f32t = self.cx.f32_type();
        let one = f32t.vec_type(1).get_poison();
        let zero = self.cx.i32_type().const_zero();
        let v = self.b.build_insert_element(one, a.into_float_value(), zero, "")?;
        let mask = VectorType::const_vector(&vec![zero; lanes as usize]);
        Ok(self.b.build_shuffle_vector(v, one, mask, "splat")?.into())
    }

    fn fun(&mut self, op: FUn, a: Self::V) -> R<Self::V> {
        match op {
            FUn::Neg => Ok(self.b.build_float_neg(a.into_float_value(), "")?.into()),
            FUn::Abs => self.call(self.callees.fabs, &[a]),
            FUn::Floor => self.call(self.callees.floor, &[a]),
            FUn::Sqrt => self.call(self.callees.sqrt, &[a]),
        }
    }

    fn fcmp(&mut self, cc: FCmp, a: Self::V, c: Self::V) -> R<Self::V> {
        let cc = match cc {
            FCmp::Oeq => FloatPredicate::OEQ,
            FCmp::Une => FloatPredicate::UNE,
            FCmp::Olt => FloatPredicate::OLT,
            FCmp::Ole => FloatPredicate::OLE,
            FCmp::Ogt => FloatPredicate::OGT,
            FCmp::Oge => FloatPredicate::OGE,
            FCmp::Uno => FloatPredicate::UNO,
        };
        let (a, c) = (a.into_float_value(), c.into_float_value());
        Ok(self.b.build_float_compare(cc, a, c, "")?.into())
    }

    fn math(&mut self, op: ScalarUn, a: Self::V) -> R<Self::V> {
        let callee = self
            .callees
            .math
            .iter()
            .find(|(o, _)| *o == op)
            .map(|(_, c)| *c)
            .ok_or_else(|| LowerError::Kernel(format!("no native code for `{}`", op.name())))?;
        self.call(callee, &[a])
    }

    fn round_f16(&mut self, a: Self::V) -> R<Self::V> {
        self.call(self.callees.round_f16, &[a])
    }

    fn load(&mut self, elem: Ty, base: Self::V, index: Self::V) -> R<Self::V> {
        let (addr, align) = self.element(elem, base, index)?;
        let v = self.b.build_load(self.ty(elem), addr, "x")?;
        if align > 0 {
            aligned(v.as_instruction_value(), align)?;
        }
        if elem == Ty::I8 {
            let wide = self.b.build_int_s_extend(v.into_int_value(), self.cx.i32_type(), "b")?;
            return Ok(wide.into());
        }
        Ok(v)
    }

    fn store(&mut self, elem: Ty, base: Self::V, index: Self::V, v: Self::V) -> R<()> {
        if elem == Ty::I8 {
            return Err(LowerError::Kernel("a store into an i8 buffer".into()));
        }
        let (addr, align) = self.element(elem, base, index)?;
        let st = self.b.build_store(addr, v)?;
        if align > 0 {
            aligned(Some(st), align)?;
        }
        Ok(())
    }

    fn slot(&mut self, ty: Ty) -> R<Self::Slot> {
        let ty = self.ty(ty);
        Ok((self.allocas.build_alloca(ty, "slot")?, ty))
    }

    fn get(&mut self, (at, ty): Self::Slot) -> R<Self::V> {
        Ok(self.b.build_load(ty, at, "v")?)
    }

    fn set(&mut self, (at, _): Self::Slot, v: Self::V) -> R<()> {
        self.b.build_store(at, v)?;
        Ok(())
    }

    fn block(&mut self) -> Self::Block {
        self.cx.append_basic_block(self.func, "")
    }

    fn jump(&mut self, to: Self::Block) -> R<()> {
        self.b.build_unconditional_branch(to)?;
        Ok(())
    }

    fn branch(&mut self, c: Self::V, then: Self::Block, other: Self::Block) -> R<()> {
        self.b.build_conditional_branch(int(c), then, other)?;
        Ok(())
    }

    fn switch_to(&mut self, b: Self::Block) {
        self.b.position_at_end(b);
    }

    fn fail_if(&mut self, c: Self::V, code: u32) -> R<()> {
        let fail = self.block();
        let cont = self.block();
        let never = self.cx.bool_type().const_zero();
        let c = self.call(self.callees.expect, &[c, never.into()])?;
        self.b.build_conditional_branch(int(c), fail, cont)?;
        self.b.position_at_end(fail);
        let code = self.cx.i32_type().const_int(u64::from(code), false);
        self.b.build_return(Some(&code))?;
        self.b.position_at_end(cont);
        Ok(())
    }

    fn ret_ok(&mut self) -> R<()> {
        self.b.build_return(Some(&self.cx.i32_type().const_zero()))?;
        Ok(())
    }
}

/// Sets the alignment of load or store `inst` to `align` bytes.
fn aligned(inst: Option<InstructionValue<'_>>, align: u32) -> R<()> {
    inst.ok_or_else(|| LowerError::Codegen("a load that is not an instruction".into()))?
        .set_alignment(align)
        .map_err(|e| LowerError::Codegen(e.to_string()))
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
    // an operand's element offset proven or checked in range (see `crate::cpu::lower`), a slot of
    // the operand table (one per operand, plus the scratch array's), an accumulator of the
    // scratch array indexed by the loop over its own extent, or a packed contraction's panel or
    // tile element, below the scratch length by construction of its blocks (`Lower::gemm`;
    // a vector access starts there and its lanes stay below it too).
    Ok(unsafe { b.build_in_bounds_gep(ty, base, &[index], "addr")? })
}

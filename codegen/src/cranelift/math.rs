//! The math functions of [`crate::cpu::math`] as imports of the Cranelift JIT module: declared
//! once in the module ([`Imports`]), imported into every kernel function ([`FuncRefs`]).

use cranelift_codegen::ir::{self, types, AbiParam, Signature};
use cranelift_jit::JITModule;
use cranelift_module::{FuncId, Linkage, Module, ModuleError};
use fbc_dialects::memory::ScalarUn;

use crate::cpu::math::{FUNCS, ROUND_F16};

/// The functions declared in the module.
#[derive(Debug)]
pub(super) struct Imports {
    ids: Vec<(ScalarUn, FuncId)>,
    round_f16: FuncId,
}

/// The functions imported into one function being built.
#[derive(Debug)]
pub(crate) struct FuncRefs {
    refs: Vec<(ScalarUn, ir::FuncRef)>,
    round_f16: ir::FuncRef,
}

impl FuncRefs {
    /// The callee for `op`, if it is one of the imported functions.
    pub(crate) fn get(&self, op: ScalarUn) -> Option<ir::FuncRef> {
        self.refs.iter().find(|(o, _)| *o == op).map(|(_, r)| *r)
    }

    /// The callee rounding an `f32` to the nearest `f16` (as an `f32`).
    pub(crate) fn round_f16(&self) -> ir::FuncRef {
        self.round_f16
    }
}

fn signature(module: &JITModule) -> Signature {
    let mut sig = module.make_signature();
    sig.params.push(AbiParam::new(types::F32));
    sig.returns.push(AbiParam::new(types::F32));
    sig
}

impl Imports {
    pub(super) fn declare(module: &mut JITModule) -> Result<Imports, Box<ModuleError>> {
        let sig = signature(module);
        let mut ids = Vec::new();
        for (name, op) in FUNCS {
            ids.push((op, module.declare_function(name, Linkage::Import, &sig).map_err(Box::new)?));
        }
        let round_f16 =
            module.declare_function(ROUND_F16, Linkage::Import, &sig).map_err(Box::new)?;
        Ok(Imports { ids, round_f16 })
    }

    /// Imports every function into `func` (unused imports cost nothing).
    pub(super) fn in_func(&self, module: &mut JITModule, func: &mut ir::Function) -> FuncRefs {
        let refs =
            self.ids.iter().map(|&(op, id)| (op, module.declare_func_in_func(id, func))).collect();
        FuncRefs { refs, round_f16: module.declare_func_in_func(self.round_f16, func) }
    }
}

//! The functions compiled kernels call: `exp log tanh erf sigmoid` on `f32`, and the rounding of
//! a value stored into an `f16` image.
//!
//! Each is an `extern "C"` wrapper around the function the reference executor uses
//! ([`apply_un`] for payloads, [`round_f16`] for stores into `f16` images), so the JIT computes
//! bit-identical values (same libm, same formulas, same rounding). They are registered as symbols
//! of the JIT module and imported into every kernel.

use cranelift_codegen::ir::{self, types, AbiParam, Signature};
use cranelift_jit::JITModule;
use cranelift_module::{FuncId, Linkage, Module, ModuleError};
use fbc_dialects::memory::scalar::{apply_un, round_f16};
use fbc_dialects::memory::{ScalarUn, ScalarValue};

fn un(op: ScalarUn, x: f32) -> f32 {
    match apply_un(op, ScalarValue::F32(x)) {
        Ok(v) => v.as_f32(),
        // Unreachable for these operators on f32; NaN rather than a panic across `extern "C"`.
        Err(_) => f32::NAN,
    }
}

extern "C" fn fbc_exp(x: f32) -> f32 {
    un(ScalarUn::Exp, x)
}
extern "C" fn fbc_log(x: f32) -> f32 {
    un(ScalarUn::Log, x)
}
extern "C" fn fbc_tanh(x: f32) -> f32 {
    un(ScalarUn::Tanh, x)
}
extern "C" fn fbc_erf(x: f32) -> f32 {
    un(ScalarUn::Erf, x)
}
extern "C" fn fbc_sigmoid(x: f32) -> f32 {
    un(ScalarUn::Sigmoid, x)
}
extern "C" fn fbc_round_f16(x: f32) -> f32 {
    round_f16(x)
}

/// The symbol of the `f16` rounding of stores into `f16` images.
const ROUND_F16: &str = "fbc_round_f16";

/// The functions, in [`Imports`] order.
const FUNCS: [(&str, ScalarUn); 5] = [
    ("fbc_exp", ScalarUn::Exp),
    ("fbc_log", ScalarUn::Log),
    ("fbc_tanh", ScalarUn::Tanh),
    ("fbc_erf", ScalarUn::Erf),
    ("fbc_sigmoid", ScalarUn::Sigmoid),
];

/// Symbol names and addresses to register with the JIT builder.
pub(super) fn symbols() -> [(&'static str, *const u8); 6] {
    [
        (ROUND_F16, fbc_round_f16 as extern "C" fn(f32) -> f32 as *const u8),
        ("fbc_exp", fbc_exp as extern "C" fn(f32) -> f32 as *const u8),
        ("fbc_log", fbc_log as extern "C" fn(f32) -> f32 as *const u8),
        ("fbc_tanh", fbc_tanh as extern "C" fn(f32) -> f32 as *const u8),
        ("fbc_erf", fbc_erf as extern "C" fn(f32) -> f32 as *const u8),
        ("fbc_sigmoid", fbc_sigmoid as extern "C" fn(f32) -> f32 as *const u8),
    ]
}

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

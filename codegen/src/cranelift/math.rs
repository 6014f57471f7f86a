//! The transcendental functions compiled kernels call: `exp log tanh erf sigmoid` on `f32`.
//!
//! Each is an `extern "C"` wrapper around [`apply_un`], the function the reference executor
//! evaluates payloads with, so the JIT computes bit-identical values (same libm, same formulas).
//! They are registered as symbols of the JIT module and imported into every kernel.

use cranelift_codegen::ir::{self, types, AbiParam, Signature};
use cranelift_jit::JITModule;
use cranelift_module::{FuncId, Linkage, Module, ModuleError};
use fbc_dialects::memory::scalar::apply_un;
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

/// The functions, in [`Imports`] order.
const FUNCS: [(&str, ScalarUn); 5] = [
    ("fbc_exp", ScalarUn::Exp),
    ("fbc_log", ScalarUn::Log),
    ("fbc_tanh", ScalarUn::Tanh),
    ("fbc_erf", ScalarUn::Erf),
    ("fbc_sigmoid", ScalarUn::Sigmoid),
];

/// Symbol names and addresses to register with the JIT builder.
pub(super) fn symbols() -> [(&'static str, *const u8); 5] {
    [
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
}

/// The functions imported into one function being built.
#[derive(Debug)]
pub(crate) struct FuncRefs {
    refs: Vec<(ScalarUn, ir::FuncRef)>,
}

impl FuncRefs {
    /// The callee for `op`, if it is one of the imported functions.
    pub(crate) fn get(&self, op: ScalarUn) -> Option<ir::FuncRef> {
        self.refs.iter().find(|(o, _)| *o == op).map(|(_, r)| *r)
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
        Ok(Imports { ids })
    }

    /// Imports every function into `func` (unused imports cost nothing).
    pub(super) fn in_func(&self, module: &mut JITModule, func: &mut ir::Function) -> FuncRefs {
        let refs =
            self.ids.iter().map(|&(op, id)| (op, module.declare_func_in_func(id, func))).collect();
        FuncRefs { refs }
    }
}

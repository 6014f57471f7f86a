//! The functions compiled kernels call: `exp log tanh erf sigmoid` on `f32`, and the rounding of
//! a value stored into an `f16` image.
//!
//! Each is an `extern "C"` wrapper around the function the reference executor uses
//! ([`apply_un`] for payloads, [`round_f16`] for stores into `f16` images), so both CPU back ends
//! compute bit-identical values (same libm, same formulas, same rounding). Each back end makes
//! them known to its generated code under these names ([`symbols`]).

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
pub(crate) const ROUND_F16: &str = "fbc_round_f16";

/// The functions, in [`Imports`] order.
pub(crate) const FUNCS: [(&str, ScalarUn); 5] = [
    ("fbc_exp", ScalarUn::Exp),
    ("fbc_log", ScalarUn::Log),
    ("fbc_tanh", ScalarUn::Tanh),
    ("fbc_erf", ScalarUn::Erf),
    ("fbc_sigmoid", ScalarUn::Sigmoid),
];

/// Symbol names and addresses to register with the JIT builder.
pub(crate) fn symbols() -> [(&'static str, *const u8); 6] {
    [
        (ROUND_F16, fbc_round_f16 as extern "C" fn(f32) -> f32 as *const u8),
        ("fbc_exp", fbc_exp as extern "C" fn(f32) -> f32 as *const u8),
        ("fbc_log", fbc_log as extern "C" fn(f32) -> f32 as *const u8),
        ("fbc_tanh", fbc_tanh as extern "C" fn(f32) -> f32 as *const u8),
        ("fbc_erf", fbc_erf as extern "C" fn(f32) -> f32 as *const u8),
        ("fbc_sigmoid", fbc_sigmoid as extern "C" fn(f32) -> f32 as *const u8),
    ]
}

//! Reference interpreter and device runtimes of fbc.
//!
//! [`reference`](mod@reference) holds the numeric reference kernels — one straightforward CPU
//! implementation of every tensor-dialect op and of the backward helpers autodiff uses — that
//! serve as the golden oracle for every other backend. [`interp`] executes functions of IR
//! modules with those kernels (in f32 or f64), makes deterministic random inputs, and checks that
//! two versions of a function compute the same results ([`interp::check_equivalent`]). With the
//! `opencl` feature, `opencl` runs the kernels `fbc-codegen` writes on an OpenCL device; with the
//! `jit` feature, `jit` runs lowered modules with native code from the Cranelift back end.

pub mod interp;
#[cfg(feature = "jit")]
pub mod jit;
pub mod limits;
pub mod memory;
#[cfg(feature = "opencl")]
pub mod opencl;
pub mod reference;

pub use interp::{
    check_equivalent, random_inputs, InterpError, Interpreter, Mode, Options, Tolerance, Value,
};

/// The default cache directory: `$FBC_CACHE_DIR`, else `$XDG_CACHE_HOME/fbc`, else
/// `~/.cache/fbc`; `None` when none of them is set.
pub fn cache_dir() -> Option<std::path::PathBuf> {
    let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(std::path::PathBuf::from);
    env("FBC_CACHE_DIR")
        .or_else(|| env("XDG_CACHE_HOME").map(|d| d.join("fbc")))
        .or_else(|| env("HOME").map(|d| d.join(".cache").join("fbc")))
}

//! Reference interpreter and device runtimes of fbc.
//!
//! - [`reference`](mod@reference): the numeric reference kernels — one straightforward CPU
//!   implementation of every tensor-dialect op and of the backward helpers autodiff uses — the
//!   golden oracle of every other back end;
//! - [`exec`]: the memory dialect's reference executor: host packing of tensors into storage by
//!   layout, the meaning of one launch, and the [`exec::Launcher`] trait;
//! - [`interp`]: executes functions of IR modules (in f32 or f64), memory ops included, makes
//!   deterministic random inputs, and checks that two versions of a function compute the same
//!   results ([`interp::check_equivalent`]);
//! - [`device`]: running on a device: `device::opencl` (feature `opencl`) runs the kernels
//!   `fbc-codegen` writes on an OpenCL device; `device::cpu_jit` (feature `jit`) runs lowered
//!   modules with native code from the Cranelift back end;
//! - [`limits`]: the memory limit every run is checked against before it allocates;
//! - [`weights`]: tiled, checksummed weight files (`.fbw`, `fbc pack`), f32/f16/INT8/INT4, and
//!   their validating reader.

pub mod device;
pub mod exec;
pub mod interp;
pub mod limits;
pub mod reference;
pub mod weights;

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

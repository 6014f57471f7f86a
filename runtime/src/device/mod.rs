//! Running lowered modules on a device: an OpenCL device (`opencl`, feature `opencl`) or this
//! CPU through the Cranelift JIT (`cpu_jit`, feature `jit`). Both take what `fbc-codegen`
//! generates and the storage the reference executor ([`crate::exec`]) defines.

#[cfg(feature = "jit")]
pub mod cpu_jit;
#[cfg(feature = "opencl")]
pub mod opencl;

/// The device timeline of a streamed run split by what was running: from the first launch or
/// transfer to the end of the last, `transfer_ns` with a transfer under way (hidden or not),
/// `alone_ns` with launches and no transfer, `idle_ns` with neither. Their sum is `wall_ns`,
/// and `wall_ns / max(compute, transfers)` is what the overlap goal bounds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct TimeSplit {
    pub wall_ns: u64,
    pub transfer_ns: u64,
    pub alone_ns: u64,
    pub idle_ns: u64,
    /// Time with at least one launch executing.
    pub compute_ns: u64,
}

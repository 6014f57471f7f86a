//! Running lowered modules on a device: an OpenCL device (`opencl`, feature `opencl`) or this
//! CPU through the Cranelift JIT (`cpu_jit`, feature `jit`). Both take what `fbc-codegen`
//! generates and the storage the reference executor ([`crate::exec`]) defines.

#[cfg(feature = "jit")]
pub mod cpu_jit;
#[cfg(feature = "opencl")]
pub mod opencl;

//! The `memory` dialect: storage (buffers and image2d textures), its allocation, host copies, and
//! kernel launches with explicit index computation.
//!
//! This is the level below the tensor and layout dialects: `lower-to-memory` turns every tensor
//! op (or fused group of them) into one [`Kernel`] launch that reads and writes storage through
//! index maps, and `plan-memory` gives the allocations slots. Back ends (the OpenCL C writer, the
//! Cranelift JIT) and the reference executor all consume the same [`Kernel`] view of a
//! `memory.launch` op, so they cannot disagree on what a launch means.
//!
//! # Types
//!
//! - `!memory.buffer<N, T>`: `N` elements of `T` (`f32` or `i32`), linear.
//! - `!memory.image2d<[W, H], f32>`: an OpenCL `image2d_t` of `W × H` RGBA texels of `f32`, i.e.
//!   `4·W·H` elements; element `(x, y, c)` is channel `c` of texel `(x, y)`.
//! - `!memory.image2d<[W, H], f16>`: the same with `f16` texels (`CL_HALF_FLOAT`, 2 bytes an
//!   element). Kernels still read and compute `f32`; every value stored into it (an upload, a
//!   launch's output) is rounded to the nearest `f16`, ties to even (`scalar::round_f16`);
//!   values beyond `f16`'s range become `±inf`. `lower-to-memory{half-images=true}` makes them.
//!
//! # Ops
//!
//! | op | meaning |
//! |---|---|
//! | `%m = memory.alloc {slot = S}` | new storage of the result type (`slot`: set by `plan-memory`) |
//! | `memory.dealloc %m` | end of `%m`'s lifetime |
//! | `%m = memory.upload %t {layout = L, slot = S}` | host → device: tensor `%t` placed in storage by layout `L`, padding zero (`slot`: set by `plan-memory`) |
//! | `%t = memory.download %m {layout = L}` | device → host: the tensor stored in `%m` by layout `L` |
//! | `memory.launch %in..., %out {kernel = "name", domain, iterators, maps, body, ...}` | one kernel: see [`Kernel`] |
//!
//! Memory ops have side effects (a launch writes its last operand); their order in the function
//! is the schedule.

pub mod attention;
pub mod bounds;
pub mod init;
pub mod kernel;
pub mod ops;
pub mod scalar;

pub use attention::{Attention, Parts};
pub use bounds::{AccessKind, Bound, LaunchBounds, Violation};
pub use kernel::{
    Combine, Guard, Iter, Kernel, KernelError, MemType, Scalar, ScalarBin, ScalarUn, Stat,
    StorageKind, Symbol,
};
pub use ops::{check_storage, default_storage};
pub use scalar::{ScalarEnv, ScalarError, ScalarKind, ScalarValue};

use fbc_ir::{OpDef, OpRegistry};

/// Every memory op.
pub fn ops() -> impl Iterator<Item = &'static OpDef> {
    ops::OPS.iter()
}

/// Registers every memory op in `registry`, and the check of `!memory.*` types (a function
/// argument `!memory.image2d<[2^62, 4], f32>` is refused as `memory.alloc` refuses it).
pub fn register(registry: &mut OpRegistry) {
    registry.register_all(ops::OPS);
    registry.register_type_check("memory", |t| MemType::parse_type(t).map(|_| ()));
}

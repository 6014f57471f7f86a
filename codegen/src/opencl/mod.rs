//! The OpenCL C back end: one `.cl` source per lowered module and a JSON launch manifest.
//!
//! [`Writer`] takes a module after `lower-to-memory` (and `plan-memory`) and writes one kernel per
//! `memory.launch` ([`kernel`]: the plain form, and a tiled, register-blocked form for
//! contractions) plus the [`Manifest`] that `fbc-runtime`'s OpenCL runtime executes: storage
//! (buffers and `image2d` textures), uploads with their layout, launches, downloads. Maps are C
//! integer arithmetic; images are read through one nearest, unnormalised sampler.

mod chain;
mod dedup;
mod flat_merge;
pub mod kernel;
pub mod manifest;
mod tail;
pub mod tuning;
mod writer;

pub use kernel::{Emitted, KernelOptions, FAULT_DIMS, FAULT_INTS};
pub use manifest::{
    ArgUpload, ConstantDesc, Dtype, FunctionManifest, Launch, LaunchPart, LayoutDesc, Manifest,
    Step, StorageDesc, StorageKind, TensorDesc, MANIFEST_VERSION,
};
pub use tuning::{shape_key, DeviceTuning, Tuned, TuningDb, TUNING_VERSION};
pub use writer::{substitute_kernel, Error, Options, Output, Writer};

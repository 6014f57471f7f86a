//! The OpenCL C back end: one `.cl` source per module and a JSON launch manifest.
//!
//! Storage is linear, row-major `__global float` buffers, one per tensor value; `tensor.reshape`,
//! `layout.assign` and `layout.convert` are aliases of their operand's buffer (the data is already
//! where the result wants it in a linear layout), every other supported op is one kernel launch.
//! R-Tile texture storage (`image2d`) is not generated yet: a `layout.assign` to an R-Tile is read
//! as its linear operand, which is value-correct because the layout ops have value semantics.

mod writer;

pub use writer::{
    BufferDesc, Error, FunctionManifest, Launch, Manifest, Options, Output, Writer,
    MANIFEST_VERSION,
};

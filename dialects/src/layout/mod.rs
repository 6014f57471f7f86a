//! The `layout` dialect: where tensors live physically, and the ops that say so.
//!
//! - Attributes ([`attr`]): `#layout.linear` (row-major) and `#layout.rtile<...>` (FBLayout's
//!   R-Tile, Sec. 4.2), read and written through [`Layout`] and [`RTile`], validated with
//!   messages that name the parameter at fault, and mapped to texels by [`Layout::texel_of`].
//! - Ops ([`ops`]): `layout.assign` (annotation, no data movement), `layout.convert` (an
//!   explicit conversion) and `layout.remap` (a zero-copy view through an index map).
//! - [`remap_source_index`]: the index map evaluation `layout.remap` needs at run time.
//!
//! All three ops have value semantics on logical tensors, so a reference interpreter runs them
//! without knowing any physical layout: `assign` and `convert` return their operand, `remap`
//! gathers `y[i] = x[map(i)]`.

pub mod attr;
pub mod map;
pub mod ops;

pub use attr::{Intra, Layout, LayoutError, Matrix, Pack, RTile, Storage, Texel};
pub use map::{eval_map, remap_source_index, MapEval};

use fbc_ir::{OpDef, OpRegistry};

/// Every layout op.
pub fn ops() -> impl Iterator<Item = &'static OpDef> {
    ops::OPS.iter()
}

/// Registers every layout op in `registry`.
pub fn register(registry: &mut OpRegistry) {
    registry.register_all(ops::OPS);
}

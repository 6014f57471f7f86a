//! `fbc viz`: pictures of what the layout passes did.
//!
//! - [`placement`]: how one tensor's elements land in image2d texels under a layout (Fig. 10 of
//!   the FBLayout paper), with the texture-cache blocks of Eq. 1 — a standalone SVG;
//! - [`graph`]: a function's graph after the pipeline, laid out in layers (Sugiyama) on
//!   petgraph, edges coloured by layout, conversions, remaps and fallbacks highlighted;
//! - [`html`]: one self-contained page with both and, per tensor, the Eq. 2 scores of the
//!   layouts `rtile-select` weighed and a remap's index map before and after simplification.
//!
//! Everything is deterministic text (snapshot-tested); nothing is fetched from the network.

pub mod graph;
pub mod html;
pub mod placement;
pub mod svg;

pub use html::{page_html, Page};
pub use placement::{placement_svg, Placement};

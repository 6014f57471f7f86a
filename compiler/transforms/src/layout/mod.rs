//! The FBLayout passes (paper Sec. 4): `fb-classify` (Sec. 4.1), `rtile-candidates` (Sec. 4.2,
//! Alg. 1) and `rtile-select` (Eq. 2), with the analytic performance model they share
//! ([`perf_model`]). `tile-propagate`, `index-elim` and `global-layout` build on what these
//! passes leave in the IR.
//!
//! # The contract the later passes rely on
//!
//! After `fb-classify`:
//! - every op with a class has `fbc.class = "FTI-C" | "FTD-C" | "FTI-D" | "FTD-D"`, refined for
//!   this graph ([`analysis::classify`]);
//! - an op producing a tensor that two reductions reduce along different axes has `fbc.conflict`;
//!   a function lists such arguments in `fbc.conflict_args = [i, ...]`.
//!
//! After `rtile-candidates`: each *R-Tile tensor* (a float tensor of rank ≥ 2 read or written by
//! an FTD-D op) has its candidates, complete `#layout.rtile` attributes in `(tile_h, tile_w)`
//! order, in `fbc.rtile_candidates` on its producer (`fbc.rtile_candidates.N` for result `N`)
//! or `fbc.rtile_candidates.argN` on its function — global layout selection's greedy search over
//! FTD-D chains (Sec. 4.4.2) draws from these.
//!
//! After `rtile-select`: a tensor `%t` whose unified R-Tile beats the linear layout is read only
//! through `%t_rt = layout.assign %t {layout = #layout.rtile<...>}`, placed right after `%t`'s
//! definition; its `layout` is complete (padding and image extent filled in, valid for `%t`'s
//! type) and carries `fbc.rtile_score` / `fbc.linear_score` (the model's Eq. 2 sums, GFLOP/s).
//! The layout of any other tensor is `#layout.linear`. So the layout of a value is: the `layout`
//! of the `layout.assign` that defines it, or linear. Tile propagation starts from these assigns
//! (the FTD-D anchors of Table 2) and follows their users through FTI-D ops; `layout.remap` and
//! `layout.convert` are what it and `index-elim` insert.

pub mod analysis;
pub mod candidates;
pub mod classify;
pub mod conv_model;
pub mod perf_model;
pub mod rtile;

pub use analysis::classification_table;

use fbc_ir::pass::{OptionKind, OptionSpec, PassInfo, PassRegistry};

use crate::target::TargetOption;

/// Registers the FBLayout passes.
pub fn register(registry: &mut PassRegistry) {
    registry.register(PassInfo::new(
        classify::NAME,
        "tag ops with their FBLayout class (FTI-C/FTD-C/FTI-D/FTD-D) and mark reduction-axis conflicts",
        vec![OptionSpec::new(
            "print",
            OptionKind::Bool,
            Some("false"),
            "write the classification table to stderr",
        )],
        |o| Ok(Box::new(classify::FbClassify { print: o.bool("print") })),
    ));
    registry.register(PassInfo::new(
        rtile::CANDIDATES,
        "generate R-Tile shape candidates for tensors of FTD-D ops (Alg. 1: C1, C2, C3)",
        vec![
            TargetOption::spec(""),
            OptionSpec::new(
                "max-padding",
                OptionKind::Float,
                Some("0.1"),
                "C3: largest padding ratio kept",
            ),
        ],
        |o| {
            let max_padding = o.float("max-padding").unwrap_or(candidates::DEFAULT_MAX_PADDING);
            if !(max_padding.is_finite() && max_padding >= 0.0) {
                return Err(format!(
                    "max-padding must be a finite number ≥ 0, found {max_padding}"
                ));
            }
            Ok(Box::new(rtile::RTileCandidates {
                target: TargetOption::from_options(o)?,
                max_padding,
            }))
        },
    ));
    registry.register(PassInfo::new(
        rtile::SELECT,
        "choose one unified R-Tile per tensor by the analytic model (Eq. 2) and annotate it with layout.assign",
        vec![
            TargetOption::spec(""),
            OptionSpec::new("print", OptionKind::Bool, Some("false"), "write every tensor's scores to stderr"),
            OptionSpec::new(
                "linear",
                OptionKind::Bool,
                Some("true"),
                "let the linear layout win (false: every tensor with a candidate gets its best R-Tile)",
            ),
        ],
        |o| {
            Ok(Box::new(rtile::RTileSelect {
                target: TargetOption::from_options(o)?,
                print: o.bool("print"),
                linear: o.bool("linear"),
            }))
        },
    ));
}

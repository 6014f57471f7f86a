//! fbc's passes: the generic cleanups (`canonicalize`, `cse`, `dce`) and, as they land, the
//! FBLayout passes. [`register_passes`] adds all of them to a registry; [`pipeline_for_level`]
//! gives the `-O0`..`-O3` presets.

pub mod autodiff;
pub mod canonicalize;
pub mod cse;
pub mod dce;
pub mod fuse_attention;
pub mod global_layout;
pub mod index_elim;
pub mod layout;
pub mod lower;
pub mod plan_memory;
pub mod split_weight_rows;
pub mod target;
pub mod weight_streaming;

use fbc_ir::pass::{PassInfo, PassRegistry};

/// Registers every built-in pass.
pub fn register_passes(r: &mut PassRegistry) {
    r.register(PassInfo::new(
        "canonicalize",
        "fold constants, drop identity reshapes/transposes, compose transpose and reshape chains",
        vec![],
        |_| Ok(Box::new(canonicalize::Canonicalize)),
    ));
    r.register(PassInfo::new("cse", "merge identical pure ops", vec![], |_| {
        Ok(Box::new(cse::Cse))
    }));
    r.register(PassInfo::new("dce", "remove pure ops whose results are unused", vec![], |_| {
        Ok(Box::new(dce::Dce))
    }));
    r.register(PassInfo::new(
        "fuse-attention",
        "RoPE, QKᵀ, scale, soft cap, causal mask, softmax and PV as one tensor.attention",
        vec![fbc_ir::pass::OptionSpec::new(
            "max-queries",
            fbc_ir::pass::OptionKind::Int,
            Some("0"),
            "fuse attention of at most this many queries per head (0: at most 16, and causal attention of any length where the profile's [attention] fuse_prompts is on)",
        )],
        |o| {
            let max_queries = match o.int("max-queries").unwrap_or(0) {
                0 => None,
                n => Some(
                    u64::try_from(n)
                        .map_err(|_| format!("max-queries must not be negative, got {n}"))?,
                ),
            };
            Ok(Box::new(fuse_attention::FuseAttention { max_queries }))
        },
    ));
    autodiff::register(r);
    index_elim::register(r);
    layout::register(r);
    global_layout::register(r);
    lower::register(r);
    plan_memory::register(r);
    split_weight_rows::register(r);
    weight_streaming::register(r);
}

/// The options of `lower-to-memory` a driver sets (the hardware profile is not one of them: the
/// pipeline runs with it in [`fbc_ir::PassContext::target`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoweringOptions {
    /// Every image2d texture stored as `f16` (`half-images=true`).
    pub half_images: bool,
    /// When contractions split their reduction (`split-k=auto|off|N`).
    pub split_k: lower::SplitK,
    /// Arguments uploaded and results downloaded as row-major buffers, kernels placing them in
    /// their layouts (`linear-io=true`).
    pub linear_io: bool,
}

impl Default for LoweringOptions {
    fn default() -> LoweringOptions {
        LoweringOptions { half_images: false, split_k: lower::SplitK::Auto, linear_io: false }
    }
}

/// The pipeline that lowers an optimised module to the memory dialect with `opts`, for the
/// profile the pipeline runs with: `lower-to-memory,plan-memory`, with the options that are not
/// at their defaults (`lower-to-memory{half-images=true split-k=8 linear-io=true},plan-memory`).
pub fn lowering_pipeline(opts: LoweringOptions) -> String {
    let mut o = Vec::new();
    if opts.half_images {
        o.push("half-images=true".to_string());
    }
    if opts.split_k != lower::SplitK::Auto {
        o.push(format!("split-k={}", opts.split_k));
    }
    if opts.linear_io {
        o.push("linear-io=true".to_string());
    }
    if o.is_empty() {
        "lower-to-memory,plan-memory".into()
    } else {
        format!("lower-to-memory{{{}}},plan-memory", o.join(" "))
    }
}

/// A registry with every built-in pass.
pub fn default_registry() -> PassRegistry {
    let mut r = PassRegistry::new();
    register_passes(&mut r);
    r
}

/// The `-O0` pipeline: the `convert` baseline (TFLite-style, Sec. 2.3) and nothing else. Every
/// tensor an FTD-D op reads gets its best R-Tile (`rtile-select`), every kernel writes linear, and
/// each R-Tile reader gets an explicit `layout.convert`; no cleanup, no index elimination.
pub const O0_PIPELINE: &str =
    "fb-classify,rtile-candidates,rtile-select,global-layout{strategy=convert}";

/// The pipeline of an optimisation level (`-O0` .. `-O3`): `-O0` is [`O0_PIPELINE`], `-O1` and
/// `-O2` clean up without touching layouts, `-O3` runs the FBLayout passes.
pub fn pipeline_for_level(level: u8) -> &'static str {
    match level {
        0 => O0_PIPELINE,
        1 => "canonicalize,dce",
        2 => "canonicalize,cse,fuse-attention,dce",
        _ => {
            "canonicalize,cse,fuse-attention,dce,fb-classify,rtile-candidates,rtile-select,tile-propagate,\
              index-elim,index-simplify,global-layout,dce"
        }
    }
}

/// `pipeline` (comma-separated, each entry `name` or `name{options}`) without the entries whose
/// pass is named in `names`.
pub fn without_passes(pipeline: &str, names: &[String]) -> String {
    let (mut entries, mut cur, mut depth) = (Vec::new(), String::new(), 0usize);
    for c in pipeline.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                entries.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    entries.push(cur);
    entries
        .into_iter()
        .filter(|e| {
            let name = e.split('{').next().unwrap_or("").trim();
            !names.iter().any(|n| n == name)
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// The pipeline of an optimisation level with a layout strategy, which applies at `-O3`:
/// `fblayout` is [`pipeline_for_level`]; the baselines (`reuse`, `convert`, Sec. 2.3) select
/// R-Tiles but keep reshapes and transposes as physical kernels (no index elimination). Lower
/// levels ignore the strategy: `-O0` is always the `convert` baseline without cleanups, `-O1` and
/// `-O2` run no layout pass.
pub fn pipeline(level: u8, strategy: global_layout::Strategy) -> String {
    match (level, strategy) {
        (0..=2, _) | (_, global_layout::Strategy::FbLayout) => pipeline_for_level(level).to_string(),
        (_, s) => format!(
            "canonicalize,cse,fuse-attention,dce,fb-classify,rtile-candidates,rtile-select,global-layout{{strategy={}}},dce",
            s.name()
        ),
    }
}

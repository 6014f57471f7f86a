//! fbc's passes: the generic cleanups (`canonicalize`, `cse`, `dce`) and, as they land, the
//! FBLayout passes. [`register_passes`] adds all of them to a registry; [`pipeline_for_level`]
//! gives the `-O0`..`-O3` presets.

pub mod autodiff;
pub mod canonicalize;
pub mod cse;
pub mod dce;
pub mod global_layout;
pub mod index_elim;
pub mod layout;

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
    autodiff::register(r);
    index_elim::register(r);
    layout::register(r);
    global_layout::register(r);
}

/// A registry with every built-in pass.
pub fn default_registry() -> PassRegistry {
    let mut r = PassRegistry::new();
    register_passes(&mut r);
    r
}

/// The pipeline of an optimisation level (`-O0` .. `-O3`) with the FBLayout strategy.
pub fn pipeline_for_level(level: u8) -> &'static str {
    match level {
        0 => "",
        1 => "canonicalize,dce",
        2 => "canonicalize,cse,dce",
        _ => {
            "canonicalize,cse,dce,fb-classify,rtile-candidates,rtile-select,tile-propagate,\
              index-elim,index-simplify,global-layout,dce"
        }
    }
}

/// The pipeline of an optimisation level with a layout strategy: `fblayout` is
/// [`pipeline_for_level`]; the baselines (`reuse`, `convert`, Sec. 2.3) select R-Tiles but keep
/// reshapes and transposes as physical kernels (no index elimination). Levels below 3 run no
/// layout pass, whatever the strategy.
pub fn pipeline(level: u8, strategy: global_layout::Strategy) -> String {
    match (level, strategy) {
        (0..=2, _) | (_, global_layout::Strategy::FbLayout) => pipeline_for_level(level).to_string(),
        (_, s) => format!(
            "canonicalize,cse,dce,fb-classify,rtile-candidates,rtile-select,global-layout{{strategy={}}},dce",
            s.name()
        ),
    }
}

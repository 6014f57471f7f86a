//! fbc's passes: the generic cleanups (`canonicalize`, `cse`, `dce`) and, as they land, the
//! FBLayout passes. [`register_passes`] adds all of them to a registry; [`pipeline_for_level`]
//! gives the `-O0`..`-O3` presets.

pub mod autodiff;
pub mod canonicalize;
pub mod cse;
pub mod dce;
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
}

/// A registry with every built-in pass.
pub fn default_registry() -> PassRegistry {
    let mut r = PassRegistry::new();
    register_passes(&mut r);
    r
}

/// The pipeline of an optimisation level (`-O0` .. `-O3`).
pub fn pipeline_for_level(level: u8) -> &'static str {
    match level {
        0 => "",
        1 => "canonicalize,dce",
        2 => "canonicalize,cse,dce",
        _ => "canonicalize,cse,dce,fb-classify,rtile-candidates,rtile-select,tile-propagate,\
              index-elim,index-simplify,dce",
    }
}

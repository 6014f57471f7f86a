//! `--emit opencl -o DIR`: writes `DIR/NAME.cl` and `DIR/NAME.manifest.json`.
//!
//! `NAME` is the module's name (`module @NAME`), else the input file's stem. The directory is
//! written atomically: both files go to a fresh sibling directory that is renamed to `DIR` at the
//! end, so a failed compile leaves no half-written output. An existing `DIR` is replaced only if it
//! is empty or holds a previous fbc manifest; any other directory (or a file) is refused.

use std::path::{Path, PathBuf};

use fbc_codegen::opencl::{Options, Output, Writer};
use fbc_ir::Module;

use crate::Failure;

/// Lowers `module` to OpenCL C; an unsupported op is a usage error (exit 2) naming it.
pub(crate) fn generate(module: &Module) -> Result<Output, Failure> {
    Writer::new(Options::default()).write(module).map_err(|e| Failure::Usage(e.to_string()))
}

/// The base name of the output files.
pub(crate) fn stem(module: &Module, input: &Path) -> String {
    let raw = module.name.clone().unwrap_or_else(|| {
        input.file_stem().map_or("module".into(), |s| s.to_string_lossy().into_owned())
    });
    let clean: String = raw
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' })
        .collect();
    if clean.is_empty() || clean == "-" {
        "module".into()
    } else {
        clean
    }
}

pub(crate) fn write(module: &Module, input: &Path, dir: &Path) -> Result<(), Failure> {
    let out = generate(module)?;
    let name = stem(module, input);
    let io = |what: &str, p: &Path, e: std::io::Error| {
        Failure::Usage(format!("cannot {what} {}: {e}", p.display()))
    };
    if dir.exists() {
        let ok = dir.is_dir()
            && std::fs::read_dir(dir).map_err(|e| io("read", dir, e))?.all(|e| {
                e.ok().is_some_and(|e| {
                    let n = e.file_name().to_string_lossy().into_owned();
                    n.ends_with(".cl") || n.ends_with(".manifest.json")
                })
            });
        if !ok {
            return Err(Failure::Usage(format!(
                "{} exists and is not an fbc OpenCL output directory; not overwriting it",
                dir.display()
            )));
        }
    }
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let base = dir.file_name().map_or("out".into(), |n| n.to_string_lossy().into_owned());
    let tmp = parent.join(format!(".{base}.fbc-tmp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).map_err(|e| io("create", &tmp, e))?;
    let result = (|| {
        let cl = tmp.join(format!("{name}.cl"));
        std::fs::write(&cl, &out.source).map_err(|e| io("write", &cl, e))?;
        let mf = tmp.join(format!("{name}.manifest.json"));
        std::fs::write(&mf, out.manifest.to_json()).map_err(|e| io("write", &mf, e))?;
        if dir.exists() {
            std::fs::remove_dir_all(dir).map_err(|e| io("replace", dir, e))?;
        }
        std::fs::rename(&tmp, dir).map_err(|e| io("create", dir, e))
    })();
    if result.is_err() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    result
}

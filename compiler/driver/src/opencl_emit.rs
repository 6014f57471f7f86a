//! OpenCL output files: writing what [`crate::Session::emit_opencl`] generates as
//! `DIR/NAME.cl` + `DIR/NAME.manifest.json` (`--emit opencl`) or one `.cl` per kernel
//! (`--dump-kernels DIR`).
//!
//! `NAME` is the module's name (`module @NAME`), else the input file's stem. A directory is
//! written atomically: the files go to a fresh sibling directory that is renamed to `DIR` at the
//! end, so a failed compile leaves no half-written output. An existing `DIR` is replaced only if it
//! holds nothing but `.cl` and `.manifest.json` files (a previous fbc output); any other directory
//! (or a file) is refused.

use std::path::{Path, PathBuf};

use fbc_codegen::opencl::Output;
use fbc_ir::Module;

use crate::Failure;

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

/// The directory `--emit opencl` writes without `-o`: `NAME.opencl` in the current directory.
pub(crate) fn default_dir(module: &Module, input: &Path) -> PathBuf {
    PathBuf::from(format!("{}.opencl", stem(module, input)))
}

/// `--emit opencl`: `DIR/NAME.cl` and `DIR/NAME.manifest.json`.
pub(crate) fn write(
    out: &Output,
    module: &Module,
    input: &Path,
    dir: &Path,
) -> Result<(), Failure> {
    write_dir(dir, &whole(out, &stem(module, input)))
}

/// The whole source and the manifest as files `NAME.cl` and `NAME.manifest.json`.
fn whole(out: &Output, name: &str) -> Vec<(String, String)> {
    vec![
        (format!("{name}.cl"), out.source.clone()),
        (format!("{name}.manifest.json"), out.manifest.to_json()),
    ]
}

/// `--dump-kernels DIR`: `DIR/KERNEL.cl` per kernel (prelude included, so each compiles alone)
/// and `DIR/NAME.cl`, the whole source, plus the manifest.
#[cfg_attr(not(feature = "opencl"), allow(dead_code))]
pub(crate) fn dump_kernels(
    out: &Output,
    module: &Module,
    input: &Path,
    dir: &Path,
) -> Result<(), Failure> {
    let mut files = whole(out, &stem(module, input));
    for (k, text) in &out.kernels {
        files.push((format!("{k}.cl"), format!("{}\n{text}", out.header)));
    }
    write_dir(dir, &files)
}

fn write_dir(dir: &Path, files: &[(String, String)]) -> Result<(), Failure> {
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
    crate::output::pending(&tmp);
    if let Err(e) = std::fs::create_dir_all(&tmp) {
        crate::output::done(&tmp);
        return Err(io("create", &tmp, e));
    }
    let result = (|| {
        for (n, text) in files {
            let p = tmp.join(n);
            std::fs::write(&p, text).map_err(|e| io("write", &p, e))?;
        }
        if dir.exists() {
            std::fs::remove_dir_all(dir).map_err(|e| io("replace", dir, e))?;
        }
        std::fs::rename(&tmp, dir).map_err(|e| io("create", dir, e))
    })();
    if result.is_err() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    crate::output::done(&tmp);
    result
}

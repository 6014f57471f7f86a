//! OpenCL output files: writing what [`crate::Session::emit_opencl`] generates as
//! `DIR/NAME.cl` + `DIR/NAME.manifest.json` (+ `DIR/NAME.constants.safetensors` when a function
//! uploads dense constants) (`--emit opencl`) or one `.cl` per kernel (`--dump-kernels DIR`).
//!
//! `NAME` is the module's name (`module @NAME`), else the input file's stem. A directory is
//! written atomically: the files go to a fresh sibling directory that is renamed to `DIR` at the
//! end, so a failed compile leaves no half-written output. An existing `DIR` is replaced only if it
//! holds nothing but `.cl`, `.manifest.json` and `.constants.safetensors` files (a previous fbc
//! output); any other directory
//! (or a file) is refused.

use std::path::{Path, PathBuf};

use fbc_codegen::opencl::{Dtype, Output};
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
    write_dir(dir, &whole(out, &stem(module, input))?, OPENCL_FILES)
}

/// The whole source and the manifest as files `NAME.cl` and `NAME.manifest.json`, and the dense
/// constants the functions upload as `NAME.constants.safetensors` (tensor `FUNCTION/CONSTANT`),
/// where there are any.
fn whole(out: &Output, name: &str) -> Result<Vec<(String, Vec<u8>)>, Failure> {
    let mut files = vec![
        (format!("{name}.cl"), out.source.clone().into_bytes()),
        (format!("{name}.manifest.json"), out.manifest.to_json().into_bytes()),
    ];
    let tensors: Vec<_> = out
        .manifest
        .functions
        .iter()
        .flat_map(|f| {
            f.constants.iter().map(move |c| {
                let dtype = match c.dtype {
                    Dtype::I32 => safetensors::Dtype::I32,
                    Dtype::I8 => safetensors::Dtype::I8,
                    Dtype::F32 | Dtype::F16 => safetensors::Dtype::F32,
                };
                let shape = c.shape.iter().map(|&d| d as usize).collect();
                (format!("{}/{}", f.name, c.name), dtype, shape, c.data.to_vec())
            })
        })
        .collect();
    if !tensors.is_empty() {
        let bytes = crate::run_cmd::io::serialize(&tensors, None).map_err(Failure::Usage)?;
        files.push((format!("{name}.{CONSTANTS}"), bytes));
    }
    Ok(files)
}

/// The suffix of the constants file.
const CONSTANTS: &str = "constants.safetensors";

/// `--dump-kernels DIR`: `DIR/KERNEL.cl` per kernel (prelude included, so each compiles alone)
/// and `DIR/NAME.cl`, the whole source, plus the manifest.
#[cfg_attr(not(feature = "opencl"), allow(dead_code))]
pub(crate) fn dump_kernels(
    out: &Output,
    module: &Module,
    input: &Path,
    dir: &Path,
) -> Result<(), Failure> {
    let mut files = whole(out, &stem(module, input))?;
    for (k, text) in &out.kernels {
        files.push((format!("{k}.cl"), format!("{}\n{text}", out.header).into_bytes()));
    }
    write_dir(dir, &files, OPENCL_FILES)
}

/// What an output directory holds, in errors, and the suffixes of its files.
pub(crate) type DirKind = (&'static str, &'static [&'static str]);

/// The files of `--emit opencl` and `--dump-kernels`.
const OPENCL_FILES: DirKind = ("OpenCL", &[".cl", ".manifest.json", CONSTANTS]);

/// The files of `--emit obj|asm|llvm`.
#[cfg_attr(not(feature = "llvm"), allow(dead_code))]
pub(crate) const NATIVE_FILES: DirKind = ("native code", &[".o", ".s", ".ll", ".h"]);

/// Writes `files` into `dir` atomically; an existing `dir` is replaced only when every file in it
/// has one of the suffixes of `kind` (an earlier output of the same kind).
pub(crate) fn write_dir(
    dir: &Path,
    files: &[(String, Vec<u8>)],
    (kind, ours): DirKind,
) -> Result<(), Failure> {
    let io = |what: &str, p: &Path, e: std::io::Error| {
        Failure::Usage(format!("cannot {what} {}: {e}", p.display()))
    };
    if dir.exists() {
        let ok = dir.is_dir()
            && std::fs::read_dir(dir).map_err(|e| io("read", dir, e))?.all(|e| {
                e.ok().is_some_and(|e| {
                    let n = e.file_name().to_string_lossy().into_owned();
                    ours.iter().any(|suffix| n.ends_with(suffix))
                })
            });
        if !ok {
            return Err(Failure::Usage(format!(
                "{} exists and is not an fbc {kind} output directory; not overwriting it",
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

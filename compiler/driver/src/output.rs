//! Writing outputs so that a failed command leaves nothing behind.
//!
//! A file output is written to a temporary sibling and renamed over the destination only once it
//! is complete; a rename within one directory is atomic on POSIX file systems. Temporaries are
//! registered while they exist, so that the driver's panic safety net can remove them
//! ([`remove_pending`]): not even an internal error leaves a partial output behind.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::Failure;

/// Temporary files and directories being written, not yet renamed into place.
static PENDING: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Registers a temporary output until [`done`] (or [`remove_pending`]).
pub(crate) fn pending(tmp: &Path) {
    PENDING.lock().unwrap_or_else(|p| p.into_inner()).push(tmp.to_path_buf());
}

/// The temporary `tmp` was renamed into place or removed.
pub(crate) fn done(tmp: &Path) {
    PENDING.lock().unwrap_or_else(|p| p.into_inner()).retain(|p| p != tmp);
}

/// Removes every temporary output still being written (after a panic).
pub(crate) fn remove_pending() {
    let list = std::mem::take(&mut *PENDING.lock().unwrap_or_else(|p| p.into_inner()));
    for p in list {
        if p.is_dir() {
            let _ = std::fs::remove_dir_all(&p);
        } else {
            let _ = std::fs::remove_file(&p);
        }
    }
}

/// Writes `text` to `path`, or to standard output when `path` is `None` or `-`.
pub(crate) fn write_text(path: Option<&Path>, text: &str) -> Result<(), Failure> {
    match path {
        None => write_stdout(text),
        Some(p) if p.as_os_str() == "-" => write_stdout(text),
        Some(p) => write_atomic(p, text.as_bytes()),
    }
}

fn write_stdout(text: &str) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        // A closed pipe (`fbc ... | head`) is the reader's choice, not an error.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(Failure::Usage(format!("cannot write to standard output: {e}"))),
    }
}

/// Writes `path` through `write` on a temporary sibling file, renamed into place only when
/// `write` succeeds (removed otherwise): for outputs streamed rather than held in memory.
pub(crate) fn write_atomic_with(
    path: &Path,
    write: impl FnOnce(&mut std::fs::File) -> std::io::Result<()>,
) -> Result<(), Failure> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let file_name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{file_name}.fbc-tmp-{}", std::process::id()));
    pending(&tmp);
    let result = std::fs::File::create(&tmp)
        .and_then(|mut f| write(&mut f))
        .and_then(|()| std::fs::rename(&tmp, path));
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    done(&tmp);
    result.map_err(|e| Failure::Usage(format!("cannot write {}: {e}", path.display())))
}

/// Writes bytes to `path` through a temporary file and a rename.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), Failure> {
    write_atomic_with(path, |f| f.write_all(bytes))
}

//! Writing outputs so that a failed command leaves nothing behind.
//!
//! A file output is written to a temporary sibling and renamed over the destination only once it
//! is complete; a rename within one directory is atomic on POSIX file systems.

use std::io::Write as _;
use std::path::Path;

use crate::Failure;

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

/// Writes bytes to `path` through a temporary file and a rename.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), Failure> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let file_name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{file_name}.fbc-tmp-{}", std::process::id()));
    let result = std::fs::write(&tmp, bytes).and_then(|()| std::fs::rename(&tmp, path));
    result.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        Failure::Usage(format!("cannot write {}: {e}", path.display()))
    })
}

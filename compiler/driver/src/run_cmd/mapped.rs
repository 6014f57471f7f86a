//! A read-only memory map of an input file: the one `unsafe` operation of the driver.
//!
//! `fbc run --inputs` reads safetensors files that may hold gigabytes of weights; mapping them
//! lets the header be parsed and each tensor converted straight from the page cache, with no
//! copy of the whole file. `memmap2::Mmap::map` is `unsafe` because the mapped bytes can change
//! (or vanish: SIGBUS) if another process modifies or truncates the file while it is mapped; no
//! API can rule that out for a file shared with other processes, which is why it cannot be safe.

#![allow(unsafe_code)]

use std::fs::File;
use std::path::Path;

use memmap2::Mmap;

/// The bytes of the file at `path`, mapped read-only.
pub(crate) fn map_file(path: &Path) -> std::io::Result<Mmap> {
    let file = File::open(path)?;
    // SAFETY: the map is read-only and private to this process, and lives only while
    // `fbc run` converts the inputs (the caller drops it before running the function).
    // Concurrent modification of the input file by another process during that window is the
    // one hazard `memmap2` documents; like every tool that maps its inputs (safetensors' own
    // loaders included), `fbc run` requires that inputs are not rewritten while it reads them.
    unsafe { Mmap::map(&file) }
}

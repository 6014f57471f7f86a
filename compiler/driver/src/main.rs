//! The `fbc` command. All logic lives in the library so that tools embedding fbc (and the
//! custom-pass example) run exactly the same command line.

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_purge_delay` in mimalloc's `mi_option_e` (the same index in its v2 and v3 headers;
/// the Rust bindings export no constant for it).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Allocator settings for a process that builds and drops large graphs.
///
/// mimalloc returns freed memory to the system 10 ms after it is freed by default. A compile of
/// a large module frees and reallocates hundreds of megabytes between passes, and every purge is
/// followed by page faults that zero the same memory again: at 10⁶ ops that was a quarter of the
/// compile's time (`tests/bench/scale.sh`). The process keeps what it freed for its own reuse:
/// the peak is unchanged and the system gets everything back at exit. (Transparent huge pages,
/// which made each of those faults zero 2 MiB, are off at build time: mimalloc's `no_thp`.)
/// `MIMALLOC_PURGE_DELAY` in the environment still decides.
fn tune_allocator() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        #[allow(unsafe_code)]
        // SAFETY: a store into mimalloc's option table, which it reads on its next purge
        // decision; no allocation depends on the value, and no other thread runs yet.
        unsafe {
            libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1);
        }
    }
}

fn main() -> std::process::ExitCode {
    tune_allocator();
    fbc::Driver::default().main(std::env::args_os())
}

//! Fuzzes the memory dialect end to end with arbitrary bytes read as a `.fbir` module: parsing
//! and verification (the bounds prover included) never panic, and every function that verifies
//! runs on the reference executor and the CPU JIT with the same outcome, under a 16 MiB memory
//! limit (`fbc_testing::fuzz::memory_module`). Run with `cargo fuzz run memory` from `grammar/`
//! (nightly); the seeds are in `corpus/memory/`. `tests/tests/fuzz_memory.rs` runs the same
//! harness on generated launches with stable Rust in CI.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    fbc_runtime::limits::set_max_memory(16 << 20);
    if let Err(e) = fbc_testing::fuzz::memory_module(data) {
        panic!("back ends disagree: {e}");
    }
});

//! Fuzzes `parse_bytes` with arbitrary bytes: it must return (a module or diagnostics) and never
//! panic, overflow the stack or hang. Run with `cargo fuzz run parse` from `grammar/`
//! (nightly); the seeds are in `corpus/parse/`.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = fbc_grammar::parse_bytes(data);
});

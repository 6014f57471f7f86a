//! The `.fbw` reader on arbitrary bytes: `Weights::new` validates or refuses, and whatever it
//! accepts reads (checksums, dequantisation) without panicking or leaving the input.
//!
//! `cargo fuzz run weights` from `tests/fuzz`; seed the corpus with files from `fbc pack`.

#![no_main]

use fbc_runtime::weights::Weights;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(w) = Weights::new(data) {
        let _ = w.verify();
        let names: Vec<String> = w.manifest().tensors.iter().map(|t| t.name.clone()).collect();
        for n in names {
            let _ = w.dequantize(&n);
        }
    }
});

//! `fbc import` on arbitrary bytes: `fbc_onnx::import` returns a module or errors and never
//! panics, allocates without bound or leaves its input; a module it returns verifies.
//!
//! `cargo fuzz run onnx` from `tests/fuzz`; seed the corpus with `tests/onnx/models/*/model.onnx`
//! and `tests/onnx/node/*/model.onnx`.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(imported) = fbc_onnx::import(data, None, &fbc_onnx::Options::default()) {
        assert!(fbc_ir::verify_module(&imported.module).is_empty());
    }
});

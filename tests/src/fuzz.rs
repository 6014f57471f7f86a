//! The memory-dialect fuzz harness: any bytes, read as a `.fbir` module, either fail to parse or
//! verify with diagnostics that render, or every function runs on the reference executor and
//! on the Cranelift JIT with the same outcome — the same results bit for bit, or an error on
//! both. Nothing may panic, allocate past the memory limit, or read or write outside storage
//! (the JIT's code would fault; the bounds prover and run-time checks must stop it first).
//!
//! `tests/fuzz/fuzz_targets/memory.rs` runs it under libFuzzer (`cargo fuzz run memory`, on a
//! nightly toolchain); `tests/tests/fuzz_memory.rs` runs it on stable over generated launches.
//! Callers set a small memory limit first ([`fbc_runtime::limits::set_max_memory`]).

use std::sync::Arc;

use fbc_ir::{SourceFile, Type};
use fbc_runtime::interp::{random_input, Interpreter, Options, Value};

/// What one input did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Not UTF-8, or refused by the parser or the verifier (with this many diagnostics).
    Rejected(usize),
    /// Every function ran: how many ran to completion on both back ends, and how many failed
    /// on both with an error.
    Ran { completed: usize, failed: usize },
}

/// Runs one input; `Err` describes a disagreement between the back ends (a bug).
pub fn memory_module(bytes: &[u8]) -> Result<Outcome, String> {
    let Ok(text) = std::str::from_utf8(bytes) else { return Ok(Outcome::Rejected(0)) };
    let file = Arc::new(SourceFile::new("fuzz.fbir", text));
    let module = match fbc_ir::parse_module(&file, &fbc_dialects::registry()) {
        Ok(m) => m,
        Err(d) => {
            // Rendering must not panic either (spans are clamped).
            let _ = fbc_grammar::diag::render_all(&file, &d);
            return Ok(Outcome::Rejected(d.len()));
        }
    };
    let (mut completed, mut failed) = (0, 0);
    for f in module.func_ids() {
        let args = &module.func(f).args;
        if args.iter().any(|&a| !matches!(module.value_type(a), Type::Tensor(_))) {
            continue;
        }
        let inputs: Result<Vec<Value>, _> =
            (0..args.len()).map(|i| random_input(&module, f, i, 7)).collect();
        let Ok(inputs) = inputs else {
            failed += 1;
            continue;
        };
        let reference = Interpreter::new(&module).run_id(f, inputs.clone());
        let jit = fbc_runtime::device::cpu_jit::run(&module, f, inputs, Options::default())
            .map(|(v, _)| v);
        match (reference, jit) {
            (Ok(a), Ok(b)) => {
                if !same_bits(&a, &b) {
                    return Err(format!(
                        "@{}: the JIT's results differ from the reference executor's",
                        module.func(f).name
                    ));
                }
                completed += 1;
            }
            (Err(_), Err(_)) => failed += 1,
            (Ok(_), Err(e)) => {
                return Err(format!("@{}: only the JIT failed: {e}", module.func(f).name))
            }
            (Err(e), Ok(_)) => {
                return Err(format!("@{}: only the reference failed: {e}", module.func(f).name))
            }
        }
    }
    Ok(Outcome::Ran { completed, failed })
}

/// Equal shapes and bit-identical elements (NaNs equal to NaNs).
fn same_bits(a: &[Value], b: &[Value]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            let (x, y) = (x.to_f64_vec(), y.to_f64_vec());
            x.len() == y.len()
                && x.iter()
                    .zip(&y)
                    .all(|(p, q)| p.to_bits() == q.to_bits() || (p.is_nan() && q.is_nan()))
        })
}

//! `fbc import`: an ONNX model as a `.fbir` module (`fbc-onnx`), and its initializers as a
//! safetensors file that `fbc run --inputs` reads.
//!
//! Everything is built and verified in memory first; only then are the outputs written, each
//! atomically, so a model that fails to import leaves no file behind. Every problem found is
//! reported (all unsupported nodes at once, with their names and op types), exit status 1.

use std::collections::HashMap;

use safetensors::Dtype;

use crate::cli::ImportArgs;
use crate::{output, Failure};

pub(crate) fn run(a: &ImportArgs) -> Result<(), Failure> {
    let name = a.file.display().to_string();
    let bytes = std::fs::read(&a.file)
        .map_err(|e| Failure::Input(format!("{name}: error: cannot read: {e}\n")))?;
    let options = fbc_onnx::Options {
        func: a.func.clone(),
        shapes: a.shape.iter().cloned().collect::<HashMap<_, _>>(),
        constant_inputs: HashMap::new(),
        inline_weights: a.inline_weights,
    };
    let imported = fbc_onnx::import(&bytes, a.file.parent(), &options).map_err(|errors| {
        let mut text = String::new();
        for e in &errors {
            text.push_str(&format!("{name}: error: {e}\n"));
        }
        if errors.len() > 1 {
            text.push_str(&format!("{name}: {} errors\n", errors.len()));
        }
        Failure::Input(text)
    })?;
    let diags = fbc_ir::verify_module(&imported.module);
    if let Some(d) = diags.first() {
        return Err(Failure::Internal(format!(
            "{name}: the imported module does not verify: {}",
            d.message
        )));
    }
    let text = fbc_ir::print_module(&imported.module);
    let weights = match &a.weights_out {
        Some(_) => Some(encode_weights(&imported.weights)?),
        None => None,
    };
    if let (Some(path), Some(bytes)) = (&a.weights_out, &weights) {
        output::write_atomic(path, bytes)?;
    } else if !imported.weights.is_empty() {
        eprintln!(
            "{name}: note: {} initializers became arguments of @{}; --weights-out FILE saves them",
            imported.weights.len(),
            a.func
        );
    }
    for (out, o) in &imported.outputs {
        if let fbc_onnx::Output::Constant(t) = o {
            eprintln!(
                "{name}: note: output `{out}` is a constant ({} values) known at import time; \
                 it is not a result of @{}",
                t.numel(),
                a.func
            );
        }
    }
    output::write_text(a.output.as_deref(), &text)
}

/// The weights as safetensors bytes, under their argument names, each in its IR storage type.
fn encode_weights(weights: &[(String, fbc_onnx::HostTensor)]) -> Result<Vec<u8>, Failure> {
    let tensors: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = weights
        .iter()
        .map(|(name, t)| {
            let dtype = match t.dtype {
                fbc_onnx::DType::F32 => Dtype::F32,
                fbc_onnx::DType::F16 => Dtype::F16,
                fbc_onnx::DType::BF16 => Dtype::BF16,
                fbc_onnx::DType::F64 => Dtype::F64,
                _ => Dtype::I32,
            };
            (name.clone(), dtype, t.shape.clone(), t.le_bytes())
        })
        .collect();
    crate::run_cmd::io::serialize(&tensors, None).map_err(Failure::Internal)
}

//! `fbc run --f32-weights W.safetensors`: how far a run on quantised weights lands from the same
//! function on the f32 weights they were packed from.
//!
//! A run reads INT8/INT4 weights either dequantised on the host (an f32 module given a `.fbw`)
//! or packed, decoded in the kernels (a module whose `tensor.dequantize` reads arguments `W.q`
//! and `W.scales`). The reference is the module's *f32 twin*: every `tensor.dequantize` of two
//! such arguments is replaced by a new argument `W` of its result type, appended after the
//! others, so that the original arguments keep their positions (and `--random-inputs` gives
//! them the run's values). The reference interpreter runs the twin in f32 with every argument
//! the f32 file names taken from it (a dequantised weight must be there), the others from the
//! run's own sources. Each result is compared with the run's: the largest difference, and that
//! difference over the largest magnitude of the f32 result (what `docs/weights.md` reports as
//! the quantisation error of the logits); for an integer result (token ids), how many elements
//! differ.

use std::collections::HashSet;

use fbc_dialects::kind::TensorOp;
use fbc_ir::{FuncId, Module, SourceFile};
use fbc_runtime::interp::{arg_name, Interpreter, Mode, Value};
use safetensors::SafeTensors;

use super::io::{read_inputs, Sources};
use crate::cli::RunArgs;
use crate::Failure;

/// Function `func` of `module` with each `tensor.dequantize` of arguments `W.q` and `W.scales`
/// replaced by a new, last argument named `W`; and those names, in order.
fn f32_twin(module: &Module, func: FuncId) -> (Module, Vec<String>) {
    let mut twin = module.clone();
    let mut added = Vec::new();
    let arg_named = |m: &Module, v| match m.value(v).def {
        fbc_ir::ValueDef::Arg { func: f, index } if f == func => {
            Some(arg_name(m, func, index as usize))
        }
        _ => None,
    };
    for op in module.func(func).body.clone() {
        let d = twin.op(op);
        if d.name() != TensorOp::Dequantize.name() || d.operands.len() != 2 {
            continue;
        }
        let (q, s) = (arg_named(&twin, d.operands[0]), arg_named(&twin, d.operands[1]));
        let (Some(q), Some(s)) = (q, s) else { continue };
        let (Some(w), Some(ws)) = (q.strip_suffix(".q"), s.strip_suffix(".scales")) else {
            continue;
        };
        if w != ws {
            continue;
        }
        let result = d.results[0];
        let ty = twin.value_type(result).clone();
        let arg = twin.add_arg(func, ty);
        twin.set_value_name(arg, w);
        added.push(w.to_string());
        twin.replace_all_uses(result, arg);
        twin.erase_op(op);
    }
    (twin, added)
}

/// With `--f32-weights`: the lines comparing a run of `func` whose results are `results` with
/// its f32 twin on those weights (see the module documentation), appended to `text`.
pub(crate) fn compare(
    a: &RunArgs,
    file: &SourceFile,
    module: &Module,
    func: FuncId,
    results: &[Value],
    text: &mut String,
) -> Result<(), Failure> {
    let Some(path) = a.f32_weights.as_deref() else { return Ok(()) };
    let src = a.sources();
    let origin = path.display().to_string();
    let map = super::mapped::map_file(path)
        .map_err(|e| Failure::Input(format!("{origin}: error: cannot read: {e}\n")))?;
    let st = SafeTensors::deserialize(&map).map_err(|e| {
        Failure::Input(format!("{origin}: error: not a valid safetensors file: {e}\n"))
    })?;
    let names: HashSet<String> = st.names().into_iter().map(str::to_string).collect();
    let (twin, decoded) = f32_twin(module, func);
    let fname = &module.func(func).name;
    let mut errors: Vec<String> = decoded
        .iter()
        .filter(|w| !names.contains(*w))
        .map(|w| {
            format!(
                "{origin}: error: no tensor `{w}`: @{fname} reads it quantised (`{w}.q`, \
                 `{w}.scales`), so the f32 reference needs it\n"
            )
        })
        .collect();
    let args = twin.func(func).args.len();
    if errors.is_empty() && !(0..args).any(|i| names.contains(&arg_name(&twin, func, i))) {
        errors.push(format!("{origin}: error: no tensor names an argument of @{fname}\n"));
    }
    if !errors.is_empty() {
        return Err(Failure::Input(errors.concat()));
    }
    let mut inputs = vec![path.to_path_buf()];
    inputs.extend_from_slice(src.inputs);
    let src = Sources { inputs: &inputs, allow_unused: true, ..src };
    let values = read_inputs(&twin, func, src, Mode::F32, &file.name)?;
    let reference =
        Interpreter::new(&twin).run_id(func, values).map_err(|e| super::located(file, &e))?;
    for (i, (r, d)) in reference.iter().zip(results).enumerate() {
        text.push_str(&format!("against the f32 weights of {origin}: result{i}: "));
        text.push_str(&difference(r, d));
        text.push('\n');
    }
    Ok(())
}

/// How far `run` is from `reference`: for floats the largest difference and its share of the
/// largest finite magnitude of `reference`; for integers the number of elements that differ.
fn difference(reference: &Value, run: &Value) -> String {
    let (r, d) = (reference.to_f64_vec(), run.to_f64_vec());
    if let Value::I32(_) = reference {
        let differ = r.iter().zip(&d).filter(|(a, b)| a != b).count();
        return format!("{differ} of {} elements differ", r.len());
    }
    let scale = r.iter().filter(|v| v.is_finite()).fold(0.0f64, |m, v| m.max(v.abs()));
    let largest = r.iter().zip(&d).fold(0.0f64, |m, (a, b)| {
        if a == b {
            m
        } else if a.is_nan() || b.is_nan() {
            f64::INFINITY
        } else {
            m.max((a - b).abs())
        }
    });
    let share = if scale > 0.0 { largest / scale } else { largest };
    format!("max abs difference {largest:.3e}, {share:.3e} of the largest |value| ({scale:.3e})")
}

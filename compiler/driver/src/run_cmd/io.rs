//! safetensors inputs and outputs of `fbc run`: matching tensors to arguments by name, checking
//! dtype and shape, converting bytes to interpreter values and back.
//!
//! Every problem with the inputs is collected and reported together, one line per input, each
//! naming the argument: `IN.safetensors: error: input `x`: expected tensor<4x8xf32>, found F32
//! [4, 9]`.

use std::collections::BTreeMap;
use std::path::Path;

use fbc_ir::{ElemType, FuncId, Module, TensorType, Type};
use fbc_runtime::interp::{arg_name, random_input, Mode, Value};
use fbc_runtime::reference::Tensor;
use safetensors::{Dtype, SafeTensors};

use super::mapped::map_file;
use crate::Failure;

/// Where a run's argument values come from, in order of precedence: the safetensors files
/// `--inputs` (each argument from at most one; a sharded checkpoint's
/// `model.safetensors.index.json` stands for its shards), the weight file `--weights` (`.fbw`,
/// dequantised), random values from `--random-inputs`.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Sources<'a> {
    pub inputs: &'a [std::path::PathBuf],
    pub weights: Option<&'a Path>,
    pub seed: Option<u64>,
    /// Arguments the caller computes itself (`fbc generate`'s tokens, masks, RoPE tables and
    /// caches): zeros of their type unless a file gives them, never random, never missing.
    pub host: &'a [&'a str],
    /// Tensors of the input files that name no argument are skipped instead of being errors (a
    /// whole checkpoint feeding part of it: Whisper's decoder without its encoder).
    pub allow_unused: bool,
    /// Arguments whose weight-file tensor the caller uploads itself as stored texels (`fbc
    /// pack --for`): checked like any weight, then given as an empty `f32` placeholder instead
    /// of being read out of the texels.
    pub stored: &'a [&'a str],
}

/// One value per argument of `func`, from `src`.
pub(crate) fn read_inputs(
    module: &Module,
    func: FuncId,
    src: Sources<'_>,
    mode: Mode,
    fbir: &str,
) -> Result<Vec<Value>, Failure> {
    let Sources { inputs, weights, seed, host, allow_unused, stored } = src;
    let f = module.func(func);
    let names: Vec<String> = (0..f.args.len()).map(|i| arg_name(module, func, i)).collect();
    let origin = inputs.first().map_or_else(|| fbir.to_string(), |p| p.display().to_string());
    let mut errors: Vec<String> = Vec::new();
    let mut values: Vec<Option<Value>> = vec![None; f.args.len()];
    // Arguments the files give, well-formed or not: a mis-typed input is not also "missing".
    let mut given_args = vec![false; f.args.len()];
    // The file each given argument came from, to name both when a second file gives it again.
    let mut given_by: Vec<Option<String>> = vec![None; f.args.len()];

    for path in expand_shards(inputs)? {
        let path = path.as_path();
        let origin = path.display().to_string();
        let map = map_file(path)
            .map_err(|e| Failure::Input(format!("{origin}: error: cannot read: {e}\n")))?;
        if let Some(key) = duplicate_header_key(&map) {
            return Err(Failure::Input(format!(
                "{origin}: error: not a valid safetensors file: the header names `{key}` twice\n"
            )));
        }
        let st = SafeTensors::deserialize(&map).map_err(|e| {
            Failure::Input(format!("{origin}: error: not a valid safetensors file: {e}\n"))
        })?;
        let mut given: BTreeMap<&str, safetensors::tensor::TensorView<'_>> = BTreeMap::new();
        for (name, view) in st.iter() {
            given.insert(name, view);
        }
        for (i, name) in names.iter().enumerate() {
            let Some(view) = given.remove(name.as_str()) else { continue };
            if let Some(first) = &given_by[i] {
                errors.push(format!("input `{name}` is given by both {first} and {origin}"));
                continue;
            }
            given_args[i] = true;
            given_by[i] = Some(origin.clone());
            let ty = module.value_type(f.args[i]);
            match decode(&view, ty, mode) {
                Some(v) => values[i] = Some(v),
                None => errors.push(format!(
                    "input `{name}`: expected {ty}, found {:?} {:?}",
                    view.dtype(),
                    view.shape()
                )),
            }
        }
        for (name, view) in given.into_iter().filter(|_| !allow_unused) {
            errors.push(format!(
                "input `{name}` ({:?} {:?}): @{} has no argument of that name (arguments: {})",
                view.dtype(),
                view.shape(),
                f.name,
                if names.is_empty() { "none".to_string() } else { names.join(", ") }
            ));
        }
    }
    if let Some(path) = weights {
        let wname = path.display().to_string();
        let map = map_file(path)
            .map_err(|e| Failure::Input(format!("{wname}: error: cannot read: {e}\n")))?;
        let w = fbc_runtime::weights::Weights::new(&map[..])
            .map_err(|e| Failure::Input(format!("{wname}: error: {e}\n")))?;
        for (i, name) in names.iter().enumerate() {
            if given_args[i] {
                continue;
            }
            if w.tensor(name).is_err() {
                if let Some(p) = packed_part(name).filter(|p| w.tensor(p.weight).is_ok()) {
                    given_args[i] = true;
                    match packed_input(module, func, i, &p, &w, mode) {
                        Ok(v) => values[i] = Some(v),
                        Err(e) => errors.push(format!("weight `{}` of {wname}: {e}", p.weight)),
                    }
                }
                continue;
            }
            let Ok(entry) = w.tensor(name) else { continue };
            given_args[i] = true;
            let ty = module.value_type(f.args[i]);
            let fits = ty.as_tensor().is_some_and(|t| {
                t.elem.is_float() && t.shape.iter().copied().eq(entry.shape.iter().copied())
            });
            if !fits {
                errors.push(format!(
                    "weight `{name}` of {wname}: expected {ty}, found {} {:?}",
                    entry.dtype.name(),
                    entry.shape
                ));
                continue;
            }
            if stored.contains(&name.as_str()) {
                values[i] = Tensor::new(vec![0], Vec::new()).ok().map(Value::F32);
                continue;
            }
            match w.dequantize(name) {
                Ok(x) => {
                    let shape: Vec<usize> = entry.shape.iter().map(|&d| d as usize).collect();
                    let v = match mode {
                        Mode::F64 => Tensor::new(shape, x.iter().map(|&v| f64::from(v)).collect())
                            .ok()
                            .map(Value::F64),
                        _ => Tensor::new(shape, x).ok().map(Value::F32),
                    };
                    values[i] = v;
                }
                Err(e) => errors.push(format!("{wname}: {e}")),
            }
        }
    }
    for (i, slot) in values.iter_mut().enumerate() {
        if given_args[i] {
            continue;
        }
        let ty = module.value_type(f.args[i]);
        if host.contains(&names[i].as_str()) {
            match zeros(ty, mode) {
                Some(v) => *slot = Some(v),
                None => errors.push(format!("input `{}`: cannot hold {ty}", names[i])),
            }
            continue;
        }
        match seed {
            Some(seed) => match random_input(module, func, i, seed) {
                Ok(v) => *slot = Some(v),
                Err(e) => errors.push(e.to_string()),
            },
            None => {
                let hint = if !inputs.is_empty() || weights.is_some() {
                    "add it to the inputs file or pass --random-inputs SEED"
                } else {
                    "pass --inputs IN.safetensors or --random-inputs SEED"
                };
                errors.push(format!("input `{}`: missing ({ty}); {hint}", names[i]));
            }
        }
    }
    if !errors.is_empty() {
        let text: String = errors.iter().map(|e| format!("{origin}: error: {e}\n")).collect();
        return Err(Failure::Input(text));
    }
    Ok(values.into_iter().flatten().collect())
}

/// An argument named `W.q` or `W.scales`: the packed values or the scales of weight `W` of a
/// `.fbw` file, fed as they are stored (`tensor.dequantize` decodes them in the kernels).
struct PackedPart<'a> {
    weight: &'a str,
    scales: bool,
}

fn packed_part(name: &str) -> Option<PackedPart<'_>> {
    match name.rsplit_once('.')? {
        (w, "q") => Some(PackedPart { weight: w, scales: false }),
        (w, "scales") => Some(PackedPart { weight: w, scales: true }),
        _ => None,
    }
}

/// The value of argument `i` of `func`, `p`'s part of a quantised weight of `w`: the packed
/// rows as an `i8` tensor `[..., row bytes]` or the scales as an `f32` tensor `[..., groups]`.
/// The argument's type must be that, and a `tensor.dequantize` reading it must have the
/// weight's scheme, group and row length; `Err` says what differs.
fn packed_input<B: AsRef<[u8]>>(
    module: &Module,
    func: FuncId,
    i: usize,
    p: &PackedPart<'_>,
    w: &fbc_runtime::weights::Weights<B>,
    mode: Mode,
) -> Result<Value, String> {
    use fbc_dialects::kind::TensorOp;
    let entry = w.tensor(p.weight).map_err(|e| e.to_string())?;
    let arg = module.func(func).args[i];
    let ty = module.value_type(arg);
    if !entry.dtype.is_quantised() {
        return Err(format!(
            "it is stored as {}, but argument `%{}.{}` takes the parts of an int8 or int4 weight",
            entry.dtype.name(),
            p.weight,
            if p.scales { "scales" } else { "q" }
        ));
    }
    let (_, len) = entry.rows();
    let lead = &entry.shape[..entry.shape.len().saturating_sub(1)];
    let last =
        if p.scales { entry.dtype.groups(len, entry.group) } else { entry.dtype.row_bytes(len) };
    let elem = if p.scales { ElemType::F32 } else { ElemType::I8 };
    let want = TensorType::new([lead, &[last]].concat(), elem);
    if ty.as_tensor() != Some(&want) {
        return Err(format!(
            "{} {:?} in groups of {} gives {}: expected {want} for `%{}`, found {ty}",
            entry.dtype.name(),
            entry.shape,
            entry.group,
            if p.scales { "scales" } else { "packed rows" },
            module.value(arg).name.as_deref().unwrap_or("?")
        ));
    }
    for u in &module.value(arg).uses {
        let d = module.op(u.op);
        if !TensorOp::Dequantize.is(d) {
            continue;
        }
        let scheme = d.attr("scheme").and_then(fbc_ir::Attr::as_str).unwrap_or("");
        let group = d.attr("group").and_then(fbc_ir::Attr::as_int).unwrap_or(0);
        let cols = match module.value_type(d.results[0]) {
            Type::Tensor(t) => t.shape.last().copied().unwrap_or(0),
            _ => 0,
        };
        if scheme != entry.dtype.name() || group as u64 != entry.group || cols != len {
            return Err(format!(
                "stored as {} in groups of {} over rows of {len}, but the tensor.dequantize \
                 reading it says scheme \"{scheme}\", group {group}, rows of {cols}",
                entry.dtype.name(),
                entry.group
            ));
        }
    }
    let (values, scales) = w.packed(p.weight).map_err(|e| e.to_string())?;
    let shape: Vec<usize> = want.shape.iter().map(|&d| d as usize).collect();
    let bad = |e: fbc_runtime::reference::KernelError| e.to_string();
    Ok(if p.scales {
        match mode {
            Mode::F64 => Value::F64(
                Tensor::new(shape, scales.iter().map(|&v| f64::from(v)).collect()).map_err(bad)?,
            ),
            _ => Value::F32(Tensor::new(shape, scales).map_err(bad)?),
        }
    } else {
        Value::I32(
            Tensor::new(shape, values.iter().map(|&b| i32::from(b as i8)).collect())
                .map_err(bad)?,
        )
    })
}

/// The safetensors files `paths` name: each as it is, except a sharded checkpoint's index
/// (`*.json`, with a `weight_map` from tensor names to shard files in its folder), which stands
/// for its shards, each once, in the order they first appear.
fn expand_shards(paths: &[std::path::PathBuf]) -> Result<Vec<std::path::PathBuf>, Failure> {
    let mut out = Vec::new();
    for p in paths {
        if p.extension().is_none_or(|e| e != "json") {
            out.push(p.clone());
            continue;
        }
        let name = p.display();
        let text = std::fs::read_to_string(p)
            .map_err(|e| Failure::Input(format!("{name}: error: cannot read: {e}\n")))?;
        let json: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| Failure::Input(format!("{name}: error: not JSON: {e}\n")))?;
        let map = json.get("weight_map").and_then(|m| m.as_object()).ok_or_else(|| {
            Failure::Input(format!(
                "{name}: error: no `weight_map` object (a sharded checkpoint's index)\n"
            ))
        })?;
        let dir = p.parent().unwrap_or(Path::new("."));
        for v in map.values() {
            let shard = v.as_str().filter(|s| {
                let s = Path::new(s);
                s.components().all(|c| matches!(c, std::path::Component::Normal(_)))
            });
            let shard = shard.ok_or_else(|| {
                Failure::Input(format!(
                    "{name}: error: shard {v} is not a file name inside the checkpoint's folder\n"
                ))
            })?;
            let path = dir.join(shard);
            if !out.contains(&path) {
                out.push(path);
            }
        }
    }
    Ok(out)
}

/// A value of type `ty` holding zeros (`None` for a type the interpreter does not hold).
fn zeros(ty: &Type, mode: Mode) -> Option<Value> {
    let t = ty.as_tensor()?;
    let shape: Vec<usize> =
        t.shape.iter().map(|&d| usize::try_from(d).ok()).collect::<Option<_>>()?;
    Some(match (t.elem, mode) {
        (ElemType::I32, _) => Value::I32(Tensor::zeros(&shape).ok()?),
        (e, Mode::F64) if e.is_float() => Value::F64(Tensor::zeros(&shape).ok()?),
        (e, _) if e.is_float() => Value::F32(Tensor::zeros(&shape).ok()?),
        _ => return None,
    })
}

/// The values of a safetensors tensor of float `dtype` (F32, F16, BF16) as `f32`; `None` for
/// other dtypes.
pub(crate) fn f32_values(dtype: Dtype, bytes: &[u8]) -> Option<Vec<f32>> {
    Some(match dtype {
        Dtype::F32 => {
            bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
        }
        Dtype::F16 => {
            bytes.chunks_exact(2).map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32()).collect()
        }
        Dtype::BF16 => bytes
            .chunks_exact(2)
            .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
        _ => return None,
    })
}

/// The value of a safetensors tensor given for an argument of type `ty`, or `None` when its
/// dtype or shape does not fit: the dtype must be the argument's own (F32, F16, BF16, F64, I32),
/// or F64 for any float argument in f64 mode.
fn decode(view: &safetensors::tensor::TensorView<'_>, ty: &Type, mode: Mode) -> Option<Value> {
    let Type::Tensor(t) = ty else { return None };
    let shape_ok = view.shape().iter().map(|&d| d as u64).eq(t.shape.iter().copied());
    if !shape_ok {
        return None;
    }
    let shape = view.shape().to_vec();
    let bytes = view.data();
    // safetensors has checked that the byte length matches shape × dtype; `Tensor::new` checks
    // again, so a corrupt length is an error here rather than a panic anywhere.
    match (view.dtype(), t.elem) {
        (d @ Dtype::F32, ElemType::F32)
        | (d @ Dtype::F16, ElemType::F16)
        | (d @ Dtype::BF16, ElemType::BF16) => {
            Tensor::new(shape, f32_values(d, bytes)?).ok().map(Value::F32)
        }
        (Dtype::F64, e) if e == ElemType::F64 || (e.is_float() && mode == Mode::F64) => {
            let data = bytes
                .chunks_exact(8)
                .map(|b| f64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
                .collect();
            Tensor::new(shape, data).ok().map(Value::F64)
        }
        (Dtype::I32, ElemType::I32) => {
            let data = bytes
                .chunks_exact(4)
                .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            Tensor::new(shape, data).ok().map(Value::I32)
        }
        _ => None,
    }
}

/// The safetensors file of `func`'s results: `result0`, `result1`, ... in their declared dtypes
/// (F64 for every float in f64 mode, where results are `F64` values), with the entry as metadata.
pub(crate) fn encode_outputs(
    module: &Module,
    func: FuncId,
    results: &[Value],
) -> Result<Vec<u8>, Failure> {
    let f = module.func(func);
    let mut tensors: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = Vec::new();
    for (i, (v, ty)) in results.iter().zip(&f.result_types).enumerate() {
        let elem = ty.as_tensor().map(|t: &TensorType| t.elem);
        let (dtype, bytes): (Dtype, Vec<u8>) = match (v, elem) {
            (Value::I32(t), _) => {
                (Dtype::I32, t.data().iter().flat_map(|x| x.to_le_bytes()).collect())
            }
            (Value::F64(t), _) => {
                (Dtype::F64, t.data().iter().flat_map(|x| x.to_le_bytes()).collect())
            }
            (Value::F32(t), Some(ElemType::F16)) => (
                Dtype::F16,
                t.data().iter().flat_map(|&x| half::f16::from_f32(x).to_le_bytes()).collect(),
            ),
            (Value::F32(t), Some(ElemType::BF16)) => (
                Dtype::BF16,
                t.data().iter().flat_map(|&x| half::bf16::from_f32(x).to_le_bytes()).collect(),
            ),
            (Value::F32(t), _) => {
                (Dtype::F32, t.data().iter().flat_map(|x| x.to_le_bytes()).collect())
            }
        };
        tensors.push((format!("result{i}"), dtype, v.shape().to_vec(), bytes));
    }
    // One metadata entry only: safetensors writes the metadata map in hash order, and equal runs
    // must give byte-identical files. (The mode shows in the dtypes: F64 floats under --f64.)
    let metadata =
        std::collections::HashMap::from([("fbc.entry".to_string(), format!("@{}", f.name))]);
    serialize(&tensors, Some(metadata)).map_err(Failure::Usage)
}

/// Named tensors (name, dtype, shape, little-endian bytes) as the bytes of a safetensors file.
pub(crate) fn serialize(
    tensors: &[(String, Dtype, Vec<usize>, Vec<u8>)],
    metadata: Option<std::collections::HashMap<String, String>>,
) -> Result<Vec<u8>, String> {
    let mut views = Vec::with_capacity(tensors.len());
    for (name, dtype, shape, bytes) in tensors {
        let view = safetensors::tensor::TensorView::new(*dtype, shape.clone(), bytes)
            .map_err(|e| format!("cannot encode {name}: {e}"))?;
        views.push((name.as_str(), view));
    }
    safetensors::serialize(views, metadata).map_err(|e| format!("cannot encode the tensors: {e}"))
}

/// The first key that the JSON header of safetensors bytes `file` gives twice. The safetensors
/// crate keeps the last of duplicates silently; a file that names one tensor twice is ambiguous,
/// so it is refused. `None` for a header that is not a JSON object (the crate reports that).
pub(crate) fn duplicate_header_key(file: &[u8]) -> Option<String> {
    use serde::de::{Deserializer as _, IgnoredAny, MapAccess, Visitor};

    struct FirstDuplicate;
    impl<'de> Visitor<'de> for FirstDuplicate {
        type Value = Option<String>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<String>, A::Error> {
            let mut seen = std::collections::HashSet::new();
            while let Some(key) = map.next_key::<String>()? {
                map.next_value::<IgnoredAny>()?;
                if !seen.insert(key.clone()) {
                    return Ok(Some(key));
                }
            }
            Ok(None)
        }
    }

    let len = u64::from_le_bytes(file.get(..8)?.try_into().ok()?);
    let end = usize::try_from(len).ok()?.checked_add(8)?;
    let header = file.get(8..end)?;
    serde_json::Deserializer::from_slice(header).deserialize_map(FirstDuplicate).ok().flatten()
}

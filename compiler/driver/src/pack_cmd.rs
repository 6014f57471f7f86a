//! `fbc pack`: a safetensors file into a tiled `.fbw` weight file (`fbc_runtime::weights`), and
//! `fbc pack --inspect`: validate one and list its tensors.
//!
//! With `--for MODEL.fbir --target T` the model is compiled at -O3 for profile `T` and lowered,
//! and each tensor that some function of it uploads (as the argument of the same name and
//! shape) into an `f32` R-Tile image, in one form wherever it is uploaded, is stored as that
//! image's texels (`Stored`), packed once here by `exec::pack`, so that a run uploads it as it
//! is. Quantised storage does not apply to such a tensor: the module reads it in f32.
//!
//! The output is written to a temporary sibling and renamed into place once complete, then read
//! back through the validating reader: the summary's quantisation errors are measured on the
//! file as a run will read it.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use fbc_dialects::kind::MemoryOp;
use fbc_dialects::layout::{Layout, RTile, Storage};
use fbc_dialects::memory::MemType;
use fbc_ir::{ElemType, ValueDef};
use fbc_runtime::weights::{writer::layer_of, PackOptions, Packer, Stored, Weights};
use safetensors::SafeTensors;

use crate::cli::PackArgs;
use crate::run_cmd::io::f32_values;
use crate::run_cmd::mapped::map_file;
use crate::{output, Failure};

/// A tensor's values in f32 (its dtype was checked to convert).
fn to_f32(view: &safetensors::tensor::TensorView<'_>) -> Vec<f32> {
    f32_values(view.dtype(), view.data()).unwrap_or_default()
}

fn inspect(a: &PackArgs, name: &str) -> Result<(), Failure> {
    let map = map_file(&a.file)
        .map_err(|e| Failure::Input(format!("{name}: error: cannot read: {e}\n")))?;
    let w = Weights::new(&map[..])
        .and_then(|w| w.verify().map(|()| w))
        .map_err(|e| Failure::Input(format!("{name}: error: {e}\n")))?;
    let text = if a.json {
        serde_json::to_string_pretty(w.manifest()).unwrap_or_default() + "\n"
    } else {
        let mut s = format!(
            "{name}: {} tensors, {} bytes, every tile's checksum verified\n",
            w.manifest().tensors.len(),
            map.len()
        );
        let _ = writeln!(
            s,
            "  {:<40} {:<16} {:<5} {:>5} {:>5} {:>6} {:>12}",
            "tensor", "shape", "dtype", "group", "layer", "tiles", "bytes"
        );
        for t in &w.manifest().tensors {
            let shape = t.shape.iter().map(u64::to_string).collect::<Vec<_>>().join("x");
            let bytes: u64 = t.tiles.iter().map(|x| x.size).sum();
            let layer = t.layer.map_or("-".to_string(), |l| l.to_string());
            let _ = writeln!(
                s,
                "  {:<40} {:<16} {:<5} {:>5} {:>5} {:>6} {:>12}",
                t.name,
                shape,
                t.dtype.name(),
                t.group,
                layer,
                t.tiles.len(),
                bytes
            );
        }
        s
    };
    output::write_text(None, &text)
}

/// The R-Tile image form in which the module `path`, compiled for `target`, uploads each of
/// its function arguments, by name, with the argument's shape: arguments uploaded in more than
/// one form (two functions that lay a weight out differently), or not as an `f32` image, have
/// none.
fn storage_forms(
    driver: &crate::Driver,
    path: &std::path::Path,
    target: &str,
) -> Result<BTreeMap<String, (Vec<u64>, RTile)>, Failure> {
    let session = crate::Session::for_target(driver, target)?;
    let (file, mut module) = driver.load(path)?;
    session.compile(&file, &mut module)?;
    let mut forms: BTreeMap<String, Option<(Vec<u64>, RTile)>> = BTreeMap::new();
    for f in &module.funcs {
        for &op in &f.body {
            let d = module.op(op);
            if !MemoryOp::Upload.is(d) {
                continue;
            }
            let (Some(&src), Some(&res)) = (d.operands.first(), d.results.first()) else {
                continue;
            };
            if !matches!(module.value(src).def, ValueDef::Arg { .. }) {
                continue;
            }
            let Some(name) = module.value(src).name.as_deref().map(str::to_string) else {
                continue;
            };
            let shape = module.value_type(src).as_tensor().map(|t| t.shape.to_vec());
            let image = MemType::from_type(module.value_type(res))
                .filter(|t| t.elem == ElemType::F32 && t.coords() == 3);
            let layout = d.attr("layout").and_then(|a| Layout::from_attr(a).ok());
            // A row tile (`rows`) reads the weight row-major, as stored without `--for`.
            let whole = d.attr("rows").is_none();
            let form = match (shape, image, layout) {
                (Some(shape), Some(_), Some(Layout::RTile(r)))
                    if whole && r.storage == Storage::Image2d =>
                {
                    RTile::for_shape(&shape, r.tile, r.intra, r.horizontal, Storage::Image2d)
                        .ok()
                        .map(|r| (shape, r))
                }
                _ => None,
            };
            match forms.get(&name) {
                None => {
                    forms.insert(name, form);
                }
                Some(prev) if *prev != form => {
                    forms.insert(name, None);
                }
                Some(_) => {}
            }
        }
    }
    Ok(forms.into_iter().filter_map(|(n, f)| Some((n, f?))).collect())
}

pub(crate) fn run(driver: &crate::Driver, a: &PackArgs) -> Result<(), Failure> {
    let name = a.file.display().to_string();
    if a.inspect {
        return inspect(a, &name);
    }
    let forms = match &a.for_module {
        Some(m) => storage_forms(driver, m, &a.target)?,
        None => BTreeMap::new(),
    };
    let out_path =
        a.output.as_deref().ok_or_else(|| Failure::Usage("-o OUT.fbw is required".into()))?;
    let map = map_file(&a.file)
        .map_err(|e| Failure::Input(format!("{name}: error: cannot read: {e}\n")))?;
    if let Some(key) = crate::run_cmd::io::duplicate_header_key(&map) {
        return Err(Failure::Input(format!(
            "{name}: error: not a valid safetensors file: the header names `{key}` twice\n"
        )));
    }
    let st = SafeTensors::deserialize(&map).map_err(|e| {
        Failure::Input(format!("{name}: error: not a valid safetensors file: {e}\n"))
    })?;
    // Name order: the same input gives the same file.
    let views: BTreeMap<String, safetensors::tensor::TensorView<'_>> =
        st.iter().map(|(n, v)| (n.to_string(), v)).collect();
    // Converting no bytes says whether a dtype converts, without converting the tensor.
    let errors: Vec<String> = views
        .iter()
        .filter(|(_, v)| f32_values(v.dtype(), &[]).is_none())
        .map(|(n, v)| {
            format!(
                "{name}: error: tensor `{n}`: dtype {:?} (expected F32, F16 or BF16)\n",
                v.dtype()
            )
        })
        .collect();
    if !errors.is_empty() {
        return Err(Failure::Input(errors.concat()));
    }
    let layers = views.keys().filter_map(|n| layer_of(n)).max().map(|l| l + 1);
    if a.mixed.is_some() && layers.is_none() {
        return Err(Failure::Usage(format!(
            "--mixed: no tensor of {name} names a layer (`layers.3.`, `l3_`)"
        )));
    }
    let opts =
        PackOptions { quant: a.quant, group: a.group, tile_bytes: a.tile_bytes, mixed: a.mixed };
    output::write_atomic_with(out_path, |file| {
        let mut p = Packer::new(std::io::BufWriter::new(file), opts.clone(), layers)?;
        for (n, v) in &views {
            let shape: Vec<u64> = v.shape().iter().map(|&d| d as u64).collect();
            let values = to_f32(v);
            match forms.get(n).filter(|(s, _)| *s == shape) {
                Some((_, r)) => {
                    let stored = Stored::of(r).ok_or_else(|| {
                        std::io::Error::other(format!("tensor `{n}`: no image extent"))
                    })?;
                    let [w, h] = stored.texels;
                    let dims: Vec<usize> = v.shape().to_vec();
                    let tensor = fbc_runtime::reference::Tensor::new(dims, values)
                        .map_err(|e| std::io::Error::other(e.to_string()))?;
                    let texels = fbc_runtime::exec::pack(
                        &Layout::RTile(*r),
                        &shape,
                        &fbc_runtime::interp::Value::F32(tensor),
                        MemType::image(w, h),
                    )
                    .map_err(|e| std::io::Error::other(format!("tensor `{n}`: {e}")))?;
                    let fbc_runtime::exec::MemData::F32(texels) = texels else {
                        return Err(std::io::Error::other(format!("tensor `{n}`: not f32")));
                    };
                    p.add_stored(n, &shape, stored, &texels)?;
                }
                None => p.add(n, &shape, &values)?,
            }
        }
        p.finish().map(|_| ())
    })?;
    // Read back through the validating reader: what a run sees.
    let out_name = out_path.display().to_string();
    let packed = map_file(out_path)
        .map_err(|e| Failure::Input(format!("{out_name}: error: cannot read: {e}\n")))?;
    let w = Weights::new(&packed[..]).map_err(|e| {
        Failure::Internal(format!("{out_name}: the packed file does not read back: {e}"))
    })?;
    let mut rows = Vec::new();
    let (mut f32_bytes, mut bytes) = (0u64, 0u64);
    // One tensor at a time, converted again from the mapped input: a checkpoint's f32 values are
    // never all in memory.
    for (n, v) in &views {
        let x = to_f32(v);
        let t = w.tensor(n).map_err(|e| Failure::Internal(e.to_string()))?;
        let y = w.dequantize(n).map_err(|e| Failure::Internal(e.to_string()))?;
        let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let err = x.iter().zip(&y).fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
        let rel = if amax > 0.0 { f64::from(err / amax) } else { 0.0 };
        let size: u64 = t.tiles.iter().map(|x| x.size).sum();
        f32_bytes += 4 * x.len() as u64;
        bytes += size;
        let storage = t.storage.as_ref().map_or("rows".to_string(), |s| {
            format!("rtile {}x{} texels", s.texels[0], s.texels[1])
        });
        rows.push((n.clone(), t.dtype.name(), storage, t.tiles.len(), size, rel));
    }
    let text = if a.json {
        let tensors: Vec<_> = rows
            .iter()
            .map(|(n, d, st, tiles, size, rel)| serde_json::json!({"name": n, "dtype": d, "storage": st, "tiles": tiles, "bytes": size, "max_error_rel": rel}))
            .collect();
        serde_json::to_string_pretty(&serde_json::json!({"output": out_name, "file_bytes": packed.len(), "weight_bytes": bytes, "f32_bytes": f32_bytes, "tensors": tensors})).unwrap_or_default() + "\n"
    } else {
        let mut s = format!(
            "{out_name}: {} tensors, {} bytes of weights ({:.2}x smaller than f32), {} bytes in all\n",
            rows.len(),
            bytes,
            f32_bytes as f64 / bytes.max(1) as f64,
            packed.len()
        );
        let _ = writeln!(
            s,
            "  {:<40} {:<5} {:<24} {:>6} {:>12} {:>14}",
            "tensor", "dtype", "storage", "tiles", "bytes", "max err / max|x|"
        );
        for (n, d, st, tiles, size, rel) in &rows {
            let _ = writeln!(s, "  {n:<40} {d:<5} {st:<24} {tiles:>6} {size:>12} {rel:>14.3e}");
        }
        s
    };
    output::write_text(None, &text)
}

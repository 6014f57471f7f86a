//! `fbc pack`: a safetensors file into a tiled `.fbw` weight file (`fbc_runtime::weights`), and
//! `fbc pack --inspect`: validate one and list its tensors.
//!
//! The output is written to a temporary sibling and renamed into place once complete, then read
//! back through the validating reader: the summary's quantisation errors are measured on the
//! file as a run will read it.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use fbc_runtime::weights::{writer::layer_of, PackOptions, Packer, Weights};
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

pub(crate) fn run(a: &PackArgs) -> Result<(), Failure> {
    let name = a.file.display().to_string();
    if a.inspect {
        return inspect(a, &name);
    }
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
            p.add(n, &shape, &values)?;
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
        rows.push((n.clone(), t.dtype.name(), t.tiles.len(), size, rel));
    }
    let text = if a.json {
        let tensors: Vec<_> = rows
            .iter()
            .map(|(n, d, tiles, size, rel)| serde_json::json!({"name": n, "dtype": d, "tiles": tiles, "bytes": size, "max_error_rel": rel}))
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
            "  {:<40} {:<5} {:>6} {:>12} {:>14}",
            "tensor", "dtype", "tiles", "bytes", "max err / max|x|"
        );
        for (n, d, tiles, size, rel) in &rows {
            let _ = writeln!(s, "  {n:<40} {d:<5} {tiles:>6} {size:>12} {rel:>14.3e}");
        }
        s
    };
    output::write_text(None, &text)
}

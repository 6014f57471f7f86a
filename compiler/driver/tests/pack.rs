//! `fbc pack` and `fbc pack --inspect` on safetensors files made here.

mod common;

use std::collections::HashMap;

use common::{fbc, scratch};
use safetensors::tensor::TensorView;
use safetensors::Dtype;

/// A safetensors file of `tensors` (name, dtype, shape, raw bytes) at `dir/name`.
fn safetensors_file(
    dir: &std::path::Path,
    name: &str,
    tensors: &[(&str, Dtype, Vec<usize>, Vec<u8>)],
) -> String {
    let views: HashMap<String, TensorView<'_>> = tensors
        .iter()
        .map(|(n, d, s, b)| ((*n).to_string(), TensorView::new(*d, s.clone(), b).unwrap()))
        .collect();
    let bytes = safetensors::serialize(&views, None).unwrap();
    common::write(dir, name, &bytes)
}

fn f32_bytes(n: usize) -> Vec<u8> {
    (0..n).flat_map(|k| ((k % 17) as f32 * 0.25 - 2.0).to_le_bytes()).collect()
}

#[test]
fn pack_then_inspect_an_int8_model() {
    let dir = scratch("pack-int8");
    let st = safetensors_file(
        &dir,
        "w.safetensors",
        &[
            ("layers.0.wq", Dtype::F32, vec![16, 128], f32_bytes(16 * 128)),
            ("layers.0.norm", Dtype::F32, vec![128], f32_bytes(128)),
            (
                "layers.1.wq",
                Dtype::F16,
                vec![16, 128],
                (0..16 * 128)
                    .flat_map(|k| half::f16::from_f32(k as f32 / 512.0).to_bits().to_le_bytes())
                    .collect(),
            ),
        ],
    );
    let out = dir.join("w.fbw");
    let o = fbc(&[
        "pack",
        &st,
        "-o",
        out.to_str().unwrap(),
        "--quant",
        "int8",
        "--group",
        "64",
        "--json",
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let j: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    let tensors = j["tensors"].as_array().unwrap();
    let names: Vec<&str> = tensors.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["layers.0.norm", "layers.0.wq", "layers.1.wq"]);
    let dtypes: Vec<&str> = tensors.iter().map(|t| t["dtype"].as_str().unwrap()).collect();
    assert_eq!(dtypes, ["f32", "int8", "int8"]);
    // int8: a byte a value and one f32 scale per 64: 16 · (128 + 2·4) bytes per matrix.
    assert_eq!(tensors[1]["bytes"], 16 * (128 + 8));
    assert_eq!(j["weight_bytes"], 128 * 4 + 2 * 16 * (128 + 8));
    // The vector is exact, the matrices within half a step: |x| ≤ 2 in groups, step 2/127.
    assert_eq!(tensors[0]["max_error_rel"], 0.0);
    let rel = tensors[1]["max_error_rel"].as_f64().unwrap();
    assert!(rel > 0.0 && rel <= 0.5 / 127.0 * 1.001, "{rel}");
    let o = fbc(&["pack", "--inspect", out.to_str().unwrap()]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stdout.contains("3 tensors") && o.stdout.contains("every tile's checksum verified"),
        "{}",
        o.stdout
    );
    assert!(o.stdout.contains("layers.1.wq") && o.stdout.contains("16x128"), "{}", o.stdout);
}

#[test]
fn damaged_and_unsupported_inputs_are_errors_that_write_nothing() {
    let dir = scratch("pack-errors");
    let st = safetensors_file(
        &dir,
        "bad.safetensors",
        &[
            ("ids", Dtype::I64, vec![4], vec![0; 32]),
            ("mask", Dtype::U8, vec![4], vec![1; 4]),
            ("w", Dtype::F32, vec![2, 2], f32_bytes(4)),
        ],
    );
    let out = dir.join("bad.fbw");
    let o = fbc(&["pack", &st, "-o", out.to_str().unwrap()]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(
        o.stderr.contains("tensor `ids`: dtype I64")
            && o.stderr.contains("tensor `mask`: dtype U8"),
        "{}",
        o.stderr
    );
    assert!(!out.exists());
    let o = fbc(&["pack", &st, "-o", out.to_str().unwrap(), "--mixed", "first=2:int9"]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("expected f32, f16, int8 or int4"), "{}", o.stderr);
    // A packed file with a flipped bit in its only tile.
    let good =
        safetensors_file(&dir, "w.safetensors", &[("w", Dtype::F32, vec![8, 8], f32_bytes(64))]);
    let packed = dir.join("w.fbw");
    assert_eq!(fbc(&["pack", &good, "-o", packed.to_str().unwrap()]).code, 0);
    let mut bytes = std::fs::read(&packed).unwrap();
    bytes[4096 + 3] ^= 4;
    std::fs::write(&packed, &bytes).unwrap();
    let o = fbc(&["pack", "--inspect", packed.to_str().unwrap()]);
    assert_eq!(o.code, 1);
    assert!(o.stderr.contains("tensor `w`, tile 0: checksum mismatch"), "{}", o.stderr);
    std::fs::write(&packed, &bytes[..bytes.len() - 3]).unwrap();
    let o = fbc(&["pack", "--inspect", packed.to_str().unwrap()]);
    assert_eq!(o.code, 1);
    assert!(o.stderr.contains("truncated: the header says"), "{}", o.stderr);
}

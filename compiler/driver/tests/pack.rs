//! `fbc pack` and `fbc pack --inspect` on safetensors files made here.

mod common;

use common::{fbc, logits, opencl_device, pseudo, safetensors_file, scratch};
use safetensors::Dtype;

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

/// A gated MLP with an output projection, small enough for the interpreter: hidden 64, FFN
/// 256, sequence 8, 96 logits.
const MLP: &str = r#"func.func @mlp(%x: tensor<1x8x64xf32>, %norm: tensor<64xf32>, %wg: tensor<64x256xf32>, %wu: tensor<64x256xf32>, %wd: tensor<256x64xf32>, %wout: tensor<64x96xf32>) -> tensor<1x8x96xf32> {
  %h = tensor.rmsnorm %x, %norm {eps = 1.0e-05} : (tensor<1x8x64xf32>, tensor<64xf32>) -> tensor<1x8x64xf32>
  %g = tensor.matmul %h, %wg : (tensor<1x8x64xf32>, tensor<64x256xf32>) -> tensor<1x8x256xf32>
  %u = tensor.matmul %h, %wu : (tensor<1x8x64xf32>, tensor<64x256xf32>) -> tensor<1x8x256xf32>
  %a = tensor.silu %g : (tensor<1x8x256xf32>) -> tensor<1x8x256xf32>
  %m = tensor.mul %a, %u : (tensor<1x8x256xf32>, tensor<1x8x256xf32>) -> tensor<1x8x256xf32>
  %d = tensor.matmul %m, %wd : (tensor<1x8x256xf32>, tensor<256x64xf32>) -> tensor<1x8x64xf32>
  %y = tensor.add %x, %d : (tensor<1x8x64xf32>, tensor<1x8x64xf32>) -> tensor<1x8x64xf32>
  %r = tensor.matmul %y, %wout : (tensor<1x8x64xf32>, tensor<64x96xf32>) -> tensor<1x8x96xf32>
  func.return %r : tensor<1x8x96xf32>
}
"#;

#[test]
fn a_model_runs_on_packed_weights_and_int8_logits_stay_within_1e_2() {
    let dir = scratch("pack-run");
    let fbir = common::write(&dir, "mlp.fbir", MLP.as_bytes());
    let x = ("x", Dtype::F32, vec![1, 8, 64], pseudo(8 * 64, 1, 1.0));
    let weights = vec![
        ("norm", Dtype::F32, vec![64], pseudo(64, 2, 1.0)),
        ("wg", Dtype::F32, vec![64, 256], pseudo(64 * 256, 3, 0.125)),
        ("wu", Dtype::F32, vec![64, 256], pseudo(64 * 256, 4, 0.125)),
        ("wd", Dtype::F32, vec![256, 64], pseudo(256 * 64, 5, 0.0625)),
        ("wout", Dtype::F32, vec![64, 96], pseudo(64 * 96, 6, 0.125)),
    ];
    let mut all = weights.clone();
    all.push(x.clone());
    let all = safetensors_file(&dir, "all.safetensors", &all);
    let xs = safetensors_file(&dir, "x.safetensors", &[x]);
    let ws = safetensors_file(&dir, "w.safetensors", &weights);
    let reference = dir.join("ref.safetensors");
    let o = fbc(&["run", &fbir, "--inputs", &all, "--outputs", reference.to_str().unwrap()]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let want = logits(&reference);
    let amax = want.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let mut errors = Vec::new();
    for quant in ["f32", "int8", "int4"] {
        let fbw = dir.join(format!("w.{quant}.fbw"));
        let o = fbc(&["pack", &ws, "-o", fbw.to_str().unwrap(), "--quant", quant]);
        assert_eq!(o.code, 0, "{}", o.stderr);
        let out = dir.join(format!("{quant}.safetensors"));
        let o = fbc(&[
            "run",
            &fbir,
            "--inputs",
            &xs,
            "--weights",
            fbw.to_str().unwrap(),
            "--outputs",
            out.to_str().unwrap(),
        ]);
        assert_eq!(o.code, 0, "{}", o.stderr);
        let got = logits(&out);
        let err = want.iter().zip(&got).fold(0.0f32, |m, (a, b)| m.max((a - b).abs())) / amax;
        errors.push(err);
    }
    // f32 tiles give the same numbers; int8 within 1e-2 of the largest logit; int4 coarser.
    assert_eq!(errors[0], 0.0);
    assert!(errors[1] > 0.0 && errors[1] <= 1e-2, "int8: {}", errors[1]);
    assert!(errors[2] > errors[1] && errors[2] <= 0.2, "int4: {}", errors[2]);
    eprintln!("relative logit error: int8 {:.3e}, int4 {:.3e}", errors[1], errors[2]);
}

#[test]
fn a_weight_of_the_wrong_shape_is_an_error_naming_it() {
    let dir = scratch("pack-run-shape");
    let fbir = common::write(&dir, "mlp.fbir", MLP.as_bytes());
    let ws = safetensors_file(
        &dir,
        "w.safetensors",
        &[("wg", Dtype::F32, vec![64, 255], pseudo(64 * 255, 3, 0.1))],
    );
    let fbw = dir.join("w.fbw");
    assert_eq!(fbc(&["pack", &ws, "-o", fbw.to_str().unwrap()]).code, 0);
    let o = fbc(&["run", &fbir, "--weights", fbw.to_str().unwrap(), "--random-inputs", "1"]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(
        o.stderr.contains("weight `wg` of")
            && o.stderr.contains("expected tensor<64x256xf32>, found f32 [64, 255]"),
        "{}",
        o.stderr
    );
    // `fbc bench --weights` reads the file as `fbc run` does.
    let o = fbc(&["bench", &fbir, "--target", "cpu-jit", "--weights", fbw.to_str().unwrap()]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(o.stderr.contains("expected tensor<64x256xf32>, found f32 [64, 255]"), "{}", o.stderr);
    let ws = safetensors_file(
        &dir,
        "good.safetensors",
        &[("wg", Dtype::F32, vec![64, 256], pseudo(64 * 256, 3, 0.1))],
    );
    let good = dir.join("good.fbw");
    assert_eq!(fbc(&["pack", &ws, "-o", good.to_str().unwrap(), "--quant", "int8"]).code, 0);
    let o = fbc(&[
        "bench",
        &fbir,
        "--target",
        "cpu-jit",
        "--weights",
        good.to_str().unwrap(),
        "--repeat",
        "1",
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.contains("strategy fblayout (-O3)"), "{}", o.stdout);
}

/// `fbc pack --for MODEL --target mali` stores each weight the model uploads as an R-Tile image
/// as that image's texels: every run reads the same numbers as from a file stored by rows, and
/// `fbc run --target opencl` for that profile uploads them as they are.
#[test]
fn pack_for_stores_weights_in_the_texture_form_the_module_uploads() {
    let dir = scratch("pack-for");
    let fbir = common::write(
        &dir,
        "mlp.fbir",
        b"func.func @mlp(%x: tensor<8x64xf32>, %wg: tensor<64x256xf32>, %wd: tensor<256x64xf32>) -> tensor<8x64xf32> {
  %g = tensor.matmul %x, %wg : (tensor<8x64xf32>, tensor<64x256xf32>) -> tensor<8x256xf32>
  %a = tensor.silu %g : (tensor<8x256xf32>) -> tensor<8x256xf32>
  %y = tensor.matmul %a, %wd : (tensor<8x256xf32>, tensor<256x64xf32>) -> tensor<8x64xf32>
  func.return %y : tensor<8x64xf32>
}
",
    );
    let st = safetensors_file(
        &dir,
        "w.safetensors",
        &[
            ("wg", Dtype::F32, vec![64, 256], f32_bytes(64 * 256)),
            ("wd", Dtype::F32, vec![256, 64], f32_bytes(256 * 64)),
        ],
    );
    let x =
        safetensors_file(&dir, "x.safetensors", &[("x", Dtype::F32, vec![8, 64], f32_bytes(512))]);
    let rows = dir.join("rows.fbw");
    let mali = dir.join("mali.fbw");
    let (rows, mali) = (rows.to_str().unwrap(), mali.to_str().unwrap());
    let o = fbc(&["pack", &st, "-o", rows]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let o = fbc(&["pack", &st, "-o", mali, "--for", &fbir, "--target", "mali"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    // The images the mali lowering picks (checked against `--emit memory` by hand), read back
    // exactly.
    let line = |name: &str| {
        o.stdout.lines().find(|l| l.trim_start().starts_with(name)).unwrap_or("").to_string()
    };
    assert!(
        line("wg").contains("f32   rtile 128x32 texels") && line("wg").ends_with("0.000e0"),
        "{}",
        o.stdout
    );
    assert!(
        line("wd").contains("f32   rtile 512x8 texels") && line("wd").ends_with("0.000e0"),
        "{}",
        o.stdout
    );
    let inspect = fbc(&["pack", "--inspect", mali, "--json"]);
    assert_eq!(inspect.code, 0, "{}", inspect.stderr);
    assert!(inspect.stdout.contains("\"texels\""), "{}", inspect.stdout);
    // The same outputs, bit for bit, from either file.
    let run = |target: &[&str], w: &str, out: &str, extra: &[&str]| {
        let out = dir.join(out);
        let mut args =
            vec!["run", &fbir, "--inputs", &x, "--weights", w, "--outputs", out.to_str().unwrap()];
        args.extend_from_slice(target);
        args.extend_from_slice(extra);
        let o = fbc(&args);
        assert_eq!(o.code, 0, "{args:?}: {}", o.stderr);
        (std::fs::read(out).unwrap(), o.stderr)
    };
    assert_eq!(run(&[], rows, "cpu_rows.st", &[]).0, run(&[], mali, "cpu_mali.st", &[]).0);
    if !opencl_device() {
        return;
    }
    for profile in ["mali", "generic"] {
        let t = ["--target", "opencl", "--profile", profile];
        let (a, _) = run(&t, rows, &format!("{profile}_rows.st"), &["-v"]);
        let (b, log) = run(&t, mali, &format!("{profile}_mali.st"), &["-v"]);
        assert_eq!(a, b, "{profile}");
        // Uploaded as stored where the profile lays the weights out as the file does.
        let stored = log.contains("uploading 2 weight(s) as stored in");
        assert_eq!(stored, profile == "mali", "{profile}: {log}");
    }
}

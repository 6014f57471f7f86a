//! Quantised weights read by the kernels: a module whose weights are `tensor.dequantize` ops
//! over packed arguments (`%W.q`, `%W.scales`), fed by `fbc run --weights W.fbw` with the
//! file's packed rows and scales as they are stored. On the interpreter its logits are exactly
//! those of the f32 module with the weights dequantised on the host; the Cranelift JIT, the
//! LLVM JIT (feature `llvm`) and OpenCL (PoCL in CI) agree with the reference executor
//! through `--check`. Without an OpenCL
//! device the OpenCL leg prints a notice, except under `CI=true`, where it fails.

mod common;

use common::{fbc, logits, opencl_device, pseudo, safetensors_file, scratch};
use safetensors::Dtype;

/// The gated MLP of `pack.rs` (hidden 64, FFN 256, 96 logits) with the weights as arguments,
/// transposed (`[out, in]`, PyTorch's `nn.Linear`) where `transposed`.
fn mlp(weight: &dyn Fn(&str, u64, u64) -> (String, String)) -> String {
    let (wg_args, wg) = weight("wg", 256, 64);
    let (wu_args, wu) = weight("wu", 256, 64);
    let (wd_args, wd) = weight("wd", 64, 256);
    let (wo_args, wo) = weight("wout", 96, 64);
    format!(
        "func.func @mlp(%x: tensor<1x8x64xf32>, %norm: tensor<64xf32>{wg_args}{wu_args}{wd_args}{wo_args}) -> tensor<1x8x96xf32> {{
{wg}{wu}{wd}{wo}  %h = tensor.rmsnorm %x, %norm {{eps = 1.0e-05}} : (tensor<1x8x64xf32>, tensor<64xf32>) -> tensor<1x8x64xf32>
  %g = tensor.matmul %h, %wg {{transpose_b = true}} : (tensor<1x8x64xf32>, tensor<256x64xf32>) -> tensor<1x8x256xf32>
  %u = tensor.matmul %h, %wu {{transpose_b = true}} : (tensor<1x8x64xf32>, tensor<256x64xf32>) -> tensor<1x8x256xf32>
  %a = tensor.silu %g : (tensor<1x8x256xf32>) -> tensor<1x8x256xf32>
  %m = tensor.mul %a, %u : (tensor<1x8x256xf32>, tensor<1x8x256xf32>) -> tensor<1x8x256xf32>
  %d = tensor.matmul %m, %wd {{transpose_b = true}} : (tensor<1x8x256xf32>, tensor<64x256xf32>) -> tensor<1x8x64xf32>
  %y = tensor.add %x, %d : (tensor<1x8x64xf32>, tensor<1x8x64xf32>) -> tensor<1x8x64xf32>
  %r = tensor.matmul %y, %wout {{transpose_b = true}} : (tensor<1x8x64xf32>, tensor<96x64xf32>) -> tensor<1x8x96xf32>
  func.return %r : tensor<1x8x96xf32>
}}
"
    )
}

/// `%W: tensor<OUTxINxf32>`, no op.
fn f32_weight(name: &str, out: u64, inn: u64) -> (String, String) {
    (format!(", %{name}: tensor<{out}x{inn}xf32>"), String::new())
}

/// `%W.q`, `%W.scales` and `%W = tensor.dequantize` of them.
fn packed_weight(scheme: &str, group: u64) -> impl Fn(&str, u64, u64) -> (String, String) + '_ {
    move |name, out, inn| {
        let bytes = if scheme == "int4" { inn.div_ceil(2) } else { inn };
        let groups = inn.div_ceil(group);
        let q = format!("tensor<{out}x{bytes}xi8>");
        let s = format!("tensor<{out}x{groups}xf32>");
        (
            format!(", %{name}.q: {q}, %{name}.scales: {s}"),
            format!(
                "  %{name} = tensor.dequantize %{name}.q, %{name}.scales {{group = {group}, scheme = \"{scheme}\"}} : ({q}, {s}) -> tensor<{out}x{inn}xf32>\n"
            ),
        )
    }
}

#[test]
fn packed_weights_run_on_every_target_and_match_host_dequantisation() {
    let dir = scratch("quant-run");
    let f32_fbir = common::write(&dir, "mlp.fbir", mlp(&f32_weight).as_bytes());
    let x = ("x", Dtype::F32, vec![1, 8, 64], pseudo(8 * 64, 1, 1.0));
    let weights = vec![
        ("norm", Dtype::F32, vec![64], pseudo(64, 2, 1.0)),
        ("wg", Dtype::F32, vec![256, 64], pseudo(64 * 256, 3, 0.125)),
        ("wu", Dtype::F32, vec![256, 64], pseudo(64 * 256, 4, 0.125)),
        ("wd", Dtype::F32, vec![64, 256], pseudo(256 * 64, 5, 0.0625)),
        ("wout", Dtype::F32, vec![96, 64], pseudo(64 * 96, 6, 0.125)),
    ];
    let mut all = weights.clone();
    all.push(x.clone());
    let all = safetensors_file(&dir, "all.safetensors", &all);
    let xs = safetensors_file(&dir, "x.safetensors", &[x]);
    let ws = safetensors_file(&dir, "w.safetensors", &weights);
    let reference = dir.join("ref.safetensors");
    let o = fbc(&["run", &f32_fbir, "--inputs", &all, "--outputs", reference.to_str().unwrap()]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let want = logits(&reference);
    let amax = want.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    // int8 per output channel (a group is a whole row of 64 or 256) and in groups of 48 (the
    // last group of a row of 64 is 16 long); int4 in groups of 32.
    for (scheme, group) in [("int8", 256u64), ("int8", 48), ("int4", 32)] {
        let fbw = dir.join(format!("w.{scheme}.{group}.fbw"));
        let fbw = fbw.to_str().unwrap();
        let g = group.to_string();
        let o = fbc(&["pack", &ws, "-o", fbw, "--quant", scheme, "--group", &g]);
        assert_eq!(o.code, 0, "{}", o.stderr);
        // `fbc pack` caps a group at the row length: per output channel is group = row.
        let module = mlp(&|name, out, inn| packed_weight(scheme, group.min(inn))(name, out, inn));
        let fbir = common::write(&dir, &format!("q.{scheme}.{group}.fbir"), module.as_bytes());
        // The interpreter: exactly the f32 module's logits with host-dequantised weights.
        let host = dir.join(format!("host.{scheme}.{group}.safetensors"));
        let packed = dir.join(format!("packed.{scheme}.{group}.safetensors"));
        // `fbc run FILE --inputs x --weights W.fbw EXTRA...`.
        let run = |file: &str, extra: &[&str]| {
            let mut args = vec!["run", file, "--inputs", &xs, "--weights", fbw];
            args.extend_from_slice(extra);
            fbc(&args)
        };
        for (file, out) in [(&f32_fbir, &host), (&fbir, &packed)] {
            let o = run(file, &["--outputs", out.to_str().unwrap()]);
            assert_eq!(o.code, 0, "{scheme} {group}: {}", o.stderr);
        }
        let (h, p) = (logits(&host), logits(&packed));
        assert_eq!(h, p, "{scheme} group {group}: packed and host-dequantised logits differ");
        let err = want.iter().zip(&p).fold(0.0f32, |m, (a, b)| m.max((a - b).abs())) / amax;
        eprintln!("{scheme} group {group}: logits move by {err:.3e} of the largest");
        assert!(err > 0.0 && err < if scheme == "int4" { 0.2 } else { 1e-2 }, "{err}");
        // `--f32-weights` reports that error itself, for the packed module (its f32 twin reads
        // `wg` where it decoded `wg.q`) and for the f32 module given the dequantised weights.
        for (file, target) in [(&fbir, "cpu"), (&fbir, "cpu-jit"), (&f32_fbir, "cpu")] {
            let o = run(file, &["--f32-weights", &ws, "--target", target]);
            assert_eq!(o.code, 0, "{scheme} {group} {target}: {}", o.stderr);
            let line = o
                .stdout
                .lines()
                .find(|l| l.starts_with(&format!("against the f32 weights of {ws}: result0: ")))
                .unwrap_or_else(|| panic!("no comparison in {}", o.stdout));
            let share: f32 = line
                .split(", ")
                .nth(1)
                .and_then(|p| p.split(' ').next())
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("no share in {line}"));
            assert!((share - err).abs() <= 1e-3 * err, "{target}: {share} against {err}: {line}");
        }
        // The kernels against the reference executor on the same packed weights.
        let mut targets = vec!["cpu-jit"];
        #[cfg(feature = "llvm")]
        targets.push("cpu-llvm");
        if opencl_device() {
            targets.push("opencl");
        }
        for target in targets {
            let o = run(&fbir, &["--target", target, "--check"]);
            assert_eq!(o.code, 0, "{scheme} {group} on {target}: {}", o.stderr);
            assert!(o.stdout.contains("check passed"), "{target}: {}", o.stdout);
        }
    }
}

#[test]
fn f32_weights_must_give_every_weight_read_quantised() {
    let dir = scratch("quant-f32-missing");
    let fbir = common::write(&dir, "q.fbir", mlp(&packed_weight("int8", 64)).as_bytes());
    let some = safetensors_file(
        &dir,
        "some.safetensors",
        &[("wg", Dtype::F32, vec![256, 64], pseudo(64 * 256, 3, 0.125))],
    );
    let none = safetensors_file(
        &dir,
        "none.safetensors",
        &[("v", Dtype::F32, vec![2], pseudo(2, 9, 1.0))],
    );
    let run = |f32: &str| fbc(&["run", &fbir, "--random-inputs", "1", "--f32-weights", f32]);
    let o = run(&some);
    assert_eq!(o.code, 1, "{}", o.stderr);
    let missing = |w: &str| {
        format!(
            "{some}: error: no tensor `{w}`: @mlp reads it quantised (`{w}.q`, `{w}.scales`), \
             so the f32 reference needs it\n"
        )
    };
    let want = ["wu", "wd", "wout"].map(missing).concat();
    assert_eq!(o.stderr, want);
    assert!(o.stdout.is_empty(), "{}", o.stdout);
    let fbir32 = common::write(&dir, "f.fbir", mlp(&f32_weight).as_bytes());
    let o = fbc(&["run", &fbir32, "--random-inputs", "1", "--f32-weights", &none]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert_eq!(o.stderr, format!("{none}: error: no tensor names an argument of @mlp\n"));
}

#[test]
fn a_packed_weight_that_does_not_fit_its_dequantize_is_an_error_naming_it() {
    let dir = scratch("quant-mismatch");
    let ws = safetensors_file(
        &dir,
        "w.safetensors",
        &[("wg", Dtype::F32, vec![256, 64], pseudo(64 * 256, 3, 0.125))],
    );
    let fbw = dir.join("w.fbw");
    let fbw = fbw.to_str().unwrap();
    let o = fbc(&["pack", &ws, "-o", fbw, "--quant", "int8", "--group", "32"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let module = mlp(&packed_weight("int8", 16));
    let fbir = common::write(&dir, "q.fbir", module.as_bytes());
    let o = fbc(&["run", &fbir, "--weights", fbw, "--random-inputs", "1"]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(
        o.stderr.contains(&format!("error: weight `wg` of {fbw}: int8 [256, 64] in groups of 32 gives scales: expected tensor<256x2xf32> for `%wg.scales`, found tensor<256x4xf32>")),
        "{}",
        o.stderr
    );
    let module = mlp(&packed_weight("int4", 32));
    let fbir = common::write(&dir, "q4.fbir", module.as_bytes());
    let o = fbc(&["run", &fbir, "--weights", fbw, "--random-inputs", "1"]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(
        o.stderr.contains(&format!("error: weight `wg` of {fbw}: int8 [256, 64] in groups of 32 gives packed rows: expected tensor<256x64xi8> for `%wg.q`, found tensor<256x32xi8>")),
        "{}",
        o.stderr
    );
}

/// `fbc gen --inference --quant`: every linear weight of the decoder is a packed argument pair
/// decoded by a `tensor.dequantize` fused into its product (no weight-sized f32 storage at -O3
/// on mali), and `@prefill` and `@decode` agree with the reference executor on the Cranelift
/// JIT and on OpenCL (random bytes and scales).
#[test]
fn generated_decoders_with_packed_weights_run_on_every_target() {
    let dir = scratch("quant-gen");
    for (scheme, group) in [("int8", "64"), ("int4", "32")] {
        let out = dir.join(format!("llama.{scheme}.fbir"));
        let out = out.to_str().unwrap();
        let o = fbc(&[
            "gen",
            "llama3.2-1b",
            "--inference",
            "--layers",
            "1",
            "--seq",
            "4",
            "--vocab",
            "64",
            "--max-seq",
            "8",
            "--quant",
            scheme,
            "--group",
            group,
            "-o",
            out,
        ]);
        assert_eq!(o.code, 0, "{}", o.stderr);
        let text = std::fs::read_to_string(out).unwrap();
        // Seven linear weights a layer, in each of the two functions.
        assert_eq!(text.matches("tensor.dequantize").count(), 14, "{scheme}");
        assert!(text.contains(&format!(
            "%l0_wq.q: tensor<2048x{}xi8>",
            if scheme == "int4" { 1024 } else { 2048 }
        )));
        let o = fbc(&[out, "-O3", "--target", "mali", "--emit", "memory"]);
        assert_eq!(o.code, 0, "{}", o.stderr);
        // Each product decodes its weight in one launch: whole, or the partial sums of a
        // split-K (whose sums read no weight).
        let products = o
            .stdout
            .lines()
            .filter(|l| l.contains("source = \"tensor.dequantize") && !l.contains(" sum]"))
            .count();
        assert_eq!(products, 14, "{scheme}");
        for line in o.stdout.lines().filter(|l| l.contains("memory.alloc")) {
            // The smallest weight is 2048 × 512 values: no f32 storage of one.
            let elems: u64 = line
                .split("buffer<")
                .nth(1)
                .and_then(|r| r.split(',').next())
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            assert!(elems < 2048 * 512 || !line.contains("f32>"), "{line}");
        }
        let mut targets = vec!["cpu-jit"];
        #[cfg(feature = "llvm")]
        targets.push("cpu-llvm");
        if opencl_device() {
            targets.push("opencl");
        }
        for target in targets {
            for entry in ["prefill", "decode"] {
                let o = fbc(&[
                    "run",
                    out,
                    "--entry",
                    entry,
                    "--random-inputs",
                    "3",
                    "--target",
                    target,
                    "--check",
                ]);
                assert_eq!(o.code, 0, "{scheme} {entry} on {target}: {}", o.stderr);
                assert!(o.stdout.contains("check passed"), "{}", o.stdout);
            }
        }
    }
    // Packed weights are frozen: no --quant for a training graph, nor a group without it.
    assert_eq!(fbc(&["gen", "llama3.2-1b", "--quant", "int8"]).code, 2);
    assert_eq!(fbc(&["gen", "llama3.2-1b", "--inference", "--group", "8"]).code, 2);
    let o = fbc(&["gen", "llama3.2-1b", "--inference", "--layers", "1", "--quant", "int2"]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("`--quant` must be one of int8, int4, found `int2`"), "{}", o.stderr);
}

/// `x [rows, 64] · Wᵀ` with `W [256, 64]` packed (`scheme`, groups of 32, `row_bytes` a row).
fn packed_product(scheme: &str, row_bytes: u64, rows: u64) -> String {
    format!(
        "func.func @f(%x: tensor<{rows}x64xf32>, %w.q: tensor<256x{row_bytes}xi8>, %w.scales: tensor<256x2xf32>) -> tensor<{rows}x256xf32> {{
  %w = tensor.dequantize %w.q, %w.scales {{group = 32, scheme = \"{scheme}\"}} : (tensor<256x{row_bytes}xi8>, tensor<256x2xf32>) -> tensor<256x64xf32>
  %y = tensor.matmul %x, %w {{transpose_b = true}} : (tensor<{rows}x64xf32>, tensor<256x64xf32>) -> tensor<{rows}x256xf32>
  func.return %y : tensor<{rows}x256xf32>
}}
"
    )
}

/// A product with a packed weight runs as a contraction kernel that decodes the weight while it
/// stages it: the skinny kernel for a decode-sized product, the tiled one otherwise, with the
/// nibbles taken by shifts and masks (no division helper), and the reference executor's
/// numbers (`--check`).
#[test]
fn packed_products_are_staged_by_the_contraction_kernels() {
    if !opencl_device() {
        return;
    }
    let dir = scratch("quant-kernels");
    for (scheme, row_bytes) in [("int8", 64), ("int4", 32)] {
        for rows in [4u64, 96] {
            let text = packed_product(scheme, row_bytes, rows);
            let name = format!("{scheme}_{rows}");
            let path = common::write(&dir, &format!("{name}.fbir"), text.as_bytes());
            let dump = dir.join(&name);
            let o = fbc(&[
                "run",
                &path,
                "--target",
                "opencl",
                "-O3",
                "--random-inputs",
                "5",
                "--check",
                "--dump-kernels",
                dump.to_str().unwrap(),
            ]);
            assert_eq!(o.code, 0, "{name}: {}", o.stderr);
            // The product, or its partial sums where split-K cut it.
            let partial = dump.join("f_matmul_y_partial.cl");
            let product = if partial.exists() { partial } else { dump.join("f_matmul_y.cl") };
            let file = std::fs::read_to_string(product).expect("the product");
            // The kernel, after the prelude.
            let src = &file[file.find("__kernel").expect("a kernel")..];
            // A decode-sized product is skinny, unless split-K cut its reduction into chunks
            // too short for the skinny kernel's lanes along the outputs (then it is tiled).
            let split = dump.join("f_matmul_y_partial.cl").exists();
            let form = if rows == 4 && !split { "// skinny [" } else { "outputs per work-item" };
            assert!(src.contains(form), "{name}: {src}");
            assert!(src.contains("__global const char* x1"), "{name}: {src}");
            assert!(!src.contains("fbc_imod(") && !src.contains("fbc_idiv("), "{name}: {src}");
        }
    }
}

/// On the CPU JITs a product with a packed weight is a packed contraction (the weight decoded
/// where its panels are packed) whose results are those of the reference executor, bit for bit.
#[test]
fn packed_products_are_packed_contractions_on_the_cpu_jits_bit_for_bit() {
    let dir = scratch("quant-jit-gemm");
    let mut targets = vec!["cpu-jit"];
    if cfg!(feature = "llvm") {
        targets.push("cpu-llvm");
    }
    for (scheme, row_bytes) in [("int8", 64), ("int4", 32)] {
        for rows in [8u64, 96] {
            let text = packed_product(scheme, row_bytes, rows);
            let name = format!("{scheme}_{rows}");
            let path = common::write(&dir, &format!("{name}.fbir"), text.as_bytes());
            let lowered = dir.join(format!("{name}.mem.fbir"));
            let lowered = lowered.to_str().unwrap();
            let o = fbc(&[&path, "-O3", "--target", "cpu", "--emit", "memory", "-o", lowered]);
            assert_eq!(o.code, 0, "{name}: {}", o.stderr);
            let run = |target: &str| {
                let out = dir.join(format!("{name}.{target}.st"));
                let o = fbc(&[
                    "run",
                    lowered,
                    "--target",
                    target,
                    "--random-inputs",
                    "4",
                    "--outputs",
                    out.to_str().unwrap(),
                    "-v",
                ]);
                assert_eq!(o.code, 0, "{name} {target}: {}", o.stderr);
                (std::fs::read(out).unwrap(), o.stderr)
            };
            let (reference, _) = run("cpu");
            for t in &targets {
                let (got, log) = run(t);
                assert!(log.contains("(1 packed contractions"), "{name} {t}: {log}");
                assert!(got == reference, "{name} {t}: not the reference executor's bits");
            }
        }
    }
}

/// In a generated decoder with packed weights compiled for the nvidia profile, every product
/// with a packed weight is a contraction kernel: skinny in `@decode` (one token: lanes along
/// the output columns, `[skinny] packed_values` columns a lane, their bytes one vector read:
/// `char8` for INT8 and `char4` for INT4 with the nvidia profile's 8, `char16` and `char8`
/// with 16),
/// tiled or skinny in `@prefill`; and both keep the reference executor's numbers on PoCL.
#[test]
fn generated_packed_decoders_run_every_product_as_a_contraction_kernel() {
    let dir = scratch("quant-decoder-kernels");
    // The nvidia profile with 16 packed values a lane.
    let builtin = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../dialects/target/profiles/nvidia.toml"),
    )
    .unwrap();
    assert!(builtin.contains("\npacked_values = 8\n"));
    let wide = builtin.replace("\npacked_values = 8\n", "\npacked_values = 16\n");
    let wide = common::write(&dir, "nvidia16.toml", wide.as_bytes());
    for scheme in ["int4", "int8"] {
        let fbir = dir.join(format!("{scheme}.fbir"));
        let fbir = fbir.to_str().unwrap();
        let o = fbc(&[
            "gen",
            "llama3.2-1b",
            "--inference",
            "--layers",
            "1",
            "--seq",
            "16",
            "--max-seq",
            "64",
            "--vocab",
            "512",
            "--quant",
            scheme,
            "-o",
            fbir,
        ]);
        assert_eq!(o.code, 0, "{}", o.stderr);
        let half = scheme == "int4";
        for (profile, values) in [("nvidia", 8), (wide.as_str(), 16)] {
            let vector = format!("char{}", if half { values / 2 } else { values });
            let what = format!("{scheme} {values}");
            let out = dir.join(format!("{scheme}_{values}.out"));
            let o = fbc(&[fbir, "-O3", "--target", profile, "-o", out.to_str().unwrap()]);
            assert_eq!(o.code, 0, "{}", o.stderr);
            let file = |suffix: &str| {
                std::fs::read_dir(&out)
                    .unwrap()
                    .filter_map(Result::ok)
                    .map(|e| e.path())
                    .find(|p| p.to_string_lossy().ends_with(suffix))
                    .unwrap_or_else(|| panic!("a {suffix}"))
            };
            let m: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(file(".manifest.json")).unwrap())
                    .unwrap();
            let cl = std::fs::read_to_string(file(".cl")).unwrap();
            for f in m["functions"].as_array().unwrap() {
                let name = f["name"].as_str().unwrap();
                let products: Vec<&serde_json::Value> = f["steps"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|s| s["op"] == "launch")
                    .filter(|s| s["source"].as_str().unwrap_or("").contains("tensor.dequantize"))
                    // Not the sums of a split-K's partial products (they read no weight).
                    .filter(|s| !s["source"].as_str().unwrap_or("").contains(" sum]"))
                    .collect();
                // A merged launch (the nvidia profile's `[skinny] merge_launches`) lists its
                // parts' work-groups in its comment.
                let parts = |kernel: &str| {
                    let at = cl.find(&format!("void {kernel}(")).expect("the kernel");
                    let head = &cl[cl[..at].rfind("\n}\n").map_or(0, |i| i + 3)..at];
                    let listed = head.lines().filter(|l| {
                        l.starts_with("//   groups [") || l.starts_with("//   the same groups")
                    });
                    listed.count().max(1)
                };
                let count: usize =
                    products.iter().map(|p| parts(p["kernel"].as_str().unwrap())).sum();
                // q, k, v, o, gate, up, down.
                assert_eq!(count, 7, "{what} {name}");
                for p in products {
                    let (tiled, skinny) = (p["tiled"] == true, p["skinny"] == true);
                    let ok = if name == "decode" { skinny } else { tiled || skinny };
                    assert!(ok, "{what} {name}: {}", p["kernel"]);
                    if name != "decode" {
                        continue;
                    }
                    // The decode step's kernel reads `values` columns' bytes at once.
                    let kernel = p["kernel"].as_str().unwrap();
                    let at = cl.find(&format!("void {kernel}(")).expect("the kernel");
                    let body = &cl[at..at + cl[at..].find("\n}\n").unwrap()];
                    let note = if values == 4 { "four".to_string() } else { values.to_string() };
                    let note = format!("read {note} values at a time");
                    assert!(body.contains(&note), "{what} {kernel}: {body}");
                    assert!(
                        body.contains(&format!("(*(__global const {vector}*)(x")),
                        "{what} {kernel}: {body}"
                    );
                }
            }
            if !opencl_device() {
                continue;
            }
            // The prefill's products have 16 rows: four values a lane under either profile.
            let entries: &[&str] = if values == 8 { &["decode", "prefill"] } else { &["decode"] };
            for entry in entries {
                let o = fbc(&[
                    "run",
                    fbir,
                    "--entry",
                    entry,
                    "--target",
                    "opencl",
                    "--profile",
                    profile,
                    "--random-inputs",
                    "3",
                    "--check",
                ]);
                assert_eq!(o.code, 0, "{what} {entry}: {}", o.stderr);
                assert!(o.stdout.contains("check passed"), "{what} {entry}: {}", o.stdout);
            }
        }
    }
}

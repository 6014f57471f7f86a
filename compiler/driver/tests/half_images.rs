//! `f16` image storage (`lower-to-memory{half-images=true}`, `--half-images`): the CPU JIT equals
//! the reference executor bit for bit on lowered modules with `f16` images (the matmul, softmax
//! and elementwise kernels at -O3), the rounding is really there (the results differ from `f32`
//! image storage, and every value downloaded from an `f16` image is an `f16` number), the flag on
//! the command line (compile, `run --target cpu-jit --check`, misuse), and the refusal for a
//! target without images. The OpenCL runs are in `opencl.rs`.

use fbc_dialects::memory::scalar::round_f16;
use fbc_dialects::memory::MemType;
use fbc_ir::pass::Statistics;
use fbc_ir::Module;
use fbc_runtime::interp::{random_inputs, Interpreter, Options, Value};

mod common;

use common::{half_image_cases as cases, lower_o3 as lower_for, parse};

fn lower(text: &str, half: bool) -> (Module, Statistics) {
    let generic = fbc_target::builtin("generic").expect("generic");
    lower_for(text, half, &generic).unwrap_or_else(|e| panic!("{e}"))
}

fn f32s(v: &[Value]) -> Vec<f32> {
    v.iter().flat_map(|x| x.as_f32().expect("f32 results").data().to_vec()).collect()
}

#[test]
fn the_jit_equals_the_reference_executor_bit_for_bit_with_f16_images() {
    for (name, text) in cases() {
        let original = parse(&text);
        let inputs = random_inputs(&original, "main", 7).expect("inputs");
        let (half, stats) = lower(&text, true);
        let images = stats.get("lower-to-memory", "images");
        assert!(images > 0, "{name}: no images at -O3");
        assert_eq!(stats.get("lower-to-memory", "half-images"), images, "{name}");
        let f = half.find_func("main").expect("main");
        let reference = Interpreter::new(&half).run_id(f, inputs.clone()).expect("reference");
        let (jit, _) =
            fbc_runtime::device::cpu_jit::run(&half, f, inputs.clone(), Options::default())
                .expect("jit");
        let (r, j) = (f32s(&reference), f32s(&jit));
        assert_eq!(r.len(), j.len());
        for (i, (a, b)) in r.iter().zip(&j).enumerate() {
            assert_eq!(a.to_bits(), b.to_bits(), "{name}: element {i}: reference {a}, JIT {b}");
        }
        // The rounding is there: f32 images give other numbers, and every value of an f16
        // image downloaded as a result is an f16 number.
        let (full, _) = lower(&text, false);
        let ff = full.find_func("main").expect("main");
        let r32 = f32s(&Interpreter::new(&full).run_id(ff, inputs).expect("f32 images"));
        let differ = r.iter().zip(&r32).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
        assert!(differ > r.len() / 4, "{name}: only {differ} of {} differ", r.len());
        let result_from_image = half.all_ops().any(|op| {
            let d = half.op(op);
            d.def.is("memory.download")
                && MemType::from_type(half.value_type(d.operands[0])).is_some_and(|t| t.is_half())
        });
        if result_from_image {
            assert!(r.iter().all(|&x| round_f16(x).to_bits() == x.to_bits()), "{name}");
        }
    }
}

#[test]
fn half_images_are_refused_for_a_target_without_images() {
    let mut p = fbc_target::builtin("generic").expect("generic");
    p.image.supported = false;
    p.name = "noimages".into();
    let text = &cases()[0].1;
    let Err(e) = lower_for(text, true, &p) else {
        panic!("half-images lowered for a target without images")
    };
    assert!(
        e.contains(
            "lower-to-memory: half-images=true, but target `noimages` has no image support, so \
             no f16 image storage"
        ),
        "{e}"
    );
    // Without the option the same target lowers (R-Tiles fall back to buffers).
    assert!(lower_for(text, false, &p).is_ok());
}

#[test]
fn the_flag_on_the_command_line() {
    let dir = common::scratch("half-cli");
    let text = &cases()[1].1;
    let input = common::write(&dir, "attn.fbir", text.as_bytes());
    // The JIT with --check: compared with the f16 model (which it equals), reported.
    let o = common::fbc(&[
        "run",
        &input,
        "--target",
        "cpu-jit",
        "--half-images",
        "--random-inputs",
        "3",
        "--check",
    ]);
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stdout.contains("check: f16 image storage: each result against the reference executor")
            && o.stdout
                .contains("against the f16 model: max abs error 0.000e0, 0 element(s) outside"),
        "{}",
        o.stdout
    );
    assert!(o.stdout.contains("check passed"), "{}", o.stdout);
    // Compiling to OpenCL: f16 storage in the manifest, the kernels still read and write floats.
    let out = dir.join("attn.opencl");
    let out_s = out.to_string_lossy().into_owned();
    let o = common::fbc(&[&input, "-O3", "--target", "mali", "--half-images", "-o", &out_s]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let manifest = std::fs::read_to_string(out.join("attn.manifest.json")).expect("manifest");
    assert!(manifest.contains(r#""dtype": "f16""#), "{manifest}");
    let cl = std::fs::read_to_string(out.join("attn.cl")).expect("source");
    assert!(cl.contains("read_imagef") && cl.contains("write_imagef"), "{cl}");
    // Stores round to nearest even explicitly (`write_imagef` may round toward zero); apart from
    // that helper of the prelude (and comments), nothing is half.
    assert!(cl.contains("fbc_rte_half4((float4)("), "{cl}");
    let kernels: String = cl
        .lines()
        .filter(|l| !l.starts_with("//") && !l.contains("inline float4 fbc_rte_half4"))
        .collect();
    for h in [" half", "(half", "vload_half", "cl_khr_fp16"] {
        assert!(!kernels.contains(h), "kernels compute in float: {cl}");
    }
    // Without the flag nothing is f16.
    let o = common::fbc(&[&input, "-O3", "--target", "mali", "-o", &out_s]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let manifest = std::fs::read_to_string(out.join("attn.manifest.json")).expect("manifest");
    assert!(!manifest.contains(r#""f16""#), "{manifest}");
    // Misuse is a usage error (exit 2).
    let o = common::fbc(&["run", &input, "--half-images", "--random-inputs", "1"]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("--half-images sets the storage of lowered kernels"), "{}", o.stderr);
    let o = common::fbc(&[&input, "-O3", "--emit", "ir", "--half-images"]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("it needs --emit opencl or memory, not --emit ir"), "{}", o.stderr);
    // The pass option is listed.
    let o = common::fbc(&["passes"]);
    assert!(o.stdout.contains("half-images=bool (default: false)"), "{}", o.stdout);
}

/// A value beyond f16's range (±65504) in an f16 image: the f16 model and the JIT agree (both
/// infinite), but `--check` fails, since the interpreter's result is finite.
#[test]
fn check_fails_where_f16_storage_overflows() {
    let dir = common::scratch("half-overflow");
    let text =
        "func.func @main(%x: tensor<64x64xf32>, %w: tensor<64x64xf32>) -> tensor<64x64xf32> {
  %y = tensor.matmul %x, %w : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
  %z = tensor.scale %y {factor = 1.0e5} : (tensor<64x64xf32>) -> tensor<64x64xf32>
  %u = tensor.matmul %z, %w : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
  %r = tensor.scale %u {factor = 1.0e-5} : (tensor<64x64xf32>) -> tensor<64x64xf32>
  func.return %r : tensor<64x64xf32>
}
";
    let input = common::write(&dir, "ovf.fbir", text.as_bytes());
    let run = |half: bool| {
        let mut args = vec!["run", &input, "--target", "cpu-jit", "--profile", "mali"];
        args.extend(["--random-inputs", "1", "--check"]);
        if half {
            args.push("--half-images");
        }
        common::fbc(&args)
    };
    let o = run(false);
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    let o = run(true);
    assert_eq!(o.code, 1, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stdout.contains("against the f16 model: max abs error 0.000e0, 0 element(s) outside the bound; 4096 element(s) not finite where the interpreter's are"),
        "{}",
        o.stdout
    );
    assert!(o.stderr.contains("results differ from the reference executor's f16 storage model, or leave f16's range: result0"), "{}", o.stderr);
}

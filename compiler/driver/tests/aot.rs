//! `fbc FILE --target cpu-llvm --emit obj|asm|llvm`: ahead-of-time code and its C header. The
//! shipped example (`examples/aot`) and a generated training step are compiled, linked with C
//! programs by the system's `cc` and run; their results are compared with the reference
//! interpreter's on the same inputs. Also the header's exact text, the assembly and IR outputs,
//! a fault reported as the entry point's status, and the usage errors.
#![cfg(feature = "llvm")]

use std::path::{Path, PathBuf};
use std::process::Command;

use fbc_runtime::interp::{compare_values, Interpreter, Mode, Options, Tolerance, Value};
use fbc_runtime::reference::Tensor;

mod common;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The tolerance against the f32 interpreter: kernels sum in another order (packed
/// contractions, split reductions) and call the C library's `erff`.
const TOL: Tolerance = Tolerance { rtol: 1e-4, atol: 1e-5 };

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `fbc FILE -O3 --target cpu-llvm --emit EMIT -o DIR [extra]`, which must succeed.
fn compile_with(file: &Path, emit: &str, dir: &Path, extra: &[&str]) {
    let (file, dir) = (file.to_string_lossy(), dir.to_string_lossy());
    let mut args = vec![file.as_ref(), "-O3", "--target", "cpu-llvm", "--emit", emit, "-o", &dir];
    args.extend_from_slice(extra);
    let out = common::fbc(&args);
    assert_eq!(out.code, 0, "{}", out.stderr);
}

fn compile(file: &Path, emit: &str, dir: &Path) {
    compile_with(file, emit, dir, &[]);
}

/// `cc -O2 -Wall -Werror -I INCLUDE SOURCES -lm -o EXE`.
fn link(include: &Path, sources: &[&Path], exe: &Path) {
    let mut cc = Command::new("cc");
    cc.args(["-O2", "-Wall", "-Wextra", "-Werror", "-I"]).arg(include);
    cc.args(sources).arg("-lm").arg("-o").arg(exe);
    run(&mut cc);
}

/// Little-endian 4-byte values of `v` (f32 or i32).
fn bytes_of(v: &Value) -> Vec<u8> {
    match v {
        Value::F32(t) => t.data().iter().flat_map(|x| x.to_le_bytes()).collect(),
        Value::I32(t) => t.data().iter().flat_map(|x| x.to_le_bytes()).collect(),
        Value::F64(_) => panic!("no f64 at the boundary"),
    }
}

/// A value shaped like `like` from the next little-endian values of `bytes`.
fn value_like(like: &Value, bytes: &mut &[u8]) -> Value {
    let n: usize = like.shape().iter().product();
    let (head, rest) = bytes.split_at(4 * n);
    *bytes = rest;
    let words = head.chunks_exact(4).map(|c| [c[0], c[1], c[2], c[3]]);
    let shape = like.shape().to_vec();
    match like {
        Value::I32(_) => {
            Value::I32(Tensor::new(shape, words.map(i32::from_le_bytes).collect()).unwrap())
        }
        _ => Value::F32(Tensor::new(shape, words.map(f32::from_le_bytes).collect()).unwrap()),
    }
}

fn load(path: &Path) -> fbc_ir::Module {
    let (_, m) = fbc::Driver::default().load(path).expect("the module loads");
    m
}

#[test]
fn the_example_links_and_matches_the_interpreter() {
    let dir = common::scratch("aot-example");
    let src = repo().join("examples/aot");
    let build = dir.join("build");
    compile(&src.join("mlp.fbir"), "obj", &build);
    let exe = dir.join("mlp");
    link(&build, &[&src.join("main.c"), &build.join("mlp.o")], &exe);
    let dump = dir.join("dump.bin");
    let stdout = run(Command::new(&exe).arg(&dump));
    assert!(stdout.starts_with("y[0..4] = "), "{stdout}");
    // The dump: the five inputs, then the result, in parameter order.
    let m = load(&src.join("mlp.fbir"));
    let like = fbc_runtime::interp::random_inputs(&m, "block", 1).expect("inputs");
    let bytes = std::fs::read(&dump).expect("the dump");
    let mut rest = bytes.as_slice();
    let inputs: Vec<Value> = like.iter().map(|v| value_like(v, &mut rest)).collect();
    let want = Interpreter::new(&m).run("block", inputs).expect("the interpreter");
    let got = value_like(&want[0], &mut rest);
    assert!(rest.is_empty(), "{} bytes left in the dump", rest.len());
    compare_values(&want[0], &got, TOL).expect("the linked example's result");
}

/// A C program calling `symbol` (declared in `header` as `uint32_t SYMBOL(PARAMS);`): reads
/// every input from `argv[1]` in parameter order, calls it, writes every output to `argv[2]`,
/// and exits with its status.
fn harness(header: &str, symbol: &str) -> String {
    let lines: Vec<&str> = header.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.starts_with(&format!("uint32_t {symbol}(")))
        .unwrap_or_else(|| panic!("no declaration of {symbol} in\n{header}"));
    let decl = lines[at];
    // The parameters' comments are the lines right above the declaration.
    let first = lines[..at].iter().rposition(|l| l.is_empty()).map_or(0, |b| b + 1);
    let comments = &lines[first..at];
    let params = decl.trim_end_matches(");").split_once('(').expect("parameters").1;
    let mut c = String::from("#include <stdio.h>\n#include <stdlib.h>\n#include \"model.h\"\n\n");
    c.push_str("int main(int argc, char **argv) {\n  (void)argc;\n");
    c.push_str("  FILE *in = fopen(argv[1], \"rb\"), *out = fopen(argv[2], \"wb\");\n");
    c.push_str("  if (!in || !out) return 100;\n");
    let mut names = Vec::new();
    for (i, p) in params.split(", ").filter(|&p| p != "void").enumerate() {
        // `const float *x` or `int32_t *result0`: the element type and whether it is read.
        let input = p.starts_with("const ");
        let ty = if p.contains("int32_t") { "int32_t" } else { "float" };
        // The element count is in the header's comment for the parameter.
        let name = p.rsplit('*').next().expect("a name");
        let dims = comments
            .iter()
            .find(|l| l.contains(&format!(" {name}: ")))
            .and_then(|l| l.split_once('[').map(|(_, d)| d.trim_end_matches("] */").to_string()))
            .unwrap_or_else(|| panic!("no shape of {name}"));
        let n: u64 = dims
            .split("][")
            .filter(|d| !d.is_empty())
            .map(|d| d.parse::<u64>().expect("a dimension"))
            .product();
        c.push_str(&format!(
            "  {ty} *p{i} = malloc({n} * sizeof({ty}) + 1);\n  if (!p{i}) return 101;\n"
        ));
        if input {
            c.push_str(&format!("  if (fread(p{i}, sizeof({ty}), {n}, in) != {n}) return 102;\n"));
        }
        names.push((i, input, ty, n));
    }
    let args: Vec<String> = names.iter().map(|(i, ..)| format!("p{i}")).collect();
    c.push_str(&format!("  uint32_t status = {symbol}({});\n", args.join(", ")));
    for (i, input, ty, n) in &names {
        if !input {
            c.push_str(&format!("  fwrite(p{i}, sizeof({ty}), {n}, out);\n"));
        }
    }
    c.push_str("  fclose(in);\n  fclose(out);\n  return (int)status;\n}\n");
    c
}

/// A module compiled ahead of time: its output directory, header and object.
struct Built {
    dir: PathBuf,
    header: String,
    object: PathBuf,
    /// The entry points' prefix (the module's name).
    prefix: String,
}

/// Compiles `file` ahead of time into a scratch directory named after `tag`.
fn build(file: &Path, tag: &str) -> Built {
    build_with(file, tag, &[])
}

/// [`build`] with more arguments for `fbc`.
fn build_with(file: &Path, tag: &str, extra: &[&str]) -> Built {
    let dir = common::scratch(tag);
    let out = dir.join("build");
    compile_with(file, "obj", &out, extra);
    let header_path = std::fs::read_dir(&out)
        .expect("the output")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "h"))
        .expect("a header");
    let header = std::fs::read_to_string(&header_path).expect("the header");
    // The harnesses include it as `model.h`.
    std::fs::copy(&header_path, out.join("model.h")).expect("copy");
    let prefix = header_path.file_stem().unwrap().to_string_lossy().replace('-', "_");
    Built { object: header_path.with_extension("o"), header, prefix, dir }
}

/// Runs `func` of `b` on `inputs` through a linked harness: its exit status and outputs
/// (shaped like `like`; none unless the status is 0).
fn call(b: &Built, func: &str, inputs: &[Value], like: &[Value]) -> (i32, Vec<Value>) {
    let main = b.dir.join(format!("{func}.c"));
    std::fs::write(&main, harness(&b.header, &format!("{}_{func}", b.prefix))).expect("write");
    let exe = b.dir.join(func);
    link(&b.dir.join("build"), &[&main, &b.object], &exe);
    let (input, output) = (b.dir.join("in.bin"), b.dir.join("out.bin"));
    std::fs::write(&input, inputs.iter().flat_map(bytes_of).collect::<Vec<u8>>()).expect("write");
    let status = Command::new(&exe).arg(&input).arg(&output).status().expect("the harness runs");
    let code = status.code().unwrap_or(-1);
    let bytes = std::fs::read(&output).unwrap_or_default();
    let mut rest = bytes.as_slice();
    let outs = if code == 0 {
        like.iter().map(|v| value_like(v, &mut rest)).collect()
    } else {
        Vec::new()
    };
    (code, outs)
}

/// Runs `func` natively and in the interpreter, in f32 and f64, on random inputs (seed 7) and
/// holds every result to `--check`'s bound: `|native - ref64| <= 1e-5 + 1e-4·(|ref64| +
/// max|ref64|) + 8·E32`, with `E32 = max|ref32 - ref64|` the interpreter's own f32 error (the
/// kernels sum in another order than the interpreter's blocked ones, and call the C library's
/// `erff`).
fn matches_the_interpreter(b: &Built, m: &fbc_ir::Module, func: &str) {
    let inputs = fbc_runtime::interp::random_inputs(m, func, 7).expect("inputs");
    let want = Interpreter::new(m).run(func, inputs.clone()).expect("the interpreter");
    let wide: Vec<Value> = inputs
        .iter()
        .map(|v| match v {
            Value::F32(t) => Value::F64(t.cast()),
            v => v.clone(),
        })
        .collect();
    let f64_mode = Options { mode: Mode::F64, ..Default::default() };
    let want64 = Interpreter::with_options(m, f64_mode).run(func, wide).expect("f64");
    let (code, got) = call(b, func, &inputs, &want);
    assert_eq!(code, 0, "@{func}: the entry point's status");
    for (i, ((r32, r64), g)) in want.iter().zip(&want64).zip(&got).enumerate() {
        let (r32, r64, g) = (r32.to_f64_vec(), r64.to_f64_vec(), g.to_f64_vec());
        let max = r64.iter().filter(|x| x.is_finite()).fold(0.0f64, |a, x| a.max(x.abs()));
        let e32 = r32.iter().zip(&r64).map(|(a, b)| (a - b).abs()).filter(|e| e.is_finite());
        let e32 = e32.fold(0.0f64, f64::max);
        let bad: Vec<usize> = (0..r64.len())
            .filter(|&j| {
                let (r, d) = (r64[j], g[j]);
                if r.is_nan() || d.is_nan() {
                    return r.is_nan() != d.is_nan();
                }
                r != d && (r - d).abs() > 1e-5 + 1e-4 * (r.abs() + max) + 8.0 * e32
            })
            .collect();
        assert!(
            bad.is_empty(),
            "@{func} result {i}: {} elements outside the bound, first at {}: {} against {} (E32 {e32:e})",
            bad.len(),
            bad[0],
            g[bad[0]],
            r64[bad[0]]
        );
    }
}

/// Every function of the op corpus (`tests/ir/ops`) whose arguments are tensors.
#[test]
fn every_op_file_matches_the_interpreter() {
    let files = common::op_corpus();
    let mut ran = 0;
    for (i, file) in files.iter().enumerate() {
        let m = load(file);
        let b = build(file, &format!("aot-ops-{i}"));
        for f in &m.funcs {
            let tensors = f.args.iter().all(|&a| m.value_type(a).as_tensor().is_some())
                && f.result_types.iter().all(|t| t.as_tensor().is_some());
            if tensors {
                matches_the_interpreter(&b, &m, &f.name);
                ran += 1;
            }
        }
    }
    assert!(ran >= 18, "only {ran} functions ran");
}

/// One Llama layer's LoRA training step (`common::training_step`: every forward and backward op
/// kind of a decoder).
#[test]
fn a_generated_training_step_links_and_matches_the_interpreter() {
    let file = common::training_step("aot-gen");
    let m = load(&file);
    matches_the_interpreter(&build(&file, "aot-gen-build"), &m, "loss_grad");
}

/// Zero values shaped like the results of `func`.
fn result_shapes(m: &fbc_ir::Module, func: &str) -> Vec<Value> {
    let f = m.find_func(func).expect("the function");
    m.func(f)
        .result_types
        .iter()
        .map(|t| {
            let t = t.as_tensor().expect("a tensor result");
            let shape: Vec<usize> = t.shape.iter().map(|&d| d as usize).collect();
            let n = shape.iter().product();
            match t.elem {
                fbc_ir::ElemType::I32 => Value::I32(Tensor::new(shape, vec![0; n]).unwrap()),
                _ => Value::F32(Tensor::new(shape, vec![0.0; n]).unwrap()),
            }
        })
        .collect()
}

/// `--threads 2`: the launches the JIT would split run on two POSIX threads, with the same bits
/// as on one (each output element is written by one chunk, in the same order).
#[test]
fn threads_give_the_same_bits() {
    let file = common::training_step("aot-threads");
    let m = load(&file);
    let inputs = fbc_runtime::interp::random_inputs(&m, "loss_grad", 3).expect("inputs");
    let like = result_shapes(&m, "loss_grad");
    let one = build_with(&file, "aot-threads-1", &[]);
    let two = build_with(&file, "aot-threads-2", &["--threads", "2"]);
    assert!(
        two.header.contains("runs its launches on up to\n * 2 (POSIX threads"),
        "{}",
        two.header
    );
    let (c1, r1) = call(&one, "loss_grad", &inputs, &like);
    let (c2, r2) = call(&two, "loss_grad", &inputs, &like);
    assert_eq!((c1, c2), (0, 0));
    for (i, (a, b)) in r1.iter().zip(&r2).enumerate() {
        compare_values(a, b, Tolerance::EXACT).unwrap_or_else(|e| panic!("result {i}: {e}"));
    }
    // The object starts threads: some launch of this step is large enough to split.
    let ll = two.dir.join("ll");
    compile_with(&file, "llvm", &ll, &["--threads", "2"]);
    let ir = std::fs::read_to_string(ll.join(format!("{}.ll", two.prefix))).expect("IR");
    assert!(ir.contains("call i32 @fbc_run_chunks("), "no launch is split");
    assert!(ir.contains("@pthread_create("));
}

/// A dense constant is packed into its storage; an index out of range stops the program with
/// the gather's fault as its status, and nothing is written.
#[test]
fn constants_and_faults() {
    let dir = common::scratch("aot-fault");
    let file = dir.join("gather.fbir");
    std::fs::write(
        &file,
        r#"module @gather {
  func.func @f(%table: tensor<8x16xf32>, %ids: tensor<4xi32>) -> tensor<4x16xf32> {
    %c = tensor.constant {value = dense<[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 13.0, 14.0, 15.0, 16.0]>} : () -> tensor<16xf32>
    %e = tensor.embedding %table, %ids : (tensor<8x16xf32>, tensor<4xi32>) -> tensor<4x16xf32>
    %y = tensor.mul %e, %c : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
    func.return %y : tensor<4x16xf32>
  }
}
"#,
    )
    .expect("write");
    let m = load(&file);
    let table: Vec<f32> = (0..128).map(|i| i as f32 * 0.25 - 3.0).collect();
    let table = Value::F32(Tensor::new(vec![8, 16], table).unwrap());
    let ids = |v: Vec<i32>| Value::I32(Tensor::new(vec![4], v).unwrap());
    let good = vec![table.clone(), ids(vec![3, 0, 7, 3])];
    let want = Interpreter::new(&m).run("f", good.clone()).expect("the interpreter");
    let b = build(&file, "aot-fault-build");
    let (code, got) = call(&b, "f", &good, &want);
    assert_eq!(code, 0);
    compare_values(&want[0], &got[0], Tolerance::EXACT).expect("the gathered rows");
    // Index 8 of an 8-row table: the interpreter refuses it, the native code returns the fault.
    let bad = vec![table, ids(vec![3, 8, 0, 0])];
    assert!(Interpreter::new(&m).run("f", bad.clone()).is_err());
    let (code, _) = call(&b, "f", &bad, &want);
    assert_ne!(code, 0, "an out-of-range gather must not succeed");
    assert!(matches!(code & 0xff, 1 | 2), "a read or load fault, not {code:#x}");
}

#[test]
fn header_assembly_and_ir() {
    let src = repo().join("examples/aot/mlp.fbir");
    let dir = common::scratch("aot-text");
    let (asm, ll) = (dir.join("asm"), dir.join("ll"));
    compile(&src, "asm", &asm);
    compile(&src, "llvm", &ll);
    let header = std::fs::read_to_string(asm.join("mlp.h")).expect("the header");
    assert_eq!(header, std::fs::read_to_string(ll.join("mlp.h")).expect("the header"));
    insta::assert_snapshot!("mlp_header", header);
    let s = std::fs::read_to_string(asm.join("mlp.s")).expect("assembly");
    assert!(s.contains(".globl\tmlp_block"), "the entry point is global");
    assert!(!s.contains(".globl\tfbc_kernel_"), "kernels stay inside the object");
    let ir = std::fs::read_to_string(ll.join("mlp.ll")).expect("IR");
    assert!(ir.contains("define i32 @mlp_block(ptr noalias readonly %a0"), "{ir}");
    assert!(ir.contains("define internal noundef i32 @fbc_kernel_0("), "kernels are internal");
    assert!(ir.contains("call ptr @calloc("));
}

#[test]
fn usage_errors() {
    let src = repo().join("examples/aot/mlp.fbir");
    let src = src.to_string_lossy();
    for (args, message) in [
        (
            vec!["--emit", "obj"],
            "fbc: error: --emit obj is native code for this CPU: it needs --target cpu-llvm\n",
        ),
        (
            vec!["--target", "cpu-llvm", "--emit", "opencl"],
            "fbc: error: --emit opencl is for GPU targets, not cpu-llvm (try --emit obj)\n",
        ),
        (
            vec!["--target", "mali", "--cpu", "generic"],
            "fbc: error: --cpu is for --target cpu-llvm\n",
        ),
        (
            vec!["--target", "cpu-llvm", "--emit", "memory", "--threads", "2"],
            "fbc: error: --threads is for native code (--target cpu-llvm --emit obj|asm|llvm)\n",
        ),
        (
            vec!["--target", "cpu-llvm", "--cpu", "z80", "-o", "/nonexistent/x"],
            "fbc: error: --cpu z80: expected `host` or `generic`\n",
        ),
    ] {
        let mut all = vec![src.as_ref()];
        all.extend(args.iter().copied());
        let out = common::fbc(&all);
        assert_eq!((out.code, out.stderr.as_str()), (2, message), "{args:?}");
    }
}

//! Tests of the `autodiff` and `train-step` passes, driven by `.fbir` text:
//! - snapshots of generated `@F_grad` functions (matmul, broadcasting add, softmax with cross
//!   entropy, layernorm, the LoRA attention block);
//! - numeric gradient checks in f64 against central finite differences, one tiny
//!   `loss = reduce_sum(op(x) · r)` per differentiable op (and variants of its attributes), plus
//!   the shrunken LoRA attention block, run through the reference interpreter in f64;
//! - property tests over random shapes for matmul and broadcasting add;
//! - the marking convention (`fbc.backward`, `fbc.reuse`, `fbc.reuse_args`), frozen arguments,
//!   errors, and the SGD/AdamW training steps against hand-computed updates.

/// Runs functions through the reference interpreter (`fbc_runtime::interp`) in its f64 mode, the
/// gradient-check oracle: every float op computes in f64 with the reference kernels.
mod eval {
    use fbc_ir::Module;
    pub use fbc_runtime::interp::Value as Val;
    use fbc_runtime::interp::{Interpreter, Mode};

    pub fn run(m: &Module, func: &str, inputs: &[Val]) -> Result<Vec<Val>, String> {
        Interpreter::new(m).mode(Mode::F64).run(func, inputs.to_vec()).map_err(|e| e.to_string())
    }
}

use std::sync::Arc;

use eval::Val;
use fbc_ir::pass::PassManager;
use fbc_ir::{print_module, Attr, Module, PassContext, SourceFile, ValueDef};
use fbc_runtime::reference::Tensor;
use proptest::prelude::*;

// ----- helpers -----

fn parse(text: &str) -> Module {
    let file = Arc::new(SourceFile::new("t.fbir", text));
    match fbc_ir::parse_module(&file, &fbc_dialects::registry()) {
        Ok(m) => m,
        Err(d) => {
            panic!("test input does not parse:\n{}", fbc_grammar::diag::render_all(&file, &d))
        }
    }
}

/// Runs `pipeline` with verification after each pass; errors come back rendered.
fn try_run(m: &mut Module, pipeline: &str) -> Result<(), String> {
    let steps =
        fbc_transforms::default_registry().parse_pipeline(pipeline).map_err(|e| e.message)?;
    let mut pm = PassManager::new(steps);
    pm.instrumentation.verify_each = true;
    let reg = fbc_dialects::registry();
    let mut cx = PassContext::new(&reg);
    let source = m.source.clone();
    pm.run(m, &mut cx, &mut |_| {}).map(|_| ()).map_err(|diags| match source {
        Some(f) => fbc_grammar::diag::render_all(&f, &diags),
        None => format!("{diags:?}"),
    })
}

fn run(text: &str, pipeline: &str) -> Module {
    let mut m = parse(text);
    if let Err(e) = try_run(&mut m, pipeline) {
        panic!("`{pipeline}` failed:\n{e}");
    }
    m
}

/// The printed text of one function of the module.
fn func_text(m: &Module, name: &str) -> String {
    let text = print_module(m);
    let head = format!("  func.func @{name}(");
    let start = text.find(&head).unwrap_or_else(|| panic!("no @{name} in\n{text}"));
    let end = text[start..].find("\n  }\n").map(|e| start + e + 4).expect("function end");
    text[start..end].to_string()
}

/// A small deterministic generator (the tests must not depend on a random seed).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }

    fn tensor(&mut self, shape: &[usize], lo: f64, hi: f64) -> Tensor<f64> {
        let n = shape.iter().product();
        Tensor::new(shape.to_vec(), (0..n).map(|_| lo + (hi - lo) * self.next()).collect()).unwrap()
    }
}

/// Argument shapes and kinds of a function, read from the module.
fn arg_shapes(m: &Module, func: &str) -> Vec<(String, Vec<usize>, bool)> {
    let f = m.func(m.find_func(func).unwrap());
    f.args
        .iter()
        .map(|&a| {
            let t = m.value_type(a).as_tensor().unwrap();
            let shape = t.shape.iter().map(|&d| d as usize).collect();
            (m.value(a).name.as_deref().unwrap_or("").to_string(), shape, t.elem.is_float())
        })
        .collect()
}

fn scalar(v: &Val) -> f64 {
    let t = v.as_f64().unwrap();
    assert_eq!(t.rank(), 0, "loss must be rank 0");
    t.data()[0]
}

/// Checks `@func_grad` (already built in `m`) against central differences of `@func` at
/// `inputs`, for the arguments `wrt`. Returns the largest error seen.
fn check_grads(m: &Module, func: &str, wrt: &[&str], inputs: &[Val], tol: f64) -> f64 {
    let args = arg_shapes(m, func);
    let n_results = m.func(m.find_func(func).unwrap()).result_types.len();
    let out = eval::run(m, &format!("{func}_grad"), inputs).unwrap();
    let forward = eval::run(m, func, inputs).unwrap();
    assert_eq!(out[..n_results], forward[..], "@{func}_grad's forward results differ from @{func}");
    let h = 1e-6;
    let mut worst: f64 = 0.0;
    for (k, name) in wrt.iter().enumerate() {
        let i = args.iter().position(|a| a.0 == *name).unwrap();
        let grad = out[n_results + k].as_f64().unwrap().clone();
        let x = inputs[i].as_f64().unwrap();
        assert_eq!(grad.shape(), x.shape(), "gradient of %{name} has the wrong shape");
        for j in 0..x.numel() {
            let at = |delta: f64| {
                let mut ins = inputs.to_vec();
                let mut t = x.clone();
                t.data_mut()[j] += delta;
                ins[i] = Val::F64(t);
                scalar(&eval::run(m, func, &ins).unwrap()[0])
            };
            let fd = (at(h) - at(-h)) / (2.0 * h);
            let ad = grad.data()[j];
            let err = (fd - ad).abs() / fd.abs().max(ad.abs()).max(1.0);
            worst = worst.max(err);
            assert!(
                err <= tol,
                "@{func}: d/d%{name}[{j}]: autodiff {ad}, finite differences {fd} (error {err:e})"
            );
        }
    }
    worst
}

/// Random inputs for every argument of `func`: floats in `[lo, hi]`, ids in `0..ids`.
fn random_inputs(m: &Module, func: &str, seed: u64, lo: f64, hi: f64, ids: i32) -> Vec<Val> {
    let mut rng = Rng(seed);
    arg_shapes(m, func)
        .into_iter()
        .map(|(_, shape, is_float)| {
            if is_float {
                Val::F64(rng.tensor(&shape, lo, hi))
            } else {
                let n = shape.iter().product();
                let data = (0..n).map(|_| (rng.next() * f64::from(ids)) as i32 % ids).collect();
                Val::I32(Tensor::new(shape, data).unwrap())
            }
        })
        .collect()
}

fn ty(shape: &[usize], elem: &str) -> String {
    let mut s = String::from("tensor<");
    for d in shape {
        s += &format!("{d}x");
    }
    s + elem + ">"
}

/// `@f(args..., %r) = reduce_sum(BODY · r)` where BODY's last line defines `%y` of `out` shape
/// (rank 0: `y · r`).
fn op_loss(args: &[(&str, &[usize], &str)], body: &str, out: &[usize]) -> String {
    let mut sig: Vec<String> = args.iter().map(|(n, s, e)| format!("%{n}: {}", ty(s, e))).collect();
    sig.push(format!("%r: {}", ty(out, "f64")));
    let axes: Vec<String> = (0..out.len()).map(|k| k.to_string()).collect();
    let reduce = if out.is_empty() {
        "%l = tensor.mul %y, %r".to_string()
    } else {
        format!(
            "%p = tensor.mul %y, %r\n    %l = tensor.reduce_sum %p {{axes = [{}]}}",
            axes.join(", ")
        )
    };
    format!(
        "module {{\n  func.func @f({}) -> tensor<f64> {{\n    {}\n    {reduce}\n    func.return %l : tensor<f64>\n  }}\n}}\n",
        sig.join(", "),
        body.trim().replace('\n', "\n    ")
    )
}

/// Differentiates `@f` of `text` with respect to `wrt` and checks it numerically.
fn grad_check_text(text: &str, wrt: &[&str], lo: f64, hi: f64) {
    let m = run(text, &format!("autodiff{{func=f wrt={}}}", wrt.join(",")));
    let inputs = random_inputs(&m, "f", 0x9E37_79B9_7F4A_7C15, lo, hi, 5);
    check_grads(&m, "f", wrt, &inputs, 1e-6);
}

/// One per-op check: `args`, `body` defining `%y` of shape `out`, all float args differentiated.
fn op_check(args: &[(&str, &[usize], &str)], body: &str, out: &[usize], lo: f64, hi: f64) {
    let text = op_loss(args, body, out);
    let wrt: Vec<&str> = args.iter().filter(|a| a.2 != "i32").map(|a| a.0).collect();
    grad_check_text(&text, &wrt, lo, hi);
}

const F: &str = "f64";

// ----- numeric checks, one per op -----

#[test]
fn numeric_broadcasting_binary_ops() {
    for op in ["add", "sub", "mul", "max", "min"] {
        op_check(
            &[("a", &[3, 4], F), ("b", &[4], F)],
            &format!("%y = tensor.{op} %a, %b"),
            &[3, 4],
            -1.0,
            1.0,
        );
        op_check(
            &[("a", &[2, 1, 4], F), ("b", &[3, 1], F)],
            &format!("%y = tensor.{op} %a, %b"),
            &[2, 3, 4],
            -1.0,
            1.0,
        );
    }
    // Division: keep the divisor away from zero.
    op_check(&[("a", &[3, 4], F), ("b", &[3, 1], F)], "%y = tensor.div %a, %b", &[3, 4], 0.5, 2.0);
}

#[test]
fn numeric_unary_ops() {
    let any = ["neg", "exp", "tanh", "sigmoid", "silu"];
    for op in any {
        op_check(&[("x", &[2, 3], F)], &format!("%y = tensor.{op} %x"), &[2, 3], -1.5, 1.5);
    }
    for op in ["log", "sqrt", "rsqrt"] {
        op_check(&[("x", &[2, 3], F)], &format!("%y = tensor.{op} %x"), &[2, 3], 0.5, 2.0);
    }
    // relu: away from the kink at 0, where finite differences are meaningless.
    op_check(
        &[("x", &[2, 3], F)],
        "%z = tensor.scale %x {factor = 1.0}\n%y = tensor.relu %z",
        &[2, 3],
        0.1,
        1.0,
    );
    op_check(&[("x", &[2, 3], F)], "%n = tensor.neg %x\n%y = tensor.relu %n", &[2, 3], 0.1, 1.0);
    op_check(&[("x", &[2, 3], F)], "%y = tensor.gelu %x", &[2, 3], -2.0, 2.0);
    op_check(
        &[("x", &[2, 3], F)],
        "%y = tensor.gelu %x {approximate = \"tanh\"}",
        &[2, 3],
        -2.0,
        2.0,
    );
    op_check(&[("x", &[2, 3], F)], "%y = tensor.scale %x {factor = -2.5}", &[2, 3], -1.0, 1.0);
}

#[test]
fn numeric_matmul_variants() {
    type Case<'a> = (&'a [usize], &'a [usize], &'a str, &'a [usize]);
    let cases: &[Case<'_>] = &[
        (&[3, 4], &[4, 5], "", &[3, 5]),
        (&[4, 3], &[4, 5], "{transpose_a = true}", &[3, 5]),
        (&[3, 4], &[5, 4], "{transpose_b = true}", &[3, 5]),
        (&[4, 3], &[5, 4], "{transpose_a = true, transpose_b = true}", &[3, 5]),
        // A batched activation times a weight: the flattened dW path.
        (&[2, 3, 4], &[4, 5], "", &[2, 3, 5]),
        (&[2, 3, 4], &[5, 4], "{transpose_b = true}", &[2, 3, 5]),
        // Transposed batched activation: the generic path with unbroadcast.
        (&[2, 4, 3], &[4, 5], "{transpose_a = true}", &[2, 3, 5]),
        // A weight times a batched tensor.
        (&[3, 4], &[2, 4, 5], "", &[2, 3, 5]),
        (&[4, 3], &[2, 5, 4], "{transpose_a = true, transpose_b = true}", &[2, 3, 5]),
        // Batch broadcasting on both sides.
        (&[2, 1, 3, 4], &[3, 4, 5], "", &[2, 3, 3, 5]),
        (&[1, 3, 4], &[2, 1, 4, 5], "", &[2, 1, 3, 5]),
    ];
    for (a, b, attrs, out) in cases {
        op_check(
            &[("a", a, F), ("b", b, F)],
            &format!("%y = tensor.matmul %a, %b {attrs}"),
            out,
            -1.0,
            1.0,
        );
    }
}

#[test]
fn numeric_reductions() {
    op_check(&[("x", &[2, 3, 4], F)], "%y = tensor.reduce_sum %x {axes = [1]}", &[2, 4], -1.0, 1.0);
    op_check(
        &[("x", &[2, 3, 4], F)],
        "%y = tensor.reduce_sum %x {axes = [0, -1], keepdim = true}",
        &[1, 3, 1],
        -1.0,
        1.0,
    );
    op_check(
        &[("x", &[2, 3, 4], F)],
        "%y = tensor.reduce_mean %x {axes = [0, 2]}",
        &[3],
        -1.0,
        1.0,
    );
    op_check(
        &[("x", &[2, 3, 4], F)],
        "%y = tensor.reduce_mean %x {axes = [1], keepdim = true}",
        &[2, 1, 4],
        -1.0,
        1.0,
    );
    op_check(
        &[("x", &[2, 3, 4], F)],
        "%y = tensor.reduce_max %x {axes = [-1]}",
        &[2, 3],
        -1.0,
        1.0,
    );
    op_check(
        &[("x", &[2, 3, 4], F)],
        "%y = tensor.reduce_max %x {axes = [0, 1], keepdim = true}",
        &[1, 1, 4],
        -1.0,
        1.0,
    );
    op_check(&[("x", &[2, 3], F)], "%y = tensor.reduce_sum %x {axes = [0, 1]}", &[], -1.0, 1.0);
}

#[test]
fn numeric_softmax_and_norms() {
    op_check(&[("x", &[2, 3, 4], F)], "%y = tensor.softmax %x", &[2, 3, 4], -2.0, 2.0);
    op_check(&[("x", &[2, 3, 4], F)], "%y = tensor.softmax %x {axis = 1}", &[2, 3, 4], -2.0, 2.0);
    op_check(
        &[("x", &[2, 3, 4], F), ("g", &[4], F), ("b", &[4], F)],
        "%y = tensor.layernorm %x, %g, %b",
        &[2, 3, 4],
        -2.0,
        2.0,
    );
    op_check(
        &[("x", &[2, 3, 4], F), ("g", &[3], F), ("b", &[3], F)],
        "%y = tensor.layernorm %x, %g, %b {axis = 1, eps = 0.01}",
        &[2, 3, 4],
        -2.0,
        2.0,
    );
    op_check(
        &[("x", &[3, 4], F), ("g", &[4], F)],
        "%y = tensor.rmsnorm %x, %g",
        &[3, 4],
        -2.0,
        2.0,
    );
}

#[test]
fn numeric_convolutions() {
    // Stride, asymmetric padding, dilation, groups and a bias; then "same" padding.
    op_check(
        &[("x", &[2, 4, 5, 6], F), ("w", &[6, 2, 3, 2], F), ("b", &[6], F)],
        "%y = tensor.conv2d %x, %w, %b {dilation = [1, 2], groups = 2, padding = [1, 0, 2, 1], stride = [2, 1]}",
        &[2, 6, 3, 5],
        -1.0,
        1.0,
    );
    op_check(
        &[("x", &[1, 3, 4, 4], F), ("w", &[2, 3, 3, 3], F)],
        "%y = tensor.conv2d %x, %w {padding = \"same\"}",
        &[1, 2, 4, 4],
        -1.0,
        1.0,
    );
}

#[test]
fn numeric_group_norm_and_upsample() {
    op_check(
        &[("x", &[2, 4, 3, 2], F), ("g", &[4], F), ("b", &[4], F)],
        "%y = tensor.group_norm %x, %g, %b {eps = 0.01, groups = 2}",
        &[2, 4, 3, 2],
        -2.0,
        2.0,
    );
    op_check(
        &[("x", &[1, 2, 2, 3], F)],
        "%y = tensor.upsample %x {scale = 3}",
        &[1, 2, 6, 9],
        -2.0,
        2.0,
    );
}

#[test]
fn numeric_rope_including_tables() {
    op_check(
        &[("x", &[2, 3, 4], F), ("c", &[3, 4], F), ("s", &[3, 4], F)],
        "%y = tensor.rope %x, %c, %s",
        &[2, 3, 4],
        -1.0,
        1.0,
    );
}

#[test]
fn numeric_shape_ops() {
    op_check(
        &[("x", &[2, 6], F)],
        "%y = tensor.reshape %x {shape = [3, -1, 2]}",
        &[3, 2, 2],
        -1.0,
        1.0,
    );
    op_check(
        &[("x", &[2, 3, 4], F)],
        "%y = tensor.transpose %x {perm = [2, 0, 1]}",
        &[4, 2, 3],
        -1.0,
        1.0,
    );
    op_check(
        &[("x", &[3, 1], F)],
        "%y = tensor.broadcast %x {shape = [2, 3, 4]}",
        &[2, 3, 4],
        -1.0,
        1.0,
    );
    op_check(
        &[("x", &[4, 5], F)],
        "%y = tensor.slice %x {start = [1, 0], end = [3, 4]}",
        &[2, 4],
        -1.0,
        1.0,
    );
    op_check(
        &[("a", &[2, 1], F), ("b", &[2, 3], F), ("c", &[2, 2], F)],
        "%y = tensor.concat %a, %b, %c {axis = -1}",
        &[2, 6],
        -1.0,
        1.0,
    );
    // Backward helpers used as forward ops are linear maps with rules of their own.
    op_check(
        &[("x", &[2, 3, 4], F)],
        "%y = tensor.unbroadcast %x {shape = [3, 1]}",
        &[3, 1],
        -1.0,
        1.0,
    );
    op_check(
        &[("x", &[2, 2], F)],
        "%y = tensor.slice_grad %x {shape = [3, 4], start = [1, 2]}",
        &[3, 4],
        -1.0,
        1.0,
    );
}

#[test]
fn numeric_embedding_and_cross_entropy() {
    // Twelve ids into five rows: repeated ids must accumulate.
    op_check(
        &[("t", &[5, 4], F), ("ids", &[3, 4], "i32")],
        "%y = tensor.embedding %t, %ids",
        &[3, 4, 4],
        -1.0,
        1.0,
    );
    op_check(
        &[("z", &[4, 5], F), ("labels", &[4], "i32")],
        "%y = tensor.cross_entropy %z, %labels",
        &[],
        -2.0,
        2.0,
    );
}

#[test]
fn numeric_ge_has_zero_gradient() {
    let text = op_loss(
        &[("a", &[3], F), ("b", &[3], F)],
        "%m = tensor.ge %a, %b\n%y = tensor.mul %m, %a",
        &[3],
    );
    grad_check_text(&text, &["a", "b"], -1.0, 1.0);
}

#[test]
fn numeric_shared_values_calls_and_chains() {
    // %x has three uses (two in one op): contributions must be summed.
    op_check(
        &[("x", &[2, 3], F)],
        "%a = tensor.mul %x, %x\n%b = tensor.exp %x\n%y = tensor.add %a, %b",
        &[2, 3],
        -1.0,
        1.0,
    );
    // Through calls, one of them nested.
    let text = "module {
  func.func @inner(%a: tensor<2x3xf64>) -> tensor<2x3xf64> {
    %t = tensor.tanh %a
    func.return %t : tensor<2x3xf64>
  }
  func.func @mid(%a: tensor<2x3xf64>, %w: tensor<3x3xf64>) -> (tensor<2x3xf64>, tensor<2x3xf64>) {
    %p = tensor.matmul %a, %w
    %q = func.call %p {callee = @inner} : (tensor<2x3xf64>) -> tensor<2x3xf64>
    func.return %q, %p
  }
  func.func @f(%x: tensor<2x3xf64>, %w: tensor<3x3xf64>) -> tensor<f64> {
    %y, %z = func.call %x, %w {callee = @mid} : (tensor<2x3xf64>, tensor<3x3xf64>) -> (tensor<2x3xf64>, tensor<2x3xf64>)
    %s = tensor.mul %y, %z
    %l = tensor.reduce_mean %s {axes = [0, 1]}
    func.return %l : tensor<f64>
  }
}
";
    grad_check_text(text, &["x", "w"], -1.0, 1.0);
    let m = run(text, "autodiff{func=f wrt=w}");
    assert!(!func_text(&m, "f_grad").contains("func.call"), "calls are inlined");
}

/// Ties: the gradient is split evenly, as the reference kernels `reduce_max_grad` and
/// `max_grad` do (finite differences are undefined there, so compare with the kernels).
#[test]
fn ties_match_the_reference_kernels() {
    use fbc_runtime::reference as r;
    let text = "module {
  func.func @f(%x: tensor<2x3xf64>, %a: tensor<2x3xf64>, %b: tensor<3xf64>, %r: tensor<2xf64>, %s: tensor<2x3xf64>, %u: tensor<2x3xf64>) -> tensor<f64> {
    %m = tensor.reduce_max %x {axes = [1]}
    %p = tensor.mul %m, %r
    %l1 = tensor.reduce_sum %p {axes = [0]}
    %mx = tensor.max %a, %b
    %mn = tensor.min %a, %b
    %q = tensor.mul %mx, %s
    %w = tensor.mul %mn, %u
    %qw = tensor.add %q, %w
    %l2 = tensor.reduce_sum %qw {axes = [0, 1]}
    %l = tensor.add %l1, %l2
    func.return %l : tensor<f64>
  }
}
";
    let m = run(text, "autodiff{func=f wrt=x,a,b}");
    let t = |shape: &[usize], d: &[f64]| Tensor::new(shape.to_vec(), d.to_vec()).unwrap();
    let x = t(&[2, 3], &[1.0, 3.0, 3.0, 2.0, 2.0, 2.0]);
    let a = t(&[2, 3], &[1.0, 2.0, 3.0, 0.5, 2.0, 4.0]);
    let b = t(&[3], &[1.0, 2.0, 0.0]);
    let rr = t(&[2], &[0.7, -1.3]);
    let s = t(&[2, 3], &[0.1, 0.2, 0.3, 0.4, 0.5, 0.6]);
    let u = t(&[2, 3], &[-0.3, 0.9, 1.1, 0.2, -0.5, 0.8]);
    let ins: Vec<Val> = [&x, &a, &b, &rr, &s, &u].iter().map(|v| Val::F64((*v).clone())).collect();
    let out = eval::run(&m, "f_grad", &ins).unwrap();
    let want_x = r::reduce_max_grad(&x, &rr, &[1], false).unwrap();
    assert_eq!(out[1].as_f64().unwrap(), &want_x);
    assert_eq!(want_x.data(), &[0.0, 0.35, 0.35, -1.3 / 3.0, -1.3 / 3.0, -1.3 / 3.0]);
    let (da1, db1) = r::max_grad(&a, &b, &s).unwrap();
    let (da2, db2) = r::min_grad(&a, &b, &u).unwrap();
    let close = |p: &Tensor<f64>, q: &Tensor<f64>| {
        assert_eq!(p.shape(), q.shape());
        for (v, w) in p.data().iter().zip(q.data()) {
            assert!((v - w).abs() < 1e-12, "{p:?} vs {q:?}");
        }
    };
    close(out[2].as_f64().unwrap(), &r::add(&da1, &da2).unwrap());
    close(out[3].as_f64().unwrap(), &r::add(&db1, &db2).unwrap());
}

// ----- the LoRA attention block -----

const LORA: &str = include_str!("../../../examples/lora_attention.fbir");
const LORA_SMALL: &str = include_str!("autodiff/lora_attention_small.fbir");

#[test]
fn numeric_lora_attention_small() {
    let wrt = ["aq", "bq", "av", "bv"];
    let m = run(LORA_SMALL, "autodiff{func=loss wrt=aq,bq,av,bv}");
    let inputs = random_inputs(&m, "loss", 7, -0.5, 0.5, 1);
    let worst = check_grads(&m, "loss", &wrt, &inputs, 1e-6);
    assert!(worst < 1e-6);
    // Every argument, frozen weights included, also checks the inlined @block end to end.
    let m = run(LORA_SMALL, "autodiff{func=loss wrt=x,wq,wk,wv,wo,aq,bq,av,bv,target}");
    let all = ["x", "wq", "wk", "wv", "wo", "aq", "bq", "av", "bv", "target"];
    check_grads(&m, "loss", &all, &inputs, 1e-6);
}

#[test]
fn lora_frozen_weights_get_no_gradient_code() {
    let before = parse(LORA);
    let m = run(LORA, "autodiff{func=loss wrt=aq,bq,av,bv}");
    let text = func_text(&m, "loss_grad");
    // No gradient of a frozen weight, of the input, of the target, or of K (which depends only
    // on frozen values); no 2048x2048 backward tensor (the shape every weight gradient has).
    let values: Vec<&str> = text
        .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '%'))
        .filter(|t| t.starts_with('%'))
        .collect();
    for name in
        ["d_wq", "d_wk", "d_wv", "d_wo", "d_x", "d_target", "d_k", "d_k1", "d_k2", "d_q0", "d_v0"]
    {
        // The printer makes repeated names unique as `%name_N`.
        let is = |v: &str| {
            v.strip_prefix('%').and_then(|v| v.strip_prefix(name)).is_some_and(|rest| {
                rest.is_empty()
                    || rest.strip_prefix('_').is_some_and(|n| n.chars().all(|c| c.is_ascii_digit()))
            })
        };
        assert!(!values.iter().any(|v| is(v)), "found %{name} in\n{text}");
    }
    assert!(values.contains(&"%d_xa"), "the adapter path has gradients");
    let f = m.func(m.find_func("loss_grad").unwrap());
    for &op in &f.body {
        let d = m.op(op);
        if d.attr("fbc.backward").is_some() {
            for &r in &d.results {
                let t = m.value_type(r).to_string();
                assert_ne!(t, "tensor<2048x2048xf32>", "a weight-sized gradient in\n{text}");
            }
        }
    }
    // The other functions are untouched.
    for name in ["block", "loss"] {
        assert_eq!(func_text(&m, name), func_text(&before, name));
    }
    insta::assert_snapshot!("lora_attention_loss_grad", text);
}

// ----- snapshots -----

#[test]
fn snapshot_matmul_loss() {
    let m = run(
        "module {
  func.func @loss(%x: tensor<8x16xf32>, %w: tensor<16x4xf32>, %r: tensor<8x4xf32>) -> tensor<f32> {
    %y = tensor.matmul %x, %w : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
    %p = tensor.mul %y, %r : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
    %l = tensor.reduce_sum %p {axes = [0, 1]} : (tensor<8x4xf32>) -> tensor<f32>
    func.return %l : tensor<f32>
  }
}
",
        "autodiff{func=loss wrt=x,w}",
    );
    insta::assert_snapshot!("matmul_loss_grad", func_text(&m, "loss_grad"));
}

#[test]
fn snapshot_broadcasting_add() {
    let m = run(
        "module {
  func.func @loss(%x: tensor<4x8xf32>, %b: tensor<8xf32>) -> tensor<f32> {
    %y = tensor.add %x, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
    %t = tensor.tanh %y : (tensor<4x8xf32>) -> tensor<4x8xf32>
    %l = tensor.reduce_mean %t {axes = [0, 1]} : (tensor<4x8xf32>) -> tensor<f32>
    func.return %l : tensor<f32>
  }
}
",
        "autodiff{func=loss wrt=x,b}",
    );
    insta::assert_snapshot!("broadcasting_add_grad", func_text(&m, "loss_grad"));
}

#[test]
fn snapshot_softmax_cross_entropy() {
    let m = run(
        "module {
  func.func @loss(%h: tensor<4x8xf32>, %w: tensor<8x10xf32>, %labels: tensor<4xi32>) -> (tensor<f32>, tensor<4x10xf32>) {
    %z = tensor.matmul %h, %w : (tensor<4x8xf32>, tensor<8x10xf32>) -> tensor<4x10xf32>
    %p = tensor.softmax %z {axis = -1} : (tensor<4x10xf32>) -> tensor<4x10xf32>
    %l = tensor.cross_entropy %z, %labels : (tensor<4x10xf32>, tensor<4xi32>) -> tensor<f32>
    func.return %l, %p
  }
}
",
        "autodiff{func=loss wrt=w}",
    );
    insta::assert_snapshot!("softmax_cross_entropy_grad", func_text(&m, "loss_grad"));
}

#[test]
fn snapshot_softmax_in_the_loss() {
    let m = run(
        "module {
  func.func @loss(%z: tensor<4x10xf32>, %r: tensor<4x10xf32>) -> tensor<f32> {
    %p = tensor.softmax %z {axis = -1} : (tensor<4x10xf32>) -> tensor<4x10xf32>
    %q = tensor.mul %p, %r : (tensor<4x10xf32>, tensor<4x10xf32>) -> tensor<4x10xf32>
    %l = tensor.reduce_sum %q {axes = [0, 1]} : (tensor<4x10xf32>) -> tensor<f32>
    func.return %l : tensor<f32>
  }
}
",
        "autodiff{func=loss wrt=z}",
    );
    insta::assert_snapshot!("softmax_grad", func_text(&m, "loss_grad"));
}

#[test]
fn snapshot_layernorm() {
    let m = run(
        "module {
  func.func @loss(%x: tensor<2x4x8xf32>, %g: tensor<8xf32>, %b: tensor<8xf32>) -> tensor<f32> {
    %y = tensor.layernorm %x, %g, %b {eps = 1.0e-5} : (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
    %s = tensor.mul %y, %y : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    %l = tensor.reduce_mean %s {axes = [0, 1, 2]} : (tensor<2x4x8xf32>) -> tensor<f32>
    func.return %l : tensor<f32>
  }
}
",
        "autodiff{func=loss wrt=x,g,b}",
    );
    insta::assert_snapshot!("layernorm_grad", func_text(&m, "loss_grad"));
}

// ----- marking, frozen arguments, output shape -----

const MATMUL_LOSS: &str = "module {
  func.func @loss(%x: tensor<2x3x4xf64>, %w: tensor<4x5xf64>, %r: tensor<2x3x5xf64>) -> tensor<f64> {
    %y = tensor.matmul %x, %w : (tensor<2x3x4xf64>, tensor<4x5xf64>) -> tensor<2x3x5xf64>
    %t = tensor.tanh %y : (tensor<2x3x5xf64>) -> tensor<2x3x5xf64>
    %p = tensor.mul %t, %r : (tensor<2x3x5xf64>, tensor<2x3x5xf64>) -> tensor<2x3x5xf64>
    %l = tensor.reduce_sum %p {axes = [0, 1, 2]} : (tensor<2x3x5xf64>) -> tensor<f64>
    func.return %l : tensor<f64>
  }
}
";

#[test]
fn marks_backward_ops_and_reuse_edges() {
    let m = run(MATMUL_LOSS, "autodiff{func=loss wrt=w}");
    let fid = m.find_func("loss_grad").unwrap();
    let f = m.func(fid);
    // Forward ops come first, unmarked; everything after them is backward.
    let names: Vec<&str> = f.body.iter().map(|&o| m.op(o).name()).collect();
    let first_bwd = f.body.iter().position(|&o| m.op(o).attr("fbc.backward").is_some()).unwrap();
    assert_eq!(
        &names[..first_bwd],
        &["tensor.matmul", "tensor.tanh", "tensor.mul", "tensor.reduce_sum"]
    );
    for &op in &f.body[first_bwd..f.body.len() - 1] {
        assert!(m.op(op).attr("fbc.backward").is_some(), "{} is not marked", m.op(op).name());
    }
    // E_reuse: tanh's output (tanh_grad reads y) is kept; %x and %r are read by the backward.
    let reused: Vec<&str> = f.body[..first_bwd]
        .iter()
        .filter(|&&o| m.op(o).attr("fbc.reuse").is_some())
        .map(|&o| m.op(o).name())
        .collect();
    assert_eq!(reused, ["tensor.tanh"]);
    assert_eq!(f.attr("fbc.reuse_args"), Some(&Attr::ints([0, 2])));
    // Every operand of every backward op is a backward value, a reused forward value, or a
    // listed argument: the marking is complete.
    for &op in &f.body[first_bwd..f.body.len() - 1] {
        for &v in &m.op(op).operands {
            match m.value(v).def {
                ValueDef::Arg { index, .. } => assert!([0, 2].contains(&index)),
                ValueDef::Result { op: p, .. } => {
                    let d = m.op(p);
                    assert!(d.attr("fbc.backward").is_some() || d.attr("fbc.reuse").is_some());
                }
            }
        }
    }
    // The result is F's result followed by one gradient per wrt argument.
    assert_eq!(f.result_types.len(), 2);
    assert_eq!(f.result_types[1].to_string(), "tensor<4x5xf64>");
    // The printed module parses back to itself (discardable attributes included).
    let text = print_module(&m);
    assert_eq!(print_module(&parse(&text)), text);
}

#[test]
fn frozen_arguments_get_no_gradient_code() {
    let with_x = run(MATMUL_LOSS, "autodiff{func=loss wrt=x,w}");
    let only_w = run(MATMUL_LOSS, "autodiff{func=loss wrt=w}");
    let count = |m: &Module| {
        let f = m.func(m.find_func("loss_grad").unwrap());
        f.body.iter().filter(|&&o| m.op(o).attr("fbc.backward").is_some()).count()
    };
    // dX = dY·Wᵀ is one matmul more.
    assert_eq!(count(&with_x), count(&only_w) + 1);
    assert!(!func_text(&only_w, "loss_grad").contains("transpose_b = true"));
}

#[test]
fn loss_independent_of_an_argument_gets_zero_gradient() {
    let text = "module {
  func.func @f(%x: tensor<3xf64>, %u: tensor<3xf64>) -> tensor<f64> {
    %l = tensor.reduce_sum %x {axes = [0]}
    func.return %l : tensor<f64>
  }
}
";
    let m = run(text, "autodiff{func=f wrt=u,x}");
    let ins = vec![
        Val::F64(Tensor::from_vec(vec![1.0, 2.0, 3.0])),
        Val::F64(Tensor::from_vec(vec![4.0, 5.0, 6.0])),
    ];
    let out = eval::run(&m, "f_grad", &ins).unwrap();
    assert_eq!(out[1], Val::F64(Tensor::from_vec(vec![0.0; 3])));
    assert_eq!(out[2], Val::F64(Tensor::from_vec(vec![1.0; 3])));
}

#[test]
fn integer_paths_get_no_gradient() {
    let text = "module {
  func.func @f(%t: tensor<5x5xf64>, %ids: tensor<4xi32>, %labels: tensor<4xi32>) -> tensor<f64> {
    %e = tensor.embedding %t, %ids
    %l = tensor.cross_entropy %e, %labels
    func.return %l : tensor<f64>
  }
}
";
    let m = run(text, "autodiff{func=f wrt=t}");
    let g = func_text(&m, "f_grad");
    assert!(g.contains("tensor.embedding_grad %ids"));
    assert!(!g.contains("%d_ids") && !g.contains("%d_labels"));
    grad_check_text(text, &["t"], -1.0, 1.0);
}

// ----- errors -----

fn expect_error(text: &str, pipeline: &str, needles: &[&str]) {
    let mut m = parse(text);
    let before = print_module(&m);
    let err = try_run(&mut m, pipeline).expect_err("the pass should fail");
    for n in needles {
        assert!(err.contains(n), "expected `{n}` in:\n{err}");
    }
    assert_eq!(print_module(&m), before, "a failed pass must leave the module unchanged");
}

#[test]
fn errors_are_located_and_leave_the_module_alone() {
    expect_error(MATMUL_LOSS, "autodiff{func=nope wrt=w}", &["no function named @nope", "@loss"]);
    expect_error(
        MATMUL_LOSS,
        "autodiff{func=loss wrt=w,q}",
        &["t.fbir:2:13: error", "has no argument %q", "%x, %w, %r"],
    );
    expect_error(MATMUL_LOSS, "autodiff{func=loss wrt=w,w}", &["names %w twice"]);
    let not_scalar = "module {
  func.func @f(%x: tensor<3xf32>) -> tensor<3xf32> {
    %y = tensor.exp %x
    func.return %y : tensor<3xf32>
  }
}
";
    expect_error(
        not_scalar,
        "autodiff{func=f wrt=x}",
        &["t.fbir:4:17: error", "must be a scalar loss", "found tensor<3xf32>"],
    );
    let int_arg = "module {
  func.func @f(%t: tensor<5x3xf32>, %ids: tensor<4xi32>) -> tensor<f32> {
    %e = tensor.embedding %t, %ids
    %l = tensor.reduce_sum %e {axes = [0, 1]}
    func.return %l : tensor<f32>
  }
}
";
    expect_error(int_arg, "autodiff{func=f wrt=ids}", &["not a float tensor"]);
    let no_rule = "module {
  func.func @f(%x: tensor<3xf32>, %dy: tensor<3xf32>, %w: tensor<3xf32>) -> tensor<f32> {
    %s = tensor.softmax %x
    %g = tensor.softmax_grad %s, %dy
    %h = tensor.mul %g, %w
    %l = tensor.reduce_sum %h {axes = [0]}
    func.return %l : tensor<f32>
  }
}
";
    expect_error(
        no_rule,
        "autodiff{func=f wrt=x}",
        &["t.fbir:4:10: error: cannot differentiate `tensor.softmax_grad`: it has no gradient rule"],
    );
    // The same op off the differentiated path is fine.
    run(no_rule, "autodiff{func=f wrt=w}");
    // Quantised weights are frozen: no gradient for the packed bytes (not a float tensor) nor
    // for the scales (dequantize has no rule); a frozen quantised weight beside a trained input
    // is fine.
    let quant = "module {
  func.func @f(%x: tensor<2x4xf32>, %q: tensor<3x4xi8>, %s: tensor<3x1xf32>) -> tensor<f32> {
    %w = tensor.dequantize %q, %s {group = 4, scheme = \"int8\"}
    %y = tensor.matmul %x, %w {transpose_b = true}
    %l = tensor.reduce_sum %y {axes = [0, 1]}
    func.return %l : tensor<f32>
  }
}
";
    expect_error(
        quant,
        "autodiff{func=f wrt=q}",
        &["cannot differentiate with respect to %q: it is tensor<3x4xi8>, not a float tensor"],
    );
    expect_error(
        quant,
        "autodiff{func=f wrt=s}",
        &[
            "t.fbir:3:10: error: cannot differentiate `tensor.dequantize`: it has no gradient rule",
            "quantised weights are frozen",
        ],
    );
    run(quant, "autodiff{func=f wrt=x}");
    let twice = run(MATMUL_LOSS, "autodiff{func=loss wrt=w}");
    let mut m = twice.clone();
    let err = try_run(&mut m, "autodiff{func=loss wrt=w}").unwrap_err();
    assert!(err.contains("already has a function of that name"), "{err}");
    let missing =
        fbc_transforms::default_registry().parse_pipeline("autodiff{func=loss}").unwrap_err();
    assert!(missing.message.contains("requires option `wrt`"), "{}", missing.message);
}

// ----- property tests -----

/// A shape that broadcasts to `full`: a suffix of it with some dimensions set to 1.
fn sub_shape(full: &[usize], keep: usize, ones: &[bool]) -> Vec<usize> {
    let skip = full.len() - keep.min(full.len());
    full[skip..].iter().zip(ones).map(|(&d, &one)| if one { 1 } else { d }).collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    #[test]
    fn prop_matmul_gradients(
        m in 1usize..4, k in 1usize..4, n in 1usize..4,
        batch in prop::collection::vec(1usize..3, 0..3),
        a_batch in 0usize..3, b_batch in 0usize..3,
        a_ones in prop::collection::vec(any::<bool>(), 3), b_ones in prop::collection::vec(any::<bool>(), 3),
        ta in any::<bool>(), tb in any::<bool>(), seed in 1u64..u64::MAX,
    ) {
        let ba = sub_shape(&batch, a_batch, &a_ones);
        let bb = sub_shape(&batch, b_batch, &b_ones);
        let mut a = ba.clone();
        a.extend(if ta { [k, m] } else { [m, k] });
        let mut b = bb.clone();
        b.extend(if tb { [n, k] } else { [k, n] });
        let mut out: Vec<usize> = (0..ba.len().max(bb.len())).map(|i| {
            let get = |s: &[usize]| { let r = ba.len().max(bb.len()); if i + s.len() >= r { s[i + s.len() - r] } else { 1 } };
            get(&ba).max(get(&bb))
        }).collect();
        out.extend([m, n]);
        let attrs = format!("{{transpose_a = {ta}, transpose_b = {tb}}}");
        let text = op_loss(&[("a", &a, F), ("b", &b, F)], &format!("%y = tensor.matmul %a, %b {attrs}"), &out);
        let module = run(&text, "autodiff{func=f wrt=a,b}");
        let inputs = random_inputs(&module, "f", seed, -1.0, 1.0, 1);
        check_grads(&module, "f", &["a", "b"], &inputs, 1e-6);
    }

    #[test]
    fn prop_broadcast_add_gradients(
        full in prop::collection::vec(1usize..4, 1..4),
        ka in 0usize..4, kb in 0usize..4,
        a_ones in prop::collection::vec(any::<bool>(), 4), b_ones in prop::collection::vec(any::<bool>(), 4),
        sub in any::<bool>(), seed in 1u64..u64::MAX,
    ) {
        let a = sub_shape(&full, ka.max(1), &a_ones);
        let b = sub_shape(&full, kb, &b_ones);
        let out = fbc_runtime::reference::broadcast_shapes(&a, &b).unwrap();
        let op = if sub { "sub" } else { "add" };
        let text = op_loss(&[("a", &a, F), ("b", &b, F)], &format!("%y = tensor.{op} %a, %b"), &out);
        let module = run(&text, "autodiff{func=f wrt=a,b}");
        let inputs = random_inputs(&module, "f", seed, -1.0, 1.0, 1);
        check_grads(&module, "f", &["a", "b"], &inputs, 1e-6);
    }
}

// ----- train-step -----

#[test]
fn sgd_step_updates_parameters() {
    let m = run(
        MATMUL_LOSS,
        "autodiff{func=loss wrt=w},train-step{func=loss wrt=w lr=0.1 weight_decay=0.5}",
    );
    let inputs = random_inputs(&m, "loss", 3, -1.0, 1.0, 1);
    let grads = eval::run(&m, "loss_grad", &inputs).unwrap();
    let step = eval::run(&m, "loss_step", &inputs).unwrap();
    assert_eq!(step.len(), 2);
    assert_eq!(step[0], grads[0]);
    let (w, g, w1) =
        (inputs[1].as_f64().unwrap(), grads[1].as_f64().unwrap(), step[1].as_f64().unwrap());
    for j in 0..w.numel() {
        let want = w.data()[j] * (1.0 - 0.1 * 0.5) - 0.1 * g.data()[j];
        assert!((w1.data()[j] - want).abs() < 1e-12);
    }
    let text = func_text(&m, "loss_step");
    assert!(text.contains("fbc.optimizer"));
}

#[test]
fn adamw_step_matches_the_formula() {
    let pipeline = "autodiff{func=loss wrt=x,w},train-step{func=loss wrt=x,w optimizer=adamw lr=0.01 beta1=0.8 beta2=0.99 eps=1e-6 weight_decay=0.1}";
    let m = run(MATMUL_LOSS, pipeline);
    let f = m.func(m.find_func("loss_step").unwrap());
    let arg_names: Vec<String> =
        f.args.iter().map(|&a| m.value(a).name.as_deref().unwrap_or("").to_string()).collect();
    assert_eq!(arg_names, ["x", "w", "r", "m_x", "v_x", "m_w", "v_w", "step"]);
    assert_eq!(f.result_types.len(), 1 + 2 + 4);
    let mut rng = Rng(11);
    let base = random_inputs(&m, "loss", 5, -1.0, 1.0, 1);
    let grads = eval::run(&m, "loss_grad", &base).unwrap();
    for t in [1.0, 3.0] {
        let mut ins = base.clone();
        let mut moments = Vec::new();
        for p in [0, 1] {
            let shape = base[p].as_f64().unwrap().shape().to_vec();
            let m0 = rng.tensor(&shape, -0.1, 0.1);
            let v0 = rng.tensor(&shape, 0.0, 0.1);
            moments.push((m0.clone(), v0.clone()));
            ins.push(Val::F64(m0));
            ins.push(Val::F64(v0));
        }
        ins.push(Val::F64(Tensor::scalar(t)));
        let out = eval::run(&m, "loss_step", &ins).unwrap();
        assert_eq!(out[0], grads[0]);
        for (k, (m0, v0)) in moments.iter().enumerate() {
            let (p, g) = (base[k].as_f64().unwrap(), grads[1 + k].as_f64().unwrap());
            let (p1, m1, v1) = (
                out[1 + k].as_f64().unwrap(),
                out[3 + 2 * k].as_f64().unwrap(),
                out[4 + 2 * k].as_f64().unwrap(),
            );
            for j in 0..p.numel() {
                let gj = g.data()[j];
                let mj = 0.8 * m0.data()[j] + 0.2 * gj;
                let vj = 0.99 * v0.data()[j] + 0.01 * gj * gj;
                let mh = mj / (1.0 - 0.8f64.powf(t));
                let vh = vj / (1.0 - 0.99f64.powf(t));
                let pj = p.data()[j] * (1.0 - 0.01 * 0.1) - 0.01 * mh / (vh.sqrt() + 1e-6);
                assert!((m1.data()[j] - mj).abs() < 1e-12);
                assert!((v1.data()[j] - vj).abs() < 1e-12);
                assert!((p1.data()[j] - pj).abs() < 1e-10, "t={t}: {} vs {pj}", p1.data()[j]);
            }
        }
    }
    insta::assert_snapshot!("adamw_step", func_text(&m, "loss_step"));
}

#[test]
fn train_step_rejects_bad_options() {
    let reg = fbc_transforms::default_registry();
    for (opts, needle) in [
        ("optimizer=adam", "sgd or adamw"),
        ("beta1=1.0", "beta1"),
        ("eps=-1", "eps"),
        ("lr=inf", "lr"),
    ] {
        let steps = reg.parse_pipeline(&format!("train-step{{func=loss wrt=w {opts}}}")).unwrap();
        let err = steps[0].info.instantiate(&steps[0].options).err().expect("refused");
        assert!(err.contains(needle), "{opts}: {err}");
    }
}

//! The interpreter on small `.fbir` functions, one or more per op of the tensor dialect, against
//! values worked out by hand (or from closed forms evaluated here with `std` math, never with the
//! reference kernels the interpreter calls). Also: calls, f16/bf16 rounding after every op, the f64
//! mode, every error path, random inputs and the equivalence checker.

use std::sync::Arc;

use fbc_ir::{Module, SourceFile};
use fbc_runtime::interp::{
    self, check_equivalent, compare_values, index_bound, random_inputs, InterpError, Interpreter,
    Mode, Tolerance, Value,
};
use fbc_runtime::reference::Tensor;

fn module(src: &str) -> Module {
    let file = Arc::new(SourceFile::new("test.fbir", src));
    fbc_ir::parse_module(&file, &fbc_dialects::registry())
        .unwrap_or_else(|d| panic!("test module does not verify: {d:?}"))
}

fn f32s(shape: &[usize], data: &[f64]) -> Value {
    Value::F32(Tensor::new(shape.to_vec(), data.iter().map(|&v| v as f32).collect()).unwrap())
}

fn i32s(shape: &[usize], data: &[i32]) -> Value {
    Value::I32(Tensor::new(shape.to_vec(), data.to_vec()).unwrap())
}

/// Runs `@f` of `src` in f32 mode.
fn run(src: &str, inputs: Vec<Value>) -> Vec<Value> {
    let m = module(src);
    Interpreter::new(&m).run("f", inputs).unwrap_or_else(|e| panic!("{e}"))
}

/// Asserts that `got` has `shape` and is within `tol` (relative, at least absolute `tol`) of
/// `want` element by element.
#[track_caller]
fn close(got: &Value, shape: &[usize], want: &[f64], tol: f64) {
    assert_eq!(got.shape(), shape, "shape of {got:?}");
    let g = got.to_f64_vec();
    assert_eq!(g.len(), want.len());
    for (i, (a, b)) in g.iter().zip(want).enumerate() {
        assert!(
            (a - b).abs() <= tol * b.abs().max(1.0),
            "element {i}: got {a}, want {b}; all {g:?}"
        );
    }
}

const F32_TOL: f64 = 2e-7;

#[test]
fn constants_of_every_storage() {
    let src = "
func.func @f() -> (tensor<2x2xf32>, tensor<3xi32>, tensor<2xf16>, tensor<f64>) {
  %a = tensor.constant {value = 2.5} : () -> tensor<2x2xf32>
  %b = tensor.constant {value = 3, shape = [3], dtype = \"i32\"}
  %c = tensor.constant {value = 0.1} : () -> tensor<2xf16>
  %d = tensor.constant {value = 0.1} : () -> tensor<f64>
  func.return %a, %b, %c, %d : (tensor<2x2xf32>, tensor<3xi32>, tensor<2xf16>, tensor<f64>) -> ()
}";
    let r = run(src, vec![]);
    close(&r[0], &[2, 2], &[2.5; 4], 0.0);
    assert_eq!(r[1], i32s(&[3], &[3, 3, 3]));
    // 0.1 in binary16: 1638/16384 = 0.0999755859375.
    close(&r[2], &[2], &[0.099_975_585_937_5; 2], 0.0);
    assert_eq!(r[3], Value::F64(Tensor::scalar(0.1)));
}

const BINARY: &str = "
func.func @f(%a: tensor<2x1xf32>, %b: tensor<3xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>) {
  %0 = tensor.add %a, %b
  %1 = tensor.sub %a, %b
  %2 = tensor.mul %a, %b
  %3 = tensor.div %a, %b
  %4 = tensor.max %a, %b
  %5 = tensor.min %a, %b
  %6 = tensor.ge %a, %b
  func.return %0, %1, %2, %3, %4, %5, %6 : (tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>) -> ()
}";

#[test]
fn binary_ops_broadcast() {
    // a = [[1], [4]] against b = [1, 2, 0.5]: rows are a[i] op b[j].
    let r = run(BINARY, vec![f32s(&[2, 1], &[1.0, 4.0]), f32s(&[3], &[1.0, 2.0, 0.5])]);
    let s = [2, 3];
    close(&r[0], &s, &[2.0, 3.0, 1.5, 5.0, 6.0, 4.5], 0.0);
    close(&r[1], &s, &[0.0, -1.0, 0.5, 3.0, 2.0, 3.5], 0.0);
    close(&r[2], &s, &[1.0, 2.0, 0.5, 4.0, 8.0, 2.0], 0.0);
    close(&r[3], &s, &[1.0, 0.5, 2.0, 4.0, 2.0, 8.0], 0.0);
    close(&r[4], &s, &[1.0, 2.0, 1.0, 4.0, 4.0, 4.0], 0.0);
    close(&r[5], &s, &[1.0, 1.0, 0.5, 1.0, 2.0, 0.5], 0.0);
    close(&r[6], &s, &[1.0, 0.0, 1.0, 1.0, 1.0, 1.0], 0.0);
}

#[test]
fn unary_ops() {
    let src = "
func.func @f(%x: tensor<4xf32>, %p: tensor<2xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) {
  %0 = tensor.neg %x
  %1 = tensor.relu %x
  %2 = tensor.scale %x {factor = 0.5}
  %3 = tensor.exp %p
  %4 = tensor.log %p
  %5 = tensor.sqrt %p
  %6 = tensor.rsqrt %p
  %7 = tensor.tanh %p
  %8 = tensor.sigmoid %p
  %9 = tensor.silu %p
  func.return %0, %1, %2, %3, %4, %5, %6, %7, %8, %9 : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> ()
}";
    let (ln2, ln3) = (2f64.ln(), 3f64.ln());
    let x = f32s(&[4], &[-2.0, 0.0, 1.0, 4.0]);
    let r = run(src, vec![x, f32s(&[2], &[ln3, 4.0])]);
    close(&r[0], &[4], &[2.0, 0.0, -1.0, -4.0], 0.0);
    close(&r[1], &[4], &[0.0, 0.0, 1.0, 4.0], 0.0);
    close(&r[2], &[4], &[-1.0, 0.0, 0.5, 2.0], 0.0);
    // exp(ln 3) = 3, e^4; ln(ln 3), ln 4 = 2 ln 2.
    close(&r[3], &[2], &[3.0, 54.598_150_033_144_236], F32_TOL);
    close(&r[4], &[2], &[ln3.ln(), 2.0 * ln2], 1e-6);
    close(&r[5], &[2], &[ln3.sqrt(), 2.0], F32_TOL);
    close(&r[6], &[2], &[1.0 / ln3.sqrt(), 0.5], F32_TOL);
    // tanh(ln 3) = (3 - 1/3) / (3 + 1/3) = 0.8; tanh 4 = (e^8 - 1) / (e^8 + 1).
    let e8 = 2_980.957_987_041_728_f64;
    close(&r[7], &[2], &[0.8, (e8 - 1.0) / (e8 + 1.0)], F32_TOL);
    // sigmoid(ln 3) = 3/4; sigmoid(4) = 1 / (1 + e^-4).
    let s4 = 1.0 / (1.0 + 1.0 / 54.598_150_033_144_236);
    close(&r[8], &[2], &[0.75, s4], F32_TOL);
    close(&r[9], &[2], &[0.75 * ln3, 4.0 * s4], F32_TOL);
}

#[test]
fn gelu_both_forms() {
    let src = "
func.func @f(%x: tensor<3xf32>) -> (tensor<3xf32>, tensor<3xf32>) {
  %0 = tensor.gelu %x
  %1 = tensor.gelu %x {approximate = \"tanh\"}
  func.return %0, %1 : (tensor<3xf32>, tensor<3xf32>) -> ()
}";
    let r = run(src, vec![f32s(&[3], &[1.0, -1.0, 0.0])]);
    // Φ(1) = 0.841344746068543 (normal tables), so gelu(1) = Φ(1), gelu(-1) = -(1 - Φ(1)).
    let phi1 = 0.841_344_746_068_542_9;
    close(&r[0], &[3], &[phi1, -(1.0 - phi1), 0.0], F32_TOL);
    let tanh_form = |x: f64| {
        0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x)).tanh())
    };
    close(&r[1], &[3], &[tanh_form(1.0), tanh_form(-1.0), 0.0], F32_TOL);
}

#[test]
fn matmul_plain_transposed_and_batched() {
    let src = "
func.func @f(%a: tensor<2x3xf32>, %b: tensor<3x2xf32>, %bt: tensor<2x3xf32>, %at: tensor<3x2xf32>, %x: tensor<2x2x2xf32>, %w: tensor<2x2xf32>) -> (tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2x2xf32>) {
  %0 = tensor.matmul %a, %b
  %1 = tensor.matmul %a, %bt {transpose_b = true}
  %2 = tensor.matmul %at, %b {transpose_a = true}
  %3 = tensor.matmul %x, %w
  func.return %0, %1, %2, %3 : (tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2x2xf32>) -> ()
}";
    let a = f32s(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let b = f32s(&[3, 2], &[7.0, 8.0, 9.0, 10.0, 11.0, 12.0]);
    let bt = f32s(&[2, 3], &[7.0, 9.0, 11.0, 8.0, 10.0, 12.0]);
    let at = f32s(&[3, 2], &[1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
    let x = f32s(&[2, 2, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
    let w = f32s(&[2, 2], &[1.0, 0.0, 1.0, 1.0]);
    let r = run(src, vec![a, b, bt, at, x, w]);
    // [1 2 3; 4 5 6] · [7 8; 9 10; 11 12] = [58 64; 139 154].
    for v in &r[..3] {
        close(v, &[2, 2], &[58.0, 64.0, 139.0, 154.0], 0.0);
    }
    // Each [p q; r s] · [1 0; 1 1] = [p+q q; r+s s]; w broadcasts over the batch.
    close(&r[3], &[2, 2, 2], &[3.0, 2.0, 7.0, 4.0, 11.0, 6.0, 15.0, 8.0], 0.0);
}

#[test]
fn reductions_and_softmax() {
    let src = "
func.func @f(%x: tensor<2x3xf32>, %s: tensor<2x2xf32>) -> (tensor<2xf32>, tensor<1x3xf32>, tensor<2xf32>, tensor<f32>, tensor<2x3xf32>, tensor<2x2xf32>) {
  %0 = tensor.reduce_sum %x {axes = [1]}
  %1 = tensor.reduce_sum %x {axes = [0], keepdim = true}
  %2 = tensor.reduce_max %x {axes = [-1]}
  %3 = tensor.reduce_mean %x {axes = [0, 1]}
  %4 = tensor.softmax %x
  %5 = tensor.softmax %s {axis = 0}
  func.return %0, %1, %2, %3, %4, %5 : (tensor<2xf32>, tensor<1x3xf32>, tensor<2xf32>, tensor<f32>, tensor<2x3xf32>, tensor<2x2xf32>) -> ()
}";
    let x = f32s(&[2, 3], &[1.0, 2.0, 3.0, 1001.0, 1002.0, 1003.0]);
    let s = f32s(&[2, 2], &[0.0, 5.0, 3f64.ln(), 5.0]);
    let r = run(src, vec![x, s]);
    close(&r[0], &[2], &[6.0, 3006.0], 0.0);
    close(&r[1], &[1, 3], &[1002.0, 1004.0, 1006.0], 0.0);
    close(&r[2], &[2], &[3.0, 1003.0], 0.0);
    close(&r[3], &[], &[3012.0 / 6.0], F32_TOL);
    // softmax([1, 2, 3]) = e^k / (e + e² + e³); the shifted row gives the same (stable).
    let z = 1f64.exp() + 2f64.exp() + 3f64.exp();
    let sm = [1f64.exp() / z, 2f64.exp() / z, 3f64.exp() / z];
    close(&r[4], &[2, 3], &[sm[0], sm[1], sm[2], sm[0], sm[1], sm[2]], 1e-6);
    // Along axis 0: column 0 is softmax(0, ln 3) = (1/4, 3/4); column 1 is uniform.
    close(&r[5], &[2, 2], &[0.25, 0.5, 0.75, 0.5], F32_TOL);
}

#[test]
fn normalisations() {
    let src = "
func.func @f(%x: tensor<1x4xf32>, %ones: tensor<4xf32>, %zeros: tensor<4xf32>, %g: tensor<4xf32>, %b: tensor<4xf32>, %y: tensor<2x2xf32>, %g2: tensor<2xf32>, %b2: tensor<2xf32>) -> (tensor<1x4xf32>, tensor<1x4xf32>, tensor<1x4xf32>, tensor<2x2xf32>) {
  %0 = tensor.layernorm %x, %ones, %zeros {eps = 0.75}
  %1 = tensor.layernorm %x, %g, %b {eps = 0.0}
  %2 = tensor.rmsnorm %x, %g {eps = 0.5}
  %3 = tensor.layernorm %y, %g2, %b2 {axis = 0, eps = 0.0}
  func.return %0, %1, %2, %3 : (tensor<1x4xf32>, tensor<1x4xf32>, tensor<1x4xf32>, tensor<2x2xf32>) -> ()
}";
    let x = f32s(&[1, 4], &[1.0, 2.0, 3.0, 4.0]);
    let g = f32s(&[4], &[1.0, 1.0, 2.0, 1.0]);
    let b = f32s(&[4], &[0.0, 1.0, 0.0, 0.0]);
    let y = f32s(&[2, 2], &[1.0, 10.0, 3.0, 20.0]);
    let r = run(
        src,
        vec![
            x,
            f32s(&[4], &[1.0; 4]),
            f32s(&[4], &[0.0; 4]),
            g.clone(),
            b,
            y,
            f32s(&[2], &[1.0, 2.0]),
            f32s(&[2], &[0.5, 0.0]),
        ],
    );
    // mean 2.5, biased variance 1.25: with eps 0.75 the denominator is √2.
    let s = std::f64::consts::FRAC_1_SQRT_2;
    close(&r[0], &[1, 4], &[-1.5 * s, -0.5 * s, 0.5 * s, 1.5 * s], F32_TOL);
    // eps 0: (x - 2.5)/√1.25, then · gamma + beta.
    let d = 1.25f64.sqrt();
    close(&r[1], &[1, 4], &[-1.5 / d, -0.5 / d + 1.0, 2.0 * 0.5 / d, 1.5 / d], F32_TOL);
    // rms: mean(x²) = 7.5, + 0.5 = 8.
    let q = 8f64.sqrt();
    close(&r[2], &[1, 4], &[1.0 / q, 2.0 / q, 2.0 * 3.0 / q, 4.0 / q], F32_TOL);
    // Along axis 0, the columns (1, 3) and (10, 20) each normalise to (-1, 1); gamma and beta
    // are per row: row 0 · 1 + 0.5, row 1 · 2 + 0.
    close(&r[3], &[2, 2], &[-0.5, -0.5, 2.0, 2.0], F32_TOL);
}

#[test]
fn rope_rotates_halves() {
    let src = "
func.func @f(%x: tensor<2x2x4xf32>, %cos: tensor<2x4xf32>, %sin: tensor<2x4xf32>) -> tensor<2x2x4xf32> {
  %0 = tensor.rope %x, %cos, %sin
  func.return %0 : tensor<2x2x4xf32>
}";
    // Batch 0 rows [1 2 3 4]; batch 1 the negation. rotate_half([1 2 3 4]) = [-3 -4 1 2].
    // Position 0: cos [1 .5 0 2], sin [0 1 2 .5]: [1, 1 - 4, 0 + 2, 8 + 1] = [1 -3 2 9].
    // Position 1: cos 1, sin 0: unchanged.
    let row = [1.0, 2.0, 3.0, 4.0];
    let mut x = Vec::new();
    for sign in [1.0, -1.0] {
        for _ in 0..2 {
            x.extend(row.iter().map(|v| v * sign));
        }
    }
    let cos = f32s(&[2, 4], &[1.0, 0.5, 0.0, 2.0, 1.0, 1.0, 1.0, 1.0]);
    let sin = f32s(&[2, 4], &[0.0, 1.0, 2.0, 0.5, 0.0, 0.0, 0.0, 0.0]);
    let r = run(src, vec![f32s(&[2, 2, 4], &x), cos, sin]);
    #[rustfmt::skip]
    let want = [1.0, -3.0, 2.0, 9.0, 1.0, 2.0, 3.0, 4.0,
                -1.0, 3.0, -2.0, -9.0, -1.0, -2.0, -3.0, -4.0];
    close(&r[0], &[2, 2, 4], &want, 0.0);
}

#[test]
fn data_movement_on_floats_and_ids() {
    let src = "
func.func @f(%x: tensor<2x3xf32>, %i: tensor<2x3xi32>, %v: tensor<2xi32>) -> (tensor<3x2xf32>, tensor<3x2xi32>, tensor<6xf32>, tensor<2x2xi32>, tensor<2x1xf32>, tensor<2x4xi32>, tensor<4x3xf32>) {
  %0 = tensor.transpose %x {perm = [1, 0]}
  %1 = tensor.transpose %i {perm = [1, 0]}
  %2 = tensor.reshape %x {shape = [-1]}
  %3 = tensor.broadcast %v {shape = [2, 2]}
  %4 = tensor.slice %x {start = [0, 1], end = [2, 2]}
  %w = tensor.slice %i {start = [0, 2], end = [2, 3]}
  %5 = tensor.concat %i, %w {axis = 1}
  %6 = tensor.concat %x, %x {axis = 0}
  func.return %0, %1, %2, %3, %4, %5, %6 : (tensor<3x2xf32>, tensor<3x2xi32>, tensor<6xf32>, tensor<2x2xi32>, tensor<2x1xf32>, tensor<2x4xi32>, tensor<4x3xf32>) -> ()
}";
    let x = f32s(&[2, 3], &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    let i = i32s(&[2, 3], &[0, 1, 2, 3, 4, 5]);
    let r = run(src, vec![x, i, i32s(&[2], &[7, 8])]);
    close(&r[0], &[3, 2], &[0.0, 3.0, 1.0, 4.0, 2.0, 5.0], 0.0);
    assert_eq!(r[1], i32s(&[3, 2], &[0, 3, 1, 4, 2, 5]));
    close(&r[2], &[6], &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0], 0.0);
    assert_eq!(r[3], i32s(&[2, 2], &[7, 8, 7, 8]));
    close(&r[4], &[2, 1], &[1.0, 4.0], 0.0);
    assert_eq!(r[5], i32s(&[2, 4], &[0, 1, 2, 2, 3, 4, 5, 5]));
    close(&r[6], &[4, 3], &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0], 0.0);
}

#[test]
fn embedding_and_cross_entropy() {
    let src = "
func.func @f(%table: tensor<3x2xf32>, %ids: tensor<2xi32>, %logits: tensor<2x3xf32>, %labels: tensor<2xi32>) -> (tensor<2x2xf32>, tensor<f32>) {
  %0 = tensor.embedding %table, %ids
  %1 = tensor.cross_entropy %logits, %labels
  func.return %0, %1 : (tensor<2x2xf32>, tensor<f32>) -> ()
}";
    let table = f32s(&[3, 2], &[0.5, 1.5, 10.0, 20.0, -1.0, -2.0]);
    let logits = f32s(&[2, 3], &[1.0, 2.0, 3.0, 1.0, 1.0, 1.0]);
    let r = run(src, vec![table, i32s(&[2], &[2, 0]), logits, i32s(&[2], &[2, 0])]);
    close(&r[0], &[2, 2], &[-1.0, -2.0, 0.5, 1.5], 0.0);
    // Row 0: ln(e + e² + e³) - 3; row 1: ln 3 (uniform).
    let lse = (1f64.exp() + 2f64.exp() + 3f64.exp()).ln();
    close(&r[1], &[], &[((lse - 3.0) + 3f64.ln()) / 2.0], 1e-6);
}

#[test]
fn softmax_layernorm_and_rmsnorm_grads() {
    let src = "
func.func @f(%y: tensor<2xf32>, %dy: tensor<2xf32>, %x: tensor<3xf32>, %g: tensor<3xf32>, %dx: tensor<3xf32>, %r: tensor<2xf32>, %g2: tensor<2xf32>) -> (tensor<2xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<2xf32>, tensor<2xf32>) {
  %0 = tensor.softmax_grad %y, %dy
  %1, %2, %3 = tensor.layernorm_grad %x, %g, %dx {eps = 0.0}
  %4, %5 = tensor.rmsnorm_grad %r, %g2, %dy {eps = 0.0}
  func.return %0, %1, %2, %3, %4, %5 : (tensor<2xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<2xf32>, tensor<2xf32>) -> ()
}";
    let dy = f32s(&[2], &[1.0, 0.0]);
    let r = run(
        src,
        vec![
            f32s(&[2], &[0.25, 0.75]),
            dy,
            f32s(&[3], &[0.0, 1.0, 2.0]),
            f32s(&[3], &[1.0; 3]),
            f32s(&[3], &[1.0, 0.0, 0.0]),
            f32s(&[2], &[3.0, 4.0]),
            f32s(&[2], &[1.0, 1.0]),
        ],
    );
    // softmax: Σ dy·y = 0.25, dx = y·(dy - 0.25) = (0.25·0.75, 0.75·-0.25).
    close(&r[0], &[2], &[0.1875, -0.1875], F32_TOL);
    // layernorm of (0, 1, 2): σ = √(2/3), x̂ = (-√1.5, 0, √1.5); with dy = g = (1, 0, 0):
    // mean g = 1/3, mean(g·x̂) = -√1.5/3, so dx = (g - 1/3 + x̂·√1.5/3)/σ = (1/6, -1/3, 1/6)/σ.
    let sigma = (2.0f64 / 3.0).sqrt();
    close(&r[1], &[3], &[1.0 / 6.0 / sigma, -1.0 / 3.0 / sigma, 1.0 / 6.0 / sigma], 1e-6);
    close(&r[2], &[3], &[-(1.5f64.sqrt()), 0.0, 0.0], 1e-6);
    close(&r[3], &[3], &[1.0, 0.0, 0.0], 0.0);
    // rmsnorm of (3, 4): ms = 12.5, ρ = 1/√12.5; y = x·ρ, so dy/dx = ρ·I - ρ³·x·xᵀ/D; with
    // dy = (1, 0): dx = (ρ - 9ρ³/2, -12ρ³/2), dgamma = (3ρ, 0).
    let rho = 1.0 / 12.5f64.sqrt();
    let rho3 = rho * rho * rho;
    close(&r[4], &[2], &[rho - 4.5 * rho3, -6.0 * rho3], 1e-6);
    close(&r[5], &[2], &[3.0 * rho, 0.0], 1e-6);
}

#[test]
fn pointwise_grads() {
    let src = "
func.func @f(%x: tensor<2xf32>, %dy: tensor<2xf32>, %s: tensor<2xf32>, %t: tensor<3xf32>, %dt: tensor<3xf32>) -> (tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<3xf32>) {
  %0 = tensor.gelu_grad %x, %dy
  %1 = tensor.gelu_grad %x, %dy {approximate = \"tanh\"}
  %2 = tensor.silu_grad %s, %dy
  %3 = tensor.sigmoid_grad %s, %dy
  %4 = tensor.tanh_grad %s, %dy
  %5 = tensor.relu_grad %t, %dt
  func.return %0, %1, %2, %3, %4, %5 : (tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<3xf32>) -> ()
}";
    let ln3 = 3f64.ln();
    let r = run(
        src,
        vec![
            f32s(&[2], &[0.0, 1.0]),
            f32s(&[2], &[2.0, 1.0]),
            f32s(&[2], &[0.25, ln3]),
            f32s(&[3], &[-1.0, 0.0, 2.0]),
            f32s(&[3], &[5.0, 5.0, 5.0]),
        ],
    );
    // gelu'(0) = Φ(0) = 1/2; gelu'(1) = Φ(1) + φ(1), φ(1) = e^-½/√(2π) = 0.2419707245191434.
    close(&r[0], &[2], &[2.0 * 0.5, 0.841_344_746_068_542_9 + 0.241_970_724_519_143_4], 1e-6);
    // tanh form, differentiated by hand: u = k(x + c x³), t = tanh u,
    // gelu' = (1 + t)/2 + x (1 - t²) k (1 + 3 c x²)/2.
    let (k, c) = ((2.0 / std::f64::consts::PI).sqrt(), 0.044715);
    let d = |x: f64| {
        let t = (k * (x + c * x * x * x)).tanh();
        0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * c * x * x)
    };
    close(&r[1], &[2], &[2.0 * d(0.0), d(1.0)], 1e-6);
    // silu' = s (1 + x (1 - s)), s = sigmoid(x): sigmoid(ln 3) = 3/4.
    let s025 = 1.0 / (1.0 + (-0.25f64).exp());
    close(&r[2], &[2], &[2.0 * s025 * (1.0 + 0.25 * (1.0 - s025)), 0.75 * (1.0 + ln3 / 4.0)], 1e-6);
    // sigmoid' from y: y (1 - y); tanh' from y: 1 - y².
    close(&r[3], &[2], &[2.0 * 0.25 * 0.75, ln3 * (1.0 - ln3)], 1e-6);
    close(&r[4], &[2], &[2.0 * (1.0 - 0.0625), 1.0 - ln3 * ln3], 1e-6);
    close(&r[5], &[3], &[0.0, 0.0, 5.0], 0.0);
}

#[test]
fn rope_cross_entropy_embedding_grads() {
    let src = "
func.func @f(%dy: tensor<1x4xf32>, %cos: tensor<1x4xf32>, %sin: tensor<1x4xf32>, %logits: tensor<1x2xf32>, %labels: tensor<1xi32>, %dloss: tensor<f32>, %ids: tensor<3xi32>, %de: tensor<3x2xf32>) -> (tensor<1x4xf32>, tensor<1x2xf32>, tensor<3x2xf32>) {
  %0 = tensor.rope_grad %dy, %cos, %sin
  %1 = tensor.cross_entropy_grad %logits, %labels, %dloss
  %2 = tensor.embedding_grad %ids, %de {vocab = 3}
  func.return %0, %1, %2 : (tensor<1x4xf32>, tensor<1x2xf32>, tensor<3x2xf32>) -> ()
}";
    let r = run(
        src,
        vec![
            f32s(&[1, 4], &[1.0, 2.0, 3.0, 4.0]),
            f32s(&[1, 4], &[0.0; 4]),
            f32s(&[1, 4], &[1.0; 4]),
            f32s(&[1, 2], &[0.0, 3f64.ln()]),
            i32s(&[1], &[1]),
            Value::F32(Tensor::scalar(2.0)),
            i32s(&[3], &[2, 0, 2]),
            f32s(&[3, 2], &[1.0, 1.0, 2.0, 2.0, 3.0, 3.0]),
        ],
    );
    // cos 0, sin 1: dx = -rotate_half(dy) = -[-3, -4, 1, 2].
    close(&r[0], &[1, 4], &[3.0, 4.0, -1.0, -2.0], 0.0);
    // softmax(0, ln 3) = (1/4, 3/4); minus onehot(1), times dloss / N = 2.
    close(&r[1], &[1, 2], &[0.5, -0.5], F32_TOL);
    // Rows 0 and 2 of dy go to table row 2, row 1 to table row 0.
    close(&r[2], &[3, 2], &[2.0, 2.0, 0.0, 0.0, 4.0, 4.0], 0.0);
}

#[test]
fn unbroadcast_and_slice_grad() {
    let src = "
func.func @f(%x: tensor<2x3xf32>, %dy: tensor<1x2xf32>) -> (tensor<3xf32>, tensor<2x1xf32>, tensor<f32>, tensor<2x3xf32>) {
  %0 = tensor.unbroadcast %x {shape = [3]}
  %1 = tensor.unbroadcast %x {shape = [2, 1]}
  %2 = tensor.unbroadcast %x {shape = []}
  %3 = tensor.slice_grad %dy {shape = [2, 3], start = [1, 1]}
  func.return %0, %1, %2, %3 : (tensor<3xf32>, tensor<2x1xf32>, tensor<f32>, tensor<2x3xf32>) -> ()
}";
    let x = f32s(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let r = run(src, vec![x, f32s(&[1, 2], &[7.0, 8.0])]);
    close(&r[0], &[3], &[5.0, 7.0, 9.0], 0.0);
    close(&r[1], &[2, 1], &[6.0, 15.0], 0.0);
    close(&r[2], &[], &[21.0], 0.0);
    close(&r[3], &[2, 3], &[0.0, 0.0, 0.0, 0.0, 7.0, 8.0], 0.0);
}

#[test]
fn layout_ops_keep_logical_values() {
    let src = "
func.func @f(%x: tensor<2x3xf32>, %i: tensor<6xi32>) -> (tensor<2x3xf32>, tensor<2x3xf32>, tensor<3x2xf32>, tensor<2x3xi32>, tensor<2x2x3xf32>) {
  %0 = layout.assign %x {layout = #layout.linear}
  %1 = layout.convert %0 {from = #layout.linear, to = #layout.linear}
  %2 = layout.remap %x {map = (d0, d1) -> (d1, d0), shape = [3, 2]}
  %3 = layout.remap %i {map = (d0, d1) -> (d0 * 3 + d1), shape = [2, 3]}
  %4 = layout.remap %x {map = (d0, d1, d2) -> (d1, d2), shape = [2, 2, 3]}
  func.return %0, %1, %2, %3, %4 : (tensor<2x3xf32>, tensor<2x3xf32>, tensor<3x2xf32>, tensor<2x3xi32>, tensor<2x2x3xf32>) -> ()
}";
    let x = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0];
    let r = run(src, vec![f32s(&[2, 3], &x), i32s(&[6], &[9, 8, 7, 6, 5, 4])]);
    close(&r[0], &[2, 3], &x, 0.0);
    close(&r[1], &[2, 3], &x, 0.0);
    // y[i, j] = x[j, i]: the transpose.
    close(&r[2], &[3, 2], &[0.0, 3.0, 1.0, 4.0, 2.0, 5.0], 0.0);
    // A reshape of i32 ids through a flattening map.
    assert_eq!(r[3], i32s(&[2, 3], &[9, 8, 7, 6, 5, 4]));
    // A broadcast along a new leading axis.
    close(&r[4], &[2, 2, 3], &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0], 0.0);
}

#[test]
fn layout_remap_checks_every_element() {
    // The corners 0 and 2 map to 0; the middle element reads x[5]: the verifier's bounds prover
    // finds it.
    let bad = "func.func @f(%x: tensor<3xf32>) -> tensor<3xf32> {\n  %0 = layout.remap %x {map = (d0) -> ((d0 mod 2) * 5), shape = [3]}\n  func.return %0 : tensor<3xf32>\n}";
    let file = Arc::new(SourceFile::new("test.fbir", bad));
    let d = fbc_ir::parse_module(&file, &fbc_dialects::registry()).unwrap_err();
    assert_eq!(
        d[0].message,
        "the index map sends [1] to [5], outside tensor<3xf32> — `map` of layout.remap (and the \
         result types cannot be inferred)"
    );
    // A map the prover leaves undecided is checked per element when it runs: the same map put
    // on a verified module behind the verifier's back.
    let mut m = module(&bad.replace("(d0 mod 2) * 5", "d0"));
    let op = m.funcs[0].body[0];
    let Some(fbc_ir::Attr::Map(map)) = fbc_ir::parse_module(
        &Arc::new(SourceFile::new(
            "m.fbir",
            bad.replace("shape = [3]", "shape = [1]")
                .replace("> tensor<3xf32> {", "> tensor<1xf32> {")
                .replace(": tensor<3xf32>\n}", ": tensor<1xf32>\n}"),
        )),
        &fbc_dialects::registry(),
    )
    .ok()
    .and_then(|m2| m2.op(m2.funcs[0].body[0]).attr("map").cloned()) else {
        panic!("the map parses")
    };
    m.set_attr(op, "map", fbc_ir::Attr::Map(map));
    let e = Interpreter::new(&m).run("f", vec![f32s(&[3], &[1.0, 2.0, 3.0])]).unwrap_err();
    assert_eq!(e.to_string(), "`layout.remap`: result index [1] reads x[5], outside x's shape [3]");
}

#[test]
fn every_dialect_op_has_a_kernel() {
    let missing: Vec<&str> =
        fbc_dialects::tensor::ops().map(|d| d.name).filter(|n| !interp::supports(n)).collect();
    assert!(missing.is_empty(), "no interpreter kernel for {missing:?}");
    let missing: Vec<&str> =
        fbc_dialects::layout::ops().map(|d| d.name).filter(|n| !interp::supports(n)).collect();
    assert!(missing.is_empty(), "no interpreter kernel for {missing:?}");
    assert!(interp::supports("func.call") && interp::supports("func.return"));
    assert!(!interp::supports("layout.frobnicate"));
}

#[test]
fn calls_and_multiple_results() {
    let src = "
func.func @twice(%x: tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>) {
  %0 = tensor.scale %x {factor = 2.0}
  func.return %0, %x : (tensor<2xf32>, tensor<2xf32>) -> ()
}
func.func @f(%x: tensor<2xf32>) -> tensor<2xf32> {
  %a, %b = func.call %x {callee = @twice} : (tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>)
  %c, %d = func.call %a {callee = @twice} : (tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>)
  %0 = tensor.sub %c, %b
  func.return %0 : tensor<2xf32>
}";
    // 4x - x = 3x.
    let r = run(src, vec![f32s(&[2], &[1.0, -2.0])]);
    close(&r[0], &[2], &[3.0, -6.0], 0.0);
}

#[test]
fn f16_and_bf16_round_after_every_op() {
    // 1 + 2^-11 is a tie in f16 (ulp 2^-10) and rounds to even, 1.0; doing it twice stays at 1.0,
    // whereas rounding only at the end would give 1 + 2^-10. Likewise bf16 with 2^-8 (ulp 2^-7).
    let src = "
func.func @f(%x: tensor<2xf16>, %y: tensor<2xbf16>) -> (tensor<2xf16>, tensor<2xbf16>) {
  %e = tensor.constant {value = 0.00048828125} : () -> tensor<2xf16>
  %0 = tensor.add %x, %e
  %1 = tensor.add %0, %e
  %b = tensor.constant {value = 0.00390625} : () -> tensor<2xbf16>
  %2 = tensor.add %y, %b
  %3 = tensor.add %2, %b
  func.return %1, %3 : (tensor<2xf16>, tensor<2xbf16>) -> ()
}";
    let m = module(src);
    let ones = f32s(&[2], &[1.0, 1.0]);
    let r = Interpreter::new(&m).run("f", vec![ones.clone(), ones.clone()]).unwrap();
    close(&r[0], &[2], &[1.0, 1.0], 0.0);
    close(&r[1], &[2], &[1.0, 1.0], 0.0);
    // The f64 mode does not round: 1 + 2·2^-11 and 1 + 2·2^-8.
    let r = Interpreter::new(&m).mode(Mode::F64).run("f", vec![ones.clone(), ones]).unwrap();
    assert!(matches!(r[0], Value::F64(_)));
    close(&r[0], &[2], &[1.0 + 2f64.powi(-10); 2], 0.0);
    close(&r[1], &[2], &[1.0 + 2f64.powi(-7); 2], 0.0);
    // f16 inputs are rounded on entry: 1 + 2^-12 is 1.0 in f16.
    let m2 = module(
        "func.func @f(%x: tensor<1xf16>) -> tensor<1xf16> {\n  func.return %x : tensor<1xf16>\n}",
    );
    let r = Interpreter::new(&m2).run("f", vec![f32s(&[1], &[1.0 + 2f64.powi(-12)])]).unwrap();
    close(&r[0], &[1], &[1.0], 0.0);
}

#[test]
fn f64_mode_computes_in_f64() {
    let src = "
func.func @f(%x: tensor<1xf32>) -> tensor<1xf32> {
  %e = tensor.constant {value = 1.0e-8} : () -> tensor<1xf32>
  %0 = tensor.add %x, %e
  func.return %0 : tensor<1xf32>
}";
    let m = module(src);
    let x = f32s(&[1], &[1.0]);
    // In f32, 1 + 1e-8 is 1 (half an ulp is 6e-8).
    assert_eq!(Interpreter::new(&m).run("f", vec![x.clone()]).unwrap()[0], f32s(&[1], &[1.0]));
    let r = Interpreter::new(&m).mode(Mode::F64).run("f", vec![x]).unwrap();
    assert_eq!(r[0], Value::F64(Tensor::from_vec(vec![1.0 + 1e-8])));
}

#[test]
fn input_errors_name_the_argument() {
    let m = module("func.func @f(%x: tensor<2x3xf32>, %ids: tensor<2xi32>) -> tensor<2x3xf32> {\n  func.return %x : tensor<2x3xf32>\n}\nfunc.func @g() {\n  func.return\n}");
    let interp = Interpreter::new(&m);
    let e = interp.run("h", vec![]).unwrap_err();
    assert_eq!(e.to_string(), "no function named @h; the module has @f, @g");
    let e = interp.run("f", vec![]).unwrap_err();
    assert_eq!(e.to_string(), "@f takes 2 arguments, but 0 were given");
    let e = interp.run("f", vec![f32s(&[2, 2], &[0.0; 4]), i32s(&[2], &[0, 1])]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "argument 0 (`%x`) of @f: expected tensor<2x3xf32>, found f32 [2, 2]"
    );
    let e = interp.run("f", vec![f32s(&[2, 3], &[0.0; 6]), f32s(&[2], &[0.0, 1.0])]).unwrap_err();
    assert_eq!(e.to_string(), "argument 1 (`%ids`) of @f: expected tensor<2xi32>, found f32 [2]");
    // An f64 input for an f32 argument is rounded; an i32 one is refused.
    let r = interp
        .run(
            "f",
            vec![Value::F64(Tensor::new(vec![2, 3], vec![0.1; 6]).unwrap()), i32s(&[2], &[0, 1])],
        )
        .unwrap();
    assert_eq!(r[0], Value::F32(Tensor::new(vec![2, 3], vec![0.1f32; 6]).unwrap()));
}

#[test]
fn kernel_errors_point_at_the_op() {
    let src = "func.func @f(%t: tensor<3x2xf32>, %ids: tensor<2xi32>) -> tensor<2x2xf32> {\n  %0 = tensor.embedding %t, %ids\n  func.return %0 : tensor<2x2xf32>\n}";
    let file = Arc::new(SourceFile::new("e.fbir", src));
    let m = fbc_ir::parse_module(&file, &fbc_dialects::registry()).unwrap();
    let e = Interpreter::new(&m)
        .run("f", vec![f32s(&[3, 2], &[0.0; 6]), i32s(&[2], &[1, 3])])
        .unwrap_err();
    assert!(matches!(e, InterpError::Kernel { .. }), "{e:?}");
    assert_eq!(
        e.to_string(),
        "`tensor.embedding` failed: embedding: id 3 at index [1] is out of range 0..3"
    );
    let span = e.span().unwrap();
    assert_eq!(&src[span.start as usize..span.start as usize + 21], "%0 = tensor.embedding");
    assert_eq!(e.to_diagnostic().span, Some(span));
}

#[test]
fn unsupported_ops_and_types_are_errors() {
    use fbc_ir::{Arity, OpDef, OpError, OpTraits, OpView, Type};
    fn same_as_operand(v: &OpView<'_>) -> Result<Vec<Type>, OpError> {
        Ok(vec![v.operand_types[0].clone()])
    }
    static FUTURE: OpDef = OpDef {
        name: "layout.future",
        summary: "an op of a dialect the interpreter does not know yet",
        doc: "",
        operands: Arity::Exactly(1),
        results: Arity::Exactly(1),
        attrs: &[],
        traits: OpTraits::PURE,
        class: None,
        infer: same_as_operand,
    };
    let mut reg = fbc_dialects::registry();
    reg.register(&FUTURE);
    let src = "func.func @f(%x: tensor<2xf32>) -> tensor<2xf32> {\n  %0 = layout.future %x\n  func.return %0 : tensor<2xf32>\n}";
    let m = fbc_ir::parse_module(&Arc::new(SourceFile::new("u.fbir", src)), &reg).unwrap();
    let e = Interpreter::new(&m).run("f", vec![f32s(&[2], &[1.0, 2.0])]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "`layout.future` is not supported by the interpreter: no kernel for this op; add one to \
         the table in runtime/src/interp/ops.rs"
    );
    assert!(e.span().is_some());

    let m = module("func.func @f() -> tensor<2xi64> {\n  %0 = tensor.constant {value = 1.0} : () -> tensor<2xi64>\n  func.return %0 : tensor<2xi64>\n}");
    let e = Interpreter::new(&m).run("f", vec![]).unwrap_err();
    assert!(
        e.to_string().starts_with(
            "`tensor.constant` is not supported by the interpreter: result 0 is tensor<2xi64>"
        ),
        "{e}"
    );

    let m = module("func.func @f(%x: tensor<2xi64>) {\n  func.return\n}");
    let e = random_inputs(&m, "f", 1).unwrap_err();
    assert!(matches!(e, InterpError::UnsupportedArgument { .. }), "{e}");
}

#[test]
fn recursion_hits_the_depth_limit() {
    let src = "func.func @f(%x: tensor<1xf32>) -> tensor<1xf32> {\n  %0 = func.call %x {callee = @f} : (tensor<1xf32>) -> tensor<1xf32>\n  func.return %0 : tensor<1xf32>\n}";
    let m = module(src);
    let e = Interpreter::new(&m).run("f", vec![f32s(&[1], &[0.0])]).unwrap_err();
    assert!(matches!(e, InterpError::CallDepth { limit: 64, .. }), "{e:?}");
}

const IDS: &str = "
func.func @inner(%j: tensor<2x3xi32>, %table: tensor<7x4xf32>) -> tensor<2x3x4xf32> {
  %0 = tensor.embedding %table, %j
  func.return %0 : tensor<2x3x4xf32>
}
func.func @f(%ids: tensor<6xi32>, %table: tensor<7x4xf32>, %logits: tensor<6x5xf32>, %labels: tensor<6xi32>, %flag: tensor<3xi32>, %h: tensor<2xf16>, %d: tensor<2xf64>) -> (tensor<2x3x4xf32>, tensor<f32>, tensor<6xi32>) {
  %r = tensor.reshape %ids {shape = [2, 3]}
  %0 = func.call %r, %table {callee = @inner} : (tensor<2x3xi32>, tensor<7x4xf32>) -> tensor<2x3x4xf32>
  %1 = tensor.cross_entropy %logits, %labels
  %2 = tensor.cross_entropy %logits, %ids
  func.return %0, %1, %labels : (tensor<2x3x4xf32>, tensor<f32>, tensor<6xi32>) -> ()
}";

#[test]
fn random_inputs_respect_index_bounds_and_are_deterministic() {
    let m = module(IDS);
    let f = m.find_func("f").unwrap();
    // ids: rows of a 7-row table (through reshape and a call) and labels of 5 classes: 5.
    assert_eq!(index_bound(&m, f, 0), Some(5));
    assert_eq!(index_bound(&m, f, 3), Some(5));
    assert_eq!(index_bound(&m, f, 4), None);
    let a = random_inputs(&m, "f", 7).unwrap();
    assert_eq!(a, random_inputs(&m, "f", 7).unwrap());
    assert_ne!(a, random_inputs(&m, "f", 8).unwrap());
    let ints = |v: &Value| v.as_i32().unwrap().data().to_vec();
    assert!(ints(&a[0]).iter().all(|&i| (0..5).contains(&i)));
    assert!(ints(&a[4]).iter().all(|&i| (0..2).contains(&i)));
    let floats = a[1].to_f64_vec();
    assert!(floats.iter().all(|v| (-1.0..1.0).contains(v)));
    assert!(floats.iter().any(|&v| v < 0.0) && floats.iter().any(|&v| v > 0.0));
    // f16 values are f16 numbers; f64 arguments get f64 storage.
    for v in a[5].to_f64_vec() {
        assert_eq!(v, f64::from(half_round(v as f32)));
    }
    assert!(matches!(a[6], Value::F64(_)));
    // They run.
    Interpreter::new(&m).run("f", a).unwrap();
}

fn half_round(x: f32) -> f32 {
    fbc_runtime::reference::round_f16(x)
}

#[test]
fn equivalence_checker_accepts_equal_and_reports_the_worst_difference() {
    let before = module(
        "func.func @f(%x: tensor<2x2xf32>) -> tensor<2x2xf32> {\n  %0 = tensor.scale %x {factor = 2.0}\n  %1 = tensor.transpose %0 {perm = [1, 0]}\n  %2 = tensor.transpose %1 {perm = [1, 0]}\n  func.return %2 : tensor<2x2xf32>\n}",
    );
    let same = module(
        "func.func @f(%x: tensor<2x2xf32>) -> tensor<2x2xf32> {\n  %0 = tensor.add %x, %x\n  func.return %0 : tensor<2x2xf32>\n}",
    );
    check_equivalent(&before, &same, "f", 1, Tolerance::F32).unwrap();
    check_equivalent(&before, &same, "f", 1, Tolerance::EXACT).unwrap();
    let off = module(
        "func.func @f(%x: tensor<2x2xf32>) -> tensor<2x2xf32> {\n  %0 = tensor.scale %x {factor = 2.001}\n  func.return %0 : tensor<2x2xf32>\n}",
    );
    let e = check_equivalent(&before, &off, "f", 1, Tolerance::F32).unwrap_err();
    assert!(
        e.starts_with("@f (seed 1), result 0 (tensor<2x2xf32>): 4 of 4 elements differ"),
        "{e}"
    );
    assert!(e.contains("worst at ["), "{e}");
    let other_sig = module(
        "func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {\n  func.return %x : tensor<4xf32>\n}",
    );
    let e = check_equivalent(&before, &other_sig, "f", 1, Tolerance::F32).unwrap_err();
    assert!(e.contains("changed its signature"), "{e}");
    let e = check_equivalent(&before, &same, "g", 1, Tolerance::F32).unwrap_err();
    assert!(e.contains("no function named @g"), "{e}");
}

#[test]
fn compare_values_tolerances() {
    let a = f32s(&[3], &[1.0, f64::NAN, f64::INFINITY]);
    assert!(compare_values(&a, &a.clone(), Tolerance::EXACT).is_ok());
    let b = f32s(&[3], &[1.0 + 1e-6, f64::NAN, f64::INFINITY]);
    assert!(compare_values(&a, &b, Tolerance::F32).is_ok());
    assert!(compare_values(&a, &b, Tolerance::EXACT).is_err());
    let c = f32s(&[3], &[1.0, 0.0, f64::INFINITY]);
    let e = compare_values(&a, &c, Tolerance::F32).unwrap_err();
    assert!(e.contains("worst at [1]: before NaN, after 0"), "{e}");
    let d = f32s(&[3], &[1.0, f64::NAN, f64::NEG_INFINITY]);
    assert!(compare_values(&a, &d, Tolerance::new(1.0, 1.0)).is_err());
    assert!(compare_values(&a, &f32s(&[1, 3], &[1.0, 2.0, 3.0]), Tolerance::F32).is_err());
}

#[test]
fn pow_select_erf_and_cast() {
    let src = "
func.func @f(%a: tensor<5xf32>, %b: tensor<5xf32>, %m: tensor<5xf32>) -> (tensor<5xf32>, tensor<5xf32>, tensor<5xf32>, tensor<5xf16>, tensor<5xf32>) {
  %0 = tensor.pow %a, %b
  %1 = tensor.select %m, %a, %b
  %2 = tensor.erf %a
  %3 = tensor.cast %b {dtype = \"f16\"}
  %4 = tensor.cast %3 {dtype = \"f32\"}
  func.return %0, %1, %2, %3, %4 : (tensor<5xf32>, tensor<5xf32>, tensor<5xf32>, tensor<5xf16>, tensor<5xf32>) -> ()
}";
    let a = f32s(&[5], &[2.0, -2.0, -2.0, 0.0, 4.0]);
    let b = f32s(&[5], &[3.0, 3.0, 0.5, -1.0, 0.1]);
    let m = f32s(&[5], &[1.0, 0.0, 2.0, 0.0, -1.0]);
    let r = run(src, vec![a, b, m]);
    // C's pow: a negative base with an odd integral exponent is negative, with a fractional one
    // NaN; 0^-1 = +inf.
    let p = r[0].to_f64_vec();
    assert_eq!(p[0], 8.0);
    assert_eq!(p[1], -8.0);
    assert!(p[2].is_nan());
    assert_eq!(p[3], f64::INFINITY);
    assert!((p[4] - 4f64.powf(0.1)).abs() < 1e-6);
    close(&r[1], &[5], &[2.0, 3.0, -2.0, -1.0, 4.0], 0.0);
    // erf(2) = 0.995322265, erf(-2) = -erf(2), erf(0) = 0, erf(4) = 0.9999999846.
    close(&r[2], &[5], &[0.995_322_265, -0.995_322_265, -0.995_322_265, 0.0, 0.999_999_985], 1e-6);
    // 0.1 in f16 is 0.0999755859375; the others are exact.
    close(&r[4], &[5], &[3.0, 3.0, 0.5, -1.0, 0.099_975_585_937_5], 0.0);
}

/// `tensor.dequantize` by hand: INT8 in groups of 2 over rows of 5 (the last group a single
/// value; a zero scale), INT4 in groups of 4 over rows of 5 (odd: 3 bytes a row, the last high
/// nibble unused; the low nibble first; nibble 0 is -8; a zero group).
#[test]
fn dequantize_by_hand() {
    let src = "func.func @f(%q8: tensor<2x5xi8>, %s8: tensor<2x3xf32>, %q4: tensor<2x3xi8>, %s4: tensor<2x2xf32>) -> (tensor<2x5xf32>, tensor<2x5xf32>) {\n  %a = tensor.dequantize %q8, %s8 {group = 2, scheme = \"int8\"} : (tensor<2x5xi8>, tensor<2x3xf32>) -> tensor<2x5xf32>\n  %b = tensor.dequantize %q4, %s4 {cols = 5, group = 4, scheme = \"int4\"} : (tensor<2x3xi8>, tensor<2x2xf32>) -> tensor<2x5xf32>\n  func.return %a, %b : tensor<2x5xf32>, tensor<2x5xf32>\n}";
    let q8 = i32s(&[2, 5], &[1, -2, 127, -127, 5, 3, 4, 9, 9, -1]);
    let s8 = f32s(&[2, 3], &[0.5, 0.25, 2.0, 0.0, 1.0, 0.125]);
    // Row 0: codes 7 -7 1 0 -3 → nibbles 15 1 9 8 5 → bytes 0x1F, 0x89, 0x85 (pad nibble 8).
    // Row 1: codes -8 2 0 0 4 → nibbles 0 10 8 8 12 → bytes 0xA0, 0x88, 0x8C.
    let byte = |b: u8| i32::from(b as i8);
    let q4 =
        i32s(&[2, 3], &[byte(0x1F), byte(0x89), byte(0x85), byte(0xA0), byte(0x88), byte(0x8C)]);
    let s4 = f32s(&[2, 2], &[0.5, 2.0, 0.0, 0.25]);
    let out = run(src, vec![q8, s8, q4, s4]);
    close(&out[0], &[2, 5], &[0.5, -1.0, 31.75, -31.75, 10.0, 0.0, 0.0, 9.0, 9.0, -0.125], 0.0);
    close(&out[1], &[2, 5], &[3.5, -3.5, 0.5, 0.0, -6.0, 0.0, 0.0, 0.0, 0.0, 1.0], 0.0);

    // A packed value that is not a byte is refused, naming the argument.
    let m = module(src);
    let bad = vec![
        i32s(&[2, 5], &[1, -2, 128, -127, 5, 3, 4, 9, 9, -1]),
        f32s(&[2, 3], &[0.5; 6]),
        i32s(&[2, 3], &[0; 6]),
        f32s(&[2, 2], &[0.5; 4]),
    ];
    let e = Interpreter::new(&m).run("f", bad).unwrap_err().to_string();
    assert!(e.contains("%q8"), "{e}");
}

/// The interpreter's dequantize is the `.fbw` reader's decoding: rows packed by `encode_row`
/// (odd lengths, a short last group) read back through the IR op give `decode_row`'s values.
#[test]
fn dequantize_matches_the_weight_file_decoding() {
    use fbc_runtime::weights::quant::{decode_row, encode_row};
    use fbc_runtime::weights::Quant;
    let (rows, cols, group) = (3usize, 7usize, 3usize);
    let x: Vec<f32> = (0..rows * cols).map(|k| ((k * 37 % 23) as f32 - 11.0) * 0.37).collect();
    for (scheme, name) in [(Quant::Int8, "int8"), (Quant::Int4, "int4")] {
        let (mut bytes, mut scales, mut want) = (Vec::new(), Vec::new(), Vec::new());
        for r in x.chunks(cols) {
            let (b0, s0) = (bytes.len(), scales.len());
            encode_row(scheme, r, group, &mut bytes, &mut scales);
            decode_row(scheme, &bytes[b0..], &scales[s0..], cols, group, &mut want);
        }
        let nb = bytes.len() / rows;
        let ng = scales.len() / rows;
        let src = format!(
            "func.func @f(%q: tensor<{rows}x{nb}xi8>, %s: tensor<{rows}x{ng}xf32>) -> tensor<{rows}x{cols}xf32> {{\n  %w = tensor.dequantize %q, %s {{cols = {cols}, group = {group}, scheme = \"{name}\"}} : (tensor<{rows}x{nb}xi8>, tensor<{rows}x{ng}xf32>) -> tensor<{rows}x{cols}xf32>\n  func.return %w : tensor<{rows}x{cols}xf32>\n}}"
        );
        let q = i32s(&[rows, nb], &bytes.iter().map(|&b| i32::from(b as i8)).collect::<Vec<_>>());
        let s = Value::F32(Tensor::new(vec![rows, ng], scales.clone()).unwrap());
        let out = run(&src, vec![q, s]);
        let Value::F32(t) = &out[0] else { panic!("{:?}", out[0]) };
        assert_eq!(t.data(), &want[..], "{name}");
    }
}

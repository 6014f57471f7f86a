//! layernorm, rmsnorm, rope, embedding, cross_entropy.

mod common;

use common::{assert_err, infer};

#[test]
fn layernorm() {
    let args = ["tensor<2x8x64xf32>", "tensor<64xf32>", "tensor<64xf32>"];
    assert_eq!(infer(&args, "tensor.layernorm %a0, %a1, %a2"), "tensor<2x8x64xf32>");
    assert_eq!(
        infer(&args, "tensor.layernorm %a0, %a1, %a2 {axis = 2, eps = 1.0e-6}"),
        "tensor<2x8x64xf32>"
    );
    assert_eq!(
        infer(
            &["tensor<2x8x64xf32>", "tensor<8xf32>", "tensor<8xf32>"],
            "tensor.layernorm %a0, %a1, %a2 {axis = 1, eps = 0}"
        ),
        "tensor<2x8x64xf32>"
    );
    let d = assert_err(
        &["tensor<2x8x64xf32>", "tensor<32xf32>", "tensor<64xf32>"],
        "tensor.layernorm %a0, %a1, %a2",
        "expected tensor<64xf32>, found tensor<32xf32> — operand 1 (`gamma`) of tensor.layernorm",
        "operand 1 of tensor.layernorm",
    );
    assert_eq!(
        d.notes,
        ["`gamma` has shape [x.shape[axis]] = [64]: `x` is tensor<2x8x64xf32> and `axis` is -1"]
    );
    assert_err(
        &["tensor<2x8x64xf32>", "tensor<64xf32>", "tensor<64xf16>"],
        "tensor.layernorm %a0, %a1, %a2",
        "expected tensor<64xf32>, found tensor<64xf16> — operand 2 (`beta`) of tensor.layernorm",
        "operand 2 of tensor.layernorm",
    );
    assert_err(
        &["tensor<2x8x64xf32>", "tensor<64xf32>", "tensor<1x64xf32>"],
        "tensor.layernorm %a0, %a1, %a2",
        "expected tensor<64xf32>, found tensor<1x64xf32> — operand 2 (`beta`) of tensor.layernorm",
        "operand 2 of tensor.layernorm",
    );
    assert_err(
        &args,
        "tensor.layernorm %a0, %a1, %a2 {axis = 3}",
        "expected an axis from -3 to 2, found 3 — `axis` of tensor.layernorm",
        "attribute `axis` of tensor.layernorm",
    );
    assert_err(
        &args,
        "tensor.layernorm %a0, %a1, %a2 {eps = -1.0}",
        "expected a finite, non-negative epsilon, found -1.0 — `eps` of tensor.layernorm",
        "attribute `eps` of tensor.layernorm",
    );
    assert_err(
        &["tensor<2x64xi32>", "tensor<64xi32>", "tensor<64xi32>"],
        "tensor.layernorm %a0, %a1, %a2",
        "expected a float element type, found i32 — operand 0 (`x`) of tensor.layernorm",
        "operand 0 of tensor.layernorm",
    );
    assert_err(
        &args[..2],
        "tensor.layernorm %a0, %a1",
        "`tensor.layernorm` takes 3 operands, found 2",
        "op",
    );
}

#[test]
fn rmsnorm() {
    let args = ["tensor<2x8x64xbf16>", "tensor<64xbf16>"];
    assert_eq!(infer(&args, "tensor.rmsnorm %a0, %a1"), "tensor<2x8x64xbf16>");
    assert_eq!(infer(&args, "tensor.rmsnorm %a0, %a1 {eps = 1.0e-6}"), "tensor<2x8x64xbf16>");
    let d = assert_err(
        &["tensor<2x8x64xf32>", "tensor<8xf32>"],
        "tensor.rmsnorm %a0, %a1",
        "expected tensor<64xf32>, found tensor<8xf32> — operand 1 (`gamma`) of tensor.rmsnorm",
        "operand 1 of tensor.rmsnorm",
    );
    assert_eq!(
        d.notes,
        ["`gamma` has shape [D] = [64], the last dimension of `x` (tensor<2x8x64xf32>)"]
    );
    assert_err(
        &["tensor<f32>", "tensor<1xf32>"],
        "tensor.rmsnorm %a0, %a1",
        "expected rank ≥ 1, found rank 0 — operand 0 (`x`) of tensor.rmsnorm",
        "operand 0 of tensor.rmsnorm",
    );
    assert_eq!(infer(&args, "tensor.rmsnorm %a0, %a1 {eps = 1}"), "tensor<2x8x64xbf16>");
    assert_err(
        &args,
        "tensor.rmsnorm %a0, %a1 {eps = -0.5}",
        "expected a finite, non-negative epsilon, found -0.5 — `eps` of tensor.rmsnorm",
        "attribute `eps` of tensor.rmsnorm",
    );
    assert_err(
        &["tensor<2x8xf32>", "tensor<8xf16>"],
        "tensor.rmsnorm %a0, %a1",
        "expected tensor<8xf32>, found tensor<8xf16> — operand 1 (`gamma`) of tensor.rmsnorm",
        "operand 1 of tensor.rmsnorm",
    );
}

#[test]
fn rope() {
    let args = ["tensor<1x32x512x64xf32>", "tensor<512x64xf32>", "tensor<512x64xf32>"];
    assert_eq!(infer(&args, "tensor.rope %a0, %a1, %a2"), "tensor<1x32x512x64xf32>");
    assert_eq!(
        infer(
            &["tensor<4x2xf16>", "tensor<4x2xf16>", "tensor<4x2xf16>"],
            "tensor.rope %a0, %a1, %a2"
        ),
        "tensor<4x2xf16>"
    );
    let d = assert_err(
        &["tensor<2x4x63xf32>", "tensor<4x63xf32>", "tensor<4x63xf32>"],
        "tensor.rope %a0, %a1, %a2",
        "expected an even last dimension, found 63 — operand 0 (`x`) of tensor.rope",
        "operand 0 of tensor.rope",
    );
    assert_eq!(
        d.notes,
        ["`x` is tensor<2x4x63xf32>; rotate_half splits the last dimension into two halves"]
    );
    let d = assert_err(
        &["tensor<2x4x8xf32>", "tensor<5x8xf32>", "tensor<4x8xf32>"],
        "tensor.rope %a0, %a1, %a2",
        "expected tensor<4x8xf32>, found tensor<5x8xf32> — operand 1 (`cos`) of tensor.rope",
        "operand 1 of tensor.rope",
    );
    assert_eq!(
        d.notes,
        ["`cos` is [S, D] = [4, 8], the last two dimensions of `x` (tensor<2x4x8xf32>)"]
    );
    assert_err(
        &["tensor<2x4x8xf32>", "tensor<4x8xf32>", "tensor<1x4x8xf32>"],
        "tensor.rope %a0, %a1, %a2",
        "expected tensor<4x8xf32>, found tensor<1x4x8xf32> — operand 2 (`sin`) of tensor.rope",
        "operand 2 of tensor.rope",
    );
    assert_err(
        &["tensor<8xf32>", "tensor<8xf32>", "tensor<8xf32>"],
        "tensor.rope %a0, %a1, %a2",
        "expected rank ≥ 2, found rank 1 — operand 0 (`x`) of tensor.rope",
        "operand 0 of tensor.rope",
    );
}

#[test]
fn embedding() {
    assert_eq!(
        infer(&["tensor<32000x512xf32>", "tensor<2x128xi32>"], "tensor.embedding %a0, %a1"),
        "tensor<2x128x512xf32>"
    );
    assert_eq!(
        infer(&["tensor<10x4xf16>", "tensor<i32>"], "tensor.embedding %a0, %a1"),
        "tensor<4xf16>"
    );
    let d = assert_err(
        &["tensor<10x4xf32>", "tensor<3xi64>"],
        "tensor.embedding %a0, %a1",
        "expected element type i32, found i64 — operand 1 (`ids`) of tensor.embedding",
        "operand 1 of tensor.embedding",
    );
    assert_eq!(d.notes, ["`ids` is tensor<3xi64>; indices are i32"]);
    assert_err(
        &["tensor<10x4xf32>", "tensor<3xf32>"],
        "tensor.embedding %a0, %a1",
        "expected element type i32, found f32 — operand 1 (`ids`) of tensor.embedding",
        "operand 1 of tensor.embedding",
    );
    let d = assert_err(
        &["tensor<10xf32>", "tensor<3xi32>"],
        "tensor.embedding %a0, %a1",
        "expected rank 2, found rank 1 — operand 0 (`table`) of tensor.embedding",
        "operand 0 of tensor.embedding",
    );
    assert_eq!(d.notes, ["`table` is tensor<10xf32>; it must be [V, D]"]);
    assert_err(
        &["tensor<10x4xi32>", "tensor<3xi32>"],
        "tensor.embedding %a0, %a1",
        "expected a float element type, found i32 — operand 0 (`table`) of tensor.embedding",
        "operand 0 of tensor.embedding",
    );
}

#[test]
fn cross_entropy() {
    assert_eq!(
        infer(&["tensor<8x100xf32>", "tensor<8xi32>"], "tensor.cross_entropy %a0, %a1"),
        "tensor<f32>"
    );
    assert_eq!(
        infer(&["tensor<8x100xf16>", "tensor<8xi32>"], "tensor.cross_entropy %a0, %a1"),
        "tensor<f16>"
    );
    let d = assert_err(
        &["tensor<8x100xf32>", "tensor<4xi32>"],
        "tensor.cross_entropy %a0, %a1",
        "expected tensor<8xi32>, found tensor<4xi32> — operand 1 (`labels`) of tensor.cross_entropy",
        "operand 1 of tensor.cross_entropy",
    );
    assert_eq!(
        d.notes,
        ["`labels` is [N] = [8], one label per row of `logits` (tensor<8x100xf32>)"]
    );
    assert_err(
        &["tensor<8x100xf32>", "tensor<8xf32>"],
        "tensor.cross_entropy %a0, %a1",
        "expected element type i32, found f32 — operand 1 (`labels`) of tensor.cross_entropy",
        "operand 1 of tensor.cross_entropy",
    );
    assert_err(
        &["tensor<2x8x100xf32>", "tensor<8xi32>"],
        "tensor.cross_entropy %a0, %a1",
        "expected rank 2, found rank 3 — operand 0 (`logits`) of tensor.cross_entropy",
        "operand 0 of tensor.cross_entropy",
    );
    assert_err(
        &["tensor<8x100xi32>", "tensor<8xi32>"],
        "tensor.cross_entropy %a0, %a1",
        "expected a float element type, found i32 — operand 0 (`logits`) of tensor.cross_entropy",
        "operand 0 of tensor.cross_entropy",
    );
}

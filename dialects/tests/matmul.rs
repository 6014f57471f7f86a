//! `tensor.matmul`: inference, transposes, batch broadcasting and every verifier rule.

mod common;

use common::{assert_err, infer};

#[test]
fn plain_and_batched() {
    assert_eq!(
        infer(&["tensor<4x8xf32>", "tensor<8x16xf32>"], "tensor.matmul %a0, %a1"),
        "tensor<4x16xf32>"
    );
    assert_eq!(
        infer(&["tensor<1x512x2048xf32>", "tensor<2048x2048xf32>"], "tensor.matmul %a0, %a1"),
        "tensor<1x512x2048xf32>"
    );
    assert_eq!(
        infer(&["tensor<2x1x4x8xf16>", "tensor<3x8x5xf16>"], "tensor.matmul %a0, %a1"),
        "tensor<2x3x4x5xf16>"
    );
    assert_eq!(
        infer(&["tensor<0x8xf32>", "tensor<8x0xf32>"], "tensor.matmul %a0, %a1"),
        "tensor<0x0xf32>"
    );
}

#[test]
fn transposes() {
    let args = ["tensor<2x8x4xf32>", "tensor<2x16x8xf32>"];
    assert_eq!(
        infer(&args, "tensor.matmul %a0, %a1 {transpose_a = true, transpose_b = true}"),
        "tensor<2x4x16xf32>"
    );
    assert_eq!(
        infer(
            &["tensor<8x4xf32>", "tensor<8x16xf32>"],
            "tensor.matmul %a0, %a1 {transpose_a = true}"
        ),
        "tensor<4x16xf32>"
    );
    assert_eq!(
        infer(
            &["tensor<4x8xf32>", "tensor<16x8xf32>"],
            "tensor.matmul %a0, %a1 {transpose_a = false, transpose_b = true}"
        ),
        "tensor<4x16xf32>"
    );
}

#[test]
fn contraction_mismatch() {
    let d = assert_err(
        &["tensor<1x512x2048xf32>", "tensor<1024x2048xf32>"],
        "tensor.matmul %a0, %a1",
        "expected 2048, found 1024 — the contraction dimension of tensor.matmul",
        "operand 1 of tensor.matmul",
    );
    assert_eq!(
        d.notes,
        [
            "`a` is tensor<1x512x2048xf32>, read as [..., M, K] with K = 2048",
            "`b` is tensor<1024x2048xf32>, read as [..., K, N] with K = 1024",
        ]
    );
    let d = assert_err(
        &["tensor<4x8xf32>", "tensor<8x16xf32>"],
        "tensor.matmul %a0, %a1 {transpose_b = true}",
        "expected 8, found 16 — the contraction dimension of tensor.matmul",
        "operand 1 of tensor.matmul",
    );
    assert_eq!(
        d.notes[1],
        "`b` is tensor<8x16xf32>, read as [..., N, K] (transpose_b = true) with K = 16"
    );
}

#[test]
fn batch_mismatch() {
    let d = assert_err(
        &["tensor<2x3x4x5xf32>", "tensor<4x5x6xf32>"],
        "tensor.matmul %a0, %a1",
        "cannot broadcast the batch dimensions [2, 3] of tensor<2x3x4x5xf32> with [4] of tensor<4x5x6xf32>: dimension 1 is 3 vs 4",
        "op",
    );
    assert_eq!(d.notes, ["batch dimensions (all but the last two) broadcast as NumPy does"]);
}

#[test]
fn rank_and_types() {
    let d = assert_err(
        &["tensor<8xf32>", "tensor<8x4xf32>"],
        "tensor.matmul %a0, %a1",
        "expected rank ≥ 2, found rank 1 — operand 0 (`a`) of tensor.matmul",
        "operand 0 of tensor.matmul",
    );
    assert_eq!(d.notes, ["`a` is tensor<8xf32>"]);
    assert_err(
        &["tensor<4x8xf32>", "tensor<8xf32>"],
        "tensor.matmul %a0, %a1",
        "expected rank ≥ 2, found rank 1 — operand 1 (`b`) of tensor.matmul",
        "operand 1 of tensor.matmul",
    );
    assert_err(
        &["tensor<4x8xf32>", "tensor<8x4xbf16>"],
        "tensor.matmul %a0, %a1",
        "expected f32, found bf16 — the element type of operand 1 (`b`) of tensor.matmul",
        "operand 1 of tensor.matmul",
    );
    assert_err(
        &["tensor<4x8xi32>", "tensor<8x4xi32>"],
        "tensor.matmul %a0, %a1",
        "expected a float element type, found i32 — operand 0 (`a`) of tensor.matmul",
        "operand 0 of tensor.matmul",
    );
    assert_err(
        &["tensor<4x8xf32>", "tensor<8x4xf32>"],
        "tensor.matmul %a0, %a1 {transpose_a = 1}",
        "`transpose_a` must be a boolean, found integer `1`",
        "attribute `transpose_a` of tensor.matmul",
    );
}

#[test]
fn result_overflow() {
    assert_err(
        &["tensor<4294967296x1x2x2xf32>", "tensor<4294967296x2x2xf32>"],
        "tensor.matmul %a0, %a1",
        "the result tensor<4294967296x4294967296x2x2xf32> of tensor.matmul has more elements than fit in 64 bits",
        "op",
    );
}

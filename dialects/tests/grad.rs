//! Backward helper ops.

mod common;

use common::{assert_err, assert_err_n, infer, infer_n};

#[test]
fn softmax_grad() {
    let args = ["tensor<2x8xf32>", "tensor<2x8xf32>"];
    assert_eq!(infer(&args, "tensor.softmax_grad %a0, %a1"), "tensor<2x8xf32>");
    assert_eq!(infer(&args, "tensor.softmax_grad %a0, %a1 {axis = 0}"), "tensor<2x8xf32>");
    let d = assert_err(
        &["tensor<2x8xf32>", "tensor<8xf32>"],
        "tensor.softmax_grad %a0, %a1",
        "expected tensor<2x8xf32>, found tensor<8xf32> — operand 1 (`dy`) of tensor.softmax_grad",
        "operand 1 of tensor.softmax_grad",
    );
    assert_eq!(d.notes, ["`dy` must have the type of `y`"]);
    assert_err(
        &args,
        "tensor.softmax_grad %a0, %a1 {axis = -3}",
        "expected an axis from -2 to 1, found -3 — `axis` of tensor.softmax_grad",
        "attribute `axis` of tensor.softmax_grad",
    );
    assert_err(
        &["tensor<2xi32>", "tensor<2xi32>"],
        "tensor.softmax_grad %a0, %a1",
        "expected a float element type, found i32 — operand 0 (`y`) of tensor.softmax_grad",
        "operand 0 of tensor.softmax_grad",
    );
}

#[test]
fn layernorm_grad() {
    let args = ["tensor<2x8x64xf32>", "tensor<64xf32>", "tensor<2x8x64xf32>"];
    assert_eq!(
        infer_n(&args, "tensor.layernorm_grad %a0, %a1, %a2", 3),
        ["tensor<2x8x64xf32>", "tensor<64xf32>", "tensor<64xf32>"]
    );
    assert_eq!(
        infer_n(
            &["tensor<2x8x64xf32>", "tensor<8xf32>", "tensor<2x8x64xf32>"],
            "tensor.layernorm_grad %a0, %a1, %a2 {axis = 1, eps = 1.0e-6}",
            3
        ),
        ["tensor<2x8x64xf32>", "tensor<8xf32>", "tensor<8xf32>"]
    );
    assert_err_n(
        &["tensor<2x8x64xf32>", "tensor<64xf32>", "tensor<2x8x32xf32>"],
        "tensor.layernorm_grad %a0, %a1, %a2",
        3,
        "expected tensor<2x8x64xf32>, found tensor<2x8x32xf32> — operand 2 (`dy`) of tensor.layernorm_grad",
        "operand 2 of tensor.layernorm_grad",
    );
    assert_err_n(
        &["tensor<2x8x64xf32>", "tensor<8xf32>", "tensor<2x8x64xf32>"],
        "tensor.layernorm_grad %a0, %a1, %a2",
        3,
        "expected tensor<64xf32>, found tensor<8xf32> — operand 1 (`gamma`) of tensor.layernorm_grad",
        "operand 1 of tensor.layernorm_grad",
    );
    assert_err_n(
        &args,
        "tensor.layernorm_grad %a0, %a1, %a2 {eps = -1.0e-5}",
        3,
        "expected a finite, non-negative epsilon, found -1.0e-5 — `eps` of tensor.layernorm_grad",
        "attribute `eps` of tensor.layernorm_grad",
    );
    assert_err_n(
        &args,
        "tensor.layernorm_grad %a0, %a1, %a2 {axis = 5}",
        3,
        "expected an axis from -3 to 2, found 5 — `axis` of tensor.layernorm_grad",
        "attribute `axis` of tensor.layernorm_grad",
    );
    // Binding the wrong number of results.
    let d = common::only_error(&common::module_text(
        &args,
        "%r0 = tensor.layernorm_grad %a0, %a1, %a2",
    ));
    assert_eq!(d.message, "`tensor.layernorm_grad` has 3 results, found 1");
}

#[test]
fn rmsnorm_grad() {
    let args = ["tensor<4x64xf16>", "tensor<64xf16>", "tensor<4x64xf16>"];
    assert_eq!(
        infer_n(&args, "tensor.rmsnorm_grad %a0, %a1, %a2 {eps = 1.0e-6}", 2),
        ["tensor<4x64xf16>", "tensor<64xf16>"]
    );
    assert_err_n(
        &["tensor<4x64xf16>", "tensor<4xf16>", "tensor<4x64xf16>"],
        "tensor.rmsnorm_grad %a0, %a1, %a2",
        2,
        "expected tensor<64xf16>, found tensor<4xf16> — operand 1 (`gamma`) of tensor.rmsnorm_grad",
        "operand 1 of tensor.rmsnorm_grad",
    );
    assert_err_n(
        &["tensor<4x64xf16>", "tensor<64xf16>", "tensor<4x64xf32>"],
        "tensor.rmsnorm_grad %a0, %a1, %a2",
        2,
        "expected tensor<4x64xf16>, found tensor<4x64xf32> — operand 2 (`dy`) of tensor.rmsnorm_grad",
        "operand 2 of tensor.rmsnorm_grad",
    );
    assert_err_n(
        &args,
        "tensor.rmsnorm_grad %a0, %a1, %a2 {eps = \"small\"}",
        2,
        "`eps` must be a float, found string `\"small\"`",
        "attribute `eps` of tensor.rmsnorm_grad",
    );
}

#[test]
fn pointwise_grads() {
    for (name, first) in [
        ("gelu_grad", "x"),
        ("silu_grad", "x"),
        ("sigmoid_grad", "y"),
        ("tanh_grad", "y"),
        ("relu_grad", "x"),
    ] {
        let op = format!("tensor.{name} %a0, %a1");
        assert_eq!(infer(&["tensor<3x5xf32>", "tensor<3x5xf32>"], &op), "tensor<3x5xf32>");
        let d = assert_err(
            &["tensor<3x5xf32>", "tensor<1x5xf32>"],
            &op,
            &format!("expected tensor<3x5xf32>, found tensor<1x5xf32> — operand 1 (`dy`) of tensor.{name}"),
            &format!("operand 1 of tensor.{name}"),
        );
        assert_eq!(d.notes, [format!("`dy` must have the type of `{first}`")]);
        assert_err(
            &["tensor<3xi32>", "tensor<3xi32>"],
            &op,
            &format!(
                "expected a float element type, found i32 — operand 0 (`{first}`) of tensor.{name}"
            ),
            &format!("operand 0 of tensor.{name}"),
        );
    }
    assert_eq!(
        infer(
            &["tensor<3xf32>", "tensor<3xf32>"],
            "tensor.gelu_grad %a0, %a1 {approximate = \"tanh\"}"
        ),
        "tensor<3xf32>"
    );
    assert_err(
        &["tensor<3xf32>", "tensor<3xf32>"],
        "tensor.gelu_grad %a0, %a1 {approximate = 1}",
        "`approximate` must be one of \"none\", \"tanh\", found integer `1`",
        "attribute `approximate` of tensor.gelu_grad",
    );
}

#[test]
fn rope_grad() {
    let args = ["tensor<2x4x8xf32>", "tensor<4x8xf32>", "tensor<4x8xf32>"];
    assert_eq!(infer(&args, "tensor.rope_grad %a0, %a1, %a2"), "tensor<2x4x8xf32>");
    assert_err(
        &["tensor<2x4x8xf32>", "tensor<4x8xf32>", "tensor<4x6xf32>"],
        "tensor.rope_grad %a0, %a1, %a2",
        "expected tensor<4x8xf32>, found tensor<4x6xf32> — operand 2 (`sin`) of tensor.rope_grad",
        "operand 2 of tensor.rope_grad",
    );
    assert_err(
        &["tensor<2x4x7xf32>", "tensor<4x7xf32>", "tensor<4x7xf32>"],
        "tensor.rope_grad %a0, %a1, %a2",
        "expected an even last dimension, found 7 — operand 0 (`dy`) of tensor.rope_grad",
        "operand 0 of tensor.rope_grad",
    );
}

#[test]
fn cross_entropy_grad() {
    let args = ["tensor<8x100xf32>", "tensor<8xi32>", "tensor<f32>"];
    assert_eq!(infer(&args, "tensor.cross_entropy_grad %a0, %a1, %a2"), "tensor<8x100xf32>");
    let d = assert_err(
        &["tensor<8x100xf32>", "tensor<8xi32>", "tensor<1xf32>"],
        "tensor.cross_entropy_grad %a0, %a1, %a2",
        "expected tensor<f32>, found tensor<1xf32> — operand 2 (`dloss`) of tensor.cross_entropy_grad",
        "operand 2 of tensor.cross_entropy_grad",
    );
    assert_eq!(
        d.notes,
        ["`dloss` is the gradient of the scalar loss, rank 0 with the element type of `logits` (tensor<8x100xf32>)"]
    );
    assert_err(
        &["tensor<8x100xf32>", "tensor<9xi32>", "tensor<f32>"],
        "tensor.cross_entropy_grad %a0, %a1, %a2",
        "expected tensor<8xi32>, found tensor<9xi32> — operand 1 (`labels`) of tensor.cross_entropy_grad",
        "operand 1 of tensor.cross_entropy_grad",
    );
}

#[test]
fn embedding_grad() {
    assert_eq!(
        infer(
            &["tensor<2x16xi32>", "tensor<2x16x64xf32>"],
            "tensor.embedding_grad %a0, %a1 {vocab = 1000}"
        ),
        "tensor<1000x64xf32>"
    );
    let d = assert_err(
        &["tensor<2x16xi32>", "tensor<2x64xf32>"],
        "tensor.embedding_grad %a0, %a1 {vocab = 1000}",
        "expected rank 3, found rank 2 — operand 1 (`dy`) of tensor.embedding_grad",
        "operand 1 of tensor.embedding_grad",
    );
    assert_eq!(
        d.notes,
        ["`dy` is tensor<2x64xf32>; it must be [ids.shape..., D] for `ids` tensor<2x16xi32>"]
    );
    assert_err(
        &["tensor<2x16xi32>", "tensor<2x15x64xf32>"],
        "tensor.embedding_grad %a0, %a1 {vocab = 1000}",
        "expected 16, found 15 — dimension 1 of operand 1 (`dy`) of tensor.embedding_grad",
        "operand 1 of tensor.embedding_grad",
    );
    assert_err(
        &["tensor<2x16xi32>", "tensor<2x16x64xf32>"],
        "tensor.embedding_grad %a0, %a1 {vocab = 0}",
        "expected a vocabulary size ≥ 1, found 0 — `vocab` of tensor.embedding_grad",
        "attribute `vocab` of tensor.embedding_grad",
    );
    assert_err(
        &["tensor<2x16xi32>", "tensor<2x16x64xf32>"],
        "tensor.embedding_grad %a0, %a1",
        "`tensor.embedding_grad` requires attribute `vocab`",
        "op",
    );
    assert_err(
        &["tensor<2x16xi32>", "tensor<2x16x64xf32>"],
        "tensor.embedding_grad %a0, %a1 {vocab = -9223372036854775808}",
        "expected a vocabulary size ≥ 1, found -9223372036854775808 — `vocab` of tensor.embedding_grad",
        "attribute `vocab` of tensor.embedding_grad",
    );
    assert_err(
        &["tensor<2x16xi32>", "tensor<2x16x64xi32>"],
        "tensor.embedding_grad %a0, %a1 {vocab = 10}",
        "expected a float element type, found i32 — operand 1 (`dy`) of tensor.embedding_grad",
        "operand 1 of tensor.embedding_grad",
    );
    assert_err(
        &["tensor<2x16xf32>", "tensor<2x16x64xf32>"],
        "tensor.embedding_grad %a0, %a1 {vocab = 10}",
        "expected element type i32, found f32 — operand 0 (`ids`) of tensor.embedding_grad",
        "operand 0 of tensor.embedding_grad",
    );
}

#[test]
fn unbroadcast() {
    assert_eq!(
        infer(&["tensor<2x3x4xf32>"], "tensor.unbroadcast %a0 {shape = [3, 1]}"),
        "tensor<3x1xf32>"
    );
    assert_eq!(infer(&["tensor<2x3xf32>"], "tensor.unbroadcast %a0 {shape = []}"), "tensor<f32>");
    assert_eq!(
        infer(&["tensor<2x3xf32>"], "tensor.unbroadcast %a0 {shape = [2, 3]}"),
        "tensor<2x3xf32>"
    );
    let d = assert_err(
        &["tensor<2x3xf32>"],
        "tensor.unbroadcast %a0 {shape = [4, 2, 3]}",
        "expected at most 2 dimensions, found 3 — `shape` [4, 2, 3] of tensor.unbroadcast",
        "attribute `shape` of tensor.unbroadcast",
    );
    assert_eq!(d.notes, ["`x` (tensor<2x3xf32>) must be a NumPy broadcast of `shape`"]);
    assert_err(
        &["tensor<2x3xf32>"],
        "tensor.unbroadcast %a0 {shape = [2, 4]}",
        "cannot broadcast [2, 4] to tensor<2x3xf32>: dimension 1 is 4 vs 3 — `shape` of tensor.unbroadcast",
        "attribute `shape` of tensor.unbroadcast",
    );
    assert_err(
        &["tensor<2x3xi32>"],
        "tensor.unbroadcast %a0 {shape = [3]}",
        "expected a float element type, found i32 — operand 0 (`x`) of tensor.unbroadcast",
        "operand 0 of tensor.unbroadcast",
    );
    assert_err(
        &["tensor<2x3xf32>"],
        "tensor.unbroadcast %a0 {shape = [-1]}",
        "expected a non-negative dimension, found -1 — element 0 of `shape` of tensor.unbroadcast",
        "attribute `shape` of tensor.unbroadcast",
    );
}

#[test]
fn slice_grad() {
    assert_eq!(
        infer(&["tensor<2x3xf32>"], "tensor.slice_grad %a0 {shape = [4, 6], start = [2, 1]}"),
        "tensor<4x6xf32>"
    );
    let place = "attribute `start` of tensor.slice_grad";
    let d = assert_err(
        &["tensor<2x3xf32>"],
        "tensor.slice_grad %a0 {shape = [4, 6], start = [3, 1]}",
        "expected a start from 0 to 2, found 3 — element 0 of `start` of tensor.slice_grad",
        place,
    );
    assert_eq!(
        d.notes,
        ["axis 0 of `dy` (tensor<2x3xf32>) has size 2; it must fit inside `shape` [4, 6] at `start` [3, 1]"]
    );
    assert_err(
        &["tensor<2x3xf32>"],
        "tensor.slice_grad %a0 {shape = [4, 6], start = [-1, 1]}",
        "expected a start from 0 to 2, found -1 — element 0 of `start` of tensor.slice_grad",
        place,
    );
    assert_err(
        &["tensor<2x3xf32>"],
        "tensor.slice_grad %a0 {shape = [4, 2], start = [0, 0]}",
        "expected at least 3, found 2 — element 1 of `shape` of tensor.slice_grad",
        "attribute `shape` of tensor.slice_grad",
    );
    assert_err(
        &["tensor<2x3xi8>"],
        "tensor.slice_grad %a0 {shape = [4, 6], start = [0, 0]}",
        "expected a float element type, found i8 — operand 0 (`dy`) of tensor.slice_grad",
        "operand 0 of tensor.slice_grad",
    );
    assert_err(
        &["tensor<2x3xf32>"],
        "tensor.slice_grad %a0 {shape = [4, -6], start = [0, 0]}",
        "expected a non-negative dimension, found -6 — element 1 of `shape` of tensor.slice_grad",
        "attribute `shape` of tensor.slice_grad",
    );
    assert_err(
        &["tensor<2x3xf32>"],
        "tensor.slice_grad %a0 {shape = [4, 6], start = [0]}",
        "expected 2 entries, found 1 — `start` of tensor.slice_grad",
        place,
    );
    assert_err(
        &["tensor<2x3xf32>"],
        "tensor.slice_grad %a0 {shape = [4], start = [0, 0]}",
        "expected 2 entries, found 1 — `shape` of tensor.slice_grad",
        "attribute `shape` of tensor.slice_grad",
    );
    assert_err(
        &["tensor<2x3xf32>"],
        "tensor.slice_grad %a0 {shape = [4, 6], start = [9223372036854775807, 0]}",
        "expected a start from 0 to 2, found 9223372036854775807 — element 0 of `start` of tensor.slice_grad",
        place,
    );
}

#[test]
fn ge() {
    assert_eq!(
        infer(&["tensor<2x3xf32>", "tensor<3xf32>"], "tensor.ge %a0, %a1"),
        "tensor<2x3xf32>"
    );
    assert_err(
        &["tensor<2x3xf32>", "tensor<2xf32>"],
        "tensor.ge %a0, %a1",
        "cannot broadcast tensor<2x3xf32> with tensor<2xf32>: dimension 1 is 3 vs 2",
        "op",
    );
    assert_err(
        &["tensor<3xf32>", "tensor<3xf64>"],
        "tensor.ge %a0, %a1",
        "expected f32, found f64 — the element type of operand 1 (`b`) of tensor.ge",
        "operand 1 of tensor.ge",
    );
}

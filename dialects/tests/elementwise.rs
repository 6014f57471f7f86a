//! Elementwise ops: broadcasting binary ops, unary math, gelu and scale.

mod common;

use common::{assert_err, infer};

const BINARY: [&str; 6] = ["add", "sub", "mul", "div", "max", "min"];
const UNARY: [&str; 9] = ["neg", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "silu"];

#[test]
fn binary_ops_broadcast() {
    for op in BINARY {
        let op = format!("tensor.{op} %a0, %a1");
        assert_eq!(infer(&["tensor<2x3xf32>", "tensor<2x3xf32>"], &op), "tensor<2x3xf32>");
        assert_eq!(infer(&["tensor<4x1x3xf16>", "tensor<5x1xf16>"], &op), "tensor<4x5x3xf16>");
        assert_eq!(infer(&["tensor<f32>", "tensor<2x3xf32>"], &op), "tensor<2x3xf32>");
        assert_eq!(infer(&["tensor<0x1xbf16>", "tensor<1x7xbf16>"], &op), "tensor<0x7xbf16>");
    }
}

#[test]
fn binary_ops_reject_bad_shapes() {
    for name in BINARY {
        let op = format!("tensor.{name} %a0, %a1");
        let d = assert_err(
            &["tensor<3x4xf32>", "tensor<5xf32>"],
            &op,
            "cannot broadcast tensor<3x4xf32> with tensor<5xf32>: dimension 1 is 4 vs 5",
            "op",
        );
        assert!(d.notes[0].contains("NumPy broadcasting"));
        assert_err(
            &["tensor<2x3x4xf32>", "tensor<5x4xf32>"],
            &op,
            "cannot broadcast tensor<2x3x4xf32> with tensor<5x4xf32>: dimension 1 is 3 vs 5",
            "op",
        );
    }
}

#[test]
fn binary_ops_reject_mixed_and_integer_types() {
    for name in BINARY {
        let op = format!("tensor.{name} %a0, %a1");
        let d = assert_err(
            &["tensor<2xf32>", "tensor<2xf16>"],
            &op,
            &format!(
                "expected f32, found f16 — the element type of operand 1 (`b`) of tensor.{name}"
            ),
            &format!("operand 1 of tensor.{name}"),
        );
        assert_eq!(
            d.notes,
            ["`a` is tensor<2xf32> and `b` is tensor<2xf16>; they must have the same element type"]
        );
        assert_err(
            &["tensor<2xi32>", "tensor<2xi32>"],
            &op,
            &format!("expected a float element type, found i32 — operand 0 (`a`) of tensor.{name}"),
            &format!("operand 0 of tensor.{name}"),
        );
        assert_err(
            &["tensor<2xf32>", "f32"],
            &op,
            &format!("expected a tensor, found f32 — operand 1 (`b`) of tensor.{name}"),
            &format!("operand 1 of tensor.{name}"),
        );
    }
}

#[test]
fn binary_arity() {
    assert_err(
        &["tensor<2xf32>"],
        "tensor.add %a0",
        "`tensor.add` takes 2 operands, found 1",
        "op",
    );
}

#[test]
fn unary_ops() {
    for name in UNARY {
        let op = format!("tensor.{name} %a0");
        assert_eq!(infer(&["tensor<2x3xf32>"], &op), "tensor<2x3xf32>");
        assert_eq!(infer(&["tensor<bf16>"], &op), "tensor<bf16>");
        let d = assert_err(
            &["tensor<2xi32>"],
            &op,
            &format!("expected a float element type, found i32 — operand 0 (`x`) of tensor.{name}"),
            &format!("operand 0 of tensor.{name}"),
        );
        assert_eq!(
            d.notes,
            [format!(
                "`x` is tensor<2xi32>; `tensor.{name}` computes in floating point (f32, f16, bf16 or f64)"
            )]
        );
        assert_err(
            &["f16"],
            &op,
            &format!("expected a tensor, found f16 — operand 0 (`x`) of tensor.{name}"),
            &format!("operand 0 of tensor.{name}"),
        );
        assert_err(
            &["tensor<2xf32>", "tensor<2xf32>"],
            &format!("tensor.{name} %a0, %a1"),
            &format!("`tensor.{name}` takes 1 operands, found 2"),
            "op",
        );
    }
}

#[test]
fn gelu() {
    assert_eq!(infer(&["tensor<4x8xf32>"], "tensor.gelu %a0"), "tensor<4x8xf32>");
    assert_eq!(
        infer(&["tensor<4x8xf32>"], "tensor.gelu %a0 {approximate = \"tanh\"}"),
        "tensor<4x8xf32>"
    );
    assert_eq!(
        infer(&["tensor<4x8xf32>"], "tensor.gelu %a0 {approximate = \"none\"}"),
        "tensor<4x8xf32>"
    );
    assert_err(
        &["tensor<4xf32>"],
        "tensor.gelu %a0 {approximate = \"fast\"}",
        "`approximate` must be one of \"none\", \"tanh\", found string `\"fast\"`",
        "attribute `approximate` of tensor.gelu",
    );
    assert_err(
        &["tensor<4xi8>"],
        "tensor.gelu %a0",
        "expected a float element type, found i8 — operand 0 (`x`) of tensor.gelu",
        "operand 0 of tensor.gelu",
    );
}

#[test]
fn scale() {
    assert_eq!(infer(&["tensor<3xf32>"], "tensor.scale %a0 {factor = 0.5}"), "tensor<3xf32>");
    assert_eq!(infer(&["tensor<3xf16>"], "tensor.scale %a0 {factor = 2}"), "tensor<3xf16>");
    let d = assert_err(
        &["tensor<3xf32>"],
        "tensor.scale %a0",
        "`tensor.scale` requires attribute `factor`",
        "op",
    );
    assert_eq!(d.notes, ["`factor` is a float: the constant multiplier"]);
    assert_err(
        &["tensor<3xf32>"],
        "tensor.scale %a0 {factor = true}",
        "`factor` must be a float, found boolean `true`",
        "attribute `factor` of tensor.scale",
    );
    assert_err(
        &["tensor<3xi32>"],
        "tensor.scale %a0 {factor = 2.0}",
        "expected a float element type, found i32 — operand 0 (`x`) of tensor.scale",
        "operand 0 of tensor.scale",
    );
}

#[test]
fn unknown_attribute_is_rejected_by_the_verifier() {
    let d = common::only_error(&common::module_text(
        &["tensor<2xf32>"],
        "%r0 = tensor.exp %a0 {axis = 1}",
    ));
    assert_eq!(d.message, "unknown attribute `axis` for `tensor.exp`");
    // Discardable attributes (with a dot) are fine.
    assert_eq!(infer(&["tensor<2xf32>"], "tensor.exp %a0 {fbc.backward = true}"), "tensor<2xf32>");
}

//! Reductions and softmax.

mod common;

use common::{assert_err, infer};

const REDUCE: [&str; 3] = ["reduce_sum", "reduce_max", "reduce_mean"];

#[test]
fn reductions_infer() {
    for name in REDUCE {
        let t = ["tensor<2x3x4xf32>"];
        let op = |attrs: &str| format!("tensor.{name} %a0 {{{attrs}}}");
        assert_eq!(infer(&t, &op("axes = [1]")), "tensor<2x4xf32>");
        assert_eq!(infer(&t, &op("axes = [-1, 0]")), "tensor<3xf32>");
        assert_eq!(infer(&t, &op("axes = [0, 1, 2]")), "tensor<f32>");
        assert_eq!(infer(&t, &op("axes = [2, 0], keepdim = true")), "tensor<1x3x1xf32>");
        assert_eq!(infer(&t, &op("axes = [1], keepdim = false")), "tensor<2x4xf32>");
    }
}

#[test]
fn reductions_reject() {
    for name in REDUCE {
        let t = ["tensor<2x3xf32>"];
        let op = |attrs: &str| format!("tensor.{name} %a0 {attrs}");
        let place = format!("attribute `axes` of tensor.{name}");
        let d =
            assert_err(&t, &op(""), &format!("`tensor.{name}` requires attribute `axes`"), "op");
        assert_eq!(
            d.notes,
            ["`axes` is an array of integers: the axes to reduce, each in [-rank, rank), no axis twice"]
        );
        let d = assert_err(
            &t,
            &op("{axes = [0, 2]}"),
            &format!(
                "expected an axis from -2 to 1, found 2 — element 1 of `axes` of tensor.{name}"
            ),
            &place,
        );
        assert_eq!(
            d.notes,
            ["`x` is tensor<2x3xf32>, of rank 2; negative axes count from the end"]
        );
        assert_err(
            &t,
            &op("{axes = [-3]}"),
            &format!(
                "expected an axis from -2 to 1, found -3 — element 0 of `axes` of tensor.{name}"
            ),
            &place,
        );
        assert_err(
            &t,
            &op("{axes = [-9223372036854775808]}"),
            &format!(
                "expected an axis from -2 to 1, found -9223372036854775808 — element 0 of `axes` of tensor.{name}"
            ),
            &place,
        );
        let d = assert_err(
            &t,
            &op("{axes = [1, -1]}"),
            &format!("axis 1 is listed twice — element 1 of `axes` of tensor.{name}"),
            &place,
        );
        assert_eq!(
            d.notes,
            ["`axes` = [1, -1]: elements 0 (1) and 1 (-1) both name axis 1 of tensor<2x3xf32>"]
        );
        let d = assert_err(
            &t,
            &op("{axes = []}"),
            &format!("expected at least one axis, found [] — `axes` of tensor.{name}"),
            &place,
        );
        assert_eq!(
            d.notes,
            ["to reduce every axis of `x` (tensor<2x3xf32>), list them all: `axes = [0, 1]`"]
        );
        assert_err(
            &["tensor<f32>"],
            &op("{axes = [0]}"),
            &format!("expected no axis, found axis 0 — element 0 of `axes` of tensor.{name}"),
            &place,
        );
        assert_err(
            &t,
            &op("{axes = [0], keepdim = 1}"),
            "`keepdim` must be a boolean, found integer `1`",
            &format!("attribute `keepdim` of tensor.{name}"),
        );
        assert_err(
            &t,
            &op("{axes = [0.5]}"),
            "`axes` must be an array of integers, found array `[0.5]`",
            &place,
        );
        assert_err(
            &["tensor<2xi32>"],
            &op("{axes = [0]}"),
            &format!("expected a float element type, found i32 — operand 0 (`x`) of tensor.{name}"),
            &format!("operand 0 of tensor.{name}"),
        );
    }
}

#[test]
fn softmax() {
    assert_eq!(infer(&["tensor<2x3xf32>"], "tensor.softmax %a0"), "tensor<2x3xf32>");
    assert_eq!(infer(&["tensor<2x3xf32>"], "tensor.softmax %a0 {axis = 0}"), "tensor<2x3xf32>");
    assert_eq!(infer(&["tensor<2x3xf32>"], "tensor.softmax %a0 {axis = -2}"), "tensor<2x3xf32>");
    let d = assert_err(
        &["tensor<2x3xf32>"],
        "tensor.softmax %a0 {axis = 2}",
        "expected an axis from -2 to 1, found 2 — `axis` of tensor.softmax",
        "attribute `axis` of tensor.softmax",
    );
    assert_eq!(d.notes, ["`x` is tensor<2x3xf32>, of rank 2; negative axes count from the end"]);
    let d = assert_err(
        &["tensor<f32>"],
        "tensor.softmax %a0",
        "expected no axis, found axis -1 — `axis` of tensor.softmax",
        "attribute `axis` of tensor.softmax",
    );
    assert_eq!(d.notes, ["`x` is tensor<f32>, of rank 0: it has no axes"]);
    assert_err(
        &["tensor<2x3xf32>"],
        "tensor.softmax %a0 {axis = \"last\"}",
        "`axis` must be an integer, found string `\"last\"`",
        "attribute `axis` of tensor.softmax",
    );
    assert_err(
        &["tensor<2x3xi32>"],
        "tensor.softmax %a0",
        "expected a float element type, found i32 — operand 0 (`x`) of tensor.softmax",
        "operand 0 of tensor.softmax",
    );
}

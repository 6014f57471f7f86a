//! conv2d and its backward ops, group_norm and its backward op, upsample: inferred types and
//! the exact error of every bad attribute and shape.

mod common;

use common::{assert_err, assert_err_n, infer, infer_n};

const X: &str = "tensor<2x4x8x8xf32>";
const W: &str = "tensor<6x2x3x3xf32>";

#[test]
fn conv2d_output_shapes() {
    let ww = "tensor<6x4x3x3xf32>";
    assert_eq!(infer(&[X, ww], "tensor.conv2d %a0, %a1"), "tensor<2x6x6x6xf32>");
    // (8 + 1 + 2 - 3) / 2 + 1 = 5 rows; (8 + 0 + 1 - 3) / 2 + 1 = 4 columns.
    assert_eq!(
        infer(&[X, ww], "tensor.conv2d %a0, %a1 {padding = [1, 0, 2, 1], stride = [2, 2]}"),
        "tensor<2x6x5x4xf32>"
    );
    // [ph, pw] pads both sides; dilation 2 makes the kernel span 5.
    assert_eq!(
        infer(&[X, ww], "tensor.conv2d %a0, %a1 {dilation = [2, 1], padding = [2, 1]}"),
        "tensor<2x6x8x8xf32>"
    );
    assert_eq!(
        infer(
            &[X, ww, "tensor<6xf32>"],
            "tensor.conv2d %a0, %a1, %a2 {padding = \"same\", dilation = [2, 3]}"
        ),
        "tensor<2x6x8x8xf32>"
    );
    assert_eq!(infer(&[X, W], "tensor.conv2d %a0, %a1 {groups = 2}"), "tensor<2x6x6x6xf32>");
}

#[test]
fn conv2d_attribute_errors() {
    let args = [X, W];
    let at = |a: &str| format!("attribute `{a}` of tensor.conv2d");
    assert_err(
        &args,
        "tensor.conv2d %a0, %a1 {groups = 2, padding = [1, -1, 0, 0]}",
        "expected padding ≥ 0, found -1 — element 1 of `padding` of tensor.conv2d",
        &at("padding"),
    );
    assert_err(
        &args,
        "tensor.conv2d %a0, %a1 {groups = 2, padding = [1, 1, 1]}",
        "expected [top, left, bottom, right], [ph, pw] or \"same\", found [1, 1, 1] — `padding` of tensor.conv2d",
        &at("padding"),
    );
    assert_err(
        &args,
        "tensor.conv2d %a0, %a1 {groups = 2, padding = \"full\"}",
        "expected [top, left, bottom, right], [ph, pw] or \"same\", found \"full\" — `padding` of tensor.conv2d",
        &at("padding"),
    );
    assert_err(
        &args,
        "tensor.conv2d %a0, %a1 {groups = 2, padding = \"same\", stride = [2, 1]}",
        "\"same\" padding needs stride [1, 1], found [2, 1] — `padding` of tensor.conv2d",
        &at("padding"),
    );
    assert_err(
        &args,
        "tensor.conv2d %a0, %a1 {groups = 2, stride = [0, 1]}",
        "expected two integers ≥ 1, found [0, 1] — `stride` of tensor.conv2d",
        &at("stride"),
    );
    assert_err(
        &args,
        "tensor.conv2d %a0, %a1 {groups = 2, stride = [1]}",
        "expected two integers ≥ 1, found [1] — `stride` of tensor.conv2d",
        &at("stride"),
    );
    assert_err(
        &args,
        "tensor.conv2d %a0, %a1 {dilation = [1, -2], groups = 2}",
        "expected two integers ≥ 1, found [1, -2] — `dilation` of tensor.conv2d",
        &at("dilation"),
    );
    assert_err(
        &args,
        "tensor.conv2d %a0, %a1 {groups = 0}",
        "expected an integer ≥ 1, found 0 — `groups` of tensor.conv2d",
        &at("groups"),
    );
    assert_err(
        &args,
        "tensor.conv2d %a0, %a1 {groups = 3}",
        "groups = 3 does not divide the 4 input channels — `groups` of tensor.conv2d",
        &at("groups"),
    );
    assert_err(
        &[X, "tensor<6x1x3x3xf32>"],
        "tensor.conv2d %a0, %a1 {groups = 4}",
        "groups = 4 does not divide the 6 output channels — `groups` of tensor.conv2d",
        &at("groups"),
    );
}

#[test]
fn conv2d_shape_errors() {
    let w1 = "operand 1 of tensor.conv2d";
    assert_err(
        &[X, W],
        "tensor.conv2d %a0, %a1",
        "expected 4 input channels per group (C / groups = 4 / 1), found 2 — operand 1 (`w`) of tensor.conv2d",
        w1,
    );
    assert_err(
        &[X, "tensor<6x4x9x3xf32>"],
        "tensor.conv2d %a0, %a1",
        "the dilated kernel height 9 is larger than the padded input height 8 — operand 1 (`w`) of tensor.conv2d",
        w1,
    );
    // 3 taps 4 apart span 9 columns; padding 1 left gives 9, so it fits, and 0 does not.
    assert_eq!(
        infer(
            &[X, "tensor<6x4x1x3xf32>"],
            "tensor.conv2d %a0, %a1 {dilation = [1, 4], padding = [0, 1, 0, 0]}"
        ),
        "tensor<2x6x8x1xf32>"
    );
    assert_err(
        &[X, "tensor<6x4x1x3xf32>"],
        "tensor.conv2d %a0, %a1 {dilation = [1, 4]}",
        "the dilated kernel width 9 is larger than the padded input width 8 — operand 1 (`w`) of tensor.conv2d",
        w1,
    );
    assert_err(
        &["tensor<4x8x8xf32>", W],
        "tensor.conv2d %a0, %a1",
        "expected rank 4 [N, C, H, W], found rank 3 — operand 0 (`x`) of tensor.conv2d",
        "operand 0 of tensor.conv2d",
    );
    assert_err(
        &[X, "tensor<6x4x3xf32>"],
        "tensor.conv2d %a0, %a1",
        "expected rank 4 [O, C/groups, KH, KW], found rank 3 — operand 1 (`w`) of tensor.conv2d",
        w1,
    );
    let d = assert_err(
        &[X, W, "tensor<4xf32>"],
        "tensor.conv2d %a0, %a1, %a2 {groups = 2}",
        "expected tensor<6xf32>, found tensor<4xf32> — operand 2 (`bias`) of tensor.conv2d",
        "operand 2 of tensor.conv2d",
    );
    assert_eq!(d.notes, ["`bias` has one entry per output channel: `w` is tensor<6x2x3x3xf32>"]);
    assert_err(
        &[X, "tensor<6x2x3x3xf16>"],
        "tensor.conv2d %a0, %a1 {groups = 2}",
        "expected f32, found f16 — the element type of operand 1 (`w`) of tensor.conv2d",
        w1,
    );
}

#[test]
fn conv2d_grads() {
    let dy = "tensor<2x6x4x4xf32>";
    let attrs = "groups = 2, padding = [1, 1], stride = [2, 2]";
    assert_eq!(
        infer(
            &[dy, W],
            &format!("tensor.conv2d_grad_input %a0, %a1 {{{attrs}, shape = [2, 4, 8, 8]}}")
        ),
        X
    );
    // An odd input (7 rows) has the same output size under stride 2; `shape` says which.
    assert_eq!(
        infer(
            &[dy, W],
            &format!("tensor.conv2d_grad_input %a0, %a1 {{{attrs}, shape = [2, 4, 7, 7]}}")
        ),
        "tensor<2x4x7x7xf32>"
    );
    assert_eq!(
        infer(
            &[X, dy],
            &format!("tensor.conv2d_grad_weight %a0, %a1 {{{attrs}, shape = [6, 2, 3, 3]}}")
        ),
        W
    );
    assert_err(
        &["tensor<2x6x5x4xf32>", W],
        &format!("tensor.conv2d_grad_input %a0, %a1 {{{attrs}, shape = [2, 4, 8, 8]}}"),
        "expected tensor<2x6x4x4xf32>, found tensor<2x6x5x4xf32> — operand 0 (`dy`) of tensor.conv2d_grad_input",
        "operand 0 of tensor.conv2d_grad_input",
    );
    assert_err(
        &[dy, W],
        &format!("tensor.conv2d_grad_input %a0, %a1 {{{attrs}, shape = [2, 4, 8]}}"),
        "expected rank 4 [N, C, H, W], found rank 3 — `shape` (the input) of tensor.conv2d_grad_input",
        "attribute `shape` of tensor.conv2d_grad_input",
    );
    assert_err(
        &[X, dy],
        &format!("tensor.conv2d_grad_weight %a0, %a1 {{{attrs}, shape = [6, 4, 3, 3]}}"),
        "expected 2 input channels per group (C / groups = 4 / 2), found 4 — `shape` (the weight) of tensor.conv2d_grad_weight",
        "attribute `shape` of tensor.conv2d_grad_weight",
    );
    assert_err(
        &[X, dy],
        "tensor.conv2d_grad_weight %a0, %a1 {groups = 2, padding = [-1, 0], shape = [6, 2, 3, 3]}",
        "expected padding ≥ 0, found -1 — element 0 of `padding` of tensor.conv2d_grad_weight",
        "attribute `padding` of tensor.conv2d_grad_weight",
    );
}

#[test]
fn group_norm() {
    let args = [X, "tensor<4xf32>", "tensor<4xf32>"];
    assert_eq!(infer(&args, "tensor.group_norm %a0, %a1, %a2 {groups = 2}"), X);
    assert_eq!(
        infer(
            &["tensor<3x4xf32>", "tensor<4xf32>", "tensor<4xf32>"],
            "tensor.group_norm %a0, %a1, %a2 {eps = 1.0e-6, groups = 4}"
        ),
        "tensor<3x4xf32>"
    );
    let d = assert_err(
        &args,
        "tensor.group_norm %a0, %a1, %a2 {groups = 3}",
        "expected an integer ≥ 1 dividing the 4 channels, found 3 — `groups` of tensor.group_norm",
        "attribute `groups` of tensor.group_norm",
    );
    assert_eq!(d.notes, ["`x` is tensor<2x4x8x8xf32>; its channels are dimension 1"]);
    assert_err(
        &args,
        "tensor.group_norm %a0, %a1, %a2 {groups = 0}",
        "expected an integer ≥ 1 dividing the 4 channels, found 0 — `groups` of tensor.group_norm",
        "attribute `groups` of tensor.group_norm",
    );
    assert_err(
        &[X, "tensor<8xf32>", "tensor<4xf32>"],
        "tensor.group_norm %a0, %a1, %a2 {groups = 2}",
        "expected tensor<4xf32>, found tensor<8xf32> — operand 1 (`gamma`) of tensor.group_norm",
        "operand 1 of tensor.group_norm",
    );
    assert_err(
        &["tensor<4xf32>", "tensor<4xf32>", "tensor<4xf32>"],
        "tensor.group_norm %a0, %a1, %a2 {groups = 2}",
        "expected rank ≥ 2, found rank 1 — operand 0 (`x`) of tensor.group_norm",
        "operand 0 of tensor.group_norm",
    );
    assert_err(
        &args,
        "tensor.group_norm %a0, %a1, %a2 {eps = -1.0, groups = 2}",
        "expected a finite, non-negative epsilon, found -1.0 — `eps` of tensor.group_norm",
        "attribute `eps` of tensor.group_norm",
    );
    let grad = [X, "tensor<4xf32>", X];
    assert_eq!(
        infer_n(&grad, "tensor.group_norm_grad %a0, %a1, %a2 {groups = 2}", 3),
        [X, "tensor<4xf32>", "tensor<4xf32>"]
    );
    assert_err_n(
        &[X, "tensor<4xf32>", "tensor<2x4x8x7xf32>"],
        "tensor.group_norm_grad %a0, %a1, %a2 {groups = 2}",
        3,
        "expected tensor<2x4x8x8xf32>, found tensor<2x4x8x7xf32> — operand 2 (`dy`) of tensor.group_norm_grad",
        "operand 2 of tensor.group_norm_grad",
    );
}

#[test]
fn upsample() {
    assert_eq!(infer(&[X], "tensor.upsample %a0"), "tensor<2x4x16x16xf32>");
    assert_eq!(
        infer(&[X], "tensor.upsample %a0 {mode = \"nearest\", scale = 3}"),
        "tensor<2x4x24x24xf32>"
    );
    assert_err(
        &[X],
        "tensor.upsample %a0 {scale = 0}",
        "expected an integer ≥ 1, found 0 — `scale` of tensor.upsample",
        "attribute `scale` of tensor.upsample",
    );
    assert_err(
        &["tensor<4x8x8xf32>"],
        "tensor.upsample %a0",
        "expected rank 4, found rank 3 — operand 0 (`x`) of tensor.upsample",
        "operand 0 of tensor.upsample",
    );
    assert_err(
        &[X],
        "tensor.upsample %a0 {mode = \"bilinear\"}",
        "`mode` must be one of \"nearest\", found string `\"bilinear\"`",
        "attribute `mode` of tensor.upsample",
    );
}

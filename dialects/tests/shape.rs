//! reshape, transpose, broadcast, slice, concat.

mod common;

use common::{assert_err, infer, infer_n};

#[test]
fn reshape() {
    let x = ["tensor<1x512x2048xf32>"];
    assert_eq!(
        infer(&x, "tensor.reshape %a0 {shape = [1, 512, 32, 64]}"),
        "tensor<1x512x32x64xf32>"
    );
    assert_eq!(
        infer(&x, "tensor.reshape %a0 {shape = [1, -1, 32, 64]}"),
        "tensor<1x512x32x64xf32>"
    );
    assert_eq!(infer(&x, "tensor.reshape %a0 {shape = [-1]}"), "tensor<1048576xf32>");
    assert_eq!(infer(&["tensor<1x1xi32>"], "tensor.reshape %a0 {shape = []}"), "tensor<i32>");
    assert_eq!(
        infer(&["tensor<0x4xf32>"], "tensor.reshape %a0 {shape = [2, -1]}"),
        "tensor<2x0xf32>"
    );
}

#[test]
fn reshape_errors() {
    let x = ["tensor<3x4xf32>"];
    let place = "attribute `shape` of tensor.reshape";
    let d = assert_err(
        &x,
        "tensor.reshape %a0 {shape = [2, 5]}",
        "expected 12 elements, found 10 — `shape` [2, 5] of tensor.reshape",
        place,
    );
    assert_eq!(d.notes, ["reshape keeps every element: `x` is tensor<3x4xf32>, with 12 elements"]);
    let d = assert_err(
        &x,
        "tensor.reshape %a0 {shape = [5, -1]}",
        "cannot infer the -1 of `shape` [5, -1] for tensor<3x4xf32> with 12 elements — element 1 of `shape` of tensor.reshape",
        place,
    );
    assert_eq!(d.notes, ["12 is not a multiple of 5, the product of the other dimensions"]);
    let d = assert_err(
        &["tensor<0x4xf32>"],
        "tensor.reshape %a0 {shape = [0, -1]}",
        "cannot infer the -1 of `shape` [0, -1] for tensor<0x4xf32> with 0 elements — element 1 of `shape` of tensor.reshape",
        place,
    );
    assert_eq!(d.notes, ["the other dimensions multiply to 0, so any size would fit"]);
    let d = assert_err(
        &x,
        "tensor.reshape %a0 {shape = [-1, -1]}",
        "expected at most one -1, found a second one — element 1 of `shape` of tensor.reshape",
        place,
    );
    assert_eq!(d.notes, ["element 0 is -1 already; only one dimension can be inferred"]);
    assert_err(
        &x,
        "tensor.reshape %a0 {shape = [-2, -6]}",
        "expected a non-negative dimension or -1, found -2 — element 0 of `shape` of tensor.reshape",
        place,
    );
    assert_err(
        &x,
        "tensor.reshape %a0 {shape = [-9223372036854775808]}",
        "expected a non-negative dimension or -1, found -9223372036854775808 — element 0 of `shape` of tensor.reshape",
        place,
    );
    assert_err(
        &x,
        "tensor.reshape %a0 {shape = [9223372036854775807, 9223372036854775807]}",
        "`shape` [9223372036854775807, 9223372036854775807] has more elements than fit in 64 bits — tensor.reshape",
        place,
    );
    assert_err(&x, "tensor.reshape %a0", "`tensor.reshape` requires attribute `shape`", "op");
    assert_err(
        &x,
        "tensor.reshape %a0 {shape = 12}",
        "`shape` must be an array of integers, found integer `12`",
        place,
    );
}

#[test]
fn transpose() {
    assert_eq!(
        infer(&["tensor<1x512x32x64xf32>"], "tensor.transpose %a0 {perm = [0, 2, 1, 3]}"),
        "tensor<1x32x512x64xf32>"
    );
    assert_eq!(
        infer(&["tensor<2x3x4xi32>"], "tensor.transpose %a0 {perm = [2, 0, 1]}"),
        "tensor<4x2x3xi32>"
    );
    assert_eq!(infer(&["tensor<f32>"], "tensor.transpose %a0 {perm = []}"), "tensor<f32>");
    let x = ["tensor<2x3x4xf32>"];
    let place = "attribute `perm` of tensor.transpose";
    let d = assert_err(
        &x,
        "tensor.transpose %a0 {perm = [1, 0]}",
        "expected 3 entries, found 2 — `perm` of tensor.transpose",
        place,
    );
    assert_eq!(
        d.notes,
        ["`perm` is a permutation of 0..3, one entry per axis of `x` (tensor<2x3x4xf32>)"]
    );
    assert_err(
        &x,
        "tensor.transpose %a0 {perm = [0, 3, 1]}",
        "expected an axis from 0 to 2, found 3 — element 1 of `perm` of tensor.transpose",
        place,
    );
    assert_err(
        &x,
        "tensor.transpose %a0 {perm = [0, -1, 1]}",
        "expected an axis from 0 to 2, found -1 — element 1 of `perm` of tensor.transpose",
        place,
    );
    let d = assert_err(
        &x,
        "tensor.transpose %a0 {perm = [1, 0, 1]}",
        "axis 1 is listed twice — element 2 of `perm` of tensor.transpose",
        place,
    );
    assert_eq!(
        d.notes,
        ["`perm` = [1, 0, 1] repeats element 0, so it is not a permutation of 0..3"]
    );
    assert_err(&x, "tensor.transpose %a0", "`tensor.transpose` requires attribute `perm`", "op");
}

#[test]
fn broadcast() {
    assert_eq!(
        infer(&["tensor<3x1xf32>"], "tensor.broadcast %a0 {shape = [2, 3, 4]}"),
        "tensor<2x3x4xf32>"
    );
    assert_eq!(infer(&["tensor<f32>"], "tensor.broadcast %a0 {shape = [5]}"), "tensor<5xf32>");
    assert_eq!(infer(&["tensor<4xi32>"], "tensor.broadcast %a0 {shape = [4]}"), "tensor<4xi32>");
    assert_eq!(infer(&["tensor<1xf32>"], "tensor.broadcast %a0 {shape = [0]}"), "tensor<0xf32>");
    let x = ["tensor<3x4xf32>"];
    let place = "attribute `shape` of tensor.broadcast";
    let d = assert_err(
        &x,
        "tensor.broadcast %a0 {shape = [2, 3, 5]}",
        "cannot broadcast tensor<3x4xf32> to [2, 3, 5]: dimension 2 is 4 vs 5 — `shape` of tensor.broadcast",
        place,
    );
    assert!(d.notes[0].starts_with("each dimension of `x` must be 1"));
    let d = assert_err(
        &x,
        "tensor.broadcast %a0 {shape = [4]}",
        "expected at least 2 dimensions, found 1 — `shape` [4] of tensor.broadcast",
        place,
    );
    assert_eq!(d.notes, ["broadcasting never removes dimensions: `x` is tensor<3x4xf32>"]);
    assert_err(
        &x,
        "tensor.broadcast %a0 {shape = [-3, 4]}",
        "expected a non-negative dimension, found -3 — element 0 of `shape` of tensor.broadcast",
        place,
    );
    assert_err(
        &["tensor<1x1xf32>"],
        "tensor.broadcast %a0 {shape = [9223372036854775807, 9223372036854775807]}",
        "the result tensor<9223372036854775807x9223372036854775807xf32> of tensor.broadcast has more elements than fit in 64 bits",
        "op",
    );
}

#[test]
fn slice() {
    assert_eq!(
        infer(&["tensor<4x6xf32>"], "tensor.slice %a0 {start = [1, 0], end = [3, 6]}"),
        "tensor<2x6xf32>"
    );
    assert_eq!(
        infer(&["tensor<4x6xi32>"], "tensor.slice %a0 {start = [4, 2], end = [4, 2]}"),
        "tensor<0x0xi32>"
    );
    let x = ["tensor<4x6xf32>"];
    let d = assert_err(
        &x,
        "tensor.slice %a0 {start = [0], end = [4, 6]}",
        "expected 2 entries, found 1 — `start` of tensor.slice",
        "attribute `start` of tensor.slice",
    );
    assert_eq!(d.notes, ["`start` has one entry per axis of `x` (tensor<4x6xf32>)"]);
    assert_err(
        &x,
        "tensor.slice %a0 {start = [0, 0], end = [4, 6, 1]}",
        "expected 2 entries, found 3 — `end` of tensor.slice",
        "attribute `end` of tensor.slice",
    );
    let d = assert_err(
        &x,
        "tensor.slice %a0 {start = [0, 7], end = [4, 6]}",
        "expected a start from 0 to 6, found 7 — element 1 of `start` of tensor.slice",
        "attribute `start` of tensor.slice",
    );
    assert_eq!(d.notes, ["axis 1 of `x` (tensor<4x6xf32>) has size 6"]);
    assert_err(
        &x,
        "tensor.slice %a0 {start = [-1, 0], end = [4, 6]}",
        "expected a start from 0 to 4, found -1 — element 0 of `start` of tensor.slice",
        "attribute `start` of tensor.slice",
    );
    let d = assert_err(
        &x,
        "tensor.slice %a0 {start = [2, 0], end = [1, 6]}",
        "expected an end from 2 to 4, found 1 — element 0 of `end` of tensor.slice",
        "attribute `end` of tensor.slice",
    );
    assert_eq!(d.notes, ["axis 0 of `x` (tensor<4x6xf32>) has size 4 and the slice starts at 2"]);
    assert_err(
        &x,
        "tensor.slice %a0 {start = [0, 0], end = [4, 7]}",
        "expected an end from 0 to 6, found 7 — element 1 of `end` of tensor.slice",
        "attribute `end` of tensor.slice",
    );
    assert_err(
        &x,
        "tensor.slice %a0 {start = [0, 0]}",
        "`tensor.slice` requires attribute `end`",
        "op",
    );
}

#[test]
fn concat() {
    assert_eq!(
        infer(&["tensor<2x3xf32>", "tensor<2x5xf32>"], "tensor.concat %a0, %a1 {axis = 1}"),
        "tensor<2x8xf32>"
    );
    assert_eq!(
        infer(
            &["tensor<2x3xi32>", "tensor<4x3xi32>", "tensor<1x3xi32>"],
            "tensor.concat %a0, %a1, %a2 {axis = -2}"
        ),
        "tensor<7x3xi32>"
    );
    assert_eq!(infer_n(&["tensor<2xf32>"], "tensor.concat %a0 {axis = 0}", 1), ["tensor<2xf32>"]);
    let d = assert_err(
        &["tensor<2x3xf32>", "tensor<4x3xf32>"],
        "tensor.concat %a0, %a1 {axis = 1}",
        "expected 2, found 4 — dimension 0 of operand 1 of tensor.concat",
        "operand 1 of tensor.concat",
    );
    assert_eq!(
        d.notes,
        ["operands agree on every dimension but the concatenation axis 1: operand 0 is tensor<2x3xf32>, operand 1 is tensor<4x3xf32>"]
    );
    assert_err(
        &["tensor<2x3xf32>", "tensor<2x3x1xf32>"],
        "tensor.concat %a0, %a1 {axis = 0}",
        "expected rank 2, found rank 3 — operand 1 of tensor.concat",
        "operand 1 of tensor.concat",
    );
    assert_err(
        &["tensor<2x3xf32>", "tensor<2x3xf16>"],
        "tensor.concat %a0, %a1 {axis = 0}",
        "expected f32, found f16 — the element type of operand 1 of tensor.concat",
        "operand 1 of tensor.concat",
    );
    assert_err(
        &["tensor<2x3xf32>", "tensor<2x3xf32>"],
        "tensor.concat %a0, %a1 {axis = 2}",
        "expected an axis from -2 to 1, found 2 — `axis` of tensor.concat",
        "attribute `axis` of tensor.concat",
    );
    assert_err(
        &["tensor<2x3xf32>", "tensor<2x3xf32>"],
        "tensor.concat %a0, %a1",
        "`tensor.concat` requires attribute `axis`",
        "op",
    );
    assert_err(
        &[],
        "tensor.concat {axis = 0}",
        "`tensor.concat` takes at least 1 operands, found 0",
        "op",
    );
    assert_err(
        &["tensor<9223372036854775807xf32>", "tensor<9223372036854775807xf32>", "tensor<2xf32>"],
        "tensor.concat %a0, %a1, %a2 {axis = 0}",
        "the concatenated size along axis 0 does not fit in 64 bits — tensor.concat",
        "op",
    );
}

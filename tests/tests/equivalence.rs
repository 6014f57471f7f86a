//! The equivalence check of `// RUN: opt` files: it passes for a correct pipeline, catches a
//! transformation that changes results, and refuses (never skips) functions it cannot run.

use std::sync::Arc;

use fbc_ir::{Module, SourceFile};

fn module(src: &str) -> Module {
    let file = Arc::new(SourceFile::new("t.fbir", src));
    fbc_ir::parse_module(&file, &fbc_dialects::registry()).expect("test module verifies")
}

#[test]
fn a_correct_pipeline_passes() {
    let src = "// RUN: opt canonicalize,cse,dce\nfunc.func @f(%x: tensor<4x8xf32>) -> tensor<8x4xf32> {\n  %0 = tensor.transpose %x {perm = [1, 0]}\n  %1 = tensor.transpose %0 {perm = [1, 0]}\n  %2 = tensor.transpose %1 {perm = [1, 0]}\n  %3 = tensor.exp %2\n  %4 = tensor.exp %2\n  %5 = tensor.add %3, %4\n  func.return %5 : tensor<8x4xf32>\n}\n";
    let out = fbc_testing::run_file("ok.fbir", src).unwrap();
    assert!(out.contains("tensor.scale") || out.contains("tensor.add"), "{out}");
}

#[test]
fn a_changed_result_is_caught_with_the_worst_element() {
    let before = module("func.func @f(%x: tensor<3xf32>) -> tensor<3xf32> {\n  %0 = tensor.exp %x\n  func.return %0 : tensor<3xf32>\n}\n");
    let after = module("func.func @f(%x: tensor<3xf32>) -> tensor<3xf32> {\n  %0 = tensor.exp %x\n  %1 = tensor.scale %0 {factor = 1.0001}\n  func.return %1 : tensor<3xf32>\n}\n");
    let e =
        fbc_testing::check_pipeline_equivalence("t.fbir", "bad-pass", &before, &after).unwrap_err();
    assert!(
        e.starts_with("t.fbir: `bad-pass` changed what a function computes, or it cannot run: @f"),
        "{e}"
    );
    assert!(e.contains("worst at ["), "{e}");
    // Within f32 tolerance (one part in 10^7) is equal.
    let close = module("func.func @f(%x: tensor<3xf32>) -> tensor<3xf32> {\n  %0 = tensor.exp %x\n  %1 = tensor.scale %0 {factor = 1.0000001}\n  func.return %1 : tensor<3xf32>\n}\n");
    fbc_testing::check_pipeline_equivalence("t.fbir", "ok-pass", &before, &close).unwrap();
}

#[test]
fn large_functions_fail_with_a_request_to_shrink() {
    let src = "// RUN: opt canonicalize\nfunc.func @big(%x: tensor<300x300xf32>) -> tensor<300x300xf32> {\n  func.return %x : tensor<300x300xf32>\n}\n";
    let e = fbc_testing::run_file("big.fbir", src).unwrap_err();
    assert_eq!(
        e,
        "big.fbir: @big: argument %x (tensor<300x300xf32>) has more than 65536 elements; shrink \
         the test: every function of an `opt` test is run before and after the pipeline to check \
         that it still computes the same results"
    );
}

#[test]
fn functions_that_cannot_run_fail_instead_of_being_skipped() {
    let src = "// RUN: opt dce\nfunc.func @f(%x: tensor<4xi64>) -> tensor<4xi64> {\n  func.return %x : tensor<4xi64>\n}\n";
    let e = fbc_testing::run_file("i64.fbir", src).unwrap_err();
    assert!(e.contains("@f is tensor<4xi64>; the interpreter runs only tensors of"), "{e}");
}

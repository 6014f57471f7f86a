//! `tensor.constant`: the type from `shape`/`dtype` or from the written signature.

mod common;

use common::{infer, module_text, only_error, parse};
use fbc_ir::{Attr, ElemType, Module, Type};

#[test]
fn from_shape_attribute() {
    assert_eq!(infer(&[], "tensor.constant {value = 1.0, shape = [4, 4]}"), "tensor<4x4xf32>");
    assert_eq!(
        infer(&[], "tensor.constant {value = 0, shape = [], dtype = \"f16\"}"),
        "tensor<f16>"
    );
    assert_eq!(
        infer(&[], "tensor.constant {value = 3, shape = [2], dtype = \"i32\"}"),
        "tensor<2xi32>"
    );
}

#[test]
fn from_signature() {
    let m = parse(&module_text(&[], "%c = tensor.constant {value = 0.5} : () -> tensor<2x3xbf16>"))
        .unwrap();
    let op = m.op(m.funcs[0].body[0]);
    assert_eq!(m.value_type(op.results[0]).to_string(), "tensor<2x3xbf16>");
    parse(&module_text(
        &[],
        "%c = tensor.constant {value = 0.5, dtype = \"bf16\"} : () -> tensor<2x3xbf16>",
    ))
    .unwrap();
    parse(&module_text(
        &[],
        "%c = tensor.constant {value = 1.0, shape = [2]} : () -> tensor<2xf32>",
    ))
    .unwrap();
}

#[test]
fn needs_a_type() {
    let d = only_error(&module_text(&[], "%c = tensor.constant {value = 1.0}"));
    assert_eq!(
        d.message,
        "the result type of tensor.constant must be written, as in `: () -> tensor<2x3xf32>`, or given \
         by a `shape` attribute (and the result types cannot be inferred)"
    );
    assert_eq!(d.notes, ["a splat constant cannot tell how many elements it has"]);
}

#[test]
fn errors() {
    let d = only_error(&module_text(
        &[],
        "%c = tensor.constant {value = 1.0, shape = [3]} : () -> tensor<2xf32>",
    ));
    assert_eq!(d.message, "expected tensor<3xf32>, found tensor<2xf32>");
    assert_eq!(d.label.as_deref(), Some("result 0 of tensor.constant"));
    let d = only_error(&module_text(
        &[],
        "%c = tensor.constant {value = 1.0, dtype = \"f16\"} : () -> tensor<2xf32>",
    ));
    assert_eq!(d.message, "expected \"f32\", found \"f16\" — `dtype` of tensor.constant");
    assert_eq!(d.label.as_deref(), Some("attribute `dtype` of tensor.constant"));
    assert_eq!(d.notes, ["the written result type is tensor<2xf32>"]);
    let d = only_error(&module_text(&[], "%c = tensor.constant {value = 1.0} : () -> f32"));
    assert_eq!(d.message, "expected a tensor, found f32 — the result of tensor.constant");
    assert_eq!(d.label.as_deref(), Some("result 0 of tensor.constant"));
    let d = only_error(&module_text(&[], "%c = tensor.constant : () -> tensor<2xf32>"));
    assert_eq!(d.message, "`tensor.constant` requires attribute `value`");
    let d =
        only_error(&module_text(&[], "%c = tensor.constant {value = 1.5} : () -> tensor<2xi32>"));
    assert_eq!(
        d.message,
        "expected a whole number that fits in i32, found 1.5 — `value` of tensor.constant"
    );
    assert_eq!(d.notes, ["the result type is tensor<2xi32>; i32 holds -2147483648 to 2147483647"]);
    let d = only_error(&module_text(
        &[],
        "%c = tensor.constant {value = 300, shape = [1], dtype = \"i8\"}",
    ));
    assert_eq!(
        d.message,
        "expected a whole number that fits in i8, found 300.0 — `value` of tensor.constant \
         (and the result types cannot be inferred)"
    );
    let d = only_error(&module_text(&[], "%c = tensor.constant {value = 1.0, shape = [2, -2]}"));
    assert_eq!(
        d.message,
        "expected a non-negative dimension, found -2 — element 1 of `shape` of tensor.constant \
         (and the result types cannot be inferred)"
    );
    let d = only_error(&module_text(
        &[],
        "%c = tensor.constant {value = 1.0, dtype = \"f8\", shape = [2]}",
    ));
    assert_eq!(
        d.message,
        "`dtype` must be one of \"f32\", \"f16\", \"bf16\", \"f64\", \"i32\", \"i8\", \"i64\", \"i1\", \
         \"index\", found string `\"f8\"`"
    );
    let d = only_error(&module_text(
        &["tensor<2xf32>"],
        "%c = tensor.constant %a0 {value = 1.0} : (tensor<2xf32>) -> tensor<2xf32>",
    ));
    assert_eq!(d.message, "`tensor.constant` takes 0 operands, found 1");
}

/// Built through the Module API (as passes do): the declared type is the constant's type.
#[test]
fn module_api() {
    let reg = fbc_dialects::registry();
    let mut m = Module::new(None);
    let ty = Type::tensor([4u64, 4, 1, 1], ElemType::F32);
    let f = m.add_func("f", vec![], vec![ty.clone()]);
    let c = m.append_op(
        f,
        reg.expect("tensor.constant"),
        &[],
        vec![("value".into(), Attr::Float(f64::NEG_INFINITY))],
        vec![ty],
        Default::default(),
    );
    let r = m.op(c).results[0];
    m.append_op(f, reg.expect("func.return"), &[r], vec![], vec![], Default::default());
    assert!(fbc_ir::verify_module(&m).is_empty());
}

// ----- dense constants -----

/// The printed text of the one constant of `body`.
fn printed(body: &str) -> String {
    let m = parse(&module_text(&[], body)).unwrap();
    let text = fbc_ir::print_module(&m);
    let line = text.lines().find(|l| l.contains("tensor.constant")).unwrap().trim().to_string();
    // Printing is a fixpoint.
    let again = fbc_ir::print_module(&parse(&text).unwrap());
    assert_eq!(again, text);
    line
}

#[test]
fn dense_values_read_as_a_flat_row_major_list() {
    assert_eq!(
        printed(
            "%c = tensor.constant {value = dense<[[1, 2.5], [-3, 4e2]]>} : () -> tensor<2x2xf32>"
        ),
        "%c = tensor.constant {value = dense<[1.0, 2.5, -3.0, 400.0]>} : () -> tensor<2x2xf32>"
    );
    // MLIR's splat spelling, and the hex form in upper case whatever was written.
    assert_eq!(
        printed("%c = tensor.constant {value = dense<0.5>} : () -> tensor<3xf32>"),
        "%c = tensor.constant {value = dense<0.5>} : () -> tensor<3xf32>"
    );
    assert_eq!(
        printed(
            "%c = tensor.constant {value = dense<\"0x0000803f000000c0\">} : () -> tensor<2xf32>"
        ),
        "%c = tensor.constant {value = dense<\"0x0000803F000000C0\">} : () -> tensor<2xf32>"
    );
    // `dense` stays a name where names go: a key (here an unknown one) and an index variable.
    let d = only_error(&module_text(
        &[],
        "%c = tensor.constant {value = 1.0, dense} : () -> tensor<2xf32>",
    ));
    assert_eq!(d.message, "unknown attribute `dense` for `tensor.constant`");
    parse(&module_text(
        &[],
        "%c = tensor.constant {value = 1.0, fbc.map = (dense) -> (dense mod 4)} : () -> tensor<2xf32>",
    ))
    .unwrap();
}

#[test]
fn dense_errors_name_the_attribute_and_the_count() {
    let d = only_error(&module_text(
        &[],
        "%c = tensor.constant {value = dense<[1.0, 2.0, 3.0]>} : () -> tensor<2x2xf32>",
    ));
    assert_eq!(d.message, "expected 4 elements, found 3 — `value` of tensor.constant");
    assert_eq!(d.label.as_deref(), Some("attribute `value` of tensor.constant"));
    assert_eq!(d.notes, ["the result type is tensor<2x2xf32>"]);
    let d = only_error(&module_text(
        &[],
        "%c = tensor.constant {value = dense<\"0x0000803F00\">} : () -> tensor<1xf32>",
    ));
    assert_eq!(
        d.message,
        "expected a multiple of 4 bytes (one f32 element is 4), found 5 — `value` of \
         tensor.constant"
    );
    let d = only_error(&module_text(
        &[],
        "%c = tensor.constant {value = dense<[1, 300]>} : () -> tensor<2xi8>",
    ));
    assert_eq!(
        d.message,
        "expected whole numbers that fit in i8 (-128 to 127), found 300 at element 1 — `value` \
         of tensor.constant"
    );
    let d = only_error(&module_text(
        &[],
        "%c = tensor.constant {value = [1.0, 2.0]} : () -> tensor<2xf32>",
    ));
    assert_eq!(
        d.message,
        "expected a float or `dense<...>`, found array — `value` of tensor.constant"
    );
    let d = only_error(&module_text(
        &[],
        "%c = tensor.constant {value = dense<dense<1.0>>} : () -> tensor<2xf32>",
    ));
    assert_eq!(d.message, "expected a number, an array of numbers or a hex string in `dense<...>`");
    // A large hex constant (4 MiB of text) reads back element for element.
    let n = 1 << 19;
    let hex: String =
        (0..n).map(|i: u32| format!("{:08X}", (i as f32).to_bits().swap_bytes())).collect();
    let m = parse(&module_text(
        &[],
        &format!("%c = tensor.constant {{value = dense<\"0x{hex}\">}} : () -> tensor<{n}xf32>"),
    ))
    .unwrap();
    let d = m.op(m.funcs[0].body[0]).attr("value").and_then(Attr::as_dense).unwrap().clone();
    let values = d.decode(ElemType::F32).unwrap();
    assert_eq!(values.len(), n as usize);
    assert!(values.iter().enumerate().all(|(i, &v)| v == i as f64));
}

#[test]
fn bad_dense_literals_are_located_parse_errors_all_reported() {
    let text = module_text(
        &[],
        "%a = tensor.constant {value = dense<\"0x123\">} : () -> tensor<1xi8>\n  \
         %b = tensor.constant {value = dense<[1.0, \"x\"]>} : () -> tensor<2xf32>\n  \
         %c = tensor.constant {value = dense<\"12\">} : () -> tensor<1xi8>",
    );
    let errors = parse(&text).unwrap_err();
    let got: Vec<(String, &str)> = errors
        .iter()
        .map(|d| {
            let span = d.span.expect("located");
            (d.message.clone(), &text[span.start as usize..span.end as usize])
        })
        .collect();
    assert_eq!(
        got,
        [
            (
                "expected an even number of hex digits in `dense<\"0x...\">`, found 3".to_string(),
                "\"0x123\""
            ),
            (
                "expected a number, an array of numbers or a hex string in `dense<...>`"
                    .to_string(),
                "\"x\""
            ),
            (
                "expected a string of hex digits that starts with `0x` in `dense<...>`".to_string(),
                "\"12\""
            ),
        ]
    );
}

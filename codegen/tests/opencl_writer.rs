//! The OpenCL C writer on small modules: a snapshot of the emitted source and manifest, and the
//! errors for what it cannot lower yet. Numeric checks on a device are in the driver's
//! `tests/opencl.rs`.

use std::sync::Arc;

use fbc_codegen::opencl::{Error, Options, Writer};
use fbc_ir::{Module, SourceFile};

fn parse(text: &str) -> Module {
    let file = Arc::new(SourceFile::new("small.fbir".to_string(), text.to_string()));
    match fbc_ir::parse_module(&file, &fbc_dialects::registry()) {
        Ok(m) => m,
        Err(d) => panic!("{}", fbc_grammar_render(&file, &d)),
    }
}

fn fbc_grammar_render(file: &SourceFile, d: &[fbc_ir::Diagnostic]) -> String {
    d.iter().map(|d| format!("{}: {:?}\n", file.name, d)).collect()
}

const SMALL: &str = r#"module @small {
  func.func @main(%x: tensor<2x4xf32>, %w: tensor<4x3xf32>, %b: tensor<3xf32>) -> tensor<3x2xf32> {
    %h = tensor.matmul %x, %w : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
    %a = tensor.add %h, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
    %s = tensor.softmax %a {axis = -1} : (tensor<2x3xf32>) -> tensor<2x3xf32>
    %t = layout.remap %s {map = (d0, d1) -> (d1, d0 mod 3), shape = [3, 2]} : (tensor<2x3xf32>) -> tensor<3x2xf32>
    func.return %t : tensor<3x2xf32>
  }
}
"#;

#[test]
fn small_module_source_and_manifest() {
    let out = Writer::new(Options::default()).write(&parse(SMALL)).expect("writes");
    insta::assert_snapshot!("small_source", out.source);
    insta::assert_snapshot!("small_manifest", out.manifest.to_json());
    // Kernels carry their op's source location, and launches follow program order.
    assert!(out.source.contains("// tensor.matmul at small.fbir:3:5"));
    let kernels: Vec<&str> =
        out.manifest.functions[0].launches.iter().map(|l| l.kernel.as_str()).collect();
    assert_eq!(kernels, ["main_matmul_h", "main_add_a", "main_softmax_s", "main_remap_t"]);
}

#[test]
fn unsupported_ops_and_types_are_named() {
    let m = parse(
        "func.func @f(%x: tensor<4x6xf32>, %c: tensor<4x6xf32>, %s: tensor<4x6xf32>) -> tensor<4x6xf32> {\n  %y = tensor.rope %x, %c, %s : (tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x6xf32>\n  func.return %y : tensor<4x6xf32>\n}\n",
    );
    let e = Writer::new(Options::default()).write(&m).expect_err("rope is not lowered yet");
    assert!(matches!(&e, Error::Unsupported { op, .. } if op == "tensor.rope"), "{e}");
    assert!(
        e.to_string().starts_with("not yet supported: op tensor.rope at small.fbir:2:3"),
        "{e}"
    );
    let m = parse(
        "func.func @g(%x: tensor<4xf16>) -> tensor<4xf16> {\n  %y = tensor.neg %x : (tensor<4xf16>) -> tensor<4xf16>\n  func.return %y : tensor<4xf16>\n}\n",
    );
    let e = Writer::new(Options::default()).write(&m).expect_err("f16 is not generated yet");
    assert!(e.to_string().contains("f16"), "{e}");
    let opts = Options { function: Some("nope".into()) };
    assert_eq!(
        Writer::new(opts).write(&parse(SMALL)).err(),
        Some(Error::NoFunction("nope".into()))
    );
}

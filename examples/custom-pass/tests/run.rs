//! Builds and runs the out-of-tree pass through fbc's own command line and pipeline syntax.

use std::process::Command;

const INPUT: &str = "\
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = tensor.scale %x {factor = 2.0} : (tensor<4xf32>) -> tensor<4xf32>
  %1 = tensor.scale %0 {factor = 0.5} : (tensor<4xf32>) -> tensor<4xf32>
  %2 = tensor.scale %1 {factor = 3.0} : (tensor<4xf32>) -> tensor<4xf32>
  func.return %2 : tensor<4xf32>
}
";

const UNIT: &str = "\
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = tensor.scale %x {factor = 1.0} : (tensor<4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}
";

fn fbc_custom(input_text: &str, args: &[&str]) -> (i32, String, String) {
    let dir = std::env::temp_dir().join(format!(
        "fbc-custom-{}-{}",
        std::process::id(),
        input_text.len() + args.len()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("in.fbir");
    std::fs::write(&input, input_text).unwrap();
    let args: Vec<String> = args.iter().map(|a| a.replace("IN", input.to_str().unwrap())).collect();
    let out = Command::new(env!("CARGO_BIN_EXE_fbc-custom")).args(&args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn the_pass_runs_through_the_pipeline_syntax() {
    let (code, stdout, stderr) = fbc_custom(INPUT, &["opt", "IN", "--passes", "fold-scales,dce"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        stdout,
        "module {\n  func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {\n    \
         %2 = tensor.scale %x {factor = 3.0} : (tensor<4xf32>) -> tensor<4xf32>\n    \
         func.return %2 : tensor<4xf32>\n  }\n}\n"
    );
}

#[test]
fn options_are_typed_and_parsed() {
    let (code, stdout, _) =
        fbc_custom(UNIT, &["opt", "IN", "--passes", "fold-scales{keep-unit=true}"]);
    assert_eq!(code, 0);
    assert!(stdout.contains("func.return %0 : tensor<4xf32>"), "{stdout}");
    let (code, stdout, _) = fbc_custom(UNIT, &["opt", "IN", "--passes", "fold-scales,dce"]);
    assert_eq!(code, 0);
    assert!(stdout.contains("func.return %x : tensor<4xf32>"), "{stdout}");
    assert!(!stdout.contains("tensor.scale"), "{stdout}");
    let (code, _, stderr) =
        fbc_custom(UNIT, &["opt", "IN", "--passes", "fold-scales{keep-unit=maybe}"]);
    assert_eq!(code, 2);
    assert!(
        stderr
            .contains("option `keep-unit` of `fold-scales`: expected true or false, found `maybe`"),
        "{stderr}"
    );
}

#[test]
fn the_pass_is_listed_next_to_the_builtin_ones() {
    let (code, stdout, _) = fbc_custom(UNIT, &["passes"]);
    assert_eq!(code, 0);
    assert!(stdout.contains("fold-scales"), "{stdout}");
    assert!(stdout.contains("canonicalize"), "{stdout}");
}

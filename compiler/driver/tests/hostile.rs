//! Hostile input at the command line (issue "Hostile or huge input"): each case exits 1 with a
//! located `FILE:LINE:COL: error:` (2 for a bad command line), leaves no output, and never
//! panics; a panic that does happen (a bug) is caught, named and exits 70 with no output.

mod common;

use std::path::Path;

use clap::Parser as _;
use common::{fbc, scratch, write};
use fbc::{Cli, Driver, Failure};
use fbc_ir::pass::PassInfo;
use fbc_ir::{Diagnostic, Module, Pass, PassContext};

fn text(p: &Path) -> &str {
    p.to_str().unwrap_or_default()
}

#[test]
fn a_module_without_functions_is_located() {
    let dir = scratch("hostile-nofunc");
    let f = write(&dir, "empty.fbir", b"// nothing here\n\n");
    let o = fbc(&["run", &f]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(
        o.stderr.starts_with(&format!("{f}:1:15: error: the module has no function to run\n")),
        "{}",
        o.stderr
    );
}

#[test]
fn a_memory_argument_type_is_checked_like_an_allocation() {
    let dir = scratch("hostile-memarg");
    let f = write(
        &dir,
        "arg.fbir",
        b"func.func @f(%a: !memory.image2d<[4611686018427387904, 4], f32>) -> () {\n  func.return\n}\n",
    );
    let out = dir.join("out.fbir");
    let o = fbc(&["opt", &f, "-o", text(&out)]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(
        o.stderr.starts_with(&format!(
            "{f}:1:18: error: !memory.image2d<[4611686018427387904, 4], f32> has more elements \
             than fit in 64 bits\n"
        )),
        "{}",
        o.stderr
    );
    assert!(!out.exists());
    // The same for a function result, and a wrong element type.
    let f =
        write(&dir, "res.fbir", b"func.func @f() -> !memory.buffer<4, f64> {\n  func.return\n}\n");
    let o = fbc(&["opt", &f]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(
        o.stderr.starts_with(&format!(
            "{f}:1:19: error: the element type of !memory.buffer<4, f64> must be f32, i32 or i8, found `f64`\n"
        )),
        "{}",
        o.stderr
    );
}

#[test]
fn storage_used_after_its_dealloc_is_a_verifier_error() {
    let dir = scratch("hostile-dealloc");
    let f = write(
        &dir,
        "uad.fbir",
        br#"func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %a = memory.upload %x {layout = #layout.linear}
  %o = memory.alloc : () -> !memory.buffer<4, f32>
  memory.dealloc %a : (!memory.buffer<4, f32>) -> ()
  memory.launch %a, %o {kernel = "k", domain = [4], iterators = ["parallel"], maps = [(d0) -> (d0), (d0) -> (d0)], body = "x0"} : (!memory.buffer<4, f32>, !memory.buffer<4, f32>) -> ()
  memory.dealloc %a : (!memory.buffer<4, f32>) -> ()
  %r = memory.download %o {layout = #layout.linear} : (!memory.buffer<4, f32>) -> tensor<4xf32>
  func.return %r : (tensor<4xf32>) -> ()
}
"#,
    );
    for args in [vec!["opt", f.as_str()], vec!["run", f.as_str(), "--random-inputs", "1"]] {
        let o = fbc(&args);
        assert_eq!(o.code, 1, "{args:?}: {}", o.stderr);
        let first = format!(
            "{f}:5:17: error: %a is used after its lifetime ended (operand 0 of memory.launch)\n"
        );
        let second = format!(
            "{f}:6:18: error: %a is used after its lifetime ended (operand 0 of memory.dealloc)\n"
        );
        assert!(o.stderr.starts_with(&first), "{args:?}: {}", o.stderr);
        assert!(o.stderr.contains(&second), "both uses are reported: {}", o.stderr);
        assert!(o.stderr.contains("its lifetime ends here"), "{}", o.stderr);
    }
}

#[test]
fn pass_option_values_are_command_line_errors() {
    let dir = scratch("hostile-options");
    let f = write(&dir, "m.fbir", b"func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {\n  func.return %x : (tensor<4xf32>) -> ()\n}\n");
    let out = dir.join("out.fbir");
    let o = fbc(&["opt", &f, "--passes", "canonicalize,index-elim{tile-h=0}", "-o", text(&out)]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert_eq!(
        o.stderr,
        "fbc: error: invalid pipeline `canonicalize,index-elim{tile-h=0}`: pass `index-elim`: \
         tile-h and tile-w must be positive, found 0 and 4\n"
    );
    let o = fbc(&["opt", &f, "--passes", "train-step{func=f wrt=x lr=nan}", "-o", text(&out)]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(
        o.stderr.starts_with(
            "fbc: error: invalid pipeline `train-step{func=f wrt=x lr=nan}`: pass `train-step`: "
        ),
        "{}",
        o.stderr
    );
    assert!(!out.exists());
}

#[test]
fn a_safetensors_header_naming_a_tensor_twice_is_refused() {
    let dir = scratch("hostile-st");
    let f = write(&dir, "m.fbir", b"func.func @f(%x: tensor<2xf32>) -> tensor<2xf32> {\n  func.return %x : (tensor<2xf32>) -> ()\n}\n");
    let header = br#"{"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"x":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}"#;
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header);
    bytes.extend(std::iter::repeat_n(0u8, 16));
    let inputs = write(&dir, "dup.safetensors", &bytes);
    let o = fbc(&["run", &f, "--inputs", &inputs]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert_eq!(
        o.stderr,
        format!("{inputs}: error: not a valid safetensors file: the header names `x` twice\n")
    );
}

#[test]
fn model_options_out_of_range_and_repeated_ranges_are_usage_errors() {
    let dir = scratch("hostile-gen");
    let out = dir.join("v.fbir");
    for v in ["4611686018427387904", "9223372036854775807", "0"] {
        let o = fbc(&["gen", "llama3.2-1b", "--vocab", v, "-o", text(&out)]);
        assert_eq!(o.code, 2, "{v}: {}", o.stderr);
        assert_eq!(
            o.stderr,
            format!(
                "fbc: error: `--vocab` for llama3.2-1b must be from 1 to 16777216, found {v}\n"
            )
        );
        assert!(!out.exists());
    }
    let o = fbc(&["simplify-index", "x + 1", "--range", "x=0:4", "--range", "x=0:8"]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert_eq!(
        o.stderr,
        "fbc: error: --range `x=0:8`: `x` already has the range 0:4; give each variable one \
         range (at byte 0)\n"
    );
}

/// A pass with a bug: it panics.
#[derive(Debug)]
struct Explode;

impl Pass for Explode {
    fn name(&self) -> &str {
        "explode"
    }
    fn run(&mut self, _: &mut Module, _: &mut PassContext<'_>) -> Result<(), Vec<Diagnostic>> {
        panic!("index out of range in the test pass")
    }
}

#[test]
fn a_panic_is_an_internal_error_naming_the_pass_with_no_output() {
    let dir = scratch("hostile-panic");
    let f = write(&dir, "m.fbir", b"func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {\n  func.return %x : (tensor<4xf32>) -> ()\n}\n");
    let out = dir.join("out.fbir");
    let mut driver = Driver::default();
    driver.passes.register(PassInfo::new("explode", "panics", vec![], |_| Ok(Box::new(Explode))));
    let cli = Cli::try_parse_from([
        "fbc",
        "opt",
        &f,
        "--passes",
        "canonicalize,explode",
        "-o",
        text(&out),
    ])
    .expect("command line");
    match driver.run_guarded(&cli) {
        Err(Failure::Internal(m)) => {
            assert!(
                m.starts_with(
                    "fbc: internal error while running pass `explode`: index out of range in the \
                     test pass at compiler/driver/tests/hostile.rs:"
                ),
                "{m}"
            );
            assert!(m.contains("note: this is a bug in fbc"), "{m}");
        }
        other => panic!("expected an internal error, got {other:?}"),
    }
    assert!(!out.exists());
    let left: Vec<_> =
        std::fs::read_dir(&dir).expect("dir").flatten().map(|e| e.file_name()).collect();
    assert_eq!(left.len(), 1, "only the input is left: {left:?}");
    // The same driver without the bug runs normally afterwards (the hook was restored).
    let cli = Cli::try_parse_from(["fbc", "opt", &f, "-o", text(&out)]).expect("command line");
    assert!(driver.run_guarded(&cli).is_ok());
    assert!(out.exists());
}

//! fbc's file-driven tests: `.fbir` files whose header says what to do with them, snapshotted
//! with insta; fbc's own are under `tests/ir/`, and a crate of yours (a plugin, your models) runs
//! the same harness on its own folder:
//!
//! ```ignore
//! // tests/ir_files.rs of your crate; snapshots go to tests/snapshots/ of your crate.
//! #[test]
//! fn ir_files() {
//!     let mut driver = fbc::Driver::default();
//!     my_passes::register(&mut driver.passes);  // or driver.load_plugins(&[path])
//!     fbc_testing::run_dir!("ir", fbc_testing::Harness::new(driver));
//! }
//! ```
//!
//! [`run_dir!`] runs every `*.fbir` file under the folder (relative to the calling test file)
//! and asserts its snapshot; review new ones with `cargo insta review` (or `INSTA_UPDATE=always`).
//!
//! A header is one or more `// RUN: KIND [ARGS]` lines at the top of the file. Kinds:
//! - `round-trip`: the file verifies; its canonical print is a fixpoint of parse+print, and is the
//!   snapshot;
//! - `diagnostics`: every chunk of the file (chunks are separated by `// -----` lines) must fail;
//!   the rendered diagnostics of all chunks are the snapshot. Chunks keep their line numbers: the
//!   other chunks' lines are blanked, not removed;
//! - `opt PIPELINE`: the file verifies, the pipeline runs with verification after every pass, the
//!   printed result is the snapshot. Then every function of the original module is run with the
//!   reference interpreter before and after the pipeline, on the same random inputs (seed
//!   [`EQUIVALENCE_SEED`]), and every result must agree within rtol 1e-5, atol 1e-6 (f32): a pass
//!   that changes what a function computes fails its test even when its snapshot was accepted.
//!   Every function is checked, none is skipped: one whose argument is not a tensor, or has more
//!   than [`MAX_CHECKED_ELEMENTS`] elements, fails the test with a request to shrink it, and one
//!   that uses an op the interpreter lacks fails naming that op. Functions the pipeline adds
//!   (`@f_grad` of autodiff) have no "before" and are not compared.
//!
//! - `compile ARGS`: what `fbc FILE ARGS` makes of the file (`-O3 --target mali --emit memory`,
//!   `--emit opencl`, `--emit report`), through the same arguments and [`fbc::Driver::compile_module`]:
//!   the text is the snapshot (for `opencl`, the `.cl` source). A lowered module (`memory`,
//!   `opencl`) must also compute what the file does: every function runs in the reference
//!   interpreter before and after, as for `opt`; and `--emit memory` output must parse back and
//!   print the same (a fixpoint).
//!
//! Any other kind, or a file without a header, is an error: a test that silently does nothing is
//! worse than no test.

pub mod fuzz;

/// The snapshot library [`run_dir!`] asserts with, re-exported so that a user's crate needs no
/// insta dependency of its own (only `cargo insta` to review).
pub use insta;

use std::sync::Arc;

use fbc_ir::pass::{PassContext, PassManager};
use fbc_ir::{Module, SourceFile, Type};
use fbc_runtime::interp::{check_equivalent, Tolerance};

/// The seed of the random inputs of the equivalence check of `opt` files.
pub const EQUIVALENCE_SEED: u64 = 0x00FB_C5EE_D001;

/// The largest argument (in elements) the equivalence check of `opt` files runs on: 2^16, so
/// that checking every function of every test file stays fast in debug builds.
pub const MAX_CHECKED_ELEMENTS: u64 = 1 << 16;

/// What a test file asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Run {
    RoundTrip,
    Diagnostics,
    Opt(String),
    /// The arguments of `fbc FILE ARGS`.
    Compile(String),
}

/// Reads the `// RUN:` header of a test file.
pub fn parse_header(text: &str) -> Result<Vec<Run>, String> {
    let mut runs = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.trim().strip_prefix("// RUN:") else {
            if line.trim().starts_with("//") || line.trim().is_empty() {
                continue;
            }
            break;
        };
        let rest = rest.trim();
        let (kind, args) = rest.split_once(' ').unwrap_or((rest, ""));
        runs.push(match kind {
            "round-trip" if args.is_empty() => Run::RoundTrip,
            "diagnostics" if args.is_empty() => Run::Diagnostics,
            "opt" if !args.trim().is_empty() => Run::Opt(args.trim().to_string()),
            "compile" if !args.trim().is_empty() => Run::Compile(args.trim().to_string()),
            _ => {
                return Err(format!(
                    "unknown RUN line `{rest}`; kinds: round-trip, diagnostics, opt PIPELINE, \
                     compile ARGS"
                ))
            }
        });
    }
    if runs.is_empty() {
        return Err("no `// RUN:` header".into());
    }
    Ok(runs)
}

/// Runs one test file with fbc's own passes and returns the snapshot text.
pub fn run_file(name: &str, text: &str) -> Result<String, String> {
    Harness::default().run_file(name, text)
}

/// Runs every `.fbir` file under a folder with [`Harness::run_file`] and asserts each result as
/// an insta snapshot: `run_dir!("ir")` with fbc's own passes, `run_dir!("ir", harness)` with a
/// [`Harness`] of yours. The folder is relative to the calling file, snapshots are stored next to
/// it (in `snapshots/`, one per file, named after it), as `insta::glob!` does. A file that fails
/// (a bad header, an error where none was expected, a pass that changes the numbers) fails the
/// test naming the file.
#[macro_export]
macro_rules! run_dir {
    ($dir:literal) => {
        $crate::run_dir!($dir, $crate::Harness::default())
    };
    ($dir:literal, $harness:expr) => {{
        let harness: $crate::Harness = $harness;
        $crate::insta::glob!($dir, "**/*.fbir", |path| {
            let text = ::std::fs::read_to_string(path).expect("test files are UTF-8");
            let name = path.file_name().expect("a file").to_string_lossy().into_owned();
            match harness.run_file(&name, &text) {
                Ok(out) => $crate::insta::assert_snapshot!(out),
                Err(e) => panic!("{}: {e}", path.display()),
            }
        });
    }};
}

/// The file-test harness over a driver: fbc's own (`Harness::default()`), or one with your
/// passes registered or your plugins loaded, so that `opt` and `compile` runs can name them.
#[derive(Debug, Clone, Default)]
pub struct Harness {
    pub driver: fbc::Driver,
}

impl Harness {
    pub fn new(driver: fbc::Driver) -> Harness {
        Harness { driver }
    }

    /// Runs one test file (its text, `name` for diagnostics) and returns the snapshot text.
    pub fn run_file(&self, name: &str, text: &str) -> Result<String, String> {
        let driver = &self.driver;
        let mut out = String::new();
        for run in parse_header(text)? {
            match run {
                Run::RoundTrip => {
                    let file = Arc::new(SourceFile::new(name, text));
                    let m =
                        fbc_ir::parse_module(&file, &driver.ops).map_err(|d| render(&file, &d))?;
                    let printed = fbc_ir::print_module(&m);
                    let again = Arc::new(SourceFile::new(name, printed.clone()));
                    let m2 = fbc_ir::parse_module(&again, &driver.ops).map_err(|d| {
                        format!("the printed form does not parse:\n{}", render(&again, &d))
                    })?;
                    let reprinted = fbc_ir::print_module(&m2);
                    if reprinted != printed {
                        return Err(format!(
                            "printing is not a fixpoint:\n{printed}\n---\n{reprinted}"
                        ));
                    }
                    out.push_str(&printed);
                }
                Run::Diagnostics => {
                    for (i, chunk) in chunks(text).iter().enumerate() {
                        if i > 0 {
                            out.push_str("// -----\n");
                        }
                        let file = Arc::new(SourceFile::new(name, chunk.clone()));
                        match fbc_ir::parse_module(&file, &driver.ops) {
                            Ok(_) => {
                                return Err(format!(
                                    "chunk {i} of {name} verified, but errors were expected"
                                ))
                            }
                            Err(d) => out.push_str(&render(&file, &d)),
                        }
                    }
                }
                Run::Opt(pipeline) => {
                    let file = Arc::new(SourceFile::new(name, text));
                    let mut m =
                        fbc_ir::parse_module(&file, &driver.ops).map_err(|d| render(&file, &d))?;
                    let steps =
                        driver.passes.parse_pipeline(&pipeline).map_err(|e| e.to_string())?;
                    let mut pm = PassManager::new(steps);
                    pm.instrumentation.verify_each = true;
                    let mut cx = PassContext::new(&driver.ops);
                    let before = m.clone();
                    pm.run(&mut m, &mut cx, &mut |_| {}).map_err(|d| render(&file, &d))?;
                    check_pipeline_equivalence(name, &pipeline, &before, &m)?;
                    out.push_str(&fbc_ir::print_module(&m));
                }
                Run::Compile(args) => {
                    out.push_str(&self.compile(name, text, &args, Numbers::Check)?)
                }
            }
        }
        Ok(out)
    }

    /// A `compile ARGS` run (see the crate docs): the text of `fbc NAME ARGS` for `text` (for
    /// `--emit opencl`, the `.cl` source), a lowered module checked to parse back to itself
    /// and, with [`Numbers::Check`], to compute what `text` does.
    pub fn compile(
        &self,
        name: &str,
        text: &str,
        args: &str,
        numbers: Numbers,
    ) -> Result<String, String> {
        use clap::Parser as _;
        let driver = &self.driver;
        let file = Arc::new(SourceFile::new(name, text));
        let m = fbc_ir::parse_module(&file, &driver.ops).map_err(|d| render(&file, &d))?;
        let argv: Vec<&str> = ["fbc", name].into_iter().chain(args.split_whitespace()).collect();
        let cli = fbc::Cli::try_parse_from(&argv).map_err(|e| format!("{name}: `{args}`: {e}"))?;
        let failed = |e: fbc::Failure| {
            let (fbc::Failure::Input(t) | fbc::Failure::Usage(t) | fbc::Failure::Internal(t)) = e;
            format!("{name}: `fbc {name} {args}` failed: {t}")
        };
        let lowered = match driver.compile_module(&file, m.clone(), &cli.compile).map_err(failed)? {
            fbc::Compiled::Opencl(out, lowered) => {
                if numbers == Numbers::Check {
                    check_pipeline_equivalence(name, args, &m, &lowered)?;
                }
                return Ok(out.source);
            }
            fbc::Compiled::Text(t) if cli.compile.emit_kind() == fbc::EmitKind::Memory => t,
            fbc::Compiled::Text(t) => return Ok(t),
            fbc::Compiled::Native(..) => {
                return Err(format!(
                    "{name}: `{args}` writes native code files; a file test compares text (try \
                     --emit memory)"
                ))
            }
        };
        let again = Arc::new(SourceFile::new(name, lowered.clone()));
        let back = fbc_ir::parse_module(&again, &driver.ops)
            .map_err(|d| format!("the lowered module does not parse:\n{}", render(&again, &d)))?;
        let reprinted = fbc_ir::print_module(&back);
        if reprinted != lowered {
            return Err(format!(
                "printing the lowered module is not a fixpoint:\n{lowered}\n---\n{reprinted}"
            ));
        }
        if numbers == Numbers::Check {
            check_pipeline_equivalence(name, args, &m, &back)?;
        }
        Ok(lowered)
    }
}

/// Whether [`Harness::compile`] runs the interpreter on the module before and after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Numbers {
    Check,
    /// For modules too large to interpret in a test (the shipped full-size examples), whose
    /// pipelines the small file tests and translation validation check instead.
    Skip,
}

/// Runs every function of `before` and of `after` (the module after `pipeline`) on the same
/// random inputs and requires equal results within f32 tolerance (see the crate docs).
pub fn check_pipeline_equivalence(
    name: &str,
    pipeline: &str,
    before: &Module,
    after: &Module,
) -> Result<(), String> {
    for f in &before.funcs {
        for (i, &a) in f.args.iter().enumerate() {
            let arg = before.value(a).name.as_deref().map_or_else(|| i.to_string(), str::to_string);
            let ty = before.value_type(a);
            let numel = match ty {
                Type::Tensor(t) => t.numel(),
                _ => {
                    return Err(format!(
                        "{name}: cannot check `{pipeline}` on @{}: argument %{arg} is {ty}, not a \
                         tensor; the equivalence check runs every function of an `opt` test",
                        f.name
                    ))
                }
            };
            if numel.is_none_or(|n| n > MAX_CHECKED_ELEMENTS) {
                return Err(format!(
                    "{name}: @{}: argument %{arg} ({ty}) has more than {MAX_CHECKED_ELEMENTS} \
                     elements; shrink the test: every function of an `opt` test is run before and \
                     after the pipeline to check that it still computes the same results",
                    f.name
                ));
            }
        }
        check_equivalent(before, after, &f.name, EQUIVALENCE_SEED, Tolerance::F32).map_err(
            |e| {
                format!(
                    "{name}: `{pipeline}` changed what a function computes, or it cannot run: {e}"
                )
            },
        )?;
    }
    Ok(())
}

fn render(file: &SourceFile, d: &[fbc_ir::Diagnostic]) -> String {
    fbc_grammar::diag::render_all(file, d)
}

/// Splits at `// -----` lines; each chunk keeps the full line count, other chunks blanked.
pub fn chunks(text: &str) -> Vec<String> {
    let lines: Vec<&str> = text.split('\n').collect();
    let mut bounds = vec![0];
    for (i, l) in lines.iter().enumerate() {
        if l.trim() == "// -----" {
            bounds.push(i);
        }
    }
    bounds.push(lines.len());
    bounds
        .windows(2)
        .map(|w| {
            lines
                .iter()
                .enumerate()
                .map(|(i, l)| if i >= w[0] && i < w[1] && l.trim() != "// -----" { *l } else { "" })
                .collect::<Vec<_>>()
                .join("\n")
        })
        .collect()
}

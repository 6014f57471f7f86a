//! fbc's file-driven tests: `.fbir` files under `tests/ir/` whose header says what to do with
//! them, snapshotted with insta.
//!
//! A header is one or more `// RUN: KIND [ARGS]` lines at the top of the file. Kinds:
//! - `round-trip`: the file verifies; its canonical print is a fixpoint of parse+print, and is the
//!   snapshot;
//! - `diagnostics`: every chunk of the file (chunks are separated by `// -----` lines) must fail;
//!   the rendered diagnostics of all chunks are the snapshot. Chunks keep their line numbers: the
//!   other chunks' lines are blanked, not removed;
//! - `opt PIPELINE`: the file verifies, the pipeline runs with verification after every pass, the
//!   printed result is the snapshot.
//!
//! Any other kind, or a file without a header, is an error: a test that silently does nothing is
//! worse than no test.

use std::sync::Arc;

use fbc_ir::pass::{PassContext, PassManager};
use fbc_ir::SourceFile;

/// What a test file asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Run {
    RoundTrip,
    Diagnostics,
    Opt(String),
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
            _ => {
                return Err(format!(
                    "unknown RUN line `{rest}`; kinds: round-trip, diagnostics, opt PIPELINE"
                ))
            }
        });
    }
    if runs.is_empty() {
        return Err("no `// RUN:` header".into());
    }
    Ok(runs)
}

/// Runs one test file and returns the snapshot text.
pub fn run_file(name: &str, text: &str) -> Result<String, String> {
    let driver = fbc::Driver::default();
    let mut out = String::new();
    for run in parse_header(text)? {
        match run {
            Run::RoundTrip => {
                let file = Arc::new(SourceFile::new(name, text));
                let m = fbc_ir::parse_module(&file, &driver.ops).map_err(|d| render(&file, &d))?;
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
                let steps = driver.passes.parse_pipeline(&pipeline).map_err(|e| e.to_string())?;
                let mut pm = PassManager::new(steps);
                pm.instrumentation.verify_each = true;
                let mut cx = PassContext::new(&driver.ops);
                pm.run(&mut m, &mut cx, &mut |_| {}).map_err(|d| render(&file, &d))?;
                out.push_str(&fbc_ir::print_module(&m));
            }
        }
    }
    Ok(out)
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

//! Runs every `.fbir` file under `tests/ir/` as its header says and snapshots the result.

#[test]
fn ir_files() {
    fbc_testing::run_dir!("../ir");
}

#[test]
fn unknown_headers_are_rejected() {
    assert_eq!(
        fbc_testing::parse_header("// RUN: frobnicate\nmodule {}\n"),
        Err("unknown RUN line `frobnicate`; kinds: round-trip, diagnostics, opt PIPELINE, compile ARGS"
            .into())
    );
    assert_eq!(fbc_testing::parse_header("module {}\n"), Err("no `// RUN:` header".into()));
    assert_eq!(
        fbc_testing::parse_header("// RUN: opt\n"),
        Err("unknown RUN line `opt`; kinds: round-trip, diagnostics, opt PIPELINE, compile ARGS"
            .into())
    );
}

#[test]
fn chunks_keep_line_numbers() {
    let c = fbc_testing::chunks("a\n// -----\nb\nc");
    assert_eq!(c, vec!["a\n\n\n".to_string(), "\n\nb\nc".to_string()]);
}

//! Runs every `.fbir` file under `tests/ir/` as its header says and snapshots the result.

#[test]
fn ir_files() {
    insta::glob!("../ir", "**/*.fbir", |path| {
        let text = std::fs::read_to_string(path).expect("test files are UTF-8");
        let name = path.file_name().expect("a file").to_string_lossy().into_owned();
        match fbc_tests::run_file(&name, &text) {
            Ok(out) => insta::assert_snapshot!(out),
            Err(e) => panic!("{}: {e}", path.display()),
        }
    });
}

#[test]
fn unknown_headers_are_rejected() {
    assert_eq!(
        fbc_tests::parse_header("// RUN: frobnicate\nmodule {}\n"),
        Err("unknown RUN line `frobnicate`; kinds: round-trip, diagnostics, opt PIPELINE, compile ARGS"
            .into())
    );
    assert_eq!(fbc_tests::parse_header("module {}\n"), Err("no `// RUN:` header".into()));
    assert_eq!(
        fbc_tests::parse_header("// RUN: opt\n"),
        Err("unknown RUN line `opt`; kinds: round-trip, diagnostics, opt PIPELINE, compile ARGS"
            .into())
    );
}

#[test]
fn chunks_keep_line_numbers() {
    let c = fbc_tests::chunks("a\n// -----\nb\nc");
    assert_eq!(c, vec!["a\n\n\n".to_string(), "\n\nb\nc".to_string()]);
}

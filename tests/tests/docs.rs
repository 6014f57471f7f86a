//! `docs/ops.md` is generated from the op definitions; this test fails when it is stale.

#[test]
fn ops_reference_is_current() {
    let driver = fbc::Driver::default();
    let generated = fbc_ir::docgen::markdown_reference(&driver.ops);
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/ops.md");
    if std::env::var_os("FBC_UPDATE_DOCS").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        on_disk == generated,
        "docs/ops.md is stale; regenerate with FBC_UPDATE_DOCS=1 cargo test -p fbc-testing --test docs"
    );
}

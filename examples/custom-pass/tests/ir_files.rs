//! This crate's `.fbir` file tests (`tests/ir/`), run by fbc's harness (`fbc_testing::run_dir!`)
//! with the crate's plugin loaded into a stock `fbc::Driver`: the library cargo built from this
//! crate as a `cdylib` for these tests, loaded as `fbc --load-pass-plugin` would load it.

/// This crate's plugin library, next to the test executable.
fn plugin() -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    let file = format!(
        "{}fbc_example_custom_pass{}",
        std::env::consts::DLL_PREFIX,
        std::env::consts::DLL_SUFFIX
    );
    let path = exe.parent().expect("deps directory").join(file);
    assert!(path.exists(), "cargo builds {} with this crate's lib", path.display());
    path
}

#[test]
fn ir_files() {
    let mut driver = fbc::Driver::default();
    if let Err(e) = driver.load_plugins(&[plugin()]) {
        panic!("{e:?}");
    }
    fbc_testing::run_dir!("ir", fbc_testing::Harness::new(driver));
}

//! `fbc-custom`: the `fbc` command with this crate's passes registered.

fn main() -> std::process::ExitCode {
    let mut driver = fbc::Driver::default();
    fbc_example_custom_pass::register(&mut driver.passes);
    driver.main(std::env::args_os())
}

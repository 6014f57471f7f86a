//! The `fbc` command. All logic lives in the library so that tools embedding fbc (and the
//! custom-pass example) run exactly the same command line.

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    fbc::Driver::default().main(std::env::args_os())
}

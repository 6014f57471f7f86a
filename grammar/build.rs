//! Generates the LR(1) parser from `src/grammar.lalrpop` into `OUT_DIR`.

fn main() {
    // A grammar conflict is a build error with lalrpop's explanation on stderr.
    if let Err(e) = lalrpop::Configuration::new()
        .use_cargo_dir_conventions()
        .emit_rerun_directives(true)
        .process()
    {
        eprintln!("{e}");
        std::process::exit(1);
    }
}

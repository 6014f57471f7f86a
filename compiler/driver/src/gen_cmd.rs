//! `fbc gen MODEL`: writes the `.fbir` of a model of the FBLayout paper (Table 3) or of one of
//! its microbenchmarks (Fig. 16, Fig. 17), as a forward `@loss` function or, with `--training`,
//! with the backward graph that the `autodiff` pass derives from it.
//!
//! The module is built in memory (the `fbc-models` crate), verified with the same verifier `fbc FILE` runs,
//! printed in canonical form and written atomically: a failed generation leaves no file behind.
//! Options that do not apply to the chosen model are errors rather than silently ignored, so a
//! typo'd benchmark setting cannot produce a graph of the wrong size.

use crate::cli::GenArgs;
use crate::{output, Driver, Failure};

pub(crate) fn run(driver: &Driver, a: &GenArgs) -> Result<(), Failure> {
    if let Some(dir) = &a.from_hf {
        let path = dir.join("config.json");
        let text = std::fs::read_to_string(&path).map_err(|e| {
            Failure::Input(format!("{}: error: cannot read: {e}\n", path.display()))
        })?;
        let module =
            fbc_models::build_hf(&text, &a.options()).map_err(|e| match e {
                fbc_models::Error::Usage(m) if m.starts_with("config.json") => Failure::Input(
                    format!("{}: error: {}\n", path.display(), &m["config.json: ".len()..]),
                ),
                e => failure(e),
            })?;
        return output::write_text(a.output.as_deref(), &fbc_ir::print_module(&module));
    }
    let name =
        a.model.as_deref().ok_or_else(|| Failure::Usage("a model name is required".into()))?;
    let model = fbc_models::model(name).map_err(failure)?;
    let spec = fbc_models::resolve(model, &a.options()).map_err(failure)?;
    if a.training && driver.passes.get("autodiff").is_none() {
        return Err(Failure::Usage(
            "--training needs the autodiff pass, which is not registered".into(),
        ));
    }
    let generated = fbc_models::generate_verified(&driver.ops, model, &spec).map_err(failure)?;
    let text = if a.training {
        let pipeline = generated.autodiff_pipeline(model).map_err(failure)?;
        // Re-read the printed forward graph so that any diagnostic of the pass points into
        // real text (the generated module has no source positions).
        let (file, mut module) =
            fbc_models::reparse(&driver.ops, model, &generated.module).map_err(Failure::Input)?;
        let instr = a.instr.instrumentation();
        driver.run_pipeline(&file, &mut module, &pipeline, fbc_target::generic(), &instr)?;
        fbc_ir::print_module(&module)
    } else {
        fbc_ir::print_module(&generated.module)
    };
    output::write_text(a.output.as_deref(), &text)
}

fn failure(e: fbc_models::Error) -> Failure {
    match e {
        fbc_models::Error::Usage(m) => Failure::Usage(m),
        fbc_models::Error::Internal(m) => Failure::Input(format!("{m}\n")),
    }
}

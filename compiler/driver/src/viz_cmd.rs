//! `fbc viz`: the module after the pipeline drawn as one HTML page, or one tensor's placement
//! as an SVG (`fbc_viz`).

use fbc_ir::{Module, Type, Value};

use crate::cli::VizArgs;
use crate::{output, Driver, Failure, Session};

/// The value named `name` (`%q` or `q`), searched in `func` or in every function.
fn find_value(m: &Module, func: Option<&str>, name: &str) -> Result<Value, Failure> {
    let bare = name.strip_prefix('%').unwrap_or(name);
    let funcs: Vec<_> = match func {
        Some(f) => vec![m
            .find_func(f)
            .ok_or_else(|| Failure::Usage(format!("--func: no function @{f} in the module")))?],
        None => m.func_ids().collect(),
    };
    for f in funcs {
        let fd = m.func(f);
        let results = fd.body.iter().flat_map(|&op| m.op(op).results.iter().copied());
        if let Some(v) = fd
            .args
            .iter()
            .copied()
            .chain(results)
            .find(|&v| m.value(v).name.as_deref() == Some(bare))
        {
            return Ok(v);
        }
    }
    Err(Failure::Usage(format!("--tensor: no value %{bare} in the module after the pipeline")))
}

pub(crate) fn run(driver: &Driver, a: &VizArgs) -> Result<(), Failure> {
    let (file, mut module) = driver.load(&a.file)?;
    let mut session = Session::for_target(driver, &a.target)?;
    session.level = a.opt_level;
    session.strategy = a.layout_strategy.strategy();
    let (_, stats) = session.optimize(&file, &mut module)?;
    let tc = &session.profile.texture_cache;
    let cache_block = [u64::from(tc.block_h), u64::from(tc.block_w)];
    let text = if a.svg {
        let name = a.tensor.as_deref().unwrap_or_default();
        let v = find_value(&module, a.func.as_deref(), name)?;
        let Type::Tensor(t) = module.value_type(v) else {
            return Err(Failure::Usage(format!(
                "--tensor: %{} is not a tensor",
                name.trim_start_matches('%')
            )));
        };
        let layout = fbc_viz::graph::layout_of(&module, v);
        let shape: Vec<u64> = t.shape.to_vec();
        let vname = format!("%{}", name.trim_start_matches('%'));
        fbc_viz::placement_svg(&fbc_viz::Placement {
            name: &vname,
            shape: &shape,
            layout: &layout,
            cache_block,
            max_side: a.max_side,
        })
        .map_err(|e| Failure::Usage(format!("--tensor {vname}: {e}")))?
    } else {
        let open = match &a.tensor {
            Some(n) => Some(find_value(&module, a.func.as_deref(), n)?),
            None => None,
        };
        let title = a.file.display().to_string();
        fbc_viz::page_html(&fbc_viz::Page {
            title: &title,
            target: &session.profile.name,
            module: &module,
            records: &stats.records,
            cache_block,
            func: a.func.as_deref(),
            open,
        })
        .map_err(Failure::Usage)?
    };
    output::write_text(a.output.as_deref(), &text)
}

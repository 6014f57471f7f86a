//! A pass written outside fbc's core, as a user would write one: `fold-scales` rewrites
//! `scale(scale(x, a), b)` into `scale(x, a·b)` and, unless `keep-unit=true`, drops a scale by 1.
//!
//! It uses only fbc's public library API: the `Pass` trait, `PassInfo` with a typed option, the
//! typed op kinds (`fbc_dialects::kind`) and the `Module` mutation methods. [`register`] is the one
//! entry point, used two ways: built as a `cdylib`, the crate is a pass plugin for the stock
//! `fbc --load-pass-plugin` (`declare_plugin!` below exports it); linked as a library, `fbc-custom`
//! (src/main.rs) calls it on its own `Driver`.

use fbc_dialects::kind::TensorOp;
use fbc_ir::pass::{ExtensionPoint, OptionKind, OptionSpec, PassInfo, PassRegistry};
use fbc_ir::{Attr, Diagnostic, Module, Pass, PassContext};

fbc_plugin::declare_plugin!(register);

/// Adds this crate's passes to a registry, and `fold-scales` to the start of every `-O`
/// pipeline (whose `dce` then removes the scales it bypassed).
pub fn register(passes: &mut PassRegistry) {
    passes.register(PassInfo::new(
        "fold-scales",
        "fold chains of tensor.scale into one (example of an out-of-tree pass)",
        vec![OptionSpec::new(
            "keep-unit",
            OptionKind::Bool,
            Some("false"),
            "keep scales by exactly 1.0",
        )],
        |opts| Ok(Box::new(FoldScales { keep_unit: opts.bool("keep-unit") })),
    ));
    passes.extend_pipeline(ExtensionPoint::PipelineStart, "fold-scales");
}

#[derive(Debug)]
pub struct FoldScales {
    pub keep_unit: bool,
}

impl Pass for FoldScales {
    fn name(&self) -> &str {
        "fold-scales"
    }

    fn run(&mut self, m: &mut Module, cx: &mut PassContext<'_>) -> Result<(), Vec<Diagnostic>> {
        let mut folded = 0;
        for op in m.all_ops().collect::<Vec<_>>() {
            let d = m.op(op);
            if !TensorOp::Scale.is(d) {
                continue;
            }
            let outer = d.attr("factor").and_then(Attr::as_float).unwrap_or(1.0);
            let input = d.operands[0];
            // scale(scale(x, a), b) -> scale(x, a*b): read through the producer.
            if let Some(inner) = m.defining_op(input).filter(|&p| TensorOp::Scale.is(m.op(p))) {
                let inner_factor =
                    m.op(inner).attr("factor").and_then(Attr::as_float).unwrap_or(1.0);
                let source = m.op(inner).operands[0];
                m.set_operand(op, 0, source);
                m.set_attr(op, "factor", Attr::Float(inner_factor * outer));
                folded += 1;
            }
            let factor = m.op(op).attr("factor").and_then(Attr::as_float).unwrap_or(1.0);
            if factor == 1.0 && !self.keep_unit {
                let (result, source) = (m.op(op).results[0], m.op(op).operands[0]);
                m.replace_all_uses(result, source);
                folded += 1;
            }
        }
        cx.stats.add("fold-scales", "folded", folded);
        // The inner scales may now be unused; leave them to `dce`, as a pipeline would.
        Ok(())
    }
}

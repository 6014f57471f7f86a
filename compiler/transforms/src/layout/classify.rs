//! `fb-classify`: tags every op with its FBLayout class (Sec. 4.1, Table 1), refined for this
//! graph, and marks tensors with reduction-axis conflicts (Sec. 3.1).
//!
//! Writes (discardable attributes; earlier values are replaced, so the pass is idempotent):
//! - `fbc.class = "FTI-C" | "FTD-C" | "FTI-D" | "FTD-D"` on every op with a class (the refined
//!   class of [`analysis::classify`]; ops without a class, such as `func.return` and
//!   `layout.assign`, get none);
//! - `fbc.conflict` (unit) on an op whose result is reduced by at least two ops along different
//!   axes, and `fbc.conflict_args = [i, ...]` on a function for such arguments.
//!
//! Option `print=true` writes [`analysis::classification_table`] to stderr. Counters: one per
//! class, `refined`, `conflicts`.

use fbc_ir::{Attr, Diagnostic, Module, Pass, PassContext, ValueDef};

use super::analysis::{self, has_conflict, reduction_uses, tensors};

#[derive(Debug, Default)]
pub struct FbClassify {
    pub print: bool,
}

pub const NAME: &str = "fb-classify";

impl Pass for FbClassify {
    fn name(&self) -> &str {
        NAME
    }

    fn run(&mut self, m: &mut Module, cx: &mut PassContext<'_>) -> Result<(), Vec<Diagnostic>> {
        let training = analysis::is_training(m);
        let ops: Vec<_> = m.all_ops().collect();
        let classes: Vec<_> = ops.iter().map(|&op| analysis::classify(m, op, training)).collect();
        for (&op, c) in ops.iter().zip(&classes) {
            match c.refined {
                Some(class) => {
                    m.set_attr(op, "fbc.class", Attr::Str(class.name().into()));
                    cx.stats.add(NAME, class.name(), 1);
                }
                None => {
                    m.remove_attr(op, "fbc.class");
                }
            }
            if c.refined != c.declared {
                cx.stats.add(NAME, "refined", 1);
            }
            m.remove_attr(op, "fbc.conflict");
        }
        for f in m.func_ids().collect::<Vec<_>>() {
            m.func_mut(f).attrs.retain(|(k, _)| k != "fbc.conflict_args");
        }
        let conflicting: Vec<_> =
            tensors(m).into_iter().filter(|&v| has_conflict(&reduction_uses(m, v))).collect();
        for v in conflicting {
            cx.stats.add(NAME, "conflicts", 1);
            match m.value(v).def {
                ValueDef::Result { op, .. } => m.set_attr(op, "fbc.conflict", Attr::Unit),
                ValueDef::Arg { func, index } => {
                    let attrs = &mut m.func_mut(func).attrs;
                    match attrs.iter_mut().find(|(k, _)| k == "fbc.conflict_args") {
                        Some((_, Attr::Array(a))) => a.push(Attr::Int(i64::from(index))),
                        _ => attrs.push((
                            "fbc.conflict_args".into(),
                            Attr::Array(vec![Attr::Int(i64::from(index))]),
                        )),
                    }
                }
            }
        }
        if self.print {
            eprint!("{}", analysis::classification_table(m));
        }
        Ok(())
    }
}

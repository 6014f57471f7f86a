//! `dce`: removes pure ops whose results are unused.
//!
//! Walks each body backwards, so a chain of dead ops goes in one sweep. Ops with side effects
//! (returns, calls) always stay.

use fbc_ir::{Diagnostic, Module, Op, Pass, PassContext};

#[derive(Debug, Default)]
pub struct Dce;

impl Pass for Dce {
    fn name(&self) -> &str {
        "dce"
    }

    fn run(&mut self, m: &mut Module, cx: &mut PassContext<'_>) -> Result<(), Vec<Diagnostic>> {
        let removed = remove_dead_ops(m);
        cx.stats.add("dce", "ops-removed", removed as i64);
        Ok(())
    }
}

/// Erases every pure op with no used result; returns how many went.
pub fn remove_dead_ops(m: &mut Module) -> usize {
    let mut removed = 0;
    for f in 0..m.funcs.len() {
        let body = m.funcs[f].body.clone();
        let mut dead: Vec<Op> = Vec::new();
        for &op in body.iter().rev() {
            let d = m.op(op);
            if d.def.traits.pure && d.results.iter().all(|&r| m.value(r).uses.is_empty()) {
                // Dropping this op's uses may make its operands' producers dead too; they come
                // later in this backwards walk.
                m.drop_uses(op);
                dead.push(op);
            }
        }
        removed += dead.len();
        m.erase_ops(&dead);
    }
    removed
}

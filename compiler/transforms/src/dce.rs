//! `dce`: removes pure ops whose results are unused.
//!
//! Walks each body backwards, so a chain of dead ops goes in one sweep. Ops with side effects
//! (returns, calls) always stay.

use std::collections::HashMap;

use fbc_ir::{Diagnostic, Module, Op, Pass, PassContext, Value};

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
///
/// One backwards walk per function: each value's uses by ops not yet found dead are counted down
/// as its readers die, so a dead chain goes in one sweep, and the dead ops' uses are dropped in
/// bulk at the end (linear even when they share an operand with a million uses).
pub fn remove_dead_ops(m: &mut Module) -> usize {
    let mut removed = 0;
    for f in 0..m.funcs.len() {
        let body = m.funcs[f].body.clone();
        let mut live_uses: HashMap<Value, usize> = HashMap::new();
        let mut dead: Vec<Op> = Vec::new();
        for &op in body.iter().rev() {
            let d = m.op(op);
            let live = |v: Value, counts: &HashMap<Value, usize>| {
                counts.get(&v).copied().unwrap_or_else(|| m.value(v).uses.len())
            };
            if d.def.traits.pure && d.results.iter().all(|&r| live(r, &live_uses) == 0) {
                for &v in &d.operands {
                    let n = live(v, &live_uses);
                    live_uses.insert(v, n.saturating_sub(1));
                }
                dead.push(op);
            }
        }
        removed += dead.len();
        m.erase_ops(&dead);
    }
    removed
}

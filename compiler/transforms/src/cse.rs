//! `cse`: merges pure ops that compute the same thing.
//!
//! Two ops are the same when they have the same definition, operands, attributes and result types.
//! Bodies are single blocks, so an earlier identical op always dominates a later one.

use std::collections::HashMap;

use fbc_ir::{Attr, Diagnostic, Module, Pass, PassContext, Type, Value};

#[derive(Debug, Default)]
pub struct Cse;

type Key = (&'static str, Vec<Value>, Vec<(String, Attr)>, Vec<Type>);

impl Pass for Cse {
    fn name(&self) -> &str {
        "cse"
    }

    fn run(&mut self, m: &mut Module, cx: &mut PassContext<'_>) -> Result<(), Vec<Diagnostic>> {
        let mut merged = 0;
        for f in 0..m.funcs.len() {
            let mut seen: HashMap<Key, Vec<Value>> = HashMap::new();
            let mut dead = Vec::new();
            for op in m.funcs[f].body.clone() {
                let d = m.op(op);
                if !d.def.traits.pure {
                    continue;
                }
                let mut operands = d.operands.to_vec();
                if d.def.traits.commutative {
                    operands.sort();
                }
                let key: Key = (
                    d.def.name,
                    operands,
                    d.attrs.clone(),
                    d.results.iter().map(|&r| m.value_type(r).clone()).collect(),
                );
                let results = d.results.to_vec();
                match seen.get(&key) {
                    Some(prev) => {
                        for (old, new) in results.iter().zip(prev.clone()) {
                            m.replace_all_uses(*old, new);
                        }
                        dead.push(op);
                    }
                    None => {
                        seen.insert(key, results);
                    }
                }
            }
            merged += dead.len();
            m.erase_ops(&dead);
        }
        cx.stats.add("cse", "ops-merged", merged as i64);
        Ok(())
    }
}

//! `cse`: merges pure ops that compute the same thing.
//!
//! Two ops are the same when they have the same definition, operands (in any order for a
//! commutative op), attributes and result types. Bodies are single blocks, so an earlier
//! identical op always dominates a later one.

use std::hash::{Hash, Hasher};

use rustc_hash::{FxHashMap, FxHasher};

use smallvec::SmallVec;

use fbc_ir::{Diagnostic, Module, Op, Pass, PassContext, Value};

#[derive(Debug, Default)]
pub struct Cse;

/// The operands as compared: sorted for a commutative op.
fn operands(m: &Module, op: Op) -> SmallVec<[Value; 3]> {
    let d = m.op(op);
    let mut v = d.operands.clone();
    if d.def.traits.commutative {
        v.sort_unstable();
    }
    v
}

/// A hash of everything that makes two ops the same (see [`same`]).
fn key_hash(m: &Module, op: Op) -> u64 {
    let d = m.op(op);
    let mut h = FxHasher::default();
    d.def.name.hash(&mut h);
    operands(m, op).hash(&mut h);
    d.attrs.hash(&mut h);
    for &r in &d.results {
        m.value_type(r).hash(&mut h);
    }
    h.finish()
}

/// Whether `a` and `b` compute the same values.
fn same(m: &Module, a: Op, b: Op) -> bool {
    let (da, db) = (m.op(a), m.op(b));
    da.def.name == db.def.name
        && da.attrs == db.attrs
        && da.results.len() == db.results.len()
        && da.results.iter().zip(&db.results).all(|(&x, &y)| m.value_type(x) == m.value_type(y))
        && operands(m, a) == operands(m, b)
}

impl Pass for Cse {
    fn name(&self) -> &str {
        "cse"
    }

    fn run(&mut self, m: &mut Module, cx: &mut PassContext<'_>) -> Result<(), Vec<Diagnostic>> {
        let mut merged = 0;
        for f in 0..m.funcs.len() {
            let body = m.funcs[f].body.clone();
            // The pure ops seen so far by key hash; ops of equal hash are compared in full.
            let mut seen: FxHashMap<u64, SmallVec<[Op; 1]>> = FxHashMap::default();
            seen.reserve(body.len());
            let mut dead = Vec::new();
            for op in body {
                if !m.op(op).def.traits.pure {
                    continue;
                }
                let candidates = seen.entry(key_hash(m, op)).or_default();
                match candidates.iter().copied().find(|&prev| same(m, prev, op)) {
                    Some(prev) => {
                        let pairs: SmallVec<[(Value, Value); 1]> = m
                            .op(op)
                            .results
                            .iter()
                            .copied()
                            .zip(m.op(prev).results.iter().copied())
                            .collect();
                        for (old, new) in pairs {
                            m.replace_all_uses(old, new);
                        }
                        dead.push(op);
                    }
                    None => candidates.push(op),
                }
            }
            merged += dead.len();
            m.erase_ops(&dead);
        }
        cx.stats.add("cse", "ops-merged", merged as i64);
        Ok(())
    }
}

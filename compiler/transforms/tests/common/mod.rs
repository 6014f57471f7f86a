//! Helpers shared by the lowering tests (`lower.rs`, `split_k.rs`): parsing, running a pipeline
//! for a target profile, the launches of a lowered module, and translation validation.

#![allow(dead_code)] // Each test binary uses its own subset.

use std::sync::Arc;

use fbc_dialects::memory::Kernel;
use fbc_ir::pass::Statistics;
use fbc_ir::{Module, PassContext, PassManager, SourceFile, Type};
use fbc_runtime::interp::{check_equivalent, Tolerance};

/// Matmuls and reductions may sum in another order than the reference's blocked kernels.
pub const TOL: Tolerance = Tolerance { rtol: 1e-4, atol: 1e-5 };

pub fn parse(text: &str) -> Module {
    let reg = fbc_dialects::registry();
    fbc_ir::parse_module(&Arc::new(SourceFile::new("t.fbir", text)), &reg)
        .unwrap_or_else(|d| panic!("{text}\n{d:?}"))
}

pub fn run(m: &mut Module, pipeline: &str, target: &str) -> Statistics {
    run_for(m, pipeline, &fbc_target::builtin(target).expect("target"))
}

pub fn run_for(m: &mut Module, pipeline: &str, p: &fbc_target::HardwareProfile) -> Statistics {
    let reg = fbc_dialects::registry();
    let steps = fbc_transforms::default_registry().parse_pipeline(pipeline).expect("pipeline");
    let mut pm = PassManager::new(steps);
    pm.instrumentation.verify_each = true;
    let mut cx = PassContext::new(&reg);
    cx.target = p;
    pm.run(m, &mut cx, &mut |_| {}).unwrap_or_else(|d| panic!("{pipeline}: {d:?}"));
    cx.stats
}

pub fn lowered(m: &Module, pipeline: &str, target: &str) -> (Module, Statistics) {
    let mut after = m.clone();
    let st = run(&mut after, pipeline, target);
    (after, st)
}

/// Every function of `before` and `after` agree on random inputs.
pub fn same_numbers(before: &Module, after: &Module, what: &str) {
    for f in &before.funcs {
        if f.args.iter().any(|&a| !matches!(before.value_type(a), Type::Tensor(_))) {
            continue;
        }
        if let Err(e) = check_equivalent(before, after, &f.name, 7, TOL) {
            panic!("{what}: {e}\n{}", fbc_ir::print_module(after));
        }
    }
}

/// The launches of `m`, in op order.
pub fn kernels(m: &Module) -> Vec<Kernel> {
    m.all_ops()
        .filter(|&o| m.op(o).def.is("memory.launch"))
        .map(|o| Kernel::from_op(m.op(o)).expect("launch"))
        .collect()
}

//! The `func` dialect: returns and calls. (`func.func` itself is syntax: a module's functions.)

use crate::registry::{Arity, AttrDef, AttrKind, OpDef, OpError, OpTraits, OpView};
use crate::types::Type;

pub static OPS: &[OpDef] = &[
    OpDef {
        name: "func.return",
        summary: "returns values from a function",
        doc: "Ends a function body. Operand types must equal the function's result types, in order.",
        operands: Arity::AtLeast(0),
        results: Arity::Exactly(0),
        attrs: &[],
        traits: OpTraits { pure: false, elementwise: false, commutative: false, terminator: true, consumes: false },
        class: None,
        infer: infer_return,
    },
    OpDef {
        name: "func.call",
        summary: "calls a function of the module",
        doc: "Calls `callee` with the operands; results are the callee's results. Operand types must \
              equal the callee's argument types.",
        operands: Arity::AtLeast(0),
        results: Arity::AtLeast(0),
        attrs: &[AttrDef::required("callee", AttrKind::Symbol, "the function to call")],
        traits: OpTraits { pure: false, elementwise: false, commutative: false, terminator: false, consumes: false },
        class: None,
        infer: infer_call,
    },
];

fn infer_return(v: &OpView<'_>) -> Result<Vec<Type>, OpError> {
    let f = v.module.func(v.func);
    if v.operand_types.len() != f.result_types.len() {
        return Err(OpError::new(format!(
            "func.return has {} operands, but @{} returns {} values",
            v.operand_types.len(),
            f.name,
            f.result_types.len()
        )));
    }
    for (i, (have, want)) in v.operand_types.iter().zip(&f.result_types).enumerate() {
        if have != want && !have.is_unknown() {
            return Err(OpError::operand(
                i,
                format!("returns {have}, but @{} declares result {i} as {want}", f.name),
            ));
        }
    }
    Ok(Vec::new())
}

fn infer_call(v: &OpView<'_>) -> Result<Vec<Type>, OpError> {
    let Some(crate::attr::Attr::Symbol(callee)) = v.attr("callee") else {
        return Err(OpError::attr("callee", "`callee` must be a symbol"));
    };
    let Some(fid) = v.module.find_func(callee) else {
        return Err(OpError::attr("callee", format!("no function named @{callee} in this module")));
    };
    let f = v.module.func(fid);
    let arg_types: Vec<&Type> = f.args.iter().map(|a| v.module.value_type(*a)).collect();
    if arg_types.len() != v.operand_types.len() {
        return Err(OpError::new(format!(
            "@{callee} takes {} arguments, but the call passes {}",
            arg_types.len(),
            v.operand_types.len()
        )));
    }
    for (i, (have, want)) in v.operand_types.iter().zip(arg_types).enumerate() {
        if have != want && !have.is_unknown() {
            return Err(OpError::operand(
                i,
                format!("expected {want}, found {have}: argument {i} of @{callee}"),
            ));
        }
    }
    Ok(f.result_types.clone())
}

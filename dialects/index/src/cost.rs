//! The GPU cost model used to pick the best equivalent expression.
//!
//! | node                                   | cost | why                                                    |
//! |----------------------------------------|------|--------------------------------------------------------|
//! | `floordiv`, `ceildiv`, `mod`           | 40   | mobile GPUs have no integer divider: a 32/64-bit div or mod is a ~20-40 instruction reciprocal + correction sequence (plus sign fix-ups for floor semantics) |
//! | `*`                                    | 4    | integer multiply is multi-cycle / half-rate on most mobile ALUs |
//! | `+ - << >> &`, unary `-`, `min`, `max` | 1    | single full-rate ALU instructions                      |
//! | literals, variables                    | 0    | immediates and registers                               |
//!
//! Invariants: costs are totals over the *tree* (shared sub-terms are
//! counted at every use, like the generated code would compute them) and
//! always saturate instead of overflowing. The e-graph extractor uses
//! [`Cost`], which orders lexicographically by (operation cost, variable
//! references, node count) so that ties are broken stably and towards
//! smaller expressions; egg then breaks remaining ties by its sorted node
//! order, which is deterministic with the `deterministic` feature.

#[cfg(feature = "simplify")]
use egg::{CostFunction, Id, Language};

use crate::expr::{BinOp, Expr};
#[cfg(feature = "simplify")]
use crate::lang::IndexLang;

/// Cost of a division-like node.
pub const DIVMOD_COST: u64 = 40;
/// Cost of a multiplication.
pub const MUL_COST: u64 = 4;
/// Cost of a cheap ALU operation.
pub const ALU_COST: u64 = 1;

/// Cost of one binary operator (children excluded).
pub fn binop_cost(op: BinOp) -> u64 {
    match op {
        BinOp::FloorDiv | BinOp::CeilDiv | BinOp::Mod => DIVMOD_COST,
        BinOp::Mul => MUL_COST,
        BinOp::Add
        | BinOp::Sub
        | BinOp::Shl
        | BinOp::Shr
        | BinOp::And
        | BinOp::Min
        | BinOp::Max => ALU_COST,
    }
}

/// Cost of one `Expr` node (children excluded).
pub(crate) fn expr_node_cost(e: &Expr) -> u64 {
    match e {
        Expr::Const(_) | Expr::Var(_) => 0,
        Expr::Neg(_) => ALU_COST,
        other => other.as_binary().map_or(0, |(op, _, _)| binop_cost(op)),
    }
}

/// Extraction cost: lexicographic (ops, variable references, nodes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Cost {
    /// Sum of operation costs under the model above.
    pub ops: u64,
    /// Number of variable leaves (fewer = less register pressure).
    pub var_refs: u64,
    /// Number of nodes.
    pub nodes: u64,
}

impl Cost {
    fn saturating_add(self, o: Cost) -> Cost {
        Cost {
            ops: self.ops.saturating_add(o.ops),
            var_refs: self.var_refs.saturating_add(o.var_refs),
            nodes: self.nodes.saturating_add(o.nodes),
        }
    }

    /// Cost of a whole `Expr` tree (iterative, any depth).
    pub fn of_expr(e: &Expr) -> Cost {
        let mut total = Cost::default();
        let mut stack = vec![e];
        while let Some(n) = stack.pop() {
            total = total.saturating_add(Cost {
                ops: expr_node_cost(n),
                var_refs: u64::from(matches!(n, Expr::Var(_))),
                nodes: 1,
            });
            stack.extend(n.children());
        }
        total
    }
}

/// egg cost function implementing the model.
#[cfg(feature = "simplify")]
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct CostModel;

#[cfg(feature = "simplify")]
pub(crate) fn lang_node_cost(node: &IndexLang) -> Cost {
    let ops = match node {
        IndexLang::Num(_) | IndexLang::Symbol(_) => 0,
        IndexLang::Neg(_) => ALU_COST,
        other => crate::lang::binop_of(other).map_or(0, binop_cost),
    };
    Cost { ops, var_refs: u64::from(matches!(node, IndexLang::Symbol(_))), nodes: 1 }
}

#[cfg(feature = "simplify")]
impl CostFunction<IndexLang> for CostModel {
    type Cost = Cost;

    fn cost<C>(&mut self, enode: &IndexLang, mut costs: C) -> Cost
    where
        C: FnMut(Id) -> Cost,
    {
        enode.fold(lang_node_cost(enode), |acc, id| acc.saturating_add(costs(id)))
    }
}

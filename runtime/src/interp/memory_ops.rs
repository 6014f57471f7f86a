//! The interpreter's execution of memory-dialect ops: storage lives beside the tensor values of a
//! frame, keyed by SSA value; `memory.alloc` makes zeroed storage, `memory.upload` packs a tensor
//! by its layout, `memory.launch` goes through the frame's [`Launcher`], `memory.download`
//! unpacks, `memory.dealloc` frees.
//!
//! Storage is `f32` or `i32` in every mode: in [`Mode::F64`] an upload rounds to `f32` and a
//! download widens back, so a lowered function computes in `f32` whatever the mode (the memory
//! dialect has no `f64` storage). `plan-memory`'s slots are ignored: every `memory.alloc` gets its
//! own zeroed storage, every `memory.upload` its own.

use std::collections::{HashMap, HashSet};
use std::rc::Rc;

use fbc_dialects::kind::MemoryOp;
use fbc_dialects::layout::Layout;
use fbc_dialects::memory::{Kernel, MemType};
use fbc_ir::{Module, OpData, Type};

use super::error::InterpError;
use super::value::{Mode, Value};
use crate::exec::{pack, unpack, Launcher, MemData};

/// Storage of one frame.
pub(crate) type MemEnv = HashMap<fbc_ir::Value, MemData>;

/// The storage that `memory.upload` packs from some arguments of a function, kept from one call
/// to the next ([`Interpreter::run_id_with_uploads`](super::Interpreter::run_id_with_uploads)):
/// a later call's upload of such an argument copies the storage packed at the first instead of
/// placing every element by its layout again. For arguments that hold the same value at every
/// call (a model's weights, where `fbc generate` calls `@decode` once a token): a kept argument
/// given another value is not packed again, and the call computes with the first one. One
/// `Uploads` serves one function of one module (uploads are told apart by their results).
#[derive(Debug, Clone, Default)]
pub struct Uploads {
    /// Per argument of the function: whether its uploads are kept.
    pub(crate) keep: Vec<bool>,
    /// The storage each upload (by its result) packed.
    packed: HashMap<fbc_ir::Value, MemData>,
    /// Uploads that copied kept storage.
    reused: u64,
}

impl Uploads {
    /// Keeps the uploads of the arguments `keep` marks (one flag per argument, in order).
    pub fn new(keep: Vec<bool>) -> Uploads {
        Uploads { keep, packed: HashMap::new(), reused: 0 }
    }

    /// How many uploads have copied kept storage instead of packing their tensor.
    pub fn reused(&self) -> u64 {
        self.reused
    }
}

fn op_err(d: &OpData, message: impl Into<String>) -> InterpError {
    InterpError::Op { op: d.name().to_string(), message: message.into(), span: d.span }
}

fn mem_type(module: &Module, d: &OpData, v: fbc_ir::Value) -> Result<MemType, InterpError> {
    let t = module.value_type(v);
    MemType::parse_type(t).map_err(|e| op_err(d, e))
}

fn layout(d: &OpData) -> Result<Layout, InterpError> {
    let a = d.attr("layout").ok_or_else(|| op_err(d, "missing `layout`"))?;
    Layout::from_attr(a).map_err(|e| op_err(d, e.to_string()))
}

/// Executes memory op `d`; tensor results go into `env`, storage into `mem`.
pub(crate) fn execute(
    module: &Module,
    d: &OpData,
    env: &mut HashMap<fbc_ir::Value, Rc<Value>>,
    mem: &mut MemEnv,
    launcher: &mut dyn Launcher,
    mode: Mode,
    kept: Option<(&HashSet<fbc_ir::Value>, &mut Uploads)>,
) -> Result<(), InterpError> {
    let result = |i: usize| d.results.get(i).copied().ok_or_else(|| op_err(d, "missing result"));
    let operand = |i: usize| d.operands.get(i).copied().ok_or_else(|| op_err(d, "missing operand"));
    let missing = |i: usize| op_err(d, format!("internal: operand {i} has no storage"));
    let Some(kind) = MemoryOp::of_op(d) else {
        return Err(op_err(d, format!("internal: `{}` is not a memory op", d.name())));
    };
    match kind {
        MemoryOp::Alloc => {
            let r = result(0)?;
            let ty = mem_type(module, d, r)?;
            mem.insert(r, MemData::zeroed(ty).map_err(|e| op_err(d, e))?);
        }
        MemoryOp::Dealloc => {
            mem.remove(&operand(0)?);
        }
        MemoryOp::Upload => {
            let (x, r) = (operand(0)?, result(0)?);
            let ty = mem_type(module, d, r)?;
            let Type::Tensor(t) = module.value_type(x) else {
                return Err(op_err(d, "operand 0 is not a tensor"));
            };
            let kept = kept.filter(|(args, _)| args.contains(&x)).map(|(_, u)| u);
            if let Some(data) = kept.as_ref().and_then(|u| u.packed.get(&r)) {
                mem.insert(r, data.clone());
                if let Some(u) = kept {
                    u.reused += 1;
                }
                return Ok(());
            }
            let v = env.get(&x).ok_or_else(|| op_err(d, "internal: operand 0 has no value"))?;
            let tile = fbc_dialects::memory::ops::upload_rows(&d.attrs, t)
                .map_err(|e| op_err(d, e.message))?;
            let rows = tile.as_ref().map(|(start, rows)| [*start, rows.shape[0]]);
            let shape = tile.as_ref().map_or(&t.shape, |(_, rows)| &rows.shape);
            let v = v.row_tile(rows).map_err(|e| op_err(d, e))?;
            let data = pack(&layout(d)?, shape, &v, ty).map_err(|e| op_err(d, e))?;
            if let Some(u) = kept {
                u.packed.insert(r, data.clone());
            }
            mem.insert(r, data);
        }
        MemoryOp::Download => {
            let (m, r) = (operand(0)?, result(0)?);
            let ty = mem_type(module, d, m)?;
            let Type::Tensor(t) = module.value_type(r) else {
                return Err(op_err(d, "result 0 is not a tensor"));
            };
            let data = mem.get(&m).ok_or_else(|| missing(0))?;
            let v = unpack(&layout(d)?, &t.shape, data, ty).map_err(|e| op_err(d, e))?;
            let v = match (mode, v) {
                (Mode::F64, Value::F32(t)) => Value::F64(t.cast()),
                (_, v) => v,
            };
            env.insert(r, Rc::new(v));
        }
        MemoryOp::Launch => {
            let k = Kernel::from_op(d).map_err(|e| op_err(d, e))?;
            let types = d
                .operands
                .iter()
                .map(|&v| mem_type(module, d, v))
                .collect::<Result<Vec<_>, _>>()?;
            // Each distinct storage is taken out of the frame once; an operand repeated (read
            // and written) gets a copy of it, so every operand is its own `&mut`.
            let mut owned: Vec<MemData> = Vec::with_capacity(d.operands.len());
            let mut first: Vec<Option<fbc_ir::Value>> = Vec::with_capacity(d.operands.len());
            for (i, &v) in d.operands.iter().enumerate() {
                if let Some(j) = d.operands[..i].iter().position(|&w| w == v) {
                    let copy = owned[j].clone();
                    owned.push(copy);
                    first.push(None);
                } else {
                    owned.push(mem.remove(&v).ok_or_else(|| missing(i))?);
                    first.push(Some(v));
                }
            }
            let out = d.operands.len() - 1;
            // The output is always written back; a repeated output overwrites the original.
            let out_first = d.operands.iter().position(|&w| w == d.operands[out]);
            let r = {
                let _activity = fbc_ir::activity::enter(launch_activity(module, d, &k.name));
                let mut refs: Vec<&mut MemData> = owned.iter_mut().collect();
                launcher.launch(&k, &types, &mut refs)
            };
            if let Some(j) = out_first.filter(|&j| j != out) {
                owned.swap(j, out);
            }
            for (data, v) in owned.into_iter().zip(first) {
                if let Some(v) = v {
                    mem.insert(v, data);
                }
            }
            r.map_err(|e| op_err(d, e))?;
        }
    }
    Ok(())
}

/// `launch `KERNEL` (FILE:LINE:COL)`: the activity an internal error names.
fn launch_activity(module: &Module, d: &fbc_ir::OpData, kernel: &str) -> String {
    match &module.source {
        Some(file) => {
            let (line, col) = file.line_col(d.span.start);
            format!("launch `{kernel}` ({}:{line}:{col})", file.name)
        }
        None => format!("launch `{kernel}`"),
    }
}

//! The memory a run of a function will hold, checked against [`crate::limits`] before anything is
//! allocated.
//!
//! The walk follows the interpreter's own lifetimes: arguments live until their last use, a
//! result from its op to its last use (for an instant when nobody reads it), memory-dialect storage
//! from `memory.alloc`/`memory.upload` to `memory.dealloc` or its last use, and a `func.call` holds
//! the callee's own peak on top of the caller's live values. Every value is checked alone first (so
//! the error names the huge tensor), then the sum of what is live at each op.

use std::collections::HashMap;

use fbc_dialects::kind::{FuncOp, MemoryOp};
use fbc_dialects::memory::MemType;
use fbc_ir::{Attr, FuncId, Module, Span, Type};

use super::error::InterpError;
use super::value::{Mode, Storage};
use crate::limits::{self, TooLarge};

/// Bytes of host memory a value of type `ty` takes in `mode`; `Some(0)` for types the interpreter
/// does not hold (it reports those itself), `None` when the size overflows 64 bits.
pub fn value_bytes(ty: &Type, mode: Mode) -> Option<u64> {
    match ty {
        Type::Tensor(t) => {
            let per = match Storage::of(t.elem, mode) {
                Some(Storage::F64) => 8,
                Some(_) => 4,
                None => return Some(0),
            };
            t.numel()?.checked_mul(per)
        }
        _ => match MemType::from_type(ty) {
            // The host copy holds f32 (f16 images included), i32 or i8 elements.
            Some(m) => mem_elems(&m)?.checked_mul(m.value_elem().bytes()),
            None => Some(0),
        },
    }
}

/// Elements of a storage type, `None` on overflow.
pub fn mem_elems(m: &MemType) -> Option<u64> {
    match m.storage {
        fbc_dialects::memory::StorageKind::Buffer { elems } => Some(elems),
        fbc_dialects::memory::StorageKind::Image { width, height } => {
            width.checked_mul(height)?.checked_mul(4)
        }
    }
}

/// How a value is named in a message: `tensor %x (tensor<4x8xf32>)`.
fn describe(module: &Module, v: fbc_ir::Value) -> String {
    let ty = module.value_type(v);
    let kind = if matches!(ty, Type::Tensor(_)) { "tensor" } else { "storage" };
    match &module.value(v).name {
        Some(n) => format!("{kind} %{n} ({ty})"),
        None => match module.value(v).def {
            fbc_ir::ValueDef::Arg { index, .. } => format!("{kind} argument {index} ({ty})"),
            fbc_ir::ValueDef::Result { op, index } => {
                format!("{kind} result {index} of {} ({ty})", module.op(op).name())
            }
        },
    }
}

/// Checks that running `func` in `mode` stays within [`limits::max_memory`]; returns the peak
/// bytes it will hold. The error is located at the op making the value (the function for an
/// argument), or at the op where the live values first add up to more than the limit.
pub fn check_memory(module: &Module, func: FuncId, mode: Mode) -> Result<u64, InterpError> {
    let mut memo = HashMap::new();
    peak(module, func, mode, 0, &mut memo)
}

fn peak(
    module: &Module,
    func: FuncId,
    mode: Mode,
    depth: usize,
    memo: &mut HashMap<FuncId, u64>,
) -> Result<u64, InterpError> {
    if let Some(&p) = memo.get(&func) {
        return Ok(p);
    }
    let limit = limits::max_memory();
    let f = module.func(func);
    let too_large = |what: String, bytes: Option<u64>, span: Span| InterpError::Memory {
        error: TooLarge { what, bytes, limit },
        span,
    };
    let mut last_use: HashMap<fbc_ir::Value, usize> = HashMap::new();
    for (pos, &op) in f.body.iter().enumerate() {
        for &v in &module.op(op).operands {
            last_use.insert(v, pos);
        }
    }
    let mut size: HashMap<fbc_ir::Value, u64> = HashMap::new();
    let mut live: u64 = 0;
    for &a in &f.args {
        let b = value_bytes(module.value_type(a), mode);
        match b {
            Some(b) if b <= limit => {
                size.insert(a, b);
                live += b;
            }
            _ => return Err(too_large(describe(module, a), b, f.name_span)),
        }
    }
    if live > limit {
        return Err(too_large(format!("the arguments of @{}", f.name), Some(live), f.name_span));
    }
    let mut top = live;
    for (pos, &op) in f.body.iter().enumerate() {
        let d = module.op(op);
        let mut here: u64 = 0;
        for &r in &d.results {
            let b = value_bytes(module.value_type(r), mode);
            match b {
                Some(b) if b <= limit => {
                    size.insert(r, b);
                    here += b;
                }
                _ => return Err(too_large(describe(module, r), b, d.span)),
            }
        }
        if FuncOp::Call.is(d) && depth < 64 {
            if let Some(Attr::Symbol(s)) = d.attr("callee") {
                if let Some(callee) = module.find_func(s) {
                    // The callee's arguments are the caller's operands, already live.
                    let args: u64 = module
                        .func(callee)
                        .args
                        .iter()
                        .filter_map(|&a| value_bytes(module.value_type(a), mode))
                        .fold(0, u64::saturating_add);
                    here += peak(module, callee, mode, depth + 1, memo)?.saturating_sub(args);
                }
            }
        }
        let at_op = live.saturating_add(here);
        if at_op > limit {
            return Err(too_large(
                format!("everything live at this `{}` (in @{})", d.name(), f.name),
                Some(at_op),
                d.span,
            ));
        }
        top = top.max(at_op);
        for &r in &d.results {
            if last_use.contains_key(&r) {
                live += size.get(&r).copied().unwrap_or(0);
            }
        }
        let freed = |v: &fbc_ir::Value| {
            last_use.get(v) == Some(&pos) || (MemoryOp::Dealloc.is(d) && d.operands[0] == *v)
        };
        let mut seen: Vec<fbc_ir::Value> = Vec::new();
        for v in &d.operands {
            if freed(v) && !seen.contains(v) {
                seen.push(*v);
                live = live.saturating_sub(size.remove(v).unwrap_or(0));
            }
        }
    }
    memo.insert(func, top);
    Ok(top)
}

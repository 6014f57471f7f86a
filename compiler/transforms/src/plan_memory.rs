//! `plan-memory`: storage lifetimes and reuse for memory-dialect functions.
//!
//! Over each function body (the schedule), the last use of every storage value (`memory.alloc`
//! and `memory.upload` results) is where it dies; a `memory.dealloc` follows that op (a value
//! never used dies where it is defined). Allocations get a `slot`: the first free slot of the
//! same storage type — an image slot of exactly the same `[W, H]`, or for buffers the smallest
//! free buffer slot of the same element type that is large enough (best fit), else the largest
//! free one of that type, grown to the allocation's size — else a new slot.
//! A slot is free again after the op that last uses its current value. Running the pass again
//! recomputes everything (old deallocs and slots are dropped first).
//!
//! Statistics: `allocations`, `slots`, `deallocs`, `peak-bytes` (uploaded storage plus one
//! buffer per slot at its largest size), `peak-bytes-no-reuse` (uploaded storage plus every
//! allocation on its own), `live-peak-bytes` (the most bytes live at once), `convert-allocations`
//! (allocations first written by a `layout.convert` kernel), `zero-fills` (allocations that may
//! be read before they are fully written, which a back end without zeroed allocations must fill:
//! [`fbc_dialects::memory::init::allocs_to_fill`]).

use rustc_hash::FxHashMap as HashMap;

use fbc_dialects::kind::{LayoutOp, MemoryOp};
use fbc_dialects::memory::{MemType, StorageKind};
use fbc_ir::pass::{PassInfo, PassRegistry};
use fbc_ir::{Attr, Diagnostic, FuncId, Module, Op, Pass, PassContext, Value};

/// The pass's registered name.
pub const NAME: &str = "plan-memory";

/// Registers `plan-memory`.
pub fn register(r: &mut PassRegistry) {
    r.register(PassInfo::new(
        NAME,
        "assign storage slots with reuse across disjoint lifetimes, insert deallocs, report peak bytes",
        vec![],
        |_| Ok(Box::new(PlanMemory)),
    ));
}

/// The `plan-memory` pass.
#[derive(Debug, Clone, Copy, Default)]
pub struct PlanMemory;

/// Figures of one function (summed over the module as statistics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryPlan {
    /// `memory.alloc` ops.
    pub allocations: u64,
    /// Distinct slots the allocations use.
    pub slots: u64,
    /// `memory.dealloc` ops inserted.
    pub deallocs: u64,
    /// Uploaded bytes plus every slot at its size.
    pub peak_bytes: u64,
    /// Uploaded bytes plus every allocation on its own.
    pub peak_bytes_no_reuse: u64,
    /// The most bytes live at one point of the schedule.
    pub live_peak_bytes: u64,
    /// Allocations first written by a `layout.convert` kernel.
    pub convert_allocations: u64,
    /// Allocations that may be read before they are fully written (zero-filled on OpenCL).
    pub zero_fills: u64,
}

struct Slot {
    ty: MemType,
    bytes: u64,
    free: bool,
}

impl Pass for PlanMemory {
    fn name(&self) -> &str {
        NAME
    }

    fn run(&mut self, m: &mut Module, cx: &mut PassContext<'_>) -> Result<(), Vec<Diagnostic>> {
        let dealloc = cx.registry.get(MemoryOp::Dealloc.name()).ok_or_else(|| {
            vec![Diagnostic::error(format!("{NAME}: op `memory.dealloc` is not registered"))]
        })?;
        let mut total = MemoryPlan::default();
        for f in m.func_ids().collect::<Vec<_>>() {
            let p = plan_func(m, f, dealloc);
            total.allocations += p.allocations;
            total.slots += p.slots;
            total.deallocs += p.deallocs;
            total.peak_bytes += p.peak_bytes;
            total.peak_bytes_no_reuse += p.peak_bytes_no_reuse;
            total.live_peak_bytes = total.live_peak_bytes.max(p.live_peak_bytes);
            total.convert_allocations += p.convert_allocations;
            total.zero_fills += p.zero_fills;
        }
        for (k, v) in [
            ("allocations", total.allocations),
            ("slots", total.slots),
            ("deallocs", total.deallocs),
            ("peak-bytes", total.peak_bytes),
            ("peak-bytes-no-reuse", total.peak_bytes_no_reuse),
            ("live-peak-bytes", total.live_peak_bytes),
            ("convert-allocations", total.convert_allocations),
            ("zero-fills", total.zero_fills),
        ] {
            cx.stats.add(NAME, k, i64::try_from(v).unwrap_or(i64::MAX));
        }
        Ok(())
    }
}

fn mem_type(m: &Module, v: Value) -> Option<MemType> {
    MemType::from_type(m.value_type(v))
}

fn same_kind(a: &MemType, b: &MemType) -> bool {
    match (a.storage, b.storage) {
        (StorageKind::Image { .. }, StorageKind::Image { .. }) => a == b,
        (StorageKind::Buffer { .. }, StorageKind::Buffer { .. }) => a.elem == b.elem,
        _ => false,
    }
}

/// Plans one function in place; returns its figures.
pub fn plan_func(m: &mut Module, f: FuncId, dealloc: &'static fbc_ir::OpDef) -> MemoryPlan {
    // Start over: drop earlier deallocs and slots.
    let old: Vec<Op> =
        m.func(f).body.iter().copied().filter(|&op| MemoryOp::Dealloc.is(m.op(op))).collect();
    m.erase_ops(&old);
    let body = m.func(f).body.clone();
    let mut last_use: HashMap<Value, usize> = HashMap::default();
    let mut storage: Vec<(Value, usize, MemType, bool)> = Vec::new(); // value, def index, type, is alloc
    for (i, &op) in body.iter().enumerate() {
        let d = m.op(op);
        for &v in &d.operands {
            last_use.insert(v, i);
        }
        let is_alloc = MemoryOp::Alloc.is(d);
        if is_alloc || MemoryOp::Upload.is(d) {
            for &r in &d.results {
                if let Some(t) = mem_type(m, r) {
                    storage.push((r, i, t, is_alloc));
                }
            }
        }
    }
    let mut plan = MemoryPlan::default();
    // Deaths per op index.
    let mut dies_at: HashMap<usize, Vec<Value>> = HashMap::default();
    for &(v, def, _, _) in &storage {
        let end = last_use.get(&v).copied().unwrap_or(def).max(def);
        dies_at.entry(end).or_default().push(v);
    }
    // First writer of each alloc: a launch whose last operand it is.
    let mut first_writer_convert: HashMap<Value, bool> = HashMap::default();
    for &op in &body {
        let d = m.op(op);
        if MemoryOp::Launch.is(d) {
            if let Some(&out) = d.operands.last() {
                // The launch's `source` attribute, read without parsing its payload.
                first_writer_convert.entry(out).or_insert_with(|| {
                    d.attr("source")
                        .and_then(Attr::as_str)
                        .is_some_and(|s| s.contains(LayoutOp::Convert.name()))
                });
            }
        }
    }
    let mut slots: Vec<Slot> = Vec::new();
    let mut slot_of: HashMap<Value, usize> = HashMap::default();
    let mut live = 0u64;
    let mut uploads = 0u64;
    let mut new_body = Vec::with_capacity(body.len() * 2);
    let info: HashMap<Value, (MemType, bool)> =
        storage.iter().map(|&(v, _, t, a)| (v, (t, a))).collect();
    for (i, &op) in body.iter().enumerate() {
        new_body.push(op);
        let results = m.op(op).results.clone();
        for r in results {
            let Some(&(ty, is_alloc)) = info.get(&r) else { continue };
            live += ty.bytes();
            plan.live_peak_bytes = plan.live_peak_bytes.max(live);
            if !is_alloc {
                uploads += ty.bytes();
                continue;
            }
            plan.allocations += 1;
            plan.peak_bytes_no_reuse += ty.bytes();
            if first_writer_convert.get(&r).copied().unwrap_or(false) {
                plan.convert_allocations += 1;
            }
            let free = |s: &&Slot| s.free && same_kind(&s.ty, &ty);
            let fits = slots
                .iter()
                .enumerate()
                .filter(|(_, s)| free(s) && s.bytes >= ty.bytes())
                .min_by_key(|(_, s)| s.bytes)
                .map(|(k, _)| k);
            // A buffer slot grows: the largest free one of the element type takes an allocation
            // larger than itself (one buffer at the larger size), rather than a new slot beside
            // it. Image slots keep their exact [W, H].
            let grown = || {
                let buffer = matches!(ty.storage, StorageKind::Buffer { .. });
                slots
                    .iter()
                    .enumerate()
                    .filter(|(_, s)| buffer && free(s))
                    .max_by_key(|(_, s)| s.bytes)
                    .map(|(k, _)| k)
            };
            let k = match fits.or_else(grown) {
                Some(k) => {
                    slots[k].bytes = slots[k].bytes.max(ty.bytes());
                    k
                }
                None => {
                    slots.push(Slot { ty, bytes: ty.bytes(), free: false });
                    slots.len() - 1
                }
            };
            slots[k].free = false;
            slot_of.insert(r, k);
            m.set_attr(op, "slot", Attr::Int(k as i64));
        }
        if let Some(dead) = dies_at.get(&i) {
            for &v in dead {
                let span = m.op(op).span;
                let d = m.create_op(f, dealloc, &[v], Vec::new(), Vec::new(), span);
                new_body.push(d);
                plan.deallocs += 1;
                if let Some((ty, _)) = info.get(&v) {
                    live = live.saturating_sub(ty.bytes());
                }
                if let Some(&k) = slot_of.get(&v) {
                    slots[k].free = true;
                }
            }
        }
    }
    // A dealloc after the terminator would be unreachable: move any to before it.
    if let Some(pos) = new_body.iter().position(|&op| m.op(op).def.traits.terminator) {
        let ret = new_body.remove(pos);
        new_body.push(ret);
    }
    m.func_mut(f).body = new_body;
    plan.slots = slots.len() as u64;
    plan.peak_bytes = uploads + slots.iter().map(|s| s.bytes).sum::<u64>();
    plan.peak_bytes_no_reuse += uploads;
    plan.zero_fills = fbc_dialects::memory::init::allocs_to_fill(m, f).len() as u64;
    plan
}

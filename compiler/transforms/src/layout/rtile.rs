//! `rtile-candidates` (Alg. 1) and `rtile-select` (Eq. 2): the R-Tile passes.
//!
//! **`rtile-candidates{target= max-padding=0.1}`** considers every *R-Tile tensor*: a float
//! tensor of rank ≥ 2 that is an operand or result of an FTD-D op (looking through
//! `layout.assign`). For each it runs [`candidates::generate`] with the tensor's parallel axes
//! and reduction consumers from [`analysis`], and records the mapped candidates, in
//! `(tile_h, tile_w)` order, as `fbc.rtile_candidates = [#layout.rtile<...>, ...]` on the
//! producing op (`fbc.rtile_candidates.N` for result `N > 0`), or on the function as
//! `fbc.rtile_candidates.argN` for argument `N`. An empty list means no tile survived.
//! Counters: `tensors`, `initial`, `after-c1`, `after-c2`, `after-c3` (summed over tensors);
//! the record `rtile-candidates` lists each tensor's counts. Generation is memoised on the
//! generator's input (layers repeat).
//!
//! **`rtile-select{target= print=false linear=true}`** scores, for every R-Tile tensor with at
//! least one reduction consumer the model understands (one tiled axis reduced), the linear
//! layout and each candidate (read from the attributes above, generated when absent) with
//! [`perf_model::total`], and keeps the argmax — ties go to the earlier one, and linear comes
//! first, so an R-Tile must be strictly better. With `linear=false` a tensor with candidates
//! gets the best of them whatever linear scores (`fbc calibrate`'s R-Tile contraction). A chosen R-Tile is materialized as
//! `%t_rt = layout.assign %t {layout = #layout.rtile<...>, fbc.rtile_score = S,
//! fbc.linear_score = L}` placed right after `%t`'s definition (at the top of the body for
//! arguments), and every other user of `%t` reads `%t_rt`. Tensors already read through a
//! `layout.assign` are left alone, so the pass is idempotent. Counters: `tensors`, `rtile`,
//! `linear`; the record `rtile-select` has every score, each distinct selection once
//! (`selections`: consumers, scores, the index of the winner; transformer layers repeat them) and
//! per tensor its `selection` and `chosen` layout; `print=true` writes a report to stderr.
//! Scoring and candidate parsing ([`CandidateReader`]) are memoised on their inputs.
//!
//! Both take the profile from the option `target` (a builtin name), else the pipeline's target,
//! else `generic`.

use std::collections::HashMap;

use fbc_dialects::kind::{LayoutOp, TensorOp};
use fbc_dialects::layout::{Layout, RTile};
use fbc_ir::{Attr, Diagnostic, FbClass, FuncId, Module, Op, PassContext, Type, Value, ValueDef};
use fbc_target::HardwareProfile;

use crate::target::{PassResult, TargetOption};
use serde_json::json;

use super::analysis::{reduced_axes, reduction_uses, root, value_name};
use super::candidates::{self, CandidateInput};
use super::conv_model;
use super::perf_model::{self, Axis2, Consumer, ConsumerKind, TensorDesc};

pub const CANDIDATES: &str = "rtile-candidates";
pub const SELECT: &str = "rtile-select";

/// Every R-Tile tensor of the module, in function and op order, each once. A dequantised
/// weight (`tensor.dequantize`'s result) is none: it keeps the packed rows' linear layout, and
/// its decode is fused into the reads of the product that uses it, so an R-Tile would store the
/// very f32 weight that packed weights exist to avoid.
pub fn rtile_tensors(m: &Module) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    for op in m.all_ops() {
        let d = m.op(op);
        if d.def.class != Some(FbClass::FtdD) {
            continue;
        }
        for &v in d.operands.iter().chain(&d.results) {
            let r = root(m, v);
            let decoded = matches!(m.value(r).def, ValueDef::Result { op, .. }
                if fbc_dialects::kind::TensorOp::Dequantize.is(m.op(op)));
            let ok = match m.value_type(r) {
                Type::Tensor(t) => t.rank() >= 2 && t.elem.is_float() && !decoded,
                _ => false,
            };
            if ok && !out.contains(&r) {
                out.push(r);
            }
        }
    }
    out
}

/// The generator's view of tensor `v`.
pub fn candidate_input(m: &Module, v: Value) -> Option<CandidateInput> {
    let Type::Tensor(t) = m.value_type(v) else { return None };
    let rank = t.rank();
    if rank < 2 {
        return None;
    }
    let uses = reduction_uses(m, v);
    let mut parallel = [false, false];
    for u in &uses {
        parallel[0] |= !u.axes.contains(&(rank - 2));
        parallel[1] |= !u.axes.contains(&(rank - 1));
    }
    if written_by_contraction(m, v) {
        parallel = [true, true];
    }
    Some(CandidateInput {
        shape: t.shape.to_vec(),
        elem_bytes: t.elem.bytes(),
        parallel,
        consumers: uses.iter().filter_map(|u| u.consumer).collect(),
    })
}

/// Whether the kernel that writes `v` is an FTD-D op's: `v` is its result, or a `tensor.scale`
/// of its result that nothing else reads (lowering fuses such a scale into the contraction's
/// epilogue; canonicalize's scale sinking makes them), so it is written along both axes at
/// once.
fn written_by_contraction(m: &Module, v: Value) -> bool {
    let ftd_d = |v: Value| matches!(m.value(v).def, ValueDef::Result { op, .. } if m.op(op).def.class == Some(FbClass::FtdD));
    let ValueDef::Result { op, .. } = m.value(v).def else { return false };
    let d = m.op(op);
    ftd_d(v)
        || (fbc_dialects::kind::TensorOp::Scale.is(d)
            && d.operands.first().is_some_and(|&x| m.value(x).uses.len() == 1 && ftd_d(x)))
}

/// Where the candidates of `v` are recorded.
enum Slot {
    Op(Op, String),
    Func(FuncId, String),
}

fn slot(m: &Module, v: Value) -> Slot {
    match m.value(v).def {
        ValueDef::Result { op, index: 0 } => Slot::Op(op, "fbc.rtile_candidates".into()),
        ValueDef::Result { op, index } => Slot::Op(op, format!("fbc.rtile_candidates.{index}")),
        ValueDef::Arg { func, index } => {
            Slot::Func(func, format!("fbc.rtile_candidates.arg{index}"))
        }
    }
}

fn write_candidates(m: &mut Module, v: Value, list: Attr) {
    match slot(m, v) {
        Slot::Op(op, key) => m.set_attr(op, &key, list),
        Slot::Func(f, key) => {
            let attrs = &mut m.func_mut(f).attrs;
            match attrs.iter_mut().find(|(k, _)| *k == key) {
                Some((_, a)) => *a = list,
                None => attrs.push((key, list)),
            }
        }
    }
}

fn candidates_attr(m: &Module, v: Value) -> Option<&Attr> {
    match slot(m, v) {
        Slot::Op(op, key) => m.op(op).attr(&key),
        Slot::Func(f, key) => m.func(f).attr(&key),
    }
}

/// The recorded candidates of `v`: `None` when none are recorded, an error message when the
/// record is malformed.
pub fn read_candidates(m: &Module, v: Value) -> Option<Result<Vec<RTile>, String>> {
    Some(parse_candidates(m, v, candidates_attr(m, v)?))
}

fn parse_candidates(m: &Module, v: Value, attr: &Attr) -> Result<Vec<RTile>, String> {
    let Some(items) = attr.as_array() else {
        return Err(format!("the R-Tile candidates of {} are not an array", value_name(m, v)));
    };
    let Type::Tensor(t) = m.value_type(v) else {
        return Err(format!("{} is not a tensor", value_name(m, v)));
    };
    // Each candidate must fit the tensor: select writes the winner into a verified op.
    items
        .iter()
        .map(|a| {
            let r = RTile::from_attr(a)?;
            r.check_type(t)?;
            Ok(r)
        })
        .collect::<Result<Vec<_>, fbc_dialects::layout::LayoutError>>()
        .map_err(|e| format!("an R-Tile candidate of {}: {e}", value_name(m, v)))
}

/// [`read_candidates`] with a memory: transformer layers record the same lists on tensors of
/// the same type, and parsing them is most of the cost of reading them.
#[derive(Debug, Default)]
pub struct CandidateReader {
    parsed: HashMap<Attr, Vec<(Type, Vec<RTile>)>>,
}

impl CandidateReader {
    /// The recorded candidates of `v`, as [`read_candidates`] gives them.
    pub fn read(&mut self, m: &Module, v: Value) -> Option<Result<Vec<RTile>, String>> {
        let attr = candidates_attr(m, v)?;
        let ty = m.value_type(v);
        if let Some(seen) = self.parsed.get(attr) {
            if let Some((_, c)) = seen.iter().find(|(t, _)| t == ty) {
                return Some(Ok(c.clone()));
            }
        }
        let parsed = parse_candidates(m, v, attr);
        if let Ok(c) = &parsed {
            self.parsed.entry(attr.clone()).or_default().push((ty.clone(), c.clone()));
        }
        Some(parsed)
    }
}

#[derive(Debug)]
pub struct RTileCandidates {
    pub target: TargetOption,
    pub max_padding: f64,
}

crate::target::profile_pass!(RTileCandidates, CANDIDATES);

impl RTileCandidates {
    fn run_for(&self, m: &mut Module, cx: &mut PassContext<'_>, p: &HardwareProfile) -> PassResult {
        let mut records = Vec::new();
        // Layers repeat: generate (and build the attribute of) each distinct input once.
        let mut memo: HashMap<CandidateInput, ([usize; 4], Attr)> = HashMap::new();
        for v in rtile_tensors(m) {
            let Some(input) = candidate_input(m, v) else { continue };
            let (counts, list) = match memo.get(&input) {
                Some(hit) => hit.clone(),
                None => {
                    let rep = candidates::generate(p, &input, self.max_padding);
                    let counts = [
                        rep.initial.len(),
                        rep.after_c1.len(),
                        rep.after_c2.len(),
                        rep.after_c3.len(),
                    ];
                    let list = Attr::Array(rep.candidates.iter().map(RTile::to_attr).collect());
                    memo.insert(input.clone(), (counts, list.clone()));
                    (counts, list)
                }
            };
            for (k, n) in ["initial", "after-c1", "after-c2", "after-c3"].into_iter().zip(counts) {
                cx.stats.add(CANDIDATES, k, n as i64);
            }
            cx.stats.add(CANDIDATES, "tensors", 1);
            records.push(json!({
                "tensor": value_name(m, v),
                "shape": input.shape,
                "parallel": input.parallel,
                "initial": counts[0],
                "after_c1": counts[1],
                "after_c2": counts[2],
                "after_c3": counts[3],
            }));
            write_candidates(m, v, list);
        }
        cx.stats.records.insert(CANDIDATES.into(), json!({ "target": p.name, "tensors": records }));
        Ok(())
    }
}

/// Scores of one layout for one tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct Scored {
    pub layout: Layout,
    /// Eq. 2's sum.
    pub total: f64,
    /// One per consumer, in consumer order (`None`: the model cannot score that pair).
    pub per_consumer: Vec<Option<perf_model::Score>>,
}

/// The Eq. 2 decision for one tensor: every layout scored, and the winner's index.
#[derive(Debug, Clone, PartialEq)]
pub struct Selection {
    pub consumers: Vec<Consumer>,
    /// Linear first, then the candidates in order.
    pub scored: Vec<Scored>,
    pub best: usize,
}

/// Scores linear and each candidate for `tensor` read by `consumers`, and picks the argmax
/// (first on ties, so linear wins ties).
pub fn select(
    p: &HardwareProfile,
    tensor: &TensorDesc,
    consumers: &[Consumer],
    candidates: &[RTile],
) -> Selection {
    let layouts =
        std::iter::once(Layout::Linear).chain(candidates.iter().copied().map(Layout::RTile));
    let scored: Vec<Scored> = layouts
        .map(|layout| {
            let per_consumer: Vec<_> =
                consumers.iter().map(|c| perf_model::score(p, tensor, &layout, c)).collect();
            let total = per_consumer.iter().flatten().map(|s| s.perf).sum();
            Scored { layout, total, per_consumer }
        })
        .collect();
    let mut best = 0;
    for (i, s) in scored.iter().enumerate() {
        if s.total > scored[best].total {
            best = i;
        }
    }
    Selection { consumers: consumers.to_vec(), scored, best }
}

/// The index of the best-scoring R-Tile of `sel` (the first on ties), or linear's (0) when
/// there is no candidate.
pub fn best_rtile(sel: &Selection) -> usize {
    let mut best = 0;
    for (i, s) in sel.scored.iter().enumerate().skip(1) {
        if best == 0 || s.total > sel.scored[best].total {
            best = i;
        }
    }
    best
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

fn consumer_text(c: &Consumer) -> String {
    let axis = match c.reduce {
        Axis2::H => "H",
        Axis2::W => "W",
    };
    match c.kind {
        ConsumerKind::Matmul { p_is_out_last, other, out_batch } => format!(
            "matmul operand {} reducing {axis} (other = {other}, batch = {out_batch})",
            if p_is_out_last { "b" } else { "a" }
        ),
        ConsumerKind::Reduction => format!("reduction along {axis}"),
    }
}

/// The record of one selection: its consumers and every layout's scores.
fn selection_record(sel: &Selection) -> serde_json::Value {
    json!({
        "consumers": sel.consumers.iter().map(consumer_text).collect::<Vec<_>>(),
        "scores": sel.scored.iter().map(|s| json!({
            "layout": s.layout.to_string(),
            "total": round2(s.total),
            "per_consumer": s.per_consumer.iter().map(|x| x.map(|x| json!({
                "gflops": round2(x.gflops),
                "mem_eff": (x.mem_eff * 1e4).round() / 1e4,
                "perf": round2(x.perf),
            }))).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "chosen": sel.best,
    })
}

/// A human-readable report of one selection (what `rtile-select{print=true}` prints).
pub fn selection_text(name: &str, ty: &str, sel: &Selection) -> String {
    let mut s = format!("{name} : {ty}\n");
    for (k, c) in sel.consumers.iter().enumerate() {
        s.push_str(&format!("  consumer {k}: {}\n", consumer_text(c)));
    }
    for (i, sc) in sel.scored.iter().enumerate() {
        let mark = if i == sel.best { "*" } else { " " };
        let parts: Vec<String> = sc
            .per_consumer
            .iter()
            .map(|x| match x {
                Some(x) => format!("{:.2} GFLOP/s x {:.4} = {:.2}", x.gflops, x.mem_eff, x.perf),
                None => "-".into(),
            })
            .collect();
        let short = match &sc.layout {
            Layout::Linear => "linear".to_string(),
            Layout::RTile(r) => {
                let intra = match r.intra {
                    fbc_dialects::layout::Intra::Rows => "rows".to_string(),
                    fbc_dialects::layout::Intra::Block { bh, bw } => format!("block {bh}x{bw}"),
                };
                format!(
                    "rtile {}x{} {intra} h={} {}",
                    r.tile[0],
                    r.tile[1],
                    r.horizontal,
                    r.storage.name()
                )
            }
        };
        s.push_str(&format!("  {mark} {short:<36} {:>9.2}  [{}]\n", sc.total, parts.join("; ")));
    }
    s
}

#[derive(Debug)]
pub struct RTileSelect {
    pub target: TargetOption,
    pub print: bool,
    /// Whether the linear layout may win; without it a tensor with candidates gets the best of
    /// them (`fbc calibrate` times the tiled contraction on R-Tile operands this way, whatever
    /// the model would choose).
    pub linear: bool,
}

crate::target::profile_pass!(RTileSelect, SELECT);

impl RTileSelect {
    fn run_for(&self, m: &mut Module, cx: &mut PassContext<'_>, p: &HardwareProfile) -> PassResult {
        let mut records = Vec::new();
        let mut report = String::new();
        // Transformer layers repeat the same tensors; scoring is pure in its inputs, so a
        // 16-layer graph scores each distinct (tensor shape, consumers, candidates) once, and the
        // record lists each distinct selection once.
        type Key = (TensorDesc, Vec<Consumer>, Vec<RTile>);
        let mut memo: HashMap<Key, usize> = HashMap::new();
        let mut selections: Vec<(Selection, String)> = Vec::new();
        let mut selection_records = Vec::new();
        let mut reader = CandidateReader::default();
        for v in rtile_tensors(m) {
            if m.value(v).uses.iter().any(|u| LayoutOp::Assign.is(m.op(u.op))) {
                continue; // Already annotated (an earlier run, or the user).
            }
            let Some(input) = candidate_input(m, v) else { continue };
            if input.consumers.is_empty() {
                continue;
            }
            let cands = match reader.read(m, v) {
                Some(Ok(c)) => c,
                Some(Err(msg)) => {
                    let span = match m.value(v).def {
                        ValueDef::Result { op, .. } => m.op(op).span,
                        ValueDef::Arg { func, .. } => m.func(func).name_span,
                    };
                    return Err(vec![Diagnostic::error(format!("{SELECT}: {msg}")).at(span)]);
                }
                None => candidates::generate(p, &input, candidates::DEFAULT_MAX_PADDING).candidates,
            };
            let desc = TensorDesc { shape: input.shape.clone(), elem_bytes: input.elem_bytes };
            let index = *memo.entry((desc, input.consumers, cands)).or_insert_with_key(|key| {
                let (desc, consumers, cands) = key;
                let mut sel = select(p, desc, consumers, cands);
                if !self.linear {
                    sel.best = best_rtile(&sel);
                }
                selection_records.push(selection_record(&sel));
                let chosen = sel.scored[sel.best].layout.to_string();
                selections.push((sel, chosen));
                selections.len() - 1
            });
            let (sel, chosen_text) = &selections[index];
            cx.stats.add(SELECT, "tensors", 1);
            let name = value_name(m, v);
            let ty = m.value_type(v).to_string();
            if self.print {
                report.push_str(&selection_text(&name, &ty, sel));
            }
            records.push(json!({
                "tensor": name,
                "type": ty,
                "selection": index,
                "chosen": chosen_text,
            }));
            let chosen = &sel.scored[sel.best];
            let Layout::RTile(rt) = chosen.layout else {
                cx.stats.add(SELECT, "linear", 1);
                continue;
            };
            cx.stats.add(SELECT, "rtile", 1);
            let attrs = vec![
                ("layout".to_string(), rt.to_attr()),
                ("fbc.rtile_score".to_string(), Attr::Float(round2(chosen.total))),
                ("fbc.linear_score".to_string(), Attr::Float(round2(sel.scored[0].total))),
            ];
            annotate(m, cx, v, attrs);
        }
        let packed = channel_pack(m, cx, p);
        if self.print {
            eprint!("{report}");
        }
        cx.stats.records.insert(
            SELECT.into(),
            json!({
                "target": p.name,
                "selections": selection_records,
                "tensors": records,
                "channel_packed": packed,
            }),
        );
        Ok(())
    }
}

/// The channel-packing step of `rtile-select`: the input `x` of forward convolutions, stored
/// as [`conv_model::channel_packed`] texels where the model's direct kernel saves time over the
/// implicit GEMM on the convolutions reading it, net of the other kernels that reduce `x` (the
/// weight gradient, a norm) reading texels through their maps, charged as one conversion of
/// `x` (`2·bytes / DRAM bandwidth`). Every convolution reading `x` must have whole texels per
/// group, and `x` must be [`packable`]. The filters of those convolutions are channel-packed
/// too where they are packable. Returns the record of every input considered; counters
/// `channel-packed`, `channel-packed-filters`.
fn channel_pack(
    m: &mut Module,
    cx: &mut PassContext<'_>,
    p: &HardwareProfile,
) -> Vec<serde_json::Value> {
    let mut seen = std::collections::HashSet::new();
    let mut records = Vec::new();
    let inputs: Vec<Value> = m
        .all_ops()
        .filter(|&o| TensorOp::Conv2d.is(m.op(o)))
        .filter_map(|o| m.op(o).operands.first().copied())
        .collect();
    for x in inputs {
        if !seen.insert(x) {
            continue;
        }
        if !packable(m, x) {
            continue;
        }
        let Type::Tensor(t) = m.value_type(x) else { continue };
        let shape = t.shape.to_vec();
        let bytes = shape.iter().product::<u64>() * t.elem.bytes();
        // The convolutions reading `x` as their input, and whether another kernel reduces it.
        let (mut convs, mut saves, mut direct, mut others) = (Vec::new(), 0.0, true, false);
        for u in m.value(x).uses.clone() {
            let conv = TensorOp::Conv2d.is(m.op(u.op)) && u.index == 0;
            match conv.then(|| conv_model::ConvShape::of(m, u.op)).flatten() {
                Some(s) => {
                    convs.push(u.op);
                    match conv_model::estimate(p, &s).direct_saves() {
                        Some(d) => saves += d,
                        None => direct = false,
                    }
                }
                None => others |= reduced_axes(m, u.op, u.index as usize).is_some(),
            }
        }
        let penalty = if others { perf_model::convert_time(p, bytes) } else { 0.0 };
        let layout = conv_model::channel_packed(p, &shape).filter(|_| direct && saves > penalty);
        records.push(json!({
            "tensor": value_name(m, x),
            "convolutions": convs.len(),
            "direct_saves_us": direct.then(|| round2(saves * 1e6)),
            "other_readers_us": round2(penalty * 1e6),
            "chosen": layout.map_or_else(|| "linear".to_string(), |l| l.to_string()),
        }));
        let Some(l) = layout else { continue };
        cx.stats.add(SELECT, "channel-packed", 1);
        let attrs = vec![
            ("layout".to_string(), l.to_attr()),
            ("fbc.direct_saves_us".to_string(), Attr::Float(round2((saves - penalty) * 1e6))),
        ];
        annotate(m, cx, x, attrs);
        // The direct kernel's filters in texels of four input channels too (MNN's layout for
        // them): one read gives the four values a step of the input's texel multiplies.
        for op in convs {
            let w = m.op(op).operands[1];
            if !packable(m, w) {
                continue;
            }
            let Type::Tensor(wt) = m.value_type(w) else { continue };
            if let Some(l) = conv_model::channel_packed(p, &wt.shape) {
                cx.stats.add(SELECT, "channel-packed-filters", 1);
                annotate(m, cx, w, vec![("layout".to_string(), l.to_attr())]);
            }
        }
    }
    records
}

/// Whether `v` may be given a channel-packed layout: a rank-4 float tensor not read through a
/// `layout.assign` already, nor the result of a layout op (an R-Tile the Eq. 2 selection
/// chose, a view), a reshape, transpose or broadcast (an index chain's sink, whose tile
/// `tile-propagate` decides) or a `tensor.dequantize`.
fn packable(m: &Module, v: Value) -> bool {
    let ok = matches!(m.value_type(v), Type::Tensor(t) if t.rank() == 4 && t.elem.is_float());
    ok && !m.value(v).uses.iter().any(|u| LayoutOp::Assign.is(m.op(u.op)))
        && !m.defining_op(v).is_some_and(|o| {
            let d = m.op(o);
            LayoutOp::of(d.def).is_some()
                || matches!(
                    TensorOp::of(d.def),
                    Some(fbc_dialects::tensor_data_movement!() | TensorOp::Dequantize)
                )
        })
}

/// Inserts `layout.assign v {attrs}` right after `v`'s definition and makes every other user of
/// `v` read its result.
fn annotate(m: &mut Module, cx: &PassContext<'_>, v: Value, attrs: Vec<(String, Attr)>) {
    let def = cx.registry.expect(LayoutOp::Assign.name());
    let ty = m.value_type(v).clone();
    let (func, pos, span) = match m.value(v).def {
        ValueDef::Result { op, .. } => {
            let f = m.op(op).func;
            let pos = m.func(f).body.iter().position(|&o| o == op).map_or(0, |i| i + 1);
            (f, pos, m.op(op).span)
        }
        ValueDef::Arg { func, .. } => {
            // After the assigns already placed for earlier arguments.
            let body = &m.func(func).body;
            let pos = body
                .iter()
                .take_while(|&&o| {
                    let d = m.op(o);
                    LayoutOp::Assign.is(d)
                        && d.operands
                            .first()
                            .is_some_and(|&x| matches!(m.value(x).def, ValueDef::Arg { .. }))
                })
                .count();
            (func, pos, m.func(func).name_span)
        }
    };
    let assign = m.create_op(func, def, &[v], attrs, vec![ty], span);
    m.insert_op_at(func, pos, assign);
    let new = m.op(assign).results[0];
    if let Some(n) = m.value(v).name.as_deref() {
        let n = format!("{n}_rt");
        m.set_value_name(new, n);
    }
    let uses: Vec<_> = m.value(v).uses.iter().filter(|u| u.op != assign).copied().collect();
    for u in uses {
        m.set_operand(u.op, u.index as usize, new);
    }
}

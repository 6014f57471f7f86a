//! `fuse-attention`: RoPE + `QKᵀ` + scale + soft cap + causal mask + softmax + `PV` become one
//! `tensor.attention` (the seed's TPSFLAT), which lowers to one launch of the memory dialect's
//! attention kind.
//!
//! The pattern, matched from the product with the values (every intermediate read by the next
//! step alone, so the graph it replaces goes away whole):
//!
//! ```text
//! q' = tensor.rope(q, cos, sin)                     (optional; else q' = q)
//! s  = tensor.matmul(q', K') {transpose_b}          q' [B, H, S, D], K' [B, H, M, D]
//! s  = tensor.scale(s) {factor = scale}             (optional; else scale 1)
//! s  = tensor.scale(tanh(tensor.scale(s) {1/c})) {c}    (optional: Gemma 2's soft cap c)
//! s  = tensor.add(s, tensor.causal_mask(pos))       (optional; either operand order)
//! p  = tensor.softmax(s) {axis = -1}
//! o  = tensor.matmul(p, V')
//! ```
//!
//! `K'` and `V'` are `[B, H, M, D]` tensors, or the grouped-query expansion of `[B, KV, M, D]`
//! ones (`reshape` to `[B, KV, 1, M, D]`, `broadcast` to `[B, KV, H/KV, M, D]`, `reshape` to
//! `[B, H, M, D]`), which the fused op reads in place instead. A softmax whose probabilities
//! something else reads (a backward pass) is left alone, as is a mask read from an argument:
//! the fused op computes its mask from indices, so only `tensor.causal_mask` can be folded in.
//!
//! Attention of at most `max-queries` queries per head is fused. Without the option: at most
//! 16 (the token phase, where one query reads the whole cache), and where the profile's
//! `[attention] fuse_prompts` is on, causal attention of any length too (a decoder's prompt:
//! the OpenCL query-block kernel reads each key once per 64 queries and skips the tiles past
//! the diagonal; on a lent H100 it took 0.122 ms for a 512-token Llama 3.2-1B prefill's
//! attention, against about 0.19 ms for the unfused mask, RoPE, products and softmax; the
//! nvidia profile turns it on). Other long attention (an encoder's, cross-attention, one
//! without a causal mask) keeps `QKᵀ` and `PV` as tiled contractions, where the FBLayout stages
//! see its reshapes and transposes: the fused kernel has no tile to skip there and has not
//! been measured against them.

use fbc_dialects::kind::TensorOp as T;
use fbc_ir::{Attr, Diagnostic, Module, Op, Pass, PassContext, Value};

/// The most queries per head of the attention fused by default (a decode step's few).
pub const DECODE_QUERIES: u64 = 16;

/// The pass: fuses attention of at most `max_queries` queries per head (`None`: at most
/// [`DECODE_QUERIES`], or any causal attention where the profile's `[attention] fuse_prompts`
/// is on).
#[derive(Debug, Clone, Copy, Default)]
pub struct FuseAttention {
    pub max_queries: Option<u64>,
}

impl Pass for FuseAttention {
    fn name(&self) -> &str {
        "fuse-attention"
    }

    fn run(&mut self, m: &mut Module, cx: &mut PassContext<'_>) -> Result<(), Vec<Diagnostic>> {
        let def = cx.registry.expect(T::Attention.name());
        let prompts = cx.target.attention.fuse_prompts;
        let mut fused = 0;
        for f in m.func_ids().collect::<Vec<_>>() {
            let body = m.func(f).body.clone();
            for op in body {
                if m.op(op).erased {
                    continue;
                }
                let Some(mt) = matched(m, op) else { continue };
                let fuses = match self.max_queries {
                    Some(n) => mt.queries <= n,
                    None => mt.queries <= DECODE_QUERIES || (prompts && mt.mask.is_some()),
                };
                if !fuses {
                    continue;
                }
                let pv = m.op(op);
                let (span, old) = (pv.span, pv.results[0]);
                let ty = m.value_type(old).clone();
                let at = m.func(f).body.iter().position(|&o| o == op).unwrap_or(0);
                let mut operands = vec![mt.q, mt.k, mt.v];
                let mut attrs = vec![("scale".to_string(), Attr::Float(mt.scale))];
                if let Some((cos, sin)) = mt.rope {
                    operands.extend([cos, sin]);
                    attrs.push(("rope".into(), Attr::Bool(true)));
                }
                if let Some((pos, window)) = mt.mask {
                    operands.push(pos);
                    attrs.push(("causal".into(), Attr::Bool(true)));
                    if window > 0 {
                        attrs.push(("window".into(), Attr::Int(window)));
                    }
                }
                if mt.softcap > 0.0 {
                    attrs.push(("softcap".into(), Attr::Float(mt.softcap)));
                }
                let new = m.create_op(f, def, &operands, attrs, vec![ty], span);
                m.insert_op_at(f, at, new);
                let result = m.op(new).results[0];
                if let Some(name) = m.value(old).name.clone() {
                    m.set_value_name(result, name);
                }
                m.replace_all_uses(old, result);
                // The replaced graph, from the product back: each op once nothing reads it.
                for o in std::iter::once(op).chain(mt.chain) {
                    let d = m.op(o);
                    if !d.erased && d.results.iter().all(|&r| m.value(r).uses.is_empty()) {
                        m.erase_op(o);
                    }
                }
                fused += 1;
            }
        }
        cx.stats.add("fuse-attention", "fused", fused);
        Ok(())
    }
}

/// What the pattern found (see the module docs).
struct Match {
    q: Value,
    k: Value,
    v: Value,
    rope: Option<(Value, Value)>,
    /// The mask's position operand and window.
    mask: Option<(Value, i64)>,
    scale: f64,
    softcap: f64,
    /// Queries per head (`S`).
    queries: u64,
    /// The other ops of the pattern, consumers before producers (the mask, which other
    /// attention may share, among them: it goes only where nothing else reads it).
    chain: Vec<Op>,
}

/// The defining op of `v` when it is a `kind` whose result only one op reads.
fn only(m: &Module, v: Value, kind: T) -> Option<Op> {
    let op = m.defining_op(v)?;
    (kind.is(m.op(op)) && m.value(v).uses.len() == 1).then_some(op)
}

fn flag(m: &Module, op: Op, name: &str) -> bool {
    m.op(op).attr(name).and_then(Attr::as_bool).unwrap_or(false)
}

fn shape(m: &Module, v: Value) -> Option<Vec<u64>> {
    m.value_type(v).as_tensor().map(|t| t.shape.to_vec())
}

fn factor(m: &Module, op: Op) -> Option<f64> {
    m.op(op).attr("factor").and_then(Attr::as_float)
}

/// The attention pattern ending at `op`, a product with the values.
fn matched(m: &Module, op: Op) -> Option<Match> {
    let d = m.op(op);
    if !T::Matmul.is(d) || flag(m, op, "transpose_a") || flag(m, op, "transpose_b") {
        return None;
    }
    let (p, vx) = (d.operands[0], d.operands[1]);
    let mut chain = Vec::new();
    let sm = only(m, p, T::Softmax)?;
    let axis = m.op(sm).attr("axis").and_then(Attr::as_int).unwrap_or(-1);
    if axis != -1 && axis != 3 {
        return None;
    }
    chain.push(sm);
    let mut s = m.op(sm).operands[0];
    // The causal mask.
    let mut mask = None;
    if let Some(add) = only(m, s, T::Add) {
        let [a, b] = m.op(add).operands[..] else { return None };
        let is_mask = |x: Value| {
            let o = m.defining_op(x)?;
            T::CausalMask.is(m.op(o)).then_some(o)
        };
        let (rest, cm) = match (is_mask(a), is_mask(b)) {
            (_, Some(cm)) => (a, cm),
            (Some(cm), None) => (b, cm),
            (None, None) => return None,
        };
        let window = m.op(cm).attr("window").and_then(Attr::as_int).unwrap_or(0);
        mask = Some((m.op(cm).operands[0], window, shape(m, m.op(cm).results[0])?, cm));
        chain.push(add);
        s = rest;
    }
    // Soft cap: c · tanh(s · (1/c)).
    let mut softcap = 0.0;
    if let Some(outer) = only(m, s, T::Scale) {
        let tanh = only(m, m.op(outer).operands[0], T::Tanh);
        let inner = tanh.and_then(|t| only(m, m.op(t).operands[0], T::Scale));
        if let (Some(t), Some(inner)) = (tanh, inner) {
            let (c, r) = (factor(m, outer)?, factor(m, inner)?);
            if c > 0.0 && (c * r - 1.0).abs() <= 1e-12 {
                softcap = c;
                chain.extend([outer, t, inner]);
                s = m.op(inner).operands[0];
            }
        }
    }
    let mut scale = 1.0;
    if let Some(sc) = only(m, s, T::Scale) {
        scale = factor(m, sc)?;
        chain.push(sc);
        s = m.op(sc).operands[0];
    }
    let qk = only(m, s, T::Matmul)?;
    if flag(m, qk, "transpose_a") || !flag(m, qk, "transpose_b") {
        return None;
    }
    chain.push(qk);
    let (mut q, kx) = (m.op(qk).operands[0], m.op(qk).operands[1]);
    let mut rope = None;
    if let Some(r) = only(m, q, T::Rope) {
        let o = &m.op(r).operands;
        rope = Some((o[1], o[2]));
        q = o[0];
        chain.push(r);
    }
    let qs = shape(m, q)?;
    let [b, h, sq, hd] = qs[..] else { return None };
    let (k, kc) = heads(m, kx, h)?;
    let (v, vc) = heads(m, vx, h)?;
    if shape(m, k)? != shape(m, v)? {
        return None;
    }
    let ks = shape(m, k)?;
    let [kb, _, keys, kd] = ks[..] else { return None };
    if kb != b || kd != hd || keys == 0 {
        return None;
    }
    let mask = match mask {
        Some((pos, window, ms, cm)) if ms == [sq, keys] => {
            chain.push(cm);
            Some((pos, window))
        }
        Some(_) => return None,
        None => None,
    };
    chain.extend(kc);
    chain.extend(vc);
    Some(Match { q, k, v, rope, mask, scale, softcap, queries: sq, chain })
}

/// The `[B, KV, M, D]` tensor whose heads `x` (`[B, H, M, D]`) reads, with the ops of its
/// grouped-query expansion, consumers first; `x` itself when it is not one.
fn heads(m: &Module, x: Value, h: u64) -> Option<(Value, Vec<Op>)> {
    let xs = shape(m, x)?;
    if xs.len() != 4 || xs[1] != h {
        return None;
    }
    let expansion = || {
        let r2 = m.defining_op(x).filter(|&o| T::Reshape.is(m.op(o)))?;
        let bc = m.defining_op(m.op(r2).operands[0]).filter(|&o| T::Broadcast.is(m.op(o)))?;
        let r1 = m.defining_op(m.op(bc).operands[0]).filter(|&o| T::Reshape.is(m.op(o)))?;
        let src = m.op(r1).operands[0];
        let ss = shape(m, src)?;
        let [b, kv, keys, d] = ss[..] else { return None };
        let g = h.checked_div(kv)?;
        let ok = kv * g == h
            && shape(m, m.op(r1).results[0])? == [b, kv, 1, keys, d]
            && shape(m, m.op(bc).results[0])? == [b, kv, g, keys, d]
            && xs == [b, h, keys, d];
        ok.then_some((src, vec![r2, bc, r1]))
    };
    Some(expansion().unwrap_or((x, Vec::new())))
}

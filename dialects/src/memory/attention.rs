//! The attention kind of `memory.launch`: `tensor.attention` as one launch.
//!
//! A launch with an `attention = #memory.attention<...>` attribute computes, for every query
//! point `p` (the leading parallel dimensions), the attention of query `p` over the key
//! positions `j` (the last dimension, iterator `"key"`), one output element per head-dimension
//! index `e` (the last parallel dimension):
//!
//! ```text
//! domain  = [p..., D, M]        iterators = ["parallel"..., "parallel", "key"]
//! operands: q, k, v, [cos, sin if rope], [the symbols' i32 buffers], out
//! q'(p, e)  = rope ? q(p, e)·cos(p, e) + (e < D/2 ? -q(p, e + D/2) : q(p, e - D/2))·sin(p, e) : q(p, e)
//! s(p, j)   = Σ_e q'(p, e)·k(p, e, j)                      (e in order, f32)
//! s(p, j)   = softcap > 0 ? softcap·tanh(s·scale·(1/softcap)) : s·scale
//! s(p, j)   = -inf unless j ≤ last(p) (and j + window > last(p) with a window)   (with `causal`)
//! w(p, j)   = exp(s(p, j) - max_j s) / Σ_j exp(s(p, j) - max_j s)               (a row softmax)
//! out(p, e) = Σ_j w(p, j)·v(p, e, j)                       (j in order)
//! ```
//!
//! Every operand is read at its map over the whole domain; `q`, `cos`, `sin` and the output
//! map must not use the key dimension (`q(p, e)` is the map at any `j`), and `q`'s map is read
//! at every `e` of the head dimension for each score. `last` is the one result of the `causal`
//! map (over the domain and the launch's symbols: `d2 + s0` for queries at positions `pos + i`
//! of a KV cache); without `causal` every key is seen.
//!
//! The definition is executable: [`Kernel::attention_parts`] writes it as three ordinary
//! launches over two scratch buffers (the scores as a reduction with an epilogue, the weights as
//! a row kernel, the output as a reduction), which the reference executor and the Cranelift JIT
//! run, so both compute the same values bit for bit, and which the verifier and the bounds prover
//! check. The OpenCL writer emits one kernel instead (online softmax over tiles of keys,
//! reading only the positions the mask keeps), equal up to the order of its sums.

use std::collections::HashMap;

use fbc_index::{BinOp, Expr, IndexMap};
use fbc_ir::attr::DialectAttr;
use fbc_ir::{Attr, ElemType};

use super::kernel::{kerr, uses_var, Combine, Iter, Kernel, KernelError, MemType, Scalar, Stat};
use super::kernel::{ScalarBin as B, ScalarUn as U};

/// The parameters of an attention launch (see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct Attention {
    /// The factor of the scores.
    pub scale: f64,
    /// Gemma 2's soft cap `c`: scores become `c·tanh(s / c)`; 0: none.
    pub softcap: f64,
    /// Whether operands 3 and 4 are the RoPE tables `cos`, `sin`, applied to `q`.
    pub rope: bool,
    /// The `causal` map: the last key position each query point sees.
    pub last: Option<IndexMap>,
    /// With `last`: positions a query sees back, itself included; 0: every earlier one.
    pub window: u64,
}

/// The operand roles, in order.
pub const Q: usize = 0;
pub const K: usize = 1;
pub const V: usize = 2;
pub const COS: usize = 3;
pub const SIN: usize = 4;

impl Attention {
    /// The attribute `#memory.attention<scale = .., softcap = .., rope = .., window = ..>`.
    pub fn to_attr(&self) -> Attr {
        Attr::Dialect(Box::new(DialectAttr {
            dialect: "memory".into(),
            name: "attention".into(),
            params: vec![
                (Some("scale".into()), Attr::Float(self.scale)),
                (Some("softcap".into()), Attr::Float(self.softcap)),
                (Some("rope".into()), Attr::Bool(self.rope)),
                (Some("window".into()), Attr::Int(self.window as i64)),
            ],
        }))
    }

    /// Reads the `attention` attribute and the optional `causal` map.
    pub fn from_attrs(a: &Attr, causal: Option<&Attr>) -> Result<Attention, KernelError> {
        let form =
            "`attention` must be #memory.attention<scale = F, softcap = F, rope = B, window = N>";
        let Attr::Dialect(d) = a else {
            return kerr("attention", format!("{form}, found `{a}`"));
        };
        if d.dialect != "memory" || d.name != "attention" {
            return kerr("attention", format!("{form}, found `{a}`"));
        }
        for (k, _) in &d.params {
            if !matches!(k.as_deref(), Some("scale" | "softcap" | "rope" | "window")) {
                return kerr(
                    "attention",
                    format!("{form}; `{}` is not one of its keys", k.as_deref().unwrap_or("")),
                );
            }
        }
        let float = |k: &str| match d.param(k) {
            Some(Attr::Float(f)) if f.is_finite() => Ok(*f),
            Some(Attr::Int(i)) => Ok(*i as f64),
            None => Ok(0.0),
            Some(v) => kerr(
                "attention",
                format!("`{k}` of `attention` must be a finite float, found `{v}`"),
            ),
        };
        let scale = float("scale")?;
        let softcap = float("softcap")?;
        if softcap < 0.0 {
            return kerr(
                "attention",
                format!("`softcap` of `attention` must be ≥ 0, found {softcap}"),
            );
        }
        let rope = match d.param("rope") {
            None => false,
            Some(Attr::Bool(b)) => *b,
            Some(v) => {
                return kerr(
                    "attention",
                    format!("`rope` of `attention` must be a boolean, found `{v}`"),
                )
            }
        };
        let window = match d.param("window") {
            None => 0,
            Some(Attr::Int(w)) if *w >= 0 => *w as u64,
            Some(v) => {
                return kerr(
                    "attention",
                    format!("`window` of `attention` must be an integer ≥ 0, found `{v}`"),
                )
            }
        };
        let last = match causal {
            None => None,
            Some(Attr::Map(m)) if m.results.len() == 1 => Some(m.clone()),
            Some(v) => {
                return kerr("causal", format!("`causal` must be an index map with one result (the last key position a query sees), found `{v}`"))
            }
        };
        if window > 0 && last.is_none() {
            return kerr(
                "attention",
                "a `window` needs `causal`: it counts back from the last key position",
            );
        }
        Ok(Attention { scale, softcap, rope, last, window })
    }

    /// Number of inputs before the symbols' buffers: q, k, v and with RoPE cos, sin.
    pub fn tensors(&self) -> usize {
        if self.rope {
            5
        } else {
            3
        }
    }
}

/// The three launches an attention launch is defined by, and the scratch they need.
#[derive(Debug, Clone, PartialEq)]
pub struct Parts {
    /// Scratch buffers numbered after the launch's operands: the scores, then the weights, each
    /// `P·M` `f32` (`P` query points, `M` keys).
    pub scratch: Vec<MemType>,
    /// Each step's kernel and its operands, as indices into the launch's operands followed by
    /// the scratch buffers.
    pub steps: Vec<(Kernel, Vec<usize>)>,
}

impl Kernel {
    /// The attention parameters and the query dimensions `n` (the head dimension is `d{n}`,
    /// the key dimension `d{n+1}`); `None` for another kind of launch.
    pub fn attention_dims(&self) -> Option<(&Attention, usize)> {
        let a = self.attention.as_ref()?;
        Some((a, self.domain.len().checked_sub(2)?))
    }

    /// The definition of an attention launch as three ordinary launches (module docs). The
    /// kernel must have the attention form that [`Kernel::from_attrs`] checks.
    pub fn attention_parts(&self) -> Result<Parts, KernelError> {
        let Some((a, n)) = self.attention_dims() else {
            return kerr("attention", "not an attention launch");
        };
        let (hd, keys) = (self.domain[n], self.domain[n + 1]);
        let points: u64 = self.domain[..n].iter().product();
        let ops = self.maps.len();
        let out = ops - 1;
        let (scores, weights) = (ops, ops + 1);
        let rows = points.checked_mul(keys).ok_or_else(|| KernelError {
            attr: "domain",
            message: "the attention's scores have more elements than fit in 64 bits".into(),
        })?;
        let scratch = vec![MemType::buffer(rows, ElemType::F32); 2];
        let names = |k: usize| (0..k).map(fbc_index::dim_name).collect::<Vec<String>>();
        let var = |k: usize| Expr::Var(fbc_index::dim_name(k));
        let map =
            |dims: Vec<String>, e: Expr| IndexMap { dims, symbols: Vec::new(), results: vec![e] };
        // Row-major offset of (p, j) in a [P, M] scratch buffer, over dimensions `p` = d0..
        let flat = |j: Expr| {
            let mut e = Expr::Const(0);
            for i in 0..n {
                e = add(mul(e, Expr::Const(self.domain[i] as i64)), var(i));
            }
            add(mul(e, Expr::Const(keys as i64)), j)
        };
        // An operand's map with its head and key dimensions renamed.
        let rename = |m: &IndexMap, dims: &[String], e: Expr, j: Expr| {
            let mut to: HashMap<String, Expr> = HashMap::new();
            for i in 0..n {
                to.insert(m.dims[i].clone(), var(i));
            }
            to.insert(m.dims[n].clone(), e);
            to.insert(m.dims[n + 1].clone(), j);
            IndexMap {
                dims: dims.to_vec(),
                symbols: m.symbols.clone(),
                results: m.results.iter().map(|r| r.substitute_all(&to)).collect(),
            }
        };
        // The launch's symbols, for a step whose operands are `ops` (indices as above).
        let symbols_of = |ops: &[usize]| {
            self.symbols
                .iter()
                .map(|s| super::kernel::Symbol {
                    operand: ops.iter().position(|&o| o == s.operand).unwrap_or(usize::MAX),
                    ..*s
                })
                .collect::<Vec<_>>()
        };
        let sym_ops: Vec<usize> = (a.tensors()..out).collect();
        let base = |name: &str| Kernel {
            name: format!("{}_{name}", self.name),
            source: self.source.clone(),
            domain: Vec::new(),
            iterators: Vec::new(),
            maps: Vec::new(),
            body: Scalar::Int(0),
            combine: None,
            epilogue: None,
            guard: None,
            stats: Vec::new(),
            symbols: Vec::new(),
            attention: None,
            split: None,
        };

        // 1. Scores over (p, j | e): the dot product, then scale, cap and mask per (p, j).
        let dims1 = names(n + 2);
        let (j1, e1) = (var(n), var(n + 1));
        let mut s1 = base("scores");
        s1.domain = [&self.domain[..n], &[keys, hd]].concat();
        s1.iterators = [vec![Iter::Parallel; n + 1], vec![Iter::Reduction]].concat();
        let mut operands = vec![Q, K];
        s1.maps.push(rename(&self.maps[Q], &dims1, e1.clone(), j1.clone()));
        s1.maps.push(rename(&self.maps[K], &dims1, e1.clone(), j1.clone()));
        let mut q = Scalar::In(0);
        if a.rope {
            let half = (hd / 2) as i64;
            let partner = Expr::Bin(
                BinOp::Mod,
                Box::new(add(e1.clone(), Expr::Const(half))),
                Box::new(Expr::Const(hd as i64)),
            );
            s1.maps.push(rename(&self.maps[Q], &dims1, partner, j1.clone()));
            s1.maps.push(rename(&self.maps[COS], &dims1, e1.clone(), j1.clone()));
            s1.maps.push(rename(&self.maps[SIN], &dims1, e1.clone(), j1.clone()));
            operands.extend([Q, COS, SIN]);
            let first_half = bin(B::Lt, Scalar::Dim(n + 1), Scalar::Int(half));
            let rotated = Scalar::Select(
                Box::new(first_half),
                Box::new(Scalar::Un(U::Neg, Box::new(Scalar::In(2)))),
                Box::new(Scalar::In(2)),
            );
            q = bin(
                B::Add,
                bin(B::Mul, Scalar::In(0), Scalar::In(3)),
                bin(B::Mul, rotated, Scalar::In(4)),
            );
        }
        for &o in &sym_ops {
            s1.maps.push(map(dims1.clone(), Expr::Const(0)));
            operands.push(o);
        }
        s1.maps.push(map(dims1.clone(), flat(j1.clone())));
        operands.push(scores);
        s1.body = bin(B::Mul, q, Scalar::In(1));
        s1.combine = Some(Combine::Add);
        let scaled = bin(B::Mul, Scalar::Acc, Scalar::Float(a.scale));
        // The soft cap as the graph it replaces computes it: times 1/c, tanh, times c.
        let mut score = if a.softcap > 0.0 {
            let t = bin(B::Mul, scaled, Scalar::Float(1.0 / a.softcap));
            bin(B::Mul, Scalar::Float(a.softcap), Scalar::Un(U::Tanh, Box::new(t)))
        } else {
            scaled
        };
        if let Some(last) = &a.last {
            let loads: Vec<Scalar> = self
                .symbols
                .iter()
                .map(|s| {
                    let k = operands.iter().position(|&o| o == s.operand).unwrap_or(0);
                    Scalar::Load(k, Box::new(Scalar::Int(0)))
                })
                .collect();
            // The key dimension of the scores' domain is d{n}; the causal map's is d{n+1}.
            let mut dims_at: Vec<Scalar> = (0..n).map(Scalar::Dim).collect();
            dims_at.push(Scalar::Int(0));
            dims_at.push(Scalar::Dim(n));
            let at = scalar_of(&last.results[0], &last.dims, &dims_at, &last.symbols, &loads)
                .ok_or_else(|| KernelError {
                    attr: "causal",
                    message: format!("the `causal` map `{last}` uses an operation attention cannot evaluate (use +, -, *, floordiv, mod)"),
                })?;
            let j = Scalar::Dim(n);
            let mut seen = bin(B::Le, j.clone(), at.clone());
            if a.window > 0 {
                let w = Scalar::Int(a.window as i64);
                seen = bin(B::And, seen, bin(B::Gt, bin(B::Add, j, w), at));
            }
            let ninf = Scalar::Un(U::Neg, Box::new(Scalar::Float(f64::INFINITY)));
            score = Scalar::Select(Box::new(seen), Box::new(score), Box::new(ninf));
        }
        s1.epilogue = Some(score);
        s1.symbols = symbols_of(&operands);

        // 2. Weights: the softmax of each row of scores.
        let dims2 = names(n + 1);
        let mut s2 = base("weights");
        s2.domain = [&self.domain[..n], &[keys]].concat();
        s2.iterators = [vec![Iter::Parallel; n], vec![Iter::Row]].concat();
        s2.maps = vec![map(dims2.clone(), flat(var(n))), map(dims2, flat(var(n)))];
        s2.stats = vec![
            Stat { combine: Combine::Max, body: Scalar::In(0), epilogue: None },
            Stat {
                combine: Combine::Add,
                body: Scalar::Un(U::Exp, Box::new(bin(B::Sub, Scalar::In(0), Scalar::Stat(0)))),
                epilogue: None,
            },
        ];
        s2.body = bin(
            B::Div,
            Scalar::Un(U::Exp, Box::new(bin(B::Sub, Scalar::In(0), Scalar::Stat(0)))),
            Scalar::Stat(1),
        );

        // 3. Output over (p, e | j): the weighted sum of values. Into an image (a map of three
        // results), over (p, t, c | j), `e = 4·t + c`: a kernel writes an image's texels with
        // their channel its last parallel dimension.
        let image = self.maps[out].results.len() == 3;
        let texels = if image { vec![hd / 4, 4] } else { vec![hd] };
        let par = n + texels.len();
        let dims3 = names(par + 1);
        let mut s3 = base("output");
        s3.domain = [&self.domain[..n], &texels, &[keys]].concat();
        s3.iterators = [vec![Iter::Parallel; par], vec![Iter::Reduction]].concat();
        let e3 = if image { add(mul(var(n), Expr::Const(4)), var(n + 1)) } else { var(n) };
        let j3 = var(par);
        let mut out3 = rename(&self.maps[out], &dims3, e3.clone(), j3.clone());
        if image {
            // `(4·t + c) mod 4` is `c`, `(4·t + c) floordiv 4` is `t`: the channel `c`.
            let mut ranges = fbc_index::Ranges::new();
            for (d, &x) in dims3.iter().zip(&s3.domain) {
                let _ = ranges.insert(d.clone(), 0, x as i64 - 1);
            }
            for r in &mut out3.results {
                *r = fbc_index::presimplify(r, &ranges);
            }
        }
        s3.maps =
            vec![map(dims3.clone(), flat(j3.clone())), rename(&self.maps[V], &dims3, e3, j3), out3];
        s3.body = bin(B::Mul, Scalar::In(0), Scalar::In(1));
        s3.combine = Some(Combine::Add);
        // The symbols' buffers, so that maps of `v` and the output may use them.
        let mut ops3 = vec![weights, V];
        for &o in &sym_ops {
            s3.maps.insert(s3.maps.len() - 1, map(dims3.clone(), Expr::Const(0)));
            ops3.push(o);
        }
        ops3.push(out);
        s3.symbols = symbols_of(&ops3);
        Ok(Parts { scratch, steps: vec![(s1, operands), (s2, vec![scores, weights]), (s3, ops3)] })
    }
}

fn add(a: Expr, b: Expr) -> Expr {
    Expr::Bin(BinOp::Add, Box::new(a), Box::new(b))
}

fn mul(a: Expr, b: Expr) -> Expr {
    Expr::Bin(BinOp::Mul, Box::new(a), Box::new(b))
}

fn bin(op: B, a: Scalar, b: Scalar) -> Scalar {
    Scalar::Bin(op, Box::new(a), Box::new(b))
}

/// An index expression as a scalar payload: dimension `dims[k]` becomes `at[k]`, symbol
/// `syms[k]` becomes `loads[k]`; `None` for an operation payloads do not have.
fn scalar_of(
    e: &Expr,
    dims: &[String],
    at: &[Scalar],
    syms: &[String],
    loads: &[Scalar],
) -> Option<Scalar> {
    let go = |x: &Expr| scalar_of(x, dims, at, syms, loads);
    Some(match e {
        Expr::Const(c) => Scalar::Int(*c),
        Expr::Var(v) => match dims.iter().position(|d| d == v) {
            Some(k) => at.get(k)?.clone(),
            None => loads.get(syms.iter().position(|s| s == v)?)?.clone(),
        },
        Expr::Neg(a) => Scalar::Un(U::Neg, Box::new(go(a)?)),
        Expr::Bin(op, a, b) => {
            let op = match op {
                BinOp::Add => B::Add,
                BinOp::Sub => B::Sub,
                BinOp::Mul => B::Mul,
                BinOp::FloorDiv => B::Div,
                BinOp::Mod => B::Rem,
                BinOp::Min => B::Min,
                BinOp::Max => B::Max,
                _ => return None,
            };
            bin(op, go(a)?, go(b)?)
        }
    })
}

impl Kernel {
    /// [`Kernel::check`] of an attention launch: the operands the parameters call for, `f32`
    /// values (the output a buffer, or an image of whole texels of the head), maps of `q`,
    /// `cos`, `sin` and the output free of the key dimension, the `causal` map's form, and
    /// each of the three steps' own checks.
    pub(crate) fn check_attention(&self, types: &[MemType]) -> Result<(), KernelError> {
        let Some((a, n)) = self.attention_dims() else {
            return kerr("attention", "not an attention launch");
        };
        let inputs = types.len().saturating_sub(1);
        let tensors = a.tensors();
        let roles = if a.rope { "q, k, v, cos, sin" } else { "q, k, v" };
        if inputs < tensors {
            return kerr(
                "maps",
                format!("an attention launch reads {roles} (then the symbols' buffers): {tensors} inputs at least, found {inputs}"),
            );
        }
        for o in tensors..inputs {
            if !self.symbols.iter().any(|s| s.operand == o) {
                return kerr(
                    "symbols",
                    format!("operand {o} of an attention launch comes after {roles}, so it must be a symbol's buffer; no symbol reads it"),
                );
            }
        }
        if self.symbols.iter().any(|s| s.operand < tensors) {
            return kerr("symbols", format!("a symbol of an attention launch reads one of {roles}; symbols read the buffers after them"));
        }
        let out = inputs;
        for (i, t) in types.iter().enumerate().take(tensors) {
            if t.value_elem() != ElemType::F32 {
                return kerr(
                    "maps",
                    format!("operand {i} of an attention launch must hold f32 values, found {t}"),
                );
            }
        }
        if types[out].elem != ElemType::F32 {
            return kerr(
                "maps",
                format!(
                    "the output of an attention launch must hold f32 values, found {}",
                    types[out]
                ),
            );
        }
        let hd = self.domain[n];
        if types[out].is_image() && (hd % 4 != 0 || self.maps[out].results.len() != 3) {
            return kerr(
                "domain",
                format!("an attention launch writing an image writes whole texels of the head dimension (d{n}, extent {hd}): it must be a multiple of 4"),
            );
        }
        if a.rope && hd % 2 != 0 {
            return kerr(
                "domain",
                format!("with rope, the head dimension (d{n}, extent {hd}) must be even"),
            );
        }
        let mut free = vec![Q, out];
        if a.rope {
            free.extend([COS, SIN]);
        }
        for i in free {
            let m = &self.maps[i];
            let key = &m.dims[n + 1];
            if m.results.iter().any(|r| uses_var(r, key)) {
                return kerr("maps", format!("map {i} of an attention launch uses the key dimension `{key}`; only the maps of k and v may"));
            }
        }
        if let Some(last) = &a.last {
            if last.dims.len() != self.domain.len()
                || (!last.symbols.is_empty() && last.symbols.len() != self.symbols.len())
            {
                return kerr("causal", format!("the `causal` map must take the {} domain dimensions and the launch's {} symbols, found {last}", self.domain.len(), self.symbols.len()));
            }
            if last
                .results
                .iter()
                .any(|r| uses_var(r, &last.dims[n]) || uses_var(r, &last.dims[n + 1]))
            {
                return kerr("causal", format!("the `causal` map gives one position per query point; it must not use the head or key dimension, found {last}"));
            }
        }
        let parts = self.attention_parts()?;
        let all: Vec<MemType> =
            types.iter().copied().chain(parts.scratch.iter().copied()).collect();
        for (k, ops) in &parts.steps {
            let t: Vec<MemType> = ops.iter().map(|&o| all[o]).collect();
            k.check(&t).map_err(|e| KernelError {
                attr: e.attr,
                message: format!("step `{}` of the attention: {}", k.name, e.message),
            })?;
        }
        Ok(())
    }

    /// [`Kernel::bounds`] of an attention launch: each operand's worst answer over the three
    /// steps, and their first violation, named by the launch's operand.
    pub(crate) fn attention_bounds(&self, types: &[MemType]) -> super::bounds::LaunchBounds {
        use super::bounds::{Bound, LaunchBounds};
        let n = types.len();
        let mut lb = LaunchBounds {
            maps: vec![Bound::Proven; n],
            guard: Bound::Proven,
            loads: Vec::new(),
            violation: None,
        };
        let Ok(parts) = self.attention_parts() else {
            return lb;
        };
        let all: Vec<MemType> =
            types.iter().copied().chain(parts.scratch.iter().copied()).collect();
        let n_q = self.domain.len().saturating_sub(2);
        for (step, (k, ops)) in parts.steps.iter().enumerate() {
            let t: Vec<MemType> = ops.iter().map(|&o| all[o]).collect();
            let mut b = k.bounds(&t);
            // A step's point in the launch's domain (p.., e, j): the scores iterate (p.., j, e),
            // the weights (p.., j).
            if let Some(v) = b.violation.as_mut() {
                let p = &mut v.point;
                match step {
                    0 if p.len() == n_q + 2 => p.swap(n_q, n_q + 1),
                    1 if p.len() == n_q + 1 => p.insert(n_q, 0),
                    _ => {}
                }
            }
            for (i, m) in b.maps.into_iter().enumerate() {
                if let Some(&o) = ops.get(i).filter(|&&o| o < n) {
                    let worse = !m.is_proven() && lb.maps[o].is_proven();
                    if worse || matches!(m, Bound::Violated { .. }) {
                        lb.maps[o] = m;
                    }
                }
            }
            if lb.violation.is_none() {
                lb.violation = b.violation.map(|mut v| {
                    v.operand = v.operand.and_then(|i| ops.get(i).copied()).filter(|&o| o < n);
                    v
                });
            }
        }
        lb
    }
}

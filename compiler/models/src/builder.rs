//! A small graph recorder for the generators: ops are recorded with their operands, attributes
//! and inferred result type, then materialised into one [`fbc_ir::Module`] function.
//!
//! Why record first and materialise later: `Module::add_func` creates a function's arguments up
//! front, but a generator discovers its weights layer by layer. Recording lets each model be
//! written in the order of its forward computation and still give the function its full argument
//! list at once.
//!
//! Result types come from the op's own `infer` function (the one the verifier runs), so a shape
//! mistake in a generator is reported at the op that makes it, with the dialect's message, instead
//! of as a wall of verifier errors at the end.

use fbc_dialects::kind::{FuncOp, TensorOp};
use fbc_ir::{
    Attr, ElemType, FuncId, Module, Op, OpDef, OpRegistry, OpView, Span, TensorType, Type,
};

/// A value of the graph being recorded: a function argument or an op result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct V(u32);

#[derive(Debug)]
struct ValInfo {
    ty: TensorType,
}

#[derive(Debug)]
struct Node {
    def: &'static OpDef,
    operands: Vec<V>,
    attrs: Vec<(String, Attr)>,
    name: String,
    result: V,
}

/// Records one function: its arguments (in order of declaration) and its ops.
#[derive(Debug)]
pub struct Graph<'r> {
    ops: &'r OpRegistry,
    /// An empty module for the op views that `infer` functions read; the tensor ops only look at
    /// operand types and attributes.
    scratch: Module,
    vals: Vec<ValInfo>,
    args: Vec<(String, V)>,
    nodes: Vec<Node>,
}

/// `[1, 2]` as an integer-array attribute.
pub fn ints(xs: &[u64]) -> Attr {
    // Dimensions here are bounded by the argument checks (far below i64::MAX); saturate rather
    // than wrap if that ever changed, so the verifier reports the mistake.
    Attr::Array(xs.iter().map(|&x| Attr::Int(i64::try_from(x).unwrap_or(i64::MAX))).collect())
}

fn attr(name: &str, value: Attr) -> (String, Attr) {
    (name.to_string(), value)
}

impl<'r> Graph<'r> {
    pub fn new(ops: &'r OpRegistry) -> Graph<'r> {
        Graph {
            ops,
            scratch: Module::new(None),
            vals: Vec::new(),
            args: Vec::new(),
            nodes: Vec::new(),
        }
    }

    /// Declares a function argument named `name` of type `tensor<shape x elem>`.
    pub fn arg(&mut self, name: &str, shape: &[u64], elem: ElemType) -> V {
        let v = V(self.vals.len() as u32);
        self.vals.push(ValInfo { ty: TensorType::new(shape, elem) });
        self.args.push((name.to_string(), v));
        v
    }

    /// An f32 argument (weights, masks, tables).
    pub fn weight(&mut self, name: &str, shape: &[u64]) -> V {
        self.arg(name, shape, ElemType::F32)
    }

    /// Moves the arguments whose names satisfy `last` after the others, keeping each group's
    /// order (an inference function's KV caches come after its weights).
    pub fn args_last(&mut self, last: impl Fn(&str) -> bool) {
        self.args.sort_by_key(|(name, _)| last(name));
    }

    pub fn ty(&self, v: V) -> &TensorType {
        &self.vals[v.0 as usize].ty
    }

    pub fn shape(&self, v: V) -> &[u64] {
        &self.vals[v.0 as usize].ty.shape
    }

    /// Records a `kind` op on `operands`; its single result is named `name` and typed by the
    /// op's `infer` function.
    pub fn op(
        &mut self,
        name: &str,
        kind: TensorOp,
        operands: &[V],
        attrs: Vec<(String, Attr)>,
    ) -> Result<V, String> {
        let op = kind.name();
        let def = self.ops.get(op).ok_or_else(|| format!("op `{op}` is not registered"))?;
        let operand_types: Vec<Type> =
            operands.iter().map(|&v| Type::Tensor(self.ty(v).clone())).collect();
        let view = OpView {
            module: &self.scratch,
            // An index past the scratch module's arena: the op does not exist yet.
            op: Op(u32::MAX),
            operand_types: &operand_types,
            attrs: &attrs,
            func: FuncId(0),
        };
        let types = (def.infer)(&view).map_err(|e| {
            let mut msg = format!("{op} (%{name}): {}", e.message);
            for n in &e.notes {
                msg.push_str(&format!("\n  note: {n}"));
            }
            msg
        })?;
        let ty = match types.as_slice() {
            [Type::Tensor(t)] => t.clone(),
            _ => return Err(format!("{op} (%{name}): expected one tensor result")),
        };
        let result = V(self.vals.len() as u32);
        self.vals.push(ValInfo { ty });
        self.nodes.push(Node {
            def,
            operands: operands.to_vec(),
            attrs,
            name: name.to_string(),
            result,
        });
        Ok(result)
    }

    // ----- one helper per op the generators use -----

    pub fn matmul(&mut self, name: &str, a: V, b: V) -> Result<V, String> {
        self.op(name, TensorOp::Matmul, &[a, b], vec![])
    }

    /// `aᵀ · b` (the last two dimensions of `a` swapped).
    pub fn matmul_at(&mut self, name: &str, a: V, b: V) -> Result<V, String> {
        self.op(name, TensorOp::Matmul, &[a, b], vec![attr("transpose_a", Attr::Bool(true))])
    }

    /// `a · bᵀ` (the last two dimensions of `b` swapped).
    pub fn matmul_bt(&mut self, name: &str, a: V, b: V) -> Result<V, String> {
        self.op(name, TensorOp::Matmul, &[a, b], vec![attr("transpose_b", Attr::Bool(true))])
    }

    pub fn add(&mut self, name: &str, a: V, b: V) -> Result<V, String> {
        self.op(name, TensorOp::Add, &[a, b], vec![])
    }

    pub fn mul(&mut self, name: &str, a: V, b: V) -> Result<V, String> {
        self.op(name, TensorOp::Mul, &[a, b], vec![])
    }

    pub fn scale(&mut self, name: &str, x: V, factor: f64) -> Result<V, String> {
        self.op(name, TensorOp::Scale, &[x], vec![attr("factor", Attr::Float(factor))])
    }

    /// A unary elementwise op (`silu`, `tanh`, `relu`, ...).
    pub fn unary(&mut self, name: &str, op: TensorOp, x: V) -> Result<V, String> {
        self.op(name, op, &[x], vec![])
    }

    pub fn gelu(&mut self, name: &str, x: V, approximate: &str) -> Result<V, String> {
        let attrs = vec![attr("approximate", Attr::Str(approximate.to_string()))];
        self.op(name, TensorOp::Gelu, &[x], attrs)
    }

    pub fn reshape(&mut self, name: &str, x: V, shape: &[u64]) -> Result<V, String> {
        self.op(name, TensorOp::Reshape, &[x], vec![attr("shape", ints(shape))])
    }

    pub fn transpose(&mut self, name: &str, x: V, perm: &[u64]) -> Result<V, String> {
        self.op(name, TensorOp::Transpose, &[x], vec![attr("perm", ints(perm))])
    }

    pub fn broadcast(&mut self, name: &str, x: V, shape: &[u64]) -> Result<V, String> {
        self.op(name, TensorOp::Broadcast, &[x], vec![attr("shape", ints(shape))])
    }

    pub fn slice(&mut self, name: &str, x: V, start: &[u64], end: &[u64]) -> Result<V, String> {
        let attrs = vec![attr("start", ints(start)), attr("end", ints(end))];
        self.op(name, TensorOp::Slice, &[x], attrs)
    }

    pub fn concat(&mut self, name: &str, xs: &[V], axis: i64) -> Result<V, String> {
        self.op(name, TensorOp::Concat, xs, vec![attr("axis", Attr::Int(axis))])
    }

    pub fn softmax(&mut self, name: &str, x: V) -> Result<V, String> {
        self.op(name, TensorOp::Softmax, &[x], vec![attr("axis", Attr::Int(-1))])
    }

    pub fn rmsnorm(&mut self, name: &str, x: V, gamma: V, eps: f64) -> Result<V, String> {
        self.op(name, TensorOp::Rmsnorm, &[x, gamma], vec![attr("eps", Attr::Float(eps))])
    }

    pub fn layernorm(
        &mut self,
        name: &str,
        x: V,
        gamma: V,
        beta: V,
        eps: f64,
    ) -> Result<V, String> {
        let attrs = vec![attr("axis", Attr::Int(-1)), attr("eps", Attr::Float(eps))];
        self.op(name, TensorOp::Layernorm, &[x, gamma, beta], attrs)
    }

    pub fn rope(&mut self, name: &str, x: V, cos: V, sin: V) -> Result<V, String> {
        self.op(name, TensorOp::Rope, &[x, cos, sin], vec![])
    }

    /// The additive causal mask `[s, keys]` of queries at positions `pos + i` (`window` > 0:
    /// a sliding window of that many positions).
    pub fn causal_mask(
        &mut self,
        name: &str,
        pos: V,
        s: u64,
        keys: u64,
        window: u64,
    ) -> Result<V, String> {
        let mut attrs = vec![attr("shape", Attr::ints([s as i64, keys as i64]))];
        if window > 0 {
            attrs.push(attr("window", Attr::Int(window as i64)));
        }
        self.op(name, TensorOp::CausalMask, &[pos], attrs)
    }

    pub fn embedding(&mut self, name: &str, table: V, ids: V) -> Result<V, String> {
        self.op(name, TensorOp::Embedding, &[table, ids], vec![])
    }

    /// `dest` with `update` written along `axis` from the run-time `offset` on.
    pub fn update_slice(
        &mut self,
        name: &str,
        dest: V,
        update: V,
        offset: V,
        axis: i64,
    ) -> Result<V, String> {
        let attrs = vec![attr("axis", Attr::Int(axis))];
        self.op(name, TensorOp::UpdateSlice, &[dest, update, offset], attrs)
    }

    /// `conv2d(x, w) (+ bias)` with stride `stride` and padding `[p, p]` on every side.
    pub fn conv2d(
        &mut self,
        name: &str,
        (x, w, bias): (V, V, Option<V>),
        stride: u64,
        pad: u64,
    ) -> Result<V, String> {
        let mut operands = vec![x, w];
        operands.extend(bias);
        let mut attrs = vec![attr("padding", ints(&[pad, pad]))];
        if stride != 1 {
            attrs.push(attr("stride", ints(&[stride, stride])));
        }
        self.op(name, TensorOp::Conv2d, &operands, attrs)
    }

    pub fn group_norm(
        &mut self,
        name: &str,
        (x, gamma, beta): (V, V, V),
        groups: u64,
        eps: f64,
    ) -> Result<V, String> {
        let attrs = vec![
            attr("groups", Attr::Int(i64::try_from(groups).unwrap_or(i64::MAX))),
            attr("eps", Attr::Float(eps)),
        ];
        self.op(name, TensorOp::GroupNorm, &[x, gamma, beta], attrs)
    }

    /// Nearest-neighbour upsampling by 2 of `[N, C, H, W]`.
    pub fn upsample2(&mut self, name: &str, x: V) -> Result<V, String> {
        self.op(name, TensorOp::Upsample, &[x], vec![attr("scale", Attr::Int(2))])
    }

    pub fn sub(&mut self, name: &str, a: V, b: V) -> Result<V, String> {
        self.op(name, TensorOp::Sub, &[a, b], vec![])
    }

    /// The mean over every axis of `x`: a scalar.
    pub fn mean_all(&mut self, name: &str, x: V) -> Result<V, String> {
        let axes: Vec<u64> = (0..self.shape(x).len() as u64).collect();
        self.op(name, TensorOp::ReduceMean, &[x], vec![attr("axes", ints(&axes))])
    }

    pub fn cross_entropy(&mut self, name: &str, logits: V, labels: V) -> Result<V, String> {
        self.op(name, TensorOp::CrossEntropy, &[logits, labels], vec![])
    }

    /// A splat f32 constant of the given shape.
    pub fn constant(&mut self, name: &str, value: f64, shape: &[u64]) -> Result<V, String> {
        let attrs = vec![attr("value", Attr::Float(value)), attr("shape", ints(shape))];
        self.op(name, TensorOp::Constant, &[], attrs)
    }

    /// Builds the module: one function `func` taking the declared arguments (in declaration
    /// order) and returning `results`.
    pub fn finish(self, module_name: &str, func: &str, results: &[V]) -> Result<Module, String> {
        let mut m = Module::new(Some(module_name.to_string()));
        self.finish_into(&mut m, func, results)?;
        Ok(m)
    }

    /// Adds function `func` to `m`, taking the declared arguments (in declaration order) and
    /// returning `results`.
    pub fn finish_into(self, m: &mut Module, func: &str, results: &[V]) -> Result<(), String> {
        let ret =
            self.ops.get(FuncOp::Return.name()).ok_or("op `func.return` is not registered")?;
        let arg_types: Vec<Type> =
            self.args.iter().map(|(_, v)| Type::Tensor(self.ty(*v).clone())).collect();
        let result_types: Vec<Type> =
            results.iter().map(|&v| Type::Tensor(self.ty(v).clone())).collect();
        let f = m.add_func(func, arg_types, result_types);
        let mut map: Vec<Option<fbc_ir::Value>> = vec![None; self.vals.len()];
        let func_args = m.func(f).args.clone();
        for ((name, v), value) in self.args.iter().zip(func_args) {
            m.set_value_name(value, name.as_str());
            map[v.0 as usize] = Some(value);
        }
        let lookup = |map: &[Option<fbc_ir::Value>], v: V| {
            map[v.0 as usize].ok_or_else(|| "a value is used before it is defined".to_string())
        };
        for node in self.nodes {
            let operands =
                node.operands.iter().map(|&v| lookup(&map, v)).collect::<Result<Vec<_>, _>>()?;
            let ty = Type::Tensor(self.vals[node.result.0 as usize].ty.clone());
            let op = m.append_op(f, node.def, &operands, node.attrs, vec![ty], Span::default());
            let r = m.op(op).results.first().copied().ok_or("an op lost its result")?;
            m.set_value_name(r, node.name);
            map[node.result.0 as usize] = Some(r);
        }
        let outs = results.iter().map(|&v| lookup(&map, v)).collect::<Result<Vec<_>, _>>()?;
        m.append_op(f, ret, &outs, vec![], vec![], Span::default());
        Ok(())
    }
}

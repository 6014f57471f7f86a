//! The translation of an ONNX graph, node by node, into a recorded fbc graph
//! (`fbc_models::builder::Graph`, whose op results are typed by each op's own `infer`).

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::rc::Rc;

use fbc_dialects::kind::TensorOp;
use fbc_ir::{Attr, Dense, ElemType};
use fbc_models::builder::{ints, Graph, V};

use crate::fold;
use crate::host::{fmt_shape, numel, DType, HostTensor, MAX_FOLDED_ELEMS};
use crate::proto::{attr_type, type_proto, AttributeProto, ModelProto, NodeProto};
use crate::{ImportError, Imported, Options, Output};

/// The op types `fbc import` translates (default domain; `SimplifiedLayerNormalization` also in
/// `com.microsoft`, where onnxruntime's exporters put it).
pub const SUPPORTED_OPS: &[&str] = &[
    "Add",
    "Cast",
    "Concat",
    "Constant",
    "ConstantOfShape",
    "Div",
    "Erf",
    "Exp",
    "Expand",
    "Gather",
    "Gelu",
    "Gemm",
    "Identity",
    "LayerNormalization",
    "Log",
    "LogSoftmax",
    "MatMul",
    "Max",
    "Min",
    "Mul",
    "Neg",
    "Pow",
    "Reciprocal",
    "ReduceMax",
    "ReduceMean",
    "ReduceSum",
    "Relu",
    "Reshape",
    "Shape",
    "Sigmoid",
    "SimplifiedLayerNormalization",
    "Slice",
    "Softmax",
    "Split",
    "Sqrt",
    "Squeeze",
    "Sub",
    "Tanh",
    "Transpose",
    "Unsqueeze",
    "Where",
];

/// The most elements a strided slice of a run-time tensor picks one by one.
const MAX_STRIDED: usize = 256;

/// The lowest default-domain opset read; attribute forms that changed since are handled.
const MIN_OPSET: i64 = 7;

/// A value of the ONNX graph.
#[derive(Debug, Clone)]
enum Val {
    /// Known at import time; `weight` when it is an initializer (kept as a function argument so
    /// that other weights can be bound, unless it has one element).
    Const { t: Rc<HostTensor>, weight: bool, name: String },
    /// Computed at run time by the function.
    Dyn(V),
}

struct Cx<'r> {
    g: Graph<'r>,
    vals: HashMap<String, Val>,
    /// Known values already turned into run-time values, by ONNX name.
    placed: HashMap<String, V>,
    weights: Vec<(String, HostTensor)>,
    used: HashSet<String>,
    opset: i64,
    /// Known tensors become dense constants, not arguments ([`crate::Options::inline_weights`]).
    inline_weights: bool,
}

/// A node's attributes.
struct Attrs<'a>(&'a [AttributeProto]);

impl Attrs<'_> {
    fn get(&self, name: &str) -> Option<&AttributeProto> {
        self.0.iter().find(|a| a.name == name)
    }
    fn int(&self, name: &str, default: i64) -> Result<i64, String> {
        match self.get(name) {
            None => Ok(default),
            Some(a) if a.r#type == attr_type::INT => Ok(a.i),
            Some(_) => Err(format!("attribute `{name}` must be an integer")),
        }
    }
    fn float(&self, name: &str, default: f64) -> Result<f64, String> {
        match self.get(name) {
            None => Ok(default),
            Some(a) if a.r#type == attr_type::FLOAT => Ok(f64::from(a.f)),
            Some(_) => Err(format!("attribute `{name}` must be a float")),
        }
    }
    fn ints(&self, name: &str) -> Result<Option<Vec<i64>>, String> {
        match self.get(name) {
            None => Ok(None),
            Some(a) if a.r#type == attr_type::INTS => Ok(Some(a.ints.clone())),
            Some(_) => Err(format!("attribute `{name}` must be a list of integers")),
        }
    }
    fn string(&self, name: &str, default: &str) -> Result<String, String> {
        match self.get(name) {
            None => Ok(default.to_string()),
            Some(a) if a.r#type == attr_type::STRING => Ok(String::from_utf8_lossy(&a.s).into()),
            Some(_) => Err(format!("attribute `{name}` must be a string")),
        }
    }
}

/// `axis` in `[-rank, rank)` as an index.
fn norm_axis(axis: i64, rank: usize) -> Result<usize, String> {
    let r = rank as i64;
    if axis < -r || axis >= r {
        return Err(format!("axis {axis} is out of range for rank {rank}"));
    }
    Ok(if axis < 0 { axis + r } else { axis } as usize)
}

fn u64s(xs: &[usize]) -> Vec<u64> {
    xs.iter().map(|&x| x as u64).collect()
}

/// The value of elementwise op `kind` on scalars `x` (canonicalize's folding: one table of
/// scalar semantics for the passes and the importer); NaN for an op that does not fold, which
/// callers rule out with [`folds`].
fn scalar(kind: TensorOp, x: &[f64]) -> f64 {
    fbc_transforms::canonicalize::fold(kind, x, None).unwrap_or(f64::NAN)
}

/// Whether [`scalar`] evaluates `kind` on `arity` operands.
fn folds(kind: TensorOp, arity: usize) -> bool {
    fbc_transforms::canonicalize::fold(kind, &vec![1.0; arity], None).is_some()
}

/// `values` as dimensions, each ≥ 0 (`what` names them in the error).
fn dims_of(values: &[i64], what: &str) -> Result<Vec<usize>, String> {
    values.iter().map(|&d| usize::try_from(d).map_err(|_| format!("negative {what} {d}"))).collect()
}

/// A value name the IR's lexer accepts (`%[A-Za-z0-9_$.-]+`).
fn sanitize(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || "_$.-".contains(c) { c } else { '_' })
        .collect();
    if s.is_empty() || s.chars().all(|c| c.is_ascii_digit()) {
        format!("v{s}")
    } else {
        s
    }
}

impl<'r> Cx<'r> {
    /// A fresh IR value name based on `base`.
    fn fresh(&mut self, base: &str) -> String {
        let base = sanitize(base);
        let mut name = base.clone();
        let mut k = 1;
        while !self.used.insert(name.clone()) {
            name = format!("{base}_{k}");
            k += 1;
        }
        name
    }

    fn shape(&self, v: &Val) -> Vec<usize> {
        match v {
            Val::Const { t, .. } => t.shape.clone(),
            Val::Dyn(v) => self.g.shape(*v).iter().map(|&d| d as usize).collect(),
        }
    }

    fn dtype(&self, v: &Val) -> DType {
        match v {
            Val::Const { t, .. } => t.dtype,
            Val::Dyn(v) => DType::of_elem(self.g.ty(*v).elem).unwrap_or(DType::F32),
        }
    }

    fn op(
        &mut self,
        base: &str,
        kind: TensorOp,
        xs: &[V],
        attrs: Vec<(&str, Attr)>,
    ) -> Result<V, String> {
        let name = self.fresh(base);
        let attrs = attrs.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        self.g.op(&name, kind, xs, attrs)
    }

    /// A splat constant of `shape`, element type `elem`.
    fn splat(
        &mut self,
        base: &str,
        value: f64,
        shape: &[usize],
        elem: ElemType,
    ) -> Result<V, String> {
        let attrs = vec![
            ("value", Attr::Float(value)),
            ("shape", ints(&u64s(shape))),
            ("dtype", Attr::Str(elem.name().to_string())),
        ];
        self.op(base, TensorOp::Constant, &[], attrs)
    }

    /// The run-time value of `v`: a known one becomes a constant (one element, a splat that is
    /// not a weight, or with `inline_weights` any) or a function argument holding it.
    fn rt(&mut self, v: &Val) -> Result<V, String> {
        let (t, weight, name) = match v {
            Val::Dyn(v) => return Ok(*v),
            Val::Const { t, weight, name } => (t, *weight, name),
        };
        if let Some(&p) = self.placed.get(name) {
            return Ok(p);
        }
        let elem = t.dtype.elem().ok_or_else(|| {
            format!("`{name}`: a {} tensor cannot be a run-time value in fbc", t.dtype.name())
        })?;
        let splat = if t.numel() == 1 || !weight { t.splat() } else { None };
        let p = match splat {
            Some(value) => self.splat(name, value, &t.shape, elem)?,
            None if self.inline_weights => {
                let attrs = vec![
                    ("value", Attr::Dense(Dense::from_le_bytes(t.le_bytes()))),
                    ("shape", ints(&u64s(&t.shape))),
                    ("dtype", Attr::Str(elem.name().to_string())),
                ];
                self.op(name, TensorOp::Constant, &[], attrs)?
            }
            None => {
                let arg = self.fresh(name);
                let p = self.g.arg(&arg, &u64s(&t.shape), elem);
                self.weights.push((arg, (**t).clone()));
                p
            }
        };
        self.placed.insert(name.clone(), p);
        Ok(p)
    }

    fn konst(&self, t: HostTensor, name: &str) -> Val {
        Val::Const { t: Rc::new(t), weight: false, name: name.to_string() }
    }

    /// The integer values of a known input (shapes, axes, indices).
    fn known_ints(&self, v: &Val, what: &str) -> Result<Vec<i64>, String> {
        match v {
            Val::Const { t, .. } => t
                .ints()
                .map(<[i64]>::to_vec)
                .ok_or_else(|| format!("{what} must be an integer tensor, not {}", t.dtype.name())),
            Val::Dyn(_) => Err(format!(
                "{what} must be known when the model is imported (an initializer, a Constant, or \
                 computed from them); fbc compiles static shapes"
            )),
        }
    }

    fn input(&self, n: &NodeProto, i: usize) -> Result<Option<Val>, String> {
        match n.input.get(i).map(String::as_str) {
            None | Some("") => Ok(None),
            Some(name) => self
                .vals
                .get(name)
                .cloned()
                .map(Some)
                .ok_or_else(|| format!("input `{name}` is not defined before this node")),
        }
    }

    /// An integer list that opsets before `since` give as attribute `name` and later ones as
    /// optional input `i` (axes, splits): `None` when absent.
    fn ints_arg(
        &self,
        n: &NodeProto,
        a: &Attrs<'_>,
        (i, name): (usize, &str),
        since: i64,
    ) -> Result<Option<Vec<i64>>, String> {
        if self.opset < since {
            return a.ints(name);
        }
        self.input(n, i)?.map(|v| self.known_ints(&v, &format!("the {name}"))).transpose()
    }

    fn req(&self, n: &NodeProto, i: usize) -> Result<Val, String> {
        self.input(n, i)?.ok_or_else(|| format!("input {i} is required"))
    }

    fn reshape(&mut self, base: &str, x: &Val, shape: &[usize]) -> Result<Val, String> {
        if self.shape(x) == shape {
            return Ok(x.clone());
        }
        match x {
            Val::Const { t, .. } => {
                let mut t = (**t).clone();
                t.shape = shape.to_vec();
                Ok(self.konst(t, base))
            }
            Val::Dyn(v) => {
                let name = self.fresh(base);
                Ok(Val::Dyn(self.g.reshape(&name, *v, &u64s(shape))?))
            }
        }
    }

    fn unary(&mut self, base: &str, kind: TensorOp, x: &Val) -> Result<Val, String> {
        if let Val::Const { t, .. } = x {
            if folds(kind, 1) {
                let r = fold::elementwise(&[t], t.dtype, |a| scalar(kind, a))?;
                return Ok(self.konst(r, base));
            }
        }
        let v = self.rt(x)?;
        Ok(Val::Dyn(self.op(base, kind, &[v], vec![])?))
    }

    fn binary(&mut self, base: &str, kind: TensorOp, a: &Val, b: &Val) -> Result<Val, String> {
        if let (Val::Const { t: ta, .. }, Val::Const { t: tb, .. }) = (a, b) {
            // ONNX divides integers truncating toward zero (x / 0 gives 0 here, not a trap).
            let int_div = kind == TensorOp::Div && !ta.dtype.is_float();
            let r = fold::elementwise(&[ta, tb], ta.dtype, |x| match (int_div, x) {
                (true, [_, q]) if *q == 0.0 => 0.0,
                (true, [p, q]) => (p / q).trunc(),
                _ => scalar(kind, x),
            })?;
            return Ok(self.konst(r, base));
        }
        let (va, vb) = (self.rt(a)?, self.rt(b)?);
        Ok(Val::Dyn(self.op(base, kind, &[va, vb], vec![])?))
    }

    fn reduce(
        &mut self,
        base: &str,
        kind: TensorOp,
        x: &Val,
        axes: &[usize],
        keep: bool,
    ) -> Result<Val, String> {
        let v = self.rt(x)?;
        let attrs = vec![
            ("axes", Attr::Array(axes.iter().map(|&a| Attr::Int(a as i64)).collect())),
            ("keepdim", Attr::Bool(keep)),
        ];
        Ok(Val::Dyn(self.op(base, kind, &[v], attrs)?))
    }

    /// Translates one node into the values of its outputs.
    fn node(&mut self, n: &NodeProto) -> Result<Vec<Val>, String> {
        let a = Attrs(&n.attribute);
        if let Some(r) = n.attribute.iter().find(|x| !x.ref_attr_name.is_empty()) {
            return Err(format!("attribute `{}` refers to a function's attribute", r.name));
        }
        let out = n.output.first().map_or("v", String::as_str).to_string();
        let out = out.as_str();
        let op = n.op_type.as_str();
        let one = |v: Val| Ok(vec![v]);
        match op {
            "Identity" => one(self.req(n, 0)?),
            "Neg" | "Exp" | "Log" | "Sqrt" | "Tanh" | "Sigmoid" | "Relu" | "Erf" => {
                let kind = match op {
                    "Neg" => TensorOp::Neg,
                    "Exp" => TensorOp::Exp,
                    "Log" => TensorOp::Log,
                    "Sqrt" => TensorOp::Sqrt,
                    "Tanh" => TensorOp::Tanh,
                    "Sigmoid" => TensorOp::Sigmoid,
                    "Erf" => TensorOp::Erf,
                    _ => TensorOp::Relu,
                };
                let x = self.req(n, 0)?;
                one(self.unary(out, kind, &x)?)
            }
            "Reciprocal" => {
                let x = self.req(n, 0)?;
                let one_t = HostTensor::from_f64(self.dtype(&x), vec![], std::iter::once(1.0));
                let c = self.konst(one_t, &format!("{out}.one"));
                one(self.binary(out, TensorOp::Div, &c, &x)?)
            }
            "Add" | "Sub" | "Mul" | "Div" => {
                let kind = match op {
                    "Add" => TensorOp::Add,
                    "Sub" => TensorOp::Sub,
                    "Mul" => TensorOp::Mul,
                    _ => TensorOp::Div,
                };
                let (x, y) = (self.req(n, 0)?, self.req(n, 1)?);
                one(self.binary(out, kind, &x, &y)?)
            }
            "Max" | "Min" => {
                let kind = if op == "Max" { TensorOp::Max } else { TensorOp::Min };
                let mut acc = self.req(n, 0)?;
                for i in 1..n.input.len() {
                    let y = self.req(n, i)?;
                    acc = self.binary(out, kind, &acc, &y)?;
                }
                one(acc)
            }
            "Pow" => self.pow(n, out).map(|v| vec![v]),
            "MatMul" => self.matmul(n, out).map(|v| vec![v]),
            "Gemm" => self.gemm(n, &a, out).map(|v| vec![v]),
            "Softmax" | "LogSoftmax" => {
                self.softmax(n, &a, out, op == "LogSoftmax").map(|v| vec![v])
            }
            "ReduceMean" | "ReduceSum" | "ReduceMax" => self.reduction(n, &a, out).map(|v| vec![v]),
            "LayerNormalization" | "SimplifiedLayerNormalization" => {
                self.norm(n, &a, out, op == "LayerNormalization")
            }
            "Gelu" => {
                let approx = a.string("approximate", "none")?;
                if approx != "none" && approx != "tanh" {
                    return Err(format!("approximate = `{approx}`: expected `none` or `tanh`"));
                }
                let x = self.req(n, 0)?;
                let v = self.rt(&x)?;
                let name = self.fresh(out);
                one(Val::Dyn(self.g.gelu(&name, v, &approx)?))
            }
            "Reshape" => {
                let x = self.req(n, 0)?;
                let target = if self.opset >= 5 {
                    let s = self.req(n, 1)?;
                    self.known_ints(&s, "the shape")?
                } else {
                    a.ints("shape")?.ok_or("attribute `shape` is required")?
                };
                let allowzero = a.int("allowzero", 0)? != 0;
                let shape = reshape_target(&self.shape(&x), &target, allowzero)?;
                one(self.reshape(out, &x, &shape)?)
            }
            "Transpose" => {
                let x = self.req(n, 0)?;
                let rank = self.shape(&x).len();
                let perm = match a.ints("perm")? {
                    Some(p) => {
                        p.iter().map(|&p| norm_axis(p, rank)).collect::<Result<Vec<_>, _>>()?
                    }
                    None => (0..rank).rev().collect(),
                };
                let mut seen = perm.clone();
                seen.sort_unstable();
                if seen != (0..rank).collect::<Vec<_>>() {
                    return Err(format!("perm {perm:?} is not a permutation of 0..{rank}"));
                }
                one(match &x {
                    Val::Const { t, .. } => {
                        let r = fold::transpose(t, &perm)?;
                        self.konst(r, out)
                    }
                    Val::Dyn(v) => {
                        if perm.iter().enumerate().all(|(i, &p)| i == p) {
                            x.clone()
                        } else {
                            let name = self.fresh(out);
                            Val::Dyn(self.g.transpose(&name, *v, &u64s(&perm))?)
                        }
                    }
                })
            }
            "Squeeze" | "Unsqueeze" => {
                let x = self.req(n, 0)?;
                let axes = self.ints_arg(n, &a, (1, "axes"), 13)?;
                let shape = self.shape(&x);
                let new: Vec<usize> = if op == "Squeeze" {
                    match axes {
                        None => shape.iter().copied().filter(|&d| d != 1).collect(),
                        Some(axes) => {
                            let axes = axes
                                .iter()
                                .map(|&ax| norm_axis(ax, shape.len()))
                                .collect::<Result<HashSet<_>, _>>()?;
                            if let Some(&bad) = axes.iter().find(|&&ax| shape[ax] != 1) {
                                return Err(format!(
                                    "cannot squeeze axis {bad} of size {}",
                                    shape[bad]
                                ));
                            }
                            shape
                                .iter()
                                .enumerate()
                                .filter(|(i, _)| !axes.contains(i))
                                .map(|(_, &d)| d)
                                .collect()
                        }
                    }
                } else {
                    let axes = axes.ok_or("the axes are required")?;
                    let rank = shape.len() + axes.len();
                    let axes = axes
                        .iter()
                        .map(|&ax| norm_axis(ax, rank))
                        .collect::<Result<HashSet<_>, _>>()?;
                    if axes.len() != rank - shape.len() {
                        return Err("an axis is named twice".into());
                    }
                    let mut it = shape.iter();
                    (0..rank)
                        .map(|i| if axes.contains(&i) { 1 } else { *it.next().unwrap_or(&1) })
                        .collect()
                };
                one(self.reshape(out, &x, &new)?)
            }
            "Concat" => {
                let xs =
                    (0..n.input.len()).map(|i| self.req(n, i)).collect::<Result<Vec<_>, _>>()?;
                let rank =
                    xs.first().map(|x| self.shape(x).len()).ok_or("Concat needs an input")?;
                let axis = norm_axis(a.int("axis", 0)?, rank)?;
                for x in &xs {
                    let s = self.shape(x);
                    let r = self.shape(&xs[0]);
                    if s.len() != rank
                        || s.iter().zip(&r).enumerate().any(|(d, (p, q))| d != axis && p != q)
                    {
                        return Err(format!(
                            "cannot concatenate shapes {} and {} along axis {axis}",
                            fmt_shape(&r),
                            fmt_shape(&s)
                        ));
                    }
                }
                if xs.iter().all(|x| matches!(x, Val::Const { .. })) {
                    let ts: Vec<&HostTensor> = xs
                        .iter()
                        .filter_map(|x| match x {
                            Val::Const { t, .. } => Some(&**t),
                            Val::Dyn(_) => None,
                        })
                        .collect();
                    let r = fold::concat(&ts, axis)?;
                    return one(self.konst(r, out));
                }
                // Pieces of zero extent along the axis add nothing.
                let keep: Vec<Val> = xs.into_iter().filter(|x| self.shape(x)[axis] > 0).collect();
                let vs = keep.iter().map(|x| self.rt(x)).collect::<Result<Vec<_>, _>>()?;
                if vs.len() == 1 {
                    return one(Val::Dyn(vs[0]));
                }
                let name = self.fresh(out);
                one(Val::Dyn(self.g.concat(&name, &vs, axis as i64)?))
            }
            "Split" => self.split(n, &a),
            "Slice" => self.slice(n, &a, out).map(|v| vec![v]),
            "Gather" => self.gather(n, &a, out).map(|v| vec![v]),
            "Expand" => {
                let x = self.req(n, 0)?;
                let s = self.req(n, 1)?;
                let target = dims_of(&self.known_ints(&s, "the shape")?, "dimension")?;
                let shape = fold::broadcast_shapes(&self.shape(&x), &target)?;
                one(self.broadcast(out, &x, &shape)?)
            }
            "Where" => self.select(n, out).map(|v| vec![v]),
            "Cast" => {
                let to = a.int("to", 0)?;
                let to_t = DType::from_onnx(to as i32).ok_or_else(|| {
                    format!("Cast to {} is not supported", crate::proto::data_type::name(to as i32))
                })?;
                let x = self.req(n, 0)?;
                one(match &x {
                    Val::Const { t, .. } => self.konst(t.cast(to_t), out),
                    Val::Dyn(_) => {
                        let from = self.dtype(&x);
                        let same = from == to_t
                            || (!from.is_float() && to_t.elem() == Some(ElemType::I32));
                        if same {
                            x.clone()
                        } else if from.is_float() && to_t.is_float() {
                            let v = self.rt(&x)?;
                            let elem = to_t.elem().unwrap_or(ElemType::F32);
                            Val::Dyn(self.op(
                                out,
                                TensorOp::Cast,
                                &[v],
                                vec![("dtype", Attr::Str(elem.name().to_string()))],
                            )?)
                        } else {
                            return Err(format!(
                                "Cast of a run-time {} tensor to {} is not supported",
                                from.name(),
                                to_t.name()
                            ));
                        }
                    }
                })
            }
            "Constant" => {
                let attr = n.attribute.first().ok_or("a Constant needs a value attribute")?;
                let t = match (attr.name.as_str(), attr.r#type) {
                    ("value", attr_type::TENSOR) => HostTensor::decode(attr.t.as_ref().ok_or("empty tensor")?, None)?,
                    ("value_float", attr_type::FLOAT) => HostTensor::from_f64(DType::F32, vec![], std::iter::once(f64::from(attr.f))),
                    ("value_floats", attr_type::FLOATS) => HostTensor::from_f64(DType::F32, vec![attr.floats.len()], attr.floats.iter().map(|&x| f64::from(x))),
                    ("value_int", attr_type::INT) => HostTensor::from_f64(DType::I64, vec![], std::iter::once(attr.i as f64)),
                    ("value_ints", attr_type::INTS) => HostTensor::from_i64s(attr.ints.clone()),
                    (k, _) => return Err(format!("Constant attribute `{k}` is not supported (sparse and string constants are not)")),
                };
                one(self.konst(t, out))
            }
            "ConstantOfShape" => {
                let s = self.req(n, 0)?;
                let shape = dims_of(&self.known_ints(&s, "the shape")?, "dimension")?;
                let value = match a.get("value") {
                    Some(v) => HostTensor::decode(
                        v.t.as_ref().ok_or("attribute `value` must be a tensor")?,
                        None,
                    )?,
                    None => HostTensor::from_f64(DType::F32, vec![1], std::iter::once(0.0)),
                };
                if value.numel() != 1 {
                    return Err("attribute `value` must hold one element".into());
                }
                let count = numel(&shape)?;
                if count > MAX_FOLDED_ELEMS {
                    return Err(format!("a constant of {count} elements is too large"));
                }
                let r = HostTensor::from_f64(
                    value.dtype,
                    shape,
                    std::iter::repeat_n(value.get(0), count),
                );
                one(self.konst(r, out))
            }
            "Shape" => {
                let x = self.req(n, 0)?;
                let shape = self.shape(&x);
                let r = shape.len() as i64;
                let clampi = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
                let start = clampi(a.int("start", 0)?);
                let end = clampi(a.int("end", r)?);
                let dims: Vec<i64> =
                    shape[start..end.max(start)].iter().map(|&d| d as i64).collect();
                one(self.konst(HostTensor::from_i64s(dims), out))
            }
            other => Err(format!("op `{other}` is not supported")),
        }
    }

    fn broadcast(&mut self, base: &str, x: &Val, shape: &[usize]) -> Result<Val, String> {
        if self.shape(x) == shape {
            return Ok(x.clone());
        }
        Ok(match x {
            Val::Const { t, .. } => {
                let r = fold::broadcast_to(t, shape)?;
                self.konst(r, base)
            }
            Val::Dyn(v) => {
                let name = self.fresh(base);
                Val::Dyn(self.g.broadcast(&name, *v, &u64s(shape))?)
            }
        })
    }

    fn pow(&mut self, n: &NodeProto, out: &str) -> Result<Val, String> {
        let (x, mut y) = (self.req(n, 0)?, self.req(n, 1)?);
        // The exponent may have another type than the base (`Pow(float, int64)`): a known one is
        // converted to the base's, which is the result's.
        if let Val::Const { t, .. } = &y {
            let xd = self.dtype(&x);
            if t.dtype != xd && xd.is_float() {
                y = self.konst(t.cast(xd), &format!("{out}.exponent"));
            }
        }
        if let (Val::Const { t: tx, .. }, Val::Const { t: ty, .. }) = (&x, &y) {
            let r = fold::elementwise(&[tx, ty], tx.dtype, |v| scalar(TensorOp::Pow, v))?;
            return Ok(self.konst(r, out));
        }
        let e = match &y {
            Val::Const { t, .. } => t.splat(),
            Val::Dyn(_) => None,
        };
        let shape = fold::broadcast_shapes(&self.shape(&x), &self.shape(&y))?;
        let xs = self.broadcast(&format!("{out}.x"), &x, &shape)?;
        let v = self.rt(&xs)?;
        let r = match e {
            Some(1.0) => v,
            Some(2.0) => self.op(out, TensorOp::Mul, &[v, v], vec![])?,
            Some(3.0) => {
                let sq = self.op(&format!("{out}.sq"), TensorOp::Mul, &[v, v], vec![])?;
                self.op(out, TensorOp::Mul, &[sq, v], vec![])?
            }
            Some(0.5) => self.op(out, TensorOp::Sqrt, &[v], vec![])?,
            Some(-0.5) => self.op(out, TensorOp::Rsqrt, &[v], vec![])?,
            Some(-1.0) => {
                let elem = self.g.ty(v).elem;
                let c = self.splat(&format!("{out}.one"), 1.0, &[], elem)?;
                self.op(out, TensorOp::Div, &[c, v], vec![])?
            }
            _ => {
                let vy = self.rt(&y)?;
                self.op(out, TensorOp::Pow, &[v, vy], vec![])?
            }
        };
        Ok(Val::Dyn(r))
    }

    fn matmul(&mut self, n: &NodeProto, out: &str) -> Result<Val, String> {
        let (x, y) = (self.req(n, 0)?, self.req(n, 1)?);
        let (sx, sy) = (self.shape(&x), self.shape(&y));
        if sx.is_empty() || sy.is_empty() {
            return Err("MatMul of a scalar".into());
        }
        let x2 =
            if sx.len() == 1 { self.reshape(&format!("{out}.a"), &x, &[1, sx[0]])? } else { x };
        let y2 =
            if sy.len() == 1 { self.reshape(&format!("{out}.b"), &y, &[sy[0], 1])? } else { y };
        let (vx, vy) = (self.rt(&x2)?, self.rt(&y2)?);
        let base =
            if sx.len() == 1 || sy.len() == 1 { format!("{out}.2d") } else { out.to_string() };
        let m = Val::Dyn(self.op(&base, TensorOp::Matmul, &[vx, vy], vec![])?);
        if sx.len() > 1 && sy.len() > 1 {
            return Ok(m);
        }
        let mut shape = self.shape(&m);
        let r = shape.len();
        if sy.len() == 1 {
            shape.remove(r - 1);
        }
        if sx.len() == 1 {
            shape.remove(shape.len() - if sy.len() == 1 { 1 } else { 2 });
        }
        self.reshape(out, &m, &shape)
    }

    fn gemm(&mut self, n: &NodeProto, a: &Attrs<'_>, out: &str) -> Result<Val, String> {
        let (x, y) = (self.req(n, 0)?, self.req(n, 1)?);
        if self.shape(&x).len() != 2 || self.shape(&y).len() != 2 {
            return Err("Gemm's A and B must be matrices".into());
        }
        let (alpha, beta) = (a.float("alpha", 1.0)?, a.float("beta", 1.0)?);
        let mut attrs = vec![];
        if a.int("transA", 0)? != 0 {
            attrs.push(("transpose_a", Attr::Bool(true)));
        }
        if a.int("transB", 0)? != 0 {
            attrs.push(("transpose_b", Attr::Bool(true)));
        }
        let (vx, vy) = (self.rt(&x)?, self.rt(&y)?);
        let c = self.input(n, 2)?;
        let product_name =
            if alpha != 1.0 || c.is_some() { format!("{out}.ab") } else { out.to_string() };
        let mut r = self.op(&product_name, TensorOp::Matmul, &[vx, vy], attrs)?;
        if alpha != 1.0 {
            let name = self.fresh(if c.is_some() { &product_name } else { out });
            r = self.g.scale(&name, r, alpha)?;
        }
        let Some(c) = c else { return Ok(Val::Dyn(r)) };
        let c = if beta != 1.0 {
            let b = HostTensor::from_f64(self.dtype(&c), vec![], std::iter::once(beta));
            let b = self.konst(b, &format!("{out}.beta"));
            self.binary(&format!("{out}.c"), TensorOp::Mul, &c, &b)?
        } else {
            c
        };
        let vc = self.rt(&c)?;
        Ok(Val::Dyn(self.op(out, TensorOp::Add, &[r, vc], vec![])?))
    }

    fn softmax(
        &mut self,
        n: &NodeProto,
        a: &Attrs<'_>,
        out: &str,
        log: bool,
    ) -> Result<Val, String> {
        let x = self.req(n, 0)?;
        let shape = self.shape(&x);
        let rank = shape.len();
        if self.opset < 13 {
            // Before opset 13 the input is flattened to 2-D at `axis` and normalized per row.
            let axis = norm_axis(a.int("axis", 1)?, rank.max(1))?;
            let rows: usize = shape[..axis].iter().product();
            let cols: usize = shape[axis..].iter().product();
            let flat = self.reshape(&format!("{out}.2d"), &x, &[rows, cols])?;
            let y = self.softmax_axis(&format!("{out}.rows"), &flat, 1, log)?;
            return self.reshape(out, &y, &shape);
        }
        let axis = norm_axis(a.int("axis", -1)?, rank)?;
        self.softmax_axis(out, &x, axis, log)
    }

    fn softmax_axis(&mut self, out: &str, x: &Val, axis: usize, log: bool) -> Result<Val, String> {
        let v = self.rt(x)?;
        if !log {
            return Ok(Val::Dyn(self.op(
                out,
                TensorOp::Softmax,
                &[v],
                vec![("axis", Attr::Int(axis as i64))],
            )?));
        }
        // log softmax = (x − max) − log Σ exp(x − max), the stable form.
        let m = self.reduce(&format!("{out}.max"), TensorOp::ReduceMax, x, &[axis], true)?;
        let m = self.rt(&m)?;
        let s = self.op(&format!("{out}.shifted"), TensorOp::Sub, &[v, m], vec![])?;
        let e = self.op(&format!("{out}.exp"), TensorOp::Exp, &[s], vec![])?;
        let z =
            self.reduce(&format!("{out}.sum"), TensorOp::ReduceSum, &Val::Dyn(e), &[axis], true)?;
        let z = self.rt(&z)?;
        let l = self.op(&format!("{out}.log"), TensorOp::Log, &[z], vec![])?;
        Ok(Val::Dyn(self.op(out, TensorOp::Sub, &[s, l], vec![])?))
    }

    fn reduction(&mut self, n: &NodeProto, a: &Attrs<'_>, out: &str) -> Result<Val, String> {
        let kind = match n.op_type.as_str() {
            "ReduceMean" => TensorOp::ReduceMean,
            "ReduceSum" => TensorOp::ReduceSum,
            _ => TensorOp::ReduceMax,
        };
        let x = self.req(n, 0)?;
        let rank = self.shape(&x).len();
        let since = if kind == TensorOp::ReduceSum { 13 } else { 18 };
        let axes = self.ints_arg(n, a, (1, "axes"), since)?;
        let keep = a.int("keepdims", 1)? != 0;
        let axes = match axes {
            Some(ax) if !ax.is_empty() => {
                ax.iter().map(|&x| norm_axis(x, rank)).collect::<Result<Vec<_>, _>>()?
            }
            _ if a.int("noop_with_empty_axes", 0)? != 0 => return Ok(x),
            _ => (0..rank).collect(),
        };
        let mut sorted = axes.clone();
        sorted.sort_unstable();
        sorted.dedup();
        if sorted.is_empty() {
            return Ok(x);
        }
        if let Val::Const { t, .. } = &x {
            let which = match kind {
                TensorOp::ReduceMax => fold::Reduction::Max,
                TensorOp::ReduceSum => fold::Reduction::Sum,
                _ => fold::Reduction::Mean,
            };
            let r = fold::reduce(t, which, &sorted, keep)?;
            return Ok(self.konst(r, out));
        }
        self.reduce(out, kind, &x, &sorted, keep)
    }

    /// LayerNormalization (`layer`) or SimplifiedLayerNormalization (RMS), normalizing over the
    /// axes from `axis` on: fbc's ops normalize one (the last) axis, so the trailing axes are
    /// merged by a reshape when there are several.
    fn norm(
        &mut self,
        n: &NodeProto,
        a: &Attrs<'_>,
        out: &str,
        layer: bool,
    ) -> Result<Vec<Val>, String> {
        let x = self.req(n, 0)?;
        let shape = self.shape(&x);
        let axis = norm_axis(a.int("axis", -1)?, shape.len())?;
        let eps = a.float("epsilon", 1e-5)?;
        let trailing = shape[axis..].to_vec();
        let d: usize = trailing.iter().product();
        let mut flat_shape = shape[..axis].to_vec();
        flat_shape.push(d);
        let xf = self.reshape(&format!("{out}.flat"), &x, &flat_shape)?;
        let param = |cx: &mut Self, v: Option<Val>, what: &str, fill: f64| -> Result<V, String> {
            let v = match v {
                Some(v) => v,
                None => {
                    let t =
                        HostTensor::from_f64(cx.dtype(&x), vec![d], std::iter::repeat_n(fill, d));
                    cx.konst(t, &format!("{out}.{what}"))
                }
            };
            let full = fold::broadcast_shapes(&cx.shape(&v), &trailing)?;
            if full != trailing {
                return Err(format!(
                    "{what} of shape {} does not broadcast to {}",
                    fmt_shape(&cx.shape(&v)),
                    fmt_shape(&trailing)
                ));
            }
            let b = cx.broadcast(&format!("{out}.{what}.b"), &v, &trailing)?;
            let r = cx.reshape(&format!("{out}.{what}.d"), &b, &[d])?;
            cx.rt(&r)
        };
        let gamma = param(self, Some(self.req(n, 1)?), "scale", 1.0)?;
        let vx = self.rt(&xf)?;
        let base = if flat_shape == shape { out.to_string() } else { format!("{out}.norm") };
        let y = if layer {
            let beta = param(self, self.input(n, 2)?, "bias", 0.0)?;
            let name = self.fresh(&base);
            self.g.layernorm(&name, vx, gamma, beta, eps)?
        } else {
            let name = self.fresh(&base);
            self.g.rmsnorm(&name, vx, gamma, eps)?
        };
        let mut outs = vec![self.reshape(out, &Val::Dyn(y), &shape)?];
        if n.output.iter().skip(1).any(|o| !o.is_empty()) {
            // The saved statistics, over the normalized axes kept with size 1: LayerNorm's mean
            // and 1/√(var + eps), RMSNorm's 1/√(mean(x²) + eps).
            let axes: Vec<usize> = (axis..shape.len()).collect();
            let vx = self.rt(&x)?;
            let centred = if layer {
                let m =
                    self.reduce(&format!("{out}.mean"), TensorOp::ReduceMean, &x, &axes, true)?;
                let vm = self.rt(&m)?;
                outs.push(m);
                self.op(&format!("{out}.centred"), TensorOp::Sub, &[vx, vm], vec![])?
            } else {
                vx
            };
            let sq = self.op(&format!("{out}.sq"), TensorOp::Mul, &[centred, centred], vec![])?;
            let var = self.reduce(
                &format!("{out}.var"),
                TensorOp::ReduceMean,
                &Val::Dyn(sq),
                &axes,
                true,
            )?;
            let vv = self.rt(&var)?;
            let elem = self.g.ty(vv).elem;
            let e = self.splat(&format!("{out}.eps"), eps, &[], elem)?;
            let s = self.op(&format!("{out}.var_eps"), TensorOp::Add, &[vv, e], vec![])?;
            outs.push(Val::Dyn(self.op(
                &format!("{out}.inv_std"),
                TensorOp::Rsqrt,
                &[s],
                vec![],
            )?));
        }
        Ok(outs)
    }

    fn split(&mut self, n: &NodeProto, a: &Attrs<'_>) -> Result<Vec<Val>, String> {
        let x = self.req(n, 0)?;
        let shape = self.shape(&x);
        let axis = norm_axis(a.int("axis", 0)?, shape.len())?;
        let dim = shape[axis];
        let k = n.output.len();
        let sizes: Vec<usize> = match self.ints_arg(n, a, (1, "split"), 13)? {
            Some(s) => dims_of(&s, "split")?,
            None => {
                let parts = a.int("num_outputs", k as i64)?.max(1) as usize;
                let chunk = dim.div_ceil(parts);
                (0..parts).map(|i| chunk.min(dim.saturating_sub(i * chunk))).collect()
            }
        };
        if sizes.len() != k || sizes.iter().sum::<usize>() != dim {
            return Err(format!(
                "split sizes {sizes:?} do not divide axis {axis} of size {dim} into {k} outputs"
            ));
        }
        let mut outs = Vec::with_capacity(k);
        let mut at = 0;
        for (i, &s) in sizes.iter().enumerate() {
            let mut start = vec![0i64; shape.len()];
            let mut count = shape.clone();
            start[axis] = at as i64;
            count[axis] = s;
            let name = n.output[i].clone();
            outs.push(self.slice_box(&name, &x, &start, &vec![1; shape.len()], count)?);
            at += s;
        }
        Ok(outs)
    }

    /// `x[start + i·step]` along every axis, `count` elements each.
    fn slice_box(
        &mut self,
        base: &str,
        x: &Val,
        start: &[i64],
        step: &[i64],
        count: Vec<usize>,
    ) -> Result<Val, String> {
        if count == self.shape(x) && step.iter().all(|&s| s == 1) {
            return Ok(x.clone());
        }
        match x {
            Val::Const { t, .. } => {
                let r = fold::strided_slice(t, start, step, count)?;
                Ok(self.konst(r, base))
            }
            Val::Dyn(v) => {
                if let Some(ax) = (0..step.len()).find(|&d| step[d] != 1 && count[d] > 1) {
                    return self.strided(base, x, ax, start, step, &count);
                }
                let s: Vec<u64> = start.iter().map(|&s| s as u64).collect();
                let e: Vec<u64> = s.iter().zip(&count).map(|(&s, &c)| s + c as u64).collect();
                let name = self.fresh(base);
                Ok(Val::Dyn(self.g.slice(&name, *v, &s, &e)?))
            }
        }
    }

    /// A slice with step `step[ax] ≠ 1` along `ax` of a run-time tensor (fbc's slices are
    /// contiguous): a positive step whose span fits the axis is a contiguous slice reshaped to
    /// `[count, step]` and sliced at 0 along the new axis; otherwise (negative steps) one slice
    /// per element, concatenated, for at most [`MAX_STRIDED`] elements. The other axes follow.
    fn strided(
        &mut self,
        base: &str,
        x: &Val,
        ax: usize,
        start: &[i64],
        step: &[i64],
        count: &[usize],
    ) -> Result<Val, String> {
        let shape = self.shape(x);
        let (b, s, c) = (start[ax], step[ax], count[ax]);
        let mut rest_start = start.to_vec();
        let mut rest_step = step.to_vec();
        let mut rest_count = count.to_vec();
        rest_start[ax] = 0;
        rest_step[ax] = 1;
        let picked = if s > 0 && b as u64 + c as u64 * s as u64 <= shape[ax] as u64 {
            let mut st = vec![0i64; shape.len()];
            st[ax] = b;
            let mut span = shape.clone();
            span[ax] = c * s as usize;
            let run = self.slice_box(
                &format!("{base}.span"),
                x,
                &st,
                &vec![1; shape.len()],
                span.clone(),
            )?;
            let mut split = span.clone();
            split[ax] = c;
            split.insert(ax + 1, s as usize);
            let grid = self.reshape(&format!("{base}.grid"), &run, &split)?;
            let mut first = split.clone();
            first[ax + 1] = 1;
            let one = self.slice_box(
                &format!("{base}.first"),
                &grid,
                &vec![0; split.len()],
                &vec![1; split.len()],
                first,
            )?;
            let mut back = span;
            back[ax] = c;
            self.reshape(&format!("{base}.picked"), &one, &back)?
        } else {
            if c > MAX_STRIDED {
                return Err(format!("Slice with step {s} over {c} elements of a run-time tensor is not supported (at most {MAX_STRIDED})"));
            }
            let at: Vec<usize> = (0..c).map(|k| (b + k as i64 * s) as usize).collect();
            self.pick(&format!("{base}.picked"), x, ax, &at)?
        };
        rest_count[ax] = c;
        self.slice_box(base, &picked, &rest_start, &rest_step, rest_count)
    }

    /// Positions `at` (not empty) of axis `ax` of a run-time tensor, in that order: one
    /// one-element slice each, concatenated along `ax` (named `base`).
    fn pick(&mut self, base: &str, x: &Val, ax: usize, at: &[usize]) -> Result<Val, String> {
        let shape = self.shape(x);
        let mut parts = Vec::with_capacity(at.len());
        for (k, &j) in at.iter().enumerate() {
            let mut start = vec![0i64; shape.len()];
            start[ax] = j as i64;
            let mut one = shape.clone();
            one[ax] = 1;
            let p =
                self.slice_box(&format!("{base}.{k}"), x, &start, &vec![1; shape.len()], one)?;
            parts.push(self.rt(&p)?);
        }
        if let [one] = parts.as_slice() {
            return Ok(Val::Dyn(*one));
        }
        let name = self.fresh(base);
        Ok(Val::Dyn(self.g.concat(&name, &parts, ax as i64)?))
    }

    fn slice(&mut self, n: &NodeProto, a: &Attrs<'_>, out: &str) -> Result<Val, String> {
        let x = self.req(n, 0)?;
        let shape = self.shape(&x);
        let rank = shape.len();
        let (starts, ends, axes, steps) = if self.opset >= 10 {
            let get = |cx: &Self, i: usize, what: &str| -> Result<Option<Vec<i64>>, String> {
                cx.input(n, i)?.map(|v| cx.known_ints(&v, what)).transpose()
            };
            (
                get(self, 1, "the starts")?.ok_or("the starts are required")?,
                get(self, 2, "the ends")?.ok_or("the ends are required")?,
                get(self, 3, "the axes")?,
                get(self, 4, "the steps")?,
            )
        } else {
            (
                a.ints("starts")?.ok_or("attribute `starts` is required")?,
                a.ints("ends")?.ok_or("attribute `ends` is required")?,
                a.ints("axes")?,
                None,
            )
        };
        let axes = match axes {
            Some(ax) => ax.iter().map(|&x| norm_axis(x, rank)).collect::<Result<Vec<_>, _>>()?,
            None => (0..starts.len()).collect(),
        };
        let steps = steps.unwrap_or_else(|| vec![1; starts.len()]);
        if ends.len() != starts.len() || axes.len() != starts.len() || steps.len() != starts.len() {
            return Err("starts, ends, axes and steps must have one entry per sliced axis".into());
        }
        let mut start = vec![0i64; rank];
        let mut step = vec![1i64; rank];
        let mut count = shape.clone();
        let mut seen = HashSet::new();
        for i in 0..axes.len() {
            let ax = axes[i];
            if !seen.insert(ax) {
                return Err(format!("axis {ax} is sliced twice"));
            }
            let dim = shape[ax] as i128;
            let st = i128::from(steps[i]);
            if st == 0 {
                return Err("a step of 0".into());
            }
            let fix = |v: i64| if v < 0 { i128::from(v) + dim } else { i128::from(v) };
            let (mut b, mut e) = (fix(starts[i]), fix(ends[i]));
            if st > 0 {
                b = b.clamp(0, dim);
                e = e.clamp(0, dim);
            } else {
                b = b.clamp(0, dim - 1);
                e = e.clamp(-1, dim - 1);
            }
            let c = if st > 0 {
                (e - b + st - 1).div_euclid(st)
            } else {
                (b - e + (-st) - 1).div_euclid(-st)
            };
            count[ax] = c.max(0) as usize;
            start[ax] = if count[ax] == 0 { 0 } else { b as i64 };
            step[ax] = st as i64;
        }
        self.slice_box(out, &x, &start, &step, count)
    }

    fn gather(&mut self, n: &NodeProto, a: &Attrs<'_>, out: &str) -> Result<Val, String> {
        let (data, idx) = (self.req(n, 0)?, self.req(n, 1)?);
        let ds = self.shape(&data);
        let axis = norm_axis(a.int("axis", 0)?, ds.len())?;
        let is = self.shape(&idx);
        let mut out_shape = ds[..axis].to_vec();
        out_shape.extend(&is);
        out_shape.extend(&ds[axis + 1..]);
        if let Val::Const { t: it, .. } = &idx {
            let dim = ds[axis] as i64;
            let ids = it.ints().ok_or("the indices must be integers")?;
            let mut norm = Vec::with_capacity(ids.len());
            for &i in ids {
                let j = if i < 0 { i + dim } else { i };
                if j < 0 || j >= dim {
                    return Err(format!("index {i} is out of range for axis {axis} of size {dim}"));
                }
                norm.push(j as usize);
            }
            if let Val::Const { t: dt, .. } = &data {
                let st = fold::strides(&dt.shape);
                let ist = fold::strides(&is);
                let q = is.len();
                let r = fold::gather_by(dt, out_shape, |o| {
                    let flat_idx =
                        o[axis..axis + q].iter().zip(&ist).map(|(&x, s)| x * s).sum::<usize>();
                    let mut off = 0;
                    for d in 0..ds.len() {
                        let x = if d < axis {
                            o[d]
                        } else if d == axis {
                            norm[flat_idx]
                        } else {
                            o[d + q - 1]
                        };
                        off += x * st[d];
                    }
                    off
                })?;
                return Ok(self.konst(r, out));
            }
            // Known indices into a run-time tensor: one slice per index, concatenated.
            if norm.is_empty() {
                return Err("Gather with no indices".into());
            }
            let joined = self.pick(&format!("{out}.rows"), &data, axis, &norm)?;
            return self.reshape(out, &joined, &out_shape);
        }
        // Run-time indices: `embedding` reads rows of a 2-D table, so the gathered axis is moved
        // to the front and the others are merged, then the result is put back in order.
        let ids = self.rt(&idx)?;
        if self.g.ty(ids).elem != ElemType::I32 {
            return Err("run-time indices must be integers".into());
        }
        let rank = ds.len();
        let mut perm: Vec<usize> = vec![axis];
        perm.extend((0..rank).filter(|&d| d != axis));
        let moved = if axis == 0 {
            data.clone()
        } else {
            let v = self.rt(&data)?;
            let name = self.fresh(&format!("{out}.front"));
            Val::Dyn(self.g.transpose(&name, v, &u64s(&perm))?)
        };
        let rest: Vec<usize> = perm[1..].iter().map(|&d| ds[d]).collect();
        let width: usize = rest.iter().product();
        let table = self.reshape(&format!("{out}.table"), &moved, &[ds[axis], width])?;
        let tv = self.rt(&table)?;
        let rows_name = self.fresh(&format!("{out}.rows"));
        let rows = Val::Dyn(self.g.embedding(&rows_name, tv, ids)?);
        let mut expanded = is.clone();
        expanded.extend(&rest);
        if axis == 0 {
            return self.reshape(out, &rows, &out_shape);
        }
        let rows = self.reshape(&format!("{out}.split"), &rows, &expanded)?;
        // `rows` is [indices.., data dims before axis.., after axis..]; the result wants the
        // dims before the axis first.
        let q = is.len();
        let back: Vec<usize> =
            (0..axis).map(|j| q + j).chain(0..q).chain(q + axis..rank - 1 + q).collect();
        let v = self.rt(&rows)?;
        let name = self.fresh(out);
        Ok(Val::Dyn(self.g.transpose(&name, v, &u64s(&back))?))
    }

    fn select(&mut self, n: &NodeProto, out: &str) -> Result<Val, String> {
        let (c, x, y) = (self.req(n, 0)?, self.req(n, 1)?, self.req(n, 2)?);
        let shape = fold::broadcast_shapes(
            &fold::broadcast_shapes(&self.shape(&c), &self.shape(&x))?,
            &self.shape(&y),
        )?;
        let Val::Const { t: ct, .. } = &c else {
            return Err("Where with a run-time condition is not supported".into());
        };
        if let (Val::Const { t: tx, .. }, Val::Const { t: ty, .. }) = (&x, &y) {
            let r =
                fold::elementwise(
                    &[ct, tx, ty],
                    tx.dtype,
                    |v| if v[0] != 0.0 { v[1] } else { v[2] },
                )?;
            return Ok(self.konst(r, out));
        }
        match ct.splat() {
            Some(v) if v != 0.0 => self.broadcast(out, &x, &shape),
            Some(_) => self.broadcast(out, &y, &shape),
            None if ct.numel() == 0 => self.broadcast(out, &x, &shape),
            None => {
                // A known mask choosing between run-time values: x·m + y·(1 − m) would turn an
                // infinite unchosen value into NaN, so it is kept exact with `select`.
                // The condition is boolean (0 or 1): as x's type it is the mask.
                let m = self.konst(ct.cast(self.dtype(&x)), &format!("{out}.mask"));
                let vm = self.rt(&m)?;
                let (vx, vy) = (self.rt(&x)?, self.rt(&y)?);
                Ok(Val::Dyn(self.op(out, TensorOp::Select, &[vm, vx, vy], vec![])?))
            }
        }
    }
}

/// The shape `Reshape` gives a tensor of `from`: `0` copies the input's dimension (unless
/// `allowzero`), one `-1` is inferred.
fn reshape_target(from: &[usize], target: &[i64], allowzero: bool) -> Result<Vec<usize>, String> {
    let total = numel(from)?;
    let mut shape = Vec::with_capacity(target.len());
    let mut infer = None;
    for (i, &d) in target.iter().enumerate() {
        match d {
            -1 if infer.is_none() => {
                infer = Some(i);
                shape.push(1);
            }
            0 if !allowzero => shape.push(*from.get(i).ok_or_else(|| {
                format!("dimension {i} is 0 but the input has rank {}", from.len())
            })?),
            d if d >= 0 => shape.push(d as usize),
            d => return Err(format!("invalid dimension {d} in the target shape")),
        }
    }
    if let Some(i) = infer {
        let known: usize = numel(&shape)?;
        if known == 0 || total % known != 0 {
            return Err(format!("cannot reshape {} into {target:?}", fmt_shape(from)));
        }
        shape[i] = total / known;
    }
    if numel(&shape)? != total {
        return Err(format!(
            "cannot reshape {} ({total} elements) into {}",
            fmt_shape(from),
            fmt_shape(&shape)
        ));
    }
    Ok(shape)
}

pub(crate) fn import_model(
    model: &ModelProto,
    dir: Option<&Path>,
    options: &Options,
) -> Result<Imported, Vec<ImportError>> {
    let top = |message: String| vec![ImportError { node: None, message }];
    let graph = model.graph.as_ref().ok_or_else(|| top("the model has no graph".into()))?;
    let opset = model
        .opset_import
        .iter()
        .find(|o| o.domain.is_empty() || o.domain == "ai.onnx")
        .map(|o| o.version)
        .ok_or_else(|| top("the model imports no default-domain opset".into()))?;
    if opset < MIN_OPSET {
        return Err(top(format!("opset {opset} is older than the oldest fbc reads ({MIN_OPSET})")));
    }
    // Every unsupported node, reported together.
    let node_id = |i: usize, n: &NodeProto| {
        if n.name.is_empty() {
            format!("#{i}")
        } else {
            n.name.clone()
        }
    };
    let mut errors = Vec::new();
    for (i, n) in graph.node.iter().enumerate() {
        let domain_ok = n.domain.is_empty()
            || n.domain == "ai.onnx"
            || (n.domain == "com.microsoft" && n.op_type == "SimplifiedLayerNormalization");
        if !domain_ok || !SUPPORTED_OPS.contains(&n.op_type.as_str()) {
            let what = if domain_ok {
                "is not supported".to_string()
            } else {
                format!("of domain `{}` is not supported", n.domain)
            };
            errors.push(ImportError {
                node: Some((node_id(i, n), n.op_type.clone())),
                message: format!("op `{}` {what}", n.op_type),
            });
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }

    let ops = fbc_dialects::registry();
    let mut cx = Cx {
        g: Graph::new(&ops),
        vals: HashMap::new(),
        placed: HashMap::new(),
        weights: Vec::new(),
        used: HashSet::new(),
        opset,
        inline_weights: options.inline_weights,
    };
    let mut inputs = Vec::new();
    let init_names: HashSet<&str> = graph.initializer.iter().map(|t| t.name.as_str()).collect();
    for inp in &graph.input {
        if init_names.contains(inp.name.as_str()) {
            continue;
        }
        if let Some(t) = options.constant_inputs.get(&inp.name) {
            cx.vals.insert(inp.name.clone(), cx.konst(t.clone(), &inp.name));
            continue;
        }
        let err =
            |m: String| ImportError { node: None, message: format!("input `{}`: {m}", inp.name) };
        let tt = match inp.r#type.as_ref().and_then(|t| t.value.as_ref()) {
            Some(type_proto::Value::TensorType(t)) => t,
            Some(_) => {
                errors.push(err("only tensor inputs are supported".into()));
                continue;
            }
            None => {
                errors.push(err("the input has no type".into()));
                continue;
            }
        };
        let Some(dtype) = DType::from_onnx(tt.elem_type) else {
            errors.push(err(format!(
                "data type {} is not supported",
                crate::proto::data_type::name(tt.elem_type)
            )));
            continue;
        };
        let Some(elem) = dtype.elem() else {
            errors.push(err(format!("a run-time {} input is not supported", dtype.name())));
            continue;
        };
        let dims = tt.shape.as_ref().map(|s| s.dim.as_slice()).unwrap_or_default();
        let shape: Result<Vec<u64>, String> = match options.shapes.get(&inp.name) {
            Some(s) if tt.shape.is_some() && s.len() != dims.len() => Err(format!("--shape gives {} dimensions, the input has {}", s.len(), dims.len())),
            Some(s) => Ok(s.clone()),
            None if tt.shape.is_none() => Err("the input's shape is unknown: bind it with --shape".into()),
            None => dims
                .iter()
                .enumerate()
                .map(|(i, d)| {
                    use crate::proto::tensor_shape_proto::dimension::Value as D;
                    match &d.value {
                        Some(D::DimValue(v)) if *v >= 0 => Ok(*v as u64),
                        Some(D::DimParam(p)) => match options.shapes.get(p).map(Vec::as_slice) {
                            Some([v]) => Ok(*v),
                            _ => Err(format!("dimension {i} is `{p}`: bind it with --shape {p}=N or --shape {}=..", inp.name)),
                        },
                        _ => Err(format!("dimension {i} is unknown: bind it with --shape {}=..", inp.name)),
                    }
                })
                .collect(),
        };
        match shape {
            Ok(shape) => {
                let arg = cx.fresh(&inp.name);
                let v = cx.g.arg(&arg, &shape, elem);
                cx.vals.insert(inp.name.clone(), Val::Dyn(v));
                inputs.push((inp.name.clone(), arg, dtype));
            }
            Err(m) => errors.push(err(m)),
        }
    }
    for t in &graph.initializer {
        match HostTensor::decode(t, dir) {
            Ok(h) => {
                cx.vals.insert(
                    t.name.clone(),
                    Val::Const { t: Rc::new(h), weight: true, name: t.name.clone() },
                );
            }
            Err(m) => errors.push(ImportError {
                node: None,
                message: format!("initializer `{}`: {m}", t.name),
            }),
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    for (i, n) in graph.node.iter().enumerate() {
        let at = |message: String| {
            vec![ImportError { node: Some((node_id(i, n), n.op_type.clone())), message }]
        };
        let outs = cx.node(n).map_err(at)?;
        for (name, v) in n.output.iter().zip(outs) {
            if !name.is_empty() {
                cx.vals.insert(name.clone(), v);
            }
        }
    }
    let mut results = Vec::new();
    let mut outputs = Vec::new();
    for o in &graph.output {
        let v = cx
            .vals
            .get(&o.name)
            .cloned()
            .ok_or_else(|| top(format!("output `{}` is not computed by any node", o.name)))?;
        match v {
            Val::Const { t, .. } => {
                outputs.push((o.name.clone(), Output::Constant((*t).clone())));
            }
            _ => {
                let r = cx.rt(&v).map_err(top)?;
                outputs.push((o.name.clone(), Output::Result(results.len())));
                results.push(r);
            }
        }
    }
    let func = options.func.clone();
    let Cx { g, weights, .. } = cx;
    let module = g
        .finish(
            &sanitize(if graph.name.is_empty() { "onnx" } else { &graph.name }),
            &func,
            &results,
        )
        .map_err(top)?;
    Ok(Imported { module, weights, inputs, outputs })
}

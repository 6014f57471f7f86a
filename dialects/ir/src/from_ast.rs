//! Builds IR from the syntax tree: resolves names, types, attributes and op definitions.
//!
//! Every problem is reported, not just the first: an op that cannot be built still defines its
//! results (with the `Unknown` type, through a placeholder definition) so that later uses of them
//! do not cascade into more errors. A module is returned only if there was no error; it has not
//! been verified yet (`parse_module` does both).

use std::collections::HashMap;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use fbc_grammar::ast;
use fbc_grammar::{Diagnostic, SourceFile, Span};

use fbc_index::{BinOp, Expr, IndexMap};

use crate::attr::{Attr, DialectAttr};
use crate::dense::Dense;
use crate::module::{FuncId, Loc, Module, OpSpans, Value};
use crate::registry::{Arity, OpDef, OpRegistry, OpTraits, OpView};
use crate::types::{DialectType, ElemType, Shape, TensorType, Type};

/// Stands in for ops that could not be resolved, so their results still exist.
static UNRESOLVED: OpDef = OpDef {
    name: "builtin.unresolved",
    summary: "an op that failed to build",
    doc: "",
    operands: Arity::AtLeast(0),
    results: Arity::AtLeast(0),
    attrs: &[],
    traits: OpTraits {
        pure: false,
        elementwise: false,
        commutative: false,
        terminator: false,
        consumes: false,
    },
    class: None,
    infer: |_| Ok(Vec::new()),
};

/// Parses, builds and verifies a module from text; all diagnostics on failure.
pub fn parse_module(
    file: &Arc<SourceFile>,
    registry: &OpRegistry,
) -> Result<Module, Vec<Diagnostic>> {
    let ast = fbc_grammar::parse(&file.text)?;
    let mut module = build_module(&ast, registry)?;
    module.source = Some(file.clone());
    let errors = crate::verify::verify_module(&module);
    if errors.is_empty() {
        Ok(module)
    } else {
        Err(errors)
    }
}

/// Builds a module from a syntax tree (without running the verifier).
pub fn build_module(ast: &ast::Module, registry: &OpRegistry) -> Result<Module, Vec<Diagnostic>> {
    let mut b = Builder { registry, module: Module::new(None), diags: Vec::new() };
    b.module.name = ast.name.as_ref().map(|n| n.name.clone());
    b.module.attrs = b.attrs(&ast.attrs);

    // Signatures first, so calls may refer to functions defined later in the file.
    let mut seen: HashMap<&str, Span> = HashMap::new();
    let mut ids = Vec::with_capacity(ast.funcs.len());
    for f in &ast.funcs {
        if let Some(prev) = seen.insert(&f.name.name, f.name.span) {
            b.diags.push(
                Diagnostic::error(format!("redefinition of function @{}", f.name.name))
                    .at(f.name.span)
                    .with_secondary(prev, "first defined here"),
            );
        }
        let arg_types = f.args.iter().map(|a| b.signature_ty(&a.ty)).collect();
        let result_types = f.results.iter().map(|t| b.signature_ty(t)).collect();
        let id = b.module.add_func(f.name.name.clone(), arg_types, result_types);
        let data = b.module.func_mut(id);
        data.span = f.span;
        data.name_span = f.name.span;
        data.loc = f.loc.as_ref().map(loc);
        let attrs = b.attrs(&f.attrs);
        b.module.func_mut(id).attrs = attrs;
        ids.push(id);
    }
    // One op per AST op and a value per result and argument: no regrowth on large modules.
    let ops: usize = ast.funcs.iter().map(|f| f.body.len()).sum();
    let values: usize =
        ast.funcs.iter().flat_map(|f| &f.body).map(|o| o.results.len()).sum::<usize>();
    b.module.ops.reserve(ops);
    b.module.values.reserve(values);
    for (f, id) in ast.funcs.iter().zip(ids) {
        b.body(f, id);
    }
    if b.diags.is_empty() {
        Ok(b.module)
    } else {
        b.diags.sort_by_key(|d| d.span.map(|s| s.start));
        Err(b.diags)
    }
}

fn loc(l: &ast::Loc) -> Loc {
    Loc { file: l.file.clone(), line: l.line, col: l.col }
}

struct Builder<'r> {
    registry: &'r OpRegistry,
    module: Module,
    diags: Vec<Diagnostic>,
}

impl Builder<'_> {
    fn error(&mut self, span: Span, msg: impl Into<String>) -> &mut Diagnostic {
        self.diags.push(Diagnostic::error(msg).at(span));
        self.diags.last_mut().expect("just pushed")
    }

    fn body(&mut self, f: &ast::Func, id: FuncId) {
        let results: usize = f.body.iter().map(|o| o.results.len()).sum();
        let mut scope: FxHashMap<&str, (Value, Span)> = FxHashMap::default();
        scope.reserve(results + f.args.len());
        let args = self.module.func(id).args.clone();
        for (a, v) in f.args.iter().zip(args) {
            self.define(&mut scope, &a.name, v);
        }
        for op in &f.body {
            self.op(op, id, &mut scope);
        }
    }

    fn define<'a>(
        &mut self,
        scope: &mut FxHashMap<&'a str, (Value, Span)>,
        name: &'a ast::Ident,
        v: Value,
    ) {
        if let Some((_, prev)) = scope.insert(&name.name, (v, name.span)) {
            self.error(name.span, format!("redefinition of value %{}", name.name))
                .secondary
                .push((prev, "first defined here".into()));
        }
        self.module.set_value_name(v, name.name.as_str());
    }

    fn op<'a>(
        &mut self,
        op: &'a ast::Op,
        func: FuncId,
        scope: &mut FxHashMap<&'a str, (Value, Span)>,
    ) {
        let mut ok = true;
        let def = match self.registry.get(&op.name.name) {
            Some(d) => d,
            None => {
                let near = nearest(&op.name.name, self.registry);
                let d = self.error(op.name.span, format!("unknown op `{}`", op.name.name));
                d.label = Some("no registered dialect defines this op".into());
                if let Some(near) = near {
                    d.notes.push(format!("did you mean `{near}`?"));
                }
                ok = false;
                &UNRESOLVED
            }
        };
        let mut operands = Vec::with_capacity(op.operands.len());
        for o in &op.operands {
            match scope.get(o.name.as_str()) {
                Some(&(v, _)) => operands.push(v),
                None => {
                    self.error(o.span, format!("use of undefined value %{}", o.name));
                    ok = false;
                }
            }
        }
        let attrs = self.attrs(&op.attrs);
        let mut result_types: Option<Vec<Type>> = None;
        if let Some(sig) = &op.sig {
            let inputs: Vec<Type> = sig.inputs.iter().map(|t| self.ty(t)).collect();
            let outputs: Vec<Type> = sig.outputs.iter().map(|t| self.ty(t)).collect();
            if ok && inputs.len() != operands.len() {
                self.error(
                    sig.span,
                    format!(
                        "the signature lists {} operand types, but `{}` has {} operands",
                        inputs.len(),
                        op.name.name,
                        operands.len()
                    ),
                );
                ok = false;
            } else if ok {
                for (i, written) in inputs.iter().enumerate() {
                    let have = self.module.value_type(operands[i]);
                    if have != written && !have.is_unknown() && !written.is_unknown() {
                        let have = have.clone();
                        let d = self
                            .error(sig.inputs[i].span, format!("expected {have}, found {written}"));
                        d.label = Some(format!("operand {i} of {}", op.name.name));
                        d.secondary.push((
                            op.operands[i].span,
                            format!("%{} has type {have}", op.operands[i].name),
                        ));
                        ok = false;
                    }
                }
            }
            result_types = Some(outputs);
        }
        let result_types = match result_types {
            Some(t) => t,
            // Count and attribute problems are reported by the verifier with their exact place;
            // the op keeps its definition and its results get the `Unknown` type meanwhile.
            None if ok
                && !crate::verify::check_generic(def, operands.len(), op.results.len(), &attrs)
                    .is_empty() =>
            {
                vec![Type::Unknown; op.results.len()]
            }
            None if ok && operands.iter().all(|&v| !self.module.value_type(v).is_unknown()) => {
                let operand_types: Vec<Type> =
                    operands.iter().map(|&v| self.module.value_type(v).clone()).collect();
                let view = OpView {
                    module: &self.module,
                    op: crate::module::Op(u32::MAX),
                    operand_types: &operand_types,
                    attrs: &attrs,
                    func,
                };
                match (def.infer)(&view) {
                    Ok(t) => t,
                    Err(e) => {
                        let d = self.error(
                            op.span,
                            format!("{} (and the result types cannot be inferred)", e.message),
                        );
                        d.label =
                            Some(format!("while inferring the result types of {}", op.name.name));
                        d.notes.extend(e.notes);
                        ok = false;
                        vec![Type::Unknown; op.results.len()]
                    }
                }
            }
            None => vec![Type::Unknown; op.results.len()],
        };
        if result_types.len() != op.results.len() {
            if ok {
                self.error(
                    op.span,
                    format!(
                        "`{}` defines {} results, but {} names are bound",
                        op.name.name,
                        result_types.len(),
                        op.results.len()
                    ),
                );
            }
            ok = false;
        }
        let result_types = if ok { result_types } else { vec![Type::Unknown; op.results.len()] };
        let def = if ok { def } else { &UNRESOLVED };
        let handle = self.module.append_op(func, def, &operands, attrs, result_types, op.span);
        let spans = OpSpans {
            name: op.name.span,
            operands: op.operands.iter().map(|o| o.span).collect(),
            results: op.results.iter().map(|r| r.span).collect(),
            attrs: op.attrs.iter().map(|a| (a.name.name.clone(), a.span)).collect(),
            sig: op.sig.as_ref().map(|s| s.span),
        };
        let data = self.module.op_mut(handle);
        data.spans = Some(Box::new(spans));
        data.loc = op.loc.as_ref().map(loc);
        let results = data.results.clone();
        for (r, v) in op.results.iter().zip(results) {
            self.define(scope, r, v);
        }
    }

    fn attrs(&mut self, attrs: &[ast::NamedAttr]) -> Vec<(String, Attr)> {
        let mut out: Vec<(String, Attr)> = Vec::with_capacity(attrs.len());
        for a in attrs {
            if out.iter().any(|(k, _)| *k == a.name.name) {
                self.error(a.name.span, format!("attribute `{}` is given twice", a.name.name));
                continue;
            }
            let v = self.attr(&a.value);
            out.push((a.name.name.clone(), v));
        }
        out
    }

    fn attr(&mut self, a: &ast::Attr) -> Attr {
        match &a.kind {
            ast::AttrKind::Int(v) => match i64::try_from(*v) {
                Ok(v) => Attr::Int(v),
                Err(_) => {
                    self.error(a.span, format!("integer {v} does not fit in 64 bits"));
                    Attr::Int(0)
                }
            },
            ast::AttrKind::Float(v) => Attr::Float(*v),
            ast::AttrKind::Bool(v) => Attr::Bool(*v),
            ast::AttrKind::Str(s) => Attr::Str(s.clone()),
            ast::AttrKind::Array(items) => {
                Attr::Array(items.iter().map(|i| self.attr(i)).collect())
            }
            ast::AttrKind::Symbol(s) => Attr::Symbol(s.clone()),
            ast::AttrKind::Type(t) => Attr::Type(self.ty(t)),
            ast::AttrKind::Dialect { dialect, name, params } => {
                Attr::Dialect(Box::new(DialectAttr {
                    dialect: dialect.clone(),
                    name: name.clone(),
                    params: self.params(params),
                }))
            }
            ast::AttrKind::Map(m) => Attr::Map(self.map(m)),
            ast::AttrKind::Dense(inner) => self.dense(inner, a.span),
            ast::AttrKind::Unit => Attr::Unit,
        }
    }

    /// `dense<X>`: `X` a hex string, a number or a (nested) array of numbers.
    fn dense(&mut self, inner: &ast::Attr, span: Span) -> Attr {
        if let ast::AttrKind::Str(s) = &inner.kind {
            return match Dense::parse_hex(s) {
                Ok(d) => Attr::Dense(d),
                Err(e) => {
                    self.error(inner.span, e);
                    Attr::Dense(Dense::from_le_bytes(Vec::new()))
                }
            };
        }
        let mut values = Vec::new();
        let mut stack = vec![inner];
        while let Some(a) = stack.pop() {
            match &a.kind {
                ast::AttrKind::Int(v) => values.push(*v as f64),
                ast::AttrKind::Float(v) => values.push(*v),
                ast::AttrKind::Array(items) => stack.extend(items.iter().rev()),
                _ => {
                    self.error(
                        a.span,
                        "expected a number, an array of numbers or a hex string in `dense<...>`",
                    );
                    return Attr::Dense(Dense::from_le_bytes(Vec::new()));
                }
            }
        }
        // The literal grammar spells finite numbers only.
        Attr::Dense(Dense::from_values(values).unwrap_or_else(|| {
            self.error(span, "a number in `dense<...>` is out of range");
            Dense::from_le_bytes(Vec::new())
        }))
    }

    fn params(&mut self, params: &[ast::Param]) -> Vec<(Option<String>, Attr)> {
        params
            .iter()
            .map(|p| (p.key.as_ref().map(|k| k.name.clone()), self.attr(&p.value)))
            .collect()
    }

    fn map(&mut self, m: &ast::AffineMap) -> IndexMap {
        let known: Vec<&str> = m.dims.iter().chain(&m.symbols).map(|i| i.name.as_str()).collect();
        let results = m.results.iter().map(|e| self.expr(e, &known)).collect();
        IndexMap {
            dims: m.dims.iter().map(|d| d.name.clone()).collect(),
            symbols: m.symbols.iter().map(|d| d.name.clone()).collect(),
            results,
        }
    }

    fn expr(&mut self, e: &ast::Expr, known: &[&str]) -> Expr {
        match &e.kind {
            ast::ExprKind::Var(v) => {
                if !known.contains(&v.as_str()) {
                    self.error(e.span, format!("`{v}` is not a dimension or symbol of this map"));
                }
                Expr::Var(v.clone())
            }
            ast::ExprKind::Const(c) => Expr::Const(self.const_i64(*c, e.span)),
            ast::ExprKind::Neg(inner) => match &inner.kind {
                // `-3` reads as the constant -3, so printed maps read back the same.
                ast::ExprKind::Const(c) => Expr::Const(self.const_i64(-*c, e.span)),
                _ => Expr::Neg(Box::new(self.expr(inner, known))),
            },
            ast::ExprKind::Bin(op, a, b) => {
                let (a, b) = (self.expr(a, known), self.expr(b, known));
                Expr::binary(index_op(*op), a, b)
            }
        }
    }

    fn const_i64(&mut self, c: i128, span: Span) -> i64 {
        i64::try_from(c).unwrap_or_else(|_| {
            self.error(span, format!("integer {c} does not fit in 64 bits"));
            0
        })
    }

    /// A type of a function signature: [`Builder::ty`], then its dialect's type check (ops check
    /// the dialect types of their operands and results themselves, where the error is clearer).
    fn signature_ty(&mut self, t: &ast::Type) -> Type {
        let ty = self.ty(t);
        match self.registry.check_type(&ty) {
            Ok(()) => ty,
            Err(m) => {
                self.error(t.span, m);
                Type::Unknown
            }
        }
    }

    fn ty(&mut self, t: &ast::Type) -> Type {
        match &t.kind {
            ast::TypeKind::Tensor { dims, elem } => {
                let Some(e) = ElemType::parse(elem) else {
                    self.error(t.span, format!("unknown element type `{elem}`"))
                        .notes
                        .push(format!("known element types: {}", elem_names()));
                    return Type::Unknown;
                };
                let mut shape = Shape::with_capacity(dims.len());
                let mut count: Option<u64> = Some(1);
                for &d in dims {
                    let Ok(d64) = u64::try_from(d) else {
                        self.error(t.span, format!("dimension {d} does not fit in 64 bits"));
                        return Type::Unknown;
                    };
                    count = count.and_then(|c| c.checked_mul(d64));
                    shape.push(d64);
                }
                if count.is_none() {
                    self.error(
                        t.span,
                        format!(
                            "{} has more elements than fit in 64 bits",
                            render_dims(dims, elem)
                        ),
                    )
                    .label = Some("element count overflows u64".into());
                    return Type::Unknown;
                }
                Type::Tensor(TensorType { shape, elem: e })
            }
            ast::TypeKind::Scalar(s) => match ElemType::parse(s) {
                Some(e) => Type::Scalar(e),
                None => {
                    self.error(t.span, format!("unknown type `{s}`"));
                    Type::Unknown
                }
            },
            ast::TypeKind::Dialect { dialect, name, params } => {
                Type::Dialect(Box::new(DialectType {
                    dialect: dialect.clone(),
                    name: name.clone(),
                    params: self.params(params),
                }))
            }
        }
    }
}

fn render_dims(dims: &[u128], elem: &str) -> String {
    let d: Vec<String> = dims.iter().map(u128::to_string).collect();
    format!("tensor<{}x{elem}>", d.join("x"))
}

fn elem_names() -> String {
    ElemType::ALL.iter().map(|e| e.name()).collect::<Vec<_>>().join(", ")
}

/// The registered op name closest to `name` (edit distance ≤ 3), for "did you mean" notes.
fn nearest(name: &str, registry: &OpRegistry) -> Option<&'static str> {
    // Long names cannot be within distance 3 of any op name; skip the quadratic work on them.
    if name.len() > 64 {
        return None;
    }
    registry
        .iter()
        .map(|d| (edit_distance(name, d.name), d.name))
        .filter(|(d, _)| *d <= 3)
        .min()
        .map(|(_, n)| n)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != *cb)).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// The index operator of one the grammar spells (the affine six).
fn index_op(op: ast::BinOp) -> BinOp {
    match op {
        ast::BinOp::Add => BinOp::Add,
        ast::BinOp::Sub => BinOp::Sub,
        ast::BinOp::Mul => BinOp::Mul,
        ast::BinOp::FloorDiv => BinOp::FloorDiv,
        ast::BinOp::CeilDiv => BinOp::CeilDiv,
        ast::BinOp::Mod => BinOp::Mod,
    }
}

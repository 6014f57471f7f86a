//! Building the ops autodiff and train-step add.
//!
//! Result types come from each op's own `infer` function rather than being computed here, so a
//! rule that would build an ill-typed op is reported as an internal error at once instead of
//! leaving IR that only fails to verify later. Every op built through an [`Emitter`] carries the
//! emitter's marker (a discardable unit attribute: `fbc.backward` or `fbc.optimizer`) and the span
//! of the forward op it was derived from, so diagnostics and later passes can trace it back.

use fbc_dialects::kind::TensorOp as T;
use fbc_ir::{
    Attr, Diagnostic, FuncId, Module, Op, OpRegistry, OpView, Span, TensorType, Type, Value,
};

/// Discardable unit attribute on every op of the backward pass.
pub(crate) const BACKWARD: &str = "fbc.backward";
/// Discardable unit attribute on every forward op whose result a backward op reads (E_reuse).
pub(crate) const REUSE: &str = "fbc.reuse";
/// Function attribute: sorted indices of the arguments that backward ops read (E_reuse).
pub(crate) const REUSE_ARGS: &str = "fbc.reuse_args";
/// Discardable unit attribute on every op of a training step's parameter update.
pub(crate) const OPTIMIZER: &str = "fbc.optimizer";

/// An error that means autodiff itself is wrong, not its input.
pub(crate) fn internal(span: Span, message: impl Into<String>) -> Diagnostic {
    Diagnostic::error(format!("internal error in autodiff: {}", message.into()))
        .at(span)
        .with_note("this is a bug in fbc, not in the input")
}

/// `[2, 3]` as an attribute.
pub(crate) fn dims_attr(dims: &[u64]) -> Attr {
    Attr::ints(dims.iter().map(|&d| i64::try_from(d).unwrap_or(i64::MAX)))
}

/// Appends marked ops to the end of one function's body.
#[derive(Debug)]
pub(crate) struct Emitter<'r> {
    pub reg: &'r OpRegistry,
    pub func: FuncId,
    /// The span given to the ops built next: the forward op being differentiated.
    pub span: Span,
    /// The unit attribute put on every op built.
    pub mark: &'static str,
    /// How many ops were built.
    pub count: usize,
}

impl<'r> Emitter<'r> {
    pub fn new(reg: &'r OpRegistry, func: FuncId, span: Span, mark: &'static str) -> Self {
        Emitter { reg, func, span, mark, count: 0 }
    }

    /// Builds a `kind` op and returns all its results.
    pub fn ops(
        &mut self,
        m: &mut Module,
        kind: T,
        operands: &[Value],
        attrs: Vec<(String, Attr)>,
    ) -> Result<Vec<Value>, Diagnostic> {
        let name = kind.name();
        let def = self
            .reg
            .get(name)
            .ok_or_else(|| internal(self.span, format!("op `{name}` is not registered")))?;
        let operand_types: Vec<Type> = operands.iter().map(|&v| m.value_type(v).clone()).collect();
        let next = Op(u32::try_from(m.ops.len()).unwrap_or(u32::MAX));
        let view = OpView {
            module: m,
            op: next,
            operand_types: &operand_types,
            attrs: &attrs,
            func: self.func,
        };
        let types = (def.infer)(&view).map_err(|e| {
            let types: Vec<String> = operand_types.iter().map(ToString::to_string).collect();
            internal(self.span, format!("built an invalid `{name}`: {}", e.message))
                .with_note(format!("operand types: ({})", types.join(", ")))
        })?;
        let mut attrs = attrs;
        attrs.push((self.mark.to_string(), Attr::Unit));
        let op = m.append_op(self.func, def, operands, attrs, types, self.span);
        self.count += 1;
        Ok(m.op(op).results.to_vec())
    }

    /// Builds a one-result op.
    pub fn op(
        &mut self,
        m: &mut Module,
        kind: T,
        operands: &[Value],
        attrs: Vec<(String, Attr)>,
    ) -> Result<Value, Diagnostic> {
        let results = self.ops(m, kind, operands, attrs)?;
        results
            .first()
            .copied()
            .ok_or_else(|| internal(self.span, format!("`{kind}` has no result")))
    }

    /// A splat constant of type `ty`. Its type is written as the result type (the constant's
    /// verifier reads it back), so no `shape` attribute is needed.
    pub fn constant(&mut self, m: &mut Module, value: f64, ty: Type) -> Result<Value, Diagnostic> {
        let def = self.reg.get(T::Constant.name()).ok_or_else(|| {
            internal(self.span, format!("op `{}` is not registered", T::Constant))
        })?;
        let attrs =
            vec![("value".to_string(), Attr::Float(value)), (self.mark.to_string(), Attr::Unit)];
        let op = m.append_op(self.func, def, &[], attrs, vec![ty], self.span);
        self.count += 1;
        Ok(m.op(op).results[0])
    }

    pub fn binary(
        &mut self,
        m: &mut Module,
        kind: T,
        a: Value,
        b: Value,
    ) -> Result<Value, Diagnostic> {
        self.op(m, kind, &[a, b], vec![])
    }

    pub fn unary(&mut self, m: &mut Module, kind: T, x: Value) -> Result<Value, Diagnostic> {
        self.op(m, kind, &[x], vec![])
    }

    pub fn scale(&mut self, m: &mut Module, x: Value, factor: f64) -> Result<Value, Diagnostic> {
        self.op(m, T::Scale, &[x], vec![("factor".into(), Attr::Float(factor))])
    }

    /// `x` reshaped to `shape`; `x` itself when it has that shape already.
    pub fn reshape(
        &mut self,
        m: &mut Module,
        x: Value,
        shape: &[u64],
    ) -> Result<Value, Diagnostic> {
        self.shape_op(m, T::Reshape, x, shape)
    }

    /// `x` broadcast to `shape`; `x` itself when it has that shape already.
    pub fn broadcast(
        &mut self,
        m: &mut Module,
        x: Value,
        shape: &[u64],
    ) -> Result<Value, Diagnostic> {
        self.shape_op(m, T::Broadcast, x, shape)
    }

    /// `op {shape}` applied to `x`, or `x` itself when it has `shape` already.
    fn shape_op(
        &mut self,
        m: &mut Module,
        op: T,
        x: Value,
        shape: &[u64],
    ) -> Result<Value, Diagnostic> {
        if self.tensor(m, x)?.shape.as_slice() == shape {
            return Ok(x);
        }
        self.op(m, op, &[x], vec![("shape".into(), dims_attr(shape))])
    }

    /// The gradient `g` (of a broadcast result) summed back to the shape of `like`; `g` itself
    /// when no broadcasting happened.
    pub fn unbroadcast_like(
        &mut self,
        m: &mut Module,
        g: Value,
        like: Value,
    ) -> Result<Value, Diagnostic> {
        let want = self.tensor(m, like)?;
        if self.tensor(m, g)?.shape == want.shape {
            return Ok(g);
        }
        self.op(m, T::Unbroadcast, &[g], vec![("shape".into(), dims_attr(&want.shape))])
    }

    /// The tensor type of `v`.
    pub fn tensor(&self, m: &Module, v: Value) -> Result<TensorType, Diagnostic> {
        match m.value_type(v) {
            Type::Tensor(t) => Ok(t.clone()),
            other => Err(internal(self.span, format!("expected a tensor value, found {other}"))),
        }
    }
}

//! Checks shared by the tensor dialect's verifiers: operand and attribute access that never
//! panics, NumPy broadcasting, axis normalization, and rustc-like error messages.
//!
//! Every verifier starts with [`Ctx::new`], which checks the operand count itself: the IR builder
//! calls an op's infer function before the generic verifier has checked arity or attribute kinds
//! (to infer result types when the signature is omitted), so nothing here may assume either.
//! Messages follow one style: `expected X, found Y — <what>`, pointing at the operand or
//! attribute concerned, with notes that name the types involved.

use fbc_ir::registry::ErrorPlace;
use fbc_ir::types::Shape;
use fbc_ir::{Arity, Attr, AttrDef, AttrKind, ElemType, OpError, OpView, TensorType, Type};

/// Why two shapes do not broadcast (NumPy rules): dimension `dim` of the broadcast result (shapes
/// aligned at their last dimension) would have to be both `lhs` and `rhs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("dimension {dim} is {lhs} vs {rhs}")]
pub struct BroadcastError {
    /// Index of the conflicting dimension in the broadcast result.
    pub dim: usize,
    /// The left shape's size there.
    pub lhs: u64,
    /// The right shape's size there.
    pub rhs: u64,
}

/// The NumPy broadcast of two shapes: shapes are aligned at their last dimension, missing leading
/// dimensions count as 1, and each pair of dimensions must be equal or contain a 1 (`0` with `1`
/// gives `0`).
pub fn broadcast_shapes(a: &[u64], b: &[u64]) -> Result<Shape, BroadcastError> {
    let rank = a.len().max(b.len());
    let at = |s: &[u64], k: usize| if k + s.len() >= rank { s[k + s.len() - rank] } else { 1 };
    let mut out = Shape::with_capacity(rank);
    for k in 0..rank {
        let (x, y) = (at(a, k), at(b, k));
        let d = if x == y || y == 1 {
            x
        } else if x == 1 {
            y
        } else {
            return Err(BroadcastError { dim: k, lhs: x, rhs: y });
        };
        out.push(d);
    }
    Ok(out)
}

/// Whether `from` broadcasts to exactly `to` (one-directional NumPy broadcasting, as
/// `np.broadcast_to`): `Err(None)` when `from` has more dimensions than `to`, `Err(Some(e))` when
/// dimension `e.dim` of `to` is `e.rhs` but `from` has `e.lhs` there.
pub fn broadcasts_to(from: &[u64], to: &[u64]) -> Result<(), Option<BroadcastError>> {
    if from.len() > to.len() {
        return Err(None);
    }
    let lead = to.len() - from.len();
    for (k, &d) in from.iter().enumerate() {
        let t = to[lead + k];
        if d != t && d != 1 {
            return Err(Some(BroadcastError { dim: lead + k, lhs: d, rhs: t }));
        }
    }
    Ok(())
}

/// Resolves a possibly negative axis (`-1` is the last) against `rank`; `None` when out of range.
pub fn normalize_axis(axis: i64, rank: usize) -> Option<usize> {
    let r = i128::try_from(rank).ok()?;
    let a = i128::from(axis);
    let a = if a < 0 { a + r } else { a };
    if (0..r).contains(&a) {
        usize::try_from(a).ok()
    } else {
        None
    }
}

/// A tensor type from a slice of dimensions.
pub(crate) fn tensor_type(dims: &[u64], elem: ElemType) -> TensorType {
    TensorType::new(Shape::from_slice(dims), elem)
}

/// `[2, 3]`-style rendering of a shape or attribute array.
pub(crate) fn list<T: std::fmt::Display>(xs: &[T]) -> String {
    let items: Vec<String> = xs.iter().map(ToString::to_string).collect();
    format!("[{}]", items.join(", "))
}

/// A verifier's view of one op: the op's name (for messages), the names of its operands' roles,
/// and checked accessors.
pub(crate) struct Ctx<'v, 'a> {
    pub v: &'v OpView<'a>,
    pub name: &'static str,
    roles: &'static [&'static str],
}

impl<'v, 'a> Ctx<'v, 'a> {
    /// Starts checking op `name`, whose operands play `roles` (for messages); checks the operand
    /// count against `arity`.
    pub fn new(
        v: &'v OpView<'a>,
        name: &'static str,
        roles: &'static [&'static str],
        arity: Arity,
    ) -> Result<Self, OpError> {
        let n = v.operand_types.len();
        if !arity.accepts(n) {
            // The generic verifier's message, so both paths report an op the same way.
            return Err(OpError::new(format!("`{name}` takes {arity} operands, found {n}")));
        }
        Ok(Ctx { v, name, roles })
    }

    /// `operand 1 (`gamma`) of tensor.layernorm`.
    pub fn what(&self, i: usize) -> String {
        match self.roles.get(i) {
            Some(r) => format!("operand {i} (`{r}`) of {}", self.name),
            None => format!("operand {i} of {}", self.name),
        }
    }

    /// The role name of operand `i` in backquotes, or `operand i`.
    pub fn role(&self, i: usize) -> String {
        match self.roles.get(i) {
            Some(r) => format!("`{r}`"),
            None => format!("operand {i}"),
        }
    }

    /// Operand `i`, which must be a tensor.
    pub fn tensor(&self, i: usize) -> Result<&'a TensorType, OpError> {
        match self.v.operand_types.get(i) {
            Some(Type::Tensor(t)) => Ok(t),
            Some(other) => Err(OpError::operand(
                i,
                format!("expected a tensor, found {other} — {}", self.what(i)),
            )),
            None => Err(OpError::new(format!("`{}` is missing operand {i}", self.name))),
        }
    }

    /// Operand `i`, which must be a tensor of a float element type.
    pub fn float_tensor(&self, i: usize) -> Result<&'a TensorType, OpError> {
        let t = self.tensor(i)?;
        if t.elem.is_float() {
            Ok(t)
        } else {
            Err(OpError::operand(
                i,
                format!("expected a float element type, found {} — {}", t.elem, self.what(i)),
            )
            .note(format!(
                "{} is {t}; `{}` computes in floating point (f32, f16, bf16 or f64)",
                self.role(i),
                self.name
            )))
        }
    }

    /// Operand `i`, which must be a tensor of `i32` indices.
    pub fn i32_tensor(&self, i: usize) -> Result<&'a TensorType, OpError> {
        let t = self.tensor(i)?;
        if t.elem == ElemType::I32 {
            Ok(t)
        } else {
            Err(OpError::operand(
                i,
                format!("expected element type i32, found {} — {}", t.elem, self.what(i)),
            )
            .note(format!("{} is {t}; indices are i32", self.role(i))))
        }
    }

    /// Operand `i` (type `t`) must have the element type of operand `of`.
    pub fn same_elem(&self, i: usize, t: &TensorType, of: usize) -> Result<(), OpError> {
        let Ok(other) = self.tensor(of) else { return Ok(()) };
        if t.elem == other.elem {
            return Ok(());
        }
        Err(OpError::operand(
            i,
            format!(
                "expected {}, found {} — the element type of {}",
                other.elem,
                t.elem,
                self.what(i)
            ),
        )
        .note(format!(
            "{} is {other} and {} is {t}; they must have the same element type",
            self.role(of),
            self.role(i)
        )))
    }

    /// Operand `i` (type `t`) must be exactly `want`; `why` explains where `want` comes from.
    pub fn expect_type(
        &self,
        i: usize,
        t: &TensorType,
        want: &TensorType,
        why: impl Into<String>,
    ) -> Result<(), OpError> {
        if t == want {
            Ok(())
        } else {
            Err(OpError::operand(i, format!("expected {want}, found {t} — {}", self.what(i)))
                .note(why))
        }
    }

    /// Operand `i` (type `t`) must have exactly the type of operand `of`.
    pub fn same_type(&self, i: usize, t: &TensorType, of: usize) -> Result<(), OpError> {
        let Ok(other) = self.tensor(of) else { return Ok(()) };
        let why = format!("{} must have the type of {}", self.role(i), self.role(of));
        self.expect_type(i, t, other, why)
    }

    /// Operand `i` (type `t`) must have rank at least `min`.
    pub fn rank_at_least(&self, i: usize, t: &TensorType, min: usize) -> Result<(), OpError> {
        if t.rank() >= min {
            return Ok(());
        }
        Err(OpError::operand(
            i,
            format!("expected rank ≥ {min}, found rank {} — {}", t.rank(), self.what(i)),
        )
        .note(format!("{} is {t}", self.role(i))))
    }

    /// Operand `i` (type `t`) must have rank exactly `rank`; `layout` describes the expected shape.
    pub fn rank_exactly(
        &self,
        i: usize,
        t: &TensorType,
        rank: usize,
        layout: &str,
    ) -> Result<(), OpError> {
        if t.rank() == rank {
            return Ok(());
        }
        Err(OpError::operand(
            i,
            format!("expected rank {rank}, found rank {} — {}", t.rank(), self.what(i)),
        )
        .note(format!("{} is {t}; it must be {layout}", self.role(i))))
    }

    // ----- attributes -----

    fn attr_def(&self, name: &str) -> Option<&'static AttrDef> {
        super::find(self.name)?.attrs.iter().find(|a| a.name == name)
    }

    /// The attribute `name`, checked against `kind` (the same check and message as the generic
    /// verifier, which has not run yet when result types are inferred during building).
    fn get(&self, name: &str, kind: AttrKind) -> Result<Option<&'a Attr>, OpError> {
        match self.v.attr(name) {
            None => Ok(None),
            Some(a) if kind.accepts(a) => Ok(Some(a)),
            Some(a) => Err(OpError::attr(
                name,
                format!("`{name}` must be {}, found {} `{a}`", kind.describe(), a.kind_name()),
            )),
        }
    }

    fn missing(&self, name: &str, kind: AttrKind) -> OpError {
        let doc = self.attr_def(name).map_or("", |d| d.doc);
        OpError::new(format!("`{}` requires attribute `{name}`", self.name))
            .note(format!("`{name}` is {}: {doc}", kind.describe()))
    }

    fn required(&self, name: &str, kind: AttrKind) -> Result<&'a Attr, OpError> {
        self.get(name, kind)?.ok_or_else(|| self.missing(name, kind))
    }

    pub fn int(&self, name: &str, default: i64) -> Result<i64, OpError> {
        Ok(self.get(name, AttrKind::Int)?.and_then(Attr::as_int).unwrap_or(default))
    }

    pub fn req_int(&self, name: &str) -> Result<i64, OpError> {
        let a = self.required(name, AttrKind::Int)?;
        a.as_int().ok_or_else(|| self.missing(name, AttrKind::Int))
    }

    pub fn float(&self, name: &str, default: f64) -> Result<f64, OpError> {
        Ok(self.get(name, AttrKind::Float)?.and_then(Attr::as_float).unwrap_or(default))
    }

    pub fn req_float(&self, name: &str) -> Result<f64, OpError> {
        let a = self.required(name, AttrKind::Float)?;
        a.as_float().ok_or_else(|| self.missing(name, AttrKind::Float))
    }

    pub fn bool(&self, name: &str, default: bool) -> Result<bool, OpError> {
        Ok(self.get(name, AttrKind::Bool)?.and_then(Attr::as_bool).unwrap_or(default))
    }

    /// A string attribute of the given kind (`Str` or `Enum`), or `default`.
    pub fn str(&self, name: &str, kind: AttrKind, default: &'a str) -> Result<&'a str, OpError> {
        Ok(self.get(name, kind)?.and_then(Attr::as_str).unwrap_or(default))
    }

    /// A required string attribute of the given kind (`Str` or `Enum`).
    pub fn req_str(&self, name: &str, kind: AttrKind) -> Result<&'a str, OpError> {
        let a = self.required(name, kind)?;
        a.as_str().ok_or_else(|| self.missing(name, kind))
    }

    pub fn opt_str(&self, name: &str, kind: AttrKind) -> Result<Option<&'a str>, OpError> {
        Ok(self.get(name, kind)?.and_then(Attr::as_str))
    }

    pub fn opt_ints(&self, name: &str) -> Result<Option<Vec<i64>>, OpError> {
        Ok(self.get(name, AttrKind::IntArray)?.and_then(Attr::as_ints))
    }

    pub fn req_ints(&self, name: &str) -> Result<Vec<i64>, OpError> {
        let a = self.required(name, AttrKind::IntArray)?;
        a.as_ints().ok_or_else(|| self.missing(name, AttrKind::IntArray))
    }

    /// `eps` (default `default`), which must be finite and non-negative.
    pub fn eps(&self, default: f64) -> Result<f64, OpError> {
        let eps = self.float("eps", default)?;
        if eps.is_finite() && eps >= 0.0 {
            Ok(eps)
        } else {
            Err(OpError::attr(
                "eps",
                format!(
                    "expected a finite, non-negative epsilon, found {} — `eps` of {}",
                    Attr::Float(eps),
                    self.name
                ),
            ))
        }
    }

    /// A list of dimensions from attribute `attr`: every entry must be ≥ 0.
    pub fn dims(&self, attr: &str, values: &[i64]) -> Result<Shape, OpError> {
        values
            .iter()
            .enumerate()
            .map(|(j, &d)| {
                u64::try_from(d).map_err(|_| {
                    OpError::attr(
                        attr,
                        format!(
                            "expected a non-negative dimension, found {d} — element {j} of `{attr}` of {}",
                            self.name
                        ),
                    )
                })
            })
            .collect()
    }

    /// Resolves `axis` (entry `label` of attribute `attr`, e.g. "`axis`" or "element 1 of
    /// `axes`") against operand `of` of type `t`.
    pub fn axis(
        &self,
        attr: &str,
        label: &str,
        axis: i64,
        t: &TensorType,
        of: usize,
    ) -> Result<usize, OpError> {
        if let Some(k) = normalize_axis(axis, t.rank()) {
            return Ok(k);
        }
        let r = t.rank();
        let e = if r == 0 {
            OpError::attr(
                attr,
                format!("expected no axis, found axis {axis} — {label} of {}", self.name),
            )
            .note(format!("{} is {t}, of rank 0: it has no axes", self.role(of)))
        } else {
            OpError::attr(
                attr,
                format!(
                    "expected an axis from -{r} to {}, found {axis} — {label} of {}",
                    r - 1,
                    self.name
                ),
            )
            .note(format!(
                "{} is {t}, of rank {r}; negative axes count from the end",
                self.role(of)
            ))
        };
        Err(e)
    }

    /// Finishes: checks that no result has more elements than fit in 64 bits.
    pub fn done(&self, results: Vec<TensorType>) -> Result<Vec<Type>, OpError> {
        for (i, t) in results.iter().enumerate() {
            if t.numel().is_none() {
                return Err(OpError {
                    message: format!(
                        "the result {t} of {} has more elements than fit in 64 bits",
                        self.name
                    ),
                    place: ErrorPlace::Op,
                    notes: vec![format!(
                        "result {i} would have an element count that overflows u64"
                    )],
                });
            }
        }
        Ok(results.into_iter().map(Type::Tensor).collect())
    }

    /// The element count of operand `i` (type `t`), or an error when it overflows u64.
    pub fn numel(&self, i: usize, t: &TensorType) -> Result<u64, OpError> {
        t.numel().ok_or_else(|| {
            OpError::operand(
                i,
                format!("{t} has more elements than fit in 64 bits — {}", self.what(i)),
            )
        })
    }

    /// The broadcast of operands 0 and 1 (types `a`, `b`), with the dialect's message on failure.
    pub fn broadcast2(&self, a: &TensorType, b: &TensorType) -> Result<Shape, OpError> {
        broadcast_shapes(&a.shape, &b.shape).map_err(|e| {
            OpError::new(format!("cannot broadcast {a} with {b}: {e}")).note(
                "NumPy broadcasting aligns shapes at their last dimension; each pair of dimensions \
                 must be equal or one of them 1",
            )
        })
    }
}

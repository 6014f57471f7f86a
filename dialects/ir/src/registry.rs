//! The op registry: what each dialect declares about its ops.
//!
//! An [`OpDef`] is the whole contract of an op: its name, how many operands and results it has,
//! its attributes (name, kind, whether required), a verifier that also infers the result types, its
//! FBLayout class (paper Table 1), traits passes rely on, and documentation. The IR refuses ops whose
//! name no registered dialect declares. Defs are `&'static` so ops can point at them cheaply; a
//! plugin that builds defs at run time leaks them once (`Box::leak`), which is what a process-long
//! registry means anyway.

use std::collections::BTreeMap;
use std::fmt;

use crate::attr::Attr;
use crate::module::{FuncId, Module, Op, Value};
use crate::types::Type;

/// How many operands or results an op takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arity {
    Exactly(usize),
    AtLeast(usize),
    Between(usize, usize),
}

impl Arity {
    pub fn accepts(self, n: usize) -> bool {
        match self {
            Arity::Exactly(k) => n == k,
            Arity::AtLeast(k) => n >= k,
            Arity::Between(lo, hi) => (lo..=hi).contains(&n),
        }
    }
}

impl fmt::Display for Arity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Arity::Exactly(k) => write!(f, "{k}"),
            Arity::AtLeast(k) => write!(f, "at least {k}"),
            Arity::Between(lo, hi) => write!(f, "{lo} to {hi}"),
        }
    }
}

/// The kind of value an attribute must hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttrKind {
    Int,
    /// A float; an integer literal is accepted too.
    Float,
    Bool,
    Str,
    IntArray,
    Symbol,
    /// Any attribute; the op's verifier checks it.
    Any,
    /// One of the listed strings.
    Enum(&'static [&'static str]),
}

impl AttrKind {
    pub fn accepts(self, a: &Attr) -> bool {
        match self {
            AttrKind::Int => matches!(a, Attr::Int(_)),
            AttrKind::Float => matches!(a, Attr::Float(_) | Attr::Int(_)),
            AttrKind::Bool => matches!(a, Attr::Bool(_)),
            AttrKind::Str => matches!(a, Attr::Str(_)),
            AttrKind::IntArray => a.as_ints().is_some(),
            AttrKind::Symbol => matches!(a, Attr::Symbol(_)),
            AttrKind::Any => true,
            AttrKind::Enum(options) => a.as_str().is_some_and(|s| options.contains(&s)),
        }
    }

    pub fn describe(self) -> String {
        match self {
            AttrKind::Int => "an integer".into(),
            AttrKind::Float => "a float".into(),
            AttrKind::Bool => "a boolean".into(),
            AttrKind::Str => "a string".into(),
            AttrKind::IntArray => "an array of integers".into(),
            AttrKind::Symbol => "a symbol (@name)".into(),
            AttrKind::Any => "any attribute".into(),
            AttrKind::Enum(o) => {
                let quoted: Vec<String> = o.iter().map(|s| format!("\"{s}\"")).collect();
                format!("one of {}", quoted.join(", "))
            }
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub struct AttrDef {
    pub name: &'static str,
    pub kind: AttrKind,
    pub required: bool,
    /// The default, as text, for documentation (`false`, `-1`).
    pub default: Option<&'static str>,
    pub doc: &'static str,
}

impl AttrDef {
    pub const fn required(name: &'static str, kind: AttrKind, doc: &'static str) -> AttrDef {
        AttrDef { name, kind, required: true, default: None, doc }
    }

    pub const fn optional(
        name: &'static str,
        kind: AttrKind,
        default: &'static str,
        doc: &'static str,
    ) -> AttrDef {
        AttrDef { name, kind, required: false, default: Some(default), doc }
    }
}

/// The four operator classes of FBLayout (paper Sec. 4.1, Table 1): whether the backward pass needs
/// forward tensors (FTI/FTD) and whether forward and backward access tensors the same way (C/D).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FbClass {
    /// Forward-tensor independent, consistent access (add, sub, scale).
    FtiC,
    /// Forward-tensor dependent, consistent access (relu, softmax, sigmoid).
    FtdC,
    /// Forward-tensor independent, divergent access (transpose, reshape).
    FtiD,
    /// Forward-tensor dependent, divergent access (matmul, layernorm).
    FtdD,
}

impl FbClass {
    pub fn name(self) -> &'static str {
        match self {
            FbClass::FtiC => "FTI-C",
            FbClass::FtdC => "FTD-C",
            FbClass::FtiD => "FTI-D",
            FbClass::FtdD => "FTD-D",
        }
    }
}

impl fmt::Display for FbClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Properties passes rely on.
#[derive(Debug, Clone, Copy, Default)]
pub struct OpTraits {
    /// No side effects: may be removed when unused and merged by CSE.
    pub pure: bool,
    /// Elementwise over (broadcast) operands.
    pub elementwise: bool,
    /// Operands may be swapped (binary ops).
    pub commutative: bool,
    /// Ends a function body.
    pub terminator: bool,
    /// Ends the lifetime of its operands (`memory.dealloc`): the verifier rejects any later use.
    pub consumes: bool,
}

impl OpTraits {
    pub const PURE: OpTraits = OpTraits {
        pure: true,
        elementwise: false,
        commutative: false,
        terminator: false,
        consumes: false,
    };
    pub const ELEMENTWISE: OpTraits = OpTraits {
        pure: true,
        elementwise: true,
        commutative: false,
        terminator: false,
        consumes: false,
    };
    pub const COMMUTATIVE: OpTraits = OpTraits {
        pure: true,
        elementwise: true,
        commutative: true,
        terminator: false,
        consumes: false,
    };
}

/// What an op's verifier may look at.
#[derive(Clone, Copy)]
pub struct OpView<'a> {
    pub module: &'a Module,
    pub op: Op,
    /// Operand types, in order (for ops being built these may come before the op exists).
    pub operand_types: &'a [Type],
    pub attrs: &'a [(String, Attr)],
    pub func: FuncId,
}

impl fmt::Debug for OpView<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpView").field("op", &self.op).finish_non_exhaustive()
    }
}

impl<'a> OpView<'a> {
    pub fn attr(&self, name: &str) -> Option<&'a Attr> {
        self.attrs.iter().find(|(k, _)| k == name).map(|(_, v)| v)
    }

    pub fn int(&self, name: &str, default: i64) -> i64 {
        self.attr(name).and_then(Attr::as_int).unwrap_or(default)
    }

    pub fn float(&self, name: &str, default: f64) -> f64 {
        self.attr(name).and_then(Attr::as_float).unwrap_or(default)
    }

    pub fn bool(&self, name: &str, default: bool) -> bool {
        self.attr(name).and_then(Attr::as_bool).unwrap_or(default)
    }

    pub fn ints(&self, name: &str) -> Option<Vec<i64>> {
        self.attr(name).and_then(Attr::as_ints)
    }

    pub fn operand(&self, i: usize) -> &'a Type {
        &self.operand_types[i]
    }

    /// The op's operand values (empty while an op is being built from text).
    pub fn operand_values(&self) -> &'a [Value] {
        if self.op.index() < self.module.ops.len() {
            &self.module.op(self.op).operands
        } else {
            &[]
        }
    }
}

/// Which part of an op a verifier error points at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ErrorPlace {
    Op,
    Operand(usize),
    Result(usize),
    Attr(String),
}

/// A verifier error: a message, the part of the op it is about, and notes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpError {
    pub message: String,
    pub place: ErrorPlace,
    pub notes: Vec<String>,
}

impl OpError {
    pub fn new(message: impl Into<String>) -> OpError {
        OpError { message: message.into(), place: ErrorPlace::Op, notes: Vec::new() }
    }

    pub fn operand(i: usize, message: impl Into<String>) -> OpError {
        OpError { place: ErrorPlace::Operand(i), ..OpError::new(message) }
    }

    pub fn attr(name: &str, message: impl Into<String>) -> OpError {
        OpError { place: ErrorPlace::Attr(name.to_string()), ..OpError::new(message) }
    }

    pub fn note(mut self, note: impl Into<String>) -> OpError {
        self.notes.push(note.into());
        self
    }
}

/// Checks an op and returns the types of its results.
pub type InferFn = fn(&OpView<'_>) -> Result<Vec<Type>, OpError>;

/// An op's FBLayout class; most ops have one fixed class, some depend on attributes.
pub type ClassFn = fn(&OpView<'_>) -> Option<FbClass>;

/// Everything fbc knows about one op.
pub struct OpDef {
    /// `dialect.op`.
    pub name: &'static str,
    pub summary: &'static str,
    /// Longer documentation: semantics, operand and result rules (Markdown).
    pub doc: &'static str,
    pub operands: Arity,
    pub results: Arity,
    pub attrs: &'static [AttrDef],
    pub traits: OpTraits,
    pub class: Option<FbClass>,
    pub infer: InferFn,
}

impl fmt::Debug for OpDef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OpDef({})", self.name)
    }
}

impl PartialEq for OpDef {
    fn eq(&self, other: &OpDef) -> bool {
        self.name == other.name
    }
}

impl OpDef {
    pub fn dialect(&self) -> &'static str {
        self.name.split_once('.').map_or(self.name, |(d, _)| d)
    }

    pub fn is(&self, name: &str) -> bool {
        self.name == name
    }
}

/// Checks a dialect type's parameters (`!memory.image2d<[W, H], f32>`): `Err` says why they do not
/// describe a valid type of the dialect.
pub type TypeCheck = fn(&crate::Type) -> Result<(), String>;

/// All ops fbc knows, by name, and the type checks of the dialects that define types.
#[derive(Debug, Default, Clone)]
pub struct OpRegistry {
    ops: BTreeMap<&'static str, &'static OpDef>,
    type_checks: BTreeMap<&'static str, TypeCheck>,
}

impl OpRegistry {
    pub fn new() -> OpRegistry {
        let mut r = OpRegistry::default();
        r.register_all(crate::func::OPS);
        r
    }

    /// Registers an op; a later registration of the same name replaces the earlier one.
    pub fn register(&mut self, def: &'static OpDef) {
        self.ops.insert(def.name, def);
    }

    pub fn register_all(&mut self, defs: &'static [OpDef]) {
        for d in defs {
            self.register(d);
        }
    }

    pub fn get(&self, name: &str) -> Option<&'static OpDef> {
        self.ops.get(name).copied()
    }

    /// Registers the check of dialect `dialect`'s types (`!dialect.name<...>`); a later
    /// registration replaces the earlier one.
    pub fn register_type_check(&mut self, dialect: &'static str, check: TypeCheck) {
        self.type_checks.insert(dialect, check);
    }

    /// Checks a type with its dialect's registered check; types of dialects without one, and
    /// builtin types, pass.
    pub fn check_type(&self, t: &crate::Type) -> Result<(), String> {
        match t {
            crate::Type::Dialect(d) => match self.type_checks.get(d.dialect.as_str()) {
                Some(check) => check(t),
                None => Ok(()),
            },
            _ => Ok(()),
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = &'static OpDef> + '_ {
        self.ops.values().copied()
    }

    /// Registered dialect names, sorted.
    pub fn dialects(&self) -> Vec<&'static str> {
        let mut d: Vec<_> = self.iter().map(OpDef::dialect).collect();
        d.dedup();
        d
    }

    /// The op's definition, looked up by name: for ops that built-in code creates by name.
    ///
    /// # Panics
    /// If no dialect registered `name`; that is a bug in the calling pass, not bad input.
    pub fn expect(&self, name: &str) -> &'static OpDef {
        self.get(name).unwrap_or_else(|| panic!("op `{name}` is not registered"))
    }
}

//! The spanned syntax tree of a `.fbir` file.
//!
//! The tree mirrors the text one to one: nothing is resolved here (value names are strings, op
//! names are not checked against a registry, types are not interned). Every node carries the byte
//! span of the text it came from, so later stages can point their diagnostics at the exact place.

use crate::diag::Span;

/// A name with the span it was written at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ident {
    /// The name without its sigil (`x` for `%x`, `main` for `@main`, `tensor.add` for an op).
    pub name: String,
    pub span: Span,
}

/// A whole file: one `module` (the `module @name { ... }` wrapper is optional in the text; a file
/// of bare functions is one anonymous module).
#[derive(Debug, Clone, PartialEq)]
pub struct Module {
    pub name: Option<Ident>,
    /// Attributes written as `module @m attributes {k = v} { ... }`.
    pub attrs: Vec<NamedAttr>,
    pub funcs: Vec<Func>,
    pub span: Span,
}

/// `func.func @name(%a: T, ...) -> (T, ...) attributes {k = v} { ops }`.
#[derive(Debug, Clone, PartialEq)]
pub struct Func {
    pub name: Ident,
    pub args: Vec<Arg>,
    pub results: Vec<Type>,
    pub attrs: Vec<NamedAttr>,
    pub body: Vec<Op>,
    pub loc: Option<Loc>,
    pub span: Span,
}

/// A function argument `%name: type`.
#[derive(Debug, Clone, PartialEq)]
pub struct Arg {
    pub name: Ident,
    pub ty: Type,
    pub span: Span,
}

/// `%r0, %r1 = dialect.op %a, %b {attrs} : (T, T) -> (T, T) loc(...)`.
#[derive(Debug, Clone, PartialEq)]
pub struct Op {
    /// Result names (without `%`); empty for ops without results.
    pub results: Vec<Ident>,
    /// The full op name, `dialect.op`.
    pub name: Ident,
    /// Operand value names (without `%`).
    pub operands: Vec<Ident>,
    pub attrs: Vec<NamedAttr>,
    /// The trailing function type, if written.
    pub sig: Option<FnType>,
    pub loc: Option<Loc>,
    pub span: Span,
}

/// `(T, T) -> T` or `(T) -> (T, T)`; a bare `T` before `->` is accepted as one input.
#[derive(Debug, Clone, PartialEq)]
pub struct FnType {
    pub inputs: Vec<Type>,
    pub outputs: Vec<Type>,
    pub span: Span,
}

/// `loc("file":LINE:COL)`; `loc(unknown)` has `file == None`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loc {
    pub file: Option<String>,
    pub line: u32,
    pub col: u32,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub struct NamedAttr {
    pub name: Ident,
    pub value: Attr,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub enum TypeKind {
    /// `tensor<2x3xf32>`; `dims` is empty for rank 0. Dimensions are kept as written (up to
    /// `u128`); the IR builder rejects those that do not fit its limits.
    Tensor { dims: Vec<u128>, elem: String },
    /// A builtin scalar or index type: `f32`, `i32`, `index`, ...
    Scalar(String),
    /// `!dialect.name<params>`; `params` is empty for `!dialect.name`.
    Dialect { dialect: String, name: String, params: Vec<Param> },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Type {
    pub kind: TypeKind,
    pub span: Span,
}

/// One parameter inside `#d.name<...>` or `!d.name<...>`: `key = value` or a bare value.
#[derive(Debug, Clone, PartialEq)]
pub struct Param {
    pub key: Option<Ident>,
    pub value: Attr,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub enum AttrKind {
    /// An integer literal, kept exactly (the IR rejects what does not fit `i64`).
    Int(i128),
    Float(f64),
    Bool(bool),
    Str(String),
    Array(Vec<Attr>),
    /// `@name`
    Symbol(String),
    /// A type used as an attribute value (`type = tensor<4xf32>`).
    Type(Type),
    /// `#dialect.name<params>`
    Dialect {
        dialect: String,
        name: String,
        params: Vec<Param>,
    },
    /// `(d0, d1)[s0] -> (e0, e1)`
    Map(AffineMap),
    /// `dense<X>`: `X` as written (a number, a nested array of numbers or a hex string).
    Dense(Box<Attr>),
    /// `unit` attributes written as a bare key in a dictionary (`{flag}`).
    Unit,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Attr {
    pub kind: AttrKind,
    pub span: Span,
}

/// An index map in MLIR affine-map syntax.
#[derive(Debug, Clone, PartialEq)]
pub struct AffineMap {
    pub dims: Vec<Ident>,
    pub symbols: Vec<Ident>,
    pub results: Vec<Expr>,
    pub span: Span,
}

/// The operators the text form of index maps spells: MLIR's affine ones. (The IR's maps are
/// `fbc_index` maps, whose operator set is a superset; `fbc_ir::from_ast` maps these onto it.
/// The syntax tree keeps its own enum so that the grammar sits below the IR core.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    FloorDiv,
    CeilDiv,
    Mod,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ExprKind {
    Var(String),
    Const(i128),
    Neg(Box<Expr>),
    Bin(BinOp, Box<Expr>, Box<Expr>),
}

/// An affine index expression. Precedence, loosest first: `+ -`, then `* floordiv ceildiv mod`,
/// then unary `-`; all binary operators associate to the left.
#[derive(Debug, Clone, PartialEq)]
pub struct Expr {
    pub kind: ExprKind,
    pub span: Span,
}

//! The IR container: a module of functions whose ops and values live in arenas.
//!
//! Invariants kept by every mutating method here:
//! - every value has exactly one definition (a function argument or an op result);
//! - `ValueData::uses` lists exactly the (op, operand index) pairs that read the value, one entry
//!   per operand slot, for ops that are not erased;
//! - a function body lists each live op once, in execution order, and ends with `func.return`
//!   once the module has verified;
//! - erased ops stay in the arena (handles never dangle) but are in no body and use nothing.
//!
//! Handles (`Op`, `Value`, `FuncId`) are indices; they are only meaningful for the module that
//! made them.

use std::fmt;

use fbc_grammar::{SourceFile, Span};
use smallvec::SmallVec;

use crate::attr::Attr;
use crate::registry::OpDef;
use crate::types::Type;

macro_rules! handle {
    ($(#[$m:meta])* $name:ident) => {
        $(#[$m])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(pub u32);

        impl $name {
            pub fn index(self) -> usize {
                self.0 as usize
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({})", stringify!($name), self.0)
            }
        }
    };
}

handle!(
    /// An operation in a module's arena.
    Op
);
handle!(
    /// An SSA value: a function argument or an op result.
    Value
);
handle!(
    /// A function of a module.
    FuncId
);

/// One read of a value: operand `index` of `op`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Use {
    pub op: Op,
    pub index: u32,
}

/// Where a value comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ValueDef {
    Arg { func: FuncId, index: u32 },
    Result { op: Op, index: u32 },
}

#[derive(Debug, Clone)]
pub struct ValueData {
    pub ty: Type,
    pub def: ValueDef,
    /// The name the value was written with (`x` for `%x`), kept so printed IR reads like its
    /// source. Printing makes names unique; passes may leave this empty.
    pub name: Option<Box<str>>,
    pub uses: Vec<Use>,
}

/// Spans of an op's parts in the source text, kept for diagnostics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpSpans {
    pub name: Span,
    pub operands: SmallVec<[Span; 3]>,
    pub results: SmallVec<[Span; 1]>,
    /// One span per attribute, in the order of `OpData::attrs`.
    pub attrs: Vec<(String, Span)>,
    pub sig: Option<Span>,
}

/// A location written in the source as `loc("file":line:col)`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Loc {
    pub file: Option<String>,
    pub line: u32,
    pub col: u32,
}

#[derive(Debug, Clone)]
pub struct OpData {
    pub def: &'static OpDef,
    pub operands: SmallVec<[Value; 3]>,
    pub results: SmallVec<[Value; 1]>,
    /// Attributes in a canonical order: sorted by name.
    pub attrs: Vec<(String, Attr)>,
    pub func: FuncId,
    /// Where the op came from in the parsed file (ops made by passes inherit the span of the op
    /// they were derived from); empty for ops with no source.
    pub span: Span,
    pub spans: Option<Box<OpSpans>>,
    /// An explicit `loc(...)` from the text, printed back.
    pub loc: Option<Loc>,
    pub erased: bool,
}

impl OpData {
    pub fn name(&self) -> &'static str {
        self.def.name
    }

    pub fn attr(&self, name: &str) -> Option<&Attr> {
        self.attrs.binary_search_by(|(k, _)| k.as_str().cmp(name)).ok().map(|i| &self.attrs[i].1)
    }

    /// Span of an attribute's text, falling back to the op's span.
    pub fn attr_span(&self, name: &str) -> Span {
        self.spans
            .as_ref()
            .and_then(|s| s.attrs.iter().find(|(k, _)| k == name).map(|(_, s)| *s))
            .unwrap_or(self.span)
    }

    /// Span of an operand's text, falling back to the op's span.
    pub fn operand_span(&self, index: usize) -> Span {
        self.spans.as_ref().and_then(|s| s.operands.get(index).copied()).unwrap_or(self.span)
    }

    pub fn result_span(&self, index: usize) -> Span {
        self.spans.as_ref().and_then(|s| s.results.get(index).copied()).unwrap_or(self.span)
    }
}

#[derive(Debug, Clone)]
pub struct FuncData {
    pub name: String,
    pub args: Vec<Value>,
    pub result_types: Vec<Type>,
    pub attrs: Vec<(String, Attr)>,
    /// Live ops in execution order.
    pub body: Vec<Op>,
    pub span: Span,
    pub name_span: Span,
    pub loc: Option<Loc>,
}

impl FuncData {
    pub fn attr(&self, name: &str) -> Option<&Attr> {
        self.attrs.iter().find(|(k, _)| k == name).map(|(_, v)| v)
    }
}

/// A module: functions plus the arenas of all their ops and values.
#[derive(Debug, Clone, Default)]
pub struct Module {
    pub name: Option<String>,
    pub attrs: Vec<(String, Attr)>,
    pub funcs: Vec<FuncData>,
    pub ops: Vec<OpData>,
    pub values: Vec<ValueData>,
    /// The text the module was parsed from, for rendering diagnostics of later stages.
    pub source: Option<std::sync::Arc<SourceFile>>,
}

impl Module {
    pub fn new(name: Option<String>) -> Module {
        Module { name, ..Module::default() }
    }

    pub fn op(&self, op: Op) -> &OpData {
        &self.ops[op.index()]
    }

    pub fn op_mut(&mut self, op: Op) -> &mut OpData {
        &mut self.ops[op.index()]
    }

    pub fn value(&self, v: Value) -> &ValueData {
        &self.values[v.index()]
    }

    pub fn value_type(&self, v: Value) -> &Type {
        &self.values[v.index()].ty
    }

    pub fn func(&self, f: FuncId) -> &FuncData {
        &self.funcs[f.index()]
    }

    pub fn func_mut(&mut self, f: FuncId) -> &mut FuncData {
        &mut self.funcs[f.index()]
    }

    pub fn func_ids(&self) -> impl Iterator<Item = FuncId> + '_ {
        (0..self.funcs.len() as u32).map(FuncId)
    }

    pub fn find_func(&self, name: &str) -> Option<FuncId> {
        self.funcs.iter().position(|f| f.name == name).map(|i| FuncId(i as u32))
    }

    /// The op that defines `v`, if it is an op result.
    pub fn defining_op(&self, v: Value) -> Option<Op> {
        match self.values[v.index()].def {
            ValueDef::Result { op, .. } => Some(op),
            ValueDef::Arg { .. } => None,
        }
    }

    /// Adds a function with arguments of the given types and an empty body.
    pub fn add_func(
        &mut self,
        name: impl Into<String>,
        arg_types: Vec<Type>,
        result_types: Vec<Type>,
    ) -> FuncId {
        let id = FuncId(self.funcs.len() as u32);
        let args = arg_types
            .into_iter()
            .enumerate()
            .map(|(i, ty)| self.new_value(ty, ValueDef::Arg { func: id, index: i as u32 }))
            .collect();
        self.funcs.push(FuncData {
            name: name.into(),
            args,
            result_types,
            attrs: Vec::new(),
            body: Vec::new(),
            span: Span::default(),
            name_span: Span::default(),
            loc: None,
        });
        id
    }

    /// Appends an argument of type `ty` to function `func` (callers' `func.call`s are not
    /// changed: the caller adds the operand).
    pub fn add_arg(&mut self, func: FuncId, ty: Type) -> Value {
        let index = self.funcs[func.index()].args.len() as u32;
        let v = self.new_value(ty, ValueDef::Arg { func, index });
        self.funcs[func.index()].args.push(v);
        v
    }

    fn new_value(&mut self, ty: Type, def: ValueDef) -> Value {
        let v = Value(self.values.len() as u32);
        self.values.push(ValueData { ty, def, name: None, uses: Vec::new() });
        v
    }

    pub fn set_value_name(&mut self, v: Value, name: impl Into<Box<str>>) {
        self.values[v.index()].name = Some(name.into());
    }

    /// Creates an op (not yet placed in any body); its results get `result_types`.
    pub fn create_op(
        &mut self,
        func: FuncId,
        def: &'static OpDef,
        operands: &[Value],
        mut attrs: Vec<(String, Attr)>,
        result_types: Vec<Type>,
        span: Span,
    ) -> Op {
        let op = Op(self.ops.len() as u32);
        attrs.sort_by(|a, b| a.0.cmp(&b.0));
        for (i, &v) in operands.iter().enumerate() {
            self.values[v.index()].uses.push(Use { op, index: i as u32 });
        }
        self.ops.push(OpData {
            def,
            operands: operands.into(),
            results: SmallVec::new(),
            attrs,
            func,
            span,
            spans: None,
            loc: None,
            erased: false,
        });
        let results = result_types
            .into_iter()
            .enumerate()
            .map(|(i, ty)| self.new_value(ty, ValueDef::Result { op, index: i as u32 }))
            .collect();
        self.ops[op.index()].results = results;
        op
    }

    /// Creates an op and appends it to the end of `func`'s body.
    pub fn append_op(
        &mut self,
        func: FuncId,
        def: &'static OpDef,
        operands: &[Value],
        attrs: Vec<(String, Attr)>,
        result_types: Vec<Type>,
        span: Span,
    ) -> Op {
        let op = self.create_op(func, def, operands, attrs, result_types, span);
        self.funcs[func.index()].body.push(op);
        op
    }

    /// Sets or replaces an attribute, keeping the canonical order.
    pub fn set_attr(&mut self, op: Op, name: &str, value: Attr) {
        let attrs = &mut self.ops[op.index()].attrs;
        match attrs.binary_search_by(|(k, _)| k.as_str().cmp(name)) {
            Ok(i) => attrs[i].1 = value,
            Err(i) => attrs.insert(i, (name.to_string(), value)),
        }
    }

    pub fn remove_attr(&mut self, op: Op, name: &str) -> Option<Attr> {
        let attrs = &mut self.ops[op.index()].attrs;
        let i = attrs.binary_search_by(|(k, _)| k.as_str().cmp(name)).ok()?;
        Some(attrs.remove(i).1)
    }

    /// Makes operand `index` of `op` read `new`.
    pub fn set_operand(&mut self, op: Op, index: usize, new: Value) {
        let old = self.ops[op.index()].operands[index];
        let u = Use { op, index: index as u32 };
        let uses = &mut self.values[old.index()].uses;
        if let Some(p) = uses.iter().position(|x| *x == u) {
            uses.swap_remove(p);
        }
        self.ops[op.index()].operands[index] = new;
        self.values[new.index()].uses.push(u);
    }

    /// Makes every reader of `old` read `new` instead.
    pub fn replace_all_uses(&mut self, old: Value, new: Value) {
        if old == new {
            return;
        }
        let uses = std::mem::take(&mut self.values[old.index()].uses);
        for u in &uses {
            self.ops[u.op.index()].operands[u.index as usize] = new;
        }
        self.values[new.index()].uses.extend(uses);
    }

    /// Removes `op` from its function and drops its uses. Its results must be unused.
    pub fn erase_op(&mut self, op: Op) {
        debug_assert!(
            self.ops[op.index()].results.iter().all(|r| self.values[r.index()].uses.is_empty()),
            "erasing an op whose results are still used"
        );
        self.detach_operands(op);
        self.ops[op.index()].erased = true;
        let func = self.ops[op.index()].func;
        self.funcs[func.index()].body.retain(|&o| o != op);
    }

    /// Marks many ops erased at once (one pass over each body), for passes that delete in bulk.
    pub fn erase_ops(&mut self, ops: &[Op]) {
        if ops.is_empty() {
            return;
        }
        self.drop_uses_all(ops);
        let mut funcs: Vec<FuncId> = Vec::new();
        for &op in ops {
            self.ops[op.index()].erased = true;
            funcs.push(self.ops[op.index()].func);
        }
        funcs.sort_unstable();
        funcs.dedup();
        // Only the bodies that held one of them, each in one pass.
        let all = &self.ops;
        for f in funcs {
            if let Some(func) = self.funcs.get_mut(f.index()) {
                func.body.retain(|o| !all[o.index()].erased);
            }
        }
    }

    /// Removes `op`'s operands from their values' use lists, leaving the op in place; for passes
    /// that first decide what dies and then erase in bulk with [`Module::erase_ops`]. It searches
    /// each operand's use list: to drop many ops that share an operand, use
    /// [`Module::drop_uses_all`].
    pub fn drop_uses(&mut self, op: Op) {
        self.detach_operands(op);
    }

    /// [`Module::drop_uses`] for every op of `ops` at once, in time linear in the use lists of
    /// their operands (dropping them one by one costs the length of a shared operand's use list,
    /// `%b` of a million `tensor.mul %v, %b`, for each op).
    pub fn drop_uses_all(&mut self, ops: &[Op]) {
        match ops {
            [] => return,
            [op] => return self.detach_operands(*op),
            _ => {}
        }
        let mut dropping = vec![false; self.ops.len()];
        let mut values: Vec<Value> = Vec::new();
        for &op in ops {
            dropping[op.index()] = true;
            values.extend(self.ops[op.index()].operands.iter().copied());
        }
        values.sort_unstable();
        values.dedup();
        for v in values {
            self.values[v.index()].uses.retain(|u| !dropping[u.op.index()]);
        }
    }

    fn detach_operands(&mut self, op: Op) {
        let operands = std::mem::take(&mut self.ops[op.index()].operands);
        for (i, v) in operands.iter().enumerate() {
            let u = Use { op, index: i as u32 };
            let uses = &mut self.values[v.index()].uses;
            if let Some(p) = uses.iter().position(|x| *x == u) {
                uses.swap_remove(p);
            }
        }
        // Keep the operand list readable for diagnostics about erased ops, without uses.
        self.ops[op.index()].operands = operands;
    }

    /// Inserts an existing (unplaced) op into `func`'s body at `position`.
    pub fn insert_op_at(&mut self, func: FuncId, position: usize, op: Op) {
        self.funcs[func.index()].body.insert(position, op);
    }

    /// Number of live ops in all functions.
    pub fn num_ops(&self) -> usize {
        self.funcs.iter().map(|f| f.body.len()).sum()
    }

    /// Live ops of all functions, in order.
    pub fn all_ops(&self) -> impl Iterator<Item = Op> + '_ {
        self.funcs.iter().flat_map(|f| f.body.iter().copied())
    }
}

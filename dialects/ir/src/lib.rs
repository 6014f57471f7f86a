//! fbc's IR core: modules of functions whose ops and values live in arenas, addressed by typed
//! handles; types and attributes; the op registry dialects declare their ops in; the builder from
//! text, the verifier and the canonical printer; and passes with their registry and manager.
//!
//! The usual flow: [`parse_module`] (text → verified [`Module`]), passes through a
//! [`pass::PassManager`], then [`print_module`]. See `docs/writing-a-pass.md` for the pass API.

pub mod activity;
pub mod attr;
pub mod dense;
pub mod docgen;
pub mod from_ast;
pub mod func;
pub mod module;
pub mod pass;
pub mod printer;
pub mod registry;
pub mod types;
pub mod verify;

pub use attr::{Attr, DialectAttr};
pub use dense::Dense;
pub use fbc_grammar::{Diagnostic, Severity, SourceFile, Span};
pub use from_ast::{build_module, parse_module};
pub use module::{FuncId, Module, Op, OpData, Use, Value, ValueDef};
pub use pass::{Pass, PassContext, PassInfo, PassManager, PassRegistry};
pub use printer::{print_module, print_module_with, PrintOptions};
pub use registry::{
    Arity, AttrDef, AttrKind, FbClass, OpDef, OpError, OpRegistry, OpTraits, OpView,
};
pub use types::{ElemType, TensorType, Type};
pub use verify::verify_module;

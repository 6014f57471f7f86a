//! Lexer, grammar and spanned syntax tree of the `.fbir` textual IR.
//!
//! `.fbir` is MLIR's generic op form (see `docs/ir.md`). This crate turns text into an
//! [`ast::Module`] and nothing more: names are not resolved and ops are not checked against any
//! registry; that is `fbc-ir`'s job. Every syntax error is reported, located, as a
//! [`diag::Diagnostic`]; no input makes the parser panic.

pub mod ast;
pub mod diag;

pub use diag::{Diagnostic, Severity, SourceFile, Span};

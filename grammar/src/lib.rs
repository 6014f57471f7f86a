//! Lexer, grammar and spanned syntax tree of the `.fbir` textual IR.
//!
//! `.fbir` is MLIR's generic op form (see `docs/ir.md`). This crate turns text into an
//! [`ast::Module`] and nothing more: names are not resolved and ops are not checked against any
//! registry; that is `fbc-ir`'s job. Every syntax error is reported, located, as a
//! [`diag::Diagnostic`]; no input makes the parser panic.
//!
//! The pipeline is `lexer` (logos, plus dimension lists and result-name lookahead) ->
//! a bracket-depth check -> `grammar.lalrpop` (LR(1), with error recovery at every list element).
//! The grammar file's header lists the syntax choices the spec leaves open.

pub mod ast;
pub mod diag;
mod lexer;
mod parser;

lalrpop_util::lalrpop_mod!(
    #[allow(
        clippy::all,
        clippy::pedantic,
        unused,
        missing_debug_implementations,
        rust_2018_idioms
    )]
    grammar
);

pub use diag::{Diagnostic, Severity, SourceFile, Span};
pub use parser::{MAX_ERRORS, MAX_NESTING};

#[cfg(test)]
mod tests;

/// Parses a `.fbir` file into its syntax tree.
///
/// On failure returns every error found, sorted by position: lexical errors, each syntax error
/// the parser recovered from (it skips to the next statement, dictionary entry, array element or
/// function), and bad literals. Brackets nested deeper than [`MAX_NESTING`] are rejected before
/// parsing. After [`MAX_ERRORS`] errors the parse stops, and a last diagnostic says so.
pub fn parse(src: &str) -> Result<ast::Module, Vec<Diagnostic>> {
    parser::parse(src)
}

/// [`parse`] for raw bytes: text that is not UTF-8 is one error at the first bad byte.
pub fn parse_bytes(bytes: &[u8]) -> Result<ast::Module, Vec<Diagnostic>> {
    parser::parse_bytes(bytes)
}

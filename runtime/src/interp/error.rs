//! `InterpError`: every way running a function can fail, with the source span of the op at fault
//! so that the driver can print `FILE:LINE:COL: error: ...`.

use fbc_ir::{Diagnostic, Span};
use thiserror::Error;

use crate::reference::KernelError;

/// Why the interpreter could not run a function to its end.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum InterpError {
    /// No function of that name.
    #[error("no function named @{name}; the module has {}", list_funcs(available))]
    UnknownFunction {
        /// The name asked for.
        name: String,
        /// The module's functions, in order.
        available: Vec<String>,
    },
    /// Not as many inputs as the function has arguments.
    #[error("@{func} takes {expected} arguments, but {found} were given")]
    ArgumentCount {
        /// The function.
        func: String,
        /// Its number of arguments.
        expected: usize,
        /// The number of inputs given.
        found: usize,
    },
    /// An input whose storage or shape does not fit its argument's type.
    #[error("argument {index} (`%{name}`) of @{func}: expected {expected}, found {found}")]
    Argument {
        /// The function.
        func: String,
        /// The argument's position.
        index: usize,
        /// The argument's name (`x` for `%x`; its position when it has none).
        name: String,
        /// The argument's type, `tensor<4x8xf32>`.
        expected: String,
        /// What was given, `f32 [4, 9]`.
        found: String,
    },
    /// An argument of a type the interpreter cannot hold (not a tensor of f32, f16, bf16, f64,
    /// i32 or i8).
    #[error(
        "argument {index} (`%{name}`) of @{func} is {ty}; the interpreter runs only tensors of \
         f32, f16, bf16, f64, i32 and i8"
    )]
    UnsupportedArgument {
        /// The function.
        func: String,
        /// The argument's position.
        index: usize,
        /// The argument's name.
        name: String,
        /// Its type.
        ty: String,
    },
    /// An op the interpreter has no kernel for, or a type it does not store.
    #[error("`{op}` is not supported by the interpreter: {reason}")]
    Unsupported {
        /// The op's name.
        op: String,
        /// Why: no kernel, or an element type without storage.
        reason: String,
        /// The op's source span.
        span: Span,
    },
    /// A reference kernel refused its operands (an id out of range, for instance).
    #[error("`{op}` failed: {source}")]
    Kernel {
        /// The op's name.
        op: String,
        /// The kernel's error.
        source: KernelError,
        /// The op's source span.
        span: Span,
    },
    /// An op the interpreter could not execute for another reason (a bad attribute, or an
    /// internal inconsistency such as a kernel result of the wrong shape).
    #[error("`{op}`: {message}")]
    Op {
        /// The op's name.
        op: String,
        /// What went wrong.
        message: String,
        /// The op's source span.
        span: Span,
    },
    /// Calls nested deeper than the limit: the IR has no control flow, so a recursive call graph
    /// never ends.
    #[error(
        "calls nest deeper than {limit} at the call of @{callee}; a recursive function never \
         returns (the IR has no control flow)"
    )]
    CallDepth {
        /// The function being called when the limit was hit.
        callee: String,
        /// The limit ([`Options::max_call_depth`](super::Options::max_call_depth)).
        limit: usize,
        /// The call's source span.
        span: Span,
    },
    /// A value, or everything a run holds at once, would exceed the memory limit
    /// ([`crate::limits`]); found before the run allocates anything.
    #[error("{error}")]
    Memory {
        /// What would not fit, its size and the limit.
        error: crate::limits::TooLarge,
        /// The op that makes the value, or the function (for an argument).
        span: Span,
    },
    /// A function body without `func.return` (only in modules that were never verified).
    #[error("@{func} ends without func.return")]
    NoReturn {
        /// The function.
        func: String,
    },
}

fn list_funcs(names: &[String]) -> String {
    if names.is_empty() {
        "no functions".to_string()
    } else {
        let at: Vec<String> = names.iter().map(|n| format!("@{n}")).collect();
        at.join(", ")
    }
}

impl InterpError {
    /// The source span of the op the error is about, if it is about one.
    pub fn span(&self) -> Option<Span> {
        match self {
            InterpError::Unsupported { span, .. }
            | InterpError::Kernel { span, .. }
            | InterpError::Op { span, .. }
            | InterpError::CallDepth { span, .. }
            | InterpError::Memory { span, .. } => Some(*span),
            _ => None,
        }
    }

    /// The error as a diagnostic pointing at its op (when it has one), for rendering against the
    /// module's source.
    pub fn to_diagnostic(&self) -> Diagnostic {
        let d = Diagnostic::error(self.to_string());
        match self.span() {
            // Ops made by passes without a source position have an empty span at 0; pointing
            // there would be misleading.
            Some(span) if span != Span::default() => d.at(span),
            _ => d,
        }
    }
}

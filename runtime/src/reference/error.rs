//! `KernelError`: every way a reference kernel can reject its inputs.
//!
//! Kernels never panic on a shape, axis, permutation, id or label: they return one of these
//! variants, naming the op and the offending value, so that the interpreter can attach the
//! message to the op's source location.

use thiserror::Error;

/// The result type of every fallible reference kernel.
pub type Result<T, E = KernelError> = std::result::Result<T, E>;

/// Why a reference kernel refused its operands.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum KernelError {
    /// A data buffer whose length is not the product of the shape.
    #[error("{op}: {len} elements given for shape {shape:?}, which holds {expected}")]
    DataLength {
        /// The kernel or constructor that refused.
        op: &'static str,
        /// The requested shape.
        shape: Vec<usize>,
        /// The length of the buffer that was given.
        len: usize,
        /// The number of elements the shape holds.
        expected: usize,
    },
    /// A shape whose element count does not fit in `usize`.
    #[error("{op}: shape {shape:?} has more elements than fit in memory")]
    TooLarge {
        /// The kernel or constructor that refused.
        op: &'static str,
        /// The offending shape.
        shape: Vec<usize>,
    },
    /// A result over the memory limit of the run ([`crate::limits`]).
    #[error("{op}: {message}")]
    Memory {
        /// The kernel or constructor that refused.
        op: &'static str,
        /// What would not fit, its size and the limit.
        message: String,
    },
    /// Two shapes that NumPy broadcasting cannot reconcile.
    #[error("{op}: shapes {lhs:?} and {rhs:?} cannot be broadcast together")]
    Broadcast {
        /// The kernel that refused.
        op: &'static str,
        /// The first operand's shape (or the source shape of a `broadcast_to`).
        lhs: Vec<usize>,
        /// The second operand's shape (or the target shape of a `broadcast_to`).
        rhs: Vec<usize>,
    },
    /// Operands whose ranks or dimensions do not fit the op's signature.
    #[error("{op}: {message}")]
    Shape {
        /// The kernel that refused.
        op: &'static str,
        /// What is wrong, with the shapes involved.
        message: String,
    },
    /// An axis outside `-rank..rank`.
    #[error("{op}: axis {axis} is out of range for a tensor of rank {rank}")]
    Axis {
        /// The kernel that refused.
        op: &'static str,
        /// The axis as given (possibly negative).
        axis: i64,
        /// The rank of the operand.
        rank: usize,
    },
    /// The same axis listed twice (after resolving negative axes).
    #[error("{op}: axis {axis} is listed more than once")]
    DuplicateAxis {
        /// The kernel that refused.
        op: &'static str,
        /// The repeated axis, resolved to `0..rank`.
        axis: usize,
    },
    /// A `perm` attribute that is not a permutation of `0..rank`.
    #[error("{op}: {perm:?} is not a permutation of 0..{rank}")]
    Permutation {
        /// The kernel that refused.
        op: &'static str,
        /// The permutation as given.
        perm: Vec<usize>,
        /// The rank of the operand.
        rank: usize,
    },
    /// An integer id or label outside `0..bound`.
    #[error("{op}: {what} {value} at index {index:?} is out of range 0..{bound}")]
    OutOfRange {
        /// The kernel that refused.
        op: &'static str,
        /// What the integer means: `"id"` or `"label"`.
        what: &'static str,
        /// The offending value.
        value: i64,
        /// Its multi-index in the id or label tensor.
        index: Vec<usize>,
        /// The exclusive upper bound (vocabulary size or class count).
        bound: usize,
    },
    /// A multi-index that does not address an element of the tensor.
    #[error("{op}: index {index:?} is out of bounds for shape {shape:?}")]
    Index {
        /// The accessor that refused.
        op: &'static str,
        /// The index as given.
        index: Vec<usize>,
        /// The tensor's shape.
        shape: Vec<usize>,
    },
    /// An attribute value the op does not know.
    #[error("{op}: {message}")]
    Attribute {
        /// The kernel that refused.
        op: &'static str,
        /// What is wrong.
        message: String,
    },
}

impl KernelError {
    /// Shorthand for [`KernelError::Shape`].
    pub(crate) fn shape(op: &'static str, message: impl Into<String>) -> Self {
        KernelError::Shape { op, message: message.into() }
    }
}

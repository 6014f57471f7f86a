//! Reference interpreter and device runtimes of fbc.
//!
//! [`reference`](mod@reference) holds the numeric reference kernels — one straightforward CPU
//! implementation of every tensor-dialect op and of the backward helpers autodiff uses — that
//! serve as the golden oracle for every other backend.

pub mod interp;
pub mod reference;

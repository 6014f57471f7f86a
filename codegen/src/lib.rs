//! OpenCL C and CPU back ends of fbc.
//!
//! [`cranelift`] compiles each `memory.launch` of a lowered module to native code for the host
//! CPU ([`cranelift::Jit`]), which `fbc run --target cpu-jit` executes; with the `llvm` feature,
//! `llvm` does the same through LLVM (`fbc run --target cpu-llvm`). What both share (the kernel
//! table, threads, operand checks, the loop-nest analysis) is [`cpu`]'s.
//!
//! [`opencl`] turns a lowered module (after `lower-to-memory` and `plan-memory`) into one OpenCL C
//! source with one kernel per `memory.launch` plus a JSON launch [`opencl::Manifest`] that
//! `fbc-runtime` executes. The
//! shape follows naga's back ends: a [`opencl::Writer`] configured by [`opencl::Options`], failing
//! with [`opencl::Error`].

pub mod cpu;
pub mod cranelift;
#[cfg(feature = "llvm")]
pub mod llvm;
pub mod opencl;

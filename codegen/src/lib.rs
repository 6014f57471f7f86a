//! OpenCL C and CPU back ends of fbc.
//!
//! [`cranelift`] compiles each `memory.launch` of a lowered module to native code for the host
//! CPU ([`cranelift::Jit`]), which `fbc run --target cpu-jit` executes.
//!
//! [`opencl`] turns a lowered module (after `lower-to-memory` and `plan-memory`) into one OpenCL C
//! source with one kernel per `memory.launch` plus a JSON launch [`opencl::Manifest`] that
//! `fbc-runtime` executes. The
//! shape follows naga's back ends: a [`opencl::Writer`] configured by [`opencl::Options`], failing
//! with [`opencl::Error`].

pub mod cranelift;
pub mod opencl;

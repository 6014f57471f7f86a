//! OpenCL C and CPU back ends of fbc.
//!
//! [`opencl`] turns a verified module (after the `-O` pipeline) into one OpenCL C source with one
//! kernel per tensor op plus a JSON launch [`opencl::Manifest`] that `fbc-runtime` executes. The
//! shape follows naga's back ends: a [`opencl::Writer`] configured by [`opencl::Options`], failing
//! with [`opencl::Error`].

pub mod opencl;

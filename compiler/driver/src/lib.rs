//! The fbc compiler driver and command.

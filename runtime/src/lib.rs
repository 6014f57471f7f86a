//! Reference interpreter and device runtimes of fbc.

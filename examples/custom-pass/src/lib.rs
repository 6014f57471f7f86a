//! An fbc pass written outside the compiler core.

//! File-driven and end-to-end tests of fbc.

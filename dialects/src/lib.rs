//! tensor, layout and memory dialects of fbc.

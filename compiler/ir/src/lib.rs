//! fbc IR core: arenas, types, attributes, ops, printer, verifier, passes.

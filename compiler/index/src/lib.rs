//! Integer index expressions simplified with egg e-graphs.

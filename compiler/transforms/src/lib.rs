//! Generic and FBLayout passes of fbc.

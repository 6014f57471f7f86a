//! Hardware profiles of fbc's targets.

//! OpenCL kernel templates of fbc.

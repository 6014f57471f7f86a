//! OpenCL C and CPU back ends of fbc.

//! `fbc import`: an ONNX model as an fbc IR module.
//!
//! ```text
//! let bytes = std::fs::read("model.onnx")?;
//! let imported = fbc_onnx::import(&bytes, Some(Path::new(".")), &fbc_onnx::Options::default())?;
//! // imported.module: one function, `forward`; imported.weights: the initializers it takes
//! ```
//!
//! - The protobuf messages are declared in [`proto`]; the data of tensors (including external
//!   data files, which must lie inside the model's folder) is decoded by [`host`].
//! - Graph inputs become the function's first arguments, then every initializer a run-time op
//!   reads (a weight), in the order of first use: `fbc run --inputs weights.safetensors` binds them
//!   by name. Initializers of one element are inlined as `tensor.constant`.
//! - Static shapes only: a symbolic dimension is bound with [`Options::shapes`] (`--shape`), and
//!   an unbound one is an error naming the input and the dimension.
//! - Values known at import time (initializers, `Constant`, `Shape` of a static tensor, and every
//!   op whose operands are all known) are folded ([`fold`]); the IR only sees run-time work.
//! - Before anything is built, every node is checked against the supported ops: all unsupported
//!   nodes are reported together, each with its name and op type.

pub mod case;
pub mod fold;
pub mod host;
mod import;
pub mod proto;

use std::collections::HashMap;

pub use host::{DType, HostTensor};
pub use import::SUPPORTED_OPS;

/// How a model is imported.
#[derive(Debug, Clone)]
pub struct Options {
    /// Name of the function the graph becomes.
    pub func: String,
    /// Static shapes for inputs (`input name → shape`) or values of symbolic dimensions
    /// (`dim_param → [value]`).
    pub shapes: HashMap<String, Vec<u64>>,
    /// Graph inputs bound to known values at import time (folded like initializers): shape
    /// inputs of ops fbc folds, such as `Reshape`'s `shape` when a test feeds it as an input.
    pub constant_inputs: HashMap<String, HostTensor>,
    /// Initializers (and other known tensors a run-time op reads) become dense
    /// `tensor.constant`s in the IR instead of function arguments (`fbc import --inline-weights`).
    pub inline_weights: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            func: "forward".to_string(),
            shapes: HashMap::new(),
            constant_inputs: HashMap::new(),
            inline_weights: false,
        }
    }
}

/// A graph output as the module computes it.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// The function's result at this index.
    Result(usize),
    /// An output whose value was known at import time (it is not a result of the function).
    Constant(HostTensor),
}

/// An imported model.
#[derive(Debug)]
pub struct Imported {
    pub module: fbc_ir::Module,
    /// The initializers that became function arguments: argument name and value, in argument
    /// order (after the graph inputs).
    pub weights: Vec<(String, HostTensor)>,
    /// Per graph input bound at run time: ONNX name, argument name, ONNX data type.
    pub inputs: Vec<(String, String, DType)>,
    /// Per graph output: ONNX name and where its value comes from.
    pub outputs: Vec<(String, Output)>,
}

/// One problem found while importing: the node it is about (name and op type) when there is one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportError {
    pub node: Option<(String, String)>,
    pub message: String,
}

impl std::fmt::Display for ImportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.node {
            Some((name, op)) => write!(f, "node `{name}` ({op}): {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

/// Imports the ONNX model in `bytes`; `dir` is its folder (for external data). All errors found
/// are returned, not only the first.
pub fn import(
    bytes: &[u8],
    dir: Option<&std::path::Path>,
    options: &Options,
) -> Result<Imported, Vec<ImportError>> {
    use prost::Message as _;
    let model = proto::ModelProto::decode(bytes).map_err(|e| {
        vec![ImportError { node: None, message: format!("not an ONNX model: {e}") }]
    })?;
    import::import_model(&model, dir, options)
}

use std::path::PathBuf;

use clap::Args;

/// `fbc import model.onnx -o model.fbir [--weights-out W.safetensors | --inline-weights]
/// [--shape NAME=DIMS]..`.
#[derive(Debug, Args)]
pub struct ImportArgs {
    /// The ONNX model (external data files are read from its folder).
    pub file: PathBuf,

    /// Output `.fbir` (standard output when absent).
    #[arg(short, long, value_name = "PATH")]
    pub output: Option<PathBuf>,

    /// Write the initializers that became function arguments to this safetensors file, under
    /// their argument names (`fbc run --inputs` binds them by name).
    #[arg(long, value_name = "W.safetensors")]
    pub weights_out: Option<PathBuf>,

    /// The static shape of an input (`input_ids=1x512`) or the value of a symbolic dimension
    /// (`seq=512`); repeatable. Every symbolic dimension must be bound.
    #[arg(long, value_name = "NAME=DIMS", value_parser = parse_shape)]
    pub shape: Vec<(String, Vec<u64>)>,

    /// Put the initializers into the `.fbir` as dense `tensor.constant`s (MLIR's
    /// `dense<"0x...">`), so that the module runs without a weights file.
    #[arg(long, conflicts_with = "weights_out")]
    pub inline_weights: bool,

    /// Name of the function the graph becomes.
    #[arg(long, value_name = "NAME", default_value = "forward")]
    pub func: String,
}

/// `NAME=1x512` (a rank-0 shape is `NAME=scalar`).
fn parse_shape(s: &str) -> Result<(String, Vec<u64>), String> {
    let (name, dims) =
        s.split_once('=').ok_or_else(|| format!("`{s}`: expected NAME=DIMS, say x=1x512"))?;
    if name.is_empty() {
        return Err(format!("`{s}`: the name is empty"));
    }
    if dims == "scalar" {
        return Ok((name.to_string(), vec![]));
    }
    let dims = dims
        .split('x')
        .map(|d| d.trim().parse::<u64>().map_err(|_| format!("`{s}`: `{d}` is not a dimension")))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((name.to_string(), dims))
}

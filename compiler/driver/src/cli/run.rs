//! `fbc run`'s arguments (the command is `run_cmd.rs`).

use std::path::PathBuf;

use clap::Args;

use super::{DeviceArgs, LowerArgs};

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The `.fbir` file (`-` reads standard input).
    pub file: PathBuf,

    /// The function to run (default: the module's only function, else `main`).
    #[arg(long, value_name = "NAME")]
    pub entry: Option<String>,

    /// Inputs, by argument name (`x` for `%x`), in safetensors files (repeatable; each
    /// argument from one file; a sharded checkpoint's `model.safetensors.index.json` reads its
    /// shards).
    #[arg(long, value_name = "IN.safetensors")]
    pub inputs: Vec<PathBuf>,

    /// Skip tensors of the `--inputs` files that name no argument instead of refusing them (a
    /// whole checkpoint feeding part of its model, such as Whisper's decoder).
    #[arg(long)]
    pub allow_unused_inputs: bool,

    /// Write the results as `result0`, `result1`, ... to a safetensors file.
    #[arg(long, value_name = "OUT.safetensors")]
    pub outputs: Option<PathBuf>,

    /// Arguments from a weight file (`fbc pack`'s `.fbw`, validated, its tiles' checksums
    /// checked, quantised weights dequantised to f32), by name, for those `--inputs` does not
    /// give.
    #[arg(long, value_name = "W.fbw")]
    pub weights: Option<PathBuf>,

    /// Also run the reference interpreter on the f32 weights that quantised ones (from
    /// `--weights`, or read packed through `tensor.dequantize`) were made from, and report how
    /// far each result is from it: the quantisation error.
    #[arg(long, value_name = "W.safetensors")]
    pub f32_weights: Option<PathBuf>,

    /// Deterministic random values for every argument not given in --inputs.
    #[arg(long, value_name = "SEED")]
    pub random_inputs: Option<u64>,

    /// Where to run: `cpu` (the reference interpreter), `cpu-jit` (native code from the
    /// Cranelift back end), `cpu-llvm` (native code from LLVM; fbc built with the `llvm`
    /// feature) or `opencl`.
    #[arg(long, default_value = "cpu")]
    pub target: String,

    /// Compute every float op in f64 (float results are written as F64).
    #[arg(long = "f64")]
    pub f64: bool,

    /// Compare a device run (`--target opencl`) with the reference interpreter.
    #[arg(long)]
    pub check: bool,

    // How the module is compiled before an OpenCL or JIT run.
    #[command(flatten)]
    pub lower: LowerArgs,

    // With `--target opencl`: the device, and the tuned parameters used on it.
    #[command(flatten)]
    pub device: DeviceArgs,

    /// Write the generated OpenCL (one `.cl` per kernel, the whole source and the manifest) to
    /// DIR before running.
    #[arg(long, value_name = "DIR")]
    pub dump_kernels: Option<PathBuf>,

    /// Replace generated kernel NAME by the `__kernel` in FILE.cl (repeatable).
    #[arg(long, value_name = "NAME=FILE.cl")]
    pub substitute_kernel: Vec<String>,

    /// With `--target opencl`: run the function N times in one call; the results (and what
    /// `--check` compares) are the last run's. The later runs reuse what the first made on the
    /// device (the program, pooled objects, kernel arguments) and, under `--memory-budget`,
    /// transfer the streamed weights from pinned host copies made before the first run.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub runs: u32,

    /// Print the result summaries even with --outputs, and the run time (to stderr).
    #[arg(short, long)]
    pub verbose: bool,

    /// With `--target opencl|cpu-jit`: when contractions split their reduction into parallel
    /// chunks (lower-to-memory's `split-k`): auto, off, or a chunk count N.
    #[arg(long, value_name = "auto|off|N", default_value = "auto", value_parser = super::parse_split_k)]
    pub split_k: fbc_transforms::lower::SplitK,

    /// Most memory the run may hold at once: plain bytes or K/M/G/T (`512M`, `8G`). Checked
    /// before anything is allocated (a run that would not fit fails at once, exit 1). Default:
    /// half of the available memory.
    #[arg(long, value_name = "SIZE", value_parser = super::parse_max_memory)]
    pub max_memory: Option<u64>,
}

impl RunArgs {
    /// Where the arguments come from: `--inputs`, `--weights`, `--random-inputs`.
    pub(crate) fn sources(&self) -> crate::run_cmd::io::Sources<'_> {
        crate::run_cmd::io::Sources {
            inputs: &self.inputs,
            allow_unused: self.allow_unused_inputs,
            weights: self.weights.as_deref(),
            seed: self.random_inputs,
            host: &[],
            stored: &[],
        }
    }
}

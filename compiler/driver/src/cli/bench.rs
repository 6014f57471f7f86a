//! `fbc bench`'s arguments (the command is `bench.rs`).

use std::path::PathBuf;

use clap::Args;

use super::{DeviceArgs, LowerArgs};

/// `fbc bench FILE`: device time per kernel of an OpenCL run.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// The `.fbir` file (`-` reads standard input).
    pub file: PathBuf,

    /// Where to run: `opencl`, or this CPU with `cpu-jit` or `cpu-llvm` (time in native code).
    #[arg(long, default_value = "opencl")]
    pub target: String,

    // How the module is compiled before it runs.
    #[command(flatten)]
    pub lower: LowerArgs,

    // The device, and the tuned parameters used on it.
    #[command(flatten)]
    pub device: DeviceArgs,

    /// Most memory a run may hold at once: plain bytes or K/M/G/T (`512M`, `8G`), checked
    /// before anything is allocated. Default: half of the available memory.
    #[arg(long, value_name = "SIZE", value_parser = super::parse_max_memory)]
    pub max_memory: Option<u64>,

    /// Run several strategies side by side (`fblayout,reuse,convert`) and print the ratios of
    /// their total device times to the first one's.
    #[arg(long, value_enum, value_delimiter = ',', value_name = "S,S,...")]
    pub compare: Vec<super::LayoutStrategy>,

    /// Timed runs after one warm-up run; each kernel's time is the median.
    #[arg(long, default_value = "5")]
    pub repeat: usize,

    /// The function to run (default: the module's only function, else `main`).
    #[arg(long, value_name = "NAME")]
    pub entry: Option<String>,

    /// Write every contraction as the plain kernel (one work-item per output) instead of the
    /// tiled one, to compare the two.
    #[arg(long)]
    pub plain_kernels: bool,

    /// Seed of the random inputs.
    #[arg(long, value_name = "SEED", default_value = "1")]
    pub seed: u64,

    /// Inputs by argument name from a safetensors file (a decode step's `pos`, say); the
    /// arguments it does not give are random (`--seed`).
    #[arg(long, value_name = "IN.safetensors")]
    pub inputs: Option<PathBuf>,

    /// A `.fbw` weight file (`fbc pack`) giving the arguments it names, as `fbc run --weights`
    /// does (packed INT8/INT4 weights as stored); `--inputs` wins where both give one, and the
    /// rest are random (`--seed`).
    #[arg(long, value_name = "W.fbw")]
    pub weights: Option<PathBuf>,

    /// Print one JSON object instead of the tables.
    #[arg(long)]
    pub json: bool,

    /// Also write the last timed run's kernels as a timeline (one self-contained HTML file: one
    /// row per strategy, a bar per launch at its device start and time, coloured by op kind).
    #[arg(long, value_name = "OUT.html")]
    pub timeline: Option<PathBuf>,

    /// When contractions split their reduction into parallel chunks (lower-to-memory's
    /// `split-k`): auto, off or a chunk count N; several (`auto,off`) run side by side, each
    /// with every strategy.
    #[arg(long, value_name = "auto|off|N,...", value_delimiter = ',', value_parser = super::parse_split_k)]
    pub split_k: Vec<fbc_transforms::lower::SplitK>,
}

//! `fbc tune`'s arguments (the command is `tuning.rs`).

use std::path::PathBuf;

use clap::Args;

use super::LowerArgs;

/// `fbc tune`'s arguments.
#[derive(Debug, Args)]
pub struct TuneArgs {
    /// The `.fbir` file whose contractions are tuned.
    pub file: PathBuf,

    /// OpenCL device: its number in `fbc devices`, or part of its name.
    #[arg(long, value_name = "N|NAME", default_value = "0")]
    pub device: String,

    // How the module is compiled before its contractions are timed.
    #[command(flatten)]
    pub lower: LowerArgs,

    /// The function to run (default: the module's only function, else `main`).
    #[arg(long, value_name = "NAME")]
    pub entry: Option<String>,

    /// Most seconds to spend on candidates after the profile's own parameters (always timed);
    /// the candidates not reached are left out.
    #[arg(long, value_name = "SECONDS", default_value = "300")]
    pub budget: f64,

    /// Timed runs per candidate after one warm-up run; each launch's time is the median.
    #[arg(long, default_value = "3")]
    pub repeat: usize,

    /// The database to update (default: `tuning.json` in the cache directory).
    #[arg(long, value_name = "FILE")]
    pub tuning: Option<PathBuf>,

    /// Seed of the random inputs.
    #[arg(long, value_name = "SEED", default_value = "1")]
    pub seed: u64,
}

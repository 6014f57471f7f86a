//! `fbc calibrate`'s arguments (the command is `calibrate.rs`).

use std::path::PathBuf;

use clap::Args;

/// `fbc calibrate --device D -o PROFILE.toml`: micro-benchmarks on an OpenCL device, written as
/// a hardware profile.
#[derive(Debug, Args)]
pub struct CalibrateArgs {
    /// OpenCL device: its number in `fbc devices`, or part of its name.
    #[arg(long, value_name = "N|NAME", default_value = "0")]
    pub device: String,

    /// The profile file to write (any `--target`/`--profile` takes it).
    #[arg(short, long, value_name = "PROFILE.toml")]
    pub output: PathBuf,

    /// The profile whose numbers the measured ones replace (its other numbers, and their cited
    /// sources, are kept): a builtin name or a profile file. Default: the builtin profile that
    /// lists the device by name, else `generic`.
    #[arg(long, value_name = "PROFILE|BUILTIN")]
    pub base: Option<String>,

    /// Tiny sizes (kilobytes, a 64x64x64 contraction): seconds on any device, for tests; the
    /// figures then describe caches and launch costs, not the device.
    #[arg(long)]
    pub quick: bool,

    /// Timed launches of each micro-benchmark after one warm-up launch; each figure is the
    /// median (default: 5, or 2 with `--quick`).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub repeat: Option<u32>,
}

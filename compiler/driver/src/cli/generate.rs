//! `fbc generate`'s arguments (the command is `generate.rs`).

use std::path::PathBuf;

use clap::Args;

use super::{DeviceArgs, LowerArgs};

/// `fbc generate FILE --prompt IDS`: greedy decoding with an inference module.
#[derive(Debug, Args)]
pub struct GenerateArgs {
    /// The inference module (`fbc gen MODEL --inference`): its `@prefill` and `@decode`.
    pub file: PathBuf,

    /// The prompt's token ids, comma-separated (at most `@prefill`'s length). Once per
    /// sequence of the module's batch (`fbc gen --batch B`): B prompts of one length, which
    /// decode side by side.
    #[arg(long, value_name = "ID,ID,...", required = true, value_parser = parse_prompt)]
    pub prompt: Vec<Prompt>,

    /// Tokens to generate after the prompt (greedy: the most likely each step).
    #[arg(long, value_name = "N", default_value_t = 16)]
    pub max_new: u64,

    /// The weights, by argument name (`embed`, `l0_wq`, ...): a safetensors file, or `fbc
    /// pack`'s `.fbw` (dequantised on the host).
    #[arg(long, value_name = "W.safetensors|W.fbw", required_unless_present = "random_weights")]
    pub weights: Option<PathBuf>,

    /// The encoder's output for a Whisper decoder (`encoder_states`, `[1, E, D]`, in a
    /// safetensors file); without it, `encoder_states` comes from --weights or, with
    /// --random-weights, is random too.
    #[arg(long, value_name = "FILE.safetensors")]
    pub encoder_states: Option<PathBuf>,

    /// Deterministic random weights instead of --weights (tests, benchmarks).
    #[arg(long, value_name = "SEED", conflicts_with = "weights")]
    pub random_weights: Option<u64>,

    /// Where to run: `cpu` (the reference interpreter), `cpu-jit`, `cpu-llvm` or `opencl`.
    #[arg(long, default_value = "cpu")]
    pub target: String,

    // How the module is compiled for `cpu-jit`, `cpu-llvm` and `opencl`.
    #[command(flatten)]
    pub lower: LowerArgs,

    // With `--target opencl`: the device.
    #[command(flatten)]
    pub device: DeviceArgs,
}

/// One sequence's prompt: its token ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prompt(pub Vec<i64>);

fn parse_prompt(s: &str) -> Result<Prompt, String> {
    s.split(',')
        .map(|t| {
            t.trim().parse::<i64>().map_err(|_| format!("`{t}` is not a token id (an integer)"))
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Prompt)
}

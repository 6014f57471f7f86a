use std::path::PathBuf;

use clap::Args;

/// `fbc pack W.safetensors -o W.fbw [--quant ..] [--group N] [--mixed first=F,last=L:Q]
/// [--for MODEL.fbir [--target T]]`, `fbc pack --inspect W.fbw`.
#[derive(Debug, Args)]
pub struct PackArgs {
    /// The safetensors file to pack (F32, F16 or BF16 tensors), or with `--inspect` a `.fbw`.
    pub file: PathBuf,

    /// Output `.fbw` file.
    #[arg(short, long, value_name = "PATH", required_unless_present = "inspect")]
    pub output: Option<PathBuf>,

    /// Storage of the weights (tensors of rank ≥ 2; vectors stay f32): f32, f16, int8 or int4
    /// (symmetric, one f32 scale per `--group` values of the last dimension).
    #[arg(long, default_value = "f32", value_parser = parse_quant)]
    pub quant: fbc_runtime::weights::Quant,

    /// Values per scale of int8/int4 along the last dimension (a row's last group may be
    /// shorter; clamped to the row).
    #[arg(long, default_value = "64", value_parser = clap::value_parser!(u64).range(1..))]
    pub group: u64,

    /// Other storage for the first F and last L decoder layers (by the layer number in each
    /// tensor's name): `first=4,last=4:int8`.
    #[arg(long, value_name = "first=F,last=L:Q", value_parser = parse_mixed)]
    pub mixed: Option<(u64, u64, fbc_runtime::weights::Quant)>,

    /// Largest tile, in bytes (a tile holds at least one row; tiles start on 4 KiB pages).
    #[arg(long, default_value = "1048576", value_parser = clap::value_parser!(u64).range(1..))]
    pub tile_bytes: u64,

    /// Store each weight that MODEL, compiled at -O3 for `--target`, uploads as an R-Tile image
    /// in that form: the image's texels, so that `fbc run --target opencl --profile T --weights`
    /// uploads them as they are, without packing (the weight is the argument of the same name).
    #[arg(long = "for", value_name = "MODEL.fbir")]
    pub for_module: Option<PathBuf>,

    /// The hardware profile `--for` compiles MODEL for: a builtin name (see `fbc targets`) or
    /// a profile file.
    #[arg(long, value_name = "T", default_value = "generic", requires = "for_module")]
    pub target: String,

    /// Validate a `.fbw` (header, manifest, every tile's checksum) and list its tensors.
    #[arg(long)]
    pub inspect: bool,

    /// Print one JSON object (the manifest, or the packing summary).
    #[arg(long)]
    pub json: bool,
}

fn parse_quant(s: &str) -> Result<fbc_runtime::weights::Quant, String> {
    fbc_runtime::weights::Quant::parse(s)
        .ok_or_else(|| format!("`{s}`: expected f32, f16, int8 or int4"))
}

/// `first=F,last=L:Q`.
pub(crate) fn parse_mixed(s: &str) -> Result<(u64, u64, fbc_runtime::weights::Quant), String> {
    let bad = || format!("`{s}`: expected first=F,last=L:Q (say first=4,last=4:int8)");
    let (ranges, q) = s.rsplit_once(':').ok_or_else(bad)?;
    let q = parse_quant(q)?;
    let (mut first, mut last) = (None, None);
    for part in ranges.split(',') {
        let (k, v) = part.split_once('=').ok_or_else(bad)?;
        let v: u64 = v.trim().parse().map_err(|_| bad())?;
        match k.trim() {
            "first" if first.is_none() => first = Some(v),
            "last" if last.is_none() => last = Some(v),
            _ => return Err(bad()),
        }
    }
    if first.is_none() && last.is_none() {
        return Err(bad());
    }
    Ok((first.unwrap_or(0), last.unwrap_or(0), q))
}

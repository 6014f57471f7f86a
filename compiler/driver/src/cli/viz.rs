use std::path::PathBuf;

use clap::Args;

use super::LayoutStrategy;

/// `fbc viz FILE [-O3 --target T] -o out.html`, `fbc viz FILE --tensor NAME --svg -o t.svg`.
#[derive(Debug, Args)]
pub struct VizArgs {
    /// The `.fbir` file (`-` reads standard input).
    pub file: PathBuf,

    /// Optimisation level of the pipeline drawn (default 3: the FBLayout passes).
    #[arg(short = 'O', value_name = "LEVEL", default_value = "3", value_parser = clap::value_parser!(u8).range(0..=3))]
    pub opt_level: u8,

    /// Hardware profile: a builtin name (see `fbc targets`) or a profile file; its texture-cache
    /// block is drawn over the texels.
    #[arg(long, default_value = "generic")]
    pub target: String,

    /// Layout strategy of -O3.
    #[arg(long, value_enum, default_value = "fblayout")]
    pub layout_strategy: LayoutStrategy,

    /// Draw only this function (default: every function).
    #[arg(long, value_name = "NAME")]
    pub func: Option<String>,

    /// A tensor by its SSA name (`q2_rt` or `%q2_rt`): the page opens on its panel; with
    /// `--svg`, only its placement is written.
    #[arg(long, value_name = "NAME")]
    pub tensor: Option<String>,

    /// Write the `--tensor`'s placement as a standalone SVG instead of the page.
    #[arg(long, requires = "tensor")]
    pub svg: bool,

    /// Elements drawn along each side of a placement (`--svg`).
    #[arg(long, value_name = "N", default_value = "64")]
    pub max_side: u64,

    /// Output file (default: standard output).
    #[arg(short, long, value_name = "PATH")]
    pub output: Option<PathBuf>,
}

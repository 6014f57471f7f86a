//! `fbc run`: executes a function (issue 3). Not yet written.

use std::path::PathBuf;

use clap::Args;

use crate::{Driver, Failure};

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The `.fbir` file.
    pub file: PathBuf,
}

pub(crate) fn run(_driver: &Driver, _a: &RunArgs) -> Result<(), Failure> {
    Err(Failure::Usage("`fbc run` is not yet supported".into()))
}

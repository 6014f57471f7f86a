//! `fbc gen`: model generators (issue 3). Not yet written.

use clap::Args;

use crate::{Driver, Failure};

#[derive(Debug, Args)]
pub struct GenArgs {
    /// The model to generate.
    pub model: String,
}

pub(crate) fn run(_driver: &Driver, _a: &GenArgs) -> Result<(), Failure> {
    Err(Failure::Usage("`fbc gen` is not yet supported".into()))
}

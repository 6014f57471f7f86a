//! Errors of loading a hardware profile: an unknown builtin name, unreadable or malformed TOML,
//! or a profile that parses but breaks the invariants `HardwareProfile::validate` checks.

use std::fmt;
use std::path::PathBuf;

use crate::BUILTIN_NAMES;

/// One broken invariant of a hardware profile, found by `HardwareProfile::validate`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValidationProblem {
    /// The dotted TOML path of the offending field, e.g. `texture_cache.block_w`.
    pub field: &'static str,
    /// What is wrong with it, with the offending values.
    pub message: String,
}

impl ValidationProblem {
    pub(crate) fn new(field: &'static str, message: impl Into<String>) -> Self {
        Self { field, message: message.into() }
    }
}

impl fmt::Display for ValidationProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// Why a hardware profile could not be produced.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// `builtin` was asked for a name that has no embedded profile.
    #[error("unknown target `{name}`; known targets: {}", BUILTIN_NAMES.join(", "))]
    UnknownTarget {
        /// The name asked for.
        name: String,
    },
    /// A profile file could not be read.
    #[error("cannot read hardware profile {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying I/O error.
        source: std::io::Error,
    },
    /// The text is not TOML, or does not have the shape of a profile (missing, unknown or
    /// mistyped fields), at 1-based `line` and `column` (1:1 when the parser gives no place).
    #[error("cannot parse hardware profile ({origin}): line {line}, column {column}: {message}")]
    Parse {
        /// Where the text came from: a path, `builtin:<name>` or `<string>`.
        origin: String,
        /// The line of the error.
        line: usize,
        /// The column of the error, in characters.
        column: usize,
        /// The parser's message.
        message: String,
    },
    /// The profile parsed but breaks one or more invariants; all of them are listed.
    #[error("hardware profile `{name}` is invalid:{}", list(problems))]
    Invalid {
        /// The profile's `name` field.
        name: String,
        /// Every problem found, in field order.
        problems: Vec<ValidationProblem>,
    },
    /// A profile could not be written over its base profile's text ([`crate::write_over`]): a
    /// note for a field the profile has not, or a bug (the text did not read back as the
    /// profile).
    #[error("cannot write the hardware profile: {message}")]
    Write {
        /// What went wrong.
        message: String,
    },
}

fn list(problems: &[ValidationProblem]) -> String {
    problems.iter().map(|p| format!("\n  - {p}")).collect()
}

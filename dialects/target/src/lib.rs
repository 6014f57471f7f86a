//! Hardware profiles of fbc's targets.
//!
//! A profile describes one class of device the way FBLayout's R-Tile selection needs it:
//! subgroup size (C1), texture cache line, 2D block geometry and capacities (C2, Eq. 1),
//! `image2d` limits, work-group preferences, and the DRAM bandwidth and peak FLOP/s of the
//! analytic performance model. Builtin profiles live as TOML in `profiles/` (every number there
//! names its source) and are embedded in the binary; a user can supply a measured profile with
//! [`from_toml`] or [`from_path`]. Every profile returned by this crate has passed
//! [`HardwareProfile::validate`]. [`HardwareProfile::to_toml`] writes a profile back in the same
//! format; [`write_over`] writes one over the text of the profile it was derived from, keeping
//! that text's comments and noting each replaced value (`fbc calibrate`, whose measurements
//! beyond the other tables go into the optional `[measured]` table, [`Measured`]).

mod error;
mod measured;
mod profile;
mod table;
mod validate;
mod write;

use std::path::Path;

pub use error::{TargetError, ValidationProblem};
pub use measured::{BlockTime, Date, Measured, Positive};
pub use profile::{
    AttentionParams, Compute, ContractionParams, HardwareProfile, ImageLimits, Memory,
    SkinnyParams, StreamingParams, TextureCache, SKINNY_SIDE, SKINNY_WIDE_MIN_K, TAIL_MAX_FLOPS,
    TAIL_MAX_ITEMS, VECTOR_STORE_MAX_K,
};
pub use table::summary_table;
pub use write::{write_over, Note, NOT_IN_BASE};

/// Names of the builtin profiles, sorted.
pub(crate) const BUILTIN_NAMES: &[&str] = &["adreno", "cpu", "generic", "mali", "nvidia"];

/// The TOML text of the builtin profile `name`, with its comments (the source of each number).
pub fn builtin_text(name: &str) -> Option<&'static str> {
    Some(match name {
        "adreno" => include_str!("../profiles/adreno.toml"),
        "cpu" => include_str!("../profiles/cpu.toml"),
        "generic" => include_str!("../profiles/generic.toml"),
        "mali" => include_str!("../profiles/mali.toml"),
        "nvidia" => include_str!("../profiles/nvidia.toml"),
        _ => return None,
    })
}

/// Names of the builtin profiles, sorted: `adreno, cpu, generic, mali, nvidia`.
pub fn builtin_names() -> &'static [&'static str] {
    BUILTIN_NAMES
}

/// The builtin profile that lists device `device_name` among its `devices` (case-insensitive:
/// the device's name contains an entry, or an entry contains the name), in [`builtin_names`]
/// order; `None` when none does.
pub fn builtin_for_device(device_name: &str) -> Option<&'static str> {
    let device = device_name.trim().to_lowercase();
    if device.is_empty() {
        return None;
    }
    BUILTIN_NAMES.iter().copied().find(|name| {
        builtin(name).is_ok_and(|p| {
            p.devices
                .iter()
                .map(|d| d.trim().to_lowercase())
                .any(|d| !d.is_empty() && (device.contains(&d) || d.contains(&device)))
        })
    })
}

/// The builtin profile called `name`, parsed and validated.
pub fn builtin(name: &str) -> Result<HardwareProfile, TargetError> {
    let text =
        builtin_text(name).ok_or_else(|| TargetError::UnknownTarget { name: name.to_owned() })?;
    parse(text, format!("builtin:{name}"))
}

/// The builtin `generic` profile, parsed once: what a pipeline compiles for when nobody names a
/// target.
pub fn generic() -> &'static HardwareProfile {
    static GENERIC: std::sync::OnceLock<HardwareProfile> = std::sync::OnceLock::new();
    GENERIC.get_or_init(|| builtin("generic").expect("the builtin generic profile is valid"))
}

/// Every builtin profile, in [`builtin_names`] order.
pub fn builtins() -> Result<Vec<HardwareProfile>, TargetError> {
    BUILTIN_NAMES.iter().map(|name| builtin(name)).collect()
}

/// Parses and validates a profile from TOML text, e.g. one measured on a real device.
pub fn from_toml(text: &str) -> Result<HardwareProfile, TargetError> {
    parse(text, "<string>".to_owned())
}

/// The profile `--target`/`--profile` names: a builtin name, or the path of a profile file (one
/// that ends in `.toml` or contains a path separator).
pub fn resolve(name_or_path: &str) -> Result<HardwareProfile, TargetError> {
    if is_path(name_or_path) {
        from_path(Path::new(name_or_path))
    } else {
        builtin(name_or_path)
    }
}

/// Whether `--target`/`--profile` text names a profile file rather than a builtin profile.
pub fn is_path(name_or_path: &str) -> bool {
    name_or_path.ends_with(".toml") || name_or_path.contains(std::path::MAIN_SEPARATOR)
}

/// Reads, parses and validates a profile file.
pub fn from_path(path: &Path) -> Result<HardwareProfile, TargetError> {
    let text = std::fs::read_to_string(path)
        .map_err(|source| TargetError::Io { path: path.to_owned(), source })?;
    parse(&text, path.display().to_string())
}

fn parse(text: &str, origin: String) -> Result<HardwareProfile, TargetError> {
    let profile: HardwareProfile = toml::from_str(text).map_err(|e: toml::de::Error| {
        let mut at = e.span().map_or(0, |r| r.start.min(text.len()));
        while !text.is_char_boundary(at) {
            at -= 1;
        }
        let before = &text[..at];
        let line = before.matches('\n').count() + 1;
        let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        TargetError::Parse { origin, line, column, message: e.message().trim().to_string() }
    })?;
    profile
        .validate()
        .map_err(|problems| TargetError::Invalid { name: profile.name.clone(), problems })?;
    Ok(profile)
}

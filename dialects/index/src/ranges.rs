//! Variable ranges: the facts the user asserts about index variables
//! (`--range d0=0:64` on the command line means `0 <= d0 < 64`).
//!
//! Invariant: every stored range is a non-empty half-open interval
//! `[lo, hi)` with `lo < hi`; constructors reject anything else with a
//! located [`RangeError`]. Simplification results are only guaranteed equal to
//! their inputs for variable values inside these ranges.

use std::collections::BTreeMap;

/// An error in a range specification (`name=lo:hi`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid range spec `{spec}` at byte {offset}: {message}")]
pub struct RangeError {
    /// The offending specification text.
    pub spec: String,
    /// Byte offset inside `spec`.
    pub offset: usize,
    /// Human-readable description.
    pub message: String,
}

/// Half-open value ranges `[lo, hi)` per variable name.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Ranges {
    map: BTreeMap<String, (i64, i64)>,
}

impl Ranges {
    /// No known ranges: every variable is unbounded.
    pub fn new() -> Self {
        Ranges::default()
    }

    /// Declares `lo <= name < hi`, replacing any earlier range for `name`.
    pub fn insert(&mut self, name: impl Into<String>, lo: i64, hi: i64) -> Result<(), RangeError> {
        let name = name.into();
        if lo >= hi {
            return Err(RangeError {
                spec: format!("{name}={lo}:{hi}"),
                offset: name.len() + 1,
                message: format!("empty range: lo ({lo}) must be < hi ({hi})"),
            });
        }
        self.map.insert(name, (lo, hi));
        Ok(())
    }

    /// Builder form of [`Ranges::insert`].
    pub fn with(mut self, name: impl Into<String>, lo: i64, hi: i64) -> Result<Self, RangeError> {
        self.insert(name, lo, hi)?;
        Ok(self)
    }

    /// The half-open range of `name`, if known.
    pub fn get(&self, name: &str) -> Option<(i64, i64)> {
        self.map.get(name).copied()
    }

    /// All ranges, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, (i64, i64))> {
        self.map.iter().map(|(k, v)| (k.as_str(), *v))
    }

    /// Number of ranged variables.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True when no variable has a range.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Parses `name=lo:hi` (whitespace around the parts is allowed).
    pub fn parse_spec(spec: &str) -> Result<(String, i64, i64), RangeError> {
        let err =
            |offset: usize, message: String| RangeError { spec: spec.to_string(), offset, message };
        let eq = spec
            .find('=')
            .ok_or_else(|| err(0, "expected `name=lo:hi`, missing `=`".to_string()))?;
        let name = spec[..eq].trim();
        let valid_ident = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid_ident {
            return Err(err(0, format!("`{name}` is not a valid variable name")));
        }
        let rest = &spec[eq + 1..];
        let colon = rest
            .find(':')
            .ok_or_else(|| err(eq + 1, "expected `lo:hi` after `=`, missing `:`".to_string()))?;
        let number = |text: &str, offset: usize| -> Result<i64, RangeError> {
            let t = text.trim();
            t.parse::<i64>()
                .map_err(|e| err(offset, format!("`{t}` is not a 64-bit integer ({e})")))
        };
        let lo_off = eq + 1;
        let hi_off = lo_off + colon + 1;
        let lo = number(&rest[..colon], lo_off)?;
        let hi = number(&rest[colon + 1..], hi_off)?;
        if lo >= hi {
            return Err(err(lo_off, format!("empty range: lo ({lo}) must be < hi ({hi})")));
        }
        Ok((name.to_string(), lo, hi))
    }

    /// Parses and inserts one `name=lo:hi` spec; a variable that already has a range is an
    /// error (which of two ranges was meant is not for the parser to guess).
    pub fn add_spec(&mut self, spec: &str) -> Result<(), RangeError> {
        let (name, lo, hi) = Ranges::parse_spec(spec)?;
        if let Some((plo, phi)) = self.get(&name) {
            return Err(RangeError {
                spec: spec.to_string(),
                offset: 0,
                message: format!(
                    "`{name}` already has the range {plo}:{phi}; give each variable one range"
                ),
            });
        }
        self.insert(name, lo, hi)
    }

    /// Builds ranges from several `name=lo:hi` specs.
    pub fn from_specs<I, S>(specs: I) -> Result<Self, RangeError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut r = Ranges::new();
        for s in specs {
            r.add_spec(s.as_ref())?;
        }
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_specs() {
        assert_eq!(Ranges::parse_spec("d0=0:64"), Ok(("d0".to_string(), 0, 64)));
        assert_eq!(Ranges::parse_spec(" x = -4 : 4 "), Ok(("x".to_string(), -4, 4)));
        let r = Ranges::from_specs(["d0=0:64", "d1=1:2"]).unwrap();
        assert_eq!(r.get("d0"), Some((0, 64)));
        assert_eq!(r.len(), 2);
    }

    #[test]
    fn rejects_bad_specs_with_offsets() {
        let e = Ranges::parse_spec("d0=64:0").unwrap_err();
        assert!(e.message.contains("empty"), "{e}");
        let e = Ranges::parse_spec("d0=0:x").unwrap_err();
        assert_eq!(e.offset, 5);
        let e = Ranges::parse_spec("d0=a:4").unwrap_err();
        assert_eq!(e.offset, 3);
        assert!(Ranges::parse_spec("d0").is_err());
        assert!(Ranges::parse_spec("d0=0").is_err());
        assert!(Ranges::parse_spec("0d=0:1").is_err());
        assert!(Ranges::parse_spec("d0=0:99999999999999999999").is_err());
        assert!(Ranges::new().insert("x", 3, 3).is_err());
        let e = Ranges::from_specs(["x=0:4", "x=0:8"]).unwrap_err();
        assert_eq!(e.message, "`x` already has the range 0:4; give each variable one range");
        assert_eq!(e.spec, "x=0:8");
    }
}

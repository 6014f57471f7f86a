//! The memory limit of a run: every allocation sized by input data (tensor values, storage,
//! host-side packing, device buffers and images) is checked against one byte limit before it is
//! made, with checked arithmetic, so that a huge shape fails at once with an error naming what
//! would not fit instead of exhausting memory or panicking on "capacity overflow".
//!
//! - The limit is process-wide ([`max_memory`], [`set_max_memory`]): the driver sets it from
//!   `--max-memory SIZE` ([`parse_size`]: `512M`, `8G`, plain bytes); otherwise it is
//!   [`default_max_memory`], half of the memory available (`MemAvailable` of `/proc/meminfo` on
//!   Linux; [`FALLBACK_LIMIT`] elsewhere).
//! - [`check_bytes`] / [`check_elems`] check one allocation; [`crate::interp::check_memory`]
//!   checks, before a run starts, the most a function's values hold at once.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// The limit where the available memory cannot be read: 4 GiB.
pub const FALLBACK_LIMIT: u64 = 4 << 30;

/// 0 means "not set": the default applies.
static LIMIT: AtomicU64 = AtomicU64::new(0);

/// Half of `MemAvailable` from `/proc/meminfo`, else [`FALLBACK_LIMIT`].
pub fn default_max_memory() -> u64 {
    static DEFAULT: OnceLock<u64> = OnceLock::new();
    *DEFAULT.get_or_init(|| {
        std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|s| mem_available(&s))
            .map_or(FALLBACK_LIMIT, |b| (b / 2).max(1))
    })
}

/// `MemAvailable` in bytes from the text of `/proc/meminfo`.
fn mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let mut it = line.split_whitespace().skip(1);
    let n: u64 = it.next()?.parse().ok()?;
    let unit = match it.next() {
        Some("kB") | Some("KB") => 1024,
        None => 1,
        _ => return None,
    };
    n.checked_mul(unit)
}

/// The byte limit in force: the one set with [`set_max_memory`], else the default.
pub fn max_memory() -> u64 {
    match LIMIT.load(Ordering::Relaxed) {
        0 => default_max_memory(),
        n => n,
    }
}

/// Sets the process-wide byte limit (`--max-memory`); 0 restores the default.
pub fn set_max_memory(bytes: u64) {
    LIMIT.store(bytes, Ordering::Relaxed);
}

/// Parses a size: plain bytes (`1048576`), or a number with a binary unit `K`, `M`, `G`, `T`
/// (optionally followed by `B` or `iB`, any case): `512M`, `8G`, `1.5G`, `64KiB`. The result must
/// be at least 1 byte and fit in 64 bits.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let s = text.trim();
    let bad = |why: &str| format!("invalid size `{text}`: {why} (examples: 512M, 8G, 1048576)");
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    if num.is_empty() {
        return Err(bad("expected a number"));
    }
    let shift = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(bad("unknown unit; use K, M, G or T")),
    };
    let bytes = if num.contains('.') {
        let v: f64 = num.parse().map_err(|_| bad("malformed number"))?;
        let b = (v * (1u64 << shift) as f64).floor();
        // 2^64: the first value a u64 cannot hold.
        if b >= 18_446_744_073_709_551_616.0 {
            return Err(bad("more than 2^64 bytes"));
        }
        b as u64
    } else {
        let v: u64 = num.parse().map_err(|_| bad("more than 2^64 bytes"))?;
        v.checked_mul(1u64 << shift).ok_or_else(|| bad("more than 2^64 bytes"))?
    };
    if bytes == 0 {
        return Err(bad("the size must be at least 1 byte"));
    }
    Ok(bytes)
}

/// `4398046511104 bytes (4.0 TiB)`; `more than 2^64 bytes` for an overflow (`None`).
pub fn describe_bytes(bytes: Option<u64>) -> String {
    let Some(b) = bytes else { return "more than 2^64 bytes".to_string() };
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if b < 1024 {
        return format!("{b} bytes");
    }
    let mut v = b as f64 / 1024.0;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    format!("{b} bytes ({v:.1} {})", UNITS[u])
}

/// An allocation that would exceed the memory limit, or whose size overflows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TooLarge {
    /// What would be allocated: `tensor %x (tensor<1048576x1048576xf32>)`.
    pub what: String,
    /// Its size in bytes; `None` when computing it overflows 64 bits.
    pub bytes: Option<u64>,
    /// The limit in force.
    pub limit: u64,
}

impl fmt::Display for TooLarge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} needs {}, over the memory limit of {} (set it with --max-memory)",
            self.what,
            describe_bytes(self.bytes),
            describe_bytes(Some(self.limit))
        )
    }
}

impl std::error::Error for TooLarge {}

impl From<TooLarge> for String {
    fn from(e: TooLarge) -> String {
        e.to_string()
    }
}

/// Checks an allocation of `bytes` (`None`: the size overflowed) against the limit; returns the
/// size as a `usize`.
pub fn check_bytes(what: impl fmt::Display, bytes: Option<u64>) -> Result<usize, TooLarge> {
    let limit = max_memory();
    match bytes.filter(|&b| b <= limit).and_then(|b| usize::try_from(b).ok()) {
        Some(b) => Ok(b),
        None => Err(TooLarge { what: what.to_string(), bytes, limit }),
    }
}

/// Checks an allocation of `elems` elements of `elem_bytes` bytes each; returns the element count
/// as a `usize`.
pub fn check_elems(
    what: impl fmt::Display,
    elems: Option<u64>,
    elem_bytes: u64,
) -> Result<usize, TooLarge> {
    check_bytes(what, elems.and_then(|n| n.checked_mul(elem_bytes)))?;
    // The byte count fits in a usize, so the element count does too.
    Ok(usize::try_from(elems.unwrap_or(0)).unwrap_or(usize::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_units() {
        assert_eq!(parse_size("1048576"), Ok(1 << 20));
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("8G"), Ok(8 << 30));
        assert_eq!(parse_size("8g"), Ok(8 << 30));
        assert_eq!(parse_size("64KiB"), Ok(64 << 10));
        assert_eq!(parse_size("2TB"), Ok(2 << 40));
        assert_eq!(parse_size("1.5G"), Ok(3 << 29));
        assert_eq!(parse_size("100b"), Ok(100));
        for bad in ["", "G", "0", "12Q", "-1", "1.2.3G", "99999999999999999999", "16777216T"] {
            assert!(parse_size(bad).is_err(), "{bad:?} parsed");
        }
        assert_eq!(
            parse_size("12Q").unwrap_err(),
            "invalid size `12Q`: unknown unit; use K, M, G or T (examples: 512M, 8G, 1048576)"
        );
    }

    #[test]
    fn meminfo_is_read_in_kib() {
        let text = "MemTotal:       16000000 kB\nMemFree:  100 kB\nMemAvailable:    8000000 kB\n";
        assert_eq!(mem_available(text), Some(8_000_000 * 1024));
        assert_eq!(mem_available("MemTotal: 5 kB\n"), None);
    }

    #[test]
    fn sizes_are_described_exactly_and_readably() {
        assert_eq!(describe_bytes(Some(100)), "100 bytes");
        assert_eq!(describe_bytes(Some(4 << 40)), "4398046511104 bytes (4.0 TiB)");
        assert_eq!(describe_bytes(None), "more than 2^64 bytes");
    }
}

//! The optional `[measured]` table of a hardware profile: what `fbc calibrate` measured on a
//! device beyond the numbers the other tables hold (read bandwidth by storage and access order,
//! the texture-block probe's evidence, the tiled contraction's rate by operand storage, launch
//! overhead), with the device, driver and date of the measurement.
//!
//! Every value is checked as it is read, so a malformed one is an error at its line and column
//! like a mistyped value of any other table: rates must be finite and positive, the date a real
//! `YYYY-MM-DD` day, block extents powers of two. The builtin profiles have no `[measured]`
//! table; a profile file may.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize};

/// Measurements of one device (`fbc calibrate`), each rate optional: a calibration that cannot
/// measure one (a device without images) leaves it out.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Measured {
    /// The OpenCL device's name (`CL_DEVICE_NAME`).
    pub device: String,
    /// Its driver version (`CL_DRIVER_VERSION`).
    pub driver: String,
    /// The day of the measurement.
    pub date: Date,
    /// Measured with `fbc calibrate --quick`: tiny sizes that fit in caches, for tests; the
    /// rates do not describe the device. Optional: `false`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub quick: bool,
    /// Buffer read bandwidth, GB/s, consecutive work-items reading consecutive `float4`s of a
    /// row (coalesced).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buffer_row_gbps: Option<Positive>,
    /// Buffer read bandwidth, GB/s, consecutive work-items reading `float4`s a row apart (down
    /// a column: strided).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buffer_column_gbps: Option<Positive>,
    /// `image2d` (RGBA float) read bandwidth, GB/s, a work-group's reads at each step spanning
    /// one row of texels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_row_gbps: Option<Positive>,
    /// As `image_row_gbps`, the reads at each step spanning one column of texels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_column_gbps: Option<Positive>,
    /// As `image_row_gbps`, the reads at each step spanning a square tile of texels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_tile_gbps: Option<Positive>,
    /// fbc's tiled contraction kernel with both operands in buffers, GFLOP/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contraction_buffer_gflops: Option<Positive>,
    /// fbc's tiled contraction kernel with R-Tile operands in `image2d` textures, GFLOP/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contraction_image_gflops: Option<Positive>,
    /// Device time of an empty kernel (`END - START` of its profiling event), microseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch_device_us: Option<Positive>,
    /// Device time from one empty kernel's start to the next one's, launched back to back on
    /// an in-order queue, microseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch_interval_us: Option<Positive>,
    /// Host wall time per launch of many empty kernels enqueued back to back and waited for
    /// once, microseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch_host_us: Option<Positive>,
    /// `CL_KERNEL_PREFERRED_WORK_GROUP_SIZE_MULTIPLE` of a simple kernel: the driver's
    /// execution width hint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub work_group_multiple: Option<u32>,
    /// The texture-block probe: the time to read one `h × w`-texel footprint, aligned to the
    /// block grid and far from any other read, per footprint shape (the evidence behind
    /// `texture_cache.block_h`/`block_w`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub texture_blocks: Vec<BlockTime>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// One footprint shape of the texture-block probe and its read time.
#[derive(Clone, Copy, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BlockTime {
    /// Rows of texels, a power of two.
    #[serde(deserialize_with = "power_of_two")]
    pub h: u32,
    /// Texels per row, a power of two.
    #[serde(deserialize_with = "power_of_two")]
    pub w: u32,
    /// Nanoseconds per footprint read (the median launch's time over its footprints).
    pub ns: Positive,
}

fn power_of_two<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    let v = i64::deserialize(d)?;
    match u32::try_from(v) {
        Ok(p) if p.is_power_of_two() => Ok(p),
        _ => Err(serde::de::Error::custom(format!("{v} is not a power of two"))),
    }
}

/// A finite, positive number (a rate or a time). Only [`Positive::new`] makes one, so a value
/// of this type is always valid.
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd, Serialize)]
#[serde(transparent)]
pub struct Positive(f64);

impl Positive {
    /// `v` if it is finite and greater than zero.
    pub fn new(v: f64) -> Option<Positive> {
        (v.is_finite() && v > 0.0).then_some(Positive(v))
    }

    /// The number.
    pub fn get(self) -> f64 {
        self.0
    }
}

impl<'de> Deserialize<'de> for Positive {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Positive, D::Error> {
        let v = f64::deserialize(d)?;
        Positive::new(v).ok_or_else(|| {
            serde::de::Error::custom(format!("{v} must be a finite positive number"))
        })
    }
}

impl fmt::Display for Positive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A calendar day, written `YYYY-MM-DD` (a string in the profile). Only [`Date::new`] and
/// parsing make one, so a value of this type is a real day.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Date {
    year: u32,
    month: u32,
    day: u32,
}

impl Date {
    /// The day `year-month-day` of the proleptic Gregorian calendar (years 1 to 9999).
    pub fn new(year: u32, month: u32, day: u32) -> Option<Date> {
        let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
        let days = match month {
            1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
            4 | 6 | 9 | 11 => 30,
            2 if leap => 29,
            2 => 28,
            _ => return None,
        };
        ((1..=9999).contains(&year) && (1..=days).contains(&day)).then_some(Date {
            year,
            month,
            day,
        })
    }

    /// The day `days` days after 1970-01-01 (a Unix time divided by 86,400), by Howard
    /// Hinnant's `civil_from_days`.
    pub fn from_unix_days(days: u64) -> Option<Date> {
        let z = i64::try_from(days).ok()?.checked_add(719_468)?;
        let era = z / 146_097;
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = doy - (153 * mp + 2) / 5 + 1;
        let month = if mp < 10 { mp + 3 } else { mp - 9 };
        let year = yoe + era * 400 + i64::from(month <= 2);
        Date::new(u32::try_from(year).ok()?, u32::try_from(month).ok()?, u32::try_from(day).ok()?)
    }

    /// Today, from the system clock (UTC); `None` if the clock is before 1970 or after 9999.
    pub fn today() -> Option<Date> {
        let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).ok()?;
        Date::from_unix_days(secs.as_secs() / 86_400)
    }
}

impl std::str::FromStr for Date {
    type Err = String;

    fn from_str(s: &str) -> Result<Date, String> {
        let bad = || format!("`{s}` is not a date of the form YYYY-MM-DD");
        let parts: Vec<&str> = s.split('-').collect();
        let [y, m, d] = parts.as_slice() else { return Err(bad()) };
        if y.len() != 4 || m.len() != 2 || d.len() != 2 {
            return Err(bad());
        }
        let num = |t: &str| {
            t.bytes().all(|b| b.is_ascii_digit()).then(|| t.parse::<u32>().ok()).flatten()
        };
        let (Some(y), Some(m), Some(d)) = (num(y), num(m), num(d)) else { return Err(bad()) };
        Date::new(y, m, d).ok_or_else(|| format!("`{s}` is not a day of the calendar"))
    }
}

impl fmt::Display for Date {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04}-{:02}-{:02}", self.year, self.month, self.day)
    }
}

impl Serialize for Date {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Date {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Date, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_since_the_epoch_are_calendar_days() {
        // Hand-worked: 1970-01-01 is day 0; 2000-03-01 is 11,017 days later (30 years of 365
        // days, 7 leap days 1972-1996, then January's 31 and leap February's 29); 2024-02-29
        // is day 19,782.
        assert_eq!(Date::from_unix_days(0).map(|d| d.to_string()).as_deref(), Some("1970-01-01"));
        assert_eq!(
            Date::from_unix_days(30 * 365 + 7 + 31 + 29).map(|d| d.to_string()).as_deref(),
            Some("2000-03-01")
        );
        assert_eq!(Date::from_unix_days(19_782), Date::new(2024, 2, 29));
        assert_eq!(Date::from_unix_days(u64::MAX), None);
    }

    #[test]
    fn dates_parse_only_as_real_days() {
        assert_eq!("2026-05-01".parse::<Date>(), Ok(Date::new(2026, 5, 1).expect("a day")));
        for bad in
            ["2026-5-01", "2026-02-30", "2025-13-01", "26-05-01", "2026-05-01x", "+026-05-01"]
        {
            assert!(bad.parse::<Date>().is_err(), "{bad}");
        }
        assert!("2024-02-29".parse::<Date>().is_ok() && "2100-02-29".parse::<Date>().is_err());
    }

    #[test]
    fn positive_numbers_only() {
        assert_eq!(Positive::new(2.5).map(Positive::get), Some(2.5));
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert_eq!(Positive::new(bad), None, "{bad}");
        }
    }
}

//! The tuning database that `fbc tune` writes and the OpenCL writer reads: for each device (name
//! and driver version) the tiled-contraction parameters measured fastest for each contraction
//! *shape class* ([`shape_key`]: batch count, `M`, `N`, `K` and whether each operand is an image).
//!
//! A launch whose shape class has an entry is written with that entry's work-group and
//! [`ContractionParams`]; every other one with the hardware profile's analytic defaults. Entries
//! only choose among parameter sets the writer supports for every shape (the writer still halves
//! `tile_k` to fit local memory and narrows the group along short sides), so a tuning file can
//! make a kernel slower, never wrong. A file that does not parse, has another version or is for
//! another device is ignored with a warning by its reader (`fbc` driver, `tuning` module).

use std::collections::BTreeMap;

use fbc_target::ContractionParams;
use serde::{Deserialize, Serialize};

/// The version of the file format this build reads and writes.
pub const TUNING_VERSION: u32 = 1;

/// The parameters of one shape class, and what they measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tuned {
    /// Work-group `[x, y]`.
    pub group: [u64; 2],
    /// Register block `[columns, rows]`.
    pub per_item: [u32; 2],
    pub tile_k: u32,
    pub local_vector: u32,
    pub stage_along_k: bool,
    /// Register prefetch (absent in files written before `fbc tune` varied it: `false`, as
    /// they were measured).
    #[serde(default)]
    pub prefetch: bool,
    /// Four-wide global loads of buffer operands (absent in files written before the kernel
    /// had them: `false`, as they were measured).
    #[serde(default)]
    pub vector_loads: bool,
    /// Device time of the shape's launches in one run with these parameters, in nanoseconds
    /// (median of the tuning runs).
    pub ns: u64,
    /// The same with the profile's defaults.
    pub default_ns: u64,
}

impl Tuned {
    /// The contraction parameters of the entry over `base` (the profile's: what tuning does
    /// not choose).
    pub fn params(&self, base: ContractionParams) -> ContractionParams {
        ContractionParams {
            per_item: self.per_item,
            tile_k: self.tile_k,
            local_vector: self.local_vector,
            stage_along_k: self.stage_along_k,
            prefetch: self.prefetch,
            vector_loads: self.vector_loads,
            ..base
        }
    }
}

/// The entries of one device.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceTuning {
    /// `CL_DEVICE_NAME`.
    pub device: String,
    /// `CL_DRIVER_VERSION`.
    pub driver: String,
    /// The hardware profile whose lowering was tuned (`nvidia`, or a profile file's name).
    pub profile: String,
    /// Shape class ([`shape_key`]) to its parameters.
    pub shapes: BTreeMap<String, Tuned>,
}

/// A tuning file: entries for one or more devices.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TuningDb {
    pub version: u32,
    pub devices: Vec<DeviceTuning>,
}

impl Default for TuningDb {
    fn default() -> TuningDb {
        TuningDb { version: TUNING_VERSION, devices: Vec::new() }
    }
}

impl TuningDb {
    /// Reads a tuning file; why not, when it is not one this build reads.
    pub fn parse(text: &str) -> Result<TuningDb, String> {
        // The version first, so that a file of another version says so rather than failing on
        // a field it may have added.
        #[derive(Deserialize)]
        struct Version {
            version: u32,
        }
        let v: Version = serde_json::from_str(text).map_err(|e| e.to_string())?;
        if v.version != TUNING_VERSION {
            return Err(format!("version {} (this fbc reads version {TUNING_VERSION})", v.version));
        }
        serde_json::from_str(text).map_err(|e| e.to_string())
    }

    /// The file's text.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default() + "\n"
    }

    /// The entries measured on device `name` with driver `driver`.
    pub fn for_device(&self, name: &str, driver: &str) -> Option<&DeviceTuning> {
        self.devices.iter().find(|d| d.device == name && d.driver == driver)
    }

    /// The first device's entries whose name contains one of `names` (a hardware profile's
    /// `devices`), case-insensitively: what a compile for that profile uses, with no device to
    /// ask.
    pub fn for_names(&self, names: &[String]) -> Option<&DeviceTuning> {
        self.devices.iter().find(|d| {
            let dev = d.device.to_lowercase();
            names.iter().any(|n| !n.is_empty() && dev.contains(&n.to_lowercase()))
        })
    }

    /// Adds `new`'s entries, replacing those of the same device, driver and shape class.
    pub fn merge(&mut self, new: DeviceTuning) {
        match self.devices.iter_mut().find(|d| d.device == new.device && d.driver == new.driver) {
            Some(d) => {
                d.profile = new.profile;
                d.shapes.extend(new.shapes);
            }
            None => self.devices.push(new),
        }
    }
}

/// The shape class of a tiled contraction: `batches × (M × K) · (K × N)`, and which of the two
/// operands and the output are images (`i`) or buffers (`b`): `b32_m512_n512_k64_ibb`.
pub fn shape_key(batches: u64, m: u64, n: u64, k: u64, images: [bool; 3]) -> String {
    let c = |i: bool| if i { 'i' } else { 'b' };
    format!("b{batches}_m{m}_n{n}_k{k}_{}{}{}", c(images[0]), c(images[1]), c(images[2]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(ns: u64) -> Tuned {
        Tuned {
            group: [16, 8],
            per_item: [4, 8],
            tile_k: 32,
            local_vector: 4,
            stage_along_k: true,
            prefetch: true,
            vector_loads: true,
            ns,
            default_ns: 2 * ns,
        }
    }

    fn db() -> TuningDb {
        let mut shapes = BTreeMap::new();
        shapes.insert(shape_key(1, 512, 8192, 2048, [true, true, true]), entry(100));
        TuningDb {
            version: TUNING_VERSION,
            devices: vec![DeviceTuning {
                device: "NVIDIA H200".into(),
                driver: "580.159".into(),
                profile: "nvidia".into(),
                shapes,
            }],
        }
    }

    #[test]
    fn a_database_round_trips() {
        let d = db();
        let back = TuningDb::parse(&d.to_json()).expect("parses");
        assert_eq!(back, d);
        assert_eq!(
            back.devices[0].shapes.keys().next().map(String::as_str),
            Some("b1_m512_n8192_k2048_iii")
        );
        assert!(back.devices[0]
            .shapes
            .values()
            .all(|t| t.params(ContractionParams::default()).prefetch));
        // An entry written before `fbc tune` varied prefetch was measured without it.
        let old = d.to_json().replace("\"prefetch\": true,", "");
        assert_ne!(old, d.to_json());
        let back = TuningDb::parse(&old).expect("parses");
        assert!(back.devices[0].shapes.values().all(|t| !t.prefetch));
    }

    #[test]
    fn truncated_foreign_version_and_unknown_fields_are_refused() {
        let text = db().to_json();
        let cut = TuningDb::parse(&text[..text.len() / 2]).expect_err("truncated");
        assert!(cut.contains("EOF"), "{cut}");
        let v2 = text.replacen("\"version\": 1", "\"version\": 2", 1);
        assert_eq!(
            TuningDb::parse(&v2).expect_err("version"),
            "version 2 (this fbc reads version 1)"
        );
        let extra = text.replacen("\"tile_k\"", "\"tile_m\": 3, \"tile_k\"", 1);
        assert!(TuningDb::parse(&extra).expect_err("field").contains("unknown field `tile_m`"));
        assert!(TuningDb::parse("[1, 2]").is_err());
    }

    #[test]
    fn lookup_by_device_and_driver_or_by_profile_names() {
        let d = db();
        assert!(d.for_device("NVIDIA H200", "580.159").is_some());
        assert!(d.for_device("NVIDIA H200", "575.1").is_none());
        assert!(d.for_device("NVIDIA H100", "580.159").is_none());
        assert!(d.for_names(&["nvidia h200".into()]).is_some());
        assert!(d.for_names(&["Mali-G925".into(), String::new()]).is_none());
    }

    #[test]
    fn merging_replaces_a_devices_shapes_and_adds_new_devices() {
        let mut d = db();
        let mut new = d.devices[0].clone();
        let key = new.shapes.keys().next().cloned().unwrap_or_default();
        new.shapes.insert(key.clone(), entry(50));
        new.shapes.insert(shape_key(32, 512, 512, 64, [false; 3]), entry(7));
        d.merge(new);
        assert_eq!(d.devices.len(), 1);
        assert_eq!(d.devices[0].shapes.len(), 2);
        assert_eq!(d.devices[0].shapes[&key].ns, 50);
        let mut other = d.devices[0].clone();
        other.driver = "590.1".into();
        d.merge(other);
        assert_eq!(d.devices.len(), 2);
    }
}

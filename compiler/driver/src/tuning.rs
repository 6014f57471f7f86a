//! Tuned contraction parameters: where the database lives, reading it (a file that cannot be used
//! is a warning, never an error: the profile's defaults apply), and `fbc tune`, which writes it.
//!
//! `fbc tune FILE --device D` compiles the function once for the hardware profile, then writes
//! its OpenCL C once per candidate parameter set ([`CANDIDATES`], the profile's own first) and
//! times every run on the device; each tiled contraction launch carries its shape class
//! (`fbc_codegen::opencl::shape_key`), and each class keeps the candidate whose launches took the
//! least device time. The winners go into the database under the device's name and driver
//! version, merged with what it held. `fbc run --target opencl` and `fbc bench` use the entries
//! of the device they run on; `fbc FILE --target T` those of the first device whose name
//! contains one of the profile's `devices`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use fbc_codegen::opencl::{Tuned, TuningDb};

use crate::cli::TuneArgs;

/// Tuned entries by shape class, as the OpenCL writer takes them.
pub(crate) type Entries = Arc<BTreeMap<String, Tuned>>;

/// The database `fbc tune` writes and the other commands read without `--tuning`:
/// `tuning.json` in the cache directory (next to the program-binary cache).
pub(crate) fn default_path() -> Option<PathBuf> {
    fbc_runtime::cache_dir().map(|d| d.join("tuning.json"))
}

/// Which entries of a database apply.
#[derive(Clone, Copy)]
pub(crate) enum For<'a> {
    /// Those measured on this device (name, driver version).
    #[cfg_attr(not(feature = "opencl"), allow(dead_code))]
    Device { name: &'a str, driver: &'a str },
    /// Those of the first device named by the profile (`devices`): a compile with no device.
    Profile(&'a fbc_target::HardwareProfile),
}

/// Reads the database at `explicit` (`--tuning FILE`), else at [`default_path`], and returns the
/// entries that apply. A default database that does not exist is silently absent; any other
/// database that cannot be read, does not parse, has another version or has no entries for the
/// device is reported on standard error and ignored.
pub(crate) fn load(explicit: Option<&Path>, want: For<'_>) -> Entries {
    let Some(path) = explicit.map(Path::to_path_buf).or_else(default_path) else {
        return Entries::default();
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if explicit.is_none() && e.kind() == std::io::ErrorKind::NotFound => {
            return Entries::default()
        }
        Err(e) => return ignored(&path, &e.to_string()),
    };
    let db = match TuningDb::parse(&text) {
        Ok(db) => db,
        Err(e) => return ignored(&path, &e),
    };
    let found = match want {
        For::Device { name, driver } => db.for_device(name, driver).ok_or_else(|| {
            let have: Vec<String> =
                db.devices.iter().map(|d| format!("{} (driver {})", d.device, d.driver)).collect();
            format!(
                "no entries for {name} (driver {driver}); it has {}",
                if have.is_empty() { "none".to_string() } else { have.join(", ") }
            )
        }),
        For::Profile(p) => db.for_names(&p.devices).ok_or_else(|| {
            format!("no entries for a device of profile `{}` ({})", p.name, p.devices.join(", "))
        }),
    };
    match found {
        Ok(d) => Arc::new(d.shapes.clone()),
        // A default database for other devices is normal (a machine with two devices): say so
        // only for a file the user named.
        Err(e) if explicit.is_some() => ignored(&path, &e),
        Err(_) => Entries::default(),
    }
}

fn ignored(path: &Path, why: &str) -> Entries {
    eprintln!(
        "fbc: warning: ignoring tuning database {}: {why}; using the hardware profile's contraction parameters",
        path.display()
    );
    Entries::default()
}

/// A candidate parameter set of the tuner: work-group `[x, y]`, register block `[columns, rows]`,
/// `tile_k`, `local_vector`, `stage_along_k`, `prefetch`.
pub type Candidate = ([u64; 2], [u32; 2], u32, u32, bool, bool);

/// The parameter sets `fbc tune` times besides the profile's own, in this order (the budget may
/// end the list): the register blocks, k steps, group shapes, staging orders and prefetch choices
/// that won some contraction on the devices measured so far (the H200 sweeps of
/// `tests/bench/h200.sh`: 8 x 8 and 4 x 8 blocks with prefetch first), and smaller ones for
/// narrow products and devices with little local memory or few registers.
pub const CANDIDATES: &[Candidate] = &[
    ([16, 16], [8, 8], 16, 4, true, true),
    ([16, 8], [8, 8], 16, 4, true, true),
    ([16, 16], [8, 8], 8, 4, true, true),
    ([16, 16], [4, 8], 16, 4, true, true),
    ([32, 8], [4, 8], 32, 4, true, true),
    ([16, 16], [4, 4], 32, 4, true, true),
    ([16, 16], [4, 4], 16, 4, true, false),
    ([16, 16], [4, 4], 32, 4, true, false),
    ([16, 16], [4, 8], 16, 4, true, false),
    ([16, 16], [4, 8], 32, 4, true, false),
    ([16, 16], [8, 4], 16, 4, true, false),
    ([16, 16], [8, 8], 16, 4, true, false),
    ([16, 16], [8, 8], 16, 4, false, true),
    ([32, 8], [4, 4], 16, 4, true, false),
    ([32, 8], [4, 8], 16, 4, true, false),
    ([16, 16], [4, 4], 16, 1, true, false),
    ([8, 8], [4, 4], 16, 4, true, false),
    ([8, 8], [2, 2], 8, 1, true, false),
];

/// The parameter set `k` uses (the inverse of [`with_candidate`]).
pub fn candidate_of(k: &fbc_codegen::opencl::KernelOptions) -> Candidate {
    let c = &k.contraction;
    (k.group, c.per_item, c.tile_k, c.local_vector, c.stage_along_k, c.prefetch)
}

/// Kernel options of `profile` with candidate `c` for every contraction.
pub fn with_candidate(
    profile: &fbc_target::HardwareProfile,
    c: Candidate,
) -> fbc_codegen::opencl::KernelOptions {
    let mut k = fbc_codegen::opencl::KernelOptions::for_target(profile);
    k.group = c.0;
    k.contraction = fbc_target::ContractionParams {
        per_item: c.1,
        tile_k: c.2,
        local_vector: c.3,
        stage_along_k: c.4,
        prefetch: c.5,
        // Not tuned choices: the profile's.
        vector_loads: profile.contraction.vector_loads,
        resident_work_items: profile.contraction.resident_work_items,
    };
    k
}

#[cfg(not(feature = "opencl"))]
pub(crate) fn tune(
    _driver: &crate::Driver,
    _a: &TuneArgs,
    _quiet: bool,
) -> Result<(), crate::Failure> {
    Err(crate::run_cmd::opencl::no_opencl())
}

/// `fbc tune`: see the module documentation. `quiet` (`-q`) hides the progress bar.
#[cfg(feature = "opencl")]
pub(crate) fn tune(
    driver: &crate::Driver,
    a: &TuneArgs,
    quiet: bool,
) -> Result<(), crate::Failure> {
    use crate::run_cmd::opencl as rc;
    use crate::Failure;
    use fbc_codegen::opencl::{DeviceTuning, Options, Writer};
    use fbc_runtime::device::opencl::{DeviceSel, RunOptions};

    let sel = DeviceSel::parse(&a.device);
    let dev =
        fbc_runtime::device::opencl::device(&sel).map_err(|e| Failure::Usage(e.to_string()))?;
    let session = a.lower.session(driver, fbc_transforms::lower::SplitK::Auto)?;
    let c = rc::compile(&session, &a.file, a.entry.as_deref(), true, Entries::default())?;
    let profile = &session.profile;
    let fname = c.entry_name();
    let inputs =
        c.inputs(crate::run_cmd::io::Sources { seed: Some(a.seed), ..Default::default() })?;
    let own = candidate_of(&fbc_codegen::opencl::KernelOptions::for_target(profile));
    let mut candidates = vec![own];
    candidates.extend(CANDIDATES.iter().copied().filter(|&c| c != own));
    // Device time of each shape class's launches under each candidate (None: not run).
    let mut times: BTreeMap<String, Vec<Option<u64>>> = BTreeMap::new();
    let mut launches: BTreeMap<String, usize> = BTreeMap::new();
    let bar = crate::progress::bar(candidates.len() as u64, "parameter sets", quiet);
    let start = std::time::Instant::now();
    let mut skipped = 0usize;
    for (i, &cand) in candidates.iter().enumerate() {
        if i > 0 && start.elapsed().as_secs_f64() > a.budget {
            skipped = candidates.len() - i;
            break;
        }
        bar.set_message(format!(
            "parameter set group {:?} per_item {:?} tile_k {} local_vector {} prefetch {}",
            cand.0, cand.1, cand.2, cand.3, cand.5
        ));
        let opts = Options { kernels: with_candidate(profile, cand), ..Options::default() };
        let out =
            Writer::new(opts).write(&c.lowered).map_err(|e| Failure::Input(format!("{e}\n")))?;
        let run_opts =
            RunOptions { device: sel.clone(), repeat: a.repeat.max(1), ..RunOptions::default() };
        let res = match fbc_runtime::device::opencl::run(
            &out.source,
            &out.manifest,
            &fname,
            &inputs,
            &run_opts,
        ) {
            Ok(r) => r,
            // The profile's own parameters must run; a candidate the device refuses (too much
            // local memory, too large a group) is left out.
            Err(e) if i > 0 => {
                // (`println` of a hidden bar prints nothing: the note goes to stderr itself.)
                bar.suspend(|| eprintln!("candidate {cand:?} does not run here: {e}"));
                bar.inc(1);
                continue;
            }
            Err(e) => return Err(rc::device_failure(&c.file.name, &e)),
        };
        let f = out
            .manifest
            .function(&fname)
            .ok_or_else(|| Failure::Usage(format!("no function @{fname} in the manifest")))?;
        let mut here: BTreeMap<String, u64> = BTreeMap::new();
        let mut count: BTreeMap<String, usize> = BTreeMap::new();
        for (l, t) in f.launches().zip(&res.launches) {
            if let Some(shape) = &l.shape {
                *here.entry(shape.clone()).or_default() += t.median_ns();
                *count.entry(shape.clone()).or_default() += 1;
            }
        }
        for (shape, ns) in here {
            let row = times.entry(shape).or_insert_with(|| vec![None; candidates.len()]);
            row[i] = Some(ns);
        }
        if i == 0 {
            launches = count;
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    let mut shapes = BTreeMap::new();
    let mut report = format!(
        "{} on {} (driver {}), profile {}: {} of {} parameter sets timed, {:.1} s\n  {:<32} {:>8} {:>11} {:>11} {:>7}  parameters\n",
        c.file.name,
        dev.name,
        dev.driver,
        profile.name,
        candidates.len() - skipped,
        candidates.len(),
        start.elapsed().as_secs_f64(),
        "shape class",
        "launches",
        "default ms",
        "tuned ms",
        "speedup"
    );
    for (shape, row) in &times {
        let Some(default_ns) = row[0] else { continue };
        let (best, ns) = row
            .iter()
            .enumerate()
            .filter_map(|(i, t)| t.map(|t| (i, t)))
            .min_by_key(|&(i, t)| (t, i))
            .unwrap_or((0, default_ns));
        let (group, per_item, tile_k, local_vector, stage_along_k, prefetch) = candidates[best];
        shapes.insert(
            shape.clone(),
            Tuned {
                group,
                per_item,
                tile_k,
                local_vector,
                stage_along_k,
                prefetch,
                vector_loads: profile.contraction.vector_loads,
                ns,
                default_ns,
            },
        );
        let rows_first = if stage_along_k { "" } else { " rows-first" };
        let prefetch = if prefetch { " prefetch" } else { "" };
        report.push_str(&format!(
            "  {:<32} {:>8} {:>11.4} {:>11.4} {:>6.2}x  group {group:?} per_item {per_item:?} tile_k {tile_k} local_vector {local_vector}{rows_first}{prefetch}\n",
            shape,
            launches.get(shape).copied().unwrap_or(0),
            default_ns as f64 * 1e-6,
            ns as f64 * 1e-6,
            default_ns as f64 / ns.max(1) as f64,
        ));
    }
    let path = a.tuning.clone().or_else(default_path).ok_or_else(|| {
        Failure::Usage("no cache directory (set FBC_CACHE_DIR) and no --tuning FILE".into())
    })?;
    let mut db = match std::fs::read_to_string(&path) {
        Ok(text) => TuningDb::parse(&text).unwrap_or_else(|e| {
            eprintln!("fbc: warning: replacing tuning database {}: {e}", path.display());
            TuningDb::default()
        }),
        Err(_) => TuningDb::default(),
    };
    db.merge(DeviceTuning {
        device: dev.name.clone(),
        driver: dev.driver.clone(),
        profile: profile.name.clone(),
        shapes,
    });
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| Failure::Usage(format!("cannot create {}: {e}", dir.display())))?;
    }
    crate::output::write_atomic(&path, db.to_json().as_bytes())?;
    report.push_str(&format!("wrote {}\n", path.display()));
    print!("{report}");
    Ok(())
}

//! The OpenCL runtime: runs a function of the launch manifest `fbc_codegen::opencl` writes, on a
//! device, through the `ocl` crate.
//!
//! - **Devices** are numbered across platforms in the order the ICD loader lists them
//!   ([`devices`]); `fbc devices` prints that list, `--device N|NAME` picks one ([`DeviceSel`]).
//! - **Sessions** ([`Session`]): a device, its program and each function's kernel objects and
//!   storage pool kept from call to call, and arguments kept on the device under a key between
//!   calls ([`Input::Keep`]: weights uploaded once, a KV cache updated in place and never read
//!   back); [`run`] makes one for a single function and drops it (`opencl/session.rs`).
//! - **Programs** are built once per session; a build failure carries the build log with every
//!   `LINE:COL` it cites followed by that `.cl` line and the op whose kernel holds it
//!   ([`map_build_log`]). Built binaries are cached on disk ([`cache_dir`]): the key hashes the
//!   source, the device and platform names, the driver version and the build options; an entry
//!   that does not read back or does not load is rebuilt from source and replaced.
//! - **Storage** follows the manifest's steps: buffers and `image2d` (RGBA, FLOAT; RGBA,
//!   HALF_FLOAT for `f16` storage) objects are created at `alloc`/`upload` and released at
//!   `dealloc` (a `fill` step zeroes an allocation that may be read before it is fully written;
//!   a `copy` step snapshots a launch's output that the launch also reads); uploads are packed by
//!   their layout on the host ([`crate::exec::pack`], which
//!   rounds to `f16` for an `f16` image; the rounded values are then converted to `f16` bits
//!   exactly), downloads read back (`f16` bits widened to `f32`) and unpacked. Images are checked
//!   against the device's limits, and `f16` images against its supported image formats, before
//!   anything is created.
//! - **Launches** go to one in-order queue with profiling enabled; each launch's device time
//!   (`END - START` of its event, in ns) is reported per kernel and run, and for the last timed
//!   run also where it started (`START` after the run's first launch's `START`: `fbc bench
//!   --timeline`).
//! - **Faults**: launches with a `fault_id` check the accesses the compiler could not prove in
//!   range (data-dependent `xK[e]` loads); they take one error buffer, created and zero-filled
//!   once per run and read once after the queue finishes (no synchronisation per launch). A
//!   recorded fault becomes [`OpenClError::Fault`], at the launch's op, worded as the reference
//!   executor words the same fault; no results are returned.
//!
//! - **Micro-benchmarks** (`fbc calibrate`): [`device_facts`] answers the device queries, and
//!   [`probe`] times kernels that are not a function's launches (reads in chosen orders, an
//!   empty kernel) through the same device selection, program build, images and profiling
//!   events (`opencl/probe.rs`).
//!
//! Nothing here panics on a bad manifest or device: every failure is an [`OpenClError`].

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

mod probe;
mod session;
pub use probe::{
    device_facts, probe, DeviceFacts, Probe, ProbeArg, ProbeLaunch, ProbeOutput, ProbeStorage,
    ProbeTimes,
};
pub use session::{CallOutput, Input, Produced, Producer, Session};

use fbc_codegen::opencl::{
    ConstantDesc, Dtype, FunctionManifest, LayoutDesc, Manifest, Step, StorageDesc, StorageKind,
    FAULT_DIMS, FAULT_INTS, MANIFEST_VERSION,
};
use fbc_dialects::layout::Layout;
use fbc_dialects::memory::MemType;
use fbc_ir::ElemType;

use crate::exec::{pack, unpack, MemData};
use crate::interp::Value;
use crate::reference::Tensor;
use ocl::enums::{
    DeviceInfo, DeviceInfoResult, ImageChannelDataType, ImageChannelOrder, MemObjectType,
    ProfilingInfo, ProfilingInfoResult, ProgramInfo, ProgramInfoResult,
};
use ocl::flags::{CommandQueueProperties, MemFlags};
use ocl::{
    Buffer, Context, Device, Event, Image, Kernel, MemMap, Platform, Program, Queue, SpatialDims,
};

/// Why an OpenCL run failed.
#[derive(Debug, thiserror::Error)]
pub enum OpenClError {
    /// No platform or device, or the requested one does not exist.
    #[error("no OpenCL device: {0}")]
    NoDevice(String),
    /// The device cannot run the module (no image support, an image larger than it allows).
    #[error("the OpenCL device cannot run this module: {0}")]
    Unsupported(String),
    /// The OpenCL C did not compile; the log is mapped to the source (see [`map_build_log`]).
    #[error("OpenCL kernel build failed:\n{0}")]
    Build(String),
    /// The manifest does not fit the inputs or the source.
    #[error("{0}")]
    Manifest(String),
    /// A launch failed for lack of resources (work-group too large, too much local memory or
    /// too many registers for the device).
    #[error("out of resources launching {kernel} ({location}): {message}")]
    OutOfResources { kernel: String, location: String, message: String },
    /// A kernel's run-time bounds check failed (a data-dependent index out of range): the
    /// launch's `.fbir` location and the message, in the reference executor's words.
    #[error("{message}")]
    Fault { location: String, message: String },
    /// The run would hold more than the memory limit ([`crate::limits`]).
    #[error("{0}")]
    Memory(crate::limits::TooLarge),
    /// A storage object would take the device past [`RunOptions::memory_budget`] with every
    /// pooled object released.
    #[error("{0}")]
    Budget(String),
    /// Any other OpenCL error.
    #[error("OpenCL error: {0}")]
    Ocl(String),
}

fn ocl_err(e: impl std::fmt::Display) -> OpenClError {
    OpenClError::Ocl(e.to_string())
}

/// One device, as [`devices`] numbers it.
#[derive(Debug, Clone)]
pub struct DeviceInfoRow {
    pub index: usize,
    pub platform: String,
    pub name: String,
    pub vendor: String,
    pub version: String,
    pub driver: String,
    device: Device,
    platform_id: Platform,
}

/// Which device to run on: a number from [`devices`], or a case-insensitive substring of the
/// device name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceSel {
    Index(usize),
    Name(String),
}

impl DeviceSel {
    /// `"2"` is device 2, anything else a name.
    pub fn parse(s: &str) -> DeviceSel {
        s.parse().map_or_else(|_| DeviceSel::Name(s.to_string()), DeviceSel::Index)
    }
}

impl Default for DeviceSel {
    fn default() -> DeviceSel {
        DeviceSel::Index(0)
    }
}

/// Serialises OpenCL use within the process: PoCL crashed (SIGSEGV) when tests created contexts
/// and built programs from several threads at once, and one run at a time costs nothing here.
static OPENCL: Mutex<()> = Mutex::new(());

/// Every device of every platform, numbered from 0. No ICD loader or no platform gives an empty
/// list (not an error), so callers decide whether that is fatal.
pub fn devices() -> Vec<DeviceInfoRow> {
    let _guard = OPENCL.lock().unwrap_or_else(|p| p.into_inner());
    list_devices()
}

/// The device `sel` picks, as [`devices`] lists it.
pub fn device(sel: &DeviceSel) -> Result<DeviceInfoRow, OpenClError> {
    let _guard = OPENCL.lock().unwrap_or_else(|p| p.into_inner());
    select(&list_devices(), sel)
}

fn list_devices() -> Vec<DeviceInfoRow> {
    // `Platform::list` panics without platforms; the core call reports it as an error instead.
    let Ok(ids) = ocl::core::get_platform_ids() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for p in Platform::list_from_core(ids) {
        let Ok(devs) = Device::list_all(p) else { continue };
        for d in devs {
            let driver = match d.info(DeviceInfo::DriverVersion) {
                Ok(DeviceInfoResult::DriverVersion(v)) => v,
                _ => "?".into(),
            };
            out.push(DeviceInfoRow {
                index: out.len(),
                platform: p.name().unwrap_or_else(|_| "?".into()),
                name: d.name().unwrap_or_else(|_| "?".into()),
                vendor: d.vendor().unwrap_or_else(|_| "?".into()),
                version: d.version().map(|v| v.to_string()).unwrap_or_else(|_| "?".into()),
                driver,
                device: d,
                platform_id: p,
            });
        }
    }
    out
}

/// A context on the device `info` names and its command queue, with profiling (every launch's
/// device time comes from its events) where `profiling`.
fn context_and_queue(
    info: &DeviceInfoRow,
    profiling: bool,
) -> Result<(Context, Queue), OpenClError> {
    let context = Context::builder()
        .platform(info.platform_id)
        .devices(info.device)
        .build()
        .map_err(ocl_err)?;
    let props = profiling.then_some(CommandQueueProperties::PROFILING_ENABLE);
    let queue = Queue::new(&context, info.device, props).map_err(ocl_err)?;
    Ok((context, queue))
}

fn select(all: &[DeviceInfoRow], sel: &DeviceSel) -> Result<DeviceInfoRow, OpenClError> {
    if all.is_empty() {
        return Err(OpenClError::NoDevice(
            "no OpenCL platform or device found (install an ICD, e.g. pocl-opencl-icd)".into(),
        ));
    }
    match sel {
        DeviceSel::Index(i) => all.get(*i).cloned().ok_or_else(|| {
            OpenClError::NoDevice(format!("device {i} requested, {} available", all.len()))
        }),
        DeviceSel::Name(n) => {
            let low = n.to_lowercase();
            all.iter().find(|d| d.name.to_lowercase().contains(&low)).cloned().ok_or_else(|| {
                let names: Vec<&str> = all.iter().map(|d| d.name.as_str()).collect();
                OpenClError::NoDevice(format!(
                    "no device named like `{n}`; the devices are: {}",
                    names.join(", ")
                ))
            })
        }
    }
}

/// Where compiled programs are cached.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Cache {
    /// [`cache_dir`].
    #[default]
    Default,
    /// This directory.
    Dir(PathBuf),
    /// No cache.
    Off,
}

/// How to run.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    pub device: DeviceSel,
    /// Timed runs after one warm-up run; 0 runs once (and times that run).
    pub repeat: usize,
    pub cache: Cache,
    /// Options for `clBuildProgram` (`-cl-std=CL3.0`, ...).
    pub build_options: String,
    /// Let the OpenCL compiler print its warnings (PoCL writes "N warnings generated." to this
    /// process's stderr); off by default, where `-w` is added to the build options. Build errors
    /// are reported either way.
    pub show_build_warnings: bool,
    pub device_memory: DeviceMemory,
    /// The most bytes of storage objects (the function's and the values kept on the device)
    /// the device may hold at once: pooled objects are released, largest first, before one is
    /// made that would go past it, and an object that still would is an error
    /// ([`OpenClError::Budget`]). Uploads that the weight-streaming plan places at a launch
    /// (`stream_from`) are made then, on a second queue, overlapping the launches before the
    /// first that reads them; with a budget the function's constants are uploaded at each call
    /// rather than kept. `None`: no limit but the device's.
    pub memory_budget: Option<u64>,
    /// Runs without profiling events: no launch is timed ([`RunOutput::launches`] hold no
    /// times), and the host spends less time per launch (`fbc generate`, which times whole
    /// calls).
    pub untimed: bool,
    /// Told after each run, the warm-up included, how many of the [`RunOptions::runs`] are done:
    /// the caller's progress display (the runtime draws nothing itself).
    pub progress: Option<Progress>,
}

/// A callback of [`RunOptions::progress`]: it gets the number of runs done.
#[derive(Clone)]
pub struct Progress(pub std::sync::Arc<dyn Fn(usize) + Send + Sync>);

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Progress(..)")
    }
}

impl RunOptions {
    /// How many times the function runs: one warm-up run and [`RunOptions::repeat`] timed ones,
    /// or one run (timed) for a `repeat` of 0.
    pub fn runs(&self) -> usize {
        if self.repeat == 0 {
            1
        } else {
            self.repeat + 1
        }
    }

    /// The options `clBuildProgram` gets: [`RunOptions::build_options`], with `-w` unless
    /// warnings are shown.
    fn effective_build_options(&self) -> String {
        match (self.show_build_warnings, self.build_options.is_empty()) {
            (true, _) => self.build_options.clone(),
            (false, true) => "-w".into(),
            (false, false) => format!("-w {}", self.build_options),
        }
    }
}

/// How a run keeps device storage objects between its steps and across its repetitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceMemory {
    /// A freed object is kept for any later storage of the same kind, element type and size,
    /// in the same run or the next (the pool may hold one object per storage of the function):
    /// the fastest, since after the first run no object is made or released — making one costs
    /// host time, and releasing one makes the NVIDIA driver wait for the device to drain (up to
    /// 150 us a release on the H200, in the middle of a run's launches) — but the device may hold
    /// more than is live at once (1.45x on a Llama layer's gradient, 1.88x on MHA C1, on the
    /// H200).
    #[default]
    Pooled,
    /// Before an object is made that would leave the device holding more than the function's
    /// live peak, pooled objects are released, largest first: the device never holds more than
    /// is live at once, at the cost of objects made again (5-8% more device time on the same
    /// graphs on the H200).
    LivePeak,
    /// `plan-memory`'s plan: one object per slot, made at the slot's first tenant at the size
    /// of its largest one (a buffer tenant uses its first elements, an image tenant the
    /// top-left texels of its extent) and kept across runs, and
    /// every storage outside a slot pooled as under [`DeviceMemory::Pooled`]. The device holds
    /// exactly the plan's peak ([`FunctionManifest::planned_bytes`]) once every slot has had a
    /// tenant, so the allocation tracker checks the plan; a slot asked for while a tenant still
    /// holds it is an error, so a run also checks that no two tenants of a slot are live at once.
    Planned,
}

/// Whether the program came from the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheStatus {
    Hit,
    /// Built from source (and stored, when the cache is on).
    Miss,
    /// An entry was there but did not load; rebuilt and replaced.
    Rebuilt,
    Off,
}

/// Device time of one launch step.
#[derive(Debug, Clone)]
pub struct LaunchTime {
    pub kernel: String,
    /// Nanoseconds of each timed run.
    pub ns: Vec<u64>,
    /// When the launch started in the last timed run: nanoseconds after that run's first launch
    /// started (the `START`s of their profiling events). With the last of [`LaunchTime::ns`],
    /// where the launch lay on the device's timeline; the gaps between launches are the
    /// device idling or the queue's own overhead.
    pub start_ns: u64,
}

impl LaunchTime {
    /// The median of the timed runs.
    pub fn median_ns(&self) -> u64 {
        median(self.ns.clone())
    }
}

/// The median of `v` (the upper one of an even count; 0 when empty).
fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

/// The results of a run and its timings.
#[derive(Debug, Clone)]
pub struct RunOutput {
    /// One per function result (`F32` or `I32`).
    pub results: Vec<Value>,
    /// `NAME (PLATFORM)`.
    pub device: String,
    /// One per launch step, in order.
    pub launches: Vec<LaunchTime>,
    /// Host time one run spends enqueueing its launches (setting arguments, making kernel
    /// objects in the first run, `clEnqueueNDRangeKernel`), in nanoseconds, median of the timed
    /// runs: divided by the launches, the host cost of a launch.
    pub launch_host_ns: u64,
    pub cache: CacheStatus,
    /// The most bytes of storage objects the device held at once (the allocation tracker of
    /// [`Objects`]), in any run.
    pub device_peak_bytes: u64,
    /// Storage objects the runs made rather than took from the pool, over all runs (the warm-up
    /// included): under [`DeviceMemory::Pooled`] the first run's, whatever the repetitions.
    pub objects_made: u64,
    /// The streamed uploads of the last run ([`RunOptions::memory_budget`]).
    pub streaming: Streaming,
}

/// What a run's streamed uploads (those the weight-streaming plan places at a launch) did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Streaming {
    /// Uploads made on the transfer queue.
    pub uploads: u64,
    pub bytes: u64,
    /// Device time of those transfers (profiling events: 0 when the run is untimed).
    pub transfer_ns: u64,
    /// The part of `transfer_ns` during which a launch of the run was executing: transfer time
    /// hidden behind computation.
    pub hidden_ns: u64,
    /// Each transfer on the device's timeline: its start in nanoseconds after the run's first
    /// launch started (negative: before it; the clock of [`LaunchTime::start_ns`]) and its
    /// device time, in the order the uploads were made (empty when the run is untimed).
    pub transfers: Vec<(i64, u64)>,
    /// Where the run's device time went (zero when the run is untimed).
    pub split: TimeSplit,
    /// Bytes of the uploads transferred from pinned host memory (the call's pinned copies of
    /// its streamed host values).
    pub pinned_bytes: u64,
    /// Bytes written back to the host after their last launch and released (KV caches under
    /// `plan-weight-streaming{kv-tiling=true}`).
    pub written_back: u64,
}

pub use super::TimeSplit;
pub use crate::cache_dir;

/// FNV-1a, 64 bits: a stable hash for cache keys and entry checksums.
fn fnv(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for &b in *p {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        // Separate the parts, so ("ab", "c") and ("a", "bc") differ.
        h ^= 0xff;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

const CACHE_MAGIC: &[u8; 8] = b"FBCCLB1\n";

/// Reads a cache entry: magic, length, checksum, bytes; `None` if anything is off.
fn read_entry(path: &Path) -> Option<Vec<u8>> {
    let bytes = std::fs::read(path).ok()?;
    let rest = bytes.strip_prefix(CACHE_MAGIC.as_slice())?;
    if rest.len() < 16 {
        return None;
    }
    let len = u64::from_le_bytes(rest[..8].try_into().ok()?);
    let sum = u64::from_le_bytes(rest[8..16].try_into().ok()?);
    let body = &rest[16..];
    (body.len() as u64 == len && fnv(&[body]) == sum).then(|| body.to_vec())
}

fn write_entry(path: &Path, body: &[u8]) {
    let Some(dir) = path.parent() else { return };
    if std::fs::create_dir_all(dir).is_err() {
        return;
    }
    let mut bytes = CACHE_MAGIC.to_vec();
    bytes.extend((body.len() as u64).to_le_bytes());
    bytes.extend(fnv(&[body]).to_le_bytes());
    bytes.extend(body);
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    // A cache that cannot be written is only slower: errors are ignored.
    if std::fs::write(&tmp, &bytes).is_ok() && std::fs::rename(&tmp, path).is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}

/// The cache file of a program.
pub fn cache_entry(dir: &Path, source: &str, device: &str, driver: &str, options: &str) -> PathBuf {
    let key = fnv(&[source.as_bytes(), device.as_bytes(), driver.as_bytes(), options.as_bytes()]);
    dir.join("opencl").join(format!("{key:016x}.bin"))
}

fn build_from_source(
    context: &Context,
    info: &DeviceInfoRow,
    source: &str,
    options: &str,
) -> Result<Program, OpenClError> {
    let mut b = Program::builder();
    // Implementations compile the source after lines of their own (PoCL: 2), which shifts the
    // line numbers of the build log; `#line 1` makes them the lines of `source` again.
    b.devices(info.device).src(format!("#line 1\n{source}"));
    if !options.is_empty() {
        b.cmplr_opt(options);
    }
    b.build(context).map_err(|e| OpenClError::Build(map_build_log(&e.to_string(), source)))
}

fn program(
    context: &Context,
    info: &DeviceInfoRow,
    source: &str,
    opts: &RunOptions,
) -> Result<(Program, CacheStatus), OpenClError> {
    let dir = match &opts.cache {
        Cache::Off => None,
        Cache::Dir(d) => Some(d.clone()),
        Cache::Default => cache_dir(),
    };
    let options = opts.effective_build_options();
    let Some(dir) = dir else {
        return Ok((build_from_source(context, info, source, &options)?, CacheStatus::Off));
    };
    let platform = format!("{} / {}", info.name, info.platform);
    let entry = cache_entry(&dir, source, &platform, &info.driver, &options);
    let mut status = CacheStatus::Miss;
    if let Some(bin) = read_entry(&entry) {
        let bins = [bin.as_slice()];
        let mut b = Program::builder();
        b.devices(info.device).binaries(&bins);
        if !options.is_empty() {
            b.cmplr_opt(options.as_str());
        }
        match b.build(context) {
            Ok(p) => return Ok((p, CacheStatus::Hit)),
            Err(_) => status = CacheStatus::Rebuilt,
        }
    }
    let p = build_from_source(context, info, source, &options)?;
    if let Ok(ProgramInfoResult::Binaries(bins)) = p.info(ProgramInfo::Binaries) {
        if let Some(bin) = bins.first().filter(|b| !b.is_empty()) {
            write_entry(&entry, bin);
        }
    }
    Ok((p, status))
}

/// A storage object on the device.
#[derive(Clone)]
enum Mem {
    F32(Buffer<f32>),
    I32(Buffer<i32>),
    /// Packed weights, read by the kernels only.
    I8(Buffer<i8>),
    Image(Image<f32>),
    /// An RGBA `CL_HALF_FLOAT` image; the host side is the `f16` bit patterns.
    HalfImage(Image<u16>),
}

impl Mem {
    /// The OpenCL object's handle: equal for two `Mem`s of one object.
    fn id(&self) -> usize {
        match self {
            Mem::F32(b) => b.as_core().as_ptr() as usize,
            Mem::I32(b) => b.as_core().as_ptr() as usize,
            Mem::I8(b) => b.as_core().as_ptr() as usize,
            Mem::Image(i) => i.as_core().as_ptr() as usize,
            Mem::HalfImage(i) => i.as_core().as_ptr() as usize,
        }
    }
}

/// Storage objects that runs have freed (deallocated, or live when a run ended), kept for later
/// allocations of the same kind, element type and size, in the same run or the next: device
/// allocation is the largest host cost of a launch sequence (the driver allocates a new object
/// at its first use). It holds at most `cap` bytes ([`Objects::pool_cap`]), and a new allocation's
/// contents are unspecified either way (the manifest fills what is read before it is written).
struct Pool {
    /// (kind, element type, elements, bytes, the object)
    free: Vec<(StorageKind, Dtype, u64, u64, Mem)>,
    held: u64,
    cap: u64,
}

impl Pool {
    /// A freed storage object of `desc`'s kind, element type and size, if the pool has one.
    fn reuse(&mut self, desc: &StorageDesc) -> Option<Mem> {
        let fits = |e: &(StorageKind, Dtype, u64, u64, Mem)| {
            e.0 == desc.kind && e.1 == desc.dtype && e.2 == desc.elems
        };
        let i = self.free.iter().position(fits)?;
        let e = self.free.swap_remove(i);
        self.held -= e.3;
        Some(e.4)
    }

    /// Releases the largest pooled object; its bytes, or `None` when the pool is empty.
    fn release_largest(&mut self) -> Option<u64> {
        let (i, _) = self.free.iter().enumerate().max_by_key(|(_, e)| e.3)?;
        let e = self.free.swap_remove(i);
        self.held -= e.3;
        Some(e.3)
    }

    /// Keeps `m`, the storage object of `desc`, unless the pool is full (then `false`: `m` is
    /// released).
    fn give(&mut self, desc: &StorageDesc, m: Mem) -> bool {
        if self.held + desc.bytes <= self.cap {
            self.held += desc.bytes;
            self.free.push((desc.kind, desc.dtype, desc.elems, desc.bytes, m));
            true
        } else {
            false
        }
    }
}

/// The storage objects of a function's runs, from a [`Pool`], and the bytes they hold: the
/// runtime's allocation tracker.
///
/// The pool reuses an object for any later storage of the same kind, element type and size,
/// uploads included: on a Llama layer's gradient (seq 512, nvidia profile, on the H200) it held
/// 607 MB against 419 MB live at once (569 MB when it released what exceeded the plan's peak at
/// the end of each run, and made those objects again in the next: slower, see
/// [`DeviceMemory::Pooled`]); `plan-memory`'s slots, which also share storage of different
/// sizes and nest smaller images in larger ones, plan 538.8 MB there (558 MB before nesting),
/// and [`DeviceMemory::Planned`] holds what they plan. The runtime
/// reports what it held next to the plan; [`DeviceMemory`] says how much it keeps.
struct Objects {
    pool: Pool,
    mode: DeviceMemory,
    /// Under [`DeviceMemory::Planned`]: each slot's object while no tenant holds it, the
    /// storage that holds it otherwise, and the storage it is made for (its largest tenant).
    slots: HashMap<u64, SlotObject>,
    /// Bytes of all storage objects that exist (in use or in the pool).
    held: u64,
    /// The most `held` has been.
    high_water: u64,
    /// Storage objects made (not taken from the pool), over all runs.
    made: u64,
    /// The most `held` and `kept` together may be ([`RunOptions::memory_budget`]).
    budget: Option<u64>,
    /// Bytes of the values the session keeps on the device besides these objects.
    kept: u64,
}

/// The object of one `plan-memory` slot (see [`DeviceMemory::Planned`]).
struct SlotObject {
    /// What the object is made as: the slot's largest tenant.
    desc: StorageDesc,
    /// The object, while no tenant holds it (`None` before its first tenant, and while held).
    free: Option<Mem>,
    /// The name of the storage holding it.
    holder: Option<String>,
}

impl Objects {
    fn new(f: &FunctionManifest, mode: DeviceMemory) -> Result<Objects, OpenClError> {
        let mut slots: HashMap<u64, SlotObject> = HashMap::new();
        if mode == DeviceMemory::Planned {
            for d in &f.storage {
                let Some(k) = d.slot else { continue };
                let e = slots.entry(k).or_insert_with(|| SlotObject {
                    desc: d.clone(),
                    free: None,
                    holder: None,
                });
                let same_kind = matches!(
                    (e.desc.kind, d.kind),
                    (StorageKind::Buffer, StorageKind::Buffer)
                        | (StorageKind::Image2d { .. }, StorageKind::Image2d { .. })
                );
                if !same_kind || e.desc.dtype != d.dtype {
                    return Err(OpenClError::Manifest(format!(
                        "slot {k} holds {} and {}, storage of different types",
                        e.desc.name, d.name
                    )));
                }
                if d.bytes > e.desc.bytes {
                    e.desc = d.clone();
                }
            }
            // An image slot's object holds each tenant in its top-left corner (`plan-memory`
            // nests smaller images in larger ones): its largest tenant must contain them all.
            for d in &f.storage {
                let (Some(k), StorageKind::Image2d { width, height }) = (d.slot, d.kind) else {
                    continue;
                };
                let Some(e) = slots.get(&k) else { continue };
                if let StorageKind::Image2d { width: w, height: h } = e.desc.kind {
                    if width > w || height > h {
                        return Err(OpenClError::Manifest(format!(
                            "slot {k}: image {} ({width} x {height}) does not fit in {} ({w} x {h})",
                            d.name, e.desc.name
                        )));
                    }
                }
            }
        }
        Ok(Objects {
            pool: Pool { free: Vec::new(), held: 0, cap: Objects::pool_cap(f, mode) },
            mode,
            slots,
            held: 0,
            high_water: 0,
            made: 0,
            budget: None,
            kept: 0,
        })
    }

    /// What the pool may hold: under [`DeviceMemory::Pooled`] every storage object of the
    /// function (so that repeated runs make and release none: a pool capped below what a run
    /// makes released some at the end of each run and made them again in the next), under
    /// [`DeviceMemory::LivePeak`] the function's planned peak.
    fn pool_cap(f: &FunctionManifest, mode: DeviceMemory) -> u64 {
        match mode {
            DeviceMemory::Pooled => {
                f.storage.iter().map(|d| d.bytes).fold(0, u64::saturating_add).max(f.peak_bytes)
            }
            DeviceMemory::LivePeak => f.peak_bytes,
            DeviceMemory::Planned => f
                .storage
                .iter()
                .filter(|d| d.slot.is_none())
                .map(|d| d.bytes)
                .fold(0, u64::saturating_add),
        }
    }

    /// The storage object of an allocation or upload of `desc`: a pooled one, else a new one
    /// (under [`DeviceMemory::LivePeak`] after releasing what would leave the device holding
    /// more than the live peak).
    fn take(&mut self, queue: &Queue, desc: &StorageDesc) -> Result<Mem, OpenClError> {
        if let Some(slot) = desc.slot.and_then(|k| self.slots.get_mut(&k)) {
            if let Some(h) = &slot.holder {
                return Err(OpenClError::Manifest(format!(
                    "storage {} needs slot {} while storage {h} holds it",
                    desc.name,
                    desc.slot.unwrap_or_default()
                )));
            }
            slot.holder = Some(desc.name.clone());
            if let Some(m) = slot.free.take() {
                return Ok(m);
            }
            let desc = slot.desc.clone();
            self.reserve(&desc)?;
            let m = create(queue, &desc)?;
            self.held = self.held.saturating_add(desc.bytes);
            self.high_water = self.high_water.max(self.held);
            self.made += 1;
            return Ok(m);
        }
        if let Some(m) = self.pool.reuse(desc) {
            return Ok(m);
        }
        if self.mode == DeviceMemory::LivePeak {
            self.release_pooled_above(self.pool.cap.saturating_sub(desc.bytes));
        }
        self.reserve(desc)?;
        let m = create(queue, desc)?;
        self.held = self.held.saturating_add(desc.bytes);
        self.high_water = self.high_water.max(self.held);
        self.made += 1;
        Ok(m)
    }

    /// Makes room under the budget for a new object of `desc`: releases pooled objects, largest
    /// first, while it would go past; an error when it still would.
    fn reserve(&mut self, desc: &StorageDesc) -> Result<(), OpenClError> {
        let Some(budget) = self.budget else { return Ok(()) };
        let room = budget.saturating_sub(self.kept).saturating_sub(desc.bytes);
        self.release_pooled_above(room);
        // A slot's object, held between its tenants, is not in the pool: it stays counted.
        if self.held.saturating_add(self.kept).saturating_add(desc.bytes) > budget {
            return Err(OpenClError::Budget(format!(
                "the device memory budget of {budget} bytes is exceeded: storage {} needs {} bytes while {} are held",
                desc.name,
                desc.bytes,
                self.held.saturating_add(self.kept)
            )));
        }
        Ok(())
    }

    /// Releases pooled objects, largest first, while the objects hold more than `limit` bytes
    /// (or the pool is empty).
    fn release_pooled_above(&mut self, limit: u64) {
        while self.held > limit {
            let Some(bytes) = self.pool.release_largest() else { break };
            self.held = self.held.saturating_sub(bytes);
        }
    }

    /// Releases the storage object of `desc` (not pooled): the device may still be reading it.
    fn release(&mut self, desc: &StorageDesc, m: Mem) {
        drop(m);
        self.held = self.held.saturating_sub(desc.bytes);
    }

    /// Takes back the storage object of `desc`, no longer in use.
    fn give(&mut self, desc: &StorageDesc, m: Mem) {
        if let Some(slot) = desc.slot.and_then(|k| self.slots.get_mut(&k)) {
            slot.holder = None;
            slot.free = Some(m);
            return;
        }
        if !self.pool.give(desc, m) {
            self.held = self.held.saturating_sub(desc.bytes);
        }
    }
}

fn device_usize(d: &Device, what: DeviceInfo) -> Option<usize> {
    match d.info(what).ok()? {
        DeviceInfoResult::MaxWorkGroupSize(v)
        | DeviceInfoResult::Image2dMaxWidth(v)
        | DeviceInfoResult::Image2dMaxHeight(v) => Some(v),
        _ => None,
    }
}

/// Checks that the device can hold every image of `f`.
fn check_images(info: &DeviceInfoRow, f: &FunctionManifest) -> Result<(), OpenClError> {
    let images: Vec<&StorageDesc> =
        f.storage.iter().filter(|s| matches!(s.kind, StorageKind::Image2d { .. })).collect();
    if images.is_empty() {
        return Ok(());
    }
    let support = matches!(
        info.device.info(DeviceInfo::ImageSupport),
        Ok(DeviceInfoResult::ImageSupport(true))
    );
    if !support {
        return Err(OpenClError::Unsupported(format!(
            "{} has no image support, and @{} keeps {} tensor(s) in image2d textures (compile \
             for a target whose profile says `image.supported = false`, or with R-Tiles in \
             buffers)",
            info.name,
            f.name,
            images.len()
        )));
    }
    let maxw = device_usize(&info.device, DeviceInfo::Image2dMaxWidth).unwrap_or(usize::MAX) as u64;
    let maxh =
        device_usize(&info.device, DeviceInfo::Image2dMaxHeight).unwrap_or(usize::MAX) as u64;
    for s in images {
        if let StorageKind::Image2d { width, height } = s.kind {
            if width > maxw || height > maxh {
                return Err(OpenClError::Unsupported(format!(
                    "image `{}` is {width} x {height} texels, larger than the device's maximum \
                     {maxw} x {maxh}; compile for a target profile with these image limits so \
                     that lower-to-memory keeps it in a buffer",
                    s.name
                )));
            }
        }
    }
    Ok(())
}

/// Checks that the device supports RGBA `CL_HALF_FLOAT` read-write 2D images when `f` keeps
/// any storage in `f16` images.
fn check_half_images(
    context: &Context,
    info: &DeviceInfoRow,
    f: &FunctionManifest,
) -> Result<(), OpenClError> {
    let half: Vec<&str> = f
        .storage
        .iter()
        .filter(|s| matches!(s.kind, StorageKind::Image2d { .. }) && s.dtype == Dtype::F16)
        .map(|s| s.name.as_str())
        .collect();
    if half.is_empty() {
        return Ok(());
    }
    let formats = Image::<u16>::supported_formats(
        context,
        MemFlags::new().read_write(),
        MemObjectType::Image2d,
    )
    .map_err(|e| OpenClError::Ocl(format!("listing the supported image formats: {e}")))?;
    half_format_check(&formats, &info.name, &f.name, &half)
}

/// `Ok` when `formats` (a device's supported image formats) has RGBA `CL_HALF_FLOAT`; else the
/// error naming `device`, function `func` and its f16 images `half`.
fn half_format_check(
    formats: &[ocl::core::ImageFormatParseResult],
    device: &str,
    func: &str,
    half: &[&str],
) -> Result<(), OpenClError> {
    let ok = formats.iter().flatten().any(|f| {
        matches!(f.channel_order, ImageChannelOrder::Rgba)
            && matches!(f.channel_data_type, ImageChannelDataType::HalfFloat)
    });
    if ok {
        return Ok(());
    }
    Err(OpenClError::Unsupported(format!(
        "{device} does not support RGBA CL_HALF_FLOAT images, and @{func} keeps {} tensor(s) in \
         f16 image2d textures ({}); compile without --half-images",
        half.len(),
        half.join(", ")
    )))
}

/// A read-write RGBA image of `[width, height]` texels of `channels` (`T` its host element: `f32`
/// for `Float`, the `u16` bit patterns for `HalfFloat`); `name` names it in an error.
fn rgba_image<T: ocl::OclPrm>(
    queue: &Queue,
    name: &str,
    [width, height]: [u64; 2],
    channels: ImageChannelDataType,
) -> Result<Image<T>, OpenClError> {
    let dim = |v: u64, what: &str| {
        usize::try_from(v).map_err(|_| OpenClError::Manifest(format!("image {what}")))
    };
    Image::<T>::builder()
        .channel_order(ImageChannelOrder::Rgba)
        .channel_data_type(channels)
        .image_type(MemObjectType::Image2d)
        .dims((dim(width, "width")?, dim(height, "height")?))
        .flags(MemFlags::new().read_write())
        .queue(queue.clone())
        .build()
        .map_err(|e| OpenClError::Ocl(format!("creating image {name}: {e}")))
}

/// Checks, before anything is allocated, that the run stays within the memory limit: each
/// storage alone, then the packed host copies of the uploads (kept for the whole run, 4 bytes an
/// element) plus the device storage live at each step, counted once more for the host copy a
/// download reads back. Sizes are recomputed from the storage kinds with checked arithmetic.
fn check_memory(f: &FunctionManifest) -> Result<(), OpenClError> {
    let limit = crate::limits::max_memory();
    let too_large = |what: String, bytes: Option<u64>| {
        OpenClError::Memory(crate::limits::TooLarge { what, bytes, limit })
    };
    let mut bytes: Vec<u64> = Vec::with_capacity(f.storage.len());
    for s in &f.storage {
        let elems = match s.kind {
            StorageKind::Image2d { width, height } => {
                width.checked_mul(height).and_then(|t| t.checked_mul(4))
            }
            StorageKind::Buffer => Some(s.elems),
        };
        let per = if s.dtype == Dtype::F16 { 2 } else { 4 };
        // Device storage, plus a host copy as large in f32 (packing, read-back).
        let b = elems.and_then(|e| e.checked_mul(per + 4));
        match b {
            Some(b) if b <= limit => bytes.push(b),
            _ => return Err(too_large(format!("storage {} of @{}", s.name, f.name), b)),
        }
    }
    let size = |id: usize| bytes.get(id).copied().unwrap_or(0);
    let (mut live, mut peak) = (0u64, 0u64);
    for s in &f.steps {
        match s {
            Step::Alloc { storage } | Step::Upload { storage, .. } => {
                live = live.saturating_add(size(*storage));
            }
            Step::Dealloc { storage } => live = live.saturating_sub(size(*storage)),
            // A copy's target and a fill's storage have their own `alloc`.
            Step::Launch(_) | Step::Download { .. } | Step::Fill { .. } | Step::Copy { .. } => {}
        }
        peak = peak.max(live);
    }
    if peak > limit {
        return Err(too_large(format!("the storage live at once in @{}", f.name), Some(peak)));
    }
    Ok(())
}

fn create(queue: &Queue, s: &StorageDesc) -> Result<Mem, OpenClError> {
    let len = usize::try_from(s.elems)
        .map_err(|_| OpenClError::Manifest(format!("storage {} is too large", s.name)))?
        .max(1); // OpenCL has no empty buffers.
    Ok(match (s.kind, s.dtype) {
        (StorageKind::Image2d { width, height }, Dtype::F16) => Mem::HalfImage(rgba_image(
            queue,
            &s.name,
            [width, height],
            ImageChannelDataType::HalfFloat,
        )?),
        (StorageKind::Image2d { width, height }, _) => {
            Mem::Image(rgba_image(queue, &s.name, [width, height], ImageChannelDataType::Float)?)
        }
        (StorageKind::Buffer, Dtype::F32) => Mem::F32(
            Buffer::<f32>::builder().queue(queue.clone()).len(len).build().map_err(ocl_err)?,
        ),
        (StorageKind::Buffer, Dtype::I32) => Mem::I32(
            Buffer::<i32>::builder().queue(queue.clone()).len(len).build().map_err(ocl_err)?,
        ),
        (StorageKind::Buffer, Dtype::I8) => {
            Mem::I8(Buffer::<i8>::builder().queue(queue.clone()).len(len).build().map_err(ocl_err)?)
        }
        (StorageKind::Buffer, Dtype::F16) => {
            return Err(OpenClError::Manifest(format!(
                "storage {}: f16 storage must be an image2d",
                s.name
            )))
        }
    })
}

/// The memory type of a storage entry.
pub fn mem_type(s: &StorageDesc) -> MemType {
    let elem = match s.dtype {
        Dtype::F32 => ElemType::F32,
        Dtype::I32 => ElemType::I32,
        Dtype::I8 => ElemType::I8,
        Dtype::F16 => ElemType::F16,
    };
    match s.kind {
        StorageKind::Buffer => MemType::buffer(s.elems, elem),
        StorageKind::Image2d { width, height } if elem == ElemType::F16 => {
            MemType::image_f16(width, height)
        }
        StorageKind::Image2d { width, height } => MemType::image(width, height),
    }
}

/// The texels `[W, H, 1]` of image storage `s`, which every image transfer names: the object
/// may be a `plan-memory` slot's, larger than `s`, whose top-left corner `s` uses.
fn region(s: &StorageDesc) -> [usize; 3] {
    match s.kind {
        StorageKind::Image2d { width, height } => {
            [usize::try_from(width).unwrap_or(0), usize::try_from(height).unwrap_or(0), 1]
        }
        StorageKind::Buffer => [usize::try_from(s.elems).unwrap_or(0), 1, 1],
    }
}

fn write_mem(m: &Mem, data: &MemData, s: &StorageDesc) -> Result<(), OpenClError> {
    let bad = || OpenClError::Manifest(format!("storage {}: element type mismatch", s.name));
    if data.is_empty() {
        return Ok(());
    }
    match (m, data) {
        (Mem::F32(b), MemData::F32(v)) => b.write(v.as_slice()).enq().map_err(ocl_err),
        (Mem::I32(b), MemData::I32(v)) => b.write(v.as_slice()).enq().map_err(ocl_err),
        (Mem::I8(b), MemData::I8(v)) => b.write(v.as_slice()).enq().map_err(ocl_err),
        (Mem::Image(i), MemData::F32(v)) => {
            i.write(v.as_slice()).region(region(s)).enq().map_err(ocl_err)
        }
        (Mem::HalfImage(i), MemData::F32(v)) => {
            // `pack` rounded every value to f16 already: the conversion to bits is exact.
            let bits: Vec<u16> = v.iter().map(|&x| half::f16::from_f32(x).to_bits()).collect();
            i.write(bits.as_slice()).region(region(s)).enq().map_err(ocl_err)
        }
        _ => Err(bad()),
    }
}

fn read_mem(m: &Mem, s: &StorageDesc) -> Result<MemData, OpenClError> {
    let n = usize::try_from(s.elems).unwrap_or(0);
    if n == 0 {
        return Ok(match s.dtype {
            Dtype::F32 | Dtype::F16 => MemData::F32(Vec::new()),
            Dtype::I32 => MemData::I32(Vec::new()),
            Dtype::I8 => MemData::I8(Vec::new()),
        });
    }
    Ok(match m {
        Mem::F32(b) => {
            let mut v = vec![0.0f32; n];
            b.read(&mut v).enq().map_err(ocl_err)?;
            MemData::F32(v)
        }
        Mem::I32(b) => {
            let mut v = vec![0i32; n];
            b.read(&mut v).enq().map_err(ocl_err)?;
            MemData::I32(v)
        }
        Mem::I8(b) => {
            let mut v = vec![0i8; n];
            b.read(&mut v).enq().map_err(ocl_err)?;
            MemData::I8(v)
        }
        Mem::Image(i) => {
            let mut v = vec![0.0f32; n];
            i.read(&mut v).region(region(s)).enq().map_err(ocl_err)?;
            MemData::F32(v)
        }
        Mem::HalfImage(i) => {
            let mut bits = vec![0u16; n];
            i.read(&mut bits).region(region(s)).enq().map_err(ocl_err)?;
            MemData::F32(bits.into_iter().map(|b| half::f16::from_bits(b).to_f32()).collect())
        }
    })
}

fn layout_of(d: &LayoutDesc) -> Result<Layout, OpenClError> {
    d.layout().map_err(|e| OpenClError::Manifest(format!("layout {}: {e}", d.text)))
}

/// A manifest this runtime reads, or the error saying it is not.
fn check_version(manifest: &Manifest) -> Result<(), OpenClError> {
    if manifest.version == MANIFEST_VERSION {
        return Ok(());
    }
    Err(OpenClError::Manifest(format!(
        "manifest version {} (this runtime reads {MANIFEST_VERSION})",
        manifest.version
    )))
}

/// Function `func` of `manifest`.
fn function<'m>(manifest: &'m Manifest, func: &str) -> Result<&'m FunctionManifest, OpenClError> {
    manifest
        .function(func)
        .ok_or_else(|| OpenClError::Manifest(format!("no function `{func}` in the manifest")))
}

/// Runs function `func` of `manifest` (kernels in `source`) with one host tensor per argument.
pub fn run(
    source: &str,
    manifest: &Manifest,
    func: &str,
    inputs: &[Value],
    opts: &RunOptions,
) -> Result<RunOutput, OpenClError> {
    check_inputs(function(manifest, func)?, inputs)?;
    let inputs: Vec<Input<'_>> = inputs.iter().map(Input::Host).collect();
    run_inputs(source, manifest, func, &inputs, opts)
}

/// [`run`] with each argument a host tensor ([`Input::Host`]) or its storage's contents as
/// they are ([`Input::Stored`]); a kept one ([`Input::Keep`]) is kept for this run only.
pub fn run_inputs(
    source: &str,
    manifest: &Manifest,
    func: &str,
    inputs: &[Input<'_>],
    opts: &RunOptions,
) -> Result<RunOutput, OpenClError> {
    check_version(manifest)?;
    let f = function(manifest, func)?;
    check_memory(f)?;
    let mut session = Session::new(source, manifest, opts)?;
    let out =
        session.runs(func, inputs, None, opts.runs(), opts.repeat == 0, opts.progress.as_ref())?;
    let results = out
        .results
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            r.ok_or_else(|| OpenClError::Manifest(format!("result {i} is never downloaded")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(RunOutput {
        results,
        device: session.device(),
        launches: out.launches,
        launch_host_ns: out.launch_host_ns,
        cache: session.cache(),
        device_peak_bytes: out.device_peak_bytes,
        objects_made: out.objects_made,
        streaming: out.streaming,
    })
}

/// The fault an error buffer records (see the prelude's `fbc_fault`), in the reference
/// executor's words (`crate::exec::run_kernel`), at the launch that recorded it.
fn fault(f: &FunctionManifest, e: &[i32; FAULT_INTS]) -> OpenClError {
    let long = |at: usize| i64::from(e[at] as u32) | (i64::from(e[at + 1]) << 32);
    let id = u32::try_from(e[0]).ok();
    // The launch, and where the recording kernel's operands start in its arguments (a part of
    // a merged launch records its own id).
    let found = f.launches().find_map(|l| {
        if l.parts.is_empty() {
            (l.fault_id.is_some() && l.fault_id == id).then_some((l, 0, l.kernel.as_str(), None))
        } else {
            let p = l.parts.iter().find(|p| p.fault_id.is_some() && p.fault_id == id)?;
            Some((l, p.first_arg, p.kernel.as_str(), p.location.as_ref()))
        }
    });
    let Some((l, first, kernel, at)) = found else {
        return OpenClError::Manifest(format!(
            "a kernel recorded fault id {}, no launch has it",
            e[0]
        ));
    };
    let k = usize::try_from(e[2]).unwrap_or(usize::MAX);
    let rank = usize::try_from(e[9]).unwrap_or(0);
    let mut point: Vec<String> =
        (0..rank.min(FAULT_DIMS)).map(|d| long(10 + 2 * d).to_string()).collect();
    if rank > FAULT_DIMS {
        point.push("..".into());
    }
    let idx = format!("[{}]", point.join(", "));
    let desc = l.args.get(first.saturating_add(k)).and_then(|&a| f.storage.get(a));
    let (v0, v1, v2) = (long(3), long(5), long(7));
    let what = match (e[1], desc) {
        (4, _) => format!("integer division by zero in {v0} / 0"),
        (5, _) => format!("integer division by zero in {v0} % 0"),
        (6, _) => "int() of NaN".into(),
        (7, _) => format!(
            "the symbol read from operand {k} is {v0}, outside {v1}..={v2} (nothing was written)"
        ),
        (2, Some(d)) => {
            format!(
                "x{k}[{v0}] is outside operand {k} ({} elements) at domain index {idx}",
                d.elems
            )
        }
        (_, Some(d)) => {
            let ty = mem_type(d);
            match d.kind {
                StorageKind::Buffer => format!(
                    "operand {k} ({ty}) accessed at element {v0}, outside its {} elements (domain index {idx})",
                    d.elems
                ),
                StorageKind::Image2d { .. } => format!(
                    "operand {k} ({ty}) accessed at texel ({v0}, {v1}) channel {v2}, outside the image (domain index {idx})"
                ),
            }
        }
        (_, None) => format!("operand {k} accessed out of bounds at domain index {idx}"),
    };
    OpenClError::Fault {
        location: at.unwrap_or(&l.location).clone(),
        message: format!("kernel `{kernel}`: {what}"),
    }
}

/// Sets every element of `m` to 0 (the contents of a fresh `memory.alloc`): buffers by
/// `clEnqueueFillBuffer`, images by writing zeros from the host (`clEnqueueFillImage` takes a
/// four-channel colour that `ocl` passes as one element).
fn fill_zero(m: &Mem, s: &StorageDesc) -> Result<(), OpenClError> {
    let n = usize::try_from(s.elems).unwrap_or(0);
    if n == 0 {
        return Ok(());
    }
    // The object may be a slot's, larger than `s`: fill only `s`'s elements (texels).
    match m {
        Mem::F32(b) => b.cmd().fill(0.0, Some(n)).enq().map_err(ocl_err),
        Mem::I32(b) => b.cmd().fill(0, Some(n)).enq().map_err(ocl_err),
        Mem::I8(b) => b.cmd().fill(0, Some(n)).enq().map_err(ocl_err),
        Mem::Image(i) => {
            i.write(vec![0.0f32; n].as_slice()).region(region(s)).enq().map_err(ocl_err)
        }
        Mem::HalfImage(i) => {
            i.write(vec![0u16; n].as_slice()).region(region(s)).enq().map_err(ocl_err)
        }
    }
}

/// Copies `src` into `dst`, the objects of storage `s` and of another of its type (the snapshot
/// of a launch's output); either may be a slot's object, larger than `s`.
fn copy_mem(src: &Mem, dst: &Mem, s: &StorageDesc) -> Result<(), OpenClError> {
    let n = usize::try_from(s.elems).unwrap_or(0);
    if n == 0 {
        return Ok(());
    }
    match (src, dst) {
        (Mem::F32(a), Mem::F32(b)) => a.cmd().copy(b, None, Some(n)).enq().map_err(ocl_err),
        (Mem::I32(a), Mem::I32(b)) => a.cmd().copy(b, None, Some(n)).enq().map_err(ocl_err),
        (Mem::I8(a), Mem::I8(b)) => a.cmd().copy(b, None, Some(n)).enq().map_err(ocl_err),
        (Mem::Image(a), Mem::Image(b)) => {
            a.cmd().copy(b, [0, 0, 0]).region(region(s)).enq().map_err(ocl_err)
        }
        (Mem::HalfImage(a), Mem::HalfImage(b)) => {
            a.cmd().copy(b, [0, 0, 0]).region(region(s)).enq().map_err(ocl_err)
        }
        _ => Err(OpenClError::Manifest("copy between storage of different types".into())),
    }
}

fn not_live(what: &str, id: usize) -> OpenClError {
    OpenClError::Manifest(format!("{what} of storage {id}, which is not live"))
}

fn bad_id(id: usize) -> OpenClError {
    OpenClError::Manifest(format!("storage id {id} is not in the storage table"))
}

/// The `START` and `END` of an event's command, in the device's nanoseconds.
fn event_span(ev: &Event) -> Result<(u64, u64), OpenClError> {
    let start = match ev.profiling_info(ProfilingInfo::Start).map_err(ocl_err)? {
        ProfilingInfoResult::Start(v) => v,
        _ => 0,
    };
    let end = match ev.profiling_info(ProfilingInfo::End).map_err(ocl_err)? {
        ProfilingInfoResult::End(v) => v,
        _ => 0,
    };
    Ok((start, end))
}

/// That `f` takes `n` arguments.
fn check_count(f: &FunctionManifest, n: usize) -> Result<(), OpenClError> {
    if n == f.args.len() {
        return Ok(());
    }
    Err(OpenClError::Manifest(format!("@{} takes {} arguments, {n} given", f.name, f.args.len())))
}

fn check_inputs(f: &FunctionManifest, inputs: &[Value]) -> Result<(), OpenClError> {
    check_count(f, inputs.len())?;
    inputs.iter().enumerate().try_for_each(|(k, data)| session::check_arg(f, k, data))
}

fn dims(d: &[u64]) -> Result<SpatialDims, OpenClError> {
    let u = |i: usize| usize::try_from(d[i]).map_err(|_| OpenClError::Manifest("size".into()));
    Ok(match d.len() {
        1 => SpatialDims::One(u(0)?),
        2 => SpatialDims::Two(u(0)?, u(1)?),
        3 => SpatialDims::Three(u(0)?, u(1)?, u(2)?),
        n => return Err(OpenClError::Manifest(format!("{n}-dimensional launch"))),
    })
}

/// The build log with each cited `.cl` line (`...:LINE:COL:`) followed by that source line and the
/// op whose kernel holds it (the `// OP at FILE:LINE:COL` comment above the kernel).
pub fn map_build_log(log: &str, source: &str) -> String {
    let lines: Vec<&str> = source.lines().collect();
    let mut out = String::new();
    for l in log.lines() {
        out.push_str(l);
        out.push('\n');
        let Some(n) = cited_line(l) else { continue };
        let Some(text) = n.checked_sub(1).and_then(|i| lines.get(i)) else { continue };
        out.push_str(&format!("  | .cl line {n}: {}\n", text.trim()));
        let op = lines[..n].iter().rev().find(|s| {
            s.starts_with("// ") && (s.contains(" at ") || s.starts_with("// substituted kernel"))
        });
        match op {
            Some(op) if op.starts_with("// substituted kernel") => {
                out.push_str(&format!("  | in the {}\n", op.trim_start_matches("// ")));
            }
            Some(op) => {
                out.push_str(&format!("  | in the kernel of {}\n", op.trim_start_matches("// ")));
            }
            None => {}
        }
    }
    out
}

/// The line number of a clang-style `NAME:LINE:COL: ` message.
fn cited_line(l: &str) -> Option<usize> {
    let mut parts = l.split(':');
    parts.next()?;
    loop {
        let p = parts.next()?;
        if let Ok(n) = p.trim().parse::<usize>() {
            let col = parts.next()?;
            return col.trim().parse::<usize>().ok().map(|_| n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fault recorded by a part of a merged launch names that part's kernel and reads its
    /// operand from the part's own arguments, at the part's location where it has one (a
    /// tail's); each part's output is one the launch writes.
    #[test]
    fn a_part_of_a_merged_launch_reports_its_own_fault() {
        let buffer = |id: usize, elems: u64| fbc_codegen::opencl::StorageDesc {
            id,
            name: format!("s{id}"),
            kind: StorageKind::Buffer,
            dtype: fbc_codegen::opencl::Dtype::I32,
            elems,
            bytes: 4 * elems,
            slot: None,
        };
        let part = |kernel: &str, fault_id, first_arg| fbc_codegen::opencl::LaunchPart {
            kernel: kernel.into(),
            fault_id: Some(fault_id),
            first_arg,
            location: None,
        };
        // Part `v` runs an op of its own line (a tail's).
        let v = fbc_codegen::opencl::LaunchPart {
            location: Some("m.fbir:4:5".into()),
            ..part("v", 8, 2)
        };
        let launch = fbc_codegen::opencl::Launch {
            kernel: "k_v".into(),
            source: "tensor.update_slice | tensor.update_slice".into(),
            location: "m.fbir:3:5".into(),
            args: vec![0, 1, 2, 3],
            global: vec![128],
            local: Some(vec![64]),
            flops: 0,
            bytes: 0,
            tiled: false,
            skinny: false,
            shape: None,
            fault_id: Some(7),
            parts: vec![part("k", 7, 0), v],
        };
        let f = FunctionManifest {
            name: "main".into(),
            args: Vec::new(),
            constants: Vec::new(),
            results: Vec::new(),
            storage: vec![buffer(0, 1), buffer(1, 4), buffer(2, 16), buffer(3, 1)],
            steps: vec![Step::Launch(launch)],
            peak_bytes: 0,
        };
        // Each part writes its last operand (what a session keeps in place).
        let Some(Step::Launch(l)) = f.steps.first() else { panic!() };
        assert_eq!(l.outputs(), [1, 3]);
        // Part `v`'s operand 0 (launch argument 2, 16 elements) read at element 20.
        let mut e = [0i32; FAULT_INTS];
        (e[0], e[1], e[2], e[3]) = (8, 2, 0, 20);
        let OpenClError::Fault { location, message } = fault(&f, &e) else { panic!() };
        assert_eq!(location, "m.fbir:4:5");
        assert_eq!(
            message,
            "kernel `v`: x0[20] is outside operand 0 (16 elements) at domain index []"
        );
        // Part `k`'s operand 1 (launch argument 1, 4 elements), at the launch's location.
        (e[0], e[2]) = (7, 1);
        let OpenClError::Fault { location, message } = fault(&f, &e) else { panic!() };
        assert_eq!(location, "m.fbir:3:5");
        assert_eq!(
            message,
            "kernel `k`: x1[20] is outside operand 1 (4 elements) at domain index []"
        );
    }

    #[test]
    fn a_device_without_half_images_is_refused_clearly() {
        use ocl::core::ImageFormat;
        let f = |o, t| Ok(ImageFormat::new(o, t));
        let float = [
            f(ImageChannelOrder::Rgba, ImageChannelDataType::Float),
            f(ImageChannelOrder::R, ImageChannelDataType::HalfFloat),
        ];
        let e = half_format_check(&float, "dev", "main", &["q", "k"]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the OpenCL device cannot run this module: dev does not support RGBA CL_HALF_FLOAT images, and @main keeps 2 tensor(s) in f16 \
             image2d textures (q, k); compile without --half-images"
        );
        let half = [f(ImageChannelOrder::Rgba, ImageChannelDataType::HalfFloat)];
        assert!(half_format_check(&half, "dev", "main", &["q"]).is_ok());
    }

    #[test]
    fn build_log_lines_are_mapped_to_source_and_op() {
        let src = "x\n// tensor.add at a.fbir:3:5\n__kernel void k() {\n  oops;\n}\n";
        let log = "<source>:4:3: error: use of undeclared identifier 'oops'";
        let m = map_build_log(log, src);
        assert!(m.contains(".cl line 4: oops;"), "{m}");
        assert!(m.contains("in the kernel of tensor.add at a.fbir:3:5"), "{m}");
        assert_eq!(map_build_log("no location here", src), "no location here\n");
    }

    #[test]
    fn cache_entries_are_checked_and_keys_separate_their_parts() {
        let dir = std::env::temp_dir().join(format!("fbc-cache-unit-{}", std::process::id()));
        let e = cache_entry(&dir, "src", "dev", "drv", "");
        assert_ne!(e, cache_entry(&dir, "src", "dev", "drv", "-cl-std=CL3.0"));
        assert_ne!(fnv(&[b"ab", b"c"]), fnv(&[b"a", b"bc"]));
        write_entry(&e, b"binary");
        assert_eq!(read_entry(&e).as_deref(), Some(b"binary".as_slice()));
        // A flipped byte is a miss, not a bad program.
        let mut bytes = std::fs::read(&e).expect("entry");
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        std::fs::write(&e, bytes).expect("write");
        assert_eq!(read_entry(&e), None);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

//! Micro-benchmarks on a device (`fbc calibrate`): what a device says about itself
//! ([`device_facts`]), and [`probe`], which runs a [`Probe`] — a program, storage objects and a
//! list of launches, each repeated — and times every launch with its profiling event and the
//! host's clock. It runs through this module's device selection, program build (cache and
//! mapped build logs), images and profiling events; only what a manifest cannot say (kernels
//! that are not a function's launches, scalar arguments, repetitions of one launch) is its own.

use ocl::enums::{DeviceInfo, DeviceInfoResult, KernelWorkGroupInfo, KernelWorkGroupInfoResult};
use ocl::{Buffer, Event, Image, Kernel, Queue};

use super::{
    context_and_queue, dims, event_span, list_devices, ocl_err, program, rgba_image, select,
    CacheStatus, DeviceInfoRow, DeviceSel, OpenClError, RunOptions, OPENCL,
};
use ocl::enums::ImageChannelDataType;

/// What a device reports about itself (`clGetDeviceInfo`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceFacts {
    pub name: String,
    pub platform: String,
    pub vendor: String,
    /// `CL_DEVICE_VERSION`.
    pub version: String,
    /// `CL_DRIVER_VERSION`.
    pub driver: String,
    /// `CL_DEVICE_MAX_COMPUTE_UNITS`.
    pub compute_units: u32,
    /// `CL_DEVICE_MAX_WORK_GROUP_SIZE`, in work-items.
    pub max_work_group_size: u64,
    /// `CL_DEVICE_LOCAL_MEM_SIZE`, in bytes.
    pub local_mem_bytes: u64,
    /// `CL_DEVICE_IMAGE_SUPPORT`.
    pub image_support: bool,
    /// `CL_DEVICE_IMAGE2D_MAX_WIDTH` and `_HEIGHT`, in texels.
    pub image2d_max: [u64; 2],
    /// `CL_DEVICE_GLOBAL_MEM_SIZE`, in bytes.
    pub global_mem_bytes: u64,
    /// `CL_DEVICE_MAX_MEM_ALLOC_SIZE`, in bytes.
    pub max_alloc_bytes: u64,
    /// `CL_DEVICE_GLOBAL_MEM_CACHELINE_SIZE`, in bytes.
    pub cache_line_bytes: u32,
    /// `CL_DEVICE_GLOBAL_MEM_CACHE_SIZE`, in bytes.
    pub global_cache_bytes: u64,
    /// `CL_DEVICE_MAX_CLOCK_FREQUENCY`, in MHz.
    pub max_clock_mhz: u32,
    /// Whether `CL_DEVICE_EXTENSIONS` lists `cl_khr_fp16`.
    pub fp16: bool,
}

/// The facts of the device `sel` picks. A query the device does not answer is 0 (or false).
pub fn device_facts(sel: &DeviceSel) -> Result<DeviceFacts, OpenClError> {
    let _guard = OPENCL.lock().unwrap_or_else(|p| p.into_inner());
    let info = select(&list_devices(), sel)?;
    Ok(facts_of(&info))
}

fn facts_of(info: &DeviceInfoRow) -> DeviceFacts {
    let q = |what: DeviceInfo| info.device.info(what).ok();
    let u64_of = |what: DeviceInfo| match q(what) {
        Some(
            DeviceInfoResult::LocalMemSize(v)
            | DeviceInfoResult::GlobalMemSize(v)
            | DeviceInfoResult::MaxMemAllocSize(v)
            | DeviceInfoResult::GlobalMemCacheSize(v),
        ) => v,
        Some(
            DeviceInfoResult::MaxWorkGroupSize(v)
            | DeviceInfoResult::Image2dMaxWidth(v)
            | DeviceInfoResult::Image2dMaxHeight(v),
        ) => v as u64,
        Some(
            DeviceInfoResult::MaxComputeUnits(v)
            | DeviceInfoResult::GlobalMemCachelineSize(v)
            | DeviceInfoResult::MaxClockFrequency(v),
        ) => u64::from(v),
        _ => 0,
    };
    let u32_of = |what: DeviceInfo| u32::try_from(u64_of(what)).unwrap_or(u32::MAX);
    let extensions = match q(DeviceInfo::Extensions) {
        Some(DeviceInfoResult::Extensions(e)) => e,
        _ => String::new(),
    };
    DeviceFacts {
        name: info.name.clone(),
        platform: info.platform.clone(),
        vendor: info.vendor.clone(),
        version: info.version.clone(),
        driver: info.driver.clone(),
        compute_units: u32_of(DeviceInfo::MaxComputeUnits),
        max_work_group_size: u64_of(DeviceInfo::MaxWorkGroupSize),
        local_mem_bytes: u64_of(DeviceInfo::LocalMemSize),
        image_support: matches!(
            q(DeviceInfo::ImageSupport),
            Some(DeviceInfoResult::ImageSupport(true))
        ),
        image2d_max: [u64_of(DeviceInfo::Image2dMaxWidth), u64_of(DeviceInfo::Image2dMaxHeight)],
        global_mem_bytes: u64_of(DeviceInfo::GlobalMemSize),
        max_alloc_bytes: u64_of(DeviceInfo::MaxMemAllocSize),
        cache_line_bytes: u32_of(DeviceInfo::GlobalMemCachelineSize),
        global_cache_bytes: u64_of(DeviceInfo::GlobalMemCacheSize),
        max_clock_mhz: u32_of(DeviceInfo::MaxClockFrequency),
        fp16: extensions.split_whitespace().any(|e| e == "cl_khr_fp16"),
    }
}

/// A storage object of a [`Probe`], zero-filled before the first launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeStorage {
    /// A buffer of `floats` f32 values.
    Buffer { floats: u64 },
    /// An RGBA f32 `image2d` of `width` x `height` texels.
    Image { width: u64, height: u64 },
}

impl ProbeStorage {
    /// Bytes on the device.
    pub fn bytes(self) -> Option<u64> {
        match self {
            ProbeStorage::Buffer { floats } => floats.checked_mul(4),
            ProbeStorage::Image { width, height } => {
                width.checked_mul(height).and_then(|t| t.checked_mul(16))
            }
        }
    }
}

/// An argument of a probe's launch: one of its storage objects, or an `int`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeArg {
    Storage(usize),
    Int(i32),
}

/// One launch of a probe, run once untimed (a warm-up) and then `repeat` times back to back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeLaunch {
    /// A kernel of the probe's source.
    pub kernel: String,
    pub args: Vec<ProbeArg>,
    /// Global work size, 1 to 3 dimensions.
    pub global: Vec<u64>,
    /// Work-group size, or `None` for the driver's choice.
    pub local: Option<Vec<u64>>,
    /// Timed launches (at least 1).
    pub repeat: usize,
}

/// A program, its storage objects and the launches to time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    pub source: String,
    pub storage: Vec<ProbeStorage>,
    pub launches: Vec<ProbeLaunch>,
}

/// The times of one [`ProbeLaunch`]'s timed launches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeTimes {
    /// Device time of each launch (`END - START` of its profiling event), in ns.
    pub ns: Vec<u64>,
    /// When each launch started, in ns after the first one started (device clock).
    pub starts: Vec<u64>,
    /// Host wall time from before the first timed launch was enqueued until the queue had
    /// finished them all, in ns.
    pub host_ns: u64,
    /// `CL_KERNEL_PREFERRED_WORK_GROUP_SIZE_MULTIPLE` of the kernel (0 when not answered).
    pub work_group_multiple: u64,
}

impl ProbeTimes {
    /// The median device time (the upper one of an even count).
    pub fn median_ns(&self) -> u64 {
        super::median(self.ns.clone())
    }
}

/// The results of [`probe`].
#[derive(Debug, Clone)]
pub struct ProbeOutput {
    pub facts: DeviceFacts,
    /// One per [`Probe::launches`], in order.
    pub launches: Vec<ProbeTimes>,
    pub cache: CacheStatus,
}

/// A probe's storage object on the device.
enum ProbeMem {
    Buffer(Buffer<f32>),
    Image(Image<f32>),
}

/// Runs `p` on the device `opts.device` picks: builds its source (through the program cache of
/// `opts.cache`, with `opts.build_options`), makes and zero-fills its storage, then runs each
/// launch once and `repeat` times timed. `opts.progress` is told after each launch how many
/// are done. Storage is checked against the memory limit ([`crate::limits`]) and the device's
/// allocation and image limits before anything is made.
pub fn probe(p: &Probe, opts: &RunOptions) -> Result<ProbeOutput, OpenClError> {
    let limit = crate::limits::max_memory();
    let total =
        p.storage.iter().try_fold(0u64, |sum, s| s.bytes().and_then(|b| sum.checked_add(b)));
    if total.is_none_or(|t| t > limit) {
        return Err(OpenClError::Memory(crate::limits::TooLarge {
            what: format!("the {} storage objects of the probe", p.storage.len()),
            bytes: total,
            limit,
        }));
    }
    let _guard = OPENCL.lock().unwrap_or_else(|p| p.into_inner());
    let info = select(&list_devices(), &opts.device)?;
    let facts = facts_of(&info);
    for (i, s) in p.storage.iter().enumerate() {
        let bytes = s.bytes().unwrap_or(u64::MAX);
        if facts.max_alloc_bytes > 0 && bytes > facts.max_alloc_bytes {
            return Err(OpenClError::Unsupported(format!(
                "probe storage {i} of {bytes} bytes is larger than the device's largest \
                 allocation, {} bytes",
                facts.max_alloc_bytes
            )));
        }
        if let ProbeStorage::Image { width, height } = *s {
            let [mw, mh] = facts.image2d_max;
            if !facts.image_support || width > mw || height > mh {
                return Err(OpenClError::Unsupported(format!(
                    "a {width} x {height} image (the device {}: {mw} x {mh} at most)",
                    if facts.image_support { "has images" } else { "has no image support" }
                )));
            }
        }
    }
    let (context, queue) = context_and_queue(&info, true)?;
    let (program, cache) = program(&context, &info, &p.source, opts)?;
    let mut mems = Vec::with_capacity(p.storage.len());
    for (i, s) in p.storage.iter().enumerate() {
        let m = match *s {
            ProbeStorage::Buffer { floats } => {
                let len = usize::try_from(floats.max(1)).map_err(|_| {
                    OpenClError::Manifest(format!("probe storage {i} is too large"))
                })?;
                let b = Buffer::<f32>::builder()
                    .queue(queue.clone())
                    .len(len)
                    .build()
                    .map_err(ocl_err)?;
                b.cmd().fill(0.0, None).enq().map_err(ocl_err)?;
                ProbeMem::Buffer(b)
            }
            ProbeStorage::Image { width, height } => {
                let name = format!("probe storage {i}");
                let im =
                    rgba_image::<f32>(&queue, &name, [width, height], ImageChannelDataType::Float)?;
                let n = width
                    .checked_mul(height)
                    .and_then(|t| t.checked_mul(4))
                    .and_then(|n| usize::try_from(n).ok())
                    .ok_or_else(|| OpenClError::Manifest(format!("{name} is too large")))?;
                im.write(vec![0.0f32; n].as_slice()).enq().map_err(ocl_err)?;
                ProbeMem::Image(im)
            }
        };
        mems.push(m);
    }
    queue.finish().map_err(ocl_err)?;
    let mut out = Vec::with_capacity(p.launches.len());
    for (n, l) in p.launches.iter().enumerate() {
        out.push(time_launch(&program, &queue, &info, &mems, l)?);
        if let Some(progress) = &opts.progress {
            (progress.0)(n + 1);
        }
    }
    Ok(ProbeOutput { facts, launches: out, cache })
}

/// Runs launch `l` once, then `l.repeat` times back to back, and times the latter.
fn time_launch(
    program: &ocl::Program,
    queue: &Queue,
    info: &DeviceInfoRow,
    mems: &[ProbeMem],
    l: &ProbeLaunch,
) -> Result<ProbeTimes, OpenClError> {
    let at = |e: ocl::Error| OpenClError::Ocl(format!("probe kernel {}: {e}", l.kernel));
    let mut kb = Kernel::builder();
    kb.program(program).name(&l.kernel).queue(queue.clone());
    let ints: Vec<i32> = l
        .args
        .iter()
        .map(|a| match a {
            ProbeArg::Int(v) => *v,
            ProbeArg::Storage(_) => 0,
        })
        .collect();
    for (a, int) in l.args.iter().zip(&ints) {
        match a {
            ProbeArg::Storage(i) => match mems.get(*i) {
                Some(ProbeMem::Buffer(b)) => kb.arg(b),
                Some(ProbeMem::Image(im)) => kb.arg(im),
                None => {
                    return Err(OpenClError::Manifest(format!(
                        "probe kernel {} takes storage {i}, which the probe has not",
                        l.kernel
                    )))
                }
            },
            ProbeArg::Int(_) => kb.arg(int),
        };
    }
    let kernel = kb.build().map_err(at)?;
    let work_group_multiple =
        match kernel.wg_info(info.device, KernelWorkGroupInfo::PreferredWorkGroupSizeMultiple) {
            Ok(KernelWorkGroupInfoResult::PreferredWorkGroupSizeMultiple(v)) => v as u64,
            _ => 0,
        };
    let global = dims(&l.global)?;
    let local = l.local.as_deref().map(dims).transpose()?;
    let enqueue = |ev: Option<&mut Event>| -> Result<(), OpenClError> {
        let mut cmd = kernel.cmd().global_work_size(global);
        if let Some(local) = local {
            cmd = cmd.local_work_size(local);
        }
        let cmd = match ev {
            Some(ev) => cmd.enew(ev),
            None => cmd,
        };
        // SAFETY: `ocl` marks every kernel enqueue unsafe because the device may access memory
        // out of bounds. As with `run`'s source and manifest, the caller's kernels access only
        // the storage it sizes for each launch's global size: `fbc calibrate`'s kernels
        // (`fbc_kernels::CALIBRATE`) index within extents it derives together with the
        // storage and the launch sizes.
        #[allow(unsafe_code)]
        let r = unsafe { cmd.enq() };
        r.map_err(at)
    };
    enqueue(None)?;
    queue.finish().map_err(ocl_err)?;
    let repeat = l.repeat.max(1);
    let mut events: Vec<Event> = (0..repeat).map(|_| Event::empty()).collect();
    let start = std::time::Instant::now();
    for ev in &mut events {
        enqueue(Some(ev))?;
    }
    queue.finish().map_err(ocl_err)?;
    let host_ns = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
    let mut ns = Vec::with_capacity(repeat);
    let mut starts = Vec::with_capacity(repeat);
    let mut first = None;
    for ev in &events {
        let (s, e) = event_span(ev)?;
        let first = *first.get_or_insert(s);
        ns.push(e.saturating_sub(s));
        starts.push(s.saturating_sub(first));
    }
    Ok(ProbeTimes { ns, starts, host_ns, work_group_multiple })
}

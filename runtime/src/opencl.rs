//! The OpenCL runtime: runs the kernels and launch manifest of `fbc_codegen::opencl` on a device.
//!
//! Devices are numbered across platforms in the order the ICD loader lists them ([`devices`]);
//! `fbc devices` prints that list and `fbc run --target opencl --device N` picks one. A run
//! allocates one buffer per manifest buffer, writes the arguments, enqueues every launch in order
//! on one in-order queue, and reads the results back. A kernel build failure carries the build log
//! with every `LINE:COL` it cites followed by that line of the `.cl` source and the op (and `.fbir`
//! location) whose kernel contains it ([`map_build_log`]).

use std::sync::Mutex;
use std::time::Instant;

use fbc_codegen::opencl::{FunctionManifest, Manifest, MANIFEST_VERSION};
use ocl::{Buffer, Context, Device, Kernel, Platform, Program, Queue, SpatialDims};

/// Why an OpenCL run failed.
#[derive(Debug, thiserror::Error)]
pub enum OpenClError {
    /// No platform or device, or device index out of range.
    #[error("no OpenCL device: {0}")]
    NoDevice(String),
    /// The OpenCL C did not compile; the log is mapped to the source (see [`map_build_log`]).
    #[error("OpenCL kernel build failed:\n{0}")]
    Build(String),
    /// The manifest does not fit the inputs or the source.
    #[error("{0}")]
    Manifest(String),
    /// Any other OpenCL error.
    #[error("OpenCL error: {0}")]
    Ocl(String),
}

fn ocl_err(e: impl std::fmt::Display) -> OpenClError {
    OpenClError::Ocl(e.to_string())
}

/// One device, as [`devices`] numbers it.
#[derive(Debug, Clone)]
pub struct DeviceInfo {
    pub index: usize,
    pub platform: String,
    pub name: String,
    pub vendor: String,
    pub version: String,
    device: Device,
    platform_id: Platform,
}

/// Serialises OpenCL use within the process: PoCL crashed (SIGSEGV) when tests created contexts
/// and built programs from several threads at once, and one run at a time costs nothing here.
static OPENCL: Mutex<()> = Mutex::new(());

/// Every device of every platform, numbered from 0. No ICD loader or no platform gives an empty
/// list (not an error), so callers decide whether that is fatal.
pub fn devices() -> Vec<DeviceInfo> {
    let _guard = OPENCL.lock().unwrap_or_else(|p| p.into_inner());
    list_devices()
}

fn list_devices() -> Vec<DeviceInfo> {
    // `Platform::list` panics without platforms; the core call reports it as an error instead.
    let Ok(ids) = ocl::core::get_platform_ids() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for p in Platform::list_from_core(ids) {
        let Ok(devs) = Device::list_all(p) else { continue };
        for d in devs {
            out.push(DeviceInfo {
                index: out.len(),
                platform: p.name().unwrap_or_else(|_| "?".into()),
                name: d.name().unwrap_or_else(|_| "?".into()),
                vendor: d.vendor().unwrap_or_else(|_| "?".into()),
                version: d.version().map(|v| v.to_string()).unwrap_or_else(|_| "?".into()),
                device: d,
                platform_id: p,
            });
        }
    }
    out
}

/// The results of a run and how long the launches took (enqueue to finish, wall clock).
#[derive(Debug, Clone)]
pub struct RunOutput {
    /// One f32 vector per function result, row-major.
    pub results: Vec<Vec<f32>>,
    pub device: String,
    pub kernel_seconds: f64,
}

/// Runs function `func` of `manifest` (kernels in `source`) on device `device` with one row-major
/// f32 vector per argument.
pub fn run(
    source: &str,
    manifest: &Manifest,
    func: &str,
    inputs: &[Vec<f32>],
    device: usize,
) -> Result<RunOutput, OpenClError> {
    if manifest.version != MANIFEST_VERSION {
        return Err(OpenClError::Manifest(format!(
            "manifest version {} (this runtime reads {MANIFEST_VERSION})",
            manifest.version
        )));
    }
    let f = manifest
        .function(func)
        .ok_or_else(|| OpenClError::Manifest(format!("no function `{func}` in the manifest")))?;
    check_inputs(f, inputs)?;
    let _guard = OPENCL.lock().unwrap_or_else(|p| p.into_inner());
    let all = list_devices();
    let info = all.get(device).ok_or_else(|| {
        OpenClError::NoDevice(format!("device {device} requested, {} available", all.len()))
    })?;
    let context = Context::builder()
        .platform(info.platform_id)
        .devices(info.device)
        .build()
        .map_err(ocl_err)?;
    let queue = Queue::new(&context, info.device, None).map_err(ocl_err)?;
    let program = Program::builder()
        .devices(info.device)
        .src(source)
        .build(&context)
        .map_err(|e| OpenClError::Build(map_build_log(&e.to_string(), source)))?;
    let mut buffers = Vec::with_capacity(f.buffers.len());
    for b in &f.buffers {
        let len = usize::try_from(b.elems)
            .map_err(|_| OpenClError::Manifest(format!("buffer {} is too large", b.name)))?;
        // OpenCL has no empty buffers; an empty tensor gets one unused element.
        let buf = Buffer::<f32>::builder().queue(queue.clone()).len(len.max(1)).build();
        buffers.push(buf.map_err(ocl_err)?);
    }
    for (&id, data) in f.args.iter().zip(inputs) {
        if !data.is_empty() {
            buffers[id].write(&data[..]).enq().map_err(ocl_err)?;
        }
    }
    let start = Instant::now();
    for l in &f.launches {
        let mut kb = Kernel::builder();
        kb.program(&program).name(&l.kernel).queue(queue.clone());
        for &a in &l.args {
            let b = buffers.get(a).ok_or_else(|| {
                OpenClError::Manifest(format!("launch {} names buffer {a}", l.kernel))
            })?;
            kb.arg(b);
        }
        let kernel = kb.build().map_err(ocl_err)?;
        let mut cmd = kernel.cmd().global_work_size(dims(&l.global)?);
        if let Some(local) = &l.local {
            cmd = cmd.local_work_size(dims(local)?);
        }
        // SAFETY: `ocl` marks every kernel enqueue unsafe because the device may access the
        // buffers out of bounds. Each argument is a live buffer of the manifest's size, and every
        // generated kernel guards its global id against the element count it was written for, so
        // the kernel stays inside its buffers.
        #[allow(unsafe_code)]
        unsafe {
            cmd.enq()
                .map_err(|e| OpenClError::Ocl(format!("{} ({}): {e}", l.kernel, l.location)))?;
        }
    }
    queue.finish().map_err(ocl_err)?;
    let kernel_seconds = start.elapsed().as_secs_f64();
    let mut results = Vec::new();
    for &id in &f.results {
        let mut v = vec![0.0f32; buffers[id].len()];
        buffers[id].read(&mut v).enq().map_err(ocl_err)?;
        v.truncate(usize::try_from(f.buffers[id].elems).unwrap_or(0));
        results.push(v);
    }
    Ok(RunOutput { results, device: format!("{} ({})", info.name, info.platform), kernel_seconds })
}

fn check_inputs(f: &FunctionManifest, inputs: &[Vec<f32>]) -> Result<(), OpenClError> {
    if inputs.len() != f.args.len() {
        return Err(OpenClError::Manifest(format!(
            "@{} takes {} arguments, {} given",
            f.name,
            f.args.len(),
            inputs.len()
        )));
    }
    for (k, (&id, data)) in f.args.iter().zip(inputs).enumerate() {
        let b = f.buffers.get(id).ok_or_else(|| OpenClError::Manifest("bad buffer id".into()))?;
        if data.len() as u64 != b.elems {
            return Err(OpenClError::Manifest(format!(
                "argument {k} ({}) has {} elements, {} expected",
                b.name,
                data.len(),
                b.elems
            )));
        }
    }
    Ok(())
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
        let op = lines[..n].iter().rev().find(|s| s.starts_with("// ") && s.contains(" at "));
        if let Some(op) = op {
            out.push_str(&format!("  | in the kernel of {}\n", op.trim_start_matches("// ")));
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

    #[test]
    fn build_log_lines_are_mapped_to_source_and_op() {
        let src = "x\n// tensor.add at a.fbir:3:5\n__kernel void k() {\n  oops;\n}\n";
        let log = "<source>:4:3: error: use of undeclared identifier 'oops'";
        let m = map_build_log(log, src);
        assert!(m.contains(".cl line 4: oops;"), "{m}");
        assert!(m.contains("in the kernel of tensor.add at a.fbir:3:5"), "{m}");
        assert_eq!(map_build_log("no location here", src), "no location here\n");
    }
}

//! `fbc run --target opencl` and `fbc devices`.
//!
//! The module is compiled at `-O LEVEL` (default `-O3`) with `--layout-strategy` (default
//! fblayout), lowered to the memory dialect for hardware profile `--profile` (default `generic`;
//! skipped when the input is already lowered), written as OpenCL C, and run on device
//! `--device N|NAME` with the inputs `fbc run` reads for the interpreter. `--dump-kernels DIR`
//! writes the generated source first (one `.cl` per kernel and the whole); `--substitute-kernel
//! NAME=FILE.cl` replaces generated kernel `NAME` by the `__kernel` in `FILE.cl` (same name and
//! parameters) before the program is built, like IREE's executable substitution.
//!
//! With `--check` the original module also runs in the reference interpreter, in f64 and in f32,
//! on the same inputs, and every result is compared with the f64 one:
//! `|device - ref64| <= ATOL + RTOL * (|ref64| + max |ref64|) + 8 * E32` elementwise, where
//! `E32 = max |ref32 - ref64|` over the result is the error the interpreter's own f32 computation
//! makes. The maximum absolute and relative errors are printed per result; any element outside
//! the bound fails the run (exit 1). The `max |ref|` term is there because f32 sums in another
//! order differ by about `K·ε·Σ|terms|`, which for a result near zero is far more than
//! `ε·|result|`; the `E32` term because some results (gradients through a softmax) are
//! ill-conditioned: f32 evaluation in any order is off by more than the fixed bound. Two f32
//! evaluations in different orders are off by amounts that vary with the inputs (on the Llama
//! layer's LoRA gradients we measured the device 3.9x further from f64 than the interpreter on one
//! seed, 4x closer on another), so the device may be off by up to 8 times the interpreter's own
//! error — still far below the size of the results, where a wrong kernel lands. Without the `opencl` feature both commands answer that fbc was built without
//! OpenCL (exit 2).

// Without the `opencl` feature only the stubs are reachable; the compile path stays built.
#![cfg_attr(not(feature = "opencl"), allow(dead_code))]

use std::path::Path;
use std::sync::Arc;

use fbc_codegen::opencl::Output;
use fbc_ir::{FuncId, Module, SourceFile};

use crate::{Driver, Failure};

use crate::cli::RunArgs;

/// A module compiled for OpenCL: the original (for the interpreter), the entry function, the
/// lowered module, the generated source and manifest, and the lowering passes' statistics.
pub(crate) struct Compiled {
    pub file: Arc<SourceFile>,
    pub module: Module,
    pub func: FuncId,
    pub lowered: Module,
    pub out: Output,
    pub stats: fbc_ir::pass::Statistics,
}

impl Compiled {
    /// The entry function's name.
    pub(crate) fn entry_name(&self) -> String {
        self.module.func(self.func).name.clone()
    }

    /// The entry's arguments as `f32` values, from `src`.
    pub(crate) fn inputs(
        &self,
        src: super::io::Sources<'_>,
    ) -> Result<Vec<fbc_runtime::interp::Value>, Failure> {
        let f32 = fbc_runtime::interp::Mode::F32;
        super::io::read_inputs(&self.module, self.func, src, f32, &self.file.name)
    }
}

/// Loads `path` and compiles it with `session` (optimised, lowered, verified), then writes
/// OpenCL C (`tiled`: contractions get the tiled kernel; `tuned`: `fbc tune`'s parameters).
pub(crate) fn compile(
    session: &crate::Session<'_>,
    path: &Path,
    entry: Option<&str>,
    tiled: bool,
    tuned: crate::tuning::Entries,
) -> Result<Compiled, Failure> {
    let (file, module) = session.driver.load(path)?;
    compile_loaded(session, file, module, entry, tiled, tuned)
}

/// [`compile`] for a module loaded already (from `file`).
pub(crate) fn compile_loaded(
    session: &crate::Session<'_>,
    file: Arc<SourceFile>,
    module: Module,
    entry: Option<&str>,
    tiled: bool,
    tuned: crate::tuning::Entries,
) -> Result<Compiled, Failure> {
    let func = super::entry(&module, entry, &file)?;
    let f32 = fbc_runtime::interp::Mode::F32;
    super::check_memory(&file, &module, func, f32)?;
    let mut lowered = module.clone();
    let stats = session.compile(&file, &mut lowered)?;
    let fname = module.func(func).name.clone();
    let lfunc = super::lowered_func(&lowered, &fname, &file)?;
    super::check_memory(&file, &lowered, lfunc, f32)?;
    let out = session.emit_opencl(&lowered, tiled, tuned)?;
    Ok(Compiled { file, module, func, lowered, out, stats })
}

/// Parses `--substitute-kernel NAME=FILE.cl` and applies every substitution to the source.
pub(crate) fn substituted_source(out: &Output, subs: &[String]) -> Result<String, Failure> {
    let mut current = out.clone();
    for s in subs {
        let (name, path) = s.split_once('=').ok_or_else(|| {
            Failure::Usage(format!("--substitute-kernel `{s}`: expected NAME=FILE.cl"))
        })?;
        let text = std::fs::read_to_string(path).map_err(|e| {
            Failure::Usage(format!("--substitute-kernel {name}: cannot read {path}: {e}"))
        })?;
        let src = fbc_codegen::opencl::substitute_kernel(&current, name, &text)
            .map_err(|e| Failure::Usage(format!("--substitute-kernel {name}: {e}")))?;
        // Later substitutions see this one: replace the kernel's text in the list too.
        for k in &mut current.kernels {
            if k.0 == name {
                k.1 = format!("// substituted kernel {name}\n{text}");
            }
        }
        current.source = src;
    }
    Ok(current.source)
}

/// The answer of every OpenCL command (`run --target opencl`, `bench`, `tune`) in a build
/// without the `opencl` feature.
#[cfg(not(feature = "opencl"))]
pub(crate) fn no_opencl() -> Failure {
    Failure::Usage(
        "not yet supported: this fbc was built without the `opencl` feature \
         (cargo build --features opencl)"
            .into(),
    )
}

#[cfg(not(feature = "opencl"))]
pub(crate) fn run(_driver: &Driver, _a: &RunArgs) -> Result<(), Failure> {
    Err(no_opencl())
}

#[cfg(not(feature = "opencl"))]
pub(crate) fn devices() -> Result<(), Failure> {
    Err(no_opencl())
}

#[cfg(feature = "opencl")]
pub(crate) fn devices() -> Result<(), Failure> {
    let list = fbc_runtime::device::opencl::devices();
    if list.is_empty() {
        return Err(Failure::Usage(
            "no OpenCL platform or device found (install an ICD, e.g. pocl-opencl-icd)".into(),
        ));
    }
    let mut text = String::new();
    for d in list {
        text.push_str(&format!(
            "{}: {} — {} ({}, {}, driver {})\n",
            d.index, d.name, d.platform, d.vendor, d.version, d.driver
        ));
    }
    crate::output::write_text(None, &text)
}

/// The OpenCL runtime error as an input error of the file.
#[cfg(feature = "opencl")]
pub(crate) fn device_failure(file: &str, e: &fbc_runtime::device::opencl::OpenClError) -> Failure {
    use fbc_runtime::device::opencl::OpenClError;
    match e {
        OpenClError::NoDevice(_) => Failure::Usage(e.to_string()),
        // At the launch's op when the error belongs to one.
        OpenClError::OutOfResources { kernel, location, message } => Failure::Input(format!(
            "{location}: error: out of resources launching {kernel}: {message}\n"
        )),
        OpenClError::Fault { location, message } => {
            Failure::Input(format!("{location}: error: `memory.launch`: {message}\n"))
        }
        _ => Failure::Input(format!("{file}: error: {e}\n")),
    }
}

/// A kernel's run-time fault rendered at its `memory.launch` op (found in `lowered` by the
/// manifest's `location`), as the interpreter and the CPU JIT render their launch errors.
#[cfg(feature = "opencl")]
pub(crate) fn fault_at(
    lowered: &Module,
    file: &SourceFile,
    location: &str,
    message: &str,
) -> Failure {
    let message = format!("`memory.launch`: {message}");
    let span = lowered
        .funcs
        .iter()
        .flat_map(|f| &f.body)
        .map(|&op| lowered.op(op))
        .filter(|d| fbc_dialects::kind::MemoryOp::Launch.is(d) && d.span.end > d.span.start)
        .map(|d| d.span)
        .find(|s| {
            let (l, c) = file.line_col(s.start);
            format!("{}:{l}:{c}", file.name) == location
        });
    match span {
        Some(s) => Failure::input(file, &[fbc_ir::Diagnostic::error(message).at(s)]),
        None => Failure::Input(format!("{location}: error: {message}\n")),
    }
}

/// The arguments of `fname` whose tensor the weight file `w` stores as texels (`fbc pack
/// --for`) in exactly the form every upload of the argument in `out` takes (the same R-Tile and
/// image): `(argument, name)`.
#[cfg(feature = "opencl")]
fn stored_forms<B: AsRef<[u8]>>(
    out: &Output,
    fname: &str,
    w: &fbc_runtime::weights::Weights<B>,
) -> Vec<(usize, String)> {
    use fbc_codegen::opencl::{Dtype, StorageKind};
    use fbc_dialects::layout::{Intra, Layout, Pack};
    let Some(f) = out.manifest.function(fname) else { return Vec::new() };
    let block = |i: Intra| match i {
        Intra::Rows => None,
        Intra::Block { bh, bw } => Some([bh, bw]),
    };
    let mut found = Vec::new();
    for (arg, a) in f.args.iter().enumerate() {
        let name = &a.name;
        let ups: Vec<_> = f.uploads_of(arg).collect();
        if ups.is_empty() {
            continue;
        }
        let Some(st) = w.tensor(name).ok().and_then(|t| t.storage.as_ref()) else { continue };
        let same = ups.iter().all(|u| {
            let (Some(desc), Ok(Layout::RTile(r))) = (f.storage.get(u.storage), u.layout.layout())
            else {
                return false;
            };
            matches!(desc.kind, StorageKind::Image2d { width, height } if [width, height] == st.texels)
                && desc.dtype == Dtype::F32
                && r.tile == st.tile
                && r.horizontal == st.horizontal
                && block(r.intra) == st.block
                && Pack::from_record(st.pack.as_deref()) == Some(r.pack)
        });
        if same {
            found.push((arg, name.clone()));
        }
    }
    found
}

/// The arguments of `fname` that the weight-streaming plan uploads during a launch
/// (`stream_from`) and that the weight file `w` holds by name: `(argument, name)`.
#[cfg(feature = "opencl")]
fn streamed_weights<B: AsRef<[u8]>>(
    out: &Output,
    fname: &str,
    w: &fbc_runtime::weights::Weights<B>,
) -> Vec<(usize, String)> {
    let Some(f) = out.manifest.function(fname) else { return Vec::new() };
    (0..f.args.len())
        .filter(|&arg| f.uploads_of(arg).any(|u| u.stream_from.is_some()))
        .filter(|&arg| w.tensor(&f.args[arg].name).is_ok())
        .map(|arg| (arg, f.args[arg].name.clone()))
        .collect()
}

/// Weight `name` of `w` as a lazy upload gives it: its texels where it is stored in the
/// upload's form (`as_stored`), else its values — for a row tile (`rows`, axis 0) only those
/// rows, read from the file's tiles that hold them.
#[cfg(feature = "opencl")]
fn produce<B: AsRef<[u8]>>(
    w: &fbc_runtime::weights::Weights<B>,
    name: &str,
    as_stored: bool,
    rows: Option<[u64; 2]>,
) -> Result<fbc_runtime::device::opencl::Produced, String> {
    use fbc_runtime::device::opencl::Produced;
    if as_stored {
        if let Some((_, t)) = w.texels(name).map_err(|e| e.to_string())? {
            return Ok(Produced::Stored(fbc_runtime::exec::MemData::F32(t)));
        }
    }
    let t = w.tensor(name).map_err(|e| e.to_string())?;
    let mut shape: Vec<usize> = t.shape.iter().map(|&d| d as usize).collect();
    let v = match (rows, shape.first().copied()) {
        (Some([start, count]), Some(outer)) if outer > 0 => {
            // Axis 0's rows of the file's rows (every axis but the last).
            let per = t.rows().0 / outer as u64;
            shape[0] = count as usize;
            w.dequantize_rows(name, start * per, count * per)
        }
        _ => w.dequantize(name),
    }
    .map_err(|e| e.to_string())?;
    let t = fbc_runtime::reference::Tensor::new(shape, v).map_err(|e| e.to_string())?;
    Ok(Produced::Value(fbc_runtime::interp::Value::F32(t)))
}

/// The line `--memory-budget` prints: the budget, the device's peak, and what was streamed.
#[cfg(feature = "opencl")]
pub(crate) fn budget_report(
    budget: u64,
    peak: u64,
    s: &fbc_runtime::device::opencl::Streaming,
) -> String {
    let hidden = if s.transfer_ns == 0 {
        String::new()
    } else {
        format!(
            ", {:.3} ms of transfers, {:.3} ms ({:.0}%) hidden behind launches",
            s.transfer_ns as f64 * 1e-6,
            s.hidden_ns as f64 * 1e-6,
            100.0 * s.hidden_ns as f64 / s.transfer_ns as f64
        )
    };
    let pinned = if s.pinned_bytes > 0 {
        format!(", {} bytes from pinned host memory", s.pinned_bytes)
    } else {
        String::new()
    };
    let back = if s.written_back > 0 {
        format!("; wrote {} bytes back to the host after their last launch", s.written_back)
    } else {
        String::new()
    };
    format!(
        "memory budget {budget} bytes: peak device memory {peak} bytes; streamed {} bytes in {} uploads{pinned}{hidden}{back}",
        s.bytes, s.uploads
    )
}

/// The tuned contraction parameters (`fbc tune`) of the device `--device` selects, from
/// `--tuning FILE` or the default database; none when there is no such device (the run then
/// says so).
#[cfg(feature = "opencl")]
pub(crate) fn device_tuning(explicit: Option<&Path>, device: &str) -> crate::tuning::Entries {
    match fbc_runtime::device::opencl::device(&fbc_runtime::device::opencl::DeviceSel::parse(
        device,
    )) {
        Ok(d) => crate::tuning::load(
            explicit,
            crate::tuning::For::Device { name: &d.name, driver: &d.driver },
        ),
        Err(_) => crate::tuning::Entries::default(),
    }
}

#[cfg(feature = "opencl")]
pub(crate) fn run(driver: &Driver, a: &RunArgs) -> Result<(), Failure> {
    use fbc_runtime::device::opencl::{DeviceSel, Input, Produced, RunOptions};

    if a.f64 {
        return Err(Failure::Usage("not yet supported: --f64 with --target opencl".into()));
    }
    let mut session = a.lower.session(driver, a.split_k)?;
    session.memory_budget = a.device.memory_budget;
    session.kv_tiling = a.device.kv_tiling;
    let tuned = device_tuning(a.device.tuning.as_deref(), &a.device.device);
    let c = compile(&session, &a.file, a.entry.as_deref(), true, tuned)?;
    let (file, module, func) = (&c.file, &c.module, c.func);
    let fname = c.entry_name();
    // The weight file, where it reads (else the input reader reports why).
    let map = a.weights.as_deref().and_then(|p| super::mapped::map_file(p).ok());
    let weights = map.as_ref().and_then(|m| fbc_runtime::weights::Weights::new(&m[..]).ok());
    let wname = a.weights.as_deref().map(|p| p.display().to_string()).unwrap_or_default();
    // Not with --check, whose interpreter needs every value: weights stored in the form this
    // module uploads them in go up as they are, and under a budget the streamed ones are read
    // from the file during the run, one ahead of their transfers, rather than all before it.
    let (forms, lazy) = match (&weights, a.check) {
        (Some(w), false) => (
            stored_forms(&c.out, &fname, w),
            if a.device.memory_budget.is_some() {
                streamed_weights(&c.out, &fname, w)
            } else {
                Vec::new()
            },
        ),
        _ => (Vec::new(), Vec::new()),
    };
    let supplied: Vec<&str> = forms.iter().chain(&lazy).map(|(_, n)| n.as_str()).collect();
    let inputs = c.inputs(super::io::Sources { stored: &supplied, ..a.sources() })?;
    let mut stored = Vec::new();
    if let Some(w) = &weights {
        for (arg, name) in forms.iter().filter(|f| !lazy.contains(f)) {
            match w.texels(name) {
                Ok(Some((_, t))) => stored.push((*arg, fbc_runtime::exec::MemData::F32(t))),
                Ok(None) => {}
                Err(e) => return Err(Failure::Input(format!("{wname}: error: {e}\n"))),
            }
        }
    }
    type Boxed<'w> = Box<dyn Fn(Option<[u64; 2]>) -> Result<Produced, String> + Sync + 'w>;
    let producers: Vec<(usize, Boxed<'_>)> = match &weights {
        Some(w) => lazy
            .iter()
            .map(|(arg, name)| {
                let as_stored = forms.iter().any(|(k, _)| k == arg);
                let p: Boxed<'_> = Box::new(move |rows| produce(w, name, as_stored, rows));
                (*arg, p)
            })
            .collect(),
        None => Vec::new(),
    };
    if let Some(dir) = &a.dump_kernels {
        crate::opencl_emit::dump_kernels(&c.out, module, &a.file, dir)?;
    }
    let source = substituted_source(&c.out, &a.substitute_kernel)?;
    let opts = RunOptions {
        device: DeviceSel::parse(&a.device.device),
        show_build_warnings: a.verbose,
        device_memory: a.device.device_memory.runtime(),
        memory_budget: a.device.memory_budget,
        repeat: a.runs as usize - 1,
        ..RunOptions::default()
    };
    let run_inputs: Vec<Input<'_>> = inputs
        .iter()
        .enumerate()
        .map(|(i, v)| {
            if let Some((_, p)) = producers.iter().find(|p| p.0 == i) {
                return Input::Lazy(&**p);
            }
            match stored.iter().find(|s| s.0 == i) {
                Some(s) => Input::Stored(&s.1),
                None => Input::Host(v),
            }
        })
        .collect();
    if a.verbose && !forms.is_empty() {
        let names: Vec<&str> = forms.iter().map(|(_, n)| n.as_str()).collect();
        eprintln!(
            "uploading {} weight(s) as stored in {wname} (no packing): {}",
            forms.len(),
            names.join(", ")
        );
    }
    if a.verbose && !lazy.is_empty() {
        eprintln!(
            "reading {} streamed weight(s) from {wname} during the run, one ahead of their transfers",
            lazy.len()
        );
    }
    let res = fbc_runtime::device::opencl::run_inputs(
        &source,
        &c.out.manifest,
        &fname,
        &run_inputs,
        &opts,
    )
    .map_err(|e| match &e {
        fbc_runtime::device::opencl::OpenClError::Fault { location, message } => {
            fault_at(&c.lowered, file, location, message)
        }
        _ => device_failure(&file.name, &e),
    })?;
    let types = &module.func(func).result_types;
    let mut text = String::new();
    if a.verbose {
        let total: u64 = res.launches.iter().map(|l| l.median_ns()).sum();
        eprintln!(
            "ran @{fname} on {}: {} launches, {:.3} ms of device time (program cache: {:?})",
            res.device,
            res.launches.len(),
            total as f64 * 1e-6,
            res.cache
        );
    }
    if let Some(budget) = a.device.memory_budget {
        eprintln!("{}", budget_report(budget, res.device_peak_bytes, &res.streaming));
    }
    for (i, (v, ty)) in res.results.iter().zip(types).enumerate() {
        text.push_str(&super::summary(&format!("result{i}"), ty, v));
    }
    let device_values = res.results;
    if a.check {
        let half = super::check::HalfModel::of(&c.lowered, &fname, file, true)?;
        super::check::check(file, module, func, inputs, &device_values, "OpenCL", half, &mut text)?;
    }
    super::f32_weights::compare(a, file, module, func, &device_values, &mut text)?;
    // Written only once the run (and its check) succeeded: a failure leaves no outputs file.
    if let Some(path) = &a.outputs {
        let bytes = super::io::encode_outputs(module, func, &device_values)?;
        crate::output::write_atomic(path, &bytes)?;
    }
    if a.outputs.is_none() || a.verbose || a.check || a.f32_weights.is_some() {
        crate::output::write_text(None, &text)?;
    }
    Ok(())
}

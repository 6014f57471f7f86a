//! Sessions: one device, one built program and storage kept on the device from call to call.
//!
//! [`run`](super::run) makes a session for one function and drops it. A caller that calls a
//! module's functions again and again (`fbc generate`: `@prefill` once, then `@decode` once a
//! token) keeps a [`Session`] instead: the context, the program and each function's kernel
//! objects and storage pool are made once, and an argument passed as [`Input::Keep`] stays on
//! the device under its key, so that a weight is uploaded at the first call only.
//!
//! A kept value is held in the storage form (kind, element type, size, layout) of the upload
//! that needed it. Passed with a value, the key is uploaded and replaces what it held; passed
//! without one, an upload in a form the key holds uses that object as it is, and one in another
//! form (`@prefill` and `@decode` may lay a weight out differently) reads the kept object back,
//! unpacks it and uploads it packed in the new form, and both forms stay. A function that writes a
//! kept argument's storage in place and returns it as a result (a KV cache updated in place)
//! leaves the result under the key: the caller need not download it, and passes the key
//! without a value next time; the key's other forms are then stale and dropped. A kept argument
//! whose storage a launch overwrites without returning it is dropped after the call (the next
//! call uploads it again), as is every kept argument a failed call may have written.

use std::collections::{HashMap, HashSet};
use std::sync::MutexGuard;

use super::*;

/// What an [`Input::Lazy`] argument gives when the run needs it.
#[derive(Debug)]
pub enum Produced {
    /// A host tensor, packed by the upload's layout.
    Value(Value),
    /// The storage's contents as they are (see [`Input::Stored`]).
    Stored(MemData),
}

/// The producer of an [`Input::Lazy`] argument, called with the row tile the upload holds
/// (`[start, count]` of axis 0; `None`: all of it). It may give only those rows (a value whose
/// axis 0 is `count` long: a weight file reads only the tiles holding them) or the whole value
/// (stored contents are always whole), which the upload then cuts.
pub type Producer<'a> = &'a (dyn Fn(Option<[u64; 2]>) -> Result<Produced, String> + Sync);

/// An argument of [`Session::call`].
#[derive(Clone, Copy)]
pub enum Input<'a> {
    /// Packed and uploaded for this call only.
    Host(&'a Value),
    /// Kept on the device under `key` (see the module documentation): `Some` uploads the value
    /// and replaces what the key held; `None` takes what the key holds (in another form: read
    /// back and uploaded in this one; an error where it holds nothing).
    Keep { key: &'a str, value: Option<&'a Value> },
    /// Kept on the device under `key`, whose value the caller still holds: an upload in a form
    /// the key holds uses that object; one in another form packs `value` and replaces the key's
    /// other forms (no read-back, and one form on the device at a time: `@prefill`'s R-Tile
    /// images give way to `@decode`'s buffers once, where the profile chose them so).
    Held { key: &'a str, value: &'a Value },
    /// The contents of the upload's storage as they are (the texels of an R-Tile image that
    /// `fbc pack --for` stored): written without packing; they must fit the storage's type.
    Stored(&'a MemData),
    /// Made when the run needs it and dropped once it is on the device, so that the host does
    /// not hold every weight at once: an upload the weight-streaming plan places at a launch
    /// is produced on a helper thread, one upload ahead of the transfers, in the order the
    /// plan starts them (the seed's prefetch: the next weights are read from their file while
    /// earlier launches run); any other upload where it stands. Each run calls it again.
    Lazy(Producer<'a>),
}

impl std::fmt::Debug for Input<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Input::Host(v) => f.debug_tuple("Host").field(v).finish(),
            Input::Keep { key, value } => {
                f.debug_struct("Keep").field("key", key).field("value", value).finish()
            }
            Input::Held { key, .. } => f.debug_struct("Held").field("key", key).finish(),
            Input::Stored(d) => write!(f, "Stored({} values)", d.len()),
            Input::Lazy(_) => f.write_str("Lazy(..)"),
        }
    }
}

/// What a [`Session`] call returned and did.
#[derive(Debug, Clone)]
pub struct CallOutput {
    /// One per function result; `None` for a result the caller did not want.
    pub results: Vec<Option<Value>>,
    /// One per launch step, in order (see [`RunOutput::launches`]).
    pub launches: Vec<LaunchTime>,
    /// See [`RunOutput::launch_host_ns`].
    pub launch_host_ns: u64,
    /// The most bytes the function's storage objects held at once, plus every kept value's.
    pub device_peak_bytes: u64,
    /// See [`RunOutput::objects_made`].
    pub objects_made: u64,
    /// Bytes this call wrote to the device (uploads, kept ones included).
    pub uploaded_bytes: u64,
    /// Bytes this call read back (downloads, and kept values read to change their form).
    pub downloaded_bytes: u64,
    /// The streamed uploads of the last run (see [`RunOptions::memory_budget`]).
    pub streaming: Streaming,
}

/// The storage form a kept value is held in.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Form {
    kind: StorageKind,
    dtype: Dtype,
    elems: u64,
    layout: String,
    shape: Vec<u64>,
    /// The row tile of the value it holds (`None`: all of it).
    rows: Option<[u64; 2]>,
}

/// A value kept on the device.
struct Kept {
    key: String,
    /// The call that uploaded it (see `Session::calls`).
    call: u64,
    form: Form,
    desc: StorageDesc,
    layout: LayoutDesc,
    mem: Mem,
}

/// Where an upload step's object comes from.
enum Source<'i> {
    /// A storage object of the function's, written with these packed values (the caller's
    /// own for [`Input::Stored`]).
    Write(std::borrow::Cow<'i, MemData>),
    /// A kept object, used as it is.
    Kept(Mem),
    /// A storage object of the function's, written with what the producer gives when the run
    /// needs it ([`Input::Lazy`]).
    Lazy(LazySource<'i>),
}

/// An [`Input::Lazy`] upload: its producer and how its value is packed.
struct LazySource<'i> {
    produce: Producer<'i>,
    layout: Layout,
    /// The stored tensor's shape (a row tile's where `rows` is set).
    shape: Vec<u64>,
    /// The upload's row tile of the argument ([`Step::Upload`]'s `rows`).
    rows: Option<[u64; 2]>,
    ty: MemType,
    /// `argument K (NAME)`, for errors.
    what: String,
}

impl LazySource<'_> {
    /// The storage contents: the producer's value packed, or its stored contents checked.
    fn make(&self) -> Result<MemData, OpenClError> {
        let bad = |e: String| OpenClError::Manifest(format!("{}: {e}", self.what));
        match (self.produce)(self.rows).map_err(bad)? {
            Produced::Value(v) => {
                // Given only the rows asked for (axis 0 `count` long: the whole value has
                // more, or is those rows), or the whole value, which is cut.
                let given =
                    self.rows.is_some_and(|[_, n]| v.shape().first() == Some(&(n as usize)));
                let v = v.row_tile(self.rows.filter(|_| !given)).map_err(bad)?;
                pack(&self.layout, &self.shape, &v, self.ty).map_err(bad)
            }
            Produced::Stored(d) => {
                let d = match self.rows {
                    Some(rows) => stored_rows(&d, rows, &self.layout, &self.shape).map_err(bad)?,
                    None => d,
                };
                if !d.fits(self.ty) {
                    return Err(bad(format!("{} stored values do not fit {}", d.len(), self.ty)));
                }
                Ok(d)
            }
        }
    }
}

/// The row tile `[start, count]` of stored contents (the whole argument's, [`Input::Stored`] or
/// [`Produced::Stored`]), whose shape is `tile`: cut from row-major (linear) contents only.
fn stored_rows(
    d: &MemData,
    [start, _]: [u64; 2],
    layout: &Layout,
    tile: &[u64],
) -> Result<MemData, String> {
    if !matches!(layout, Layout::Linear) {
        return Err(format!(
            "a row tile in {} cannot be cut from stored contents (store the weight row-major)",
            layout.to_attr()
        ));
    }
    let row: u64 = tile.get(1..).unwrap_or_default().iter().product();
    let (a, n) = (start.saturating_mul(row), tile.iter().product::<u64>());
    let (Ok(a), Ok(n)) = (usize::try_from(a), usize::try_from(n)) else {
        return Err(format!("rows from {start} are past the {} stored values", d.len()));
    };
    d.range(a, n)
}

/// A function's state across calls.
struct FuncState {
    f: FunctionManifest,
    /// Kernel objects, made at the first call and reused, with the storage objects their
    /// arguments were last set to ([`Mem::id`]): a later call sets only those that changed.
    kernels: Vec<Option<(Kernel, Vec<usize>)>>,
    objects: Objects,
    errors: Option<Buffer<i32>>,
    /// Storage the function writes: each launch's last argument (its output, or the scratch of
    /// a launch that a second kernel completes, whose own last argument is the output), fills
    /// and copy targets.
    written: HashSet<usize>,
    /// Storage that a download reads.
    downloaded: HashSet<usize>,
    /// [`Session::in_place`] of the function.
    in_place: Vec<Option<usize>>,
    /// Each launch's activity (`fbc_ir::activity`), written once.
    activities: Vec<String>,
    /// The function's dense constants with the keys they are kept under (uploaded at the first
    /// call, passed after the arguments).
    constants: Vec<(String, Value)>,
    /// Pinned host copies of the streamed values of the call under way, for its later runs
    /// (emptied when the call ends: the next call may pass other values).
    pinned: Pinned,
}

/// One device, one program, and values kept on the device between calls.
pub struct Session {
    info: DeviceInfoRow,
    context: Context,
    queue: Queue,
    /// The queue of streamed uploads, which overlap the launches on `queue`.
    transfer: Queue,
    program: Program,
    cache: CacheStatus,
    max_group: usize,
    device_memory: DeviceMemory,
    /// [`RunOptions::memory_budget`].
    budget: Option<u64>,
    /// Whether launches are timed (the queue has profiling).
    timed: bool,
    manifest: Manifest,
    funcs: HashMap<String, FuncState>,
    kept: Vec<Kept>,
    /// Calls so far.
    calls: u64,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kept: Vec<&str> = self.kept.iter().map(|k| k.key.as_str()).collect();
        f.debug_struct("Session")
            .field("device", &self.device())
            .field("functions", &self.funcs.keys().collect::<Vec<_>>())
            .field("kept", &kept)
            .finish()
    }
}

impl Session {
    /// A session on the device `opts` selects, with `source` built (or taken from the program
    /// cache) for the functions of `manifest`.
    pub fn new(
        source: &str,
        manifest: &Manifest,
        opts: &RunOptions,
    ) -> Result<Session, OpenClError> {
        check_version(manifest)?;
        let _guard = lock();
        let info = select(&list_devices(), &opts.device)?;
        let (context, queue) = context_and_queue(&info, !opts.untimed)?;
        let props = (!opts.untimed).then_some(CommandQueueProperties::PROFILING_ENABLE);
        let transfer = Queue::new(&context, info.device, props).map_err(ocl_err)?;
        let (program, cache) = program(&context, &info, source, opts)?;
        let max_group =
            device_usize(&info.device, DeviceInfo::MaxWorkGroupSize).unwrap_or(usize::MAX);
        Ok(Session {
            info,
            context,
            queue,
            transfer,
            program,
            cache,
            max_group,
            device_memory: opts.device_memory,
            budget: opts.memory_budget,
            timed: !opts.untimed,
            manifest: manifest.clone(),
            funcs: HashMap::new(),
            kept: Vec::new(),
            calls: 0,
        })
    }

    /// `NAME (PLATFORM)` of the session's device.
    pub fn device(&self) -> String {
        format!("{} ({})", self.info.name, self.info.platform)
    }

    /// Whether the program came from the cache.
    pub fn cache(&self) -> CacheStatus {
        self.cache
    }

    /// Bytes of the values kept on the device.
    pub fn kept_bytes(&self) -> u64 {
        kept_bytes(&self.kept)
    }

    /// Runs function `func` once on `inputs` (one per argument); `want` says which results to
    /// download (`None`: all).
    pub fn call(
        &mut self,
        func: &str,
        inputs: &[Input<'_>],
        want: Option<&[bool]>,
    ) -> Result<CallOutput, OpenClError> {
        self.runs(func, inputs, want, 1, true, None)
    }

    /// For each result of `func`, the argument whose upload storage it is downloaded from after
    /// the function wrote it (an update in place: kept under a key, the key holds the result
    /// after the call), else `None`.
    pub fn in_place(&mut self, func: &str) -> Result<Vec<Option<usize>>, OpenClError> {
        let _guard = lock();
        self.prepare(func)?;
        let st = self.funcs.get(func).ok_or_else(|| OpenClError::Manifest(func.into()))?;
        Ok(st.in_place.clone())
    }

    /// The state of `func`, made and checked against the device at its first call.
    fn prepare(&mut self, func: &str) -> Result<(), OpenClError> {
        if self.funcs.contains_key(func) {
            return Ok(());
        }
        let f = function(&self.manifest, func)?.clone();
        check_memory(&f)?;
        check_images(&self.info, &f)?;
        check_half_images(&self.context, &self.info, &f)?;
        let errors = if f.launches().any(|l| l.fault_id.is_some()) {
            Some(
                Buffer::<i32>::builder()
                    .queue(self.queue.clone())
                    .len(FAULT_INTS)
                    .build()
                    .map_err(ocl_err)?,
            )
        } else {
            None
        };
        let mut written = HashSet::new();
        let mut downloaded = HashSet::new();
        for s in &f.steps {
            match s {
                Step::Launch(l) => written.extend(l.outputs()),
                Step::Fill { storage } | Step::Copy { to: storage, .. } => {
                    written.insert(*storage);
                }
                Step::Download { storage, .. } => {
                    downloaded.insert(*storage);
                }
                Step::Alloc { .. } | Step::Upload { .. } | Step::Dealloc { .. } => {}
            }
        }
        // Results downloaded from an upload's storage that the function writes (and that is not
        // a `plan-memory` slot's, which no key keeps).
        let uploads: HashMap<usize, usize> = f
            .steps
            .iter()
            .filter_map(|s| match s {
                Step::Upload { arg, storage, rows: None, .. } => Some((*storage, *arg)),
                _ => None,
            })
            .collect();
        let planned = self.device_memory == DeviceMemory::Planned;
        let keepable =
            |id: usize| f.storage.get(id).is_some_and(|d| !(planned && d.slot.is_some()));
        let mut in_place = vec![None; f.results.len()];
        for s in &f.steps {
            if let Step::Download { storage, result, .. } = s {
                if let (Some(slot), true) =
                    (in_place.get_mut(*result), written.contains(storage) && keepable(*storage))
                {
                    *slot = uploads.get(storage).copied().filter(|&a| a < f.args.len());
                }
            }
        }
        let constants = f
            .constants
            .iter()
            .enumerate()
            .map(|(k, c)| Ok((format!("\0constant {k} of @{}", f.name), constant_value(c)?)))
            .collect::<Result<Vec<_>, OpenClError>>()?;
        let state = FuncState {
            constants,
            in_place,
            kernels: (0..f.launches().count()).map(|_| None).collect(),
            activities: f
                .launches()
                .map(|l| format!("launch `{}` ({})", l.kernel, l.location))
                .collect(),
            objects: Objects::new(&f, self.device_memory)?,
            errors,
            written,
            downloaded,
            pinned: Pinned::default(),
            f,
        };
        self.funcs.insert(func.to_string(), state);
        Ok(())
    }

    /// Where each upload of `func` gets its object, by storage id; the kept uploads as
    /// `(storage, key, form)`; and the bytes uploaded and read back to get there.
    #[allow(clippy::type_complexity)]
    fn sources<'i>(
        &mut self,
        func: &str,
        given: &[Input<'i>],
    ) -> Result<(HashMap<usize, Source<'i>>, Vec<(usize, String, Form)>, u64, u64), OpenClError>
    {
        let inputs = given;
        let st = self.funcs.get(func).ok_or_else(|| OpenClError::Manifest(func.into()))?;
        let f = &st.f;
        check_count(f, inputs.len())?;
        for (k, input) in inputs.iter().enumerate() {
            if let Input::Host(v)
            | Input::Keep { value: Some(v), .. }
            | Input::Held { value: v, .. } = input
            {
                check_arg(f, k, v)?;
            }
        }
        // The constants follow the arguments, kept on the device from the first call on (under
        // a budget uploaded where the function uploads them, at every call).
        let mut all = inputs.to_vec();
        for (key, v) in &st.constants {
            if self.budget.is_some() {
                all.push(Input::Host(v));
                continue;
            }
            let held = self.kept.iter().any(|k| k.key == *key);
            all.push(Input::Keep { key, value: if held { None } else { Some(v) } });
        }
        let inputs = &all[..];
        let (mut up, mut down) = (0u64, 0u64);
        let mut sources = HashMap::new();
        let mut kept_here = Vec::new();
        for s in &f.steps {
            let Step::Upload { arg, storage, shape, layout, rows, .. } = s else { continue };
            let desc = f.storage.get(*storage).ok_or_else(|| bad_id(*storage))?;
            let input = inputs
                .get(*arg)
                .ok_or_else(|| OpenClError::Manifest(format!("no argument {arg}")))?;
            let packed = |v: &Value| {
                let fail = |e: String| {
                    OpenClError::Manifest(format!("argument {arg} ({}): {e}", layout.text))
                };
                let v = v.row_tile(*rows).map_err(fail)?;
                pack(&layout_of(layout)?, shape, &v, mem_type(desc)).map_err(fail)
            };
            let (key, value, held) = match *input {
                Input::Host(v) => {
                    sources.insert(*storage, Source::Write(std::borrow::Cow::Owned(packed(v)?)));
                    up += desc.bytes;
                    continue;
                }
                Input::Lazy(_) => {
                    // The caller's producer (`all` also borrows the function's constants).
                    let Some(Input::Lazy(produce)) = given.get(*arg).copied() else {
                        return Err(OpenClError::Manifest(format!("argument {arg}: no producer")));
                    };
                    let what = format!(
                        "argument {arg} ({})",
                        f.args.get(*arg).map_or("?", |a| a.name.as_str())
                    );
                    let layout = layout_of(layout)?;
                    let (shape, ty) = (shape.clone(), mem_type(desc));
                    let lazy = LazySource { produce, layout, shape, rows: *rows, ty, what };
                    sources.insert(*storage, Source::Lazy(lazy));
                    up += desc.bytes;
                    continue;
                }
                Input::Stored(_) => {
                    // The caller's contents (`all` also borrows the function's constants).
                    let Some(Input::Stored(data)) = given.get(*arg).copied() else {
                        return Err(OpenClError::Manifest(format!("argument {arg}: no contents")));
                    };
                    let data = match *rows {
                        None => std::borrow::Cow::Borrowed(data),
                        Some(r) => std::borrow::Cow::Owned(
                            stored_rows(data, r, &layout_of(layout)?, shape).map_err(|e| {
                                OpenClError::Manifest(format!("argument {arg}: {e}"))
                            })?,
                        ),
                    };
                    if !data.fits(mem_type(desc)) {
                        return Err(OpenClError::Manifest(format!(
                            "argument {arg} ({}): {} stored values do not fit {}",
                            f.args.get(*arg).map_or("?", |a| a.name.as_str()),
                            data.len(),
                            mem_type(desc)
                        )));
                    }
                    sources.insert(*storage, Source::Write(data));
                    up += desc.bytes;
                    continue;
                }
                Input::Keep { key, value } => (key, value, false),
                Input::Held { key, value } => (key, Some(value), true),
            };
            let form = Form {
                kind: desc.kind,
                dtype: desc.dtype,
                elems: desc.elems,
                layout: layout.text.clone(),
                shape: shape.clone(),
                rows: *rows,
            };
            // A `plan-memory` slot's tenants share one object: a tenant cannot keep it.
            let slotted = desc.slot.is_some() && self.device_memory == DeviceMemory::Planned;
            let call = self.calls;
            // The key's object in this form: with `None` any, with `Some` one this call made
            // (an argument uploaded twice in one form); a new value replaces the others.
            let same = |k: &Kept| k.key == key && k.form == form;
            let reuse =
                self.kept.iter().find(|k| same(k) && (held || value.is_none() || k.call == call));
            if let (false, Some(k)) = (slotted, reuse) {
                sources.insert(*storage, Source::Kept(k.mem.clone()));
                kept_here.push((*storage, key.to_string(), form));
                continue;
            }
            let data = match value {
                Some(v) => {
                    self.kept.retain(|k| k.key != key || k.call == call);
                    packed(v)?
                }
                None => {
                    // A row tile holds part of the value: only a whole form is read back.
                    let whole = |k: &&Kept| k.key == key && k.form.rows.is_none();
                    let k = self.kept.iter().find(whole).ok_or_else(|| {
                        OpenClError::Manifest(format!(
                            "argument {arg} ({}) of @{}: nothing is kept under `{key}` and no value was given",
                            f.args.get(*arg).map_or("?", |a| a.name.as_str()),
                            f.name
                        ))
                    })?;
                    let raw = read_mem(&k.mem, &k.desc)?;
                    down += k.desc.bytes;
                    let v = unpack(&layout_of(&k.layout)?, &k.form.shape, &raw, mem_type(&k.desc))
                        .map_err(|e| OpenClError::Manifest(format!("kept `{key}`: {e}")))?;
                    packed(&v)?
                }
            };
            up += desc.bytes;
            if slotted {
                sources.insert(*storage, Source::Write(std::borrow::Cow::Owned(data)));
                continue;
            }
            let mem = create(&self.queue, desc)?;
            write_mem(&mem, &data, desc)?;
            self.kept.push(Kept {
                key: key.to_string(),
                call,
                form: form.clone(),
                desc: desc.clone(),
                layout: layout.clone(),
                mem: mem.clone(),
            });
            sources.insert(*storage, Source::Kept(mem));
            kept_here.push((*storage, key.to_string(), form));
        }
        Ok((sources, kept_here, up, down))
    }

    /// Runs `func` `runs` times (timing every run if `time_all`, else all but the first),
    /// telling `progress` after each.
    pub(super) fn runs(
        &mut self,
        func: &str,
        inputs: &[Input<'_>],
        want: Option<&[bool]>,
        runs: usize,
        time_all: bool,
        progress: Option<&Progress>,
    ) -> Result<CallOutput, OpenClError> {
        let _guard = lock();
        self.prepare(func)?;
        self.calls += 1;
        let (sources, kept_here, uploaded, read_back) = self.sources(func, inputs)?;
        let st = self.funcs.get_mut(func).ok_or_else(|| OpenClError::Manifest(func.into()))?;
        st.objects.budget = self.budget;
        st.objects.kept = kept_bytes(&self.kept);
        let env = Env {
            queue: &self.queue,
            transfer: &self.transfer,
            program: &self.program,
            max_group: self.max_group,
            timed: self.timed,
        };
        let mut out = CallOutput {
            results: vec![None; st.f.results.len()],
            // Untimed, no launch has a time to report.
            launches: if self.timed {
                st.f.launches()
                    .map(|l| LaunchTime { kernel: l.kernel.clone(), ns: Vec::new(), start_ns: 0 })
                    .collect()
            } else {
                Vec::new()
            },
            launch_host_ns: 0,
            device_peak_bytes: 0,
            objects_made: 0,
            uploaded_bytes: 0,
            downloaded_bytes: read_back,
            streaming: Streaming::default(),
        };
        let mut host_ns = Vec::with_capacity(runs);
        // Every run of the call streams the same host values: with more than one run, they
        // are copied once into pinned memory, which transfers read at the bus's speed.
        let mut result = Ok(());
        if runs > 1 && self.budget.is_some() {
            result = st.pinned.stage(&self.transfer, &st.f, &sources);
        }
        for run in 0..runs {
            if result.is_err() {
                break;
            }
            let timed = time_all || run > 0;
            out.uploaded_bytes += uploaded;
            result = run_once(&env, st, &sources, want, timed, &mut out, &mut host_ns);
            if let (Ok(()), Some(p)) = (&result, progress) {
                (p.0)(run + 1);
            }
        }
        // What the call did to the kept values (see the module documentation).
        let failed = result.is_err();
        for (storage, key, form) in kept_here {
            if !st.written.contains(&storage) {
                continue;
            }
            if !failed && st.downloaded.contains(&storage) {
                self.kept.retain(|k| k.key != key || k.form == form);
            } else {
                self.kept.retain(|k| k.key != key || k.form != form);
            }
        }
        // Every run finished its transfers: the pinned copies are read no more.
        st.pinned = Pinned::default();
        result?;
        out.launch_host_ns = median(host_ns);
        out.device_peak_bytes = st.objects.high_water.saturating_add(kept_bytes(&self.kept));
        out.objects_made = st.objects.made;
        Ok(out)
    }
}

/// Bytes of the kept values `kept`.
fn kept_bytes(kept: &[Kept]) -> u64 {
    kept.iter().map(|k| k.desc.bytes).fold(0, u64::saturating_add)
}

/// `OPENCL`, held while a session builds its program or runs a call (not for its life: a
/// thread may hold several sessions).
fn lock() -> MutexGuard<'static, ()> {
    OPENCL.lock().unwrap_or_else(|p| p.into_inner())
}

/// What a run needs of the session besides the function's state.
struct Env<'a> {
    queue: &'a Queue,
    /// The queue of streamed uploads.
    transfer: &'a Queue,
    program: &'a Program,
    max_group: usize,
    /// Whether the queue has profiling (launch events are kept and read).
    timed: bool,
}

/// The check of argument `k` of `f` against the manifest's shape and element type.
pub(super) fn check_arg(f: &FunctionManifest, k: usize, data: &Value) -> Result<(), OpenClError> {
    let Some(a) = f.args.get(k) else {
        return Err(OpenClError::Manifest(format!("@{} has no argument {k}", f.name)));
    };
    let shape_ok = data.shape().iter().map(|&d| d as u64).eq(a.shape.iter().copied());
    let dtype_ok = data.is_float() == (a.dtype == Dtype::F32);
    if !shape_ok || !dtype_ok {
        return Err(OpenClError::Manifest(format!(
            "argument {k} ({}) is {data}, a {:?} tensor of shape {:?} expected",
            a.name, a.dtype, a.shape
        )));
    }
    Ok(())
}

/// What the prefetch thread sends: a lazy upload's storage id and contents.
type Prefetched = (usize, Result<MemData, OpenClError>);

/// One run of the function's steps: results into `out.results` (those `want` asks for), launch
/// times into `out.launches` when `timed`, and the run's host enqueue time into `host_ns`.
///
/// The lazy uploads the plan streams ([`Input::Lazy`]) are made on a helper thread in the order
/// the plan starts them, one ahead of the transfers (a channel of one), while the launches are
/// enqueued; the run takes each when it issues its transfer.
fn run_once(
    env: &Env<'_>,
    st: &mut FuncState,
    sources: &HashMap<usize, Source<'_>>,
    want: Option<&[bool]>,
    timed: bool,
    out: &mut CallOutput,
    host_ns: &mut Vec<u64>,
) -> Result<(), OpenClError> {
    // (stream_from, step, storage, source) of the lazy streamed uploads, in the plan's order.
    let mut order: Vec<(usize, usize, usize, &LazySource<'_>)> = Vec::new();
    for (k, step) in st.f.steps.iter().enumerate() {
        if let Step::Upload { storage, stream_from: Some(n), .. } = step {
            // A lazy upload with a pinned copy is not made again.
            match sources.get(storage) {
                Some(Source::Lazy(l)) if st.pinned.get(*storage).is_none() => {
                    order.push((*n, k, *storage, l))
                }
                _ => {}
            }
        }
    }
    order.sort_by_key(|&(n, k, _, _)| (n, k));
    std::thread::scope(|scope| {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Prefetched>(1);
        if order.is_empty() {
            drop(tx);
        } else {
            scope.spawn(move || {
                for (_, _, id, lazy) in order {
                    // A closed channel: the run ended early; stop.
                    if tx.send((id, lazy.make())).is_err() {
                        break;
                    }
                }
            });
        }
        // `rx` is dropped when the steps end, which ends the thread's sends.
        run_steps(env, st, sources, want, timed, out, host_ns, rx)
    })
}

/// The steps of [`run_once`], with the prefetched lazy uploads arriving on `prefetched`.
#[allow(clippy::too_many_arguments)]
fn run_steps(
    env: &Env<'_>,
    st: &mut FuncState,
    sources: &HashMap<usize, Source<'_>>,
    want: Option<&[bool]>,
    timed: bool,
    out: &mut CallOutput,
    host_ns: &mut Vec<u64>,
    prefetched: std::sync::mpsc::Receiver<Prefetched>,
) -> Result<(), OpenClError> {
    let queue = env.queue;
    let f = &st.f;
    let mut host = std::time::Duration::ZERO;
    if let Some(e) = &st.errors {
        e.write(&[0i32; FAULT_INTS][..]).enq().map_err(ocl_err)?;
    }
    let mut live: HashMap<usize, Mem> = HashMap::new();
    // Kept objects are not the function's: never given to its pool.
    let mut pinned: HashSet<usize> = HashSet::new();
    let mut events: Vec<Event> = Vec::with_capacity(st.kernels.len());
    let mut launch = 0usize;
    let mut streams = Streams {
        prefetched: Some(prefetched),
        pinned: std::mem::take(&mut st.pinned),
        ..Streams::default()
    };
    // A streamed upload that a download reads is written back after its last launch.
    let downloaded = &st.downloaded;
    let mut n = 0usize;
    for s in &f.steps {
        match s {
            Step::Upload { storage, stream_from: Some(_), .. }
                if downloaded.contains(storage)
                    && matches!(sources.get(storage), Some(Source::Write(_) | Source::Lazy(_))) =>
            {
                streams.writeback.insert(*storage, usize::MAX);
            }
            Step::Launch(l) => {
                for a in &l.args {
                    if let Some(last) = streams.writeback.get_mut(a) {
                        *last = n;
                    }
                }
                n += 1;
            }
            _ => {}
        }
    }
    // Declared after `streams`, dropped before it: every exit waits for the transfers that
    // read its host data.
    let _drain = Drain(env.transfer);
    for s in &f.steps {
        // A streamed upload not made yet, or under way, that this step needs now.
        let touched: &[usize] = match s {
            Step::Fill { storage } | Step::Download { storage, .. } => {
                std::slice::from_ref(storage)
            }
            Step::Copy { from, to } => &[*from, *to],
            _ => &[],
        };
        for &id in touched {
            streams.issue_now(env, &mut st.objects, f, sources, &mut live, id)?;
        }
        match s {
            Step::Upload { storage, stream_from: Some(n), .. }
                if matches!(sources.get(storage), Some(Source::Write(_) | Source::Lazy(_))) =>
            {
                streams.deferred.push((*n, *storage));
            }
            Step::Alloc { storage } => {
                let desc = f.storage.get(*storage).ok_or_else(|| bad_id(*storage))?;
                live.insert(*storage, st.objects.take(queue, desc)?);
            }
            Step::Upload { storage, .. } => {
                let desc = f.storage.get(*storage).ok_or_else(|| bad_id(*storage))?;
                let m = match sources.get(storage) {
                    Some(Source::Kept(m)) => {
                        pinned.insert(*storage);
                        m.clone()
                    }
                    Some(Source::Write(p)) => {
                        let m = st.objects.take(queue, desc)?;
                        write_mem(&m, p, desc)?;
                        m
                    }
                    // Made here and written before the next step (a blocking write).
                    Some(Source::Lazy(l)) => {
                        let data = l.make()?;
                        let m = st.objects.take(queue, desc)?;
                        write_mem(&m, &data, desc)?;
                        m
                    }
                    None => st.objects.take(queue, desc)?,
                };
                live.insert(*storage, m);
            }
            Step::Dealloc { storage } => {
                // Never read: never uploaded.
                streams.deferred.retain(|&(_, id)| id != *storage);
                if let Some(ev) = streams.pending.remove(storage) {
                    ev.wait_for().map_err(ocl_err)?;
                }
                if let (Some(m), Some(desc)) = (live.remove(storage), f.storage.get(*storage)) {
                    if !pinned.contains(storage) {
                        st.objects.give(desc, m);
                    }
                }
            }
            Step::Fill { storage } => {
                let desc = f.storage.get(*storage).ok_or_else(|| bad_id(*storage))?;
                let m = live.get(storage).ok_or_else(|| not_live("fill", *storage))?;
                fill_zero(m, desc)?;
            }
            Step::Copy { from, to } => {
                let desc = f.storage.get(*from).ok_or_else(|| bad_id(*from))?;
                let src = live.get(from).ok_or_else(|| not_live("copy", *from))?;
                let dst = live.get(to).ok_or_else(|| not_live("copy", *to))?;
                copy_mem(src, dst, desc)?;
            }
            Step::Launch(l) => {
                let start = std::time::Instant::now();
                let _activity =
                    fbc_ir::activity::enter(st.activities.get(launch).cloned().unwrap_or_default());
                // The uploads the plan starts during this launch, and any this launch reads
                // that are still waiting, go to the transfer queue before it.
                let due: Vec<usize> = streams
                    .deferred
                    .iter()
                    .filter(|(n, id)| *n <= launch || l.args.contains(id))
                    .map(|&(_, id)| id)
                    .collect();
                streams.issue(env, &mut st.objects, f, sources, &mut live, &due)?;
                let waits: Vec<Event> =
                    l.args.iter().filter_map(|a| streams.pending.remove(a)).collect();
                let ocl_at = |e: ocl::Error| {
                    OpenClError::Ocl(format!("kernel {} ({}): {e}", l.kernel, l.location))
                };
                let args = l
                    .args
                    .iter()
                    .map(|a| {
                        live.get(a).ok_or_else(|| {
                            OpenClError::Manifest(format!(
                                "launch {} uses storage {a}, which is not live",
                                l.kernel
                            ))
                        })
                    })
                    .collect::<Result<Vec<&Mem>, _>>()?;
                let error_arg = match l.fault_id {
                    Some(_) => Some(st.errors.as_ref().ok_or_else(|| {
                        OpenClError::Manifest("no error buffer for a checked launch".into())
                    })?),
                    None => None,
                };
                let slot = st.kernels.get_mut(launch).ok_or_else(|| {
                    OpenClError::Manifest("more launches than the manifest lists".into())
                })?;
                launch += 1;
                let kernel = match slot {
                    Some((k, set)) => {
                        // The error buffer is the function's, set when the kernel was made.
                        for (i, m) in args.iter().enumerate() {
                            if set.get(i) == Some(&m.id()) {
                                continue;
                            }
                            match m {
                                Mem::F32(b) => k.set_arg(i, b),
                                Mem::I32(b) => k.set_arg(i, b),
                                Mem::I8(b) => k.set_arg(i, b),
                                Mem::Image(im) => k.set_arg(i, im),
                                Mem::HalfImage(im) => k.set_arg(i, im),
                            }
                            .map_err(ocl_at)?;
                            if let Some(s) = set.get_mut(i) {
                                *s = m.id();
                            }
                        }
                        &*k
                    }
                    None => {
                        let mut kb = Kernel::builder();
                        kb.program(env.program).name(&l.kernel).queue(queue.clone());
                        for m in &args {
                            match m {
                                Mem::F32(b) => kb.arg(b),
                                Mem::I32(b) => kb.arg(b),
                                Mem::I8(b) => kb.arg(b),
                                Mem::Image(im) => kb.arg(im),
                                Mem::HalfImage(im) => kb.arg(im),
                            };
                        }
                        if let Some(e) = error_arg {
                            kb.arg(e);
                        }
                        let ids = args.iter().map(|m| m.id()).collect();
                        &slot.insert((kb.build().map_err(ocl_at)?, ids)).0
                    }
                };
                let mut cmd = kernel.cmd().global_work_size(dims(&l.global)?);
                if let Some(local) = &l.local {
                    let size: u64 = local.iter().product();
                    if size > env.max_group as u64 {
                        return Err(OpenClError::OutOfResources {
                            kernel: l.kernel.clone(),
                            location: l.location.clone(),
                            message: format!(
                                "work-group of {size} work-items, the device allows {}",
                                env.max_group
                            ),
                        });
                    }
                    cmd = cmd.local_work_size(dims(local)?);
                }
                if !waits.is_empty() {
                    cmd = cmd.ewait(&waits[..]);
                }
                let mut ev = Event::empty();
                let cmd = if env.timed { cmd.enew(&mut ev) } else { cmd };
                // SAFETY: `ocl` marks every kernel enqueue unsafe because the device may
                // access memory out of bounds. Each argument is a live storage object of the
                // manifest's size and kind (a kept object was made for a storage of the same
                // kind, element type and size), and every generated kernel guards its
                // work-items against the domain it was written for and accesses only its
                // storage: the verifier's bounds prover proved the access in range, or the
                // kernel checks it (a launch with a `fault_id`, which gets the error buffer).
                #[allow(unsafe_code)]
                let r = unsafe { cmd.enq() };
                r.map_err(|e| {
                    let message = e.to_string();
                    if message.contains("OUT_OF_RESOURCES")
                        || message.contains("INVALID_WORK_GROUP_SIZE")
                    {
                        OpenClError::OutOfResources {
                            kernel: l.kernel.clone(),
                            location: l.location.clone(),
                            message,
                        }
                    } else {
                        OpenClError::Ocl(format!("{} ({}): {message}", l.kernel, l.location))
                    }
                })?;
                if env.timed {
                    events.push(ev);
                }
                // Storage whose last launch this was goes back to the host (KV tiling).
                let done: Vec<usize> = l
                    .args
                    .iter()
                    .copied()
                    .filter(|a| streams.writeback.get(a) == Some(&(launch - 1)))
                    .collect();
                for id in done {
                    streams.write_back(env, &mut st.objects, f, &mut live, &pinned, id)?;
                }
                host += start.elapsed();
            }
            Step::Download { storage, result, shape, layout, .. } => {
                if want.is_some_and(|w| !w.get(*result).copied().unwrap_or(true)) {
                    continue;
                }
                let desc = f.storage.get(*storage).ok_or_else(|| bad_id(*storage))?;
                let raw = match streams.swapped.remove(storage) {
                    Some((ev, data)) => {
                        ev.wait_for().map_err(ocl_err)?;
                        data
                    }
                    None => {
                        let m = live.get(storage).ok_or_else(|| {
                            OpenClError::Manifest(format!(
                                "download of storage {storage}, which is not live"
                            ))
                        })?;
                        read_mem(m, desc)?
                    }
                };
                out.downloaded_bytes += desc.bytes;
                let t = unpack(&layout_of(layout)?, shape, &raw, mem_type(desc))
                    .map_err(|e| OpenClError::Manifest(format!("result {result}: {e}")))?;
                let slot = out
                    .results
                    .get_mut(*result)
                    .ok_or_else(|| OpenClError::Manifest(format!("download to result {result}")))?;
                *slot = Some(t);
            }
        }
    }
    if timed {
        host_ns.push(u64::try_from(host.as_nanos()).unwrap_or(u64::MAX));
    }
    for (id, m) in live.drain() {
        if let (false, Some(desc)) = (pinned.contains(&id), f.storage.get(id)) {
            st.objects.give(desc, m);
        }
    }
    queue.finish().map_err(ocl_err)?;
    env.transfer.finish().map_err(ocl_err)?;
    st.pinned = std::mem::take(&mut streams.pinned);
    out.streaming = Streaming {
        uploads: streams.uploads,
        bytes: streams.bytes,
        pinned_bytes: streams.pinned_bytes,
        written_back: streams.written_back,
        ..Streaming::default()
    };
    if let Some(e) = &st.errors {
        let mut record = [0i32; FAULT_INTS];
        e.read(&mut record[..]).enq().map_err(ocl_err)?;
        if record[0] != 0 {
            return Err(fault(f, &record));
        }
    }
    if timed && env.timed {
        let mut first = None;
        let mut spans = Vec::with_capacity(events.len());
        for (t, ev) in out.launches.iter_mut().zip(&events) {
            let (start, end) = event_span(ev)?;
            spans.push((start, end));
            let first = *first.get_or_insert(start);
            t.ns.push(end.saturating_sub(start));
            t.start_ns = start.saturating_sub(first);
        }
        let transfers = streams.transfers.iter().map(event_span).collect::<Result<Vec<_>, _>>()?;
        out.streaming.transfer_ns = transfers.iter().map(|&(a, b)| b.saturating_sub(a)).sum();
        out.streaming.hidden_ns = overlap(&spans, &transfers);
        out.streaming.split = time_split(&spans, &transfers);
        let origin = i128::from(first.unwrap_or(0));
        out.streaming.transfers = transfers
            .iter()
            .map(|&(a, b)| {
                let at = (i128::from(a) - origin).clamp(i64::MIN.into(), i64::MAX.into());
                (at as i64, b.saturating_sub(a))
            })
            .collect();
    }
    Ok(())
}

/// Spans `[start, end)` merged into disjoint intervals, in order (empty ones left out).
fn merged(spans: impl IntoIterator<Item = (u64, u64)>) -> Vec<(u64, u64)> {
    let mut sorted: Vec<(u64, u64)> = spans.into_iter().filter(|&(s, e)| e > s).collect();
    sorted.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(sorted.len());
    for (s, e) in sorted {
        match merged.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => merged.push((s, e)),
        }
    }
    merged
}

/// The total length of spans `[start, end)`.
fn length(v: &[(u64, u64)]) -> u64 {
    v.iter().map(|&(s, e)| e.saturating_sub(s)).sum()
}

/// The time of the spans `b` during which some span of `a` runs: `a` merged into disjoint
/// intervals, then each span of `b` intersected with them.
fn overlap(a: &[(u64, u64)], b: &[(u64, u64)]) -> u64 {
    let merged = merged(a.iter().copied());
    b.iter()
        .map(|&(s, e)| {
            merged.iter().map(|&(ms, me)| me.min(e).saturating_sub(ms.max(s))).sum::<u64>()
        })
        .sum()
}

/// [`TimeSplit`] of launches `a` and transfers `b`, spans `[start, end)` on one clock.
fn time_split(a: &[(u64, u64)], b: &[(u64, u64)]) -> TimeSplit {
    let all = merged(a.iter().chain(b).copied());
    let (Some(first), Some(last)) = (all.first(), all.last()) else {
        return TimeSplit::default();
    };
    let wall_ns = last.1 - first.0;
    let (busy, transfer_ns) = (length(&all), length(&merged(b.iter().copied())));
    TimeSplit {
        wall_ns,
        transfer_ns,
        alone_ns: busy - transfer_ns,
        idle_ns: wall_ns - busy,
        compute_ns: length(&merged(a.iter().copied())),
    }
}

/// Waits for a queue on drop.
struct Drain<'a>(&'a Queue);

impl Drop for Drain<'_> {
    fn drop(&mut self) {
        // Nothing to report from a drop; an error here is an error of the run's own calls.
        let _ = self.0.finish();
    }
}

/// A run's streamed uploads: those waiting for the launch the plan starts them at, those under
/// way, and what was streamed.
#[derive(Default)]
struct Streams {
    /// `(stream_from, storage)` of the uploads not made yet.
    deferred: Vec<(usize, usize)>,
    /// The transfer of each upload made and not yet waited for by a launch.
    pending: HashMap<usize, Event>,
    /// Every transfer of the run.
    transfers: Vec<Event>,
    /// The `f16` bits of streamed half images, read by transfers until the run ends.
    half_bits: Vec<Vec<u16>>,
    /// Lazy uploads' contents as the prefetch thread makes them, and those that arrived before
    /// their turn.
    prefetched: Option<std::sync::mpsc::Receiver<Prefetched>>,
    ready: HashMap<usize, Result<MemData, OpenClError>>,
    /// Lazy uploads' contents with their transfers, held until each transfer completes.
    owned: Vec<(Event, MemData)>,
    /// Streamed uploads that the function downloads (KV caches under `kv-tiling`), by storage:
    /// the launch after which they are written back to the host and released.
    writeback: HashMap<usize, usize>,
    /// Those written back: the read's event and the host copy it fills, for their download.
    swapped: HashMap<usize, (Event, MemData)>,
    uploads: u64,
    bytes: u64,
    /// The call's pinned copies of its streamed host values (taken from [`FuncState::pinned`]
    /// for the run and given back after it), and the bytes transferred from them.
    pinned: Pinned,
    pinned_bytes: u64,
    written_back: u64,
}

impl Streams {
    /// Makes the uploads `due` now: each takes its object, and its transfer, on the transfer
    /// queue, waits for what the launch queue holds so far (a pooled object may still be read
    /// by an earlier launch).
    fn issue(
        &mut self,
        env: &Env<'_>,
        objects: &mut Objects,
        f: &FunctionManifest,
        sources: &HashMap<usize, Source<'_>>,
        live: &mut HashMap<usize, Mem>,
        due: &[usize],
    ) -> Result<(), OpenClError> {
        // What the host no longer needs: contents whose transfer is done.
        self.owned.retain(|(ev, _)| !ev.is_complete().unwrap_or(false));
        if due.is_empty() {
            return Ok(());
        }
        self.deferred.retain(|(_, id)| !due.contains(id));
        let marker = env.queue.enqueue_marker(None::<&Event>).map_err(ocl_err)?;
        env.queue.flush().map_err(ocl_err)?;
        for &id in due {
            let desc = f.storage.get(id).ok_or_else(|| bad_id(id))?;
            let m = objects.take(env.queue, desc)?;
            let ev = match (self.pinned.get(id), sources.get(&id)) {
                // From the call's pinned copy where it has one (made before its first run,
                // `Pinned::stage`).
                (Some(p), Some(Source::Write(_) | Source::Lazy(_))) => {
                    self.pinned_bytes = self.pinned_bytes.saturating_add(desc.bytes);
                    write_async(&m, p, env.transfer, &marker, desc)?
                }
                (None, Some(Source::Write(data))) => {
                    let host = host_slice(is_half(desc), data, &mut self.half_bits);
                    write_async(&m, host, env.transfer, &marker, desc)?
                }
                (None, Some(Source::Lazy(_))) => {
                    let data = self.take_prefetched(id)?;
                    let host = host_slice(is_half(desc), &data, &mut self.half_bits);
                    let ev = write_async(&m, host, env.transfer, &marker, desc)?;
                    // Moving the vector keeps its buffer where the transfer reads it.
                    self.owned.push((ev.clone(), data));
                    ev
                }
                _ => {
                    return Err(OpenClError::Manifest(format!("streamed storage {id} has no data")))
                }
            };
            self.pending.insert(id, ev.clone());
            self.transfers.push(ev);
            live.insert(id, m);
            self.uploads += 1;
            self.bytes = self.bytes.saturating_add(desc.bytes);
        }
        env.transfer.flush().map_err(ocl_err)
    }

    /// Writes storage `id` back to the host after the launches enqueued so far (on the transfer
    /// queue, without blocking; its download waits for it) and releases its object: a KV cache
    /// of a layer that has run, under `kv-tiling`.
    fn write_back(
        &mut self,
        env: &Env<'_>,
        objects: &mut Objects,
        f: &FunctionManifest,
        live: &mut HashMap<usize, Mem>,
        pinned: &HashSet<usize>,
        id: usize,
    ) -> Result<(), OpenClError> {
        let desc = f.storage.get(id).ok_or_else(|| bad_id(id))?;
        // A kept object is the session's; a slot's is shared by its tenants.
        if pinned.contains(&id) || (desc.slot.is_some() && objects.mode == DeviceMemory::Planned) {
            return Ok(());
        }
        let Some(m) = live.remove(&id) else { return Ok(()) };
        let marker = env.queue.enqueue_marker(None::<&Event>).map_err(ocl_err)?;
        env.queue.flush().map_err(ocl_err)?;
        let ty = mem_type(desc);
        let (ev, data) = if matches!(m, Mem::HalfImage(_)) {
            // The f16 bits are widened on the host: read once the launches are done.
            marker.wait_for().map_err(ocl_err)?;
            (marker, read_mem(&m, desc)?)
        } else {
            let mut data = MemData::zeroed(ty).map_err(OpenClError::Manifest)?;
            let ev = read_async(&m, &mut data, env.transfer, &marker, desc)?;
            (ev, data)
        };
        env.transfer.flush().map_err(ocl_err)?;
        // Moving the vector keeps its buffer where the read writes it.
        self.swapped.insert(id, (ev, data));
        self.written_back = self.written_back.saturating_add(desc.bytes);
        // Released, not pooled: a later launch must not write it while the read is pending
        // (OpenCL keeps it until the read completes).
        objects.release(desc, m);
        Ok(())
    }

    /// The prefetched contents of lazy upload `id`, waiting for the thread where they have not
    /// arrived yet.
    fn take_prefetched(&mut self, id: usize) -> Result<MemData, OpenClError> {
        loop {
            if let Some(d) = self.ready.remove(&id) {
                return d;
            }
            let got = self.prefetched.as_ref().and_then(|rx| rx.recv().ok());
            let Some((k, d)) = got else {
                return Err(OpenClError::Manifest(format!(
                    "streamed storage {id} was not prefetched"
                )));
            };
            self.ready.insert(k, d);
        }
    }

    /// Makes upload `id` now if it is waiting, and waits for its transfer (for a step that is
    /// not a launch).
    fn issue_now(
        &mut self,
        env: &Env<'_>,
        objects: &mut Objects,
        f: &FunctionManifest,
        sources: &HashMap<usize, Source<'_>>,
        live: &mut HashMap<usize, Mem>,
        id: usize,
    ) -> Result<(), OpenClError> {
        if self.deferred.iter().any(|&(_, d)| d == id) {
            self.issue(env, objects, f, sources, live, &[id])?;
        }
        if let Some(ev) = self.pending.remove(&id) {
            ev.wait_for().map_err(ocl_err)?;
        }
        Ok(())
    }
}

/// The host values a transfer writes: a storage's packed contents, or a half image's `f16` bits.
#[derive(Clone, Copy)]
enum HostSlice<'a> {
    F32(&'a [f32]),
    I32(&'a [i32]),
    I8(&'a [i8]),
    Half(&'a [u16]),
}

impl HostSlice<'_> {
    fn is_empty(&self) -> bool {
        match self {
            HostSlice::F32(v) => v.is_empty(),
            HostSlice::I32(v) => v.is_empty(),
            HostSlice::I8(v) => v.is_empty(),
            HostSlice::Half(v) => v.is_empty(),
        }
    }
}

/// Whether storage `desc` is an `f16` image (its host side the `f16` bits).
fn is_half(desc: &StorageDesc) -> bool {
    matches!((desc.kind, desc.dtype), (StorageKind::Image2d { .. }, Dtype::F16))
}

/// The host values that write `data` into a storage: the data itself, or for a `half` image
/// its `f16` bits, made into `half_bits` (which keeps them as long as the transfer needs).
fn host_slice<'a>(
    half: bool,
    data: &'a MemData,
    half_bits: &'a mut Vec<Vec<u16>>,
) -> HostSlice<'a> {
    match data {
        MemData::F32(v) if half => {
            // `pack` rounded every value to f16 already: the conversion to bits is exact.
            half_bits.push(v.iter().map(|&x| half::f16::from_f32(x).to_bits()).collect());
            HostSlice::Half(half_bits.last().map(Vec::as_slice).unwrap_or_default())
        }
        MemData::F32(v) => HostSlice::F32(v),
        MemData::I32(v) => HostSlice::I32(v),
        MemData::I8(v) => HostSlice::I8(v),
    }
}

/// Enqueues the write of `data` into `m` on `queue` after `after`, without blocking; its event.
fn write_async(
    m: &Mem,
    data: HostSlice<'_>,
    queue: &Queue,
    after: &Event,
    desc: &StorageDesc,
) -> Result<Event, OpenClError> {
    let mut ev = Event::empty();
    let bad = || OpenClError::Manifest(format!("storage {}: element type mismatch", desc.name));
    if data.is_empty() {
        // Nothing to write: an event that completes once `after` has.
        return queue.enqueue_marker(Some(after)).map_err(ocl_err);
    }
    // SAFETY: a non-blocking write reads the host slice after this returns. Every slice is
    // owned by the caller's `sources` (alive until the call's runs end), by `Streams::half_bits`
    // (alive until the run ends), by `Streams::owned` (dropped once the write's event is
    // complete, or when the run ends) or by the call's `Pinned` buffers (alive until the call's
    // runs end), and the run finishes the transfer queue before the run's buffers are dropped,
    // on every exit (`Drain`). The objects are of the storage's kind and size.
    #[allow(unsafe_code)]
    unsafe {
        match (m, data) {
            (Mem::F32(b), HostSlice::F32(v)) => {
                b.write(v).queue(queue).block(false).ewait(after).enew(&mut ev).enq()
            }
            (Mem::I32(b), HostSlice::I32(v)) => {
                b.write(v).queue(queue).block(false).ewait(after).enew(&mut ev).enq()
            }
            (Mem::I8(b), HostSlice::I8(v)) => {
                b.write(v).queue(queue).block(false).ewait(after).enew(&mut ev).enq()
            }
            (Mem::Image(i), HostSlice::F32(v)) => image_write(i, v, queue, after, &mut ev, desc),
            (Mem::HalfImage(i), HostSlice::Half(v)) => {
                image_write(i, v, queue, after, &mut ev, desc)
            }
            _ => return Err(bad()),
        }
    }
    .map_err(ocl_err)?;
    Ok(ev)
}

/// Enqueues the write of `v` into the region of image storage `desc` in `i` on `queue` after
/// `after`, without blocking, its event in `ev`.
///
/// # Safety
///
/// `v` must stay alive until the write's event is complete (see [`write_async`]).
#[allow(unsafe_code)]
unsafe fn image_write<T: ocl::OclPrm>(
    i: &Image<T>,
    v: &[T],
    queue: &Queue,
    after: &Event,
    ev: &mut Event,
    desc: &StorageDesc,
) -> ocl::Result<()> {
    i.write(v).region(region(desc)).queue(queue).block(false).ewait(after).enew(ev).enq()
}

/// Host copies of a call's streamed uploads in pinned (page-locked) memory: buffers the
/// driver allocates in host memory (`CL_MEM_ALLOC_HOST_PTR`), kept mapped, filled before the
/// first run of a call of several runs and read by the transfers of every run of the call.
/// From pageable memory a transfer goes through the driver's own staging copy; from pinned
/// memory it is one DMA (NVIDIA's OpenCL best-practice guide: "pinned memory"; on a phone's
/// unified memory the mapping is the zero-copy path). An upload whose buffer cannot be made
/// (the host is out of pinned memory) is written from pageable memory, as before.
#[derive(Default)]
struct Pinned {
    staged: HashMap<usize, Staged>,
}

/// A pinned buffer's mapping (which holds the buffer; dropping it unmaps and releases it).
enum Staged {
    F32(MemMap<f32>),
    I32(MemMap<i32>),
    I8(MemMap<i8>),
    Half(MemMap<u16>),
}

impl Staged {
    fn slice(&self) -> HostSlice<'_> {
        match self {
            Staged::F32(m) => HostSlice::F32(m),
            Staged::I32(m) => HostSlice::I32(m),
            Staged::I8(m) => HostSlice::I8(m),
            Staged::Half(m) => HostSlice::Half(m),
        }
    }
}

impl Pinned {
    /// Copies every streamed upload of `f` that `sources` writes from host values into pinned
    /// memory (those whose buffer cannot be made stay pageable). A lazy upload
    /// ([`Input::Lazy`]: a weight read from its file) is made here once, one at a time, its
    /// contents dropped once copied: the call's runs then neither read the file nor decode
    /// again. An error of its producer (a damaged tile) ends the call.
    fn stage(
        &mut self,
        queue: &Queue,
        f: &FunctionManifest,
        sources: &HashMap<usize, Source<'_>>,
    ) -> Result<(), OpenClError> {
        for s in &f.steps {
            let Step::Upload { storage, stream_from: Some(_), .. } = s else { continue };
            let Some(desc) = f.storage.get(*storage) else { continue };
            if self.staged.contains_key(storage) {
                continue;
            }
            let made;
            let data = match sources.get(storage) {
                Some(Source::Write(data)) => &**data,
                Some(Source::Lazy(l)) => {
                    made = l.make()?;
                    &made
                }
                _ => continue,
            };
            let mut bits = Vec::new();
            let host = host_slice(is_half(desc), data, &mut bits);
            if host.is_empty() {
                continue;
            }
            if let Ok(p) = make_staged(queue, host) {
                self.staged.insert(*storage, p);
            }
        }
        Ok(())
    }

    /// The pinned copy of upload `id`.
    fn get(&self, id: usize) -> Option<HostSlice<'_>> {
        self.staged.get(&id).map(Staged::slice)
    }
}

/// A pinned buffer holding `data`, mapped for the host.
fn make_staged(queue: &Queue, data: HostSlice<'_>) -> ocl::Result<Staged> {
    fn pinned<T: ocl::OclPrm>(queue: &Queue, v: &[T]) -> ocl::Result<MemMap<T>> {
        let flags = ocl::flags::MEM_ALLOC_HOST_PTR | ocl::flags::MEM_READ_ONLY;
        let b = Buffer::<T>::builder().queue(queue.clone()).flags(flags).len(v.len()).build()?;
        // SAFETY: a blocking map; the mapping is written whole before any transfer reads it,
        // and the device never writes the buffer.
        #[allow(unsafe_code)]
        let mut map = unsafe { b.map().write_invalidate().enq()? };
        map.copy_from_slice(v);
        Ok(map)
    }
    Ok(match data {
        HostSlice::F32(v) => Staged::F32(pinned(queue, v)?),
        HostSlice::I32(v) => Staged::I32(pinned(queue, v)?),
        HostSlice::I8(v) => Staged::I8(pinned(queue, v)?),
        HostSlice::Half(v) => Staged::Half(pinned(queue, v)?),
    })
}

/// Enqueues the read of `m` into `data` on `queue` after `after`, without blocking; its event.
fn read_async(
    m: &Mem,
    data: &mut MemData,
    queue: &Queue,
    after: &Event,
    desc: &StorageDesc,
) -> Result<Event, OpenClError> {
    let mut ev = Event::empty();
    if data.is_empty() {
        return queue.enqueue_marker(Some(after)).map_err(ocl_err);
    }
    // SAFETY: a non-blocking read writes the host slice after this returns. Every slice is a
    // buffer of `Streams::swapped` (its vector moves, its buffer does not), which is dropped
    // only after the run has waited for the read (its download) or finished the transfer
    // queue (`Drain`, on every exit). The slice has the storage's length and element type.
    #[allow(unsafe_code)]
    unsafe {
        match (m, data) {
            (Mem::F32(b), MemData::F32(v)) => {
                b.read(v.as_mut_slice()).queue(queue).block(false).ewait(after).enew(&mut ev).enq()
            }
            (Mem::I32(b), MemData::I32(v)) => {
                b.read(v.as_mut_slice()).queue(queue).block(false).ewait(after).enew(&mut ev).enq()
            }
            (Mem::I8(b), MemData::I8(v)) => {
                b.read(v.as_mut_slice()).queue(queue).block(false).ewait(after).enew(&mut ev).enq()
            }
            (Mem::Image(i), MemData::F32(v)) => i
                .read(v.as_mut_slice())
                .region(region(desc))
                .queue(queue)
                .block(false)
                .ewait(after)
                .enew(&mut ev)
                .enq(),
            _ => {
                return Err(OpenClError::Manifest(format!(
                    "storage {}: element type mismatch",
                    desc.name
                )))
            }
        }
    }
    .map_err(ocl_err)?;
    Ok(ev)
}

/// The host tensor of constant `c`.
fn constant_value(c: &ConstantDesc) -> Result<Value, OpenClError> {
    let shape: Vec<usize> = c.shape.iter().map(|&d| d as usize).collect();
    let bad = |e: crate::reference::KernelError| {
        OpenClError::Manifest(format!("constant `{}`: {e}", c.name))
    };
    let words = c.data.chunks_exact(4).map(|b| [b[0], b[1], b[2], b[3]]);
    Ok(match c.dtype {
        Dtype::I32 => {
            Value::I32(Tensor::new(shape, words.map(i32::from_le_bytes).collect()).map_err(bad)?)
        }
        // Bytes held as i32 values, as the interpreter holds an i8 tensor.
        Dtype::I8 => Value::I32(
            Tensor::new(shape, c.data.iter().map(|&b| i32::from(b as i8)).collect())
                .map_err(bad)?,
        ),
        Dtype::F32 | Dtype::F16 => {
            Value::F32(Tensor::new(shape, words.map(f32::from_le_bytes).collect()).map_err(bad)?)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::{overlap, time_split, TimeSplit};

    #[test]
    fn overlap_counts_each_transfer_against_the_merged_launches() {
        // Launches [0, 10) and [5, 20) merge to [0, 20), and [30, 40).
        let launches = [(5, 20), (0, 10), (30, 40)];
        assert_eq!(overlap(&launches, &[(15, 35)]), 5 + 5);
        assert_eq!(overlap(&launches, &[(20, 30)]), 0);
        assert_eq!(overlap(&launches, &[(0, 100), (2, 3)]), 30 + 1);
        assert_eq!(overlap(&[], &[(0, 5)]), 0);
    }

    #[test]
    fn a_streamed_timeline_splits_into_transfers_launches_alone_and_idle() {
        // Transfers [0, 40) and [60, 80); launches [10, 30), [25, 50) and [90, 100): from 0
        // to 100, 60 ns with a transfer, [40, 50) and [90, 100) launches alone, [50, 60) and
        // [80, 90) idle; launches cover [10, 50) and [90, 100).
        let s = time_split(&[(10, 30), (25, 50), (90, 100)], &[(0, 40), (60, 80)]);
        assert_eq!(
            s,
            TimeSplit { wall_ns: 100, transfer_ns: 60, alone_ns: 20, idle_ns: 20, compute_ns: 50 }
        );
        // Nothing ran: all zero; no transfer: every launch alone (an empty one is no time).
        assert_eq!(time_split(&[], &[]), TimeSplit::default());
        assert_eq!(
            time_split(&[(5, 15), (30, 30)], &[]),
            TimeSplit { wall_ns: 10, transfer_ns: 0, alone_ns: 10, idle_ns: 0, compute_ns: 10 }
        );
    }
}

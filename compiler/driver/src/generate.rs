//! `fbc generate FILE --prompt 1,2,3 [--max-new N] (--weights W | --random-weights SEED)
//! [--target cpu|cpu-jit|cpu-llvm|opencl]`: greedy decoding with an inference module (`fbc gen MODEL
//! --inference`).
//!
//! `@prefill` runs once over the prompt (padded with token 0 to its length `S`: the padding's
//! keys and values land in cache positions that decode overwrites before the causal mask lets
//! anything read them), then `@decode` once per new token, each time at the next position with
//! the caches the previous call returned. The host builds what the graphs leave to it: the token
//! ids, the position, and the RoPE rows of the positions from the settings the module records
//! (`fbc.rope`, `fbc_models::rope`); the graphs compute their masks from the position
//! (`tensor.causal_mask`). Each next token is the arg-max of the last logits row (the first of
//! equal maxima).
//!
//! Output: the new token ids, comma-separated, on stdout; on stderr the time to the first token
//! (prefill), the time per output token and tokens per second (decode), and on OpenCL the most
//! device memory one call held and the bytes the last decode step uploaded and read back. The
//! weights come from `--weights` (safetensors or `.fbw`) by
//! argument name: a missing or mis-shaped one is an error naming it, before anything runs.
//!
//! On OpenCL one session ([`fbc_runtime::device::opencl::Session`]) serves every call: the
//! program is built once, the weights are uploaded at the first call and stay on the device
//! (a weight that `@decode` lays out otherwise than `@prefill`, such as an R-Tile that the
//! profile's measured rates keep in a buffer for matrix-vector products, is uploaded again in
//! that form at the first decode step and replaces the prefill form), and a cache that a
//! function updates in place (the lowered `@prefill` and `@decode` do) stays there too,
//! neither downloaded nor uploaded again; a decode step moves only the token, the position,
//! the RoPE rows and the logits (the report says how many bytes the last one moved).
//!
//! A Whisper decoder's module (`fbc gen whisper-large-decoder --inference --batch 1`) runs the
//! same way: the host fills `positions` (the rows of the learned position table) instead of
//! RoPE rows, `encoder_states` comes from `--encoder-states` (or `--weights`, or is random with
//! `--random-weights`), and the cross-attention keys and values `@prefill` returns after its
//! caches are what every `@decode` step takes (on a device, uploaded at the first step and
//! kept).
//!
//! A module of batch `B` (`fbc gen MODEL --inference --batch B`) takes `B` prompts of one
//! length (`--prompt` once per sequence): the sequences share the position, and each decodes
//! its own greedy continuation, printed one line per sequence.

use std::borrow::Cow;
use std::time::{Duration, Instant};

use fbc_ir::{FuncId, Module, SourceFile, Type};
use fbc_runtime::interp::{arg_name, Interpreter, Mode, Value};
use fbc_runtime::reference::Tensor;

use crate::cli::GenerateArgs;
use crate::run_cmd::io::{read_inputs, Sources};
use crate::{Driver, Failure};

/// What the host gives each call, by argument name: the tokens and the position always; the
/// RoPE rows where the model rotates (Llama, Qwen, Gemma), the positions of the new tokens where
/// it looks them up in a learned table (Whisper's decoder).
const HOST: [&str; 5] = ["tokens", "pos", "rope_cos", "rope_sin", "positions"];

/// The host arguments every inference function takes.
const REQUIRED: [&str; 2] = ["tokens", "pos"];

/// One of the two functions, with where its host arguments and caches are.
struct Func {
    id: FuncId,
    name: String,
    /// Sequences per call (`B`).
    batch: usize,
    /// New tokens per call (`S`).
    len: usize,
    /// Argument index by name, for the host's arguments.
    args: Vec<(String, usize)>,
    /// Every argument's name, in order (the OpenCL session keeps arguments by name; the JIT
    /// keeps the weights' uploads).
    names: Vec<String>,
    /// The caches' argument indices, in order (the results after the logits, in the same order).
    caches: Vec<usize>,
    /// Results after the caches: values the next function reads as they are (Whisper's
    /// `@prefill` returns each layer's cross-attention keys and values, projected once from the
    /// encoder states, which every `@decode` step takes).
    extra: usize,
}

/// The model's shape, read off `@decode`'s signature: its RoPE settings where it takes RoPE
/// rows.
struct Shape {
    head_dim: usize,
    rope: Option<fbc_models::rope::Rope>,
}

fn tensor_shape(ty: &Type) -> Vec<usize> {
    ty.as_tensor().map(|t| t.shape.iter().map(|&d| d as usize).collect()).unwrap_or_default()
}

fn input_error(file: &SourceFile, msg: impl std::fmt::Display) -> Failure {
    Failure::Input(format!("{}: error: {msg}\n", file.name))
}

fn func(module: &Module, file: &SourceFile, name: &str) -> Result<Func, Failure> {
    let id = module.find_func(name).ok_or_else(|| {
        input_error(
            file,
            format!(
                "no @{name}: `fbc generate` takes an inference module (`fbc gen MODEL --inference`)"
            ),
        )
    })?;
    let f = module.func(id);
    let names: Vec<String> = (0..f.args.len()).map(|i| arg_name(module, id, i)).collect();
    let mut args = Vec::new();
    let mut caches = Vec::new();
    for (i, n) in names.iter().enumerate() {
        if HOST.contains(&n.as_str()) {
            args.push((n.clone(), i));
        } else if n.ends_with("_cache") {
            caches.push(i);
        }
    }
    for want in REQUIRED {
        if find(&args, want).is_none() {
            return Err(input_error(file, format!("@{name} has no argument `{want}`")));
        }
    }
    if f.result_types.len() < caches.len() + 1 {
        return Err(input_error(
            file,
            format!(
                "@{name} returns {} values; an inference function returns its logits and its {} caches",
                f.result_types.len(),
                caches.len()
            ),
        ));
    }
    let tokens = tensor_shape(module.value_type(f.args[find(&args, "tokens").unwrap_or(0)]));
    if tokens.len() != 2 || tokens[0] == 0 {
        return Err(input_error(
            file,
            format!("@{name}'s tokens are {tokens:?}; an inference function takes `[B, S]` ids"),
        ));
    }
    let extra = f.result_types.len() - caches.len() - 1;
    let (batch, len) = (tokens[0], tokens[1]);
    Ok(Func { id, name: name.to_string(), batch, len, args, names, caches, extra })
}

/// The index of host argument `name` in `args`.
fn find(args: &[(String, usize)], name: &str) -> Option<usize> {
    args.iter().find(|(n, _)| n == name).map(|&(_, i)| i)
}

impl Func {
    fn arg(&self, name: &str) -> Option<usize> {
        find(&self.args, name)
    }

    /// The host's arguments of a call over each sequence's `tokens` (each padded to `len`) at
    /// position `pos`.
    fn host_inputs(&self, shape: &Shape, tokens: &[Vec<i32>], pos: usize, values: &mut [Value]) {
        let (b, s) = (self.batch, self.len);
        let mut ids = Vec::with_capacity(b * s);
        for row in tokens {
            let start = ids.len();
            ids.extend_from_slice(row);
            ids.resize(start + s, 0);
        }
        let at: Vec<i32> = (0..b).flat_map(|_| (pos..pos + s).map(|p| p as i32)).collect();
        let mut made = vec![
            ("tokens", Tensor::new(vec![b, s], ids).map(Value::I32)),
            ("pos", Tensor::new(Vec::new(), vec![pos as i32]).map(Value::I32)),
            ("positions", Tensor::new(vec![b, s], at).map(Value::I32)),
        ];
        if let Some(rope) = &shape.rope {
            let (cos, sin) =
                fbc_models::rope::tables(rope, shape.head_dim as u64, pos as u64, s as u64);
            let hd = shape.head_dim;
            made.push(("rope_cos", Tensor::new(vec![s, hd], cos).map(Value::F32)));
            made.push(("rope_sin", Tensor::new(vec![s, hd], sin).map(Value::F32)));
        }
        for (name, v) in made {
            if let (Some(i), Ok(v)) = (self.arg(name), v) {
                values[i] = v;
            }
        }
    }
}

/// The index of the largest value of row `row` of `logits` (`[B, S, V]` as `B·S` rows).
fn arg_max(logits: &Value, row: usize, vocab: usize) -> Option<i32> {
    let data = logits.as_f32()?.data();
    let r = data.get(row * vocab..(row + 1) * vocab)?;
    let mut best = 0;
    for (i, &v) in r.iter().enumerate() {
        if v > r[best] {
            best = i;
        }
    }
    i32::try_from(best).ok()
}

/// How a call runs: the interpreter on the module, the JIT or a device on the lowered one.
enum Runner<'a> {
    Interp(Interpreter<'a>),
    /// The launcher keeps its compiled kernels from call to call, and `uploads` each
    /// function's weights as they were packed for its first call (every argument but the
    /// caches and the host's: the same values at every call).
    Jit {
        lowered: Module,
        launcher: Box<dyn fbc_runtime::exec::Launcher>,
        uploads: std::collections::HashMap<String, fbc_runtime::interp::Uploads>,
    },
    /// The session keeps the weights on the device from the first call on, and the caches
    /// that the functions update in place (see [`Runner::call`]).
    #[cfg(feature = "opencl")]
    OpenCl {
        compiled: Box<crate::run_cmd::opencl::Compiled>,
        session: Box<fbc_runtime::device::opencl::Session>,
        /// Under `--memory-budget`: weights are uploaded at every call, as the plan says
        /// (preloaded, or streamed during earlier launches), never kept between calls.
        streamed: bool,
        /// Under `--kv-tiling`: the caches go back to the host after every call (the plan
        /// streams them in and writes them back), never kept on the device.
        kv_tiling: bool,
        /// Under `--memory-budget`: each weight packed once for the upload of each function
        /// (`(function, argument)`), so that a call uploads it without packing it again.
        packed: std::collections::HashMap<(String, usize), fbc_runtime::exec::MemData>,
        /// The caches whose current value is on the device, not in the host's arguments.
        on_device: std::collections::HashSet<String>,
    },
}

/// Packs, once per function, each weight argument of `f` that its function uploads once (the
/// form of that upload) into `packed`: a budgeted run uploads weights at every call.
#[cfg(feature = "opencl")]
fn pack_weights(
    compiled: &crate::run_cmd::opencl::Compiled,
    f: &Func,
    inputs: &[Value],
    packed: &mut std::collections::HashMap<(String, usize), fbc_runtime::exec::MemData>,
) -> Result<(), String> {
    let Some(m) = compiled.out.manifest.function(&f.name) else { return Ok(()) };
    for (i, v) in inputs.iter().enumerate() {
        let key = (f.name.clone(), i);
        if packed.contains_key(&key) || f.caches.contains(&i) || HOST.contains(&f.names[i].as_str())
        {
            continue;
        }
        let uploads: Vec<_> = m.uploads_of(i).collect();
        // A row tile (`rows`) is cut from the value when uploaded: not packed here.
        let [u] = uploads[..] else { continue };
        if u.rows.is_some() {
            continue;
        }
        let Some(desc) = m.storage.get(u.storage) else { continue };
        let layout = u.layout.layout()?;
        let ty = fbc_runtime::device::opencl::mem_type(desc);
        let data = fbc_runtime::exec::pack(&layout, u.shape, v, ty)
            .map_err(|e| format!("weight `{}`: {e}", f.names[i]))?;
        packed.insert(key, data);
    }
    Ok(())
}

/// What one call returned: the logits, the caches (`None` for one that stayed on the device)
/// and the device memory the call held (OpenCL).
struct Returned {
    logits: Value,
    caches: Vec<Option<Value>>,
    peak: Option<u64>,
    /// Bytes uploaded and read back (OpenCL).
    moved: Option<(u64, u64)>,
}

impl Runner<'_> {
    /// Calls `f` on `inputs`. The interpreters take their arguments by value, so borrowed ones
    /// are copied for them; a device only reads them. On OpenCL the weights are uploaded at
    /// the first call and kept under their argument names (`Input::Held`: a call that lays
    /// one out otherwise uploads it again in its form); a cache that `f` updates in place
    /// stays on the device under its argument name (`inputs` then holds nothing the call reads
    /// for it after the first call) and is not downloaded, one it does not is downloaded and
    /// uploaded with the next call.
    fn call(
        &mut self,
        file: &SourceFile,
        f: &Func,
        inputs: Cow<'_, [Value]>,
    ) -> Result<Returned, Failure> {
        let split = |mut r: Vec<Value>| -> Result<Returned, Failure> {
            if r.is_empty() {
                return Err(input_error(file, format!("@{} returns no logits", f.name)));
            }
            let logits = r.remove(0);
            Ok(Returned {
                logits,
                caches: r.into_iter().map(Some).collect(),
                peak: None,
                moved: None,
            })
        };
        match self {
            Runner::Interp(i) => split(
                i.run_id(f.id, inputs.into_owned())
                    .map_err(|e| crate::run_cmd::located(file, &e))?,
            ),
            Runner::Jit { lowered, launcher, uploads } => {
                let id = crate::run_cmd::lowered_func(lowered, &f.name, file)?;
                let kept = uploads.entry(f.name.clone()).or_insert_with(|| {
                    let weight =
                        |i: usize| !f.caches.contains(&i) && !HOST.contains(&f.names[i].as_str());
                    fbc_runtime::interp::Uploads::new((0..f.names.len()).map(weight).collect())
                });
                split(
                    Interpreter::new(lowered)
                        .run_id_with_uploads(id, inputs.into_owned(), launcher.as_mut(), Some(kept))
                        .map_err(|e| crate::run_cmd::located(file, &e))?,
                )
            }
            #[cfg(feature = "opencl")]
            Runner::OpenCl { compiled, session, streamed, kv_tiling, packed, on_device } => {
                use fbc_runtime::device::opencl::{Input, OpenClError};
                let failure = |e: OpenClError| match &e {
                    OpenClError::Fault { location, message } => {
                        crate::run_cmd::opencl::fault_at(&compiled.lowered, file, location, message)
                    }
                    _ => crate::run_cmd::opencl::device_failure(&file.name, &e),
                };
                let in_place = session.in_place(&f.name).map_err(failure)?;
                // The caches this call leaves on the device: result `1 + c` updated in place.
                let stays: Vec<bool> = f
                    .caches
                    .iter()
                    .enumerate()
                    .map(|(c, &a)| !*kv_tiling && in_place.get(1 + c).copied().flatten() == Some(a))
                    .collect();
                let names = &f.names;
                if *streamed {
                    pack_weights(compiled, f, &inputs, packed).map_err(|e| input_error(file, e))?;
                }
                let args: Vec<Input<'_>> = inputs
                    .iter()
                    .enumerate()
                    .map(|(i, v)| {
                        let key = names[i].as_str();
                        let held = on_device.contains(key);
                        match f.caches.iter().position(|&a| a == i) {
                            // A cache: its value is on the device or in `inputs`; kept where
                            // the call updates it in place.
                            Some(c) if stays[c] => Input::Keep { key, value: (!held).then_some(v) },
                            Some(_) if held => Input::Keep { key, value: None },
                            Some(_) => Input::Host(v),
                            None if HOST.contains(&key) => Input::Host(v),
                            None if *streamed => match packed.get(&(f.name.clone(), i)) {
                                Some(d) => Input::Stored(d),
                                None => Input::Host(v),
                            },
                            None => Input::Held { key, value: v },
                        }
                    })
                    .collect();
                let want: Vec<bool> = std::iter::once(true)
                    .chain(stays.iter().map(|&s| !s))
                    .chain(std::iter::repeat_n(true, f.extra))
                    .collect();
                let out = session.call(&f.name, &args, Some(&want)).map_err(failure)?;
                for (&a, &stay) in f.caches.iter().zip(&stays) {
                    if stay {
                        on_device.insert(names[a].clone());
                    } else {
                        on_device.remove(&names[a]);
                    }
                }
                let mut results = out.results.into_iter();
                let logits = results
                    .next()
                    .flatten()
                    .ok_or_else(|| input_error(file, format!("@{} returns no logits", f.name)))?;
                Ok(Returned {
                    logits,
                    caches: results.collect(),
                    peak: Some(out.device_peak_bytes),
                    moved: Some((out.uploaded_bytes, out.downloaded_bytes)),
                })
            }
        }
    }
}

pub(crate) fn run(driver: &Driver, a: &GenerateArgs, quiet: bool) -> Result<(), Failure> {
    if a.device.memory_budget.is_some() && a.target != "opencl" {
        return Err(Failure::Usage("--memory-budget is for --target opencl".into()));
    }
    let (file, module) = driver.load(&a.file)?;
    let prefill = func(&module, &file, "prefill")?;
    let decode = func(&module, &file, "decode")?;
    if decode.len != 1 {
        return Err(input_error(
            &file,
            format!("@decode takes {} tokens a call, not 1", decode.len),
        ));
    }
    // The model's shape, from @decode's arguments and attributes.
    let d = module.func(decode.id);
    let arg_shape = |f: &Func, n: &str| {
        f.arg(n).map(|i| tensor_shape(module.value_type(module.func(f.id).args[i])))
    };
    // Cache positions: the third dimension of the caches `[B, KV, M, hd]`.
    let positions = decode
        .caches
        .first()
        .map(|&i| tensor_shape(module.value_type(module.func(decode.id).args[i])))
        .and_then(|s| s.get(2).copied())
        .unwrap_or(0);
    let head_dim = arg_shape(&decode, "rope_cos").and_then(|s| s.get(1).copied()).unwrap_or(0);
    let vocab = tensor_shape(&d.result_types[0]).last().copied().unwrap_or(0);
    // RoPE settings where @decode takes RoPE rows.
    let rope = decode
        .arg("rope_cos")
        .map(|_| {
            d.attr(fbc_models::rope::ATTR).and_then(fbc_models::rope::from_attr).ok_or_else(|| {
                input_error(
                    &file,
                    format!(
                        "@decode has no RoPE settings (`{}`); generate the module with `fbc gen MODEL --inference`",
                        fbc_models::rope::ATTR
                    ),
                )
            })
        })
        .transpose()?;
    // What @prefill returns after its caches: @decode's arguments that @prefill does not take
    // (but the host's), in order and of the same types.
    let carried_args: Vec<usize> = (0..decode.names.len())
        .filter(|&i| {
            let n = decode.names[i].as_str();
            !HOST.contains(&n) && !prefill.names.iter().any(|p| p == n)
        })
        .collect();
    let pf = module.func(prefill.id);
    let extra_types = &pf.result_types[1 + prefill.caches.len()..];
    let carried_types: Vec<&Type> =
        carried_args.iter().map(|&i| module.value_type(d.args[i])).collect();
    if decode.extra != 0
        || carried_types.len() != extra_types.len()
        || carried_types.iter().zip(extra_types).any(|(a, b)| *a != b)
    {
        let names: Vec<&str> = carried_args.iter().map(|&i| decode.names[i].as_str()).collect();
        return Err(input_error(
            &file,
            format!(
                "@decode takes {} argument(s) @prefill does not ({names:?}), and @prefill returns {} value(s) after its caches: they must match in number and type",
                names.len(),
                extra_types.len()
            ),
        ));
    }
    let shape = Shape { head_dim, rope };
    // The prompts (one per sequence, of one length) and the cache.
    let batch = prefill.batch;
    if decode.batch != batch {
        return Err(input_error(
            &file,
            format!("@prefill takes {batch} sequence(s) a call and @decode {}", decode.batch),
        ));
    }
    if a.prompt.len() != batch {
        return Err(Failure::Usage(format!(
            "{} prompt(s) for a module of {batch} sequence(s) a call: give --prompt once per sequence",
            a.prompt.len()
        )));
    }
    let n = a.prompt[0].0.len();
    if a.prompt.iter().any(|p| p.0.len() != n) {
        return Err(Failure::Usage(format!(
            "the prompts have {:?} tokens: the sequences of a batch share their position, so their prompts must be of one length",
            a.prompt.iter().map(|p| p.0.len()).collect::<Vec<_>>()
        )));
    }
    let max_new = a.max_new as usize;
    if n > prefill.len {
        return Err(Failure::Usage(format!(
            "the prompt has {n} tokens; @prefill takes at most {} (`fbc gen --seq`)",
            prefill.len
        )));
    }
    if n + max_new > positions {
        return Err(Failure::Usage(format!(
            "{n} prompt tokens and {max_new} new ones need {} cache positions; the module's caches hold {positions} (`fbc gen --max-seq`)",
            n + max_new
        )));
    }
    let prompts: Vec<Vec<i32>> = a
        .prompt
        .iter()
        .map(|p| {
            p.0.iter()
                .map(|&t| i32::try_from(t).ok().filter(|&t| t >= 0 && (t as usize) < vocab))
                .collect::<Option<Vec<i32>>>()
        })
        .collect::<Option<_>>()
        .ok_or_else(|| {
            Failure::Usage(format!(
                "every prompt token must be from 0 to {}",
                vocab.saturating_sub(1)
            ))
        })?;
    // The weights, checked for both functions before anything runs.
    let caches: Vec<String> =
        prefill.caches.iter().map(|&i| arg_name(&module, prefill.id, i)).collect();
    let host_names: Vec<&str> = HOST
        .iter()
        .copied()
        .chain(caches.iter().map(String::as_str))
        .chain(carried_args.iter().map(|&i| decode.names[i].as_str()))
        .collect();
    let (mut st, fbw) = match &a.weights {
        Some(p) if p.extension().is_some_and(|e| e == "fbw") => (Vec::new(), Some(p.as_path())),
        Some(p) => (vec![p.clone()], None),
        None => (Vec::new(), None),
    };
    st.extend(a.encoder_states.iter().cloned());
    let src = Sources {
        inputs: &st,
        weights: fbw,
        seed: a.random_weights,
        host: &host_names,
        allow_unused: false,
        stored: &[],
    };
    // @prefill takes every weight (and the encoder states); @decode may take fewer (Whisper's
    // cross-attention projections of the encoder states run in @prefill only).
    let mut first = read_inputs(&module, prefill.id, src, Mode::F32, &file.name)?;
    let src = Sources { allow_unused: true, ..src };
    let mut next = read_inputs(&module, decode.id, src, Mode::F32, &file.name)?;
    // Random weights are drawn by argument index: where @decode takes a weight at another index
    // than @prefill (Whisper's decode has no encoder states nor cross-attention projections),
    // it gets @prefill's, so that both run the same model.
    if a.random_weights.is_some() {
        for (i, name) in decode.names.iter().enumerate() {
            let j = prefill.names.iter().position(|p| p == name);
            if let Some(j) = j.filter(|&j| j != i && !host_names.contains(&name.as_str())) {
                next[i] = first[j].clone();
            }
        }
    }
    // How calls run.
    let mut runner = match a.target.as_str() {
        "cpu" => Runner::Interp(Interpreter::new(&module)),
        "cpu-jit" | "cpu-llvm" => {
            use fbc_runtime::device::cpu_jit::{Backend, JitLauncher};
            let backend = a.lower.cpu_backend(&a.target)?;
            let session = a.lower.session(driver, fbc_transforms::lower::SplitK::Auto)?;
            let mut lowered = module.clone();
            session.compile(&file, &mut lowered)?;
            let setup = |e: String| Failure::Usage(format!("--target {}: {e}", a.target));
            let launcher: Box<dyn fbc_runtime::exec::Launcher> = match backend {
                Backend::Cranelift => Box::new(JitLauncher::new().map_err(setup)?),
                #[cfg(feature = "llvm")]
                Backend::Llvm(cpu) => Box::new(JitLauncher::llvm(cpu).map_err(setup)?),
            };
            Runner::Jit { lowered, launcher, uploads: Default::default() }
        }
        #[cfg(feature = "opencl")]
        "opencl" => {
            use fbc_runtime::device::opencl::{DeviceSel, RunOptions};
            let mut session = a.lower.session(driver, fbc_transforms::lower::SplitK::Auto)?;
            session.memory_budget = a.device.memory_budget;
            session.kv_tiling = a.device.kv_tiling;
            let tuned =
                crate::run_cmd::opencl::device_tuning(a.device.tuning.as_deref(), &a.device.device);
            let compiled = crate::run_cmd::opencl::compile_loaded(
                &session,
                file.clone(),
                module.clone(),
                Some("decode"),
                true,
                tuned,
            )?;
            let opts = RunOptions {
                device: DeviceSel::parse(&a.device.device),
                device_memory: a.device.device_memory.runtime(),
                memory_budget: a.device.memory_budget,
                untimed: true,
                ..RunOptions::default()
            };
            let session = fbc_runtime::device::opencl::Session::new(
                &compiled.out.source,
                &compiled.out.manifest,
                &opts,
            )
            .map_err(|e| crate::run_cmd::opencl::device_failure(&file.name, &e))?;
            Runner::OpenCl {
                compiled: Box::new(compiled),
                session: Box::new(session),
                streamed: a.device.memory_budget.is_some(),
                kv_tiling: a.device.kv_tiling,
                packed: Default::default(),
                on_device: Default::default(),
            }
        }
        #[cfg(not(feature = "opencl"))]
        "opencl" => return Err(crate::run_cmd::opencl::no_opencl()),
        other => {
            return Err(Failure::Usage(format!(
                "--target {other} is not supported by `fbc generate`; supported: cpu, cpu-jit, \
             cpu-llvm, opencl"
            )))
        }
    };
    // Prefill.
    prefill.host_inputs(&shape, &prompts, 0, &mut first);
    let start = Instant::now();
    let out = runner.call(&file, &prefill, Cow::Owned(first))?;
    let ttft = start.elapsed();
    let mut peak = out.peak;
    // Each sequence's new tokens, and the last of them (the next step's input).
    let mut tokens: Vec<Vec<i32>> = vec![Vec::with_capacity(max_new); batch];
    let no_logits = || input_error(&file, "@prefill's logits are not f32 rows of the vocabulary");
    let last = |logits: &Value, len: usize, at: usize| -> Result<Vec<i32>, Failure> {
        (0..batch).map(|b| arg_max(logits, b * len + at, vocab).ok_or_else(no_logits)).collect()
    };
    let mut token = last(&out.logits, prefill.len, n - 1)?;
    let mut carried = out.caches;
    // The values @prefill returned for every @decode step (on a device, uploaded at the first
    // step and kept there).
    for (&i, v) in carried_args.iter().zip(carried.split_off(prefill.caches.len())) {
        next[i] = v.ok_or_else(|| input_error(&file, "@prefill's results were not returned"))?;
    }
    let mut moved = None;
    // Decode, a token at a time.
    let bar = crate::progress::bar(max_new as u64, "decode", quiet);
    let mut decode_time = Duration::ZERO;
    for step in 0..max_new {
        for (seq, &t) in tokens.iter_mut().zip(&token) {
            seq.push(t);
        }
        bar.set_position(step as u64 + 1);
        if step + 1 == max_new {
            break;
        }
        let inputs: Vec<Vec<i32>> = token.iter().map(|&t| vec![t]).collect();
        decode.host_inputs(&shape, &inputs, n + step, &mut next);
        // A cache the device kept is not in `carried`: its argument is not read.
        for (&i, c) in decode.caches.iter().zip(carried) {
            if let Some(c) = c {
                next[i] = c;
            }
        }
        let start = Instant::now();
        let out = runner.call(&file, &decode, Cow::Borrowed(&next))?;
        decode_time += start.elapsed();
        peak = peak.max(out.peak);
        moved = out.moved;
        token = last(&out.logits, 1, 0)?;
        carried = out.caches;
    }
    bar.finish_and_clear();
    let lines: Vec<String> = tokens
        .iter()
        .map(|seq| seq.iter().map(ToString::to_string).collect::<Vec<_>>().join(","))
        .collect();
    crate::output::write_text(None, &format!("{}\n", lines.join("\n")))?;
    let steps = max_new.saturating_sub(1);
    let sequences = if batch > 1 { format!("{batch} sequences, ") } else { String::new() };
    let mut report = format!(
        "{sequences}prompt {n} tokens, {} new on {}: time to first token {:.3} ms",
        tokens[0].len(),
        a.target,
        ttft.as_secs_f64() * 1e3
    );
    if steps > 0 {
        let per = decode_time.as_secs_f64() / steps as f64;
        report.push_str(&format!(
            ", {:.3} ms per output token ({:.1} tokens/s)",
            per * 1e3,
            1.0 / per
        ));
    }
    if let Some(p) = peak {
        report.push_str(&format!(", peak device memory {p} bytes"));
    }
    if let Some((up, down)) = moved {
        report
            .push_str(&format!("; the last decode step uploaded {up} bytes and read back {down}"));
    }
    if !quiet {
        eprintln!("{report}");
    }
    Ok(())
}

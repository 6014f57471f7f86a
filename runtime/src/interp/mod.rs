//! The reference interpreter: executes a function of a verified [`Module`] on input values with
//! the reference kernels, and returns its results.
//!
//! ```text
//! let module = fbc_ir::parse_module(&file, &fbc_dialects::registry())?;
//! let inputs = random_inputs(&module, "loss", 42)?;            // or your own Values
//! let results = Interpreter::new(&module).run("loss", inputs)?;
//! ```
//!
//! - [`Value`]s are dense tensors of `f32`, `f64` or `i32`. In [`Mode::F32`] (the default) each
//!   float type computes in its own precision, f16/bf16 in `f32` rounded after every op; in
//!   [`Mode::F64`] every float op computes in `f64` (gradient checks). See `value.rs`.
//! - Every op of the tensor dialect dispatches to its reference kernel through one table
//!   (`ops.rs`; adding an op is one line there); `func.call` runs the callee in a new frame and
//!   `func.return` ends the function. An op without a kernel is an [`InterpError::Unsupported`]
//!   naming it, never a panic; every error carries the span of the op at fault.
//! - Inputs are checked against the argument types (shape, and a storage that can hold the
//!   element type) and converted to the mode's storage.
//! - Values are dropped after their last use, so peak memory is the live set, not the whole
//!   function. Before a run starts, [`check_memory`] checks that live set, op by op, against the
//!   memory limit ([`crate::limits`]); a run that would not fit fails at once, at the op.
//! - Memory-dialect ops (`interp/memory_ops.rs`) keep storage beside the tensor values of a frame:
//!   uploads pack tensors by their layout, launches run through a [`Launcher`] (the reference
//!   executor of `crate::exec` unless [`Interpreter::run_with_launcher`] is given another),
//!   downloads unpack. A lowered function therefore runs like the tensor function it came from.
//!
//! [`random_inputs`] makes deterministic inputs for any function, and [`check_equivalent`] runs a
//! function of two modules (before and after a transformation) on the same random inputs and
//! compares the results: translation validation for passes.

pub(crate) mod budget;
mod equiv;
mod error;
mod memory_ops;
mod ops;
mod random;
mod value;

use std::collections::{HashMap, HashSet};
use std::rc::Rc;

use fbc_dialects::kind::{FuncOp, MemoryOp, OpKind};
use fbc_ir::{Attr, FuncId, Module, Type};

pub use budget::{check_memory, value_bytes};
pub use equiv::{check_equivalent, compare_values, Tolerance};
pub use error::InterpError;
pub use random::{index_bound, random_input, random_inputs, DEFAULT_INDEX_BOUND};
pub use value::{Mode, Value};

pub use crate::exec::{Launcher, ReferenceLauncher};
pub use memory_ops::Uploads;

/// How the interpreter runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// The float mode.
    pub mode: Mode,
    /// How deeply `func.call`s may nest before the run is stopped (the IR has no control flow,
    /// so deeper nesting means a recursive call graph, which never returns).
    pub max_call_depth: usize,
}

impl Default for Options {
    fn default() -> Options {
        Options { mode: Mode::F32, max_call_depth: 64 }
    }
}

/// Whether `name` is an op the interpreter can execute: calls, returns and the memory ops (run
/// here and in `memory_ops.rs`), and every op with a kernel in the dispatch table (`ops.rs`).
pub fn supports(name: &str) -> bool {
    OpKind::from_name(name).is_some_and(|k| {
        matches!(k, OpKind::Func(_) | OpKind::Memory(_)) || ops::kernel(k).is_some()
    })
}

/// Runs functions of one module.
#[derive(Debug, Clone, Copy)]
pub struct Interpreter<'m> {
    module: &'m Module,
    options: Options,
}

impl<'m> Interpreter<'m> {
    /// An interpreter of `module` (which must have verified) with default options.
    pub fn new(module: &'m Module) -> Interpreter<'m> {
        Interpreter { module, options: Options::default() }
    }

    /// An interpreter with the given options.
    pub fn with_options(module: &'m Module, options: Options) -> Interpreter<'m> {
        Interpreter { module, options }
    }

    /// The same interpreter in another float mode.
    pub fn mode(mut self, mode: Mode) -> Interpreter<'m> {
        self.options.mode = mode;
        self
    }

    /// Runs the function named `func` on `inputs` (one per argument, in order) and returns its
    /// results in order. Float results are in the mode's storage (`F32` for f32/f16/bf16 types in
    /// [`Mode::F32`], `F64` for every float type in [`Mode::F64`]).
    pub fn run(&self, func: &str, inputs: Vec<Value>) -> Result<Vec<Value>, InterpError> {
        let id = find_func(self.module, func)?;
        self.run_id(id, inputs)
    }

    /// [`Interpreter::run`] with `memory.launch` ops executed by `launcher` instead of the
    /// reference executor (a native back end plugs in here).
    pub fn run_with_launcher(
        &self,
        func: &str,
        inputs: Vec<Value>,
        launcher: &mut dyn Launcher,
    ) -> Result<Vec<Value>, InterpError> {
        let id = find_func(self.module, func)?;
        self.run_id_with_launcher(id, inputs, launcher)
    }

    /// [`Interpreter::run`] for a function handle.
    pub fn run_id(&self, func: FuncId, inputs: Vec<Value>) -> Result<Vec<Value>, InterpError> {
        self.run_id_with_launcher(func, inputs, &mut ReferenceLauncher)
    }

    /// [`Interpreter::run_with_launcher`] for a function handle.
    pub fn run_id_with_launcher(
        &self,
        func: FuncId,
        inputs: Vec<Value>,
        launcher: &mut dyn Launcher,
    ) -> Result<Vec<Value>, InterpError> {
        self.run_id_with_uploads(func, inputs, launcher, None)
    }

    /// [`Interpreter::run_id_with_launcher`] keeping the storage `memory.upload` packs from the
    /// arguments `uploads` names, from one call to the next (see [`Uploads`]).
    pub fn run_id_with_uploads(
        &self,
        func: FuncId,
        inputs: Vec<Value>,
        launcher: &mut dyn Launcher,
        uploads: Option<&mut Uploads>,
    ) -> Result<Vec<Value>, InterpError> {
        let f = self.module.func(func);
        if inputs.len() != f.args.len() {
            return Err(InterpError::ArgumentCount {
                func: f.name.clone(),
                expected: f.args.len(),
                found: inputs.len(),
            });
        }
        // Nothing more is allocated when the run would not fit in the memory limit.
        check_memory(self.module, func, self.options.mode)?;
        let mut args = Vec::with_capacity(inputs.len());
        for (index, (v, &arg)) in inputs.into_iter().zip(&f.args).enumerate() {
            let ty = self.module.value_type(arg);
            let argument_error = |found: String| InterpError::Argument {
                func: f.name.clone(),
                index,
                name: arg_name(self.module, func, index),
                expected: ty.to_string(),
                found,
            };
            let unsupported = || InterpError::UnsupportedArgument {
                func: f.name.clone(),
                index,
                name: arg_name(self.module, func, index),
                ty: ty.to_string(),
            };
            let Type::Tensor(t) = ty else { return Err(unsupported()) };
            if value::Storage::of(t.elem, self.options.mode).is_none() {
                return Err(unsupported());
            }
            let v = value::coerce(v, t, self.options.mode)
                .map_err(|v| argument_error(v.to_string()))?;
            args.push(Rc::new(v));
        }
        // The kept arguments of this function, by their values in its body.
        let kept = uploads.map(|u| {
            let values = f.args.iter().zip(&u.keep).filter(|(_, &k)| k).map(|(&a, _)| a).collect();
            (values, u)
        });
        let results = self.call(func, args, 0, launcher, kept)?;
        // Results shared with the caller's frame only; unwrap without copying when possible.
        Ok(results
            .into_iter()
            .map(|r| Rc::try_unwrap(r).unwrap_or_else(|r| (*r).clone()))
            .collect())
    }

    /// Runs `func`'s body on `args` in a fresh frame.
    /// `kept`: the arguments whose uploads are kept ([`Uploads`]), for the outermost call only.
    fn call(
        &self,
        func: FuncId,
        args: Vec<Rc<Value>>,
        depth: usize,
        launcher: &mut dyn Launcher,
        mut kept: Option<(HashSet<fbc_ir::Value>, &mut Uploads)>,
    ) -> Result<Vec<Rc<Value>>, InterpError> {
        let module = self.module;
        let f = module.func(func);
        let mut env: HashMap<fbc_ir::Value, Rc<Value>> =
            HashMap::with_capacity(f.body.len() + args.len());
        for (&a, v) in f.args.iter().zip(args) {
            env.insert(a, v);
        }
        // The position of each value's last use, so that it can be dropped right after.
        let mut last_use: HashMap<fbc_ir::Value, usize> = HashMap::new();
        for (pos, &op) in f.body.iter().enumerate() {
            for &v in &module.op(op).operands {
                last_use.insert(v, pos);
            }
        }
        let mut mem = memory_ops::MemEnv::new();
        for (pos, &op) in f.body.iter().enumerate() {
            let d = module.op(op);
            if MemoryOp::of(d.def).is_some() {
                let kept = kept.as_mut().map(|(values, u)| (&*values, &mut **u));
                memory_ops::execute(
                    module,
                    d,
                    &mut env,
                    &mut mem,
                    launcher,
                    self.options.mode,
                    kept,
                )?;
                for &r in &d.results {
                    if !last_use.contains_key(&r) {
                        env.remove(&r);
                        mem.remove(&r);
                    }
                }
                for v in &d.operands {
                    if last_use.get(v) == Some(&pos) {
                        env.remove(v);
                        mem.remove(v);
                    }
                }
                continue;
            }
            let mut operands = Vec::with_capacity(d.operands.len());
            for (i, v) in d.operands.iter().enumerate() {
                let value = env.get(v).cloned().ok_or_else(|| InterpError::Op {
                    op: d.name().to_string(),
                    message: format!("internal: operand {i} has no value (used before defined?)"),
                    span: d.span,
                })?;
                operands.push(value);
            }
            let results: Vec<Rc<Value>> = match FuncOp::of(d.def) {
                Some(FuncOp::Return) => return Ok(operands),
                Some(FuncOp::Call) => {
                    let callee = match d.attr("callee") {
                        Some(Attr::Symbol(s)) => s.as_str(),
                        _ => {
                            return Err(InterpError::Op {
                                op: d.name().to_string(),
                                message: "`callee` must be a symbol".into(),
                                span: d.span,
                            })
                        }
                    };
                    let target = find_func(module, callee)?;
                    if depth >= self.options.max_call_depth {
                        return Err(InterpError::CallDepth {
                            callee: callee.to_string(),
                            limit: self.options.max_call_depth,
                            span: d.span,
                        });
                    }
                    self.call(target, operands, depth + 1, launcher, None)?
                }
                None => {
                    let refs: Vec<&Value> = operands.iter().map(|v| v.as_ref()).collect();
                    let out = ops::execute(module, d, &refs, self.options.mode)?;
                    out.into_iter().map(Rc::new).collect()
                }
            };
            if results.len() != d.results.len() {
                return Err(InterpError::Op {
                    op: d.name().to_string(),
                    message: format!(
                        "internal: {} results for {} declared",
                        results.len(),
                        d.results.len()
                    ),
                    span: d.span,
                });
            }
            for (&r, v) in d.results.iter().zip(results) {
                // A result nobody reads is dropped at once.
                if last_use.contains_key(&r) {
                    env.insert(r, v);
                }
            }
            for v in &d.operands {
                if last_use.get(v) == Some(&pos) {
                    env.remove(v);
                }
            }
        }
        Err(InterpError::NoReturn { func: f.name.clone() })
    }
}

/// The function named `name`, or an error listing the module's functions.
pub(crate) fn find_func(module: &Module, name: &str) -> Result<FuncId, InterpError> {
    module.find_func(name).ok_or_else(|| InterpError::UnknownFunction {
        name: name.to_string(),
        available: module.funcs.iter().map(|f| f.name.clone()).collect(),
    })
}

/// The name of argument `index` of `func` as written (`x` for `%x`), or its position when it has
/// none.
pub fn arg_name(module: &Module, func: FuncId, index: usize) -> String {
    module
        .func(func)
        .args
        .get(index)
        .and_then(|&a| module.value(a).name.as_deref())
        .map_or_else(|| index.to_string(), str::to_string)
}

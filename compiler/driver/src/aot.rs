//! `fbc FILE --target cpu-llvm --emit obj|asm|llvm [-o DIR]`: the module compiled ahead of time
//! by the LLVM back end into `DIR/NAME.o` (or `.s`, `.ll`) and `DIR/NAME.h`, the C header that
//! declares one entry point per function (`NAME_FUNCTION`), for a C or Rust program to link
//! (`cc main.c DIR/NAME.o -lm`).
//!
//! The module is compiled for the `cpu` hardware profile and lowered with `linear-io=true`, so
//! each argument and result crosses the boundary as a row-major array of the caller's; this
//! module turns each lowered function's body into the host program of
//! [`fbc_codegen::llvm::aot`] (storage slots, uploads, launches, downloads, frees), with dense
//! constants packed into their storage here. `DIR` is written as `--emit opencl` writes its
//! directory: whole or not at all.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use fbc_codegen::llvm::aot::{self, Artifact, Entry, HostArray, Step};
use fbc_codegen::llvm::Cpu;
use fbc_dialects::kind::{FuncOp, MemoryOp, TensorOp};
use fbc_dialects::layout::Layout;
use fbc_dialects::memory::{Kernel, MemType};
use fbc_ir::{Attr, Diagnostic, ElemType, FuncId, Module, OpData, SourceFile, Type};
use fbc_runtime::exec::{pack, MemData};
use fbc_runtime::interp::Value;
use fbc_runtime::reference::Tensor;

use crate::cli::EmitKind;
use crate::Failure;

/// The artifact of `--emit`, and its file suffix.
pub(crate) fn artifact(emit: EmitKind) -> Option<(Artifact, &'static str)> {
    match emit {
        EmitKind::Obj => Some((Artifact::Object, "o")),
        EmitKind::Asm => Some((Artifact::Assembly, "s")),
        EmitKind::Llvm => Some((Artifact::Ir, "ll")),
        _ => None,
    }
}

/// The files of a lowered module compiled as `emit` for `cpu`, launches split over up to
/// `threads` threads: `NAME.SUFFIX` and `NAME.h`.
pub(crate) fn files(
    file: &SourceFile,
    lowered: &Module,
    input: &Path,
    emit: EmitKind,
    cpu: Cpu,
    threads: usize,
) -> Result<Vec<(String, Vec<u8>)>, Failure> {
    let Some((artifact, suffix)) = artifact(emit) else {
        return Err(Failure::Usage(format!("internal: --emit {} is not native code", emit.name())));
    };
    let stem = crate::opencl_emit::stem(lowered, input);
    // The source as the header and the comments name it: its file name alone, so that the
    // output does not depend on where it was compiled.
    let source = input.file_name().map_or(file.name.clone(), |n| n.to_string_lossy().into_owned());
    let prefix = c_ident(&stem);
    let entries = lowered
        .func_ids()
        .map(|f| entry(file, lowered, f, &prefix, &source))
        .collect::<Result<Vec<_>, _>>()?;
    let compiled =
        aot::compile(&entries, cpu, threads, artifact).map_err(|e| at_launch(file, lowered, &e))?;
    let guard = format!("FBC_{}_H", prefix.to_ascii_uppercase());
    let header = aot::header(&entries, &guard, &source, threads);
    Ok(vec![(format!("{stem}.{suffix}"), compiled.bytes), (format!("{stem}.h"), header.into())])
}

/// An error of the back end, located at the (first) launch of the kernel it names, else at the
/// file.
fn at_launch(file: &SourceFile, m: &Module, e: &fbc_codegen::cpu::Error) -> Failure {
    use fbc_codegen::cpu::Error as E;
    let kernel = match e {
        E::Kernel { kernel, .. } | E::Codegen { kernel, .. } => Some(kernel.as_str()),
        _ => None,
    };
    let launch = kernel.and_then(|k| {
        m.all_ops()
            .map(|o| m.op(o))
            .find(|d| MemoryOp::Launch.is(d) && d.attr("kernel").and_then(Attr::as_str) == Some(k))
    });
    match launch {
        Some(d) => located(file, d, format!("internal: {e}")),
        None => Failure::Input(format!("{}: error: {e}\n", file.name)),
    }
}

/// The directory `--emit obj|asm|llvm` writes without `-o`: `NAME.cpu`.
pub(crate) fn default_dir(module: &Module, input: &Path) -> PathBuf {
    PathBuf::from(format!("{}.cpu", crate::opencl_emit::stem(module, input)))
}

/// `s` made a C identifier (letters, digits and `_`; not starting with a digit).
fn c_ident(s: &str) -> String {
    let mut id: String =
        s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect();
    if id.is_empty() || id.starts_with(|c: char| c.is_ascii_digit()) {
        id.insert(0, '_');
    }
    id
}

/// A parameter name: the value's name as a C identifier, made distinct from the others and
/// from C's keywords that could clash.
fn param_name(raw: &str, taken: &mut Vec<String>) -> String {
    const RESERVED: [&str; 12] = [
        "int", "float", "double", "char", "const", "return", "if", "else", "for", "while", "void",
        "unsigned",
    ];
    let mut n = c_ident(raw);
    while RESERVED.contains(&n.as_str()) || taken.contains(&n) {
        n.push('_');
    }
    taken.push(n.clone());
    n
}

/// The host array of a boundary value of type `t` named `name`; `d` locates the error.
fn array(t: &Type, name: String, d: &OpData, file: &SourceFile) -> Result<HostArray, Failure> {
    match t {
        Type::Tensor(t) if matches!(t.elem, ElemType::F32 | ElemType::I32) => {
            Ok(HostArray { name, elem: t.elem, shape: t.shape.to_vec() })
        }
        other => Err(located(
            file,
            d,
            format!(
                "not yet supported: a {other} at the boundary of ahead-of-time code (f32 and \
                 i32 tensors only)"
            ),
        )),
    }
}

/// The storage slots of a host program under construction, by the SSA value they hold.
#[derive(Default)]
struct Slots {
    types: Vec<MemType>,
    of: HashMap<fbc_ir::Value, usize>,
}

impl Slots {
    fn add(&mut self, v: fbc_ir::Value, t: MemType) -> usize {
        self.types.push(t);
        self.of.insert(v, self.types.len() - 1);
        self.types.len() - 1
    }
}

fn located(file: &SourceFile, d: &OpData, message: String) -> Failure {
    Failure::input(file, &[Diagnostic::error(message).at(d.span)])
}

/// The host program of lowered function `f`.
fn entry(
    file: &SourceFile,
    m: &Module,
    f: FuncId,
    prefix: &str,
    source: &str,
) -> Result<Entry, Failure> {
    let func = m.func(f);
    let mut taken = Vec::new();
    let mut slots = Slots::default();
    let mut steps = Vec::new();
    let ret = func.body.iter().map(|&o| m.op(o)).find(|d| FuncOp::Return.is(d));
    let Some(ret) = ret else {
        return Err(Failure::Input(format!(
            "{}: error: @{} has no func.return\n",
            file.name, func.name
        )));
    };
    let args = func
        .args
        .iter()
        .map(|&a| {
            let name = param_name(m.value(a).name.as_deref().unwrap_or("arg"), &mut taken);
            array(m.value_type(a), name, ret, file)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let results = ret
        .operands
        .iter()
        .enumerate()
        .map(|(i, &r)| {
            array(m.value_type(r), param_name(&format!("result{i}"), &mut taken), ret, file)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mem_type = |d: &OpData, v: fbc_ir::Value| {
        MemType::parse_type(m.value_type(v)).map_err(|e| located(file, d, e))
    };
    for &op in &func.body {
        let d = m.op(op);
        let slot =
            |slots: &Slots, v: &fbc_ir::Value| {
                slots.of.get(v).copied().ok_or_else(|| {
                    located(file, d, "internal: storage used before it is made".into())
                })
            };
        match MemoryOp::of_op(d) {
            Some(MemoryOp::Alloc) => {
                let t = mem_type(d, d.results[0])?;
                steps.push(Step::Alloc { slot: slots.add(d.results[0], t) });
            }
            Some(MemoryOp::Upload) => {
                let t = mem_type(d, d.results[0])?;
                let x = d.operands[0];
                let step = if let Some(arg) = func.args.iter().position(|&a| a == x) {
                    if d.attr("rows").is_some() {
                        return Err(located(
                            file,
                            d,
                            "ahead-of-time code uploads whole arguments; a row tile (`rows`) comes from `split-weight-rows`, which only a memory budget runs".into(),
                        ));
                    }
                    if !is_linear(d) {
                        return Err(located(
                            file,
                            d,
                            "internal: ahead-of-time code uploads arguments row-major (linear-io)"
                                .into(),
                        ));
                    }
                    Step::Upload { slot: slots.add(d.results[0], t), arg }
                } else {
                    let bits = constant(file, m, d, x, t)?;
                    Step::Constant { slot: slots.add(d.results[0], t), bits }
                };
                steps.push(step);
            }
            Some(MemoryOp::Launch) => {
                let kernel = Kernel::from_op(d).map_err(|e| located(file, d, e))?;
                let s =
                    d.operands.iter().map(|v| slot(&slots, v)).collect::<Result<Vec<_>, _>>()?;
                steps.push(Step::Launch { kernel: Box::new(kernel), slots: s });
            }
            Some(MemoryOp::Download) => {
                if !is_linear(d) {
                    return Err(located(
                        file,
                        d,
                        "internal: ahead-of-time code downloads results row-major (linear-io)"
                            .into(),
                    ));
                }
                let s = slot(&slots, &d.operands[0])?;
                for (result, _) in
                    ret.operands.iter().enumerate().filter(|(_, &r)| r == d.results[0])
                {
                    steps.push(Step::Download { slot: s, result });
                }
            }
            Some(MemoryOp::Dealloc) => {
                steps.push(Step::Free { slot: slot(&slots, &d.operands[0])? })
            }
            None if FuncOp::Return.is(d) => {
                if d.operands.iter().any(|r| func.args.contains(r)) {
                    return Err(located(
                        file,
                        d,
                        "not yet supported: returning an argument itself from ahead-of-time code"
                            .into(),
                    ));
                }
            }
            None if TensorOp::Constant.is(d) => {}
            None => {
                return Err(located(
                    file,
                    d,
                    format!("internal: `{}` in a lowered function", d.name()),
                ));
            }
        }
    }
    Ok(Entry {
        symbol: format!("{prefix}_{}", c_ident(&func.name)),
        doc: format!("@{} of {source}", func.name),
        args,
        results,
        slots: slots.types,
        steps,
    })
}

/// Whether a host copy's `layout` is `#layout.linear`.
fn is_linear(d: &OpData) -> bool {
    d.attr("layout").and_then(|a| Layout::from_attr(a).ok()) == Some(Layout::Linear)
}

/// The elements (bits) of storage `t` holding the dense constant `x` that upload `d` reads, in
/// the upload's layout.
fn constant(
    file: &SourceFile,
    m: &Module,
    d: &OpData,
    x: fbc_ir::Value,
    t: MemType,
) -> Result<Vec<u32>, Failure> {
    let not = || {
        located(file, d, "uploads a tensor that is neither an argument nor a dense constant".into())
    };
    let c = m.defining_op(x).map(|c| m.op(c)).ok_or_else(not)?;
    let dense = c.attr("value").and_then(Attr::as_dense).filter(|_| TensorOp::Constant.is(c));
    let dense = dense.ok_or_else(not)?;
    let Type::Tensor(tt) = m.value_type(x) else { return Err(not()) };
    let values = dense.decode(tt.elem).map_err(|e| located(file, c, e))?;
    let n: usize = tt.shape.iter().product::<u64>() as usize;
    let at = |i: usize| values[if values.len() == 1 { 0 } else { i }];
    let dims: Vec<usize> = tt.shape.iter().map(|&s| s as usize).collect();
    let err = |e: String| located(file, d, e);
    let value = if tt.elem == ElemType::I32 {
        Value::I32(
            Tensor::new(dims, (0..n).map(|i| at(i) as i32).collect())
                .map_err(|e| err(e.to_string()))?,
        )
    } else {
        Value::F32(
            Tensor::new(dims, (0..n).map(|i| at(i) as f32).collect())
                .map_err(|e| err(e.to_string()))?,
        )
    };
    let layout = d.attr("layout").and_then(|a| Layout::from_attr(a).ok()).unwrap_or(Layout::Linear);
    Ok(match pack(&layout, &tt.shape, &value, t).map_err(err)? {
        MemData::F32(v) => v.into_iter().map(f32::to_bits).collect(),
        MemData::I32(v) => v.into_iter().map(|x| x as u32).collect(),
        // Host programs hold 4-byte elements; packed weights are not theirs yet.
        MemData::I8(_) => {
            return Err(err("ahead-of-time programs do not hold i8 (packed) constants".into()))
        }
    })
}

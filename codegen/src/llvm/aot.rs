//! Ahead-of-time output of the LLVM back end: host programs (what a lowered function does with
//! its storage) and their kernels as one LLVM module, written as an object file, assembly or
//! LLVM IR, with a C header declaring the entry points (`fbc FILE --target cpu-llvm --emit
//! obj|asm|llvm`).
//!
//! An [`Entry`] is one C function `uint32_t NAME(const T *arg0, ..., T *result0, ...)`: every
//! argument and result is a row-major array the caller owns (the lowering ran with
//! `linear-io=true`, so every upload and download copies a whole array). The function allocates
//! its storage (`calloc`; `malloc` for a copy, which overwrites it whole), copies the arguments
//! in, calls the kernels in program order on the calling thread, copies the results out and frees everything, also when it stops early. It
//! returns 0, or the first kernel's fault code (the JIT's [`Fault::code`](crate::cpu::Fault::code): kind in the low byte,
//! operand above it), or [`NO_MEMORY`] when an allocation failed; the results are then
//! unspecified.
//!
//! The kernels are the JIT's: the same lowering, nest, packed contractions and fault checks,
//! each compiled once per distinct kernel and types (a program's repeated layers share them).
//! The math functions they call are defined over the C library's (`expf`, `logf`, `tanhf`,
//! `erff`; the program links `-lm`), so results agree with the reference executor within the
//! usual tolerance rather than bit for bit (the JIT calls Rust's `libm` for `erf`); stores into
//! `f16` images round with LLVM's `fptrunc`, to nearest even as the reference does.

use std::collections::HashMap;
use std::fmt::Write as _;

use fbc_dialects::memory::{Kernel, MemType};
use fbc_ir::ElemType;
use inkwell::memory_buffer::MemoryBuffer;
use inkwell::module::{Linkage, Module};
use inkwell::targets::{CodeModel, FileType, RelocMode};

use super::{Cpu, Llvm};
use crate::cpu::parallel::Split;
use crate::cpu::{cache_key, Codegen, Error, Prepared, MIN_POINTS_PER_THREAD};

/// The status an entry point returns when an allocation failed (no fault code has this low
/// byte).
pub const NO_MEMORY: u32 = 0xff;

/// An array the caller passes: a tensor, row-major.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostArray {
    /// The parameter's name in the header (a C identifier).
    pub name: String,
    pub elem: ElemType,
    pub shape: Vec<u64>,
}

impl HostArray {
    fn elems(&self) -> u64 {
        self.shape.iter().product()
    }

    /// Whether it is a whole copy of storage `t` (as many elements, of its type); else why
    /// not, for the `role` it plays, `copied` into or from `t`.
    fn holds(&self, t: MemType, role: &str, copied: &str) -> Result<(), String> {
        if self.elems() == t.elems() && self.elem == t.value_elem() {
            return Ok(());
        }
        let (n, elem) = (self.elems(), self.elem.name());
        Err(format!("{role} `{}` ({n} {elem}) is {copied} {t}", self.name))
    }
}

/// One step of a host program, over its storage slots.
#[derive(Debug, Clone)]
pub enum Step {
    /// Zeroed storage for the slot.
    Alloc { slot: usize },
    /// Storage for the slot holding a copy of argument `arg` (as many elements).
    Upload { slot: usize, arg: usize },
    /// Storage for the slot holding these elements (`f32` or `i32` bits, the slot's count).
    Constant { slot: usize, bits: Vec<u32> },
    /// The kernel on the slots' storage (inputs, then the output).
    Launch { kernel: Box<Kernel>, slots: Vec<usize> },
    /// Result `result` becomes a copy of the slot's elements (as many).
    Download { slot: usize, result: usize },
    /// The slot's storage is freed.
    Free { slot: usize },
}

/// A C entry point: a lowered function's host program.
#[derive(Debug, Clone)]
pub struct Entry {
    /// The C symbol.
    pub symbol: String,
    /// What the header says of it (the source function).
    pub doc: String,
    pub args: Vec<HostArray>,
    pub results: Vec<HostArray>,
    /// The storage type of each slot.
    pub slots: Vec<MemType>,
    pub steps: Vec<Step>,
}

/// What `--emit` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Artifact {
    /// A relocatable object file (position-independent).
    Object,
    /// Assembly.
    Assembly,
    /// LLVM IR text.
    Ir,
}

/// The compiled program: the artifact's bytes, and the number of distinct kernels.
#[derive(Debug)]
pub struct Compiled {
    pub bytes: Vec<u8>,
    pub kernels: usize,
}

/// Compiles `entries` for `cpu`, each launch split over at most `threads` threads where the
/// JIT would split it, into one module and writes it as `artifact`. Errors name the kernel (its
/// own errors, or LLVM's verifier) or the entry (an inconsistent program).
pub fn compile(
    entries: &[Entry],
    cpu: Cpu,
    threads: usize,
    artifact: Artifact,
) -> Result<Compiled, Error> {
    let llvm = Llvm::with_machine(cpu, RelocMode::PIC, CodeModel::Default)?;
    let mut b = Builder {
        llvm: &llvm,
        kernels: HashMap::new(),
        modules: Vec::new(),
        threads: threads.max(1),
        threaded: false,
    };
    let mut text = String::new();
    for e in entries {
        text.push_str(&b.entry(e)?);
    }
    let mut decls = String::new();
    let mut numbered: Vec<&(usize, KernelFn)> = b.kernels.values().collect();
    numbered.sort_unstable_by_key(|(n, _)| *n);
    for (_, k) in numbered {
        let _ = writeln!(decls, "declare i32 @{}(ptr, i64, i64)", k.symbol);
    }
    let threading = if b.threaded { THREADS } else { "" };
    let host = parse(&llvm, "host", &format!("{PRELUDE}{threading}{decls}{text}"))?;
    let kernels = b.modules.len();
    for m in b.modules {
        host.link_in_module(m).map_err(|e| program_err(format!("linking a kernel: {e}")))?;
    }
    // The math functions the kernels still call, over the C library.
    let math: String = MATH
        .iter()
        .filter(|(name, _)| host.get_function(name).is_some())
        .map(|(_, def)| *def)
        .collect();
    if !math.is_empty() {
        let m = parse(&llvm, "math", &format!("{MATH_DECLS}{math}"))?;
        host.link_in_module(m).map_err(|e| program_err(format!("linking the math: {e}")))?;
    }
    // Only the entry points are visible outside the object.
    let entry: Vec<&str> = entries.iter().map(|e| e.symbol.as_str()).collect();
    let mut f = host.get_first_function();
    while let Some(func) = f {
        let named = func.get_name().to_str().unwrap_or("");
        if func.count_basic_blocks() > 0 && !entry.contains(&named) {
            func.set_linkage(Linkage::Internal);
        }
        f = func.get_next_function();
    }
    host.verify().map_err(|m| program_err(format!("the verifier rejected the program: {m}")))?;
    let bytes = match artifact {
        Artifact::Ir => host.print_to_string().to_bytes().to_vec(),
        Artifact::Object | Artifact::Assembly => {
            let kind =
                if artifact == Artifact::Object { FileType::Object } else { FileType::Assembly };
            llvm.machine
                .write_to_memory_buffer(&host, kind)
                .map_err(|e| program_err(format!("writing the code: {e}")))?
                .as_slice()
                .to_vec()
        }
    };
    Ok(Compiled { bytes, kernels })
}

/// The C header declaring `entries`, guarded by `guard`.
pub fn header(entries: &[Entry], guard: &str, source: &str, threads: usize) -> String {
    let mut h =
        format!("/* Generated by fbc from {source}: the entry points of its object file.\n");
    let threads = if threads > 1 {
        format!(
            " * array. Each function is called on one thread and runs its launches on up to\n \
             * {threads} (POSIX threads it starts and joins; link with -lpthread where the C\n \
             * library does not hold them). It returns FBC_OK, FBC_NO_MEMORY"
        )
    } else {
        " * array. Each function runs on the calling thread and returns FBC_OK, FBC_NO_MEMORY"
            .into()
    };
    for line in [
        " *",
        " * Every array is row-major and owned by the caller; a result must not overlap another",
        &threads,
        " * (an allocation failed; the results are then unspecified), or the fault of the",
        " * kernel that stopped: its kind in the low byte (1 a read, 2 a load, 3 a write out of",
        " * bounds, 4 an integer division by zero, 5 int() of NaN, 6 an undefined index map, 7 a",
        " * symbol outside its range) and its operand above it. Link with -lm. */",
    ] {
        h.push_str(line);
        h.push('\n');
    }
    let _ = write!(
        h,
        "#ifndef {guard}\n#define {guard}\n\n#include <stdint.h>\n\n#ifdef __cplusplus\n\
         extern \"C\" {{\n#endif\n\n#ifndef FBC_OK\n#define FBC_OK 0u\n\
         #define FBC_NO_MEMORY {NO_MEMORY}u\n#endif\n"
    );
    for e in entries {
        let _ = writeln!(h, "\n/* {} */", e.doc);
        let mut params = Vec::new();
        for (a, write) in
            e.args.iter().map(|a| (a, false)).chain(e.results.iter().map(|r| (r, true)))
        {
            let dims: Vec<String> = a.shape.iter().map(u64::to_string).collect();
            let _ = writeln!(
                h,
                "/*   {} {}: {}[{}] */",
                if write { "out" } else { "in " },
                a.name,
                a.elem.name(),
                dims.join("][")
            );
            let ty = if a.elem == ElemType::I32 { "int32_t" } else { "float" };
            params.push(format!("{}{ty} *{}", if write { "" } else { "const " }, a.name));
        }
        if params.is_empty() {
            params.push("void".into());
        }
        let _ = writeln!(h, "uint32_t {}({});", e.symbol, params.join(", "));
    }
    let _ = write!(h, "\n#ifdef __cplusplus\n}}\n#endif\n\n#endif /* {guard} */\n");
    h
}

fn program_err(message: String) -> Error {
    Error::Codegen { kernel: "(program)".into(), backend: <Llvm as Codegen>::NAME, message }
}

/// Parses LLVM IR text this module wrote into a module of the back end's context.
fn parse(llvm: &Llvm, name: &str, text: &str) -> Result<Module<'static>, Error> {
    let buf = MemoryBuffer::create_from_memory_range_copy(text.as_bytes(), name);
    llvm.context
        .create_module_from_ir(buf)
        .map_err(|e| program_err(format!("the host program's IR ({name}): {e}")))
}

/// One compiled kernel of the program.
struct KernelFn {
    symbol: String,
    /// The function takes a copy of its output before the output.
    snapshot: bool,
    /// Scratch `f32`s after its operands.
    scratch: Option<u64>,
    /// How a launch of it may be split over threads.
    split: Option<Split>,
}

struct Builder<'l> {
    llvm: &'l Llvm,
    /// By [`cache_key`]: the kernel's number and function.
    kernels: HashMap<String, (usize, KernelFn)>,
    modules: Vec<Module<'static>>,
    /// The most threads a launch runs on.
    threads: usize,
    /// Some launch runs on several threads (the program needs `fbc_run_chunks`).
    threaded: bool,
}

/// The text of one entry function under construction.
struct Body {
    /// The steps' instructions.
    out: String,
    /// Module-level definitions (the constants' elements).
    globals: String,
    /// The entry block's `alloca`s (operand tables, chunk descriptions).
    allocas: String,
    /// Slot pointer `alloca`s: the program's slots, then temporaries.
    slots: usize,
    next: usize,
}

impl Body {
    /// A fresh SSA name.
    fn fresh(&mut self) -> usize {
        self.next += 1;
        self.next
    }

    /// Storage of `elems` 4-byte elements into slot `slot`, zeroed (`calloc`) or (`malloc`) for
    /// storage the next instruction overwrites whole; at least one element, so that a null
    /// pointer always means a failed allocation (`%oom`).
    fn alloc(&mut self, slot: usize, elems: u64, zeroed: bool) {
        let n = self.fresh();
        let elems = elems.max(1);
        let call = if zeroed {
            format!("call ptr @calloc(i64 {elems}, i64 4)")
        } else {
            format!("call ptr @malloc(i64 {})", elems * 4)
        };
        let _ = write!(
            self.out,
            "  %p{n} = {call}\n  store ptr %p{n}, ptr %s{slot}\n  \
             %z{n} = icmp eq ptr %p{n}, null\n  br i1 %z{n}, label %oom, label %b{n}\nb{n}:\n"
        );
    }

    /// Storage for slot `slot` holding a copy of the `elems` elements at `from`.
    fn alloc_copy(&mut self, slot: usize, from: &str, elems: u64) {
        self.alloc(slot, elems, false);
        let p = self.load(slot);
        self.copy(&p, from, elems);
    }

    fn load(&mut self, slot: usize) -> String {
        let n = self.fresh();
        let _ = writeln!(self.out, "  %v{n} = load ptr, ptr %s{slot}");
        format!("%v{n}")
    }

    fn copy(&mut self, to: &str, from: &str, elems: u64) {
        let _ = writeln!(
            self.out,
            "  call void @llvm.memcpy.p0.p0.i64(ptr {to}, ptr {from}, i64 {}, i1 false)",
            elems * 4
        );
    }

    fn free(&mut self, slot: usize) {
        let p = self.load(slot);
        let _ = writeln!(self.out, "  call void @free(ptr {p})\n  store ptr null, ptr %s{slot}");
    }

    /// A new operand table holding the pointers of `slots`, in order: its name.
    fn table(&mut self, slots: &[usize]) -> String {
        let n = self.fresh();
        let _ = writeln!(self.allocas, "  %tb{n} = alloca [{} x ptr]", slots.len().max(1));
        for (i, &s) in slots.iter().enumerate() {
            let p = self.load(s);
            let g = self.fresh();
            let _ = writeln!(
                self.out,
                "  %g{g} = getelementptr ptr, ptr %tb{n}, i64 {i}\n  store ptr {p}, ptr %g{g}"
            );
        }
        format!("%tb{n}")
    }

    /// A new temporary slot.
    fn temp(&mut self) -> usize {
        self.slots += 1;
        self.slots - 1
    }
}

impl Builder<'_> {
    /// The text of entry `e`'s function.
    fn entry(&mut self, e: &Entry) -> Result<String, Error> {
        let bad = |m: String| program_err(format!("entry `{}`: {m}", e.symbol));
        let mut body = Body {
            out: String::new(),
            globals: String::new(),
            allocas: String::new(),
            slots: e.slots.len(),
            next: 0,
        };
        for step in &e.steps {
            match step {
                Step::Alloc { slot } => {
                    let t = slot_type(e, *slot).map_err(bad)?;
                    body.alloc(*slot, t.elems(), true);
                }
                Step::Upload { slot, arg } => {
                    let t = slot_type(e, *slot).map_err(bad)?;
                    let a = e.args.get(*arg).ok_or_else(|| bad(format!("no argument {arg}")))?;
                    a.holds(t, "argument", "uploaded into").map_err(bad)?;
                    body.alloc_copy(*slot, &format!("%a{arg}"), t.elems());
                }
                Step::Constant { slot, bits } => {
                    let t = slot_type(e, *slot).map_err(bad)?;
                    if bits.len() as u64 != t.elems() {
                        return Err(bad(format!("{} constant elements for {t}", bits.len())));
                    }
                    let g = format!("@{}.c{}", e.symbol, body.fresh());
                    let words: Vec<String> =
                        bits.iter().map(|&b| format!("i32 {}", b as i32)).collect();
                    let _ = writeln!(
                        body.globals,
                        "{g} = private unnamed_addr constant [{} x i32] [{}]",
                        bits.len(),
                        words.join(", ")
                    );
                    body.alloc_copy(*slot, &g, t.elems());
                }
                Step::Download { slot, result } => {
                    let t = slot_type(e, *slot).map_err(bad)?;
                    let r =
                        e.results.get(*result).ok_or_else(|| bad(format!("no result {result}")))?;
                    r.holds(t, "result", "downloaded from").map_err(bad)?;
                    let p = body.load(*slot);
                    body.copy(&format!("%r{result}"), &p, t.elems());
                }
                Step::Free { slot } => body.free(*slot),
                Step::Launch { kernel, slots } => {
                    let types = slots
                        .iter()
                        .map(|&s| slot_type(e, s))
                        .collect::<Result<Vec<_>, _>>()
                        .map_err(bad)?;
                    self.launch(&mut body, kernel, &types, slots)?;
                }
            }
        }
        let params: Vec<String> = (0..e.args.len())
            .map(|a| format!("ptr noalias readonly %a{a}"))
            .chain((0..e.results.len()).map(|r| format!("ptr noalias %r{r}")))
            .collect();
        let mut f = format!(
            "{}\ndefine i32 @{}({}) {{\nentry:\n",
            body.globals,
            e.symbol,
            params.join(", ")
        );
        for s in 0..body.slots {
            let _ = writeln!(f, "  %s{s} = alloca ptr\n  store ptr null, ptr %s{s}");
        }
        f.push_str(&body.allocas);
        f.push_str("  %st = alloca i32\n  store i32 0, ptr %st\n  br label %b0\nb0:\n");
        f.push_str(&body.out);
        f.push_str("  br label %cleanup\noom:\n");
        let _ = write!(f, "  store i32 {NO_MEMORY}, ptr %st\n  br label %cleanup\ncleanup:\n");
        for s in 0..body.slots {
            let _ = writeln!(f, "  %f{s} = load ptr, ptr %s{s}\n  call void @free(ptr %f{s})");
        }
        f.push_str("  %status = load i32, ptr %st\n  ret i32 %status\n}\n");
        Ok(f)
    }

    /// The calls of one launch: an attention launch as its three steps over zeroed scratch, an
    /// ordinary one as a call of its compiled kernel.
    fn launch(
        &mut self,
        body: &mut Body,
        kernel: &Kernel,
        types: &[MemType],
        slots: &[usize],
    ) -> Result<(), Error> {
        if kernel.attention.is_some() {
            let parts = kernel.attention_parts().map_err(|e| Error::Kernel {
                kernel: kernel.name.clone(),
                message: e.to_string(),
            })?;
            let mut all: Vec<(usize, MemType)> =
                slots.iter().copied().zip(types.iter().copied()).collect();
            let scratch: Vec<usize> = parts
                .scratch
                .iter()
                .map(|t| {
                    let s = body.temp();
                    body.alloc(s, t.elems(), true);
                    s
                })
                .collect();
            all.extend(scratch.iter().copied().zip(parts.scratch.iter().copied()));
            for (sk, ops) in &parts.steps {
                let picked = ops
                    .iter()
                    .map(|&o| all.get(o).copied())
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| Error::Kernel {
                    kernel: kernel.name.clone(),
                    message: format!("step `{}` names a missing operand", sk.name),
                })?;
                let (s, t): (Vec<usize>, Vec<MemType>) = picked.into_iter().unzip();
                self.launch(body, sk, &t, &s)?;
            }
            for s in scratch {
                body.free(s);
            }
            return Ok(());
        }
        let threads = self.threads;
        let k = self.kernel(kernel, types)?;
        let (symbol, snapshot, scratch) = (k.symbol.clone(), k.snapshot, k.scratch);
        // The chunks of the split dimension whose writes are proven disjoint, as the JIT
        // plans them for this many threads.
        let chunks = match &k.split {
            Some(split) => split.chunks(threads, MIN_POINTS_PER_THREAD),
            None => vec![(0, i64::MAX)],
        };
        let out = slots.len() - 1;
        let out_elems = types[out].elems();
        let mut table = Vec::with_capacity(slots.len() + 2);
        let mut temps = Vec::new();
        // An input that is the output's own storage reads it as it was before the launch.
        let mut before: Option<usize> = None;
        let mut copy_of_output = |body: &mut Body, temps: &mut Vec<usize>| {
            *before.get_or_insert_with(|| {
                let s = body.temp();
                let from = body.load(slots[out]);
                body.alloc_copy(s, &from, out_elems);
                temps.push(s);
                s
            })
        };
        for &s in &slots[..out] {
            table.push(if s == slots[out] { copy_of_output(body, &mut temps) } else { s });
        }
        if snapshot {
            table.push(copy_of_output(body, &mut temps));
        }
        table.push(slots[out]);
        // One operand table per chunk, each with its own scratch array.
        let mut tables = Vec::with_capacity(chunks.len());
        for _ in &chunks {
            let mut t = table.clone();
            if let Some(n) = scratch {
                let s = body.temp();
                body.alloc(s, n, true);
                temps.push(s);
                t.push(s);
            }
            tables.push(body.table(&t));
        }
        let n = body.fresh();
        if let [(lo, hi)] = chunks[..] {
            let _ = writeln!(
                body.out,
                "  %rc{n} = call i32 @{symbol}(ptr {}, i64 {lo}, i64 {hi})",
                tables[0]
            );
        } else {
            self.threaded = true;
            let c = chunks.len();
            let _ = writeln!(body.allocas, "  %ch{n} = alloca [{c} x %fbc.chunk]");
            for (i, (&(lo, hi), t)) in chunks.iter().zip(&tables).enumerate() {
                // The fields: kernel, table, lo, hi (the thread, status and started flag are
                // written by `fbc_run_chunks`).
                let c = format!("%ch{n}.{i}");
                let _ = writeln!(body.out, "  {c} = getelementptr %fbc.chunk, ptr %ch{n}, i64 {i}");
                for (f, (ty, v)) in [
                    ("ptr", format!("@{symbol}")),
                    ("ptr", t.clone()),
                    ("i64", lo.to_string()),
                    ("i64", hi.to_string()),
                ]
                .into_iter()
                .enumerate()
                {
                    let _ = writeln!(
                        body.out,
                        "  {c}.f{f} = getelementptr %fbc.chunk, ptr {c}, i64 0, i32 {f}\n  \
                         store {ty} {v}, ptr {c}.f{f}"
                    );
                }
            }
            let _ = writeln!(body.out, "  %rc{n} = call i32 @fbc_run_chunks(ptr %ch{n}, i64 {c})");
        }
        let _ = write!(
            body.out,
            "  store i32 %rc{n}, ptr %st\n  %ok{n} = icmp eq i32 %rc{n}, 0\n  \
             br i1 %ok{n}, label %b{n}, label %cleanup\nb{n}:\n"
        );
        for s in temps {
            body.free(s);
        }
        Ok(())
    }

    /// The function of `kernel` on `types`, compiled the first time.
    fn kernel(&mut self, kernel: &Kernel, types: &[MemType]) -> Result<&KernelFn, Error> {
        let key = cache_key(kernel, types);
        if !self.kernels.contains_key(&key) {
            let p = Prepared::new(kernel, types, self.llvm.gemm)?;
            let n = self.kernels.len();
            let symbol = format!("fbc_kernel_{n}");
            let module = self.llvm.module(&p.kernel, &p.types, p.nest, &symbol)?;
            self.modules.push(module);
            let f = KernelFn {
                symbol,
                snapshot: p.snapshot,
                scratch: p.nest.scratch_len(),
                split: p.split(),
            };
            self.kernels.insert(key.clone(), (n, f));
        }
        Ok(&self.kernels[&key].1)
    }
}

/// The storage type of slot `s`.
fn slot_type(e: &Entry, s: usize) -> Result<MemType, String> {
    e.slots.get(s).copied().ok_or_else(|| format!("no storage slot {s}"))
}

/// What every host program calls.
const PRELUDE: &str = "declare noalias ptr @calloc(i64, i64)
declare noalias ptr @malloc(i64)
declare void @free(ptr)
declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)
";

/// Running the chunks of one launch on threads: `fbc_run_chunks(chunks, n)` runs chunk 0 on
/// the calling thread and the others on threads of their own (on the calling thread after it,
/// where a thread cannot be started), joins them and returns the first non-zero status in
/// chunk order, as the JIT does. A chunk: the kernel, its operand table, `lo`, `hi`, the
/// thread, the status, whether the thread started.
const THREADS: &str = "%fbc.chunk = type { ptr, ptr, i64, i64, i64, i32, i32 }
declare i32 @pthread_create(ptr, ptr, ptr, ptr)
declare i32 @pthread_join(i64, ptr)

define ptr @fbc_chunk_main(ptr %c) {
  %f = load ptr, ptr %c
  %tp = getelementptr %fbc.chunk, ptr %c, i64 0, i32 1
  %t = load ptr, ptr %tp
  %lop = getelementptr %fbc.chunk, ptr %c, i64 0, i32 2
  %lo = load i64, ptr %lop
  %hip = getelementptr %fbc.chunk, ptr %c, i64 0, i32 3
  %hi = load i64, ptr %hip
  %rc = call i32 %f(ptr %t, i64 %lo, i64 %hi)
  %rcp = getelementptr %fbc.chunk, ptr %c, i64 0, i32 5
  store i32 %rc, ptr %rcp
  ret ptr null
}

define i32 @fbc_run_chunks(ptr %cs, i64 %n) {
entry:
  br label %spawn
spawn:
  %i = phi i64 [ 1, %entry ], [ %i1, %spawn_body ]
  %more = icmp ult i64 %i, %n
  br i1 %more, label %spawn_body, label %run0
spawn_body:
  %c = getelementptr %fbc.chunk, ptr %cs, i64 %i
  %tid = getelementptr %fbc.chunk, ptr %c, i64 0, i32 4
  %e = call i32 @pthread_create(ptr %tid, ptr null, ptr @fbc_chunk_main, ptr %c)
  %ok = icmp eq i32 %e, 0
  %started = zext i1 %ok to i32
  %sp = getelementptr %fbc.chunk, ptr %c, i64 0, i32 6
  store i32 %started, ptr %sp
  %i1 = add i64 %i, 1
  br label %spawn
run0:
  %r0 = call ptr @fbc_chunk_main(ptr %cs)
  br label %join
join:
  %j = phi i64 [ 1, %run0 ], [ %j1, %joined ]
  %jm = icmp ult i64 %j, %n
  br i1 %jm, label %join_body, label %collect
join_body:
  %cj = getelementptr %fbc.chunk, ptr %cs, i64 %j
  %spj = getelementptr %fbc.chunk, ptr %cj, i64 0, i32 6
  %s = load i32, ptr %spj
  %was = icmp ne i32 %s, 0
  br i1 %was, label %do_join, label %do_inline
do_join:
  %tidp = getelementptr %fbc.chunk, ptr %cj, i64 0, i32 4
  %tidv = load i64, ptr %tidp
  %je = call i32 @pthread_join(i64 %tidv, ptr null)
  br label %joined
do_inline:
  %ri = call ptr @fbc_chunk_main(ptr %cj)
  br label %joined
joined:
  %j1 = add i64 %j, 1
  br label %join
collect:
  %k = phi i64 [ 0, %join ], [ %k1, %next ]
  %km = icmp ult i64 %k, %n
  br i1 %km, label %collect_body, label %done
collect_body:
  %ck = getelementptr %fbc.chunk, ptr %cs, i64 %k
  %rckp = getelementptr %fbc.chunk, ptr %ck, i64 0, i32 5
  %rck = load i32, ptr %rckp
  %nz = icmp ne i32 %rck, 0
  br i1 %nz, label %found, label %next
next:
  %k1 = add i64 %k, 1
  br label %collect
found:
  ret i32 %rck
done:
  ret i32 0
}
";

/// The C library functions the math functions call.
const MATH_DECLS: &str = "declare float @expf(float)
declare float @logf(float)
declare float @tanhf(float)
declare float @erff(float)
";

/// The math functions kernels call (`crate::cpu::math`'s names), by name: over the C library,
/// the sigmoid as the reference computes it (`1 / (1 + e^-x)` for `x ≥ 0`, else `e^x / (1 +
/// e^x)`), the `f16` rounding by `fptrunc` (to nearest even).
const MATH: [(&str, &str); 6] = [
    ("fbc_exp", "define float @fbc_exp(float %x) {\n  %r = call float @expf(float %x)\n  ret float %r\n}\n"),
    ("fbc_log", "define float @fbc_log(float %x) {\n  %r = call float @logf(float %x)\n  ret float %r\n}\n"),
    ("fbc_tanh", "define float @fbc_tanh(float %x) {\n  %r = call float @tanhf(float %x)\n  ret float %r\n}\n"),
    ("fbc_erf", "define float @fbc_erf(float %x) {\n  %r = call float @erff(float %x)\n  ret float %r\n}\n"),
    (
        "fbc_sigmoid",
        "define float @fbc_sigmoid(float %x) {
  %pos = fcmp oge float %x, 0.0
  %n = fneg float %x
  %a = select i1 %pos, float %n, float %x
  %e = call float @expf(float %a)
  %d = fadd float 1.0, %e
  %num = select i1 %pos, float 1.0, float %e
  %r = fdiv float %num, %d
  ret float %r
}
",
    ),
    (
        "fbc_round_f16",
        "define float @fbc_round_f16(float %x) {\n  %h = fptrunc float %x to half\n  %r = fpext half %h to float\n  ret float %r\n}\n",
    ),
];

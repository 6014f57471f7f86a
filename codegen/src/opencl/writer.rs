//! The OpenCL C writer: kernels, their index arithmetic, and the launch manifest.
//!
//! Every kernel is a straightforward gather: one work-item per output element (or per output row
//! for reductions and normalisations, or per 16×16 output tile for matmul), with the element's
//! multi-index decomposed from `get_global_id` by constant shapes and each operand read at its
//! broadcast, transposed, sliced or remapped offset. Shapes are static, so every size is a literal
//! in the source: the kernels read like the op they come from, and the OpenCL compiler folds the
//! arithmetic. Index arithmetic is in `long`, so tensors up to 2^63 elements index correctly.
//!
//! `layout.remap` maps are written as C integer expressions; `floordiv`, `ceildiv` and `mod` go
//! through `fbc_floordiv`/`fbc_ceildiv`/`fbc_mod`, which have MLIR's floor semantics for negative
//! operands too. (On the in-range indices a verified remap evaluates, operands are non-negative and
//! C's `/` and `%` would agree, but an intermediate like `d0 - 3` can be negative, so the helpers
//! keep the writer correct without a sign analysis.)

use std::collections::HashMap;
use std::fmt::Write as _;

use fbc_ir::attr::BinOp;
use fbc_ir::{AffineExpr, Attr, ElemType, FuncId, Module, Op, OpData, Type, Value};
use serde::{Deserialize, Serialize};

/// Version of the manifest format; the runtime refuses other versions.
pub const MANIFEST_VERSION: u32 = 1;

/// Work-group edge of the tiled matmul kernel (16×16 work-items, two 16×16 `__local` tiles).
const TILE: u64 = 16;

/// Work-group size the elementwise launches' global sizes are rounded up to.
const GROUP: u64 = 64;

/// How the writer is configured.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Only this function (without `@`); `None` writes every function of the module.
    pub function: Option<String>,
}

/// Why a module cannot be written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// An op (or an operand of it) the back end cannot lower yet.
    #[error("not yet supported: op {op} at {location}: {reason}")]
    Unsupported { op: String, location: String, reason: String },
    /// `Options::function` names no function of the module.
    #[error("no function `@{0}` in the module")]
    NoFunction(String),
}

/// One buffer of a function: a tensor value stored linearly (row-major f32).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BufferDesc {
    pub id: usize,
    /// The IR value's name (`q` for `%q`), or `tN` for unnamed values.
    pub name: String,
    pub dtype: String,
    pub shape: Vec<u64>,
    pub elems: u64,
    pub bytes: u64,
}

/// One kernel launch: `kernel(buffers[args[0]], buffers[args[1]], ...)` over `global`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Launch {
    pub kernel: String,
    /// The op it comes from (`tensor.matmul`) and its source location (`file:line:col`).
    pub op: String,
    pub location: String,
    /// Buffer ids, outputs first, in the kernel's parameter order.
    pub args: Vec<usize>,
    pub global: Vec<u64>,
    /// `None` lets the OpenCL implementation choose.
    pub local: Option<Vec<u64>>,
}

/// What the runtime needs to run one function.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionManifest {
    pub name: String,
    pub buffers: Vec<BufferDesc>,
    /// Buffer of each argument, in order.
    pub args: Vec<usize>,
    /// Buffer of each result, in order.
    pub results: Vec<usize>,
    /// Launches in execution order.
    pub launches: Vec<Launch>,
}

/// The launch manifest of one module.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub version: u32,
    pub module: String,
    /// The `.fbir` file the module was parsed from, if known.
    pub source: Option<String>,
    pub functions: Vec<FunctionManifest>,
}

impl Manifest {
    /// The manifest of function `name`.
    pub fn function(&self, name: &str) -> Option<&FunctionManifest> {
        let name = name.strip_prefix('@').unwrap_or(name);
        self.functions.iter().find(|f| f.name == name)
    }

    /// Pretty JSON, newline-terminated.
    pub fn to_json(&self) -> String {
        // Serialising plain structs of strings and integers cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_default() + "\n"
    }
}

/// The OpenCL C source and its manifest.
#[derive(Debug, Clone)]
pub struct Output {
    pub source: String,
    pub manifest: Manifest,
}

/// Writes OpenCL C for a module.
#[derive(Debug, Clone, Default)]
pub struct Writer {
    options: Options,
}

/// The helpers every source starts with.
const PRELUDE: &str = "\
// Floor division and modulo with MLIR affine-map semantics (rounding toward -inf).
inline long fbc_floordiv(long a, long b) { long q = a / b; return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q; }
inline long fbc_ceildiv(long a, long b) { return -fbc_floordiv(-a, b); }
inline long fbc_mod(long a, long b) { return a - fbc_floordiv(a, b) * b; }
";

impl Writer {
    pub fn new(options: Options) -> Writer {
        Writer { options }
    }

    /// Writes the module: every function (or `Options::function`) in module order.
    pub fn write(&self, module: &Module) -> Result<Output, Error> {
        let name = module.name.clone().unwrap_or_else(|| "module".into());
        let source_name = module.source.as_ref().map(|s| s.name.clone());
        let mut src = String::new();
        let _ = writeln!(src, "// OpenCL C generated by fbc for module @{name}");
        if let Some(s) = &source_name {
            let _ = writeln!(src, "// from {s}");
        }
        src.push_str("// Linear row-major f32 buffers; one kernel per op; see the .manifest.json for launches.\n\n");
        src.push_str(PRELUDE);
        let mut functions = Vec::new();
        let mut used = HashMap::new();
        let mut found = false;
        for f in module.func_ids() {
            let fname = &module.func(f).name;
            if let Some(want) = &self.options.function {
                if want.strip_prefix('@').unwrap_or(want) != fname {
                    continue;
                }
            }
            found = true;
            let mut fw = FuncWriter {
                module,
                func: f,
                src: &mut src,
                buffers: Vec::new(),
                of: HashMap::new(),
                launches: Vec::new(),
                used: &mut used,
            };
            functions.push(fw.write()?);
        }
        if let (Some(want), false) = (&self.options.function, found) {
            return Err(Error::NoFunction(want.clone()));
        }
        let manifest =
            Manifest { version: MANIFEST_VERSION, module: name, source: source_name, functions };
        Ok(Output { source: src, manifest })
    }
}

/// The state of writing one function.
struct FuncWriter<'a> {
    module: &'a Module,
    func: FuncId,
    src: &'a mut String,
    buffers: Vec<BufferDesc>,
    of: HashMap<Value, usize>,
    launches: Vec<Launch>,
    /// Kernel names taken so far in the module, to keep them unique.
    used: &'a mut HashMap<String, usize>,
}

/// Row-major strides of `shape`.
fn strides(shape: &[u64]) -> Vec<u64> {
    let mut s = vec![1u64; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

fn numel(shape: &[u64]) -> u64 {
    shape.iter().product()
}

/// `v` rounded up to a multiple of `m` (at least `m`).
fn round_up(v: u64, m: u64) -> u64 {
    v.div_ceil(m).max(1) * m
}

/// A float literal in OpenCL C.
fn flit(v: f64) -> String {
    let f = v as f32;
    if f.is_nan() {
        "NAN".into()
    } else if f.is_infinite() {
        if f > 0.0 {
            "INFINITY".into()
        } else {
            "(-INFINITY)".into()
        }
    } else {
        let s = format!("{f:?}");
        let s = if s.contains(['.', 'e']) { s } else { format!("{s}.0") };
        format!("{s}f")
    }
}

/// `const long i0 = (gid / S0) % D0; ...` for the multi-index `{p}0..` of `shape` from `lin`.
fn decompose(out: &mut String, p: &str, lin: &str, shape: &[u64]) {
    let st = strides(shape);
    for (k, (&d, &s)) in shape.iter().zip(&st).enumerate() {
        let e = match (k, s) {
            (0, 1) => lin.to_string(),
            (0, _) => format!("{lin} / {s}"),
            (_, 1) => format!("{lin} % {d}"),
            _ => format!("({lin} / {s}) % {d}"),
        };
        let _ = writeln!(out, "  const long {p}{k} = {e};");
    }
}

/// `Σ idx_k · stride_k` as C, skipping zero terms; `"0"` when empty.
fn offset(terms: &[(String, u64)]) -> String {
    let parts: Vec<String> = terms
        .iter()
        .filter(|(_, s)| *s != 0)
        .map(|(v, s)| if *s == 1 { v.clone() } else { format!("{v} * {s}") })
        .collect();
    if parts.is_empty() {
        "0".into()
    } else {
        parts.join(" + ")
    }
}

/// Offset into an operand of shape `xs` broadcast (NumPy, right-aligned) to the index `{p}k` of
/// `out`.
fn bcast_offset(p: &str, out: &[u64], xs: &[u64]) -> String {
    let st = strides(xs);
    let lead = out.len() - xs.len();
    let terms: Vec<(String, u64)> = xs
        .iter()
        .enumerate()
        .map(|(k, &d)| (format!("{p}{}", k + lead), if d == 1 { 0 } else { st[k] }))
        .collect();
    offset(&terms)
}

/// An index-map expression as C over the dimension variables `{p}k`.
fn map_expr(e: &AffineExpr, dims: &[String], p: &str) -> Option<String> {
    Some(match e {
        AffineExpr::Var(v) => format!("{p}{}", dims.iter().position(|d| d == v)?),
        AffineExpr::Const(c) => format!("{c}L"),
        AffineExpr::Neg(a) => format!("(-{})", map_expr(a, dims, p)?),
        AffineExpr::Bin(op, a, b) => {
            let (a, b) = (map_expr(a, dims, p)?, map_expr(b, dims, p)?);
            match op {
                BinOp::Add => format!("({a} + {b})"),
                BinOp::Sub => format!("({a} - {b})"),
                BinOp::Mul => format!("({a} * {b})"),
                BinOp::FloorDiv => format!("fbc_floordiv({a}, {b})"),
                BinOp::CeilDiv => format!("fbc_ceildiv({a}, {b})"),
                BinOp::Mod => format!("fbc_mod({a}, {b})"),
            }
        }
    })
}

/// A C identifier fragment from any name.
fn ident(s: &str) -> String {
    let mut o: String =
        s.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    if o.is_empty() || o.starts_with(|c: char| c.is_ascii_digit()) {
        o.insert(0, 'v');
    }
    o
}

impl FuncWriter<'_> {
    fn location(&self, op: &OpData) -> String {
        match &self.module.source {
            Some(file) if op.span.end > op.span.start => {
                let (l, c) = file.line_col(op.span.start);
                format!("{}:{l}:{c}", file.name)
            }
            _ => match &op.loc {
                Some(loc) => {
                    format!("{}:{}:{}", loc.file.as_deref().unwrap_or("?"), loc.line, loc.col)
                }
                None => "unknown".into(),
            },
        }
    }

    fn unsupported(&self, op: &OpData, reason: impl Into<String>) -> Error {
        Error::Unsupported {
            op: op.name().into(),
            location: self.location(op),
            reason: reason.into(),
        }
    }

    /// The f32 shape of `v`, or an error naming `op`.
    fn shape(&self, op: &OpData, v: Value) -> Result<Vec<u64>, Error> {
        match self.module.value_type(v) {
            Type::Tensor(t) if t.elem == ElemType::F32 => Ok(t.shape.to_vec()),
            Type::Tensor(t) => Err(self.unsupported(
                op,
                format!("element type {} (only f32 is generated so far)", t.elem.name()),
            )),
            t => Err(self.unsupported(op, format!("type {t}"))),
        }
    }

    fn new_buffer(&mut self, v: Value, shape: Vec<u64>) -> usize {
        let id = self.buffers.len();
        let name = self.module.value(v).name.as_deref().map_or(format!("t{id}"), str::to_string);
        let elems = numel(&shape);
        self.buffers.push(BufferDesc {
            id,
            name,
            dtype: "f32".into(),
            bytes: elems * 4,
            elems,
            shape,
        });
        self.of.insert(v, id);
        id
    }

    fn buf(&self, op: &OpData, v: Value) -> Result<usize, Error> {
        self.of.get(&v).copied().ok_or_else(|| self.unsupported(op, "operand has no buffer"))
    }

    fn write(&mut self) -> Result<FunctionManifest, Error> {
        let fd = self.module.func(self.func);
        let mut args = Vec::new();
        for &a in &fd.args {
            let shape = match self.module.value_type(a) {
                Type::Tensor(t) if t.elem == ElemType::F32 => t.shape.to_vec(),
                t => {
                    return Err(Error::Unsupported {
                        op: format!("func.func @{}", fd.name),
                        location: "argument".into(),
                        reason: format!("argument of type {t} (only f32 tensors so far)"),
                    })
                }
            };
            args.push(self.new_buffer(a, shape));
        }
        let mut results = Vec::new();
        for &op in &fd.body {
            let data = self.module.op(op);
            if data.name() == "func.return" {
                for &v in &data.operands {
                    results.push(self.buf(data, v)?);
                }
                continue;
            }
            self.op(op)?;
        }
        Ok(FunctionManifest {
            name: fd.name.clone(),
            buffers: std::mem::take(&mut self.buffers),
            args,
            results,
            launches: std::mem::take(&mut self.launches),
        })
    }

    /// A unique kernel name `{func}_{op}_{result name}`.
    fn kernel_name(&mut self, op: &OpData) -> String {
        let short = op.name().rsplit('.').next().unwrap_or("op");
        let res = op
            .results
            .first()
            .and_then(|&r| self.module.value(r).name.as_deref())
            .map_or(String::new(), |n| format!("_{n}"));
        let base = ident(&format!("{}_{short}{res}", self.module.func(self.func).name));
        let n = self.used.entry(base.clone()).or_insert(0);
        *n += 1;
        if *n == 1 {
            base
        } else {
            format!("{base}_{n}")
        }
    }

    /// Emits one kernel with the given parameters and body, and its launch.
    #[allow(clippy::too_many_arguments)]
    fn emit(
        &mut self,
        op: &OpData,
        params: &[(&str, usize, bool)],
        body: &str,
        global: Vec<u64>,
        local: Option<Vec<u64>>,
        attrs: &str,
    ) {
        let name = self.kernel_name(op);
        let location = self.location(op);
        let ps: Vec<String> = params
            .iter()
            .map(|(n, _, out)| {
                if *out {
                    format!("__global float* {n}")
                } else {
                    format!("__global const float* {n}")
                }
            })
            .collect();
        let _ = writeln!(self.src, "\n// {} at {location}", op.name());
        let _ = writeln!(self.src, "__kernel {attrs}void {name}({}) {{", ps.join(", "));
        self.src.push_str(body);
        self.src.push_str("}\n");
        if global.iter().all(|&g| g > 0) {
            self.launches.push(Launch {
                kernel: name,
                op: op.name().into(),
                location,
                args: params.iter().map(|p| p.1).collect(),
                global,
                local,
            });
        }
    }

    fn op(&mut self, op: Op) -> Result<(), Error> {
        let d = self.module.op(op);
        let name = d.name();
        if d.results.len() != 1 {
            return Err(self.unsupported(d, "ops with several results are not generated yet"));
        }
        let res = d.results[0];
        let out = self.shape(d, res)?;
        let n = numel(&out);
        match name {
            // Aliases: value-identical and, in linear storage, byte-identical.
            "tensor.reshape" | "layout.assign" | "layout.convert" => {
                let src = self.buf(d, d.operands[0])?;
                self.of.insert(res, src);
                Ok(())
            }
            "tensor.matmul" => self.matmul(d, out),
            "tensor.reduce_sum" | "tensor.reduce_max" | "tensor.reduce_mean" => self.reduce(d, out),
            "tensor.softmax" | "tensor.layernorm" | "tensor.rmsnorm" => self.row_op(d, out),
            _ => {
                let Some(expr) = self.gather_expr(d, &out)? else {
                    return Err(self.unsupported(d, "no OpenCL kernel for this op yet"));
                };
                let o = self.new_buffer(res, out.clone());
                let mut params = vec![("out", o, true)];
                let names = ["x0", "x1", "x2", "x3", "x4", "x5", "x6", "x7"];
                if d.operands.len() > names.len() {
                    return Err(self.unsupported(d, "more than 8 operands"));
                }
                for (k, &v) in d.operands.iter().enumerate() {
                    params.push((names[k], self.buf(d, v)?, false));
                }
                let mut body = String::new();
                let _ = writeln!(body, "  const long gid = get_global_id(0);");
                let _ = writeln!(body, "  if (gid >= {n}) return;");
                decompose(&mut body, "i", "gid", &out);
                body.push_str(&expr);
                self.emit(d, &params, &body, vec![round_up(n, GROUP)], None, "");
                Ok(())
            }
        }
    }

    /// The body (after the index decomposition `i0..`) of a one-work-item-per-element op, or
    /// `None` when the op has no such kernel.
    fn gather_expr(&self, d: &OpData, out: &[u64]) -> Result<Option<String>, Error> {
        let name = d.name();
        let mut ins = Vec::new();
        for &v in &d.operands {
            ins.push(self.shape(d, v)?);
        }
        let attr_f = |k: &str| d.attr(k).and_then(Attr::as_float);
        let attr_ints = |k: &str| d.attr(k).and_then(Attr::as_ints);
        // Elementwise: read every operand through broadcasting.
        let read = |k: usize| format!("x{k}[{}]", bcast_offset("i", out, &ins[k]));
        let unary =
            |e: &str| -> String { format!("  const float a = {};\n  out[gid] = {e};\n", read(0)) };
        let binary = |e: &str| -> String {
            format!(
                "  const float a = {};\n  const float b = {};\n  out[gid] = {e};\n",
                read(0),
                read(1)
            )
        };
        let sigmoid = "(a >= 0.0f ? 1.0f / (1.0f + exp(-a)) : exp(a) / (1.0f + exp(a)))";
        Ok(Some(match name {
            "tensor.constant" => {
                let v = attr_f("value").ok_or_else(|| self.unsupported(d, "no float `value`"))?;
                format!("  out[gid] = {};\n", flit(v))
            }
            "tensor.add" => binary("a + b"),
            "tensor.sub" => binary("a - b"),
            "tensor.mul" => binary("a * b"),
            "tensor.div" => binary("a / b"),
            // fmax/fmin drop NaN; the dialect propagates it.
            "tensor.max" => binary("(isnan(a) || isnan(b)) ? NAN : fmax(a, b)"),
            "tensor.min" => binary("(isnan(a) || isnan(b)) ? NAN : fmin(a, b)"),
            "tensor.ge" => binary("(a >= b) ? 1.0f : 0.0f"),
            "tensor.neg" => unary("-a"),
            "tensor.exp" => unary("exp(a)"),
            "tensor.log" => unary("log(a)"),
            "tensor.sqrt" => unary("sqrt(a)"),
            "tensor.rsqrt" => unary("1.0f / sqrt(a)"),
            "tensor.tanh" => unary("tanh(a)"),
            "tensor.sigmoid" => unary(sigmoid),
            "tensor.relu" => unary("(a > 0.0f || isnan(a)) ? a : 0.0f"),
            "tensor.silu" => unary(&format!("a * {sigmoid}")),
            "tensor.gelu" => match d.attr("approximate").and_then(Attr::as_str) {
                None | Some("none") => unary("0.5f * a * (1.0f + erf(a * 0.70710678118654752f))"),
                Some("tanh") => unary(
                    "0.5f * a * (1.0f + tanh(0.79788456080286536f * (a + 0.044715f * a * a * a)))",
                ),
                Some(o) => return Err(self.unsupported(d, format!("approximate = {o:?}"))),
            },
            "tensor.scale" => {
                let f = attr_f("factor").ok_or_else(|| self.unsupported(d, "no `factor`"))?;
                unary(&format!("a * {}", flit(f)))
            }
            "tensor.transpose" => {
                let perm = attr_ints("perm").ok_or_else(|| self.unsupported(d, "no `perm`"))?;
                let st = strides(&ins[0]);
                let mut terms = Vec::new();
                for (k, &p) in perm.iter().enumerate() {
                    let s = usize::try_from(p).ok().and_then(|p| st.get(p).copied());
                    let s = s.ok_or_else(|| self.unsupported(d, "bad `perm`"))?;
                    terms.push((format!("i{k}"), s));
                }
                format!("  out[gid] = x0[{}];\n", offset(&terms))
            }
            "tensor.broadcast" => format!("  out[gid] = {};\n", read(0)),
            "tensor.slice" => {
                let start = attr_ints("start").ok_or_else(|| self.unsupported(d, "no `start`"))?;
                let st = strides(&ins[0]);
                let mut terms = Vec::new();
                let mut base = 0u64;
                for (k, &s) in st.iter().enumerate() {
                    terms.push((format!("i{k}"), s));
                    base += u64::try_from(*start.get(k).unwrap_or(&0)).unwrap_or(0) * s;
                }
                format!("  out[gid] = x0[{base} + {}];\n", offset(&terms))
            }
            "tensor.concat" => {
                let rank = out.len() as i64;
                let axis = d.attr("axis").and_then(Attr::as_int).unwrap_or(0);
                let axis = if axis < 0 { axis + rank } else { axis };
                let axis = usize::try_from(axis).map_err(|_| self.unsupported(d, "bad `axis`"))?;
                let mut body = String::new();
                let mut at = 0u64;
                for (k, xs) in ins.iter().enumerate() {
                    let st = strides(xs);
                    let terms: Vec<(String, u64)> = st
                        .iter()
                        .enumerate()
                        .map(|(j, &s)| {
                            let v =
                                if j == axis { format!("(i{j} - {at})") } else { format!("i{j}") };
                            (v, s)
                        })
                        .collect();
                    let end = at + xs.get(axis).copied().unwrap_or(0);
                    let _ = writeln!(
                        body,
                        "  if (i{axis} < {end}) {{ out[gid] = x{k}[{}]; return; }}",
                        offset(&terms)
                    );
                    at = end;
                }
                body
            }
            "layout.remap" => {
                let Some(Attr::Map(map)) = d.attr("map") else {
                    return Err(self.unsupported(d, "no index `map`"));
                };
                let st = strides(&ins[0]);
                let mut terms = Vec::new();
                for (k, e) in map.results.iter().enumerate() {
                    let c = map_expr(e, &map.dims, "i")
                        .ok_or_else(|| self.unsupported(d, "map uses an unknown variable"))?;
                    terms.push((c, st.get(k).copied().unwrap_or(0)));
                }
                let mut body = String::new();
                let _ = writeln!(body, "  // y[i] = x[map(i)], map = {map}");
                let _ = writeln!(body, "  out[gid] = x0[{}];", offset(&terms));
                body
            }
            _ => return Ok(None),
        }))
    }

    /// Tiled matmul: a 16×16 work-group computes a 16×16 output tile, staging tiles of A and B in
    /// `__local` memory; batch dimensions broadcast and go on the third global axis.
    fn matmul(&mut self, d: &OpData, out: Vec<u64>) -> Result<(), Error> {
        let (a, b) = (self.shape(d, d.operands[0])?, self.shape(d, d.operands[1])?);
        if a.len() < 2 || b.len() < 2 || out.len() < 2 {
            return Err(self.unsupported(d, "matmul operands of rank < 2"));
        }
        let ta = d.attr("transpose_a").and_then(Attr::as_bool).unwrap_or(false);
        let tb = d.attr("transpose_b").and_then(Attr::as_bool).unwrap_or(false);
        let (m, n) = (out[out.len() - 2], out[out.len() - 1]);
        let k = if ta { a[a.len() - 2] } else { a[a.len() - 1] };
        let batch = &out[..out.len() - 2];
        let nb = numel(batch);
        let ab = bcast_offset("bi", batch, &a[..a.len() - 2]);
        let bb = bcast_offset("bi", batch, &b[..b.len() - 2]);
        let a_idx = if ta { format!("ak * {m} + row") } else { format!("row * {k} + ak") };
        let b_idx = if tb { format!("col * {k} + bk") } else { format!("bk * {n} + col") };
        let mut body = String::new();
        let _ = writeln!(
            body,
            "  // [{m}x{k}] x [{k}x{n}], {nb} batch(es), transpose_a = {ta}, transpose_b = {tb}"
        );
        body.push_str(
            "  const long col = get_global_id(0), row = get_global_id(1), bz = get_global_id(2);\n",
        );
        body.push_str("  const int lc = get_local_id(0), lr = get_local_id(1);\n");
        let _ = writeln!(
            body,
            "  __local float As[{TILE}][{TILE}];\n  __local float Bs[{TILE}][{TILE}];"
        );
        decompose(&mut body, "bi", "bz", batch);
        let _ = writeln!(body, "  __global const float* A = x0 + ({ab}) * {};", m * k);
        let _ = writeln!(body, "  __global const float* B = x1 + ({bb}) * {};", k * n);
        let _ = writeln!(body, "  float acc = 0.0f;");
        let _ = writeln!(body, "  for (long t = 0; t < {k}; t += {TILE}) {{");
        let _ = writeln!(body, "    const long ak = t + lc, bk = t + lr;");
        let _ = writeln!(body, "    As[lr][lc] = (row < {m} && ak < {k}) ? A[{a_idx}] : 0.0f;");
        let _ = writeln!(body, "    Bs[lr][lc] = (bk < {k} && col < {n}) ? B[{b_idx}] : 0.0f;");
        body.push_str("    barrier(CLK_LOCAL_MEM_FENCE);\n");
        let _ = writeln!(
            body,
            "    for (int kk = 0; kk < {TILE}; ++kk) acc += As[lr][kk] * Bs[kk][lc];"
        );
        body.push_str("    barrier(CLK_LOCAL_MEM_FENCE);\n  }\n");
        let _ = writeln!(
            body,
            "  if (row < {m} && col < {n}) out[bz * {} + row * {n} + col] = acc;",
            m * n
        );
        let o = self.new_buffer(d.results[0], out);
        let (x0, x1) = (self.buf(d, d.operands[0])?, self.buf(d, d.operands[1])?);
        let params = [("out", o, true), ("x0", x0, false), ("x1", x1, false)];
        let global = vec![round_up(n, TILE), round_up(m, TILE), nb];
        let attrs = format!("__attribute__((reqd_work_group_size({TILE}, {TILE}, 1))) ");
        self.emit(d, &params, &body, global, Some(vec![TILE, TILE, 1]), &attrs);
        Ok(())
    }

    /// `reduce_sum/max/mean`: one work-item per output element loops over the reduced elements in
    /// row-major order (the reference's summation order).
    fn reduce(&mut self, d: &OpData, out: Vec<u64>) -> Result<(), Error> {
        let x = self.shape(d, d.operands[0])?;
        let rank = x.len() as i64;
        let axes = d
            .attr("axes")
            .and_then(Attr::as_ints)
            .ok_or_else(|| self.unsupported(d, "no `axes`"))?;
        let mut red = vec![false; x.len()];
        for a in axes {
            let a = if a < 0 { a + rank } else { a };
            let a = usize::try_from(a).ok().filter(|&a| a < x.len());
            red[a.ok_or_else(|| self.unsupported(d, "bad `axes`"))?] = true;
        }
        let st = strides(&x);
        let kept: Vec<usize> = (0..x.len()).filter(|&i| !red[i]).collect();
        let rdims: Vec<usize> = (0..x.len()).filter(|&i| red[i]).collect();
        let kshape: Vec<u64> = kept.iter().map(|&i| x[i]).collect();
        let rshape: Vec<u64> = rdims.iter().map(|&i| x[i]).collect();
        let (n, r) = (numel(&out), numel(&rshape));
        let mut body = String::new();
        let _ = writeln!(body, "  const long gid = get_global_id(0);\n  if (gid >= {n}) return;");
        decompose(&mut body, "i", "gid", &kshape);
        let base: Vec<(String, u64)> =
            kept.iter().enumerate().map(|(j, &i)| (format!("i{j}"), st[i])).collect();
        let roff: Vec<(String, u64)> =
            rdims.iter().enumerate().map(|(j, &i)| (format!("r{j}"), st[i])).collect();
        let _ = writeln!(body, "  const long base = {};", offset(&base));
        let max = d.name() == "tensor.reduce_max";
        let _ = writeln!(body, "  float acc = {};", if max { "-INFINITY" } else { "0.0f" });
        let _ = writeln!(body, "  for (long r = 0; r < {r}; ++r) {{");
        let mut inner = String::new();
        decompose(&mut inner, "r", "r", &rshape);
        for l in inner.lines() {
            let _ = writeln!(body, "  {l}");
        }
        let _ = writeln!(body, "    const float v = x0[base + {}];", offset(&roff));
        if max {
            body.push_str("    acc = (isnan(v) || v > acc) ? v : acc;\n  }\n");
        } else {
            body.push_str("    acc += v;\n  }\n");
        }
        if d.name() == "tensor.reduce_mean" {
            let _ = writeln!(body, "  out[gid] = acc / {}.0f;", r);
        } else {
            body.push_str("  out[gid] = acc;\n");
        }
        let o = self.new_buffer(d.results[0], out);
        let x0 = self.buf(d, d.operands[0])?;
        self.emit(
            d,
            &[("out", o, true), ("x0", x0, false)],
            &body,
            vec![round_up(n, GROUP)],
            None,
            "",
        );
        Ok(())
    }

    /// Softmax, layernorm (along `axis`) and rmsnorm (last axis): one work-item per row.
    fn row_op(&mut self, d: &OpData, out: Vec<u64>) -> Result<(), Error> {
        let x = self.shape(d, d.operands[0])?;
        if x.is_empty() {
            return Err(self.unsupported(d, "rank-0 operand"));
        }
        let rank = x.len() as i64;
        let axis = if d.name() == "tensor.rmsnorm" {
            -1
        } else {
            d.attr("axis").and_then(Attr::as_int).unwrap_or(-1)
        };
        let axis = usize::try_from(if axis < 0 { axis + rank } else { axis })
            .ok()
            .filter(|&a| a < x.len())
            .ok_or_else(|| self.unsupported(d, "bad `axis`"))?;
        let len = x[axis];
        let inner: u64 = x[axis + 1..].iter().product();
        let rows = numel(&x) / len.max(1);
        let eps = flit(d.attr("eps").and_then(Attr::as_float).unwrap_or(1e-5));
        let mut body = String::new();
        let _ =
            writeln!(body, "  const long row = get_global_id(0);\n  if (row >= {rows}) return;");
        let _ = writeln!(
            body,
            "  const long base = (row / {inner}) * {} + row % {inner};",
            len * inner
        );
        let at = format!("base + j * {inner}");
        match d.name() {
            "tensor.softmax" => {
                let _ = writeln!(body, "  float m = -INFINITY;\n  for (long j = 0; j < {len}; ++j) {{ const float v = x0[{at}]; m = (isnan(v) || v > m) ? v : m; }}");
                let _ = writeln!(
                    body,
                    "  float s = 0.0f;\n  for (long j = 0; j < {len}; ++j) s += exp(x0[{at}] - m);"
                );
                let _ = writeln!(
                    body,
                    "  for (long j = 0; j < {len}; ++j) out[{at}] = exp(x0[{at}] - m) / s;"
                );
            }
            "tensor.layernorm" => {
                let _ = writeln!(body, "  float mu = 0.0f;\n  for (long j = 0; j < {len}; ++j) mu += x0[{at}];\n  mu /= {len}.0f;");
                let _ = writeln!(body, "  float var = 0.0f;\n  for (long j = 0; j < {len}; ++j) {{ const float c = x0[{at}] - mu; var += c * c; }}\n  var /= {len}.0f;");
                let _ = writeln!(body, "  const float sd = sqrt(var + {eps});");
                let _ = writeln!(body, "  for (long j = 0; j < {len}; ++j) out[{at}] = (x0[{at}] - mu) / sd * x1[j] + x2[j];");
            }
            _ => {
                let _ = writeln!(body, "  float ms = 0.0f;\n  for (long j = 0; j < {len}; ++j) ms += x0[{at}] * x0[{at}];\n  ms /= {len}.0f;");
                let _ = writeln!(body, "  const float rs = sqrt(ms + {eps});");
                let _ = writeln!(
                    body,
                    "  for (long j = 0; j < {len}; ++j) out[{at}] = x0[{at}] / rs * x1[j];"
                );
            }
        }
        let o = self.new_buffer(d.results[0], out);
        let mut params = vec![("out", o, true)];
        for (k, &v) in d.operands.iter().enumerate() {
            params.push((["x0", "x1", "x2"][k.min(2)], self.buf(d, v)?, false));
        }
        self.emit(d, &params, &body, vec![round_up(rows, GROUP)], None, "");
        Ok(())
    }
}

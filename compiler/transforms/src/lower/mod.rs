//! `lower-to-memory{target= fuse=true simplify=true half-images=false split-k=auto linear-io=false}`: tensor and
//! layout ops to memory-dialect kernel launches.
//!
//! Every function keeps its signature (tensor arguments and results); its body becomes
//! `memory.upload` of each argument that is read, `memory.alloc` of intermediate storage, one
//! `memory.launch` per tensor op or fused group (several for ops that need several passes over
//! their input), `memory.download` of the results and `func.return`.
//!
//! # Steps
//!
//! 1. `func.call`s are inlined (the autodiff inliner), so every function is one straight-line
//!    graph.
//! 2. **Storage** (`Lower::new_tensor`): every value that has storage gets a logical tensor
//!    (`Tensor`) with its physical layout: `fbc.arg_layouts[i]` for an argument, the op's
//!    `fbc.layout` for a result (`global-layout` sets it), else `#layout.linear`. An R-Tile whose
//!    rtile says `storage = "image2d"` and whose image fits the target's limits is an
//!    `!memory.image2d`; otherwise a buffer holding the same texel array.
//!    Views cost nothing: `layout.remap`, `tensor.transpose`, `tensor.broadcast`, `tensor.slice`
//!    and `tensor.reshape` of a non-linear tensor become an index map that consumers compose
//!    into their reads (`Access`); `tensor.reshape` of a linear tensor and `layout.assign`
//!    (when the layout is the one its operand is stored in) are aliases of the same storage.
//!    A view is materialised (a copy kernel) only where a reader cannot read through it: a
//!    returned value, the table of a gather.
//! 3. **Logical kernels** (`ops.rs`): each op becomes one or more `LKernel`s whose operand
//!    maps go from the iteration domain to the operand's *logical* index.
//! 4. **Fusion** (`fusion.rs`, option `fuse`): elementwise producers whose result one kernel
//!    reads are substituted into that kernel; elementwise consumers of a reduction (matmul,
//!    reductions, normalisation statistics) become its `epilogue`.
//! 5. **Split-K** (`split_k.rs`, option `split-k`): a contraction whose output is too small to
//!    fill the device sums chunks of its reduction in parallel into a scratch tensor, then adds
//!    the chunks' partial sums (with the epilogue) in a second launch.
//! 6. **Storage maps** (`storage.rs`): each logical map is composed with its operand's physical
//!    map (linear offset, or the R-Tile texel formulas of `dialects/src/layout/attr.rs` as
//!    `floordiv`/`mod` maps); a kernel writing an image iterates over the image's texels
//!    `(y, x, c)` and reads its inputs through the inverse map, guarded against padding. The
//!    maps are simplified with the egg rules of `fbc-index`.
//!
//! With `linear-io=true` the host boundary is row-major: an argument stored in an R-Tile is
//! uploaded as a linear buffer and placed in its layout by a copy kernel (`place`), and a result
//! stored otherwise is copied into a linear buffer before its download, so `memory.upload` and
//! `memory.download` only ever copy whole arrays (what ahead-of-time code does with the caller's
//! pointers). Counted by the statistic `linear-io-copies`.
//!
//! With `half-images=true` every image2d storage (of an `f32` tensor: images hold nothing else) is
//! an `!memory.image2d<[W, H], f16>`: half the bytes, values rounded to `f16` at every store,
//! arithmetic still `f32`. It needs only image support (`CL_RGBA`/`CL_HALF_FLOAT` is in OpenCL
//! 1.2's list of formats every image-capable device supports, and `read_imagef`/`write_imagef`
//! convert without `cl_khr_fp16`), so it is refused only for a target whose profile has no images.
//!
//! Statistics: `launches`, `fused-ops`, `copies` (materialised views), `converts`
//! (`layout.convert` kernels), `images`, `half-images` (images of `f16`), `image-fallbacks`,
//! `divmod-before` / `divmod-after` (div/mod operations in all launch maps before and after
//! simplification), `split-dims` (launch dimensions split where maps read them through
//! `floordiv`/`mod`, see `storage::Mapper::split_dims`), `split-k` (contractions split into
//! partial sums and their sum), `linear-io-copies` (`linear-io=true`'s placing copies).

mod fusion;
mod identity;
mod ops;
mod split_k;
mod storage;

pub use split_k::{ProductShape, SplitK};

use std::collections::HashMap;

use fbc_dialects::kind::{FuncOp, LayoutOp, MemoryOp};
use fbc_dialects::layout::{Layout, Storage};
use fbc_dialects::memory::{Attention, Combine, Kernel, MemType, Scalar, Stat, Symbol};
use fbc_index::Expr;
use fbc_ir::pass::{OptionKind, OptionSpec, PassInfo, PassRegistry};
use fbc_ir::{
    Attr, Diagnostic, ElemType, FuncId, Module, Op, OpDef, PassContext, Span, TensorType, Value,
};
use fbc_target::HardwareProfile;

use crate::target::{PassResult, TargetOption};

/// The pass's registered name.
pub const NAME: &str = "lower-to-memory";

/// Registers `lower-to-memory`.
pub fn register(r: &mut PassRegistry) {
    r.register(PassInfo::new(
        NAME,
        "lower tensor and layout ops to memory-dialect storage and kernel launches",
        vec![
            TargetOption::spec("for image limits "),
            OptionSpec::new("fuse", OptionKind::Bool, Some("true"), "fuse elementwise ops"),
            OptionSpec::new(
                "simplify",
                OptionKind::Bool,
                Some("true"),
                "simplify launch maps with the egg rules",
            ),
            OptionSpec::new(
                "half-images",
                OptionKind::Bool,
                Some("false"),
                "store image2d textures as f16 (values rounded to f16, computed in f32)",
            ),
            OptionSpec::new(
                "split-k",
                OptionKind::Str,
                Some("auto"),
                "split the reduction of skinny contractions into parallel chunks: auto, off or N",
            ),
            OptionSpec::new(
                "linear-io",
                OptionKind::Bool,
                Some("false"),
                "upload arguments and download results as row-major buffers; kernels place them \
                 in their layouts (for hosts that pass plain arrays: ahead-of-time code)",
            ),
        ],
        |o| {
            Ok(Box::new(LowerToMemory {
                target: TargetOption::from_options(o)?,
                fuse: o.bool("fuse"),
                simplify: o.bool("simplify"),
                half_images: o.bool("half-images"),
                split_k: SplitK::parse(o.str("split-k").unwrap_or("auto"))?,
                linear_io: o.bool("linear-io"),
            }))
        },
    ));
}

/// The `lower-to-memory` pass.
#[derive(Debug, Clone)]
pub struct LowerToMemory {
    /// The `target` option: a builtin profile, else the pipeline's.
    pub target: TargetOption,
    /// Fuse elementwise chains and epilogues.
    pub fuse: bool,
    /// Simplify launch maps with egg.
    pub simplify: bool,
    /// Store every image2d texture as `f16`.
    pub half_images: bool,
    /// When contractions split their reduction into parallel chunks.
    pub split_k: SplitK,
    /// Arguments uploaded and results downloaded as row-major buffers; kernels place them in
    /// their layouts.
    pub linear_io: bool,
}

crate::target::profile_pass!(LowerToMemory, NAME);

impl LowerToMemory {
    fn run_for(
        &self,
        m: &mut Module,
        cx: &mut PassContext<'_>,
        profile: &HardwareProfile,
    ) -> PassResult {
        if self.half_images && !profile.image.supported {
            return Err(vec![Diagnostic::error(format!(
                "{NAME}: half-images=true, but target `{}` has no image support, so no f16 image \
                 storage",
                profile.name
            ))
            .with_note(
                "f16 textures are CL_RGBA/CL_HALF_FLOAT image2d objects; drop half-images or \
                 compile for a target whose profile says `image.supported = true`",
            )]);
        }
        let defs = Defs::new(cx)?;
        let funcs: Vec<FuncId> = m.func_ids().collect();
        for &f in &funcs {
            inline_calls(m, f).map_err(|d| vec![d])?;
        }
        let mut names = Names::default();
        let mut stats = Stats::default();
        let mut memo = storage::MapMemo::default();
        let mut errors = Vec::new();
        for &f in &funcs {
            // Already lowered (the pass ran before): nothing to do.
            if m.func(f).body.iter().any(|&op| m.op(op).def.dialect() == "memory") {
                continue;
            }
            let lowered = Lower::new(m, f, profile, self.fuse, self.half_images, self.linear_io)
                .and_then(|mut l| {
                    l.lower_body()?;
                    l.finish(&mut names, self.simplify, self.split_k, &mut stats, &mut memo)
                });
            match lowered {
                Ok(plan) => emit(m, f, &defs, &plan),
                Err(d) => errors.push(d),
            }
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        for (k, v) in [
            ("launches", stats.launches),
            ("fused-ops", stats.fused),
            ("copies", stats.copies),
            ("converts", stats.converts),
            ("images", stats.images),
            ("half-images", stats.half_images),
            ("image-fallbacks", stats.image_fallbacks),
            ("divmod-before", stats.divmod_before),
            ("divmod-after", stats.divmod_after),
            ("split-dims", stats.split_dims),
            ("identity-copies", stats.identity_copies),
            ("split-k", stats.split_k),
            ("linear-io-copies", stats.io_copies),
        ] {
            cx.stats.add(NAME, k, v as i64);
        }
        Ok(())
    }
}

/// Counters of one run.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub launches: usize,
    pub fused: usize,
    pub copies: usize,
    pub converts: usize,
    pub images: usize,
    /// Images of `f16` (`half-images=true`).
    pub half_images: usize,
    /// R-Tiles whose layout asks for an image2d the target cannot hold: stored as a buffer.
    pub image_fallbacks: usize,
    pub divmod_before: usize,
    pub divmod_after: usize,
    /// Launch dimensions split in two because maps read them through `floordiv`/`mod`.
    pub split_dims: usize,
    /// Copies dropped because input and output storage place every element alike.
    pub identity_copies: usize,
    /// Contractions split into partial sums over chunks of their reduction.
    pub split_k: usize,
    /// Kernels placing arguments in their layouts, or results in row-major buffers
    /// (`linear-io=true`).
    pub io_copies: usize,
}

/// The memory ops' definitions.
struct Defs {
    alloc: &'static OpDef,
    upload: &'static OpDef,
    download: &'static OpDef,
    launch: &'static OpDef,
    ret: &'static OpDef,
}

impl Defs {
    fn new(cx: &PassContext<'_>) -> Result<Defs, Vec<Diagnostic>> {
        let get = |name: &str| {
            cx.registry.get(name).ok_or_else(|| {
                vec![Diagnostic::error(format!("{NAME}: op `{name}` is not registered"))
                    .with_note("the memory dialect must be in the op registry")]
            })
        };
        Ok(Defs {
            alloc: get(MemoryOp::Alloc.name())?,
            upload: get(MemoryOp::Upload.name())?,
            download: get(MemoryOp::Download.name())?,
            launch: get(MemoryOp::Launch.name())?,
            ret: get(FuncOp::Return.name())?,
        })
    }
}

/// Replaces every `func.call` in `f` by the callee's body (recursively).
fn inline_calls(m: &mut Module, f: FuncId) -> Result<(), Diagnostic> {
    let body = m.func(f).body.clone();
    if !body.iter().any(|&op| FuncOp::Call.is(m.op(op))) {
        return Ok(());
    }
    if let Some(callee) = recursive_call(m, f, &mut Vec::new()) {
        let span = m.func(f).name_span;
        return Err(located(span, format!("cannot inline the recursive call to @{callee}"))
            .with_note("lower-to-memory inlines every call, so the call graph must be acyclic"));
    }
    let args = m.func(f).args.clone();
    let mut stack = Vec::new();
    let returned = crate::autodiff::inline::inline_body(m, f, f, &args, &mut stack)?;
    let ret_span = body.last().map_or(Span::default(), |&op| m.op(op).span);
    let ret_def = m.op(*body.last().ok_or_else(|| Diagnostic::error("empty function"))?).def;
    // The copies follow the originals: drop the originals (uses and ops in bulk).
    m.erase_ops(&body);
    m.append_op(f, ret_def, &returned, Vec::new(), Vec::new(), ret_span);
    Ok(())
}

/// A callee reached again from inside itself, following `func.call`s from `f`.
fn recursive_call(m: &Module, f: FuncId, stack: &mut Vec<FuncId>) -> Option<String> {
    if stack.contains(&f) {
        return Some(m.func(f).name.clone());
    }
    stack.push(f);
    for &op in &m.func(f).body {
        let d = m.op(op);
        if !FuncOp::Call.is(d) {
            continue;
        }
        let Some(Attr::Symbol(callee)) = d.attr("callee") else { continue };
        if let Some(g) = m.find_func(callee) {
            if let Some(r) = recursive_call(m, g, stack) {
                return Some(r);
            }
        }
    }
    stack.pop();
    None
}

/// Unique kernel names in a module.
#[derive(Debug, Default)]
pub(crate) struct Names {
    used: HashMap<String, usize>,
}

impl Names {
    fn unique(&mut self, base: &str) -> String {
        let n = self.used.entry(base.to_string()).or_insert(0);
        *n += 1;
        if *n == 1 {
            base.to_string()
        } else {
            let name = format!("{base}_{n}");
            // A name like `f_exp_y_2` may itself be taken by a value called `y_2`.
            if self.used.contains_key(&name) {
                return self.unique(&name);
            }
            self.used.insert(name.clone(), 1);
            name
        }
    }
}

// ----- logical tensors, storage, accesses -----

/// Index of a logical tensor of the function being lowered.
pub(crate) type Tid = usize;
/// Index of a storage object.
pub(crate) type Sid = usize;

/// An index map as expressions over the domain dimensions `d0, d1, ...`.
pub(crate) type Map = Vec<Expr>;

pub(crate) fn dim(k: usize) -> Expr {
    Expr::dim(k)
}

pub(crate) fn identity(rank: usize) -> Map {
    (0..rank).map(dim).collect()
}

/// Substitutes `d_k := with[k]` in every expression of `map` (simultaneously).
pub(crate) fn compose(map: &[Expr], with: &[Expr]) -> Map {
    // Exact shortcuts for the common case of elementwise chains: an identity `map` selects
    // `with`, and an identity `with` leaves `map` as it is.
    if map.len() <= with.len() && is_identity(map) {
        return with[..map.len()].to_vec();
    }
    if is_identity(with) {
        return map.to_vec();
    }
    let subst: HashMap<String, Expr> =
        with.iter().enumerate().map(|(k, e)| (fbc_index::dim_name(k), e.clone())).collect();
    map.iter().map(|e| e.substitute_all(&subst)).collect()
}

/// Whether `map` is `(d0, d1, ...)`.
pub(crate) fn is_identity(map: &[Expr]) -> bool {
    map.iter().enumerate().all(|(k, e)| {
        matches!(e, Expr::Var(v) if v.strip_prefix('d').is_some_and(|n| {
            n.parse::<usize>() == Ok(k) && (n.len() == 1 || !n.starts_with('0'))
        }))
    })
}

/// A tensor with storage: a value computed by kernels, an argument, or a temporary of a
/// multi-pass op. Several tensors (a linear tensor and its reshapes) may share one storage.
#[derive(Debug, Clone)]
pub(crate) struct Tensor {
    pub shape: Vec<u64>,
    pub elem: ElemType,
    pub storage: Sid,
}

/// Where a tensor's elements live.
#[derive(Debug, Clone)]
pub(crate) struct StorageObj {
    /// The layout, R-Tile `storage` already fitted to the target.
    pub layout: Layout,
    /// The logical shape the layout places (the first tensor of the storage).
    pub shape: Vec<u64>,
    pub ty: MemType,
    /// Name for printing (`%q`).
    pub name: String,
    /// Argument index when the storage is an uploaded argument.
    pub arg: Option<usize>,
    /// The argument's rows it holds (`[start, count]`, axis 0), when only those.
    pub rows: Option<[u64; 2]>,
    /// The dense `tensor.constant` whose elements the storage is uploaded with.
    pub constant: Option<Op>,
}

impl StorageObj {
    /// Whether an upload fills the storage (an argument's or a dense constant's).
    pub(crate) fn uploaded(&self) -> bool {
        self.arg.is_some() || self.constant.is_some()
    }
}

/// How a value is read: tensor `t` through `map` (value index → `t` index; `None`: identity).
#[derive(Debug, Clone)]
pub(crate) struct Access {
    pub t: Tid,
    pub map: Option<Map>,
    /// The ops whose views `map` composes (`tensor.transpose`, `layout.remap`, ...).
    pub via: Vec<&'static str>,
}

/// How each value of the function is read, by value index (a dense table: every op result
/// gets one).
#[derive(Debug)]
pub(crate) struct Accesses(Vec<Option<Access>>);

impl Accesses {
    pub(crate) fn get(&self, v: &Value) -> Option<&Access> {
        self.0.get(v.index()).and_then(Option::as_ref)
    }

    pub(crate) fn insert(&mut self, v: Value, a: Access) {
        if self.0.len() <= v.index() {
            self.0.resize(v.index() + 1, None);
        }
        self.0[v.index()] = Some(a);
    }
}

/// One operand of a logical kernel: a tensor read (or written) at `map` (domain → tensor index).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Operand {
    pub t: Tid,
    pub map: Map,
    /// Read through [`Scalar::Load`] at computed linear offsets (a gather): the tensor must stay
    /// a linear buffer and cannot be fused away.
    pub gather: bool,
}

/// A launch before storage mapping: maps go to logical tensor indices.
#[derive(Debug, Clone)]
pub(crate) struct LKernel {
    /// Short name of the op the kernel is named after (`matmul`).
    pub op: String,
    /// Name of the value it computes (`q`), plus a suffix for the passes of multi-pass ops.
    pub result: String,
    pub source: Vec<&'static str>,
    /// Appended to the first source op in the launch's `source` (`[split-k 8]`); usually empty.
    pub note: String,
    pub domain: Vec<u64>,
    /// Parallel dimensions (the first ones); the rest are reductions.
    pub n_par: usize,
    pub inputs: Vec<Operand>,
    pub out: Operand,
    pub body: Scalar,
    pub combine: Option<Combine>,
    pub epilogue: Option<Scalar>,
    /// A row kernel's statistics (see `fbc_dialects::memory::kernel`): then the dimensions after
    /// `n_par` are row dimensions, not reductions, and `combine` and `epilogue` are `None`. With
    /// a `combine`, a reduction's statistics, which its epilogue reads (a normalisation fused
    /// in front of a product: `fusion::fuse_prologues`).
    pub stats: Vec<Stat>,
    /// The symbols of the maps (`Expr::Var("s0")`, ...): element 0 of input `operand`, in its
    /// range (see `fbc_dialects::memory::Symbol`).
    pub symbols: Vec<Symbol>,
    /// An attention launch (`tensor.attention`): its parameters, the `causal` map's one result
    /// over the logical domain and symbols in `last.results`; `body` is unused and the last
    /// dimension is the keys'.
    pub attention: Option<Attention>,
    /// The `split_k` hint of the launch (see `split_k.rs`): a contraction the skinny kernel
    /// splits in one launch.
    pub split: Option<u64>,
    /// A decode of packed weights (`tensor.dequantize`): fusion inlines it into its reader even
    /// where the reader reads each element several times (a matmul's `b`, once per row of
    /// `a`), since a few integer operations per read cost less than storing the f32 weight
    /// and reading it back, and the point of packed weights is that the f32 copy never exists.
    pub decode: bool,
    /// Span of the op it came from.
    pub span: Span,
}

impl LKernel {
    /// Whether it is a row kernel: statistics, and row dimensions after the parallel ones.
    pub(crate) fn is_row(&self) -> bool {
        !self.stats.is_empty() && self.combine.is_none()
    }
}

/// The name of map symbol `j` in a logical kernel's maps (`s0`, `s1`, ...).
pub(crate) fn symbol(j: usize) -> Expr {
    Expr::Var(format!("s{j}"))
}

/// A lowered function before it is written back: storage, kernels in launch order, results.
pub(crate) struct Plan {
    pub storages: Vec<StorageObj>,
    pub launches: Vec<(Kernel, Vec<Sid>, Span)>,
    /// Per function result: the storage and the tensor (shape and layout) to download.
    pub results: Vec<(Sid, Layout)>,
}

/// Lowering state of one function.
pub(crate) struct Lower<'m> {
    pub m: &'m Module,
    pub f: FuncId,
    pub fname: String,
    pub profile: &'m HardwareProfile,
    pub fuse: bool,
    /// Images get `f16` texels.
    pub half_images: bool,
    /// Arguments and results cross the host boundary as row-major buffers.
    pub linear_io: bool,
    /// Kernels placing arguments in their layouts and results in row-major buffers
    /// (`linear_io`).
    pub io_copies: usize,
    pub tensors: Vec<Tensor>,
    pub storages: Vec<StorageObj>,
    pub access: Accesses,
    pub kernels: Vec<LKernel>,
    /// Tensors the function returns (never fused away).
    pub pinned: Vec<Tid>,
    pub results: Vec<Tid>,
    pub copies: usize,
    pub converts: usize,
    /// R-Tiles stored as texel arrays in buffers because their image exceeds the target.
    pub image_fallbacks: usize,
    /// The row maximum and the row sum of `exp(x - max)` computed into temporaries, by the
    /// logits they were computed of: cross-entropy and its gradient over the same logits share
    /// them.
    pub exp_stats: HashMap<Value, (Tid, Tid)>,
}

pub(crate) fn located(span: Span, msg: impl Into<String>) -> Diagnostic {
    Diagnostic::error(format!("{NAME}: {}", msg.into())).at(span)
}

/// The value's printable name (`q` for `%q`), made an identifier.
pub(crate) fn value_name(m: &Module, v: Value) -> String {
    let raw = m.value(v).name.as_deref().map_or_else(|| format!("v{}", v.0), str::to_string);
    let s: String =
        raw.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect();
    if s.starts_with(|c: char| c.is_ascii_digit()) {
        format!("v{s}")
    } else {
        s
    }
}

fn layout_attr(a: Option<&Attr>) -> Option<Layout> {
    a.and_then(|a| Layout::from_attr(a).ok())
}

impl<'m> Lower<'m> {
    fn new(
        m: &'m Module,
        f: FuncId,
        profile: &'m HardwareProfile,
        fuse: bool,
        half_images: bool,
        linear_io: bool,
    ) -> Result<Lower<'m>, Diagnostic> {
        let mut l = Lower {
            m,
            f,
            fname: m.func(f).name.clone(),
            profile,
            fuse,
            half_images,
            linear_io,
            io_copies: 0,
            tensors: Vec::new(),
            storages: Vec::new(),
            access: Accesses(vec![None; m.values.len()]),
            kernels: Vec::new(),
            pinned: Vec::new(),
            results: Vec::new(),
            copies: 0,
            converts: 0,
            image_fallbacks: 0,
            exp_stats: HashMap::new(),
        };
        let fd = m.func(f);
        let arg_layouts: Vec<Attr> = fd
            .attr("fbc.arg_layouts")
            .and_then(Attr::as_array)
            .map(<[Attr]>::to_vec)
            .unwrap_or_default();
        for (i, &a) in fd.args.iter().enumerate() {
            let layout = layout_attr(arg_layouts.get(i)).unwrap_or(Layout::Linear);
            let linear =
                l.tensor_type(a).is_some_and(|t| matches!(l.fit(&layout, t), Layout::Linear));
            let uploaded = if linear_io { Layout::Linear } else { layout.clone() };
            let mut t = l.new_tensor(a, &uploaded, fd.span)?;
            l.storages[l.tensors[t].storage].arg = Some(i);
            if linear_io && !linear {
                // The host hands over a row-major array: a kernel places it in its layout.
                let name = value_name(m, a);
                let placed = l.new_tensor(a, &layout, fd.span)?;
                let rank = l.tensors[t].shape.len();
                let input = Operand { t, map: identity(rank), gather: false };
                l.push_copy(placed, input, "place", &name, LayoutOp::Convert.name(), fd.span);
                l.io_copies += 1;
                t = placed;
            }
            l.access.insert(a, Access { t, map: None, via: Vec::new() });
        }
        Ok(l)
    }

    pub(crate) fn tensor_type(&self, v: Value) -> Option<&'m TensorType> {
        self.m.value_type(v).as_tensor()
    }

    /// A new tensor with its own storage for value `v` in `layout` (fitted to the target).
    pub(crate) fn new_tensor(
        &mut self,
        v: Value,
        layout: &Layout,
        span: Span,
    ) -> Result<Tid, Diagnostic> {
        let t = self
            .tensor_type(v)
            .ok_or_else(|| {
                located(span, format!("expected a tensor, found {}", self.m.value_type(v)))
            })?
            .clone();
        let name = value_name(self.m, v);
        self.new_storage_tensor(&t, layout, name, span)
    }

    /// A new tensor of type `t` with its own storage.
    pub(crate) fn new_storage_tensor(
        &mut self,
        t: &TensorType,
        layout: &Layout,
        name: String,
        span: Span,
    ) -> Result<Tid, Diagnostic> {
        if !matches!(t.elem, ElemType::F32 | ElemType::I32 | ElemType::I8) {
            return Err(located(span, format!("memory holds f32, i32 or i8 tensors, found {t}")));
        }
        let fitted = self.fit(layout, t);
        if let (Layout::RTile(want), Layout::RTile(got)) = (layout, &fitted) {
            if want.storage == Storage::Image2d && got.storage == Storage::Buffer {
                self.image_fallbacks += 1;
            }
        }
        let layout = fitted;
        let ty = fbc_dialects::memory::ops::default_storage(&layout, t)
            .map_err(|e| located(span, format!("no storage for {t} in {layout}: {e}")))?;
        let ty = if self.half_images { ty.to_half_image() } else { ty };
        let s = self.storages.len();
        let shape = t.shape.to_vec();
        self.storages.push(StorageObj {
            layout,
            shape,
            ty,
            name,
            arg: None,
            rows: None,
            constant: None,
        });
        let id = self.tensors.len();
        self.tensors.push(Tensor { shape: t.shape.to_vec(), elem: t.elem, storage: s });
        Ok(id)
    }

    /// A linear temporary of `shape`.
    pub(crate) fn temp(
        &mut self,
        shape: &[u64],
        elem: ElemType,
        name: String,
        span: Span,
    ) -> Result<Tid, Diagnostic> {
        self.new_storage_tensor(&TensorType::new(shape.to_vec(), elem), &Layout::Linear, name, span)
    }

    /// The layout storage can have: R-Tiles only for f32 tensors of rank ≥ 2 (else linear), images
    /// only when the target supports them at this size (else the texel array in a buffer).
    pub(crate) fn fit(&self, layout: &Layout, t: &TensorType) -> Layout {
        let Layout::RTile(mut r) = *layout else { return Layout::Linear };
        if t.elem != ElemType::F32 || t.rank() < 2 || r.check_type(t).is_err() {
            return Layout::Linear;
        }
        if r.storage == Storage::Image2d {
            let p = &self.profile.image;
            let fits = r.image_extent(&t.shape).is_some_and(|[w, h]| {
                p.supported && w <= u64::from(p.max_width) && h <= u64::from(p.max_height)
            });
            if !fits {
                r.storage = Storage::Buffer;
            }
        }
        Layout::RTile(r)
    }

    pub(crate) fn layout_of_tensor(&self, t: Tid) -> &Layout {
        &self.storages[self.tensors[t].storage].layout
    }

    /// Whether `t` is a linear tensor owning its whole storage's shape (row-major offsets work).
    pub(crate) fn is_linear(&self, t: Tid) -> bool {
        matches!(self.layout_of_tensor(t), Layout::Linear)
    }

    /// How value `v` is read; an error (not a panic) for a value with no storage.
    pub(crate) fn access_of(&self, v: Value, span: Span) -> Result<Access, Diagnostic> {
        self.access.get(&v).cloned().ok_or_else(|| self.no_access(v, span))
    }

    fn no_access(&self, v: Value, span: Span) -> Diagnostic {
        located(span, format!("operand of type {} has no storage", self.m.value_type(v)))
    }

    /// The operand reading value `v` at `map` (domain → `v`'s index), through `v`'s views.
    pub(crate) fn read(&self, v: Value, map: Map, span: Span) -> Result<Operand, Diagnostic> {
        let Some(a) = self.access.get(&v) else { return Err(self.no_access(v, span)) };
        let map = match &a.map {
            None => map,
            Some(view) => compose(view, &map),
        };
        Ok(Operand { t: a.t, map, gather: false })
    }

    /// Reads `v` as a linear buffer at its own row-major offsets (gathers): materialises a copy
    /// when `v` is a view or stored otherwise.
    pub(crate) fn read_linear(&mut self, v: Value, span: Span) -> Result<Operand, Diagnostic> {
        let a = self.access_of(v, span)?;
        let t =
            if a.map.is_none() && self.is_linear(a.t) { a.t } else { self.materialize(v, span)? };
        Ok(Operand { t, map: Vec::new(), gather: true })
    }

    /// A linear copy of `v` (a kernel), for readers that cannot read through its view.
    pub(crate) fn materialize(&mut self, v: Value, span: Span) -> Result<Tid, Diagnostic> {
        let ty = self.tensor_type(v).ok_or_else(|| located(span, "not a tensor"))?.clone();
        let via = self.access_of(v, span)?.via;
        let source = via.last().copied().unwrap_or(LayoutOp::Assign.name());
        let name = value_name(self.m, v);
        let t = self.temp(&ty.shape, ty.elem, name.clone(), span)?;
        let rank = ty.rank();
        let input = self.read(v, identity(rank), span)?;
        self.copies += 1;
        self.push_copy(t, input, "copy", &name, source, span);
        if let Some(k) = self.kernels.last_mut() {
            k.source = if via.is_empty() { vec![source] } else { via };
        }
        Ok(t)
    }

    /// Appends an elementwise copy kernel writing all of tensor `out` from `input`.
    pub(crate) fn push_copy(
        &mut self,
        out: Tid,
        input: Operand,
        op: &str,
        result: &str,
        source: &'static str,
        span: Span,
    ) {
        let shape = self.tensors[out].shape.clone();
        let (domain, out_map) = domain_of(&shape);
        let input = Operand { map: if shape.is_empty() { Vec::new() } else { input.map }, ..input };
        self.kernels.push(LKernel {
            op: op.to_string(),
            result: result.to_string(),
            source: vec![source],
            note: String::new(),
            domain,
            n_par: shape.len().max(1),
            inputs: vec![input],
            out: Operand { t: out, map: out_map, gather: false },
            body: Scalar::In(0),
            combine: None,
            epilogue: None,
            stats: Vec::new(),
            symbols: Vec::new(),
            span,
            attention: None,
            split: None,
            decode: false,
        });
    }

    /// Whether `op` is the last op that uses value `v` (no later op reads it, and the function
    /// does not return it after): then the op may overwrite `v`'s storage.
    pub(crate) fn last_use(&self, v: Value, op: Op) -> bool {
        let at = |o: Op| self.m.func(self.f).body.iter().position(|&b| b == o);
        let Some(here) = at(op) else { return false };
        self.m.value(v).uses.iter().all(|u| u.op == op || at(u.op).is_some_and(|i| i < here))
    }

    /// Lowers every op of the body into logical kernels.
    fn lower_body(&mut self) -> Result<(), Diagnostic> {
        let body = self.m.func(self.f).body.clone();
        // Most ops make one kernel and one tensor: no regrowth of these vectors on large bodies.
        self.kernels.reserve(body.len());
        self.tensors.reserve(body.len());
        self.storages.reserve(body.len());
        for op in body {
            let d = self.m.op(op);
            if FuncOp::Return.is(d) {
                for &v in &d.operands.clone() {
                    let t = self.result_tensor(v, d.span)?;
                    self.pinned.push(t);
                    self.results.push(t);
                }
                continue;
            }
            self.lower_op(op)?;
        }
        Ok(())
    }

    /// The tensor to download for returned value `v`: its storage when it is stored as itself,
    /// else a linear copy.
    fn result_tensor(&mut self, v: Value, span: Span) -> Result<Tid, Diagnostic> {
        let a = self
            .access
            .get(&v)
            .cloned()
            .ok_or_else(|| located(span, "returned value has no storage"))?;
        let ty = self.tensor_type(v).ok_or_else(|| located(span, "returns a non-tensor"))?;
        let s = &self.storages[self.tensors[a.t].storage];
        let linear = matches!(s.layout, Layout::Linear);
        let own = a.map.is_none()
            && (s.shape == self.tensors[a.t].shape.as_slice() || linear)
            && self.tensors[a.t].shape == ty.shape.as_slice()
            && (linear || !self.linear_io);
        if own {
            Ok(a.t)
        } else {
            // The copy reads through the view: its faults are the view's (a `layout.remap`
            // reading outside its operand), so it is located at the op that made the view.
            let span = match (&a.map, self.m.defining_op(v)) {
                (Some(_), Some(op)) => self.m.op(op).span,
                _ => span,
            };
            if a.map.is_none() && self.linear_io {
                self.io_copies += 1;
            }
            self.materialize(v, span)
        }
    }

    /// Drops kernels whose storage nothing reads and the function does not return (dead tensor
    /// ops, and the parts of multi-pass ops whose result is unused).
    fn prune_dead(&mut self) {
        loop {
            let mut live = vec![false; self.storages.len()];
            for &t in &self.pinned {
                live[self.tensors[t].storage] = true;
            }
            for k in &self.kernels {
                for o in &k.inputs {
                    live[self.tensors[o.t].storage] = true;
                }
            }
            let before = self.kernels.len();
            let tensors = &self.tensors;
            self.kernels.retain(|k| live[tensors[k.out.t].storage]);
            if self.kernels.len() == before {
                break;
            }
        }
    }

    /// Fuses, orders, maps to storage and builds the final kernels.
    fn finish(
        mut self,
        names: &mut Names,
        simplify: bool,
        split_k: SplitK,
        stats: &mut Stats,
        memo: &mut storage::MapMemo,
    ) -> Result<Plan, Diagnostic> {
        self.prune_dead();
        if self.fuse {
            stats.fused += fusion::fuse(&mut self);
            stats.fused += fusion::fuse_prologues(&mut self);
        }
        let profile = self.profile;
        stats.split_k += split_k::split(&mut self, split_k, profile)?;
        storage::retarget_images(&mut self)?;
        let kernel_names: Vec<String> = self
            .kernels
            .iter()
            .map(|k| names.unique(&format!("{}_{}_{}", self.fname, k.op, k.result)))
            .collect();
        let shared = std::sync::Mutex::new(std::mem::take(memo));
        let (built, [divmod_before, divmod_after, split_dims]) =
            storage::build_all(&self, kernel_names, simplify, &shared);
        *memo = shared.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut launches = Vec::with_capacity(built.len());
        for (b, k) in built.into_iter().zip(&self.kernels) {
            let (kernel, sids) = b?;
            launches.push((kernel, sids, k.span));
        }
        let mut result_sids: Vec<Sid> =
            self.results.iter().map(|&t| self.tensors[t].storage).collect();
        stats.identity_copies +=
            identity::drop_identity_copies(&mut launches, &mut result_sids, &self.storages);
        stats.launches += launches.len();
        stats.copies += self.copies;
        stats.converts += self.converts;
        stats.io_copies += self.io_copies;
        stats.image_fallbacks += self.image_fallbacks;
        stats.divmod_before += divmod_before;
        stats.divmod_after += divmod_after;
        stats.split_dims += split_dims;
        stats.images += self.storages.iter().filter(|s| s.ty.is_image()).count();
        stats.half_images += self.storages.iter().filter(|s| s.ty.is_half()).count();
        // A result renamed to the storage it was an identity copy of keeps its own layout
        // (the two place every element alike).
        let results = self
            .results
            .iter()
            .zip(result_sids)
            .map(|(&t, s)| (s, self.storages[self.tensors[t].storage].layout.clone()))
            .collect();
        Ok(Plan { storages: self.storages, launches, results })
    }
}

/// The iteration domain of an elementwise kernel over `shape` and its identity output map
/// (rank 0: one point, `[1]`, and an empty index).
pub(crate) fn domain_of(shape: &[u64]) -> (Vec<u64>, Map) {
    if shape.is_empty() {
        (vec![1], Vec::new())
    } else {
        (shape.to_vec(), identity(shape.len()))
    }
}

/// Whether launch `b` may run beside launch `a` scheduled before it, as one launch of a back
/// end that merges them (the OpenCL writer's merged skinny products): both are contractions (no
/// attention) of one reduction and split over the same first operand, a *thin* one (at most
/// [`fbc_target::SKINNY_SIDE`] rows of the reduction: a decode step's normalised row), `a`
/// reads and writes nothing `b` writes, and `b` reads `a`'s output nowhere or only in its
/// epilogue at its own output point (`reads_at_point`). A decode step's Q, K and V projections
/// are such a run, and so are its up and gate projections (gate's `SiLU(acc) · up` reads up);
/// `emit` allocates their outputs before the first, so they stay next to each other.
fn siblings(plan: &Plan, a: &(Kernel, Vec<Sid>, Span), b: &(Kernel, Vec<Sid>, Span)) -> bool {
    let (ka, kb) = (&a.0, &b.0);
    let contraction = |k: &Kernel| k.combine.is_some() && k.attention.is_none();
    let red = |k: &Kernel| k.domain[k.parallel_dims()..].to_vec();
    let (Some(&xa), Some(&xb)) = (a.1.first(), b.1.first()) else { return false };
    let (Some(&out_a), Some(&out_b)) = (a.1.last(), b.1.last()) else { return false };
    let points: u64 = red(ka).iter().product();
    let thin = plan.storages[xa].ty.elems() <= fbc_target::SKINNY_SIDE * points;
    contraction(ka)
        && contraction(kb)
        && xa == xb
        && red(ka) == red(kb)
        && ka.split == kb.split
        && thin
        && !a.1.contains(&out_b)
        && reads_at_point(b, out_a, ka)
}

/// Whether launch `b` reads storage `s` (the output of launch `a`, of kernel `ka`) nowhere, or
/// only in its epilogue at its own output point over `a`'s domain and output map: a back end may
/// then run `b` in the same work-groups as `a`, after it.
fn reads_at_point(b: &(Kernel, Vec<Sid>, Span), s: Sid, ka: &Kernel) -> bool {
    let kb = &b.0;
    let same = kb.domain == ka.domain && ka.maps.last() == kb.maps.last();
    kb.read_at_output().iter().enumerate().all(|(i, &at)| b.1[i] != s || (at && same))
}

/// Writes the plan back as the body of `f`.
fn emit(m: &mut Module, f: FuncId, defs: &Defs, plan: &Plan) {
    let old = m.func(f).body.clone();
    let span = m.func(f).span;
    let args = m.func(f).args.clone();
    let result_types = m.func(f).result_types.clone();
    let mut mem: Vec<Option<Value>> = vec![None; plan.storages.len()];
    let mut body: Vec<Op> = Vec::new();
    let layout_kv = |l: &Layout| vec![("layout".to_string(), l.to_attr())];
    // Uploads of the arguments that are read, in argument order.
    let read: Vec<bool> = {
        let mut r = vec![false; plan.storages.len()];
        for (_, sids, _) in &plan.launches {
            for &s in sids {
                r[s] = true;
            }
        }
        for (s, _) in &plan.results {
            r[*s] = true;
        }
        r
    };
    let mut by_arg: Vec<(usize, Sid)> =
        plan.storages.iter().enumerate().filter_map(|(s, o)| o.arg.map(|a| (a, s))).collect();
    by_arg.sort_unstable();
    for (a, s) in by_arg {
        if !read[s] {
            continue;
        }
        let o = &plan.storages[s];
        let mut attrs = layout_kv(&o.layout);
        if let Some([start, count]) = o.rows {
            let ints = [start, count].map(|n| Attr::Int(i64::try_from(n).unwrap_or(i64::MAX)));
            attrs.push(("rows".to_string(), Attr::Array(ints.to_vec())));
        }
        let op = m.create_op(f, defs.upload, &[args[a]], attrs, vec![o.ty.to_type()], span);
        let v = m.op(op).results[0];
        m.set_value_name(v, format!("{}_m", o.name));
        mem[s] = Some(v);
        body.push(op);
    }
    // Dense constants: the host makes the tensor and uploads it like an argument.
    for (s, o) in plan.storages.iter().enumerate() {
        let Some(c) = o.constant.filter(|_| read[s]) else { continue };
        let d = m.op(c);
        let (def, span) = (d.def, d.span);
        let attrs: Vec<(String, Attr)> =
            d.attr("value").map(|v| ("value".to_string(), v.clone())).into_iter().collect();
        let ty = m.value_type(d.results[0]).clone();
        let name = value_name(m, d.results[0]);
        let op = m.create_op(f, def, &[], attrs, vec![ty], span);
        let t = m.op(op).results[0];
        m.set_value_name(t, name);
        body.push(op);
        let op =
            m.create_op(f, defs.upload, &[t], layout_kv(&o.layout), vec![o.ty.to_type()], span);
        let v = m.op(op).results[0];
        m.set_value_name(v, format!("{}_m", o.name));
        mem[s] = Some(v);
        body.push(op);
    }
    // A run of sibling launches (`siblings`): where the run's first launch sits in `body`,
    // and the run's launches.
    let mut run: Option<(usize, Vec<usize>)> = None;
    for (li, (kernel, sids, kspan)) in plan.launches.iter().enumerate() {
        let sibling = run.as_ref().is_some_and(|(_, members)| {
            members.iter().all(|&a| siblings(plan, &plan.launches[a], &plan.launches[li]))
        });
        if !sibling {
            run = None;
        }
        let mut operands = Vec::with_capacity(sids.len());
        for &s in sids {
            let v = match mem[s] {
                Some(v) => v,
                None => {
                    let o = &plan.storages[s];
                    let op =
                        m.create_op(f, defs.alloc, &[], Vec::new(), vec![o.ty.to_type()], *kspan);
                    let v = m.op(op).results[0];
                    m.set_value_name(v, format!("{}_m", o.name));
                    // A sibling's output is allocated before the run's first launch, so no
                    // storage of the run dies between its launches (and none of them shares
                    // a `plan-memory` slot with another).
                    match &mut run {
                        Some((at, _)) => {
                            body.insert(*at, op);
                            *at += 1;
                        }
                        None => body.push(op),
                    }
                    mem[s] = Some(v);
                    v
                }
            };
            operands.push(v);
        }
        let op = m.create_op(f, defs.launch, &operands, kernel.to_attrs(), Vec::new(), *kspan);
        body.push(op);
        match &mut run {
            Some((_, members)) => members.push(li),
            None => run = Some((body.len() - 1, vec![li])),
        }
    }
    let mut returned = Vec::new();
    for ((s, layout), ty) in plan.results.iter().zip(&result_types) {
        let src = match mem[*s] {
            Some(v) => v,
            None => {
                // A result no kernel writes (an empty tensor): fresh zero storage.
                let o = &plan.storages[*s];
                let op = m.create_op(f, defs.alloc, &[], Vec::new(), vec![o.ty.to_type()], span);
                body.push(op);
                let v = m.op(op).results[0];
                mem[*s] = Some(v);
                v
            }
        };
        let op = m.create_op(f, defs.download, &[src], layout_kv(layout), vec![ty.clone()], span);
        let v = m.op(op).results[0];
        m.set_value_name(v, plan.storages[*s].name.clone());
        returned.push(v);
        body.push(op);
    }
    let ret = m.create_op(f, defs.ret, &returned, Vec::new(), Vec::new(), span);
    body.push(ret);
    m.erase_ops(&old);
    m.func_mut(f).body = body;
}

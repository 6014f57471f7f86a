//! [`Kernel`]: what one `memory.launch` computes, as data every back end consumes.
//!
//! A launch is a `linalg.generic` on storage. It has an iteration `domain` of static extents,
//! parallel dimensions first, then reduction dimensions. Every operand (inputs, then the one
//! output, last) has an index map from the domain dimensions `(d0, ..., dn-1)` to its storage
//! coordinates: one result (the element offset) for a buffer, three (`x`, `y`, channel `c`) for an
//! image. For every point of the parallel sub-domain the launch computes
//!
//! ```text
//! if guard holds:   acc = combine over the reduction sub-domain of body(point)   (no reduction: acc = body(point))
//!                   out[map_out(point)] = epilogue(acc)                            (no epilogue: acc)
//! else:             out[map_out(point)] = 0
//! ```
//!
//! `body` is a [`Scalar`] expression over the operands read at their maps ([`Scalar::In`]), the
//! domain indices ([`Scalar::Dim`]) and explicit loads ([`Scalar::Load`]); `epilogue` may also
//! read [`Scalar::Acc`]. Reductions combine in domain order (row-major over the reduction dims),
//! which is the reference interpreter's summation order.
//!
//! A **row kernel** (softmax, the normalisations and their gradients in one launch) has row
//! dimensions instead of reduction dimensions (`iterators` `"row"`, after the parallel ones) and
//! a list of statistics (`stats`). For every point `p` of the parallel sub-domain it computes
//!
//! ```text
//! s_k = epilogue_k(combine_k over the row sub-domain of body_k(p, r))   for k = 0, 1, ...
//! for every row point r:  if guard holds: out[map_out(p, r)] = body(p, r)   else 0
//! ```
//!
//! `body_k` reads `s0..s(k-1)` (`Scalar::Stat`), `epilogue_k` reads `acc` and the earlier
//! statistics and, like an epilogue, only the parallel dimensions; the body reads every
//! statistic. The guard applies to the output points only: every row point takes part in
//! every statistic. Text form: `stats = ["max: x0", "add: exp(x0 - s0)"]`, an entry
//! `COMBINE: BODY` or `COMBINE: BODY; EPILOGUE`.
//!
//! A **reduction with statistics** has reduction dimensions and `stats` too: side reductions over
//! the same points as the body, which only epilogues read. At every parallel point `p`
//!
//! ```text
//! s_k = epilogue_k(combine_k over the reduction sub-domain of body_k(p, r))   for k = 0, 1, ...
//! acc = combine over the reduction sub-domain of body(p, r)
//! out[map_out(p)] = epilogue(acc)          (the epilogue reads s0, s1, ...)
//! ```
//!
//! Neither `body` nor `body_k` reads a statistic; `epilogue_k` reads `s0..s(k-1)`. A
//! normalisation fused in front of a contraction is one: `rmsnorm(x) · W` is
//! `rsqrt(mean(x²) + eps) · Σ_k x·γ·W`, the statistic `add: x0 * x0; rsqrt(acc / D + eps)` and
//! the epilogue `acc * s0` (`lower`'s prologue fusion).
//!
//! An image output can only be written a whole texel at a time, so a launch whose output is an
//! image has the channel as its last parallel dimension (a row kernel: its last dimension), of extent 4, and the output map's third
//! result is exactly that dimension: back ends compute the four channels of a texel in one
//! work-item and write them together. Padding of tiled layouts is where the `guard` fails.
//!
//! # Text form of `body` and `epilogue` (a string attribute)
//!
//! C-like expressions: `x0`..`xK` (operand K at its map), `x1[e]` (operand 1, a buffer, at the
//! element offset `e`), `d0`..`dN` (domain indices), `acc`, integer literals (`64`) and float
//! literals (`64.0`, `1.0e-5`, `inf`, `nan`), unary `-` and `!`, binary `* / %`, `+ -`,
//! `< <= > >= == !=`, `&&`, `||`, the calls `exp log sqrt rsqrt tanh erf sigmoid abs floor
//! int float max min` and `select(c, a, b)`. Values are `f32` or 64-bit integers: integer
//! literals, dims, `int(..)`, comparisons and reads of `i32` storage are integers; arithmetic on two
//! integers stays integer (`/` and `%` floor), mixed arithmetic converts the integer to `f32`.
//!
//! The parser and printer are in [`scalar`](super::scalar) (`Scalar::parse`, `Display`; they
//! round-trip), with the value semantics every back end reproduces (`apply_un`, `apply_bin`,
//! `Scalar::eval`).
//!
//! # Details of the semantics
//!
//! - Static kinds are checked by the verifier ([`Kernel::check`]): `%` needs integers, offsets
//!   of `xK[e]` are integers, both branches of `select` have one kind, an `i32` output gets
//!   integer values (an `f32` output converts integers), a reduction combines `f32` values.
//! - A fresh `memory.alloc` holds zeros. (Rejecting reads before writes would refuse legal
//!   launches: an output only partly written, a zero-extent launch before a download.) Back ends
//!   whose allocations start undefined fill only what [`allocs_to_fill`](super::init) cannot
//!   prove fully written before it is read; no generated model needs a fill.
//! - Reads of the output storage — `xN` or `xN[e]`, or the output passed as an input too — see
//!   its contents before the launch, wherever they read: `out[d0] = out[d0 + 1]` shifts. A back
//!   end running points in parallel reads a snapshot (the JIT and OpenCL copy the output first).
//! - An `f16` image is read as `f32` (its values are exact `f32` numbers); a value stored into
//!   one is first rounded to the nearest `f16` (ties to even, overflow to `±inf`, NaN stays NaN):
//!   [`round_f16`](super::scalar::round_f16), the one function every back end reproduces.
//! - An empty reduction sub-domain leaves `acc` at the identity (0 or -inf) and the epilogue
//!   still runs for every parallel point; an empty parallel sub-domain writes nothing.
//! - Integers are 64-bit two's complement and wrap on overflow (`+ - *`, negation, `abs(MIN) =
//!   MIN`); `/` and `%` floor, with `MIN / -1 = MIN` and `MIN % -1 = 0`; `int(x)` truncates
//!   toward zero and saturates at the `i64` range (`int(inf)` is `i64::MAX`); a store into `i32`
//!   storage keeps the low 32 bits.
//! - Integer division or modulo by zero, `int(NaN)`, an undefined map and an access outside an
//!   operand's storage are run-time errors. (An OpenCL kernel cannot raise: there the first two
//!   give 0, see `docs/ir.md`, *Defined memory*.)

use fbc_index::{Expr, IndexMap};
use fbc_ir::types::DialectType;
use fbc_ir::{Attr, ElemType, OpData, Type};

use super::scalar::ScalarKind;

/// Where a memory value's elements live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StorageKind {
    /// `!memory.buffer<N, T>`: `elems` elements, linear.
    Buffer { elems: u64 },
    /// `!memory.image2d<[W, H], f32|f16>`: `width × height` RGBA texels.
    Image { width: u64, height: u64 },
}

/// The type of a memory value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MemType {
    /// `F32`, `I32` or `I8` (packed weights, read-only: no launch writes one) for a buffer,
    /// `F32` or `F16` for an image. An `f16` image holds `f32`
    /// values rounded to the nearest `f16` ([`round_f16`](super::scalar::round_f16)): kernels
    /// read and compute in `f32`, every store into it rounds (OpenCL `read_imagef` /
    /// `write_imagef` on a `CL_HALF_FLOAT` image).
    pub elem: ElemType,
    pub storage: StorageKind,
}

impl MemType {
    /// Number of elements (`4·W·H` for an image).
    pub fn elems(&self) -> u64 {
        match self.storage {
            StorageKind::Buffer { elems } => elems,
            StorageKind::Image { width, height } => width * height * 4,
        }
    }

    /// Bytes of storage: 2 per element of an `f16` image, 1 of an `i8` buffer, 4 for every
    /// other element type.
    pub fn bytes(&self) -> u64 {
        self.elems() * self.elem_bytes()
    }

    /// Bytes of one element: 2 for `f16`, 1 for `i8`, else 4.
    pub fn elem_bytes(&self) -> u64 {
        self.elem.bytes()
    }

    /// The element type of the values a kernel reads from and writes to it, and of the host
    /// copy the reference executor and the JIT keep: `f32` for an `f16` image (its values are
    /// `f32` numbers that `f16` represents exactly), else its element type (an `i8` buffer's
    /// bytes are read as integers in `-128..=127`).
    pub fn value_elem(&self) -> ElemType {
        if self.elem == ElemType::F16 {
            ElemType::F32
        } else {
            self.elem
        }
    }

    /// Whether it is an `f16` image (stores into it round to `f16`).
    pub fn is_half(&self) -> bool {
        self.elem == ElemType::F16
    }

    /// Number of storage coordinates an operand map of this type has: 1 (offset) or 3 (x, y, c).
    pub fn coords(&self) -> usize {
        match self.storage {
            StorageKind::Buffer { .. } => 1,
            StorageKind::Image { .. } => 3,
        }
    }
}

/// Kind of an iteration dimension.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Iter {
    Parallel,
    Reduction,
    /// A dimension of a row kernel's rows: every statistic reduces over the row dimensions, and
    /// the body is written at every point of the parallel and row dimensions.
    Row,
    /// The key positions of an attention launch: its last dimension (see
    /// [`attention`](super::attention)).
    Key,
}

/// How a reduction combines the body's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Combine {
    /// Sum, starting from 0.
    Add,
    /// Maximum, starting from -inf; NaN wins (the tensor dialect propagates NaN).
    Max,
}

/// One statistic of a row kernel: `combine` over the row dimensions of `body` (in row-major
/// order), then `epilogue` of the result (`acc`), once per parallel point.
#[derive(Debug, Clone, PartialEq)]
pub struct Stat {
    pub combine: Combine,
    pub body: Scalar,
    pub epilogue: Option<Scalar>,
}

/// Points where the output is computed: `0 <= map(point)[i] < bounds[i]` for every `i`;
/// elsewhere the output is 0 (the padding of a tiled layout).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Guard {
    pub map: IndexMap,
    pub bounds: Vec<u64>,
}

/// Unary scalar operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScalarUn {
    Neg,
    /// Logical not: 1 if the operand is 0, else 0 (integer result).
    Not,
    Exp,
    Log,
    Sqrt,
    Rsqrt,
    Tanh,
    Erf,
    Sigmoid,
    Abs,
    Floor,
    /// To integer, truncating toward zero.
    ToInt,
    /// To `f32`.
    ToFloat,
}

/// Binary scalar operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScalarBin {
    Add,
    Sub,
    Mul,
    /// Float division, or floor division on two integers.
    Div,
    /// Floor modulo on two integers (`fmod`-free: floats are an error).
    Rem,
    /// NaN-propagating on floats.
    Max,
    Min,
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
    And,
    Or,
}

/// A scalar expression: the payload of a launch.
#[derive(Debug, Clone, PartialEq)]
pub enum Scalar {
    /// A float literal (computed in `f32`).
    Float(f64),
    /// An integer literal.
    Int(i64),
    /// Operand `k` read at its index map.
    In(usize),
    /// Operand `k` (a buffer) read at an explicit element offset (an integer expression).
    Load(usize, Box<Scalar>),
    /// Domain index `k`.
    Dim(usize),
    /// Row statistic `k` of the current parallel point; only in a row kernel (see
    /// [`Kernel::stats`]).
    Stat(usize),
    /// The reduction result; only in an epilogue.
    Acc,
    Un(ScalarUn, Box<Scalar>),
    Bin(ScalarBin, Box<Scalar>, Box<Scalar>),
    /// `select(c, a, b)`: `a` if `c` is non-zero, else `b`.
    Select(Box<Scalar>, Box<Scalar>, Box<Scalar>),
}

/// The view of one `memory.launch` op.
#[derive(Debug, Clone, PartialEq)]
pub struct Kernel {
    /// Kernel name, unique in the module (`forward_matmul_q`).
    pub name: String,
    /// The tensor-level ops it computes, `+`-joined in program order (`tensor.matmul+tensor.add`);
    /// `layout.convert` marks a conversion kernel (benchmarks count them).
    pub source: String,
    /// Iteration extents.
    pub domain: Vec<u64>,
    /// One per domain dimension: every `Parallel` before every `Reduction` (or every `Row`;
    /// a kernel has reduction or row dimensions, not both).
    pub iterators: Vec<Iter>,
    /// One per operand (inputs, then the output): domain → storage coordinates.
    pub maps: Vec<IndexMap>,
    /// The value at each point.
    pub body: Scalar,
    /// Present exactly when there are reduction dimensions.
    pub combine: Option<Combine>,
    /// Applied once per parallel point to the reduction result.
    pub epilogue: Option<Scalar>,
    pub guard: Option<Guard>,
    /// The statistics of a row kernel, computed in order at each parallel point (statistic `k`
    /// may read `s0..s(k-1)`); the body reads them all. Present exactly when there are row
    /// dimensions. See the module docs.
    pub stats: Vec<Stat>,
    /// The symbols of the maps (`(d0, ..)[s0, ..] -> ..`), in order: values known only when the
    /// launch runs. See [`Symbol`].
    pub symbols: Vec<Symbol>,
    /// Present for an attention launch (its last iterator is `"key"`): what it computes is
    /// [`attention`](super::attention)'s, and `body` is unused.
    pub attention: Option<super::attention::Attention>,
    /// Attribute `split_k`: a hint to back ends that run work-groups in parallel: cut the
    /// reduction (its points in row-major order) into this many chunks, each summed by
    /// work-groups of its own, and add the chunks' partial sums in chunk order (the OpenCL
    /// skinny kernel does, in one launch). What the launch computes is unchanged (up to the
    /// reassociation of an `add` reduction); the reference executor and the CPU back ends
    /// ignore it. Only on an `add` reduction, `2 ≤ split_k ≤` its number of points.
    pub split: Option<u64>,
}

/// A symbol of a launch's maps: element 0 of operand `operand` (an `i32` buffer, an input),
/// read once when the launch runs. It must lie in `lo..=hi` (`0 ≤ lo`: symbols, like domain
/// indices, are never negative, which the back ends' division rules rely on): outside, the launch is an error of
/// its op and writes nothing. The bounds prover takes the symbol from that range, so a map that
/// uses it is proven in range like any other (a KV cache written at a run-time position).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Symbol {
    pub operand: usize,
    pub lo: i64,
    pub hi: i64,
}

impl Kernel {
    /// Number of parallel dimensions (they come first).
    pub fn parallel_dims(&self) -> usize {
        self.iterators.iter().take_while(|i| **i == Iter::Parallel).count()
    }

    /// Index of the output operand.
    pub fn output(&self) -> usize {
        self.maps.len() - 1
    }

    /// Per input operand: whether it is read only where the output is written, at the output's
    /// map and never in the body (an epilogue's `x2` in `acc * sigmoid(acc) * x2`), so that it
    /// may be the output of a launch run just before in the same work-groups.
    pub fn read_at_output(&self) -> Vec<bool> {
        let out = self.output();
        let mut in_body = vec![false; out];
        self.body.visit(&mut |e| {
            if let Scalar::In(i) | Scalar::Load(i, _) = e {
                if let Some(b) = in_body.get_mut(*i) {
                    *b = true;
                }
            }
        });
        (0..out).map(|i| !in_body[i] && self.maps[i] == self.maps[out]).collect()
    }

    /// Floating-point (and integer) operations of one run: the body and the combine at every
    /// domain point, the epilogue at every parallel point (a row kernel: also each statistic's
    /// body and combine at every point, its epilogue at every parallel point; an attention
    /// launch: its two products over every key). Saturates rather than overflows.
    pub fn flops(&self) -> u64 {
        let points = self.domain.iter().fold(1u64, |a, &d| a.saturating_mul(d));
        if self.attention.is_some() {
            // The scores and the weighted values, two multiply-adds per point, at every key (a
            // causal launch reads fewer).
            return points.saturating_mul(4);
        }
        let par = self.domain[..self.parallel_dims().min(self.domain.len())]
            .iter()
            .fold(1u64, |a, &d| a.saturating_mul(d));
        let per = self.body.count_ops() + u64::from(self.combine.is_some());
        let stats_per: u64 = self.stats.iter().map(|st| st.body.count_ops() + 1).sum();
        let stats_par: u64 =
            self.stats.iter().filter_map(|st| st.epilogue.as_ref()).map(Scalar::count_ops).sum();
        points.saturating_mul(per + stats_per).saturating_add(
            par.saturating_mul(self.epilogue.as_ref().map_or(0, Scalar::count_ops) + stats_par),
        )
    }

    /// Every payload expression: the body, the epilogue, each statistic's body and epilogue.
    pub fn payloads(&self) -> impl Iterator<Item = &Scalar> {
        std::iter::once(&self.body).chain(self.epilogue.as_ref()).chain(
            self.stats.iter().flat_map(|s| std::iter::once(&s.body).chain(s.epilogue.as_ref())),
        )
    }

    /// Whether a statistic (its body or its epilogue) reads domain dimension `d`: through an
    /// operand's map, an explicit offset or as `dN`. A statistic that reads none of a set of
    /// dimensions has one value along them.
    pub fn stats_read_dim(&self, d: usize) -> bool {
        let mut reads = false;
        for st in &self.stats {
            for e in std::iter::once(&st.body).chain(st.epilogue.as_ref()) {
                e.visit(&mut |x| match x {
                    Scalar::In(i) | Scalar::Load(i, _) => {
                        if let Some((m, v)) =
                            self.maps.get(*i).and_then(|m| Some((m, m.dims.get(d)?)))
                        {
                            reads |= m.results.iter().any(|r| uses_var(r, v));
                        }
                    }
                    Scalar::Dim(j) => reads |= *j == d,
                    _ => {}
                });
            }
        }
        reads
    }

    /// Whether it is a row kernel (it has row dimensions, and then statistics).
    pub fn is_row(&self) -> bool {
        self.iterators.contains(&Iter::Row)
    }

    /// Number of the leading dimensions that index an output point: every dimension of a row
    /// kernel, else the parallel ones.
    pub fn point_dims(&self) -> usize {
        if self.is_row() {
            self.domain.len()
        } else {
            self.parallel_dims()
        }
    }
}

impl Stat {
    /// Reads the text form `COMBINE: BODY` or `COMBINE: BODY; EPILOGUE` (`"max: x0"`, `"add:
    /// x0 * x0; rsqrt(acc / 64.0 + 1.0e-5)"`).
    pub fn parse(text: &str) -> Result<Stat, String> {
        let (c, rest) = text.split_once(':').ok_or_else(|| {
            format!(
                "expected `add: BODY` or `max: BODY` (optionally `; EPILOGUE`), found \"{}\"",
                super::scalar::excerpt(text, 0)
            )
        })?;
        let combine = match c.trim() {
            "add" => Combine::Add,
            "max" => Combine::Max,
            other => {
                return Err(format!(
                    "the combine of a statistic must be `add` or `max`, found `{other}`"
                ))
            }
        };
        let (body, epilogue) = match rest.split_once(';') {
            Some((b, e)) => (b, Some(e)),
            None => (rest, None),
        };
        let parse = |what: &str, t: &str| {
            Scalar::parse(t).map_err(|e| {
                format!(
                    "its {what} does not parse: {e}: \"{}\"",
                    super::scalar::excerpt(t, e.offset)
                )
            })
        };
        Ok(Stat {
            combine,
            body: parse("body", body)?,
            epilogue: epilogue.map(|e| parse("epilogue", e)).transpose()?,
        })
    }
}

impl std::fmt::Display for Stat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.combine.name(), self.body)?;
        if let Some(e) = &self.epilogue {
            write!(f, "; {e}")?;
        }
        Ok(())
    }
}

// ----- types ---------------------------------------------------------------------------------------

impl MemType {
    /// A linear buffer of `elems` elements of `elem`.
    pub fn buffer(elems: u64, elem: ElemType) -> MemType {
        MemType { elem, storage: StorageKind::Buffer { elems } }
    }

    /// An `f32` image of `width × height` texels.
    pub fn image(width: u64, height: u64) -> MemType {
        MemType { elem: ElemType::F32, storage: StorageKind::Image { width, height } }
    }

    /// An `f16` image of `width × height` texels.
    pub fn image_f16(width: u64, height: u64) -> MemType {
        MemType { elem: ElemType::F16, storage: StorageKind::Image { width, height } }
    }

    /// The same storage with `f16` elements when it is an `f32` image; anything else unchanged.
    pub fn to_half_image(self) -> MemType {
        match self.storage {
            StorageKind::Image { .. } if self.elem == ElemType::F32 => {
                MemType { elem: ElemType::F16, ..self }
            }
            _ => self,
        }
    }

    /// Reads `!memory.buffer<N, f32|i32>` or `!memory.image2d<[W, H], f32|f16>` (`<WxH, f32>`
    /// reads the same); `None` for any other type, or parameters that do not fit.
    pub fn from_type(t: &Type) -> Option<MemType> {
        Self::parse_type(t).ok()
    }

    /// [`MemType::from_type`] with the reason a type is not a memory type.
    pub fn parse_type(t: &Type) -> Result<MemType, String> {
        let Type::Dialect(d) = t else {
            return Err(format!(
                "expected a memory type (!memory.buffer or !memory.image2d), found {t}"
            ));
        };
        if d.dialect != "memory" {
            return Err(format!(
                "expected a memory type (!memory.buffer or !memory.image2d), found {t}"
            ));
        }
        let elem = |a: &Attr, allowed: &[ElemType]| -> Result<ElemType, String> {
            match a {
                Attr::Type(Type::Scalar(e)) if allowed.contains(e) => Ok(*e),
                _ => {
                    let names: Vec<&str> = allowed.iter().map(|e| e.name()).collect();
                    let list = match names.split_last() {
                        Some((last, rest)) if !rest.is_empty() => {
                            format!("{} or {last}", rest.join(", "))
                        }
                        _ => names.join(""),
                    };
                    Err(format!("the element type of {t} must be {list}, found `{a}`"))
                }
            }
        };
        let keyless = d.params.iter().all(|(k, _)| k.is_none());
        match (d.name.as_str(), d.params.as_slice()) {
            ("buffer", [(_, n), (_, e)]) if keyless => {
                let elems = n
                    .as_int()
                    .and_then(|n| u64::try_from(n).ok())
                    .ok_or_else(|| format!("the element count of {t} must be an integer ≥ 0, found `{n}`"))?;
                let elem = elem(e, &[ElemType::F32, ElemType::I32, ElemType::I8])?;
                Ok(MemType::buffer(elems, elem))
            }
            ("image2d", [(_, wh), (_, e)]) if keyless => {
                let ext = wh.as_ints().unwrap_or_default();
                let [w, h] = ext.as_slice() else {
                    return Err(format!("the extent of {t} must be [width, height] in texels, found `{wh}`"));
                };
                let (Ok(w), Ok(h)) = (u64::try_from(*w), u64::try_from(*h)) else {
                    return Err(format!("the extent of {t} must be two integers ≥ 1, found `{wh}`"));
                };
                if w == 0 || h == 0 {
                    return Err(format!("the extent of {t} must be two integers ≥ 1, found `{wh}`"));
                }
                if w.checked_mul(h).and_then(|n| n.checked_mul(4)).is_none() {
                    return Err(format!("{t} has more elements than fit in 64 bits"));
                }
                let elem = elem(e, &[ElemType::F32, ElemType::F16])?;
                Ok(MemType { elem, storage: StorageKind::Image { width: w, height: h } })
            }
            ("buffer", _) => Err(format!("expected !memory.buffer<N, f32|i32>, found {t}")),
            ("image2d", _) => Err(format!("expected !memory.image2d<[W, H], f32|f16>, found {t}")),
            _ => Err(format!(
                "unknown memory type {t}; the memory types are !memory.buffer<N, f32|i32> and !memory.image2d<[W, H], f32|f16>"
            )),
        }
    }

    /// The IR type: `!memory.buffer<N, T>` or `!memory.image2d<[W, H], T>`.
    pub fn to_type(&self) -> Type {
        let (name, first) = match self.storage {
            StorageKind::Buffer { elems } => ("buffer", Attr::Int(elems as i64)),
            StorageKind::Image { width, height } => {
                ("image2d", Attr::ints([width as i64, height as i64]))
            }
        };
        Type::Dialect(Box::new(DialectType {
            dialect: "memory".into(),
            name: name.into(),
            params: vec![(None, first), (None, Attr::Type(Type::Scalar(self.elem)))],
        }))
    }

    /// Whether it is an image.
    pub fn is_image(&self) -> bool {
        matches!(self.storage, StorageKind::Image { .. })
    }
}

impl std::fmt::Display for MemType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.to_type())
    }
}

// ----- the launch attributes -------------------------------------------------------------------

/// Why a launch's attributes do not describe a valid kernel: the attribute at fault and the
/// message (complete: it names the attribute).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct KernelError {
    /// The attribute the error is about (`maps`, `body`, ...); `""` for the op as a whole.
    pub attr: &'static str,
    pub message: String,
}

pub(crate) fn kerr<T>(attr: &'static str, message: impl Into<String>) -> Result<T, KernelError> {
    Err(KernelError { attr, message: message.into() })
}

/// The names of `memory.launch`'s attributes, sorted (the canonical order).
pub const LAUNCH_ATTRS: &[&str] = &[
    "attention",
    "body",
    "causal",
    "combine",
    "domain",
    "epilogue",
    "guard",
    "guard_bounds",
    "iterators",
    "kernel",
    "maps",
    "source",
    "split_k",
    "stats",
    "symbols",
];

impl Iter {
    /// The attribute text: `"parallel"`, `"reduction"` or `"row"`.
    pub fn name(self) -> &'static str {
        match self {
            Iter::Parallel => "parallel",
            Iter::Reduction => "reduction",
            Iter::Row => "row",
            Iter::Key => "key",
        }
    }
}

impl Combine {
    /// The attribute text: `"add"` or `"max"`.
    pub fn name(self) -> &'static str {
        match self {
            Combine::Add => "add",
            Combine::Max => "max",
        }
    }

    /// The value a reduction starts from.
    pub fn identity(self) -> f32 {
        match self {
            Combine::Add => 0.0,
            Combine::Max => f32::NEG_INFINITY,
        }
    }
}

impl Kernel {
    /// The kernel of a `memory.launch` op (its attributes only; the operand types are checked by
    /// [`Kernel::check`]).
    pub fn from_op(op: &OpData) -> Result<Kernel, String> {
        if op.name() != "memory.launch" {
            return Err(format!("expected memory.launch, found {}", op.name()));
        }
        Kernel::from_attrs(&op.attrs).map_err(|e| e.message)
    }

    /// Reads the launch attributes (any order). Checks their form and everything that does not
    /// need the operand types.
    pub fn from_attrs(attrs: &[(String, Attr)]) -> Result<Kernel, KernelError> {
        let get = |k: &str| attrs.iter().find(|(n, _)| n == k).map(|(_, v)| v);
        let string = |k: &'static str, required: bool| -> Result<Option<String>, KernelError> {
            match get(k) {
                Some(Attr::Str(s)) => Ok(Some(s.clone())),
                Some(a) => {
                    kerr(k, format!("`{k}` must be a string, found {} `{a}`", a.kind_name()))
                }
                None if required => kerr(k, format!("memory.launch requires attribute `{k}`")),
                None => Ok(None),
            }
        };
        let name = string("kernel", true)?.unwrap_or_default();
        let source = string("source", false)?.unwrap_or_default();
        let domain = match get("domain").map(|a| (a, a.as_ints())) {
            Some((a, Some(v))) => {
                v.iter().map(|&d| u64::try_from(d)).collect::<Result<Vec<u64>, _>>().or_else(
                    |_| kerr("domain", format!("`domain` extents must be ≥ 0, found `{a}`")),
                )?
            }
            Some((a, None)) => {
                return kerr(
                    "domain",
                    format!("`domain` must be an array of integers, found `{a}`"),
                )
            }
            None => return kerr("domain", "memory.launch requires attribute `domain`"),
        };
        if domain.iter().try_fold(1u64, |a, &d| a.checked_mul(d)).is_none() {
            return kerr("domain", "the `domain` has more points than fit in 64 bits");
        }
        let iterators = match get("iterators") {
            Some(Attr::Array(items)) => items
                .iter()
                .map(|a| match a.as_str() {
                    Some("parallel") => Ok(Iter::Parallel),
                    Some("reduction") => Ok(Iter::Reduction),
                    Some("row") => Ok(Iter::Row),
                    Some("key") => Ok(Iter::Key),
                    _ => kerr(
                        "iterators",
                        format!("`iterators` entries must be \"parallel\", \"reduction\", \"row\" or \"key\", found `{a}`"),
                    ),
                })
                .collect::<Result<Vec<_>, _>>()?,
            Some(a) => {
                return kerr("iterators", format!("`iterators` must be an array of strings, found `{a}`"))
            }
            None => return kerr("iterators", "memory.launch requires attribute `iterators`"),
        };
        if iterators.len() != domain.len() {
            return kerr(
                "iterators",
                format!(
                    "`iterators` has {} entries, but the domain has {} dimensions",
                    iterators.len(),
                    domain.len()
                ),
            );
        }
        let np = iterators.iter().take_while(|i| **i == Iter::Parallel).count();
        if iterators[np..].contains(&Iter::Parallel) {
            return kerr(
                "iterators",
                "every \"parallel\" iterator must come before every \"reduction\", \"row\" or \"key\" one",
            );
        }
        if let Some(at) = iterators.iter().position(|i| *i == Iter::Key) {
            if at + 1 != iterators.len() || at != np || np < 2 {
                return kerr("iterators", "an attention launch has one \"key\" iterator, the last, after at least two \"parallel\" ones (the query points and the head dimension)");
            }
        }
        let has_keys = iterators.contains(&Iter::Key);
        let attention = match (get("attention"), has_keys) {
            (Some(a), true) => Some(super::attention::Attention::from_attrs(a, get("causal"))?),
            (None, true) => {
                return kerr(
                    "attention",
                    "a launch with a \"key\" iterator is an attention launch and needs `attention`",
                )
            }
            (Some(_), false) => {
                return kerr("attention", "an attention launch has a \"key\" iterator, its last")
            }
            (None, false) if get("causal").is_some() => {
                return kerr("causal", "`causal` is only allowed on an attention launch")
            }
            (None, false) => None,
        };
        let has_rows = iterators[np..].contains(&Iter::Row);
        if has_rows && iterators[np..].contains(&Iter::Reduction) {
            return kerr("iterators", "a launch has \"reduction\" or \"row\" iterators, not both");
        }
        let maps = match get("maps") {
            Some(Attr::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, a)| match a {
                    Attr::Map(m) => Ok(m.clone()),
                    _ => kerr(
                        "maps",
                        format!("entry {i} of `maps` must be an index map, found `{a}`"),
                    ),
                })
                .collect::<Result<Vec<_>, _>>()?,
            Some(a) => {
                return kerr("maps", format!("`maps` must be an array of index maps, found `{a}`"))
            }
            None => return kerr("maps", "memory.launch requires attribute `maps`"),
        };
        if maps.is_empty() {
            return kerr("maps", "`maps` is empty; a launch has at least its output operand");
        }
        let symbols = match get("symbols") {
            None => Vec::new(),
            Some(Attr::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, a)| match a.as_ints().as_deref() {
                    Some(&[k, lo, hi]) if k >= 0 && 0 <= lo && lo <= hi => {
                        Ok(Symbol { operand: k as usize, lo, hi })
                    }
                    _ => kerr(
                        "symbols",
                        format!("entry {i} of `symbols` must be [operand, lo, hi] with operand ≥ 0 and 0 ≤ lo ≤ hi, found `{a}`"),
                    ),
                })
                .collect::<Result<Vec<_>, _>>()?,
            Some(a) => {
                return kerr(
                    "symbols",
                    format!("`symbols` must be an array of [operand, lo, hi], found `{a}`"),
                )
            }
        };
        for (i, m) in maps.iter().enumerate() {
            if !m.symbols.is_empty() && m.symbols.len() != symbols.len() {
                return kerr(
                    "maps",
                    format!(
                        "map {i} has {} symbols, but the launch binds {} (`symbols`)",
                        m.symbols.len(),
                        symbols.len()
                    ),
                );
            }
            if m.dims.len() != domain.len() {
                return kerr(
                    "maps",
                    format!(
                        "map {i} has {} dimensions, but the domain has {}",
                        m.dims.len(),
                        domain.len()
                    ),
                );
            }
        }
        let parse = |k: &'static str, s: &str| {
            Scalar::parse(s).or_else(|e| {
                let text = super::scalar::excerpt(s, e.offset);
                kerr(k, format!("`{k}` does not parse: {e}: \"{text}\""))
            })
        };
        let body = match attention {
            Some(_) => {
                for k in ["body", "epilogue", "combine", "guard", "stats"] {
                    if get(k).is_some() {
                        return kerr(k, format!("an attention launch has no `{k}`: it computes what `attention` says"));
                    }
                }
                Scalar::Int(0)
            }
            None => parse("body", &string("body", true)?.unwrap_or_default())?,
        };
        let epilogue = match string("epilogue", false)? {
            Some(s) => Some(parse("epilogue", &s)?),
            None => None,
        };
        let combine = match get("combine") {
            Some(a) => match a.as_str() {
                Some("add") => Some(Combine::Add),
                Some("max") => Some(Combine::Max),
                _ => {
                    return kerr(
                        "combine",
                        format!("`combine` must be \"add\" or \"max\", found `{a}`"),
                    )
                }
            },
            None => None,
        };
        let has_reduction = np < domain.len() && !has_rows && !has_keys;
        match (has_reduction, combine) {
            (true, None) => return kerr("combine", "the domain has reduction dimensions, so `combine` (\"add\" or \"max\") is required"),
            (false, Some(_)) => return kerr("combine", "`combine` is only allowed when the domain has reduction dimensions"),
            _ => {}
        }
        let guard = match (get("guard"), get("guard_bounds")) {
            (None, None) => None,
            (Some(Attr::Map(m)), Some(b)) => {
                let bounds = b
                    .as_ints()
                    .and_then(|v| {
                        v.iter().map(|&x| u64::try_from(x).ok()).collect::<Option<Vec<_>>>()
                    })
                    .map_or_else(
                        || {
                            kerr(
                                "guard_bounds",
                                format!(
                                    "`guard_bounds` must be an array of integers ≥ 0, found `{b}`"
                                ),
                            )
                        },
                        Ok,
                    )?;
                if !m.symbols.is_empty() || m.dims.len() != domain.len() {
                    return kerr("guard", format!("the `guard` map must take the {} domain dimensions and no symbols, found {m}", domain.len()));
                }
                if m.results.len() != bounds.len() {
                    return kerr(
                        "guard_bounds",
                        format!(
                            "`guard_bounds` has {} entries, but the `guard` map has {} results",
                            bounds.len(),
                            m.results.len()
                        ),
                    );
                }
                Some(Guard { map: m.clone(), bounds })
            }
            (Some(a), _) if !matches!(a, Attr::Map(_)) => {
                return kerr("guard", format!("`guard` must be an index map, found `{a}`"))
            }
            (Some(_), None) => return kerr("guard", "`guard` needs `guard_bounds`"),
            (None, Some(_)) => return kerr("guard_bounds", "`guard_bounds` needs `guard`"),
            _ => return kerr("guard", "malformed guard"),
        };
        let stats = match get("stats") {
            None => Vec::new(),
            Some(Attr::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, a)| match a {
                    Attr::Str(t) => {
                        Stat::parse(t).or_else(|m| kerr("stats", format!("statistic {i}: {m}")))
                    }
                    _ => {
                        kerr("stats", format!("entry {i} of `stats` must be a string, found `{a}`"))
                    }
                })
                .collect::<Result<Vec<_>, _>>()?,
            Some(a) => {
                return kerr("stats", format!("`stats` must be an array of strings, found `{a}`"))
            }
        };
        match (has_rows, stats.is_empty()) {
            (true, true) => return kerr(
                "stats",
                "the domain has row dimensions, so `stats` (at least one statistic) is required",
            ),
            (false, false) if !has_reduction => {
                return kerr(
                    "stats",
                    "`stats` is only allowed when the domain has row or reduction dimensions",
                )
            }
            _ => {}
        }
        if has_rows && domain[np..].contains(&0) {
            return kerr("domain", "a row kernel's row dimensions must not be empty (every statistic reduces over at least one point)");
        }
        if has_rows && epilogue.is_some() {
            return kerr("epilogue", "a row kernel has no `epilogue`: its body is computed at every point, after the statistics");
        }
        for (j, sym) in symbols.iter().enumerate() {
            if sym.operand + 1 >= maps.len() {
                return kerr(
                    "symbols",
                    format!(
                        "symbol {j} reads operand {}, but the launch has {} inputs",
                        sym.operand,
                        maps.len() - 1
                    ),
                );
            }
        }
        let split = match get("split_k") {
            None => None,
            Some(a) => {
                let points: u64 = domain[np..].iter().product();
                match a.as_int() {
                    Some(s) if combine == Some(Combine::Add) => {
                        if s < 2 || s as u64 > points {
                            return kerr(
                                "split_k",
                                format!(
                                    "`split_k` must be at least 2 and at most the {points} points of the reduction, found {s}"
                                ),
                            );
                        }
                        Some(s as u64)
                    }
                    Some(_) => {
                        return kerr("split_k", "`split_k` is only allowed on an \"add\" reduction")
                    }
                    None => {
                        return kerr(
                            "split_k",
                            format!("`split_k` must be an integer, found `{a}`"),
                        )
                    }
                }
            }
        };
        Ok(Kernel {
            name,
            source,
            domain,
            iterators,
            maps,
            body,
            combine,
            epilogue,
            guard,
            stats,
            symbols,
            attention,
            split,
        })
    }

    /// The attributes of a `memory.launch` op computing this kernel, in canonical (sorted) order.
    pub fn to_attrs(&self) -> Vec<(String, Attr)> {
        let mut a: Vec<(String, Attr)> = Vec::with_capacity(10);
        if let Some(at) = &self.attention {
            a.push(("attention".into(), at.to_attr()));
        } else {
            a.push(("body".into(), Attr::Str(self.body.to_string())));
        }
        if let Some(last) = self.attention.as_ref().and_then(|at| at.last.as_ref()) {
            a.push(("causal".into(), Attr::Map(last.clone())));
        }
        if let Some(c) = self.combine {
            a.push(("combine".into(), Attr::Str(c.name().into())));
        }
        a.push(("domain".into(), Attr::ints(self.domain.iter().map(|&d| d as i64))));
        if let Some(e) = &self.epilogue {
            a.push(("epilogue".into(), Attr::Str(e.to_string())));
        }
        if let Some(g) = &self.guard {
            a.push(("guard".into(), Attr::Map(g.map.clone())));
            a.push(("guard_bounds".into(), Attr::ints(g.bounds.iter().map(|&d| d as i64))));
        }
        a.push((
            "iterators".into(),
            Attr::Array(self.iterators.iter().map(|i| Attr::Str(i.name().into())).collect()),
        ));
        a.push(("kernel".into(), Attr::Str(self.name.clone())));
        a.push(("maps".into(), Attr::Array(self.maps.iter().cloned().map(Attr::Map).collect())));
        a.push(("source".into(), Attr::Str(self.source.clone())));
        if let Some(s) = self.split {
            a.push(("split_k".into(), Attr::Int(s as i64)));
        }
        if !self.stats.is_empty() {
            a.push((
                "stats".into(),
                Attr::Array(self.stats.iter().map(|s| Attr::Str(s.to_string())).collect()),
            ));
        }
        if !self.symbols.is_empty() {
            let entry = |s: &Symbol| Attr::ints([s.operand as i64, s.lo, s.hi]);
            a.push(("symbols".into(), Attr::Array(self.symbols.iter().map(entry).collect())));
        }
        a
    }

    /// Checks the kernel against its operand types: one map per operand with as many results as
    /// the operand has storage coordinates, operand references in range, loads only from
    /// buffers, scalar kinds, `acc` only in the epilogue, what the epilogue may read, and the
    /// image-output rule.
    pub fn check(&self, types: &[MemType]) -> Result<(), KernelError> {
        let n = types.len();
        if self.maps.len() != n {
            return kerr(
                "maps",
                format!("`maps` has {} entries, but the launch has {n} operands", self.maps.len()),
            );
        }
        if let Some(out) = types.last().filter(|t| t.elem == ElemType::I8) {
            return kerr(
                "maps",
                format!(
                    "the output is {out}: i8 buffers hold packed weights, which launches only read"
                ),
            );
        }
        for (i, (m, t)) in self.maps.iter().zip(types).enumerate() {
            if m.results.len() != t.coords() {
                let what = if t.is_image() {
                    "3 (x, y, channel) for an image"
                } else {
                    "1 (the element offset) for a buffer"
                };
                return kerr(
                    "maps",
                    format!(
                        "map {i} has {} results, but operand {i} ({t}) needs {what}",
                        m.results.len()
                    ),
                );
            }
            let names = m.vars();
            for r in &m.results {
                check_expr_vars(r, &names).or_else(|v| {
                    kerr(
                        "maps",
                        format!(
                            "map {i} uses `{v}`, which is not one of its dimensions or symbols"
                        ),
                    )
                })?;
            }
        }
        for (j, sym) in self.symbols.iter().enumerate() {
            let t = types[sym.operand];
            if t.is_image() || t.elem != ElemType::I32 || t.elems() == 0 {
                return kerr(
                    "symbols",
                    format!("symbol {j} reads element 0 of operand {}, which must be an i32 buffer of at least one element, found {t}", sym.operand),
                );
            }
        }
        if let Some(g) = &self.guard {
            for r in &g.map.results {
                check_expr_vars(r, &g.map.dims).or_else(|v| {
                    kerr(
                        "guard",
                        format!("the guard uses `{v}`, which is not one of its dimensions"),
                    )
                })?;
            }
        }
        if self.attention.is_some() {
            return self.check_attention(types);
        }
        let rank = self.domain.len();
        let np = self.parallel_dims();
        let kind = |k: usize| types.get(k).map(|t| ScalarKind::of_elem(t.elem));
        let row = self.is_row();
        // Operand and dimension references, loads.
        // `visible`: how many statistics `e` may read (`s0..`); `epilogue`: it runs once per
        // parallel point.
        let refs = |e: &Scalar,
                    key: &'static str,
                    epilogue: bool,
                    visible: usize|
         -> Result<(), KernelError> {
            let mut err: Option<String> = None;
            e.visit(&mut |s| {
                if err.is_some() {
                    return;
                }
                match s {
                    Scalar::In(k) | Scalar::Load(k, _) if *k >= n => {
                        err = Some(format!("`x{k}` refers to operand {k}, but the launch has {n} operands"));
                    }
                    Scalar::Load(k, _) if types[*k].is_image() => {
                        err = Some(format!("`x{k}[..]` loads from operand {k}, an image; only buffers can be loaded at an offset"));
                    }
                    Scalar::Dim(k) if *k >= rank => {
                        err = Some(format!("`d{k}` is not a domain dimension (the domain has {rank})"));
                    }
                    Scalar::Stat(k) if *k >= visible => {
                        err = Some(match (self.stats.len(), key) {
                            (0, _) => format!("`s{k}` reads a statistic, but the launch has no `stats`"),
                            (_, "body") if !row => format!("`s{k}`: the body of a reduction is combined before its statistics are known; only the epilogue reads them"),
                            (_, "stats") if !row && visible == 0 => format!("`s{k}`: a statistic of a reduction is combined beside the others; only statistic epilogues read earlier statistics"),
                            (_, "stats") if visible == 0 => format!("`s{k}`: the first statistic reads no statistic"),
                            (_, "stats") => format!("`s{k}` is not computed before statistic {visible} (it may read s0 to s{})", visible - 1),
                            (n, _) => format!("`s{k}` refers to statistic {k}, but the launch has {n}"),
                        });
                    }
                    Scalar::Dim(k) if epilogue && *k >= np => {
                        err = Some(format!("the epilogue reads `d{k}`, a reduction dimension; it runs once per parallel point"));
                    }
                    Scalar::In(k) if epilogue => {
                        let m = &self.maps[*k];
                        let used = |d: &str| m.results.iter().any(|r| uses_var(r, d));
                        if let Some(d) = m.dims[np..].iter().find(|d| used(d)) {
                            err = Some(format!(
                                "the epilogue reads `x{k}`, whose map uses the reduction dimension `{d}`; it runs once per parallel point"
                            ));
                        }
                    }
                    _ => {}
                }
            });
            match err {
                Some(m) => kerr(key, m),
                None => Ok(()),
            }
        };
        // A row kernel's body and later statistics read the statistics; a reduction's
        // statistics are combined over the same points as the body, so only epilogues read them.
        let nstats = self.stats.len();
        refs(&self.body, "body", false, if row { nstats } else { 0 })?;
        for (i, st) in self.stats.iter().enumerate() {
            let at = |e: KernelError| KernelError {
                attr: "stats",
                message: format!("statistic {i}: {}", e.message),
            };
            refs(&st.body, "stats", false, if row { i } else { 0 }).map_err(at)?;
            let bk = st.body.kind(&kind, None).or_else(|m| kerr("stats", m)).map_err(at)?;
            if st.combine == Combine::Max && bk == ScalarKind::Int {
                return kerr("stats", format!("statistic {i}: a statistic combines f32 values; its body is an integer expression (use float(..))"));
            }
            if let Some(e) = &st.epilogue {
                refs(e, "stats", true, i).map_err(at)?;
                let ek = e
                    .kind(&kind, Some(ScalarKind::Float))
                    .or_else(|m| kerr("stats", m))
                    .map_err(at)?;
                if ek == ScalarKind::Int {
                    return kerr("stats", format!("statistic {i}: its epilogue computes an integer; statistics are f32 values (use float(..))"));
                }
            }
        }
        let body_kind = self.body.kind(&kind, None).or_else(|m| kerr("body", m))?;
        let mut out_kind = body_kind;
        if let Some(e) = &self.epilogue {
            refs(e, "epilogue", true, if row { 0 } else { nstats })?;
            out_kind = e.kind(&kind, Some(body_kind)).or_else(|m| kerr("epilogue", m))?;
        }
        if self.combine == Some(Combine::Max) && body_kind == ScalarKind::Int {
            // Max of integers would need an integer identity; kernels reduce f32 only.
            return kerr("combine", "a reduction combines f32 values; the body is an integer expression (use float(..))");
        }
        let out = self.output();
        let out_ty = types[out];
        if ScalarKind::of_elem(out_ty.elem) == ScalarKind::Int && out_kind == ScalarKind::Float {
            let key = if self.epilogue.is_some() { "epilogue" } else { "body" };
            return kerr(key, format!("the output (operand {out}, {out_ty}) holds integers, but the kernel computes f32 values (use int(..))"));
        }
        if out_ty.is_image() {
            let pd = self.point_dims();
            let what = if self.is_row() { "dimension" } else { "parallel dimension" };
            let last = pd.checked_sub(1).filter(|&l| self.domain[l] == 4);
            let Some(last) = last else {
                return kerr(
                    "domain",
                    format!("the output (operand {out}) is an image, so the last {what} must be the channel, of extent 4; the domain is {:?} with {np} parallel dimension(s)", self.domain),
                );
            };
            let m = &self.maps[out];
            let is_dim = matches!(&m.results[2], Expr::Var(v) if *v == m.dims[last]);
            if !is_dim {
                return kerr(
                    "maps",
                    format!(
                        "the output (operand {out}) is an image, so the channel result of its map must be `{}` (the last {what}), found `{}`",
                        m.dims[last], m.results[2]
                    ),
                );
            }
        }
        Ok(())
    }
}

/// Whether `e` mentions variable `v`.
pub(crate) fn uses_var(e: &Expr, v: &str) -> bool {
    match e {
        Expr::Var(x) => x == v,
        Expr::Const(_) => false,
        Expr::Neg(a) => uses_var(a, v),
        Expr::Bin(_, a, b) => uses_var(a, v) || uses_var(b, v),
    }
}

/// `Err(name)` for the first variable of `e` not in `dims`.
fn check_expr_vars<'a>(e: &'a Expr, dims: &[String]) -> Result<(), &'a str> {
    match e {
        Expr::Var(x) if dims.contains(x) => Ok(()),
        Expr::Var(x) => Err(x),
        Expr::Const(_) => Ok(()),
        Expr::Neg(a) => check_expr_vars(a, dims),
        Expr::Bin(_, a, b) => {
            check_expr_vars(a, dims)?;
            check_expr_vars(b, dims)
        }
    }
}

//! The memory ops: `memory.alloc`, `memory.dealloc`, `memory.upload`, `memory.download`,
//! `memory.launch`, their verifiers and result types.
//!
//! None of them is pure: they allocate, copy or write storage, so `dce` and `cse` leave them
//! alone, and their order in a function body is the schedule. `memory.alloc` and
//! `memory.download` cannot infer their result types from operands and attributes (a size is
//! not an attribute); they check the type the op declares (the text's signature, or the type a
//! pass gave the result), and building one without a signature is an error that says so.

use fbc_ir::{
    Arity, Attr, AttrDef, AttrKind, ElemType, OpDef, OpError, OpTraits, OpView, TensorType, Type,
};

use super::kernel::{Kernel, MemType, StorageKind};
use crate::layout::{Layout, Storage};

/// Memory ops have effects: not pure, not elementwise, not terminators.
const EFFECTS: OpTraits = OpTraits {
    pure: false,
    elementwise: false,
    commutative: false,
    terminator: false,
    consumes: false,
};

/// `memory.dealloc` has effects and ends its operand's lifetime.
const FREES: OpTraits = OpTraits { consumes: true, ..EFFECTS };

/// The attributes of `memory.download`: the required `layout`.
const LAYOUT_ATTRS: &[AttrDef] =
    &[AttrDef::required("layout", AttrKind::Any, "#layout.linear or #layout.rtile<...>")];

/// The attributes of `memory.upload`: the required `layout`, the `rows` of the operand it
/// stores, the `slot` of `plan-memory`, and the weight-streaming plan of
/// `plan-weight-streaming` (`stream_from`, `stream_bytes`).
const UPLOAD_ATTRS: &[AttrDef] = &[
    AttrDef::required("layout", AttrKind::Any, "#layout.linear or #layout.rtile<...>"),
    AttrDef::optional(
        "rows",
        AttrKind::IntArray,
        "none (all of the operand)",
        "[start, count]: the storage holds rows start..start+count (axis 0) of the operand",
    ),
    AttrDef::optional("slot", AttrKind::Int, "none", "storage slot assigned by plan-memory"),
    AttrDef::optional(
        "stream_bytes",
        AttrKind::IntArray,
        "none",
        "bytes loaded during each launch from stream_from on (plan-weight-streaming)",
    ),
    AttrDef::optional(
        "stream_from",
        AttrKind::Int,
        "none (preloaded)",
        "the launch during which streaming the upload starts (plan-weight-streaming)",
    ),
];

pub static OPS: &[OpDef] = &[
    OpDef {
        name: "memory.alloc",
        summary: "new storage: a buffer or an image2d texture",
        doc: "`%m = memory.alloc {slot = S} : () -> !memory.buffer<N, f32>`: new storage of the\n\
              result type, zero-filled by the reference executor (back ends may leave it\n\
              undefined: every launch writes its whole output or guards it to zero).\n\
              \n\
              **Result:** `!memory.buffer<N, f32|i32>` or `!memory.image2d<[W, H], f32|f16>`,\n\
              written in the signature (it cannot be inferred).\n\
              \n\
              **Attributes:** `slot` (optional): the storage slot `plan-memory` assigned; allocations\n\
              and uploads with the same slot share storage, their lifetimes are disjoint, and they\n\
              are images of one texel format, the largest containing every other in both extents\n\
              (a smaller one uses its top-left corner), or buffers of one element type (a slot is\n\
              as large as its largest tenant).\n\
              \n\
              **Verifier:** the result is a well-formed memory type; `slot` ≥ 0.\n\
              \n\
              **FBLayout class:** none (not a tensor op).",
        operands: Arity::Exactly(0),
        results: Arity::Exactly(1),
        attrs: &[AttrDef::optional("slot", AttrKind::Int, "none", "storage slot assigned by plan-memory")],
        traits: EFFECTS,
        class: None,
        infer: infer_alloc,
    },
    OpDef {
        name: "memory.dealloc",
        summary: "end of a storage's lifetime",
        doc: "`memory.dealloc %m : (!memory.buffer<N, f32>) -> ()`: `%m` is not used after this\n\
              point; its slot may be reused.\n\
              \n\
              **Operand:** `m` — a memory value.\n\
              \n\
              **Verifier:** `m` has a memory type; no op after it uses `m` (a second dealloc\n\
              included).\n\
              \n\
              **FBLayout class:** none.",
        operands: Arity::Exactly(1),
        results: Arity::Exactly(0),
        attrs: &[],
        traits: FREES,
        class: None,
        infer: infer_dealloc,
    },
    OpDef {
        name: "memory.upload",
        summary: "host to device: a tensor placed in new storage by a layout",
        doc: "`%m = memory.upload %t {layout = L} : (tensor<..>) -> !memory.buffer<N, f32>`: new\n\
              storage holding `t` placed by layout `L`; elements no tensor element maps to (the\n\
              padding of an R-Tile) are zero.\n\
              \n\
              **Operand:** `t` — a tensor of `f32` or `i32`.\n\
              \n\
              **Result:** with `#layout.linear`, `!memory.buffer<numel, T>` (row-major); with an\n\
              R-Tile, `!memory.image2d<[W, H], f32>` (`[W, H]` its image extent; written as\n\
              `f16`, an image of `f16` texels holding each value rounded to the nearest `f16`),\n\
              or — when the R-Tile says `storage = \"buffer\"`, or the result type is written so\n\
              (an image over the device limits) — `!memory.buffer<4·W·H, f32>` holding the same\n\
              texel array, element `(y·W + x)·4 + c`. Without a signature the result type is the\n\
              first choice.\n\
              \n\
              **Attributes:** `layout` (required): `#layout.linear` or `#layout.rtile<...>`;\n\
              `slot` (optional): the storage slot `plan-memory` assigned, shared with allocations\n\
              and uploads of the same slot as for `memory.alloc`; `stream_from` and `stream_bytes`\n\
              (optional, together): `plan-weight-streaming`'s plan for a weight: loading starts\n\
              during launch `stream_from` (counting the function's launches from 0) and\n\
              `stream_bytes[i]` bytes arrive during launch `stream_from + i`, all before the first\n\
              launch that reads the result; without them the upload is preloaded (on the device\n\
              before the first launch). Back ends and the interpreter may ignore them: they change\n\
              when the bytes arrive, not what is stored.\n\
              \n\
              **Verifier:** `rows` has two entries, `t` has rank ≥ 1, `start` ≥ 0, `count` ≥ 1\n\
              and `start + count` ≤ `t.shape[0]`; `layout` fits `t` (with `rows`: the row\n\
              tile) (see `layout.assign`); the storage type has `t`'s\n\
              element type (an `f16` image holds an `f32` tensor) and the size the layout needs (an R-Tile in an image: extent equal to\n\
              its image extent; in a buffer: `4·W·H` elements; linear: the element count); `slot` ≥ 0;\n\
              `stream_from` and `stream_bytes` come together, `stream_from` ≥ 0, `stream_bytes` is\n\
              non-empty, its entries are ≥ 0 and add up to the result's bytes. (That the loads end\n\
              before the first reading launch is a property of the schedule, checked by\n\
              `fbc_transforms::weight_streaming::simulate_func`.)\n\
              \n\
              **FBLayout class:** none.",
        operands: Arity::Exactly(1),
        results: Arity::Exactly(1),
        attrs: UPLOAD_ATTRS,
        traits: EFFECTS,
        class: None,
        infer: infer_upload,
    },
    OpDef {
        name: "memory.download",
        summary: "device to host: the tensor stored in storage by a layout",
        doc: "`%t = memory.download %m {layout = L} : (!memory.buffer<N, f32>) -> tensor<..>`: the\n\
              tensor that `m` holds in layout `L` (the inverse of `memory.upload`; padding is\n\
              ignored).\n\
              \n\
              **Operand:** `m` — a memory value.\n\
              \n\
              **Result:** a tensor of `f32` or `i32`, written in the signature (it cannot be\n\
              inferred).\n\
              \n\
              **Attributes:** `layout` (required): `#layout.linear` or `#layout.rtile<...>`.\n\
              \n\
              **Verifier:** as `memory.upload`, with the roles of operand and result swapped.\n\
              \n\
              **FBLayout class:** none.",
        operands: Arity::Exactly(1),
        results: Arity::Exactly(1),
        attrs: LAYOUT_ATTRS,
        traits: EFFECTS,
        class: None,
        infer: infer_download,
    },
    OpDef {
        name: "memory.launch",
        summary: "one kernel: a generic loop nest over storage with explicit index maps",
        doc: "`memory.launch %in.., %out {kernel = \"name\", domain = [..], iterators = [..], maps =\n\
              [..], body = \"..\", ..}`: for every point of the parallel sub-domain (row-major), if the\n\
              guard holds, `acc` = `combine` over the reduction sub-domain (row-major) of `body`\n\
              (without reduction dimensions `acc` = `body`), and the output at its map becomes\n\
              `epilogue` (default `acc`); where the guard fails the output becomes 0. `body` and\n\
              `epilogue` are scalar expressions over the operands at their maps (`xK`), buffers at\n\
              explicit offsets (`xK[e]`), domain indices (`dK`) and, in the epilogue, `acc`: see\n\
              `dialects/src/memory/kernel.rs` for the grammar and the value semantics.\n\
              \n\
              **Operands:** the inputs, then the output (last), all memory values.\n\
              \n\
              **Attributes:** `kernel` (required): the kernel name; `source` (optional): the tensor\n\
              ops it computes, `+`-joined; `domain` (required): iteration extents; `iterators`\n\
              (required): `\"parallel\"`, `\"reduction\"`, `\"row\"` or `\"key\"` per dimension, parallel\n\
              first, reduction or row dimensions (not both) after; `maps`\n\
              (required): one index map per operand from the domain to storage coordinates (1 result,\n\
              the element offset, for a buffer; 3, `x, y, c`, for an image); `body` (required);\n\
              `combine` (`\"add\"` or `\"max\"`, exactly when there are reduction dimensions);\n\
              `epilogue` (optional); `guard` and `guard_bounds` (together, optional): an index map of\n\
              the domain and its exclusive upper bounds; `stats` (exactly when there are row\n\
              dimensions): a row kernel's statistics, each `\"COMBINE: BODY\"` or `\"COMBINE: BODY;\n\
              EPILOGUE\"`, computed per parallel point over the row dimensions in order and read as\n\
              `s0, s1, ...` by later statistics and by the body, which is then written at every point;\n\
              `symbols` (optional): `[operand, lo, hi]` per symbol of the maps (`(d0, ..)[s0, ..] ->\n\
              ..`): element 0 of that input (an i32 buffer), read when the launch runs and checked\n\
              to lie in `lo..=hi` (`0 ≤ lo`; outside, the launch is an error and writes nothing);\n\
              `split_k` (optional, an `add` reduction only, 2 to its number of points): a hint that\n\
              back ends running work-groups in parallel cut the reduction into that many chunks and add\n\
              their partial sums in chunk order; the result is the same up to that reassociation, and\n\
              the reference executor ignores it.\n\
              \n\
              **Attention launches.** With `iterators` ending in `\"key\"` (after the query points'\n\
              parallel dimensions and the head dimension's), the launch computes softmax attention\n\
              instead of a body: `attention` = `#memory.attention<scale = F, softcap = F, rope = B,\n\
              window = N>` (required there, and no `body`, `combine`, `epilogue`, `guard` or\n\
              `stats`), operands q, k, v, with `rope` the tables cos and sin, then the symbols'\n\
              buffers, then the output (an f32 buffer), and optionally `causal`: a one-result map\n\
              of the domain and the symbols giving the last key position each query sees. Its\n\
              meaning is three ordinary launches (scores, their row softmax, the weighted values:\n\
              `dialects/src/memory/attention.rs`), which the verifier checks like any launch.\n\
              \n\
              **Verifier:** every operand has a memory type; the domain, iterators, maps and guard\n\
              agree in rank; every map has as many results as its operand has coordinates; `body` and\n\
              `epilogue` parse, refer to existing operands and dimensions, load only from buffers,\n\
              integer-valued offsets and `%` operands, `acc` only in the epilogue, which reads only\n\
              operands whose maps use only parallel dimensions; an integer output gets integer values;\n\
              an image output has a last parallel dimension (a row kernel: a last dimension) of\n\
              extent 4 that is exactly the third result of its map (a work-item writes a whole\n\
              texel); a statistic reads only earlier statistics; no access is proven out of\n\
              bounds: the bounds prover (`dialects/src/memory/bounds.rs`) looks for a point of the\n\
              domain (inside the guard for reads) where a map, the guard or an `xK[e]` offset that\n\
              reads only domain indices is undefined or outside its storage, and names it.\n\
              \n\
              **FBLayout class:** none.",
        operands: Arity::AtLeast(1),
        results: Arity::Exactly(0),
        attrs: &[
            AttrDef::required("kernel", AttrKind::Str, "the kernel name, unique in the module"),
            AttrDef::optional("source", AttrKind::Str, "\"\"", "the tensor ops computed, `+`-joined"),
            AttrDef::required("domain", AttrKind::IntArray, "iteration extents"),
            AttrDef::required("iterators", AttrKind::Any, "\"parallel\" | \"reduction\" | \"row\" | \"key\" per dimension"),
            AttrDef::required("maps", AttrKind::Any, "one index map per operand: domain → storage coordinates"),
            AttrDef::optional("body", AttrKind::Str, "none", "the scalar expression at each point (required but in an attention launch)"),
            AttrDef::optional("attention", AttrKind::Any, "none", "an attention launch's #memory.attention<scale, softcap, rope, window>"),
            AttrDef::optional("causal", AttrKind::Any, "none", "an attention launch's last key position per query: a one-result map"),
            AttrDef::optional("combine", AttrKind::Enum(&["add", "max"]), "none", "how reduction values combine"),
            AttrDef::optional("epilogue", AttrKind::Str, "\"acc\"", "applied to the reduction result"),
            AttrDef::optional("guard", AttrKind::Any, "none", "index map whose results must be in bounds"),
            AttrDef::optional("guard_bounds", AttrKind::IntArray, "none", "exclusive upper bounds of the guard"),
            AttrDef::optional("split_k", AttrKind::Int, "none", "split-K hint: chunks of the reduction summed by work-groups of their own, added in chunk order"),
            AttrDef::optional("stats", AttrKind::Any, "none", "a row kernel's statistics, in order"),
            AttrDef::optional("symbols", AttrKind::Any, "none", "the maps' symbols: [operand, lo, hi] each"),
        ],
        traits: EFFECTS,
        class: None,
        infer: infer_launch,
    },
];

/// The result types the op declares, when it exists already (verification, not building).
fn declared(v: &OpView<'_>) -> Option<Vec<Type>> {
    let data = v.module.ops.get(v.op.index())?;
    if !std::ptr::eq(data.attrs.as_ptr(), v.attrs.as_ptr()) && data.attrs != v.attrs {
        return None;
    }
    Some(data.results.iter().map(|&r| v.module.value_type(r).clone()).collect())
}

fn cannot_infer(name: &str, example: &str) -> OpError {
    OpError::new(format!("the result type of `{name}` cannot be inferred; write the signature"))
        .note(format!("for example `{example}`"))
}

fn mem_operand(v: &OpView<'_>, i: usize, name: &str) -> Result<MemType, OpError> {
    let t = v
        .operand_types
        .get(i)
        .ok_or_else(|| OpError::new(format!("`{name}` is missing operand {i}")))?;
    MemType::parse_type(t).map_err(|e| OpError::operand(i, format!("{e} — operand {i} of {name}")))
}

/// A `slot` attribute, where present, is ≥ 0.
fn check_slot(v: &OpView<'_>) -> Result<(), OpError> {
    match v.attr("slot") {
        Some(Attr::Int(s)) if *s < 0 => {
            Err(OpError::attr("slot", format!("`slot` must be ≥ 0, found {s}")))
        }
        _ => Ok(()),
    }
}

fn infer_alloc(v: &OpView<'_>) -> Result<Vec<Type>, OpError> {
    const NAME: &str = "memory.alloc";
    check_slot(v)?;
    let Some(types) = declared(v) else {
        return Err(cannot_infer(NAME, "%m = memory.alloc : () -> !memory.buffer<1024, f32>"));
    };
    if let [t] = types.as_slice() {
        if !t.is_unknown() {
            MemType::parse_type(t).map_err(|e| OpError {
                place: fbc_ir::registry::ErrorPlace::Result(0),
                ..OpError::new(e)
            })?;
        }
    }
    Ok(types)
}

fn infer_dealloc(v: &OpView<'_>) -> Result<Vec<Type>, OpError> {
    mem_operand(v, 0, "memory.dealloc")?;
    Ok(vec![])
}

fn layout_of(v: &OpView<'_>, name: &str) -> Result<Layout, OpError> {
    let a = v
        .attr("layout")
        .ok_or_else(|| OpError::new(format!("`{name}` requires attribute `layout`")))?;
    Layout::from_attr(a).map_err(|e| OpError::attr("layout", format!("{e} — `layout` of {name}")))
}

/// The storage `memory.upload` gives a tensor of type `t` in layout `l` when no type is written:
/// a linear buffer, an image for an R-Tile, or the R-Tile's texel array in a buffer when it says
/// `storage = "buffer"`.
pub fn default_storage(l: &Layout, t: &TensorType) -> Result<MemType, String> {
    if !matches!(t.elem, ElemType::F32 | ElemType::I32 | ElemType::I8) {
        return Err(format!("memory holds f32, i32 or i8 elements, found {t}"));
    }
    l.check_type(t).map_err(|e| e.to_string())?;
    match l {
        Layout::Linear => {
            let n =
                t.numel().ok_or_else(|| format!("{t} has more elements than fit in 64 bits"))?;
            Ok(MemType::buffer(n, t.elem))
        }
        Layout::RTile(r) => {
            if t.elem != ElemType::F32 {
                return Err(format!("an R-Tile holds f32 elements, found {t}"));
            }
            let [w, h] = extent(l, t)?;
            match r.storage {
                Storage::Image2d => Ok(MemType::image(w, h)),
                Storage::Buffer => Ok(MemType::buffer(texels4(w, h, t)?, ElemType::F32)),
            }
        }
    }
}

fn extent(l: &Layout, t: &TensorType) -> Result<[u64; 2], String> {
    l.image_extent(&t.shape)
        .ok_or_else(|| format!("the image extent of {l} for {t} overflows 64 bits"))
}

fn texels4(w: u64, h: u64, t: &TensorType) -> Result<u64, String> {
    w.checked_mul(h)
        .and_then(|n| n.checked_mul(4))
        .ok_or_else(|| format!("the texel array of {t} has more elements than fit in 64 bits"))
}

/// Whether storage `m` can hold a tensor of type `t` in layout `l`: the layout fits the tensor,
/// the element types agree (an `f16` image holds an `f32` tensor, rounded), and the size is what
/// the layout needs (a linear buffer: the element count; an image: the layout's image extent; an
/// R-Tile in a buffer: `4·W·H` elements).
pub fn check_storage(l: &Layout, t: &TensorType, m: MemType) -> Result<(), String> {
    let default = default_storage(l, t)?;
    if m.value_elem() != t.elem {
        return Err(format!("{m} holds {}, but the tensor is {t}", m.elem));
    }
    match (l, m.storage) {
        (Layout::Linear, StorageKind::Buffer { elems }) => {
            let want = default.elems();
            if elems != want {
                return Err(format!("{t} in {l} needs a buffer of {want} elements, found {m}"));
            }
        }
        (_, StorageKind::Image { width, height }) => {
            let [w, h] = extent(l, t)?;
            if [width, height] != [w, h] {
                return Err(format!("{t} in {l} needs an image of [{w}, {h}] texels, found {m}"));
            }
        }
        (Layout::RTile(_), StorageKind::Buffer { elems }) => {
            let [w, h] = extent(l, t)?;
            let want = texels4(w, h, t)?;
            if elems != want {
                return Err(format!(
                    "{t} in {l} needs a buffer of {want} elements (4 × [{w}, {h}] texels), found {m}"
                ));
            }
        }
    }
    Ok(())
}

fn infer_upload(v: &OpView<'_>) -> Result<Vec<Type>, OpError> {
    const NAME: &str = "memory.upload";
    let t = match v.operand_types {
        [Type::Tensor(t)] => t,
        [other] => {
            return Err(OpError::operand(
                0,
                format!("expected a tensor, found {other} — operand 0 (`t`) of {NAME}"),
            ))
        }
        _ => return Err(OpError::new(format!("`{NAME}` takes 1 operand"))),
    };
    check_slot(v)?;
    let l = layout_of(v, NAME)?;
    let stream = check_stream(v)?;
    let tile = upload_rows(v.attrs, t)?.map(|(_, rows)| rows);
    let note = match &tile {
        None => format!("operand 0 (`t`) is {t}"),
        Some(rows) => format!("the row tile {rows} of operand 0 (`t`, {t}) is stored"),
    };
    let t = tile.as_ref().unwrap_or(t);
    let fail =
        |e: String| OpError::attr("layout", format!("{e} — `layout` of {NAME}")).note(note.clone());
    let default = default_storage(&l, t).map_err(fail)?;
    let mut result = default;
    let mut types = vec![default.to_type()];
    if let Some(declared) = declared(v) {
        if let [ty] = declared.as_slice() {
            if let Ok(m) = MemType::parse_type(ty) {
                check_storage(&l, t, m).map_err(fail)?;
                result = m;
                types = declared;
            }
        }
    }
    if let Some(sum) = stream {
        if sum != result.bytes() {
            return Err(OpError::attr(
                "stream_bytes",
                format!(
                    "`stream_bytes` add up to {sum} bytes, but the result {result} has {}",
                    result.bytes()
                ),
            ));
        }
    }
    Ok(types)
}

/// The `rows = [start, count]` of a `memory.upload` with attributes `attrs` whose operand is
/// `t`: the first row and the row tile's type (`t` with axis 0 `count` long), checked
/// (`None` without `rows`).
pub fn upload_rows(
    attrs: &[(String, Attr)],
    t: &TensorType,
) -> Result<Option<(u64, TensorType)>, OpError> {
    let Some(a) = attrs.iter().find(|(k, _)| k == "rows").map(|(_, a)| a) else {
        return Ok(None);
    };
    let bad = |m: String| OpError::attr("rows", format!("{m} — `rows` of memory.upload"));
    let Some([start, count]) = a.as_ints().and_then(|v| <[i64; 2]>::try_from(v).ok()) else {
        return Err(bad(format!("expected [start, count], found {a}")));
    };
    let Some(&n) = t.shape.first() else {
        return Err(bad(format!("the operand {t} has no rows")));
    };
    let (Ok(start), Ok(count)) = (u64::try_from(start), u64::try_from(count)) else {
        return Err(bad(format!("start and count must be ≥ 0, found [{start}, {count}]")));
    };
    if count == 0 || start.checked_add(count).is_none_or(|end| end > n) {
        return Err(bad(format!(
            "rows {start}..{} are not a non-empty range of the operand's {n}",
            start.saturating_add(count)
        ))
        .note(format!("operand 0 (`t`) is {t}")));
    }
    let mut shape = t.shape.to_vec();
    shape[0] = count;
    Ok(Some((start, TensorType::new(shape, t.elem))))
}

/// `stream_from` and `stream_bytes` come together, `stream_from` ≥ 0, `stream_bytes` non-empty
/// with entries ≥ 0; returns their sum (`None` without them).
fn check_stream(v: &OpView<'_>) -> Result<Option<u64>, OpError> {
    match (v.attr("stream_from"), v.attr("stream_bytes")) {
        (None, None) => Ok(None),
        (Some(_), None) => Err(OpError::attr("stream_from", "`stream_from` needs `stream_bytes`")),
        (None, Some(_)) => Err(OpError::attr("stream_bytes", "`stream_bytes` needs `stream_from`")),
        (Some(from), Some(bytes)) => {
            if let Some(f) = from.as_int().filter(|&f| f < 0) {
                return Err(OpError::attr(
                    "stream_from",
                    format!("`stream_from` must be ≥ 0, found {f}"),
                ));
            }
            let bytes = bytes.as_ints().unwrap_or_default();
            if bytes.is_empty() {
                return Err(OpError::attr("stream_bytes", "`stream_bytes` must not be empty"));
            }
            let mut sum = 0u64;
            for b in bytes {
                let b = u64::try_from(b).map_err(|_| {
                    OpError::attr(
                        "stream_bytes",
                        format!("`stream_bytes` entries must be ≥ 0, found {b}"),
                    )
                })?;
                sum = sum.saturating_add(b);
            }
            Ok(Some(sum))
        }
    }
}

fn infer_download(v: &OpView<'_>) -> Result<Vec<Type>, OpError> {
    const NAME: &str = "memory.download";
    let m = mem_operand(v, 0, NAME)?;
    let l = layout_of(v, NAME)?;
    let Some(types) = declared(v) else {
        return Err(cannot_infer(NAME, "%t = memory.download %m {layout = #layout.linear} : (!memory.buffer<16, f32>) -> tensor<4x4xf32>"));
    };
    match types.as_slice() {
        [Type::Tensor(t)] => {
            check_storage(&l, t, m).map_err(|e| {
                OpError::attr("layout", format!("{e} — `layout` of {NAME}"))
                    .note(format!("the result is {t}"))
            })?;
        }
        [Type::Unknown] => {}
        [other] => {
            return Err(OpError {
                place: fbc_ir::registry::ErrorPlace::Result(0),
                ..OpError::new(format!("expected a tensor, found {other} — result 0 of {NAME}"))
            })
        }
        _ => {}
    }
    Ok(types)
}

fn infer_launch(v: &OpView<'_>) -> Result<Vec<Type>, OpError> {
    const NAME: &str = "memory.launch";
    let types = (0..v.operand_types.len())
        .map(|i| mem_operand(v, i, NAME))
        .collect::<Result<Vec<_>, _>>()?;
    let k = Kernel::from_attrs(v.attrs).map_err(|e| at(v, e, NAME))?;
    k.check(&types).map_err(|e| at(v, e, NAME))?;
    if let Some(bad) = k.bounds(&types).violation {
        return Err(OpError::new(bad.to_string()));
    }
    Ok(vec![])
}

/// A kernel error located at its attribute, or at the op when that attribute is absent.
fn at(v: &OpView<'_>, e: super::kernel::KernelError, name: &str) -> OpError {
    if e.attr.is_empty() || v.attr(e.attr).is_none() {
        OpError::new(e.message)
    } else {
        OpError::attr(e.attr, format!("{} — `{}` of {name}", e.message, e.attr))
    }
}

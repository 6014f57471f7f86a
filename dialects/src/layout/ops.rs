//! The layout ops: `layout.assign`, `layout.convert`, `layout.remap`, their verifiers and result
//! types.
//!
//! All three are value-semantics ops on logical tensors: `assign` and `convert` return their
//! operand unchanged (they say where the data lives, not what it is), `remap` reads its operand
//! through an index map. Verifiers never assume the generic verifier ran first (the IR builder
//! calls them to infer result types), so every access is checked.

use fbc_index::IndexMap;
use fbc_ir::types::Shape;
use fbc_ir::{
    Arity, Attr, AttrDef, AttrKind, FbClass, OpDef, OpError, OpTraits, OpView, TensorType, Type,
};

use super::attr::Layout;
use super::map::{eval_map, MapEval};
use crate::memory::bounds::{prove_map, Bound};

pub static OPS: &[OpDef] = &[
    OpDef {
        name: "layout.assign",
        summary: "states the physical layout of a tensor (no data movement)",
        doc: "`%y = layout.assign %x {layout = L}`: `y` is `x`, stored with layout `L`.\n\
              \n\
              The FBLayout passes annotate tensors with it: `rtile-select` assigns the unified\n\
              R-Tile of a tensor right after its definition and makes every user read `y`. It\n\
              never moves data: producing `x` directly in layout `L` is the code generator's job.\n\
              \n\
              **Operand:** `x` — a tensor of any element type.\n\
              \n\
              **Result:** a tensor of `x`'s type.\n\
              \n\
              **Attributes:** `layout` (required): `#layout.linear` or `#layout.rtile<...>`.\n\
              \n\
              **Verifier:** `x` is a tensor; `layout` is a well-formed layout attribute that fits\n\
              `x`'s type (an R-Tile needs rank ≥ 2, `horizontal` one of the last two axes, the exact\n\
              padding, and the right image extent when given).\n\
              \n\
              **FBLayout class:** none. It is an annotation, not an operator: it computes nothing\n\
              and accesses nothing, so Table 1's questions do not apply; `fb-classify` looks\n\
              through it to the tensor it annotates.",
        operands: Arity::Exactly(1),
        results: Arity::Exactly(1),
        attrs: &[AttrDef::required(
            "layout",
            AttrKind::Any,
            "#layout.linear or #layout.rtile<...>",
        )],
        traits: OpTraits::PURE,
        class: None,
        infer: infer_assign,
    },
    OpDef {
        name: "layout.convert",
        summary: "explicit physical conversion between two layouts",
        doc: "`%y = layout.convert %x {from = A, to = B}`: `y` holds the same logical values as `x`,\n\
              moved from layout `A` to layout `B` — the explicit transformation FBLayout tries to\n\
              avoid, kept where tile propagation fails (Sec. 4.3.1) and at graph boundaries.\n\
              \n\
              **Operand:** `x` — a tensor of any element type.\n\
              \n\
              **Result:** a tensor of `x`'s type.\n\
              \n\
              **Attributes:** `from`, `to` (required): layout attributes.\n\
              \n\
              **Verifier:** `x` is a tensor; `from` and `to` are well-formed layouts that fit `x`'s\n\
              type.\n\
              \n\
              **FBLayout class:** FTI-D: like a transpose it reorganizes data; its backward converts\n\
              `dy` from `to` back to `from` (no forward tensor needed), and it reads in one order\n\
              and writes in another (divergent access).",
        operands: Arity::Exactly(1),
        results: Arity::Exactly(1),
        attrs: &[
            AttrDef::required("from", AttrKind::Any, "the layout `x` is stored in"),
            AttrDef::required("to", AttrKind::Any, "the layout of the result"),
        ],
        traits: OpTraits::PURE,
        class: Some(FbClass::FtiD),
        infer: infer_convert,
    },
    OpDef {
        name: "layout.remap",
        summary: "a zero-copy view of a tensor through an index map",
        doc: "`%y = layout.remap %x {map = (d0, ..) -> (e0, ..), shape = [..]}`:\n\
              `y[i0, ..] = x[map(i0, ..)]`, `y` of shape `shape` and `x`'s element type. This is\n\
              what `index-elim` turns reshapes and transposes into (Sec. 4.3.2): consumers read `x`\n\
              through the map instead of a copy.\n\
              \n\
              **Operand:** `x` — a tensor of any element type.\n\
              \n\
              **Result:** `tensor<shape x elem>`.\n\
              \n\
              **Attributes:** `map` (required): an index map without symbols, with one dimension\n\
              per result axis and one result per axis of `x` (`floordiv`, `ceildiv`, `mod` need a\n\
              positive divisor, `mod` is floor modulo, as in MLIR); `shape` (required): dimensions\n\
              ≥ 0.\n\
              \n\
              **Verifier:** `x` is a tensor; `map` is an index map with no symbols, as many\n\
              dimensions as `shape` has entries and as many results as `x` has axes; `shape` entries\n\
              are ≥ 0 and their product fits in 64 bits; the bounds prover\n\
              (`dialects/src/memory/bounds.rs`: interval arithmetic refined by branch and bound,\n\
              never enumerating points) finds no index of the result's box where the map is\n\
              undefined or lands outside `x` — an error names such an index; a map it can neither\n\
              prove nor refute within its budget is checked per element at run time.\n\
              \n\
              **FBLayout class:** FTI-D: it is the index-map form of an FTI-D op (reshape,\n\
              transpose); its backward reads `dy` through the inverse map, with no forward tensor.",
        operands: Arity::Exactly(1),
        results: Arity::Exactly(1),
        attrs: &[
            AttrDef::required("map", AttrKind::Any, "(d0, ..) -> (e0, ..): result index to source index"),
            AttrDef::required("shape", AttrKind::IntArray, "the result shape"),
        ],
        traits: OpTraits::PURE,
        class: Some(FbClass::FtiD),
        infer: infer_remap,
    },
];

fn operand_tensor<'a>(v: &OpView<'a>, name: &str) -> Result<&'a TensorType, OpError> {
    match v.operand_types {
        [Type::Tensor(t)] => Ok(t),
        [other] => Err(OpError::operand(
            0,
            format!("expected a tensor, found {other} — operand 0 (`x`) of {name}"),
        )),
        _ => {
            Err(OpError::new(format!("`{name}` takes 1 operands, found {}", v.operand_types.len())))
        }
    }
}

/// The layout in attribute `key`, checked against `x`'s type.
fn layout_attr(v: &OpView<'_>, name: &str, key: &str, x: &TensorType) -> Result<Layout, OpError> {
    let Some(a) = v.attr(key) else {
        return Err(missing(name, key));
    };
    let l =
        Layout::from_attr(a).map_err(|e| OpError::attr(key, format!("{e} — `{key}` of {name}")))?;
    l.check_type(x).map_err(|e| {
        OpError::attr(key, format!("{e} — `{key}` of {name}"))
            .note(format!("operand 0 (`x`) is {x}"))
    })?;
    Ok(l)
}

/// The generic verifier's message for a missing required attribute (it reports it first; this is
/// for callers of `infer` that skip it).
fn missing(name: &str, key: &str) -> OpError {
    let doc = OPS
        .iter()
        .find(|d| d.name == name)
        .and_then(|d| d.attrs.iter().find(|a| a.name == key))
        .map_or("", |a| a.doc);
    OpError::new(format!("`{name}` requires attribute `{key}`"))
        .note(format!("`{key}` is {}: {doc}", AttrKind::Any.describe()))
}

fn infer_assign(v: &OpView<'_>) -> Result<Vec<Type>, OpError> {
    const NAME: &str = "layout.assign";
    let x = operand_tensor(v, NAME)?;
    layout_attr(v, NAME, "layout", x)?;
    Ok(vec![Type::Tensor(x.clone())])
}

fn infer_convert(v: &OpView<'_>) -> Result<Vec<Type>, OpError> {
    const NAME: &str = "layout.convert";
    let x = operand_tensor(v, NAME)?;
    layout_attr(v, NAME, "from", x)?;
    layout_attr(v, NAME, "to", x)?;
    Ok(vec![Type::Tensor(x.clone())])
}

fn list(xs: &[impl std::fmt::Display]) -> String {
    let items: Vec<String> = xs.iter().map(ToString::to_string).collect();
    format!("[{}]", items.join(", "))
}

fn infer_remap(v: &OpView<'_>) -> Result<Vec<Type>, OpError> {
    const NAME: &str = "layout.remap";
    let x = operand_tensor(v, NAME)?;
    let map: &IndexMap = match v.attr("map") {
        Some(Attr::Map(m)) => m,
        Some(a) => {
            return Err(OpError::attr(
                "map",
                format!(
                    "`map` must be an index map such as (d0, d1) -> (d1, d0), found {} `{a}`",
                    a.kind_name()
                ),
            ))
        }
        None => return Err(missing(NAME, "map")),
    };
    let shape_vals = match v.attr("shape") {
        Some(a) => a.as_ints().ok_or_else(|| {
            OpError::attr(
                "shape",
                format!("`shape` must be an array of integers, found {} `{a}`", a.kind_name()),
            )
        })?,
        None => {
            return Err(OpError::new(format!("`{NAME}` requires attribute `shape`"))
                .note("`shape` is an array of integers: the result shape"))
        }
    };
    let mut shape = Shape::with_capacity(shape_vals.len());
    for (j, &d) in shape_vals.iter().enumerate() {
        let d = u64::try_from(d).map_err(|_| {
            OpError::attr(
                "shape",
                format!("expected a non-negative dimension, found {d} — element {j} of `shape` of {NAME}"),
            )
        })?;
        shape.push(d);
    }
    let result = TensorType::new(shape.clone(), x.elem);
    if result.numel().is_none() {
        return Err(OpError::attr(
            "shape",
            format!("the result {result} of {NAME} has more elements than fit in 64 bits"),
        ));
    }
    if !map.symbols.is_empty() {
        return Err(OpError::attr(
            "map",
            format!(
                "expected an index map without symbols, found {} — `map` of {NAME}",
                map.symbols.len()
            ),
        ));
    }
    if map.dims.len() != shape.len() {
        return Err(OpError::attr(
            "map",
            format!(
                "expected {} dimensions (the rank of `shape`), found {} — `map` of {NAME}",
                shape.len(),
                map.dims.len()
            ),
        )
        .note(format!("`shape` is {}", list(&shape))));
    }
    if map.results.len() != x.rank() {
        return Err(OpError::attr(
            "map",
            format!(
                "expected {} results (the rank of `x`), found {} — `map` of {NAME}",
                x.rank(),
                map.results.len()
            ),
        )
        .note(format!("operand 0 (`x`) is {x}")));
    }
    check_in_bounds(map, &shape, x, NAME)?;
    Ok(vec![Type::Tensor(result)])
}

/// Proves that the map sends every index of `[0, shape)` inside `x`; an index where it is
/// undefined or lands outside proves the map wrong. Unknown (the prover's budget ran out) passes:
/// such reads are checked per element when they run.
fn check_in_bounds(
    map: &IndexMap,
    shape: &[u64],
    x: &TensorType,
    name: &str,
) -> Result<(), OpError> {
    // Indices are i64; a dimension beyond i64 cannot be indexed by a map at all.
    if shape.iter().any(|&d| i64::try_from(d).is_err()) {
        return Ok(());
    }
    let Some((Bound::Violated { point, .. }, _)) = prove_map(map, shape, &x.shape) else {
        return Ok(());
    };
    match eval_map(map, &point) {
        MapEval::Ok(src) => Err(OpError::attr(
            "map",
            format!(
                "the index map sends {} to {}, outside {x} — `map` of {name}",
                list(&point),
                list(&src)
            ),
        )),
        MapEval::Undefined => Err(OpError::attr(
            "map",
            format!(
                "the index map is undefined at {} (a division by a non-positive number, or \
                 an overflow) — `map` of {name}",
                list(&point)
            ),
        )),
        MapEval::Arity => Ok(()), // Checked above.
    }
}

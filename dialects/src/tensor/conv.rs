//! Convolutional-network ops of the Stable Diffusion UNet: `conv2d` and its two backward ops,
//! `group_norm` and its backward op, and nearest `upsample` (whose gradient autodiff builds from
//! `reshape` and `reduce_sum`).
//!
//! The convolution's attributes (`stride`, `padding`, `dilation`, `groups`) are read in one place,
//! [`Conv2dAttrs::read`], by the three convolution ops' verifiers and by every consumer (the
//! interpreter, autodiff), so `"same"` padding and the defaults mean one thing everywhere.

use fbc_ir::{
    Arity, Attr, AttrDef, AttrKind, FbClass, OpDef, OpError, OpTraits, OpView, TensorType, Type,
};

use super::common::{list, tensor_type, Ctx};
use super::DEFAULT_EPS;

/// The convolution attributes shared by `conv2d`, `conv2d_grad_input` and `conv2d_grad_weight`.
const CONV_ATTRS: [AttrDef; 4] = [
    AttrDef::optional("stride", AttrKind::IntArray, "[1, 1]", "[sh, sw], each ≥ 1"),
    AttrDef::optional(
        "padding",
        AttrKind::Any,
        "[0, 0, 0, 0]",
        "[top, left, bottom, right] or [ph, pw] (both sides), each ≥ 0; or \"same\" (stride 1 \
         only): d·(k − 1) in all, the odd one at the bottom and right, as PyTorch",
    ),
    AttrDef::optional("dilation", AttrKind::IntArray, "[1, 1]", "[dh, dw], each ≥ 1"),
    AttrDef::optional("groups", AttrKind::Int, "1", "≥ 1, dividing both C and O"),
];

/// The attributes of the convolution's backward ops: the forward shape they differentiate
/// towards, then the forward op's.
const CONV_GRAD_ATTRS: [AttrDef; 5] = [
    AttrDef::required(
        "shape",
        AttrKind::IntArray,
        "the forward operand's shape: the input's [N, C, H, W] or the weight's [O, C/groups, KH, KW]",
    ),
    CONV_ATTRS[0],
    CONV_ATTRS[1],
    CONV_ATTRS[2],
    CONV_ATTRS[3],
];

/// The rules every convolution op's verifier enforces, for the docs.
macro_rules! conv_rules {
    () => {
        "**Attributes:** `stride = [sh, sw]` (default `[1, 1]`), `padding` (default\n\
         `[0, 0, 0, 0]`: an array `[top, left, bottom, right]`, an array `[ph, pw]` meaning\n\
         `[ph, pw, ph, pw]`, or the string `\"same\"`: with stride 1, `dh·(KH − 1)` rows in all,\n\
         `⌊·/2⌋` at the top and the rest at the bottom, likewise for columns, as PyTorch's\n\
         `padding=\"same\"`), `dilation = [dh, dw]` (default `[1, 1]`), `groups` (default 1).\n\
         \n\
         **Verifier:** `stride` and `dilation` have two entries ≥ 1; `padding` has two or four\n\
         entries ≥ 0 or is `\"same\"`, which needs stride `[1, 1]`; `groups ≥ 1` divides `C` and\n\
         `O`; `x` is `[N, C, H, W]` and `w` is `[O, C/groups, KH, KW]`; the dilated kernel\n\
         `dh·(KH − 1) + 1` fits in the padded height `H + top + bottom` (likewise for widths).\n"
    };
}

/// A convolution's padding as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Padding {
    /// `[top, left, bottom, right]`.
    Explicit([u64; 4]),
    /// `"same"`: the output has the input's spatial size (stride 1).
    Same,
}

/// The checked attributes of a convolution op.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conv2dAttrs {
    /// `[sh, sw]`, each ≥ 1.
    pub stride: [u64; 2],
    /// `[dh, dw]`, each ≥ 1.
    pub dilation: [u64; 2],
    pub padding: Padding,
    /// ≥ 1 (whether it divides the channels is checked against the shapes).
    pub groups: u64,
}

impl Conv2dAttrs {
    /// Reads and checks the attributes of convolution op `op` (its name, for messages) through
    /// `attr`; an error points at the attribute concerned.
    pub fn read<'a>(
        op: &str,
        attr: impl Fn(&str) -> Option<&'a Attr>,
    ) -> Result<Conv2dAttrs, OpError> {
        let pair = |name: &str| -> Result<[u64; 2], OpError> {
            let Some(a) = attr(name) else { return Ok([1, 1]) };
            match a.as_ints().as_deref() {
                Some(&[h, w]) if h >= 1 && w >= 1 => Ok([h.unsigned_abs(), w.unsigned_abs()]),
                _ => Err(OpError::attr(
                    name,
                    format!("expected two integers ≥ 1, found {a} — `{name}` of {op}"),
                )),
            }
        };
        let stride = pair("stride")?;
        let dilation = pair("dilation")?;
        let padding = match attr("padding") {
            None => Padding::Explicit([0; 4]),
            Some(a) if a.as_str() == Some("same") => {
                if stride != [1, 1] {
                    return Err(OpError::attr(
                        "padding",
                        format!(
                            "\"same\" padding needs stride [1, 1], found {} — `padding` of {op}",
                            list(&stride)
                        ),
                    ));
                }
                Padding::Same
            }
            Some(a) => {
                let bad = || {
                    OpError::attr(
                        "padding",
                        format!(
                            "expected [top, left, bottom, right], [ph, pw] or \"same\", found {a} \
                             — `padding` of {op}"
                        ),
                    )
                };
                let ints = a.as_ints().ok_or_else(bad)?;
                if let Some((j, p)) = ints.iter().enumerate().find(|(_, &p)| p < 0) {
                    return Err(OpError::attr(
                        "padding",
                        format!(
                            "expected padding ≥ 0, found {p} — element {j} of `padding` of {op}"
                        ),
                    ));
                }
                let u: Vec<u64> = ints.iter().map(|p| p.unsigned_abs()).collect();
                match u[..] {
                    [h, w] => Padding::Explicit([h, w, h, w]),
                    [t, l, b, r] => Padding::Explicit([t, l, b, r]),
                    _ => return Err(bad()),
                }
            }
        };
        let groups = match attr("groups") {
            None => 1,
            Some(a) => match a.as_int() {
                Some(g) if g >= 1 => g.unsigned_abs(),
                _ => {
                    return Err(OpError::attr(
                        "groups",
                        format!("expected an integer ≥ 1, found {a} — `groups` of {op}"),
                    ))
                }
            },
        };
        Ok(Conv2dAttrs { stride, dilation, padding, groups })
    }

    /// `[top, left, bottom, right]` for a `[KH, KW]` kernel.
    pub fn pads(&self, kernel: [u64; 2]) -> [u64; 4] {
        match self.padding {
            Padding::Explicit(p) => p,
            Padding::Same => {
                let total = |a: usize| self.dilation[a].saturating_mul(kernel[a].saturating_sub(1));
                let (th, tw) = (total(0), total(1));
                [th / 2, tw / 2, th - th / 2, tw - tw / 2]
            }
        }
    }

    /// The dilated extent `d·(k − 1) + 1` of the kernel along spatial axis `a`.
    pub fn extent(&self, kernel: [u64; 2], a: usize) -> u64 {
        self.dilation[a].saturating_mul(kernel[a].saturating_sub(1)).saturating_add(1)
    }

    /// The output's `[OH, OW]` for an `[H, W]` input and `[KH, KW]` kernel:
    /// `(H + top + bottom − dh·(KH − 1) − 1) / sh + 1`; the padded input per axis and the dilated
    /// kernel's extent, as an error, where the kernel does not fit.
    pub fn output(&self, input: [u64; 2], kernel: [u64; 2]) -> Result<[u64; 2], (usize, u64, u64)> {
        let p = self.pads(kernel);
        let mut out = [0; 2];
        for a in 0..2 {
            let padded = input[a].saturating_add(p[a]).saturating_add(p[a + 2]);
            let ext = self.extent(kernel, a);
            if kernel[a] == 0 || ext > padded {
                return Err((a, padded, ext));
            }
            out[a] = (padded - ext) / self.stride[a] + 1;
        }
        Ok(out)
    }
}

/// Where a convolution op's input or weight shape comes from: an operand, or its `shape`
/// attribute (the backward ops' forward shape).
#[derive(Clone, Copy)]
enum Src {
    Operand(usize),
    Shape,
}

impl Src {
    fn err(self, cx: &Ctx<'_, '_>, what: &str, msg: &str) -> OpError {
        match self {
            Src::Operand(i) => OpError::operand(i, format!("{msg} — {}", cx.what(i))),
            Src::Shape => {
                OpError::attr("shape", format!("{msg} — `shape` ({what}) of {}", cx.name))
            }
        }
    }
}

/// Checks a convolution of an `x` of shape `xs` (from `xsrc`) with a `w` of shape `ws` (from
/// `wsrc`) under the op's attributes; returns the attributes and the output shape.
fn check_conv(
    cx: &Ctx<'_, '_>,
    xs: &[u64],
    xsrc: Src,
    ws: &[u64],
    wsrc: Src,
) -> Result<(Conv2dAttrs, [u64; 4]), OpError> {
    let attrs = Conv2dAttrs::read(cx.name, |n| cx.v.attr(n))?;
    let rank4 = |s: &[u64], src: Src, what: &str, layout: &str| -> Result<[u64; 4], OpError> {
        <[u64; 4]>::try_from(s).map_err(|_| {
            src.err(cx, what, &format!("expected rank 4 {layout}, found rank {}", s.len()))
        })
    };
    let [n, c, h, w] = rank4(xs, xsrc, "the input", "[N, C, H, W]")?;
    let [o, cg, kh, kw] = rank4(ws, wsrc, "the weight", "[O, C/groups, KH, KW]")?;
    let g = attrs.groups;
    for (what, count) in [("input", c), ("output", o)] {
        if count % g != 0 {
            return Err(OpError::attr(
                "groups",
                format!(
                    "groups = {g} does not divide the {count} {what} channels — `groups` of {}",
                    cx.name
                ),
            ));
        }
    }
    if cg != c / g {
        return Err(wsrc.err(
            cx,
            "the weight",
            &format!(
                "expected {} input channels per group (C / groups = {c} / {g}), found {cg}",
                c / g
            ),
        ));
    }
    let [oh, ow] = attrs.output([h, w], [kh, kw]).map_err(|(a, padded, ext)| {
        let axis = ["height", "width"][a];
        wsrc.err(
            cx,
            "the weight",
            &format!(
                "the dilated kernel {axis} {ext} is larger than the padded input {axis} {padded}"
            ),
        )
    })?;
    Ok((attrs, [n, o, oh, ow]))
}

/// The `shape` attribute of a backward op: four dimensions ≥ 0.
fn shape_attr(cx: &Ctx<'_, '_>) -> Result<Vec<u64>, OpError> {
    let s = cx.req_ints("shape")?;
    Ok(cx.dims("shape", &s)?.to_vec())
}

/// `dy` (operand `i`) must be the convolution's output `[N, O, OH, OW]`.
fn check_dy(
    cx: &Ctx<'_, '_>,
    i: usize,
    out: [u64; 4],
    elem: fbc_ir::ElemType,
) -> Result<(), OpError> {
    let dy = cx.tensor(i)?;
    cx.expect_type(
        i,
        dy,
        &tensor_type(&out, elem),
        "`dy` has the shape of the forward convolution's output [N, O, OH, OW]",
    )
}

/// Checks `x` `[N, C, ...]` (operand 0) and the per-channel `params` (`[C]`) of a group norm and
/// its `groups` and `eps`; returns `x`.
fn check_group_norm<'a>(cx: &Ctx<'_, 'a>, params: &[usize]) -> Result<&'a TensorType, OpError> {
    let x = cx.float_tensor(0)?;
    cx.rank_at_least(0, x, 2)?;
    let c = x.shape[1];
    let groups = cx.req_int("groups")?;
    if groups < 1 || c % groups.unsigned_abs() != 0 {
        return Err(OpError::attr(
            "groups",
            format!(
                "expected an integer ≥ 1 dividing the {c} channels, found {groups} — `groups` of {}",
                cx.name
            ),
        )
        .note(format!("{} is {x}; its channels are dimension 1", cx.role(0))));
    }
    let want = tensor_type(&[c], x.elem);
    for &p in params {
        let t = cx.tensor(p)?;
        let why = format!("{} has shape [C] = [{c}]: `x` is {x}", cx.role(p));
        cx.expect_type(p, t, &want, why)?;
    }
    cx.eps(DEFAULT_EPS)?;
    Ok(x)
}

pub static OPS: &[OpDef] = &[
    OpDef {
        name: "tensor.conv2d",
        summary: "2-D convolution (cross-correlation) of NCHW images, with optional bias",
        doc: concat!(
            "`out[n, o, i, j] = bias[o] + Σ_{c, p, q} x[n, g·C/groups + c, i·sh + p·dh − top,\n\
             j·sw + q·dw − left] · w[o, c, p, q]`, where `g = o / (O/groups)` is the output's group,\n\
             `c` runs over `C/groups`, `p` over `KH`, `q` over `KW`, and input positions outside\n\
             `x` read 0 (zero padding). PyTorch's `conv2d`.\n\
             \n\
             **Operands:** `x` — a float tensor `[N, C, H, W]`; `w` — `[O, C/groups, KH, KW]`,\n\
             `x`'s element type; optionally `bias` — `[O]`, `x`'s element type.\n\
             \n\
             **Result:** `[N, O, OH, OW]` of `x`'s element type, with\n\
             `OH = (H + top + bottom − dh·(KH − 1) − 1) / sh + 1` and likewise `OW`.\n\
             \n",
            conv_rules!(),
            "`bias`, when present, is exactly `tensor<O x elem>`.\n\
             \n\
             **Lowering:** one contraction over `[N, O, OH, OW | C/groups, KH, KW]`, body\n\
             `x0 * x1` under a `select` on the domain indices that reads nothing at a padding tap\n\
             (none where no tap can fall outside `x`), the bias as the epilogue `acc + x2`.\n\
             \n\
             **FBLayout class:** FTD-D (paper Table 1, Conv2D): the backward needs `x` and `w`;\n\
             the forward reduces `x` over `(C, KH, KW)`, the weight gradient over `(N, OH, OW)`."
        ),
        operands: Arity::Between(2, 3),
        results: Arity::Exactly(1),
        attrs: &CONV_ATTRS,
        traits: OpTraits::PURE,
        class: Some(FbClass::FtdD),
        infer: infer_conv2d,
    },
    OpDef {
        name: "tensor.conv2d_grad_input",
        summary: "adjoint of conv2d with respect to its input",
        doc: concat!(
            "`dx[n, g·C/groups + c, h, v] = Σ dy[n, o, i, j] · w[o, c, p, q]` over the output\n\
             channels `o` of group `g` and all `(i, j, p, q)` with `i·sh + p·dh − top = h` and\n\
             `j·sw + q·dw − left = v`: the transposed convolution.\n\
             \n\
             **Operands:** `dy` — the gradient of the output `[N, O, OH, OW]`; `w` — the forward\n\
             weight `[O, C/groups, KH, KW]`.\n\
             \n\
             **Result:** `dx`, `tensor<shape x elem>` with `dy`'s element type.\n\
             \n\
             **Attributes:** `shape` (required): the forward input's `[N, C, H, W]` (the output\n\
             size does not determine it: the division by the stride rounds down); the others as\n\
             the forward op's.\n\
             \n",
            conv_rules!(),
            "`dy` is exactly the forward output's type.\n\
             \n\
             **FBLayout class:** FTD-D: it reads the forward `w`, reducing over `O` where the\n\
             forward reduces over `C`."
        ),
        operands: Arity::Exactly(2),
        results: Arity::Exactly(1),
        attrs: &CONV_GRAD_ATTRS,
        traits: OpTraits::PURE,
        class: Some(FbClass::FtdD),
        infer: infer_conv2d_grad_input,
    },
    OpDef {
        name: "tensor.conv2d_grad_weight",
        summary: "adjoint of conv2d with respect to its weight",
        doc: concat!(
            "`dw[o, c, p, q] = Σ_{n, i, j} dy[n, o, i, j] · x[n, g·C/groups + c, i·sh + p·dh − top,\n\
             j·sw + q·dw − left]` (`g = o / (O/groups)`; positions outside `x` read 0).\n\
             \n\
             **Operands:** `x` — the forward input `[N, C, H, W]`; `dy` — the gradient of the\n\
             output `[N, O, OH, OW]`.\n\
             \n\
             **Result:** `dw`, `tensor<shape x elem>` with `x`'s element type.\n\
             \n\
             **Attributes:** `shape` (required): the forward weight's `[O, C/groups, KH, KW]`;\n\
             the others as the forward op's.\n\
             \n",
            conv_rules!(),
            "`dy` is exactly the forward output's type.\n\
             \n\
             **FBLayout class:** FTD-D: it reads the forward `x`, reducing over `(N, OH, OW)`\n\
             where the forward reduces over `(C, KH, KW)`."
        ),
        operands: Arity::Exactly(2),
        results: Arity::Exactly(1),
        attrs: &CONV_GRAD_ATTRS,
        traits: OpTraits::PURE,
        class: Some(FbClass::FtdD),
        infer: infer_conv2d_grad_weight,
    },
    OpDef {
        name: "tensor.group_norm",
        summary: "group normalization over channel groups and spatial positions, with scale and shift",
        doc: "`y[n, c, s...] = (x[n, c, s...] − μ[n, k]) / √(σ²[n, k] + eps) · gamma[c] + beta[c]`,\n\
              where `k = c / (C/groups)` is the channel's group and `μ`, the biased `σ²` are taken\n\
              over the group's `C/groups` channels and every spatial position `s...`.\n\
              PyTorch's `GroupNorm`.\n\
              \n\
              **Operands:** `x` — a float tensor `[N, C, ...]` of rank ≥ 2; `gamma`, `beta` — `[C]`,\n\
              `x`'s element type.\n\
              \n\
              **Result:** a tensor of `x`'s type.\n\
              \n\
              **Attributes:** `groups` (integer, required); `eps` (float, default `1.0e-5`).\n\
              \n\
              **Verifier:** `x` is a float tensor of rank ≥ 2; `groups ≥ 1` divides `C`; `gamma`\n\
              and `beta` are exactly `tensor<C x elem>`; `eps` is finite and ≥ 0.\n\
              \n\
              **Lowering:** as `tensor.layernorm` over rows `[N, groups | C/groups, spatial...]`:\n\
              one row kernel where the result is a buffer, else the mean and `1/√(σ² + eps)`\n\
              into `[N, groups]` temporaries and an elementwise kernel.\n\
              \n\
              **FBLayout class:** FTD-D, as BatchNorm and LayerNorm in Table 1: the backward needs\n\
              `x` and `gamma`; the forward reduces over `(C/groups, spatial)` per sample, `dgamma`\n\
              and `dbeta` over `(N, spatial)` per channel.",
        operands: Arity::Exactly(3),
        results: Arity::Exactly(1),
        attrs: &[NORM_GROUPS, super::EPS],
        traits: OpTraits::PURE,
        class: Some(FbClass::FtdD),
        infer: infer_group_norm,
    },
    OpDef {
        name: "tensor.group_norm_grad",
        summary: "adjoint of group_norm: (dx, dgamma, dbeta)",
        doc: "Per sample and group of `m = (C/groups)·spatial` elements, with `x̂ = (x − μ)·r`,\n\
              `r = 1/√(σ² + eps)` and `g = dy · gamma[c]`:\n\
              - `dx = r · (g − mean(g) − x̂ · mean(g · x̂))`, means over the group;\n\
              - `dgamma[c] = Σ_{n, s...} dy · x̂`;\n\
              - `dbeta[c] = Σ_{n, s...} dy`.\n\
              \n\
              **Operands:** `x` — the forward input `[N, C, ...]`; `gamma` — `[C]`; `dy` — the\n\
              gradient of the output, of `x`'s type.\n\
              \n\
              **Results:** `dx` (`x`'s type), `dgamma` and `dbeta` (`gamma`'s type).\n\
              \n\
              **Attributes:** `groups`, `eps`: the forward op's.\n\
              \n\
              **Verifier:** as `tensor.group_norm` for `x`, `gamma`, `groups` and `eps`; `dy` has\n\
              exactly `x`'s type.\n\
              \n\
              **FBLayout class:** FTD-D: it reads the forward `x` and `gamma`, reducing per group\n\
              for `dx` and per channel across samples for `dgamma`, `dbeta`.",
        operands: Arity::Exactly(3),
        results: Arity::Exactly(3),
        attrs: &[NORM_GROUPS, super::EPS],
        traits: OpTraits::PURE,
        class: Some(FbClass::FtdD),
        infer: infer_group_norm_grad,
    },
    OpDef {
        name: "tensor.upsample",
        summary: "nearest-neighbour upsampling of NCHW images by an integer scale",
        doc: "`out[n, c, i, j] = x[n, c, i / scale, j / scale]` (integer division).\n\
              \n\
              **Operand:** `x` — a float tensor `[N, C, H, W]`.\n\
              \n\
              **Result:** `[N, C, H·scale, W·scale]` of `x`'s element type.\n\
              \n\
              **Attributes:** `scale` (integer, default 2, ≥ 1); `mode` (`\"nearest\"`, the\n\
              default and only mode).\n\
              \n\
              **Verifier:** `x` is a float tensor of rank 4; `scale ≥ 1`.\n\
              \n\
              **Gradient:** autodiff sums `dy` over each `scale × scale` block: `reshape` to\n\
              `[N, C, H, scale, W, scale]`, then `reduce_sum` over axes 3 and 5.\n\
              \n\
              **Lowering:** one copy kernel reading `x[n, c, i floordiv scale, j floordiv scale]`.\n\
              \n\
              **FBLayout class:** FTI-D: the backward needs no forward tensor, and sums blocks\n\
              where the forward replicates elements.",
        operands: Arity::Exactly(1),
        results: Arity::Exactly(1),
        attrs: &[
            AttrDef::optional("scale", AttrKind::Int, "2", "the integer factor of H and W, ≥ 1"),
            AttrDef::optional(
                "mode",
                AttrKind::Enum(&["nearest"]),
                "\"nearest\"",
                "\"nearest\": each input pixel fills a scale × scale block",
            ),
        ],
        traits: OpTraits::PURE,
        class: Some(FbClass::FtiD),
        infer: infer_upsample,
    },
];

/// `groups` of group norms.
const NORM_GROUPS: AttrDef =
    AttrDef::required("groups", AttrKind::Int, "the number of channel groups, ≥ 1, dividing C");

fn infer_conv2d(v: &OpView<'_>) -> Result<Vec<Type>, OpError> {
    let cx = Ctx::new(v, "tensor.conv2d", &["x", "w", "bias"], Arity::Between(2, 3))?;
    let x = cx.float_tensor(0)?;
    let w = cx.tensor(1)?;
    cx.same_elem(1, w, 0)?;
    let (_, out) = check_conv(&cx, &x.shape, Src::Operand(0), &w.shape, Src::Operand(1))?;
    if v.operand_types.len() == 3 {
        let b = cx.tensor(2)?;
        let why = format!("`bias` has one entry per output channel: `w` is {w}");
        cx.expect_type(2, b, &tensor_type(&[out[1]], x.elem), why)?;
    }
    cx.done(vec![tensor_type(&out, x.elem)])
}

fn infer_conv2d_grad_input(v: &OpView<'_>) -> Result<Vec<Type>, OpError> {
    let cx = Ctx::new(v, "tensor.conv2d_grad_input", &["dy", "w"], Arity::Exactly(2))?;
    let dy = cx.float_tensor(0)?;
    let w = cx.tensor(1)?;
    cx.same_elem(1, w, 0)?;
    let xs = shape_attr(&cx)?;
    let (_, out) = check_conv(&cx, &xs, Src::Shape, &w.shape, Src::Operand(1))?;
    check_dy(&cx, 0, out, dy.elem)?;
    cx.done(vec![tensor_type(&xs, dy.elem)])
}

fn infer_conv2d_grad_weight(v: &OpView<'_>) -> Result<Vec<Type>, OpError> {
    let cx = Ctx::new(v, "tensor.conv2d_grad_weight", &["x", "dy"], Arity::Exactly(2))?;
    let x = cx.float_tensor(0)?;
    let ws = shape_attr(&cx)?;
    let (_, out) = check_conv(&cx, &x.shape, Src::Operand(0), &ws, Src::Shape)?;
    check_dy(&cx, 1, out, x.elem)?;
    cx.done(vec![tensor_type(&ws, x.elem)])
}

fn infer_group_norm(v: &OpView<'_>) -> Result<Vec<Type>, OpError> {
    let cx = Ctx::new(v, "tensor.group_norm", &["x", "gamma", "beta"], Arity::Exactly(3))?;
    let x = check_group_norm(&cx, &[1, 2])?;
    cx.done(vec![x.clone()])
}

fn infer_group_norm_grad(v: &OpView<'_>) -> Result<Vec<Type>, OpError> {
    let cx = Ctx::new(v, "tensor.group_norm_grad", &["x", "gamma", "dy"], Arity::Exactly(3))?;
    let x = check_group_norm(&cx, &[1])?;
    let gamma = cx.tensor(1)?;
    let dy = cx.tensor(2)?;
    cx.same_type(2, dy, 0)?;
    cx.done(vec![x.clone(), gamma.clone(), gamma.clone()])
}

fn infer_upsample(v: &OpView<'_>) -> Result<Vec<Type>, OpError> {
    let cx = Ctx::new(v, "tensor.upsample", &["x"], Arity::Exactly(1))?;
    let x = cx.float_tensor(0)?;
    cx.rank_exactly(0, x, 4, "[N, C, H, W]")?;
    cx.str("mode", AttrKind::Enum(&["nearest"]), "nearest")?;
    let scale = cx.int("scale", 2)?;
    if scale < 1 {
        return Err(OpError::attr(
            "scale",
            format!("expected an integer ≥ 1, found {scale} — `scale` of tensor.upsample"),
        ));
    }
    let s = scale.unsigned_abs();
    let [n, c, h, w] = [x.shape[0], x.shape[1], x.shape[2], x.shape[3]];
    let (Some(oh), Some(ow)) = (h.checked_mul(s), w.checked_mul(s)) else {
        return Err(OpError::attr(
            "scale",
            format!(
                "{x} upsampled by {s} has a dimension beyond 64 bits — `scale` of tensor.upsample"
            ),
        ));
    };
    cx.done(vec![tensor_type(&[n, c, oh, ow], x.elem)])
}

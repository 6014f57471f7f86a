//! One op → its logical kernels: domain, iterators, body, and per operand a map from the domain
//! to the operand's logical index.
//!
//! Numbers follow the reference kernels (`runtime/src/reference/`): the same formulas in the same
//! association, and reductions in row-major order over the reduced axes (the reference's
//! summation order). Ops that need several passes over a row (softmax, the normalisations,
//! cross-entropy's gradient and the normalisations' gradients) are one row kernel where their
//! result can take one ([`Lower::row_output`]): its statistics are computed per row in the
//! launch, in the same order and association as the separate passes. Elsewhere, and for the
//! statistics other kernels read too (the norms' weight gradients), they are computed into small
//! linear temporaries first.

use fbc_dialects::kind::{FuncOp as F, LayoutOp as L, OpKind as K, TensorOp as T};
use fbc_dialects::layout::{Intra, Layout, Pack};
use fbc_dialects::memory::{
    Attention, Combine, Scalar, ScalarBin as B, ScalarUn as U, Stat, StorageKind, Symbol,
};
use fbc_index::{BinOp as IndexOp, Expr};
use fbc_ir::{Attr, Diagnostic, ElemType, Module, Op, Span, Value};

use super::{
    dim, domain_of, identity, located, symbol, value_name, Access, LKernel, Lower, Map, Operand,
    Tid,
};
use crate::index_elim::maps::{broadcast_results, reshape_map, transpose_map};

mod conv;

// ----- scalar builders -----

fn x(k: usize) -> Scalar {
    Scalar::In(k)
}
fn f(v: f64) -> Scalar {
    Scalar::Float(v)
}
fn dk(k: usize) -> Scalar {
    Scalar::Dim(k)
}
fn int(v: i64) -> Scalar {
    Scalar::Int(v)
}
fn un(op: U, a: Scalar) -> Scalar {
    Scalar::Un(op, Box::new(a))
}
fn bin(op: B, a: Scalar, b: Scalar) -> Scalar {
    Scalar::Bin(op, Box::new(a), Box::new(b))
}
fn add(a: Scalar, b: Scalar) -> Scalar {
    bin(B::Add, a, b)
}
fn sub(a: Scalar, b: Scalar) -> Scalar {
    bin(B::Sub, a, b)
}
fn mul(a: Scalar, b: Scalar) -> Scalar {
    bin(B::Mul, a, b)
}
fn div(a: Scalar, b: Scalar) -> Scalar {
    bin(B::Div, a, b)
}
fn select(c: Scalar, a: Scalar, b: Scalar) -> Scalar {
    Scalar::Select(Box::new(c), Box::new(a), Box::new(b))
}
/// `1 / sqrt(v)`, as the reference computes `sqrt().recip()`.
/// `a ^ b` as C's `pow` from the payload language's operators: `e^(b·ln|a|)`, negated for a
/// negative base with an odd integral exponent, NaN for a negative base with a fractional one,
/// and 1 whenever `b = 0`.
fn pow(a: Scalar, b: Scalar) -> Scalar {
    let magnitude = un(U::Exp, mul(b.clone(), un(U::Log, un(U::Abs, a.clone()))));
    let integral = bin(B::Eq, un(U::Floor, b.clone()), b.clone());
    let odd = bin(B::Eq, sub(b.clone(), mul(f(2.0), un(U::Floor, mul(b.clone(), f(0.5))))), f(1.0));
    let negative_base = select(
        integral,
        select(odd, un(U::Neg, magnitude.clone()), magnitude.clone()),
        div(f(0.0), f(0.0)),
    );
    select(bin(B::Eq, b, f(0.0)), f(1.0), select(bin(B::Lt, a, f(0.0)), negative_base, magnitude))
}

fn rsqrt(v: Scalar) -> Scalar {
    div(f(1.0), un(U::Sqrt, v))
}
/// Row statistic `k` of a row kernel.
fn sk(k: usize) -> Scalar {
    Scalar::Stat(k)
}
fn stat(combine: Combine, body: Scalar, epilogue: Option<Scalar>) -> Stat {
    Stat { combine, body, epilogue }
}
/// `acc / n` (a mean).
fn mean_of(n: f64) -> Option<Scalar> {
    Some(div(Scalar::Acc, f(n)))
}
/// `1 / sqrt(acc / n + eps)` (a reciprocal RMS or standard deviation).
fn rstd_of(n: f64, eps: f64) -> Option<Scalar> {
    Some(rsqrt(add(div(Scalar::Acc, f(n)), f(eps))))
}

const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;
const GELU_CUBIC: f64 = 0.044_715;
const INV_SQRT_2PI: f64 = 0.398_942_280_401_432_7;
const DEFAULT_EPS: f64 = 1e-5;

/// The tensor ops lowered as one pointwise kernel over their operands. A pattern: the arm of
/// [`Lowerer::lower_op`] that lowers them, and the ops [`pointwise`] has a body for.
macro_rules! pointwise_ops {
    () => {
        fbc_dialects::tensor_elementwise_vjps!()
            | fbc_dialects::tensor_elementwise_binary!()
            | fbc_dialects::tensor_elementwise_unary!()
            | T::Ge
            | T::Select
            | T::Cast
            | T::Scale
    };
}

/// The body of a pointwise op ([`pointwise_ops!`]) over its operands `x0, x1, ...`; `None` for
/// other ops, and for a `scale` without its factor.
fn pointwise(t: T, op: &fbc_ir::OpData) -> Option<Scalar> {
    let tanh_form = op.attr("approximate").and_then(Attr::as_str) == Some("tanh");
    let half = || f(0.5);
    Some(match t {
        T::Add => add(x(0), x(1)),
        T::Sub => sub(x(0), x(1)),
        T::Mul => mul(x(0), x(1)),
        T::Div => div(x(0), x(1)),
        T::Max => bin(B::Max, x(0), x(1)),
        T::Min => bin(B::Min, x(0), x(1)),
        T::Ge => select(bin(B::Ge, x(0), x(1)), f(1.0), f(0.0)),
        T::Select => select(bin(B::Ne, x(0), f(0.0)), x(1), x(2)),
        T::Pow => pow(x(0), x(1)),
        T::Erf => un(U::Erf, x(0)),
        // Loads convert to f32 and stores round to the output's type.
        T::Cast => x(0),
        T::Neg => un(U::Neg, x(0)),
        T::Exp => un(U::Exp, x(0)),
        T::Log => un(U::Log, x(0)),
        T::Sqrt => un(U::Sqrt, x(0)),
        T::Rsqrt => rsqrt(x(0)),
        T::Tanh => un(U::Tanh, x(0)),
        T::Sigmoid => un(U::Sigmoid, x(0)),
        T::Relu => bin(B::Max, x(0), f(0.0)),
        T::Silu => mul(x(0), un(U::Sigmoid, x(0))),
        T::Scale => mul(x(0), f(op.attr("factor").and_then(Attr::as_float)?)),
        T::Gelu if tanh_form => {
            let inner =
                mul(f(SQRT_2_OVER_PI), add(x(0), mul(mul(mul(f(GELU_CUBIC), x(0)), x(0)), x(0))));
            mul(mul(half(), x(0)), add(f(1.0), un(U::Tanh, inner)))
        }
        T::Gelu => mul(
            mul(half(), x(0)),
            add(f(1.0), un(U::Erf, mul(x(0), f(std::f64::consts::FRAC_1_SQRT_2)))),
        ),
        T::GeluGrad if tanh_form => {
            let v = || x(0);
            let t = un(
                U::Tanh,
                mul(f(SQRT_2_OVER_PI), add(v(), mul(mul(mul(f(GELU_CUBIC), v()), v()), v()))),
            );
            let du =
                mul(f(SQRT_2_OVER_PI), add(f(1.0), mul(mul(mul(f(3.0), f(GELU_CUBIC)), v()), v())));
            let t2 = || t.clone();
            mul(
                x(1),
                add(
                    mul(half(), add(f(1.0), t2())),
                    mul(mul(mul(half(), v()), sub(f(1.0), mul(t2(), t2()))), du),
                ),
            )
        }
        T::GeluGrad => {
            let v = || x(0);
            let cdf =
                mul(half(), add(f(1.0), un(U::Erf, mul(v(), f(std::f64::consts::FRAC_1_SQRT_2)))));
            let pdf = mul(f(INV_SQRT_2PI), un(U::Exp, mul(mul(f(-0.5), v()), v())));
            mul(x(1), add(cdf, mul(v(), pdf)))
        }
        T::SiluGrad => {
            let s = || un(U::Sigmoid, x(0));
            mul(mul(x(1), s()), add(f(1.0), mul(x(0), sub(f(1.0), s()))))
        }
        T::SigmoidGrad => mul(mul(x(1), x(0)), sub(f(1.0), x(0))),
        T::TanhGrad => mul(x(1), sub(f(1.0), mul(x(0), x(0)))),
        T::ReluGrad => select(bin(B::Gt, x(0), f(0.0)), x(1), f(0.0)),
        _ => return None,
    })
}

/// Normalises an axis attribute against `rank`.
fn axis_of(a: i64, rank: usize, span: Span) -> Result<usize, Diagnostic> {
    let r = rank as i64;
    let k = if a < 0 { a + r } else { a };
    if (0..r).contains(&k) {
        Ok(k as usize)
    } else {
        Err(located(span, format!("axis {a} out of range for rank {rank}")))
    }
}

/// The iteration space of per-row statistics (softmax, the normalisations): reduction and row
/// kernels run over [`red_domain`](RowSpace::red_domain), the statistic's dimensions (at least
/// one) then the row's, and read the input at [`red_full`](RowSpace::red_full).
trait RowSpace {
    /// Shape of a per-row statistic.
    fn stat_shape(&self) -> Vec<u64>;
    /// Parallel dims of a reduction kernel (at least one).
    fn n_par(&self) -> usize;
    /// Domain of a reduction or row kernel.
    fn red_domain(&self) -> Vec<u64>;
    /// Reduction kernel: the input's index.
    fn red_full(&self) -> Map;
    /// Reduction kernel: the statistic's index.
    fn red_stat(&self) -> Map;
}

/// A normalisation's further kernels over its rows: scaled by a per-channel parameter
/// (`gamma`, `beta`), elementwise over the input, and the parameters' gradients as column sums.
trait NormSpace: RowSpace {
    /// Elements per row.
    fn len(&self) -> u64;
    /// Reduction kernel: a parameter's index.
    fn red_param(&self) -> Map;
    /// Elementwise kernel over the input's shape: the statistic's index.
    fn full_stat(&self) -> Map;
    /// Elementwise kernel over the input's shape: a parameter's index.
    fn full_param(&self) -> Map;
    /// Column-sum kernel (`dgamma`): the parameter's dimension, then the others.
    fn col_domain(&self) -> Vec<u64>;
    /// Column-sum kernel: the input's index.
    fn col_full(&self) -> Map;
    /// Column-sum kernel: the statistic's index.
    fn col_stat(&self) -> Map;
}

/// A row-wise op's iteration space around `axis` of `shape`: the statistics tensor has the
/// shape without `axis`; its reduction kernels run over `[rows..., len]`.
struct Rows {
    shape: Vec<u64>,
    axis: usize,
}

impl RowSpace for Rows {
    fn stat_shape(&self) -> Vec<u64> {
        self.shape.iter().enumerate().filter(|(k, _)| *k != self.axis).map(|(_, &n)| n).collect()
    }
    fn n_par(&self) -> usize {
        (self.shape.len() - 1).max(1)
    }
    fn red_domain(&self) -> Vec<u64> {
        let mut dom = self.stat_shape();
        if dom.is_empty() {
            dom.push(1);
        }
        dom.push(self.len());
        dom
    }
    /// The reduced axis is the last dim.
    fn red_full(&self) -> Map {
        let r = self.n_par();
        let mut j = 0;
        (0..self.shape.len())
            .map(|k| {
                if k == self.axis {
                    dim(r)
                } else {
                    j += 1;
                    dim(j - 1)
                }
            })
            .collect()
    }
    fn red_stat(&self) -> Map {
        identity(self.shape.len() - 1)
    }
}

/// The parameters are `[len]`, indexed along the axis.
impl NormSpace for Rows {
    fn len(&self) -> u64 {
        self.shape[self.axis]
    }
    fn red_param(&self) -> Map {
        vec![dim(self.n_par())]
    }
    fn full_stat(&self) -> Map {
        (0..self.shape.len()).filter(|&k| k != self.axis).map(dim).collect()
    }
    fn full_param(&self) -> Map {
        vec![dim(self.axis)]
    }
    /// `[len, other axes...]`.
    fn col_domain(&self) -> Vec<u64> {
        let mut dom = vec![self.len()];
        dom.extend(self.stat_shape());
        dom
    }
    fn col_full(&self) -> Map {
        let mut j = 0;
        (0..self.shape.len())
            .map(|k| {
                if k == self.axis {
                    dim(0)
                } else {
                    j += 1;
                    dim(j)
                }
            })
            .collect()
    }
    fn col_stat(&self) -> Map {
        (1..self.shape.len()).map(dim).collect()
    }
}

/// A group norm's rows: per sample `n` and channel group `g` of `x` `[N, C, S...]`, the
/// `C/groups` channels of the group and every spatial position. Reduction and row kernels run
/// over `[N, groups, C/groups, S...]` (two parallel dims, the rest row dims, in the reference's
/// order); the parameters are `[C]`.
struct Groups {
    shape: Vec<u64>,
    groups: u64,
}

impl Groups {
    /// Channels per group.
    fn per_group(&self) -> u64 {
        self.shape[1] / self.groups.max(1)
    }
    /// `d{g}·(C/groups) + d{c}`: the channel of group `g`'s member `c`.
    fn channel(&self, g: usize, c: usize) -> Expr {
        e_add(e_mul(dim(g), self.per_group() as i64), dim(c))
    }
    /// `d{c} floordiv (C/groups)`: the group of channel `c`.
    fn group_of(&self, c: usize) -> Expr {
        e_floordiv(dim(c), self.per_group() as i64)
    }
}

impl RowSpace for Groups {
    fn stat_shape(&self) -> Vec<u64> {
        vec![self.shape[0], self.groups]
    }
    fn n_par(&self) -> usize {
        2
    }
    fn red_domain(&self) -> Vec<u64> {
        let mut dom = vec![self.shape[0], self.groups, self.per_group()];
        dom.extend(&self.shape[2..]);
        dom
    }
    fn red_full(&self) -> Map {
        let mut m = vec![dim(0), self.channel(1, 2)];
        m.extend((3..self.shape.len() + 1).map(dim));
        m
    }
    fn red_stat(&self) -> Map {
        identity(2)
    }
}

impl NormSpace for Groups {
    fn len(&self) -> u64 {
        self.shape[1..].iter().product::<u64>() / self.groups.max(1)
    }
    fn red_param(&self) -> Map {
        vec![self.channel(1, 2)]
    }
    fn full_stat(&self) -> Map {
        vec![dim(0), self.group_of(1)]
    }
    fn full_param(&self) -> Map {
        vec![dim(1)]
    }
    /// `[C, N, S...]`.
    fn col_domain(&self) -> Vec<u64> {
        let mut dom = vec![self.shape[1], self.shape[0]];
        dom.extend(&self.shape[2..]);
        dom
    }
    fn col_full(&self) -> Map {
        let mut m = vec![dim(1), dim(0)];
        m.extend((2..self.shape.len()).map(dim));
        m
    }
    fn col_stat(&self) -> Map {
        vec![dim(1), self.group_of(0)]
    }
}

impl Lower<'_> {
    /// The shape of value `v`.
    fn shape(&self, v: Value) -> Vec<u64> {
        self.tensor_type(v).map(|t| t.shape.to_vec()).unwrap_or_default()
    }

    /// The tensor result `i` of `op` is written into: the op's `fbc.layout` (single-result ops),
    /// else linear.
    fn output(&mut self, op: Op, i: usize) -> Result<Tid, Diagnostic> {
        let d = self.m.op(op);
        let v = d.results[i];
        let layout = if d.results.len() == 1 {
            d.attr("fbc.layout").and_then(|a| Layout::from_attr(a).ok()).unwrap_or(Layout::Linear)
        } else {
            Layout::Linear
        };
        let t = self.new_tensor(v, &layout, d.span)?;
        self.access.insert(v, Access { t, map: None, via: Vec::new() });
        Ok(t)
    }

    /// A temporary for a statistic of the op's result `v`.
    fn stat(
        &mut self,
        v: Value,
        shape: &[u64],
        suffix: &str,
        span: Span,
    ) -> Result<Tid, Diagnostic> {
        let name = format!("{}_{suffix}", value_name(self.m, v));
        self.temp(shape, ElemType::F32, name, span)
    }

    #[allow(clippy::too_many_arguments)]
    fn push(
        &mut self,
        op: Op,
        result: String,
        domain: Vec<u64>,
        n_par: usize,
        inputs: Vec<Operand>,
        out: Operand,
        body: Scalar,
        combine: Option<Combine>,
        epilogue: Option<Scalar>,
    ) {
        let d = self.m.op(op);
        if domain.contains(&0) {
            return;
        }
        // No reduction dims left (a reduction over nothing): the epilogue applies to the body.
        let (body, combine, epilogue) = if domain.len() == n_par {
            let body = match epilogue {
                Some(e) => substitute_acc(&e, &body),
                None => body,
            };
            (body, None, None)
        } else {
            (body, combine, epilogue)
        };
        self.kernels.push(LKernel {
            op: short_name(d.name()),
            result,
            source: vec![d.name()],
            note: String::new(),
            domain,
            n_par,
            inputs,
            out,
            body,
            combine,
            epilogue,
            stats: Vec::new(),
            symbols: Vec::new(),
            span: d.span,
            attention: None,
            split: None,
            decode: false,
        });
    }

    /// `tensor.update_slice` written into `dest`'s own storage, where it can be (see
    /// [`Lower::update_slice`]): one launch over `update` whose output map is `dest`'s index
    /// with `offset` (a symbol, read when the launch runs and checked against the offsets from
    /// which `update` fits) added along `axis`. `false` when `dest` is read after the op, is a
    /// view, or shares its storage with another tensor: then `dest` must stay as it is.
    fn update_in_place(&mut self, op: Op, axis: usize) -> Result<bool, Diagnostic> {
        let d = self.m.op(op);
        let (span, ops, res) = (d.span, d.operands.clone(), d.results.clone());
        let dest = self.access_of(ops[0], span)?;
        let shared =
            self.tensors.iter().filter(|t| t.storage == self.tensors[dest.t].storage).count() > 1;
        if dest.map.is_some() || shared || !self.last_use(ops[0], op) || !self.is_linear(dest.t) {
            return Ok(false);
        }
        let (shape, ushape) = (self.shape(ops[0]), self.shape(ops[1]));
        let rank = shape.len();
        let inputs =
            vec![self.read(ops[1], identity(rank), span)?, self.read(ops[2], Vec::new(), span)?];
        let hi = (shape[axis] - ushape[axis]) as i64;
        let mut omap = identity(rank);
        omap[axis] = Expr::Bin(IndexOp::Add, Box::new(dim(axis)), Box::new(symbol(0)));
        self.access.insert(res[0], Access { t: dest.t, map: None, via: Vec::new() });
        if ushape.contains(&0) {
            return Ok(true);
        }
        let d = self.m.op(op);
        self.kernels.push(LKernel {
            op: short_name(d.name()),
            result: value_name(self.m, res[0]),
            source: vec![d.name()],
            note: " [in place]".into(),
            domain: ushape.clone(),
            n_par: rank,
            inputs,
            out: out(dest.t, omap),
            body: x(0),
            combine: None,
            epilogue: None,
            stats: Vec::new(),
            symbols: vec![Symbol { operand: 1, lo: 0, hi }],
            span,
            attention: None,
            split: None,
            decode: false,
        });
        Ok(true)
    }

    /// Whether result `t` of a row-wise op over `rows` can be written by one row kernel: any
    /// buffer; an image only where every texel that holds an element holds four consecutive
    /// elements of one row (the rows along the last axis, tiles and blocks a multiple of 4 wide,
    /// no padding columns), so that the kernel writes whole texels. Padding rows (a decode
    /// step's one row in a tile of four) are texels of their own that no kernel reads.
    fn row_output(&self, t: Tid, rows: &Rows) -> bool {
        let s = &self.storages[self.tensors[t].storage];
        let StorageKind::Image { .. } = s.ty.storage else { return true };
        let Layout::RTile(r) = &s.layout else { return false };
        let quad = |w: u64| w % 4 == 0;
        // A texel of `pack = "c"` holds four rows' values.
        r.pack == Pack::W
            && rows.axis + 1 == rows.shape.len()
            && quad(rows.len())
            && quad(r.tile[1])
            && r.pad[1] == 0
            && match r.intra {
                Intra::Rows => true,
                Intra::Block { bw, .. } => quad(bw),
            }
    }

    /// One launch writing result `t` (the input's shape) of a row-wise op: per row the
    /// statistics `stats` in order, then `body` at every element of the row. The domain is
    /// `rows`' reduction domain with the row's dimensions as row dimensions, so operands are
    /// read with the `red_*` maps (a statistic of another kernel at `red_stat`).
    #[allow(clippy::too_many_arguments)]
    fn row_kernel(
        &mut self,
        op: Op,
        result: String,
        rows: &impl RowSpace,
        inputs: Vec<Operand>,
        stats: Vec<Stat>,
        t: Tid,
        body: Scalar,
    ) {
        let domain = rows.red_domain();
        if domain.contains(&0) {
            return;
        }
        let d = self.m.op(op);
        self.kernels.push(LKernel {
            op: short_name(d.name()),
            result,
            source: vec![d.name()],
            note: String::new(),
            domain,
            n_par: rows.n_par(),
            inputs,
            out: out(t, rows.red_full()),
            body,
            combine: None,
            epilogue: None,
            stats,
            symbols: Vec::new(),
            span: d.span,
            attention: None,
            split: None,
            decode: false,
        });
    }

    /// Reads of value `v` from a kernel over `out_shape` with NumPy broadcasting.
    fn read_bcast(&self, v: Value, out_shape: &[u64], span: Span) -> Result<Operand, Diagnostic> {
        let shape = self.shape(v);
        if shape.is_empty() {
            return self.read(v, Vec::new(), span);
        }
        self.read(v, broadcast_results(&shape, out_shape), span)
    }

    /// The row tile `[start, count]` that `tensor.slice` `op` uploads on its own: one marked
    /// [`crate::split_weight_rows::ROW_TILE`] that cuts rows (axis 0, the other axes whole)
    /// of a function argument, stored as the target stores it (under `linear-io`, linear
    /// only). `None`: a view, as every other slice.
    fn row_tile(&self, op: Op) -> Result<Option<[u64; 2]>, Diagnostic> {
        let d = self.m.op(op);
        if d.attr(crate::split_weight_rows::ROW_TILE).is_none() {
            return Ok(None);
        }
        let x = d.operands[0];
        let is_arg = matches!(self.m.value(x).def, fbc_ir::ValueDef::Arg { .. });
        let (shape, out) = (self.shape(x), self.shape(d.results[0]));
        let start = d.attr("start").and_then(Attr::as_ints).unwrap_or_default();
        let rows_only =
            !shape.is_empty() && start.iter().skip(1).all(|&s| s == 0) && shape[1..] == out[1..];
        let layout = self.row_tile_layout(op);
        if !is_arg || !rows_only || (self.linear_io && !matches!(layout, Layout::Linear)) {
            return Ok(None);
        }
        let first = start.first().copied().and_then(|s| u64::try_from(s).ok()).unwrap_or(0);
        Ok(Some([first, out[0]]))
    }

    /// The layout a row tile (`tensor.slice` `op`) is uploaded in: where its one reader is a
    /// `layout.convert` (`global-layout` giving the product its R-Tile), that one, so the
    /// host packs the tile as the product reads it and no conversion kernel runs; else the
    /// slice's own (`fbc.layout`, linear without one).
    fn row_tile_layout(&self, op: Op) -> Layout {
        let d = self.m.op(op);
        let uses = &self.m.value(d.results[0]).uses;
        let convert = match uses.as_slice() {
            [u] if K::of_op(self.m.op(u.op)) == Some(K::Layout(L::Convert)) => Some(u.op),
            _ => None,
        };
        let attr = match convert {
            Some(c) => self.m.op(c).attr("to"),
            None => d.attr("fbc.layout"),
        };
        attr.and_then(|a| Layout::from_attr(a).ok()).unwrap_or(Layout::Linear)
    }

    /// A view: `v` reads its operand through `map` (result index → operand index).
    fn view(&mut self, op: Op, v: Value, src: Value, map: Map) -> Result<(), Diagnostic> {
        let d = self.m.op(op);
        let a = self.access_of(src, d.span)?;
        let map = match a.map {
            None => map,
            Some(inner) => super::compose(&inner, &map),
        };
        let mut via = a.via;
        via.push(d.name());
        self.access.insert(v, Access { t: a.t, map: Some(map), via });
        Ok(())
    }

    pub(crate) fn lower_op(&mut self, op: Op) -> Result<(), Diagnostic> {
        let m: &Module = self.m;
        let d = m.op(op);
        let span = d.span;
        let ops: Vec<Value> = d.operands.to_vec();
        let res: Vec<Value> = d.results.to_vec();
        let rname = |i: usize| value_name(self.m, res[i]);
        let Some(kind) = K::of_op(d) else {
            return Err(located(span, format!("no lowering for `{}`", d.name())));
        };
        // Every op fbc defines has an arm: a new op gets its lowering here.
        match kind {
            K::Tensor(t @ (pointwise_ops!())) => {
                let body = pointwise(t, d)
                    .ok_or_else(|| located(span, format!("`{t}` without its attributes")))?;
                let shape = self.shape(res[0]);
                let inputs = ops
                    .iter()
                    .map(|&v| self.read_bcast(v, &shape, span))
                    .collect::<Result<Vec<_>, _>>()?;
                let t = self.output(op, 0)?;
                let (domain, out_map) = domain_of(&shape);
                let n = domain.len();
                self.push(op, rname(0), domain, n, inputs, out(t, out_map), body, None, None);
            }
            K::Tensor(T::Constant) => {
                let t = self.output(op, 0)?;
                let Some(value) = d.attr("value").and_then(fbc_dialects::tensor::splat) else {
                    // Dense: uploaded from the host (`emit`).
                    self.storages[self.tensors[t].storage].constant = Some(op);
                    return Ok(());
                };
                let shape = self.shape(res[0]);
                let body = if self.tensors[t].elem == ElemType::I32 {
                    int(value as i64)
                } else {
                    f(value)
                };
                let (domain, out_map) = domain_of(&shape);
                let n = domain.len();
                self.push(op, rname(0), domain, n, Vec::new(), out(t, out_map), body, None, None);
            }
            K::Tensor(T::Matmul) => self.matmul(op, &ops, res[0])?,
            K::Tensor(T::ReduceSum | T::ReduceMax | T::ReduceMean) => {
                let shape = self.shape(ops[0]);
                let axes = d.attr("axes").and_then(Attr::as_ints).unwrap_or_default();
                let mut mask = vec![false; shape.len()];
                for a in axes {
                    mask[axis_of(a, shape.len(), span)?] = true;
                }
                let keep = d.attr("keepdim").and_then(Attr::as_bool).unwrap_or(false);
                let count: u64 =
                    shape.iter().zip(&mask).filter(|(_, &m)| m).map(|(n, _)| n).product();
                let (combine, epi) = match kind {
                    K::Tensor(T::ReduceMax) => (Combine::Max, None),
                    K::Tensor(T::ReduceMean) => {
                        (Combine::Add, Some(div(Scalar::Acc, f(count as f64))))
                    }
                    _ => (Combine::Add, None),
                };
                self.reduce(op, ops[0], res[0], &mask, keep, combine, epi)?;
            }
            K::Tensor(T::Unbroadcast) => {
                let shape = self.shape(ops[0]);
                let target = self.shape(res[0]);
                let lead = shape.len() - target.len();
                let mask: Vec<bool> = (0..shape.len())
                    .map(|k| k < lead || (target[k - lead] == 1 && shape[k] != 1))
                    .collect();
                // Leading axes disappear, size-1 axes stay: keep the kept-size-1 form per axis.
                self.reduce_to(op, ops[0], res[0], &mask, lead)?;
            }
            K::Tensor(T::Reshape) => {
                let (si, so) = (self.shape(ops[0]), self.shape(res[0]));
                let a = self.access_of(ops[0], span)?;
                if a.map.is_none() && self.is_linear(a.t) {
                    // Same row-major elements: an alias of the storage with the new shape.
                    let storage = self.tensors[a.t].storage;
                    let elem = self.tensors[a.t].elem;
                    let t = self.tensors.len();
                    self.tensors.push(super::Tensor { shape: so, elem, storage });
                    self.access.insert(res[0], Access { t, map: None, via: Vec::new() });
                } else {
                    self.view(op, res[0], ops[0], reshape_map(&si, &so).results)?;
                }
            }
            K::Tensor(T::Transpose) => {
                let perm: Vec<usize> = d
                    .attr("perm")
                    .and_then(Attr::as_ints)
                    .unwrap_or_default()
                    .into_iter()
                    .map(|p| p.max(0) as usize)
                    .collect();
                self.view(op, res[0], ops[0], transpose_map(&perm).results)?;
            }
            K::Tensor(T::Broadcast) => {
                let (si, so) = (self.shape(ops[0]), self.shape(res[0]));
                self.view(op, res[0], ops[0], broadcast_results(&si, &so))?;
            }
            K::Tensor(T::Slice) => {
                let start = d.attr("start").and_then(Attr::as_ints).unwrap_or_default();
                if let Some(rows) = self.row_tile(op)? {
                    // Its own upload of the argument's rows (`split-weight-rows`).
                    let arg = self.m.func(self.f).args.iter().position(|&a| a == ops[0]);
                    let t = self.new_tensor(res[0], &self.row_tile_layout(op), span)?;
                    self.access.insert(res[0], Access { t, map: None, via: Vec::new() });
                    let s = self.tensors[t].storage;
                    self.storages[s].arg = arg;
                    self.storages[s].rows = Some(rows);
                    return Ok(());
                }
                let map = start
                    .iter()
                    .enumerate()
                    .map(|(k, &s)| {
                        if s == 0 {
                            dim(k)
                        } else {
                            Expr::Bin(IndexOp::Add, Box::new(dim(k)), Box::new(Expr::Const(s)))
                        }
                    })
                    .collect();
                self.view(op, res[0], ops[0], map)?;
            }
            K::Layout(L::Remap) => {
                let Some(Attr::Map(map)) = d.attr("map") else {
                    return Err(located(span, "layout.remap without a map"));
                };
                let im = map.clone();
                // Rename the map's dimensions to d0, d1, ... (the convention of every map here).
                let ren: Map = (0..im.dims.len()).map(dim).collect();
                let subst = im.dims.iter().cloned().zip(ren).collect();
                let results = im.results.iter().map(|e| e.substitute_all(&subst)).collect();
                self.view(op, res[0], ops[0], results)?;
            }
            K::Layout(L::Assign) => {
                let want = d
                    .attr("layout")
                    .and_then(|a| Layout::from_attr(a).ok())
                    .unwrap_or(Layout::Linear);
                let a = self.access_of(ops[0], span)?;
                let ty = self.tensor_type(res[0]).cloned();
                let fitted = ty.as_ref().map(|t| self.fit(&want, t));
                let same = a.map.is_some() || fitted.as_ref() == Some(self.layout_of_tensor(a.t));
                if same {
                    self.access.insert(res[0], a);
                } else {
                    // The operand is stored otherwise: a conversion kernel.
                    let t = self.new_tensor(res[0], &want, span)?;
                    self.access.insert(res[0], Access { t, map: None, via: Vec::new() });
                    let input = self.read(ops[0], identity(self.shape(res[0]).len()), span)?;
                    self.push_copy(t, input, "assign", &rname(0), L::Assign.name(), span);
                    self.converts += 1;
                }
            }
            K::Layout(L::Convert) => {
                let to =
                    d.attr("to").and_then(|a| Layout::from_attr(a).ok()).unwrap_or(Layout::Linear);
                // A row tile uploaded in this layout already (`row_tile_layout`) is read as it is.
                let a = self.access_of(ops[0], span)?;
                let tile = self.storages[self.tensors[a.t].storage].rows.is_some();
                let fitted = self.tensor_type(res[0]).map(|t| self.fit(&to, t));
                if tile && a.map.is_none() && fitted.as_ref() == Some(self.layout_of_tensor(a.t)) {
                    self.access.insert(res[0], a);
                    return Ok(());
                }
                let t = self.new_tensor(res[0], &to, span)?;
                self.access.insert(res[0], Access { t, map: None, via: Vec::new() });
                let input = self.read(ops[0], identity(self.shape(res[0]).len()), span)?;
                self.push_copy(t, input, "convert", &rname(0), L::Convert.name(), span);
                self.converts += 1;
            }
            K::Tensor(T::Concat) => {
                let so = self.shape(res[0]);
                let axis =
                    axis_of(d.attr("axis").and_then(Attr::as_int).unwrap_or(0), so.len(), span)?;
                let t = self.output(op, 0)?;
                let mut offset = 0u64;
                for (i, &v) in ops.iter().enumerate() {
                    let si = self.shape(v);
                    let input = self.read(v, identity(si.len()), span)?;
                    let mut omap = identity(si.len());
                    omap[axis] = shift(dim(axis), offset);
                    let n = si.len();
                    self.push(
                        op,
                        format!("{}_{i}", rname(0)),
                        si.clone(),
                        n,
                        vec![input],
                        out(t, omap),
                        x(0),
                        None,
                        None,
                    );
                    offset += si[axis];
                }
            }
            K::Tensor(T::UpdateSlice) => {
                // In place where `dest` may be overwritten. Else one launch over `dest` into new
                // storage: inside the window `update` (read by its row-major offset, the
                // offset being data), elsewhere `dest`. An offset from which
                // `update` does not fit sends every point's load outside `update` (below it
                // when negative, past its end when too large), where every back end stops with
                // an error at this op.
                let shape = self.shape(ops[0]);
                let ushape = self.shape(ops[1]);
                let rank = shape.len();
                let axis = axis_of(d.attr("axis").and_then(Attr::as_int).unwrap_or(0), rank, span)?;
                if self.update_in_place(op, axis)? {
                    return Ok(());
                }
                let t = self.output(op, 0)?;
                let inputs = vec![
                    self.read(ops[0], identity(rank), span)?,
                    self.read_linear(ops[1], span)?,
                    self.read(ops[2], Vec::new(), span)?,
                ];
                let (n, size) = (ushape[axis] as i64, shape[axis] as i64);
                let mut stride = 1i64;
                let mut at = int(0);
                for k in (0..rank).rev() {
                    let i = if k == axis { sub(dk(k), x(2)) } else { dk(k) };
                    at = add(mul(i, int(stride)), at);
                    stride = stride.saturating_mul(ushape[k] as i64);
                }
                let numel = stride;
                let valid = bin(B::And, bin(B::Ge, x(2), int(0)), bin(B::Le, x(2), int(size - n)));
                let inside = bin(
                    B::And,
                    bin(B::Ge, dk(axis), x(2)),
                    bin(B::Lt, dk(axis), add(x(2), int(n))),
                );
                let wild = select(bin(B::Lt, x(2), int(0)), x(2), add(x(2), int(numel)));
                let load = Scalar::Load(1, Box::new(select(valid.clone(), at, wild)));
                let write = bin(B::Or, un(U::Not, valid), inside);
                self.elementwise(op, rname(0), shape, inputs, t, select(write, load, x(0)));
            }
            K::Tensor(T::CausalMask) => {
                // 0 where key d1 is seen from query d0 at position pos + d0, else -inf.
                let shape = self.shape(res[0]);
                let window = d.attr("window").and_then(Attr::as_int).unwrap_or(0);
                let t = self.output(op, 0)?;
                let inputs = vec![self.read(ops[0], Vec::new(), span)?];
                let at = add(dk(0), x(0));
                let mut seen = bin(B::Le, dk(1), at.clone());
                if window > 0 {
                    seen = bin(B::And, seen, bin(B::Gt, add(dk(1), int(window)), at));
                }
                let body = select(seen, f(0.0), un(U::Neg, f(f64::INFINITY)));
                self.elementwise(op, rname(0), shape, inputs, t, body);
            }
            K::Tensor(T::Attention) => self.attention(op, &ops, &res)?,
            K::Tensor(t @ (T::Conv2d | T::Conv2dGradInput | T::Conv2dGradWeight)) => {
                self.conv(op, t)?;
            }
            K::Tensor(T::Upsample) => self.upsample(op)?,
            K::Tensor(T::Dequantize) => {
                // w[.., k] = q(.., k) · scales[.., k / group]: the byte (int8), or the nibble of
                // byte k / 2 (int4: low for even k, high for odd; the byte is read signed, and
                // floor `/` and `%` take its bits), each row of `packed` starting on a byte.
                // A pointwise kernel: fusion substitutes it into the kernel reading the weight,
                // so a contraction reads bytes and scales and the f32 weight is never stored.
                let shape = self.shape(res[0]);
                let n = shape.len();
                let int4 = d.attr("scheme").and_then(Attr::as_str) == Some("int4");
                let group = d.attr("group").and_then(Attr::as_int).unwrap_or(1).max(1);
                let last = || dim(n - 1);
                let mut qmap = identity(n);
                let mut smap = identity(n);
                smap[n - 1] = e_floordiv(last(), group);
                if int4 {
                    qmap[n - 1] = e_floordiv(last(), 2);
                }
                let t = self.output(op, 0)?;
                let inputs = vec![self.read(ops[0], qmap, span)?, self.read(ops[1], smap, span)?];
                let q = if int4 {
                    let low = bin(B::Rem, x(0), int(16));
                    let high = bin(B::Rem, bin(B::Div, x(0), int(16)), int(16));
                    let even = bin(B::Eq, bin(B::Rem, dk(n - 1), int(2)), int(0));
                    sub(select(even, low, high), int(8))
                } else {
                    x(0)
                };
                self.elementwise(op, rname(0), shape, inputs, t, mul(q, x(1)));
                if let Some(k) = self.kernels.last_mut().filter(|k| k.out.t == t) {
                    k.decode = true;
                }
            }
            K::Tensor(T::SliceGrad) => {
                let so = self.shape(res[0]);
                let si = self.shape(ops[0]);
                let start = d.attr("start").and_then(Attr::as_ints).unwrap_or_default();
                let t = self.output(op, 0)?;
                let n = so.len();
                self.push(
                    op,
                    format!("{}_zero", rname(0)),
                    so.clone(),
                    n,
                    Vec::new(),
                    out(t, identity(n)),
                    f(0.0),
                    None,
                    None,
                );
                let input = self.read(ops[0], identity(si.len()), span)?;
                let omap = (0..si.len())
                    .map(|k| shift(dim(k), start.get(k).copied().unwrap_or(0) as u64))
                    .collect();
                self.push(
                    op,
                    rname(0),
                    si.clone(),
                    si.len(),
                    vec![input],
                    out(t, omap),
                    x(0),
                    None,
                    None,
                );
            }
            K::Tensor(T::Softmax) => {
                let shape = self.shape(ops[0]);
                let axis = axis_of(
                    d.attr("axis").and_then(Attr::as_int).unwrap_or(-1),
                    shape.len(),
                    span,
                )?;
                let rows = Rows { shape: shape.clone(), axis };
                let t = self.output(op, 0)?;
                if self.row_output(t, &rows) {
                    // max, Σ exp(x - max), then exp(x - max) / Σ.
                    let inputs = vec![self.read(ops[0], rows.red_full(), span)?];
                    let stats = vec![
                        stat(Combine::Max, x(0), None),
                        stat(Combine::Add, un(U::Exp, sub(x(0), sk(0))), None),
                    ];
                    let body = div(un(U::Exp, sub(x(0), sk(0))), sk(1));
                    self.row_kernel(op, rname(0), &rows, inputs, stats, t, body);
                    return Ok(());
                }
                let (mx, sm) = self.max_and_expsum(op, ops[0], res[0], &rows)?;
                let inputs = vec![
                    self.read(ops[0], identity(shape.len()), span)?,
                    opnd(mx, rows.full_stat()),
                    opnd(sm, rows.full_stat()),
                ];
                let body = div(un(U::Exp, sub(x(0), x(1))), x(2));
                self.elementwise(op, rname(0), shape, inputs, t, body);
            }
            K::Tensor(T::SoftmaxGrad) => {
                let shape = self.shape(ops[0]);
                let axis = axis_of(
                    d.attr("axis").and_then(Attr::as_int).unwrap_or(-1),
                    shape.len(),
                    span,
                )?;
                let rows = Rows { shape: shape.clone(), axis };
                let inputs = vec![
                    self.read(ops[1], rows.red_full(), span)?,
                    self.read(ops[0], rows.red_full(), span)?,
                ];
                let body = mul(x(0), x(1));
                let t = self.output(op, 0)?;
                if self.row_output(t, &rows) {
                    // s = Σ x0·x1, then x1·(x0 - s).
                    let stats = vec![stat(Combine::Add, body, None)];
                    let body = mul(x(1), sub(x(0), sk(0)));
                    self.row_kernel(op, rname(0), &rows, inputs, stats, t, body);
                    return Ok(());
                }
                let s =
                    self.row_stat(op, res[0], &rows, "dot", inputs, body, Combine::Add, None)?;
                let n = shape.len();
                let inputs = vec![
                    self.read(ops[0], identity(n), span)?,
                    self.read(ops[1], identity(n), span)?,
                    opnd(s, rows.full_stat()),
                ];
                self.elementwise(op, rname(0), shape, inputs, t, mul(x(0), sub(x(1), x(2))));
            }
            K::Tensor(T::Layernorm) => {
                let shape = self.shape(ops[0]);
                let axis = axis_of(
                    d.attr("axis").and_then(Attr::as_int).unwrap_or(-1),
                    shape.len(),
                    span,
                )?;
                let rows = Rows { shape, axis };
                let t = self.output(op, 0)?;
                let row = self.row_output(t, &rows);
                self.norm(op, &rows, t, row)?;
            }
            K::Tensor(T::GroupNorm) => {
                let groups = self.groups_of(op)?;
                let t = self.output(op, 0)?;
                let row = self.buffer_output(t);
                self.norm(op, &groups, t, row)?;
            }
            K::Tensor(T::Rmsnorm) => {
                let shape = self.shape(ops[0]);
                let eps = d.attr("eps").and_then(Attr::as_float).unwrap_or(DEFAULT_EPS);
                let rows = Rows { shape: shape.clone(), axis: shape.len().saturating_sub(1) };
                if shape.is_empty() {
                    return Err(located(span, "rmsnorm of a rank-0 tensor"));
                }
                let t = self.output(op, 0)?;
                if self.row_output(t, &rows) {
                    // 1/sqrt(mean(x²) + eps), then x·r·gamma.
                    let len = rows.len() as f64;
                    let inputs = vec![
                        self.read(ops[0], rows.red_full(), span)?,
                        self.read(ops[1], rows.red_param(), span)?,
                    ];
                    let stats = vec![stat(Combine::Add, mul(x(0), x(0)), rstd_of(len, eps))];
                    let body = mul(mul(x(0), sk(0)), x(1));
                    self.row_kernel(op, rname(0), &rows, inputs, stats, t, body);
                    return Ok(());
                }
                let r = self.rms(op, ops[0], res[0], &rows, eps)?;
                let n = shape.len();
                let inputs = vec![
                    self.read(ops[0], identity(n), span)?,
                    opnd(r, rows.full_stat()),
                    self.read(ops[1], rows.full_param(), span)?,
                ];
                self.elementwise(op, rname(0), shape, inputs, t, mul(mul(x(0), x(1)), x(2)));
            }
            K::Tensor(T::LayernormGrad) => self.layernorm_grad(op)?,
            K::Tensor(T::GroupNormGrad) => {
                let groups = self.groups_of(op)?;
                self.norm_grad(op, &groups, Self::buffer_output)?;
            }
            K::Tensor(T::RmsnormGrad) => self.rmsnorm_grad(op, &ops, &res)?,
            K::Tensor(T::Rope | T::RopeGrad) => {
                let shape = self.shape(ops[0]);
                let n = shape.len();
                if n < 2 {
                    return Err(located(span, format!("{} needs rank ≥ 2", kind.name())));
                }
                let dd = shape[n - 1];
                if dd == 0 {
                    let _ = self.output(op, 0)?;
                    return Ok(());
                }
                let h = dd / 2;
                let last = dim(n - 1);
                let rot = Expr::Bin(
                    IndexOp::Mod,
                    Box::new(shift(last.clone(), h)),
                    Box::new(Expr::Const(dd as i64)),
                );
                let mut rot_full = identity(n);
                rot_full[n - 1] = rot.clone();
                let sd = vec![dim(n - 2), last];
                let sd_rot = vec![dim(n - 2), rot];
                let first_half = bin(B::Lt, dk(n - 1), int(h as i64));
                let t = self.output(op, 0)?;
                let (inputs, body) = if kind == K::Tensor(T::Rope) {
                    // y = x·cos + rotate_half(x)·sin
                    let inputs = vec![
                        self.read(ops[0], identity(n), span)?,
                        self.read(ops[1], sd.clone(), span)?,
                        self.read(ops[2], sd, span)?,
                        self.read(ops[0], rot_full, span)?,
                    ];
                    // rotate_half(x)[j] = -x[j + h] for j < h, x[j - h] after: the partner
                    // times a sign, so that the partner is read outside any `select` (one
                    // texel read for four values where it is an image; exact: a sign flip).
                    let sign = select(first_half, f(-1.0), f(1.0));
                    (inputs, add(mul(x(0), x(1)), mul(mul(x(3), sign), x(2))))
                } else {
                    // dx = dy·cos + (j < h ? dy[j+h]·sin[j+h] : -(dy[j-h]·sin[j-h]))
                    let inputs = vec![
                        self.read(ops[0], identity(n), span)?,
                        self.read(ops[1], sd, span)?,
                        self.read(ops[0], rot_full, span)?,
                        self.read(ops[2], sd_rot, span)?,
                    ];
                    let sign = select(first_half, f(1.0), f(-1.0));
                    (inputs, add(mul(x(0), x(1)), mul(mul(x(2), x(3)), sign)))
                };
                self.elementwise(op, rname(0), shape, inputs, t, body);
            }
            K::Tensor(T::Embedding) => {
                let so = self.shape(res[0]);
                let n = so.len();
                let dd = so[n - 1] as i64;
                let table = self.read_linear(ops[0], span)?;
                let ids = self.read(ops[1], identity(n - 1), span)?;
                let t = self.output(op, 0)?;
                let off = add(mul(x(1), int(dd)), dk(n - 1));
                let body = Scalar::Load(0, Box::new(off));
                self.elementwise(op, rname(0), so, vec![table, ids], t, body);
            }
            K::Tensor(T::EmbeddingGrad) => {
                let so = self.shape(res[0]); // [V, D]
                let si = self.shape(ops[0]); // ids shape
                let q = si.len();
                let mut domain = so.clone();
                domain.extend(&si);
                let ids_map: Map = (0..q).map(|k| dim(2 + k)).collect();
                let mut dy_map = ids_map.clone();
                dy_map.push(dim(1));
                let inputs =
                    vec![self.read(ops[0], ids_map, span)?, self.read(ops[1], dy_map, span)?];
                let t = self.output(op, 0)?;
                let body = select(bin(B::Eq, x(0), dk(0)), x(1), f(0.0));
                self.push(
                    op,
                    rname(0),
                    domain,
                    2,
                    inputs,
                    out(t, identity(2)),
                    body,
                    Some(Combine::Add),
                    None,
                );
            }
            K::Tensor(T::CrossEntropy | T::CrossEntropyGrad) => {
                let shape = self.shape(ops[0]); // [N, C]
                if shape.len() != 2 {
                    return Err(located(span, format!("{} needs [N, C] logits", kind.name())));
                }
                let (nn, cc) = (shape[0], shape[1]);
                if cc == 0 || nn == 0 {
                    let _ = self.output(op, 0)?;
                    return Ok(());
                }
                let rows = Rows { shape: shape.clone(), axis: 1 };
                let t = self.output(op, 0)?;
                let scale = |dloss: usize| div(x(dloss), f(nn as f64));
                // Statistics of these logits computed already (the loss before its gradient):
                // read them instead of computing them again.
                let known = self.exp_stats.get(&ops[0]).copied();
                if kind == K::Tensor(T::CrossEntropyGrad)
                    && known.is_none()
                    && self.row_output(t, &rows)
                {
                    // max, Σ exp(x - max), then softmax·dloss/N - (dloss/N at the label).
                    let inputs = vec![
                        self.read(ops[0], rows.red_full(), span)?,
                        self.read(ops[2], Vec::new(), span)?,
                        self.read(ops[1], vec![dim(0)], span)?,
                    ];
                    let stats = vec![
                        stat(Combine::Max, x(0), None),
                        stat(Combine::Add, un(U::Exp, sub(x(0), sk(0))), None),
                    ];
                    let p = mul(un(U::Exp, sub(x(0), add(sk(0), un(U::Log, sk(1))))), scale(1));
                    let body = sub(p, select(bin(B::Eq, dk(1), x(2)), scale(1), f(0.0)));
                    self.row_kernel(op, rname(0), &rows, inputs, stats, t, body);
                    return Ok(());
                }
                let (mx, sm) = match known {
                    Some(stats) => stats,
                    None => self.max_and_expsum(op, ops[0], res[0], &rows)?,
                };
                self.exp_stats.insert(ops[0], (mx, sm));
                if kind == K::Tensor(T::CrossEntropy) {
                    let logits = self.read_linear(ops[0], span)?;
                    let inputs = vec![
                        opnd(mx, vec![dim(1)]),
                        opnd(sm, vec![dim(1)]),
                        self.read(ops[1], vec![dim(1)], span)?,
                        logits,
                    ];
                    // A label outside 0..C must not read another row's logit: its offset is
                    // sent outside the logits (the label itself when negative, past the end
                    // when too large), where every back end stops with an error at this op.
                    let c = cc as i64;
                    let valid = bin(B::And, bin(B::Ge, x(2), int(0)), bin(B::Lt, x(2), int(c)));
                    let wild = select(
                        bin(B::Lt, x(2), int(0)),
                        x(2),
                        add(x(2), int(c.saturating_mul(nn as i64 - 1))),
                    );
                    let off = select(valid, add(mul(dk(1), int(c)), x(2)), wild);
                    let picked = Scalar::Load(3, Box::new(off));
                    // log-sum-exp is +inf on a row holding +inf (there `Σ exp(x - max)` is
                    // NaN), as in the reference.
                    let lse = select(
                        bin(B::Ge, x(0), f(f64::INFINITY)),
                        x(0),
                        add(x(0), un(U::Log, x(1))),
                    );
                    let body = sub(lse, picked);
                    let epi = div(Scalar::Acc, f(nn as f64));
                    self.push(
                        op,
                        rname(0),
                        vec![1, nn],
                        1,
                        inputs,
                        out(t, Vec::new()),
                        body,
                        Some(Combine::Add),
                        Some(epi),
                    );
                } else {
                    let inputs = vec![
                        self.read(ops[0], identity(2), span)?,
                        opnd(mx, vec![dim(0)]),
                        opnd(sm, vec![dim(0)]),
                        self.read(ops[2], Vec::new(), span)?,
                        self.read(ops[1], vec![dim(0)], span)?,
                    ];
                    let p = mul(un(U::Exp, sub(x(0), add(x(1), un(U::Log, x(2))))), scale(3));
                    let body = sub(p, select(bin(B::Eq, dk(1), x(4)), scale(3), f(0.0)));
                    self.elementwise(op, rname(0), shape, inputs, t, body);
                }
            }
            K::Func(F::Call) => return Err(located(span, "func.call left after inlining")),
            // Returns end a body and the memory ops are what lowering builds: neither is an op to
            // lower.
            K::Func(F::Return) | K::Memory(_) => {
                return Err(located(span, format!("no lowering for `{}`", kind.name())))
            }
        }
        Ok(())
    }

    fn matmul(&mut self, op: Op, ops: &[Value], res: Value) -> Result<(), Diagnostic> {
        let d = self.m.op(op);
        let span = d.span;
        let ta = d.attr("transpose_a").and_then(Attr::as_bool).unwrap_or(false);
        let tb = d.attr("transpose_b").and_then(Attr::as_bool).unwrap_or(false);
        let (sa, sb, so) = (self.shape(ops[0]), self.shape(ops[1]), self.shape(res));
        if sa.len() < 2 || sb.len() < 2 || so.len() < 2 {
            return Err(located(span, "matmul operands need rank ≥ 2"));
        }
        let nb = so.len() - 2;
        let kk = if ta { sa[sa.len() - 2] } else { sa[sa.len() - 1] };
        let (mdim, ndim, kdim) = (dim(nb), dim(nb + 1), dim(nb + 2));
        let operand_map = |s: &[u64], rows: Expr, cols: Expr, t: bool| -> Map {
            let b = s.len() - 2;
            let mut m: Map = (0..b)
                .map(|i| {
                    let o = i + nb - b;
                    if s[i] == 1 && so[o] != 1 {
                        Expr::Const(0)
                    } else {
                        dim(o)
                    }
                })
                .collect();
            if t {
                m.push(cols);
                m.push(rows);
            } else {
                m.push(rows);
                m.push(cols);
            }
            m
        };
        let am = operand_map(&sa, mdim, kdim.clone(), ta);
        let bm = operand_map(&sb, kdim, ndim, tb);
        let inputs = vec![self.read(ops[0], am, span)?, self.read(ops[1], bm, span)?];
        let t = self.output(op, 0)?;
        let mut domain = so.clone();
        domain.push(kk);
        let rn = value_name(self.m, res);
        self.push(
            op,
            rn,
            domain,
            nb + 2,
            inputs,
            out(t, identity(nb + 2)),
            mul(x(0), x(1)),
            Some(Combine::Add),
            None,
        );
        Ok(())
    }

    /// A reduction of `src` over the axes in `mask` into result `res`.
    #[allow(clippy::too_many_arguments)]
    fn reduce(
        &mut self,
        op: Op,
        src: Value,
        res: Value,
        mask: &[bool],
        keep: bool,
        combine: Combine,
        epi: Option<Scalar>,
    ) -> Result<(), Diagnostic> {
        self.reduce_axes(op, src, res, mask, &|_| keep, combine, epi)
    }

    /// `unbroadcast`: sums over `mask`; the first `lead` axes disappear, the others stay size 1.
    fn reduce_to(
        &mut self,
        op: Op,
        src: Value,
        res: Value,
        mask: &[bool],
        lead: usize,
    ) -> Result<(), Diagnostic> {
        self.reduce_axes(op, src, res, mask, &|k| k >= lead, Combine::Add, None)
    }

    /// A reduction of `src` over the axes in `mask` into result `res`; reduced axis `k` stays
    /// (size 1) in the result when `keep(k)`, else it disappears.
    #[allow(clippy::too_many_arguments)]
    fn reduce_axes(
        &mut self,
        op: Op,
        src: Value,
        res: Value,
        mask: &[bool],
        keep: &dyn Fn(usize) -> bool,
        combine: Combine,
        epi: Option<Scalar>,
    ) -> Result<(), Diagnostic> {
        let span = self.m.op(op).span;
        let shape = self.shape(src);
        let kept: Vec<usize> = (0..shape.len()).filter(|&k| !mask[k]).collect();
        let red: Vec<usize> = (0..shape.len()).filter(|&k| mask[k]).collect();
        let n_par = kept.len().max(1);
        let mut domain: Vec<u64> = kept.iter().map(|&k| shape[k]).collect();
        if domain.is_empty() {
            domain.push(1);
        }
        domain.extend(red.iter().map(|&k| shape[k]));
        let mut xm = vec![Expr::Const(0); shape.len()];
        for (j, &k) in kept.iter().enumerate() {
            xm[k] = dim(j);
        }
        for (j, &k) in red.iter().enumerate() {
            xm[k] = dim(n_par + j);
        }
        let mut om = Vec::new();
        let mut j = 0;
        for (k, &m) in mask.iter().enumerate() {
            if !m {
                om.push(dim(j));
                j += 1;
            } else if keep(k) {
                om.push(Expr::Const(0));
            }
        }
        let input = self.read(src, xm, span)?;
        let t = self.output(op, 0)?;
        let rn = value_name(self.m, res);
        self.push(op, rn, domain, n_par, vec![input], out(t, om), x(0), Some(combine), epi);
        Ok(())
    }

    /// A per-row statistic `{res}_{suffix}` of the op's result `res`: a reduction of `body` over
    /// `inputs` (read with the `red_*` maps of `rows`) along the rows, finished by `epi`.
    #[allow(clippy::too_many_arguments)]
    fn row_stat(
        &mut self,
        op: Op,
        res: Value,
        rows: &impl RowSpace,
        suffix: &str,
        inputs: Vec<Operand>,
        body: Scalar,
        combine: Combine,
        epi: Option<Scalar>,
    ) -> Result<Tid, Diagnostic> {
        let span = self.m.op(op).span;
        let t = self.stat(res, &rows.stat_shape(), suffix, span)?;
        let name = format!("{}_{suffix}", value_name(self.m, res));
        let (domain, n_par) = (rows.red_domain(), rows.n_par());
        self.push(
            op,
            name,
            domain,
            n_par,
            inputs,
            out(t, rows.red_stat()),
            body,
            Some(combine),
            epi,
        );
        Ok(t)
    }

    /// A column sum (`dgamma`, `dbeta`) of `body` over `inputs` (read with the `col_*` maps of
    /// `rows`) into the parameter-shaped result `t` named `name`.
    fn col_sum(
        &mut self,
        op: Op,
        name: String,
        rows: &impl NormSpace,
        t: Tid,
        inputs: Vec<Operand>,
        body: Scalar,
    ) {
        let dom = rows.col_domain();
        self.push(op, name, dom, 1, inputs, out(t, vec![dim(0)]), body, Some(Combine::Add), None);
    }

    /// An elementwise launch over `shape` writing `body` of `inputs` into result `t` at the
    /// identity map.
    fn elementwise(
        &mut self,
        op: Op,
        name: String,
        shape: Vec<u64>,
        inputs: Vec<Operand>,
        t: Tid,
        body: Scalar,
    ) {
        let n = shape.len();
        self.push(op, name, shape, n, inputs, out(t, identity(n)), body, None, None);
    }

    /// Row max, then row sum of `exp(x - max)` (softmax, cross-entropy).
    fn max_and_expsum(
        &mut self,
        op: Op,
        src: Value,
        res: Value,
        rows: &Rows,
    ) -> Result<(Tid, Tid), Diagnostic> {
        let span = self.m.op(op).span;
        let input = self.read(src, rows.red_full(), span)?;
        let mx = self.row_stat(op, res, rows, "max", vec![input], x(0), Combine::Max, None)?;
        let inputs = vec![self.read(src, rows.red_full(), span)?, opnd(mx, rows.red_stat())];
        let body = un(U::Exp, sub(x(0), x(1)));
        let sm = self.row_stat(op, res, rows, "sum", inputs, body, Combine::Add, None)?;
        Ok((mx, sm))
    }

    /// Row mean, then `1/sqrt(var + eps)` with the two-pass variance (layernorm, group norm).
    fn moments(
        &mut self,
        op: Op,
        src: Value,
        res: Value,
        rows: &impl NormSpace,
        eps: f64,
    ) -> Result<(Tid, Tid), Diagnostic> {
        let span = self.m.op(op).span;
        let n = rows.len() as f64;
        let input = self.read(src, rows.red_full(), span)?;
        let mean =
            self.row_stat(op, res, rows, "mean", vec![input], x(0), Combine::Add, mean_of(n))?;
        let inputs = vec![self.read(src, rows.red_full(), span)?, opnd(mean, rows.red_stat())];
        let dev = || sub(x(0), x(1));
        let body = mul(dev(), dev());
        let rstd =
            self.row_stat(op, res, rows, "rstd", inputs, body, Combine::Add, rstd_of(n, eps))?;
        Ok((mean, rstd))
    }

    /// `1/sqrt(mean(x²) + eps)` per row (rmsnorm).
    fn rms(
        &mut self,
        op: Op,
        src: Value,
        res: Value,
        rows: &Rows,
        eps: f64,
    ) -> Result<Tid, Diagnostic> {
        let span = self.m.op(op).span;
        let n = rows.len() as f64;
        let input = self.read(src, rows.red_full(), span)?;
        let body = mul(x(0), x(0));
        self.row_stat(op, res, rows, "rstd", vec![input], body, Combine::Add, rstd_of(n, eps))
    }

    /// `tensor.group_norm`'s and `group_norm_grad`'s rows, from the op's `groups`.
    fn groups_of(&self, op: Op) -> Result<Groups, Diagnostic> {
        let d = self.m.op(op);
        let shape = self.shape(d.operands[0]);
        let groups = d.attr("groups").and_then(Attr::as_int).unwrap_or(0);
        if shape.len() < 2 || groups < 1 || shape[1] % groups.unsigned_abs() != 0 {
            return Err(located(
                d.span,
                format!("{} needs x [N, C, ...] and groups dividing C", d.name()),
            ));
        }
        Ok(Groups { shape, groups: groups.unsigned_abs() })
    }

    /// Whether result `t` is stored in a buffer (a group norm's row kernel writes it whole
    /// rows of several channels, which no image texel holds).
    fn buffer_output(&self, t: Tid) -> bool {
        matches!(self.storages[self.tensors[t].storage].ty.storage, StorageKind::Buffer { .. })
    }

    /// A normalisation `(x − mean)·rstd·gamma + beta` (`tensor.layernorm`, `tensor.group_norm`)
    /// of operands `(x, gamma, beta)` over `rows` into result `t`: one row kernel where `row`,
    /// else the moments into temporaries and an elementwise kernel.
    fn norm(&mut self, op: Op, rows: &impl NormSpace, t: Tid, row: bool) -> Result<(), Diagnostic> {
        let d = self.m.op(op);
        let (span, ops, res) = (d.span, d.operands.clone(), d.results[0]);
        let eps = d.attr("eps").and_then(Attr::as_float).unwrap_or(DEFAULT_EPS);
        let rn = value_name(self.m, res);
        if row {
            // mean, rstd (two-pass variance), then (x - mean)·rstd·gamma + beta.
            let len = rows.len() as f64;
            let inputs = vec![
                self.read(ops[0], rows.red_full(), span)?,
                self.read(ops[1], rows.red_param(), span)?,
                self.read(ops[2], rows.red_param(), span)?,
            ];
            let dev = || sub(x(0), sk(0));
            let stats = vec![
                stat(Combine::Add, x(0), mean_of(len)),
                stat(Combine::Add, mul(dev(), dev()), rstd_of(len, eps)),
            ];
            let body = add(mul(mul(dev(), sk(1)), x(1)), x(2));
            self.row_kernel(op, rn, rows, inputs, stats, t, body);
            return Ok(());
        }
        let (mean, rstd) = self.moments(op, ops[0], res, rows, eps)?;
        let shape = self.shape(ops[0]);
        let inputs = vec![
            self.read(ops[0], identity(shape.len()), span)?,
            opnd(mean, rows.full_stat()),
            opnd(rstd, rows.full_stat()),
            self.read(ops[1], rows.full_param(), span)?,
            self.read(ops[2], rows.full_param(), span)?,
        ];
        let body = add(mul(mul(sub(x(0), x(1)), x(2)), x(3)), x(4));
        self.elementwise(op, rn, shape, inputs, t, body);
        Ok(())
    }

    fn layernorm_grad(&mut self, op: Op) -> Result<(), Diagnostic> {
        let d = self.m.op(op);
        let shape = self.shape(d.operands[0]);
        let axis =
            axis_of(d.attr("axis").and_then(Attr::as_int).unwrap_or(-1), shape.len(), d.span)?;
        let rows = Rows { shape, axis };
        self.norm_grad(op, &rows, |l, t| l.row_output(t, &rows))
    }

    /// The adjoint of [`Lower::norm`] (`tensor.layernorm_grad`, `tensor.group_norm_grad`) of
    /// operands `(x, gamma, dy)` over `rows`: `dx` by one row kernel where `row(t)` holds for its
    /// storage `t`, `dgamma` and `dbeta` as column sums.
    fn norm_grad<R: NormSpace>(
        &mut self,
        op: Op,
        rows: &R,
        row: impl Fn(&Self, Tid) -> bool,
    ) -> Result<(), Diagnostic> {
        let d = self.m.op(op);
        let (span, ops, res) = (d.span, d.operands.clone(), d.results.clone());
        let eps = d.attr("eps").and_then(Attr::as_float).unwrap_or(DEFAULT_EPS);
        let n = rows.len() as f64;
        let rn = value_name(self.m, res[0]);
        let (x_, gamma, dy) = (ops[0], ops[1], ops[2]);
        // mean and rstd: the weight gradient reads them too.
        let (mean, rstd) = self.moments(op, x_, res[0], rows, eps)?;
        let t = self.output(op, 0)?;
        // mean_g = Σ dy·gamma / n; mean_gx = Σ dy·gamma·x̂ / n, x̂ = (x - mean)·r.
        let stat_inputs = vec![
            self.read(dy, rows.red_full(), span)?,
            self.read(gamma, rows.red_param(), span)?,
            self.read(x_, rows.red_full(), span)?,
            opnd(mean, rows.red_stat()),
            opnd(rstd, rows.red_stat()),
        ];
        let g_body = mul(x(0), x(1));
        let gx_body = mul(mul(x(0), x(1)), mul(sub(x(2), x(3)), x(4)));
        if row(self, t) {
            // dx = r·(dy·gamma - mean_g - x̂·mean_gx) in the same launch.
            let stats = vec![
                stat(Combine::Add, g_body, mean_of(n)),
                stat(Combine::Add, gx_body, mean_of(n)),
            ];
            let xhat = mul(sub(x(2), x(3)), x(4));
            let body = mul(x(4), sub(sub(mul(x(0), x(1)), sk(0)), mul(xhat, sk(1))));
            self.row_kernel(op, rn, rows, stat_inputs, stats, t, body);
        } else {
            let inputs = stat_inputs[..2].to_vec();
            let mg = self.row_stat(
                op,
                res[0],
                rows,
                "mean_g",
                inputs,
                g_body,
                Combine::Add,
                mean_of(n),
            )?;
            let mgx = self.row_stat(
                op,
                res[0],
                rows,
                "mean_gx",
                stat_inputs,
                gx_body,
                Combine::Add,
                mean_of(n),
            )?;
            self.norm_dx(op, rn, rows, [x_, gamma, dy], [mean, rstd, mg, mgx], t)?;
        }
        // dgamma = Σ dy·x̂, dbeta = Σ dy over every axis but the parameter's.
        let tg = self.output(op, 1)?;
        let inputs = vec![
            self.read(dy, rows.col_full(), span)?,
            self.read(x_, rows.col_full(), span)?,
            opnd(mean, rows.col_stat()),
            opnd(rstd, rows.col_stat()),
        ];
        let body = mul(x(0), mul(sub(x(1), x(2)), x(3)));
        self.col_sum(op, value_name(self.m, res[1]), rows, tg, inputs, body);
        let tb = self.output(op, 2)?;
        let inputs = vec![self.read(dy, rows.col_full(), span)?];
        self.col_sum(op, value_name(self.m, res[2]), rows, tb, inputs, x(0));
        Ok(())
    }

    /// [`Lower::norm_grad`]'s `dx = r·(dy·gamma - mean_g - x̂·mean_gx)` from its statistics in
    /// temporaries.
    fn norm_dx(
        &mut self,
        op: Op,
        rn: String,
        rows: &impl NormSpace,
        [x_, gamma, dy]: [Value; 3],
        [mean, rstd, mg, mgx]: [Tid; 4],
        t: Tid,
    ) -> Result<(), Diagnostic> {
        let span = self.m.op(op).span;
        let shape = self.shape(x_);
        let k = shape.len();
        let inputs = vec![
            self.read(dy, identity(k), span)?,
            self.read(gamma, rows.full_param(), span)?,
            self.read(x_, identity(k), span)?,
            opnd(mean, rows.full_stat()),
            opnd(rstd, rows.full_stat()),
            opnd(mg, rows.full_stat()),
            opnd(mgx, rows.full_stat()),
        ];
        let xhat = mul(sub(x(2), x(3)), x(4));
        let body = mul(x(4), sub(sub(mul(x(0), x(1)), x(5)), mul(xhat, x(6))));
        self.elementwise(op, rn, shape, inputs, t, body);
        Ok(())
    }

    fn rmsnorm_grad(&mut self, op: Op, ops: &[Value], res: &[Value]) -> Result<(), Diagnostic> {
        let d = self.m.op(op);
        let span = d.span;
        let shape = self.shape(ops[0]);
        if shape.is_empty() {
            return Err(located(span, "rmsnorm_grad of a rank-0 tensor"));
        }
        let eps = d.attr("eps").and_then(Attr::as_float).unwrap_or(DEFAULT_EPS);
        let rows = Rows { shape: shape.clone(), axis: shape.len() - 1 };
        let n = rows.len() as f64;
        let rn = value_name(self.m, res[0]);
        let (x_, gamma, dy) = (ops[0], ops[1], ops[2]);
        // r: the weight gradient reads it too.
        let r = self.rms(op, x_, res[0], &rows, eps)?;
        let t = self.output(op, 0)?;
        // s = Σ dy·gamma·x / n
        let mut inputs = vec![
            self.read(dy, rows.red_full(), span)?,
            self.read(gamma, rows.red_param(), span)?,
            self.read(x_, rows.red_full(), span)?,
        ];
        let body = mul(mul(x(0), x(1)), x(2));
        let k = shape.len();
        if self.row_output(t, &rows) {
            // dx = r·dy·gamma - x·r·r·r·s in the same launch.
            inputs.push(opnd(r, rows.red_stat()));
            let stats = vec![stat(Combine::Add, body, mean_of(n))];
            let body =
                sub(mul(mul(x(3), x(0)), x(1)), mul(mul(mul(mul(x(2), x(3)), x(3)), x(3)), sk(0)));
            self.row_kernel(op, rn, &rows, inputs, stats, t, body);
        } else {
            let s =
                self.row_stat(op, res[0], &rows, "dot", inputs, body, Combine::Add, mean_of(n))?;
            // dx = r·dy·gamma - x·r·r·r·s
            let inputs = vec![
                self.read(dy, identity(k), span)?,
                self.read(gamma, rows.full_param(), span)?,
                self.read(x_, identity(k), span)?,
                opnd(r, rows.full_stat()),
                opnd(s, rows.full_stat()),
            ];
            let body =
                sub(mul(mul(x(3), x(0)), x(1)), mul(mul(mul(mul(x(2), x(3)), x(3)), x(3)), x(4)));
            self.elementwise(op, rn, shape.clone(), inputs, t, body);
        }
        // dgamma = Σ dy·x·r over the leading axes.
        let tg = self.output(op, 1)?;
        let inputs = vec![
            self.read(dy, rows.col_full(), span)?,
            self.read(x_, rows.col_full(), span)?,
            opnd(r, rows.col_stat()),
        ];
        let body = mul(mul(x(0), x(1)), x(2));
        self.col_sum(op, value_name(self.m, res[1]), &rows, tg, inputs, body);
        Ok(())
    }
}

/// The op's name without its dialect (`softmax`).
fn short_name(name: &str) -> String {
    name.split('.').nth(1).unwrap_or(name).to_string()
}

fn out(t: Tid, map: Map) -> Operand {
    Operand { t, map, gather: false }
}

fn opnd(t: Tid, map: Map) -> Operand {
    Operand { t, map, gather: false }
}

/// `a + b`, an index expression.
fn e_add(a: Expr, b: Expr) -> Expr {
    Expr::Bin(IndexOp::Add, Box::new(a), Box::new(b))
}

/// `a · k`, an index expression (`a` itself when `k = 1`).
fn e_mul(a: Expr, k: i64) -> Expr {
    if k == 1 {
        a
    } else {
        Expr::Bin(IndexOp::Mul, Box::new(a), Box::new(Expr::Const(k)))
    }
}

/// `a floordiv k`, an index expression (`a` itself when `k = 1`).
fn e_floordiv(a: Expr, k: i64) -> Expr {
    if k == 1 {
        a
    } else {
        Expr::Bin(IndexOp::FloorDiv, Box::new(a), Box::new(Expr::Const(k)))
    }
}

fn shift(e: Expr, by: u64) -> Expr {
    if by == 0 {
        e
    } else {
        Expr::Bin(IndexOp::Add, Box::new(e), Box::new(Expr::Const(by as i64)))
    }
}

/// `e` with [`Scalar::Acc`] replaced by `acc`.
pub(crate) fn substitute_acc(e: &Scalar, acc: &Scalar) -> Scalar {
    super::fusion::map_scalar(e, &mut |s| match s {
        Scalar::Acc => Some(acc.clone()),
        _ => None,
    })
}

impl Lower<'_> {
    /// `tensor.attention`: one launch of the memory dialect's attention kind over `(b, h, i |
    /// e | j)` (`fbc_dialects::memory::attention`). `q`, `k` and `v` are read through their
    /// accesses (views fold in; query head `h` reads key and value head `h / (H / KV)` in
    /// place), `cos` and `sin` at `(i, e)`, `pos` as symbol `s0`: the last key query `i` sees
    /// is `i + s0`.
    pub(crate) fn attention(
        &mut self,
        op: Op,
        ops: &[Value],
        res: &[Value],
    ) -> Result<(), Diagnostic> {
        let d = self.m.op(op);
        let span = d.span;
        let flag = |k: &str| d.attr(k).and_then(Attr::as_bool).unwrap_or(false);
        let (rope, causal) = (flag("rope"), flag("causal"));
        let float = |k: &str| d.attr(k).and_then(Attr::as_float).unwrap_or(0.0);
        let (scale, softcap) = (float("scale"), float("softcap"));
        let window = d.attr("window").and_then(Attr::as_int).unwrap_or(0).max(0) as u64;
        let (qs, ks) = (self.shape(ops[0]), self.shape(ops[1]));
        let [b, h, s, hd] = qs[..] else {
            return Err(located(span, "tensor.attention needs q of rank 4"));
        };
        let (kv, keys) = (ks[1], ks[2]);
        let t = self.output(op, 0)?;
        if !crate::global_layout::writes_result_in(d, self.layout_of_tensor(t)) {
            return Err(located(
                span,
                "internal: tensor.attention's result must be linear or an R-Tile of four values of the head a texel, without padding",
            ));
        }
        let group = h / kv.max(1);
        let head = if group == 1 {
            dim(1)
        } else {
            Expr::Bin(IndexOp::FloorDiv, Box::new(dim(1)), Box::new(Expr::Const(group as i64)))
        };
        let mut inputs = vec![
            self.read(ops[0], vec![dim(0), dim(1), dim(2), dim(3)], span)?,
            self.read(ops[1], vec![dim(0), head.clone(), dim(4), dim(3)], span)?,
            self.read(ops[2], vec![dim(0), head, dim(4), dim(3)], span)?,
        ];
        if rope {
            inputs.push(self.read(ops[3], vec![dim(2), dim(3)], span)?);
            inputs.push(self.read(ops[4], vec![dim(2), dim(3)], span)?);
        }
        let (mut symbols, mut last) = (Vec::new(), None);
        if causal {
            // Positions up to 2^31 - 1 - S keep `i + pos` an i32 (the kernels compute in int).
            let hi = i64::from(i32::MAX) - s as i64;
            symbols.push(Symbol { operand: inputs.len(), lo: 0, hi });
            inputs.push(self.read(ops[ops.len() - 1], Vec::new(), span)?);
            let at = Expr::Bin(IndexOp::Add, Box::new(dim(2)), Box::new(symbol(0)));
            last = Some(fbc_index::IndexMap {
                dims: Vec::new(),
                symbols: Vec::new(),
                results: vec![at],
            });
        }
        let domain = vec![b, h, s, hd, keys];
        if domain.contains(&0) {
            return Ok(());
        }
        self.kernels.push(LKernel {
            op: short_name(d.name()),
            result: value_name(self.m, res[0]),
            source: vec![d.name()],
            note: String::new(),
            domain,
            n_par: 4,
            inputs,
            out: out(t, vec![dim(0), dim(1), dim(2), dim(3)]),
            body: Scalar::Int(0),
            combine: None,
            epilogue: None,
            stats: Vec::new(),
            symbols,
            attention: Some(Attention { scale, softcap, rope, last, window }),
            span,
            split: None,
            decode: false,
        });
        Ok(())
    }
}

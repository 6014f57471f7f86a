//! The convolutions as contractions (`tensor.conv2d`, `conv2d_grad_input`, `conv2d_grad_weight`)
//! and nearest `tensor.upsample` as a copy.
//!
//! Each convolution is one launch whose parallel dimensions are its result's and whose reduction
//! dimensions are the other operand's: the body multiplies the two operands read through affine
//! maps of the domain, and a zero-padding tap (an input position outside `x`, or for the input
//! gradient an output position the stride skips) is a `select` on the domain indices that reads
//! nothing there (`select` evaluates only its chosen branch). Where no tap can fall outside, the
//! body is the plain product and the launch is an ordinary contraction.

use fbc_dialects::kind::TensorOp as T;
use fbc_dialects::layout::{Layout, Pack};
use fbc_dialects::memory::{Combine, Scalar, ScalarBin as B};
use fbc_dialects::tensor::Conv2dAttrs;
use fbc_index::{BinOp as IndexOp, Expr};
use fbc_ir::{Attr, Diagnostic, Op};

use super::{add, bin, dim, dk, e_add, e_floordiv, e_mul, f, identity, int, mul, out, select, x};
use super::{located, value_name, Lower, Map};

/// `Σ coef·d_k + constant` over domain dimensions: one index of a tap, as a map result and as a
/// scalar over `Scalar::Dim`s (for the body's padding tests).
struct Affine {
    terms: Vec<(usize, i64)>,
    constant: i64,
}

impl Affine {
    fn expr(&self) -> Expr {
        let mut e: Option<Expr> = None;
        for &(k, c) in &self.terms {
            let t = e_mul(dim(k), c);
            e = Some(match e {
                None => t,
                Some(e) => e_add(e, t),
            });
        }
        let e = e.unwrap_or(Expr::Const(0));
        match self.constant {
            0 => e,
            c if c < 0 => Expr::Bin(IndexOp::Sub, Box::new(e), Box::new(Expr::Const(-c))),
            c => e_add(e, Expr::Const(c)),
        }
    }

    fn scalar(&self) -> Scalar {
        let mut e = int(self.constant);
        for &(k, c) in self.terms.iter().rev() {
            let t = if c == 1 { dk(k) } else { mul(dk(k), int(c)) };
            e = add(t, e);
        }
        e
    }

    /// The least and the greatest value over `domain`.
    fn range(&self, domain: &[u64]) -> (i64, i64) {
        self.terms.iter().fold((self.constant, self.constant), |(lo, hi), &(k, c)| {
            let top = c * (domain[k] as i64 - 1);
            (lo + top.min(0), hi + top.max(0))
        })
    }
}

/// Conjunction of the padding tests (`None`: none needed).
fn and(a: Option<Scalar>, b: Scalar) -> Option<Scalar> {
    Some(match a {
        None => b,
        Some(a) => bin(B::And, a, b),
    })
}

/// `v` is a valid input position `0 ≤ v < size` over `domain`: the tests that can fail.
fn within(v: &Affine, size: u64, domain: &[u64], cond: Option<Scalar>) -> Option<Scalar> {
    let (lo, hi) = v.range(domain);
    let mut cond = cond;
    if lo < 0 {
        cond = and(cond, bin(B::Ge, v.scalar(), int(0)));
    }
    if hi >= size as i64 {
        cond = and(cond, bin(B::Lt, v.scalar(), int(size as i64)));
    }
    cond
}

impl Lower<'_> {
    /// `tensor.conv2d` (bias as the epilogue `acc + x2`), `conv2d_grad_input` and
    /// `conv2d_grad_weight`: see the module docs. Shapes `x` `[N, C, H, W]`, `w`
    /// `[O, C/groups, KH, KW]`, `y` `[N, O, OH, OW]`.
    pub(crate) fn conv(&mut self, op: Op, kind: T) -> Result<(), Diagnostic> {
        let d = self.m.op(op);
        let span = d.span;
        let (ops, res) = (d.operands.clone(), d.results[0]);
        let a = Conv2dAttrs::read(d.name(), |n| d.attr(n)).map_err(|e| located(span, e.message))?;
        let (xs, ws, ys) = match kind {
            T::Conv2d => (self.shape(ops[0]), self.shape(ops[1]), self.shape(res)),
            T::Conv2dGradInput => (self.shape(res), self.shape(ops[1]), self.shape(ops[0])),
            _ => (self.shape(ops[0]), self.shape(res), self.shape(ops[1])),
        };
        let rank4 = |s: Vec<u64>| {
            <[u64; 4]>::try_from(s).map_err(|_| located(span, "a convolution of rank ≠ 4"))
        };
        let ([n, c, h, w], [o, cg, kh, kw], [_, _, oh, ow]) = (rank4(xs)?, rank4(ws)?, rank4(ys)?);
        let og = o / a.groups.max(1);
        let [top, left, _, _] = a.pads([kh, kw]).map(|p| p as i64);
        let ([sh, sw], [dh, dw]) = (a.stride.map(|s| s as i64), a.dilation.map(|s| s as i64));
        // `(d{g} floordiv per)·width + m`: member `m` of the group of `d{g}` (of `per` per
        // group) among groups `width` wide.
        let grouped = |g: usize, per: u64, width: u64, m: Expr| {
            if a.groups == 1 {
                m
            } else {
                e_add(e_mul(e_floordiv(dim(g), per as i64), width as i64), m)
            }
        };
        let t = self.output(op, 0)?;
        let rn = value_name(self.m, res);
        // Forward over an input in channel-packed texels (`pack = "c"`), whole texels of channels
        // per group: the reduction runs over the taps, then the texels, then the four channels
        // of a texel, so that a kernel reads each input texel once for its four values.
        let packed_input =
            kind == T::Conv2d && cg % 4 == 0 && self.access.get(&ops[0]).is_some_and(|a| {
                a.map.is_none()
                    && matches!(self.layout_of_tensor(a.t), Layout::RTile(r) if r.pack == Pack::C)
            });
        let (domain, inputs, body, epilogue) = match kind {
            T::Conv2d | T::Conv2dGradWeight => {
                let fwd = kind == T::Conv2d;
                // The dims of (n, o, i, j, p, q) and the channel within the group, in: the
                // forward [N, O, OH, OW | C/g, KH, KW] (channel d4); the forward over packed
                // input [N, O, OH, OW | KH, KW, C/g/4, 4] (channel 4·d6 + d7); the weight
                // gradient [O, C/g, KH, KW | N, OH, OW] (channel d1).
                let ([dn, d_o, di, dj, dp, dq], domain, member) = if packed_input {
                    let member = e_add(e_mul(dim(6), 4), dim(7));
                    ([0, 1, 2, 3, 4, 5], vec![n, o, oh, ow, kh, kw, cg / 4, 4], member)
                } else if fwd {
                    ([0, 1, 2, 3, 5, 6], vec![n, o, oh, ow, cg, kh, kw], dim(4))
                } else {
                    ([4, 0, 5, 6, 2, 3], vec![o, cg, kh, kw, n, oh, ow], dim(1))
                };
                let ih = Affine { terms: vec![(di, sh), (dp, dh)], constant: -top };
                let iw = Affine { terms: vec![(dj, sw), (dq, dw)], constant: -left };
                let cond = within(&iw, w, &domain, within(&ih, h, &domain, None));
                let chan = grouped(d_o, og, cg, member.clone());
                let x_map = vec![dim(dn), chan, ih.expr(), iw.expr()];
                let (inputs, body, epilogue) = if fwd {
                    let w_map = vec![dim(d_o), member, dim(dp), dim(dq)];
                    let mut inputs =
                        vec![self.read(ops[0], x_map, span)?, self.read(ops[1], w_map, span)?];
                    let epilogue = if ops.len() == 3 {
                        inputs.push(self.read(ops[2], vec![dim(1)], span)?);
                        Some(add(Scalar::Acc, x(2)))
                    } else {
                        None
                    };
                    (inputs, mul(x(0), x(1)), epilogue)
                } else {
                    let inputs = vec![
                        self.read(ops[0], x_map, span)?,
                        self.read(ops[1], vec![dim(4), dim(0), dim(5), dim(6)], span)?,
                    ];
                    (inputs, mul(x(1), x(0)), None)
                };
                let body = match cond {
                    Some(c) => select(c, body, f(0.0)),
                    None => body,
                };
                (domain, inputs, body, epilogue)
            }
            _ => {
                // [N, C, H, W | O/g, KH, KW]: dx[n, ch, v, u] sums dy[n, o, i, j]·w[o, c, p, q]
                // over the taps with i·sh + p·dh − top = v (likewise j), i.e. i = (v + top −
                // p·dh) / sh where that divides exactly and lies in [0, OH).
                let domain = vec![n, c, h, w, og, kh, kw];
                let nv = Affine { terms: vec![(2, 1), (5, -dh)], constant: top };
                let nu = Affine { terms: vec![(3, 1), (6, -dw)], constant: left };
                let mut cond = None;
                for (v, s, size) in [(&nv, sh, oh), (&nu, sw, ow)] {
                    let (lo, hi) = v.range(&domain);
                    if lo < 0 {
                        cond = and(cond, bin(B::Ge, v.scalar(), int(0)));
                    }
                    if s > 1 {
                        cond = and(cond, bin(B::Eq, bin(B::Rem, v.scalar(), int(s)), int(0)));
                    }
                    let last = (size as i64 - 1) * s;
                    if hi > last {
                        cond = and(cond, bin(B::Le, v.scalar(), int(last)));
                    }
                }
                let oc = grouped(1, cg, og, dim(4));
                let cin = if a.groups == 1 {
                    dim(1)
                } else {
                    Expr::Bin(IndexOp::Mod, Box::new(dim(1)), Box::new(Expr::Const(cg as i64)))
                };
                let inputs = vec![
                    self.read(
                        ops[0],
                        vec![
                            dim(0),
                            oc.clone(),
                            e_floordiv(nv.expr(), sh),
                            e_floordiv(nu.expr(), sw),
                        ],
                        span,
                    )?,
                    self.read(ops[1], vec![oc, cin, dim(5), dim(6)], span)?,
                ];
                let body = match cond {
                    Some(c) => select(c, mul(x(0), x(1)), f(0.0)),
                    None => mul(x(0), x(1)),
                };
                (domain, inputs, body, None)
            }
        };
        self.push(
            op,
            rn,
            domain,
            4,
            inputs,
            out(t, identity(4)),
            body,
            Some(Combine::Add),
            epilogue,
        );
        Ok(())
    }

    /// `tensor.upsample` (nearest): a copy reading `x[n, c, i floordiv s, j floordiv s]`.
    pub(crate) fn upsample(&mut self, op: Op) -> Result<(), Diagnostic> {
        let d = self.m.op(op);
        let (span, src, res) = (d.span, d.operands[0], d.results[0]);
        let s = d.attr("scale").and_then(Attr::as_int).unwrap_or(2).max(1);
        let map: Map = vec![dim(0), dim(1), e_floordiv(dim(2), s), e_floordiv(dim(3), s)];
        let inputs = vec![self.read(src, map, span)?];
        let t = self.output(op, 0)?;
        let shape = self.shape(res);
        self.elementwise(op, value_name(self.m, res), shape, inputs, t, x(0));
        Ok(())
    }
}

//! The bounds prover: is every storage access of a launch (or every read of a `layout.remap`)
//! inside its storage, at every point of the domain where it happens?
//!
//! One question is an index expression `e` over a box of dimension values (inclusive ranges),
//! an allowed range of values, and optionally a condition (a launch's guard: `0 <= g_i < b_i`
//! for every result `g_i` of the guard map) outside of which the access does not happen. The
//! answer ([`Bound`]) is
//!
//! - [`Bound::Proven`]: at every point of the box where the condition holds, `e` is defined and
//!   in range;
//! - [`Bound::Violated`]: a concrete point of the box, where the condition holds, at which `e` is
//!   undefined (a division by a non-positive number, an overflow) or out of range, with the
//!   value there;
//! - [`Bound::Unknown`]: the work budget ([`BUDGET`] boxes) ran out before either was shown.
//!
//! How: sound interval arithmetic of `e` over the box (`fbc_index::Interval`, with a flag for
//! operations that may be undefined), refined by branch and bound. When the interval of a box
//! is neither inside nor outside the range, the widest dimension that `e` or the condition
//! reads is split in two and both halves are examined, the lower half first; a box that has
//! shrunk to a point (in the dimensions that matter) is decided by evaluating `e` there. A box
//! whose interval is entirely out of range, where the condition certainly holds, is a violation
//! at its lowest corner. Nothing ever enumerates the points of the domain, so a domain of 10^12
//! points costs what a small one does; maps the compiler writes are proven by the first
//! interval evaluation.
//!
//! Every [`Bound::Violated`] witness is confirmed by a concrete evaluation with the semantics of
//! the reference executor before it is reported, so a violation is never a false alarm.
//!
//! [`LaunchBounds`] asks these questions for every access of a [`Kernel`]: each operand's map
//! (inputs where the body or the epilogue reads them, under the guard, where a reduction's
//! statistics read them, under the guard too, and where a row kernel's statistics read them,
//! everywhere; the output where it is written, everywhere), the guard map itself (defined everywhere), and every `xK[e]` load whose
//! offset depends only on domain indices. Loads whose offset depends on data (an embedding id,
//! a cross-entropy label) cannot be decided here: back ends check them when they run. Reads
//! under a `select` branch happen only where the branch is taken, so a violation there is not
//! certain and counts as [`Bound::Unknown`].

use std::fmt;

use fbc_index::{Expr, IndexMap, Interval};
use fbc_ir::attr::BinOp;

use super::kernel::{Kernel, MemType, Scalar, ScalarBin, ScalarUn, StorageKind};

/// Boxes examined per question before the answer is [`Bound::Unknown`].
pub const BUDGET: usize = 4096;

/// The answer to one bounds question (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Bound {
    /// In range at every point where the access happens.
    Proven,
    /// Out of range (or undefined: `value` is `None`) at `point`, where the access happens.
    Violated { point: Vec<i64>, value: Option<i64> },
    /// The budget ran out.
    Unknown,
}

impl Bound {
    /// Whether the access needs no check when it runs.
    pub fn is_proven(&self) -> bool {
        matches!(self, Bound::Proven)
    }

    /// The worse of two answers: a violation, else unknown, else proven.
    fn worst(self, other: Bound) -> Bound {
        match (self, other) {
            (v @ Bound::Violated { .. }, _) | (_, v @ Bound::Violated { .. }) => v,
            (Bound::Unknown, _) | (_, Bound::Unknown) => Bound::Unknown,
            _ => Bound::Proven,
        }
    }
}

/// An index expression with its variables resolved to dimension positions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ix {
    Dim(usize),
    Const(i64),
    Neg(Box<Ix>),
    Bin(BinOp, Box<Ix>, Box<Ix>),
}

/// The interval of an expression over a box, and whether it may be (or surely is) undefined.
#[derive(Debug, Clone, Copy)]
struct Span {
    iv: Interval,
    maybe_undef: bool,
    surely_undef: bool,
}

impl Ix {
    /// `e` with each variable replaced by its position in `dims`; `None` if a variable is not
    /// one of them.
    pub fn of(e: &Expr, dims: &[String]) -> Option<Ix> {
        Some(match e {
            Expr::Var(v) => Ix::Dim(dims.iter().position(|d| d == v)?),
            Expr::Const(c) => Ix::Const(*c),
            Expr::Neg(a) => Ix::Neg(Box::new(Ix::of(a, dims)?)),
            Expr::Bin(op, a, b) => {
                Ix::Bin(*op, Box::new(Ix::of(a, dims)?), Box::new(Ix::of(b, dims)?))
            }
        })
    }

    /// The value at `p` with the semantics of index maps (`BinOp::apply`): `None`
    /// where undefined.
    pub fn eval(&self, p: &[i64]) -> Option<i64> {
        match self {
            Ix::Dim(d) => p.get(*d).copied(),
            Ix::Const(c) => Some(*c),
            Ix::Neg(a) => a.eval(p)?.checked_neg(),
            Ix::Bin(op, a, b) => op.apply(a.eval(p)?, b.eval(p)?),
        }
    }

    /// The value at `p` with the integer semantics of scalar payloads: `+ - *` wrap; only
    /// divisions by a positive literal are ever built (see [`Ix::of_scalar`]).
    fn eval_wrapping(&self, p: &[i64]) -> Option<i64> {
        match self {
            Ix::Dim(d) => p.get(*d).copied(),
            Ix::Const(c) => Some(*c),
            Ix::Neg(a) => Some(a.eval_wrapping(p)?.wrapping_neg()),
            Ix::Bin(op, a, b) => {
                let (a, b) = (a.eval_wrapping(p)?, b.eval_wrapping(p)?);
                match op {
                    BinOp::Add => Some(a.wrapping_add(b)),
                    BinOp::Sub => Some(a.wrapping_sub(b)),
                    BinOp::Mul => Some(a.wrapping_mul(b)),
                    _ => op.apply(a, b),
                }
            }
        }
    }

    /// An integer scalar expression that reads only domain indices and literals, through
    /// `+ - *`, unary `-`, and `/` or `%` by a positive literal (floor semantics, as index
    /// maps); `None` for anything else (a data-dependent offset).
    pub fn of_scalar(s: &Scalar) -> Option<Ix> {
        Some(match s {
            Scalar::Int(v) => Ix::Const(*v),
            Scalar::Dim(d) => Ix::Dim(*d),
            Scalar::Un(ScalarUn::Neg, a) => Ix::Neg(Box::new(Ix::of_scalar(a)?)),
            Scalar::Un(ScalarUn::Floor, a) => Ix::of_scalar(a)?,
            Scalar::Bin(op, a, b) => {
                let op = match op {
                    ScalarBin::Add => BinOp::Add,
                    ScalarBin::Sub => BinOp::Sub,
                    ScalarBin::Mul => BinOp::Mul,
                    ScalarBin::Div if matches!(**b, Scalar::Int(c) if c > 0) => BinOp::FloorDiv,
                    ScalarBin::Rem if matches!(**b, Scalar::Int(c) if c > 0) => BinOp::Mod,
                    _ => return None,
                };
                Ix::Bin(op, Box::new(Ix::of_scalar(a)?), Box::new(Ix::of_scalar(b)?))
            }
            _ => return None,
        })
    }

    /// The expression as an index expression over the dimensions `d0, d1, ...`.
    pub fn to_expr(&self) -> Expr {
        match self {
            Ix::Dim(d) => Expr::dim(*d),
            Ix::Const(c) => Expr::Const(*c),
            Ix::Neg(a) => Expr::Neg(Box::new(a.to_expr())),
            Ix::Bin(op, a, b) => Expr::Bin(*op, Box::new(a.to_expr()), Box::new(b.to_expr())),
        }
    }

    /// Marks the dimensions the expression reads.
    fn mark(&self, used: &mut [bool]) {
        match self {
            Ix::Dim(d) => {
                if let Some(u) = used.get_mut(*d) {
                    *u = true;
                }
            }
            Ix::Const(_) => {}
            Ix::Neg(a) => a.mark(used),
            Ix::Bin(_, a, b) => {
                a.mark(used);
                b.mark(used);
            }
        }
    }

    /// Sound interval of the expression over box `b`, with its definedness.
    fn span(&self, b: &[Interval]) -> Span {
        self.span_each(b, &mut |_| {})
    }

    /// Whether every subexpression (this one included) is defined and inside the 32-bit signed
    /// range at every point of box `b`: then C's `int` arithmetic computes it exactly. Sound,
    /// not complete: `false` may be a bound too wide to prove it.
    pub fn fits_i32(&self, b: &[Interval]) -> bool {
        let mut all = true;
        self.span_each(b, &mut |s| {
            all &=
                !s.maybe_undef && s.iv.lo >= i64::from(i32::MIN) && s.iv.hi <= i64::from(i32::MAX);
        });
        all
    }

    /// [`Ix::span`], calling `each` with the span of every subexpression, children first.
    fn span_each(&self, b: &[Interval], each: &mut dyn FnMut(&Span)) -> Span {
        let s = self.span_node(b, each);
        each(&s);
        s
    }

    fn span_node(&self, b: &[Interval], each: &mut dyn FnMut(&Span)) -> Span {
        let ok = |iv| Span { iv, maybe_undef: false, surely_undef: false };
        match self {
            Ix::Dim(d) => ok(b.get(*d).copied().unwrap_or(Interval::FULL)),
            Ix::Const(c) => ok(Interval::point(*c)),
            Ix::Neg(a) => {
                let s = a.span_each(b, each);
                let checked = s.iv.checked_neg();
                Span {
                    iv: checked.unwrap_or(-s.iv),
                    maybe_undef: s.maybe_undef || checked.is_none(),
                    surely_undef: s.surely_undef || s.iv == Interval::point(i64::MIN),
                }
            }
            Ix::Bin(op, a, c) => {
                let (sa, sc) = (a.span_each(b, each), c.span_each(b, each));
                let (a, c) = (sa.iv, sc.iv);
                let mut maybe = sa.maybe_undef || sc.maybe_undef;
                let mut surely = sa.surely_undef || sc.surely_undef;
                let iv = match op {
                    BinOp::Add | BinOp::Sub | BinOp::Mul => {
                        let (checked, clamped) = match op {
                            BinOp::Add => (a.checked_add(c), a + c),
                            BinOp::Sub => (a.checked_sub(c), a - c),
                            _ => (a.checked_mul(c), a * c),
                        };
                        maybe |= checked.is_none();
                        checked.unwrap_or(clamped)
                    }
                    BinOp::FloorDiv | BinOp::CeilDiv | BinOp::Mod => {
                        maybe |= c.lo < 1;
                        surely |= c.hi < 1;
                        match op {
                            BinOp::FloorDiv => a.floordiv(c),
                            BinOp::CeilDiv => a.ceildiv(c),
                            _ => a.modulo(c),
                        }
                    }
                    // Defined for a shift amount in 0..64 (and, for `<<`, without overflow:
                    // checked as a product with the range of 2^b, which contains every 2^b).
                    BinOp::Shl | BinOp::Shr => {
                        maybe |= c.lo < 0 || c.hi > 63;
                        surely |= c.hi < 0 || c.lo > 63;
                        if *op == BinOp::Shl {
                            let pow =
                                Interval::new(1i64 << c.lo.clamp(0, 62), 1i64 << c.hi.clamp(0, 62));
                            maybe |= c.hi > 62 || pow.and_then(|p| a.checked_mul(p)).is_none();
                            a << c
                        } else {
                            a >> c
                        }
                    }
                    BinOp::And => a.and(c),
                    BinOp::Min => a.min(c),
                    BinOp::Max => a.max(c),
                };
                Span { iv, maybe_undef: maybe || surely, surely_undef: surely }
            }
        }
    }
}

/// The condition under which an access happens: every `exprs[i]` defined and in
/// `[0, bounds[i])`, the first `zeroed` of them with the dimensions marked in `zero` read as 0 (a
/// launch's guard is evaluated once per parallel point, with the reduction dimensions at 0; the
/// ranges a `select` states for its first branch follow, read at the point itself).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    pub exprs: Vec<Ix>,
    pub bounds: Vec<u64>,
    pub zero: Vec<bool>,
    pub zeroed: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tri {
    Never,
    Maybe,
    Always,
}

/// `[0, len)` as an inclusive interval; `None` when empty.
fn below(len: u64) -> Option<Interval> {
    let hi = i64::try_from(len.checked_sub(1)?).unwrap_or(i64::MAX);
    Some(Interval { lo: 0, hi })
}

impl Condition {
    fn on_box(&self, b: &[Interval]) -> Tri {
        let zb: Vec<Interval> = b
            .iter()
            .zip(&self.zero)
            .map(|(&iv, &z)| if z { Interval::point(0) } else { iv })
            .collect();
        let mut all = true;
        for (i, (e, &n)) in self.exprs.iter().zip(&self.bounds).enumerate() {
            let s = e.span(if i < self.zeroed { &zb } else { b });
            let Some(r) = below(n) else { return Tri::Never };
            if s.surely_undef || s.iv.intersect(r).is_none() {
                return Tri::Never;
            }
            all &= !s.maybe_undef && s.iv.lo >= r.lo && s.iv.hi <= r.hi;
        }
        if all {
            Tri::Always
        } else {
            Tri::Maybe
        }
    }

    /// Whether the condition holds at `p` (an undefined condition does not).
    pub fn holds(&self, p: &[i64]) -> bool {
        let zp: Vec<i64> = p.iter().zip(&self.zero).map(|(&v, &z)| if z { 0 } else { v }).collect();
        self.exprs.iter().zip(&self.bounds).enumerate().all(|(i, (e, &n))| {
            e.eval(if i < self.zeroed { &zp } else { p }).is_some_and(|v| v >= 0 && (v as u64) < n)
        })
    }

    fn mark(&self, used: &mut [bool]) {
        let mut g = vec![false; used.len()];
        for e in &self.exprs[..self.zeroed.min(self.exprs.len())] {
            e.mark(&mut g);
        }
        for ((u, g), z) in used.iter_mut().zip(g).zip(&self.zero) {
            *u |= g && !z;
        }
        for e in self.exprs.iter().skip(self.zeroed) {
            e.mark(used);
        }
    }

    /// `self` (or no condition) and the ranges `more`, read at the point itself.
    fn with(this: Option<&Condition>, more: &[(Ix, u64)], rank: usize) -> Option<Condition> {
        if more.is_empty() {
            return this.cloned();
        }
        let mut c = this.cloned().unwrap_or(Condition {
            exprs: Vec::new(),
            bounds: Vec::new(),
            zero: vec![false; rank],
            zeroed: 0,
        });
        c.zeroed = c.exprs.len();
        for (e, n) in more {
            c.exprs.push(e.clone());
            c.bounds.push(*n);
        }
        Some(c)
    }
}

/// One bounds question: is `expr` (evaluated by `eval`) defined and inside `range` (`None`:
/// nothing is allowed) at every point of `domain` where `cond` holds? See the module docs.
pub fn prove(
    expr: &Ix,
    range: Option<Interval>,
    domain: &[Interval],
    cond: Option<&Condition>,
) -> Bound {
    prove_with(expr, &|p| expr.eval(p), range, domain, cond, BUDGET)
}

/// [`prove`] with the concrete evaluation used to confirm a witness (`eval`) and the budget.
fn prove_with(
    expr: &Ix,
    eval: &dyn Fn(&[i64]) -> Option<i64>,
    range: Option<Interval>,
    domain: &[Interval],
    cond: Option<&Condition>,
    budget: usize,
) -> Bound {
    let n = domain.len();
    let mut used = vec![false; n];
    expr.mark(&mut used);
    if let Some(c) = cond {
        c.mark(&mut used);
    }
    let inside = |v: i64| range.is_some_and(|r| r.lo <= v && v <= r.hi);
    let mut stack = vec![domain.to_vec()];
    let mut boxes = 0usize;
    while let Some(b) = stack.pop() {
        boxes += 1;
        if boxes > budget {
            return Bound::Unknown;
        }
        let g = cond.map_or(Tri::Always, |c| c.on_box(&b));
        if g == Tri::Never {
            continue;
        }
        let s = expr.span(&b);
        if !s.maybe_undef && inside(s.iv.lo) && inside(s.iv.hi) {
            continue;
        }
        let outside =
            s.surely_undef || range.is_none_or(|r| s.iv.intersect(r).is_none()) && !s.maybe_undef;
        let widest = split_dim(expr, cond.filter(|_| g == Tri::Maybe), &b, &used);
        if widest.is_none() || (outside && g == Tri::Always) {
            // A point (in the dimensions that matter), or a box out of range everywhere: its
            // lowest corner decides, and a violation there is the witness.
            let p: Vec<i64> = b.iter().map(|i| i.lo).collect();
            if cond.is_none_or(|c| c.holds(&p)) {
                match eval(&p) {
                    Some(v) if inside(v) => {}
                    value => return Bound::Violated { point: p, value },
                }
            }
            if widest.is_none() {
                continue;
            }
        }
        let Some(d) = widest else { continue };
        let (lo, hi) = (b[d].lo, b[d].hi);
        let mid = (i128::from(lo) + (i128::from(hi) - i128::from(lo)) / 2) as i64;
        let mut upper = b.clone();
        upper[d] = Interval { lo: mid + 1, hi };
        let mut lower = b;
        lower[d] = Interval { lo, hi: mid };
        stack.push(upper);
        stack.push(lower);
    }
    Bound::Proven
}

/// The dimension to split a box along: the one whose range contributes most to the widths of
/// the expression's interval and (where the condition is undecided) of the condition's
/// intervals, measured as the relative shrinking when that dimension is fixed; ties go to the
/// widest range, then the lowest dimension. `None` when no dimension that matters has more than
/// one value.
fn split_dim(expr: &Ix, cond: Option<&Condition>, b: &[Interval], used: &[bool]) -> Option<usize> {
    let candidates: Vec<usize> = (0..b.len()).filter(|&d| used[d] && b[d].lo < b[d].hi).collect();
    if candidates.len() <= 1 {
        return candidates.first().copied();
    }
    let width = |iv: Interval| (i128::from(iv.hi) - i128::from(iv.lo)) as f64;
    let widths = |b: &[Interval]| -> Vec<f64> {
        let mut w = vec![width(expr.span(b).iv)];
        if let Some(c) = cond {
            let zb: Vec<Interval> = b
                .iter()
                .zip(&c.zero)
                .map(|(&iv, &z)| if z { Interval::point(0) } else { iv })
                .collect();
            w.extend(
                c.exprs
                    .iter()
                    .enumerate()
                    .map(|(i, e)| width(e.span(if i < c.zeroed { &zb } else { b }).iv)),
            );
        }
        w
    };
    let base = widths(b);
    let mut fixed = b.to_vec();
    let mut best: Option<(f64, i128, usize)> = None;
    for d in candidates {
        fixed[d] = Interval::point(b[d].lo);
        let score: f64 = base
            .iter()
            .zip(widths(&fixed))
            .map(|(&w0, w1)| if w0 > 0.0 { (w0 - w1) / w0 } else { 0.0 })
            .sum();
        fixed[d] = b[d];
        let span = i128::from(b[d].hi) - i128::from(b[d].lo);
        let better = best.is_none_or(|(s, w, _)| score > s || (score == s && span > w));
        if better {
            best = Some((score, span, d));
        }
    }
    best.map(|(_, _, d)| d)
}

/// The box `[0, extent)` of every dimension; `None` when one is empty (no point at all).
pub fn domain_box(extents: &[u64]) -> Option<Vec<Interval>> {
    extents.iter().map(|&e| below(e).map(|r| Interval { lo: 0, hi: r.hi })).collect()
}

/// Whether every result of `map` is defined and inside `[0, shape[i])` at every point of
/// `[0, box)`: the check of `layout.remap` (no condition). `Violated` names the first result
/// found out of range; `None` when the map's variables are not its dimensions or the ranks
/// disagree.
pub fn prove_map(map: &IndexMap, domain: &[u64], shape: &[u64]) -> Option<(Bound, usize)> {
    if map.results.len() != shape.len() || map.dims.len() != domain.len() {
        return None;
    }
    let Some(b) = domain_box(domain) else { return Some((Bound::Proven, 0)) };
    let mut unknown = None;
    for (i, (e, &n)) in map.results.iter().zip(shape).enumerate() {
        let ix = Ix::of(e, &map.dims)?;
        match prove(&ix, below(n), &b, None) {
            Bound::Proven => {}
            Bound::Unknown => unknown = unknown.or(Some(i)),
            v @ Bound::Violated { .. } => return Some((v, i)),
        }
    }
    Some(match unknown {
        Some(i) => (Bound::Unknown, i),
        None => (Bound::Proven, 0),
    })
}

// ----- launches ----------------------------------------------------------------------------------

/// What an access does with its operand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AccessKind {
    /// `xK`: the operand read at its map.
    Read,
    /// The output written at its map.
    Write,
    /// `xK[e]`: a buffer read at an explicit offset.
    Load,
}

/// A violated access of a launch: what, where and the offending value. `Display` is the
/// verifier's message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The operand, or `None` for the guard map.
    pub operand: Option<usize>,
    pub kind: AccessKind,
    /// The operand's type (for the guard: unused).
    pub ty: Option<MemType>,
    /// The map result (storage coordinate) at fault: 0 the offset or x, 1 y, 2 the channel.
    pub coord: usize,
    /// The offset expression of a load.
    pub load: Option<String>,
    pub point: Vec<i64>,
    /// `None`: the map is undefined there.
    pub value: Option<i64>,
}

/// `d0=8, d1=0`.
pub fn point_text(p: &[i64]) -> String {
    if p.is_empty() {
        return "the single point of the domain".into();
    }
    let parts: Vec<String> = p.iter().enumerate().map(|(i, v)| format!("d{i}={v}")).collect();
    parts.join(", ")
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = point_text(&self.point);
        let (Some(k), Some(ty)) = (self.operand, self.ty) else {
            return write!(
                f,
                "the guard is undefined at {at} (a division by a non-positive number, or an overflow)"
            );
        };
        let verb = match self.kind {
            AccessKind::Read => "read".to_string(),
            AccessKind::Write => "written".to_string(),
            AccessKind::Load => {
                format!("loaded by `x{k}[{}]`", self.load.as_deref().unwrap_or(".."))
            }
        };
        let Some(v) = self.value else {
            return write!(
                f,
                "the map of operand {k} ({ty}) is undefined at {at} (a division by a non-positive \
                 number, or an overflow)"
            );
        };
        match ty.storage {
            StorageKind::Buffer { elems } => write!(
                f,
                "operand {k} ({ty}) is {verb} at offset {v} at {at}, outside its {elems} elements"
            ),
            StorageKind::Image { width, height } => {
                let (what, n, unit) = match self.coord {
                    0 => ("x", width, "texels in x"),
                    1 => ("y", height, "texels in y"),
                    _ => ("channel", 4, "channels"),
                };
                write!(
                    f,
                    "operand {k} ({ty}) is {verb} at {what} = {v} at {at}, outside its {n} {unit}"
                )
            }
        }
    }
}

/// Where a payload runs: the body (over the whole domain, under the guard), the epilogue
/// (once per parallel point, under the guard), a statistic's body (over the whole domain) or
/// its epilogue (once per parallel point); a row kernel's statistics ignore the guard (every
/// row point takes part), a reduction's run under it, at the output points it computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Site {
    Body,
    Epilogue,
    StatBody,
    StatEpilogue,
}

impl Site {
    const ALL: [Site; 4] = [Site::Body, Site::Epilogue, Site::StatBody, Site::StatEpilogue];

    /// Whether it runs at every domain point (else once per parallel point).
    fn everywhere(self) -> bool {
        matches!(self, Site::Body | Site::StatBody)
    }

    fn guarded(self, row: bool) -> bool {
        matches!(self, Site::Body | Site::Epilogue) || !row
    }
}

/// Ranges `0 ≤ e < n` of domain expressions that hold where an access happens.
type Assumed = Vec<(Ix, u64)>;

/// Where an operand is read, per [`Site`]: whether it is read there, whether outside every
/// `select` branch, and the ranges every one of its reads there may assume (those the
/// conditions of the `select`s around it state).
#[derive(Debug, Clone, Default)]
struct Uses([(bool, bool, Option<Assumed>); 4]);

/// The ranges `0 ≤ e < n` that condition `c` states as conjuncts (`e >= 0`, with `e < n` or
/// `e <= n - 1` where there is one), `e` an integer expression of the domain: what the first
/// branch of a `select` on `c` may assume (the zero padding of a convolution's input).
fn select_ranges(c: &Scalar) -> Assumed {
    fn conjuncts<'a>(c: &'a Scalar, lo: &mut Vec<&'a Scalar>, hi: &mut Vec<(&'a Scalar, u64)>) {
        match c {
            Scalar::Bin(ScalarBin::And, a, b) => {
                conjuncts(a, lo, hi);
                conjuncts(b, lo, hi);
            }
            Scalar::Bin(ScalarBin::Ge, e, z) if **z == Scalar::Int(0) => lo.push(e),
            Scalar::Bin(ScalarBin::Lt, e, n) => {
                if let Scalar::Int(n) = **n {
                    if let Ok(n) = u64::try_from(n) {
                        hi.push((e, n));
                    }
                }
            }
            Scalar::Bin(ScalarBin::Le, e, n) => {
                if let Scalar::Int(n) = **n {
                    if let Some(n) = u64::try_from(n).ok().and_then(|n| n.checked_add(1)) {
                        hi.push((e, n));
                    }
                }
            }
            _ => {}
        }
    }
    let (mut lo, mut hi) = (Vec::new(), Vec::new());
    conjuncts(c, &mut lo, &mut hi);
    // `e >= 0` alone (lowering drops a bound no point can exceed) is `0 ≤ e < 2^64 - 1`.
    lo.iter()
        .map(|e| (*e, hi.iter().find(|(h, _)| h == e).map_or(u64::MAX, |(_, n)| *n)))
        .filter_map(|(e, n)| Some((Ix::of_scalar(e)?, n)))
        .collect()
}

/// Visits `e`, calling `f(scalar, under_select_branch, assumed)` for every subexpression, with
/// the ranges the conditions of the enclosing `select`s' first branches state.
fn walk(e: &Scalar, cond: bool, assumed: &Assumed, f: &mut dyn FnMut(&Scalar, bool, &Assumed)) {
    f(e, cond, assumed);
    match e {
        Scalar::Load(_, a) | Scalar::Un(_, a) => walk(a, cond, assumed, f),
        Scalar::Bin(_, a, b) => {
            walk(a, cond, assumed, f);
            walk(b, cond, assumed, f);
        }
        Scalar::Select(c, a, b) => {
            walk(c, cond, assumed, f);
            let mut then = assumed.clone();
            then.extend(select_ranges(c));
            walk(a, true, &then, f);
            walk(b, true, assumed, f);
        }
        _ => {}
    }
}

/// What both `a` and `b` assume (`None`: not read yet).
fn common(a: Option<Assumed>, b: &Assumed) -> Option<Assumed> {
    Some(match a {
        None => b.clone(),
        Some(a) => a.into_iter().filter(|r| b.contains(r)).collect(),
    })
}

/// The bounds of every access of one launch.
#[derive(Debug, Clone, PartialEq)]
pub struct LaunchBounds {
    /// Per operand: its map's reads (and, for the output, writes); `Proven` for an operand the
    /// launch never accesses at its map.
    pub maps: Vec<Bound>,
    /// The guard map defined at every parallel point (`Proven` without a guard).
    pub guard: Bound,
    /// Every `xK[e]` load, in body-then-epilogue order: the operand, the offset, and its bound
    /// (`None`: the offset depends on data, so it is checked when the kernel runs).
    pub loads: Vec<(usize, Scalar, Option<Bound>)>,
    /// The first certain violation, for the verifier.
    pub violation: Option<Violation>,
}

impl LaunchBounds {
    /// Whether reads and writes of operand `k` at its map need a check when the kernel runs.
    pub fn map_checked(&self, k: usize) -> bool {
        self.maps.get(k).is_some_and(|b| !b.is_proven())
    }

    /// Whether a load of operand `k` at `offset` needs a check when the kernel runs.
    pub fn load_checked(&self, k: usize, offset: &Scalar) -> bool {
        self.loads
            .iter()
            .find(|(j, e, _)| *j == k && e == offset)
            .is_none_or(|(_, _, b)| !b.as_ref().is_some_and(Bound::is_proven))
    }

    /// Whether anything needs a check when the kernel runs.
    pub fn any_checked(&self) -> bool {
        !self.guard.is_proven()
            || self.maps.iter().any(|b| !b.is_proven())
            || self.loads.iter().any(|(_, _, b)| !b.as_ref().is_some_and(Bound::is_proven))
    }
}

impl Kernel {
    /// Proves or refutes every access of the launch against its operand `types` (see the module
    /// docs). The kernel must have passed [`Kernel::check`].
    pub fn bounds(&self, types: &[MemType]) -> LaunchBounds {
        if self.attention.is_some() {
            return self.attention_bounds(types);
        }
        let n = self.maps.len();
        let rank = self.domain.len();
        let np = self.parallel_dims();
        let mut out = LaunchBounds {
            maps: vec![Bound::Proven; n],
            guard: Bound::Proven,
            loads: Vec::new(),
            violation: None,
        };
        // The boxes: the whole domain (the body), and the parallel points with the reduction
        // dimensions at 0 (the guard, the epilogue, the store).
        let Some(full) = domain_box(&self.domain) else {
            // Some extent is 0. An empty reduction still runs the epilogue and the store.
            if domain_box(&self.domain[..np]).is_none() {
                return out;
            }
            return self.bounds_parallel_only(types, out);
        };
        let mut par = full.clone();
        for d in par.iter_mut().skip(np) {
            *d = Interval::point(0);
        }
        let (full, par) = (self.with_symbols(full), self.with_symbols(par));
        self.fill(types, &full, Some(&par), &mut out, rank);
        out
    }

    /// Box `b` of the domain followed by the ranges of the symbols (a map's variables are its
    /// dimensions, then its symbols).
    fn with_symbols(&self, mut b: Vec<Interval>) -> Vec<Interval> {
        b.extend(self.symbols.iter().map(|s| Interval { lo: s.lo, hi: s.hi }));
        b
    }

    /// [`Kernel::bounds`] when the reduction sub-domain is empty: the body never runs.
    fn bounds_parallel_only(&self, types: &[MemType], mut out: LaunchBounds) -> LaunchBounds {
        let np = self.parallel_dims();
        let mut ext = self.domain.clone();
        for e in ext.iter_mut().skip(np) {
            *e = 1;
        }
        if let Some(par) = domain_box(&ext) {
            let rank = self.domain.len();
            self.fill(types, &self.with_symbols(par), None, &mut out, rank);
        }
        out
    }

    /// Asks every question. `full`: the body's box, or with `par = None` the parallel box when
    /// the body never runs (then `full` is the parallel box).
    fn fill(
        &self,
        types: &[MemType],
        full: &[Interval],
        par: Option<&[Interval]>,
        out: &mut LaunchBounds,
        rank: usize,
    ) {
        let body_runs = par.is_some();
        let par = par.unwrap_or(full);
        let np = self.parallel_dims();
        let n = self.maps.len();
        // A row kernel's output points (its guard and store) are every domain point; otherwise
        // the parallel points, the reduction dimensions at 0.
        let row = self.is_row();
        let points = if row { full } else { par };
        let zero: Vec<bool> = (0..rank).map(|d| d >= np && !row).collect();
        let cond = self.guard.as_ref().and_then(|g| {
            let exprs =
                g.map.results.iter().map(|e| Ix::of(e, &g.map.dims)).collect::<Option<Vec<_>>>()?;
            let zeroed = exprs.len();
            Some(Condition { exprs, bounds: g.bounds.clone(), zero: zero.clone(), zeroed })
        });
        let mut first: Option<Violation> = None;
        let mut note = |v: Violation| {
            if first.is_none() {
                first = Some(v);
            }
        };
        // The guard: defined everywhere (no condition).
        if let Some(c) = &cond {
            let mut b = Bound::Proven;
            for e in &c.exprs {
                let r = prove(e, Some(Interval::FULL), points, None);
                if let Bound::Violated { point, .. } = &r {
                    note(Violation {
                        operand: None,
                        kind: AccessKind::Read,
                        ty: None,
                        coord: 0,
                        load: None,
                        point: point.clone(),
                        value: None,
                    });
                }
                b = b.worst(r);
            }
            out.guard = b;
        }
        // Where each operand is read.
        let mut uses = vec![Uses::default(); n];
        // (k, offset, site, conditional, assumed)
        let mut loads: Vec<(usize, Scalar, Site, bool, Assumed)> = Vec::new();
        let mut scan = |e: &Scalar, site: Site, uses: &mut Vec<Uses>| {
            walk(e, false, &Vec::new(), &mut |s, c, assumed| match s {
                Scalar::In(k) if *k < n => {
                    let u = &mut uses[*k].0[site as usize];
                    u.0 = true;
                    u.1 |= !c;
                    u.2 = common(u.2.take(), assumed);
                }
                Scalar::Load(k, off) if *k < n => {
                    loads.push((*k, (**off).clone(), site, c, assumed.clone()))
                }
                _ => {}
            });
        };
        if body_runs {
            scan(&self.body, Site::Body, &mut uses);
            for st in &self.stats {
                scan(&st.body, Site::StatBody, &mut uses);
            }
        }
        if let Some(e) = &self.epilogue {
            scan(e, Site::Epilogue, &mut uses);
        }
        for e in self.stats.iter().filter_map(|st| st.epilogue.as_ref()) {
            scan(e, Site::StatEpilogue, &mut uses);
        }
        let site_box = |site: Site| if site.everywhere() { full } else { par };
        let site_cond = |site: Site| if site.guarded(row) { cond.as_ref() } else { None };
        let out_k = self.output();
        for (k, (m, ty)) in self.maps.iter().zip(types).enumerate() {
            let u = &uses[k];
            let ranges = coord_ranges(ty);
            let mut b = Bound::Proven;
            let mut ask = |bx: &[Interval], c: Option<&Condition>, kind, certain: bool| {
                for (i, (e, r)) in m.results.iter().zip(&ranges).enumerate() {
                    let Some(ix) = Ix::of(e, &m.vars()) else {
                        b = b.clone().worst(Bound::Unknown);
                        continue;
                    };
                    let mut r = prove(&ix, *r, bx, c);
                    if let Bound::Violated { point, value } = &r {
                        if certain {
                            note(Violation {
                                operand: Some(k),
                                kind,
                                ty: Some(*ty),
                                coord: i,
                                load: None,
                                point: point.clone(),
                                value: *value,
                            });
                        } else {
                            r = Bound::Unknown;
                        }
                    }
                    b = b.clone().worst(r);
                }
            };
            for site in Site::ALL {
                let (read, always, assumed) = &u.0[site as usize];
                if *read {
                    let assumed = assumed.as_deref().unwrap_or_default();
                    let c = Condition::with(site_cond(site), assumed, rank);
                    ask(site_box(site), c.as_ref(), AccessKind::Read, *always);
                }
            }
            if k == out_k {
                ask(points, None, AccessKind::Write, true);
            }
            out.maps[k] = b;
        }
        for (k, off, site, conditional, assumed) in loads {
            let c = Condition::with(site_cond(site), &assumed, rank);
            let ty = types[k];
            let bound = Ix::of_scalar(&off).map(|ix| {
                let eval = |p: &[i64]| ix.eval_wrapping(p);
                let r =
                    prove_with(&ix, &eval, below(ty.elems()), site_box(site), c.as_ref(), BUDGET);
                match r {
                    Bound::Violated { point, value } if !conditional => {
                        note(Violation {
                            operand: Some(k),
                            kind: AccessKind::Load,
                            ty: Some(ty),
                            coord: 0,
                            load: Some(off.to_string()),
                            point: point.clone(),
                            value,
                        });
                        Bound::Violated { point, value }
                    }
                    Bound::Violated { .. } => Bound::Unknown,
                    r => r,
                }
            });
            out.loads.push((k, off, bound));
        }
        out.violation = first;
    }
}

/// The allowed range of each storage coordinate: the offset of a buffer; x, y and the channel of
/// an image.
fn coord_ranges(t: &MemType) -> Vec<Option<Interval>> {
    match t.storage {
        StorageKind::Buffer { elems } => vec![below(elems)],
        StorageKind::Image { width, height } => vec![below(width), below(height), below(4)],
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use fbc_ir::ElemType;

    use super::*;

    fn ix(text: &str, dims: &[&str]) -> Ix {
        let dims: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
        Ix::of(&parse_expr(text, &dims), &dims).expect("dims")
    }

    fn parse_expr(text: &str, _dims: &[String]) -> Expr {
        Expr::parse(text).expect("parses")
    }

    fn map(text: &str) -> IndexMap {
        IndexMap::parse(text).expect("parses")
    }

    fn b(extents: &[u64]) -> Vec<Interval> {
        domain_box(extents).expect("non-empty")
    }

    fn len(n: u64) -> Option<Interval> {
        below(n)
    }

    fn violated(point: &[i64], value: Option<i64>) -> Bound {
        Bound::Violated { point: point.to_vec(), value }
    }

    #[test]
    fn out_of_range_only_inside_the_box_has_an_exact_witness() {
        // 0 at both corners d0 = 0 and d0 = 7, 6e8 at d0 = 1.
        let e = ix("d0 * (7 - d0) * 100000000", &["d0", "d1"]);
        assert_eq!(prove(&e, len(8), &b(&[8, 8]), None), violated(&[1, 0], Some(600000000)));
        // (d0 * 5) mod 11 over [0, 8): 0 5 10 4 9 3 8 2; the first out of [0, 8) is d0 = 2.
        let e = ix("(d0 * 5) mod 11", &["d0", "d1"]);
        assert_eq!(prove(&e, len(8), &b(&[8, 8]), None), violated(&[2, 0], Some(10)));
        // Corners: d0 * 10000000 at d0 = 1.
        let e = ix("d0 * 10000000", &["d0"]);
        assert_eq!(prove(&e, len(64), &b(&[8]), None), violated(&[1], Some(10000000)));
        // d0 + 1 reads one past the end.
        let e = ix("d0 + 1", &["d0"]);
        assert_eq!(prove(&e, len(64), &b(&[64]), None), violated(&[63], Some(64)));
        // Negative offsets.
        let e = ix("d0 - 3", &["d0"]);
        assert_eq!(prove(&e, len(64), &b(&[8]), None), violated(&[0], Some(-3)));
    }

    #[test]
    fn non_monotonic_maps_in_range_are_proven() {
        // d0 * (7 - d0) <= 12 on [0, 8): the interval [0, 49] is refined by splitting.
        let e = ix("d0 * (7 - d0)", &["d0"]);
        assert_eq!(prove(&e, len(13), &b(&[8]), None), Bound::Proven);
        assert_eq!(prove(&e, len(12), &b(&[8]), None), violated(&[3], Some(12)));
        let e = ix("(d0 * 5) mod 11", &["d0"]);
        assert_eq!(prove(&e, len(11), &b(&[8]), None), Bound::Proven);
        // Generated maps are proven by one interval evaluation.
        let e = ix("d0 * 64 + d1", &["d0", "d1"]);
        assert_eq!(prove(&e, len(64 * 64), &b(&[64, 64]), None), Bound::Proven);
    }

    #[test]
    fn the_guard_is_respected() {
        // Out of range for d0 >= 6, which the guard d0 < 6 excludes.
        let e = ix("d0 * 8 + d1", &["d0", "d1"]);
        let g = Condition {
            exprs: vec![ix("d0", &["d0", "d1"])],
            bounds: vec![6],
            zero: vec![false; 2],
            zeroed: 1,
        };
        assert_eq!(prove(&e, len(48), &b(&[8, 8]), Some(&g)), Bound::Proven);
        assert_eq!(prove(&e, len(48), &b(&[8, 8]), None), violated(&[6, 0], Some(48)));
        // With the guard d0 < 7 the witness is inside it.
        let g7 = Condition { bounds: vec![7], ..g.clone() };
        assert_eq!(prove(&e, len(48), &b(&[8, 8]), Some(&g7)), violated(&[6, 0], Some(48)));
        // A guard on a dimension read as 0 constrains nothing beyond d = 0.
        let gz = Condition { zero: vec![true, false], ..g };
        assert_eq!(prove(&e, len(48), &b(&[8, 8]), Some(&gz)), violated(&[6, 0], Some(48)));
    }

    #[test]
    fn divisions_by_non_positive_numbers_are_violations() {
        let e = ix("d0 floordiv (d0 - 3)", &["d0"]);
        // d0 - 3 <= 0 for d0 <= 3: undefined at d0 = 0.
        assert_eq!(prove(&e, len(100), &b(&[8]), None), violated(&[0], None));
        let e = ix("d0 mod 0", &["d0"]);
        assert_eq!(prove(&e, len(100), &b(&[8]), None), violated(&[0], None));
        let e = ix("d0 ceildiv (2 - d0)", &["d0"]);
        assert_eq!(prove(&e, len(100), &b(&[2]), None), Bound::Proven);
        assert_eq!(prove(&e, len(100), &b(&[3]), None), violated(&[2], None));
        // Overflow is undefined too.
        let e = ix("d0 * 9223372036854775807 * 2", &["d0"]);
        assert_eq!(prove(&e, len(100), &b(&[4]), None), violated(&[1], None));
    }

    #[test]
    fn huge_domains_are_decided_fast() {
        let start = Instant::now();
        // 10^12 points, in range.
        let e = ix("d0 * 1000000 + d1", &["d0", "d1"]);
        assert_eq!(
            prove(&e, len(1_000_000_000_000), &b(&[1_000_000, 1_000_000]), None),
            Bound::Proven
        );
        // Out of range only at the last point, which the guard (d0 mod 1000 == 0) excludes;
        // with the guard d0 mod 1000 != 1 it is the witness.
        let e =
            ix("d0 * 1000000 + d1 + (d0 floordiv 999999) * (d1 floordiv 999999)", &["d0", "d1"]);
        let g = Condition {
            exprs: vec![ix("d0 mod 1000", &["d0", "d1"])],
            bounds: vec![1],
            zero: vec![false; 2],
            zeroed: 1,
        };
        assert_eq!(
            prove(&e, len(1_000_000_000_000), &b(&[1_000_000, 1_000_000]), Some(&g)),
            Bound::Proven
        );
        let g =
            Condition { exprs: vec![ix("d0 mod 1000 - 1", &["d0", "d1"])], bounds: vec![999], ..g };
        assert_eq!(
            prove(&e, len(1_000_000_000_000), &b(&[1_000_000, 1_000_000]), Some(&g)),
            violated(&[999_999, 999_999], Some(1_000_000_000_000))
        );
        // 10^12 points, out of range only at the last.
        let e =
            ix("d0 * 1000000 + d1 + (d0 floordiv 999999) * (d1 floordiv 999999)", &["d0", "d1"]);
        assert_eq!(
            prove(&e, len(1_000_000_000_000), &b(&[1_000_000, 1_000_000]), None),
            violated(&[999_999, 999_999], Some(1_000_000_000_000))
        );
        assert!(start.elapsed().as_millis() < 500, "{:?}", start.elapsed());
    }

    #[test]
    fn a_select_proves_the_reads_of_its_first_branch() {
        // A 3-tap zero-padded convolution of a row of 8: x0 is read at d0 + d1 - 1, which is -1
        // and 8 at the ends, but only where the select says it is in [0, 8).
        let k = |body: &str| Kernel {
            name: "k".into(),
            source: String::new(),
            domain: vec![8, 3],
            iterators: vec![super::super::Iter::Parallel, super::super::Iter::Reduction],
            maps: vec![map("(d0, d1) -> (d0 + d1 - 1)"), map("(d0, d1) -> (d0)")],
            body: Scalar::parse(body).unwrap(),
            combine: Some(super::super::Combine::Add),
            epilogue: None,
            guard: None,
            stats: Vec::new(),
            symbols: Vec::new(),
            attention: None,
            split: None,
        };
        let t = MemType::buffer(8, ElemType::F32);
        let guarded =
            k("select(d0 + (d1 + -1) >= 0 && d0 + (d1 + -1) < 8, x0, 0.0)").bounds(&[t, t]);
        assert!(guarded.maps[0].is_proven(), "{:?}", guarded.maps[0]);
        assert!(!guarded.any_checked());
        // The lower bound alone where the upper one cannot fail (a row of 9 read up to 8).
        let nine = MemType::buffer(9, ElemType::F32);
        let lb = k("select(d0 + (d1 + -1) >= 0, x0, 0.0)").bounds(&[nine, t]);
        assert!(lb.maps[0].is_proven(), "{:?}", lb.maps[0]);
        // The upper bound alone proves nothing; in the other branch the read is checked.
        for body in ["select(d0 + (d1 + -1) < 8, x0, 0.0)", "select(d0 + (d1 + -1) < 0, 0.0, x0)"] {
            let lb = k(body).bounds(&[t, t]);
            assert!(!lb.maps[0].is_proven(), "{body}: {:?}", lb.maps[0]);
            // Conditional reads are never reported as certain violations.
            assert!(lb.violation.is_none(), "{body}");
        }
    }

    /// A reduction's statistics run at the output points the guard keeps (as the back ends
    /// compute them); a row kernel's over every row point.
    #[test]
    fn a_reductions_statistics_are_under_its_guard() {
        use super::super::{Combine, Guard, Iter, Stat};
        // Six rows of 8 read over a domain of 8 (a padded tile), the guard d0 < 6.
        let k = Kernel {
            name: "k".into(),
            source: String::new(),
            domain: vec![8, 8],
            iterators: vec![Iter::Parallel, Iter::Reduction],
            maps: vec![map("(d0, d1) -> (d0 * 8 + d1)"), map("(d0, d1) -> (d0)")],
            body: Scalar::parse("x0").unwrap(),
            combine: Some(Combine::Add),
            epilogue: Some(Scalar::parse("acc * s0").unwrap()),
            guard: Some(Guard { map: map("(d0, d1) -> (d0)"), bounds: vec![6] }),
            stats: vec![Stat::parse("add: x0 * x0").unwrap()],
            symbols: Vec::new(),
            attention: None,
            split: None,
        };
        let t = [MemType::buffer(48, ElemType::F32), MemType::buffer(8, ElemType::F32)];
        let lb = k.bounds(&t);
        assert!(lb.violation.is_none(), "{:?}", lb.violation);
        assert!(lb.maps[0].is_proven(), "{:?}", lb.maps[0]);
        // A row kernel's statistic reads every row point, guard or not.
        let row = Kernel {
            iterators: vec![Iter::Parallel, Iter::Row],
            combine: None,
            epilogue: None,
            body: Scalar::parse("x0 * s0").unwrap(),
            maps: vec![map("(d0, d1) -> (d0 * 8 + d1)"), map("(d0, d1) -> (d0 * 8 + d1)")],
            guard: Some(Guard { map: map("(d0, d1) -> (d0)"), bounds: vec![6] }),
            ..k
        };
        let lb = row.bounds(&[t[0], MemType::buffer(64, ElemType::F32)]);
        assert_eq!(
            lb.violation.map(|v| v.to_string()).as_deref(),
            Some("operand 0 (!memory.buffer<48, f32>) is read at offset 48 at d0=6, d1=0, outside its 48 elements")
        );
    }

    #[test]
    fn launch_bounds_name_the_access() {
        let k = Kernel {
            name: "k".into(),
            source: String::new(),
            domain: vec![8],
            iterators: vec![super::super::Iter::Parallel],
            maps: vec![map("(d0) -> (d0 + 1)"), map("(d0) -> (d0 * 10000000)")],
            body: Scalar::parse("x0").unwrap(),
            combine: None,
            epilogue: None,
            guard: None,
            stats: Vec::new(),
            symbols: Vec::new(),
            attention: None,
            split: None,
        };
        let t = MemType::buffer(8, ElemType::F32);
        let lb = k.bounds(&[t, MemType::buffer(64, ElemType::F32)]);
        assert_eq!(
            lb.violation.map(|v| v.to_string()).as_deref(),
            Some("operand 0 (!memory.buffer<8, f32>) is read at offset 8 at d0=7, outside its 8 elements")
        );
    }
}

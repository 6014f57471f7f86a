//! The public index-expression AST, its semantics and its canonical text form.
//!
//! `Expr` is a plain Rust tree, independent of egg, so that callers (passes,
//! codegen, the driver) never need to know about e-graphs.
//!
//! Invariants kept here:
//! * **One source of truth for semantics.** [`BinOp::apply`] and [`neg`] define
//!   what every operator means; `Expr::eval`, the e-graph constant folder and
//!   the verifier all call them, so they cannot drift apart.
//! * **Partial, checked semantics.** Overflow, a shift amount outside `0..64`
//!   and a non-positive divisor make the value undefined (`None`); nothing
//!   wraps and nothing panics.
//! * **Display round-trips.** `Expr::parse(&e.to_string()) == Ok(e)` for every
//!   tree whose variable names are identifiers and whose depth is at most
//!   [`MAX_DEPTH`](crate::MAX_DEPTH); parentheses are printed only where the
//!   precedence and left-associativity of the grammar require them.
//! * Helpers that only count or measure (`depth`, `count_divmod`, `cost`,
//!   `node_count`) are iterative, so they are safe on trees of any depth.

use std::collections::{BTreeSet, HashMap};
use std::fmt;

use crate::cost;

/// A binary operator of the index language.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BinOp {
    /// `a + b`
    Add,
    /// `a - b`
    Sub,
    /// `a * b`
    Mul,
    /// `a floordiv b`: floor division, `b` must be positive.
    FloorDiv,
    /// `a ceildiv b`: ceiling division, `b` must be positive.
    CeilDiv,
    /// `a mod b`: floor modulo (result in `[0, b)`), `b` must be positive.
    Mod,
    /// `a << b`: `a * 2^b`, `b` in `0..64`, overflow is undefined.
    Shl,
    /// `a >> b`: arithmetic shift, i.e. `a floordiv 2^b`, `b` in `0..64`.
    Shr,
    /// `a & b`: bitwise and on two's-complement 64-bit integers.
    And,
    /// `min(a, b)`
    Min,
    /// `max(a, b)`
    Max,
}

impl BinOp {
    /// All binary operators, in declaration order.
    pub const ALL: [BinOp; 11] = [
        BinOp::Add,
        BinOp::Sub,
        BinOp::Mul,
        BinOp::FloorDiv,
        BinOp::CeilDiv,
        BinOp::Mod,
        BinOp::Shl,
        BinOp::Shr,
        BinOp::And,
        BinOp::Min,
        BinOp::Max,
    ];

    /// Whether the operator is one of MLIR's affine ones (`+ - * floordiv ceildiv mod`), the
    /// operators the IR's text form spells: every map an op carries uses only these.
    pub fn is_affine(self) -> bool {
        matches!(
            self,
            BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::FloorDiv | BinOp::CeilDiv | BinOp::Mod
        )
    }

    /// Evaluates the operator; `None` means "undefined" (overflow, bad
    /// divisor, bad shift amount).
    pub fn apply(self, a: i64, b: i64) -> Option<i64> {
        match self {
            BinOp::Add => a.checked_add(b),
            BinOp::Sub => a.checked_sub(b),
            BinOp::Mul => a.checked_mul(b),
            // MLIR affine semantics: the divisor must be positive. With b > 0
            // Euclidean division *is* floor division.
            BinOp::FloorDiv => (b > 0).then(|| a.div_euclid(b)),
            BinOp::CeilDiv => {
                if b <= 0 {
                    return None;
                }
                let q = a.div_euclid(b);
                if a.rem_euclid(b) == 0 {
                    Some(q)
                } else {
                    q.checked_add(1)
                }
            }
            BinOp::Mod => (b > 0).then(|| a.rem_euclid(b)),
            BinOp::Shl => {
                if !(0..64).contains(&b) {
                    return None;
                }
                // Shift as multiplication by 2^b so that overflow is detected
                // instead of silently dropping bits.
                i64::try_from(i128::from(a) << b).ok()
            }
            BinOp::Shr => (0..64).contains(&b).then(|| a >> b),
            BinOp::And => Some(a & b),
            BinOp::Min => Some(a.min(b)),
            BinOp::Max => Some(a.max(b)),
        }
    }

    /// True for the operators that cost an integer division on a GPU
    /// (`floordiv`, `ceildiv`, `mod`). Shifts and `&` are not div/mod.
    pub fn is_divmod(self) -> bool {
        matches!(self, BinOp::FloorDiv | BinOp::CeilDiv | BinOp::Mod)
    }

    /// Infix spelling and precedence level (1 = loosest), or `None` for the
    /// function-call operators `min`/`max`.
    pub fn infix(self) -> Option<(&'static str, u8)> {
        Some(match self {
            BinOp::And => ("&", 1),
            BinOp::Shl => ("<<", 2),
            BinOp::Shr => (">>", 2),
            BinOp::Add => ("+", 3),
            BinOp::Sub => ("-", 3),
            BinOp::Mul => ("*", 4),
            BinOp::FloorDiv => ("floordiv", 4),
            BinOp::CeilDiv => ("ceildiv", 4),
            BinOp::Mod => ("mod", 4),
            BinOp::Min | BinOp::Max => return None,
        })
    }

    /// Name of the operator as written in text (`min`/`max` included).
    pub fn name(self) -> &'static str {
        match self {
            BinOp::Min => "min",
            BinOp::Max => "max",
            other => other.infix().map_or("?", |(s, _)| s),
        }
    }
}

/// Checked negation, the semantics of unary minus.
pub fn neg(a: i64) -> Option<i64> {
    a.checked_neg()
}

/// An integer index expression.
///
/// Semantics are those of MLIR affine maps extended with shifts, `&`, `min`
/// and `max`; see [`BinOp`] for each operator. Evaluation is partial: it
/// returns `None` whenever any sub-expression is undefined.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Expr {
    /// An integer literal.
    Const(i64),
    /// A named variable (a map dimension or symbol).
    Var(String),
    /// `-a`
    Neg(Box<Expr>),
    /// `a op b`, for every [`BinOp`]: `+`, `-`, `*`, `floordiv`, `ceildiv`, `mod`, `<<`, `>>`,
    /// `&` are infix, `min(a, b)` and `max(a, b)` calls.
    Bin(BinOp, Box<Expr>, Box<Expr>),
}

/// The name of map dimension `k`, `d{k}` (the convention of every index map in fbc), without the
/// formatting machinery for the common ranks: lowering names dimensions for every operand of
/// every op.
pub fn dim_name(k: usize) -> String {
    const NAMES: [&str; 8] = ["d0", "d1", "d2", "d3", "d4", "d5", "d6", "d7"];
    NAMES.get(k).map_or_else(|| format!("d{k}"), |n| (*n).to_string())
}

impl Expr {
    /// The map dimension `d{k}` ([`dim_name`]).
    pub fn dim(k: usize) -> Expr {
        Expr::Var(dim_name(k))
    }

    /// A variable.
    pub fn var(name: impl Into<String>) -> Expr {
        Expr::Var(name.into())
    }

    /// A literal.
    pub fn constant(c: i64) -> Expr {
        Expr::Const(c)
    }

    /// Builds `a op b`.
    pub fn binary(op: BinOp, a: Expr, b: Expr) -> Expr {
        Expr::Bin(op, Box::new(a), Box::new(b))
    }

    /// Builds `-a`.
    pub fn negate(a: Expr) -> Expr {
        Expr::Neg(Box::new(a))
    }

    /// Splits a binary node into its operator and operands.
    pub fn as_binary(&self) -> Option<(BinOp, &Expr, &Expr)> {
        match self {
            Expr::Bin(op, a, b) => Some((*op, a, b)),
            Expr::Const(_) | Expr::Var(_) | Expr::Neg(_) => None,
        }
    }

    /// Whether every operator of the tree is affine ([`BinOp::is_affine`]).
    pub fn is_affine(&self) -> bool {
        self.non_affine_op().is_none()
    }

    /// An operator of the tree that is not affine, if there is one (what a message about a map
    /// the IR cannot hold names).
    pub fn non_affine_op(&self) -> Option<BinOp> {
        let mut stack = vec![self];
        while let Some(e) = stack.pop() {
            if let Some((op, _, _)) = e.as_binary().filter(|(op, _, _)| !op.is_affine()) {
                return Some(op);
            }
            stack.extend(e.children());
        }
        None
    }

    /// The same function in affine operators only: `a << k` as `a * 2^k`, `a >> k` as
    /// `a floordiv 2^k` and `a & (2^k - 1)` as `a mod 2^k` (for constant `k` in `0..63`; equal
    /// for every integer `a`); `None` when a `min`, a `max` or another shift or mask remains.
    pub fn to_affine(&self) -> Option<Expr> {
        let pow2_of_mask =
            |m: i64| (m >= 0 && (m as u64).wrapping_add(1).is_power_of_two()).then(|| m + 1);
        Some(match self {
            Expr::Const(c) => Expr::Const(*c),
            Expr::Var(v) => Expr::Var(v.clone()),
            Expr::Neg(a) => Expr::negate(a.to_affine()?),
            Expr::Bin(op, a, b) => match (op, &**a, &**b) {
                (BinOp::Shl, a, Expr::Const(k)) if (0..63).contains(k) => {
                    Expr::binary(BinOp::Mul, a.to_affine()?, Expr::Const(1 << k))
                }
                (BinOp::Shr, a, Expr::Const(k)) if (0..63).contains(k) => {
                    Expr::binary(BinOp::FloorDiv, a.to_affine()?, Expr::Const(1 << k))
                }
                (BinOp::And, x, Expr::Const(m)) | (BinOp::And, Expr::Const(m), x) => {
                    Expr::binary(BinOp::Mod, x.to_affine()?, Expr::Const(pow2_of_mask(*m)?))
                }
                (op, a, b) if op.is_affine() => Expr::binary(*op, a.to_affine()?, b.to_affine()?),
                _ => return None,
            },
        })
    }

    /// Direct children, left to right.
    pub fn children(&self) -> impl Iterator<Item = &Expr> {
        let pair: [Option<&Expr>; 2] = match self {
            Expr::Const(_) | Expr::Var(_) => [None, None],
            Expr::Neg(a) => [Some(a), None],
            other => match other.as_binary() {
                Some((_, a, b)) => [Some(a), Some(b)],
                None => [None, None],
            },
        };
        pair.into_iter().flatten()
    }

    /// Evaluates the expression; `env` supplies variable values. Returns
    /// `None` when a variable is unbound or any operation is undefined.
    pub fn eval(&self, env: &dyn Fn(&str) -> Option<i64>) -> Option<i64> {
        match self {
            Expr::Const(c) => Some(*c),
            Expr::Var(v) => env(v),
            Expr::Neg(a) => neg(a.eval(env)?),
            other => {
                let (op, a, b) = other.as_binary()?;
                op.apply(a.eval(env)?, b.eval(env)?)
            }
        }
    }

    /// [`Expr::eval`] with variable values from a map.
    pub fn eval_map(&self, env: &HashMap<String, i64>) -> Option<i64> {
        self.eval(&|name| env.get(name).copied())
    }

    /// The coefficient of variable `v` where the expression is linear: built of constants,
    /// variables, `+`, `-`, negation and products with a constant (`2 * (d0 + 3 * d1)` has
    /// coefficient 6 for `d1`); `None` for any other operator or on overflow.
    pub fn linear_coefficient(&self, v: &str) -> Option<i64> {
        Some(match self {
            Expr::Var(x) => i64::from(x == v),
            Expr::Const(_) => 0,
            Expr::Neg(a) => a.linear_coefficient(v)?.checked_neg()?,
            Expr::Bin(BinOp::Add, a, b) => {
                a.linear_coefficient(v)?.checked_add(b.linear_coefficient(v)?)?
            }
            Expr::Bin(BinOp::Sub, a, b) => {
                a.linear_coefficient(v)?.checked_sub(b.linear_coefficient(v)?)?
            }
            Expr::Bin(BinOp::Mul, a, b) => match (&**a, &**b) {
                (Expr::Const(c), x) | (x, Expr::Const(c)) => {
                    c.checked_mul(x.linear_coefficient(v)?)?
                }
                _ => return None,
            },
            Expr::Bin(..) => return None,
        })
    }

    /// The set of variable names, sorted.
    pub fn vars(&self) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        let mut stack = vec![self];
        while let Some(e) = stack.pop() {
            if let Expr::Var(v) = e {
                out.insert(v.clone());
            }
            stack.extend(e.children());
        }
        out
    }

    /// Replaces every occurrence of `var` with `with`.
    pub fn substitute(&self, var: &str, with: &Expr) -> Expr {
        let mut map = HashMap::new();
        map.insert(var.to_string(), with.clone());
        self.substitute_all(&map)
    }

    /// Replaces variables *simultaneously* (so `{d0 -> d1, d1 -> d0}` swaps
    /// them rather than collapsing both onto one name).
    pub fn substitute_all(&self, map: &HashMap<String, Expr>) -> Expr {
        match self {
            Expr::Const(c) => Expr::Const(*c),
            Expr::Var(v) => map.get(v).cloned().unwrap_or_else(|| Expr::Var(v.clone())),
            Expr::Neg(a) => Expr::negate(a.substitute_all(map)),
            other => match other.as_binary() {
                Some((op, a, b)) => Expr::binary(op, a.substitute_all(map), b.substitute_all(map)),
                None => other.clone(),
            },
        }
    }

    /// Number of `floordiv`, `ceildiv` and `mod` nodes.
    pub fn count_divmod(&self) -> usize {
        self.count_where(|e| e.as_binary().is_some_and(|(op, _, _)| op.is_divmod()))
    }

    /// Number of nodes in the tree.
    pub fn node_count(&self) -> usize {
        self.count_where(|_| true)
    }

    /// Height of the tree (a leaf has depth 1).
    pub fn depth(&self) -> usize {
        let mut max = 0;
        let mut stack = vec![(self, 1usize)];
        while let Some((e, d)) = stack.pop() {
            max = max.max(d);
            stack.extend(e.children().map(|c| (c, d + 1)));
        }
        max
    }

    /// Cost under the crate's GPU cost model (see [`crate::cost`]).
    pub fn cost(&self) -> u64 {
        let mut total = 0u64;
        let mut stack = vec![self];
        while let Some(e) = stack.pop() {
            total = total.saturating_add(cost::expr_node_cost(e));
            stack.extend(e.children());
        }
        total
    }

    fn count_where(&self, pred: impl Fn(&Expr) -> bool) -> usize {
        let mut n = 0;
        let mut stack = vec![self];
        while let Some(e) = stack.pop() {
            n += usize::from(pred(e));
            stack.extend(e.children());
        }
        n
    }

    /// Precedence level used by the printer: 1..=4 binary levels, 5 unary
    /// minus, 6 atoms (literals, variables, `min`/`max` calls).
    fn level(&self) -> u8 {
        match self {
            Expr::Const(_) | Expr::Var(_) | Expr::Bin(BinOp::Min | BinOp::Max, ..) => 6,
            Expr::Neg(_) => 5,
            other => other.as_binary().and_then(|(op, _, _)| op.infix()).map_or(6, |(_, l)| l),
        }
    }
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expr::Const(c) => write!(f, "{c}"),
            Expr::Var(v) => f.write_str(v),
            Expr::Neg(a) => {
                // `-5` re-parses as the literal Const(-5), so a negated
                // literal needs parentheses to stay a Neg node.
                if a.level() < 5 || matches!(**a, Expr::Const(_)) {
                    write!(f, "-({a})")
                } else {
                    write!(f, "-{a}")
                }
            }
            other => {
                let Some((op, a, b)) = other.as_binary() else { return Ok(()) };
                match op.infix() {
                    None => write!(f, "{}({a}, {b})", op.name()),
                    Some((sym, level)) => {
                        // Left-associative grammar: the left operand may sit
                        // at the same level, the right one may not.
                        if a.level() < level {
                            write!(f, "({a})")?;
                        } else {
                            write!(f, "{a}")?;
                        }
                        write!(f, " {sym} ")?;
                        if b.level() <= level {
                            write!(f, "({b})")
                        } else {
                            write!(f, "{b}")
                        }
                    }
                }
            }
        }
    }
}

/// Serialised as its canonical text form.
impl serde::Serialize for Expr {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

macro_rules! impl_op {
    ($trait:ident, $method:ident, $op:expr) => {
        impl std::ops::$trait for Expr {
            type Output = Expr;
            fn $method(self, rhs: Expr) -> Expr {
                Expr::binary($op, self, rhs)
            }
        }
    };
}
impl_op!(Add, add, BinOp::Add);
impl_op!(Sub, sub, BinOp::Sub);
impl_op!(Mul, mul, BinOp::Mul);
impl_op!(BitAnd, bitand, BinOp::And);

impl std::ops::Neg for Expr {
    type Output = Expr;
    fn neg(self) -> Expr {
        Expr::negate(self)
    }
}

impl From<i64> for Expr {
    fn from(c: i64) -> Expr {
        Expr::Const(c)
    }
}

impl From<&str> for Expr {
    fn from(v: &str) -> Expr {
        Expr::Var(v.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floor_semantics_follow_mlir() {
        assert_eq!(BinOp::FloorDiv.apply(-7, 2), Some(-4));
        assert_eq!(BinOp::Mod.apply(-7, 2), Some(1));
        assert_eq!(BinOp::CeilDiv.apply(-7, 2), Some(-3));
        assert_eq!(BinOp::CeilDiv.apply(7, 2), Some(4));
        assert_eq!(BinOp::FloorDiv.apply(7, 0), None);
        assert_eq!(BinOp::Mod.apply(7, -2), None);
        assert_eq!(BinOp::CeilDiv.apply(i64::MAX, 2), Some(i64::MAX / 2 + 1));
        assert_eq!(BinOp::FloorDiv.apply(i64::MIN, 1), Some(i64::MIN));
    }

    #[test]
    fn shifts_are_checked() {
        assert_eq!(BinOp::Shl.apply(3, 4), Some(48));
        assert_eq!(BinOp::Shl.apply(-3, 4), Some(-48));
        assert_eq!(BinOp::Shl.apply(1, 63), None);
        assert_eq!(BinOp::Shl.apply(-1, 63), Some(i64::MIN));
        assert_eq!(BinOp::Shl.apply(1, 64), None);
        assert_eq!(BinOp::Shl.apply(1, -1), None);
        assert_eq!(BinOp::Shr.apply(-7, 1), Some(-4));
        assert_eq!(BinOp::Shr.apply(-7, 64), None);
        assert_eq!(BinOp::And.apply(-1, 63), Some(63));
    }

    #[test]
    fn overflow_is_undefined() {
        assert_eq!(BinOp::Add.apply(i64::MAX, 1), None);
        assert_eq!(BinOp::Mul.apply(i64::MIN, -1), None);
        assert_eq!(neg(i64::MIN), None);
    }

    #[test]
    fn helpers_count_and_substitute() {
        let e = (Expr::var("d0") * 4.into()) + Expr::binary(BinOp::Mod, "d1".into(), 64.into());
        assert_eq!(e.count_divmod(), 1);
        assert_eq!(e.node_count(), 7);
        assert_eq!(e.depth(), 3);
        let swapped = e.substitute_all(&HashMap::from([
            ("d0".to_string(), Expr::var("d1")),
            ("d1".to_string(), Expr::var("d0")),
        ]));
        assert_eq!(swapped.to_string(), "d1 * 4 + d0 mod 64");
        assert_eq!(e.vars().into_iter().collect::<Vec<_>>(), ["d0", "d1"]);
    }

    #[test]
    fn display_minimal_parens() {
        let a = Expr::var("a");
        let b = Expr::var("b");
        let c = Expr::var("c");
        assert_eq!((a.clone() - (b.clone() - c.clone())).to_string(), "a - (b - c)");
        assert_eq!(((a.clone() - b.clone()) - c.clone()).to_string(), "a - b - c");
        assert_eq!(((a.clone() + b.clone()) * c.clone()).to_string(), "(a + b) * c");
        assert_eq!((-Expr::Const(5)).to_string(), "-(5)");
        assert_eq!(Expr::Const(-5).to_string(), "-5");
        assert_eq!((-(a.clone() + b)).to_string(), "-(a + b)");
        assert_eq!((-(-a)).to_string(), "--a");
    }

    #[test]
    fn shifts_and_masks_come_back_as_pow2_div_mod() {
        let e = Expr::parse("(d0 >> 6) + (d1 & 63) + (d2 << 2)").unwrap();
        let a = e.to_affine().unwrap();
        assert_eq!(a.to_string(), "d0 floordiv 64 + d1 mod 64 + d2 * 4");
        assert!(a.is_affine() && !e.is_affine());
        assert!(Expr::parse("d0 & 5").unwrap().to_affine().is_none());
        assert!(Expr::parse("min(d0, 3)").unwrap().to_affine().is_none());
        for (x, y, z) in [(0, 0, 0), (-65, 64, -3), (1000, 127, 9)] {
            let env = |n: &str| match n {
                "d0" => Some(x),
                "d1" => Some(y),
                "d2" => Some(z),
                _ => None,
            };
            assert_eq!(a.eval(&env), e.eval(&env));
        }
    }
}

//! Integer index expressions and maps, and their simplification with egg e-graphs.
//!
//! The core — [`Expr`], [`IndexMap`], [`Interval`], [`Ranges`], parsing, evaluation, printing and
//! [`check_refines`] — has no dependency: it is the one index-map type of fbc, which the IR's
//! attributes hold and every back end reads. The simplifier (the egg language, the rules and the
//! extraction, behind the default `simplify` feature) is what the passes and `fbc
//! simplify-index` add on top; crates below the passes depend on the core alone
//! (`default-features = false`).
//!
//! `fbc-index` implements the index-transformation elimination step of
//! FBLayout (Sec. 4.3.2): tile index maps of stacked layout transformations
//! are composed ([`IndexMap::compose`]) and the composed map is then
//! simplified and strength-reduced so that the expensive `floordiv`/`mod`
//! operations disappear (e.g. `i mod Ca mod Cb => i mod Cb` when `Cb | Ca`,
//! then `i & (Cb - 1)` for powers of two).
//!
//! # Language
//!
//! [`Expr`] is a plain tree: literals, variables, `+ - *`, `floordiv`,
//! `ceildiv`, `mod`, `<< >> &`, unary `-`, `min(a, b)`, `max(a, b)`. Text
//! syntax is MLIR affine (`d0 floordiv 4 + d1 mod 64`), precedence from
//! loosest: `&`; `<< >>`; `+ -`; `* floordiv ceildiv mod`; unary `-`; all
//! left-associative. [`Expr::parse`] never panics: it reports byte-located
//! [`ParseError`]s, including for literals outside `i64`, nesting beyond
//! [`MAX_NESTING`] and trees deeper than [`MAX_DEPTH`]. `Display` prints
//! canonical text with minimal parentheses that re-parses to the same tree.
//!
//! # Semantics
//!
//! 64-bit integers, evaluation is *partial* ([`Expr::eval`] returns `None`):
//! * `floordiv`/`ceildiv`/`mod` need a positive divisor (MLIR affine); `mod`
//!   is floor modulo, in `[0, divisor)`;
//! * `a << b = a * 2^b` and `a >> b = a floordiv 2^b` (arithmetic) need
//!   `0 <= b < 64`; `&` is bitwise on two's complement;
//! * any overflow is undefined (checked arithmetic, nothing wraps).
//!
//! A simplification is correct if, for every assignment of the variables
//! inside the user's [`Ranges`] where the input is defined, the output is
//! defined and has the same value.
//!
//! # Simplifier
//!
//! [`simplify`] builds an e-graph over an egg language mirroring `Expr`,
//! with an analysis tracking per e-class a constant (constant folding), a
//! sound value interval (from the ranges, through every operator) and a known
//! divisor (`x*64` is a multiple of 64, sums take the gcd). Rewrite rules are
//! grouped by topic under `rules/`, each module stating its policy
//! ([`rule_names`] lists them all):
//!
//! | group       | examples                                                                 | side conditions |
//! |-------------|--------------------------------------------------------------------------|-----------------|
//! | identities  | `x + 0`, `x * 1`, `x * 0`, `x floordiv 1`, `x mod 1`, `0 floordiv c`, `(a*b) mod b` | none, or `c` divides the divisor of `x` |
//! | algebra     | `+ * &` commutativity, `(a + c1) + c2`, `(a + b) * c`, `a - c`             | constants only, or addends sharing a variable; no overflow of new intermediates |
//! | bounds      | `x floordiv c => k`, `x mod c => x - k*c`, `min`/`max`, `x & (2^k-1) => x` | interval within one period of `c` |
//! | residue     | `(a*c + b) floordiv c => a + b floordiv c`, `(a*c + b) mod c => b mod c`, `(x*a) floordiv b`, small addends | divisibility analysis, intervals |
//! | nesting     | `(x floordiv a) floordiv b`, `(x mod a) mod b => x mod b`, `(x mod a) floordiv b`, `ceildiv` lowering | `b` divides `a`, `a*b` fits, `x + c - 1` fits |
//! | recombine   | `(x floordiv c)*c + x mod c => x`, `((x floordiv c) mod m)*c + x mod c => x mod (c*m)` | exact identities |
//! | strength    | `x floordiv 2^k => x >> k`, `x mod 2^k => x & (2^k-1)`, `x * 2^k => x << k` | `x >= 0` (interval) |
//!
//! Rules are sound, overflow corner cases included, and each has a soundness
//! test that evaluates every rewrite it makes exhaustively on small domains
//! (sampling when a variable is unbounded), with constants chosen to both
//! meet and violate its side condition.
//!
//! # Cost model
//!
//! `floordiv`/`ceildiv`/`mod` cost 40 (no integer divider on mobile GPUs:
//! a division is a multi-instruction reciprocal sequence), `*` costs 4,
//! `+ - << >> & neg min max` cost 1, leaves 0; see [`cost`]. Extraction is
//! deterministic: ties break on fewer variable references, then fewer nodes,
//! then egg's (deterministic) node order.
//!
//! # Limits
//!
//! [`Limits`] bounds the e-graph (default 10 000 nodes, 30 iterations,
//! 200 ms). Hitting a limit is not an error: the best expression found so far
//! is returned, and the output never costs more than the input (otherwise the
//! input is returned). A final evaluation check ([`check_refines`]) rejects
//! any candidate that disagrees with the input on sampled points.
//!
//! ```
//! use fbc_index::{simplify, Expr, Limits, Ranges};
//! let ranges = Ranges::from_specs(["d1=0:2048"]).unwrap();
//! let e = Expr::parse("d1 mod 2048 mod 64").unwrap();
//! let s = simplify(&e, &ranges, &Limits::default());
//! assert_eq!(s.output.to_string(), "d1 & 63");
//! assert_eq!((s.divmod_before, s.divmod_after), (2, 0));
//! ```

#[cfg(feature = "simplify")]
mod analysis;
pub mod cost;
mod expr;
mod interval;
#[cfg(feature = "simplify")]
mod lang;
mod map;
mod parse;
#[cfg(feature = "simplify")]
mod presimplify;
mod ranges;
#[cfg(feature = "simplify")]
mod rules;
#[cfg(feature = "simplify")]
mod simplify;
mod verify;

pub use expr::{dim_name, neg, BinOp, Expr};
pub use interval::Interval;
pub use map::{IndexMap, MapError};
pub use parse::{ParseError, MAX_DEPTH, MAX_NESTING};
#[cfg(feature = "simplify")]
pub use presimplify::presimplify;
pub use ranges::{RangeError, Ranges};
#[cfg(feature = "simplify")]
pub use rules::rule_names;
#[cfg(feature = "simplify")]
pub use simplify::{simplify, simplify_map, Limits, MapSimplified, Outcome, RunReport, Simplified};
pub use verify::{check_refines, Counterexample};

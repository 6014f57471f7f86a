//! Multi-result index maps in MLIR affine-map syntax, with composition.
//!
//! `(d0, d1)[s0] -> (d0 floordiv 4, d1 mod 64 + s0)` maps dimension values
//! (and symbol values) to result values. FBLayout composes the tile index
//! maps of stacked layout transformations (`f3 ∘ f2 ∘ f1`) and then
//! strength-reduces the composed map; [`IndexMap::compose`] is that
//! composition.
//!
//! Invariants kept by every constructor (`new`, `parse`, `compose`):
//! * dimension and symbol names are valid identifiers and pairwise distinct;
//! * every result mentions only declared dimensions and symbols;
//! * every result is at most [`MAX_DEPTH`] deep.

use std::collections::{BTreeSet, HashMap};
use std::fmt;

use crate::expr::Expr;
use crate::parse::{ParseError, Parser, Tok, MAX_DEPTH};

/// Errors building or composing index maps.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MapError {
    /// Malformed text.
    #[error(transparent)]
    Parse(#[from] ParseError),
    /// A name is declared twice.
    #[error("`{0}` is declared more than once")]
    DuplicateName(String),
    /// A result uses an undeclared name.
    #[error("result {result} uses undeclared name `{name}`")]
    UnknownName {
        /// Index of the result expression.
        result: usize,
        /// The undeclared name.
        name: String,
    },
    /// `outer ∘ inner` needs as many inner results as outer dimensions.
    #[error(
        "cannot compose: outer map has {outer_dims} dims but inner map has {inner_results} results"
    )]
    Arity {
        /// Number of dimensions of the outer map.
        outer_dims: usize,
        /// Number of results of the inner map.
        inner_results: usize,
    },
    /// A symbol of the outer map has the name of a dimension of the inner map.
    #[error("cannot compose: outer symbol `{0}` clashes with an inner dimension")]
    NameClash(String),
    /// The composed expression would be deeper than `MAX_DEPTH`.
    #[error("composed result {0} is deeper than {MAX_DEPTH} levels")]
    TooDeep(usize),
}

/// An index map `(dims)[symbols] -> (results)`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IndexMap {
    /// Dimension names, in order.
    pub dims: Vec<String>,
    /// Symbol names, in order.
    pub symbols: Vec<String>,
    /// One expression per result.
    pub results: Vec<Expr>,
}

fn is_ident(s: &str) -> bool {
    Expr::parse(s).is_ok_and(|e| e == Expr::Var(s.to_string()))
}

impl IndexMap {
    /// Builds and validates a map.
    pub fn new(
        dims: Vec<String>,
        symbols: Vec<String>,
        results: Vec<Expr>,
    ) -> Result<IndexMap, MapError> {
        let mut declared = BTreeSet::new();
        for name in dims.iter().chain(&symbols) {
            if !is_ident(name) {
                return Err(
                    ParseError::new(0, format!("`{name}` is not a valid identifier")).into()
                );
            }
            if !declared.insert(name.as_str()) {
                return Err(MapError::DuplicateName(name.clone()));
            }
        }
        for (i, r) in results.iter().enumerate() {
            if r.depth() > MAX_DEPTH {
                return Err(MapError::TooDeep(i));
            }
            if let Some(name) = r.vars().into_iter().find(|v| !declared.contains(v.as_str())) {
                return Err(MapError::UnknownName { result: i, name });
            }
        }
        Ok(IndexMap { dims, symbols, results })
    }

    /// The dimension names, then the symbol names: the variables a result may read, in the
    /// order [`IndexMap::eval`] takes their values.
    pub fn vars(&self) -> Vec<String> {
        self.dims.iter().chain(&self.symbols).cloned().collect()
    }

    /// Whether every result is affine ([`Expr::is_affine`]): what the IR's maps must be.
    pub fn is_affine(&self) -> bool {
        self.results.iter().all(Expr::is_affine)
    }

    /// The map with every result in affine operators ([`Expr::to_affine`]); `None` when one
    /// cannot be written so.
    pub fn to_affine(&self) -> Option<IndexMap> {
        Some(IndexMap {
            dims: self.dims.clone(),
            symbols: self.symbols.clone(),
            results: self.results.iter().map(Expr::to_affine).collect::<Option<_>>()?,
        })
    }

    /// Parses `(d0, d1)[s0] -> (e0, e1)`; the `[...]` part is optional.
    /// All problems, including undeclared or duplicate names, are reported
    /// as a [`ParseError`] with a byte offset.
    pub fn parse(src: &str) -> Result<IndexMap, ParseError> {
        let mut p = Parser::new(src)?;
        let mut declared = BTreeSet::new();
        let mut ident_list = |p: &mut Parser, close: Tok, what: &str| {
            let mut out = Vec::new();
            if p.peek().tok != close {
                loop {
                    let (name, at) = p.ident()?;
                    if !declared.insert(name.clone()) {
                        return Err(ParseError::new(at, format!("`{name}` is declared twice")));
                    }
                    out.push(name);
                    if p.peek().tok != Tok::Comma {
                        break;
                    }
                    p.bump();
                }
            }
            p.expect(&close, what)?;
            Ok(out)
        };
        p.expect(&Tok::LParen, "`(` starting the dimension list")?;
        let dims = ident_list(&mut p, Tok::RParen, "`,` or `)`")?;
        let symbols = if p.peek().tok == Tok::LBracket {
            p.bump();
            ident_list(&mut p, Tok::RBracket, "`,` or `]`")?
        } else {
            Vec::new()
        };
        p.expect(&Tok::Arrow, "`->`")?;
        p.expect(&Tok::LParen, "`(` starting the result list")?;
        let mut results = Vec::new();
        if p.peek().tok != Tok::RParen {
            loop {
                let at = p.peek().offset;
                let e = p.expr()?;
                if let Some(v) = e.vars().into_iter().find(|v| !declared.contains(v)) {
                    return Err(ParseError::new(at, format!("undeclared name `{v}`")));
                }
                results.push(e);
                if p.peek().tok != Tok::Comma {
                    break;
                }
                p.bump();
            }
        }
        p.expect(&Tok::RParen, "`,` or `)`")?;
        p.expect_eof()?;
        Ok(IndexMap { dims, symbols, results })
    }

    /// `self ∘ inner`: feeds `inner`'s results into `self`'s dimensions.
    ///
    /// The composed map has `inner`'s dimensions, `inner`'s symbols followed
    /// by `self`'s symbols not already present (equal names denote the same
    /// symbol), and `self`'s results with each dimension replaced
    /// simultaneously by the corresponding `inner` result.
    pub fn compose(&self, inner: &IndexMap) -> Result<IndexMap, MapError> {
        if self.dims.len() != inner.results.len() {
            return Err(MapError::Arity {
                outer_dims: self.dims.len(),
                inner_results: inner.results.len(),
            });
        }
        if let Some(s) = self.symbols.iter().find(|s| inner.dims.contains(s)) {
            return Err(MapError::NameClash(s.clone()));
        }
        let subst: HashMap<String, Expr> =
            self.dims.iter().cloned().zip(inner.results.iter().cloned()).collect();
        let mut results = Vec::with_capacity(self.results.len());
        for (i, r) in self.results.iter().enumerate() {
            // Substitution recurses only over `r` (depth <= MAX_DEPTH); the
            // composed tree can be up to twice as deep, so check it.
            let composed = r.substitute_all(&subst);
            if composed.depth() > MAX_DEPTH {
                return Err(MapError::TooDeep(i));
            }
            results.push(composed);
        }
        let mut symbols = inner.symbols.clone();
        for s in &self.symbols {
            if !symbols.contains(s) {
                symbols.push(s.clone());
            }
        }
        Ok(IndexMap { dims: inner.dims.clone(), symbols, results })
    }

    /// Evaluates the map; `values` holds the dimension values followed by
    /// the symbol values. `None` on a length mismatch or if any result is
    /// undefined.
    pub fn eval(&self, values: &[i64]) -> Option<Vec<i64>> {
        if values.len() != self.dims.len() + self.symbols.len() {
            return None;
        }
        let env = |name: &str| {
            self.dims.iter().chain(&self.symbols).position(|n| n == name).map(|i| values[i])
        };
        self.results.iter().map(|r| r.eval(&env)).collect()
    }

    /// Total number of `floordiv`/`ceildiv`/`mod` nodes in the results.
    pub fn count_divmod(&self) -> usize {
        self.results.iter().map(Expr::count_divmod).sum()
    }
}

impl fmt::Display for IndexMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "({})", self.dims.join(", "))?;
        if !self.symbols.is_empty() {
            write!(f, "[{}]", self.symbols.join(", "))?;
        }
        f.write_str(" -> (")?;
        for (i, r) in self.results.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{r}")?;
        }
        f.write_str(")")
    }
}

/// Serialised as its text form.
impl serde::Serialize for IndexMap {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl std::str::FromStr for IndexMap {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        IndexMap::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_display_round_trip() {
        let src = "(d0, d1)[s0] -> (d0 floordiv 4, d1 mod 64 + s0)";
        let m = IndexMap::parse(src).expect("parses");
        assert_eq!(m.to_string(), src);
        assert_eq!(IndexMap::parse(&m.to_string()), Ok(m.clone()));
        assert_eq!(m.eval(&[9, 130, 1]), Some(vec![2, 3]));
        assert_eq!(m.eval(&[9, 130]), None);
        assert_eq!(IndexMap::parse("() -> ()").expect("parses").results.len(), 0);
    }

    #[test]
    fn parse_errors_are_located() {
        assert_eq!(IndexMap::parse("(d0) -> (d1)").unwrap_err().offset, 9);
        assert_eq!(IndexMap::parse("(d0, d0) -> (d0)").unwrap_err().offset, 5);
        assert!(IndexMap::parse("(d0 -> (d0)").is_err());
        assert!(IndexMap::parse("(d0) -> (d0").is_err());
        assert!(IndexMap::parse("(d0) (d0)").is_err());
        assert!(IndexMap::parse("(d0) -> (d0) x").is_err());
    }

    #[test]
    fn compose_substitutes_simultaneously() {
        let swap = IndexMap::parse("(d0, d1) -> (d1, d0)").expect("parses");
        let f = IndexMap::parse("(d0, d1) -> (d0 * 10 + d1)").expect("parses");
        let g = f.compose(&swap).expect("composes");
        assert_eq!(g.to_string(), "(d0, d1) -> (d1 * 10 + d0)");
        assert_eq!(g.eval(&[1, 2]), Some(vec![21]));
        let bad = f.compose(&f);
        assert_eq!(bad, Err(MapError::Arity { outer_dims: 2, inner_results: 1 }));
        let sym = IndexMap::parse("(d0)[d1] -> (d0 + d1)").expect("parses");
        let sum = IndexMap::parse("(d0, d1) -> (d0 + d1)").expect("parses");
        assert_eq!(sym.compose(&sum), Err(MapError::NameClash("d1".into())));
        let with_sym = IndexMap::parse("(d0)[s0] -> (d0 * s0)").expect("parses");
        let h = with_sym.compose(&IndexMap::parse("(a)[s0, s1] -> (a + s1)").expect("parses"));
        assert_eq!(h.expect("composes").to_string(), "(a)[s0, s1] -> ((a + s1) * s0)");
    }

    #[test]
    fn new_validates() {
        let e = Expr::var("x");
        assert!(IndexMap::new(vec!["x".into()], vec![], vec![e.clone()]).is_ok());
        assert!(matches!(
            IndexMap::new(vec!["y".into()], vec![], vec![e.clone()]),
            Err(MapError::UnknownName { .. })
        ));
        assert!(matches!(
            IndexMap::new(vec!["x".into(), "x".into()], vec![], vec![e]),
            Err(MapError::DuplicateName(_))
        ));
        assert!(IndexMap::new(vec!["mod".into()], vec![], vec![]).is_err());
    }
}

//! `fbc simplify-index EXPR [--range VAR=LO:HI]... [--json]`: one index expression through the
//! e-graph simplifier (`fbc_index::simplify`), printed or as JSON.

use crate::cli::SimplifyArgs;
use crate::Failure;

pub(crate) fn run(a: &SimplifyArgs) -> Result<(), Failure> {
    use fbc_grammar::{Diagnostic, SourceFile, Span};
    let expr = fbc_index::Expr::parse(&a.expr).map_err(|e| {
        let file = SourceFile::new("<expr>", a.expr.clone());
        let d = Diagnostic::error(e.message).at(Span::new(e.offset, e.offset + 1));
        Failure::input(&file, &[d])
    })?;
    let ranges = fbc_index::Ranges::from_specs(&a.ranges).map_err(|e| {
        Failure::Usage(format!("--range `{}`: {} (at byte {})", e.spec, e.message, e.offset))
    })?;
    let s = fbc_index::simplify(&expr, &ranges, &fbc_index::Limits::default());
    let text = if a.json {
        let mut j = serde_json::to_string(&s).map_err(|e| Failure::Usage(e.to_string()))?;
        j.push('\n');
        j
    } else {
        format!("{}\n", s.output)
    };
    crate::output::write_text(None, &text)
}

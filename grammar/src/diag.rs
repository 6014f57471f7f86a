//! Diagnostics as values, and their rustc-style rendering.
//!
//! Every stage of fbc (parser, IR builder, verifier, passes, driver) reports problems as
//! [`Diagnostic`]s and collects all of them rather than stopping at the first. Rendering is done in
//! one place, [`render`], so that every message has the same shape:
//!
//! ```text
//! model.fbir:4:27: error: expected 5, found 6
//!   |
//! 4 |     %1 = tensor.add %a, %b : (tensor<5xf32>, tensor<6xf32>) -> tensor<5xf32>
//!   |                         ^^ operand 1 of tensor.add
//!   = note: ...
//! ```
//!
//! The first line is exactly `FILE:LINE:COL: severity: message`, so editors and `grep` find it.
//! Columns count characters (not bytes), starting at 1. Spans never panic the renderer: an out of
//! range or non-boundary span is clamped to the file.

use std::fmt::{self, Write as _};

/// A byte range `[start, end)` in one source file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Span {
    pub start: u32,
    pub end: u32,
}

impl Span {
    pub fn new(start: usize, end: usize) -> Span {
        Span {
            start: u32::try_from(start).unwrap_or(u32::MAX),
            end: u32::try_from(end).unwrap_or(u32::MAX),
        }
    }

    /// The smallest span covering both.
    pub fn to(self, other: Span) -> Span {
        Span { start: self.start.min(other.start), end: self.end.max(other.end) }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    Note,
    Warning,
    Error,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Note => "note",
            Severity::Warning => "warning",
            Severity::Error => "error",
        })
    }
}

/// A message about a place in the source (or about no place, for whole-file problems).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub severity: Severity,
    pub message: String,
    /// Where the message points; `None` for problems that have no place in the text.
    pub span: Option<Span>,
    /// Text printed under the caret of the primary span.
    pub label: Option<String>,
    /// Further places, each with its own text (`defined here`, ...).
    pub secondary: Vec<(Span, String)>,
    /// `= note: ...` lines.
    pub notes: Vec<String>,
}

impl Diagnostic {
    pub fn error(message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            severity: Severity::Error,
            message: message.into(),
            span: None,
            label: None,
            secondary: Vec::new(),
            notes: Vec::new(),
        }
    }

    pub fn warning(message: impl Into<String>) -> Diagnostic {
        Diagnostic { severity: Severity::Warning, ..Diagnostic::error(message) }
    }

    pub fn at(mut self, span: Span) -> Diagnostic {
        self.span = Some(span);
        self
    }

    pub fn with_label(mut self, label: impl Into<String>) -> Diagnostic {
        self.label = Some(label.into());
        self
    }

    pub fn with_secondary(mut self, span: Span, label: impl Into<String>) -> Diagnostic {
        self.secondary.push((span, label.into()));
        self
    }

    pub fn with_note(mut self, note: impl Into<String>) -> Diagnostic {
        self.notes.push(note.into());
        self
    }

    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

/// A named source text, with a line index for turning byte offsets into line and column.
#[derive(Debug, Clone)]
pub struct SourceFile {
    pub name: String,
    pub text: String,
    line_starts: Vec<usize>,
}

impl SourceFile {
    pub fn new(name: impl Into<String>, text: impl Into<String>) -> SourceFile {
        let text = text.into();
        let mut line_starts = vec![0];
        line_starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        SourceFile { name: name.into(), text, line_starts }
    }

    fn clamp(&self, offset: u32) -> usize {
        let mut o = (offset as usize).min(self.text.len());
        while !self.text.is_char_boundary(o) {
            o -= 1;
        }
        o
    }

    /// 1-based line and character column of a byte offset.
    pub fn line_col(&self, offset: u32) -> (usize, usize) {
        let o = self.clamp(offset);
        let line = self.line_starts.partition_point(|&s| s <= o) - 1;
        let col = self.text[self.line_starts[line]..o].chars().count() + 1;
        (line + 1, col)
    }

    /// The text of a 1-based line, without its line ending.
    pub fn line_text(&self, line: usize) -> &str {
        let start = self.line_starts[line - 1];
        let end = self.line_starts.get(line).copied().unwrap_or(self.text.len());
        self.text[start..end].trim_end_matches(['\n', '\r'])
    }
}

/// The longest source line shown in a snippet; longer lines are cut around the caret.
const MAX_SNIPPET_CHARS: usize = 160;

/// Renders one diagnostic in fbc's rustc-like format.
pub fn render(file: &SourceFile, d: &Diagnostic) -> String {
    let mut out = String::new();
    match d.span {
        Some(span) => {
            let (line, col) = file.line_col(span.start);
            let _ = writeln!(out, "{}:{}:{}: {}: {}", file.name, line, col, d.severity, d.message);
            snippet(&mut out, file, span, d.label.as_deref());
        }
        None => {
            let _ = writeln!(out, "{}: {}: {}", file.name, d.severity, d.message);
        }
    }
    for (span, label) in &d.secondary {
        let (line, col) = file.line_col(span.start);
        let _ = writeln!(out, "{}:{}:{}: note: {}", file.name, line, col, label);
        snippet(&mut out, file, *span, None);
    }
    for note in &d.notes {
        let _ = writeln!(out, "  = note: {note}");
    }
    out
}

/// Renders all diagnostics, errors and warnings in the order given.
pub fn render_all(file: &SourceFile, diags: &[Diagnostic]) -> String {
    diags.iter().map(|d| render(file, d)).collect()
}

fn snippet(out: &mut String, file: &SourceFile, span: Span, label: Option<&str>) {
    let (line, col) = file.line_col(span.start);
    let (end_line, end_col) = file.line_col(span.end.max(span.start));
    let text = file.line_text(line);
    let chars: Vec<char> = text.chars().collect();
    // Carets cover the span on its first line, at least one character.
    let width = if end_line == line {
        end_col.saturating_sub(col).max(1)
    } else {
        chars.len().saturating_sub(col - 1).max(1)
    };
    // Cut very long lines (minified or generated input) to a window around the caret.
    let (shown, caret_col, width) = if chars.len() > MAX_SNIPPET_CHARS {
        let start = (col - 1).saturating_sub(MAX_SNIPPET_CHARS / 2);
        let end = (start + MAX_SNIPPET_CHARS).min(chars.len());
        let s: String = chars[start..end].iter().collect();
        (format!("...{s}..."), col - start + 3, width.min(MAX_SNIPPET_CHARS / 2))
    } else {
        (text.to_string(), col, width)
    };
    let shown: String =
        shown.chars().map(|c| if c.is_control() && c != '\t' { '\u{FFFD}' } else { c }).collect();
    let gutter = line.to_string().len();
    let pad = " ".repeat(gutter);
    let _ = writeln!(out, "{pad} |");
    let _ = writeln!(out, "{line} | {shown}");
    let lead: String =
        shown.chars().take(caret_col - 1).map(|c| if c == '\t' { '\t' } else { ' ' }).collect();
    let _ = write!(out, "{pad} | {lead}{}", "^".repeat(width));
    match label {
        Some(l) => {
            let _ = writeln!(out, " {l}");
        }
        None => out.push('\n'),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_line_is_file_line_col() {
        let f = SourceFile::new("m.fbir", "a\n  bad here\n");
        let d = Diagnostic::error("oops").at(Span::new(4, 7)).with_label("this").with_note("n");
        assert_eq!(
            render(&f, &d),
            "m.fbir:2:3: error: oops\n  |\n2 |   bad here\n  |   ^^^ this\n  = note: n\n"
        );
    }

    #[test]
    fn out_of_range_and_mid_char_spans_do_not_panic() {
        let f = SourceFile::new("m.fbir", "é\u{0}x");
        let d = Diagnostic::error("x").at(Span::new(1, 100));
        let r = render(&f, &d);
        assert!(r.starts_with("m.fbir:1:1: error: x\n"), "{r}");
        let d = Diagnostic::error("y").at(Span::new(1000, 2000));
        assert!(render(&f, &d).starts_with("m.fbir:1:4: error: y"));
    }

    #[test]
    fn long_lines_are_windowed() {
        let text = "x".repeat(10_000);
        let f = SourceFile::new("m.fbir", text);
        let r = render(&f, &Diagnostic::error("z").at(Span::new(5000, 5001)));
        assert!(r.lines().all(|l| l.len() < 200), "{r}");
        assert!(r.starts_with("m.fbir:1:5001: error: z"));
    }
}

//! The JSON requests and answers of the plugin protocol, and the side tables that carry what
//! the IR text does not: source spans.
//!
//! A module crosses the boundary as its canonical text (which parses back to the same module)
//! plus a [`SpanTable`]: the span of every function and op in print order, so that the module on
//! the other side points into the user's source file exactly as the original did, and a
//! diagnostic from a plugin pass, or from a pass after it, is reported at the right line.

use std::collections::BTreeMap;

use fbc_grammar::{Diagnostic, Severity, Span};
use fbc_ir::module::OpSpans;
use fbc_ir::pass::{OptionKind, OptionSpec, OptionValue, PassOptions};
use fbc_ir::Module;
use serde::{Deserialize, Serialize};

/// What the host asks.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "request", rename_all = "kebab-case")]
pub enum Request {
    /// The plugin's passes and extension-point pipelines.
    Describe,
    /// Whether the pass accepts these option values (at pipeline creation, before any pass runs).
    Check { pass: String, options: Vec<(String, Value)> },
    /// Runs the pass over a module.
    Run {
        pass: String,
        options: Vec<(String, Value)>,
        target: Box<fbc_target::HardwareProfile>,
        /// The user's source file, which the spans point into (empty when there is none).
        source_name: String,
        source_text: String,
        module: String,
        spans: SpanTable,
    },
}

/// What the plugin answers.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "answer", rename_all = "kebab-case")]
pub enum Answer {
    Described {
        passes: Vec<PassDesc>,
        extensions: Vec<(String, String)>,
    },
    Accepted,
    Refused {
        message: String,
    },
    Ran {
        module: String,
        spans: SpanTable,
        counters: Vec<(String, String, i64)>,
        records: BTreeMap<String, serde_json::Value>,
    },
    Failed {
        diagnostics: Vec<Diag>,
    },
    Panicked {
        message: String,
        location: Option<String>,
    },
    /// A request the plugin could not read, or a module it could not parse: a bug on one side.
    Error {
        message: String,
    },
}

/// One registered pass.
#[derive(Debug, Serialize, Deserialize)]
pub struct PassDesc {
    pub name: String,
    pub summary: String,
    pub options: Vec<OptionDesc>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct OptionDesc {
    pub name: String,
    pub kind: String,
    pub default: Option<String>,
    pub help: String,
}

impl OptionDesc {
    pub fn of(spec: &OptionSpec) -> OptionDesc {
        OptionDesc {
            name: spec.name.clone(),
            kind: spec.kind.to_string(),
            default: spec.default.clone(),
            help: spec.help.clone(),
        }
    }

    pub fn spec(&self) -> Option<OptionSpec> {
        let kind = match self.kind.as_str() {
            "bool" => OptionKind::Bool,
            "int" => OptionKind::Int,
            "float" => OptionKind::Float,
            "string" => OptionKind::Str,
            "list" => OptionKind::List,
            _ => return None,
        };
        Some(OptionSpec::new(&self.name, kind, self.default.as_deref(), &self.help))
    }
}

/// An option value.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Value {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    List(Vec<String>),
}

pub fn options_to_wire(options: &PassOptions) -> Vec<(String, Value)> {
    options
        .iter()
        .map(|(k, v)| {
            let v = match v {
                OptionValue::Bool(b) => Value::Bool(*b),
                OptionValue::Int(i) => Value::Int(*i),
                OptionValue::Float(x) => Value::Float(*x),
                OptionValue::Str(s) => Value::Str(s.clone()),
                OptionValue::List(l) => Value::List(l.clone()),
            };
            (k.to_string(), v)
        })
        .collect()
}

pub fn options_from_wire(options: &[(String, Value)]) -> PassOptions {
    PassOptions::from_values(options.iter().map(|(k, v)| {
        let v = match v {
            Value::Bool(b) => OptionValue::Bool(*b),
            Value::Int(i) => OptionValue::Int(*i),
            Value::Float(x) => OptionValue::Float(*x),
            Value::Str(s) => OptionValue::Str(s.clone()),
            Value::List(l) => OptionValue::List(l.clone()),
        };
        (k.clone(), v)
    }))
}

/// `[start, end)` in the user's source.
type WireSpan = (u32, u32);

fn to_wire(s: Span) -> WireSpan {
    (s.start, s.end)
}

fn from_wire(s: WireSpan) -> Span {
    Span { start: s.0, end: s.1 }
}

/// A diagnostic.
#[derive(Debug, Serialize, Deserialize)]
pub struct Diag {
    pub severity: String,
    pub message: String,
    pub span: Option<WireSpan>,
    pub label: Option<String>,
    pub secondary: Vec<(WireSpan, String)>,
    pub notes: Vec<String>,
}

impl Diag {
    pub fn of(d: &Diagnostic) -> Diag {
        Diag {
            severity: d.severity.to_string(),
            message: d.message.clone(),
            span: d.span.map(to_wire),
            label: d.label.clone(),
            secondary: d.secondary.iter().map(|(s, l)| (to_wire(*s), l.clone())).collect(),
            notes: d.notes.clone(),
        }
    }

    pub fn diagnostic(&self) -> Diagnostic {
        Diagnostic {
            severity: match self.severity.as_str() {
                "note" => Severity::Note,
                "warning" => Severity::Warning,
                _ => Severity::Error,
            },
            message: self.message.clone(),
            span: self.span.map(from_wire),
            label: self.label.clone(),
            secondary: self.secondary.iter().map(|(s, l)| (from_wire(*s), l.clone())).collect(),
            notes: self.notes.clone(),
        }
    }
}

/// The spans of a module's functions and ops, in print order.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct SpanTable {
    pub funcs: Vec<FuncSpans>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct FuncSpans {
    pub span: WireSpan,
    pub name: WireSpan,
    pub ops: Vec<OpSpan>,
}

/// An op's span and, where the parser kept them, the spans of its parts.
#[derive(Debug, Serialize, Deserialize)]
pub struct OpSpan {
    pub span: WireSpan,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parts: Option<Parts>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Parts {
    pub name: WireSpan,
    pub operands: Vec<WireSpan>,
    pub results: Vec<WireSpan>,
    pub attrs: Vec<(String, WireSpan)>,
    pub sig: Option<WireSpan>,
}

impl SpanTable {
    /// The spans of `m`, in the order [`fbc_ir::print_module`] prints functions and ops.
    pub fn of(m: &Module) -> SpanTable {
        let funcs = m
            .funcs
            .iter()
            .map(|f| FuncSpans {
                span: to_wire(f.span),
                name: to_wire(f.name_span),
                ops: f
                    .body
                    .iter()
                    .map(|&op| {
                        let d = m.op(op);
                        OpSpan {
                            span: to_wire(d.span),
                            parts: d.spans.as_ref().map(|p| Parts {
                                name: to_wire(p.name),
                                operands: p.operands.iter().map(|s| to_wire(*s)).collect(),
                                results: p.results.iter().map(|s| to_wire(*s)).collect(),
                                attrs: p
                                    .attrs
                                    .iter()
                                    .map(|(k, s)| (k.clone(), to_wire(*s)))
                                    .collect(),
                                sig: p.sig.map(to_wire),
                            }),
                        }
                    })
                    .collect(),
            })
            .collect();
        SpanTable { funcs }
    }

    /// Gives `m` (parsed from the text printed with this table) the spans of the table. A
    /// function or op the table does not have (the shapes differ: a bug on one side) keeps no
    /// span rather than a wrong one.
    pub fn apply(&self, m: &mut Module) {
        for (i, f) in m.funcs.iter_mut().enumerate() {
            let t = self.funcs.get(i);
            f.span = t.map_or(Span::default(), |t| from_wire(t.span));
            f.name_span = t.map_or(Span::default(), |t| from_wire(t.name));
        }
        let bodies: Vec<Vec<fbc_ir::Op>> = m.funcs.iter().map(|f| f.body.clone()).collect();
        for (i, body) in bodies.iter().enumerate() {
            let ops = self.funcs.get(i).map(|t| t.ops.as_slice()).unwrap_or_default();
            let matches = ops.len() == body.len();
            for (j, &op) in body.iter().enumerate() {
                let entry = ops.get(j).filter(|_| matches);
                let d = m.op_mut(op);
                d.span = entry.map_or(Span::default(), |e| from_wire(e.span));
                d.spans = entry.and_then(|e| e.parts.as_ref()).map(|p| {
                    Box::new(OpSpans {
                        name: from_wire(p.name),
                        operands: p.operands.iter().map(|s| from_wire(*s)).collect(),
                        results: p.results.iter().map(|s| from_wire(*s)).collect(),
                        attrs: p.attrs.iter().map(|(k, s)| (k.clone(), from_wire(*s))).collect(),
                        sig: p.sig.map(from_wire),
                    })
                });
            }
        }
    }
}

//! Passes, the pass registry, MLIR pipeline syntax, and the pass manager.
//!
//! A pass is registered under a kebab-case name with a one-line summary and declared, typed
//! options; the registry builds passes from a pipeline text such as
//! `canonicalize,cse,autodiff{func=loss wrt=a,b}`. Registration takes a constructor closure, so the
//! same registry serves built-in passes, passes from crates that link fbc as a library, and (later)
//! passes loaded from shared libraries through a `register(&mut PassRegistry)` entry point.
//!
//! The manager runs a pipeline and, between passes, optionally verifies the module, prints it, and
//! times each pass. A pass that breaks an invariant is reported by name.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fbc_grammar::Diagnostic;

use crate::module::Module;
use crate::registry::OpRegistry;

/// What a pass may use besides the module.
#[derive(Debug)]
pub struct PassContext<'a> {
    pub registry: &'a OpRegistry,
    /// The hardware profile being compiled for, resolved once by whoever runs the pipeline
    /// (the driver, from `--target`/`--profile`); [`PassContext::new`] sets the builtin
    /// `generic` profile. Passes read the profile here, never a target name.
    pub target: &'a fbc_target::HardwareProfile,
    /// Counters and notes passes record for `--emit report` and `--time-passes`.
    pub stats: Statistics,
}

impl<'a> PassContext<'a> {
    /// A context for the `generic` profile.
    pub fn new(registry: &'a OpRegistry) -> PassContext<'a> {
        PassContext::for_target(registry, fbc_target::generic())
    }

    /// A context for hardware profile `target`.
    pub fn for_target(
        registry: &'a OpRegistry,
        target: &'a fbc_target::HardwareProfile,
    ) -> PassContext<'a> {
        PassContext { registry, target, stats: Statistics::default() }
    }
}

/// Named counters per pass (MLIR's pass statistics) and free-form JSON records.
#[derive(Debug, Default, Clone)]
pub struct Statistics {
    pub counters: BTreeMap<(String, String), i64>,
    pub records: BTreeMap<String, serde_json::Value>,
}

impl Statistics {
    pub fn add(&mut self, pass: &str, counter: &str, by: i64) {
        *self.counters.entry((pass.to_string(), counter.to_string())).or_insert(0) += by;
    }

    pub fn get(&self, pass: &str, counter: &str) -> i64 {
        self.counters.get(&(pass.to_string(), counter.to_string())).copied().unwrap_or(0)
    }

    /// The counters of each pass, in the style of MLIR's `-mlir-pass-statistics`, then each
    /// record that is a list of per-function figures (objects with a `"function"` name and
    /// numbers), one line a function. Other records (large ones, such as rtile-select's scores)
    /// are left to `--emit report`.
    pub fn report(&self) -> String {
        let mut s =
            String::from("===-------------------------------------------------------------===\n");
        s.push_str("                         Pass statistics report\n");
        s.push_str("===-------------------------------------------------------------===\n");
        let mut pass = "";
        for ((p, counter), v) in &self.counters {
            if p != pass {
                pass = p;
                let _ = fmt::Write::write_fmt(&mut s, format_args!("'{p}'\n"));
            }
            let _ = fmt::Write::write_fmt(&mut s, format_args!("  (S) {v:>14} {counter}\n"));
        }
        for (p, record) in &self.records {
            let Some(rows) = record.as_array() else { continue };
            let per_function = |r: &serde_json::Value| {
                r.as_object().is_some_and(|o| {
                    o.get("function").is_some_and(serde_json::Value::is_string)
                        && o.iter().all(|(k, v)| k == "function" || v.is_number())
                })
            };
            if rows.is_empty() || !rows.iter().all(per_function) {
                continue;
            }
            let _ = fmt::Write::write_fmt(&mut s, format_args!("'{p}' per function\n"));
            for r in rows {
                let o = r.as_object().expect("checked above");
                let name = o.get("function").and_then(serde_json::Value::as_str).unwrap_or("");
                let figures: Vec<String> = o
                    .iter()
                    .filter(|(k, _)| *k != "function")
                    .map(|(k, v)| format!("{k} {v}"))
                    .collect();
                let _ = fmt::Write::write_fmt(
                    &mut s,
                    format_args!("  @{name}: {}\n", figures.join(", ")),
                );
            }
        }
        s
    }
}

/// A transformation of a module.
pub trait Pass {
    /// The registered kebab-case name.
    fn name(&self) -> &str;

    /// Runs over the whole module. Errors are diagnostics located in the module's source.
    fn run(&mut self, module: &mut Module, cx: &mut PassContext<'_>)
        -> Result<(), Vec<Diagnostic>>;
}

/// The type of a pass option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptionKind {
    Bool,
    Int,
    Float,
    Str,
    /// A comma-separated list of strings.
    List,
}

impl fmt::Display for OptionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OptionKind::Bool => "bool",
            OptionKind::Int => "int",
            OptionKind::Float => "float",
            OptionKind::Str => "string",
            OptionKind::List => "list",
        })
    }
}

#[derive(Debug, Clone)]
pub struct OptionSpec {
    pub name: String,
    pub kind: OptionKind,
    /// The default as text; `None` means the option is required.
    pub default: Option<String>,
    pub help: String,
}

impl OptionSpec {
    pub fn new(name: &str, kind: OptionKind, default: Option<&str>, help: &str) -> OptionSpec {
        OptionSpec { name: name.into(), kind, default: default.map(Into::into), help: help.into() }
    }
}

/// A parsed option value.
#[derive(Debug, Clone, PartialEq)]
pub enum OptionValue {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    List(Vec<String>),
}

/// Option values of one pass instance, defaults filled in.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PassOptions {
    values: BTreeMap<String, OptionValue>,
}

impl PassOptions {
    /// Options from values already parsed and checked against the pass's declared options (what
    /// a pass plugin receives from the host, which parsed the pipeline text).
    pub fn from_values(values: impl IntoIterator<Item = (String, OptionValue)>) -> PassOptions {
        PassOptions { values: values.into_iter().collect() }
    }

    /// Every value, by option name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &OptionValue)> {
        self.values.iter().map(|(k, v)| (k.as_str(), v))
    }

    pub fn get(&self, name: &str) -> Option<&OptionValue> {
        self.values.get(name)
    }

    pub fn bool(&self, name: &str) -> bool {
        matches!(self.values.get(name), Some(OptionValue::Bool(true)))
    }

    pub fn int(&self, name: &str) -> Option<i64> {
        match self.values.get(name) {
            Some(OptionValue::Int(v)) => Some(*v),
            _ => None,
        }
    }

    pub fn float(&self, name: &str) -> Option<f64> {
        match self.values.get(name) {
            Some(OptionValue::Float(v)) => Some(*v),
            Some(OptionValue::Int(v)) => Some(*v as f64),
            _ => None,
        }
    }

    pub fn str(&self, name: &str) -> Option<&str> {
        match self.values.get(name) {
            Some(OptionValue::Str(v)) => Some(v),
            _ => None,
        }
    }

    pub fn list(&self, name: &str) -> Vec<String> {
        match self.values.get(name) {
            Some(OptionValue::List(v)) => v.clone(),
            Some(OptionValue::Str(v)) => vec![v.clone()],
            _ => Vec::new(),
        }
    }
}

type Factory = dyn Fn(&PassOptions) -> Result<Box<dyn Pass>, String> + Send + Sync;

/// A registered pass: its name, summary, options and constructor.
#[derive(Clone)]
pub struct PassInfo {
    pub name: String,
    pub summary: String,
    pub options: Vec<OptionSpec>,
    factory: Arc<Factory>,
}

impl fmt::Debug for PassInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PassInfo").field("name", &self.name).finish_non_exhaustive()
    }
}

impl PassInfo {
    pub fn new(
        name: &str,
        summary: &str,
        options: Vec<OptionSpec>,
        factory: impl Fn(&PassOptions) -> Result<Box<dyn Pass>, String> + Send + Sync + 'static,
    ) -> PassInfo {
        PassInfo { name: name.into(), summary: summary.into(), options, factory: Arc::new(factory) }
    }

    /// Builds an instance with the given options (defaults filled in).
    pub fn instantiate(&self, options: &PassOptions) -> Result<Box<dyn Pass>, String> {
        (self.factory)(options)
    }
}

/// Why a pipeline text was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct PipelineError {
    pub message: String,
    /// Byte offset in the pipeline text.
    pub offset: usize,
}

/// One step of a parsed pipeline.
#[derive(Debug, Clone)]
pub struct PipelineStep {
    pub info: PassInfo,
    pub options: PassOptions,
}

impl PipelineStep {
    /// The step in pipeline syntax, options in declaration order.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        for spec in &self.info.options {
            if let Some(v) = self.options.get(&spec.name) {
                let text = match v {
                    OptionValue::Bool(b) => b.to_string(),
                    OptionValue::Int(i) => i.to_string(),
                    OptionValue::Float(x) => x.to_string(),
                    OptionValue::Str(s) => s.clone(),
                    OptionValue::List(l) => l.join(","),
                };
                if spec.default.as_deref() != Some(text.as_str()) {
                    parts.push(format!("{}={text}", spec.name));
                }
            }
        }
        if parts.is_empty() {
            self.info.name.clone()
        } else {
            format!("{}{{{}}}", self.info.name, parts.join(" "))
        }
    }
}

/// Where an `-O` pipeline takes passes that are not its own (LLVM's extension points): a
/// crate or plugin that registers passes can ask for them to run in every optimisation
/// pipeline, not only in `fbc opt --passes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ExtensionPoint {
    /// Before the level's first pass.
    PipelineStart,
    /// After the level's last pass, before lowering.
    OptimizerEnd,
}

impl ExtensionPoint {
    pub const ALL: [ExtensionPoint; 2] =
        [ExtensionPoint::PipelineStart, ExtensionPoint::OptimizerEnd];

    /// The kebab-case name (`pipeline-start`, `optimizer-end`).
    pub fn name(self) -> &'static str {
        match self {
            ExtensionPoint::PipelineStart => "pipeline-start",
            ExtensionPoint::OptimizerEnd => "optimizer-end",
        }
    }

    pub fn from_name(name: &str) -> Option<ExtensionPoint> {
        ExtensionPoint::ALL.into_iter().find(|p| p.name() == name)
    }
}

/// All passes fbc can run, by name, and the pipelines registered at extension points.
#[derive(Debug, Clone, Default)]
pub struct PassRegistry {
    passes: BTreeMap<String, PassInfo>,
    extensions: Vec<(ExtensionPoint, String)>,
}

impl PassRegistry {
    pub fn new() -> PassRegistry {
        PassRegistry::default()
    }

    /// Registers a pass. Names must be kebab-case; registering a name twice replaces the first.
    ///
    /// # Panics
    /// If the name is not kebab-case: a programming error in the registering code.
    pub fn register(&mut self, info: PassInfo) {
        assert!(
            !info.name.is_empty()
                && info
                    .name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
            "pass names are kebab-case, got `{}`",
            info.name
        );
        self.passes.insert(info.name.clone(), info);
    }

    pub fn get(&self, name: &str) -> Option<&PassInfo> {
        self.passes.get(name)
    }

    /// Asks for `pipeline` (pipeline text, checked when a pipeline containing it is parsed) to
    /// run at `at` in every `-O` pipeline; several requests at one point run in the order made.
    pub fn extend_pipeline(&mut self, at: ExtensionPoint, pipeline: &str) {
        self.extensions.push((at, pipeline.to_string()));
    }

    /// The pipelines registered at extension points, in the order registered.
    pub fn extensions(&self) -> &[(ExtensionPoint, String)] {
        &self.extensions
    }

    /// `base` (an `-O` pipeline's text) with the extension pipelines around it.
    pub fn extended_pipeline(&self, base: &str) -> String {
        let at = |point: ExtensionPoint| {
            self.extensions.iter().filter(move |(p, _)| *p == point).map(|(_, t)| t.as_str())
        };
        let parts: Vec<&str> = at(ExtensionPoint::PipelineStart)
            .chain((!base.is_empty()).then_some(base))
            .chain(at(ExtensionPoint::OptimizerEnd))
            .collect();
        parts.join(",")
    }

    pub fn iter(&self) -> impl Iterator<Item = &PassInfo> {
        self.passes.values()
    }

    /// Parses MLIR pipeline syntax: `a,b{opt=v list=x,y},c`.
    pub fn parse_pipeline(&self, text: &str) -> Result<Vec<PipelineStep>, PipelineError> {
        let mut steps = Vec::new();
        let bytes = text.as_bytes();
        let mut i = 0;
        let err = |offset: usize, message: String| PipelineError { message, offset };
        loop {
            while i < bytes.len() && (bytes[i] as char).is_whitespace() {
                i += 1;
            }
            if i >= bytes.len() {
                break;
            }
            let start = i;
            while i < bytes.len()
                && !matches!(bytes[i], b',' | b'{')
                && !(bytes[i] as char).is_whitespace()
            {
                i += 1;
            }
            let name = &text[start..i];
            if name.is_empty() {
                return Err(err(start, "expected a pass name".into()));
            }
            let Some(info) = self.get(name) else {
                let known: Vec<&str> = self.passes.keys().map(String::as_str).collect();
                return Err(err(
                    start,
                    format!("unknown pass `{name}`; known passes: {}", known.join(", ")),
                ));
            };
            while i < bytes.len() && (bytes[i] as char).is_whitespace() {
                i += 1;
            }
            let mut given: Vec<(String, String, usize)> = Vec::new();
            if i < bytes.len() && bytes[i] == b'{' {
                let open = i;
                let Some(close) = text[i..].find('}').map(|c| c + i) else {
                    return Err(err(open, format!("unclosed `{{` in the options of `{name}`")));
                };
                let mut off = open + 1;
                for tok in text[open + 1..close].split_whitespace() {
                    let tok_off = text[off..close].find(tok).map_or(off, |p| p + off);
                    off = tok_off + tok.len();
                    let (k, v) = tok.split_once('=').unwrap_or((tok, "true"));
                    given.push((k.to_string(), v.to_string(), tok_off));
                }
                i = close + 1;
            }
            let options = build_options(info, &given).map_err(|(o, m)| err(o, m))?;
            steps.push(PipelineStep { info: info.clone(), options });
            while i < bytes.len() && (bytes[i] as char).is_whitespace() {
                i += 1;
            }
            if i < bytes.len() {
                if bytes[i] != b',' {
                    return Err(err(
                        i,
                        format!(
                            "expected `,` or the end of the pipeline, found `{}`",
                            &text[i..].chars().next().unwrap_or(' ')
                        ),
                    ));
                }
                i += 1;
            }
        }
        Ok(steps)
    }
}

fn parse_value(kind: OptionKind, text: &str) -> Result<OptionValue, String> {
    Ok(match kind {
        OptionKind::Bool => match text {
            "true" | "1" => OptionValue::Bool(true),
            "false" | "0" => OptionValue::Bool(false),
            _ => return Err(format!("expected true or false, found `{text}`")),
        },
        OptionKind::Int => OptionValue::Int(
            text.parse().map_err(|_| format!("expected an integer, found `{text}`"))?,
        ),
        OptionKind::Float => OptionValue::Float(
            text.parse().map_err(|_| format!("expected a number, found `{text}`"))?,
        ),
        OptionKind::Str => OptionValue::Str(text.to_string()),
        OptionKind::List => OptionValue::List(
            text.split(',').filter(|s| !s.is_empty()).map(str::to_string).collect(),
        ),
    })
}

fn build_options(
    info: &PassInfo,
    given: &[(String, String, usize)],
) -> Result<PassOptions, (usize, String)> {
    let mut values = BTreeMap::new();
    for (k, v, off) in given {
        let Some(spec) = info.options.iter().find(|s| s.name == *k) else {
            let known: Vec<String> =
                info.options.iter().map(|s| format!("{} ({})", s.name, s.kind)).collect();
            let list = if known.is_empty() { "none".to_string() } else { known.join(", ") };
            return Err((
                *off,
                format!("unknown option `{k}` for pass `{}`; its options: {list}", info.name),
            ));
        };
        let value = parse_value(spec.kind, v)
            .map_err(|m| (*off, format!("option `{k}` of `{}`: {m}", info.name)))?;
        values.insert(k.clone(), value);
    }
    for spec in &info.options {
        if values.contains_key(&spec.name) {
            continue;
        }
        match &spec.default {
            Some(d) => {
                let v = parse_value(spec.kind, d)
                    .map_err(|m| (0, format!("bad default of `{}`: {m}", spec.name)))?;
                values.insert(spec.name.clone(), v);
            }
            None => {
                return Err((
                    0,
                    format!("pass `{}` requires option `{}` ({})", info.name, spec.name, spec.help),
                ))
            }
        }
    }
    Ok(PassOptions { values })
}

/// What the manager does between passes.
#[derive(Debug, Clone, Default)]
pub struct Instrumentation {
    /// Run the verifier after every pass.
    pub verify_each: bool,
    pub print_after_all: bool,
    /// Print after passes of these names.
    pub print_after: Vec<String>,
    pub time_passes: bool,
    /// Print every pass's counters after the pipeline ([`Statistics::report`]).
    pub pass_statistics: bool,
}

/// How long each pass took, in pipeline order.
#[derive(Debug, Clone, Default)]
pub struct Timings {
    pub passes: Vec<(String, Duration)>,
}

impl Timings {
    /// A table in the style of MLIR's `-mlir-timing`.
    pub fn report(&self) -> String {
        let total: Duration = self.passes.iter().map(|(_, d)| *d).sum();
        let mut s =
            String::from("===-------------------------------------------------------------===\n");
        s.push_str("                         Pass execution timing report\n");
        s.push_str("===-------------------------------------------------------------===\n");
        let _ = fmt::Write::write_fmt(
            &mut s,
            format_args!("  Total Execution Time: {:.4} seconds\n\n", total.as_secs_f64()),
        );
        s.push_str("   ---Wall Time---  --- Name ---\n");
        for (name, d) in &self.passes {
            let pct =
                if total.is_zero() { 0.0 } else { 100.0 * d.as_secs_f64() / total.as_secs_f64() };
            let _ = fmt::Write::write_fmt(
                &mut s,
                format_args!("   {:.4} ({:5.1}%)  {}\n", d.as_secs_f64(), pct, name),
            );
        }
        let _ = fmt::Write::write_fmt(
            &mut s,
            format_args!("   {:.4} (100.0%)  Total\n", total.as_secs_f64()),
        );
        s
    }
}

/// Runs pipelines with instrumentation.
#[derive(Debug, Default)]
pub struct PassManager {
    pub steps: Vec<PipelineStep>,
    pub instrumentation: Instrumentation,
}

impl PassManager {
    pub fn new(steps: Vec<PipelineStep>) -> PassManager {
        PassManager { steps, instrumentation: Instrumentation::default() }
    }

    /// Creates every step's pass, in order: the first option value a pass refuses is an error
    /// naming the pass and saying why (`(pass name, message)`).
    pub fn instantiate(&self) -> Result<Vec<Box<dyn Pass>>, (String, String)> {
        self.steps
            .iter()
            .map(|step| {
                step.info.instantiate(&step.options).map_err(|m| (step.info.name.clone(), m))
            })
            .collect()
    }

    /// Runs every step in order. `dump` receives IR printed after passes (for `--print-ir-after`).
    pub fn run(
        &self,
        module: &mut Module,
        cx: &mut PassContext<'_>,
        dump: &mut dyn FnMut(&str),
    ) -> Result<Timings, Vec<Diagnostic>> {
        let passes = self.instantiate().map_err(|(name, m)| {
            vec![Diagnostic::error(format!("cannot create pass `{name}`: {m}"))]
        })?;
        self.run_passes(passes, module, cx, dump)
    }

    /// [`PassManager::run`] with the passes already created by [`PassManager::instantiate`]
    /// (one per step, in order): what a driver does that checks every option before anything
    /// runs, so that each pass is created once.
    pub fn run_passes(
        &self,
        passes: Vec<Box<dyn Pass>>,
        module: &mut Module,
        cx: &mut PassContext<'_>,
        dump: &mut dyn FnMut(&str),
    ) -> Result<Timings, Vec<Diagnostic>> {
        let mut timings = Timings::default();
        for (step, mut pass) in self.steps.iter().zip(passes) {
            let start = Instant::now();
            let activity = crate::activity::enter(format!("pass `{}`", step.info.name));
            pass.run(module, cx)?;
            drop(activity);
            timings.passes.push((step.describe(), start.elapsed()));
            if self.instrumentation.verify_each {
                let errors = crate::verify::verify_module(module);
                if !errors.is_empty() {
                    let mut out = vec![Diagnostic::error(format!(
                        "the module does not verify after pass `{}`; this is a bug in the pass",
                        step.info.name
                    ))];
                    out.extend(errors);
                    return Err(out);
                }
            }
            let i = &self.instrumentation;
            if i.print_after_all || i.print_after.contains(&step.info.name) {
                dump(&format!("// -----// IR Dump After {} //----- //\n", step.describe()));
                dump(&crate::printer::print_module(module));
            }
        }
        Ok(timings)
    }
}

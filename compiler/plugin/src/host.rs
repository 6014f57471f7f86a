//! The host side: checks a plugin file, loads it, and registers a proxy for each of its passes
//! in fbc's [`PassRegistry`], so that plugin passes run in pipelines, take typed options, and
//! get the pass manager's verification, printing and timing like built-in ones.
//!
//! Order of the checks, each a [`LoadError`] naming the file: the file can be read; it is a
//! shared library (ELF or Mach-O); it exports [`abi::HEADER_SYMBOL`]; the descriptor's prefix,
//! read from the file, has fbc's magic, plugin API version and fbc version. Only then is the
//! library loaded and asked for its passes, each checked against the names already registered.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use fbc_grammar::{Diagnostic, SourceFile};
use fbc_ir::pass::{ExtensionPoint, PassContext, PassInfo, PassOptions, PassRegistry};
use fbc_ir::{Module, Pass};
use object::{Object, ObjectSection, ObjectSymbol};

use crate::abi::{self, Versions};
use crate::wire::{self, Answer, Request, SpanTable};

/// Why a plugin was not loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadError {
    pub path: PathBuf,
    pub message: String,
}

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: error: cannot load pass plugin: {}", self.path.display(), self.message)
    }
}

impl std::error::Error for LoadError {}

/// A loaded plugin.
#[derive(Debug)]
struct Plugin {
    path: PathBuf,
    library: abi::Library,
}

impl Plugin {
    fn ask(&self, request: &Request) -> Result<Answer, String> {
        let bytes = serde_json::to_vec(request).map_err(|e| e.to_string())?;
        let answer = self
            .library
            .call(&bytes)
            .map_err(|status| format!("the plugin's entry point failed with status {status}"))?;
        serde_json::from_slice(&answer)
            .map_err(|e| format!("unreadable answer from the plugin: {e}"))
    }
}

/// The versions of this build of fbc, as a plugin descriptor states them.
pub fn host_versions() -> Versions {
    Versions {
        api: abi::API_VERSION,
        fbc: crate::FBC_VERSION.into(),
        rustc: crate::RUSTC_VERSION.into(),
    }
}

/// Reads the descriptor prefix of the plugin file `path` without loading it.
pub fn read_descriptor(path: &Path) -> Result<Versions, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read the file: {e}"))?;
    let file = object::File::parse(&*bytes).map_err(|e| format!("not a shared library ({e})"))?;
    if file.kind() != object::ObjectKind::Dynamic {
        return Err(format!("not a shared library (an object file of kind {:?})", file.kind()));
    }
    let wanted = |name: &[u8]| {
        name == abi::HEADER_SYMBOL.as_bytes()
            || name.strip_prefix(b"_") == Some(abi::HEADER_SYMBOL.as_bytes())
    };
    let symbol = file
        .dynamic_symbols()
        .chain(file.symbols())
        .find(|s| s.is_definition() && s.name_bytes().is_ok_and(wanted))
        .ok_or_else(|| {
            format!(
                "the library has no fbc plugin descriptor (no `{}` symbol): it is not an fbc pass \
                 plugin (a plugin declares one with `fbc_plugin::declare_plugin!`)",
                abi::HEADER_SYMBOL
            )
        })?;
    let address = symbol.address();
    let prefix = file
        .sections()
        .find_map(|s| s.data_range(address, abi::PREFIX_LEN as u64).ok().flatten())
        .ok_or_else(|| format!("the `{}` symbol has no data in the file", abi::HEADER_SYMBOL))?;
    abi::read_prefix(prefix, file.is_little_endian()).ok_or_else(|| {
        format!("`{}` is not an fbc plugin descriptor (wrong magic bytes)", abi::HEADER_SYMBOL)
    })
}

/// Why `plugin`'s versions cannot be loaded into `host`, if they cannot.
pub fn version_mismatch(plugin: &Versions, host: &Versions) -> Option<String> {
    if plugin.api != host.api {
        return Some(format!(
            "it was built for fbc plugin API version {} (fbc {}, {}); this fbc {} speaks plugin \
             API version {} ({}): rebuild the plugin against fbc {}",
            plugin.api, plugin.fbc, plugin.rustc, host.fbc, host.api, host.rustc, host.fbc
        ));
    }
    if plugin.fbc != host.fbc {
        return Some(format!(
            "it was built against fbc {} ({}); this is fbc {} ({}): the IR text the two \
             exchange is only guaranteed the same within one fbc version; rebuild the plugin \
             against fbc {}",
            plugin.fbc, plugin.rustc, host.fbc, host.rustc, host.fbc
        ));
    }
    None
}

/// Loads the plugin at `path` and registers its passes and extension-point pipelines in
/// `passes`. A pass whose name is already registered (a built-in one, or one of an earlier
/// plugin) is refused, and then nothing of the plugin is registered.
pub fn load(path: &Path, passes: &mut PassRegistry) -> Result<(), LoadError> {
    let fail = |message: String| LoadError { path: path.to_path_buf(), message };
    let versions = read_descriptor(path).map_err(fail)?;
    if let Some(why) = version_mismatch(&versions, &host_versions()) {
        return Err(fail(why));
    }
    let library = abi::Library::open(path).map_err(|e| fail(format!("cannot load it: {e}")))?;
    let plugin = Arc::new(Plugin { path: path.to_path_buf(), library });
    let (described, extensions) = match plugin.ask(&Request::Describe).map_err(fail)? {
        Answer::Described { passes, extensions } => (passes, extensions),
        other => return Err(fail(unexpected("describe", &other))),
    };
    let mut infos = Vec::new();
    for desc in described {
        let kebab = !desc.name.is_empty()
            && desc.name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if !kebab {
            return Err(fail(format!("its pass name `{}` is not kebab-case", desc.name)));
        }
        if passes.get(&desc.name).is_some() {
            return Err(fail(format!(
                "it registers a pass named `{}`, which fbc already has; a plugin cannot replace \
                 a registered pass: rename the plugin's pass",
                desc.name
            )));
        }
        let mut options = Vec::new();
        for o in &desc.options {
            options.push(o.spec().ok_or_else(|| {
                fail(format!(
                    "option `{}` of pass `{}` has unknown kind `{}`",
                    o.name, desc.name, o.kind
                ))
            })?);
        }
        let (name, owner) = (desc.name.clone(), Arc::clone(&plugin));
        infos.push(PassInfo::new(&desc.name, &desc.summary, options, move |opts| {
            proxy(&owner, &name, opts)
        }));
    }
    let mut points = Vec::new();
    for (at, pipeline) in extensions {
        let point = ExtensionPoint::from_name(&at)
            .ok_or_else(|| fail(format!("unknown extension point `{at}`")))?;
        points.push((point, pipeline));
    }
    for info in infos {
        passes.register(info);
    }
    for (point, pipeline) in points {
        passes.extend_pipeline(point, &pipeline);
    }
    Ok(())
}

fn unexpected(request: &str, answer: &Answer) -> String {
    match answer {
        Answer::Panicked { message, location } => format!(
            "the plugin panicked answering `{request}`: {message}{}",
            location.as_deref().map_or(String::new(), |l| format!(" at {l}"))
        ),
        Answer::Error { message } => format!("the plugin could not answer `{request}`: {message}"),
        _ => format!("the plugin gave an answer that does not fit `{request}`"),
    }
}

/// Creates the host-side pass for `name`: the plugin checks the option values first, so a value
/// its pass refuses is an error before any pass of the pipeline runs, as for built-in passes.
fn proxy(plugin: &Arc<Plugin>, name: &str, opts: &PassOptions) -> Result<Box<dyn Pass>, String> {
    let options = wire::options_to_wire(opts);
    let request = Request::Check { pass: name.to_string(), options: options.clone() };
    match plugin.ask(&request)? {
        Answer::Accepted => {}
        Answer::Refused { message } => return Err(message),
        other => return Err(unexpected("check", &other)),
    }
    Ok(Box::new(PluginPass { plugin: Arc::clone(plugin), name: name.to_string(), options }))
}

/// A pass that runs in a plugin: the module goes out as text with its span table, and the
/// plugin's module comes back the same way, is parsed and verified here, and replaces it.
#[derive(Debug)]
struct PluginPass {
    plugin: Arc<Plugin>,
    name: String,
    options: Vec<(String, wire::Value)>,
}

impl PluginPass {
    fn error(&self, message: impl std::fmt::Display) -> Diagnostic {
        Diagnostic::error(format!(
            "pass `{}` (plugin {}): {message}",
            self.name,
            self.plugin.path.display()
        ))
    }
}

impl Pass for PluginPass {
    fn name(&self) -> &str {
        &self.name
    }

    fn run(&mut self, m: &mut Module, cx: &mut PassContext<'_>) -> Result<(), Vec<Diagnostic>> {
        let (source_name, source_text) = m
            .source
            .as_ref()
            .map_or((String::new(), String::new()), |s| (s.name.clone(), s.text.clone()));
        let request = Request::Run {
            pass: self.name.clone(),
            options: self.options.clone(),
            target: Box::new(cx.target.clone()),
            source_name,
            source_text,
            module: fbc_ir::print_module(m),
            spans: SpanTable::of(m),
        };
        let (text, spans, counters, records) = match self.plugin.ask(&request) {
            Err(e) => return Err(vec![self.error(e)]),
            Ok(Answer::Ran { module, spans, counters, records }) => {
                (module, spans, counters, records)
            }
            Ok(Answer::Failed { diagnostics }) => {
                return Err(diagnostics.iter().map(wire::Diag::diagnostic).collect())
            }
            Ok(Answer::Panicked { message, location }) => {
                let mut d = self.error(format!("panicked: {message}"));
                if let Some(l) = location {
                    d = d.with_note(format!("the panic is at {l}, in the plugin"));
                }
                return Err(vec![
                    d.with_note("this is a bug in the plugin, not in fbc or the input")
                ]);
            }
            Ok(Answer::Refused { message }) => return Err(vec![self.error(message)]),
            Ok(other) => return Err(vec![self.error(unexpected("run", &other))]),
        };
        let mut out = reparse(&text, cx.registry).map_err(|notes| {
            let mut d =
                self.error("returned a module that does not parse; this is a bug in the plugin");
            d.notes.push(notes);
            vec![d]
        })?;
        spans.apply(&mut out);
        out.source = m.source.clone();
        let errors = fbc_ir::verify_module(&out);
        if !errors.is_empty() {
            let mut all =
                vec![self
                    .error("returned a module that does not verify; this is a bug in the plugin")];
            all.extend(errors);
            return Err(all);
        }
        *m = out;
        for (pass, counter, by) in counters {
            cx.stats.add(&pass, &counter, by);
        }
        cx.stats.records.extend(records);
        Ok(())
    }
}

/// Parses a plugin's module; the error is the rendered diagnostics against its text.
fn reparse(text: &str, ops: &fbc_ir::OpRegistry) -> Result<Module, String> {
    let render = |d: &[Diagnostic]| {
        let file = SourceFile::new("<module from the plugin>", text);
        fbc_grammar::diag::render_all(&file, d)
    };
    let ast = fbc_grammar::parse(text).map_err(|d| render(&d))?;
    fbc_ir::build_module(&ast, ops).map_err(|d| render(&d))
}

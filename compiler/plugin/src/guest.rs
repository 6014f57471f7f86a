//! The plugin side of the protocol: answers the host's requests with the passes a plugin's
//! `register` function adds to a [`PassRegistry`]. `declare_plugin!` routes the exported `call`
//! here; nothing in this module is meant to be called by hand.

use std::sync::{Arc, Mutex, OnceLock};

use fbc_grammar::SourceFile;
use fbc_ir::pass::{PassContext, PassRegistry, Statistics};
use fbc_ir::{Module, OpRegistry};

use crate::wire::{self, Answer, Request, SpanTable};

struct Registries {
    passes: PassRegistry,
    ops: OpRegistry,
}

/// A panic's message and place.
type Caught = (String, Option<String>);

/// Answers one request (the JSON bytes of a [`Request`]) with the JSON bytes of an [`Answer`].
/// A panic anywhere in here, in the plugin's `register` or in its pass, becomes
/// [`Answer::Panicked`] with its message and place: it never unwinds into the host.
pub fn handle(register: fn(&mut PassRegistry), request: &[u8]) -> Vec<u8> {
    static REGISTRIES: OnceLock<Registries> = OnceLock::new();
    let caught: Arc<Mutex<Option<Caught>>> = Arc::default();
    let sink = Arc::clone(&caught);
    // This is the plugin's own copy of std: its panic hook is not the host's, and the default
    // one would print the panic on stderr before the host reports it properly.
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "(no message)".into());
        let place = info.location().map(|l| l.to_string());
        sink.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert((message, place));
    }));
    let result = std::panic::catch_unwind(|| {
        let registries = REGISTRIES.get_or_init(|| {
            let mut passes = PassRegistry::new();
            register(&mut passes);
            Registries { passes, ops: fbc_dialects::registry() }
        });
        answer(registries, request)
    });
    std::panic::set_hook(previous);
    let answer = result.unwrap_or_else(|_| {
        let (message, location) = caught
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .unwrap_or_else(|| ("a panic".into(), None));
        Answer::Panicked { message, location }
    });
    serde_json::to_vec(&answer).unwrap_or_default()
}

fn answer(r: &Registries, request: &[u8]) -> Answer {
    let request: Request = match serde_json::from_slice(request) {
        Ok(q) => q,
        Err(e) => return Answer::Error { message: format!("unreadable request: {e}") },
    };
    match request {
        Request::Describe => Answer::Described {
            passes: r
                .passes
                .iter()
                .map(|p| wire::PassDesc {
                    name: p.name.clone(),
                    summary: p.summary.clone(),
                    options: p.options.iter().map(wire::OptionDesc::of).collect(),
                })
                .collect(),
            extensions: r
                .passes
                .extensions()
                .iter()
                .map(|(at, pipeline)| (at.name().to_string(), pipeline.clone()))
                .collect(),
        },
        Request::Check { pass, options } => {
            let Some(info) = r.passes.get(&pass) else {
                return Answer::Error { message: format!("no pass `{pass}` in this plugin") };
            };
            match info.instantiate(&wire::options_from_wire(&options)) {
                Ok(_) => Answer::Accepted,
                Err(message) => Answer::Refused { message },
            }
        }
        Request::Run { pass, options, target, source_name, source_text, module, spans } => {
            let Some(info) = r.passes.get(&pass) else {
                return Answer::Error { message: format!("no pass `{pass}` in this plugin") };
            };
            let mut instance = match info.instantiate(&wire::options_from_wire(&options)) {
                Ok(p) => p,
                Err(message) => return Answer::Refused { message },
            };
            let mut m = match parse(&r.ops, &module, &spans) {
                Ok(m) => m,
                Err(message) => return Answer::Error { message },
            };
            if !source_name.is_empty() || !source_text.is_empty() {
                m.source = Some(Arc::new(SourceFile::new(source_name, source_text)));
            }
            let mut cx = PassContext::for_target(&r.ops, &target);
            if let Err(diags) = instance.run(&mut m, &mut cx) {
                return Answer::Failed { diagnostics: diags.iter().map(wire::Diag::of).collect() };
            }
            let Statistics { counters, records } = cx.stats;
            Answer::Ran {
                module: fbc_ir::print_module(&m),
                spans: SpanTable::of(&m),
                counters: counters.into_iter().map(|((p, c), v)| (p, c, v)).collect(),
                records,
            }
        }
    }
}

/// The host's module: its text, with the spans of the table (the host verified it already).
fn parse(ops: &OpRegistry, text: &str, spans: &SpanTable) -> Result<Module, String> {
    let ast = fbc_grammar::parse(text).map_err(|d| describe_failure(text, &d))?;
    let mut m = fbc_ir::build_module(&ast, ops).map_err(|d| describe_failure(text, &d))?;
    spans.apply(&mut m);
    Ok(m)
}

fn describe_failure(text: &str, diags: &[fbc_grammar::Diagnostic]) -> String {
    let file = SourceFile::new("<module from fbc>", text);
    format!(
        "the plugin cannot read the module fbc sent (is it built against another fbc?):\n{}",
        fbc_grammar::diag::render_all(&file, diags)
    )
}

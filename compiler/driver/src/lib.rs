//! The fbc driver: the command line, as a library.
//!
//! [`Driver`] owns the op registry and the pass registry. `fbc` itself is `Driver::default()`; a
//! crate that adds its own passes (see `examples/custom-pass`) builds a `Driver`, registers them on
//! `driver.passes`, and calls [`Driver::main`], so its passes run through the very same pipeline
//! syntax, flags and diagnostics.
//!
//! Exit status: 0 on success, 1 when the input is wrong (diagnostics on stderr), 2 when the command
//! line is wrong or asks for something not supported yet. A failed compile leaves no output file:
//! outputs are written to a temporary file next to the destination and renamed at the end.

#[cfg(feature = "llvm")]
mod aot;
pub mod bench;
pub mod calibrate;
mod cli;
mod gen_cmd;
mod generate;
mod import_cmd;
mod opencl_emit;
mod output;
mod pack_cmd;
// Its users, `fbc bench`, `fbc tune` and `fbc calibrate`, are built with the `opencl` feature
// only.
#[cfg_attr(not(feature = "opencl"), allow(dead_code))]
mod progress;
pub mod report;
mod run_cmd;
mod session;
mod simplify_cmd;
pub mod timeline;
pub mod tuning;
mod viz_cmd;

use std::ffi::OsString;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use fbc_ir::pass::{Instrumentation, PassContext, PassManager, PassRegistry};
use fbc_ir::{Diagnostic, Module, OpRegistry, SourceFile};

pub use cli::{
    BenchArgs, BenchParseArgs, CalibrateArgs, Cli, Command, CompileArgs, DeviceArgs, EmitKind,
    GenArgs, LayoutStrategy, LowerArgs, RunArgs, TuneArgs,
};
pub use session::{has_half_images, is_lowered, Session};

/// Exit status for bad input.
pub const EXIT_INPUT: u8 = 1;
/// Exit status for a bad command line or an unsupported request.
pub const EXIT_USAGE: u8 = 2;
/// Exit status for an internal error (a panic: a bug in fbc), as `sysexits.h`'s `EX_SOFTWARE`.
pub const EXIT_INTERNAL: u8 = 70;

/// An error that ends a command: diagnostics about the input, or a usage problem.
#[derive(Debug)]
pub enum Failure {
    /// Rendered diagnostics about the input (exit status 1).
    Input(String),
    /// A command-line problem (exit status 2).
    Usage(String),
    /// A bug in fbc: a panic caught by [`Driver::main`]'s safety net, rendered with what was
    /// running (exit status 70).
    Internal(String),
}

impl Failure {
    pub(crate) fn input(file: &SourceFile, diags: &[Diagnostic]) -> Failure {
        Failure::Input(fbc_grammar::diag::render_all(file, diags))
    }
}

/// The hardware profile `--target`/`--profile` names: a builtin name (an unknown one is a
/// command-line error), or a profile file, whose malformed or invalid text is an input error at
/// its line and column (exit 1).
pub(crate) fn hardware_profile(name: &str) -> Result<fbc_target::HardwareProfile, Failure> {
    use fbc_target::TargetError;
    fbc_target::resolve(name).map_err(|e| match e {
        TargetError::Parse { origin, line, column, message } => {
            Failure::Input(format!("{origin}:{line}:{column}: error: {message}\n"))
        }
        TargetError::Invalid { .. } => Failure::Input(format!("{name}: error: {e}\n")),
        e => Failure::Usage(e.to_string()),
    })
}

/// Runs `command`, turning a panic into [`Failure::Internal`]: the message names the pass or
/// launch that was running and the panic's place, asks for a report, and every temporary output
/// is removed first. The default panic message is held back while `command` runs (it would
/// repeat the report in a worse form); panics of other threads outside `command` print as usual.
fn catch_internal_errors(command: impl FnOnce() -> Result<(), Failure>) -> Result<(), Failure> {
    use std::sync::{Arc, Mutex};
    let caught: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
    let previous = std::panic::take_hook();
    let sink = Arc::clone(&caught);
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "(no message)".into());
        let place = info.location().map_or(String::new(), |l| format!(" at {l}"));
        let mut slot = sink.lock().unwrap_or_else(|p| p.into_inner());
        // The first panic is the cause; a scoped thread's panic re-raised by its joiner is not.
        slot.get_or_insert(format!("{message}{place}"));
    }));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(command));
    let _ = std::panic::take_hook();
    std::panic::set_hook(previous);
    match result {
        Ok(r) => r,
        Err(_) => {
            output::remove_pending();
            let during = fbc_ir::activity::current()
                .map_or(String::new(), |a| format!(" while running {a}"));
            fbc_ir::activity::clear();
            let what = caught
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take()
                .unwrap_or_else(|| "a panic".into());
            Err(Failure::Internal(format!(
                "fbc: internal error{during}: {what}\n\
                 note: this is a bug in fbc, not in the input; please report it with the command \
                 line and the input file\n\
                 note: no output was written\n"
            )))
        }
    }
}

/// What [`Driver::compile_module`] made: the text of `--emit ir|memory|report`, or OpenCL C
/// with its manifest and the lowered module it was written from.
#[derive(Debug)]
pub enum Compiled {
    Text(String),
    Opencl(Box<fbc_codegen::opencl::Output>, Box<Module>),
    /// The files of `--emit obj|asm|llvm` (code and C header) and the lowered module.
    Native(Vec<(String, Vec<u8>)>, Box<Module>),
}

/// The registries a command line runs against.
#[derive(Debug, Clone)]
pub struct Driver {
    pub ops: OpRegistry,
    pub passes: PassRegistry,
}

impl Default for Driver {
    fn default() -> Driver {
        Driver { ops: fbc_dialects::registry(), passes: fbc_transforms::default_registry() }
    }
}

impl Driver {
    /// Runs a command line (`args[0]` is the program name) and returns the process exit code.
    pub fn main<I, T>(&self, args: I) -> ExitCode
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        let cli = match cli::parse(args) {
            Ok(c) => c,
            Err(cli::ParseError::Clap(e)) => {
                let _ = e.print();
                return ExitCode::from(if e.use_stderr() { EXIT_USAGE } else { 0 });
            }
            Err(cli::ParseError::Usage(text)) => {
                let _ = writeln!(std::io::stderr(), "fbc: error: {text}");
                return ExitCode::from(EXIT_USAGE);
            }
        };
        match self.run_guarded(&cli) {
            Ok(()) => ExitCode::SUCCESS,
            Err(Failure::Input(text)) => {
                let _ = std::io::stderr().write_all(text.as_bytes());
                ExitCode::from(EXIT_INPUT)
            }
            Err(Failure::Usage(text)) => {
                let _ = writeln!(std::io::stderr(), "fbc: error: {text}");
                ExitCode::from(EXIT_USAGE)
            }
            Err(Failure::Internal(text)) => {
                let _ = std::io::stderr().write_all(text.as_bytes());
                ExitCode::from(EXIT_INTERNAL)
            }
        }
    }

    /// [`Driver::run`] under the panic safety net: a panic (a bug in fbc or in a pass it runs)
    /// becomes [`Failure::Internal`], naming the pass or launch that was running, and no output
    /// file is left behind. This is what [`Driver::main`] runs.
    pub fn run_guarded(&self, cli: &Cli) -> Result<(), Failure> {
        catch_internal_errors(|| self.run(cli))
    }

    /// Runs a parsed command line, with the pass plugins of `FBC_PASS_PLUGINS` and
    /// `--load-pass-plugin` loaded first.
    pub fn run(&self, cli: &Cli) -> Result<(), Failure> {
        let mut plugins: Vec<PathBuf> = std::env::var_os("FBC_PASS_PLUGINS")
            .map(|list| {
                std::env::split_paths(&list).filter(|p| !p.as_os_str().is_empty()).collect()
            })
            .unwrap_or_default();
        plugins.extend(cli.load_pass_plugin.iter().cloned());
        if plugins.is_empty() {
            return self.run_command(cli);
        }
        let mut driver = self.clone();
        driver.load_plugins(&plugins)?;
        driver.run_command(cli)
    }

    /// Loads pass plugins into this driver's pass registry (see `fbc_plugin`), in order. Every
    /// plugin that cannot be loaded is reported, each at its path (exit status 1).
    pub fn load_plugins(&mut self, paths: &[PathBuf]) -> Result<(), Failure> {
        let errors: Vec<String> = paths
            .iter()
            .filter_map(|p| fbc_plugin::host::load(p, &mut self.passes).err())
            .map(|e| format!("{e}\n"))
            .collect();
        if errors.is_empty() {
            Ok(())
        } else {
            Err(Failure::Input(errors.concat()))
        }
    }

    fn run_command(&self, cli: &Cli) -> Result<(), Failure> {
        match &cli.command {
            Some(Command::Opt(a)) => {
                let (file, mut module) = self.load(&a.file)?;
                let pipeline = a.passes.clone().unwrap_or_default();
                let generic = fbc_target::generic();
                let instr = a.instr.instrumentation();
                let _ = self.run_pipeline(&file, &mut module, &pipeline, generic, &instr)?;
                output::write_text(a.output.as_deref(), &fbc_ir::print_module(&module))
            }
            Some(Command::Run(a)) => run_cmd::run(self, a),
            Some(Command::Gen(a)) => gen_cmd::run(self, a),
            Some(Command::Generate(a)) => generate::run(self, a, cli.quiet),
            Some(Command::Passes) => output::write_text(None, &self.passes_table()),
            Some(Command::Devices) => run_cmd::devices(),
            Some(Command::Targets) => {
                let profiles: Result<Vec<_>, _> =
                    fbc_target::builtin_names().iter().map(|n| fbc_target::builtin(n)).collect();
                let profiles = profiles.map_err(|e| Failure::Usage(e.to_string()))?;
                output::write_text(None, &fbc_target::summary_table(&profiles))
            }
            Some(Command::SimplifyIndex(a)) => simplify_cmd::run(a),
            Some(Command::Viz(a)) => viz_cmd::run(self, a),
            Some(Command::Pack(a)) => pack_cmd::run(self, a),
            Some(Command::Import(a)) => import_cmd::run(a),
            Some(Command::Tune(a)) => tuning::tune(self, a, cli.quiet),
            Some(Command::Calibrate(a)) => calibrate::run(self, a, cli.quiet),
            Some(Command::Bench(a)) => {
                fbc_runtime::limits::set_max_memory(a.max_memory.unwrap_or(0));
                bench::device(self, a, cli.quiet)
            }
            Some(Command::BenchParse(a)) => {
                fbc_runtime::limits::set_max_memory(a.max_memory.unwrap_or(0));
                bench::check_ops(a.ops, fbc_runtime::limits::max_memory())
                    .map_err(Failure::Usage)?;
                let report =
                    bench::run(&self.ops, a.ops, a.repeat, a.json).map_err(Failure::Input)?;
                output::write_text(None, &report)
            }
            None => {
                let Some(path) = &cli.file else {
                    return Err(Failure::Usage(
                        "no input file; try `fbc FILE.fbir` or `fbc --help`".into(),
                    ));
                };
                self.compile(path, &cli.compile)
            }
        }
    }

    fn compile(&self, path: &Path, a: &cli::CompileArgs) -> Result<(), Failure> {
        let (file, module) = self.load(path)?;
        match self.compile_module(&file, module, a)? {
            Compiled::Text(text) => output::write_text(a.output.as_deref(), &text),
            Compiled::Opencl(out, module) => {
                let dir = match &a.output {
                    Some(d) => d.clone(),
                    None => opencl_emit::default_dir(&module, path),
                };
                opencl_emit::write(&out, &module, path, &dir)?;
                if a.output.is_none() {
                    eprintln!("fbc: wrote {}", dir.display());
                }
                Ok(())
            }
            #[cfg(feature = "llvm")]
            Compiled::Native(files, module) => {
                let dir = match &a.output {
                    Some(d) => d.clone(),
                    None => aot::default_dir(&module, path),
                };
                opencl_emit::write_dir(&dir, &files, opencl_emit::NATIVE_FILES)?;
                if a.output.is_none() {
                    eprintln!("fbc: wrote {}", dir.display());
                }
                Ok(())
            }
            #[cfg(not(feature = "llvm"))]
            Compiled::Native(..) => Err(cli::no_llvm()),
        }
    }

    /// What `fbc FILE ARGS` makes of a loaded module, without writing it: the text of `--emit
    /// ir|memory|report`, or the OpenCL C and manifest of `--emit opencl` with the lowered
    /// module. The file tests (`fbc_testing`) call this with the arguments of their `// RUN:` line.
    pub fn compile_module(
        &self,
        file: &SourceFile,
        mut module: Module,
        a: &cli::CompileArgs,
    ) -> Result<Compiled, Failure> {
        let session = a.session(self)?;
        let emit = a.emit_kind();
        if a.half_images && !matches!(emit, EmitKind::Opencl | EmitKind::Memory) {
            return Err(Failure::Usage(format!(
                "--half-images sets the storage of lowered code; it needs --emit opencl or memory, \
                 not --emit {}",
                emit.name()
            )));
        }
        if emit.is_native() && !a.is_cpu_llvm() {
            return Err(Failure::Usage(format!(
                "--emit {} is native code for this CPU: it needs --target cpu-llvm",
                emit.name()
            )));
        }
        if a.is_cpu_llvm() && emit == EmitKind::Opencl {
            return Err(Failure::Usage(
                "--emit opencl is for GPU targets, not cpu-llvm (try --emit obj)".into(),
            ));
        }
        if a.cpu.is_some() && !a.is_cpu_llvm() {
            return Err(Failure::Usage("--cpu is for --target cpu-llvm".into()));
        }
        if a.threads.is_some() && !emit.is_native() {
            return Err(Failure::Usage(
                "--threads is for native code (--target cpu-llvm --emit obj|asm|llvm)".into(),
            ));
        }
        #[cfg(not(feature = "llvm"))]
        if emit.is_native() {
            return Err(cli::no_llvm());
        }
        let transforms_total = report::count_transforms(&module);
        let (timings, stats) = session.optimize(file, &mut module)?;
        Ok(match emit {
            EmitKind::Report => {
                let r = report::build(a.target_name(), &module, transforms_total, &stats, &timings);
                if a.verbose {
                    let _ = std::io::stderr().write_all(report::summary(&r).as_bytes());
                }
                Compiled::Text(serde_json::to_string_pretty(&r).unwrap_or_default() + "\n")
            }
            EmitKind::Memory => {
                session.lower(file, &mut module)?;
                Compiled::Text(fbc_ir::print_module(&module))
            }
            EmitKind::Opencl => {
                session.lower(file, &mut module)?;
                let tuned =
                    tuning::load(a.tuning.as_deref(), tuning::For::Profile(&session.profile));
                let out = session.emit_opencl(&module, true, tuned)?;
                Compiled::Opencl(Box::new(out), Box::new(module))
            }
            EmitKind::Ir => Compiled::Text(fbc_ir::print_module(&module)),
            #[cfg(feature = "llvm")]
            EmitKind::Obj | EmitKind::Asm | EmitKind::Llvm => {
                let cpu = a.cpu.as_deref().unwrap_or("host");
                let cpu = fbc_codegen::llvm::Cpu::parse(cpu).ok_or_else(|| {
                    Failure::Usage(format!("--cpu {cpu}: expected `host` or `generic`"))
                })?;
                session.compile(file, &mut module)?;
                let threads = usize::from(a.threads.unwrap_or(1));
                let files = aot::files(file, &module, Path::new(&file.name), emit, cpu, threads)?;
                Compiled::Native(files, Box::new(module))
            }
            #[cfg(not(feature = "llvm"))]
            EmitKind::Obj | EmitKind::Asm | EmitKind::Llvm => return Err(cli::no_llvm()),
        })
    }

    /// Reads and verifies a `.fbir` file (`-` is standard input).
    pub fn load(&self, path: &Path) -> Result<(Arc<SourceFile>, Module), Failure> {
        let name = path.display().to_string();
        let bytes = if name == "-" {
            let mut b = Vec::new();
            std::io::Read::read_to_end(&mut std::io::stdin(), &mut b)
                .map_err(|e| Failure::Input(format!("<stdin>: error: cannot read: {e}\n")))?;
            b
        } else {
            std::fs::read(path)
                .map_err(|e| Failure::Input(format!("{name}: error: cannot read: {e}\n")))?
        };
        let text = match String::from_utf8(bytes) {
            Ok(t) => t,
            Err(e) => {
                let at = e.utf8_error().valid_up_to();
                let lossy = String::from_utf8_lossy(e.as_bytes()).into_owned();
                let file = SourceFile::new(name, lossy);
                let d = Diagnostic::error("the file is not valid UTF-8")
                    .at(fbc_ir::Span::new(at, at + 1))
                    .with_label("invalid byte sequence here");
                return Err(Failure::input(&file, &[d]));
            }
        };
        let file = Arc::new(SourceFile::new(name, text));
        let module =
            fbc_ir::parse_module(&file, &self.ops).map_err(|d| Failure::input(&file, &d))?;
        Ok((file, module))
    }

    /// Runs a pipeline text over a module for hardware profile `target` with the given
    /// instrumentation (`time_passes` prints the timing table to stderr, `print_after*` the IR).
    pub fn run_pipeline(
        &self,
        file: &SourceFile,
        module: &mut Module,
        pipeline: &str,
        target: &fbc_target::HardwareProfile,
        flags: &Instrumentation,
    ) -> Result<(fbc_ir::pass::Timings, fbc_ir::pass::Statistics), Failure> {
        let steps = self.passes.parse_pipeline(pipeline).map_err(|e| {
            Failure::Usage(format!(
                "invalid pipeline `{pipeline}` at offset {}: {}",
                e.offset, e.message
            ))
        })?;
        let mut pm = PassManager::new(steps);
        // Option values are part of the command line: a value a pass refuses (`lr=nan`,
        // `tile-h=0`, an unknown `target=`) is a usage error, found before any pass runs; each
        // pass is created once.
        let passes = pm.instantiate().map_err(|(name, m)| {
            Failure::Usage(format!("invalid pipeline `{pipeline}`: pass `{name}`: {m}"))
        })?;
        pm.instrumentation = flags.clone();
        for name in &flags.print_after {
            if self.passes.get(name).is_none() {
                return Err(Failure::Usage(format!("--print-ir-after: unknown pass `{name}`")));
            }
        }
        let mut cx = PassContext::for_target(&self.ops, target);
        let mut stderr = std::io::stderr();
        let timings = pm
            .run_passes(passes, module, &mut cx, &mut |s| {
                let _ = stderr.write_all(s.as_bytes());
            })
            .map_err(|d| Failure::input(file, &d))?;
        if flags.time_passes {
            let _ = std::io::stderr().write_all(timings.report().as_bytes());
        }
        if flags.pass_statistics {
            let _ = std::io::stderr().write_all(cx.stats.report().as_bytes());
        }
        Ok((timings, cx.stats))
    }

    /// The text of `fbc passes`: every pass with its summary and options.
    pub fn passes_table(&self) -> String {
        let mut s = String::new();
        for p in self.passes.iter() {
            s.push_str(&format!("{:<22} {}\n", p.name, p.summary));
            for o in &p.options {
                let default = o
                    .default
                    .as_deref()
                    .map_or("required".to_string(), |d| format!("default: {d}"));
                s.push_str(&format!("    {}={} ({default})  {}\n", o.name, o.kind, o.help));
            }
        }
        s
    }
}

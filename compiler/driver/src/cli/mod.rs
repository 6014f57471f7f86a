//! The command-line interface (clap): every command's arguments, and the option groups several
//! commands share ([`LowerArgs`], [`DeviceArgs`], [`InstrumentationArgs`]). This module is a
//! leaf: the commands (`gen_cmd`, `run_cmd`, `bench`, `tuning`, `simplify_cmd`) read their
//! arguments from here, and nothing here calls a command. What an argument group means for a
//! compilation is [`crate::Session`]'s business: [`CompileArgs::session`] and
//! [`LowerArgs::session`] build one.

mod bench;
mod calibrate;
mod gen;
mod generate;
mod import;
mod pack;
mod run;
mod tune;
mod viz;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

pub use bench::BenchArgs;
pub use calibrate::CalibrateArgs;
pub use gen::GenArgs;
pub use generate::GenerateArgs;
pub use import::ImportArgs;
pub use pack::PackArgs;
pub use run::RunArgs;
pub use tune::TuneArgs;
pub use viz::VizArgs;

use crate::{Driver, Failure, Session};

const EXAMPLES: &str = "\
Examples:
  fbc examples/matmul_fb.fbir -O3 --target mali        compile, print the optimised IR
  fbc model.fbir --emit ir -o model.opt.fbir           write the IR to a file
  fbc opt model.fbir --passes 'canonicalize,cse,dce'   run a pipeline, print the IR
  fbc opt model.fbir                                   print the canonical form
  fbc simplify-index '(d0 * 64 + d1) mod 64' --range d0=0:512 --range d1=0:64 --json
  fbc import model.onnx -o model.fbir --weights-out model.safetensors --shape x=1x512
  fbc model.fbir -O3 --target mali -o out/             OpenCL C + launch manifest in out/
  fbc bench model.fbir --compare fblayout,reuse,convert   kernel times on an OpenCL device
  fbc tune model.fbir --device 0 --budget 120          tune its contractions for the device
  fbc calibrate --device 0 -o my-gpu.toml              measure the device, write its profile
  fbc generate llama.fbir --weights w.safetensors --prompt 1,2,3 --max-new 32   greedy decoding
  fbc pack w.safetensors -o w.fbw --quant int4 --group 64   tiled, quantised weights
  fbc viz model.fbir -O3 --target mali -o model.html   graph, layouts and placements as a page
  fbc viz model.fbir --tensor q2_rt --svg -o q2.svg    one tensor's placement as SVG
  fbc passes                                           list passes and their options
  fbc targets                                          list hardware profiles";

/// fbc: a layout-aware compiler for transformer training on mobile GPUs.
#[derive(Debug, Parser)]
#[command(
    name = "fbc",
    version,
    about,
    after_help = EXAMPLES,
    subcommand_negates_reqs = true
)]
pub struct Cli {
    /// The `.fbir` file to compile (`-` reads standard input).
    pub file: Option<PathBuf>,

    #[command(flatten)]
    pub compile: CompileArgs,

    /// Load a pass plugin: a shared library built with `fbc_plugin::declare_plugin!`, whose
    /// passes then run like built-in ones (in `--passes`, in `-O` pipelines where the plugin
    /// asks, and in `fbc passes`). Repeatable; the libraries `FBC_PASS_PLUGINS` lists (separated
    /// like PATH) are loaded first.
    #[arg(long = "load-pass-plugin", value_name = "PATH", global = true)]
    pub load_pass_plugin: Vec<PathBuf>,

    /// Draw no progress bars (`fbc bench`, `fbc tune`, `fbc calibrate`). They are drawn on
    /// standard error only, and never under `--json` or when standard error is not a terminal.
    #[arg(short = 'q', long, global = true)]
    pub quiet: bool,

    #[command(subcommand)]
    pub command: Option<Command>,
}

/// Why a command line was refused.
#[derive(Debug)]
pub(crate) enum ParseError {
    Clap(clap::Error),
    Usage(String),
}

/// Parses a command line (`args[0]` is the program name). Options of `fbc FILE` given before a
/// subcommand are refused rather than ignored (`fbc -O3 opt x.fbir`); only the global ones
/// (`--load-pass-plugin`, `-q`) may stand on either side of the subcommand's name.
pub(crate) fn parse<I, T>(args: I) -> Result<Cli, ParseError>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    use clap::{parser::ValueSource, CommandFactory as _, FromArgMatches as _};
    let command = Cli::command();
    let matches = command.clone().try_get_matches_from(args).map_err(ParseError::Clap)?;
    if let Some((name, _)) = matches.subcommand() {
        let misplaced: Vec<String> = command
            .get_arguments()
            .filter(|a| !a.is_global_set())
            .filter(|a| matches.value_source(a.get_id().as_str()) == Some(ValueSource::CommandLine))
            .map(|a| match (a.get_long(), a.get_short()) {
                (Some(l), _) => format!("--{l}"),
                (None, Some(c)) => format!("-{c}"),
                (None, None) => a.get_id().to_string().to_uppercase(),
            })
            .collect();
        if !misplaced.is_empty() {
            return Err(ParseError::Usage(format!(
                "{} belong{} to `fbc FILE`, not to `fbc {name}`",
                misplaced.join(", "),
                if misplaced.len() == 1 { "s" } else { "" }
            )));
        }
    }
    Cli::from_arg_matches(&matches).map_err(ParseError::Clap)
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a pass pipeline and print the resulting IR.
    Opt(OptArgs),
    /// Execute a function on inputs and write its results.
    Run(RunArgs),
    /// Generate a model's `.fbir` (forward, or a whole training step).
    Gen(GenArgs),
    /// Import an ONNX model as a `.fbir` module (its initializers to a safetensors file).
    Import(ImportArgs),
    /// Greedy decoding with an inference module (`fbc gen MODEL --inference`): prefill the
    /// prompt, then decode one token at a time; token ids and timings.
    Generate(GenerateArgs),
    /// List the registered passes with their options.
    Passes,
    /// List the hardware profiles of the targets.
    Targets,
    /// List the OpenCL platforms and devices (`fbc run --target opencl --device N`).
    Devices,
    /// Simplify an integer index expression with the e-graph simplifier.
    SimplifyIndex(SimplifyArgs),
    /// Measure parse, build, verify and print throughput on a generated module.
    BenchParse(BenchParseArgs),
    /// Run a module's kernels on a device and report the time, GFLOP/s and GB/s of each.
    Bench(BenchArgs),
    /// Time contraction parameter sets on a device and store the fastest per shape class.
    Tune(TuneArgs),
    /// Measure a device (read bandwidth by storage and order, texture-cache block, contraction
    /// rate, launch overhead, device limits) and write a hardware profile of it.
    Calibrate(CalibrateArgs),
    /// Pack a safetensors file into a tiled, checksummed `.fbw` weight file (f32, f16, int8,
    /// int4), or validate one (`--inspect`).
    Pack(PackArgs),
    /// Draw the compiled graph with its layouts and each tensor's R-Tile placement (HTML or SVG).
    Viz(VizArgs),
}

#[derive(Debug, Args)]
pub struct BenchParseArgs {
    /// Number of ops in the generated module.
    #[arg(long, default_value = "200000")]
    pub ops: usize,

    /// Runs per stage; the fastest is reported.
    #[arg(long, default_value = "3")]
    pub repeat: usize,

    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,

    /// Most memory the benchmark may use: plain bytes or K/M/G/T (`512M`, `8G`); an `--ops`
    /// whose module would not fit is refused before anything is generated (exit 2). Default:
    /// half of the available memory.
    #[arg(long, value_name = "SIZE", value_parser = parse_max_memory)]
    pub max_memory: Option<u64>,
}

/// `--max-memory SIZE`: plain bytes or a number with K, M, G or T (`512M`, `8G`).
pub(crate) fn parse_max_memory(s: &str) -> Result<u64, String> {
    fbc_runtime::limits::parse_size(s)
}

/// What `fbc FILE` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EmitKind {
    /// The optimised IR in canonical text form.
    Ir,
    /// The module lowered to the memory dialect (storage, launches), in canonical text form:
    /// what the back ends read, and it parses back.
    Memory,
    /// A JSON report of the layout decisions.
    Report,
    /// OpenCL C and a launch manifest.
    Opencl,
    /// With `--target cpu-llvm`: an object file and the C header of its entry points.
    Obj,
    /// With `--target cpu-llvm`: assembly and the C header of its entry points.
    Asm,
    /// With `--target cpu-llvm`: LLVM IR and the C header of its entry points.
    Llvm,
}

impl EmitKind {
    pub fn name(self) -> &'static str {
        match self {
            EmitKind::Ir => "ir",
            EmitKind::Memory => "memory",
            EmitKind::Report => "report",
            EmitKind::Opencl => "opencl",
            EmitKind::Obj => "obj",
            EmitKind::Asm => "asm",
            EmitKind::Llvm => "llvm",
        }
    }

    /// Native code of the LLVM back end (`obj`, `asm`, `llvm`).
    pub fn is_native(self) -> bool {
        matches!(self, EmitKind::Obj | EmitKind::Asm | EmitKind::Llvm)
    }
}

/// `--layout-strategy`: the layout selection of `global-layout` (paper Sec. 4.4 and Sec. 2.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LayoutStrategy {
    /// Global layout selection (Sec. 4.4).
    Fblayout,
    /// Layout reuse (MNN).
    Reuse,
    /// Explicit conversion (TFLite).
    Convert,
}

impl LayoutStrategy {
    /// The name on the command line (`fblayout`, `reuse`, `convert`).
    pub fn cli_name(self) -> &'static str {
        match self {
            LayoutStrategy::Fblayout => "fblayout",
            LayoutStrategy::Reuse => "reuse",
            LayoutStrategy::Convert => "convert",
        }
    }

    pub fn strategy(self) -> fbc_transforms::global_layout::Strategy {
        use fbc_transforms::global_layout::Strategy;
        match self {
            LayoutStrategy::Fblayout => Strategy::FbLayout,
            LayoutStrategy::Reuse => Strategy::Reuse,
            LayoutStrategy::Convert => Strategy::Convert,
        }
    }
}

/// `--target cpu-llvm` of the main command: native code through LLVM.
pub const CPU_LLVM: &str = "cpu-llvm";

#[derive(Debug, Args)]
pub struct CompileArgs {
    /// Optimisation level: 0 is the convert baseline (each tensor in its preferred R-Tile with
    /// explicit layout conversions, no cleanup), 1 canonicalize+dce, 2 adds cse, 3 adds the
    /// FBLayout passes.
    #[arg(short = 'O', value_name = "LEVEL", default_value = "2", value_parser = clap::value_parser!(u8).range(0..=3))]
    pub opt_level: u8,

    /// Hardware profile to compile for: a builtin name (see `fbc targets`; default: generic) or
    /// the path of a profile file (`.toml`, the builtin profiles' format); or `cpu-llvm`, native
    /// code for this CPU's architecture through LLVM (the `cpu` profile, arguments and results
    /// as row-major arrays; fbc built with the `llvm` feature).
    #[arg(long)]
    pub target: Option<String>,

    /// What to write (default: opencl when --target names a GPU target — mali, adreno, nvidia,
    /// generic —, obj for cpu-llvm, else ir).
    #[arg(long, value_enum)]
    pub emit: Option<EmitKind>,

    /// With `--target cpu-llvm`: the CPU the code is compiled for, `host` (this machine's CPU
    /// and its features; the default) or `generic` (the architecture's baseline, for any CPU of
    /// it).
    #[arg(long, value_name = "host|generic")]
    pub cpu: Option<String>,

    /// With `--target cpu-llvm --emit obj|asm|llvm`: the most threads one launch runs on (POSIX
    /// threads the entry points start, where the split is proven race-free; default 1).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub threads: Option<u16>,

    /// How layouts are chosen at -O3: fblayout (Sec. 4.4), reuse (MNN: one layout per tensor,
    /// no conversions, no index elimination) or convert (TFLite: explicit conversions).
    #[arg(long, value_enum, default_value = "fblayout")]
    pub layout_strategy: LayoutStrategy,

    /// Leave the named pass out of the `-O` pipeline (repeatable): `--disable-pass
    /// fuse-attention` keeps attention as separate ops.
    #[arg(long, value_name = "PASS")]
    pub disable_pass: Vec<String>,

    /// Output file (default: standard output), or directory for `--emit opencl` (default:
    /// `NAME.opencl`) and `--emit obj|asm|llvm` (default: `NAME.cpu`).
    #[arg(short, long, value_name = "PATH")]
    pub output: Option<PathBuf>,

    /// With `--emit report`, also print a readable summary to standard error.
    #[arg(short, long)]
    pub verbose: bool,

    /// Store every image2d texture as f16 (`CL_HALF_FLOAT`; values rounded to f16 at every
    /// store, arithmetic in f32): half the texture memory. With `--emit opencl` or `memory`.
    #[arg(long)]
    pub half_images: bool,

    /// Tuned contraction parameters (`fbc tune`): with `--emit opencl`, the entries of the
    /// first device of the database whose name contains one of the target profile's devices
    /// (default: the database in the cache directory).
    #[arg(long, value_name = "FILE")]
    pub tuning: Option<PathBuf>,

    /// When contractions split their reduction into parallel chunks (lower-to-memory's
    /// `split-k`): auto (where the output cannot fill the device), off, or a chunk count N.
    /// With `--emit opencl`.
    #[arg(long, value_name = "auto|off|N", default_value = "auto", value_parser = parse_split_k)]
    pub split_k: fbc_transforms::lower::SplitK,

    #[command(flatten)]
    pub instr: InstrumentationArgs,
}

/// `--split-k auto|off|N`.
pub fn parse_split_k(s: &str) -> Result<fbc_transforms::lower::SplitK, String> {
    fbc_transforms::lower::SplitK::parse(s)
}

impl CompileArgs {
    pub fn level(&self) -> u8 {
        self.opt_level
    }

    /// The compile session of these arguments: the profile `--target` names (resolved here,
    /// once), `-O`, `--layout-strategy`, the lowering options and the instrumentation flags.
    pub fn session<'d>(&self, driver: &'d Driver) -> Result<Session<'d>, Failure> {
        let mut s = Session::for_target(driver, self.target_name())?;
        s.level = self.level();
        s.strategy = self.layout_strategy.strategy();
        s.disabled = s.checked_passes(&self.disable_pass)?;
        s.lowering = fbc_transforms::LoweringOptions {
            half_images: self.half_images,
            split_k: self.split_k,
            linear_io: self.is_cpu_llvm(),
        };
        s.instrumentation = self.instr.instrumentation();
        Ok(s)
    }

    /// Whether `--target cpu-llvm` asks for native code.
    pub fn is_cpu_llvm(&self) -> bool {
        self.target.as_deref() == Some(CPU_LLVM)
    }

    /// The hardware profile's name: `--target` (`cpu` for `cpu-llvm`), else `generic`.
    pub fn target_name(&self) -> &str {
        match self.target.as_deref() {
            Some(CPU_LLVM) => "cpu",
            t => t.unwrap_or("generic"),
        }
    }

    /// What to write: `--emit`, else OpenCL for an explicit GPU `--target`, an object file for
    /// `cpu-llvm`, else IR.
    pub fn emit_kind(&self) -> EmitKind {
        match (self.emit, self.target.as_deref()) {
            (Some(e), _) => e,
            (None, Some(CPU_LLVM)) => EmitKind::Obj,
            (None, Some("mali" | "adreno" | "nvidia" | "generic")) => EmitKind::Opencl,
            (None, Some(t)) if fbc_target::is_path(t) => EmitKind::Opencl,
            _ => EmitKind::Ir,
        }
    }
}

#[derive(Debug, Args, Clone, Default)]
pub struct InstrumentationArgs {
    /// Print the IR after every pass (to standard error).
    #[arg(long)]
    pub print_ir_after_all: bool,

    /// Print the IR after the named pass (repeatable).
    #[arg(long, value_name = "PASS")]
    pub print_ir_after: Vec<String>,

    /// Print how long each pass took.
    #[arg(long)]
    pub time_passes: bool,

    /// Print each pass's statistics after its pipeline (to standard error): counters such as
    /// plan-memory's `peak-bytes` and `live-peak-bytes`, and figures per function where a pass
    /// records them.
    #[arg(long)]
    pub pass_statistics: bool,

    /// Verify the IR after every pass (always on in debug builds).
    #[arg(long)]
    pub verify_each: bool,
}

impl InstrumentationArgs {
    /// What the pass manager does between passes: these flags, and verification after every
    /// pass in debug builds.
    pub fn instrumentation(&self) -> fbc_ir::pass::Instrumentation {
        fbc_ir::pass::Instrumentation {
            verify_each: self.verify_each || cfg!(debug_assertions),
            print_after_all: self.print_ir_after_all,
            print_after: self.print_ir_after.clone(),
            time_passes: self.time_passes,
            pass_statistics: self.pass_statistics,
        }
    }
}

#[derive(Debug, Args)]
pub struct OptArgs {
    /// The `.fbir` file (`-` reads standard input).
    pub file: PathBuf,

    /// The pipeline, in MLIR syntax: `canonicalize,cse,autodiff{func=loss wrt=a,b}`. Without it,
    /// the file is printed in canonical form.
    #[arg(long)]
    pub passes: Option<String>,

    /// Output file (default: standard output).
    #[arg(short, long, value_name = "PATH")]
    pub output: Option<PathBuf>,

    #[command(flatten)]
    pub instr: InstrumentationArgs,
}

#[derive(Debug, Args)]
pub struct SimplifyArgs {
    /// The expression, in MLIR affine syntax plus `<<`, `>>`, `&`.
    pub expr: String,

    /// A variable's range, half open: `d0=0:512` means 0 <= d0 < 512 (repeatable).
    #[arg(long = "range", value_name = "VAR=LO:HI")]
    pub ranges: Vec<String>,

    /// Print one JSON object instead of the expression.
    #[arg(long)]
    pub json: bool,
}

/// How `fbc run --target opencl|cpu-jit`, `fbc bench` and `fbc tune` compile a module before they
/// run it: the options of their compile session.
#[derive(Debug, Clone, Args)]
pub struct LowerArgs {
    /// Optimisation level the module is compiled at before it runs (default: 3).
    #[arg(short = 'O', value_name = "LEVEL", value_parser = clap::value_parser!(u8).range(0..=3))]
    pub opt_level: Option<u8>,

    /// Layout strategy of -O3 (default: fblayout).
    #[arg(long, value_enum)]
    pub layout_strategy: Option<LayoutStrategy>,

    /// Hardware profile the module is lowered for: a builtin name (see `fbc targets`) or a
    /// profile file (`.toml`).
    #[arg(long, default_value = "generic")]
    pub profile: String,

    /// Store every image2d texture as f16 (values rounded to the nearest f16 at every store,
    /// arithmetic in f32). `fbc run --check` then compares with the reference executor on the
    /// lowered module, which rounds the same way, within 1e-5 + 8·2^-11·(|ref| + max|ref|), and
    /// reports the error against the f64 interpreter.
    #[arg(long)]
    pub half_images: bool,

    /// Leave the named pass out of the `-O` pipeline (repeatable): `--disable-pass
    /// fuse-attention` keeps attention as separate ops.
    #[arg(long, value_name = "PASS")]
    pub disable_pass: Vec<String>,

    /// With `--target cpu-llvm`: the CPU the kernels are compiled for, `host` (this machine's
    /// CPU and its features) or `generic` (the architecture's baseline).
    #[arg(long, value_name = "host|generic")]
    pub cpu: Option<String>,
}

impl LowerArgs {
    /// The compile session: `--profile` resolved (once), `-O3` and fblayout unless given,
    /// `--half-images` and `split_k` as the lowering options.
    pub fn session<'d>(
        &self,
        driver: &'d Driver,
        split_k: fbc_transforms::lower::SplitK,
    ) -> Result<Session<'d>, Failure> {
        let mut s = Session::for_target(driver, &self.profile)?;
        s.level = self.opt_level.unwrap_or(3);
        s.strategy = self.layout_strategy.unwrap_or(LayoutStrategy::Fblayout).strategy();
        s.disabled = s.checked_passes(&self.disable_pass)?;
        s.lowering = fbc_transforms::LoweringOptions {
            half_images: self.half_images,
            split_k,
            ..Default::default()
        };
        Ok(s)
    }

    /// The back end that compiles the kernels of `--target cpu-jit` (Cranelift) or `cpu-llvm`
    /// (LLVM for `--cpu`); `--cpu` with another target, an unknown CPU, and `cpu-llvm` in an fbc
    /// built without the `llvm` feature are usage errors.
    pub(crate) fn cpu_backend(
        &self,
        target: &str,
    ) -> Result<fbc_runtime::device::cpu_jit::Backend, Failure> {
        use fbc_runtime::device::cpu_jit::Backend;
        match (target, self.cpu.as_deref()) {
            ("cpu-jit", None) => Ok(Backend::Cranelift),
            #[cfg(feature = "llvm")]
            ("cpu-llvm", cpu) => {
                let cpu = cpu.unwrap_or("host");
                fbc_codegen::llvm::Cpu::parse(cpu).map(Backend::Llvm).ok_or_else(|| {
                    Failure::Usage(format!("--cpu {cpu}: expected `host` or `generic`"))
                })
            }
            #[cfg(not(feature = "llvm"))]
            ("cpu-llvm", _) => Err(no_llvm()),
            (_, Some(_)) => Err(Failure::Usage("--cpu is for --target cpu-llvm".into())),
            (other, None) => {
                Err(Failure::Usage(format!("internal: {other} is not a CPU JIT target")))
            }
        }
    }
}

/// The error of `--target cpu-llvm` in an fbc built without the `llvm` feature.
#[cfg(not(feature = "llvm"))]
pub(crate) fn no_llvm() -> Failure {
    Failure::Usage(
        "not yet supported: --target cpu-llvm needs fbc built with the `llvm` feature \
         (cargo build --features llvm, with LLVM 19 installed)"
            .into(),
    )
}

/// The OpenCL device a command runs on, and the tuned parameters it uses there.
#[derive(Debug, Clone, Args)]
pub struct DeviceArgs {
    /// OpenCL device: its number in `fbc devices`, or part of its name.
    #[arg(long, value_name = "N|NAME", default_value = "0")]
    pub device: String,

    /// Tuned contraction parameters (`fbc tune`) to use for the device (default: the database
    /// in the cache directory, where it has entries for the device).
    #[arg(long, value_name = "FILE")]
    pub tuning: Option<PathBuf>,

    /// How storage objects are kept on the device: `pooled` reuses freed objects (fastest; the
    /// device may hold more than is live at once), `live-peak` releases them so that the device
    /// never holds more than the function's live peak (objects are made again: slower),
    /// `planned` makes one object per plan-memory slot and keeps it (the device holds the plan's
    /// peak, `planned_bytes`; no object is made after the first run).
    #[arg(long, value_enum, default_value = "pooled")]
    pub device_memory: DeviceMemoryArg,

    /// The most device memory the run may hold at once (bytes, or `512MiB`, `1.5GB`): the module
    /// is lowered with `plan-weight-streaming` for it, which streams weights in during earlier
    /// launches, and the runtime makes those uploads then, on a second queue, and never holds
    /// more (pooled objects are released first; a run that would hold more fails).
    #[arg(long, value_name = "BYTES", value_parser = parse_budget)]
    pub memory_budget: Option<u64>,

    /// With `--memory-budget`: stream the arguments updated in place and returned (KV caches)
    /// too, each loaded before its first launch and written back to the host and released after
    /// its last (`plan-weight-streaming{kv-tiling=true}`), so that the caches of the layers not
    /// running need no device memory.
    #[arg(long, requires = "memory_budget")]
    pub kv_tiling: bool,
}

/// `--memory-budget`'s value.
fn parse_budget(text: &str) -> Result<u64, String> {
    fbc_transforms::weight_streaming::parse_bytes(text)
        .map_err(|e| e.replace("plan-weight-streaming: `budget`", "the budget"))
}

/// `--device-memory` (see [`DeviceArgs::device_memory`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DeviceMemoryArg {
    Pooled,
    LivePeak,
    Planned,
}

impl DeviceMemoryArg {
    #[cfg(feature = "opencl")]
    pub fn runtime(self) -> fbc_runtime::device::opencl::DeviceMemory {
        use fbc_runtime::device::opencl::DeviceMemory;
        match self {
            DeviceMemoryArg::Pooled => DeviceMemory::Pooled,
            DeviceMemoryArg::LivePeak => DeviceMemory::LivePeak,
            DeviceMemoryArg::Planned => DeviceMemory::Planned,
        }
    }
}

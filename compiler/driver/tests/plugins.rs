//! Pass plugins loaded into the stock `fbc` (`--load-pass-plugin`, `FBC_PASS_PLUGINS`): the
//! custom-pass example built as a `cdylib` runs through `--passes` and `-O3` and is listed by
//! `fbc passes`; the hostile corpus (missing file, a file that is not a library, a library
//! without a descriptor, a descriptor of another plugin API or fbc version, a name collision,
//! a pass that panics, fails, or returns IR that does not verify) is each a clear error with
//! exit status 1 and no output file.
//!
//! Both libraries are dev-dependencies of this crate, so cargo builds them before these tests;
//! they sit in the `deps` directory next to the test executable.

mod common;

use std::path::{Path, PathBuf};

use common::{fbc, fbc_env, scratch, write};

/// The shared library of dependency crate `name` (underscored), built by cargo for this test.
fn library(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    let deps = exe.parent().expect("deps directory");
    let file = format!("{}{name}{}", std::env::consts::DLL_PREFIX, std::env::consts::DLL_SUFFIX);
    let path = deps.join(&file);
    assert!(path.exists(), "{} was not built (it is a dev-dependency of fbc)", path.display());
    path
}

fn example() -> PathBuf {
    library("fbc_example_custom_pass")
}

fn hostile() -> PathBuf {
    library("fbc_test_plugin")
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap_or_default()
}

const SCALES: &str = "\
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = tensor.scale %x {factor = 2.0} : (tensor<4xf32>) -> tensor<4xf32>
  %1 = tensor.scale %0 {factor = 0.5} : (tensor<4xf32>) -> tensor<4xf32>
  %2 = tensor.scale %1 {factor = 3.0} : (tensor<4xf32>) -> tensor<4xf32>
  func.return %2 : tensor<4xf32>
}
";

const FOLDED: &str = "\
module {
  func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
    %2 = tensor.scale %x {factor = 3.0} : (tensor<4xf32>) -> tensor<4xf32>
    func.return %2 : tensor<4xf32>
  }
}
";

#[test]
fn the_example_plugin_runs_through_the_pipeline_syntax() {
    let dir = scratch("plugin-opt");
    let input = write(&dir, "s.fbir", SCALES.as_bytes());
    let so = example();
    let o = fbc(&["opt", &input, "--passes", "fold-scales,dce", "--load-pass-plugin", s(&so)]);
    assert_eq!((o.code, o.stderr.as_str()), (0, ""));
    assert_eq!(o.stdout, FOLDED);
    // The flag is global: before the subcommand too. And the environment variable.
    let o = fbc(&["--load-pass-plugin", s(&so), "opt", &input, "--passes", "fold-scales,dce"]);
    assert_eq!((o.code, o.stdout.as_str()), (0, FOLDED), "{}", o.stderr);
    let o = fbc_env(&["opt", &input, "--passes", "fold-scales,dce"], &[("FBC_PASS_PLUGINS", &so)]);
    assert_eq!((o.code, o.stdout.as_str()), (0, FOLDED), "{}", o.stderr);
    // Without the plugin the pass does not exist.
    let o = fbc(&["opt", &input, "--passes", "fold-scales"]);
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("unknown pass `fold-scales`"), "{}", o.stderr);
}

#[test]
fn the_example_plugin_is_listed_with_its_options() {
    let o = fbc(&["passes", "--load-pass-plugin", s(&example())]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stdout.contains(
            "fold-scales            fold chains of tensor.scale into one (example of an \
             out-of-tree pass)\n    keep-unit=bool (default: false)  keep scales by exactly 1.0\n"
        ),
        "{}",
        o.stdout
    );
    assert!(o.stdout.contains("\ncanonicalize "), "{}", o.stdout);
}

#[test]
fn the_example_plugin_joins_the_o3_pipeline_with_its_instrumentation() {
    let dir = scratch("plugin-o3");
    let input = write(&dir, "s.fbir", SCALES.as_bytes());
    let out = dir.join("out.fbir");
    let o = fbc(&[
        &input,
        "-O3",
        "--emit",
        "ir",
        "--time-passes",
        "--print-ir-after",
        "fold-scales",
        "-o",
        s(&out),
        "--load-pass-plugin",
        s(&example()),
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    // It runs first (its extension point is the pipeline's start), and `dce` removes what it
    // bypassed; the layout passes classify the one scale that is left.
    let text = std::fs::read_to_string(&out).expect("output");
    assert!(text.contains("%2 = tensor.scale %x {factor = 3.0, fbc.class = \"FTI-C\"}"), "{text}");
    assert_eq!(text.matches("tensor.scale").count(), 1, "{text}");
    assert!(
        o.stderr.starts_with("// -----// IR Dump After fold-scales //----- //\n"),
        "{}",
        o.stderr
    );
    let table: Vec<&str> = o
        .stderr
        .lines()
        .skip_while(|l| !l.contains("--- Name ---"))
        .skip(1)
        .map(|l| l.rsplit("  ").next().unwrap_or_default())
        .collect();
    assert_eq!(table.first(), Some(&"fold-scales"), "{}", o.stderr);
    assert_eq!(table.get(1), Some(&"canonicalize"), "{}", o.stderr);
}

#[test]
fn a_plugin_option_value_is_checked_before_anything_runs() {
    let dir = scratch("plugin-option");
    let input = write(&dir, "s.fbir", SCALES.as_bytes());
    let o = fbc(&[
        "opt",
        &input,
        "--passes",
        "fold-scales{keep-unit=maybe}",
        "--load-pass-plugin",
        s(&example()),
    ]);
    assert_eq!(o.code, 2);
    assert_eq!(
        o.stderr,
        "fbc: error: invalid pipeline `fold-scales{keep-unit=maybe}` at offset 12: option \
         `keep-unit` of `fold-scales`: expected true or false, found `maybe`\n"
    );
}

/// Compiles `SCALES` at -O3 with the given plugins into `out.fbir`: the exit status, stderr,
/// and whether an output file exists.
fn compile_with(name: &str, plugins: &[&Path], env: &[(&str, &Path)]) -> (i32, String, bool) {
    let dir = scratch(name);
    let input = write(&dir, "s.fbir", SCALES.as_bytes());
    let out = dir.join("out.fbir");
    let mut args = vec![input.as_str(), "-O3", "--emit", "ir", "-o", s(&out)];
    for p in plugins {
        args.extend(["--load-pass-plugin", s(p)]);
    }
    let o = fbc_env(&args, env);
    assert!(o.stdout.is_empty(), "{}", o.stdout);
    (o.code, o.stderr, out.exists())
}

#[test]
fn a_missing_file_is_an_error_at_its_path() {
    let missing = scratch("plugin-missing").join("libnone.so");
    let (code, stderr, written) = compile_with("plugin-missing", &[&missing], &[]);
    assert_eq!((code, written), (1, false));
    assert_eq!(
        stderr,
        format!(
            "{}: error: cannot load pass plugin: cannot read the file: No such file or directory \
             (os error 2)\n",
            missing.display()
        )
    );
}

#[test]
fn a_file_that_is_not_a_library_is_refused_before_loading() {
    let dir = scratch("plugin-text");
    let fake = PathBuf::from(write(&dir, "libfake.so", b"this is not a shared library\n"));
    let (code, stderr, written) = compile_with("plugin-text", &[&fake], &[]);
    assert_eq!((code, written), (1, false));
    assert!(
        stderr.starts_with(&format!(
            "{}: error: cannot load pass plugin: not a shared library (",
            fake.display()
        )),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

/// The C library this test runs with: a real shared library with no fbc descriptor.
fn libc_path() -> Option<PathBuf> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| p.contains("/libc.so") || p.contains("/libc-"))
        .map(PathBuf::from)
}

#[test]
#[cfg(target_os = "linux")]
fn a_library_without_a_descriptor_is_not_loaded() {
    let libc = libc_path().expect("the test runs with a shared libc");
    let (code, stderr, written) = compile_with("plugin-libc", &[&libc], &[]);
    assert_eq!((code, written), (1, false));
    assert_eq!(
        stderr,
        format!(
            "{}: error: cannot load pass plugin: the library has no fbc plugin descriptor (no \
             `FBC_PLUGIN_HEADER` symbol): it is not an fbc pass plugin (a plugin declares one \
             with `fbc_plugin::declare_plugin!`)\n",
            libc.display()
        )
    );
}

/// A copy of the hostile plugin whose descriptor `patch` rewrites (given the bytes from the
/// magic on), standing for a plugin built against another fbc.
fn patched(name: &str, patch: impl Fn(&mut [u8])) -> PathBuf {
    let mut bytes = std::fs::read(hostile()).expect("plugin");
    let magic = fbc_plugin::abi::MAGIC;
    let starts: Vec<usize> = bytes
        .windows(12)
        .enumerate()
        .filter(|(_, w)| w[..8] == magic && w[8..12] == fbc_plugin::abi::API_VERSION.to_le_bytes())
        .map(|(i, _)| i)
        .collect();
    assert!(!starts.is_empty(), "the descriptor is in the file");
    for i in starts {
        patch(&mut bytes[i..i + fbc_plugin::abi::PREFIX_LEN]);
    }
    let path = scratch(name).join("libpatched.so");
    std::fs::write(&path, bytes).expect("write");
    path
}

#[test]
fn a_plugin_of_another_api_version_is_refused_naming_both() {
    let so = patched("plugin-api", |d| d[8..12].copy_from_slice(&7u32.to_le_bytes()));
    let (code, stderr, written) = compile_with("plugin-api", &[&so], &[]);
    assert_eq!((code, written), (1, false));
    let host = fbc_plugin::host::host_versions();
    assert_eq!(
        stderr,
        format!(
            "{}: error: cannot load pass plugin: it was built for fbc plugin API version 7 (fbc \
             {v}, {r}); this fbc {v} speaks plugin API version 1 ({r}): rebuild the plugin \
             against fbc {v}\n",
            so.display(),
            v = host.fbc,
            r = host.rustc
        )
    );
}

#[test]
fn a_plugin_built_against_another_fbc_is_refused_naming_both() {
    let so = patched("plugin-fbc", |d| {
        d[12..44].fill(0);
        d[12..17].copy_from_slice(b"9.4.1");
    });
    let (code, stderr, written) = compile_with("plugin-fbc", &[&so], &[]);
    assert_eq!((code, written), (1, false));
    let host = fbc_plugin::host::host_versions();
    assert_eq!(
        stderr,
        format!(
            "{}: error: cannot load pass plugin: it was built against fbc 9.4.1 ({r}); this is \
             fbc {v} ({r}): the IR text the two exchange is only guaranteed the same within one \
             fbc version; rebuild the plugin against fbc {v}\n",
            so.display(),
            v = host.fbc,
            r = host.rustc
        )
    );
}

#[test]
fn every_plugin_that_cannot_load_is_reported() {
    let dir = scratch("plugin-all");
    let missing = dir.join("libnone.so");
    let fake = PathBuf::from(write(&dir, "libfake.so", b"text"));
    let (code, stderr, _) = compile_with("plugin-all", &[&missing, &example(), &fake], &[]);
    assert_eq!(code, 1);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 2, "{stderr}");
    assert!(lines[0].starts_with(&format!("{}: error:", missing.display())), "{stderr}");
    assert!(lines[1].starts_with(&format!("{}: error:", fake.display())), "{stderr}");
}

#[test]
fn a_plugin_pass_named_like_a_builtin_one_is_refused() {
    let so = hostile();
    let (code, stderr, written) =
        compile_with("plugin-collide", &[&so], &[("FBC_TEST_PLUGIN_COLLIDE", Path::new("1"))]);
    assert_eq!((code, written), (1, false));
    assert_eq!(
        stderr,
        format!(
            "{}: error: cannot load pass plugin: it registers a pass named `canonicalize`, which \
             fbc already has; a plugin cannot replace a registered pass: rename the plugin's \
             pass\n",
            so.display()
        )
    );
    // Two plugins registering one name: the second is refused.
    let (code, stderr, _) = compile_with("plugin-twice", &[&example(), &example()], &[]);
    assert_eq!(code, 1);
    assert!(stderr.contains("it registers a pass named `fold-scales`, which fbc already has"));
}

/// Runs `pipeline` from the hostile plugin over `SCALES` with `-o`: exit status, stderr, and
/// whether the output file exists.
fn opt_hostile(name: &str, pipeline: &str) -> (i32, String, bool, String) {
    let dir = scratch(name);
    let input = write(&dir, "s.fbir", SCALES.as_bytes());
    let out = dir.join("out.fbir");
    let so = hostile();
    let o =
        fbc(&["opt", &input, "--passes", pipeline, "-o", s(&out), "--load-pass-plugin", s(&so)]);
    (o.code, o.stderr, out.exists(), input)
}

#[test]
fn a_panic_in_a_plugin_pass_is_caught_and_named() {
    let (code, stderr, written, input) = opt_hostile("plugin-panic", "canonicalize,explode");
    assert_eq!((code, written), (1, false));
    // The place is the panic's in the plugin's source (its line is the plugin's business).
    let place = stderr
        .split("= note: the panic is at ")
        .nth(1)
        .and_then(|rest| rest.split(", in the plugin\n").next())
        .unwrap_or_default();
    assert!(place.starts_with("tests/plugins/src/lib.rs:"), "{stderr}");
    assert_eq!(
        stderr,
        format!(
            "{input}: error: pass `explode` (plugin {}): panicked: the plugin's pass exploded\n  \
             = note: the panic is at {place}, in the plugin\n  = note: this is a bug in the \
             plugin, not in fbc or the input\n",
            hostile().display()
        )
    );
}

#[test]
fn a_plugin_diagnostic_points_into_the_users_file() {
    // After `canonicalize` the module has crossed the boundary once already (canonicalize is
    // built in; `reject` gets it as text): the span must still be the op's place in s.fbir.
    let (code, stderr, written, input) = opt_hostile("plugin-reject", "canonicalize,reject");
    assert_eq!((code, written), (1, false));
    assert_eq!(
        stderr,
        format!(
            "{input}:2:3: error: `reject` refuses `tensor.scale`\n  |\n2 |   %0 = tensor.scale %x \
             {{factor = 2.0}} : (tensor<4xf32>) -> tensor<4xf32>\n  |   \
             ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^ this op\n"
        )
    );
}

#[test]
fn spans_survive_a_plugin_pass() {
    // `fold-scales` runs in the plugin; the verifier's error after `break-types` must point
    // at lines of the user's file, which only holds if the first crossing kept the spans.
    let dir = scratch("plugin-spans");
    let input = write(&dir, "s.fbir", SCALES.as_bytes());
    let (ex, ho) = (example(), hostile());
    let o = fbc(&[
        "opt",
        &input,
        "--passes",
        "fold-scales{keep-unit=true},break-types",
        "--load-pass-plugin",
        s(&ex),
        "--load-pass-plugin",
        s(&ho),
    ]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert_eq!(
        o.stderr,
        format!(
            "{input}: error: pass `break-types` (plugin {}): returned a module that does not \
             verify; this is a bug in the plugin\n{input}:2:3: error: expected tensor<4xf32>, \
             found tensor<7xf32>\n  |\n2 |   %0 = tensor.scale %x {{factor = 2.0}} : \
             (tensor<4xf32>) -> tensor<4xf32>\n  |   ^^ result 0 of tensor.scale\n  = note: the \
             operands and attributes of `tensor.scale` give result 0 the type tensor<4xf32>\n",
            ho.display()
        )
    );
}

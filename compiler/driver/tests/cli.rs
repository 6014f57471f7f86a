//! The `fbc` command as a user meets it: exit statuses, located errors, no partial outputs, and
//! no panic on any input.

mod common;

use common::{fbc, scratch, write};

use std::path::Path;

const GOOD: &str = "\
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = tensor.neg %x : (tensor<4xf32>) -> tensor<4xf32>
  %1 = tensor.neg %0 : (tensor<4xf32>) -> tensor<4xf32>
  func.return %1 : tensor<4xf32>
}
";

const BAD: &str = "\
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = tensor.neg %y : (tensor<4xf32>) -> tensor<4xf32>
  %1 = tensor.frob %0 : (tensor<4xf32>) -> tensor<4xf32>
  func.return %1 : tensor<4xf32>
}
";

#[test]
fn compiles_and_writes_the_output_file() {
    let dir = scratch("good");
    let input = write(&dir, "good.fbir", GOOD.as_bytes());
    let out_path = dir.join("out.fbir");
    let o =
        fbc(&[&input, "-O2", "--target", "mali", "--emit", "ir", "-o", out_path.to_str().unwrap()]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let text = std::fs::read_to_string(&out_path).unwrap();
    assert!(text.contains("tensor.neg %0"), "{text}");
}

#[test]
fn bad_input_gets_every_error_located_and_no_output_file() {
    let dir = scratch("bad");
    let input = write(&dir, "bad.fbir", BAD.as_bytes());
    let out_path = dir.join("out.fbir");
    let o = fbc(&[&input, "-o", out_path.to_str().unwrap()]);
    assert_eq!(o.code, 1);
    assert!(!out_path.exists(), "a failed compile must not leave an output file");
    let first: Vec<&str> = o.stderr.lines().filter(|l| l.contains(": error: ")).collect();
    assert_eq!(
        first,
        vec![
            format!("{input}:2:19: error: use of undefined value %y"),
            format!("{input}:3:8: error: unknown op `tensor.frob`"),
        ]
    );
    assert!(o.stderr.contains("2 |   %0 = tensor.neg %y"), "{}", o.stderr);
    // No stray temporary files either.
    let leftovers: Vec<_> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(leftovers.len(), 1, "{leftovers:?}");
}

#[test]
fn hostile_inputs_are_errors_not_panics() {
    let dir = scratch("hostile");
    let mut huge_line = b"func.func @f() { func.return } // ".to_vec();
    huge_line.extend(std::iter::repeat_n(b'x', 5 << 20));
    huge_line.extend(b"\n%");
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty", Vec::new()),
        ("binary", (0..=255u8).cycle().take(4096).collect()),
        ("utf8", b"func.func @f() {\n  \xff\xfe\n}".to_vec()),
        ("nul", b"func.func @f() {\0}".to_vec()),
        ("braces", "{".repeat(200_000).into_bytes()),
        ("brackets", format!("func.func @f() {{ %0 = tensor.neg {{a = {}", "[".repeat(200_000)).into_bytes()),
        ("long-line", huge_line),
        ("dims", b"func.func @f(%x: tensor<100000000000000000000000x100000000000000000000000xf32>) { func.return }".to_vec()),
    ];
    for (name, bytes) in cases {
        let input = write(&dir, &format!("{name}.fbir"), &bytes);
        let o = fbc(&[&input]);
        if name == "empty" {
            // An empty file is an empty module.
            assert_eq!(o.code, 0, "{name}: {}", o.stderr);
            assert_eq!(o.stdout, "module {\n}\n");
            continue;
        }
        assert_eq!(
            o.code,
            1,
            "{name}: exit {} stderr {}",
            o.code,
            &o.stderr[..o.stderr.len().min(2000)]
        );
        let first = o.stderr.lines().next().unwrap_or_default();
        assert!(
            first.starts_with(&format!("{input}:")) && first.contains(": error: "),
            "{name}: {first}"
        );
    }
}

#[test]
fn usage_errors_exit_2() {
    let dir = scratch("usage");
    let input = write(&dir, "good.fbir", GOOD.as_bytes());
    // `--emit opencl` writes a directory (`-o DIR`, default `NAME.opencl`) and never replaces
    // anything but a previous one (tests/opencl.rs covers the rest).
    let o = fbc(&[&input, "--emit", "opencl", "-o", &input]);
    assert_eq!(o.code, 2);
    assert_eq!(
        o.stderr,
        format!("fbc: error: {input} exists and is not an fbc OpenCL output directory; not overwriting it\n")
    );
    let o = fbc(&["opt", &input, "--passes", "canonicalize,frobnicate"]);
    assert_eq!(o.code, 2);
    let listed = fbc(&["passes"]).stdout;
    let names: Vec<&str> = listed
        .lines()
        .filter(|l| !l.starts_with(' '))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(names.contains(&"canonicalize") && names.contains(&"index-elim"), "{listed}");
    assert!(
        o.stderr
            .contains(&format!("unknown pass `frobnicate`; known passes: {}", names.join(", "))),
        "{}",
        o.stderr
    );
    let o = fbc(&["opt", &input, "--passes", "fuse-attention{max-queries=-3}"]);
    assert_eq!(o.code, 2);
    assert_eq!(
        o.stderr,
        "fbc: error: invalid pipeline `fuse-attention{max-queries=-3}`: pass `fuse-attention`: max-queries must not be negative, got -3\n"
    );
    let o = fbc(&["opt", &input, "--passes", "cse{x=1}"]);
    assert_eq!(o.code, 2);
    assert!(
        o.stderr.contains("unknown option `x` for pass `cse`; its options: none"),
        "{}",
        o.stderr
    );
    let o = fbc(&[&input, "--target", "tpu"]);
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("unknown target"), "{}", o.stderr);
    let o = fbc(&[&input, "-O7"]);
    assert_eq!(o.code, 2);
    let o = fbc(&[]);
    assert_eq!(o.code, 2);
}

#[test]
fn instrumentation_flags() {
    let dir = scratch("instr");
    let input = write(&dir, "good.fbir", GOOD.as_bytes());
    let o = fbc(&[
        "opt",
        &input,
        "--passes",
        "canonicalize,dce",
        "--print-ir-after=dce",
        "--time-passes",
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stderr.contains("// -----// IR Dump After dce //----- //\nmodule {"), "{}", o.stderr);
    assert!(!o.stderr.contains("IR Dump After canonicalize"), "{}", o.stderr);
    assert!(o.stderr.contains("Pass execution timing report"), "{}", o.stderr);
    let o = fbc(&["opt", &input, "--passes", "cse,dce", "--print-ir-after-all"]);
    assert_eq!(o.stderr.matches("IR Dump After").count(), 2, "{}", o.stderr);
}

/// `--pass-statistics` prints the counters of the pipelines' passes, plan-memory's with its
/// figures per function (examples/matmul_fb.fbir at -O3 for mali: five slots, 109 MB, against
/// 105 MB live at once: the image of `%a` dies after the first product, but the second
/// product's buffer of the same bytes cannot take it).
#[test]
fn pass_statistics_show_plan_memorys_figures() {
    let dir = scratch("stats");
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/matmul_fb.fbir");
    let out = dir.join("mm.fbir");
    let o = fbc(&[
        example,
        "-O3",
        "--target",
        "mali",
        "--emit",
        "memory",
        "-o",
        out.to_str().unwrap_or_default(),
        "--pass-statistics",
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stderr.contains("Pass statistics report"), "{}", o.stderr);
    assert!(o.stderr.contains("'plan-memory'\n"), "{}", o.stderr);
    let row = o.stderr.lines().find(|l| l.starts_with("  @matmul_fb: ")).unwrap_or_default();
    assert_eq!(
        row,
        "  @matmul_fb: live-peak-bytes 104857600, peak-bytes 109051904, \
         slot-bound-bytes 109051904, slots 5",
        "{}",
        o.stderr
    );
    assert!(o.stderr.contains("      109051904 peak-bytes\n"), "{}", o.stderr);
}

#[test]
fn informational_commands() {
    let o = fbc(&["passes"]);
    assert_eq!(o.code, 0);
    assert!(o.stdout.lines().any(|l| l.starts_with("canonicalize ")), "{}", o.stdout);
    let o = fbc(&["targets"]);
    assert_eq!(o.code, 0);
    for t in ["mali", "adreno", "nvidia", "cpu", "generic"] {
        assert!(o.stdout.contains(t), "{}", o.stdout);
    }
    let o = fbc(&["--version"]);
    assert_eq!(o.code, 0);
    assert!(o.stdout.starts_with("fbc "), "{}", o.stdout);
    let o = fbc(&["--help"]);
    assert_eq!(o.code, 0);
    assert!(o.stdout.contains("Examples:"), "{}", o.stdout);
}

#[test]
fn shipped_examples_round_trip() {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let mut seen = 0;
    for e in std::fs::read_dir(&examples).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "fbir") {
            seen += 1;
            let o = fbc(&["opt", p.to_str().unwrap()]);
            assert_eq!(o.code, 0, "{}: {}", p.display(), o.stderr);
            let dir = scratch("rt");
            let printed = write(&dir, "printed.fbir", o.stdout.as_bytes());
            let again = fbc(&["opt", &printed]);
            assert_eq!(again.stdout, o.stdout, "{}: printing is not a fixpoint", p.display());
        }
    }
    assert!(seen >= 4, "expected the shipped examples, found {seen}");
}

#[test]
fn simplify_index_prints_json_and_locates_errors() {
    let o = fbc(&[
        "simplify-index",
        "(d0 * 2048 + d1) mod 2048",
        "--range",
        "d0=0:512",
        "--range",
        "d1=0:2048",
        "--json",
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(v["input"], "(d0 * 2048 + d1) mod 2048");
    assert_eq!(v["output"], "d1");
    assert_eq!(v["divmod_before"], 1);
    assert_eq!(v["divmod_after"], 0);
    assert!(v["cost_after"].as_u64().unwrap() < v["cost_before"].as_u64().unwrap());
    let o = fbc(&["simplify-index", "d0 floordiv 64", "--range", "d0=0:64"]);
    assert_eq!((o.code, o.stdout.as_str()), (0, "0\n"));
    let o = fbc(&["simplify-index", "d0 floordiv + 3"]);
    assert_eq!(o.code, 1);
    assert!(o.stderr.starts_with("<expr>:1:"), "{}", o.stderr);
    let o = fbc(&["simplify-index", "d0", "--range", "d0=5:1"]);
    assert_eq!(o.code, 2, "{}", o.stderr);
}

#[test]
fn emit_report_is_json_with_the_documented_fields() {
    let dir = scratch("report");
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/attention.fbir");
    let out_path = dir.join("r.json");
    let o = fbc(&[
        examples.to_str().unwrap(),
        "-O3",
        "--target",
        "mali",
        "--emit",
        "report",
        "-v",
        "-o",
        out_path.to_str().unwrap(),
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out_path).unwrap()).unwrap();
    assert_eq!(r["target"], "mali");
    // 4 reshapes and 4 transposes in the input graph.
    assert_eq!(r["transforms"]["total"], 8);
    for key in ["eliminated", "folded", "fallback"] {
        assert!(r["transforms"][key].is_i64(), "{r}");
    }
    assert!(r["divmod"]["before"].is_i64() && r["divmod"]["after"].is_i64(), "{r}");
    assert!(r["layout_converts"].is_u64() && r["ops"].is_u64() && r["tensors"].is_array(), "{r}");
    let passes: Vec<&str> =
        r["passes"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert!(passes.starts_with(&["canonicalize", "cse", "fuse-attention", "dce"]), "{passes:?}");
    assert!(o.stderr.contains("transforms        8 total"), "{}", o.stderr);
}

#[test]
fn a_profile_file_is_a_target_and_its_errors_are_located() {
    let dir = scratch("profile-file");
    let nvidia = include_str!("../../../dialects/target/profiles/nvidia.toml");
    let matmul = "\
func.func @f(%a: tensor<256x256xf32>, %b: tensor<256x256xf32>) -> tensor<256x256xf32> {
  %0 = tensor.matmul %a, %b : (tensor<256x256xf32>, tensor<256x256xf32>) -> tensor<256x256xf32>
  func.return %0 : tensor<256x256xf32>
}
";
    let input = write(&dir, "mm.fbir", matmul.as_bytes());
    // The profile's contraction parameters reach the kernel: an 8 x 8 register block.
    let base = &nvidia[..nvidia.find("\n[contraction]").expect("nvidia sets [contraction]")];
    let text = format!("{base}\n[contraction]\nper_item = [8, 8]\ntile_k = 8\n");
    assert!(text.contains("preferred_work_groups = [[16, 16],"), "{text}");
    let good = write(&dir, "block8.toml", text.as_bytes());
    let out = dir.join("out");
    let o = fbc(&[&input, "-O0", "--target", &good, "-o", out.to_str().unwrap()]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let cl = std::fs::read_to_string(out.join("mm.cl")).unwrap();
    assert!(cl.contains("block 128 x 128, 8 x 8 outputs per work-item, k step 8"), "{cl}");
    // A malformed file is an input error at its line and column, and nothing is written.
    let bad = write(&dir, "bad.toml", nvidia.replace("fp16 = false", "fp16 = no").as_bytes());
    let line = nvidia.lines().position(|l| l.starts_with("fp16 = false")).unwrap() + 1;
    let out2 = dir.join("out2");
    let o = fbc(&[&input, "--target", &bad, "-o", out2.to_str().unwrap()]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(o.stderr.starts_with(&format!("{bad}:{line}:8: error: ")), "{}", o.stderr);
    assert!(!out2.exists());
    // An invalid one names every problem; a missing one is a command-line error.
    let invalid = write(&dir, "invalid.toml", text.replace("tile_k = 8", "tile_k = 6").as_bytes());
    let o = fbc(&[&input, "--target", &invalid, "-o", out2.to_str().unwrap()]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(
        o.stderr.contains("contraction.tile_k: 6 must be a power of two from 1 to 64"),
        "{}",
        o.stderr
    );
    let missing = dir.join("missing.toml");
    let o = fbc(&[&input, "--target", missing.to_str().unwrap()]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.starts_with("fbc: error: cannot read hardware profile"), "{}", o.stderr);
}

/// A profile with a `[measured]` table (what `fbc calibrate` writes) is a target like any
/// other; a malformed value in the table is an input error at its line and column, exactly
/// `FILE:LINE:COL: error: MESSAGE`, for `fbc FILE --target` and `fbc run --profile` alike.
#[test]
fn a_measured_table_is_read_and_its_malformed_values_are_located() {
    let dir = scratch("measured-table");
    let generic = include_str!("../../../dialects/target/profiles/generic.toml");
    let measured = "\n[measured]\ndevice = \"Example GPU\"\ndriver = \"1.0\"\n\
                    date = \"2026-05-01\"\nbuffer_row_gbps = 41.5\nlaunch_host_us = 9.5\n\
                    texture_blocks = [{ h = 1, w = 16, ns = 40.0 }]\n";
    let text = format!("{generic}{measured}");
    let input = write(&dir, "good.fbir", GOOD.as_bytes());
    let good = write(&dir, "measured.toml", text.as_bytes());
    let o = fbc(&[&input, "-O3", "--target", &good, "--emit", "ir"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let line_of = |t: &str, key: &str| t.lines().position(|l| l.starts_with(key)).unwrap() + 1;
    let cases = [
        (
            "buffer_row_gbps = 41.5",
            "buffer_row_gbps = -41.5",
            19,
            "-41.5 must be a finite positive number",
        ),
        (
            "launch_host_us = 9.5",
            "launch_host_us = inf",
            18,
            "inf must be a finite positive number",
        ),
        (
            "date = \"2026-05-01\"",
            "date = \"2026-13-01\"",
            8,
            "`2026-13-01` is not a day of the calendar",
        ),
        ("{ h = 1, w = 16,", "{ h = 1, w = 12,", 32, "12 is not a power of two"),
        ("launch_host_us = 9.5", "launch_us = 9.5", 1, "unknown field `launch_us`"),
    ];
    for (from, to, column, message) in cases {
        let bad_text = text.replace(from, to);
        let bad = write(&dir, "bad.toml", bad_text.as_bytes());
        let key = to.split([' ', '=']).next().unwrap();
        let key = if key == "{" { "texture_blocks" } else { key };
        let line = line_of(&bad_text, key);
        let want = format!("{bad}:{line}:{column}: error: {message}");
        for args in [
            vec![input.as_str(), "--target", bad.as_str()],
            vec!["run", input.as_str(), "--target", "cpu-jit", "--profile", bad.as_str()],
        ] {
            let o = fbc(&args);
            assert_eq!(o.code, 1, "{to}: {}", o.stderr);
            let first = o.stderr.lines().next().unwrap_or_default();
            if message.starts_with("unknown field") {
                assert!(first.starts_with(&want), "{to}: {}", o.stderr);
            } else {
                assert_eq!(o.stderr, format!("{want}\n"), "{to}");
            }
        }
    }
}

/// `-q` is global: accepted on either side of a subcommand's name (the options of `fbc FILE`
/// given before one are refused), and it changes no output.
#[test]
fn quiet_stands_on_either_side_of_a_subcommand_and_changes_no_output() {
    let dir = scratch("quiet");
    let input = write(&dir, "good.fbir", GOOD.as_bytes());
    let plain = fbc(&["opt", &input]);
    assert_eq!(plain.code, 0, "{}", plain.stderr);
    for args in [["-q", "opt", &input], ["opt", &input, "-q"], ["opt", "--quiet", &input]] {
        let o = fbc(&args);
        assert_eq!((o.code, o.stdout.as_str(), o.stderr.as_str()), (0, plain.stdout.as_str(), ""));
    }
    let o = fbc(&[&input, "-q", "--emit", "ir"]);
    assert_eq!((o.code, o.stderr.as_str()), (0, ""));
    assert_eq!(o.stdout, fbc(&[&input, "--emit", "ir"]).stdout);
    let o = fbc(&["-O3", "opt", &input]);
    assert_eq!(
        (o.code, o.stderr.as_str()),
        (2, "fbc: error: -O belongs to `fbc FILE`, not to `fbc opt`\n")
    );
}

/// `--emit memory` writes the lowered module; it parses back, and printing it again (`fbc opt`)
/// changes nothing. `--half-images` applies to it; to `--emit ir` it does not (exit 2).
#[test]
fn emit_memory_writes_the_lowered_module_which_parses_back() {
    let dir = scratch("emit-memory");
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/attention.fbir");
    let ex = example.to_str().expect("utf-8");
    let out = dir.join("lowered.fbir");
    let o = fbc(&[ex, "-O3", "--target", "mali", "--emit", "memory", "-o", out.to_str().unwrap()]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let text = std::fs::read_to_string(&out).expect("written");
    assert!(text.contains("memory.launch") && text.contains("!memory.image2d<"), "{text}");
    assert!(!text.contains("= tensor."), "{text}");
    let again = fbc(&["opt", out.to_str().unwrap()]);
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert_eq!(again.stdout, text);
    let half = fbc(&[ex, "-O3", "--target", "mali", "--emit", "memory", "--half-images"]);
    assert_eq!(half.code, 0, "{}", half.stderr);
    assert!(half.stdout.contains("f16>"), "{}", half.stdout);
    let ir = fbc(&[ex, "-O3", "--emit", "ir", "--half-images"]);
    assert_eq!(ir.code, 2);
    assert!(ir.stderr.contains("needs --emit opencl or memory, not --emit ir"), "{}", ir.stderr);
}

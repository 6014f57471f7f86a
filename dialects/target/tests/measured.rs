//! The `[measured]` table of a profile (`fbc calibrate`): it parses, round-trips through
//! `HardwareProfile::to_toml` with the rest of the profile, and a malformed value is rejected at
//! its line and column; `write_over` writes a profile over its base's text, keeping the base's
//! comments and noting each replaced value.

use fbc_target::{
    builtin, builtin_names, from_toml, write_over, HardwareProfile, Note, TargetError,
};

/// The builtin generic profile's text (what `fbc calibrate` starts from on an unknown device).
const GENERIC: &str = include_str!("../profiles/generic.toml");

const MEASURED: &str = r#"
[measured]
device = "Example GPU"
driver = "1.2.3"
date = "2026-05-01"
buffer_row_gbps = 41.5
buffer_column_gbps = 3.25
image_row_gbps = 30
image_column_gbps = 12.5
image_tile_gbps = 28.0
contraction_buffer_gflops = 210.0
contraction_image_gflops = 260.5
launch_device_us = 2.5
launch_interval_us = 6.0
launch_host_us = 9.75
work_group_multiple = 32
texture_blocks = [
  { h = 1, w = 16, ns = 40.0 },
  { h = 4, w = 4, ns = 22.5 },
]
"#;

fn with_measured() -> String {
    format!("{GENERIC}{MEASURED}")
}

#[test]
fn a_measured_table_parses() {
    let p = from_toml(&with_measured()).unwrap_or_else(|e| panic!("{e}"));
    let m = p.measured.expect("[measured]");
    assert_eq!((m.device.as_str(), m.driver.as_str()), ("Example GPU", "1.2.3"));
    assert_eq!(m.date.to_string(), "2026-05-01");
    assert!(!m.quick);
    // An integer is a rate too.
    assert_eq!(m.image_row_gbps.map(|r| r.get()), Some(30.0));
    assert_eq!(m.launch_host_us.map(|r| r.get()), Some(9.75));
    assert_eq!(m.work_group_multiple, Some(32));
    let shapes: Vec<(u32, u32, f64)> =
        m.texture_blocks.iter().map(|b| (b.h, b.w, b.ns.get())).collect();
    assert_eq!(shapes, [(1, 16, 40.0), (4, 4, 22.5)]);
    // Every rate is optional.
    let bare = "[measured]\ndevice = \"d\"\ndriver = \"1\"\ndate = \"2026-05-01\"\n";
    let p = from_toml(&format!("{GENERIC}{bare}")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(p.measured.map(|m| m.buffer_row_gbps), Some(None));
}

#[test]
fn profiles_round_trip_through_to_toml() {
    let mut texts: Vec<String> =
        builtin_names().iter().map(|n| builtin(n).expect("builtin").to_toml()).collect();
    texts.push(from_toml(&with_measured()).expect("valid").to_toml());
    let quick = with_measured().replace("[measured]\n", "[measured]\nquick = true\n");
    texts.push(from_toml(&quick).expect("valid").to_toml());
    for text in texts {
        let p = from_toml(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(p.to_toml(), text, "written twice, the same text");
        assert_eq!(from_toml(&p.to_toml()).expect("reads back"), p);
    }
    for name in builtin_names() {
        let p = builtin(name).expect("builtin");
        assert_eq!(from_toml(&p.to_toml()).expect("reads back"), p, "{name}");
        // Only the nvidia profile was calibrated (on the lent H200).
        let measured = p.to_toml().contains("[measured]");
        assert_eq!(measured, *name == "nvidia", "{name}");
        assert_eq!(p.measured.is_some(), measured, "{name}");
    }
    let p = from_toml(&quick).expect("valid");
    assert!(p.measured.as_ref().is_some_and(|m| m.quick));
    assert!(p.to_toml().contains("quick = true"));
}

/// The error of `text` as `(line, column, message)`.
fn located(text: &str) -> (usize, usize, String) {
    match from_toml(text) {
        Err(TargetError::Parse { line, column, message, .. }) => (line, column, message),
        other => panic!("expected a located parse error, got {other:?}"),
    }
}

/// The 1-based line and column (in characters) of byte offset `at` of `text`.
fn line_col(text: &str, at: usize) -> (usize, usize) {
    let before = &text[..at];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

/// Each case replaces `from` by `to` in a valid profile with a `[measured]` table; the error is
/// `message`, placed where `at` (a part of `to`) starts.
#[test]
fn malformed_measured_values_are_rejected_where_they_are() {
    let base = with_measured();
    let cases: [(&str, &str, &str, &str); 8] = [
        (
            "buffer_row_gbps = 41.5",
            "buffer_row_gbps = -41.5",
            "-41.5",
            "-41.5 must be a finite positive number",
        ),
        (
            "launch_host_us = 9.75",
            "launch_host_us = nan",
            "nan",
            "NaN must be a finite positive number",
        ),
        (
            "launch_device_us = 2.5",
            "launch_device_us = 0",
            "0",
            "0 must be a finite positive number",
        ),
        (
            "image_tile_gbps = 28.0",
            "image_tile_gbps = \"fast\"",
            "\"fast\"",
            "invalid type: string \"fast\", expected f64",
        ),
        (
            "date = \"2026-05-01\"",
            "date = \"2026-02-30\"",
            "\"2026",
            "`2026-02-30` is not a day of the calendar",
        ),
        (
            "date = \"2026-05-01\"",
            "date = \"May 1\"",
            "\"May",
            "`May 1` is not a date of the form YYYY-MM-DD",
        ),
        ("{ h = 4, w = 4,", "{ h = 4, w = 3,", "3,", "3 is not a power of two"),
        (
            "launch_host_us = 9.75",
            "launch_host_ms = 9.75",
            "launch_host_ms",
            "unknown field `launch_host_ms`, expected one of",
        ),
    ];
    for (from, to, at, message) in cases {
        let text = base.replacen(from, to, 1);
        let edit = text.find(to).expect("edited");
        let want = line_col(&text, edit + to.find(at).expect("`at` is in `to`"));
        let (line, column, got) = located(&text);
        assert_eq!((line, column), want, "{to}: {got}");
        assert!(got.starts_with(message), "{to}: {got}");
    }
    // Missing provenance: the error is at the table's heading.
    let text = base.replacen("driver = \"1.2.3\"\n", "", 1);
    let (line, column, got) = located(&text);
    assert_eq!(got, "missing field `driver`");
    assert_eq!((line, column), line_col(&text, text.find("[measured]").expect("heading")));
}

#[test]
fn write_over_keeps_the_base_comments_and_notes_each_replaced_value() {
    let base = builtin("nvidia").expect("nvidia");
    let measured = from_toml(&with_measured()).expect("valid").measured;
    let mut p = base.clone();
    p.name = "my-gpu".into();
    p.compute.compute_units = 7;
    p.texture_cache.block_h = 2;
    p.memory.dram_bandwidth_gbps = 123.25;
    p.measured = measured;
    let notes = [
        Note::new("compute.compute_units", "measured: CL_DEVICE_MAX_COMPUTE_UNITS"),
        Note::new("texture_cache.block_h", "measured:\nthe probe"),
        Note::new("memory.dram_bandwidth_gbps", "measured: a read"),
        Note::new("measured.buffer_row_gbps", "how it was read"),
    ];
    let text = include_str!("../profiles/nvidia.toml");
    let out = write_over(text, &p, &notes, "# calibrated\n").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(from_toml(&out).expect("reads back"), p);
    assert!(out.starts_with("# calibrated\n# Hardware profile: NVIDIA"), "{out}");
    // Replaced values carry their note (on one line), in place of the base's comment.
    for line in [
        "name = \"my-gpu\"\n",
        "compute_units = 7 # measured: CL_DEVICE_MAX_COMPUTE_UNITS\n",
        "block_h = 2 # measured: the probe\n",
        "dram_bandwidth_gbps = 123.25 # measured: a read\n",
        "buffer_row_gbps = 41.5 # how it was read\n",
    ] {
        assert!(out.contains(line), "{line:?} in\n{out}");
    }
    // The comment block above block_h described the assumed value: gone. Unchanged values keep
    // theirs (block_w shared it).
    assert!(!out.contains("Replace when measured."), "{out}");
    assert!(out.contains("\nblock_w = 8\n"), "{out}");
    assert!(out.contains("local_mem_bytes = 49152 # [clinfo] 48 KiB; [kcpp]\n"), "{out}");
    assert!(out.contains("# [x, y] in work-items. [16, 16] first:"), "{out}");
    // The measured table comes last, its texture blocks one a line.
    let tail = &out[out.find("[measured]").expect("[measured]")..];
    assert!(tail.contains("\n  { h = 1, w = 16, ns = 40.0 },\n"), "{tail}");
    assert!(!tail[1..].contains("\n["), "[measured] is the last table:\n{tail}");

    // Written over a profile with a measured table, a profile without one drops it.
    let bare = HardwareProfile { measured: None, ..base.clone() };
    let again = write_over(&out, &bare, &[], "").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(from_toml(&again).expect("reads back"), bare);
    assert!(!again.contains("[measured]"), "{again}");
    // A note for a field the profile has not is refused.
    let e = write_over(text, &base, &[Note::new("compute.cores", "x")], "").expect_err("no field");
    assert_eq!(
        e.to_string(),
        "cannot write the hardware profile: a note for `compute.cores`, which the profile has not"
    );
}

#[test]
fn write_over_a_base_without_optional_tables_adds_them() {
    // generic.toml has no [contraction] table: written over it, the defaults appear.
    let mut p = builtin("generic").expect("generic");
    p.contraction.tile_k = 32;
    p.measured = from_toml(&with_measured()).expect("valid").measured;
    let note = [Note::new("contraction.tile_k", "tuned")];
    let out = write_over(GENERIC, &p, &note, "").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(from_toml(&out).expect("reads back"), p);
    assert!(out.contains("\n[contraction]\n") && out.contains("tile_k = 32 # tuned\n"), "{out}");
    // The values the base's text left to their defaults say so.
    for line in ["per_item = [4, 4] # ", "resident_work_items = 2048 # "] {
        assert!(out.contains(&format!("{line}{}\n", fbc_target::NOT_IN_BASE)), "{line} in\n{out}");
    }
    // Round trip of the written file through the plain writer.
    let back = from_toml(&out).expect("reads back");
    assert_eq!(from_toml(&back.to_toml()).expect("plain"), back);
}

#[test]
fn measured_invariants_are_validated() {
    let text = with_measured()
        .replace("device = \"Example GPU\"", "device = \" \"")
        .replace("work_group_multiple = 32", "work_group_multiple = 0")
        .replace("{ h = 4, w = 4, ns = 22.5 }", "{ h = 1, w = 16, ns = 2.5 }");
    let err = from_toml(&text).expect_err("invalid");
    assert_eq!(
        err.to_string(),
        "hardware profile `generic` is invalid:\n  \
         - measured.device: must be non-empty\n  \
         - measured.work_group_multiple: must be positive\n  \
         - measured.texture_blocks: 1x16 is listed twice"
    );
}

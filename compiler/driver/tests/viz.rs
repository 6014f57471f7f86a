//! `fbc viz`: the page of an example after the pipeline, one tensor's SVG, and the errors.

mod common;

use std::path::Path;

use common::{fbc, scratch};

fn example(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

/// The optimised IR `fbc FILE -O3 --target mali` prints: what the page must show.
fn optimised(file: &str) -> String {
    let o = fbc(&[file, "-O3", "--target", "mali", "--emit", "ir"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    o.stdout
}

#[test]
fn the_page_shows_every_op_conversion_remap_and_tensor_of_the_pipeline() {
    let file = example("attention.fbir");
    let ir = optimised(&file);
    let o = fbc(&["viz", &file, "--target", "mali"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let html = &o.stdout;
    assert!(html.starts_with("<!DOCTYPE html>"), "{}", &html[..100.min(html.len())]);
    let ops = |name: &str| ir.matches(&format!(" = {name} ")).count();
    let converts = ops("layout.convert");
    let remaps = ops("layout.remap");
    assert!(converts >= 1 && remaps >= 1, "the example should exercise both:\n{ir}");
    assert_eq!(html.matches(r#"<g class="node convert""#).count(), converts);
    assert_eq!(html.matches(r#"<g class="node remap""#).count(), remaps);
    assert_eq!(html.matches(r#"<g class="node assign""#).count(), ops("layout.assign"));
    // One panel per tensor value: the 5 arguments and every op result.
    let results = ir.lines().filter(|l| l.trim_start().starts_with('%')).count();
    assert_eq!(html.matches(r#"<div class="tensor""#).count(), 5 + results);
    // The remap of %q2: its map before and after index-simplify, with div/mod counts.
    let q2 = html.find("<h2>%q2 : tensor&lt;1x32x512x64xf32&gt;</h2>").expect("a panel for %q2");
    let panel = &html[q2..q2 + html[q2..].find("</div>\n<div class=\"tensor\"").unwrap()];
    assert!(panel.contains("before index-simplify"), "{panel}");
    let after = ir.lines().find(|l| l.contains("%q2 = layout.remap")).unwrap();
    let map = after.split(", map = ").nth(1).unwrap().split(", shape").next().unwrap();
    assert!(panel.contains(&map.replace('>', "&gt;")), "{map} in {panel}");
    // rtile-select's scores for a tensor it decided: one row chosen.
    let x = html.find("<h2>rtile-select (Eq. 2) for %x</h2>").expect("the scores of %x");
    assert!(html[x..].contains("<td>selected</td>") || html[x..].contains("<td>Eq. 2 best</td>"));
    // The heading's div/mod counts are the report's.
    let o = fbc(&[&file, "-O3", "--target", "mali", "--emit", "report"]);
    let report: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    let counts = format!(
        "div/mod {} before, {} after index-simplify",
        report["divmod"]["before"], report["divmod"]["after"]
    );
    assert!(html.contains(&counts), "{counts}");
    // Nothing is fetched: the only URL is the SVG namespace.
    let urls = html.matches("http").count();
    assert_eq!(urls, html.matches("http://www.w3.org/2000/svg").count());
    assert!(!html.contains(" src=") && !html.contains(" href="));
}

#[test]
fn one_tensor_as_a_standalone_svg() {
    let file = example("attention.fbir");
    let ir = optimised(&file);
    let dir = scratch("viz-svg");
    let out = dir.join("q2.svg");
    let o = fbc(&[
        "viz",
        &file,
        "--target",
        "mali",
        "--tensor",
        "%q2_rt",
        "--svg",
        "--max-side",
        "8",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let svg = std::fs::read_to_string(&out).unwrap();
    assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
    assert!(svg.contains("%q2_rt : 1x32x512x64"), "{svg}");
    // 8 x 8 elements drawn inside one tile: each row one run of consecutive channels.
    assert_eq!(svg.matches("]: texels (").count(), 8);
    for i in 0..8 {
        assert!(svg.contains(&format!("<title>[{i}, 0..=7]: texels (")), "row {i}: {svg}");
    }
    let tile = ir
        .lines()
        .find(|l| l.contains("%q2_rt = layout.assign"))
        .and_then(|l| l.split("layout = #layout.rtile<tile = [").nth(1))
        .and_then(|t| t.split(']').next())
        .unwrap()
        .replace(", ", "x");
    assert!(svg.contains(&format!("R-Tile {tile}, ")), "tile {tile}: {svg}");
}

#[test]
fn bad_requests_are_errors_and_write_nothing() {
    let file = example("attention.fbir");
    let dir = scratch("viz-errors");
    let out = dir.join("never.html");
    let out_s = out.to_str().unwrap();
    let o = fbc(&["viz", &file, "--svg", "-o", out_s]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("--tensor"), "{}", o.stderr);
    let o = fbc(&["viz", &file, "--tensor", "nope", "-o", out_s]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("--tensor: no value %nope"), "{}", o.stderr);
    let o = fbc(&["viz", &file, "--func", "absent", "-o", out_s]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("no function @absent"), "{}", o.stderr);
    let bad = common::write(&dir, "bad.fbir", b"func.func @f() -> () {\n  %x = tensor.nope\n}\n");
    let o = fbc(&["viz", &bad, "-o", out_s]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(o.stderr.contains("bad.fbir:2:"), "{}", o.stderr);
    assert!(!out.exists());
}

/// A headless Chromium: `FBC_CHROMIUM`, else `chromium` or `chromium-browser` on the PATH.
/// Without one the test fails under `CI=true` (`.ci/run` installs Debian's `chromium`) and is
/// skipped, saying so, elsewhere.
fn chromium() -> Option<String> {
    let candidates = std::env::var("FBC_CHROMIUM")
        .into_iter()
        .chain(["chromium".into(), "chromium-browser".into()]);
    for c in candidates {
        let ok = std::process::Command::new(&c)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        if ok {
            return Some(c);
        }
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "CI=true and no headless Chromium (install Debian's `chromium`, or set FBC_CHROMIUM)"
    );
    eprintln!("skipped: no chromium on the PATH (set FBC_CHROMIUM)");
    None
}

fn headless(browser: &str, args: &[&str]) -> std::process::Output {
    let profile = scratch("viz-chromium-profile");
    let mut cmd = std::process::Command::new(browser);
    cmd.args(["--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0"])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args);
    cmd.output().expect("chromium runs")
}

#[test]
fn the_page_renders_in_headless_chromium_without_script_errors() {
    let Some(browser) = chromium() else { return };
    let dir = scratch("viz-browser");
    let page = dir.join("attention.html");
    let o = fbc(&[
        "viz",
        &example("attention.fbir"),
        "--target",
        "mali",
        "--tensor",
        "q2",
        "-o",
        page.to_str().unwrap(),
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let url = format!("file://{}", page.display());
    // The DOM after the script ran: the panel of --tensor shown, its placement copied in.
    let out = headless(&browser, &["--virtual-time-budget=5000", "--dump-dom", &url]);
    let dom = String::from_utf8_lossy(&out.stdout);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    assert!(!log.contains("Uncaught"), "script error:\n{log}");
    let shown: Vec<&str> =
        dom.match_indices(r#"class="tensor shown""#).map(|(i, _)| &dom[i..]).collect();
    assert_eq!(shown.len(), 1, "exactly one panel shown");
    let panel = &shown[0][..shown[0].find(r#"<div class="tensor""#).unwrap_or(shown[0].len())];
    assert!(panel.contains("%q2 : tensor"), "{panel}");
    assert!(panel.contains("<svg"), "the placement was copied into the panel: {panel}");
    assert!(dom.contains(r#"<g class="node remap""#));
    // And a screenshot is an image.
    let png = dir.join("attention.png");
    let out = headless(
        &browser,
        &[&format!("--screenshot={}", png.display()), "--window-size=1400,900", &url],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let bytes = std::fs::read(&png).expect("the screenshot");
    assert!(
        bytes.starts_with(b"\x89PNG\r\n\x1a\n") && bytes.len() > 10_000,
        "{} bytes",
        bytes.len()
    );
}

//! `split-weight-rows`: a weight that a product reads transposed is cut into row tiles, each
//! read by its own product and uploaded on its own (`memory.upload {rows}`); what reads it
//! otherwise keeps the whole; the numbers stay the interpreter's, before and after lowering.

mod common;

use common::*;
use fbc_ir::Attr;

/// A tied LM head: the table gathered by the tokens, one product, then read transposed by the
/// logits (`table: [rows, 64]`).
fn tied_lm(rows: u64) -> String {
    let table = format!("tensor<{rows}x64xf32>");
    let logits = format!("tensor<1x16x{rows}xf32>");
    format!(
        "func.func @lm(%tokens: tensor<1x16xi32>, %table: {table}, %w: tensor<64x64xf32>) -> {logits} {{
  %e = tensor.embedding %table, %tokens : ({table}, tensor<1x16xi32>) -> tensor<1x16x64xf32>
  %m = tensor.matmul %e, %w : (tensor<1x16x64xf32>, tensor<64x64xf32>) -> tensor<1x16x64xf32>
  %h = tensor.tanh %m : (tensor<1x16x64xf32>) -> tensor<1x16x64xf32>
  %logits = tensor.matmul %h, %table {{transpose_b = true}} : (tensor<1x16x64xf32>, {table}) -> {logits}
  func.return %logits : {logits}
}}
"
    )
}

/// `(op name, start of a row tile)` of the body of the module's only function, in order.
fn ops(m: &fbc_ir::Module) -> Vec<(String, Option<i64>)> {
    m.all_ops()
        .filter(|&o| !m.op(o).erased)
        .map(|o| {
            let d = m.op(o);
            let start = d
                .attr("start")
                .filter(|_| d.attr("fbc.row_tile").is_some())
                .and_then(Attr::as_ints)
                .map(|s| s[0]);
            (d.name().to_string(), start)
        })
        .collect()
}

#[test]
fn a_transposed_weight_is_read_in_row_tiles() {
    // 1000 rows of 256 bytes; tiles of at most 40000 bytes: 156 rows fit, so 128 (2 · 64).
    let original = parse(&tied_lm(1000));
    let mut m = original.clone();
    let stats = run(&mut m, "split-weight-rows{max-bytes=40000}", "generic");
    assert_eq!(stats.get("split-weight-rows", "weights"), 1);
    assert_eq!(stats.get("split-weight-rows", "products"), 1);
    assert_eq!(stats.get("split-weight-rows", "tiles"), 8);
    let mut want: Vec<(String, Option<i64>)> =
        ["tensor.embedding", "tensor.matmul", "tensor.tanh"].map(|n| (n.into(), None)).to_vec();
    for k in 0..8 {
        want.push(("tensor.slice".into(), Some(128 * k)));
        want.push(("tensor.matmul".into(), None));
    }
    want.push(("tensor.concat".into(), None));
    want.push(("func.return".into(), None));
    assert_eq!(ops(&m), want);
    // The last tile takes what is left: 1000 - 7 · 128 rows.
    let text = fbc_ir::print_module(&m);
    assert!(text.contains("%table_rows7 = tensor.slice %table {end = [1000, 64], fbc.row_tile, start = [896, 0]} : (tensor<1000x64xf32>) -> tensor<104x64xf32>"), "{text}");
    assert!(text.contains("%logits = tensor.concat %logits_rows0, %logits_rows1,"), "{text}");
    same_numbers(&original, &m, "split");

    // Lowered, each tile is an upload of its rows; the embedding still reads the whole table.
    let (low, _) = lowered(
        &original,
        "split-weight-rows{max-bytes=40000},lower-to-memory,plan-memory",
        "generic",
    );
    let mut uploads: Vec<Option<Vec<i64>>> = Vec::new();
    for o in low.all_ops() {
        let d = low.op(o);
        let table =
            d.operands.first().is_some_and(|&v| low.value(v).name.as_deref() == Some("table"));
        if d.name() == "memory.upload" && table {
            uploads.push(d.attr("rows").and_then(Attr::as_ints));
        }
    }
    let mut want = vec![None];
    want.extend((0..8).map(|k| Some(vec![128 * k, if k < 7 { 128 } else { 104 }])));
    assert_eq!(uploads, want);
    let text = fbc_ir::print_module(&low);
    assert!(text.contains("%table_rows7_m = memory.upload %table {layout = #layout.linear, rows = [896, 104], slot = 9} : (tensor<1000x64xf32>) -> !memory.buffer<6656, f32>"), "{text}");
    same_numbers(&original, &low, "split and lowered");
    // The lowered text parses back and runs the same.
    let back = parse(&text);
    same_numbers(&original, &back, "printed and parsed");
}

#[test]
fn what_is_not_split() {
    for (why, text, pipeline) in [
        ("fits", tied_lm(100), "split-weight-rows{max-bytes=40000}"),
        ("exactly fits", tied_lm(1000), "split-weight-rows{max-bytes=256000}"),
        (
            "not transposed",
            "func.func @f(%x: tensor<4x1000xf32>, %w: tensor<1000x64xf32>) -> tensor<4x64xf32> {
  %y = tensor.matmul %x, %w : (tensor<4x1000xf32>, tensor<1000x64xf32>) -> tensor<4x64xf32>
  func.return %y : tensor<4x64xf32>
}
"
            .to_string(),
            "split-weight-rows{max-bytes=4000}",
        ),
        (
            "the left operand",
            "func.func @f(%w: tensor<1000x64xf32>, %x: tensor<4x64xf32>) -> tensor<1000x4xf32> {
  %y = tensor.matmul %w, %x {transpose_b = true} : (tensor<1000x64xf32>, tensor<4x64xf32>) -> tensor<1000x4xf32>
  func.return %y : tensor<1000x4xf32>
}
"
            .to_string(),
            "split-weight-rows{max-bytes=4000}",
        ),
        (
            "not an argument",
            "func.func @f(%x: tensor<4x64xf32>, %w: tensor<1000x64xf32>) -> tensor<4x1000xf32> {
  %t = tensor.tanh %w : (tensor<1000x64xf32>) -> tensor<1000x64xf32>
  %y = tensor.matmul %x, %t {transpose_b = true} : (tensor<4x64xf32>, tensor<1000x64xf32>) -> tensor<4x1000xf32>
  func.return %y : tensor<4x1000xf32>
}
"
            .to_string(),
            "split-weight-rows{max-bytes=4000}",
        ),
    ] {
        let original = parse(&text);
        let mut m = original.clone();
        let stats = run(&mut m, pipeline, "generic");
        assert_eq!(stats.get("split-weight-rows", "tiles"), 0, "{why}");
        assert_eq!(fbc_ir::print_module(&m), fbc_ir::print_module(&original), "{why}");
    }
}

#[test]
fn max_bytes_is_checked() {
    let r = fbc_transforms::default_registry();
    for (pipeline, want) in [
        ("split-weight-rows", "`max-bytes`"),
        ("split-weight-rows{max-bytes=0}", "split-weight-rows: `max-bytes` must be > 0"),
        (
            "split-weight-rows{max-bytes=3parsecs}",
            "split-weight-rows: `max-bytes` has an unknown unit in `3parsecs`",
        ),
        (
            "split-weight-rows{max-bytes=MiB}",
            "split-weight-rows: `max-bytes` must be a number of bytes",
        ),
    ] {
        // A missing option is refused as the pipeline is read, a bad value as the pass is made.
        let e = match r.parse_pipeline(pipeline) {
            Err(e) => e.message,
            Ok(steps) => {
                steps[0].info.instantiate(&steps[0].options).map(|_| ()).expect_err(pipeline)
            }
        };
        assert!(e.contains(want), "{pipeline}: {e}");
    }
    assert!(r.parse_pipeline("split-weight-rows{max-bytes=64MiB}").is_ok());
}

/// Where `global-layout` gives the product an R-Tile of a tile (a `layout.convert` after the
/// slice; the generic profile does at -O3), the tile is uploaded in that R-Tile and read as it
/// is: the one conversion left is the embedding's output's (there were nine, one a tile).
#[test]
fn a_tile_is_uploaded_in_the_layout_its_product_reads() {
    let text = "func.func @lm(%tokens: tensor<1x64xi32>, %table: tensor<2048x256xf32>, %w: tensor<256x256xf32>) -> tensor<1x64x2048xf32> {
  %e = tensor.embedding %table, %tokens : (tensor<2048x256xf32>, tensor<1x64xi32>) -> tensor<1x64x256xf32>
  %m = tensor.matmul %e, %w : (tensor<1x64x256xf32>, tensor<256x256xf32>) -> tensor<1x64x256xf32>
  %h = tensor.tanh %m : (tensor<1x64x256xf32>) -> tensor<1x64x256xf32>
  %logits = tensor.matmul %h, %table {transpose_b = true} : (tensor<1x64x256xf32>, tensor<2048x256xf32>) -> tensor<1x64x2048xf32>
  func.return %logits : tensor<1x64x2048xf32>
}
";
    let original = parse(text);
    let o3 = fbc_transforms::pipeline_for_level(3);
    let (low, _) = lowered(
        &original,
        &format!("split-weight-rows{{max-bytes=262144}},{o3},lower-to-memory,plan-memory"),
        "generic",
    );
    let mut tiles = Vec::new();
    for o in low.all_ops() {
        let d = low.op(o);
        if d.name() == "memory.upload" && d.attr("rows").is_some() {
            let layout = d.attr("layout").map(|a| a.to_string()).unwrap_or_default();
            tiles.push(layout.starts_with("#layout.rtile"));
        }
    }
    assert_eq!(tiles, vec![true; 8], "{}", fbc_ir::print_module(&low));
    let converts: Vec<String> =
        kernels(&low).into_iter().filter(|k| k.name.contains("convert")).map(|k| k.name).collect();
    assert_eq!(converts, ["lm_convert_e_rt"], "{}", fbc_ir::print_module(&low));
    // Sums of 256 products of values near 1 in another order: the lowering without tiles is
    // 1.2e-5 off at one logit of 0.0126 too, past `TOL`'s absolute 1e-5.
    let tol = fbc_runtime::interp::Tolerance { rtol: 1e-4, atol: 1e-4 };
    fbc_runtime::interp::check_equivalent(&original, &low, "lm", 7, tol)
        .unwrap_or_else(|e| panic!("tiles in R-Tiles: {e}"));
}

//! Translation validation of the whole `-O3` pipeline: the interpreter gives the same numbers
//! before and after it, on generated 1-layer training graphs of every model and on random small
//! attention-style graphs (reshape/transpose/broadcast chains between matmuls and elementwise
//! ops, the graphs tile-based index elimination rewrites).

use std::sync::Arc;

use fbc_ir::pass::{PassContext, PassManager};
use fbc_ir::{Module, SourceFile};
use fbc_runtime::interp::{check_equivalent, Tolerance};
use proptest::prelude::*;

fn o3(driver: &fbc::Driver, m: &Module, target: &str) -> Module {
    let mut after = m.clone();
    let steps = driver.passes.parse_pipeline(fbc_transforms::pipeline_for_level(3)).unwrap();
    let mut pm = PassManager::new(steps);
    pm.instrumentation.verify_each = true;
    let profile = fbc_target::builtin(target).unwrap();
    let mut cx = PassContext::new(&driver.ops);
    cx.target = &profile;
    if let Err(d) = pm.run(&mut after, &mut cx, &mut |_| {}) {
        let file = m.source.clone().unwrap_or_else(|| Arc::new(SourceFile::new("m.fbir", "")));
        panic!("-O3 failed:\n{}", fbc_grammar::diag::render_all(&file, &d));
    }
    after
}

fn parse(driver: &fbc::Driver, name: &str, text: String) -> Module {
    let file = Arc::new(SourceFile::new(name, text));
    fbc_ir::parse_module(&file, &driver.ops)
        .unwrap_or_else(|d| panic!("{}", fbc_grammar::diag::render_all(&file, &d)))
}

#[test]
fn generated_training_graphs_keep_their_numbers_through_o3() {
    let driver = fbc::Driver::default();
    // Small sequence, batch and vocabulary: the graph's structure is the model's, the
    // interpreter's work stays small.
    let o = |seq: Option<u64>, batch: Option<u64>, vocab: Option<u64>| fbc_models::Options {
        layers: Some(1),
        seq,
        batch,
        vocab,
        lora_rank: Some(2),
        training: true,
        ..Default::default()
    };
    let whisper = fbc_models::Options { encoder_len: Some(8), ..o(Some(8), Some(1), Some(64)) };
    let unet = fbc_models::Options {
        layers: None,
        levels: Some(2),
        res_blocks: Some(1),
        latent: Some(8),
        channels: Some(32),
        ..o(None, Some(1), None)
    };
    let cases = [
        ("llama3.2-1b", o(Some(8), None, Some(64))),
        ("qwen2.5-1.5b", o(Some(8), None, Some(64))),
        ("gemma2-2b", o(Some(8), None, Some(64))),
        ("bert-large", o(Some(8), Some(1), None)),
        ("vit-large", o(None, Some(1), None)),
        ("whisper-large-decoder", whisper),
        // Two levels (one with attention), one ResNet block each, 8x8 latents, 32 channels: every
        // kind of block of the UNet, the skip concatenations and both resamplings.
        ("sd1.5-unet", unet),
    ];
    for (model, opts) in &cases {
        let m = fbc_models::build(model, opts).unwrap_or_else(|e| panic!("fbc gen {model}: {e}"));
        let after = o3(&driver, &m, "mali");
        // The pipeline really rewrote something: chains became remaps.
        let remaps = after.all_ops().filter(|&o| after.op(o).def.is("layout.remap")).count();
        assert!(remaps > 0, "{model}: -O3 eliminated no transform");
        for func in ["loss", "loss_grad"] {
            check_equivalent(&m, &after, func, 7, Tolerance::F32)
                .unwrap_or_else(|e| panic!("{model} @{func}: {e}"));
        }
    }
}

/// A random attention-style function: projections, a head split through a random legal
/// permutation, a grouped (broadcast) operand, elementwise epilogues, a head merge.
fn graph(s: u64, h: u64, hd: u64, perm_pick: usize, group: bool, act: &str) -> String {
    let d = h * hd;
    let t3 = format!("tensor<1x{s}x{d}xf32>");
    let (perm, split_t) = match perm_pick % 3 {
        0 => ("[0, 2, 1, 3]", format!("tensor<1x{h}x{s}x{hd}xf32>")),
        1 => ("[0, 1, 2, 3]", format!("tensor<1x{s}x{h}x{hd}xf32>")),
        _ => ("[0, 2, 3, 1]", format!("tensor<1x{h}x{hd}x{s}xf32>")),
    };
    let four = format!("tensor<1x{s}x{h}x{hd}xf32>");
    let dims: Vec<u64> = match perm_pick % 3 {
        0 => vec![1, h, s, hd],
        1 => vec![1, s, h, hd],
        _ => vec![1, h, hd, s],
    };
    let (r, c) = (dims[2], dims[3]);
    let sq = format!("tensor<1x{}x{r}x{r}xf32>", dims[1]);
    let grouped = if group {
        format!(
            "%g1 = tensor.reshape %b2 {{shape = [1, {b}, 1, {r}, {c}]}} : ({split_t}) -> tensor<1x{b}x1x{r}x{c}xf32>\n    \
             %g2 = tensor.broadcast %g1 {{shape = [1, {b}, 2, {r}, {c}]}} : (tensor<1x{b}x1x{r}x{c}xf32>) -> tensor<1x{b}x2x{r}x{c}xf32>\n    \
             %g3 = tensor.reshape %g2 {{shape = [1, {b2}, {r}, {c}]}} : (tensor<1x{b}x2x{r}x{c}xf32>) -> tensor<1x{b2}x{r}x{c}xf32>\n    \
             %k = tensor.slice %g3 {{end = [1, {b}, {r}, {c}], start = [0, 0, 0, 0]}} : (tensor<1x{b2}x{r}x{c}xf32>) -> {split_t}",
            b = dims[1],
            b2 = dims[1] * 2
        )
    } else {
        format!("%k = tensor.{act} %b2 : ({split_t}) -> {split_t}")
    };
    format!(
        "func.func @f(%x: {t3}, %w: tensor<{d}x{d}xf32>, %bias: tensor<{d}xf32>) -> {t3} {{
    %a = tensor.matmul %x, %w : ({t3}, tensor<{d}x{d}xf32>) -> {t3}
    %b = tensor.add %a, %bias : ({t3}, tensor<{d}xf32>) -> {t3}
    %b1 = tensor.reshape %b {{shape = [1, {s}, {h}, {hd}]}} : ({t3}) -> {four}
    %b2 = tensor.transpose %b1 {{perm = {perm}}} : ({four}) -> {split_t}
    {grouped}
    %sc = tensor.matmul %b2, %k {{transpose_b = true}} : ({split_t}, {split_t}) -> {sq}
    %p = tensor.softmax %sc {{axis = -1}} : ({sq}) -> {sq}
    %o = tensor.matmul %p, %b2 : ({sq}, {split_t}) -> {split_t}
    %o1 = tensor.{act} %o : ({split_t}) -> {split_t}
    %m1 = tensor.transpose %o1 {{perm = {perm_inv}}} : ({split_t}) -> {four}
    %m2 = tensor.reshape %m1 {{shape = [1, {s}, {d}]}} : ({four}) -> {t3}
    %y = tensor.matmul %m2, %w : ({t3}, tensor<{d}x{d}xf32>) -> {t3}
    func.return %y : {t3}
  }}",
        perm_inv = match perm_pick % 3 {
            0 => "[0, 2, 1, 3]",
            1 => "[0, 1, 2, 3]",
            _ => "[0, 3, 1, 2]",
        }
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn random_attention_graphs_keep_their_numbers_through_o3(
        s in prop::sample::select(vec![4u64, 8, 12]),
        h in 1u64..4,
        hd in prop::sample::select(vec![4u64, 8, 6]),
        perm in 0usize..3,
        group in any::<bool>(),
        act in prop::sample::select(vec!["relu", "silu", "exp", "neg"]),
        target in prop::sample::select(vec!["mali", "adreno", "generic"]),
    ) {
        let driver = fbc::Driver::default();
        let m = parse(&driver, "g.fbir", graph(s, h, hd, perm, group, act));
        let after = o3(&driver, &m, target);
        prop_assert!(check_equivalent(&m, &after, "f", 3, Tolerance::F32).is_ok(),
            "{}", check_equivalent(&m, &after, "f", 3, Tolerance::F32).unwrap_err());
    }
}

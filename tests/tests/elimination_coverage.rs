//! Index-elimination coverage over the seven models of the FBLayout paper's Table 3: of the
//! reshape/transpose ops in their training graphs (published sizes, every layer), the share
//! `-O3` replaces by tile-level remapping (`index-elim`'s `eliminated` against `fallback`).
//! The paper reports "over 86%"; fbc's goal is 90%.
//!
//! The UNet's fallbacks are the NCHW ↔ token transposes around each transformer block
//! (`[N, C, H, W] → [N, H·W, C]`): they move the channel axis innermost, which no R-Tile over the
//! last two axes survives (the intra-tile continuity check). Everything else is eliminated.

use fbc_ir::pass::{PassContext, PassManager};

/// `(eliminated, fallback)` of `-O3` on `model`'s training graph with `opts`.
fn counts(driver: &fbc::Driver, model: &str, opts: &fbc_models::Options) -> (i64, i64) {
    let mut m = fbc_models::build(model, opts).unwrap_or_else(|e| panic!("fbc gen {model}: {e}"));
    let steps = driver.passes.parse_pipeline(fbc_transforms::pipeline_for_level(3)).unwrap();
    let profile = fbc_target::builtin("mali").unwrap();
    let mut cx = PassContext::new(&driver.ops);
    cx.target = &profile;
    PassManager::new(steps)
        .run(&mut m, &mut cx, &mut |_| {})
        .unwrap_or_else(|d| panic!("{model}: -O3 failed: {}", d[0].message));
    (cx.stats.get("index-elim", "eliminated"), cx.stats.get("index-elim", "fallback"))
}

#[test]
fn index_elimination_covers_90_percent_of_the_seven_models() {
    let driver = fbc::Driver::default();
    let training = |vocab: Option<u64>| fbc_models::Options {
        training: true,
        // The vocabulary only sizes the embedding and the head; no transform depends on it.
        vocab,
        ..Default::default()
    };
    let models = [
        ("llama3.2-1b", training(Some(512))),
        ("qwen2.5-1.5b", training(Some(512))),
        ("gemma2-2b", training(Some(512))),
        ("bert-large", training(None)),
        ("vit-large", training(None)),
        ("whisper-large-decoder", training(Some(512))),
        ("sd1.5-unet", training(None)),
    ];
    let (mut eliminated, mut total) = (0, 0);
    let mut lines = Vec::new();
    for (model, opts) in &models {
        let (e, f) = counts(&driver, model, opts);
        assert!(e > 0, "{model}: nothing eliminated");
        lines.push(format!("{model}: {e} of {}", e + f));
        eliminated += e;
        total += e + f;
    }
    let coverage = eliminated as f64 / total as f64;
    assert!(coverage >= 0.90, "coverage {coverage:.3}:\n{}", lines.join("\n"));
}

/// The UNet's only fallbacks are the transposes that move channels innermost or out of it, at
/// the two ends of every transformer block; every other chain goes.
#[test]
fn unet_fallbacks_are_the_channel_transposes() {
    let driver = fbc::Driver::default();
    let opts = fbc_models::Options {
        levels: Some(2),
        res_blocks: Some(1),
        latent: Some(16),
        channels: Some(64),
        batch: Some(1),
        training: true,
        ..Default::default()
    };
    let mut m = fbc_models::build("sd1.5-unet", &opts).unwrap();
    let steps = driver
        .passes
        .parse_pipeline("canonicalize,cse,fb-classify,rtile-candidates,rtile-select,tile-propagate")
        .unwrap();
    let profile = fbc_target::builtin("mali").unwrap();
    let mut cx = PassContext::new(&driver.ops);
    cx.target = &profile;
    PassManager::new(steps).run(&mut m, &mut cx, &mut |_| {}).unwrap();
    let mut fallbacks = 0;
    for op in m.all_ops() {
        let Some(why) = m.op(op).attr("fbc.tile_fallback").and_then(|a| a.as_str()) else {
            continue;
        };
        fallbacks += 1;
        let name = m.value(m.op(op).results[0]).name.as_deref().unwrap_or_default().to_string();
        // Forward: `%..._tokens` (NCHW → NLC); backward: the adjoint of `%..._grid`.
        // Forward `%B_tokens` (NCHW → NLC) and `%B_nchw` (back) of each transformer block `B`;
        // in the backward, their adjoints, named after the values they differentiate.
        let chain = ["_tokens", "_nchw", "_after_ff", "_proj_in"];
        assert!(chain.iter().any(|c| name.ends_with(c)), "%{name}: {why}");
        assert!(why.starts_with("R-Tile dimension dependency:"), "%{name}: {why}");
    }
    // Seven transformer blocks (down 2, mid 1, up 4); two chains each in @loss, in @loss_grad's
    // forward and in its backward, less the adjoint of the first block's input, which nothing
    // reads (no parameter comes before it).
    assert_eq!(fallbacks, 7 * 2 * 3 - 1);
}

//! The Whisper large-v3 decoder (the part the paper fine-tunes; footnote of Table 3):
//! `@loss(tokens, labels, mask, encoder_states, embed, pos_embed, l0_..., final_ln_g, final_ln_b)`.
//!
//! The encoder is frozen and not part of the graph: its output `encoder_states: [B, E, 1280]` is
//! an input. Embeddings are token embeddings plus learned positions (rows `0..S` of the 448-row
//! table). Each layer (pre-LN): LayerNorm → causal self-attention → residual; LayerNorm →
//! cross-attention (queries from the text, keys and values from `encoder_states`, no mask) →
//! residual; LayerNorm → GELU (erf) MLP → residual. LoRA on the Q, K, V projections of both
//! attentions and on both MLP matrices. Projections have biases except `k_proj`, as in the
//! checkpoint. Final LayerNorm, logits tied to the token embedding (`proj_out`), mean
//! cross-entropy against `labels` (shifted by the caller).
//!
//! Lengths: `--seq` is the number of text tokens (default 448, `max_target_positions`, the whole
//! decoder context, as the LLMs use S = 512); `--encoder-len` the number of encoder states
//! (default 300, the "300 frames" of the paper's Table 3; a full 30 s window gives 1500).

use fbc_ir::ElemType;

use super::blocks::{Attn, Gen, Lin};
use super::builder::{Graph, V};
use super::config::WhisperCfg;
use super::{Generated, Spec};

/// The argument name of weight `key` of layer `layer` (or of the embeddings and the final norm):
/// fbc's `l{i}_{key}`, or with `cfg.hf` the name in transformers'
/// `WhisperForConditionalGeneration` (`self_wq` → `model.decoder.layers.0.self_attn.q_proj.weight`).
fn wname(cfg: &WhisperCfg, layer: Option<u64>, key: &str) -> String {
    if !cfg.hf {
        return match layer {
            Some(i) => format!("l{i}_{key}"),
            None => key.to_string(),
        };
    }
    let l = format!("model.decoder.layers.{}.", layer.unwrap_or(0));
    let proj = |attn: &str, k: &str| {
        let which = match &k[1..] {
            "o" => "out",
            other => other,
        };
        let part = if k.starts_with('w') { "weight" } else { "bias" };
        format!("{l}{attn}.{which}_proj.{part}")
    };
    match key {
        "embed" => "model.decoder.embed_tokens.weight".into(),
        "pos_embed" => "model.decoder.embed_positions.weight".into(),
        "final_ln" => "model.decoder.layer_norm".into(),
        "self_ln" => format!("{l}self_attn_layer_norm"),
        "cross_ln" => format!("{l}encoder_attn_layer_norm"),
        "mlp_ln" => format!("{l}final_layer_norm"),
        "w1" => format!("{l}fc1.weight"),
        "b1" => format!("{l}fc1.bias"),
        "w2" => format!("{l}fc2.weight"),
        "b2" => format!("{l}fc2.bias"),
        k if k.starts_with("self_") => proj("self_attn", &k["self_".len()..]),
        k if k.starts_with("cross_") => proj("encoder_attn", &k["cross_".len()..]),
        other => format!("{l}{other}"),
    }
}

/// Attention with queries from `x` and keys/values from `kv_src`; `p` prefixes every name
/// (`l0_self_`), `kind` names its weights (`self_`, `cross_`) in layer `i`.
fn attention(
    gen: &mut Gen<'_>,
    cfg: &WhisperCfg,
    (i, kind): (u64, &str),
    p: &str,
    x: V,
    kv_src: V,
    mask: Option<V>,
) -> Result<V, String> {
    let n = |s: &str| format!("{p}{s}");
    let w = |key: &str| wname(cfg, Some(i), &format!("{kind}{key}"));
    let d = cfg.hidden;
    let (bq, bv, bo) = (w("bq"), w("bv"), w("bo"));
    let q = gen.linear(&n("q"), x, &w("wq"), d, Lin { bias: Some(&bq), lora: true })?;
    let k = gen.linear(&n("k"), kv_src, &w("wk"), d, Lin { bias: None, lora: true })?;
    let v = gen.linear(&n("v"), kv_src, &w("wv"), d, Lin { bias: Some(&bv), lora: true })?;
    let q = gen.split_heads(&n("q"), q, cfg.heads)?;
    let k = gen.split_heads(&n("k"), k, cfg.heads)?;
    let v = gen.split_heads(&n("v"), v, cfg.heads)?;
    let scale = 1.0 / ((d / cfg.heads) as f64).sqrt();
    let ctx = gen.attention(p, (q, k, v), Attn { scale, softcap: None, mask })?;
    let merged = gen.merge_heads(&n("ctx"), ctx)?;
    gen.linear(&n("out"), merged, &w("wo"), d, Lin { bias: Some(&bo), lora: false })
}

pub(crate) fn build(
    g: Graph<'_>,
    cfg: &WhisperCfg,
    module_name: &str,
    spec: &Spec,
) -> Result<Generated, String> {
    let (b, s, e, d) = (spec.batch, spec.seq, spec.encoder_len, cfg.hidden);
    let mut gen = Gen::new(g, spec.rank);
    gen.out_in = cfg.hf;
    let tokens = gen.g.arg("tokens", &[b, s], ElemType::I32);
    // A checkpoint's forward (`@logits`) has no labels.
    let labels = (!cfg.hf).then(|| gen.g.arg("labels", &[b, s], ElemType::I32));
    let mask = gen.g.weight("mask", &[s, s]);
    let enc = gen.g.weight("encoder_states", &[b, e, d]);
    let embed = gen.g.weight(&wname(cfg, None, "embed"), &[cfg.vocab, d]);
    let pos = gen.g.weight(&wname(cfg, None, "pos_embed"), &[cfg.max_target_positions, d]);
    let te = gen.g.embedding("tok_embeds", embed, tokens)?;
    let pe = gen.g.slice("pos_embeds", pos, &[0, 0], &[s, d])?;
    let mut x = gen.g.add("embeds", te, pe)?;
    for i in 0..spec.layers {
        let p = format!("l{i}_");
        let n = |s: &str| format!("{p}{s}");
        let w = |key: &str| wname(cfg, Some(i), key);
        let h = gen.layernorm(&w("self_ln"), &n("self_in"), x, cfg.norm_eps)?;
        let a = attention(&mut gen, cfg, (i, "self_"), &n("self_"), h, h, Some(mask))?;
        x = gen.g.add(&n("resid_self"), x, a)?;
        let h = gen.layernorm(&w("cross_ln"), &n("cross_in"), x, cfg.norm_eps)?;
        let a = attention(&mut gen, cfg, (i, "cross_"), &n("cross_"), h, enc, None)?;
        x = gen.g.add(&n("resid_cross"), x, a)?;
        let h = gen.layernorm(&w("mlp_ln"), &n("mlp_in"), x, cfg.norm_eps)?;
        let (b1, b2) = (w("b1"), w("b2"));
        let f = gen.linear(&n("fc1"), h, &w("w1"), cfg.ffn, Lin { bias: Some(&b1), lora: true })?;
        let f = gen.g.gelu(&n("fc1_act"), f, "none")?;
        let f = gen.linear(&n("fc2"), f, &w("w2"), d, Lin { bias: Some(&b2), lora: true })?;
        x = gen.g.add(&n("resid_mlp"), x, f)?;
    }
    let h = gen.layernorm(&wname(cfg, None, "final_ln"), "final_h", x, cfg.norm_eps)?;
    let logits = gen.g.matmul_bt("logits", h, embed)?;
    let Some(labels) = labels else {
        let module = gen.g.finish(module_name, "logits", &[logits])?;
        return Ok(Generated { module, func: "logits".into(), trainable: gen.trainable });
    };
    let flat = gen.g.reshape("logits_flat", logits, &[b * s, cfg.vocab])?;
    let labels_flat = gen.g.reshape("labels_flat", labels, &[b * s])?;
    let loss = gen.g.cross_entropy("loss", flat, labels_flat)?;
    let module = gen.g.finish(module_name, "loss", &[loss])?;
    Ok(Generated { module, func: "loss".into(), trainable: gen.trainable })
}

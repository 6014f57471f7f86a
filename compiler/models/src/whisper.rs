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

/// The keys and values an attention reads: projected from a source `[B, T, D]`, or given as
/// heads `[B, H, T, hd]` (an inference module's cross-attention cache).
#[derive(Debug, Clone, Copy)]
enum Kv {
    From(V),
    Heads(V, V),
}

/// A self-attention's caches `[B, H, M, hd]` and the run-time position its new keys and values
/// are written at.
#[derive(Debug, Clone, Copy)]
struct SelfCache {
    k: V,
    v: V,
    pos: V,
}

/// Attention with queries from `x` and keys/values `kv`; `p` prefixes every name (`l0_self_`),
/// `kind` names its weights (`self_`, `cross_`) in layer `i`. With a `cache`, the new keys and
/// values are written into it at its position and attention reads the whole cache. Returns the
/// output and the keys and values read, as heads (the updated caches, or the projected
/// encoder states of a cross-attention).
#[allow(clippy::too_many_arguments)]
fn attention(
    gen: &mut Gen<'_>,
    cfg: &WhisperCfg,
    (i, kind): (u64, &str),
    p: &str,
    x: V,
    kv: Kv,
    mask: Option<V>,
    cache: Option<SelfCache>,
) -> Result<(V, (V, V)), String> {
    let n = |s: &str| format!("{p}{s}");
    let w = |key: &str| wname(cfg, Some(i), &format!("{kind}{key}"));
    let d = cfg.hidden;
    let (bq, bv, bo) = (w("bq"), w("bv"), w("bo"));
    let q = gen.linear(&n("q"), x, &w("wq"), d, Lin { bias: Some(&bq), lora: true })?;
    let projected = match kv {
        Kv::From(src) => {
            let k = gen.linear(&n("k"), src, &w("wk"), d, Lin { bias: None, lora: true })?;
            let v = gen.linear(&n("v"), src, &w("wv"), d, Lin { bias: Some(&bv), lora: true })?;
            Some((k, v))
        }
        Kv::Heads(..) => None,
    };
    let q = gen.split_heads(&n("q"), q, cfg.heads)?;
    let (k, v) = match (projected, kv) {
        (Some((k, v)), _) => {
            (gen.split_heads(&n("k"), k, cfg.heads)?, gen.split_heads(&n("v"), v, cfg.heads)?)
        }
        (None, Kv::Heads(k, v)) => (k, v),
        (None, Kv::From(_)) => return Err("keys and values were not projected".into()),
    };
    let (k, v) = match cache {
        Some(c) => (
            gen.g.update_slice(&n("k_cache_out"), c.k, k, c.pos, 2)?,
            gen.g.update_slice(&n("v_cache_out"), c.v, v, c.pos, 2)?,
        ),
        None => (k, v),
    };
    let scale = 1.0 / ((d / cfg.heads) as f64).sqrt();
    let ctx = gen.attention(p, (q, k, v), Attn { scale, softcap: None, mask })?;
    let merged = gen.merge_heads(&n("ctx"), ctx)?;
    let out = gen.linear(&n("out"), merged, &w("wo"), d, Lin { bias: Some(&bo), lora: false })?;
    Ok((out, (k, v)))
}

/// The LayerNorm → GELU MLP → residual of layer `i`.
fn mlp(gen: &mut Gen<'_>, cfg: &WhisperCfg, i: u64, x: V) -> Result<V, String> {
    let n = |s: &str| format!("l{i}_{s}");
    let w = |key: &str| wname(cfg, Some(i), key);
    let h = gen.layernorm(&w("mlp_ln"), &n("mlp_in"), x, cfg.norm_eps)?;
    let (b1, b2) = (w("b1"), w("b2"));
    let f = gen.linear(&n("fc1"), h, &w("w1"), cfg.ffn, Lin { bias: Some(&b1), lora: true })?;
    let f = gen.g.gelu(&n("fc1_act"), f, "none")?;
    let f = gen.linear(&n("fc2"), f, &w("w2"), cfg.hidden, Lin { bias: Some(&b2), lora: true })?;
    gen.g.add(&n("resid_mlp"), x, f)
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
        let self_kv = Kv::From(h);
        let (a, _) =
            attention(&mut gen, cfg, (i, "self_"), &n("self_"), h, self_kv, Some(mask), None)?;
        x = gen.g.add(&n("resid_self"), x, a)?;
        let h = gen.layernorm(&w("cross_ln"), &n("cross_in"), x, cfg.norm_eps)?;
        let cross_kv = Kv::From(enc);
        let (a, _) =
            attention(&mut gen, cfg, (i, "cross_"), &n("cross_"), h, cross_kv, None, None)?;
        x = gen.g.add(&n("resid_cross"), x, a)?;
        x = mlp(&mut gen, cfg, i, x)?;
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

/// The inference module (`fbc gen whisper-large-decoder --inference`): `@prefill` over
/// `spec.seq` prompt tokens and `@decode` of one token,
///
/// ```text
/// @prefill(tokens [B, S] i32, pos i32, positions [B, S] i32, encoder_states [B, E, D], weights...,
///          l{i}_k_cache, l{i}_v_cache [B, H, M, hd] ...)
///   -> (logits [B, S, V], l{i}_k_cache, l{i}_v_cache ..., l{i}_cross_k, l{i}_cross_v [B, H, E, hd] ...)
/// @decode(tokens [B, 1] i32, pos i32, positions [B, 1] i32, weights...,
///         l{i}_k_cache, l{i}_v_cache ..., l{i}_cross_k, l{i}_cross_v ...)
///   -> (logits [B, 1, V], l{i}_k_cache, l{i}_v_cache ...)
/// ```
///
/// The self-attention writes its new keys and values into its caches at `pos` with
/// `tensor.update_slice` and attends over all `M` positions through `tensor.causal_mask` of
/// `pos`, as the decoder models do. The cross-attention's keys and values depend only on the
/// encoder states: `@prefill` projects them once and returns them as each layer's
/// cross-attention cache, which `@decode` reads as it is (no projection of the encoder states per
/// token). The learned positions are rows `positions` of the 448-row table, which the host fills
/// with `pos .. pos + S`.
pub(crate) fn build_inference(
    ops: &fbc_ir::OpRegistry,
    cfg: &WhisperCfg,
    module_name: &str,
    spec: &Spec,
) -> Result<Generated, String> {
    let mut m = fbc_ir::Module::new(Some(module_name.to_string()));
    for (func, s) in [("prefill", spec.seq), ("decode", 1)] {
        let (g, results) = inference_fn(Graph::new(ops), cfg, spec, s, func == "prefill")?;
        g.finish_into(&mut m, func, &results)?;
    }
    Ok(Generated { module: m, func: "decode".into(), trainable: Vec::new() })
}

/// One inference function over `s` new tokens (see [`build_inference`]): its graph and results.
fn inference_fn<'r>(
    g: Graph<'r>,
    cfg: &WhisperCfg,
    spec: &Spec,
    s: u64,
    prefill: bool,
) -> Result<(Graph<'r>, Vec<V>), String> {
    let (b, max, e, d) = (spec.batch, spec.max_seq, spec.encoder_len, cfg.hidden);
    let hd = d / cfg.heads;
    let mut gen = Gen::new(g, spec.rank);
    gen.out_in = cfg.hf;
    gen.quant = spec.quant;
    let tokens = gen.g.arg("tokens", &[b, s], ElemType::I32);
    let pos = gen.g.arg("pos", &[], ElemType::I32);
    let positions = gen.g.arg("positions", &[b, s], ElemType::I32);
    let mask = gen.g.causal_mask("mask", pos, s, max, 0)?;
    let enc = prefill.then(|| gen.g.weight("encoder_states", &[b, e, d]));
    let embed = gen.g.weight(&wname(cfg, None, "embed"), &[cfg.vocab, d]);
    let table = gen.g.weight(&wname(cfg, None, "pos_embed"), &[cfg.max_target_positions, d]);
    let te = gen.g.embedding("tok_embeds", embed, tokens)?;
    let pe = gen.g.embedding("pos_embeds", table, positions)?;
    let mut x = gen.g.add("embeds", te, pe)?;
    let (mut caches, mut cross) = (Vec::new(), Vec::new());
    for i in 0..spec.layers {
        let p = format!("l{i}_");
        let n = |s: &str| format!("{p}{s}");
        let w = |key: &str| wname(cfg, Some(i), key);
        let h = gen.layernorm(&w("self_ln"), &n("self_in"), x, cfg.norm_eps)?;
        let shape = [b, cfg.heads, max, hd];
        let cache = SelfCache {
            k: gen.g.weight(&n("k_cache"), &shape),
            v: gen.g.weight(&n("v_cache"), &shape),
            pos,
        };
        let (a, (k, v)) = attention(
            &mut gen,
            cfg,
            (i, "self_"),
            &n("self_"),
            h,
            Kv::From(h),
            Some(mask),
            Some(cache),
        )?;
        caches.extend([k, v]);
        x = gen.g.add(&n("resid_self"), x, a)?;
        let h = gen.layernorm(&w("cross_ln"), &n("cross_in"), x, cfg.norm_eps)?;
        let kv = match enc {
            Some(enc) => Kv::From(enc),
            None => {
                let shape = [b, cfg.heads, e, hd];
                Kv::Heads(gen.g.weight(&n("cross_k"), &shape), gen.g.weight(&n("cross_v"), &shape))
            }
        };
        let (a, (ck, cv)) =
            attention(&mut gen, cfg, (i, "cross_"), &n("cross_"), h, kv, None, None)?;
        if prefill {
            cross.extend([ck, cv]);
        }
        x = gen.g.add(&n("resid_cross"), x, a)?;
        x = mlp(&mut gen, cfg, i, x)?;
    }
    let h = gen.layernorm(&wname(cfg, None, "final_ln"), "final_h", x, cfg.norm_eps)?;
    let logits = gen.g.matmul_bt("logits", h, embed)?;
    // The self-attention caches, then the cross-attention caches, after the weights.
    gen.g.args_last(|name| name.ends_with("_cache"));
    gen.g.args_last(|name| name.ends_with("_cross_k") || name.ends_with("_cross_v"));
    let mut results = vec![logits];
    results.extend(caches);
    results.extend(cross);
    Ok((gen.g, results))
}

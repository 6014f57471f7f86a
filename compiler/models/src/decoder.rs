//! Decoder-only language models (Llama 3.2, Qwen 2.5, Gemma 2): `@loss(tokens, labels, mask,
//! rope_cos, rope_sin, embed, l0_..., final_norm) -> loss`.
//!
//! Per layer: RMSNorm → Q, K, V projections (+LoRA) → split into heads → RoPE on Q, K → GQA
//! expansion of K, V → `softmax(QKᵀ·scale + mask)·V` → merge heads → O projection → residual →
//! RMSNorm → gated MLP (+LoRA on gate, up, down) → residual. Then the final norm, the LM head
//! tied to the embedding table (`h · Eᵀ`) and the mean cross-entropy against `labels` (already
//! shifted by the caller: `labels[b, s]` is the token that follows position `s`).
//!
//! Inputs the host computes: `mask` is the additive causal mask `[S, S]` (0 on and below the
//! diagonal, a large negative value above); `rope_cos`, `rope_sin` are the `[S, head_dim]` tables
//! (each frequency repeated in both halves, as `rotate_half` expects) built from the model's
//! `rope_theta` and, for Llama 3.2, its `llama3` frequency scaling. Keeping them as arguments
//! keeps the graph free of position arithmetic and lets one graph serve any RoPE variant.
//!
//! Gemma 2 in addition: the embeddings are scaled by `√hidden`; every RMSNorm weight `w` is
//! applied as `1 + w` (an explicit `tensor.add` of a splat 1.0, so the arguments are the
//! checkpoint's own tensors); attention scores are scaled by `1/√query_pre_attn_scalar` and
//! soft-capped, `50 · tanh(s / 50)`; each sub-block output is normalised again (post-attention
//! and post-feed-forward norms) before its residual add; the logits are soft-capped at 30. The
//! sliding window (4096) of even-numbered layers only matters when `S > 4096`; then those layers
//! read a second mask, `mask_local` (an argument; in an inference module a windowed
//! `tensor.causal_mask`).

use fbc_dialects::kind::TensorOp;
use fbc_ir::{ElemType, Module, OpRegistry};

use super::blocks::{Attn, Gen, Lin};
use super::builder::{Graph, V};
use super::config::{DecoderCfg, GatedAct};
use super::{Generated, Spec};

/// The inputs every layer reads.
#[derive(Debug, Clone, Copy)]
struct Shared {
    mask: V,
    mask_local: Option<V>,
    cos: V,
    sin: V,
    /// Gemma's splat 1.0 `[hidden]`, for `1 + w`.
    one: Option<V>,
}

pub(crate) fn build(
    g: Graph<'_>,
    cfg: &DecoderCfg,
    module_name: &str,
    spec: &Spec,
) -> Result<Generated, String> {
    build_with(g, cfg, module_name, spec, false)
}

/// The forward graph up to the logits: `@logits(tokens [B, S], mask [S, S], rope_cos, rope_sin
/// [S, head_dim], weights...) -> logits [B, S, vocab]` (`fbc gen --from-hf` without
/// `--training`, whose logits are checked against the reference implementation).
pub(crate) fn build_logits(
    g: Graph<'_>,
    cfg: &DecoderCfg,
    module_name: &str,
    spec: &Spec,
) -> Result<Generated, String> {
    build_with(g, cfg, module_name, spec, true)
}

fn build_with(
    g: Graph<'_>,
    cfg: &DecoderCfg,
    module_name: &str,
    spec: &Spec,
    logits_only: bool,
) -> Result<Generated, String> {
    let (b, s) = (spec.batch, spec.seq);
    let mut gen = Gen::new(g, spec.rank);
    gen.out_in = cfg.hf;
    let mut labels = None;
    let (mut x, embed, shared) = inputs(&mut gen, cfg, b, s, s, &mut |gen| {
        if !logits_only {
            labels = Some(gen.g.arg("labels", &[b, s], ElemType::I32));
        }
        None
    })?;
    for i in 0..spec.layers {
        x = layer(&mut gen, cfg, &shared, i, x, None)?.0;
    }
    let logits = head(&mut gen, cfg, &shared, x, embed)?;
    if logits_only {
        let module = gen.g.finish(module_name, "logits", &[logits])?;
        return Ok(Generated { module, func: "logits".into(), trainable: gen.trainable });
    }
    let labels = labels.ok_or("no labels")?;
    let flat = gen.g.reshape("logits_flat", logits, &[b * s, cfg.vocab])?;
    let labels_flat = gen.g.reshape("labels_flat", labels, &[b * s])?;
    let loss = gen.g.cross_entropy("loss", flat, labels_flat)?;
    let module = gen.g.finish(module_name, "loss", &[loss])?;
    Ok(Generated { module, func: "loss".into(), trainable: gen.trainable })
}

/// The arguments before the layers' weights and what the layers share: `tokens [B, S]`, the
/// arguments `after_tokens` declares, the masks `[S, keys]` (Gemma's local one where `keys`
/// exceeds its sliding window), the RoPE tables `[S, head_dim]` and the embedding table; the
/// embedded tokens (scaled by √hidden for Gemma, which also gets its splat 1.0 for `1 + w`).
/// The masks are arguments the host fills, or where `after_tokens` returns the position of
/// the first token, `tensor.causal_mask` ops of it.
fn inputs(
    gen: &mut Gen<'_>,
    cfg: &DecoderCfg,
    b: u64,
    s: u64,
    keys: u64,
    after_tokens: &mut dyn FnMut(&mut Gen<'_>) -> Option<V>,
) -> Result<(V, V, Shared), String> {
    let tokens = gen.g.arg("tokens", &[b, s], ElemType::I32);
    let pos = after_tokens(gen);
    let window = cfg.gemma.map(|x| x.sliding_window).filter(|&w| keys > w);
    let (mask, mask_local) = match pos {
        Some(pos) => (
            gen.g.causal_mask("mask", pos, s, keys, 0)?,
            window.map(|w| gen.g.causal_mask("mask_local", pos, s, keys, w)).transpose()?,
        ),
        None => (
            gen.g.weight("mask", &[s, keys]),
            window.map(|_| gen.g.weight("mask_local", &[s, keys])),
        ),
    };
    let cos = gen.g.weight("rope_cos", &[s, cfg.head_dim]);
    let sin = gen.g.weight("rope_sin", &[s, cfg.head_dim]);
    let embed = gen.g.weight(&wname(cfg, None, "embed"), &[cfg.vocab, cfg.hidden]);

    let mut x = gen.g.embedding("embeds", embed, tokens)?;
    let one = if cfg.gemma.is_some() {
        // Gemma scales embeddings by √hidden (the `normalizer` of Gemma2Model).
        x = gen.g.scale("embeds_scaled", x, (cfg.hidden as f64).sqrt())?;
        Some(gen.g.constant("one", 1.0, &[cfg.hidden])?)
    } else {
        None
    };
    Ok((x, embed, Shared { mask, mask_local, cos, sin, one }))
}

/// The final norm and the LM head tied to the embedding table (`h · Eᵀ`), soft-capped for
/// Gemma: the logits.
fn head(gen: &mut Gen<'_>, cfg: &DecoderCfg, sh: &Shared, x: V, embed: V) -> Result<V, String> {
    let h = norm(gen, cfg, sh, &wname(cfg, None, "final_norm"), "final_h", x)?;
    let table = if cfg.tied {
        embed
    } else {
        gen.g.weight(&wname(cfg, None, "lm_head"), &[cfg.vocab, cfg.hidden])
    };
    let mut logits = gen.g.matmul_bt("logits", h, table)?;
    if let Some(gm) = cfg.gemma {
        let c = gm.final_softcap;
        let d = gen.g.scale("logits_div_cap", logits, 1.0 / c)?;
        let t = gen.g.unary("logits_tanh", TensorOp::Tanh, d)?;
        logits = gen.g.scale("logits_capped", t, c)?;
    }
    Ok(logits)
}

/// The inference module: `@prefill` over `spec.seq` prompt tokens and `@decode` of one token,
/// the same graph at two lengths `S`:
///
/// ```text
/// (tokens [B, S] i32, pos i32, rope_cos [S, hd], rope_sin [S, hd], weights...,
///  l{i}_k_cache, l{i}_v_cache [B, KV, M, hd] ...) -> (logits [B, S, V], the caches updated)
/// ```
///
/// Each layer writes its new keys (after RoPE) and values into its caches at `pos` with
/// `tensor.update_slice` (the seed's static per-layer KV region: no concatenation) and attends
/// over all `M` cache positions through `tensor.causal_mask` of `pos` (0 for `j ≤ pos + i`,
/// `-inf` elsewhere; Gemma's local layers also `j > pos + i - window`); the host gives the RoPE rows
/// of positions `pos .. pos + S` (`rope::tables`, from the settings each function records as
/// `fbc.rope`), so one graph serves any position. LoRA adapters only with `--lora-rank`.
pub(crate) fn build_inference(
    ops: &OpRegistry,
    cfg: &DecoderCfg,
    module_name: &str,
    spec: &Spec,
) -> Result<Generated, String> {
    let mut m = Module::new(Some(module_name.to_string()));
    for (func, s) in [("prefill", spec.seq), ("decode", 1)] {
        let (g, results) = inference_fn(Graph::new(ops), cfg, spec, s)?;
        g.finish_into(&mut m, func, &results)?;
    }
    // The host builds the RoPE tables (`fbc generate`): the model's settings go with the module.
    for f in m.func_ids().collect::<Vec<_>>() {
        let attrs = &mut m.func_mut(f).attrs;
        attrs.push((super::rope::ATTR.to_string(), super::rope::to_attr(&cfg.rope)));
    }
    Ok(Generated { module: m, func: "decode".into(), trainable: Vec::new() })
}

/// One inference function over `s` new tokens: its graph (caches as the last arguments) and its
/// results (logits, then every cache in argument order).
fn inference_fn<'r>(
    g: Graph<'r>,
    cfg: &DecoderCfg,
    spec: &Spec,
    s: u64,
) -> Result<(Graph<'r>, Vec<V>), String> {
    let (b, max) = (spec.batch, spec.max_seq);
    let mut gen = Gen::new(g, spec.rank);
    gen.out_in = cfg.hf;
    gen.quant = spec.quant;
    let mut pos = None;
    let (mut x, embed, shared) = inputs(&mut gen, cfg, b, s, max, &mut |gen| {
        pos = Some(gen.g.arg("pos", &[], ElemType::I32));
        pos
    })?;
    let pos = pos.ok_or("no position")?;
    let mut caches = Vec::new();
    let cache_shape = [b, cfg.kv_heads, max, cfg.head_dim];
    for i in 0..spec.layers {
        let k = gen.g.weight(&format!("l{i}_k_cache"), &cache_shape);
        let v = gen.g.weight(&format!("l{i}_v_cache"), &cache_shape);
        let (y, updated) = layer(&mut gen, cfg, &shared, i, x, Some(Cache { k, v, pos }))?;
        x = y;
        let (k, v) = updated.ok_or("a layer with a cache returned none")?;
        caches.extend([k, v]);
    }
    let logits = head(&mut gen, cfg, &shared, x, embed)?;
    gen.g.args_last(|name| name.ends_with("_cache"));
    let mut results = vec![logits];
    results.extend(caches);
    Ok((gen.g, results))
}

/// A layer's KV caches `[B, KV, max_seq, head_dim]` in an inference graph, and the position
/// its new keys and values are written at.
#[derive(Debug, Clone, Copy)]
struct Cache {
    k: V,
    v: V,
    pos: V,
}

/// The argument name of weight `key` (`wq`, `attn_norm`, ... of layer `layer`, or `embed`,
/// `final_norm`, `lm_head`): fbc's `l{i}_{key}`, or with `cfg.hf` the checkpoint's name in
/// `transformers`' Llama, Qwen2 and Gemma2 modules.
pub(crate) fn wname(cfg: &DecoderCfg, layer: Option<u64>, key: &str) -> String {
    if !cfg.hf {
        return match layer {
            Some(i) => format!("l{i}_{key}"),
            None => key.to_string(),
        };
    }
    let l = |s: &str| format!("model.layers.{}.{s}", layer.unwrap_or(0));
    let gemma = cfg.gemma.is_some();
    match key {
        "embed" => "model.embed_tokens.weight".into(),
        "final_norm" => "model.norm.weight".into(),
        "lm_head" => "lm_head.weight".into(),
        "attn_norm" => l("input_layernorm.weight"),
        "post_attn_norm" => l("post_attention_layernorm.weight"),
        // Gemma 2 normalises before and after the MLP; Llama and Qwen2 call the norm before it
        // `post_attention_layernorm`.
        "mlp_norm" if gemma => l("pre_feedforward_layernorm.weight"),
        "mlp_norm" => l("post_attention_layernorm.weight"),
        "post_mlp_norm" => l("post_feedforward_layernorm.weight"),
        "wq" | "wk" | "wv" | "wo" => l(&format!("self_attn.{}_proj.weight", &key[1..])),
        "bq" | "bk" | "bv" => l(&format!("self_attn.{}_proj.bias", &key[1..])),
        "wg" => l("mlp.gate_proj.weight"),
        "wu" => l("mlp.up_proj.weight"),
        "wd" => l("mlp.down_proj.weight"),
        other => l(other),
    }
}

/// RMSNorm with weight argument `w` (Gemma: applied as `1 + w`); the result is named `out`.
fn norm(
    gen: &mut Gen<'_>,
    cfg: &DecoderCfg,
    sh: &Shared,
    w: &str,
    out: &str,
    x: V,
) -> Result<V, String> {
    let d = gen.g.shape(x).last().copied().unwrap_or(0);
    let wv = gen.g.weight(w, &[d]);
    let gamma = match sh.one {
        Some(one) => gen.g.add(&format!("{w}_plus1"), wv, one)?,
        None => wv,
    };
    gen.g.rmsnorm(out, x, gamma, cfg.norm_eps)
}

/// One decoder layer on `x`; with a `cache`, the new keys and values are written into it and
/// attention reads the whole cache: the layer's output and the updated caches.
fn layer(
    gen: &mut Gen<'_>,
    cfg: &DecoderCfg,
    sh: &Shared,
    i: u64,
    x: V,
    cache: Option<Cache>,
) -> Result<(V, Option<(V, V)>), String> {
    let p = format!("l{i}_");
    let n = |s: &str| format!("{p}{s}");
    let w = |key: &str| wname(cfg, Some(i), key);
    let (h, kv, hd) = (cfg.heads, cfg.kv_heads, cfg.head_dim);

    // Attention.
    let a_in = norm(gen, cfg, sh, &w("attn_norm"), &n("attn_in"), x)?;
    let (bq, bk, bv) = (w("bq"), w("bk"), w("bv"));
    // Qwen2 has biases on the Q, K and V projections; LoRA goes on all three.
    fn lin(bias: &str, has_bias: bool) -> Lin<'_> {
        Lin { bias: Some(bias).filter(|_| has_bias), lora: true }
    }
    let q = gen.linear(&n("q"), a_in, &w("wq"), h * hd, lin(&bq, cfg.qkv_bias))?;
    let k = gen.linear(&n("k"), a_in, &w("wk"), kv * hd, lin(&bk, cfg.qkv_bias))?;
    let v = gen.linear(&n("v"), a_in, &w("wv"), kv * hd, lin(&bv, cfg.qkv_bias))?;
    let q = gen.split_heads(&n("q"), q, h)?;
    let k = gen.split_heads(&n("k"), k, kv)?;
    let v = gen.split_heads(&n("v"), v, kv)?;
    let q = gen.g.rope(&n("q_rot"), q, sh.cos, sh.sin)?;
    let k = gen.g.rope(&n("k_rot"), k, sh.cos, sh.sin)?;
    let (k, v, updated) = match cache {
        Some(c) => {
            let k = gen.g.update_slice(&n("k_cache_out"), c.k, k, c.pos, 2)?;
            let v = gen.g.update_slice(&n("v_cache_out"), c.v, v, c.pos, 2)?;
            (k, v, Some((k, v)))
        }
        None => (k, v, None),
    };
    let k = gen.expand_kv(&n("k"), k, h)?;
    let v = gen.expand_kv(&n("v"), v, h)?;
    let (scale, softcap) = match cfg.gemma {
        Some(gm) => (1.0 / gm.query_pre_attn_scalar.sqrt(), Some(gm.attn_softcap)),
        None => (1.0 / (hd as f64).sqrt(), None),
    };
    // Gemma 2's layer_types alternate sliding (even layers) and full attention.
    let mask = match sh.mask_local {
        Some(local) if i % 2 == 0 => local,
        _ => sh.mask,
    };
    let ctx = gen.attention(&p, (q, k, v), Attn { scale, softcap, mask: Some(mask) })?;
    let merged = gen.merge_heads(&n("ctx"), ctx)?;
    let mut o = gen.linear(&n("attn_out"), merged, &w("wo"), cfg.hidden, Lin::default())?;
    if cfg.gemma.is_some() {
        o = norm(gen, cfg, sh, &w("post_attn_norm"), &n("attn_out_normed"), o)?;
    }
    let x = gen.g.add(&n("resid_attn"), x, o)?;

    // Gated MLP.
    let m_in = norm(gen, cfg, sh, &w("mlp_norm"), &n("mlp_in"), x)?;
    let lora = Lin { bias: None, lora: true };
    let gate = gen.linear(&n("gate"), m_in, &w("wg"), cfg.ffn, lora)?;
    let up = gen.linear(&n("up"), m_in, &w("wu"), cfg.ffn, lora)?;
    let act = match cfg.act {
        GatedAct::Silu => gen.g.unary(&n("gate_act"), TensorOp::Silu, gate)?,
        GatedAct::GeluTanh => gen.g.gelu(&n("gate_act"), gate, "tanh")?,
    };
    let prod = gen.g.mul(&n("gated"), act, up)?;
    let mut down = gen.linear(&n("down"), prod, &w("wd"), cfg.hidden, lora)?;
    if cfg.gemma.is_some() {
        down = norm(gen, cfg, sh, &w("post_mlp_norm"), &n("down_normed"), down)?;
    }
    Ok((gen.g.add(&n("resid_mlp"), x, down)?, updated))
}

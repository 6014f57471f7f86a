//! Encoder-only models: BERT-Large (post-LayerNorm, LoRA) and ViT-Large (pre-LayerNorm, Houlsby
//! adapters), both with a classification head and a mean cross-entropy loss.
//!
//! BERT: `@loss(tokens, token_types, attn_mask, labels, word_embed, pos_embed, type_embed, ...)`.
//! Embeddings are the sum of word, learned position (rows `0..S` of the 512-row table, a
//! `tensor.slice`) and token-type embeddings, then LayerNorm. Each layer: Q, K, V (with biases,
//! +LoRA) → heads → `softmax(QKᵀ/√64 + attn_mask)·V` → O → residual → LayerNorm → GELU (erf) MLP
//! (+LoRA on both matrices) → residual → LayerNorm. `attn_mask` is BERT's additive padding mask
//! `[B, 1, 1, S]` (0 for tokens, a large negative value for padding). The head is BERT's
//! sequence-classification head: the pooler (`tanh` dense layer on the `[CLS]` position) and a
//! 2-way classifier, `labels: [B]`.
//!
//! ViT: `@loss(patches, labels, patch_w, patch_b, cls_token, pos_embed, ...)`. The 16×16
//! convolution of the patch embedding is a matmul on pre-extracted patches: `patches` is
//! `[B, 196, 768]`, each row one patch flattened in `(channel, row, column)` order, the order of
//! the convolution weight `[1024, 3, 16, 16]` flattened to `patch_w: [768, 1024]`. A learned
//! `[CLS]` token is broadcast over the batch and concatenated in front (197 positions), learned
//! positions added. Each layer (pre-LN): LayerNorm → attention (with biases) → O → adapter →
//! residual; LayerNorm → GELU MLP → adapter → residual. Final LayerNorm, the `[CLS]` row, the
//! 1000-way head, `labels: [B]`.
//!
//! Trainable (`wrt`): BERT's LoRA matrices and ViT's adapters, plus each model's task head (the
//! classifier, newly initialised for a downstream task, cannot stay frozen).

use fbc_dialects::kind::TensorOp;
use fbc_ir::ElemType;

use super::blocks::{Attn, Gen, Lin};
use super::builder::{Graph, V};
use super::config::EncoderCfg;
use super::{Generated, Spec};

/// The argument name of weight `key` of layer `layer` (or of the embeddings and heads): fbc's
/// `l{i}_{key}`, or with `cfg.hf` the name in transformers' `BertModel` (`vit` false) or
/// `ViTModel`. LayerNorm keys name the pair: `{key}_g`/`{key}_b`, or `.weight`/`.bias`.
fn ename(cfg: &EncoderCfg, vit: bool, layer: Option<u64>, key: &str) -> String {
    if !cfg.hf {
        return match layer {
            Some(i) => format!("l{i}_{key}"),
            None => key.to_string(),
        };
    }
    let l = |s: &str| format!("encoder.layer.{}.{s}", layer.unwrap_or(0));
    let attn = if vit { "attention.attention" } else { "attention.self" };
    match key {
        "wq" => l(&format!("{attn}.query.weight")),
        "bq" => l(&format!("{attn}.query.bias")),
        "wk" => l(&format!("{attn}.key.weight")),
        "bk" => l(&format!("{attn}.key.bias")),
        "wv" => l(&format!("{attn}.value.weight")),
        "bv" => l(&format!("{attn}.value.bias")),
        "wo" => l("attention.output.dense.weight"),
        "bo" => l("attention.output.dense.bias"),
        "w1" => l("intermediate.dense.weight"),
        "b1" => l("intermediate.dense.bias"),
        "w2" => l("output.dense.weight"),
        "b2" => l("output.dense.bias"),
        "attn_ln" if vit => l("layernorm_before"),
        "attn_ln" => l("attention.output.LayerNorm"),
        "mlp_ln" if vit => l("layernorm_after"),
        "mlp_ln" => l("output.LayerNorm"),
        "embed_ln" => "embeddings.LayerNorm".into(),
        "final_ln" => "layernorm".into(),
        "word_embed" => "embeddings.word_embeddings.weight".into(),
        "pos_embed" if vit => "embeddings.position_embeddings".into(),
        "pos_embed" => "embeddings.position_embeddings.weight".into(),
        "type_embed" => "embeddings.token_type_embeddings.weight".into(),
        "pooler_w" => "pooler.dense.weight".into(),
        "pooler_b" => "pooler.dense.bias".into(),
        "cls_token" => "embeddings.cls_token".into(),
        "patch_w" => "embeddings.patch_embeddings.projection.weight".into(),
        "patch_b" => "embeddings.patch_embeddings.projection.bias".into(),
        other => l(other),
    }
}

/// Self-attention of an encoder layer on `x: [B, S, D]` (no LoRA on O); returns the output
/// projection `[B, S, D]`.
fn self_attention(
    gen: &mut Gen<'_>,
    cfg: &EncoderCfg,
    (i, vit): (u64, bool),
    p: &str,
    x: V,
    lora: bool,
    mask: Option<V>,
) -> Result<V, String> {
    let n = |s: &str| format!("{p}{s}");
    let w = |key: &str| ename(cfg, vit, Some(i), key);
    let d = cfg.hidden;
    let (bq, bk, bv, bo) = (w("bq"), w("bk"), w("bv"), w("bo"));
    let q = gen.linear(&n("q"), x, &w("wq"), d, Lin { bias: Some(&bq), lora })?;
    let k = gen.linear(&n("k"), x, &w("wk"), d, Lin { bias: Some(&bk), lora })?;
    let v = gen.linear(&n("v"), x, &w("wv"), d, Lin { bias: Some(&bv), lora })?;
    let q = gen.split_heads(&n("q"), q, cfg.heads)?;
    let k = gen.split_heads(&n("k"), k, cfg.heads)?;
    let v = gen.split_heads(&n("v"), v, cfg.heads)?;
    let scale = 1.0 / ((d / cfg.heads) as f64).sqrt();
    let ctx = gen.attention(p, (q, k, v), Attn { scale, softcap: None, mask })?;
    let merged = gen.merge_heads(&n("ctx"), ctx)?;
    gen.linear(&n("attn_out"), merged, &w("wo"), d, Lin { bias: Some(&bo), lora: false })
}

/// `fc2(gelu(fc1(x)))` with biases; LoRA on both when `lora`.
fn mlp(
    gen: &mut Gen<'_>,
    cfg: &EncoderCfg,
    (i, vit): (u64, bool),
    p: &str,
    x: V,
    lora: bool,
) -> Result<V, String> {
    let n = |s: &str| format!("{p}{s}");
    let w = |key: &str| ename(cfg, vit, Some(i), key);
    let (b1, b2) = (w("b1"), w("b2"));
    let h = gen.linear(&n("fc1"), x, &w("w1"), cfg.ffn, Lin { bias: Some(&b1), lora })?;
    let a = gen.g.gelu(&n("fc1_act"), h, "none")?;
    gen.linear(&n("fc2"), a, &w("w2"), cfg.hidden, Lin { bias: Some(&b2), lora })
}

/// The classification head on `x: [B, D]`: `x · W + b` with trainable `{w}_w`, `{w}_b`, then the mean
/// cross-entropy against `labels: [B]`.
fn head(gen: &mut Gen<'_>, x: V, classes: u64, labels: V, w: &str) -> Result<V, String> {
    let d = gen.g.shape(x).last().copied().unwrap_or(0);
    let wv = gen.param(&format!("{w}_w"), &[d, classes]);
    let bv = gen.param(&format!("{w}_b"), &[classes]);
    let l = gen.g.matmul("logits_base", x, wv)?;
    let l = gen.g.add("logits", l, bv)?;
    gen.g.cross_entropy("loss", l, labels)
}

/// `x[:, 0, :]` of `x: [B, S, D]`, as `[B, D]`.
fn first_token(gen: &mut Gen<'_>, name: &str, x: V) -> Result<V, String> {
    let [b, _, d] = gen.dims(x)?;
    let c = gen.g.slice(&format!("{name}_row"), x, &[0, 0, 0], &[b, 1, d])?;
    gen.g.reshape(name, c, &[b, d])
}

pub(crate) fn build_bert(
    g: Graph<'_>,
    cfg: &EncoderCfg,
    module_name: &str,
    spec: &Spec,
) -> Result<Generated, String> {
    let (b, s, d) = (spec.batch, spec.seq, cfg.hidden);
    let mut gen = Gen::new(g, spec.rank);
    gen.out_in = cfg.hf;
    let e = |key: &str| ename(cfg, false, None, key);
    let tokens = gen.g.arg("tokens", &[b, s], ElemType::I32);
    let types = gen.g.arg("token_types", &[b, s], ElemType::I32);
    let mask = gen.g.weight("attn_mask", &[b, 1, 1, s]);
    // A checkpoint's forward (`@encode`) has no task head and no labels.
    let labels = (!cfg.hf).then(|| gen.g.arg("labels", &[b], ElemType::I32));
    let word = gen.g.weight(&e("word_embed"), &[cfg.vocab, d]);
    let pos = gen.g.weight(&e("pos_embed"), &[cfg.max_positions, d]);
    let typ = gen.g.weight(&e("type_embed"), &[cfg.type_vocab, d]);
    let we = gen.g.embedding("word_embeds", word, tokens)?;
    let pe = gen.g.slice("pos_embeds", pos, &[0, 0], &[s, d])?;
    let te = gen.g.embedding("type_embeds", typ, types)?;
    let e = gen.g.add("embeds_wp", we, pe)?;
    let e = gen.g.add("embeds_sum", e, te)?;
    let embed_ln = ename(cfg, false, None, "embed_ln");
    let mut x = gen.layernorm(&embed_ln, "embeds", e, cfg.norm_eps)?;
    for i in 0..spec.layers {
        let p = format!("l{i}_");
        let n = |s: &str| format!("{p}{s}");
        let w = |key: &str| ename(cfg, false, Some(i), key);
        let a = self_attention(&mut gen, cfg, (i, false), &p, x, true, Some(mask))?;
        let r = gen.g.add(&n("resid_attn"), x, a)?;
        let h = gen.layernorm(&w("attn_ln"), &n("attn_normed"), r, cfg.norm_eps)?;
        let m = mlp(&mut gen, cfg, (i, false), &p, h, true)?;
        let r = gen.g.add(&n("resid_mlp"), h, m)?;
        x = gen.layernorm(&w("mlp_ln"), &n("out"), r, cfg.norm_eps)?;
    }
    let cls = first_token(&mut gen, "cls", x)?;
    let pw = gen.g.weight(&ename(cfg, false, None, "pooler_w"), &[d, d]);
    let pb = gen.g.weight(&ename(cfg, false, None, "pooler_b"), &[d]);
    let pooled = gen.times_weight("pooled_base", cls, pw)?;
    let pooled = gen.g.add("pooled_biased", pooled, pb)?;
    let pooled = gen.g.unary("pooled", TensorOp::Tanh, pooled)?;
    let Some(labels) = labels else {
        let module = gen.g.finish(module_name, "encode", &[x, pooled])?;
        return Ok(Generated { module, func: "encode".into(), trainable: gen.trainable });
    };
    let loss = head(&mut gen, pooled, cfg.labels, labels, "classifier")?;
    let module = gen.g.finish(module_name, "loss", &[loss])?;
    Ok(Generated { module, func: "loss".into(), trainable: gen.trainable })
}

pub(crate) fn build_vit(
    g: Graph<'_>,
    cfg: &EncoderCfg,
    module_name: &str,
    spec: &Spec,
) -> Result<Generated, String> {
    let (b, d) = (spec.batch, cfg.hidden);
    let patches = (cfg.image / cfg.patch) * (cfg.image / cfg.patch);
    let patch_dim = cfg.channels * cfg.patch * cfg.patch;
    let mut gen = Gen::new(g, spec.rank);
    gen.out_in = cfg.hf;
    let e = |key: &str| ename(cfg, true, None, key);
    let px = gen.g.weight("patches", &[b, patches, patch_dim]);
    let labels = (!cfg.hf).then(|| gen.g.arg("labels", &[b], ElemType::I32));
    let pw = if cfg.hf {
        // The checkpoint's convolution weight [D, C, P, P] read as [D, C·P·P] (a view).
        let conv = gen.g.weight(&e("patch_w"), &[d, cfg.channels, cfg.patch, cfg.patch]);
        gen.g.reshape("patch_w_rows", conv, &[d, patch_dim])?
    } else {
        gen.g.weight(&e("patch_w"), &[patch_dim, d])
    };
    let pb = gen.g.weight(&e("patch_b"), &[d]);
    let cls = gen.g.weight(&e("cls_token"), &[1, 1, d]);
    // A checkpoint's position table is [1, N + 1, D].
    let pos_shape: &[u64] = if cfg.hf { &[1, patches + 1, d] } else { &[patches + 1, d] };
    let pos = gen.g.weight(&e("pos_embed"), pos_shape);
    let e = gen.times_weight("patch_embeds_base", px, pw)?;
    let e = gen.g.add("patch_embeds", e, pb)?;
    let c = gen.g.broadcast("cls_embeds", cls, &[b, 1, d])?;
    let e = gen.g.concat("cls_and_patches", &[c, e], 1)?;
    let mut x = gen.g.add("embeds", e, pos)?;
    let adapters = spec.rank > 0;
    for i in 0..spec.layers {
        let p = format!("l{i}_");
        let n = |s: &str| format!("{p}{s}");
        let w = |key: &str| ename(cfg, true, Some(i), key);
        let h = gen.layernorm(&w("attn_ln"), &n("attn_in"), x, cfg.norm_eps)?;
        let mut a = self_attention(&mut gen, cfg, (i, true), &p, h, false, None)?;
        if adapters {
            a = gen.adapter(&n("attn_adapter"), a)?;
        }
        x = gen.g.add(&n("resid_attn"), x, a)?;
        let h = gen.layernorm(&w("mlp_ln"), &n("mlp_in"), x, cfg.norm_eps)?;
        let mut m = mlp(&mut gen, cfg, (i, true), &p, h, false)?;
        if adapters {
            m = gen.adapter(&n("mlp_adapter"), m)?;
        }
        x = gen.g.add(&n("resid_mlp"), x, m)?;
    }
    let x = gen.layernorm(&ename(cfg, true, None, "final_ln"), "final_h", x, cfg.norm_eps)?;
    let Some(labels) = labels else {
        let module = gen.g.finish(module_name, "encode", &[x])?;
        return Ok(Generated { module, func: "encode".into(), trainable: gen.trainable });
    };
    let cls = first_token(&mut gen, "cls", x)?;
    let loss = head(&mut gen, cls, cfg.labels, labels, "head")?;
    let module = gen.g.finish(module_name, "loss", &[loss])?;
    Ok(Generated { module, func: "loss".into(), trainable: gen.trainable })
}

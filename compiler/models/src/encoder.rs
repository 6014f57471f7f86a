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
use super::config::{
    EncoderCfg, BERT_MAX_POSITIONS, BERT_TYPE_VOCAB, BERT_VOCAB, VIT_CHANNELS, VIT_IMAGE, VIT_PATCH,
};
use super::{Generated, Spec};

/// Self-attention of an encoder layer on `x: [B, S, D]` (no LoRA on O); returns the output
/// projection `[B, S, D]`.
fn self_attention(
    gen: &mut Gen<'_>,
    cfg: &EncoderCfg,
    p: &str,
    x: V,
    lora: bool,
    mask: Option<V>,
) -> Result<V, String> {
    let n = |s: &str| format!("{p}{s}");
    let d = cfg.hidden;
    let (bq, bk, bv, bo) = (n("bq"), n("bk"), n("bv"), n("bo"));
    let q = gen.linear(&n("q"), x, &n("wq"), d, Lin { bias: Some(&bq), lora })?;
    let k = gen.linear(&n("k"), x, &n("wk"), d, Lin { bias: Some(&bk), lora })?;
    let v = gen.linear(&n("v"), x, &n("wv"), d, Lin { bias: Some(&bv), lora })?;
    let q = gen.split_heads(&n("q"), q, cfg.heads)?;
    let k = gen.split_heads(&n("k"), k, cfg.heads)?;
    let v = gen.split_heads(&n("v"), v, cfg.heads)?;
    let scale = 1.0 / ((d / cfg.heads) as f64).sqrt();
    let ctx = gen.attention(p, (q, k, v), Attn { scale, softcap: None, mask })?;
    let merged = gen.merge_heads(&n("ctx"), ctx)?;
    gen.linear(&n("attn_out"), merged, &n("wo"), d, Lin { bias: Some(&bo), lora: false })
}

/// `fc2(gelu(fc1(x)))` with biases; LoRA on both when `lora`.
fn mlp(gen: &mut Gen<'_>, cfg: &EncoderCfg, p: &str, x: V, lora: bool) -> Result<V, String> {
    let n = |s: &str| format!("{p}{s}");
    let (b1, b2) = (n("b1"), n("b2"));
    let h = gen.linear(&n("fc1"), x, &n("w1"), cfg.ffn, Lin { bias: Some(&b1), lora })?;
    let a = gen.g.gelu(&n("fc1_act"), h, "none")?;
    gen.linear(&n("fc2"), a, &n("w2"), cfg.hidden, Lin { bias: Some(&b2), lora })
}

/// LayerNorm with gamma/beta arguments `{w}_g`, `{w}_b`; the result is named `out`.
fn ln(gen: &mut Gen<'_>, w: &str, out: &str, x: V, eps: f64) -> Result<V, String> {
    let d = gen.g.shape(x).last().copied().unwrap_or(0);
    let gamma = gen.g.weight(&format!("{w}_g"), &[d]);
    let beta = gen.g.weight(&format!("{w}_b"), &[d]);
    gen.g.layernorm(out, x, gamma, beta, eps)
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
    let tokens = gen.g.arg("tokens", &[b, s], ElemType::I32);
    let types = gen.g.arg("token_types", &[b, s], ElemType::I32);
    let mask = gen.g.weight("attn_mask", &[b, 1, 1, s]);
    let labels = gen.g.arg("labels", &[b], ElemType::I32);
    let word = gen.g.weight("word_embed", &[BERT_VOCAB, d]);
    let pos = gen.g.weight("pos_embed", &[BERT_MAX_POSITIONS, d]);
    let typ = gen.g.weight("type_embed", &[BERT_TYPE_VOCAB, d]);
    let we = gen.g.embedding("word_embeds", word, tokens)?;
    let pe = gen.g.slice("pos_embeds", pos, &[0, 0], &[s, d])?;
    let te = gen.g.embedding("type_embeds", typ, types)?;
    let e = gen.g.add("embeds_wp", we, pe)?;
    let e = gen.g.add("embeds_sum", e, te)?;
    let mut x = ln(&mut gen, "embed_ln", "embeds", e, cfg.norm_eps)?;
    for i in 0..spec.layers {
        let p = format!("l{i}_");
        let n = |s: &str| format!("{p}{s}");
        let a = self_attention(&mut gen, cfg, &p, x, true, Some(mask))?;
        let r = gen.g.add(&n("resid_attn"), x, a)?;
        let h = ln(&mut gen, &n("attn_ln"), &n("attn_normed"), r, cfg.norm_eps)?;
        let m = mlp(&mut gen, cfg, &p, h, true)?;
        let r = gen.g.add(&n("resid_mlp"), h, m)?;
        x = ln(&mut gen, &n("mlp_ln"), &n("out"), r, cfg.norm_eps)?;
    }
    let cls = first_token(&mut gen, "cls", x)?;
    let pw = gen.g.weight("pooler_w", &[d, d]);
    let pb = gen.g.weight("pooler_b", &[d]);
    let pooled = gen.g.matmul("pooled_base", cls, pw)?;
    let pooled = gen.g.add("pooled_biased", pooled, pb)?;
    let pooled = gen.g.unary("pooled", TensorOp::Tanh, pooled)?;
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
    let patches = (VIT_IMAGE / VIT_PATCH) * (VIT_IMAGE / VIT_PATCH);
    let patch_dim = VIT_CHANNELS * VIT_PATCH * VIT_PATCH;
    let mut gen = Gen::new(g, spec.rank);
    let px = gen.g.weight("patches", &[b, patches, patch_dim]);
    let labels = gen.g.arg("labels", &[b], ElemType::I32);
    let pw = gen.g.weight("patch_w", &[patch_dim, d]);
    let pb = gen.g.weight("patch_b", &[d]);
    let cls = gen.g.weight("cls_token", &[1, 1, d]);
    let pos = gen.g.weight("pos_embed", &[patches + 1, d]);
    let e = gen.g.matmul("patch_embeds_base", px, pw)?;
    let e = gen.g.add("patch_embeds", e, pb)?;
    let c = gen.g.broadcast("cls_embeds", cls, &[b, 1, d])?;
    let e = gen.g.concat("cls_and_patches", &[c, e], 1)?;
    let mut x = gen.g.add("embeds", e, pos)?;
    let adapters = spec.rank > 0;
    for i in 0..spec.layers {
        let p = format!("l{i}_");
        let n = |s: &str| format!("{p}{s}");
        let h = ln(&mut gen, &n("attn_ln"), &n("attn_in"), x, cfg.norm_eps)?;
        let mut a = self_attention(&mut gen, cfg, &p, h, false, None)?;
        if adapters {
            a = gen.adapter(&n("attn_adapter"), a)?;
        }
        x = gen.g.add(&n("resid_attn"), x, a)?;
        let h = ln(&mut gen, &n("mlp_ln"), &n("mlp_in"), x, cfg.norm_eps)?;
        let mut m = mlp(&mut gen, cfg, &p, h, false)?;
        if adapters {
            m = gen.adapter(&n("mlp_adapter"), m)?;
        }
        x = gen.g.add(&n("resid_mlp"), x, m)?;
    }
    let x = ln(&mut gen, "final_ln", "final_h", x, cfg.norm_eps)?;
    let cls = first_token(&mut gen, "cls", x)?;
    let loss = head(&mut gen, cls, cfg.labels, labels, "head")?;
    let module = gen.g.finish(module_name, "loss", &[loss])?;
    Ok(Generated { module, func: "loss".into(), trainable: gen.trainable })
}

//! Stable Diffusion v1.5's denoising UNet, fine-tuned with LoRA (the seventh model of the
//! FBLayout paper's Table 3): `@loss(noisy_latents, timesteps, text_states, noise, time_table,
//! weights...)`, the mean squared error between the predicted and the true noise, as diffusers'
//! `train_text_to_image_lora.py` computes it.
//!
//! The graph follows diffusers' `UNet2DConditionModel` with the v1.5 configuration
//! ([`UnetCfg`]), every tensor in NCHW:
//! - **time embedding**: the sinusoidal projection of the integer timestep is a row of the fixed
//!   table `time_table: [1000, C]` (row `t` = `[cos(t·f), sin(t·f)]`, `f_i = 10000^(−i/(C/2))`:
//!   `flip_sin_to_cos`, `freq_shift 0`), gathered by `tensor.embedding`, so no sine op is needed
//!   and the result is exact for the integer timesteps training samples; then
//!   `linear(C → 4C) → SiLU → linear(4C → 4C)`;
//! - `conv_in` (3×3, 4 → C);
//! - **down levels** `i = 0..levels`: `res_blocks` ResNet blocks of `channel_mult[i]·C` channels,
//!   each followed by a transformer block where the level has attention; a 3×3 stride-2
//!   convolution after every level but the last;
//! - **mid block**: ResNet, transformer, ResNet at the last level's width;
//! - **up levels** in reverse, `res_blocks + 1` ResNet blocks each, every one taking the channel
//!   concatenation with the matching skip (the down path's outputs, last first), a transformer
//!   block after each where the level has attention, nearest ×2 upsampling and a 3×3 convolution
//!   after every level but the last;
//! - `GroupNorm → SiLU → conv_out` (3×3, C → 4).
//!
//! A **ResNet block** is `GroupNorm → SiLU → conv3×3 → + time_proj(SiLU(temb))[:, :, None, None]
//! → GroupNorm → SiLU → conv3×3`, plus the input (through a 1×1 convolution where the channel
//! count changes). A **transformer block** (`Transformer2DModel` with one
//! `BasicTransformerBlock`) is `GroupNorm (eps 1e-6) → conv1×1 → [N, C, H, W] → [N, H·W, C]`,
//! then pre-LayerNorm self-attention, cross-attention to `text_states: [N, 77, 768]`, and a GEGLU
//! feed-forward (`linear(C → 8C)`, halves `h`, `g`, `h · gelu(g)`, `linear(4C → C)`), each with
//! its residual, then back to NCHW, a 1×1 convolution and the block's input added. Attention has
//! 8 heads, no bias on `q`, `k`, `v` and a bias on the output projection.
//!
//! LoRA adapters sit where diffusers' LoRA script puts them: `to_q`, `to_k`, `to_v` and
//! `to_out.0` of both attentions of every transformer block. Everything else is frozen. The
//! dropout of training is the identity here (p = 0 in the released config).

use fbc_dialects::kind::TensorOp;
use fbc_ir::ElemType;

use super::blocks::{Attn, Gen, Lin};
use super::builder::{Graph, V};
use super::config::UnetCfg;
use super::Generated;

/// The sizes of one generation: the configuration with `fbc gen`'s reductions applied.
#[derive(Debug, Clone, Copy)]
pub(crate) struct UnetShape {
    pub batch: u64,
    /// Side of the square latent (64 for 512×512 images).
    pub latent: u64,
    /// Number of resolution levels (4 in the release).
    pub levels: u64,
    /// ResNet blocks per down level (`layers_per_block`; up levels have one more).
    pub res_blocks: u64,
    /// Width of the first level (320 in the release).
    pub channels: u64,
}

struct Unet<'r, 'c> {
    gen: Gen<'r>,
    cfg: &'c UnetCfg,
    /// `SiLU(temb)`, `[N, 4C]`: what every ResNet block projects (diffusers applies the SiLU in
    /// each block; it is the same value).
    temb_act: V,
    /// The text encoder's states, `[N, 77, 768]`.
    text: V,
}

impl Unet<'_, '_> {
    fn channels(&self, x: V) -> u64 {
        self.gen.g.shape(x).get(1).copied().unwrap_or(0)
    }

    /// A convolution `{p}` of `x` to `out` channels with a `k`×`k` kernel (padding `k/2`),
    /// frozen weight `{p}_w: [out, C, k, k]` and bias `{p}_b: [out]`.
    fn conv(&mut self, p: &str, x: V, out: u64, k: u64, stride: u64) -> Result<V, String> {
        let c = self.channels(x);
        let w = self.gen.g.weight(&format!("{p}_w"), &[out, c, k, k]);
        let b = self.gen.g.weight(&format!("{p}_b"), &[out]);
        self.gen.g.conv2d(p, (x, w, Some(b)), stride, k / 2)
    }

    /// `GroupNorm` `{p}` of `x` with frozen `{p}_g`, `{p}_b`.
    fn group_norm(&mut self, p: &str, x: V, eps: f64) -> Result<V, String> {
        let c = self.channels(x);
        let g = self.gen.g.weight(&format!("{p}_g"), &[c]);
        let b = self.gen.g.weight(&format!("{p}_b"), &[c]);
        self.gen.g.group_norm(p, (x, g, b), self.cfg.norm_groups, eps)
    }

    /// `SiLU(GroupNorm(x))`; the result is named `{p}_act`.
    fn norm_silu(&mut self, p: &str, x: V) -> Result<V, String> {
        let h = self.group_norm(p, x, self.cfg.norm_eps)?;
        self.gen.g.unary(&format!("{p}_act"), TensorOp::Silu, h)
    }

    /// diffusers' `ResnetBlock2D` from `x`'s channels to `out`.
    fn resnet(&mut self, p: &str, x: V, out: u64) -> Result<V, String> {
        let n = |s: &str| format!("{p}_{s}");
        let [b, c, _, _] = self.gen.dims(x)?;
        let h = self.norm_silu(&n("norm1"), x)?;
        let h = self.conv(&n("conv1"), h, out, 3, 1)?;
        let lin = Lin { bias: Some(&n("time_proj_b")), lora: false };
        let t = self.gen.linear(&n("time_proj"), self.temb_act, &n("time_proj_w"), out, lin)?;
        let t = self.gen.g.reshape(&n("time_proj_nchw"), t, &[b, out, 1, 1])?;
        let h = self.gen.g.add(&n("with_time"), h, t)?;
        let h = self.norm_silu(&n("norm2"), h)?;
        let h = self.conv(&n("conv2"), h, out, 3, 1)?;
        let skip = if c == out { x } else { self.conv(&n("shortcut"), x, out, 1, 1)? };
        self.gen.g.add(p, skip, h)
    }

    /// diffusers' `Attention` with queries from `x: [N, L, C]` and keys and values from `ctx`,
    /// LoRA on all four projections.
    fn attention(&mut self, p: &str, x: V, ctx: V) -> Result<V, String> {
        let n = |s: &str| format!("{p}_{s}");
        let c = self.gen.g.shape(x).last().copied().unwrap_or(0);
        let plain = Lin { bias: None, lora: true };
        let q = self.gen.linear(&n("q"), x, &n("q_w"), c, plain)?;
        let k = self.gen.linear(&n("k"), ctx, &n("k_w"), c, plain)?;
        let v = self.gen.linear(&n("v"), ctx, &n("v_w"), c, plain)?;
        let heads = self.cfg.heads;
        let q = self.gen.split_heads(&n("q"), q, heads)?;
        let k = self.gen.split_heads(&n("k"), k, heads)?;
        let v = self.gen.split_heads(&n("v"), v, heads)?;
        let scale = 1.0 / ((c / heads.max(1)) as f64).sqrt();
        let ctx =
            self.gen.attention(&n(""), (q, k, v), Attn { scale, softcap: None, mask: None })?;
        let merged = self.gen.merge_heads(&n("ctx"), ctx)?;
        let out = Lin { bias: Some(&n("out_b")), lora: true };
        self.gen.linear(&n("out"), merged, &n("out_w"), c, out)
    }

    /// The module of `@loss` = the mean of `(pred − target)²` (named `{err}`, `{err}_sq`).
    fn mse_loss(
        mut self,
        module: &str,
        err: &str,
        pred: V,
        target: V,
    ) -> Result<Generated, String> {
        let e = self.gen.g.sub(err, pred, target)?;
        let sq = self.gen.g.mul(&format!("{err}_sq"), e, e)?;
        let loss = self.gen.g.mean_all("loss", sq)?;
        let module = self.gen.g.finish(module, "loss", &[loss])?;
        Ok(Generated { module, func: "loss".into(), trainable: self.gen.trainable })
    }

    /// diffusers' `Transformer2DModel` with one `BasicTransformerBlock`, on `x: [N, C, H, W]`.
    fn transformer(&mut self, p: &str, x: V) -> Result<V, String> {
        let n = |s: &str| format!("{p}_{s}");
        let [b, c, hh, ww] = self.gen.dims(x)?;
        let h = self.group_norm(&n("norm"), x, self.cfg.transformer_norm_eps)?;
        let h = self.conv(&n("proj_in"), h, c, 1, 1)?;
        let h = self.gen.g.transpose(&n("nhwc"), h, &[0, 2, 3, 1])?;
        let mut h = self.gen.g.reshape(&n("tokens"), h, &[b, hh * ww, c])?;
        let eps = self.cfg.layer_norm_eps;

        let a = self.gen.layernorm(&n("ln1"), &n("ln1_out"), h, eps)?;
        let a = self.attention(&n("attn1"), a, a)?;
        h = self.gen.g.add(&n("after_attn1"), h, a)?;
        let a = self.gen.layernorm(&n("ln2"), &n("ln2_out"), h, eps)?;
        let a = self.attention(&n("attn2"), a, self.text)?;
        h = self.gen.g.add(&n("after_attn2"), h, a)?;

        let a = self.gen.layernorm(&n("ln3"), &n("ln3_out"), h, eps)?;
        let inner = self.cfg.ff_mult * c;
        let lin = Lin { bias: Some(&n("ff_proj_b")), lora: false };
        let f = self.gen.linear(&n("ff_proj"), a, &n("ff_proj_w"), 2 * inner, lin)?;
        let l = hh * ww;
        let hid = self.gen.g.slice(&n("ff_hidden"), f, &[0, 0, 0], &[b, l, inner])?;
        let gate = self.gen.g.slice(&n("ff_gate"), f, &[0, 0, inner], &[b, l, 2 * inner])?;
        let gate = self.gen.g.gelu(&n("ff_gate_act"), gate, "none")?;
        let f = self.gen.g.mul(&n("ff_geglu"), hid, gate)?;
        let lin = Lin { bias: Some(&n("ff_out_b")), lora: false };
        let f = self.gen.linear(&n("ff_out"), f, &n("ff_out_w"), c, lin)?;
        h = self.gen.g.add(&n("after_ff"), h, f)?;

        let h = self.gen.g.reshape(&n("grid"), h, &[b, hh, ww, c])?;
        let h = self.gen.g.transpose(&n("nchw"), h, &[0, 3, 1, 2])?;
        let h = self.conv(&n("proj_out"), h, c, 1, 1)?;
        self.gen.g.add(p, x, h)
    }
}

pub(crate) fn build(
    g: Graph<'_>,
    cfg: &UnetCfg,
    module_name: &str,
    shape: UnetShape,
    rank: u64,
) -> Result<Generated, String> {
    let UnetShape { batch: b, latent: s, levels, res_blocks, channels: c0 } = shape;
    let mut gen = Gen::new(g, rank);
    let noisy = gen.g.weight("noisy_latents", &[b, cfg.in_channels, s, s]);
    let timesteps = gen.g.arg("timesteps", &[b], ElemType::I32);
    let text = gen.g.weight("text_states", &[b, cfg.text_len, cfg.cross_attention_dim]);
    let noise = gen.g.weight("noise", &[b, cfg.out_channels, s, s]);
    let table = gen.g.weight("time_table", &[cfg.train_timesteps, c0]);

    let t = gen.g.embedding("time_proj", table, timesteps)?;
    let temb_dim = 4 * c0;
    let lin = Lin { bias: Some("time_linear1_b"), lora: false };
    let t = gen.linear("time_linear1", t, "time_linear1_w", temb_dim, lin)?;
    let t = gen.g.unary("time_linear1_act", TensorOp::Silu, t)?;
    let lin = Lin { bias: Some("time_linear2_b"), lora: false };
    let temb = gen.linear("temb", t, "time_linear2_w", temb_dim, lin)?;
    let temb_act = gen.g.unary("temb_act", TensorOp::Silu, temb)?;

    let mut u = Unet { gen, cfg, temb_act, text };
    let width = |level: u64| c0 * cfg.channel_mult[level as usize];
    let attention = |level: u64| cfg.attention[level as usize];

    let mut x = u.conv("conv_in", noisy, c0, 3, 1)?;
    let mut skips = vec![x];
    for i in 0..levels {
        for j in 0..res_blocks {
            x = u.resnet(&format!("down{i}_res{j}"), x, width(i))?;
            if attention(i) {
                x = u.transformer(&format!("down{i}_attn{j}"), x)?;
            }
            skips.push(x);
        }
        if i + 1 < levels {
            x = u.conv(&format!("down{i}_downsample"), x, width(i), 3, 2)?;
            skips.push(x);
        }
    }

    let last = width(levels - 1);
    x = u.resnet("mid_res0", x, last)?;
    x = u.transformer("mid_attn", x)?;
    x = u.resnet("mid_res1", x, last)?;

    // diffusers numbers the up blocks from the lowest resolution: `up{k}` is level
    // `levels - 1 - k`.
    for k in 0..levels {
        let level = levels - 1 - k;
        for j in 0..=res_blocks {
            let skip = skips.pop().ok_or("the up path ran out of skip connections")?;
            let cat = u.gen.g.concat(&format!("up{k}_res{j}_in"), &[x, skip], 1)?;
            x = u.resnet(&format!("up{k}_res{j}"), cat, width(level))?;
            if attention(level) {
                x = u.transformer(&format!("up{k}_attn{j}"), x)?;
            }
        }
        if level > 0 {
            let up = u.gen.g.upsample2(&format!("up{k}_upsampled"), x)?;
            x = u.conv(&format!("up{k}_upsample"), up, width(level), 3, 1)?;
        }
    }
    if !skips.is_empty() {
        return Err(format!("{} skip connections left unused", skips.len()));
    }

    let h = u.norm_silu("norm_out", x)?;
    let pred = u.conv("conv_out", h, cfg.out_channels, 3, 1)?;
    u.mse_loss(module_name, "noise_err", pred, noise)
}

/// The UNet's first down block alone, for benchmarks: `@loss(x [N, C, L, L], temb [N, 4C],
/// text_states, target [N, C, L, L], weights...)` = the mean squared difference between
/// `transformer(resnet(x))` (a ResNet block and a transformer block at the first level's width,
/// the published block at 64×64×320) and `target`.
pub(crate) fn build_down_block(
    g: Graph<'_>,
    cfg: &UnetCfg,
    module_name: &str,
    shape: UnetShape,
    rank: u64,
) -> Result<Generated, String> {
    let UnetShape { batch: b, latent: s, channels: c, .. } = shape;
    let mut gen = Gen::new(g, rank);
    let x = gen.g.weight("x", &[b, c, s, s]);
    let temb = gen.g.weight("temb", &[b, 4 * c]);
    let text = gen.g.weight("text_states", &[b, cfg.text_len, cfg.cross_attention_dim]);
    let target = gen.g.weight("target", &[b, c, s, s]);
    let temb_act = gen.g.unary("temb_act", TensorOp::Silu, temb)?;
    let mut u = Unet { gen, cfg, temb_act, text };
    let h = u.resnet("down0_res0", x, c)?;
    let y = u.transformer("down0_attn0", h)?;
    u.mse_loss(module_name, "err", y, target)
}

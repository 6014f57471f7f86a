//! Building blocks shared by the model generators: linear layers with LoRA, the head split and
//! merge chains, GQA expansion, the attention core and bottleneck adapters.
//!
//! Conventions (all models):
//! - weights are stored `[in, out]` and applied as `x · W` (the examples' convention), or with
//!   `Gen::out_in` as a PyTorch checkpoint stores them, `[out, in]`, applied as `x · Wᵀ` by the
//!   matmul's `transpose_b` (read through the layout, never copied);
//! - LoRA (Hu et al., 2022) adds `(x · A) · B · (alpha / r)` with `A: [in, r]`, `B: [r, out]` and
//!   `alpha = 2r`, so the scale is 2 whatever the rank (the common `lora_alpha = 2 · r` setting);
//! - argument names are `l{i}_{weight}` for layer `i`, `..._lora_a` / `..._lora_b` for adapters;
//!   values are named after what they hold (`l0_q_heads`, `l0_probs`) so the IR reads like the
//!   model.

use fbc_dialects::kind::TensorOp;
use fbc_ir::{Attr, ElemType};

use super::builder::{Graph, V};

/// The LoRA scale `alpha / r` with `alpha = 2r`.
pub(crate) const LORA_SCALE: f64 = 2.0;

/// A generator in progress: the graph, the trainable argument names (the `wrt` of autodiff) and
/// the LoRA rank (0: no LoRA).
#[derive(Debug)]
pub(crate) struct Gen<'r> {
    pub g: Graph<'r>,
    pub trainable: Vec<String>,
    pub rank: u64,
    /// Linear weights are `[out, in]` (a PyTorch checkpoint's), applied as `x · Wᵀ`.
    pub out_in: bool,
    /// Linear weights are packed (`W.q`, `W.scales` and a `tensor.dequantize` named `W`).
    pub quant: Option<crate::Quantised>,
}

/// Options of the attention core.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Attn {
    /// Multiplies `q · kᵀ` (usually `1/√head_dim`).
    pub scale: f64,
    /// Gemma 2's soft cap `c`: scores become `c · tanh(s / c)` before the mask.
    pub softcap: Option<f64>,
    /// An additive mask, broadcast against the scores `[B, H, Sq, Sk]`.
    pub mask: Option<V>,
}

/// Options of one linear layer.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Lin<'a> {
    /// Name of the bias argument, if the layer has one.
    pub bias: Option<&'a str>,
    /// Whether the layer gets a LoRA adapter (when the rank is non-zero).
    pub lora: bool,
}

impl<'r> Gen<'r> {
    pub(crate) fn new(g: Graph<'r>, rank: u64) -> Gen<'r> {
        Gen { g, trainable: Vec::new(), rank, out_in: false, quant: None }
    }

    /// Declares a trainable f32 argument.
    pub(crate) fn param(&mut self, name: &str, shape: &[u64]) -> V {
        self.trainable.push(name.to_string());
        self.g.weight(name, shape)
    }

    /// `out = x · W (+ b) (+ LoRA)` with a frozen weight argument `w` of shape `[in, out_dim]`;
    /// the result is named `out`.
    pub(crate) fn linear(
        &mut self,
        out: &str,
        x: V,
        w: &str,
        out_dim: u64,
        opt: Lin<'_>,
    ) -> Result<V, String> {
        let in_dim = self.g.shape(x).last().copied().unwrap_or(0);
        let shape = if self.out_in { [out_dim, in_dim] } else { [in_dim, out_dim] };
        let wv = match self.quant {
            Some(q) => self.packed_weight(w, shape, q)?,
            None => self.g.weight(w, &shape),
        };
        let bias = opt.bias.map(|b| self.g.weight(b, &[out_dim]));
        let lora = opt.lora && self.rank > 0;
        let (a, b) = if lora {
            let r = self.rank;
            let a = self.param(&format!("{w}_lora_a"), &[in_dim, r]);
            let b = self.param(&format!("{w}_lora_b"), &[r, out_dim]);
            (Some(a), Some(b))
        } else {
            (None, None)
        };
        let last = |done: bool, name: &str| if done { out.to_string() } else { name.to_string() };
        let base = last(bias.is_none() && !lora, &format!("{out}_base"));
        let mut y = self.times_weight(&base, x, wv)?;
        if let Some(b) = bias {
            y = self.g.add(&last(!lora, &format!("{out}_biased")), y, b)?;
        }
        if let (Some(a), Some(b)) = (a, b) {
            let xa = self.g.matmul(&format!("{out}_xa"), x, a)?;
            let xab = self.g.matmul(&format!("{out}_xab"), xa, b)?;
            let d = self.g.scale(&format!("{out}_lora"), xab, LORA_SCALE)?;
            y = self.g.add(out, y, d)?;
        }
        Ok(y)
    }

    /// Weight `w` of `shape` (as stored) packed as `q`: arguments `{w}.q` (the rows' bytes) and
    /// `{w}.scales` (one per group of a row, the group capped at the row length as `fbc pack`
    /// caps it), decoded by a `tensor.dequantize` named `w`.
    fn packed_weight(
        &mut self,
        w: &str,
        shape: [u64; 2],
        q: crate::Quantised,
    ) -> Result<V, String> {
        let [rows, cols] = shape;
        let group = q.group.clamp(1, cols.max(1));
        let bytes = fbc_dialects::tensor::quant::packed_row_bytes(q.scheme, cols);
        let packed = self.g.arg(&format!("{w}.q"), &[rows, bytes], ElemType::I8);
        let scales = self.g.weight(&format!("{w}.scales"), &[rows, cols.div_ceil(group)]);
        let attrs = vec![
            ("scheme".to_string(), Attr::Str(q.scheme.to_string())),
            ("group".to_string(), Attr::Int(group as i64)),
        ];
        self.g.op(w, TensorOp::Dequantize, &[packed, scales], attrs)
    }

    /// `x · W` of a weight `w` stored `[in, out]`, or with [`Gen::out_in`] `x · Wᵀ` of one
    /// stored `[out, in]`; the result is named `name`.
    pub(crate) fn times_weight(&mut self, name: &str, x: V, w: V) -> Result<V, String> {
        if self.out_in {
            self.g.matmul_bt(name, x, w)
        } else {
            self.g.matmul(name, x, w)
        }
    }

    /// LayerNorm of `x` along its last axis with frozen arguments `{w}_g`, `{w}_b` (with
    /// [`Gen::out_in`], a checkpoint's `{w}.weight`, `{w}.bias`); the result is named `out`.
    pub(crate) fn layernorm(&mut self, w: &str, out: &str, x: V, eps: f64) -> Result<V, String> {
        let d = self.g.shape(x).last().copied().unwrap_or(0);
        let (g, b) = if self.out_in {
            (format!("{w}.weight"), format!("{w}.bias"))
        } else {
            (format!("{w}_g"), format!("{w}_b"))
        };
        let gamma = self.g.weight(&g, &[d]);
        let beta = self.g.weight(&b, &[d]);
        self.g.layernorm(out, x, gamma, beta, eps)
    }

    /// The dimensions of `x`, which must have rank `N` (a generator bug otherwise).
    pub(crate) fn dims<const N: usize>(&self, x: V) -> Result<[u64; N], String> {
        let t = self.g.ty(x);
        <[u64; N]>::try_from(&t.shape[..]).map_err(|_| format!("expected rank {N}, found {t}"))
    }

    /// `[B, S, H·HD] → [B, S, H, HD] → [B, H, S, HD]` (the paper's Fig. 12 chain).
    pub(crate) fn split_heads(&mut self, base: &str, x: V, heads: u64) -> Result<V, String> {
        let [b, seq, d] = self.dims(x)?;
        let hd = d / heads.max(1);
        let r = self.g.reshape(&format!("{base}_split"), x, &[b, seq, heads, hd])?;
        self.g.transpose(&format!("{base}_heads"), r, &[0, 2, 1, 3])
    }

    /// `[B, H, S, HD] → [B, S, H, HD] → [B, S, H·HD]`.
    pub(crate) fn merge_heads(&mut self, base: &str, x: V) -> Result<V, String> {
        let [b, h, seq, hd] = self.dims(x)?;
        let t = self.g.transpose(&format!("{base}_bshd"), x, &[0, 2, 1, 3])?;
        self.g.reshape(&format!("{base}_merged"), t, &[b, seq, h * hd])
    }

    /// GQA: repeats each of the `KV` heads of `x: [B, KV, S, HD]` `heads / KV` times, as
    /// `repeat_kv` does (query head `h` reads KV head `h / (heads / KV)`):
    /// reshape to `[B, KV, 1, S, HD]`, broadcast to `[B, KV, rep, S, HD]`, reshape to
    /// `[B, heads, S, HD]`. The last reshape changes the element count seen by the layout
    /// (the step the paper's index elimination cannot remap at tile level).
    pub(crate) fn expand_kv(&mut self, base: &str, x: V, heads: u64) -> Result<V, String> {
        let [b, kv, seq, hd] = self.dims(x)?;
        if kv == heads {
            return Ok(x);
        }
        let rep = heads / kv.max(1);
        let g1 = self.g.reshape(&format!("{base}_grouped"), x, &[b, kv, 1, seq, hd])?;
        let g2 = self.g.broadcast(&format!("{base}_repeated"), g1, &[b, kv, rep, seq, hd])?;
        self.g.reshape(&format!("{base}_expanded"), g2, &[b, heads, seq, hd])
    }

    /// `softmax(q · kᵀ · scale [softcapped] + mask) · v` on `[B, H, S, HD]` heads; values are
    /// named `{p}scores`, `{p}probs`, `{p}ctx`.
    pub(crate) fn attention(
        &mut self,
        p: &str,
        (q, k, v): (V, V, V),
        opt: Attn,
    ) -> Result<V, String> {
        let s = self.g.matmul_bt(&format!("{p}scores"), q, k)?;
        let mut s = self.g.scale(&format!("{p}scores_scaled"), s, opt.scale)?;
        if let Some(c) = opt.softcap {
            // Gemma 2: c · tanh(s / c), before the mask.
            let d = self.g.scale(&format!("{p}scores_div_cap"), s, 1.0 / c)?;
            let t = self.g.unary(&format!("{p}scores_tanh"), TensorOp::Tanh, d)?;
            s = self.g.scale(&format!("{p}scores_capped"), t, c)?;
        }
        if let Some(m) = opt.mask {
            s = self.g.add(&format!("{p}scores_masked"), s, m)?;
        }
        let probs = self.g.softmax(&format!("{p}probs"), s)?;
        self.g.matmul(&format!("{p}ctx"), probs, v)
    }

    /// A Houlsby bottleneck adapter on `x: [..., D]`: `x + up(relu(down(x) + b_down)) + b_up`,
    /// width = the rank; all four parameters trainable. Named `{name}_down`, ..., `{name}`.
    pub(crate) fn adapter(&mut self, name: &str, x: V) -> Result<V, String> {
        let d = self.g.shape(x).last().copied().unwrap_or(0);
        let r = self.rank;
        let wd = self.param(&format!("{name}_down"), &[d, r]);
        let bd = self.param(&format!("{name}_down_b"), &[r]);
        let wu = self.param(&format!("{name}_up"), &[r, d]);
        let bu = self.param(&format!("{name}_up_b"), &[d]);
        let h = self.g.matmul(&format!("{name}_h0"), x, wd)?;
        let h = self.g.add(&format!("{name}_h1"), h, bd)?;
        let h = self.g.unary(&format!("{name}_h"), TensorOp::Relu, h)?;
        let u = self.g.matmul(&format!("{name}_u0"), h, wu)?;
        let u = self.g.add(&format!("{name}_u"), u, bu)?;
        self.g.add(name, x, u)
    }
}

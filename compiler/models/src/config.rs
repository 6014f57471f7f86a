//! Published architecture hyperparameters of the models `fbc gen` knows, and the fine-tuning
//! settings of the FBLayout paper's Table 3 (batch, sequence) that are the generators' defaults.
//!
//! Every number comes from the model's released `config.json` on the Hugging Face Hub (the file
//! the reference implementation in `transformers` builds the model from); the source of each
//! table is named above it. Numbers are copied, not derived, so that a reader can check them
//! against the source line by line. `docs/models.md` lists them with what is approximated.

/// The gated-MLP activation of a decoder-only model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GatedAct {
    /// `silu(gate) · up` (SwiGLU).
    Silu,
    /// `gelu_tanh(gate) · up` (GeGLU with the tanh GELU, `gelu_pytorch_tanh`).
    GeluTanh,
}

/// Gemma 2's departures from the Llama recipe.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GemmaExtras {
    /// `attn_logit_softcapping`: scores become `c · tanh(scores / c)` before the mask.
    pub attn_softcap: f64,
    /// `final_logit_softcapping`: logits become `c · tanh(logits / c)`.
    pub final_softcap: f64,
    /// `query_pre_attn_scalar`: scores are scaled by `1/√query_pre_attn_scalar`, not `1/√head_dim`.
    pub query_pre_attn_scalar: f64,
    /// `sliding_window`: even-numbered layers attend to at most this many previous positions.
    pub sliding_window: u64,
}

/// Llama 3's RoPE frequency scaling (`rope_type "llama3"`): wavelengths longer than
/// `original_max_positions / low_freq_factor` are divided by `factor`, those shorter than
/// `original_max_positions / high_freq_factor` kept, the ones between interpolated.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Llama3Scaling {
    pub factor: f64,
    pub low_freq_factor: f64,
    pub high_freq_factor: f64,
    pub original_max_positions: f64,
}

/// A decoder's rotary position embedding: frequency `i` of a head of `head_dim` is
/// `theta^(-2i/head_dim)` (then Llama 3's scaling, where given).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rope {
    pub theta: f64,
    pub llama3: Option<Llama3Scaling>,
}

/// A decoder-only (Llama-family) language model.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DecoderCfg {
    pub hidden: u64,
    pub layers: u64,
    pub heads: u64,
    pub kv_heads: u64,
    pub head_dim: u64,
    pub ffn: u64,
    pub vocab: u64,
    pub max_positions: u64,
    pub norm_eps: f64,
    /// Biases on the Q, K and V projections (Qwen2).
    pub qkv_bias: bool,
    pub act: GatedAct,
    pub gemma: Option<GemmaExtras>,
    pub rope: Rope,
    /// A Hugging Face checkpoint's tensor names (`model.layers.0.self_attn.q_proj.weight`) and
    /// PyTorch's `[out, in]` Linear weights, applied as `x · Wᵀ` (`fbc gen --from-hf`); else
    /// fbc's names (`l0_wq`) and `[in, out]` weights.
    pub hf: bool,
    /// The LM head is the embedding table (`tie_word_embeddings`), else its own `[vocab, hidden]`
    /// weight.
    pub tied: bool,
}

/// meta-llama/Llama-3.2-1B `config.json`: hidden_size 2048, num_hidden_layers 16,
/// num_attention_heads 32, num_key_value_heads 8, head_dim 64, intermediate_size 8192,
/// hidden_act "silu", rms_norm_eps 1e-05, rope_theta 500000.0, rope_scaling {rope_type "llama3",
/// factor 32.0, low_freq_factor 1.0, high_freq_factor 4.0, original_max_position_embeddings 8192},
/// vocab_size 128256, max_position_embeddings 131072, tie_word_embeddings true,
/// attention_bias false, mlp_bias false.
pub(crate) const LLAMA32_1B: DecoderCfg = DecoderCfg {
    hidden: 2048,
    layers: 16,
    heads: 32,
    kv_heads: 8,
    head_dim: 64,
    ffn: 8192,
    vocab: 128256,
    max_positions: 131072,
    norm_eps: 1e-5,
    qkv_bias: false,
    act: GatedAct::Silu,
    gemma: None,
    rope: Rope {
        theta: 500000.0,
        llama3: Some(Llama3Scaling {
            factor: 32.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_positions: 8192.0,
        }),
    },
    hf: false,
    tied: true,
};

/// Qwen/Qwen2.5-1.5B `config.json`: hidden_size 1536, num_hidden_layers 28,
/// num_attention_heads 12 (head dim 1536/12 = 128), num_key_value_heads 2,
/// intermediate_size 8960, hidden_act "silu", rms_norm_eps 1e-06, rope_theta 1000000.0,
/// vocab_size 151936, max_position_embeddings 32768, tie_word_embeddings true; Qwen2 attention has
/// biases on q_proj, k_proj and v_proj (not o_proj).
pub(crate) const QWEN25_15B: DecoderCfg = DecoderCfg {
    hidden: 1536,
    layers: 28,
    heads: 12,
    kv_heads: 2,
    head_dim: 128,
    ffn: 8960,
    vocab: 151936,
    max_positions: 32768,
    norm_eps: 1e-6,
    qkv_bias: true,
    act: GatedAct::Silu,
    gemma: None,
    rope: Rope { theta: 1000000.0, llama3: None },
    hf: false,
    tied: true,
};

/// google/gemma-2-2b `config.json`: hidden_size 2304, num_hidden_layers 26,
/// num_attention_heads 8, num_key_value_heads 4, head_dim 256, intermediate_size 9216,
/// hidden_activation "gelu_pytorch_tanh", rms_norm_eps 1e-06, rope_theta 10000.0,
/// vocab_size 256000, max_position_embeddings 8192, query_pre_attn_scalar 256,
/// attn_logit_softcapping 50.0, final_logit_softcapping 30.0, sliding_window 4096 (every other
/// layer, starting with layer 0); embeddings tied and scaled by √hidden_size; RMSNorm weights
/// stored as `w` and applied as `(1 + w)`; extra post-attention and post-feed-forward norms.
pub(crate) const GEMMA2_2B: DecoderCfg = DecoderCfg {
    hidden: 2304,
    layers: 26,
    heads: 8,
    kv_heads: 4,
    head_dim: 256,
    ffn: 9216,
    vocab: 256000,
    max_positions: 8192,
    norm_eps: 1e-6,
    qkv_bias: false,
    act: GatedAct::GeluTanh,
    gemma: Some(GemmaExtras {
        attn_softcap: 50.0,
        final_softcap: 30.0,
        query_pre_attn_scalar: 256.0,
        sliding_window: 4096,
    }),
    rope: Rope { theta: 10000.0, llama3: None },
    hf: false,
    tied: true,
};

/// A post-LayerNorm text encoder (BERT) or a pre-LayerNorm image encoder (ViT).
#[derive(Debug, Clone, Copy)]
pub(crate) struct EncoderCfg {
    pub hidden: u64,
    pub layers: u64,
    pub heads: u64,
    pub ffn: u64,
    pub norm_eps: f64,
    /// Classes of the classification head.
    pub labels: u64,
    /// BERT's vocabulary, position table and token types.
    pub vocab: u64,
    pub max_positions: u64,
    pub type_vocab: u64,
    /// ViT's image side, patch side and channels.
    pub image: u64,
    pub patch: u64,
    pub channels: u64,
    /// A Hugging Face checkpoint's names and `[out, in]` weights (`fbc gen --from-hf`), whose
    /// forward function is `@encode` (the last hidden state, and BERT's pooler output).
    pub hf: bool,
}

/// google-bert/bert-large-uncased `config.json`: hidden_size 1024, num_hidden_layers 24,
/// num_attention_heads 16, intermediate_size 4096, hidden_act "gelu" (erf), layer_norm_eps 1e-12,
/// vocab_size 30522, max_position_embeddings 512 (learned, "absolute"), type_vocab_size 2.
pub(crate) const BERT_LARGE: EncoderCfg = EncoderCfg {
    hidden: 1024,
    layers: 24,
    heads: 16,
    ffn: 4096,
    norm_eps: 1e-12,
    labels: 2,
    vocab: BERT_VOCAB,
    max_positions: BERT_MAX_POSITIONS,
    type_vocab: BERT_TYPE_VOCAB,
    image: 0,
    patch: 0,
    channels: 0,
    hf: false,
};
pub(crate) const BERT_VOCAB: u64 = 30522;
pub(crate) const BERT_MAX_POSITIONS: u64 = 512;
pub(crate) const BERT_TYPE_VOCAB: u64 = 2;

/// google/vit-large-patch16-224 `config.json`: hidden_size 1024, num_hidden_layers 24,
/// num_attention_heads 16, intermediate_size 4096, hidden_act "gelu" (erf), layer_norm_eps 1e-12,
/// image_size 224, patch_size 16, num_channels 3, qkv_bias true; the checkpoint's ImageNet-1k
/// head has 1000 classes.
pub(crate) const VIT_LARGE: EncoderCfg = EncoderCfg {
    hidden: 1024,
    layers: 24,
    heads: 16,
    ffn: 4096,
    norm_eps: 1e-12,
    labels: 1000,
    vocab: 0,
    max_positions: 0,
    type_vocab: 0,
    image: VIT_IMAGE,
    patch: VIT_PATCH,
    channels: VIT_CHANNELS,
    hf: false,
};
pub(crate) const VIT_IMAGE: u64 = 224;
pub(crate) const VIT_PATCH: u64 = 16;
pub(crate) const VIT_CHANNELS: u64 = 3;

/// The decoder of openai/whisper-large-v3 (`config.json`): d_model 1280, decoder_layers 32,
/// decoder_attention_heads 20, decoder_ffn_dim 5120, activation_function "gelu" (erf),
/// vocab_size 51866, max_target_positions 448 (learned positions), max_source_positions 1500
/// (encoder states of a 30 s window), scale_embedding false; `proj_out` is tied to
/// `embed_tokens`; LayerNorm with PyTorch's default eps 1e-5; q/v/out projections have biases,
/// k_proj has none.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WhisperCfg {
    pub hidden: u64,
    pub layers: u64,
    pub heads: u64,
    pub ffn: u64,
    pub vocab: u64,
    pub max_target_positions: u64,
    pub max_source_positions: u64,
    pub norm_eps: f64,
    /// A Hugging Face checkpoint's names (`model.decoder.layers.0.self_attn.q_proj.weight`) and
    /// `[out, in]` weights (`fbc gen --from-hf`), whose forward function is `@logits`.
    pub hf: bool,
}

pub(crate) const WHISPER_LARGE_V3: WhisperCfg = WhisperCfg {
    hidden: 1280,
    layers: 32,
    heads: 20,
    ffn: 5120,
    vocab: 51866,
    max_target_positions: 448,
    max_source_positions: 1500,
    norm_eps: 1e-5,
    hf: false,
};

/// Fig. 17's MHA configurations `[sequence, heads, hidden]`.
pub(crate) const MHA_CONFIGS: &[(&str, u64, u64, u64)] =
    &[("c1", 512, 32, 2048), ("c2", 512, 16, 1024), ("c3", 512, 8, 1024)];

/// Fig. 16's MatMul pair: forward `O = A·B` with M=512, K=2048, N=8192; backward `dA = dO·Bᵀ`.
pub(crate) const MATMUL_FB: (u64, u64, u64) = (512, 2048, 8192);

/// Stable Diffusion v1.5's denoising UNet (`UNet2DConditionModel` in diffusers), from
/// `unet/config.json` of stable-diffusion-v1-5/stable-diffusion-v1-5 (formerly
/// runwayml/stable-diffusion-v1-5): in_channels 4, out_channels 4, sample_size 64,
/// block_out_channels [320, 640, 1280, 1280], down_block_types [CrossAttnDownBlock2D ×3,
/// DownBlock2D], up_block_types [UpBlock2D, CrossAttnUpBlock2D ×3], layers_per_block 2,
/// attention_head_dim 8 (for SD 1.x diffusers reads it as the number of heads), cross_attention_dim
/// 768, norm_num_groups 32, norm_eps 1e-05, act_fn "silu", downsample_padding 1,
/// flip_sin_to_cos true, freq_shift 0, use_linear_projection false (1×1 convolutions around each
/// transformer). Fixed by diffusers' code rather than the config: the transformer's GroupNorm eps
/// 1e-6, its LayerNorms' eps 1e-5, the GEGLU feed-forward of width 4·C, the time embedding width
/// 4·320 = 1280. From the pipeline: 77 text states (CLIP ViT-L/14's context) and
/// num_train_timesteps 1000 (`scheduler/scheduler_config.json`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct UnetCfg {
    pub in_channels: u64,
    pub out_channels: u64,
    pub sample_size: u64,
    /// The first level's width; level `i` has `channel_mult[i]` times as many channels.
    pub channels: u64,
    pub channel_mult: [u64; 4],
    /// Whether level `i`'s blocks carry a transformer (cross-attention) block.
    pub attention: [bool; 4],
    pub layers_per_block: u64,
    pub heads: u64,
    pub cross_attention_dim: u64,
    pub norm_groups: u64,
    pub norm_eps: f64,
    pub transformer_norm_eps: f64,
    pub layer_norm_eps: f64,
    pub ff_mult: u64,
    pub text_len: u64,
    pub train_timesteps: u64,
}

pub(crate) const SD15_UNET: UnetCfg = UnetCfg {
    in_channels: 4,
    out_channels: 4,
    sample_size: 64,
    channels: 320,
    channel_mult: [1, 2, 4, 4],
    attention: [true, true, true, false],
    layers_per_block: 2,
    heads: 8,
    cross_attention_dim: 768,
    norm_groups: 32,
    norm_eps: 1e-5,
    transformer_norm_eps: 1e-6,
    layer_norm_eps: 1e-5,
    ff_mult: 4,
    text_len: 77,
    train_timesteps: 1000,
};

//! `fbc gen --from-hf DIR`: a model built from a Hugging Face checkpoint's `config.json`, with
//! the checkpoint's own tensor names and `[out, in]` Linear weights, so that its
//! `model.safetensors` binds by name (`fbc run --inputs`). Llama (`LlamaForCausalLM`, with Llama
//! 3's RoPE scaling), Qwen2 (`Qwen2ForCausalLM`: Q/K/V biases), Gemma 2
//! (`Gemma2ForCausalLM`: soft-capping, `1 + w` norms around attention and the MLP, local and
//! global layers), BERT (`BertModel`), ViT (`ViTModel`) and Whisper's decoder
//! (`WhisperForConditionalGeneration`) follow the config; every key read is named in the error when missing or of
//! the wrong type, and a setting fbc does not implement is an error, never ignored.

use serde_json::Value as Json;

use super::config::{
    DecoderCfg, EncoderCfg, GatedAct, GemmaExtras, Llama3Scaling, Rope, WhisperCfg,
};
use super::Error;

/// The architectures `--from-hf` reads.
pub const ARCHITECTURES: &[&str] = &[
    "LlamaForCausalLM",
    "Qwen2ForCausalLM",
    "Gemma2ForCausalLM",
    "BertModel",
    "ViTModel",
    "WhisperForConditionalGeneration",
];

/// What a `config.json` describes.
#[derive(Debug)]
pub(crate) enum HfModel {
    Decoder(DecoderCfg),
    Bert(EncoderCfg),
    Vit(EncoderCfg),
    /// Whisper's decoder (the encoder's states are an input).
    Whisper(WhisperCfg),
}

/// The architecture name of `config.json` and the model it describes.
pub(crate) fn model_config(text: &str) -> Result<(String, HfModel), Error> {
    let c: Json = serde_json::from_str(text).map_err(|e| bad(format!("not JSON: {e}")))?;
    let arch = architecture(&c)?;
    let model = match arch.as_str() {
        "BertModel" => HfModel::Bert(encoder_config(&c, false)?),
        "ViTModel" => HfModel::Vit(encoder_config(&c, true)?),
        "WhisperForConditionalGeneration" => HfModel::Whisper(whisper_config(&c)?),
        _ => HfModel::Decoder(decoder_config(&c, &arch)?),
    };
    Ok((arch, model))
}

/// BERT's (`vit` false) or ViT's encoder settings.
fn encoder_config(c: &Json, vit: bool) -> Result<EncoderCfg, Error> {
    let act = string(c, "hidden_act")?;
    if act != "gelu" {
        return Err(bad(format!("`hidden_act` = `{act}` is not supported (gelu)")));
    }
    if !vit {
        if let Some(kind) = get(c, "position_embedding_type").and_then(Json::as_str) {
            if kind != "absolute" {
                return Err(bad(format!(
                    "position_embedding_type `{kind}` is not supported (absolute)"
                )));
            }
        }
    } else if !flag(c, "qkv_bias", true)? {
        return Err(bad("`qkv_bias` = false is not supported".into()));
    }
    let (image, patch, channels) = if vit {
        (uint(c, "image_size")?, uint(c, "patch_size")?, uint(c, "num_channels")?)
    } else {
        (0, 0, 0)
    };
    if vit && image % patch != 0 {
        return Err(bad(format!("image_size {image} is not a multiple of patch_size {patch}")));
    }
    let (vocab, max_positions, type_vocab) = if vit {
        (0, 0, 0)
    } else {
        (uint(c, "vocab_size")?, uint(c, "max_position_embeddings")?, uint(c, "type_vocab_size")?)
    };
    let cfg = EncoderCfg {
        hidden: uint(c, "hidden_size")?,
        layers: uint(c, "num_hidden_layers")?,
        heads: uint(c, "num_attention_heads")?,
        ffn: uint(c, "intermediate_size")?,
        norm_eps: float(c, "layer_norm_eps")?,
        labels: 0,
        vocab,
        max_positions,
        type_vocab,
        image,
        patch,
        channels,
        hf: true,
    };
    if cfg.hidden % cfg.heads != 0 {
        return Err(bad(format!(
            "hidden_size {} is not a multiple of num_attention_heads {}",
            cfg.hidden, cfg.heads
        )));
    }
    Ok(cfg)
}

/// Whisper's decoder settings (`d_model`, `decoder_*`); its LayerNorms use transformers' fixed
/// epsilon 1e-5.
fn whisper_config(c: &Json) -> Result<WhisperCfg, Error> {
    let act = string(c, "activation_function")?;
    if act != "gelu" {
        return Err(bad(format!("`activation_function` = `{act}` is not supported (gelu)")));
    }
    if flag(c, "scale_embedding", false)? {
        return Err(bad("`scale_embedding` = true is not supported".into()));
    }
    let cfg = WhisperCfg {
        hidden: uint(c, "d_model")?,
        layers: uint(c, "decoder_layers")?,
        heads: uint(c, "decoder_attention_heads")?,
        ffn: uint(c, "decoder_ffn_dim")?,
        vocab: uint(c, "vocab_size")?,
        max_target_positions: uint(c, "max_target_positions")?,
        max_source_positions: uint(c, "max_source_positions")?,
        norm_eps: 1e-5,
        hf: true,
    };
    if cfg.hidden % cfg.heads != 0 {
        return Err(bad(format!(
            "d_model {} is not a multiple of decoder_attention_heads {}",
            cfg.hidden, cfg.heads
        )));
    }
    Ok(cfg)
}

fn architecture(c: &Json) -> Result<String, Error> {
    let arch = match get(c, "architectures").and_then(Json::as_array).map(Vec::as_slice) {
        Some([a]) => a.as_str().unwrap_or_default().to_string(),
        _ => return Err(bad("missing key `architectures` (one architecture name)".into())),
    };
    if !ARCHITECTURES.contains(&arch.as_str()) {
        return Err(bad(format!(
            "architecture `{arch}` is not supported by --from-hf (supported: {})",
            ARCHITECTURES.join(", ")
        )));
    }
    Ok(arch)
}

#[allow(clippy::needless_pass_by_value)] // called with `format!` results throughout
fn bad(msg: String) -> Error {
    Error::Usage(format!("config.json: {msg}"))
}

fn get<'a>(c: &'a Json, key: &str) -> Option<&'a Json> {
    c.get(key).filter(|v| !v.is_null())
}

fn uint(c: &Json, key: &str) -> Result<u64, Error> {
    let v = get(c, key).ok_or_else(|| bad(format!("missing key `{key}`")))?;
    v.as_u64()
        .filter(|&x| x > 0)
        .ok_or_else(|| bad(format!("`{key}` = {v} is not a positive integer")))
}

fn float(c: &Json, key: &str) -> Result<f64, Error> {
    let v = get(c, key).ok_or_else(|| bad(format!("missing key `{key}`")))?;
    v.as_f64()
        .filter(|x| x.is_finite())
        .ok_or_else(|| bad(format!("`{key}` = {v} is not a number")))
}

fn flag(c: &Json, key: &str, default: bool) -> Result<bool, Error> {
    match get(c, key) {
        None => Ok(default),
        Some(v) => v.as_bool().ok_or_else(|| bad(format!("`{key}` = {v} is not true or false"))),
    }
}

fn string<'a>(c: &'a Json, key: &str) -> Result<&'a str, Error> {
    let v = get(c, key).ok_or_else(|| bad(format!("missing key `{key}`")))?;
    v.as_str().ok_or_else(|| bad(format!("`{key}` = {v} is not a string")))
}

/// The RoPE settings: `rope_parameters` (transformers 5) or `rope_theta` + `rope_scaling`
/// (transformers 4); rope types `default` and `llama3`.
fn rope(c: &Json, default_theta: f64) -> Result<Rope, Error> {
    let params = get(c, "rope_parameters").or_else(|| get(c, "rope_scaling"));
    let theta = match params.and_then(|p| get(p, "rope_theta")) {
        Some(_) => float(params.unwrap_or(c), "rope_theta")?,
        None if get(c, "rope_theta").is_some() => float(c, "rope_theta")?,
        None => default_theta,
    };
    let Some(p) = params else { return Ok(Rope { theta, llama3: None }) };
    let kind =
        get(p, "rope_type").or_else(|| get(p, "type")).and_then(Json::as_str).unwrap_or("default");
    let llama3 = match kind {
        "default" => None,
        "llama3" => Some(Llama3Scaling {
            factor: float(p, "factor")?,
            low_freq_factor: float(p, "low_freq_factor")?,
            high_freq_factor: float(p, "high_freq_factor")?,
            original_max_positions: float(p, "original_max_position_embeddings")?,
        }),
        other => {
            return Err(bad(format!("rope_type `{other}` is not supported (default, llama3)")))
        }
    };
    Ok(Rope { theta, llama3 })
}

/// The settings of a causal LM (`arch`, one of the `…ForCausalLM` of [`ARCHITECTURES`]).
fn decoder_config(c: &Json, arch: &str) -> Result<DecoderCfg, Error> {
    let gemma2 = arch == "Gemma2ForCausalLM";
    let hidden = uint(c, "hidden_size")?;
    let heads = uint(c, "num_attention_heads")?;
    let kv_heads = match get(c, "num_key_value_heads") {
        Some(_) => uint(c, "num_key_value_heads")?,
        None => heads,
    };
    if heads % kv_heads != 0 {
        return Err(bad(format!(
            "num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads}"
        )));
    }
    let head_dim = match get(c, "head_dim") {
        Some(_) => uint(c, "head_dim")?,
        None => hidden / heads,
    };
    let act_key = if gemma2 { "hidden_activation" } else { "hidden_act" };
    let act = match string(c, act_key)? {
        "silu" if !gemma2 => GatedAct::Silu,
        "gelu_pytorch_tanh" if gemma2 => GatedAct::GeluTanh,
        other => return Err(bad(format!("`{act_key}` = `{other}` is not supported for {arch}"))),
    };
    if flag(c, "mlp_bias", false)? {
        return Err(bad("`mlp_bias` = true is not supported".into()));
    }
    if arch == "LlamaForCausalLM" && flag(c, "attention_bias", false)? {
        return Err(bad(
            "`attention_bias` = true is not supported for LlamaForCausalLM (it biases o_proj too)"
                .into(),
        ));
    }
    if flag(c, "use_sliding_window", false)? {
        return Err(bad("`use_sliding_window` = true is not supported for Qwen2".into()));
    }
    let gemma = if gemma2 {
        Some(GemmaExtras {
            attn_softcap: float(c, "attn_logit_softcapping")?,
            final_softcap: float(c, "final_logit_softcapping")?,
            query_pre_attn_scalar: float(c, "query_pre_attn_scalar")?,
            sliding_window: uint(c, "sliding_window")?,
        })
    } else {
        None
    };
    let cfg = DecoderCfg {
        hidden,
        layers: uint(c, "num_hidden_layers")?,
        heads,
        kv_heads,
        head_dim,
        ffn: uint(c, "intermediate_size")?,
        vocab: uint(c, "vocab_size")?,
        max_positions: uint(c, "max_position_embeddings")?,
        norm_eps: float(c, "rms_norm_eps")?,
        qkv_bias: arch == "Qwen2ForCausalLM",
        act,
        gemma,
        rope: rope(c, 10000.0)?,
        hf: true,
        // transformers' defaults when the key is absent: Llama and Qwen2 untied, Gemma 2 tied.
        tied: flag(c, "tie_word_embeddings", gemma2)?,
    };
    Ok(cfg)
}

/// The RoPE settings and head dimension of a checkpoint's `config.json` (what the host's
/// [`rope::tables`](super::rope::tables) needs to fill `rope_cos` and `rope_sin`).
pub fn rope_of(text: &str) -> Result<(Rope, u64), Error> {
    match model_config(text)? {
        (_, HfModel::Decoder(cfg)) => Ok((cfg.rope, cfg.head_dim)),
        (arch, _) => Err(bad(format!("`{arch}` has no rotary position embedding"))),
    }
}

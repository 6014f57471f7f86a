//! The model generators behind `fbc gen`: the models of the FBLayout paper's Table 3 and its two
//! microbenchmarks (Fig. 16, Fig. 17), each built as an `fbc_ir::Module` through a small graph
//! recorder ([`builder`]).
//!
//! [`MODELS`] is the catalogue: each entry says which command-line options apply and their
//! defaults (the real layer count and Table 3's batch and sequence). The hyperparameters and
//! their sources are in [`config`]; `docs/models.md` describes every graph and its
//! approximations.

mod blocks;
mod builder;
mod config;
mod decoder;
mod encoder;
mod micro;
mod whisper;

use fbc_ir::{Module, OpRegistry};

use builder::Graph;
use config::{DecoderCfg, MHA_CONFIGS};

/// What a model is built from.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Kind {
    Decoder(&'static DecoderCfg),
    Bert,
    Vit,
    Whisper,
    MatmulFb,
    Mha,
}

/// One model `fbc gen` knows, with the options that apply to it and their defaults (`None`: the
/// option does not apply).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ModelInfo {
    pub name: &'static str,
    pub about: &'static str,
    pub kind: Kind,
    pub layers: Option<u64>,
    pub batch: Option<u64>,
    pub seq: Option<u64>,
    /// The longest `--seq` the model supports (its position table or context length).
    pub max_seq: u64,
    /// Whether `--lora-rank` (LoRA rank, or adapter width for ViT) and `--training` apply.
    pub trainable: bool,
    /// The default and the maximum of `--encoder-len` (Whisper only).
    pub encoder_len: Option<(u64, u64)>,
    /// The hidden size, the largest sensible LoRA rank.
    pub hidden: u64,
}

const fn lm(name: &'static str, about: &'static str, cfg: &'static DecoderCfg) -> ModelInfo {
    ModelInfo {
        name,
        about,
        kind: Kind::Decoder(cfg),
        layers: Some(cfg.layers),
        // Table 3: batch 1, 512 tokens.
        batch: Some(1),
        seq: Some(512),
        max_seq: cfg.max_positions,
        trainable: true,
        encoder_len: None,
        hidden: cfg.hidden,
    }
}

/// Every model, in the order `fbc gen --help` lists them.
pub(crate) const MODELS: &[ModelInfo] = &[
    lm("llama3.2-1b", "Llama 3.2 1B, LoRA on Q, K, V and the MLP", &config::LLAMA32_1B),
    lm("qwen2.5-1.5b", "Qwen 2.5 1.5B, LoRA on Q, K, V and the MLP", &config::QWEN25_15B),
    lm("gemma2-2b", "Gemma 2 2B, LoRA on Q, K, V and the MLP", &config::GEMMA2_2B),
    ModelInfo {
        name: "bert-large",
        about: "BERT-Large, LoRA on Q, K, V and the MLP, 2-way classifier",
        kind: Kind::Bert,
        layers: Some(config::BERT_LARGE.layers),
        batch: Some(4),
        seq: Some(512),
        max_seq: config::BERT_MAX_POSITIONS,
        trainable: true,
        encoder_len: None,
        hidden: config::BERT_LARGE.hidden,
    },
    ModelInfo {
        name: "vit-large",
        about: "ViT-Large/16 (224x224), bottleneck adapters, 1000-way head",
        kind: Kind::Vit,
        layers: Some(config::VIT_LARGE.layers),
        batch: Some(8),
        seq: None,
        max_seq: 0,
        trainable: true,
        encoder_len: None,
        hidden: config::VIT_LARGE.hidden,
    },
    ModelInfo {
        name: "whisper-large-decoder",
        about: "Whisper large-v3 decoder, self- and cross-attention, LoRA",
        kind: Kind::Whisper,
        layers: Some(config::WHISPER_LARGE_V3.layers),
        batch: Some(2),
        seq: Some(config::WHISPER_LARGE_V3.max_target_positions),
        max_seq: config::WHISPER_LARGE_V3.max_target_positions,
        trainable: true,
        encoder_len: Some((300, config::WHISPER_LARGE_V3.max_source_positions)),
        hidden: config::WHISPER_LARGE_V3.hidden,
    },
    ModelInfo {
        name: "matmul-fb",
        about: "Fig. 16: O = A x B (M=512, K=2048, N=8192) and dA = dO x B^T",
        kind: Kind::MatmulFb,
        layers: None,
        batch: None,
        seq: None,
        max_seq: 0,
        trainable: false,
        encoder_len: None,
        hidden: 0,
    },
    ModelInfo {
        name: "mha",
        about: "Fig. 17: one multi-head attention block, --config c1|c2|c3",
        kind: Kind::Mha,
        layers: None,
        batch: Some(1),
        seq: Some(512),
        max_seq: 131072,
        trainable: false,
        encoder_len: None,
        hidden: 0,
    },
];

/// The model list of `fbc gen --help`.
pub(crate) fn models_help() -> String {
    let mut s = String::from(
        "Models (defaults: the published layer count, the batch and sequence of the paper's \
         Table 3):\n",
    );
    for m in MODELS {
        let mut d = Vec::new();
        if let Some(l) = m.layers {
            d.push(format!("{l} layers"));
        }
        if let Some(b) = m.batch {
            d.push(format!("B={b}"));
        }
        if let Some(q) = m.seq {
            d.push(format!("S={q}"));
        }
        if let Some((e, _)) = m.encoder_len {
            d.push(format!("E={e}"));
        }
        let defaults = if d.is_empty() { String::new() } else { format!(" [{}]", d.join(", ")) };
        s.push_str(&format!("  {:<22} {}{defaults}\n", m.name, m.about));
    }
    s.push_str(
        "\nSee docs/models.md for the hyperparameters, their sources and the approximations.",
    );
    s
}

/// The names of the models, comma separated.
pub(crate) fn model_names() -> String {
    MODELS.iter().map(|m| m.name).collect::<Vec<_>>().join(", ")
}

pub(crate) fn find(name: &str) -> Option<&'static ModelInfo> {
    MODELS.iter().find(|m| m.name.eq_ignore_ascii_case(name))
}

/// The index of an MHA configuration name (`c1`), case-insensitive.
pub(crate) fn mha_config(name: &str) -> Option<usize> {
    MHA_CONFIGS.iter().position(|(n, ..)| n.eq_ignore_ascii_case(name))
}

/// The names of the MHA configurations with their shapes, for messages.
pub(crate) fn mha_config_names() -> String {
    let items: Vec<String> =
        MHA_CONFIGS.iter().map(|(n, s, h, d)| format!("{n} = ({s}, {h}, {d})")).collect();
    items.join(", ")
}

/// The resolved sizes of one generation (defaults filled in, ranges checked).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Spec {
    pub layers: u64,
    pub batch: u64,
    pub seq: u64,
    pub rank: u64,
    pub encoder_len: u64,
    /// Index into the MHA configurations.
    pub config: usize,
    /// Replaces the published vocabulary size (decoder models and whisper).
    pub vocab: Option<u64>,
    /// Which of matmul-fb's [`PRODUCTS`] to emit.
    pub products: [bool; 3],
}

/// The products `fbc gen matmul-fb` can emit, in result order.
pub(crate) const PRODUCTS: [&str; 3] = ["o", "da", "db"];
/// Every product (the default).
pub(crate) const ALL_PRODUCTS: [bool; 3] = [true; 3];

/// A generated module: the function to differentiate and its trainable arguments.
#[derive(Debug)]
pub(crate) struct Generated {
    pub module: Module,
    pub func: String,
    pub trainable: Vec<String>,
}

/// `llama3.2-1b` → `llama3_2_1b`: a symbol name for the module.
fn module_name(model: &str) -> String {
    model.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect()
}

/// Builds the model's module. Errors are generator bugs (an op that does not verify), reported
/// with the dialect's message.
pub(crate) fn generate(
    ops: &OpRegistry,
    model: &ModelInfo,
    spec: &Spec,
) -> Result<Generated, String> {
    let g = Graph::new(ops);
    let name = module_name(model.name);
    match model.kind {
        Kind::Decoder(cfg) => {
            let mut cfg = *cfg;
            cfg.vocab = spec.vocab.unwrap_or(cfg.vocab);
            decoder::build(g, &cfg, &name, spec)
        }
        Kind::Bert => encoder::build_bert(g, &config::BERT_LARGE, &name, spec),
        Kind::Vit => encoder::build_vit(g, &config::VIT_LARGE, &name, spec),
        Kind::Whisper => {
            let mut cfg = config::WHISPER_LARGE_V3;
            cfg.vocab = spec.vocab.unwrap_or(cfg.vocab);
            whisper::build(g, &cfg, &name, spec)
        }
        Kind::MatmulFb => micro::matmul_fb(g, spec.products),
        Kind::Mha => micro::mha(g, spec),
    }
}

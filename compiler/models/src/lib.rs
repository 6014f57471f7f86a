//! The model generators behind `fbc gen`: the models of the FBLayout paper's Table 3 and its two
//! microbenchmarks (Fig. 16, Fig. 17), each built as an `fbc_ir::Module` through a small graph
//! recorder (`builder`).
//!
//! [`MODELS`] is the catalogue: each entry says which options apply and their defaults (the real
//! layer count and Table 3's batch and sequence). [`resolve`] checks a set of [`Options`] against
//! a model and fills in its defaults; [`generate`] builds the forward graph; [`build`] does both
//! and, for a training graph, runs the `autodiff` pass, giving the module `fbc gen` writes. The
//! hyperparameters and their sources are in `config.rs`; `docs/models.md` describes every graph
//! and its approximations.
//!
//! ```
//! let opts = fbc_models::Options { layers: Some(1), seq: Some(4), vocab: Some(32),
//!     training: true, ..Default::default() };
//! let m = fbc_models::build("llama3.2-1b", &opts).expect("a training graph");
//! assert!(m.find_func("loss_grad").is_some());
//! ```

mod blocks;
pub mod builder;
mod config;
mod decoder;
mod encoder;
pub mod hf;
mod micro;
pub mod rope;
mod unet;
mod whisper;

use std::sync::Arc;

use fbc_ir::pass::{PassContext, PassManager};
use fbc_ir::{Module, OpRegistry, SourceFile};

use builder::Graph;
use config::{DecoderCfg, MHA_CONFIGS};

/// What a model is built from.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Kind {
    Decoder(&'static DecoderCfg),
    Bert,
    Vit,
    Whisper,
    Unet,
    UnetDownBlock,
    MatmulFb,
    Mha,
}

/// One model `fbc gen` knows, with the options that apply to it and their defaults (`None`: the
/// option does not apply).
#[derive(Debug, Clone, Copy)]
pub struct ModelInfo {
    pub name: &'static str,
    pub about: &'static str,
    pub(crate) kind: Kind,
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
pub const MODELS: &[ModelInfo] = &[
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
        name: "sd1.5-unet",
        about: "Stable Diffusion v1.5 UNet (512x512 images), LoRA on every attention, noise MSE",
        kind: Kind::Unet,
        layers: None,
        batch: Some(2),
        seq: None,
        max_seq: 0,
        trainable: true,
        encoder_len: None,
        hidden: config::SD15_UNET.channels,
    },
    ModelInfo {
        name: "sd1.5-down-block",
        about: "SD 1.5 UNet's first down block: a ResNet and a transformer block, for benchmarks",
        kind: Kind::UnetDownBlock,
        layers: None,
        batch: Some(2),
        seq: None,
        max_seq: 0,
        trainable: true,
        encoder_len: None,
        hidden: config::SD15_UNET.channels,
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
pub fn models_help() -> String {
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
        let u = &config::SD15_UNET;
        if let Kind::Unet = m.kind {
            d.insert(0, format!("{UNET_LEVELS} levels, {} res blocks", u.layers_per_block));
        }
        if let Kind::Unet | Kind::UnetDownBlock = m.kind {
            d.push(format!("{0}x{0} latents, C={1}", u.sample_size, u.channels));
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
pub fn model_names() -> String {
    MODELS.iter().map(|m| m.name).collect::<Vec<_>>().join(", ")
}

pub fn find(name: &str) -> Option<&'static ModelInfo> {
    MODELS.iter().find(|m| m.name.eq_ignore_ascii_case(name))
}

/// The index of an MHA configuration name (`c1`), case-insensitive.
pub fn mha_config(name: &str) -> Option<usize> {
    MHA_CONFIGS.iter().position(|(n, ..)| n.eq_ignore_ascii_case(name))
}

/// The names of the MHA configurations with their shapes, for messages.
pub fn mha_config_names() -> String {
    let items: Vec<String> =
        MHA_CONFIGS.iter().map(|(n, s, h, d)| format!("{n} = ({s}, {h}, {d})")).collect();
    items.join(", ")
}

/// The resolved sizes of one generation (defaults filled in, ranges checked).
#[derive(Debug, Clone, Copy, Default)]
pub struct Spec {
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
    /// An inference module (`@prefill` and `@decode` with a KV cache, decoder models only)
    /// instead of the forward loss.
    pub inference: bool,
    /// Positions of the KV cache (`--inference`).
    pub max_seq: u64,
    /// The UNet's sizes (sd1.5-unet; 0 elsewhere): resolution levels, ResNet blocks per down
    /// level, latent side, first-level width.
    pub levels: u64,
    pub res_blocks: u64,
    pub latent: u64,
    pub channels: u64,
    /// Packed linear weights (`--quant`, `--inference` only).
    pub quant: Option<Quantised>,
}

/// The UNet's resolution levels (its four `block_out_channels`).
pub const UNET_LEVELS: u64 = 4;
/// The most ResNet blocks per level `--res-blocks` takes.
const MAX_RES_BLOCKS: u64 = 16;
/// The largest latent side `--latent` takes (8192x8192 images).
const MAX_LATENT: u64 = 1024;
/// The widest first level `--channels` takes.
const MAX_UNET_CHANNELS: u64 = 4096;

/// The KV-cache length of `--inference` when `--max-seq` is not given (at least `--seq`).
pub const DEFAULT_MAX_SEQ: u64 = 2048;

/// The products `fbc gen matmul-fb` can emit, in result order.
pub const PRODUCTS: [&str; 3] = ["o", "da", "db"];
/// Every product (the default).
pub const ALL_PRODUCTS: [bool; 3] = [true; 3];

/// A generated module: the function to differentiate and its trainable arguments.
#[derive(Debug)]
pub struct Generated {
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
pub fn generate(ops: &OpRegistry, model: &ModelInfo, spec: &Spec) -> Result<Generated, String> {
    let g = Graph::new(ops);
    let name = module_name(model.name);
    match model.kind {
        Kind::Decoder(cfg) => {
            let mut cfg = *cfg;
            cfg.vocab = spec.vocab.unwrap_or(cfg.vocab);
            if spec.inference {
                decoder::build_inference(ops, &cfg, &name, spec)
            } else {
                decoder::build(g, &cfg, &name, spec)
            }
        }
        Kind::Bert => encoder::build_bert(g, &config::BERT_LARGE, &name, spec),
        Kind::Vit => encoder::build_vit(g, &config::VIT_LARGE, &name, spec),
        Kind::Whisper => {
            let mut cfg = config::WHISPER_LARGE_V3;
            cfg.vocab = spec.vocab.unwrap_or(cfg.vocab);
            if spec.inference {
                whisper::build_inference(ops, &cfg, &name, spec)
            } else {
                whisper::build(g, &cfg, &name, spec)
            }
        }
        Kind::Unet | Kind::UnetDownBlock => {
            let shape = unet::UnetShape {
                batch: spec.batch,
                latent: spec.latent,
                levels: spec.levels,
                res_blocks: spec.res_blocks,
                channels: spec.channels,
            };
            match model.kind {
                Kind::Unet => unet::build(g, &config::SD15_UNET, &name, shape, spec.rank),
                _ => unet::build_down_block(g, &config::SD15_UNET, &name, shape, spec.rank),
            }
        }
        Kind::MatmulFb => micro::matmul_fb(g, config::MATMUL_FB, spec.products),
        Kind::Mha => micro::mha(g, spec),
    }
}

/// The options of one generation, as `fbc gen` takes them: `None` (or empty, false) leaves the
/// model's default.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Number of transformer layers.
    pub layers: Option<u64>,
    /// Sequence length in tokens.
    pub seq: Option<u64>,
    /// Batch size.
    pub batch: Option<u64>,
    /// LoRA rank (adapter width for vit-large); 0: no adapters.
    pub lora_rank: Option<u64>,
    /// Also build the backward graph (`autodiff` over the trainable parameters).
    pub training: bool,
    /// MHA configuration of Fig. 17 (`c1`, `c2`, `c3`; mha only).
    pub config: Option<String>,
    /// Number of encoder states the decoder cross-attends to (whisper-large-decoder only).
    pub encoder_len: Option<u64>,
    /// Vocabulary size replacing the published one (decoder models and whisper only).
    pub vocab: Option<u64>,
    /// matmul-fb's products (`o`, `da`, `db`); empty: all three.
    pub products: Vec<String>,
    /// Build `@prefill` (`seq` tokens) and `@decode` (one token) with a static KV cache of
    /// `max_seq` positions per layer (decoder models only).
    pub inference: bool,
    /// KV-cache positions (`inference` only; default [`DEFAULT_MAX_SEQ`], at least `seq`).
    pub max_seq: Option<u64>,
    /// Resolution levels of the UNet (sd1.5-unet only; 1 to 4, default 4).
    pub levels: Option<u64>,
    /// ResNet blocks per down level of the UNet (sd1.5-unet only; default 2).
    pub res_blocks: Option<u64>,
    /// Side of the UNet's square latent (sd1.5-unet and sd1.5-down-block; default 64, for
    /// 512x512 images).
    pub latent: Option<u64>,
    /// Width of the UNet's first level (sd1.5-unet and sd1.5-down-block; default 320, a
    /// multiple of 32).
    pub channels: Option<u64>,
    /// Packed linear weights (`inference` only): `"int8"` or `"int4"`, each weight `W` the
    /// arguments `W.q` and `W.scales` decoded by a `tensor.dequantize` (the storage of
    /// `fbc pack --quant`, which `fbc run --weights` feeds as it is).
    pub quant: Option<String>,
    /// Values per scale with `quant` (default [`DEFAULT_GROUP`], capped at the row length).
    pub group: Option<u64>,
}

/// The group of `--quant` when `--group` is not given (`fbc pack`'s default).
pub const DEFAULT_GROUP: u64 = 64;

/// Packed linear weights of an inference module: the scheme (`int8`, `int4`) and the values
/// per scale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quantised {
    pub scheme: &'static str,
    pub group: u64,
}

/// Why a model could not be built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// The model or an option is wrong (an unknown name, an option that does not apply, a value
    /// out of range): the caller's mistake.
    Usage(String),
    /// The generator built a graph that does not verify, or autodiff failed on it: a bug in
    /// fbc, with the model named.
    Internal(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Usage(m) | Error::Internal(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for Error {}

/// Upper bounds that keep every tensor's element count far from u64 overflow while allowing any
/// realistic setting.
const MAX_LAYERS: u64 = 1024;
const MAX_BATCH: u64 = 4096;
/// 2^24 tokens: 65 times the largest published vocabulary (Gemma 2's 256,000).
const MAX_VOCAB: u64 = 1 << 24;
/// The LoRA rank (and ViT adapter width) when `lora_rank` is not given: the rank of the
/// examples and a common LoRA setting.
const DEFAULT_RANK: u64 = 8;

/// The model named `name` (case-insensitive), or a usage error listing the known ones.
pub fn model(name: &str) -> Result<&'static ModelInfo, Error> {
    find(name).ok_or_else(|| {
        Error::Usage(format!("unknown model `{name}`; known models: {}", model_names()))
    })
}

/// Fills in the defaults of `model` and checks every option against it: an option that does not
/// apply to the model, or a value out of its range, is a usage error (so that a typo'd benchmark
/// setting cannot produce a graph of the wrong size).
pub fn resolve(model: &ModelInfo, a: &Options) -> Result<Spec, Error> {
    let name = model.name;
    let usage = Error::Usage;
    let not_for = |opt: &str, why: &str| usage(format!("`{opt}` does not apply to {name}: {why}"));
    let fixed = match model.name {
        "matmul-fb" => "Fig. 16's shapes are fixed (M=512, K=2048, N=8192)",
        "mha" => "it is a single attention block (Fig. 17)",
        "sd1.5-unet" | "sd1.5-down-block" => {
            "its sizes are --latent, --levels, --res-blocks and --channels; the text is CLIP's 77 \
             states"
        }
        _ => "",
    };
    let in_range = |opt: &str, v: u64, lo: u64, hi: u64| {
        if (lo..=hi).contains(&v) {
            Ok(v)
        } else {
            Err(usage(format!("`{opt}` for {name} must be from {lo} to {hi}, found {v}")))
        }
    };

    let layers = match (model.layers, a.layers) {
        (Some(d), None) => d,
        (Some(_), Some(n)) => in_range("--layers", n, 1, MAX_LAYERS)?,
        (None, Some(_)) => return Err(not_for("--layers", fixed)),
        (None, None) => 0,
    };
    let batch = match (model.batch, a.batch) {
        (Some(d), None) => d,
        (Some(_), Some(n)) => in_range("--batch", n, 1, MAX_BATCH)?,
        (None, Some(_)) => return Err(not_for("--batch", fixed)),
        (None, None) => 0,
    };
    let seq = match (model.seq, a.seq) {
        (Some(d), None) => d,
        (Some(_), Some(n)) => in_range("--seq", n, 1, model.max_seq)?,
        (None, Some(_)) if model.name == "vit-large" => {
            return Err(not_for(
                "--seq",
                "its sequence is fixed by the 224x224 image: 196 patches of 16x16 plus [CLS]",
            ))
        }
        (None, Some(_)) => return Err(not_for("--seq", fixed)),
        (None, None) => 0,
    };
    if a.inference && a.training {
        return Err(usage("--inference and --training build different graphs; give one".into()));
    }
    if a.inference && !matches!(model.kind, Kind::Decoder(_) | Kind::Whisper) {
        return Err(not_for(
            "--inference",
            "inference graphs are built for the decoder-only models (llama3.2-1b, qwen2.5-1.5b, gemma2-2b) and whisper-large-decoder",
        ));
    }
    let max_seq = match (a.inference, a.max_seq) {
        (true, Some(n)) if n < seq => {
            return Err(usage(format!(
                "`--max-seq` ({n}) must be at least `--seq` ({seq}): the prompt fills the cache from position 0"
            )))
        }
        (true, Some(n)) => in_range("--max-seq", n, 1, model.max_seq)?,
        (true, None) => DEFAULT_MAX_SEQ.min(model.max_seq).max(seq),
        (false, Some(_)) => {
            return Err(usage("`--max-seq` applies only with --inference".into()))
        }
        (false, None) => 0,
    };
    let rank = match (model.trainable, a.lora_rank) {
        // An inference graph gets adapters only when asked for (merged weights are the norm).
        (true, None) if a.inference => 0,
        (true, None) => DEFAULT_RANK,
        (true, Some(r)) => in_range("--lora-rank", r, 0, model.hidden)?,
        (false, Some(_)) => return Err(not_for("--lora-rank", "it has no trainable parameters")),
        (false, None) => 0,
    };
    if a.training && !model.trainable {
        return Err(not_for("--training", "it has no loss to differentiate"));
    }
    let encoder_len = match (model.encoder_len, a.encoder_len) {
        (Some((d, _)), None) => d,
        (Some((_, max)), Some(n)) => in_range("--encoder-len", n, 1, max)?,
        (None, Some(_)) => {
            return Err(not_for("--encoder-len", "only whisper-large-decoder has an encoder input"))
        }
        (None, None) => 0,
    };
    let config = match (model.name, a.config.as_deref()) {
        ("mha", None) => 0,
        ("mha", Some(c)) => mha_config(c).ok_or_else(|| {
            usage(format!("unknown MHA configuration `{c}`; known: {}", mha_config_names()))
        })?,
        (_, Some(_)) => {
            return Err(usage(format!("`--config` applies only to mha, not to {name}")))
        }
        (_, None) => 0,
    };
    let vocab = match (a.vocab, &model.kind) {
        (None, _) => None,
        (Some(v), Kind::Decoder(_) | Kind::Whisper) => Some(in_range("--vocab", v, 1, MAX_VOCAB)?),
        (Some(_), _) => {
            return Err(usage(format!(
                "--vocab applies to decoder models and whisper-large-decoder, not {name}"
            )))
        }
    };
    let products = match (model.kind, a.products.is_empty()) {
        (_, true) => ALL_PRODUCTS,
        (Kind::MatmulFb, false) => {
            let mut p = [false; 3];
            for name in &a.products {
                let i = PRODUCTS.iter().position(|n| n == name).ok_or_else(|| {
                    usage(format!(
                        "unknown matmul-fb product `{name}`; known: {}",
                        PRODUCTS.join(", ")
                    ))
                })?;
                p[i] = true;
            }
            p
        }
        (_, false) => {
            return Err(usage(format!("`--products` applies only to matmul-fb, not to {name}")))
        }
    };
    let (levels, res_blocks, latent, channels) = unet_sizes(model, a)?;
    let quant = match (&a.quant, a.group) {
        (None, None) => None,
        (None, Some(_)) => return Err(usage("`--group` applies only with --quant".into())),
        (Some(_), _) if !a.inference => {
            return Err(usage(
                "`--quant` applies only with --inference (packed weights are frozen)".into(),
            ))
        }
        (Some(q), g) => {
            let schemes = fbc_dialects::tensor::quant::SCHEMES;
            let Some(&scheme) = schemes.iter().find(|s| **s == q.as_str()) else {
                return Err(usage(format!(
                    "`--quant` must be one of {}, found `{q}`",
                    schemes.join(", ")
                )));
            };
            let group = g.unwrap_or(DEFAULT_GROUP);
            if group == 0 {
                return Err(usage("`--group` must be at least 1".into()));
            }
            Some(Quantised { scheme, group })
        }
    };
    Ok(Spec {
        layers,
        batch,
        seq,
        rank,
        encoder_len,
        config,
        vocab,
        products,
        inference: a.inference,
        max_seq,
        levels,
        res_blocks,
        latent,
        channels,
        quant,
    })
}

/// The UNet options of `a` checked against `model`: `(levels, res_blocks, latent, channels)`
/// with the defaults filled in for sd1.5-unet, zeros for the other models (where giving one is
/// a usage error).
fn unet_sizes(model: &ModelInfo, a: &Options) -> Result<(u64, u64, u64, u64), Error> {
    let name = model.name;
    let given = [
        ("--levels", a.levels),
        ("--res-blocks", a.res_blocks),
        ("--latent", a.latent),
        ("--channels", a.channels),
    ];
    let block = matches!(model.kind, Kind::UnetDownBlock);
    if !matches!(model.kind, Kind::Unet) {
        // The down block takes the latent and the width, not the UNet's depth.
        let applies = |opt: &str| block && matches!(opt, "--latent" | "--channels");
        if let Some((opt, _)) = given.iter().find(|(o, v)| v.is_some() && !applies(o)) {
            return Err(Error::Usage(format!("`{opt}` applies only to sd1.5-unet, not to {name}")));
        }
        if !block {
            return Ok((0, 0, 0, 0));
        }
    }
    let cfg = &config::SD15_UNET;
    let in_range = |opt: &str, v: u64, lo: u64, hi: u64| {
        if (lo..=hi).contains(&v) {
            Ok(v)
        } else {
            Err(Error::Usage(format!("`{opt}` for {name} must be from {lo} to {hi}, found {v}")))
        }
    };
    let levels = if block { 1 } else { UNET_LEVELS };
    let levels = in_range("--levels", a.levels.unwrap_or(levels), 1, UNET_LEVELS)?;
    let res_blocks =
        in_range("--res-blocks", a.res_blocks.unwrap_or(cfg.layers_per_block), 1, MAX_RES_BLOCKS)?;
    let latent = in_range("--latent", a.latent.unwrap_or(cfg.sample_size), 1, MAX_LATENT)?;
    let halvings = 1u64 << (levels - 1);
    if latent % halvings != 0 {
        return Err(Error::Usage(format!(
            "`--latent` ({latent}) must be a multiple of {halvings}: {levels} levels halve it {} \
             times",
            levels - 1
        )));
    }
    let channels =
        in_range("--channels", a.channels.unwrap_or(cfg.channels), 1, MAX_UNET_CHANNELS)?;
    if channels % cfg.norm_groups != 0 {
        return Err(Error::Usage(format!(
            "`--channels` ({channels}) must be a multiple of {}: the GroupNorms have {} groups",
            cfg.norm_groups, cfg.norm_groups
        )));
    }
    Ok((levels, res_blocks, latent, channels))
}

impl Generated {
    /// The pass that adds the backward graph: `autodiff{func=F wrt=P1,P2,...}` over the
    /// trainable parameters, or a usage error when there are none (`lora_rank` 0).
    pub fn autodiff_pipeline(&self, model: &ModelInfo) -> Result<String, Error> {
        if self.trainable.is_empty() {
            return Err(Error::Usage(format!(
                "--training: {} has no trainable parameters with --lora-rank 0",
                model.name
            )));
        }
        Ok(format!("autodiff{{func={} wrt={}}}", self.func, self.trainable.join(",")))
    }
}

/// A bug in the generator of `model` (or in autodiff on its graph), with the model named.
fn internal(model: &ModelInfo, msg: &str) -> Error {
    Error::Internal(format!("fbc gen {}: internal error: {msg}", model.name))
}

/// Builds `model` with `spec` and checks it with the verifier: a graph that does not verify is
/// an internal error naming the model.
pub fn generate_verified(
    ops: &OpRegistry,
    model: &ModelInfo,
    spec: &Spec,
) -> Result<Generated, Error> {
    let internal = |msg: String| internal(model, &msg);
    let generated = generate(ops, model, spec)
        .map_err(|e| internal(format!("building the graph failed: {e}")))?;
    let diags = fbc_ir::verify_module(&generated.module);
    if !diags.is_empty() {
        let msgs: Vec<String> = diags.iter().map(|d| d.message.clone()).collect();
        return Err(internal(format!("the graph does not verify: {}", msgs.join("; "))));
    }
    Ok(generated)
}

/// The module `fbc gen NAME` writes for `opts`, built with the stock op and pass registries: the
/// forward graph, or with `opts.training` the graph after `autodiff`. The training graph is
/// built from the printed forward text (`<fbc gen NAME>`), as `fbc gen` does, so that the two
/// are the same module and a diagnostic of autodiff points into real text.
pub fn build(name: &str, opts: &Options) -> Result<Module, Error> {
    let ops = fbc_dialects::registry();
    let model = model(name)?;
    let spec = resolve(model, opts)?;
    let generated = generate_verified(&ops, model, &spec)?;
    if !opts.training {
        return Ok(generated.module);
    }
    let pipeline = generated.autodiff_pipeline(model)?;
    let internal = |msg: String| internal(model, &msg);
    let (file, module) = reparse(&ops, model, &generated.module).map_err(internal)?;
    run_pipeline(&ops, &file, module, &pipeline).map_err(internal)
}

/// `module`, read from `file`, after `pipeline` (the training graph's `autodiff`); a failure is
/// rendered against `file`.
fn run_pipeline(
    ops: &OpRegistry,
    file: &SourceFile,
    mut module: Module,
    pipeline: &str,
) -> Result<Module, String> {
    let passes = fbc_transforms::default_registry();
    let steps = passes.parse_pipeline(pipeline).map_err(|e| e.message)?;
    let mut cx = PassContext::new(ops);
    PassManager::new(steps)
        .run(&mut module, &mut cx, &mut |_| {})
        .map_err(|d| fbc_grammar::diag::render_all(file, &d))?;
    Ok(module)
}

/// The module `fbc gen --from-hf DIR` writes: the model of the checkpoint whose `config.json`
/// text is `config`, with its tensor names and `[out, in]` weights. A decoder gives `@logits`
/// (forward), or with `opts.training` `@loss` (labels) and its backward graph over the LoRA
/// adapters; BERT and ViT give `@encode` (the last hidden state, and BERT's pooler output);
/// Whisper's decoder gives `@logits` over `encoder_len` encoder states. `opts.layers` (at most
/// the config's), `seq` (not ViT), `batch`, `encoder_len` (Whisper) and, for the causal LMs,
/// `lora_rank` apply; the vocabulary is the config's.
pub fn build_hf(config: &str, opts: &Options) -> Result<Module, Error> {
    let (arch, model) = hf::model_config(config)?;
    let usage = Error::Usage;
    if opts.inference
        || opts.vocab.is_some()
        || opts.config.is_some()
        || !opts.products.is_empty()
        || opts.max_seq.is_some()
        || opts.levels.is_some()
        || opts.res_blocks.is_some()
        || opts.latent.is_some()
        || opts.channels.is_some()
    {
        return Err(usage(
            "--from-hf takes --layers, --seq, --batch, --lora-rank, --training and (Whisper) \
             --encoder-len only"
                .into(),
        ));
    }
    let whisper = matches!(model, hf::HfModel::Whisper(_));
    if opts.encoder_len.is_some() && !whisper {
        return Err(usage(format!("--encoder-len applies to Whisper's decoder, not {arch}")));
    }
    let (config_layers, max_seq) = match &model {
        hf::HfModel::Decoder(c) => (c.layers, c.max_positions),
        hf::HfModel::Bert(c) => (c.layers, c.max_positions),
        hf::HfModel::Vit(c) => (c.layers, 0),
        hf::HfModel::Whisper(c) => (c.layers, c.max_target_positions),
    };
    let layers = opts.layers.unwrap_or(config_layers);
    if layers == 0 || layers > config_layers {
        return Err(usage(format!("--layers must be from 1 to the config's {config_layers}")));
    }
    let causal_lm = matches!(model, hf::HfModel::Decoder(_));
    if !causal_lm && (opts.training || opts.lora_rank.is_some()) {
        return Err(usage(format!(
            "--training and --lora-rank with --from-hf apply to the causal LMs, not {arch}"
        )));
    }
    if matches!(model, hf::HfModel::Vit(_)) && opts.seq.is_some() {
        return Err(usage(
            "--seq does not apply to ViTModel: its sequence is the image's patches".into(),
        ));
    }
    let seq = opts.seq.unwrap_or(128.min(max_seq.max(1)));
    if !matches!(model, hf::HfModel::Vit(_)) && (seq == 0 || seq > max_seq) {
        return Err(usage(format!("--seq must be from 1 to the config's {max_seq} positions")));
    }
    let encoder_len = match &model {
        hf::HfModel::Whisper(c) => {
            let e = opts.encoder_len.unwrap_or(c.max_source_positions);
            if e == 0 || e > c.max_source_positions {
                return Err(usage(format!(
                    "--encoder-len must be from 1 to max_source_positions {}",
                    c.max_source_positions
                )));
            }
            e
        }
        _ => 0,
    };
    let rank = opts.lora_rank.unwrap_or(if opts.training { 8 } else { 0 });
    let spec = Spec {
        layers,
        batch: opts.batch.unwrap_or(1).max(1),
        seq,
        rank,
        encoder_len,
        ..Spec::default()
    };
    let ops = fbc_dialects::registry();
    let name = module_name(&arch);
    let g = Graph::new(&ops);
    let internal =
        |m: String| Error::Internal(format!("fbc gen --from-hf ({arch}): internal error: {m}"));
    let generated = match model {
        hf::HfModel::Decoder(mut cfg) => {
            cfg.layers = layers;
            if opts.training {
                decoder::build(g, &cfg, &name, &spec)
            } else {
                decoder::build_logits(g, &cfg, &name, &spec)
            }
        }
        hf::HfModel::Bert(cfg) => encoder::build_bert(g, &cfg, &name, &spec),
        hf::HfModel::Vit(cfg) => encoder::build_vit(g, &cfg, &name, &spec),
        hf::HfModel::Whisper(mut cfg) => {
            cfg.layers = layers;
            whisper::build(g, &cfg, &name, &spec)
        }
    }
    .map_err(|e| internal(format!("building the graph failed: {e}")))?;
    let diags = fbc_ir::verify_module(&generated.module);
    if let Some(d) = diags.first() {
        return Err(internal(format!("the graph does not verify: {}", d.message)));
    }
    if !opts.training {
        return Ok(generated.module);
    }
    if generated.trainable.is_empty() {
        return Err(usage("--training needs --lora-rank of at least 1".into()));
    }
    let pipeline =
        format!("autodiff{{func={} wrt={}}}", generated.func, generated.trainable.join(","));
    let text = fbc_ir::print_module(&generated.module);
    let file = Arc::new(SourceFile::new(format!("<fbc gen --from-hf {arch}>"), text));
    let module = fbc_ir::parse_module(&file, &ops)
        .map_err(|d| internal(fbc_grammar::diag::render_all(&file, &d)))?;
    run_pipeline(&ops, &file, module, &pipeline).map_err(internal)
}

/// Most rows, columns or reduction steps of [`matmul_fb_at`].
pub const MATMUL_FB_MAX_SIDE: u64 = 1 << 16;

/// matmul-fb's three products (`o = a·b`, `da = do·bᵀ`, `db = aᵀ·do`) at `M × K × N` = `dims`
/// instead of Fig. 16's fixed 512 × 2048 × 8192, verified, printed and parsed back as the file
/// `<fbc gen matmul-fb MxKxN>` (so that diagnostics have positions): the contraction `fbc
/// calibrate` times, at a size a device runs in moments. A side of 0 or over
/// [`MATMUL_FB_MAX_SIDE`] is a usage error.
pub fn matmul_fb_at(
    ops: &OpRegistry,
    dims: (u64, u64, u64),
) -> Result<(Arc<SourceFile>, Module), Error> {
    let (m, k, n) = dims;
    if [m, k, n].iter().any(|&d| d == 0 || d > MATMUL_FB_MAX_SIDE) {
        return Err(Error::Usage(format!(
            "matmul-fb at {m}x{k}x{n}: each side must be from 1 to {MATMUL_FB_MAX_SIDE}"
        )));
    }
    let model = model("matmul-fb")?;
    let generated = micro::matmul_fb(Graph::new(ops), dims, ALL_PRODUCTS)
        .map_err(|e| internal(model, &format!("building the graph failed: {e}")))?;
    let diags = fbc_ir::verify_module(&generated.module);
    if !diags.is_empty() {
        let msgs: Vec<String> = diags.iter().map(|d| d.message.clone()).collect();
        return Err(internal(model, &format!("the graph does not verify: {}", msgs.join("; "))));
    }
    let text = fbc_ir::print_module(&generated.module);
    let file = Arc::new(SourceFile::new(format!("<fbc gen matmul-fb {m}x{k}x{n}>"), text));
    let module = fbc_ir::parse_module(&file, ops)
        .map_err(|d| internal(model, &fbc_grammar::diag::render_all(&file, &d)))?;
    Ok((file, module))
}

/// The printed form of a generated `module`, parsed back as the file `<fbc gen NAME>`: the
/// module a pass over the generated graph should run on, so that its diagnostics have
/// positions.
pub fn reparse(
    ops: &OpRegistry,
    model: &ModelInfo,
    module: &Module,
) -> Result<(Arc<SourceFile>, Module), String> {
    let text = fbc_ir::print_module(module);
    let file = Arc::new(SourceFile::new(format!("<fbc gen {}>", model.name), text));
    let module =
        fbc_ir::parse_module(&file, ops).map_err(|d| fbc_grammar::diag::render_all(&file, &d))?;
    Ok((file, module))
}

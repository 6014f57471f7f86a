//! `fbc gen`'s arguments (the command is `gen_cmd.rs`).

use std::path::PathBuf;

use clap::Args;

use super::InstrumentationArgs;

/// `fbc gen`'s arguments.
#[derive(Debug, Args)]
#[command(after_help = fbc_models::models_help())]
pub struct GenArgs {
    /// The model to generate (see the list below).
    #[arg(required_unless_present = "from_hf", conflicts_with = "from_hf")]
    pub model: Option<String>,

    /// Build the model of a Hugging Face checkpoint folder instead (its `config.json`:
    /// LlamaForCausalLM, Qwen2ForCausalLM, Gemma2ForCausalLM, BertModel, ViTModel,
    /// WhisperForConditionalGeneration's decoder), with the
    /// checkpoint's tensor names and `[out, in]` weights, so `fbc run --inputs
    /// DIR/model.safetensors` binds them: decoders give `@logits`, or with --training `@loss`
    /// and its backward graph over LoRA adapters; BERT and ViT give `@encode`, Whisper's decoder
    /// `@logits` over `--encoder-len` encoder states.
    #[arg(long, value_name = "DIR")]
    pub from_hf: Option<PathBuf>,

    /// Number of transformer layers (default: the model's published count).
    #[arg(long, value_name = "N")]
    pub layers: Option<u64>,

    /// Sequence length in tokens (default: the paper's Table 3 setting).
    #[arg(long, value_name = "S")]
    pub seq: Option<u64>,

    /// Batch size (default: the paper's Table 3 setting).
    #[arg(long, value_name = "B")]
    pub batch: Option<u64>,

    /// LoRA rank, alpha = 2R (adapter width for vit-large); 0: no adapters [default: 8].
    #[arg(long, value_name = "R")]
    pub lora_rank: Option<u64>,

    /// Also emit the backward graph: runs `autodiff{func=loss wrt=<trainable parameters>}`.
    #[arg(long)]
    pub training: bool,

    /// Build an inference module instead (decoder models): `@prefill` over `--seq` prompt
    /// tokens and `@decode` of one token, each writing its keys and values into a static KV
    /// cache per layer at a run-time position and returning the logits and the caches.
    #[arg(long, conflicts_with = "training")]
    pub inference: bool,

    /// KV-cache positions per layer, with --inference [default: 2048, at least --seq].
    #[arg(long, value_name = "N")]
    pub max_seq: Option<u64>,

    /// Packed linear weights, with --inference: `int8` or `int4`. Each weight `W` becomes the
    /// arguments `W.q` (its rows' bytes) and `W.scales` (an f32 scale per `--group` values of a
    /// row) decoded by a `tensor.dequantize` that the kernels fuse into their reads; `fbc run
    /// --weights W.fbw` feeds them from `fbc pack --quant` as stored.
    #[arg(long, value_name = "int8|int4", requires = "inference")]
    pub quant: Option<String>,

    /// Values per scale with --quant [default: 64, capped at the row length].
    #[arg(long, value_name = "N", requires = "quant")]
    pub group: Option<u64>,

    /// MHA configuration of Fig. 17 (mha only): c1 = (512, 32, 2048), c2 = (512, 16, 1024),
    /// c3 = (512, 8, 1024) as [sequence, heads, hidden].
    #[arg(long, value_name = "CONFIG")]
    pub config: Option<String>,

    /// Number of encoder states the decoder cross-attends to (whisper-large-decoder only;
    /// default 300, the paper's Table 3; 1500 is a full 30 s window).
    #[arg(long, value_name = "E")]
    pub encoder_len: Option<u64>,

    /// Vocabulary size, replacing the published one (decoder models and whisper only): for a
    /// custom tokenizer, or to keep the embedding and head small when checking a compiled graph
    /// against the interpreter.
    #[arg(long, value_name = "V")]
    pub vocab: Option<u64>,

    /// The products of matmul-fb (matmul-fb only; default all three): `o` = a·b (forward),
    /// `da` = do·bᵀ, `db` = aᵀ·do (the backward products); `o,da` is Fig. 16's pair.
    #[arg(long, value_name = "o,da,db", value_delimiter = ',')]
    pub products: Vec<String>,

    /// Resolution levels of the UNet, 1 to 4 (sd1.5-unet only; default 4): the first N of
    /// its 320/640/1280/1280-channel levels.
    #[arg(long, value_name = "N")]
    pub levels: Option<u64>,

    /// ResNet blocks per down level of the UNet (sd1.5-unet only; default 2, up levels have
    /// one more).
    #[arg(long, value_name = "N")]
    pub res_blocks: Option<u64>,

    /// Side of the UNet's square latent (sd1.5-unet and sd1.5-down-block; default 64, for
    /// 512x512 images; a multiple of 2^(levels-1)).
    #[arg(long, value_name = "N")]
    pub latent: Option<u64>,

    /// Width of the UNet's first level (sd1.5-unet and sd1.5-down-block; default 320, a
    /// multiple of 32; the levels have 1, 2, 4, 4 times as many channels).
    #[arg(long, value_name = "C")]
    pub channels: Option<u64>,

    /// Output file (default: standard output).
    #[arg(short, long, value_name = "PATH")]
    pub output: Option<PathBuf>,

    #[command(flatten)]
    pub instr: InstrumentationArgs,
}

impl GenArgs {
    /// The generator's options (`fbc_models::Options`) of these arguments.
    pub fn options(&self) -> fbc_models::Options {
        fbc_models::Options {
            layers: self.layers,
            seq: self.seq,
            batch: self.batch,
            lora_rank: self.lora_rank,
            training: self.training,
            config: self.config.clone(),
            encoder_len: self.encoder_len,
            vocab: self.vocab,
            products: self.products.clone(),
            inference: self.inference,
            max_seq: self.max_seq,
            levels: self.levels,
            res_blocks: self.res_blocks,
            latent: self.latent,
            channels: self.channels,
            quant: self.quant.clone(),
            group: self.group,
        }
    }
}

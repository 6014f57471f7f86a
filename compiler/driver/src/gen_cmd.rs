//! `fbc gen MODEL`: writes the `.fbir` of a model of the FBLayout paper (Table 3) or of one of
//! its microbenchmarks (Fig. 16, Fig. 17), as a forward `@loss` function or, with `--training`,
//! with the backward graph that the `autodiff` pass derives from it.
//!
//! The module is built in memory (see `gen/`), verified with the same verifier `fbc FILE` runs,
//! printed in canonical form and written atomically: a failed generation leaves no file behind.
//! Options that do not apply to the chosen model are errors rather than silently ignored, so a
//! typo'd benchmark setting cannot produce a graph of the wrong size.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use fbc_ir::SourceFile;

use crate::cli::InstrumentationArgs;
use crate::{output, Driver, Failure};

#[path = "gen/mod.rs"]
mod generate;

use generate::{ModelInfo, Spec};

#[derive(Debug, Args)]
#[command(after_help = generate::models_help())]
pub struct GenArgs {
    /// The model to generate (see the list below).
    pub model: String,

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

    /// Output file (default: standard output).
    #[arg(short, long, value_name = "PATH")]
    pub output: Option<PathBuf>,

    #[command(flatten)]
    pub instr: InstrumentationArgs,
}

/// Upper bounds that keep every tensor's element count far from u64 overflow while allowing any
/// realistic setting.
const MAX_LAYERS: u64 = 1024;
const MAX_BATCH: u64 = 4096;
/// 2^24 tokens: 65 times the largest published vocabulary (Gemma 2's 256,000).
const MAX_VOCAB: u64 = 1 << 24;
/// The LoRA rank (and ViT adapter width) when `--lora-rank` is not given: the rank of the
/// examples and a common LoRA setting.
const DEFAULT_RANK: u64 = 8;

pub(crate) fn run(driver: &Driver, a: &GenArgs) -> Result<(), Failure> {
    let model = generate::find(&a.model).ok_or_else(|| {
        Failure::Usage(format!(
            "unknown model `{}`; known models: {}",
            a.model,
            generate::model_names()
        ))
    })?;
    let spec = resolve(model, a)?;
    if a.training && driver.passes.get("autodiff").is_none() {
        return Err(Failure::Usage(
            "--training needs the autodiff pass, which is not registered".into(),
        ));
    }
    let generated = generate::generate(&driver.ops, model, &spec)
        .map_err(|e| internal(model, &format!("building the graph failed: {e}")))?;
    let diags = fbc_ir::verify_module(&generated.module);
    if !diags.is_empty() {
        let msgs: Vec<String> = diags.iter().map(|d| d.message.clone()).collect();
        return Err(internal(model, &format!("the graph does not verify: {}", msgs.join("; "))));
    }
    let mut text = fbc_ir::print_module(&generated.module);
    if a.training {
        if generated.trainable.is_empty() {
            return Err(Failure::Usage(format!(
                "--training: {} has no trainable parameters with --lora-rank 0",
                model.name
            )));
        }
        // Re-read the printed forward graph so that any diagnostic of the pass points into
        // real text (the generated module has no source positions).
        let file = Arc::new(SourceFile::new(format!("<fbc gen {}>", model.name), text));
        let mut module = fbc_ir::parse_module(&file, &driver.ops)
            .map_err(|d| Failure::Input(fbc_grammar::diag::render_all(&file, &d)))?;
        let pipeline =
            format!("autodiff{{func={} wrt={}}}", generated.func, generated.trainable.join(","));
        driver.run_pipeline(&file, &mut module, &pipeline, None, &a.instr)?;
        text = fbc_ir::print_module(&module);
    }
    output::write_text(a.output.as_deref(), &text)
}

fn internal(model: &ModelInfo, msg: &str) -> Failure {
    Failure::Input(format!("fbc gen {}: internal error: {msg}\n", model.name))
}

/// Fills in the defaults of `model` and checks every option against it.
fn resolve(model: &ModelInfo, a: &GenArgs) -> Result<Spec, Failure> {
    let name = model.name;
    let usage = |msg: String| Failure::Usage(msg);
    let not_for = |opt: &str, why: &str| usage(format!("`{opt}` does not apply to {name}: {why}"));
    let fixed = match model.name {
        "matmul-fb" => "Fig. 16's shapes are fixed (M=512, K=2048, N=8192)",
        "mha" => "it is a single attention block (Fig. 17)",
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
    let rank = match (model.trainable, a.lora_rank) {
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
        ("mha", Some(c)) => generate::mha_config(c).ok_or_else(|| {
            usage(format!(
                "unknown MHA configuration `{c}`; known: {}",
                generate::mha_config_names()
            ))
        })?,
        (_, Some(_)) => {
            return Err(usage(format!("`--config` applies only to mha, not to {name}")))
        }
        (_, None) => 0,
    };
    let vocab = match (a.vocab, &model.kind) {
        (None, _) => None,
        (Some(v), generate::Kind::Decoder(_) | generate::Kind::Whisper) => {
            Some(in_range("--vocab", v, 1, MAX_VOCAB)?)
        }
        (Some(_), _) => {
            return Err(Failure::Usage(format!(
                "--vocab applies to decoder models and whisper-large-decoder, not {}",
                model.name
            )))
        }
    };
    let products = match (model.kind, a.products.is_empty()) {
        (_, true) => generate::ALL_PRODUCTS,
        (generate::Kind::MatmulFb, false) => {
            let mut p = [false; 3];
            for name in &a.products {
                let i = generate::PRODUCTS.iter().position(|n| n == name).ok_or_else(|| {
                    usage(format!(
                        "unknown matmul-fb product `{name}`; known: {}",
                        generate::PRODUCTS.join(", ")
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
    Ok(Spec { layers, batch, seq, rank, encoder_len, config, vocab, products })
}

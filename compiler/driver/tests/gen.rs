//! `fbc gen` as a user runs it: every model generates IR that `fbc` reads back, the output is
//! stable (snapshot), option mistakes are exit-2 errors that say what is allowed, and the graph
//! grows by the same number of ops for every added layer.

mod common;

use common::{fbc, scratch, Out};

/// Small but complete settings of every model (layered models also get `--layers N`): short
/// sequences, rank 2.
const SMALL: &[(&str, &[&str])] = &[
    ("llama3.2-1b", &["--seq", "16", "--lora-rank", "2"]),
    ("qwen2.5-1.5b", &["--seq", "16", "--lora-rank", "2"]),
    ("gemma2-2b", &["--seq", "16", "--lora-rank", "2"]),
    ("bert-large", &["--seq", "16", "--batch", "2", "--lora-rank", "2"]),
    ("vit-large", &["--batch", "1", "--lora-rank", "2"]),
    ("whisper-large-decoder", &["--seq", "16", "--encoder-len", "24", "--lora-rank", "2"]),
    ("sd1.5-unet", UNET_SMALL),
    (
        "sd1.5-down-block",
        &["--latent", "8", "--channels", "32", "--batch", "1", "--lora-rank", "2"],
    ),
    ("matmul-fb", &[]),
    ("mha", &["--config", "c2", "--seq", "16"]),
];

/// The UNet at two levels of one ResNet block, 8x8 latents, 32 channels, batch 1, rank 2.
const UNET_SMALL: &[&str] = &[
    "--levels",
    "2",
    "--res-blocks",
    "1",
    "--latent",
    "8",
    "--channels",
    "32",
    "--batch",
    "1",
    "--lora-rank",
    "2",
];

/// Models with layers, for the growth test.
const LAYERED: &[&str] = &[
    "llama3.2-1b",
    "qwen2.5-1.5b",
    "gemma2-2b",
    "bert-large",
    "vit-large",
    "whisper-large-decoder",
];

fn gen(model: &str, extra: &[&str]) -> Out {
    let mut args = vec!["gen", model];
    args.extend_from_slice(extra);
    fbc(&args)
}

/// `gen` with the small settings of `model` and, for layered models, `--layers layers`.
fn gen_small(model: &str, layers: &str, extra: &[&str]) -> Out {
    let mut args: Vec<&str> =
        SMALL.iter().find(|(m, _)| *m == model).map(|(_, a)| a.to_vec()).unwrap_or_default();
    if LAYERED.contains(&model) {
        args.extend_from_slice(&["--layers", layers]);
    }
    args.extend_from_slice(extra);
    gen(model, &args)
}

/// Ops that define a value (every op but `func.return`).
fn op_count(ir: &str) -> usize {
    ir.lines().filter(|l| l.trim_start().starts_with('%')).count()
}

#[test]
fn every_model_generates_and_reparses() {
    let dir = scratch("reparse");
    for (model, _) in SMALL {
        let path = dir.join(format!("{model}.fbir"));
        let path_s = path.to_str().expect("utf-8 path");
        let o = gen_small(model, "1", &["-o", path_s]);
        assert_eq!(o.code, 0, "{model}: {}", o.stderr);
        assert!(o.stdout.is_empty(), "{model}: -o writes the file only");
        let text = std::fs::read_to_string(&path).expect("output written");
        let back = fbc(&["opt", path_s]);
        assert_eq!(back.code, 0, "{model} does not re-parse: {}", back.stderr);
        // `opt` without passes: reading and printing gives the same canonical text.
        assert_eq!(back.stdout, text, "{model}: printing is not a fixpoint");
    }
}

#[test]
fn trainable_models_define_a_scalar_loss_with_named_arguments() {
    for model in LAYERED {
        let o = gen_small(model, "1", &[]);
        assert_eq!(o.code, 0, "{model}: {}", o.stderr);
        let sig = o.stdout.lines().find(|l| l.contains("func.func @loss(")).unwrap_or_default();
        assert!(sig.ends_with("-> tensor<f32> {"), "{model}: {sig}");
        assert!(o.stdout.contains("tensor.cross_entropy"), "{model}");
        let adapter = if *model == "vit-large" { "%l0_attn_adapter_down:" } else { "_lora_a:" };
        assert!(sig.contains(adapter), "{model}: no trainable adapter in {sig}");
    }
    let llama = gen_small("llama3.2-1b", "1", &[]).stdout;
    let sig = llama.lines().nth(1).unwrap_or_default();
    assert!(sig.contains("@loss(%tokens: tensor<1x16xi32>, %labels: tensor<1x16xi32>, %mask: tensor<16x16xf32>, %rope_cos: tensor<16x64xf32>, %rope_sin: tensor<16x64xf32>, %embed: tensor<128256x2048xf32>"), "{sig}");
    assert!(sig.contains("%l0_wq: tensor<2048x2048xf32>, %l0_wq_lora_a: tensor<2048x2xf32>, %l0_wq_lora_b: tensor<2x2048xf32>"), "{sig}");
    // GQA: 8 KV heads expanded to 32 by reshape + broadcast + reshape.
    assert!(
        llama.contains("tensor.broadcast %l0_k_grouped {shape = [1, 8, 4, 16, 64]}"),
        "{llama}"
    );
    // Tied LM head.
    assert!(llama.contains("tensor.matmul %final_h, %embed {transpose_b = true}"), "{llama}");
}

#[test]
fn llama_one_layer_snapshot() {
    let o = gen("llama3.2-1b", &["--layers", "1", "--seq", "8", "--lora-rank", "2"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    insta::assert_snapshot!("llama3_2_1b_layers1_seq8_rank2", o.stdout);
}

#[test]
fn microbenchmarks_match_the_examples() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/");
    let fb = gen("matmul-fb", &["--products", "o,da"]);
    let want = fbc(&["opt", &format!("{root}matmul_fb.fbir")]);
    assert_eq!(want.code, 0, "{}", want.stderr);
    assert_eq!(fb.stdout, want.stdout);
    // The default adds the weight gradient db = aᵀ·do.
    let all = gen("matmul-fb", &[]).stdout;
    let db = "    %db = tensor.matmul %a, %do {transpose_a = true} : (tensor<512x2048xf32>, tensor<512x8192xf32>) -> tensor<2048x8192xf32>\n";
    assert!(all.contains(db), "{all}");
    assert!(all.contains("func.return %o, %da, %db : (tensor<512x8192xf32>, tensor<512x2048xf32>, tensor<2048x8192xf32>) -> ()"), "{all}");
    let only = gen("matmul-fb", &["--products", "db"]).stdout;
    assert!(only.contains("@matmul_fb(%a: tensor<512x2048xf32>, %do: tensor<512x8192xf32>) -> tensor<2048x8192xf32>"), "{only}");

    // At Fig. 16's size, the module `fbc_models::matmul_fb_at` gives (fbc calibrate's
    // contraction) is `fbc gen matmul-fb`'s; at another, only the sizes differ.
    let ops = fbc_dialects::registry();
    let (file, at) = fbc_models::matmul_fb_at(&ops, (512, 2048, 8192)).expect("builds");
    assert_eq!(file.name, "<fbc gen matmul-fb 512x2048x8192>");
    assert_eq!(fbc_ir::print_module(&at), all);
    let (_, small) = fbc_models::matmul_fb_at(&ops, (64, 32, 16)).expect("builds");
    let resized = all.replace("512x", "64x").replace("2048x", "32x").replace("x2048", "x32");
    assert_eq!(fbc_ir::print_module(&small), resized.replace("x8192", "x16"));
    for dims in [(0, 8, 8), (8, fbc_models::MATMUL_FB_MAX_SIDE + 1, 8)] {
        let e = fbc_models::matmul_fb_at(&ops, dims).expect_err("out of range");
        assert!(matches!(e, fbc_models::Error::Usage(_)), "{e}");
    }

    let mha = gen("mha", &["--config", "c1"]);
    let want = fbc(&["opt", &format!("{root}attention.fbir")]);
    assert_eq!(want.code, 0, "{}", want.stderr);
    assert_eq!(mha.stdout, want.stdout.replacen("module @attention", "module @mha_c1", 1));
    assert_eq!(mha.stdout, gen("mha", &[]).stdout, "c1 is the default");

    // C3 = (512, 8, 1024): 8 heads of 128.
    let c3 = gen("mha", &["--config", "C3"]);
    assert_eq!(c3.code, 0, "{}", c3.stderr);
    assert!(c3.stdout.contains("tensor<1x8x512x128xf32>"), "{}", c3.stdout);
}

#[test]
fn op_counts_grow_linearly_with_layers() {
    for model in LAYERED {
        let count = |layers: &str| {
            let o = gen_small(model, layers, &[]);
            assert_eq!(o.code, 0, "{model}: {}", o.stderr);
            o.stdout
        };
        let (one, two, three) = (count("1"), count("2"), count("3"));
        let per_layer = op_count(&two) - op_count(&one);
        assert!(per_layer > 10, "{model}: {per_layer} ops per layer");
        assert_eq!(op_count(&three) - op_count(&two), per_layer, "{model}");
        // Every op a layer adds is named after that layer.
        let named_l1 = two.lines().filter(|l| l.trim_start().starts_with("%l1_")).count();
        assert_eq!(named_l1, per_layer, "{model}");
    }
}

#[test]
fn default_sizes_generate() {
    // The full published models at Table 3's settings: also the timing case of the README.
    for model in LAYERED.iter().chain(&["matmul-fb", "mha"]) {
        let o = gen(model, &[]);
        assert_eq!(o.code, 0, "{model}: {}", o.stderr);
    }
    let llama = gen("llama3.2-1b", &["--lora-rank", "8", "--seq", "512"]).stdout;
    assert!(llama.contains("%l15_resid_mlp"), "16 layers");
    assert!(!llama.contains("%l16_"), "16 layers");
    let whisper = gen("whisper-large-decoder", &[]).stdout;
    assert!(whisper.contains("%encoder_states: tensor<2x300x1280xf32>"));
    assert!(whisper.contains("%tokens: tensor<2x448xi32>"));
}

#[test]
fn option_mistakes_exit_2_and_say_what_is_allowed() {
    let o = gen("gpt-2", &[]);
    assert_eq!(o.code, 2);
    for m in ["llama3.2-1b", "qwen2.5-1.5b", "gemma2-2b", "bert-large", "vit-large", "sd1.5-unet"] {
        assert!(o.stderr.contains(m), "{}", o.stderr);
    }
    let cases: &[(&str, &[&str], &str)] = &[
        ("llama3.2-1b", &["--config", "c1"], "`--config` applies only to mha"),
        ("mha", &["--config", "c4"], "c3 = (512, 8, 1024)"),
        ("matmul-fb", &["--layers", "2"], "does not apply to matmul-fb"),
        ("matmul-fb", &["--products", "o,dx"], "unknown matmul-fb product `dx`; known: o, da, db"),
        ("mha", &["--products", "o"], "`--products` applies only to matmul-fb"),
        ("vit-large", &["--seq", "64"], "196 patches"),
        ("bert-large", &["--seq", "513"], "from 1 to 512"),
        ("llama3.2-1b", &["--layers", "0"], "from 1 to 1024"),
        ("mha", &["--lora-rank", "4"], "no trainable parameters"),
        ("mha", &["--training"], "no loss"),
        ("llama3.2-1b", &["--encoder-len", "10"], "only whisper-large-decoder"),
        ("llama3.2-1b", &["--lora-rank", "4096"], "from 0 to 2048"),
        ("bert-large", &["--inference"], "`--inference` does not apply to bert-large"),
        ("llama3.2-1b", &["--inference", "--training"], "cannot be used with"),
        ("llama3.2-1b", &["--max-seq", "64"], "`--max-seq` applies only with --inference"),
        (
            "llama3.2-1b",
            &["--inference", "--seq", "64", "--max-seq", "32"],
            "`--max-seq` (32) must be at least `--seq` (64)",
        ),
        ("llama3.2-1b", &["--inference", "--max-seq", "200000"], "from 1 to 131072"),
        ("sd1.5-unet", &["--levels", "5"], "`--levels` for sd1.5-unet must be from 1 to 4"),
        ("sd1.5-unet", &["--latent", "12"], "`--latent` (12) must be a multiple of 8"),
        ("sd1.5-unet", &["--channels", "48"], "must be a multiple of 32: the GroupNorms"),
        ("sd1.5-unet", &["--res-blocks", "0"], "from 1 to 16"),
        ("sd1.5-unet", &["--seq", "77"], "the text is CLIP's 77 states"),
        ("sd1.5-unet", &["--vocab", "77"], "not sd1.5-unet"),
        ("llama3.2-1b", &["--levels", "2"], "`--levels` applies only to sd1.5-unet"),
        ("bert-large", &["--channels", "64"], "`--channels` applies only to sd1.5-unet"),
        ("sd1.5-down-block", &["--res-blocks", "1"], "`--res-blocks` applies only to sd1.5-unet"),
    ];
    for (model, args, want) in cases {
        let o = gen(model, args);
        assert_eq!(o.code, 2, "{model} {args:?}: {}", o.stderr);
        assert!(o.stderr.contains(want), "{model} {args:?}: {}", o.stderr);
        assert!(o.stdout.is_empty());
    }
    // A failed generation leaves no output file.
    let dir = scratch("nofile");
    let path = dir.join("out.fbir");
    let o = gen("gpt-2", &["-o", path.to_str().expect("utf-8")]);
    assert_eq!(o.code, 2);
    assert!(!path.exists());
}

#[test]
fn training_runs_autodiff_or_says_it_is_missing() {
    let registered = fbc(&["passes"]).stdout.lines().any(|l| l.starts_with("autodiff "));
    let o = gen("llama3.2-1b", &["--layers", "1", "--seq", "8", "--lora-rank", "2", "--training"]);
    if registered {
        assert_eq!(o.code, 0, "{}", o.stderr);
        let dir = scratch("training");
        for model in LAYERED.iter().chain(&["sd1.5-unet", "sd1.5-down-block"]) {
            let o = gen_small(model, "1", &["--training"]);
            assert_eq!(o.code, 0, "{model}: {}", o.stderr);
            assert!(o.stdout.contains("func.func @loss_grad("), "{model}: {}", o.stdout);
            let back = dir.join(format!("{model}.fbir"));
            std::fs::write(&back, &o.stdout).expect("write");
            let r = fbc(&[back.to_str().expect("utf-8"), "-O0", "--emit", "ir"]);
            assert_eq!(r.code, 0, "{model}: {}", r.stderr);
        }
    } else {
        assert_eq!(o.code, 2);
        assert!(
            o.stderr.contains("needs the autodiff pass, which is not registered"),
            "{}",
            o.stderr
        );
    }
    // Nothing to train: a usage error whether or not the pass exists.
    let o = gen("llama3.2-1b", &["--layers", "1", "--seq", "8", "--lora-rank", "0", "--training"]);
    assert_eq!(o.code, 2, "{}", o.stderr);
}

/// `--inference`: `@prefill` over the prompt and `@decode` of one token, each with the layer's
/// KV caches as its last arguments (written with `tensor.update_slice`) and as its results after
/// the logits; no LoRA adapters unless asked for; the cache length defaults to 2048.
#[test]
fn inference_builds_prefill_and_decode_with_kv_caches() {
    let o = gen("qwen2.5-1.5b", &["--inference", "--layers", "2", "--seq", "8", "--vocab", "32"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let sigs: Vec<&str> = o.stdout.lines().filter(|l| l.contains("func.func")).collect();
    assert_eq!(sigs.len(), 2);
    // Qwen 2.5-1.5B: 2 KV heads of 128.
    let cache = "tensor<1x2x2048x128xf32>";
    for (sig, s) in sigs.iter().zip([8, 1]) {
        let name = if s == 8 { "@prefill" } else { "@decode" };
        assert!(
            sig.contains(&format!(
                "{name}(%tokens: tensor<1x{s}xi32>, %pos: tensor<i32>, %rope_cos: tensor<{s}x128xf32>"
            )),
            "{sig}"
        );
        let tail = format!(
            "%l1_v_cache: {cache}) -> (tensor<1x{s}x32xf32>, {cache}, {cache}, {cache}, {cache})"
        );
        assert!(sig.contains(&tail), "{sig}");
        assert!(!sig.contains("lora"), "{sig}");
    }
    assert_eq!(o.stdout.matches("tensor.update_slice").count(), 8);
    // The masks come from the position: one per function, none from the host.
    assert_eq!(
        o.stdout.matches("tensor.causal_mask %pos {shape = [8, 2048]}").count()
            + o.stdout.matches("tensor.causal_mask %pos {shape = [1, 2048]}").count(),
        2
    );
}

/// The 512x512 UNet is Stable Diffusion v1.5's: its frozen weights add up to the published
/// 859,520,964 parameters of `UNet2DConditionModel` (every convolution, norm, projection and
/// bias in its place and size), with LoRA on the four projections of both attentions of its 16
/// transformer blocks.
#[test]
fn sd_unet_has_the_published_parameters() {
    let o = gen("sd1.5-unet", &[]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let sig = o.stdout.lines().find(|l| l.contains("func.func @loss(")).unwrap_or_default();
    assert!(sig.starts_with("  func.func @loss(%noisy_latents: tensor<2x4x64x64xf32>, %timesteps: tensor<2xi32>, %text_states: tensor<2x77x768xf32>, %noise: tensor<2x4x64x64xf32>, %time_table: tensor<1000x320xf32>, "), "{sig}");
    assert!(sig.ends_with("-> tensor<f32> {"), "{sig}");
    let inputs = ["noisy_latents", "timesteps", "text_states", "noise", "time_table"];
    let (mut frozen, mut lora, mut lora_args) = (0u64, 0u64, 0);
    for arg in sig.split("%").skip(1) {
        let (name, ty) = arg.split_once(": tensor<").expect("a tensor argument");
        let dims = ty.split('>').next().unwrap_or_default();
        let n: u64 = dims.split('x').filter_map(|d| d.parse::<u64>().ok()).product();
        if name.contains("_lora_") {
            lora += n;
            lora_args += 1;
        } else if !inputs.contains(&name) {
            frozen += n;
        }
    }
    assert_eq!(frozen, 859_520_964);
    assert_eq!(lora_args, 16 * 2 * 4 * 2);
    // Rank 8: self-attention's q, k, v, out are C -> C; cross-attention's q and out too, its k
    // and v 768 -> C (the text states). Blocks: 5 at 320 channels, 5 at 640, 6 at 1280.
    let per_block = |c: u64| 8 * (4 * (c + c) + 2 * (c + c) + 2 * (768 + c));
    assert_eq!(lora, 5 * per_block(320) + 5 * per_block(640) + 6 * per_block(1280));
    let count = |op: &str| o.stdout.matches(&format!("= tensor.{op} ")).count();
    // 22 ResNet blocks (two convolutions each; a 1x1 shortcut where the width changes: the
    // first block of down levels 1 and 2, and all 12 up blocks, which take a concatenation),
    // 16 transformer blocks (two 1x1 convolutions), 3 down- and 3 up-sampling convolutions,
    // conv_in and conv_out.
    assert_eq!(count("conv2d"), 22 * 2 + 14 + 16 * 2 + 3 + 3 + 2);
    assert_eq!(count("upsample"), 3);
    assert_eq!(count("group_norm"), 22 * 2 + 16 + 1);
    assert_eq!(count("concat"), 12);
    assert!(o.stdout.contains("%down0_downsample = tensor.conv2d %down0_attn1, %down0_downsample_w, %down0_downsample_b {padding = [1, 1], stride = [2, 2]} : (tensor<2x320x64x64xf32>, tensor<320x320x3x3xf32>, tensor<320xf32>) -> tensor<2x320x32x32xf32>"));
    assert!(o.stdout.contains("%up0_res0_in = tensor.concat %mid_res1, %down3_res1 {axis = 1} : (tensor<2x1280x8x8xf32>, tensor<2x1280x8x8xf32>) -> tensor<2x2560x8x8xf32>"));
}

/// The benchmark block is the UNet's own first ResNet and transformer block: the same ops with
/// the same names and weights, between its inputs and the loss.
#[test]
fn sd_down_block_is_the_unets_first_block() {
    let block = gen("sd1.5-down-block", &[]);
    assert_eq!(block.code, 0, "{}", block.stderr);
    let sig = block.stdout.lines().find(|l| l.contains("func.func @loss(")).unwrap_or_default();
    assert!(sig.starts_with("  func.func @loss(%x: tensor<2x320x64x64xf32>, %temb: tensor<2x1280xf32>, %text_states: tensor<2x77x768xf32>, %target: tensor<2x320x64x64xf32>, %down0_res0_norm1_g: tensor<320xf32>"), "{sig}");
    let unet = gen("sd1.5-unet", &[]).stdout;
    let body = |text: &str, from: &str, to: &str| -> Vec<String> {
        let lines: Vec<&str> = text.lines().collect();
        let start = lines.iter().position(|l| l.contains(from)).expect("block start");
        let end = lines.iter().position(|l| l.contains(to)).expect("block end");
        lines[start..=end].iter().map(|l| l.to_string()).collect()
    };
    // From the second op of the ResNet block to the transformer block's last, the block's
    // input being `%x` where the UNet's is `%conv_in`.
    let from_block: Vec<String> =
        body(&block.stdout, "%down0_res0_norm1_act = ", "%down0_attn0 = ")
            .into_iter()
            .map(|l| l.replace("%x,", "%conv_in,"))
            .collect();
    assert_eq!(from_block, body(&unet, "%down0_res0_norm1_act = ", "%down0_attn0 = "));
}

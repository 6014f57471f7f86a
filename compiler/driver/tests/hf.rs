//! `fbc gen --from-hf DIR`: small random-weight Hugging Face checkpoints (`tests/compat/<arch>`:
//! Llama, Qwen2, Gemma 2, BERT, ViT, Whisper; made by `tests/compat/make_fixtures.py` with transformers
//! 5.17.0) built from their `config.json`, run on the checkpoint's own `model.safetensors` plus
//! the inputs transformers used, and compared with what transformers computed (logits, last
//! hidden states, BERT's pooler output); fbc's RoPE tables against the models' rotary
//! embeddings; the config errors.

mod common;

use std::path::{Path, PathBuf};

use common::{f32_tensor as floats, fbc, rel_err, scratch};

fn compat(arch: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/compat").join(arch)
}

/// The logits' error relative to transformers' for decoder `arch` on `target`, reading the
/// checkpoint through `checkpoint` (its file, or its index).
fn logits_error(arch: &str, target: &str, checkpoint: &Path) -> f64 {
    errors(arch, checkpoint, (&["--seq", "8"], &[]), &["logits"], target)[0]
}

#[test]
fn llama_qwen2_and_gemma2_checkpoints_give_transformers_logits() {
    for arch in ["llama", "qwen2", "gemma2"] {
        for target in ["cpu", "cpu-jit"] {
            let e = logits_error(arch, target, &compat(arch).join("model.safetensors"));
            assert!(e <= 1e-4, "{arch} on {target}: relative error {e:e}");
        }
    }
}

#[cfg(feature = "opencl")]
#[test]
fn checkpoints_give_transformers_logits_on_opencl() {
    if !common::have_device() {
        return;
    }
    for arch in ["llama", "qwen2", "gemma2"] {
        let e = logits_error(arch, "opencl", &compat(arch).join("model.safetensors"));
        assert!(e <= 1e-4, "{arch} on opencl: relative error {e:e}");
    }
    let errs = encoders_on("opencl");
    assert!(errs.iter().all(|(_, e)| *e <= 1e-4), "on opencl: relative errors {errs:?}");
}

/// `fbc gen --from-hf DIR GEN_ARGS`, then `fbc run` on `checkpoint` (the checkpoint's file or
/// index) and the inputs transformers was given (`RUN_ARGS` added): each result's error relative
/// to transformers' output of that name.
fn errors(
    arch: &str,
    checkpoint: &Path,
    (gen_args, run_args): (&[&str], &[&str]),
    outputs: &[&str],
    target: &str,
) -> Vec<f64> {
    let dir = compat(arch);
    let work = scratch(&format!("hf-{arch}-{target}"));
    let (m, out) = (work.join("m.fbir"), work.join("out.safetensors"));
    let mut args = vec!["gen", "--from-hf", dir.to_str().unwrap(), "-o", m.to_str().unwrap()];
    args.extend(gen_args);
    let o = fbc(&args);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let inputs = dir.join("inputs.safetensors");
    let mut args = vec![
        "run",
        m.to_str().unwrap(),
        "--inputs",
        checkpoint.to_str().unwrap(),
        "--inputs",
        inputs.to_str().unwrap(),
        "--outputs",
        out.to_str().unwrap(),
        "--target",
        target,
        "-O3",
    ];
    args.extend(run_args);
    let o = fbc(&args);
    assert_eq!(o.code, 0, "{arch} on {target}: {}", o.stderr);
    outputs
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let (shape, got) = floats(&out, &format!("result{i}"));
            let (want_shape, want) = floats(&dir.join("outputs.safetensors"), name);
            assert_eq!(shape, want_shape, "{arch}: {name}");
            rel_err(&got, &want)
        })
        .collect()
}

/// BERT, ViT and Whisper's decoder (from the whole Whisper checkpoint: its encoder's tensors
/// are skipped with --allow-unused-inputs) on `target`: every output's relative error.
fn encoders_on(target: &str) -> Vec<(&'static str, f64)> {
    let mut errs = Vec::new();
    let errors = |arch: &str, args: (&[&str], &[&str]), outputs: &[&str]| {
        errors(arch, &compat(arch).join("model.safetensors"), args, outputs, target)
    };
    let bert = errors(
        "bert",
        (&["--seq", "8", "--batch", "2"], &[]),
        &["last_hidden_state", "pooler_output"],
    );
    errs.extend(bert.into_iter().map(|e| ("bert", e)));
    let vit = errors("vit", (&[], &[]), &["last_hidden_state"]);
    errs.extend(vit.into_iter().map(|e| ("vit", e)));
    let whisper = errors(
        "whisper",
        (&["--seq", "8", "--encoder-len", "16"], &["--allow-unused-inputs"]),
        &["logits"],
    );
    errs.extend(whisper.into_iter().map(|e| ("whisper", e)));
    errs
}

#[test]
fn bert_vit_and_whisper_checkpoints_give_transformers_outputs() {
    for target in ["cpu", "cpu-jit"] {
        let errs = encoders_on(target);
        assert!(errs.iter().all(|(_, e)| *e <= 1e-4), "on {target}: relative errors {errs:?}");
    }
}

#[test]
fn unused_checkpoint_tensors_are_refused_unless_allowed() {
    let dir = compat("whisper");
    let work = scratch("hf-unused");
    let m = work.join("m.fbir");
    let o = fbc(&[
        "gen",
        "--from-hf",
        dir.to_str().unwrap(),
        "--seq",
        "8",
        "--encoder-len",
        "16",
        "-o",
        m.to_str().unwrap(),
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let o = fbc(&[
        "run",
        m.to_str().unwrap(),
        "--inputs",
        dir.join("model.safetensors").to_str().unwrap(),
        "--inputs",
        dir.join("inputs.safetensors").to_str().unwrap(),
    ]);
    assert_eq!(o.code, 1);
    assert!(
        o.stderr.contains("input `model.encoder.layer_norm.weight` (F32 [64]): @logits has no argument of that name"),
        "{}",
        o.stderr
    );
}

#[test]
fn a_sharded_checkpoints_index_reads_its_shards() {
    let work = scratch("hf-index");
    let dir = compat("qwen2");
    // One shard, named by an index beside a copy of it.
    std::fs::copy(dir.join("model.safetensors"), work.join("model-00001-of-00001.safetensors"))
        .unwrap();
    let bytes = std::fs::read(dir.join("model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let map: serde_json::Map<String, serde_json::Value> = st
        .names()
        .into_iter()
        .map(|n| (n.to_string(), serde_json::Value::from("model-00001-of-00001.safetensors")))
        .collect();
    let index = work.join("model.safetensors.index.json");
    std::fs::write(&index, serde_json::json!({ "weight_map": map }).to_string()).unwrap();
    let e = logits_error("qwen2", "cpu", &index);
    assert!(e <= 1e-4, "relative error {e:e}");
}

#[test]
fn fbc_rope_tables_equal_the_models_rotary_embedding() {
    for arch in ["llama", "qwen2", "gemma2"] {
        let text = std::fs::read_to_string(compat(arch).join("config.json")).unwrap();
        let (rope, hd) = fbc_models::hf::rope_of(&text).unwrap();
        let (cos, sin) = fbc_models::rope::tables(&rope, hd, 0, 8);
        let inputs = compat(arch).join("inputs.safetensors");
        let (_, want_cos) = floats(&inputs, "rope_cos");
        let (_, want_sin) = floats(&inputs, "rope_sin");
        for (got, want) in [(&cos, &want_cos), (&sin, &want_sin)] {
            let e = got.iter().zip(want).fold(0f32, |m, (g, w)| m.max((g - w).abs()));
            assert!(e <= 1e-6, "{arch}: RoPE table differs by {e}");
        }
    }
}

#[test]
fn training_graphs_come_from_checkpoints_too() {
    let work = scratch("hf-training");
    let m = work.join("t.fbir");
    let dir = compat("gemma2");
    let o = fbc(&[
        "gen",
        "--from-hf",
        dir.to_str().unwrap(),
        "--seq",
        "8",
        "--layers",
        "1",
        "--training",
        "--lora-rank",
        "2",
        "-o",
        m.to_str().unwrap(),
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let text = std::fs::read_to_string(&m).unwrap();
    assert!(text.contains("func.func @loss("), "no @loss");
    assert!(text.contains("func.func @loss_grad("), "no @loss_grad");
    assert!(text.contains("%model.layers.0.self_attn.q_proj.weight_lora_a"));
    assert!(!text.contains("model.layers.1."), "--layers 1 built a second layer");
}

#[test]
fn config_errors_name_the_key() {
    let work = scratch("hf-errors");
    let base = std::fs::read_to_string(compat("llama").join("config.json")).unwrap();
    let json: serde_json::Value = serde_json::from_str(&base).unwrap();
    type Change = Box<dyn Fn(&mut serde_json::Value)>;
    let cases: Vec<(&str, Change, &str)> = vec![
        (
            "missing",
            Box::new(|j| {
                j.as_object_mut().unwrap().remove("hidden_size");
            }),
            "config.json: error: missing key `hidden_size`",
        ),
        (
            "arch",
            Box::new(|j| j["architectures"] = serde_json::json!(["MambaForCausalLM"])),
            "config.json: error: architecture `MambaForCausalLM` is not supported by --from-hf \
             (supported: LlamaForCausalLM, Qwen2ForCausalLM, Gemma2ForCausalLM, BertModel, \
             ViTModel, WhisperForConditionalGeneration)",
        ),
        (
            "rope",
            Box::new(|j| j["rope_parameters"]["rope_type"] = serde_json::json!("yarn")),
            "config.json: error: rope_type `yarn` is not supported (default, llama3)",
        ),
        (
            "type",
            Box::new(|j| j["num_attention_heads"] = serde_json::json!("four")),
            "config.json: error: `num_attention_heads` = \"four\" is not a positive integer",
        ),
    ];
    for (tag, change, want) in cases {
        let mut j = json.clone();
        change(&mut j);
        let dir = work.join(tag);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("config.json"), j.to_string()).unwrap();
        let out = dir.join("m.fbir");
        let o = fbc(&["gen", "--from-hf", dir.to_str().unwrap(), "-o", out.to_str().unwrap()]);
        assert_eq!(o.code, 1, "{tag}: {}", o.stderr);
        assert!(!out.exists(), "{tag}");
        let line = o.stderr.lines().next().unwrap_or_default();
        let line = line.split_once("/config.json: ").map_or(line, |(_, r)| r);
        assert_eq!(format!("config.json: {line}"), want, "{tag}");
    }
}

//! `fbc gen MODEL --inference`: `@prefill` and `@decode` with a static KV cache. A prompt run
//! through `@prefill` at once and the same prompt run through `@prefill` minus its last token,
//! then `@decode` of that token, give the same logits for it and the same caches: the cache
//! written at a position is what attention reads back later. On the interpreter, for every
//! decoder model (one layer, a small vocabulary), and lowered through the CPU JIT.

mod common;

use fbc_runtime::interp::{random_inputs, Interpreter, Value};
use fbc_runtime::reference::Tensor;

/// `(prompt length, cache positions)`.
const PROMPT: u64 = 5;
const MAX: u64 = 9;

fn build(model: &str, seq: u64) -> fbc_ir::Module {
    common::parse(&common::inference_module(model, seq, 40, MAX))
}

/// The inputs of `func` (whose `S` new tokens start at `pos`): `tokens` from the prompt, the
/// causal mask over the cache (`0` for `j ≤ pos + i`, `-1e9` elsewhere), RoPE rows of the
/// positions (the frequencies only need to be the same in every call), the given `caches` (else
/// zeros), and seeded random weights (the same in every call: the seed and the argument index
/// are).
fn inputs(
    m: &fbc_ir::Module,
    func: &str,
    tokens: &[i32],
    pos: i32,
    caches: Option<&[Value]>,
) -> Vec<Value> {
    let f = m.find_func(func).expect("function");
    let mut values = random_inputs(m, func, 3).expect("inputs");
    let s = tokens.len();
    let mut cache = caches.map(|c| c.iter());
    for (i, &a) in m.func(f).args.iter().enumerate() {
        let name = m.value(a).name.as_deref().unwrap_or_default().to_string();
        let shape: Vec<usize> = m
            .value_type(a)
            .as_tensor()
            .expect("tensor")
            .shape
            .iter()
            .map(|&d| d as usize)
            .collect();
        let f32s = |f: &dyn Fn(&[usize]) -> f32| {
            Value::F32(Tensor::from_fn(&shape, |ix| f(ix)).expect("tensor"))
        };
        values[i] = match name.as_str() {
            "tokens" => Value::I32(Tensor::new(shape.clone(), tokens.to_vec()).expect("tokens")),
            "pos" => Value::I32(Tensor::new(Vec::new(), vec![pos]).expect("pos")),
            "mask" | "mask_local" => f32s(&|ix| {
                if ix[1] as i32 <= pos + ix[0] as i32 {
                    0.0
                } else {
                    -1e9
                }
            }),
            "rope_cos" | "rope_sin" => {
                let hd = shape[1];
                let cos = name == "rope_cos";
                f32s(&|ix| {
                    let p = (pos as usize + ix[0]) as f32;
                    let freq = 10000f32.powf(-(((ix[1] % (hd / 2)) * 2) as f32) / hd as f32);
                    if cos {
                        (p * freq).cos()
                    } else {
                        (p * freq).sin()
                    }
                })
            }
            n if n.ends_with("_cache") => match cache.as_mut().and_then(Iterator::next) {
                Some(c) => c.clone(),
                None => f32s(&|_| 0.0),
            },
            _ => continue,
        };
    }
    assert_eq!(s, m.value_type(m.func(f).args[0]).as_tensor().expect("tokens").shape[1] as usize);
    values
}

fn f32s(v: &Value) -> Vec<f32> {
    v.as_f32().expect("f32").data().to_vec()
}

/// The largest difference between `a` and `b` relative to the largest magnitude of `a`.
fn rel(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    let scale = a.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-30);
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max) / scale
}

#[test]
fn decode_continues_prefill_for_every_decoder_model() {
    let prompt: Vec<i32> = (0..PROMPT as i32).map(|i| (i * 7 + 3) % 40).collect();
    for model in ["llama3.2-1b", "qwen2.5-1.5b", "gemma2-2b"] {
        let whole = build(model, PROMPT);
        let head = build(model, PROMPT - 1);
        // The whole prompt at once.
        let f = whole.find_func("prefill").expect("prefill");
        let all = Interpreter::new(&whole)
            .run_id(f, inputs(&whole, "prefill", &prompt, 0, None))
            .expect("prefill");
        // All but the last token, then the last one at its position.
        let f = head.find_func("prefill").expect("prefill");
        let first = Interpreter::new(&head)
            .run_id(f, inputs(&head, "prefill", &prompt[..PROMPT as usize - 1], 0, None))
            .expect("prefill of the head");
        let f = head.find_func("decode").expect("decode");
        let last = &prompt[PROMPT as usize - 1..];
        let step = inputs(&head, "decode", last, PROMPT as i32 - 1, Some(&first[1..]));
        let next = Interpreter::new(&head).run_id(f, step).expect("decode");
        // logits [1, S, V]: the last row of the whole prompt's against decode's one row.
        let (lw, ld) = (f32s(&all[0]), f32s(&next[0]));
        let v = ld.len();
        let e = rel(&lw[lw.len() - v..], &ld);
        assert!(e < 1e-4, "{model}: decode's logits differ from prefill's by {e} (relative)");
        // The caches hold the same keys and values.
        assert_eq!(all.len(), next.len(), "{model}: results");
        for (k, (a, b)) in all[1..].iter().zip(&next[1..]).enumerate() {
            let e = rel(&f32s(a), &f32s(b));
            assert!(e < 1e-5, "{model}: cache {k} differs by {e} (relative)");
        }
        // The head's prefill left the last position empty; decode wrote it.
        let untouched = f32s(&first[1]);
        assert_ne!(untouched, f32s(&next[1]), "{model}: decode wrote no key");
    }
}

/// Whisper's decoder: `@prefill` projects the encoder states once into each layer's
/// cross-attention cache and `@decode` reads those caches as they are. A prompt run through
/// `@prefill` at once, and the same prompt minus its last token followed by `@decode` of that
/// token, give the same logits for it, the same self-attention caches and the same
/// cross-attention caches. Weights and encoder states are matched by name (the two functions'
/// arguments differ in position: `@decode` has no encoder states).
#[test]
fn whisper_decode_reads_the_cross_attention_cache_prefill_wrote() {
    use std::collections::HashMap;
    let (encoder, batch) = (6u64, 1u64);
    let build = |seq: u64| {
        let opts = fbc_models::Options {
            layers: Some(2),
            seq: Some(seq),
            vocab: Some(40),
            batch: Some(batch),
            encoder_len: Some(encoder),
            inference: true,
            max_seq: Some(MAX),
            ..Default::default()
        };
        let m = fbc_models::build("whisper-large-decoder", &opts).expect("whisper");
        common::parse(&fbc_ir::print_module(&m))
    };
    let (whole, head) = (build(PROMPT), build(PROMPT - 1));
    // Random weights and encoder states by argument name.
    let named: HashMap<String, Value> = {
        let f = whole.find_func("prefill").expect("prefill");
        let values = random_inputs(&whole, "prefill", 5).expect("inputs");
        whole
            .func(f)
            .args
            .iter()
            .map(|&a| whole.value(a).name.as_deref().unwrap_or_default().to_string())
            .zip(values)
            .collect()
    };
    let run = |m: &fbc_ir::Module, func: &str, tokens: &[i32], pos: i32, given: &[Value]| {
        let f = m.find_func(func).expect("function");
        let mut given = given.iter();
        let args: Vec<Value> = m
            .func(f)
            .args
            .iter()
            .map(|&a| {
                let name = m.value(a).name.as_deref().unwrap_or_default().to_string();
                let t = m.value_type(a).as_tensor().expect("tensor").clone();
                let shape: Vec<usize> = t.shape.iter().map(|&d| d as usize).collect();
                let s = tokens.len() as i32;
                match name.as_str() {
                    "tokens" => Value::I32(Tensor::new(shape, tokens.to_vec()).expect("tokens")),
                    "pos" => Value::I32(Tensor::new(Vec::new(), vec![pos]).expect("pos")),
                    "positions" => {
                        Value::I32(Tensor::new(shape, (pos..pos + s).collect()).expect("positions"))
                    }
                    n if n.ends_with("_cache")
                        || n.ends_with("_cross_k")
                        || n.ends_with("_cross_v") =>
                    {
                        given.next().cloned().unwrap_or_else(|| {
                            Value::F32(Tensor::from_fn(&shape, |_| 0.0).expect("zeros"))
                        })
                    }
                    n => named.get(n).cloned().unwrap_or_else(|| panic!("no value for {n}")),
                }
            })
            .collect();
        Interpreter::new(m).run_id(f, args).expect(func)
    };
    let prompt: Vec<i32> = (0..PROMPT as i32).map(|i| (i * 11 + 5) % 40).collect();
    let all = run(&whole, "prefill", &prompt, 0, &[]);
    let first = run(&head, "prefill", &prompt[..PROMPT as usize - 1], 0, &[]);
    // Results: logits, 2 self caches a layer, then 2 cross caches a layer.
    assert_eq!(all.len(), 1 + 2 * 2 + 2 * 2);
    let last = &prompt[PROMPT as usize - 1..];
    let next = run(&head, "decode", last, PROMPT as i32 - 1, &first[1..]);
    assert_eq!(next.len(), 1 + 2 * 2, "decode returns its logits and the self caches");
    let (lw, ld) = (f32s(&all[0]), f32s(&next[0]));
    let v = ld.len();
    let e = rel(&lw[lw.len() - v..], &ld);
    assert!(e < 1e-4, "decode's logits differ from prefill's by {e} (relative)");
    for (k, (a, b)) in all[1..5].iter().zip(&next[1..]).enumerate() {
        let e = rel(&f32s(a), &f32s(b));
        assert!(e < 1e-5, "self cache {k} differs by {e} (relative)");
    }
    // The cross caches depend on the encoder states only: both prefills wrote the same.
    for (k, (a, b)) in all[5..].iter().zip(&first[5..]).enumerate() {
        assert_eq!(f32s(a), f32s(b), "cross cache {k}");
    }
    // A wrong cross cache changes decode's logits: decode reads it.
    let mut wrong = first[1..].to_vec();
    wrong[4] = Value::F32(Tensor::from_fn(&[1, 20, encoder as usize, 64], |_| 0.0).expect("zeros"));
    let other = run(&head, "decode", last, PROMPT as i32 - 1, &wrong);
    assert!(rel(&ld, &f32s(&other[0])) > 1e-3, "decode ignored the cross cache");
}

/// `fbc generate` runs a Whisper decoder (two layers, random weights and encoder states): the
/// host fills `positions`, and every decode step reads the cross-attention keys and values
/// `@prefill` returned. Each new token is the one `@prefill` alone picks over the prompt followed
/// by the tokens before it (`--max-new 1`: no cache carried), and the CPU JIT and (with a
/// device) OpenCL, which keeps the cross caches on the device, give the same tokens.
#[test]
fn generate_runs_a_whisper_decoder_with_its_cross_attention_cache() {
    let dir = common::scratch("whisper-generate");
    let opts = fbc_models::Options {
        layers: Some(2),
        seq: Some(8),
        vocab: Some(40),
        batch: Some(1),
        encoder_len: Some(6),
        inference: true,
        max_seq: Some(12),
        ..Default::default()
    };
    let m = fbc_models::build("whisper-large-decoder", &opts).expect("whisper");
    let path = dir.join("w.fbir");
    std::fs::write(&path, fbc_ir::print_module(&m)).expect("write");
    let p = path.to_str().expect("path");
    let generate = |prompt: &[i64], max_new: &str, target: &str| -> Vec<i64> {
        let prompt: Vec<String> = prompt.iter().map(ToString::to_string).collect();
        let prompt = prompt.join(",");
        let args =
            ["generate", p, "--random-weights", "4", "--prompt", &prompt, "--max-new", max_new];
        let o = common::fbc(&[&args[..], &["--target", target]].concat());
        assert_eq!(o.code, 0, "{target}: {}", o.stderr);
        o.stdout.trim().split(',').map(|t| t.parse().expect("a token id")).collect()
    };
    let prompt = [7i64, 21, 3];
    let tokens = generate(&prompt, "5", "cpu");
    assert_eq!(tokens.len(), 5);
    for k in 1..tokens.len() {
        let seen = [&prompt[..], &tokens[..k]].concat();
        assert_eq!(generate(&seen, "1", "cpu"), [tokens[k]], "token {k} after {seen:?}");
    }
    assert_eq!(generate(&prompt, "5", "cpu-jit"), tokens);
    if common::opencl_device() {
        assert_eq!(generate(&prompt, "5", "opencl"), tokens);
    }
}

/// Both functions lowered (-O0 and -O3) and run by the CPU JIT agree with the interpreter
/// (`fbc run --check`, random weights and positions from which the new tokens fit).
#[test]
fn inference_functions_run_on_the_cpu_jit() {
    let dir = common::scratch("inference-jit");
    let path = dir.join("l.fbir");
    std::fs::write(&path, fbc_ir::print_module(&build("llama3.2-1b", PROMPT))).expect("write");
    for entry in ["prefill", "decode"] {
        for level in ["-O0", "-O3"] {
            let p = path.to_str().expect("path");
            let args = [
                "run",
                p,
                "--entry",
                entry,
                "--target",
                "cpu-jit",
                level,
                "--random-inputs",
                "4",
                "--check",
            ];
            let o = common::fbc(&args);
            assert_eq!(o.code, 0, "{entry} {level}: {}", o.stderr);
            assert!(o.stdout.contains("check passed"), "{entry} {level}: {}", o.stdout);
        }
    }
}

/// `fbc generate` on a one-layer Llama with random weights: the same new tokens from the
/// interpreter and from the CPU JIT at -O3 and -O0 (and from PoCL in `tests/opencl.rs`), and the
/// token ids on stdout with the timings on stderr.
#[test]
fn generate_gives_the_same_tokens_on_the_interpreter_and_the_jit() {
    let dir = common::scratch("generate");
    let path = dir.join("g.fbir");
    let text = common::inference_module("llama3.2-1b", 6, 48, 12);
    std::fs::write(&path, text).expect("write");
    let p = path.to_str().expect("path");
    let run = |extra: &[&str]| {
        let mut args =
            vec!["generate", p, "--random-weights", "5", "--prompt", "3,17,8", "--max-new", "4"];
        args.extend_from_slice(extra);
        let o = common::fbc(&args);
        assert_eq!(o.code, 0, "{extra:?}: {}", o.stderr);
        o
    };
    let reference = run(&[]);
    let ids: Vec<i64> =
        reference.stdout.trim().split(',').map(|t| t.parse().expect("a token id")).collect();
    assert_eq!(ids.len(), 4);
    assert!(ids.iter().all(|&t| (0..48).contains(&t)), "{ids:?}");
    assert!(
        reference.stderr.contains("prompt 3 tokens, 4 new on cpu: time to first token "),
        "{}",
        reference.stderr
    );
    assert!(reference.stderr.contains(" ms per output token ("), "{}", reference.stderr);
    for level in ["-O3", "-O0"] {
        let jit = run(&["--target", "cpu-jit", level]);
        assert_eq!(jit.stdout, reference.stdout, "cpu-jit {level}");
    }
    // The same tokens with the attention unfused (`fuse-attention` runs at -O2 and -O3).
    let unfused = run(&["--target", "cpu-jit", "--disable-pass", "fuse-attention"]);
    assert_eq!(unfused.stdout, reference.stdout, "cpu-jit without fuse-attention");
    // An unknown pass is a usage error.
    let o = common::fbc(&[
        "generate",
        p,
        "--random-weights",
        "5",
        "--prompt",
        "3",
        "--max-new",
        "1",
        "--target",
        "cpu-jit",
        "--disable-pass",
        "fuse-attnetion",
    ]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(
        o.stderr.contains("--disable-pass: no pass named `fuse-attnetion` (see `fbc passes`)"),
        "{}",
        o.stderr
    );
}

/// `fbc generate`'s mistakes: a module without `@prefill`, a prompt longer than `@prefill` or
/// than the cache allows with the new tokens, a token outside the vocabulary, a weight missing
/// from the file (named, before anything runs).
#[test]
fn generate_refuses_what_it_cannot_do() {
    let dir = common::scratch("generate-errors");
    let path = dir.join("g.fbir");
    let text = common::inference_module("llama3.2-1b", 4, 16, 6);
    std::fs::write(&path, text).expect("write");
    let p = path.to_str().expect("path");
    let gen = |prompt: &str, max_new: &str| {
        common::fbc(&[
            "generate",
            p,
            "--random-weights",
            "1",
            "--prompt",
            prompt,
            "--max-new",
            max_new,
        ])
    };
    let cases = [
        (gen("1,2,3,4,5", "1"), 2, "the prompt has 5 tokens; @prefill takes at most 4 (`fbc gen --seq`)"),
        (gen("1,2,3", "4"), 2, "3 prompt tokens and 4 new ones need 7 cache positions; the module's caches hold 6 (`fbc gen --max-seq`)"),
        (gen("1,16", "1"), 2, "every prompt token must be from 0 to 15"),
    ];
    for (o, code, msg) in cases {
        assert_eq!(o.code, code, "{}", o.stderr);
        assert!(o.stderr.contains(msg), "{}", o.stderr);
        assert!(o.stdout.is_empty());
    }
    // A weights file without `l0_wq`: named, exit 1.
    let w = dir.join("w.safetensors");
    let data = vec![0u8; 16 * 2048 * 4];
    let embed =
        safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![16, 2048], &data)
            .expect("view");
    std::fs::write(&w, safetensors::tensor::serialize(vec![("embed", embed)], None).expect("ser"))
        .expect("write");
    let w = w.to_str().expect("w");
    let o = common::fbc(&["generate", p, "--weights", w, "--prompt", "1", "--max-new", "1"]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(o.stderr.contains("input `l0_wq`: missing (tensor<2048x2048xf32>)"), "{}", o.stderr);
    assert!(!o.stderr.contains("input `tokens`"), "host arguments are not asked for: {}", o.stderr);
    // @decode takes an argument @prefill neither takes nor returns: refused, exit 1.
    let text = common::inference_module("llama3.2-1b", 4, 16, 6);
    let at = text.find("func.func @decode(").expect("@decode") + "func.func @decode(".len();
    let extra = format!("{}%extra: tensor<4xf32>, {}", &text[..at], &text[at..]);
    let odd = dir.join("odd.fbir");
    std::fs::write(&odd, extra).expect("write");
    let odd = odd.to_str().expect("odd");
    let o = common::fbc(&["generate", odd, "--random-weights", "1", "--prompt", "1"]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(
        o.stderr.contains(
            "@decode takes 1 argument(s) @prefill does not ([\"extra\"]), and @prefill returns 0 value(s) after its caches: they must match in number and type"
        ),
        "{}",
        o.stderr
    );
    // Not an inference module.
    let plain = dir.join("plain.fbir");
    std::fs::write(&plain, "func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {\n  func.return %x : tensor<2xf32>\n}\n").expect("write");
    let o = common::fbc(&[
        "generate",
        plain.to_str().expect("p"),
        "--random-weights",
        "1",
        "--prompt",
        "1",
    ]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(
        o.stderr.contains(
            "no @prefill: `fbc generate` takes an inference module (`fbc gen MODEL --inference`)"
        ),
        "{}",
        o.stderr
    );
}

/// Zero bytes of KV cache copied per decode step: in the lowered `@decode` of a one-layer Llama
/// (-O3, nvidia), each cache is uploaded into storage that its result downloads, the only launch
/// writing it is the in-place update of the new position, and no launch copies it elsewhere
/// (the fused attention reads it in place).
#[test]
fn a_decode_step_copies_no_cache_bytes() {
    let text = common::inference_module("llama3.2-1b", 4, 48, 12);
    let profile = fbc_target::builtin("nvidia").expect("nvidia");
    let m = common::lower_o3_with(&text, &profile, "auto").expect("lowers");
    let f = m.find_func("decode").expect("@decode");
    let body: Vec<_> = m.func(f).body.clone();
    let named = |o: fbc_ir::Op, op: &str| m.op(o).name() == op;
    // The new key's RoPE is computed inside its cache update (fused).
    for (arg, writer) in [
        ("l0_k_cache", "tensor.update_slice [in place]+tensor.rope"),
        ("l0_v_cache", "tensor.update_slice [in place]"),
    ] {
        let up = body
            .iter()
            .copied()
            .find(|&o| {
                named(o, "memory.upload")
                    && m.value(m.op(o).operands[0]).name.as_deref() == Some(arg)
            })
            .expect("the cache's upload");
        let s = m.op(up).results[0];
        let launches: Vec<_> =
            body.iter().copied().filter(|&o| named(o, "memory.launch")).collect();
        let writers: Vec<String> = launches
            .iter()
            .filter(|&&o| m.op(o).operands.last() == Some(&s))
            .map(|&o| {
                m.op(o).attr("source").and_then(fbc_ir::Attr::as_str).unwrap_or("").to_string()
            })
            .collect();
        assert_eq!(writers, [writer], "{arg}");
        let readers: Vec<String> = launches
            .iter()
            .filter(|&&o| m.op(o).operands[..m.op(o).operands.len() - 1].contains(&s))
            .map(|&o| {
                m.op(o).attr("source").and_then(fbc_ir::Attr::as_str).unwrap_or("").to_string()
            })
            .collect();
        assert_eq!(
            readers,
            ["tensor.attention"],
            "{arg}: read in place by the fused attention only"
        );
        assert!(
            body.iter().any(|&o| named(o, "memory.download") && m.op(o).operands[0] == s),
            "{arg}: its result is the same storage"
        );
    }
}

/// A decode step's activations are one row of R-Tile images whose other rows are padding: each
/// RMSNorm is still one row kernel (not a statistic kernel and an apply kernel), and no storage
/// needs a zero fill, as every launch reads only the rows that were written (-O3, nvidia).
#[test]
fn decode_rmsnorms_are_one_launch_each_and_nothing_is_filled() {
    let text = common::inference_module("llama3.2-1b", 4, 48, 12);
    let mut nvidia = fbc_target::builtin("nvidia").expect("nvidia");
    // The norms stay launches of their own (not moved into the projections).
    nvidia.skinny.norm_prologue = false;
    // Without its measured rates the profile keeps the activations in padded R-Tile images;
    // with them (the shipped profile), in buffers of the same texels.
    let unmeasured = fbc_target::HardwareProfile { measured: None, ..nvidia.clone() };
    for (profile, storage) in [(&unmeasured, "!memory.image2d<"), (&nvidia, "!memory.buffer<")] {
        let m = common::lower_o3_with(&text, profile, "auto").expect("lowers");
        let f = m.find_func("decode").expect("@decode");
        let kernels: Vec<String> = m
            .func(f)
            .body
            .iter()
            .map(|&o| m.op(o))
            .filter(|d| d.attr("source").and_then(fbc_ir::Attr::as_str) == Some("tensor.rmsnorm"))
            .map(|d| d.attr("kernel").and_then(fbc_ir::Attr::as_str).unwrap_or("").to_string())
            .collect();
        assert_eq!(
            kernels,
            ["decode_rmsnorm_l0_attn_in", "decode_rmsnorm_l0_mlp_in", "decode_rmsnorm_final_h"]
        );
        // `mlp_in` is written into padded R-Tile storage.
        let mlp_in = m
            .func(f)
            .body
            .iter()
            .map(|&o| m.op(o))
            .find(|d| {
                d.attr("kernel").and_then(fbc_ir::Attr::as_str) == Some("decode_rmsnorm_l0_mlp_in")
            })
            .expect("the kernel");
        let out = m.value_type(*mlp_in.operands.last().expect("output")).to_string();
        assert!(out.starts_with(storage), "{out}");
        assert_eq!(fbc_dialects::memory::init::allocs_to_fill(&m, f), Vec::new());
    }
}

/// `fbc generate` over a module of batch 2 (`fbc gen --batch 2`): one `--prompt` per sequence,
/// one line of new tokens per sequence, each the tokens a batch-1 module with the same random
/// weights (and, for Whisper's decoder, the same encoder states) gives for that prompt alone:
/// Llama on the interpreter, the CPU JIT and OpenCL where there is a device, Whisper's decoder
/// on the JIT. Prompts that do not fit the batch are usage errors.
#[test]
fn generate_decodes_a_batch_of_sequences_side_by_side() {
    let dir = common::scratch("generate-batch");
    let module = |model: &str, batch: u64| {
        let opts = fbc_models::Options {
            layers: Some(1),
            seq: Some(4),
            vocab: Some(40),
            batch: Some(batch),
            encoder_len: (model == "whisper-large-decoder").then_some(6),
            inference: true,
            max_seq: Some(12),
            ..Default::default()
        };
        let m = fbc_models::build(model, &opts).expect("model");
        let path = dir.join(format!("{model}-{batch}.fbir"));
        std::fs::write(&path, fbc_ir::print_module(&m)).expect("write");
        path.to_str().expect("path").to_string()
    };
    // Whisper's sequences attend to their own encoder states: rows `a` and `b` for the batch,
    // each alone for the batch-1 runs.
    let (a, b) = (common::pseudo(6 * 1280, 1, 1.0), common::pseudo(6 * 1280, 2, 1.0));
    let states = |name: &str, rows: &[&Vec<u8>]| {
        let bytes: Vec<u8> = rows.iter().flat_map(|r| r.iter().copied()).collect();
        let shape = vec![rows.len(), 6, 1280];
        common::safetensors_file(
            &dir,
            name,
            &[("encoder_states", safetensors::Dtype::F32, shape, bytes)],
        )
    };
    let (both, only_a, only_b) = (
        states("ab.safetensors", &[&a, &b]),
        states("a.safetensors", &[&a]),
        states("b.safetensors", &[&b]),
    );
    let generate = |path: &str, prompts: &[&str], target: &str, enc: Option<&str>| {
        let mut args =
            vec!["generate", path, "--random-weights", "2", "--max-new", "5", "--target", target];
        for p in prompts {
            args.extend_from_slice(&["--prompt", p]);
        }
        if let Some(e) = enc {
            args.extend_from_slice(&["--encoder-states", e]);
        }
        common::fbc(&args)
    };
    let mut targets = vec!["cpu", "cpu-jit"];
    if common::opencl_device() {
        targets.push("opencl");
    }
    for model in ["llama3.2-1b", "whisper-large-decoder"] {
        let (one, two) = (module(model, 1), module(model, 2));
        let whisper = model == "whisper-large-decoder";
        let enc = |e: &str| whisper.then(|| e.to_string());
        // Whisper's decoder (1280 wide) once, on the JIT: the host side is what differs.
        let on: &[&str] = if whisper { &["cpu-jit"] } else { &targets };
        for target in on {
            let o = generate(&two, &["3,17,8", "9,1,30"], target, enc(&both).as_deref());
            assert_eq!(o.code, 0, "{model} {target}: {}", o.stderr);
            let lines: Vec<&str> = o.stdout.lines().collect();
            assert_eq!(lines.len(), 2, "{model} {target}: {}", o.stdout);
            assert!(o.stderr.contains("2 sequences, prompt 3 tokens, 5 new on"), "{}", o.stderr);
            for ((line, prompt), e) in
                lines.iter().zip(["3,17,8", "9,1,30"]).zip([&only_a, &only_b])
            {
                let alone = generate(&one, &[prompt], target, enc(e).as_deref());
                assert_eq!(alone.code, 0, "{model} {target}: {}", alone.stderr);
                assert_eq!(*line, alone.stdout.trim(), "{model} {target} {prompt}");
            }
            assert_eq!(lines[0].split(',').count(), 5);
        }
        let o = generate(&two, &["3,17,8"], "cpu", None);
        assert_eq!(o.code, 2, "{}", o.stderr);
        assert!(
            o.stderr.contains(
                "1 prompt(s) for a module of 2 sequence(s) a call: give --prompt once per sequence"
            ),
            "{}",
            o.stderr
        );
        let o = generate(&two, &["3,17,8", "9,1"], "cpu", None);
        assert_eq!(o.code, 2, "{}", o.stderr);
        assert!(o.stderr.contains("the prompts have [3, 2] tokens"), "{}", o.stderr);
    }
    let o = generate(&module("llama3.2-1b", 1), &["3,x"], "cpu", None);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("`x` is not a token id (an integer)"), "{}", o.stderr);
}

/// The shipped nvidia profile with `[skinny] merge_launches`, `tail_launches` and
/// `chain_launches` off, written into `dir`.
fn separate_launches_profile(dir: &std::path::Path) -> String {
    skinny_profile(
        dir,
        &[("merge_launches", false), ("tail_launches", false), ("chain_launches", false)],
    )
}

/// The shipped nvidia profile with the `[skinny]` keys of `sets` set as given (the others as
/// shipped), written into `dir`.
fn skinny_profile(dir: &std::path::Path, sets: &[(&str, bool)]) -> String {
    let shipped = include_str!("../../../dialects/target/profiles/nvidia.toml");
    let set_here = |l: &&str| sets.iter().any(|(k, _)| l.starts_with(&format!("{k} = ")));
    let rest: Vec<&str> = shipped.lines().filter(|l| !set_here(l)).collect();
    let keys: String = sets.iter().map(|(k, on)| format!("{k} = {on}\n")).collect();
    let text = format!("{}\n", rest.join("\n")).replacen(
        "\n[skinny]\n",
        &format!("\n[skinny]\n{keys}"),
        1,
    );
    assert!(text.contains(&keys), "{text}");
    let name: Vec<String> = sets.iter().map(|(k, on)| format!("{k}-{on}")).collect();
    common::write(dir, &format!("{}.toml", name.join("_")), text.as_bytes())
}

/// The launches of `@decode` in the manifest of `fbc FBIR -O3 --target PROFILE` (written under
/// `dir`).
fn decode_launches(dir: &std::path::Path, fbir: &str, profile: &str) -> Vec<serde_json::Value> {
    let out = dir.join("out");
    let _ = std::fs::remove_dir_all(&out);
    let o = common::fbc(&[fbir, "-O3", "--target", profile, "-o", out.to_str().unwrap()]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let manifest = std::fs::read_dir(&out)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().ends_with(".manifest.json"))
        .expect("a manifest");
    let m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(manifest).unwrap()).unwrap();
    let decode = m["functions"].as_array().unwrap().iter().find(|f| f["name"] == "decode");
    decode.expect("@decode")["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["op"] == "launch")
        .cloned()
        .collect()
}

/// `fbc run FBIR --target opencl --profile PROFILE --random-inputs 1 --check EXTRA..` passes.
fn check_with(fbir: &str, profile: &str, extra: &[&str]) {
    let mut args =
        vec!["run", fbir, "--target", "opencl", "--profile", profile, "--random-inputs", "1"];
    args.extend_from_slice(extra);
    args.push("--check");
    let o = common::fbc(&args);
    assert!(o.code == 0 && o.stdout.contains("check passed"), "{}\n{}", o.stdout, o.stderr);
}

/// A decode step's Q, K and V projections read one normalised row: `lower-to-memory` allocates
/// their outputs before the first, so they stay next to each other, and with `[skinny]
/// merge_launches` (on in the shipped nvidia profile) the OpenCL writer runs them as one launch
/// of the skinny kernel (-O3); with it off, a launch each. Up and gate, whose epilogue
/// `SiLU(gate) · up` reads up at its own output point, run as one launch too, gate after up in
/// the same work-groups. The K and V cache updates run as one launch too (the writer's merge of
/// simple kernels), with `[skinny] tail_launches` off (on, they run at the end of the Q, K and
/// V launch: [`small_launches_run_at_the_end_of_the_product_before_them`]). On the device the
/// shipped profile's launches give the interpreter's numbers, on the first run and on a third
/// (the split-K counts each run leaves at zero).
#[test]
fn a_decode_steps_q_k_v_and_up_gate_projections_are_one_launch_each() {
    let dir = common::scratch("qkv-one-launch");
    let text = common::inference_module("llama3.2-1b", 4, 48, 12);
    let fbir = common::write(&dir, "inf.fbir", text.as_bytes());
    let separate = separate_launches_profile(&dir);
    let launches = |profile: &str| decode_launches(&dir, &fbir, profile);
    let profile = fbc_target::builtin("nvidia").expect("nvidia");
    let lowered = common::lower_o3_with(&text, &profile, "auto").expect("lowers");
    let f = lowered.find_func("decode").expect("@decode");
    let ops = lowered.func(f).body.iter().filter(|&&o| lowered.op(o).name() == "memory.launch");
    let ops = ops.count();
    // Merging off: a launch per op.
    assert_eq!(launches(&separate).len(), ops);
    // The K and V cache updates as a launch of their own (`[skinny] tail_launches` off: the
    // tails have a test of their own).
    let no_tails = tails_profile(&dir, false);
    let merged = launches(&no_tails);
    let names: Vec<&str> = merged.iter().map(|l| l["kernel"].as_str().unwrap()).collect();
    for gone in [
        "decode_matmul_l0_q",
        "decode_matmul_l0_k",
        "decode_matmul_l0_v",
        "decode_matmul_l0_up",
        "decode_matmul_l0_gated",
    ] {
        assert!(!names.contains(&gone), "{gone}: {names:?}");
    }
    assert!(names.contains(&"decode_matmul_l0_up_gated"), "{names:?}");
    // The output projection reads the attention's result: a launch of its own.
    assert!(names.contains(&"decode_matmul_l0_resid_attn"), "{names:?}");
    // The K and V cache updates (the simple kernel, one work-item per point) run as one launch,
    // each part's operands after the other's, each with its own fault id (a position outside
    // the cache is checked by both).
    let kv = merged
        .iter()
        .find(|l| l["kernel"] == "decode_update_slice_l0_k_cache_out_v_cache_out")
        .unwrap_or_else(|| panic!("{names:?}"));
    let parts = kv["parts"].as_array().expect("parts");
    let part_names: Vec<&str> = parts.iter().map(|p| p["kernel"].as_str().unwrap()).collect();
    assert_eq!(
        part_names,
        ["decode_update_slice_l0_k_cache_out", "decode_update_slice_l0_v_cache_out"]
    );
    assert_eq!(parts[0]["first_arg"], 0);
    assert_eq!(parts[1]["first_arg"], 6, "{kv}");
    assert_eq!(kv["args"].as_array().unwrap().len(), 9, "{kv}");
    assert_ne!(parts[0]["fault_id"], parts[1]["fault_id"]);
    assert_eq!(kv["fault_id"], parts[0]["fault_id"]);
    assert_eq!(merged.len() + 4, ops);
    let qkv = merged.iter().find(|l| l["kernel"] == "decode_matmul_l0_q_k_v").expect("merged");
    assert_eq!(qkv["skinny"], true);
    // Each part's row, weight, norm weight (the RMSNorm moved into it: `[skinny]
    // norm_prologue`) and output, then the split's partial sums and counts; all three parts
    // read the same row.
    let args: Vec<u64> =
        qkv["args"].as_array().unwrap().iter().map(|a| a.as_u64().unwrap()).collect();
    assert_eq!(args.len(), 14, "{args:?}");
    assert_eq!((args[4], args[8]), (args[0], args[0]));
    assert_eq!((args[6], args[10]), (args[2], args[2]));
    if !common::opencl_device() {
        return;
    }
    let check = |extra: &[&str]| {
        let mut args = vec!["--entry", "decode"];
        args.extend_from_slice(extra);
        check_with(&fbir, "nvidia", &args);
    };
    check(&["--runs", "1"]);
    check(&["--runs", "3"]);
    // Under a memory budget the weights stream in during earlier launches, one launch's at a
    // time: the launches stay apart.
    let dump = dir.join("dump");
    check(&["--memory-budget", "150MB", "--dump-kernels", dump.to_str().unwrap()]);
    assert!(dump.join("decode_matmul_l0_q.cl").exists());
    assert!(!dump.join("decode_matmul_l0_q_k_v.cl").exists());
}

/// Four matrix-vector products of one row with `[skinny] merge_launches` (the shipped nvidia
/// profile): `a`, `b` and `u` independent, `g`'s epilogue `SiLU(g) · u` reading `u` at its
/// own point. They run as one launch, `u` and `g` in the same work-groups, with split-K in the
/// launch and without it (`--split-k off`), and give the interpreter's numbers, again on a
/// second run.
#[test]
fn merged_launches_match_the_interpreter_split_or_not() {
    let dir = common::scratch("merged-launches");
    let text = "func.func @main(%x: tensor<1x512xf32>, %wa: tensor<512x256xf32>, %wb: tensor<512x256xf32>, %wu: tensor<512x256xf32>, %wg: tensor<512x256xf32>) -> (tensor<1x256xf32>, tensor<1x256xf32>, tensor<1x256xf32>) {
  %a = tensor.matmul %x, %wa : (tensor<1x512xf32>, tensor<512x256xf32>) -> tensor<1x256xf32>
  %b = tensor.matmul %x, %wb : (tensor<1x512xf32>, tensor<512x256xf32>) -> tensor<1x256xf32>
  %u = tensor.matmul %x, %wu : (tensor<1x512xf32>, tensor<512x256xf32>) -> tensor<1x256xf32>
  %g = tensor.matmul %x, %wg : (tensor<1x512xf32>, tensor<512x256xf32>) -> tensor<1x256xf32>
  %s = tensor.silu %g : (tensor<1x256xf32>) -> tensor<1x256xf32>
  %h = tensor.mul %s, %u : (tensor<1x256xf32>, tensor<1x256xf32>) -> tensor<1x256xf32>
  func.return %a, %b, %h : tensor<1x256xf32>, tensor<1x256xf32>, tensor<1x256xf32>
}
";
    let fbir = common::write(&dir, "m.fbir", text.as_bytes());
    if !common::opencl_device() {
        return;
    }
    for split in ["auto", "off"] {
        let dump = dir.join(format!("dump-{split}"));
        let dumped = dump.to_str().unwrap();
        check_with(&fbir, "nvidia", &["--split-k", split, "--runs", "2", "--dump-kernels", dumped]);
        let kernel = std::fs::read_to_string(dump.join("main_matmul_a_b_u_h.cl"))
            .unwrap_or_else(|e| panic!("split-k {split}: one merged kernel: {e}"));
        assert!(
            kernel.contains("//   the same groups, after it: main_matmul_h (its epilogue reads main_matmul_u's output)"),
            "{kernel}"
        );
        assert_eq!(kernel.contains("atomic_inc"), split == "auto", "{kernel}");
        let left: Vec<String> = std::fs::read_dir(&dump)
            .unwrap()
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("main_"))
            .collect();
        assert_eq!(left, ["main_matmul_a_b_u_h.cl"], "split-k {split}");
    }
}

/// The shipped nvidia profile with `[skinny] norm_prologue`, `tail_launches` and
/// `chain_launches` off, written into `dir`.
fn norms_apart_profile(dir: &std::path::Path) -> String {
    skinny_profile(
        dir,
        &[("norm_prologue", false), ("tail_launches", false), ("chain_launches", false)],
    )
}

/// With `[skinny] norm_prologue` (on in the shipped nvidia profile), a decode step's RMSNorms
/// before attention and before the logits move into the products that read them: two
/// launches fewer, the Q, K and V projections still one merged launch; the norm before the MLP
/// stays a launch, as up and gate run in the same work-groups one after the other (-O3, with
/// `[skinny] tail_launches` off: on, that norm runs at the end of the output projection). On
/// the device the prefill (16 rows: thin enough) and the decode step give the interpreter's
/// numbers, split in the launch or not, again on a second run.
#[test]
fn a_decode_steps_normalisations_run_inside_its_projections() {
    let dir = common::scratch("norm-prologue");
    let text = common::inference_module("llama3.2-1b", 4, 48, 12);
    let fbir = common::write(&dir, "inf.fbir", text.as_bytes());
    let apart = norms_apart_profile(&dir);
    let launches = |profile: &str| -> Vec<String> {
        let steps = decode_launches(&dir, &fbir, profile);
        let text = |s: &serde_json::Value, k: &str| s[k].as_str().unwrap_or_default().to_string();
        steps.iter().map(|s| format!("{} {}", text(s, "kernel"), text(s, "source"))).collect()
    };
    let norms = |ls: &[String]| -> Vec<String> {
        ls.iter().filter(|l| l.ends_with(" tensor.rmsnorm")).cloned().collect()
    };
    let separate = launches(&apart);
    let fused = launches(&tails_profile(&dir, false));
    assert_eq!(norms(&separate).len(), 3, "{separate:#?}");
    assert_eq!(norms(&fused), ["decode_rmsnorm_l0_mlp_in tensor.rmsnorm"], "{fused:#?}");
    assert_eq!(fused.len() + 2, separate.len(), "{fused:#?}");
    for (name, moved) in [
        ("decode_matmul_l0_q_k_v ", true),
        ("decode_matmul_logits ", true),
        ("decode_matmul_l0_up_gated ", false),
    ] {
        let l = fused.iter().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("{name}"));
        assert_eq!(l.contains("+tensor.rmsnorm"), moved, "{l}");
    }
    if !common::opencl_device() {
        return;
    }
    for entry in ["decode", "prefill"] {
        for split in ["auto", "off"] {
            check_with(&fbir, "nvidia", &["--entry", entry, "--split-k", split, "--runs", "2"]);
        }
    }
}

/// The shipped nvidia profile with `[skinny] tail_launches` set to `on` and `chain_launches`
/// off, written into `dir`.
fn tails_profile(dir: &std::path::Path, on: bool) -> String {
    skinny_profile(dir, &[("tail_launches", on), ("chain_launches", false)])
}

/// The 4-prompt, 12-position decode step of `fbir` (written under `dir`) on the device with
/// `profile` gives the interpreter's numbers on three runs, split in the launch or not, and at
/// the cache's last position.
fn check_decode_to_the_last_position(dir: &std::path::Path, fbir: &str, profile: &str) {
    for split in ["auto", "off"] {
        check_with(fbir, profile, &["--entry", "decode", "--split-k", split, "--runs", "3"]);
    }
    let last = position_file(dir, 11);
    check_with(fbir, profile, &["--entry", "decode", "--inputs", &last, "--runs", "2"]);
}

/// The error of that decode step at position 12, past its cache: the run's stderr.
fn past_the_cache(dir: &std::path::Path, fbir: &str, profile: &str) -> String {
    let past = position_file(dir, 12);
    let args = ["run", fbir, "--entry", "decode", "--target", "opencl", "--profile", profile];
    let o = common::fbc(&[&args[..], &["--inputs", &past, "--random-inputs", "1"]].concat());
    assert_eq!(o.code, 1, "{}", o.stderr);
    o.stderr
}

/// A safetensors file in `dir` holding the rank-0 i32 `pos`.
fn position_file(dir: &std::path::Path, pos: i32) -> String {
    let bytes = pos.to_le_bytes();
    let view = safetensors::tensor::TensorView::new(safetensors::Dtype::I32, vec![], &bytes)
        .expect("view");
    let data = safetensors::tensor::serialize([("pos", view)], None).expect("serialize");
    common::write(dir, &format!("pos{pos}.safetensors"), &data)
}

/// With `[skinny] tail_launches`, a decode step's K and V cache updates run at the end of the
/// merged Q, K and V projections, and its MLP's RMSNorm at the end of the attention's output
/// projection, in the work-group that stores the product's last block: two launches fewer a
/// layer, each part's operands after the product's, the updates keeping their own fault ids.
/// On the device the step gives the interpreter's numbers on three runs (the tail's count
/// left at zero) at a random position and at the cache's last, split in the launch or not (no
/// tail without the split's counts); a position past the cache is the update's error at the
/// update's op, as without tails.
#[test]
fn small_launches_run_at_the_end_of_the_product_before_them() {
    let dir = common::scratch("tail-launches");
    let text = common::inference_module("llama3.2-1b", 4, 48, 12);
    let fbir = common::write(&dir, "inf.fbir", text.as_bytes());
    let (apart, tails) = (tails_profile(&dir, false), tails_profile(&dir, true));
    let names = |ls: &[serde_json::Value]| -> Vec<String> {
        ls.iter().map(|l| l["kernel"].as_str().unwrap_or_default().to_string()).collect()
    };
    let before = decode_launches(&dir, &fbir, &apart);
    let after = decode_launches(&dir, &fbir, &tails);
    assert_eq!(after.len() + 2, before.len(), "{:#?}", names(&after));
    let (was, now) = (names(&before), names(&after));
    for gone in [
        "decode_matmul_l0_q_k_v",
        "decode_update_slice_l0_k_cache_out_v_cache_out",
        "decode_matmul_l0_resid_attn",
        "decode_rmsnorm_l0_mlp_in",
    ] {
        assert!(was.iter().any(|n| n == gone) && !now.iter().any(|n| n == gone), "{gone}: {now:?}");
    }
    let parts_of = |name: &str| -> (Vec<String>, Vec<u64>, Vec<Option<u64>>, serde_json::Value) {
        let l = after.iter().find(|l| l["kernel"] == name).unwrap_or_else(|| panic!("{now:?}"));
        let parts = l["parts"].as_array().expect("parts");
        (
            parts.iter().map(|p| p["kernel"].as_str().unwrap().to_string()).collect(),
            parts.iter().map(|p| p["first_arg"].as_u64().unwrap()).collect(),
            parts.iter().map(|p| p["fault_id"].as_u64()).collect(),
            l.clone(),
        )
    };
    let (kernels, first, faults, qkv) =
        parts_of("decode_matmul_l0_q_k_v_update_slice_l0_k_cache_out_update_slice_l0_v_cache_out");
    assert_eq!(
        kernels,
        [
            "decode_matmul_l0_q_k_v",
            "decode_update_slice_l0_k_cache_out",
            "decode_update_slice_l0_v_cache_out"
        ]
    );
    // The product's 14 arguments (three parts' row, weight, norm weight and output, the
    // split's partial sums and counts), then each update's.
    assert_eq!(first, [0, 14, 20]);
    assert_eq!(qkv["args"].as_array().unwrap().len(), 23, "{qkv}");
    assert!(faults[0].is_none() && faults[1].is_some() && faults[1] != faults[2], "{faults:?}");
    assert_eq!(qkv["fault_id"].as_u64(), faults[1]);
    let (kernels, first, _, norm) = parts_of("decode_matmul_l0_resid_attn_rmsnorm_l0_mlp_in");
    assert_eq!(kernels, ["decode_matmul_l0_resid_attn", "decode_rmsnorm_l0_mlp_in"]);
    assert_eq!(first, [0, 6]);
    assert_eq!(norm["args"].as_array().unwrap().len(), 9, "{norm}");
    if !common::opencl_device() {
        return;
    }
    check_decode_to_the_last_position(&dir, &fbir, &tails);
    // Past the cache: the update's check, the same words with tails or without.
    let error = |profile: &str| {
        let e = past_the_cache(&dir, &fbir, profile);
        e.lines().next().unwrap_or_default().to_string()
    };
    // Each update checks the position (K's operand 0, V's operand 1), at its own op: in the
    // tail K's points run first; in a launch of their own, either may record first.
    let update = |kv: &str, operand: u32, at: &str| {
        format!("{at}: error: `memory.launch`: kernel `decode_update_slice_l0_{kv}_cache_out`: the symbol read from operand {operand} is 12, outside 0..=11 (nothing was written)")
    };
    let at = |i: usize| {
        let loc = qkv["parts"][i]["location"].as_str().unwrap_or_else(|| panic!("{qkv}"));
        assert!(loc.starts_with(&fbir), "{loc}");
        loc.to_string()
    };
    let (k, v) = (update("k", 0, &at(1)), update("v", 1, &at(2)));
    assert_eq!(error(&tails), k);
    let e = error(&apart);
    assert!(e == k || e == v, "{e}");
}

/// A LayerNorm (two statistics, a barrier between their trees) after a matrix-vector product
/// with a residual: with the shipped nvidia profile (`[skinny] tail_launches`) it runs at the
/// end of the product's launch (one kernel, both results the interpreter's, split in the
/// launch; a second run finds the tail's count at zero), and without the split's counts
/// (`--split-k off`) as a launch of its own.
#[test]
fn a_layer_norm_runs_at_the_end_of_the_product_before_it() {
    let dir = common::scratch("tail-layernorm");
    let text = "func.func @main(%x: tensor<1x1024xf32>, %w: tensor<1024x512xf32>, %r: tensor<1x512xf32>, %g: tensor<512xf32>, %b: tensor<512xf32>) -> (tensor<1x512xf32>, tensor<1x512xf32>) {
  %p = tensor.matmul %x, %w : (tensor<1x1024xf32>, tensor<1024x512xf32>) -> tensor<1x512xf32>
  %s = tensor.add %r, %p : (tensor<1x512xf32>, tensor<1x512xf32>) -> tensor<1x512xf32>
  %n = tensor.layernorm %s, %g, %b {axis = -1, eps = 1.0e-5} : (tensor<1x512xf32>, tensor<512xf32>, tensor<512xf32>) -> tensor<1x512xf32>
  func.return %s, %n : tensor<1x512xf32>, tensor<1x512xf32>
}
";
    let fbir = common::write(&dir, "ln.fbir", text.as_bytes());
    if !common::opencl_device() {
        return;
    }
    for (split, kernels) in [
        ("auto", vec!["main_matmul_s_layernorm_n.cl"]),
        ("off", vec!["main_layernorm_n.cl", "main_matmul_s.cl"]),
    ] {
        let dump = dir.join(format!("dump-{split}"));
        let dumped = dump.to_str().unwrap();
        check_with(&fbir, "nvidia", &["--split-k", split, "--runs", "2", "--dump-kernels", dumped]);
        let mut left: Vec<String> = std::fs::read_dir(&dump)
            .unwrap()
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("main_"))
            .collect();
        left.sort();
        assert_eq!(left, kernels, "split-k {split}");
    }
}

/// With `[skinny] chain_launches`, a decode step's launches of the skinny kernel between two
/// attentions run as one launch: the output projection (with the MLP's RMSNorm at its end),
/// up-gate, down and the next layer's Q, K and V projections (with the cache updates at their
/// end), after the last layer its output projection, up-gate and down (the logits over a
/// vocabulary of 48 are a plain kernel's launch). A work-group's ticket picks its member, each
/// member's groups after the one before's: the launch has every member's work-groups, its
/// operands are the split's counts (where the tickets live) and then the members' in order,
/// and its parts are the members' own (a tail keeps its fault id and location), so every
/// part's output is still the last of its operands (the runtime keeps the caches on the
/// device: `fbc generate` uploads as many bytes a step as without chains, and gives the same
/// tokens). On the device
/// the 2-layer step gives the interpreter's numbers on three runs (the tickets and counts left
/// at zero), at the cache's last position, and with the split left to a second kernel (no
/// counts: no chain); a position past the cache is the same error as without chains.
#[test]
fn a_layers_products_between_two_attentions_run_as_one_launch() {
    let dir = common::scratch("chain-launches");
    let text = common::inference_module_layers("llama3.2-1b", 2, 4, 48, 12);
    let fbir = common::write(&dir, "inf.fbir", text.as_bytes());
    let apart = skinny_profile(&dir, &[("chain_launches", false)]);
    let chained = skinny_profile(&dir, &[("chain_launches", true)]);
    let before = decode_launches(&dir, &fbir, &apart);
    let after = decode_launches(&dir, &fbir, &chained);
    let names = |ls: &[serde_json::Value]| -> Vec<String> {
        ls.iter().map(|l| l["kernel"].as_str().unwrap_or_default().to_string()).collect()
    };
    let (was, now) = (names(&before), names(&after));
    // The parts of each chain: the members' own where they have some (a tail's), the
    // members otherwise.
    let first_chain = [
        "decode_matmul_l0_resid_attn",
        "decode_rmsnorm_l0_mlp_in",
        "decode_matmul_l0_up_gated",
        "decode_matmul_l0_resid_mlp",
        "decode_matmul_l1_q_k_v",
        "decode_update_slice_l1_k_cache_out",
        "decode_update_slice_l1_v_cache_out",
    ];
    let second_chain = [
        "decode_matmul_l1_resid_attn",
        "decode_rmsnorm_l1_mlp_in",
        "decode_matmul_l1_up_gated",
        "decode_matmul_l1_resid_mlp",
    ];
    // Embedding, layer 0's Q/K/V, then attention and a chain per layer, then the logits.
    assert_eq!(
        now,
        [
            "decode_embedding_embeds",
            "decode_matmul_l0_q_k_v_update_slice_l0_k_cache_out_update_slice_l0_v_cache_out",
            "decode_attention_l0_ctx",
            "decode_matmul_l0_resid_attn_rmsnorm_l0_mlp_in_chain4",
            "decode_attention_l1_ctx",
            "decode_matmul_l1_resid_attn_rmsnorm_l1_mlp_in_chain3",
            "decode_matmul_logits",
        ]
    );
    assert_eq!(was.len(), now.len() + 5, "{was:?}");
    // Unchained, layer 1's launches run layer 0's kernels (the same code).
    for (chain, of, members) in [
        (&after[3], &before[3..7], &first_chain[..]),
        (&after[5], &before[8..11], &second_chain[..]),
    ] {
        let groups: u64 = of
            .iter()
            .map(|l| {
                let (g, w) = (l["global"].as_array().unwrap(), l["local"].as_array().unwrap());
                g.iter()
                    .zip(w)
                    .map(|(g, w)| g.as_u64().unwrap() / w.as_u64().unwrap())
                    .product::<u64>()
            })
            .sum();
        assert_eq!(chain["global"], serde_json::json!([32 * groups, 8, 1]), "{chain}");
        assert_eq!(chain["local"], serde_json::json!([32, 8, 1]));
        // The counts (the split's, which the members pass too: down's last, as it runs no
        // tail), then the members' operands in order.
        let counts = of[2]["args"].as_array().unwrap().last().unwrap().clone();
        let args: Vec<serde_json::Value> = std::iter::once(counts)
            .chain(of.iter().flat_map(|l| l["args"].as_array().unwrap().clone()))
            .collect();
        assert_eq!(chain["args"].as_array().unwrap(), &args);
        // Each member's parts (its own where it has some), where its operands start.
        let mut parts = Vec::new();
        let mut at = 1u64;
        for l in of {
            match l["parts"].as_array() {
                Some(ps) if !ps.is_empty() => {
                    for p in ps {
                        let first = p["first_arg"].as_u64().unwrap();
                        parts.push((at + first, p["fault_id"].is_u64()));
                    }
                }
                _ => parts.push((at, l["fault_id"].is_u64())),
            }
            at += l["args"].as_array().unwrap().len() as u64;
        }
        // (Fault ids count a module's kernels: the prefill's own chains change them.)
        let got: Vec<(u64, bool)> = chain["parts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p["first_arg"].as_u64().unwrap(), p["fault_id"].is_u64()))
            .collect();
        assert_eq!(got, parts);
        assert_eq!(names(chain["parts"].as_array().unwrap()), members);
    }
    // The next layer's cache updates keep their fault ids (and the launch checks accesses).
    let updates: Vec<&serde_json::Value> = after[3]["parts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["kernel"].as_str().unwrap().starts_with("decode_update_slice_l1"))
        .collect();
    assert_eq!(updates.len(), 2);
    assert!(updates.iter().all(|p| p["fault_id"].is_u64() && p["location"].is_string()));
    assert_ne!(updates[0]["fault_id"], updates[1]["fault_id"]);
    assert_eq!(after[3]["fault_id"], updates[0]["fault_id"]);
    if !common::opencl_device() {
        return;
    }
    check_decode_to_the_last_position(&dir, &fbir, &chained);
    let error = |profile: &str| past_the_cache(&dir, &fbir, profile);
    assert_eq!(error(&chained), error(&apart));
    // Tokens, and the bytes a decode step moves (the caches stay on the device).
    let generate = |profile: &str| {
        let o = common::fbc(&[
            "generate",
            &fbir,
            "--random-weights",
            "2",
            "--prompt",
            "3,17,8",
            "--max-new",
            "3",
            "--target",
            "opencl",
            "--profile",
            profile,
        ]);
        assert_eq!(o.code, 0, "{}", o.stderr);
        let moved = o.stderr.split("; the last decode step").nth(1).unwrap_or_default();
        (o.stdout, moved.trim().to_string())
    };
    let (tokens, moved) = generate(&chained);
    assert!(moved.starts_with("uploaded 520 bytes"), "{moved}");
    assert_eq!((tokens, moved), generate(&apart));
}

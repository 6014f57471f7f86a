//! `tensor.attention` lowered to one launch of the attention kind: the reference executor (its
//! three-step definition) against the tensor interpreter, the Cranelift JIT bit-identical to
//! the reference executor, and the fused OpenCL kernel (PoCL in CI) within `--check`'s bound of
//! it, at -O0 and -O3, over grouped-query heads, RoPE, causal masks with and without a window,
//! soft caps, key counts that are not a multiple of the tile and head dimensions from 4 to 256.
//! A position outside the symbol's range is an error on every back end, nothing written.
//!
//! Without an OpenCL device the OpenCL leg prints a notice, except under `CI=true`, where it
//! fails (no silent skips).

use fbc_runtime::device::cpu_jit::JitLauncher;
use fbc_runtime::interp::{random_inputs, Interpreter, Value};
use fbc_runtime::reference::Tensor;
use proptest::prelude::*;

mod common;

/// `@main` computing one `tensor.attention`: q `[B, H, S, D]`, k and v `[B, KV, M, D]`.
fn case(b: u64, h: u64, s: u64, d: u64, kv: u64, m: u64, attrs: &str) -> String {
    let rope = attrs.contains("rope = true");
    let causal = attrs.contains("causal = true");
    let (qt, kt) =
        (format!("tensor<{b}x{h}x{s}x{d}xf32>"), format!("tensor<{b}x{kv}x{m}x{d}xf32>"));
    let tt = format!("tensor<{s}x{d}xf32>");
    let mut args = vec![format!("%q: {qt}"), format!("%k: {kt}"), format!("%v: {kt}")];
    let mut ops = vec!["%q".to_string(), "%k".into(), "%v".into()];
    let mut types = vec![qt.clone(), kt.clone(), kt];
    if rope {
        args.extend([format!("%cos: {tt}"), format!("%sin: {tt}")]);
        ops.extend(["%cos".into(), "%sin".into()]);
        types.extend([tt.clone(), tt]);
    }
    if causal {
        args.push("%pos: tensor<i32>".into());
        ops.push("%pos".into());
        types.push("tensor<i32>".into());
    }
    common::main_module(
        &args.join(", "),
        &format!(
            "  %r = tensor.attention {} {{{attrs}}} : ({}) -> {qt}",
            ops.join(", "),
            types.join(", ")
        ),
        &qt,
    )
}

fn cases() -> Vec<(&'static str, String)> {
    vec![
        (
            "decode: grouped heads, RoPE, causal",
            case(1, 8, 1, 64, 2, 100, "scale = 0.125, rope = true, causal = true"),
        ),
        (
            "prefill: soft cap, window",
            case(1, 2, 7, 32, 2, 40, "scale = 0.2, causal = true, window = 5, softcap = 3.0"),
        ),
        ("Gemma's head dimension 256, no mask", case(1, 1, 3, 256, 1, 9, "scale = 0.0625")),
        (
            "head dimension 100, batch 2",
            case(2, 3, 5, 100, 3, 33, "scale = 0.1, causal = true, rope = true"),
        ),
        ("tiny", case(1, 2, 2, 4, 1, 3, "scale = 1.0, causal = true")),
        // More keys than a work-group takes: chunks of keys, then the combine.
        (
            "decode over 300 positions in 3 chunks",
            case(1, 4, 1, 64, 2, 300, "scale = 0.125, rope = true, causal = true"),
        ),
        // At chunks of 8: 138 chunks, more partials than a combining work-item holds at once
        // (it reads them in batches of 32, the last one short).
        (
            "decode over 1100 positions",
            case(1, 4, 1, 64, 2, 1100, "scale = 0.125, rope = true, causal = true"),
        ),
        (
            "a window across chunks",
            case(1, 2, 2, 32, 1, 400, "scale = 0.2, causal = true, window = 150"),
        ),
    ]
}

fn lowered(text: &str, o3: bool) -> fbc_ir::Module {
    let profile = fbc_target::builtin("generic").expect("generic");
    let r = if o3 {
        common::lower_o3_with(text, &profile, "auto")
    } else {
        common::lower_o0_with(text, &profile, "auto")
    };
    r.unwrap_or_else(|e| panic!("lowers: {e}"))
}

/// The flash-decoding kernel's chunking as its comment states it: `(keys a chunk, chunks, query
/// heads a work-group)`.
fn chunking(source: &str) -> (u64, u64, u64) {
    let line = source
        .lines()
        .find(|l| l.contains("// Attention, flash-decoding"))
        .unwrap_or_else(|| panic!("no flash-decoding kernel\n{source}"));
    let after = |key: &str| -> u64 {
        let at = line.find(key).unwrap_or_else(|| panic!("`{key}` in {line}")) + key.len();
        let digits: String = line[at..].chars().take_while(char::is_ascii_digit).collect();
        digits.parse().unwrap_or_else(|_| panic!("a number after `{key}` in {line}"))
    };
    (after("chunk of "), after("keys ("), after(" per "))
}

/// The most keys of a flash-decoding chunk for a head of `hd` (a work-item of the 128 holds 32
/// of the chunk's values): 64 for a head of 64, 32 for 100, 16 for 256.
fn most_keys(hd: u64) -> u64 {
    1 << (4096 / hd).ilog2()
}

/// The head dimension and the keys of the module's attention launch (the last two of its domain).
fn head_and_keys(m: &fbc_ir::Module) -> (u64, u64) {
    let domain = m
        .all_ops()
        .filter(|&o| m.op(o).attr("attention").is_some())
        .find_map(|o| m.op(o).attr("domain").and_then(fbc_ir::Attr::as_ints))
        .expect("the attention launch's domain");
    (domain[domain.len() - 2] as u64, domain[domain.len() - 1] as u64)
}

fn f32s(v: &Value) -> &[f32] {
    v.as_f32().expect("f32").data()
}

/// Asserts `got` within `--check`'s bound of `want`.
fn close(want: &[f32], got: &[f32], what: &str) {
    assert_eq!(want.len(), got.len(), "{what}");
    let big = want.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    for (i, (w, g)) in want.iter().zip(got).enumerate() {
        let bound = 1e-5 + 1e-4 * (w.abs() + big);
        assert!((w - g).abs() <= bound, "{what}: element {i}: {g} vs {w}");
    }
}

#[test]
fn the_attention_launch_matches_the_interpreter_and_the_jit_matches_it_bit_for_bit() {
    for (name, text) in cases() {
        let original = common::parse(&text);
        let inputs = random_inputs(&original, "main", 3).expect("inputs");
        let want = Interpreter::new(&original).run("main", inputs.clone()).expect("interpreter");
        for o3 in [false, true] {
            let m = lowered(&text, o3);
            let what = format!("{name} at -O{}", if o3 { 3 } else { 0 });
            let launches = m.all_ops().filter(|&o| m.op(o).attr("attention").is_some()).count();
            assert_eq!(launches, 1, "{what}: one attention launch");
            let reference = Interpreter::new(&m).run("main", inputs.clone()).expect("executor");
            close(f32s(&want[0]), f32s(&reference[0]), &what);
            let mut l = JitLauncher::new().expect("jit");
            let jit = Interpreter::new(&m)
                .run_with_launcher("main", inputs.clone(), &mut l)
                .expect("jit");
            let (r, j) = (f32s(&reference[0]), f32s(&jit[0]));
            assert!(
                r.iter().zip(j).all(|(a, b)| a.to_bits() == b.to_bits()),
                "{what}: the JIT differs from the reference executor"
            );
        }
    }
}

/// The inputs of a case with the position replaced by `pos`.
fn at_position(text: &str, pos: i32) -> Vec<Value> {
    let original = common::parse(text);
    let mut inputs = random_inputs(&original, "main", 3).expect("inputs");
    let last = inputs.len() - 1;
    inputs[last] = Value::I32(Tensor::new(Vec::new(), vec![pos]).expect("scalar"));
    inputs
}

#[test]
fn a_negative_position_is_an_error_of_the_launch() {
    let text = case(1, 2, 2, 4, 1, 3, "scale = 1.0, causal = true");
    let inputs = at_position(&text, -1);
    let original = common::parse(&text);
    let e = Interpreter::new(&original).run("main", inputs.clone()).unwrap_err().to_string();
    assert!(e.contains("the position -1 is negative"), "{e}");
    let m = lowered(&text, true);
    let e = Interpreter::new(&m).run("main", inputs.clone()).unwrap_err().to_string();
    assert!(e.contains("symbol s0 (element 0 of operand 3) is -1, outside 0..=2147483645"), "{e}");
    let mut l = JitLauncher::new().expect("jit");
    let e = Interpreter::new(&m).run_with_launcher("main", inputs, &mut l).unwrap_err().to_string();
    assert!(e.contains("is -1, outside 0..=2147483645"), "{e}");
}

/// The OpenCL C of lowered module `m` for the generic profile, and its `@main` run on the
/// device with `inputs` (the results, or the error's text).
#[cfg(feature = "opencl")]
fn on_device(m: &fbc_ir::Module, inputs: &[Value]) -> (String, Result<Vec<Value>, String>) {
    let profile = fbc_target::builtin("generic").expect("generic");
    let kernels = fbc_codegen::opencl::KernelOptions::for_target(&profile);
    let (out, run) = common::run_main_on_device(m, kernels, inputs);
    (out.source, run.map(|r| r.results))
}

#[cfg(feature = "opencl")]
#[test]
fn the_fused_opencl_kernel_matches_the_reference_executor() {
    if !common::have_device() {
        return;
    }
    for (name, text) in cases() {
        let original = common::parse(&text);
        let inputs = random_inputs(&original, "main", 3).expect("inputs");
        for o3 in [false, true] {
            let m = lowered(&text, o3);
            let what = format!("{name} at -O{}", if o3 { 3 } else { 0 });
            let reference = Interpreter::new(&m).run("main", inputs.clone()).expect("executor");
            let (source, run) = on_device(&m, &inputs);
            assert_eq!(
                source.matches("// Attention, flash-decoding").count(),
                1,
                "{what}: one fused kernel\n{source}"
            );
            // Keys beyond one chunk (64, fewer for a wide head: a work-item holds 32 of the
            // chunk's keys' values, so a chunk has at most 4096 / D keys, rounded down to a power
            // of two) are split into chunks, combined in the same launch by the last work-group
            // of the query group (its count left zero for the next run).
            let (hd, keys) = head_and_keys(&m);
            let (chunk, chunks, heads) = chunking(&source);
            assert_eq!(chunk, most_keys(hd).min(64), "{what}");
            assert_eq!(chunks, keys.div_ceil(chunk), "{what}");
            assert_eq!(source.contains("atomic_inc(fbc_count + gid)"), chunks > 1, "{what}");
            // Query heads that read one key head are one work-group's (8 heads over 2 key heads,
            // 2 over 1, 4 over 2); the others take one head a work-group.
            let want = match name {
                "decode: grouped heads, RoPE, causal" => 4,
                "tiny"
                | "decode over 300 positions in 3 chunks"
                | "decode over 1100 positions"
                | "a window across chunks" => 2,
                _ => 1,
            };
            assert_eq!(heads, want, "{what}");
            assert!(!source.contains("_combine("), "{what}: no second kernel");
            let run = run.unwrap_or_else(|e| panic!("{what}: {e}"));
            close(f32s(&reference[0]), f32s(&run[0]), &what);
            if chunks > 1 {
                // A second attention launch of the function (its output as the queries) shares
                // the counts: the last group of every point of the first left its count zero.
                let line = text
                    .lines()
                    .find(|l| l.contains("%r = tensor.attention %q,"))
                    .expect("the attention op");
                let second =
                    line.replacen("%r = tensor.attention %q,", "%r2 = tensor.attention %r,", 1);
                let chained = text
                    .replacen(line, &format!("{line}\n{second}"), 1)
                    .replace("func.return %r :", "func.return %r2 :");
                let m2 = lowered(&chained, o3);
                let reference =
                    Interpreter::new(&m2).run("main", inputs.clone()).expect("executor");
                let (source, run) = on_device(&m2, &inputs);
                assert_eq!(source.matches("fbc_count[gid] = 0").count(), 2, "{what}: two launches");
                let run = run.unwrap_or_else(|e| panic!("{what}, chained: {e}"));
                close(f32s(&reference[0]), f32s(&run[0]), &format!("{what}, chained"));
            }
        }
    }
    // Out of range: the error names the position; nothing is written.
    let text = case(1, 2, 2, 4, 1, 3, "scale = 1.0, causal = true");
    let e = on_device(&lowered(&text, true), &at_position(&text, -1)).1.unwrap_err();
    assert!(e.contains("-1"), "{e}");
}

/// The profile's `[attention] decode_chunk` cuts the keys into chunks of that many: every size
/// from 8 to 128 gives the reference executor's numbers on every case (one chunk, several, a
/// window across chunks), and the kernel says its chunk.
#[cfg(feature = "opencl")]
#[test]
fn every_decode_chunk_size_matches_the_reference_executor() {
    if !common::have_device() {
        return;
    }
    for chunk in [8u32, 32, 128] {
        let mut profile = fbc_target::builtin("generic").expect("generic");
        profile.attention.decode_chunk = chunk;
        assert!(profile.validate().is_ok(), "{chunk}");
        for (name, text) in cases() {
            let original = common::parse(&text);
            let inputs = random_inputs(&original, "main", 5).expect("inputs");
            let m = lowered(&text, true);
            let what = format!("{name}, chunks of {chunk}");
            let reference = Interpreter::new(&m).run("main", inputs.clone()).expect("executor");
            let kernels = fbc_codegen::opencl::KernelOptions::for_target(&profile);
            let (out, run) = common::run_main_on_device(&m, kernels, &inputs);
            let hd = head_and_keys(&m).0;
            assert_eq!(chunking(&out.source).0, most_keys(hd).min(u64::from(chunk)), "{what}");
            let run = run.unwrap_or_else(|e| panic!("{what}: {e}"));
            close(f32s(&reference[0]), f32s(&run.results[0]), &what);
        }
    }
    let mut bad = fbc_target::builtin("generic").expect("generic");
    bad.attention.decode_chunk = 96;
    let problems = bad.validate().unwrap_err();
    assert_eq!(problems[0].field, "attention.decode_chunk");
    assert_eq!(problems[0].message, "96 must be a power of two from 8 to 128");
    let mut bad = fbc_target::builtin("generic").expect("generic");
    bad.attention.prompt_splits = 0;
    let problems = bad.validate().unwrap_err();
    assert_eq!(problems[0].field, "attention.prompt_splits");
    assert_eq!(problems[0].message, "0 must be from 1 to 16");
}

/// Attention of many queries per head (a prompt) takes the query-block form on OpenCL (16
/// queries a work-group, keys in tiles of 32, online softmax): within `--check`'s bound of the
/// reference executor at -O0 and -O3, over grouped heads, RoPE, causal masks with a window, soft
/// caps, batches, query counts that are not a multiple of the block and key counts that are not
/// a multiple of the tile. A head size that is not a multiple of 8 keeps flash-decoding.
#[cfg(feature = "opencl")]
#[test]
fn many_queries_run_in_query_blocks_on_opencl() {
    if !common::have_device() {
        return;
    }
    let cases = [
        (
            "grouped heads, RoPE, causal",
            case(1, 4, 70, 32, 2, 70, "scale = 0.2, rope = true, causal = true"),
            true,
        ),
        (
            "window, soft cap",
            case(1, 2, 64, 16, 1, 100, "scale = 0.3, causal = true, window = 20, softcap = 2.0"),
            true,
        ),
        ("no mask, fewer keys than a tile", case(1, 1, 65, 8, 1, 19, "scale = 0.5"), true),
        ("batch 2", case(2, 2, 64, 40, 1, 64, "scale = 0.15, causal = true"), true),
        // A prompt over a longer cache: the split's runs follow the keys the last query sees.
        (
            "64 queries over 200 keys",
            case(1, 2, 64, 32, 1, 200, "scale = 0.2, causal = true"),
            true,
        ),
        // A head of 128 takes 32 × 32 blocks whose work-items stage 64 values of a tile each:
        // the tile goes into local memory a value at a time instead of through registers.
        ("head size 128", case(1, 1, 64, 128, 1, 70, "scale = 0.1, causal = true"), true),
        ("head size 12", case(1, 2, 64, 12, 1, 40, "scale = 0.3, causal = true"), false),
    ];
    for (name, text, blocks) in cases {
        let original = common::parse(&text);
        let inputs = random_inputs(&original, "main", 5).expect("inputs");
        for o3 in [false, true] {
            let m = lowered(&text, o3);
            let what = format!("{name} at -O{}", if o3 { 3 } else { 0 });
            let reference = Interpreter::new(&m).run("main", inputs.clone()).expect("executor");
            let (source, run) = on_device(&m, &inputs);
            assert_eq!(source.contains("// Attention, query blocks (FLAT)"), blocks, "{what}");
            assert_eq!(source.contains("// Attention, flash-decoding"), !blocks, "{what}");
            let run = run.unwrap_or_else(|e| panic!("{what}: {e}"));
            close(f32s(&reference[0]), f32s(&run[0]), &what);
            // Each block's keys split over at most 3 work-groups (runs of whole tiles, at most a
            // third of the longest block's tiles each: a causal prompt's first block in one run, which
            // writes its outputs itself, later ones in two or three, combined by the last to
            // finish); twice, for the counts each launch leaves zero.
            if blocks {
                let profile = fbc_target::builtin("generic").expect("generic");
                let mut kernels = fbc_codegen::opencl::KernelOptions::for_target(&profile);
                kernels.prompt_splits = 3;
                for round in 0..2 {
                    let (out, run) = common::run_main_on_device(&m, kernels.clone(), &inputs);
                    assert!(out.source.contains("Run fbc_sp of the block's 3 runs"), "{what}");
                    let run = run.unwrap_or_else(|e| panic!("{what}, split: {e}"));
                    close(
                        f32s(&reference[0]),
                        f32s(&run.results[0]),
                        &format!("{what}, split {round}"),
                    );
                }
            }
        }
    }
}

/// `@main`: the causal attention of `s` queries of 4 heads of 32 over `m` keys of 2 key heads,
/// its heads merged (transpose, reshape) and projected (`[s, 128] · [128, 128]`): the product
/// reads the attention's result in an R-Tile image at -O3.
fn attention_then_projection(s: u64, m: u64) -> String {
    let (q, kv, r) = (
        format!("tensor<1x4x{s}x32xf32>"),
        format!("tensor<1x2x{m}x32xf32>"),
        format!("tensor<1x{s}x128xf32>"),
    );
    format!(
        "func.func @main(%q: {q}, %k: {kv}, %v: {kv}, %pos: tensor<i32>, %wo: tensor<128x128xf32>) -> {r} {{
  %a = tensor.attention %q, %k, %v, %pos {{scale = 0.2, causal = true}} : ({q}, {kv}, {kv}, tensor<i32>) -> {q}
  %t = tensor.transpose %a {{perm = [0, 2, 1, 3]}} : ({q}) -> tensor<1x{s}x4x32xf32>
  %m = tensor.reshape %t {{shape = [1, {s}, 128]}} : (tensor<1x{s}x4x32xf32>) -> {r}
  %r = tensor.matmul %m, %wo : ({r}, tensor<128x128xf32>) -> {r}
  func.return %r : {r}
}}
"
    )
}

/// An attention whose reader wants its result in an R-Tile image gets it written there by the
/// attention launch itself, four values of the head a texel (no `layout.convert` after it): at
/// -O3, in the query-block form (64 queries, with the nvidia profile's runs of keys too) and in
/// flash-decoding (8 queries, keys in one chunk or two combined), within `--check`'s bound of
/// the interpreter on OpenCL, and the reference executor (the launch's three steps) within it
/// too.
#[cfg(feature = "opencl")]
#[test]
fn an_attention_writes_the_image_its_reader_wants() {
    if !common::have_device() {
        return;
    }
    for (s, m, form) in
        [(64, 80, "query blocks"), (8, 80, "flash-decoding"), (8, 40, "flash-decoding")]
    {
        o3_on_device(
            &attention_then_projection(s, m),
            7,
            &format!("{s} queries, {m} keys"),
            |what, lowered, inputs, reference, source| {
                // The reference executor: the launch's three steps, the last writing the image.
                let executed =
                    Interpreter::new(lowered).run("main", inputs.to_vec()).expect("executor");
                close(f32s(&reference[0]), f32s(&executed[0]), &format!("{what}, executor"));
                let attention = source
                    .split("__kernel")
                    .find(|k| k.contains("// Attention, "))
                    .unwrap_or_else(|| panic!("{what}: no attention kernel"));
                // Before, a conversion kernel (`main_convert_a_cv`) wrote the image from a buffer.
                assert!(!source.contains("main_convert_a"), "{what}: {source}");
                assert!(attention.contains(&format!("// Attention, {form}")), "{what}");
                assert!(attention.contains("__write_only image2d_t"), "{what}: {attention}");
                assert!(attention.contains("write_imagef("), "{what}");
            },
        );
    }
}

/// For the generic and nvidia profiles: `text`'s `@main` lowered at -O3, handed to `inspect`
/// (what, the lowered module, the random inputs of `seed`, the interpreter's results, the
/// OpenCL source), then run on the OpenCL device within `--check`'s bound of the interpreter.
#[cfg(feature = "opencl")]
fn o3_on_device(
    text: &str,
    seed: u64,
    label: &str,
    inspect: impl Fn(&str, &fbc_ir::Module, &[Value], &[Value], &str),
) {
    let original = common::parse(text);
    let inputs = random_inputs(&original, "main", seed).expect("inputs");
    let reference = Interpreter::new(&original).run("main", inputs.clone()).expect("interpreter");
    for target in ["generic", "nvidia"] {
        let what = format!("{label}, {target}");
        let profile = fbc_target::builtin(target).expect("profile");
        let lowered =
            common::lower_o3_with(text, &profile, "auto").unwrap_or_else(|e| panic!("{what}: {e}"));
        let kernels = fbc_codegen::opencl::KernelOptions::for_target(&profile);
        let (out, run) = common::run_main_on_device(&lowered, kernels, &inputs);
        inspect(&what, &lowered, &inputs, &reference, &out.source);
        let run = run.unwrap_or_else(|e| panic!("{what}: {e}"));
        close(f32s(&reference[0]), f32s(&run.results[0]), &what);
    }
}

/// A projection whose heads (reshape, transpose) only a fused attention reads: `[1, s, 128]`
/// into `[1, 4, s, 32]` queries.
fn projection_then_attention(s: u64, m: u64) -> String {
    let (x, q, kv) = (
        format!("tensor<1x{s}x128xf32>"),
        format!("tensor<1x4x{s}x32xf32>"),
        format!("tensor<1x2x{m}x32xf32>"),
    );
    format!(
        "func.func @main(%x: {x}, %wq: tensor<128x128xf32>, %k: {kv}, %v: {kv}, %pos: tensor<i32>) -> {q} {{
  %p = tensor.matmul %x, %wq : ({x}, tensor<128x128xf32>) -> {x}
  %h = tensor.reshape %p {{shape = [1, {s}, 4, 32]}} : ({x}) -> tensor<1x{s}x4x32xf32>
  %t = tensor.transpose %h {{perm = [0, 2, 1, 3]}} : (tensor<1x{s}x4x32xf32>) -> {q}
  %a = tensor.attention %t, %k, %v, %pos {{scale = 0.2, causal = true}} : ({q}, {kv}, {kv}, tensor<i32>) -> {q}
  func.return %a : {q}
}}
"
    )
}

/// The attention reads the projection's result in whatever layout the projection wrote it,
/// through the head view (the view is linear: its only reader addresses linear memory, so
/// tile-propagate gives it no tile of its own): no conversion launch between the two, at -O3,
/// in both kernel forms, within `--check`'s bound of the interpreter on OpenCL.
#[cfg(feature = "opencl")]
#[test]
fn an_attention_reads_its_projection_through_the_head_view() {
    if !common::have_device() {
        return;
    }
    for (s, m, form) in [(64, 80, "query blocks"), (8, 40, "flash-decoding")] {
        let text = projection_then_attention(s, m);
        o3_on_device(&text, 11, &format!("{s} queries, {m} keys"), |what, _, _, _, source| {
            // Before, a conversion (`main_convert_t_cv`) copied the heads into a linear buffer.
            assert!(!source.contains("_convert_"), "{what}: {source}");
            assert!(!source.contains("main_copy_"), "{what}: {source}");
            assert!(source.contains(&format!("// Attention, {form}")), "{what}");
        });
    }
}

/// A random attention case: `(heads of k and v, query heads per k head, head dimension, keys,
/// queries, rope, causal, window, soft cap)`.
fn random_case() -> impl Strategy<Value = String> {
    (
        1u64..=3,
        1u64..=3,
        1u64..=40,
        1u64..=150,
        1u64..=4,
        any::<bool>(),
        any::<bool>(),
        0u64..=3,
        any::<bool>(),
    )
        .prop_map(|(kv, g, half, m, s, rope, causal, window, cap)| {
            let mut attrs = vec!["scale = 0.3".to_string()];
            if rope {
                attrs.push("rope = true".into());
            }
            if causal {
                attrs.push("causal = true".into());
                if window > 0 {
                    attrs.push(format!("window = {}", window * 7));
                }
            }
            if cap {
                attrs.push("softcap = 1.5".into());
            }
            case(1, kv * g, s, 2 * half, kv, m, &attrs.join(", "))
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Fused against unfused on random shapes (heads, grouped-query groups, head sizes, key
    /// counts that are not multiples of a chunk): the lowered attention launch on the reference
    /// executor within `--check`'s bound of the interpreter's unfused graph, the JIT
    /// bit-identical to it, and the OpenCL kernel (PoCL in CI) within the bound.
    #[test]
    fn random_attention_keeps_its_numbers(text in random_case()) {
        let original = common::parse(&text);
        let inputs = random_inputs(&original, "main", 9).expect("inputs");
        let want = Interpreter::new(&original).run("main", inputs.clone()).expect("interpreter");
        let m = lowered(&text, true);
        let reference = Interpreter::new(&m).run("main", inputs.clone()).expect("executor");
        close(f32s(&want[0]), f32s(&reference[0]), &text);
        let mut l = JitLauncher::new().expect("jit");
        let jit = Interpreter::new(&m).run_with_launcher("main", inputs.clone(), &mut l).expect("jit");
        let same = f32s(&reference[0]).iter().zip(f32s(&jit[0])).all(|(a, b)| a.to_bits() == b.to_bits());
        prop_assert!(same, "the JIT differs from the reference executor: {}", text);
        #[cfg(feature = "opencl")]
        if common::have_device() {
            let run = on_device(&m, &inputs).1.unwrap_or_else(|e| panic!("{text}: {e}"));
            close(f32s(&reference[0]), f32s(&run[0]), &text);
        }
    }
}

/// A safetensors file holding the rank-0 `i32` tensor `pos`.
fn position_file(dir: &std::path::Path, pos: i32) -> std::path::PathBuf {
    let header = r#"{"pos":{"dtype":"I32","shape":[],"data_offsets":[0,4]}}"#;
    let mut b = (header.len() as u64).to_le_bytes().to_vec();
    b.extend(header.as_bytes());
    b.extend(pos.to_le_bytes());
    let path = dir.join(format!("pos{pos}.safetensors"));
    std::fs::write(&path, b).expect("write");
    path
}

/// A one-layer Llama decode step at the first and at the last position of its 12-position cache
/// (the mask then keeps one key, or all of them): the fused attention on the JIT and on OpenCL
/// against the interpreter (`fbc run --check`).
#[test]
fn decode_at_the_first_and_the_last_cache_position() {
    let dir = common::scratch("attention-positions");
    let module = dir.join("decode.fbir");
    std::fs::write(&module, common::inference_module("llama3.2-1b", 4, 48, 12)).expect("write");
    let m = module.to_str().expect("path");
    let mut targets = vec!["cpu-jit"];
    if cfg!(feature = "opencl") && common::opencl_device() {
        targets.push("opencl");
    }
    for pos in [0, 11] {
        let p = position_file(&dir, pos);
        for target in &targets {
            let args = [
                "run",
                m,
                "--entry",
                "decode",
                "--inputs",
                p.to_str().expect("path"),
                "--random-inputs",
                "4",
                "--target",
                target,
                "--check",
            ];
            let o = common::fbc(&args);
            assert_eq!(o.code, 0, "pos {pos} on {target}: {}", o.stderr);
            assert!(o.stdout.contains("check passed"), "pos {pos} on {target}: {}", o.stdout);
        }
    }
}

/// The reference executor's scratch for an attention launch (`P·M` scores, twice) is checked
/// against the memory limit like any allocation: a clear error, not an abort.
#[test]
fn the_scratch_of_a_huge_attention_launch_is_refused() {
    let dir = common::scratch("attention-scratch");
    let path = dir.join("huge.fbir");
    let n = 65536;
    let text = format!(
        r#"func.func @main(%q: tensor<{n}xf32>, %k: tensor<{n}xf32>) -> tensor<{n}xf32> {{
  %qm = memory.upload %q {{layout = #layout.linear}} : (tensor<{n}xf32>) -> !memory.buffer<{n}, f32>
  %km = memory.upload %k {{layout = #layout.linear}} : (tensor<{n}xf32>) -> !memory.buffer<{n}, f32>
  %om = memory.alloc : () -> !memory.buffer<{n}, f32>
  memory.launch %qm, %km, %km, %om {{kernel = "a", domain = [{n}, 1, {n}], iterators = ["parallel", "parallel", "key"], maps = [(d0, d1, d2) -> (d0 + d1), (d0, d1, d2) -> (d2 + d1), (d0, d1, d2) -> (d2 + d1), (d0, d1, d2) -> (d0 + d1)], attention = #memory.attention<scale = 1.0, softcap = 0.0, rope = false, window = 0>}} : (!memory.buffer<{n}, f32>, !memory.buffer<{n}, f32>, !memory.buffer<{n}, f32>, !memory.buffer<{n}, f32>) -> ()
  %o = memory.download %om {{layout = #layout.linear}} : (!memory.buffer<{n}, f32>) -> tensor<{n}xf32>
  func.return %o : tensor<{n}xf32>
}}
"#
    );
    std::fs::write(&path, text).expect("write");
    let p = path.to_str().expect("path");
    let o = common::fbc(&["run", p, "--random-inputs", "1", "--max-memory", "1G"]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(
        o.stderr.contains(
            "the scratch !memory.buffer<4294967296, f32> of attention launch `a` needs 17179869184 bytes (16.0 GiB), over the memory limit of 1073741824 bytes (1.0 GiB) (set it with --max-memory)"
        ),
        "{}",
        o.stderr
    );
}

//! `global-layout` (Sec. 4.4) and the Sec. 2.3 baselines, from `.fbir` text: an FTD-D → FTD-D
//! conflict resolved by the size-ranked greedy search, propagation through a flexible op, the
//! graph boundary and a profile too small for the image, and the three strategies compared.

use std::sync::Arc;

use fbc_dialects::layout::{Layout, RTile, Storage};
use fbc_ir::pass::Statistics;
use fbc_ir::{Module, PassContext, PassManager, SourceFile};
use fbc_target::HardwareProfile;

const MATMUL_FB: &str = include_str!("../../../examples/matmul_fb.fbir");
const ATTENTION: &str = include_str!("../../../examples/attention.fbir");

fn parse(text: &str) -> Module {
    let reg = fbc_dialects::registry();
    fbc_ir::parse_module(&Arc::new(SourceFile::new("t.fbir", text)), &reg)
        .unwrap_or_else(|d| panic!("{text}\n{d:?}"))
}

fn run_on(m: &mut Module, pipeline: &str, p: &HardwareProfile, stats: &mut Statistics) {
    let reg = fbc_dialects::registry();
    let steps = fbc_transforms::default_registry().parse_pipeline(pipeline).expect("pipeline");
    let mut pm = PassManager::new(steps);
    pm.instrumentation.verify_each = true;
    let mut cx = PassContext::new(&reg);
    cx.target = p;
    cx.stats = std::mem::take(stats);
    pm.run(m, &mut cx, &mut |_| {}).unwrap_or_else(|d| panic!("{pipeline}: {d:?}"));
    *stats = cx.stats;
}

fn count(m: &Module, name: &str) -> usize {
    m.all_ops().filter(|&o| m.op(o).name() == name).count()
}

/// The assign reading the value named `name`.
fn assign_of(m: &Module, name: &str) -> fbc_ir::Op {
    m.all_ops()
        .find(|&o| {
            let d = m.op(o);
            d.def.is("layout.assign") && m.value(d.operands[0]).name.as_deref() == Some(name)
        })
        .unwrap_or_else(|| panic!("no assign of %{name}"))
}

const QK_PV: &str = r#"func.func @attn(%q: tensor<4x256x64xf32>, %k: tensor<4x256x64xf32>, %v: tensor<4x256x64xf32>) -> tensor<4x256x64xf32> {
  %s = tensor.matmul %q, %k {transpose_b = true} : (tensor<4x256x64xf32>, tensor<4x256x64xf32>) -> tensor<4x256x256xf32>
  %o = tensor.matmul %s, %v : (tensor<4x256x256xf32>, tensor<4x256x64xf32>) -> tensor<4x256x64xf32>
  func.return %o : tensor<4x256x64xf32>
}"#;

/// QKᵀ then (QKᵀ)·V: the two FTD-D ops agree on mali (the candidate overlap of Sec. 4.4.2), so
/// nothing is converted; forcing a different preference on the larger `%s` makes the QKᵀ
/// kernel (which writes `q`'s tile) disagree with its reader, a chain the greedy search
/// resolves by trying the larger tensor's tile first.
#[test]
fn qk_then_pv_greedy() {
    let p = fbc_target::builtin("mali").unwrap();
    let mut stats = Statistics::default();
    let mut m = parse(QK_PV);
    run_on(&mut m, "fb-classify,rtile-candidates,rtile-select", &p, &mut stats);
    let mut plain = m.clone();
    let mut st = Statistics::default();
    run_on(&mut plain, "global-layout", &p, &mut st);
    assert_eq!(count(&plain, "layout.convert"), 0);
    assert_eq!(st.get("global-layout", "chains"), 0);
    assert_eq!(st.get("global-layout", "boundary-converts"), 3, "q, k, v uploaded tiled");

    // %s prefers another tile than the one QKᵀ writes (q's).
    let a = assign_of(&m, "s");
    let q_tile = match Layout::from_attr(m.op(assign_of(&m, "q")).attr("layout").unwrap()).unwrap()
    {
        Layout::RTile(t) => t.tile,
        Layout::Linear => panic!("q is linear"),
    };
    let s = m.op(a).operands[0];
    let other = fbc_transforms::layout::rtile::read_candidates(&m, s)
        .unwrap()
        .unwrap()
        .into_iter()
        .find(|c| c.tile != q_tile)
        .expect("another candidate");
    m.set_attr(a, "layout", other.to_attr());
    // Without the search (convert strategy on the same plan) every R-Tile reader is converted.
    let mut conv = m.clone();
    let mut st = Statistics::default();
    run_on(&mut conv, "global-layout{strategy=convert}", &p, &mut st);
    assert_eq!(count(&conv, "layout.convert"), 4);

    let mut st = Statistics::default();
    run_on(&mut m, "global-layout", &p, &mut st);
    assert_eq!(st.get("global-layout", "chains"), 1);
    let rec = &st.records["global-layout"]["functions"][0]["chains"][0];
    insta::assert_snapshot!("qk_pv_chain", serde_json::to_string_pretty(rec).unwrap());
    // The search ends no worse than the anchors' own preferences plus a conversion.
    assert!(rec["cost_us"].as_f64().unwrap() <= rec["own_layouts_cost_us"].as_f64().unwrap());
    assert_eq!(st.get("global-layout", "greedy-tries"), 8);
    // Uniform q-tile beats the forced %s preference plus a conversion: no conversion is left.
    assert_eq!(rec["chosen_tile"], serde_json::json!(q_tile));
    assert_eq!(count(&m, "layout.convert"), 0);
}

/// matmul → gelu → matmul: gelu (FTI-C) writes what the second matmul wants, so the conflict
/// between the first matmul's tile and the second's is absorbed with no conversion (Table 2).
#[test]
fn flexible_op_absorbs_the_layout() {
    let text = r#"func.func @mlp(%x: tensor<256x512xf32>, %w1: tensor<512x1024xf32>, %w2: tensor<1024x512xf32>) -> tensor<256x512xf32> {
  %h = tensor.matmul %x, %w1 : (tensor<256x512xf32>, tensor<512x1024xf32>) -> tensor<256x1024xf32>
  %g = tensor.gelu %h : (tensor<256x1024xf32>) -> tensor<256x1024xf32>
  %y = tensor.matmul %g, %w2 : (tensor<256x1024xf32>, tensor<1024x512xf32>) -> tensor<256x512xf32>
  func.return %y : tensor<256x512xf32>
}"#;
    let p = fbc_target::builtin("mali").unwrap();
    let mut stats = Statistics::default();
    let mut m = parse(text);
    run_on(&mut m, &fbc_transforms::pipeline_for_level(3).replace('\n', ""), &p, &mut stats);
    assert_eq!(count(&m, "layout.convert"), 0);
    let gelu = m.all_ops().find(|&o| m.op(o).name() == "tensor.gelu").unwrap();
    let want = m.op(assign_of(&m, "g")).attr("layout").cloned();
    assert!(want.is_some());
    assert_eq!(m.op(gelu).attr("fbc.layout").cloned(), want, "gelu writes g's R-Tile");
    // The returned result is written linear: no fbc.layout on the last matmul.
    let last = m.funcs[0].body[m.funcs[0].body.len() - 2];
    assert_eq!(m.op(last).name(), "tensor.matmul");
    assert!(m.op(last).attr("fbc.layout").is_none());
}

/// Graph boundaries: a returned value the tiled kernel wrote gets an explicit conversion to
/// linear; an image larger than a tiny profile's limit moves to a buffer.
#[test]
fn boundaries_and_tiny_images() {
    let text = r#"func.func @f(%a: tensor<64x64xf32>, %b: tensor<64x64xf32>) -> (tensor<64x64xf32>, tensor<64x64xf32>) {
  %c = tensor.matmul %a, %b : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
  %d = tensor.matmul %c, %b : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
  func.return %c, %d : (tensor<64x64xf32>, tensor<64x64xf32>) -> ()
}"#;
    let generic = fbc_target::builtin("generic").unwrap();
    let mut stats = Statistics::default();
    let mut m = parse(text);
    run_on(&mut m, "fb-classify,rtile-candidates,rtile-select", &generic, &mut stats);
    let mut g = m.clone();
    let mut st = Statistics::default();
    run_on(&mut g, "global-layout", &generic, &mut st);
    // %c is read by the second matmul (tiled) and returned (linear): one conversion.
    assert_eq!(count(&g, "layout.convert"), 1);
    let ret = *g.funcs[0].body.last().unwrap();
    let c_ret = g.op(ret).operands[0];
    let conv = g.defining_op(c_ret).unwrap();
    assert_eq!(g.op(conv).name(), "layout.convert");
    assert_eq!(Layout::from_attr(g.op(conv).attr("to").unwrap()).unwrap(), Layout::Linear);

    // A profile whose images hold 8 x 8 texels: every R-Tile here needs a buffer.
    let toml = include_str!("../../../dialects/target/profiles/generic.toml")
        .replace("max_width = 8192", "max_width = 8")
        .replace("max_height = 8192", "max_height = 8")
        .replace("name = \"generic\"", "name = \"tiny\"");
    let tiny = fbc_target::from_toml(&toml).unwrap();
    let mut st = Statistics::default();
    run_on(&mut m, "global-layout", &tiny, &mut st);
    assert!(st.get("global-layout", "buffer-fallbacks") >= 1);
    for o in m.all_ops() {
        if let Some(Ok(Layout::RTile(t))) = m.op(o).attr("fbc.layout").map(Layout::from_attr) {
            assert_eq!(t.storage, Storage::Buffer, "{}", m.op(o).name());
        }
    }
    let _: Option<RTile> = None;
}

fn strategy_counts(
    text: &str,
    target: &str,
    strategy: fbc_transforms::global_layout::Strategy,
) -> (usize, i64, i64, i64) {
    let p = fbc_target::builtin(target).unwrap();
    let mut stats = Statistics::default();
    let mut m = parse(text);
    run_on(&mut m, &fbc_transforms::pipeline(3, strategy), &p, &mut stats);
    (
        count(&m, "layout.convert"),
        stats.get("index-elim", "eliminated"),
        stats.get("index-elim", "fallback"),
        stats.get("global-layout", "boundary-converts"),
    )
}

const SMALL_ATTENTION: &str = r#"func.func @mha(%x: tensor<1x128x256xf32>, %wq: tensor<256x256xf32>, %wk: tensor<256x256xf32>, %wv: tensor<256x256xf32>) -> tensor<1x4x128x64xf32> {
  %q = tensor.matmul %x, %wq : (tensor<1x128x256xf32>, tensor<256x256xf32>) -> tensor<1x128x256xf32>
  %q1 = tensor.reshape %q {shape = [1, 128, 4, 64]} : (tensor<1x128x256xf32>) -> tensor<1x128x4x64xf32>
  %q2 = tensor.transpose %q1 {perm = [0, 2, 1, 3]} : (tensor<1x128x4x64xf32>) -> tensor<1x4x128x64xf32>
  %k = tensor.matmul %x, %wk : (tensor<1x128x256xf32>, tensor<256x256xf32>) -> tensor<1x128x256xf32>
  %k1 = tensor.reshape %k {shape = [1, 128, 4, 64]} : (tensor<1x128x256xf32>) -> tensor<1x128x4x64xf32>
  %k2 = tensor.transpose %k1 {perm = [0, 2, 1, 3]} : (tensor<1x128x4x64xf32>) -> tensor<1x4x128x64xf32>
  %v = tensor.matmul %x, %wv : (tensor<1x128x256xf32>, tensor<256x256xf32>) -> tensor<1x128x256xf32>
  %v1 = tensor.reshape %v {shape = [1, 128, 4, 64]} : (tensor<1x128x256xf32>) -> tensor<1x128x4x64xf32>
  %v2 = tensor.transpose %v1 {perm = [0, 2, 1, 3]} : (tensor<1x128x4x64xf32>) -> tensor<1x4x128x64xf32>
  %s = tensor.matmul %q2, %k2 {transpose_b = true} : (tensor<1x4x128x64xf32>, tensor<1x4x128x64xf32>) -> tensor<1x4x128x128xf32>
  %p = tensor.softmax %s {axis = -1} : (tensor<1x4x128x128xf32>) -> tensor<1x4x128x128xf32>
  %o = tensor.matmul %p, %v2 : (tensor<1x4x128x128xf32>, tensor<1x4x128x64xf32>) -> tensor<1x4x128x64xf32>
  func.return %o : tensor<1x4x128x64xf32>
}"#;

/// The three strategies on the paper's MatMul pair and a small attention block: (converts,
/// eliminated, fallback, boundary uploads).
#[test]
fn strategies_differ() {
    use fbc_transforms::global_layout::Strategy::*;
    let got: Vec<_> = [FbLayout, Reuse, Convert]
        .into_iter()
        .map(|s| {
            (
                s.name(),
                strategy_counts(MATMUL_FB, "mali", s),
                strategy_counts(SMALL_ATTENTION, "mali", s),
            )
        })
        .collect();
    insta::assert_debug_snapshot!("strategies", got);
    // Convert converts every R-Tile reader; reuse never converts; FBLayout eliminates the chains.
    let (fb, reuse, conv) = (&got[0], &got[1], &got[2]);
    assert_eq!(reuse.1 .0 + reuse.2 .0, 0);
    assert!(conv.1 .0 > fb.1 .0 && conv.2 .0 > fb.2 .0);
    assert_eq!(fb.2 .1, 6);
    assert_eq!(reuse.2 .2, 6);
    assert_eq!(conv.2 .2, 6);
}

fn tile_of(a: Option<&fbc_ir::Attr>) -> [u64; 2] {
    match a.map(Layout::from_attr) {
        Some(Ok(Layout::RTile(t))) => t.tile,
        other => panic!("not an R-Tile: {other:?}"),
    }
}

/// Sec. 4.4.2 moving a view: on adreno the search gives `%v2` (the V heads, a remap view of the
/// projection `%v`, 4 x 64 after rtile-select) the 64 x 64 tile of `%x`. The view follows: its
/// map moves whole 64 x 64 tiles (tile `(h, T_r, T_c)` of the heads is tile `(T_r, h)` of `%v`),
/// so the V projection writes `%v` in that tile and no conversion is left. Before, the remap
/// kept tile-propagate's 4 x 64 and `%v` was converted to it.
#[test]
fn a_view_follows_its_anchor_to_another_tile() {
    let p = fbc_target::builtin("adreno").unwrap();
    let mut stats = Statistics::default();
    let mut m = parse(ATTENTION);
    run_on(&mut m, fbc_transforms::pipeline_for_level(3), &p, &mut stats);
    assert_eq!(stats.get("global-layout", "retiled-views"), 1);
    assert_eq!(count(&m, "layout.convert"), 0);
    let a = assign_of(&m, "v2");
    assert_eq!(tile_of(m.op(a).attr("layout")), [64, 64]);
    let remap = m.defining_op(m.op(a).operands[0]).unwrap();
    assert_eq!(m.op(remap).name(), "layout.remap");
    assert_eq!(m.op(remap).attr("fbc.layout"), m.op(a).attr("layout"), "the view is the anchor's");
    assert_eq!(
        m.op(remap).attr("fbc.tile_map").map(ToString::to_string).as_deref(),
        Some("(d0, d1, tile_r, tile_c) -> (0, tile_r, d1)")
    );
    let v = m.defining_op(m.op(remap).operands[0]).unwrap();
    assert_eq!(tile_of(m.op(v).attr("fbc.layout")), [64, 64], "%v written in the view's tile");
    let rec = &stats.records["global-layout"]["functions"][0]["chains"][0];
    assert_eq!(rec["chosen_tile"], serde_json::json!([64, 64]));
    assert!(rec["cost_us"].as_f64().unwrap() < rec["own_layouts_cost_us"].as_f64().unwrap());
}

/// A group norm, SiLU, a grouped 3 × 3 convolution (4 channels into 4 a group), ReLU and a
/// second one: the convolution model (`layout::conv_model`) takes the direct kernel over
/// channel-packed texels on mali, where the skinny GEMM's 4 × 32 block is narrower than the
/// direct kernel's 4 × 256, and not on nvidia, where the direct kernel's 16 work-groups would
/// leave most of the 132 compute units idle.
const GROUPED_CONV: &str = r#"func.func @main(%x: tensor<2x32x16x16xf32>, %w: tensor<32x4x3x3xf32>, %b: tensor<32xf32>, %g: tensor<32xf32>, %w2: tensor<32x4x3x3xf32>) -> tensor<2x32x16x16xf32> {
  %n = tensor.group_norm %x, %g, %b {groups = 8} : (tensor<2x32x16x16xf32>, tensor<32xf32>, tensor<32xf32>) -> tensor<2x32x16x16xf32>
  %s = tensor.silu %n : (tensor<2x32x16x16xf32>) -> tensor<2x32x16x16xf32>
  %c = tensor.conv2d %s, %w, %b {groups = 8, padding = [1, 1]} : (tensor<2x32x16x16xf32>, tensor<32x4x3x3xf32>, tensor<32xf32>) -> tensor<2x32x16x16xf32>
  %r = tensor.relu %c : (tensor<2x32x16x16xf32>) -> tensor<2x32x16x16xf32>
  %e = tensor.conv2d %r, %w2 {groups = 8, padding = "same"} : (tensor<2x32x16x16xf32>, tensor<32x4x3x3xf32>) -> tensor<2x32x16x16xf32>
  func.return %e : tensor<2x32x16x16xf32>
}"#;

#[test]
fn convolution_inputs_go_channel_packed_where_the_model_says() {
    let packed = "#layout.rtile<tile = [16, 16], intra = \"rows\", inter = \"row-major\", horizontal = 3, pack = \"c\", pad = [0, 0], image = [16, 256], storage = \"image2d\">";
    let p = fbc_target::builtin("mali").unwrap();
    let mut stats = Statistics::default();
    let before = parse(GROUPED_CONV);
    let mut m = before.clone();
    run_on(&mut m, fbc_transforms::pipeline_for_level(3), &p, &mut stats);
    assert_eq!(stats.get("rtile-select", "channel-packed"), 2);
    // Their filters too: [32, 4, 3, 3] as one texel of 4 input channels per tap, 3 × 3 planes
    // of 32 filters stacked.
    assert_eq!(stats.get("rtile-select", "channel-packed-filters"), 2);
    let filters = "#layout.rtile<tile = [3, 3], intra = \"rows\", inter = \"row-major\", horizontal = 3, pack = \"c\", pad = [0, 0], image = [3, 96], storage = \"image2d\">";
    for name in ["w", "w2"] {
        let a = assign_of(&m, name);
        assert_eq!(m.op(a).attr("layout").map(ToString::to_string).as_deref(), Some(filters));
    }
    for name in ["s", "r"] {
        let a = assign_of(&m, name);
        assert_eq!(m.op(a).attr("layout").map(ToString::to_string).as_deref(), Some(packed));
        // Per convolution: 2·2·32·256·36 FLOPs at 256/144·85.6 GFLOP/s (skinny: 7.75 µs)
        // against 2048/1040·85.6 (direct: 7.00 µs).
        let saves = m.op(a).attr("fbc.direct_saves_us").and_then(fbc_ir::Attr::as_float);
        assert_eq!(saves, Some(0.75), "%{name}");
    }
    // The group norm and the convolution write the texels their readers want: no conversion.
    assert_eq!(count(&m, "layout.convert"), 0);
    let producer = |name: &str| {
        let v = m.op(assign_of(&m, name)).operands[0];
        m.op(m.defining_op(v).unwrap()).attr("fbc.layout").map(ToString::to_string)
    };
    assert_eq!(producer("s").as_deref(), Some(packed));
    assert_eq!(producer("r").as_deref(), Some(packed));
    let rec = &stats.records["rtile-select"]["channel_packed"];
    assert_eq!(rec.as_array().map(Vec::len), Some(2), "{rec}");
    assert_eq!(rec[0]["direct_saves_us"], serde_json::json!(0.75));
    assert_eq!(rec[0]["other_readers_us"], serde_json::json!(0.0));
    let nvidia = fbc_target::builtin("nvidia").unwrap();
    let mut stats = Statistics::default();
    let mut m = before.clone();
    run_on(&mut m, fbc_transforms::pipeline_for_level(3), &nvidia, &mut stats);
    assert_eq!(stats.get("rtile-select", "channel-packed"), 0);
    assert_eq!(count(&m, "layout.assign"), 0);
    let rec = &stats.records["rtile-select"]["channel_packed"];
    assert!(rec[0]["direct_saves_us"].as_f64().unwrap() < 0.0, "{rec}");
}

/// A one-layer Llama 3.2 LoRA training step (rank 8) at sequence 64, vocabulary 64.
fn llama_lora_step() -> Module {
    let opts = fbc_models::Options {
        layers: Some(1),
        seq: Some(64),
        vocab: Some(64),
        lora_rank: Some(8),
        training: true,
        ..Default::default()
    };
    fbc_models::build("llama3.2-1b", &opts).expect("fbc gen")
}

/// Tile invariance stops where the tile fits the result badly: in a LoRA training step the
/// rank-8 products `x·A` run in `x`'s tile (32 × 32 on nvidia for most), where a `[64, 8]`
/// result would be three quarters padding, and the backward's `dY·Bᵀ` (behind which
/// canonicalize sinks the LoRA scale) in `dY`'s, 64 × 4 for some; as images the skinny kernel
/// could not split them in one launch, so every product with a rank's columns keeps its own
/// preference, linear, and so does the scale fused into its epilogue; no R-Tile anywhere has
/// more padding columns than columns, and no backward scale of `dY` is left. The numbers are
/// the interpreter's before and after.
#[test]
fn a_result_the_primary_tile_overpads_keeps_its_own_layout() {
    let original = llama_lora_step();
    let mut m = original.clone();
    let p = fbc_target::builtin("nvidia").expect("nvidia");
    let mut stats = Statistics::default();
    run_on(&mut m, fbc_transforms::pipeline_for_level(3), &p, &mut stats);
    let (mut products, mut backward) = (0, 0);
    for o in m.all_ops() {
        let d = m.op(o);
        let Some(&r) = d.results.first() else { continue };
        let name = m.value(r).name.clone().unwrap_or_default();
        let layout = d.attr("fbc.layout").and_then(|a| Layout::from_attr(a).ok());
        let rank_product = name.ends_with("_xa") || name.ends_with("_xa_unscaled");
        if (d.name() == "tensor.matmul" || d.name() == "tensor.scale") && rank_product {
            products += usize::from(d.name() == "tensor.matmul");
            backward += usize::from(name.ends_with("_unscaled"));
            assert!(!matches!(layout, Some(Layout::RTile(_))), "%{name}: {layout:?}");
        }
        assert!(!(d.name() == "tensor.scale" && name.ends_with("_xab")), "%{name} is left");
        if let (Some(Layout::RTile(t)), fbc_ir::Type::Tensor(ty)) = (layout, m.value_type(r)) {
            let w = ty.shape.last().copied().unwrap_or(1);
            let padded = w.div_ceil(t.tile[1]) * t.tile[1];
            assert!(padded - w <= w, "%{name}: {ty} in {:?}", t.tile);
        }
    }
    // One per adapter: the backward's `dY·Bᵀ` read the scale of `dY` the autodiff wrote.
    let scales = original
        .all_ops()
        .filter(|&o| {
            let d = original.op(o);
            d.name() == "tensor.scale"
                && d.results.iter().any(|&r| {
                    original.value(r).name.as_deref().is_some_and(|n| n.ends_with("_xab"))
                })
        })
        .count();
    assert!(scales >= 6, "{scales} backward scales of dY");
    assert_eq!(backward, scales, "backward LoRA products `dY·Bᵀ` with their scale sunk");
    assert!(products >= 7, "{products} LoRA products `x·A`");
    let tol = fbc_runtime::interp::Tolerance { rtol: 1e-4, atol: 1e-5 };
    for f in ["loss", "loss_grad"] {
        fbc_runtime::interp::check_equivalent(&original, &m, f, 3, tol)
            .unwrap_or_else(|e| panic!("@{f}: {e}"));
    }
}

/// RoPE is elementwise over its operand with one rotated read along the head (FTI-C): in a
/// Llama training step it reads the head view of the Q/K projection in the projection's tile
/// and writes the tile of the attention products reading it, and its adjoint writes the tile
/// of the projections' weight gradients, so no conversion is left on either side of a rotation
/// (the linear rotation kernels took two each: four launches a layer forward, four backward).
/// Under every profile that tiles them, the rotations keep R-Tiles, and the numbers are the
/// interpreter's before and after.
#[test]
fn rotations_read_and_write_the_tiles_around_them() {
    let original = llama_lora_step();
    for profile in ["nvidia", "mali"] {
        let mut m = original.clone();
        let p = fbc_target::builtin(profile).expect("profile");
        let mut stats = Statistics::default();
        run_on(&mut m, fbc_transforms::pipeline_for_level(3), &p, &mut stats);
        let made_by = |v: fbc_ir::Value, names: &[&str]| {
            m.defining_op(v).is_some_and(|o| names.contains(&m.op(o).name()))
        };
        let ropes = ["tensor.rope", "tensor.rope_grad"];
        let mut tiled = 0;
        for o in m.all_ops() {
            let d = m.op(o);
            let Some(&x) = d.operands.first() else { continue };
            let name = m.value(x).name.clone();
            if d.def.is("layout.convert") {
                assert!(!made_by(x, &ropes), "{profile}: a conversion of {name:?}");
            }
            if ropes.contains(&d.name()) {
                let conv = made_by(x, &["layout.convert"]);
                assert!(!conv, "{profile}: {name:?} converted for its rotation");
                let layout = d.attr("fbc.layout").and_then(|a| Layout::from_attr(a).ok());
                tiled += usize::from(matches!(layout, Some(Layout::RTile(_))));
            }
        }
        // Q and K in `loss`, and in `loss_grad` forward and backward.
        assert_eq!(tiled, 6, "{profile}: rotations writing R-Tiles");
        let tol = fbc_runtime::interp::Tolerance { rtol: 1e-4, atol: 1e-5 };
        for f in ["loss", "loss_grad"] {
            fbc_runtime::interp::check_equivalent(&original, &m, f, 3, tol)
                .unwrap_or_else(|e| panic!("{profile} @{f}: {e}"));
        }
    }
}

//! The FBLayout passes end to end, from `.fbir` text: `fb-classify` (tags, refinements,
//! conflicts, the table), `rtile-candidates` (Alg. 1 counts after C1/C2/C3, checked by hand),
//! `rtile-select` (Eq. 2 on the paper's MatMul forward/backward pair, on Mali and Adreno), and
//! the Fig. 8 example of the physical mapping.

use std::sync::Arc;

use fbc_dialects::layout::{Intra, Layout, RTile};
use fbc_ir::pass::Statistics;
use fbc_ir::{print_module, Attr, Module, PassContext, PassManager, SourceFile, Value};
use fbc_transforms::layout::candidates::{self, CandidateInput};
use fbc_transforms::layout::perf_model::{path_blocks, Axis2, TensorDesc};
use fbc_transforms::layout::rtile::{candidate_input, read_candidates, select, selection_text};
use fbc_transforms::layout::{analysis, classification_table};

const MATMUL_FB: &str = include_str!("../../../examples/matmul_fb.fbir");
const LORA: &str = include_str!("../../../examples/lora_attention.fbir");

fn parse(text: &str) -> Module {
    let reg = fbc_dialects::registry();
    fbc_ir::parse_module(&Arc::new(SourceFile::new("t.fbir", text)), &reg)
        .unwrap_or_else(|d| panic!("{text}\n{d:?}"))
}

/// Runs `pipeline` with verification after every pass, on `target` (the pipeline's profile).
fn run_on(m: &mut Module, pipeline: &str, target: Option<&str>) -> Result<Statistics, String> {
    let reg = fbc_dialects::registry();
    let steps =
        fbc_transforms::default_registry().parse_pipeline(pipeline).map_err(|e| e.message)?;
    let mut pm = PassManager::new(steps);
    pm.instrumentation.verify_each = true;
    let profile = target.map(|t| fbc_target::builtin(t).unwrap());
    let mut cx = PassContext::new(&reg);
    if let Some(p) = &profile {
        cx.target = p;
    }
    pm.run(m, &mut cx, &mut |_| {}).map_err(|d| {
        d.iter().map(|d| format!("{} {:?}", d.message, d.notes)).collect::<Vec<_>>().join("\n")
    })?;
    Ok(cx.stats)
}

fn run(text: &str, pipeline: &str, target: Option<&str>) -> (Module, Statistics) {
    let mut m = parse(text);
    let stats = run_on(&mut m, pipeline, target).unwrap_or_else(|e| panic!("{pipeline}: {e}"));
    (m, stats)
}

fn arg(m: &Module, name: &str) -> Value {
    *m.funcs[0]
        .args
        .iter()
        .find(|&&a| m.value(a).name.as_deref() == Some(name))
        .unwrap_or_else(|| panic!("no %{name}"))
}

// ----- fb-classify -----

/// A hand-written training graph: forward `y = relu(x·w)`, backward `dw = xᵀ·dy`, `dx = dy·wᵀ`.
const TRAIN: &str = r#"module {
  func.func @f(%x: tensor<64x32xf32>, %w: tensor<32x16xf32>, %dy: tensor<64x16xf32>) -> (tensor<16x64xf32>, tensor<32x16xf32>, tensor<64x32xf32>) {
    %y = tensor.matmul %x, %w : (tensor<64x32xf32>, tensor<32x16xf32>) -> tensor<64x16xf32>
    %r = tensor.relu %y : (tensor<64x16xf32>) -> tensor<64x16xf32>
    %t = tensor.transpose %r {perm = [1, 0]} : (tensor<64x16xf32>) -> tensor<16x64xf32>
    %e = tensor.exp %t : (tensor<16x64xf32>) -> tensor<16x64xf32>
    %dw = tensor.matmul %x, %dy {fbc.backward, transpose_a = true} : (tensor<64x32xf32>, tensor<64x16xf32>) -> tensor<32x16xf32>
    %dx = tensor.matmul %dy, %w {fbc.backward, transpose_b = true} : (tensor<64x16xf32>, tensor<32x16xf32>) -> tensor<64x32xf32>
    func.return %e, %dw, %dx : (tensor<16x64xf32>, tensor<32x16xf32>, tensor<64x32xf32>) -> ()
  }
}
"#;

#[test]
fn classify_tags_refines_and_marks_conflicts() {
    let (m, stats) = run(TRAIN, "fb-classify", None);
    let class = |i: usize| {
        let o = m.op(m.funcs[0].body[i]);
        o.attr("fbc.class").and_then(Attr::as_str).map(str::to_string)
    };
    assert_eq!(class(0).as_deref(), Some("FTD-D"), "x and w are read by the backward");
    assert_eq!(class(1).as_deref(), Some("FTI-C"), "relu: the backward reads neither y nor r");
    assert_eq!(class(2).as_deref(), Some("FTI-C"), "the transpose feeds only exp");
    assert_eq!(class(3).as_deref(), Some("FTI-C"), "exp: the backward reads neither t nor e");
    assert_eq!(class(6), None, "func.return has no class");
    // x: forward reduces axis 1 (K), dw = xᵀ·dy reduces axis 0 (M); w: 0 then 1; dy: 0 then 1.
    assert_eq!(
        m.funcs[0].attr("fbc.conflict_args"),
        Some(&Attr::ints([0, 1, 2])),
        "{}",
        print_module(&m)
    );
    assert_eq!(stats.get("fb-classify", "conflicts"), 3);
    assert_eq!(stats.get("fb-classify", "refined"), 3, "relu, transpose, exp");
    assert_eq!(stats.get("fb-classify", "FTD-D"), 3);
    // Idempotent: a second run prints the same module.
    let mut again = m.clone();
    run_on(&mut again, "fb-classify", None).unwrap();
    assert_eq!(print_module(&again), print_module(&m));
    insta::assert_snapshot!("train_table", classification_table(&m));
}

#[test]
fn exp_refinement_needs_the_training_marks() {
    // Without `fbc.backward` anywhere the graph is taken as written: declared classes stand
    // (except the transpose feeding only elementwise ops).
    let plain = TRAIN.replace("fbc.backward, ", "");
    let (m, _) = run(&plain, "fb-classify", None);
    let class = |i: usize| m.op(m.funcs[0].body[i]).attr("fbc.class").cloned();
    assert_eq!(class(1), Some(Attr::Str("FTD-C".into())));
    assert_eq!(class(2), Some(Attr::Str("FTI-C".into())));
    // The conflicts do not depend on the marks.
    assert_eq!(m.funcs[0].attr("fbc.conflict_args"), Some(&Attr::ints([0, 1, 2])));
}

#[test]
fn reuse_marks_keep_forward_ops_dependent() {
    // `fbc.reuse` on the relu (its output kept for the backward) keeps it FTD-C.
    let marked = TRAIN.replace("%r = tensor.relu %y :", "%r = tensor.relu %y {fbc.reuse} :");
    let (m, _) = run(&marked, "fb-classify", None);
    assert_eq!(m.op(m.funcs[0].body[1]).attr("fbc.class"), Some(&Attr::Str("FTD-C".into())));
    // An argument listed in `fbc.reuse_args` counts as reused even with no backward reader.
    let text = r#"module {
  func.func @g(%x: tensor<4x4xf32>, %d: tensor<4x4xf32>) -> (tensor<4x4xf32>, tensor<4x4xf32>) attributes {fbc.reuse_args = [0]} {
    %s = tensor.softmax %x : (tensor<4x4xf32>) -> tensor<4x4xf32>
    %n = tensor.neg %d {fbc.backward} : (tensor<4x4xf32>) -> tensor<4x4xf32>
    func.return %s, %n : (tensor<4x4xf32>, tensor<4x4xf32>) -> ()
  }
}
"#;
    let (m, _) = run(text, "fb-classify", None);
    assert_eq!(m.op(m.funcs[0].body[0]).attr("fbc.class"), Some(&Attr::Str("FTD-C".into())));
    let without = text.replace(" attributes {fbc.reuse_args = [0]}", "");
    let (m, _) = run(&without, "fb-classify", None);
    assert_eq!(m.op(m.funcs[0].body[0]).attr("fbc.class"), Some(&Attr::Str("FTI-C".into())));
}

#[test]
fn conflicts_are_traced_through_transposes_and_assigns() {
    // x is reduced along axis 1 by the matmul, and along axis 0 through an explicit transpose
    // read by a reduction along its axis 1; the op result gets `fbc.conflict`.
    let text = r#"module {
  func.func @h(%a: tensor<8x16xf32>, %w: tensor<16x4xf32>) -> (tensor<8x4xf32>, tensor<16xf32>) {
    %x = tensor.relu %a : (tensor<8x16xf32>) -> tensor<8x16xf32>
    %xl = layout.assign %x {layout = #layout.linear} : (tensor<8x16xf32>) -> tensor<8x16xf32>
    %y = tensor.matmul %xl, %w : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
    %t = tensor.transpose %x {perm = [1, 0]} : (tensor<8x16xf32>) -> tensor<16x8xf32>
    %s = tensor.reduce_sum %t {axes = [1]} : (tensor<16x8xf32>) -> tensor<16xf32>
    func.return %y, %s : (tensor<8x4xf32>, tensor<16xf32>) -> ()
  }
}
"#;
    let (m, stats) = run(text, "fb-classify", None);
    let body = &m.funcs[0].body;
    assert_eq!(m.op(body[0]).attr("fbc.conflict"), Some(&Attr::Unit));
    assert_eq!(m.op(body[1]).attr("fbc.class"), None, "layout.assign has no class");
    assert_eq!(stats.get("fb-classify", "conflicts"), 1);
    let x = m.op(body[0]).results[0];
    let uses = analysis::reduction_uses(&m, x);
    let axes: Vec<Vec<usize>> = uses.iter().map(|u| u.axes.iter().copied().collect()).collect();
    assert_eq!(axes, [vec![1], vec![0]]);
}

#[test]
fn lora_attention_table() {
    let (m, stats) = run(LORA, "fb-classify", None);
    assert_eq!(stats.get("fb-classify", "conflicts"), 0, "a forward graph has none");
    insta::assert_snapshot!("lora_attention_table", classification_table(&m));
}

// ----- rtile-candidates -----

#[test]
fn candidate_counts_for_b_on_mali() {
    // B = tensor<2048x8192xf32> of matmul_fb: read by both matmuls, so H and W are both parallel
    // in some pass. By hand, on mali (sg 32, L1 16 KiB, 16-byte texels, 64-byte lines):
    // - pool: {4, 8, .., 256} per dimension (2048 and 8192 add no other divisors): 7 x 7 = 49;
    // - C1: both extents multiples of 32: {32, 64, 128, 256}² = 16 (their texel counts are
    //   multiples of 32 and tw is a multiple of 4);
    // - C2: th·tw/4 texels x 16 B ≤ 16384, i.e. th·tw ≤ 4096: (32, 32), (32, 64), (32, 128),
    //   (64, 32), (64, 64), (128, 32) = 6 (rows of 128..512 B are whole lines);
    // - C3: all divide 2048 and 8192: 6.
    let (m, stats) = run(MATMUL_FB, "rtile-candidates", Some("mali"));
    let b = arg(&m, "b");
    let input = candidate_input(&m, b).unwrap();
    assert_eq!(input.parallel, [true, true]);
    let p = fbc_target::builtin("mali").unwrap();
    let rep = candidates::generate(&p, &input, 0.1);
    assert_eq!(
        (rep.initial.len(), rep.after_c1.len(), rep.after_c2.len(), rep.after_c3.len()),
        (49, 16, 6, 6)
    );
    assert_eq!(rep.after_c3, [[32, 32], [32, 64], [32, 128], [64, 32], [64, 64], [128, 32]]);
    let recorded = read_candidates(&m, b).unwrap().unwrap();
    assert_eq!(recorded, rep.candidates);
    // The function records them for its argument 1.
    assert!(m.funcs[0].attr("fbc.rtile_candidates.arg1").is_some());
    // Five tensors: a, b, do (operands) and o, da (results).
    assert_eq!(stats.get("rtile-candidates", "tensors"), 5);
    let list: Vec<String> = recorded.iter().map(|t| t.to_attr().to_string()).collect();
    insta::assert_snapshot!("b_candidates_mali", list.join("\n"));
}

#[test]
fn candidate_counts_by_hand() {
    let mali = fbc_target::builtin("mali").unwrap();
    let adreno = fbc_target::builtin("adreno").unwrap();
    let counts = |p, parallel, shape: &[u64]| {
        let input =
            CandidateInput { shape: shape.to_vec(), elem_bytes: 4, parallel, consumers: vec![] };
        let r = candidates::generate(p, &input, 0.1);
        (r.initial.len(), r.after_c1.len(), r.after_c2.len(), r.after_c3.len())
    };
    // Only W parallel (a forward-only weight): th free (7), tw ∈ {32..256} (4): 28; C2
    // th·tw ≤ 4096 leaves 4+4+4+3+2+1+0 = 18.
    assert_eq!(counts(&mali, [false, true], &[2048, 8192]), (49, 28, 18, 18));
    // Adreno's 64-wide waves: {64, 128, 256}² = 9, and only 64 x 64 fits 16 KiB.
    assert_eq!(counts(&adreno, [true, true], &[2048, 8192]), (49, 9, 1, 1));
    // H = 40: pool {4, 5, 8, 10, 16, 20, 32, 40, 64, 128, 256}; C1 keeps th ∈ {32, 64, 128,
    // 256} x tw ∈ {32..256}; C2 the 6 of above; C3 pads 40 rows to 64 at least (60%): none.
    assert_eq!(counts(&mali, [true, true], &[40, 8192]), (77, 16, 6, 0));
    // With padding allowed up to 60%, the th = 32 and th = 64 ones come back.
    let input = CandidateInput {
        shape: vec![40, 8192],
        elem_bytes: 4,
        parallel: [true, true],
        consumers: vec![],
    };
    assert_eq!(candidates::generate(&mali, &input, 0.6).after_c3.len(), 5);
}

// ----- rtile-select -----

/// Runs classify, candidates and select on matmul_fb for `target`; returns the module and the
/// report of B's selection.
fn select_matmul_fb(target: &str) -> (Module, String) {
    let (before, _) = run(MATMUL_FB, "fb-classify,rtile-candidates", Some(target));
    let b = arg(&before, "b");
    let input = candidate_input(&before, b).unwrap();
    let cands = read_candidates(&before, b).unwrap().unwrap();
    let p = fbc_target::builtin(target).unwrap();
    let desc = TensorDesc { shape: input.shape.clone(), elem_bytes: 4 };
    let sel = select(&p, &desc, &input.consumers, &cands);
    let report = selection_text("%b", "tensor<2048x8192xf32>", &sel);
    let mut m = before;
    run_on(&mut m, "rtile-select", Some(target)).unwrap();
    (m, report)
}

/// The module printed without the candidate lists (snapshotted on their own), for snapshots.
fn print_without_candidates(m: &Module) -> String {
    let mut m = m.clone();
    for op in m.all_ops().collect::<Vec<_>>() {
        m.remove_attr(op, "fbc.rtile_candidates");
    }
    for f in &mut m.funcs {
        f.attrs.retain(|(k, _)| !k.starts_with("fbc.rtile_candidates"));
    }
    print_module(&m)
}

/// B is read through one `layout.assign` by both matmuls.
fn unified_layout_of_b(m: &Module) -> RTile {
    let b = arg(m, "b");
    let uses = &m.value(b).uses;
    assert_eq!(uses.len(), 1, "{}", print_module(m));
    let assign = m.op(uses[0].op);
    assert!(assign.def.is("layout.assign"));
    let rt = assign.results[0];
    let readers: Vec<&str> = m.value(rt).uses.iter().map(|u| m.op(u.op).def.name).collect();
    assert_eq!(readers, ["tensor.matmul", "tensor.matmul"]);
    RTile::from_attr(assign.attr("layout").unwrap()).unwrap()
}

#[test]
fn matmul_fb_on_mali() {
    let (m, report) = select_matmul_fb("mali");
    let t = unified_layout_of_b(&m);
    // Eq. 2 on mali (hand-checked in perf_model's tests): forward (reduces K = H, parallel
    // t_p = tw) and backward (reduces N = W, t_p = th) are memory-bound at t_p/4 x 85.6 GFLOP/s
    // until the 2476 GFLOP/s peak (t_p ≥ 116); every aligned candidate has MemEfficiency 1.
    // 32 x 128 and 128 x 32 tie at 2476 + 684.8 = 3160.8; the first in (th, tw) order wins.
    assert_eq!(t.tile, [32, 128]);
    assert_eq!(t.intra, Intra::Block { bh: 4, bw: 32 });
    assert_eq!(t.horizontal, 1, "64 tiles along each axis: ties go to W");
    let assign = m.op(m.value(arg(&m, "b")).uses[0].op);
    assert_eq!(assign.attr("fbc.rtile_score"), Some(&Attr::Float(3160.8)));
    // Linear: 322.26 (forward) + 322.26 / 8 (backward, one texel column of eight used).
    assert_eq!(assign.attr("fbc.linear_score"), Some(&Attr::Float(362.54)));
    insta::assert_snapshot!(
        "matmul_fb_mali",
        format!("{report}\n{}", print_without_candidates(&m))
    );
}

#[test]
fn matmul_fb_on_adreno() {
    let (m, report) = select_matmul_fb("adreno");
    let t = unified_layout_of_b(&m);
    // Only 64 x 64 survives Alg. 1 on adreno; 16 texels wide = C_w: rows.
    assert_eq!((t.tile, t.intra), ([64, 64], Intra::Rows));
    insta::assert_snapshot!(
        "matmul_fb_adreno",
        format!("{report}\n{}", print_without_candidates(&m))
    );
}

#[test]
fn select_is_idempotent_and_generates_missing_candidates() {
    // Without rtile-candidates the select pass generates them itself: same result.
    let (direct, _) = run(MATMUL_FB, "rtile-select{target=mali}", None);
    let (m, _) = select_matmul_fb("mali");
    assert_eq!(unified_layout_of_b(&direct), unified_layout_of_b(&m));
    let mut again = m.clone();
    run_on(&mut again, "rtile-select{target=mali}", None).unwrap();
    assert_eq!(print_module(&again), print_module(&m));
    // The printed module parses back and verifies.
    let text = print_module(&m);
    assert_eq!(print_module(&parse(&text)), text);
}

/// `rtile-select{linear=false}`: a tensor whose candidates lose to linear in Eq. 2 gets the best
/// of them anyway (what `fbc calibrate` times R-Tile contractions with); the others are chosen
/// as before.
#[test]
fn without_linear_every_tensor_with_candidates_gets_its_best_r_tile() {
    // matmul_fb at 64 x 64 x 64 on nvidia: linear wins for some operands.
    let small = MATMUL_FB.replace("512x", "64x").replace("2048x", "64x").replace("x2048", "x64");
    let small = small.replace("x8192", "x64");
    let (free, s_free) = run(&small, "fb-classify,rtile-candidates,rtile-select", Some("nvidia"));
    let (forced, s_forced) =
        run(&small, "fb-classify,rtile-candidates,rtile-select{linear=false}", Some("nvidia"));
    let count =
        |s: &Statistics, k: &str| s.counters.get(&("rtile-select".into(), k.into())).copied();
    assert!(count(&s_free, "linear").unwrap_or(0) > 0, "linear wins somewhere at 64^3");
    assert_eq!(count(&s_forced, "linear"), None);
    assert_eq!(count(&s_forced, "rtile"), count(&s_forced, "tensors"));
    let p = fbc_target::builtin("nvidia").unwrap();
    for name in ["a", "b", "do"] {
        let (Some(before), Some(after)) = (
            m_assign(&free, name).map(|o| free.op(o).attr("layout").cloned()),
            m_assign(&forced, name).map(|o| forced.op(o).attr("layout").cloned()),
        ) else {
            // Linear in the free run: the forced run's choice is the best-scoring candidate.
            let (cands_m, _) = run(&small, "fb-classify,rtile-candidates", Some("nvidia"));
            let v = arg(&cands_m, name);
            let input = candidate_input(&cands_m, v).unwrap();
            let cands = read_candidates(&cands_m, v).unwrap().unwrap();
            let desc = TensorDesc { shape: input.shape.clone(), elem_bytes: 4 };
            let sel = select(&p, &desc, &input.consumers, &cands);
            assert_eq!(sel.best, 0, "{name}: linear won");
            let best = fbc_transforms::layout::rtile::best_rtile(&sel);
            let Layout::RTile(want) = sel.scored[best].layout else { panic!("{name}") };
            let op = m_assign(&forced, name).unwrap_or_else(|| panic!("%{name} forced"));
            let got = RTile::from_attr(forced.op(op).attr("layout").unwrap()).unwrap();
            assert_eq!(got, want, "{name}");
            assert!(
                sel.scored[best].total
                    >= sel.scored[1..].iter().map(|s| s.total).fold(0.0, f64::max)
            );
            continue;
        };
        assert_eq!(before, after, "{name}: an R-Tile that won stays");
    }
}

/// The `layout.assign` reading argument `%name`, if any.
fn m_assign(m: &Module, name: &str) -> Option<fbc_ir::Op> {
    m.value(arg(m, name)).uses.iter().map(|u| u.op).find(|&o| m.op(o).def.is("layout.assign"))
}

#[test]
fn pass_option_errors() {
    let mut m = parse(MATMUL_FB);
    let e = run_on(&mut m, "rtile-select{target=quantum}", None).unwrap_err();
    // The name is resolved when the pass is created, before anything runs.
    assert!(e.starts_with("cannot create pass `rtile-select`: unknown target `quantum`"), "{e}");
    let e = run_on(&mut m, "rtile-candidates{max-padding=-1}", None).unwrap_err();
    assert_eq!(e, "cannot create pass `rtile-candidates`: max-padding must be a finite number ≥ 0, found -1 []");
    // A malformed candidate list is reported at the tensor's definition.
    let text = MATMUL_FB.replace(
        "%o = tensor.matmul %a, %b :",
        "%o = tensor.matmul %a, %b {fbc.rtile_candidates = [#layout.rtile<tile = [0, 4], horizontal = 1>]} :",
    );
    let mut m = parse(&text);
    let e = run_on(&mut m, "rtile-select", None);
    // %o has no reduction consumer, so its record is never read: no error.
    assert!(e.is_ok(), "{e:?}");
    let text = MATMUL_FB.replace(
        "module @matmul_fb {\n  func.func @matmul_fb(%a: tensor<512x2048xf32>, %b: tensor<2048x8192xf32>, %do: tensor<512x8192xf32>) -> (tensor<512x8192xf32>, tensor<512x2048xf32>) {",
        "module @matmul_fb {\n  func.func @matmul_fb(%a: tensor<512x2048xf32>, %b: tensor<2048x8192xf32>, %do: tensor<512x8192xf32>) -> (tensor<512x8192xf32>, tensor<512x2048xf32>) attributes {fbc.rtile_candidates.arg1 = [#layout.linear]} {",
    );
    let mut m = parse(&text);
    let e = run_on(&mut m, "rtile-select", None).unwrap_err();
    assert_eq!(
        e,
        "rtile-select: an R-Tile candidate of %b: expected #layout.rtile<...>, found #layout.linear []"
    );
    // A candidate that does not fit the tensor is refused before it could reach the IR.
    let text = text.replace("[#layout.linear]", "[#layout.rtile<tile = [48, 48], horizontal = 1>]");
    let mut m = parse(&text);
    let e = run_on(&mut m, "rtile-select", None).unwrap_err();
    assert_eq!(
        e,
        "rtile-select: an R-Tile candidate of %b: `pad` of #layout.rtile must be [16, 16] for \
         tensor<2048x8192xf32> with tile [48, 48], found [0, 0] []"
    );
}

#[test]
fn printing_options_run() {
    // `print=true` only adds stderr output.
    let (a, _) =
        run(MATMUL_FB, "fb-classify{print=true},rtile-select{print=true target=mali}", None);
    let (b, _) = run(MATMUL_FB, "fb-classify,rtile-select{target=mali}", None);
    assert_eq!(print_module(&a), print_module(&b));
}

// ----- Fig. 8 -----

const FIG8: &str = r#"module {
  func.func @fig8(%x: tensor<8x16xf32>) -> tensor<REDUCEDxf32> {
    %s = tensor.reduce_sum %x {axes = [AXIS]} : (tensor<8x16xf32>) -> tensor<REDUCEDxf32>
    func.return %s : tensor<REDUCEDxf32>
  }
}
"#;

/// The R-Tile the physical mapping gives the [8, 16] tensor of Fig. 8 in 4 x 4 tiles when it
/// is reduced along `axis`, and the cache blocks one reduction path touches in it and in the
/// linear layout (on mali: 4 x 8-texel blocks).
fn fig8(axis: usize) -> (RTile, u64, u64) {
    let reduced = if axis == 0 { "16" } else { "8" };
    let text = FIG8.replace("AXIS", &axis.to_string()).replace("REDUCED", reduced);
    let m = parse(&text);
    let x = arg(&m, "x");
    let input = candidate_input(&m, x).unwrap();
    assert_eq!(input.consumers.len(), 1);
    let p = fbc_target::builtin("mali").unwrap();
    let t =
        candidates::physical_mapping(&p, &input.shape, input.elem_bytes, [4, 4], &input.consumers)
            .unwrap();
    // A path: one texel column (4 elements) when reducing Dim2 (H), one row when reducing Dim1.
    let (reduce, len) = if axis == 0 { (Axis2::H, 4) } else { (Axis2::W, 1) };
    let blocks = |l: &Layout| path_blocks(&p, &[8, 16], 4, l, reduce, 0, len).unwrap();
    (t, blocks(&Layout::RTile(t)), blocks(&Layout::Linear))
}

#[test]
fn fig8_keeps_the_reduction_horizontal() {
    // Reduce on Dim1 (axis 1): tiles are arranged along the width; the path is one texel row
    // across 4 tiles: 1 block, as in the linear layout.
    let (t, rtile, linear) = fig8(1);
    assert_eq!((t.horizontal, t.intra, t.image), (1, Intra::Rows, Some([4, 8])));
    assert_eq!((rtile, linear), (1, 1));
    // Reduce on Dim2 (axis 0): Dim2's tiles are placed side by side, so the path (two tiles
    // down Dim2) is a 4 x 2-texel Z inside one block; the linear layout walks 8 rows down: 2.
    let (t, rtile, linear) = fig8(0);
    assert_eq!((t.horizontal, t.intra, t.image), (0, Intra::Rows, Some([2, 16])));
    assert_eq!((rtile, linear), (1, 2));
}

//! Split-K in `lower-to-memory` (`split-k=auto|off|N`): which contractions split and into how
//! many chunks, the launches a split contraction becomes (a snapshot of the lowered IR), and
//! translation validation: the interpreter gives the same numbers before and after lowering
//! (tolerance `rtol = 1e-4`, `atol = 1e-5`, as `tests/lower.rs`) on edge shapes and on a LoRA
//! training graph at `-O0` and `-O3`.

mod common;

use fbc_ir::pass::Statistics;
use fbc_ir::{Module, PassContext, PassManager};

use common::*;

/// `@f(x: M×K, a: K×N) -> x·a`.
fn product(m: u64, k: u64, n: u64) -> String {
    format!(
        "func.func @f(%x: tensor<{m}x{k}xf32>, %a: tensor<{k}x{n}xf32>) -> tensor<{m}x{n}xf32> {{
  %y = tensor.matmul %x, %a : (tensor<{m}x{k}xf32>, tensor<{k}x{n}xf32>) -> tensor<{m}x{n}xf32>
  func.return %y : tensor<{m}x{n}xf32>
}}"
    )
}

/// `xᵀ·g` with `x: [k, m]`, `g: [k, n]`.
fn product_ta(k: u64, m: u64, n: u64) -> String {
    format!(
        "func.func @f(%x: tensor<{k}x{m}xf32>, %g: tensor<{k}x{n}xf32>) -> tensor<{m}x{n}xf32> {{
  %y = tensor.matmul %x, %g {{transpose_a = true}} : (tensor<{k}x{m}xf32>, tensor<{k}x{n}xf32>) -> tensor<{m}x{n}xf32>
  func.return %y : tensor<{m}x{n}xf32>
}}"
    )
}

/// A small LoRA product with a fused epilogue, `K = 10` split by 4: partial sums over four
/// chunks of 2, a tail of 2 into slot 4, and the sum of the five slots followed by the scale and
/// the residual add.
const SKINNY: &str = r#"func.func @lora(%x: tensor<3x10xf32>, %a: tensor<10x2xf32>, %r: tensor<3x2xf32>) -> tensor<3x2xf32> {
  %xa = tensor.matmul %x, %a : (tensor<3x10xf32>, tensor<10x2xf32>) -> tensor<3x2xf32>
  %s = tensor.scale %xa {factor = 2.0} : (tensor<3x2xf32>) -> tensor<3x2xf32>
  %y = tensor.add %s, %r : (tensor<3x2xf32>, tensor<3x2xf32>) -> tensor<3x2xf32>
  func.return %y : tensor<3x2xf32>
}"#;

#[test]
fn a_split_contraction_is_partial_sums_a_tail_and_their_sum() {
    let m = parse(SKINNY);
    let (after, st) = lowered(&m, "lower-to-memory{split-k=4}", "generic");
    assert_eq!(st.get("lower-to-memory", "split-k"), 1);
    insta::assert_snapshot!("split_k_lora_epilogue", fbc_ir::print_module(&after));
    let ks = kernels(&after);
    let summary: Vec<(String, String, Vec<u64>)> =
        ks.iter().map(|k| (k.name.clone(), k.source.clone(), k.domain.clone())).collect();
    assert_eq!(
        summary,
        [
            ("lora_matmul_y_partial".into(), "tensor.matmul[split-k 4]".into(), vec![4, 3, 2, 2]),
            ("lora_matmul_y_tail".into(), "tensor.matmul[split-k 4 tail]".into(), vec![3, 2, 2]),
            (
                "lora_matmul_y".into(),
                "tensor.matmul[split-k 4 sum]+tensor.scale+tensor.add".into(),
                vec![3, 2, 5]
            ),
        ]
    );
    same_numbers(&m, &after, "split-k=4");
    // Unsplit: one launch, and the same numbers.
    let (off, st) = lowered(&m, "lower-to-memory{split-k=off}", "generic");
    assert_eq!(st.get("lower-to-memory", "split-k"), 0);
    assert_eq!(kernels(&off).len(), 1);
    same_numbers(&m, &off, "split-k=off");
}

#[test]
fn a_chunk_count_dividing_k_needs_no_tail() {
    let m = parse(&product(3, 12, 2));
    let (after, _) = lowered(&m, "lower-to-memory{split-k=4}", "generic");
    let ks = kernels(&after);
    assert_eq!(ks.len(), 2);
    assert_eq!(ks[0].domain, vec![4, 3, 2, 3]);
    assert_eq!(ks[1].domain, vec![3, 2, 4]);
    let maps: Vec<String> = ks[0].maps.iter().map(ToString::to_string).collect();
    assert_eq!(
        maps,
        [
            "(d0, d1, d2, d3) -> (d1 * 12 + (d0 * 3 + d3))",
            "(d0, d1, d2, d3) -> ((d0 * 3 + d3) * 2 + d2)",
            "(d0, d1, d2, d3) -> (d0 * 6 + d1 * 2 + d2)"
        ]
    );
    same_numbers(&m, &after, "K = 12 by 4");
}

/// The shipped nvidia profile with split-K as separate launches (`skinny.one_launch_split` off).
fn nvidia_launches() -> fbc_target::HardwareProfile {
    let mut p = fbc_target::builtin("nvidia").expect("nvidia");
    p.skinny.one_launch_split = false;
    p
}

/// `m` after `pipeline` for profile `p`.
fn lowered_for(
    m: &Module,
    pipeline: &str,
    p: &fbc_target::HardwareProfile,
) -> (Module, Statistics) {
    let mut after = m.clone();
    let st = run_for(&mut after, pipeline, p);
    (after, st)
}

#[test]
fn auto_splits_skinny_products_and_leaves_square_ones() {
    // LoRA down x·A on nvidia (132 compute units): 4096 outputs with a side of 8 (the skinny
    // kernel, lanes along k: 32 work-groups of 128 outputs), K = 8192 → 8 chunks of 1024 (256
    // work-groups, at most two per compute unit).
    let nv = nvidia_launches();
    let m = parse(&product(512, 8192, 8));
    let (after, st) = lowered_for(&m, "lower-to-memory", &nv);
    assert_eq!(st.get("lower-to-memory", "split-k"), 1);
    let ks = kernels(&after);
    assert_eq!(ks[0].source, "tensor.matmul[split-k 8]");
    assert_eq!(ks[0].domain, vec![8, 512, 8, 1024]);
    assert_eq!(ks[1].source, "tensor.matmul[split-k 8 sum]");
    // Its weight gradient xᵀ·g (8192 × 8 outputs, K = 512): the wide operand's last index is the
    // wide side (lanes along it: 64 work-groups of 1024 outputs) → 4 chunks.
    let m = parse(&product_ta(512, 8192, 8));
    let (after, _) = lowered_for(&m, "lower-to-memory", &nv);
    assert_eq!(kernels(&after)[0].source, "tensor.matmul[split-k 4]");
    same_numbers(&m, &after, "xᵀ·g split");
    // A large product fills the device (2048×8192 outputs: 262144 work-items of 8 × 8): not
    // split, one launch.
    let m = parse(&product(2048, 512, 8192));
    let (after, st) = lowered(&m, "lower-to-memory", "nvidia");
    assert_eq!(st.get("lower-to-memory", "split-k"), 0);
    let ks = kernels(&after);
    assert_eq!(ks.len(), 1);
    assert_eq!(ks[0].source, "tensor.matmul");
    // Nor is any product with split-k=off, or one whose K is shorter than the chunk count.
    let m = parse(&product(512, 8192, 8));
    let (_, st) = lowered(&m, "lower-to-memory{split-k=off}", "nvidia");
    assert_eq!(st.get("lower-to-memory", "split-k"), 0);
    let m = parse(&product(4, 3, 5));
    let (after, st) = lowered(&m, "lower-to-memory{split-k=4}", "generic");
    assert_eq!(st.get("lower-to-memory", "split-k"), 0);
    assert_eq!(kernels(&after).len(), 1);
    same_numbers(&m, &after, "K < S");
}

/// A matrix-vector product x·W (1×512 · 512×2048, lanes along the 2048 columns: 16 work-groups
/// of 128) on nvidia: split by 8 (the shipped profile's chunks of at least 64); a profile
/// asking for chunks of 256 gets 2, one allowing chunks of 128 and eight groups per compute
/// unit 4 (the chunk length bounds it), one allowing chunks of 32 and four groups per compute
/// unit 16 (the groups bound it: 256 of at most 528); `matvec_groups_per_cu`, where set, bounds
/// it instead of `groups_per_cu` (16 groups per compute unit and 1 for matrix-vector products:
/// 8, 128 of at most 132); the same numbers each time. A product with 8 rows (1×4096 · 4096×2048
/// per row) splits by `groups_per_cu` alone.
#[test]
fn the_profile_sets_how_far_a_matrix_vector_product_splits() {
    let m = parse(&product(1, 512, 2048));
    let (after, _) = lowered_for(&m, "lower-to-memory", &nvidia_launches());
    assert_eq!(kernels(&after)[0].source, "tensor.matmul[split-k 8]");
    let mut p = nvidia_launches();
    let cases = [
        (2, None, 256, 2),
        (8, None, 128, 4),
        (4, None, 32, 16),
        (16, None, 32, 16),
        (16, Some(1), 32, 8),
        (1, None, 32, 8),
        (1, Some(4), 32, 16),
    ];
    for (groups, matvec_groups, min_k, want) in cases {
        p.skinny.groups_per_cu = groups;
        p.skinny.matvec_groups_per_cu = matvec_groups;
        p.skinny.matvec_min_k = min_k;
        let mut split = m.clone();
        run_for(&mut split, "lower-to-memory", &p);
        assert_eq!(kernels(&split)[0].source, format!("tensor.matmul[split-k {want}]"));
        same_numbers(&m, &split, &format!("x·W split by {want}"));
    }
    let rows = parse(&product(8, 4096, 2048));
    let split_with = |groups, matvec_groups| {
        let mut p = nvidia_launches();
        p.skinny.groups_per_cu = groups;
        p.skinny.matvec_groups_per_cu = matvec_groups;
        let mut split = rows.clone();
        run_for(&mut split, "lower-to-memory", &p);
        kernels(&split)[0].source.clone()
    };
    assert_eq!(split_with(1, None), "tensor.matmul[split-k 8]");
    assert_eq!(split_with(1, Some(16)), "tensor.matmul[split-k 8]");
    assert_eq!(split_with(16, None), "tensor.matmul[split-k 128]");
}

/// With the shipped nvidia profile (`skinny.one_launch_split`), a split the skinny kernel runs is
/// one launch over the whole reduction with the `split_k` hint (the OpenCL skinny kernel splits
/// it; the interpreter ignores it: the same numbers); a split whose chunks the tiled kernel would
/// run stays separate launches.
#[test]
fn skinny_splits_are_one_launch_with_a_hint() {
    let nv = fbc_target::builtin("nvidia").expect("nvidia");
    assert!(nv.skinny.one_launch_split);
    // x·A (lanes along k: 4 groups of 16 × 8 outputs, chunks of 128) and x·W (1 × 2048
    // outputs, lanes along the 2048, chunks of 64).
    for (text, s, k) in [(product(64, 1024, 8), 8, 1024), (product(1, 512, 2048), 8, 512)] {
        let m = parse(&text);
        let (after, st) = lowered_for(&m, "lower-to-memory", &nv);
        assert_eq!(st.get("lower-to-memory", "split-k"), 1);
        let ks = kernels(&after);
        assert_eq!(ks.len(), 1, "{text}");
        assert_eq!(ks[0].source, format!("tensor.matmul[split-k {s} in one launch]"));
        assert_eq!(ks[0].split, Some(s));
        assert_eq!(ks[0].domain.last(), Some(&k), "the whole reduction");
        let printed = fbc_ir::print_module(&after);
        assert!(printed.contains(&format!("split_k = {s}")), "{printed}");
        same_numbers(&m, &after, "one launch");
    }
    // xᵀ·g (8192 × 8 outputs, lanes along the 8192): chunks of 128, shorter than the skinny
    // kernel takes along the wide side (256): the partial sums run in the tiled kernel.
    let m = parse(&product_ta(512, 8192, 8));
    let (after, _) = lowered_for(&m, "lower-to-memory", &nv);
    let sources: Vec<String> = kernels(&after).iter().map(|k| k.source.clone()).collect();
    assert_eq!(sources, ["tensor.matmul[split-k 4]", "tensor.matmul[split-k 4 sum]"]);
}

#[test]
fn a_bad_split_k_option_is_refused() {
    let mut m = parse(&product(4, 3, 5));
    let reg = fbc_dialects::registry();
    let steps = fbc_transforms::default_registry()
        .parse_pipeline("lower-to-memory{split-k=1}")
        .expect("pipeline");
    let mut cx = PassContext::new(&reg);
    let Err(e) = PassManager::new(steps).run(&mut m, &mut cx, &mut |_| {}) else {
        panic!("split-k=1 accepted");
    };
    assert_eq!(
        e[0].message,
        "cannot create pass `lower-to-memory`: split-k must be `auto`, `off` or a number of \
         chunks ≥ 2, found `1`"
    );
}

/// Edge shapes, each split by 4 (`K` not a multiple of 4, `K < 4`, ranks 1 to 16, `M` or `N` = 1,
/// transposed operands, batches with broadcasting, an epilogue): same numbers as the graph.
#[test]
fn edge_shapes_keep_their_numbers() {
    let text = include_str!("split_k_edges.fbir");
    let m = parse(text);
    for s in ["3", "4", "16", "64"] {
        let (after, st) = lowered(&m, &format!("lower-to-memory{{split-k={s}}}"), "generic");
        let n: i64 = s.parse().unwrap();
        // A product splits by S when K ≥ S: y7 (K = 3) only by 3, y5 (K = 40) not by 64.
        let want = [70, 70, 70, 70, 40, 70, 3].iter().filter(|&&k| k >= n).count() as i64;
        assert_eq!(st.get("lower-to-memory", "split-k"), want, "split-k={s}");
        same_numbers(&m, &after, &format!("split-k={s}"));
    }
}

/// `fbc gen bert-large --layers 1 --training --lora-rank R` at sequence 2 (LoRA on Q, K, V and
/// the MLP; hidden 1024, the smallest generated model).
fn lora_step(rank: u64) -> Module {
    let opts = fbc_models::Options {
        layers: Some(1),
        seq: Some(2),
        batch: Some(1),
        lora_rank: Some(rank),
        training: true,
        ..Default::default()
    };
    fbc_models::build("bert-large", &opts).unwrap_or_else(|e| panic!("fbc gen bert-large: {e}"))
}

/// Translation validation on a LoRA training step (its rank-R products `x·A`, `dY·Bᵀ`,
/// `xᵀ·d(xA)`, ... split by 8): rank 1 unoptimised, rank 16 after `-O3` (R-Tile textures on
/// mali).
#[test]
fn a_lora_training_step_keeps_its_numbers_when_split() {
    let m = lora_step(1);
    let (after, st) = lowered(&m, "lower-to-memory{split-k=8},plan-memory", "mali");
    assert!(st.get("lower-to-memory", "split-k") >= 10, "{st:?}");
    same_numbers(&m, &after, "rank 1, -O0, split-k=8");
    let m = lora_step(16);
    let s = fbc_transforms::global_layout::Strategy::parse("fblayout").expect("strategy");
    let (opt, _) = lowered(&m, &fbc_transforms::pipeline(3, s), "mali");
    let (after, st) = lowered(&opt, "lower-to-memory{target=mali split-k=8},plan-memory", "mali");
    assert!(st.get("lower-to-memory", "split-k") >= 10, "{st:?}");
    same_numbers(&m, &after, "rank 16, -O3, split-k=8");
}

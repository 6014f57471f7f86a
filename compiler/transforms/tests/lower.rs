//! `lower-to-memory` and `plan-memory`: the lowered module computes what the tensor module
//! computes (the interpreter runs both on the same random inputs; tolerance `rtol = 1e-4`,
//! `atol = 1e-5`: matmuls and reductions may sum in another order than the reference's blocked
//! kernels), for every op of the tensor dialect (the round-trip corpus of `tests/ir/ops/` and
//! the backward helpers below), with and without fusion, unoptimised and after `-O3` with every
//! layout strategy, and on generated 1-layer training graphs; fusion, storage and planning
//! decisions are checked on small graphs.

mod common;

use std::sync::Arc;

use fbc_dialects::memory::{Iter, MemType};
use fbc_ir::pass::Statistics;
use fbc_ir::{Module, PassContext, PassManager, SourceFile};
use fbc_transforms::global_layout::Strategy;

use common::*;

/// Every op of the function bodies is a memory op or the return.
fn assert_memory_only(m: &Module) {
    for op in m.all_ops() {
        let name = m.op(op).name();
        assert!(name.starts_with("memory.") || name == "func.return", "{name} left after lowering");
    }
}

fn corpus(name: &str) -> String {
    let path = format!("{}/../../tests/ir/ops/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// `tests/ir/ops/shape.fbir` at a size the interpreter runs quickly, plus a reshape of a view
/// and a concat along an inner axis.
const SHAPES: &str = r#"
func.func @shape(%x: tensor<1x8x16xf32>, %y: tensor<4x1xf32>, %z: tensor<4x3xf32>) -> (tensor<1x2x8x8xf32>, tensor<4x6xf32>, tensor<1x2x8xf32>, tensor<8x1xf32>, tensor<16x8xf32>, tensor<4x5xf32>) {
  %0 = tensor.reshape %x {shape = [1, 8, 2, 8]} : (tensor<1x8x16xf32>) -> tensor<1x8x2x8xf32>
  %1 = tensor.transpose %0 {perm = [0, 2, 1, 3]} : (tensor<1x8x2x8xf32>) -> tensor<1x2x8x8xf32>
  %2 = tensor.broadcast %y {shape = [4, 6]} : (tensor<4x1xf32>) -> tensor<4x6xf32>
  %3 = tensor.slice %x {end = [1, 4, 10], start = [0, 2, 2]} : (tensor<1x8x16xf32>) -> tensor<1x2x8xf32>
  %4 = tensor.concat %y, %y {axis = 0} : (tensor<4x1xf32>, tensor<4x1xf32>) -> tensor<8x1xf32>
  %5 = tensor.transpose %x {perm = [0, 2, 1]} : (tensor<1x8x16xf32>) -> tensor<1x16x8xf32>
  %6 = tensor.reshape %5 {shape = [16, 8]} : (tensor<1x16x8xf32>) -> tensor<16x8xf32>
  %7 = tensor.concat %y, %z, %y {axis = 1} : (tensor<4x1xf32>, tensor<4x3xf32>, tensor<4x1xf32>) -> tensor<4x5xf32>
  func.return %1, %2, %3, %4, %6, %7 : (tensor<1x2x8x8xf32>, tensor<4x6xf32>, tensor<1x2x8xf32>, tensor<8x1xf32>, tensor<16x8xf32>, tensor<4x5xf32>) -> ()
}

func.func @update(%cache: tensor<2x3x7x4xf32>, %kv: tensor<2x3x2x4xf32>, %pos: tensor<i32>, %x: tensor<1x8x16xf32>) -> (tensor<2x3x7x4xf32>, tensor<2x3x7x4xf32>) {
  %c = tensor.update_slice %cache, %kv, %pos {axis = 2} : (tensor<2x3x7x4xf32>, tensor<2x3x2x4xf32>, tensor<i32>) -> tensor<2x3x7x4xf32>
  %e = tensor.exp %cache : (tensor<2x3x7x4xf32>) -> tensor<2x3x7x4xf32>
  func.return %c, %e : (tensor<2x3x7x4xf32>, tensor<2x3x7x4xf32>) -> ()
}
"#;

/// Every backward helper of the tensor dialect (the corpus has the forward ops).
const GRADS: &str = r#"
func.func @pointwise_grads(%x: tensor<3x5xf32>, %dy: tensor<3x5xf32>, %y: tensor<3x5xf32>) -> (tensor<3x5xf32>, tensor<3x5xf32>, tensor<3x5xf32>, tensor<3x5xf32>, tensor<3x5xf32>, tensor<3x5xf32>, tensor<3x5xf32>) {
  %a = tensor.gelu_grad %x, %dy : (tensor<3x5xf32>, tensor<3x5xf32>) -> tensor<3x5xf32>
  %b = tensor.gelu_grad %x, %dy {approximate = "tanh"} : (tensor<3x5xf32>, tensor<3x5xf32>) -> tensor<3x5xf32>
  %c = tensor.silu_grad %x, %dy : (tensor<3x5xf32>, tensor<3x5xf32>) -> tensor<3x5xf32>
  %d = tensor.sigmoid_grad %y, %dy : (tensor<3x5xf32>, tensor<3x5xf32>) -> tensor<3x5xf32>
  %e = tensor.tanh_grad %y, %dy : (tensor<3x5xf32>, tensor<3x5xf32>) -> tensor<3x5xf32>
  %f = tensor.relu_grad %x, %dy : (tensor<3x5xf32>, tensor<3x5xf32>) -> tensor<3x5xf32>
  %g = tensor.ge %x, %y : (tensor<3x5xf32>, tensor<3x5xf32>) -> tensor<3x5xf32>
  func.return %a, %b, %c, %d, %e, %f, %g : (tensor<3x5xf32>, tensor<3x5xf32>, tensor<3x5xf32>, tensor<3x5xf32>, tensor<3x5xf32>, tensor<3x5xf32>, tensor<3x5xf32>) -> ()
}

func.func @row_grads(%x: tensor<2x3x8xf32>, %dy: tensor<2x3x8xf32>, %g: tensor<8xf32>, %g3: tensor<3xf32>) -> (tensor<2x3x8xf32>, tensor<2x3x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<2x3x8xf32>, tensor<8xf32>, tensor<2x3x8xf32>, tensor<3xf32>, tensor<3xf32>) {
  %y = tensor.softmax %x {axis = 1} : (tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  %sg = tensor.softmax_grad %y, %dy {axis = 1} : (tensor<2x3x8xf32>, tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  %dx, %dg, %db = tensor.layernorm_grad %x, %g, %dy {eps = 1.0e-3} : (tensor<2x3x8xf32>, tensor<8xf32>, tensor<2x3x8xf32>) -> (tensor<2x3x8xf32>, tensor<8xf32>, tensor<8xf32>)
  %rx, %rg = tensor.rmsnorm_grad %x, %g, %dy : (tensor<2x3x8xf32>, tensor<8xf32>, tensor<2x3x8xf32>) -> (tensor<2x3x8xf32>, tensor<8xf32>)
  %mx, %mg, %mb = tensor.layernorm_grad %x, %g3, %dy {axis = 1} : (tensor<2x3x8xf32>, tensor<3xf32>, tensor<2x3x8xf32>) -> (tensor<2x3x8xf32>, tensor<3xf32>, tensor<3xf32>)
  func.return %sg, %dx, %dg, %db, %rx, %rg, %mx, %mg, %mb : (tensor<2x3x8xf32>, tensor<2x3x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<2x3x8xf32>, tensor<8xf32>, tensor<2x3x8xf32>, tensor<3xf32>, tensor<3xf32>) -> ()
}

func.func @nn_grads(%dy: tensor<2x4x6xf32>, %cos: tensor<4x6xf32>, %sin: tensor<4x6xf32>, %logits: tensor<5x7xf32>, %labels: tensor<5xi32>, %dloss: tensor<f32>, %ids: tensor<2x4xi32>) -> (tensor<2x4x6xf32>, tensor<5x7xf32>, tensor<9x6xf32>) {
  %r = tensor.rope_grad %dy, %cos, %sin : (tensor<2x4x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<2x4x6xf32>
  %c = tensor.cross_entropy_grad %logits, %labels, %dloss : (tensor<5x7xf32>, tensor<5xi32>, tensor<f32>) -> tensor<5x7xf32>
  %e = tensor.embedding_grad %ids, %dy {vocab = 9} : (tensor<2x4xi32>, tensor<2x4x6xf32>) -> tensor<9x6xf32>
  func.return %r, %c, %e : (tensor<2x4x6xf32>, tensor<5x7xf32>, tensor<9x6xf32>) -> ()
}

func.func @shape_grads(%x: tensor<2x3x4xf32>, %s: tensor<2x2xf32>) -> (tensor<3x1xf32>, tensor<4xf32>, tensor<3x5xf32>) {
  %u = tensor.unbroadcast %x {shape = [3, 1]} : (tensor<2x3x4xf32>) -> tensor<3x1xf32>
  %v = tensor.unbroadcast %x {shape = [4]} : (tensor<2x3x4xf32>) -> tensor<4xf32>
  %w = tensor.slice_grad %s {shape = [3, 5], start = [1, 2]} : (tensor<2x2xf32>) -> tensor<3x5xf32>
  func.return %u, %v, %w : (tensor<3x1xf32>, tensor<4xf32>, tensor<3x5xf32>) -> ()
}
"#;

/// Packed weights: a dequantize returned as it is (its own kernel), and one read by a matmul
/// with `transpose_b` (fused into the product's read of `b`).
const QUANT: &str = r#"
func.func @quant(%q8: tensor<3x5xi8>, %s8: tensor<3x2xf32>, %x: tensor<2x5xf32>, %q4: tensor<4x3xi8>, %s4: tensor<4x2xf32>) -> (tensor<3x5xf32>, tensor<2x4xf32>) {
  %w8 = tensor.dequantize %q8, %s8 {group = 3, scheme = "int8"} : (tensor<3x5xi8>, tensor<3x2xf32>) -> tensor<3x5xf32>
  %w4 = tensor.dequantize %q4, %s4 {cols = 5, group = 4, scheme = "int4"} : (tensor<4x3xi8>, tensor<4x2xf32>) -> tensor<4x5xf32>
  %y = tensor.matmul %x, %w4 {transpose_b = true} : (tensor<2x5xf32>, tensor<4x5xf32>) -> tensor<2x4xf32>
  func.return %w8, %y : (tensor<3x5xf32>, tensor<2x4xf32>) -> ()
}
"#;

fn every_op() -> Vec<(String, Module)> {
    let mut out: Vec<(String, Module)> =
        ["elementwise.fbir", "matmul.fbir", "nn.fbir", "reduce.fbir", "func.fbir", "conv.fbir"]
            .iter()
            .map(|f| (f.to_string(), parse(&corpus(f))))
            .collect();
    out.push(("shapes".into(), parse(SHAPES)));
    out.push(("grads".into(), parse(GRADS)));
    out.push(("quant".into(), parse(QUANT)));
    out
}

/// The op names a module uses.
fn op_names(m: &Module) -> std::collections::BTreeSet<&'static str> {
    m.all_ops().map(|o| m.op(o).name()).collect()
}

#[test]
fn every_tensor_op_keeps_its_numbers() {
    let cases = every_op();
    let mut seen = std::collections::BTreeSet::new();
    for (name, m) in &cases {
        seen.extend(op_names(m).into_iter().filter(|n| n.starts_with("tensor.")));
        for pipeline in ["lower-to-memory,plan-memory", "lower-to-memory{fuse=false},plan-memory"] {
            let (after, _) = lowered(m, pipeline, "generic");
            assert_memory_only(&after);
            same_numbers(m, &after, &format!("{name} with {pipeline}"));
        }
    }
    // The corpus covers the whole dialect (docs/ops.md: 50 tensor ops).
    let all: Vec<&str> = fbc_dialects::registry()
        .iter()
        .map(|d| d.name)
        .filter(|n| n.starts_with("tensor."))
        .collect();
    let missing: Vec<&&str> = all.iter().filter(|n| !seen.contains(**n)).collect();
    assert!(missing.is_empty(), "ops without a lowering test: {missing:?}");
    assert_eq!(all.len(), 61);
}

/// A padded, strided, grouped convolution with a bias is one contraction over `[N, O, OH, OW |
/// C/groups, KH, KW]`: the padding taps are a `select` on the domain indices that reads nothing
/// there, the group picks the input channels through `floordiv` (the storage maps split `O` into
/// group and member), the bias is the epilogue. A 1×1 convolution without padding is a plain
/// contraction.
#[test]
fn conv2d_is_one_contraction_with_its_padding_in_the_body() {
    let src = r#"func.func @f(%x: tensor<1x4x5x5xf32>, %w: tensor<6x2x3x3xf32>, %b: tensor<6xf32>, %w1: tensor<3x4x1x1xf32>) -> (tensor<1x6x3x3xf32>, tensor<1x3x5x5xf32>) {
  %y = tensor.conv2d %x, %w, %b {groups = 2, padding = [1, 1], stride = [2, 2]} : (tensor<1x4x5x5xf32>, tensor<6x2x3x3xf32>, tensor<6xf32>) -> tensor<1x6x3x3xf32>
  %z = tensor.conv2d %x, %w1 : (tensor<1x4x5x5xf32>, tensor<3x4x1x1xf32>) -> tensor<1x3x5x5xf32>
  func.return %y, %z : (tensor<1x6x3x3xf32>, tensor<1x3x5x5xf32>) -> ()
}"#;
    let m = parse(src);
    let (after, _) = lowered(&m, "lower-to-memory", "generic");
    let ks = kernels(&after);
    assert_eq!(ks.len(), 2);
    assert_eq!(ks[0].domain, vec![1, 2, 3, 3, 3, 2, 3, 3]);
    assert_eq!(
        ks[0].body.to_string(),
        "select(d3 * 2 + (d6 + -1) >= 0 && d3 * 2 + (d6 + -1) < 5 && d4 * 2 + (d7 + -1) >= 0 \
         && d4 * 2 + (d7 + -1) < 5, x0 * x1, 0.0)"
    );
    assert_eq!(ks[0].epilogue.as_ref().map(ToString::to_string).as_deref(), Some("acc + x2"));
    assert_eq!(
        ks[0].maps[0].to_string(),
        "(d0, d1, d2, d3, d4, d5, d6, d7) -> (d4 * 2 + d7 + ((d1 * 2 + d5) * 25 + (d3 * 2 + d6) * \
         5) + -6)"
    );
    assert_eq!(ks[1].domain, vec![1, 3, 5, 5, 4, 1, 1]);
    assert_eq!(ks[1].body.to_string(), "x0 * x1");
    same_numbers(&m, &after, "conv2d");
}

/// The convolutional ops read and write padded R-Tile images: the convolutions through their
/// guards (the padding taps' `select` keeps the reads off the image's padding), group norm as
/// moments into temporaries and an elementwise kernel (a row kernel writes only buffers),
/// upsampling as a copy; the backward ops read images.
#[test]
fn convolutional_ops_on_images() {
    let rt = "#layout.rtile<tile = [4, 4], horizontal = 3, pad = [2, 2]>";
    let rt0 = "#layout.rtile<tile = [4, 4], horizontal = 3, pad = [0, 0]>";
    let src = format!(
        r#"func.func @f(%x: tensor<1x4x6x6xf32>, %w: tensor<4x4x3x3xf32>, %g: tensor<4xf32>, %b: tensor<4xf32>) -> (tensor<1x4x6x6xf32>, tensor<1x4x12x12xf32>, tensor<1x4x6x6xf32>, tensor<4x4x3x3xf32>, tensor<1x4x6x6xf32>, tensor<4xf32>) {{
  %c = tensor.conv2d %x, %w, %b {{padding = "same", fbc.layout = {rt}}} : (tensor<1x4x6x6xf32>, tensor<4x4x3x3xf32>, tensor<4xf32>) -> tensor<1x4x6x6xf32>
  %n = tensor.group_norm %c, %g, %b {{groups = 2, fbc.layout = {rt}}} : (tensor<1x4x6x6xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<1x4x6x6xf32>
  %u = tensor.upsample %n {{fbc.layout = {rt0}}} : (tensor<1x4x6x6xf32>) -> tensor<1x4x12x12xf32>
  %i = tensor.conv2d_grad_input %n, %w {{padding = [1, 1], shape = [1, 4, 6, 6], fbc.layout = {rt}}} : (tensor<1x4x6x6xf32>, tensor<4x4x3x3xf32>) -> tensor<1x4x6x6xf32>
  %v = tensor.conv2d_grad_weight %c, %n {{padding = [1, 1], shape = [4, 4, 3, 3]}} : (tensor<1x4x6x6xf32>, tensor<1x4x6x6xf32>) -> tensor<4x4x3x3xf32>
  %dx, %dg, %db = tensor.group_norm_grad %c, %g, %n {{groups = 2}} : (tensor<1x4x6x6xf32>, tensor<4xf32>, tensor<1x4x6x6xf32>) -> (tensor<1x4x6x6xf32>, tensor<4xf32>, tensor<4xf32>)
  func.return %c, %u, %i, %v, %dx, %dg : (tensor<1x4x6x6xf32>, tensor<1x4x12x12xf32>, tensor<1x4x6x6xf32>, tensor<4x4x3x3xf32>, tensor<1x4x6x6xf32>, tensor<4xf32>) -> ()
}}"#
    );
    let m = parse(&src);
    for pipeline in ["lower-to-memory,plan-memory", "lower-to-memory{fuse=false},plan-memory"] {
        let (after, st) = lowered(&m, pipeline, "mali");
        assert_eq!(st.get("lower-to-memory", "images"), 4, "{pipeline}");
        let ks = kernels(&after);
        let conv = ks.iter().find(|k| k.source.starts_with("tensor.conv2d")).expect("conv2d");
        assert!(conv.guard.is_some(), "{pipeline}");
        same_numbers(&m, &after, pipeline);
    }
}

#[test]
fn every_tensor_op_after_o3_and_each_strategy() {
    for (name, m) in every_op() {
        for strategy in ["fblayout", "reuse", "convert"] {
            let s = fbc_transforms::global_layout::Strategy::parse(strategy).expect("strategy");
            let o3 = fbc_transforms::pipeline(3, s);
            let (opt, _) = lowered(&m, &o3, "mali");
            let (after, st) =
                lowered(&opt, &fbc_transforms::lowering_pipeline(Default::default()), "mali");
            assert_memory_only(&after);
            same_numbers(&m, &after, &format!("{name} at -O3 ({strategy})"));
            assert_eq!(st.get("lower-to-memory", "launches"), kernels(&after).len() as i64);
        }
    }
    // These graphs are too small for R-Tiles on mali: the generated-model tests below cover
    // images under every strategy.
}

#[test]
fn matmul_bias_gelu_is_one_kernel() {
    let src = r#"func.func @f(%x: tensor<4x8xf32>, %w: tensor<8x6xf32>, %b: tensor<6xf32>) -> tensor<4x6xf32> {
  %y = tensor.matmul %x, %w : (tensor<4x8xf32>, tensor<8x6xf32>) -> tensor<4x6xf32>
  %z = tensor.add %y, %b : (tensor<4x6xf32>, tensor<6xf32>) -> tensor<4x6xf32>
  %g = tensor.gelu %z : (tensor<4x6xf32>) -> tensor<4x6xf32>
  func.return %g : tensor<4x6xf32>
}"#;
    let m = parse(src);
    let (after, st) = lowered(&m, "lower-to-memory", "generic");
    let ks = kernels(&after);
    assert_eq!(ks.len(), 1);
    let k = &ks[0];
    assert_eq!(k.name, "f_matmul_g");
    assert_eq!(k.source, "tensor.matmul+tensor.add+tensor.gelu");
    assert_eq!(k.domain, vec![4, 6, 8]);
    assert_eq!(
        k.epilogue.as_ref().map(ToString::to_string).as_deref(),
        Some("0.5 * (acc + x2) * (1.0 + erf((acc + x2) * 0.7071067811865476))")
    );
    let maps: Vec<String> = k.maps.iter().map(ToString::to_string).collect();
    assert_eq!(
        maps,
        [
            "(d0, d1, d2) -> (d0 * 8 + d2)",
            "(d0, d1, d2) -> (d2 * 6 + d1)",
            "(d0, d1, d2) -> (d1)",
            "(d0, d1, d2) -> (d0 * 6 + d1)"
        ]
    );
    assert_eq!(st.get("lower-to-memory", "fused-ops"), 2);
    same_numbers(&m, &after, "fused");
    // Without fusion: three kernels, same numbers.
    let (plain, st) = lowered(&m, "lower-to-memory{fuse=false}", "generic");
    assert_eq!(kernels(&plain).len(), 3);
    assert_eq!(st.get("lower-to-memory", "fused-ops"), 0);
    same_numbers(&m, &plain, "unfused");
}

/// The statistics of a row kernel, as printed.
fn stats_of(k: &fbc_dialects::memory::Kernel) -> Vec<String> {
    k.stats.iter().map(ToString::to_string).collect()
}

/// Softmax along the middle axis is one row kernel over `[rows..., axis]`: per row its maximum,
/// the sum of `exp(x - max)`, then the row; the scale before it is read once per pass (fused),
/// not stored.
#[test]
fn softmax_is_one_row_kernel() {
    let src = r#"func.func @f(%x: tensor<3x5x4xf32>) -> tensor<3x5x4xf32> {
  %s = tensor.scale %x {factor = 0.5} : (tensor<3x5x4xf32>) -> tensor<3x5x4xf32>
  %y = tensor.softmax %s {axis = 1} : (tensor<3x5x4xf32>) -> tensor<3x5x4xf32>
  func.return %y : tensor<3x5x4xf32>
}"#;
    let m = parse(src);
    let (after, st) = lowered(&m, "lower-to-memory,plan-memory", "generic");
    let ks = kernels(&after);
    let names: Vec<&str> = ks.iter().map(|k| k.name.as_str()).collect();
    assert_eq!(names, ["f_softmax_y"]);
    let k = &ks[0];
    assert_eq!(k.domain, vec![3, 4, 5]);
    assert_eq!(k.iterators, [Iter::Parallel, Iter::Parallel, Iter::Row]);
    assert_eq!(k.maps[0].to_string(), "(d0, d1, d2) -> (d0 * 20 + d2 * 4 + d1)");
    assert_eq!(k.maps[1].to_string(), "(d0, d1, d2) -> (d0 * 20 + d2 * 4 + d1)");
    assert_eq!(stats_of(k), ["max: x0 * 0.5", "add: exp(x0 * 0.5 - s0)"]);
    assert_eq!(k.body.to_string(), "exp(x0 * 0.5 - s0) / s1");
    assert_eq!(k.source, "tensor.scale+tensor.softmax");
    assert_eq!(st.get("lower-to-memory", "fused-ops"), 1);
    same_numbers(&m, &after, "softmax");
    // Without fusion the scale is a launch of its own; the row kernel reads what it stored.
    let (plain, _) = lowered(&m, "lower-to-memory{fuse=false}", "generic");
    let ks = kernels(&plain);
    assert_eq!(ks.len(), 2);
    assert_eq!(stats_of(&ks[1]), ["max: x0", "add: exp(x0 - s0)"]);
    same_numbers(&m, &plain, "softmax unfused");
}

/// A pointwise op after a row kernel joins it: group norm then SiLU (the UNet's ResNet blocks)
/// is one row kernel whose body is the SiLU of the normalised element, so the normalised tensor
/// is never stored; a second reader of it keeps the two launches.
#[test]
fn group_norm_then_silu_is_one_row_kernel() {
    let src = r#"func.func @f(%x: tensor<2x8x3x3xf32>, %g: tensor<8xf32>, %b: tensor<8xf32>) -> tensor<2x8x3x3xf32> {
  %n = tensor.group_norm %x, %g, %b {groups = 4} : (tensor<2x8x3x3xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x8x3x3xf32>
  %y = tensor.silu %n : (tensor<2x8x3x3xf32>) -> tensor<2x8x3x3xf32>
  func.return %y : tensor<2x8x3x3xf32>
}"#;
    let m = parse(src);
    let (after, st) = lowered(&m, "lower-to-memory", "generic");
    let ks = kernels(&after);
    assert_eq!(ks.len(), 1, "{:?}", ks.iter().map(|k| &k.name).collect::<Vec<_>>());
    let k = &ks[0];
    assert_eq!(k.source, "tensor.group_norm+tensor.silu");
    assert!(k.iterators.contains(&Iter::Row), "{:?}", k.iterators);
    assert!(k.body.to_string().contains("sigmoid("), "{}", k.body);
    assert_eq!(st.get("lower-to-memory", "fused-ops"), 1);
    same_numbers(&m, &after, "group norm + silu");
    // The normalised tensor also returned: it is stored, and SiLU reads it.
    let two = src
        .replace("-> tensor<2x8x3x3xf32> {", "-> (tensor<2x8x3x3xf32>, tensor<2x8x3x3xf32>) {")
        .replace(
            "func.return %y : tensor<2x8x3x3xf32>",
            "func.return %y, %n : tensor<2x8x3x3xf32>, tensor<2x8x3x3xf32>",
        );
    let m2 = parse(&two);
    let (after2, st2) = lowered(&m2, "lower-to-memory", "generic");
    assert_eq!(kernels(&after2).len(), 2);
    assert_eq!(st2.get("lower-to-memory", "fused-ops"), 0);
    same_numbers(&m2, &after2, "group norm + silu, both returned");
}

/// Every row-wise op is one row kernel writing its result, with the statistics in the launch in
/// the order and association of the separate passes; the norms' gradients keep in temporaries
/// the statistics their weight gradients read too (the row kernel reads them there).
#[test]
fn row_wise_ops_are_row_kernels() {
    let src = r#"func.func @f(%x: tensor<2x3x8xf32>, %dy: tensor<2x3x8xf32>, %g: tensor<8xf32>, %b: tensor<8xf32>, %g3: tensor<3xf32>, %logits: tensor<5x7xf32>, %labels: tensor<5xi32>, %dloss: tensor<f32>) -> (tensor<2x3x8xf32>, tensor<2x3x8xf32>, tensor<2x3x8xf32>, tensor<2x3x8xf32>, tensor<2x3x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<2x3x8xf32>, tensor<8xf32>, tensor<5x7xf32>) {
  %ln = tensor.layernorm %x, %g3, %g3 {axis = 1, eps = 1.0e-3} : (tensor<2x3x8xf32>, tensor<3xf32>, tensor<3xf32>) -> tensor<2x3x8xf32>
  %rn = tensor.rmsnorm %x, %g : (tensor<2x3x8xf32>, tensor<8xf32>) -> tensor<2x3x8xf32>
  %sg = tensor.softmax_grad %x, %dy {axis = -1} : (tensor<2x3x8xf32>, tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  %ln2 = tensor.layernorm %x, %g, %b : (tensor<2x3x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x3x8xf32>
  %dx, %dg, %db = tensor.layernorm_grad %x, %g, %dy : (tensor<2x3x8xf32>, tensor<8xf32>, tensor<2x3x8xf32>) -> (tensor<2x3x8xf32>, tensor<8xf32>, tensor<8xf32>)
  %rx, %rg = tensor.rmsnorm_grad %x, %g, %dy : (tensor<2x3x8xf32>, tensor<8xf32>, tensor<2x3x8xf32>) -> (tensor<2x3x8xf32>, tensor<8xf32>)
  %c = tensor.cross_entropy_grad %logits, %labels, %dloss : (tensor<5x7xf32>, tensor<5xi32>, tensor<f32>) -> tensor<5x7xf32>
  func.return %ln, %rn, %sg, %ln2, %dx, %dg, %db, %rx, %rg, %c : (tensor<2x3x8xf32>, tensor<2x3x8xf32>, tensor<2x3x8xf32>, tensor<2x3x8xf32>, tensor<2x3x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<2x3x8xf32>, tensor<8xf32>, tensor<5x7xf32>) -> ()
}"#;
    let m = parse(src);
    let (after, _) = lowered(&m, "lower-to-memory,plan-memory", "generic");
    let rows: Vec<(String, Vec<String>, String)> =
        kernels(&after).iter().map(|k| (k.name.clone(), stats_of(k), k.body.to_string())).collect();
    let row = |name: &str, stats: &[&str], body: &str| {
        (
            name.to_string(),
            stats.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            body.to_string(),
        )
    };
    let mean = "acc / 8.0";
    let rstd = |n: &str, eps: &str| format!("1.0 / sqrt(acc / {n} + {eps})");
    assert_eq!(
        rows,
        [
            row(
                "f_layernorm_ln",
                &[
                    "add: x0; acc / 3.0",
                    &format!("add: (x0 - s0) * (x0 - s0); {}", rstd("3.0", "0.001"))
                ],
                "(x0 - s0) * s1 * x1 + x2",
            ),
            row(
                "f_rmsnorm_rn",
                &[&format!("add: x0 * x0; {}", rstd("8.0", "1.0e-5"))],
                "x0 * s0 * x1"
            ),
            row("f_softmax_grad_sg", &["add: x0 * x1"], "x1 * (x0 - s0)"),
            row(
                "f_layernorm_ln2",
                &[
                    &format!("add: x0; {mean}"),
                    &format!("add: (x0 - s0) * (x0 - s0); {}", rstd("8.0", "1.0e-5"))
                ],
                "(x0 - s0) * s1 * x1 + x2",
            ),
            row("f_layernorm_grad_dx_mean", &[], "x0"),
            row("f_layernorm_grad_dx_rstd", &[], "(x0 - x1) * (x0 - x1)"),
            row(
                "f_layernorm_grad_dx",
                &[
                    &format!("add: x0 * x1; {mean}"),
                    &format!("add: x0 * x1 * ((x2 - x3) * x4); {mean}")
                ],
                "x4 * (x0 * x1 - s0 - (x2 - x3) * x4 * s1)",
            ),
            row("f_layernorm_grad_dg", &[], "x0 * ((x1 - x2) * x3)"),
            row("f_layernorm_grad_db", &[], "x0"),
            row("f_rmsnorm_grad_rx_rstd", &[], "x0 * x0"),
            row(
                "f_rmsnorm_grad_rx",
                &[&format!("add: x0 * x1 * x2; {mean}")],
                "x3 * x0 * x1 - x2 * x3 * x3 * x3 * s0",
            ),
            row("f_rmsnorm_grad_rg", &[], "x0 * x1 * x2"),
            row(
                "f_cross_entropy_grad_c",
                &["max: x0", "add: exp(x0 - s0)"],
                "exp(x0 - (s0 + log(s1))) * (x1 / 5.0) - select(d1 == x2, x1 / 5.0, 0.0)",
            ),
        ]
    );
    same_numbers(&m, &after, "row kernels");
    // After -O3 and its layout decisions the numbers stay.
    let s = fbc_transforms::global_layout::Strategy::parse("fblayout").expect("strategy");
    let (opt, _) = lowered(&m, &fbc_transforms::pipeline(3, s), "mali");
    let (o3, _) = lowered(&opt, &fbc_transforms::lowering_pipeline(Default::default()), "mali");
    same_numbers(&m, &o3, "row kernels at -O3");
}

/// Cross-entropy and its gradient over the same logits share the row statistics: the gradient
/// reads the loss's row maximum and sum instead of computing them again (three passes over the
/// logits instead of five).
#[test]
fn cross_entropy_and_its_gradient_share_row_statistics() {
    let src = r#"func.func @f(%logits: tensor<5x7xf32>, %labels: tensor<5xi32>, %dloss: tensor<f32>) -> (tensor<f32>, tensor<5x7xf32>) {
  %l = tensor.cross_entropy %logits, %labels : (tensor<5x7xf32>, tensor<5xi32>) -> tensor<f32>
  %c = tensor.cross_entropy_grad %logits, %labels, %dloss : (tensor<5x7xf32>, tensor<5xi32>, tensor<f32>) -> tensor<5x7xf32>
  func.return %l, %c : (tensor<f32>, tensor<5x7xf32>) -> ()
}"#;
    let m = parse(src);
    let (after, _) = lowered(&m, "lower-to-memory,plan-memory", "generic");
    let ks = kernels(&after);
    let names: Vec<&str> = ks.iter().map(|k| k.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "f_cross_entropy_l_max",
            "f_cross_entropy_l_sum",
            "f_cross_entropy_l",
            "f_cross_entropy_grad_c"
        ]
    );
    assert!(ks[3].stats.is_empty());
    assert_eq!(
        ks[3].body.to_string(),
        "exp(x0 - (x1 + log(x2))) * (x3 / 5.0) - select(d1 == x4, x3 / 5.0, 0.0)"
    );
    same_numbers(&m, &after, "shared statistics");
}

/// `tensor.update_slice` writes into `dest`'s storage where nothing reads `dest` after it: one
/// launch over `update` whose output map adds the offset symbol along the axis (checked against
/// the offsets from which `update` fits); a chain of updates reuses the storage again. Where
/// `dest` is read later, or a fusion would move an earlier read of `dest` after the write, it is
/// copied instead (a launch over all of `dest`). The same numbers every time.
#[test]
fn update_slice_writes_in_place_where_dest_is_dead() {
    let src = r#"func.func @f(%cache: tensor<2x7x4xf32>, %kv: tensor<2x2x4xf32>, %kv2: tensor<2x3x4xf32>, %pos: tensor<i32>, %pos2: tensor<i32>) -> tensor<2x7x4xf32> {
  %c = tensor.update_slice %cache, %kv, %pos {axis = 1} : (tensor<2x7x4xf32>, tensor<2x2x4xf32>, tensor<i32>) -> tensor<2x7x4xf32>
  %d = tensor.update_slice %c, %kv2, %pos2 {axis = -2} : (tensor<2x7x4xf32>, tensor<2x3x4xf32>, tensor<i32>) -> tensor<2x7x4xf32>
  func.return %d : tensor<2x7x4xf32>
}"#;
    let m = parse(src);
    let (after, _) = lowered(&m, "lower-to-memory,plan-memory", "generic");
    let ks = kernels(&after);
    assert_eq!(ks.len(), 2);
    for (k, (n, hi, pos)) in ks.iter().zip([(2, 5, 3), (3, 4, 4)]) {
        assert_eq!(k.domain, vec![2, n, 4]);
        assert_eq!(k.symbols, vec![fbc_dialects::memory::Symbol { operand: 1, lo: 0, hi }]);
        assert_eq!(k.maps[2].to_string(), "(d0, d1, d2)[s0] -> (d0 * 28 + (d1 + s0) * 4 + d2)");
        assert_eq!(k.source, "tensor.update_slice [in place]");
        let launch = after.all_ops().find(|&o| {
            after.op(o).attr("kernel").and_then(fbc_ir::Attr::as_str) == Some(k.name.as_str())
        });
        let cache = after.op(launch.expect("launch")).operands[2];
        assert_eq!(after.value(cache).name.as_deref(), Some("cache_m"), "operand {pos}");
    }
    same_numbers(&m, &after, "in place");
    // `dest` read after the update: copied (a launch over all of it, no symbol).
    let read_after = src.replace(
        "  func.return %d : tensor<2x7x4xf32>",
        "  %s = tensor.add %d, %cache : (tensor<2x7x4xf32>, tensor<2x7x4xf32>) -> tensor<2x7x4xf32>
  func.return %s : tensor<2x7x4xf32>",
    );
    let m2 = parse(&read_after);
    let (after, _) = lowered(&m2, "lower-to-memory,plan-memory", "generic");
    let ks = kernels(&after);
    assert_eq!(ks[0].domain, vec![2, 7, 4], "the first update copies the cache");
    assert!(ks[0].symbols.is_empty());
    assert_eq!(ks[1].source, "tensor.update_slice [in place]", "the copy is then updated in place");
    same_numbers(&m2, &after, "copied");
    // An elementwise read of `dest` before the update, used after it: fusing it into its
    // reader would read the overwritten storage, so it stays a launch of its own.
    let before = src
        .replace(
            "  %c = tensor.update_slice",
            "  %e = tensor.exp %cache : (tensor<2x7x4xf32>) -> tensor<2x7x4xf32>
  %c = tensor.update_slice",
        )
        .replace(
            "  func.return %d : tensor<2x7x4xf32>",
            "  %s = tensor.add %d, %e : (tensor<2x7x4xf32>, tensor<2x7x4xf32>) -> tensor<2x7x4xf32>
  func.return %s : tensor<2x7x4xf32>",
        );
    let m3 = parse(&before);
    let (after, _) = lowered(&m3, "lower-to-memory,plan-memory", "generic");
    let sources: Vec<String> = kernels(&after).iter().map(|k| k.source.clone()).collect();
    assert_eq!(
        sources,
        [
            "tensor.exp",
            "tensor.update_slice [in place]",
            "tensor.update_slice [in place]",
            "tensor.add"
        ]
    );
    same_numbers(&m3, &after, "read before the update");
}

/// A row kernel writes an R-Tile image a texel at a time where each texel holds four
/// consecutive elements of a row and none is padding: its last dimension is the channel. A
/// padded image keeps the three passes (the texel-domain kernel guards the padding).
#[test]
fn row_kernels_write_whole_texels() {
    // Rows of 16, or of 12 (padded to 16: each row's last texel is padding).
    let src = |w: u64| {
        let pad = 16 - w;
        format!(
            r#"func.func @f(%x: tensor<8x{w}xf32>) -> tensor<8x{w}xf32> {{
  %y = tensor.softmax %x {{axis = -1, fbc.layout = #layout.rtile<tile = [4, 8], horizontal = 1, pad = [0, {pad}]>}} : (tensor<8x{w}xf32>) -> tensor<8x{w}xf32>
  func.return %y : tensor<8x{w}xf32>
}}"#
        )
    };
    let m = parse(&src(16));
    let (after, _) = lowered(&m, "lower-to-memory,plan-memory", "mali");
    let ks = kernels(&after);
    assert_eq!(ks.len(), 1);
    let k = &ks[0];
    assert_eq!(k.domain, vec![8, 4, 4]);
    assert_eq!(k.iterators, [Iter::Parallel, Iter::Row, Iter::Row]);
    assert_eq!(k.maps[1].results.len(), 3, "an image output");
    assert_eq!(k.maps[1].results[2].to_string(), "d2", "the channel is the last dimension");
    assert!(k.guard.is_none());
    same_numbers(&m, &after, "whole texels");
    let m = parse(&src(12));
    let (after, _) = lowered(&m, "lower-to-memory,plan-memory", "mali");
    let ks = kernels(&after);
    assert_eq!(ks.len(), 3, "padding: the statistics and the texel-domain kernel");
    assert!(ks.iter().all(|k| k.stats.is_empty()));
    same_numbers(&m, &after, "padded");
    // Padding rows only (6 rows in tiles of 4): texels of their own, not written; still one
    // row kernel, over the 6 real rows.
    let rows = r#"func.func @f(%x: tensor<6x16xf32>) -> tensor<6x16xf32> {
  %y = tensor.softmax %x {axis = -1, fbc.layout = #layout.rtile<tile = [4, 8], horizontal = 1, pad = [2, 0]>} : (tensor<6x16xf32>) -> tensor<6x16xf32>
  func.return %y : tensor<6x16xf32>
}"#;
    let m = parse(rows);
    let (after, _) = lowered(&m, "lower-to-memory,plan-memory", "mali");
    let ks = kernels(&after);
    assert_eq!(ks.len(), 1, "padding rows: one row kernel");
    assert_eq!(ks[0].domain, vec![6, 4, 4]);
    assert_eq!(ks[0].maps[1].results.len(), 3, "an image output");
    same_numbers(&m, &after, "padding rows");
}

/// A producer whose body reads its domain indices (RoPE's `j < D/2`) is inlined into its one
/// reader, the indices becoming the reader's map of it: read as it is, and transposed.
#[test]
fn a_producer_reading_its_indices_is_inlined() {
    let src = |out: &str, read: &str| {
        format!(
            r#"func.func @f(%x: tensor<2x4x8xf32>, %c: tensor<4x8xf32>, %s: tensor<4x8xf32>, %b: tensor<{out}xf32>) -> tensor<{out}xf32> {{
  %r = tensor.rope %x, %c, %s : (tensor<2x4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<2x4x8xf32>
  {read}
  func.return %y : tensor<{out}xf32>
}}"#
        )
    };
    let plain =
        "%y = tensor.add %r, %b : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>";
    // The last axis, whose index RoPE reads, becomes the reader's middle one.
    let transposed = "%t = tensor.transpose %r {perm = [0, 2, 1]} : (tensor<2x4x8xf32>) -> tensor<2x8x4xf32>\n  \
                      %y = tensor.mul %t, %b : (tensor<2x8x4xf32>, tensor<2x8x4xf32>) -> tensor<2x8x4xf32>";
    for (what, out, read, source) in [
        ("as it is", "2x4x8", plain, "tensor.rope+tensor.add"),
        ("transposed", "2x8x4", transposed, "tensor.rope+tensor.mul"),
    ] {
        let m = parse(&src(out, read));
        let (after, _) = lowered(&m, "lower-to-memory", "generic");
        let ks = kernels(&after);
        assert_eq!(ks.len(), 1, "{what}");
        assert_eq!(ks[0].source, source, "{what}");
        same_numbers(&m, &after, what);
    }
}

/// An R-Tile with padding written as an image: the kernel iterates over texels, reads through
/// the inverse map, and guards the padding.
#[test]
fn rtile_image_with_padding() {
    let src = r#"func.func @f(%x: tensor<6x10xf32>, %w: tensor<10x6xf32>) -> (tensor<6x6xf32>, tensor<6x6xf32>) {
  %y = tensor.matmul %x, %w {fbc.layout = #layout.rtile<tile = [4, 4], horizontal = 1, pad = [2, 2]>} : (tensor<6x10xf32>, tensor<10x6xf32>) -> tensor<6x6xf32>
  %z = tensor.exp %y : (tensor<6x6xf32>) -> tensor<6x6xf32>
  func.return %y, %z : (tensor<6x6xf32>, tensor<6x6xf32>) -> ()
}"#;
    let m = parse(src);
    let (after, st) = lowered(&m, "lower-to-memory,plan-memory", "mali");
    let ks = kernels(&after);
    let mm = ks.iter().find(|k| k.source == "tensor.matmul").expect("matmul kernel");
    // The image is 2 texels wide and 8 high; the domain is (y, x, c, k).
    assert_eq!(mm.domain, vec![8, 2, 4, 10]);
    let guard = mm.guard.as_ref().expect("padding is guarded");
    assert_eq!(guard.bounds, vec![6, 6]);
    assert_eq!(guard.map.to_string(), "(d0, d1, d2, d3) -> (d0, d1 * 4 + d2)");
    assert_eq!(st.get("lower-to-memory", "images"), 1);
    assert_eq!(st.get("lower-to-memory", "image-fallbacks"), 0);
    let exp = ks.iter().find(|k| k.source == "tensor.exp").expect("exp kernel");
    assert_eq!(exp.maps[0].results.len(), 3, "exp reads the image by texel");
    same_numbers(&m, &after, "rtile image");
    // A profile whose images are too small keeps the texel array in a buffer.
    let mut small = fbc_target::builtin("mali").expect("mali");
    small.image.max_height = 4;
    let mut buf = m.clone();
    let st = run_for(&mut buf, "lower-to-memory,plan-memory", &small);
    assert_eq!(st.get("lower-to-memory", "images"), 0);
    assert_eq!(st.get("lower-to-memory", "image-fallbacks"), 1, "the fallback is reported");
    let mm = kernels(&buf).into_iter().find(|k| k.source == "tensor.matmul").expect("matmul");
    assert_eq!(mm.domain, vec![6, 6, 10], "a buffer output keeps the logical domain");
    assert_eq!(mm.maps[2].results.len(), 1);
    same_numbers(&m, &buf, "rtile buffer");
}

/// Every kind of kernel writing a padded R-Tile image: domain indices in the body (rope), a
/// gather (embedding), several writers (concat), a non-identity output map (a keepdim
/// reduction), a row-wise op (softmax) and an elementwise op reading an image.
#[test]
fn image_outputs_of_every_kernel_kind() {
    let rt = "#layout.rtile<tile = [4, 4], horizontal = 1, pad = [PH, PW]>";
    let l = |ph: u64, pw: u64| rt.replace("PH", &ph.to_string()).replace("PW", &pw.to_string());
    let src = format!(
        r#"func.func @f(%x: tensor<2x6x6xf32>, %cos: tensor<6x6xf32>, %sin: tensor<6x6xf32>, %table: tensor<9x6xf32>, %ids: tensor<2x5xi32>, %y: tensor<6x3xf32>) -> (tensor<2x6x6xf32>, tensor<2x5x6xf32>, tensor<6x9xf32>, tensor<2x6x1xf32>, tensor<2x6x6xf32>) {{
  %r = tensor.rope %x, %cos, %sin {{fbc.layout = {a}}} : (tensor<2x6x6xf32>, tensor<6x6xf32>, tensor<6x6xf32>) -> tensor<2x6x6xf32>
  %e = tensor.embedding %table, %ids {{fbc.layout = {b}}} : (tensor<9x6xf32>, tensor<2x5xi32>) -> tensor<2x5x6xf32>
  %c = tensor.concat %cos, %y {{axis = 1, fbc.layout = {c}}} : (tensor<6x6xf32>, tensor<6x3xf32>) -> tensor<6x9xf32>
  %m = tensor.reduce_max %r {{axes = [2], keepdim = true, fbc.layout = {d}}} : (tensor<2x6x6xf32>) -> tensor<2x6x1xf32>
  %s = tensor.softmax %r {{fbc.layout = {a}}} : (tensor<2x6x6xf32>) -> tensor<2x6x6xf32>
  func.return %r, %e, %c, %m, %s : (tensor<2x6x6xf32>, tensor<2x5x6xf32>, tensor<6x9xf32>, tensor<2x6x1xf32>, tensor<2x6x6xf32>) -> ()
}}"#,
        a = l(2, 2),
        b = l(3, 2),
        c = l(2, 3),
        d = l(2, 3),
    );
    let m = parse(&src);
    for pipeline in ["lower-to-memory,plan-memory", "lower-to-memory{fuse=false},plan-memory"] {
        let (after, st) = lowered(&m, pipeline, "mali");
        assert_eq!(st.get("lower-to-memory", "images"), 5, "{pipeline}");
        // concat (two writers) and the keepdim reduction write linear temporaries, copied.
        assert_eq!(st.get("lower-to-memory", "copies"), 2, "{pipeline}");
        let ks = kernels(&after);
        let rope = ks.iter().find(|k| k.source == "tensor.rope").expect("rope");
        // The texels of a 2x(8x8) padded image, [16, 2, 4], with the 16 rows split into
        // (batch, tile row, row in tile) = (2, 2, 4) by the maps' div/mod.
        assert_eq!(rope.domain, vec![2, 2, 4, 2, 4], "texels of a 2x(8x8) padded image");
        assert!(rope.guard.is_some());
        same_numbers(&m, &after, pipeline);
    }
}

/// A rotation and its adjoint writing R-Tile images (heads of 16 values, tiles of 4 × 4): the
/// half test `j < 8` on the head dimension, written over the texel domain, is simplified like
/// the maps (no division or modulo left in the body), and the partner value is read outside any
/// `select` (times a sign), so that a kernel reads its texel once for four values.
#[test]
fn a_tiled_rotation_tests_its_half_without_division_and_reads_its_partner_unconditionally() {
    let rt = "#layout.rtile<tile = [4, 4], horizontal = 1>";
    let src = format!(
        r#"func.func @f(%x: tensor<2x8x16xf32>, %cos: tensor<8x16xf32>, %sin: tensor<8x16xf32>) -> (tensor<2x8x16xf32>, tensor<2x8x16xf32>) {{
  %r = tensor.rope %x, %cos, %sin {{fbc.layout = {rt}}} : (tensor<2x8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<2x8x16xf32>
  %g = tensor.rope_grad %r, %cos, %sin {{fbc.layout = {rt}}} : (tensor<2x8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<2x8x16xf32>
  func.return %r, %g : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> ()
}}"#
    );
    let m = parse(&src);
    let (after, _) = lowered(&m, "lower-to-memory{fuse=false},plan-memory", "mali");
    let ks = kernels(&after);
    let body = |source: &str| {
        let k = ks.iter().find(|k| k.source == source).unwrap_or_else(|| panic!("{source}"));
        (k.domain.clone(), k.body.to_string())
    };
    // The texels of 2 × (8 × 16) values, split by the maps into (head, tile row, texel
    // column, row in the tile, channel): the head dimension's index is 4 · column + channel.
    assert_eq!(
        body("tensor.rope"),
        (vec![2, 4, 4, 2, 4], "x0 * x1 + x3 * select(d1 * 4 + d4 < 8, -1.0, 1.0) * x2".to_string())
    );
    assert_eq!(
        body("tensor.rope_grad"),
        (vec![2, 4, 4, 2, 4], "x0 * x1 + x2 * x3 * select(d1 * 4 + d4 < 8, 1.0, -1.0)".to_string())
    );
    same_numbers(&m, &after, "tiled rotations");
}

/// Products concatenated (the row tiles of a tied LM head, heads written side by side): each
/// product stores its part of the concatenation through the copy's map, so no copy is left;
/// the offsets need not be whole texels (6 columns).
#[test]
fn products_write_their_part_of_a_concatenation() {
    let src = |layout: &str| {
        format!(
            r#"func.func @f(%x: tensor<16x32xf32>, %a: tensor<32x6xf32>, %b: tensor<32x20xf32>, %c: tensor<32x6xf32>) -> tensor<16x32xf32> {{
  %p = tensor.matmul %x, %a : (tensor<16x32xf32>, tensor<32x6xf32>) -> tensor<16x6xf32>
  %q = tensor.matmul %x, %b : (tensor<16x32xf32>, tensor<32x20xf32>) -> tensor<16x20xf32>
  %r = tensor.matmul %x, %c : (tensor<16x32xf32>, tensor<32x6xf32>) -> tensor<16x6xf32>
  %s = tensor.exp %r : (tensor<16x6xf32>) -> tensor<16x6xf32>
  %y = tensor.concat %p, %q, %s {{axis = 1{layout}}} : (tensor<16x6xf32>, tensor<16x20xf32>, tensor<16x6xf32>) -> tensor<16x32xf32>
  func.return %y : tensor<16x32xf32>
}}"#
        )
    };
    let image = ", fbc.layout = #layout.rtile<tile = [4, 4], horizontal = 1>";
    for (what, layout, target) in
        [("buffer", "", "generic"), ("image", image, "mali"), ("unfused", "", "generic")]
    {
        let m = parse(&src(layout));
        let pipeline = match what {
            "unfused" => "lower-to-memory{fuse=false},plan-memory",
            _ => "lower-to-memory,plan-memory",
        };
        let (after, st) = lowered(&m, pipeline, target);
        let ks = kernels(&after);
        let sources: Vec<&str> = ks.iter().map(|k| k.source.as_str()).collect();
        let fused = match what {
            "unfused" => vec![
                "tensor.matmul",
                "tensor.matmul",
                "tensor.matmul",
                "tensor.exp",
                "tensor.concat",
                "tensor.concat",
                "tensor.concat",
            ],
            // Several kernels write the concatenation, so an image of it is written through a
            // linear temporary and one conversion (as without fusion).
            "image" => vec![
                "tensor.matmul+tensor.concat",
                "tensor.matmul+tensor.concat",
                "tensor.matmul+tensor.exp+tensor.concat",
                "layout.convert",
            ],
            _ => vec![
                "tensor.matmul+tensor.concat",
                "tensor.matmul+tensor.concat",
                "tensor.matmul+tensor.exp+tensor.concat",
            ],
        };
        assert_eq!(sources, fused, "{what}");
        if what != "unfused" {
            // The third product's columns start at 26: its store is shifted by the copy's map.
            let out = ks[2].maps.last().expect("an output map").to_string();
            assert!(out.contains("26"), "{what}: {out}");
            assert_eq!(st.get("lower-to-memory", "images"), i64::from(what == "image"), "{what}");
        }
        same_numbers(&m, &after, what);
    }
}

/// A LoRA linear `x·W + s·(x·A)·B`: the rank-`r` product `(x·A)·B` sums `r` terms per element,
/// so at rank 8 it is inlined, unrolled, into the add that the base product takes as its
/// epilogue (two launches: `x·A`, then `x·W` adding the branch), and `(x·A)·B` is never stored;
/// at rank 32 (more than `MAX_UNROLLED_TERMS`) it stays a launch of its own.
#[test]
fn a_lora_branch_of_low_rank_is_summed_in_the_base_products_epilogue() {
    let src = |r: u64| {
        format!(
            r#"func.func @f(%x: tensor<16x32xf32>, %w: tensor<32x24xf32>, %a: tensor<32x{r}xf32>, %b: tensor<{r}x24xf32>) -> tensor<16x24xf32> {{
  %base = tensor.matmul %x, %w : (tensor<16x32xf32>, tensor<32x24xf32>) -> tensor<16x24xf32>
  %xa = tensor.matmul %x, %a : (tensor<16x32xf32>, tensor<32x{r}xf32>) -> tensor<16x{r}xf32>
  %lora = tensor.matmul %xa, %b : (tensor<16x{r}xf32>, tensor<{r}x24xf32>) -> tensor<16x24xf32>
  %scaled = tensor.scale %lora {{factor = 2.0}} : (tensor<16x24xf32>) -> tensor<16x24xf32>
  %y = tensor.add %base, %scaled : (tensor<16x24xf32>, tensor<16x24xf32>) -> tensor<16x24xf32>
  func.return %y : tensor<16x24xf32>
}}"#
        )
    };
    for (r, sources) in [
        (8, vec!["tensor.matmul", "tensor.matmul+tensor.scale+tensor.matmul+tensor.add"]),
        (32, vec!["tensor.matmul", "tensor.matmul+tensor.scale", "tensor.matmul+tensor.add"]),
    ] {
        let m = parse(&src(r));
        let (after, _) = lowered(&m, "lower-to-memory{split-k=off},plan-memory", "generic");
        let ks = kernels(&after);
        let got: Vec<&str> = ks.iter().map(|k| k.source.as_str()).collect();
        assert_eq!(got, sources, "rank {r}");
        if r == 8 {
            // Eight terms of `xa` (one row of it) and of `b` (one column) per output.
            let fused = &ks[1];
            assert_eq!(fused.maps.len(), 2 + 8 + 8 + 1, "rank {r}: {:?}", fused.maps);
        }
        same_numbers(&m, &after, &format!("rank {r}"));
    }
}

#[test]
fn attention_remap_chain_reads_through_one_map() {
    let src = std::fs::read_to_string(format!(
        "{}/../../tests/ir/passes/lower-attention.fbir",
        env!("CARGO_MANIFEST_DIR")
    ))
    .expect("lower-attention.fbir");
    let m = parse(&src);
    let (opt, _) = lowered(&m, fbc_transforms::pipeline_for_level(3), "mali");
    assert!(opt.all_ops().any(|o| opt.op(o).def.is("layout.remap")));
    let (after, st) = lowered(&opt, &fbc_transforms::lowering_pipeline(Default::default()), "mali");
    // No kernel copies a view: the remaps are read through.
    assert!(kernels(&after).iter().all(|k| !k.name.contains("copy")));
    assert_eq!(st.get("lower-to-memory", "copies"), 0);
    assert!(st.get("lower-to-memory", "divmod-after") < st.get("lower-to-memory", "divmod-before"));
    same_numbers(&m, &after, "attention");
}

/// The matmul of `examples/matmul_fb.fbir` at a small size, after `rtile-select` alone: the
/// R-Tile `%b`'s two readers want is assigned, but no pass made the upload write it, so the
/// assign is a conversion kernel (`source = "layout.assign"`); after `global-layout` the
/// argument is uploaded in it and nothing converts.
#[test]
fn an_assign_to_another_layout_is_a_conversion() {
    let src = r#"func.func @matmul_fb(%a: tensor<16x64xf32>, %b: tensor<64x128xf32>, %do: tensor<16x128xf32>) -> (tensor<16x128xf32>, tensor<16x64xf32>) {
  %o = tensor.matmul %a, %b : (tensor<16x64xf32>, tensor<64x128xf32>) -> tensor<16x128xf32>
  %da = tensor.matmul %do, %b {transpose_b = true} : (tensor<16x128xf32>, tensor<64x128xf32>) -> tensor<16x64xf32>
  func.return %o, %da : (tensor<16x128xf32>, tensor<16x64xf32>) -> ()
}"#;
    let m = parse(src);
    let (sel, _) = lowered(&m, "fb-classify,rtile-candidates,rtile-select", "mali");
    let assigns = sel.all_ops().filter(|&o| sel.op(o).def.is("layout.assign")).count();
    assert_eq!(assigns, 1);
    let (after, st) = lowered(&sel, &fbc_transforms::lowering_pipeline(Default::default()), "mali");
    assert_eq!(st.get("lower-to-memory", "converts"), 1);
    assert!(kernels(&after).iter().any(|k| k.source == "layout.assign"));
    same_numbers(&m, &after, "assign converted");
    let (global, _) = lowered(&sel, "global-layout", "mali");
    let (after, st) =
        lowered(&global, &fbc_transforms::lowering_pipeline(Default::default()), "mali");
    assert_eq!(st.get("lower-to-memory", "converts"), 0);
    assert!(st.get("lower-to-memory", "images") > 0);
    same_numbers(&m, &after, "uploaded in the R-Tile");
}

/// `fbc gen MODEL --layers 1 --training` with `opts`, as a module.
fn generate(model: &str, opts: fbc_models::Options) -> Module {
    let opts = fbc_models::Options { layers: Some(1), training: true, ..opts };
    fbc_models::build(model, &opts).unwrap_or_else(|e| panic!("fbc gen {model}: {e}"))
}

fn bytes_of(m: &Module) -> u64 {
    m.all_ops()
        .filter(|&o| m.op(o).def.is("memory.alloc"))
        .filter_map(|o| MemType::from_type(m.value_type(m.op(o).results[0])))
        .map(|t| t.bytes())
        .sum()
}

/// The smallest generated model (hidden 1024), at sequence 2: a 1-layer LoRA training graph.
fn bert() -> Module {
    let opts = fbc_models::Options {
        seq: Some(2),
        batch: Some(1),
        lora_rank: Some(2),
        ..Default::default()
    };
    generate("bert-large", opts)
}

#[test]
fn generated_model_unoptimised_keeps_its_numbers_and_reuses_memory() {
    let m = bert();
    let (after, st) = lowered(&m, "lower-to-memory,plan-memory", "mali");
    assert_memory_only(&after);
    same_numbers(&m, &after, "bert-large, no pass before lowering");
    let peak = st.get("plan-memory", "peak-bytes");
    let no_reuse = st.get("plan-memory", "peak-bytes-no-reuse");
    assert!(peak < no_reuse, "reuse saves nothing: {peak} vs {no_reuse}");
    assert!(st.get("plan-memory", "slots") < st.get("plan-memory", "allocations"));
    assert_eq!(u64::try_from(no_reuse).unwrap() - bytes_uploaded(&after), bytes_of(&after));
    assert!(st.get("lower-to-memory", "fused-ops") > 0);
}

/// `-O3` with `strategy`, then the lowering pipeline: same numbers as the unoptimised graph.
fn generated_model_at_o3(strategy: &str) -> Statistics {
    let m = bert();
    let s = fbc_transforms::global_layout::Strategy::parse(strategy).expect("strategy");
    let (opt, _) = lowered(&m, &fbc_transforms::pipeline(3, s), "mali");
    let (after, st) = lowered(&opt, &fbc_transforms::lowering_pipeline(Default::default()), "mali");
    assert_memory_only(&after);
    same_numbers(&m, &after, &format!("bert-large -O3 {strategy}"));
    assert!(st.get("plan-memory", "peak-bytes") < st.get("plan-memory", "peak-bytes-no-reuse"));
    st
}

#[test]
fn generated_model_at_o3_fblayout() {
    let st = generated_model_at_o3("fblayout");
    assert!(st.get("lower-to-memory", "images") > 0, "R-Tiles become images on mali");
}

#[test]
fn generated_model_at_o3_reuse() {
    let st = generated_model_at_o3("reuse");
    assert!(st.get("lower-to-memory", "images") > 0);
}

#[test]
fn generated_model_at_o3_convert() {
    let st = generated_model_at_o3("convert");
    // The baseline converts every R-Tile reader's operand from linear: conversion kernels.
    assert!(st.get("lower-to-memory", "converts") > 0);
    assert!(st.get("plan-memory", "convert-allocations") > 0);
}

fn bytes_uploaded(m: &Module) -> u64 {
    m.all_ops()
        .filter(|&o| m.op(o).def.is("memory.upload"))
        .filter_map(|o| MemType::from_type(m.value_type(m.op(o).results[0])))
        .map(|t| t.bytes())
        .sum()
}

#[test]
fn plan_memory_reuses_a_dead_buffer_and_deallocs_after_last_use() {
    let src = r#"func.func @f(%x: tensor<64xf32>) -> tensor<64xf32> {
  %a = tensor.exp %x : (tensor<64xf32>) -> tensor<64xf32>
  %s = tensor.reduce_sum %a {axes = [0], keepdim = true} : (tensor<64xf32>) -> tensor<1xf32>
  %b = tensor.sub %a, %s : (tensor<64xf32>, tensor<1xf32>) -> tensor<64xf32>
  %c = tensor.reduce_max %b {axes = [0], keepdim = true} : (tensor<64xf32>) -> tensor<1xf32>
  %d = tensor.mul %b, %c : (tensor<64xf32>, tensor<1xf32>) -> tensor<64xf32>
  func.return %d : tensor<64xf32>
}"#;
    let m = parse(src);
    let (after, st) = lowered(&m, "lower-to-memory{fuse=false},plan-memory", "generic");
    let text = fbc_ir::print_module(&after);
    // %a dies after %b is computed, so %d takes its slot.
    let slot = |name: &str| {
        let line =
            text.lines().find(|l| l.contains(&format!("%{name}_m = memory.alloc"))).expect(name);
        line.split("slot = ").nth(1).and_then(|s| s.split('}').next()).map(str::to_string)
    };
    assert_eq!(slot("a"), slot("d"));
    assert_ne!(slot("a"), slot("b"));
    assert_eq!(st.get("plan-memory", "allocations"), 5);
    // %c (4 bytes) takes %s's slot, %d takes %a's, %b the upload %x's (dead after the first
    // launch): 3 slots, as many bytes as are live at once (%a, %s and %b).
    assert_eq!(st.get("plan-memory", "slots"), 3);
    assert_eq!(st.get("plan-memory", "peak-bytes-no-reuse"), 256 + 256 * 3 + 4 * 2);
    assert_eq!(st.get("plan-memory", "peak-bytes"), 256 * 2 + 4);
    assert_eq!(st.get("plan-memory", "live-peak-bytes"), 256 * 2 + 4);
    assert_eq!(st.get("plan-memory", "slot-bound-bytes"), 256 * 2 + 4);
    let upload = text.lines().find(|l| l.contains("%x_m = memory.upload")).expect("upload");
    assert!(upload.contains(&format!("slot = {}}}", slot("b").expect("slot of %b"))), "{upload}");
    // Every storage value is deallocated once, after its last use.
    assert_eq!(st.get("plan-memory", "deallocs"), 6);
    let pos = |pat: &str| text.find(pat).unwrap_or_else(|| panic!("{pat}\n{text}"));
    assert!(pos("memory.dealloc %a_m") > pos("memory.launch %a_m, %s_m, %b_m"));
    same_numbers(&m, &after, "planned");
    // Planning twice gives the same module.
    let mut again = after.clone();
    run(&mut again, "plan-memory", "generic");
    assert_eq!(fbc_ir::print_module(&again), text);
}

/// Input the lowering cannot handle is a located error, not a panic.
#[test]
fn unsupported_input_is_a_located_error() {
    let cases = [
        (
            "func.func @h(%x: tensor<4xf32>) -> tensor<4xf16> {\n  %y = tensor.constant {value = 1.0} : () -> tensor<4xf16>\n  func.return %y : tensor<4xf16>\n}\n",
            "t.fbir:2:3: error: lower-to-memory: memory holds f32, i32 or i8 tensors, found tensor<4xf16>",
        ),
        (
            "func.func @r(%x: tensor<4xf32>) -> tensor<4xf32> {\n  %y = func.call %x {callee = @r} : (tensor<4xf32>) -> tensor<4xf32>\n  func.return %y : tensor<4xf32>\n}\n",
            "t.fbir:1:11: error: lower-to-memory: cannot inline the recursive call to @r",
        ),
    ];
    for (src, want) in cases {
        let file = Arc::new(SourceFile::new("t.fbir", src));
        let reg = fbc_dialects::registry();
        let mut m = fbc_ir::parse_module(&file, &reg).expect("parses");
        let steps = fbc_transforms::default_registry().parse_pipeline("lower-to-memory").unwrap();
        let mut cx = PassContext::new(&reg);
        let err = PassManager::new(steps).run(&mut m, &mut cx, &mut |_| {}).expect_err(src);
        let text = fbc_grammar::diag::render_all(&file, &err);
        assert!(text.starts_with(want), "{text}");
    }
}

/// Rows holding NaN or `+inf`: the lowered row maximum and log-sum-exp give what the reference
/// gives (NaN propagates through the maximum; log-sum-exp of a row with `+inf` is `+inf`).
#[test]
fn softmax_and_cross_entropy_of_rows_with_nan_and_inf() {
    use fbc_runtime::interp::{Interpreter, Value};
    use fbc_runtime::reference::Tensor;
    let m = parse(
        r#"
func.func @f(%x: tensor<3x4xf32>, %l: tensor<1xi32>, %r: tensor<1x4xf32>) -> (tensor<3x4xf32>, tensor<f32>) {
  %s = tensor.softmax %x {axis = -1} : (tensor<3x4xf32>) -> tensor<3x4xf32>
  %c = tensor.cross_entropy %r, %l : (tensor<1x4xf32>, tensor<1xi32>) -> tensor<f32>
  func.return %s, %c : (tensor<3x4xf32>, tensor<f32>) -> ()
}
"#,
    );
    let (nan, inf) = (f32::NAN, f32::INFINITY);
    let x = vec![1.0, 2.0, 3.0, 4.0, 1.0, nan, 3.0, 4.0, 1.0, inf, 3.0, 4.0];
    let case = |r: [f32; 4], label: i32| {
        vec![
            Value::F32(Tensor::new(vec![3, 4], x.clone()).unwrap()),
            Value::I32(Tensor::new(vec![1], vec![label]).unwrap()),
            Value::F32(Tensor::new(vec![1, 4], r.to_vec()).unwrap()),
        ]
    };
    let (after, _) = lowered(&m, "lower-to-memory", "generic");
    let bits = |v: &[Value]| -> Vec<Vec<u32>> {
        v.iter()
            .map(|v| {
                v.as_f32()
                    .expect("f32")
                    .data()
                    .iter()
                    .map(|x| if x.is_nan() { u32::MAX } else { x.to_bits() })
                    .collect()
            })
            .collect()
    };
    for (r, label, want) in [
        ([0.5, inf, 1.0, 2.0], 0, inf),
        ([0.5, inf, 1.0, 2.0], 1, nan),
        ([0.5, nan, 1.0, 2.0], 0, nan),
        (
            [0.5, 1.5, 1.0, 2.0],
            3,
            2.0 - (0.5f32.exp() + 1.5f32.exp() + 1.0f32.exp() + 2.0f32.exp()).ln(),
        ),
    ] {
        let want_ref = Interpreter::new(&m).run("f", case(r, label)).expect("reference");
        let got = Interpreter::new(&after).run("f", case(r, label)).expect("lowered");
        assert_eq!(bits(&got), bits(&want_ref), "row {r:?}, label {label}");
        let loss = want_ref[1].as_f32().unwrap().data()[0];
        let want = -want;
        assert!(
            (loss.is_nan() && want.is_nan())
                || (loss - want).abs() <= 1e-6 * want.abs().max(1.0)
                || loss == want,
            "loss {loss}, want {want}"
        );
        let s = bits(&want_ref)[0].clone();
        // Row 0 is finite, rows 1 (NaN) and 2 (+inf) are NaN.
        assert!(s[..4].iter().all(|&b| b != u32::MAX));
        assert!(s[4..].iter().all(|&b| b == u32::MAX), "{s:?}");
    }
}

/// A conversion between two layouts that place every element at the same offset (here
/// `#layout.linear` and an R-Tile stored as a texel array in a buffer, as the embedding table
/// at Llama's full vocabulary is) moves nothing: no launch, the download reads the input's
/// storage, the numbers are the input's; a real reordering keeps its kernel.
#[test]
fn a_conversion_between_layouts_that_place_alike_is_dropped() {
    let rt = |horizontal: u8, image: &str| {
        format!(
            "#layout.rtile<tile = [4, 4], intra = \"rows\", inter = \"row-major\", \
             horizontal = {horizontal}, pack = \"w\", pad = [0, 0], image = {image}, \
             storage = \"buffer\">"
        )
    };
    let module = |to: &str| {
        parse(&format!(
            "func.func @f(%x: tensor<64x8xf32>) -> tensor<64x8xf32> {{\n  \
             %y = layout.convert %x {{from = #layout.linear, to = {to}}} : (tensor<64x8xf32>) -> tensor<64x8xf32>\n  \
             func.return %y : (tensor<64x8xf32>) -> ()\n}}\n"
        ))
    };
    let same = module(&rt(1, "[2, 64]"));
    let (after, st) = lowered(&same, "lower-to-memory{target=mali},plan-memory", "mali");
    assert_eq!(st.get("lower-to-memory", "identity-copies"), 1);
    assert!(kernels(&after).is_empty(), "{}", fbc_ir::print_module(&after));
    assert_memory_only(&after);
    same_numbers(&same, &after, "identity conversion");
    // Rows along the image's width (axis 0 horizontal) transpose the elements: the kernel stays.
    let moved = module(&rt(0, "[16, 8]"));
    let (after, st) = lowered(&moved, "lower-to-memory{target=mali},plan-memory", "mali");
    assert_eq!(st.get("lower-to-memory", "identity-copies"), 0);
    assert_eq!(kernels(&after).len(), 1, "{}", fbc_ir::print_module(&after));
    same_numbers(&moved, &after, "reordering conversion");
}

/// Every `memory.upload` and `memory.download` of `m`: (whether its layout is linear, whether
/// its storage is a buffer of exactly the tensor's elements).
fn host_copies(m: &Module) -> Vec<(bool, bool)> {
    m.all_ops()
        .filter(|&o| m.op(o).def.is("memory.upload") || m.op(o).def.is("memory.download"))
        .map(|o| {
            let d = m.op(o);
            let (t, s) = if d.def.is("memory.upload") {
                (d.operands[0], d.results[0])
            } else {
                (d.results[0], d.operands[0])
            };
            let numel = m.value_type(t).as_tensor().and_then(|t| t.numel());
            let ty = MemType::from_type(m.value_type(s)).expect("storage");
            let linear = d.attr("layout").map(|a| a.to_string()) == Some("#layout.linear".into());
            (linear, !ty.is_image() && Some(ty.elems()) == numel)
        })
        .collect()
}

/// `linear-io=true`: an argument stored in an R-Tile image is uploaded as a row-major buffer and
/// placed by a kernel; a result stored in an R-Tile is copied into a row-major buffer for its
/// download; the numbers stay the same.
#[test]
fn linear_io_hands_row_major_arrays_to_the_host() {
    let src = r#"func.func @f(%x: tensor<6x10xf32>, %w: tensor<10x6xf32>) -> (tensor<6x6xf32>, tensor<6x10xf32>) attributes {fbc.arg_layouts = [#layout.rtile<tile = [4, 4], horizontal = 1, pad = [2, 2]>, #layout.linear]} {
  %y = tensor.matmul %x, %w {fbc.layout = #layout.rtile<tile = [4, 4], horizontal = 1, pad = [2, 2]>} : (tensor<6x10xf32>, tensor<10x6xf32>) -> tensor<6x6xf32>
  func.return %y, %x : (tensor<6x6xf32>, tensor<6x10xf32>) -> ()
}"#;
    let m = parse(src);
    let (plain, st) = lowered(&m, "lower-to-memory,plan-memory", "mali");
    assert_eq!(st.get("lower-to-memory", "linear-io-copies"), 0);
    assert!(host_copies(&plain).iter().any(|&(linear, _)| !linear), "the R-Tile is uploaded as is");
    let (after, st) = lowered(&m, "lower-to-memory{linear-io=true},plan-memory", "mali");
    assert_memory_only(&after);
    // The upload of `%x` is placed, the result `%y` and the returned argument are copied out.
    assert_eq!(st.get("lower-to-memory", "linear-io-copies"), 3);
    let copies = host_copies(&after);
    assert_eq!(copies.len(), 4, "two uploads, two downloads");
    assert!(copies.iter().all(|&c| c == (true, true)), "{copies:?}");
    assert!(st.get("lower-to-memory", "images") > 0, "kernels still read and write the images");
    same_numbers(&m, &after, "linear-io");
}

/// `linear-io=true` on a training graph at `-O3`: same numbers, only row-major host copies.
#[test]
fn linear_io_on_a_generated_model_at_o3() {
    let m = bert();
    let (opt, _) = lowered(&m, &fbc_transforms::pipeline(3, Strategy::FbLayout), "mali");
    let opts = fbc_transforms::LoweringOptions { linear_io: true, ..Default::default() };
    let (after, st) = lowered(&opt, &fbc_transforms::lowering_pipeline(opts), "mali");
    assert_memory_only(&after);
    assert!(st.get("lower-to-memory", "linear-io-copies") > 0);
    assert!(host_copies(&after).iter().all(|&c| c == (true, true)));
    same_numbers(&m, &after, "bert-large -O3 linear-io");
}

/// The f32 weight of a `tensor.dequantize` read by a matmul is never stored: at -O2 and through
/// the layout passes of -O3, on a target with images and on one without, the product's launch
/// reads the packed bytes (an i8 buffer) and the scales, and no storage holds the 64 × 96 f32
/// weight. The numbers are the tensor function's.
#[test]
fn dequantized_weights_are_never_stored() {
    let m = parse(
        r#"
func.func @linear(%x: tensor<8x96xf32>, %q: tensor<64x48xi8>, %s: tensor<64x3xf32>) -> tensor<8x64xf32> {
  %w = tensor.dequantize %q, %s {group = 32, scheme = "int4"} : (tensor<64x48xi8>, tensor<64x3xf32>) -> tensor<64x96xf32>
  %y = tensor.matmul %x, %w {transpose_b = true} : (tensor<8x96xf32>, tensor<64x96xf32>) -> tensor<8x64xf32>
  func.return %y : tensor<8x64xf32>
}
"#,
    );
    let o3 = "canonicalize,cse,fuse-attention,dce,fb-classify,rtile-candidates,rtile-select,\
              tile-propagate,index-elim,index-simplify,global-layout,dce,lower-to-memory,plan-memory";
    for (pipeline, target) in [
        ("lower-to-memory,plan-memory", "generic"),
        (o3, "mali"),
        (o3, "cpu"),
        ("lower-to-memory,plan-memory", "nvidia"),
    ] {
        let (after, _) = lowered(&m, pipeline, target);
        let what = format!("{pipeline} for {target}");
        let weight = 64 * 96;
        for o in after.all_ops() {
            for &r in &after.op(o).results {
                if let Some(t) = MemType::from_type(after.value_type(r)) {
                    assert!(
                        !(t.elems() >= weight && t.value_elem() == fbc_ir::ElemType::F32),
                        "{what}: storage {t} could hold the f32 weight\n{}",
                        fbc_ir::print_module(&after)
                    );
                }
            }
        }
        let ks = kernels(&after);
        let product: Vec<_> = ks.iter().filter(|k| k.source.contains("tensor.matmul")).collect();
        assert!(!product.is_empty(), "{what}");
        for k in &product {
            assert!(k.source.contains("tensor.dequantize"), "{what}: {}", k.source);
        }
        same_numbers(&m, &after, &what);
    }
}

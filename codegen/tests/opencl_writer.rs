//! The OpenCL C writer on small lowered modules: exact snapshots of the emitted source and
//! manifest, the tiled contraction's choice, and the errors for what it cannot write. Numeric
//! checks on a device are in the driver's `tests/opencl.rs`.

use std::sync::Arc;

use fbc_codegen::opencl::{substitute_kernel, Error, Manifest, Options, Step, Writer};
use fbc_ir::{Module, SourceFile};

fn parse(name: &str, text: &str) -> Module {
    let file = Arc::new(SourceFile::new(name.to_string(), text.to_string()));
    match fbc_ir::parse_module(&file, &fbc_dialects::registry()) {
        Ok(m) => m,
        Err(d) => panic!("{}", fbc_grammar::diag::render_all(&file, &d)),
    }
}

/// A linear matmul with an epilogue, an R-Tile image relu with a padding guard, and an embedding
/// gather through an explicit load from i32 ids.
const OPS: &str = r#"module @ops {
func.func @matmul(%a: tensor<4x8xf32>, %b: tensor<8x3xf32>) -> tensor<4x3xf32> {
  %ma = memory.upload %a {layout = #layout.linear} : (tensor<4x8xf32>) -> !memory.buffer<32, f32>
  %mb = memory.upload %b {layout = #layout.linear}
  %mc = memory.alloc {slot = 0} : () -> !memory.buffer<12, f32>
  memory.launch %ma, %mb, %mc {kernel = "matmul_c", source = "tensor.matmul", domain = [4, 3, 8], iterators = ["parallel", "parallel", "reduction"], maps = [(d0, d1, d2) -> (d0 * 8 + d2), (d0, d1, d2) -> (d2 * 3 + d1), (d0, d1, d2) -> (d0 * 3 + d1)], body = "x0 * x1", combine = "add", epilogue = "max(acc, 0.0) + -1.5e-3"} : (!memory.buffer<32, f32>, !memory.buffer<24, f32>, !memory.buffer<12, f32>) -> ()
  memory.dealloc %ma : (!memory.buffer<32, f32>) -> ()
  %c = memory.download %mc {layout = #layout.linear} : (!memory.buffer<12, f32>) -> tensor<4x3xf32>
  func.return %c : (tensor<4x3xf32>) -> ()
}

func.func @image(%x: tensor<6x6xf32>, %ids: tensor<3xi32>, %table: tensor<10x4xf32>) -> (tensor<6x6xf32>, tensor<3x4xf32>) {
  %i = memory.upload %x {layout = #layout.rtile<tile = [4, 4], horizontal = 1, pad = [2, 2]>}
  %o = memory.alloc : () -> !memory.image2d<2x8, f32>
  memory.launch %i, %o {kernel = "relu", source = "tensor.relu", domain = [8, 2, 4], iterators = ["parallel", "parallel", "parallel"], maps = [(d0, d1, d2) -> (d1, d0, d2), (d0, d1, d2) -> (d1, d0, d2)], body = "select(x0 > 0.0, x0, 0.0)", guard = (d0, d1, d2) -> (d0 mod 4 + (d0 floordiv 4) * 4, d1 * 4 + d2), guard_bounds = [6, 6]} : (!memory.image2d<[2, 8], f32>, !memory.image2d<[2, 8], f32>) -> ()
  %y = memory.download %o {layout = #layout.rtile<tile = [4, 4], horizontal = 1, pad = [2, 2]>} : (!memory.image2d<[2, 8], f32>) -> tensor<6x6xf32>
  %mi = memory.upload %ids {layout = #layout.linear}
  %mt = memory.upload %table {layout = #layout.linear}
  %me = memory.alloc : () -> !memory.buffer<12, f32>
  memory.launch %mi, %mt, %me {kernel = "embed", domain = [3, 4], iterators = ["parallel", "parallel"], maps = [(d0, d1) -> (d0), (d0, d1) -> (0), (d0, d1) -> (d0 * 4 + d1)], body = "x1[x0 * 4 + d1]"} : (!memory.buffer<3, i32>, !memory.buffer<40, f32>, !memory.buffer<12, f32>) -> ()
  %e = memory.download %me {layout = #layout.linear} : (!memory.buffer<12, f32>) -> tensor<3x4xf32>
  func.return %y, %e : (tensor<6x6xf32>, tensor<3x4xf32>) -> ()
}
}
"#;

#[test]
fn small_module_source_and_manifest() {
    let out = Writer::new(Options::default()).write(&parse("ops.fbir", OPS)).expect("writes");
    insta::assert_snapshot!("ops_source", out.source);
    insta::assert_snapshot!("ops_manifest", out.manifest.to_json());
    // The manifest reads back, and it lists the steps in program order.
    let back = Manifest::from_json(&out.manifest.to_json()).expect("reads back");
    assert_eq!(back, out.manifest);
    let f = back.function("matmul").expect("@matmul");
    let ops: Vec<&str> = f
        .steps
        .iter()
        .map(|s| match s {
            Step::Alloc { .. } => "alloc",
            Step::Upload { .. } => "upload",
            Step::Launch(_) => "launch",
            Step::Download { .. } => "download",
            Step::Dealloc { .. } => "dealloc",
            Step::Fill { .. } => "fill",
            Step::Copy { .. } => "copy",
        })
        .collect();
    assert_eq!(ops, ["upload", "upload", "alloc", "launch", "dealloc", "download"]);
    // 4·3·8 points × (1 mul + 1 add) + 12 outputs × (max, add).
    assert_eq!(f.launches().next().map(|l| l.flops), Some(4 * 3 * 8 * 2 + 12 * 2));
    // (32 + 24 + 12) floats live at once.
    assert_eq!(f.peak_bytes, (32 + 24 + 12) * 4);
}

/// `C[b] = A[b] · B^T` over 2 batches, 48×40 by 24: big enough for the tiled kernel.
const BATCHED: &str = r#"func.func @bmm(%a: tensor<2x48x24xf32>, %b: tensor<40x24xf32>) -> tensor<2x48x40xf32> {
  %ma = memory.upload %a {layout = #layout.linear}
  %mb = memory.upload %b {layout = #layout.linear}
  %mc = memory.alloc : () -> !memory.buffer<3840, f32>
  memory.launch %ma, %mb, %mc {kernel = "bmm", source = "tensor.matmul", domain = [2, 48, 40, 24], iterators = ["parallel", "parallel", "parallel", "reduction"], maps = [(d0, d1, d2, d3) -> (d0 * 1152 + d1 * 24 + d3), (d0, d1, d2, d3) -> (d2 * 24 + d3), (d0, d1, d2, d3) -> (d0 * 1920 + d1 * 40 + d2)], body = "x1 * x0", combine = "add"} : (!memory.buffer<2304, f32>, !memory.buffer<960, f32>, !memory.buffer<3840, f32>) -> ()
  %c = memory.download %mc {layout = #layout.linear} : (!memory.buffer<3840, f32>) -> tensor<2x48x40xf32>
  func.return %c : (tensor<2x48x40xf32>) -> ()
}
"#;

#[test]
fn contractions_get_the_tiled_kernel_with_the_target_group() {
    let mali = fbc_target::builtin("mali").expect("mali profile");
    let opts = Options {
        kernels: fbc_codegen::opencl::KernelOptions::for_target(&mali),
        ..Options::default()
    };
    let out = Writer::new(opts).write(&parse("bmm.fbir", BATCHED)).expect("writes");
    insta::assert_snapshot!("bmm_tiled", &out.kernels[0].1);
    let l = out.manifest.functions[0].launches().next().cloned().expect("a launch");
    assert!(l.tiled);
    // Mali prefers 32×8 work-groups; 40 columns get 1 output per work-item along x (40 < 64),
    // the batch and the 48 rows flatten into 96 rows, 4 along y (96 >= 32): blocks of 32
    // columns × 32 rows, 2 × 3 of them.
    assert_eq!(l.local, Some(vec![32, 8, 1]));
    assert_eq!(l.global, vec![2 * 32, 3 * 8, 1]);
    // Without tiling: the plain kernel, one work-item per output.
    let mut plain = Options::default();
    plain.kernels.tiled = false;
    let out = Writer::new(plain).write(&parse("bmm.fbir", BATCHED)).expect("writes");
    let l = out.manifest.functions[0].launches().next().cloned().expect("a launch");
    assert!(!l.tiled);
    assert_eq!(l.global, vec![3840]);
}

#[test]
fn substituted_kernels_replace_one_kernel() {
    let out = Writer::new(Options::default()).write(&parse("ops.fbir", OPS)).expect("writes");
    let text = "__kernel void embed(__global const int* x0, __global const float* x1, __global float* x2) { x2[get_global_id(0)] = 1.0f; }\n";
    let src = substitute_kernel(&out, "embed", text).expect("substitutes");
    assert!(src.contains("// substituted kernel embed\n__kernel void embed("));
    assert!(src.contains("__kernel void relu("), "other kernels stay");
    assert_eq!(src.matches("void embed(").count(), 1);
    let e = substitute_kernel(&out, "nope", text).expect_err("no such kernel");
    assert!(e.contains("no kernel `nope`; the kernels are: matmul_c, relu, embed"), "{e}");
}

#[test]
fn tensor_ops_are_refused_with_their_location() {
    let text = "func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {\n  %y = tensor.neg %x\n  func.return %y : tensor<4xf32>\n}\n";
    let e = Writer::new(Options::default()).write(&parse("t.fbir", text)).expect_err("not lowered");
    let Error::Unsupported { op, location, reason } = &e else { panic!("{e:?}") };
    assert_eq!((op.as_str(), location.as_str()), ("tensor.neg", "t.fbir:2:3"));
    assert!(reason.contains("run lower-to-memory first"), "{reason}");
    let e = Writer::new(Options { function: Some("g".into()), ..Options::default() })
        .write(&parse("t.fbir", text))
        .expect_err("no @g");
    assert_eq!(e, Error::NoFunction("g".into()));
}

/// A store into an `f16` image rounds each channel to nearest even in the kernel
/// (`fbc_rte_half4`): `write_imagef` may round toward zero, the reference executor does not. The
/// tiled contraction into such an image does the same.
#[test]
fn stores_into_f16_images_round_to_nearest_even_first() {
    let text = r#"func.func @f(%a: tensor<768xf32>, %b: tensor<768xf32>) -> tensor<12xf32> {
  %ma = memory.upload %a {layout = #layout.linear} : (tensor<768xf32>) -> !memory.buffer<768, f32>
  %mb = memory.upload %b {layout = #layout.linear} : (tensor<768xf32>) -> !memory.buffer<768, f32>
  %i = memory.alloc : () -> !memory.image2d<[3, 1], f16>
  memory.launch %ma, %i {kernel = "to_half", source = "layout.convert", domain = [1, 3, 4], iterators = ["parallel", "parallel", "parallel"], maps = [(d0, d1, d2) -> (d1 * 4 + d2), (d0, d1, d2) -> (d1, d0, d2)], body = "x0"} : (!memory.buffer<768, f32>, !memory.image2d<[3, 1], f16>) -> ()
  %c = memory.alloc : () -> !memory.image2d<[8, 32], f16>
  memory.launch %ma, %mb, %c {kernel = "mm", source = "tensor.matmul", domain = [32, 8, 4, 24], iterators = ["parallel", "parallel", "parallel", "reduction"], maps = [(d0, d1, d2, d3) -> (d0 * 24 + d3), (d0, d1, d2, d3) -> (d3 * 32 + d1 * 4 + d2), (d0, d1, d2, d3) -> (d1, d0, d2)], body = "x0 * x1", combine = "add"} : (!memory.buffer<768, f32>, !memory.buffer<768, f32>, !memory.image2d<[8, 32], f16>) -> ()
  %o = memory.alloc : () -> !memory.buffer<12, f32>
  memory.launch %i, %o {kernel = "from_half", source = "layout.convert", domain = [3, 4], iterators = ["parallel", "parallel"], maps = [(d0, d1) -> (d0, 0, d1), (d0, d1) -> (d0 * 4 + d1)], body = "x0"} : (!memory.image2d<[3, 1], f16>, !memory.buffer<12, f32>) -> ()
  %y = memory.download %o {layout = #layout.linear} : (!memory.buffer<12, f32>) -> tensor<12xf32>
  func.return %y : tensor<12xf32>
}
"#;
    let out = Writer::new(Options::default()).write(&parse("half.fbir", text)).expect("writes");
    let src =
        |k: &str| out.kernels.iter().find(|(n, _)| n == k).map(|(_, s)| s.clone()).expect("kernel");
    let plain = src("to_half");
    assert!(
        plain.contains("write_imagef(x1, (int2)((int)d1, (int)d0), fbc_rte_half4((float4)("),
        "{plain}"
    );
    let tiled = src("mm");
    assert!(
        tiled.contains("reqd_work_group_size")
            && tiled.contains("fbc_rte_half4((float4)(acc0, acc1, acc2, acc3))"),
        "{tiled}"
    );
    assert!(!src("from_half").contains("fbc_rte_half4("), "reads need no rounding");
}

/// Two layers' worth of the same kernel (equal code, other names and places) and one that
/// differs in a constant: the source holds two kernels, both same-code launches run the first
/// one, whose comment names the other (snapshot), and the launches keep their own arguments.
#[test]
fn kernels_with_equal_code_are_emitted_once() {
    let text = r#"module @layers {
func.func @f(%x: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) {
  %mx = memory.upload %x {layout = #layout.linear} : (tensor<8xf32>) -> !memory.buffer<8, f32>
  %m0 = memory.alloc : () -> !memory.buffer<8, f32>
  memory.launch %mx, %m0 {kernel = "f_relu_l0", source = "tensor.relu", domain = [8], iterators = ["parallel"], maps = [(d0) -> (d0), (d0) -> (d0)], body = "max(x0, 0.0)"} : (!memory.buffer<8, f32>, !memory.buffer<8, f32>) -> ()
  %m1 = memory.alloc : () -> !memory.buffer<8, f32>
  memory.launch %m0, %m1 {kernel = "f_relu_l1", source = "tensor.relu", domain = [8], iterators = ["parallel"], maps = [(d0) -> (d0), (d0) -> (d0)], body = "max(x0, 0.0)"} : (!memory.buffer<8, f32>, !memory.buffer<8, f32>) -> ()
  %m2 = memory.alloc : () -> !memory.buffer<8, f32>
  memory.launch %m1, %m2 {kernel = "f_relu_l2", source = "tensor.relu", domain = [8], iterators = ["parallel"], maps = [(d0) -> (d0), (d0) -> (d0)], body = "max(x0, 1.0)"} : (!memory.buffer<8, f32>, !memory.buffer<8, f32>) -> ()
  %r0 = memory.download %m0 {layout = #layout.linear} : (!memory.buffer<8, f32>) -> tensor<8xf32>
  %r1 = memory.download %m1 {layout = #layout.linear} : (!memory.buffer<8, f32>) -> tensor<8xf32>
  %r2 = memory.download %m2 {layout = #layout.linear} : (!memory.buffer<8, f32>) -> tensor<8xf32>
  func.return %r0, %r1, %r2 : (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) -> ()
}
}
"#;
    let out = Writer::new(Options::default()).write(&parse("layers.fbir", text)).expect("writes");
    let names: Vec<&str> = out.kernels.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["f_relu_l0", "f_relu_l2"]);
    assert_eq!(out.source.matches("__kernel").count(), 2);
    let f = out.manifest.function("f").expect("@f");
    let launches: Vec<(&str, &[usize])> =
        f.launches().map(|l| (l.kernel.as_str(), l.args.as_slice())).collect();
    assert_eq!(launches.len(), 3);
    assert_eq!(
        (launches[0].0, launches[1].0, launches[2].0),
        ("f_relu_l0", "f_relu_l0", "f_relu_l2")
    );
    assert_ne!(launches[0].1, launches[1].1, "each launch keeps its own storage");
    insta::assert_snapshot!("dedup_kernel", out.kernels[0].1);
}

/// A kernel of `domain` writing `x1` at `map` from `x0` read at `(d0, ...) -> (0)`, as a module
/// (the storage is only typed: nothing is allocated to write OpenCL C).
fn copy_module(domain: &str, map: &str, elems: u64) -> String {
    let rank = domain.split(',').count();
    let dims: Vec<String> = (0..rank).map(|k| format!("d{k}")).collect();
    let dims = dims.join(", ");
    format!(
        r#"func.func @f(%x: tensor<1xf32>) -> tensor<{elems}xf32> {{
  %mx = memory.upload %x {{layout = #layout.linear}} : (tensor<1xf32>) -> !memory.buffer<1, f32>
  %my = memory.alloc : () -> !memory.buffer<{elems}, f32>
  memory.launch %mx, %my {{kernel = "k", domain = [{domain}], iterators = [{its}], maps = [({dims}) -> (0), ({dims}) -> ({map})], body = "x0 + 1.0"}} : (!memory.buffer<1, f32>, !memory.buffer<{elems}, f32>) -> ()
  %y = memory.download %my {{layout = #layout.linear}} : (!memory.buffer<{elems}, f32>) -> tensor<{elems}xf32>
  func.return %y : (tensor<{elems}xf32>) -> ()
}}
"#,
        its = vec!["\"parallel\""; rank].join(", ")
    )
}

/// Index arithmetic is `int` where every subexpression of every map is proven to fit in 32 bits
/// over the domain, and `long` with the reason in the kernel's comment where it is not: too many
/// work-items, a result past 2^31, or an intermediate past it whose result is small.
#[test]
fn index_arithmetic_is_32_bit_only_where_it_is_proven_to_fit() {
    let kernel = |domain: &str, map: &str, elems: u64| {
        let m = parse("index.fbir", &copy_module(domain, map, elems));
        let out = Writer::new(Options::default()).write(&m).expect("writes");
        out.kernels[0].1.clone()
    };
    let small = kernel("3, 5", "d0 * 5 + d1", 15);
    assert!(
        small.contains("  const int gid = get_global_id(0);\n  if (gid >= 15) return;"),
        "{small}"
    );
    assert!(small.contains("  const int d0 = gid / 5;\n  const int d1 = gid % 5;"), "{small}");
    assert!(small.contains("x1[((d0 * 5) + d1)] = "), "{small}");
    assert!(!small.contains("64-bit"), "{small}");
    // 2^31 - 1 is the largest offset `int` holds.
    let edge = kernel("2, 2", "d0 * 2147483646 + d1", 2147483648);
    assert!(edge.contains("const int d0 = gid / 2;"), "{edge}");
    let wide = [
        ("2, 2", "d0 * 2147483647 + d1", 2147483649, "the map of x1 may leave the 32-bit range"),
        ("4, 8", "(d0 * 1000000000) mod 7 + d1", 15, "the map of x1 may leave the 32-bit range"),
        ("3, 1073741824", "0", 1, "3221225472 parallel points exceed 2^30"),
    ];
    for (domain, map, elems, why) in wide {
        let src = kernel(domain, map, elems);
        assert!(src.contains(&format!("// 64-bit indices: {why}.\n")), "{domain} {map}: {src}");
        assert!(src.contains("  const long gid = get_global_id(0);"), "{domain} {map}: {src}");
        assert!(src.contains("  const long d0 = "), "{domain} {map}: {src}");
    }
}

/// `C = A · B` (`A` 64×K, `B` K×N, row-major buffers) into a buffer of `elems` elements at
/// offset `out` (a map over `d0` row, `d1` column).
fn product_module(k: u64, n: u64, out: &str, elems: u64) -> String {
    format!(
        r#"func.func @mm(%a: tensor<64x{k}xf32>, %b: tensor<{k}x{n}xf32>) -> tensor<64x{n}xf32> {{
  %ma = memory.upload %a {{layout = #layout.linear}}
  %mb = memory.upload %b {{layout = #layout.linear}}
  %mc = memory.alloc : () -> !memory.buffer<{elems}, f32>
  memory.launch %ma, %mb, %mc {{kernel = "mm", source = "tensor.matmul", domain = [64, {n}, {k}], iterators = ["parallel", "parallel", "reduction"], maps = [(d0, d1, d2) -> (d0 * {k} + d2), (d0, d1, d2) -> (d2 * {n} + d1), (d0, d1, d2) -> ({out})], body = "x0 * x1", combine = "add", epilogue = "acc * 0.5"}} : (!memory.buffer<{ak}, f32>, !memory.buffer<{bk}, f32>, !memory.buffer<{elems}, f32>) -> ()
  %c = memory.download %mc {{layout = #layout.linear}} : (!memory.buffer<{elems}, f32>) -> tensor<64x{n}xf32>
  func.return %c : (tensor<64x{n}xf32>) -> ()
}}
"#,
        ak = 64 * k,
        bk = k * n
    )
}

#[test]
fn short_products_store_four_columns_at_once_where_the_output_allows() {
    let nvidia = fbc_target::builtin("nvidia").expect("nvidia profile");
    let opts = Options {
        kernels: fbc_codegen::opencl::KernelOptions::for_target(&nvidia),
        ..Options::default()
    };
    let kernel = |k: u64, n: u64, out: &str, elems: u64| {
        let m = parse("mm.fbir", &product_module(k, n, out, elems));
        let out = Writer::new(opts.clone()).write(&m).expect("writes");
        assert!(out.manifest.functions[0].launches().next().is_some_and(|l| l.tiled));
        out.kernels[0].1.clone()
    };
    let quad = "*(__global float4*)(x2 + ";
    // Row-major, K = 40: four columns of a row are four consecutive elements from a multiple of
    // 4, each computed by the epilogue.
    let src = kernel(40, 128, "d0 * 128 + d1", 64 * 128);
    assert!(
        src.contains(&format!("{{ const int col = colb; {quad}(((row * 128) + col))) = v; }}")),
        "{src}"
    );
    assert!(src.contains("v.w = (acc * 0.5f);"), "{src}");
    assert!(!src.contains("acc_ij"), "{src}");
    // Tiles of 32 columns in a buffer: the offset of four columns from a multiple of 4 still
    // steps by one, the other terms are multiples of 4.
    assert!(
        kernel(40, 128, "d1 mod 32 + (d1 floordiv 32) * 2048 + d0 * 32", 64 * 128).contains(quad)
    );
    // Not where the reduction is long (the stores are a small part of the kernel), where four
    // columns are not four consecutive elements, or not from a multiple of 4.
    for (k, n, out, elems) in [
        (fbc_target::VECTOR_STORE_MAX_K * 2, 128, "d0 * 128 + d1", 64 * 128),
        (40, 128, "d1 * 64 + d0", 64 * 128),
        (40, 128, "d0 * 128 + (d1 + 2) mod 128", 64 * 128),
        (40, 126, "d0 * 126 + d1", 64 * 126),
    ] {
        let src = kernel(k, n, out, elems);
        assert!(!src.contains(quad) && src.contains("acc_ij"), "{k} {n} {out}: {src}");
    }
}

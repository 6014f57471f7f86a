use std::sync::Arc;

use fbc_dialects::layout::{Intra, RTile, Storage};
use fbc_ir::{Module, SourceFile};

use fbc_dialects::layout::Layout;
use fbc_dialects::memory::{Combine, Kernel, MemType, Scalar, ScalarUn};
use fbc_index::{Expr, IndexMap};
use fbc_ir::attr::BinOp;
use fbc_ir::{ElemType, TensorType};

use super::*;
use crate::interp::{random_inputs, Interpreter, Mode, Value};
use crate::reference::Tensor;

/// Parses a test module (panics with the diagnostics on an error).
pub(crate) fn parse(text: &str) -> Module {
    let file = Arc::new(SourceFile::new("t.fbir", text));
    fbc_ir::parse_module(&file, &fbc_dialects::registry())
        .unwrap_or_else(|d| panic!("{text}\n{d:?}"))
}

fn f32s(v: &Value) -> Vec<f32> {
    v.as_f32().expect("an f32 tensor").data().to_vec()
}

fn f32_tensor(shape: &[usize], data: Vec<f32>) -> Value {
    Value::F32(Tensor::new(shape.to_vec(), data).unwrap())
}

/// Runs `func` of a memory-dialect module and of its tensor-dialect twin on the same random
/// inputs; returns (memory results, tensor results).
fn both(memory: &str, tensor: &str, func: &str) -> (Vec<Value>, Vec<Value>) {
    let (m, t) = (parse(memory), parse(tensor));
    let inputs = random_inputs(&t, func, 7).unwrap();
    let a = Interpreter::new(&m).run(func, inputs.clone()).unwrap();
    let b = Interpreter::new(&t).run(func, inputs).unwrap();
    (a, b)
}

const MATMUL: &str = r#"
func.func @f(%a: tensor<5x7xf32>, %b: tensor<7x3xf32>) -> tensor<5x3xf32> {
  %ma = memory.upload %a {layout = #layout.linear} : (tensor<5x7xf32>) -> !memory.buffer<35, f32>
  %mb = memory.upload %b {layout = #layout.linear} : (tensor<7x3xf32>) -> !memory.buffer<21, f32>
  %mc = memory.alloc : () -> !memory.buffer<15, f32>
  memory.launch %ma, %mb, %mc {kernel = "mm", domain = [5, 3, 7], iterators = ["parallel", "parallel", "reduction"], maps = [(i, j, k) -> (i * 7 + k), (i, j, k) -> (k * 3 + j), (i, j, k) -> (i * 3 + j)], body = "x0 * x1", combine = "add"} : (!memory.buffer<35, f32>, !memory.buffer<21, f32>, !memory.buffer<15, f32>) -> ()
  memory.dealloc %ma : (!memory.buffer<35, f32>) -> ()
  memory.dealloc %mb : (!memory.buffer<21, f32>) -> ()
  %c = memory.download %mc {layout = #layout.linear} : (!memory.buffer<15, f32>) -> tensor<5x3xf32>
  func.return %c : (tensor<5x3xf32>) -> ()
}"#;

/// Kept uploads ([`crate::interp::Uploads`]): a second call copies the storage the first
/// packed for a kept argument (the product is the first call's, whatever the second passes for
/// it) and packs the others again; the reference executor's numbers either way.
#[test]
fn kept_uploads_are_packed_once() {
    use crate::interp::Uploads;
    let m = parse(MATMUL);
    let id = m.find_func("f").unwrap();
    let a1 = random_inputs(&m, "f", 1).unwrap();
    let a2 = random_inputs(&m, "f", 2).unwrap();
    let run = |inputs: &[Value], uploads: Option<&mut Uploads>| {
        Interpreter::new(&m)
            .run_id_with_uploads(id, inputs.to_vec(), &mut ReferenceLauncher, uploads)
            .unwrap()
    };
    let plain = |a: &Value, b: &Value| run(&[a.clone(), b.clone()], None);
    // `b` kept: the second call's `a` is its own, its `b` the first call's.
    let mut kept = Uploads::new(vec![false, true]);
    assert_eq!(run(&a1, Some(&mut kept)), plain(&a1[0], &a1[1]));
    assert_eq!(kept.reused(), 0);
    assert_eq!(run(&[a2[0].clone(), a2[1].clone()], Some(&mut kept)), plain(&a2[0], &a1[1]));
    assert_eq!(kept.reused(), 1);
    assert_ne!(plain(&a2[0], &a1[1]), plain(&a2[0], &a2[1]));
    // Nothing kept: every call packs its own.
    let mut none = Uploads::new(vec![false, false]);
    run(&a1, Some(&mut none));
    assert_eq!(run(&a2, Some(&mut none)), plain(&a2[0], &a2[1]));
    assert_eq!(none.reused(), 0);
}

#[test]
fn matmul_matches_the_tensor_interpreter() {
    let tensor = r#"
func.func @f(%a: tensor<5x7xf32>, %b: tensor<7x3xf32>) -> tensor<5x3xf32> {
  %c = tensor.matmul %a, %b : (tensor<5x7xf32>, tensor<7x3xf32>) -> tensor<5x3xf32>
  func.return %c : (tensor<5x3xf32>) -> ()
}"#;
    let (a, b) = both(MATMUL, tensor, "f");
    let (a, b) = (f32s(&a[0]), f32s(&b[0]));
    // The GEMM of the reference sums in its own blocked order; row-major summation agrees
    // to rounding.
    for (x, y) in a.iter().zip(&b) {
        assert!((x - y).abs() <= 1e-5 * y.abs().max(1.0), "{a:?}\n{b:?}");
    }
    // And exactly with a hand-worked product: [[1, 2], [3, 4]] · [[5, 6], [7, 8]].
    let m = parse(
        &MATMUL
            .replace("5x7", "2x2")
            .replace("7x3", "2x2")
            .replace("5x3", "2x2")
            .replace("<35,", "<4,")
            .replace("<21,", "<4,")
            .replace("<15,", "<4,")
            .replace("[5, 3, 7]", "[2, 2, 2]")
            .replace("i * 7", "i * 2")
            .replace("k * 3", "k * 2")
            .replace("i * 3", "i * 2"),
    );
    let out = Interpreter::new(&m)
        .run(
            "f",
            vec![
                f32_tensor(&[2, 2], vec![1.0, 2.0, 3.0, 4.0]),
                f32_tensor(&[2, 2], vec![5.0, 6.0, 7.0, 8.0]),
            ],
        )
        .unwrap();
    assert_eq!(f32s(&out[0]), vec![19.0, 22.0, 43.0, 50.0]);
}

#[test]
fn reduction_with_epilogue_is_bit_exact() {
    // Row means (sum then divide, as reduce_mean does) plus a per-row bias read in the
    // epilogue; and a row max.
    let memory = r#"
func.func @f(%x: tensor<6x9xf32>, %b: tensor<6xf32>) -> (tensor<6xf32>, tensor<6xf32>) {
  %mx = memory.upload %x {layout = #layout.linear} : (tensor<6x9xf32>) -> !memory.buffer<54, f32>
  %mb = memory.upload %b {layout = #layout.linear} : (tensor<6xf32>) -> !memory.buffer<6, f32>
  %mo = memory.alloc : () -> !memory.buffer<6, f32>
  memory.launch %mx, %mb, %mo {kernel = "mean_bias", domain = [6, 9], iterators = ["parallel", "reduction"], maps = [(i, k) -> (i * 9 + k), (i, k) -> (i), (i, k) -> (i)], body = "x0", combine = "add", epilogue = "acc / 9.0 + x1"} : (!memory.buffer<54, f32>, !memory.buffer<6, f32>, !memory.buffer<6, f32>) -> ()
  %mm = memory.alloc : () -> !memory.buffer<6, f32>
  memory.launch %mx, %mm {kernel = "rowmax", domain = [6, 9], iterators = ["parallel", "reduction"], maps = [(i, k) -> (i * 9 + k), (i, k) -> (i)], body = "x0", combine = "max"} : (!memory.buffer<54, f32>, !memory.buffer<6, f32>) -> ()
  %o = memory.download %mo {layout = #layout.linear} : (!memory.buffer<6, f32>) -> tensor<6xf32>
  %m = memory.download %mm {layout = #layout.linear} : (!memory.buffer<6, f32>) -> tensor<6xf32>
  func.return %o, %m : (tensor<6xf32>, tensor<6xf32>) -> ()
}"#;
    let tensor = r#"
func.func @f(%x: tensor<6x9xf32>, %b: tensor<6xf32>) -> (tensor<6xf32>, tensor<6xf32>) {
  %s = tensor.reduce_mean %x {axes = [1]} : (tensor<6x9xf32>) -> tensor<6xf32>
  %o = tensor.add %s, %b : (tensor<6xf32>, tensor<6xf32>) -> tensor<6xf32>
  %m = tensor.reduce_max %x {axes = [1]} : (tensor<6x9xf32>) -> tensor<6xf32>
  func.return %o, %m : (tensor<6xf32>, tensor<6xf32>) -> ()
}"#;
    let (a, b) = both(memory, tensor, "f");
    assert_eq!(a, b);
}

const RT: &str = "#layout.rtile<tile = [4, 4], horizontal = 1, pad = [2, 2]>";

#[test]
fn rtile_image_round_trip_with_padding() {
    let l =
        Layout::RTile(RTile::for_shape(&[6, 6], [4, 4], Intra::Rows, 1, Storage::Image2d).unwrap());
    let ty = MemType::image(2, 8);
    let x = f32_tensor(&[6, 6], (1..=36).map(|v| v as f32).collect());
    let m = pack(&l, &[6, 6], &x, ty).unwrap();
    let MemData::F32(d) = &m else { panic!() };
    assert_eq!(d.len(), 64);
    // Tile (0, 0) is texel column 0, rows 0..4: row 0 is x[0][0..4] = 1, 2, 3, 4.
    assert_eq!(&d[0..4], &[1.0, 2.0, 3.0, 4.0]);
    // Tile (0, 1) is texel column 1: x[0][4..6] then two padding zeros.
    assert_eq!(&d[4..8], &[5.0, 6.0, 0.0, 0.0]);
    // Texel row 6 (tile row 1, footprint row 2) is padding: tensor row 6 does not exist.
    assert_eq!(&d[6 * 8..7 * 8], &[0.0; 8]);
    assert_eq!(d.iter().filter(|&&v| v != 0.0).count(), 36);
    assert_eq!(unpack(&l, &[6, 6], &m, ty).unwrap(), x);
    // The same texel array in a buffer.
    let bt = MemType::buffer(64, ElemType::F32);
    assert_eq!(pack(&l, &[6, 6], &x, bt).unwrap(), m);
    assert_eq!(unpack(&l, &[6, 6], &m, bt).unwrap(), x);
    // Wrong sizes are errors.
    assert_eq!(
        pack(&l, &[6, 6], &x, MemType::image(8, 2)).unwrap_err(),
        format!("tensor<6x6xf32> in {l} needs an image of [2, 8] texels, found !memory.image2d<[8, 2], f32>")
    );
    assert!(unpack(&l, &[6, 6], &MemData::F32(vec![0.0; 63]), ty).is_err());
}

/// `pack` and `unpack` place each element where `Layout::texel_of` says (texel `(x, y)`,
/// channel `c` at `(y · width + x) · 4 + c`; padding 0), for linear and R-Tile layouts of every
/// kind (rows and blocks, either axis horizontal, packed channels, padding, batches, buffers),
/// against a placement element by element written here.
#[test]
fn pack_places_every_element_where_its_texel_is() {
    use fbc_dialects::layout::Pack;
    let shapes: [&[u64]; 5] = [&[7, 10], &[3, 5, 12], &[2, 6, 9, 8], &[13], &[1, 1]];
    let mut cases: Vec<(Vec<u64>, Layout)> = Vec::new();
    for shape in shapes {
        cases.push((shape.to_vec(), Layout::Linear));
        if shape.len() < 2 {
            continue;
        }
        let r = shape.len() as u64;
        for tile in [[4, 4], [2, 8], [3, 4], [8, 16]] {
            let intras =
                [Intra::Rows, Intra::Block { bh: 1, bw: 4 }, Intra::Block { bh: 2, bw: 4 }];
            for intra in intras {
                for horizontal in [r - 2, r - 1] {
                    for pack in [Pack::W, Pack::C] {
                        let Ok(t) = RTile::packed_for_shape(
                            shape,
                            tile,
                            intra,
                            horizontal,
                            pack,
                            Storage::Image2d,
                        ) else {
                            continue;
                        };
                        cases.push((shape.to_vec(), Layout::RTile(t)));
                    }
                }
            }
        }
    }
    assert!(cases.len() > 100, "{}", cases.len());
    for (shape, layout) in &cases {
        let dims: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
        let n: usize = dims.iter().product();
        let x = f32_tensor(&dims, (1..=n).map(|v| v as f32).collect());
        let [width, height] = layout.image_extent(shape).unwrap();
        for ty in
            [MemType::image(width, height), MemType::buffer(width * height * 4, ElemType::F32)]
        {
            if matches!(layout, Layout::Linear) && !ty.is_image() {
                continue;
            }
            let mut want = vec![0.0f32; (width * height * 4) as usize];
            let mut idx = vec![0u64; shape.len()];
            for v in 1..=n {
                let t = layout.texel_of(shape, &idx).unwrap();
                want[((t.y * width + t.x) * 4 + t.c) as usize] = v as f32;
                for k in (0..idx.len()).rev() {
                    idx[k] += 1;
                    if idx[k] < shape[k] {
                        break;
                    }
                    idx[k] = 0;
                }
            }
            let got = pack(layout, shape, &x, ty).unwrap_or_else(|e| panic!("{layout} {ty}: {e}"));
            assert_eq!(got, MemData::F32(want), "{shape:?} {layout} {ty}");
            assert_eq!(unpack(layout, shape, &got, ty).unwrap(), x, "{shape:?} {layout} {ty}");
        }
    }
}

#[test]
fn guarded_image_launch_matches_relu() {
    // ReLU on the R-Tile image; the guard zeroes the padding (here the input padding is 0
    // anyway, so the output is checked through a +1 that would otherwise leak).
    let memory = format!(
        r#"
func.func @f(%x: tensor<6x6xf32>) -> tensor<6x6xf32> {{
  %i = memory.upload %x {{layout = {RT}}} : (tensor<6x6xf32>) -> !memory.image2d<[2, 8], f32>
  %o = memory.alloc : () -> !memory.image2d<[2, 8], f32>
  memory.launch %i, %o {{kernel = "relu1", domain = [8, 2, 4], iterators = ["parallel", "parallel", "parallel"], maps = [(y, x, c) -> (x, y, c), (y, x, c) -> (x, y, c)], body = "max(x0, 0.0) + 1.0", guard = (y, x, c) -> (y, x * 4 + c), guard_bounds = [6, 6]}} : (!memory.image2d<[2, 8], f32>, !memory.image2d<[2, 8], f32>) -> ()
  %y = memory.download %o {{layout = {RT}}} : (!memory.image2d<[2, 8], f32>) -> tensor<6x6xf32>
  func.return %y : (tensor<6x6xf32>) -> ()
}}"#
    );
    let tensor = r#"
func.func @f(%x: tensor<6x6xf32>) -> tensor<6x6xf32> {
  %r = tensor.relu %x : (tensor<6x6xf32>) -> tensor<6x6xf32>
  %one = tensor.constant {value = 1.0} : () -> tensor<6x6xf32>
  %y = tensor.add %r, %one : (tensor<6x6xf32>, tensor<6x6xf32>) -> tensor<6x6xf32>
  func.return %y : (tensor<6x6xf32>) -> ()
}"#;
    let (a, b) = both(&memory, tensor, "f");
    assert_eq!(a, b);
    // The padding of the output image is 0 (the guard failed there), not 1.
    let m = parse(&memory);
    let f = &m.funcs[0];
    let k = Kernel::from_op(m.op(f.body[2])).unwrap();
    let types = [MemType::image(2, 8), MemType::image(2, 8)];
    let mut i = MemData::F32(vec![0.0; 64]);
    let mut o = MemData::F32(vec![7.0; 64]);
    run_kernel(&k, &types, &mut [&mut i, &mut o]).unwrap();
    let MemData::F32(d) = o else { panic!() };
    assert_eq!(d.iter().filter(|&&v| v == 1.0).count(), 36);
    assert_eq!(d.iter().filter(|&&v| v == 0.0).count(), 28);
}

#[test]
fn round_f16_hand_worked_values() {
    let r = fbc_dialects::memory::scalar::round_f16;
    // f16 has 10 fraction bits: spacing 2^-10 in [1, 2), so 1.0001 is 1.
    assert_eq!(r(1.0001), 1.0);
    // 0.1 is 0x2E66 in f16.
    assert_eq!(r(0.1), 0.099_975_586);
    // Ties go to even: 1 + 2^-11 -> 1; 1 + 3·2^-11 -> 1 + 2^-9.
    assert_eq!(r(1.0 + 2f32.powi(-11)), 1.0);
    assert_eq!(r(1.0 + 3.0 * 2f32.powi(-11)), 1.0 + 2f32.powi(-9));
    // The largest f16 is 65504; 65520 is the tie with 2^16 and overflows to inf.
    assert_eq!(r(65519.0), 65504.0);
    assert_eq!(r(65520.0), f32::INFINITY);
    assert_eq!(r(-1.0e6), f32::NEG_INFINITY);
    // Subnormals: 2^-24 is the smallest; 2^-25 ties to 0 (even), 0.75·2^-24 rounds up.
    assert_eq!(r(2f32.powi(-24)), 2f32.powi(-24));
    assert_eq!(r(2f32.powi(-25)), 0.0);
    assert_eq!(r(0.75 * 2f32.powi(-24)), 2f32.powi(-24));
    assert_eq!(r(3.0 * 2f32.powi(-24) + 2f32.powi(-30)), 3.0 * 2f32.powi(-24));
    assert_eq!(r(1.0e-8), 0.0);
    assert_eq!(r(-0.0).to_bits(), (-0.0f32).to_bits());
    assert!(r(f32::NAN).is_nan());
}

/// `x0 * 1.0001` from one R-Tile image into another of element type `T`.
fn scale_module(t: &str) -> String {
    format!(
        r#"
func.func @f(%x: tensor<6x6xf32>) -> tensor<6x6xf32> {{
  %i = memory.upload %x {{layout = {RT}}} : (tensor<6x6xf32>) -> !memory.image2d<[2, 8], {t}>
  %o = memory.alloc : () -> !memory.image2d<[2, 8], {t}>
  memory.launch %i, %o {{kernel = "scale", domain = [8, 2, 4], iterators = ["parallel", "parallel", "parallel"], maps = [(y, x, c) -> (x, y, c), (y, x, c) -> (x, y, c)], body = "x0 * 1.0001", guard = (y, x, c) -> (y, x * 4 + c), guard_bounds = [6, 6]}} : (!memory.image2d<[2, 8], {t}>, !memory.image2d<[2, 8], {t}>) -> ()
  %y = memory.download %o {{layout = {RT}}} : (!memory.image2d<[2, 8], {t}>) -> tensor<6x6xf32>
  func.return %y : (tensor<6x6xf32>) -> ()
}}"#
    )
}

#[test]
fn f16_images_round_at_upload_and_at_every_store() {
    let l =
        Layout::RTile(RTile::for_shape(&[6, 6], [4, 4], Intra::Rows, 1, Storage::Image2d).unwrap());
    let ty = MemType::image_f16(2, 8);
    assert_eq!((ty.bytes(), MemType::image(2, 8).bytes()), (128, 256));
    let mut v = vec![1.0f32; 36];
    v[0] = 1.0001; // upload: -> 1
    v[1] = 65519.0; // upload: -> 65504, then 65504·1.0001 = 65510.55 -> 65504
    v[2] = 65520.0; // upload: -> inf
    v[3] = 2f32.powi(-25); // upload: -> 0
    v[4] = 0.1; // upload: -> 0.099975586; ·1.0001 = 0.099985583 -> 0.099975586
    v[5] = 2047.0; // exact; ·1.0001 = 2047.2047 -> 2047 (spacing 1 in [1024, 2048))
    v[6] = 4000.0; // exact; ·1.0001 = 4000.4 -> 4000 (spacing 2 in [2048, 4096))
    v[7] = 60000.0; // exact; ·1.0001 = 60006 -> 60000 (spacing 32 in [32768, 65504])
    v[8] = 1.0 + 2f32.powi(-9); // exact; ·1.0001 = 1.0020532 -> 1.0019531
    let x = f32_tensor(&[6, 6], v);
    let m = pack(&l, &[6, 6], &x, ty).unwrap();
    let back = unpack(&l, &[6, 6], &m, ty).unwrap();
    let uploaded = f32s(&back);
    let rounded =
        [1.0, 65504.0, f32::INFINITY, 0.0, 0.099_975_586, 2047.0, 4000.0, 60000.0, 1.001_953_1];
    assert_eq!(&uploaded[..9], &rounded);
    // A launch into an f16 image rounds its stores; into an f32 image it does not.
    let run = |t: &str| {
        let module = parse(&scale_module(t));
        f32s(&Interpreter::new(&module).run("f", vec![x.clone()]).unwrap()[0])
    };
    let half = run("f16");
    // Each upload-rounded value times 1.0001 rounds back to itself (see the comments above).
    assert_eq!(&half[..9], &rounded);
    assert!(half.iter().all(|&h| fbc_dialects::memory::scalar::round_f16(h) == h));
    let full = run("f32");
    assert_eq!(full[0], 1.0001f32 * 1.0001);
    assert_eq!(full[9], 1.0001);
    assert_eq!(half[9], 1.0);
}

/// An embedding lookup: a gather through `i32` ids (`x1[x0 * 4 + d1]`).
pub(crate) const EMBED: &str = r#"
func.func @f(%table: tensor<10x4xf32>, %ids: tensor<3xi32>) -> tensor<3x4xf32> {
  %mi = memory.upload %ids {layout = #layout.linear} : (tensor<3xi32>) -> !memory.buffer<3, i32>
  %mt = memory.upload %table {layout = #layout.linear} : (tensor<10x4xf32>) -> !memory.buffer<40, f32>
  %me = memory.alloc : () -> !memory.buffer<12, f32>
  memory.launch %mi, %mt, %me {kernel = "embed", domain = [3, 4], iterators = ["parallel", "parallel"], maps = [(i, d) -> (i), (i, d) -> (0), (i, d) -> (i * 4 + d)], body = "x1[x0 * 4 + d1]"} : (!memory.buffer<3, i32>, !memory.buffer<40, f32>, !memory.buffer<12, f32>) -> ()
  %e = memory.download %me {layout = #layout.linear} : (!memory.buffer<12, f32>) -> tensor<3x4xf32>
  func.return %e : (tensor<3x4xf32>) -> ()
}"#;

#[test]
fn embedding_by_load() {
    let m = parse(EMBED);
    let table = f32_tensor(&[10, 4], (0..40).map(|v| v as f32).collect());
    let ids = Value::I32(Tensor::new(vec![3], vec![2, 0, 9]).unwrap());
    let out = Interpreter::new(&m).run("f", vec![table.clone(), ids]).unwrap();
    assert_eq!(
        f32s(&out[0]),
        vec![8.0, 9.0, 10.0, 11.0, 0.0, 1.0, 2.0, 3.0, 36.0, 37.0, 38.0, 39.0]
    );
    // The tensor dialect agrees.
    let t = parse(
        r#"
func.func @f(%table: tensor<10x4xf32>, %ids: tensor<3xi32>) -> tensor<3x4xf32> {
  %e = tensor.embedding %table, %ids : (tensor<10x4xf32>, tensor<3xi32>) -> tensor<3x4xf32>
  func.return %e : (tensor<3x4xf32>) -> ()
}"#,
    );
    let ids = Value::I32(Tensor::new(vec![3], vec![2, 0, 9]).unwrap());
    assert_eq!(Interpreter::new(&t).run("f", vec![table.clone(), ids]).unwrap(), out);
    // An id past the table is an error naming the access, not a panic.
    let bad = Value::I32(Tensor::new(vec![3], vec![2, 10, 0]).unwrap());
    let e = Interpreter::new(&m).run("f", vec![table, bad]).unwrap_err().to_string();
    assert!(e.contains("x1[40] is outside operand 1 (40 elements) at domain index [1, 0]"), "{e}");
}

#[test]
fn out_of_range_maps_are_errors() {
    // The verifier's bounds prover refuses the module, naming a point.
    let text = MATMUL.replace("(i, j, k) -> (k * 3 + j)", "(i, j, k) -> (k * 3 + j + 1)");
    let file = Arc::new(SourceFile::new("t.fbir", text));
    let d = fbc_ir::parse_module(&file, &fbc_dialects::registry()).unwrap_err();
    assert_eq!(
        d[0].message,
        "operand 1 (!memory.buffer<21, f32>) is read at offset 21 at d0=0, d1=2, d2=6, outside its 21 elements"
    );
    // Floor semantics of the maps: (d0 - 1) mod 4 at d0 = 0 is 3.
    let k = Kernel {
        name: "rot".into(),
        source: String::new(),
        domain: vec![4],
        iterators: vec![fbc_dialects::memory::Iter::Parallel],
        maps: vec![map("(d0) -> ((d0 - 1) mod 4)"), map("(d0) -> (d0)")],
        body: Scalar::parse("x0").unwrap(),
        combine: None,
        epilogue: None,
        guard: None,
        stats: Vec::new(),
        symbols: Vec::new(),
        attention: None,
        split: None,
    };
    let t = MemType::buffer(4, ElemType::F32);
    let mut a = MemData::F32(vec![10.0, 11.0, 12.0, 13.0]);
    let mut b = MemData::F32(vec![0.0; 4]);
    run_kernel(&k, &[t, t], &mut [&mut a, &mut b]).unwrap();
    assert_eq!(b, MemData::F32(vec![13.0, 10.0, 11.0, 12.0]));
    // A kernel that did not pass the verifier is still checked at every access.
    let d0 = || Box::new(Expr::Var("d0".into()));
    let plus_one = IndexMap {
        dims: vec!["d0".into()],
        symbols: vec![],
        results: vec![Expr::Bin(BinOp::Add, d0(), Box::new(Expr::Const(1)))],
    };
    let past = Kernel { maps: vec![plus_one, map("(d0) -> (d0)")], ..k.clone() };
    assert_eq!(
        run_kernel(&past, &[t, t], &mut [&mut a, &mut b]).unwrap_err(),
        "kernel `rot`: operand 0 (!memory.buffer<4, f32>) accessed at element 4, outside its 4 elements (domain index [3])"
    );
    // Storage that does not fit its type is an error.
    let mut short = MemData::F32(vec![0.0; 3]);
    assert_eq!(
        run_kernel(&k, &[t, t], &mut [&mut a, &mut short]).unwrap_err(),
        "kernel `rot`: operand 1 holds 3 elements, not a !memory.buffer<4, f32>"
    );
}

fn map(text: &str) -> fbc_index::IndexMap {
    let m = parse(&format!(
        "func.func @g(%x: tensor<4xf32>) -> tensor<4xf32> {{\n  %y = layout.remap %x {{map = {text}, shape = [4]}} : (tensor<4xf32>) -> tensor<4xf32>\n  func.return %y : (tensor<4xf32>) -> ()\n}}"
    ));
    match m.op(m.funcs[0].body[0]).attr("map") {
        Some(fbc_ir::Attr::Map(m)) => m.clone(),
        _ => panic!("no map"),
    }
}

/// Counts launches and delegates to the reference.
#[derive(Default)]
struct Counting {
    names: Vec<String>,
}

impl Launcher for Counting {
    fn launch(
        &mut self,
        k: &Kernel,
        types: &[MemType],
        operands: &mut [&mut MemData],
    ) -> Result<(), String> {
        self.names.push(k.name.clone());
        run_kernel(k, types, operands)
    }
}

#[test]
fn custom_launchers_plug_in() {
    let m = parse(EMBED);
    let t = parse(MATMUL);
    let mut l = Counting::default();
    let table = f32_tensor(&[10, 4], vec![1.0; 40]);
    let ids = Value::I32(Tensor::new(vec![3], vec![1, 2, 3]).unwrap());
    Interpreter::new(&m).run_with_launcher("f", vec![table, ids], &mut l).unwrap();
    let inputs = random_inputs(&t, "f", 3).unwrap();
    let out = Interpreter::new(&t).mode(Mode::F64).run_with_launcher("f", inputs, &mut l).unwrap();
    assert_eq!(l.names, vec!["embed", "mm"]);
    // In f64 mode downloads widen to f64 (storage is f32).
    assert!(out[0].as_f64().is_some());
}

#[test]
fn every_layout_round_trips() {
    // Batch dimensions, both `horizontal` axes, block intra-tiles, exact and padded tiles,
    // image and buffer storage: pack then unpack is the identity and every element has its
    // own place (no two elements share one).
    let shape = [2u64, 5, 7];
    let x = f32_tensor(&[2, 5, 7], (1..=70).map(|v| v as f32).collect());
    let configs = [
        ([4, 4], Intra::Rows, 2),
        ([4, 4], Intra::Rows, 1),
        ([5, 8], Intra::Block { bh: 1, bw: 4 }, 2),
        ([2, 8], Intra::Block { bh: 2, bw: 2 }, 1),
        ([1, 1], Intra::Rows, 1),
    ];
    for (tile, intra, horizontal) in configs {
        for storage in [Storage::Image2d, Storage::Buffer] {
            let r = RTile::for_shape(&shape, tile, intra, horizontal, storage).unwrap();
            let l = Layout::RTile(r);
            let t = TensorType::new(shape.to_vec(), ElemType::F32);
            let ty = fbc_dialects::memory::default_storage(&l, &t).unwrap();
            let m = pack(&l, &shape, &x, ty).unwrap();
            let MemData::F32(d) = &m else { panic!() };
            assert_eq!(d.iter().filter(|&&v| v != 0.0).count(), 70, "{l}");
            assert_eq!(unpack(&l, &shape, &m, ty).unwrap(), x, "{l}");
        }
    }
    // Linear: a row-major buffer, the identity.
    let ty = MemType::buffer(70, ElemType::F32);
    let m = pack(&Layout::Linear, &shape, &x, ty).unwrap();
    assert_eq!(m, MemData::F32((1..=70).map(|v| v as f32).collect()));
    // i32 tensors keep their values; f64 values (the f64 mode) are rounded to f32.
    let ids = Value::I32(Tensor::new(vec![3], vec![-1, 7, i32::MAX]).unwrap());
    let it = MemType::buffer(3, ElemType::I32);
    let m = pack(&Layout::Linear, &[3], &ids, it).unwrap();
    assert_eq!(m, MemData::I32(vec![-1, 7, i32::MAX]));
    assert_eq!(unpack(&Layout::Linear, &[3], &m, it).unwrap(), ids);
    let wide = Value::F64(Tensor::new(vec![1], vec![0.1f64]).unwrap());
    let m = pack(&Layout::Linear, &[1], &wide, MemType::buffer(1, ElemType::F32)).unwrap();
    assert_eq!(m, MemData::F32(vec![0.1f32]));
    assert_eq!(
        pack(&Layout::Linear, &[3], &ids, MemType::buffer(3, ElemType::F32)).unwrap_err(),
        "!memory.buffer<3, f32> holds f32, but the tensor is tensor<3xi32>"
    );
}

fn kernel(text: &str, types: &[&str]) -> Kernel {
    let ops: Vec<String> = (0..types.len()).map(|i| format!("%a{i}")).collect();
    let args: Vec<String> = types.iter().enumerate().map(|(i, t)| format!("%a{i}: {t}")).collect();
    let m = parse(&format!(
        "func.func @k({}) {{\n  memory.launch {} {{{text}}} : ({}) -> ()\n  func.return\n}}",
        args.join(", "),
        ops.join(", "),
        types.join(", ")
    ));
    Kernel::from_op(m.op(m.funcs[0].body[0])).unwrap()
}

#[test]
fn full_and_empty_reductions() {
    // All dimensions reduced: one output element, the row-major sum.
    let k = kernel(
        "kernel = \"sum\", domain = [2, 3], iterators = [\"reduction\", \"reduction\"], maps = [(i, j) -> (i * 3 + j), (i, j) -> (0)], body = \"x0 * 2.0\", combine = \"add\", epilogue = \"acc + 0.5\"",
        &["!memory.buffer<6, f32>", "!memory.buffer<1, f32>"],
    );
    let t = [MemType::buffer(6, ElemType::F32), MemType::buffer(1, ElemType::F32)];
    let mut a = MemData::F32(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let mut o = MemData::F32(vec![9.0]);
    run_kernel(&k, &t, &mut [&mut a, &mut o]).unwrap();
    assert_eq!(o, MemData::F32(vec![42.5]));
    // An empty reduction: acc is the identity (-inf for max), the epilogue still runs.
    let k = kernel(
        "kernel = \"mx\", domain = [2, 0], iterators = [\"parallel\", \"reduction\"], maps = [(i, j) -> (0), (i, j) -> (i)], body = \"x0\", combine = \"max\", epilogue = \"select(acc < 0.0, -1.0, acc)\"",
        &["!memory.buffer<1, f32>", "!memory.buffer<2, f32>"],
    );
    let t = [MemType::buffer(1, ElemType::F32), MemType::buffer(2, ElemType::F32)];
    let mut a = MemData::F32(vec![5.0]);
    let mut o = MemData::F32(vec![9.0, 9.0]);
    run_kernel(&k, &t, &mut [&mut a, &mut o]).unwrap();
    assert_eq!(o, MemData::F32(vec![-1.0, -1.0]));
    // No parallel point: nothing is written.
    let k = kernel(
        "kernel = \"none\", domain = [0], iterators = [\"parallel\"], maps = [(i) -> (i), (i) -> (i)], body = \"x0\"",
        &["!memory.buffer<1, f32>", "!memory.buffer<2, f32>"],
    );
    run_kernel(&k, &t, &mut [&mut a, &mut o]).unwrap();
    assert_eq!(o, MemData::F32(vec![-1.0, -1.0]));
}

#[test]
fn integer_kernels_and_reading_the_output() {
    // An i32 output computed with floor division and modulo; `x1[d0]` reads the output as it
    // was before the launch while the launch writes it reversed.
    let k = kernel(
        "kernel = \"ints\", domain = [4], iterators = [\"parallel\"], maps = [(i) -> (i), (i) -> (3 - i)], body = \"x0 / 2 * 10 + x0 % 3 + x1[d0] * 100\"",
        &["!memory.buffer<4, i32>", "!memory.buffer<4, i32>"],
    );
    let t = [MemType::buffer(4, ElemType::I32); 2];
    let mut a = MemData::I32(vec![-3, -1, 4, 7]);
    let mut o = MemData::I32(vec![1, 2, 3, 4]);
    run_kernel(&k, &t, &mut [&mut a, &mut o]).unwrap();
    // Point i writes element 3 - i and reads element i of the old output: -3 / 2 = -2,
    // -3 % 3 = 0, so o[3] = -20 + 0 + 100; -1: -10 + 2 + 200; 4: 20 + 1 + 300; 7: 30 + 1 +
    // 400. In-place reads would give o[1] = 21 + 19200 instead.
    assert_eq!(o, MemData::I32(vec![431, 321, 192, 80]));
    let div0 = kernel(
        "kernel = \"div0\", domain = [4], iterators = [\"parallel\"], maps = [(i) -> (i), (i) -> (i)], body = \"x0 / (x0 - x0)\"",
        &["!memory.buffer<4, i32>", "!memory.buffer<4, i32>"],
    );
    assert_eq!(
        run_kernel(&div0, &t, &mut [&mut a, &mut o]).unwrap_err(),
        "kernel `div0`: integer division by zero in -3 / 0"
    );
}

#[test]
fn an_operand_may_be_read_and_written() {
    // `%m` is both input and output: reads see the storage before the launch (x0 at the
    // reversed index reads old values), the written storage is what later ops see.
    let memory = r#"
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %m = memory.upload %x {layout = #layout.linear} : (tensor<4xf32>) -> !memory.buffer<4, f32>
  memory.launch %m, %m {kernel = "rev_add", domain = [4], iterators = ["parallel"], maps = [(i) -> (3 - i), (i) -> (i)], body = "x0 + x1"} : (!memory.buffer<4, f32>, !memory.buffer<4, f32>) -> ()
  %y = memory.download %m {layout = #layout.linear} : (!memory.buffer<4, f32>) -> tensor<4xf32>
  func.return %y : (tensor<4xf32>) -> ()
}"#;
    let m = parse(memory);
    let out =
        Interpreter::new(&m).run("f", vec![f32_tensor(&[4], vec![1.0, 2.0, 3.0, 4.0])]).unwrap();
    assert_eq!(f32s(&out[0]), vec![5.0, 5.0, 5.0, 5.0]);
}

mod props {
    use fbc_dialects::memory::{Guard, Iter, ScalarBin};
    use fbc_ir::attr::BinOp;
    use proptest::prelude::*;

    use super::*;

    fn expr(rank: usize) -> impl Strategy<Value = Expr> {
        let leaf = prop_oneof![
            (0..rank.max(1)).prop_map(|k| Expr::Var(format!("d{k}"))),
            prop_oneof![-3i64..8, Just(i64::MAX), Just(i64::MIN)].prop_map(Expr::Const),
        ];
        leaf.prop_recursive(3, 12, 2, |inner| {
            let op = prop_oneof![
                Just(BinOp::Add),
                Just(BinOp::Sub),
                Just(BinOp::Mul),
                Just(BinOp::FloorDiv),
                Just(BinOp::CeilDiv),
                Just(BinOp::Mod),
            ];
            prop_oneof![
                (op, inner.clone(), inner.clone()).prop_map(|(o, a, b)| Expr::Bin(
                    o,
                    Box::new(a),
                    Box::new(b)
                )),
                inner.prop_map(|a| Expr::Neg(Box::new(a))),
            ]
        })
    }

    /// Mostly well-formed expressions: operand and dimension references in range (one past
    /// the end now and then), `acc` only when `acc` is set.
    fn scalar(n: usize, rank: usize, acc: bool) -> impl Strategy<Value = Scalar> {
        let leaf = prop_oneof![
            6 => (0..n).prop_map(Scalar::In),
            1 => Just(Scalar::In(n)),
            4 => (0..rank).prop_map(Scalar::Dim),
            3 => prop_oneof![Just(i64::MIN), Just(i64::MAX), -3i64..4].prop_map(Scalar::Int),
            3 => prop_oneof![Just(f64::NAN), Just(1e30), Just(-0.5)].prop_map(Scalar::Float),
            u32::from(acc) * 3 => Just(Scalar::Acc),
        ];
        leaf.prop_recursive(3, 16, 3, move |inner| {
            let bin = prop_oneof![
                Just(ScalarBin::Add),
                Just(ScalarBin::Mul),
                Just(ScalarBin::Div),
                Just(ScalarBin::Rem),
                Just(ScalarBin::Max),
                Just(ScalarBin::Lt),
            ];
            let un = prop_oneof![
                Just(ScalarUn::Neg),
                Just(ScalarUn::ToInt),
                Just(ScalarUn::ToFloat),
                Just(ScalarUn::Abs),
                Just(ScalarUn::Exp),
            ];
            prop_oneof![
                (bin, inner.clone(), inner.clone()).prop_map(|(o, a, b)| Scalar::Bin(
                    o,
                    Box::new(a),
                    Box::new(b)
                )),
                (un, inner.clone()).prop_map(|(o, a)| Scalar::Un(o, Box::new(a))),
                ((0..n), inner.clone()).prop_map(|(k, a)| Scalar::Load(k, Box::new(a))),
                (inner.clone(), inner.clone(), inner).prop_map(|(c, a, b)| Scalar::Select(
                    Box::new(c),
                    Box::new(a),
                    Box::new(b)
                )),
            ]
        })
    }

    fn kernel() -> impl Strategy<Value = (Kernel, Vec<MemType>)> {
        let ty = prop_oneof![
            (0u64..12).prop_map(|e| MemType::buffer(e, ElemType::F32)),
            (0u64..12).prop_map(|e| MemType::buffer(e, ElemType::I32)),
            (1u64..3, 1u64..3).prop_map(|(w, h)| MemType::image(w, h)),
        ];
        (1usize..3, 0usize..2, proptest::collection::vec(ty, 1..4)).prop_flat_map(
            |(np, nr, types)| {
                let rank = np + nr;
                let n = types.len();
                // One map per operand with as many results as its storage has coordinates.
                let maps: Vec<_> = types
                    .iter()
                    .map(|t| proptest::collection::vec(expr(rank), t.coords()))
                    .collect();
                let guard =
                    proptest::option::of((proptest::collection::vec(expr(rank), 1..3), 0u64..5));
                (
                    proptest::collection::vec(0u64..4, rank),
                    maps,
                    scalar(n, rank, false),
                    proptest::option::of(scalar(n, rank, true)),
                    guard,
                    any::<bool>(),
                )
                    .prop_map(move |(domain, maps, body, epilogue, guard, max)| {
                        let dims: Vec<String> = (0..rank).map(|k| format!("d{k}")).collect();
                        let map =
                            |results| IndexMap { dims: dims.clone(), symbols: vec![], results };
                        let combine = match (nr, max) {
                            (0, _) => None,
                            (_, true) => Some(Combine::Max),
                            (_, false) => Some(Combine::Add),
                        };
                        let k = Kernel {
                            name: "p".into(),
                            source: String::new(),
                            domain,
                            iterators: (0..rank)
                                .map(|k| if k < np { Iter::Parallel } else { Iter::Reduction })
                                .collect(),
                            maps: maps.into_iter().map(map).collect(),
                            body,
                            combine,
                            epilogue,
                            guard: guard
                                .map(|(r, b)| Guard { bounds: vec![b; r.len()], map: map(r) }),
                            stats: Vec::new(),
                            symbols: Vec::new(),
                            attention: None,
                            split: None,
                        };
                        (k, types.clone())
                    })
            },
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        /// Any kernel on any storage either runs or is an error; nothing panics (overflow
        /// checks are on in tests).
        #[test]
        fn run_kernel_never_panics((k, types) in kernel(), seed in 0i32..100) {
            let mut data: Vec<MemData> = types
                .iter()
                .map(|t| match t.elem {
                    ElemType::I32 => MemData::I32((0..t.elems() as i32).map(|v| v * seed - 7).collect()),
                    _ => MemData::F32((0..t.elems()).map(|v| v as f32 - 3.5).collect()),
                })
                .collect();
            let mut refs: Vec<&mut MemData> = data.iter_mut().collect();
            let _ = run_kernel(&k, &types, &mut refs);
            // Printing and reading back the attributes gives the same kernel.
            let back = Kernel::from_attrs(&k.to_attrs());
            if let Ok(b) = back {
                prop_assert_eq!(b.to_attrs(), k.to_attrs());
            }
        }
    }
}

//! The CPU back ends against a naive evaluation of the same kernels.
//!
//! Each test writes a `memory.launch` as text, compiles it with every CPU back end ([`Jit`],
//! the Cranelift JIT, and with the `llvm` feature `LlvmJit`; see [`backends`]), runs it on
//! deterministic data and compares with [`naive`]: the kernel semantics of
//! `fbc_dialects::memory::kernel` spelt out directly with the dialect's own evaluators
//! (`Scalar::eval`, `eval_map`), one point at a time. Results must be bit-identical (every
//! kernel here computes the same operations in the same order; transcendental functions call the
//! same Rust functions), faults must be the same kind.

use std::sync::Arc;

use fbc_codegen::cpu::GemmShape;
use fbc_codegen::cranelift::{Error, Fault, Jit, KernelId, OperandMut};
use fbc_dialects::layout::{eval_map, MapEval};
use fbc_dialects::memory::scalar::{fmax_nan, FnEnv};
use fbc_dialects::memory::{Combine, Kernel, MemType, ScalarValue, StorageKind};
use fbc_ir::{ElemType, SourceFile};

/// Host storage of one operand.
#[derive(Debug, Clone, PartialEq)]
enum Data {
    F32(Vec<f32>),
    I32(Vec<i32>),
}

impl Data {
    fn bits(&self) -> Vec<u32> {
        match self {
            Data::F32(v) => v.iter().map(|x| x.to_bits()).collect(),
            Data::I32(v) => v.iter().map(|&x| x as u32).collect(),
        }
    }
}

/// The kernel of the one `memory.launch` in a function with arguments `types`.
fn kernel(types: &[&str], launch: &str) -> (Kernel, Vec<MemType>) {
    let args: Vec<String> = types.iter().enumerate().map(|(i, t)| format!("%a{i}: {t}")).collect();
    let ops: Vec<String> = (0..types.len()).map(|i| format!("%a{i}")).collect();
    let text = format!(
        "module {{\n  func.func @f({}) {{\n    memory.launch {} {{kernel = \"k\", {launch}}}\n    func.return\n  }}\n}}\n",
        args.join(", "),
        ops.join(", ")
    );
    // `memory.launch` without its verifier, whose bounds prover refuses the out-of-bounds
    // kernels the fault tests hand to the JIT (which must check them anyway).
    let mut reg = fbc_dialects::registry();
    let d = reg.get("memory.launch").expect("registered");
    reg.register(Box::leak(Box::new(fbc_ir::OpDef {
        name: d.name,
        summary: d.summary,
        doc: d.doc,
        operands: d.operands,
        results: d.results,
        attrs: d.attrs,
        traits: d.traits,
        class: d.class,
        infer: |_| Ok(Vec::new()),
    })));
    let m = fbc_ir::parse_module(&Arc::new(SourceFile::new("t.fbir", &text)), &reg)
        .unwrap_or_else(|d| panic!("{text}\n{d:?}"));
    let f = &m.funcs[0];
    let k = Kernel::from_op(m.op(f.body[0])).expect("a launch");
    let tys = f
        .args
        .iter()
        .map(|&a| MemType::from_type(m.value_type(a)).expect("a memory type"))
        .collect();
    (k, tys)
}

/// Deterministic data: small values with both signs (and exact halves) so products and sums
/// are exercised; integers in `[0, modulo)`.
fn data(t: MemType, seed: u32, modulo: i32) -> Data {
    let n = t.elems() as usize;
    let mut s = seed.wrapping_mul(2654435761).wrapping_add(12345);
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 17;
        s ^= s << 5;
        s
    };
    match t.elem {
        ElemType::I32 => Data::I32((0..n).map(|_| (next() % modulo as u32) as i32).collect()),
        _ => Data::F32((0..n).map(|_| ((next() % 2001) as f32 - 1000.0) / 256.0).collect()),
    }
}

fn offset(t: MemType, coords: &[i64]) -> Result<usize, ()> {
    let ok = |v: i64, n: u64| if v >= 0 && (v as u64) < n { Ok(v as u64) } else { Err(()) };
    Ok(match t.storage {
        StorageKind::Buffer { elems } => ok(coords[0], elems)?,
        StorageKind::Image { width, height } => {
            (ok(coords[1], height)? * width + ok(coords[0], width)?) * 4 + ok(coords[2], 4)?
        }
    } as usize)
}

fn read(d: &Data, i: usize) -> ScalarValue {
    match d {
        Data::F32(v) => ScalarValue::F32(v[i]),
        Data::I32(v) => ScalarValue::Int(i64::from(v[i])),
    }
}

/// The kernel evaluated point by point; `Err` with the fault the JIT must report.
fn naive(k: &Kernel, types: &[MemType], ops: &mut [Data]) -> Result<(), Fault> {
    let np = k.parallel_dims();
    let rank = k.domain.len();
    let out = k.output();
    let points = |dims: &[u64]| -> Vec<Vec<i64>> {
        let mut all = vec![Vec::new()];
        for &e in dims {
            all = all
                .into_iter()
                .flat_map(|p| (0..e as i64).map(move |i| [p.clone(), vec![i]].concat()))
                .collect();
        }
        all
    };
    let map_at = |m: usize, pt: &[i64]| match eval_map(&k.maps[m], pt) {
        MapEval::Ok(v) => Ok(v),
        _ => Err(Fault::MapUndefined(m)),
    };
    // No parallel point: nothing is written (an empty reduction leaves the identity below).
    if k.domain[..np].contains(&0) {
        return Ok(());
    }
    // Reads of the output see its contents before the launch.
    let before = ops.to_vec();
    for p in points(&k.domain[..np]) {
        let full: Vec<i64> = p.iter().copied().chain(std::iter::repeat_n(0, rank - np)).collect();
        let guard = match &k.guard {
            None => true,
            Some(g) => match eval_map(&g.map, &full) {
                MapEval::Ok(v) => v.iter().zip(&g.bounds).all(|(&x, &b)| x >= 0 && (x as u64) < b),
                _ => return Err(Fault::MapUndefined(types.len())),
            },
        };
        let value = if guard {
            let snapshot: &[Data] = &before;
            let eval = |e: &fbc_dialects::memory::Scalar, pt: &[i64], acc: Option<ScalarValue>| {
                let fault = std::cell::Cell::new(None);
                let mut env = FnEnv {
                    input: |m: usize| {
                        let c = map_at(m, pt)
                            .inspect_err(|f| fault.set(Some(*f)))
                            .map_err(|_| String::new())?;
                        let i = offset(types[m], &c).map_err(|_| {
                            fault.set(Some(Fault::ReadOutOfBounds(m)));
                            String::new()
                        })?;
                        Ok(read(&snapshot[m], i))
                    },
                    load: |m: usize, off: i64| {
                        let i = offset(types[m], &[off]).map_err(|_| {
                            fault.set(Some(Fault::LoadOutOfBounds(m)));
                            String::new()
                        })?;
                        Ok(read(&snapshot[m], i))
                    },
                    dim: |d: usize| Ok(pt[d]),
                    acc,
                };
                e.eval(&mut env).map_err(|msg| match fault.get() {
                    Some(f) => f,
                    None if msg.contains("division by zero") => Fault::DivisionByZero,
                    None if msg.contains("NaN") => Fault::IntOfNan,
                    None => panic!("unexpected evaluation error {msg}"),
                })
            };
            let acc = match k.combine {
                None => eval(&k.body, &full, None)?,
                Some(c) => {
                    let mut acc = c.identity();
                    for r in points(&k.domain[np..]) {
                        let pt: Vec<i64> = p.iter().copied().chain(r).collect();
                        let v = eval(&k.body, &pt, None)?.as_f32();
                        acc = match c {
                            Combine::Add => acc + v,
                            Combine::Max => fmax_nan(acc, v),
                        };
                    }
                    ScalarValue::F32(acc)
                }
            };
            match &k.epilogue {
                Some(e) => eval(e, &full, Some(acc))?,
                None => acc,
            }
        } else {
            ScalarValue::Int(0)
        };
        let c = map_at(out, &full)?;
        let i = offset(types[out], &c).map_err(|_| Fault::WriteOutOfBounds(out))?;
        match &mut ops[out] {
            Data::F32(v) => v[i] = value.as_f32(),
            Data::I32(v) => match value {
                ScalarValue::Int(x) => v[i] = x as i32,
                ScalarValue::F32(_) => panic!("f32 into an i32 output"),
            },
        }
    }
    Ok(())
}

/// A CPU back end under test: the Cranelift or the LLVM JIT.
trait Backend {
    fn name(&self) -> &'static str;
    fn compile(&mut self, k: &Kernel, types: &[MemType]) -> Result<KernelId, Error>;
    fn run(&self, id: KernelId, ops: &mut [OperandMut<'_>]) -> Result<(), Error>;
    /// The back end's IR of the kernel, for failure messages and IR tests.
    fn ir(&mut self, k: &Kernel, types: &[MemType]) -> String;
    fn parallel_runs(&self) -> u64;
    fn compiled(&self) -> usize;
    fn cache_hits(&self) -> u64;
    fn set_min_points_per_thread(&mut self, points: u64);
    fn gemm_shape(&self) -> Option<GemmShape>;
    fn set_gemm_shape(&mut self, shape: Option<GemmShape>);
    fn packed(&self, id: KernelId) -> bool;
}

/// The parts of [`Backend`] that are [`fbc_codegen::cpu::Jit`]'s, for both back ends.
macro_rules! backend {
    ($ty:ty, $name:literal, $ir:expr) => {
        impl Backend for $ty {
            fn name(&self) -> &'static str {
                $name
            }
            fn packed(&self, id: KernelId) -> bool {
                <$ty>::packed(self, id)
            }
            fn gemm_shape(&self) -> Option<GemmShape> {
                <$ty>::gemm_shape(self)
            }
            fn set_gemm_shape(&mut self, shape: Option<GemmShape>) {
                <$ty>::set_gemm_shape(self, shape)
            }
            fn compile(&mut self, k: &Kernel, types: &[MemType]) -> Result<KernelId, Error> {
                <$ty>::compile(self, k, types)
            }
            fn run(&self, id: KernelId, ops: &mut [OperandMut<'_>]) -> Result<(), Error> {
                <$ty>::run(self, id, ops)
            }
            fn ir(&mut self, k: &Kernel, types: &[MemType]) -> String {
                let ir: fn(&mut $ty, &Kernel, &[MemType]) -> Result<String, Error> = $ir;
                ir(self, k, types).unwrap_or_else(|e| e.to_string())
            }
            fn parallel_runs(&self) -> u64 {
                <$ty>::parallel_runs(self)
            }
            fn compiled(&self) -> usize {
                <$ty>::compiled(self)
            }
            fn cache_hits(&self) -> u64 {
                <$ty>::cache_hits(self)
            }
            fn set_min_points_per_thread(&mut self, points: u64) {
                <$ty>::set_min_points_per_thread(self, points)
            }
        }
    };
}

backend!(Jit, "cranelift", |j, k, t| j.ir_text(k, t));
#[cfg(feature = "llvm")]
backend!(fbc_codegen::llvm::LlvmJit, "llvm", |j, k, t| j.llvm().ir_text(k, t));

/// Every CPU back end built, each on at most `threads` threads.
fn backends(threads: usize) -> Vec<Box<dyn Backend>> {
    vec![
        Box::new(Jit::with_threads(threads).expect("a host JIT")),
        #[cfg(feature = "llvm")]
        Box::new(
            fbc_codegen::llvm::LlvmJit::with_options(threads, fbc_codegen::llvm::Cpu::Host)
                .expect("an LLVM JIT"),
        ),
    ]
}

fn run_jit(
    jit: &mut dyn Backend,
    k: &Kernel,
    types: &[MemType],
    ops: &mut [Data],
) -> Result<(), Error> {
    let mut views: Vec<OperandMut<'_>> = ops
        .iter_mut()
        .map(|d| match d {
            Data::F32(v) => OperandMut::F32(v),
            Data::I32(v) => OperandMut::I32(v),
        })
        .collect();
    let id = jit.compile(k, types)?;
    jit.run(id, &mut views)
}

/// Every back end on at most `threads` threads, splitting even the smallest launches (one point
/// per thread is enough), so the tests' small kernels exercise the threaded paths.
fn jits_with(threads: usize) -> Vec<Box<dyn Backend>> {
    let mut all = backends(threads);
    for jit in &mut all {
        jit.set_min_points_per_thread(1);
    }
    all
}

/// Runs the launch both ways on the same inputs and checks bit equality of every operand
/// (the output, and that inputs are untouched), with every back end on 1 and on 4 threads.
/// Returns the last back end's output.
fn check_with(types: &[&str], launch: &str, modulo: i32, setup: impl Fn(&mut [Data])) -> Data {
    let (k, tys) = kernel(types, launch);
    let mut ops: Vec<Data> =
        tys.iter().enumerate().map(|(i, &t)| data(t, i as u32 + 1, modulo)).collect();
    setup(&mut ops);
    let mut want = ops.clone();
    naive(&k, &tys, &mut want).unwrap_or_else(|f| panic!("naive evaluation faulted: {f}"));
    let mut out = None;
    for threads in [1, 4] {
        for mut jit in jits_with(threads) {
            let jit = &mut *jit;
            let mut got = ops.clone();
            run_jit(jit, &k, &tys, &mut got)
                .unwrap_or_else(|e| panic!("{}: {e}\n{}", jit.name(), jit.ir(&k, &tys)));
            assert_bits(&got, &want, &format!("{}, {threads} threads", jit.name()));
            out = got.pop();
        }
    }
    out.expect("an output")
}

/// Asserts that every operand of `got` has the bits of `want`'s, naming the first difference.
fn assert_bits(got: &[Data], want: &[Data], what: &str) {
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let (gb, wb) = (g.bits(), w.bits());
        let first = gb.iter().zip(&wb).position(|(a, b)| a != b);
        assert!(
            first.is_none(),
            "{what}: operand {i} differs first at element {first:?}: jit {:?}, naive {:?}",
            first.map(|f| gb[f]),
            first.map(|f| wb[f])
        );
    }
}

fn check(types: &[&str], launch: &str) -> Data {
    check_with(types, launch, 1 << 30, |_| {})
}

/// The fault the JIT reports, after checking the naive evaluation faults the same way.
fn fault(types: &[&str], launch: &str, setup: impl Fn(&mut [Data])) -> Fault {
    let (k, tys) = kernel(types, launch);
    let mut ops: Vec<Data> =
        tys.iter().enumerate().map(|(i, &t)| data(t, i as u32 + 1, 8)).collect();
    setup(&mut ops);
    let want = naive(&k, &tys, &mut ops.clone()).expect_err("the naive evaluation faults");
    let mut reported = Vec::new();
    for threads in [1, 4] {
        for mut jit in jits_with(threads) {
            let name = jit.name();
            match run_jit(&mut *jit, &k, &tys, &mut ops.clone()) {
                Err(Error::Runtime { kernel, reason }) => {
                    assert_eq!(kernel, "k");
                    assert_eq!(reason, want, "{name}, {threads} threads");
                    reported.push(reason);
                }
                other => {
                    panic!("{name}, {threads} threads: expected a runtime fault, got {other:?}")
                }
            }
        }
    }
    reported[0]
}

const P: &str = "\"parallel\"";
const R: &str = "\"reduction\"";

#[test]
fn elementwise_with_broadcast_map() {
    // out[i, j] = x0[i, j] * x1[j] + 1 (a bias row broadcast over rows).
    let out = check(
        &["!memory.buffer<24, f32>", "!memory.buffer<6, f32>", "!memory.buffer<24, f32>"],
        &format!(
            "domain = [4, 6], iterators = [{P}, {P}], maps = [(d0, d1) -> (d0 * 6 + d1), (d0, d1) -> (d1), \
             (d0, d1) -> (d0 * 6 + d1)], body = \"x0 * x1 + 1.0\""
        ),
    );
    let Data::F32(v) = out else { panic!() };
    let (Data::F32(a), Data::F32(b)) = (
        data(MemType::buffer(24, ElemType::F32), 1, 0),
        data(MemType::buffer(6, ElemType::F32), 2, 0),
    ) else {
        panic!()
    };
    // A hand-worked element: row 2, column 5.
    assert_eq!(v[2 * 6 + 5], a[17] * b[5] + 1.0);
}

#[test]
fn matmul_with_reduction_and_epilogue() {
    // y = relu(a · b + c) with a: 5×7, b: 7×3, c: 3 (bias).
    check(
        &["!memory.buffer<35, f32>", "!memory.buffer<21, f32>", "!memory.buffer<3, f32>", "!memory.buffer<15, f32>"],
        &format!(
            "domain = [5, 3, 7], iterators = [{P}, {P}, {R}], maps = [(d0, d1, d2) -> (d0 * 7 + d2), \
             (d0, d1, d2) -> (d2 * 3 + d1), (d0, d1, d2) -> (d1), (d0, d1, d2) -> (d0 * 3 + d1)], \
             body = \"x0 * x1\", combine = \"add\", epilogue = \"max(acc + x2, 0.0)\""
        ),
    );
}

#[test]
fn matmul_hand_worked() {
    let (k, tys) = kernel(
        &["!memory.buffer<4, f32>", "!memory.buffer<4, f32>", "!memory.buffer<4, f32>"],
        &format!(
            "domain = [2, 2, 2], iterators = [{P}, {P}, {R}], maps = [(d0, d1, d2) -> (d0 * 2 + d2), \
             (d0, d1, d2) -> (d2 * 2 + d1), (d0, d1, d2) -> (d0 * 2 + d1)], body = \"x0 * x1\", combine = \"add\""
        ),
    );
    for mut jit in backends(1) {
        let mut ops = vec![
            Data::F32(vec![1.0, 2.0, 3.0, 4.0]),
            Data::F32(vec![5.0, 6.0, 7.0, 8.0]),
            Data::F32(vec![0.0; 4]),
        ];
        run_jit(&mut *jit, &k, &tys, &mut ops).unwrap();
        assert_eq!(ops[2], Data::F32(vec![19.0, 22.0, 43.0, 50.0]), "{}", jit.name());
    }
}

#[test]
fn reduce_max_propagates_nan() {
    let launch = format!(
        "domain = [3, 5], iterators = [{P}, {R}], maps = [(d0, d1) -> (d0 * 5 + d1), (d0, d1) -> (d0)], \
         body = \"x0\", combine = \"max\""
    );
    let types = ["!memory.buffer<15, f32>", "!memory.buffer<3, f32>"];
    let out = check_with(&types, &launch, 0, |ops| {
        if let Data::F32(v) = &mut ops[0] {
            v[5 + 3] = f32::NAN; // row 1
            v[10..15].copy_from_slice(&[-0.0, 0.0, -1.0, f32::NEG_INFINITY, -0.0]);
            // row 2
        }
    });
    let Data::F32(v) = out else { panic!() };
    assert!(v[1].is_nan());
    assert!(!v[0].is_nan());
    // Signed zeros: `fmax_nan` keeps the first of equal values (-0 >= +0), so row 2 is -0; the
    // bit comparison in `check_with` holds the JIT to that.
    assert_eq!(v[2], 0.0);
}

#[test]
fn guard_writes_zero_padding() {
    // A 3×5 tensor stored in a 4×8 padded buffer; the padding must be 0 and the body must not
    // read outside the 15-element input there.
    let out = check(
        &["!memory.buffer<15, f32>", "!memory.buffer<32, f32>"],
        &format!(
            "domain = [4, 8], iterators = [{P}, {P}], maps = [(d0, d1) -> (d0 * 5 + d1), (d0, d1) -> (d0 * 8 + d1)], \
             body = \"exp(x0) + 2.0\", guard = (d0, d1) -> (d0, d1), guard_bounds = [3, 5]"
        ),
    );
    let Data::F32(v) = out else { panic!() };
    assert_eq!(v[3 * 8 + 2], 0.0);
    assert_eq!(v[7], 0.0);
    assert!(v[0] > 2.0);
}

#[test]
fn image_coordinate_maps() {
    // A 4×6 matrix in an R-Tile-like image: texel (x, y) = (j floordiv 4 + 2 * (i floordiv 2), i mod 2),
    // channel j mod 4 — read from a linear buffer, then transposed back into a buffer.
    let to_image = format!(
        "domain = [2, 4, 4], iterators = [{P}, {P}, {P}], \
         maps = [(d0, d1, d2) -> ((d1 floordiv 2) * 12 + (d1 mod 2) * 6 + d0 * 4 + d2), (d0, d1, d2) -> (d0 + (d1 floordiv 2) * 2, d1 mod 2, d2)], \
         body = \"x0 * 2.0\", guard = (d0, d1, d2) -> (d0 * 4 + d2), guard_bounds = [6]"
    );
    check(&["!memory.buffer<24, f32>", "!memory.image2d<[4, 2], f32>"], &to_image);
    let from_image = format!(
        "domain = [6, 4], iterators = [{P}, {P}], \
         maps = [(d0, d1) -> (d0 floordiv 4 + (d1 floordiv 2) * 2, d1 mod 2, d0 mod 4), (d0, d1) -> (d0 * 4 + d1)], \
         body = \"x0 - 1.0\""
    );
    check(&["!memory.image2d<[4, 2], f32>", "!memory.buffer<24, f32>"], &from_image);
}

#[test]
fn integer_load_gather() {
    // Embedding lookup: out[t, e] = table[ids[t] * 4 + e], ids in [0, 5).
    let out = check_with(
        &["!memory.buffer<6, i32>", "!memory.buffer<20, f32>", "!memory.buffer<24, f32>"],
        &format!(
            "domain = [6, 4], iterators = [{P}, {P}], maps = [(d0, d1) -> (d0), (d0, d1) -> (d1), (d0, d1) -> (d0 * 4 + d1)], \
             body = \"x1[x0 * 4 + d1]\""
        ),
        5,
        |_| {},
    );
    let Data::F32(v) = out else { panic!() };
    let Data::I32(ids) = data(MemType::buffer(6, ElemType::I32), 1, 5) else { panic!() };
    let Data::F32(t) = data(MemType::buffer(20, ElemType::F32), 2, 5) else { panic!() };
    assert_eq!(v[3 * 4 + 1], t[ids[3] as usize * 4 + 1]);
}

#[test]
fn floor_div_mod_on_negative_intermediates() {
    // Maps: (d0 - 5) floordiv 3 + 2 and (d0 - 5) mod 3 range over negative values first; the
    // payload's integer `/` and `%` floor too (by 4: shift and mask; by 3 and by -3: division).
    let out = check(
        &["!memory.buffer<12, f32>", "!memory.buffer<11, i32>"],
        &format!(
            "domain = [11], iterators = [{P}], \
             maps = [(d0) -> (((d0 - 5) floordiv 3 + 2) * 3 + (d0 - 5) mod 3), (d0) -> (d0)], \
             body = \"int(x0 * 0.0) + (d0 - 5) / 4 * 1000 + (d0 - 5) % 4 * 100 + (d0 - 5) / 3 * 10 + (d0 - 5) % -3\""
        ),
    );
    let Data::I32(v) = out else { panic!() };
    // d0 = 0: (-5)/4 = -2, (-5)%4 = 3, (-5)/3 = -2, (-5)%(-3) = -2.
    assert_eq!(v[0], -2000 + 300 - 20 - 2);
    // d0 = 10: 5/4 = 1, 5%4 = 1, 5/3 = 1, 5%(-3) = -1.
    assert_eq!(v[10], 1000 + 100 + 10 - 1);
}

#[test]
fn ceildiv_and_non_constant_divisors() {
    check(
        &["!memory.buffer<40, f32>", "!memory.buffer<35, f32>"],
        &format!(
            "domain = [5, 7], iterators = [{P}, {P}], \
             maps = [(d0, d1) -> ((d0 * 7 + d1 - 9) ceildiv 4 + (d1 - 3) floordiv (d0 + 1) + 9 + (d1 - 3) mod (d0 + 2)), (d0, d1) -> (d0 * 7 + d1)], \
             body = \"x0 + float(d1 - 3) / float(d0 + 1)\""
        ),
    );
}

/// Divisions by constants of dividends proven non-negative and below 2^31 are done in 32 bits
/// (a reshape of a transposed view: `(flat mod 768, flat floordiv 768)`, and a `ceildiv`), with
/// the same results; a dividend that may exceed 2^31 keeps the 64-bit division.
#[test]
fn non_negative_divisions_by_constants() {
    let launch = format!(
        "domain = [45, 512], iterators = [{P}, {P}], \
         maps = [(d0, d1) -> ((d0 * 512 + d1) mod 768 * 30 + (d0 * 512 + d1) floordiv 768), \
         (d0, d1) -> ((d0 * 512 + d1) ceildiv 7), (d0, d1) -> (d0 * 512 + d1)], \
         body = \"x0 - x1\""
    );
    let types =
        ["!memory.buffer<23040, f32>", "!memory.buffer<3293, f32>", "!memory.buffer<23040, f32>"];
    check(&types, &launch);
    #[cfg(feature = "llvm")]
    {
        let (k, tys) = kernel(&types, &launch);
        let mut llvm = fbc_codegen::llvm::LlvmJit::with_options(1, fbc_codegen::llvm::Cpu::Host)
            .expect("an LLVM JIT");
        let ir = llvm.llvm().ir_text(&k, &tys).expect("IR");
        assert!(ir.contains("urem i32") || ir.contains("urem <"), "{ir}");
        assert!(!ir.contains("urem i64") && !ir.contains("udiv i64"), "{ir}");
    }
    // `d0 · 2^31 + d1` reaches 2^31: the division stays in 64 bits, with the same results.
    check(
        &["!memory.buffer<8, f32>", "!memory.buffer<6, f32>"],
        &format!(
            "domain = [2, 3], iterators = [{P}, {P}], \
             maps = [(d0, d1) -> ((d0 * 2147483648 + d1) floordiv 1073741823 + (d0 * 2147483648 + d1) mod 3), \
             (d0, d1) -> (d0 * 3 + d1)], body = \"x0\""
        ),
    );
}

#[test]
fn payload_operators_match_the_evaluator() {
    // Every unary and binary operator, NaN-propagating min/max, comparisons with NaN, select
    // on both kinds, integer abs/neg/min/max, the transcendental functions.
    let out = check_with(
        &["!memory.buffer<64, f32>", "!memory.buffer<64, i32>", "!memory.buffer<64, f32>"],
        &format!(
            "domain = [64], iterators = [{P}], maps = [(d0) -> (d0), (d0) -> (63 - d0), (d0) -> (d0)], \
             body = \"exp(x0 * 0.25) + log(abs(x0) + 1.0) + sqrt(abs(x0)) + rsqrt(abs(x0) + 0.5) + tanh(x0) + erf(x0) \
             + sigmoid(x0 * 3.0) + floor(x0) + max(x0, nan) * 0.0 + min(x0, 1.0) + float(max(x1, 3) - min(x1, 2) + abs(-x1)) \
             + select(x0 > 0.5 || x0 != x0, 1.0, -1.0) + float(select(!(x0 < -1.0) && x1 >= 2, x1, -x1)) \
             + float((x0 >= x0) + (x0 <= 0.0) + (x0 == 0.5) + (x1 != 1) + (x1 < 3) + (x1 > 0) + (x1 <= 4) + (x1 == 5)) \
             + float(int(select(x0 == x0, x0, 0.0) * 10.0)) - x0 * x0 / (x0 + 0.25)\""
        ),
        7,
        |ops| {
            if let Data::F32(v) = &mut ops[0] {
                v[3] = f32::NAN;
                v[4] = f32::INFINITY;
                v[5] = -0.0;
                v[6] = 0.5;
            }
        },
    );
    let Data::F32(v) = out else { panic!() };
    assert!(v[3].is_nan(), "NaN propagates through max");
}

#[test]
fn select_only_evaluates_the_taken_branch() {
    // The gather in the untaken branch would be out of bounds (ids up to 7, table of 4).
    check_with(
        &["!memory.buffer<16, i32>", "!memory.buffer<4, f32>", "!memory.buffer<16, f32>"],
        &format!(
            "domain = [16], iterators = [{P}], maps = [(d0) -> (d0), (d0) -> (0), (d0) -> (d0)], \
             body = \"select(x0 < 4, x1[x0], -1.0) + float(select(x0 != 0, 12 / x0, 0))\""
        ),
        8,
        |_| {},
    );
}

#[test]
fn i32_output_truncates_like_the_reference() {
    check(
        &["!memory.buffer<8, i32>", "!memory.buffer<8, i32>"],
        &format!(
            "domain = [8], iterators = [{P}], maps = [(d0) -> (d0), (d0) -> (7 - d0)], \
             body = \"x0 * 65536 * 65536 + x0 * 3 - d0\""
        ),
    );
}

#[test]
fn two_reduction_dims_sum_in_row_major_order() {
    check(
        &["!memory.buffer<120, f32>", "!memory.buffer<4, f32>"],
        &format!(
            "domain = [4, 5, 6], iterators = [{P}, {R}, {R}], maps = [(d0, d1, d2) -> (d0 * 30 + d2 * 5 + d1), (d0, d1, d2) -> (d0)], \
             body = \"x0 * x0 + 0.1\", combine = \"add\", epilogue = \"sqrt(acc / 30.0)\""
        ),
    );
}

#[test]
fn empty_domains_write_nothing_or_the_identity() {
    // An empty reduction leaves `acc` at the identity, then the epilogue runs.
    let out = check(
        &["!memory.buffer<1, f32>", "!memory.buffer<3, f32>"],
        &format!(
            "domain = [3, 0], iterators = [{P}, {R}], maps = [(d0, d1) -> (d1), (d0, d1) -> (d0)], \
             body = \"x0\", combine = \"max\", epilogue = \"max(acc, -5.0) + float(d0)\""
        ),
    );
    assert_eq!(out, Data::F32(vec![-5.0, -4.0, -3.0]));
    let out = check(
        &["!memory.buffer<1, f32>", "!memory.buffer<3, f32>"],
        &format!(
            "domain = [3, 0, 2], iterators = [{P}, {R}, {R}], \
             maps = [(d0, d1, d2) -> (d1), (d0, d1, d2) -> (d0)], body = \"x0\", combine = \"add\""
        ),
    );
    assert_eq!(out, Data::F32(vec![0.0; 3]));
    // An empty parallel sub-domain writes nothing.
    let out = check(
        &["!memory.buffer<1, f32>", "!memory.buffer<3, f32>"],
        &format!(
            "domain = [0, 3], iterators = [{P}, {R}], maps = [(d0, d1) -> (0), (d0, d1) -> (d0)], \
             body = \"x0\", combine = \"add\", epilogue = \"acc + 1.0\""
        ),
    );
    assert_eq!(out, data(MemType::buffer(3, ElemType::F32), 2, 0));
}

#[test]
fn reads_of_the_output_see_it_before_the_launch() {
    // out[i] = out[i] + out[(i + 1) mod 8]: a shift that would see updated values if the
    // kernel read the output in place.
    let out = check(
        &["!memory.buffer<8, f32>", "!memory.buffer<8, f32>"],
        &format!(
            "domain = [8], iterators = [{P}], maps = [(d0) -> (d0), (d0) -> (d0)], \
             body = \"x1 + x1[(d0 + 1) % 8] + x0 * 0.0\""
        ),
    );
    let Data::F32(v) = out else { panic!() };
    let Data::F32(o) = data(MemType::buffer(8, ElemType::F32), 2, 0) else { panic!() };
    assert_eq!(v[7], o[7] + o[0]);
    assert_eq!(v[6], o[6] + o[7]);
}

#[test]
fn out_of_bounds_reads_and_writes_fault() {
    // A miscompiled map: row stride 5 on a 4×4 buffer reads past the end.
    let f = fault(
        &["!memory.buffer<16, f32>", "!memory.buffer<16, f32>"],
        &format!("domain = [4, 4], iterators = [{P}, {P}], maps = [(d0, d1) -> (d0 * 5 + d1), (d0, d1) -> (d0 * 4 + d1)], body = \"x0\""),
        |_| {},
    );
    assert_eq!(f, Fault::ReadOutOfBounds(0));
    let f = fault(
        &["!memory.buffer<16, f32>", "!memory.buffer<16, f32>"],
        &format!("domain = [4, 4], iterators = [{P}, {P}], maps = [(d0, d1) -> (d0 * 4 + d1), (d0, d1) -> (d0 * 4 + d1 - 1)], body = \"x0\""),
        |_| {},
    );
    assert_eq!(f, Fault::WriteOutOfBounds(1));
    // An image coordinate out of its extent, although the element offset would be in range.
    let f = fault(
        &["!memory.image2d<[2, 2], f32>", "!memory.buffer<8, f32>"],
        &format!("domain = [8], iterators = [{P}], maps = [(d0) -> (d0 floordiv 4 + 1, 0, d0 mod 4), (d0) -> (d0)], body = \"x0\""),
        |_| {},
    );
    assert_eq!(f, Fault::ReadOutOfBounds(0));
}

#[test]
fn gathers_division_and_int_nan_fault() {
    let gather = format!(
        "domain = [4], iterators = [{P}], maps = [(d0) -> (d0), (d0) -> (0), (d0) -> (d0)], body = \"x1[x0 - 2]\""
    );
    let types = ["!memory.buffer<4, i32>", "!memory.buffer<4, f32>", "!memory.buffer<4, f32>"];
    assert_eq!(fault(&types, &gather, |_| {}), Fault::LoadOutOfBounds(1));
    let div = format!("domain = [4], iterators = [{P}], maps = [(d0) -> (d0), (d0) -> (d0)], body = \"x0 / (x0 - x0)\"");
    assert_eq!(
        fault(&["!memory.buffer<4, i32>", "!memory.buffer<4, i32>"], &div, |_| {}),
        Fault::DivisionByZero
    );
    let nan = format!(
        "domain = [4], iterators = [{P}], maps = [(d0) -> (d0), (d0) -> (d0)], body = \"int(x0)\""
    );
    let set_nan = |ops: &mut [Data]| {
        if let Data::F32(v) = &mut ops[0] {
            v[2] = f32::NAN;
        }
    };
    assert_eq!(
        fault(&["!memory.buffer<4, f32>", "!memory.buffer<4, i32>"], &nan, set_nan),
        Fault::IntOfNan
    );
    let map = format!("domain = [4], iterators = [{P}], maps = [(d0) -> (d0 floordiv (d0 - 1)), (d0) -> (d0)], body = \"x0\"");
    assert_eq!(
        fault(&["!memory.buffer<4, f32>", "!memory.buffer<4, f32>"], &map, |_| {}),
        Fault::MapUndefined(0)
    );
}

#[test]
fn operands_must_match_the_compiled_types() {
    let (k, tys) = kernel(
        &["!memory.buffer<4, f32>", "!memory.buffer<4, f32>"],
        &format!(
            "domain = [4], iterators = [{P}], maps = [(d0) -> (d0), (d0) -> (d0)], body = \"x0\""
        ),
    );
    for mut jit in backends(1) {
        let id = jit.compile(&k, &tys).unwrap();
        let (mut a, mut b) = (vec![0.0f32; 3], vec![0.0f32; 4]);
        let e = jit.run(id, &mut [OperandMut::F32(&mut a), OperandMut::F32(&mut b)]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "kernel `k`: operand 0 has 3 f32 elements, the kernel was compiled for !memory.buffer<4, f32> (4 f32 elements)"
        );
        let mut c = vec![0i32; 4];
        assert!(jit.run(id, &mut [OperandMut::F32(&mut b), OperandMut::I32(&mut c)]).is_err());
        assert!(jit.run(id, &mut [OperandMut::F32(&mut b)]).is_err());
    }
}

#[test]
fn invalid_kernels_are_errors_not_panics() {
    // A map that could overflow 64 bits over the domain.
    let (k, tys) = kernel(
        &["!memory.buffer<4, f32>", "!memory.buffer<4, f32>"],
        &format!(
            "domain = [4], iterators = [{P}], maps = [(d0) -> (d0 * 4611686018427387904 * 4), (d0) -> (d0)], body = \"x0\""
        ),
    );
    for mut jit in backends(1) {
        let e = jit.compile(&k, &tys).unwrap_err();
        assert!(e.to_string().contains("64-bit range"), "{}: {e}", jit.name());
    }
    // Operand types the kernel does not fit (two results for a buffer).
    let (k, _) = kernel(
        &["!memory.buffer<4, f32>", "!memory.buffer<4, f32>"],
        &format!(
            "domain = [4], iterators = [{P}], maps = [(d0) -> (d0), (d0) -> (d0)], body = \"x0\""
        ),
    );
    for mut jit in backends(1) {
        let e = jit
            .compile(&k, &[MemType::image(1, 1), MemType::buffer(4, ElemType::F32)])
            .unwrap_err();
        assert!(matches!(e, Error::Kernel { .. }), "{}: {e}", jit.name());
    }
}

#[test]
fn kernels_are_cached_by_attributes_and_types() {
    let launch = |name: &str| {
        kernel(
            &["!memory.buffer<4, f32>", "!memory.buffer<4, f32>"],
            &format!("domain = [4], iterators = [{P}], maps = [(d0) -> (d0), (d0) -> (d0)], body = \"x0 + 1.0\", source = \"{name}\""),
        )
    };
    for mut jit in backends(1) {
        let (k1, t1) = launch("tensor.add");
        let (mut k2, t2) = launch("tensor.sub");
        k2.name = "other".into();
        let a = jit.compile(&k1, &t1).unwrap();
        let b = jit.compile(&k2, &t2).unwrap();
        assert_eq!(a, b);
        assert_eq!((jit.compiled(), jit.cache_hits()), (1, 1));
        let c = jit
            .compile(&k1, &[MemType::buffer(4, ElemType::F32), MemType::buffer(8, ElemType::F32)])
            .unwrap();
        assert_ne!(a, c);
        assert_eq!(jit.compiled(), 2);
    }
}

#[test]
fn proven_accesses_have_no_checks() {
    // Every access of a plain matmul is in range by interval analysis: no compare against an
    // operand length remains; a gather keeps its one check.
    let (k, tys) = kernel(
        &["!memory.buffer<35, f32>", "!memory.buffer<21, f32>", "!memory.buffer<15, f32>"],
        &format!(
            "domain = [5, 3, 7], iterators = [{P}, {P}, {R}], maps = [(d0, d1, d2) -> (d0 * 7 + d2), \
             (d0, d1, d2) -> (d2 * 3 + d1), (d0, d1, d2) -> (d0 * 3 + d1)], body = \"x0 * x1\", combine = \"add\""
        ),
    );
    let ir = Jit::new().unwrap().ir_text(&k, &tys).unwrap();
    assert!(!ir.contains("uge"), "{ir}");
    let (k, tys) = kernel(
        &["!memory.buffer<6, i32>", "!memory.buffer<20, f32>", "!memory.buffer<24, f32>"],
        &format!(
            "domain = [6, 4], iterators = [{P}, {P}], maps = [(d0, d1) -> (d0), (d0, d1) -> (d1), (d0, d1) -> (d0 * 4 + d1)], \
             body = \"x1[x0 * 4 + d1]\""
        ),
    );
    let ir = Jit::new().unwrap().ir_text(&k, &tys).unwrap();
    assert_eq!(ir.matches("icmp uge").count(), 1, "{ir}");
}

#[test]
fn interchanged_reductions_keep_the_summation_order() {
    // Column reductions read down a column: the JIT runs the reduction outside the columns
    // with one accumulator per column; every column still combines in row order, so the
    // results are bit-identical, NaN and epilogue included.
    let types = ["!memory.buffer<63, f32>", "!memory.buffer<9, f32>", "!memory.buffer<9, f32>"];
    for combine in ["add", "max"] {
        let launch = format!(
            "domain = [9, 7], iterators = [{P}, {R}], maps = [(d0, d1) -> (d1 * 9 + d0), (d0, d1) -> (d0), \
             (d0, d1) -> (d0)], body = \"x0 * 3.0 - x0 * x0\", combine = \"{combine}\", epilogue = \"acc * x1 + 0.5\""
        );
        check_with(&types, &launch, 0, |ops| {
            if let Data::F32(v) = &mut ops[0] {
                v[2 * 9 + 4] = f32::NAN;
            }
        });
        let (k, tys) = kernel(&types, &launch);
        let ir = Jit::new().unwrap().ir_text(&k, &tys).unwrap();
        assert!(ir.contains("load.i64 notrap aligned v0+24"), "no scratch operand:\n{ir}");
    }
    // Matmul with a bias epilogue, several rows.
    check(
        &["!memory.buffer<60, f32>", "!memory.buffer<132, f32>", "!memory.buffer<11, f32>", "!memory.buffer<55, f32>"],
        &format!(
            "domain = [5, 11, 12], iterators = [{P}, {P}, {R}], maps = [(d0, d1, d2) -> (d0 * 12 + d2), \
             (d0, d1, d2) -> (d2 * 11 + d1), (d0, d1, d2) -> (d1), (d0, d1, d2) -> (d0 * 11 + d1)], \
             body = \"x0 * x1\", combine = \"add\", epilogue = \"acc + x2\""
        ),
    );
}

#[test]
fn interchange_over_an_inner_parallel_dimension() {
    // The contiguous dimension is d0, not the last parallel one (d1 reads with stride 5): the
    // accumulators run over d0, the output is still written at every (d0, d1).
    let types = ["!memory.buffer<240, f32>", "!memory.buffer<20, f32>"];
    let launch = format!(
        "domain = [5, 4, 12], iterators = [{P}, {P}, {R}], maps = [(d0, d1, d2) -> (d2 * 20 + d1 * 5 + d0), \
         (d0, d1, d2) -> (d0 * 4 + d1)], body = \"x0 * x0 - x0\", combine = \"add\", epilogue = \"acc + float(d1)\""
    );
    check(&types, &launch);
    let (k, tys) = kernel(&types, &launch);
    let ir = Jit::new().unwrap().ir_text(&k, &tys).unwrap();
    assert!(ir.contains("load.i64 notrap aligned v0+16"), "no scratch operand:\n{ir}");
}

/// The operands after a JIT run, or its error.
type Run = Result<Vec<Data>, Error>;

/// Runs the launch on 1 and on 4 threads (after `setup` of the data) with each back end;
/// returns, per back end, both results and how many of the 4-thread JIT's runs were split.
fn on_threads(types: &[&str], launch: &str, setup: impl Fn(&mut [Data])) -> Vec<(Run, Run, u64)> {
    let (k, tys) = kernel(types, launch);
    let mut ops: Vec<Data> =
        tys.iter().enumerate().map(|(i, &t)| data(t, i as u32 + 1, 1 << 30)).collect();
    setup(&mut ops);
    let run = |jit: &mut dyn Backend| {
        let mut got = ops.clone();
        run_jit(jit, &k, &tys, &mut got).map(|()| got)
    };
    jits_with(1)
        .into_iter()
        .zip(jits_with(4))
        .map(|(mut one, mut four)| {
            let (a, b) = (run(&mut *one), run(&mut *four));
            assert_eq!(one.parallel_runs(), 0);
            (a, b, four.parallel_runs())
        })
        .collect()
}

#[test]
fn threaded_launches_are_bit_identical() {
    // A matmul with a transcendental epilogue, an interchanged one (split along the rows, the
    // accumulators per thread), and rows packed four to a texel (chunks aligned to 4).
    let cases = [
        (
            vec!["!memory.buffer<1920, f32>", "!memory.buffer<1600, f32>", "!memory.buffer<40, f32>", "!memory.buffer<1920, f32>"],
            format!(
                "domain = [48, 40, 40], iterators = [{P}, {P}, {R}], maps = [(d0, d1, d2) -> (d0 * 40 + d2), \
                 (d0, d1, d2) -> (d1 * 40 + d2), (d0, d1, d2) -> (d1), (d0, d1, d2) -> (d0 * 40 + d1)], \
                 body = \"x0 * x1\", combine = \"add\", epilogue = \"tanh(acc + x2)\""
            ),
        ),
        (
            vec!["!memory.buffer<1200, f32>", "!memory.buffer<1200, f32>", "!memory.buffer<900, f32>"],
            format!(
                "domain = [30, 30, 40], iterators = [{P}, {P}, {R}], maps = [(d0, d1, d2) -> (d0 * 40 + d2), \
                 (d0, d1, d2) -> (d2 * 30 + d1), (d0, d1, d2) -> (d0 * 30 + d1)], body = \"x0 * x1\", combine = \"add\""
            ),
        ),
        (
            vec!["!memory.buffer<1560, f32>", "!memory.image2d<[52, 8], f32>"],
            format!(
                "domain = [30, 13, 4], iterators = [{P}, {P}, {P}], maps = [(d0, d1, d2) -> (d0 * 52 + d1 * 4 + d2), \
                 (d0, d1, d2) -> (d1 + (d0 mod 4) * 13, d0 floordiv 4, d2)], body = \"exp(x0) - x0 * float(d0)\""
            ),
        ),
    ];
    for (types, launch) in &cases {
        check(types, launch);
        for (one, four, split) in on_threads(types, launch, |_| {}) {
            let (one, four) = (one.expect("runs"), four.expect("runs"));
            assert_eq!(split, 1, "{launch}");
            for (a, b) in one.iter().zip(&four) {
                assert_eq!(a.bits(), b.bits(), "{launch}");
            }
        }
    }
}

#[test]
fn racy_splits_run_on_one_thread() {
    // Reads its own output (a snapshot): never split, still the values before the launch.
    let types = ["!memory.buffer<256, f32>", "!memory.buffer<256, f32>"];
    let reads_out = format!(
        "domain = [16, 16], iterators = [{P}, {P}], maps = [(d0, d1) -> (d0 * 16 + d1), (d0, d1) -> (d0 * 16 + d1)], \
         body = \"x1 + x1[(d0 * 16 + d1 + 17) % 256] + x0\""
    );
    check(&types, &reads_out);
    for (one, four, split) in on_threads(&types, &reads_out, |_| {}) {
        assert_eq!(split, 0);
        assert_eq!(one.expect("runs")[1].bits(), four.expect("runs")[1].bits());
    }
    // The split dimension is the fast one of the output: chunks would interleave.
    let strided = format!(
        "domain = [16, 16], iterators = [{P}, {P}], maps = [(d0, d1) -> (d0 * 16 + d1), (d0, d1) -> (d1 * 16 + d0)], \
         body = \"x0 * 2.0\""
    );
    check(&types, &strided);
    for (.., split) in on_threads(&types, &strided, |_| {}) {
        assert_eq!(split, 0);
    }
}

#[test]
fn faults_in_chunks_are_the_single_threaded_fault() {
    // Gather rows by index, divide by a per-row integer: a bad index in one row and a zero
    // divisor in another, in different chunks of four rows; the first in order is reported.
    let types = [
        "!memory.buffer<16, i32>",
        "!memory.buffer<64, f32>",
        "!memory.buffer<16, i32>",
        "!memory.buffer<64, f32>",
    ];
    let launch = format!(
        "domain = [16, 4], iterators = [{P}, {P}], maps = [(d0, d1) -> (d0), (d0, d1) -> (0), (d0, d1) -> (d0), \
         (d0, d1) -> (d0 * 4 + d1)], body = \"x1[x0 * 4 + d1] + float(10 / x2)\""
    );
    let set = |bad_row: usize, zero_row: usize| {
        move |ops: &mut [Data]| {
            if let Data::I32(v) = &mut ops[0] {
                v.iter_mut().enumerate().for_each(|(i, x)| *x = (i as i32 * 7) % 16);
                v[bad_row] = 16;
            }
            if let Data::I32(v) = &mut ops[2] {
                v.iter_mut().for_each(|x| *x = 3);
                v[zero_row] = 0;
            }
        }
    };
    for (bad_row, zero_row, want) in [
        (13, 6, Fault::DivisionByZero),
        (2, 13, Fault::LoadOutOfBounds(1)),
        (9, 9, Fault::LoadOutOfBounds(1)),
    ] {
        assert_eq!(fault(&types, &launch, set(bad_row, zero_row)), want);
        for (one, four, split) in on_threads(&types, &launch, set(bad_row, zero_row)) {
            assert_eq!(split, 1);
            let (Err(a), Err(b)) = (one, four) else { panic!("both runs fault") };
            assert_eq!(a, Error::Runtime { kernel: "k".into(), reason: want });
            assert_eq!(a, b);
        }
    }
}

#[cfg(feature = "llvm")]
#[test]
fn llvm_vectorises_parallel_loops_and_keeps_checks() {
    use fbc_codegen::llvm::{Cpu, LlvmJit};
    // A contiguous elementwise kernel: its one loop becomes vector code (any x86-64 or
    // aarch64 CPU has 4-wide f32 vectors), and stays bit-identical (`check`).
    let types =
        ["!memory.buffer<1024, f32>", "!memory.buffer<1024, f32>", "!memory.buffer<1024, f32>"];
    let launch = format!(
        "domain = [1024], iterators = [{P}], maps = [(d0) -> (d0), (d0) -> (d0), (d0) -> (d0)], \
         body = \"max(x0 * 2.0 + x1, x1 - 1.0)\""
    );
    check(&types, &launch);
    let (k, tys) = kernel(&types, &launch);
    let ir = LlvmJit::with_options(1, Cpu::Host).unwrap().llvm().ir_text(&k, &tys).unwrap();
    assert!(ir.contains(" x float>"), "not vectorised:\n{ir}");
    // The gather's check survives optimisation: it returns `LoadOutOfBounds(1)`'s code.
    let (k, tys) = kernel(
        &["!memory.buffer<6, i32>", "!memory.buffer<20, f32>", "!memory.buffer<24, f32>"],
        &format!(
            "domain = [6, 4], iterators = [{P}, {P}], maps = [(d0, d1) -> (d0), (d0, d1) -> (d1), (d0, d1) -> (d0 * 4 + d1)], \
             body = \"x1[x0 * 4 + d1]\""
        ),
    );
    let ir = LlvmJit::with_options(1, Cpu::Host).unwrap().llvm().ir_text(&k, &tys).unwrap();
    let code = Fault::LoadOutOfBounds(1).code();
    assert!(
        ir.contains(&format!("i32 {code}")) || ir.contains(&format!("[ {code}, ")),
        "no fault exit:\n{ir}"
    );
    // The portable `generic` CPU computes the same values.
    let mut jit = LlvmJit::with_options(2, Cpu::Generic).unwrap();
    assert_eq!(jit.llvm().cpu_name(), "generic");
    let (k, tys) = kernel(&types, &launch);
    let mut ops: Vec<Data> =
        tys.iter().enumerate().map(|(i, &t)| data(t, i as u32 + 1, 8)).collect();
    let mut want = ops.clone();
    naive(&k, &tys, &mut want).unwrap();
    run_jit(&mut jit, &k, &tys, &mut ops).unwrap();
    assert_eq!(ops[2].bits(), want[2].bits());
}

/// A blocking small enough that the small contractions below cross every block edge (row
/// blocks: in a product of more than 48 rows, see `gemm`'s rule for few rows): 3-row,
/// 2-vector register blocks, 12 × 4·lanes tiles, 16 reduction steps; the back end's own lanes.
fn tiny(jit: &dyn Backend) -> GemmShape {
    let lanes = jit.gemm_shape().expect("a packed contraction shape").lanes;
    GemmShape { mr: 3, lanes, vectors: 2, mc: 12, nc: 4 * lanes, kc: 16 }
}

/// [`check_with`] for a kernel that every back end compiles as a packed contraction, with the back end's blocking and with [`tiny`], on 1 and 4 threads: bit for bit
/// against the naive evaluation.
fn check_packed(types: &[&str], launch: &str, setup: impl Fn(&mut [Data])) {
    let (k, tys) = kernel(types, launch);
    let mut ops: Vec<Data> =
        tys.iter().enumerate().map(|(i, &t)| data(t, i as u32 + 1, 1 << 30)).collect();
    setup(&mut ops);
    let mut want = ops.clone();
    naive(&k, &tys, &mut want).unwrap_or_else(|f| panic!("naive evaluation faulted: {f}"));
    for threads in [1, 4] {
        for mut jit in jits_with(threads) {
            let jit = &mut *jit;
            for shape in [jit.gemm_shape(), Some(tiny(jit))] {
                jit.set_gemm_shape(shape);
                let id = jit.compile(&k, &tys).unwrap_or_else(|e| panic!("{}: {e}", jit.name()));
                assert!(jit.packed(id), "{}: not packed", jit.name());
                let mut got = ops.clone();
                run_jit(jit, &k, &tys, &mut got).unwrap_or_else(|e| panic!("{}: {e}", jit.name()));
                let what = format!("{}, {threads} threads, {shape:?}", jit.name());
                assert_bits(&got, &want, &what);
            }
        }
    }
}

#[test]
fn packed_contractions_are_bit_identical() {
    // a · b + bias, 53 × 45 × 40: no dimension a multiple of a block, more rows than four of
    // `tiny`'s row blocks (fewer rows take one block); NaN, infinities and signed zeros in the
    // inputs (a NaN row and column, an inf · 0).
    check_packed(
        &["!memory.buffer<2120, f32>", "!memory.buffer<1800, f32>", "!memory.buffer<45, f32>", "!memory.buffer<2385, f32>"],
        &format!(
            "domain = [53, 45, 40], iterators = [{P}, {P}, {R}], maps = [(d0, d1, d2) -> (d0 * 40 + d2), \
             (d0, d1, d2) -> (d2 * 45 + d1), (d0, d1, d2) -> (d1), (d0, d1, d2) -> (d0 * 45 + d1)], \
             body = \"x0 * x1\", combine = \"add\", epilogue = \"acc + x2\""
        ),
        |ops| {
            if let Data::F32(a) = &mut ops[0] {
                a[3 * 40 + 7] = f32::NAN;
                a[20 * 40 + 39] = f32::INFINITY;
                a[0] = -0.0;
            }
            if let Data::F32(b) = &mut ops[1] {
                b[39 * 45 + 9] = 0.0;
                b[5 * 45 + 44] = f32::NEG_INFINITY;
                b[6 * 45 + 2] = -0.0;
            }
        },
    );
    // b read transposed (b[j, k], the body b · a; packed down its columns, along which it
    // moves least), the output transposed (out[j, i]).
    check_packed(
        &["!memory.buffer<720, f32>", "!memory.buffer<1020, f32>", "!memory.buffer<612, f32>"],
        &format!(
            "domain = [36, 17, 20], iterators = [{P}, {P}, {R}], maps = [(d0, d1, d2) -> (d2 * 36 + d0), \
             (d0, d1, d2) -> (d1 * 60 + d2 * 3), (d0, d1, d2) -> (d1 * 36 + d0)], body = \"x1 * x0\", combine = \"add\""
        ),
        |_| {},
    );
    // Batched (d0 outside), a tanh epilogue that reads the output (its value before the launch).
    check_packed(
        &["!memory.buffer<1944, f32>", "!memory.buffer<2376, f32>", "!memory.buffer<1188, f32>"],
        &format!(
            "domain = [3, 18, 22, 36], iterators = [{P}, {P}, {P}, {R}], maps = [(d0, d1, d2, d3) -> (d0 * 648 + d1 * 36 + d3), \
             (d0, d1, d2, d3) -> (d0 * 792 + d3 * 22 + d2), (d0, d1, d2, d3) -> (d0 * 396 + d1 * 22 + d2)], \
             body = \"x0 * x1\", combine = \"add\", epilogue = \"tanh(acc) + x2 * 0.5\""
        ),
        |_| {},
    );
    // a an R-Tile-like image (four reduction steps a texel, two rows a texel row), an image
    // output (its channel an outer dimension, of 4 points): packing reads any map.
    check_packed(
        &["!memory.image2d<[8, 24], f32>", "!memory.buffer<640, f32>", "!memory.image2d<[10, 24], f32>"],
        &format!(
            "domain = [24, 10, 4, 16], iterators = [{P}, {P}, {P}, {R}], maps = [(d0, d1, d2, d3) -> (d3 floordiv 4 + (d0 mod 2) * 4, d0 floordiv 2 + (d0 mod 2) * 12, d3 mod 4), \
             (d0, d1, d2, d3) -> (d3 * 40 + d1 * 4 + d2), (d0, d1, d2, d3) -> (d1, d0, d2)], body = \"x0 * x1\", combine = \"add\""
        ),
        |_| {},
    );
    // Groups of dimensions, as R-Tile lowering makes them: two reduction dimensions (20 steps
    // in row-major order), the columns three dimensions (4 × 3 × 4).
    check_packed(
        &["!memory.buffer<400, f32>", "!memory.buffer<960, f32>", "!memory.buffer<960, f32>"],
        &format!(
            "domain = [20, 4, 3, 4, 5, 4], iterators = [{P}, {P}, {P}, {P}, {R}, {R}], maps = [(d0, d1, d2, d3, d4, d5) -> (d0 * 20 + d4 * 4 + d5), \
             (d0, d1, d2, d3, d4, d5) -> ((d4 * 4 + d5) * 48 + d1 * 12 + d2 * 4 + d3), (d0, d1, d2, d3, d4, d5) -> (d0 * 48 + d1 * 12 + d2 * 4 + d3)], \
             body = \"x0 * x1\", combine = \"add\""
        ),
        |_| {},
    );
    // b read through a map that mixes its reduction and column indices inside a `mod` (a
    // permutation of its 400 elements): not a sum of a row part and a column part, so it is
    // packed through the map at every element (the other cases pack by column offsets).
    check_packed(
        &["!memory.buffer<400, f32>", "!memory.buffer<400, f32>", "!memory.buffer<400, f32>"],
        &format!(
            "domain = [20, 20, 20], iterators = [{P}, {P}, {R}], maps = [(d0, d1, d2) -> (d0 * 20 + d2), \
             (d0, d1, d2) -> ((d2 * 20 + d1) * 7 mod 400), (d0, d1, d2) -> (d0 * 20 + d1)], body = \"x0 * x1\", combine = \"add\""
        ),
        |_| {},
    );
    // The split dimension (d0, the first of more than one point) heads a group of two: the rows
    // (d0, d1) are 12, the columns the innermost dimension d2.
    check_packed(
        &["!memory.buffer<90, f32>", "!memory.buffer<120, f32>", "!memory.buffer<108, f32>"],
        &format!(
            "domain = [3, 4, 9, 10], iterators = [{P}, {P}, {P}, {R}], maps = [(d0, d1, d2, d3) -> (d2 * 10 + d3), \
             (d0, d1, d2, d3) -> (d3 * 12 + d0 * 4 + d1), (d0, d1, d2, d3) -> (d2 * 12 + d0 * 4 + d1)], \
             body = \"x0 * x1\", combine = \"add\""
        ),
        |_| {},
    );
}

#[test]
fn only_contractions_that_cannot_fault_are_packed() {
    // A read that may leave its operand (it faults where the plain nest would), a guard, a
    // max reduction, a reduction of 7 points and a domain of more than 2^63 points keep the
    // plain nest.
    let cases = [
        (
            vec!["!memory.buffer<400, f32>", "!memory.buffer<400, f32>", "!memory.buffer<400, f32>"],
            format!(
                "domain = [20, 20, 20], iterators = [{P}, {P}, {R}], maps = [(d0, d1, d2) -> (d0 * 20 + d2 + 1), \
                 (d0, d1, d2) -> (d2 * 20 + d1), (d0, d1, d2) -> (d0 * 20 + d1)], body = \"x0 * x1\", combine = \"add\""
            ),
        ),
        (
            vec!["!memory.buffer<400, f32>", "!memory.buffer<400, f32>", "!memory.buffer<400, f32>"],
            format!(
                "domain = [20, 20, 20], iterators = [{P}, {P}, {R}], maps = [(d0, d1, d2) -> (d0 * 20 + d2), \
                 (d0, d1, d2) -> (d2 * 20 + d1), (d0, d1, d2) -> (d0 * 20 + d1)], body = \"x0 * x1\", combine = \"max\""
            ),
        ),
        (
            vec!["!memory.buffer<140, f32>", "!memory.buffer<140, f32>", "!memory.buffer<400, f32>"],
            format!(
                "domain = [20, 20, 7], iterators = [{P}, {P}, {R}], maps = [(d0, d1, d2) -> (d0 * 7 + d2), \
                 (d0, d1, d2) -> (d2 * 20 + d1), (d0, d1, d2) -> (d0 * 20 + d1)], body = \"x0 * x1\", combine = \"add\""
            ),
        ),
        (
            vec!["!memory.buffer<400, f32>", "!memory.buffer<400, f32>", "!memory.buffer<400, f32>"],
            format!(
                "domain = [20, 20, 20], iterators = [{P}, {P}, {R}], maps = [(d0, d1, d2) -> (d0 * 20 + d2), \
                 (d0, d1, d2) -> (d2 * 20 + d1), (d0, d1, d2) -> (d0 * 20 + d1)], body = \"x0 * x1\", combine = \"add\", \
                 guard = (d0, d1, d2) -> (d0), guard_bounds = [18]"
            ),
        ),
        (
            // 2^63 points, every access in range (the maps multiply the row and column by 0).
            vec!["!memory.buffer<8, f32>", "!memory.buffer<8, f32>", "!memory.buffer<1, f32>"],
            format!(
                "domain = [1073741824, 1073741824, 8], iterators = [{P}, {P}, {R}], maps = [(d0, d1, d2) -> (d0 * 0 + d2), \
                 (d0, d1, d2) -> (d1 * 0 + d2), (d0, d1, d2) -> (d0 * 0 + d1 * 0)], body = \"x0 * x1\", combine = \"add\""
            ),
        ),
    ];
    for (types, launch) in &cases {
        let (k, tys) = kernel(types, launch);
        for mut jit in backends(1) {
            let id = jit.compile(&k, &tys).unwrap_or_else(|e| panic!("{}: {e}", jit.name()));
            assert!(!jit.packed(id), "{}: packed: {launch}", jit.name());
        }
    }
    // The plain nest of the first faults as the reference does.
    let (types, launch) = &cases[0];
    assert_eq!(fault(types, launch, |_| {}), Fault::ReadOutOfBounds(0));
}

//! The memory-dialect fuzz harness (`fbc_testing::fuzz`) on stable Rust: generated `memory.launch`
//! modules — random domains (zero extents included), maps with `floordiv`/`mod`, offsets that
//! may leave the storage at the corners or only inside, payloads with gathers, integer
//! division, `int()` and comparisons, guards, reductions with epilogues (and with two
//! statistics), row kernels with two statistics, outputs that are also inputs — and the seed corpus of `tests/fuzz/corpus/memory/`. Every module must either be
//! refused with diagnostics or run on the reference executor and the CPU JIT with the same
//! outcome, under a 16 MiB memory limit. (Its own test binary: the limit is process-wide.)

use fbc_testing::fuzz::{memory_module, Outcome};
use proptest::prelude::*;

const LIMIT: u64 = 16 << 20;

fn affine(dims: usize) -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        (0..dims.max(1)).prop_map(|d| format!("d{d}")),
        (-3i64..9).prop_map(|c| c.to_string()),
    ];
    leaf.prop_recursive(3, 12, 2, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a} + {b})")),
            (inner.clone(), -2i64..5).prop_map(|(a, c)| format!("({a} * {c})")),
            (inner.clone(), 1i64..5).prop_map(|(a, c)| format!("({a} floordiv {c})")),
            (inner, 1i64..5).prop_map(|(a, c)| format!("({a} mod {c})")),
        ]
    })
}

fn payload() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just("x0".to_string()),
        Just("x1".to_string()),
        Just("d0".to_string()),
        (-4i64..5).prop_map(|c| c.to_string()),
        Just("1.5".to_string()),
        Just("x1[int(x0) + d0]".to_string()),
    ];
    leaf.prop_recursive(3, 10, 2, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a} + {b})")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a} * {b})")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("max({a}, {b})")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a} < {b})")),
            inner.clone().prop_map(|a| format!("int({a})")),
            inner.clone().prop_map(|a| format!("(int({a}) / (d0 - 1))")),
            (inner.clone(), inner).prop_map(|(a, b)| format!("select({a} > 0.0, {b}, 0.0)")),
        ]
    })
}

/// One function: two uploaded inputs (`x0`, `x1`), one launch into `out` (or into `x1` itself),
/// and the download of the output.
fn module() -> impl Strategy<Value = String> {
    (1usize..3, 0usize..2, 0u64..6, 1u64..7, 1u64..40)
        .prop_flat_map(|(np, nr, e0, e1, n)| {
            let dims = np + nr;
            let extents: Vec<u64> = (0..dims).map(|i| if i == 0 { e0 } else { e1 }).collect();
            (
                Just((np, nr, extents, n)),
                affine(dims),
                affine(dims),
                affine(dims),
                payload(),
                any::<bool>(),
                any::<bool>(),
                (any::<bool>(), payload(), payload()),
                any::<bool>(),
            )
        })
        .prop_map(|((np, nr, extents, n), m0, m1, mo, body, in_place, guarded, (row, s0, s1), side)| {
            let dims = np + nr;
            let row = row && nr > 0;
            let ds: Vec<String> = (0..dims).map(|d| format!("d{d}")).collect();
            let ds = ds.join(", ");
            let rest = if row { "\"row\"" } else { "\"reduction\"" };
            let iters: Vec<&str> =
                (0..dims).map(|d| if d < np { "\"parallel\"" } else { rest }).collect();
            // A reduction's output map reads only parallel dimensions (an epilogue/reduction
            // rule); a row kernel writes at every point.
            let mo = if nr > 0 && !row && mo.contains(&format!("d{}", np)) {
                "d0".to_string()
            } else {
                mo
            };
            // A row kernel: a maximum, a sum that reads it, and a body that reads both.
            let (body, red) = if row {
                let stats = format!(
                    ", stats = [\"max: float({s0})\", \"add: exp(float({s1}) - s0); acc + 1.0\"]"
                );
                (format!("float({body}) - s0 * s1"), stats)
            } else if nr > 0 && side {
                // A reduction with statistics: combined beside the body, read by epilogues.
                let stats = format!(
                    ", combine = \"add\", epilogue = \"acc * 2.0 + s1 - s0\", stats = [\"max: float({s0})\", \"add: float({s1}); acc + s0\"]"
                );
                (body, stats)
            } else if nr > 0 {
                (body, ", combine = \"add\", epilogue = \"acc * 2.0\"".to_string())
            } else {
                (body, String::new())
            };
            let guard = if guarded {
                format!(", guard = ({ds}) -> (d0), guard_bounds = [2]")
            } else {
                String::new()
            };
            let out = if in_place { "%m1" } else { "%mo" };
            let alloc = if in_place {
                String::new()
            } else {
                format!("  %mo = memory.alloc : () -> !memory.buffer<{n}, f32>\n")
            };
            format!(
                "func.func @f(%x0: tensor<{n}xf32>, %x1: tensor<{n}xf32>) -> tensor<{n}xf32> {{\n\
                 \x20 %m0 = memory.upload %x0 {{layout = #layout.linear}}\n\
                 \x20 %m1 = memory.upload %x1 {{layout = #layout.linear}}\n\
                 {alloc}\
                 \x20 memory.launch %m0, %m1, {out} {{kernel = \"k\", domain = {extents:?}, iterators = [{}], maps = [({ds}) -> ({m0}), ({ds}) -> ({m1}), ({ds}) -> ({mo})], body = \"{body}\"{red}{guard}}} : (!memory.buffer<{n}, f32>, !memory.buffer<{n}, f32>, !memory.buffer<{n}, f32>) -> ()\n\
                 \x20 %r = memory.download {out} {{layout = #layout.linear}} : (!memory.buffer<{n}, f32>) -> tensor<{n}xf32>\n\
                 \x20 func.return %r : (tensor<{n}xf32>) -> ()\n}}\n",
                iters.join(", ")
            )
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn generated_launches_agree_or_are_refused(text in module()) {
        fbc_runtime::limits::set_max_memory(LIMIT);
        if let Err(e) = memory_module(text.as_bytes()) {
            prop_assert!(false, "{e}\n{text}");
        }
    }
}

#[test]
fn the_seed_corpus_runs() {
    fbc_runtime::limits::set_max_memory(LIMIT);
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/memory");
    let mut ran = 0;
    for entry in std::fs::read_dir(&dir).expect("corpus folder") {
        let path = entry.expect("entry").path();
        let bytes = std::fs::read(&path).expect("read");
        match memory_module(&bytes) {
            Ok(Outcome::Ran { completed, .. }) => ran += completed,
            Ok(Outcome::Rejected(_)) => {}
            Err(e) => panic!("{}: {e}", path.display()),
        }
    }
    assert!(ran >= 3, "the corpus has runnable modules ({ran} ran)");
}

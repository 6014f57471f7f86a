//! Snapshots of what fbc makes of the shipped examples (`examples/*.fbir`): the lowered memory
//! dialect (`--emit memory`, which must parse back to itself) and the OpenCL C (`--emit
//! opencl`), at `-O0` and `-O3`, for the mali, adreno and nvidia profiles. A change to lowering,
//! layout selection or the writer shows here as a reviewed diff of real workloads.
//!
//! The examples are full size (a 512×2048·2048×8192 product and the like), too large to
//! interpret in a test: their numbers are not checked here; the same pipelines are checked on
//! small modules by the `tests/ir` files and `translation_validation.rs`.

const EXAMPLES: [&str; 4] = ["attention", "lora_attention", "matmul_fb", "transformer_mlp"];
const TARGETS: [&str; 3] = ["mali", "adreno", "nvidia"];

#[test]
fn shipped_examples() {
    // `--emit opencl` reads `fbc tune`'s database from the cache directory when there is one:
    // the snapshots are of the untuned kernels, whatever this machine has tuned.
    let empty = std::env::temp_dir().join(format!("fbc-examples-cache-{}", std::process::id()));
    std::env::set_var("FBC_CACHE_DIR", &empty);
    let harness = fbc_testing::Harness::default();
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples");
    for example in EXAMPLES {
        let name = format!("{example}.fbir");
        let text = std::fs::read_to_string(format!("{root}/{name}")).expect("an example");
        for target in TARGETS {
            for level in ["-O0", "-O3"] {
                for emit in ["memory", "opencl"] {
                    let args = format!("{level} --target {target} --emit {emit}");
                    let out = harness
                        .compile(&name, &text, &args, fbc_testing::Numbers::Skip)
                        .unwrap_or_else(|e| panic!("fbc {name} {args}: {e}"));
                    let snapshot = format!("{example}.{target}{level}.{emit}");
                    insta::assert_snapshot!(snapshot, out, &format!("fbc {name} {args}"));
                }
            }
        }
    }
}

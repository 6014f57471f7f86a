//! Every launch the compiler generates is proven in bounds by the verifier's bounds prover
//! (`fbc_dialects::memory::bounds`): the shipped examples at -O0 and -O3 for every hardware
//! profile, and generated models (one layer, short sequences, training steps). No access is
//! `Violated`; every map and guard is `Proven` (so generated kernels carry no run-time checks),
//! and the only loads left to run-time checks are the data-dependent gathers (embedding ids,
//! cross-entropy labels). Anything `Unknown` is listed in the failure message.

use fbc_dialects::memory::{Bound, Kernel, MemType};
use fbc_ir::{Module, PassContext, PassManager};

mod common;

/// `text` at `-O level`, lowered for profile `target`.
fn lower(text: &str, level: u8, target: &str) -> Module {
    let reg = fbc_dialects::registry();
    let profile = fbc_target::builtin(target).expect("a builtin profile");
    let mut m = common::parse(text);
    let pipeline = format!(
        "{},{}",
        fbc_transforms::pipeline_for_level(level),
        fbc_transforms::lowering_pipeline(Default::default())
    );
    let pipeline = pipeline.trim_start_matches(',');
    let steps = fbc_transforms::default_registry().parse_pipeline(pipeline).expect("pipeline");
    let pm = PassManager::new(steps);
    let mut cx = PassContext::new(&reg);
    cx.target = &profile;
    pm.run(&mut m, &mut cx, &mut |_| {}).unwrap_or_else(|d| panic!("{target} -O{level}: {d:?}"));
    m
}

/// Counts per module: launches, data-dependent loads; problems as text.
#[derive(Default)]
struct Tally {
    launches: usize,
    gathers: usize,
    problems: Vec<String>,
}

fn audit(m: &Module, what: &str, t: &mut Tally) {
    for f in &m.funcs {
        for &op in &f.body {
            let d = m.op(op);
            if d.name() != "memory.launch" {
                continue;
            }
            t.launches += 1;
            let k = Kernel::from_op(d).expect("a launch");
            let types: Vec<MemType> = d
                .operands
                .iter()
                .map(|&v| MemType::from_type(m.value_type(v)).expect("memory"))
                .collect();
            let b = k.bounds(&types);
            if let Some(v) = &b.violation {
                t.problems.push(format!("{what}: {}: VIOLATED: {v}", k.name));
            }
            for (i, mb) in b.maps.iter().enumerate() {
                if !mb.is_proven() {
                    t.problems.push(format!("{what}: {}: map of operand {i} {mb:?}", k.name));
                }
            }
            if !b.guard.is_proven() {
                t.problems.push(format!("{what}: {}: guard {:?}", k.name, b.guard));
            }
            for (j, off, lb) in &b.loads {
                match lb {
                    None => t.gathers += 1,
                    Some(Bound::Proven) => {}
                    Some(other) => {
                        t.problems.push(format!("{what}: {}: x{j}[{off}] {other:?}", k.name))
                    }
                }
            }
        }
    }
}

#[test]
fn shipped_examples_are_proven_for_every_profile() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("examples")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "fbir"))
        .collect();
    files.sort();
    assert!(files.len() >= 4, "{files:?}");
    let mut t = Tally::default();
    for p in &files {
        let text = std::fs::read_to_string(p).expect("read");
        for target in ["generic", "mali", "adreno", "nvidia", "cpu"] {
            for level in [0, 3] {
                let what = format!("{} {target} -O{level}", p.display());
                audit(&lower(&text, level, target), &what, &mut t);
            }
        }
    }
    eprintln!("{} launches, {} data-dependent loads", t.launches, t.gathers);
    assert!(t.launches > 100, "{}", t.launches);
    assert!(t.problems.is_empty(), "{}", t.problems.join("\n"));
}

#[test]
fn generated_models_are_proven() {
    let dir = common::scratch("bounds-gen");
    let models: &[&[&str]] = &[
        &["llama3.2-1b", "--vocab", "64", "--training"],
        &["gemma2-2b", "--vocab", "64"],
        &["bert-large", "--batch", "1", "--training"],
        &["whisper-large-decoder", "--vocab", "64", "--encoder-len", "8", "--batch", "1"],
    ];
    let mut t = Tally::default();
    for (i, args) in models.iter().enumerate() {
        let path = dir.join(format!("m{i}.fbir"));
        let mut all = vec!["gen"];
        all.extend_from_slice(args);
        let p = path.to_string_lossy().into_owned();
        all.extend_from_slice(&["--layers", "1", "--seq", "8", "--lora-rank", "2", "-o", &p]);
        let o = common::fbc(&all);
        assert_eq!(o.code, 0, "{args:?}: {}", o.stderr);
        let text = std::fs::read_to_string(&path).expect("generated");
        for (level, target) in [(0, "generic"), (3, "generic"), (3, "mali")] {
            audit(&lower(&text, level, target), &format!("{args:?} {target} -O{level}"), &mut t);
        }
    }
    eprintln!("{} launches, {} data-dependent loads", t.launches, t.gathers);
    // The embeddings and the cross-entropy losses gather by data.
    assert!(t.gathers > 0);
    assert!(t.problems.is_empty(), "{}", t.problems.join("\n"));
}

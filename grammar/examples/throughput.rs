//! Parse throughput on a generated module:
//! `cargo run --release -p fbc-grammar --example throughput [OPS] [plain|full] [REPEAT]`.
//!
//! `plain` ops are the spec's `%r = tensor.add %a, %b : (T, T) -> T`; `full` ops add two
//! attributes and a location, as printed IR with locations has.

use std::fmt::Write as _;
use std::time::Instant;

fn main() {
    let ops: usize = std::env::args().nth(1).and_then(|n| n.parse().ok()).unwrap_or(200_000);
    let full = std::env::args().nth(2).is_some_and(|k| k == "full");
    let repeat: usize = std::env::args().nth(3).and_then(|n| n.parse().ok()).unwrap_or(5);
    let mut src = String::from("module @bench {\n  func.func @f(%v0: tensor<1x512x2048xf32>) -> tensor<1x512x2048xf32> {\n");
    for i in 1..=ops {
        let _ = write!(src, "    %v{i} = tensor.add %v{}, %v0", i - 1);
        if full {
            src.push_str(" {alpha = 1.5, axes = [0, 1]}");
        }
        src.push_str(
            " : (tensor<1x512x2048xf32>, tensor<1x512x2048xf32>) -> tensor<1x512x2048xf32>",
        );
        if full {
            let _ = write!(src, " loc(\"model.py\":{i}:5)");
        }
        src.push('\n');
    }
    let _ = writeln!(src, "    func.return %v{ops} : tensor<1x512x2048xf32>\n  }}\n}}");
    let mut times = Vec::new();
    for _ in 0..repeat.max(1) {
        let start = Instant::now();
        let module = fbc_grammar::parse(&src).expect("generated module parses");
        times.push(start.elapsed().as_secs_f64());
        assert_eq!(module.funcs[0].body.len(), ops + 1);
    }
    let best = times.iter().copied().fold(f64::INFINITY, f64::min);
    println!(
        "{ops} ops, {:.1} MB: first {:.1} ms, best of {repeat} {:.1} ms = {:.2} M ops/s, {:.0} MB/s",
        src.len() as f64 / 1e6,
        times[0] * 1e3,
        best * 1e3,
        ops as f64 / best / 1e6,
        src.len() as f64 / best / 1e6
    );
}

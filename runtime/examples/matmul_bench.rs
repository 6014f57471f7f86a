//! Measures the reference matmul's throughput: `cargo run --release -p fbc-runtime --example
//! matmul_bench [M K N [REPEATS]]` (default 256 1024 1024, 5 repeats) prints the best GFLOP/s of
//! f32 and f64, counting 2·M·K·N flops per product.

use std::time::Instant;

use fbc_runtime::reference::{matmul, Tensor};

fn main() {
    let args: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let (m, k, n) = match args[..] {
        [m, k, n, ..] => (m, k, n),
        _ => (256, 1024, 1024),
    };
    let repeats = args.get(3).copied().unwrap_or(5).max(1);
    let flops = 2.0 * (m * k * n) as f64;
    let fill = |shape: &[usize]| {
        Tensor::from_fn(shape, |i| ((i[0] * 31 + i[1] * 17) % 13) as f64 / 7.0 - 0.9).unwrap()
    };
    let (a, b) = (fill(&[m, k]), fill(&[k, n]));
    let (a32, b32) = (a.cast::<f32>(), b.cast::<f32>());
    let best = |f: &dyn Fn()| {
        (0..repeats)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed().as_secs_f64()
            })
            .fold(f64::INFINITY, f64::min)
    };
    let t32 = best(&|| {
        std::hint::black_box(matmul(&a32, &b32, false, false).unwrap());
    });
    let t64 = best(&|| {
        std::hint::black_box(matmul(&a, &b, false, false).unwrap());
    });
    println!(
        "matmul {m}x{k}x{n}: f32 {:.1} GFLOP/s, f64 {:.1} GFLOP/s",
        flops / t32 / 1e9,
        flops / t64 / 1e9
    );
}

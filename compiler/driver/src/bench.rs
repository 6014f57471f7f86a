//! `fbc bench-parse`: front-end throughput on a generated module.
//!
//! Generates a function of N ops (a mix of elementwise, matmul, reshape, transpose and reduction
//! ops with full signatures, as printed IR has), then times each stage separately: lexing and
//! parsing to the AST, building the IR, verifying, and printing. Each stage runs `repeat` times and
//! the fastest run is reported, the usual way to read a benchmark on a shared, noisy machine.
//! Memory is the growth of the resident set while the module is alive, per op.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fbc_ir::{OpRegistry, SourceFile};

/// Text of a module with `n` ops (plus the return).
pub fn generate(n: usize) -> String {
    let mut s = String::with_capacity(n * 110);
    s.push_str("module @bench {\n  func.func @main(%a: tensor<8x16xf32>, %w: tensor<16x16xf32>) -> tensor<8x16xf32> {\n");
    let t = "tensor<8x16xf32>";
    let mut last = "a".to_string();
    for i in 0..n {
        let v = format!("v{i}");
        match i % 8 {
            0 => writeln!(s, "    %{v} = tensor.add %{last}, %a : ({t}, {t}) -> {t}"),
            1 => writeln!(s, "    %{v} = tensor.matmul %{last}, %w : ({t}, tensor<16x16xf32>) -> {t}"),
            2 => writeln!(s, "    %{v} = tensor.exp %{last} : ({t}) -> {t}"),
            3 => writeln!(s, "    %{v} = tensor.reshape %{last} {{shape = [8, 4, 4]}} : ({t}) -> tensor<8x4x4xf32>"),
            4 => writeln!(s, "    %{v} = tensor.transpose %{last} {{perm = [0, 2, 1]}} : (tensor<8x4x4xf32>) -> tensor<8x4x4xf32>"),
            5 => writeln!(s, "    %{v} = tensor.reshape %{last} {{shape = [8, 16]}} : (tensor<8x4x4xf32>) -> {t}"),
            6 => writeln!(s, "    %{v} = tensor.scale %{last} {{factor = 0.5}} : ({t}) -> {t}"),
            _ => writeln!(s, "    %{v} = tensor.mul %{last}, %{last} : ({t}, {t}) -> {t}"),
        }
        .expect("writing to a String");
        last = v;
    }
    let _ = writeln!(s, "    func.return %{last} : {t}\n  }}\n}}");
    s
}

fn best<T>(repeat: usize, mut f: impl FnMut() -> T) -> (Duration, T) {
    let mut best = Duration::MAX;
    let mut out = None;
    for _ in 0..repeat.max(1) {
        let start = Instant::now();
        let r = f();
        best = best.min(start.elapsed());
        out = Some(r);
    }
    (best, out.expect("ran at least once"))
}

fn rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Runs the benchmark and returns the report (a table, or JSON).
pub fn run(registry: &OpRegistry, ops: usize, repeat: usize, json: bool) -> Result<String, String> {
    let text = generate(ops);
    let file = Arc::new(SourceFile::new("bench.fbir", text));
    let (t_parse, ast) = best(repeat, || fbc_grammar::parse(&file.text));
    let ast = ast.map_err(|d| fbc_grammar::diag::render_all(&file, &d))?;
    let rss_before = rss_kib();
    let (t_build, module) = best(repeat, || fbc_ir::build_module(&ast, registry));
    let module = module.map_err(|d| fbc_grammar::diag::render_all(&file, &d))?;
    let rss_after = rss_kib();
    let (t_verify, errors) = best(repeat, || fbc_ir::verify_module(&module));
    if !errors.is_empty() {
        return Err(fbc_grammar::diag::render_all(&file, &errors));
    }
    let (t_print, printed) = best(repeat, || fbc_ir::print_module(&module));
    let n = module.num_ops() as f64;
    let front = t_parse + t_build + t_verify;
    let per_s = |d: Duration| n / d.as_secs_f64();
    let bytes_per_op = match (rss_before, rss_after) {
        (Some(b), Some(a)) => Some((a.saturating_sub(b) * 1024) as f64 / n),
        _ => None,
    };
    if json {
        return Ok(format!(
            "{}\n",
            serde_json::json!({
                "ops": module.num_ops(),
                "bytes": file.text.len(),
                "parse_s": t_parse.as_secs_f64(),
                "build_s": t_build.as_secs_f64(),
                "verify_s": t_verify.as_secs_f64(),
                "print_s": t_print.as_secs_f64(),
                "parse_verify_ops_per_s": per_s(front),
                "print_ops_per_s": per_s(t_print),
                "module_bytes_per_op": bytes_per_op,
                "printed_bytes": printed.len(),
            })
        ));
    }
    let mut s = String::new();
    let _ = writeln!(
        s,
        "module: {} ops, {} bytes of text (best of {repeat})",
        module.num_ops(),
        file.text.len()
    );
    for (stage, d) in
        [("parse", t_parse), ("build", t_build), ("verify", t_verify), ("print", t_print)]
    {
        let _ =
            writeln!(s, "  {stage:<8} {:>9.3} ms  {:>12.0} ops/s", d.as_secs_f64() * 1e3, per_s(d));
    }
    let _ = writeln!(s, "  parse+build+verify: {:.0} ops/s", per_s(front));
    if let Some(b) = bytes_per_op {
        let _ =
            writeln!(s, "  module memory: {b:.0} bytes/op (resident set growth while building)");
    }
    Ok(s)
}

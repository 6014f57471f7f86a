//! The paper's microbenchmarks: the MatMul forward/backward products of Fig. 16 and the
//! multi-head attention blocks of Fig. 17. Their value names follow `examples/matmul_fb.fbir` and
//! `examples/attention.fbir`, so `fbc gen matmul-fb --products o,da` (Fig. 16's pair) prints
//! exactly what `fbc opt` prints for the example, and `fbc gen mha --config c1` differs from
//! `examples/attention.fbir` only in the module name.

use super::builder::Graph;
#[cfg(doc)]
use super::config::MATMUL_FB;
use super::config::MHA_CONFIGS;
use super::{Generated, Spec};

/// `@matmul_fb(a, b, do) -> (o = a·b, da = do·bᵀ, db = aᵀ·do)` with `(M, K, N)` = `dims`
/// (Fig. 16's are [`MATMUL_FB`]): the forward product and both backward ones, those of
/// `products` (in that order). An argument no chosen product reads is left out.
pub(crate) fn matmul_fb(
    mut g: Graph<'_>,
    (m, k, n): (u64, u64, u64),
    products: [bool; 3],
) -> Result<Generated, String> {
    let [want_o, want_da, want_db] = products;
    let a = (want_o || want_db).then(|| g.weight("a", &[m, k]));
    let b = (want_o || want_da).then(|| g.weight("b", &[k, n]));
    let d_o = (want_da || want_db).then(|| g.weight("do", &[m, n]));
    let mut results = Vec::new();
    if let (true, Some(a), Some(b)) = (want_o, a, b) {
        results.push(g.matmul("o", a, b)?);
    }
    if let (true, Some(d_o), Some(b)) = (want_da, d_o, b) {
        results.push(g.matmul_bt("da", d_o, b)?);
    }
    if let (true, Some(a), Some(d_o)) = (want_db, a, d_o) {
        results.push(g.matmul_at("db", a, d_o)?);
    }
    if results.is_empty() {
        return Err("no product chosen".into());
    }
    let module = g.finish("matmul_fb", "matmul_fb", &results)?;
    Ok(Generated { module, func: "matmul_fb".into(), trainable: Vec::new() })
}

/// `@mha(x, wq, wk, wv, wo) -> y` for configuration `spec.config` of Fig. 17, batch
/// `spec.batch`, sequence `spec.seq` (the configuration's 512 unless overridden).
pub(crate) fn mha(mut g: Graph<'_>, spec: &Spec) -> Result<Generated, String> {
    let (name, _, heads, d) = MHA_CONFIGS[spec.config.min(MHA_CONFIGS.len() - 1)];
    let (b, s) = (spec.batch, spec.seq);
    let hd = d / heads;
    let x = g.weight("x", &[b, s, d]);
    let w: Vec<_> = ["wq", "wk", "wv", "wo"].iter().map(|n| g.weight(n, &[d, d])).collect();
    let heads_of = |g: &mut Graph<'_>, n: &str, w| -> Result<_, String> {
        let p = g.matmul(n, x, w)?;
        let r = g.reshape(&format!("{n}1"), p, &[b, s, heads, hd])?;
        g.transpose(&format!("{n}2"), r, &[0, 2, 1, 3])
    };
    let q = heads_of(&mut g, "q", w[0])?;
    let k = heads_of(&mut g, "k", w[1])?;
    let v = heads_of(&mut g, "v", w[2])?;
    let sc = g.matmul_bt("s", q, k)?;
    let sc = g.scale("s1", sc, 1.0 / (hd as f64).sqrt())?;
    let p = g.softmax("p", sc)?;
    let o = g.matmul("o", p, v)?;
    let o = g.transpose("o1", o, &[0, 2, 1, 3])?;
    let o = g.reshape("o2", o, &[b, s, d])?;
    let y = g.matmul("y", o, w[3])?;
    let module = g.finish(&format!("mha_{name}"), "mha", &[y])?;
    Ok(Generated { module, func: "mha".into(), trainable: Vec::new() })
}

//! Splitting one launch over threads: which chunks of the split dimension are provably
//! race-free, and how many threads a launch gets.
//!
//! A kernel compiled with a split dimension `d` ([`nest::split_dim`], the outermost loop)
//! takes a chunk `[lo, hi)` of `d` and runs exactly the points of the single-threaded nest whose
//! `d` index lies in it, in the same order, each output element with the same reduction order.
//! Running the chunks of a partition of `[0, extent)` on different threads therefore computes
//! the same values, provided no two chunks write the same output element and no chunk reads
//! what another writes. Reads: the kernel does not read its output (a kernel that does is never
//! split), and inputs are other storage (distinct `&mut` borrows). Writes: [`Split::chunks`]
//! proves, with the bounds' interval analysis ([`nest::write_span`]), that the element offsets
//! each chunk can write lie in pairwise disjoint intervals, or falls back to one chunk.
//!
//! Faults: the chunks are reported in order, the first failing one's code; within a chunk the
//! points run in the single-threaded order, so that is the fault a single-threaded run stops at.

use fbc_dialects::memory::{Kernel, MemType, Scalar, ScalarUn};
use fbc_index::IndexMap;

use super::nest::{self, Iv};

/// The environment variable that overrides the number of threads of a [`super::Jit`] (both CPU back ends).
pub const THREADS_ENV: &str = "FBC_JIT_THREADS";

/// Default minimum work per thread, in domain points (parallel points times the reduction
/// extent; a point whose payload calls a transcendental function counts [`CALL_WEIGHT`] more
/// per call): a launch with less than twice this runs on the calling thread alone, as starting
/// a thread (20 to 100 µs on a loaded 2-core machine) would cost more than it saves. Measured
/// there: `x0 * 2.0 + 1.0` gains nothing from a second thread below a million points, a `tanh`
/// per point gains from about 10 000 points.
pub const MIN_POINTS_PER_THREAD: u64 = 1 << 16;

/// The extra work, in points, of one call of `exp log tanh erf sigmoid` in the payload.
pub const CALL_WEIGHT: u64 = 16;

/// What a compiled kernel needs to plan its chunks.
#[derive(Debug, Clone)]
pub(crate) struct Split {
    dim: usize,
    extent: u64,
    /// Domain points (saturating product of all extents), weighted by the payload's calls.
    work: u64,
    out_map: IndexMap,
    out_type: MemType,
    /// Ranges of the domain indices when the output is written (reduction indices are 0), then
    /// of the symbols.
    ranges: Vec<Iv>,
}

impl Split {
    /// The plan of `kernel` (as compiled, operand `types`) split along `dim`; `None` when it
    /// must run in one piece (no split dimension, an empty domain, or it reads its output).
    pub(crate) fn new(
        kernel: &Kernel,
        types: &[MemType],
        dim: Option<usize>,
        reads_output: bool,
    ) -> Option<Split> {
        let dim = dim?;
        if reads_output || kernel.domain.contains(&0) {
            return None;
        }
        // The dimensions of the points written: a row kernel writes at every row point too.
        let np = kernel.point_dims();
        let ranges = kernel
            .domain
            .iter()
            .enumerate()
            .map(|(d, &n)| if d < np { Iv::clamped(0, i128::from(n) - 1) } else { Iv::point(0) })
            .chain(kernel.symbols.iter().map(|s| Iv { lo: s.lo, hi: s.hi }))
            .collect();
        let out = kernel.output();
        Some(Split {
            dim,
            extent: *kernel.domain.get(dim)?,
            work: kernel
                .domain
                .iter()
                .fold(1u64, |p, &n| p.saturating_mul(n))
                .saturating_mul(1 + CALL_WEIGHT.saturating_mul(calls(kernel))),
            out_map: kernel.maps.get(out)?.clone(),
            out_type: *types.get(out)?,
            ranges,
        })
    }

    /// Chunks `[lo, hi)` of the split dimension, in order, covering `[0, extent)`: one per
    /// thread, at most `threads` and at most one per `min_points` of work; a single
    /// chunk when the writes of a balanced partition cannot be proven disjoint (boundaries
    /// rounded to multiples of 2, 4, 8, ... are tried too, as for a map that packs several
    /// indices of the split dimension into one texel).
    pub(crate) fn chunks(&self, threads: usize, min_points: u64) -> Vec<(i64, i64)> {
        let whole = vec![(0, i64::try_from(self.extent).unwrap_or(i64::MAX))];
        let by_work = self.work / min_points.max(1);
        let want = (threads as u64).min(self.extent).min(by_work);
        if want < 2 || i64::try_from(self.extent).is_err() {
            return whole;
        }
        let n = self.extent;
        let mut g = 1u64;
        while g <= n / 2 {
            let at = |t: u64| {
                let b = u128::from(t) * u128::from(n) / u128::from(want);
                u64::try_from(b).unwrap_or(n) / g * g
            };
            let mut bounds: Vec<u64> = (0..=want).map(at).collect();
            bounds[want as usize] = n;
            bounds.dedup();
            if bounds.len() < 3 {
                break;
            }
            let chunks: Vec<(i64, i64)> =
                bounds.windows(2).map(|w| (w[0] as i64, w[1] as i64)).collect();
            if self.disjoint(&chunks) {
                return chunks;
            }
            g *= 2;
        }
        whole
    }

    /// Whether the output offsets the chunks can write lie in pairwise disjoint intervals.
    fn disjoint(&self, chunks: &[(i64, i64)]) -> bool {
        let mut spans = Vec::with_capacity(chunks.len());
        for &(lo, hi) in chunks {
            let mut ranges = self.ranges.clone();
            ranges[self.dim] = Iv::clamped(i128::from(lo), i128::from(hi) - 1);
            match nest::write_span(&self.out_map, self.out_type, &ranges) {
                Some(s) => spans.push(s),
                None => return false,
            }
        }
        spans.sort_by_key(|s| s.lo);
        spans.windows(2).all(|w| w[0].hi < w[1].lo)
    }
}

/// Calls of transcendental functions in the payloads (body, epilogue, statistics).
fn calls(k: &Kernel) -> u64 {
    let mut n = 0u64;
    let mut visit = |s: &Scalar| {
        if let Scalar::Un(
            ScalarUn::Exp | ScalarUn::Log | ScalarUn::Tanh | ScalarUn::Erf | ScalarUn::Sigmoid,
            _,
        ) = s
        {
            n += 1;
        }
    };
    for e in k.payloads() {
        e.visit(&mut visit);
    }
    n
}

/// The thread count of a new JIT: [`THREADS_ENV`] when set (a positive integer), else the
/// machine's available parallelism.
pub(super) fn default_threads() -> Result<usize, String> {
    match std::env::var(THREADS_ENV) {
        Ok(v) => match v.trim().parse::<usize>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(format!("{THREADS_ENV}=`{v}`: expected a positive number of threads")),
        },
        Err(std::env::VarError::NotUnicode(_)) => {
            Err(format!("{THREADS_ENV} is not a positive number of threads"))
        }
        Err(std::env::VarError::NotPresent) => {
            Ok(std::thread::available_parallelism().map_or(1, usize::from))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use fbc_ir::SourceFile;

    use super::*;

    /// The plan of `out = x0` over the parallel `domain` with `maps`, operands of types `inp`
    /// and `out`.
    fn split(domain: &[u64], maps: &str, inp: &str, out: &str) -> Split {
        split_body(domain, maps, inp, out, "x0")
    }

    /// [`split`] with the payload `body`.
    fn split_body(domain: &[u64], maps: &str, inp: &str, out: &str, body: &str) -> Split {
        let iters = vec!["\"parallel\""; domain.len()].join(", ");
        let text = format!(
            "module {{\n  func.func @f(%a: {inp}, %b: {out}) {{\n    memory.launch %a, %b {{kernel = \"k\", \
             domain = {domain:?}, iterators = [{iters}], maps = {maps}, body = \"{body}\"}}\n    \
             func.return\n  }}\n}}\n"
        );
        let reg = fbc_dialects::registry();
        let m = fbc_ir::parse_module(&Arc::new(SourceFile::new("t.fbir", &text)), &reg)
            .unwrap_or_else(|d| panic!("{text}\n{d:?}"));
        let f = &m.funcs[0];
        let k = Kernel::from_op(m.op(f.body[0])).expect("a launch");
        let types: Vec<MemType> = f
            .args
            .iter()
            .map(|&a| MemType::from_type(m.value_type(a)).expect("a memory type"))
            .collect();
        Split::new(&k, &types, nest::split_dim(&k, None), false).expect("splittable")
    }

    #[test]
    fn row_major_outputs_split_evenly() {
        let s = split(
            &[10, 8],
            "[(i, j) -> (i * 8 + j), (i, j) -> (i * 8 + j)]",
            "!memory.buffer<80, f32>",
            "!memory.buffer<80, f32>",
        );
        assert_eq!(s.chunks(4, 1), vec![(0, 2), (2, 5), (5, 7), (7, 10)]);
        assert_eq!(s.chunks(4, 40), vec![(0, 5), (5, 10)]);
        assert_eq!(s.chunks(1, 1), vec![(0, 10)]);
        assert_eq!(s.chunks(64, 1).len(), 10);
        // Two calls per point: 80 · 33 points of work.
        let s = split_body(
            &[10, 8],
            "[(i, j) -> (i * 8 + j), (i, j) -> (i * 8 + j)]",
            "!memory.buffer<80, f32>",
            "!memory.buffer<80, f32>",
            "tanh(x0) + exp(x0 * 2.0)",
        );
        assert_eq!(s.chunks(4, 80 * 33 / 2), vec![(0, 5), (5, 10)]);
        assert_eq!(s.chunks(4, 80 * 33 / 2 + 1), vec![(0, 10)]);
    }

    #[test]
    fn packed_rows_align_the_chunks() {
        // Four rows share a texel row: chunks start at multiples of 4.
        let s = split(
            &[30, 13, 4],
            "[(i, j, c) -> (i * 52 + j * 4 + c), (i, j, c) -> (j + (i mod 4) * 13, i floordiv 4, c)]",
            "!memory.buffer<1560, f32>",
            "!memory.image2d<[52, 8], f32>",
        );
        assert_eq!(s.chunks(2, 1), vec![(0, 12), (12, 30)]);
        assert_eq!(s.chunks(3, 1), vec![(0, 8), (8, 20), (20, 30)]);
    }

    #[test]
    fn overlapping_or_unknown_writes_stay_whole() {
        // The split dimension is the fast one: every chunk spans the whole output.
        let b64 = "!memory.buffer<64, f32>";
        let s = split(&[8, 8], "[(i, j) -> (j * 8 + i), (i, j) -> (j * 8 + i)]", b64, b64);
        assert_eq!(s.chunks(4, 1), vec![(0, 8)]);
        // Every point writes element 0.
        let s = split(&[8, 8], "[(i, j) -> (i), (i, j) -> (0)]", b64, b64);
        assert_eq!(s.chunks(4, 1), vec![(0, 8)]);
    }
}

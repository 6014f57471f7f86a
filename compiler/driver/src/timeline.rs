//! `fbc bench --timeline OUT.html`: where the device time of the last timed run went, kernel by
//! kernel.
//!
//! One self-contained HTML file (inline SVG and CSS, no script, nothing fetched): one row per
//! strategy benchmarked, one bar per launch at its start (after the run's first launch started,
//! from the OpenCL profiling events) and as wide as its device time, on one microsecond axis for
//! every row so that the strategies compare at a glance. Bars are coloured by what the launch
//! computes ([`Kind`], from its `source`); conversion kernels (`layout.convert`, the cost FBLayout
//! removes) are red and hatched. Each bar's SVG `<title>` (the browser's hover text) names the
//! kernel, its source ops and its time. Under `--memory-budget` a dark strip along the bottom of
//! each row marks the streamed uploads (the transfer queue's profiling events), so gaps where
//! neither computes nor transfers show. The output is a pure function of the figures, so it is
//! deterministic and unit-tested here.

use std::fmt::Write as _;

use fbc_dialects::kind::{LayoutOp, OpKind, TensorOp};
use fbc_viz::svg::escape;

use crate::bench::StrategyFigures;

/// Width of the row labels, left of the plot.
const LABEL_W: f64 = 200.0;
/// Width of the plot: the longest row's last launch ends at its right edge.
const PLOT_W: f64 = 960.0;
const RIGHT_W: f64 = 40.0;
const TOP: f64 = 12.0;
const ROW_H: f64 = 32.0;
const BAR_H: f64 = 22.0;
/// The narrowest bar: a launch far shorter than a pixel still shows (and keeps its hover text).
const MIN_BAR_W: f64 = 1.0;
/// Height of the strip of streamed uploads under a row's launches (`--memory-budget`).
const TRANSFER_H: f64 = 4.0;
const LEGEND_ROW_H: f64 = 20.0;

/// What a launch computes, as the timeline colours it. In order of precedence: a fused launch
/// (`tensor.matmul+tensor.add`) takes the first kind any of its source ops has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// `layout.convert`: a layout conversion.
    Conversion,
    /// The sum of a split-K contraction's partial results (`tensor.matmul[split-k 8 sum]`).
    SplitKSum,
    /// A contraction (`tensor.matmul`), or a split-K contraction's partial sums.
    Contraction,
    /// A reduction, softmax, normalisation, cross-entropy, or one of their gradients.
    Reduction,
    /// Data movement: reshape, transpose, broadcast, slice, concat, gathers, `layout.remap`.
    Movement,
    /// Pointwise arithmetic.
    Elementwise,
    /// A source no fbc dialect defines (an op of a plugin).
    Other,
}

impl Kind {
    const ALL: [Kind; 7] = [
        Kind::Contraction,
        Kind::SplitKSum,
        Kind::Reduction,
        Kind::Elementwise,
        Kind::Movement,
        Kind::Conversion,
        Kind::Other,
    ];

    /// The kind of a launch whose manifest `source` is `source` (`+`-separated ops, the first
    /// one perhaps with a split-K note in brackets).
    pub fn of(source: &str) -> Kind {
        source
            .split('+')
            .map(|part| {
                let (name, note) = part.split_once('[').unwrap_or((part, ""));
                match OpKind::from_name(name) {
                    Some(OpKind::Layout(LayoutOp::Convert)) => Kind::Conversion,
                    Some(OpKind::Layout(LayoutOp::Remap | LayoutOp::Assign)) => Kind::Movement,
                    Some(OpKind::Tensor(_)) if note.ends_with(" sum]") => Kind::SplitKSum,
                    Some(OpKind::Tensor(t)) => Kind::of_tensor(t),
                    Some(OpKind::Func(_) | OpKind::Memory(_)) | None => Kind::Other,
                }
            })
            .min()
            .unwrap_or(Kind::Other)
    }

    /// Every tensor op named once, so that a new op must be given its colour.
    fn of_tensor(t: TensorOp) -> Kind {
        use TensorOp as T;
        match t {
            T::Matmul | T::Attention | T::Conv2d | T::Conv2dGradInput | T::Conv2dGradWeight => {
                Kind::Contraction
            }
            fbc_dialects::tensor_reductions!()
            | T::Softmax
            | T::Layernorm
            | T::Rmsnorm
            | T::CrossEntropy
            | T::SoftmaxGrad
            | T::LayernormGrad
            | T::RmsnormGrad
            | T::CrossEntropyGrad
            | T::Unbroadcast
            | T::EmbeddingGrad
            | T::GroupNorm
            | T::GroupNormGrad => Kind::Reduction,
            fbc_dialects::tensor_data_movement!()
            | T::Embedding
            | T::SliceGrad
            | T::UpdateSlice
            | T::Upsample => Kind::Movement,
            fbc_dialects::tensor_elementwise_binary!()
            | fbc_dialects::tensor_elementwise_unary!()
            | fbc_dialects::tensor_elementwise_vjps!()
            | T::Scale
            | T::Ge
            | T::Select
            | T::Cast
            | T::Dequantize
            | T::Rope
            | T::RopeGrad
            | T::CausalMask
            | T::Constant => Kind::Elementwise,
        }
    }

    /// The CSS class of its bars (`k-NAME`).
    pub fn class(self) -> &'static str {
        match self {
            Kind::Conversion => "conversion",
            Kind::SplitKSum => "splitk",
            Kind::Contraction => "contraction",
            Kind::Reduction => "reduction",
            Kind::Movement => "movement",
            Kind::Elementwise => "elementwise",
            Kind::Other => "other",
        }
    }

    fn legend(self) -> &'static str {
        match self {
            Kind::Conversion => "conversion (layout.convert)",
            Kind::SplitKSum => "split-K sum",
            Kind::Contraction => "contraction (matmul)",
            Kind::Reduction => "reduction, softmax, norm",
            Kind::Movement => "data movement, remap",
            Kind::Elementwise => "elementwise",
            Kind::Other => "other",
        }
    }
}

const STYLE: &str = "\
body{font:14px system-ui,sans-serif;margin:16px;color:#222}
h1{font-size:18px;margin:0 0 4px}
p{margin:0 0 12px;color:#555}
text{font-size:12px;fill:#222}
text.sub{fill:#777;font-size:11px}
.lane{fill:#f4f4f4}
.grid{stroke:#ddd}
.axis{stroke:#555}
.k{stroke:#fff;stroke-width:0.5}
.k:hover{stroke:#000;stroke-width:1.5}
.k-contraction{fill:#4e79a7}
.k-splitk{fill:#76b7b2}
.k-reduction{fill:#f28e2b}
.k-elementwise{fill:#59a14f}
.k-movement{fill:#b07aa1}
.k-other{fill:#bab0ac}
.k-conversion{fill:url(#hatch);stroke:#b71c1c}
.t{fill:#111}
";

/// The spacing of the axis ticks, in µs: 1, 2 or 5 times a power of ten, at most ten steps over
/// `span_us`; and the decimals its labels need.
fn tick_step(span_us: f64) -> (f64, usize) {
    let raw = span_us / 10.0;
    let mut step = 10f64.powf(raw.log10().floor());
    for m in [1.0, 2.0, 5.0, 10.0] {
        if step * m >= raw {
            step *= m;
            break;
        }
    }
    let decimals = (-step.log10().floor()).max(0.0) as usize;
    (step, decimals)
}

/// The timeline of `runs` (the rows, in order) of `fbc bench FILE` on `device`, `repeat` timed
/// runs: the HTML page described in the module documentation.
pub fn html(file: &str, device: &str, repeat: usize, runs: &[StrategyFigures]) -> String {
    // Transfers before a row's first launch move the origin back (the axis starts at them).
    let transfers = |r: &StrategyFigures| -> Vec<(i64, u64)> {
        r.streaming.as_ref().map(|st| st.transfers.clone()).unwrap_or_default()
    };
    let origin = runs.iter().flat_map(transfers).map(|(at, _)| at).min().unwrap_or(0).min(0);
    let shift = origin.unsigned_abs();
    let span = runs
        .iter()
        .flat_map(|r| &r.kernels)
        .map(|k| shift + k.start_ns + k.last_ns)
        .chain(runs.iter().flat_map(transfers).map(|(at, len)| (at - origin).unsigned_abs() + len))
        .max()
        .unwrap_or(0)
        .max(1);
    let scale = PLOT_W / span as f64;
    let rows_h = runs.len() as f64 * ROW_H;
    let axis_y = TOP + rows_h + 4.0;
    let legend_y = axis_y + 40.0;
    let width = LABEL_W + PLOT_W + RIGHT_W;
    let height = legend_y + (Kind::ALL.len() as f64 / 4.0).ceil() * LEGEND_ROW_H + 8.0;

    let mut s = String::new();
    let _ = write!(
        s,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <title>fbc bench timeline: {f}</title>\n<style>\n{STYLE}</style>\n</head>\n<body>\n\
         <h1>fbc bench timeline: {f}</h1>\n\
         <p>{d}: the last of {repeat} timed run(s) after a warm-up; each launch at its start after \
         the run's first launch started and as wide as its device time (OpenCL profiling events). \
         Hover a bar for its kernel.</p>\n",
        f = escape(file),
        d = escape(device),
    );
    let _ = writeln!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width:.0}\" height=\"{height:.0}\" \
         viewBox=\"0 0 {width:.0} {height:.0}\">\n<defs><pattern id=\"hatch\" width=\"6\" \
         height=\"6\" patternUnits=\"userSpaceOnUse\" patternTransform=\"rotate(45)\">\
         <rect width=\"6\" height=\"6\" fill=\"#e15759\"/>\
         <line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#7f1d1d\" stroke-width=\"3\"/>\
         </pattern></defs>"
    );
    // The grid and the axis, under the bars.
    let span_us = span as f64 / 1e3;
    let (step, decimals) = tick_step(span_us);
    let ticks = (span_us / step + 1e-9).floor() as usize;
    for i in 0..=ticks {
        let us = step * i as f64;
        let x = LABEL_W + us * 1e3 * scale;
        let _ = writeln!(
            s,
            "<line class=\"grid\" x1=\"{x:.2}\" y1=\"{TOP:.2}\" x2=\"{x:.2}\" y2=\"{axis_y:.2}\"/>\
             <text x=\"{x:.2}\" y=\"{:.2}\" text-anchor=\"middle\">{us:.decimals$}</text>",
            axis_y + 16.0
        );
    }
    let _ = writeln!(
        s,
        "<line class=\"axis\" x1=\"{LABEL_W:.2}\" y1=\"{axis_y:.2}\" x2=\"{:.2}\" y2=\"{axis_y:.2}\"/>\
         <text x=\"{:.2}\" y=\"{:.2}\" text-anchor=\"end\">µs</text>",
        LABEL_W + PLOT_W,
        LABEL_W - 24.0,
        axis_y + 16.0
    );
    for (i, r) in runs.iter().enumerate() {
        let y = TOP + i as f64 * ROW_H;
        let bar_y = y + (ROW_H - BAR_H) / 2.0;
        let total_us = r.kernels.iter().map(|k| k.last_ns).sum::<u64>() as f64 / 1e3;
        let _ = writeln!(
            s,
            "<g class=\"row\">\n<rect class=\"lane\" x=\"{LABEL_W:.2}\" y=\"{bar_y:.2}\" \
             width=\"{PLOT_W:.2}\" height=\"{BAR_H:.2}\"/>\n\
             <text x=\"{lx:.2}\" y=\"{:.2}\" text-anchor=\"end\">{}</text>\n\
             <text class=\"sub\" x=\"{lx:.2}\" y=\"{:.2}\" text-anchor=\"end\">{} launches, {total_us:.3} µs</text>",
            y + 13.0,
            escape(&r.strategy),
            y + 26.0,
            r.kernels.len(),
            lx = LABEL_W - 8.0,
        );
        for k in &r.kernels {
            let x = LABEL_W + (shift + k.start_ns) as f64 * scale;
            let w = (k.last_ns as f64 * scale).max(MIN_BAR_W);
            let _ = writeln!(
                s,
                "<rect class=\"k k-{}\" x=\"{x:.2}\" y=\"{bar_y:.2}\" width=\"{w:.2}\" \
                 height=\"{BAR_H:.2}\"><title>{}\n{}\n{:.3} µs at {:.3} µs</title></rect>",
                Kind::of(&k.source).class(),
                escape(&k.kernel),
                escape(&k.source),
                k.last_ns as f64 / 1e3,
                k.start_ns as f64 / 1e3,
            );
        }
        // Streamed uploads: a strip along the lane's bottom edge.
        for (n, (at, len)) in transfers(r).into_iter().enumerate() {
            let x = LABEL_W + (at - origin).unsigned_abs() as f64 * scale;
            let w = (len as f64 * scale).max(MIN_BAR_W);
            let _ = writeln!(
                s,
                "<rect class=\"t\" x=\"{x:.2}\" y=\"{:.2}\" width=\"{w:.2}\" \
                 height=\"{TRANSFER_H:.2}\"><title>upload {n}\n{:.3} µs at {:.3} µs</title></rect>",
                bar_y + BAR_H,
                len as f64 / 1e3,
                at as f64 / 1e3,
            );
        }
        s.push_str("</g>\n");
    }
    // The legend, four kinds a line.
    for (i, kind) in Kind::ALL.iter().enumerate() {
        let x = LABEL_W + (i % 4) as f64 * 240.0;
        let y = legend_y + (i / 4) as f64 * LEGEND_ROW_H;
        let _ = writeln!(
            s,
            "<rect class=\"swatch k-{}\" x=\"{x:.2}\" y=\"{y:.2}\" width=\"14\" height=\"14\"/>\
             <text x=\"{:.2}\" y=\"{:.2}\">{}</text>",
            kind.class(),
            x + 20.0,
            y + 11.0,
            escape(kind.legend()),
        );
    }
    s.push_str("</svg>\n</body>\n</html>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::{KernelFigures, StrategyFigures};

    fn kernel(name: &str, source: &str, start_ns: u64, last_ns: u64) -> KernelFigures {
        KernelFigures {
            kernel: name.into(),
            source: source.into(),
            tiled: false,
            skinny: false,
            packed: false,
            conversion: source.contains("layout.convert"),
            median_ns: last_ns,
            start_ns,
            last_ns,
            flops: 0,
            bytes: 0,
            gflops: 0.0,
            gbps: 0.0,
        }
    }

    fn run(strategy: &str, kernels: Vec<KernelFigures>) -> StrategyFigures {
        StrategyFigures {
            strategy: strategy.into(),
            level: 3,
            kernel_count: kernels.len(),
            conversion_kernels: kernels.iter().filter(|k| k.conversion).count(),
            total_ns: kernels.iter().map(|k| k.median_ns).sum(),
            kernels,
            ..Default::default()
        }
    }

    /// The first lines of the elements of `html` that draw launches.
    fn bars(html: &str) -> Vec<&str> {
        html.lines().filter(|l| l.starts_with("<rect class=\"k ")).collect()
    }

    #[test]
    fn bars_lie_at_their_start_and_are_as_wide_as_their_time() {
        // 2000 ns end to end over the 960 px plot: 0.48 px per ns, from x = 200.
        let r = run(
            "convert",
            vec![
                kernel("mha_matmul_q", "tensor.matmul+tensor.add", 0, 1000),
                kernel("mha_convert_k", "layout.convert", 1500, 500),
            ],
        );
        let html = html("a.fbir", "dev", 1, &[r]);
        assert_eq!(
            bars(&html),
            [
                "<rect class=\"k k-contraction\" x=\"200.00\" y=\"17.00\" width=\"480.00\" \
                 height=\"22.00\"><title>mha_matmul_q",
                "<rect class=\"k k-conversion\" x=\"920.00\" y=\"17.00\" width=\"240.00\" \
                 height=\"22.00\"><title>mha_convert_k",
            ]
        );
        assert!(html.contains("tensor.matmul+tensor.add\n1.000 µs at 0.000 µs</title></rect>"));
        assert!(html.contains("layout.convert\n0.500 µs at 1.500 µs</title></rect>"));
    }

    #[test]
    fn rows_share_one_axis_and_short_launches_still_show() {
        // The longer row sets the scale (4000 ns: 0.24 px per ns); a 1 ns launch is 1 px wide.
        let a = run("fblayout", vec![kernel("k0", "tensor.softmax", 0, 1)]);
        let b = run("reuse", vec![kernel("k1", "tensor.exp", 1000, 3000)]);
        let html = html("a.fbir", "dev", 2, &[a, b]);
        let bars = bars(&html);
        assert!(
            bars[0].starts_with(
                "<rect class=\"k k-reduction\" x=\"200.00\" y=\"17.00\" width=\"1.00\""
            ),
            "{}",
            bars[0]
        );
        assert!(
            bars[1].starts_with(
                "<rect class=\"k k-elementwise\" x=\"440.00\" y=\"49.00\" width=\"720.00\""
            ),
            "{}",
            bars[1]
        );
        // Ticks of 0.5 µs from 0 to 4 µs.
        assert!(html.contains(">0.0</text>") && html.contains(">4.0</text>"), "{html}");
        assert!(!html.contains(">4.5</text>"));
    }

    #[test]
    fn streamed_uploads_are_drawn_under_their_row_and_may_start_before_it() {
        // An upload 1000 ns before the first launch moves the axis back: 3000 ns end to end,
        // 0.32 px per ns; the launch at 0 lies at x = 200 + 320.
        let mut r = run("fblayout", vec![kernel("k0", "tensor.matmul", 0, 2000)]);
        r.streaming = Some(crate::bench::StreamingFigures {
            transfers: vec![(-1000, 500), (1500, 500)],
            ..Default::default()
        });
        let html = html("a.fbir", "dev", 1, &[r]);
        assert!(bars(&html)[0].starts_with(
            "<rect class=\"k k-contraction\" x=\"520.00\" y=\"17.00\" width=\"640.00\""
        ));
        let strips: Vec<&str> =
            html.lines().filter(|l| l.starts_with("<rect class=\"t\"")).collect();
        assert_eq!(
            strips,
            [
                "<rect class=\"t\" x=\"200.00\" y=\"39.00\" width=\"160.00\" height=\"4.00\">\
                 <title>upload 0",
                "<rect class=\"t\" x=\"1000.00\" y=\"39.00\" width=\"160.00\" height=\"4.00\">\
                 <title>upload 1",
            ]
        );
        assert!(html.contains("upload 0\n0.500 µs at -1.000 µs</title></rect>"));
    }

    #[test]
    fn kinds_follow_the_source_ops() {
        assert_eq!(Kind::of("layout.convert"), Kind::Conversion);
        assert_eq!(Kind::of("tensor.matmul"), Kind::Contraction);
        assert_eq!(Kind::of("tensor.matmul[split-k 8]"), Kind::Contraction);
        assert_eq!(Kind::of("tensor.matmul[split-k 4 tail]"), Kind::Contraction);
        assert_eq!(Kind::of("tensor.matmul[split-k 8 sum]+tensor.add"), Kind::SplitKSum);
        assert_eq!(Kind::of("tensor.scale+tensor.tanh+tensor.add"), Kind::Elementwise);
        assert_eq!(Kind::of("tensor.rmsnorm"), Kind::Reduction);
        assert_eq!(Kind::of("tensor.transpose"), Kind::Movement);
        assert_eq!(Kind::of("layout.remap"), Kind::Movement);
        assert_eq!(Kind::of("myplugin.op"), Kind::Other);
        assert_eq!(Kind::of("myplugin.op+tensor.exp"), Kind::Elementwise);
    }

    #[test]
    fn names_are_escaped() {
        let r = run("a<b", vec![kernel("k&1", "tensor.exp", 0, 10)]);
        let html = html("x\"y.fbir", "d>v", 1, &[r]);
        assert!(html.contains("a&lt;b") && html.contains("k&amp;1") && html.contains("x&quot;y"));
        assert!(html.contains("d&gt;v"));
    }

    #[test]
    fn a_tiny_timeline() {
        let fb = run(
            "fblayout",
            vec![
                kernel("f_matmul_o", "tensor.matmul[split-k 4]", 0, 2500),
                kernel("f_matmul_o_sum", "tensor.matmul[split-k 4 sum]", 2600, 400),
            ],
        );
        let conv = run(
            "convert",
            vec![
                kernel("f_convert_b", "layout.convert", 0, 800),
                kernel("f_matmul_o", "tensor.matmul", 900, 3100),
            ],
        );
        insta::assert_snapshot!(html(
            "tiny.fbir",
            "pthread-cpu (Portable Computing Language)",
            1,
            &[fb, conv]
        ));
    }
}

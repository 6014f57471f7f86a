//! `fbc calibrate --device D -o PROFILE.toml [--base PROFILE|BUILTIN] [--quick]`: measures on an
//! OpenCL device what the analytic performance model (`fbc_transforms::layout::perf_model`,
//! Eq. 1-2) and global-layout's conversion cost assume, and writes a hardware profile that
//! `--target`/`--profile` take.
//!
//! What it measures, each a micro-benchmark of a few launches (`fbc_kernels::CALIBRATE`, run by
//! `fbc_runtime::device::opencl::probe`; the median of `--repeat` timed launches after a
//! warm-up):
//!
//! - **device queries** (`CL_DEVICE_*`): compute units, the largest work-group, local memory,
//!   `image2d` support and limits, the cache line, `cl_khr_fp16`;
//! - **read bandwidth** of a buffer in row order (consecutive work-items read consecutive
//!   `float4`s: coalesced) and column order (a line apart: strided), and of an RGBA `image2d`
//!   by work-group footprint: a row of texels, a column, a square tile, each work-item walking
//!   along its own line (GB/s of data read);
//! - **the texture-cache block** (`C_h × C_w` of Eq. 1): footprints of 16 and 32 texels of every
//!   power-of-two shape, each alone on a grid of 64 × 64-texel cells (so that no two share a
//!   block), timed; Eq. 1 says a footprint costs the blocks it touches, `ceil(h / C_h) ·
//!   ceil(w / C_w)`, so each candidate block is fitted to the times (`t = a · blocks + b`, least
//!   squares) and the best fit, by R², is the block ([`fit_blocks`]); times that do not depend on
//!   the shape, or that no block explains, leave the base's block and say so;
//! - **contraction rate**: matmul-fb's three products (`fbc_models::matmul_fb_at`, Fig. 16's
//!   512 × 2048 × 8192, or 64³ with `--quick`) compiled for the profile being written and run through the
//!   `fbc bench` path, at `-O2` (operands in buffers) and `-O3` with `rtile-select{linear=false}`
//!   (every operand in its best R-Tile, in images, whatever Eq. 2 says of linear): the GFLOP/s of
//!   the tiled contraction launches whose operands are all buffers, or all images;
//! - **launch overhead**: an empty kernel launched many times back to back: its device time,
//!   the device time from one start to the next, and the host's wall time per launch.
//!
//! The profile starts from the base (`--base`, else the builtin profile that lists the device,
//! else `generic`) and replaces the numbers measured: `compute.compute_units`,
//! `max_work_group_size`, `local_mem_bytes`, `fp16` (queries; `preferred_work_groups` loses the
//! shapes the device cannot launch), `texture_cache.line_bytes`
//! (query), `block_h`/`block_w` (the fit), `image.*` (queries), `memory.dram_bandwidth_gbps` (the
//! coalesced buffer read); the figures the format has no place for go into `[measured]`. Each
//! replaced number gets the comment `measured by fbc calibrate on DEVICE (DRIVER) DATE: how`;
//! every other number keeps the base's comment (its source). The file is written only once it
//! reads back as the profile computed.

use std::fmt::Write as _;

/// Shapes of the texture-block probe's footprints, `(h, w)` in texels: every power-of-two shape
/// of 16 and of 32 texels.
pub const PROBE_SHAPES: [(u32, u32); 11] =
    [(1, 16), (2, 8), (4, 4), (8, 2), (16, 1), (1, 32), (2, 16), (4, 8), (8, 4), (16, 2), (32, 1)];

/// Side of the probe's cells, in texels: twice the longest footprint side, so that no two
/// footprints are adjacent and no block up to 32 texels on a side holds two of them.
pub const PROBE_CELL: u64 = 64;

/// The least relative spread `max / min - 1` of the probe's times for a block to be fitted.
pub const MIN_SPREAD: f64 = 0.10;

/// The least R² of the best block for it to replace the base's.
pub const MIN_R2: f64 = 0.8;

/// The fewest cells (footprints per launch) whose times a block is fitted to: `--quick`'s 4
/// are noise.
pub const MIN_PROBE_CELLS: u64 = 64;

/// One candidate block of [`fit_blocks`] and how well Eq. 1 with it explains the times.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BlockCandidate {
    /// `C_h`, `C_w` in texels.
    pub h: u32,
    pub w: u32,
    /// R² of the least-squares fit `ns = slope · blocks + intercept`.
    pub r2: f64,
    /// Nanoseconds per block touched.
    pub slope: f64,
}

/// The texture-block fit: every candidate that fits with a positive slope, best first, and the
/// verdict: the block, or why there is none.
#[derive(Debug, Clone, PartialEq)]
pub struct BlockFit {
    pub ranked: Vec<BlockCandidate>,
    /// `max / min - 1` of the times.
    pub spread: f64,
    pub verdict: Result<(u32, u32), String>,
}

/// Fits Eq. 1's block to the probe's times `(h, w, ns)` (one per footprint shape): each
/// candidate `C_h × C_w` (powers of two up to 32, from 2 texels to `max_block_texels`) predicts
/// `ceil(h / C_h) · ceil(w / C_w)` blocks per footprint; a least-squares line through (blocks,
/// ns) with a positive slope scores its R². Ranked by R², then the smaller block, then the
/// lower one. The verdict is the best candidate when the times spread by at least
/// [`MIN_SPREAD`] and its R² is at least [`MIN_R2`].
pub fn fit_blocks(times: &[(u32, u32, f64)], max_block_texels: u64) -> BlockFit {
    let ns: Vec<f64> = times.iter().map(|t| t.2).collect();
    let (lo, hi) = ns.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), &t| (lo.min(t), hi.max(t)));
    let spread = if lo > 0.0 && lo.is_finite() { hi / lo - 1.0 } else { 0.0 };
    let sides = [1u32, 2, 4, 8, 16, 32];
    let mut ranked = Vec::new();
    for &ch in &sides {
        for &cw in &sides {
            let area = u64::from(ch) * u64::from(cw);
            if area < 2 || area > max_block_texels {
                continue;
            }
            let blocks: Vec<f64> = times
                .iter()
                .map(|&(h, w, _)| f64::from(h.div_ceil(ch)) * f64::from(w.div_ceil(cw)))
                .collect();
            if let Some((r2, slope)) = line_fit(&blocks, &ns) {
                if slope > 0.0 {
                    ranked.push(BlockCandidate { h: ch, w: cw, r2, slope });
                }
            }
        }
    }
    ranked.sort_by(|a, b| {
        b.r2.total_cmp(&a.r2)
            .then((u64::from(a.h) * u64::from(a.w)).cmp(&(u64::from(b.h) * u64::from(b.w))))
            .then(a.h.cmp(&b.h))
    });
    let verdict = if times.len() < 3 {
        Err(format!("{} footprint shapes timed, too few to fit", times.len()))
    } else if spread < MIN_SPREAD {
        Err(format!(
            "the footprints' times differ by {:.1}% at most (under {:.0}%): reads here do not \
             depend on the footprint's shape",
            spread * 100.0,
            MIN_SPREAD * 100.0
        ))
    } else {
        match ranked.first() {
            Some(b) if b.r2 >= MIN_R2 => Ok((b.h, b.w)),
            Some(b) => Err(format!(
                "no block explains the times: the best, {}x{}, has R² {:.3} (under {MIN_R2})",
                b.h, b.w, b.r2
            )),
            None => Err("no block predicts more time for more blocks".into()),
        }
    };
    BlockFit { ranked, spread, verdict }
}

/// The least-squares line `y = slope · x + b`: its R² and slope; `None` when `x` or `y` is
/// constant.
fn line_fit(x: &[f64], y: &[f64]) -> Option<(f64, f64)> {
    let n = x.len() as f64;
    let (mx, my) = (x.iter().sum::<f64>() / n, y.iter().sum::<f64>() / n);
    let sxx: f64 = x.iter().map(|v| (v - mx) * (v - mx)).sum();
    let syy: f64 = y.iter().map(|v| (v - my) * (v - my)).sum();
    let sxy: f64 = x.iter().zip(y).map(|(a, b)| (a - mx) * (b - my)).sum();
    if sxx <= 0.0 || syy <= 0.0 || !sxx.is_finite() || !syy.is_finite() {
        return None;
    }
    let slope = sxy / sxx;
    let b = my - slope * mx;
    let res: f64 = x.iter().zip(y).map(|(a, v)| (v - (slope * a + b)).powi(2)).sum();
    Some((1.0 - res / syy, slope))
}

/// The extents of the micro-benchmarks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sizes {
    /// `float4`s per line of the streamed buffer.
    pub line: u64,
    /// Lines of it (the buffer is `line · lines` `float4`s).
    pub lines: u64,
    /// `float4`s (buffer) or footprints (image) one work-item or work-group reads.
    pub steps: u64,
    /// Side of the square image, in texels.
    pub image_side: u64,
    /// Work-items of a work-group reading the image: the footprint's texels.
    pub footprint: u64,
    /// Cells of the texture-block probe one work-group reads.
    pub probe_steps: u64,
    /// Back-to-back launches of the empty kernel.
    pub empty_launches: usize,
    /// `M × K × N` of the contraction.
    pub matmul: (u64, u64, u64),
    /// Timed launches (or runs) of each benchmark.
    pub repeat: usize,
}

impl Sizes {
    /// Bytes of the streamed buffer.
    pub fn buffer_bytes(&self) -> u64 {
        self.line * self.lines * 16
    }

    /// Bytes of the image.
    pub fn image_bytes(&self) -> u64 {
        self.image_side * self.image_side * 16
    }

    /// Floats of the output buffer every read kernel writes one value per work-item into.
    pub fn out_floats(&self) -> u64 {
        let buffer = self.line * self.lines / self.steps;
        let image = self.image_side * self.image_side / self.steps;
        buffer.max(image).max(1)
    }
}

/// The extents for a device: `quick` tiny ones, else a 128 MiB buffer and a 2048²-texel
/// (64 MiB) image, each halved until it fits `budget` bytes (a quarter of the memory limit, of
/// the device's global memory and of its largest allocation, the caller's smallest) and the
/// device's image limit `image_max`; work-groups of at most `max_group` work-items.
pub fn sizes(
    quick: bool,
    repeat: Option<u32>,
    budget: u64,
    image_max: [u64; 2],
    max_group: u64,
) -> Result<Sizes, String> {
    let (mut buffer, mut side) = if quick { (256 << 10, 128u64) } else { (128 << 20, 2048u64) };
    while buffer > budget && buffer > 64 << 10 {
        buffer /= 2;
    }
    while (side * side * 16 > budget || side > image_max[0].min(image_max[1])) && side > 128 {
        side /= 2;
    }
    if buffer > budget {
        return Err(format!(
            "the device or the memory limit allows {budget} bytes, fewer than the smallest \
             benchmark buffer (64 KiB)"
        ));
    }
    // Lines of at most 1024 float4s (16 KiB), at least 16 of them: both read orders divide into
    // steps of 16.
    let line: u64 = (if quick { 64 } else { 1024 }).min(buffer / 16 / 16);
    let footprint = [64u64, 32, 16, 8, 4, 2, 1].into_iter().find(|&a| a <= max_group).unwrap_or(1);
    Ok(Sizes {
        line,
        lines: buffer / 16 / line,
        steps: 16,
        image_side: side,
        footprint,
        probe_steps: if quick { 1 } else { 4 },
        empty_launches: if quick { 20 } else { 1000 },
        // Fig. 16's products (M=512, K=2048, N=8192): long enough to reach the device's rate
        // (at 512³ an H200 ran fbc's kernel at 6.7 TFLOP/s, at this size at 40).
        matmul: if quick { (64, 64, 64) } else { (512, 2048, 8192) },
        repeat: repeat.map_or(if quick { 2 } else { 5 }, |r| r as usize),
    })
}

/// `h × w` for a square-ish footprint of `area` texels (a power of two): `8 × 8` for 64,
/// `4 × 8` for 32.
pub fn tile_of(area: u64) -> (u64, u64) {
    let h = 1u64 << (area.max(1).ilog2() / 2);
    (h, area.max(1) / h)
}

/// A number rounded to 4 significant digits, for the profile (a measurement has no more).
pub fn round4(v: f64) -> f64 {
    if v == 0.0 || !v.is_finite() {
        return v;
    }
    let scale = 10f64.powi(3 - v.abs().log10().floor() as i32);
    (v * scale).round() / scale
}

/// A profile name (`[a-z0-9_-]`) from a device name: lower case, every run of other
/// characters one `-`, at most 48 characters; `calibrated` for a name with no letter or digit.
pub fn profile_name(device: &str) -> String {
    let mut out = String::new();
    for c in device.chars().flat_map(char::to_lowercase) {
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            out.push(c);
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
    }
    let mut out: String = out.chars().take(48).collect();
    while out.ends_with('-') {
        out.pop();
    }
    if out.is_empty() {
        "calibrated".into()
    } else {
        out
    }
}

/// The first line of the header `fbc calibrate` writes.
pub const HEADER_START: &str = "# Calibrated by `fbc calibrate` on ";

/// `text` without the header of an earlier calibration (its lines up to the first line that is
/// `#` alone), so that a profile calibrated again over its own file says once where its
/// numbers come from.
pub fn without_calibration_header(text: &str) -> String {
    if !text.starts_with(HEADER_START) {
        return text.to_string();
    }
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        at += line.len();
        if line.trim_end() == "#" {
            return text[at..].to_string();
        }
    }
    text.to_string()
}

/// The block fit's table and verdict, for the report.
pub fn fit_report(times: &[(u32, u32, f64)], fit: &BlockFit) -> String {
    let mut s = String::new();
    let shapes: Vec<String> = times.iter().map(|(h, w, ns)| format!("{h}x{w} {ns:.1}")).collect();
    let _ = writeln!(s, "  ns per footprint: {}", shapes.join(", "));
    let best: Vec<String> =
        fit.ranked.iter().take(4).map(|c| format!("{}x{} R² {:.3}", c.h, c.w, c.r2)).collect();
    let _ = writeln!(s, "  Eq. 1 fits (best first): {}", best.join(", "));
    match &fit.verdict {
        Ok((h, w)) => {
            let _ = writeln!(s, "  block: {h}x{w} texels");
        }
        Err(why) => {
            let _ = writeln!(s, "  no block measured: {why}");
        }
    }
    s
}

#[cfg(not(feature = "opencl"))]
pub(crate) fn run(
    _driver: &crate::Driver,
    _a: &crate::cli::CalibrateArgs,
    _quiet: bool,
) -> Result<(), crate::Failure> {
    Err(crate::run_cmd::opencl::no_opencl())
}

#[cfg(feature = "opencl")]
pub(crate) use device::run;

#[cfg(feature = "opencl")]
mod device {
    use std::fmt::Write as _;
    use std::sync::Arc;

    use fbc_codegen::opencl::StorageKind;
    use fbc_runtime::device::opencl::{
        DeviceFacts, DeviceSel, Probe, ProbeArg, ProbeLaunch, ProbeStorage, ProbeTimes, Progress,
        RunOptions,
    };
    use fbc_target::{BlockTime, Date, HardwareProfile, Measured, Note, Positive};

    use super::*;
    use crate::cli::CalibrateArgs;
    use crate::{Driver, Failure};

    /// What one launch of the probe measures.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Bench {
        BufferRows,
        BufferColumns,
        /// Image reads in `order`: footprint `h × w`, sweeping down (rows) or right.
        Image {
            order: Order,
            h: u64,
            w: u64,
            down: bool,
        },
        /// The texture-block probe's footprint `h × w`.
        Block {
            h: u32,
            w: u32,
        },
        Empty,
    }

    /// The access orders of image reads.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Order {
        Rows,
        Columns,
        Tiles,
    }

    /// The probe of `s`: storage 0 the streamed buffer, 1 the output buffer, 2 the image (with
    /// `images`); one launch per [`Bench`].
    fn plan(s: &Sizes, images: bool) -> (Probe, Vec<Bench>) {
        let int = |v: u64| ProbeArg::Int(i32::try_from(v).unwrap_or(i32::MAX));
        let mut storage = vec![
            ProbeStorage::Buffer { floats: s.line * s.lines * 4 },
            ProbeStorage::Buffer { floats: s.out_floats() },
        ];
        let (src, out, img) = (ProbeArg::Storage(0), ProbeArg::Storage(1), ProbeArg::Storage(2));
        let launch =
            |kernel: &str, args: Vec<ProbeArg>, global: Vec<u64>, local: Option<u64>| ProbeLaunch {
                kernel: kernel.into(),
                args,
                global,
                local: local.map(|l| vec![l]),
                repeat: s.repeat,
            };
        let mut launches = vec![
            launch(
                "fbc_cal_buffer_rows",
                vec![src, out, int(s.line), int(s.steps)],
                vec![s.line, s.lines / s.steps],
                None,
            ),
            launch(
                "fbc_cal_buffer_columns",
                vec![src, out, int(s.line), int(s.steps)],
                vec![s.lines, s.line / s.steps],
                None,
            ),
        ];
        let mut benches = vec![Bench::BufferRows, Bench::BufferColumns];
        if images {
            storage.push(ProbeStorage::Image { width: s.image_side, height: s.image_side });
            let a = s.footprint;
            let (th, tw) = tile_of(a);
            for (order, h, w, down) in [
                (Order::Rows, 1, a, true),
                (Order::Columns, a, 1, false),
                (Order::Tiles, th, tw, false),
            ] {
                // Footprints tile the image; a work-group reads `steps` of them.
                let (across_x, across_y) = (s.image_side / w, s.image_side / h);
                let footprints = across_x * across_y;
                let steps = s.steps.min(footprints);
                let across = if down { across_y } else { across_x };
                launches.push(launch(
                    "fbc_cal_image",
                    vec![
                        img,
                        out,
                        int(w),
                        int(w),
                        int(h),
                        int(across),
                        int(u64::from(down)),
                        int(steps),
                    ],
                    vec![footprints / steps * a],
                    Some(a),
                ));
                benches.push(Bench::Image { order, h, w, down });
            }
            let cells_across = s.image_side / PROBE_CELL;
            let cells = cells_across * cells_across;
            let steps = s.probe_steps.min(cells);
            for (h, w) in PROBE_SHAPES {
                let a = u64::from(h) * u64::from(w);
                if a > s.footprint {
                    continue;
                }
                launches.push(launch(
                    "fbc_cal_image",
                    vec![
                        img,
                        out,
                        int(u64::from(w)),
                        int(PROBE_CELL),
                        int(PROBE_CELL),
                        int(cells_across),
                        int(0),
                        int(steps),
                    ],
                    vec![cells / steps * a],
                    Some(a),
                ));
                benches.push(Bench::Block { h, w });
            }
        }
        launches.push(ProbeLaunch {
            kernel: "fbc_cal_empty".into(),
            args: vec![out],
            global: vec![1],
            local: None,
            repeat: s.empty_launches,
        });
        benches.push(Bench::Empty);
        let source = fbc_kernels::CALIBRATE.to_string();
        (Probe { source, storage, launches }, benches)
    }

    /// GB/s of `bytes` read in `ns`.
    fn gbps(bytes: u64, ns: u64) -> Option<f64> {
        (ns > 0).then(|| round4(bytes as f64 / ns as f64))
    }

    /// The contraction's figures at one level.
    struct ContractionRate {
        level: u8,
        /// Tiled launches whose operands are all in the wanted storage, and all tiled ones.
        counted: usize,
        tiled: usize,
        gflops: Option<f64>,
    }

    /// matmul-fb at `dims`, compiled for `profile` at `-O2` (buffers) and `-O3` (images), run
    /// on the device: the tiled launches' GFLOP/s whose operands are all buffers, and all
    /// images. `done` is called after each run.
    fn contraction(
        driver: &Driver,
        profile: &HardwareProfile,
        dims: (u64, u64, u64),
        device: &DeviceSel,
        repeat: usize,
        done: &dyn Fn(),
    ) -> Result<[ContractionRate; 2], Failure> {
        let (file, module) = fbc_models::matmul_fb_at(&driver.ops, dims).map_err(|e| match e {
            fbc_models::Error::Usage(m) => Failure::Usage(m),
            fbc_models::Error::Internal(m) => Failure::Input(format!("{m}\n")),
        })?;
        let mut session = crate::Session::new(driver, profile.clone());
        let mut rates = Vec::new();
        for (level, images) in [(2u8, false), (3, true)] {
            session.level = level;
            let mut m = module.clone();
            if images {
                // -O3 with every operand that has R-Tile candidates in its best R-Tile, whatever
                // Eq. 2 says of linear (which a calibrated profile may prefer at this size): the
                // rate of R-Tile operands is what is measured.
                let o3 =
                    fbc_transforms::pipeline(3, fbc_transforms::global_layout::Strategy::FbLayout);
                let pipeline = o3.replacen("rtile-select", "rtile-select{linear=false}", 1);
                session.run(&file, &mut m, &pipeline)?;
                session.lower(&file, &mut m)?;
                let errors = fbc_ir::verify::verify_module(&m);
                if !errors.is_empty() {
                    return Err(Failure::input(&file, &errors));
                }
            }
            let c = crate::run_cmd::opencl::compile_loaded(
                &session,
                Arc::clone(&file),
                m,
                None,
                true,
                crate::tuning::Entries::default(),
            )?;
            let fname = c.entry_name();
            let inputs =
                c.inputs(crate::run_cmd::io::Sources { seed: Some(1), ..Default::default() })?;
            let opts = RunOptions { device: device.clone(), repeat, ..RunOptions::default() };
            let res = fbc_runtime::device::opencl::run(
                &c.out.source,
                &c.out.manifest,
                &fname,
                &inputs,
                &opts,
            )
            .map_err(|e| crate::run_cmd::opencl::device_failure(&file.name, &e))?;
            done();
            let f = c.out.manifest.function(&fname).ok_or_else(|| {
                Failure::Internal(format!("no function @{fname} in the manifest\n"))
            })?;
            let (mut flops, mut ns, mut counted, mut tiled) = (0u64, 0u64, 0usize, 0usize);
            for (l, t) in f.launches().zip(&res.launches) {
                if !l.tiled {
                    continue;
                }
                tiled += 1;
                let inputs = &l.args[..l.args.len().saturating_sub(1)];
                let all = !inputs.is_empty()
                    && inputs.iter().all(|&a| {
                        f.storage.get(a).is_some_and(|d| {
                            matches!(d.kind, StorageKind::Image2d { .. }) == images
                        })
                    });
                if all {
                    counted += 1;
                    flops = flops.saturating_add(l.flops);
                    ns = ns.saturating_add(t.median_ns());
                }
            }
            let gflops = (ns > 0 && flops > 0).then(|| round4(flops as f64 / ns as f64));
            rates.push(ContractionRate { level, counted, tiled, gflops });
        }
        let [buffers, images] = <[ContractionRate; 2]>::try_from(rates)
            .map_err(|_| Failure::Internal("two contraction levels expected\n".into()))?;
        Ok([buffers, images])
    }

    /// `fbc calibrate`: see the module documentation. `quiet` (`-q`) hides the progress bar.
    pub(crate) fn run(driver: &Driver, a: &CalibrateArgs, quiet: bool) -> Result<(), Failure> {
        let sel = DeviceSel::parse(&a.device);
        let facts = fbc_runtime::device::opencl::device_facts(&sel)
            .map_err(|e| Failure::Usage(e.to_string()))?;
        let (base_name, base_text) = base(a.base.as_deref(), &facts.name)?;
        let base_text = without_calibration_header(&base_text);
        let base = fbc_target::from_toml(&base_text)
            .map_err(|e| Failure::Input(format!("{base_name}: error: {e}\n")))?;
        let date = Date::today().ok_or_else(|| {
            Failure::Usage("the system clock is not a date from 1970 to 9999".into())
        })?;
        let on = format!("measured by fbc calibrate on {} ({}) {date}", facts.name, facts.driver);

        let limit = fbc_runtime::limits::max_memory();
        let mut budget = limit / 4;
        for cap in [facts.max_alloc_bytes, facts.global_mem_bytes / 4] {
            if cap > 0 {
                budget = budget.min(cap);
            }
        }
        let images = facts.image_support;
        let s = sizes(a.quick, a.repeat, budget, facts.image2d_max, facts.max_work_group_size)
            .map_err(Failure::Usage)?;
        // The profile with the device's answers (the contraction is compiled for it).
        let mut p = base.clone();
        let mut notes: Vec<Note> = Vec::new();
        let mut note =
            |field: &str, how: String| notes.push(Note::new(field, format!("{on}: {how}")));
        let mut report = String::new();
        let _ = writeln!(
            report,
            "fbc calibrate on {} ({}, driver {}), base profile `{base_name}`, {} sizes, median of {} launch(es) after a warm-up",
            facts.name,
            facts.platform,
            facts.driver,
            if a.quick { "--quick" } else { "full" },
            s.repeat
        );
        queries(&facts, &mut p, &mut note, &mut report)?;

        let (probe, benches) = plan(&s, images);
        let bar = crate::progress::bar(
            probe.launches.len() as u64 + 2,
            format!("calibrating {}", facts.name),
            quiet,
        );
        let ticks = bar.clone();
        let opts = RunOptions {
            device: sel.clone(),
            progress: Some(Progress(Arc::new(move |n| ticks.set_position(n as u64)))),
            ..RunOptions::default()
        };
        let out = fbc_runtime::device::opencl::probe(&probe, &opts);
        let out = match out {
            Ok(o) => o,
            Err(e) => {
                bar.finish_and_clear();
                return Err(crate::run_cmd::opencl::device_failure("fbc calibrate", &e));
            }
        };

        // Reads.
        let mut m = Measured {
            device: facts.name.clone(),
            driver: facts.driver.clone(),
            date,
            quick: a.quick,
            buffer_row_gbps: None,
            buffer_column_gbps: None,
            image_row_gbps: None,
            image_column_gbps: None,
            image_tile_gbps: None,
            contraction_buffer_gflops: None,
            contraction_image_gflops: None,
            launch_device_us: None,
            launch_interval_us: None,
            launch_host_us: None,
            work_group_multiple: None,
            texture_blocks: Vec::new(),
        };
        let _ = writeln!(report, "reads (GB/s of data read):");
        let mut blocks: Vec<(u32, u32, f64)> = Vec::new();
        let mut empty: Option<&ProbeTimes> = None;
        for (b, t) in benches.iter().zip(&out.launches) {
            let ns = t.median_ns();
            match *b {
                Bench::BufferRows | Bench::BufferColumns => {
                    let rate = gbps(s.buffer_bytes(), ns);
                    let rows = *b == Bench::BufferRows;
                    let what = if rows {
                        "buffer, row order (coalesced)"
                    } else {
                        "buffer, column order (strided)"
                    };
                    let _ = writeln!(
                        report,
                        "  {what:<34} {:>10}  ({}, lines of {} float4s)",
                        shown(rate),
                        size_text(s.buffer_bytes()),
                        if rows { s.line } else { s.lines }
                    );
                    let slot =
                        if rows { &mut m.buffer_row_gbps } else { &mut m.buffer_column_gbps };
                    *slot = rate.and_then(Positive::new);
                }
                Bench::Image { order, h, w, down } => {
                    let rate = gbps(s.image_bytes(), ns);
                    let (what, slot) = match order {
                        Order::Rows => ("rows", &mut m.image_row_gbps),
                        Order::Columns => ("columns", &mut m.image_column_gbps),
                        Order::Tiles => ("tiles", &mut m.image_tile_gbps),
                    };
                    let _ = writeln!(
                        report,
                        "  {:<34} {:>10}  ({}x{} texels a work-group, {}; {} image)",
                        format!("image2d, {what}"),
                        shown(rate),
                        h,
                        w,
                        if down { "walking down" } else { "walking right" },
                        size_text(s.image_bytes())
                    );
                    *slot = rate.and_then(Positive::new);
                }
                Bench::Block { h, w } => {
                    let cells = (s.image_side / PROBE_CELL).pow(2);
                    let per = ns as f64 / cells as f64;
                    if let Some(v) = Positive::new(round4(per)) {
                        blocks.push((h, w, v.get()));
                        m.texture_blocks.push(BlockTime { h, w, ns: v });
                    }
                }
                Bench::Empty => empty = Some(t),
            }
            if m.work_group_multiple.is_none() && t.work_group_multiple > 0 {
                m.work_group_multiple = u32::try_from(t.work_group_multiple).ok();
            }
        }
        if !images {
            let _ = writeln!(report, "  image2d reads: not measured (no image support)");
        }
        if let Some(r) = m.buffer_row_gbps {
            p.memory.dram_bandwidth_gbps = r.get();
            note(
                "memory.dram_bandwidth_gbps",
                format!(
                    "a {} buffer read in row order (coalesced float4s){}",
                    size_text(s.buffer_bytes()),
                    if a.quick { ", --quick: cache-resident, not DRAM" } else { "" }
                ),
            );
        }

        // The texture-block probe.
        if images {
            let max_block = (p.texture_cache.l1_bytes / 16)
                .min(p.image.max_width.min(p.image.max_height).into())
                .min(256);
            let mut fit = fit_blocks(&blocks, max_block);
            let cells = (s.image_side / PROBE_CELL).pow(2);
            if cells < MIN_PROBE_CELLS {
                fit.verdict = Err(format!(
                    "{cells} cells are too few to trust a fit (at least {MIN_PROBE_CELLS}; run \
                     without --quick)"
                ));
            }
            let _ = writeln!(
                report,
                "texture-block probe (footprints of 16 and 32 texels, each alone in a \
                 {PROBE_CELL}x{PROBE_CELL}-texel cell, {} cells):",
                (s.image_side / PROBE_CELL).pow(2)
            );
            report.push_str(&fit_report(&blocks, &fit));
            let evidence: Vec<String> = fit
                .ranked
                .iter()
                .take(3)
                .map(|c| format!("{}x{} R² {:.3}", c.h, c.w, c.r2))
                .collect();
            match fit.verdict {
                Ok((h, w)) => {
                    p.texture_cache.block_h = h;
                    p.texture_cache.block_w = w;
                    let how = format!(
                        "Eq. 1 fitted to the read time of {} footprint shapes of 16 and 32 texels \
                         (times spread {:.0}%; best fits {}; [measured].texture_blocks)",
                        blocks.len(),
                        fit.spread * 100.0,
                        evidence.join(", ")
                    );
                    note("texture_cache.block_h", how.clone());
                    note("texture_cache.block_w", how);
                }
                Err(_) => {
                    let _ = writeln!(
                        report,
                        "  texture_cache.block_h/block_w kept from `{base_name}` ({}x{})",
                        p.texture_cache.block_h, p.texture_cache.block_w
                    );
                }
            }
        }

        // Launch overhead.
        if let Some(t) = empty {
            let n = t.ns.len().max(1) as f64;
            let device = t.median_ns() as f64 * 1e-3;
            let interval = t
                .starts
                .last()
                .map(|&l| l as f64 * 1e-3 / (t.starts.len().saturating_sub(1)).max(1) as f64);
            let host = t.host_ns as f64 * 1e-3 / n;
            m.launch_device_us = Positive::new(round4(device));
            m.launch_interval_us = interval.and_then(|v| Positive::new(round4(v)));
            m.launch_host_us = Positive::new(round4(host));
            let _ = writeln!(
                report,
                "launch overhead ({} empty kernels back to back): device {device:.2} us each, {} us start to start, host {host:.2} us per launch",
                t.ns.len(),
                interval.map_or("-".into(), |v| format!("{v:.2}"))
            );
        }

        // The contraction, compiled for the profile with the device's answers.
        let done = || bar.inc(1);
        let rates = contraction(driver, &p, s.matmul, &sel, s.repeat, &done);
        bar.finish_and_clear();
        let (mm, mk, mn) = s.matmul;
        let _ = writeln!(
            report,
            "contraction (matmul-fb's three products at {mm}x{mk}x{mn}, fbc's tiled kernel):"
        );
        // A contraction the device cannot run leaves its figures out; the rest is written.
        let rates = rates.map_err(|e| {
            let (Failure::Input(t) | Failure::Usage(t) | Failure::Internal(t)) = e;
            let why = t.trim_end().to_string();
            eprintln!("fbc: warning: the contraction did not run, its rate is not measured: {why}");
            let _ = writeln!(report, "  not measured: {why}");
        });
        let (mut buffer_rate, mut image_rate) = (None, None);
        if let Ok(rates) = &rates {
            for (r, what) in rates.iter().zip(["buffer operands", "R-Tile image operands"]) {
                let _ = writeln!(
                    report,
                    "  {what:<22} -O{}: {} GFLOP/s ({} of {} tiled launches read only {})",
                    r.level,
                    shown(r.gflops),
                    r.counted,
                    r.tiled,
                    if r.level == 2 { "buffers" } else { "images" }
                );
            }
            (buffer_rate, image_rate) = (rates[0].gflops, rates[1].gflops);
        }
        m.contraction_buffer_gflops = buffer_rate.and_then(Positive::new);
        m.contraction_image_gflops = image_rate.and_then(Positive::new);
        // `compute.peak_f32_gflops` stays the base's hardware peak: the model scales it by
        // occupancy and padding use itself, which a measured kernel rate already includes (on
        // the H200, the Llama step compiled with the peak replaced by a measured rate ran 1.22x
        // slower). The rates are evidence, in `[measured]`.

        let blocks_measured = !m.texture_blocks.is_empty();
        for (field, present, how) in [
            (
                "buffer_row_gbps",
                m.buffer_row_gbps.is_some(),
                "buffer read, consecutive work-items on consecutive float4s",
            ),
            (
                "buffer_column_gbps",
                m.buffer_column_gbps.is_some(),
                "buffer read, consecutive work-items a line apart",
            ),
            (
                "image_row_gbps",
                m.image_row_gbps.is_some(),
                "image2d read, a work-group's texels a row, each walking down",
            ),
            (
                "image_column_gbps",
                m.image_column_gbps.is_some(),
                "image2d read, a work-group's texels a column, each walking right",
            ),
            (
                "image_tile_gbps",
                m.image_tile_gbps.is_some(),
                "image2d read, a work-group's texels a square tile",
            ),
            (
                "contraction_buffer_gflops",
                m.contraction_buffer_gflops.is_some(),
                "tiled contraction, -O2, buffer operands",
            ),
            (
                "contraction_image_gflops",
                m.contraction_image_gflops.is_some(),
                "tiled contraction, -O3, R-Tile image operands",
            ),
            (
                "launch_device_us",
                m.launch_device_us.is_some(),
                "empty kernel, END - START of its event",
            ),
            (
                "launch_interval_us",
                m.launch_interval_us.is_some(),
                "empty kernels back to back, START to next START",
            ),
            (
                "launch_host_us",
                m.launch_host_us.is_some(),
                "empty kernels back to back, host wall time per launch",
            ),
            (
                "work_group_multiple",
                m.work_group_multiple.is_some(),
                "CL_KERNEL_PREFERRED_WORK_GROUP_SIZE_MULTIPLE",
            ),
            (
                "texture_blocks",
                blocks_measured,
                "ns to read one h x w footprint alone in its cell (median launch / cells)",
            ),
        ] {
            if present {
                note(&format!("measured.{field}"), how.to_string());
            }
        }
        p.measured = Some(m);
        p.name = profile_name(&facts.name);
        p.description = format!(
            "{} ({}), calibrated by fbc calibrate on {date} from base profile `{base_name}`",
            facts.name, facts.platform
        );
        p.devices = vec![facts.name.clone()];
        let header = format!(
            "{HEADER_START}{date}{}:\n\
             #   {} ({}, driver {}), base profile `{base_name}`.\n\
             # The numbers marked \"measured by fbc calibrate\" were measured on this device; every other\n\
             # number, and the comment that cites its source, is the base profile's. [measured] holds\n\
             # the figures the other tables have no place for.\n\
             #\n",
            if a.quick { " with --quick (tiny sizes: not representative)" } else { "" },
            facts.name,
            facts.platform,
            facts.driver,
        );
        let text = fbc_target::write_over(&base_text, &p, &notes, &header)
            .map_err(|e| Failure::Internal(format!("fbc calibrate: internal error: {e}\n")))?;
        crate::output::write_atomic(&a.output, text.as_bytes())?;
        let _ = writeln!(report, "wrote {} (profile `{}`)", a.output.display(), p.name);
        crate::output::write_text(None, &report)
    }

    /// `bytes` as `128 MiB`, `256 KiB`, `512 B`.
    fn size_text(bytes: u64) -> String {
        if bytes >= 1 << 20 {
            format!("{} MiB", bytes >> 20)
        } else if bytes >= 1 << 10 {
            format!("{} KiB", bytes >> 10)
        } else {
            format!("{bytes} B")
        }
    }

    fn shown(v: Option<f64>) -> String {
        v.map_or("-".into(), |v| format!("{v:.2}"))
    }

    /// The base profile's name and text: `--base` (a builtin name or a file), else the builtin
    /// that lists the device, else `generic`.
    fn base(arg: Option<&str>, device: &str) -> Result<(String, String), Failure> {
        let name = match arg {
            Some(b) if fbc_target::is_path(b) => {
                let text = std::fs::read_to_string(b)
                    .map_err(|e| Failure::Input(format!("{b}: error: cannot read: {e}\n")))?;
                // A malformed file is an error at its line, as for `--profile`.
                crate::hardware_profile(b)?;
                return Ok((b.to_string(), text));
            }
            Some(b) => b,
            None => fbc_target::builtin_for_device(device).unwrap_or("generic"),
        };
        let text = fbc_target::builtin_text(name).ok_or_else(|| {
            Failure::Usage(format!(
                "--base {name}: unknown target; known targets: {}",
                fbc_target::builtin_names().join(", ")
            ))
        })?;
        Ok((name.to_string(), text.to_string()))
    }

    /// The device queries into `p`: compute units, work-group limit (and the preferred shapes
    /// that fit it), local memory, fp16, the cache line, image support and limits.
    fn queries(
        f: &DeviceFacts,
        p: &mut HardwareProfile,
        note: &mut dyn FnMut(&str, String),
        report: &mut String,
    ) -> Result<(), Failure> {
        let _ = writeln!(
            report,
            "device queries: {} compute units, work-groups of up to {} work-items, {} of local memory, \
             image2d {} ({}x{}), cache line {} B, cl_khr_fp16 {}",
            f.compute_units,
            f.max_work_group_size,
            size_text(f.local_mem_bytes),
            if f.image_support { "yes" } else { "no" },
            f.image2d_max[0],
            f.image2d_max[1],
            f.cache_line_bytes,
            if f.fp16 { "yes" } else { "no" }
        );
        if f.compute_units > 0 {
            p.compute.compute_units = f.compute_units;
            note("compute.compute_units", "CL_DEVICE_MAX_COMPUTE_UNITS".into());
        }
        if let Ok(max) = u32::try_from(f.max_work_group_size) {
            if max < p.compute.subgroup_size {
                return Err(Failure::Usage(format!(
                    "{} runs work-groups of at most {max} work-items, fewer than the base profile's \
                     subgroup_size {}: choose a base profile for this device with --base",
                    f.name, p.compute.subgroup_size
                )));
            }
            p.compute.max_work_group_size = max;
            note("compute.max_work_group_size", "CL_DEVICE_MAX_WORK_GROUP_SIZE".into());
            let fits = |&[x, y]: &[u32; 2]| u64::from(x) * u64::from(y) <= u64::from(max);
            if !p.compute.preferred_work_groups.iter().all(fits) {
                p.compute.preferred_work_groups.retain(fits);
                if p.compute.preferred_work_groups.is_empty() {
                    p.compute.preferred_work_groups.push([p.compute.subgroup_size, 1]);
                }
                note(
                    "compute.preferred_work_groups",
                    format!("the base's shapes of at most {max} work-items (CL_DEVICE_MAX_WORK_GROUP_SIZE)"),
                );
            }
        }
        if f.local_mem_bytes > 0 {
            p.compute.local_mem_bytes = f.local_mem_bytes;
            note("compute.local_mem_bytes", "CL_DEVICE_LOCAL_MEM_SIZE".into());
        }
        p.compute.fp16 = f.fp16;
        note("compute.fp16", "cl_khr_fp16 in CL_DEVICE_EXTENSIONS".into());
        let line = f.cache_line_bytes;
        if line.is_power_of_two() && line >= 16 && u64::from(line) <= p.texture_cache.l1_bytes {
            p.texture_cache.line_bytes = line;
            note("texture_cache.line_bytes", "CL_DEVICE_GLOBAL_MEM_CACHELINE_SIZE".into());
        }
        p.image.supported = f.image_support;
        note("image.supported", "CL_DEVICE_IMAGE_SUPPORT".into());
        if f.image_support {
            let (w, h) = (f.image2d_max[0], f.image2d_max[1]);
            let fits = |v: u64, block: u32| u32::try_from(v).ok().filter(|&v| v >= block);
            if let (Some(w), Some(h)) =
                (fits(w, p.texture_cache.block_w), fits(h, p.texture_cache.block_h))
            {
                p.image.max_width = w;
                p.image.max_height = h;
                note("image.max_width", "CL_DEVICE_IMAGE2D_MAX_WIDTH".into());
                note("image.max_height", "CL_DEVICE_IMAGE2D_MAX_HEIGHT".into());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Read times that follow Eq. 1 for block `(ch, cw)`: `ns = 7 · blocks + 40`, with a
    /// deterministic ±2% wobble.
    fn synthetic(ch: u32, cw: u32) -> Vec<(u32, u32, f64)> {
        PROBE_SHAPES
            .iter()
            .enumerate()
            .map(|(i, &(h, w))| {
                let blocks = f64::from(h.div_ceil(ch) * w.div_ceil(cw));
                let wobble = 1.0 + 0.02 * (((i * 7) % 5) as f64 - 2.0) / 2.0;
                (h, w, (7.0 * blocks + 40.0) * wobble)
            })
            .collect()
    }

    #[test]
    fn the_block_that_made_the_times_is_found() {
        for (ch, cw) in [(1, 4), (1, 8), (2, 2), (4, 4), (2, 8), (4, 8), (8, 2), (8, 8)] {
            let fit = fit_blocks(&synthetic(ch, cw), 256);
            assert_eq!(fit.verdict, Ok((ch, cw)), "{ch}x{cw}: {:?}", &fit.ranked[..3]);
            assert!(fit.ranked[0].r2 > 0.95, "{:?}", fit.ranked[0]);
        }
    }

    #[test]
    fn times_that_do_not_depend_on_the_shape_give_no_block() {
        let flat: Vec<(u32, u32, f64)> =
            PROBE_SHAPES.iter().map(|&(h, w)| (h, w, 100.0 + f64::from(h % 3))).collect();
        let fit = fit_blocks(&flat, 256);
        let why = fit.verdict.expect_err("flat");
        assert!(why.contains("do not depend on the footprint's shape"), "{why}");
        // Times against the shape's blocks (more time for fewer blocks) fit no block.
        let backwards: Vec<(u32, u32, f64)> =
            synthetic(4, 4).into_iter().map(|(h, w, t)| (h, w, 1000.0 - t)).collect();
        let fit = fit_blocks(&backwards, 256);
        assert!(fit.verdict.is_err(), "{:?}", fit.ranked.first());
        assert!(fit_blocks(&synthetic(4, 4)[..2], 256).verdict.is_err(), "two shapes");
        // A block over the limit is never chosen.
        let fit = fit_blocks(&synthetic(8, 8), 32);
        assert!(fit.ranked.iter().all(|c| c.h * c.w <= 32));
        assert_ne!(fit.verdict, Ok((8, 8)));
    }

    #[test]
    fn sizes_fit_the_budget_and_the_image_limit() {
        let s = sizes(false, None, u64::MAX, [16384, 16384], 1024).expect("sizes");
        assert_eq!((s.buffer_bytes(), s.image_bytes()), (128 << 20, 64 << 20));
        assert_eq!((s.footprint, s.repeat), (64, 5));
        let s = sizes(false, Some(3), 16 << 20, [1024, 4096], 32).expect("sizes");
        assert_eq!(s.buffer_bytes(), 16 << 20);
        assert_eq!(s.image_side, 1024);
        assert_eq!((s.footprint, s.repeat), (32, 3));
        let q = sizes(true, None, u64::MAX, [8192, 8192], 4096).expect("sizes");
        assert_eq!((q.buffer_bytes(), q.image_side, q.repeat), (256 << 10, 128, 2));
        // Each read kernel's work divides evenly, down to the smallest budget.
        for budget in [64 << 10, 100 << 10, 256 << 10, 1 << 20, 16 << 20, u64::MAX] {
            for quick in [false, true] {
                let s = sizes(quick, None, budget, [8192, 8192], 256).expect("sizes");
                assert!(s.buffer_bytes() <= budget, "{s:?}");
                assert!(s.lines >= s.steps && s.line >= s.steps, "{s:?}");
                assert_eq!((s.lines % s.steps, s.line % s.steps), (0, 0), "{s:?}");
                assert_eq!(s.image_side % PROBE_CELL, 0, "{s:?}");
            }
        }
        assert!(sizes(false, None, 1000, [8192, 8192], 256).is_err());
    }

    #[test]
    fn names_tiles_and_rounding() {
        assert_eq!(
            profile_name("pthread-skylake-avx512-AMD EPYC 9R14"),
            "pthread-skylake-avx512-amd-epyc-9r14"
        );
        assert_eq!(profile_name("NVIDIA H200"), "nvidia-h200");
        assert_eq!(profile_name("  (TM) "), "tm");
        assert_eq!(profile_name("---"), "calibrated");
        assert!(profile_name(&"x".repeat(100)).len() <= 48);
        assert_eq!(tile_of(64), (8, 8));
        assert_eq!(tile_of(32), (4, 8));
        assert_eq!(tile_of(1), (1, 1));
        assert_eq!(round4(12.345678), 12.35);
        assert_eq!(round4(0.000123456), 0.0001235);
        assert_eq!(round4(98765.0), 98770.0);
    }

    #[test]
    fn an_earlier_calibration_header_is_dropped() {
        let base = "# Hardware profile: x\nname = \"x\"\n";
        let calibrated = format!("{HEADER_START}2026-05-01:\n#   d\n#\n{base}");
        assert_eq!(without_calibration_header(&calibrated), base);
        assert_eq!(without_calibration_header(base), base);
        // A header that never ends is left alone.
        let open = format!("{HEADER_START}2026-05-01:\nname = \"x\"\n");
        assert_eq!(without_calibration_header(&open), open);
    }
}

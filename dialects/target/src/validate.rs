//! Invariants of a hardware profile, checked all at once so a measured profile reports every
//! mistake in one go. The list is on [`HardwareProfile::validate`].

use crate::error::ValidationProblem;
use crate::profile::HardwareProfile;

/// Bytes of the widest texel fbc stores: four `float`s.
const RGBA_F32_BYTES: u64 = 16;

impl HardwareProfile {
    /// Checks every invariant below and returns all problems, in this order.
    ///
    /// - `name` is non-empty and made of `[a-z0-9_-]`;
    /// - `compute`: `subgroup_size` and `simd_width` are powers of two and `subgroup_size` is a
    ///   multiple of `simd_width`; `compute_units`, `resident_work_items`, `local_mem_bytes` are
    ///   positive;
    ///   `max_work_group_size >= subgroup_size`; `preferred_work_groups` is non-empty and each
    ///   shape has positive extents, at most `max_work_group_size` work-items and a whole number
    ///   of subgroups; `peak_f32_gflops` is finite and positive;
    /// - `texture_cache`: `line_bytes` is a power of two of at least 16 (one RGBA `float` texel);
    ///   `block_h`, `block_w` are powers of two; `line_bytes <= l1_bytes <= l2_bytes`; a block of
    ///   RGBA `float` texels fits in L1;
    /// - `image`: `channels == 4`; when images are supported, the maximum extents are at least
    ///   one cache block;
    /// - `memory`: `dram_bandwidth_gbps` is finite and positive;
    /// - `contraction`: `per_item` extents are 1, 2, 4 or 8; `tile_k` is a power of two from 1
    ///   to 64; `local_vector` is 1 or 4;
    /// - `skinny`: `wide_lanes` is a power of two from 4 to 32, `wide_rows` a power of two with
    ///   `wide_lanes × wide_rows` at most 1024; `groups_per_cu`, `matvec_groups_per_cu` and
    ///   `matvec_min_k` are positive; `packed_values` is 4, 8 or 16; `prefetch_trips` is from 1
    ///   to 16;
    /// - `attention`: `decode_chunk` is a power of two from 8 to 128; `prompt_splits` is from 1
    ///   to 16;
    /// - `streaming`: `transfer_gbps` (when present) is finite and positive; `compute_bound`,
    ///   `memory_bound` and `mixed` are finite and in `[0, 1]`;
    /// - `measured` (when present): `device` and `driver` are non-empty, `work_group_multiple`
    ///   is positive, each `texture_blocks` shape has power-of-two extents and no shape is
    ///   listed twice. (Rates and the date are checked as they are read: their types hold
    ///   only valid values.)
    pub fn validate(&self) -> Result<(), Vec<ValidationProblem>> {
        let mut out = Vec::new();
        let mut bad = |field: &'static str, message: String| {
            out.push(ValidationProblem::new(field, message));
        };

        if self.name.is_empty()
            || !self
                .name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
        {
            bad("name", format!("`{}` must be non-empty and use only [a-z0-9_-]", self.name));
        }

        let c = &self.compute;
        if !c.subgroup_size.is_power_of_two() {
            bad("compute.subgroup_size", format!("{} is not a power of two", c.subgroup_size));
        }
        if !c.simd_width.is_power_of_two() {
            bad("compute.simd_width", format!("{} is not a power of two", c.simd_width));
        } else if c.subgroup_size % c.simd_width != 0 {
            bad(
                "compute.subgroup_size",
                format!("{} is not a multiple of simd_width {}", c.subgroup_size, c.simd_width),
            );
        }
        if c.compute_units == 0 {
            bad("compute.compute_units", "must be positive".into());
        }
        if c.resident_work_items == 0 {
            bad("compute.resident_work_items", "must be positive".into());
        }
        if c.max_work_group_size < c.subgroup_size.max(1) {
            bad(
                "compute.max_work_group_size",
                format!(
                    "{} is smaller than subgroup_size {}",
                    c.max_work_group_size, c.subgroup_size
                ),
            );
        }
        if c.preferred_work_groups.is_empty() {
            bad("compute.preferred_work_groups", "must list at least one shape".into());
        }
        for &[x, y] in &c.preferred_work_groups {
            let items = u64::from(x) * u64::from(y);
            if items == 0 {
                bad("compute.preferred_work_groups", format!("[{x}, {y}] has an empty extent"));
            } else if items > u64::from(c.max_work_group_size) {
                bad(
                    "compute.preferred_work_groups",
                    format!(
                        "[{x}, {y}] has {items} work-items, more than max_work_group_size {}",
                        c.max_work_group_size
                    ),
                );
            } else if c.subgroup_size != 0 && items % u64::from(c.subgroup_size) != 0 {
                bad(
                    "compute.preferred_work_groups",
                    format!(
                        "[{x}, {y}] has {items} work-items, not a multiple of subgroup_size {}",
                        c.subgroup_size
                    ),
                );
            }
        }
        if c.local_mem_bytes == 0 {
            bad("compute.local_mem_bytes", "must be positive".into());
        }
        if !(c.peak_f32_gflops.is_finite() && c.peak_f32_gflops > 0.0) {
            bad(
                "compute.peak_f32_gflops",
                format!("{} must be finite and positive", c.peak_f32_gflops),
            );
        }

        let t = &self.texture_cache;
        if !t.line_bytes.is_power_of_two() || u64::from(t.line_bytes) < RGBA_F32_BYTES {
            bad(
                "texture_cache.line_bytes",
                format!("{} must be a power of two of at least {RGBA_F32_BYTES}", t.line_bytes),
            );
        }
        if !t.block_h.is_power_of_two() {
            bad("texture_cache.block_h", format!("{} is not a power of two", t.block_h));
        }
        if !t.block_w.is_power_of_two() {
            bad("texture_cache.block_w", format!("{} is not a power of two", t.block_w));
        }
        if t.l1_bytes < u64::from(t.line_bytes) {
            bad(
                "texture_cache.l1_bytes",
                format!("{} is smaller than one cache line of {} bytes", t.l1_bytes, t.line_bytes),
            );
        }
        if t.l2_bytes < t.l1_bytes {
            bad(
                "texture_cache.l2_bytes",
                format!("{} is smaller than l1_bytes {}", t.l2_bytes, t.l1_bytes),
            );
        }
        let block_bytes = u64::from(t.block_h) * u64::from(t.block_w) * RGBA_F32_BYTES;
        if block_bytes > t.l1_bytes {
            bad(
                "texture_cache.block_w",
                format!(
                    "a {}x{} block of RGBA float texels ({block_bytes} bytes) does not fit in \
                     l1_bytes {}",
                    t.block_h, t.block_w, t.l1_bytes
                ),
            );
        }

        let i = &self.image;
        if i.channels != 4 {
            bad("image.channels", format!("{} must be 4 (RGBA texels)", i.channels));
        }
        if i.supported {
            if i.max_width < t.block_w.max(1) {
                bad(
                    "image.max_width",
                    format!(
                        "{} is narrower than one cache block ({} texels)",
                        i.max_width, t.block_w
                    ),
                );
            }
            if i.max_height < t.block_h.max(1) {
                bad(
                    "image.max_height",
                    format!(
                        "{} is lower than one cache block ({} texels)",
                        i.max_height, t.block_h
                    ),
                );
            }
        }

        let bw = self.memory.dram_bandwidth_gbps;
        if !(bw.is_finite() && bw > 0.0) {
            bad("memory.dram_bandwidth_gbps", format!("{bw} must be finite and positive"));
        }

        let k = &self.contraction;
        if k.per_item.iter().any(|&p| !matches!(p, 1 | 2 | 4 | 8)) {
            bad(
                "contraction.per_item",
                format!("{:?} must have extents of 1, 2, 4 or 8", k.per_item),
            );
        }
        if !k.tile_k.is_power_of_two() || k.tile_k > 64 {
            bad("contraction.tile_k", format!("{} must be a power of two from 1 to 64", k.tile_k));
        }
        if !matches!(k.local_vector, 1 | 4) {
            bad("contraction.local_vector", format!("{} must be 1 or 4", k.local_vector));
        }
        if let Some(r) = k.resident_work_items {
            if r == 0 || r > self.compute.resident_work_items {
                bad(
                    "contraction.resident_work_items",
                    format!(
                        "{r} must be positive and at most compute.resident_work_items ({})",
                        self.compute.resident_work_items
                    ),
                );
            }
        }
        let sk = &self.skinny;
        if !sk.wide_lanes.is_power_of_two() || !(4..=32).contains(&sk.wide_lanes) {
            bad(
                "skinny.wide_lanes",
                format!("{} must be a power of two from 4 to 32", sk.wide_lanes),
            );
        }
        if !sk.wide_rows.is_power_of_two() || sk.wide_lanes.saturating_mul(sk.wide_rows) > 1024 {
            bad(
                "skinny.wide_rows",
                format!(
                    "{} must be a power of two with wide_lanes × wide_rows at most 1024",
                    sk.wide_rows
                ),
            );
        }
        if sk.groups_per_cu == 0 {
            bad("skinny.groups_per_cu", "must be at least 1".into());
        }
        if sk.matvec_groups_per_cu == Some(0) {
            bad("skinny.matvec_groups_per_cu", "must be at least 1".into());
        }
        if sk.matvec_min_k == 0 {
            bad("skinny.matvec_min_k", "must be at least 1".into());
        }
        if !(1..=16).contains(&sk.prefetch_trips) {
            bad("skinny.prefetch_trips", format!("{} must be from 1 to 16", sk.prefetch_trips));
        }
        if ![4, 8, 16].contains(&sk.packed_values) {
            bad("skinny.packed_values", format!("{} must be 4, 8 or 16", sk.packed_values));
        }
        let chunk = self.attention.decode_chunk;
        if !(chunk.is_power_of_two() && (8..=128).contains(&chunk)) {
            bad("attention.decode_chunk", format!("{chunk} must be a power of two from 8 to 128"));
        }
        let splits = self.attention.prompt_splits;
        if !(1..=16).contains(&splits) {
            bad("attention.prompt_splits", format!("{splits} must be from 1 to 16"));
        }

        let st = &self.streaming;
        if let Some(t) = st.transfer_gbps {
            if !(t.is_finite() && t > 0.0) {
                bad("streaming.transfer_gbps", format!("{t} must be finite and positive"));
            }
        }
        for (field, f) in [
            ("streaming.compute_bound", st.compute_bound),
            ("streaming.memory_bound", st.memory_bound),
            ("streaming.mixed", st.mixed),
        ] {
            if !(0.0..=1.0).contains(&f) {
                bad(field, format!("{f} must be in [0, 1]"));
            }
        }

        if let Some(m) = &self.measured {
            if m.device.trim().is_empty() {
                bad("measured.device", "must be non-empty".into());
            }
            if m.driver.trim().is_empty() {
                bad("measured.driver", "must be non-empty".into());
            }
            if m.work_group_multiple == Some(0) {
                bad("measured.work_group_multiple", "must be positive".into());
            }
            for (i, b) in m.texture_blocks.iter().enumerate() {
                if !(b.h.is_power_of_two() && b.w.is_power_of_two()) {
                    bad(
                        "measured.texture_blocks",
                        format!("{}x{} must have power-of-two extents", b.h, b.w),
                    );
                } else if m.texture_blocks[..i].iter().any(|o| (o.h, o.w) == (b.h, b.w)) {
                    bad("measured.texture_blocks", format!("{}x{} is listed twice", b.h, b.w));
                }
            }
        }

        if out.is_empty() {
            Ok(())
        } else {
            Err(out)
        }
    }
}

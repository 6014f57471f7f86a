//! The fixed-width summary table `fbc targets` prints: one row per profile, columns aligned to
//! their widest cell, names left-aligned and numbers right-aligned, no trailing spaces.

use crate::profile::HardwareProfile;

const HEADERS: [&str; 6] = ["target", "subgroup", "max image2d", "local mem", "L1 tex", "line"];

/// Renders `name, subgroup, max image2d, local mem, L1, cache line` for each profile, in the
/// order given, under a header and a rule of dashes. Every line ends with `\n`.
pub fn summary_table(profiles: &[HardwareProfile]) -> String {
    let rows: Vec<[String; 6]> = profiles
        .iter()
        .map(|p| {
            [
                p.name.clone(),
                p.compute.subgroup_size.to_string(),
                format!("{}x{}", p.image.max_width, p.image.max_height),
                bytes(p.compute.local_mem_bytes),
                bytes(p.texture_cache.l1_bytes),
                bytes(u64::from(p.texture_cache.line_bytes)),
            ]
        })
        .collect();

    let mut widths = HEADERS.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }

    let mut out = String::new();
    let header = HEADERS.map(String::from);
    let rule = widths.map(|w| "-".repeat(w));
    for row in std::iter::once(&header).chain(std::iter::once(&rule)).chain(&rows) {
        let cells: Vec<String> = row
            .iter()
            .zip(widths)
            .enumerate()
            .map(
                |(col, (cell, w))| {
                    if col == 0 {
                        format!("{cell:<w$}")
                    } else {
                        format!("{cell:>w$}")
                    }
                },
            )
            .collect();
        out.push_str(&cells.join("  "));
        out.push('\n');
    }
    out
}

/// `n` bytes in the largest binary unit that divides it exactly: `64 B`, `48 KiB`, `2 MiB`.
fn bytes(n: u64) -> String {
    const KIB: u64 = 1024;
    const MIB: u64 = 1024 * KIB;
    if n >= MIB && n % MIB == 0 {
        format!("{} MiB", n / MIB)
    } else if n >= KIB && n % KIB == 0 {
        format!("{} KiB", n / KIB)
    } else {
        format!("{n} B")
    }
}

#[cfg(test)]
mod tests {
    use super::bytes;

    #[test]
    fn byte_units() {
        assert_eq!(bytes(64), "64 B");
        assert_eq!(bytes(49152), "48 KiB");
        assert_eq!(bytes(2 * 1024 * 1024), "2 MiB");
        assert_eq!(bytes(1536), "1536 B");
    }
}

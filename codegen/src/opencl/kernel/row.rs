//! The OpenCL form of a row kernel (softmax, the normalisations and their gradients in one
//! launch; see `fbc_dialects::memory::kernel`): one work-group per parallel point (a row) where
//! rows are long, else one work-item per row.
//!
//! ```text
//! for each statistic k:   every work-item combines every G-th value (or texel) of the row,
//!                         a tree in local memory combines the G partials in a fixed order,
//!                         every work-item reads s_k = epilogue_k(result)
//! then:                   every work-item writes every G-th value (or texel) of the row
//! ```
//!
//! The row is read once per statistic and once for the output, by the same work-group: it stays
//! in the cache between passes, where three launches read it from memory three times and store
//! the statistics in between. Where the last dimension has extent 4 and is the channel of an
//! input image (or of the output image) a step takes a whole texel: one read for four values,
//! and the output written a texel at a time.

use std::fmt::Write as _;

use fbc_dialects::memory::Combine;
use fbc_index::Expr;

use super::{
    as_f, combine_into, floor_pow2, item_grid, unflatten, Cx, Emitted, Env, KernelOptions,
    GROUP_MIN_REDUCED,
};

impl Cx<'_> {
    pub(super) fn row(&self, comment: &str, opts: &KernelOptions) -> Result<Emitted, String> {
        let k = self.k;
        let p = k.parallel_dims();
        let n = k.domain.len();
        if p == n {
            return Err("a row kernel without row dimensions".into());
        }
        let out = self.out();
        let image_out = self.is_image(out);
        let last = n - 1;
        if image_out {
            let m = &k.maps[out];
            if k.domain[last] != 4
                || m.results[2] != Expr::Var(m.dims[last].clone())
                || m.results[..2].iter().any(|e| super::uses(e, &m.dims[last]))
            {
                return Err("a row kernel's output image needs the channel as its last dimension, x and y not depending on it".into());
            }
        }
        // A step takes the four values of a texel where the last dimension is a channel.
        let by_texel = k.domain[last] == 4
            && (image_out
                || (0..k.maps.len())
                    .any(|i| i != out && !self.map_checked(i) && self.texel_holds(i, last)));
        let (w, ix) = (self.w, self.w.ty());
        let rows: u64 = k.domain[..p].iter().product();
        let reduced: u64 = k.domain[p..].iter().product();
        let (steps, step_dims) =
            if by_texel { (reduced / 4, &k.domain[p..last]) } else { (reduced, &k.domain[p..]) };
        // Rows of at least 128 values take a work-group each; shorter ones a work-item each,
        // which combines its row in row-major order, the reference executor's (as the plain
        // form does for short reductions; see `group_reduction`).
        let group = (reduced >= GROUP_MIN_REDUCED)
            .then(|| floor_pow2(steps.min(256).min(opts.max_group.max(1))))
            .filter(|&g| g >= 2);
        let channels: Vec<Option<u64>> =
            if by_texel { (0..4).map(Some).collect() } else { vec![None] };
        let names: Vec<String> = (0..n).map(|i| format!("d{i}")).collect();
        let dims_of = |c: Option<u64>| -> Vec<String> {
            let mut d = names.clone();
            if let Some(c) = c {
                d[last] = w.lit(c);
            }
            d
        };
        let what = if by_texel { "texel (four values)" } else { "value" };
        let mut s = String::new();
        s.push_str(comment);
        let _ = writeln!(s, "__kernel void {}({}) {{", k.name, self.params());
        match group {
            Some(g) => {
                let _ = writeln!(
                    s,
                    "  // A row kernel: one work-group of {g} per row. Each statistic: every work-item combines every {g}th {what} of the row, a tree combines theirs; then every work-item writes every {g}th {what}.\n  __local float fbc_red[{g}];\n  const {ix} gid = get_group_id(0);\n  const int lid = (int)get_local_id(0);"
                );
            }
            None => {
                let _ = writeln!(
                    s,
                    "  // A row kernel: one work-item per row, a {what} a step: each statistic over the row in order, then the row.\n  const {ix} gid = get_global_id(0);\n  if (gid >= {}) return;",
                    w.lit(rows)
                );
            }
        }
        for (i, e) in unflatten("gid", &k.domain[..p], w).into_iter().enumerate() {
            let _ = writeln!(s, "  const {ix} d{i} = {e};");
        }
        // The loop over the row's steps, with its dimensions defined.
        let open_steps = |s: &mut String| {
            let (first, stride) = match group {
                Some(g) => ("lid".to_string(), format!("r += {g}")),
                None => (w.lit(0), "++r".to_string()),
            };
            let _ = writeln!(s, "  for ({ix} r = {first}; r < {}; {stride}) {{", w.lit(steps));
            for (j, e) in unflatten("r", step_dims, w).into_iter().enumerate() {
                let _ = writeln!(s, "    const {ix} d{} = {e};", p + j);
            }
        };
        for (si, st) in k.stats.iter().enumerate() {
            let init = match st.combine {
                Combine::Add => "0.0f",
                Combine::Max => "(-INFINITY)",
            };
            let _ = writeln!(s, "  // s{si}: {}\n  float acc{si} = {init};", st);
            open_steps(&mut s);
            *self.texels.borrow_mut() = Some(Vec::new());
            let mut lines = String::new();
            for &c in &channels {
                let v = as_f(self.scalar(&st.body, &Env { dims: &dims_of(c), acc: "0.0f" })?);
                let _ =
                    writeln!(lines, "    {}", combine_into(st.combine, &format!("acc{si}"), &v));
            }
            self.declare_texels(&mut s, "    ", &[]);
            s.push_str(&lines);
            s.push_str("  }\n");
            let result = match group {
                Some(g) => {
                    let _ = writeln!(
                        s,
                        "  fbc_red[lid] = acc{si};\n  barrier(CLK_LOCAL_MEM_FENCE);\n  for (int h = {}; h > 0; h >>= 1) {{\n    if (lid < h) {{\n      {} fbc_red[lid] = acc{si};\n    }}\n    barrier(CLK_LOCAL_MEM_FENCE);\n  }}",
                        g / 2,
                        combine_into(st.combine, &format!("acc{si}"), "fbc_red[lid + h]")
                    );
                    "fbc_red[0]".to_string()
                }
                None => format!("acc{si}"),
            };
            // The epilogue reads only the parallel dimensions: the row dimensions at 0.
            let mut dims = names.clone();
            for d in dims.iter_mut().skip(p) {
                *d = w.lit(0);
            }
            let v = match &st.epilogue {
                Some(e) => as_f(self.scalar(e, &Env { dims: &dims, acc: &result })?),
                None => result,
            };
            let _ = writeln!(s, "  const float fbc_s{si} = {v};");
            // Every work-item has read the result before the next statistic reuses the memory.
            if group.is_some() && si + 1 < k.stats.len() {
                s.push_str("  barrier(CLK_LOCAL_MEM_FENCE);\n");
            }
        }
        // The row itself.
        open_steps(&mut s);
        let mut guards = Vec::new();
        for &c in &channels {
            let g = self.guard(&dims_of(c))?;
            let suffix = c.map_or(String::new(), |c| c.to_string());
            if let Some(g) = &g {
                let _ = writeln!(s, "    const int ok{suffix} = {g};");
            }
            guards.push(g.map(|_| format!("ok{suffix}")));
        }
        *self.texels.borrow_mut() = Some(Vec::new());
        let mut values = Vec::new();
        for &c in &channels {
            values.push(self.scalar(&k.body, &Env { dims: &dims_of(c), acc: "0.0f" })?);
        }
        self.declare_texels(&mut s, "    ", &guards);
        let zero = if self.ctype(out) == "int" { "0" } else { "0.0f" };
        if image_out {
            let _ = writeln!(s, "    {}", self.texel_store(values, &guards, &dims_of(Some(0)))?);
        } else {
            for ((&c, v), g) in channels.iter().zip(values).zip(&guards) {
                let dims = dims_of(c);
                let off = self.coord(out, 0, &dims)?;
                let v = self.store_value(v);
                let v = match g {
                    Some(g) => format!("{g} ? {v} : {zero}"),
                    None => v,
                };
                let _ = writeln!(s, "    {}", self.buffer_store(&off, &v, &dims));
            }
        }
        s.push_str("  }\n}\n");
        let grid = match group {
            Some(g) => (rows.max(1) * g, g),
            None => item_grid(rows, opts),
        };
        Ok(self.flat(s, grid))
    }
}

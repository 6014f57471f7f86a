//! Neighbouring launches of the simple kernel (one work-item per output point, no work-group
//! cooperation) run as one launch: each kernel becomes a function of the work-item's index,
//! and one `__kernel` gives each its own range of the global index space:
//!
//! ```text
//! void NAME__part0(x0, x1, fbc_err, size_t fbc_g) { ...the first kernel, get_global_id(0) = fbc_g... }
//! void NAME__part1(x0, x1, size_t fbc_g) { ... }
//! __kernel void NAME(p0_x0, p0_x1, p1_x0, p1_x1, fbc_err) {
//!   const size_t fbc_g = get_global_id(0);
//!   if (fbc_g < G0) { NAME__part0(p0_x0, p0_x1, fbc_err, fbc_g); return; }
//!   NAME__part1(p1_x0, p1_x1, fbc_g - G0);
//! }
//! ```
//!
//! A decode step's K and V cache updates (512 values each in Llama 3.2-1B) are two such launches a
//! layer, each costing a launch's start more than its work. The parts keep their own fault ids
//! (the manifest's [`LaunchPart`](super::manifest::LaunchPart)s say where each one's operands
//! start) and share the run's error buffer, the merged kernel's last parameter where any part
//! checks accesses.

use std::fmt::Write as _;

/// The error buffer's parameter, last in a kernel that checks accesses.
pub(super) const ERR_PARAM: &str = "__global int* fbc_err";

/// A simple kernel as a part of a merged launch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FlatPart {
    /// The kernel's comment block (kept above its function).
    pub(super) comment: String,
    /// The parameters, without the error buffer.
    pub(super) params: Vec<String>,
    /// Whether it takes the error buffer (last).
    pub(super) checked: bool,
    /// The body, from `{` to the end, with `get_global_id(0)` read from `fbc_g`.
    pub(super) body: String,
    /// Its work-items (the launch's global size).
    pub(crate) global: u64,
}

/// The name a parameter declares (its last word).
pub(super) fn param_name(p: &str) -> &str {
    p.rsplit(|c: char| c.is_whitespace() || c == '*').next().unwrap_or(p)
}

/// Parameter declaration `p` with its name prefixed by `prefix` (`__global float* x0` →
/// `__global float* p1_x0`): a part's parameter as the merged kernel declares it.
pub(super) fn prefixed(p: &str, prefix: &str) -> String {
    let n = param_name(p);
    format!("{}{prefix}{n}", &p[..p.len() - n.len()])
}

/// A `__local` declaration of a kernel: its type, name and array lengths (none: a scalar).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Local {
    pub(super) ty: String,
    pub(super) name: String,
    pub(super) dims: Vec<u64>,
}

impl Local {
    pub(super) fn bytes(&self) -> Option<u64> {
        let elem = match self.ty.as_str() {
            "char" | "uchar" => 1,
            "short" | "ushort" | "half" => 2,
            "int" | "uint" | "float" => 4,
            "long" | "ulong" | "float2" | "int2" => 8,
            "float4" | "int4" => 16,
            _ => return None,
        };
        Some(self.dims.iter().product::<u64>() * elem)
    }

    /// The parameter a part's function takes it as: a pointer to its first element.
    pub(super) fn param(&self) -> String {
        match self.dims.split_first() {
            Some((_, rest)) if !rest.is_empty() => {
                let rest: String = rest.iter().map(|d| format!("[{d}]")).collect();
                format!("__local {} (*{}){rest}", self.ty, self.name)
            }
            _ => format!("__local {}* {}", self.ty, self.name),
        }
    }

    /// Its declaration in a merged kernel, renamed `prefix` + its name.
    pub(super) fn declaration(&self, prefix: &str) -> String {
        let dims: String = self.dims.iter().map(|d| format!("[{d}]")).collect();
        format!("__local {} {prefix}{}{dims};", self.ty, self.name)
    }

    /// The pointer a part's function is given for it: `at` bytes into the chained kernel's
    /// local memory `fbc_lm`.
    pub(super) fn pointer(&self, at: u64) -> String {
        let ty = match self.dims.split_first() {
            Some((_, rest)) if !rest.is_empty() => {
                let rest: String = rest.iter().map(|d| format!("[{d}]")).collect();
                format!("__local {} (*){rest}", self.ty)
            }
            _ => format!("__local {}*", self.ty),
        };
        format!("({ty})((__local char*)fbc_lm + {at})")
    }
}

/// `line` as a `__local` declaration (`__local float red[1][8][32 + 1];`, `__local int fbc_last;`).
pub(super) fn local_decl(line: &str) -> Option<Local> {
    let decl = line.trim().strip_prefix("__local ")?.strip_suffix(';')?;
    if decl.contains(',') || decl.contains('=') {
        return None;
    }
    let (head, mut rest) = decl.find('[').map_or((decl, ""), |i| (&decl[..i], &decl[i..]));
    let (ty, name) = head.trim().rsplit_once(' ')?;
    let mut dims = Vec::new();
    while !rest.is_empty() {
        let r = rest.strip_prefix('[')?;
        let close = r.find(']')?;
        // A length is a constant or a sum of constants (`32 + 1`).
        let terms: Option<Vec<u64>> =
            r[..close].split('+').map(|t| t.trim().parse().ok()).collect();
        dims.push(terms?.iter().sum());
        rest = &r[close + 1..];
    }
    Some(Local { ty: ty.trim().to_string(), name: name.to_string(), dims })
}

/// Kernel `name`'s `source` as a part, where it is one `__kernel` that reads its index from
/// `get_global_id(0)` only (no work-group, local memory or barrier) over `global` work-items.
pub(crate) fn part(name: &str, source: &str, global: u64) -> Option<FlatPart> {
    const BARRED: [&str; 7] = [
        "get_group_id",
        "get_local_id",
        "get_local_size",
        "get_global_size",
        "barrier",
        "__local",
        "reqd_work_group_size",
    ];
    if BARRED.iter().any(|b| source.contains(b))
        || source.matches("get_global_id(").count() != 1
        || !source.contains("get_global_id(0)")
        || source.matches("__kernel").count() != 1
    {
        return None;
    }
    let k = signature(name, source)?;
    let body = k.body.replace("get_global_id(0)", "fbc_g");
    Some(FlatPart {
        comment: k.comment.to_string(),
        params: k.params,
        checked: k.checked,
        body,
        global,
    })
}

/// A `__kernel void NAME(...)` of a kernel source, taken apart.
pub(super) struct Signature<'a> {
    /// What comes before it (the kernel's comment block).
    pub(super) comment: &'a str,
    /// The parameters, without the error buffer.
    pub(super) params: Vec<String>,
    /// Whether it takes the error buffer (last).
    pub(super) checked: bool,
    /// The body, from `{` to the end.
    pub(super) body: &'a str,
}

/// Kernel `name`'s signature in `source`, where it is `__kernel void NAME(` (no attribute) and
/// each parameter one declaration.
pub(super) fn signature<'a>(name: &str, source: &'a str) -> Option<Signature<'a>> {
    let head = format!("__kernel void {name}(");
    let at = source.find(&head)?;
    let rest = &source[at + head.len()..];
    let close = rest.find(") {")?;
    let mut params: Vec<String> = rest[..close].split(", ").map(str::to_string).collect();
    let checked = params.last().is_some_and(|p| p == ERR_PARAM);
    if checked {
        params.pop();
    }
    if params.iter().any(|p| p.contains(',') || p.contains('(')) {
        return None;
    }
    Some(Signature { comment: &source[..at], params, checked, body: &rest[close + 2..] })
}

/// The source of kernel `name` running `parts` in turn over the global index, and its global
/// size. Its parameters are every part's (renamed `pI_x`), then the error buffer where a part
/// checks accesses.
pub(crate) fn merge(name: &str, names: &[&str], parts: &[FlatPart]) -> (String, u64) {
    let mut s = String::new();
    for (i, p) in parts.iter().enumerate() {
        s.push_str(&p.comment);
        let mut params = p.params.clone();
        if p.checked {
            params.push(ERR_PARAM.to_string());
        }
        params.push("const size_t fbc_g".to_string());
        let _ = write!(s, "void {name}__part{i}({}) {}", params.join(", "), p.body);
        if !p.body.ends_with('\n') {
            s.push('\n');
        }
        s.push('\n');
    }
    let mut ranges = Vec::new();
    let mut from = 0u64;
    for (n, p) in names.iter().zip(parts) {
        ranges.push(format!("[{from}, {}) {n}", from + p.global));
        from += p.global;
    }
    let mut params: Vec<String> = Vec::new();
    for (i, p) in parts.iter().enumerate() {
        params.extend(p.params.iter().map(|q| prefixed(q, &format!("p{i}_"))));
    }
    if parts.iter().any(|p| p.checked) {
        params.push(ERR_PARAM.to_string());
    }
    let _ = writeln!(
        s,
        "// {} in one launch (one work-item per point each), by global index: {}\n__kernel void {name}({}) {{\n  const size_t fbc_g = get_global_id(0);",
        names.join(", "),
        ranges.join(", "),
        params.join(", ")
    );
    let mut start = 0u64;
    for (i, p) in parts.iter().enumerate() {
        let mut args: Vec<String> =
            p.params.iter().map(|q| format!("p{i}_{}", param_name(q))).collect();
        if p.checked {
            args.push("fbc_err".to_string());
        }
        args.push(if start == 0 { "fbc_g".to_string() } else { format!("fbc_g - {start}") });
        let call = format!("{name}__part{i}({});", args.join(", "));
        if i + 1 < parts.len() {
            let _ = writeln!(s, "  if (fbc_g < {}) {{ {call} return; }}", start + p.global);
        } else {
            let _ = writeln!(s, "  {call}");
        }
        start += p.global;
    }
    s.push_str("}\n");
    (s, start)
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "// a at x:1:1\n__kernel void a(__global const float* x0, __global float* x1) {\n  const int gid = get_global_id(0);\n  if (gid >= 6) return;\n  x1[gid] = x0[gid];\n}\n";
    const B: &str = "// b at x:2:1\n__kernel void b(__global const int* x0, __global float* x1, __global int* fbc_err) {\n  const int gid = get_global_id(0);\n  if (gid >= 3) return;\n  x1[gid] = 1.0f;\n}\n";

    #[test]
    fn parts_are_functions_of_the_index_and_the_kernel_picks_one_by_range() {
        let (pa, pb) = (part("a", A, 64).expect("a"), part("b", B, 32).expect("b"));
        assert!(!pa.checked && pb.checked);
        let (src, global) = merge("a_b", &["a", "b"], &[pa, pb]);
        assert_eq!(global, 96);
        assert_eq!(
            src,
            "// a at x:1:1\nvoid a_b__part0(__global const float* x0, __global float* x1, const size_t fbc_g) {\n  const int gid = fbc_g;\n  if (gid >= 6) return;\n  x1[gid] = x0[gid];\n}\n\n// b at x:2:1\nvoid a_b__part1(__global const int* x0, __global float* x1, __global int* fbc_err, const size_t fbc_g) {\n  const int gid = fbc_g;\n  if (gid >= 3) return;\n  x1[gid] = 1.0f;\n}\n\n// a, b in one launch (one work-item per point each), by global index: [0, 64) a, [64, 96) b\n__kernel void a_b(__global const float* p0_x0, __global float* p0_x1, __global const int* p1_x0, __global float* p1_x1, __global int* fbc_err) {\n  const size_t fbc_g = get_global_id(0);\n  if (fbc_g < 64) { a_b__part0(p0_x0, p0_x1, fbc_g); return; }\n  a_b__part1(p1_x0, p1_x1, fbc_err, fbc_g - 64);\n}\n"
        );
    }

    #[test]
    fn kernels_that_cooperate_in_work_groups_are_not_parts() {
        let row = A.replace("if (gid >= 6) return;", "barrier(CLK_LOCAL_MEM_FENCE);");
        assert!(part("a", &row, 64).is_none());
        let group = A.replace("get_global_id(0)", "get_group_id(0)");
        assert!(part("a", &group, 64).is_none());
        assert!(part("other", A, 64).is_none());
    }
}

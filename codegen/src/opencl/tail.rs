//! A small launch run at the end of the skinny product launched before it (`[skinny]
//! tail_launches`), by the work-group that finishes that product last:
//!
//! ```text
//! void NAME__part0(x0, x1, const size_t fbc_g) { ...one work-item's point fbc_g... }
//! void NAME__part1(x0, x1, __local float* fbc_red, const int fbc_tl) { ...one work-group's kernel... }
//! __kernel void NAME(...the product's parameters..., t0_x0, t0_x1, t1_x0, t1_x1) {
//!   __local int fbc_tail;
//!   __local float t1_fbc_red[256];
//!   ...the product: a block's last group adds its chunks and stores; the others return...
//!   if (atomic_inc(fbc_count + SLOT) != FINISHERS - 1) return;   // (in work-item 0, shared)
//!   for (fbc_g = fbc_tl; fbc_g < G; fbc_g += group size) NAME__part0(t0_x0, t0_x1, fbc_g);
//!   barrier(...);
//!   NAME__part1(t1_x0, t1_x1, t1_fbc_red, fbc_tl);
//! }
//! ```
//!
//! A split product's work-groups that reach the end of its kernel are the ones that store a
//! block's outputs (the last of the block's chunks to finish, see `fbc_kernels::skinny`): once
//! all of them have counted themselves in, every output is stored, and every read of the
//! product's operands is done. The tail reads what the product stored through `volatile`
//! pointers (past caches that could hold an older line), as the product's own last group reads
//! the chunks' partial sums. A decode step's K and V cache updates (1024 points in Llama
//! 3.2-1B) after its Q, K and V projections, and its MLP's RMSNorm (one work-group of 256)
//! after the attention's output projection, each cost a launch's start more than their work.

use std::fmt::Write as _;

use fbc_target::TAIL_MAX_ITEMS;

use super::flat_merge::{self, local_decl, param_name, prefixed, Local, ERR_PARAM};

/// How a tail part runs in the work-group that runs it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Form {
    /// One work-item per point, over this many points: the group's work-items stride them.
    Items(u64),
    /// One work-group's kernel, of the product's work-group size: its `__local` arrays,
    /// declared in the merged kernel and passed to its function.
    Group(Vec<Local>),
}

/// A kernel as a part of a launch's tail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TailPart {
    /// The kernel's comment block (kept above its function).
    comment: String,
    /// The parameters, without the error buffer.
    pub(super) params: Vec<String>,
    /// Whether it takes the error buffer (last).
    pub(super) checked: bool,
    /// The body, from `{` to the end, with the kernel's place read from the function's last
    /// parameter.
    body: String,
    form: Form,
}

/// Kernel `name`'s `source`, launched over `global` work-items in groups of `local`, as a tail
/// part of a launch whose work-groups have `group` work-items, where it is one: a kernel of one
/// work-item per point ([`flat_merge::part`]) of at most [`TAIL_MAX_ITEMS`] points, or one
/// work-group's (`global` = `local` = `group`) that reads its place only from
/// `get_group_id(0)` and `get_local_id(0)` (a row kernel of one row).
pub(crate) fn part(
    name: &str,
    source: &str,
    global: u64,
    local: Option<u64>,
    group: u64,
) -> Option<TailPart> {
    if let Some(f) = flat_merge::part(name, source, global) {
        return (global <= TAIL_MAX_ITEMS).then_some(TailPart {
            comment: f.comment,
            params: f.params,
            checked: f.checked,
            body: f.body,
            form: Form::Items(global),
        });
    }
    const BARRED: [&str; 9] = [
        "get_global_id",
        "get_local_size",
        "get_global_size",
        "get_num_groups",
        "get_group_id(1",
        "get_group_id(2",
        "get_local_id(1",
        "get_local_id(2",
        "__attribute__",
    ];
    if global != group
        || local != Some(group)
        || BARRED.iter().any(|b| source.contains(b))
        || source.matches("__kernel").count() != 1
    {
        return None;
    }
    let k = flat_merge::signature(name, source)?;
    let mut locals = Vec::new();
    let mut body = String::from("{\n");
    for line in k.body.strip_prefix("{\n")?.lines() {
        match local_decl(line).filter(|l| !l.dims.is_empty()) {
            Some(l) => locals.push(l),
            None => {
                body.push_str(line);
                body.push('\n');
            }
        }
    }
    let body = body.replace("get_group_id(0)", "0").replace("get_local_id(0)", "fbc_tl");
    Some(TailPart {
        comment: k.comment.to_string(),
        params: k.params,
        checked: k.checked,
        body,
        form: Form::Group(locals),
    })
}

/// The product a tail runs after: its kernel's name and source (a skinny kernel whose
/// reduction splits in one launch: its last parameter but the error buffer is the split's
/// counts), whether it takes the error buffer, and its work-groups that reach the kernel's end
/// (those that store a block).
pub(crate) struct Head<'a> {
    pub(crate) name: &'a str,
    pub(crate) source: &'a str,
    pub(crate) checked: bool,
    pub(crate) finishers: u64,
}

/// Where kernel `name`'s `void NAME(` starts in `source`, its parameter list as written, and
/// what follows its `) {` line (the body, to the closing brace).
pub(super) fn head_signature<'a>(name: &str, source: &'a str) -> Option<(usize, &'a str, &'a str)> {
    let sig = format!("void {name}(");
    let at = source.find(&sig)?;
    let rest = &source[at + sig.len()..];
    let close = rest.find(") {\n")?;
    Some((at, &rest[..close], &rest[close + 4..]))
}

/// The parameters of a product's kernel `name` in `source`, as declared (the error buffer
/// last where it takes one).
pub(crate) fn head_params(name: &str, source: &str) -> Option<Vec<String>> {
    let (_, params, _) = head_signature(name, source)?;
    Some(params.split(", ").map(str::to_string).collect())
}

/// The source of kernel `name`: `head`'s kernel with `parts` (kernels `names`) run at its end
/// by its last finisher, counted at `fbc_count[slot]`. `stale[i][j]`: part `i`'s parameter `j`
/// (a buffer) may hold what the product or an earlier part stored, and is read `volatile`.
/// Its parameters are the product's, then each part's (renamed `tI_x`), then the error buffer
/// where the product or a part checks accesses. `None` where the product's kernel does not
/// have the expected form.
pub(crate) fn merge(
    name: &str,
    head: &Head<'_>,
    names: &[&str],
    parts: &[TailPart],
    stale: &[Vec<bool>],
    slot: u64,
) -> Option<String> {
    let (at, mut own, body) = head_signature(head.name, head.source)?;
    if head.checked {
        own = own.strip_suffix(&format!(", {ERR_PARAM}"))?;
    }
    if !own.ends_with("__global int* fbc_count") {
        return None;
    }
    let inner = &body[..body.rfind('}')?];
    let mut s = String::new();
    let mut params = vec![own.to_string()];
    let mut locals = String::new();
    let mut calls = String::new();
    for (i, (p, st)) in parts.iter().zip(stale).enumerate() {
        // The part's parameters, `volatile` where stale, as the function declares them and as
        // the kernel does (renamed).
        let declared: Vec<String> = p
            .params
            .iter()
            .zip(st.iter().chain(std::iter::repeat(&false)))
            .map(|(q, &st)| if st { format!("volatile {q}") } else { q.clone() })
            .collect();
        let mut decl = declared.clone();
        let mut args: Vec<String> =
            p.params.iter().map(|q| format!("t{i}_{}", param_name(q))).collect();
        params.extend(declared.iter().map(|q| prefixed(q, &format!("t{i}_"))));
        if p.checked {
            decl.push(ERR_PARAM.to_string());
            args.push("fbc_err".to_string());
        }
        let call = match &p.form {
            Form::Items(global) => {
                decl.push("const size_t fbc_g".to_string());
                args.push("fbc_g".to_string());
                format!(
                    "    for (size_t fbc_g = fbc_tl; fbc_g < {global}; fbc_g += fbc_ts) {name}__part{i}({});\n",
                    args.join(", ")
                )
            }
            Form::Group(arrays) => {
                for l in arrays {
                    decl.push(l.param());
                    args.push(format!("t{i}_{}", l.name));
                    let _ = writeln!(locals, "  {}", l.declaration(&format!("t{i}_")));
                }
                decl.push("const int fbc_tl".to_string());
                args.push("fbc_tl".to_string());
                format!("    {name}__part{i}({});\n", args.join(", "))
            }
        };
        if i > 0 {
            calls.push_str("    barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);\n");
        }
        calls.push_str(&call);
        s.push_str(&p.comment);
        let _ = write!(s, "void {name}__part{i}({}) {}", decl.join(", "), p.body);
        if !p.body.ends_with('\n') {
            s.push('\n');
        }
        s.push('\n');
    }
    if head.checked || parts.iter().any(|p| p.checked) {
        params.push(ERR_PARAM.to_string());
    }
    let last = head.finishers.checked_sub(1)?;
    let _ = write!(
        s,
        "{}void {name}({}) {{\n  __local int fbc_tail;\n{locals}{inner}  // The tail: the last of the {} work-group(s) that store the product's blocks runs {}.\n  {{\n    mem_fence(CLK_GLOBAL_MEM_FENCE);\n    barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);\n    const int fbc_ts = (int)(get_local_size(0) * get_local_size(1) * get_local_size(2));\n    const int fbc_tl = (int)((get_local_id(2) * get_local_size(1) + get_local_id(1)) * get_local_size(0) + get_local_id(0));\n    if (fbc_tl == 0) fbc_tail = atomic_inc(fbc_count + {slot}) == {last};\n    barrier(CLK_LOCAL_MEM_FENCE);\n    if (!fbc_tail) return;\n    mem_fence(CLK_GLOBAL_MEM_FENCE);\n{calls}    if (fbc_tl == 0) fbc_count[{slot}] = 0;\n  }}\n}}\n",
        &head.source[..at],
        params.join(", "),
        head.finishers,
        names.join(", "),
    );
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PRODUCT: &str = "// p at x:1:1\n__kernel __attribute__((reqd_work_group_size(32, 8, 1)))\nvoid p(__global const float* x0, __global float* x1, __global float* fbc_part, __global int* fbc_count) {\n  __local int fbc_last;\n  if (!fbc_last) return;\n  x1[0] = x0[0];\n}\n";
    const ITEMS: &str = "// a at x:2:1\n__kernel void a(__global const float* x0, __global float* x1, __global int* fbc_err) {\n  const int gid = get_global_id(0);\n  if (gid >= 6) return;\n  x1[gid] = x0[gid];\n}\n";
    const ROW: &str = "// n at x:3:1\n__kernel void n(__global const float* x0, __global float* x1) {\n  __local float fbc_red[256];\n  const int gid = get_group_id(0);\n  const int lid = (int)get_local_id(0);\n  fbc_red[lid] = x0[lid];\n  barrier(CLK_LOCAL_MEM_FENCE);\n  x1[lid] = fbc_red[255 - lid];\n}\n";

    #[test]
    fn parts_run_in_the_last_group_to_store_a_block() {
        let a = part("a", ITEMS, 6, Some(64), 256).expect("items");
        let n = part("n", ROW, 256, Some(256), 256).expect("group");
        let head = Head { name: "p", source: PRODUCT, checked: false, finishers: 4 };
        let src = merge("p_a_n", &head, &["a", "n"], &[a, n], &[vec![true], vec![true]], 9)
            .expect("merged");
        assert_eq!(
            src,
            "// a at x:2:1\nvoid p_a_n__part0(volatile __global const float* x0, __global float* x1, __global int* fbc_err, const size_t fbc_g) {\n  const int gid = fbc_g;\n  if (gid >= 6) return;\n  x1[gid] = x0[gid];\n}\n\n\
// n at x:3:1\nvoid p_a_n__part1(volatile __global const float* x0, __global float* x1, __local float* fbc_red, const int fbc_tl) {\n  const int gid = 0;\n  const int lid = (int)fbc_tl;\n  fbc_red[lid] = x0[lid];\n  barrier(CLK_LOCAL_MEM_FENCE);\n  x1[lid] = fbc_red[255 - lid];\n}\n\n\
// p at x:1:1\n__kernel __attribute__((reqd_work_group_size(32, 8, 1)))\nvoid p_a_n(__global const float* x0, __global float* x1, __global float* fbc_part, __global int* fbc_count, volatile __global const float* t0_x0, __global float* t0_x1, volatile __global const float* t1_x0, __global float* t1_x1, __global int* fbc_err) {\n  __local int fbc_tail;\n  __local float t1_fbc_red[256];\n  __local int fbc_last;\n  if (!fbc_last) return;\n  x1[0] = x0[0];\n  \
// The tail: the last of the 4 work-group(s) that store the product's blocks runs a, n.\n  {\n    mem_fence(CLK_GLOBAL_MEM_FENCE);\n    barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);\n    const int fbc_ts = (int)(get_local_size(0) * get_local_size(1) * get_local_size(2));\n    const int fbc_tl = (int)((get_local_id(2) * get_local_size(1) + get_local_id(1)) * get_local_size(0) + get_local_id(0));\n    if (fbc_tl == 0) fbc_tail = atomic_inc(fbc_count + 9) == 3;\n    barrier(CLK_LOCAL_MEM_FENCE);\n    if (!fbc_tail) return;\n    mem_fence(CLK_GLOBAL_MEM_FENCE);\n    for (size_t fbc_g = fbc_tl; fbc_g < 6; fbc_g += fbc_ts) p_a_n__part0(t0_x0, t0_x1, fbc_err, fbc_g);\n    barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);\n    p_a_n__part1(t1_x0, t1_x1, t1_fbc_red, fbc_tl);\n    if (fbc_tl == 0) fbc_count[9] = 0;\n  }\n}\n"
        );
    }

    #[test]
    fn only_small_launches_and_one_group_kernels_are_parts() {
        // Too many points for one group to stride.
        assert!(part("a", ITEMS, TAIL_MAX_ITEMS + 1, Some(64), 256).is_none());
        // A row kernel of two rows, or of another group size.
        assert!(part("n", ROW, 512, Some(256), 256).is_none());
        assert!(part("n", ROW, 128, Some(128), 256).is_none());
        // One that reads a second dimension of its place.
        let two = ROW.replace("(int)get_local_id(0)", "(int)get_local_id(1)");
        assert!(part("n", &two, 256, Some(256), 256).is_none());
        // A product without the split's counts last has no tail.
        let head = Head {
            name: "p",
            source: &PRODUCT.replace(", __global float* fbc_part, __global int* fbc_count", ""),
            checked: false,
            finishers: 4,
        };
        let n = part("n", ROW, 256, Some(256), 256).expect("group");
        assert!(merge("p_n", &head, &["n"], &[n], &[vec![false]], 0).is_none());
    }
}

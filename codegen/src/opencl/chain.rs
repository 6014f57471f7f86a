//! Neighbouring launches of one work-group shape run as one launch, in turn (`[skinny]
//! chain_launches`): a decode step's attention output projection, up-gate, down and the next
//! layer's Q, K and V projections.
//!
//! ```text
//! void NAME__part0(x0, x1, __local float (*red)[8][128], const int fbc_wg0, fbc_wg1, fbc_wg2) {
//!   ...the first launch's kernel, get_group_id(d) = fbc_wgd...
//! }
//! void NAME__part1(...) { ... }
//! __kernel void NAME(fbc_chain_counts, c0_x0, c0_x1, c1_x0, ..) {
//!   __local float4 fbc_lm[..];                        // the largest part's local memory
//!   ticket = atomic_inc(&chain[0]);                   // in the order work-groups start
//!   if (ticket < N0) NAME__part0(.., place of ticket in the first launch's groups);
//!   else if (ticket < N0 + N1) {
//!     wait until chain[1] == N0;                      // every group of the first is done
//!     NAME__part1(.., place of ticket - N0);
//!   } ...
//!   atomic_inc(&chain[1 + part]);                     // this group is done
//!   the last group of all sets chain[..] back to 0
//! }
//! ```
//!
//! A work-group waits only for groups that took a ticket before it: groups that have started,
//! which run on to their end whatever a later group does (a group that has not started yet
//! never blocks one that has). So the chain needs no order among the device's work-groups,
//! only that a started group progresses. A launch's work-groups start as the one before it
//! drains, instead of after a whole launch's end and the next one's start.
//!
//! What a part stores, a later part reads through its plain pointers: a compute unit's cache
//! could hold an older line of a buffer only where some work-group of this launch read that
//! buffer before a later part wrote it, and the writer chains no launch that writes what an
//! earlier member reads (see `FuncWriter::merge_chains`). A part's work-groups reach the
//! end of its function once they are done with it, whether or not they stored anything: the
//! groups of a split reduction that leave the adding to another return early, and then count
//! themselves done.

use std::fmt::Write as _;

use super::flat_merge::{local_decl, param_name, prefixed, Local, ERR_PARAM};
use super::tail::head_signature;

/// A launch to chain: its kernel's name and source, and its work-groups along each dimension.
pub(crate) struct Phase<'a> {
    pub(crate) name: &'a str,
    pub(crate) source: &'a str,
    pub(crate) groups: [u64; 3],
}

/// A chained launch's kernel: its source, work-groups (along the first dimension) and the
/// counts it uses from its base.
#[derive(Debug)]
pub(crate) struct Chained {
    pub(crate) source: String,
    pub(crate) groups: u64,
    pub(crate) slots: u64,
}

/// Reads of a work-group's place that a part's functions cannot make: a chained kernel's
/// place is its ticket's, given to the part as `fbc_wg0..2`.
const PLACE: [&str; 6] = [
    "get_group_id",
    "get_global_id",
    "get_num_groups",
    "get_global_size",
    "get_global_offset",
    "get_work_dim",
];

/// `text` with every whole-word occurrence of identifier `name` replaced by `with`.
fn replace_ident(text: &str, name: &str, with: &str) -> String {
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(name) {
        let after = &rest[at + name.len()..];
        let whole = !rest[..at].chars().next_back().is_some_and(is_ident)
            && !after.chars().next().is_some_and(is_ident);
        out.push_str(&rest[..at]);
        out.push_str(if whole { with } else { name });
        rest = after;
    }
    out.push_str(rest);
    out
}

/// A launch's kernel as the chained kernel's part `i`.
struct Part {
    /// Its functions: the kernel's helpers, then the kernel as `NAME__partI`.
    text: String,
    /// The kernel's parameters, without the error buffer.
    params: Vec<String>,
    checked: bool,
    locals: Vec<Local>,
    /// Its work-groups.
    groups: [u64; 3],
}

/// Kernel `p` as part `i` of chained kernel `chain` whose work-groups have `local` work-items
/// along each dimension, where it is one `__kernel` that reads its place only as
/// `get_group_id(d)`, `get_global_id(d)`, `get_num_groups(d)` or `get_global_size(d)` and
/// declares its local memory one array or scalar a line.
fn part(chain: &str, i: usize, p: &Phase<'_>, local: [u64; 3]) -> Option<Part> {
    if p.source.matches("__kernel").count() != 1 {
        return None;
    }
    let (at, params, body) = head_signature(p.name, p.source)?;
    let prefix = &p.source[..at];
    let helpers = &prefix[..prefix.rfind("__kernel")?];
    if PLACE.iter().any(|f| helpers.contains(f)) {
        return None;
    }
    let mut params: Vec<String> = params.split(", ").map(str::to_string).collect();
    let checked = params.last().is_some_and(|q| q == ERR_PARAM);
    if checked {
        params.pop();
    }
    if params.iter().any(|q| q.contains('(') || q.contains(',')) {
        return None;
    }
    let mut locals = Vec::new();
    let mut code = String::with_capacity(body.len());
    for line in body.lines() {
        // A declaration of local memory (not of a pointer to it, which has a value).
        if line.trim_start().starts_with("__local ") && !line.contains('=') {
            locals.push(local_decl(line)?);
        } else {
            code.push_str(line);
            code.push('\n');
        }
    }
    for (d, (&l, &n)) in local.iter().zip(&p.groups).enumerate() {
        code = code
            .replace(&format!("get_group_id({d})"), &format!("fbc_wg{d}"))
            .replace(
                &format!("get_global_id({d})"),
                &format!("((size_t)fbc_wg{d} * {l} + get_local_id({d}))"),
            )
            .replace(&format!("get_num_groups({d})"), &format!("((size_t){n})"))
            .replace(&format!("get_global_size({d})"), &format!("((size_t){})", n * l));
    }
    if PLACE.iter().any(|f| code.contains(f)) {
        return None;
    }
    for l in locals.iter().filter(|l| l.dims.is_empty()) {
        code = replace_ident(&code, &l.name, &format!("(*{})", l.name));
    }
    let mut decl = params.clone();
    if checked {
        decl.push(ERR_PARAM.to_string());
    }
    decl.extend(locals.iter().map(Local::param));
    decl.extend((0..3).map(|d| format!("const int fbc_wg{d}")));
    // The kernel's helpers (`NAME__partJ`, a tail's) take the part's name as theirs.
    let own = format!("{chain}__part{i}");
    let rename = |t: &str| t.replace(&format!("{}__part", p.name), &format!("{own}__part"));
    let text = format!("{}void {own}({}) {{\n{}", rename(helpers), decl.join(", "), rename(&code));
    Some(Part { text, params, checked, locals, groups: p.groups })
}

/// The kernel `name` running `phases` (kernels `names`, in order) in turn, its work-groups of
/// `local` work-items, each phase's after every work-group of the one before is done; its
/// tickets and counts at `fbc_chain_counts[base..base + phases + 2]` (zero before the launch,
/// zero again after it), a buffer that its first parameter holds (every phase's follow). `None` where a
/// phase's kernel does not have the form [`part`] takes, or the phases' local memory together
/// is more than `local_mem` bytes.
pub(crate) fn merge(
    name: &str,
    phases: &[Phase<'_>],
    local: [u64; 3],
    base: u64,
    local_mem: u64,
) -> Option<Chained> {
    let parts: Vec<Part> =
        phases.iter().enumerate().map(|(i, p)| part(name, i, p, local)).collect::<Option<_>>()?;
    // A work-group runs one part: the parts' local memory is one block, each part's arrays
    // one after the other from its start (16-byte aligned).
    let mut offsets: Vec<Vec<u64>> = Vec::with_capacity(parts.len());
    let mut block = 0u64;
    for p in &parts {
        let mut next = 0u64;
        let mut mine = Vec::with_capacity(p.locals.len());
        for l in &p.locals {
            mine.push(next);
            next += l.bytes()?.next_multiple_of(16);
        }
        block = block.max(next);
        offsets.push(mine);
    }
    if block + 4 > local_mem || parts.len() < 2 {
        return None;
    }
    let counts: Vec<u64> = parts.iter().map(|p| p.groups.iter().product()).collect();
    let total: u64 = counts.iter().sum();
    let mut s = String::new();
    for p in &parts {
        s.push_str(&p.text);
        if !p.text.ends_with('\n') {
            s.push('\n');
        }
        s.push('\n');
    }
    // The counts first: a launch's parts are its operands after it, each part's output last.
    let mut params: Vec<String> = vec!["__global int* fbc_chain_counts".to_string()];
    for (i, p) in parts.iter().enumerate() {
        params.extend(p.params.iter().map(|q| prefixed(q, &format!("c{i}_"))));
    }
    let checked = parts.iter().any(|p| p.checked);
    if checked {
        params.push(ERR_PARAM.to_string());
    }
    let mut ranges = Vec::new();
    let mut from = 0u64;
    for (n, c) in phases.iter().zip(&counts) {
        ranges.push(format!("[{from}, {}) {}", from + c, n.name));
        from += c;
    }
    let _ = writeln!(
        s,
        "// {} in one launch, in turn, by the ticket a work-group takes as it starts: {}; each after every work-group of the one before is done.",
        phases.iter().map(|p| p.name).collect::<Vec<_>>().join(", "),
        ranges.join(", ")
    );
    let _ = writeln!(
        s,
        "__kernel __attribute__((reqd_work_group_size({}, {}, {})))\nvoid {name}({}) {{\n  __local int fbc_ticket;",
        local[0],
        local[1],
        local[2],
        params.join(", ")
    );
    if block > 0 {
        let _ = writeln!(s, "  __local float4 fbc_lm[{}];", block / 16);
    }
    let all = parts.len() as u64 + 1;
    let _ = write!(
        s,
        "  // Slot 0: tickets; 1 + i: part i's work-groups done; {all}: every work-group done.\n  __global int* fbc_chain = fbc_chain_counts + {base};\n  const int fbc_tl = (int)((get_local_id(2) * get_local_size(1) + get_local_id(1)) * get_local_size(0) + get_local_id(0));\n  if (fbc_tl == 0) fbc_ticket = atomic_inc(fbc_chain);\n  barrier(CLK_LOCAL_MEM_FENCE);\n  const int fbc_v = fbc_ticket;\n  int fbc_phase = 0;\n",
    );
    let mut start = 0u64;
    for (i, (p, c)) in parts.iter().zip(&counts).enumerate() {
        let open = if i == 0 {
            format!("  if (fbc_v < {c}) {{\n")
        } else if i + 1 < parts.len() {
            format!("  }} else if (fbc_v < {}) {{\n", start + c)
        } else {
            "  } else {\n".to_string()
        };
        s.push_str(&open);
        if i > 0 {
            let _ = write!(
                s,
                "    fbc_phase = {i};\n    // Every work-group of the part before has taken a ticket before this one: each has started.\n    if (fbc_tl == 0) while (*(volatile __global int*)(fbc_chain + {i}) < {}) {{}}\n    barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);\n",
                counts[i - 1]
            );
        }
        let at = if start == 0 { "fbc_v".to_string() } else { format!("(fbc_v - {start})") };
        let [x, y, _] = p.groups;
        let mut args: Vec<String> =
            p.params.iter().map(|q| format!("c{i}_{}", param_name(q))).collect();
        if p.checked {
            args.push("fbc_err".to_string());
        }
        args.extend(p.locals.iter().zip(&offsets[i]).map(|(l, &o)| l.pointer(o)));
        args.push(format!("{at} % {x}"));
        args.push(format!("{at} / {x} % {y}"));
        args.push(format!("{at} / {}", x * y));
        let _ = writeln!(s, "    {name}__part{i}({});", args.join(", "));
        start += c;
    }
    let _ = write!(
        s,
        "  }}\n  mem_fence(CLK_GLOBAL_MEM_FENCE);\n  barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);\n  if (fbc_tl == 0) {{\n    atomic_inc(fbc_chain + 1 + fbc_phase);\n    if (atomic_inc(fbc_chain + {all}) == {}) {{\n      for (int i = 0; i < {}; ++i) fbc_chain[i] = 0;\n    }}\n  }}\n}}\n",
        total - 1,
        all + 1
    );
    Some(Chained { source: s, groups: total, slots: all + 1 })
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "// a at x:1:1\n__kernel __attribute__((reqd_work_group_size(32, 8, 1)))\nvoid a(__global const float* x0, __global float* x1, __global int* fbc_count) {\n  __local float red[1][8][128];\n  const int w0 = (int)get_group_id(0) * 128;\n  const int sk = (int)(get_global_id(2) % 4);\n  __local int fbc_last;\n  if (get_local_id(0) == 0) fbc_last = atomic_inc(fbc_count + w0) == 3;\n  barrier(CLK_LOCAL_MEM_FENCE);\n  if (!fbc_last) return;\n  x1[w0 + sk] = x0[w0];\n}\n";
    const B: &str = "// b at x:2:1\nvoid b__part0(__global float* x0, const size_t fbc_g) {\n  x0[fbc_g] = 0.0f;\n}\n\n// b's product\n__kernel __attribute__((reqd_work_group_size(32, 8, 1)))\nvoid b(__global const float* x0, __global float* x1, __global int* fbc_err) {\n  __local float fbc_red[256];\n  x1[get_group_id(1)] = x0[get_num_groups(1)];\n  b__part0(x1, 0);\n}\n";

    #[test]
    fn parts_run_by_ticket_each_after_the_one_before() {
        let phases = [
            Phase { name: "a", source: A, groups: [2, 1, 4] },
            Phase { name: "b", source: B, groups: [1, 3, 1] },
        ];
        let c = merge("a_b", &phases, [32, 8, 1], 5, 49152).expect("chained");
        assert_eq!(c.groups, 11);
        assert_eq!(
            c.source,
            "// a at x:1:1\nvoid a_b__part0(__global const float* x0, __global float* x1, __global int* fbc_count, __local float (*red)[8][128], __local int* fbc_last, const int fbc_wg0, const int fbc_wg1, const int fbc_wg2) {\n  const int w0 = (int)fbc_wg0 * 128;\n  const int sk = (int)(((size_t)fbc_wg2 * 1 + get_local_id(2)) % 4);\n  if (get_local_id(0) == 0) (*fbc_last) = atomic_inc(fbc_count + w0) == 3;\n  barrier(CLK_LOCAL_MEM_FENCE);\n  if (!(*fbc_last)) return;\n  x1[w0 + sk] = x0[w0];\n}\n\n\
// b at x:2:1\nvoid a_b__part1__part0(__global float* x0, const size_t fbc_g) {\n  x0[fbc_g] = 0.0f;\n}\n\n// b's product\nvoid a_b__part1(__global const float* x0, __global float* x1, __global int* fbc_err, __local float* fbc_red, const int fbc_wg0, const int fbc_wg1, const int fbc_wg2) {\n  x1[fbc_wg1] = x0[((size_t)3)];\n  a_b__part1__part0(x1, 0);\n}\n\n\
// a, b in one launch, in turn, by the ticket a work-group takes as it starts: [0, 8) a, [8, 11) b; each after every work-group of the one before is done.\n\
__kernel __attribute__((reqd_work_group_size(32, 8, 1)))\nvoid a_b(__global int* fbc_chain_counts, __global const float* c0_x0, __global float* c0_x1, __global int* c0_fbc_count, __global const float* c1_x0, __global float* c1_x1, __global int* fbc_err) {\n  __local int fbc_ticket;\n  __local float4 fbc_lm[257];\n  // Slot 0: tickets; 1 + i: part i's work-groups done; 3: every work-group done.\n  __global int* fbc_chain = fbc_chain_counts + 5;\n  const int fbc_tl = (int)((get_local_id(2) * get_local_size(1) + get_local_id(1)) * get_local_size(0) + get_local_id(0));\n  if (fbc_tl == 0) fbc_ticket = atomic_inc(fbc_chain);\n  barrier(CLK_LOCAL_MEM_FENCE);\n  const int fbc_v = fbc_ticket;\n  int fbc_phase = 0;\n  if (fbc_v < 8) {\n    a_b__part0(c0_x0, c0_x1, c0_fbc_count, (__local float (*)[8][128])((__local char*)fbc_lm + 0), (__local int*)((__local char*)fbc_lm + 4096), fbc_v % 2, fbc_v / 2 % 1, fbc_v / 2);\n  } else {\n    fbc_phase = 1;\n    // Every work-group of the part before has taken a ticket before this one: each has started.\n    if (fbc_tl == 0) while (*(volatile __global int*)(fbc_chain + 1) < 8) {}\n    barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);\n    a_b__part1(c1_x0, c1_x1, fbc_err, (__local float*)((__local char*)fbc_lm + 0), (fbc_v - 8) % 1, (fbc_v - 8) / 1 % 3, (fbc_v - 8) / 3);\n  }\n  mem_fence(CLK_GLOBAL_MEM_FENCE);\n  barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);\n  if (fbc_tl == 0) {\n    atomic_inc(fbc_chain + 1 + fbc_phase);\n    if (atomic_inc(fbc_chain + 3) == 10) {\n      for (int i = 0; i < 4; ++i) fbc_chain[i] = 0;\n    }\n  }\n}\n"
        );
    }

    #[test]
    fn kernels_that_read_their_place_otherwise_or_need_more_local_memory_are_not_chained() {
        let phases = |b: &'static str| {
            [
                Phase { name: "a", source: A, groups: [2, 1, 4] },
                Phase { name: "b", source: b, groups: [1, 3, 1] },
            ]
        };
        assert!(merge("a_b", &phases(B), [32, 8, 1], 0, 49152).is_some());
        // Local memory: the larger part's (a's 4096 + 4 bytes, each array from a multiple of
        // 16) and the ticket's 4.
        assert!(merge("a_b", &phases(B), [32, 8, 1], 0, 4115).is_none());
        assert!(merge("a_b", &phases(B), [32, 8, 1], 0, 4116).is_some());
        for bad in [
            B.replace("get_num_groups(1)", "get_num_groups(fbc_g)"),
            B.replace("x0[fbc_g] = 0.0f", "x0[get_group_id(0)] = 0.0f"),
            B.replace("__local float fbc_red[256]", "__local float fbc_red[256], t[2]"),
            B.replace("void b__part0", "__kernel void b__part0"),
        ] {
            let bad: &'static str = Box::leak(bad.into_boxed_str());
            assert!(merge("a_b", &phases(bad), [32, 8, 1], 0, 49152).is_none(), "{bad}");
        }
        // One phase alone is no chain.
        assert!(merge("a", &phases(B)[..1], [32, 8, 1], 0, 49152).is_none());
    }
}

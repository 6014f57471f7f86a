//! One `__kernel` per distinct body: launches whose generated code differs only in the kernel's
//! name share one kernel.
//!
//! A model's layers repeat, so their launches generate the same OpenCL C under different names
//! (`loss_grad_matmul_l0_q` and `loss_grad_matmul_l1_q`). Mobile drivers compile OpenCL C slowly,
//! so every distinct body is emitted once, under the name of its first launch; the other launches
//! run that kernel with their own arguments (the manifest names it), and its comment lists every
//! op it serves. The comparison is textual on the code after the comment block, with the kernel's
//! own name masked, so two kernels are merged only when they are the same program.

use std::collections::HashMap;
use std::fmt::Write as _;

use super::manifest::{FunctionManifest, Step};

/// The code of a kernel text (its lines that are not `//` comments: a merged launch's part
/// functions carry their kernels' comments, whose locations differ from layer to layer) with
/// its name masked.
fn masked_code(name: &str, text: &str) -> String {
    let code: Vec<&str> = text.lines().filter(|l| !l.trim_start().starts_with("//")).collect();
    mask_ident(&code.join("\n"), name)
}

/// `text` with every whole-word occurrence of identifier `name` (and of `name` as the prefix
/// of a part function, `name__partN`) replaced by `@`.
fn mask_ident(text: &str, name: &str) -> String {
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(name) {
        let before_ok = !rest[..at].chars().next_back().is_some_and(is_ident);
        let after = &rest[at + name.len()..];
        // A merged launch's part functions are `NAME__partN` (`flat_merge`), a chained one's
        // part's own `NAME__partN__partM` (`chain`).
        let mut part = None;
        let mut tail = after;
        while let Some(p) = tail.strip_prefix("__part") {
            tail = p.trim_start_matches(|c: char| c.is_ascii_digit());
            part = Some(tail);
        }
        let after_ok = !after.chars().next().is_some_and(is_ident)
            || part.is_some_and(|p| {
                p.len() + 6 < after.len() && !p.chars().next().is_some_and(is_ident)
            });
        out.push_str(&rest[..at]);
        out.push_str(if before_ok && after_ok { "@" } else { name });
        rest = after;
    }
    out.push_str(rest);
    out
}

/// The first line of a kernel's comment (`// tensor.matmul at FILE:LINE:COL`).
fn first_comment(text: &str) -> &str {
    text.lines().next().filter(|l| l.starts_with("// ")).map_or("", |l| &l[3..])
}

/// Merges kernels with equal code: `kernels` keeps the first of each, whose comment gains the
/// list of the others it serves, and every launch of `functions` names the kept kernel. Returns
/// how many kernels were merged away.
pub(crate) fn dedup_kernels(
    kernels: &mut Vec<(String, String)>,
    functions: &mut [FunctionManifest],
) -> usize {
    let mut first_of: HashMap<String, usize> = HashMap::new();
    // For every kept kernel: the (name, first comment line) of the ones merged into it.
    let mut merged: Vec<Vec<(String, String)>> = Vec::new();
    let mut rename: HashMap<String, String> = HashMap::new();
    let mut kept: Vec<(String, String)> = Vec::with_capacity(kernels.len());
    for (name, text) in kernels.drain(..) {
        let key = masked_code(&name, &text);
        match first_of.get(&key) {
            Some(&k) => {
                rename.insert(name.clone(), kept[k].0.clone());
                merged[k].push((name, first_comment(&text).to_string()));
            }
            None => {
                first_of.insert(key, kept.len());
                kept.push((name, text));
                merged.push(Vec::new());
            }
        }
    }
    let count = rename.len();
    for ((_, text), others) in kept.iter_mut().zip(&merged) {
        if others.is_empty() {
            continue;
        }
        let mut note = format!("// also runs {} more launch(es):\n", others.len());
        for (n, what) in others {
            let _ = writeln!(note, "//   {n}: {what}");
        }
        // After the comment block, before the code.
        let at = text
            .lines()
            .take_while(|l| l.starts_with("//"))
            .map(|l| l.len() + 1)
            .sum::<usize>()
            .min(text.len());
        text.insert_str(at, &note);
    }
    *kernels = kept;
    for f in functions {
        for s in &mut f.steps {
            if let Step::Launch(l) = s {
                if let Some(to) = rename.get(&l.kernel) {
                    l.kernel = to.clone();
                }
            }
        }
    }
    count
}

#[cfg(test)]
mod tests {
    use super::{mask_ident, masked_code};

    #[test]
    fn names_are_masked_as_whole_identifiers() {
        assert_eq!(
            mask_ident("void k_a(x) { k_ab(); k_a2; k_a; }", "k_a"),
            "void @(x) { k_ab(); k_a2; @; }"
        );
        let a = "// tensor.add at f.fbir:1:1\n// body: x0\n__kernel void f_add_a(__global float* x0) {\n  x0[0] = 1;\n}\n";
        let b = "// tensor.add at f.fbir:9:9\n// body: x0\n__kernel void f_add_b(__global float* x0) {\n  x0[0] = 1;\n}\n";
        let c = "// tensor.add at f.fbir:9:9\n__kernel void f_add_c(__global float* x0) {\n  x0[0] = 2;\n}\n";
        assert_eq!(masked_code("f_add_a", a), masked_code("f_add_b", b));
        assert_ne!(masked_code("f_add_a", a), masked_code("f_add_c", c));
        // A merged launch's part functions are named after it; their comments may differ.
        assert_eq!(
            mask_ident("m__part0(x); m__part12(y); m__partx; m__part", "m"),
            "@__part0(x); @__part12(y); m__partx; m__part"
        );
        // A chained launch's part's own helpers.
        assert_eq!(
            mask_ident("m__part1__part0(x); m__part1__partx", "m"),
            "@__part1__part0(x); m__part1__partx"
        );
        let m = |n: &str, at: &str| {
            format!("// {n}: x at {at}\nvoid {n}__part0(float* x0) {{\n  // at {at}\n  x0[0] = 1;\n}}\n__kernel void {n}(float* p0_x0) {{ {n}__part0(p0_x0); }}\n")
        };
        assert_eq!(
            masked_code("m_l0", &m("m_l0", "f:1:1")),
            masked_code("m_l1", &m("m_l1", "f:9:9"))
        );
    }
}

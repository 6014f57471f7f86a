//! The canonical text form of a module.
//!
//! One module prints one way: attributes sorted by name, two-space indentation, every op with its
//! full function type, value names kept from the source where they are unique in their function
//! and numbered otherwise. Printing is a fixpoint: `print(parse(print(m))) == print(m)`.

use std::collections::HashSet;
use std::fmt::Write as _;

use crate::attr::Attr;
use crate::module::{FuncData, Loc, Module, Value};
use crate::types::Type;

#[derive(Debug, Clone, Copy, Default)]
pub struct PrintOptions {
    /// Print `loc("file":line:col)` for every op that has a source position, not only for ops
    /// whose location was written explicitly.
    pub locations: bool,
}

/// The canonical text of a module.
pub fn print_module(m: &Module) -> String {
    print_module_with(m, PrintOptions::default())
}

pub fn print_module_with(m: &Module, opts: PrintOptions) -> String {
    let mut out = String::with_capacity(m.num_ops() * 96 + 64);
    out.push_str("module");
    if let Some(n) = &m.name {
        let _ = write!(out, " @{n}");
    }
    if !m.attrs.is_empty() {
        out.push_str(" attributes ");
        write_attr_dict(&mut out, &sorted(&m.attrs));
    }
    out.push_str(" {\n");
    for (i, f) in m.funcs.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        print_func(&mut out, m, f, opts);
    }
    out.push_str("}\n");
    out
}

fn sorted(attrs: &[(String, Attr)]) -> Vec<(String, Attr)> {
    let mut a = attrs.to_vec();
    a.sort_by(|x, y| x.0.cmp(&y.0));
    a
}

struct Names {
    names: Vec<Option<String>>,
    taken: HashSet<String>,
    counter: u64,
}

impl Names {
    fn assign(&mut self, m: &Module, v: Value) {
        // A result of an MLIR group `%r:2` is named `r#0`; fbc prints every result by name
        // (`%r_0, %r_1 = ...`), which parses back to the same names.
        let sanitized =
            m.value(v).name.as_deref().filter(|n| n.contains('#')).map(|n| n.replace('#', "_"));
        let wanted = sanitized.as_deref().or(m.value(v).name.as_deref());
        let name = match wanted {
            Some(w) if self.taken.insert(w.to_string()) => w.to_string(),
            _ => loop {
                let candidate = match wanted {
                    Some(w) => format!("{w}_{}", self.counter),
                    None => self.counter.to_string(),
                };
                self.counter += 1;
                if self.taken.insert(candidate.clone()) {
                    break candidate;
                }
            },
        };
        self.names[v.index()] = Some(name);
    }

    fn get(&self, v: Value) -> &str {
        self.names[v.index()].as_deref().unwrap_or("<<unnamed>>")
    }
}

fn print_func(out: &mut String, m: &Module, f: &FuncData, opts: PrintOptions) {
    let mut names = Names { names: vec![None; m.values.len()], taken: HashSet::new(), counter: 0 };
    for &a in &f.args {
        names.assign(m, a);
    }
    for &op in &f.body {
        for &r in &m.op(op).results {
            names.assign(m, r);
        }
    }
    let _ = write!(out, "  func.func @{}(", f.name);
    for (i, &a) in f.args.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        let _ = write!(out, "%{}: {}", names.get(a), m.value_type(a));
    }
    out.push(')');
    match f.result_types.len() {
        0 => {}
        1 => {
            let _ = write!(out, " -> {}", f.result_types[0]);
        }
        _ => {
            out.push_str(" -> ");
            write_type_list(out, &f.result_types);
        }
    }
    if !f.attrs.is_empty() {
        out.push_str(" attributes ");
        write_attr_dict(out, &sorted(&f.attrs));
    }
    out.push_str(" {\n");
    for &op in &f.body {
        let d = m.op(op);
        out.push_str("    ");
        if !d.results.is_empty() {
            for (i, &r) in d.results.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                let _ = write!(out, "%{}", names.get(r));
            }
            out.push_str(" = ");
        }
        out.push_str(d.name());
        for (i, &o) in d.operands.iter().enumerate() {
            out.push_str(if i == 0 { " " } else { ", " });
            let _ = write!(out, "%{}", names.get(o));
        }
        if !d.attrs.is_empty() {
            out.push(' ');
            write_attr_dict(out, &d.attrs);
        }
        let ins: Vec<Type> = d.operands.iter().map(|&o| m.value_type(o).clone()).collect();
        let outs: Vec<Type> = d.results.iter().map(|&r| m.value_type(r).clone()).collect();
        match (ins.len(), outs.len()) {
            (0, 0) => {}
            (1, 0) => {
                let _ = write!(out, " : {}", ins[0]);
            }
            _ => {
                out.push_str(" : ");
                write_type_list(out, &ins);
                out.push_str(" -> ");
                if outs.len() == 1 {
                    let _ = write!(out, "{}", outs[0]);
                } else {
                    write_type_list(out, &outs);
                }
            }
        }
        let loc = d.loc.clone().or_else(|| {
            let src = m.source.as_ref()?;
            (opts.locations && d.span != Default::default()).then(|| {
                let (line, col) = src.line_col(d.span.start);
                Loc { file: Some(src.name.clone()), line: line as u32, col: col as u32 }
            })
        });
        if let Some(l) = loc {
            write_loc(out, &l);
        }
        out.push('\n');
    }
    out.push_str("  }\n");
}

fn write_loc(out: &mut String, l: &Loc) {
    match &l.file {
        Some(file) => {
            let _ = write!(out, " loc({}:{}:{})", Attr::Str(file.clone()), l.line, l.col);
        }
        None => out.push_str(" loc(unknown)"),
    }
}

fn write_type_list(out: &mut String, types: &[Type]) {
    out.push('(');
    for (i, t) in types.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        let _ = write!(out, "{t}");
    }
    out.push(')');
}

fn write_attr_dict(out: &mut String, attrs: &[(String, Attr)]) {
    out.push('{');
    for (i, (k, v)) in attrs.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        match v {
            Attr::Unit => out.push_str(k),
            _ => {
                let _ = write!(out, "{k} = {v}");
            }
        }
    }
    out.push('}');
}

//! The op reference (`docs/ops.md`), generated from the registered op definitions so that the
//! documentation cannot drift from what the verifier enforces.

use std::fmt::Write as _;

use crate::registry::OpRegistry;

/// Markdown reference of every registered op, grouped by dialect, in name order.
pub fn markdown_reference(registry: &OpRegistry) -> String {
    let mut s = String::from(
        "# Op reference\n\n\
         Generated from the op definitions (`fbc_ir::docgen::markdown_reference`); do not edit by\n\
         hand. Regenerate with `FBC_UPDATE_DOCS=1 cargo test -p fbc-testing --test docs`.\n",
    );
    for dialect in registry.dialects() {
        let _ = write!(s, "\n## `{dialect}` dialect\n\n| op | summary | class |\n|---|---|---|\n");
        for def in registry.iter().filter(|d| d.dialect() == dialect) {
            let class = def.class.map_or("—".to_string(), |c| c.to_string());
            let _ = writeln!(
                s,
                "| [`{}`](#{}) | {} | {class} |",
                def.name,
                anchor(def.name),
                def.summary
            );
        }
        for def in registry.iter().filter(|d| d.dialect() == dialect) {
            let _ = write!(s, "\n### `{}`\n\n{}\n\n", def.name, def.summary);
            let _ = writeln!(s, "- operands: {}; results: {}", def.operands, def.results);
            if let Some(c) = def.class {
                let _ = writeln!(s, "- FBLayout class: {c}");
            }
            let t = def.traits;
            let traits: Vec<&str> = [
                (t.pure, "pure"),
                (t.elementwise, "elementwise"),
                (t.commutative, "commutative"),
                (t.terminator, "terminator"),
            ]
            .iter()
            .filter(|(on, _)| *on)
            .map(|(_, n)| *n)
            .collect();
            if !traits.is_empty() {
                let _ = writeln!(s, "- traits: {}", traits.join(", "));
            }
            if !def.attrs.is_empty() {
                let _ = writeln!(s, "- attributes:");
                for a in def.attrs {
                    let req = match (a.required, a.default) {
                        (true, _) => "required".to_string(),
                        (false, Some(d)) => format!("default `{d}`"),
                        (false, None) => "optional".to_string(),
                    };
                    let _ =
                        writeln!(s, "  - `{}`: {}, {req}. {}", a.name, a.kind.describe(), a.doc);
                }
            }
            if !def.doc.is_empty() {
                let _ = write!(s, "\n{}\n", def.doc.trim_end());
            }
        }
    }
    s
}

fn anchor(name: &str) -> String {
    name.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '_').collect()
}

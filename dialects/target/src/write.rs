//! Writing profiles as TOML: [`HardwareProfile::to_toml`] (the plain format [`crate::from_toml`]
//! reads back to an equal profile) and [`write_over`], which writes a profile over the text of
//! the profile it was derived from, keeping that text's comments (the source of every number
//! left alone) and putting a note beside each value it replaces: how `fbc calibrate` writes a
//! measured profile.

use toml_edit::{DocumentMut, Item, Table, Value};

use crate::error::TargetError;
use crate::profile::HardwareProfile;

/// A comment for one value of a profile: `field` is its dotted path (`compute.compute_units`,
/// `name`), `comment` one line of text (written after `# `).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    pub field: String,
    pub comment: String,
}

impl Note {
    pub fn new(field: impl Into<String>, comment: impl Into<String>) -> Note {
        Note { field: field.into(), comment: comment.into() }
    }
}

impl HardwareProfile {
    /// The profile as TOML in the builtin profiles' format, without comments; parsing it gives
    /// an equal profile.
    pub fn to_toml(&self) -> String {
        // The profile's fields are strings, numbers, booleans, arrays and tables with string
        // keys, all of which TOML writes; a failure would be a bug in this crate's types.
        toml::to_string(self).unwrap_or_else(|e| format!("# cannot write the profile: {e}\n"))
    }
}

/// Writes `profile` over `base_text`, the text of a valid profile: each value of `profile` that
/// differs from the base's, and each value `notes` names, is replaced; a value with a note gets
/// the note as its trailing comment, and the comment lines directly above its key (which
/// described the base's value) are dropped, as is the trailing comment of a changed value
/// without a note; every other line of the base is kept. Tables and keys the base lacks are
/// added (a value without a note then says [`NOT_IN_BASE`]), and those `profile` lacks removed. `header` (comment lines, each ending in a newline)
/// goes at the top of the file.
///
/// The result is parsed back and must be `profile`: an error names the first difference
/// otherwise. A note for a field `profile` does not have is an error.
pub fn write_over(
    base_text: &str,
    profile: &HardwareProfile,
    notes: &[Note],
    header: &str,
) -> Result<String, TargetError> {
    let base = crate::parse(base_text, "the base profile".to_owned())?;
    let internal = |message: String| TargetError::Write { message };
    let mut doc: DocumentMut =
        base_text.parse().map_err(|e: toml_edit::TomlError| internal(e.to_string()))?;
    let new = toml::Table::try_from(profile).map_err(|e| internal(e.to_string()))?;
    let old = toml::Table::try_from(&base).map_err(|e| internal(e.to_string()))?;
    for n in notes {
        let mut path = n.field.splitn(2, '.');
        let found = match (path.next(), path.next()) {
            (Some(k), None) => new.get(k).is_some_and(|v| !v.is_table()),
            (Some(t), Some(k)) => new.get(t).and_then(|t| t.get(k)).is_some(),
            _ => false,
        };
        if !found {
            return Err(internal(format!("a note for `{}`, which the profile has not", n.field)));
        }
    }
    let note = |field: &str| notes.iter().find(|n| n.field == field).map(|n| n.comment.as_str());

    let root = doc.as_table_mut();
    // Keys of the base that the profile has not (a `[measured]` table of an earlier calibration,
    // an optional field).
    root.retain(|k, _| new.contains_key(k));
    for (key, value) in &new {
        match value {
            toml::Value::Table(fields) => {
                if !root.contains_table(key) {
                    let mut t = Table::new();
                    t.decor_mut().set_prefix("\n");
                    root.insert(key, Item::Table(t));
                }
                let Some(table) = root.get_mut(key).and_then(Item::as_table_mut) else {
                    return Err(internal(format!("`{key}` is not a table in the base profile")));
                };
                table.retain(|k, _| fields.contains_key(k));
                let before = old.get(key).and_then(toml::Value::as_table);
                for (k, v) in fields {
                    let field = format!("{key}.{k}");
                    let same = before.and_then(|t| t.get(k)) == Some(v);
                    set(table, k, v, same, note(&field))?;
                }
            }
            v => {
                let same = old.get(key) == Some(v);
                set(root, key, v, same, note(key))?;
            }
        }
    }
    if let Some(mut first) = root.iter_mut().next().map(|(k, _)| k) {
        let decor = first.leaf_decor_mut();
        let was = decor.prefix().and_then(|p| p.as_str()).unwrap_or("").to_owned();
        decor.set_prefix(format!("{header}{was}"));
    }
    let text = doc.to_string();
    let back = crate::parse(&text, "the written profile".to_owned())?;
    if back != *profile {
        return Err(internal(format!(
            "the written profile reads back differently:\n{text}\nexpected:\n{}",
            profile.to_toml()
        )));
    }
    Ok(text)
}

/// The comment of a value that the base's text lacks and no note covers.
pub const NOT_IN_BASE: &str = "not in the base profile: the default";

/// Sets `table[key]` to `v` unless it is `same` as the base's and has no note (then the base's
/// text stays as it was).
fn set(
    table: &mut Table,
    key: &str,
    v: &toml::Value,
    same: bool,
    note: Option<&str>,
) -> Result<(), TargetError> {
    if same && note.is_none() && table.contains_key(key) {
        return Ok(());
    }
    let mut value = edit_value(v)?;
    // A value the base's text lacks (an optional field it left to its default) says so.
    let note = note.or((!table.contains_key(key)).then_some(NOT_IN_BASE));
    let suffix = match note {
        Some(n) => format!(" # {}", one_line(n)),
        None => String::new(),
    };
    value.decor_mut().set_prefix(" ");
    value.decor_mut().set_suffix(suffix);
    match table.get_key_value_mut(key) {
        // Replaced in place: the key keeps its place and what precedes its comment block.
        Some((mut k, item)) => {
            *item = Item::Value(value);
            let decor = k.leaf_decor_mut();
            let was = decor.prefix().and_then(|p| p.as_str()).unwrap_or("").to_owned();
            decor.set_prefix(without_comment_above(&was));
        }
        None => {
            table.insert(key, Item::Value(value));
        }
    }
    Ok(())
}

/// `v` as a `toml_edit` value; an array of tables becomes an array of inline tables, one a line.
fn edit_value(v: &toml::Value) -> Result<Value, TargetError> {
    let internal = |message: String| TargetError::Write { message };
    let text = toml::to_string(&Wrap { v }).map_err(|e| internal(e.to_string()))?;
    let doc: DocumentMut =
        text.parse().map_err(|e: toml_edit::TomlError| internal(e.to_string()))?;
    let item = doc.get("v").cloned().unwrap_or(Item::None);
    let mut value = match item {
        Item::Value(v) => v,
        Item::ArrayOfTables(a) => Value::Array(a.into_array()),
        _ => return Err(internal(format!("cannot write {v} as a value"))),
    };
    if let Value::Array(a) = &mut value {
        if a.iter().any(Value::is_inline_table) {
            for e in a.iter_mut() {
                e.decor_mut().set_prefix("\n  ");
            }
            a.set_trailing_comma(true);
            a.set_trailing("\n");
        }
    }
    Ok(value)
}

#[derive(serde::Serialize)]
struct Wrap<'a> {
    v: &'a toml::Value,
}

/// `text` (one note) on one line.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A key's prefix without the comment lines directly above the key: everything up to its last
/// blank line (a file's header, a table's heading) is kept.
fn without_comment_above(prefix: &str) -> String {
    let mut keep = 0;
    let mut at = 0;
    for line in prefix.split_inclusive('\n') {
        at += line.len();
        if line.trim().is_empty() {
            keep = at;
        }
    }
    prefix[..keep].to_owned()
}

#[cfg(test)]
mod tests {
    use super::without_comment_above;

    #[test]
    fn only_the_comment_block_above_a_key_goes() {
        assert_eq!(without_comment_above("# a\n# b\n"), "");
        assert_eq!(without_comment_above("# header\n\n# about x\n"), "# header\n\n");
        assert_eq!(without_comment_above(""), "");
        assert_eq!(without_comment_above("\n"), "\n");
    }
}

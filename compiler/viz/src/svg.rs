//! A small SVG writer: the elements the views draw, with attribute text escaped.

use std::fmt::Write as _;

/// Escapes `&`, `<`, `>`, `"` and `'` for XML text and attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Coordinates print with at most two decimals and no trailing zeros, so output is stable.
pub fn num(v: f64) -> String {
    let r = (v * 100.0).round() / 100.0 + 0.0;
    let s = format!("{r:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// An SVG document being written.
#[derive(Debug)]
pub struct Svg {
    body: String,
    width: f64,
    height: f64,
}

impl Svg {
    pub fn new(width: f64, height: f64) -> Svg {
        Svg { body: String::new(), width, height }
    }

    /// A rectangle; `attrs` is raw attribute text (`class="tile"`), `title` a hover text.
    pub fn rect(&mut self, x: f64, y: f64, w: f64, h: f64, attrs: &str, title: Option<&str>) {
        let _ = write!(
            self.body,
            r#"<rect x="{}" y="{}" width="{}" height="{}" {attrs}"#,
            num(x),
            num(y),
            num(w),
            num(h)
        );
        self.close("rect", title);
    }

    pub fn line(&mut self, x1: f64, y1: f64, x2: f64, y2: f64, attrs: &str) {
        let _ = writeln!(
            self.body,
            r#"<line x1="{}" y1="{}" x2="{}" y2="{}" {attrs}/>"#,
            num(x1),
            num(y1),
            num(x2),
            num(y2)
        );
    }

    /// A path with data `d` (already formatted).
    pub fn path(&mut self, d: &str, attrs: &str, title: Option<&str>) {
        let _ = write!(self.body, r#"<path d="{d}" {attrs}"#);
        self.close("path", title);
    }

    /// Text at `(x, y)` (escaped).
    pub fn text(&mut self, x: f64, y: f64, attrs: &str, text: &str) {
        let _ = writeln!(
            self.body,
            r#"<text x="{}" y="{}" {attrs}>{}</text>"#,
            num(x),
            num(y),
            escape(text)
        );
    }

    /// Raw markup (a `<g>` opening, a nested element).
    pub fn raw(&mut self, s: &str) {
        self.body.push_str(s);
    }

    /// Ends the element `tag` just opened: with a `<title>` child (a hover text), or empty.
    fn close(&mut self, tag: &str, title: Option<&str>) {
        match title {
            Some(t) => {
                let _ = writeln!(self.body, "><title>{}</title></{tag}>", escape(t));
            }
            None => self.body.push_str("/>\n"),
        }
    }

    /// The document, with `style` as its stylesheet.
    pub fn finish(self, style: &str) -> String {
        format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" font-family=\"sans-serif\" font-size=\"11\">\n<style>{style}</style>\n{}</svg>\n",
            self.body,
            w = num(self.width),
            h = num(self.height),
        )
    }
}

/// Twelve distinguishable fill colours (tiles, layouts), cycled.
pub const PALETTE: [&str; 12] = [
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#86bcb6", "#d4a6c8", "#a0cbe8",
];

pub fn colour(k: usize) -> &'static str {
    PALETTE[k % PALETTE.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_escapes_print_stably() {
        assert_eq!(num(3.0), "3");
        assert_eq!(num(2.5), "2.5");
        assert_eq!(num(1.0 / 3.0), "0.33");
        assert_eq!(num(-0.001), "0");
        assert_eq!(escape(r#"a<b & "c">'d'"#), "a&lt;b &amp; &quot;c&quot;&gt;&#39;d&#39;");
    }

    #[test]
    fn titled_elements_close_with_their_own_tag() {
        let mut s = Svg::new(10.0, 10.0);
        s.rect(0.0, 0.0, 1.0, 2.0, r#"class="a""#, Some("x<y"));
        s.path("M0 0L1 1", "", Some("p"));
        s.rect(1.0, 1.0, 1.0, 1.0, "", None);
        let out = s.finish("");
        assert!(
            out.contains(
                r#"<rect x="0" y="0" width="1" height="2" class="a"><title>x&lt;y</title></rect>"#
            ),
            "{out}"
        );
        assert!(out.contains(r#"<path d="M0 0L1 1" ><title>p</title></path>"#), "{out}");
        assert!(out.contains(r#"<rect x="1" y="1" width="1" height="1" />"#), "{out}");
    }
}

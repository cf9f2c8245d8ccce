//! The ui's templates keep askama's escaping and the Content-Security-Policy's rules: no
//! template under [`TEMPLATES`] turns escaping off (`|safe`, an `escape` setting) or holds
//! what the policy would block or what would run tenant data as code (an inline `<script>`
//! body, a `style=` attribute, an `on…=` event attribute, a `javascript:` URL); and no Rust file
//! under the plugin marks markup as already safe (`HtmlSafe`, `PreEscaped`). A file that does is
//! reported with the line.

use std::{fmt, path::Path};

/// Where the ui's templates live.
pub const TEMPLATES: &str = "src/bin/kubectl-applyset/ui/templates";
/// Where no Rust code may mark markup safe.
pub const PLUGIN: &str = "src/bin/kubectl-applyset";

/// What a template line must not hold (compared in lower case).
const IN_TEMPLATES: [&str; 7] = [
    "|safe",
    "| safe",
    "escape=",
    "escape =",
    " style=",
    "javascript:",
    "<script>",
];
/// What a Rust line under the plugin must not hold.
const IN_RUST: [&str; 2] = ["HtmlSafe", "PreEscaped"];

/// A forbidden construct found.
#[derive(Debug, PartialEq, Eq)]
pub struct Found {
    pub file: String,
    pub line: usize,
    pub what: String,
}

impl fmt::Display for Found {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: `{}`", self.file, self.line, self.what)
    }
}

/// An `on…=` event attribute in `line` (lower case), e.g. ` onclick=`.
fn event_attribute(line: &str) -> Option<String> {
    line.match_indices(" on").find_map(|(i, _)| {
        let rest = &line[i + 3..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphabetic())
            .collect();
        let after = rest[name.len()..].trim_start();
        (!name.is_empty() && after.starts_with('=')).then(|| format!("on{name}="))
    })
}

/// The forbidden constructs of one template's `text`.
pub fn in_template(file: &str, text: &str) -> Vec<Found> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let lower = line.to_ascii_lowercase();
        let mut hits: Vec<String> = IN_TEMPLATES
            .iter()
            .filter(|w| lower.contains(*w))
            .map(|w| w.trim().to_string())
            .collect();
        hits.extend(event_attribute(&lower));
        out.extend(hits.into_iter().map(|what| Found {
            file: file.into(),
            line: n + 1,
            what,
        }));
    }
    out
}

/// The forbidden constructs of one Rust file's `text` (comments ignored).
pub fn in_rust(file: &str, text: &str) -> Vec<Found> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or_default();
        for what in IN_RUST {
            if code.contains(what) {
                out.push(Found {
                    file: file.into(),
                    line: n + 1,
                    what: what.into(),
                });
            }
        }
    }
    out
}

/// The templates' file names under [`TEMPLATES`].
fn templates(root: &Path) -> Result<Vec<String>, crate::Error> {
    let dir = root.join(TEMPLATES);
    let entries = std::fs::read_dir(&dir).map_err(|e| crate::Error::Io(dir.clone(), e))?;
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| crate::Error::Io(dir.clone(), e))?;
        out.push(format!(
            "{TEMPLATES}/{}",
            entry.file_name().to_string_lossy()
        ));
    }
    out.sort();
    Ok(out)
}

/// Fails with [`crate::Error::Markup`] naming every forbidden construct.
pub fn check_repo(root: &Path) -> Result<(), crate::Error> {
    let mut found = Vec::new();
    for file in templates(root)? {
        found.extend(in_template(&file, &crate::read(root, &file)?));
    }
    for file in crate::sources::rust_files(root, PLUGIN)? {
        found.extend(in_rust(&file, &crate::read(root, &file)?));
    }
    if found.is_empty() {
        Ok(())
    } else {
        Err(crate::Error::Markup(found))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unescaped_output_and_what_the_policy_blocks_are_found() {
        let text = "<p>{{ name }}</p>\n\
                    <p>{{ note|safe }}</p>\n\
                    {% filter escape = \"none\" %}x{% endfilter %}\n\
                    <div style=\"color: red\">x</div>\n\
                    <a href=\"javascript:go()\">x</a>\n\
                    <script>alert(1)</script>\n\
                    <img src=\"/a.png\" onerror = \"x()\">\n\
                    <p class=\"online\">{{ only }}</p>\n\
                    <script src=\"{{ chrome.js }}\" defer></script>\n";
        let found: Vec<(usize, String)> = in_template("t.html", text)
            .into_iter()
            .map(|f| (f.line, f.what))
            .collect();
        assert_eq!(
            found,
            [
                (2, "|safe".to_string()),
                (3, "escape =".to_string()),
                (4, "style=".to_string()),
                (5, "javascript:".to_string()),
                (6, "<script>".to_string()),
                (7, "onerror=".to_string()),
            ]
        );
    }

    #[test]
    fn markup_marked_safe_in_rust_is_found_and_comments_pass() {
        let text = "impl askama::filters::HtmlSafe for Row {}\n// not HtmlSafe here\nlet x = 1;\n";
        let found = in_rust("src/bin/x.rs", text);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].to_string(), "src/bin/x.rs:1: `HtmlSafe`");
    }
}

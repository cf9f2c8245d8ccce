//! The links between the docs: every relative Markdown link of README.md, CHANGELOG.md,
//! docs/*.md and every *.md under examples/ names a file of the repository (never one outside it), and every `#anchor`
//! names a heading of its target page (GitHub's anchors). Links to `http(s)://` pages are
//! not fetched. Fenced code blocks and inline code are skipped.

use std::{
    collections::HashSet,
    fmt,
    path::{Component, Path, PathBuf},
};

/// A broken link: where, what, why.
#[derive(Debug)]
pub struct Broken {
    pub file: String,
    pub line: usize,
    pub target: String,
    pub why: &'static str,
}

impl fmt::Display for Broken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}: ({}) {}",
            self.file, self.line, self.target, self.why
        )
    }
}

/// The Markdown pages whose links are checked, relative to `root`.
pub fn pages(root: &Path) -> Vec<String> {
    let mut pages = vec!["README.md".to_string(), "CHANGELOG.md".to_string()];
    if let Ok(dir) = std::fs::read_dir(root.join("docs")) {
        let mut docs: Vec<String> = dir
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".md"))
            .map(|n| format!("docs/{n}"))
            .collect();
        docs.sort();
        pages.extend(docs);
    }
    pages.extend(markdown_under(root, "examples"));
    pages
}

/// The `*.md` files anywhere below `root/dir` (relative to `root`), sorted; none when `dir`
/// cannot be read.
fn markdown_under(root: &Path, dir: &str) -> Vec<String> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(root.join(dir)) else {
        return out;
    };
    for entry in entries.filter_map(|e| e.ok()) {
        let rel = format!("{dir}/{}", entry.file_name().to_string_lossy());
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            out.extend(markdown_under(root, &rel));
        } else if rel.ends_with(".md") {
            out.push(rel);
        }
    }
    out.sort();
    out
}

/// Checks the links of [`pages`].
pub fn check_repo(root: &Path) -> Result<(), crate::Error> {
    let mut broken = Vec::new();
    for page in pages(root) {
        broken.extend(check_page(root, &page));
    }
    if broken.is_empty() {
        Ok(())
    } else {
        Err(crate::Error::Links(broken))
    }
}

/// The broken links of `page` (a path relative to `root`); a page that cannot be read is one.
pub fn check_page(root: &Path, page: &str) -> Vec<Broken> {
    let Ok(text) = std::fs::read_to_string(root.join(page)) else {
        return vec![Broken {
            file: page.into(),
            line: 0,
            target: page.into(),
            why: "page not readable",
        }];
    };
    let dir = Path::new(page).parent().unwrap_or(Path::new(""));
    let mut broken = Vec::new();
    for (line, target) in links(&text) {
        let b = |why| Broken {
            file: page.into(),
            line,
            target: target.clone(),
            why,
        };
        if target.contains("://") || target.starts_with("mailto:") {
            continue;
        }
        let (path, anchor) = match target.split_once('#') {
            Some((p, a)) => (p, Some(a)),
            None => (target.as_str(), None),
        };
        let file = if path.is_empty() {
            PathBuf::from(page)
        } else {
            match normalize(&dir.join(path)) {
                Some(f) => f,
                None => {
                    broken.push(b("leaves the repository"));
                    continue;
                }
            }
        };
        if !root.join(&file).exists() {
            broken.push(b("no such file in the repository"));
            continue;
        }
        let Some(anchor) = anchor else { continue };
        let is_md = file.extension().is_some_and(|e| e == "md");
        let target_text = std::fs::read_to_string(root.join(&file)).unwrap_or_default();
        if is_md && !anchors(&target_text).contains(anchor) {
            broken.push(b("no such heading in the target page"));
        }
    }
    broken
}

/// `p` without `.` and `..` components; None when it climbs above its start.
fn normalize(p: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::Normal(n) => out.push(n),
            _ => return None,
        }
    }
    Some(out)
}

/// The Markdown pages' lines outside fenced code blocks, with their numbers.
fn prose(text: &str) -> impl Iterator<Item = (usize, &str)> {
    let mut fenced = false;
    text.lines().enumerate().filter_map(move |(n, l)| {
        if l.trim_start().starts_with("```") {
            fenced = !fenced;
            return None;
        }
        (!fenced).then_some((n + 1, l))
    })
}

/// The targets of `[text](target)` links, with their line, inline code left out.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (n, line) in prose(text) {
        let line: String = line.split('`').step_by(2).collect::<Vec<_>>().join(" ");
        let mut rest = line.as_str();
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            let Some(end) = after.find(')') else { break };
            let target = after[..end].split_whitespace().next().unwrap_or_default();
            out.push((n, target.to_string()));
            rest = &after[end..];
        }
    }
    out
}

/// The anchors of a page's headings, as GitHub makes them (duplicates get `-1`, `-2`, ...).
pub fn anchors(text: &str) -> HashSet<String> {
    let mut seen = HashSet::new();
    for (_, l) in prose(text) {
        let t = l.trim_start();
        let hashes = t.chars().take_while(|c| *c == '#').count();
        if hashes == 0 || hashes > 6 || !t[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(t[hashes..].trim());
        let mut s = base.clone();
        let mut k = 0;
        while seen.contains(&s) {
            k += 1;
            s = format!("{base}-{k}");
        }
        seen.insert(s);
    }
    seen
}

/// GitHub's anchor of a heading: lower case, punctuation dropped (but `-` and `_`), spaces
/// to `-`.
pub fn slug(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_are_githubs() {
        assert_eq!(
            slug("2. API: `applyset.dev/v1alpha1`"),
            "2-api-applysetdevv1alpha1"
        );
        assert_eq!(slug("6.1 Prune"), "61-prune");
        assert_eq!(
            slug("Bounds: one tenant cannot starve the others"),
            "bounds-one-tenant-cannot-starve-the-others"
        );
        let a = anchors("# A\n## Same\n## Same\n```\n## Not a heading\n```\n");
        assert!(a.contains("same") && a.contains("same-1") && !a.contains("not-a-heading"));
    }

    #[test]
    fn the_pages_include_every_markdown_file_under_examples() {
        let root = std::env::temp_dir().join(format!("xtask-pages-{}", std::process::id()));
        std::fs::create_dir_all(root.join("examples/a/deep")).expect("dir");
        std::fs::create_dir_all(root.join("docs")).expect("docs");
        std::fs::write(root.join("docs/x.md"), "").expect("docs/x.md");
        std::fs::write(root.join("examples/README.md"), "").expect("readme");
        std::fs::write(root.join("examples/a/deep/notes.md"), "").expect("notes");
        std::fs::write(root.join("examples/a/set.yaml"), "").expect("yaml");
        let found = pages(&root);
        let _ = std::fs::remove_dir_all(&root);
        assert_eq!(
            found,
            [
                "README.md",
                "CHANGELOG.md",
                "docs/x.md",
                "examples/README.md",
                "examples/a/deep/notes.md"
            ]
        );
    }

    /// The broken fixture: one link of each kind of break, and good links beside them.
    #[test]
    fn broken_links_are_found_and_good_ones_pass() {
        let root = std::env::temp_dir().join(format!("xtask-links-{}", std::process::id()));
        std::fs::create_dir_all(root.join("docs")).expect("dir");
        std::fs::write(root.join("docs/b.md"), "# B\n\n## Part two\n").expect("b");
        std::fs::write(
            root.join("docs/a.md"),
            "# A\n\n[ok](b.md) [ok](b.md#part-two) [ok](#a) [web](https://example.com/x)\n\
             `[code](nowhere.md)`\n```\n[fenced](nowhere.md)\n```\n\
             [missing](c.md)\n[anchor](b.md#part-three)\n[outside](../../etc/passwd)\n",
        )
        .expect("a");
        let broken = check_page(&root, "docs/a.md");
        let _ = std::fs::remove_dir_all(&root);
        let found: Vec<(usize, &str, &str)> = broken
            .iter()
            .map(|b| (b.line, b.target.as_str(), b.why))
            .collect();
        assert_eq!(
            found,
            [
                (8, "c.md", "no such file in the repository"),
                (9, "b.md#part-three", "no such heading in the target page"),
                (10, "../../etc/passwd", "leaves the repository"),
            ]
        );
    }
}

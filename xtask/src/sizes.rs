//! No production file over [`MAX_LINES`] lines: the house rule that keeps one concept per
//! module. A file's production code is its lines outside its inline `#[cfg(test)]` modules
//! (before the test module, and any after it); a test module declared in a file of its own
//! (`mod tests;`) is one line of the file, and `tests.rs` files and files under a `tests`
//! directory are tests and are not counted. No allow-list: a file over the bound is split by
//! concern.

use std::{fmt, path::Path};

/// The most lines a file's production code may have.
pub const MAX_LINES: usize = 800;

/// A file over the bound: its path (relative to the repository root) and its production lines.
#[derive(Debug, PartialEq, Eq)]
pub struct Oversized {
    pub file: String,
    pub lines: usize,
}

impl fmt::Display for Oversized {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} lines of production code (at most {MAX_LINES})",
            self.file, self.lines
        )
    }
}

/// Whether `path` (relative, `/`-separated) holds tests only: a `tests.rs`, or a file under a
/// `tests` directory.
pub fn is_test_file(path: &str) -> bool {
    let mut parts = path.split('/');
    let name = parts.next_back().unwrap_or_default();
    name == "tests.rs" || parts.any(|dir| dir == "tests")
}

/// The production lines of a Rust file: its lines outside its inline test modules. A test
/// module is a `#[cfg(test)]` at the start of a line whose next line of code (not blank, an
/// attribute or a comment) opens an inline module; it ends at the next line that is `}` alone
/// (rustfmt, which `make lint` holds the code to, closes a top-level module so and indents
/// everything inside it), or on its own line when it closes there (`mod t {}`).
pub fn production_lines(text: &str) -> usize {
    let lines: Vec<&str> = text.lines().collect();
    let mut count = 0;
    let mut i = 0;
    while i < lines.len() {
        match test_module_end(&lines, i) {
            Some(end) => i = end + 1,
            None => {
                count += 1;
                i += 1;
            }
        }
    }
    count
}

/// Where the test module that starts at line `at` ends (the index of its last line): None when
/// no test module starts there; the last line when it never closes.
fn test_module_end(lines: &[&str], at: usize) -> Option<usize> {
    if lines[at].trim_end() != "#[cfg(test)]" {
        return None;
    }
    let (offset, opening) = lines[at + 1..].iter().enumerate().find(|(_, l)| {
        let l = l.trim();
        !(l.is_empty() || l.starts_with("#[") || l.starts_with("//"))
    })?;
    if !opens_module(opening) {
        return None;
    }
    let opening_at = at + 1 + offset;
    if opening.trim_end().ends_with('}') {
        return Some(opening_at);
    }
    let close = lines[opening_at + 1..]
        .iter()
        .position(|l| l.trim_end() == "}");
    Some(close.map_or(lines.len() - 1, |c| opening_at + 1 + c))
}

/// Whether `line` opens an inline module (`mod name {`), not one in a file of its own
/// (`mod name;`).
fn opens_module(line: &str) -> bool {
    let l = line.trim();
    let l = l.strip_prefix("pub ").unwrap_or(l);
    let l = l.strip_prefix("pub(crate) ").unwrap_or(l);
    l.starts_with("mod ") && !l.ends_with(';')
}

/// The production files under `src/` whose production code is over [`MAX_LINES`].
pub fn oversized(root: &Path) -> Result<Vec<Oversized>, crate::Error> {
    let mut out = Vec::new();
    for file in crate::sources::rust_files(root, "src")? {
        if is_test_file(&file) {
            continue;
        }
        let lines = production_lines(&crate::read(root, &file)?);
        if lines > MAX_LINES {
            out.push(Oversized { file, lines });
        }
    }
    Ok(out)
}

/// Fails with [`crate::Error::Oversized`] naming every file over the bound.
pub fn check_repo(root: &Path) -> Result<(), crate::Error> {
    let over = oversized(root)?;
    if over.is_empty() {
        Ok(())
    } else {
        Err(crate::Error::Oversized(over))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn production_code_ends_at_the_test_module() {
        let text =
            "//! Doc.\nfn a() {}\n\n#[cfg(test)]\nmod tests {\n    #[test]\n    fn t() {}\n}\n";
        assert_eq!(production_lines(text), 3);
        // An attribute or comment between the cfg and the module.
        assert_eq!(
            production_lines(
                "fn a() {}\n#[cfg(test)]\n#[allow(unused)]\n// the tests\nmod t {\n}\n"
            ),
            1
        );
        assert_eq!(
            production_lines("fn a() {}\n#[cfg(test)]\npub(crate) mod t {}\n"),
            1
        );
        // A test module in a file of its own, declared among the modules, ends nothing.
        let text = "mod a;\n#[cfg(test)]\nmod tests;\n\nfn b() {}\nfn c() {}\n";
        assert_eq!(production_lines(text), 6);
    }

    #[test]
    fn a_file_without_a_test_module_is_all_production_code() {
        assert_eq!(production_lines(""), 0);
        assert_eq!(production_lines("fn a() {}\nfn b() {}\n"), 2);
        assert_eq!(production_lines("fn a() {}\nfn b() {}"), 2);
        // A cfg(test) item that is not a module does not end the production code.
        let text = "#[cfg(test)]\nuse std::fmt;\nfn a() {}\n#[cfg(test)]\nfn helper() {}\n";
        assert_eq!(production_lines(text), 5);
        // Nor does a cfg(test) as the last line.
        assert_eq!(production_lines("fn a() {}\n#[cfg(test)]\n"), 2);
    }

    #[test]
    fn production_code_after_the_test_module_counts() {
        let text = "fn a() {}\n#[cfg(test)]\nmod tests {\n    fn t() {}\n}\n\nfn b() {}\n";
        assert_eq!(production_lines(text), 3);
        // Indented braces inside the module do not close it; an unclosed one runs to the end.
        let text = "fn a() {}\n#[cfg(test)]\nmod tests {\n    fn t() {\n    }\n}\nfn b() {}\n";
        assert_eq!(production_lines(text), 2);
        assert_eq!(
            production_lines("fn a() {}\n#[cfg(test)]\nmod tests {\n    fn t() {}\n"),
            1
        );
        // An indented cfg(test) (inside another module) is left to that module.
        let text = "mod m {\n    #[cfg(test)]\n    mod t {}\n}\n";
        assert_eq!(production_lines(text), 4);
    }

    #[test]
    fn the_bound_itself_passes_and_one_more_line_fails() {
        let at = "fn a() {}\n".repeat(MAX_LINES);
        let over = format!("{at}fn b() {{}}\n#[cfg(test)]\nmod tests {{}}\n");
        assert_eq!(production_lines(&at), MAX_LINES);
        assert_eq!(production_lines(&over), MAX_LINES + 1);
    }

    #[test]
    fn test_files_are_not_production_files() {
        assert!(is_test_file("src/fair/tests.rs"));
        assert!(is_test_file("src/health/tests.rs"));
        assert!(is_test_file("src/engine/tests/plan.rs"));
        assert!(!is_test_file("src/fair.rs"));
        assert!(!is_test_file("src/tests_helpers.rs"));
        assert!(!is_test_file("src/contests/a.rs"));
    }

    #[test]
    fn an_oversized_file_is_named_with_its_count() {
        let root = std::env::temp_dir().join(format!("xtask-sizes-{}", std::process::id()));
        std::fs::create_dir_all(root.join("src/big/tests")).expect("dir");
        let long = "fn a() {}\n".repeat(MAX_LINES + 2);
        std::fs::write(root.join("src/small.rs"), "fn a() {}\n").expect("small");
        std::fs::write(root.join("src/big/mod.rs"), &long).expect("big");
        std::fs::write(root.join("src/big/tests.rs"), &long).expect("tests.rs");
        std::fs::write(root.join("src/big/tests/more.rs"), &long).expect("tests dir");
        let found = oversized(&root);
        let _ = std::fs::remove_dir_all(&root);
        let found = found.expect("oversized");
        assert_eq!(
            found,
            [Oversized {
                file: "src/big/mod.rs".into(),
                lines: MAX_LINES + 2
            }]
        );
        let said = found[0].to_string();
        assert!(
            said.starts_with("src/big/mod.rs: 802 lines") && said.contains("800"),
            "{said}"
        );
    }
}

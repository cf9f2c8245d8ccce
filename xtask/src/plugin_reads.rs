//! The kubectl plugin lists no cluster objects itself: it reads members and parents through
//! the library (the engine's paged listing, `parent::AnyParent`), so that it cannot drift from
//! what the operator reads. A file under `src/bin/` that names `ListParams`, calls `.list(`,
//! `.list_metadata(` or starts a `watcher(` outside a comment is reported with the line.

use std::{fmt, path::Path};

/// Where the binaries' code may not list objects itself.
pub const BIN_DIR: &str = "src/bin";

/// What a line must not hold.
pub const FORBIDDEN: [&str; 4] = ["ListParams", ".list(", ".list_metadata(", "watcher("];

/// A listing found in a binary's code.
#[derive(Debug, PartialEq, Eq)]
pub struct Listing {
    pub file: String,
    pub line: usize,
    pub found: &'static str,
}

impl fmt::Display for Listing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: `{}`", self.file, self.line, self.found)
    }
}

/// The listings of one file's `text`: every line that is not a comment and holds one of
/// [`FORBIDDEN`].
pub fn listings(file: &str, text: &str) -> Vec<Listing> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or_default();
        for found in FORBIDDEN {
            if code.contains(found) {
                out.push(Listing {
                    file: file.into(),
                    line: n + 1,
                    found,
                });
            }
        }
    }
    out
}

/// Fails with [`crate::Error::Listings`] naming every listing under [`BIN_DIR`].
pub fn check_repo(root: &Path) -> Result<(), crate::Error> {
    let mut found = Vec::new();
    for file in crate::sources::rust_files(root, BIN_DIR)? {
        found.extend(listings(&file, &crate::read(root, &file)?));
    }
    if found.is_empty() {
        Ok(())
    } else {
        Err(crate::Error::Listings(found))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listings_are_found_and_comments_and_other_calls_pass() {
        let text = "use kube::api::{ListParams, Patch};\n\
                    // the library lists with .list( and ListParams\n\
                    let l = api.list(&params).await;\n\
                    let x = members::list_members(&api).await; // not .list( itself\n\
                    let v = items.iter().collect::<Vec<_>>();\n\
                    let m = api.list_metadata(&params).await;\n\
                    let w = watcher(api, config);\n";
        let found: Vec<(usize, &str)> = listings("src/bin/x.rs", text)
            .iter()
            .map(|l| (l.line, l.found))
            .collect();
        assert_eq!(
            found,
            [
                (1, "ListParams"),
                (3, ".list("),
                (6, ".list_metadata("),
                (7, "watcher(")
            ]
        );
        let said = listings("src/bin/x.rs", text)[0].to_string();
        assert_eq!(said, "src/bin/x.rs:1: `ListParams`");
    }
}

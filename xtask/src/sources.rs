//! The Rust sources under a directory of the repository, for the checks that read code
//! ([`crate::sizes`], [`crate::plugin_reads`]): every `*.rs` file below it, as paths relative
//! to the repository root with `/` separators, sorted.

use std::path::Path;

/// The `*.rs` files below `root/dir` (relative to `root`), sorted; a directory that cannot be
/// read is an error naming it.
pub fn rust_files(root: &Path, dir: &str) -> Result<Vec<String>, crate::Error> {
    let mut out = Vec::new();
    walk(root, dir, &mut out)?;
    out.sort();
    Ok(out)
}

fn walk(root: &Path, dir: &str, out: &mut Vec<String>) -> Result<(), crate::Error> {
    let path = root.join(dir);
    let entries = std::fs::read_dir(&path).map_err(|e| crate::Error::Io(path.clone(), e))?;
    for entry in entries {
        let entry = entry.map_err(|e| crate::Error::Io(path.clone(), e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let rel = format!("{dir}/{name}");
        let kind = entry
            .file_type()
            .map_err(|e| crate::Error::Io(entry.path(), e))?;
        if kind.is_dir() {
            walk(root, &rel, out)?;
        } else if name.ends_with(".rs") {
            out.push(rel);
        }
    }
    Ok(())
}

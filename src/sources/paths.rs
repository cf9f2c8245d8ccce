//! Path conventions of a source's files: which are manifests, how a path inside a source is
//! cleaned, and the directory filter of `spec.*.path`.

use super::SourceError;

/// Whether `path` names a manifest file (`.yaml`, `.yml`, `.json`).
pub fn is_manifest_file(path: &str) -> bool {
    let lower = path.to_ascii_lowercase();
    lower.ends_with(".yaml") || lower.ends_with(".yml") || lower.ends_with(".json")
}

/// A relative path inside a source, normalised: no leading `./` or `/` repeated separators;
/// `None` when it is absolute or leaves the root (`..`).
pub fn clean_relative(path: &str) -> Option<String> {
    if path.starts_with('/') || path.starts_with('\\') || path.contains('\\') {
        return None;
    }
    // A Windows drive prefix (`C:`) has no business in a manifest bundle either.
    if path.len() >= 2 && path.as_bytes()[1] == b':' && path.as_bytes()[0].is_ascii_alphabetic() {
        return None;
    }
    let mut parts = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => return None,
            p => parts.push(p),
        }
    }
    Some(parts.join("/"))
}

/// The directory filter of `spec.*.path`: `""` for the whole source, else `dir/`.
pub fn directory_prefix(path: Option<&str>) -> Result<String, SourceError> {
    match path.map(str::trim).filter(|p| !p.is_empty()) {
        None => Ok(String::new()),
        Some(p) => match clean_relative(p) {
            Some(c) if c.is_empty() => Ok(String::new()),
            Some(c) => Ok(format!("{c}/")),
            None => Err(SourceError::Invalid(format!(
                "path {p:?} must be a relative directory inside the source (no leading '/', no '..')"
            ))),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes() {
        assert_eq!(directory_prefix(None).ok().as_deref(), Some(""));
        assert_eq!(directory_prefix(Some("./")).ok().as_deref(), Some(""));
        assert_eq!(
            directory_prefix(Some("./a/b/")).ok().as_deref(),
            Some("a/b/")
        );
        assert!(directory_prefix(Some("../a")).is_err());
        assert!(directory_prefix(Some("/a")).is_err());
        assert_eq!(clean_relative("a//b/./c").as_deref(), Some("a/b/c"));
    }

    #[test]
    fn manifest_files() {
        assert!(is_manifest_file("a/b.yaml"));
        assert!(is_manifest_file("B.YML"));
        assert!(is_manifest_file("c.json"));
        assert!(!is_manifest_file("kustomization"));
        assert!(!is_manifest_file("a.yaml.txt"));
    }

    #[test]
    fn unclean_paths() {
        assert_eq!(clean_relative("./a/b").as_deref(), Some("a/b"));
        assert_eq!(clean_relative("a/../b"), None);
        assert_eq!(clean_relative("/a"), None);
        assert_eq!(clean_relative("a\\b"), None);
        assert_eq!(clean_relative("C:x"), None);
    }
}

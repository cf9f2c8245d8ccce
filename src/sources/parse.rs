//! Reading a source's files as manifests: parsed on a blocking thread within one YAML budget
//! per source, their memory taken from the operator's budget first ([`parse_blocking`]); a
//! file carrying SOPS metadata keeps its text on its manifests. A source that yields nothing
//! is refused, never read as empty (which would prune its members).

use std::sync::Arc;

use super::{SourceError, directory, estimate_bytes, memory};
use crate::manifest::{
    Manifest, ManifestError, Origin, YamlBudget, parse_documents, parse_documents_within,
};

/// A manifest file read from a source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceFile {
    /// Path inside the source (or the data key).
    pub path: String,
    pub text: String,
}

/// Parses manifest files of source `desc` into manifests (errors name the source, the file
/// and the line).
pub fn parse_files(desc: &str, files: &[SourceFile]) -> Result<Vec<Manifest>, ManifestError> {
    let mut out = Vec::new();
    // One parse budget for all the files of the source.
    let mut budget = YamlBudget::for_parsing();
    for f in files {
        let origin = Origin::file(desc, &f.path);
        let parsed = parse_documents_within(&f.text, &origin, &mut budget)?;
        out.extend(keep_sops_file(parsed, &origin, f));
    }
    Ok(out)
}

/// The manifests of file `f`, each holding the file's text when it carries SOPS metadata
/// (see [`crate::manifest::SopsFile`]).
fn keep_sops_file(mut parsed: Vec<Manifest>, origin: &Origin, f: &SourceFile) -> Vec<Manifest> {
    let format = crate::sops::Format::from_path(&f.path);
    if matches!(
        format,
        crate::sops::Format::Yaml | crate::sops::Format::Json
    ) && crate::sops::carries_metadata(f.text.as_bytes(), format)
    {
        let file = Arc::new(crate::manifest::SopsFile {
            name: origin.to_string(),
            path: f.path.clone(),
            text: f.text.clone(),
        });
        for m in &mut parsed {
            m.sops_file = Some(file.clone());
        }
    }
    parsed
}

/// Like [`parse_files`] for data keys of a ConfigMap or Secret (origins say `key`).
pub fn parse_files_as_keys(
    desc: &str,
    files: &[SourceFile],
) -> Result<Vec<Manifest>, ManifestError> {
    let mut out = Vec::new();
    let mut budget = YamlBudget::for_parsing();
    for f in files {
        let origin = Origin::key(desc, &f.path);
        let parsed = parse_documents_within(&f.text, &origin, &mut budget)?;
        out.extend(keep_sops_file(parsed, &origin, f));
    }
    Ok(out)
}

/// How the files of a source are named in origins (and so in error messages).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Naming {
    /// `… file <path>, line …`
    Files,
    /// `… key <key>, line …` (ConfigMap and Secret data keys)
    Keys,
    /// The source is one document (an HTTP document): `… line …`.
    Document,
}

/// Parsed manifests with their estimated memory (for the cache).
pub struct Parsed {
    pub manifests: Arc<Vec<Manifest>>,
    pub bytes: u64,
    /// A build that waits for the set's keys ([`directory::Deferred`]): the set builds it at
    /// render; `manifests` is then empty.
    pub deferred: Option<Arc<directory::Deferred>>,
}

/// What an empty source is told to do.
const EMPTY_HINT: &str = "a source that yields nothing is refused rather than read as empty (which would prune its members); fix the path or the content, or remove the source from spec.sources";

/// Parses `files` of source `desc` on a blocking thread (YAML of up to `max_unpacked` bytes
/// must not stall the async workers). A source without manifest files, or whose files hold no
/// object, is refused (`Failed`); `where_` says where nothing was found, e.g.
/// `under path deploy at commit 0a1b…`.
///
/// The parsed manifests take about as much memory as their text again, and that is taken from
/// `lease` before parsing; once parsed, `lease` holds the manifests' estimated memory only
/// (the text is gone).
pub async fn parse_blocking(
    desc: String,
    files: Vec<SourceFile>,
    naming: Naming,
    where_: String,
    lease: &mut memory::Lease,
) -> Result<Parsed, SourceError> {
    if files.is_empty() {
        return Err(SourceError::Failed(format!(
            "no manifest files (.yaml, .yml, .json) {where_}; {EMPTY_HINT}"
        )));
    }
    let text: u64 = files.iter().map(|f| f.text.len() as u64).sum();
    lease.grow(text).await?;
    let parsed = tokio::task::spawn_blocking(move || {
        let manifests = match naming {
            Naming::Files => parse_files(&desc, &files)?,
            Naming::Keys => parse_files_as_keys(&desc, &files)?,
            Naming::Document => {
                let mut out = Vec::new();
                for f in &files {
                    out.extend(parse_documents(&f.text, &Origin::source(&desc))?);
                }
                out
            }
        };
        if manifests.is_empty() {
            return Err(SourceError::Failed(format!(
                "the manifests {where_} hold no objects; {EMPTY_HINT}"
            )));
        }
        let bytes = estimate_bytes(&manifests);
        Ok(Parsed {
            manifests: Arc::new(manifests),
            bytes,
            deferred: None,
        })
    })
    .await
    .map_err(|e| SourceError::Failed(format!("parsing task: {e}")))??;
    lease.hold(parsed.bytes).await?;
    Ok(parsed)
}

/// ` under path <dir>` for a non-empty directory prefix (`dir/`), else "".
pub fn under_path(prefix: &str) -> String {
    match prefix.trim_end_matches('/') {
        "" => String::new(),
        dir => format!(" under path {dir}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn empty_sources_are_refused() {
        let budget = memory::MemoryBudget::new(1 << 20, Duration::from_secs(1));
        let err = parse_blocking(
            "t".into(),
            vec![],
            Naming::Files,
            "under path x".into(),
            &mut budget.lease(),
        )
        .await
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(
            err.contains("no manifest files (.yaml, .yml, .json) under path x"),
            "{err}"
        );
        assert!(err.contains("would prune"), "{err}");
        let only_comments = vec![SourceFile {
            path: "a.yaml".into(),
            text: "# nothing\n---\n".into(),
        }];
        let err = parse_blocking(
            "t".into(),
            only_comments,
            Naming::Files,
            "in x".into(),
            &mut budget.lease(),
        )
        .await
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(err.contains("hold no objects"), "{err}");
    }
}

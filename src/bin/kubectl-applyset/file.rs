//! Reading the file of `build` and `diff`: its ApplySet and ClusterApplySet documents (with
//! the line of each `spec.manifests` and `spec.sources` entry, so that errors name a line),
//! and the CustomResourceDefinitions declared beside them.

use std::{collections::HashMap, path::Path};

use applyset_operator::{
    api::ApplySetSpec,
    applyset::{GROUP, ParentRef},
    kind_order,
    manifest::{self, Manifest, Origin},
};
use serde::Deserialize;

use crate::error::CliError;
use serde_json::Value;

/// One set declared in the file.
pub struct SetDoc {
    pub parent: ParentRef,
    pub spec: ApplySetSpec,
    /// Line of the set's document (1-based; 0 when unknown).
    pub line: u64,
    /// Line of each `spec.manifests` entry, when known.
    pub manifest_lines: Vec<u64>,
    /// Line of each `spec.sources` entry, when known.
    pub source_lines: Vec<u64>,
}

/// An entry of a set's spec that an error is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry {
    /// `spec.manifests[i]`.
    Manifest(usize),
    /// `spec.sources[i]`.
    Source(usize),
}

impl SetDoc {
    /// The line of `entry` when known, else the set's own line.
    pub fn line_at(&self, entry: Option<Entry>) -> u64 {
        let line = match entry {
            Some(Entry::Manifest(i)) => self.manifest_lines.get(i),
            Some(Entry::Source(i)) => self.source_lines.get(i),
            None => None,
        };
        line.copied().filter(|l| *l > 0).unwrap_or(self.line)
    }
}

/// What the file declares.
pub struct File {
    /// The path as given (`-` for standard input), for messages.
    pub path: String,
    pub sets: Vec<SetDoc>,
    /// CustomResourceDefinitions declared outside the sets: their kinds are known offline.
    pub crds: Vec<Manifest>,
}

impl File {
    /// `path:line: message` (`path: message` when the line is unknown).
    pub fn at(&self, line: u64, message: impl std::fmt::Display) -> String {
        if line > 0 {
            format!("{}:{line}: {message}", self.path)
        } else {
            format!("{}: {message}", self.path)
        }
    }
}

/// [`read`], and an error when the file declares no set.
pub fn read_sets(path: &Path, namespace: &str) -> Result<File, CliError> {
    let file = read(path, namespace)?;
    if file.sets.is_empty() {
        return Err(CliError::File(format!(
            "{}: declares no ApplySet or ClusterApplySet (apiVersion applyset.dev/v1alpha1)",
            file.path
        )));
    }
    Ok(file)
}

/// Reads and parses `path` (`-`: standard input). ApplySets without a namespace get
/// `namespace`. Errors name the file and line.
pub fn read(path: &Path, namespace: &str) -> Result<File, CliError> {
    read_text(path, namespace).map_err(CliError::File)
}

fn read_text(path: &Path, namespace: &str) -> Result<File, String> {
    let display = path.display().to_string();
    let text = if display == "-" {
        std::io::read_to_string(std::io::stdin())
            .map_err(|e| format!("reading standard input: {e}"))?
    } else {
        std::fs::read_to_string(path).map_err(|e| format!("{display}: {e}"))?
    };
    parse(&display, &text, namespace)
}

/// Parses the text of a file named `path`; the error names the file and line.
fn parse(path: &str, text: &str, namespace: &str) -> Result<File, String> {
    let file = File {
        path: path.to_string(),
        sets: Vec::new(),
        crds: Vec::new(),
    };
    let documents = manifest::parse_documents(text, &Origin::source(path)).map_err(|e| {
        let line = match &e {
            manifest::ManifestError::Yaml { line: Some(l), .. } => *l,
            other => other.origin().line().unwrap_or(0),
        };
        file.at(line, e)
    })?;
    let lines = entry_lines(text);
    let mut file = file;
    for doc in documents {
        let line = doc.origin.line().unwrap_or(0);
        let kind = doc.kind.as_str();
        if kind_order::is_crd(&doc.group, kind) {
            file.crds.push(doc);
            continue;
        }
        if doc.group != GROUP || !matches!(kind, "ApplySet" | "ClusterApplySet") {
            continue;
        }
        let parent = if kind == "ApplySet" {
            ParentRef::applyset(doc.namespace.as_deref().unwrap_or(namespace), &doc.name)
        } else {
            ParentRef::cluster(&doc.name)
        };
        let spec = doc.object.get("spec").cloned().unwrap_or(Value::Null);
        let spec = match spec {
            Value::Null => Value::Object(Default::default()),
            spec => spec,
        };
        // Through JSON text: inline manifests are read from raw JSON, as from the API server.
        let spec: ApplySetSpec = serde_json::to_string(&spec)
            .map_err(|e| e.to_string())
            .and_then(|t| serde_json::from_str(&t).map_err(|e| e.to_string()))
            .map_err(|e| file.at(line, format!("{parent}: spec is not valid: {e}")))?;
        let (manifest_lines, source_lines) = lines.get(&line).cloned().unwrap_or_default();
        file.sets.push(SetDoc {
            parent,
            spec,
            line,
            manifest_lines,
            source_lines,
        });
    }
    Ok(file)
}

/// Just enough of a set's document to learn where its entries are.
#[derive(Deserialize, Default)]
#[serde(default)]
struct DocLines {
    spec: Option<SpecLines>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct SpecLines {
    manifests: Vec<serde_saphyr::Spanned<serde::de::IgnoredAny>>,
    sources: Vec<serde_saphyr::Spanned<serde::de::IgnoredAny>>,
}

/// The lines of each document's `spec.manifests` and `spec.sources` entries, by the line
/// its document starts at (best effort: none for a text this reading does not understand).
fn entry_lines(text: &str) -> HashMap<u64, (Vec<u64>, Vec<u64>)> {
    let docs = serde_saphyr::from_str_multiple::<serde_saphyr::Spanned<Value>, Vec<_>>(text);
    let Ok(docs) = docs else {
        return HashMap::new();
    };
    let mut out = HashMap::new();
    // Each document is read again on its own (from its start line), so that one document
    // this reading does not understand does not hide the lines of the others.
    let starts: Vec<u64> = docs.iter().map(|d| d.referenced.line()).collect();
    let all: Vec<&str> = text.lines().collect();
    for (i, start) in starts.iter().enumerate() {
        let from = usize::try_from(start.saturating_sub(1)).unwrap_or(usize::MAX);
        let to = starts
            .get(i + 1)
            .and_then(|n| usize::try_from(n.saturating_sub(1)).ok())
            .unwrap_or(all.len())
            .min(all.len());
        let Some(slice) = all.get(from..to) else {
            continue;
        };
        let body = slice.join("\n");
        // The slice may end with the next document's `---`: read it as a stream.
        let read = serde_saphyr::from_str_multiple::<DocLines, Vec<_>>(&body);
        if let Some(lines) = read.ok().and_then(|v| v.into_iter().next()) {
            let spec = lines.spec.unwrap_or_default();
            let offset = start.saturating_sub(1);
            let at = |v: &[serde_saphyr::Spanned<serde::de::IgnoredAny>]| {
                v.iter().map(|e| e.referenced.line() + offset).collect()
            };
            out.insert(*start, (at(&spec.manifests), at(&spec.sources)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
apiVersion: v1
kind: Namespace
metadata:
  name: team
---
apiVersion: applyset.dev/v1alpha1
kind: ApplySet
metadata:
  name: web
spec:
  manifests:
  - apiVersion: v1
    kind: ConfigMap
    metadata:
      name: a
  - apiVersion: v1
    kind: ConfigMap
    metadata:
      name: b
  sources:
  - http:
      url: https://example.com/x.yaml
---
apiVersion: applyset.dev/v1alpha1
kind: ClusterApplySet
metadata:
  name: infra
";

    #[test]
    fn sets_and_the_lines_of_their_entries() {
        let f = parse("sets.yaml", TEXT, "team").expect("parses");
        assert_eq!(f.sets.len(), 2);
        let web = &f.sets[0];
        assert_eq!(web.parent, ParentRef::applyset("team", "web"));
        assert_eq!(web.line, 6);
        assert_eq!(web.manifest_lines, vec![12, 16]);
        assert_eq!(web.source_lines, vec![21]);
        assert_eq!(web.line_at(Some(Entry::Manifest(1))), 16);
        assert_eq!(web.line_at(Some(Entry::Source(0))), 21);
        assert_eq!(web.line_at(None), 6);
        assert_eq!(f.sets[1].parent, ParentRef::cluster("infra"));
        assert_eq!(f.sets[1].line, 24);
    }

    #[test]
    fn yaml_errors_name_the_file_and_line() {
        let err = parse("bad.yaml", "apiVersion: v1\nkind: [\n", "team")
            .err()
            .expect("an error")
            .to_string();
        assert!(err.starts_with("bad.yaml:"), "{err}");
    }
}

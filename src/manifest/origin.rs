//! Where a declared object came from ([`Origin`]), as every message names it.

use super::*;

// ---------------------------------------------------------------------------------------------
// Origin
// ---------------------------------------------------------------------------------------------

/// Where a producer found the text or value.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Base {
    /// `spec.manifests[index]`.
    Inline { index: usize },
    /// A source, optionally one named file / key inside it.
    Source {
        source: String,
        /// `(noun, name)`, e.g. `("key", "deploy.yaml")`.
        file: Option<(&'static str, String)>,
    },
}

/// Where a declared object came from; shown in every error so a user can find the object.
///
/// Display examples:
/// - `spec.manifests[3]`, `spec.manifests[3].items[0]` (a member of an inline `List`);
/// - `configMap default/app key deploy.yaml, document 2 (line 14)`;
/// - `git https://example.com/repo.git@main file apps/web.yaml, document 1 (line 1), items[2]`.
///
/// Document numbers are 1-based and count non-empty documents (empty documents produce
/// nothing); the line is the 1-based line where the document's content starts, so it is
/// unambiguous even when empty documents precede it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Origin {
    base: Base,
    document: Option<usize>,
    line: Option<u64>,
    items: Vec<usize>,
}

impl Origin {
    /// The inline manifest `spec.manifests[index]` (0-based, as in the list).
    pub fn inline(index: usize) -> Self {
        Self::from_base(Base::Inline { index })
    }

    /// A file inside a source: displayed `{source} file {file}`.
    /// `source` describes the producer, e.g. `git https://example.com/repo.git@main`.
    pub fn file(source: impl Into<String>, file: impl Into<String>) -> Self {
        Self::from_base(Base::Source {
            source: source.into(),
            file: Some(("file", file.into())),
        })
    }

    /// A data key of a ConfigMap or Secret: displayed `{source} key {key}`,
    /// e.g. `Origin::key("configMap default/app", "deploy.yaml")`.
    pub fn key(source: impl Into<String>, key: impl Into<String>) -> Self {
        Self::from_base(Base::Source {
            source: source.into(),
            file: Some(("key", key.into())),
        })
    }

    /// A source that is a single text without a file name (e.g. an HTTP URL): displayed
    /// `{source}`.
    pub fn source(source: impl Into<String>) -> Self {
        Self::from_base(Base::Source {
            source: source.into(),
            file: None,
        })
    }

    fn from_base(base: Base) -> Self {
        Self {
            base,
            document: None,
            line: None,
            items: Vec::new(),
        }
    }

    /// The 1-based number of the (non-empty) document inside a multi-document text.
    #[must_use]
    pub fn with_document(mut self, number: usize) -> Self {
        self.document = Some(number);
        self
    }

    /// The 1-based line where the object starts in the text.
    #[must_use]
    pub fn with_line(mut self, line: u64) -> Self {
        self.line = Some(line);
        self
    }

    /// The 0-based index of the member inside a `List` (nested lists append more indexes).
    #[must_use]
    pub fn with_item(mut self, index: usize) -> Self {
        self.items.push(index);
        self
    }

    /// The index into `spec.manifests` for inline manifests.
    pub fn inline_index(&self) -> Option<usize> {
        match self.base {
            Base::Inline { index } => Some(index),
            Base::Source { .. } => None,
        }
    }

    /// The 1-based document number, when the object came from a multi-document text.
    pub fn document(&self) -> Option<usize> {
        self.document
    }

    /// The 1-based line where the object's document starts, when known.
    pub fn line(&self) -> Option<u64> {
        self.line
    }

    /// The indexes of the object inside (nested) `List` objects, outermost first.
    pub fn items(&self) -> &[usize] {
        &self.items
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.base {
            Base::Inline { index } => write!(f, "spec.manifests[{index}]")?,
            Base::Source { source, file } => {
                f.write_str(source)?;
                if let Some((noun, name)) = file {
                    write!(f, " {noun} {name}")?;
                }
            }
        }
        match (self.document, self.line) {
            (Some(document), Some(line)) => write!(f, ", document {document} (line {line})")?,
            (Some(document), None) => write!(f, ", document {document}")?,
            (None, Some(line)) => write!(f, ", line {line}")?,
            (None, None) => {}
        }
        if !self.items.is_empty() {
            // Inline origins are JSON paths (`spec.manifests[3].items[0]`); source origins are
            // prose followed by the path inside the document.
            let inline_path = matches!(self.base, Base::Inline { .. })
                && self.document.is_none()
                && self.line.is_none();
            let mut separator = if inline_path { "." } else { ", " };
            for item in &self.items {
                write!(f, "{separator}items[{item}]")?;
                separator = ".";
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::*;
    use super::*;

    // ----- Origin -----

    #[test]
    fn origin_display() {
        assert_eq!(Origin::inline(3).to_string(), "spec.manifests[3]");
        assert_eq!(
            Origin::inline(3).with_item(0).with_item(2).to_string(),
            "spec.manifests[3].items[0].items[2]"
        );
        assert_eq!(
            cm_origin().to_string(),
            "configMap default/app key deploy.yaml"
        );
        assert_eq!(
            cm_origin().with_document(2).with_line(14).to_string(),
            "configMap default/app key deploy.yaml, document 2 (line 14)"
        );
        assert_eq!(
            cm_origin().with_document(2).to_string(),
            "configMap default/app key deploy.yaml, document 2"
        );
        assert_eq!(
            cm_origin().with_line(7).to_string(),
            "configMap default/app key deploy.yaml, line 7"
        );
        assert_eq!(
            Origin::file("git https://example.com/r.git@main", "apps/web.yaml")
                .with_document(1)
                .with_line(1)
                .with_item(2)
                .with_item(0)
                .to_string(),
            "git https://example.com/r.git@main file apps/web.yaml, document 1 (line 1), items[2].items[0]"
        );
        assert_eq!(
            Origin::source("http https://example.com/all.yaml").to_string(),
            "http https://example.com/all.yaml"
        );
    }

    #[test]
    fn origin_accessors() {
        let o = cm_origin().with_document(2).with_line(5).with_item(1);
        assert_eq!(o.document(), Some(2));
        assert_eq!(o.line(), Some(5));
        assert_eq!(o.items(), &[1]);
        assert_eq!(o.inline_index(), None);
        assert_eq!(Origin::inline(4).inline_index(), Some(4));
    }
}

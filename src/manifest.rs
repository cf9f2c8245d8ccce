//! Manifests: parsing and validating declared objects (SPEC §2.1, §4 step 1 "Render").
//!
//! The render step collects the desired set from *producers*. Every producer ends in the same
//! two calls, so a new source kind is just another producer:
//!
//! - inline `spec.manifests[i]` (already JSON values):
//!   [`Manifest::from_value`]`(value, `[`Origin::inline`]`(i))`;
//! - text sources (ConfigMap / Secret keys, HTTP, git, OCI files, YAML or JSON, possibly
//!   multi-document): [`parse_documents`]`(text, &`[`Origin::key`]`("configMap default/app",
//!   "deploy.yaml"))` (or [`Origin::file`] / [`Origin::source`]).
//!
//! Both flatten `List` kinds and validate each object. The render step then checks the whole
//! set for duplicates ([`check_duplicates`], after it resolved namespaces), strips the fields
//! that must not be sent in an apply body ([`normalize`]) and computes the revision
//! ([`digest`]). Everything here is pure: no I/O, no client.

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

// The member label of KEP-3659: a declared object must not carry it (SPEC §3.3).
use crate::api::MAX_MANIFEST_DEPTH;
use crate::applyset::LABEL_PART_OF;

/// Longest object name the API server accepts (DNS subdomain length).
const MAX_NAME_LEN: usize = 253;

/// Longest namespace name (namespaces are DNS-1123 labels).
const MAX_NAMESPACE_LEN: usize = 63;

/// Bound on `List`-in-`List` nesting, so hostile input cannot recurse without limit.
const MAX_LIST_DEPTH: usize = 16;

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

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/// A render/validation failure. Every message names the origin, the object (kind/name when
/// known) and what to change. Origins are boxed to keep `Result`s small.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManifestError {
    /// The text is not valid YAML (or JSON).
    #[error(
        "{origin}{}: invalid YAML: {message}; fix the syntax there (JSON is accepted too)",
        at_line_column(*.line, *.column)
    )]
    Yaml {
        origin: Box<Origin>,
        line: Option<u64>,
        column: Option<u64>,
        message: String,
    },

    /// An entry that could not be read at all (see `api::InlineManifest`).
    #[error("{origin}: {problem}")]
    Unreadable {
        origin: Box<Origin>,
        problem: String,
    },

    /// The text is over a budget (too large, too many nodes, nested too deep).
    #[error("{origin}: {problem}")]
    Budget {
        origin: Box<Origin>,
        problem: String,
    },

    /// A document or list item is a scalar or a sequence instead of an object.
    #[error(
        "{origin}: expected a Kubernetes object (a mapping with apiVersion, kind and \
         metadata.name) but found {found}; make each document or list item one object"
    )]
    NotAnObject {
        origin: Box<Origin>,
        found: &'static str,
    },

    /// `apiVersion` is missing or malformed.
    #[error(
        "{origin}: {object}: {problem}; set apiVersion to \"<version>\" for the core group \
         (e.g. \"v1\") or \"<group>/<version>\" (e.g. \"apps/v1\")"
    )]
    ApiVersion {
        origin: Box<Origin>,
        object: String,
        problem: String,
    },

    /// `kind` is missing or malformed.
    #[error("{origin}: {object}: {problem}; set kind to the object's type, e.g. \"Deployment\"")]
    Kind {
        origin: Box<Origin>,
        object: String,
        problem: String,
    },

    /// `metadata.name` is missing or not a valid name.
    #[error(
        "{origin}: {object}: {problem}; set metadata.name to the object's name (at most 253 \
         characters, without '/' or '%', not \".\" or \"..\")"
    )]
    Name {
        origin: Box<Origin>,
        object: String,
        problem: String,
    },

    /// `metadata.generateName` without `metadata.name`.
    #[error(
        "{origin}: {object}: metadata.generateName is not supported; set metadata.name \
         (a declared object needs a fixed name so that it can be updated and pruned)"
    )]
    GenerateName { origin: Box<Origin>, object: String },

    /// `metadata.namespace` is not a string or not a valid namespace name.
    #[error(
        "{origin}: {object}: {problem}; set metadata.namespace to a namespace name (lowercase \
         letters, digits and '-', at most 63 characters) or remove it to use the target namespace"
    )]
    Namespace {
        origin: Box<Origin>,
        object: String,
        problem: String,
    },

    /// Other malformed metadata (not a mapping, labels or annotations that are not strings).
    #[error("{origin}: {object}: {problem}; {fix}")]
    Metadata {
        origin: Box<Origin>,
        object: String,
        problem: String,
        fix: String,
    },

    /// The object declares the ApplySet member label itself (SPEC §3.3).
    #[error(
        "{origin}: {object}: declares the label applyset.kubernetes.io/part-of, which only the \
         operator sets; remove it from the manifest"
    )]
    PartOfLabel { origin: Box<Origin>, object: String },

    /// A `List` whose `items` is not a sequence.
    #[error(
        "{origin}: {kind}: items must be a list of objects but is {found}; fix items or declare \
         the objects as separate documents"
    )]
    ListItems {
        origin: Box<Origin>,
        kind: String,
        found: &'static str,
    },

    /// `List` objects nested too deeply.
    #[error(
        "{origin}: List objects are nested more than {MAX_LIST_DEPTH} levels deep; flatten the \
         lists"
    )]
    ListTooDeep { origin: Box<Origin> },

    /// Two declarations of the same object.
    #[error(
        "{key} is declared more than once: at {first} and at {second}; remove one of the \
         declarations (objects are identified by group, kind, namespace and name; the API \
         version does not matter)"
    )]
    Duplicate {
        key: MemberKey,
        first: Box<Origin>,
        second: Box<Origin>,
    },
}

impl ManifestError {
    /// The origin the error is about (for duplicates: the second declaration).
    pub fn origin(&self) -> &Origin {
        match self {
            Self::Yaml { origin, .. }
            | Self::Unreadable { origin, .. }
            | Self::Budget { origin, .. }
            | Self::NotAnObject { origin, .. }
            | Self::ApiVersion { origin, .. }
            | Self::Kind { origin, .. }
            | Self::Name { origin, .. }
            | Self::GenerateName { origin, .. }
            | Self::Namespace { origin, .. }
            | Self::Metadata { origin, .. }
            | Self::PartOfLabel { origin, .. }
            | Self::ListItems { origin, .. }
            | Self::ListTooDeep { origin } => origin,
            Self::Duplicate { second, .. } => second,
        }
    }
}

fn at_line_column(line: Option<u64>, column: Option<u64>) -> String {
    match (line, column) {
        (Some(line), Some(column)) => format!(", line {line}, column {column}"),
        (Some(line), None) => format!(", line {line}"),
        _ => String::new(),
    }
}

/// "a string", "a number", ... for messages.
fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

// ---------------------------------------------------------------------------------------------
// MemberKey
// ---------------------------------------------------------------------------------------------

/// The identity of a member: group, kind, namespace, name (the version does not matter: the
/// same object is reachable through every served version).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MemberKey {
    pub group: String,
    pub kind: String,
    pub namespace: Option<String>,
    pub name: String,
}

impl MemberKey {
    /// `Kind` for the core group, `Kind.group` otherwise (the `contains-group-kinds` spelling).
    pub fn group_kind(&self) -> String {
        if self.group.is_empty() {
            self.kind.clone()
        } else {
            format!("{}.{}", self.kind, self.group)
        }
    }
}

/// `Deployment.apps ns/name`, `Namespace name`.
impl fmt::Display for MemberKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.kind)?;
        if !self.group.is_empty() {
            write!(f, ".{}", self.group)?;
        }
        match &self.namespace {
            Some(namespace) => write!(f, " {namespace}/{}", self.name),
            None => write!(f, " {}", self.name),
        }
    }
}

/// Fails on the first key (in input order) that was already seen, naming both origins.
///
/// Pass keys whose namespaces are already resolved (defaulted), so that an object without a
/// namespace and the same object with the target namespace are recognised as one.
pub fn check_duplicates<'a>(
    keys: impl IntoIterator<Item = (MemberKey, &'a Origin)>,
) -> Result<(), ManifestError> {
    let mut seen: BTreeMap<MemberKey, &'a Origin> = BTreeMap::new();
    for (key, origin) in keys {
        match seen.entry(key) {
            Entry::Vacant(entry) => {
                entry.insert(origin);
            }
            Entry::Occupied(entry) => {
                return Err(ManifestError::Duplicate {
                    first: Box::new((*entry.get()).clone()),
                    second: Box::new(origin.clone()),
                    key: entry.key().clone(),
                });
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Manifest
// ---------------------------------------------------------------------------------------------

/// A validated declared object.
#[derive(Clone, Debug, PartialEq)]
pub struct Manifest {
    pub origin: Origin,
    /// The object as declared (not normalized; see [`normalize`]).
    pub object: Map<String, Value>,
    pub api_version: String,
    pub kind: String,
    /// `""` for the core group.
    pub group: String,
    pub version: String,
    pub name: String,
    /// The declared namespace; `None` when absent or `""` (the render step defaults it for
    /// namespaced kinds).
    pub namespace: Option<String>,
    /// The SOPS-encrypted source file this object was read from, kept as committed (still
    /// encrypted), so that its MAC is verified once the set's keys are known.
    pub sops_file: Option<std::sync::Arc<SopsFile>>,
    /// The values decryption put in this object, withheld from messages about it.
    pub redaction: Option<std::sync::Arc<crate::sops::redact::Redaction>>,
}

/// A source file that carries SOPS metadata: its name in messages and its text.
#[derive(Debug, PartialEq, Eq)]
pub struct SopsFile {
    /// Where it comes from (`configMap ns/name key secret.yaml`).
    pub name: String,
    /// Its path or key (its format follows the extension, as SOPS picks it).
    pub path: String,
    pub text: String,
}

impl Manifest {
    /// Validates one value, flattening `List` kinds (recursively) into their member objects.
    ///
    /// `null` yields nothing. A `List` is `kind: List` (any apiVersion), or a `*List` kind with
    /// apiVersion `v1` and an `items` sequence (what `kubectl get -o yaml` prints); its members
    /// get the origin `...items[i]`.
    pub fn from_value(value: Value, origin: Origin) -> Result<Vec<Manifest>, ManifestError> {
        let mut out = Vec::new();
        flatten(value, origin, 0, &mut out)?;
        Ok(out)
    }

    /// The identity of the object with its declared namespace.
    pub fn key(&self) -> MemberKey {
        MemberKey {
            group: self.group.clone(),
            kind: self.kind.clone(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }

    fn validate(object: Map<String, Value>, origin: Origin) -> Result<Manifest, ManifestError> {
        let describe = describe(&object);
        let fields = match Fields::of(&object) {
            Ok(fields) => fields,
            Err(problem) => return Err(problem.into_error(origin, describe)),
        };
        Ok(Manifest {
            origin,
            object,
            api_version: fields.api_version,
            kind: fields.kind,
            group: fields.group,
            version: fields.version,
            name: fields.name,
            namespace: fields.namespace,
            sops_file: None,
            redaction: None,
        })
    }
}

/// What makes an object invalid, before the error names the object and where it comes from.
enum Problem {
    ApiVersion(String),
    Kind(String),
    Name(String),
    Namespace(String),
    Metadata { problem: String, fix: String },
    GenerateName,
    PartOfLabel,
}

impl Problem {
    /// The error of this problem in the object described as `object`, at `origin`.
    fn into_error(self, origin: Origin, object: String) -> ManifestError {
        match self {
            Problem::ApiVersion(problem) => api_version_error(origin, object, problem),
            Problem::Kind(problem) => kind_error(origin, object, problem),
            Problem::Name(problem) => name_error(origin, object, problem),
            Problem::Namespace(problem) => namespace_error(origin, object, problem),
            Problem::Metadata { problem, fix } => ManifestError::Metadata {
                origin: Box::new(origin),
                object,
                problem,
                fix,
            },
            Problem::GenerateName => ManifestError::GenerateName {
                origin: Box::new(origin),
                object,
            },
            Problem::PartOfLabel => ManifestError::PartOfLabel {
                origin: Box::new(origin),
                object,
            },
        }
    }
}

/// The identifying fields of a valid object.
struct Fields {
    api_version: String,
    group: String,
    version: String,
    kind: String,
    name: String,
    namespace: Option<String>,
}

impl Fields {
    /// Checks `object`, in this order: apiVersion, kind, metadata, metadata.name,
    /// metadata.namespace, then labels and annotations (the first problem found is reported).
    fn of(object: &Map<String, Value>) -> Result<Fields, Problem> {
        let (api_version, group, version) = read_api_version(object)?;
        let kind = read_kind(object)?;
        let metadata = read_metadata(object)?;
        let name = read_name(metadata)?;
        let namespace = read_namespace(metadata)?;
        check_labels_and_annotations(metadata)?;
        Ok(Fields {
            api_version,
            group,
            version,
            kind,
            name,
            namespace,
        })
    }
}

/// `apiVersion` (a string), with its group and version.
fn read_api_version(object: &Map<String, Value>) -> Result<(String, String, String), Problem> {
    let api_version = match object.get("apiVersion") {
        None | Some(Value::Null) => {
            return Err(Problem::ApiVersion("apiVersion is missing".to_string()));
        }
        Some(Value::String(s)) => s.clone(),
        Some(other) => {
            let problem = format!("apiVersion must be a string but is {}", type_name(other));
            return Err(Problem::ApiVersion(problem));
        }
    };
    let (group, version) = parse_api_version(&api_version).map_err(Problem::ApiVersion)?;
    Ok((api_version, group, version))
}

/// `kind`: a string that [`check_kind`] accepts.
fn read_kind(object: &Map<String, Value>) -> Result<String, Problem> {
    let kind = match object.get("kind") {
        None | Some(Value::Null) => {
            return Err(Problem::Kind("kind is missing".to_string()));
        }
        Some(Value::String(s)) => s.clone(),
        Some(other) => {
            let problem = format!("kind must be a string but is {}", type_name(other));
            return Err(Problem::Kind(problem));
        }
    };
    check_kind(&kind).map_err(Problem::Kind)?;
    Ok(kind)
}

/// `metadata`: a mapping (when it is missing, so is `metadata.name`).
fn read_metadata(object: &Map<String, Value>) -> Result<&Map<String, Value>, Problem> {
    match object.get("metadata") {
        None | Some(Value::Null) => Err(Problem::Name("metadata.name is missing".to_string())),
        Some(Value::Object(metadata)) => Ok(metadata),
        Some(other) => Err(Problem::Metadata {
            problem: format!("metadata must be a mapping but is {}", type_name(other)),
            fix: "write metadata as a mapping with at least name".to_string(),
        }),
    }
}

/// `metadata.name`: a string that [`check_name`] accepts; `generateName` instead of a name
/// is refused as such.
fn read_name(metadata: &Map<String, Value>) -> Result<String, Problem> {
    let has_generate_name = metadata
        .get("generateName")
        .is_some_and(|v| !v.is_null() && v.as_str() != Some(""));
    let name = match metadata.get("name") {
        None | Some(Value::Null) if has_generate_name => {
            return Err(Problem::GenerateName);
        }
        Some(Value::String(s)) if s.is_empty() && has_generate_name => {
            return Err(Problem::GenerateName);
        }
        None | Some(Value::Null) => {
            return Err(Problem::Name("metadata.name is missing".to_string()));
        }
        Some(Value::String(s)) => s.clone(),
        Some(other) => {
            let problem = format!(
                "metadata.name must be a string but is {} (quote it)",
                type_name(other)
            );
            return Err(Problem::Name(problem));
        }
    };
    check_name(&name).map_err(Problem::Name)?;
    Ok(name)
}

/// `metadata.namespace`: `None` when absent, null or `""`, else a string that
/// [`check_namespace`] accepts.
fn read_namespace(metadata: &Map<String, Value>) -> Result<Option<String>, Problem> {
    match metadata.get("namespace") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) => {
            check_namespace(s).map_err(Problem::Namespace)?;
            Ok(Some(s.clone()))
        }
        Some(other) => {
            let problem = format!(
                "metadata.namespace must be a string but is {} (quote it)",
                type_name(other)
            );
            Err(Problem::Namespace(problem))
        }
    }
}

/// `metadata.labels` and `metadata.annotations` must be mappings of strings, and the labels
/// must not set the ApplySet part-of label (the operator sets it).
fn check_labels_and_annotations(metadata: &Map<String, Value>) -> Result<(), Problem> {
    for field in ["labels", "annotations"] {
        if let Err(problem) = check_string_map(metadata.get(field), field) {
            return Err(Problem::Metadata {
                problem,
                fix: format!(
                    "write metadata.{field} as a mapping of strings and quote values that \
                     YAML would read as another type, e.g. \"true\", \"1.0\" or \"0755\""
                ),
            });
        }
    }
    let has_part_of = metadata
        .get("labels")
        .and_then(Value::as_object)
        .is_some_and(|labels| labels.get(LABEL_PART_OF).is_some_and(|v| !v.is_null()));
    if has_part_of {
        return Err(Problem::PartOfLabel);
    }
    Ok(())
}

fn flatten(
    value: Value,
    origin: Origin,
    depth: usize,
    out: &mut Vec<Manifest>,
) -> Result<(), ManifestError> {
    let mut object = match value {
        Value::Null => return Ok(()),
        Value::Object(object) => object,
        other => {
            return Err(ManifestError::NotAnObject {
                origin: Box::new(origin),
                found: type_name(&other),
            });
        }
    };
    let Some(kind) = list_kind(&object) else {
        out.push(Manifest::validate(object, origin)?);
        return Ok(());
    };
    if depth >= MAX_LIST_DEPTH {
        return Err(ManifestError::ListTooDeep {
            origin: Box::new(origin),
        });
    }
    match object.remove("items") {
        None | Some(Value::Null) => Ok(()),
        Some(Value::Array(items)) => {
            for (index, item) in items.into_iter().enumerate() {
                flatten(item, origin.clone().with_item(index), depth + 1, out)?;
            }
            Ok(())
        }
        Some(other) => Err(ManifestError::ListItems {
            origin: Box::new(origin),
            kind,
            found: type_name(&other),
        }),
    }
}

/// The kind when the object is a list to flatten.
fn list_kind(object: &Map<String, Value>) -> Option<String> {
    let kind = object.get("kind")?.as_str()?;
    if kind == "List" {
        return Some(kind.to_string());
    }
    let typed_list = kind.len() > "List".len()
        && kind.ends_with("List")
        && object.get("apiVersion").and_then(Value::as_str) == Some("v1")
        && object.get("items").is_some_and(Value::is_array);
    typed_list.then(|| kind.to_string())
}

/// `Deployment/web`, `Deployment`, or `object` — whatever is known, for messages.
fn describe(object: &Map<String, Value>) -> String {
    let kind = object
        .get("kind")
        .and_then(Value::as_str)
        .filter(|k| !k.is_empty());
    let name = object
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty());
    match (kind, name) {
        (Some(kind), Some(name)) => format!("{kind}/{name}"),
        (Some(kind), None) => kind.to_string(),
        (None, Some(name)) => format!("object {name}"),
        (None, None) => "object".to_string(),
    }
}

fn api_version_error(origin: Origin, object: String, problem: impl Into<String>) -> ManifestError {
    ManifestError::ApiVersion {
        origin: Box::new(origin),
        object,
        problem: problem.into(),
    }
}

fn kind_error(origin: Origin, object: String, problem: impl Into<String>) -> ManifestError {
    ManifestError::Kind {
        origin: Box::new(origin),
        object,
        problem: problem.into(),
    }
}

fn name_error(origin: Origin, object: String, problem: impl Into<String>) -> ManifestError {
    ManifestError::Name {
        origin: Box::new(origin),
        object,
        problem: problem.into(),
    }
}

fn namespace_error(origin: Origin, object: String, problem: impl Into<String>) -> ManifestError {
    ManifestError::Namespace {
        origin: Box::new(origin),
        object,
        problem: problem.into(),
    }
}

/// `v1` -> (`""`, `v1`), `apps/v1` -> (`apps`, `v1`).
fn parse_api_version(api_version: &str) -> Result<(String, String), String> {
    if api_version.is_empty() {
        return Err("apiVersion is empty".to_string());
    }
    if api_version.chars().any(char::is_whitespace) {
        return Err(format!("apiVersion {api_version:?} contains whitespace"));
    }
    let mut parts = api_version.split('/');
    let (group, version) = match (parts.next(), parts.next(), parts.next()) {
        (Some(version), None, _) => ("", version),
        (Some(group), Some(version), None) => (group, version),
        _ => {
            return Err(format!("apiVersion {api_version:?} has more than one '/'"));
        }
    };
    if group.is_empty() && api_version.contains('/') {
        return Err(format!("apiVersion {api_version:?} has an empty group"));
    }
    if version.is_empty() {
        return Err(format!("apiVersion {api_version:?} has an empty version"));
    }
    Ok((group.to_string(), version.to_string()))
}

fn check_kind(kind: &str) -> Result<(), String> {
    if kind.is_empty() {
        return Err("kind is empty".to_string());
    }
    if kind
        .chars()
        .any(|c| c.is_whitespace() || c == '/' || c == '.')
    {
        return Err(format!(
            "kind {kind:?} is not a type name (it contains whitespace, '/' or '.')"
        ));
    }
    Ok(())
}

/// The checks the API server applies to every object name (path segment rules), plus length.
fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("metadata.name is empty".to_string());
    }
    if name.len() > MAX_NAME_LEN {
        return Err(format!(
            "metadata.name is {} characters long (more than {MAX_NAME_LEN})",
            name.len()
        ));
    }
    if name == "." || name == ".." {
        return Err(format!("metadata.name {name:?} is not allowed"));
    }
    if name.contains('/') || name.contains('%') {
        return Err(format!("metadata.name {name:?} contains '/' or '%'"));
    }
    Ok(())
}

/// Namespaces are DNS-1123 labels.
fn check_namespace(namespace: &str) -> Result<(), String> {
    let valid_chars = namespace
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    let valid_ends = !namespace.starts_with('-') && !namespace.ends_with('-');
    if namespace.len() > MAX_NAMESPACE_LEN || !valid_chars || !valid_ends {
        return Err(format!(
            "metadata.namespace {namespace:?} is not a valid namespace name"
        ));
    }
    Ok(())
}

/// Labels and annotations: absent, null, or a mapping whose values are strings (or null,
/// which [`normalize`] drops).
fn check_string_map(value: Option<&Value>, field: &str) -> Result<(), String> {
    match value {
        None | Some(Value::Null) => Ok(()),
        Some(Value::Object(map)) => {
            for (key, value) in map {
                if !(value.is_string() || value.is_null()) {
                    return Err(format!(
                        "metadata.{field}.{key} must be a string but is {}",
                        type_name(value)
                    ));
                }
            }
            Ok(())
        }
        Some(other) => Err(format!(
            "metadata.{field} must be a mapping but is {}",
            type_name(other)
        )),
    }
}

// ---------------------------------------------------------------------------------------------
// Parsing text
// ---------------------------------------------------------------------------------------------

/// What a text or value costs: nodes (every mapping, list and scalar, keys included) and
/// bytes of text (for an inline manifest or a parsed value: of its compact JSON).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct YamlCost {
    pub nodes: usize,
    pub bytes: usize,
}

/// Default of `--max-yaml-nodes-per-set`: about 100 nodes for each of 10,000 members.
pub const DEFAULT_SET_YAML_NODES: usize = 1_000_000;
/// Default of `--max-yaml-mib-per-set` (64 MiB), in bytes.
pub const DEFAULT_SET_YAML_BYTES: usize = 64 << 20;

/// The parsed YAML/JSON one set may hold, summed over its inline manifests and every file of
/// every source (flags `--max-yaml-nodes-per-set` and `--max-yaml-mib-per-set`), and what
/// was taken from it so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct YamlBudget {
    pub limit: YamlCost,
    pub used: YamlCost,
}

impl Default for YamlBudget {
    fn default() -> Self {
        YamlBudget::new(YamlCost {
            nodes: DEFAULT_SET_YAML_NODES,
            bytes: DEFAULT_SET_YAML_BYTES,
        })
    }
}

impl YamlBudget {
    /// A budget of `limit`, nothing used.
    pub fn new(limit: YamlCost) -> Self {
        YamlBudget {
            limit,
            used: YamlCost::default(),
        }
    }

    /// What is left.
    pub fn left(&self) -> YamlCost {
        YamlCost {
            nodes: self.limit.nodes.saturating_sub(self.used.nodes),
            bytes: self.limit.bytes.saturating_sub(self.used.bytes),
        }
    }

    /// Takes `cost` from the budget; `Err(what ran out)`, the budget unchanged, when it does
    /// not fit.
    pub fn charge(&mut self, cost: YamlCost) -> Result<(), BudgetExceeded> {
        let left = self.left();
        if cost.bytes > left.bytes {
            return Err(BudgetExceeded::Bytes);
        }
        if cost.nodes > left.nodes {
            return Err(BudgetExceeded::Nodes);
        }
        self.used.bytes += cost.bytes;
        self.used.nodes += cost.nodes;
        Ok(())
    }

    /// Why `exceeded` stops a set, naming the flag and its value.
    pub fn describe(&self, exceeded: BudgetExceeded) -> String {
        match exceeded {
            BudgetExceeded::Nodes => format!(
                "the set's manifests hold more than {} YAML/JSON nodes (the operator's --max-yaml-nodes-per-set); split the set or raise the flag",
                self.limit.nodes
            ),
            BudgetExceeded::Bytes => format!(
                "the set's manifests hold more than {} bytes ({} MiB) of YAML/JSON (the operator's --max-yaml-mib-per-set); split the set or raise the flag",
                self.limit.bytes,
                self.limit.bytes >> 20
            ),
        }
    }
}

/// The budget every parse starts from (one text, or all the files of one source): the
/// per-set bound the operator was started with ([`set_parse_limit`]), so that a source that
/// could never fit its set fails while it is parsed, before it fills memory.
static PARSE_LIMIT_NODES: AtomicUsize = AtomicUsize::new(DEFAULT_SET_YAML_NODES);
static PARSE_LIMIT_BYTES: AtomicUsize = AtomicUsize::new(DEFAULT_SET_YAML_BYTES);

/// Sets the budget of every parse (the operator's per-set flags; called once at start-up).
pub fn set_parse_limit(limit: YamlCost) {
    PARSE_LIMIT_NODES.store(limit.nodes, Ordering::Relaxed);
    PARSE_LIMIT_BYTES.store(limit.bytes, Ordering::Relaxed);
}

impl YamlBudget {
    /// A fresh budget for parsing one text or all the files of one source.
    pub fn for_parsing() -> Self {
        YamlBudget::new(YamlCost {
            nodes: PARSE_LIMIT_NODES.load(Ordering::Relaxed),
            bytes: PARSE_LIMIT_BYTES.load(Ordering::Relaxed),
        })
    }
}

/// Which bound of a [`YamlBudget`] ran out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BudgetExceeded {
    Nodes,
    Bytes,
}

/// The cost of a parsed value: its nodes (keys included) and the bytes of its compact JSON.
/// Iterative, so that any depth is measured without recursion.
pub fn value_cost(value: &Value) -> YamlCost {
    let mut cost = YamlCost::default();
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        cost.nodes += 1;
        match v {
            Value::Null => cost.bytes += 4,
            Value::Bool(b) => cost.bytes += if *b { 4 } else { 5 },
            Value::Number(n) => cost.bytes += n.to_string().len(),
            Value::String(s) => cost.bytes += s.len() + 2,
            Value::Array(items) => {
                cost.bytes += 1 + items.len().max(1);
                stack.extend(items.iter());
            }
            Value::Object(map) => {
                cost.bytes += 1 + map.len().max(1);
                for (key, item) in map {
                    cost.nodes += 1;
                    cost.bytes += key.len() + 3;
                    stack.push(item);
                }
            }
        }
    }
    cost
}

/// The cost of an object (see [`value_cost`]), without copying it into a value.
pub fn object_cost(object: &Map<String, Value>) -> YamlCost {
    let mut cost = YamlCost {
        nodes: 1,
        bytes: 1 + object.len().max(1),
    };
    for (key, item) in object {
        let item = value_cost(item);
        cost.nodes += 1 + item.nodes;
        cost.bytes += key.len() + 3 + item.bytes;
    }
    cost
}

/// Parses multi-document YAML (JSON is YAML) and validates every object, within a fresh
/// parse budget ([`YamlBudget::for_parsing`]; see [`parse_documents_within`]).
pub fn parse_documents(text: &str, origin: &Origin) -> Result<Vec<Manifest>, ManifestError> {
    parse_documents_within(text, origin, &mut YamlBudget::for_parsing())
}

/// Parses multi-document YAML (JSON is YAML) and validates every object, taking what the
/// text costs from `budget` (shared by the texts of one set or source).
///
/// The budget is enforced while parsing: a text longer than the bytes left is refused before
/// it is read, and the parser stops at the nodes left, so a huge input fails before it fills
/// memory. Nesting deeper than [`MAX_MANIFEST_DEPTH`] is refused too.
///
/// Empty documents (`---` with nothing, comments only, `null`) are skipped. Each object's
/// origin gets the document number (counting non-empty documents) and the line where the
/// document starts. Syntax errors name the origin and the line/column the parser reports.
///
/// Scalars are read the way kubectl's YAML reader (go-yaml v2, YAML 1.1) reads them: `yes`/`on`
/// are booleans and `0644` is octal (420), so e.g. `defaultMode: 0644` means what users
/// expect. Duplicate mapping keys are an error.
pub fn parse_documents_within(
    text: &str,
    origin: &Origin,
    budget: &mut YamlBudget,
) -> Result<Vec<Manifest>, ManifestError> {
    let full = *budget;
    let exceeded = |what: BudgetExceeded| ManifestError::Budget {
        origin: Box::new(origin.clone()),
        problem: full.describe(what),
    };
    let left = budget.left();
    if text.len() > left.bytes {
        return Err(exceeded(BudgetExceeded::Bytes));
    }
    let mut options = serde_saphyr::Options::default();
    options.with_snippet = false;
    options.legacy_octal_numbers = true;
    let mut limits = serde_saphyr::Budget::default();
    limits.max_depth = MAX_MANIFEST_DEPTH;
    // The parser's node count differs a little from ours (it counts events); it stops a
    // runaway parse, and the charge below is exact.
    limits.max_nodes = left.nodes.saturating_add(16);
    limits.max_total_scalar_bytes = left.bytes;
    limits.max_reader_input_bytes = Some(left.bytes);
    // Documents and parser events are bounded by the nodes (a document is at least one node,
    // a node at most a few events), not by the parser's own defaults (1,024 documents,
    // 1,000,000 events), which a large bundle within the budget would exceed.
    limits.max_documents = left.nodes.saturating_add(1);
    limits.max_events = left.nodes.saturating_mul(4).saturating_add(64);
    options.budget = Some(limits);
    let documents = serde_saphyr::from_str_multiple_with_options::<
        serde_saphyr::Spanned<Value>,
        Vec<_>,
    >(text, options)
    .map_err(|error| match budget_breach(&error) {
        Some(serde_saphyr::budget::BudgetBreach::Nodes { .. }) => exceeded(BudgetExceeded::Nodes),
        Some(serde_saphyr::budget::BudgetBreach::ScalarBytes { .. }) => {
            exceeded(BudgetExceeded::Bytes)
        }
        Some(serde_saphyr::budget::BudgetBreach::Depth { .. }) => too_deep(origin),
        // The scanner's own bound on flow collections (`[[[…`, 255 levels) says so in a
        // message of its own.
        _ if error.to_string().contains("recursion limit exceeded") => too_deep(origin),
        // Another of the parser's bounds (aliases, anchors, merge keys, …).
        Some(breach) => ManifestError::Budget {
            origin: Box::new(origin.clone()),
            problem: format!(
                "the YAML parser's bound was reached ({breach:?}); simplify the text (fewer anchors, aliases or merge keys)"
            ),
        },
        None => yaml_error(&error, origin),
    })?;

    let nodes: usize = documents.iter().map(|d| value_cost(&d.value).nodes).sum();
    budget
        .charge(YamlCost {
            nodes,
            bytes: text.len(),
        })
        .map_err(exceeded)?;
    let mut out = Vec::new();
    for (index, document) in documents.into_iter().enumerate() {
        let mut document_origin = origin.clone().with_document(index + 1);
        let line = document.referenced.line();
        if line > 0 {
            document_origin = document_origin.with_line(line);
        }
        out.extend(Manifest::from_value(document.value, document_origin)?);
    }
    Ok(out)
}

/// The error of a text nested more than [`MAX_MANIFEST_DEPTH`] levels deep.
fn too_deep(origin: &Origin) -> ManifestError {
    ManifestError::Budget {
        origin: Box::new(origin.clone()),
        problem: format!("nested more than {MAX_MANIFEST_DEPTH} levels deep; flatten the manifest"),
    }
}

/// The budget breach behind a parser error, if that is what stopped it.
fn budget_breach(error: &serde_saphyr::Error) -> Option<serde_saphyr::budget::BudgetBreach> {
    let mut error = error;
    loop {
        match error {
            serde_saphyr::Error::Budget { breach, .. } => return Some(breach.clone()),
            serde_saphyr::Error::WithSnippet { error: inner, .. }
            | serde_saphyr::Error::AliasError { error: inner, .. } => error = inner,
            _ => return None,
        }
    }
}

fn yaml_error(error: &serde_saphyr::Error, origin: &Origin) -> ManifestError {
    let location = error.location().filter(|l| l.line() > 0);
    let mut message = error.without_snippet().to_string();
    if let Some(location) = location {
        // The parser appends the position; the error shows it once, after the origin.
        let suffix = format!(" at line {}, column {}", location.line(), location.column());
        if let Some(stripped) = message.strip_suffix(&suffix) {
            message = stripped.to_string();
        }
    }
    ManifestError::Yaml {
        origin: Box::new(origin.clone()),
        line: location.map(|l| l.line()),
        column: location.map(|l| l.column()),
        message,
    }
}

// ---------------------------------------------------------------------------------------------
// Normalization and digest
// ---------------------------------------------------------------------------------------------

/// Metadata fields the server owns. Sending them in a server-side apply body is wrong:
/// `managedFields` in an apply request replaces the object's field ownership (or is rejected),
/// `resourceVersion` turns the apply into an optimistic-concurrency update that fails with a
/// conflict as soon as the live object changes, `uid` is a precondition that fails when the
/// object is re-created, and the others are read-only fields that only make a manifest copied
/// from `kubectl get -o yaml` fail or churn.
const SERVER_OWNED_METADATA: [&str; 7] = [
    "managedFields",
    "resourceVersion",
    "uid",
    "creationTimestamp",
    "generation",
    "selfLink",
    "deletionTimestamp",
];

/// Removes what must never be sent in a server-side apply body (see `SERVER_OWNED_METADATA`),
/// plus top-level `status` (server-owned for almost every kind: an apply of the main resource
/// ignores it, and declaring it would make the desired set look changed whenever a copied
/// status differs), and `null` labels/annotations (a `null` map or value in an apply body
/// means "remove", which a declaration never intends and which the API server may reject).
pub fn normalize(object: &mut Map<String, Value>) {
    object.remove("status");
    let Some(Value::Object(metadata)) = object.get_mut("metadata") else {
        return;
    };
    for field in SERVER_OWNED_METADATA {
        metadata.remove(field);
    }
    for field in ["labels", "annotations"] {
        match metadata.get_mut(field) {
            Some(Value::Null) => {
                metadata.remove(field);
            }
            Some(Value::Object(map)) => map.retain(|_, value| !value.is_null()),
            _ => {}
        }
    }
}

/// A stable digest of a rendered desired set (its objects after namespaces were resolved):
/// `sha256:<64 hex digits>`.
///
/// Independent of the order of the objects (sorted by content) and of the order of keys in
/// them (canonical JSON with byte-wise sorted keys). Origins do not contribute: moving an
/// object to another file does not change the revision. Pass normalized objects so that
/// server-owned fields do not affect it.
pub fn digest<'a>(objects: impl IntoIterator<Item = &'a serde_json::Map<String, Value>>) -> String {
    let mut entries: Vec<String> = objects
        .into_iter()
        .map(|object| {
            let mut canonical = String::new();
            write_canonical(&Value::Object(object.clone()), &mut canonical);
            canonical
        })
        .collect();
    entries.sort();
    let mut hasher = Sha256::new();
    for canonical in &entries {
        // Canonical JSON never contains a raw newline, so newline-terminated entries are
        // unambiguous.
        hasher.update(canonical.as_bytes());
        hasher.update(b"\n");
    }
    let hash = hasher.finalize();
    let mut out = String::with_capacity("sha256:".len() + 64);
    out.push_str("sha256:");
    push_hex(&mut out, hash.as_slice());
    out
}

const HEX: &[u8; 16] = b"0123456789abcdef";

fn push_hex(out: &mut String, bytes: &[u8]) {
    for byte in bytes {
        out.push(char::from(HEX[usize::from(byte >> 4)]));
        out.push(char::from(HEX[usize::from(byte & 0x0f)]));
    }
}

/// Compact JSON with object keys sorted byte-wise, regardless of serde_json's map order.
fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(number) => out.push_str(&number.to_string()),
        Value::String(s) => write_json_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_json_string(key, out);
                out.push(':');
                if let Some(value) = map.get(key) {
                    write_canonical(value, out);
                }
            }
            out.push('}');
        }
    }
}

fn write_json_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => {
                out.push_str("\\u00");
                // c < 0x20, so it fits one byte.
                push_hex(out, &[u8::try_from(u32::from(c)).unwrap_or(0)]);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cm_origin() -> Origin {
        Origin::key("configMap default/app", "deploy.yaml")
    }

    fn obj(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            other => panic!("not an object: {other}"),
        }
    }

    fn inline_err(value: Value) -> ManifestError {
        Manifest::from_value(value, Origin::inline(3)).expect_err("should fail")
    }

    fn assert_msg(err: &ManifestError, parts: &[&str]) {
        let msg = err.to_string();
        for part in parts {
            assert!(msg.contains(part), "message {msg:?} lacks {part:?}");
        }
    }

    fn manifest(value: Value) -> Manifest {
        let mut all = Manifest::from_value(value, Origin::inline(0)).expect("valid");
        assert_eq!(all.len(), 1);
        all.remove(0)
    }

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

    // ----- from_value -----

    #[test]
    fn from_value_core_object() {
        let m = manifest(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cfg", "namespace": "team-a"},
            "data": {"a": "b"}
        }));
        assert_eq!(m.api_version, "v1");
        assert_eq!(m.group, "");
        assert_eq!(m.version, "v1");
        assert_eq!(m.kind, "ConfigMap");
        assert_eq!(m.name, "cfg");
        assert_eq!(m.namespace.as_deref(), Some("team-a"));
        assert_eq!(m.origin, Origin::inline(0));
        assert_eq!(m.object.get("data"), Some(&json!({"a": "b"})));
    }

    #[test]
    fn from_value_grouped_object() {
        let m = manifest(json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}
        }));
        assert_eq!(m.group, "apps");
        assert_eq!(m.version, "v1");
        assert_eq!(m.namespace, None);
        assert_eq!(
            m.key(),
            MemberKey {
                group: "apps".into(),
                kind: "Deployment".into(),
                namespace: None,
                name: "web".into()
            }
        );
    }

    #[test]
    fn from_value_empty_namespace_is_none() {
        let m = manifest(json!({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": ""}
        }));
        assert_eq!(m.namespace, None);
        let m = manifest(json!({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": null}
        }));
        assert_eq!(m.namespace, None);
    }

    #[test]
    fn from_value_null_is_skipped() {
        assert!(
            Manifest::from_value(Value::Null, Origin::inline(0))
                .expect("ok")
                .is_empty()
        );
    }

    #[test]
    fn from_value_allows_name_with_colon_and_generate_name_alongside_name() {
        let m = manifest(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "system:thing", "generateName": "x-"}
        }));
        assert_eq!(m.name, "system:thing");
    }

    #[test]
    fn list_flattening() {
        let list = json!({
            "apiVersion": "v1", "kind": "List",
            "items": [
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}},
                null,
                {"apiVersion": "v1", "kind": "List", "items": [
                    {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "b"}},
                    {"apiVersion": "v1", "kind": "ConfigMapList", "items": [
                        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
                    ]}
                ]}
            ]
        });
        let all = Manifest::from_value(list, Origin::inline(3)).expect("valid");
        let names: Vec<_> = all.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "c"]);
        let origins: Vec<_> = all.iter().map(|m| m.origin.to_string()).collect();
        assert_eq!(
            origins,
            [
                "spec.manifests[3].items[0]",
                "spec.manifests[3].items[2].items[0]",
                "spec.manifests[3].items[2].items[1].items[0]",
            ]
        );
    }

    #[test]
    fn list_without_items_is_empty() {
        for list in [
            json!({"apiVersion": "v1", "kind": "List"}),
            json!({"apiVersion": "v1", "kind": "List", "items": null}),
            json!({"apiVersion": "v1", "kind": "List", "items": []}),
        ] {
            assert!(
                Manifest::from_value(list, Origin::inline(0))
                    .expect("ok")
                    .is_empty()
            );
        }
    }

    #[test]
    fn typed_list_needs_v1_and_items() {
        // A non-core kind ending in List is an ordinary object.
        let m = manifest(json!({
            "apiVersion": "example.com/v1", "kind": "PlayList", "metadata": {"name": "x"},
            "items": []
        }));
        assert_eq!(m.kind, "PlayList");
    }

    #[test]
    fn list_items_error() {
        let err = inline_err(json!({"apiVersion": "v1", "kind": "List", "items": "nope"}));
        assert!(matches!(err, ManifestError::ListItems { .. }));
        assert_msg(
            &err,
            &[
                "spec.manifests[3]",
                "List",
                "a string",
                "items must be a list",
            ],
        );
    }

    #[test]
    fn list_item_errors_name_item_origin() {
        let err = inline_err(json!({"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ok"}},
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}}
        ]}));
        assert_msg(
            &err,
            &[
                "spec.manifests[3].items[1]: ConfigMap:",
                "metadata.name is missing",
            ],
        );
    }

    #[test]
    fn list_too_deep() {
        let mut value = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}});
        for _ in 0..(MAX_LIST_DEPTH + 1) {
            value = json!({"apiVersion": "v1", "kind": "List", "items": [value]});
        }
        let err = inline_err(value);
        assert!(matches!(err, ManifestError::ListTooDeep { .. }));
        assert_msg(&err, &["spec.manifests[3]", "flatten"]);
    }

    // ----- validation errors -----

    #[test]
    fn error_not_an_object() {
        for (value, found) in [
            (json!("text"), "a string"),
            (json!([1]), "a list"),
            (json!(5), "a number"),
            (json!(true), "a boolean"),
        ] {
            let err = inline_err(value);
            assert!(matches!(err, ManifestError::NotAnObject { .. }));
            assert_msg(
                &err,
                &[
                    "spec.manifests[3]",
                    found,
                    "expected a Kubernetes object",
                    "make each document",
                ],
            );
        }
    }

    #[test]
    fn error_api_version() {
        let cases = [
            (
                json!({"kind": "ConfigMap", "metadata": {"name": "a"}}),
                "apiVersion is missing",
            ),
            (
                json!({"apiVersion": 1, "kind": "ConfigMap", "metadata": {"name": "a"}}),
                "must be a string but is a number",
            ),
            (
                json!({"apiVersion": "", "kind": "ConfigMap", "metadata": {"name": "a"}}),
                "apiVersion is empty",
            ),
            (
                json!({"apiVersion": "a/b/v1", "kind": "ConfigMap", "metadata": {"name": "a"}}),
                "more than one '/'",
            ),
            (
                json!({"apiVersion": "/v1", "kind": "ConfigMap", "metadata": {"name": "a"}}),
                "empty group",
            ),
            (
                json!({"apiVersion": "apps/", "kind": "ConfigMap", "metadata": {"name": "a"}}),
                "empty version",
            ),
            (
                json!({"apiVersion": "apps /v1", "kind": "ConfigMap", "metadata": {"name": "a"}}),
                "whitespace",
            ),
        ];
        for (value, problem) in cases {
            let err = inline_err(value);
            assert!(matches!(err, ManifestError::ApiVersion { .. }), "{err}");
            assert_msg(
                &err,
                &[
                    "spec.manifests[3]: ConfigMap/a:",
                    problem,
                    "set apiVersion to",
                    "\"apps/v1\"",
                ],
            );
        }
    }

    #[test]
    fn error_kind() {
        let cases = [
            (
                json!({"apiVersion": "v1", "metadata": {"name": "a"}}),
                "object a:",
                "kind is missing",
            ),
            (
                json!({"apiVersion": "v1", "kind": 3, "metadata": {"name": "a"}}),
                "object a:",
                "kind must be a string but is a number",
            ),
            (
                json!({"apiVersion": "v1", "kind": "", "metadata": {"name": "a"}}),
                "object a:",
                "kind is empty",
            ),
            (
                json!({"apiVersion": "v1", "kind": "Config Map", "metadata": {"name": "a"}}),
                "Config Map/a:",
                "is not a type name",
            ),
            (
                json!({"apiVersion": "v1", "kind": "Deployment.apps", "metadata": {"name": "a"}}),
                "Deployment.apps/a:",
                "is not a type name",
            ),
        ];
        for (value, object, problem) in cases {
            let err = inline_err(value);
            assert!(matches!(err, ManifestError::Kind { .. }), "{err}");
            assert_msg(
                &err,
                &[
                    "spec.manifests[3]",
                    object,
                    problem,
                    "set kind to the object's type",
                ],
            );
        }
    }

    #[test]
    fn error_name() {
        let long = "a".repeat(254);
        let cases = [
            (
                json!({"apiVersion": "v1", "kind": "ConfigMap"}),
                "metadata.name is missing",
            ),
            (
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": null}),
                "metadata.name is missing",
            ),
            (
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"labels": {}}}),
                "metadata.name is missing",
            ),
            (
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": null}}),
                "metadata.name is missing",
            ),
            (
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": ""}}),
                "metadata.name is empty",
            ),
            (
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": 12}}),
                "must be a string but is a number (quote it)",
            ),
            (
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": long}}),
                "254 characters long",
            ),
            (
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a/b"}}),
                "contains '/' or '%'",
            ),
            (
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a%b"}}),
                "contains '/' or '%'",
            ),
            (
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "."}}),
                "\".\" is not allowed",
            ),
            (
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": ".."}}),
                "\"..\" is not allowed",
            ),
        ];
        for (value, problem) in cases {
            let err = inline_err(value);
            assert!(matches!(err, ManifestError::Name { .. }), "{err}");
            assert_msg(
                &err,
                &[
                    "spec.manifests[3]: ConfigMap",
                    problem,
                    "set metadata.name to",
                ],
            );
        }
        // The longest valid name passes.
        let ok = "a".repeat(253);
        let m =
            manifest(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": ok}}));
        assert_eq!(m.name.len(), 253);
    }

    #[test]
    fn error_generate_name() {
        for metadata in [
            json!({"generateName": "web-"}),
            json!({"generateName": "web-", "name": ""}),
            json!({"generateName": "web-", "name": null}),
        ] {
            let err =
                inline_err(json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata}));
            assert!(matches!(err, ManifestError::GenerateName { .. }), "{err}");
            assert_msg(
                &err,
                &[
                    "spec.manifests[3]: Job:",
                    "generateName is not supported; set metadata.name",
                ],
            );
        }
    }

    #[test]
    fn error_namespace() {
        let cases = [
            (
                json!(5),
                "metadata.namespace must be a string but is a number",
            ),
            (
                json!({"a": "b"}),
                "metadata.namespace must be a string but is a mapping",
            ),
            (json!("Team_A"), "\"Team_A\" is not a valid namespace name"),
            (json!("-a"), "\"-a\" is not a valid namespace name"),
            (json!("a".repeat(64)), "is not a valid namespace name"),
        ];
        for (namespace, problem) in cases {
            let err = inline_err(json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "cfg", "namespace": namespace}
            }));
            assert!(matches!(err, ManifestError::Namespace { .. }), "{err}");
            assert_msg(
                &err,
                &[
                    "spec.manifests[3]: ConfigMap/cfg:",
                    problem,
                    "set metadata.namespace to",
                ],
            );
        }
    }

    #[test]
    fn error_metadata_not_a_mapping() {
        let err = inline_err(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": "x"}));
        assert!(matches!(err, ManifestError::Metadata { .. }), "{err}");
        assert_msg(
            &err,
            &[
                "spec.manifests[3]: ConfigMap:",
                "metadata must be a mapping but is a string",
                "write metadata as a mapping",
            ],
        );
    }

    #[test]
    fn error_labels_and_annotations() {
        let cases = [
            (
                json!({"labels": {"version": 1.0}}),
                "metadata.labels.version must be a string but is a number",
                "metadata.labels",
            ),
            (
                json!({"labels": ["a"]}),
                "metadata.labels must be a mapping but is a list",
                "metadata.labels",
            ),
            (
                json!({"annotations": {"enabled": true}}),
                "metadata.annotations.enabled must be a string but is a boolean",
                "metadata.annotations",
            ),
        ];
        for (extra, problem, field) in cases {
            let mut metadata = obj(extra);
            metadata.insert("name".into(), json!("cfg"));
            let err =
                inline_err(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata}));
            assert!(matches!(err, ManifestError::Metadata { .. }), "{err}");
            assert_msg(
                &err,
                &[
                    "spec.manifests[3]: ConfigMap/cfg:",
                    problem,
                    &format!("write {field} as a mapping of strings"),
                    "quote values",
                ],
            );
        }
        // null values are accepted (normalize drops them).
        manifest(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "labels": {"x": null}, "annotations": null}}));
    }

    #[test]
    fn error_part_of_label() {
        let err = inline_err(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
                "name": "cfg", "labels": {"applyset.kubernetes.io/part-of": "applyset-x-v1"}
            }}),
        );
        assert!(matches!(err, ManifestError::PartOfLabel { .. }), "{err}");
        assert_msg(
            &err,
            &[
                "spec.manifests[3]: ConfigMap/cfg:",
                "applyset.kubernetes.io/part-of",
                "remove it from the manifest",
            ],
        );
    }

    #[test]
    fn error_origin_accessor() {
        let err = inline_err(json!({"kind": "ConfigMap"}));
        assert_eq!(err.origin(), &Origin::inline(3));
    }

    // ----- parse_documents -----

    #[test]
    fn parse_single_document() {
        let text = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: prod\nspec:\n  replicas: 2\n";
        let all = parse_documents(text, &cm_origin()).expect("valid");
        assert_eq!(all.len(), 1);
        let m = &all[0];
        assert_eq!(
            (m.group.as_str(), m.kind.as_str(), m.name.as_str()),
            ("apps", "Deployment", "web")
        );
        assert_eq!(m.namespace.as_deref(), Some("prod"));
        assert_eq!(m.object["spec"]["replicas"], json!(2));
        assert_eq!(m.origin, cm_origin().with_document(1).with_line(1));
        assert_eq!(
            m.origin.to_string(),
            "configMap default/app key deploy.yaml, document 1 (line 1)"
        );
    }

    #[test]
    fn parse_multi_document_with_empty_documents() {
        let text = "---\n# leading comment\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n---\n---\n# only a comment\n---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: b\n...\n---\nnull\n";
        let all = parse_documents(text, &cm_origin()).expect("valid");
        let names: Vec<_> = all
            .iter()
            .map(|m| (m.kind.as_str(), m.name.as_str()))
            .collect();
        assert_eq!(names, [("ConfigMap", "a"), ("Secret", "b")]);
        assert_eq!(all[0].origin.document(), Some(1));
        assert_eq!(all[0].origin.line(), Some(3));
        assert_eq!(all[1].origin.document(), Some(2));
        assert_eq!(all[1].origin.line(), Some(11));
    }

    #[test]
    fn parse_empty_inputs() {
        for text in [
            "",
            "\n",
            "---",
            "---\n",
            "---\n---\n",
            "# nothing\n",
            "---\n...\n",
            "~\n",
        ] {
            assert!(
                parse_documents(text, &cm_origin())
                    .expect("valid")
                    .is_empty(),
                "{text:?}"
            );
        }
    }

    #[test]
    fn parse_json_input() {
        let text = "{\n\t\"apiVersion\": \"v1\",\n\t\"kind\": \"ConfigMap\",\n\t\"metadata\": {\"name\": \"j\"},\n\t\"data\": {\"n\": \"1\"}\n}\n";
        let all =
            parse_documents(text, &Origin::file("oci ghcr.io/x/y:1", "cm.json")).expect("valid");
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].name, "j");
        assert_eq!(all[0].object["data"], json!({"n": "1"}));
    }

    #[test]
    fn parse_json_list() {
        let text = r#"{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"}},{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"y"}}]}]}"#;
        let all = parse_documents(text, &cm_origin()).expect("valid");
        assert_eq!(all.len(), 2);
        assert_eq!(all[1].name, "y");
        assert_eq!(
            all[1].origin.to_string(),
            "configMap default/app key deploy.yaml, document 1 (line 1), items[1].items[0]"
        );
    }

    #[test]
    fn parse_yaml_list_kinds() {
        let text = "apiVersion: v1\nkind: ConfigMapList\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: a\n- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: b\n";
        let all = parse_documents(text, &cm_origin()).expect("valid");
        let names: Vec<_> = all.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
    }

    #[test]
    fn parse_scalars_like_kubectl() {
        let text = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  mode: 0644\n  quoted: '0644'\n  flag: yes\n  ratio: 1.5\n";
        let all = parse_documents(text, &cm_origin()).expect("valid");
        let spec = &all[0].object["spec"];
        assert_eq!(spec["mode"], json!(420));
        assert_eq!(spec["quoted"], json!("0644"));
        assert_eq!(spec["flag"], json!(true));
        assert_eq!(spec["ratio"], json!(1.5));
    }

    #[test]
    fn parse_yaml_syntax_error_names_origin_and_line() {
        let text = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n---\napiVersion: v1\nkind: ConfigMap\ndata: [a, b\n";
        let err = parse_documents(text, &cm_origin()).expect_err("invalid");
        let ManifestError::Yaml { line, .. } = &err else {
            panic!("unexpected {err}");
        };
        assert!(line.is_some_and(|l| l >= 8), "line {line:?}");
        assert_msg(
            &err,
            &[
                "configMap default/app key deploy.yaml, line ",
                "invalid YAML",
                "fix the syntax",
            ],
        );
        // The position is shown once, after the origin.
        assert_eq!(err.to_string().matches("line ").count(), 1, "{err}");
    }

    #[test]
    fn parse_yaml_indentation_error_line() {
        let text = "metadata:\n  name: x\n   labels: y\n";
        let err = parse_documents(text, &Origin::source("http https://example.com/a.yaml"))
            .expect_err("invalid");
        assert_msg(
            &err,
            &[
                "http https://example.com/a.yaml, line 3, column ",
                "invalid YAML",
                "mapping values are not allowed",
            ],
        );
    }

    #[test]
    fn parse_duplicate_keys_error() {
        let text = "apiVersion: v1\nkind: ConfigMap\nkind: Secret\nmetadata:\n  name: a\n";
        let err = parse_documents(text, &cm_origin()).expect_err("invalid");
        assert!(
            matches!(err, ManifestError::Yaml { line: Some(3), .. }),
            "{err}"
        );
        assert_msg(&err, &["deploy.yaml, line 3", "duplicate mapping key"]);
    }

    #[test]
    fn parse_validation_error_names_document() {
        let text = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n---\n\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  generateName: b-\n";
        let err = parse_documents(text, &cm_origin()).expect_err("invalid");
        assert!(matches!(err, ManifestError::GenerateName { .. }), "{err}");
        assert_msg(
            &err,
            &[
                "configMap default/app key deploy.yaml, document 2 (line 7): ConfigMap:",
                "set metadata.name",
            ],
        );
    }

    #[test]
    fn parse_unquoted_yaml11_boolean_namespace_says_quote_it() {
        let text = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  namespace: no\n";
        let err = parse_documents(text, &cm_origin()).expect_err("invalid");
        assert!(matches!(err, ManifestError::Namespace { .. }), "{err}");
        assert_msg(
            &err,
            &[
                "deploy.yaml, document 1 (line 1): ConfigMap/a:",
                "is a boolean (quote it)",
            ],
        );
    }

    #[test]
    fn parse_scalar_document_is_not_an_object() {
        let err = parse_documents("just some text\n", &cm_origin()).expect_err("invalid");
        assert!(
            matches!(
                err,
                ManifestError::NotAnObject {
                    found: "a string",
                    ..
                }
            ),
            "{err}"
        );
        assert_msg(
            &err,
            &[
                "deploy.yaml, document 1 (line 1)",
                "expected a Kubernetes object",
            ],
        );
    }

    // ----- budgets -----

    fn configmaps(n: usize) -> String {
        (0..n)
            .map(|i| format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c{i}\n---\n"))
            .collect()
    }

    #[test]
    fn value_cost_counts_nodes_keys_and_json_bytes() {
        let v = json!({"a": [1, "xy", null, true], "b": {}});
        let cost = value_cost(&v);
        // The object, 2 keys, the list, 4 scalars, the empty object.
        assert_eq!(cost.nodes, 9);
        assert_eq!(cost.bytes, v.to_string().len());
        let Value::Object(map) = &v else {
            unreachable!()
        };
        assert_eq!(object_cost(map), cost);
        // Any depth, without recursion.
        let mut deep = Value::from(1);
        for _ in 0..5_000 {
            deep = Value::Array(vec![deep]);
        }
        assert_eq!(value_cost(&deep).nodes, 5_001);
    }

    #[test]
    fn budget_charges_and_refuses_what_does_not_fit() {
        let mut b = YamlBudget::new(YamlCost {
            nodes: 10,
            bytes: 100,
        });
        assert_eq!(
            b.charge(YamlCost {
                nodes: 4,
                bytes: 60
            }),
            Ok(())
        );
        assert_eq!(
            b.left(),
            YamlCost {
                nodes: 6,
                bytes: 40
            }
        );
        assert_eq!(
            b.charge(YamlCost {
                nodes: 1,
                bytes: 41
            }),
            Err(BudgetExceeded::Bytes)
        );
        assert_eq!(
            b.charge(YamlCost { nodes: 7, bytes: 1 }),
            Err(BudgetExceeded::Nodes)
        );
        assert_eq!(
            b.left(),
            YamlCost {
                nodes: 6,
                bytes: 40
            },
            "unchanged on refusal"
        );
        assert_eq!(
            b.charge(YamlCost {
                nodes: 6,
                bytes: 40
            }),
            Ok(())
        );
        assert!(
            b.describe(BudgetExceeded::Nodes)
                .contains("--max-yaml-nodes-per-set")
        );
        assert!(
            b.describe(BudgetExceeded::Bytes)
                .contains("--max-yaml-mib-per-set")
        );
    }

    #[test]
    fn parsing_shares_one_budget_and_names_the_file_that_crossed_it() {
        let text = configmaps(3);
        let one = {
            let mut b = YamlBudget::new(YamlCost {
                nodes: 1000,
                bytes: 1 << 20,
            });
            parse_documents_within(&text, &cm_origin(), &mut b).expect("fits");
            b.used
        };
        assert_eq!(one.bytes, text.len());
        // Room for exactly two texts: the third fails, naming its origin and the flag.
        let mut b = YamlBudget::new(YamlCost {
            nodes: 1000,
            bytes: 2 * text.len(),
        });
        parse_documents_within(&text, &Origin::file("git x", "a.yaml"), &mut b).expect("fits");
        parse_documents_within(&text, &Origin::file("git x", "b.yaml"), &mut b).expect("fits");
        let err = parse_documents_within(&text, &Origin::file("git x", "c.yaml"), &mut b)
            .expect_err("over");
        assert!(matches!(err, ManifestError::Budget { .. }), "{err}");
        assert_msg(&err, &["git x file c.yaml: ", "--max-yaml-mib-per-set"]);
        // Nodes: the parser stops, and the error names the flag.
        let mut b = YamlBudget::new(YamlCost {
            nodes: one.nodes - 1,
            bytes: 1 << 20,
        });
        let err = parse_documents_within(&text, &cm_origin(), &mut b).expect_err("over");
        assert_msg(&err, &["deploy.yaml: ", "--max-yaml-nodes-per-set"]);
    }

    #[test]
    fn a_huge_text_is_refused_before_it_is_parsed() {
        let text = format!("{}garbage: [", configmaps(1));
        let mut b = YamlBudget::new(YamlCost {
            nodes: 1000,
            bytes: 10,
        });
        let err = parse_documents_within(&text, &cm_origin(), &mut b).expect_err("over");
        // A budget error, not the syntax error further on: the text was not read.
        assert!(matches!(err, ManifestError::Budget { .. }), "{err}");
    }

    #[test]
    fn deep_nesting_is_refused_in_yaml_and_json() {
        let flow = format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\nx: {}{}\n",
            "[".repeat(200),
            "]".repeat(200)
        );
        let err = parse_documents(&flow, &cm_origin()).expect_err("too deep");
        assert_msg(&err, &["deploy.yaml: ", "nested more than 64 levels"]);
        let mut block = String::from("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\nx:\n");
        for level in 1..100 {
            block.push_str(&format!("{}a:\n", "  ".repeat(level)));
        }
        let err = parse_documents(&block, &cm_origin()).expect_err("too deep");
        assert_msg(&err, &["nested more than 64 levels"]);
        // Just under the bound is fine.
        let ok = format!(
            "{{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{{\"name\":\"a\"}},\"x\":{}1{}}}",
            "[".repeat(MAX_MANIFEST_DEPTH - 1),
            "]".repeat(MAX_MANIFEST_DEPTH - 1)
        );
        parse_documents(&ok, &cm_origin()).expect("at the bound");
    }

    #[test]
    fn a_large_bundle_within_the_budget_parses() {
        // More documents than the YAML parser allows by default (1,024).
        let all = parse_documents(&configmaps(3000), &cm_origin()).expect("within the budget");
        assert_eq!(all.len(), 3000);
        assert_eq!(all[2999].origin.document(), Some(3000));
    }

    // ----- duplicates -----

    #[test]
    fn member_key_display_and_group_kind() {
        let deploy = MemberKey {
            group: "apps".into(),
            kind: "Deployment".into(),
            namespace: Some("ns".into()),
            name: "web".into(),
        };
        assert_eq!(deploy.to_string(), "Deployment.apps ns/web");
        assert_eq!(deploy.group_kind(), "Deployment.apps");
        let namespace = MemberKey {
            group: String::new(),
            kind: "Namespace".into(),
            namespace: None,
            name: "team".into(),
        };
        assert_eq!(namespace.to_string(), "Namespace team");
        assert_eq!(namespace.group_kind(), "Namespace");
    }

    #[test]
    fn duplicates_detected_with_both_origins() {
        let text =
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: prod\n";
        let from_file = parse_documents(text, &cm_origin()).expect("valid");
        let inline = manifest(json!({
            "apiVersion": "apps/v1beta1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "prod"}
        }));
        let other = manifest(json!({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "web", "namespace": "prod"}
        }));
        let all = [&inline, &other, &from_file[0]];
        let err = check_duplicates(all.iter().map(|m| (m.key(), &m.origin))).expect_err("dup");
        assert!(matches!(err, ManifestError::Duplicate { .. }));
        assert_msg(
            &err,
            &[
                "Deployment.apps prod/web is declared more than once",
                "at spec.manifests[0] and at configMap default/app key deploy.yaml, document 1 (line 1)",
                "remove one of the declarations",
            ],
        );
        assert_eq!(err.origin(), &from_file[0].origin);
    }

    #[test]
    fn no_duplicates_across_namespace_group_kind_name() {
        let a = Origin::inline(0);
        let key = |group: &str, kind: &str, ns: Option<&str>, name: &str| MemberKey {
            group: group.into(),
            kind: kind.into(),
            namespace: ns.map(Into::into),
            name: name.into(),
        };
        let keys = vec![
            (key("", "ConfigMap", Some("a"), "x"), &a),
            (key("", "ConfigMap", Some("b"), "x"), &a),
            (key("", "ConfigMap", None, "x"), &a),
            (key("", "Secret", Some("a"), "x"), &a),
            (key("example.com", "ConfigMap", Some("a"), "x"), &a),
            (key("", "ConfigMap", Some("a"), "y"), &a),
        ];
        assert!(check_duplicates(keys).is_ok());
        assert!(check_duplicates(Vec::<(MemberKey, &Origin)>::new()).is_ok());
    }

    // ----- normalize -----

    #[test]
    fn normalize_removes_each_server_field() {
        for field in SERVER_OWNED_METADATA {
            let mut object = obj(json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "a", "namespace": "n", field: "x"}
            }));
            normalize(&mut object);
            assert_eq!(
                Value::Object(object),
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "n"}}),
                "{field}"
            );
        }
    }

    #[test]
    fn normalize_full_object_from_kubectl_get() {
        let mut object = obj(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {
                "name": "web", "namespace": "prod",
                "labels": {"app": "web", "gone": null},
                "annotations": null,
                "managedFields": [{"manager": "kubectl"}],
                "resourceVersion": "123", "uid": "u-1",
                "creationTimestamp": "2024-01-01T00:00:00Z", "generation": 4,
                "selfLink": "/apis/apps/v1/x", "deletionTimestamp": "2024-01-02T00:00:00Z"
            },
            "spec": {"replicas": 1, "status": "kept"},
            "status": {"readyReplicas": 1}
        }));
        normalize(&mut object);
        assert_eq!(
            Value::Object(object),
            json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "web", "namespace": "prod", "labels": {"app": "web"}},
                "spec": {"replicas": 1, "status": "kept"}
            })
        );
    }

    #[test]
    fn normalize_status_and_nulls() {
        let mut object = obj(json!({"kind": "X", "status": {}}));
        normalize(&mut object);
        assert_eq!(Value::Object(object), json!({"kind": "X"}));

        let mut object =
            obj(json!({"metadata": {"labels": null, "annotations": {"a": null, "b": "c"}}}));
        normalize(&mut object);
        assert_eq!(
            Value::Object(object),
            json!({"metadata": {"annotations": {"b": "c"}}})
        );

        // Odd shapes are left alone.
        let mut object = obj(json!({"metadata": "x"}));
        normalize(&mut object);
        assert_eq!(Value::Object(object), json!({"metadata": "x"}));
    }

    // ----- digest -----

    fn digest_of<'a>(manifests: impl IntoIterator<Item = &'a Manifest>) -> String {
        digest(manifests.into_iter().map(|m| &m.object))
    }

    fn set(texts: &[&str]) -> Vec<Manifest> {
        texts
            .iter()
            .flat_map(|t| parse_documents(t, &cm_origin()).expect("valid"))
            .collect()
    }

    const A: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  namespace: ns\ndata:\n  x: '1'\n  y: '2'\n";
    const A_REORDERED: &str = "kind: ConfigMap\ndata:\n  y: '2'\n  x: '1'\nmetadata:\n  namespace: ns\n  name: a\napiVersion: v1\n";
    const B: &str =
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: b\nspec:\n  replicas: 1\n";

    #[test]
    fn digest_format() {
        let d = digest_of(&set(&[A]));
        assert!(d.starts_with("sha256:"));
        assert_eq!(d.len(), "sha256:".len() + 64);
        assert!(
            d["sha256:".len()..]
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        );
    }

    #[test]
    fn digest_of_empty_set_is_sha256_of_nothing() {
        assert_eq!(
            digest_of(std::iter::empty()),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn digest_stable_under_key_order() {
        assert_eq!(digest_of(&set(&[A, B])), digest_of(&set(&[A_REORDERED, B])));
    }

    #[test]
    fn digest_stable_under_input_order_and_origin() {
        let forward = set(&[A, B]);
        let mut backward = set(&[B, A]);
        for m in &mut backward {
            m.origin = Origin::inline(9);
        }
        assert_eq!(digest_of(&forward), digest_of(&backward));
    }

    #[test]
    fn digest_changes_with_content() {
        let base = digest_of(&set(&[A, B]));
        assert_ne!(base, digest_of(&set(&[A])));
        assert_ne!(
            base,
            digest_of(&set(&[A, &B.replace("replicas: 1", "replicas: 2")]))
        );
        assert_ne!(base, digest_of(&set(&[&A.replace("'1'", "'3'"), B])));
        assert_ne!(
            base,
            digest_of(&set(&[A, &B.replace("name: b", "name: c")]))
        );
        // A string "1" and a number 1 differ.
        assert_ne!(
            digest_of(&set(&[A])),
            digest_of(&set(&[&A.replace("'1'", "1")]))
        );
    }

    #[test]
    fn canonical_json_escapes_and_sorts() {
        let mut out = String::new();
        write_canonical(
            &json!({"b": [1, 2.5, null, true, false], "a": "q\"\\\n\r\t\u{1}é"}),
            &mut out,
        );
        assert_eq!(
            out,
            r#"{"a":"q\"\\\n\r\t\u0001é","b":[1,2.5,null,true,false]}"#
        );
        // Same as serde_json's own encoding, so it round-trips.
        let parsed: Value = serde_json::from_str(&out).expect("json");
        assert_eq!(parsed["a"], json!("q\"\\\n\r\t\u{1}é"));
    }
}

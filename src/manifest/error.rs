//! What is wrong with a declared object ([`ManifestError`]): every message names the origin,
//! the object and what to change.

use super::*;

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
pub(super) fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

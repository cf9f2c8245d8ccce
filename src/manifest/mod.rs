//! Manifests: parsing and validating declared objects (docs/design.md §2.1, §4 step 1 "Render").
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
//!
//! Files: this one ([`Manifest`] and the validation of one object), `origin` ([`Origin`]),
//! `error` ([`ManifestError`]), `key` ([`MemberKey`], duplicates), `yaml` (parsing text within
//! the budget), `canonical` (normalization and digest); tests beside each.

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

// The member label of KEP-3659: a declared object must not carry it (docs/design.md §3.3).
use crate::api::MAX_MANIFEST_DEPTH;
use crate::applyset::LABEL_PART_OF;

/// Longest object name the API server accepts (DNS subdomain length).
const MAX_NAME_LEN: usize = 253;

/// Longest namespace name (namespaces are DNS-1123 labels).
const MAX_NAMESPACE_LEN: usize = 63;

/// Bound on `List`-in-`List` nesting, so hostile input cannot recurse without limit.
const MAX_LIST_DEPTH: usize = 16;

mod canonical;
mod error;
mod key;
mod origin;
mod yaml;

pub use canonical::{digest, normalize};
pub use error::ManifestError;
use error::type_name;
pub use key::{MemberKey, check_duplicates};
pub use origin::Origin;
pub use yaml::{
    BudgetExceeded, DEFAULT_SET_YAML_BYTES, DEFAULT_SET_YAML_NODES, YamlBudget, YamlCost,
    object_cost, parse_documents, parse_documents_within, set_parse_limit, value_cost,
};

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
    /// Whether a variable taken from a Secret was substituted into it (see
    /// [`crate::substitute`]): a diff then masks all its values, as a Secret's.
    pub secret_substituted: bool,
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
            secret_substituted: false,
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    pub(super) fn cm_origin() -> Origin {
        Origin::key("configMap default/app", "deploy.yaml")
    }

    pub(super) fn obj(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            other => panic!("not an object: {other}"),
        }
    }

    pub(super) fn inline_err(value: Value) -> ManifestError {
        Manifest::from_value(value, Origin::inline(3)).expect_err("should fail")
    }

    pub(super) fn assert_msg(err: &ManifestError, parts: &[&str]) {
        let msg = err.to_string();
        for part in parts {
            assert!(msg.contains(part), "message {msg:?} lacks {part:?}");
        }
    }

    pub(super) fn manifest(value: Value) -> Manifest {
        let mut all = Manifest::from_value(value, Origin::inline(0)).expect("valid");
        assert_eq!(all.len(), 1);
        all.remove(0)
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
}

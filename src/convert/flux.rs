//! The Flux objects `convert` reads (kustomize-controller's `Kustomization`, source-controller's
//! `GitRepository`, `OCIRepository`, `Bucket`, `ExternalArtifact`): their identity, and their
//! spec as a map whose fields are taken one by one ([`Fields::take`]), each into a serde type
//! of its shape; what is left after the known fields were taken ([`Fields::rest`]) is named as
//! having no equivalent rather than dropped in silence.

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::{FluxRef, Note, Severity};

/// The API group of Kustomizations.
pub const KUSTOMIZE_GROUP: &str = "kustomize.toolkit.fluxcd.io";
/// The API group of sources.
pub const SOURCE_GROUP: &str = "source.toolkit.fluxcd.io";

/// A Flux object as read: its identity, spec and status.
#[derive(Clone, Debug)]
pub struct Object {
    pub id: FluxRef,
    pub spec: Map<String, Value>,
    pub status: Option<Value>,
}

/// The Flux object `v` is, if it is one: a Kustomization of kustomize.toolkit.fluxcd.io or an
/// object of source.toolkit.fluxcd.io, with a name. `default_namespace` is the namespace of an
/// object that names none (as kubectl would put it).
pub fn read(v: &Value, default_namespace: &str) -> Option<Object> {
    let api_version = v.get("apiVersion")?.as_str()?;
    let kind = v.get("kind")?.as_str()?;
    let group = api_version.split('/').next().unwrap_or_default();
    let ours = match group {
        KUSTOMIZE_GROUP => kind == "Kustomization",
        SOURCE_GROUP => true,
        _ => false,
    };
    if !ours {
        return None;
    }
    let meta = v.get("metadata")?;
    let name = meta.get("name")?.as_str()?.to_string();
    let namespace = meta
        .get("namespace")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .unwrap_or(default_namespace)
        .to_string();
    let spec = v
        .get("spec")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    Some(Object {
        id: FluxRef {
            kind: kind.to_string(),
            namespace,
            name,
        },
        spec,
        status: v.get("status").cloned(),
    })
}

/// The fields of one object's map (`spec`, or a nested object such as `spec.postBuild`), taken
/// one by one.
pub struct Fields {
    pub object: FluxRef,
    /// The path of the map in the object (`spec`, `spec.postBuild`).
    pub path: String,
    rest: Map<String, Value>,
}

impl Fields {
    pub fn new(object: &FluxRef, path: &str, map: Map<String, Value>) -> Fields {
        Fields {
            object: object.clone(),
            path: path.to_string(),
            rest: map,
        }
    }

    /// The path of `key` in the object: `spec.key`.
    pub fn field(&self, key: &str) -> String {
        format!("{}.{key}", self.path)
    }

    /// A note about `key`.
    pub fn note(&self, key: &str, severity: Severity, why: impl Into<String>) -> Note {
        Note {
            object: self.object.clone(),
            field: self.field(key),
            severity,
            why: why.into(),
        }
    }

    /// Takes `key` (absent or null: `None`) as a `T`; a value of another shape is a refusal
    /// naming the field (the Flux API would not have admitted it).
    pub fn take<T: DeserializeOwned>(&mut self, key: &str) -> Result<Option<T>, Box<Note>> {
        match self.rest.remove(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => serde_json::from_value(v).map(Some).map_err(|e| {
                Box::new(self.note(
                    key,
                    Severity::Refused,
                    format!("not a value of the field's type in Flux's API ({e}); fix the object"),
                ))
            }),
        }
    }

    /// Takes `key` as a nested map (absent: `None`).
    pub fn take_map(&mut self, key: &str) -> Result<Option<Fields>, Box<Note>> {
        let map: Option<Map<String, Value>> = self.take(key)?;
        Ok(map.map(|m| Fields::new(&self.object, &self.field(key), m)))
    }

    /// The value of `key`, without taking it.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.rest.get(key).filter(|v| !v.is_null())
    }

    /// Whether `key` is present (and not null), without taking it.
    pub fn has(&self, key: &str) -> bool {
        self.rest.get(key).is_some_and(|v| !v.is_null())
    }

    /// Takes `key` and drops it with `why` (a [`Severity::Dropped`] note) when it is set to
    /// anything but an empty or false value.
    pub fn drop_field(&mut self, key: &str, why: &str, notes: &mut Vec<Note>) {
        if let Some(v) = self.rest.remove(key)
            && !is_empty(&v)
        {
            notes.push(self.note(key, Severity::Dropped, why));
        }
    }

    /// The fields left (not taken), each a [`Severity::Dropped`] note.
    pub fn rest(self, notes: &mut Vec<Note>) {
        for (key, v) in &self.rest {
            if !is_empty(v) {
                notes.push(self.note(
                    key,
                    Severity::Dropped,
                    "not a field this conversion knows; it has no equivalent and is left out",
                ));
            }
        }
    }
}

/// Whether `v` says nothing: null, false, "", [] or {}.
fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        Value::Number(_) => false,
    }
}

/// `{name}` of Flux's `LocalObjectReference`.
#[derive(serde::Deserialize, Clone, Debug, PartialEq)]
pub struct LocalRef {
    pub name: String,
}

/// Flux's `CrossNamespaceSourceReference`.
#[derive(serde::Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SourceRef {
    pub kind: String,
    pub name: String,
    #[serde(default)]
    pub namespace: Option<String>,
}

/// Flux's `DependencyReference`.
#[derive(serde::Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DependencyRef {
    pub name: String,
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub ready_expr: Option<String>,
}

/// Flux's `NamespacedObjectKindReference` (healthChecks).
#[derive(serde::Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ObjectKindRef {
    #[serde(default)]
    pub api_version: Option<String>,
    pub kind: String,
    pub name: String,
    #[serde(default)]
    pub namespace: Option<String>,
}

//! `spec.ignore`: drift-ignore rules, in the shape of Flux's Kustomization `spec.ignore`
//! (fields the set neither corrects nor reports as drift, e.g. `replicas` an autoscaler owns).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::KustomizeSelector;

/// Fields that are not corrected and not reported as drift on the objects `target` selects.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IgnoreRule {
    /// JSON pointers (RFC 6901; `~1` stands for `/` in a key, `~0` for `~`) to the ignored
    /// fields, e.g. /spec/replicas or /metadata/annotations/example.com~1hash. A malformed
    /// pointer, and a path that touches the object's identity (apiVersion, kind,
    /// metadata.name, metadata.namespace), the set's part-of label or adoption mark (so also
    /// the whole metadata.labels or metadata.annotations) or what the server keeps per object
    /// (uid, resourceVersion, generation, managedFields, timestamps) is refused
    /// (ValidationFailed).
    #[schemars(length(min = 1, max = 64), inner(length(min = 1, max = 1024)))]
    pub paths: Vec<String>,

    /// The objects the rule applies to: group, version, kind, name and namespace are regular
    /// expressions matched against the whole value; labelSelector and annotationSelector are
    /// Kubernetes label selectors. Without a target the rule applies to every member.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<KustomizeSelector>,
}

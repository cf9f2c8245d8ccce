//! What a set waits for besides its members: other sets (`spec.dependsOn`) and other objects
//! (`spec.healthChecks`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// An object whose health a set assesses (spec.healthChecks).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthCheck {
    /// apiVersion of the object, e.g. apps/v1.
    #[schemars(length(min = 1, max = 317))]
    pub api_version: String,
    /// Kind of the object, e.g. Deployment.
    #[schemars(length(min = 1, max = 63))]
    pub kind: String,
    /// Name of the object.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Namespace of a namespaced object; defaults to the ApplySet's own namespace (a
    /// ClusterApplySet must name it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub namespace: Option<String>,
}

/// A set this one depends on.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!(has(self.namespace) && self.kind == 'ClusterApplySet')",
    "message": "namespace is only for an ApplySet dependency: a ClusterApplySet has none"
}]))]
pub struct Dependency {
    /// Name of the ApplySet or ClusterApplySet.
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    )]
    pub name: String,

    /// Namespace of an ApplySet dependency. Defaults to the depending ApplySet's own
    /// namespace; a ClusterApplySet that depends on an ApplySet must set it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    )]
    pub namespace: Option<String>,

    /// ApplySet (the default) or ClusterApplySet.
    #[serde(default)]
    pub kind: DependencyKind,
}

/// The kind of a dependency.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum DependencyKind {
    /// A namespaced ApplySet.
    #[default]
    ApplySet,
    /// A cluster-scoped ClusterApplySet.
    ClusterApplySet,
}

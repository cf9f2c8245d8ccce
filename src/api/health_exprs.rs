//! `spec.healthCheckExprs`: CEL expressions that say when objects of a kind are healthy, in
//! the shape of Flux's Kustomization `spec.healthCheckExprs`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The health of the objects of one kind (or of every kind of a group), as CEL expressions
/// over the object: each top-level field (status, metadata, spec, ...) is a variable.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CustomHealthCheck {
    /// The objects' apiVersion (only its group is compared, as Flux does), e.g.
    /// cert-manager.io/v1.
    #[schemars(length(min = 1, max = 317))]
    pub api_version: String,

    /// The objects' kind; without it the expressions apply to every kind of the group that has
    /// no entry of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub kind: Option<String>,

    /// True when the object is healthy (Current).
    #[schemars(length(min = 1, max = 1024))]
    pub current: String,

    /// True when the object is still progressing (checked first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub in_progress: Option<String>,

    /// True when the object has failed (checked after inProgress, before current).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub failed: Option<String>,
}

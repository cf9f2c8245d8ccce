//! `spec.postBuild`: the variables substituted in every member after the build, given
//! inline or read from ConfigMaps and Secrets of the set's namespace.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `spec.postBuild`: variables substituted in every member after the build.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PostBuild {
    /// Variables by name (`[_a-zA-Z][_a-zA-Z0-9]*`); they win over substituteFrom.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub substitute: BTreeMap<String, String>,
    /// ConfigMaps and Secrets of the set's namespace whose data keys are variables, read as
    /// the set's identity; a later entry's values win over an earlier one's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub substitute_from: Vec<SubstituteReference>,
}

/// A ConfigMap or Secret of `spec.postBuild.substituteFrom`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SubstituteReference {
    pub kind: SubstituteKind,
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// A missing object is skipped instead of failing the reconcile.
    #[serde(default)]
    pub optional: bool,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum SubstituteKind {
    #[default]
    ConfigMap,
    Secret,
}

//! `spec.kustomize`: what Flux's Kustomization sets over a source's path (target namespace,
//! name prefix and suffix, common metadata, patches, images, components).

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `spec.kustomize`: what Flux's Kustomization sets over a source's path.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KustomizeOverrides {
    /// The kustomization's `namespace`: every namespaced object is put in this namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub target_namespace: Option<String>,
    /// The kustomization's `namePrefix` (replaces the one of the source's kustomization).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 200))]
    pub name_prefix: Option<String>,
    /// The kustomization's `nameSuffix` (replaces the one of the source's kustomization).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 200))]
    pub name_suffix: Option<String>,
    /// Labels and annotations set on every built object's metadata (not on selectors or
    /// templates), after the build, as Flux's commonMetadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub common_metadata: Option<CommonMetadata>,
    /// Patches appended to the kustomization's `patches` (strategic merge or JSON 6902).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256))]
    pub patches: Vec<KustomizePatch>,
    /// Image overrides merged into the kustomization's `images` (by name).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256))]
    pub images: Vec<KustomizeImage>,
    /// Components appended to the kustomization's `components`: local paths, relative to
    /// the source's path.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub components: Vec<String>,
}

/// `spec.kustomize.commonMetadata`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CommonMetadata {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// A patch of `spec.kustomize.patches`: the patch text (a strategic merge patch or a JSON
/// 6902 patch, YAML or JSON) and the objects it applies to.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KustomizePatch {
    #[schemars(length(min = 1))]
    pub patch: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<KustomizeSelector>,
}

/// Which objects a patch applies to (kustomize's selector).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KustomizeSelector {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotation_selector: Option<String>,
}

/// An image override of `spec.kustomize.images` (kustomize's `images` entry).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KustomizeImage {
    /// The image name as the manifests use it.
    #[schemars(length(min = 1))]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_tag: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
}

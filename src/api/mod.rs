//! The API: `ApplySet` (namespaced) and `ClusterApplySet` (cluster-scoped) in
//! `applyset.dev/v1alpha1`. Both kinds share one spec and one status.

mod crd;
mod decryption;
mod dependencies;
mod duration;
mod health_exprs;
mod ignore;
mod inline;
mod kustomize;
mod post_build;
mod sources;
mod spec;
mod status;

pub use crd::{crds, crds_yaml, reflow};
pub use decryption::{Decryption, DecryptionProvider};
pub use dependencies::{Dependency, DependencyKind, HealthCheck};
pub use duration::{MAX_INTERVAL, MAX_TIMEOUT, MIN_DURATION, parse_duration};
pub use health_exprs::CustomHealthCheck;
pub use ignore::IgnoreRule;
pub use inline::{
    InlineManifest, MAX_INLINE_MANIFESTS, MAX_MANIFEST_DEPTH, MAX_MANIFEST_FIELDS,
    UnreadableManifest, json_depth,
};
pub use kustomize::{
    CommonMetadata, KustomizeImage, KustomizeOverrides, KustomizePatch, KustomizeSelector,
};
pub use post_build::{PostBuild, SubstituteKind, SubstituteReference};
pub use sources::{
    GitReference, GitSource, HttpSource, ObjectSource, OciSource, SecretReference, Source,
};
pub use spec::{
    ApplySet, ApplySetSpec, ClusterApplySet, ClusterApplySetSpec, DeletionPolicy, Mode,
};
pub use status::{
    ApplySetStatus, HealthStatus, MemberFailure, MemberRef, NOT_OBSERVED, NotCurrentObject, Plan,
    PlanSkip, Summary,
};

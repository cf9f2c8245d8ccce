//! The status both kinds share: conditions, revisions, the counts of the last reconcile, the
//! members, the plan (Plan mode) and the health of what a set assesses.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Observed state of an ApplySet.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplySetStatus {
    /// The generation the conditions describe; -1 until the operator has reconciled the set
    /// (the CRD's default, so that kstatus reads a new set as in progress).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// The KEP-3659 ApplySet ID of this parent (value of its applyset.kubernetes.io/id label).
    #[serde(
        default,
        rename = "applySetID",
        skip_serializing_if = "Option::is_none"
    )]
    pub applyset_id: Option<String>,

    /// Ready, Reconciling and Stalled (kstatus conventions).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,

    /// Revision last applied and pruned in full: the digest of the rendered set, followed by
    /// each source's revision (commit, digest, resourceVersion), separated by "; ".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_applied_revision: Option<String>,

    /// Revision last attempted (same form as lastAppliedRevision).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_attempted_revision: Option<String>,

    /// When lastAttemptedRevision last changed: when the operator first read the set's
    /// sources at that revision (as Flux's artifact lastUpdateTime; not every fetch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_attempted_revision_time: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,

    /// The value of the applyset.dev/reconcile-requested-at annotation the last reported
    /// reconcile saw: a client that set the annotation knows its request was handled when
    /// this equals the value it set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_reconcile_at: Option<String>,

    /// Counts of the last reconcile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<Summary>,

    /// The members, capped at 500 entries, and at fewer when the parent's spec and status
    /// would otherwise take more than 1 MiB (see membersTruncated).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<MemberRef>,

    /// True when members does not list every member (more than 500, or the parent would grow
    /// over 1 MiB).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub members_truncated: bool,

    /// In Plan mode: what an apply would do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<Plan>,

    /// The members the last reconcile could not apply (a conflict, a refused adoption,
    /// another set's object, a failed apply, a namespace being terminated), at most 20, each
    /// with its reason and message; empty when it applied them all or applied nothing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failures: Vec<MemberFailure>,

    /// Short message of the last failure; cleared on success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,

    /// Sets that wait or have healthChecks: the health of their members and checked objects,
    /// kept current from the operator's watches between reconciles (with the Healthy
    /// condition).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<HealthStatus>,
}

/// How many of a set's assessed objects are in each kstatus status, and the first few that
/// are not current.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthStatus {
    /// Objects that are Current.
    pub current: i64,
    /// Objects in progress (their controller has not caught up, or they do not work yet).
    pub in_progress: i64,
    /// Objects that failed.
    pub failed: i64,
    /// Objects being deleted.
    #[serde(default)]
    pub terminating: i64,
    /// Objects that do not exist.
    #[serde(default)]
    pub not_found: i64,
    /// Objects whose health is unknown (malformed, or not seen yet).
    #[serde(default)]
    pub unknown: i64,
    /// The first objects that are not current (at most 5), the most urgent first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_current: Vec<NotCurrentObject>,
}

/// An object that is not current.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NotCurrentObject {
    /// Kind and name, e.g. `Deployment demo/web`.
    pub object: String,
    /// InProgress, Failed, Terminating, NotFound or Unknown.
    pub status: String,
    /// Why, e.g. `0 of 1 replicas available`.
    pub message: String,
}

/// `status.observedGeneration` of a set the operator has not reconciled yet. The CRDs default
/// the status to `{observedGeneration: -1}` (see [`super::crds`]), as Flux's CRDs do, so that
/// kstatus (and Flux, Argo CD) reads a new set as in progress: its generation is never -1.
pub const NOT_OBSERVED: i64 = -1;

impl ApplySetStatus {
    /// The generation the status describes: `None` when absent or when it is the CRD's
    /// default [`NOT_OBSERVED`] (any negative value), i.e. before the first reconcile.
    pub fn observed(&self) -> Option<i64> {
        self.observed_generation.filter(|g| *g >= 0)
    }
}

/// Counts of one reconcile.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// Declared members.
    pub members: i64,
    /// Members created by this reconcile.
    pub created: i64,
    /// Members whose live state this reconcile changed.
    pub configured: i64,
    /// Members already as declared.
    pub unchanged: i64,
    /// Objects deleted because they are no longer declared.
    pub pruned: i64,
    /// Members whose apply failed.
    pub failed: i64,
    /// Members whose apply hit a field-manager conflict.
    pub conflicts: i64,
    /// Objects no longer declared but kept (prune: disabled, reconcile: disabled, ssa:
    /// Ignore, or not ours).
    pub retained: i64,
    /// Members not applied for their own controls (ssa: Ignore, reconcile: disabled, or ssa:
    /// IfNotPresent on an object that exists).
    #[serde(default)]
    pub skipped: i64,
}

/// A member a plan would not apply for its own controls, and why.
#[derive(
    Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct PlanSkip {
    /// The member.
    #[serde(flatten)]
    pub member: MemberRef,
    /// Why: `ssa: Ignore`, `reconcile: disabled` or `IfNotPresent, exists`.
    pub reason: String,
}

/// A member the last reconcile could not apply, and why.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemberFailure {
    /// The member.
    #[serde(flatten)]
    pub member: MemberRef,
    /// The status reason it leads to: OwnershipConflict, AdoptionRefused, Conflict,
    /// ApplyFailed or NamespaceTerminating.
    pub reason: String,
    /// What stopped it (at most 512 characters).
    pub message: String,
}

/// A reference to a member object.
#[derive(
    Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct MemberRef {
    /// API group ("" for the core group).
    #[serde(default)]
    pub group: String,
    /// Kind.
    pub kind: String,
    /// Namespace (absent for cluster-scoped objects).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
}

impl MemberRef {
    /// The reference of a live object of kind `gk` from its metadata (a namespace only for
    /// a namespaced kind); `None` without a name.
    pub fn of_live(
        gk: &crate::applyset::GroupKind,
        namespaced: bool,
        meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    ) -> Option<MemberRef> {
        Some(MemberRef {
            group: gk.group.clone(),
            kind: gk.kind.clone(),
            namespace: if namespaced {
                meta.namespace.clone()
            } else {
                None
            },
            name: meta.name.clone()?,
        })
    }
}

impl std::fmt::Display for MemberRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.group.is_empty() {
            write!(f, "{}", self.kind)?;
        } else {
            write!(f, "{}.{}", self.kind, self.group)?;
        }
        match &self.namespace {
            Some(ns) => write!(f, " {ns}/{}", self.name),
            None => write!(f, " {}", self.name),
        }
    }
}

/// What an apply would do (Plan mode).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    /// Members that would be created.
    #[serde(default)]
    pub create: Vec<MemberRef>,
    /// Members whose live state would change.
    #[serde(default)]
    pub update: Vec<MemberRef>,
    /// Objects that would be pruned.
    #[serde(default)]
    pub prune: Vec<MemberRef>,
    /// Members already as declared.
    #[serde(default)]
    pub unchanged: i64,
    /// Members that would not be applied for their own controls, each with why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skip: Vec<PlanSkip>,
    /// True when one of the lists was capped (at 500 entries, or shorter to keep the parent
    /// under 1 MiB).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_defaulted_status_is_not_observed() {
        let status = |g: Option<i64>| ApplySetStatus {
            observed_generation: g,
            ..ApplySetStatus::default()
        };
        assert_eq!(status(None).observed(), None);
        assert_eq!(status(Some(NOT_OBSERVED)).observed(), None);
        assert_eq!(status(Some(-7)).observed(), None);
        assert_eq!(status(Some(0)).observed(), Some(0));
        assert_eq!(status(Some(3)).observed(), Some(3));
    }
}

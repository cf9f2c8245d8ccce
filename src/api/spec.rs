//! The ApplySet and ClusterApplySet resources: their one spec ([`ApplySetSpec`], from which
//! kube derives both kinds, their printer columns and CEL rules) and the spec's defaults (the
//! same as deserializing `{}`).

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{
    CustomHealthCheck, Decryption, Dependency, HealthCheck, IgnoreRule, InlineManifest,
    KustomizeOverrides, PostBuild, Source, inline::manifests_schema, status::ApplySetStatus,
};

/// Desired state of an ApplySet: the objects it keeps exactly as declared.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "applyset.dev",
    version = "v1alpha1",
    kind = "ApplySet",
    plural = "applysets",
    singular = "applyset",
    shortname = "aset",
    namespaced,
    status = "ApplySetStatus",
    doc = "A set of Kubernetes objects applied with server-side apply and pruned when no longer declared. The ApplySet is the KEP-3659 ApplySet parent of its members.",
    validation = Rule::new("!has(self.spec.serviceAccountNamespace)").message("spec.serviceAccountNamespace is for a ClusterApplySet only: an ApplySet's ServiceAccount is in the ApplySet's own namespace"),
    label("applyset.kubernetes.io/is-parent-type", "true"),
    printcolumn = r#"{"name":"Ready","type":"string","description":"Ready condition status","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","description":"Ready condition reason","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason","priority":1}"#,
    printcolumn = r#"{"name":"Members","type":"integer","description":"Declared members","jsonPath":".status.summary.members"}"#,
    printcolumn = r#"{"name":"Pruned","type":"integer","description":"Objects pruned by the last reconcile","jsonPath":".status.summary.pruned"}"#,
    printcolumn = r#"{"name":"Age","type":"date","description":"Age","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ApplySetSpec {
    /// Inline Kubernetes objects, each a full object with apiVersion, kind and metadata.name.
    /// A `kind: List` is flattened into its items. At most 512 KiB of JSON in all (the
    /// operator's --max-inline-manifests-kib): more belongs in a source.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "manifests_schema")]
    pub manifests: Vec<InlineManifest>,

    /// Manifest sources, read in this order after the inline manifests. Each entry has exactly
    /// one of configMap, secret, http, git or oci. If any source cannot be read, the reconcile
    /// stops (reason SourceFailed, retried with backoff): nothing is applied and nothing is
    /// pruned. The revisions of the sources (resourceVersion, sha256, commit, digest) show in
    /// status.lastAttemptedRevision and status.lastAppliedRevision.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub sources: Vec<Source>,

    /// Namespace given to namespaced members that set none. Defaults to the ApplySet's own
    /// namespace; a ClusterApplySet has no default, so its namespaced members must name one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_namespace: Option<String>,

    /// Delete members that are no longer declared (default true).
    #[serde(default = "default_true")]
    pub prune: bool,

    /// Allow a reconcile whose desired set is empty to prune every member. Without it such a
    /// reconcile is refused (reason EmptySetRefused) and nothing is deleted.
    #[serde(default)]
    pub allow_empty: bool,

    /// Server-side apply with force: take over fields owned by other field managers. Without
    /// it a conflict is reported (reason Conflict) naming the other manager.
    #[serde(default)]
    pub force: bool,

    /// Apply writes the members; Plan computes with a server-side dry-run what an apply would
    /// create, change and prune, reports it in status.plan, and writes no member.
    #[serde(default)]
    pub mode: Mode,

    /// Period of a full re-reconcile that corrects drift even without events (Go duration,
    /// e.g. 10m, 1h30m; at least 1s).
    #[serde(default = "default_interval")]
    #[schemars(regex(pattern = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"))]
    pub interval: String,

    /// First retry after a failure; retries back off exponentially up to `interval` (at
    /// least 1s).
    #[serde(default = "default_retry_interval")]
    #[schemars(regex(pattern = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"))]
    pub retry_interval: String,

    /// Bound on one reconcile's apply (at least 1s, at most 24h).
    #[serde(default = "default_timeout")]
    #[schemars(regex(pattern = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"))]
    pub timeout: String,

    /// Stop reconciling; members are left as they are and status says Suspended.
    #[serde(default)]
    pub suspend: bool,

    /// On deletion of this object: Delete (the default) prunes every member (in reverse
    /// dependency order) before the finalizer is removed; WaitForTermination does too and waits
    /// (at most spec.timeout) until they are gone; MirrorPrune deletes them when spec.prune is
    /// true and leaves them otherwise; Orphan leaves them in place.
    #[serde(default)]
    pub deletion_policy: DeletionPolicy,

    /// The ServiceAccount every request about members is made as (impersonation): applies,
    /// dry-runs, the prune's lists and deletes, re-creates, waits and the deletion cleanup.
    /// Its RBAC decides what the set may touch. An ApplySet's ServiceAccount is in its own
    /// namespace; a ClusterApplySet names the namespace in serviceAccountNamespace. Without
    /// it the operator's --default-service-account (--cluster-default-service-account) is
    /// used when set, else the operator's own identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    )]
    pub service_account_name: Option<String>,

    /// ClusterApplySet only: the namespace of serviceAccountName (set both or neither).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    )]
    pub service_account_namespace: Option<String>,

    /// Take over objects that already exist without this set's part-of label. Without it
    /// such an object is left alone and its member fails (reason AdoptionRefused); a single
    /// member may opt in with the annotation applyset.dev/adopt: enabled. An adopted
    /// Namespace or CustomResourceDefinition is never deleted by the set.
    #[serde(default)]
    pub adopt_existing: bool,

    /// Field managers whose fields this set takes over on its own members, by exact name
    /// (their Apply and Update entries, never a subresource's): as Override takes over what
    /// kubectl changed, for a handover from another tool, e.g. `kustomize-controller` after
    /// its Kustomization was suspended (see the migration guide). Once an object is the set's
    /// (created, or adopted), those managers' fields are merged into the set's own entry, so
    /// the set's next apply reverts what they changed and removes what only they added
    /// (Flux's owner labels among them); an `ssa: IfNotPresent` object is adopted only when
    /// one of them owns fields on it (or it carries Flux's owner labels), keeps its data and
    /// loses those labels in the same patch. A value the set would change that one of them
    /// set stays a Conflict naming it (spec.force overrides). Not with `ssa: Merge`. At most
    /// 16 exact names (no pattern), none of them the set's own manager, one of this
    /// operator's, or one of Kubernetes' own (kube-controller-manager, kube-scheduler,
    /// kubelet, kube-apiserver).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), inner(length(min = 1, max = 128)))]
    pub take_over_field_managers: Vec<String>,

    /// After the apply and the prune, wait until every member is Current (the kstatus rules:
    /// a Deployment's replicas available, a Job complete, a custom resource Ready, ...),
    /// within spec.timeout from the start of the wait. Meanwhile Ready is Unknown (reason
    /// Progressing) and names the members not yet current; a member that fails, or the
    /// timeout, makes Ready False (reason HealthCheckFailed, retried). Sets that wait (or have
    /// healthChecks) keep a Healthy condition and status.health current between reconciles.
    #[serde(default)]
    pub wait: bool,

    /// More objects to wait for and keep assessing, members or not (e.g. a Deployment another
    /// tool manages that this set's members need). They are waited for even without wait:
    /// true. Each must be within the set's scope (as its members are), and the set's identity
    /// must be allowed to get it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub health_checks: Vec<HealthCheck>,

    /// CEL expressions that say when objects of a kind are Current, InProgress or Failed,
    /// for kinds whose status the standard conditions do not describe (as Flux's
    /// healthCheckExprs). Used wherever health is assessed (wait, healthChecks, Healthy). An
    /// expression that does not compile is refused (ValidationFailed) naming it; Secrets are
    /// never assessed by expression.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub health_check_exprs: Vec<CustomHealthCheck>,

    /// Drift-ignore rules (as Flux's spec.ignore): the fields they name are set when a member
    /// is created, then neither corrected nor reported as drift.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub ignore: Vec<IgnoreRule>,

    /// Sets that must be ready before this one is applied: each must have Ready=True for its
    /// current generation (and Healthy=True when it has a Healthy condition). Until then
    /// nothing is rendered or written, and status says Ready=False, reason DependencyNotReady,
    /// naming the first one that is not ready. A set is applied as soon as its dependencies
    /// become ready. A cycle (a set depending on itself, directly or through others) is
    /// refused (ValidationFailed). On deletion with deletionPolicy Delete, a set waits (at most
    /// its timeout) for the sets depending on it that are being deleted too, so their members
    /// are deleted first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub depends_on: Vec<Dependency>,

    /// Overrides applied to every directory source (git, oci, http bundle) as Flux applies
    /// a Kustomization's: through a kustomization generated over the source's path (its own
    /// kustomization.yaml, if any, with these fields set), built with kustomize.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kustomize: Option<KustomizeOverrides>,

    /// Variable substitution in every member (inline and from sources) after the build, as
    /// Flux's postBuild: `${var}`, `${var:=default}`, `${var:-default}`, `$${var}` for a
    /// literal. A variable without a value and without a default is an error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub post_build: Option<PostBuild>,

    /// Decryption of SOPS-encrypted members (provider sops, age keys): a member that carries
    /// SOPS metadata (a top-level sops entry) is decrypted in memory before it is applied,
    /// each value authenticated by its AES-GCM tag; a Secret whose data entries are SOPS files
    /// has them decrypted (file MAC verified). The keys are the age identities in the entries
    /// ending in .agekey of the Secret secretRef names, read as the set's identity. A member
    /// annotated applyset.dev/decrypt: disabled (or kustomize.toolkit.fluxcd.io/decrypt:
    /// disabled) is left as it is. Without decryption, a SOPS-encrypted member is refused
    /// (ValidationFailed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decryption: Option<Decryption>,
}

/// Cluster-scoped ApplySet, for sets that span namespaces (CRDs, Namespaces, RBAC, add-ons).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "applyset.dev",
    version = "v1alpha1",
    kind = "ClusterApplySet",
    plural = "clusterapplysets",
    singular = "clusterapplyset",
    shortname = "caset",
    status = "ApplySetStatus",
    doc = "A cluster-scoped set of Kubernetes objects applied with server-side apply and pruned when no longer declared. The ClusterApplySet is the KEP-3659 ApplySet parent of its members.",
    validation = Rule::new("has(self.spec.serviceAccountName) == has(self.spec.serviceAccountNamespace)").message("spec.serviceAccountName and spec.serviceAccountNamespace go together: set both or neither"),
    validation = Rule::new("!has(self.spec.dependsOn) || self.spec.dependsOn.all(d, d.kind == 'ClusterApplySet' || has(d.namespace))").message("spec.dependsOn: a ClusterApplySet must name the namespace of an ApplySet it depends on"),
    label("applyset.kubernetes.io/is-parent-type", "true"),
    printcolumn = r#"{"name":"Ready","type":"string","description":"Ready condition status","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","description":"Ready condition reason","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason","priority":1}"#,
    printcolumn = r#"{"name":"Members","type":"integer","description":"Declared members","jsonPath":".status.summary.members"}"#,
    printcolumn = r#"{"name":"Pruned","type":"integer","description":"Objects pruned by the last reconcile","jsonPath":".status.summary.pruned"}"#,
    printcolumn = r#"{"name":"Age","type":"date","description":"Age","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(transparent)]
pub struct ClusterApplySetSpec(pub ApplySetSpec);

fn default_true() -> bool {
    true
}
fn default_interval() -> String {
    "10m".into()
}
fn default_retry_interval() -> String {
    "30s".into()
}
fn default_timeout() -> String {
    "5m".into()
}
/// What a reconcile does with the members.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum Mode {
    /// Write the members (server-side apply) and prune.
    #[default]
    Apply,
    /// Dry-run only: report in status.plan what Apply would do.
    Plan,
}

/// What happens to the members when the ApplySet is deleted.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum DeletionPolicy {
    /// Prune every member before the ApplySet goes away.
    #[default]
    Delete,
    /// Prune every member, then wait (at most spec.timeout) until they are gone before the
    /// ApplySet goes away.
    WaitForTermination,
    /// Prune every member when spec.prune is true; leave them in place when it is false.
    MirrorPrune,
    /// Leave the members in place.
    Orphan,
}
impl DeletionPolicy {
    /// Whether deleting the set deletes its members, `prune` being its `spec.prune`: Delete and
    /// WaitForTermination do, MirrorPrune as `prune` says, Orphan does not.
    pub fn deletes_members(self, prune: bool) -> bool {
        match self {
            Self::Delete | Self::WaitForTermination => true,
            Self::MirrorPrune => prune,
            Self::Orphan => false,
        }
    }

    /// Whether the deletion waits until the members it deleted are gone.
    pub fn waits_for_termination(self) -> bool {
        self == Self::WaitForTermination
    }
}

impl Default for ApplySetSpec {
    fn default() -> Self {
        // Same defaults as deserializing `{}`.
        Self {
            manifests: Vec::new(),
            sources: Vec::new(),
            target_namespace: None,
            prune: true,
            allow_empty: false,
            force: false,
            mode: Mode::Apply,
            interval: default_interval(),
            retry_interval: default_retry_interval(),
            timeout: default_timeout(),
            suspend: false,
            deletion_policy: DeletionPolicy::Delete,
            service_account_name: None,
            service_account_namespace: None,
            adopt_existing: false,
            take_over_field_managers: Vec::new(),
            wait: false,
            health_checks: Vec::new(),
            health_check_exprs: Vec::new(),
            ignore: Vec::new(),
            depends_on: Vec::new(),
            kustomize: None,
            post_build: None,
            decryption: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn which_deletion_policies_delete_and_wait() {
        use DeletionPolicy::*;
        for prune in [true, false] {
            assert!(Delete.deletes_members(prune));
            assert!(WaitForTermination.deletes_members(prune));
            assert_eq!(MirrorPrune.deletes_members(prune), prune);
            assert!(!Orphan.deletes_members(prune));
        }
        assert!(WaitForTermination.waits_for_termination());
        for p in [Delete, MirrorPrune, Orphan] {
            assert!(!p.waits_for_termination());
        }
    }
    use std::time::Duration;

    #[test]
    fn spec_defaults_match_an_empty_object() {
        let spec: ApplySetSpec = serde_json::from_str("{}").expect("empty spec");
        assert_eq!(spec, ApplySetSpec::default());
        assert!(spec.prune);
        assert_eq!(spec.interval(), Duration::from_secs(600));
        let min = Duration::from_secs(10);
        assert_eq!(spec.interval_at_least(min), Duration::from_secs(600));
        assert_eq!(spec.interval_raised(min), None);
        let fast = ApplySetSpec {
            interval: "1s".into(),
            ..ApplySetSpec::default()
        };
        assert_eq!(fast.interval_at_least(min), min);
        let said = fast.interval_raised(min).expect("raised");
        assert!(
            said.contains("spec.interval 1s is raised") && said.contains("10s (--min-interval)"),
            "{said}"
        );
        assert_eq!(spec.retry_interval(), Duration::from_secs(30));
        assert_eq!(spec.timeout(), Duration::from_secs(300));
    }

    #[test]
    fn cluster_spec_has_the_same_shape() {
        let json = serde_json::json!({"manifests": [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}}], "prune": false});
        let a: ApplySetSpec = serde_json::from_value(json.clone()).expect("spec");
        let c: ClusterApplySetSpec = serde_json::from_value(json).expect("cluster spec");
        assert_eq!(c.0, a);
    }
}

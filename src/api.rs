//! The API: `ApplySet` (namespaced) and `ClusterApplySet` (cluster-scoped) in
//! `applyset.dev/v1alpha1`. Both kinds share one spec and one status.

use std::{collections::BTreeMap, time::Duration};

use k8s_openapi::{
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    apimachinery::pkg::apis::meta::v1::Condition,
};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

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

    /// On deletion of this object: Delete prunes every member (in reverse dependency order)
    /// before the finalizer is removed; Orphan leaves them in place.
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

/// How a set decrypts its members (spec.decryption).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Decryption {
    /// The decryption provider: sops (the only one).
    pub provider: DecryptionProvider,
    /// The Secret with the age identities (entries ending in .agekey). An ApplySet's is in its
    /// own namespace; a ClusterApplySet must set namespace.
    pub secret_ref: SecretReference,
}

/// A decryption provider.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum DecryptionProvider {
    /// SOPS with age keys.
    #[serde(rename = "sops")]
    Sops,
}

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

/// Most entries `spec.manifests` may have (the CRD's `maxItems`, enforced by the API server):
/// the operator's default bound on members per set. Their size in all is bounded by the
/// operator (`--max-inline-manifests-kib`), since a schema can bound lists, strings and
/// mappings but not the size of an object whose fields it does not know.
pub const MAX_INLINE_MANIFESTS: usize = 10_000;

/// Most top-level fields an entry of `spec.manifests` may have (the CRD's `maxProperties`):
/// an object has a handful (apiVersion, kind, metadata, spec, data, ...).
pub const MAX_MANIFEST_FIELDS: usize = 64;

fn manifests_schema(_: &mut schemars::generate::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "description": "Inline Kubernetes objects, each a full object with apiVersion, kind and metadata.name. A `kind: List` is flattened into its items. At most 512 KiB of JSON in all (the operator's --max-inline-manifests-kib): more belongs in a source.",
        "maxItems": MAX_INLINE_MANIFESTS,
        "items": {"type": "object", "maxProperties": MAX_MANIFEST_FIELDS, "x-kubernetes-preserve-unknown-fields": true}
    })
}

/// Deepest nesting of mappings and lists a manifest may have (the object itself is level 1),
/// inline or in a source (the YAML reader's own bound is the same). Real objects stay far
/// below it; a deeper one could not be read back from the API server by JSON readers with a
/// recursion limit (serde_json's is 128).
pub const MAX_MANIFEST_DEPTH: usize = 64;

/// One entry of `spec.manifests` as read from the API server.
///
/// Reading a parent must never fail because of what a tenant declared: a parent that cannot
/// be read breaks the list and watch of every parent (the typed watcher fails the whole
/// list). So each entry is taken as raw JSON text (serde_json skips it without recursion) and
/// checked (its depth, and that it reads as JSON, without building a value); an entry that
/// cannot be read (nested deeper than [`MAX_MANIFEST_DEPTH`], or anything else a JSON reader
/// refuses) is kept as [`InlineManifest::Unreadable`], written back unchanged, and reported
/// by the reconcile of its own parent only.
///
/// A readable entry is kept as its text too ([`InlineManifest::Json`]) and read into a value
/// only when a reconcile renders the set ([`InlineManifest::value`]): the reflector keeps
/// every parent, and text costs one byte per byte the API server sent, where a parsed value
/// costs up to 16 (a list of small numbers: 32 bytes of `serde_json::Value` for every two
/// bytes of text) and a B-tree node per mapping.
#[derive(Clone, Debug)]
pub enum InlineManifest {
    /// The entry's JSON text, as read.
    Json(Box<serde_json::value::RawValue>),
    /// The entry could not be read: its raw JSON text and why.
    Unreadable {
        raw: Box<serde_json::value::RawValue>,
        problem: String,
    },
}

impl InlineManifest {
    /// Reads one entry from its raw JSON text: kept as text when it reads as a value, or why
    /// it cannot be one. Builds no value.
    pub fn from_raw(raw: Box<serde_json::value::RawValue>) -> Self {
        let depth = json_depth(raw.get());
        if depth > MAX_MANIFEST_DEPTH {
            let problem = format!(
                "it is nested {depth} levels deep, more than the {MAX_MANIFEST_DEPTH} levels a manifest may have; flatten it or remove it"
            );
            return InlineManifest::Unreadable { raw, problem };
        }
        match serde_json::from_str::<serde::de::IgnoredAny>(raw.get()) {
            Ok(_) => InlineManifest::Json(raw),
            Err(e) => InlineManifest::Unreadable {
                problem: unreadable_problem(&e),
                raw,
            },
        }
    }

    /// The entry as a JSON value (read from its text at each call), or why it cannot be one.
    pub fn value(&self) -> Result<serde_json::Value, UnreadableManifest> {
        match self {
            InlineManifest::Json(raw) => serde_json::from_str(raw.get())
                .map_err(|e| UnreadableManifest(unreadable_problem(&e))),
            InlineManifest::Unreadable { problem, .. } => Err(UnreadableManifest(problem.clone())),
        }
    }

    /// The length of the entry's JSON text in bytes.
    pub fn text_len(&self) -> usize {
        match self {
            InlineManifest::Json(raw) | InlineManifest::Unreadable { raw, .. } => raw.get().len(),
        }
    }
}

/// Why an inline manifest cannot be read as a JSON value (too deep, or not JSON).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct UnreadableManifest(pub String);

fn unreadable_problem(e: &serde_json::Error) -> String {
    format!("it cannot be read as JSON ({e}); fix it or remove it")
}

impl From<serde_json::Value> for InlineManifest {
    fn from(value: serde_json::Value) -> Self {
        // A `Value` always serializes (its keys are strings, its numbers finite).
        match serde_json::value::to_raw_value(&value) {
            Ok(raw) => InlineManifest::Json(raw),
            Err(e) => InlineManifest::Unreadable {
                raw: serde_json::value::RawValue::NULL.to_owned(),
                problem: unreadable_problem(&e),
            },
        }
    }
}

impl PartialEq for InlineManifest {
    /// Entries are equal when they read as equal values (texts may differ in spacing and the
    /// order of keys); unreadable ones when their texts are equal.
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (InlineManifest::Json(a), InlineManifest::Json(b)) => {
                a.get() == b.get()
                    || matches!((self.value(), other.value()), (Ok(x), Ok(y)) if x == y)
            }
            (
                InlineManifest::Unreadable { raw: a, .. },
                InlineManifest::Unreadable { raw: b, .. },
            ) => a.get() == b.get(),
            _ => false,
        }
    }
}

impl Serialize for InlineManifest {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            InlineManifest::Json(raw) | InlineManifest::Unreadable { raw, .. } => {
                raw.serialize(serializer)
            }
        }
    }
}

impl<'de> Deserialize<'de> for InlineManifest {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = Box::<serde_json::value::RawValue>::deserialize(deserializer)?;
        Ok(InlineManifest::from_raw(raw))
    }
}

/// The nesting depth of JSON text: how many mappings and lists are open at most (brackets
/// inside strings do not count). Text that is not JSON gives a meaningless but finite number.
pub fn json_depth(text: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for b in text.bytes() {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// One manifest source: exactly one of configMap, secret, http, git or oci.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "[has(self.configMap), has(self.secret), has(self.http), has(self.git), has(self.oci)].filter(x, x).size() == 1",
    "message": "each source must set exactly one of configMap, secret, http, git or oci"
}]))]
pub struct Source {
    /// Documents in the data keys of a ConfigMap: every key ending in .yaml, .yml or .json
    /// (in key order), or exactly the listed keys. A change of the ConfigMap triggers a
    /// reconcile at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map: Option<ObjectSource>,

    /// Documents in the data keys of a Secret, like configMap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<ObjectSource>,

    /// A YAML/JSON document or a .tar.gz/.tgz bundle of them, downloaded over HTTP(S) and
    /// checked again at every interval (with ETag / Last-Modified when the server sends them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpSource>,

    /// A directory of a Git repository at a branch, tag or commit (a shallow fetch of that
    /// one ref); the resolved commit is the revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git: Option<GitSource>,

    /// An OCI artifact whose layer is a tar.gz of manifests (as `flux push artifact` and ORAS
    /// produce); the manifest digest is the revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oci: Option<OciSource>,
}

/// A ConfigMap or Secret holding manifests.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObjectSource {
    /// Name of the ConfigMap or Secret.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,

    /// Its namespace. An ApplySet may only reference its own namespace (the default); a
    /// ClusterApplySet must set it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,

    /// The data keys to read, in this order. Empty: every key ending in .yaml, .yml or .json,
    /// sorted by name. A listed key that is missing is an error.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<String>,
}

/// A reference to a Secret with credentials.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretReference {
    /// Name of the Secret.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,

    /// Its namespace. An ApplySet may only reference its own namespace (the default); a
    /// ClusterApplySet must set it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// Manifests downloaded over HTTP(S).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HttpSource {
    /// http:// or https:// URL of a YAML/JSON document (multi-document YAML allowed) or of a
    /// .tar.gz/.tgz bundle (recognised by its content).
    #[schemars(regex(pattern = r"^https?://.+"))]
    pub url: String,

    /// Expected SHA-256 of the downloaded content (64 lowercase hex digits). A mismatch fails
    /// the source (SourceFailed) and nothing is applied; pinned content is downloaded once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[a-f0-9]{64}$"))]
    pub sha256: Option<String>,

    /// For a bundle: the directory inside it to read (recursively); default the whole bundle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,

    /// Secret with credentials: `token` (bearer token), or `username` and `password` (basic
    /// auth), and optionally `ca.crt` (PEM CA bundle trusted besides the system roots).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretReference>,
}

/// Manifests in a Git repository.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GitSource {
    /// Repository URL: https://, http://, ssh://user@host/path or user@host:path.
    #[schemars(length(min = 1))]
    pub url: String,

    /// The branch, tag or commit to read.
    #[serde(rename = "ref")]
    pub reference: GitReference,

    /// Directory inside the repository to read (recursively); default the whole repository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,

    /// Secret with credentials: for https `username` and `password` (or a token as password),
    /// optionally `ca.crt`; for ssh `identity` (a private key) and `known_hosts`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretReference>,
}

/// Exactly one of branch, tag or commit.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "[has(self.branch), has(self.tag), has(self.commit)].filter(x, x).size() == 1",
    "message": "ref must set exactly one of branch, tag or commit"
}]))]
pub struct GitReference {
    /// A branch; its head commit is read (and checked again at every interval).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,

    /// A tag (lightweight or annotated).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,

    /// A full commit SHA (40 hex digits); pinned content is fetched once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[a-f0-9]{40}$"))]
    pub commit: Option<String>,
}

/// An OCI artifact in a registry.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "has(self.tag) != has(self.digest)",
    "message": "oci must set exactly one of tag or digest"
}]))]
pub struct OciSource {
    /// oci://registry[:port]/repository
    #[schemars(regex(pattern = r"^oci://[^/]+/.+"))]
    pub url: String,

    /// A tag; the digest it points to is checked again at every interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,

    /// A manifest digest (sha256:<64 hex digits>); verified, and fetched once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^sha256:[a-f0-9]{64}$"))]
    pub digest: Option<String>,

    /// Directory inside the artifact's content to read (recursively); default all of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,

    /// Secret with registry credentials: `username` and `password`, or a
    /// `.dockerconfigjson` key (a kubernetes.io/dockerconfigjson Secret); optionally `ca.crt`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretReference>,

    /// Talk plain HTTP instead of HTTPS to the registry (only for a registry on a trusted
    /// network, e.g. a local development registry).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub insecure: bool,
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
    /// Leave the members in place.
    Orphan,
}

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
/// the status to `{observedGeneration: -1}` (see [`crds`]), as Flux's CRDs do, so that kstatus
/// (and Flux, Argo CD) reads a new set as in progress: its generation is never -1.
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
    /// Objects no longer declared but kept (applyset.dev/prune: disabled, or not ours).
    pub retained: i64,
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
    /// True when one of the lists was capped (at 500 entries, or shorter to keep the parent
    /// under 1 MiB).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
}

/// Parses a Go-style duration (`10m`, `1h30m`, `500ms`, `1.5h`); `None` when it is not one
/// or does not fit. Not kube's `kube::core::Duration` parser: it accepts the same text, but
/// panics on an amount too large for a `std::time::Duration` (it multiplies with
/// `Duration::mul_f64`), e.g. `99999999999999999999h`, and a spec is tenant input.
pub fn parse_duration(s: &str) -> Option<Duration> {
    let mut rest = s.trim();
    if rest.is_empty() {
        return None;
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let num_end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
        if num_end == 0 {
            return None;
        }
        let value: f64 = rest[..num_end].parse().ok()?;
        rest = &rest[num_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let factor = match &rest[..unit_end] {
            "ms" => 0.001,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        total += value * factor;
        rest = &rest[unit_end..];
    }
    Duration::try_from_secs_f64(total).ok()
}

/// Bounds on the durations (a zero interval would reconcile in a hot loop; a huge timeout
/// would overflow a deadline).
pub const MIN_DURATION: Duration = Duration::from_secs(1);
pub const MAX_INTERVAL: Duration = Duration::from_secs(7 * 24 * 3600);
pub const MAX_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

impl ApplySetSpec {
    /// `interval`, at least 1s and at most 7 days (10m if unparsable; the CRD's pattern
    /// prevents that).
    pub fn interval(&self) -> Duration {
        parse_duration(&self.interval)
            .unwrap_or(Duration::from_secs(600))
            .clamp(MIN_DURATION, MAX_INTERVAL)
    }

    /// The interval the operator uses: [`Self::interval`], at least `min` (the operator's
    /// `--min-interval`).
    pub fn interval_at_least(&self, min: Duration) -> Duration {
        self.interval().max(min)
    }

    /// What status says when `interval` is raised to `min`; `None` when it is not.
    pub fn interval_raised(&self, min: Duration) -> Option<String> {
        (self.interval() < min).then(|| {
            format!(
                "spec.interval {} is raised to the operator's minimum, {}s (--min-interval)",
                self.interval,
                min.as_secs()
            )
        })
    }
    /// `retryInterval`, at least 1s and at most `interval`.
    pub fn retry_interval(&self) -> Duration {
        parse_duration(&self.retry_interval)
            .unwrap_or(Duration::from_secs(30))
            .clamp(MIN_DURATION, self.interval())
    }
    /// `timeout`, at least 1s and at most 24h.
    pub fn timeout(&self) -> Duration {
        parse_duration(&self.timeout)
            .unwrap_or(Duration::from_secs(300))
            .clamp(MIN_DURATION, MAX_TIMEOUT)
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
            wait: false,
            health_checks: Vec::new(),
            depends_on: Vec::new(),
            kustomize: None,
            post_build: None,
            decryption: None,
        }
    }
}

/// Both CRDs, as installed: the generated schemas with their descriptions reflowed (see
/// [`reflow`]), so that `kubectl explain` prints paragraphs, and the status defaulted to
/// "not observed yet" (see [`default_status`]).
pub fn crds() -> Vec<CustomResourceDefinition> {
    use kube::CustomResourceExt;
    [ApplySet::crd(), ClusterApplySet::crd()]
        .into_iter()
        .map(|crd| {
            let mut value = match serde_json::to_value(&crd) {
                Ok(v) => v,
                Err(_) => return crd,
            };
            reflow_descriptions(&mut value["spec"]["versions"]);
            default_status(&mut value["spec"]["versions"]);
            serde_json::from_value(value).unwrap_or(crd)
        })
        .collect()
}

/// Both CRDs, as YAML documents (what `applyset-operator crd` prints).
pub fn crds_yaml() -> Result<String, serde_saphyr::SerializeError> {
    let mut out = String::new();
    for crd in crds() {
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(&crd)?);
    }
    Ok(out)
}

/// Gives the `status` of each version's schema (`versions`, the CRD's spec.versions) the
/// default `{observedGeneration: -1}` ([`NOT_OBSERVED`]). The API server applies it when the
/// object has no status (defaulting is applied on every read), so a set the operator has not
/// reconciled yet has observedGeneration < generation, which kstatus reads as InProgress.
fn default_status(versions: &mut serde_json::Value) {
    let Some(versions) = versions.as_array_mut() else {
        return;
    };
    for version in versions {
        if let Some(status) = version
            .pointer_mut("/schema/openAPIV3Schema/properties/status")
            .and_then(serde_json::Value::as_object_mut)
        {
            status.insert(
                "default".into(),
                serde_json::json!({"observedGeneration": NOT_OBSERVED}),
            );
        }
    }
}

/// Reflows every `description` string under `v` (the schemas of the CRD's versions).
fn reflow_descriptions(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(map) => {
            for (k, item) in map.iter_mut() {
                match item {
                    serde_json::Value::String(s) if k == "description" => *s = reflow(s),
                    _ => reflow_descriptions(item),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(reflow_descriptions),
        _ => {}
    }
}

/// A doc comment as a description: the line breaks of the source (comments wrap at 100
/// columns) become spaces, so `kubectl explain` wraps the text itself; a blank line (a new
/// paragraph) and a line break before a list item (`- `, `* `) stay.
pub fn reflow(doc: &str) -> String {
    let mut out = String::new();
    for (i, paragraph) in doc.split("\n\n").enumerate() {
        if i > 0 {
            out.push_str("\n\n");
        }
        for (j, line) in paragraph.lines().map(str::trim).enumerate() {
            if j > 0 {
                let item = line.starts_with("- ") || line.starts_with("* ");
                out.push(if item { '\n' } else { ' ' });
            }
            out.push_str(line);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reflow_joins_wrapped_lines_and_keeps_paragraphs_and_lists() {
        assert_eq!(reflow("One line."), "One line.");
        assert_eq!(
            reflow("Allow a reconcile. Without it such a\nreconcile is refused."),
            "Allow a reconcile. Without it such a reconcile is refused."
        );
        assert_eq!(
            reflow("First.\n\nSecond\nparagraph."),
            "First.\n\nSecond paragraph."
        );
        assert_eq!(
            reflow("Kinds:\n- ConfigMap\n- Secret, and\n  more"),
            "Kinds:\n- ConfigMap\n- Secret, and more"
        );
        assert_eq!(reflow("  padded \n  lines  "), "padded lines");
        assert_eq!(reflow(""), "");
    }

    #[test]
    fn the_crds_have_no_line_broken_mid_sentence() {
        let yaml = crds_yaml().expect("crds");
        let crds: Vec<serde_json::Value> = crds()
            .iter()
            .map(|c| serde_json::to_value(c).expect("json"))
            .collect();
        assert_eq!(crds.len(), 2);
        fn check(v: &serde_json::Value) {
            match v {
                serde_json::Value::Object(map) => {
                    for (k, item) in map {
                        if let (true, Some(s)) = (k == "description", item.as_str()) {
                            for line in s.split('\n').skip(1) {
                                assert!(
                                    line.is_empty()
                                        || line.starts_with("- ")
                                        || line.starts_with("* "),
                                    "a line broken mid-sentence: {s:?}"
                                );
                            }
                        } else {
                            check(item);
                        }
                    }
                }
                serde_json::Value::Array(items) => items.iter().for_each(check),
                _ => {}
            }
        }
        crds.iter().for_each(check);
        let allow_empty = &crds[0]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
            ["spec"]["properties"]["allowEmpty"]["description"];
        assert!(
            allow_empty
                .as_str()
                .is_some_and(|d| d.contains("Without it such a reconcile is refused")),
            "reflowed: {allow_empty}"
        );
        // The YAML may fold long lines (`>-`); parsed, they are the same text.
        let parsed: Vec<serde_json::Value> = yaml
            .split("---\n")
            .filter(|d| !d.trim().is_empty())
            .map(|d| serde_saphyr::from_str(d).expect("yaml"))
            .collect();
        assert_eq!(parsed, crds);
    }

    #[test]
    fn the_status_defaults_to_not_observed() {
        let mut versions = serde_json::json!([
            {"name": "v1", "schema": {"openAPIV3Schema": {"properties": {
                "spec": {"type": "object"},
                "status": {"type": "object", "nullable": true}}}}},
            {"name": "v2"},
        ]);
        default_status(&mut versions);
        assert_eq!(
            versions[0]["schema"]["openAPIV3Schema"]["properties"]["status"],
            serde_json::json!({"type": "object", "nullable": true,
                               "default": {"observedGeneration": -1}})
        );
        assert_eq!(
            versions[0]["schema"]["openAPIV3Schema"]["properties"]["spec"],
            serde_json::json!({"type": "object"}),
            "only the status is defaulted"
        );
        assert_eq!(
            versions[1],
            serde_json::json!({"name": "v2"}),
            "no schema, no default"
        );
        // Not an array: left alone.
        let mut other = serde_json::json!({"a": 1});
        default_status(&mut other);
        assert_eq!(other, serde_json::json!({"a": 1}));

        for crd in crds() {
            let crd = serde_json::to_value(&crd).expect("json");
            let status =
                &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"];
            assert_eq!(
                status["default"],
                serde_json::json!({"observedGeneration": NOT_OBSERVED}),
                "{}",
                crd["metadata"]["name"]
            );
            // The default is a valid status.
            let s: ApplySetStatus =
                serde_json::from_value(status["default"].clone()).expect("a status");
            assert_eq!(s.observed_generation, Some(NOT_OBSERVED));
        }
    }

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

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10m"), Some(Duration::from_secs(600)));
        assert_eq!(parse_duration("1h30m"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("1.5h"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_duration("30s"), Some(Duration::from_secs(30)));
        for bad in ["", "10", "m", "10x", "1h m", "-1s", "99999999999999999999h"] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
    }

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
    fn durations_are_clamped() {
        let spec = |i: &str, r: &str, t: &str| ApplySetSpec {
            interval: i.into(),
            retry_interval: r.into(),
            timeout: t.into(),
            ..Default::default()
        };
        let s = spec("0s", "0s", "0s");
        assert_eq!(
            (s.interval(), s.retry_interval(), s.timeout()),
            (MIN_DURATION, MIN_DURATION, MIN_DURATION)
        );
        let s = spec("3000000000000000h", "1m", "3000000000000000h");
        assert_eq!(s.interval(), MAX_INTERVAL);
        assert_eq!(s.timeout(), MAX_TIMEOUT);
        let s = spec("10s", "1h", "5m");
        assert_eq!(
            s.retry_interval(),
            Duration::from_secs(10),
            "retry never exceeds interval"
        );
    }

    #[test]
    fn json_depth_counts_open_brackets_outside_strings() {
        assert_eq!(json_depth("1"), 0);
        assert_eq!(json_depth("{}"), 1);
        assert_eq!(json_depth(r#"{"a":[{"b":[]}],"c":{}}"#), 4);
        assert_eq!(json_depth(r#"{"a":"[[[{{{\"[["}"#), 1);
        assert_eq!(json_depth("]]]}}}"), 0);
    }

    fn nested(depth: usize) -> String {
        let mut text = String::from("1");
        for _ in 0..depth {
            text = format!("{{\"a\":{text}}}");
        }
        text
    }

    #[test]
    fn a_manifest_nested_too_deep_is_unreadable_not_an_error_of_the_parent() {
        let deep = nested(MAX_MANIFEST_DEPTH + 1);
        let spec = format!(r#"{{"manifests":[{{"kind":"A"}},{deep}]}}"#);
        let spec: ApplySetSpec = serde_json::from_str(&spec).expect("the parent reads");
        assert_eq!(
            spec.manifests[0],
            InlineManifest::from(serde_json::json!({"kind": "A"}))
        );
        let InlineManifest::Unreadable { problem, .. } = &spec.manifests[1] else {
            panic!("unreadable expected: {:?}", spec.manifests[1]);
        };
        assert!(problem.contains("nested 65 levels deep"), "{problem}");
        // Written back unchanged.
        let back = serde_json::to_value(&spec).expect("serializes");
        assert_eq!(back["manifests"][1].to_string(), deep);
        // Far beyond serde_json's recursion limit too, and from a Value.
        let deeper = nested(1000);
        let spec = format!(r#"{{"manifests":[{deeper}]}}"#);
        let spec: ApplySetSpec = serde_json::from_str(&spec).expect("the parent reads");
        assert!(matches!(
            spec.manifests[0],
            InlineManifest::Unreadable { .. }
        ));
        let at_limit = nested(MAX_MANIFEST_DEPTH);
        let value: serde_json::Value =
            serde_json::from_str(&format!(r#"{{"manifests":[{at_limit}]}}"#)).expect("json");
        let spec: ApplySetSpec = serde_json::from_value(value).expect("from a value");
        assert!(matches!(spec.manifests[0], InlineManifest::Json(_)));
    }

    #[test]
    fn cluster_spec_has_the_same_shape() {
        let json = serde_json::json!({"manifests": [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}}], "prune": false});
        let a: ApplySetSpec = serde_json::from_value(json.clone()).expect("spec");
        let c: ClusterApplySetSpec = serde_json::from_value(json).expect("cluster spec");
        assert_eq!(c.0, a);
    }
}

// ---------------------------------------------------------------------------------------------
// spec.kustomize and spec.postBuild (kustomize overlays and post-build substitution)

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

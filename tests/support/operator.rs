//! Helpers for the end-to-end controller tests: CRD installation, an in-process operator per
//! test (isolated by a label selector and the test's namespace), ApplySet / ClusterApplySet
//! handles built from `serde_json` specs, waits that print the parent's status when they time
//! out, and small builders for member manifests.
//!
//! Used from a test file as `use support::operator::*;` after `mod support;`.
#![allow(dead_code)] // each test binary uses its own subset

use std::{
    collections::{BTreeMap, BTreeSet},
    future::Future,
    sync::atomic::{AtomicU32, Ordering},
    time::Duration,
};

use applyset_operator::{
    api::{ApplySet, ApplySetStatus, ClusterApplySet},
    controller::{Config, Operator},
    sources::egress::Policy,
};
use base64::Engine as _;
use k8s_openapi::{
    api::core::v1::{ConfigMap, Namespace, Secret, Service},
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    apimachinery::pkg::apis::meta::v1::Condition,
};
use kube::{
    Api, Client, ResourceExt,
    api::{
        ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
        PostParams,
    },
};
use serde_json::{Value, json};
use sha2::Digest as _;

use super::{cluster, test_namespace, wait_for};

/// Typical deadline of a wait.
pub const DEADLINE: Duration = Duration::from_secs(60);
/// Deadline for waits that include CRD establishment or hundreds of members.
pub const LONG_DEADLINE: Duration = Duration::from_secs(120);

/// Label that isolates the parents of one test (the operator's label selector).
pub const TEST_LABEL: &str = "applyset.dev/test";

pub const LABEL_ID: &str = "applyset.kubernetes.io/id";
pub const LABEL_PART_OF: &str = "applyset.kubernetes.io/part-of";
pub const ANNOTATION_TOOLING: &str = "applyset.kubernetes.io/tooling";
pub const ANNOTATION_GROUP_KINDS: &str = "applyset.kubernetes.io/contains-group-kinds";
pub const ANNOTATION_NAMESPACES: &str = "applyset.kubernetes.io/additional-namespaces";
pub const ANNOTATION_PRUNE: &str = "applyset.dev/prune";
pub const FINALIZER: &str = "applyset.dev/cleanup";
pub const PARENT_MANAGER: &str = "applyset.dev/parent";

static UNIQUE: AtomicU32 = AtomicU32::new(0);

/// A name unique in this cluster across tests and test binaries: `<prefix>-<pid>-<n>`.
pub fn unique(prefix: &str) -> String {
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        UNIQUE.fetch_add(1, Ordering::SeqCst)
    )
}

// ---------------------------------------------------------------------------------------------
// CRDs

/// Installs the ApplySet and ClusterApplySet CRDs (create, ignoring AlreadyExists) and waits
/// until both are Established. Safe to call from several tests at once.
pub async fn ensure_crds(client: &Client) {
    for crd in applyset_operator::api::crds() {
        install_crd(client, &crd).await;
    }
}

/// Creates `crd` (ignoring AlreadyExists) and waits until it is Established.
pub async fn install_crd(client: &Client, crd: &CustomResourceDefinition) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let name = crd.name_any();
    match crds.create(&PostParams::default(), crd).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("installing CRD {name}: {e}"),
    }
    wait_established(client, &name, DEADLINE).await;
}

/// Waits until CRD `name` is Established.
pub async fn wait_established(client: &Client, name: &str, timeout: Duration) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    wait_for(&format!("CRD {name} to be Established"), timeout, || {
        let crds = crds.clone();
        let name = name.to_owned();
        async move {
            let c = crds.get_opt(&name).await.ok()??;
            c.status?
                .conditions?
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
                .then_some(())
        }
    })
    .await
}

// ---------------------------------------------------------------------------------------------
// Conventions computed independently of the implementation (docs/design.md §3.2, §5)

/// `applyset-` + base64url-no-pad(sha256(`<name>.<namespace>.<Kind>.<group>`)) + `-v1`,
/// computed here with sha2 + base64 directly, not with the crate's own function.
pub fn compute_id(name: &str, namespace: &str, kind: &str, group: &str) -> String {
    let input = format!("{name}.{namespace}.{kind}.{group}");
    let hash = sha2::Sha256::digest(input.as_bytes());
    format!(
        "applyset-{}-v1",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(hash)
    )
}

/// The ID of ApplySet `namespace/name`.
pub fn applyset_id(namespace: &str, name: &str) -> String {
    compute_id(name, namespace, "ApplySet", "applyset.dev")
}

/// The ID of ClusterApplySet `name`.
pub fn cluster_applyset_id(name: &str) -> String {
    compute_id(name, "", "ClusterApplySet", "applyset.dev")
}

// ---------------------------------------------------------------------------------------------
// The test harness: client, namespace, isolation label, operator

pub struct Harness {
    pub client: Client,
    /// The test's own namespace (the operator's watch namespace).
    pub ns: String,
    /// Value of the `applyset.dev/test` label on every parent of this test.
    pub label: String,
}

impl Harness {
    /// A client, the CRDs, a namespace of its own and a unique isolation label.
    pub async fn new(prefix: &str) -> Harness {
        let client = cluster().client().await;
        ensure_crds(&client).await;
        let ns = test_namespace(&client, prefix).await;
        let label = unique(prefix);
        Harness { client, ns, label }
    }

    /// Another namespace for this test.
    pub async fn extra_namespace(&self, prefix: &str) -> String {
        test_namespace(&self.client, prefix).await
    }

    /// The operator configuration isolating this test. Loopback, refused to sources by
    /// default, is exempt (`--source-allow-cidrs 127.0.0.0/8,::1`): the tests' servers
    /// listen there.
    pub fn config(&self) -> Config {
        Config {
            concurrency: 4,
            apply_concurrency: 8,
            watch_namespace: Some(self.ns.clone()),
            label_selector: Some(format!("{TEST_LABEL}={}", self.label)),
            source_policy: loopback_exempt(Policy::default()),
            // The tests' sets reconcile every few seconds (--min-interval lowered).
            min_interval: Duration::from_secs(1),
            ..Default::default()
        }
    }

    /// Starts an operator for this test on the current runtime.
    pub fn start_operator(&self) -> Operator {
        Operator::start(self.client.clone(), self.config())
    }

    /// Starts an operator that lets ApplySets acting with its own identity reach beyond
    /// their namespace (`--allow-cross-namespace-sets`), for tests of other things that use
    /// such sets.
    pub fn start_operator_cross_namespace(&self) -> Operator {
        let mut config = self.config();
        config.tenancy.allow_cross_namespace = true;
        Operator::start(self.client.clone(), config)
    }

    /// Starts an operator with `apply_concurrency` member requests per parent.
    pub fn start_operator_with_apply_concurrency(&self, apply_concurrency: usize) -> Operator {
        let mut config = self.config();
        config.apply_concurrency = apply_concurrency;
        Operator::start(self.client.clone(), config)
    }

    /// Handle of ApplySet `name` in the test namespace (not created yet).
    pub fn applyset(&self, name: &str) -> Parent {
        Parent {
            client: self.client.clone(),
            cluster: false,
            namespace: Some(self.ns.clone()),
            name: name.to_owned(),
            label: self.label.clone(),
        }
    }

    /// Handle of ClusterApplySet `name` (not created yet); `name` should come from [`unique`].
    pub fn cluster_applyset(&self, name: &str) -> Parent {
        Parent {
            client: self.client.clone(),
            cluster: true,
            namespace: None,
            name: name.to_owned(),
            label: self.label.clone(),
        }
    }
}

/// `policy` with loopback exempt from the default refusals (`--source-allow-cidrs`), for
/// sources served by the tests' own loopback servers.
pub fn loopback_exempt(policy: Policy) -> Policy {
    policy
        .with_allowed_cidrs(&["127.0.0.0/8", "::1"])
        .expect("valid ranges")
}

/// Shuts the operator down gracefully; a shutdown that does not finish in 30 s fails the test.
pub async fn stop(op: Operator) {
    tokio::time::timeout(Duration::from_secs(30), op.shutdown())
        .await
        .expect("Operator::shutdown did not finish within 30 s");
}

/// Waits until the operator has finished at least `n` more reconciles than now.
///
/// A reconcile in flight now may be the first of them (it is counted when it ends), so this
/// proves "a reconcile that began after this call has ended" only with `n >= 2` and one set
/// reconciling (reconciles of one set never overlap: the second to end began after the
/// first ended). Assert the effect of a reconcile (its status, the objects) where there is
/// one; this is for proving that nothing happened over a window that holds a reconcile.
pub async fn wait_reconciles(op: &Operator, n: u64) {
    let metrics = op.metrics();
    let base = metrics.reconciles();
    let target = base + n;
    let m = metrics.clone();
    let r = tokio::time::timeout(
        DEADLINE,
        wait_for(
            &format!("{n} more reconciles"),
            DEADLINE + Duration::from_secs(5),
            || {
                let m = m.clone();
                async move { (m.reconciles() >= target).then_some(()) }
            },
        ),
    )
    .await;
    if r.is_err() {
        panic!(
            "timed out after {DEADLINE:?} waiting for {n} more reconciles: the operator finished {} (was {base} when the wait began)",
            metrics.reconciles()
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Parents

/// A handle of an ApplySet or ClusterApplySet of this test.
#[derive(Clone)]
pub struct Parent {
    pub client: Client,
    pub cluster: bool,
    pub namespace: Option<String>,
    pub name: String,
    pub label: String,
}

impl Parent {
    pub fn kind(&self) -> &'static str {
        if self.cluster {
            "ClusterApplySet"
        } else {
            "ApplySet"
        }
    }

    pub fn api_resource(&self) -> ApiResource {
        if self.cluster {
            ApiResource::erase::<ClusterApplySet>(&())
        } else {
            ApiResource::erase::<ApplySet>(&())
        }
    }

    pub fn api(&self) -> Api<DynamicObject> {
        let ar = self.api_resource();
        match &self.namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &ar),
            None => Api::all_with(self.client.clone(), &ar),
        }
    }

    /// `ApplySet ns/name` or `ClusterApplySet name`.
    pub fn display(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{} {ns}/{}", self.kind(), self.name),
            None => format!("{} {}", self.kind(), self.name),
        }
    }

    /// The ID, computed by the test (docs/design.md §3.2).
    pub fn id(&self) -> String {
        match &self.namespace {
            Some(ns) => applyset_id(ns, &self.name),
            None => cluster_applyset_id(&self.name),
        }
    }

    /// The member field manager (docs/design.md §5; names in these tests are short).
    pub fn manager(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("applyset.dev/ns/{ns}/{}", self.name),
            None => format!("applyset.dev/cluster/{}", self.name),
        }
    }

    /// Creates the parent with `spec`, labelled for this test. `interval: 5s` and
    /// `retryInterval: 1s` are added unless `spec` sets them.
    pub async fn create(&self, spec: Value) -> DynamicObject {
        self.create_with(json!({}), json!({}), spec).await
    }

    /// Like [`Parent::create`] with extra labels and annotations on the parent.
    pub async fn create_with(
        &self,
        labels: Value,
        annotations: Value,
        spec: Value,
    ) -> DynamicObject {
        let mut spec = spec;
        let s = spec.as_object_mut().expect("spec is a JSON object");
        s.entry("interval").or_insert(json!("5s"));
        s.entry("retryInterval").or_insert(json!("1s"));
        let mut all_labels = labels;
        all_labels
            .as_object_mut()
            .expect("labels is a JSON object")
            .insert(TEST_LABEL.into(), json!(self.label));
        let mut metadata = json!({"name": self.name, "labels": all_labels});
        if annotations.as_object().is_some_and(|a| !a.is_empty()) {
            metadata["annotations"] = annotations;
        }
        if let Some(ns) = &self.namespace {
            metadata["namespace"] = json!(ns);
        }
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "applyset.dev/v1alpha1",
            "kind": self.kind(),
            "metadata": metadata,
            "spec": spec,
        }))
        .expect("parent object");
        self.api()
            .create(&PostParams::default(), &obj)
            .await
            .unwrap_or_else(|e| panic!("creating {}: {e}", self.display()))
    }

    /// JSON merge patch of the spec (lists such as `manifests` are replaced whole); returns
    /// the new generation.
    pub async fn patch_spec(&self, spec: Value) -> i64 {
        let obj = self
            .api()
            .patch(
                &self.name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "spec": spec })),
            )
            .await
            .unwrap_or_else(|e| panic!("patching the spec of {}: {e}", self.display()));
        obj.metadata.generation.expect("generation")
    }

    /// JSON merge patch of the metadata (e.g. `{"labels": {"k": null}}`).
    pub async fn patch_metadata(&self, metadata: Value) {
        self.api()
            .patch(
                &self.name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "metadata": metadata })),
            )
            .await
            .unwrap_or_else(|e| panic!("patching the metadata of {}: {e}", self.display()));
    }

    pub async fn get(&self) -> Option<DynamicObject> {
        self.api()
            .get_opt(&self.name)
            .await
            .unwrap_or_else(|e| panic!("reading {}: {e}", self.display()))
    }

    /// The live parent; panics when it does not exist.
    pub async fn live(&self) -> DynamicObject {
        self.get()
            .await
            .unwrap_or_else(|| panic!("{} does not exist", self.display()))
    }

    pub async fn status(&self) -> Option<ApplySetStatus> {
        let obj = self.get().await?;
        parse_status(&obj)
    }

    /// Metadata (labels, annotations, generation, finalizers) and status of the parent as
    /// pretty JSON, for failure messages.
    pub async fn describe(&self) -> String {
        match self.api().get_opt(&self.name).await {
            Ok(Some(obj)) => {
                let v = json!({
                    "generation": obj.metadata.generation,
                    "resourceVersion": obj.metadata.resource_version,
                    "labels": obj.metadata.labels,
                    "annotations": obj.metadata.annotations,
                    "finalizers": obj.metadata.finalizers,
                    "deletionTimestamp": obj.metadata.deletion_timestamp,
                    "status": obj.data.get("status"),
                });
                serde_json::to_string_pretty(&v).unwrap_or_default()
            }
            Ok(None) => "<the parent does not exist>".into(),
            Err(e) => format!("<reading the parent failed: {e}>"),
        }
    }

    /// Polls `check` against the live parent (and its parsed status) until it returns `Some`;
    /// on timeout panics with `what` and the parent's metadata and status.
    pub async fn wait_until<T, F>(&self, what: &str, timeout: Duration, mut check: F) -> T
    where
        F: FnMut(&DynamicObject, Option<&ApplySetStatus>) -> Option<T>,
    {
        let api = self.api();
        let name = self.name.clone();
        let fut = async {
            loop {
                if let Ok(Some(obj)) = api.get_opt(&name).await {
                    let status = parse_status(&obj);
                    if let Some(v) = check(&obj, status.as_ref()) {
                        return v;
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        };
        match tokio::time::timeout(timeout, fut).await {
            Ok(v) => v,
            Err(_) => panic!(
                "timed out after {timeout:?} waiting for {what} on {}; the parent is now:\n{}",
                self.display(),
                self.describe().await
            ),
        }
    }

    /// Asserts that `read` of the parent's status stays what it is now for `window`, polling;
    /// returns that value. Nothing happening can only be shown over a window: take it after
    /// the last write that was due has been observed, so that no write in flight can land in
    /// it.
    pub async fn assert_steady<T, F>(&self, what: &str, window: Duration, read: F) -> T
    where
        T: PartialEq + std::fmt::Debug,
        F: Fn(&ApplySetStatus) -> T,
    {
        let now = || async { self.status().await.map(|st| read(&st)) };
        let first = now().await;
        let end = tokio::time::Instant::now() + window;
        while tokio::time::Instant::now() < end {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let seen = now().await;
            assert_eq!(
                seen,
                first,
                "{what} changed within {window:?} on {}; the parent is now:\n{}",
                self.display(),
                self.describe().await
            );
        }
        first.unwrap_or_else(|| panic!("{} has no status", self.display()))
    }

    /// Waits until the status describes the current generation and its `Ready` condition has
    /// `reason` (and `status`, when given). Returns that status.
    pub async fn wait_ready_reason(&self, status: Option<&str>, reason: &str) -> ApplySetStatus {
        self.wait_ready_reason_within(status, reason, DEADLINE)
            .await
    }

    pub async fn wait_ready_reason_within(
        &self,
        status: Option<&str>,
        reason: &str,
        timeout: Duration,
    ) -> ApplySetStatus {
        let what = match status {
            Some(s) => format!("Ready={s} reason {reason} for the current generation"),
            None => format!("Ready reason {reason} for the current generation"),
        };
        self.wait_until(&what, timeout, |obj, st| {
            let st = st?;
            let generation = obj.metadata.generation?;
            if st.observed_generation != Some(generation) {
                return None;
            }
            let ready = condition(st, "Ready")?;
            if ready.reason != reason {
                return None;
            }
            if let Some(s) = status
                && ready.status != s
            {
                return None;
            }
            Some(st.clone())
        })
        .await
    }

    /// Waits for `Ready=True`, reason `ReconciliationSucceeded`, for the current generation.
    pub async fn wait_ready(&self) -> ApplySetStatus {
        self.wait_ready_reason(Some("True"), "ReconciliationSucceeded")
            .await
    }

    pub async fn wait_ready_within(&self, timeout: Duration) -> ApplySetStatus {
        self.wait_ready_reason_within(Some("True"), "ReconciliationSucceeded", timeout)
            .await
    }

    /// Deletes the parent (background propagation).
    pub async fn delete(&self) {
        self.api()
            .delete(&self.name, &DeleteParams::background())
            .await
            .unwrap_or_else(|e| panic!("deleting {}: {e}", self.display()));
    }

    /// Waits until the parent no longer exists.
    pub async fn wait_gone(&self, timeout: Duration) {
        let api = self.api();
        let name = self.name.clone();
        let fut = async {
            loop {
                if let Ok(None) = api.get_opt(&name).await {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        };
        if tokio::time::timeout(timeout, fut).await.is_err() {
            panic!(
                "timed out after {timeout:?} waiting for {} to be gone; it is now:\n{}",
                self.display(),
                self.describe().await
            );
        }
    }

    pub async fn label(&self, key: &str) -> Option<String> {
        self.live().await.labels().get(key).cloned()
    }

    pub async fn annotation(&self, key: &str) -> Option<String> {
        self.live().await.annotations().get(key).cloned()
    }
}

/// The parsed `.status` of a parent (panics when the status does not match the API types).
pub fn parse_status(obj: &DynamicObject) -> Option<ApplySetStatus> {
    let v = obj.data.get("status")?;
    if v.is_null() {
        return None;
    }
    Some(
        serde_json::from_value(v.clone())
            .unwrap_or_else(|e| panic!("status does not parse as ApplySetStatus ({e}): {v}")),
    )
}

/// The condition of `type_` in `status`.
pub fn condition<'a>(status: &'a ApplySetStatus, type_: &str) -> Option<&'a Condition> {
    status.conditions.iter().find(|c| c.type_ == type_)
}

/// Pretty JSON of a status, for messages.
pub fn status_json(status: &ApplySetStatus) -> String {
    serde_json::to_string_pretty(status).unwrap_or_default()
}

/// The `Ready` condition (panics with the status when absent).
pub fn ready(status: &ApplySetStatus) -> &Condition {
    condition(status, "Ready")
        .unwrap_or_else(|| panic!("no Ready condition in status:\n{}", status_json(status)))
}

/// Asserts the condition `type_` has status `expected`.
pub fn assert_condition(status: &ApplySetStatus, type_: &str, expected: &str) {
    let c = condition(status, type_)
        .unwrap_or_else(|| panic!("no {type_} condition in status:\n{}", status_json(status)));
    assert_eq!(
        c.status,
        expected,
        "{type_} condition status; status:\n{}",
        status_json(status)
    );
}

/// The summary (panics with the status when absent).
pub fn summary(status: &ApplySetStatus) -> applyset_operator::api::Summary {
    status
        .summary
        .clone()
        .unwrap_or_else(|| panic!("no summary in status:\n{}", status_json(status)))
}

// ---------------------------------------------------------------------------------------------
// Members

pub fn gvk_resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

pub fn configmap_ar() -> ApiResource {
    ApiResource::erase::<ConfigMap>(&())
}
pub fn secret_ar() -> ApiResource {
    ApiResource::erase::<Secret>(&())
}
pub fn service_ar() -> ApiResource {
    ApiResource::erase::<Service>(&())
}
pub fn namespace_ar() -> ApiResource {
    ApiResource::erase::<Namespace>(&())
}
pub fn crd_ar() -> ApiResource {
    ApiResource::erase::<CustomResourceDefinition>(&())
}
pub fn deployment_ar() -> ApiResource {
    gvk_resource("apps", "v1", "Deployment", "deployments")
}
pub fn clusterrole_ar() -> ApiResource {
    gvk_resource(
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRole",
        "clusterroles",
    )
}

/// An API for `ar` in `namespace` (None: cluster-scoped, or all namespaces).
pub fn dyn_api(client: &Client, ar: &ApiResource, namespace: Option<&str>) -> Api<DynamicObject> {
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, ar),
        None => Api::all_with(client.clone(), ar),
    }
}

/// The live object, or None.
pub async fn get_obj(
    client: &Client,
    ar: &ApiResource,
    namespace: Option<&str>,
    name: &str,
) -> Option<DynamicObject> {
    match dyn_api(client, ar, namespace).get_opt(name).await {
        Ok(o) => o,
        // Also "404 page not found": the resource itself is not served (its CRD is gone).
        Err(kube::Error::Api(s)) if s.code == 404 => None,
        Err(e) => panic!("reading {} {namespace:?}/{name}: {e}", ar.kind),
    }
}

/// The live object; panics when it does not exist.
pub async fn must_get(
    client: &Client,
    ar: &ApiResource,
    namespace: Option<&str>,
    name: &str,
) -> DynamicObject {
    get_obj(client, ar, namespace, name)
        .await
        .unwrap_or_else(|| panic!("{} {namespace:?}/{name} should exist but does not", ar.kind))
}

/// Whether the object exists.
pub async fn exists(
    client: &Client,
    ar: &ApiResource,
    namespace: Option<&str>,
    name: &str,
) -> bool {
    get_obj(client, ar, namespace, name).await.is_some()
}

/// The resourceVersion of an object that must exist.
pub async fn rv(client: &Client, ar: &ApiResource, namespace: Option<&str>, name: &str) -> String {
    must_get(client, ar, namespace, name)
        .await
        .resource_version()
        .expect("resourceVersion")
}

/// Names of the objects of `ar` labelled `part-of=<id>` in `namespace` (None: all namespaces
/// or cluster-scoped), via a metadata-only list.
pub async fn list_part_of(
    client: &Client,
    ar: &ApiResource,
    namespace: Option<&str>,
    id: &str,
) -> BTreeSet<String> {
    dyn_api(client, ar, namespace)
        .list_metadata(&ListParams::default().labels(&format!("{LABEL_PART_OF}={id}")))
        .await
        .unwrap_or_else(|e| panic!("listing {} labelled part-of={id}: {e}", ar.kind))
        .items
        .iter()
        .map(|m| m.name_any())
        .collect()
}

/// `(manager, operation)` of every managedFields entry.
pub fn managers(obj: &DynamicObject) -> Vec<(String, String)> {
    obj.managed_fields()
        .iter()
        .map(|m| {
            (
                m.manager.clone().unwrap_or_default(),
                m.operation.clone().unwrap_or_default(),
            )
        })
        .collect()
}

/// Asserts the object has label `part-of=<id>` and an `Apply` managedFields entry by
/// `manager`, and no other `applyset.dev/` manager.
pub fn assert_member_of(obj: &DynamicObject, id: &str, manager: &str) {
    let what = format!(
        "{} {}/{}",
        obj.types
            .as_ref()
            .map(|t| t.kind.as_str())
            .unwrap_or("object"),
        obj.namespace().unwrap_or_default(),
        obj.name_any()
    );
    assert_eq!(
        obj.labels().get(LABEL_PART_OF).map(String::as_str),
        Some(id),
        "{what}: label {LABEL_PART_OF}; labels: {:?}",
        obj.labels()
    );
    let ms = managers(obj);
    assert!(
        ms.iter().any(|(m, op)| m == manager && op == "Apply"),
        "{what}: expected a managedFields entry by {manager:?} with operation Apply; managers: {ms:?}"
    );
    let ours: BTreeSet<&str> = ms
        .iter()
        .map(|(m, _)| m.as_str())
        .filter(|m| m.starts_with("applyset.dev/"))
        .collect();
    assert_eq!(
        ours,
        BTreeSet::from([manager]),
        "{what}: the only applyset.dev/ manager must be its own parent's; managers: {ms:?}"
    );
}

/// Server-side applies `obj` with `manager` (without force).
pub async fn ssa(
    client: &Client,
    ar: &ApiResource,
    namespace: Option<&str>,
    manager: &str,
    obj: Value,
) -> DynamicObject {
    let name = obj["metadata"]["name"].as_str().expect("name").to_owned();
    dyn_api(client, ar, namespace)
        .patch(&name, &PatchParams::apply(manager), &Patch::Apply(obj))
        .await
        .unwrap_or_else(|e| panic!("applying {} {name} as {manager}: {e}", ar.kind))
}

/// Resource versions of a set of objects, keyed by `kind/namespace/name`.
pub async fn resource_versions(
    client: &Client,
    objs: &[(ApiResource, Option<String>, String)],
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (ar, ns, name) in objs {
        out.insert(
            format!("{}/{}/{name}", ar.kind, ns.as_deref().unwrap_or("")),
            rv(client, ar, ns.as_deref(), name).await,
        );
    }
    out
}

/// The note of the newest event with `reason` in `namespace` whose note contains `part`,
/// waited for (events are published after the status they describe is written).
pub async fn event_note(client: &Client, namespace: &str, reason: &str, part: &str) -> String {
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(client.clone(), namespace);
    let what = format!("an event {reason} whose note has {part:?}");
    wait_for(&what, DEADLINE, || async {
        let list = events.list(&ListParams::default()).await.ok()?;
        list.items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some(reason))
            .filter_map(|e| e.note)
            .rfind(|n| n.contains(part))
    })
    .await
}

/// Polls an arbitrary async condition with a deadline (thin wrapper over `support::wait_for`).
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    wait_for(what, timeout, check).await
}

/// Creates namespaced RBAC objects (ServiceAccount, Role, RoleBinding) in `namespace`.
pub async fn create_rbac(h: &Harness, namespace: &str, items: &[Value]) {
    for item in items {
        let kind = item["kind"].as_str().unwrap_or_default();
        let ar = match kind {
            "ServiceAccount" => gvk_resource("", "v1", kind, "serviceaccounts"),
            "Role" => gvk_resource("rbac.authorization.k8s.io", "v1", kind, "roles"),
            _ => gvk_resource("rbac.authorization.k8s.io", "v1", kind, "rolebindings"),
        };
        let api: kube::Api<kube::api::DynamicObject> =
            kube::Api::namespaced_with(h.client.clone(), namespace, &ar);
        let obj: kube::api::DynamicObject =
            serde_json::from_value(item.clone()).expect("an object");
        api.create(&PostParams::default(), &obj)
            .await
            .unwrap_or_else(|e| panic!("create the {kind} in {namespace}: {e}"));
    }
}

// ---------------------------------------------------------------------------------------------
// Manifest builders

pub fn configmap(name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data})
}

pub fn configmap_in(namespace: &str, name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace}, "data": data})
}

/// A Secret with one key (`data` is base64 of "secret").
pub fn secret(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
        "type": "Opaque", "data": {"token": "c2VjcmV0"}})
}

pub fn secret_in(namespace: &str, name: &str) -> Value {
    let mut s = secret(name);
    s["metadata"]["namespace"] = json!(namespace);
    s
}

pub fn service(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
        "spec": {"selector": {"app": name},
                 "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]}})
}

pub fn deployment(name: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {"replicas": 1,
                 "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]}}}})
}

pub fn cluster_role(name: &str) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}]})
}

pub fn namespace(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
}

/// A namespaced `Widget` CRD in `group` (plural `widgets`, version v1).
pub fn widget_crd(group: &str) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("widgets.{group}")},
        "spec": {
            "group": group,
            "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "listKind": "WidgetList"},
            "scope": "Namespaced",
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {"size": {"type": "integer"}}}}}}}]
        }
    })
}

pub fn widget(group: &str, namespace: &str, name: &str, size: i64) -> Value {
    json!({"apiVersion": format!("{group}/v1"), "kind": "Widget",
        "metadata": {"name": name, "namespace": namespace}, "spec": {"size": size}})
}

pub fn widget_ar(group: &str) -> ApiResource {
    gvk_resource(group, "v1", "Widget", "widgets")
}

/// A unique API group for a test CRD.
pub fn unique_group() -> String {
    format!("{}.example.com", unique("g").replace('-', ""))
}

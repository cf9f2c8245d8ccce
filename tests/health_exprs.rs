//! CEL health checks (`spec.healthCheckExprs`, docs/apply-controls.md "CEL health checks") on
//! the real API server: custom resources of our own whose status has the shapes of Flux's
//! cheatsheet (a cert-manager-like Ready condition, Rook's `status.ceph.health`, Crossplane's
//! Synced=False with reason ReconcileError) are marked Current, in progress and failed by
//! their set's expressions; a bad expression and one for Secrets are refused before anything
//! is applied; a pathological expression is stopped by the cost bound while another set still
//! reconciles. The tests write the status subresource themselves, as the controllers would.

mod support;

use support::operator;

use applyset_operator::api::ApplySetStatus;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api, Client,
    api::{ApiResource, DynamicObject, Patch, PatchParams, PostParams},
};
use operator::*;
use serde_json::{Value, json};

/// A namespaced CRD of kind `kind` in `group`, with a status subresource.
fn crd(group: &str, kind: &str) -> Value {
    let plural = format!("{}s", kind.to_lowercase());
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {
            "group": group,
            "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase(),
                "listKind": format!("{kind}List")},
            "scope": "Namespaced",
            "versions": [{"name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}]
        }
    })
}

/// Creates the CRDs of `kinds` in `group` and waits until they are established; their
/// resources.
async fn create_crds(client: &Client, group: &str, kinds: &[&str]) -> Vec<ApiResource> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut resources = Vec::new();
    for kind in kinds {
        let c: CustomResourceDefinition = serde_json::from_value(crd(group, kind)).expect("a CRD");
        crds.create(&PostParams::default(), &c)
            .await
            .unwrap_or_else(|e| panic!("create the {kind} CRD: {e}"));
        let plural = format!("{}s", kind.to_lowercase());
        wait_established(client, &format!("{plural}.{group}"), LONG_DEADLINE).await;
        resources.push(gvk_resource(group, "v1", kind, &plural));
    }
    resources
}

async fn delete_crds(client: &Client, resources: &[ApiResource]) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for r in resources {
        let _ = crds
            .delete(&format!("{}.{}", r.plural, r.group), &Default::default())
            .await;
    }
}

/// Writes `status` (replacing it) to the status subresource of `name`, with
/// `observedGeneration` set to its generation.
async fn write_status(client: &Client, ar: &ApiResource, ns: &str, name: &str, mut status: Value) {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, ar);
    let obj = api
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("get {name}: {e}"));
    status["observedGeneration"] = json!(obj.metadata.generation);
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": status})),
    )
    .await
    .unwrap_or_else(|e| panic!("writing the status of {name}: {e}"));
}

fn object(group: &str, kind: &str, name: &str) -> Value {
    json!({"apiVersion": format!("{group}/v1"), "kind": kind, "metadata": {"name": name},
        "spec": {"size": 1}})
}

fn condition(type_: &str, status: &str, reason: &str) -> Value {
    json!({"type": type_, "status": status, "reason": reason, "message": "m"})
}

/// Waits until the `Healthy` condition has `status` and `reason`; returns its message and
/// the set's status.
async fn healthy_is(set: &Parent, status: &str, reason: &str) -> (String, ApplySetStatus) {
    set.wait_until(
        &format!("Healthy={status} ({reason})"),
        DEADLINE,
        |_, st| {
            let st = st?;
            let c = support::operator::condition(st, "Healthy")?;
            (c.status == status && c.reason == reason).then(|| (c.message.clone(), st.clone()))
        },
    )
    .await
}

const READY_FALSE: &str =
    "status.conditions.filter(e, e.type == 'Ready').all(e, e.status == 'False')";
const READY_TRUE: &str =
    "status.conditions.filter(e, e.type == 'Ready').all(e, e.status == 'True')";

#[tokio::test]
async fn expressions_mark_custom_resources_current_in_progress_and_failed() {
    let h = Harness::new("cel-health").await;
    let group = unique_group();
    let ars = create_crds(&h.client, &group, &["Certificate", "CephCluster", "Role"]).await;
    let op = h.start_operator();
    let set = h.applyset(&unique("cel"));
    let api_version = format!("{group}/v1");
    set.create(json!({"wait": true, "interval": "1h",
        "healthCheckExprs": [
            {"apiVersion": api_version, "kind": "Certificate", "failed": READY_FALSE, "current": READY_TRUE},
            {"apiVersion": api_version, "kind": "CephCluster",
             "inProgress": "status.ceph.health == 'HEALTH_WARN'",
             "failed": "status.ceph.health == 'HEALTH_ERR'",
             "current": "status.ceph.health == 'HEALTH_OK'"},
            {"apiVersion": api_version, "kind": "Role",
             "failed": "status.conditions.filter(e, e.type == 'Synced').all(e, e.status == 'False' && e.reason == 'ReconcileError')",
             "current": READY_TRUE}],
        "manifests": [object(&group, "Certificate", "cert"), object(&group, "CephCluster", "ceph"),
            object(&group, "Role", "role")]}))
        .await;
    // Without a status the expressions cannot be evaluated (no `status` variable): Unknown,
    // where the built-in rules would call them Current.
    let (msg, _) = healthy_is(&set, "Unknown", "Unknown").await;
    assert!(
        msg.contains("cannot assess: spec.healthCheckExprs["),
        "{msg}"
    );
    let ready = |s: &str| json!({"conditions": [condition("Ready", s, "R")]});
    write_status(&h.client, &ars[0], &h.ns, "cert", ready("True")).await;
    write_status(
        &h.client,
        &ars[1],
        &h.ns,
        "ceph",
        json!({"ceph": {"health": "HEALTH_OK"}}),
    )
    .await;
    write_status(
        &h.client,
        &ars[2],
        &h.ns,
        "role",
        json!({"conditions": [
        condition("Synced", "True", "ReconcileSuccess"), condition("Ready", "True", "Available")]}),
    )
    .await;
    set.wait_ready().await;
    healthy_is(&set, "True", "Current").await;

    // In progress: the certificate's readiness unknown; Rook's HEALTH_WARN (no condition:
    // the built-in rules would call it Current).
    write_status(&h.client, &ars[0], &h.ns, "cert", ready("Unknown")).await;
    write_status(
        &h.client,
        &ars[1],
        &h.ns,
        "ceph",
        json!({"ceph": {"health": "HEALTH_WARN"}}),
    )
    .await;
    let health = set
        .wait_until("2 objects in progress", DEADLINE, |_, st| {
            let st = st?;
            let c = support::operator::condition(st, "Healthy")?;
            let health = st.health.clone()?;
            (c.reason == "Progressing" && health.in_progress == 2).then_some(health)
        })
        .await;
    assert_eq!(health.current, 1);
    let messages: Vec<&str> = health
        .not_current
        .iter()
        .map(|o| o.message.as_str())
        .collect();
    assert!(
        messages.contains(&"in progress: spec.healthCheckExprs[1].inProgress is true"),
        "{messages:?}"
    );
    assert!(
        messages.contains(&"no expression of spec.healthCheckExprs[0] is true yet"),
        "{messages:?}"
    );

    // Failed: Crossplane's Synced=False with reason ReconcileError, although Ready is True.
    write_status(
        &h.client,
        &ars[2],
        &h.ns,
        "role",
        json!({"conditions": [
        condition("Synced", "False", "ReconcileError"), condition("Ready", "True", "Available")]}),
    )
    .await;
    let (msg, _) = healthy_is(&set, "False", "HealthCheckFailed").await;
    assert!(
        msg.contains(&format!(
            "Role.{group} {}/role: failed: spec.healthCheckExprs[2].failed is true",
            h.ns
        )),
        "{msg}"
    );
    stop(op).await;
    delete_crds(&h.client, &ars).await;
}

#[tokio::test]
async fn bad_expressions_and_expressions_for_secrets_are_refused_before_any_apply() {
    let h = Harness::new("cel-refused").await;
    let op = h.start_operator();
    let set = h.applyset(&unique("cel-bad"));
    set.create(json!({"wait": true,
        "healthCheckExprs": [{"apiVersion": "example.com/v1", "kind": "Widget", "current": "status.("}],
        "manifests": [configmap("first", json!({"k": "v"}))]}))
        .await;
    let st = set
        .wait_ready_reason(Some("False"), "ValidationFailed")
        .await;
    let msg = &support::operator::ready(&st).message;
    assert!(
        msg.contains("spec.healthCheckExprs[0].current: does not parse: 1:"),
        "{msg}"
    );
    let cms = dyn_api(&h.client, &configmap_ar(), Some(&h.ns));
    assert!(
        cms.get_opt("first").await.expect("get").is_none(),
        "nothing applied"
    );

    let generation = set
        .patch_spec(json!({"healthCheckExprs": [
            {"apiVersion": "v1", "kind": "Secret", "current": "has(data.password)"}]}))
        .await;
    let st = set
        .wait_until(
            "ValidationFailed for the new generation",
            DEADLINE,
            |_, st| {
                let st = st?;
                let r = support::operator::ready(st);
                (r.observed_generation == Some(generation) && r.reason == "ValidationFailed")
                    .then(|| st.clone())
            },
        )
        .await;
    let msg = &support::operator::ready(&st).message;
    assert!(
        msg.contains("spec.healthCheckExprs[0]: Secrets are never assessed by expression"),
        "{msg}"
    );
    assert!(
        cms.get_opt("first").await.expect("get").is_none(),
        "nothing applied"
    );
    stop(op).await;
}

#[tokio::test]
async fn a_pathological_expression_is_stopped_by_the_cost_bound() {
    let h = Harness::new("cel-cost").await;
    let group = unique_group();
    let ars = create_crds(&h.client, &group, &["Gadget"]).await;
    let op = h.start_operator();
    let set = h.applyset(&unique("cel-cost"));
    set.create(json!({"wait": true, "interval": "1h",
        "healthCheckExprs": [{"apiVersion": format!("{group}/v1"), "kind": "Gadget",
            "current": "status.items.all(a, status.items.all(b, a + b >= 0))"}],
        "manifests": [object(&group, "Gadget", "g")]}))
        .await;
    // Applied; Unknown without a status.
    healthy_is(&set, "Unknown", "Unknown").await;
    // A small list: evaluated.
    let items = |n: usize| json!({"items": (0..n).collect::<Vec<_>>()});
    write_status(&h.client, &ars[0], &h.ns, "g", items(10)).await;
    healthy_is(&set, "True", "Current").await;
    // A list of 2000 entries: 2000² iterations are estimated over the budget, and the
    // object is Unknown, never evaluated.
    write_status(&h.client, &ars[0], &h.ns, "g", items(2000)).await;
    let (msg, _) = healthy_is(&set, "Unknown", "Unknown").await;
    assert!(
        msg.contains("cannot assess: spec.healthCheckExprs[0]: cost limit exceeded: estimated"),
        "{msg}"
    );
    assert!(msg.contains("a list or map of 2000 entries"), "{msg}");
    // The operator stays responsive: another set reconciles.
    let other = h.applyset(&unique("other"));
    other
        .create(json!({"manifests": [configmap("other", json!({"k": "v"}))]}))
        .await;
    other.wait_ready().await;
    // New expressions assess the object again, although it did not change.
    set.patch_spec(
        json!({"healthCheckExprs": [{"apiVersion": format!("{group}/v1"),
        "kind": "Gadget", "current": "size(status.items) == 2000"}]}),
    )
    .await;
    healthy_is(&set, "True", "Current").await;
    stop(op).await;
    delete_crds(&h.client, &ars).await;
}

#[tokio::test]
async fn objects_of_health_checks_are_assessed_by_the_checking_sets_expressions() {
    let h = Harness::new("cel-checks").await;
    let group = unique_group();
    let ars = create_crds(&h.client, &group, &["CephCluster"]).await;
    // Another tool's object, checked by the set.
    let api: Api<DynamicObject> = Api::namespaced_with(h.client.clone(), &h.ns, &ars[0]);
    let external: DynamicObject =
        serde_json::from_value(object(&group, "CephCluster", "ceph")).expect("object");
    api.create(&PostParams::default(), &external)
        .await
        .expect("create the external CephCluster");
    write_status(
        &h.client,
        &ars[0],
        &h.ns,
        "ceph",
        json!({"ceph": {"health": "HEALTH_ERR"}}),
    )
    .await;
    let op = h.start_operator();
    let set = h.applyset(&unique("checks"));
    set.create(json!({"interval": "1h",
        "healthChecks": [{"apiVersion": format!("{group}/v1"), "kind": "CephCluster", "name": "ceph"}],
        "healthCheckExprs": [{"apiVersion": format!("{group}/v1"),
            "failed": "status.ceph.health == 'HEALTH_ERR'",
            "current": "status.ceph.health == 'HEALTH_OK'"}],
        "manifests": [configmap("app", json!({"k": "v"}))]}))
        .await;
    // Without a Ready condition the built-in rules would call it Current.
    let (msg, _) = healthy_is(&set, "False", "HealthCheckFailed").await;
    assert!(
        msg.contains("failed: spec.healthCheckExprs[0].failed is true"),
        "{msg}"
    );
    write_status(
        &h.client,
        &ars[0],
        &h.ns,
        "ceph",
        json!({"ceph": {"health": "HEALTH_OK"}}),
    )
    .await;
    healthy_is(&set, "True", "Current").await;
    stop(op).await;
    delete_crds(&h.client, &ars).await;
}

//! Health (docs/health.md): `spec.wait` and `spec.healthChecks` on the real API server. The control
//! plane has no nodes and runs no workload controllers, so the tests write the members' status
//! subresource themselves, as the Deployment and Job controllers would; custom resources with
//! conditions exercise the generic rules.

mod support;

use support::operator;

use std::time::{Duration, Instant};

use applyset_operator::api::ApplySetStatus;
use kube::{
    Api, Client,
    api::{DynamicObject, Patch, PatchParams, PostParams},
};
use operator::*;
use serde_json::{Value, json};

/// Writes `status` (merged) to the status subresource of `name`, as its controller would,
/// with `observedGeneration` set to its current generation.
async fn write_status(
    client: &Client,
    ar: &kube::api::ApiResource,
    ns: &str,
    name: &str,
    mut status: Value,
) {
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

/// A Deployment's status once its one replica is available.
fn available() -> Value {
    json!({"replicas": 1, "updatedReplicas": 1, "readyReplicas": 1, "availableReplicas": 1,
        "conditions": [
            {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
            {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}]})
}

/// A Deployment's status once its rollout exceeded its progress deadline.
fn stuck() -> Value {
    json!({"replicas": 1, "updatedReplicas": 1, "readyReplicas": 0, "availableReplicas": 0,
        "unavailableReplicas": 1,
        "conditions": [
            {"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable"},
            {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
             "message": "ReplicaSet \"web-1\" has timed out progressing."}]})
}

fn job(name: &str) -> Value {
    json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
        "spec": {"backoffLimit": 0, "template": {"spec": {"restartPolicy": "Never",
            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]}}}})
}

fn job_ar() -> kube::api::ApiResource {
    gvk_resource("batch", "v1", "Job", "jobs")
}

/// A namespaced `Gadget` CRD in `group` with a status subresource (its controller writes
/// conditions there).
fn gadget_crd(group: &str) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("gadgets.{group}")},
        "spec": {
            "group": group,
            "names": {"kind": "Gadget", "plural": "gadgets", "singular": "gadget", "listKind": "GadgetList"},
            "scope": "Namespaced",
            "versions": [{"name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}]
        }
    })
}

fn healthy(st: &ApplySetStatus) -> Option<(String, String, String)> {
    condition(st, "Healthy").map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// Waits until the `Healthy` condition has `status`; returns the status it is in.
async fn wait_healthy(set: &Parent, status: &str) -> ApplySetStatus {
    set.wait_until(&format!("Healthy={status}"), DEADLINE, |_, st| {
        st.filter(|st| healthy(st).is_some_and(|h| h.0 == status))
            .cloned()
    })
    .await
}

/// Waits until `Ready` has `status` and `reason` for the current generation.
async fn wait_ready_is(set: &Parent, status: &str, reason: &str) -> ApplySetStatus {
    set.wait_ready_reason(Some(status), reason).await
}

/// How long a status must stay as it is to show that no reconcile ran: a reconcile the
/// watches triggered would write within it.
const SETTLE: Duration = Duration::from_secs(5);

#[tokio::test]
async fn a_set_that_waits_is_ready_once_its_deployment_is_available_and_its_health_stays_current() {
    let h = Harness::new("health-wait").await;
    let op = h.start_operator();
    let set = h.applyset(&unique("web"));
    // No reconcile on a timer (interval 1h; the tests' default is 5s): what happens below is
    // driven by the watches alone. A failure is retried after 2s.
    set.create(
        json!({"wait": true, "timeout": "10m", "interval": "1h", "retryInterval": "2s",
        "manifests": [configmap("settings", json!({"k": "v"})), deployment("web")]}),
    )
    .await;
    let web = format!("Deployment.apps {}/web", h.ns);

    // Applied, the Deployment not available yet: Ready=Unknown (Progressing), naming it.
    let st = wait_ready_is(&set, "Unknown", "Progressing").await;
    let msg = &ready(&st).message;
    assert!(
        msg.contains("waiting: 1 of 2 not current") && msg.contains(&web),
        "{msg}"
    );
    assert_condition(&st, "Reconciling", "True");
    assert!(condition(&st, "Stalled").is_none(), "{}", status_json(&st));
    let health = set
        .wait_until(
            "status.health with one member in progress",
            DEADLINE,
            |_, st| {
                st?.health
                    .clone()
                    .filter(|hs| hs.in_progress == 1 && hs.current == 1)
            },
        )
        .await;
    assert_eq!(health.not_current[0].object, web);
    assert_eq!(health.not_current[0].status, "InProgress");

    // The Deployment controller reports the replica available: Ready, promptly (driven by
    // the watch; the requeue would come only at the 10m timeout).
    let since = Instant::now();
    write_status(&h.client, &deployment_ar(), &h.ns, "web", available()).await;
    let st = set.wait_ready().await;
    assert!(
        since.elapsed() < Duration::from_secs(30),
        "took {:?}",
        since.elapsed()
    );
    assert!(
        ready(&st).message.ends_with("; 2 of 2 current"),
        "{}",
        ready(&st).message
    );
    assert!(
        condition(&st, "Reconciling").is_none(),
        "{}",
        status_json(&st)
    );
    let st = wait_healthy(&set, "True").await;
    assert_eq!(
        st.health.as_ref().map(|h| (h.current, h.not_current.len())),
        Some((2, 0))
    );
    let ready_before = ready(&st).clone();

    // An hour later (say) the rollout gets stuck: Healthy turns False with the reason, from
    // the watch alone — no reconcile runs (a status written by the member's controller is
    // not drift).
    write_status(&h.client, &deployment_ar(), &h.ns, "web", stuck()).await;
    let st = wait_healthy(&set, "False").await;
    let (_, reason, message) = healthy(&st).unwrap_or_default();
    assert_eq!(reason, "HealthCheckFailed");
    assert!(
        message.contains(&web) && message.contains("timed out progressing"),
        "{message}"
    );
    assert_eq!(st.health.as_ref().map(|h| h.failed), Some(1));
    // No reconcile ran: Ready is still the last reconcile's outcome, written before the
    // rollout got stuck, and stays so. A reconcile now would make it False
    // (HealthCheckFailed), as the requested one below does. This cannot race with the
    // reconcile that wrote Ready=True: its status write was observed above, and it writes
    // nothing after it.
    let steady = set
        .assert_steady("Ready (no reconcile runs)", SETTLE, |st| ready(st).clone())
        .await;
    assert_eq!(
        steady, ready_before,
        "Ready is the last reconcile's outcome"
    );

    // The next reconcile (here requested) reports it: Ready=False, HealthCheckFailed, not
    // Stalled (retried).
    set.patch_metadata(json!({"annotations": {"applyset.dev/reconcile-requested-at": "1"}}))
        .await;
    let st = wait_ready_is(&set, "False", "HealthCheckFailed").await;
    assert!(ready(&st).message.contains(&web), "{}", ready(&st).message);
    assert!(condition(&st, "Stalled").is_none(), "{}", status_json(&st));

    // Recovered: Ready again on the retry.
    write_status(&h.client, &deployment_ar(), &h.ns, "web", available()).await;
    set.wait_ready().await;

    // No longer waiting: Healthy and status.health go.
    set.patch_spec(json!({"wait": false})).await;
    set.wait_ready().await;
    set.wait_until(
        "no Healthy condition and no status.health",
        DEADLINE,
        |_, st| {
            st.filter(|st| healthy(st).is_none() && st.health.is_none())
                .map(|_| ())
        },
    )
    .await;
    stop(op).await;
}

#[tokio::test]
async fn a_failed_job_fails_the_wait_and_a_timeout_too() {
    let h = Harness::new("health-fail").await;
    let op = h.start_operator();
    let set = h.applyset(&unique("job"));
    set.create(json!({"wait": true, "manifests": [job("migrate")]}))
        .await;
    wait_ready_is(&set, "Unknown", "Progressing").await;
    let failed = json!({"failed": 1, "startTime": "2026-01-01T00:00:00Z", "conditions": [
        {"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded",
         "message": "Job has reached the specified backoff limit"},
        {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
         "message": "Job has reached the specified backoff limit"}]});
    write_status(&h.client, &job_ar(), &h.ns, "migrate", failed).await;
    let st = wait_ready_is(&set, "False", "HealthCheckFailed").await;
    let msg = &ready(&st).message;
    assert!(
        msg.contains(&format!("Job.batch {}/migrate", h.ns)) && msg.contains("1 failed"),
        "{msg}"
    );
    assert!(condition(&st, "Stalled").is_none(), "retried, not stalled");

    // A Deployment that never becomes available within spec.timeout.
    let slow = h.applyset(&unique("slow"));
    slow.create(json!({"wait": true, "timeout": "2s", "manifests": [deployment("slow")]}))
        .await;
    let st = wait_ready_is(&slow, "False", "HealthCheckFailed").await;
    let msg = &ready(&st).message;
    assert!(
        msg.contains("not healthy within spec.timeout (2s)"),
        "{msg}"
    );
    assert!(
        msg.contains(&format!("Deployment.apps {}/slow", h.ns)),
        "{msg}"
    );
    stop(op).await;
}

#[tokio::test]
async fn health_checks_assess_objects_that_are_not_members() {
    let h = Harness::new("health-checks").await;
    // A Deployment another tool manages.
    let deployments: Api<DynamicObject> =
        Api::namespaced_with(h.client.clone(), &h.ns, &deployment_ar());
    let external: DynamicObject = serde_json::from_value(deployment("database")).expect("object");
    deployments
        .create(&PostParams::default(), &external)
        .await
        .expect("create the external Deployment");
    let op = h.start_operator();
    let set = h.applyset(&unique("app"));
    set.create(json!({
        "healthChecks": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "database"}],
        "manifests": [configmap("app", json!({"k": "v"}))]}))
        .await;
    // Waited for although the set does not wait for its own members.
    let st = wait_ready_is(&set, "Unknown", "Progressing").await;
    assert!(
        ready(&st)
            .message
            .contains(&format!("Deployment.apps {}/database", h.ns)),
        "{}",
        ready(&st).message
    );
    write_status(&h.client, &deployment_ar(), &h.ns, "database", available()).await;
    let st = set.wait_ready().await;
    assert!(
        ready(&st).message.ends_with("; 1 of 1 current"),
        "{}",
        ready(&st).message
    );
    let st = wait_healthy(&set, "True").await;
    assert_eq!(
        st.health.as_ref().map(|h| h.current),
        Some(1),
        "only the checked object"
    );
    // The checked object is not a member: it was not labelled or changed.
    let live = deployments.get("database").await.expect("get");
    assert!(
        !live
            .metadata
            .labels
            .unwrap_or_default()
            .contains_key(LABEL_PART_OF)
    );

    // A check of a kind the cluster does not serve, and one outside the set's namespace
    // (the set acts as the operator): refused, naming the entry.
    set.patch_spec(
        json!({"healthChecks": [{"apiVersion": "example.com/v1", "kind": "Nothing", "name": "x"}]}),
    )
    .await;
    let st = wait_ready_is(&set, "False", "ValidationFailed").await;
    assert!(
        ready(&st)
            .message
            .contains("spec.healthChecks[0]: example.com/v1 Nothing is not served"),
        "{}",
        ready(&st).message
    );
    set.patch_spec(json!({"healthChecks": [
        {"apiVersion": "apps/v1", "kind": "Deployment", "name": "database", "namespace": "kube-system"}]}))
        .await;
    let st = wait_ready_is(&set, "False", "ValidationFailed").await;
    assert!(
        ready(&st).message.contains(
            "spec.healthChecks[0]: Deployment.apps kube-system/database is in namespace kube-system"
        ),
        "{}",
        ready(&st).message
    );
    stop(op).await;
}

#[tokio::test]
async fn custom_resources_are_assessed_by_their_conditions() {
    let h = Harness::new("health-generic").await;
    let group = unique_group();
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(h.client.clone());
    crds.create(
        &PostParams::default(),
        &serde_json::from_value(gadget_crd(&group)).expect("crd"),
    )
    .await
    .expect("create the Gadget CRD");
    wait_established(&h.client, &format!("gadgets.{group}"), LONG_DEADLINE).await;
    let ar = gvk_resource(&group, "v1", "Gadget", "gadgets");
    let op = h.start_operator();
    let set = h.applyset(&unique("gadgets"));
    // No reconcile on a timer (interval 1h): Healthy below follows the watch alone.
    set.create(json!({"wait": true, "interval": "1h", "manifests": [
        {"apiVersion": format!("{group}/v1"), "kind": "Gadget", "metadata": {"name": "g"}, "spec": {"size": 1}}]}))
        .await;
    // Without status a custom resource is current once it exists (kstatus's generic rules).
    set.wait_ready().await;
    let healthy_is = |want: &'static str, reason: &'static str| {
        let set = set.clone();
        async move {
            set.wait_until(&format!("Healthy={want} ({reason})"), DEADLINE, |_, st| {
                let st = st?;
                healthy(st)
                    .filter(|h| h.0 == want && h.1 == reason)
                    .map(|h| h.2)
            })
            .await
        }
    };
    healthy_is("True", "Current").await;
    let ready_before = ready(&set.status().await.expect("a status")).clone();
    // Its controller says it is not ready yet, then that it is stuck, then ready.
    write_status(&h.client, &ar, &h.ns, "g", json!({"conditions": [
        {"type": "Ready", "status": "False", "reason": "Provisioning", "message": "waiting for a volume"}]}))
        .await;
    let msg = healthy_is("Unknown", "Progressing").await;
    assert!(
        msg.contains("waiting for a volume") || msg.contains("Provisioning"),
        "{msg}"
    );
    write_status(&h.client, &ar, &h.ns, "g", json!({"conditions": [
        {"type": "Ready", "status": "False", "reason": "Provisioning", "message": "waiting for a volume"},
        {"type": "Stalled", "status": "True", "reason": "QuotaExceeded", "message": "no volume left"}]}))
        .await;
    let msg = healthy_is("False", "HealthCheckFailed").await;
    assert!(msg.contains("no volume left"), "{msg}");
    write_status(
        &h.client,
        &ar,
        &h.ns,
        "g",
        json!({"conditions": [
        {"type": "Ready", "status": "True", "reason": "Provisioned", "message": "ready"}]}),
    )
    .await;
    healthy_is("True", "Current").await;
    // Kept current without a reconcile: Ready is the one written before the first change
    // (the same transition time), and stays so. A reconcile while the Gadget was not ready or
    // stuck would have made it Unknown or False, moving its transition time. This cannot
    // race with the reconcile that wrote it: its status write was observed before the
    // changes began.
    let steady = set
        .assert_steady("Ready (no reconcile runs)", SETTLE, |st| ready(st).clone())
        .await;
    assert_eq!(steady, ready_before, "kept current without a reconcile");
    stop(op).await;
    crds.delete(&format!("gadgets.{group}"), &Default::default())
        .await
        .expect("delete the CRD");
}

#[tokio::test]
async fn sets_waiting_for_their_health_hold_no_worker() {
    let h = Harness::new("health-workers").await;
    // The test operator runs 4 reconciles at once; 6 sets wait at the same time.
    let op = h.start_operator();
    let mut waiting = Vec::new();
    for i in 0..6 {
        let set = h.applyset(&unique(&format!("w{i}")));
        set.create(
            json!({"wait": true, "timeout": "10m", "manifests": [deployment(&format!("d{i}"))]}),
        )
        .await;
        waiting.push(set);
    }
    for set in &waiting {
        wait_ready_is(set, "Unknown", "Progressing").await;
    }
    let plain = h.applyset(&unique("plain"));
    plain
        .create(json!({"manifests": [configmap("plain", json!({"k": "v"}))]}))
        .await;
    plain.wait_ready().await;
    stop(op).await;
}

/// How many times `reason` was published about `set` (an event repeated is one object with a
/// series count).
async fn published(h: &Harness, set: &str, reason: &str) -> i32 {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(h.client.clone(), &h.ns);
    let list = events.list(&Default::default()).await.expect("list events");
    list.items
        .iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(set))
        .map(|e| e.series.as_ref().map_or(1, |s| s.count))
        .sum()
}

#[tokio::test]
async fn a_restarted_operator_does_not_flip_a_healthy_set() {
    let h = Harness::new("health-restart").await;
    let op = h.start_operator();
    let set = h.applyset(&unique("steady"));
    set.create(
        json!({"wait": true, "manifests": [deployment("web"), configmap("c", json!({"k": "v"}))]}),
    )
    .await;
    wait_ready_is(&set, "Unknown", "Progressing").await;
    write_status(&h.client, &deployment_ar(), &h.ns, "web", available()).await;
    set.wait_ready().await;
    let before = wait_healthy(&set, "True").await;
    stop(op).await;
    let waited = published(&h, &set.name, "Progressing").await;
    assert!(waited >= 1, "the first wait was announced");

    // A new operator process (empty watches, no records of its applies) reconciles the set
    // again: neither Ready nor Healthy goes through Unknown on the way (it decides on what its
    // watches observed, waiting a moment for them to list, rather than on members it has not
    // seen yet).
    let op = h.start_operator();
    set.patch_metadata(
        json!({"annotations": {"applyset.dev/reconcile-requested-at": "after-restart"}}),
    )
    .await;
    let after = set
        .wait_until("the requested reconcile, Ready", DEADLINE, |_, st| {
            let st = st?;
            (st.last_handled_reconcile_at.as_deref() == Some("after-restart")
                && ready(st).status == "True")
                .then(|| st.clone())
        })
        .await;
    assert_eq!(
        ready(&after).last_transition_time,
        ready(&before).last_transition_time
    );
    assert_eq!(
        published(&h, &set.name, "Progressing").await,
        waited,
        "Ready did not go through Progressing again:\n{}",
        status_json(&after)
    );
    let healthy = |st: &ApplySetStatus| {
        condition(st, "Healthy").map(|c| (c.status.clone(), c.last_transition_time.clone()))
    };
    assert_eq!(
        healthy(&after),
        healthy(&before),
        "Healthy stayed True throughout"
    );
    stop(op).await;
}

#[tokio::test]
async fn members_of_kinds_the_operator_cannot_watch_are_read_instead() {
    let h = Harness::new("health-rbac").await;
    // The operator runs as a ServiceAccount with every right in the test's namespace and
    // none cluster-wide (as the chart's namespaced RBAC): its cluster-wide member watches are
    // forbidden, so the health of the set's Deployment comes from GETs in the namespace.
    let rbac = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "operator"}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "operator"},
         "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "operator"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "operator"},
         "subjects": [{"kind": "ServiceAccount", "name": "operator", "namespace": h.ns}]}]});
    let items: Vec<Value> = rbac["items"].as_array().cloned().unwrap_or_default();
    create_rbac(&h, &h.ns, &items).await;
    let client = support::cluster()
        .service_account_client(&h.ns, "operator")
        .await;
    let op = applyset_operator::controller::Operator::start(client, h.config());
    let set = h.applyset(&unique("limited"));
    set.create(json!({"wait": true, "timeout": "10m", "manifests": [deployment("web")]}))
        .await;
    let st = wait_ready_is(&set, "Unknown", "Progressing").await;
    assert!(
        ready(&st)
            .message
            .contains(&format!("Deployment.apps {}/web: 0 of 1 replicas", h.ns)),
        "read with a GET, not 'not observed yet': {}",
        ready(&st).message
    );
    // No watch event reaches the operator: the waiting set reads its members again (every
    // 10 s) and becomes Ready.
    write_status(&h.client, &deployment_ar(), &h.ns, "web", available()).await;
    set.wait_ready().await;
    stop(op).await;
}

#[tokio::test]
async fn a_rollout_step_held_back_is_written_a_moment_later() {
    let h = Harness::new("health-detail").await;
    let op = h.start_operator();
    let set = h.applyset(&unique("two"));
    let mut two = deployment("web");
    two["spec"]["replicas"] = json!(2);
    // No reconcile on a timer (interval 1h): only the reporter writes status.health here.
    set.create(json!({"wait": true, "timeout": "10m", "interval": "1h", "manifests": [two]}))
        .await;
    wait_ready_is(&set, "Unknown", "Progressing").await;
    let step = |available: i64| {
        json!({"replicas": 2, "updatedReplicas": 2, "readyReplicas": available,
            "availableReplicas": available})
    };
    // Two steps of the rollout in quick succession: the same Healthy status (Unknown), only
    // the message changes. The second is held back (at most one such write per set every few
    // seconds) and then written.
    write_status(&h.client, &deployment_ar(), &h.ns, "web", step(0)).await;
    set.wait_until("0 of 2 available in status.health", DEADLINE, |_, st| {
        let hs = st?.health.clone()?;
        (hs.not_current.first()?.message == "0 of 2 replicas available").then_some(())
    })
    .await;
    write_status(&h.client, &deployment_ar(), &h.ns, "web", step(1)).await;
    set.wait_until("1 of 2 available in status.health", DEADLINE, |_, st| {
        let hs = st?.health.clone()?;
        (hs.not_current.first()?.message == "1 of 2 replicas available").then_some(())
    })
    .await;
    stop(op).await;
}

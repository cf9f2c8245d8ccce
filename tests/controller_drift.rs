//! End to end: what happens between spec changes. Member watches correct drift at once (not
//! at the next interval); a reconcile whose set is unchanged sends no write request; the
//! reconcile-requested-at annotation starts a reconcile without a spec change; a namespace
//! being terminated is not fought (what is deleted there is not re-applied).

mod support;

use support::operator;

use std::{sync::Arc, time::Duration};

use applyset_operator::{controller::Operator, metrics::Metrics};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    Api,
    api::{DeleteParams, Patch, PatchParams},
};
use operator::*;
use serde_json::json;
use support::{cluster, wait_for};

/// An operator whose requests are counted (as the binary's are).
async fn counted_operator(h: &Harness) -> (Operator, Arc<Metrics>) {
    let metrics = Arc::new(Metrics::new());
    let client =
        applyset_operator::metrics::counting_client(cluster().config().await, metrics.clone())
            .expect("counting client");
    (
        Operator::start_with(client, h.config(), metrics.clone()),
        metrics,
    )
}

fn writes(m: &Metrics) -> u64 {
    ["POST", "PUT", "PATCH", "DELETE"]
        .iter()
        .map(|v| m.requests(v))
        .sum()
}

async fn request_reconcile(set: &Parent, value: &str) {
    set.patch_metadata(json!({"annotations": {"applyset.dev/reconcile-requested-at": value}}))
        .await;
}

/// Requests a reconcile of `set` and waits for its effect: the status echo of the request
/// (`status.lastHandledReconcileAt`). The counting client counts a request when it is sent, so
/// once the echo is visible, the write that made it has been counted (the reconcile counter
/// is no such proof: another reconcile may move it before the requested one writes).
async fn request_and_await_echo(set: &Parent, value: &str) {
    request_reconcile(set, value).await;
    wait_for(
        &format!("the echo of request {value}"),
        DEADLINE,
        || async {
            let st = set.status().await?;
            (st.last_handled_reconcile_at.as_deref() == Some(value)).then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn a_requested_reconcile_of_an_unchanged_set_sends_no_write() {
    let h = Harness::new("nowrite").await;
    let (op, metrics) = counted_operator(&h).await;
    let set = h.applyset("nowrite");
    let ms: Vec<_> = (0..20)
        .map(|i| configmap(&format!("c{i}"), json!({"k": i.to_string()})))
        .collect();
    set.create(json!({"interval": "1h", "manifests": ms})).await;
    set.wait_ready().await;
    // Let the follow-up reconciles of the creation (summary update, drift of our own writes)
    // settle: a requested reconcile whose only write is the status echo of the request
    // (status.lastHandledReconcileAt).
    let mut settled = false;
    for i in 0..20 {
        let w = writes(&metrics);
        request_and_await_echo(&set, &format!("settle-{i}")).await;
        if writes(&metrics) == w + 1 {
            settled = true;
            break;
        }
    }
    assert!(
        settled,
        "reconciles kept writing: {} writes",
        writes(&metrics)
    );
    let w = writes(&metrics);
    let gets = metrics.requests("GET");
    request_and_await_echo(&set, "now").await;
    assert_eq!(
        writes(&metrics),
        w + 1,
        "a requested reconcile of an unchanged set writes only the echo of the request"
    );
    let st = set.status().await.expect("a status");
    assert_eq!(st.last_handled_reconcile_at.as_deref(), Some("now"));
    assert_eq!(
        metrics.requests("GET") - gets,
        0,
        "nor any read: the member watches know what is live, so nothing is listed"
    );
    stop(op).await;
}

/// What the events of `set` say changed: each list with how often it was published (an
/// event repeated with the same note is one object with a series count). A reconcile that
/// changes the outcome lists its changes after `; changed: ` in its Ready event; one that
/// does not publishes `MembersChanged`.
async fn change_events(h: &Harness, set: &str) -> Vec<(String, i32)> {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(h.client.clone(), &h.ns);
    let list = events.list(&Default::default()).await.expect("list events");
    list.items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(set))
        .filter_map(|e| {
            let count = e.series.as_ref().map_or(1, |s| s.count);
            let note = e.note.unwrap_or_default();
            let changes = match e.reason.as_deref() {
                Some("MembersChanged") => note,
                _ => note.split_once("; changed: ")?.1.to_string(),
            };
            Some((changes, count))
        })
        .collect()
}

/// The reasons of `set`'s events, oldest first.
async fn event_reasons(h: &Harness, set: &str) -> Vec<String> {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(h.client.clone(), &h.ns);
    let mut list = events
        .list(&Default::default())
        .await
        .expect("list events")
        .items;
    list.retain(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(set));
    list.sort_by_key(|e| e.event_time.as_ref().map(|t| t.0));
    list.into_iter().filter_map(|e| e.reason).collect()
}

/// Waits for an event of `set` listing changes that has every one of `parts`.
async fn wait_change_event(h: &Harness, set: &str, parts: &[String]) -> Vec<(String, i32)> {
    wait_for(&format!("an event listing {parts:?}"), DEADLINE, || async {
        let events = change_events(h, set).await;
        events
            .iter()
            .any(|(note, _)| parts.iter().all(|p| note.contains(p.as_str())))
            .then_some(events)
    })
    .await
}

#[tokio::test]
async fn each_change_is_an_event_listing_what_changed_and_a_no_op_is_none() {
    let h = Harness::new("events").await;
    let op = h.start_operator();
    let ns = h.ns.clone();
    let set = h.applyset("events");
    set.create(json!({"interval": "1h", "force": true, "manifests": [
        configmap("a", json!({"k": "1"})), configmap("b", json!({"k": "1"}))]}))
        .await;
    set.wait_ready().await;
    wait_change_event(
        &h,
        "events",
        &[
            format!("ConfigMap {ns}/a created"),
            format!("ConfigMap {ns}/b created"),
        ],
    )
    .await;
    assert_eq!(
        event_reasons(&h, "events").await,
        ["ReconciliationSucceeded"],
        "the first reconcile publishes one event: Ready, listing what it created"
    );

    // Reconciles that change nothing publish nothing. Each requested reconcile is waited for
    // by its own effect, the echo of the request in status (written after any event of
    // what it changed), not by the reconcile counter, which another reconcile may move.
    let before = change_events(&h, "events").await;
    for i in 0..2 {
        // The echo is written after the reconcile's change event would have been published.
        request_and_await_echo(&set, &format!("noop-{i}")).await;
    }
    assert_eq!(
        change_events(&h, "events").await,
        before,
        "no change, no event"
    );

    // A change and a prune in one reconcile: one event listing both.
    set.patch_spec(json!({"manifests": [configmap("a", json!({"k": "2"}))]}))
        .await;
    set.wait_ready().await;
    wait_change_event(
        &h,
        "events",
        &[
            format!("ConfigMap {ns}/a configured"),
            format!("ConfigMap {ns}/b pruned"),
        ],
    )
    .await;

    // Drift corrected between reconciles is a change too.
    let cms: Api<ConfigMap> = Api::namespaced(h.client.clone(), &ns);
    let before = change_events(&h, "events").await;
    cms.patch(
        "a",
        &PatchParams::apply("someone").force(),
        &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": "drifted"}})),
    )
    .await
    .expect("drift");
    wait_for("the drift's event", DEADLINE, || async {
        let now = change_events(&h, "events").await;
        let configured = format!("ConfigMap {ns}/a configured");
        let count = |events: &[(String, i32)]| -> i32 {
            events
                .iter()
                .filter(|(n, _)| *n == configured)
                .map(|(_, c)| *c)
                .sum()
        };
        (count(&now) > count(&before)).then_some(())
    })
    .await;
    stop(op).await;
}

#[tokio::test]
async fn drift_is_corrected_at_once_not_at_the_interval() {
    let h = Harness::new("drift").await;
    let op = h.start_operator();
    let ns = h.ns.as_str();
    let set = h.applyset("drift");
    // force: true, so a field another manager took is taken back (without it, that is a
    // Conflict naming the other manager, by design).
    set.create(json!({"interval": "1h", "force": true, "manifests": [
        configmap("edited", json!({"k": "declared"})), configmap("deleted", json!({"k": "declared"}))]}))
        .await;
    set.wait_ready().await;
    let cms: Api<ConfigMap> = Api::namespaced(h.client.clone(), ns);
    // Someone else changes one member (taking the field with force) and deletes another.
    cms.patch(
        "edited",
        &PatchParams::apply("someone").force(),
        &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "edited"}, "data": {"k": "drifted"}})),
    )
    .await
    .expect("drift");
    cms.delete("deleted", &DeleteParams::default())
        .await
        .expect("delete");
    // The interval is an hour: only the member watches can bring them back this fast.
    wait_for("the drift to be corrected", Duration::from_secs(30), || {
        let cms = cms.clone();
        async move {
            let edited = cms.get_opt("edited").await.ok()??;
            let restored = cms.get_opt("deleted").await.ok()?.is_some();
            let value = edited.data?.get("k").cloned()?;
            (restored && value == "declared").then_some(())
        }
    })
    .await;
    stop(op).await;
}

#[tokio::test]
async fn the_reconcile_requested_annotation_starts_a_reconcile() {
    let h = Harness::new("request").await;
    let op = h.start_operator();
    let set = h.applyset("request");
    set.create(json!({"interval": "1h", "manifests": [configmap("a", json!({"k": "1"}))]}))
        .await;
    set.wait_ready().await;
    // The request's own effect, not the reconcile counter (which other reconciles move).
    request_and_await_echo(&set, "2026-11-21T13:00:00Z").await;
    stop(op).await;
}

/// The operator's answers of status 403 (forbidden), any method, from its metrics.
fn forbidden(m: &Metrics) -> u64 {
    m.encode()
        .lines()
        .filter(|l| l.starts_with("rest_client_requests_total{") && l.contains("code=\"403\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// A ConfigMap with a finalizer of this test's own: it keeps its namespace Terminating until
/// [`release`] removes the finalizer.
async fn hold(client: &kube::Client, ns: &str) {
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let hold = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "hold", "finalizers": ["applyset.dev/test-hold"]}});
    cms.create(
        &Default::default(),
        &serde_json::from_value(hold).expect("hold"),
    )
    .await
    .expect("create the hold");
}

async fn release(client: &kube::Client, ns: &str) {
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    cms.patch(
        "hold",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("release the hold");
}

async fn delete_namespace(client: &kube::Client, ns: &str) {
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    namespaces
        .delete(ns, &DeleteParams::default())
        .await
        .expect("delete the namespace");
}

async fn namespace_gone(client: &kube::Client, ns: &str) -> bool {
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    matches!(namespaces.get_opt(ns).await, Ok(None))
}

/// A policy of the API server's own (ValidatingAdmissionPolicy, no webhook) refusing the
/// deletion of ApplySets in `ns`: the namespace controller cannot delete them while it holds.
async fn refuse_set_deletion(client: &kube::Client, ns: &str) -> String {
    let name = format!("keep-sets-{ns}");
    let policy = json!({"apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy", "metadata": {"name": name},
        "spec": {"failurePolicy": "Fail",
            "matchConstraints": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
                "resourceRules": [{"apiGroups": ["applyset.dev"], "apiVersions": ["*"],
                    "operations": ["DELETE"], "resources": ["applysets"]}]},
            "validations": [{"expression": "false", "message": "held by the test"}]}});
    let binding = json!({"apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"]}});
    let ar =
        |kind: &str, plural: &str| gvk_resource("admissionregistration.k8s.io", "v1", kind, plural);
    ssa(
        client,
        &ar("ValidatingAdmissionPolicy", "validatingadmissionpolicies"),
        None,
        "test",
        policy,
    )
    .await;
    let binding_ar = ar(
        "ValidatingAdmissionPolicyBinding",
        "validatingadmissionpolicybindings",
    );
    ssa(client, &binding_ar, None, "test", binding).await;
    name
}

async fn allow_set_deletion(client: &kube::Client, name: &str) {
    for (kind, plural) in [
        (
            "ValidatingAdmissionPolicyBinding",
            "validatingadmissionpolicybindings",
        ),
        ("ValidatingAdmissionPolicy", "validatingadmissionpolicies"),
    ] {
        let ar = gvk_resource("admissionregistration.k8s.io", "v1", kind, plural);
        dyn_api(client, &ar, None)
            .delete(name, &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("deleting {kind} {name}: {e}"));
    }
}

/// A namespace being deleted takes every member of a set that lives only there: the set's
/// finalizer would make the namespace controller wait and look again seconds later, so the
/// operator removes it as soon as it learns the namespace is terminating, before the set is
/// deleted. (The set's deletion is refused by an admission policy here, so that only the
/// operator can have removed the finalizer.) A set with a member elsewhere keeps it.
#[tokio::test]
async fn a_terminating_namespace_gets_its_sets_without_waiting_for_their_finalizer() {
    let h = Harness::new("nsfin").await;
    let op = Operator::start(h.client.clone(), h.config());
    let elsewhere = Harness::new("nsfin-other").await;
    let local = h.applyset("local");
    local
        .create(json!({"manifests": [configmap_in(&h.ns, "a", json!({"k": "v"}))]}))
        .await;
    let spanning = h.applyset("spanning");
    spanning
        .create(json!({"manifests": [configmap_in(&h.ns, "b", json!({"k": "v"}))]}))
        .await;
    local.wait_ready().await;
    spanning.wait_ready().await;
    // The spanning set recorded a namespace other than its own (as one that applied there
    // would): its deletion has something to delete outside, so it keeps its finalizer.
    spanning
        .patch_metadata(json!({"annotations": {
            "applyset.kubernetes.io/additional-namespaces": elsewhere.ns}}))
        .await;
    let finalizers = |set: &Parent| {
        let set = set.clone();
        async move {
            let obj = set.get().await?;
            Some(obj.metadata.finalizers.unwrap_or_default())
        }
    };
    assert!(
        finalizers(&local)
            .await
            .expect("local")
            .iter()
            .any(|f| f == applyset_operator::applyset::FINALIZER),
        "the set has the operator's finalizer before"
    );
    let policy = refuse_set_deletion(&h.client, &h.ns).await;
    delete_namespace(&h.client, &h.ns).await;
    wait_for(
        "the local set's finalizer removed",
        LONG_DEADLINE,
        || async {
            let f = finalizers(&local).await?;
            (!f.iter()
                .any(|f| f == applyset_operator::applyset::FINALIZER))
            .then_some(())
        },
    )
    .await;
    let kept = finalizers(&spanning).await.expect("spanning set");
    assert!(
        kept.iter()
            .any(|f| f == applyset_operator::applyset::FINALIZER),
        "a set with members outside the namespace keeps its finalizer: {kept:?}"
    );
    allow_set_deletion(&h.client, &policy).await;
    wait_for("the namespace gone", LONG_DEADLINE, || async {
        namespace_gone(&h.client, &h.ns).await.then_some(())
    })
    .await;
    stop(op).await;
}

/// Deleting a namespace of sets: the namespace controller deletes their members (each a
/// drift event) while the sets wait for their own deletion, and ClusterApplySets with
/// members there keep wanting to re-create them. The first refusal of a write there ("being
/// terminated") tells the operator, which sends no more: at most the writes in flight then
/// are refused (here at most 2, the apply concurrency), however long the namespace stays
/// Terminating (the hold keeps it so until the test releases it).
#[tokio::test]
async fn deleting_a_namespace_of_sets_is_not_fought() {
    let h = Harness::new("nsdel").await;
    let metrics = Arc::new(Metrics::new());
    let client =
        applyset_operator::metrics::counting_client(cluster().config().await, metrics.clone())
            .expect("counting client");
    let concurrency = 2;
    let mut config = h.config();
    config.apply_concurrency = concurrency;
    let op = Operator::start_with(client, config, metrics.clone());
    let members = |i: usize| -> Vec<serde_json::Value> {
        (0..4)
            .map(|j| configmap_in(&h.ns, &format!("s{i}-c{j}"), json!({"k": "v"})))
            .collect()
    };
    let spec = |i: usize| json!({"interval": "1h", "retryInterval": "1s", "manifests": members(i)});
    let sets: Vec<Parent> = (0..4).map(|i| h.applyset(&format!("s{i}"))).collect();
    let spanning: Vec<Parent> = (4..6)
        .map(|i| h.cluster_applyset(&unique(&format!("s{i}"))))
        .collect();
    for (i, set) in sets.iter().chain(&spanning).enumerate() {
        set.create(spec(i)).await;
    }
    for set in sets.iter().chain(&spanning) {
        set.wait_ready().await;
    }
    assert_eq!(
        forbidden(&metrics),
        0,
        "nothing refused before the deletion"
    );
    hold(&h.client, &h.ns).await;
    delete_namespace(&h.client, &h.ns).await;
    for set in &sets {
        set.wait_gone(LONG_DEADLINE).await;
    }
    for set in &spanning {
        set.wait_ready_reason(Some("False"), "NamespaceTerminating")
            .await;
    }
    // A round of the spanning sets' retries (every 10 s): they send nothing there.
    wait_reconciles(&op, 2).await;
    let refused = forbidden(&metrics);
    assert!(
        refused <= concurrency as u64,
        "{refused} requests refused (403) while the namespace was terminating; at most the {concurrency} writes in flight when the first refusal arrived may be"
    );
    let cms: Api<ConfigMap> = Api::namespaced(h.client.clone(), &h.ns);
    let left = cms
        .list_metadata(&kube::api::ListParams::default().labels(LABEL_PART_OF))
        .await
        .expect("list members");
    assert!(left.items.is_empty(), "members left: {:?}", left.items);
    release(&h.client, &h.ns).await;
    for set in &spanning {
        set.delete().await;
        set.wait_gone(DEADLINE).await;
    }
    stop(op).await;
}

/// A set whose members live in another namespace that is being terminated reports
/// Ready=False, NamespaceTerminating, naming it (no retry burst: no write is sent there), and
/// goes on once the namespace is gone and back.
#[tokio::test]
async fn members_in_a_terminating_namespace_are_reported_and_applied_when_it_is_back() {
    let h = Harness::new("nsterm").await;
    let doomed = h.extra_namespace("doomed").await;
    let metrics = Arc::new(Metrics::new());
    let client =
        applyset_operator::metrics::counting_client(cluster().config().await, metrics.clone())
            .expect("counting client");
    let mut config = h.config();
    config.tenancy.allow_cross_namespace = true;
    let op = Operator::start_with(client, config, metrics.clone());
    let set = h.applyset("spans");
    set.create(
        json!({"interval": "1h", "retryInterval": "1s", "manifests": [
        configmap("home", json!({"k": "v"})),
        configmap_in(&doomed, "away", json!({"k": "v"}))]}),
    )
    .await;
    set.wait_ready().await;
    hold(&h.client, &doomed).await;
    delete_namespace(&h.client, &doomed).await;
    let st = set
        .wait_ready_reason(Some("False"), "NamespaceTerminating")
        .await;
    let message = &ready(&st).message;
    assert!(
        message.contains(&format!("namespace {doomed}")),
        "names the namespace: {message}"
    );
    // Looked at again every 10 s, without sending anything there: at most the one write
    // that learnt it was refused.
    wait_reconciles(&op, 2).await;
    let refused = forbidden(&metrics);
    assert!(refused <= 1, "{refused} writes refused");
    release(&h.client, &doomed).await;
    wait_for("the namespace to be gone", DEADLINE, || async {
        namespace_gone(&h.client, &doomed).await.then_some(())
    })
    .await;
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(h.client.clone());
    let back = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": doomed}});
    namespaces
        .create(
            &Default::default(),
            &serde_json::from_value(back).expect("ns"),
        )
        .await
        .expect("re-create the namespace");
    set.wait_ready().await;
    assert!(exists(&h.client, &configmap_ar(), Some(&doomed), "away").await);
    stop(op).await;
}

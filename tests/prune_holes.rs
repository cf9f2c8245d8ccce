//! End to end: prune under the faults that used to make it delete the wrong object or lose
//! track of members (found by the model-based walk). Each test fails on the code before the fix.

mod support;

use support::operator;

use std::collections::{BTreeSet, HashMap};

use applyset_operator::{
    applyset::{GroupKind, ParentRef},
    discovery::Resolver,
    engine::{
        Outcome, SetScope, live,
        prune::{self, Selection},
    },
};
use kube::{
    Api, ResourceExt,
    api::{ListParams, Patch, PatchParams},
};
use operator::*;
use serde_json::{Value, json};

/// A candidate that changed after it was listed (here: annotated `prune: disabled` between
/// the listing and the delete) is left alone: the delete carries the listed resourceVersion.
#[tokio::test]
async fn a_candidate_changed_after_it_was_listed_is_not_deleted() {
    let h = Harness::new("listed").await;
    let ns = h.ns.as_str();
    let scope = SetScope::new(ParentRef::applyset(ns, "engine"), h.client.clone(), 4);
    let member = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "dropped", "namespace": ns,
                     "labels": {LABEL_PART_OF: scope.id.clone()}}});
    ssa(&h.client, &configmap_ar(), Some(ns), &scope.manager, member).await;
    let resolver = Resolver::new(h.client.clone());
    let kinds = BTreeSet::from([GroupKind::new("", "ConfigMap")]);
    let namespaces = BTreeSet::from([ns.to_string()]);
    let listed = live::list(&scope, &resolver, &HashMap::new(), &kinds, &namespaces)
        .await
        .expect("list");
    assert_eq!(listed.len(), 1, "the member is listed");

    Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(h.client.clone(), ns)
        .patch(
            "dropped",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {ANNOTATION_PRUNE: "disabled"}}})),
        )
        .await
        .expect("annotate");
    let selection = Selection {
        delete: listed,
        retained: Vec::new(),
    };
    let results = prune::prune(&scope, selection).await;
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].outcome, Outcome::Changed, "{results:?}");
    assert!(
        exists(&h.client, &configmap_ar(), Some(ns), "dropped").await,
        "an object changed since the listing must not be deleted"
    );
}

/// A parent whose ApplySet annotations were wiped (a `kubectl replace`, an Argo CD
/// `Replace=true` sync) does not forget its members: the record is completed from
/// status.members, nothing is pruned on that doubt (and status says so), and the next
/// reconcile prunes what is no longer declared — including a kind only the lost annotations
/// recorded.
#[tokio::test]
async fn wiped_parent_annotations_are_recorded_again_and_nothing_leaks() {
    let h = Harness::new("wiped").await;
    let op = h.start_operator();
    let ns = h.ns.as_str();
    let set = h.applyset("wiped");
    set.create(json!({"manifests": [
        configmap("keep", json!({"k": "1"})), configmap("drop", json!({"k": "1"})),
        secret("token")]}))
        .await;
    set.wait_ready().await;

    set.patch_metadata(json!({"annotations": {
        ANNOTATION_GROUP_KINDS: null, ANNOTATION_NAMESPACES: null, ANNOTATION_TOOLING: null}}))
        .await;
    set.patch_spec(json!({"manifests": [configmap("keep", json!({"k": "1"}))]}))
        .await;

    let client = h.client.clone();
    eventually(
        "the dropped ConfigMap and Secret to be pruned",
        DEADLINE,
        || {
            let client = client.clone();
            async move {
                let cm = exists(&client, &configmap_ar(), Some(ns), "drop").await;
                let secret = exists(&client, &secret_ar(), Some(ns), "token").await;
                (!cm && !secret).then_some(())
            }
        },
    )
    .await;
    set.wait_ready().await;
    assert!(exists(&h.client, &configmap_ar(), Some(ns), "keep").await);
    assert_eq!(
        set.annotation(ANNOTATION_GROUP_KINDS).await.as_deref(),
        Some("ConfigMap")
    );
    let note = event_note(&h.client, &h.ns, "PruneFailed", "prune skipped").await;
    assert!(
        note.contains("prune skipped") && note.contains("Secret"),
        "the skipped prune is explained, naming what was missing: {note}"
    );
    stop(op).await;
}

/// A kind recorded on the parent whose served version changed (v1 → v2, v1 no longer
/// served) while discovery was cached: its LIST at the old version answers 404. Fresh
/// discovery finds it at v2 and its dropped member is pruned, rather than the kind being
/// forgotten with its members left behind.
#[tokio::test]
async fn a_recorded_kind_whose_version_moved_is_still_pruned() {
    let h = Harness::new("moved").await;
    let ns = h.ns.as_str();
    let group = unique_group();
    let crd_name = format!("widgets.{group}");
    ssa(&h.client, &crd_ar(), None, "test", widget_crd(&group)).await;
    wait_established(&h.client, &crd_name, LONG_DEADLINE).await;
    let op = h.start_operator();
    let set = h.applyset("moved");
    set.create(json!({"manifests": [
        widget(&group, ns, "w1", 1), configmap("c", json!({"k": "1"}))]}))
        .await;
    set.wait_ready().await;

    ssa(
        &h.client,
        &crd_ar(),
        None,
        "test",
        widget_crd_v2_only(&group),
    )
    .await;
    let v1 = dyn_api(&h.client, &widget_ar(&group), Some(ns));
    eventually(
        "v1 of the Widget CRD to be no longer served",
        LONG_DEADLINE,
        || {
            let v1 = v1.clone();
            async move {
                match v1.list(&ListParams::default()).await {
                    Err(kube::Error::Api(s)) if s.code == 404 => Some(()),
                    _ => None,
                }
            }
        },
    )
    .await;
    set.patch_spec(json!({"manifests": [configmap("c", json!({"k": "1"}))]}))
        .await;

    let v2 = gvk_resource(&group, "v2", "Widget", "widgets");
    let client = h.client.clone();
    eventually("the dropped Widget to be pruned at v2", DEADLINE, || {
        let (client, v2) = (client.clone(), v2.clone());
        async move { (!exists(&client, &v2, Some(ns), "w1").await).then_some(()) }
    })
    .await;
    set.wait_ready().await;
    assert_eq!(
        set.annotation(ANNOTATION_GROUP_KINDS).await.as_deref(),
        Some("ConfigMap")
    );
    stop(op).await;
}

/// An object served under two groups (an Event: `events.k8s.io/v1` and core `v1`) whose
/// declared group changes is listed under the group it was recorded with right after the
/// apply: it is the object just applied (same UID), not a member to prune.
#[tokio::test]
async fn an_object_served_under_two_groups_survives_a_change_of_group() {
    let h = Harness::new("twogroups").await;
    let op = h.start_operator();
    let ns = h.ns.as_str();
    let set = h.applyset("events");
    set.create(json!({"manifests": [events_event(ns, "e1")]}))
        .await;
    set.wait_ready().await;
    let core = gvk_resource("", "v1", "Event", "events");
    let before = must_get(&h.client, &core, Some(ns), "e1").await;

    set.patch_spec(json!({"manifests": [core_event(ns, "e1")]}))
        .await;
    let status = set.wait_ready().await;
    assert_eq!(summary(&status).pruned, 0, "nothing was pruned");
    let after = must_get(&h.client, &core, Some(ns), "e1").await;
    assert_eq!(after.uid(), before.uid(), "the Event is the same object");
    assert_eq!(
        set.annotation(ANNOTATION_GROUP_KINDS).await.as_deref(),
        Some("Event")
    );
    stop(op).await;
}

/// A ClusterApplySet whose record names a namespaced kind but no namespace (edited by hand,
/// status.members cleared) cannot find those members: it prunes nothing, keeps recording
/// the kind, and says how to repair the record; once repaired, the members are pruned.
#[tokio::test]
async fn a_namespaced_kind_without_recorded_namespaces_is_not_forgotten() {
    let h = Harness::new("nons").await;
    let op = h.start_operator();
    let ns = h.ns.as_str();
    let set = h.cluster_applyset(&unique("nons"));
    let role = unique("nons-role");
    set.create(json!({"interval": "1h", "manifests": [
        configmap_in(ns, "a", json!({"k": "1"})), configmap_in(ns, "b", json!({"k": "1"}))]}))
        .await;
    set.wait_ready().await;

    set.patch_metadata(json!({"annotations": {ANNOTATION_NAMESPACES: ""}}))
        .await;
    set.api()
        .patch_status(
            &set.name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"members": []}})),
        )
        .await
        .expect("clear status.members");
    set.patch_spec(json!({"manifests": [cluster_role(&role)]}))
        .await;

    // Found by the prune (PruneFailed), whether the member watches answered what is live or
    // a LIST in all namespaces did: either way, the same message.
    let message = set
        .wait_until(
            "Ready=False naming the namespaced kind",
            DEADLINE,
            |obj, st| {
                let st = st?;
                (st.observed_generation == obj.metadata.generation).then_some(())?;
                let c = condition(st, "Ready")?;
                (c.status == "False" && c.message.contains("is namespaced"))
                    .then(|| c.message.clone())
            },
        )
        .await;
    assert!(
        message.contains("ConfigMap is namespaced but the parent records no namespace"),
        "{message}"
    );
    assert!(
        message.contains("additional-namespaces"),
        "names the repair: {message}"
    );
    let kinds = set
        .annotation(ANNOTATION_GROUP_KINDS)
        .await
        .unwrap_or_default();
    assert!(
        kinds.contains("ConfigMap"),
        "the kind is still recorded: {kinds}"
    );
    for name in ["a", "b"] {
        assert!(exists(&h.client, &configmap_ar(), Some(ns), name).await);
    }

    set.patch_metadata(json!({"annotations": {ANNOTATION_NAMESPACES: ns}}))
        .await;
    let client = h.client.clone();
    eventually(
        "a and b to be pruned once the record is repaired",
        DEADLINE,
        || {
            let client = client.clone();
            async move {
                let a = exists(&client, &configmap_ar(), Some(ns), "a").await;
                let b = exists(&client, &configmap_ar(), Some(ns), "b").await;
                (!a && !b).then_some(())
            }
        },
    )
    .await;
    set.wait_ready().await;
    stop(op).await;
}

/// The Widget CRD with v2 served and stored, v1 kept (stored objects) but not served.
fn widget_crd_v2_only(group: &str) -> Value {
    let mut crd = widget_crd(group);
    let schema = crd["spec"]["versions"][0]["schema"].clone();
    crd["spec"]["versions"] = json!([
        {"name": "v1", "served": false, "storage": false, "schema": schema},
        {"name": "v2", "served": true, "storage": true, "schema": schema},
    ]);
    crd
}

/// An Event as `events.k8s.io/v1` writes it.
fn events_event(namespace: &str, name: &str) -> Value {
    json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": name},
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "reportingController": "applyset.dev/test", "reportingInstance": "test-1",
        "action": "Testing", "reason": "Tested", "type": "Normal", "note": "hello",
        "regarding": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": namespace, "name": "x"}})
}

/// The same Event as core `v1` writes it.
fn core_event(namespace: &str, name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Event",
        "metadata": {"name": name},
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "reportingComponent": "applyset.dev/test", "reportingInstance": "test-1",
        "action": "Testing", "reason": "Tested", "type": "Normal", "message": "hello",
        "involvedObject": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": namespace, "name": "x"}})
}

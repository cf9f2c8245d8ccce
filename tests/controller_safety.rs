//! End to end: the safety and ownership rules of the controller (SPEC §3.3, §4). A failed
//! reconcile prunes nothing; objects that are not ours are never deleted or taken over.

mod support;

use support::operator;

use std::collections::BTreeSet;

use applyset_operator::engine::prune::{Deleted, delete_with_uid};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, PostParams},
};
use operator::*;
use serde_json::json;

fn names(v: &[&str]) -> BTreeSet<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// A validation error after a good state (a manifest without a name, then an unknown kind):
/// ValidationFailed, Stalled, nothing applied and nothing pruned.
#[tokio::test]
async fn validation_error_applies_and_prunes_nothing() {
    let h = Harness::new("invalid").await;
    let op = h.start_operator();
    let ns = h.ns.as_str();
    let set = h.applyset("invalid");
    set.create(json!({"manifests": [
        configmap("a", json!({"k": "1"})), configmap("b", json!({"k": "1"}))]}))
        .await;
    set.wait_ready().await;
    let objs = vec![
        (configmap_ar(), Some(ns.to_owned()), "a".to_owned()),
        (configmap_ar(), Some(ns.to_owned()), "b".to_owned()),
    ];
    let before = resource_versions(&h.client, &objs).await;

    // b dropped, a changed, and a manifest without metadata.name.
    set.patch_spec(json!({"manifests": [
        configmap("a", json!({"k": "2"})),
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}, "data": {"k": "v"}},
    ]}))
    .await;
    let st = set
        .wait_ready_reason(Some("False"), "ValidationFailed")
        .await;
    assert_condition(&st, "Stalled", "True");
    assert!(
        st.last_error.is_some(),
        "lastError set: {}",
        status_json(&st)
    );
    wait_reconciles(&op, 2).await;
    assert_eq!(
        resource_versions(&h.client, &objs).await,
        before,
        "a validation error must apply nothing and prune nothing"
    );

    // An unknown kind.
    set.patch_spec(json!({"manifests": [
        configmap("a", json!({"k": "3"})),
        {"apiVersion": "nothing.example.com/v1", "kind": "Nothing", "metadata": {"name": "x"}},
    ]}))
    .await;
    let st = set
        .wait_ready_reason(Some("False"), "ValidationFailed")
        .await;
    assert_condition(&st, "Stalled", "True");
    let msg = ready(&st).message.clone();
    assert!(
        msg.contains("Nothing"),
        "the message names the unknown kind: {msg:?}"
    );
    wait_reconciles(&op, 2).await;
    assert_eq!(
        resource_versions(&h.client, &objs).await,
        before,
        "an unknown kind must apply nothing and prune nothing"
    );
    assert_eq!(
        set.annotation(ANNOTATION_GROUP_KINDS).await.as_deref(),
        Some("ConfigMap")
    );
    stop(op).await;
}

/// A member whose apply fails: ApplyFailed, the removed members are not pruned, and the parent
/// keeps the superset of group-kinds.
#[tokio::test]
async fn failed_member_apply_prunes_nothing_and_keeps_the_superset() {
    let h = Harness::new("applyfail").await;
    let op = h.start_operator();
    let ns = h.ns.as_str();
    let set = h.applyset("applyfail");
    set.create(json!({"manifests": [
        configmap("a", json!({"k": "1"})), configmap("b", json!({"k": "1"})), secret("s")]}))
        .await;
    set.wait_ready().await;
    assert_eq!(
        set.annotation(ANNOTATION_GROUP_KINDS).await.as_deref(),
        Some("ConfigMap,Secret")
    );

    // Drop b and the Secret; add a Service the API server rejects.
    let mut bad = service("bad");
    bad["spec"]["type"] = json!("Bogus");
    set.patch_spec(json!({"manifests": [configmap("a", json!({"k": "1"})), bad]}))
        .await;
    let st = set.wait_ready_reason(Some("False"), "ApplyFailed").await;
    assert!(
        summary(&st).failed >= 1,
        "summary.failed: {}",
        status_json(&st)
    );
    assert!(
        st.last_error.is_some(),
        "lastError set: {}",
        status_json(&st)
    );
    wait_reconciles(&op, 2).await;
    assert!(
        exists(&h.client, &configmap_ar(), Some(ns), "b").await,
        "b must not be pruned"
    );
    assert!(
        exists(&h.client, &secret_ar(), Some(ns), "s").await,
        "s must not be pruned"
    );
    assert!(!exists(&h.client, &service_ar(), Some(ns), "bad").await);
    let gks: BTreeSet<String> = set
        .annotation(ANNOTATION_GROUP_KINDS)
        .await
        .unwrap_or_default()
        .split(',')
        .map(str::to_owned)
        .collect();
    assert!(
        gks.is_superset(&names(&["ConfigMap", "Secret", "Service"])),
        "contains-group-kinds must keep the superset of the old and new sets: {gks:?}"
    );
    let st = set.status().await.expect("status");
    assert_eq!(ready(&st).reason, "ApplyFailed", "{}", status_json(&st));
    stop(op).await;
}

/// An object labelled part-of=<our ID> by someone else (label not owned by our manager) is not
/// pruned.
#[tokio::test]
async fn object_labelled_with_our_id_by_someone_else_is_not_pruned() {
    let h = Harness::new("intruder").await;
    let op = h.start_operator();
    let ns = h.ns.as_str();
    let set = h.applyset("victim");
    set.create(json!({"manifests": [
        configmap("a", json!({"k": "1"})), configmap("b", json!({"k": "1"}))]}))
        .await;
    set.wait_ready().await;

    let mut intruder = configmap("intruder", json!({"k": "mine"}));
    intruder["metadata"]["labels"] = json!({ LABEL_PART_OF: set.id() });
    ssa(&h.client, &configmap_ar(), Some(ns), "intruder", intruder).await;
    let intruder_rv = rv(&h.client, &configmap_ar(), Some(ns), "intruder").await;

    // Shrinking runs a prune that lists the intruder as a candidate.
    set.patch_spec(json!({"manifests": [configmap("a", json!({"k": "1"}))]}))
        .await;
    let st = set.wait_ready().await;
    assert_eq!(
        summary(&st).pruned,
        1,
        "only b is pruned: {}",
        status_json(&st)
    );
    assert!(
        !exists(&h.client, &configmap_ar(), Some(ns), "b").await,
        "b pruned"
    );
    wait_reconciles(&op, 2).await;
    assert_eq!(
        rv(&h.client, &configmap_ar(), Some(ns), "intruder").await,
        intruder_rv,
        "an object whose part-of label another manager set must be left alone"
    );
    stop(op).await;
}

/// A member annotated applyset.dev/prune: disabled and then removed from the set is retained.
#[tokio::test]
async fn prune_disabled_member_is_retained() {
    let h = Harness::new("retain").await;
    let op = h.start_operator();
    let ns = h.ns.as_str();
    let set = h.applyset("retain");
    let mut keep = configmap("keep", json!({"k": "1"}));
    keep["metadata"]["annotations"] = json!({ ANNOTATION_PRUNE: "disabled" });
    set.create(json!({"manifests": [configmap("a", json!({"k": "1"})), keep]}))
        .await;
    set.wait_ready().await;

    set.patch_spec(json!({"manifests": [configmap("a", json!({"k": "1"}))]}))
        .await;
    let st = set.wait_ready().await;
    assert!(
        summary(&st).retained >= 1,
        "summary.retained: {}",
        status_json(&st)
    );
    assert_eq!(summary(&st).pruned, 0, "{}", status_json(&st));
    wait_reconciles(&op, 2).await;
    let obj = must_get(&h.client, &configmap_ar(), Some(ns), "keep").await;
    assert_eq!(
        obj.annotations().get(ANNOTATION_PRUNE).map(String::as_str),
        Some("disabled")
    );
    stop(op).await;
}

/// An empty desired set is refused without allowEmpty; with it every member is pruned.
#[tokio::test]
async fn empty_set_is_refused_unless_allowed() {
    let h = Harness::new("empty").await;
    let op = h.start_operator();
    let ns = h.ns.as_str();
    let set = h.applyset("empty");
    set.create(json!({"manifests": [
        configmap("a", json!({"k": "1"})), configmap("b", json!({"k": "1"}))]}))
        .await;
    set.wait_ready().await;
    let objs = vec![
        (configmap_ar(), Some(ns.to_owned()), "a".to_owned()),
        (configmap_ar(), Some(ns.to_owned()), "b".to_owned()),
    ];
    let before = resource_versions(&h.client, &objs).await;

    set.patch_spec(json!({"manifests": []})).await;
    set.wait_ready_reason(Some("False"), "EmptySetRefused")
        .await;
    wait_reconciles(&op, 2).await;
    assert_eq!(
        resource_versions(&h.client, &objs).await,
        before,
        "an empty set without allowEmpty must delete nothing"
    );

    set.patch_spec(json!({"allowEmpty": true})).await;
    let st = set.wait_ready().await;
    assert_eq!(summary(&st).pruned, 2, "{}", status_json(&st));
    assert_eq!(summary(&st).members, 0, "{}", status_json(&st));
    assert!(!exists(&h.client, &configmap_ar(), Some(ns), "a").await);
    assert!(!exists(&h.client, &configmap_ar(), Some(ns), "b").await);
    stop(op).await;
}

/// An object deleted and re-created (new UID) between list and delete is not deleted.
#[tokio::test]
async fn delete_with_uid_leaves_a_recreated_object_alone() {
    let h = Harness::new("uid").await;
    let ns = h.ns.as_str();
    let cms: Api<ConfigMap> = Api::namespaced(h.client.clone(), ns);
    let cm: ConfigMap =
        serde_json::from_value(configmap("racy", json!({"gen": "1"}))).expect("configmap");
    let old = cms
        .create(&PostParams::default(), &cm)
        .await
        .expect("create");
    let old_uid = old.uid().expect("uid");
    cms.delete("racy", &DeleteParams::background())
        .await
        .expect("delete");
    wait_for_absent(&h, "racy").await;
    let new = cms
        .create(&PostParams::default(), &cm)
        .await
        .expect("re-create");
    let new_uid = new.uid().expect("uid");
    assert_ne!(old_uid, new_uid);

    let ar = configmap_ar();
    let r = delete_with_uid(&h.client, &ar, Some(ns), "racy", &old_uid).await;
    match r {
        Ok(Deleted::UidMismatch) => {}
        Ok(Deleted::Deleted) => panic!("delete_with_uid deleted an object with another UID"),
        Ok(Deleted::Gone) => panic!("delete_with_uid reported Gone for an existing object"),
        Ok(Deleted::Changed) => panic!("Changed: no resourceVersion was given"),
        Err(e) => panic!("delete_with_uid failed: {e}"),
    }
    let live = cms
        .get("racy")
        .await
        .expect("the re-created object still exists");
    assert_eq!(live.uid().as_deref(), Some(new_uid.as_str()));

    // With the right UID it deletes; once gone it says so.
    match delete_with_uid(&h.client, &ar, Some(ns), "racy", &new_uid).await {
        Ok(Deleted::Deleted) => {}
        Ok(Deleted::UidMismatch) => panic!("UidMismatch for the current UID"),
        Ok(Deleted::Gone) => panic!("Gone for an existing object"),
        Ok(Deleted::Changed) => panic!("Changed: no resourceVersion was given"),
        Err(e) => panic!("delete_with_uid failed: {e}"),
    }
    wait_for_absent(&h, "racy").await;
    match delete_with_uid(&h.client, &ar, Some(ns), "racy", &new_uid).await {
        Ok(Deleted::Gone) => {}
        Ok(Deleted::Deleted) => panic!("Deleted for an absent object"),
        Ok(Deleted::UidMismatch) => panic!("UidMismatch for an absent object"),
        Ok(Deleted::Changed) => panic!("Changed for an absent object"),
        Err(e) => panic!("delete_with_uid failed: {e}"),
    }
}

async fn wait_for_absent(h: &Harness, name: &str) {
    eventually(&format!("ConfigMap {name} to be gone"), DEADLINE, || {
        let client = h.client.clone();
        let ns = h.ns.clone();
        let name = name.to_owned();
        async move { (!exists(&client, &configmap_ar(), Some(&ns), &name).await).then_some(()) }
    })
    .await
}

/// A parent managed by other tooling is refused: OwnershipConflict, Stalled, nothing written.
#[tokio::test]
async fn parent_with_foreign_tooling_is_refused() {
    let h = Harness::new("tooling").await;
    let op = h.start_operator();
    let ns = h.ns.as_str();
    let set = h.applyset("kubectl-owned");
    set.create_with(
        json!({}),
        json!({ ANNOTATION_TOOLING: "kubectl/v1.37.1" }),
        json!({"manifests": [configmap("a", json!({"k": "1"}))]}),
    )
    .await;
    let st = set
        .wait_ready_reason(Some("False"), "OwnershipConflict")
        .await;
    assert_condition(&st, "Stalled", "True");
    let msg = ready(&st).message.clone();
    assert!(
        msg.contains("kubectl"),
        "the message names the other tooling: {msg:?}"
    );
    wait_reconciles(&op, 2).await;
    assert!(
        !exists(&h.client, &configmap_ar(), Some(ns), "a").await,
        "no member may be created under foreign tooling"
    );
    let parent = set.live().await;
    assert_eq!(
        parent
            .annotations()
            .get(ANNOTATION_TOOLING)
            .map(String::as_str),
        Some("kubectl/v1.37.1"),
        "the tooling annotation must not be overwritten"
    );
    assert!(
        !parent.annotations().contains_key(ANNOTATION_GROUP_KINDS),
        "nothing may be written to a parent of other tooling: {:?}",
        parent.annotations()
    );
    stop(op).await;
}

/// A parent with a wrong id label is refused; the message says to remove the label; removing
/// it repairs the parent.
#[tokio::test]
async fn parent_with_a_wrong_id_label_is_refused_until_repaired() {
    let h = Harness::new("wrongid").await;
    let op = h.start_operator();
    let ns = h.ns.as_str();
    let set = h.applyset("impostor");
    let other_id = applyset_id(ns, "someone-else");
    set.create_with(
        json!({ LABEL_ID: other_id }),
        json!({}),
        json!({"manifests": [configmap("a", json!({"k": "1"}))]}),
    )
    .await;
    let st = set
        .wait_ready_reason(Some("False"), "OwnershipConflict")
        .await;
    assert_condition(&st, "Stalled", "True");
    let msg = ready(&st).message.clone();
    assert!(
        msg.to_lowercase().contains("remove") && msg.contains(LABEL_ID),
        "the message must say to remove the {LABEL_ID} label: {msg:?}"
    );
    wait_reconciles(&op, 2).await;
    assert!(
        !exists(&h.client, &configmap_ar(), Some(ns), "a").await,
        "no member created"
    );
    assert_eq!(
        set.label(LABEL_ID).await.as_deref(),
        Some(other_id.as_str())
    );

    // The repair the message describes.
    set.patch_metadata(json!({"labels": { LABEL_ID: null }}))
        .await;
    set.wait_until(
        "Ready=True after removing the id label",
        DEADLINE,
        |_, st| {
            let st = st?;
            (condition(st, "Ready")?.status == "True").then_some(())
        },
    )
    .await;
    assert_eq!(set.label(LABEL_ID).await, Some(set.id()));
    assert_member_of(
        &must_get(&h.client, &configmap_ar(), Some(ns), "a").await,
        &set.id(),
        &set.manager(),
    );
    stop(op).await;
}

/// A manifest that presets the part-of label is refused, and nothing is applied.
#[tokio::test]
async fn manifest_with_preset_part_of_is_refused() {
    let h = Harness::new("presetpartof").await;
    let op = h.start_operator();
    let ns = h.ns.as_str();
    let set = h.applyset("preset");
    let mut labelled = configmap("labelled", json!({"k": "1"}));
    labelled["metadata"]["labels"] = json!({ LABEL_PART_OF: applyset_id(ns, "elsewhere") });
    set.create(json!({"manifests": [configmap("plain", json!({"k": "1"})), labelled]}))
        .await;
    let st = set
        .wait_until(
            "Ready=False ValidationFailed or OwnershipConflict",
            DEADLINE,
            |obj, st| {
                let st = st?;
                if st.observed_generation != obj.metadata.generation {
                    return None;
                }
                let r = condition(st, "Ready")?;
                (r.status == "False"
                    && (r.reason == "ValidationFailed" || r.reason == "OwnershipConflict"))
                    .then(|| st.clone())
            },
        )
        .await;
    assert_condition(&st, "Stalled", "True");
    let msg = ready(&st).message.clone();
    assert!(
        msg.contains("part-of"),
        "the message mentions part-of: {msg:?}"
    );
    wait_reconciles(&op, 2).await;
    for n in ["plain", "labelled"] {
        assert!(
            !exists(&h.client, &configmap_ar(), Some(ns), n).await,
            "{n} must not be applied"
        );
    }
    stop(op).await;
}

/// A live object that belongs to another ApplySet is not taken over.
#[tokio::test]
async fn live_object_of_another_applyset_is_not_taken_over() {
    let h = Harness::new("overlap").await;
    let op = h.start_operator();
    let ns = h.ns.as_str();
    let other_id = applyset_id(ns, "the-other-set");
    let mut taken = configmap("taken", json!({"k": "orig"}));
    taken["metadata"]["labels"] = json!({ LABEL_PART_OF: other_id });
    ssa(
        &h.client,
        &configmap_ar(),
        Some(ns),
        "the-other-tool",
        taken,
    )
    .await;
    let taken_rv = rv(&h.client, &configmap_ar(), Some(ns), "taken").await;

    let set = h.applyset("mine");
    set.create(json!({"manifests": [
        configmap("taken", json!({"k": "new"})), configmap("free", json!({"k": "1"}))]}))
        .await;
    let st = set
        .wait_ready_reason(Some("False"), "OwnershipConflict")
        .await;
    assert_condition(&st, "Stalled", "True");
    let msg = ready(&st).message.clone();
    assert!(
        msg.contains("taken"),
        "the message names the member: {msg:?}"
    );
    wait_reconciles(&op, 2).await;
    let obj = must_get(&h.client, &configmap_ar(), Some(ns), "taken").await;
    assert_eq!(
        obj.resource_version(),
        Some(taken_rv),
        "the other set's object must be unchanged"
    );
    assert_eq!(obj.labels().get(LABEL_PART_OF), Some(&other_id));
    assert_eq!(obj.data["data"]["k"], "orig");
    stop(op).await;
}

/// An immutable field change is reported (naming the opt-in annotation) and nothing is
/// deleted; with `applyset.dev/force: enabled` on the member, it is deleted and re-created.
#[tokio::test]
async fn immutable_change_recreates_only_with_the_force_annotation() {
    let h = Harness::new("immutable").await;
    let op = h.start_operator();
    let ns = h.ns.as_str();
    let set = h.applyset("immutable");
    let frozen = |v: &str, force: bool| {
        let mut cm = configmap("frozen", json!({"k": v}));
        cm["immutable"] = json!(true);
        if force {
            cm["metadata"]["annotations"] = json!({"applyset.dev/force": "enabled"});
        }
        cm
    };
    set.create(json!({"manifests": [frozen("1", false), configmap("other", json!({"k": "1"}))]}))
        .await;
    set.wait_ready().await;
    let before = must_get(&h.client, &configmap_ar(), Some(ns), "frozen").await;

    // Changing data of an immutable ConfigMap: refused by the API server, reported, and
    // `other` (dropped at the same time) is not pruned.
    set.patch_spec(json!({"manifests": [frozen("2", false)]}))
        .await;
    let st = set.wait_ready_reason(Some("False"), "ApplyFailed").await;
    let message = &ready(&st).message;
    assert!(
        message.contains("frozen") && message.contains("applyset.dev/force: enabled"),
        "the message names the member and the opt-in: {message}"
    );
    let still = must_get(&h.client, &configmap_ar(), Some(ns), "frozen").await;
    assert_eq!(
        still.uid(),
        before.uid(),
        "not deleted without the annotation"
    );
    assert_eq!(still.data["data"]["k"], "1");
    assert!(
        exists(&h.client, &configmap_ar(), Some(ns), "other").await,
        "a failed apply prunes nothing"
    );

    // With the annotation: deleted and re-created with the new data.
    set.patch_spec(json!({"manifests": [frozen("2", true)]}))
        .await;
    set.wait_ready().await;
    let after = must_get(&h.client, &configmap_ar(), Some(ns), "frozen").await;
    assert_ne!(after.uid(), before.uid(), "re-created");
    assert_eq!(after.data["data"]["k"], "2");
    stop(op).await;
}

/// A delete conditional on the resourceVersion seen at the prune decision leaves an object
/// that changed since (here: annotated prune: disabled) alone.
#[tokio::test]
async fn an_object_changed_after_the_prune_decision_is_not_deleted() {
    let h = Harness::new("changed").await;
    let ns = h.ns.as_str();
    let cms: Api<ConfigMap> = Api::namespaced(h.client.clone(), ns);
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "moving"}})).expect("cm");
    let seen = cms
        .create(&PostParams::default(), &cm)
        .await
        .expect("create");
    let (uid, rv) = (
        seen.uid().expect("uid"),
        seen.resource_version().expect("rv"),
    );
    cms.patch(
        "moving",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(
            json!({"metadata": {"annotations": {ANNOTATION_PRUNE: "disabled"}}}),
        ),
    )
    .await
    .expect("annotate");
    let r = applyset_operator::engine::prune::delete_if_unchanged(
        &h.client,
        &configmap_ar(),
        Some(ns),
        "moving",
        &uid,
        Some(&rv),
    )
    .await
    .expect("delete call");
    assert_eq!(r, Deleted::Changed);
    assert!(exists(&h.client, &configmap_ar(), Some(ns), "moving").await);
}

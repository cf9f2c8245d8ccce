//! End to end: `spec.deletionPolicy`, what deleting a set does to its members. Delete (the
//! default) deletes them before the set goes; WaitForTermination deletes them and keeps the
//! set (saying so in status) until they are gone, at most `spec.timeout`; MirrorPrune deletes
//! them when `spec.prune` is true and leaves them when it is false; Orphan leaves them.

mod support;

use support::operator;

use kube::{
    ResourceExt,
    api::{Patch, PatchParams},
};
use operator::*;
use serde_json::{Value, json};
use support::wait_for;

const HOLD: &str = "applyset.test/hold";

/// A ConfigMap whose deletion waits for the test to remove its finalizer.
fn held(name: &str) -> Value {
    let mut cm = configmap(name, json!({"k": "v"}));
    cm["metadata"]["finalizers"] = json!([HOLD]);
    cm
}

/// Creates a set of `spec` (with two ConfigMaps, `a` and `b`, unless it says otherwise),
/// waits until it is Ready, deletes it and waits until it is gone.
async fn create_and_delete(h: &Harness, name: &str, mut spec: Value) -> Parent {
    if spec.get("manifests").is_none() {
        spec["manifests"] = json!([
            configmap("a", json!({"k": "1"})),
            configmap("b", json!({"k": "1"}))
        ]);
    }
    let set = h.applyset(name);
    set.create(spec).await;
    set.wait_ready().await;
    set.delete().await;
    set.wait_gone(DEADLINE).await;
    set
}

async fn configmaps(h: &Harness) -> Vec<String> {
    let api = dyn_api(&h.client, &configmap_ar(), Some(&h.ns));
    let mut names: Vec<String> = api
        .list(&Default::default())
        .await
        .expect("list")
        .items
        .into_iter()
        .map(|o| o.name_any())
        .filter(|n| n != "kube-root-ca.crt")
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn delete_deletes_the_members() {
    let h = Harness::new("dp-delete").await;
    let op = h.start_operator();
    create_and_delete(&h, "set", json!({"deletionPolicy": "Delete"})).await;
    // The finalizer went after the members were deleted (Background: they are gone or going).
    wait_for("the members gone", DEADLINE, || async {
        configmaps(&h).await.is_empty().then_some(())
    })
    .await;
    stop(op).await;
}

#[tokio::test]
async fn mirror_prune_deletes_the_members_when_prune_is_true() {
    let h = Harness::new("dp-mirror-on").await;
    let op = h.start_operator();
    create_and_delete(&h, "set", json!({"deletionPolicy": "MirrorPrune"})).await;
    wait_for("the members gone", DEADLINE, || async {
        configmaps(&h).await.is_empty().then_some(())
    })
    .await;
    stop(op).await;
}

#[tokio::test]
async fn mirror_prune_leaves_the_members_when_prune_is_false() {
    let h = Harness::new("dp-mirror-off").await;
    let op = h.start_operator();
    let set = create_and_delete(
        &h,
        "set",
        json!({"deletionPolicy": "MirrorPrune", "prune": false}),
    )
    .await;
    // The set is gone (its cleanup has run): the members are still there, still labelled.
    assert_eq!(configmaps(&h).await, ["a", "b"]);
    assert_eq!(
        list_part_of(&h.client, &configmap_ar(), Some(&h.ns), &set.id())
            .await
            .len(),
        2
    );
    stop(op).await;
}

#[tokio::test]
async fn orphan_leaves_the_members() {
    let h = Harness::new("dp-orphan").await;
    let op = h.start_operator();
    create_and_delete(&h, "set", json!({"deletionPolicy": "Orphan"})).await;
    assert_eq!(configmaps(&h).await, ["a", "b"]);
    stop(op).await;
}

#[tokio::test]
async fn wait_for_termination_keeps_the_set_until_its_members_are_gone() {
    let h = Harness::new("dp-wait").await;
    let op = h.start_operator();
    let api = dyn_api(&h.client, &configmap_ar(), Some(&h.ns));
    let set = h.applyset("set");
    set.create(json!({"deletionPolicy": "WaitForTermination",
        "manifests": [held("held"), configmap("plain", json!({"k": "v"}))]}))
        .await;
    set.wait_ready().await;
    set.delete().await;

    // The set says it waits, naming the member still there; the member is being deleted.
    let msg = set
        .wait_until("the wait for termination in status", DEADLINE, |_, st| {
            let c = st.and_then(|s| condition(s, "Ready").cloned())?;
            (c.reason == "Progressing" && c.message.contains("WaitForTermination"))
                .then_some(c.message)
        })
        .await;
    assert!(msg.contains("held"), "{msg}");
    assert!(!msg.contains("plain"), "{msg}");
    let o = api.get("held").await.expect("the held member");
    assert!(
        o.metadata.deletion_timestamp.is_some(),
        "held is being deleted"
    );
    assert!(set.get().await.is_some(), "the set waits");

    api.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("release the hold");
    set.wait_gone(DEADLINE).await;
    assert!(configmaps(&h).await.is_empty());
    stop(op).await;
}

#[tokio::test]
async fn wait_for_termination_gives_up_at_the_timeout() {
    let h = Harness::new("dp-wait-timeout").await;
    let op = h.start_operator();
    let api = dyn_api(&h.client, &configmap_ar(), Some(&h.ns));
    create_and_delete(
        &h,
        "set",
        json!({"deletionPolicy": "WaitForTermination", "timeout": "3s", "manifests": [held("held")]}),
    )
    .await;
    // The set went although its member is still being deleted: it waited (Progressing), then
    // gave up at its timeout, saying so.
    let o = api.get("held").await.expect("the held member");
    assert!(o.metadata.deletion_timestamp.is_some());
    let waited = event_note(&h.client, &h.ns, "Progressing", "WaitForTermination").await;
    assert!(waited.contains("held"), "{waited}");
    let gave_up = event_note(&h.client, &h.ns, "PruneFailed", "after spec.timeout").await;
    assert!(gave_up.contains("held"), "{gave_up}");
    api.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("release the hold");
    stop(op).await;
}

//! End to end: what happens between spec changes. Member watches correct drift at once (not
//! at the next interval); a reconcile whose set is unchanged sends no write request; the
//! reconcile-requested-at annotation starts a reconcile without a spec change.

#[path = "support/operator.rs"]
mod operator;
mod support;

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
    // settle: two reconciles in a row with no write.
    let mut settled = false;
    for _ in 0..20 {
        let (w, r) = (writes(&metrics), op.metrics().reconciles());
        request_reconcile(&set, &format!("settle-{r}")).await;
        wait_for("the requested reconcile", DEADLINE, || {
            let done = op.metrics().reconciles() > r;
            async move { done.then_some(()) }
        })
        .await;
        if writes(&metrics) == w {
            settled = true;
            break;
        }
    }
    assert!(
        settled,
        "reconciles kept writing: {} writes",
        writes(&metrics)
    );
    let (w, r) = (writes(&metrics), op.metrics().reconciles());
    let gets = metrics.requests("GET");
    request_reconcile(&set, "now").await;
    wait_for("the requested reconcile", DEADLINE, || {
        let done = op.metrics().reconciles() > r;
        async move { done.then_some(()) }
    })
    .await;
    assert_eq!(
        writes(&metrics),
        w,
        "a no-op reconcile sends no write request"
    );
    assert_eq!(
        metrics.requests("GET") - gets,
        0,
        "nor any read: the member watches know what is live, so nothing is listed"
    );
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
    wait_reconciles(&op, 0).await;
    let before = op.metrics().reconciles();
    request_reconcile(&set, "2026-11-21T13:00:00Z").await;
    wait_for("a reconcile after the request", DEADLINE, || {
        let n = op.metrics().reconciles();
        async move { (n > before).then_some(()) }
    })
    .await;
    stop(op).await;
}

//! `/readyz` answers 503 until the controllers' caches have synced, then 200. This binary
//! has a control plane of its own, without the CRDs at first, so the operator cannot sync
//! until the test installs them.

mod support;

use support::process;

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api,
    api::{Patch, PatchParams},
};
use process::OperatorProcess;
use support::{cluster, wait_for};

#[tokio::test]
async fn readyz_is_503_until_the_caches_sync_then_200() {
    let client = cluster().client().await;
    let op = OperatorProcess::start(cluster().kubeconfig(), &[], "readyz");

    // Serving, but not ready: the CRDs are not installed, so nothing can be listed.
    let (code, body) = wait_for("/readyz to answer", Duration::from_secs(60), || async {
        op.readyz()
    })
    .await;
    assert_eq!(
        code,
        503,
        "not ready before the caches sync: {body}\n{}",
        op.log()
    );
    assert!(body.contains("caches"), "says what it waits for: {body}");
    assert_eq!(
        process::http_get(op.health_port, "/healthz").map(|(c, _)| c),
        Some(200),
        "alive all the same"
    );

    let crds: Api<CustomResourceDefinition> = Api::all(client);
    for crd in applyset_operator::api::crds() {
        let name = crd.metadata.name.clone().expect("name");
        crds.patch(
            &name,
            &PatchParams::apply("test").force(),
            &Patch::Apply(&crd),
        )
        .await
        .expect("install crd");
    }
    // The operator's watches retry with backoff; once they list, /readyz turns 200.
    let body = wait_for("/readyz to turn 200", Duration::from_secs(90), || async {
        match op.readyz() {
            Some((200, body)) => Some(body),
            _ => None,
        }
    })
    .await;
    assert_eq!(body, "ok");
}

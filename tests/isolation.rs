//! End to end: one bad set stays one bad set (docs/security.md, "Budgets and isolation"). Parents whose content the
//! operator cannot read or process — a manifest nested deeper than a JSON reader allows, a
//! malformed ApplySet annotation — fail alone with a clear condition, and every other set
//! keeps reconciling, whether the bad parents exist before the operator starts (its first
//! list) or are created while it runs (its watch).

mod support;

use support::operator;

use applyset_operator::{api::ApplySetStatus, controller::MAX_OBJECT_BYTES};
use kube::Client;
use operator::*;
use serde_json::{Value, json};

/// A ConfigMap manifest with `depth` levels of nested mappings under `data`-less field `x`
/// (deeper than serde_json's default recursion limit of 128 when `depth` is larger).
fn deep_configmap(name: &str, depth: usize) -> String {
    let mut nested = String::from("{}");
    for _ in 0..depth {
        nested = format!("{{\"a\":{nested}}}");
    }
    format!(
        r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}"}},"x":{nested}}}"#
    )
}

/// Creates ApplySet `name` in `ns` from raw JSON text (a typed or dynamic client could not
/// even read the server's answer back), labelled for this test.
async fn create_raw(client: &Client, ns: &str, name: &str, label: &str, manifests_json: &str) {
    let body = format!(
        r#"{{"apiVersion":"applyset.dev/v1alpha1","kind":"ApplySet","metadata":{{"name":"{name}","namespace":"{ns}","labels":{{"{TEST_LABEL}":"{label}"}}}},"spec":{{"interval":"5s","retryInterval":"1s","manifests":[{manifests_json}]}}}}"#
    );
    let request = http::Request::post(format!(
        "/apis/applyset.dev/v1alpha1/namespaces/{ns}/applysets"
    ))
    .header("content-type", "application/json")
    .body(body.into_bytes())
    .expect("request");
    client
        .request_text(request)
        .await
        .unwrap_or_else(|e| panic!("creating ApplySet {ns}/{name}: {e}"));
}

/// The status of ApplySet `ns/name` read as raw JSON (only `status` is parsed, so the deep
/// spec is skipped without recursion).
async fn raw_status(client: &Client, ns: &str, name: &str) -> Option<ApplySetStatus> {
    #[derive(serde::Deserialize)]
    struct OnlyStatus {
        status: Option<ApplySetStatus>,
    }
    let request = http::Request::get(format!(
        "/apis/applyset.dev/v1alpha1/namespaces/{ns}/applysets/{name}"
    ))
    .body(Vec::new())
    .expect("request");
    let text = client.request_text(request).await.ok()?;
    serde_json::from_str::<OnlyStatus>(&text).ok()?.status
}

/// Waits until the raw status of `ns/name` has Ready=False with `reason`; returns its message.
async fn wait_failed_raw(client: &Client, ns: &str, name: &str, reason: &str) -> String {
    support::wait_for(
        &format!("ApplySet {ns}/{name} Ready=False {reason}"),
        DEADLINE,
        || async {
            let st = raw_status(client, ns, name).await?;
            let ready = condition(&st, "Ready")?;
            (ready.status == "False" && ready.reason == reason).then(|| ready.message.clone())
        },
    )
    .await
}

#[tokio::test]
async fn unreadable_and_malformed_sets_fail_alone() {
    let h = Harness::new("poison").await;
    let ns = h.ns.as_str();
    // Before the operator starts: its first list holds them.
    create_raw(
        &h.client,
        ns,
        "deep-before",
        &h.label,
        &deep_configmap("deep", 300),
    )
    .await;
    let malformed = h.applyset("malformed");
    malformed
        .create_with(
            json!({}),
            json!({ANNOTATION_GROUP_KINDS: "not a kind list/,,"}),
            json!({"manifests": [configmap("m", json!({"k": "1"}))]}),
        )
        .await;

    let op = h.start_operator();
    let healthy = h.applyset("healthy");
    healthy
        .create(json!({"manifests": [configmap("ok", json!({"k": "1"}))]}))
        .await;
    healthy.wait_ready().await;

    // The bad ones fail alone, each with a message that names what to fix.
    let msg = wait_failed_raw(&h.client, ns, "deep-before", "ValidationFailed").await;
    assert!(
        msg.contains("spec.manifests[0]") && msg.contains("nested"),
        "the message names the manifest and the nesting: {msg:?}"
    );
    let st = malformed
        .wait_ready_reason(Some("False"), "ValidationFailed")
        .await;
    let msg = ready(&st).message.clone();
    assert!(
        msg.contains("annotations are malformed"),
        "the message names the annotation: {msg:?}"
    );

    // While the operator runs: its watch sees a deep one, and a new healthy set still
    // becomes Ready after it.
    create_raw(
        &h.client,
        ns,
        "deep-after",
        &h.label,
        &deep_configmap("deep2", 300),
    )
    .await;
    let after = h.applyset("healthy-after");
    after
        .create(json!({"manifests": [configmap("ok2", json!({"k": "1"}))]}))
        .await;
    after.wait_ready().await;
    wait_failed_raw(&h.client, ns, "deep-after", "ValidationFailed").await;
    // And the first healthy set keeps reconciling: a change of its spec is applied.
    healthy
        .patch_spec(json!({"manifests": [configmap("ok", json!({"k": "2"}))]}))
        .await;
    healthy.wait_ready().await;
    let cm = must_get(&h.client, &configmap_ar(), Some(ns), "ok").await;
    assert_eq!(cm.data["data"]["k"], Value::from("2"));
    stop(op).await;
}

/// A set whose spec takes nearly all of the 1 MiB a parent may have still gets a status: the
/// members list is cut (membersTruncated) so that spec and status stay within the bound. (The
/// operator's bound on inline manifests, 512 KiB by default, is raised here to reach it.)
#[tokio::test]
async fn a_set_near_the_size_limit_still_gets_a_status() {
    let h = Harness::new("nearlimit").await;
    let mut config = h.config();
    config.set_limits.max_inline_bytes = 2 << 20;
    let op = applyset_operator::controller::Operator::start(h.client.clone(), config);
    let set = h.applyset("big");
    let mut manifests: Vec<Value> = (0..300)
        .map(|i| configmap(&format!("member-{i:04}"), json!({})))
        .collect();
    let spec_len = |m: &Vec<Value>| {
        serde_json::to_vec(&json!({"manifests": m, "interval": "5s", "retryInterval": "1s"}))
            .expect("json")
            .len()
    };
    // The padding takes the spec to 8 KiB under the bound: 300 members in status need more.
    let pad = MAX_OBJECT_BYTES - 8 * 1024 - spec_len(&manifests) - 200;
    manifests.push(configmap("padding", json!({"v": "x".repeat(pad)})));
    let spec_bytes = spec_len(&manifests);
    assert!(spec_bytes > MAX_OBJECT_BYTES - 9 * 1024 && spec_bytes < MAX_OBJECT_BYTES);
    set.create(json!({ "manifests": manifests })).await;
    let st = set.wait_ready_within(LONG_DEADLINE).await;
    assert_eq!(summary(&st).members, 301);
    assert!(
        st.members_truncated,
        "membersTruncated: {}",
        st.members.len()
    );
    assert!(
        !st.members.is_empty() && st.members.len() < 301,
        "{} members listed",
        st.members.len()
    );
    let live = set.live().await;
    let stored = serde_json::to_vec(&live.data["spec"]).expect("json").len()
        + serde_json::to_vec(&live.data["status"])
            .expect("json")
            .len();
    assert!(
        stored <= MAX_OBJECT_BYTES,
        "spec and status take {stored} bytes, more than {MAX_OBJECT_BYTES}"
    );
    // Once every member is unchanged, nothing changes: the next reconciles write no status
    // (the cut status is the same every time).
    wait_reconciles(&op, 2).await;
    let live = set.live().await;
    let rv = live.metadata.resource_version.clone();
    wait_reconciles(&op, 2).await;
    let again = set.live().await;
    assert_eq!(
        again.metadata.resource_version,
        rv,
        "status before: {}\nafter: {}\nannotations before {:?} after {:?}",
        live.data["status"],
        again.data["status"],
        live.metadata.annotations,
        again.metadata.annotations
    );
    stop(op).await;
}

/// The per-set budgets (`--max-members-per-set`, `--max-yaml-mib-per-set`): a set over one
/// fails with ValidationFailed naming the count or the source and the flag; a set within them
/// is applied by the same operator.
#[tokio::test]
async fn sets_over_the_per_set_budgets_fail_naming_the_flag() {
    use applyset_operator::{manifest::YamlCost, render::SetLimits};
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::{Api, api::PostParams};

    let h = Harness::new("budgets").await;
    let ns = h.ns.as_str();
    let mut config = h.config();
    config.set_limits = SetLimits {
        max_members: 3,
        yaml: YamlCost {
            nodes: 100_000,
            bytes: 64 * 1024,
        },
        ..SetLimits::default()
    };
    let op = applyset_operator::controller::Operator::start(h.client.clone(), config);

    let many = h.applyset("many");
    many.create(json!({"manifests": (0..4)
        .map(|i| configmap(&format!("many-{i}"), json!({})))
        .collect::<Vec<_>>()}))
        .await;
    let st = many
        .wait_ready_reason(Some("False"), "ValidationFailed")
        .await;
    let msg = ready(&st).message.clone();
    assert!(
        msg.contains("declares 4 members") && msg.contains("--max-members-per-set"),
        "{msg:?}"
    );
    assert!(!exists(&h.client, &configmap_ar(), Some(ns), "many-0").await);

    // A source whose one document is larger than the set's YAML budget.
    let big = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: big\ndata:\n  v: {}\n",
        "x".repeat(100 * 1024)
    );
    let bundle: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "bundle", "namespace": ns},
        "data": {"big.yaml": big}
    }))
    .expect("configmap");
    Api::<ConfigMap>::namespaced(h.client.clone(), ns)
        .create(&PostParams::default(), &bundle)
        .await
        .expect("create the bundle");
    let large = h.applyset("large");
    large
        .create(json!({"sources": [{"configMap": {"name": "bundle"}}]}))
        .await;
    let st = large
        .wait_ready_reason(Some("False"), "ValidationFailed")
        .await;
    let msg = ready(&st).message.clone();
    assert!(
        msg.contains(&format!("configMap {ns}/bundle key big.yaml"))
            && msg.contains("--max-yaml-mib-per-set"),
        "{msg:?}"
    );
    assert!(!exists(&h.client, &configmap_ar(), Some(ns), "big").await);

    let fine = h.applyset("fine");
    fine.create(json!({"manifests": [configmap("fine", json!({"k": "1"}))]}))
        .await;
    fine.wait_ready().await;
    stop(op).await;
}

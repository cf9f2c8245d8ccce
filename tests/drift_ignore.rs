//! End to end: drift-ignore rules (`spec.ignore`, Flux's). An ignored field is set from the
//! manifest when the member is created, then neither reset nor reverted when an HPA-style
//! writer (an Update through the scale subresource) or another Apply manager changes it,
//! while an un-ignored field of the same object is still corrected; a rule without target
//! applies to every member; a manifest change of an ignored field is not applied; Plan mode
//! reports no change for an ignored drift; a path on identity is refused.

mod support;

use support::operator;

use applyset_operator::api::MemberRef;
use k8s_openapi::api::apps::v1::Deployment;
use kube::{
    Api,
    api::{Patch, PatchParams},
};
use operator::*;
use serde_json::{Value, json};

/// A merge patch of `name` as field manager `manager` (an Update, as `kubectl edit` makes).
async fn edit(
    h: &Harness,
    ar: &kube::discovery::ApiResource,
    name: &str,
    manager: &str,
    patch: Value,
) {
    let params = PatchParams {
        field_manager: Some(manager.into()),
        ..Default::default()
    };
    dyn_api(&h.client, ar, Some(&h.ns))
        .patch(name, &params, &Patch::Merge(patch))
        .await
        .unwrap_or_else(|e| panic!("{manager} editing {name}: {e}"));
}

/// An HPA-style writer: an Update of `web`'s scale subresource to `replicas`, as field manager
/// `hpa-test`; the scale the server answered.
async fn scale(h: &Harness, replicas: i32) -> k8s_openapi::api::autoscaling::v1::Scale {
    let deployments: Api<Deployment> = Api::namespaced(h.client.clone(), &h.ns);
    let hpa = PatchParams {
        field_manager: Some("hpa-test".into()),
        ..Default::default()
    };
    deployments
        .patch_scale(
            "web",
            &hpa,
            &Patch::Merge(json!({"spec": {"replicas": replicas}})),
        )
        .await
        .expect("scale web")
}

async fn live(h: &Harness, ar: &kube::discovery::ApiResource, name: &str) -> Value {
    let obj = must_get(&h.client, ar, Some(&h.ns), name).await;
    serde_json::to_value(obj).expect("json")
}

/// Whether `manager`'s Apply entry (no subresource) of `obj` owns `spec.replicas`.
fn owns_replicas(obj: &Value, manager: &str) -> bool {
    obj["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["manager"] == manager && e["operation"] == "Apply")
        .any(|e| e["fieldsV1"]["f:spec"].get("f:replicas").is_some())
}

fn web() -> Value {
    let mut d = deployment("web");
    d["spec"]["replicas"] = json!(2);
    d["spec"]["minReadySeconds"] = json!(3);
    d
}

/// Waits until `web`'s minReadySeconds is back to 3 (corrected by a reconcile that applied
/// `web` after the change) and returns the object then.
async fn wait_corrected(h: &Harness) -> Value {
    eventually("web's minReadySeconds corrected to 3", DEADLINE, || async {
        let obj = live(h, &deployment_ar(), "web").await;
        (obj["spec"]["minReadySeconds"] == 3).then_some(obj)
    })
    .await
}

#[tokio::test]
async fn replicas_an_autoscaler_or_another_applier_sets_are_kept_while_the_rest_is_corrected() {
    let h = Harness::new("ignore").await;
    let op = h.start_operator();
    let set = h.applyset("ignore");
    // spec.force: a field another manager changed with an Update (kubectl edit) is ours
    // again only by force; without it the correction is a Conflict.
    set.create(json!({"interval": "1h", "force": true,
        "manifests": [web(), configmap("marker", json!({"ignored": "git", "kept": "git"}))],
        "ignore": [
            {"paths": ["/spec/replicas"], "target": {"group": "apps", "kind": "Deploy.*", "name": "web"}},
            {"paths": ["/data/ignored"]},
        ]}))
        .await;
    set.wait_ready().await;
    let d = live(&h, &deployment_ar(), "web").await;
    assert_eq!(
        d["spec"]["replicas"], 2,
        "created: the ignored field is set from the manifest"
    );
    assert!(owns_replicas(&d, &set.manager()));

    // An HPA-style writer: an Update of the scale subresource.
    scale(&h, 5).await;
    // Someone edits an un-ignored field of the same object: its correction is a reconcile
    // that applied `web` after the scale.
    edit(
        &h,
        &deployment_ar(),
        "web",
        "kubectl-edit",
        json!({"spec": {"minReadySeconds": 9}}),
    )
    .await;
    let d = wait_corrected(&h).await;
    assert_eq!(
        d["spec"]["replicas"], 5,
        "the autoscaler's replicas are neither reset nor reverted"
    );
    assert!(
        !owns_replicas(&d, &set.manager()),
        "given up to the autoscaler"
    );

    // A scale alone: the reconciles after it (proven by the correction of another member)
    // read `web` and apply it, writing nothing (no new resourceVersion, no loop; no
    // deployment controller runs in the test's control plane).
    let scaled = scale(&h, 6).await;
    let scaled_rv = live(&h, &deployment_ar(), "web").await["metadata"]["resourceVersion"].clone();
    assert_eq!(scaled.spec.and_then(|s| s.replicas), Some(6));
    edit(
        &h,
        &configmap_ar(),
        "marker",
        "kubectl-edit",
        json!({"data": {"kept": "edited"}}),
    )
    .await;
    eventually("marker's kept key corrected", DEADLINE, || async {
        let cm = live(&h, &configmap_ar(), "marker").await;
        (cm["data"]["kept"] == "git").then_some(())
    })
    .await;
    let d = live(&h, &deployment_ar(), "web").await;
    assert_eq!(d["spec"]["replicas"], 6);
    assert_eq!(
        d["metadata"]["resourceVersion"], scaled_rv,
        "nothing written to web"
    );

    // Another Apply manager takes replicas (forced).
    ssa_forced(
        &h,
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": h.ns}, "spec": {"replicas": 7}}),
    )
    .await;
    edit(
        &h,
        &deployment_ar(),
        "web",
        "kubectl-edit",
        json!({"spec": {"minReadySeconds": 11}}),
    )
    .await;
    let d = wait_corrected(&h).await;
    assert_eq!(d["spec"]["replicas"], 7, "the other applier's value stays");
    assert!(owns_replicas(&d, "other-applier"));
    assert!(
        !owns_replicas(&d, &set.manager()),
        "our manager does not own it"
    );

    // A rule without target: the ConfigMap's ignored key stays edited, the other is corrected.
    edit(
        &h,
        &configmap_ar(),
        "marker",
        "kubectl-edit",
        json!({"data": {"ignored": "edited", "kept": "edited"}}),
    )
    .await;
    let cm = eventually("marker's kept key corrected", DEADLINE, || async {
        let cm = live(&h, &configmap_ar(), "marker").await;
        (cm["data"]["kept"] == "git").then_some(cm)
    })
    .await;
    assert_eq!(cm["data"]["ignored"], "edited");
    let st = set.wait_ready().await;
    assert_eq!(summary(&st).failed, 0, "{}", status_json(&st));

    // The rule on replicas removed: the manifest's value is applied again (forced).
    set.patch_spec(json!({"ignore": [{"paths": ["/data/ignored"]}]}))
        .await;
    set.wait_ready().await;
    let d = eventually("web's replicas back to 2", DEADLINE, || async {
        let d = live(&h, &deployment_ar(), "web").await;
        (d["spec"]["replicas"] == 2).then_some(d)
    })
    .await;
    assert!(owns_replicas(&d, &set.manager()));
    stop(op).await;
}

async fn ssa_forced(h: &Harness, obj: Value) {
    let mut params = PatchParams::apply("other-applier");
    params.force = true;
    dyn_api(&h.client, &deployment_ar(), Some(&h.ns))
        .patch("web", &params, &Patch::Apply(obj))
        .await
        .expect("other-applier's apply");
}

#[tokio::test]
async fn an_ignored_field_the_manifest_changes_keeps_its_live_value_and_a_plan_shows_no_change() {
    let h = Harness::new("ignore-plan").await;
    let op = h.start_operator();
    let set = h.applyset("ignore-plan");
    let ignore = json!([{"paths": ["/data/a"], "target": {"kind": "ConfigMap", "labelSelector": "tier=web"}}]);
    let cm = |name: &str, a: &str, b: &str| {
        let mut c = configmap(name, json!({"a": a, "b": b}));
        c["metadata"]["labels"] = json!({"tier": "web"});
        c
    };
    set.create(json!({"interval": "1h", "force": true, "ignore": ignore,
        "manifests": [cm("one", "1", "1"), cm("two", "1", "1")]}))
        .await;
    set.wait_ready().await;

    // The manifest changes an ignored key (ours alone: the live value is sent back) and an
    // un-ignored one: only the latter is applied.
    set.patch_spec(json!({"manifests": [cm("one", "2", "2"), cm("two", "1", "1")]}))
        .await;
    set.wait_ready().await;
    let one = live(&h, &configmap_ar(), "one").await;
    assert_eq!(one["data"], json!({"a": "1", "b": "2"}));

    // Plan mode: an ignored drift is no change, an un-ignored one is.
    set.patch_spec(json!({"mode": "Plan"})).await;
    set.wait_ready_reason(None, "PlanReady").await;
    edit(
        &h,
        &configmap_ar(),
        "one",
        "kubectl-edit",
        json!({"data": {"a": "x"}}),
    )
    .await;
    edit(
        &h,
        &configmap_ar(),
        "two",
        "kubectl-edit",
        json!({"data": {"b": "x"}}),
    )
    .await;
    let two = MemberRef {
        group: String::new(),
        kind: "ConfigMap".into(),
        namespace: Some(h.ns.clone()),
        name: "two".into(),
    };
    let plan = set
        .wait_until("a plan updating two", DEADLINE, |_, st| {
            let plan = st?.plan.clone()?;
            (plan.update == [two.clone()]).then_some(plan)
        })
        .await;
    assert_eq!(
        plan.unchanged, 1,
        "one's ignored drift is no change: {plan:?}"
    );
    assert_eq!(live(&h, &configmap_ar(), "one").await["data"]["a"], "x");
    stop(op).await;
}

#[tokio::test]
async fn an_ignore_path_on_identity_is_refused_and_nothing_is_applied() {
    let h = Harness::new("ignore-id").await;
    let op = h.start_operator();
    let set = h.applyset("ignore-id");
    set.create(json!({"interval": "1h",
        "manifests": [configmap("c", json!({"k": "v"}))],
        "ignore": [{"paths": ["/data/k", "/metadata/labels/applyset.kubernetes.io~1part-of"]}]}))
        .await;
    let st = set
        .wait_ready_reason(Some("False"), "ValidationFailed")
        .await;
    let message = &ready(&st).message;
    assert!(message.contains("spec.ignore[0].paths[1]"), "{message}");
    assert!(message.contains("part-of"), "{message}");
    assert!(!exists(&h.client, &configmap_ar(), Some(&h.ns), "c").await);
    stop(op).await;
}

/// `kubectl applyset diff` never shows an ignored field: neither the live value another tool
/// wrote nor the manifest's; the un-ignored change of the same object is shown.
#[tokio::test]
async fn diff_does_not_show_ignored_fields() {
    let h = Harness::new("ignore-diff").await;
    let op = h.start_operator();
    let set = h.applyset("app");
    let ignore = json!([{"paths": ["/data/a"]}]);
    set.create(
        json!({"manifests": [configmap("x", json!({"a": "1", "b": "1"}))], "ignore": ignore}),
    )
    .await;
    set.wait_ready().await;
    stop(op).await;
    edit(
        &h,
        &configmap_ar(),
        "x",
        "kubectl-edit",
        json!({"data": {"a": "theirs"}}),
    )
    .await;
    let doc = json!({
        "apiVersion": "applyset.dev/v1alpha1", "kind": "ApplySet",
        "metadata": {"name": "app", "namespace": h.ns},
        "spec": {"manifests": [configmap("x", json!({"a": "2", "b": "2"}))], "ignore": ignore},
    });
    let file = support::scratch("ignore-diff").join(format!("{}.yaml", h.ns));
    std::fs::write(&file, doc.to_string()).expect("write the set file");
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_kubectl-applyset"))
        .arg(format!(
            "--kubeconfig={}",
            support::cluster().kubeconfig().display()
        ))
        .args(["diff", "-f", file.to_str().expect("a path")])
        .env_remove("KUBECONFIG")
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .expect("run kubectl-applyset");
    let text = String::from_utf8_lossy(&out.stdout);
    let shown = format!("{text}\n{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{shown}");
    assert!(text.contains("0 to create, 1 to change"), "{shown}");
    assert!(text.contains("-  b: \"1\"\n+  b: \"2\"\n"), "{shown}");
    let ignored = text
        .lines()
        .filter(|l| l.trim_start_matches(['-', '+', ' ']).starts_with("a:"));
    assert_eq!(ignored.count(), 0, "{shown}");
}

#[tokio::test]
async fn an_adopted_object_keeps_its_ignored_field() {
    let h = Harness::new("ignore-adopt").await;
    let op = h.start_operator();
    // Made by someone else (kubectl create), then scaled by an autoscaler through /scale.
    let mut made = web();
    made["spec"]["replicas"] = json!(1);
    let create = kube::api::PostParams {
        field_manager: Some("kubectl-create".into()),
        ..Default::default()
    };
    let made: kube::api::DynamicObject = serde_json::from_value(made).expect("object");
    dyn_api(&h.client, &deployment_ar(), Some(&h.ns))
        .create(&create, &made)
        .await
        .expect("kubectl-create web");
    scale(&h, 5).await;

    // Adopted (a forced apply of the whole body, except what the rule ignores).
    let set = h.applyset("adopt");
    set.create(json!({"adoptExisting": true, "manifests": [web()],
        "ignore": [{"paths": ["/spec/replicas"]}]}))
        .await;
    set.wait_ready().await;
    let d = live(&h, &deployment_ar(), "web").await;
    assert_eq!(
        d["metadata"]["labels"][applyset_operator::applyset::LABEL_PART_OF],
        set.id()
    );
    assert_eq!(d["spec"]["minReadySeconds"], 3, "the rest is applied");
    assert_eq!(d["spec"]["replicas"], 5, "the autoscaler's value stays");
    stop(op).await;
}

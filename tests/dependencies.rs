//! End to end: `spec.dependsOn` (issue 13 point 4). A set is applied only once its
//! dependencies are ready, and at once when they become ready (the dependents below retry only
//! after an hour, so only the trigger can wake them within the deadline); cycles are refused on
//! every set of the cycle; an ApplySet of custom resources waits for the ClusterApplySet of
//! their CRD; and deleting both deletes the dependent's members first.

mod support;

use support::operator;

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use kube::api::PostParams;
use operator::*;
use serde_json::{Value, json};

/// Within this a dependent reacts to its dependency becoming ready (its own retry is an hour
/// away).
const PROMPTLY: Duration = Duration::from_secs(30);

/// Never retried nor re-reconciled on a timer within a test.
fn slow(mut spec: Value) -> Value {
    spec["interval"] = json!("1h");
    spec["retryInterval"] = json!("1h");
    spec
}

/// Waits until the Ready condition of `set` for its current generation has `reason` and a
/// message containing `text`; returns that message.
async fn wait_message(set: &Parent, reason: &str, text: &str) -> String {
    set.wait_until(
        &format!("Ready reason {reason} with a message containing {text:?}"),
        DEADLINE,
        |obj, st| {
            let st = st?;
            (st.observed_generation == obj.metadata.generation).then_some(())?;
            let ready = condition(st, "Ready")?;
            (ready.reason == reason && ready.message.contains(text)).then(|| ready.message.clone())
        },
    )
    .await
}

/// The dependent's members appear only after its dependency is Ready: while the dependency
/// fails (a ConfigMap the API server refuses), the dependent says DependencyNotReady naming it
/// and why, and has written nothing; once the dependency is fixed, the dependent is applied
/// promptly.
#[tokio::test]
async fn a_set_is_applied_only_once_its_dependency_is_ready() {
    let h = Harness::new("dep-order").await;
    let op = h.start_operator();
    let base = h.applyset(&unique("base"));
    let app = h.applyset(&unique("app"));
    // data values must be strings: the API server refuses this one (ApplyFailed, retried).
    base.create(json!({"manifests": [configmap("base-cm", json!({"k": 1}))]}))
        .await;
    app.create(slow(json!({
        "dependsOn": [{"name": base.name}],
        "manifests": [configmap("app-cm", json!({"k": "v"}))]
    })))
    .await;
    base.wait_ready_reason(Some("False"), "ApplyFailed").await;
    let msg = wait_message(&app, "DependencyNotReady", "Ready=False (ApplyFailed)").await;
    assert_eq!(
        msg,
        format!(
            "ApplySet {ns}/{app}: dependency ApplySet {ns}/{base} is not ready: Ready=False (ApplyFailed); nothing is applied until it is ready",
            ns = h.ns,
            app = app.name,
            base = base.name
        )
    );
    let st = app.status().await.expect("a status");
    assert!(
        condition(&st, "Stalled").is_none(),
        "DependencyNotReady is not stalled: {}",
        status_json(&st)
    );
    assert!(
        !exists(&h.client, &configmap_ar(), Some(&h.ns), "app-cm").await,
        "the dependent wrote nothing while its dependency failed"
    );
    assert!(app.label(LABEL_ID).await.is_none(), "nor its own labels");

    base.patch_spec(json!({"manifests": [configmap("base-cm", json!({"k": "1"}))]}))
        .await;
    base.wait_ready().await;
    app.wait_ready_within(PROMPTLY).await;
    let cm = must_get(&h.client, &configmap_ar(), Some(&h.ns), "app-cm").await;
    assert_member_of(&cm, &app.id(), &app.manager());
    stop(op).await;
}

/// Cycles are refused on every set of the cycle (ValidationFailed, Stalled, naming it), a
/// self-dependency too; breaking the cycle applies both promptly.
#[tokio::test]
async fn a_dependency_cycle_is_refused_on_both_sets() {
    let h = Harness::new("dep-cycle").await;
    let op = h.start_operator();
    let (x, y, me) = (
        h.applyset(&unique("x")),
        h.applyset(&unique("y")),
        h.applyset(&unique("me")),
    );
    let cm = |name: &str| json!([configmap(name, json!({"k": "v"}))]);
    x.create(slow(
        json!({"dependsOn": [{"name": y.name}], "manifests": cm("x-cm")}),
    ))
    .await;
    y.create(slow(
        json!({"dependsOn": [{"name": x.name}], "manifests": cm("y-cm")}),
    ))
    .await;
    me.create(slow(
        json!({"dependsOn": [{"name": me.name}], "manifests": cm("me-cm")}),
    ))
    .await;
    let ns = &h.ns;
    for (set, other) in [(&x, &y), (&y, &x)] {
        let msg = wait_message(set, "ValidationFailed", "dependsOn cycle").await;
        assert_eq!(
            msg,
            format!(
                "ApplySet {ns}/{a}: dependsOn cycle: ApplySet {ns}/{a} → ApplySet {ns}/{b} → ApplySet {ns}/{a}",
                a = set.name,
                b = other.name
            )
        );
        assert_condition(&set.status().await.expect("a status"), "Stalled", "True");
    }
    let msg = wait_message(&me, "ValidationFailed", "dependsOn cycle").await;
    assert!(
        msg.ends_with(&format!(
            "dependsOn cycle: ApplySet {ns}/{m} → ApplySet {ns}/{m}",
            m = me.name
        )),
        "{msg}"
    );
    for name in ["x-cm", "y-cm", "me-cm"] {
        assert!(
            !exists(&h.client, &configmap_ar(), Some(ns), name).await,
            "{name}"
        );
    }
    // y no longer depends on x: y is applied, and x (its dependency ready now) too.
    y.patch_spec(json!({"dependsOn": null})).await;
    y.wait_ready_within(PROMPTLY).await;
    x.wait_ready_within(PROMPTLY).await;
    stop(op).await;
}

/// The example of the issue: an ApplySet of custom resources depends on the ClusterApplySet
/// that installs their CRD. Created first, it waits (the ClusterApplySet does not exist yet),
/// then is applied as soon as the ClusterApplySet is Ready. A ClusterApplySet must name the
/// namespace of an ApplySet it depends on (the CRD refuses it otherwise).
#[tokio::test]
async fn an_applyset_of_custom_resources_waits_for_the_clusterapplyset_of_their_crd() {
    let h = Harness::new("dep-kind").await;
    let op = h.start_operator();
    let group = unique_group();
    let crds = h.cluster_applyset(&unique("crds"));
    let widgets = h.applyset(&unique("widgets"));
    widgets
        .create(slow(json!({
            "dependsOn": [{"name": crds.name, "kind": "ClusterApplySet"}],
            "manifests": [widget(&group, &h.ns, "w1", 1), widget(&group, &h.ns, "w2", 2)]
        })))
        .await;
    wait_message(
        &widgets,
        "DependencyNotReady",
        &format!("ClusterApplySet {} does not exist", crds.name),
    )
    .await;
    crds.create(json!({"manifests": [widget_crd(&group)]}))
        .await;
    crds.wait_ready().await;
    widgets.wait_ready_within(PROMPTLY).await;
    for w in ["w1", "w2"] {
        let o = must_get(&h.client, &widget_ar(&group), Some(&h.ns), w).await;
        assert_member_of(&o, &widgets.id(), &widgets.manager());
    }

    // A ClusterApplySet depending on an ApplySet without its namespace is refused by the CRD.
    let bad = h.cluster_applyset(&unique("bad"));
    let obj: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "applyset.dev/v1alpha1", "kind": "ClusterApplySet",
        "metadata": {"name": bad.name, "labels": {TEST_LABEL: h.label}},
        "spec": {"dependsOn": [{"name": widgets.name}]}
    }))
    .expect("object");
    let err = bad
        .api()
        .create(&PostParams::default(), &obj)
        .await
        .expect_err("refused");
    assert!(
        err.to_string()
            .contains("a ClusterApplySet must name the namespace of an ApplySet it depends on"),
        "{err}"
    );
    stop(op).await;
}

/// Deleting a dependency and its dependent together: the dependency waits while the dependent
/// has not deleted its members. The dependent acts as a ServiceAccount that may not delete
/// ConfigMaps at first, so its cleanup fails and it stays; meanwhile the dependency says what
/// it waits for and its member is untouched. Once the ServiceAccount may delete, the dependent
/// goes, then the dependency deletes its members: never while the dependent still existed.
#[tokio::test]
async fn dependents_delete_their_members_before_their_dependencies() {
    let h = Harness::new("dep-delete").await;
    let op = h.start_operator();
    let ns = h.ns.clone();
    let deployer = "deployer";
    let rule =
        |verbs: &[&str]| json!({"apiGroups": [""], "resources": ["configmaps"], "verbs": verbs});
    let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": deployer, "namespace": ns},
        "rules": [rule(&["get", "list", "watch", "create", "update", "patch"])]});
    let sa_ar = gvk_resource("", "v1", "ServiceAccount", "serviceaccounts");
    let role_ar = gvk_resource("rbac.authorization.k8s.io", "v1", "Role", "roles");
    let binding_ar = gvk_resource(
        "rbac.authorization.k8s.io",
        "v1",
        "RoleBinding",
        "rolebindings",
    );
    ssa(&h.client, &sa_ar, Some(&ns), "test",
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": deployer, "namespace": ns}}),
    )
    .await;
    ssa(&h.client, &role_ar, Some(&ns), "test", role.clone()).await;
    ssa(
        &h.client,
        &binding_ar,
        Some(&ns),
        "test",
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": deployer, "namespace": ns},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": deployer},
            "subjects": [{"kind": "ServiceAccount", "name": deployer, "namespace": ns}]}),
    )
    .await;

    let base = h.applyset(&unique("base"));
    let app = h.applyset(&unique("app"));
    base.create(json!({"manifests": [configmap("base-cm", json!({"k": "v"}))]}))
        .await;
    app.create(json!({
        "dependsOn": [{"name": base.name}],
        "serviceAccountName": deployer,
        "manifests": [configmap("app-cm", json!({"k": "v"}))]
    }))
    .await;
    base.wait_ready().await;
    app.wait_ready().await;

    // Record, in poll rounds, whether the dependency's member was ever seen being deleted
    // while the dependent still existed.
    let early = Arc::new(AtomicBool::new(false));
    let recorder = {
        let (client, app_api, name) = (h.client.clone(), app.api(), app.name.clone());
        let (ns, early) = (ns.clone(), early.clone());
        tokio::spawn(async move {
            loop {
                let app_exists = matches!(app_api.get_opt(&name).await, Ok(Some(_)));
                let base_cm = get_obj(&client, &configmap_ar(), Some(&ns), "base-cm").await;
                let deleting = base_cm.is_none_or(|o| o.metadata.deletion_timestamp.is_some());
                // The dependent is read before the member: a member deleted while the
                // dependent was gone already is never counted.
                if app_exists && deleting {
                    early.store(true, Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };

    app.delete().await;
    base.delete().await;
    // The dependent's cleanup fails (it may not delete ConfigMaps) and is retried.
    app.wait_until("its cleanup to fail", DEADLINE, |obj, st| {
        let ready = condition(st?, "Ready")?;
        (obj.metadata.deletion_timestamp.is_some() && ready.reason == "PruneFailed").then_some(())
    })
    .await;
    let msg = base
        .wait_until("it to wait for its dependent", DEADLINE, |obj, st| {
            let ready = condition(st?, "Ready")?;
            (obj.metadata.deletion_timestamp.is_some()
                && ready
                    .message
                    .contains(&format!("waiting for ApplySet {ns}/{}", app.name)))
            .then(|| ready.message.clone())
        })
        .await;
    assert!(msg.contains("to delete its members first"), "{msg}");
    let cm = must_get(&h.client, &configmap_ar(), Some(&ns), "base-cm").await;
    assert!(
        cm.metadata.deletion_timestamp.is_none(),
        "the dependency's member is untouched while its dependent is being deleted"
    );
    assert!(base.get().await.is_some());

    // Allowed to delete: the dependent goes, then the dependency.
    let mut role = role;
    role["rules"] = json!([rule(&[
        "get", "list", "watch", "create", "update", "patch", "delete"
    ])]);
    ssa(&h.client, &role_ar, Some(&ns), "test", role).await;
    app.wait_gone(LONG_DEADLINE).await;
    base.wait_gone(LONG_DEADLINE).await;
    for name in ["app-cm", "base-cm"] {
        let (client, ns) = (h.client.clone(), ns.clone());
        eventually(&format!("ConfigMap {name} to be gone"), DEADLINE, move || {
            let (client, ns) = (client.clone(), ns.clone());
            async move { (!exists(&client, &configmap_ar(), Some(&ns), name).await).then_some(()) }
        })
        .await;
    }
    recorder.abort();
    assert!(
        !early.load(Ordering::SeqCst),
        "the dependency's member was being deleted while its dependent still existed"
    );
    stop(op).await;
}

/// examples/depends-on.yaml, applied as it is (with this test's label on the sets, and an
/// operator watching its namespace): the ApplySet of Gadgets becomes Ready after the
/// ClusterApplySet of their CRD, and the Gadgets exist.
#[tokio::test]
async fn the_depends_on_example_works() {
    use applyset_operator::manifest::{Origin, parse_documents};
    let h = Harness::new("dep-example").await;
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/depends-on.yaml");
    let text = std::fs::read_to_string(&path).expect("read the example");
    let docs = parse_documents(&text, &Origin::file("examples", "depends-on.yaml"))
        .unwrap_or_else(|e| panic!("examples/depends-on.yaml: {e}"));
    let mut sets = Vec::new();
    for d in docs {
        let mut obj = Value::Object(d.object.clone());
        let name = obj["metadata"]["name"].as_str().expect("name").to_owned();
        match d.kind.as_str() {
            "Namespace" => {
                ssa(&h.client, &namespace_ar(), None, "test", obj).await;
            }
            kind @ ("ApplySet" | "ClusterApplySet") => {
                obj["metadata"]["labels"] = json!({TEST_LABEL: h.label});
                let o: kube::api::DynamicObject = serde_json::from_value(obj).expect("object");
                let set = Parent {
                    client: h.client.clone(),
                    cluster: kind == "ClusterApplySet",
                    namespace: o.metadata.namespace.clone(),
                    name,
                    label: h.label.clone(),
                };
                set.api()
                    .create(&PostParams::default(), &o)
                    .await
                    .unwrap_or_else(|e| panic!("creating {}: {e}", set.display()));
                sets.push(set);
            }
            other => panic!("unexpected {other} in the example"),
        }
    }
    let mut config = h.config();
    config.watch_namespace = Some("gadgets".into());
    let op = applyset_operator::controller::Operator::start(h.client.clone(), config);
    for set in &sets {
        set.wait_ready_within(LONG_DEADLINE).await;
    }
    let gadgets = gvk_resource("example.applyset.dev", "v1", "Gadget", "gadgets");
    for name in ["red", "blue"] {
        must_get(&h.client, &gadgets, Some("gadgets"), name).await;
    }
    stop(op).await;
}

/// A set acting as a ServiceAccount learns about an ApplySet of another namespace only what
/// that account may read: until it may get it, the dependency is refused (naming the account
/// and the grant); once granted, it is an ordinary dependency (here not ready: nobody
/// reconciles the other namespace).
#[tokio::test]
async fn a_dependency_in_another_namespace_must_be_readable_by_the_sets_account() {
    let h = Harness::new("dep-read").await;
    let other = h.extra_namespace("dep-read-other").await;
    create_rbac(
        &h,
        &h.ns,
        &[json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "deployer"}})],
    )
    .await;
    let op = h.start_operator();
    let app = h.applyset(&unique("app"));
    app.create(json!({
        "serviceAccountName": "deployer",
        "retryInterval": "1s",
        "dependsOn": [{"name": "base", "namespace": other}],
        "manifests": [configmap("app", json!({"k": "v"}))]}))
        .await;
    let msg = wait_message(&app, "ValidationFailed", "may not get").await;
    assert!(
        msg.contains(&format!(
            "ServiceAccount {}/deployer may not get ApplySet {other}/base",
            h.ns
        )),
        "{msg}"
    );
    create_rbac(
        &h,
        &other,
        &[
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                "metadata": {"name": "read-sets"},
                "rules": [{"apiGroups": ["applyset.dev"], "resources": ["applysets"], "verbs": ["get"]}]}),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": "read-sets"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "read-sets"},
                "subjects": [{"kind": "ServiceAccount", "name": "deployer", "namespace": h.ns}]}),
        ],
    )
    .await;
    let msg = wait_message(&app, "DependencyNotReady", "base").await;
    assert!(msg.contains("does not exist"), "{msg}");
    stop(op).await;
}

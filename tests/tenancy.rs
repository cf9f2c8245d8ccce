//! End to end: tenancy (docs/security.md, "Tenancy"). A set acts with its own identity (a ServiceAccount,
//! impersonated) or stays inside its namespace, and never takes over or deletes what is not
//! its own.

mod support;

use support::operator;

use applyset_operator::controller::Operator;
use kube::{ResourceExt, api::PostParams};
use operator::*;
use serde_json::{Value, json};

/// Finding 1: a namespaced ApplySet acting with the operator's identity cannot write into
/// another namespace or create cluster-scoped objects (a binding to cluster-admin).
#[tokio::test]
async fn a_set_acting_as_the_operator_stays_in_its_namespace() {
    let h = Harness::new("scope").await;
    let op = h.start_operator();
    let other = h.extra_namespace("scope-other").await;
    let binding = unique("scope-admin");
    let set = h.applyset("reach");
    set.create(json!({"manifests": [
        configmap_in(&other, "planted", json!({"k": "1"})),
        cluster_admin_binding(&binding, &h.ns)]}))
        .await;
    let st = set
        .wait_ready_reason(Some("False"), "ValidationFailed")
        .await;
    assert_condition(&st, "Stalled", "True");
    let msg = ready(&st).message.clone();
    assert!(msg.contains("outside the ApplySet's namespace"), "{msg}");
    assert!(
        msg.contains("serviceAccountName")
            && msg.contains("ClusterApplySet")
            && msg.contains("--allow-cross-namespace-sets"),
        "the message names the ways out: {msg}"
    );
    assert!(!exists(&h.client, &configmap_ar(), Some(&other), "planted").await);
    let crb = gvk_resource(
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRoleBinding",
        "clusterrolebindings",
    );
    assert!(!exists(&h.client, &crb, None, &binding).await);
    stop(op).await;
}

/// Finding 2: an object that exists without a `part-of` label is not changed: the member
/// fails (AdoptionRefused, Stalled) while the others apply; with the per-member opt-in it is
/// adopted (an event says so), and once adopted it is the set's to prune.
#[tokio::test]
async fn an_existing_object_is_not_adopted_without_the_opt_in() {
    let h = Harness::new("adopt").await;
    let op = h.start_operator();
    let ns = h.ns.as_str();
    ssa(
        &h.client,
        &configmap_ar(),
        Some(ns),
        "someone",
        configmap("precious", json!({"v": "theirs"})),
    )
    .await;
    let set = h.applyset("adopter");
    // Our label copied onto someone else's object does not make it ours either.
    let mut copied = configmap("copied", json!({"v": "theirs"}));
    copied["metadata"]["labels"] = json!({LABEL_PART_OF: set.id()});
    ssa(&h.client, &configmap_ar(), Some(ns), "someone", copied).await;
    set.create(json!({"manifests": [
        configmap("precious", json!({"v": "ours"})), configmap("copied", json!({"v": "ours"})),
        configmap("other", json!({"k": "1"}))]}))
        .await;
    let st = set
        .wait_ready_reason(Some("False"), "AdoptionRefused")
        .await;
    assert!(
        ready(&st).message.contains("copied"),
        "{}",
        ready(&st).message
    );
    let copied = must_get(&h.client, &configmap_ar(), Some(ns), "copied").await;
    assert_eq!(copied.data["data"]["v"], "theirs", "left alone");
    assert_condition(&st, "Stalled", "True");
    let msg = ready(&st).message.clone();
    assert!(
        msg.contains("precious") && msg.contains("applyset.dev/adopt: enabled"),
        "{msg}"
    );
    assert!(
        exists(&h.client, &configmap_ar(), Some(ns), "other").await,
        "the other members still apply"
    );
    let precious = must_get(&h.client, &configmap_ar(), Some(ns), "precious").await;
    assert_eq!(precious.data["data"]["v"], "theirs", "left alone");
    assert!(!precious.labels().contains_key(LABEL_PART_OF));

    let mut adopt = configmap("precious", json!({"v": "ours"}));
    adopt["metadata"]["annotations"] = json!({"applyset.dev/adopt": "enabled"});
    // Taking over also takes its fields from their manager: force.
    set.patch_spec(
        json!({"force": true, "manifests": [adopt, configmap("other", json!({"k": "1"}))]}),
    )
    .await;
    set.wait_ready().await;
    let precious = must_get(&h.client, &configmap_ar(), Some(ns), "precious").await;
    assert_eq!(precious.data["data"]["v"], "ours");
    assert_member_of(&precious, &set.id(), &set.manager());
    // Ready again: the one event of that reconcile says so and lists what it changed.
    let note = event_note(&h.client, &h.ns, "ReconciliationSucceeded", "adopted").await;
    assert!(
        note.contains(&format!("changed: ConfigMap {ns}/precious adopted")),
        "{note}"
    );

    set.patch_spec(json!({"manifests": [configmap("other", json!({"k": "1"}))]}))
        .await;
    set.wait_ready().await;
    assert!(
        !exists(&h.client, &configmap_ar(), Some(ns), "precious").await,
        "an adopted ConfigMap is the set's: pruned when dropped"
    );
    stop(op).await;
}

/// Finding 3: `applyset.dev/force: enabled` deletes and re-creates only the set's own
/// objects; a foreign immutable object (even with adoption allowed) is left as it is.
#[tokio::test]
async fn a_foreign_immutable_object_is_not_deleted_and_recreated() {
    let h = Harness::new("immut").await;
    let op = h.start_operator();
    let ns = h.ns.as_str();
    let mut theirs = configmap("frozen", json!({"v": "theirs"}));
    theirs["immutable"] = json!(true);
    let before = ssa(&h.client, &configmap_ar(), Some(ns), "someone", theirs).await;
    let mut ours = configmap("frozen", json!({"v": "ours"}));
    ours["immutable"] = json!(true);
    ours["metadata"]["annotations"] = json!({"applyset.dev/force": "enabled"});
    let set = h.applyset("forcer");
    set.create(json!({"adoptExisting": true, "force": true, "manifests": [ours]}))
        .await;
    let st = set.wait_ready_reason(Some("False"), "ApplyFailed").await;
    let msg = ready(&st).message.clone();
    assert!(msg.contains("not this set's"), "{msg}");
    let after = must_get(&h.client, &configmap_ar(), Some(ns), "frozen").await;
    assert_eq!(after.uid(), before.uid(), "not deleted");
    assert_eq!(after.data["data"]["v"], "theirs");
    stop(op).await;
}

/// An adopted Namespace is never deleted by the set, even when dropped from it (its
/// contents that the set created are pruned).
#[tokio::test]
async fn an_adopted_namespace_is_never_deleted() {
    let h = Harness::new("adoptns").await;
    let op = h.start_operator();
    let ns = h.extra_namespace("adopted").await;
    let set = h.cluster_applyset(&unique("adoptns"));
    let mut namespace = namespace(&ns);
    namespace["metadata"]["annotations"] = json!({"applyset.dev/adopt": "enabled"});
    set.create(json!({"manifests": [namespace, configmap_in(&ns, "inside", json!({"k": "1"}))]}))
        .await;
    set.wait_ready().await;
    let live = must_get(&h.client, &namespace_ar(), None, &ns).await;
    assert!(
        live.annotations().contains_key("applyset.dev/adopted"),
        "marked as adopted: {:?}",
        live.annotations()
    );

    let role = unique("adoptns-role");
    set.patch_spec(json!({"manifests": [cluster_role(&role)]}))
        .await;
    let st = set.wait_ready().await;
    assert!(summary(&st).retained >= 1, "{}", status_json(&st));
    assert!(!exists(&h.client, &configmap_ar(), Some(&ns), "inside").await);
    let live = must_get(&h.client, &namespace_ar(), None, &ns).await;
    assert!(
        live.metadata.deletion_timestamp.is_none(),
        "the adopted Namespace is not deleted"
    );
    stop(op).await;
}

/// A set with a ServiceAccount acts with its rights only: a member it may not write fails,
/// naming the ServiceAccount, the verb and the resource; what it may write applies and
/// prunes as usual, under the set's own field manager.
#[tokio::test]
async fn an_impersonated_set_can_do_only_what_its_service_account_may() {
    let h = Harness::new("imp").await;
    let op = h.start_operator();
    let ns = h.ns.as_str();
    configmap_deployer(&h, "deployer").await;
    let set = h.applyset("imp");
    set.create(json!({"serviceAccountName": "deployer", "manifests": [
        configmap("a", json!({"k": "1"})), secret("s")]}))
        .await;
    let st = set.wait_ready_reason(Some("False"), "ApplyFailed").await;
    let msg = ready(&st).message.clone();
    assert!(
        msg.contains(&format!("system:serviceaccount:{ns}:deployer")) && msg.contains("secrets"),
        "names the ServiceAccount and the resource: {msg}"
    );
    assert!(!exists(&h.client, &secret_ar(), Some(ns), "s").await);

    set.patch_spec(json!({"manifests": [
        configmap("a", json!({"k": "1"})), configmap("b", json!({"k": "1"}))]}))
        .await;
    set.wait_ready().await;
    let a = must_get(&h.client, &configmap_ar(), Some(ns), "a").await;
    assert_member_of(&a, &set.id(), &set.manager());
    set.patch_spec(json!({"manifests": [configmap("a", json!({"k": "1"}))]}))
        .await;
    let st = set.wait_ready().await;
    assert_eq!(summary(&st).pruned, 1);
    assert!(!exists(&h.client, &configmap_ar(), Some(ns), "b").await);
    stop(op).await;
}

/// A ServiceAccount that does not exist is named in status, and nothing is written.
#[tokio::test]
async fn a_missing_service_account_is_named() {
    let h = Harness::new("ghost").await;
    let op = h.start_operator();
    let ns = h.ns.as_str();
    let set = h.applyset("ghost");
    set.create(json!({"serviceAccountName": "ghost",
        "manifests": [configmap("a", json!({"k": "1"}))]}))
        .await;
    let st = set.wait_ready_reason(Some("False"), "ApplyFailed").await;
    let msg = ready(&st).message.clone();
    assert!(
        msg.contains(&format!("ServiceAccount {ns}/ghost does not exist")),
        "{msg}"
    );
    assert!(!exists(&h.client, &configmap_ar(), Some(ns), "a").await);
    stop(op).await;
}

/// `--default-service-account`: a set that names no ServiceAccount acts as the default one
/// of its namespace, so it cannot do more than that ServiceAccount may.
#[tokio::test]
async fn the_default_service_account_locks_down_sets_that_name_none() {
    let h = Harness::new("lock").await;
    let mut config = h.config();
    config.tenancy.namespaced = Some("deployer".into());
    let op = Operator::start(h.client.clone(), config);
    let ns = h.ns.as_str();
    configmap_deployer(&h, "deployer").await;
    let set = h.applyset("locked");
    set.create(json!({"manifests": [configmap("a", json!({"k": "1"})), secret("s")]}))
        .await;
    let st = set.wait_ready_reason(Some("False"), "ApplyFailed").await;
    let msg = ready(&st).message.clone();
    assert!(
        msg.contains(&format!("system:serviceaccount:{ns}:deployer")),
        "{msg}"
    );
    assert!(!exists(&h.client, &secret_ar(), Some(ns), "s").await);
    set.patch_spec(json!({"manifests": [configmap("a", json!({"k": "1"}))]}))
        .await;
    set.wait_ready().await;
    stop(op).await;
}

/// A ClusterApplySet acts as the ServiceAccount it names (both fields), and the API server
/// refuses half a name.
#[tokio::test]
async fn a_cluster_applyset_acts_as_its_service_account() {
    let h = Harness::new("csa").await;
    let op = h.start_operator();
    let ns = h.ns.as_str();
    let other = h.extra_namespace("csa-other").await;
    let sa = "platform";
    create(&h, &sa_ar(), Some(ns), json!({"metadata": {"name": sa}})).await;
    let role = unique("csa-configmaps");
    create(
        &h,
        &clusterrole_ar(),
        None,
        json!({"metadata": {"name": role},
        "rules": [configmap_rule()]}),
    )
    .await;
    create(
        &h,
        &crb_ar(),
        None,
        json!({"metadata": {"name": role},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": ns}]}),
    )
    .await;
    let set = h.cluster_applyset(&unique("csa"));
    set.create(
        json!({"serviceAccountName": sa, "serviceAccountNamespace": ns, "manifests": [
        configmap_in(ns, "a", json!({"k": "1"})), configmap_in(&other, "b", json!({"k": "1"}))]}),
    )
    .await;
    set.wait_ready().await;
    assert!(exists(&h.client, &configmap_ar(), Some(&other), "b").await);

    let forbidden = unique("csa-role");
    set.patch_spec(json!({"manifests": [cluster_role(&forbidden)]}))
        .await;
    let st = set.wait_ready_reason(Some("False"), "ApplyFailed").await;
    let msg = ready(&st).message.clone();
    assert!(msg.contains("clusterroles"), "{msg}");
    assert!(!exists(&h.client, &clusterrole_ar(), None, &forbidden).await);
    assert!(
        exists(&h.client, &configmap_ar(), Some(ns), "a").await,
        "nothing pruned while a member fails"
    );

    let half = h.cluster_applyset(&unique("csa-half"));
    let obj: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "applyset.dev/v1alpha1", "kind": "ClusterApplySet",
        "metadata": {"name": half.name}, "spec": {"serviceAccountName": sa}}))
    .expect("object");
    let err = half
        .api()
        .create(&PostParams::default(), &obj)
        .await
        .expect_err("half a ServiceAccount is refused");
    assert!(err.to_string().contains("both or neither"), "{err}");
    stop(op).await;
}

// ---------------------------------------------------------------------------------------------

/// A ServiceAccount `name` in the test namespace that may manage ConfigMaps there, and
/// nothing else.
async fn configmap_deployer(h: &Harness, name: &str) {
    let ns = h.ns.as_str();
    create(h, &sa_ar(), Some(ns), json!({"metadata": {"name": name}})).await;
    let role = gvk_resource("rbac.authorization.k8s.io", "v1", "Role", "roles");
    create(
        h,
        &role,
        Some(ns),
        json!({"metadata": {"name": name},
        "rules": [configmap_rule()]}),
    )
    .await;
    let binding = gvk_resource(
        "rbac.authorization.k8s.io",
        "v1",
        "RoleBinding",
        "rolebindings",
    );
    create(
        h,
        &binding,
        Some(ns),
        json!({"metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}]}),
    )
    .await;
}

fn configmap_rule() -> Value {
    json!({"apiGroups": [""], "resources": ["configmaps"],
        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]})
}

fn sa_ar() -> kube::api::ApiResource {
    gvk_resource("", "v1", "ServiceAccount", "serviceaccounts")
}

fn crb_ar() -> kube::api::ApiResource {
    gvk_resource(
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRoleBinding",
        "clusterrolebindings",
    )
}

/// Creates an object of `ar` (apiVersion and kind filled in).
async fn create(h: &Harness, ar: &kube::api::ApiResource, namespace: Option<&str>, obj: Value) {
    let mut obj = obj;
    obj["apiVersion"] = json!(ar.api_version);
    obj["kind"] = json!(ar.kind);
    let obj: kube::api::DynamicObject = serde_json::from_value(obj).expect("object");
    dyn_api(&h.client, ar, namespace)
        .create(&PostParams::default(), &obj)
        .await
        .unwrap_or_else(|e| panic!("creating {} {}: {e}", ar.kind, obj.name_any()));
}

fn cluster_admin_binding(name: &str, namespace: &str) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": namespace}]})
}

/// examples/tenancy/team-a.yaml, applied as a user would (namespace and names unique to the
/// test): the ApplySet acts as the team's ServiceAccount and becomes Ready with what its Role
/// grants.
#[tokio::test]
async fn the_tenancy_example_reconciles_as_its_service_account() {
    let h = Harness::new("example").await;
    let op = h.start_operator();
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/tenancy/team-a.yaml"),
    )
    .expect("read the example");
    let mut spec = None;
    for doc in text.split("\n---\n") {
        let obj: Value = serde_saphyr_value(doc);
        match obj["kind"].as_str() {
            Some("Namespace") | None => {}
            Some("ApplySet") => spec = Some(obj["spec"].clone()),
            Some(kind) => {
                let (group, version) = match obj["apiVersion"].as_str().unwrap_or_default() {
                    "v1" => ("", "v1"),
                    other => other.split_once('/').expect("group/version"),
                };
                let plural = format!("{}s", kind.to_lowercase());
                let ar = gvk_resource(group, version, kind, &plural);
                let mut obj = obj;
                obj["metadata"]["namespace"] = json!(h.ns);
                if let Some(subjects) = obj["subjects"].as_array_mut() {
                    for s in subjects {
                        s["namespace"] = json!(h.ns);
                    }
                }
                create(&h, &ar, Some(&h.ns), obj).await;
            }
        }
    }
    let set = h.applyset("app");
    set.create(spec.expect("the example has an ApplySet")).await;
    set.wait_ready().await;
    assert!(exists(&h.client, &service_ar(), Some(&h.ns), "app").await);
    stop(op).await;
}

fn serde_saphyr_value(doc: &str) -> Value {
    serde_saphyr::from_str(doc).expect("YAML")
}

/// The fields of `obj` that `manager` owns (its managedFields entries' fieldsV1, as text).
fn owned_by(obj: &kube::api::DynamicObject, manager: &str) -> String {
    obj.managed_fields()
        .iter()
        .filter(|e| e.manager.as_deref() == Some(manager))
        .filter_map(|e| e.fields_v1.as_ref().map(|f| f.0.to_string()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Adopting an object that `kubectl create` made, with a changed value,
/// converges: the set takes the fields it declares over from kubectl (once, as Flux and Helm
/// do), while the fields it does not declare stay kubectl's; once adopted, a conflict with
/// another manager is reported as before.
#[tokio::test]
async fn adopting_what_kubectl_created_takes_over_the_declared_fields() {
    let h = Harness::new("handover").await;
    let op = h.start_operator();
    let ns = h.ns.as_str();
    let out = support::cluster()
        .kubectl()
        .args(["create", "configmap", "made", "-n", ns])
        .args(["--from-literal=k=old", "--from-literal=extra=kept"])
        .output()
        .expect("run kubectl");
    assert!(out.status.success(), "kubectl create: {out:?}");
    let set = h.applyset("adopter");
    set.create(
        json!({"adoptExisting": true, "manifests": [configmap("made", json!({"k": "new"}))]}),
    )
    .await;
    set.wait_ready().await;
    let made = must_get(&h.client, &configmap_ar(), Some(ns), "made").await;
    assert_eq!(made.data["data"]["k"], "new", "the declared value");
    assert_eq!(
        made.data["data"]["extra"], "kept",
        "an undeclared field stays"
    );
    assert_member_of(&made, &set.id(), &set.manager());
    let ours = owned_by(&made, &set.manager());
    let theirs = owned_by(&made, "kubectl-create");
    assert!(ours.contains("f:k"), "the set owns data.k: {ours}");
    assert!(
        theirs.contains("f:extra") && !theirs.contains("f:k"),
        "kubectl keeps only what the set does not declare: {theirs}"
    );

    // Adopted: another manager's change of a declared field is a conflict, reported.
    dyn_api(&h.client, &configmap_ar(), Some(ns))
        .patch(
            "made",
            &kube::api::PatchParams::apply("someone").force(),
            &kube::api::Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "made"}, "data": {"k": "theirs"}})),
        )
        .await
        .expect("someone takes data.k");
    let st = set.wait_ready_reason(Some("False"), "Conflict").await;
    assert!(
        ready(&st).message.contains("someone"),
        "{}",
        ready(&st).message
    );
    stop(op).await;
}

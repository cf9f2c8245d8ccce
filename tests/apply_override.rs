//! End to end: Override (`ssa: Override`, the default) and Merge, under both key families
//! (`applyset.dev/` and `kustomize.toolkit.fluxcd.io/`, as an annotation or a label, any
//! case). With Override, a field the set declares that `kubectl edit` changed is set back, and
//! a field only `kubectl` added (an Update, or `kubectl apply --server-side`) is removed; with
//! Merge both are kept (the changed declared field is then a conflict, reported). Fields of
//! other controllers and `/scale` entries are left alone either way, and every member is still
//! pruned once removed from the set.

mod support;

use support::operator;

use kube::{
    Api, ResourceExt,
    api::{DynamicObject, Patch, PatchParams},
};
use operator::*;
use serde_json::{Value, json};
use support::wait_for;

/// A mark that sets the mode: `labels` or `annotations`, the key and the value.
type Mark = (&'static str, &'static str, &'static str);

/// The members' variants: name, and the mark that sets the mode.
const VARIANTS: [(&str, Option<Mark>); 5] = [
    ("none", None),
    (
        "ours-override",
        Some(("annotations", "applyset.dev/ssa", "Override")),
    ),
    (
        "flux-override",
        Some(("annotations", "kustomize.toolkit.fluxcd.io/ssa", "override")),
    ),
    (
        "ours-merge",
        Some(("annotations", "applyset.dev/ssa", "Merge")),
    ),
    (
        "flux-merge",
        Some(("labels", "kustomize.toolkit.fluxcd.io/ssa", "MERGE")),
    ),
];

const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

fn merges(name: &str) -> bool {
    name.ends_with("merge")
}

/// The member of one variant: a ConfigMap declaring `data.declared: ours`.
fn member(name: &str, mark: Option<Mark>) -> Value {
    let mut cm = configmap(name, json!({"declared": "ours"}));
    if let Some((field, key, value)) = mark {
        cm["metadata"][field] = json!({ key: value });
    }
    cm
}

fn members() -> Vec<Value> {
    VARIANTS.iter().map(|(n, m)| member(n, *m)).collect()
}

/// A merge patch of `name` as field manager `manager` (`kubectl edit` sends one).
async fn edit(api: &Api<DynamicObject>, name: &str, manager: &str, patch: Value) {
    let pp = PatchParams {
        field_manager: Some(manager.into()),
        ..Default::default()
    };
    api.patch(name, &pp, &Patch::Merge(patch))
        .await
        .unwrap_or_else(|e| panic!("{manager} patching {name}: {e}"));
}

fn managers(o: &DynamicObject) -> Vec<(String, String, String)> {
    o.metadata
        .managed_fields
        .iter()
        .flatten()
        .map(|e| {
            (
                e.manager.clone().unwrap_or_default(),
                e.operation.clone().unwrap_or_default(),
                e.subresource.clone().unwrap_or_default(),
            )
        })
        .collect()
}

fn data(o: &DynamicObject, key: &str) -> Option<String> {
    o.data["data"][key].as_str().map(str::to_owned)
}

#[tokio::test]
async fn kubectl_edit_of_a_declared_field_is_reverted_with_override_and_kept_with_merge() {
    let h = Harness::new("override-edit").await;
    let op = h.start_operator();
    let api = dyn_api(&h.client, &configmap_ar(), Some(&h.ns));
    let set = h.applyset("edit");
    set.create(json!({"manifests": members()})).await;
    set.wait_ready().await;

    for (name, _) in VARIANTS {
        edit(
            &api,
            name,
            "kubectl-edit",
            json!({"data": {"declared": "edited"}}),
        )
        .await;
    }
    // The Merge members' edits are conflicts (the set does not force without spec.force):
    // reported, naming kubectl-edit; that report also proves a reconcile after every edit.
    let st = set.wait_ready_reason(Some("False"), "Conflict").await;
    let msg = ready(&st).message.clone();
    assert!(msg.contains("kubectl-edit"), "{msg}");
    for (name, _) in VARIANTS.iter().filter(|(n, _)| !merges(n)) {
        wait_for(
            &format!("{name}'s declared field set back"),
            DEADLINE,
            || async {
                let o = api.get(name).await.ok()?;
                (data(&o, "declared").as_deref() == Some("ours")).then_some(o)
            },
        )
        .await;
        let o = api.get(name).await.expect("get");
        assert!(
            !managers(&o)
                .iter()
                .any(|(m, _, _)| m.starts_with("kubectl")),
            "{name}: the kubectl entries are taken over: {:?}",
            managers(&o)
        );
        assert!(!msg.contains(&format!("ConfigMap/{name}")), "{msg}");
    }
    for (name, _) in VARIANTS.iter().filter(|(n, _)| merges(n)) {
        let o = api.get(name).await.expect("get");
        assert_eq!(data(&o, "declared").as_deref(), Some("edited"), "{name}");
        assert!(msg.contains(name), "{name} is among the conflicts: {msg}");
    }
    stop(op).await;
}

#[tokio::test]
async fn fields_only_kubectl_added_are_removed_with_override_others_kept() {
    let h = Harness::new("override-added").await;
    let op = h.start_operator();
    let ns = h.ns.as_str();
    let api = dyn_api(&h.client, &configmap_ar(), Some(ns));
    let deployments = dyn_api(&h.client, &deployment_ar(), Some(ns));
    let set = h.applyset("added");
    let mut manifests = members();
    manifests.push(deployment("web"));
    set.create(json!({"manifests": manifests})).await;
    set.wait_ready().await;

    // Merge members first: the Override members' clean-up below then proves a reconcile that
    // had seen these changes too.
    let order = VARIANTS
        .iter()
        .filter(|(n, _)| merges(n))
        .chain(VARIANTS.iter().filter(|(n, _)| !merges(n)));
    for (name, _) in order {
        edit(
            &api,
            name,
            "some-controller",
            json!({"data": {"controller": "c"}}),
        )
        .await;
        let added = json!({"metadata": {"annotations": {LAST_APPLIED: "{}"}},
            "data": {"added": "by kubectl"}});
        edit(&api, name, "kubectl-client-side-apply", added).await;
        edit(
            &api,
            name,
            "kubectl",
            json!({"data": {"also": "by kubectl"}}),
        )
        .await;
        // `kubectl apply --server-side`: an Apply entry.
        let applied = configmap(name, json!({"applied": "by kubectl --server-side"}));
        ssa(&h.client, &configmap_ar(), Some(ns), "kubectl", applied).await;
    }
    // The Deployment: its replicas (not declared) set by another controller, then scaled
    // through /scale by `kubectl scale`, and labelled by a kubectl manager.
    edit(
        &deployments,
        "web",
        "some-controller",
        json!({"spec": {"replicas": 2}}),
    )
    .await;
    let out = support::cluster()
        .kubectl()
        .args(["scale", "-n", ns, "deployment/web", "--replicas=3"])
        .output()
        .expect("kubectl scale runs");
    assert!(out.status.success(), "kubectl scale: {out:?}");
    edit(
        &deployments,
        "web",
        "kubectl-label",
        json!({"metadata": {"labels": {"extra": "x"}}}),
    )
    .await;

    for (name, _) in VARIANTS.iter().filter(|(n, _)| !merges(n)) {
        let o = wait_for(&format!("{name} cleaned up"), DEADLINE, || async {
            let o = api.get(name).await.ok()?;
            let gone = ["added", "also", "applied"]
                .iter()
                .all(|k| data(&o, k).is_none());
            gone.then_some(o)
        })
        .await;
        assert_eq!(data(&o, "controller").as_deref(), Some("c"), "{name}");
        assert_eq!(data(&o, "declared").as_deref(), Some("ours"), "{name}");
        assert!(o.annotations().get(LAST_APPLIED).is_none(), "{name}");
        assert!(
            managers(&o)
                .iter()
                .any(|(m, op, _)| m == "some-controller" && op == "Update"),
            "{name}: {:?}",
            managers(&o)
        );
    }
    let web = wait_for("web's kubectl label removed", DEADLINE, || async {
        let o = deployments.get("web").await.ok()?;
        (!o.labels().contains_key("extra")).then_some(o)
    })
    .await;
    assert_eq!(web.data["spec"]["replicas"], 3, "the /scale change is kept");
    assert!(
        managers(&web).contains(&("kubectl".into(), "Update".into(), "scale".into())),
        "the /scale entry is left alone: {:?}",
        managers(&web)
    );
    // A witness: a spec change after every edit above; once Ready at that generation, a
    // reconcile that started after the Merge members' edits has finished.
    let mut manifests = members();
    manifests.push(deployment("web"));
    manifests.push(configmap("witness", json!({"w": "1"})));
    set.patch_spec(json!({"manifests": manifests})).await;
    set.wait_ready().await;
    assert!(api.get_opt("witness").await.expect("get").is_some());
    for (name, _) in VARIANTS.iter().filter(|(n, _)| merges(n)) {
        let o = api.get(name).await.expect("get");
        assert_eq!(data(&o, "added").as_deref(), Some("by kubectl"), "{name}");
        assert_eq!(data(&o, "also").as_deref(), Some("by kubectl"), "{name}");
        assert!(data(&o, "applied").is_some(), "{name}");
        assert_eq!(data(&o, "controller").as_deref(), Some("c"), "{name}");
        assert!(o.annotations().contains_key(LAST_APPLIED), "{name}");
    }
    assert!(
        set.status()
            .await
            .is_some_and(|s| ready(&s).status == "True")
    );

    // Removed from the set, every member is pruned, whatever its mode and its other managers.
    set.patch_spec(json!({"manifests": [configmap("keep", json!({"k": "v"}))]}))
        .await;
    for (name, _) in VARIANTS {
        wait_for(&format!("{name} pruned"), DEADLINE, || async {
            api.get_opt(name).await.ok()?.is_none().then_some(())
        })
        .await;
    }
    wait_for("web pruned", DEADLINE, || async {
        deployments
            .get_opt("web")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    stop(op).await;
}

fn deployment(name: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {"selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": "example.invalid/app:1"}]}}}})
}

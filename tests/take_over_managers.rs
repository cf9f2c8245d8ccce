//! End to end: `spec.takeOverFieldManagers`, the handover from kustomize-controller. Objects
//! are first applied exactly as kustomize-controller applies them (a forced server-side apply
//! as field manager `kustomize-controller`, with its owner labels
//! `kustomize.toolkit.fluxcd.io/name` and `/namespace`): a Deployment, a ConfigMap, a
//! ConfigMap whose value the set changes, and a Secret marked `ssa: IfNotPresent`. A set that
//! adopts them and names `kustomize-controller` ends the only owner of their fields, Flux's
//! labels gone, with the same UIDs, the Deployment's generation and Pod template unchanged,
//! and the Secret's data as it was (IfNotPresent); the ConfigMap whose value the set would
//! change is a Conflict naming kustomize-controller, left as it was (never forced), and an
//! IfNotPresent Secret made by hand is skipped, never adopted. A set that does not name it
//! leaves kustomize-controller co-owning them, until it names it. A pattern in the list, or
//! a manager of Kubernetes itself, is refused.

mod support;

use support::operator;

use kube::{
    Api,
    api::{DynamicObject, Patch, PatchParams, PostParams},
};
use operator::*;
use serde_json::{Value, json};
use support::wait_for;

const FLUX: &str = "kustomize-controller";
const FLUX_NAME: &str = "kustomize.toolkit.fluxcd.io/name";
const FLUX_NAMESPACE: &str = "kustomize.toolkit.fluxcd.io/namespace";
/// base64 of "live" (the Secret's data in the cluster) and of "manifest" (in the set).
const LIVE: &str = "bGl2ZQ==";
const MANIFEST: &str = "bWFuaWZlc3Q=";

fn deployment(name: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {"selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": "example.invalid/app:1"}]}}}})
}

fn if_not_present_secret(name: &str, token: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name,
            "annotations": {"kustomize.toolkit.fluxcd.io/ssa": "IfNotPresent"}},
        "type": "Opaque", "data": {"token": token}})
}

/// The members as the set declares them (no Flux label): the Deployment `web`, the
/// ConfigMaps `settings` (as Flux applied it) and `drifted` (a value Flux applied otherwise),
/// the IfNotPresent Secret `tls` (other data than the live one).
fn declared() -> Vec<Value> {
    vec![
        deployment("web"),
        configmap("settings", json!({"mode": "same"})),
        configmap("drifted", json!({"mode": "set"})),
        if_not_present_secret("tls", MANIFEST),
    ]
}

/// `(api, name)` of each member.
fn apis(h: &Harness) -> Vec<(Api<DynamicObject>, &'static str)> {
    let ns = Some(h.ns.as_str());
    vec![
        (dyn_api(&h.client, &deployment_ar(), ns), "web"),
        (dyn_api(&h.client, &configmap_ar(), ns), "settings"),
        (dyn_api(&h.client, &configmap_ar(), ns), "drifted"),
        (dyn_api(&h.client, &secret_ar(), ns), "tls"),
    ]
}

/// Applies the objects as kustomize-controller does: a forced server-side apply as its field
/// manager, its owner labels on each.
async fn apply_as_flux(h: &Harness) {
    let objects = [
        deployment("web"),
        configmap("settings", json!({"mode": "same"})),
        configmap("drifted", json!({"mode": "flux"})),
        if_not_present_secret("tls", LIVE),
    ];
    for ((api, name), mut object) in apis(h).into_iter().zip(objects) {
        object["metadata"]["labels"] = json!({FLUX_NAME: "app", FLUX_NAMESPACE: "flux-system"});
        api.patch(
            name,
            &PatchParams::apply(FLUX).force(),
            &Patch::Apply(object),
        )
        .await
        .unwrap_or_else(|e| panic!("applying {name} as {FLUX}: {e}"));
    }
}

fn owned_by_flux(o: &DynamicObject) -> bool {
    managers(o).iter().any(|(m, _)| m == FLUX)
}

fn flux_labelled(o: &DynamicObject) -> bool {
    let labels = o.metadata.labels.as_ref();
    labels.is_some_and(|l| l.contains_key(FLUX_NAME) || l.contains_key(FLUX_NAMESPACE))
}

fn part_of(o: &DynamicObject) -> bool {
    let labels = o.metadata.labels.iter().flatten();
    labels.into_iter().any(|(k, _)| k == LABEL_PART_OF)
}

fn uid(o: &DynamicObject) -> String {
    o.metadata.uid.clone().unwrap_or_default()
}

#[tokio::test]
async fn a_set_naming_kustomize_controller_ends_sole_owner_without_changing_anything() {
    let h = Harness::new("takeover-flux").await;
    apply_as_flux(&h).await;
    let mut before = Vec::new();
    for (api, name) in apis(&h) {
        before.push(api.get(name).await.expect("get"));
    }
    // A Secret made by hand (no Flux label, no named manager), declared IfNotPresent too.
    let secrets = dyn_api(&h.client, &secret_ar(), Some(h.ns.as_str()));
    let mut by_hand = if_not_present_secret("by-hand", LIVE);
    by_hand["metadata"]["namespace"] = json!(h.ns);
    let by_hand: DynamicObject = serde_json::from_value(by_hand).expect("a Secret");
    secrets
        .create(&PostParams::default(), &by_hand)
        .await
        .expect("create by-hand");
    let op = h.start_operator();
    let set = h.applyset("app");
    let mut members = declared();
    members.push(if_not_present_secret("by-hand", MANIFEST));
    set.create(
        json!({"adoptExisting": true, "takeOverFieldManagers": [FLUX],
        "manifests": members}),
    )
    .await;
    // Flux's value of `drifted` differs from the set's: a conflict with the named manager is
    // reported, not forced (the set would change a value kustomize-controller set).
    let st = set.wait_ready_reason(Some("False"), "Conflict").await;
    let msg = ready(&st).message.clone();
    assert!(msg.contains("drifted") && msg.contains(FLUX), "{msg}");

    let taken = apis(&h).into_iter().zip(&before);
    for ((api, name), was) in taken.filter(|((_, n), _)| *n != "drifted") {
        let now = wait_for(
            &format!("{name}: no field of {FLUX}, no Flux label"),
            DEADLINE,
            || async {
                let o = api.get(name).await.ok()?;
                (!owned_by_flux(&o) && !flux_labelled(&o)).then_some(o)
            },
        )
        .await;
        assert_eq!(uid(&now), uid(was), "{name}: not re-created");
        assert_member_of(&now, &set.id(), &set.manager());
    }
    let ns = Some(h.ns.as_str());
    let web = must_get(&h.client, &deployment_ar(), ns, "web").await;
    assert_eq!(web.metadata.generation, before[0].metadata.generation);
    assert_eq!(
        web.data["spec"]["template"],
        before[0].data["spec"]["template"]
    );
    let settings = must_get(&h.client, &configmap_ar(), ns, "settings").await;
    assert_eq!(settings.data["data"], json!({"mode": "same"}));
    // The conflicting ConfigMap is as Flux left it: its value, its owner, its labels, not
    // the set's.
    let drifted = must_get(&h.client, &configmap_ar(), ns, "drifted").await;
    assert_eq!(drifted.data["data"], json!({"mode": "flux"}));
    assert!(owned_by_flux(&drifted) && flux_labelled(&drifted));
    assert!(!part_of(&drifted), "{:?}", drifted.metadata.labels);
    // The Secret made by hand is skipped: not adopted, its data as it was.
    let hand = must_get(&h.client, &secret_ar(), ns, "by-hand").await;
    assert!(!part_of(&hand), "{:?}", hand.metadata.labels);
    assert_eq!(hand.data["data"], json!({"token": LIVE}));
    // IfNotPresent: adopted by its metadata only, its data as it was.
    let tls = must_get(&h.client, &secret_ar(), ns, "tls").await;
    assert_eq!(tls.data["data"], json!({"token": LIVE}));
    assert_eq!(managers(&tls), [(set.manager(), "Apply".to_string())]);
    stop(op).await;
}

#[tokio::test]
async fn a_set_naming_no_manager_leaves_kustomize_controller_co_owning() {
    let h = Harness::new("takeover-none").await;
    apply_as_flux(&h).await;
    let op = h.start_operator();
    let set = h.applyset("app");
    let mut members = declared();
    // Without a take-over, the drifted value would be a conflict: declare Flux's.
    members[2] = configmap("drifted", json!({"mode": "flux"}));
    set.create(json!({"adoptExisting": true, "manifests": members.clone()}))
        .await;
    set.wait_ready().await;
    // A later change applied proves a reconcile ran after the adoption.
    members.push(configmap("later", json!({"k": "v"})));
    set.patch_spec(json!({"manifests": members})).await;
    let ns = Some(h.ns.as_str());
    let cm = dyn_api(&h.client, &configmap_ar(), ns);
    wait_for("the later ConfigMap applied", DEADLINE, || async {
        cm.get_opt("later").await.ok().flatten()
    })
    .await;
    set.wait_ready().await;
    for (api, name) in apis(&h) {
        let o = api.get(name).await.expect("get");
        if name == "tls" {
            // IfNotPresent with Flux's labels, for a set that does not replace Flux: skipped.
            let labels = o.metadata.labels.clone().unwrap_or_default();
            assert!(!labels.contains_key(LABEL_PART_OF), "{name}: {labels:?}");
        } else {
            assert_member_of(&o, &set.id(), &set.manager());
        }
        assert!(owned_by_flux(&o), "{name}: {:?}", managers(&o));
        assert!(flux_labelled(&o), "{name}: {:?}", o.metadata.labels);
    }
    let tls = must_get(&h.client, &secret_ar(), ns, "tls").await;
    assert_eq!(tls.data["data"], json!({"token": LIVE}));

    // Named later: the members the set applies are applied again and taken over, and the
    // IfNotPresent Secret is adopted by its metadata and taken over too.
    set.patch_spec(json!({"takeOverFieldManagers": [FLUX]}))
        .await;
    for (api, name) in apis(&h) {
        wait_for(
            &format!("{name}: taken over once named"),
            DEADLINE,
            || async {
                let o = api.get(name).await.ok()?;
                (!owned_by_flux(&o) && !flux_labelled(&o)).then_some(())
            },
        )
        .await;
    }
    stop(op).await;
}

#[tokio::test]
async fn a_plan_shows_the_adoptions_and_takes_nothing_over() {
    let h = Harness::new("takeover-plan").await;
    apply_as_flux(&h).await;
    let op = h.start_operator();
    let set = h.applyset("app");
    let mut members = declared();
    // A value Flux set that the set would change is a conflict in a plan too: declare Flux's.
    members[2] = configmap("drifted", json!({"mode": "flux"}));
    set.create(json!({"mode": "Plan", "adoptExisting": true,
        "takeOverFieldManagers": [FLUX], "manifests": members}))
        .await;
    let st = set.wait_ready_reason(Some("False"), "PlanReady").await;
    let plan = st.plan.clone().expect("a plan");
    let mut update: Vec<&str> = plan.update.iter().map(|m| m.name.as_str()).collect();
    update.sort_unstable();
    // Every object would be adopted, the IfNotPresent Secret too (not skipped).
    assert_eq!(
        update,
        ["drifted", "settings", "tls", "web"],
        "{}",
        status_json(&st)
    );
    assert!(plan.skip.is_empty(), "{}", status_json(&st));
    for (api, name) in apis(&h) {
        let o = api.get(name).await.expect("get");
        assert!(owned_by_flux(&o) && flux_labelled(&o), "{name}: untouched");
        assert!(!part_of(&o), "{name}");
    }
    stop(op).await;
}

#[tokio::test]
async fn a_pattern_an_own_or_a_kubernetes_manager_is_refused_naming_the_entry() {
    let h = Harness::new("takeover-invalid").await;
    let op = h.start_operator();
    let set = h.applyset("bad");
    let own = set.manager();
    set.create(json!({"takeOverFieldManagers": [FLUX, "kustomize-*"],
        "manifests": [configmap("x", json!({}))]}))
        .await;
    let st = set
        .wait_ready_reason(Some("False"), "ValidationFailed")
        .await;
    let msg = &ready(&st).message;
    assert!(
        msg.contains("spec.takeOverFieldManagers[1] (\"kustomize-*\") is a pattern"),
        "{msg}"
    );
    set.patch_spec(json!({"takeOverFieldManagers": [own]}))
        .await;
    let st = set
        .wait_until("the own manager refused", DEADLINE, |_, st| {
            let m = &ready(st?).message;
            m.contains("spec.takeOverFieldManagers[0]")
                .then(|| m.clone())
        })
        .await;
    assert!(st.contains("is this set's own field manager"), "{st}");
    // A manager of Kubernetes itself: its fields are a controller's to keep.
    set.patch_spec(json!({"takeOverFieldManagers": ["kube-controller-manager"]}))
        .await;
    let st = set
        .wait_until("a Kubernetes manager refused", DEADLINE, |_, st| {
            let m = &ready(st?).message;
            m.contains("(\"kube-controller-manager\") is a field manager of Kubernetes itself")
                .then(|| m.clone())
        })
        .await;
    assert!(st.contains("the controller and the set then fight"), "{st}");
    let cm = dyn_api(&h.client, &configmap_ar(), Some(&h.ns));
    assert!(
        cm.get_opt("x").await.expect("get").is_none(),
        "nothing applied"
    );
    stop(op).await;
}

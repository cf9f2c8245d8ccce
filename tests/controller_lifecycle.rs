//! End to end: the life of a parent — deletion with both policies, suspend, an operator killed
//! in the middle of a reconcile, and the no-op reconcile that writes nothing.

mod support;

use support::operator;

use std::{
    collections::BTreeSet,
    sync::Arc,
    time::{Duration, Instant},
};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    Api, ResourceExt,
    api::{ApiResource, PostParams},
};
use operator::*;
use parking_lot::Mutex;
use serde_json::json;

/// deletionPolicy Delete (the default) on a ClusterApplySet holding a CRD, its custom
/// resources, a Namespace and a ConfigMap in it: every member is deleted (custom resources
/// before their CRD, namespaced objects before the Namespace), then the finalizer is removed.
#[tokio::test]
async fn delete_policy_prunes_every_member_then_removes_the_finalizer() {
    let h = Harness::new("del").await;
    let op = h.start_operator();
    let group = unique_group();
    let wns = unique("delns");
    let set = h.cluster_applyset(&unique("del"));
    let crd_name = format!("widgets.{group}");
    set.create(json!({"manifests": [
        widget_crd(&group),
        namespace(&wns),
        widget(&group, &wns, "w1", 1),
        widget(&group, &wns, "w2", 2),
        configmap_in(&wns, "settings", json!({"k": "v"})),
    ]}))
    .await;
    set.wait_ready_within(LONG_DEADLINE).await;
    let parent = set.live().await;
    assert!(
        parent.finalizers().iter().any(|f| f == FINALIZER),
        "finalizer {FINALIZER} on the parent: {:?}",
        parent.finalizers()
    );

    let war = widget_ar(&group);
    // Watch the members' deletion start, in poll rounds. Within a round the later-stage object
    // (CRD, Namespace) is read before the earlier-stage ones, so an earlier-stage deletion that
    // really happened first is seen in the same round or before.
    let order: Vec<(String, ApiResource, Option<String>, String)> = vec![
        ("crd".into(), crd_ar(), None, crd_name.clone()),
        ("namespace".into(), namespace_ar(), None, wns.clone()),
        ("w1".into(), war.clone(), Some(wns.clone()), "w1".into()),
        ("w2".into(), war.clone(), Some(wns.clone()), "w2".into()),
        (
            "configmap".into(),
            configmap_ar(),
            Some(wns.clone()),
            "settings".into(),
        ),
    ];
    let seen: Arc<Mutex<std::collections::BTreeMap<String, u64>>> = Arc::default();
    let recorder = {
        let client = h.client.clone();
        let seen = seen.clone();
        let order = order.clone();
        tokio::spawn(async move {
            let mut round = 0u64;
            loop {
                for (key, ar, ns, name) in &order {
                    if seen.lock().contains_key(key) {
                        continue;
                    }
                    let api = dyn_api(&client, ar, ns.as_deref());
                    let deleting = match api.get_opt(name).await {
                        Ok(None) => true,
                        Ok(Some(o)) => o.metadata.deletion_timestamp.is_some(),
                        Err(kube::Error::Api(s)) if s.code == 404 => true,
                        Err(_) => false,
                    };
                    if deleting {
                        seen.lock().insert(key.clone(), round);
                    }
                }
                round += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };

    set.delete().await;
    set.wait_gone(LONG_DEADLINE).await;
    // When the finalizer is gone, every member's deletion has started.
    let mut not_deleted = Vec::new();
    for (_, ar, ns, name) in &order {
        if let Some(o) = get_obj(&h.client, ar, ns.as_deref(), name).await
            && o.metadata.deletion_timestamp.is_none()
        {
            not_deleted.push(format!(
                "{} {}/{name}",
                ar.kind,
                ns.as_deref().unwrap_or("")
            ));
        }
    }
    assert!(
        not_deleted.is_empty(),
        "members still exist and are not being deleted after the parent is gone: {not_deleted:?}; \
         poll round in which each member's deletion was first seen: {:?}",
        seen.lock().clone()
    );
    // And eventually they are all gone.
    for (_, ar, ns, name) in &order {
        let (client, ar2, ns2, name2) = (h.client.clone(), ar.clone(), ns.clone(), name.clone());
        eventually(
            &format!("{} {ns:?}/{name} to be gone", ar.kind),
            LONG_DEADLINE,
            move || {
                let (client, ar2, ns2, name2) =
                    (client.clone(), ar2.clone(), ns2.clone(), name2.clone());
                async move { (!exists(&client, &ar2, ns2.as_deref(), &name2).await).then_some(()) }
            },
        )
        .await;
    }
    recorder.abort();
    let seen = seen.lock().clone();
    let at = |k: &str| {
        *seen
            .get(k)
            .unwrap_or_else(|| panic!("deletion of {k} not observed: {seen:?}"))
    };
    for cr in ["w1", "w2"] {
        assert!(
            at(cr) <= at("crd"),
            "custom resources are deleted before their CRD: {seen:?}"
        );
    }
    for namespaced in ["w1", "w2", "configmap"] {
        assert!(
            at(namespaced) <= at("namespace"),
            "namespaced members are deleted before their Namespace: {seen:?}"
        );
    }
    stop(op).await;
}

/// deletionPolicy Orphan: the parent goes, its members stay (still labelled). Another
/// controller's finalizer on the parent is left alone throughout.
#[tokio::test]
async fn orphan_policy_leaves_the_members() {
    let h = Harness::new("orphan").await;
    let op = h.start_operator();
    let ns = h.ns.as_str();
    let set = h.applyset("orphan");
    set.create(json!({"deletionPolicy": "Orphan", "manifests": [
        configmap("a", json!({"k": "1"})), configmap("b", json!({"k": "1"}))]}))
        .await;
    set.wait_ready().await;
    assert!(set.live().await.finalizers().iter().any(|f| f == FINALIZER));

    // Somebody else's finalizer; then a new kind, so the parent's metadata is written again.
    let hold = "example.com/hold";
    set.patch_metadata(json!({"finalizers": [FINALIZER, hold]}))
        .await;
    set.patch_spec(json!({"manifests": [configmap("a", json!({"k": "1"})),
        configmap("b", json!({"k": "1"})), secret("c")]}))
        .await;
    set.wait_ready().await;
    let live = set.live().await;
    assert!(
        live.annotations()
            .get("applyset.kubernetes.io/contains-group-kinds")
            .is_some_and(|v| v.contains("Secret")),
        "the parent's metadata was written: {:?}",
        live.annotations()
    );
    let mut finalizers = live.finalizers().to_vec();
    finalizers.sort();
    assert_eq!(finalizers, vec![FINALIZER.to_string(), hold.to_string()]);

    set.delete().await;
    set.wait_until("our finalizer to go", DEADLINE, |o, _| {
        (!o.finalizers().iter().any(|f| f == FINALIZER)).then_some(())
    })
    .await;
    assert_eq!(
        set.live().await.finalizers(),
        [hold.to_string()],
        "the other finalizer stays"
    );
    set.patch_metadata(json!({"finalizers": null})).await;
    set.wait_gone(DEADLINE).await;
    assert_eq!(
        list_part_of(&h.client, &configmap_ar(), Some(ns), &set.id()).await,
        BTreeSet::from(["a".to_owned(), "b".to_owned()]),
        "Orphan leaves the members in place, still labelled"
    );
    stop(op).await;
}

/// suspend: true → Ready=False Suspended and edits are not applied until it is false again.
#[tokio::test]
async fn suspend_stops_applying_until_resumed() {
    let h = Harness::new("suspend").await;
    let op = h.start_operator();
    let ns = h.ns.as_str();
    // Another set of the same test keeps the operator's reconcile counter moving whatever a
    // suspended parent does.
    let ticker = h.applyset("ticker");
    ticker
        .create(json!({"manifests": [configmap("ticker", json!({"k": "1"}))]}))
        .await;
    let set = h.applyset("suspended");
    set.create(json!({"manifests": [configmap("a", json!({"v": "1"}))]}))
        .await;
    set.wait_ready().await;
    ticker.wait_ready().await;

    set.patch_spec(json!({"suspend": true})).await;
    set.wait_ready_reason(Some("False"), "Suspended").await;
    let a_rv = rv(&h.client, &configmap_ar(), Some(ns), "a").await;

    set.patch_spec(json!({"manifests": [
        configmap("a", json!({"v": "2"})), configmap("b", json!({"v": "1"}))]}))
        .await;
    set.wait_ready_reason(Some("False"), "Suspended").await;
    wait_reconciles(&op, 2).await;
    assert_eq!(
        rv(&h.client, &configmap_ar(), Some(ns), "a").await,
        a_rv,
        "a suspended set must not apply edits"
    );
    assert!(
        !exists(&h.client, &configmap_ar(), Some(ns), "b").await,
        "b not created while suspended"
    );

    set.patch_spec(json!({"suspend": false})).await;
    set.wait_ready().await;
    let a = must_get(&h.client, &configmap_ar(), Some(ns), "a").await;
    assert_eq!(a.data["data"]["v"], "2");
    assert!(exists(&h.client, &configmap_ar(), Some(ns), "b").await);
    stop(op).await;
}

/// The operator killed in the middle of a reconcile and started again converges, with nothing
/// leaked and nothing wrongly deleted.
#[tokio::test]
async fn restart_mid_reconcile_converges() {
    const N: usize = 150;
    let h = Harness::new("restart").await;
    let ns = h.ns.clone();
    let cms: Api<ConfigMap> = Api::namespaced(h.client.clone(), &ns);
    let bystander: ConfigMap =
        serde_json::from_value(configmap("bystander", json!({"k": "v"}))).expect("cm");
    cms.create(&PostParams::default(), &bystander)
        .await
        .expect("bystander");
    let bystander_uid = cms.get("bystander").await.expect("bystander").uid();

    let name = |i: usize| format!("cm-{i:03}");
    let manifests = |n: usize| {
        json!(
            (0..n)
                .map(|i| configmap(
                    &name(i),
                    json!({"i": i.to_string(), "pad": "x".repeat(2000)})
                ))
                .collect::<Vec<_>>()
        )
    };
    let set = h.applyset("big");
    let id = set.id();
    set.create(json!({"manifests": manifests(N)})).await;

    // One member request at a time, so the test can catch the reconcile half-way.
    let op1 = h.start_operator_with_apply_concurrency(1);
    let deadline = Instant::now() + DEADLINE;
    let at_abort = loop {
        let n = list_part_of(&h.client, &configmap_ar(), Some(&ns), &id)
            .await
            .len();
        if n >= 1 {
            assert!(
                n < N,
                "the first operator applied all {N} ConfigMaps before the test could stop it half-way"
            );
            op1.abort();
            break n;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {DEADLINE:?} waiting for the first member; the parent is:\n{}",
            set.describe().await
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    eprintln!("aborted the first operator with {at_abort} of {N} members applied");

    let op2 = h.start_operator();
    let st = set.wait_ready_within(LONG_DEADLINE).await;
    assert_eq!(
        summary(&st).members as i64,
        N as i64,
        "{}",
        status_json(&st)
    );
    let expected: BTreeSet<String> = (0..N).map(name).collect();
    assert_eq!(
        list_part_of(&h.client, &configmap_ar(), Some(&ns), &id).await,
        expected,
        "exactly the {N} members exist, labelled"
    );
    assert_eq!(
        cms.get("bystander")
            .await
            .expect("bystander survives")
            .uid(),
        bystander_uid
    );

    // Shrink to 100.
    set.patch_spec(json!({"manifests": manifests(100)})).await;
    let st = set.wait_ready_within(LONG_DEADLINE).await;
    assert_eq!(
        summary(&st).pruned as i64,
        (N - 100) as i64,
        "{}",
        status_json(&st)
    );
    let expected: BTreeSet<String> = (0..100).map(name).collect();
    assert_eq!(
        list_part_of(&h.client, &configmap_ar(), Some(&ns), &id).await,
        expected,
        "exactly 100 members remain"
    );
    let mut all: BTreeSet<String> = cms
        .list(&Default::default())
        .await
        .expect("list")
        .items
        .iter()
        .map(|c| c.name_any())
        .collect();
    let mut want = expected.clone();
    want.insert("bystander".into());
    // Published by a controller-manager controller when it runs; not ours either way.
    all.remove("kube-root-ca.crt");
    assert_eq!(all, want, "no leaked ConfigMap and the bystander is kept");
    assert_eq!(
        cms.get("bystander")
            .await
            .expect("bystander survives")
            .uid(),
        bystander_uid
    );
    stop(op2).await;
}

/// Reconciling an unchanged set again writes no member and no status.
#[tokio::test]
async fn no_op_reconcile_writes_nothing() {
    let h = Harness::new("noop").await;
    let op = h.start_operator();
    let ns = h.ns.as_str();
    let set = h.applyset("noop");
    set.create(json!({"manifests": [
        configmap("a", json!({"k": "1"})), secret("s"), service("svc"), deployment("d")]}))
        .await;
    set.wait_ready().await;
    // Converged: a reconcile that leaves the parent as it was (the first ones after the
    // creation update the summary). A set that never converges fails here. Two reconciles:
    // the one in flight when the resourceVersion is read may be the first to end (and have
    // written before the read); the second began after the read (one set's reconciles never
    // overlap).
    let mut converged = false;
    for _ in 0..10 {
        let rv = set.live().await.resource_version();
        wait_reconciles(&op, 2).await;
        if set.live().await.resource_version() == rv {
            converged = true;
            break;
        }
    }
    assert!(
        converged,
        "every reconcile wrote the parent:\n{}",
        set.describe().await
    );

    let objs = vec![
        (configmap_ar(), Some(ns.to_owned()), "a".to_owned()),
        (secret_ar(), Some(ns.to_owned()), "s".to_owned()),
        (service_ar(), Some(ns.to_owned()), "svc".to_owned()),
        (deployment_ar(), Some(ns.to_owned()), "d".to_owned()),
    ];
    let members_before = resource_versions(&h.client, &objs).await;
    let parent_before = set.live().await.resource_version();

    wait_reconciles(&op, 2).await;
    let parent_after = set.live().await.resource_version();
    assert_eq!(
        parent_after,
        parent_before,
        "a no-op reconcile must not write the parent (status or metadata); parent now:\n{}",
        set.describe().await
    );
    assert_eq!(
        resource_versions(&h.client, &objs).await,
        members_before,
        "a no-op reconcile must not write any member"
    );
    stop(op).await;
}

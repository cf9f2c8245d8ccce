//! End to end: the view library behind `kubectl applyset ui`, against a real API server and
//! the in-process operator. The cache lists each set with its state (a Waiting set naming the
//! dependency it waits for), announces a change within 2 s and forgets a deleted set, and
//! announces a change that leaves the set's summary alone as such; a set's
//! recent events are the operator's, warnings first; a viewer with only a namespaced Role
//! watches only its namespace, and a watch the server refuses is reported, naming its scope.

mod support;

use std::{sync::Arc, time::Duration};

use applyset_operator::{
    applyset::{ParentKind, ParentRef},
    view::{SetCache, SetSummary, Snapshot, State, Watched, access, events},
};
use serde_json::json;
use support::{cluster, operator::*, wait_for};
use tokio::sync::broadcast::error::RecvError;

/// How soon a change reaches the cache's subscribers.
const PROMPTLY: Duration = Duration::from_secs(2);

/// The reference of a test's ApplySet handle.
fn reference(p: &Parent) -> ParentRef {
    ParentRef::applyset(p.namespace.as_deref().unwrap_or_default(), &p.name)
}

/// Waits until the cache's snapshot satisfies `check`; returns that snapshot.
async fn wait_snapshot(
    cache: &SetCache,
    what: &str,
    check: impl Fn(&Snapshot) -> bool,
) -> Arc<Snapshot> {
    wait_for(what, DEADLINE, || {
        let snap = cache.snapshot();
        let ok = check(&snap);
        async move { ok.then_some(snap) }
    })
    .await
}

/// The state of `p` in `snap`.
fn state(snap: &Snapshot, p: &ParentRef) -> Option<State> {
    snap.get(p).map(|s| s.state)
}

#[tokio::test]
async fn the_cache_lists_each_set_in_its_state_and_follows_changes() {
    let h = Harness::new("view").await;
    let op = h.start_operator();
    let (ready, waiting, paused) = (
        h.applyset(&unique("ready")),
        h.applyset(&unique("waiting")),
        h.applyset(&unique("paused")),
    );
    let infra = h.cluster_applyset(&unique("infra"));
    let missing = ParentRef::applyset(&h.ns, unique("missing"));
    ready
        .create(json!({"manifests": [configmap("view-ready", json!({"k": "v"}))]}))
        .await;
    waiting
        .create(json!({"dependsOn": [{"name": missing.name}],
            "manifests": [configmap("view-waiting", json!({"k": "v"}))]}))
        .await;
    paused
        .create(json!({"suspend": true,
            "manifests": [configmap("view-paused", json!({"k": "v"}))]}))
        .await;
    infra
        .create(json!({"manifests": [configmap_in(&h.ns, "view-infra", json!({"k": "v"}))]}))
        .await;
    let watched = Watched {
        namespaces: Some(vec![h.ns.clone()]),
        cluster_sets: true,
    };
    let cache = SetCache::start(h.client.clone(), watched);
    let (r, w, p) = (reference(&ready), reference(&waiting), reference(&paused));
    let i = ParentRef::cluster(&infra.name);
    let snap = wait_snapshot(&cache, "Ready, Waiting and Suspended", |s| {
        state(s, &r) == Some(State::Ready)
            && state(s, &w) == Some(State::Waiting)
            && state(s, &p) == Some(State::Suspended)
            && state(s, &i) == Some(State::Ready)
    })
    .await;
    assert!(cache.is_ready());
    let applysets = snap
        .sets
        .iter()
        .filter(|s| s.parent.kind == ParentKind::ApplySet);
    assert_eq!(applysets.count(), 3, "only the test namespace's ApplySets");
    let order = |s: &SetSummary| {
        (
            s.parent.kind,
            s.parent.namespace.clone(),
            s.parent.name.clone(),
        )
    };
    assert!(
        snap.sets.windows(2).all(|p| order(&p[0]) < order(&p[1])),
        "sorted by kind, namespace and name"
    );
    assert!(cache.errors().is_empty(), "{:?}", cache.errors());
    let waits = snap.get(&w).and_then(|s| s.waiting_for.clone());
    let why = format!("ApplySet {}/{} does not exist", h.ns, missing.name);
    assert_eq!(waits, Some((missing.clone(), why)));
    assert_eq!(snap.get(&r).map(|s| s.members), Some(1));
    assert_eq!(snap.deps.dependents(&missing), std::slice::from_ref(&w));

    // A change: announced within 2 s as a summary change, and in a snapshot soon after.
    let mut changes = cache.subscribe();
    ready.patch_spec(json!({"suspend": true})).await;
    let seen = tokio::time::timeout(PROMPTLY, async {
        loop {
            match changes.recv().await {
                Ok(c)
                    if c.parent == r
                        && c.summary_changed
                        && c.summary.as_ref().map(|s| s.state) == Some(State::Suspended) =>
                {
                    return;
                }
                Ok(_) | Err(RecvError::Lagged(_)) => {}
                Err(RecvError::Closed) => panic!("the cache's feed closed"),
            }
        }
    })
    .await;
    assert!(seen.is_ok(), "no change to Suspended within {PROMPTLY:?}");
    wait_snapshot(&cache, "Suspended in the snapshot", |s| {
        state(s, &r) == Some(State::Suspended)
    })
    .await;

    // The operator's events about a set, warnings first.
    let rows = wait_for("the waiting set's events", DEADLINE, || async {
        let uid = cache.snapshot().get(&w).map(|s| s.uid.clone())?;
        let rows = events::recent(&h.client, &w, &uid, 10).await.ok()?;
        rows.iter()
            .any(|e| e.reason == "DependencyNotReady")
            .then_some(rows)
    })
    .await;
    assert_eq!(rows[0].kind, "Warning", "{rows:?}");
    assert!(rows[0].note.contains(&missing.name), "{rows:?}");
    assert!(rows.len() <= 10 && rows.iter().all(|e| e.count >= 1));
    let uid = snap.get(&r).map(|s| s.uid.clone()).unwrap_or_default();
    let ready_events = wait_for("the ready set's events", DEADLINE, || async {
        let rows = events::recent(&h.client, &r, &uid, 10).await.ok()?;
        rows.iter()
            .any(|e| e.reason == "ReconciliationSucceeded" && e.kind == "Normal")
            .then_some(rows)
    })
    .await;
    assert!(
        ready_events
            .iter()
            .all(|e| e.reason != "DependencyNotReady"),
        "only the set's own events: {ready_events:?}"
    );

    // Deleted: gone from the snapshot.
    waiting.delete().await;
    infra.delete().await;
    wait_snapshot(&cache, "the deleted sets gone", |s| {
        s.get(&w).is_none() && s.get(&i).is_none()
    })
    .await;
    stop(op).await;
}

#[tokio::test]
async fn a_viewer_with_a_namespaced_role_watches_only_its_namespace() {
    let h = Harness::new("view-rbac").await;
    let other = h.extra_namespace("view-other").await;
    create_rbac(
        &h,
        &h.ns,
        &[
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "viewer"}}),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                "metadata": {"name": "viewer"},
                "rules": [{"apiGroups": ["applyset.dev"], "resources": ["applysets"],
                    "verbs": ["get", "list", "watch"]}]}),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": "viewer"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                    "name": "viewer"},
                "subjects": [{"kind": "ServiceAccount", "name": "viewer", "namespace": h.ns}]}),
        ],
    )
    .await;
    let mine = h.applyset(&unique("mine"));
    mine.create(json!({})).await;
    let theirs = Parent {
        namespace: Some(other.clone()),
        ..h.applyset(&unique("theirs"))
    };
    theirs.create(json!({})).await;

    // An administrator watches everything; the viewer only what it asked for.
    let all = access::watched(&h.client, &[]).await.expect("reviews");
    assert_eq!(
        all,
        Watched {
            namespaces: None,
            cluster_sets: true
        }
    );
    let viewer = cluster().service_account_client(&h.ns, "viewer").await;
    let watched = access::watched(&viewer, std::slice::from_ref(&h.ns))
        .await
        .expect("reviews");
    let mut want = Watched {
        namespaces: Some(vec![h.ns.clone()]),
        cluster_sets: false,
    };
    assert_eq!(watched, want);

    let cache = SetCache::start(viewer.clone(), watched);
    let (m, t) = (reference(&mine), reference(&theirs));
    let snap = wait_snapshot(&cache, "the viewer's set", |s| s.get(&m).is_some()).await;
    assert!(cache.is_ready());
    assert!(
        snap.get(&t).is_none(),
        "another namespace's set is not listed"
    );
    assert_eq!(snap.sets.len(), 1);
    assert!(cache.errors().is_empty(), "{:?}", cache.errors());
    assert_eq!(snap.get(&m).map(|s| s.state), Some(State::Reconciling));

    // Asked to watch what it may not: each refused watch says so, and the cache is complete
    // as far as it goes.
    want.namespaces = Some(vec![other.clone()]);
    want.cluster_sets = true;
    let refused = SetCache::start(viewer, want);
    wait_for("the refused watches to settle", DEADLINE, || async {
        refused.is_ready().then_some(())
    })
    .await;
    let errors = refused.errors();
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(
        errors
            .iter()
            .any(|e| e.starts_with(&format!("watching ApplySets of namespace {other}: "))),
        "{errors:?}"
    );
    assert!(
        errors
            .iter()
            .any(|e| e.starts_with("watching ClusterApplySets: ")),
        "{errors:?}"
    );
    assert!(errors.iter().all(|e| e.contains("forbidden")), "{errors:?}");
    assert!(refused.snapshot().sets.is_empty());
}

/// Events are read page by page (here one a request) and only those regarding the set's UID.
#[tokio::test]
async fn events_are_paged_and_selected_by_uid() {
    use k8s_openapi::api::events::v1::Event;
    use kube::{Api, api::PostParams};

    let h = Harness::new("view-events").await;
    let set = ParentRef::applyset(&h.ns, "paged");
    let events: Api<Event> = Api::namespaced(h.client.clone(), &h.ns);
    let uid = unique("uid");
    let made = [
        (
            "Normal",
            "First",
            "2026-01-01T00:00:00.000000Z",
            uid.as_str(),
        ),
        (
            "Warning",
            "Broke",
            "2026-01-01T00:01:00.000000Z",
            uid.as_str(),
        ),
        (
            "Normal",
            "Latest",
            "2026-01-01T00:02:00.000000Z",
            uid.as_str(),
        ),
        (
            "Warning",
            "Other",
            "2026-01-01T00:03:00.000000Z",
            "another-uid",
        ),
    ];
    for (i, (type_, reason, at, regarding)) in made.into_iter().enumerate() {
        let e: Event = serde_json::from_value(json!({
            "metadata": {"name": format!("paged.{i}"), "namespace": h.ns},
            "type": type_, "reason": reason, "note": format!("{reason} note"), "action": "Test",
            "eventTime": at, "reportingController": "applyset.dev/test",
            "reportingInstance": "test",
            "regarding": {"apiVersion": "applyset.dev/v1alpha1", "kind": "ApplySet",
                "namespace": h.ns, "name": "paged", "uid": regarding},
        }))
        .expect("an event");
        events
            .create(&PostParams::default(), &e)
            .await
            .expect("create an event");
    }
    let rows = wait_for("the three events", DEADLINE, || async {
        let rows = events::recent_in_pages(&h.client, &set, &uid, 10, 1)
            .await
            .ok()?;
        (rows.len() == 3).then_some(rows)
    })
    .await;
    let reasons: Vec<&str> = rows.iter().map(|r| r.reason.as_str()).collect();
    assert_eq!(reasons, ["Broke", "Latest", "First"]);
    assert_eq!(rows[0].note, "Broke note");
    let two = events::recent(&h.client, &set, &uid, 2)
        .await
        .expect("events");
    assert_eq!(two.len(), 2);
}

/// A condition `Stalled` of `status` with `message` (a JSON merge patch of the status).
fn stalled(status: &str, message: &str) -> serde_json::Value {
    json!({"status": {"conditions": [{"type": "Stalled", "status": status, "reason": "Testing",
        "message": message, "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})
}

/// The next change of `set` the cache announces within 2 s.
async fn next_change(
    changes: &mut tokio::sync::broadcast::Receiver<applyset_operator::view::Change>,
    set: &ParentRef,
) -> applyset_operator::view::Change {
    let next = tokio::time::timeout(PROMPTLY, async {
        loop {
            match changes.recv().await {
                Ok(c) if &c.parent == set => return c,
                Ok(_) | Err(RecvError::Lagged(_)) => {}
                Err(RecvError::Closed) => panic!("the cache's feed closed"),
            }
        }
    })
    .await;
    next.unwrap_or_else(|_| panic!("no change of {set} within {PROMPTLY:?}"))
}

/// A set's status changing where its summary does not look (a condition's message, as a
/// new plan or a member's health would) is announced, marked as leaving the summary alone;
/// one its summary shows is marked as such.
#[tokio::test]
async fn a_change_beside_the_summary_is_announced_as_such() {
    use kube::api::{Patch, PatchParams};

    let h = Harness::new("view-beside").await;
    let set = h.applyset(&unique("beside"));
    set.create(json!({})).await;
    let watched = Watched {
        namespaces: Some(vec![h.ns.clone()]),
        cluster_sets: false,
    };
    let cache = SetCache::start(h.client.clone(), watched);
    let p = reference(&set);
    wait_snapshot(&cache, "the set", |s| s.get(&p).is_some()).await;
    let mut changes = cache.subscribe();
    let patch = |body: serde_json::Value| {
        let api = set.api();
        let name = set.name.clone();
        async move {
            api.patch_status(&name, &PatchParams::default(), &Patch::Merge(body))
                .await
                .expect("patch the status")
        }
    };
    patch(stalled("False", "first")).await;
    let first = next_change(&mut changes, &p).await;
    assert!(first.summary.as_ref().is_some_and(|s| !s.stalled));
    patch(stalled("False", "second")).await;
    let second = next_change(&mut changes, &p).await;
    assert!(!second.summary_changed, "{second:?}");
    assert!(second.summary.is_some());
    patch(stalled("True", "second")).await;
    let third = next_change(&mut changes, &p).await;
    assert!(third.summary_changed, "{third:?}");
    assert!(third.summary.as_ref().is_some_and(|s| s.stalled));
}

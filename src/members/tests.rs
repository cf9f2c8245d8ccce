//! Unit tests of the member watches: drift, skipped writes, health tracking, kind watches.

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
};

use kube::{Client, runtime::watcher};

use super::{
    Applied, CheckTarget, MemberWatches, Targets, Triggers, drift::older, kind_watches::not_served,
    labelled::Tag,
};
use crate::{
    api::MemberRef,
    applyset::{GroupKind, ParentKind, ParentRef, controls::Marks},
    discovery::Resolved,
    health::{self, Health},
};

fn applied(hash: u64, rv: &str) -> Applied {
    Applied {
        hash,
        rv: rv.into(),
        uid: "uid".into(),
        shape: None,
        marks: Marks::default(),
    }
}

fn member(name: &str) -> MemberRef {
    MemberRef {
        group: String::new(),
        kind: "ConfigMap".into(),
        namespace: Some("ns".into()),
        name: name.into(),
    }
}

/// A registry with parent ns/p declaring member `a`, its kind synced; no connection is
/// made (the client is never used by these calls).
fn registry() -> (Arc<MemberWatches>, Triggers, String, MemberRef) {
    let cfg = kube::Config::new("http://127.0.0.1:9".parse().expect("url"));
    let client = Client::try_from(cfg).expect("client");
    let (w, t) = MemberWatches::new(client);
    let parent = ParentRef::applyset("ns", "p");
    let a = member("a");
    w.register(&parent.id(), &parent, &HashSet::from([a.clone()]));
    w.replace_kind(&GroupKind::new("", "ConfigMap"), HashMap::new());
    (w, t, parent.id(), a)
}

fn triggered(t: &mut Triggers) -> usize {
    let mut n = 0;
    while t.applysets.try_recv().is_ok() {
        n += 1;
    }
    n
}

fn event(w: &MemberWatches, r: &MemberRef, rv: &str, id: &str) -> Vec<ParentRef> {
    w.observe(r.clone(), Some(rv.into()), Some(rv.into()), Some(id.into()))
}

#[tokio::test]
async fn our_own_write_seen_before_the_answer_is_not_drift() {
    let (w, mut t, id, a) = registry();
    w.applying(&id, &a).record(applied(1, "5"));
    // A changed body is applied; its event overtakes the answer.
    let applying = w.applying(&id, &a);
    assert!(event(&w, &a, "10", &id).is_empty());
    applying.record(applied(2, "10"));
    assert_eq!(triggered(&mut t), 0);
    assert_eq!(
        w.unchanged(&id, &a, 2).as_deref(),
        Some("uid"),
        "the next identical apply is skipped (its UID known)"
    );
    // The same event delivered again, or an older one: still nothing.
    assert!(event(&w, &a, "10", &id).is_empty());
    assert!(event(&w, &a, "5", &id).is_empty());
    // Somebody else's later change is drift.
    assert_eq!(event(&w, &a, "11", &id).len(), 1);
    assert!(w.unchanged(&id, &a, 2).is_none());
}

#[tokio::test]
async fn members_of_a_parent_come_from_synced_watches_only() {
    let (w, _t, id, a) = registry();
    let cm = GroupKind::new("", "ConfigMap");
    let secret = GroupKind::new("", "Secret");
    w.applying(&id, &a).record(applied(1, "10"));
    // Somebody else's labelled object, and an object of another set.
    assert!(event(&w, &member("stray"), "11", &id).is_empty());
    assert!(event(&w, &member("other"), "12", "another-id").is_empty());
    let only_cm = std::collections::BTreeSet::from([cm.clone()]);
    let got = w.members_of(&id, &only_cm).expect("ConfigMaps are synced");
    assert_eq!(
        got,
        HashMap::from([
            (a.clone(), ("10".to_string(), Marks::default())),
            (member("stray"), ("11".to_string(), Marks::default()))
        ])
    );
    // A kind whose watch has not listed yet: unknown, so the caller lists.
    let both = std::collections::BTreeSet::from([cm, secret]);
    assert_eq!(w.members_of(&id, &both), None);
    // A deletion leaves the cache.
    assert!(
        w.observe(member("stray"), None, Some("13".into()), Some(id.clone()))
            .is_empty()
    );
    assert_eq!(w.members_of(&id, &only_cm).map(|m| m.len()), Some(1));
}

#[tokio::test]
async fn a_change_after_our_apply_seen_while_in_flight_is_drift() {
    let (w, mut t, id, a) = registry();
    let applying = w.applying(&id, &a);
    assert!(event(&w, &a, "10", &id).is_empty());
    assert!(event(&w, &a, "12", &id).is_empty());
    applying.record(applied(1, "10"));
    assert_eq!(triggered(&mut t), 1, "the parent is reconciled again");
    assert!(
        w.unchanged(&id, &a, 1).is_none(),
        "the member is sent again"
    );
}

#[tokio::test]
async fn a_deletion_after_our_apply_seen_while_in_flight_is_drift() {
    let (w, mut t, id, a) = registry();
    let applying = w.applying(&id, &a);
    assert!(
        w.observe(a.clone(), None, Some("12".into()), None)
            .is_empty()
    );
    applying.record(applied(1, "10"));
    assert_eq!(triggered(&mut t), 1);
    assert!(w.unchanged(&id, &a, 1).is_none());
}

#[tokio::test]
async fn a_deletion_before_our_create_is_not_drift() {
    let (w, mut t, id, a) = registry();
    let applying = w.applying(&id, &a);
    assert!(
        w.observe(a.clone(), None, Some("8".into()), None)
            .is_empty()
    );
    applying.record(applied(1, "10"));
    assert_eq!(triggered(&mut t), 0);
    assert!(w.unchanged(&id, &a, 1).is_some());
}

#[tokio::test]
async fn a_failed_or_cancelled_apply_is_sent_again_and_drift_counts_again() {
    let (w, mut t, id, a) = registry();
    w.applying(&id, &a).record(applied(1, "10"));
    assert!(w.unchanged(&id, &a, 1).is_some());
    drop(w.applying(&id, &a)); // failed, or its reconcile was cancelled
    assert!(w.unchanged(&id, &a, 1).is_none());
    assert_eq!(triggered(&mut t), 0);
    w.applying(&id, &a).record(applied(2, "11"));
    assert_eq!(event(&w, &a, "12", &id).len(), 1, "not in flight any more");
}

#[tokio::test]
async fn a_status_written_by_the_members_controller_is_not_drift() {
    let (w, mut t, id, a) = registry();
    let current = Health::new(health::Status::Current, "ok");
    w.applying(&id, &a).record(Applied {
        shape: Some(7),
        ..applied(1, "10")
    });
    // Same shape at a newer version: only the status moved.
    let status_only = Some((current.clone(), 7));
    assert!(
        w.observe_seen(
            a.clone(),
            Some("11".into()),
            status_only,
            Some("11".into()),
            Some(id.clone())
        )
        .is_empty()
    );
    assert_eq!(triggered(&mut t), 0);
    assert!(
        w.unchanged(&id, &a, 1).is_some(),
        "still as applied: not sent again"
    );
    // Anything else moved: drift.
    let changed = Some((current, 8));
    assert_eq!(
        w.observe_seen(
            a.clone(),
            Some("12".into()),
            changed,
            Some("12".into()),
            Some(id.clone())
        )
        .len(),
        1
    );
    assert!(w.unchanged(&id, &a, 1).is_none());
}

#[tokio::test]
async fn tracked_sets_are_marked_when_their_members_health_changes() {
    let (w, _t, id, a) = registry();
    let parent = ParentRef::applyset("ns", "p");
    w.track(
        &id,
        &parent,
        Targets {
            members: vec![a.clone()],
            checks: Vec::new(),
        },
    );
    assert_eq!(w.take_dirty().len(), 1, "tracking marks the set");
    let h = w.health(&id).expect("tracked");
    assert_eq!(
        (h.summary.not_found, h.summary.total(), h.unobserved),
        (1, 1, 0),
        "synced kind, no object: not found"
    );
    let progressing = Health::new(health::Status::InProgress, "0 of 1 replicas available");
    w.observe_seen(
        a.clone(),
        Some("5".into()),
        Some((progressing.clone(), 1)),
        Some("5".into()),
        Some(id.clone()),
    );
    assert_eq!(w.take_dirty().len(), 1);
    // The same health again (a status write that changes nothing it reads): not marked.
    w.observe_seen(
        a.clone(),
        Some("6".into()),
        Some((progressing, 1)),
        Some("6".into()),
        Some(id.clone()),
    );
    assert!(w.take_dirty().is_empty());
    let current = Health::new(health::Status::Current, "ok");
    w.observe_seen(
        a.clone(),
        Some("7".into()),
        Some((current, 1)),
        Some("7".into()),
        Some(id.clone()),
    );
    assert_eq!(w.take_dirty().len(), 1);
    assert_eq!(w.health(&id).map(|h| h.summary.current), Some(1));
    // Another set's object of the same name is not this set's member.
    w.observe_seen(
        a.clone(),
        Some("8".into()),
        None,
        Some("8".into()),
        Some("other".into()),
    );
    assert_eq!(w.health(&id).map(|h| h.summary.not_found), Some(1));
    w.untrack(&id);
    assert!(w.health(&id).is_none());
}

#[tokio::test]
async fn members_of_kinds_not_watched_are_unobserved_until_read_otherwise() {
    let (w, _t, id, a) = registry();
    let parent = ParentRef::applyset("ns", "p");
    let web = MemberRef {
        group: "apps".into(),
        kind: "Deployment".into(),
        namespace: Some("ns".into()),
        name: "web".into(),
    };
    let members = vec![a.clone(), web.clone()];
    let changes = w.changes();
    w.track(
        &id,
        &parent,
        Targets {
            members: members.clone(),
            checks: Vec::new(),
        },
    );
    assert!(
        changes.has_changed().unwrap_or(false),
        "a reconcile waiting on it wakes"
    );
    // ConfigMaps are watched (a is not found); Deployments have not listed.
    let h = w.health(&id).expect("tracked");
    assert_eq!((h.unobserved, h.summary.in_progress), (1, 1));
    assert_eq!(w.unwatched(&id), vec![web.clone()]);
    // Read by the reconcile instead: observed, and kept when the set is tracked again.
    w.fetched(
        &id,
        vec![(web.clone(), Health::new(health::Status::Current, "ok"))],
    );
    w.track(
        &id,
        &parent,
        Targets {
            members,
            checks: Vec::new(),
        },
    );
    let h = w.health(&id).expect("tracked");
    assert_eq!(
        (h.unobserved, h.summary.current, h.summary.not_found),
        (0, 1, 1)
    );
    // A member applied a moment ago, whose version the watch has not delivered: unobserved.
    w.applying(&id, &a).record(Applied {
        shape: Some(1),
        ..applied(1, "20")
    });
    assert_eq!(
        w.health(&id).map(|h| h.unobserved),
        Some(0),
        "ConfigMaps need no status"
    );
}

#[test]
fn only_a_404_listing_says_a_kind_is_not_served() {
    let api = |code: u16| {
        kube::Error::Api(Box::new(
            kube::core::Status::failure("x", "NotFound").with_code(code),
        ))
    };
    assert!(not_served(&watcher::Error::InitialListFailed(api(404))));
    assert!(not_served(&watcher::Error::WatchStartFailed(api(404))));
    assert!(!not_served(&watcher::Error::InitialListFailed(api(403))));
    assert!(!not_served(&watcher::Error::InitialListFailed(api(500))));
    assert!(!not_served(&watcher::Error::NoResourceVersion));
}

#[tokio::test]
async fn a_kind_is_watched_only_once_accepted_and_until_no_set_declares_it() {
    let (w, _t, id, _) = registry();
    assert_eq!(w.watch_count(), 0);
    let gk = GroupKind::new("", "ConfigMap");
    let resolved = Resolved {
        resource: kube::discovery::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
        namespaced: true,
    };
    w.accepted(&id, [(&gk, &resolved)]);
    w.accepted("another", [(&gk, &resolved)]);
    assert_eq!(w.watch_count(), 1, "one watch per kind");
    let parent = ParentRef {
        kind: ParentKind::ApplySet,
        name: "p".into(),
        namespace: Some("ns".into()),
    };
    w.register(&id, &parent, &HashSet::new());
    w.forget("another");
    // Released, but kept for the grace period.
    assert_eq!(w.watch_count(), 1);
    w.stop_if_expired(&gk);
    assert_eq!(w.watch_count(), 1, "not before the grace period");
    w.stop();
}

/// A check target of a ConfigMap `name` in `ns`.
fn check(ns: &str, name: &str) -> CheckTarget {
    CheckTarget {
        reference: MemberRef {
            group: String::new(),
            kind: "ConfigMap".into(),
            namespace: Some(ns.into()),
            name: name.into(),
        },
        resource: kube::discovery::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
    }
}

#[tokio::test]
async fn checks_refused_for_room_are_watched_once_room_frees_and_say_why_meanwhile() {
    let (w, _t, _, _) = registry();
    w.set_check_cap(2);
    let (a, b) = (ParentRef::applyset("t", "a"), ParentRef::applyset("u", "b"));
    let targets = |checks: Vec<CheckTarget>| Targets {
        members: Vec::new(),
        checks,
    };
    w.track(&a.id(), &a, targets(vec![check("t", "x"), check("t", "y")]));
    w.track(&b.id(), &b, targets(vec![check("u", "z")]));
    assert_eq!(w.health_watch_count(), 2, "the operator's cap");
    let hb = w.health(&b.id()).expect("tracked");
    assert_eq!(hb.summary.unknown, 1, "{hb:?}");
    let named = format!("{:?}", hb.summary);
    assert!(
        named.contains("watched as soon as other sets free room"),
        "{named}"
    );
    // a no longer checks y: b's check gets the room.
    w.track(&a.id(), &a, targets(vec![check("t", "x")]));
    assert_eq!(w.health_watch_count(), 2);
    let hb = w.health(&b.id()).expect("tracked");
    assert_eq!(hb.summary.unknown, 0, "{hb:?}");
    // a gone: its watch goes, nobody waits.
    w.untrack(&a.id());
    assert_eq!(w.health_watch_count(), 1);
    w.untrack(&b.id());
    assert_eq!(w.health_watch_count(), 0);
    w.stop();
}

#[test]
fn stale_events_are_recognised() {
    assert!(older("41", "42"));
    assert!(!older("42", "42"));
    assert!(!older("43", "42"));
    assert!(
        !older("x", "42"),
        "unparsable is not stale: it counts as drift"
    );
}

#[tokio::test]
async fn the_controls_of_live_objects_are_known_without_a_request() {
    let (w, _t, id, a) = registry();
    let cm = GroupKind::new("", "ConfigMap");
    let kinds = std::collections::BTreeSet::from([cm]);
    let marks_of = |w: &MemberWatches| {
        w.members_of(&id, &kinds)
            .and_then(|m| m.get(&a).map(|l| l.1))
    };
    let ignore = Marks {
        ssa_ignore: true,
        ..Marks::default()
    };
    let force = Marks {
        force_enabled: true,
        ..Marks::default()
    };
    // Our apply answered before the watch delivered that version: the body's controls.
    w.applying(&id, &a).record(Applied {
        marks: force,
        ..applied(1, "10")
    });
    assert_eq!(marks_of(&w), Some(force));
    // The event of that very version replaces them with the live object's.
    let tag = Tag {
        id: Some(id.clone()),
        marks: Marks {
            prune_disabled: true,
            ..force
        },
    };
    assert!(
        w.observe_seen(a.clone(), Some("10".into()), None, Some("10".into()), tag)
            .is_empty()
    );
    assert!(marks_of(&w).is_some_and(|m| m.prune_disabled && m.force_enabled));
    // Someone marks the live object: seen (and drift, so the set looks at once).
    let tag = Tag {
        id: Some(id.clone()),
        marks: ignore,
    };
    assert_eq!(
        w.observe_seen(a.clone(), Some("11".into()), None, Some("11".into()), tag)
            .len(),
        1
    );
    assert_eq!(marks_of(&w), Some(ignore));
    // A skipped member's last apply is forgotten: someone else's edits are not drift.
    w.skipped(&id, &a);
    assert!(w.applied_by(&id).is_empty());
    assert!(event(&w, &a, "12", &id).is_empty());
}

/// An object `name` of kind example.com/Widget in `ns`.
fn widget(ns: &str, name: &str) -> MemberRef {
    MemberRef {
        group: "example.com".into(),
        kind: "Widget".into(),
        namespace: Some(ns.into()),
        name: name.into(),
    }
}

fn assessed_by_watch(rv: &str, id: &str) -> super::labelled::Labelled {
    super::labelled::Labelled {
        rv: rv.into(),
        id: Some(id.into()),
        health: Some(Health::new(health::Status::Current, "ready")),
        shape: None,
        marks: Marks::default(),
    }
}

#[tokio::test]
async fn new_expressions_of_one_set_touch_no_other_set_of_the_kind() {
    let (w, _t, _, _) = registry();
    let (a, b) = (ParentRef::applyset("t", "a"), ParentRef::applyset("u", "b"));
    let (a1, a2, b1) = (widget("t", "a1"), widget("t", "a2"), widget("u", "b1"));
    let gk = GroupKind::new("example.com", "Widget");
    let listed = HashMap::from([
        (a1.clone(), assessed_by_watch("1", &a.id())),
        (a2.clone(), assessed_by_watch("2", &a.id())),
        (b1.clone(), assessed_by_watch("3", &b.id())),
    ]);
    w.replace_kind(&gk, listed);
    let targets = |members: Vec<MemberRef>| Targets {
        members,
        checks: Vec::new(),
    };
    w.track(&a.id(), &a, targets(vec![a1.clone(), a2.clone()]));
    w.track(&b.id(), &b, targets(vec![b1.clone()]));
    let before = w.exprs_stamp();
    let entry = crate::api::CustomHealthCheck {
        api_version: "example.com/v1".into(),
        kind: Some("Widget".into()),
        current: "has(status.ready)".into(),
        in_progress: None,
        failed: None,
    };
    let exprs = crate::health::HealthExprs::compile(&[entry]).expect("compiles");
    w.use_exprs(&a.id(), Arc::new(exprs));
    // a's objects are not assessed until read again (this registry reaches no server).
    let ha = w.health(&a.id()).expect("tracked");
    assert_eq!((ha.unobserved, ha.summary.current), (2, 0), "{ha:?}");
    // b keeps its verdict, and the kind stays listed.
    let hb = w.health(&b.id()).expect("tracked");
    assert_eq!((hb.unobserved, hb.summary.current), (0, 1), "{hb:?}");
    assert!(w.unwatched(&b.id()).is_empty());
    assert_eq!(
        w.state.lock().live.get(&b1),
        Some(&assessed_by_watch("3", &b.id()))
    );
    // A verdict the watch made before the change (an event in flight) is not kept for a;
    // one for b is.
    let a3 = widget("t", "a3");
    w.state
        .lock()
        .live
        .insert(a3.clone(), assessed_by_watch("4", &a.id()));
    let seen = vec![
        (a3.clone(), a.id(), "4".to_string()),
        (b1.clone(), b.id(), "3".to_string()),
    ];
    w.recorded_since(seen, before);
    assert_eq!(
        w.state.lock().live.get(&a3).map(|l| l.health.clone()),
        Some(None)
    );
    let hb = w.health(&b.id()).expect("tracked");
    assert_eq!((hb.unobserved, hb.summary.current), (0, 1), "{hb:?}");
    // Expressions unchanged: nothing is assessed again.
    let after = w.exprs_stamp();
    w.state
        .lock()
        .live
        .insert(a3.clone(), assessed_by_watch("5", &a.id()));
    w.recorded_since(vec![(a3.clone(), a.id(), "5".to_string())], after);
    assert!(
        w.state
            .lock()
            .live
            .get(&a3)
            .is_some_and(|l| l.health.is_some())
    );
    w.stop();
}

//! Member watches: the live resourceVersion of every object that carries a `part-of` label,
//! from one metadata-only watch per member kind, and what each parent last applied.
//!
//! Two uses:
//! - **No write when nothing changed.** A member whose rendered body is the one last applied
//!   successfully, and whose live resourceVersion is still the one that apply returned, is
//!   unchanged: it is not sent again. Only watched kinds whose initial list completed count.
//! - **Prompt drift correction.** A change or deletion of a member by anyone else (its
//!   resourceVersion moves away from the recorded one) triggers a reconcile of its parent at
//!   once, rather than at the next interval.
//!
//! State is compact: per member a body hash and a resourceVersion; per watched object a
//! resourceVersion.

use std::{
    collections::{HashMap, HashSet},
    hash::{DefaultHasher, Hash, Hasher},
    sync::{Arc, Mutex},
};

use futures::{StreamExt, channel::mpsc};
use kube::{
    Api, Client,
    core::{DynamicObject, PartialObjectMeta},
    runtime::{WatchStreamExt, reflector::ObjectRef, watcher},
};
use tokio::task::AbortHandle;

use crate::{
    api::{ApplySet, ClusterApplySet, MemberRef},
    applyset::{GroupKind, LABEL_PART_OF, ParentKind, ParentRef},
    discovery::Resolved,
};

/// The hash of a body to apply (stable within a process).
pub fn body_hash(body: &serde_json::Value) -> u64 {
    let mut h = DefaultHasher::new();
    // serde_json maps are ordered by key, so equal bodies serialize equally.
    body.to_string().hash(&mut h);
    h.finish()
}

#[derive(Default)]
struct State {
    /// Labelled objects, by kind and reference: resourceVersion and `part-of` value.
    live: HashMap<MemberRef, Labelled>,
    /// Kinds whose watch has completed its initial list (their `live` entries are current).
    synced: HashSet<GroupKind>,
    /// Per parent ID: member → our last successful apply of it.
    applied: HashMap<String, HashMap<MemberRef, Applied>>,
    /// Parent ID → parent.
    parents: HashMap<String, ParentRef>,
    /// Members with an apply in flight: how many, and the newest resourceVersion an event
    /// brought meanwhile.
    in_flight: HashMap<MemberRef, InFlight>,
}

/// A successful apply: the body's hash, and the object's resourceVersion and UID as answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    pub hash: u64,
    pub rv: String,
    pub uid: String,
}

struct Labelled {
    rv: String,
    id: Option<String>,
}

#[derive(Default)]
struct InFlight {
    count: usize,
    newest: Option<String>,
}

/// Member watches and applied-state records, shared by all reconciles.
pub struct MemberWatches {
    client: Client,
    state: Arc<Mutex<State>>,
    watches: Mutex<HashMap<GroupKind, AbortHandle>>,
    trigger_applysets: mpsc::UnboundedSender<ObjectRef<ApplySet>>,
    trigger_cluster: mpsc::UnboundedSender<ObjectRef<ClusterApplySet>>,
}

/// The receiving ends of the drift triggers, one per parent kind.
pub struct Triggers {
    pub applysets: mpsc::UnboundedReceiver<ObjectRef<ApplySet>>,
    pub cluster_applysets: mpsc::UnboundedReceiver<ObjectRef<ClusterApplySet>>,
}

impl MemberWatches {
    pub fn new(client: Client) -> (Arc<MemberWatches>, Triggers) {
        let (ta, ra) = mpsc::unbounded();
        let (tc, rc) = mpsc::unbounded();
        let w = MemberWatches {
            client,
            state: Arc::default(),
            watches: Mutex::default(),
            trigger_applysets: ta,
            trigger_cluster: tc,
        };
        (
            Arc::new(w),
            Triggers {
                applysets: ra,
                cluster_applysets: rc,
            },
        )
    }

    /// Starts a watch for every kind not watched yet (on the current runtime).
    pub fn ensure_watched(self: &Arc<Self>, kinds: &HashMap<GroupKind, Resolved>) {
        let Ok(mut watches) = self.watches.lock() else {
            return;
        };
        for (gk, resolved) in kinds {
            if watches.contains_key(gk) {
                continue;
            }
            let this = self.clone();
            let gk2 = gk.clone();
            let resolved = resolved.clone();
            let handle =
                tokio::spawn(async move { this.watch(gk2, resolved).await }).abort_handle();
            watches.insert(gk.clone(), handle);
        }
    }

    async fn watch(self: Arc<Self>, gk: GroupKind, resolved: Resolved) {
        let api: Api<PartialObjectMeta<DynamicObject>> =
            Api::all_with(self.client.clone(), &resolved.resource);
        let cfg = watcher::Config::default().labels(LABEL_PART_OF);
        let mut events = watcher(api, cfg).backoff(crate::watch::backoff()).boxed();
        let mut pending: HashMap<MemberRef, Labelled> = HashMap::new();
        while let Some(event) = events.next().await {
            let event = match event {
                Ok(e) => e,
                Err(e) => {
                    tracing::debug!(kind = %gk, error = %e, "member watch");
                    continue;
                }
            };
            match event {
                watcher::Event::Init => pending.clear(),
                watcher::Event::InitApply(o) => {
                    if let Some((r, rv, id)) = Self::key(&gk, resolved.namespaced, &o) {
                        pending.insert(r, Labelled { rv, id });
                    }
                }
                watcher::Event::InitDone => {
                    let drifted = self.replace_kind(&gk, std::mem::take(&mut pending));
                    self.trigger(drifted);
                }
                watcher::Event::Apply(o) => {
                    if let Some((r, rv, id)) = Self::key(&gk, resolved.namespaced, &o) {
                        let drifted = self.observe(r, Some(rv.clone()), Some(rv), id);
                        self.trigger(drifted);
                    }
                }
                watcher::Event::Delete(o) => {
                    if let Some((r, rv, id)) = Self::key(&gk, resolved.namespaced, &o) {
                        let drifted = self.observe(r, None, Some(rv), id);
                        self.trigger(drifted);
                    }
                }
            }
        }
    }

    fn key(
        gk: &GroupKind,
        namespaced: bool,
        o: &PartialObjectMeta<DynamicObject>,
    ) -> Option<(MemberRef, String, Option<String>)> {
        let r = MemberRef::of_live(gk, namespaced, &o.metadata)?;
        let id = o
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(LABEL_PART_OF))
            .cloned();
        Some((r, o.metadata.resource_version.clone()?, id))
    }

    /// Replaces what is known of one kind after a (re)list; returns parents whose members
    /// drifted meanwhile.
    fn replace_kind(&self, gk: &GroupKind, fresh: HashMap<MemberRef, Labelled>) -> Vec<ParentRef> {
        let Ok(mut s) = self.state.lock() else {
            return Vec::new();
        };
        s.live
            .retain(|r, _| !(r.group == gk.group && r.kind == gk.kind));
        s.live.extend(fresh);
        s.synced.insert(gk.clone());
        let mut drifted = Vec::new();
        for (id, members) in &s.applied {
            let moved = members.iter().any(|(r, a)| {
                r.group == gk.group
                    && r.kind == gk.kind
                    && s.live.get(r).map(|l| &l.rv) != Some(&a.rv)
            });
            if moved && let Some(p) = s.parents.get(id) {
                drifted.push(p.clone());
            }
        }
        drifted
    }

    /// Records one change; returns the parent to reconcile if this was drift.
    /// `rv` is the live resourceVersion (`None`: deleted); `event_rv` the event's own.
    fn observe(
        &self,
        r: MemberRef,
        rv: Option<String>,
        event_rv: Option<String>,
        id: Option<String>,
    ) -> Vec<ParentRef> {
        let Ok(mut s) = self.state.lock() else {
            return Vec::new();
        };
        // An event older than what our own apply returned (delivered after we recorded it)
        // is stale, not drift. resourceVersions are etcd revisions; one that does not parse
        // counts as drift (the safe side: one more reconcile).
        if let (Some(event), Some(known)) = (&rv, s.live.get(&r))
            && older(event, &known.rv)
        {
            return Vec::new();
        }
        match &rv {
            Some(v) => s.live.insert(
                r.clone(),
                Labelled {
                    rv: v.clone(),
                    id: id.clone(),
                },
            ),
            None => s.live.remove(&r),
        };
        // While we apply the member, an event may be our own write arriving before the
        // apply's answer: the apply decides when it ends (see [`Applying`]).
        if let Some(f) = s.in_flight.get_mut(&r) {
            if let Some(v) = event_rv
                && f.newest.as_ref().is_none_or(|n| older(n, &v))
            {
                f.newest = Some(v);
            }
            return Vec::new();
        }
        // The parent that applied it (by the label, or, for a deletion that lost it, by
        // whoever recorded the member).
        let owners: Vec<String> = match id {
            Some(id) => vec![id],
            None => s
                .applied
                .iter()
                .filter(|(_, m)| m.contains_key(&r))
                .map(|(id, _)| id.clone())
                .collect(),
        };
        let mut out = Vec::new();
        for id in owners {
            let recorded = s
                .applied
                .get(&id)
                .and_then(|m| m.get(&r))
                .map(|a| a.rv.clone());
            if let Some(recorded) = recorded
                && rv.as_ref() != Some(&recorded)
                && let Some(p) = s.parents.get(&id)
            {
                out.push(p.clone());
            }
        }
        out
    }

    fn trigger(&self, parents: Vec<ParentRef>) {
        for p in parents {
            tracing::debug!(parent = %p, "member drift");
            match (p.kind, &p.namespace) {
                (ParentKind::ApplySet, Some(ns)) => {
                    let _ = self
                        .trigger_applysets
                        .unbounded_send(ObjectRef::new(&p.name).within(ns));
                }
                (ParentKind::ClusterApplySet, _) => {
                    let _ = self.trigger_cluster.unbounded_send(ObjectRef::new(&p.name));
                }
                _ => {}
            }
        }
    }

    /// Whether `member` of parent `id`, to be applied with a body of hash `hash`, is
    /// unchanged since our last successful apply (and nobody changed it since): its UID if
    /// so.
    pub fn unchanged(&self, id: &str, member: &MemberRef, hash: u64) -> Option<String> {
        let s = self.state.lock().ok()?;
        let gk = GroupKind::new(member.group.clone(), member.kind.clone());
        if !s.synced.contains(&gk) {
            return None;
        }
        let a = s.applied.get(id).and_then(|m| m.get(member))?;
        (a.hash == hash && s.live.get(member).map(|l| &l.rv) == Some(&a.rv)).then(|| a.uid.clone())
    }

    /// The live objects labelled `part-of=<id>` of `kinds`, as the watches see them
    /// (reference → resourceVersion), if every one of those kinds is watched and its initial
    /// list is done; `None` otherwise. Eventually consistent: an object labelled a moment ago
    /// may be missing, which makes a prune decision later, never a wrong one.
    pub fn members_of(
        &self,
        id: &str,
        kinds: &std::collections::BTreeSet<GroupKind>,
    ) -> Option<HashMap<MemberRef, String>> {
        let s = self.state.lock().ok()?;
        if !kinds.iter().all(|gk| s.synced.contains(gk)) {
            return None;
        }
        Some(
            s.live
                .iter()
                .filter(|(r, l)| {
                    l.id.as_deref() == Some(id)
                        && kinds
                            .iter()
                            .any(|gk| gk.group == r.group && gk.kind == r.kind)
                })
                .map(|(r, l)| (r.clone(), l.rv.clone()))
                .collect(),
        )
    }

    /// The members parent `id` applied successfully (in this process), which are therefore
    /// its own.
    pub fn applied_by(&self, id: &str) -> HashSet<MemberRef> {
        let Ok(s) = self.state.lock() else {
            return HashSet::new();
        };
        s.applied
            .get(id)
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Marks an apply of `member` by parent `id` as in flight until the returned guard is
    /// recorded or dropped. Events of the member meanwhile do not count as drift by
    /// themselves: the watch can deliver our own write before the apply's answer.
    pub fn applying<'a>(&'a self, id: &str, member: &MemberRef) -> Applying<'a> {
        if let Ok(mut s) = self.state.lock() {
            s.in_flight.entry(member.clone()).or_default().count += 1;
        }
        Applying {
            watches: self,
            id: id.to_string(),
            member: member.clone(),
            recorded: false,
        }
    }

    /// Ends an apply in flight; `applied` is what a successful one answered. Returns the
    /// parent to reconcile if an event newer than the answer arrived meanwhile (somebody
    /// changed the member after us).
    fn finish(&self, id: &str, member: &MemberRef, applied: Option<Applied>) -> Vec<ParentRef> {
        let Ok(mut s) = self.state.lock() else {
            return Vec::new();
        };
        let newest = match s.in_flight.get_mut(member) {
            Some(f) if f.count > 1 => {
                f.count -= 1;
                f.newest.clone()
            }
            Some(_) => s.in_flight.remove(member).and_then(|f| f.newest),
            None => None,
        };
        let Some(applied) = applied else {
            if let Some(a) = s.applied.get_mut(id) {
                a.remove(member);
            }
            return Vec::new();
        };
        let drifted = newest.as_ref().is_some_and(|n| older(&applied.rv, n));
        if !drifted {
            // The answer is the live version as of now; a later change by anyone arrives
            // after it, as the events of one object are ordered.
            s.live.insert(
                member.clone(),
                Labelled {
                    rv: applied.rv.clone(),
                    id: Some(id.to_string()),
                },
            );
        }
        s.applied
            .entry(id.to_string())
            .or_default()
            .insert(member.clone(), applied);
        match s.parents.get(id) {
            Some(p) if drifted => vec![p.clone()],
            _ => Vec::new(),
        }
    }

    /// Registers parent `parent` of ID `id` and drops records of members it no longer
    /// declares.
    pub fn register(&self, id: &str, parent: &ParentRef, declared: &HashSet<MemberRef>) {
        if let Ok(mut s) = self.state.lock() {
            s.parents.insert(id.to_string(), parent.clone());
            if let Some(m) = s.applied.get_mut(id) {
                m.retain(|r, _| declared.contains(r));
            }
        }
    }

    /// Forgets a parent (deleted).
    pub fn forget(&self, id: &str) {
        if let Ok(mut s) = self.state.lock() {
            s.applied.remove(id);
            s.parents.remove(id);
        }
    }
}

/// An apply in flight (from [`MemberWatches::applying`]). [`Applying::record`] a success;
/// dropping it otherwise (a failure, or a cancelled reconcile) forgets what the parent last
/// applied of the member, so it is sent again next time.
pub struct Applying<'a> {
    watches: &'a MemberWatches,
    id: String,
    member: MemberRef,
    recorded: bool,
}

impl Applying<'_> {
    /// Records a successful apply.
    pub fn record(mut self, applied: Applied) {
        self.recorded = true;
        let drifted = self.watches.finish(&self.id, &self.member, Some(applied));
        self.watches.trigger(drifted);
    }
}

impl Drop for Applying<'_> {
    fn drop(&mut self) {
        if !self.recorded {
            self.watches.finish(&self.id, &self.member, None);
        }
    }
}

impl MemberWatches {
    /// Stops every watch (their tasks hold this registry, so dropping it would not).
    pub fn stop(&self) {
        if let Ok(mut w) = self.watches.lock() {
            for (_, h) in w.drain() {
                h.abort();
            }
        }
    }
}

/// Whether resourceVersion `a` is older than `b` (both etcd revisions).
fn older(a: &str, b: &str) -> bool {
    match (a.parse::<u64>(), b.parse::<u64>()) {
        (Ok(a), Ok(b)) => a < b,
        _ => false,
    }
}

impl MemberWatches {
    /// Reconciles `parents` (of either kind) through the same channels as drift: the
    /// dependents of a set whose readiness changed, the dependencies a deleted set held up.
    pub fn trigger_parents(&self, parents: Vec<ParentRef>) {
        self.trigger(parents);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn applied(hash: u64, rv: &str) -> Applied {
        Applied {
            hash,
            rv: rv.into(),
            uid: "uid".into(),
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
                (a.clone(), "10".to_string()),
                (member("stray"), "11".to_string())
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
}

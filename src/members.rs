//! Member watches: the live resourceVersion of every object that carries a `part-of` label,
//! from one watch per member kind (metadata-only for kinds without status, whole objects for
//! kinds with a status to assess), and what each parent last applied.
//!
//! Three uses:
//! - **No write when nothing changed.** A member whose rendered body is the one last applied
//!   successfully, and whose live resourceVersion is still the one that apply returned, is
//!   unchanged: it is not sent again. Only watched kinds whose initial list completed count.
//! - **Prompt drift correction.** A change or deletion of a member by anyone else (its
//!   resourceVersion moves away from the recorded one) triggers a reconcile of its parent at
//!   once, rather than at the next interval.
//! - **Health.** Kinds with a status to assess (every kind but the built-in ones without
//!   status, see [`health::needs_object`]) are watched whole: each event's object is assessed
//!   (kstatus rules) and only the verdict is kept. Sets that wait or have health checks are
//!   tracked: when the health of one of their objects changes, they are marked for the
//!   health reporter (`controller::healthy`). Objects named by `spec.healthChecks` get a watch
//!   of their own (one object each).
//!
//! State is compact: per member a body hash and a resourceVersion; per watched object a
//! resourceVersion (and, for kinds with status, its health: a status and a short message).

use std::{
    collections::{HashMap, HashSet},
    hash::{DefaultHasher, Hash, Hasher},
    sync::{Arc, Mutex},
};

use futures::{StreamExt, channel::mpsc, stream::BoxStream};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta};
use kube::{
    Api, Client,
    core::{DynamicObject, PartialObjectMeta},
    runtime::{WatchStreamExt, reflector::ObjectRef, watcher},
};
use tokio::{sync::Notify, task::AbortHandle};

use crate::{
    api::{ApplySet, ClusterApplySet, MemberRef},
    applyset::{GroupKind, LABEL_PART_OF, ParentKind, ParentRef},
    discovery::Resolved,
    health::{self, Health},
    kind_refs::{self, KindRefs},
    terminating::Terminating,
};

mod labelled;

use labelled::{Labelled, LabelledIndex};

/// The hash of a body to apply (stable within a process).
pub fn body_hash(body: &serde_json::Value) -> u64 {
    let mut h = DefaultHasher::new();
    // serde_json maps are ordered by key, so equal bodies serialize equally.
    body.to_string().hash(&mut h);
    h.finish()
}

#[derive(Default)]
struct State {
    /// Labelled objects, by reference and by `part-of` value: resourceVersion and health.
    live: LabelledIndex,
    /// Kinds whose watch has completed its initial list (their `live` entries are current).
    synced: HashSet<GroupKind>,
    /// Per parent ID: member → our last successful apply of it.
    applied: HashMap<String, HashMap<MemberRef, Applied>>,
    /// Parent ID → parent.
    parents: HashMap<String, ParentRef>,
    /// Members with an apply in flight: how many, and the newest resourceVersion an event
    /// brought meanwhile.
    in_flight: HashMap<MemberRef, InFlight>,
    /// Sets whose health is kept (spec.wait or spec.healthChecks), by parent ID.
    tracked: HashMap<String, Tracked>,
    /// Objects of health checks: their health (`None` until their watch has listed), and the
    /// sets that check them.
    checked: HashMap<MemberRef, Checked>,
    /// Tracked sets whose health may have changed since the health reporter last looked.
    dirty: HashSet<String>,
}

/// What the health of a tracked set is made of.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Targets {
    /// Members to assess (spec.wait), with whether their kind is assessed from the whole
    /// object ([`health::needs_object`]).
    pub members: Vec<MemberRef>,
    /// Objects of spec.healthChecks, with how to watch them.
    pub checks: Vec<CheckTarget>,
}

/// An object of spec.healthChecks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckTarget {
    pub reference: MemberRef,
    pub resource: kube::discovery::ApiResource,
}

struct Tracked {
    parent: ParentRef,
    targets: Targets,
    /// `targets.members`, to look up.
    members: HashSet<MemberRef>,
    /// The health of members of kinds the operator cannot watch (their watch has not
    /// listed), as read by the set's last reconcile.
    fetched: HashMap<MemberRef, Health>,
}

/// A tracked set's health as the watches see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetHealth {
    pub summary: health::Summary,
    /// Objects not observed yet (a kind whose watch has not listed, a version just applied
    /// that the watch has not delivered, a checked object not listed yet): counted in
    /// progress.
    pub unobserved: usize,
}

#[derive(Default)]
struct Checked {
    health: Option<Health>,
    users: HashSet<String>,
    /// How to watch it (from the last set that checks it).
    target: Option<CheckTarget>,
    /// Its watch; `None` while it waits for room (see [`MemberWatches::start_waiting_checks`]).
    watch: Option<AbortHandle>,
}

/// A successful apply: the body's hash, and the object's resourceVersion, UID and
/// [`shape`] as answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    pub hash: u64,
    pub rv: String,
    pub uid: String,
    pub shape: Option<u64>,
}

/// The hash of everything of an object but its status, its resourceVersion, and the
/// managedFields entries of its status subresource (and the times of the others): two
/// versions of an object with the same shape differ only in status (what its controller
/// writes), which is not drift. A change of who owns which field of the object itself
/// (another manager taking over ours, even with equal values) changes the shape. Stable
/// within a process.
pub fn shape(object: &DynamicObject) -> u64 {
    let mut h = DefaultHasher::new();
    let mut meta = object.metadata.clone();
    meta.resource_version = None;
    meta.managed_fields = meta.managed_fields.map(|entries| {
        entries
            .into_iter()
            .filter(|e| e.subresource.as_deref().unwrap_or_default() != "status")
            .map(|e| ManagedFieldsEntry { time: None, ..e })
            .collect()
    });
    serde_json::to_string(&meta)
        .unwrap_or_default()
        .hash(&mut h);
    if let Some(fields) = object.data.as_object() {
        for (k, v) in fields.iter().filter(|(k, _)| k.as_str() != "status") {
            k.hash(&mut h);
            v.to_string().hash(&mut h);
        }
    }
    h.finish()
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
    watches: Mutex<Watches>,
    /// Called when a kind's LIST answers 404 (to drop it from discovery's cache).
    kind_gone: Mutex<Option<KindGone>>,
    trigger_applysets: mpsc::UnboundedSender<ObjectRef<ApplySet>>,
    trigger_cluster: mpsc::UnboundedSender<ObjectRef<ClusterApplySet>>,
    /// Woken when a tracked set is marked dirty.
    health_changed: Notify,
    /// Most checked objects watched at once.
    check_cap: std::sync::atomic::AtomicUsize,
    /// Moves on whenever a tracked set's health may have changed (see [`Self::changes`]).
    changes: tokio::sync::watch::Sender<u64>,
    /// Namespaces being terminated: what is deleted there is not drift.
    terminating: Arc<Terminating>,
}

/// The running member watches and the sets that hold their kinds: a kind is watched once an
/// apply of it was accepted for some set ([`MemberWatches::accepted`]), and its watch stops
/// when no set has declared it for [`kind_refs::GRACE`].
#[derive(Default)]
struct Watches {
    running: HashMap<GroupKind, AbortHandle>,
    refs: KindRefs,
}

/// A hook run when a watched kind is not served any more.
pub type KindGone = Arc<dyn Fn(&GroupKind) + Send + Sync>;

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
            terminating: Arc::new(Terminating::new(client.clone())),
            client,
            state: Arc::default(),
            watches: Mutex::default(),
            kind_gone: Mutex::default(),
            trigger_applysets: ta,
            trigger_cluster: tc,
            health_changed: Notify::new(),
            check_cap: std::sync::atomic::AtomicUsize::new(MAX_CHECKED_OBJECTS),
            changes: tokio::sync::watch::Sender::new(0),
        };
        (
            Arc::new(w),
            Triggers {
                applysets: ra,
                cluster_applysets: rc,
            },
        )
    }

    /// The namespaces known to be terminating (shared with the reconciles, which learn them).
    pub fn terminating(&self) -> Arc<Terminating> {
        self.terminating.clone()
    }

    /// Set `id` had applies of these kinds accepted by the API server (the kind is served,
    /// and someone may write it): it holds them, and each kind not watched yet gets its watch
    /// (on the current runtime).
    pub fn accepted<'a>(
        self: &Arc<Self>,
        id: &str,
        kinds: impl IntoIterator<Item = (&'a GroupKind, &'a Resolved)>,
    ) {
        let Ok(mut w) = self.watches.lock() else {
            return;
        };
        for (gk, resolved) in kinds {
            w.refs.hold(id, gk);
            if w.running.contains_key(gk) {
                continue;
            }
            let this = self.clone();
            let (gk2, resolved) = (gk.clone(), resolved.clone());
            let handle =
                tokio::spawn(async move { this.watch(gk2, resolved).await }).abort_handle();
            w.running.insert(gk.clone(), handle);
        }
    }

    /// How many member kinds are watched now (`applyset_member_watches`).
    pub fn watch_count(&self) -> usize {
        self.watches.lock().map(|w| w.running.len()).unwrap_or(0)
    }

    /// Runs `hook` whenever a watched kind's LIST answers 404 (the kind is not served).
    pub fn on_kind_gone(&self, hook: KindGone) {
        if let Ok(mut g) = self.kind_gone.lock() {
            *g = Some(hook);
        }
    }

    /// Stops the watches of `released` kinds once they have stayed unheld for the grace
    /// period (checked again then: a kind held again meanwhile keeps its watch).
    fn release(self: &Arc<Self>, released: Vec<GroupKind>) {
        if released.is_empty() {
            return;
        }
        let this = Arc::downgrade(self);
        tokio::spawn(async move {
            tokio::time::sleep(kind_refs::GRACE).await;
            if let Some(this) = this.upgrade() {
                for gk in released {
                    this.stop_if_expired(&gk);
                }
            }
        });
    }

    fn stop_if_expired(&self, gk: &GroupKind) {
        let Ok(mut w) = self.watches.lock() else {
            return;
        };
        if !w
            .refs
            .expired(gk, std::time::Instant::now(), kind_refs::GRACE)
        {
            return;
        }
        w.refs.stopped(gk);
        if let Some(h) = w.running.remove(gk) {
            h.abort();
            tracing::debug!(kind = %gk, "member watch stopped: no set declares the kind");
        }
        drop(w);
        self.unsync(gk);
    }

    /// A kind whose LIST answered 404: its watch ends (it is started again by the next
    /// accepted apply of the kind) and discovery forgets what it knew.
    fn gone(&self, gk: &GroupKind) {
        if let Ok(mut w) = self.watches.lock() {
            w.running.remove(gk);
        }
        self.unsync(gk);
        tracing::info!(kind = %gk, "member watch stopped: the kind is not served (404)");
        let hook = self.kind_gone.lock().ok().and_then(|g| g.clone());
        if let Some(hook) = hook {
            hook(gk);
        }
    }

    /// Forgets what the watch of `gk` listed: its objects are looked up otherwise (LISTs,
    /// GETs) until a watch of the kind lists again.
    fn unsync(&self, gk: &GroupKind) {
        if let Ok(mut s) = self.state.lock() {
            s.synced.remove(gk);
            s.live.remove_kind(gk);
        }
    }

    /// The events of every labelled object of a kind: metadata only for kinds without status,
    /// whole objects (assessed, then dropped) for the others.
    fn seen(&self, gk: &GroupKind, resolved: &Resolved) -> BoxStream<'static, Seen> {
        let cfg = watcher::Config::default().labels(LABEL_PART_OF);
        if health::needs_object(&gk.group, &gk.kind) {
            let gk = gk.clone();
            let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &resolved.resource);
            // Whole objects (a CRD can be a megabyte): listed in small pages.
            watcher(api, cfg.page_size(WHOLE_PAGE))
                .backoff(crate::watch::backoff())
                .map(move |e| {
                    e.map(|e| {
                        map_event(e, |o| {
                            let h = health_of(&o, &gk.group, &gk.kind);
                            let shape = shape(&o);
                            (o.metadata, Some((h, shape)))
                        })
                    })
                })
                .boxed()
        } else {
            let api: Api<PartialObjectMeta<DynamicObject>> =
                Api::all_with(self.client.clone(), &resolved.resource);
            watcher(api, cfg)
                .backoff(crate::watch::backoff())
                .map(|e| e.map(|e| map_event(e, |o| (o.metadata, None))))
                .boxed()
        }
    }

    async fn watch(self: Arc<Self>, gk: GroupKind, resolved: Resolved) {
        let mut events = self.seen(&gk, &resolved);
        let mut pending: HashMap<MemberRef, Labelled> = HashMap::new();
        while let Some(event) = events.next().await {
            let event = match event {
                Ok(e) => e,
                Err(e) if not_served(&e) => return self.gone(&gk),
                Err(e) => {
                    tracing::debug!(kind = %gk, error = %e, "member watch");
                    continue;
                }
            };
            match event {
                watcher::Event::Init => pending.clear(),
                watcher::Event::InitApply((meta, whole)) => {
                    if let Some((r, rv, id)) = Self::key(&gk, resolved.namespaced, &meta) {
                        let (health, shape) = whole.unzip();
                        pending.insert(
                            r,
                            Labelled {
                                rv,
                                id,
                                health,
                                shape,
                            },
                        );
                    }
                }
                watcher::Event::InitDone => {
                    let drifted = self.replace_kind(&gk, std::mem::take(&mut pending));
                    self.trigger(drifted);
                }
                watcher::Event::Apply((meta, whole)) => {
                    if let Some((r, rv, id)) = Self::key(&gk, resolved.namespaced, &meta) {
                        let drifted = self.observe_seen(r, Some(rv.clone()), whole, Some(rv), id);
                        self.trigger(drifted);
                    }
                }
                watcher::Event::Delete((meta, _)) => {
                    if let Some((r, rv, id)) = Self::key(&gk, resolved.namespaced, &meta) {
                        // The namespace controller deleting a terminating namespace's
                        // content: recorded, but the sets living there are not reconciled
                        // (their own deletion is coming); sets elsewhere are, to report it.
                        let terminating = r
                            .namespace
                            .clone()
                            .filter(|ns| self.terminating.contains(ns));
                        let mut drifted = self.observe_seen(r, None, None, Some(rv), id);
                        if let Some(ns) = terminating {
                            drifted.retain(|p| p.namespace.as_ref() != Some(&ns));
                        }
                        self.trigger(drifted);
                    }
                }
            }
        }
    }

    fn key(
        gk: &GroupKind,
        namespaced: bool,
        meta: &ObjectMeta,
    ) -> Option<(MemberRef, String, Option<String>)> {
        let r = MemberRef::of_live(gk, namespaced, meta)?;
        let id = meta
            .labels
            .as_ref()
            .and_then(|l| l.get(LABEL_PART_OF))
            .cloned();
        Some((r, meta.resource_version.clone()?, id))
    }

    /// Replaces what is known of one kind after a (re)list; returns parents whose members
    /// drifted meanwhile.
    fn replace_kind(&self, gk: &GroupKind, fresh: HashMap<MemberRef, Labelled>) -> Vec<ParentRef> {
        let Ok(mut s) = self.state.lock() else {
            return Vec::new();
        };
        s.live.remove_kind(gk);
        for (r, l) in fresh {
            s.live.insert(r, l);
        }
        s.synced.insert(gk.clone());
        let of_kind: Vec<String> = s
            .tracked
            .iter()
            .filter(|(_, t)| {
                t.targets
                    .members
                    .iter()
                    .any(|r| r.group == gk.group && r.kind == gk.kind)
            })
            .map(|(id, _)| id.clone())
            .collect();
        self.mark_dirty(&mut s, of_kind);
        let mut drifted = Vec::new();
        let State {
            applied,
            live,
            parents,
            ..
        } = &mut *s;
        for (id, members) in applied.iter_mut() {
            let mut moved = false;
            for (r, a) in members.iter_mut() {
                if r.group != gk.group || r.kind != gk.kind {
                    continue;
                }
                match live.get(r) {
                    Some(l) if l.rv == a.rv => {}
                    Some(l) if only_status_moved(a, l.shape) => a.rv = l.rv.clone(),
                    _ => moved = true,
                }
            }
            if moved && let Some(p) = parents.get(id) {
                drifted.push(p.clone());
            }
        }
        drifted
    }

    /// Records one change without health (tests of kinds without status).
    #[cfg(test)]
    fn observe(
        &self,
        r: MemberRef,
        rv: Option<String>,
        event_rv: Option<String>,
        id: Option<String>,
    ) -> Vec<ParentRef> {
        self.observe_seen(r, rv, None, event_rv, id)
    }

    /// Records one change; returns the parent to reconcile if this was drift (a change of
    /// anything but the status: a member's controller writing its status is not drift).
    /// `rv` is the live resourceVersion (`None`: deleted), `whole` the object's health and
    /// [`shape`] at `rv` (for kinds watched whole); `event_rv` the event's own.
    fn observe_seen(
        &self,
        r: MemberRef,
        rv: Option<String>,
        whole: Option<(Health, u64)>,
        event_rv: Option<String>,
        id: Option<String>,
    ) -> Vec<ParentRef> {
        let (health, shape) = whole.unzip();
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
        let before = s.live.get(&r).map(|l| (l.id.clone(), l.health.clone()));
        match &rv {
            Some(v) => s.live.insert(
                r.clone(),
                Labelled {
                    rv: v.clone(),
                    id: id.clone(),
                    health: health.clone(),
                    shape,
                },
            ),
            None => s.live.remove(&r),
        };
        let after = rv.as_ref().map(|_| (id.clone(), health));
        if before != after {
            let tracking =
                self.tracking(&s, &r, before.and_then(|b| b.0).as_deref(), id.as_deref());
            self.mark_dirty(&mut s, tracking);
        }
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
            let Some(a) = s.applied.get_mut(&id).and_then(|m| m.get_mut(&r)) else {
                continue;
            };
            match &rv {
                Some(v) if *v == a.rv => continue,
                // Only the status moved: what we applied is still as applied.
                Some(v) if only_status_moved(a, shape) => {
                    a.rv = v.clone();
                    continue;
                }
                _ => {}
            }
            if let Some(p) = s.parents.get(&id) {
                out.push(p.clone());
            }
        }
        out
    }

    /// Reconciles the parents whose members drifted.
    fn trigger(&self, parents: Vec<ParentRef>) {
        for p in &parents {
            tracing::debug!(parent = %p, "member drift");
        }
        self.send(parents);
    }

    /// Queues a reconcile of each parent.
    fn send(&self, parents: Vec<ParentRef>) {
        for p in parents {
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
                .of_id(id)
                .filter(|(r, _)| {
                    kinds
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
            // after it, as the events of one object are ordered. Its health is known only if
            // the watch already delivered that very version.
            let seen = s.live.get(member).filter(|l| l.rv == applied.rv);
            let health = seen.and_then(|l| l.health.clone());
            let changed = s.live.get(member).map(|l| &l.health) != Some(&health);
            s.live.insert(
                member.clone(),
                Labelled {
                    rv: applied.rv.clone(),
                    id: Some(id.to_string()),
                    health,
                    shape: applied.shape,
                },
            );
            if changed {
                let tracking = self.tracking(&s, member, Some(id), None);
                self.mark_dirty(&mut s, tracking);
            }
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
    /// declares; it no longer holds the kinds it does not declare.
    pub fn register(self: &Arc<Self>, id: &str, parent: &ParentRef, declared: &HashSet<MemberRef>) {
        if let Ok(mut s) = self.state.lock() {
            s.parents.insert(id.to_string(), parent.clone());
            if let Some(m) = s.applied.get_mut(id) {
                m.retain(|r, _| declared.contains(r));
            }
        }
        let kinds: HashSet<GroupKind> = declared
            .iter()
            .map(|r| GroupKind::new(r.group.clone(), r.kind.clone()))
            .collect();
        let released = self
            .watches
            .lock()
            .map(|mut w| w.refs.retain(id, &kinds, std::time::Instant::now()))
            .unwrap_or_default();
        self.release(released);
    }

    /// How many sets each per-set map of the registry holds (`applyset_tracked_sets`).
    pub fn tracked_sets(&self) -> [(&'static str, usize); 4] {
        let (applied, parents, tracked) = self.state.lock().map_or((0, 0, 0), |s| {
            (s.applied.len(), s.parents.len(), s.tracked.len())
        });
        let kinds = self.watches.lock().map_or(0, |w| w.refs.sets());
        [
            ("member_applies", applied),
            ("member_parents", parents),
            ("health_tracked", tracked),
            ("kind_refs", kinds),
        ]
    }

    /// Forgets a parent (deleted), its health and the kinds it held included.
    pub fn forget(self: &Arc<Self>, id: &str) {
        if let Ok(mut s) = self.state.lock() {
            s.applied.remove(id);
            s.parents.remove(id);
        }
        let released = self
            .watches
            .lock()
            .map(|mut w| w.refs.forget(id, std::time::Instant::now()))
            .unwrap_or_default();
        self.release(released);
        self.untrack(id);
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
            for (_, h) in w.running.drain() {
                h.abort();
            }
        }
        if let Ok(mut s) = self.state.lock() {
            for c in s.checked.values_mut() {
                if let Some(h) = c.watch.take() {
                    h.abort();
                }
            }
        }
    }
}

/// Health: the sets whose health is kept, the watches of their health checks, and their
/// summaries.
impl MemberWatches {
    /// Keeps the health of parent `id` (`parent`) made of `targets`: the members to assess
    /// (watched like every member) and the objects of its health checks (each watched by
    /// itself, shared by the sets that check it). Marks the set for the health reporter.
    pub fn track(self: &Arc<Self>, id: &str, parent: &ParentRef, targets: Targets) {
        let Ok(mut s) = self.state.lock() else {
            return;
        };
        let (previous, mut fetched) = s
            .tracked
            .remove(id)
            .map(|t| (t.targets.checks, t.fetched))
            .unwrap_or_default();
        for c in &previous {
            if !targets.checks.iter().any(|n| n.reference == c.reference) {
                self.stop_checking(&mut s, id, &c.reference);
            }
        }
        for c in &targets.checks {
            let entry = s.checked.entry(c.reference.clone()).or_default();
            entry.users.insert(id.to_string());
            entry.target = Some(c.clone());
        }
        self.start_waiting_checks(&mut s);
        let members: HashSet<MemberRef> = targets.members.iter().cloned().collect();
        fetched.retain(|r, _| members.contains(r));
        s.tracked.insert(
            id.to_string(),
            Tracked {
                parent: parent.clone(),
                targets,
                members,
                fetched,
            },
        );
        self.mark_dirty(&mut s, vec![id.to_string()]);
    }

    /// Stops keeping the health of parent `id` (it no longer waits nor checks, or is gone);
    /// checks of other sets that waited for room get the watches it frees.
    pub fn untrack(self: &Arc<Self>, id: &str) {
        let Ok(mut s) = self.state.lock() else {
            return;
        };
        if let Some(t) = s.tracked.remove(id) {
            for c in &t.targets.checks {
                self.stop_checking(&mut s, id, &c.reference);
            }
            self.start_waiting_checks(&mut s);
        }
        s.dirty.remove(id);
    }

    /// Starts the watches of checked objects that have none, while there is room: at most
    /// [`Self::check_cap`] for the operator, and at most [`MAX_CHECK_WATCHES_PER_SET`] for
    /// the sets that check an object (one of them must have room). An object left waiting is
    /// `Unknown`, saying why, and is watched as soon as room frees (a set's checks untracked
    /// or changed). Marks the sets whose checks changed.
    fn start_waiting_checks(self: &Arc<Self>, s: &mut State) {
        let cap = self.check_cap();
        let mut running = s.checked.values().filter(|c| c.watch.is_some()).count();
        let mut per_set: HashMap<String, usize> = HashMap::new();
        for c in s.checked.values().filter(|c| c.watch.is_some()) {
            for u in &c.users {
                *per_set.entry(u.clone()).or_default() += 1;
            }
        }
        let mut waiting: Vec<MemberRef> = s
            .checked
            .iter()
            .filter(|(_, c)| c.watch.is_none())
            .map(|(r, _)| r.clone())
            .collect();
        waiting.sort_by_key(|r| r.to_string());
        let mut marked = Vec::new();
        for r in waiting {
            let Some(c) = s.checked.get_mut(&r) else {
                continue;
            };
            let Some(target) = c.target.clone() else {
                continue;
            };
            let set_room = c
                .users
                .iter()
                .any(|u| per_set.get(u).copied().unwrap_or(0) < MAX_CHECK_WATCHES_PER_SET);
            if running >= cap || !set_room {
                let h = Health::new(health::Status::Unknown, waiting_why(running >= cap, cap));
                if c.health.as_ref() != Some(&h) {
                    c.health = Some(h);
                    marked.extend(c.users.iter().cloned());
                }
                continue;
            }
            // Not known until its watch lists.
            c.health = None;
            let this = self.clone();
            let handle = tokio::spawn(async move { this.watch_check(target).await }).abort_handle();
            c.watch = Some(handle);
            running += 1;
            for u in &c.users {
                *per_set.entry(u.clone()).or_default() += 1;
            }
            marked.extend(c.users.iter().cloned());
        }
        self.mark_dirty(s, marked);
    }

    /// Most checked objects watched at once ([`MAX_CHECKED_OBJECTS`] unless set otherwise).
    fn check_cap(&self) -> usize {
        self.check_cap.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Sets the most checked objects watched at once.
    pub fn set_check_cap(&self, cap: usize) {
        self.check_cap
            .store(cap, std::sync::atomic::Ordering::Relaxed);
    }

    /// How many checked objects are watched now (`applyset_health_watches`).
    pub fn health_watch_count(&self) -> usize {
        self.state
            .lock()
            .map(|s| s.checked.values().filter(|c| c.watch.is_some()).count())
            .unwrap_or(0)
    }

    /// `id` no longer checks `r`: its watch stops when no set checks it any more.
    fn stop_checking(&self, s: &mut State, id: &str, r: &MemberRef) {
        let unused = match s.checked.get_mut(r) {
            Some(c) => {
                c.users.remove(id);
                c.users.is_empty()
            }
            None => false,
        };
        if unused
            && let Some(c) = s.checked.remove(r)
            && let Some(h) = c.watch
        {
            h.abort();
        }
    }

    /// Watches one object of a health check (by name) and keeps its health.
    async fn watch_check(self: Arc<Self>, target: CheckTarget) {
        let r = target.reference;
        let api: Api<DynamicObject> =
            crate::discovery::api_in(&self.client, r.namespace.as_deref(), &target.resource);
        let cfg = watcher::Config::default().fields(&format!("metadata.name={}", r.name));
        let mut events = watcher(api, cfg).backoff(crate::watch::backoff()).boxed();
        let assess = |o: &DynamicObject| health_of(o, &r.group, &r.kind);
        let mut pending = None;
        while let Some(event) = events.next().await {
            match event {
                Err(e) => {
                    tracing::debug!(object = %r, error = %e, "health check watch");
                    // Never listed (forbidden, not served, ...): say so rather than wait.
                    if pending.is_none() && !self.has_checked(&r) {
                        let why = format!("cannot be watched: {e}");
                        self.checked_is(&r, Health::new(health::Status::Unknown, why));
                    }
                }
                Ok(watcher::Event::Init) => pending = None,
                Ok(watcher::Event::InitApply(o)) => pending = Some(assess(&o)),
                Ok(watcher::Event::InitDone) => {
                    let h = pending.take().unwrap_or_else(Health::not_found);
                    self.checked_is(&r, h);
                }
                Ok(watcher::Event::Apply(o)) => self.checked_is(&r, assess(&o)),
                Ok(watcher::Event::Delete(_)) => self.checked_is(&r, Health::not_found()),
            }
        }
    }

    /// Whether the health of checked object `r` is known from its watch.
    fn has_checked(&self, r: &MemberRef) -> bool {
        self.state.lock().is_ok_and(|s| {
            s.checked.get(r).is_some_and(|c| {
                c.health
                    .as_ref()
                    .is_some_and(|h| h.status != health::Status::Unknown)
            })
        })
    }

    /// Records the health of a checked object; marks the sets that check it when it changed.
    fn checked_is(&self, r: &MemberRef, h: Health) {
        let Ok(mut s) = self.state.lock() else {
            return;
        };
        let Some(c) = s.checked.get_mut(r) else {
            return;
        };
        if c.health.as_ref() == Some(&h) {
            return;
        }
        c.health = Some(h);
        let users = c.users.iter().cloned().collect();
        self.mark_dirty(&mut s, users);
    }

    /// The tracked sets, among `a` and `b`, that assess member `r`.
    fn tracking(&self, s: &State, r: &MemberRef, a: Option<&str>, b: Option<&str>) -> Vec<String> {
        [a, b]
            .into_iter()
            .flatten()
            .filter(|id| s.tracked.get(*id).is_some_and(|t| t.members.contains(r)))
            .map(str::to_string)
            .collect()
    }

    /// Marks sets for the health reporter (and wakes it).
    fn mark_dirty(&self, s: &mut State, ids: Vec<String>) {
        if ids.is_empty() {
            return;
        }
        let mut any = false;
        for id in ids {
            any |= s.dirty.insert(id);
        }
        if any {
            self.health_changed.notify_one();
        }
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Marks tracked set `id` for the health reporter (to look at it again).
    pub fn touch(&self, id: &str) {
        if let Ok(mut s) = self.state.lock()
            && s.tracked.contains_key(id)
        {
            self.mark_dirty(&mut s, vec![id.to_string()]);
        }
    }

    /// A receiver that sees a change whenever a tracked set's health may have changed (for a
    /// reconcile waiting a moment for its objects to be observed).
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// The members of tracked set `id` whose kind the watches have not listed (the operator
    /// may not be allowed to watch it cluster-wide).
    pub fn unwatched(&self, id: &str) -> Vec<MemberRef> {
        let Ok(s) = self.state.lock() else {
            return Vec::new();
        };
        let Some(t) = s.tracked.get(id) else {
            return Vec::new();
        };
        t.targets
            .members
            .iter()
            .filter(|r| {
                !s.synced
                    .contains(&GroupKind::new(r.group.clone(), r.kind.clone()))
            })
            .cloned()
            .collect()
    }

    /// Records the health of members of set `id` read by other means than the watches (see
    /// [`Self::unwatched`]); marks the set.
    pub fn fetched(&self, id: &str, healths: Vec<(MemberRef, Health)>) {
        let Ok(mut s) = self.state.lock() else {
            return;
        };
        let Some(t) = s.tracked.get_mut(id) else {
            return;
        };
        t.fetched.extend(healths);
        self.mark_dirty(&mut s, vec![id.to_string()]);
    }

    /// Resolves when a tracked set has been marked since the last [`Self::take_dirty`].
    pub async fn health_changed(&self) {
        self.health_changed.notified().await;
    }

    /// The tracked sets marked since the last call, with their parents.
    pub fn take_dirty(&self) -> Vec<(String, ParentRef)> {
        let Ok(mut s) = self.state.lock() else {
            return Vec::new();
        };
        let dirty = std::mem::take(&mut s.dirty);
        dirty
            .into_iter()
            .filter_map(|id| {
                let parent = s.tracked.get(&id)?.parent.clone();
                Some((id, parent))
            })
            .collect()
    }

    /// The health of tracked set `id` as the watches see it now (`None`: not tracked): its
    /// members (an object not seen yet is in progress, one gone is not found) and its checked
    /// objects, with the first [`NOT_CURRENT_LISTED`] that are not current.
    pub fn health(&self, id: &str) -> Option<SetHealth> {
        let s = self.state.lock().ok()?;
        let t = s.tracked.get(id)?;
        let members = t
            .targets
            .members
            .iter()
            .map(|r| (r, member_health(&s, id, r, &t.fetched)));
        let checks = t.targets.checks.iter().map(|c| {
            let h = s.checked.get(&c.reference).and_then(|c| c.health.clone());
            (&c.reference, h)
        });
        let mut unobserved = 0;
        // Only the objects that are not current are named (the summary keeps a few of them).
        let named: Vec<(String, Health)> = members
            .chain(checks)
            .map(|(r, h)| {
                let h = h.unwrap_or_else(|| {
                    unobserved += 1;
                    not_observed()
                });
                let name = if h.is_current() {
                    String::new()
                } else {
                    r.to_string()
                };
                (name, h)
            })
            .collect();
        let summary = health::summarize(
            named.iter().map(|(n, h)| (n.as_str(), h)),
            NOT_CURRENT_LISTED,
        );
        Some(SetHealth {
            summary,
            unobserved,
        })
    }

    /// Reconciles `parents` (of either kind) through the same channels as drift: a set whose
    /// health became decisive while it waits, the dependents of a set whose readiness
    /// changed, the dependencies a deleted set held up.
    pub fn trigger_parents(&self, parents: Vec<ParentRef>) {
        self.send(parents);
    }

    /// Reconciles every ApplySet registered in `namespace`: it has just been learnt
    /// terminating, and each may let its deletion go at once (see
    /// `controller::cleanup::release_to_namespace_deletion`).
    pub fn trigger_namespace(&self, namespace: &str) {
        let parents: Vec<ParentRef> = match self.state.lock() {
            Ok(s) => s
                .parents
                .values()
                .filter(|p| {
                    p.kind == ParentKind::ApplySet && p.namespace.as_deref() == Some(namespace)
                })
                .cloned()
                .collect(),
            Err(_) => Vec::new(),
        };
        self.send(parents);
    }
}

/// Whether a watch error says the kind is not served (its LIST answered 404).
fn not_served(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s)) => s.code == 404,
        _ => false,
    }
}

/// Objects per page when a kind watched whole is listed.
const WHOLE_PAGE: u32 = 100;

/// Longest health message kept per object (condition messages come from anyone).
const HEALTH_MESSAGE_BYTES: usize = 256;

/// The health of object `o` of kind `group`/`kind`, its message cut to
/// [`HEALTH_MESSAGE_BYTES`].
pub fn health_of(o: &DynamicObject, group: &str, kind: &str) -> Health {
    let mut h = health::assess_dynamic(o, group, kind, k8s_openapi::jiff::Timestamp::now());
    if h.message.len() > HEALTH_MESSAGE_BYTES {
        h.message = crate::status::truncate(&h.message, HEALTH_MESSAGE_BYTES);
    }
    h
}

/// Whether a live version of [`shape`] `live` differs from what `applied` answered only in
/// status (known only for kinds watched whole).
fn only_status_moved(applied: &Applied, live: Option<u64>) -> bool {
    applied.shape.is_some() && applied.shape == live
}

/// Most objects of health checks the operator watches at once by default (each has a watch
/// of its own; `--max-health-watches`).
pub const MAX_CHECKED_OBJECTS: usize = 2000;

/// Most checked objects watched for one set (its health checks beyond wait, `Unknown`); the
/// CRD allows as many health checks per set, the operator enforces it whatever the CRD says.
pub const MAX_CHECK_WATCHES_PER_SET: usize = 64;

/// Why a checked object is not watched yet.
fn waiting_why(operator_full: bool, cap: usize) -> String {
    if operator_full {
        format!(
            "not watched yet: the operator already watches {cap} checked objects, the most it will; watched as soon as other sets free room"
        )
    } else {
        format!(
            "not watched: the sets that check it already have {MAX_CHECK_WATCHES_PER_SET} checked objects watched each, the most per set"
        )
    }
}

/// How many objects that are not current a set's health names.
pub const NOT_CURRENT_LISTED: usize = 5;

/// The health of an object not observed yet.
fn not_observed() -> Health {
    Health::new(health::Status::InProgress, "not observed yet")
}

/// The health of member `r` of set `id`: from its watch once the kind has listed (else as
/// `fetched` by the set's reconcile); a member of a kind without status is Current once it
/// exists. `None`: not observed yet.
fn member_health(
    s: &State,
    id: &str,
    r: &MemberRef,
    fetched: &HashMap<MemberRef, Health>,
) -> Option<Health> {
    let gk = GroupKind::new(r.group.clone(), r.kind.clone());
    if !s.synced.contains(&gk) {
        return fetched.get(r).cloned();
    }
    match s.live.get(r) {
        Some(l) if l.id.as_deref() == Some(id) => match &l.health {
            Some(h) => Some(h.clone()),
            None if !health::needs_object(&r.group, &r.kind) => {
                Some(Health::new(health::Status::Current, "exists"))
            }
            // Applied a moment ago; the watch has not delivered that version yet.
            None => None,
        },
        _ => Some(Health::not_found()),
    }
}

/// A watch event of one kind mapped to another (`f` applied to each object).
fn map_event<K, T>(e: watcher::Event<K>, f: impl Fn(K) -> T) -> watcher::Event<T> {
    match e {
        watcher::Event::Apply(o) => watcher::Event::Apply(f(o)),
        watcher::Event::Delete(o) => watcher::Event::Delete(f(o)),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitApply(o) => watcher::Event::InitApply(f(o)),
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

/// What a member watch learns of one object: its metadata, and its health for kinds
/// assessed from the whole object.
type Seen = Result<watcher::Event<(ObjectMeta, Option<(Health, u64)>)>, watcher::Error>;

/// Whether resourceVersion `a` is older than `b` (both etcd revisions).
fn older(a: &str, b: &str) -> bool {
    match (a.parse::<u64>(), b.parse::<u64>()) {
        (Ok(a), Ok(b)) => a < b,
        _ => false,
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
            shape: None,
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
            resource: kube::discovery::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(
                &(),
            ),
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
            resource: kube::discovery::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(
                &(),
            ),
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
}

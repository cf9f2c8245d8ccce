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
//!   status, see [`crate::health::needs_object`]) are watched whole: each event's object is
//!   assessed (kstatus rules) and only the verdict is kept. Sets that wait or have health
//!   checks are tracked: when the health of one of their objects changes, they are marked for
//!   the health reporter (`controller::healthy`). Objects named by `spec.healthChecks` get a
//!   watch of their own (one object each).
//!
//! State is compact: per member a body hash and a resourceVersion; per watched object a
//! resourceVersion (and, for kinds with status, its health: a status and a short message).
//!
//! One registry ([`MemberWatches`]) over one shared state, in files by concern: this file
//! holds the state, the registry's lifecycle (a set registered, forgotten; every watch
//! stopped) and the reconcile triggers; [`kind_watches`] the watch of each member kind and
//! [`watch_refs`] which sets hold each kind; [`drift`] what each set last applied, drift and
//! the skipped writes; [`health`] the tracked sets' health; [`reassess`] a set's
//! objects assessed again when its expressions change; [`checks`] the watches of the
//! objects of `spec.healthChecks`; [`labelled`] what the watches know of labelled objects;
//! [`shard_scope`] what the watches select under `--shards auto`.
//! Its lock cannot be poisoned: a panic elsewhere leaves every answer as true as before.

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
};

use futures::channel::mpsc;
use kube::{Client, runtime::reflector::ObjectRef};
use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::{
    api::{ApplySet, ClusterApplySet, MemberRef},
    applyset::{GroupKind, ParentKind, ParentRef},
    terminating::Terminating,
};

mod checks;
mod drift;
mod health;
mod kind_watches;
mod labelled;
mod reassess;
mod shard_scope;
pub mod watch_refs;

pub use checks::{CheckTarget, MAX_CHECK_WATCHES_PER_SET, MAX_CHECKED_OBJECTS};
pub use drift::{Applied, Applying, body_hash, shape};
pub use health::{NOT_CURRENT_LISTED, SetHealth, Targets, health_of};

use checks::Checked;
use drift::InFlight;
use health::Tracked;
use kind_watches::Watches;
use labelled::LabelledIndex;

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
    /// The compiled spec.healthCheckExprs of the tracked sets that have some, by parent ID.
    exprs: HashMap<String, Arc<crate::health::HealthExprs>>,
    /// Moves on at every change of a set's expressions (see [`reassess`]).
    exprs_gen: u64,
    /// The value of `exprs_gen` at the last change of each tracked set's expressions.
    exprs_changed: HashMap<String, u64>,
    /// Under `--shards auto` (see [`shard_scope`]): the sets whose members the watches are
    /// known to see (reconciled to the end by this replica since it owns them). None without
    /// sharding: the watches see every member.
    complete: Option<HashSet<String>>,
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
    /// Reads of objects to assess again, at most [`reassess::REASSESS_READS`] at once.
    reads: tokio::sync::Semaphore,
    /// Under `--shards auto`: the selector of this replica's buckets (see [`shard_scope`]),
    /// and how many times it changed.
    buckets: Mutex<Option<String>>,
    selector_generation: std::sync::atomic::AtomicU64,
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
            reads: tokio::sync::Semaphore::new(reassess::REASSESS_READS),
            buckets: Mutex::new(None),
            selector_generation: std::sync::atomic::AtomicU64::new(0),
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

    /// Registers parent `parent` of ID `id` and drops records of members it no longer
    /// declares; it no longer holds the kinds it does not declare.
    pub fn register(self: &Arc<Self>, id: &str, parent: &ParentRef, declared: &HashSet<MemberRef>) {
        {
            let mut s = self.state.lock();
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
            .refs
            .retain(id, &kinds, std::time::Instant::now());
        self.release(released);
    }

    /// How many sets each per-set map of the registry holds (`applyset_tracked_sets`).
    pub fn tracked_sets(&self) -> [(&'static str, usize); 4] {
        let (applied, parents, tracked) = {
            let s = self.state.lock();
            (s.applied.len(), s.parents.len(), s.tracked.len())
        };
        let kinds = self.watches.lock().refs.sets();
        [
            ("member_applies", applied),
            ("member_parents", parents),
            ("health_tracked", tracked),
            ("kind_refs", kinds),
        ]
    }

    /// Forgets a parent (deleted), its health and the kinds it held included.
    pub fn forget(self: &Arc<Self>, id: &str) {
        {
            let mut s = self.state.lock();
            s.applied.remove(id);
            s.parents.remove(id);
        }
        let released = self
            .watches
            .lock()
            .refs
            .forget(id, std::time::Instant::now());
        self.release(released);
        self.untrack(id);
    }

    /// Stops every watch (their tasks hold this registry, so dropping it would not).
    pub fn stop(&self) {
        for (_, h) in self.watches.lock().running.drain() {
            h.abort();
        }
        for c in self.state.lock().checked.values_mut() {
            if let Some(h) = c.watch.take() {
                h.abort();
            }
        }
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
        let parents: Vec<ParentRef> = self
            .state
            .lock()
            .parents
            .values()
            .filter(|p| p.kind == ParentKind::ApplySet && p.namespace.as_deref() == Some(namespace))
            .cloned()
            .collect();
        self.send(parents);
    }
}

#[cfg(test)]
mod tests;

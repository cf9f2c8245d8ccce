//! The view's cache: one watch per kind (per namespace when the viewer may not watch every
//! namespace), each parent projected into a [`SetSummary`] on arrival, and a feed of changes.
//! One cache serves every viewer of a `kubectl applyset ui`: viewers never reach the API server
//! for the sets list.
//!
//! Only summaries are kept (no manifests, no managed fields). A re-list after a watch
//! restart drops the sets that vanished meanwhile. Every new resourceVersion of a set is
//! announced ([`Change`]), saying whether its summary moved. The [`Snapshot`] (sorted, with
//! its dependsOn index and each waiting set's `waiting_for`) is rebuilt on demand, at most
//! every [`REBUILD_EVERY`] (the previous one is served meanwhile), outside the lock the
//! watches write through, and shared. The watches stop when the last clone of the cache is
//! dropped.

use std::{
    collections::{HashMap, HashSet},
    pin::pin,
    sync::Arc,
    time::{Duration, Instant},
};

use futures::StreamExt;
use kube::{
    Api, Client,
    runtime::{WatchStreamExt, watcher},
};
use parking_lot::Mutex;
use tokio::{sync::broadcast, task::AbortHandle};

use super::{
    DepIndex, SetSummary, State, Watched,
    deps::{Found, order, waiting_for},
};
use crate::{
    api::{ApplySet, ClusterApplySet},
    applyset::{ParentKind, ParentRef},
    parent::Parent,
};

/// How many changes a slow receiver may fall behind before it is told it lagged (every
/// new resourceVersion is one: a resync of many sets is a burst).
const CHANGES: usize = 4096;

/// The least time between two snapshot builds: a burst of changes costs a build every
/// this often, not one per change.
pub const REBUILD_EVERY: Duration = Duration::from_millis(150);

/// A set that changed (a new resourceVersion, or deleted): read it from a fresh snapshot.
#[derive(Clone, Debug, PartialEq)]
pub struct Change {
    pub parent: ParentRef,
    /// Whether its summary (what the sets page shows) changed; `false` when only the rest
    /// of the set moved (its plan, failures, members' health, conditions' messages).
    pub summary_changed: bool,
    /// Its summary after the change; `None` when it is gone.
    pub summary: Option<Arc<SetSummary>>,
}

/// The sets at one moment, sorted by kind, namespace and name, with their dependsOn index.
#[derive(Debug, Default)]
pub struct Snapshot {
    pub sets: Vec<Arc<SetSummary>>,
    pub deps: DepIndex,
    /// The cache's count of changes this snapshot holds (a newer snapshot has a larger one).
    pub version: u64,
}

/// Where `parent` is in `sets` (sorted by [`order`]).
fn position(sets: &[Arc<SetSummary>], parent: &ParentRef) -> Option<usize> {
    let want = order(parent);
    sets.binary_search_by(|s| order(&s.parent).cmp(&want)).ok()
}

impl Snapshot {
    /// The summary of `parent`, if cached.
    pub fn get(&self, parent: &ParentRef) -> Option<&Arc<SetSummary>> {
        self.sets.get(position(&self.sets, parent)?)
    }

    /// Builds the snapshot `version` of `all`: sorted, indexed, and each waiting set told
    /// what it waits for (a dependency outside `watched` is unknown, not missing).
    fn build(mut all: Vec<Arc<SetSummary>>, version: u64, watched: &Watched) -> Snapshot {
        all.sort_unstable_by(|a, b| order(&a.parent).cmp(&order(&b.parent)));
        let deps = DepIndex::build(all.iter().map(|s| &**s));
        let waits: Vec<(usize, Option<(ParentRef, String)>)> = {
            let sorted = &all;
            let find = |d: &ParentRef| match position(sorted, d).and_then(|i| sorted.get(i)) {
                Some(s) => Found::Cached(s),
                None if watched.covers(d) => Found::Absent,
                None => Found::Unwatched,
            };
            all.iter()
                .enumerate()
                .filter(|(_, s)| s.state == State::Waiting)
                .filter_map(|(i, s)| {
                    let waits = waiting_for(s, find);
                    (waits != s.waiting_for).then_some((i, waits))
                })
                .collect()
        };
        for (i, waits) in waits {
            if let Some(s) = all.get_mut(i) {
                let mut with = SetSummary::clone(s);
                with.waiting_for = waits;
                *s = Arc::new(with);
            }
        }
        Snapshot {
            sets: all,
            deps,
            version,
        }
    }
}

/// The sets one watch delivers: a kind, in one namespace or all.
#[derive(Clone, Debug)]
struct Scope {
    kind: ParentKind,
    namespace: Option<String>,
}

impl Scope {
    fn covers(&self, p: &ParentRef) -> bool {
        p.kind == self.kind
            && (self.namespace.is_none() || p.namespace.as_deref() == self.namespace.as_deref())
    }

    /// What the scope is, in words (for errors).
    fn describe(&self) -> String {
        match (self.kind, &self.namespace) {
            (ParentKind::ClusterApplySet, _) => "ClusterApplySets".to_string(),
            (ParentKind::ApplySet, None) => "ApplySets of every namespace".to_string(),
            (ParentKind::ApplySet, Some(ns)) => format!("ApplySets of namespace {ns}"),
        }
    }
}

/// Where one watch is: listed once (or refused: it will not list), and its last error.
#[derive(Clone, Debug, Default)]
struct Progress {
    settled: bool,
    error: Option<String>,
}

/// The cached summaries, the version of their last change, and the last snapshot built
/// (of version `built`, finished at `built_at`).
#[derive(Default)]
struct Sets {
    by_ref: HashMap<ParentRef, Arc<SetSummary>>,
    version: u64,
    built: u64,
    built_at: Option<Instant>,
    snapshot: Arc<Snapshot>,
}

impl Sets {
    /// Whether the last snapshot is the one to serve: current, or built too recently to
    /// build again.
    fn fresh(&self) -> bool {
        self.built == self.version || self.built_at.is_some_and(|t| t.elapsed() < REBUILD_EVERY)
    }
}

/// What the cache's clones and its watches share.
struct Shared {
    watched: Watched,
    scopes: Vec<Scope>,
    changes: broadcast::Sender<Change>,
    sets: Mutex<Sets>,
    /// Held while a snapshot is built (outside `sets`): one build at a time.
    building: Mutex<()>,
    progress: Mutex<Vec<Progress>>,
}

impl Shared {
    fn new(watched: Watched, scopes: Vec<Scope>, capacity: usize) -> Shared {
        let (changes, _) = broadcast::channel(capacity);
        Shared {
            watched,
            progress: Mutex::new(vec![Progress::default(); scopes.len()]),
            scopes,
            changes,
            sets: Mutex::new(Sets::default()),
            building: Mutex::new(()),
        }
    }

    /// Stores `summary`; a new resourceVersion is announced, saying whether the summary
    /// moved (the same object again, as a re-list delivers it, is not).
    fn put(&self, summary: SetSummary) {
        let mut sets = self.sets.lock();
        let summary_changed = match sets.by_ref.get(&summary.parent) {
            Some(old) if **old == summary => return,
            Some(old) => !old.same_view(&summary),
            None => true,
        };
        let summary = Arc::new(summary);
        let parent = summary.parent.clone();
        sets.by_ref.insert(parent.clone(), summary.clone());
        sets.version += 1;
        let _ = self.changes.send(Change {
            parent,
            summary_changed,
            summary: Some(summary),
        });
    }

    /// Forgets `parent`.
    fn remove(&self, parent: &ParentRef) {
        let mut sets = self.sets.lock();
        if sets.by_ref.remove(parent).is_some() {
            sets.version += 1;
            let _ = self.changes.send(gone(parent.clone()));
        }
    }

    /// The last snapshot, built again first when changes came since and the last build is
    /// at least [`REBUILD_EVERY`] old. The build runs outside `sets` (on the summaries'
    /// `Arc`s copied out), one at a time: a caller arriving meanwhile gets the previous one.
    fn snapshot(&self) -> Arc<Snapshot> {
        {
            let sets = self.sets.lock();
            if sets.fresh() {
                return sets.snapshot.clone();
            }
        }
        let Some(_building) = self.building.try_lock() else {
            return self.sets.lock().snapshot.clone();
        };
        let (all, version) = {
            let sets = self.sets.lock();
            if sets.fresh() {
                return sets.snapshot.clone();
            }
            let all: Vec<Arc<SetSummary>> = sets.by_ref.values().cloned().collect();
            (all, sets.version)
        };
        let snapshot = Arc::new(Snapshot::build(all, version, &self.watched));
        let mut sets = self.sets.lock();
        sets.snapshot = snapshot.clone();
        sets.built = version;
        sets.built_at = Some(Instant::now());
        snapshot
    }

    /// After watch `index` listed its scope again: forgets the sets of its scope that the
    /// list did not hold.
    fn keep_listed(&self, index: usize, listed: &HashSet<ParentRef>) {
        let Some(scope) = self.scopes.get(index) else {
            return;
        };
        let mut sets = self.sets.lock();
        let vanished: Vec<ParentRef> = sets
            .by_ref
            .keys()
            .filter(|p| scope.covers(p) && !listed.contains(*p))
            .cloned()
            .collect();
        for parent in vanished {
            sets.by_ref.remove(&parent);
            sets.version += 1;
            let _ = self.changes.send(gone(parent));
        }
    }

    /// Records how watch `index` is doing: listed (clears its error), or failed.
    fn report(&self, index: usize, outcome: Result<bool, &watcher::Error>) {
        let mut progress = self.progress.lock();
        let Some(p) = progress.get_mut(index) else {
            return;
        };
        match outcome {
            Ok(listed) => {
                p.settled |= listed;
                p.error = None;
            }
            Err(e) => {
                // A list the server refuses (forbidden, or no such resource) will not
                // succeed by retrying: the cache is as complete as it gets without it.
                p.settled |= refused(e);
                let scope = self.scopes.get(index).map(Scope::describe);
                p.error = Some(format!("watching {}: {e}", scope.unwrap_or_default()));
            }
        }
    }
}

/// The change of a set deleted.
fn gone(parent: ParentRef) -> Change {
    Change {
        parent,
        summary_changed: true,
        summary: None,
    }
}

/// Whether `e` is the server refusing the list: 403 (forbidden) or 404 (no such resource).
fn refused(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s)) => matches!(s.code, 403 | 404),
        _ => false,
    }
}

/// Aborts the watches when dropped (held by every clone of the cache, not by the watches).
struct Tasks(Vec<AbortHandle>);

impl Drop for Tasks {
    fn drop(&mut self) {
        for t in &self.0 {
            t.abort();
        }
    }
}

/// The cache (cheap to clone: every clone shares it).
#[derive(Clone)]
pub struct SetCache {
    shared: Arc<Shared>,
    _tasks: Arc<Tasks>,
}

impl SetCache {
    /// Starts the watches of `watched` on `client` (tasks on the current runtime, stopped
    /// when the last clone is dropped).
    pub fn start(client: Client, watched: Watched) -> SetCache {
        let mut scopes: Vec<Scope> = match &watched.namespaces {
            None => vec![Scope {
                kind: ParentKind::ApplySet,
                namespace: None,
            }],
            Some(namespaces) => namespaces
                .iter()
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .map(|ns| Scope {
                    kind: ParentKind::ApplySet,
                    namespace: Some(ns.clone()),
                })
                .collect(),
        };
        if watched.cluster_sets {
            scopes.push(Scope {
                kind: ParentKind::ClusterApplySet,
                namespace: None,
            });
        }
        let shared = Arc::new(Shared::new(watched, scopes.clone(), CHANGES));
        let tasks = scopes
            .into_iter()
            .enumerate()
            .map(|(i, scope)| {
                let (shared, client) = (shared.clone(), client.clone());
                let ns = scope.namespace.as_deref();
                let task = match scope.kind {
                    ParentKind::ApplySet => {
                        tokio::spawn(follow(shared, i, ApplySet::api(client, ns)))
                    }
                    ParentKind::ClusterApplySet => {
                        tokio::spawn(follow(shared, i, ClusterApplySet::api(client, None)))
                    }
                };
                task.abort_handle()
            })
            .collect();
        SetCache {
            shared,
            _tasks: Arc::new(Tasks(tasks)),
        }
    }

    /// Whether every watch has listed once (the sets page is complete); a watch whose list
    /// the server refuses counts as done (its error is in [`SetCache::errors`]).
    pub fn is_ready(&self) -> bool {
        self.shared.progress.lock().iter().all(|p| p.settled)
    }

    /// The sets now, or as they were at most [`REBUILD_EVERY`] ago (shared; rebuilt only
    /// after a change, at most that often).
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.shared.snapshot()
    }

    /// Every new resourceVersion of a set and every deletion from now on; a receiver that
    /// lags is told so (the viewer reloads).
    pub fn subscribe(&self) -> broadcast::Receiver<Change> {
        self.shared.changes.subscribe()
    }

    /// What is watched.
    pub fn watched(&self) -> &Watched {
        &self.shared.watched
    }

    /// The last error of each watch that failed (e.g. forbidden), to show on the page;
    /// a watch's error clears once it delivers again.
    pub fn errors(&self) -> Vec<String> {
        let progress = self.shared.progress.lock();
        progress.iter().filter_map(|p| p.error.clone()).collect()
    }
}

/// Watch `index` of the cache: every parent `api` lists and every change after, projected
/// into the cache (with the operator's watch configuration and backoff).
async fn follow<P: Parent>(shared: Arc<Shared>, index: usize, api: Api<P>) {
    let config = watcher::Config::default().any_semantic();
    let mut events = pin!(watcher(api, config).backoff(crate::backoff::backoff()));
    let summary = |o: P| SetSummary::of(&Arc::new(o).into_any());
    let mut listed: HashSet<ParentRef> = HashSet::new();
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::Init) => listed.clear(),
            Ok(watcher::Event::InitApply(o)) => {
                let s = summary(o);
                listed.insert(s.parent.clone());
                shared.put(s);
                shared.report(index, Ok(false));
            }
            Ok(watcher::Event::InitDone) => {
                shared.keep_listed(index, &listed);
                listed = HashSet::new();
                shared.report(index, Ok(true));
            }
            Ok(watcher::Event::Apply(o)) => {
                shared.put(summary(o));
                shared.report(index, Ok(false));
            }
            Ok(watcher::Event::Delete(o)) => {
                shared.remove(&o.parent_ref());
                shared.report(index, Ok(false));
            }
            Err(e) => shared.report(index, Err(&e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(p: &ParentRef, state: State, deps: &[&ParentRef]) -> SetSummary {
        let unobserved = SetSummary::unobserved(p.clone());
        SetSummary {
            resource_version: "1".into(),
            state,
            depends_on: deps.iter().map(|d| (*d).clone()).collect(),
            as_dependency: match state {
                State::Ready => Ok(()),
                _ => unobserved.as_dependency.clone(),
            },
            ..unobserved
        }
    }

    fn shared(namespaces: &[&str]) -> (Shared, broadcast::Receiver<Change>) {
        let scopes = namespaces
            .iter()
            .map(|ns| Scope {
                kind: ParentKind::ApplySet,
                namespace: Some(ns.to_string()),
            })
            .chain([Scope {
                kind: ParentKind::ClusterApplySet,
                namespace: None,
            }])
            .collect::<Vec<_>>();
        let watched = Watched {
            namespaces: Some(namespaces.iter().map(|n| n.to_string()).collect()),
            cluster_sets: true,
        };
        let shared = Shared::new(watched, scopes, 16);
        let rx = shared.changes.subscribe();
        (shared, rx)
    }

    fn snapshot(s: &Shared) -> Snapshot {
        let all = s.sets.lock().by_ref.values().cloned().collect();
        Snapshot::build(all, 0, &s.watched)
    }

    /// The changes announced: each set's key, `*` marking a summary change.
    fn drained(rx: &mut broadcast::Receiver<Change>) -> Vec<String> {
        std::iter::from_fn(|| rx.try_recv().ok())
            .map(|c| {
                let key = super::super::summary::key(&c.parent);
                match c.summary_changed {
                    true => format!("{key}*"),
                    false => key,
                }
            })
            .collect()
    }

    #[test]
    fn the_snapshot_is_sorted_and_names_what_a_set_waits_for() {
        let (s, _rx) = shared(&["a", "b"]);
        let (web, db, infra) = (
            ParentRef::applyset("b", "web"),
            ParentRef::applyset("a", "db"),
            ParentRef::cluster("infra"),
        );
        let hidden = ParentRef::applyset("z", "hidden");
        s.put(summary(&infra, State::Ready, &[]));
        s.put(summary(&web, State::Waiting, &[&infra, &db]));
        s.put(summary(&db, State::Reconciling, &[&hidden]));
        let snap = snapshot(&s);
        let keys: Vec<String> = snap
            .sets
            .iter()
            .map(|s| super::super::summary::key(&s.parent))
            .collect();
        assert_eq!(keys, ["a/db", "b/web", "cluster/infra"]);
        let waits = snap.get(&web).and_then(|w| w.waiting_for.clone());
        assert_eq!(
            waits,
            Some((
                db.clone(),
                "ApplySet a/db has not reconciled generation 1 yet".into()
            ))
        );
        assert!(snap.get(&hidden).is_none());
        assert_eq!(snap.deps.dependents(&hidden), std::slice::from_ref(&db));
        assert_eq!(snap.get(&infra).map(|s| s.parent.clone()), Some(infra));
    }

    #[test]
    fn changes_are_announced_once_and_a_relist_drops_what_vanished() {
        let (s, mut rx) = shared(&["a", "b"]);
        let (one, two, other) = (
            ParentRef::applyset("a", "one"),
            ParentRef::applyset("a", "two"),
            ParentRef::applyset("b", "other"),
        );
        s.put(summary(&one, State::Ready, &[]));
        s.put(summary(&two, State::Ready, &[]));
        s.put(summary(&other, State::Ready, &[]));
        assert_eq!(drained(&mut rx), ["a/one*", "a/two*", "b/other*"]);
        // The same again: not announced; only a new resourceVersion (a new plan, a
        // member's health): announced, its summary unmoved.
        s.put(summary(&one, State::Ready, &[]));
        assert!(drained(&mut rx).is_empty());
        let mut moved = summary(&one, State::Ready, &[]);
        moved.resource_version = "2".into();
        s.put(moved);
        assert_eq!(drained(&mut rx), ["a/one"]);
        let mut failing = summary(&one, State::Failing, &[]);
        failing.resource_version = "3".into();
        s.put(failing);
        let change = rx.try_recv().expect("announced");
        assert!(change.summary_changed);
        let after = change.summary.as_ref().map(|s| s.state);
        assert_eq!(after, Some(State::Failing));
        // Namespace a listed again without `two`: it goes, b's set stays.
        s.keep_listed(0, &HashSet::from([one.clone()]));
        assert_eq!(drained(&mut rx), ["a/two*"]);
        let snap = snapshot(&s);
        assert!(snap.get(&two).is_none() && snap.get(&other).is_some());
        s.remove(&other);
        s.remove(&other);
        let change = rx.try_recv().expect("announced");
        assert_eq!((change.summary_changed, change.summary), (true, None));
        assert!(drained(&mut rx).is_empty());
    }

    #[test]
    fn the_snapshot_is_rebuilt_at_most_every_so_often() {
        let (s, _rx) = shared(&["a"]);
        let (one, two) = (
            ParentRef::applyset("a", "one"),
            ParentRef::applyset("a", "two"),
        );
        s.put(summary(&one, State::Ready, &[]));
        let first = s.snapshot();
        assert_eq!((first.sets.len(), first.version), (1, 1));
        assert!(
            Arc::ptr_eq(&first, &s.snapshot()),
            "no change: the same snapshot"
        );
        // A change right after a build: the previous snapshot is served meanwhile.
        s.put(summary(&two, State::Ready, &[]));
        let started = Instant::now();
        let served = s.snapshot();
        if started.duration_since(s.sets.lock().built_at.expect("built")) < REBUILD_EVERY {
            assert!(Arc::ptr_eq(&first, &served));
        }
        std::thread::sleep(REBUILD_EVERY);
        let next = s.snapshot();
        assert_eq!((next.sets.len(), next.version), (2, 2));
        // Another build running: the previous snapshot, without waiting for it.
        s.remove(&two);
        std::thread::sleep(REBUILD_EVERY);
        let building = s.building.lock();
        assert!(Arc::ptr_eq(&next, &s.snapshot()));
        drop(building);
        assert_eq!(s.snapshot().sets.len(), 1);
    }

    #[test]
    fn readiness_waits_for_every_watch_and_errors_name_the_scope() {
        let (s, _rx) = shared(&["a"]);
        s.report(0, Ok(true));
        assert!(!s.progress.lock().iter().all(|p| p.settled));
        let status = kube::core::Status::failure("forbidden", "Forbidden").with_code(403);
        let refused = watcher::Error::InitialListFailed(kube::Error::Api(Box::new(status)));
        s.report(1, Err(&refused));
        assert!(s.progress.lock().iter().all(|p| p.settled));
        let errors: Vec<String> = s
            .progress
            .lock()
            .iter()
            .filter_map(|p| p.error.clone())
            .collect();
        assert_eq!(errors.len(), 1);
        assert!(
            errors[0].starts_with("watching ClusterApplySets: "),
            "{errors:?}"
        );
        s.report(1, Ok(false));
        assert!(s.progress.lock().iter().all(|p| p.error.is_none()));
    }
}

#[cfg(test)]
mod lifetime {
    use super::*;

    /// The watches (here retrying against a port nobody listens on) hold the shared state
    /// until the last clone of the cache goes; then they are aborted and it is freed.
    #[tokio::test]
    async fn the_watches_stop_with_the_last_clone() {
        let config = kube::Config::new("http://127.0.0.1:1".parse().expect("a URI"));
        let client = Client::try_from(config).expect("a client");
        let watched = Watched {
            namespaces: Some(vec!["a".into(), "b".into()]),
            cluster_sets: true,
        };
        let cache = SetCache::start(client, watched);
        let shared = Arc::downgrade(&cache.shared);
        let clone = cache.clone();
        drop(cache);
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        assert!(shared.upgrade().is_some(), "a clone keeps the watches");
        assert!(!clone.is_ready());
        drop(clone);
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
        while shared.upgrade().is_some() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the watches still run"
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }
}

#[cfg(test)]
mod scale {
    use super::*;
    use crate::{api::ApplySet, parent::AnyParent};

    /// A typical parent: a git source, two dependencies, a Ready condition and revisions.
    fn parent(i: usize) -> AnyParent {
        let revision = format!("sha256:{}; main@sha1:{}", "a".repeat(64), "b".repeat(40));
        let o: ApplySet = serde_json::from_value(serde_json::json!({
            "apiVersion": "applyset.dev/v1alpha1", "kind": "ApplySet",
            "metadata": {"name": format!("set-{i:05}"), "namespace": format!("team-{}", i % 100),
                "uid": "0b7c1e2a-8a4f-4a59-9d1c-3f3a1d0e5c11", "resourceVersion": "123456789",
                "generation": 4, "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {
                "sources": [{"git": {"url": "https://git.example.com/org/repo.git",
                    "ref": {"branch": "main"}, "path": "deploy/production"}}],
                "dependsOn": [{"name": format!("set-{:05}", i / 2)},
                    {"kind": "ClusterApplySet", "name": "crds"}]},
            "status": {"observedGeneration": 4, "conditions": [{"type": "Ready",
                "status": "True", "reason": "ReconciliationSucceeded",
                "message": "Applied revision sha256:0123456789abcdef: 12 members",
                "lastTransitionTime": "2026-01-02T00:00:00Z", "observedGeneration": 4}],
                "lastAppliedRevision": revision, "lastAttemptedRevision": revision},
        }))
        .expect("an ApplySet");
        AnyParent::ApplySet(Arc::new(o))
    }

    /// 10,000 sets (each depending on another and on a missing ClusterApplySet): the
    /// snapshot is built in well under a second, even unoptimized, and finds every set.
    #[test]
    fn ten_thousand_sets_are_indexed_in_well_under_a_second() {
        let by_ref: HashMap<ParentRef, Arc<SetSummary>> = (0..10_000)
            .map(|i| SetSummary::of(&parent(i)))
            .map(|s| (s.parent.clone(), Arc::new(s)))
            .collect();
        let watched = Watched {
            namespaces: None,
            cluster_sets: true,
        };
        let started = std::time::Instant::now();
        let snap = Snapshot::build(by_ref.values().cloned().collect(), 1, &watched);
        let took = started.elapsed();
        assert!(took < std::time::Duration::from_secs(1), "{took:?}");
        assert_eq!(snap.sets.len(), 10_000);
        assert!(
            by_ref
                .keys()
                .all(|p| snap.get(p).is_some_and(|s| &s.parent == p))
        );
        let crds = ParentRef::cluster("crds");
        assert_eq!(snap.deps.dependents(&crds).len(), 10_000);
    }

    /// 10,000 sets, then 10,000 summary changes (one a set, as a resync after an operator
    /// restart makes them) heard by one set page's listener: the snapshot is rebuilt at most
    /// every [`REBUILD_EVERY`] and the neighbourhood once per snapshot, so it all takes well
    /// under a second, even unoptimized; the page hears its set and its neighbours only.
    #[test]
    fn a_set_page_listener_keeps_up_with_ten_thousand_changes() {
        use crate::view::{deps::Near, graph::MAX_NODES};
        let watched = Watched {
            namespaces: None,
            cluster_sets: true,
        };
        let scopes = vec![Scope {
            kind: ParentKind::ApplySet,
            namespace: None,
        }];
        let shared = Shared::new(watched, scopes, CHANGES);
        let sets: Vec<SetSummary> = (0..10_000).map(|i| SetSummary::of(&parent(i))).collect();
        for s in &sets {
            shared.put(s.clone());
        }
        let changed: Vec<SetSummary> = sets
            .into_iter()
            .map(|mut s| {
                s.resource_version = "123456790".into();
                s.members += 1;
                s
            })
            .collect();
        // team-0/set-00100 depends on a missing team-0/set-00050 and on crds; only
        // team-0/set-00200 depends on it (set-i is in team-(i % 100), depending on set-(i/2)).
        let focus = ParentRef::applyset("team-0", "set-00100");
        let mut rx = shared.changes.subscribe();
        let started = std::time::Instant::now();
        let mut near = Near::new(focus, MAX_NODES, &shared.snapshot());
        let mut heard = Vec::new();
        for s in changed {
            shared.put(s);
            while let Ok(change) = rx.try_recv() {
                if near.concerns(&change, || shared.snapshot()) {
                    heard.push(change.parent.name.clone());
                }
            }
        }
        let took = started.elapsed();
        eprintln!("10,000 changes heard by a set page in {took:?}");
        assert!(took < std::time::Duration::from_secs(1), "{took:?}");
        // Its dependents, theirs and so on (in its namespace), each once; not the 9,993
        // others, though every set depends on the same missing ClusterApplySet.
        let chain = [100, 200, 400, 800, 1600, 3200, 6400].map(|i| format!("set-{i:05}"));
        assert_eq!(heard, chain);
    }
}

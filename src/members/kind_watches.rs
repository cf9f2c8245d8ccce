//! The watch of each member kind: started once an apply of the kind was accepted for some
//! set, stopped once no set has declared it for [`watch_refs::GRACE`] (or when the kind is
//! not served any more). Metadata-only for kinds without status; whole objects for kinds with
//! a status to assess, each assessed and dropped (only its health and [`shape`] are kept).
//!
//! Promises: one watch per kind, whatever the number of sets; what a watch lists replaces
//! what was known of its kind, and only a kind whose initial list completed is trusted
//! (`synced`); every event is handed to drift and health ([`super::drift`], [`super::health`]);
//! a kind whose LIST answers 404 is forgotten, and discovery told.

use std::{collections::HashMap, sync::Arc};

use futures::{StreamExt, stream::BoxStream};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{
    Api,
    core::{DynamicObject, PartialObjectMeta},
    runtime::{WatchStreamExt, watcher},
};
use tokio::task::AbortHandle;

use super::{
    KindGone, MemberWatches, State,
    drift::{only_status_moved, shape},
    health::{exprs_of, health_of},
    labelled::{Labelled, Tag},
    watch_refs::{self, WatchRefs},
};
use crate::{
    api::MemberRef,
    applyset::{GroupKind, LABEL_PART_OF, ParentRef, controls::Marks},
    discovery::Resolved,
    health::{self, Health},
};

/// The running member watches and the sets that hold their kinds: a kind is watched once an
/// apply of it was accepted for some set ([`MemberWatches::accepted`]), and its watch stops
/// when no set has declared it for [`watch_refs::GRACE`].
#[derive(Default)]
pub(super) struct Watches {
    pub(super) running: HashMap<GroupKind, AbortHandle>,
    /// How each running kind is watched (to read one of its objects again, see
    /// [`super::reassess`]).
    pub(super) resolved: HashMap<GroupKind, Resolved>,
    pub(super) refs: WatchRefs,
}

impl MemberWatches {
    /// Set `id` had applies of these kinds accepted by the API server (the kind is served,
    /// and someone may write it): it holds them, and each kind not watched yet gets its watch
    /// (on the current runtime).
    pub fn accepted<'a>(
        self: &Arc<Self>,
        id: &str,
        kinds: impl IntoIterator<Item = (&'a GroupKind, &'a Resolved)>,
    ) {
        let mut w = self.watches.lock();
        for (gk, resolved) in kinds {
            w.refs.hold(id, gk);
            w.resolved.insert(gk.clone(), resolved.clone());
            if !w.running.contains_key(gk) {
                self.spawn_watch(&mut w, gk, resolved);
            }
        }
    }

    /// Starts the watch of `gk` (its handle kept in `w`).
    pub(super) fn spawn_watch(
        self: &Arc<Self>,
        w: &mut Watches,
        gk: &GroupKind,
        resolved: &Resolved,
    ) {
        let this = self.clone();
        let (gk2, resolved) = (gk.clone(), resolved.clone());
        let handle = tokio::spawn(async move { this.watch(gk2, resolved).await }).abort_handle();
        w.running.insert(gk.clone(), handle);
    }

    /// How many member kinds are watched now (`applyset_member_watches`).
    pub fn watch_count(&self) -> usize {
        self.watches.lock().running.len()
    }

    /// Runs `hook` whenever a watched kind's LIST answers 404 (the kind is not served).
    pub fn on_kind_gone(&self, hook: KindGone) {
        *self.kind_gone.lock() = Some(hook);
    }

    /// Stops the watches of `released` kinds once they have stayed unheld for the grace
    /// period (checked again then: a kind held again meanwhile keeps its watch).
    pub(super) fn release(self: &Arc<Self>, released: Vec<GroupKind>) {
        if released.is_empty() {
            return;
        }
        let this = Arc::downgrade(self);
        tokio::spawn(async move {
            tokio::time::sleep(watch_refs::GRACE).await;
            if let Some(this) = this.upgrade() {
                for gk in released {
                    this.stop_if_expired(&gk);
                }
            }
        });
    }

    pub(super) fn stop_if_expired(&self, gk: &GroupKind) {
        let mut w = self.watches.lock();
        if !w
            .refs
            .expired(gk, std::time::Instant::now(), watch_refs::GRACE)
        {
            return;
        }
        w.refs.stopped(gk);
        w.resolved.remove(gk);
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
        self.watches.lock().running.remove(gk);
        self.unsync(gk);
        tracing::info!(kind = %gk, "member watch stopped: the kind is not served (404)");
        let hook = self.kind_gone.lock().clone();
        if let Some(hook) = hook {
            hook(gk);
        }
    }

    /// Forgets what the watch of `gk` listed: its objects are looked up otherwise (LISTs,
    /// GETs) until a watch of the kind lists again.
    pub(super) fn unsync(&self, gk: &GroupKind) {
        let mut s = self.state.lock();
        s.synced.remove(gk);
        s.live.remove_kind(gk);
    }

    /// The events of every labelled object of a kind: metadata only for kinds without status,
    /// whole objects (assessed, then dropped) for the others.
    fn seen(&self, gk: &GroupKind, resolved: &Resolved) -> BoxStream<'static, Seen> {
        let cfg = watcher::Config::default().labels(&self.selector());
        if health::needs_object(&gk.group, &gk.kind) {
            let gk = gk.clone();
            let state = self.state.clone();
            let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &resolved.resource);
            // Whole objects (a CRD can be a megabyte): listed in small pages.
            watcher(api, cfg.page_size(WHOLE_PAGE))
                .backoff(crate::backoff::backoff())
                .map(move |e| {
                    e.map(|e| {
                        map_event(e, |o| {
                            let exprs = exprs_of(&state, &o.metadata);
                            let h = health_of(&o, &gk.group, &gk.kind, exprs.as_deref());
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
                .backoff(crate::backoff::backoff())
                .map(|e| e.map(|e| map_event(e, |o| (o.metadata, None))))
                .boxed()
        }
    }

    pub(super) async fn watch(self: Arc<Self>, gk: GroupKind, resolved: Resolved) {
        // A watch started for another selector (see `shard_scope`) stops at its next event:
        // what it lists must not replace what the new one lists.
        let generation = self.selector_generation();
        let mut events = self.seen(&gk, &resolved);
        let mut pending: HashMap<MemberRef, Labelled> = HashMap::new();
        // The expressions as of the start of the list under way.
        let mut listing_since = 0;
        loop {
            // Taken before the next event is assessed (as it is read).
            let since = self.exprs_stamp();
            let Some(event) = events.next().await else {
                return;
            };
            if self.selector_generation() != generation {
                return;
            }
            let event = match event {
                Ok(e) => e,
                Err(e) if not_served(&e) => return self.gone(&gk),
                Err(e) => {
                    tracing::debug!(kind = %gk, error = %e, "member watch");
                    continue;
                }
            };
            match event {
                watcher::Event::Init => {
                    pending.clear();
                    listing_since = since;
                }
                watcher::Event::InitApply((meta, whole)) => {
                    if let Some((r, rv, id)) = Self::key(&gk, resolved.namespaced, &meta) {
                        let (health, shape) = whole.unzip();
                        let marks = Marks::of_meta(&meta);
                        pending.insert(
                            r,
                            Labelled {
                                rv,
                                id,
                                health,
                                shape,
                                marks,
                            },
                        );
                    }
                }
                watcher::Event::InitDone => {
                    let assessed = assessed(&pending);
                    let listed = std::mem::take(&mut pending);
                    let Some(drifted) = self.replace_listed(&gk, listed, generation) else {
                        return;
                    };
                    self.trigger(drifted);
                    self.recorded_since(assessed, listing_since);
                }
                watcher::Event::Apply((meta, whole)) => {
                    if let Some((r, rv, id)) = Self::key(&gk, resolved.namespaced, &meta) {
                        let assessed = whole.is_some().then(|| id.clone()).flatten();
                        let tag = Tag {
                            id,
                            marks: Marks::of_meta(&meta),
                        };
                        let seen = Some(rv.clone());
                        let drifted = self.observe_seen(r.clone(), seen.clone(), whole, seen, tag);
                        self.trigger(drifted);
                        if let Some(id) = assessed {
                            self.recorded_since(vec![(r, id, rv)], since);
                        }
                    }
                }
                watcher::Event::Delete((meta, _)) => self.deleted(&gk, resolved.namespaced, &meta),
            }
        }
    }

    /// A labelled object of kind `gk` deleted.
    fn deleted(&self, gk: &GroupKind, namespaced: bool, meta: &ObjectMeta) {
        let Some((r, rv, id)) = Self::key(gk, namespaced, meta) else {
            return;
        };
        // The namespace controller deleting a terminating namespace's content: recorded, but
        // the sets living there are not reconciled (their own deletion is coming); sets
        // elsewhere are, to report it.
        let terminating = r
            .namespace
            .clone()
            .filter(|ns| self.terminating.contains(ns));
        // Under --shards auto, the object may only have lost its bucket label: the set's
        // next reconcile lists its members again.
        if let Some(set) = id.as_deref() {
            self.incomplete(set);
        }
        let tag = Tag {
            id,
            marks: Marks::default(),
        };
        let mut drifted = self.observe_seen(r, None, None, Some(rv), tag);
        if let Some(ns) = terminating {
            drifted.retain(|p| p.namespace.as_ref() != Some(&ns));
        }
        self.trigger(drifted);
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

    /// [`Self::replace_kind`] unless the watches' selector changed since the watch that
    /// listed `fresh` started (checked under the state's lock, which a change of selector
    /// takes too): None then.
    fn replace_listed(
        &self,
        gk: &GroupKind,
        fresh: HashMap<MemberRef, Labelled>,
        generation: u64,
    ) -> Option<Vec<ParentRef>> {
        let s = self.state.lock();
        if self.selector_generation() != generation {
            return None;
        }
        Some(self.replace_locked(s, gk, fresh))
    }

    /// Replaces what is known of one kind after a (re)list; returns parents whose members
    /// drifted meanwhile.
    #[cfg(test)]
    pub(super) fn replace_kind(
        &self,
        gk: &GroupKind,
        fresh: HashMap<MemberRef, Labelled>,
    ) -> Vec<ParentRef> {
        self.replace_locked(self.state.lock(), gk, fresh)
    }

    /// Replaces what is known of one kind (its state's lock held); returns parents whose
    /// members drifted meanwhile.
    fn replace_locked(
        &self,
        mut s: parking_lot::MutexGuard<'_, State>,
        gk: &GroupKind,
        fresh: HashMap<MemberRef, Labelled>,
    ) -> Vec<ParentRef> {
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
}

/// The objects of a list that carry a verdict: reference, set, resourceVersion.
fn assessed(listed: &HashMap<MemberRef, Labelled>) -> Vec<(MemberRef, String, String)> {
    listed
        .iter()
        .filter(|(_, l)| l.health.is_some())
        .filter_map(|(r, l)| Some((r.clone(), l.id.clone()?, l.rv.clone())))
        .collect()
}

/// Whether a watch error says the kind is not served (its LIST answered 404).
pub(super) fn not_served(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s)) => s.code == 404,
        _ => false,
    }
}

/// Objects per page when a kind watched whole is listed.
const WHOLE_PAGE: u32 = 100;

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

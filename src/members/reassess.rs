//! The re-assessment of one set's members when its spec.healthCheckExprs change: its objects
//! the member watches hold, of the kinds the former or the new expressions concern, are each
//! read once (one GET, as the operator, at most [`REASSESS_READS`] at once across all sets)
//! and assessed with the new expressions. Nothing of any other set is touched, and no watch
//! starts over: the cost is proportional to the set, not to the cluster.
//!
//! Promises: from the registration of the new expressions on, every event is assessed with
//! them; each re-assessed entry counts as not assessed yet (in progress) until its read
//! answers, so a waiting set is never reported healthy from a verdict of the former
//! expressions; a verdict is recorded only for the very resourceVersion the entry still
//! holds (a newer event wins); a failed read leaves the entry not assessed (logged), a 404
//! removes nothing (the watch tells). A verdict the watch made with expressions that changed
//! meanwhile (an event in flight, a list under way) is assessed again the same way.

use std::{collections::HashMap, sync::Arc};

use futures::StreamExt;
use kube::{Api, core::DynamicObject};

use super::{MemberWatches, State, health::health_of};
use crate::{
    api::MemberRef,
    applyset::GroupKind,
    health::{self, HealthExprs},
};

/// Most objects read at once to be assessed again (all sets together).
pub const REASSESS_READS: usize = 8;

impl MemberWatches {
    /// Sets the compiled spec.healthCheckExprs of parent `id` (none: empty), before its
    /// members are applied, so that every event of them after this call is assessed with
    /// them. When they changed, the set's objects the watches hold, of the kinds they concern
    /// (the former or the new ones), count as not assessed and are read and assessed again
    /// ([`Self::reassess`]); so is each object the set checks that they concern (its own
    /// watch starts over).
    pub fn use_exprs(self: &Arc<Self>, id: &str, exprs: Arc<HealthExprs>) {
        let (refs, checks) = {
            let mut s = self.state.lock();
            let previous = match exprs.is_empty() {
                true => s.exprs.remove(id),
                false => s.exprs.insert(id.to_string(), exprs.clone()),
            };
            let previous = previous.unwrap_or_default();
            if previous.source() == exprs.source() {
                return;
            }
            s.exprs_gen += 1;
            let generation = s.exprs_gen;
            s.exprs_changed.insert(id.to_string(), generation);
            let concerned = |r: &MemberRef| {
                previous.for_kind(&r.group, &r.kind).is_some()
                    || exprs.for_kind(&r.group, &r.kind).is_some()
            };
            let held: Vec<(MemberRef, String)> = s
                .live
                .of_id(id)
                .filter(|(r, _)| concerned(r))
                .map(|(r, l)| (r.clone(), l.rv.clone()))
                .collect();
            let checks: Vec<MemberRef> = s
                .checked
                .iter()
                .filter(|(r, c)| c.users.contains(id) && concerned(r))
                .map(|(r, _)| r.clone())
                .collect();
            (self.unassess(&mut s, id, held), checks)
        };
        self.reassess(id, refs);
        if !checks.is_empty() {
            self.recheck(&checks);
        }
    }

    /// A stamp of the expressions registered so far (see [`Self::assessed_before`]).
    pub(super) fn exprs_stamp(&self) -> u64 {
        self.state.lock().exprs_gen
    }

    /// Whether set `id`'s expressions changed after `stamp` (a verdict made before may be
    /// of the former ones).
    pub(super) fn assessed_before(s: &State, id: &str, stamp: u64) -> bool {
        s.exprs_changed.get(id).is_some_and(|g| *g > stamp)
    }

    /// The watch recorded `seen` (reference, set, resourceVersion), assessed with the
    /// expressions as of `stamp`: those of sets whose expressions changed since are assessed
    /// again ([`Self::reassess`]).
    pub(super) fn recorded_since(
        self: &Arc<Self>,
        seen: Vec<(MemberRef, String, String)>,
        stamp: u64,
    ) {
        let by_set = {
            let mut s = self.state.lock();
            let mut by_set: HashMap<String, Vec<(MemberRef, String)>> = HashMap::new();
            for (r, id, rv) in seen {
                if Self::assessed_before(&s, &id, stamp) {
                    by_set.entry(id).or_default().push((r, rv));
                }
            }
            by_set
                .into_iter()
                .map(|(id, held)| {
                    let refs = self.unassess(&mut s, &id, held);
                    (id, refs)
                })
                .collect::<Vec<_>>()
        };
        for (id, refs) in by_set {
            self.reassess(&id, refs);
        }
    }

    /// Marks the entries `held` (reference, resourceVersion) of set `id` not assessed (health
    /// `None`: in progress) if they still hold that version and a verdict; returns them, and
    /// marks the set.
    fn unassess(&self, s: &mut State, id: &str, held: Vec<(MemberRef, String)>) -> Vec<MemberRef> {
        let mut refs = Vec::new();
        for (r, rv) in held {
            if let Some(l) = s.live.get_mut(&r)
                && l.rv == rv
                && l.id.as_deref() == Some(id)
                && health::needs_object(&r.group, &r.kind)
            {
                l.health = None;
                refs.push(r);
            }
        }
        if !refs.is_empty() {
            self.mark_dirty(s, vec![id.to_string()]);
        }
        refs
    }

    /// Reads each of `refs` (objects of set `id`) and records its health by the set's
    /// current expressions, off the caller's path; then marks the set.
    fn reassess(self: &Arc<Self>, id: &str, refs: Vec<MemberRef>) {
        if refs.is_empty() {
            return;
        }
        let (this, id) = (self.clone(), id.to_string());
        tokio::spawn(async move {
            futures::stream::iter(refs)
                .for_each_concurrent(REASSESS_READS, |r| {
                    let (this, id) = (&this, &id);
                    async move { this.reassess_one(id, &r).await }
                })
                .await;
            let mut s = this.state.lock();
            this.mark_dirty(&mut s, vec![id]);
        });
    }

    /// One object of [`Self::reassess`]: read (as the operator, like the watches), assessed,
    /// recorded if its entry still holds the version read.
    async fn reassess_one(&self, id: &str, r: &MemberRef) {
        let gk = GroupKind::new(r.group.clone(), r.kind.clone());
        // A kind no longer watched: its objects are looked up otherwise.
        let Some(resolved) = self.watches.lock().resolved.get(&gk).cloned() else {
            return;
        };
        let api: Api<DynamicObject> = match &r.namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &resolved.resource),
            None => Api::all_with(self.client.clone(), &resolved.resource),
        };
        let Ok(_permit) = self.reads.acquire().await else {
            return;
        };
        match api.get_opt(&r.name).await {
            Ok(Some(o)) => self.reassessed(id, r, &o),
            // Gone: its watch tells.
            Ok(None) => {}
            Err(e) => tracing::warn!(
                object = %r, error = %e,
                "cannot read the object to assess it with its set's new healthCheckExprs; it counts in progress until its next event"
            ),
        }
    }

    /// Records the health of `o` (object `r` of set `id`) by the set's current expressions,
    /// if its entry still holds that very version and the expressions did not change
    /// meanwhile (a later re-assessment records its own).
    fn reassessed(&self, id: &str, r: &MemberRef, o: &DynamicObject) {
        let Some(rv) = o.metadata.resource_version.as_deref() else {
            return;
        };
        let (exprs, stamp) = {
            let s = self.state.lock();
            (s.exprs.get(id).cloned(), s.exprs_gen)
        };
        let h = health_of(o, &r.group, &r.kind, exprs.as_deref());
        let mut s = self.state.lock();
        if Self::assessed_before(&s, id, stamp) {
            return;
        }
        if let Some(l) = s.live.get_mut(r)
            && l.rv == rv
            && l.id.as_deref() == Some(id)
        {
            l.health = Some(h);
        }
    }
}

//! Drift correction and skipped writes: what each set last applied of each member (a body
//! hash, the resourceVersion, UID and [`shape`] the server answered), the applies in flight,
//! and what a watch event means for them.
//!
//! Promises: a member whose body and live version are still those of the set's last
//! successful apply is reported unchanged (its write is skipped); a change or deletion of a
//! member by anyone else reconciles its parent at once; the set's own write, seen by the
//! watch before the apply's answer, is not drift; a status written by the member's
//! controller (same [`shape`]) is not drift; a failed or cancelled apply forgets what was
//! applied, so the member is sent again.

use std::{
    collections::{HashMap, HashSet},
    hash::{DefaultHasher, Hash, Hasher},
};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
use kube::core::DynamicObject;

use super::{
    MemberWatches,
    labelled::{Labelled, Tag},
};
use crate::{
    api::MemberRef,
    applyset::{GroupKind, ParentRef, controls::Marks},
    health::Health,
};

/// The hash of a body to apply (stable within a process).
pub fn body_hash(body: &serde_json::Value) -> u64 {
    let mut h = DefaultHasher::new();
    // serde_json maps are ordered by key, so equal bodies serialize equally.
    body.to_string().hash(&mut h);
    h.finish()
}

/// A successful apply: the body's hash, and the object's resourceVersion, UID and
/// [`shape`] as answered; `marks`, the applied body's per-object controls (what the live
/// object carries at least, until the watch delivers that version).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    pub hash: u64,
    pub rv: String,
    pub uid: String,
    pub shape: Option<u64>,
    pub marks: Marks,
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

/// An apply of a member in flight: how many, and the newest resourceVersion an event
/// brought meanwhile.
#[derive(Default)]
pub(super) struct InFlight {
    count: usize,
    newest: Option<String>,
}

impl MemberWatches {
    /// Records one change without health (tests of kinds without status).
    #[cfg(test)]
    pub(super) fn observe(
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
    pub(super) fn observe_seen(
        &self,
        r: MemberRef,
        rv: Option<String>,
        whole: Option<(Health, u64)>,
        event_rv: Option<String>,
        tag: impl Into<Tag>,
    ) -> Vec<ParentRef> {
        let Tag { id, marks } = tag.into();
        let (health, shape) = whole.unzip();
        let mut s = self.state.lock();
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
                    marks,
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
    pub(super) fn trigger(&self, parents: Vec<ParentRef>) {
        for p in &parents {
            tracing::debug!(parent = %p, "member drift");
        }
        self.send(parents);
    }

    /// Whether `member` of parent `id`, to be applied with a body of hash `hash`, is
    /// unchanged since our last successful apply (and nobody changed it since): its UID if
    /// so.
    pub fn unchanged(&self, id: &str, member: &MemberRef, hash: u64) -> Option<String> {
        let s = self.state.lock();
        let gk = GroupKind::new(member.group.clone(), member.kind.clone());
        if !s.synced.contains(&gk) {
            return None;
        }
        let a = s.applied.get(id).and_then(|m| m.get(member))?;
        (a.hash == hash && s.live.get(member).map(|l| &l.rv) == Some(&a.rv)).then(|| a.uid.clone())
    }

    /// The live objects labelled `part-of=<id>` of `kinds`, as the watches see them
    /// (reference → resourceVersion and per-object controls), if every one of those kinds is watched and its initial
    /// list is done; `None` otherwise. Eventually consistent: an object labelled a moment ago
    /// may be missing, which makes a prune decision later, never a wrong one.
    pub fn members_of(
        &self,
        id: &str,
        kinds: &std::collections::BTreeSet<GroupKind>,
    ) -> Option<HashMap<MemberRef, (String, Marks)>> {
        let s = self.state.lock();
        if !kinds.iter().all(|gk| s.synced.contains(gk)) {
            return None;
        }
        if s.complete.as_ref().is_some_and(|c| !c.contains(id)) {
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
                .map(|(r, l)| (r.clone(), (l.rv.clone(), l.marks)))
                .collect(),
        )
    }

    /// Forgets what parent `id` last applied of `member`, which it skips now (its own
    /// controls, see [`crate::applyset::controls`]): another writer's changes to it are not
    /// drift, and it is sent again in full once it is no longer skipped.
    pub fn skipped(&self, id: &str, member: &MemberRef) {
        if let Some(a) = self.state.lock().applied.get_mut(id) {
            a.remove(member);
        }
    }

    /// The members parent `id` applied successfully (in this process), which are therefore
    /// its own.
    pub fn applied_by(&self, id: &str) -> HashSet<MemberRef> {
        self.state
            .lock()
            .applied
            .get(id)
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Marks an apply of `member` by parent `id` as in flight until the returned guard is
    /// recorded or dropped. Events of the member meanwhile do not count as drift by
    /// themselves: the watch can deliver our own write before the apply's answer.
    pub fn applying<'a>(&'a self, id: &str, member: &MemberRef) -> Applying<'a> {
        (self.state.lock().in_flight)
            .entry(member.clone())
            .or_default()
            .count += 1;
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
        let mut s = self.state.lock();
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
            let marks = seen.map_or(applied.marks, |l| l.marks);
            let changed = s.live.get(member).map(|l| &l.health) != Some(&health);
            s.live.insert(
                member.clone(),
                Labelled {
                    rv: applied.rv.clone(),
                    id: Some(id.to_string()),
                    health,
                    shape: applied.shape,
                    marks,
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

/// Whether a live version of [`shape`] `live` differs from what `applied` answered only in
/// status (known only for kinds watched whole).
pub(super) fn only_status_moved(applied: &Applied, live: Option<u64>) -> bool {
    applied.shape.is_some() && applied.shape == live
}

/// Whether resourceVersion `a` is older than `b` (both etcd revisions).
pub(super) fn older(a: &str, b: &str) -> bool {
    match (a.parse::<u64>(), b.parse::<u64>()) {
        (Ok(a), Ok(b)) => a < b,
        _ => false,
    }
}

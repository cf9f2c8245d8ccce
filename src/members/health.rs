//! Health between reconciles: the sets that wait or have health checks are *tracked*; the
//! health of their members comes from the member watches (or, for a kind the operator cannot
//! watch, from what the set's reconcile read), that of their checked objects from
//! [`super::checks`]. A tracked set whose health may have changed is marked *dirty* for the
//! health reporter (`controller::healthy`), which is woken.
//!
//! Promises: only a change of an object's health (or of whose it is) marks a set; an object
//! not observed yet counts in progress, one gone counts not found; a summary names at most
//! [`NOT_CURRENT_LISTED`] objects that are not current; messages are cut to
//! [`HEALTH_MESSAGE_BYTES`].

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::DynamicObject;
use parking_lot::Mutex;

use super::{MemberWatches, State, checks::CheckTarget};
use crate::{
    api::MemberRef,
    applyset::{GroupKind, LABEL_PART_OF, ParentRef},
    health::{self, Health, HealthExprs},
};

/// What the health of a tracked set is made of.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Targets {
    /// Members to assess (spec.wait), with whether their kind is assessed from the whole
    /// object ([`health::needs_object`]).
    pub members: Vec<MemberRef>,
    /// Objects of spec.healthChecks, with how to watch them.
    pub checks: Vec<CheckTarget>,
}

pub(super) struct Tracked {
    pub(super) parent: ParentRef,
    pub(super) targets: Targets,
    /// `targets.members`, to look up.
    pub(super) members: HashSet<MemberRef>,
    /// The health of members of kinds the operator cannot watch (their watch has not
    /// listed), as read by the set's last reconcile.
    pub(super) fetched: HashMap<MemberRef, Health>,
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

impl MemberWatches {
    /// Keeps the health of parent `id` (`parent`) made of `targets`: the members to assess
    /// (watched like every member) and the objects of its health checks (each watched by
    /// itself, shared by the sets that check it). Marks the set for the health reporter.
    pub fn track(self: &Arc<Self>, id: &str, parent: &ParentRef, targets: Targets) {
        let mut s = self.state.lock();
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
        let exprs = s.exprs.get(id).cloned();
        for c in &targets.checks {
            let entry = s.checked.entry(c.reference.clone()).or_default();
            let new_user = entry.users.insert(id.to_string());
            entry.target = Some(c.clone());
            // Already watched for other sets: watched anew, to be assessed by this set's
            // expressions too.
            let r = &c.reference;
            if new_user
                && exprs
                    .as_ref()
                    .is_some_and(|e| e.for_kind(&r.group, &r.kind).is_some())
                && let Some(h) = entry.watch.take()
            {
                h.abort();
                entry.health = None;
                entry.by_set.clear();
            }
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

    /// The compiled spec.healthCheckExprs of parent `id`, if it has some.
    pub fn exprs(&self, id: &str) -> Option<Arc<HealthExprs>> {
        self.state.lock().exprs.get(id).cloned()
    }

    /// Stops keeping the health of parent `id` (it no longer waits nor checks, or is gone);
    /// checks of other sets that waited for room get the watches it frees.
    pub fn untrack(self: &Arc<Self>, id: &str) {
        let mut s = self.state.lock();
        s.exprs.remove(id);
        s.exprs_changed.remove(id);
        if let Some(t) = s.tracked.remove(id) {
            for c in &t.targets.checks {
                self.stop_checking(&mut s, id, &c.reference);
            }
            self.start_waiting_checks(&mut s);
        }
        s.dirty.remove(id);
    }

    /// The tracked sets, among `a` and `b`, that assess member `r`.
    pub(super) fn tracking(
        &self,
        s: &State,
        r: &MemberRef,
        a: Option<&str>,
        b: Option<&str>,
    ) -> Vec<String> {
        [a, b]
            .into_iter()
            .flatten()
            .filter(|id| s.tracked.get(*id).is_some_and(|t| t.members.contains(r)))
            .map(str::to_string)
            .collect()
    }

    /// Marks sets for the health reporter (and wakes it).
    pub(super) fn mark_dirty(&self, s: &mut State, ids: Vec<String>) {
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
        let mut s = self.state.lock();
        if s.tracked.contains_key(id) {
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
        let s = self.state.lock();
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
        let mut s = self.state.lock();
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
        let mut s = self.state.lock();
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
        let s = self.state.lock();
        let t = s.tracked.get(id)?;
        let members = t
            .targets
            .members
            .iter()
            .map(|r| (r, member_health(&s, id, r, &t.fetched)));
        let checks = t.targets.checks.iter().map(|c| {
            let h = s
                .checked
                .get(&c.reference)
                .and_then(|c| c.by_set.get(id).or(c.health.as_ref()).cloned());
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
}

/// Longest health message kept per object (condition messages come from anyone).
const HEALTH_MESSAGE_BYTES: usize = 256;

/// The health of object `o` of kind `group`/`kind`, by the entry of `exprs` (its set's
/// spec.healthCheckExprs) for the kind if there is one, else by the built-in rules; its
/// message cut to [`HEALTH_MESSAGE_BYTES`].
pub fn health_of(
    o: &DynamicObject,
    group: &str,
    kind: &str,
    exprs: Option<&HealthExprs>,
) -> Health {
    let check = exprs.and_then(|e| e.for_kind(group, kind));
    let mut h = match check {
        Some(c) if o.metadata.deletion_timestamp.is_none() => {
            c.assess(&health::exprs::ObjectFields::Dynamic { object: o, kind })
        }
        _ => health::assess_dynamic(o, group, kind, k8s_openapi::jiff::Timestamp::now()),
    };
    if h.message.len() > HEALTH_MESSAGE_BYTES {
        h.message = crate::status::truncate(&h.message, HEALTH_MESSAGE_BYTES);
    }
    h
}

/// The compiled spec.healthCheckExprs of the set an object is part of (its part-of label),
/// if that set has some.
pub(super) fn exprs_of(state: &Mutex<State>, meta: &ObjectMeta) -> Option<Arc<HealthExprs>> {
    let id = meta.labels.as_ref()?.get(LABEL_PART_OF)?;
    state.lock().exprs.get(id).cloned()
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

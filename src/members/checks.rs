//! The watches of the objects named by `spec.healthChecks`: one watch per object (by name),
//! shared by the sets that check it, kept while one of them does.
//!
//! Promises: at most [`MAX_CHECKED_OBJECTS`] watched at once for the operator
//! (`--max-health-watches`) and [`MAX_CHECK_WATCHES_PER_SET`] for the sets that check an
//! object; an object left waiting for room is `Unknown`, saying why, and is watched as soon as
//! room frees; an object that cannot be watched is `Unknown`, saying why, rather than waited
//! for.

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
};

use futures::StreamExt;
use kube::{
    Api,
    core::DynamicObject,
    runtime::{WatchStreamExt, watcher},
};
use tokio::task::AbortHandle;

use super::{MemberWatches, State, health::health_of};
use crate::{
    api::MemberRef,
    health::{self, Health, HealthExprs},
};

/// An object of spec.healthChecks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckTarget {
    pub reference: MemberRef,
    pub resource: kube::discovery::ApiResource,
}

#[derive(Default)]
pub(super) struct Checked {
    /// By the built-in rules.
    pub(super) health: Option<Health>,
    /// By the spec.healthCheckExprs of each set that checks it and has an entry for its kind.
    pub(super) by_set: HashMap<String, Health>,
    pub(super) users: HashSet<String>,
    /// How to watch it (from the last set that checks it).
    pub(super) target: Option<CheckTarget>,
    /// Its watch; `None` while it waits for room (see [`MemberWatches::start_waiting_checks`]).
    pub(super) watch: Option<AbortHandle>,
}

impl MemberWatches {
    /// Starts the watches of checked objects that have none, while there is room: at most
    /// [`Self::check_cap`] for the operator, and at most [`MAX_CHECK_WATCHES_PER_SET`] for
    /// the sets that check an object (one of them must have room). An object left waiting is
    /// `Unknown`, saying why, and is watched as soon as room frees (a set's checks untracked
    /// or changed). Marks the sets whose checks changed.
    pub(super) fn start_waiting_checks(self: &Arc<Self>, s: &mut State) {
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
                if c.health.as_ref() != Some(&h) || !c.by_set.is_empty() {
                    c.health = Some(h);
                    c.by_set.clear();
                    marked.extend(c.users.iter().cloned());
                }
                continue;
            }
            // Not known until its watch lists.
            c.health = None;
            c.by_set.clear();
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
        (self.state.lock().checked)
            .values()
            .filter(|c| c.watch.is_some())
            .count()
    }

    /// `id` no longer checks `r`: its watch stops when no set checks it any more.
    pub(super) fn stop_checking(&self, s: &mut State, id: &str, r: &MemberRef) {
        let unused = match s.checked.get_mut(r) {
            Some(c) => {
                c.users.remove(id);
                c.by_set.remove(id);
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
        let mut events = watcher(api, cfg).backoff(crate::backoff::backoff()).boxed();
        let assess = |o: &DynamicObject| self.assess_checked(&r, o);
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
                    let h = pending
                        .take()
                        .unwrap_or_else(|| (Health::not_found(), Vec::new()));
                    self.checked_are(&r, h);
                }
                Ok(watcher::Event::Apply(o)) => self.checked_are(&r, assess(&o)),
                Ok(watcher::Event::Delete(_)) => self.checked_is(&r, Health::not_found()),
            }
        }
    }

    /// Whether the health of checked object `r` is known from its watch.
    fn has_checked(&self, r: &MemberRef) -> bool {
        self.state.lock().checked.get(r).is_some_and(|c| {
            c.health
                .as_ref()
                .is_some_and(|h| h.status != health::Status::Unknown)
        })
    }

    /// Records the health of a checked object (by every rule); marks the sets that check it
    /// when it changed.
    fn checked_is(&self, r: &MemberRef, h: Health) {
        self.checked_are(r, (h, Vec::new()));
    }

    /// Records the health of a checked object by the built-in rules and by the expressions
    /// of the sets that have some for its kind; marks the sets that check it when it changed.
    fn checked_are(&self, r: &MemberRef, (h, by_set): (Health, Vec<(String, Health)>)) {
        let mut s = self.state.lock();
        let Some(c) = s.checked.get_mut(r) else {
            return;
        };
        let by_set: HashMap<String, Health> = by_set.into_iter().collect();
        if c.health.as_ref() == Some(&h) && c.by_set == by_set {
            return;
        }
        c.health = Some(h);
        c.by_set = by_set;
        let users = c.users.iter().cloned().collect();
        self.mark_dirty(&mut s, users);
    }

    /// The health of checked object `o` by the built-in rules, and by the expressions of
    /// each set that checks it and has an entry for its kind (evaluated outside the lock).
    fn assess_checked(&self, r: &MemberRef, o: &DynamicObject) -> (Health, Vec<(String, Health)>) {
        let users: Vec<(String, Arc<HealthExprs>)> = {
            let s = self.state.lock();
            let Some(c) = s.checked.get(r) else {
                return (health_of(o, &r.group, &r.kind, None), Vec::new());
            };
            c.users
                .iter()
                .filter_map(|u| Some((u.clone(), s.exprs.get(u)?.clone())))
                .filter(|(_, e)| e.for_kind(&r.group, &r.kind).is_some())
                .collect()
        };
        let by_set = users
            .into_iter()
            .map(|(u, e)| (u, health_of(o, &r.group, &r.kind, Some(&e))))
            .collect();
        (health_of(o, &r.group, &r.kind, None), by_set)
    }

    /// Watches checked objects `refs` anew (a set that checks them changed its expressions):
    /// each is not known until its new watch lists.
    pub(super) fn recheck(self: &Arc<Self>, refs: &[MemberRef]) {
        let mut s = self.state.lock();
        for r in refs {
            if let Some(c) = s.checked.get_mut(r)
                && let Some(h) = c.watch.take()
            {
                h.abort();
                c.health = None;
                c.by_set.clear();
            }
        }
        self.start_waiting_checks(&mut s);
    }
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

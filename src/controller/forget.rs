//! Forgetting a deleted set: every map the operator keeps per set lets it go, and the size of
//! each is a gauge (`applyset_tracked_sets{map}`), so that a leak shows.
//!
//! The controller learns that a set is gone, or no longer its own, four ways, and each
//! forgets it ([`Context::forget`]):
//! - the watch of parents delivers its deletion (or it leaves the label selector: moved to
//!   another shard);
//! - a new list of the watch no longer has it in the cache (`cached`: under `--shards auto`,
//!   it moved to another replica; or it was deleted while the watch was away);
//! - a reconcile is due for a parent the cache no longer holds (kube-runtime answers
//!   `ObjectNotFound`: a retry or a parked reconcile woken after a deletion that the watch
//!   missed while it was listing again, or one that ran while the set left the cache);
//! - the cleanup behind the finalizer forgets what the set held (its members, health, source
//!   references, dependencies) before deleting its members.
//!
//! The maps, by the `map` label:
//!
//! | map | what | keyed by |
//! |---|---|---|
//! | `backoff` | consecutive failures (the retry backoff) | set |
//! | `source_index` | ConfigMaps and Secrets a set references | set |
//! | `member_applies` | what a set last applied of each member | set |
//! | `member_parents` | the sets whose members are watched | set |
//! | `kind_refs` | the member kinds each set holds (the watches' reference count) | set |
//! | `health_tracked` | the sets whose health is kept | set |
//! | `health_reports` | what the health reporter last wrote of a set | set |
//! | `health_waits` | a set's wait for health in progress | set |
//! | `depends_on` | what a set depends on | set |
//! | `dependents` | each dependency's dependents (gone with its last dependent) | set |
//! | `listed_applysets`, `listed_cluster_applysets` | what the dependency rules keep of every parent listed (whichever replica owns it; gone with its deletion) | set |
//! | `parked` | reconciles parked for their namespace's turn | set |
//! | `namespaces` | namespaces with reconciles in progress or parked | namespace |
//! | `build_namespaces` | namespaces with a kustomize build running or waiting | namespace |
//! | `spec_sizes` | the size of a set's spec, by UID and generation | set |
//! | `identities` | the user each set acts as (the impersonating clients' users) | set |
//! | `info_series` | `applyset_info` series | set |
//! | `member_counts` | each set's count in `applyset_managed_members` | set |
//! | `queue` | sets waiting in the work queue or being reconciled | set |

use std::collections::HashMap;

use super::Context;
use crate::applyset::ParentRef;

/// The user each set acts as, and how many sets act as each user: an impersonating client no
/// set uses any more is dropped (not only pushed out by newer ones at the cap).
#[derive(Default)]
pub struct Identities {
    by_parent: HashMap<ParentRef, String>,
    sets: HashMap<String, usize>,
}

impl Identities {
    /// `parent` acts as `user` now. Returns the user it acted as before if no set acts as
    /// that user any more.
    pub fn set(&mut self, parent: &ParentRef, user: &str) -> Option<String> {
        if self.by_parent.get(parent).is_some_and(|u| u == user) {
            return None;
        }
        *self.sets.entry(user.to_string()).or_insert(0) += 1;
        let before = self.by_parent.insert(parent.clone(), user.to_string())?;
        self.release(before)
    }

    /// `parent` is gone (or acts as the operator now). Returns the user it acted as if no set
    /// acts as that user any more.
    pub fn forget(&mut self, parent: &ParentRef) -> Option<String> {
        let before = self.by_parent.remove(parent)?;
        self.release(before)
    }

    fn release(&mut self, user: String) -> Option<String> {
        let n = self.sets.get_mut(&user)?;
        *n = n.saturating_sub(1);
        if *n > 0 {
            return None;
        }
        self.sets.remove(&user);
        Some(user)
    }

    /// Sets known to act as a user.
    pub fn len(&self) -> usize {
        self.by_parent.len()
    }
}

impl Context {
    /// Forgets `parent` (deleted, or no longer this operator's): every per-set map lets it
    /// go.
    pub(super) fn forget(&self, parent: &ParentRef) {
        let key = parent.to_string();
        self.failures.lock().remove(&key);
        self.sources.index.remove(parent);
        let id = parent.id();
        self.members.forget(&id);
        self.health.forget(&id);
        self.dependencies.forget(parent);
        self.workers.forget(parent);
        self.spec_sizes.forget(parent);
        self.forget_identity(parent);
        self.metrics.set_info(&key, None);
        self.metrics.gone(parent.kind.kind(), &key);
        self.metrics.set_members(&key, 0);
    }

    /// Records the user `parent` acts as (`None`: the operator), dropping the impersonating
    /// client of a user no set acts as any more.
    pub(super) fn acting_as(&self, parent: &ParentRef, user: Option<&str>) {
        let unused = {
            let mut ids = self.identities.lock();
            match user {
                Some(user) => ids.set(parent, user),
                None => ids.forget(parent),
            }
        };
        self.drop_client(unused);
    }

    fn forget_identity(&self, parent: &ParentRef) {
        let unused = self.identities.lock().forget(parent);
        self.drop_client(unused);
    }

    fn drop_client(&self, user: Option<String>) {
        if let Some(user) = user {
            self.impersonated.lock().remove(&user);
        }
    }

    /// The size of each per-set map (see the module documentation).
    pub(super) fn tracked_sets(&self) -> Vec<(&'static str, usize)> {
        let mut out = vec![
            ("backoff", self.failures.lock().len()),
            ("source_index", self.sources.index.len()),
        ];
        out.extend(self.members.tracked_sets());
        out.extend(self.health.tracked_sets());
        out.extend(self.dependencies.tracked_sets());
        out.extend([
            ("parked", self.workers.in_progress.parked()),
            ("namespaces", self.workers.in_progress.keys()),
            (
                "build_namespaces",
                self.sources.kustomize.slots().namespaces(),
            ),
            ("spec_sizes", self.spec_sizes.len()),
            ("identities", self.identities.lock().len()),
        ]);
        out.extend(self.metrics.tracked_sets());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_no_set_acts_as_any_more_is_released() {
        let (a, b) = (
            ParentRef::applyset("ns", "a"),
            ParentRef::applyset("ns", "b"),
        );
        let mut ids = Identities::default();
        assert_eq!(ids.set(&a, "sa-1"), None);
        assert_eq!(ids.set(&a, "sa-1"), None, "unchanged");
        assert_eq!(ids.set(&b, "sa-1"), None);
        // a moves to another user: sa-1 is still b's.
        assert_eq!(ids.set(&a, "sa-2"), None);
        assert_eq!(ids.forget(&b).as_deref(), Some("sa-1"));
        assert_eq!(ids.forget(&a).as_deref(), Some("sa-2"));
        assert_eq!(ids.forget(&a), None, "already forgotten");
        assert_eq!((ids.len(), ids.sets.len()), (0, 0));
        // A set that cycles through users keeps one.
        for i in 0..10 {
            let released = ids.set(&a, &format!("u{i}"));
            assert_eq!(released, (i > 0).then(|| format!("u{}", i - 1)));
        }
        assert_eq!((ids.len(), ids.sets.len()), (1, 1));
    }
}

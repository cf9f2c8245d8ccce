//! The reference count of the member-kind watches: which sets hold which member kinds (not
//! the kinds a parent records, `applyset::group_kinds`, nor the plugin's offline
//! `known_kinds`).
//!
//! A set holds a kind once the API server has accepted an apply (or a server-side dry-run) of
//! a member of that kind for it, and for as long as it still declares the kind. A kind no set
//! holds is *released*; its watch is stopped once it has stayed released for a grace period
//! (so a set that drops a kind and takes it back a moment later does not restart a watch).
//! Pure: the caller starts and stops the watches.

use std::{
    collections::{HashMap, HashSet},
    time::{Duration, Instant},
};

use crate::applyset::GroupKind;

/// How long a kind no set declares keeps its watch.
pub const GRACE: Duration = Duration::from_secs(10);

#[derive(Debug, Default)]
pub struct WatchRefs {
    /// Set ID → the kinds it holds.
    by_set: HashMap<String, HashSet<GroupKind>>,
    /// Kind → how many sets hold it (absent: none).
    counts: HashMap<GroupKind, usize>,
    /// Kinds no set holds any more, since when.
    released: HashMap<GroupKind, Instant>,
}

impl WatchRefs {
    /// Set `id` holds `gk` (an apply of it was accepted).
    pub fn hold(&mut self, id: &str, gk: &GroupKind) {
        if self
            .by_set
            .entry(id.to_string())
            .or_default()
            .insert(gk.clone())
        {
            *self.counts.entry(gk.clone()).or_default() += 1;
            self.released.remove(gk);
        }
    }

    /// Set `id` declares only `declared` now: it releases the other kinds it held. Returns
    /// the kinds that no set holds any more.
    pub fn retain(
        &mut self,
        id: &str,
        declared: &HashSet<GroupKind>,
        now: Instant,
    ) -> Vec<GroupKind> {
        let Some(held) = self.by_set.get_mut(id) else {
            return Vec::new();
        };
        let dropped: Vec<GroupKind> = held.difference(declared).cloned().collect();
        held.retain(|gk| declared.contains(gk));
        if held.is_empty() {
            self.by_set.remove(id);
        }
        self.release(dropped, now)
    }

    /// Set `id` is gone: it releases every kind it held. Returns the kinds that no set holds
    /// any more.
    pub fn forget(&mut self, id: &str, now: Instant) -> Vec<GroupKind> {
        let dropped = self.by_set.remove(id).unwrap_or_default();
        self.release(dropped.into_iter().collect(), now)
    }

    fn release(&mut self, kinds: Vec<GroupKind>, now: Instant) -> Vec<GroupKind> {
        let mut out = Vec::new();
        for gk in kinds {
            let Some(n) = self.counts.get_mut(&gk) else {
                continue;
            };
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.counts.remove(&gk);
                self.released.insert(gk.clone(), now);
                out.push(gk);
            }
        }
        out
    }

    /// Sets that hold a kind.
    pub fn sets(&self) -> usize {
        self.by_set.len()
    }

    /// Whether some set holds `gk`.
    pub fn is_held(&self, gk: &GroupKind) -> bool {
        self.counts.contains_key(gk)
    }

    /// Whether `gk`'s watch may stop at `now`: no set holds it, and none has for `grace`.
    pub fn expired(&self, gk: &GroupKind, now: Instant, grace: Duration) -> bool {
        !self.is_held(gk)
            && self
                .released
                .get(gk)
                .is_none_or(|since| now.saturating_duration_since(*since) >= grace)
    }

    /// Forgets that `gk` was released (its watch stopped).
    pub fn stopped(&mut self, gk: &GroupKind) {
        self.released.remove(gk);
    }

    /// How many kinds some set holds.
    pub fn held(&self) -> usize {
        self.counts.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gk(k: &str) -> GroupKind {
        GroupKind::new("example.com", k)
    }

    #[test]
    fn a_kind_is_released_when_the_last_set_stops_declaring_it() {
        let mut r = WatchRefs::default();
        let t0 = Instant::now();
        r.hold("a", &gk("Foo"));
        r.hold("a", &gk("Foo"));
        r.hold("b", &gk("Foo"));
        r.hold("b", &gk("Bar"));
        assert_eq!(r.held(), 2);
        assert!(
            r.retain("a", &HashSet::new(), t0).is_empty(),
            "b still holds Foo"
        );
        assert!(r.is_held(&gk("Foo")));
        let bar_only: HashSet<_> = [gk("Bar")].into();
        assert_eq!(r.retain("b", &bar_only, t0), vec![gk("Foo")]);
        assert!(!r.is_held(&gk("Foo")));
        assert_eq!(r.forget("b", t0), vec![gk("Bar")]);
        assert_eq!(r.held(), 0);
        assert!(
            r.forget("b", t0).is_empty(),
            "forgetting twice releases nothing"
        );
    }

    #[test]
    fn a_released_kind_expires_after_the_grace_unless_held_again() {
        let mut r = WatchRefs::default();
        let t0 = Instant::now();
        let grace = Duration::from_secs(10);
        r.hold("a", &gk("Foo"));
        assert!(!r.expired(&gk("Foo"), t0, grace), "held");
        r.forget("a", t0);
        assert!(!r.expired(&gk("Foo"), t0 + Duration::from_secs(9), grace));
        assert!(r.expired(&gk("Foo"), t0 + grace, grace));
        // Held again within the grace: it does not expire; released again later, the grace
        // counts from the new release.
        r.hold("b", &gk("Foo"));
        assert!(!r.expired(&gk("Foo"), t0 + grace, grace));
        let t1 = t0 + Duration::from_secs(5);
        r.forget("b", t1);
        assert!(!r.expired(&gk("Foo"), t0 + grace, grace));
        assert!(r.expired(&gk("Foo"), t1 + grace, grace));
        r.stopped(&gk("Foo"));
        assert!(
            r.expired(&gk("Foo"), t1, grace),
            "stopped: nothing to wait for"
        );
    }
}

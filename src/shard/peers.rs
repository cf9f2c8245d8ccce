//! Which replicas are live, as this replica sees their Leases, measured on its own clock.
//!
//! Every replica renews a Lease of its own. An observer does not compare the Lease's
//! `renewTime` with its own wall clock (the replicas' wall clocks may disagree): it notes, on
//! its monotonic clock, when it last saw a Lease's renewal *change*, and holds the replica
//! live for the Lease's duration from then (client-go's leader election observes the same
//! way). A Lease seen for the first time counts as renewed at that instant, so a new replica
//! waits a whole duration before it takes over from one that may have died just before it
//! started. A deleted Lease, or one whose holder is cleared, is gone at once (a replica that
//! shuts down cleanly hands its sets over without waiting).
//!
//! A peer whose time is up is not dropped on the strength of the watch alone (a watch can
//! stall without an error): it stays live until a read of its Lease made after its time was
//! up confirms that it did not renew ([`Peers::expired_unconfirmed`], [`Peers::confirm`]).
//! A peer dead for many durations has its Lease deleted by the others
//! ([`Peers::long_dead`]).
//!
//! The assumption, stated in docs/design.md: the replicas' monotonic clocks advance at the
//! same rate (within a small drift that the renewal margin covers); their wall clocks may
//! differ arbitrarily.

use std::{
    collections::{BTreeSet, HashMap},
    time::{Duration, Instant},
};

/// What an observer keeps of one replica's Lease.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Seen {
    /// `holderIdentity` and `renewTime`, as written: a change of either is a renewal.
    marker: (String, String),
    /// When this observer saw the marker change (its monotonic clock).
    at: Instant,
    duration: Duration,
    /// A read of the Lease after `at + duration` found the same marker: it did not renew.
    confirmed: bool,
    /// The Lease's resourceVersion as last read (the precondition of its deletion).
    resource_version: String,
}

impl Seen {
    fn live(&self, now: Instant) -> bool {
        now < self.at + self.duration || !self.confirmed
    }
}

/// One Lease as read: its replica's name, holder (`<name>/<incarnation>`, empty when
/// released), `renewTime` as written, and duration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseView {
    pub name: String,
    pub holder: String,
    pub renew_time: String,
    pub duration: Duration,
    pub resource_version: String,
}

/// The replicas this replica sees.
#[derive(Debug, Default)]
pub struct Peers {
    seen: HashMap<String, Seen>,
}

impl Peers {
    /// A Lease added or changed, observed at `now`. Returns whether it counts as a renewal
    /// (a new holder or renewTime, or a Lease not seen before).
    pub fn observe(&mut self, lease: &LeaseView, now: Instant) -> bool {
        if lease.holder.is_empty() {
            self.seen.remove(&lease.name);
            return false;
        }
        let marker = (lease.holder.clone(), lease.renew_time.clone());
        match self.seen.get_mut(&lease.name) {
            Some(s) if s.marker == marker => {
                s.duration = lease.duration;
                s.resource_version.clone_from(&lease.resource_version);
                false
            }
            _ => {
                self.seen.insert(
                    lease.name.clone(),
                    Seen {
                        marker,
                        at: now,
                        duration: lease.duration,
                        confirmed: false,
                        resource_version: lease.resource_version.clone(),
                    },
                );
                true
            }
        }
    }

    /// Forgets every replica whose Lease is not in `names` (a list of the Leases just
    /// completed: one deleted while the watch was away sent no event).
    pub fn retain(&mut self, names: &std::collections::HashSet<String>) {
        self.seen.retain(|n, _| names.contains(n));
    }

    /// The replicas whose time is up at `now` but whose Lease was not read since.
    pub fn expired_unconfirmed(&self, now: Instant) -> Vec<String> {
        let expired = |s: &Seen| !s.confirmed && now >= s.at + s.duration;
        self.seen
            .iter()
            .filter(|(_, s)| expired(s))
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// A read of `name`'s Lease made after its time was up (and observed first) found no
    /// renewal: it is no longer live.
    pub fn confirm(&mut self, name: &str) {
        if let Some(s) = self.seen.get_mut(name) {
            s.confirmed = true;
        }
    }

    /// The replicas confirmed dead for `times` their duration at `now`, with the
    /// resourceVersion of their Lease as last read.
    pub fn long_dead(&self, now: Instant, times: u32) -> Vec<(String, String)> {
        self.seen
            .iter()
            .filter(|(_, s)| s.confirmed && now >= s.at + s.duration * times)
            .map(|(n, s)| (n.clone(), s.resource_version.clone()))
            .collect()
    }

    /// A Lease deleted.
    pub fn gone(&mut self, name: &str) {
        self.seen.remove(name);
    }

    /// The names of the replicas live at `now`.
    pub fn live(&self, now: Instant) -> BTreeSet<String> {
        self.seen
            .iter()
            .filter(|(_, s)| s.live(now))
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// The earliest instant after `now` at which a live replica stops being live unless it
    /// renews (when the assignment must be computed again), if any.
    pub fn next_expiry(&self, now: Instant) -> Option<Instant> {
        self.seen
            .values()
            .map(|s| s.at + s.duration)
            .filter(|&t| t > now)
            .min()
    }
}

/// Until when this replica's own Lease is valid: `duration` from the moment its last
/// successful renewal was *sent* (before the API server wrote it, so no observer can have
/// seen it earlier), less `margin` for the drift of the clocks.
pub fn own_valid_until(renew_sent: Instant, duration: Duration, margin: Duration) -> Instant {
    renew_sent + duration.saturating_sub(margin)
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: Duration = Duration::from_secs(15);

    fn lease(name: &str, holder: &str, renew: &str) -> LeaseView {
        LeaseView {
            name: name.into(),
            holder: holder.into(),
            renew_time: renew.into(),
            duration: D,
            resource_version: format!("rv-{renew}"),
        }
    }

    /// `p` after reads of every Lease whose time is up found them unrenewed.
    fn confirmed(mut p: Peers, now: Instant) -> Peers {
        for n in p.expired_unconfirmed(now) {
            p.confirm(&n);
        }
        p
    }

    fn names(v: &[&str]) -> BTreeSet<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_lease_is_live_for_its_duration_from_when_it_was_seen_to_change() {
        let t0 = Instant::now();
        let mut p = Peers::default();
        p.observe(&lease("a", "a/1", "10:00:00"), t0);
        assert_eq!(p.live(t0), names(&["a"]));
        assert_eq!(p.live(t0 + D - Duration::from_millis(1)), names(&["a"]));
        assert!(
            p.expired_unconfirmed(t0 + D - Duration::from_millis(1))
                .is_empty()
        );
        assert_eq!(
            p.live(t0 + D),
            names(&["a"]),
            "live until a read confirms it"
        );
        assert_eq!(p.expired_unconfirmed(t0 + D), ["a".to_string()]);
        // The same renewTime seen again is no renewal.
        p.observe(&lease("a", "a/1", "10:00:00"), t0 + Duration::from_secs(10));
        let mut p = confirmed(p, t0 + D);
        assert_eq!(p.live(t0 + D), names(&[]));
        // A new renewTime is: live for D from this observation, whatever the time it names.
        p.observe(&lease("a", "a/1", "09:00:00"), t0 + Duration::from_secs(20));
        assert_eq!(p.live(t0 + Duration::from_secs(34)), names(&["a"]));
        let p = confirmed(p, t0 + Duration::from_secs(35));
        assert_eq!(p.live(t0 + Duration::from_secs(35)), names(&[]));
    }

    #[test]
    fn a_new_holder_is_a_renewal_and_a_cleared_or_deleted_lease_is_gone_at_once() {
        let t0 = Instant::now();
        let mut p = Peers::default();
        p.observe(&lease("a", "a/1", "t"), t0);
        p.observe(&lease("b", "b/1", "t"), t0);
        let later = t0 + Duration::from_secs(10);
        p.observe(&lease("a", "a/2", "t"), later);
        assert_eq!(
            p.live(t0 + D),
            names(&["a", "b"]),
            "a renewed; b not confirmed"
        );
        let mut p = confirmed(p, t0 + D);
        assert_eq!(
            p.live(t0 + D),
            names(&["a"]),
            "b's time is up and confirmed"
        );
        p.observe(&lease("a", "", "t"), later);
        assert_eq!(p.live(later), names(&["b"]));
        p.gone("b");
        assert_eq!(p.live(later), names(&[]));
    }

    #[test]
    fn a_relist_forgets_leases_deleted_meanwhile_and_the_long_dead_are_collected() {
        let t0 = Instant::now();
        let mut p = Peers::default();
        p.observe(&lease("a", "a/1", "1"), t0);
        p.observe(&lease("b", "b/1", "1"), t0);
        p.retain(&["a".to_string()].into());
        assert_eq!(p.live(t0), names(&["a"]));
        assert!(
            p.long_dead(t0 + D * 20, 10).is_empty(),
            "not confirmed dead"
        );
        let p = confirmed(p, t0 + D);
        assert!(p.long_dead(t0 + D * 9, 10).is_empty());
        assert_eq!(
            p.long_dead(t0 + D * 10, 10),
            [("a".to_string(), "rv-1".to_string())]
        );
    }

    #[test]
    fn the_next_expiry_is_the_earliest_of_the_live() {
        let t0 = Instant::now();
        let mut p = Peers::default();
        assert_eq!(p.next_expiry(t0), None);
        p.observe(&lease("a", "a/1", "1"), t0);
        p.observe(&lease("b", "b/1", "1"), t0 + Duration::from_secs(5));
        assert_eq!(p.next_expiry(t0), Some(t0 + D));
        assert_eq!(p.next_expiry(t0 + D), Some(t0 + Duration::from_secs(5) + D));
        assert_eq!(p.next_expiry(t0 + D + Duration::from_secs(5)), None);
    }

    #[test]
    fn own_validity_counts_from_the_renewal_sent_less_the_margin() {
        let t0 = Instant::now();
        assert_eq!(
            own_valid_until(t0, D, Duration::from_secs(2)),
            t0 + Duration::from_secs(13)
        );
        assert_eq!(own_valid_until(t0, Duration::from_secs(1), D), t0);
    }
}

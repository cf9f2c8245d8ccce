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
}

/// One Lease as read: its replica's name, holder (`<name>/<incarnation>`, empty when
/// released), `renewTime` as written, and duration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseView {
    pub name: String,
    pub holder: String,
    pub renew_time: String,
    pub duration: Duration,
}

/// The replicas this replica sees.
#[derive(Debug, Default)]
pub struct Peers {
    seen: HashMap<String, Seen>,
}

impl Peers {
    /// A Lease added or changed, observed at `now`.
    pub fn observe(&mut self, lease: &LeaseView, now: Instant) {
        if lease.holder.is_empty() {
            self.seen.remove(&lease.name);
            return;
        }
        let marker = (lease.holder.clone(), lease.renew_time.clone());
        match self.seen.get_mut(&lease.name) {
            Some(s) if s.marker == marker => s.duration = lease.duration,
            _ => {
                self.seen.insert(
                    lease.name.clone(),
                    Seen {
                        marker,
                        at: now,
                        duration: lease.duration,
                    },
                );
            }
        }
    }

    /// A Lease deleted.
    pub fn gone(&mut self, name: &str) {
        self.seen.remove(name);
    }

    /// The names of the replicas live at `now`.
    pub fn live(&self, now: Instant) -> BTreeSet<String> {
        self.seen
            .iter()
            .filter(|(_, s)| now < s.at + s.duration)
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// The holder (`<name>/<incarnation>`) of `name`'s Lease, if it is live at `now`.
    pub fn live_holder(&self, name: &str, now: Instant) -> Option<&str> {
        self.seen
            .get(name)
            .filter(|s| now < s.at + s.duration)
            .map(|s| s.marker.0.as_str())
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
        }
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
        assert_eq!(p.live(t0 + D), names(&[]));
        // The same renewTime seen again is no renewal.
        p.observe(&lease("a", "a/1", "10:00:00"), t0 + Duration::from_secs(10));
        assert_eq!(p.live(t0 + D), names(&[]));
        // A new renewTime is: live for D from this observation, whatever the time it names.
        p.observe(&lease("a", "a/1", "09:00:00"), t0 + Duration::from_secs(20));
        assert_eq!(p.live(t0 + Duration::from_secs(34)), names(&["a"]));
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
        assert_eq!(p.live_holder("a", t0 + D), Some("a/2"));
        p.observe(&lease("a", "", "t"), later);
        assert_eq!(p.live(later), names(&["b"]));
        p.gone("b");
        assert_eq!(p.live(later), names(&[]));
        assert_eq!(p.live_holder("b", later), None);
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

//! Which parents a controller's cache holds: the sets this replica reconciles (under
//! `--shards auto` the ones it owns; without sharding every parent its watch lists). A set
//! another replica owns costs this one only what the dependency rules keep of it
//! (`dependencies`), not its object.
//!
//! It also names the parents that left the cache without a Delete event: a new list (the
//! watch restarted at a change of this replica's buckets, or it listed again after a gap)
//! that no longer has them, because they moved to another replica or were deleted meanwhile.
//! The controller forgets them.

use std::collections::HashMap;

use kube::runtime::watcher::Event;

use crate::{applyset::ParentRef, parent::Parent};

/// Known parents, each with its UID.
type Known = HashMap<ParentRef, Option<String>>;

/// The parents in the cache, as its watch's events put them there.
#[derive(Default)]
pub(super) struct Cached {
    now: Known,
    /// Those of a list in progress.
    listing: Option<Known>,
}

/// What becomes of one event of the watch.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Admitted {
    /// Whether the event goes on to the cache.
    pub cache: bool,
    /// Parents (with their UIDs) the cache no longer holds, though no Delete said so.
    pub left: Vec<(ParentRef, Option<String>)>,
}

impl Cached {
    /// Admits `event` to the cache or not. `owns` says, by ApplySet ID, which sets this
    /// replica reconciles. A set the cache holds and this replica no longer owns stays, kept
    /// current, until the next list (its reconcile forgets it).
    pub(super) fn admit<P: Parent>(
        &mut self,
        event: &Event<P>,
        owns: impl Fn(&str) -> bool,
    ) -> Admitted {
        let only = |cache| Admitted {
            cache,
            left: Vec::new(),
        };
        match event {
            Event::Init => {
                self.listing = Some(Known::new());
                only(true)
            }
            Event::InitApply(o) => {
                let parent = o.parent_ref();
                if !owns(&parent.id()) {
                    return only(false);
                }
                let into = self.listing.as_mut().unwrap_or(&mut self.now);
                into.insert(parent, o.meta().uid.clone());
                only(true)
            }
            Event::InitDone => {
                let Some(listed) = self.listing.take() else {
                    return only(true);
                };
                let before = std::mem::replace(&mut self.now, listed);
                let mut left: Vec<_> = before
                    .into_iter()
                    .filter(|(p, _)| !self.now.contains_key(p))
                    .collect();
                left.sort_by_key(|(p, _)| p.to_string());
                Admitted { cache: true, left }
            }
            Event::Apply(o) => {
                let parent = o.parent_ref();
                if !owns(&parent.id()) && !self.now.contains_key(&parent) {
                    return only(false);
                }
                self.now.insert(parent, o.meta().uid.clone());
                only(true)
            }
            Event::Delete(o) => {
                let parent = o.parent_ref();
                self.now.remove(&parent);
                if let Some(listing) = self.listing.as_mut() {
                    listing.remove(&parent);
                }
                only(true)
            }
        }
    }

    /// How many parents the cache holds.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.now.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ApplySet, ApplySetSpec};

    fn set(name: &str) -> ApplySet {
        let mut o = ApplySet::new(name, ApplySetSpec::default());
        o.metadata.namespace = Some("t".into());
        o.metadata.uid = Some(format!("uid-{name}"));
        o
    }

    fn id(name: &str) -> String {
        set(name).parent_ref().id()
    }

    fn left(names: &[&str]) -> Vec<(ParentRef, Option<String>)> {
        names
            .iter()
            .map(|n| (set(n).parent_ref(), Some(format!("uid-{n}"))))
            .collect()
    }

    fn list(c: &mut Cached, names: &[&str], owns: &dyn Fn(&str) -> bool) -> Admitted {
        assert!(c.admit::<ApplySet>(&Event::Init, owns).cache);
        for n in names {
            c.admit(&Event::InitApply(set(n)), owns);
        }
        c.admit::<ApplySet>(&Event::InitDone, owns)
    }

    #[test]
    fn only_the_sets_this_replica_owns_are_cached() {
        let mine: Vec<String> = ["a", "b"].iter().map(|n| id(n)).collect();
        let owns = |i: &str| mine.iter().any(|m| m == i);
        let mut c = Cached::default();
        assert!(c.admit::<ApplySet>(&Event::Init, owns).cache);
        assert!(c.admit(&Event::InitApply(set("a")), owns).cache);
        assert!(!c.admit(&Event::InitApply(set("x")), owns).cache);
        assert_eq!(
            c.admit::<ApplySet>(&Event::InitDone, owns),
            Admitted {
                cache: true,
                left: vec![]
            }
        );
        assert!(c.admit(&Event::Apply(set("b")), owns).cache);
        assert!(!c.admit(&Event::Apply(set("y")), owns).cache);
        // Deletions always go through (the cache ignores one it does not hold).
        assert!(c.admit(&Event::Delete(set("y")), owns).cache);
        assert_eq!(c.len(), 2);
    }

    #[test]
    fn without_sharding_every_parent_is_cached() {
        let mut c = Cached::default();
        let all = |_: &str| true;
        list(&mut c, &["a", "b"], &all);
        assert!(c.admit(&Event::Apply(set("c")), all).cache);
        assert_eq!(c.len(), 3);
    }

    #[test]
    fn a_new_list_names_the_cached_sets_it_no_longer_has() {
        let mut c = Cached::default();
        let all = |_: &str| true;
        list(&mut c, &["a", "b", "c"], &all);
        // Deleted while the watch was away: listed again without it.
        assert_eq!(list(&mut c, &["a", "b"], &all).left, left(&["c"]));
        // Moved to another replica: the restarted watch's list does not admit it.
        let not_b = |i: &str| i != id("b");
        assert_eq!(list(&mut c, &["a", "b"], &not_b).left, left(&["b"]));
        assert_eq!(c.len(), 1);
        // A set gained is in the next list.
        assert_eq!(list(&mut c, &["a", "b"], &all).left, vec![]);
        assert_eq!(c.len(), 2);
    }

    #[test]
    fn a_set_lost_stays_current_until_the_next_list_and_a_deletion_leaves_nothing() {
        let mut c = Cached::default();
        let all = |_: &str| true;
        list(&mut c, &["a", "b"], &all);
        let none = |_: &str| false;
        assert!(c.admit(&Event::Apply(set("a")), none).cache);
        assert!(c.admit(&Event::Delete(set("b")), none).cache);
        // A deletion during a list: not named as left at its end.
        assert!(c.admit::<ApplySet>(&Event::Init, all).cache);
        c.admit(&Event::InitApply(set("a")), all);
        c.admit(&Event::Delete(set("a")), all);
        assert_eq!(c.admit::<ApplySet>(&Event::InitDone, all).left, vec![]);
        assert_eq!(c.len(), 0);
    }
}

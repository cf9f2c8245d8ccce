//! Which parents a controller's cache holds: the sets this replica reconciles (under
//! `--shards auto` the ones it owns; without sharding every parent its watch lists). A set
//! another replica owns costs this one only what the dependency rules keep of it
//! (`dependencies`), not its object.
//!
//! A list (the watch started again at a change of this replica's buckets, or listing again
//! after a gap) fills the cache only when it ends: kube-runtime's store swaps it in at
//! InitDone. So at its end this names the parents that left the cache without a Delete
//! (moved to another replica, or deleted meanwhile), for the controller to forget, and the
//! ones that entered it (gained, or created meanwhile), for the controller to reconcile: a
//! reconcile that their list's own events triggered may have looked for them in the cache
//! before the swap, and found nothing.

use std::collections::HashSet;

use kube::runtime::watcher::Event;

use crate::{applyset::ParentRef, parent::Parent};

/// The parents in the cache, as its watch's events put them there.
#[derive(Default)]
pub(super) struct Cached {
    now: HashSet<ParentRef>,
    /// Those of a list in progress.
    listing: Option<HashSet<ParentRef>>,
}

/// What becomes of one event of the watch.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Admitted {
    /// Whether the event goes on to the cache.
    pub cache: bool,
    /// At the end of a list: the parents the cache no longer holds, though no Delete said so.
    pub left: Vec<ParentRef>,
    /// At the end of a list: the parents the cache holds now and did not before.
    pub entered: Vec<ParentRef>,
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
            ..Admitted::default()
        };
        match event {
            Event::Init => {
                self.listing = Some(HashSet::new());
                only(true)
            }
            Event::InitApply(o) => {
                let parent = o.parent_ref();
                if !owns(&parent.id()) {
                    return only(false);
                }
                self.listing
                    .as_mut()
                    .unwrap_or(&mut self.now)
                    .insert(parent);
                only(true)
            }
            Event::InitDone => {
                let Some(listed) = self.listing.take() else {
                    return only(true);
                };
                let sorted = |d: std::collections::hash_set::Difference<'_, _, _>| {
                    let mut v: Vec<ParentRef> = d.cloned().collect();
                    v.sort_by_key(ToString::to_string);
                    v
                };
                let left = sorted(self.now.difference(&listed));
                let entered = sorted(listed.difference(&self.now));
                self.now = listed;
                Admitted {
                    cache: true,
                    left,
                    entered,
                }
            }
            Event::Apply(o) => {
                let parent = o.parent_ref();
                if !owns(&parent.id()) && !self.now.contains(&parent) {
                    return only(false);
                }
                self.now.insert(parent);
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
        o
    }

    fn id(name: &str) -> String {
        set(name).parent_ref().id()
    }

    fn refs(names: &[&str]) -> Vec<ParentRef> {
        names.iter().map(|n| set(n).parent_ref()).collect()
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
                left: vec![],
                entered: refs(&["a"]),
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
        assert_eq!(list(&mut c, &["a", "b"], &all).entered, refs(&["a", "b"]));
        assert!(c.admit(&Event::Apply(set("c")), all).cache);
        assert_eq!(c.len(), 3);
    }

    #[test]
    fn a_new_list_names_the_sets_that_left_the_cache_and_the_ones_that_entered_it() {
        let mut c = Cached::default();
        let all = |_: &str| true;
        list(&mut c, &["a", "b", "c"], &all);
        // `c` deleted and `d` created while the watch was away: listed again.
        let again = list(&mut c, &["a", "b", "d"], &all);
        assert_eq!((again.left, again.entered), (refs(&["c"]), refs(&["d"])));
        // `b` moved to another replica: the restarted watch's list does not admit it.
        let not_b = |i: &str| i != id("b");
        let moved = list(&mut c, &["a", "b", "d"], &not_b);
        assert_eq!((moved.left, moved.entered), (refs(&["b"]), vec![]));
        assert_eq!(c.len(), 2);
        // Gained back: it enters with the next list.
        let gained = list(&mut c, &["a", "b", "d"], &all);
        assert_eq!((gained.left, gained.entered), (vec![], refs(&["b"])));
        assert_eq!(c.len(), 3);
    }

    #[test]
    fn a_set_lost_stays_current_until_the_next_list_and_a_deletion_leaves_nothing() {
        let mut c = Cached::default();
        let all = |_: &str| true;
        list(&mut c, &["a", "b"], &all);
        let none = |_: &str| false;
        assert!(c.admit(&Event::Apply(set("a")), none).cache);
        assert!(c.admit(&Event::Delete(set("b")), none).cache);
        // A deletion during a list: not named at its end.
        assert!(c.admit::<ApplySet>(&Event::Init, all).cache);
        c.admit(&Event::InitApply(set("a")), all);
        c.admit(&Event::Delete(set("a")), all);
        assert_eq!(
            c.admit::<ApplySet>(&Event::InitDone, all),
            Admitted {
                cache: true,
                ..Admitted::default()
            }
        );
        assert_eq!(c.len(), 0);
    }
}

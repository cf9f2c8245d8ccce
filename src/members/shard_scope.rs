//! What the member watches select under `--shards auto`: only the objects of this replica's
//! buckets (`applyset.dev/shard-bucket in (…)` besides `part-of`), so that a replica's watches
//! and memory grow with its share of the sets, not with the cluster.
//!
//! Two consequences:
//! - **A change of buckets restarts every member watch** with the new selector: each kind is
//!   unsynced first (its objects are looked up by LIST until the new watch has listed), and
//!   what the new list holds replaces what was known (objects of buckets lost drop out); a
//!   watch of the old selector still running stops at its next event, unheard.
//! - **Members not labelled with their bucket are invisible** to the watches: those applied
//!   before sharding, skipped by their own controls, or by an owner that never reconciled the
//!   set. A set's members count as seen by the watches only after a reconcile to the end
//!   whose LIST found every member labelled with the set's bucket ([`MemberWatches::complete`]);
//!   before, and again once one of its objects leaves the watches, the set's objects are read
//!   by LIST (`members_of` answers None).

use std::{
    collections::BTreeSet,
    sync::{Arc, atomic::Ordering},
};

use super::MemberWatches;
use crate::{
    applyset::LABEL_PART_OF,
    shard::{LABEL_BUCKET, assign},
};

impl MemberWatches {
    /// The label selector of the member watches.
    pub(super) fn selector(&self) -> String {
        match &*self.buckets.lock() {
            Some(buckets) => format!("{LABEL_PART_OF},{buckets}"),
            None => LABEL_PART_OF.to_string(),
        }
    }

    /// Under `--shards auto`, this replica owns `buckets` now: the watches select them
    /// (every running watch restarts), and only the sets of these buckets that were complete
    /// stay so.
    pub fn use_buckets(self: &Arc<Self>, buckets: &BTreeSet<u16>) {
        let selector = assign::selector(buckets)
            // No bucket: a value no member carries.
            .unwrap_or_else(|| format!("{LABEL_BUCKET} in (none)"));
        {
            let mut s = self.state.lock();
            let complete = s.complete.get_or_insert_with(Default::default);
            complete.retain(|id| buckets.contains(&assign::bucket(id)));
            if self.buckets.lock().replace(selector.clone()).as_ref() == Some(&selector) {
                return;
            }
            // Under the state's lock: a list of the old selector cannot land after this.
            self.selector_generation.fetch_add(1, Ordering::SeqCst);
        }
        let mut w = self.watches.lock();
        let kinds: Vec<_> = w
            .resolved
            .iter()
            .map(|(gk, r)| (gk.clone(), r.clone()))
            .collect();
        for (gk, resolved) in kinds {
            if let Some(h) = w.running.remove(&gk) {
                h.abort();
                self.unsync(&gk);
                self.spawn_watch(&mut w, &gk, &resolved);
            }
        }
    }

    /// Set `id` was reconciled to the end by this replica: the watches see its members.
    pub fn complete(&self, id: &str) {
        if let Some(c) = self.state.lock().complete.as_mut() {
            c.insert(id.to_string());
        }
    }

    /// Set `id`'s members may not all be seen by the watches any more (one of them left
    /// them: deleted, or its bucket label removed).
    pub(super) fn incomplete(&self, id: &str) {
        if let Some(c) = self.state.lock().complete.as_mut() {
            c.remove(id);
        }
    }

    /// How many times the watches' selector changed: a watch started before the last change
    /// stops.
    pub(super) fn selector_generation(&self) -> u64 {
        self.selector_generation.load(Ordering::SeqCst)
    }

    /// How many objects the member watches know now (`applyset_member_objects`).
    pub fn object_count(&self) -> usize {
        self.state.lock().live.len()
    }
}

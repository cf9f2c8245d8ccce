//! The status fitted into the parent's size bound ([`MAX_OBJECT_BYTES`]): lists shrink first,
//! then messages; and the measure of what the rest of the parent takes ([`other_bytes`],
//! remembered per generation by [`SpecSizes`]).

use parking_lot::Mutex;

use super::super::Context;
use crate::{api::ApplySetStatus, applyset::ParentRef, parent::Parent, status};

/// The most a parent's spec and status (and its labels and annotations) may take together,
/// in bytes of JSON: well under what the API server and etcd store (1.5 MiB by default), so
/// that a status write never fails because the object grew too large.
pub const MAX_OBJECT_BYTES: usize = 1 << 20;

/// Shortest a message is cut to while other entries remain to cut.
pub(super) const MIN_MESSAGE: usize = 64;

/// Bytes of `status` as JSON.
pub(super) fn json_len(status: &ApplySetStatus) -> usize {
    serde_json::to_vec(status)
        .map(|v| v.len())
        .unwrap_or(usize::MAX)
}

/// `status`, cut so that it takes at most `MAX_OBJECT_BYTES - other` bytes (`other`: what the
/// rest of the object takes). First the lists shrink — `members` (then `membersTruncated`
/// is set) and the plan's create, update, prune and skip lists (then `plan.truncated`), all to the
/// longest common length that fits — then the messages (conditions and `lastError`) are cut,
/// to the longest common length that fits. A status that fits is returned unchanged. When even
/// empty lists and messages of [`MIN_MESSAGE`] bytes do not fit (the spec alone is too large),
/// that smallest status is returned.
pub fn fit(status: ApplySetStatus, other: usize) -> ApplySetStatus {
    let room = MAX_OBJECT_BYTES.saturating_sub(other);
    if json_len(&status) <= room {
        return status;
    }
    let fits = |s: &ApplySetStatus| json_len(s) <= room;
    let longest_list = status.members.len().max(
        status
            .plan
            .as_ref()
            .map(|p| {
                let longest = p.create.len().max(p.update.len()).max(p.prune.len());
                longest.max(p.skip.len())
            })
            .unwrap_or(0),
    );
    // The largest number of list entries that fits (binary search; 0 always is a candidate).
    let keep = largest(longest_list, |n| fits(&with_lists(&status, n)));
    let status = with_lists(&status, keep);
    if fits(&status) {
        return status;
    }
    let longest_message = status
        .conditions
        .iter()
        .map(|c| c.message.len())
        .chain(status.last_error.iter().map(String::len))
        .max()
        .unwrap_or(0);
    let cut = largest(longest_message, |n| {
        fits(&with_messages(&status, n.max(MIN_MESSAGE)))
    });
    with_messages(&status, cut.max(MIN_MESSAGE))
}

/// The largest `n` in `0..=max` for which `ok(n)` holds, assuming `ok` holds for every
/// smaller `n` once it holds for one; 0 when none does.
pub(super) fn largest(max: usize, ok: impl Fn(usize) -> bool) -> usize {
    let (mut low, mut high) = (0, max);
    while low < high {
        let mid = low + (high - low).div_ceil(2);
        if ok(mid) {
            low = mid;
        } else {
            high = mid - 1;
        }
    }
    low
}

/// `status` with `members` and each plan list cut to at most `n` entries, flagged when cut.
pub(super) fn with_lists(status: &ApplySetStatus, n: usize) -> ApplySetStatus {
    let mut s = status.clone();
    if s.members.len() > n {
        s.members.truncate(n);
        s.members_truncated = true;
    }
    if let Some(plan) = &mut s.plan {
        for list in [&mut plan.create, &mut plan.update, &mut plan.prune] {
            if list.len() > n {
                list.truncate(n);
                plan.truncated = true;
            }
        }
        if plan.skip.len() > n {
            plan.skip.truncate(n);
            plan.truncated = true;
        }
    }
    s
}

/// `status` with every condition message and `lastError` cut to at most `n` bytes.
fn with_messages(status: &ApplySetStatus, n: usize) -> ApplySetStatus {
    let mut s = status.clone();
    for c in &mut s.conditions {
        if c.message.len() > n {
            c.message = status::truncate(&c.message, n);
        }
    }
    if let Some(e) = &mut s.last_error
        && e.len() > n
    {
        *e = status::truncate(e, n);
    }
    s
}

/// Bytes of what a parent holds besides its status: its spec, labels and annotations. The
/// spec's size is measured once per generation (a spec of thousands of manifests is
/// megabytes of JSON, and most reconciles change nothing).
pub fn other_bytes<P: Parent>(ctx: &Context, obj: &P) -> usize {
    let meta = obj.meta();
    let len = |v: Result<Vec<u8>, serde_json::Error>| v.map(|v| v.len()).unwrap_or(0);
    let spec = ctx.spec_sizes.get_or_measure(
        &obj.parent_ref(),
        meta.uid.as_deref(),
        meta.generation,
        || len(serde_json::to_vec(obj.spec())),
    );
    spec + len(serde_json::to_vec(&meta.labels)) + len(serde_json::to_vec(&meta.annotations))
}

/// Parents whose spec size [`SpecSizes`] remembers at most (beyond, it starts over).
const SPEC_SIZES_KEPT: usize = 10_000;

/// The size of each parent's spec, with the UID and generation it was measured at.
#[derive(Default)]
pub struct SpecSizes(Mutex<std::collections::HashMap<ParentRef, (String, i64, usize)>>);

impl SpecSizes {
    /// The size of `parent`'s spec (`measure`), measured once per UID and generation (the
    /// spec changes only with the generation); measured every time when either is unknown.
    pub fn get_or_measure(
        &self,
        parent: &ParentRef,
        uid: Option<&str>,
        generation: Option<i64>,
        measure: impl FnOnce() -> usize,
    ) -> usize {
        let (Some(uid), Some(generation)) = (uid, generation) else {
            return measure();
        };
        if let Some((u, g, n)) = self.0.lock().get(parent)
            && u == uid
            && *g == generation
        {
            return *n;
        }
        let n = measure();
        let mut sizes = self.0.lock();
        if sizes.len() >= SPEC_SIZES_KEPT {
            sizes.clear();
        }
        sizes.insert(parent.clone(), (uid.to_string(), generation, n));
        n
    }

    /// Forgets the size of `parent`'s spec.
    pub fn forget(&self, parent: &ParentRef) {
        self.0.lock().remove(parent);
    }

    /// Parents whose size is remembered.
    pub fn len(&self) -> usize {
        self.0.lock().len()
    }
}

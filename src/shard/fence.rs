//! The fence before a prune or a delete: a replica proves it still owns the set.
//!
//! A Lease is not a fence: a replica that lost a set (its Lease expired while it was paused,
//! or a new replica won the set's bucket) may still hold a plan made before. So:
//! - **The claim.** The owner of a set records itself on the set: the annotation
//!   [`super::ANNOTATION_OWNER`], `<name>/<incarnation>`, written with the parent's metadata.
//!   A replica that takes a set from another that is still live in its view waits
//!   [`WINDOW`] after its claim before it reconciles the set (the previous owner's fenced
//!   deletes are over by then); from one that is not live, it waits nothing (the previous
//!   owner's own Lease, which bounds its deletes too, expired before it was seen expired).
//! - **The fence.** Before the deletes of a prune or of a set's deletion, after the live read
//!   they are planned from, the replica sends a JSON patch of the set whose only operation is
//!   a `test` that the annotation still names it ([`fence_patch`]). The API server refuses it
//!   (422) once another replica has claimed the set: the replica then stops, deleting
//!   nothing. Accepted, the fence holds for [`WINDOW`] from the moment it was *sent*, and no
//!   longer than the replica's own Lease ([`deletes_until`]); each delete is sent only
//!   before that instant, and a prune that takes longer fences again.
//!
//! The assumptions (docs/design.md): the replicas' monotonic clocks advance at the same rate
//! (a paused process's monotonic clock keeps advancing, so it wakes up past its window); a
//! request sent is served within the part of the window left after it is sent (the window's
//! last [`SEND_MARGIN`] sends nothing).

use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// How long an accepted fence allows deletes, from the moment it was sent.
pub const WINDOW: Duration = Duration::from_secs(5);
/// The end of a window sends nothing: a request sent before it is served within it.
pub const SEND_MARGIN: Duration = Duration::from_secs(2);

/// The instant before which this replica may send a delete under a fence sent at
/// `fence_sent`: the earlier of the window's end less [`SEND_MARGIN`] and the end of its own
/// Lease's validity.
pub fn deletes_until(fence_sent: Instant, own_lease_valid_until: Instant) -> Instant {
    (fence_sent + WINDOW.saturating_sub(SEND_MARGIN)).min(own_lease_valid_until)
}

/// How long a replica waits after claiming a set whose annotation named `previous`
/// (`<name>/<incarnation>`, or None): [`WINDOW`] when that holder is the live holder of its
/// name's Lease in this replica's view (`live_holder`), else nothing.
pub fn claim_wait(
    previous: Option<&str>,
    me: &str,
    live_holder: impl Fn(&str) -> Option<String>,
) -> Duration {
    let Some(prev) = previous.filter(|p| !p.is_empty() && *p != me) else {
        return Duration::ZERO;
    };
    let name = prev.rsplit_once('/').map_or(prev, |(n, _)| n);
    match live_holder(name) {
        Some(h) if h == prev => WINDOW,
        _ => Duration::ZERO,
    }
}

/// The JSON patch that tests the set's owner annotation is `holder` and changes nothing.
pub fn fence_patch(holder: &str) -> Value {
    json!([{
        "op": "test",
        "path": format!("/metadata/annotations/{}", escape_pointer(super::ANNOTATION_OWNER)),
        "value": holder,
    }])
}

/// A JSON pointer's reference token (RFC 6901): `~` as `~0`, `/` as `~1`.
fn escape_pointer(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_ends_at_the_earlier_of_its_end_and_the_own_lease() {
        let t0 = Instant::now();
        let far = t0 + Duration::from_secs(60);
        assert_eq!(deletes_until(t0, far), t0 + WINDOW - SEND_MARGIN);
        let soon = t0 + Duration::from_secs(1);
        assert_eq!(deletes_until(t0, soon), soon);
    }

    #[test]
    fn a_claim_waits_only_for_a_previous_owner_still_live() {
        let live = |name: &str| (name == "b").then(|| "b/7".to_string());
        assert_eq!(claim_wait(None, "a/1", live), Duration::ZERO);
        assert_eq!(claim_wait(Some(""), "a/1", live), Duration::ZERO);
        assert_eq!(claim_wait(Some("a/1"), "a/1", live), Duration::ZERO);
        assert_eq!(claim_wait(Some("b/7"), "a/1", live), WINDOW);
        // An earlier incarnation of a live name is dead: its process ended.
        assert_eq!(claim_wait(Some("b/6"), "a/1", live), Duration::ZERO);
        assert_eq!(claim_wait(Some("c/1"), "a/1", live), Duration::ZERO);
        // A value without an incarnation is read as a name.
        assert_eq!(claim_wait(Some("b"), "a/1", live), Duration::ZERO);
    }

    #[test]
    fn the_fence_tests_the_owner_annotation_only() {
        assert_eq!(
            fence_patch("r-0/ab12"),
            json!([{"op": "test", "path": "/metadata/annotations/applyset.dev~1shard-owner", "value": "r-0/ab12"}])
        );
        assert_eq!(escape_pointer("a~b/c"), "a~0b~1c");
    }
}

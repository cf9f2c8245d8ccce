//! Which replica owns which set: a set's bucket, from its ApplySet ID; a bucket's owner, by
//! rendezvous (highest random weight) hashing over the live replicas; the label selector of a
//! replica's buckets.
//!
//! Sets move in buckets: every set of a bucket has the same owner, so a replica's member
//! watches select its buckets by one label. The weights are SHA-256 of fixed inputs, so every
//! replica, of any version, computes the same owners from the same live replicas; when a
//! replica joins, only the buckets it now wins move (to it), and when one leaves, only its
//! own buckets move.

use std::collections::BTreeSet;

use sha2::{Digest as _, Sha256};

/// How many buckets the sets are spread over. With rendezvous over B buckets, a replica of R
/// owns about B / R of them (the standard deviation of its share is
/// √(B · (1/R)(1 − 1/R)) / B: 2.6 % of the buckets for 3 replicas); a member watch's selector
/// names the buckets of its replica (about B / R values).
pub const BUCKETS: u16 = 1024;

/// The bucket of a set, from its ApplySet ID: the first two bytes of SHA-256(ID), modulo
/// [`BUCKETS`]. The ID depends only on the parent's name, namespace, kind and group, so a
/// set restored from a backup (new UID) keeps its bucket.
pub fn bucket(set_id: &str) -> u16 {
    let h = Sha256::digest(set_id.as_bytes());
    u16::from_be_bytes([h[0], h[1]]) % BUCKETS
}

/// The weight of `replica` for `bucket`: the first eight bytes of
/// SHA-256(`<replica>` 0x00 `<bucket in decimal>`).
pub fn weight(replica: &str, bucket: u16) -> u64 {
    let mut h = Sha256::new();
    h.update(replica.as_bytes());
    h.update([0u8]);
    h.update(bucket.to_string().as_bytes());
    let d = h.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&d[..8]);
    u64::from_be_bytes(first)
}

/// The owner of `bucket` among `live`: the replica of the highest weight (ties, which need
/// equal SHA-256 prefixes, go to the smaller identity). None when no replica is live.
pub fn owner(bucket: u16, live: &BTreeSet<String>) -> Option<&str> {
    live.iter()
        .map(|r| (weight(r, bucket), std::cmp::Reverse(r.as_str())))
        .max()
        .map(|(_, std::cmp::Reverse(r))| r)
}

/// The buckets `replica` owns among `live` (none when it is not live itself).
pub fn buckets_of(replica: &str, live: &BTreeSet<String>) -> BTreeSet<u16> {
    (0..BUCKETS)
        .filter(|&b| owner(b, live) == Some(replica))
        .collect()
}

/// The label selector of a replica's buckets on [`super::LABEL_BUCKET`]: `<label> in (…)`,
/// or None when it owns none (a watch with no bucket selects nothing: it is not started).
pub fn selector(buckets: &BTreeSet<u16>) -> Option<String> {
    if buckets.is_empty() {
        return None;
    }
    let values: Vec<String> = buckets.iter().map(u16::to_string).collect();
    Some(format!("{} in ({})", super::LABEL_BUCKET, values.join(",")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live(ids: &[&str]) -> BTreeSet<String> {
        ids.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_bucket_is_a_pure_function_of_the_id_and_in_range() {
        let id = crate::applyset::applyset_id("web", Some("team-a"), "ApplySet", "applyset.dev");
        assert_eq!(bucket(&id), bucket(&id));
        for i in 0..5000 {
            assert!(bucket(&format!("applyset-{i}-v1")) < BUCKETS);
        }
        // Fixed: a change of the rule moves every set, so it is pinned here.
        assert_eq!(bucket("applyset-x-v1"), {
            let h = Sha256::digest(b"applyset-x-v1");
            u16::from_be_bytes([h[0], h[1]]) % BUCKETS
        });
    }

    #[test]
    fn weights_are_fixed_inputs_of_sha256() {
        let mut h = Sha256::new();
        h.update(b"replica-a\x0017");
        let d = h.finalize();
        let want = u64::from_be_bytes(d[..8].try_into().unwrap());
        assert_eq!(weight("replica-a", 17), want);
        assert_ne!(weight("replica-a", 17), weight("replica-b", 17));
        assert_ne!(weight("replica-a", 17), weight("replica-a", 18));
    }

    #[test]
    fn no_live_replica_owns_nothing_and_one_owns_everything() {
        assert_eq!(owner(3, &live(&[])), None);
        let one = live(&["only"]);
        assert!((0..BUCKETS).all(|b| owner(b, &one) == Some("only")));
        assert_eq!(buckets_of("only", &one).len(), usize::from(BUCKETS));
        assert!(buckets_of("other", &one).is_empty());
    }

    #[test]
    fn every_bucket_has_exactly_one_owner_among_the_live() {
        let three = live(&["r-0", "r-1", "r-2"]);
        let mut all = BTreeSet::new();
        let mut total = 0;
        for r in &three {
            let mine = buckets_of(r, &three);
            total += mine.len();
            all.extend(mine);
        }
        assert_eq!(total, usize::from(BUCKETS));
        assert_eq!(all.len(), usize::from(BUCKETS));
    }

    /// Within ±25 % of even for 2 to 8 replicas named as a StatefulSet names its pods (the
    /// spread is statistical: about 2.6 % of the buckets for 3 replicas, 8 % for 8).
    #[test]
    fn the_split_is_near_even() {
        for n in 2..=8 {
            let ids: Vec<String> = (0..n).map(|i| format!("applyset-operator-{i}")).collect();
            let live: BTreeSet<String> = ids.iter().cloned().collect();
            let even = f64::from(BUCKETS) / n as f64;
            for r in &ids {
                let share = buckets_of(r, &live).len() as f64;
                assert!(
                    (share - even).abs() <= 0.25 * even,
                    "{r} of {n}: {share} buckets, even is {even:.0}"
                );
            }
        }
    }

    #[test]
    fn a_joining_replica_takes_buckets_only_for_itself() {
        let before = live(&["r-0", "r-1", "r-2"]);
        let after = live(&["r-0", "r-1", "r-2", "r-3"]);
        let mut moved = 0;
        for b in 0..BUCKETS {
            let (was, is) = (owner(b, &before), owner(b, &after));
            if was != is {
                assert_eq!(is, Some("r-3"), "bucket {b} moved to another replica");
                moved += 1;
            }
        }
        // About a quarter of the buckets.
        let quarter = f64::from(BUCKETS) / 4.0;
        assert!(
            (f64::from(moved) - quarter).abs() <= 0.15 * quarter,
            "{moved} moved"
        );
    }

    #[test]
    fn a_leaving_replica_gives_up_only_its_own_buckets() {
        let before = live(&["r-0", "r-1", "r-2"]);
        let after = live(&["r-0", "r-2"]);
        for b in 0..BUCKETS {
            let (was, is) = (owner(b, &before), owner(b, &after));
            if was != Some("r-1") {
                assert_eq!(was, is, "bucket {b} of a replica still live moved");
            } else {
                assert_ne!(is, Some("r-1"));
            }
        }
    }

    #[test]
    fn the_selector_names_the_buckets() {
        assert_eq!(selector(&BTreeSet::new()), None);
        let b: BTreeSet<u16> = [3, 1, 1000].into_iter().collect();
        assert_eq!(
            selector(&b).as_deref(),
            Some("applyset.dev/shard-bucket in (1,3,1000)")
        );
    }
}

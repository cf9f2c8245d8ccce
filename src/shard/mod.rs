//! Automatic sharding (`--shards auto`): several replicas share the sets, each reconciling
//! the sets of the buckets it owns.
//!
//! - [`assign`]: a set's bucket (from its ApplySet ID), a bucket's owner (rendezvous hashing
//!   over the live replicas), the selector of a replica's buckets.
//! - [`peers`]: which replicas are live, from their Leases, on this replica's own clock.
//! - [`fence`]: the claim of a set and the fence before its prunes and deletes.
//!
//! - [`membership`]: the I/O: this replica's Lease and the watch of the others', as the
//!   buckets it owns now.
//!
//! The first three are pure.

pub mod assign;
pub mod fence;
pub mod membership;
pub mod peers;

/// The label of a set's bucket, on the parent and on every member (a replica's watches
/// select its buckets by it).
pub const LABEL_BUCKET: &str = "applyset.dev/shard-bucket";
/// The annotation naming the replica that owns the set: `<name>/<incarnation>`.
pub const ANNOTATION_OWNER: &str = "applyset.dev/shard-owner";

/// The name of a replica's Lease: `<prefix>-<name>`, or, when that is not a valid object
/// name of at most 253 characters, `<prefix>-` and the first 16 hex digits of SHA-256(name).
pub fn lease_name(prefix: &str, name: &str) -> String {
    let plain = format!("{prefix}-{name}");
    let valid = plain.len() <= 253
        && plain
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && plain
            .bytes()
            .last()
            .is_some_and(|b| b.is_ascii_alphanumeric());
    if valid {
        return plain;
    }
    use sha2::{Digest as _, Sha256};
    let h = Sha256::digest(name.as_bytes());
    let hex: String = h[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("{prefix}-{hex}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_names_are_valid_object_names() {
        assert_eq!(
            lease_name("applyset-shard", "operator-7f9c4-abcde"),
            "applyset-shard-operator-7f9c4-abcde"
        );
        let upper = lease_name("applyset-shard", "Replica_A");
        assert!(upper.starts_with("applyset-shard-") && upper.len() == 15 + 16);
        assert_ne!(upper, lease_name("applyset-shard", "Replica_B"));
        let long = lease_name("applyset-shard", &"x".repeat(300));
        assert_eq!(long.len(), 15 + 16);
        assert_ne!(lease_name("p", "a-"), "p-a-");
    }
}

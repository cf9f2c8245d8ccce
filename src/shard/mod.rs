//! Automatic sharding (`--shards auto`): several replicas share the sets, each reconciling
//! the sets of the buckets it owns.
//!
//! - [`assign`]: a set's bucket (from its ApplySet ID), a bucket's owner (rendezvous hashing
//!   over the live replicas), the selector of a replica's buckets.
//! - [`peers`]: which replicas are live, from their Leases, on this replica's own clock.
//! - [`fence`]: the claim of a set (its owner and epoch) and the fence before its deletes.
//! - [`membership`]: the I/O: this replica's Lease and the watch of the others', as the
//!   buckets it owns now.
//!
//! The first three are pure; [`Shards`] is what the controllers hold of it.

pub mod assign;
pub mod fence;
pub mod membership;
pub mod peers;

/// The label of a set's bucket, on every member (a replica's member watches select its
/// buckets by it).
pub const LABEL_BUCKET: &str = "applyset.dev/shard-bucket";
/// The annotation naming the replica that owns the set: `<name>/<incarnation>`.
pub const ANNOTATION_OWNER: &str = "applyset.dev/shard-owner";
/// The annotation of the owner's epoch, on the parent (moved by every claim) and on every
/// member (the epoch of the owner that last applied it): see [`fence`].
pub const ANNOTATION_EPOCH: &str = "applyset.dev/shard-epoch";

/// What the controllers of a replica under `--shards auto` hold: who it is, and what it
/// owns now (kept current by [`membership::run`]).
#[derive(Clone, Debug)]
pub struct Shards {
    /// `<name>/<incarnation>`: what the owner annotation of its sets says.
    pub holder: String,
    pub assignment: tokio::sync::watch::Receiver<membership::Assignment>,
}

impl Shards {
    /// Whether this replica owns the set of ID `set_id` now (never while its own Lease is
    /// not valid).
    pub fn owns(&self, set_id: &str) -> bool {
        let bucket = assign::bucket(set_id);
        self.assignment
            .borrow()
            .owns(bucket, std::time::Instant::now())
    }

    /// The buckets this replica owns now.
    pub fn buckets(&self) -> std::collections::BTreeSet<u16> {
        self.assignment.borrow().mine.clone()
    }
}

/// Under `--shards auto`, one reconcile's proof that it still holds its claim of the set
/// before it writes a member: a write of the parent conditional on its resourceVersion
/// proves it ([`FirstWrite::written`]); otherwise the first member write sends the fence
/// once ([`FirstWrite::holds`]), and every later one waits for that answer.
pub struct FirstWrite {
    proven: tokio::sync::OnceCell<bool>,
    prove: Box<dyn Fn() -> futures::future::BoxFuture<'static, bool> + Send + Sync>,
}

impl FirstWrite {
    /// `prove` sends the fence: true when the API server accepted it.
    pub fn new(
        prove: impl Fn() -> futures::future::BoxFuture<'static, bool> + Send + Sync + 'static,
    ) -> Self {
        FirstWrite {
            proven: tokio::sync::OnceCell::new(),
            prove: Box::new(prove),
        }
    }

    /// The claim was proven by a conditional write of the parent.
    pub fn written(&self) {
        let _ = self.proven.set(true);
    }

    /// Whether the claim holds: proven once, by the first caller.
    pub async fn holds(&self) -> bool {
        *self.proven.get_or_init(|| (self.prove)()).await
    }

    /// Whether the proof was sent and refused (another replica claimed the set).
    pub fn refused(&self) -> bool {
        self.proven.get() == Some(&false)
    }
}

impl std::fmt::Debug for FirstWrite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FirstWrite")
            .field("proven", &self.proven.get())
            .finish()
    }
}

/// Whether `name` can name a replica: a label value (it is one on the replica's Lease) that
/// is not empty: at most 63 characters, alphanumerics and `-`, `_`, `.`, starting and ending
/// with an alphanumeric.
pub fn valid_replica_name(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

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

    #[tokio::test]
    async fn the_first_write_proves_the_claim_once() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let sent = std::sync::Arc::new(AtomicUsize::new(0));
        let counter = sent.clone();
        let refused = FirstWrite::new(move || {
            counter.fetch_add(1, Ordering::SeqCst);
            Box::pin(async { false })
        });
        assert!(!refused.refused(), "nothing sent yet");
        assert!(!refused.holds().await);
        assert!(!refused.holds().await);
        assert!(refused.refused());
        assert_eq!(sent.load(Ordering::SeqCst), 1, "the fence is sent once");
        let written = FirstWrite::new(|| Box::pin(async { false }));
        written.written();
        assert!(
            written.holds().await,
            "a conditional write proved it: no fence"
        );
        assert!(!written.refused());
    }

    #[test]
    fn replica_names_are_label_values() {
        for ok in ["r-0", "operator-7f9c4-abcde", "A_b.c", &"x".repeat(63)] {
            assert!(valid_replica_name(ok), "{ok}");
        }
        for bad in ["", "-a", "a-", "a/b", "a b", &"x".repeat(64)] {
            assert!(!valid_replica_name(bad), "{bad}");
        }
    }
}

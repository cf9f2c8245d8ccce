//! Leader election on a `coordination.k8s.io/v1` Lease (kube-lease-manager): of several
//! replicas only the holder runs the controllers.

use kube::Client;
use kube_lease_manager::{LeaseManagerBuilder, LeaseManagerError};
use tokio::{sync::watch, task::JoinHandle};

/// Lease settings.
#[derive(Clone, Debug)]
pub struct LeaseConfig {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    /// Seconds a lease is valid without renewal; a failed leader is replaced within it.
    pub duration_secs: u64,
    /// Seconds before expiry at which the holder renews.
    pub grace_secs: u64,
}

/// The field manager with which a replica writes the lease: unique per identity.
/// The API server takes at most 128 characters; a longer identity (pod names may have 253)
/// keeps its end, where a pod name carries its unique suffix.
pub fn field_manager(identity: &str) -> String {
    const PREFIX: &str = "applyset-operator-leader-";
    const MAX: usize = 128;
    let room = MAX - PREFIX.len();
    let skip = identity.chars().count().saturating_sub(room);
    let tail: String = identity.chars().skip(skip).collect();
    format!("{PREFIX}{tail}")
}

/// A running election: `is_leader` follows this replica's state.
pub struct Election {
    pub is_leader: watch::Receiver<bool>,
    task: JoinHandle<Result<kube_lease_manager::LeaseManager, LeaseManagerError>>,
}

impl Election {
    pub async fn start(client: Client, cfg: &LeaseConfig) -> Result<Election, LeaseManagerError> {
        let manager = LeaseManagerBuilder::new(client, &cfg.name)
            .with_namespace(&cfg.namespace)
            .with_identity(&cfg.identity)
            .with_duration(cfg.duration_secs)
            .with_grace(cfg.grace_secs)
            // One field manager per replica: taking an orphaned lease is a server-side apply
            // without force, and only a *different* manager owning `holderIdentity` makes the
            // second of two simultaneous takers fail with a conflict. A shared manager would
            // let both succeed and both lead.
            .with_field_manager(field_manager(&cfg.identity))
            .build()
            .await?;
        let (is_leader, task) = manager.watch().await;
        Ok(Election { is_leader, task })
    }

    /// Resolves once this replica holds the lease.
    pub async fn acquired(&mut self) -> bool {
        self.is_leader.wait_for(|l| *l).await.is_ok()
    }

    /// Resolves when this replica, having held the lease, no longer does.
    pub async fn lost(&mut self) {
        let _ = self.is_leader.wait_for(|l| !*l).await;
    }

    /// Gives the lease up (so another replica takes over at once) and waits for that.
    pub async fn release(self) {
        drop(self.is_leader);
        match self.task.await {
            Ok(Ok(_)) => tracing::info!("lease released"),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "releasing the lease failed; it expires by itself")
            }
            Err(e) => tracing::warn!(error = %e, "lease task ended abnormally"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replicas_write_the_lease_under_distinct_field_managers() {
        assert_ne!(field_manager("pod-a"), field_manager("pod-b"));
        assert_eq!(field_manager("pod-a"), "applyset-operator-leader-pod-a");
        let long = format!("{}-7f9c4-abcde", "x".repeat(240));
        let fm = field_manager(&long);
        assert_eq!(fm.len(), 128);
        assert!(fm.ends_with("-7f9c4-abcde"));
    }
}

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
            .with_field_manager("applyset-operator-leader")
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

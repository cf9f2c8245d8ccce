//! The I/O of `--shards auto`: this replica's own Lease (applied, renewed, deleted at a clean
//! shutdown) and the watch of its group's Leases, turned into the buckets this replica owns
//! now ([`Assignment`]), published on a `watch` channel that the controllers follow.

use std::{
    collections::BTreeSet,
    time::{Duration, Instant},
};

use futures::{StreamExt, stream::BoxStream};
use k8s_openapi::api::coordination::v1::Lease;
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, Patch, PatchParams},
    runtime::{WatchStreamExt, watcher},
};
use serde_json::json;
use tokio::sync::watch;

use super::{
    assign,
    peers::{LeaseView, Peers, own_valid_until},
};

/// The label that groups the Leases of one operator's replicas.
pub const LABEL_GROUP: &str = "applyset.dev/shard-group";

/// Who this replica is, and where the Leases are.
#[derive(Clone, Debug)]
pub struct Settings {
    pub namespace: String,
    /// The group: replicas of one group share the sets.
    pub group: String,
    /// This replica's name (the rendezvous weight's input): stable for a pod.
    pub name: String,
    /// This process's incarnation: random per start.
    pub incarnation: String,
    pub duration: Duration,
}

impl Settings {
    /// The holder string of this process: `<name>/<incarnation>`.
    pub fn holder(&self) -> String {
        format!("{}/{}", self.name, self.incarnation)
    }

    fn lease_name(&self) -> String {
        super::lease_name(&self.prefix(), &self.name)
    }

    /// The prefix of the group's Lease names: `<group>-shard`.
    fn prefix(&self) -> String {
        format!("{}-shard", self.group)
    }
}

/// What this replica owns now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Assignment {
    /// The live replicas (this one included while its own Lease is valid).
    pub live: BTreeSet<String>,
    /// The buckets this replica owns (none while its own Lease is not valid).
    pub mine: BTreeSet<u16>,
    /// Until when this replica's own Lease is valid (None before its first renewal).
    pub valid_until: Option<Instant>,
}

impl Assignment {
    /// Whether this replica owns `bucket` at `now`.
    pub fn owns(&self, bucket: u16, now: Instant) -> bool {
        self.valid_until.is_some_and(|t| now < t) && self.mine.contains(&bucket)
    }
}

/// The Lease as the peers read it.
fn view(lease: &Lease) -> Option<LeaseView> {
    let spec = lease.spec.as_ref()?;
    let name = lease.labels().get(LABEL_NAME)?.clone();
    Some(LeaseView {
        name,
        holder: spec.holder_identity.clone().unwrap_or_default(),
        renew_time: spec
            .renew_time
            .as_ref()
            .map(|t| t.0.to_string())
            .unwrap_or_default(),
        duration: Duration::from_secs(
            u64::try_from(spec.lease_duration_seconds.unwrap_or(0)).unwrap_or(0),
        ),
        resource_version: lease.resource_version().unwrap_or_default(),
    })
}

/// The label carrying the replica's name on its Lease (the Lease's own name may be a hash).
pub const LABEL_NAME: &str = "applyset.dev/shard-replica";

/// A replica dead (its Lease confirmed unrenewed) for this many durations has its Lease
/// deleted by the others: pods of a Deployment do not come back under the same name.
const COLLECT_AFTER: u32 = 10;

/// Runs the membership until `stop` turns true, then deletes this replica's Lease.
///
/// Publishes the assignment on `tx`: the value is kept current (its validity moves at every
/// renewal), and receivers are woken only when the buckets this replica owns change. No
/// bucket is owned before the first list of the group's Leases completed, nor after this
/// replica's own Lease lapsed (a paused process, a failing renewal) until the Leases were
/// listed again (what it knew of the others is stale then), nor for a duration after its
/// Lease was seen held by another process of the same name.
pub async fn run(
    client: Client,
    settings: Settings,
    tx: watch::Sender<Assignment>,
    mut stop: watch::Receiver<bool>,
) {
    let mut m = Membership::new(client, settings);
    let mut events = m.leases();
    let mut renew = tokio::time::interval(m.settings.duration / 3);
    renew.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let next = m.next_change(Instant::now());
        tokio::select! {
            () = async { let _ = stop.wait_for(|s| *s).await; } => break,
            _ = renew.tick() => {
                if m.renew().await {
                    events = m.leases();
                }
                m.collect_garbage().await;
            }
            event = events.next() => match event {
                Some(Ok(e)) => m.on_event(e),
                Some(Err(e)) => tracing::warn!(error = %e, "watching the shard leases"),
                None => break,
            },
            () = tokio::time::sleep_until(next.into()) => {}
        }
        m.confirm_expired().await;
        publish(&tx, m.assignment(Instant::now()));
    }
    // Owning nothing from now on, then the Lease goes: the others take over at once.
    publish(&tx, Assignment::default());
    m.release().await;
}

/// What the membership task keeps.
struct Membership {
    settings: Settings,
    api: Api<Lease>,
    peers: Peers,
    /// Until when the own Lease is valid (from its last renewal sent).
    valid_until: Option<Instant>,
    /// The group's Leases were listed since the start or since the own Lease lapsed.
    listed: bool,
    /// The Leases of the list under way (to forget the ones deleted meanwhile).
    listing: std::collections::HashSet<String>,
    /// The own Lease was seen held by another process of the same name: nothing is owned
    /// until then.
    impostor_until: Option<Instant>,
    /// The own Lease's resourceVersion after the last renewal (the precondition of its
    /// deletion at the end).
    own_version: Option<String>,
}

impl Membership {
    fn new(client: Client, settings: Settings) -> Self {
        Membership {
            api: Api::namespaced(client, &settings.namespace),
            settings,
            peers: Peers::default(),
            valid_until: None,
            listed: false,
            listing: Default::default(),
            impostor_until: None,
            own_version: None,
        }
    }

    /// A watch of the group's Leases (a new one lists them first).
    fn leases(&self) -> BoxStream<'static, Result<watcher::Event<Lease>, watcher::Error>> {
        let cfg =
            watcher::Config::default().labels(&format!("{LABEL_GROUP}={}", self.settings.group));
        watcher(self.api.clone(), cfg)
            .backoff(crate::backoff::backoff())
            .boxed()
    }

    /// When the assignment must be computed again at the latest: the next expiry of a peer,
    /// or of the own Lease.
    fn next_change(&self, now: Instant) -> Instant {
        let own = self.valid_until.filter(|&t| t > now);
        [
            self.peers.next_expiry(now),
            own,
            self.impostor_until.filter(|&t| t > now),
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(now + self.settings.duration)
    }

    /// Renews the own Lease. Returns true when it had lapsed: the Leases must be listed
    /// again (a new watch) before anything is owned.
    async fn renew(&mut self) -> bool {
        let lapsed = self.valid_until.is_some_and(|t| t <= Instant::now());
        if lapsed {
            tracing::warn!(lease = %self.settings.lease_name(), "the shard lease lapsed: owning nothing until the group's Leases are listed again");
            self.listed = false;
        }
        if let Some((valid, version)) = renew_lease(&self.api, &self.settings).await {
            self.valid_until = Some(valid);
            self.own_version = Some(version);
        }
        lapsed
    }

    fn on_event(&mut self, event: watcher::Event<Lease>) {
        let now = Instant::now();
        match event {
            watcher::Event::Init => self.listing.clear(),
            watcher::Event::InitApply(l) => {
                let Some(v) = view(&l) else { return };
                self.listing.insert(v.name.clone());
                self.peers.observe(&v, now);
            }
            watcher::Event::Apply(l) => {
                let Some(v) = view(&l) else { return };
                // A change of the own Lease by another holder after this process renewed it
                // (what an earlier process of the same name left is listed, not changed).
                let own = v.name == self.settings.name && self.own_version.is_some();
                if own && v.holder != self.settings.holder() {
                    tracing::error!(holder = %v.holder, lease = %self.settings.lease_name(), "another process renews this replica's shard lease (two replicas with the same --shard-name?): owning nothing for a lease duration");
                    self.impostor_until = Some(now + self.settings.duration);
                }
                self.peers.observe(&v, now);
            }
            watcher::Event::InitDone => {
                self.peers.retain(&std::mem::take(&mut self.listing));
                self.listed = true;
            }
            watcher::Event::Delete(l) => {
                if let Some(v) = view(&l) {
                    self.peers.gone(&v.name);
                }
            }
        }
    }

    /// Reads the Lease of every peer whose time is up: one renewed meanwhile (the watch
    /// missed it) is live again; one that was not is no longer live.
    async fn confirm_expired(&mut self) {
        for name in self.peers.expired_unconfirmed(Instant::now()) {
            let lease_name = super::lease_name(&self.settings.prefix(), &name);
            let renewed = match self.api.get_opt(&lease_name).await {
                Ok(Some(l)) => view(&l).is_some_and(|v| self.peers.observe(&v, Instant::now())),
                Ok(None) => {
                    self.peers.gone(&name);
                    false
                }
                Err(e) => {
                    tracing::warn!(error = %e, lease = %lease_name, "reading an expired shard lease failed; taking it as expired");
                    false
                }
            };
            if !renewed {
                self.peers.confirm(&name);
            }
        }
    }

    /// Deletes the Leases of replicas dead for [`COLLECT_AFTER`] durations, each only if it
    /// did not change since it was read.
    async fn collect_garbage(&mut self) {
        if !self.listed {
            return;
        }
        for (name, version) in self.peers.long_dead(Instant::now(), COLLECT_AFTER) {
            let lease_name = super::lease_name(&self.settings.prefix(), &name);
            match self.api.delete(&lease_name, &if_version(version)).await {
                Ok(_) => {
                    tracing::info!(lease = %lease_name, "deleted the lease of a replica long dead")
                }
                Err(e) => tracing::debug!(error = %e, lease = %lease_name, "not deleted"),
            }
            self.peers.gone(&name);
        }
    }

    /// The assignment now.
    fn assignment(&self, now: Instant) -> Assignment {
        let usable = self.listed && self.impostor_until.is_none_or(|t| t <= now);
        let valid = self.valid_until.filter(|_| usable);
        assignment(&self.settings.name, &self.peers, valid, now)
    }

    /// Deletes the own Lease, unless another process renewed it since.
    async fn release(&self) {
        let Some(version) = self.own_version.clone() else {
            return;
        };
        if let Err(e) = self
            .api
            .delete(&self.settings.lease_name(), &if_version(version))
            .await
        {
            tracing::warn!(error = %e, "deleting the shard lease failed; it expires by itself");
        }
    }
}

/// The parameters of a delete conditional on `version`.
fn if_version(version: String) -> DeleteParams {
    DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            resource_version: Some(version),
            uid: None,
        }),
        ..Default::default()
    }
}

/// Renews this replica's Lease, within a third of its duration: the instant until which it
/// is valid, counted from when the renewal was sent, and the Lease's resourceVersion; None
/// when it failed.
async fn renew_lease(api: &Api<Lease>, settings: &Settings) -> Option<(Instant, String)> {
    let sent = Instant::now();
    let renewed = tokio::time::timeout(settings.duration / 3, apply_lease(api, settings)).await;
    match renewed {
        Ok(Ok(lease)) => Some((
            own_valid_until(sent, settings.duration, settings.duration / 5),
            lease.resource_version().unwrap_or_default(),
        )),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, lease = %settings.lease_name(), "renewing the shard lease failed");
            None
        }
        Err(_) => {
            tracing::warn!(lease = %settings.lease_name(), "renewing the shard lease timed out");
            None
        }
    }
}

/// Keeps `tx`'s value current; wakes its receivers only when the owned buckets changed.
fn publish(tx: &watch::Sender<Assignment>, assignment: Assignment) {
    tx.send_if_modified(|a| {
        let moved = a.mine != assignment.mine;
        if moved {
            tracing::info!(live = ?assignment.live, buckets = assignment.mine.len(), "shard assignment");
        }
        *a = assignment;
        moved
    });
}

/// The assignment at `now`: the live peers, this replica among them only while its own Lease
/// is valid, and the buckets it then owns.
pub fn assignment(
    me: &str,
    peers: &Peers,
    valid_until: Option<Instant>,
    now: Instant,
) -> Assignment {
    let mut live = peers.live(now);
    let valid = valid_until.is_some_and(|t| now < t);
    if valid {
        live.insert(me.to_string());
    } else {
        live.remove(me);
    }
    let mine = match valid {
        true => assign::buckets_of(me, &live),
        false => BTreeSet::new(),
    };
    Assignment {
        live,
        mine,
        valid_until,
    }
}

/// Applies this replica's Lease: holder, duration, renewTime now.
async fn apply_lease(api: &Api<Lease>, s: &Settings) -> kube::Result<Lease> {
    let body = json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": s.lease_name(),
            "labels": {LABEL_GROUP: s.group, LABEL_NAME: s.name},
        },
        "spec": {
            "holderIdentity": s.holder(),
            "leaseDurationSeconds": s.duration.as_secs(),
            "renewTime": k8s_openapi::jiff::Timestamp::now()
                .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
                .to_string(),
        },
    });
    let pp = PatchParams::apply(&crate::leader::field_manager(&s.holder())).force();
    api.patch(&s.lease_name(), &pp, &Patch::Apply(body)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn receivers_wake_only_when_the_owned_buckets_change() {
        let (tx, mut rx) = watch::channel(Assignment::default());
        let t0 = Instant::now();
        let a = Assignment {
            live: ["a".to_string()].into(),
            mine: [1, 2].into(),
            valid_until: Some(t0),
        };
        publish(&tx, a.clone());
        assert!(rx.has_changed().unwrap_or(false), "new buckets wake");
        assert_eq!(rx.borrow_and_update().mine, a.mine);
        let later = Assignment {
            valid_until: Some(t0 + Duration::from_secs(5)),
            ..a.clone()
        };
        publish(&tx, later);
        assert!(
            !rx.has_changed().unwrap_or(true),
            "a renewal alone does not wake"
        );
        assert_eq!(
            rx.borrow().valid_until,
            Some(t0 + Duration::from_secs(5)),
            "but the value is current"
        );
        publish(&tx, Assignment::default());
        assert!(rx.has_changed().unwrap_or(false), "owning nothing wakes");
    }

    #[test]
    fn a_replica_owns_buckets_only_while_its_own_lease_is_valid() {
        let t0 = Instant::now();
        let mut peers = Peers::default();
        peers.observe(
            &LeaseView {
                name: "b".into(),
                holder: "b/1".into(),
                renew_time: "t".into(),
                duration: Duration::from_secs(15),
                resource_version: "1".into(),
            },
            t0,
        );
        let none = assignment("a", &peers, None, t0);
        assert!(none.mine.is_empty());
        assert_eq!(none.live, ["b".to_string()].into());
        let valid = assignment("a", &peers, Some(t0 + Duration::from_secs(10)), t0);
        assert_eq!(valid.live, ["a".to_string(), "b".to_string()].into());
        assert!(!valid.mine.is_empty() && valid.mine.len() < usize::from(assign::BUCKETS));
        let b = *valid.mine.iter().next().unwrap_or(&0);
        assert!(valid.owns(b, t0));
        assert!(!valid.owns(b, t0 + Duration::from_secs(10)));
        let expired = assignment("a", &peers, Some(t0), t0);
        assert!(expired.mine.is_empty() && !expired.live.contains("a"));
    }
}

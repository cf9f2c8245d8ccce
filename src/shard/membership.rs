//! The I/O of `--shards auto`: this replica's own Lease (applied, renewed, deleted at a clean
//! shutdown) and the watch of its group's Leases, turned into the buckets this replica owns
//! now ([`Assignment`]), published on a `watch` channel that the controllers follow.

use std::{
    collections::BTreeSet,
    time::{Duration, Instant},
};

use futures::StreamExt;
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
        super::lease_name(&format!("{}-shard", self.group), &self.name)
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
    })
}

/// The label carrying the replica's name on its Lease (the Lease's own name may be a hash).
pub const LABEL_NAME: &str = "applyset.dev/shard-replica";

/// Runs the membership until `stop` turns true, then deletes this replica's Lease.
///
/// Publishes the assignment on `tx`: the value is kept current (its validity moves at every
/// renewal), and receivers are woken only when the buckets this replica owns change. No
/// bucket is owned before the first list of the group's Leases completed, nor after this
/// replica's own Lease lapsed (a paused process, a failing renewal) until the Leases were
/// listed again: what it knew of the others is stale then.
pub async fn run(
    client: Client,
    settings: Settings,
    tx: watch::Sender<Assignment>,
    mut stop: watch::Receiver<bool>,
) {
    let api: Api<Lease> = Api::namespaced(client, &settings.namespace);
    let leases = || {
        let cfg = watcher::Config::default().labels(&format!("{LABEL_GROUP}={}", settings.group));
        watcher(api.clone(), cfg)
            .backoff(crate::backoff::backoff())
            .boxed()
    };
    let mut events = leases();
    let mut peers = Peers::default();
    let mut valid_until: Option<Instant> = None;
    // Whether the group's Leases were listed since the start or since the own Lease lapsed.
    let mut listed = false;
    let mut renew = tokio::time::interval(settings.duration / 3);
    renew.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let now = Instant::now();
        let next = [peers.next_expiry(now), valid_until.filter(|&t| t > now)]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(now + settings.duration);
        tokio::select! {
            () = async { let _ = stop.wait_for(|s| *s).await; } => break,
            _ = renew.tick() => {
                let lapsed = valid_until.is_some_and(|t| t <= Instant::now());
                if lapsed {
                    tracing::warn!(lease = %settings.lease_name(), "the shard lease lapsed: owning nothing until the group's Leases are listed again");
                    listed = false;
                    events = leases();
                }
                valid_until = renew_lease(&api, &settings).await.or(valid_until);
            }
            event = events.next() => match event {
                Some(Ok(watcher::Event::Apply(l) | watcher::Event::InitApply(l))) => {
                    if let Some(v) = view(&l) {
                        peers.observe(&v, Instant::now());
                    }
                }
                Some(Ok(watcher::Event::Delete(l))) => {
                    if let Some(v) = view(&l) {
                        peers.gone(&v.name);
                    }
                }
                Some(Ok(watcher::Event::InitDone)) => listed = true,
                Some(Ok(watcher::Event::Init)) => {}
                Some(Err(e)) => tracing::warn!(error = %e, "watching the shard leases"),
                None => break,
            },
            () = tokio::time::sleep_until(next.into()) => {}
        }
        let valid = valid_until.filter(|_| listed);
        publish(
            &tx,
            assignment(&settings.name, &peers, valid, Instant::now()),
        );
    }
    // Owning nothing from now on, then the Lease goes: the others take over at once.
    publish(&tx, Assignment::default());
    if let Err(e) = api
        .delete(&settings.lease_name(), &DeleteParams::default())
        .await
    {
        tracing::warn!(error = %e, "deleting the shard lease failed; it expires by itself");
    }
}

/// Renews this replica's Lease, within a third of its duration; the instant until which it is
/// valid, counted from when the renewal was sent, or None when it failed.
async fn renew_lease(api: &Api<Lease>, settings: &Settings) -> Option<Instant> {
    let sent = Instant::now();
    let renewed = tokio::time::timeout(settings.duration / 3, apply_lease(api, settings)).await;
    match renewed {
        Ok(Ok(())) => Some(own_valid_until(
            sent,
            settings.duration,
            settings.duration / 5,
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
async fn apply_lease(api: &Api<Lease>, s: &Settings) -> kube::Result<()> {
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
    api.patch(&s.lease_name(), &pp, &Patch::Apply(body))
        .await
        .map(|_| ())
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
        assert!(!rx.has_changed().unwrap_or(true), "a renewal alone does not wake");
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

//! Namespaces being terminated: learnt from a metadata-only watch of the namespaces (where
//! the operator may list them: at once, before any write is refused), and from the API
//! server's refusal of a write into one (a 403 whose status carries the cause
//! `NamespaceTerminating`), shared by every reconcile,
//! so that no further apply is sent there and the deletions the namespace controller makes
//! there start no reconcile. A namespace known terminating is looked at again (one metadata
//! GET, shared by every set) at most every [`RECHECK`]: once it is gone or back (not being
//! deleted, or re-created), it is forgotten and applies go on. Should that look fail (the
//! operator may not get namespaces), the namespace is forgotten [`EXPIRE`] after it was
//! learnt, and the next apply learns it again if it still applies.

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::{
    Api, Client,
    core::{PartialObjectMeta, Status},
    runtime::{WatchStreamExt, watcher},
};
use parking_lot::Mutex;

/// The cause type of the namespace lifecycle admission's refusal (`v1.NamespaceTerminatingCause`).
pub const CAUSE_NAMESPACE_TERMINATING: &str = "NamespaceTerminating";

/// A namespace known terminating is looked at again after this long.
pub const RECHECK: Duration = Duration::from_secs(5);

/// A namespace that cannot be looked at is forgotten this long after it was learnt.
pub const EXPIRE: Duration = Duration::from_secs(60);

/// Whether an API error is the refusal of a write into a namespace being terminated: a 403
/// whose status details carry the cause `NamespaceTerminating` (the type, not the message).
pub fn is_refusal(status: &Status) -> bool {
    status.code == 403
        && status.details.as_ref().is_some_and(|d| {
            d.causes
                .iter()
                .any(|c| c.reason == CAUSE_NAMESPACE_TERMINATING)
        })
}

/// What a look at a namespace found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Look {
    /// It exists and is being deleted.
    Terminating,
    /// It does not exist, or exists and is not being deleted: applies may go on.
    GoneOrBack,
    /// The look failed: nothing learnt.
    Failed,
}

/// What a look that answered `found` (the namespace, `None` when not found) says.
pub fn look(found: kube::Result<Option<bool>>) -> Look {
    match found {
        Ok(Some(true)) => Look::Terminating,
        Ok(_) => Look::GoneOrBack,
        Err(_) => Look::Failed,
    }
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    learnt: Instant,
    checked: Instant,
    /// A look is under way (others keep the namespace blocked meanwhile).
    looking: bool,
}

/// What to do about a known namespace now.
#[derive(Debug, PartialEq, Eq)]
enum Due {
    /// Blocked, nothing to do.
    Blocked,
    /// Blocked; look again now.
    Look,
    /// Forgotten: could not be looked at for [`EXPIRE`].
    Expired,
}

fn due(e: &Entry, now: Instant) -> Due {
    if now.duration_since(e.learnt) >= EXPIRE && now.duration_since(e.checked) >= EXPIRE {
        Due::Expired
    } else if !e.looking && now.duration_since(e.checked) >= RECHECK {
        Due::Look
    } else {
        Due::Blocked
    }
}

/// The namespaces known to be terminating, shared by every reconcile and the member watches.
pub struct Terminating {
    client: Client,
    known: Mutex<HashMap<String, Entry>>,
}

impl Terminating {
    /// Looks namespaces up with `client` (the operator's own).
    pub fn new(client: Client) -> Self {
        Terminating {
            client,
            known: Mutex::new(HashMap::new()),
        }
    }

    /// Records that `namespace` is being terminated (a refused write, the watch, a look);
    /// whether it was not known so before.
    pub fn learn(&self, namespace: &str) -> bool {
        let now = Instant::now();
        let mut known = self.known.lock();
        if known.contains_key(namespace) {
            return false;
        }
        tracing::info!(
            namespace,
            "namespace is being terminated: no more applies into it"
        );
        known.insert(
            namespace.to_string(),
            Entry {
                learnt: now,
                checked: now,
                looking: false,
            },
        );
        true
    }

    /// Forgets `namespace` (gone, or not being deleted).
    fn forget(&self, namespace: &str) {
        if self.known.lock().remove(namespace).is_some() {
            tracing::info!(
                namespace,
                "namespace no longer being terminated: applies go on"
            );
        }
    }

    /// Follows the namespaces (a metadata-only watch), where the operator may watch them:
    /// one being deleted is known at once, before any write into it is refused; one gone or
    /// back is forgotten. Never returns. Without the permission to list namespaces (a
    /// namespaced install) it stops following and the refusals alone teach.
    pub async fn follow(&self, on_learnt: impl Fn(&str)) {
        let api: Api<PartialObjectMeta<Namespace>> = Api::all(self.client.clone());
        let mut events = watcher(api, watcher::Config::default().any_semantic())
            .backoff(crate::backoff::backoff())
            .boxed();
        while let Some(event) = events.next().await {
            match event {
                Ok(watcher::Event::Apply(n) | watcher::Event::InitApply(n)) => {
                    if let Some(name) = self.seen(&n) {
                        on_learnt(name);
                    }
                }
                Ok(watcher::Event::Delete(n)) => {
                    self.forget(n.metadata.name.as_deref().unwrap_or_default())
                }
                Ok(_) => {}
                Err(watcher::Error::InitialListFailed(kube::Error::Api(s))) if s.code == 403 => {
                    tracing::info!(
                        "namespaces may not be listed: terminating namespaces are learnt from refused writes only"
                    );
                    break;
                }
                Err(e) => tracing::debug!(error = %e, "namespace watch"),
            }
        }
        std::future::pending::<()>().await;
    }

    /// A namespace as the watch sees it; its name when it is newly learnt terminating.
    fn seen<'a>(&self, n: &'a PartialObjectMeta<Namespace>) -> Option<&'a str> {
        let name = n.metadata.name.as_deref()?;
        match n.metadata.deletion_timestamp {
            Some(_) => self.learn(name).then_some(name),
            None => {
                self.forget(name);
                None
            }
        }
    }

    /// Whether `namespace` is known terminating (no I/O: for the member watches, which
    /// start no reconcile for what is deleted there).
    pub fn contains(&self, namespace: &str) -> bool {
        self.known.lock().contains_key(namespace)
    }

    /// One metadata GET of `namespace`: what it finds (see [`look`]).
    async fn look_at(&self, namespace: &str) -> Look {
        let api: Api<Namespace> = Api::all(self.client.clone());
        let found = api
            .get_metadata_opt(namespace)
            .await
            .map(|n| n.map(|n| n.metadata.deletion_timestamp.is_some()));
        look(found)
    }

    /// Whether `namespace` is being terminated: known so, or found so by one metadata GET
    /// (then learnt). A look that fails says no.
    pub async fn confirms(&self, namespace: &str) -> bool {
        if self.contains(namespace) {
            return true;
        }
        let terminating = self.look_at(namespace).await == Look::Terminating;
        if terminating {
            self.learn(namespace);
        }
        terminating
    }

    /// Whether nothing may be applied into `namespace` now: it is known terminating, and a
    /// look at it (at most every [`RECHECK`], shared) did not find it gone or back.
    pub async fn blocks(&self, namespace: &str) -> bool {
        let due = {
            let mut known = self.known.lock();
            let Some(entry) = known.get_mut(namespace) else {
                return false;
            };
            let due = due(entry, Instant::now());
            match due {
                Due::Expired => {
                    known.remove(namespace);
                    return false;
                }
                Due::Look => entry.looking = true,
                Due::Blocked => {}
            }
            due
        };
        if due == Due::Blocked {
            return true;
        }
        let found = self.look_at(namespace).await;
        self.looked(namespace, found)
    }

    /// Records a look's finding; returns whether the namespace stays blocked.
    fn looked(&self, namespace: &str, found: Look) -> bool {
        let mut known = self.known.lock();
        match found {
            Look::GoneOrBack => {
                tracing::info!(
                    namespace,
                    "namespace no longer being terminated: applies go on"
                );
                known.remove(namespace);
                false
            }
            Look::Terminating | Look::Failed => {
                let Some(entry) = known.get_mut(namespace) else {
                    return false;
                };
                entry.looking = false;
                if found == Look::Terminating {
                    entry.checked = Instant::now();
                }
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::response::{StatusCause, StatusDetails};

    fn forbidden(cause: &str) -> Status {
        let mut s = Status::failure("forbidden", "Forbidden").with_code(403);
        s.details = Some(StatusDetails {
            causes: vec![StatusCause {
                reason: cause.into(),
                message: "namespace team is being terminated".into(),
                field: "metadata.namespace".into(),
            }],
            name: String::new(),
            group: String::new(),
            kind: String::new(),
            uid: String::new(),
            retry_after_seconds: 0,
        });
        s
    }

    #[test]
    fn the_refusal_is_known_by_its_cause_type_only() {
        assert!(is_refusal(&forbidden(CAUSE_NAMESPACE_TERMINATING)));
        // Another 403 (RBAC), even with a message that names termination, is not.
        assert!(!is_refusal(&forbidden("")));
        let rbac = Status::failure("is being terminated", "Forbidden").with_code(403);
        assert!(!is_refusal(&rbac));
        let mut conflict = forbidden(CAUSE_NAMESPACE_TERMINATING);
        conflict.code = 409;
        assert!(!is_refusal(&conflict));
    }

    #[test]
    fn a_look_decides_on_the_deletion_timestamp() {
        assert_eq!(look(Ok(Some(true))), Look::Terminating);
        assert_eq!(look(Ok(Some(false))), Look::GoneOrBack);
        assert_eq!(look(Ok(None)), Look::GoneOrBack);
        let err = kube::Error::Api(Box::new(Status::failure("no", "Forbidden").with_code(403)));
        assert_eq!(look(Err(err)), Look::Failed);
    }

    #[test]
    fn a_known_namespace_is_looked_at_again_after_recheck_and_forgotten_after_expire() {
        let t0 = Instant::now();
        let e = Entry {
            learnt: t0,
            checked: t0,
            looking: false,
        };
        assert_eq!(due(&e, t0), Due::Blocked);
        assert_eq!(due(&e, t0 + RECHECK), Due::Look);
        let looking = Entry { looking: true, ..e };
        assert_eq!(due(&looking, t0 + RECHECK), Due::Blocked);
        assert_eq!(due(&e, t0 + EXPIRE), Due::Expired);
        // Looked at (still terminating) a moment ago: not expired.
        let fresh = Entry {
            checked: t0 + EXPIRE,
            ..e
        };
        assert_eq!(due(&fresh, t0 + EXPIRE), Due::Blocked);
    }
}

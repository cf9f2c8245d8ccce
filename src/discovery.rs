//! API discovery, cached for [`TTL`]. Resolving kinds the cache does not know refreshes it
//! once per batch (a CRD may have been installed since). Concurrent misses share one refresh:
//! a lookup that started before the last refresh finished uses that refresh instead of
//! starting another. [`Resolver::resolve_group_kinds_since`] answers from a discovery that
//! began after a given moment (to confirm that a kind is gone, or find where it moved).

use std::{
    collections::HashMap,
    hash::Hash,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use kube::{
    Api, Client,
    discovery::{ApiCapabilities, ApiResource, Discovery, Scope},
};
use tokio::sync::{Mutex, RwLock};

use crate::{Error, Result, applyset::GroupKind};

/// How long a discovery snapshot is used before it is refreshed anyway (a served version
/// removed, a CRD's scope changed).
pub const TTL: Duration = Duration::from_secs(300);

/// A resolved kind: its API resource (with the plural the server serves) and whether it is
/// namespaced.
#[derive(Clone, Debug, PartialEq)]
pub struct Resolved {
    pub resource: ApiResource,
    pub namespaced: bool,
}

impl Resolved {
    fn new((resource, caps): (ApiResource, ApiCapabilities)) -> Self {
        Self {
            resource,
            namespaced: caps.scope == Scope::Namespaced,
        }
    }
}

/// A kind at the version the server prefers.
fn recommended_kind(d: &Discovery, gk: &GroupKind) -> Option<Resolved> {
    d.get(&gk.group)
        .and_then(|g| g.recommended_kind(&gk.kind))
        .map(Resolved::new)
}

/// Cached discovery shared by all reconciles.
pub struct Resolver {
    client: Client,
    cache: RwLock<Option<Snapshot>>,
    refresh: Mutex<()>,
    /// Set when something learnt that the cache is wrong (see [`Resolver::invalidator`]).
    stale: Arc<AtomicBool>,
}

/// One discovery run: when it began and when it finished.
struct Snapshot {
    discovery: Arc<Discovery>,
    began: Instant,
    at: Instant,
}

impl Resolver {
    pub fn new(client: Client) -> Self {
        Self {
            client,
            cache: RwLock::new(None),
            refresh: Mutex::new(()),
            stale: Arc::default(),
        }
    }

    /// A handle that makes the next lookup run discovery again (a watched kind's LIST
    /// answered 404: the cache still serves a kind the server does not).
    pub fn invalidator(&self) -> impl Fn() + Send + Sync + 'static {
        let stale = self.stale.clone();
        move || stale.store(true, Ordering::SeqCst)
    }

    async fn current(&self) -> Result<Arc<Discovery>> {
        let forced = self.stale.swap(false, Ordering::SeqCst);
        let stale = match &*self.cache.read().await {
            Some(s) if !forced && s.at.elapsed() < TTL => return Ok(s.discovery.clone()),
            Some(s) => Some(s.at),
            None => None,
        };
        self.refresh(stale, false).await
    }

    /// Runs discovery again unless another task did so after `seen` (with `began`: a run that
    /// began after `seen`; else one that finished after it).
    async fn refresh(&self, seen: Option<Instant>, began: bool) -> Result<Arc<Discovery>> {
        let _guard = self.refresh.lock().await;
        if let Some(s) = &*self.cache.read().await
            && seen.is_none_or(|seen| if began { s.began > seen } else { s.at > seen })
        {
            return Ok(s.discovery.clone());
        }
        let started = Instant::now();
        let discovery = match Discovery::new(self.client.clone()).run_aggregated().await {
            Ok(d) => d,
            Err(e) => {
                tracing::debug!(error = %e, "aggregated discovery failed, walking the groups");
                Discovery::new(self.client.clone())
                    .run()
                    .await
                    .map_err(Error::Discovery)?
            }
        };
        let d = Arc::new(discovery);
        *self.cache.write().await = Some(Snapshot {
            discovery: d.clone(),
            began: started,
            at: Instant::now(),
        });
        Ok(d)
    }

    async fn lookup<T>(&self, f: impl Fn(&Discovery) -> Option<T>) -> Result<Option<T>> {
        let started = Instant::now();
        let d = self.current().await?;
        if let Some(v) = f(&d) {
            return Ok(Some(v));
        }
        let d = self.refresh(Some(started), false).await?;
        Ok(f(&d))
    }

    /// Resolves every key, refreshing discovery at most once for all the misses.
    async fn lookup_all<K: Clone + Eq + Hash>(
        &self,
        keys: &[K],
        f: impl Fn(&Discovery, &K) -> Option<Resolved>,
    ) -> Result<HashMap<K, Resolved>> {
        let started = Instant::now();
        let d = self.current().await?;
        let mut out = HashMap::new();
        let mut missing = Vec::new();
        for k in keys {
            match f(&d, k) {
                Some(r) => {
                    out.insert(k.clone(), r);
                }
                None => missing.push(k),
            }
        }
        if !missing.is_empty() {
            let d = self.refresh(Some(started), false).await?;
            for k in missing {
                if let Some(r) = f(&d, k) {
                    out.insert(k.clone(), r);
                }
            }
        }
        Ok(out)
    }

    /// Resolves `(group, version, kind)` triples exactly (the version must be served).
    pub async fn resolve_all(
        &self,
        gvks: &[(String, String, String)],
    ) -> Result<HashMap<(String, String, String), Resolved>> {
        self.lookup_all(gvks, |d, (g, v, k)| {
            d.resolve_gvk(&kube::api::GroupVersionKind::gvk(g, v, k))
                .map(Resolved::new)
        })
        .await
    }

    /// Resolves group-kinds at the version the server prefers.
    pub async fn resolve_group_kinds(
        &self,
        gks: &[GroupKind],
    ) -> Result<HashMap<GroupKind, Resolved>> {
        self.lookup_all(gks, recommended_kind).await
    }

    /// Resolves group-kinds with a discovery that began after `since` (reusing one if another
    /// lookup ran it, else running it now): what the server serves now. Kinds it does not
    /// serve are absent from the answer.
    pub async fn resolve_group_kinds_since(
        &self,
        gks: &[GroupKind],
        since: Instant,
    ) -> Result<HashMap<GroupKind, Resolved>> {
        let d = self.refresh(Some(since), true).await?;
        Ok(gks
            .iter()
            .filter_map(|gk| recommended_kind(&d, gk).map(|r| (gk.clone(), r)))
            .collect())
    }

    /// Resolves the deprecated `resource.group` form to a kind.
    pub async fn resolve_group_resource(
        &self,
        group: &str,
        resource: &str,
    ) -> Result<Option<(GroupKind, Resolved)>> {
        self.lookup(|d| {
            d.get(group).and_then(|g| {
                g.recommended_resources()
                    .into_iter()
                    .find(|(ar, _)| ar.plural == resource)
                    .map(|r| {
                        let resolved = Resolved::new(r);
                        (
                            GroupKind::new(group, resolved.resource.kind.clone()),
                            resolved,
                        )
                    })
            })
        })
        .await
    }
}
/// The API of `resource` in `namespace`, or cluster-wide (a cluster-scoped kind, or every
/// namespace) without one: the one choice of every request about a member.
pub fn api_in<K>(client: &Client, namespace: Option<&str>, resource: &ApiResource) -> Api<K>
where
    K: kube::Resource<DynamicType = ApiResource, Scope = kube::core::DynamicResourceScope>,
{
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, resource),
        None => Api::all_with(client.clone(), resource),
    }
}

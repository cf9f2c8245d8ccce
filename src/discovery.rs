//! API discovery, cached for [`TTL`]. Resolving kinds the cache does not know refreshes it
//! once per batch (a CRD may have been installed since). Concurrent misses share one refresh:
//! a lookup that started before the last refresh finished uses that refresh instead of
//! starting another.

use std::{
    collections::HashMap,
    hash::Hash,
    sync::Arc,
    time::{Duration, Instant},
};

use kube::{
    Client,
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

/// Cached discovery shared by all reconciles.
pub struct Resolver {
    client: Client,
    cache: RwLock<Option<(Arc<Discovery>, Instant)>>,
    refresh: Mutex<()>,
}

impl Resolver {
    pub fn new(client: Client) -> Self {
        Self {
            client,
            cache: RwLock::new(None),
            refresh: Mutex::new(()),
        }
    }

    async fn current(&self) -> Result<Arc<Discovery>> {
        let stale = match &*self.cache.read().await {
            Some((d, at)) if at.elapsed() < TTL => return Ok(d.clone()),
            Some((_, at)) => Some(*at),
            None => None,
        };
        self.refresh(stale).await
    }

    /// Runs discovery again unless another task did so after `seen`.
    async fn refresh(&self, seen: Option<Instant>) -> Result<Arc<Discovery>> {
        let _guard = self.refresh.lock().await;
        if let Some((d, at)) = &*self.cache.read().await
            && seen.is_none_or(|s| *at > s)
        {
            return Ok(d.clone());
        }
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
        *self.cache.write().await = Some((d.clone(), Instant::now()));
        Ok(d)
    }

    async fn lookup<T>(&self, f: impl Fn(&Discovery) -> Option<T>) -> Result<Option<T>> {
        let started = Instant::now();
        let d = self.current().await?;
        if let Some(v) = f(&d) {
            return Ok(Some(v));
        }
        let d = self.refresh(Some(started)).await?;
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
            let d = self.refresh(Some(started)).await?;
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
        self.lookup_all(gks, |d, gk| {
            d.get(&gk.group)
                .and_then(|g| g.recommended_kind(&gk.kind))
                .map(Resolved::new)
        })
        .await
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

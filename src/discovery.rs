//! API discovery, cached. Resolving a kind the cache does not know refreshes it once (a CRD
//! may have been installed since). Concurrent misses share one refresh: a lookup that started
//! before the last refresh finished uses that refresh instead of starting another.

use std::{sync::Arc, time::Instant};

use kube::{
    Client,
    discovery::{ApiCapabilities, ApiResource, Discovery, Scope},
};
use tokio::sync::{Mutex, RwLock};

use crate::{Error, Result, applyset::GroupKind};

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
        if let Some((d, _)) = &*self.cache.read().await {
            return Ok(d.clone());
        }
        self.refresh(None).await
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

    /// Resolves `apiVersion` + `kind` exactly (the version must be served).
    pub async fn resolve(
        &self,
        group: &str,
        version: &str,
        kind: &str,
    ) -> Result<Option<Resolved>> {
        let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
        self.lookup(|d| d.resolve_gvk(&gvk).map(Resolved::new))
            .await
    }

    /// Resolves a group and kind at the version the server prefers (for listing and deleting
    /// by kind, where the version does not matter).
    pub async fn resolve_group_kind(&self, gk: &GroupKind) -> Result<Option<Resolved>> {
        self.lookup(|d| {
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

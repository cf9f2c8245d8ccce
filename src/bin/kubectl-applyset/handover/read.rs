//! Step 1 of the handover: refuse a Kustomization applied by another one, read the
//! Kustomization, resolve its inventory's kinds, set apart the inventory objects Flux never
//! owned, and pin the set's body to the revision Flux applied. Nothing is changed here.

use applyset_operator::{
    applyset::GroupKind,
    convert::FluxRef,
    discovery::{Resolved, Resolver, api_in},
    parent::Parent,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Api, Client, api::DynamicObject};
use serde_json::Value;

use super::{
    Handover, HandoverError, Left, checks,
    checks::{Exempt, InventoryId},
    kustomization_resource, revision,
};

/// Refuses `from` when another Kustomization applies it (see [`checks::parent_refusal`]),
/// before anything else (a Kustomization suspended in Git is refused so too, not as suspended).
pub(super) async fn refuse_applied_by_parent(
    client: &Client,
    from: &FluxRef,
) -> Result<(), HandoverError> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &from.namespace, &kustomization_resource());
    let found = api
        .get_metadata_opt(&from.name)
        .await
        .map_err(|error| HandoverError::Api {
            doing: format!("reading {from}"),
            error,
            left: Box::new(Left::Unchanged),
        })?;
    match found
        .as_ref()
        .and_then(|k| checks::applied_by_parent(&k.metadata))
    {
        Some(why) => Err(HandoverError::Refused {
            kustomization: from.clone(),
            why: checks::parent_refusal(&why),
            left: Box::new(Left::Unchanged),
        }),
        None => Ok(()),
    }
}

/// What step 1 read: the Kustomization, the inventory objects to wait for (resolved; not those
/// Flux never owned), the set's body pinned, Flux's revision and the pin.
pub(super) struct Read {
    pub(super) kustomization: Value,
    pub(super) objects: Vec<(InventoryId, Resolved)>,
    pub(super) pinned: Value,
    pub(super) revision: String,
    pub(super) pin: revision::Pin,
}
impl<P: Parent> Handover<'_, P> {
    /// Step 1: the Kustomization (not being deleted, not applied by another one, having
    /// applied its last revision), its inventory's objects, resolved, and the set's body
    /// `converted` pinned to the revision Flux applied.
    pub(super) async fn read(&self, converted: &Value) -> Result<Read, HandoverError> {
        let doing = format!("reading {}", self.from);
        let found = self.kustomizations.get_opt(&self.from.name).await;
        let found = found.map_err(self.api_error(doing, &Left::Unchanged))?;
        let refuse = |why: &str| HandoverError::Refused {
            kustomization: self.from.clone(),
            why: why.into(),
            left: Box::new(Left::Unchanged),
        };
        let found = found.ok_or_else(|| refuse("it does not exist"))?;
        if found.metadata.deletion_timestamp.is_some() {
            return Err(refuse("it is being deleted"));
        }
        let kustomization = serde_json::to_value(&found)
            .map_err(self.encode_error(&self.from.to_string(), &Left::Unchanged))?;
        if let Some(why) = checks::applied_by_parent(&found.metadata) {
            return Err(refuse(&checks::parent_refusal(&why)));
        }
        let unchanged = || Box::new(Left::Unchanged);
        let revision =
            revision::applied(&kustomization).map_err(|error| HandoverError::NotApplied {
                kustomization: self.from.clone(),
                error: Box::new(error),
                left: unchanged(),
            })?;
        let pin_error = |error: revision::PinError| HandoverError::Pin {
            kustomization: self.from.clone(),
            error: Box::new(error),
            left: unchanged(),
        };
        let pin = revision::pin(self.source_kind, &revision).map_err(pin_error)?;
        let mut pinned = converted.clone();
        revision::pinned(&mut pinned, &pin).map_err(pin_error)?;
        let ids = checks::inventory(&kustomization).map_err(|error| HandoverError::Inventory {
            kustomization: self.from.clone(),
            error,
            left: unchanged(),
        })?;
        let resolved = self.resolve(ids).await?;
        let count = resolved.len();
        let (objects, never_flux) = self.split_never_flux(resolved).await?;
        eprintln!(
            "[1/6] read {}: {count} objects in its status.inventory; Flux applied revision {revision}: the set is pinned to its {pin}",
            self.from,
        );
        for (object, why) in &never_flux {
            eprintln!("note: {object} {why}");
        }
        Ok(Read {
            kustomization,
            objects,
            pinned,
            revision,
            pin,
        })
    }

    /// The inventory objects Flux applied, and apart those it never owned (by a metadata-only
    /// GET of each, before anything is changed: see [`checks::never_flux`]).
    async fn split_never_flux(
        &self,
        objects: Vec<(InventoryId, Resolved)>,
    ) -> Result<(Vec<(InventoryId, Resolved)>, Vec<(String, Exempt)>), HandoverError> {
        let (mut owned, mut never) = (Vec::with_capacity(objects.len()), Vec::new());
        for (id, resolved) in objects {
            let live = self.metadata(&id, &resolved, &Left::Unchanged).await?;
            match live.as_ref().and_then(checks::never_flux) {
                Some(why) => never.push((id.to_string(), why)),
                None => owned.push((id, resolved)),
            }
        }
        Ok((owned, never))
    }

    /// The metadata of the inventory object `id` (`None`: it does not exist).
    pub(super) async fn metadata(
        &self,
        id: &InventoryId,
        resolved: &Resolved,
        left: &Left,
    ) -> Result<Option<ObjectMeta>, HandoverError> {
        let namespace =
            (resolved.namespaced && !id.namespace.is_empty()).then_some(id.namespace.as_str());
        let api: Api<DynamicObject> = api_in(self.client, namespace, &resolved.resource);
        let live = api
            .get_metadata_opt(&id.name)
            .await
            .map_err(self.api_error(format!("reading {id}"), left))?;
        Ok(live.map(|o| o.metadata))
    }

    /// The inventory's kinds by discovery: at the version recorded, else the preferred one.
    async fn resolve(
        &self,
        ids: Vec<InventoryId>,
    ) -> Result<Vec<(InventoryId, Resolved)>, HandoverError> {
        let resolver = Resolver::new(self.client.clone());
        let gvks: Vec<_> = ids
            .iter()
            .map(|i| (i.group.clone(), i.version.clone(), i.kind.clone()))
            .collect();
        let gks: Vec<_> = ids
            .iter()
            .map(|i| GroupKind::new(&i.group, &i.kind))
            .collect();
        let discovery_failed = |e: applyset_operator::Error| HandoverError::Refused {
            kustomization: self.from.clone(),
            why: format!("discovery of its inventory's kinds failed: {e}"),
            left: Box::new(Left::Unchanged),
        };
        let exact = resolver
            .resolve_all(&gvks)
            .await
            .map_err(discovery_failed)?;
        let preferred = resolver
            .resolve_group_kinds(&gks)
            .await
            .map_err(discovery_failed)?;
        let mut out = Vec::with_capacity(ids.len());
        for (id, (gvk, gk)) in ids.into_iter().zip(gvks.iter().zip(&gks)) {
            let Some(r) = exact.get(gvk).or_else(|| preferred.get(gk)) else {
                return Err(HandoverError::Refused {
                    kustomization: self.from.clone(),
                    why: format!("{id} of its inventory is of a kind the cluster does not serve"),
                    left: Box::new(Left::Unchanged),
                });
            };
            out.push((id, r.clone()));
        }
        Ok(out)
    }
}

//! Prune: find the objects of this ApplySet that are no longer declared, and delete them
//! safely.
//!
//! Candidates come from metadata-only LISTs by the `part-of` label for every recorded kind in
//! the recorded namespaces. [`select`] keeps only what is provably ours: not declared, not
//! annotated `applyset.dev/prune: disabled`, its `part-of` label owned by our member field
//! manager, and no controller owner reference. Deletes carry a UID precondition (an object
//! re-created meanwhile is left alone) and run in reverse dependency order.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use futures::{StreamExt, TryStreamExt, stream};
use kube::{
    Api, Client,
    api::{DeleteParams, ListParams, ObjectMeta, Preconditions},
    core::{DynamicObject, PartialObjectMeta},
    discovery::{ApiResource, Scope},
};
use serde_json::Value;

use crate::{
    Error, Result,
    api::MemberRef,
    apply::LiveObject,
    applyset::{self, GroupKind, LABEL_PART_OF},
    discovery::{Resolved, Resolver},
    render,
};

/// A live object labelled with our ApplySet ID.
#[derive(Clone, Debug)]
pub struct LiveMember {
    pub resource: ApiResource,
    pub namespaced: bool,
    pub reference: MemberRef,
    pub meta: ObjectMeta,
}

impl LiveMember {
    pub fn live(&self) -> LiveObject {
        LiveObject {
            uid: self.meta.uid.clone().unwrap_or_default(),
            resource_version: self.meta.resource_version.clone().unwrap_or_default(),
        }
    }
}

/// Lists, metadata only, every object labelled `part-of=<id>` of the given kinds: in each of
/// `namespaces` for namespaced kinds, cluster-wide for cluster-scoped ones. Kinds in `known`
/// (resolved by the render, including kinds of CRDs declared in the set) are not looked up
/// again; kinds the server no longer serves (a deleted CRD) and kinds we may not list are
/// skipped.
#[allow(clippy::too_many_arguments)]
pub async fn list(
    client: &Client,
    resolver: &Resolver,
    known: &HashMap<GroupKind, Resolved>,
    kinds: &BTreeSet<GroupKind>,
    namespaces: &BTreeSet<String>,
    id: &str,
    concurrency: usize,
) -> Result<Vec<LiveMember>> {
    let mut targets: Vec<(GroupKind, ApiResource, bool, Option<String>)> = Vec::new();
    for gk in kinds {
        let resolved = match known.get(gk) {
            Some(r) => Some(r.clone()),
            None => resolver.resolve_group_kind(gk).await?,
        };
        let Some(resolved) = resolved else {
            tracing::debug!(kind = %gk, "not served any more; its objects are not prune candidates");
            continue;
        };
        if resolved.namespaced {
            for ns in namespaces {
                targets.push((
                    gk.clone(),
                    resolved.resource.clone(),
                    true,
                    Some(ns.clone()),
                ));
            }
        } else {
            targets.push((gk.clone(), resolved.resource.clone(), false, None));
        }
    }
    let selector = format!("{LABEL_PART_OF}={id}");
    let lists: Vec<Vec<LiveMember>> = stream::iter(targets)
        .map(|(gk, resource, namespaced, ns)| {
            let selector = selector.clone();
            async move { list_one(client, gk, resource, namespaced, ns, &selector).await }
        })
        .buffer_unordered(concurrency.max(1))
        .try_collect()
        .await?;
    Ok(lists.into_iter().flatten().collect())
}

async fn list_one(
    client: &Client,
    gk: GroupKind,
    resource: ApiResource,
    namespaced: bool,
    namespace: Option<String>,
    selector: &str,
) -> Result<Vec<LiveMember>> {
    let api: Api<PartialObjectMeta<DynamicObject>> = match &namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    let mut out = Vec::new();
    let mut params = ListParams::default().labels(selector).limit(500);
    loop {
        let page = match api.list_metadata(&params).await {
            Ok(p) => p,
            Err(kube::Error::Api(s)) if s.is_forbidden() => {
                tracing::warn!(kind = %gk, namespace = ?namespace, "may not list; its objects are not prune candidates");
                return Ok(out);
            }
            // Not served (yet, or any more): also the plain 404 of a route that does not exist.
            Err(kube::Error::Api(s)) if s.is_not_found() || s.code == 404 => return Ok(out),
            Err(e) => return Err(e.into()),
        };
        for item in page.items {
            let name = item.metadata.name.clone().unwrap_or_default();
            out.push(LiveMember {
                resource: resource.clone(),
                namespaced,
                reference: MemberRef {
                    group: gk.group.clone(),
                    kind: gk.kind.clone(),
                    namespace: if namespaced {
                        item.metadata.namespace.clone()
                    } else {
                        None
                    },
                    name,
                },
                meta: item.metadata,
            });
        }
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => return Ok(out),
        }
    }
}

/// Why a candidate is kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Retained {
    /// Annotated `applyset.dev/prune: disabled`.
    PruneDisabled,
    /// Its `part-of` label is not managed by our member field manager (someone copied it).
    LabelNotOurs,
    /// It has a controller owner reference (something else manages its life).
    Controlled(String),
}

/// The outcome of [`select`].
#[derive(Clone, Debug, Default)]
pub struct Selection {
    pub delete: Vec<LiveMember>,
    pub retained: Vec<(LiveMember, Retained)>,
}

/// Chooses what to delete among the live objects: those of `kinds` (the kinds recorded on
/// the parent before this reconcile) that are not `declared`, minus those that must be kept.
pub fn select(
    live: &[LiveMember],
    declared: &BTreeSet<MemberRef>,
    kinds: &BTreeSet<GroupKind>,
    manager: &str,
) -> Selection {
    let mut s = Selection::default();
    for m in live {
        let gk = GroupKind::new(m.reference.group.clone(), m.reference.kind.clone());
        if declared.contains(&m.reference) || !kinds.contains(&gk) {
            continue;
        }
        if applyset::is_prune_disabled(m.meta.annotations.as_ref()) {
            s.retained.push((m.clone(), Retained::PruneDisabled));
        } else if let Some(owner) = m
            .meta
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true))
        {
            s.retained.push((
                m.clone(),
                Retained::Controlled(format!("{} {}", owner.kind, owner.name)),
            ));
        } else if !label_owned_by(&m.meta, manager) {
            s.retained.push((m.clone(), Retained::LabelNotOurs));
        } else {
            s.delete.push(m.clone());
        }
    }
    s
}

/// Whether `manager` owns the `part-of` label according to managedFields.
pub fn label_owned_by(meta: &ObjectMeta, manager: &str) -> bool {
    let key = format!("f:{LABEL_PART_OF}");
    meta.managed_fields.iter().flatten().any(|mf| {
        mf.manager.as_deref() == Some(manager)
            && mf
                .fields_v1
                .as_ref()
                .and_then(|f| f.0.get("f:metadata"))
                .and_then(|m| m.get("f:labels"))
                .and_then(Value::as_object)
                .is_some_and(|labels| labels.contains_key(&key))
    })
}

/// The result of a delete with a UID precondition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deleted {
    /// Deletion started (background propagation).
    Deleted,
    /// Already gone.
    Gone,
    /// An object of that name exists with another UID (re-created): left alone.
    UidMismatch,
}

/// Deletes one object if, and only if, it still has `uid`.
pub async fn delete_with_uid(
    client: &Client,
    resource: &ApiResource,
    namespace: Option<&str>,
    name: &str,
    uid: &str,
) -> Result<Deleted, Error> {
    let api: Api<DynamicObject> = match namespace {
        Some(ns) => Api::dynamic(client.clone(), resource, &Scope::Namespaced).constrain(ns),
        None => Api::dynamic(client.clone(), resource, &Scope::Cluster),
    };
    let params = DeleteParams::background().preconditions(Preconditions {
        uid: Some(uid.to_string()),
        resource_version: None,
    });
    match api.delete(name, &params).await {
        Ok(_) => Ok(Deleted::Deleted),
        Err(kube::Error::Api(s)) if s.is_not_found() || s.code == 404 => Ok(Deleted::Gone),
        Err(kube::Error::Api(s)) if s.is_conflict() && s.message.contains("UID") => {
            Ok(Deleted::UidMismatch)
        }
        Err(e) => Err(e.into()),
    }
}

/// Deletes `items` in reverse dependency order (namespaced objects, cluster-scoped objects,
/// Namespaces, CRDs), concurrently within a group. Returns one result per item.
pub async fn delete_all(
    client: &Client,
    items: &[LiveMember],
    concurrency: usize,
) -> Vec<(MemberRef, Result<Deleted, String>)> {
    let mut groups: BTreeMap<u8, Vec<&LiveMember>> = BTreeMap::new();
    for m in items {
        groups
            .entry(render::prune_order(
                &m.reference.group,
                &m.reference.kind,
                m.namespaced,
            ))
            .or_default()
            .push(m);
    }
    let mut out = Vec::with_capacity(items.len());
    for (_, group) in groups {
        let results: Vec<_> = stream::iter(0..group.len())
            .map(|i| {
                let m = group[i];
                async move {
                    let uid = m.meta.uid.clone().unwrap_or_default();
                    let r = delete_with_uid(
                        client,
                        &m.resource,
                        m.reference.namespace.as_deref(),
                        &m.reference.name,
                        &uid,
                    )
                    .await
                    .map_err(|e| format!("{}: {e}", m.reference));
                    (m.reference.clone(), r)
                }
            })
            .buffer_unordered(concurrency.max(1))
            .collect()
            .await;
        out.extend(results);
    }
    out
}

/// Live members by reference (for classifying apply outcomes).
pub fn by_reference(live: &[LiveMember]) -> HashMap<MemberRef, LiveObject> {
    live.iter()
        .map(|m| (m.reference.clone(), m.live()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
        FieldsV1, ManagedFieldsEntry, OwnerReference,
    };
    use serde_json::json;

    const MANAGER: &str = "applyset.dev/ns/team/web";

    fn live(kind: &str, name: &str, manager: Option<&str>) -> LiveMember {
        let managed = manager.map(|m| {
            vec![ManagedFieldsEntry {
                manager: Some(m.into()),
                operation: Some("Apply".into()),
                fields_v1: Some(FieldsV1(
                    json!({"f:metadata": {"f:labels": {format!("f:{LABEL_PART_OF}"): {}}}}),
                )),
                ..Default::default()
            }]
        });
        LiveMember {
            resource: ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
            namespaced: true,
            reference: MemberRef {
                group: String::new(),
                kind: kind.into(),
                namespace: Some("team".into()),
                name: name.into(),
            },
            meta: ObjectMeta {
                name: Some(name.into()),
                uid: Some(format!("uid-{name}")),
                managed_fields: managed,
                ..Default::default()
            },
        }
    }

    fn kinds(ks: &[&str]) -> BTreeSet<GroupKind> {
        ks.iter().map(|k| GroupKind::new("", *k)).collect()
    }

    #[test]
    fn undeclared_and_ours_is_deleted() {
        let l = [
            live("ConfigMap", "a", Some(MANAGER)),
            live("ConfigMap", "b", Some(MANAGER)),
        ];
        let declared = BTreeSet::from([l[0].reference.clone()]);
        let s = select(&l, &declared, &kinds(&["ConfigMap"]), MANAGER);
        assert_eq!(
            s.delete
                .iter()
                .map(|m| m.reference.name.as_str())
                .collect::<Vec<_>>(),
            ["b"]
        );
        assert!(s.retained.is_empty());
    }

    #[test]
    fn kinds_not_recorded_before_are_not_candidates() {
        let l = [live("Secret", "s", Some(MANAGER))];
        let s = select(&l, &BTreeSet::new(), &kinds(&["ConfigMap"]), MANAGER);
        assert!(s.delete.is_empty() && s.retained.is_empty());
    }

    #[test]
    fn prune_disabled_is_retained() {
        let mut m = live("ConfigMap", "keep", Some(MANAGER));
        m.meta.annotations = Some(BTreeMap::from([(
            "applyset.dev/prune".into(),
            "disabled".into(),
        )]));
        let s = select(&[m], &BTreeSet::new(), &kinds(&["ConfigMap"]), MANAGER);
        assert!(s.delete.is_empty());
        assert_eq!(s.retained[0].1, Retained::PruneDisabled);
    }

    #[test]
    fn label_copied_by_someone_else_is_retained() {
        let l = [
            live("ConfigMap", "x", Some("intruder")),
            live("ConfigMap", "y", None),
        ];
        let s = select(&l, &BTreeSet::new(), &kinds(&["ConfigMap"]), MANAGER);
        assert!(s.delete.is_empty());
        assert!(s.retained.iter().all(|(_, r)| *r == Retained::LabelNotOurs));
        assert_eq!(s.retained.len(), 2);
    }

    #[test]
    fn another_parents_manager_does_not_count() {
        let l = [live("ConfigMap", "x", Some("applyset.dev/ns/team/other"))];
        let s = select(&l, &BTreeSet::new(), &kinds(&["ConfigMap"]), MANAGER);
        assert!(s.delete.is_empty());
    }

    #[test]
    fn controlled_objects_are_retained() {
        let mut m = live("ConfigMap", "c", Some(MANAGER));
        m.meta.owner_references = Some(vec![OwnerReference {
            controller: Some(true),
            kind: "Deployment".into(),
            name: "web".into(),
            ..Default::default()
        }]);
        let s = select(
            &[m.clone()],
            &BTreeSet::new(),
            &kinds(&["ConfigMap"]),
            MANAGER,
        );
        assert_eq!(
            s.retained[0].1,
            Retained::Controlled("Deployment web".into())
        );
        // A non-controller owner reference does not protect it.
        if let Some(refs) = m.meta.owner_references.as_mut() {
            refs[0].controller = Some(false);
        }
        let s = select(&[m], &BTreeSet::new(), &kinds(&["ConfigMap"]), MANAGER);
        assert_eq!(s.delete.len(), 1);
    }
}

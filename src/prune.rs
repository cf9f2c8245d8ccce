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
use tokio::sync::Semaphore;

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
    let unknown: Vec<GroupKind> = kinds
        .iter()
        .filter(|gk| !known.contains_key(*gk))
        .cloned()
        .collect();
    let looked_up = resolver.resolve_group_kinds(&unknown).await?;
    let mut targets: Vec<(GroupKind, ApiResource, bool, Option<String>)> = Vec::new();
    for gk in kinds {
        let resolved = known.get(gk).or_else(|| looked_up.get(gk)).cloned();
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
                // Skipping would lose track of members: refuse instead (the superset stays).
                return Err(Error::Forbidden {
                    what: format!(
                        "list {} ({}) in {}",
                        resource.plural,
                        if resource.group.is_empty() {
                            "core"
                        } else {
                            resource.group.as_str()
                        },
                        namespace.as_deref().unwrap_or("all namespaces")
                    ),
                    message: s.message.clone(),
                });
            }
            // Not served (yet, or any more): also the plain 404 of a route that does not exist.
            Err(kube::Error::Api(s)) if s.is_not_found() || s.code == 404 => return Ok(out),
            Err(e) => return Err(e.into()),
        };
        for item in page.items {
            // Listed objects always have a name.
            let Some(reference) = MemberRef::of_live(&gk, namespaced, &item.metadata) else {
                continue;
            };
            out.push(LiveMember {
                resource: resource.clone(),
                namespaced,
                reference,
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
    /// A Namespace or CRD whose deletion would take a retained object with it.
    HoldsRetained(String),
}

/// The outcome of [`select`].
#[derive(Clone, Debug, Default)]
pub struct Selection {
    pub delete: Vec<LiveMember>,
    pub retained: Vec<(LiveMember, Retained)>,
}

/// Chooses what to delete among the live objects: those of `kinds` in `namespaces` (the
/// kinds and namespaces recorded on the parent before this reconcile; cluster-scoped objects
/// regardless of namespace) that are not `declared`, minus those that must be kept. A
/// Namespace or CRD is kept while a retained object lives in it or is of its kind: deleting
/// it would delete that object too.
pub fn select(
    live: &[LiveMember],
    declared: &HashMap<MemberRef, ApiResource>,
    kinds: &BTreeSet<GroupKind>,
    namespaces: &BTreeSet<String>,
    manager: &str,
) -> Selection {
    let mut s = Selection::default();
    for m in live {
        let gk = GroupKind::new(m.reference.group.clone(), m.reference.kind.clone());
        let in_scope = m
            .reference
            .namespace
            .as_ref()
            .is_none_or(|ns| namespaces.contains(ns));
        if declared.contains_key(&m.reference) || !kinds.contains(&gk) || !in_scope {
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
    // Anything kept — retained candidates and declared members alike — pins its Namespace
    // and the CRD of its kind.
    let mut pinned_namespaces: BTreeMap<String, String> = BTreeMap::new();
    let mut pinned_crds: BTreeMap<String, String> = BTreeMap::new();
    let kept = s
        .retained
        .iter()
        .map(|(m, _)| (&m.reference, &m.resource))
        .chain(declared.iter());
    for (reference, r) in kept {
        if let Some(ns) = &reference.namespace {
            pinned_namespaces
                .entry(ns.clone())
                .or_insert_with(|| reference.to_string());
        }
        if !r.group.is_empty() {
            pinned_crds
                .entry(format!("{}.{}", r.plural, r.group))
                .or_insert_with(|| reference.to_string());
        }
    }
    let (delete, keep): (Vec<LiveMember>, Vec<LiveMember>) =
        std::mem::take(&mut s.delete).into_iter().partition(|m| {
            let pin = if render::is_namespace(&m.reference.group, &m.reference.kind) {
                pinned_namespaces.get(&m.reference.name)
            } else if render::is_crd(&m.reference.group, &m.reference.kind) {
                pinned_crds.get(&m.reference.name)
            } else {
                None
            };
            pin.is_none()
        });
    for m in keep {
        let holder = if render::is_namespace(&m.reference.group, &m.reference.kind) {
            pinned_namespaces.get(&m.reference.name)
        } else {
            pinned_crds.get(&m.reference.name)
        };
        let why = Retained::HoldsRetained(holder.cloned().unwrap_or_default());
        s.retained.push((m, why));
    }
    s.delete = delete;
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
    /// The object changed since it was listed (its resourceVersion moved): left alone this
    /// time; the next reconcile looks again.
    Changed,
}

/// Deletes one object if, and only if, it still has `uid`.
pub async fn delete_with_uid(
    client: &Client,
    resource: &ApiResource,
    namespace: Option<&str>,
    name: &str,
    uid: &str,
) -> Result<Deleted, Error> {
    delete_if_unchanged(client, resource, namespace, name, uid, None).await
}

/// Deletes one object if it still has `uid` and, when given, `resource_version` (so nothing
/// that changed since the prune decision — an annotation added, a new owner — is deleted).
pub async fn delete_if_unchanged(
    client: &Client,
    resource: &ApiResource,
    namespace: Option<&str>,
    name: &str,
    uid: &str,
    resource_version: Option<&str>,
) -> Result<Deleted, Error> {
    let api: Api<DynamicObject> = match namespace {
        Some(ns) => Api::dynamic(client.clone(), resource, &Scope::Namespaced).constrain(ns),
        None => Api::dynamic(client.clone(), resource, &Scope::Cluster),
    };
    let params = DeleteParams::background().preconditions(Preconditions {
        uid: Some(uid.to_string()),
        resource_version: resource_version.map(str::to_string),
    });
    match api.delete(name, &params).await {
        Ok(_) => Ok(Deleted::Deleted),
        Err(kube::Error::Api(s)) if s.is_not_found() || s.code == 404 => Ok(Deleted::Gone),
        Err(kube::Error::Api(s)) if s.is_conflict() && s.message.contains("UID") => {
            Ok(Deleted::UidMismatch)
        }
        Err(kube::Error::Api(s)) if s.is_conflict() => Ok(Deleted::Changed),
        Err(e) => Err(e.into()),
    }
}

/// Deletes `items` in reverse dependency order (namespaced objects, cluster-scoped objects,
/// Namespaces, CRDs), concurrently within a group, each only if unchanged since listed. A
/// group with a failure (or a changed object) stops the later groups: a Namespace or CRD is
/// never deleted while something that should go before it is still there. Returns one result
/// per item attempted.
pub async fn delete_all(
    client: &Client,
    items: &[LiveMember],
    concurrency: usize,
    writes: Option<&Semaphore>,
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
                    let _permit = crate::apply::write_permit(writes).await;
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
        let stop = results
            .iter()
            .any(|(_, r)| matches!(r, Err(_) | Ok(Deleted::Changed)));
        out.extend(results);
        if stop {
            break;
        }
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

    fn team() -> BTreeSet<String> {
        BTreeSet::from(["team".to_string()])
    }

    fn none() -> HashMap<MemberRef, ApiResource> {
        HashMap::new()
    }

    #[test]
    fn undeclared_and_ours_is_deleted() {
        let l = [
            live("ConfigMap", "a", Some(MANAGER)),
            live("ConfigMap", "b", Some(MANAGER)),
        ];
        let declared = HashMap::from([(l[0].reference.clone(), l[0].resource.clone())]);
        let s = select(&l, &declared, &kinds(&["ConfigMap"]), &team(), MANAGER);
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
        let s = select(&l, &none(), &kinds(&["ConfigMap"]), &team(), MANAGER);
        assert!(s.delete.is_empty() && s.retained.is_empty());
    }

    #[test]
    fn prune_disabled_is_retained() {
        let mut m = live("ConfigMap", "keep", Some(MANAGER));
        m.meta.annotations = Some(BTreeMap::from([(
            "applyset.dev/prune".into(),
            "disabled".into(),
        )]));
        let s = select(&[m], &none(), &kinds(&["ConfigMap"]), &team(), MANAGER);
        assert!(s.delete.is_empty());
        assert_eq!(s.retained[0].1, Retained::PruneDisabled);
    }

    #[test]
    fn label_copied_by_someone_else_is_retained() {
        let l = [
            live("ConfigMap", "x", Some("intruder")),
            live("ConfigMap", "y", None),
        ];
        let s = select(&l, &none(), &kinds(&["ConfigMap"]), &team(), MANAGER);
        assert!(s.delete.is_empty());
        assert!(s.retained.iter().all(|(_, r)| *r == Retained::LabelNotOurs));
        assert_eq!(s.retained.len(), 2);
    }

    #[test]
    fn another_parents_manager_does_not_count() {
        let l = [live("ConfigMap", "x", Some("applyset.dev/ns/team/other"))];
        let s = select(&l, &none(), &kinds(&["ConfigMap"]), &team(), MANAGER);
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
            &none(),
            &kinds(&["ConfigMap"]),
            &team(),
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
        let s = select(&[m], &none(), &kinds(&["ConfigMap"]), &team(), MANAGER);
        assert_eq!(s.delete.len(), 1);
    }

    fn cluster(group: &str, kind: &str, name: &str) -> LiveMember {
        let mut m = live(kind, name, Some(MANAGER));
        m.reference.group = group.into();
        m.reference.namespace = None;
        m.namespaced = false;
        m
    }

    #[test]
    fn objects_outside_the_recorded_namespaces_are_not_candidates() {
        let mut m = live("ConfigMap", "elsewhere", Some(MANAGER));
        m.reference.namespace = Some("other".into());
        let s = select(&[m], &none(), &kinds(&["ConfigMap"]), &team(), MANAGER);
        assert!(s.delete.is_empty() && s.retained.is_empty());
    }

    #[test]
    fn a_namespace_holding_a_retained_object_is_kept() {
        let mut keep = live("ConfigMap", "keep", Some(MANAGER));
        keep.meta.annotations = Some(BTreeMap::from([(
            "applyset.dev/prune".into(),
            "disabled".into(),
        )]));
        let ns = cluster("", "Namespace", "team");
        let s = select(
            &[keep, ns],
            &none(),
            &kinds(&["ConfigMap", "Namespace"]),
            &team(),
            MANAGER,
        );
        assert!(s.delete.is_empty(), "{:?}", s.delete);
        assert!(s.retained.iter().any(|(m, why)| m.reference.name == "team"
            && matches!(why, Retained::HoldsRetained(h) if h.contains("keep"))));
    }

    #[test]
    fn a_namespace_holding_a_declared_member_is_kept() {
        let declared_cm = live("ConfigMap", "still-declared", Some(MANAGER));
        let declared =
            HashMap::from([(declared_cm.reference.clone(), declared_cm.resource.clone())]);
        let ns = cluster("", "Namespace", "team");
        let s = select(&[ns], &declared, &kinds(&["Namespace"]), &team(), MANAGER);
        assert!(s.delete.is_empty());
    }

    #[test]
    fn a_crd_whose_custom_resources_stay_is_kept_and_others_go() {
        let crds = BTreeSet::from([GroupKind::new(
            "apiextensions.k8s.io",
            "CustomResourceDefinition",
        )]);
        let widgets = cluster(
            "apiextensions.k8s.io",
            "CustomResourceDefinition",
            "widgets.example.com",
        );
        let gadgets = cluster(
            "apiextensions.k8s.io",
            "CustomResourceDefinition",
            "gadgets.example.com",
        );
        let w = MemberRef {
            group: "example.com".into(),
            kind: "Widget".into(),
            namespace: Some("team".into()),
            name: "w".into(),
        };
        let resource = ApiResource {
            group: "example.com".into(),
            version: "v1".into(),
            api_version: "example.com/v1".into(),
            kind: "Widget".into(),
            plural: "widgets".into(),
        };
        let declared = HashMap::from([(w, resource)]);
        let s = select(&[widgets, gadgets], &declared, &crds, &team(), MANAGER);
        let deleted: Vec<&str> = s.delete.iter().map(|m| m.reference.name.as_str()).collect();
        assert_eq!(deleted, ["gadgets.example.com"]);
        assert_eq!(s.retained.len(), 1);
        assert_eq!(s.retained[0].0.reference.name, "widgets.example.com");
    }
}

//! Prune: decide which objects of the set are no longer declared and provably ours, and
//! delete them safely.
//!
//! Candidates come from metadata-only LISTs by the `part-of` label ([`super::live`]) for every
//! kind the parent recorded before this reconcile, in the namespaces it recorded. [`select`]
//! keeps only what is provably ours: not declared, not marked `prune: disabled`,
//! `reconcile: disabled` or `ssa: Ignore` (see [`crate::applyset::controls`]), its `part-of` label owned by our member field manager, and
//! no controller owner reference; a Namespace or CRD that holds something kept is kept too.
//! Deletes carry UID and resourceVersion preconditions (an object re-created or changed since
//! it was listed — an annotation added, a new owner — is left alone, and looked at again by
//! the next reconcile) and run in reverse dependency order.

use std::collections::{BTreeMap, HashMap, HashSet};

use futures::{StreamExt, stream};
use kube::{
    Api, Client,
    api::{DeleteParams, Preconditions},
    core::DynamicObject,
    discovery::ApiResource,
};

use super::{
    Extent, SetScope,
    live::{self, Live, LiveMember, Observed, label_owned_by},
    outcome::{MemberResult, Outcome, Retained},
};
use crate::{
    Error, Result,
    api::MemberRef,
    applyset::{
        self, GroupKind,
        controls::{self, Marks},
    },
    discovery::{Resolved, Resolver},
    kind_order,
};

/// The outcome of [`select`].
#[derive(Clone, Debug, Default)]
pub struct Selection {
    pub delete: Vec<LiveMember>,
    pub retained: Vec<(LiveMember, Retained)>,
}

/// What the set declares now: each member and its resource.
pub type Declared = HashMap<MemberRef, ApiResource>;

/// What a prune must keep, and how to list it.
pub struct Keep<'a> {
    /// How each declared kind resolved (its listing needs no lookup).
    pub known: &'a HashMap<GroupKind, Resolved>,
    /// The declared members.
    pub declared: &'a Declared,
    /// UIDs of the objects this reconcile applied (or found unchanged): an object served
    /// under two groups is listed under both, and is not pruned under the one it is no
    /// longer declared with.
    pub uids: HashSet<String>,
}

impl<'a> Keep<'a> {
    /// The declared members, and the UIDs of `applied` results.
    pub fn new(
        known: &'a HashMap<GroupKind, Resolved>,
        declared: &'a Declared,
        applied: &[MemberResult],
    ) -> Self {
        Keep {
            known,
            declared,
            uids: applied.iter().filter_map(|r| r.uid.clone()).collect(),
        }
    }
}

/// Which listing a prune decision that deletes anything is made on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listing {
    /// One made now (after an apply: one from before may be as old as the apply).
    Fresh,
    /// An earlier one serves (a plan: nothing was written since).
    Earlier,
}

/// Decides what to prune. The watches only tell whether there is anything to decide (an
/// object labelled ours that is no longer declared); a selection is made on a listing (see
/// [`Listing`]).
pub async fn decide(
    scope: &SetScope,
    resolver: &Resolver,
    extent: &Extent,
    keep: &Keep<'_>,
    live: &Live,
    listing: Listing,
) -> Result<Selection> {
    let select_from = |l: &[LiveMember]| select(l, keep, extent, &scope.manager);
    let list_now = || {
        live::list(
            scope,
            resolver,
            keep.known,
            &extent.prune_kinds,
            &extent.prune_namespaces,
        )
    };
    Ok(match &live.observed {
        // Judged on the prune's own listing, as the watches' answer is below: it refuses a
        // namespaced kind with no namespace to look in (`PruneError::NoNamespaces`).
        Observed::Listed(l) if relist_unscoped(l, keep, extent) => select_from(&list_now().await?),
        Observed::Listed(l) => {
            let earlier = select_from(l);
            if earlier.delete.is_empty() || listing == Listing::Earlier {
                earlier
            } else {
                select_from(&list_now().await?)
            }
        }
        Observed::Watched { undeclared: true } => select_from(&list_now().await?),
        Observed::Watched { undeclared: false } => Selection::default(),
    })
}

/// Whether a decision on a listing must list the prune's extent again: the set records no
/// namespace (a ClusterApplySet; its observation listed namespaced kinds in all namespaces,
/// [`live::Unscoped::Everywhere`]) and the listing shows an object it does not declare. The
/// same as the watches' `undeclared` answer, so that a set fails the same way observed
/// either way.
fn relist_unscoped(live: &[LiveMember], keep: &Keep<'_>, extent: &Extent) -> bool {
    extent.prune_namespaces.is_empty()
        && live
            .iter()
            .any(|m| !keep.declared.contains_key(&m.reference))
}

/// Chooses what to delete among the live objects: those of the extent's prune kinds in its
/// prune namespaces (cluster-scoped objects regardless of namespace) that are neither
/// declared nor just applied (by UID), minus those that must be kept.
pub fn select(live: &[LiveMember], keep: &Keep<'_>, extent: &Extent, manager: &str) -> Selection {
    let mut s = Selection::default();
    for m in live {
        let gk = GroupKind::new(m.reference.group.clone(), m.reference.kind.clone());
        let in_scope = m
            .reference
            .namespace
            .as_ref()
            .is_none_or(|ns| extent.prune_namespaces.contains(ns));
        let applied = m.meta.uid.as_ref().is_some_and(|u| keep.uids.contains(u));
        if keep.declared.contains_key(&m.reference)
            || applied
            || !extent.prune_kinds.contains(&gk)
            || !in_scope
        {
            continue;
        }
        match retained(m, manager, extent.home.as_deref()) {
            Some(why) => s.retained.push((m.clone(), why)),
            None => s.delete.push(m.clone()),
        }
    }
    keep_holders(s, keep.declared)
}

/// Why a candidate must be kept, judged by itself; `None` if it may go. `home`: the
/// parent's own namespace.
fn retained(m: &LiveMember, manager: &str, home: Option<&str>) -> Option<Retained> {
    let meta = &m.meta;
    let (group, kind) = (&m.reference.group, &m.reference.kind);
    let container = kind_order::is_namespace(group, kind) || kind_order::is_crd(group, kind);
    if let Some(keep) = controls::keep_on_prune(Marks::of_meta(meta)) {
        return Some(keep.into());
    }
    if kind_order::is_namespace(group, kind) && home == Some(m.reference.name.as_str()) {
        return Some(Retained::ParentNamespace);
    }
    if container && applyset::is_adopted(meta.annotations.as_ref()) {
        return Some(Retained::Adopted);
    }
    if let Some(owner) = meta
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
    {
        return Some(Retained::Controlled(format!(
            "{} {}",
            owner.kind, owner.name
        )));
    }
    (!label_owned_by(meta, manager)).then_some(Retained::LabelNotOurs)
}

/// Moves to `retained` every Namespace or CRD in `s.delete` that holds something kept — a
/// retained candidate or a declared member lives in it or is of its kind: deleting it would
/// delete that object too.
fn keep_holders(mut s: Selection, declared: &Declared) -> Selection {
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
    let holder = |m: &LiveMember| {
        let (group, kind) = (&m.reference.group, &m.reference.kind);
        if kind_order::is_namespace(group, kind) {
            pinned_namespaces.get(&m.reference.name).cloned()
        } else if kind_order::is_crd(group, kind) {
            pinned_crds.get(&m.reference.name).cloned()
        } else {
            None
        }
    };
    let mut delete = Vec::with_capacity(s.delete.len());
    for m in std::mem::take(&mut s.delete) {
        match holder(&m) {
            Some(h) => s.retained.push((m, Retained::HoldsRetained(h))),
            None => delete.push(m),
        }
    }
    s.delete = delete;
    s
}

/// Carries out a selection: the retained candidates as results, then the deletes.
pub async fn prune(scope: &SetScope, selection: Selection) -> Vec<MemberResult> {
    let mut results = Vec::with_capacity(selection.delete.len() + selection.retained.len());
    for (m, why) in selection.retained {
        tracing::info!(member = %m.reference, reason = ?why, "not pruned");
        results.push(MemberResult::new(m.reference, Outcome::Retained(why)));
    }
    for r in delete_all(scope, &selection.delete).await {
        match &r.outcome {
            Outcome::Pruned => tracing::info!(member = %r.reference, "pruned"),
            Outcome::Retained(Retained::Recreated) => {
                tracing::info!(member = %r.reference, "re-created meanwhile; not pruned")
            }
            _ => {}
        }
        results.push(r);
    }
    results
}

/// The result of a delete with preconditions.
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

impl Deleted {
    fn outcome(self) -> Outcome {
        match self {
            Deleted::Deleted => Outcome::Pruned,
            Deleted::Gone => Outcome::Gone,
            Deleted::UidMismatch => Outcome::Retained(Retained::Recreated),
            Deleted::Changed => Outcome::Changed,
        }
    }
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
    let api: Api<DynamicObject> = crate::discovery::api_in(client, namespace, resource);
    let params = DeleteParams::background().preconditions(Preconditions {
        uid: Some(uid.to_string()),
        resource_version: resource_version.map(str::to_string),
    });
    match api.delete(name, &params).await {
        Ok(_) => Ok(Deleted::Deleted),
        Err(kube::Error::Api(s)) if s.is_not_found() || s.code == 404 => Ok(Deleted::Gone),
        Err(kube::Error::Api(s)) if s.is_conflict() => match resource_version {
            // Only the UID was a precondition: it is the one that failed.
            None => Ok(Deleted::UidMismatch),
            // The 409 does not say which precondition failed: the object's UID now does.
            Some(_) => failed_precondition(&api, name, uid).await,
        },
        Err(e) => Err(e.into()),
    }
}

/// Which precondition a refused delete failed, from the object as it is now: another UID
/// (or none, the object gone) means it was re-created; the same UID means it changed.
async fn failed_precondition(
    api: &Api<DynamicObject>,
    name: &str,
    uid: &str,
) -> Result<Deleted, Error> {
    Ok(match api.get_metadata_opt(name).await? {
        None => Deleted::Gone,
        Some(live) => precondition_verdict(live.metadata.uid.as_deref(), uid),
    })
}

/// `Changed` when the live object is still the one decided on (same UID), else `UidMismatch`.
fn precondition_verdict(live_uid: Option<&str>, decided_uid: &str) -> Deleted {
    if live_uid == Some(decided_uid) {
        Deleted::Changed
    } else {
        Deleted::UidMismatch
    }
}

/// Deletes `items` in reverse dependency order (namespaced objects, cluster-scoped objects,
/// Namespaces, CRDs), concurrently within a group, each only if unchanged since listed (UID
/// and resourceVersion preconditions). A group with a failure (or an object changed or
/// re-created meanwhile) stops the later groups: a Namespace or CRD is never
/// deleted while something that should go before it is still there. Returns one result per
/// item attempted.
async fn delete_all(scope: &SetScope, items: &[LiveMember]) -> Vec<MemberResult> {
    let mut groups: BTreeMap<u8, Vec<&LiveMember>> = BTreeMap::new();
    for m in items {
        let order = kind_order::prune_order(&m.reference.group, &m.reference.kind, m.namespaced);
        groups.entry(order).or_default().push(m);
    }
    let mut out = Vec::with_capacity(items.len());
    for (_, group) in groups {
        let results: Vec<MemberResult> = stream::iter(0..group.len())
            .map(|i| delete_one(scope, group[i]))
            .buffer_unordered(scope.concurrency)
            .collect()
            .await;
        let stop = results.iter().any(|r| r.outcome.is_unfinished_prune());
        out.extend(results);
        if stop {
            break;
        }
    }
    out
}

async fn delete_one(scope: &SetScope, m: &LiveMember) -> MemberResult {
    let _permit = scope.write_permit().await;
    let uid = m.meta.uid.clone().unwrap_or_default();
    let r = delete_if_unchanged(
        &scope.client,
        &m.resource,
        m.reference.namespace.as_deref(),
        &m.reference.name,
        &uid,
        m.meta.resource_version.as_deref(),
    )
    .await;
    let outcome = match r {
        Ok(d) => d.outcome(),
        Err(e) => Outcome::DeleteFailed {
            message: format!("{}: {e}", m.reference),
        },
    };
    MemberResult::new(m.reference.clone(), outcome)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::applyset::LABEL_PART_OF;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
        FieldsV1, ManagedFieldsEntry, OwnerReference,
    };
    use kube::api::ObjectMeta;
    use serde_json::json;
    use std::collections::BTreeSet;

    const MANAGER: &str = "applyset.dev/ns/team/web";

    #[test]
    fn a_refused_delete_is_judged_by_the_live_uid() {
        assert_eq!(precondition_verdict(Some("u1"), "u1"), Deleted::Changed);
        assert_eq!(precondition_verdict(Some("u2"), "u1"), Deleted::UidMismatch);
        assert_eq!(precondition_verdict(None, "u1"), Deleted::UidMismatch);
    }

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
            object: None,
        }
    }

    fn ext(prune_kinds: BTreeSet<GroupKind>, prune_namespaces: BTreeSet<String>) -> Extent {
        Extent {
            prune_kinds,
            prune_namespaces,
            ..Extent::default()
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

    fn keep(declared: &Declared) -> Keep<'_> {
        static KNOWN: std::sync::OnceLock<HashMap<GroupKind, Resolved>> =
            std::sync::OnceLock::new();
        Keep {
            known: KNOWN.get_or_init(HashMap::new),
            declared,
            uids: HashSet::new(),
        }
    }

    #[test]
    fn an_object_just_applied_under_another_group_is_not_a_candidate() {
        // The same object (one UID) listed under the kind it was recorded with.
        let l = [live("Event", "e", Some(MANAGER))];
        let none = none();
        let mut k = keep(&none);
        let s = select(&l, &k, &ext(kinds(&["Event"]), team()), MANAGER);
        assert_eq!(s.delete.len(), 1, "without the UID it would go");
        k.uids.insert("uid-e".into());
        let s = select(&l, &k, &ext(kinds(&["Event"]), team()), MANAGER);
        assert!(s.delete.is_empty() && s.retained.is_empty());
    }

    #[test]
    fn undeclared_and_ours_is_deleted() {
        let l = [
            live("ConfigMap", "a", Some(MANAGER)),
            live("ConfigMap", "b", Some(MANAGER)),
        ];
        let declared = HashMap::from([(l[0].reference.clone(), l[0].resource.clone())]);
        let s = select(
            &l,
            &keep(&declared),
            &ext(kinds(&["ConfigMap"]), team()),
            MANAGER,
        );
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
    fn a_set_recording_no_namespace_lists_again_when_it_shows_an_undeclared_object() {
        let l = [live("ConfigMap", "a", Some(MANAGER))];
        let none = none();
        let nowhere = ext(kinds(&["ConfigMap"]), BTreeSet::new());
        assert!(relist_unscoped(&l, &keep(&none), &nowhere));
        // Declared, or nothing listed: the listing decides.
        let declared = HashMap::from([(l[0].reference.clone(), l[0].resource.clone())]);
        assert!(!relist_unscoped(&l, &keep(&declared), &nowhere));
        assert!(!relist_unscoped(&[], &keep(&none), &nowhere));
        // A namespace recorded: the listing decides, as before.
        assert!(!relist_unscoped(
            &l,
            &keep(&none),
            &ext(kinds(&["ConfigMap"]), team())
        ));
    }

    #[test]
    fn kinds_not_recorded_before_are_not_candidates() {
        let l = [live("Secret", "s", Some(MANAGER))];
        let s = select(
            &l,
            &keep(&none()),
            &ext(kinds(&["ConfigMap"]), team()),
            MANAGER,
        );
        assert!(s.delete.is_empty() && s.retained.is_empty());
    }

    #[test]
    fn prune_disabled_is_retained() {
        let mut m = live("ConfigMap", "keep", Some(MANAGER));
        m.meta.annotations = Some(BTreeMap::from([(
            "applyset.dev/prune".into(),
            "disabled".into(),
        )]));
        let s = select(
            &[m],
            &keep(&none()),
            &ext(kinds(&["ConfigMap"]), team()),
            MANAGER,
        );
        assert!(s.delete.is_empty());
        assert_eq!(s.retained[0].1, Retained::PruneDisabled);
    }

    #[test]
    fn live_controls_keep_a_candidate_but_if_not_present_does_not() {
        let marked = |name: &str, labels: bool, key: &str, value: &str| {
            let mut m = live("ConfigMap", name, Some(MANAGER));
            let map = BTreeMap::from([(key.to_string(), value.to_string())]);
            if labels {
                m.meta.labels.get_or_insert_default().extend(map);
            } else {
                m.meta.annotations = Some(map);
            }
            m
        };
        let l = [
            marked("a", true, "kustomize.toolkit.fluxcd.io/prune", "Disabled"),
            marked(
                "b",
                false,
                "kustomize.toolkit.fluxcd.io/reconcile",
                "disabled",
            ),
            marked("c", true, "applyset.dev/ssa", "ignore"),
            marked(
                "d",
                false,
                "kustomize.toolkit.fluxcd.io/ssa",
                "IfNotPresent",
            ),
            marked("e", false, "applyset.dev/ssa", "Merge"),
        ];
        let s = select(
            &l,
            &keep(&none()),
            &ext(kinds(&["ConfigMap"]), team()),
            MANAGER,
        );
        let retained: Vec<(&str, &Retained)> = s
            .retained
            .iter()
            .map(|(m, r)| (m.reference.name.as_str(), r))
            .collect();
        assert_eq!(
            retained,
            [
                ("a", &Retained::PruneDisabled),
                ("b", &Retained::ReconcileDisabled),
                ("c", &Retained::SsaIgnore)
            ]
        );
        let deleted: Vec<&str> = s.delete.iter().map(|m| m.reference.name.as_str()).collect();
        assert_eq!(deleted, ["d", "e"]);
    }

    #[test]
    fn label_copied_by_someone_else_is_retained() {
        let l = [
            live("ConfigMap", "x", Some("intruder")),
            live("ConfigMap", "y", None),
        ];
        let s = select(
            &l,
            &keep(&none()),
            &ext(kinds(&["ConfigMap"]), team()),
            MANAGER,
        );
        assert!(s.delete.is_empty());
        assert!(s.retained.iter().all(|(_, r)| *r == Retained::LabelNotOurs));
        assert_eq!(s.retained.len(), 2);
    }

    #[test]
    fn another_parents_manager_does_not_count() {
        let l = [live("ConfigMap", "x", Some("applyset.dev/ns/team/other"))];
        let s = select(
            &l,
            &keep(&none()),
            &ext(kinds(&["ConfigMap"]), team()),
            MANAGER,
        );
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
            &keep(&none()),
            &ext(kinds(&["ConfigMap"]), team()),
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
        let s = select(
            &[m],
            &keep(&none()),
            &ext(kinds(&["ConfigMap"]), team()),
            MANAGER,
        );
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
        let s = select(
            &[m],
            &keep(&none()),
            &ext(kinds(&["ConfigMap"]), team()),
            MANAGER,
        );
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
            &super::tests::keep(&none()),
            &ext(kinds(&["ConfigMap", "Namespace"]), team()),
            MANAGER,
        );
        assert!(s.delete.is_empty(), "{:?}", s.delete);
        assert!(s.retained.iter().any(|(m, why)| m.reference.name == "team"
            && matches!(why, Retained::HoldsRetained(h) if h.contains("keep"))));
    }

    #[test]
    fn adopted_namespaces_and_crds_and_the_parents_namespace_are_kept() {
        let adopted = |mut m: LiveMember| {
            m.meta.annotations = Some(BTreeMap::from([(
                "applyset.dev/adopted".into(),
                "ApplySet team/web".into(),
            )]));
            m
        };
        let crd = ("apiextensions.k8s.io", "CustomResourceDefinition");
        let l = [
            adopted(cluster("", "Namespace", "shared")),
            adopted(cluster(crd.0, crd.1, "widgets.example.com")),
            // The mark means nothing on other kinds.
            adopted(live("ConfigMap", "cm", Some(MANAGER))),
            cluster("", "Namespace", "team"),
            cluster("", "Namespace", "gone"),
        ];
        let mut e = ext(kinds(&["Namespace", "ConfigMap"]), team());
        e.prune_kinds.insert(GroupKind::new(crd.0, crd.1));
        e.home = Some("team".into());
        let s = select(&l, &keep(&none()), &e, MANAGER);
        let mut deleted: Vec<&str> = s.delete.iter().map(|m| m.reference.name.as_str()).collect();
        deleted.sort();
        assert_eq!(deleted, ["cm", "gone"]);
        let why = |name: &str| {
            s.retained
                .iter()
                .find(|(m, _)| m.reference.name == name)
                .map(|(_, w)| w.clone())
        };
        assert_eq!(why("shared"), Some(Retained::Adopted));
        assert_eq!(why("widgets.example.com"), Some(Retained::Adopted));
        assert_eq!(why("team"), Some(Retained::ParentNamespace));
    }

    #[test]
    fn a_namespace_holding_a_declared_member_is_kept() {
        let declared_cm = live("ConfigMap", "still-declared", Some(MANAGER));
        let declared =
            HashMap::from([(declared_cm.reference.clone(), declared_cm.resource.clone())]);
        let ns = cluster("", "Namespace", "team");
        let s = select(
            &[ns],
            &keep(&declared),
            &ext(kinds(&["Namespace"]), team()),
            MANAGER,
        );
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
        let s = select(
            &[widgets, gadgets],
            &keep(&declared),
            &ext(crds, team()),
            MANAGER,
        );
        let deleted: Vec<&str> = s.delete.iter().map(|m| m.reference.name.as_str()).collect();
        assert_eq!(deleted, ["gadgets.example.com"]);
        assert_eq!(s.retained.len(), 1);
        assert_eq!(s.retained[0].0.reference.name, "widgets.example.com");
    }
}

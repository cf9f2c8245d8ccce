//! What of a set is live: metadata-only LISTs of the objects labelled `part-of=<id>`, or the
//! member watches' answer when they cover every kind involved; and the same paged LISTs of
//! whole objects for views (`kubectl applyset tree`, through [`super::SetEngine::members`]).

use std::{
    collections::{BTreeSet, HashMap},
    time::Instant,
};

use futures::{StreamExt, TryStreamExt, stream};
use kube::{
    Api,
    api::{ListParams, ObjectMeta},
    core::{DynamicObject, PartialObjectMeta},
    discovery::ApiResource,
};

use serde_json::Value;

use super::{Extent, SetScope};
use crate::{
    Error, PruneError, Result,
    api::MemberRef,
    applyset::{GroupKind, LABEL_PART_OF, controls::Marks},
    discovery::{Resolved, Resolver},
};

/// What is known of a member's live object before the apply: its version, and its
/// per-object controls (read from the metadata the watches or the LISTs already have).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveObject {
    pub resource_version: String,
    pub marks: Marks,
}

/// A live object labelled with our ApplySet ID.
#[derive(Clone, Debug)]
pub struct LiveMember {
    pub resource: ApiResource,
    pub namespaced: bool,
    pub reference: MemberRef,
    pub meta: ObjectMeta,
    /// The whole object (with its apiVersion and kind), when listed in full
    /// (for views); `None` when listed metadata only.
    pub object: Option<Box<DynamicObject>>,
}

/// What a LIST of members returns of each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Detail {
    /// Metadata only: what the reconcile needs.
    Metadata,
    /// The whole objects: what a view (health, a diff's text) needs.
    Objects,
}

impl LiveMember {
    pub fn live(&self) -> LiveObject {
        LiveObject {
            resource_version: self.meta.resource_version.clone().unwrap_or_default(),
            marks: Marks::of_meta(&self.meta),
        }
    }
}

/// Whether `manager` owns the `part-of` label according to managedFields.
pub(super) fn label_owned_by(meta: &ObjectMeta, manager: &str) -> bool {
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

/// How the live members were learnt.
#[derive(Clone, Debug)]
pub enum Observed {
    /// Listed (metadata only).
    Listed(Vec<LiveMember>),
    /// From the member watches, which cover every kind involved; `undeclared`: they show an
    /// object labelled with this set that is no longer declared.
    Watched { undeclared: bool },
}

/// What a reconcile knows of its set's live members before the apply.
#[derive(Clone, Debug)]
pub struct Live {
    pub observed: Observed,
    /// Live members by reference (to tell created, configured and unchanged apart).
    pub existing: HashMap<MemberRef, LiveObject>,
    /// Members known to be the set's own: their `part-of` label is owned by our member field
    /// manager (listed), or this process applied them (watched). A `part-of` label someone
    /// copied does not make an object ours.
    pub owned: std::collections::HashSet<MemberRef>,
}

/// Learns what of the set is live, over the extent's listed kinds and namespaces: from the
/// member watches when they cover every listed kind, else by listing. `known`: kinds the
/// render resolved; `declared`: the members declared now. A set that records no namespace
/// lists its namespaced kinds in all namespaces, as the watches see them
/// ([`Unscoped::Everywhere`]). Reads touch no member.
pub async fn observe(
    scope: &SetScope,
    resolver: &Resolver,
    extent: &Extent,
    known: &HashMap<GroupKind, Resolved>,
    declared: &HashMap<MemberRef, ApiResource>,
) -> Result<Live> {
    let watches = scope.watches();
    let watched = watches.and_then(|w| w.members_of(&scope.id, &extent.listed_kinds));
    if let (Some(members), Some(w)) = (watched, watches) {
        let undeclared = members.keys().any(|r| !declared.contains_key(r));
        let existing = members
            .into_iter()
            .map(|(r, (resource_version, marks))| {
                let live = LiveObject {
                    resource_version,
                    marks,
                };
                (r, live)
            })
            .collect();
        return Ok(Live {
            observed: Observed::Watched { undeclared },
            existing,
            owned: w.applied_by(&scope.id),
        });
    }
    let listed = Listed {
        kinds: &extent.listed_kinds,
        namespaces: &extent.listed_namespaces,
        unscoped: match extent.prune_namespaces.is_empty() {
            true => Unscoped::Everywhere,
            false => Unscoped::Refuse,
        },
    };
    let listed = list_in(scope, resolver, known, listed, Detail::Metadata).await?;
    let existing = listed
        .iter()
        .map(|m| (m.reference.clone(), m.live()))
        .collect();
    let owned = listed
        .iter()
        .filter(|m| label_owned_by(&m.meta, &scope.manager))
        .map(|m| m.reference.clone())
        .collect();
    Ok(Live {
        observed: Observed::Listed(listed),
        existing,
        owned,
    })
}

/// One LIST: a kind in a namespace, or cluster-wide.
#[derive(Clone)]
struct Target {
    kind: GroupKind,
    resolved: Resolved,
    namespace: Option<String>,
}

/// Lists, metadata only, every object labelled `part-of=<id>` of the given kinds: in each of
/// `namespaces` for namespaced kinds, cluster-wide for cluster-scoped ones. Kinds in `known`
/// are not looked up again. A LIST the server answers with 404 (the kind's route is not
/// served: a version removed, a CRD deleted or not yet established) is settled by a
/// discovery made after it: a kind served at another version is listed there, a kind no
/// longer served is skipped (its objects are gone with it); a kind discovery still serves
/// at the same version, a namespaced kind with no namespace to look in, and a kind we may
/// not list are errors — skipping them would lose track of their members.
pub async fn list(
    scope: &SetScope,
    resolver: &Resolver,
    known: &HashMap<GroupKind, Resolved>,
    kinds: &BTreeSet<GroupKind>,
    namespaces: &BTreeSet<String>,
) -> Result<Vec<LiveMember>> {
    let extent = Listed {
        kinds,
        namespaces,
        unscoped: Unscoped::Refuse,
    };
    list_in(scope, resolver, known, extent, Detail::Metadata).await
}

/// The kinds and namespaces a listing covers.
#[derive(Clone, Copy)]
pub(super) struct Listed<'a> {
    pub(super) kinds: &'a BTreeSet<GroupKind>,
    pub(super) namespaces: &'a BTreeSet<String>,
    pub(super) unscoped: Unscoped,
}

/// What a listing does with a namespaced kind the set has no namespace to look in for (a
/// ClusterApplySet whose record names the kind but no namespace).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Unscoped {
    /// An error ([`PruneError::NoNamespaces`]): a prune must not pass over members it cannot
    /// find, nor forget their kind.
    Refuse,
    /// Each namespaced kind listed once, in all namespaces: what a reconcile of a set that
    /// records no namespace (a ClusterApplySet) observes before its apply, as the member
    /// watches (cluster-wide) show it: members in namespaces its record lost included. Its
    /// prune then lists its own extent again, and refuses, where the watches' answer makes it
    /// do so ([`super::prune::decide`]).
    Everywhere,
}

/// [`list`], returning `detail` of each member: every page (the scope's page size), and a
/// LIST answered 404 settled by a discovery made after it.
pub(super) async fn list_in(
    scope: &SetScope,
    resolver: &Resolver,
    known: &HashMap<GroupKind, Resolved>,
    listed: Listed<'_>,
    detail: Detail,
) -> Result<Vec<LiveMember>> {
    let Listed {
        kinds,
        namespaces,
        unscoped,
    } = listed;
    let since = Instant::now();
    let targets = targets(resolver, known, kinds, namespaces, unscoped).await?;
    let (mut found, missed) = list_targets(scope, targets, detail).await?;
    if missed.is_empty() {
        return Ok(found);
    }
    let moved = relocate(resolver, &missed, namespaces, unscoped, since).await?;
    let (more, still) = list_targets(scope, moved, detail).await?;
    if let Some(t) = still.first() {
        return Err(Error::Prune(PruneError::NotListed {
            kind: t.kind.clone(),
            api_version: t.resolved.resource.api_version.clone(),
        }));
    }
    found.extend(more);
    Ok(found)
}

/// Runs the LISTs; returns the members found and the targets answered with 404.
async fn list_targets(
    scope: &SetScope,
    targets: Vec<Target>,
    detail: Detail,
) -> Result<(Vec<LiveMember>, Vec<Target>)> {
    let answers: Vec<(Target, Option<Vec<LiveMember>>)> = stream::iter(targets)
        .map(|t| async move {
            let items = match detail {
                Detail::Metadata => list_one(scope, &t).await?,
                Detail::Objects => list_objects(scope, &t).await?,
            };
            Ok::<_, Error>((t, items))
        })
        .buffer_unordered(scope.concurrency)
        .try_collect()
        .await?;
    let mut found = Vec::new();
    let mut missed = Vec::new();
    for (t, items) in answers {
        match items {
            Some(items) => found.extend(items),
            None => missed.push(t),
        }
    }
    Ok((found, missed))
}

/// The LISTs to make again for targets answered with 404, from a discovery that began after
/// `since`: each kind where the server serves it now; kinds it no longer serves, none.
async fn relocate(
    resolver: &Resolver,
    missed: &[Target],
    namespaces: &BTreeSet<String>,
    unscoped: Unscoped,
    since: Instant,
) -> Result<Vec<Target>> {
    let kinds: BTreeSet<GroupKind> = missed.iter().map(|t| t.kind.clone()).collect();
    let gks: Vec<GroupKind> = kinds.iter().cloned().collect();
    let now = resolver.resolve_group_kinds_since(&gks, since).await?;
    for gk in kinds.iter().filter(|gk| !now.contains_key(*gk)) {
        tracing::debug!(kind = %gk, "not served any more (fresh discovery); its objects are not prune candidates");
    }
    targets_for(&kinds, &now, namespaces, unscoped)
}

/// The LISTs that cover `kinds` in `namespaces`.
async fn targets(
    resolver: &Resolver,
    known: &HashMap<GroupKind, Resolved>,
    kinds: &BTreeSet<GroupKind>,
    namespaces: &BTreeSet<String>,
    unscoped: Unscoped,
) -> Result<Vec<Target>> {
    let unknown: Vec<GroupKind> = kinds
        .iter()
        .filter(|gk| !known.contains_key(*gk))
        .cloned()
        .collect();
    let mut resolved = resolver.resolve_group_kinds(&unknown).await?;
    for gk in kinds {
        if let Some(r) = known.get(gk) {
            resolved.insert(gk.clone(), r.clone());
        } else if !resolved.contains_key(gk) {
            tracing::debug!(kind = %gk, "not served any more; its objects are not prune candidates");
        }
    }
    targets_for(kinds, &resolved, namespaces, unscoped)
}

/// One LIST per namespace for each namespaced kind (one in all namespaces under
/// [`Unscoped::Everywhere`]), one cluster-wide LIST for each cluster-scoped kind; kinds not in
/// `resolved` (not served) get none. Under [`Unscoped::Refuse`], a namespaced kind with no
/// namespace to look in is an error: its members could be anywhere.
fn targets_for(
    kinds: &BTreeSet<GroupKind>,
    resolved: &HashMap<GroupKind, Resolved>,
    namespaces: &BTreeSet<String>,
    unscoped: Unscoped,
) -> Result<Vec<Target>> {
    let mut targets = Vec::new();
    for gk in kinds {
        let Some(r) = resolved.get(gk) else {
            continue;
        };
        let target = |namespace: Option<&String>| Target {
            kind: gk.clone(),
            resolved: r.clone(),
            namespace: namespace.cloned(),
        };
        if !r.namespaced || unscoped == Unscoped::Everywhere {
            targets.push(target(None));
        } else if namespaces.is_empty() {
            return Err(Error::Prune(PruneError::NoNamespaces(gk.clone())));
        } else {
            targets.extend(namespaces.iter().map(|ns| target(Some(ns))));
        }
    }
    Ok(targets)
}

/// One LIST, every page; `None` when the server answers 404 (the route is not served).
async fn list_one(scope: &SetScope, t: &Target) -> Result<Option<Vec<LiveMember>>> {
    let resource = &t.resolved.resource;
    let api: Api<PartialObjectMeta<DynamicObject>> =
        crate::discovery::api_in(&scope.client, t.namespace.as_deref(), resource);
    let mut out = Vec::new();
    let mut params = first_page(scope);
    loop {
        let page = match listed(scope, t, api.list_metadata(&params).await)? {
            Some(p) => p,
            None => return Ok(None),
        };
        for item in page.items {
            // Listed objects always have a name.
            let Some(reference) =
                MemberRef::of_live(&t.kind, t.resolved.namespaced, &item.metadata)
            else {
                continue;
            };
            out.push(LiveMember {
                resource: resource.clone(),
                namespaced: t.resolved.namespaced,
                reference,
                meta: item.metadata,
                object: None,
            });
        }
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => return Ok(Some(out)),
        }
    }
}

/// One LIST of whole objects, every page; `None` when the server answers 404. Items of a
/// list carry no apiVersion and kind: they are given the listed resource's.
async fn list_objects(scope: &SetScope, t: &Target) -> Result<Option<Vec<LiveMember>>> {
    let resource = &t.resolved.resource;
    let api: Api<DynamicObject> =
        crate::discovery::api_in(&scope.client, t.namespace.as_deref(), resource);
    let mut out = Vec::new();
    let mut params = first_page(scope);
    loop {
        let page = match listed(scope, t, api.list(&params).await)? {
            Some(p) => p,
            None => return Ok(None),
        };
        for mut item in page.items {
            let Some(reference) =
                MemberRef::of_live(&t.kind, t.resolved.namespaced, &item.metadata)
            else {
                continue;
            };
            item.types = Some(kube::api::TypeMeta {
                api_version: resource.api_version.clone(),
                kind: resource.kind.clone(),
            });
            out.push(LiveMember {
                resource: resource.clone(),
                namespaced: t.resolved.namespaced,
                reference,
                meta: item.metadata.clone(),
                object: Some(Box::new(item)),
            });
        }
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => return Ok(Some(out)),
        }
    }
}

/// The first page's parameters: the set's selector, the scope's page size.
fn first_page(scope: &SetScope) -> ListParams {
    ListParams::default()
        .labels(&scope.selector)
        .limit(scope.page_size)
}

/// A page as the server answered it: `None` for a 404 (the route is not served); a 403 is
/// [`Error::Forbidden`], naming who may not list what.
fn listed<T>(scope: &SetScope, t: &Target, answer: kube::Result<T>) -> Result<Option<T>> {
    match answer {
        Ok(p) => Ok(Some(p)),
        Err(kube::Error::Api(s)) if s.is_forbidden() => Err(Error::Forbidden {
            who: scope.identity.to_string(),
            what: list_description(&t.resolved.resource, t.namespace.as_deref()),
            message: s.message.clone(),
        }),
        Err(kube::Error::Api(s)) if s.is_not_found() || s.code == 404 => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// `list configmaps (core) in team-a` — what a forbidden LIST was.
fn list_description(resource: &ApiResource, namespace: Option<&str>) -> String {
    format!(
        "list {} ({}) in {}",
        resource.plural,
        if resource.group.is_empty() {
            "core"
        } else {
            resource.group.as_str()
        },
        namespace.unwrap_or("all namespaces")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolved(namespaced: bool) -> Resolved {
        Resolved {
            resource: ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
            namespaced,
        }
    }

    fn namespaces(v: &[&str]) -> BTreeSet<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn one_list_per_namespace_or_one_cluster_wide() {
        let cm = GroupKind::new("", "ConfigMap");
        let role = GroupKind::new("rbac.authorization.k8s.io", "ClusterRole");
        let gone = GroupKind::new("example.com", "Gone");
        let kinds = BTreeSet::from([cm.clone(), role.clone(), gone]);
        let r = HashMap::from([(cm, resolved(true)), (role, resolved(false))]);
        let t =
            targets_for(&kinds, &r, &namespaces(&["a", "b"]), Unscoped::Refuse).expect("targets");
        let got: BTreeSet<(String, Option<String>)> = t
            .iter()
            .map(|t| (t.kind.kind.clone(), t.namespace.clone()))
            .collect();
        let want = BTreeSet::from([
            ("ConfigMap".to_string(), Some("a".to_string())),
            ("ConfigMap".to_string(), Some("b".to_string())),
            ("ClusterRole".to_string(), None),
        ]);
        assert_eq!(got, want, "no LIST for a kind that is not served");
    }

    #[test]
    fn a_namespaced_kind_with_no_namespace_to_look_in_is_an_error() {
        let cm = GroupKind::new("", "ConfigMap");
        let r = HashMap::from([(cm.clone(), resolved(true))]);
        let e = targets_for(
            &BTreeSet::from([cm]),
            &r,
            &BTreeSet::new(),
            Unscoped::Refuse,
        )
        .err()
        .expect("an error");
        let msg = e.to_string();
        assert!(msg.contains("ConfigMap is namespaced"), "{msg}");
        assert!(msg.contains("nothing is pruned"), "{msg}");
        // A cluster-scoped kind needs no namespace.
        let role = GroupKind::new("rbac.authorization.k8s.io", "ClusterRole");
        let r = HashMap::from([(role.clone(), resolved(false))]);
        assert_eq!(
            targets_for(
                &BTreeSet::from([role]),
                &r,
                &BTreeSet::new(),
                Unscoped::Refuse
            )
            .expect("targets")
            .len(),
            1
        );
    }

    #[test]
    fn a_set_recording_no_namespace_is_observed_in_all_namespaces() {
        let cm = GroupKind::new("", "ConfigMap");
        let role = GroupKind::new("rbac.authorization.k8s.io", "ClusterRole");
        let kinds = BTreeSet::from([cm.clone(), role.clone()]);
        let r = HashMap::from([(cm.clone(), resolved(true)), (role, resolved(false))]);
        let listed = |namespaces: &BTreeSet<String>| -> Vec<(String, Option<String>)> {
            targets_for(&kinds, &r, namespaces, Unscoped::Everywhere)
                .expect("targets")
                .iter()
                .map(|t| (t.kind.kind.clone(), t.namespace.clone()))
                .collect()
        };
        assert_eq!(
            listed(&BTreeSet::new()),
            vec![
                ("ClusterRole".to_string(), None),
                ("ConfigMap".to_string(), None)
            ]
        );
        // A namespace declared now, none recorded: still one LIST in all namespaces (members
        // in namespaces the record lost are seen too).
        assert_eq!(listed(&namespaces(&["a"])), listed(&BTreeSet::new()));
    }

    #[test]
    fn forbidden_lists_are_described_by_resource_group_and_namespace() {
        let cm = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
        assert_eq!(
            list_description(&cm, Some("team")),
            "list configmaps (core) in team"
        );
        let crd = ApiResource::erase::<
            k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
        >(&());
        assert_eq!(
            list_description(&crd, None),
            "list customresourcedefinitions (apiextensions.k8s.io) in all namespaces"
        );
    }
}

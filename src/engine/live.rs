//! What of a set is live: metadata-only LISTs of the objects labelled `part-of=<id>`, or the
//! member watches' answer when they cover every kind involved.

use std::collections::{BTreeSet, HashMap};

use futures::{StreamExt, TryStreamExt, stream};
use kube::{
    Api,
    api::{ListParams, ObjectMeta},
    core::{DynamicObject, PartialObjectMeta},
    discovery::ApiResource,
};

use super::{Extent, SetScope};
use crate::{
    Error, Result,
    api::MemberRef,
    applyset::GroupKind,
    discovery::{Resolved, Resolver},
};

/// What is known of a member's live object before the apply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveObject {
    pub resource_version: String,
}

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
}

/// Learns what of the set is live, over the extent's listed kinds and namespaces: from the
/// member watches when they cover every listed kind, else by listing. `known`: kinds the
/// render resolved; `declared`: the members declared now. Reads touch no member.
pub async fn observe(
    scope: &SetScope,
    resolver: &Resolver,
    extent: &Extent,
    known: &HashMap<GroupKind, Resolved>,
    declared: &HashMap<MemberRef, ApiResource>,
) -> Result<Live> {
    let watched = scope
        .watches()
        .and_then(|w| w.members_of(&scope.id, &extent.listed_kinds));
    if let Some(members) = watched {
        let undeclared = members.keys().any(|r| !declared.contains_key(r));
        let existing = members
            .into_iter()
            .map(|(r, resource_version)| (r, LiveObject { resource_version }))
            .collect();
        return Ok(Live {
            observed: Observed::Watched { undeclared },
            existing,
        });
    }
    let listed = list(
        scope,
        resolver,
        known,
        &extent.listed_kinds,
        &extent.listed_namespaces,
    )
    .await?;
    let existing = listed
        .iter()
        .map(|m| (m.reference.clone(), m.live()))
        .collect();
    Ok(Live {
        observed: Observed::Listed(listed),
        existing,
    })
}

/// One LIST: a kind in a namespace, or cluster-wide.
struct Target {
    kind: GroupKind,
    resolved: Resolved,
    namespace: Option<String>,
}

/// Lists, metadata only, every object labelled `part-of=<id>` of the given kinds: in each of
/// `namespaces` for namespaced kinds, cluster-wide for cluster-scoped ones. Kinds in `known`
/// are not looked up again; kinds the server no longer serves (a deleted CRD) are skipped;
/// a kind we may not list is an error (skipping it would lose track of its members).
pub async fn list(
    scope: &SetScope,
    resolver: &Resolver,
    known: &HashMap<GroupKind, Resolved>,
    kinds: &BTreeSet<GroupKind>,
    namespaces: &BTreeSet<String>,
) -> Result<Vec<LiveMember>> {
    let targets = targets(resolver, known, kinds, namespaces).await?;
    let lists: Vec<Vec<LiveMember>> = stream::iter(targets)
        .map(|t| list_one(scope, t))
        .buffer_unordered(scope.concurrency)
        .try_collect()
        .await?;
    Ok(lists.into_iter().flatten().collect())
}

/// The LISTs that cover `kinds` in `namespaces`.
async fn targets(
    resolver: &Resolver,
    known: &HashMap<GroupKind, Resolved>,
    kinds: &BTreeSet<GroupKind>,
    namespaces: &BTreeSet<String>,
) -> Result<Vec<Target>> {
    let unknown: Vec<GroupKind> = kinds
        .iter()
        .filter(|gk| !known.contains_key(*gk))
        .cloned()
        .collect();
    let looked_up = resolver.resolve_group_kinds(&unknown).await?;
    let mut targets = Vec::new();
    for gk in kinds {
        let Some(resolved) = known.get(gk).or_else(|| looked_up.get(gk)) else {
            tracing::debug!(kind = %gk, "not served any more; its objects are not prune candidates");
            continue;
        };
        let target = |namespace: Option<&String>| Target {
            kind: gk.clone(),
            resolved: resolved.clone(),
            namespace: namespace.cloned(),
        };
        if resolved.namespaced {
            targets.extend(namespaces.iter().map(|ns| target(Some(ns))));
        } else {
            targets.push(target(None));
        }
    }
    Ok(targets)
}

async fn list_one(scope: &SetScope, t: Target) -> Result<Vec<LiveMember>> {
    let resource = &t.resolved.resource;
    let api: Api<PartialObjectMeta<DynamicObject>> = match &t.namespace {
        Some(ns) => Api::namespaced_with(scope.client.clone(), ns, resource),
        None => Api::all_with(scope.client.clone(), resource),
    };
    let mut out = Vec::new();
    let mut params = ListParams::default().labels(&scope.selector).limit(500);
    loop {
        let page = match api.list_metadata(&params).await {
            Ok(p) => p,
            Err(kube::Error::Api(s)) if s.is_forbidden() => {
                return Err(Error::Forbidden {
                    what: list_description(resource, t.namespace.as_deref()),
                    message: s.message.clone(),
                });
            }
            // Not served (yet, or any more): also the plain 404 of a route that does not exist.
            Err(kube::Error::Api(s)) if s.is_not_found() || s.code == 404 => return Ok(out),
            Err(e) => return Err(e.into()),
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
            });
        }
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => return Ok(out),
        }
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

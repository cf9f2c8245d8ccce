//! Which sets a viewer may watch: every namespace when a SelfSubjectAccessReview allows
//! listing and watching ApplySets cluster-wide, else the namespaces it names; and
//! ClusterApplySets when it may list and watch them.

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::{Api, Client, Resource, api::PostParams};

use crate::{
    api::{ApplySet, ClusterApplySet},
    applyset::{ParentKind, ParentRef},
};

/// What a view watches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Watched {
    /// `None`: ApplySets of every namespace; else those of these namespaces.
    pub namespaces: Option<Vec<String>>,
    /// Whether ClusterApplySets are watched (the viewer may list and watch them).
    pub cluster_sets: bool,
}

impl Watched {
    /// Whether `parent` is among what is watched.
    pub fn covers(&self, parent: &ParentRef) -> bool {
        match parent.kind {
            ParentKind::ClusterApplySet => self.cluster_sets,
            ParentKind::ApplySet => match (&self.namespaces, parent.namespace.as_deref()) {
                (None, _) => true,
                (Some(list), Some(ns)) => list.iter().any(|n| n == ns),
                (Some(_), None) => false,
            },
        }
    }
}

/// What the viewer behind `client` may watch: every namespace when it may list and watch
/// ApplySets cluster-wide, else `fallback` (the namespaces asked for, or the context's).
/// Four SelfSubjectAccessReviews (list and watch of each kind, cluster-wide), at once.
pub async fn watched(client: &Client, fallback: &[String]) -> kube::Result<Watched> {
    let (sets_list, sets_watch, cluster_list, cluster_watch) = futures::try_join!(
        allowed::<ApplySet>(client, "list"),
        allowed::<ApplySet>(client, "watch"),
        allowed::<ClusterApplySet>(client, "list"),
        allowed::<ClusterApplySet>(client, "watch"),
    )?;
    Ok(Watched {
        namespaces: (!(sets_list && sets_watch)).then(|| fallback.to_vec()),
        cluster_sets: cluster_list && cluster_watch,
    })
}

/// Whether the viewer may `verb` objects of kind `K` in every namespace (or, for a
/// cluster-scoped kind, at all).
async fn allowed<K: Resource<DynamicType = ()>>(client: &Client, verb: &str) -> kube::Result<bool> {
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                group: Some(K::group(&()).into_owned()),
                resource: Some(K::plural(&()).into_owned()),
                verb: Some(verb.to_string()),
                ..ResourceAttributes::default()
            }),
            ..SelfSubjectAccessReviewSpec::default()
        },
        ..SelfSubjectAccessReview::default()
    };
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let answer = api.create(&PostParams::default(), &review).await?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

//! [`AnyParent`]: an ApplySet or a ClusterApplySet, as one value — read by its
//! [`ParentRef`] ([`AnyParent::get`]) or listed ([`AnyParent::list`]) from the API server.
//! What every reader of "a set, of either kind" uses: the plugin's `get`, `tree` and `diff`,
//! and the dependency gate.

use std::sync::Arc;

use kube::{
    Api, Client, Resource,
    api::{ListParams, ObjectMeta},
};

use super::Parent;
use crate::{
    api::{ApplySet, ApplySetSpec, ApplySetStatus, ClusterApplySet},
    applyset::{ParentKind, ParentRef},
};

/// A parent of either kind.
#[derive(Clone, Debug)]
pub enum AnyParent {
    ApplySet(Arc<ApplySet>),
    ClusterApplySet(Arc<ClusterApplySet>),
}

impl AnyParent {
    /// The parent `parent`, if it exists (`None` too when its CRD is not installed: the
    /// server answers 404).
    pub async fn get(client: &Client, parent: &ParentRef) -> kube::Result<Option<AnyParent>> {
        let ns = parent.namespace.as_deref();
        let got = match parent.kind {
            ParentKind::ApplySet => ApplySet::api(client.clone(), ns)
                .get_opt(&parent.name)
                .await
                .map(|o| o.map(|o| AnyParent::ApplySet(Arc::new(o)))),
            ParentKind::ClusterApplySet => ClusterApplySet::api(client.clone(), None)
                .get_opt(&parent.name)
                .await
                .map(|o| o.map(|o| AnyParent::ClusterApplySet(Arc::new(o)))),
        };
        match got {
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
            got => got,
        }
    }

    /// The parents of `kind`: ApplySets of `namespace` (of every namespace when `None`), or
    /// every ClusterApplySet; none when the kind's CRD is not installed.
    pub async fn list(
        client: &Client,
        kind: ParentKind,
        namespace: Option<&str>,
    ) -> kube::Result<Vec<AnyParent>> {
        let listed = match kind {
            ParentKind::ApplySet => listed(ApplySet::api(client.clone(), namespace)).await,
            ParentKind::ClusterApplySet => listed(ClusterApplySet::api(client.clone(), None)).await,
        };
        match listed {
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(Vec::new()),
            listed => listed,
        }
    }

    pub fn meta(&self) -> &ObjectMeta {
        match self {
            AnyParent::ApplySet(o) => o.meta(),
            AnyParent::ClusterApplySet(o) => o.meta(),
        }
    }

    pub fn spec(&self) -> &ApplySetSpec {
        match self {
            AnyParent::ApplySet(o) => Parent::spec(&**o),
            AnyParent::ClusterApplySet(o) => Parent::spec(&**o),
        }
    }

    pub fn status(&self) -> Option<&ApplySetStatus> {
        match self {
            AnyParent::ApplySet(o) => Parent::status(&**o),
            AnyParent::ClusterApplySet(o) => Parent::status(&**o),
        }
    }

    /// Its reference: kind, name and (an ApplySet's) namespace.
    pub fn parent_ref(&self) -> ParentRef {
        match self {
            AnyParent::ApplySet(o) => o.parent_ref(),
            AnyParent::ClusterApplySet(o) => o.parent_ref(),
        }
    }

    /// Its ApplySet ID (`applyset-<hash>-v1`).
    pub fn id(&self) -> String {
        self.parent_ref().id()
    }
}

/// Every object `api` lists, as parents of either kind.
async fn listed<P: Parent>(api: Api<P>) -> kube::Result<Vec<AnyParent>> {
    let list = api.list(&ListParams::default()).await?;
    Ok(list
        .items
        .into_iter()
        .map(|o| Arc::new(o).into_any())
        .collect())
}

impl From<Arc<ApplySet>> for AnyParent {
    fn from(o: Arc<ApplySet>) -> Self {
        AnyParent::ApplySet(o)
    }
}

impl From<Arc<ClusterApplySet>> for AnyParent {
    fn from(o: Arc<ClusterApplySet>) -> Self {
        AnyParent::ClusterApplySet(o)
    }
}

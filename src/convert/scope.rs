//! ApplySet or ClusterApplySet: what a Kustomization writes decides (our scope rule).

use std::collections::BTreeSet;

/// The namespaces a Kustomization is known to write objects in (`None`: a cluster-scoped
/// object), and where that is known from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Written {
    pub namespaces: BTreeSet<Option<String>>,
    /// `status.inventory`, or `a build of the converted set`.
    pub from: String,
}

/// What kind of set a Kustomization becomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// An ApplySet in the Kustomization's namespace.
    Namespaced,
    /// A ClusterApplySet (it writes outside its namespace, or cluster-scoped objects).
    Cluster,
}

//! Which sets a viewer may watch: every namespace when a SelfSubjectAccessReview allows
//! listing and watching ApplySets cluster-wide, else the namespaces it names; and
//! ClusterApplySets when it may list and watch them.

use kube::Client;

/// What a view watches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Watched {
    /// `None`: ApplySets of every namespace; else those of these namespaces.
    pub namespaces: Option<Vec<String>>,
    /// Whether ClusterApplySets are watched (the viewer may list and watch them).
    pub cluster_sets: bool,
}

/// What the viewer behind `client` may watch: every namespace when it may list and watch
/// ApplySets cluster-wide, else `fallback` (the namespaces asked for, or the context's).
pub async fn watched(client: &Client, fallback: &[String]) -> kube::Result<Watched> {
    let _ = (client, fallback);
    todo!("view::access::watched")
}

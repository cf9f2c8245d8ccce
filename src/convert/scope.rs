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

impl Written {
    /// Whether what is written fits an ApplySet in `namespace`: only namespaced objects of
    /// that namespace.
    pub fn fits(&self, namespace: &str) -> bool {
        self.namespaces
            .iter()
            .all(|n| n.as_deref() == Some(namespace))
    }

    /// What it writes outside `namespace`, for a note: `cluster-scoped objects`, `namespace x`.
    pub fn outside(&self, namespace: &str) -> String {
        let mut parts = Vec::new();
        if self.namespaces.contains(&None) {
            parts.push("cluster-scoped objects".to_string());
        }
        let others: Vec<&str> = self
            .namespaces
            .iter()
            .flatten()
            .map(String::as_str)
            .filter(|n| *n != namespace)
            .collect();
        if !others.is_empty() {
            parts.push(format!("objects in namespace {}", others.join(", ")));
        }
        parts.join(" and ")
    }
}

/// The scope of a Kustomization in `namespace` whose spec has `target_namespace`, from what it
/// is known to write (`written`), else from its spec; and why, for an Info note.
pub fn decide(
    namespace: &str,
    target_namespace: Option<&str>,
    written: Option<&Written>,
) -> (Scope, String) {
    if let Some(w) = written {
        return if w.fits(namespace) {
            (
                Scope::Namespaced,
                format!(
                    "an ApplySet: it writes only in its own namespace (known from {})",
                    w.from
                ),
            )
        } else {
            (
                Scope::Cluster,
                format!(
                    "a ClusterApplySet: it writes {} (known from {})",
                    w.outside(namespace),
                    w.from
                ),
            )
        };
    }
    match target_namespace {
        Some(t) if t != namespace => (
            Scope::Cluster,
            format!(
                "a ClusterApplySet: its targetNamespace {t} is not its own namespace (decided from the spec: what it writes is not known)"
            ),
        ),
        _ => (
            Scope::Namespaced,
            "an ApplySet (decided from the spec: what it writes is not known; if its objects are cluster-scoped or in other namespaces, the ApplySet refuses them and a ClusterApplySet is needed: convert with --from-cluster, or where the sources can be read)".to_string(),
        ),
    }
}

//! The order of kinds: which kinds are definitions (applied first, pruned last) and the order
//! in which prune deletes kinds. Pure functions of group and kind (not the kinds a parent
//! records, `applyset::group_kinds`, nor which kinds are watched, `members::watch_refs`).

/// Apply order: definitions (CRDs and Namespaces) before everything that may live in or
/// depend on them. Prune goes the other way (see [`prune_order`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Stage {
    Definitions,
    Resources,
}

impl Stage {
    pub fn of(group: &str, kind: &str) -> Stage {
        if is_crd(group, kind) || is_namespace(group, kind) {
            Stage::Definitions
        } else {
            Stage::Resources
        }
    }
}

/// `apiextensions.k8s.io` `CustomResourceDefinition`.
pub fn is_crd(group: &str, kind: &str) -> bool {
    group == "apiextensions.k8s.io" && kind == "CustomResourceDefinition"
}

/// The core `Namespace`.
pub fn is_namespace(group: &str, kind: &str) -> bool {
    group.is_empty() && kind == "Namespace"
}

/// Deletion order of prune: namespaced objects, then cluster-scoped ones, then Namespaces,
/// then CRDs (so custom resources go before their definition, contents before namespaces).
pub fn prune_order(group: &str, kind: &str, namespaced: bool) -> u8 {
    if is_crd(group, kind) {
        3
    } else if is_namespace(group, kind) {
        2
    } else if namespaced {
        0
    } else {
        1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CRD: (&str, &str) = ("apiextensions.k8s.io", "CustomResourceDefinition");

    #[test]
    fn definitions_are_crds_and_namespaces_only() {
        assert_eq!(Stage::of(CRD.0, CRD.1), Stage::Definitions);
        assert_eq!(Stage::of("", "Namespace"), Stage::Definitions);
        assert_eq!(Stage::of("", "ConfigMap"), Stage::Resources);
        // Same kind name in another group is not a definition.
        assert_eq!(Stage::of("example.com", "Namespace"), Stage::Resources);
        assert_eq!(Stage::of("apiextensions.k8s.io", "Other"), Stage::Resources);
        assert!(Stage::Definitions < Stage::Resources);
    }

    #[test]
    fn kind_predicates_need_the_exact_group() {
        assert!(is_crd(CRD.0, CRD.1));
        assert!(!is_crd("", CRD.1));
        assert!(is_namespace("", "Namespace"));
        assert!(!is_namespace("core", "Namespace"));
    }

    #[test]
    fn prune_deletes_contents_before_their_containers() {
        let namespaced = prune_order("", "ConfigMap", true);
        let cluster = prune_order("rbac.authorization.k8s.io", "ClusterRole", false);
        let namespace = prune_order("", "Namespace", false);
        let crd = prune_order(CRD.0, CRD.1, false);
        assert!(namespaced < cluster && cluster < namespace && namespace < crd);
        // A custom resource (namespaced or not) goes before its CRD.
        assert!(prune_order("example.com", "Widget", false) < crd);
    }
}

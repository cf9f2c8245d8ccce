//! The extent of one reconcile: which kinds and namespaces it records on the parent, lists
//! to learn what is live, and may take prune candidates from. Pure set arithmetic.

use std::collections::BTreeSet;

use crate::{applyset::GroupKind, parent::Recorded};

/// Kinds and namespaces of one reconcile, from what the parent recorded before it and what
/// is declared now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Extent {
    /// The set as declared now: what the parent records after a complete reconcile.
    pub declared: Recorded,
    /// What the parent records while members are written: before ∪ now, so an interrupted
    /// reconcile still finds every member next time.
    pub superset: Recorded,
    /// Kinds listed to learn what is live: before ∪ now.
    pub listed_kinds: BTreeSet<GroupKind>,
    /// Namespaces listed: the parent's own and those recorded before or declared now.
    pub listed_namespaces: BTreeSet<String>,
    /// Kinds a prune candidate may be of: only those recorded before this reconcile.
    pub prune_kinds: BTreeSet<GroupKind>,
    /// Namespaces a prune candidate may be in: the parent's own and those recorded before.
    pub prune_namespaces: BTreeSet<String>,
    /// The parent's own namespace (an ApplySet's), which the set never deletes.
    pub home: Option<String>,
}

impl Extent {
    /// `parent_namespace`: an ApplySet's namespace (`None` for a ClusterApplySet).
    pub fn new(parent_namespace: Option<&str>, before: &Recorded, declared: Recorded) -> Self {
        let superset = before.union(&declared);
        let namespaces =
            |extra: &BTreeSet<String>| crate::applyset::prune_namespaces(parent_namespace, extra);
        Extent {
            listed_kinds: superset.group_kinds.clone(),
            listed_namespaces: namespaces(&superset.namespaces),
            prune_kinds: before.group_kinds.clone(),
            prune_namespaces: namespaces(&before.namespaces),
            superset,
            declared,
            home: parent_namespace.map(str::to_string),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorded(kinds: &[&str], namespaces: &[&str]) -> Recorded {
        Recorded {
            group_kinds: kinds.iter().map(|k| GroupKind::new("", *k)).collect(),
            namespaces: namespaces.iter().map(|n| n.to_string()).collect(),
        }
    }

    fn set<T: Ord + Clone>(v: &BTreeSet<T>) -> Vec<T> {
        v.iter().cloned().collect()
    }

    fn kinds(v: &[&str]) -> Vec<GroupKind> {
        v.iter().map(|k| GroupKind::new("", *k)).collect()
    }

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn lists_the_union_and_prunes_only_what_was_recorded_before() {
        let before = recorded(&["ConfigMap", "Secret"], &["old"]);
        let now = recorded(&["ConfigMap", "Service"], &["new"]);
        let e = Extent::new(Some("team"), &before, now.clone());
        assert_eq!(e.declared, now);
        assert_eq!(
            e.superset,
            recorded(&["ConfigMap", "Secret", "Service"], &["new", "old"])
        );
        assert_eq!(
            set(&e.listed_kinds),
            kinds(&["ConfigMap", "Secret", "Service"])
        );
        assert_eq!(set(&e.listed_namespaces), names(&["new", "old", "team"]));
        assert_eq!(set(&e.prune_kinds), kinds(&["ConfigMap", "Secret"]));
        assert_eq!(set(&e.prune_namespaces), names(&["old", "team"]));
    }

    #[test]
    fn a_first_reconcile_has_no_prune_candidates() {
        let e = Extent::new(
            Some("team"),
            &Recorded::default(),
            recorded(&["ConfigMap"], &[]),
        );
        assert!(e.prune_kinds.is_empty());
        assert_eq!(set(&e.prune_namespaces), names(&["team"]));
        assert_eq!(set(&e.listed_kinds), kinds(&["ConfigMap"]));
    }

    #[test]
    fn a_cluster_parent_has_no_namespace_of_its_own() {
        let before = recorded(&["ConfigMap"], &[]);
        let e = Extent::new(None, &before, recorded(&["ConfigMap"], &["apps"]));
        assert!(e.prune_namespaces.is_empty());
        assert_eq!(set(&e.listed_namespaces), names(&["apps"]));
    }

    #[test]
    fn an_empty_declared_set_still_lists_and_prunes_what_was_recorded() {
        let before = recorded(&["ConfigMap"], &["x"]);
        let e = Extent::new(Some("team"), &before, Recorded::default());
        assert_eq!(e.superset, before);
        assert_eq!(set(&e.prune_kinds), kinds(&["ConfigMap"]));
        assert_eq!(set(&e.prune_namespaces), names(&["team", "x"]));
    }
}

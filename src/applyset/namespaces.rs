//! Namespaces: the `additional-namespaces` annotation, the namespaces a prune looks in, and
//! the namespace (scope) rule for members.

use super::*;

/// The `additional-namespaces` value: member namespaces other than the parent's own and other
/// than `""`, deduplicated, sorted, comma-joined; `""` when none.
pub fn encode_namespaces<'a>(
    namespaces: impl IntoIterator<Item = &'a str>,
    parent_namespace: Option<&str>,
) -> String {
    let skip = parent_namespace.unwrap_or("");
    let set: BTreeSet<&str> = namespaces
        .into_iter()
        .filter(|ns| !ns.is_empty() && *ns != skip)
        .collect();
    set.into_iter().collect::<Vec<_>>().join(",")
}

/// Parses an `additional-namespaces` value. `""` is the empty set. Entries are not trimmed
/// (like kubectl), but empty entries are dropped: an empty namespace would widen a prune
/// listing to every namespace.
pub fn parse_namespaces(value: &str) -> BTreeSet<String> {
    value
        .split(',')
        .filter(|ns| !ns.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The namespaces a prune must list namespaced kinds in: the additional namespaces plus the
/// parent's own namespace when the parent is namespaced. Empty names are dropped.
pub fn prune_namespaces(
    parent_namespace: Option<&str>,
    additional: &BTreeSet<String>,
) -> BTreeSet<String> {
    additional
        .iter()
        .map(String::as_str)
        .chain(parent_namespace)
        .filter(|ns| !ns.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The namespace a member is applied in.
///
/// - Cluster-scoped kind: `Ok(None)`; a declared (non-empty) namespace is an error.
/// - Namespaced kind: the declared namespace, else `target_namespace`, else the namespace of
///   an `ApplySet` parent; for a `ClusterApplySet` with neither, an error. Empty strings count
///   as unset.
pub fn member_namespace(
    kind_namespaced: bool,
    declared: Option<&str>,
    target_namespace: Option<&str>,
    parent: &ParentRef,
    member_display: &str,
) -> Result<Option<String>, ScopeError> {
    let declared = declared.filter(|ns| !ns.is_empty());
    if !kind_namespaced {
        return match declared {
            Some(ns) => Err(ScopeError::ClusterScopedWithNamespace {
                member: member_display.to_owned(),
                namespace: ns.to_owned(),
            }),
            None => Ok(None),
        };
    }
    declared
        .or_else(|| target_namespace.filter(|ns| !ns.is_empty()))
        .or_else(|| parent.effective_namespace())
        .map(|ns| Some(ns.to_owned()))
        .ok_or_else(|| ScopeError::MissingNamespace {
            member: member_display.to_owned(),
            parent: parent.clone(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    // ---- additional-namespaces -------------------------------------------------------

    #[test]
    fn encode_namespaces_empty() {
        assert_eq!(encode_namespaces([], Some("default")), "");
        assert_eq!(encode_namespaces([], None), "");
    }

    #[test]
    fn encode_namespaces_excludes_parent_namespace() {
        assert_eq!(encode_namespaces(["team-a", "team-a"], Some("team-a")), "");
        assert_eq!(
            encode_namespaces(["team-a", "team-b"], Some("team-a")),
            "team-b"
        );
    }

    #[test]
    fn encode_namespaces_cluster_parent_keeps_all() {
        assert_eq!(encode_namespaces(["test"], None), "test");
    }

    #[test]
    fn encode_namespaces_excludes_empty_dedupes_and_sorts() {
        assert_eq!(
            encode_namespaces(["zeta", "", "alpha", "beta", "alpha", "Upper"], None),
            "Upper,alpha,beta,zeta"
        );
        assert_eq!(
            encode_namespaces(["b", "", "a", "home", "b"], Some("home")),
            "a,b"
        );
    }

    #[test]
    fn encode_namespaces_accepts_owned_strings() {
        let owned: BTreeSet<String> = ["x".to_owned(), "y".to_owned()].into_iter().collect();
        assert_eq!(
            encode_namespaces(owned.iter().map(String::as_str), Some("y")),
            "x"
        );
    }

    #[test]
    fn parse_namespaces_values() {
        assert!(parse_namespaces("").is_empty());
        assert_eq!(
            parse_namespaces("b,a,b"),
            ["a".to_owned(), "b".to_owned()].into_iter().collect()
        );
        // Empty entries never become the "all namespaces" empty string.
        assert_eq!(
            parse_namespaces(",a,,b,"),
            ["a".to_owned(), "b".to_owned()].into_iter().collect()
        );
        assert!(parse_namespaces(",").is_empty());
        // No trimming, like kubectl.
        assert!(parse_namespaces("a, b").contains(" b"));
    }

    #[test]
    fn namespaces_round_trip() {
        let namespaces = ["team-b", "team-c", "team-a", "parent"];
        let encoded = encode_namespaces(namespaces, Some("parent"));
        assert_eq!(encoded, "team-a,team-b,team-c");
        let parsed = parse_namespaces(&encoded);
        assert_eq!(
            encode_namespaces(parsed.iter().map(String::as_str), Some("parent")),
            encoded
        );
        assert_eq!(
            parse_namespaces(&encode_namespaces([], None)),
            BTreeSet::new()
        );
    }

    #[test]
    fn prune_namespaces_includes_parent_namespace() {
        let additional = parse_namespaces("b,c");
        assert_eq!(
            prune_namespaces(Some("a"), &additional),
            parse_namespaces("a,b,c")
        );
        assert_eq!(
            prune_namespaces(Some("a"), &BTreeSet::new()),
            parse_namespaces("a")
        );
        // Parent namespace also listed as additional: no duplicate.
        assert_eq!(
            prune_namespaces(Some("b"), &additional),
            parse_namespaces("b,c")
        );
    }

    #[test]
    fn prune_namespaces_cluster_parent() {
        let additional = parse_namespaces("test");
        assert_eq!(prune_namespaces(None, &additional), additional);
        assert!(prune_namespaces(None, &BTreeSet::new()).is_empty());
        // An empty parent namespace and empty entries are never listed.
        let mut with_empty = additional.clone();
        with_empty.insert(String::new());
        assert_eq!(prune_namespaces(Some(""), &with_empty), additional);
    }

    // ---- member namespace ------------------------------------------------------------

    #[test]
    fn member_namespace_cluster_scoped() {
        let parent = ParentRef::applyset("team-a", "web");
        let member = "ClusterRole.rbac.authorization.k8s.io reader";
        assert_eq!(
            member_namespace(false, None, None, &parent, member),
            Ok(None)
        );
        assert_eq!(
            member_namespace(false, None, Some("target"), &parent, member),
            Ok(None)
        );
        assert_eq!(
            member_namespace(false, Some(""), None, &parent, member),
            Ok(None)
        );
        assert_eq!(
            member_namespace(false, None, None, &ParentRef::cluster("p"), member),
            Ok(None)
        );
        let err = member_namespace(false, Some("team-a"), None, &parent, member).unwrap_err();
        assert_eq!(
            err,
            ScopeError::ClusterScopedWithNamespace {
                member: member.to_owned(),
                namespace: "team-a".to_owned(),
            }
        );
        let msg = err.to_string();
        assert!(
            msg.starts_with(&format!(
                "{member} is cluster-scoped and must not set metadata.namespace"
            )),
            "{msg}"
        );
    }

    #[test]
    fn member_namespace_declared_wins() {
        let member = "ConfigMap settings";
        assert_eq!(
            member_namespace(
                true,
                Some("declared"),
                Some("target"),
                &ParentRef::applyset("parent", "p"),
                member
            ),
            Ok(Some("declared".to_owned()))
        );
        assert_eq!(
            member_namespace(
                true,
                Some("declared"),
                None,
                &ParentRef::cluster("p"),
                member
            ),
            Ok(Some("declared".to_owned()))
        );
    }

    #[test]
    fn member_namespace_target_then_parent() {
        let member = "ConfigMap settings";
        let parent = ParentRef::applyset("parent", "p");
        assert_eq!(
            member_namespace(true, None, Some("target"), &parent, member),
            Ok(Some("target".to_owned()))
        );
        assert_eq!(
            member_namespace(true, Some(""), Some("target"), &parent, member),
            Ok(Some("target".to_owned()))
        );
        assert_eq!(
            member_namespace(true, None, None, &parent, member),
            Ok(Some("parent".to_owned()))
        );
        assert_eq!(
            member_namespace(true, Some(""), Some(""), &parent, member),
            Ok(Some("parent".to_owned()))
        );
        assert_eq!(
            member_namespace(true, None, Some("target"), &ParentRef::cluster("p"), member),
            Ok(Some("target".to_owned()))
        );
    }

    #[test]
    fn member_namespace_cluster_parent_without_namespace_fails() {
        let member = "ConfigMap settings";
        let parent = ParentRef::cluster("platform");
        for (declared, target) in [
            (None, None),
            (Some(""), None),
            (None, Some("")),
            (Some(""), Some("")),
        ] {
            let err = member_namespace(true, declared, target, &parent, member).unwrap_err();
            assert_eq!(
                err,
                ScopeError::MissingNamespace {
                    member: member.to_owned(),
                    parent: parent.clone(),
                }
            );
            let msg = err.to_string();
            assert!(msg.starts_with(member), "{msg}");
            assert!(msg.contains("ClusterApplySet platform"), "{msg}");
            assert!(msg.contains("set metadata.namespace"), "{msg}");
            assert!(msg.contains("spec.targetNamespace"), "{msg}");
        }
    }

    #[test]
    fn member_namespace_applyset_without_namespace_fails() {
        // Not a real ApplySet (always namespaced), but must not produce an empty namespace.
        let parent = ParentRef {
            kind: ParentKind::ApplySet,
            name: "web".to_owned(),
            namespace: None,
        };
        assert!(matches!(
            member_namespace(true, None, None, &parent, "ConfigMap x"),
            Err(ScopeError::MissingNamespace { .. })
        ));
    }
}

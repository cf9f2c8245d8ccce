//! Tenancy conventions, pure: which identity a set acts with (its ServiceAccount, the
//! operator's lock-down defaults, or the operator itself), and what a set acting with the
//! operator's own identity may declare.

use std::fmt;

use crate::{
    api::{ApplySetSpec, MemberRef},
    applyset::{ParentKind, ParentRef},
};

/// The identity every request about a set's members is made with.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Identity {
    /// The operator's own.
    Operator,
    /// A ServiceAccount, through impersonation.
    ServiceAccount { namespace: String, name: String },
}

impl Identity {
    /// The user to impersonate (`system:serviceaccount:<ns>:<name>`), if any.
    pub fn user(&self) -> Option<String> {
        match self {
            Identity::Operator => None,
            Identity::ServiceAccount { namespace, name } => {
                Some(format!("system:serviceaccount:{namespace}:{name}"))
            }
        }
    }
}

impl fmt::Display for Identity {
    /// `the operator's service account` or `ServiceAccount ns/name`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Identity::Operator => f.write_str("the operator's service account"),
            Identity::ServiceAccount { namespace, name } => {
                write!(f, "ServiceAccount {namespace}/{name}")
            }
        }
    }
}

/// The operator's lock-down defaults (both off unless set).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Defaults {
    /// `--default-service-account NAME`: an ApplySet without serviceAccountName acts as
    /// this ServiceAccount of its own namespace.
    pub namespaced: Option<String>,
    /// `--cluster-default-service-account NAMESPACE/NAME`: the same for ClusterApplySets.
    pub cluster: Option<(String, String)>,
    /// `--allow-cross-namespace-sets`: an ApplySet acting with the operator's identity may
    /// declare members outside its namespace and cluster-scoped members.
    pub allow_cross_namespace: bool,
}

/// Why a set's identity or declared scope is refused (the reconcile reports it as
/// ValidationFailed).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TenancyError {
    /// A `--cluster-default-service-account` value that is not `NAMESPACE/NAME`.
    #[error("{0:?} is not NAMESPACE/NAME (e.g. flux-system/deployer)")]
    NotNamespacedName(String),
    /// The ServiceAccount named is not a valid object name.
    #[error(
        "{namespace:?}/{name:?} is not a valid ServiceAccount (lowercase letters, digits, '-' and '.')"
    )]
    InvalidServiceAccount { namespace: String, name: String },
    /// `spec.serviceAccountNamespace` on an ApplySet.
    #[error(
        "spec.serviceAccountNamespace is for a ClusterApplySet only: an ApplySet's ServiceAccount is in the ApplySet's own namespace"
    )]
    NamespaceOnApplySet,
    /// A ClusterApplySet naming half a ServiceAccount.
    #[error(
        "spec.serviceAccountName and spec.serviceAccountNamespace go together: set both or neither"
    )]
    HalfServiceAccount,
    /// A member outside the ApplySet's namespace while it acts as the operator.
    #[error(
        "{member} {}, outside the ApplySet's namespace {own}; an ApplySet that acts with the operator's own identity may only declare namespaced members in its own namespace. Set spec.serviceAccountName to a ServiceAccount allowed to manage it, use a ClusterApplySet, or run the operator with --allow-cross-namespace-sets",
        .outside
    )]
    OutsideNamespace {
        member: Box<MemberRef>,
        outside: Outside,
        own: String,
    },
}

/// Where a member lies outside its ApplySet's namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outside {
    ClusterScoped,
    Namespace(String),
}

impl fmt::Display for Outside {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outside::ClusterScoped => f.write_str("is cluster-scoped"),
            Outside::Namespace(ns) => write!(f, "is in namespace {ns}"),
        }
    }
}

/// Parses `NAMESPACE/NAME` (the `--cluster-default-service-account` value).
pub fn parse_namespaced_name(value: &str) -> Result<(String, String), TenancyError> {
    match value.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((ns.to_string(), name.to_string()))
        }
        _ => Err(TenancyError::NotNamespacedName(value.to_string())),
    }
}

/// Whether `name` is a valid object name (a DNS-1123 subdomain: at most 253 characters of
/// lowercase letters, digits, `-` and `.`, starting and ending with a letter or digit).
pub fn is_dns_subdomain(name: &str) -> bool {
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    !name.is_empty()
        && name.len() <= 253
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && edge(name.chars().next())
        && edge(name.chars().last())
}

/// The identity of `parent` with `spec`: its own ServiceAccount, else the operator's default
/// for its kind, else the operator's own. A spec that names half a ServiceAccount, or a name
/// that is not a valid object name, is an error (the CRDs refuse both too).
pub fn identity(
    parent: &ParentRef,
    spec: &ApplySetSpec,
    defaults: &Defaults,
) -> Result<Identity, TenancyError> {
    let id = identity_named(parent, spec, defaults)?;
    if let Identity::ServiceAccount { namespace, name } = &id
        && !(is_dns_subdomain(namespace) && is_dns_subdomain(name))
    {
        return Err(TenancyError::InvalidServiceAccount {
            namespace: namespace.clone(),
            name: name.clone(),
        });
    }
    Ok(id)
}

fn identity_named(
    parent: &ParentRef,
    spec: &ApplySetSpec,
    defaults: &Defaults,
) -> Result<Identity, TenancyError> {
    let sa = |namespace: &str, name: &str| Identity::ServiceAccount {
        namespace: namespace.to_string(),
        name: name.to_string(),
    };
    let name = spec.service_account_name.as_deref();
    let namespace = spec.service_account_namespace.as_deref();
    match parent.kind {
        ParentKind::ApplySet => {
            let own = parent.namespace.as_deref().unwrap_or_default();
            if namespace.is_some() {
                return Err(TenancyError::NamespaceOnApplySet);
            }
            Ok(match (name, defaults.namespaced.as_deref()) {
                (Some(n), _) | (None, Some(n)) => sa(own, n),
                (None, None) => Identity::Operator,
            })
        }
        ParentKind::ClusterApplySet => match (namespace, name, &defaults.cluster) {
            (Some(ns), Some(n), _) => Ok(sa(ns, n)),
            (None, None, Some((ns, n))) => Ok(sa(ns, n)),
            (None, None, None) => Ok(Identity::Operator),
            _ => Err(TenancyError::HalfServiceAccount),
        },
    }
}

/// What a set acting as `identity` may declare: with a ServiceAccount, anything (its RBAC
/// decides); with the operator's identity, an ApplySet only namespaced members in its own
/// namespace (unless the operator allows cross-namespace sets); a ClusterApplySet anything.
/// `members`: each member and whether its kind is namespaced.
pub fn check_scope<'a>(
    parent: &ParentRef,
    identity: &Identity,
    defaults: &Defaults,
    members: impl IntoIterator<Item = (&'a MemberRef, bool)>,
) -> Result<(), TenancyError> {
    if *identity != Identity::Operator
        || parent.kind != ParentKind::ApplySet
        || defaults.allow_cross_namespace
    {
        return Ok(());
    }
    let own = parent.namespace.as_deref().unwrap_or_default();
    for (member, namespaced) in members {
        let outside = if !namespaced {
            Some(Outside::ClusterScoped)
        } else {
            match member.namespace.as_deref() {
                Some(ns) if ns != own => Some(Outside::Namespace(ns.to_string())),
                _ => None,
            }
        };
        if let Some(outside) = outside {
            return Err(TenancyError::OutsideNamespace {
                member: Box::new(member.clone()),
                outside,
                own: own.to_string(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: Option<&str>, namespace: Option<&str>) -> ApplySetSpec {
        ApplySetSpec {
            service_account_name: name.map(str::to_string),
            service_account_namespace: namespace.map(str::to_string),
            ..ApplySetSpec::default()
        }
    }

    fn sa(ns: &str, name: &str) -> Identity {
        Identity::ServiceAccount {
            namespace: ns.into(),
            name: name.into(),
        }
    }

    fn locked() -> Defaults {
        Defaults {
            namespaced: Some("deployer".into()),
            cluster: Some(("platform".into(), "admin".into())),
            allow_cross_namespace: false,
        }
    }

    #[test]
    fn an_applyset_acts_as_its_own_service_account_in_its_namespace() {
        let p = ParentRef::applyset("team-a", "web");
        let id = identity(&p, &spec(Some("ci"), None), &Defaults::default());
        assert_eq!(id, Ok(sa("team-a", "ci")));
        assert_eq!(
            id.map(|i| i.user()),
            Ok(Some("system:serviceaccount:team-a:ci".into()))
        );
        // Its own name wins over the default.
        assert_eq!(
            identity(&p, &spec(Some("ci"), None), &locked()),
            Ok(sa("team-a", "ci"))
        );
    }

    #[test]
    fn defaults_lock_down_sets_that_name_none() {
        let p = ParentRef::applyset("team-a", "web");
        assert_eq!(
            identity(&p, &spec(None, None), &Defaults::default()),
            Ok(Identity::Operator)
        );
        assert_eq!(
            identity(&p, &spec(None, None), &locked()),
            Ok(sa("team-a", "deployer"))
        );
        let c = ParentRef::cluster("platform");
        assert_eq!(
            identity(&c, &spec(None, None), &Defaults::default()),
            Ok(Identity::Operator)
        );
        assert_eq!(
            identity(&c, &spec(None, None), &locked()),
            Ok(sa("platform", "admin"))
        );
    }

    #[test]
    fn a_cluster_applyset_names_both_or_neither() {
        let c = ParentRef::cluster("platform");
        assert_eq!(
            identity(&c, &spec(Some("admin"), Some("ops")), &locked()),
            Ok(sa("ops", "admin"))
        );
        for half in [spec(Some("admin"), None), spec(None, Some("ops"))] {
            let e = identity(&c, &half, &Defaults::default()).expect_err("half a name");
            assert!(e.to_string().contains("both or neither"), "{e}");
        }
        let p = ParentRef::applyset("team-a", "web");
        let e = identity(&p, &spec(Some("ci"), Some("other")), &Defaults::default())
            .expect_err("namespace on an ApplySet");
        assert!(e.to_string().contains("ClusterApplySet only"), "{e}");
    }

    #[test]
    fn invalid_names_are_refused_before_any_request() {
        let p = ParentRef::applyset("team-a", "web");
        for bad in [
            "x\n",
            "Admin",
            "-x",
            "x-",
            "a b",
            "x\u{7f}",
            &"a".repeat(254),
        ] {
            let e = identity(&p, &spec(Some(bad), None), &Defaults::default())
                .expect_err("an invalid name");
            assert!(
                e.to_string().contains("not a valid ServiceAccount"),
                "{bad:?}: {e}"
            );
        }
        assert!(is_dns_subdomain("applyset-deployer"));
        assert!(is_dns_subdomain("a.b-c1"));
        assert!(!is_dns_subdomain(""));
    }

    #[test]
    fn identities_read_well() {
        assert_eq!(
            Identity::Operator.to_string(),
            "the operator's service account"
        );
        assert_eq!(sa("a", "b").to_string(), "ServiceAccount a/b");
        assert_eq!(Identity::Operator.user(), None);
    }

    #[test]
    fn namespaced_names_parse() {
        assert_eq!(
            parse_namespaced_name("ops/admin"),
            Ok(("ops".into(), "admin".into()))
        );
        for bad in ["admin", "/admin", "ops/", "a/b/c", ""] {
            assert!(parse_namespaced_name(bad).is_err(), "{bad}");
        }
    }

    fn member(kind: &str, namespace: Option<&str>) -> MemberRef {
        MemberRef {
            group: String::new(),
            kind: kind.into(),
            namespace: namespace.map(str::to_string),
            name: "x".into(),
        }
    }

    #[test]
    fn the_operators_identity_keeps_an_applyset_in_its_namespace() {
        let p = ParentRef::applyset("team-a", "web");
        let own = member("ConfigMap", Some("team-a"));
        let other = member("ConfigMap", Some("team-b"));
        let binding = member("ClusterRoleBinding", None);
        let d = Defaults::default();
        assert_eq!(
            check_scope(&p, &Identity::Operator, &d, [(&own, true)]),
            Ok(())
        );
        let e = check_scope(&p, &Identity::Operator, &d, [(&own, true), (&other, true)])
            .expect_err("another namespace");
        assert!(e.to_string().contains("is in namespace team-b"), "{e}");
        assert!(
            e.to_string().contains("serviceAccountName"),
            "names the ways out: {e}"
        );
        assert!(
            e.to_string().contains("--allow-cross-namespace-sets"),
            "{e}"
        );
        let e = check_scope(&p, &Identity::Operator, &d, [(&binding, false)])
            .expect_err("cluster-scoped");
        assert!(e.to_string().contains("is cluster-scoped"), "{e}");
    }

    #[test]
    fn service_accounts_cluster_sets_and_the_flag_are_not_limited() {
        let p = ParentRef::applyset("team-a", "web");
        let other = member("ConfigMap", Some("team-b"));
        let d = Defaults::default();
        assert_eq!(
            check_scope(&p, &sa("team-a", "ci"), &d, [(&other, true)]),
            Ok(())
        );
        let c = ParentRef::cluster("platform");
        assert_eq!(
            check_scope(&c, &Identity::Operator, &d, [(&other, true)]),
            Ok(())
        );
        let open = Defaults {
            allow_cross_namespace: true,
            ..Defaults::default()
        };
        assert_eq!(
            check_scope(&p, &Identity::Operator, &open, [(&other, true)]),
            Ok(())
        );
    }
}

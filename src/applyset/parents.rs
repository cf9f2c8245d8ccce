//! Parents: the ApplySet ID, the tooling value, parent references and their field managers,
//! and the checks that protect a parent from other tools.

use super::*;

/// The ApplySet ID of a parent:
/// `applyset-` + base64url-without-padding(sha256(`<name>.<namespace>.<Kind>.<group>`)) + `-v1`.
///
/// A cluster-scoped parent passes `None` (hash input `name..Kind.group`); `group` is `""` for
/// the core group.
pub fn applyset_id(name: &str, namespace: Option<&str>, kind: &str, group: &str) -> String {
    let unencoded = [name, namespace.unwrap_or(""), kind, group].join(".");
    let hashed = Sha256::digest(unencoded.as_bytes());
    format!("applyset-{}-v1", URL_SAFE_NO_PAD.encode(hashed))
}

/// The tooling annotation value: `applyset-operator/<version>` (version like `v0.1.0`).
pub fn tooling_value(version: &str) -> String {
    format!("{TOOLING_NAME}/{version}")
}

/// The base name of a tooling value: everything before the last `/`, or the whole value when
/// it has no `/` (kubectl's `toolingBaseName`).
pub fn tooling_base_name(value: &str) -> &str {
    match value.rsplit_once('/') {
        Some((base, _version)) => base,
        None => value,
    }
}

/// The two parent kinds served by this operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ParentKind {
    /// Namespaced `ApplySet`.
    ApplySet,
    /// Cluster-scoped `ClusterApplySet`.
    ClusterApplySet,
}

impl ParentKind {
    /// The Kind name.
    pub fn kind(&self) -> &'static str {
        match self {
            ParentKind::ApplySet => "ApplySet",
            ParentKind::ClusterApplySet => "ClusterApplySet",
        }
    }

    /// Whether parents of this kind live in a namespace.
    pub fn is_namespaced(&self) -> bool {
        matches!(self, ParentKind::ApplySet)
    }
}

impl fmt::Display for ParentKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind())
    }
}

/// A reference to an ApplySet parent (an `ApplySet` or `ClusterApplySet` object).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ParentRef {
    /// Which kind of parent.
    pub kind: ParentKind,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.namespace`; `None` for a ClusterApplySet.
    pub namespace: Option<String>,
}

impl ParentRef {
    /// A namespaced `ApplySet` parent.
    pub fn applyset(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            kind: ParentKind::ApplySet,
            name: name.into(),
            namespace: Some(namespace.into()),
        }
    }

    /// A cluster-scoped `ClusterApplySet` parent.
    pub fn cluster(name: impl Into<String>) -> Self {
        Self {
            kind: ParentKind::ClusterApplySet,
            name: name.into(),
            namespace: None,
        }
    }

    /// The parent's namespace as used by the conventions: `None` for a ClusterApplySet (even
    /// if a namespace was set by mistake) and for an empty namespace.
    pub fn effective_namespace(&self) -> Option<&str> {
        if !self.kind.is_namespaced() {
            return None;
        }
        self.namespace.as_deref().filter(|ns| !ns.is_empty())
    }

    /// The ApplySet ID of this parent (group [`GROUP`]).
    pub fn id(&self) -> String {
        applyset_id(
            &self.name,
            self.effective_namespace(),
            self.kind.kind(),
            GROUP,
        )
    }

    /// The field manager used to apply this parent's members:
    /// `applyset.dev/ns/<namespace>/<name>` or `applyset.dev/cluster/<name>`, or
    /// `applyset.dev/id/<ID>` when the readable form would exceed 128 characters.
    pub fn member_field_manager(&self) -> String {
        let readable = match self.kind {
            ParentKind::ApplySet => format!(
                "{FIELD_MANAGER_PREFIX}/ns/{}/{}",
                self.effective_namespace().unwrap_or(""),
                self.name
            ),
            ParentKind::ClusterApplySet => format!("{FIELD_MANAGER_PREFIX}/cluster/{}", self.name),
        };
        if readable.len() <= MAX_FIELD_MANAGER_LEN {
            readable
        } else {
            format!("{FIELD_MANAGER_PREFIX}/id/{}", self.id())
        }
    }
}

impl fmt::Display for ParentRef {
    /// `ApplySet ns/name` or `ClusterApplySet name`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            ParentKind::ApplySet => write!(
                f,
                "{} {}/{}",
                self.kind.kind(),
                self.namespace.as_deref().unwrap_or(""),
                self.name
            ),
            ParentKind::ClusterApplySet => write!(f, "{} {}", self.kind.kind(), self.name),
        }
    }
}

/// Checks the parent's live tooling annotation: absent is fine (the operator writes it); a
/// value whose base name is not [`TOOLING_NAME`] belongs to another tool and is refused.
pub fn check_parent_tooling(existing: Option<&str>) -> Result<(), OwnershipError> {
    match existing {
        None => Ok(()),
        Some(value) if tooling_base_name(value) == TOOLING_NAME => Ok(()),
        Some(value) => Err(OwnershipError::ForeignTooling {
            tooling: value.to_owned(),
        }),
    }
}

/// Checks the parent's live ID label: absent or equal to `expected` is fine; any other value
/// is refused (ID impersonation guard).
pub fn check_parent_id(existing: Option<&str>, expected: &str) -> Result<(), OwnershipError> {
    match existing {
        None => Ok(()),
        Some(value) if value == expected => Ok(()),
        Some(value) => Err(OwnershipError::IdMismatch {
            found: value.to_owned(),
            expected: expected.to_owned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // ---- ID --------------------------------------------------------------------------

    #[test]
    fn id_vector_secret_my_set_in_test() {
        assert_eq!(
            applyset_id("my-set", Some("test"), "Secret", ""),
            "applyset-0eFHV8ySqp7XoShsGvyWFQD3s96yqwHmzc4e0HR1dsY-v1"
        );
    }

    #[test]
    fn id_vector_cluster_scoped_custom_resource() {
        assert_eq!(
            applyset_id("my-set", None, "ApplySet", "company.com"),
            "applyset-rhp1a-HVAVT_dFgyEygyA1BEB82HPp2o10UiFTpqtAs-v1"
        );
    }

    #[test]
    fn id_vector_configmap_test_in_default() {
        assert_eq!(
            applyset_id("test", Some("default"), "ConfigMap", ""),
            "applyset-XYWvxXDUlCqMdjmmY1arThcdGiF0cvBW6sAfSMWYUdE-v1"
        );
    }

    #[test]
    fn id_vector_secret_simple_in_test() {
        assert_eq!(
            applyset_id("simple", Some("test"), "Secret", ""),
            "applyset-bjd1LnyQq0mtUu-riZCqjDQOmh0iNb9O2RcuT12WR0k-v1"
        );
    }

    #[test]
    fn id_vector_custom_resource_with_dotted_group() {
        assert_eq!(
            applyset_id("simple1", Some("ns1"), "SimpleTest", "addons.example.org"),
            "applyset-xbxAWnAItX3p1Gxrs86F-ZQAGwGoys9xxQGK3IED7bY-v1"
        );
    }

    #[test]
    fn id_vector_cross_namespace_secret() {
        assert_eq!(
            applyset_id("cross_namespace", Some("applyset-namespace"), "Secret", ""),
            "applyset-maUyxm9hLztJjNIswOCgA-VT6EJxr1_CcWA5kSzuMYE-v1"
        );
    }

    #[test]
    fn id_cluster_scoped_none_equals_empty_namespace() {
        assert_eq!(
            applyset_id("my-set", None, "ApplySet", "company.com"),
            applyset_id("my-set", Some(""), "ApplySet", "company.com")
        );
    }

    #[test]
    fn id_shape_fits_a_label_value() {
        let id = applyset_id("x", Some("y"), "ApplySet", GROUP);
        assert!(id.starts_with("applyset-"));
        assert!(id.ends_with("-v1"));
        assert_eq!(id.len(), 55);
        assert!(id.len() <= 63);
        let middle = &id["applyset-".len()..id.len() - "-v1".len()];
        assert_eq!(middle.len(), 43);
        assert!(
            middle
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        );
        assert!(!id.contains('='));
    }

    #[test]
    fn id_depends_on_every_part() {
        let base = applyset_id("n", Some("ns"), "K", "g");
        assert_ne!(base, applyset_id("n2", Some("ns"), "K", "g"));
        assert_ne!(base, applyset_id("n", Some("ns2"), "K", "g"));
        assert_ne!(base, applyset_id("n", Some("ns"), "K2", "g"));
        assert_ne!(base, applyset_id("n", Some("ns"), "K", "g2"));
        assert_ne!(base, applyset_id("n", None, "K", "g"));
    }

    // ---- tooling ---------------------------------------------------------------------

    #[test]
    fn tooling_value_format() {
        assert_eq!(tooling_value("v0.1.0"), "applyset-operator/v0.1.0");
        assert_eq!(tooling_base_name(&tooling_value("v0.1.0")), TOOLING_NAME);
    }

    #[test]
    fn tooling_base_name_like_kubectl() {
        assert_eq!(
            tooling_base_name("example.com/tool/why/v1"),
            "example.com/tool/why"
        );
        assert_eq!(tooling_base_name("helm"), "helm");
        assert_eq!(tooling_base_name("helm/v3"), "helm");
        assert_eq!(tooling_base_name("kubectl/v1.31.0"), "kubectl");
        assert_eq!(
            tooling_base_name("kubectl/v0.0.0-master+$Format:%H$"),
            "kubectl"
        );
        assert_eq!(tooling_base_name("kro/v0.4.0"), "kro");
        assert_eq!(tooling_base_name("SimpleTest/"), "SimpleTest");
        assert_eq!(
            tooling_base_name("applyset-operator/v0.1.0"),
            "applyset-operator"
        );
        assert_eq!(tooling_base_name("applyset-operator"), "applyset-operator");
        assert_eq!(tooling_base_name("/v1"), "");
        assert_eq!(tooling_base_name(""), "");
    }

    #[test]
    fn check_parent_tooling_accepts_absent_and_ours() {
        assert_eq!(check_parent_tooling(None), Ok(()));
        assert_eq!(
            check_parent_tooling(Some("applyset-operator/v0.1.0")),
            Ok(())
        );
        // Any version of ours, and a bare name.
        assert_eq!(
            check_parent_tooling(Some("applyset-operator/v9.9.9-dev")),
            Ok(())
        );
        assert_eq!(check_parent_tooling(Some("applyset-operator")), Ok(()));
    }

    #[test]
    fn check_parent_tooling_refuses_other_tools() {
        for (value, base) in [
            ("helm/v3", "helm"),
            ("helm", "helm"),
            ("example.com/tool/why/v1", "example.com/tool/why"),
            ("kubectl/v1.31.0", "kubectl"),
            ("applyset-operator-fork/v1", "applyset-operator-fork"),
            ("applyset-operator/v1/extra", "applyset-operator/v1"),
            ("", ""),
        ] {
            assert_eq!(tooling_base_name(value), base);
            let err = check_parent_tooling(Some(value)).unwrap_err();
            assert_eq!(
                err,
                OwnershipError::ForeignTooling {
                    tooling: value.to_owned()
                }
            );
            let msg = err.to_string();
            assert!(
                msg.contains(&format!("managed by tooling {value:?}")),
                "{msg}"
            );
            assert!(msg.contains("will not take it over"), "{msg}");
            assert!(
                msg.contains(&format!("remove the annotation {ANNOTATION_TOOLING}")),
                "{msg}"
            );
        }
    }

    // ---- parent ID label -------------------------------------------------------------

    #[test]
    fn check_parent_id_cases() {
        let expected = "applyset-0eFHV8ySqp7XoShsGvyWFQD3s96yqwHmzc4e0HR1dsY-v1";
        assert_eq!(check_parent_id(None, expected), Ok(()));
        assert_eq!(check_parent_id(Some(expected), expected), Ok(()));
        let other = "applyset-rhp1a-HVAVT_dFgyEygyA1BEB82HPp2o10UiFTpqtAs-v1";
        let err = check_parent_id(Some(other), expected).unwrap_err();
        assert_eq!(
            err,
            OwnershipError::IdMismatch {
                found: other.to_owned(),
                expected: expected.to_owned(),
            }
        );
        let msg = err.to_string();
        assert!(msg.contains(other), "{msg}");
        assert!(msg.contains(expected), "{msg}");
        assert!(
            msg.contains("remove the label applyset.kubernetes.io/id"),
            "{msg}"
        );
        // An empty value is still a different value.
        assert!(check_parent_id(Some(""), expected).is_err());
    }

    // ---- parent references and field managers ----------------------------------------

    #[test]
    fn parent_kind_names() {
        assert_eq!(ParentKind::ApplySet.kind(), "ApplySet");
        assert_eq!(ParentKind::ClusterApplySet.kind(), "ClusterApplySet");
        assert_eq!(ParentKind::ApplySet.to_string(), "ApplySet");
        assert_eq!(ParentKind::ClusterApplySet.to_string(), "ClusterApplySet");
        assert!(ParentKind::ApplySet.is_namespaced());
        assert!(!ParentKind::ClusterApplySet.is_namespaced());
    }

    #[test]
    fn parent_ref_constructors() {
        assert_eq!(
            ParentRef::applyset("ns", "n"),
            ParentRef {
                kind: ParentKind::ApplySet,
                name: "n".to_owned(),
                namespace: Some("ns".to_owned()),
            }
        );
        assert_eq!(
            ParentRef::cluster("n"),
            ParentRef {
                kind: ParentKind::ClusterApplySet,
                name: "n".to_owned(),
                namespace: None,
            }
        );
    }

    #[test]
    fn parent_ref_display() {
        assert_eq!(
            ParentRef::applyset("team-a", "web").to_string(),
            "ApplySet team-a/web"
        );
        assert_eq!(
            ParentRef::cluster("platform").to_string(),
            "ClusterApplySet platform"
        );
    }

    #[test]
    fn parent_ref_id_uses_kind_and_group() {
        assert_eq!(
            ParentRef::applyset("team-a", "web").id(),
            applyset_id("web", Some("team-a"), "ApplySet", "applyset.dev")
        );
        // Independently computed: sha256("web.team-a.ApplySet.applyset.dev").
        assert_eq!(
            ParentRef::applyset("team-a", "web").id(),
            "applyset-2HRYpD6KTCa9h04EbbFt4Sycg1kD7m4Ker0X1nTSJD4-v1"
        );
        // Independently computed: sha256("addons..ClusterApplySet.applyset.dev").
        assert_eq!(
            ParentRef::cluster("addons").id(),
            "applyset-GCOq8UoA-S7hZntwUGb2ScQxHsul3SHbMWHb9dgEK2U-v1"
        );
        assert_ne!(
            ParentRef::cluster("addons").id(),
            ParentRef::applyset("", "addons").id()
        );
    }

    #[test]
    fn parent_ref_cluster_ignores_stray_namespace() {
        let stray = ParentRef {
            kind: ParentKind::ClusterApplySet,
            name: "addons".to_owned(),
            namespace: Some("oops".to_owned()),
        };
        assert_eq!(stray.effective_namespace(), None);
        assert_eq!(stray.id(), ParentRef::cluster("addons").id());
        assert_eq!(
            stray.member_field_manager(),
            ParentRef::cluster("addons").member_field_manager()
        );
    }

    #[test]
    fn parent_ref_effective_namespace() {
        assert_eq!(
            ParentRef::applyset("team-a", "web").effective_namespace(),
            Some("team-a")
        );
        assert_eq!(ParentRef::applyset("", "web").effective_namespace(), None);
        assert_eq!(ParentRef::cluster("x").effective_namespace(), None);
    }

    #[test]
    fn member_field_manager_readable() {
        assert_eq!(
            ParentRef::applyset("team-a", "web").member_field_manager(),
            "applyset.dev/ns/team-a/web"
        );
        assert_eq!(
            ParentRef::cluster("platform").member_field_manager(),
            "applyset.dev/cluster/platform"
        );
        assert_ne!(
            ParentRef::cluster("platform").member_field_manager(),
            PARENT_FIELD_MANAGER
        );
    }

    #[test]
    fn member_field_manager_cluster_boundary() {
        // "applyset.dev/cluster/" is 21 characters.
        let at_limit = ParentRef::cluster("a".repeat(107));
        let manager = at_limit.member_field_manager();
        assert_eq!(manager.len(), 128);
        assert_eq!(manager, format!("applyset.dev/cluster/{}", "a".repeat(107)));

        let over = ParentRef::cluster("a".repeat(108));
        let manager = over.member_field_manager();
        assert_eq!(manager, format!("applyset.dev/id/{}", over.id()));
        assert!(manager.len() <= 128);
        assert_eq!(manager.len(), 16 + 55);
    }

    #[test]
    fn member_field_manager_namespaced_boundary() {
        // "applyset.dev/ns/" (16) + 63 + "/" (1) + 48 = 128.
        let ns = "n".repeat(63);
        let at_limit = ParentRef::applyset(ns.clone(), "a".repeat(48));
        let manager = at_limit.member_field_manager();
        assert_eq!(manager.len(), 128);
        assert_eq!(manager, format!("applyset.dev/ns/{ns}/{}", "a".repeat(48)));

        let over = ParentRef::applyset(ns.clone(), "a".repeat(49));
        let manager = over.member_field_manager();
        assert_eq!(manager, format!("applyset.dev/id/{}", over.id()));
        assert!(manager.len() <= 128);

        // Maximal name (253) falls back too, and distinct parents get distinct managers.
        let long_a = ParentRef::applyset("ns", "a".repeat(253));
        let long_b = ParentRef::applyset("ns", "b".repeat(253));
        assert!(
            long_a
                .member_field_manager()
                .starts_with("applyset.dev/id/applyset-")
        );
        assert_ne!(long_a.member_field_manager(), long_b.member_field_manager());
    }
}

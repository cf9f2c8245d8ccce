//! Group-kinds and group-resources, and the `contains-group-kinds` (and deprecated
//! `contains-group-resources`) annotations that list them.

use super::*;

/// Splits `s` at the first `.`, like Go's `schema.ParseGroupKind` / `ParseGroupResource`.
fn split_first_dot(s: &str) -> (&str, &str) {
    match s.split_once('.') {
        Some((name, group)) => (name, group),
        None => (s, ""),
    }
}

/// Byte-wise comparison of `a[.ga]` with `b[.gb]` (no `.` when the group is empty), with a
/// tie-break on the fields so that the ordering stays consistent with `Eq`.
fn cmp_dotted(a: &str, ga: &str, b: &str, gb: &str) -> Ordering {
    let left = a
        .bytes()
        .chain(if ga.is_empty() { "" } else { "." }.bytes())
        .chain(ga.bytes());
    let right = b
        .bytes()
        .chain(if gb.is_empty() { "" } else { "." }.bytes())
        .chain(gb.bytes());
    left.cmp(right).then_with(|| (a, ga).cmp(&(b, gb)))
}

/// A Kubernetes group and kind (no version), as listed in `contains-group-kinds`.
///
/// Ordering is the byte-wise ordering of the [`Display`](fmt::Display) form (`Kind` for the
/// core group, `Kind.group` otherwise), which is the order kubectl writes the annotation in.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct GroupKind {
    /// API group; `""` for the core group.
    pub group: String,
    /// Kind, e.g. `Deployment`.
    pub kind: String,
}

impl GroupKind {
    /// Builds a group/kind.
    pub fn new(group: impl Into<String>, kind: impl Into<String>) -> Self {
        Self {
            group: group.into(),
            kind: kind.into(),
        }
    }

    /// Builds the group/kind of an object from its `apiVersion` (`v1`, `apps/v1`) and kind.
    pub fn from_api_version(api_version: &str, kind: &str) -> Self {
        let group = match api_version.split_once('/') {
            Some((group, _version)) => group,
            None => "",
        };
        Self::new(group, kind)
    }

    /// Parses `Kind` (core group) or `Kind.group`, splitting at the first `.` like Go's
    /// `schema.ParseGroupKind` (so `Kind.` is the core group). An empty kind is refused.
    pub fn parse(s: &str) -> Result<Self, ConventionError> {
        let (kind, group) = split_first_dot(s);
        if kind.is_empty() {
            return Err(ConventionError::EmptyKind {
                value: s.to_owned(),
            });
        }
        Ok(Self::new(group, kind))
    }

    /// Whether this is the core (`""`) group.
    pub fn is_core(&self) -> bool {
        self.group.is_empty()
    }
}

impl fmt::Display for GroupKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.group.is_empty() {
            f.write_str(&self.kind)
        } else {
            write!(f, "{}.{}", self.kind, self.group)
        }
    }
}

impl Ord for GroupKind {
    fn cmp(&self, other: &Self) -> Ordering {
        cmp_dotted(&self.kind, &self.group, &other.kind, &other.group)
    }
}

impl PartialOrd for GroupKind {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// A Kubernetes group and resource (plural), as listed in the deprecated
/// `contains-group-resources` annotation.
///
/// Ordering is the byte-wise ordering of the [`Display`](fmt::Display) form.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct GroupResource {
    /// API group; `""` for the core group.
    pub group: String,
    /// Resource (plural), e.g. `deployments`.
    pub resource: String,
}

impl GroupResource {
    /// Builds a group/resource.
    pub fn new(group: impl Into<String>, resource: impl Into<String>) -> Self {
        Self {
            group: group.into(),
            resource: resource.into(),
        }
    }

    /// Parses `resource` (core group) or `resource.group`, splitting at the first `.` like
    /// Go's `schema.ParseGroupResource`. An empty resource is refused.
    pub fn parse(s: &str) -> Result<Self, ConventionError> {
        let (resource, group) = split_first_dot(s);
        if resource.is_empty() {
            return Err(ConventionError::EmptyResource {
                value: s.to_owned(),
            });
        }
        Ok(Self::new(group, resource))
    }
}

impl fmt::Display for GroupResource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.group.is_empty() {
            f.write_str(&self.resource)
        } else {
            write!(f, "{}.{}", self.resource, self.group)
        }
    }
}

impl Ord for GroupResource {
    fn cmp(&self, other: &Self) -> Ordering {
        cmp_dotted(&self.resource, &self.group, &other.resource, &other.group)
    }
}

impl PartialOrd for GroupResource {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Splits a comma-separated annotation value, refusing empty entries. `""` gives no entries.
fn split_entries<'v>(
    annotation: &'static str,
    value: &'v str,
) -> Result<Vec<&'v str>, ConventionError> {
    if value.is_empty() {
        return Ok(Vec::new());
    }
    value
        .split(',')
        .enumerate()
        .map(|(i, entry)| {
            if entry.is_empty() {
                Err(ConventionError::EmptyEntry {
                    annotation,
                    value: value.to_owned(),
                    position: i + 1,
                })
            } else {
                Ok(entry)
            }
        })
        .collect()
}

/// The `contains-group-kinds` value for a set of group/kinds: deduplicated, sorted byte-wise
/// by their display form, comma-joined; `""` when empty.
pub fn encode_group_kinds<'a>(gks: impl IntoIterator<Item = &'a GroupKind>) -> String {
    let names: BTreeSet<String> = gks.into_iter().map(ToString::to_string).collect();
    names.into_iter().collect::<Vec<_>>().join(",")
}

/// Parses a `contains-group-kinds` value. `""` is the empty set; entries are not trimmed
/// (like kubectl); an empty entry or an entry with an empty kind is an error.
pub fn parse_group_kinds(value: &str) -> Result<BTreeSet<GroupKind>, ConventionError> {
    split_entries(ANNOTATION_CONTAINS_GROUP_KINDS, value)?
        .into_iter()
        .map(|entry| {
            GroupKind::parse(entry).map_err(|e| ConventionError::InvalidEntry {
                annotation: ANNOTATION_CONTAINS_GROUP_KINDS,
                value: value.to_owned(),
                source: Box::new(e),
            })
        })
        .collect()
}

/// Parses the deprecated `contains-group-resources` value (`resource.group`, comma-joined).
/// Read only: the operator never writes this annotation. `""` is the empty set.
pub fn parse_group_resources(value: &str) -> Result<BTreeSet<GroupResource>, ConventionError> {
    split_entries(ANNOTATION_CONTAINS_GROUP_RESOURCES, value)?
        .into_iter()
        .map(|entry| {
            GroupResource::parse(entry).map_err(|e| ConventionError::InvalidEntry {
                annotation: ANNOTATION_CONTAINS_GROUP_RESOURCES,
                value: value.to_owned(),
                source: Box::new(e),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::tests::*;
    use super::*;

    // ---- GroupKind -------------------------------------------------------------------

    #[test]
    fn group_kind_display() {
        assert_eq!(gk("", "ConfigMap").to_string(), "ConfigMap");
        assert_eq!(gk("apps", "Deployment").to_string(), "Deployment.apps");
        assert_eq!(
            gk("cert-manager.io", "Certificate").to_string(),
            "Certificate.cert-manager.io"
        );
    }

    #[test]
    fn group_kind_parse_core_and_grouped() {
        assert_eq!(GroupKind::parse("ConfigMap"), Ok(gk("", "ConfigMap")));
        assert_eq!(
            GroupKind::parse("Deployment.apps"),
            Ok(gk("apps", "Deployment"))
        );
    }

    #[test]
    fn group_kind_parse_splits_at_first_dot() {
        assert_eq!(
            GroupKind::parse("Certificate.cert-manager.io"),
            Ok(gk("cert-manager.io", "Certificate"))
        );
        assert_eq!(
            GroupKind::parse("ApplySet.applyset.dev"),
            Ok(gk("applyset.dev", "ApplySet"))
        );
    }

    #[test]
    fn group_kind_parse_trailing_dot_is_core_like_go() {
        assert_eq!(GroupKind::parse("Secret."), Ok(gk("", "Secret")));
    }

    #[test]
    fn group_kind_parse_rejects_empty_kind() {
        assert_eq!(
            GroupKind::parse(""),
            Err(ConventionError::EmptyKind {
                value: String::new()
            })
        );
        let err = GroupKind::parse(".apps");
        assert_eq!(
            err,
            Err(ConventionError::EmptyKind {
                value: ".apps".to_owned()
            })
        );
        let msg = GroupKind::parse(".apps").unwrap_err().to_string();
        assert!(msg.contains("\".apps\""), "{msg}");
        assert!(msg.contains("kind must not be empty"), "{msg}");
    }

    #[test]
    fn group_kind_parse_does_not_trim() {
        assert_eq!(GroupKind::parse(" ConfigMap"), Ok(gk("", " ConfigMap")));
    }

    #[test]
    fn group_kind_display_parse_round_trip() {
        for g in [
            gk("", "ConfigMap"),
            gk("apps", "Deployment"),
            gk("apiextensions.k8s.io", "CustomResourceDefinition"),
        ] {
            assert_eq!(GroupKind::parse(&g.to_string()), Ok(g.clone()));
        }
    }

    #[test]
    fn group_kind_from_api_version() {
        assert_eq!(
            GroupKind::from_api_version("v1", "ConfigMap"),
            gk("", "ConfigMap")
        );
        assert_eq!(
            GroupKind::from_api_version("apps/v1", "Deployment"),
            gk("apps", "Deployment")
        );
        assert_eq!(
            GroupKind::from_api_version("applyset.dev/v1alpha1", "ApplySet"),
            gk("applyset.dev", "ApplySet")
        );
    }

    #[test]
    fn group_kind_is_core() {
        assert!(gk("", "Secret").is_core());
        assert!(!gk("apps", "Deployment").is_core());
    }

    #[test]
    fn group_kind_order_is_bytewise_display_order() {
        // "Deployment.apps" vs "DeploymentX": '.' (0x2E) < 'X' (0x58).
        assert!(gk("apps", "Deployment") < gk("", "DeploymentX"));
        // Uppercase before lowercase.
        assert!(gk("", "Zeta") < gk("", "alpha"));
        // A prefix sorts first: "Secret" < "Secret.v2group".
        assert!(gk("", "Secret") < gk("v2group", "Secret"));
        // Group breaks ties on the same kind.
        assert!(gk("apps", "Deployment") < gk("extensions", "Deployment"));
        // Display order, not field order: "A.z" < "AB" even though group "z" > "".
        assert!(gk("z", "A") < gk("", "AB"));
        assert_eq!(gk("apps", "X").cmp(&gk("apps", "X")), Ordering::Equal);
        assert_eq!(
            gk("apps", "X").partial_cmp(&gk("apps", "Y")),
            Some(Ordering::Less)
        );

        let mut all = [
            gk("", "alpha"),
            gk("", "Secret"),
            gk("", "DeploymentX"),
            gk("apps", "Deployment"),
            gk("", "ConfigMap"),
            gk("", "Zeta"),
        ];
        all.sort();
        let displayed: Vec<String> = all.iter().map(ToString::to_string).collect();
        let mut expected = displayed.clone();
        expected.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
        assert_eq!(displayed, expected);
        assert_eq!(
            displayed,
            [
                "ConfigMap",
                "Deployment.apps",
                "DeploymentX",
                "Secret",
                "Zeta",
                "alpha"
            ]
        );
    }

    #[test]
    fn group_kind_order_is_consistent_with_eq_for_equal_displays() {
        // Not produced by parse, but constructible: same display, different fields.
        let a = gk("", "A.b");
        let b = gk("b", "A");
        assert_eq!(a.to_string(), b.to_string());
        assert_ne!(a, b);
        assert_ne!(a.cmp(&b), Ordering::Equal);
        assert_eq!(a.cmp(&b), b.cmp(&a).reverse());
    }

    // ---- GroupResource ---------------------------------------------------------------

    #[test]
    fn group_resource_parse_and_display() {
        assert_eq!(
            GroupResource::parse("configmaps"),
            Ok(GroupResource::new("", "configmaps"))
        );
        assert_eq!(
            GroupResource::parse("deployments.apps"),
            Ok(GroupResource::new("apps", "deployments"))
        );
        assert_eq!(
            GroupResource::parse("certificates.cert-manager.io"),
            Ok(GroupResource::new("cert-manager.io", "certificates"))
        );
        assert_eq!(GroupResource::new("", "secrets").to_string(), "secrets");
        assert_eq!(
            GroupResource::new("apps", "deployments").to_string(),
            "deployments.apps"
        );
        assert_eq!(
            GroupResource::parse("secrets."),
            Ok(GroupResource::new("", "secrets"))
        );
    }

    #[test]
    fn group_resource_parse_rejects_empty_resource() {
        assert_eq!(
            GroupResource::parse(""),
            Err(ConventionError::EmptyResource {
                value: String::new()
            })
        );
        let err = GroupResource::parse(".apps").unwrap_err();
        assert_eq!(
            err,
            ConventionError::EmptyResource {
                value: ".apps".to_owned()
            }
        );
        assert!(err.to_string().contains("resource must not be empty"));
    }

    #[test]
    fn group_resource_order_is_bytewise_display_order() {
        let a = GroupResource::new("apps", "deployments");
        let b = GroupResource::new("", "deploymentsx");
        assert!(a < b);
        assert_eq!(a.partial_cmp(&b), Some(Ordering::Less));
        assert!(GroupResource::new("", "Zs") < GroupResource::new("", "as"));
    }

    // ---- contains-group-kinds --------------------------------------------------------

    #[test]
    fn encode_group_kinds_empty() {
        assert_eq!(encode_group_kinds(&[]), "");
        assert_eq!(encode_group_kinds(&BTreeSet::new()), "");
    }

    #[test]
    fn encode_group_kinds_single() {
        assert_eq!(
            encode_group_kinds(&[gk("", "ReplicationController")]),
            "ReplicationController"
        );
    }

    #[test]
    fn encode_group_kinds_sorts_bytewise_and_dedupes() {
        let gks = vec![
            gk("", "Secret"),
            gk("apps", "Deployment"),
            gk("", "ConfigMap"),
            gk("apps", "Deployment"),
            gk("", "DeploymentX"),
            gk("", "alpha"),
            gk("", "ConfigMap"),
        ];
        assert_eq!(
            encode_group_kinds(&gks),
            "ConfigMap,Deployment.apps,DeploymentX,Secret,alpha"
        );
    }

    #[test]
    fn encode_group_kinds_kubectl_examples() {
        assert_eq!(
            encode_group_kinds(&[gk("", "Service"), gk("", "ReplicationController")]),
            "ReplicationController,Service"
        );
        assert_eq!(
            encode_group_kinds(&[
                gk("", "Secret"),
                gk("apps", "Deployment"),
                gk("", "ConfigMap")
            ]),
            "ConfigMap,Deployment.apps,Secret"
        );
    }

    #[test]
    fn encode_group_kinds_dedupes_equal_displays() {
        assert_eq!(encode_group_kinds(&[gk("", "A.b"), gk("b", "A")]), "A.b");
    }

    #[test]
    fn parse_group_kinds_empty_is_empty_set() {
        assert_eq!(parse_group_kinds(""), Ok(BTreeSet::new()));
    }

    #[test]
    fn parse_group_kinds_values() {
        let set = parse_group_kinds("ConfigMap,Deployment.apps,Secret").unwrap();
        let expected: BTreeSet<GroupKind> = [
            gk("", "ConfigMap"),
            gk("apps", "Deployment"),
            gk("", "Secret"),
        ]
        .into_iter()
        .collect();
        assert_eq!(set, expected);
    }

    #[test]
    fn parse_group_kinds_dedupes_and_accepts_unsorted() {
        let set = parse_group_kinds("Secret,ConfigMap,Secret").unwrap();
        assert_eq!(set.len(), 2);
        assert_eq!(encode_group_kinds(&set), "ConfigMap,Secret");
    }

    #[test]
    fn parse_group_kinds_does_not_trim() {
        let set = parse_group_kinds("ConfigMap, Secret").unwrap();
        assert!(set.contains(&gk("", " Secret")));
        assert!(!set.contains(&gk("", "Secret")));
    }

    #[test]
    fn parse_group_kinds_rejects_empty_entries() {
        for (value, position) in [("a,,b", 2), ("a,", 2), (",a", 1), (",", 1)] {
            let err = parse_group_kinds(value).unwrap_err();
            assert_eq!(
                err,
                ConventionError::EmptyEntry {
                    annotation: ANNOTATION_CONTAINS_GROUP_KINDS,
                    value: value.to_owned(),
                    position,
                },
                "{value}"
            );
            let msg = err.to_string();
            assert!(msg.contains(ANNOTATION_CONTAINS_GROUP_KINDS), "{msg}");
            assert!(msg.contains("is empty"), "{msg}");
            assert!(msg.contains(&format!("{value:?}")), "{msg}");
        }
    }

    #[test]
    fn parse_group_kinds_rejects_empty_kind() {
        let err = parse_group_kinds("ConfigMap,.apps").unwrap_err();
        assert_eq!(
            err,
            ConventionError::InvalidEntry {
                annotation: ANNOTATION_CONTAINS_GROUP_KINDS,
                value: "ConfigMap,.apps".to_owned(),
                source: Box::new(ConventionError::EmptyKind {
                    value: ".apps".to_owned()
                }),
            }
        );
        let msg = err.to_string();
        assert!(msg.contains(ANNOTATION_CONTAINS_GROUP_KINDS), "{msg}");
        assert!(msg.contains("kind must not be empty"), "{msg}");
        assert!(std::error::Error::source(&err).is_some());
    }

    #[test]
    fn group_kinds_round_trip() {
        let gks: BTreeSet<GroupKind> = [
            gk("", "Namespace"),
            gk("apiextensions.k8s.io", "CustomResourceDefinition"),
            gk("rbac.authorization.k8s.io", "ClusterRole"),
            gk("apps", "Deployment"),
            gk("", "ConfigMap"),
        ]
        .into_iter()
        .collect();
        let encoded = encode_group_kinds(&gks);
        assert_eq!(
            encoded,
            "ClusterRole.rbac.authorization.k8s.io,ConfigMap,CustomResourceDefinition.apiextensions.k8s.io,Deployment.apps,Namespace"
        );
        assert_eq!(parse_group_kinds(&encoded), Ok(gks.clone()));
        // And the parsed set re-encodes identically.
        assert_eq!(
            encode_group_kinds(&parse_group_kinds(&encoded).unwrap()),
            encoded
        );
        // Empty set round-trips too.
        let empty: BTreeSet<GroupKind> = BTreeSet::new();
        assert_eq!(parse_group_kinds(&encode_group_kinds(&empty)), Ok(empty));
    }

    #[test]
    fn group_kind_set_iterates_in_annotation_order() {
        let set = parse_group_kinds("alpha,Secret,DeploymentX,Deployment.apps").unwrap();
        let order: Vec<String> = set.iter().map(ToString::to_string).collect();
        assert_eq!(order, ["Deployment.apps", "DeploymentX", "Secret", "alpha"]);
    }

    // ---- contains-group-resources (deprecated) ---------------------------------------

    #[test]
    fn parse_group_resources_values() {
        assert_eq!(parse_group_resources(""), Ok(BTreeSet::new()));
        let set = parse_group_resources("replicationcontrollers").unwrap();
        assert_eq!(
            set,
            [GroupResource::new("", "replicationcontrollers")]
                .into_iter()
                .collect()
        );
        let set = parse_group_resources(
            "certificates.cert-manager.io,configmaps,deployments.apps,configmaps",
        )
        .unwrap();
        let expected: BTreeSet<GroupResource> = [
            GroupResource::new("cert-manager.io", "certificates"),
            GroupResource::new("", "configmaps"),
            GroupResource::new("apps", "deployments"),
        ]
        .into_iter()
        .collect();
        assert_eq!(set, expected);
    }

    #[test]
    fn parse_group_resources_rejects_empty_entries_and_resources() {
        assert_eq!(
            parse_group_resources("configmaps,,secrets"),
            Err(ConventionError::EmptyEntry {
                annotation: ANNOTATION_CONTAINS_GROUP_RESOURCES,
                value: "configmaps,,secrets".to_owned(),
                position: 2,
            })
        );
        let err = parse_group_resources(".apps").unwrap_err();
        assert_eq!(
            err,
            ConventionError::InvalidEntry {
                annotation: ANNOTATION_CONTAINS_GROUP_RESOURCES,
                value: ".apps".to_owned(),
                source: Box::new(ConventionError::EmptyResource {
                    value: ".apps".to_owned()
                }),
            }
        );
        assert!(
            err.to_string()
                .contains(ANNOTATION_CONTAINS_GROUP_RESOURCES)
        );
    }
}

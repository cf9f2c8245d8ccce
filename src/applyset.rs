//! KEP-3659 ApplySet conventions, as kubectl implements them, written as pure functions.
//!
//! Nothing in this module performs I/O or talks to the API server. It covers:
//! - the label and annotation keys (`applyset.kubernetes.io/...`, the keys every shipping
//!   implementation uses, not the `applyset.k8s.io/...` spelling of the KEP text);
//! - the parent ID (`applyset-<base64url(sha256(name.namespace.Kind.group))>-v1`);
//! - encoding and parsing of the `contains-group-kinds` and `additional-namespaces`
//!   annotations, and parsing of the deprecated `contains-group-resources` annotation;
//! - the tooling value and its base-name comparison;
//! - the field managers used for members and for the parent;
//! - the ownership checks that protect parents and members from other tools and from
//!   overlapping ApplySets;
//! - the namespace (scope) rule for members.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest as _, Sha256};

/// Label on the parent holding its ApplySet ID.
pub const LABEL_ID: &str = "applyset.kubernetes.io/id";
/// Label on every member holding the ID of the ApplySet it belongs to.
pub const LABEL_PART_OF: &str = "applyset.kubernetes.io/part-of";
/// Annotation on the parent naming the tool that manages it (`<name>/<version>`).
pub const ANNOTATION_TOOLING: &str = "applyset.kubernetes.io/tooling";
/// Annotation on the parent listing the group/kinds of its members.
pub const ANNOTATION_CONTAINS_GROUP_KINDS: &str = "applyset.kubernetes.io/contains-group-kinds";
/// Annotation on the parent listing member namespaces other than the parent's own.
pub const ANNOTATION_ADDITIONAL_NAMESPACES: &str = "applyset.kubernetes.io/additional-namespaces";
/// Deprecated annotation listing group/resources; read only, never written.
pub const ANNOTATION_CONTAINS_GROUP_RESOURCES: &str =
    "applyset.kubernetes.io/contains-group-resources";
/// Label on a CRD marking its kind as an ApplySet parent type.
pub const LABEL_IS_PARENT_TYPE: &str = "applyset.kubernetes.io/is-parent-type";
/// Tool name written in the tooling annotation (before the `/<version>`).
pub const TOOLING_NAME: &str = "applyset-operator";
/// Field manager for the parent's labels and annotations.
pub const PARENT_FIELD_MANAGER: &str = "applyset.dev/parent";
/// Per-member annotation: with value [`PRUNE_DISABLED`] the member is never deleted.
pub const ANNOTATION_PRUNE: &str = "applyset.dev/prune";
/// Value of [`ANNOTATION_PRUNE`] that disables pruning.
pub const PRUNE_DISABLED: &str = "disabled";
/// Per-member annotation: with value [`FORCE_ENABLED`] the member may be re-created.
pub const ANNOTATION_FORCE: &str = "applyset.dev/force";
/// Value of [`ANNOTATION_FORCE`] that allows delete-and-recreate on immutable changes.
pub const FORCE_ENABLED: &str = "enabled";
/// Per-member annotation: with value [`ADOPT_ENABLED`] the member may take over an object
/// that exists without a `part-of` label.
pub const ANNOTATION_ADOPT: &str = "applyset.dev/adopt";
/// Value of [`ANNOTATION_ADOPT`] that allows adoption.
pub const ADOPT_ENABLED: &str = "enabled";
/// Annotation the operator puts on a Namespace or CRD a set adopted (its value names the
/// set): such an object is never deleted by the set.
pub const ANNOTATION_ADOPTED: &str = "applyset.dev/adopted";
/// Field manager of [`ANNOTATION_ADOPTED`] (not the member manager: applies of the member
/// leave it alone).
pub const ADOPTION_FIELD_MANAGER: &str = "applyset.dev/adoption";
/// Finalizer on ApplySets and ClusterApplySets.
pub const FINALIZER: &str = "applyset.dev/cleanup";
/// Annotation on a parent: a new value requests a reconcile now (like Flux's
/// `reconcile.fluxcd.io/requestedAt`), without a spec change.
pub const ANNOTATION_RECONCILE_REQUESTED_AT: &str = "applyset.dev/reconcile-requested-at";
/// API group of the ApplySet and ClusterApplySet kinds.
pub const GROUP: &str = "applyset.dev";

/// Maximum length of a field manager name accepted by the API server.
pub const MAX_FIELD_MANAGER_LEN: usize = 128;

const FIELD_MANAGER_PREFIX: &str = "applyset.dev";

/// A malformed value of an ApplySet convention (group/kind, group/resource, annotation).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConventionError {
    /// A group/kind string without a kind (`""` or `.apps`).
    #[error(
        "invalid group/kind {value:?}: the kind must not be empty (expected `Kind` for the core group or `Kind.group`)"
    )]
    EmptyKind {
        /// The offending value.
        value: String,
    },
    /// A group/resource string without a resource (`""` or `.apps`).
    #[error(
        "invalid group/resource {value:?}: the resource must not be empty (expected `resource` for the core group or `resource.group`)"
    )]
    EmptyResource {
        /// The offending value.
        value: String,
    },
    /// A comma-separated annotation with an empty entry (`a,,b`, `a,` or `,a`).
    #[error(
        "invalid annotation {annotation}={value:?}: entry {position} is empty; the value must be a comma-separated list without empty entries, or \"\" for none"
    )]
    EmptyEntry {
        /// The annotation key.
        annotation: &'static str,
        /// The whole annotation value.
        value: String,
        /// 1-based position of the empty entry.
        position: usize,
    },
    /// A comma-separated annotation with an entry that does not parse.
    #[error("invalid annotation {annotation}={value:?}: {source}")]
    InvalidEntry {
        /// The annotation key.
        annotation: &'static str,
        /// The whole annotation value.
        value: String,
        /// Why the entry is invalid.
        #[source]
        source: Box<ConventionError>,
    },
}

/// A refusal to touch a parent or a member because something else owns it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OwnershipError {
    /// The parent's tooling annotation names another tool.
    #[error(
        "the ApplySet parent is managed by tooling {tooling:?} (annotation {ANNOTATION_TOOLING}); this operator will not take it over; remove the annotation {ANNOTATION_TOOLING} from the parent if that tool no longer manages it"
    )]
    ForeignTooling {
        /// The live tooling value.
        tooling: String,
    },
    /// The parent's ID label does not match its computed ID.
    #[error(
        "the ApplySet parent has label {LABEL_ID}={found:?} but its ID is {expected:?}; refusing to act under another ApplySet's ID; remove the label {LABEL_ID} from the parent to repair it (the operator sets the correct value)"
    )]
    IdMismatch {
        /// The live label value.
        found: String,
        /// The computed ID.
        expected: String,
    },
}

/// A member whose namespace is wrong or cannot be determined.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScopeError {
    /// A cluster-scoped member declares a namespace.
    #[error(
        "{member} is cluster-scoped and must not set metadata.namespace (found {namespace:?}); remove metadata.namespace from the manifest"
    )]
    ClusterScopedWithNamespace {
        /// The member, as displayed in messages.
        member: String,
        /// The declared namespace.
        namespace: String,
    },
    /// A namespaced member has no namespace and the parent provides none.
    #[error(
        "{member} is namespaced but sets no metadata.namespace, and {parent} provides no namespace; set metadata.namespace in the manifest or spec.targetNamespace on {parent}"
    )]
    MissingNamespace {
        /// The member, as displayed in messages.
        member: String,
        /// The parent.
        parent: ParentRef,
    },
}

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

/// Whether a member is annotated `applyset.dev/prune: disabled`.
pub fn is_prune_disabled(annotations: Option<&BTreeMap<String, String>>) -> bool {
    annotations
        .and_then(|a| a.get(ANNOTATION_PRUNE))
        .is_some_and(|v| v == PRUNE_DISABLED)
}

/// Whether a member is annotated `applyset.dev/adopt: enabled`.
pub fn is_adopt_enabled(annotations: Option<&BTreeMap<String, String>>) -> bool {
    annotations
        .and_then(|a| a.get(ANNOTATION_ADOPT))
        .is_some_and(|v| v == ADOPT_ENABLED)
}

/// Whether a live object carries the operator's adoption mark.
pub fn is_adopted(annotations: Option<&BTreeMap<String, String>>) -> bool {
    annotations.is_some_and(|a| a.contains_key(ANNOTATION_ADOPTED))
}

/// Whether a member is annotated `applyset.dev/force: enabled`.
pub fn is_force_enabled(annotations: Option<&BTreeMap<String, String>>) -> bool {
    annotations
        .and_then(|a| a.get(ANNOTATION_FORCE))
        .is_some_and(|v| v == FORCE_ENABLED)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn gk(group: &str, kind: &str) -> GroupKind {
        GroupKind::new(group, kind)
    }

    // ---- constants -------------------------------------------------------------------

    #[test]
    fn constants_have_kubectl_and_spec_values() {
        assert_eq!(LABEL_ID, "applyset.kubernetes.io/id");
        assert_eq!(LABEL_PART_OF, "applyset.kubernetes.io/part-of");
        assert_eq!(ANNOTATION_TOOLING, "applyset.kubernetes.io/tooling");
        assert_eq!(
            ANNOTATION_CONTAINS_GROUP_KINDS,
            "applyset.kubernetes.io/contains-group-kinds"
        );
        assert_eq!(
            ANNOTATION_ADDITIONAL_NAMESPACES,
            "applyset.kubernetes.io/additional-namespaces"
        );
        assert_eq!(
            ANNOTATION_CONTAINS_GROUP_RESOURCES,
            "applyset.kubernetes.io/contains-group-resources"
        );
        assert_eq!(
            LABEL_IS_PARENT_TYPE,
            "applyset.kubernetes.io/is-parent-type"
        );
        assert_eq!(TOOLING_NAME, "applyset-operator");
        assert_eq!(PARENT_FIELD_MANAGER, "applyset.dev/parent");
        assert_eq!(ANNOTATION_PRUNE, "applyset.dev/prune");
        assert_eq!(PRUNE_DISABLED, "disabled");
        assert_eq!(ANNOTATION_FORCE, "applyset.dev/force");
        assert_eq!(FORCE_ENABLED, "enabled");
        assert_eq!(FINALIZER, "applyset.dev/cleanup");
        assert_eq!(GROUP, "applyset.dev");
        assert_eq!(MAX_FIELD_MANAGER_LEN, 128);
    }

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

    // ---- per-member annotations ------------------------------------------------------

    #[test]
    fn prune_disabled_annotation() {
        assert!(!is_prune_disabled(None));
        assert!(!is_prune_disabled(Some(&BTreeMap::new())));
        assert!(is_prune_disabled(Some(&labels(&[(
            ANNOTATION_PRUNE,
            "disabled"
        )]))));
        assert!(!is_prune_disabled(Some(&labels(&[(
            ANNOTATION_PRUNE,
            "enabled"
        )]))));
        assert!(!is_prune_disabled(Some(&labels(&[(
            ANNOTATION_PRUNE,
            "Disabled"
        )]))));
        assert!(!is_prune_disabled(Some(&labels(&[(ANNOTATION_PRUNE, "")]))));
        assert!(!is_prune_disabled(Some(&labels(&[(
            ANNOTATION_FORCE,
            "disabled"
        )]))));
    }

    #[test]
    fn force_enabled_annotation() {
        assert!(!is_force_enabled(None));
        assert!(!is_force_enabled(Some(&BTreeMap::new())));
        assert!(is_force_enabled(Some(&labels(&[(
            ANNOTATION_FORCE,
            "enabled"
        )]))));
        assert!(!is_force_enabled(Some(&labels(&[(
            ANNOTATION_FORCE,
            "true"
        )]))));
        assert!(!is_force_enabled(Some(&labels(&[(
            ANNOTATION_FORCE,
            "Enabled"
        )]))));
        assert!(!is_force_enabled(Some(&labels(&[(
            ANNOTATION_PRUNE,
            "enabled"
        )]))));
    }
}

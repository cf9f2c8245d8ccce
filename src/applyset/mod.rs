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
//!
//! Files: this one (the keys, the errors, the per-member annotations), `parents` (the ID, the
//! tooling value, parent references, field managers, ownership checks), `group_kinds`
//! (group-kinds and their annotations), `namespaces` (the namespace annotation and rules);
//! tests beside each.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest as _, Sha256};

pub mod controls;
pub mod field_managers;
mod group_kinds;
mod namespaces;
mod parents;

pub use group_kinds::{
    GroupKind, GroupResource, encode_group_kinds, parse_group_kinds, parse_group_resources,
};
pub use namespaces::{encode_namespaces, member_namespace, parse_namespaces, prune_namespaces};
pub use parents::{
    ParentKind, ParentRef, applyset_id, check_parent_id, check_parent_tooling, tooling_base_name,
    tooling_value,
};

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
/// Per-member annotation: with value [`PRUNE_DISABLED`] the member is never deleted (read
/// by [`controls::Marks`], with Flux's prefix, as a label too, in any case).
pub const ANNOTATION_PRUNE: &str = "applyset.dev/prune";
/// Value of [`ANNOTATION_PRUNE`] that disables pruning.
pub const PRUNE_DISABLED: &str = "disabled";
/// Per-member annotation: with value [`FORCE_ENABLED`] the member may be re-created (read
/// by [`controls::Marks`] as [`ANNOTATION_PRUNE`] is).
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

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    pub(super) fn gk(group: &str, kind: &str) -> GroupKind {
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

    // ---- per-member annotations ------------------------------------------------------

    #[test]
    fn the_old_annotations_are_read_as_controls() {
        // What `applyset.dev/prune` and `applyset.dev/force` meant before is a subset of
        // what the controls read (which also take labels, Flux's prefix and any case).
        use super::controls::Marks;
        let prune = labels(&[(ANNOTATION_PRUNE, PRUNE_DISABLED)]);
        let force = labels(&[(ANNOTATION_FORCE, FORCE_ENABLED)]);
        assert!(Marks::of(None, Some(&prune)).prune_disabled);
        assert!(Marks::of(None, Some(&force)).force_enabled);
        assert!(!Marks::of(None, Some(&labels(&[(ANNOTATION_PRUNE, "")]))).any());
        assert!(!Marks::of(None, Some(&labels(&[(ANNOTATION_FORCE, "true")]))).any());
        assert!(!Marks::of(None, Some(&labels(&[(ANNOTATION_FORCE, "disabled")]))).any());
    }
}

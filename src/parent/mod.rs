//! The parent: the ApplySet or ClusterApplySet object itself, carrying the KEP-3659 parent
//! label and annotations. Its metadata is written with server-side apply under the manager
//! [`PARENT_FIELD_MANAGER`], and only when it differs, so a user's or GitOps tool's apply of
//! the object never fights the operator. Either kind as one value: [`AnyParent`].

use std::{
    collections::{BTreeMap, BTreeSet},
    fmt::Debug,
};

use kube::{
    Api, Client, Resource, ResourceExt,
    api::{ObjectMeta, Patch, PatchParams},
};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::json;

mod any;

pub use any::AnyParent;

use crate::{
    Error, Result,
    api::{ApplySet, ApplySetSpec, ApplySetStatus, ClusterApplySet},
    applyset::{
        self, ANNOTATION_ADDITIONAL_NAMESPACES, ANNOTATION_CONTAINS_GROUP_KINDS,
        ANNOTATION_CONTAINS_GROUP_RESOURCES, ANNOTATION_TOOLING, ConventionError, FINALIZER,
        GroupKind, LABEL_ID, OwnershipError, PARENT_FIELD_MANAGER, ParentKind, ParentRef,
    },
    discovery::Resolver,
};

/// The operator's tooling value, `applyset-operator/v<version>`.
pub fn tooling() -> String {
    applyset::tooling_value(concat!("v", env!("CARGO_PKG_VERSION")))
}

/// What both parent kinds have in common.
pub trait Parent:
    Resource<DynamicType = ()> + Clone + Debug + Serialize + DeserializeOwned + Send + Sync + 'static
{
    const KIND: ParentKind;
    fn spec(&self) -> &ApplySetSpec;
    fn status(&self) -> Option<&ApplySetStatus>;
    /// The API for objects of this kind in the object's scope.
    fn api(client: Client, namespace: Option<&str>) -> Api<Self>;
    /// The object as a parent of either kind.
    fn into_any(self: std::sync::Arc<Self>) -> AnyParent;

    fn parent_ref(&self) -> ParentRef {
        ParentRef {
            kind: Self::KIND,
            name: self.name_any(),
            namespace: match Self::KIND {
                ParentKind::ApplySet => self.namespace(),
                ParentKind::ClusterApplySet => None,
            },
        }
    }
}

impl Parent for ApplySet {
    const KIND: ParentKind = ParentKind::ApplySet;
    fn spec(&self) -> &ApplySetSpec {
        &self.spec
    }
    fn status(&self) -> Option<&ApplySetStatus> {
        self.status.as_ref()
    }
    fn api(client: Client, namespace: Option<&str>) -> Api<Self> {
        match namespace {
            Some(ns) => Api::namespaced(client, ns),
            None => Api::all(client),
        }
    }
    fn into_any(self: std::sync::Arc<Self>) -> AnyParent {
        AnyParent::ApplySet(self)
    }
}

impl Parent for ClusterApplySet {
    const KIND: ParentKind = ParentKind::ClusterApplySet;
    fn spec(&self) -> &ApplySetSpec {
        &self.spec.0
    }
    fn status(&self) -> Option<&ApplySetStatus> {
        self.status.as_ref()
    }
    fn api(client: Client, _namespace: Option<&str>) -> Api<Self> {
        Api::all(client)
    }
    fn into_any(self: std::sync::Arc<Self>) -> AnyParent {
        AnyParent::ClusterApplySet(self)
    }
}

/// Refuses a parent that belongs to another tool or carries another parent's ID.
pub fn check_ownership(meta: &ObjectMeta, parent: &ParentRef) -> Result<(), OwnershipError> {
    let annotation = |k: &str| {
        meta.annotations
            .as_ref()
            .and_then(|a| a.get(k))
            .map(String::as_str)
    };
    let label = |k: &str| {
        meta.labels
            .as_ref()
            .and_then(|l| l.get(k))
            .map(String::as_str)
    };
    applyset::check_parent_tooling(annotation(ANNOTATION_TOOLING))?;
    applyset::check_parent_id(label(LABEL_ID), &parent.id())?;
    Ok(())
}

/// The set a parent records: kinds and the namespaces other than its own.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recorded {
    pub group_kinds: BTreeSet<GroupKind>,
    pub namespaces: BTreeSet<String>,
}

impl Recorded {
    pub fn union(&self, other: &Recorded) -> Recorded {
        Recorded {
            group_kinds: self
                .group_kinds
                .union(&other.group_kinds)
                .cloned()
                .collect(),
            namespaces: self.namespaces.union(&other.namespaces).cloned().collect(),
        }
    }
}

/// The kinds and namespaces of the members the last complete reconcile applied
/// (`status.members`, as far as it lists them).
pub fn last_applied(status: Option<&ApplySetStatus>) -> Recorded {
    let members = status.map(|s| s.members.as_slice()).unwrap_or_default();
    Recorded {
        group_kinds: members
            .iter()
            .map(|m| GroupKind::new(m.group.clone(), m.kind.clone()))
            .collect(),
        namespaces: members.iter().filter_map(|m| m.namespace.clone()).collect(),
    }
}

/// What `last` (the last applied set) has that `recorded` (the annotations) lacks: kinds, and
/// namespaces other than the parent's own (which the annotations never list). Not empty only
/// when the annotations were replaced or edited since.
pub fn unrecorded(
    recorded: &Recorded,
    last: &Recorded,
    parent_namespace: Option<&str>,
) -> Recorded {
    Recorded {
        group_kinds: last
            .group_kinds
            .difference(&recorded.group_kinds)
            .cloned()
            .collect(),
        namespaces: last
            .namespaces
            .iter()
            .filter(|ns| {
                Some(ns.as_str()) != parent_namespace && !recorded.namespaces.contains(*ns)
            })
            .cloned()
            .collect(),
    }
}

impl Recorded {
    pub fn is_empty(&self) -> bool {
        self.group_kinds.is_empty() && self.namespaces.is_empty()
    }
}

/// Reads the recorded set from the live parent. Kinds of the deprecated
/// `contains-group-resources` annotation are mapped through discovery; entries that no longer
/// resolve (their CRD is gone) are skipped.
pub async fn recorded(
    meta: &ObjectMeta,
    resolver: &Resolver,
) -> Result<Result<Recorded, ConventionError>> {
    let annotations = meta.annotations.clone().unwrap_or_default();
    let mut group_kinds = match annotations.get(ANNOTATION_CONTAINS_GROUP_KINDS) {
        Some(v) => match applyset::parse_group_kinds(v) {
            Ok(gks) => gks,
            Err(e) => return Ok(Err(e)),
        },
        None => BTreeSet::new(),
    };
    if let Some(v) = annotations.get(ANNOTATION_CONTAINS_GROUP_RESOURCES) {
        let grs = match applyset::parse_group_resources(v) {
            Ok(grs) => grs,
            Err(e) => return Ok(Err(e)),
        };
        for gr in grs {
            if let Some((gk, _)) = resolver
                .resolve_group_resource(&gr.group, &gr.resource)
                .await?
            {
                group_kinds.insert(gk);
            }
        }
    }
    let namespaces = annotations
        .get(ANNOTATION_ADDITIONAL_NAMESPACES)
        .map(|v| applyset::parse_namespaces(v))
        .unwrap_or_default();
    Ok(Ok(Recorded {
        group_kinds,
        namespaces,
    }))
}

/// The parent metadata for `set`, as label and annotation maps.
fn desired_metadata(
    parent: &ParentRef,
    set: &Recorded,
) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    let labels = BTreeMap::from([(LABEL_ID.to_string(), parent.id())]);
    let annotations = BTreeMap::from([
        (ANNOTATION_TOOLING.to_string(), tooling()),
        (
            ANNOTATION_CONTAINS_GROUP_KINDS.to_string(),
            applyset::encode_group_kinds(&set.group_kinds),
        ),
        (
            ANNOTATION_ADDITIONAL_NAMESPACES.to_string(),
            applyset::encode_namespaces(
                set.namespaces.iter().map(String::as_str),
                parent.namespace.as_deref(),
            ),
        ),
    ]);
    (labels, annotations)
}

/// Whether a parent write keeps the deprecated `contains-group-resources` annotation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shrink {
    /// Keep it (the superset before an apply).
    Keep,
    /// Remove it (after a complete reconcile, when the new annotation alone describes the
    /// set).
    DropDeprecated,
}

/// Under `--shards auto`: the owner annotations the parent's metadata carries with every
/// write (so that our field manager keeps them), and the resourceVersion the write is
/// conditional on (see `shard::fence`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ownership {
    pub annotations: BTreeMap<String, String>,
    pub if_version: Option<String>,
}

/// Writes the parent's id label, annotations for `set` (and `ownership`'s) and finalizer
/// unless the live object already has exactly them; `shrink` says whether
/// `contains-group-resources` goes. Returns the parent as the server stored it (`obj` itself
/// when nothing needed writing). A write whose resourceVersion is not the parent's any more
/// fails with 409.
pub async fn write<P: Parent>(
    client: &Client,
    obj: &P,
    set: &Recorded,
    shrink: Shrink,
    ownership: &Ownership,
) -> Result<P> {
    let parent = obj.parent_ref();
    let (labels, mut annotations) = desired_metadata(&parent, set);
    annotations.extend(ownership.annotations.clone());
    let meta = obj.meta();
    let same = has_metadata(meta, &labels, &annotations);
    let deprecated = shrink == Shrink::DropDeprecated
        && meta
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(ANNOTATION_CONTAINS_GROUP_RESOURCES));
    let name = meta.name.clone().ok_or(Error::Unnamed("parent"))?;
    let api = P::api(client.clone(), parent.namespace.as_deref());
    let mut stored = None;
    if !same {
        let mut body = json!({
            "apiVersion": P::api_version(&()),
            "kind": P::kind(&()),
            // The finalizer too (`finalizers` is a set: others' entries stay): every member
            // write comes after this one, so the cleanup on deletion is in place before.
            "metadata": {"name": name, "labels": labels, "annotations": annotations,
                "finalizers": [FINALIZER]},
        });
        if let Some(rv) = &ownership.if_version {
            body["metadata"]["resourceVersion"] = json!(rv);
        }
        // The body is built here, with no unknown or duplicate field to report: Ignore spares
        // the server a second, strict parse of it (field validation defaults to Warn).
        let params = PatchParams::apply(PARENT_FIELD_MANAGER)
            .force()
            .validation_ignore();
        stored = Some(api.patch(&name, &params, &Patch::Apply(body)).await?);
    }
    if deprecated {
        let body =
            json!({"metadata": {"annotations": {ANNOTATION_CONTAINS_GROUP_RESOURCES: null}}});
        stored = Some(
            api.patch(&name, &PatchParams::default(), &Patch::Merge(body))
                .await?,
        );
    }
    Ok(stored.unwrap_or_else(|| obj.clone()))
}

/// Whether `meta` carries every one of `labels` and `annotations` and our finalizer.
fn has_metadata(
    meta: &ObjectMeta,
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
) -> bool {
    let contains = |live: &Option<BTreeMap<String, String>>, want: &BTreeMap<String, String>| {
        want.iter()
            .all(|(k, v)| live.as_ref().and_then(|l| l.get(k)) == Some(v))
    };
    contains(&meta.labels, labels)
        && contains(&meta.annotations, annotations)
        && meta.finalizers.iter().flatten().any(|f| f == FINALIZER)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::MemberRef;

    fn member(kind: &str, namespace: Option<&str>) -> MemberRef {
        MemberRef {
            group: String::new(),
            kind: kind.into(),
            namespace: namespace.map(str::to_string),
            name: "x".into(),
        }
    }

    fn recorded(kinds: &[&str], namespaces: &[&str]) -> Recorded {
        Recorded {
            group_kinds: kinds.iter().map(|k| GroupKind::new("", *k)).collect(),
            namespaces: namespaces.iter().map(|n| n.to_string()).collect(),
        }
    }

    #[test]
    fn the_last_applied_set_comes_from_status_members() {
        let status = ApplySetStatus {
            members: vec![
                member("ConfigMap", Some("team")),
                member("Secret", Some("other")),
                member("Namespace", None),
            ],
            ..ApplySetStatus::default()
        };
        assert_eq!(
            last_applied(Some(&status)),
            recorded(&["ConfigMap", "Namespace", "Secret"], &["other", "team"])
        );
        assert!(last_applied(None).is_empty());
    }

    #[test]
    fn unrecorded_ignores_the_parents_own_namespace() {
        let last = recorded(&["ConfigMap", "Secret"], &["team", "other"]);
        let annotations = recorded(&["ConfigMap", "Secret"], &["other"]);
        assert!(unrecorded(&annotations, &last, Some("team")).is_empty());
        // Wiped annotations: every kind and the other namespace are missing.
        assert_eq!(
            unrecorded(&Recorded::default(), &last, Some("team")),
            recorded(&["ConfigMap", "Secret"], &["other"])
        );
        // A cluster-scoped parent has no namespace of its own.
        assert_eq!(
            unrecorded(&annotations, &last, None),
            recorded(&[], &["team"])
        );
        // More recorded than last applied (a superset after a failure) is fine.
        assert!(
            unrecorded(
                &recorded(&["ConfigMap", "Secret", "Service"], &["other", "x"]),
                &last,
                Some("team")
            )
            .is_empty()
        );
    }

    #[test]
    fn metadata_is_written_only_when_something_is_missing() {
        let parent = ParentRef::applyset("team", "web");
        let set = recorded(&["ConfigMap"], &[]);
        let (labels, annotations) = desired_metadata(&parent, &set);
        let mut meta = ObjectMeta {
            labels: Some(labels.clone()),
            annotations: Some(annotations.clone()),
            finalizers: Some(vec![FINALIZER.into(), "other/finalizer".into()]),
            ..ObjectMeta::default()
        };
        assert!(has_metadata(&meta, &labels, &annotations));
        // Extra labels and annotations of others do not matter.
        meta.labels
            .get_or_insert_with(Default::default)
            .insert("app".into(), "web".into());
        assert!(has_metadata(&meta, &labels, &annotations));
        // A missing finalizer, a changed annotation or a missing label do.
        let mut no_finalizer = meta.clone();
        no_finalizer.finalizers = Some(vec!["other/finalizer".into()]);
        assert!(!has_metadata(&no_finalizer, &labels, &annotations));
        let (_, other) = desired_metadata(&parent, &recorded(&["ConfigMap", "Secret"], &[]));
        assert!(!has_metadata(&meta, &labels, &other));
        let mut no_label = meta.clone();
        no_label.labels = None;
        assert!(!has_metadata(&no_label, &labels, &annotations));
    }
}

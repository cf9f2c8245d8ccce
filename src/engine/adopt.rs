//! Adoption: which declared members already exist but are not the set's own — no `part-of`
//! label, or this set's label copied by someone else (not owned by our member field
//! manager): someone else's objects, which a set takes over only when allowed — learnt with
//! few reads. Members known to be the set's own are not looked at; the others are read
//! metadata only: one LIST per kind and namespace where several share one, else one GET
//! each. (An object labelled by another set is left to the apply, which refuses it.) The
//! same read gives each existing object's per-object controls (see
//! [`crate::applyset::controls`]), so that `ssa: IfNotPresent` skips an object that exists
//! unlabelled instead of refusing it (or, when adoption is allowed, adopts it by its
//! metadata only: `engine::apply::if_not_present`), at no extra request.

use std::collections::{BTreeMap, HashMap, HashSet};

use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
use kube::{
    Api,
    api::{ListParams, ObjectMeta, Patch, PatchParams},
    core::{DynamicObject, PartialObjectMeta},
};
use serde_json::json;

use super::{SetScope, live::label_owned_by};
use crate::{
    Error, Result,
    api::MemberRef,
    applyset::{
        ADOPTION_FIELD_MANAGER, ANNOTATION_ADOPTED, LABEL_PART_OF,
        controls::Marks,
        field_managers::{self, APPLY, UPDATE, without_labels},
    },
    kind_order,
    render::Member,
};

/// From this many members of one kind in one namespace on, one LIST reads them all.
const LIST_FROM: usize = 4;

/// What the look found.
#[derive(Debug, Default)]
pub struct Lookup {
    /// Members that exist and are not the set's own (no `part-of` label, or ours copied).
    pub unlabelled: HashSet<MemberRef>,
    /// Members that could not be looked at (the read was forbidden), with why: they are not
    /// applied (in doubt, nothing is changed).
    pub unknown: HashMap<MemberRef, String>,
    /// Of the unlabelled members, those whose fields only their makers own (see
    /// [`made_by_makers`]): adopting one takes the declared fields over from them.
    pub handover: HashSet<MemberRef>,
    /// Every looked-at member that exists (whoever's it is), with its per-object controls
    /// (see [`crate::applyset::controls`]): `ssa: IfNotPresent` on the manifest skips it, as
    /// does `ssa: Ignore` or `reconcile: disabled` on it.
    pub existing: HashMap<MemberRef, Marks>,
    /// Of the unlabelled members, who holds each (see [`Holders`]): what decides whether
    /// `ssa: IfNotPresent` adopts it.
    pub holders: HashMap<MemberRef, Holders>,
}

/// Who holds an existing object that is not the set's own, as its metadata shows (read by
/// the look, no request of its own).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Holders {
    /// The managers of its Apply and Update entries of the main resource (no subresource).
    pub managers: Vec<String>,
    /// It carries one of Flux's owner labels (`kustomize.toolkit.fluxcd.io/name`,
    /// `/namespace`).
    pub flux_labelled: bool,
    /// The set's own member manager has an Apply entry owning more than the `part-of` label:
    /// an apply of the label alone would release (and so remove) the rest.
    pub ours_beyond_label: bool,
}

impl Holders {
    /// What `meta` shows, for the set whose member manager is `ours`.
    pub fn of(meta: &ObjectMeta, ours: &str) -> Self {
        let entries = meta.managed_fields.iter().flatten();
        let main = |e: &&ManagedFieldsEntry| e.subresource.as_deref().is_none_or(str::is_empty);
        let managers = entries
            .clone()
            .filter(main)
            .filter(|e| matches!(e.operation.as_deref(), Some(APPLY | UPDATE)))
            .filter_map(|e| e.manager.clone())
            .collect();
        let ours_apply: Vec<ManagedFieldsEntry> = entries
            .filter(main)
            .filter(|e| e.manager.as_deref() == Some(ours) && e.operation.as_deref() == Some(APPLY))
            .cloned()
            .collect();
        Self {
            managers,
            flux_labelled: field_managers::flux_labelled(meta),
            ours_beyond_label: !without_labels(ours_apply, &[LABEL_PART_OF]).is_empty(),
        }
    }
}

/// The field managers that make objects imperatively (each with operation `Update`):
/// `kubectl create`, `kubectl apply` without `--server-side`, `kubectl replace`, `edit`,
/// `patch`, `label`, `annotate`, `set`, older kubectl (`kubectl`), and `before-first-apply`
/// (the server's name for fields set before any manager was recorded).
pub const MAKERS: [&str; 10] = [
    "kubectl-create",
    "kubectl-client-side-apply",
    "kubectl-replace",
    "kubectl-edit",
    "kubectl-patch",
    "kubectl-label",
    "kubectl-annotate",
    "kubectl-set",
    "kubectl",
    "before-first-apply",
];

/// Whether every field of the object's main resource is owned by its makers ([`MAKERS`],
/// with operation `Update`) or by `ours`: then the set that adopts it takes the fields it
/// declares over from them (a forced apply, once), as Flux and Helm take over what kubectl
/// made. Fields it does not declare stay theirs. Owners of subresources (a controller's
/// status, an HPA's scale) do not count: a forced apply of the main resource leaves them.
/// Any other owner (another tool's server-side apply, a controller) keeps its conflicts
/// reported.
fn made_by_makers(meta: &ObjectMeta, ours: &str) -> bool {
    meta.managed_fields.iter().flatten().all(|e| {
        let manager = e.manager.as_deref().unwrap_or_default();
        let subresource = e.subresource.as_deref().unwrap_or_default();
        !subresource.is_empty()
            || manager == ours
            || (e.operation.as_deref() == Some("Update") && MAKERS.contains(&manager))
    })
}

/// Looks at the members not known to be the set's own (`owned`, which need no look).
pub async fn unlabelled(
    scope: &SetScope,
    members: &[Member],
    owned: &HashSet<MemberRef>,
) -> Result<Lookup> {
    // Indices, not references, keep the futures free of higher-ranked lifetimes.
    let mut groups: BTreeMap<(String, Option<String>), Vec<usize>> = BTreeMap::new();
    for (i, m) in members.iter().enumerate() {
        if owned.contains(&m.reference) {
            continue;
        }
        let key = (
            format!("{}/{}", m.resource.api_version, m.resource.plural),
            m.reference.namespace.clone(),
        );
        groups.entry(key).or_default().push(i);
    }
    let groups: Vec<Vec<usize>> = groups.into_values().collect();
    let found: Vec<Lookup> = stream::iter(0..groups.len())
        .map(|g| {
            let group: Vec<&Member> = groups[g].iter().map(|&i| &members[i]).collect();
            async move { unlabelled_in(scope, &group).await }
        })
        .buffer_unordered(scope.concurrency)
        .try_collect()
        .await?;
    let mut out = Lookup::default();
    for l in found {
        out.unlabelled.extend(l.unlabelled);
        out.unknown.extend(l.unknown);
        out.handover.extend(l.handover);
        out.existing.extend(l.existing);
        out.holders.extend(l.holders);
    }
    Ok(out)
}

/// The unlabelled members of one group (one kind, one namespace).
async fn unlabelled_in(scope: &SetScope, group: &[&Member]) -> Result<Lookup> {
    let mut out = Lookup::default();
    let Some(first) = group.first() else {
        return Ok(out);
    };
    let api = metadata_api(scope, first);
    if group.len() >= LIST_FROM {
        match list_names(scope, &api).await {
            Ok(foreign) => {
                for m in group {
                    let Some((found, marks)) = foreign.get(&m.reference.name) else {
                        continue;
                    };
                    out.existing.insert(m.reference.clone(), *marks);
                    if let Found::Foreign {
                        made_by_makers,
                        holders,
                    } = found
                    {
                        out.unlabelled.insert(m.reference.clone());
                        out.holders.insert(m.reference.clone(), holders.clone());
                        if *made_by_makers {
                            out.handover.insert(m.reference.clone());
                        }
                    }
                }
            }
            Err(kube::Error::Api(s)) if s.is_forbidden() => {
                for m in group {
                    let why = forbidden(scope, "list", &m.reference, &s.message);
                    out.unknown.insert(m.reference.clone(), why);
                }
            }
            Err(e) => return Err(e.into()),
        }
        return Ok(out);
    }
    for m in group {
        match api.get_metadata_opt(&m.reference.name).await {
            Ok(Some(o)) => {
                let marks = Marks::of_meta(&o.metadata);
                out.existing.insert(m.reference.clone(), marks);
                if foreign(scope, &o.metadata) {
                    out.unlabelled.insert(m.reference.clone());
                    let holders = Holders::of(&o.metadata, &scope.manager);
                    out.holders.insert(m.reference.clone(), holders);
                    if made_by_makers(&o.metadata, &scope.manager) {
                        out.handover.insert(m.reference.clone());
                    }
                }
            }
            Ok(None) => {}
            // The kind is not served yet (its CRD is in this set): nothing exists.
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(kube::Error::Api(s)) if s.is_forbidden() => {
                let why = forbidden(scope, "get", &m.reference, &s.message);
                out.unknown.insert(m.reference.clone(), why);
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(out)
}

/// Whether an existing object is someone else's in the sense of adoption: no `part-of`
/// label, or this set's label not owned by our member field manager (copied).
fn foreign(scope: &SetScope, meta: &ObjectMeta) -> bool {
    match meta.labels.as_ref().and_then(|l| l.get(LABEL_PART_OF)) {
        None => true,
        Some(id) if *id == scope.id => !label_owned_by(meta, &scope.manager),
        Some(_) => false,
    }
}

/// What a listing says of an existing object.
enum Found {
    /// Not someone else's in the sense of adoption.
    Ours,
    /// [`foreign`], whether only its makers own its fields ([`made_by_makers`]), and who
    /// holds it.
    Foreign {
        made_by_makers: bool,
        holders: Holders,
    },
}

/// Names of the objects of a kind in a namespace (the scope of `api`), each with whether it
/// is [`foreign`] and its per-object controls; none when the kind is not served (yet).
async fn list_names(
    scope: &SetScope,
    api: &Api<PartialObjectMeta<DynamicObject>>,
) -> kube::Result<HashMap<String, (Found, Marks)>> {
    let mut out = HashMap::new();
    let mut params = ListParams::default().limit(500);
    loop {
        let page = match api.list_metadata(&params).await {
            Ok(p) => p,
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(out),
            Err(e) => return Err(e),
        };
        for o in page.items {
            let found = match foreign(scope, &o.metadata) {
                true => Found::Foreign {
                    made_by_makers: made_by_makers(&o.metadata, &scope.manager),
                    holders: Holders::of(&o.metadata, &scope.manager),
                },
                false => Found::Ours,
            };
            let marks = Marks::of_meta(&o.metadata);
            out.insert(o.metadata.name.unwrap_or_default(), (found, marks));
        }
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => return Ok(out),
        }
    }
}

fn metadata_api(scope: &SetScope, m: &Member) -> Api<PartialObjectMeta<DynamicObject>> {
    crate::discovery::api_in(&scope.client, m.reference.namespace.as_deref(), &m.resource)
}

/// Why a member could not be looked at: the forbidden read, by whom.
fn forbidden(scope: &SetScope, verb: &str, member: &MemberRef, message: &str) -> String {
    Error::Forbidden {
        who: scope.identity.to_string(),
        what: format!("{verb} {member} (to know whether it already exists)"),
        message: message.to_string(),
    }
    .to_string()
}

/// Whether an adopted member must carry the adoption mark: Namespaces and CRDs, which the
/// set then never deletes (their deletion would take what others put in them).
pub(super) fn needs_mark(member: &MemberRef) -> bool {
    kind_order::is_namespace(&member.group, &member.kind)
        || kind_order::is_crd(&member.group, &member.kind)
}

/// Puts the adoption mark on an adopted member through `api` (the member's), under a field
/// manager of its own (so the member's own applies leave it).
pub async fn mark(api: &Api<DynamicObject>, scope: &SetScope, member: &Member) -> Result<()> {
    let body = json!({
        "apiVersion": member.resource.api_version,
        "kind": member.resource.kind,
        "metadata": {"name": member.reference.name,
            "annotations": {ANNOTATION_ADOPTED: scope.parent.to_string()}},
    });
    api.patch(
        &member.reference.name,
        &PatchParams::apply(ADOPTION_FIELD_MANAGER),
        &Patch::Apply(body),
    )
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(group: &str, kind: &str) -> MemberRef {
        MemberRef {
            group: group.into(),
            kind: kind.into(),
            namespace: None,
            name: "x".into(),
        }
    }

    fn managed(entries: &[(&str, &str, &str)]) -> ObjectMeta {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
        ObjectMeta {
            managed_fields: Some(
                entries
                    .iter()
                    .map(|(m, op, sub)| ManagedFieldsEntry {
                        manager: Some(m.to_string()),
                        operation: Some(op.to_string()),
                        subresource: (!sub.is_empty()).then(|| sub.to_string()),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        }
    }

    #[test]
    fn only_objects_made_by_their_makers_are_handed_over() {
        let ours = "applyset.dev/ns/a/b";
        assert!(made_by_makers(
            &managed(&[("kubectl-create", "Update", "")]),
            ours
        ));
        assert!(made_by_makers(
            &managed(&[
                ("kubectl-client-side-apply", "Update", ""),
                ("before-first-apply", "Update", ""),
                (ours, "Apply", ""),
                // A controller's status and an HPA's scale are subresources: left to them.
                ("kube-controller-manager", "Update", "status"),
                ("kube-controller-manager", "Update", "scale"),
            ]),
            ours
        ));
        // Another tool's server-side apply, or a controller writing the main resource, keeps
        // its conflicts reported.
        assert!(!made_by_makers(
            &managed(&[("kubectl-create", "Update", ""), ("argocd", "Apply", "")]),
            ours
        ));
        assert!(!made_by_makers(&managed(&[("kubectl", "Apply", "")]), ours));
        assert!(!made_by_makers(
            &managed(&[("operator-x", "Update", "")]),
            ours
        ));
    }

    #[test]
    fn only_namespaces_and_crds_are_marked() {
        assert!(needs_mark(&member("", "Namespace")));
        assert!(needs_mark(&member(
            "apiextensions.k8s.io",
            "CustomResourceDefinition"
        )));
        assert!(!needs_mark(&member("", "ConfigMap")));
        assert!(!needs_mark(&member(
            "rbac.authorization.k8s.io",
            "ClusterRole"
        )));
    }
}

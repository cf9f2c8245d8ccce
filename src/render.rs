//! Render: the desired set of a parent. Every producer of manifests (inline `spec.manifests`
//! and each of `spec.sources`) yields [`Manifest`]s, already validated one by one; render
//! validates them together (duplicates), resolves each kind to the API resource the server
//! serves, applies the namespace rules, and orders the members in stages. Any failure stops
//! the reconcile before anything is written.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use kube::discovery::ApiResource;
use serde_json::Value;

use crate::{
    Result,
    api::{ApplySetSpec, InlineManifest, MemberRef},
    applyset::{self, GroupKind, ParentRef, ScopeError},
    discovery::{Resolved, Resolver},
    kinds::{self, Stage},
    manifest::{self, Manifest, ManifestError, MemberKey, Origin},
};

/// A declared object, resolved and ready to apply.
#[derive(Clone, Debug)]
pub struct Member {
    pub origin: Origin,
    /// The object to apply: normalized, namespace set, `part-of` not yet injected.
    pub object: serde_json::Map<String, Value>,
    pub resource: ApiResource,
    pub namespaced: bool,
    pub reference: MemberRef,
    pub stage: Stage,
    /// `applyset.dev/force: enabled`: may be deleted and re-created on an immutable change.
    pub force_recreate: bool,
    /// `applyset.dev/adopt: enabled`: may take over an object that exists unlabelled.
    pub adopt: bool,
    /// Decrypted values withheld from messages about this member (`None`: not decrypted).
    pub redaction: Option<std::sync::Arc<crate::sops::redact::Redaction>>,
}

impl Member {
    /// `message` without the decrypted values of this member (an API server's message may
    /// echo them).
    pub fn redact(&self, message: String) -> String {
        match &self.redaction {
            Some(r) if !r.is_empty() => r.apply(&message),
            _ => message,
        }
    }

    pub fn group_kind(&self) -> GroupKind {
        GroupKind::new(self.reference.group.clone(), self.reference.kind.clone())
    }
}

/// The rendered desired set.
#[derive(Clone, Debug, Default)]
pub struct DesiredSet {
    pub members: Vec<Member>,
    /// Digest of the rendered set (status.lastAttemptedRevision / lastAppliedRevision).
    pub revision: String,
}

impl DesiredSet {
    pub fn group_kinds(&self) -> BTreeSet<GroupKind> {
        self.members.iter().map(Member::group_kind).collect()
    }
    pub fn namespaces(&self) -> BTreeSet<String> {
        self.members
            .iter()
            .filter_map(|m| m.reference.namespace.clone())
            .collect()
    }
    /// How each kind of the set resolved.
    pub fn resolutions(&self) -> std::collections::HashMap<GroupKind, Resolved> {
        self.members
            .iter()
            .map(|m| {
                let r = Resolved {
                    resource: m.resource.clone(),
                    namespaced: m.namespaced,
                };
                (m.group_kind(), r)
            })
            .collect()
    }
    /// The declared members and their resources (what prune must keep).
    pub fn declared(&self) -> std::collections::HashMap<MemberRef, ApiResource> {
        self.members
            .iter()
            .map(|m| (m.reference.clone(), m.resource.clone()))
            .collect()
    }
}

/// Why a desired set could not be rendered. Only a change of the spec (or the cluster's
/// served kinds) fixes it.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    #[error(transparent)]
    Scope(#[from] ScopeError),
    #[error(
        "{origin}: {kind} {name}: the cluster serves no kind {kind} in {api_version}; install its CustomResourceDefinition first or declare it in this set"
    )]
    UnknownKind {
        origin: Origin,
        api_version: String,
        kind: String,
        name: String,
    },
}

/// Kinds defined by CRDs declared in the set: (group, version, kind) → resolved.
pub fn declared_kinds(manifests: &[Manifest]) -> BTreeMap<Gvk, Resolved> {
    let mut out = BTreeMap::new();
    for m in manifests
        .iter()
        .filter(|m| kinds::is_crd(&m.group, &m.kind))
    {
        let spec = m.object.get("spec");
        let group = spec.and_then(|s| s.get("group")).and_then(Value::as_str);
        let names = spec.and_then(|s| s.get("names"));
        let kind = names.and_then(|n| n.get("kind")).and_then(Value::as_str);
        let plural = names.and_then(|n| n.get("plural")).and_then(Value::as_str);
        let namespaced =
            spec.and_then(|s| s.get("scope")).and_then(Value::as_str) != Some("Cluster");
        let versions = spec
            .and_then(|s| s.get("versions"))
            .and_then(Value::as_array);
        let (Some(group), Some(kind), Some(plural), Some(versions)) =
            (group, kind, plural, versions)
        else {
            continue;
        };
        for v in versions
            .iter()
            .filter_map(|v| v.get("name").and_then(Value::as_str))
        {
            let resource = ApiResource {
                group: group.to_string(),
                version: v.to_string(),
                api_version: format!("{group}/{v}"),
                kind: kind.to_string(),
                plural: plural.to_string(),
            };
            out.insert(
                (group.to_string(), v.to_string(), kind.to_string()),
                Resolved {
                    resource,
                    namespaced,
                },
            );
        }
    }
    out
}

/// Default of `--max-members-per-set`.
pub const DEFAULT_MAX_MEMBERS_PER_SET: usize = 10_000;

/// What one set may declare (operator flags): members, and parsed YAML/JSON summed over its
/// inline manifests and all its sources.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SetLimits {
    /// `--max-members-per-set`.
    pub max_members: usize,
    /// `--max-yaml-nodes-per-set` and `--max-yaml-mib-per-set`.
    pub yaml: manifest::YamlCost,
}

impl Default for SetLimits {
    fn default() -> Self {
        SetLimits {
            max_members: DEFAULT_MAX_MEMBERS_PER_SET,
            yaml: manifest::YamlBudget::default().limit,
        }
    }
}

/// Checks the declared objects of one set (inline first, then the sources in order) against
/// `limits`: the YAML/JSON budget (the error names the manifest at which it ran out), then the
/// number of members. The message says which flag sets the bound.
pub fn check_limits(manifests: &[Manifest], limits: &SetLimits) -> Result<(), String> {
    let mut budget = manifest::YamlBudget::new(limits.yaml);
    for m in manifests {
        let cost = manifest::object_cost(&m.object);
        if let Err(exceeded) = budget.charge(cost) {
            return Err(format!("{}: {}", m.origin, budget.describe(exceeded)));
        }
    }
    if manifests.len() > limits.max_members {
        return Err(format!(
            "the set declares {} members, more than the {} the operator allows per set (--max-members-per-set); split it into several sets or raise the flag",
            manifests.len(),
            limits.max_members
        ));
    }
    Ok(())
}

/// Parses the inline manifests of a spec.
pub fn inline_manifests(spec: &ApplySetSpec) -> Result<Vec<Manifest>, ManifestError> {
    let mut out = Vec::new();
    for (i, entry) in spec.manifests.iter().enumerate() {
        match entry {
            InlineManifest::Value(value) => {
                out.extend(Manifest::from_value(value.clone(), Origin::inline(i))?);
            }
            InlineManifest::Unreadable { problem, .. } => {
                return Err(ManifestError::Unreadable {
                    origin: Box::new(Origin::inline(i)),
                    problem: problem.clone(),
                });
            }
        }
    }
    Ok(out)
}

/// Renders the desired set of `parent` from already-parsed manifests.
///
/// The outer `Result` is I/O (discovery); the inner one is what the user declared. (A
/// [`RenderError`] is large, but there is at most one per reconcile: not worth a box.)
#[allow(clippy::result_large_err)]
pub async fn render(
    parent: &ParentRef,
    spec: &ApplySetSpec,
    manifests: Vec<Manifest>,
    resolver: &Resolver,
) -> Result<Result<DesiredSet, RenderError>> {
    // Each distinct kind is resolved once, with at most one discovery refresh for all misses.
    let served = resolver.resolve_all(&kinds_to_resolve(&manifests)).await?;
    Ok(render_resolved(parent, spec, manifests, served))
}

/// The kinds of `manifests` that must be resolved by discovery (those not defined by a CRD
/// declared among them), sorted, each once.
pub fn kinds_to_resolve(manifests: &[Manifest]) -> Vec<Gvk> {
    let declared = declared_kinds(manifests);
    let mut gvks: Vec<Gvk> = manifests
        .iter()
        .map(gvk)
        .filter(|k| !declared.contains_key(k))
        .collect();
    gvks.sort();
    gvks.dedup();
    gvks
}

/// Renders the desired set of `parent` with the kinds already resolved (`served`: how the
/// kinds of [`kinds_to_resolve`] resolved; a kind absent from it is unknown). Pure.
#[allow(clippy::result_large_err)]
pub fn render_resolved(
    parent: &ParentRef,
    spec: &ApplySetSpec,
    manifests: Vec<Manifest>,
    served: HashMap<Gvk, Resolved>,
) -> Result<DesiredSet, RenderError> {
    let declared = declared_kinds(&manifests);
    let kinds = Kinds { served, declared };
    let members: Result<Vec<Member>, RenderError> = manifests
        .into_iter()
        .map(|m| member(m, &kinds, spec, parent))
        .collect();
    members.and_then(desired_set)
}

/// (group, version, kind).
pub type Gvk = (String, String, String);

fn gvk(m: &Manifest) -> Gvk {
    (m.group.clone(), m.version.clone(), m.kind.clone())
}

/// The kinds a set may use: served by the cluster, or defined by a CRD in the set.
struct Kinds {
    served: HashMap<Gvk, Resolved>,
    declared: BTreeMap<Gvk, Resolved>,
}

/// One manifest as a member: its kind resolved, its namespace set by the namespace rules.
#[allow(clippy::result_large_err)]
fn member(
    m: Manifest,
    kinds: &Kinds,
    spec: &ApplySetSpec,
    parent: &ParentRef,
) -> Result<Member, RenderError> {
    let key = gvk(&m);
    let Some(resolved) = kinds
        .served
        .get(&key)
        .or_else(|| kinds.declared.get(&key))
        .cloned()
    else {
        return Err(RenderError::UnknownKind {
            origin: m.origin.clone(),
            api_version: m.api_version.clone(),
            kind: m.kind.clone(),
            name: m.name.clone(),
        });
    };
    let display = format!("{} ({} {})", m.origin, m.kind, m.name);
    let namespace = applyset::member_namespace(
        resolved.namespaced,
        m.namespace.as_deref(),
        spec.target_namespace.as_deref(),
        parent,
        &display,
    )?;
    let mut object = m.object;
    manifest::normalize(&mut object);
    if let Some(Value::Object(meta)) = object.get_mut("metadata") {
        match &namespace {
            Some(ns) => meta.insert("namespace".into(), Value::String(ns.clone())),
            None => meta.remove("namespace"),
        };
    }
    let annotations = annotations_of(&object);
    let force_recreate = applyset::is_force_enabled(annotations.as_ref());
    let adopt = applyset::is_adopt_enabled(annotations.as_ref());
    Ok(Member {
        reference: MemberRef {
            group: m.group.clone(),
            kind: m.kind.clone(),
            namespace,
            name: m.name.clone(),
        },
        stage: Stage::of(&m.group, &m.kind),
        origin: m.origin,
        object,
        resource: resolved.resource,
        namespaced: resolved.namespaced,
        force_recreate,
        adopt,
        redaction: m.redaction,
    })
}

/// The members as a set: no duplicates, a digest, apply order.
#[allow(clippy::result_large_err)]
fn desired_set(mut members: Vec<Member>) -> Result<DesiredSet, RenderError> {
    let keys = members.iter().map(|m| {
        (
            MemberKey {
                group: m.reference.group.clone(),
                kind: m.reference.kind.clone(),
                namespace: m.reference.namespace.clone(),
                name: m.reference.name.clone(),
            },
            &m.origin,
        )
    });
    manifest::check_duplicates(keys)?;
    let revision = manifest::digest(members.iter().map(|m| &m.object));
    members.sort_by(|a, b| (a.stage, &a.reference).cmp(&(b.stage, &b.reference)));
    Ok(DesiredSet { members, revision })
}

fn string_map(v: Option<&Value>) -> Option<BTreeMap<String, String>> {
    v.and_then(Value::as_object).map(|m| {
        m.iter()
            .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
            .collect()
    })
}

pub fn annotations_of(object: &serde_json::Map<String, Value>) -> Option<BTreeMap<String, String>> {
    string_map(object.get("metadata").and_then(|m| m.get("annotations")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::{YamlCost, parse_documents};

    fn manifests(n: usize) -> Vec<Manifest> {
        let text: String = (0..n)
            .map(|i| format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c{i}\n---\n"))
            .collect();
        parse_documents(
            &text,
            &Origin::file("git https://example.com/r.git@main", "all.yaml"),
        )
        .expect("valid")
    }

    #[test]
    fn limits_allow_up_to_the_member_count_and_name_the_flag_beyond() {
        let limits = SetLimits {
            max_members: 3,
            ..SetLimits::default()
        };
        assert_eq!(check_limits(&manifests(3), &limits), Ok(()));
        assert_eq!(check_limits(&[], &limits), Ok(()));
        let err = check_limits(&manifests(4), &limits).expect_err("too many");
        assert!(err.contains("declares 4 members"), "{err}");
        assert!(err.contains("--max-members-per-set"), "{err}");
        assert_eq!(SetLimits::default().max_members, 10_000);
    }

    #[test]
    fn limits_name_the_manifest_where_the_yaml_budget_ran_out() {
        let all = manifests(3);
        let one = crate::manifest::object_cost(&all[0].object);
        let limits = |nodes: usize, bytes: usize| SetLimits {
            max_members: 100,
            yaml: YamlCost { nodes, bytes },
        };
        assert_eq!(
            check_limits(&all, &limits(3 * one.nodes, 3 * one.bytes)),
            Ok(())
        );
        let err = check_limits(&all, &limits(3 * one.nodes - 1, 1 << 20)).expect_err("nodes");
        assert!(
            err.starts_with("git https://example.com/r.git@main file all.yaml, document 3"),
            "{err}"
        );
        assert!(err.contains("--max-yaml-nodes-per-set"), "{err}");
        let err = check_limits(&all, &limits(1000, 2 * one.bytes)).expect_err("bytes");
        assert!(err.contains("document 3"), "{err}");
        assert!(err.contains("--max-yaml-mib-per-set"), "{err}");
    }
}

//! The resolution of kinds: each kind of a set's manifests resolved to the API resource the
//! cluster serves (by discovery, or offline), or defined by a CRD declared in the set
//! ([`declared_kinds`]); then, purely, each manifest made a member (its kind resolved, its
//! namespace set by the namespace rules) and the members made a set (no duplicates, a digest,
//! apply order).

use std::collections::{BTreeMap, HashMap};

use kube::discovery::ApiResource;
use serde_json::Value;

use super::{DesiredSet, Member, RenderError};
use crate::{
    Result,
    api::{ApplySetSpec, MemberRef},
    applyset::{self, ParentRef},
    discovery::{Resolved, Resolver},
    kind_order::{self, Stage},
    manifest::{self, Manifest, MemberKey},
};

/// Kinds defined by CRDs declared in the set: (group, version, kind) → resolved.
pub fn declared_kinds(manifests: &[Manifest]) -> BTreeMap<Gvk, Resolved> {
    let mut out = BTreeMap::new();
    for m in manifests
        .iter()
        .filter(|m| kind_order::is_crd(&m.group, &m.kind))
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

/// The kinds of `manifests` that must be resolved by discovery (those not defined by a CRD
/// declared among them), sorted, each once.
pub(super) fn kinds_to_resolve(manifests: &[Manifest]) -> Vec<Gvk> {
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
pub(super) fn render_resolved(
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
    )
    .map_err(|error| RenderError::Scope {
        origin: m.origin.clone(),
        error,
    })?;
    let mut object = m.object;
    manifest::normalize(&mut object);
    if let Some(Value::Object(meta)) = object.get_mut("metadata") {
        match &namespace {
            Some(ns) => meta.insert("namespace".into(), Value::String(ns.clone())),
            None => meta.remove("namespace"),
        };
    }
    let annotations = annotations_of(&object);
    // `force: enabled` under either prefix, as a label or an annotation (Flux's matching).
    let force_recreate = applyset::controls::Marks::of_object(&object).force_enabled;
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
        ignore: Vec::new(),
        redaction: m.redaction,
        secret_substituted: m.secret_substituted,
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

/// Looks a kind up without the cluster (`None`: unknown).
pub type KnownKinds<'a> = &'a (dyn Fn(&Gvk) -> Option<Resolved> + Sync);

/// Where the kinds of a set's manifests are looked up.
pub enum KindLookup<'a> {
    /// The cluster's discovery; `beside`: kinds of CRDs declared next to the set (the
    /// plugin's file), for what discovery does not serve.
    Discovery {
        resolver: &'a Resolver,
        beside: KnownKinds<'a>,
    },
    /// No cluster: the kinds `known` knows; a kind it does not is `assume`d (and reported
    /// in [`Rendered::assumed`]).
    Offline {
        known: KnownKinds<'a>,
        assume: fn(&Gvk) -> Resolved,
    },
}

/// The kinds of `manifests` that need resolving, as `lookup` resolves them, and those assumed.
pub(super) async fn resolve_kinds(
    lookup: &KindLookup<'_>,
    manifests: &[Manifest],
) -> Result<(HashMap<Gvk, Resolved>, Vec<Gvk>)> {
    let wanted = kinds_to_resolve(manifests);
    let mut assumed = Vec::new();
    let served = match lookup {
        KindLookup::Discovery { resolver, beside } => {
            // Each distinct kind is resolved once, with at most one discovery refresh.
            let mut served = resolver.resolve_all(&wanted).await?;
            for k in &wanted {
                if !served.contains_key(k)
                    && let Some(r) = beside(k)
                {
                    served.insert(k.clone(), r);
                }
            }
            served
        }
        KindLookup::Offline { known, assume } => wanted
            .iter()
            .map(|k| {
                let r = known(k).unwrap_or_else(|| {
                    assumed.push(k.clone());
                    assume(k)
                });
                (k.clone(), r)
            })
            .collect(),
    };
    Ok((served, assumed))
}

//! Override (`ssa: Override`, the default): which field managers' fields the set takes over
//! before it applies, and the object's `managedFields` once taken over, as fluxcd/pkg/ssa's
//! `PatchReplaceFieldsManagers` computes them for kustomize-controller.
//!
//! kustomize-controller takes over `{kubectl, Apply}`, `{kubectl, Update}`,
//! `{before-first-apply, Update}` and `{kustomize-controller, Update}`, each name a **prefix**
//! (`kubectl` also selects `kubectl-edit`, `kubectl-client-side-apply`, `kubectl-patch`, ...),
//! never an entry of a subresource (`/status`, `/scale`). Here the set's member field manager
//! stands in for `kustomize-controller`. Once taken over, those fields are owned by the set's
//! Apply entry, so the next apply, which does not send the ones only they added, removes them,
//! and sets the ones they changed back.
//!
//! Pure: no I/O (the request is `engine::apply::take_over`).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry, ObjectMeta};
use serde_json::{Map, Value};

use super::controls;

/// The operation of a manager that writes with server-side apply.
pub const APPLY: &str = "Apply";
/// The operation of a manager that writes with create, update or patch.
pub const UPDATE: &str = "Update";

/// The manager name prefixes taken over, with their operations (kustomize-controller's list;
/// the set's own `Update` entry is added by [`takes_over_for`]).
pub const PREFIXES: [(&str, &str); 3] = [
    ("kubectl", APPLY),
    ("kubectl", UPDATE),
    ("before-first-apply", UPDATE),
];

/// Managers never taken over although their names start with `kubectl`: the operator's own
/// kubectl plugin, whose writes (`suspend`, `resume`, `reconcile` of a set that is itself a
/// member of another set) are deliberate, as `flux suspend` is to Flux.
pub const KEPT: [&str; 1] = [PLUGIN_FIELD_MANAGER];

/// The field manager of the kubectl plugin's own writes (annotations, spec.suspend).
pub const PLUGIN_FIELD_MANAGER: &str = "kubectl-applyset";

/// Annotations removed from a member whenever its fields are taken over (kustomize-controller's
/// cleanup: the client-side apply's record and Flux v1's checksums).
pub const CLEANUP_ANNOTATIONS: [&str; 3] = [
    "kubectl.kubernetes.io/last-applied-configuration",
    "kustomize.toolkit.fluxcd.io/checksum",
    "fluxcd.io/sync-checksum",
];

/// Labels removed likewise (Flux v1's garbage-collection mark).
pub const CLEANUP_LABELS: [&str; 1] = ["fluxcd.io/sync-gc-mark"];

/// Whether `entry` is one the set takes over regardless of its own name: a `kubectl*` Apply
/// or Update entry (but [`KEPT`]), or a `before-first-apply*` Update entry, never one of a
/// subresource.
pub fn takes_over(entry: &ManagedFieldsEntry) -> bool {
    matches_any(entry, PREFIXES.iter().copied())
        && !entry.manager.as_deref().is_some_and(|m| KEPT.contains(&m))
}

/// [`takes_over`], or the set's own (`owner`) Update entry. The owner's name must match
/// exactly (Flux matches its one controller name as a prefix; here each set has its own
/// manager, and a prefix would take over the Update entry of a set whose name extends it).
pub fn takes_over_for(entry: &ManagedFieldsEntry, owner: &str) -> bool {
    takes_over(entry)
        || (matches_any(entry, [(owner, UPDATE)].into_iter())
            && entry.manager.as_deref() == Some(owner))
}

/// Flux's `matchFieldManager` against a list: same operation, no subresource, name prefix.
fn matches_any<'a>(
    entry: &ManagedFieldsEntry,
    mut managers: impl Iterator<Item = (&'a str, &'a str)>,
) -> bool {
    let no_subresource = entry.subresource.as_deref().is_none_or(str::is_empty);
    let name = entry.manager.as_deref().unwrap_or_default();
    let operation = entry.operation.as_deref().unwrap_or_default();
    no_subresource && managers.any(|(prefix, op)| operation == op && name.starts_with(prefix))
}

/// Whether the object has any entry the set would take over (what the member watches note of
/// each labelled object, so that a member with none costs no read). An entry that owns
/// nothing but per-object control keys is not one (see [`taken_over`]).
pub fn has_takeover(meta: &ObjectMeta) -> bool {
    meta.managed_fields
        .iter()
        .flatten()
        .any(|e| takes_over(e) && !controls_only(e))
}

/// The key suffixes of the per-object controls (under each of [`controls::PREFIXES`]).
const CONTROL_SUFFIXES: [&str; 4] = [
    controls::SSA,
    controls::PRUNE,
    controls::FORCE,
    controls::RECONCILE,
];

/// Whether a `fieldsV1` key under `f:labels` or `f:annotations` is a per-object control key
/// (`f:applyset.dev/prune`, `f:kustomize.toolkit.fluxcd.io/ssa`, ...; the key is exact).
fn is_control_field(field: &str) -> bool {
    field.strip_prefix("f:").is_some_and(|key| {
        controls::PREFIXES.iter().any(|prefix| {
            key.strip_prefix(prefix)
                .is_some_and(|suffix| CONTROL_SUFFIXES.contains(&suffix))
        })
    })
}

/// The `metadata` maps whose keys may be control keys.
const CONTROL_MAPS: [&str; 2] = ["f:labels", "f:annotations"];

/// Whether the entry owns per-object control keys and nothing else (no allocation).
fn controls_only(entry: &ManagedFieldsEntry) -> bool {
    let Some(Value::Object(root)) = entry.fields_v1.as_ref().map(|f| &f.0) else {
        return false;
    };
    let Some(Value::Object(meta)) = root.get("f:metadata") else {
        return false;
    };
    let maps_are_controls = |maps: &Map<String, Value>| {
        maps.iter().all(|(k, v)| {
            CONTROL_MAPS.contains(&k.as_str())
                && v.as_object().is_some_and(|m| {
                    m.keys().all(|f| f == "." || is_control_field(f))
                        && m.keys().any(|f| is_control_field(f))
                })
        })
    };
    root.len() == 1 && !meta.is_empty() && maps_are_controls(meta)
}

/// Splits an entry's `fieldsV1` into the per-object control keys it owns (labels and
/// annotations `applyset.dev/{ssa,prune,force,reconcile}` and the same under
/// `kustomize.toolkit.fluxcd.io/`) and everything else; each part `None` when empty.
fn split_controls(fields: Option<&FieldsV1>) -> (Option<FieldsV1>, Option<FieldsV1>) {
    let Some(Value::Object(root)) = fields.map(|f| &f.0) else {
        return (None, fields.cloned());
    };
    let mut rest = root.clone();
    let mut taken = Map::new();
    if let Some(Value::Object(meta)) = rest.get_mut("f:metadata") {
        for name in CONTROL_MAPS {
            let Some(Value::Object(map)) = meta.get_mut(name) else {
                continue;
            };
            let keys: Vec<String> = map
                .keys()
                .filter(|k| is_control_field(k))
                .cloned()
                .collect();
            let mut own = Map::new();
            for key in keys {
                if let Some(v) = map.remove(&key) {
                    own.insert(key, v);
                }
            }
            if own.is_empty() {
                continue;
            }
            // A map left with only its own membership (`.`) goes with the keys.
            if map.keys().all(|k| k == ".") {
                own.extend(std::mem::take(map));
                meta.remove(name);
            }
            {
                taken.insert(name.to_string(), Value::Object(own));
            }
        }
        if meta.is_empty() {
            rest.remove("f:metadata");
        }
    }
    if taken.is_empty() {
        return (None, fields.cloned());
    }
    let controls = FieldsV1(Value::Object(Map::from_iter([(
        "f:metadata".to_string(),
        Value::Object(taken),
    )])));
    let rest = (!rest.is_empty()).then_some(FieldsV1(Value::Object(rest)));
    (Some(controls), rest)
}

/// Whether the object shows anything Override would change for `owner`: an entry to take
/// over, or a cleanup annotation or label (cheap: no allocation; the engine asks it of every
/// apply's answer).
pub fn shows_work(meta: &ObjectMeta, owner: &str) -> bool {
    let has = |m: Option<&BTreeMap<String, String>>, keys: &[&str]| {
        m.is_some_and(|m| keys.iter().any(|k| m.contains_key(*k)))
    };
    meta.managed_fields
        .iter()
        .flatten()
        .any(|e| takes_over_for(e, owner) && !controls_only(e))
        || has(meta.annotations.as_ref(), &CLEANUP_ANNOTATIONS)
        || has(meta.labels.as_ref(), &CLEANUP_LABELS)
}

/// The cleanup annotations and labels present on the object, as JSON pointers, leaving out
/// those the desired object (`declared`) sets itself (removing them would only have the next
/// apply write them back).
pub fn cleanup_paths(meta: &ObjectMeta, declared: &ObjectMeta) -> Vec<String> {
    let present = |live: Option<&BTreeMap<String, String>>,
                   ours: Option<&BTreeMap<String, String>>,
                   key: &str| {
        live.is_some_and(|m| m.contains_key(key)) && !ours.is_some_and(|m| m.contains_key(key))
    };
    let annotations = CLEANUP_ANNOTATIONS
        .iter()
        .filter(|k| present(meta.annotations.as_ref(), declared.annotations.as_ref(), k))
        .map(|k| format!("/metadata/annotations/{}", escape(k)));
    let labels = CLEANUP_LABELS
        .iter()
        .filter(|k| present(meta.labels.as_ref(), declared.labels.as_ref(), k))
        .map(|k| format!("/metadata/labels/{}", escape(k)));
    annotations.chain(labels).collect()
}

/// A JSON pointer's escaping of one key (RFC 6901).
fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// The `managedFields` once every entry [`takes_over_for`] matches is merged into `owner`'s
/// Apply entry; `None` when there is nothing to take over.
///
/// As Flux's `PatchReplaceFieldsManagers`: `owner`'s Apply entry is the last entry of that name
/// and operation; without one, the first matching entry is renamed to it (keeping its other
/// fields). Every other matching entry's `fieldsV1` is unioned into it and the entry dropped;
/// the rest keep their order, and the owner's entry comes last.
///
/// Unlike Flux, the per-object control keys (`prune`, `force`, `ssa`, `reconcile` under
/// either prefix, labels or annotations) stay with the entry that owns them: a matching entry
/// keeps only those (and is otherwise merged), so that a mark a user adds with `kubectl
/// annotate` or `kubectl label` is not removed by the next apply. An entry that owns nothing
/// else is left as it is.
pub fn taken_over(managed: &[ManagedFieldsEntry], owner: &str) -> Option<Vec<ManagedFieldsEntry>> {
    let own = managed.iter().rposition(|e| {
        e.manager.as_deref() == Some(owner) && e.operation.as_deref() == Some(APPLY)
    });
    let mut merged: Option<ManagedFieldsEntry> = own.map(|i| managed[i].clone());
    let mut kept = Vec::with_capacity(managed.len());
    let mut edited = false;
    for (i, entry) in managed.iter().enumerate() {
        if Some(i) == own {
            continue;
        }
        if !takes_over_for(entry, owner) || controls_only(entry) {
            kept.push(entry.clone());
            continue;
        }
        edited = true;
        let (own, rest) = split_controls(entry.fields_v1.as_ref());
        if own.is_some() {
            kept.push(ManagedFieldsEntry {
                fields_v1: own,
                ..entry.clone()
            });
        }
        match merged.as_mut() {
            None => {
                let mut renamed = entry.clone();
                renamed.manager = Some(owner.to_string());
                renamed.operation = Some(APPLY.to_string());
                renamed.fields_v1 = rest;
                merged = Some(renamed);
            }
            Some(target) => {
                target.fields_v1 = union_fields(target.fields_v1.take(), rest.as_ref());
            }
        }
    }
    if !edited {
        return None;
    }
    kept.extend(merged);
    Some(kept)
}

/// The union of two `fieldsV1` sets (absent counts as empty, as Flux's `mergeManagedFieldsV1`).
fn union_fields(a: Option<FieldsV1>, b: Option<&FieldsV1>) -> Option<FieldsV1> {
    match (a, b) {
        (None, None) => None,
        (None, Some(b)) => Some(b.clone()),
        (Some(a), None) => Some(a),
        (Some(a), Some(b)) => Some(FieldsV1(union(&a.0, &b.0))),
    }
}

/// The union of two field sets in their JSON form (structured-merge-diff's `Set.Union`): a
/// trie whose keys are path elements (`f:name`, `k:{..}`, `v:..`, `i:N`). A key's value is
/// `{}` when its path is a member with no children; otherwise its children, with a `.` key
/// when its path is a member too. Keys come out sorted (`.` first); anything that is not a map
/// counts as `{}`.
pub fn union(a: &Value, b: &Value) -> Value {
    let empty = Map::new();
    let a = a.as_object().unwrap_or(&empty);
    let b = b.as_object().unwrap_or(&empty);
    Value::Object(union_set(a, b))
}

/// The union of two sets' children (and of a `.` at the root, kept as it is).
fn union_set(a: &Map<String, Value>, b: &Map<String, Value>) -> Map<String, Value> {
    let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    let mut out = Map::new();
    for key in keys {
        if key == "." {
            out.insert(key.clone(), Value::Object(Map::new()));
            continue;
        }
        let (a_member, a_children) = entry(a.get(key));
        let (b_member, b_children) = entry(b.get(key));
        let children = union_set(&a_children, &b_children);
        out.insert(key.clone(), encode(a_member || b_member, children));
    }
    out
}

/// One key's value: whether its path is a member, and its children.
fn entry(v: Option<&Value>) -> (bool, Map<String, Value>) {
    match v {
        None => (false, Map::new()),
        Some(Value::Object(m)) if !m.is_empty() => {
            let mut children = m.clone();
            let member = children.remove(".").is_some();
            (member, children)
        }
        Some(_) => (true, Map::new()),
    }
}

/// A key's value in the form [`union`] gives it.
fn encode(member: bool, children: Map<String, Value>) -> Value {
    if children.is_empty() {
        return Value::Object(Map::new());
    }
    let mut out = Map::new();
    if member {
        out.insert(".".into(), Value::Object(Map::new()));
    }
    out.extend(children);
    Value::Object(out)
}

#[cfg(test)]
mod tests;

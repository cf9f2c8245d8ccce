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
//! A set may name more managers in `spec.takeOverFieldManagers` ([`Takers`]): their Apply
//! and Update entries (exact names, never a subresource's) are taken over too, control keys
//! included (they are the replaced tool's manifest, not a mark added by hand), and Flux's
//! owner labels ([`FLUX_OWNER_LABELS`]) go with them. [`validate`] bounds that list.
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

/// Flux's owner labels (kustomize-controller's inventory marks), removed when a set that
/// takes over named managers adopts an object it never applies again (`ssa: IfNotPresent`);
/// on the objects it applies, the next apply removes them once their owner is taken over.
pub const FLUX_OWNER_LABELS: [&str; 2] = [
    "kustomize.toolkit.fluxcd.io/name",
    "kustomize.toolkit.fluxcd.io/namespace",
];

/// Who takes over on a member: the set's member manager (`owner`, the target) and the
/// managers its spec names (`named`, `spec.takeOverFieldManagers`, already validated).
#[derive(Clone, Copy, Debug)]
pub struct Takers<'a> {
    pub owner: &'a str,
    pub named: &'a [String],
}

impl<'a> Takers<'a> {
    pub fn new(owner: &'a str, named: &'a [String]) -> Self {
        Self { owner, named }
    }

    /// Whether `entry` is one of a named manager: its exact name, operation Apply or Update,
    /// no subresource.
    pub fn names(&self, entry: &ManagedFieldsEntry) -> bool {
        let no_subresource = entry.subresource.as_deref().is_none_or(str::is_empty);
        let operation = entry.operation.as_deref().unwrap_or_default();
        no_subresource
            && (operation == APPLY || operation == UPDATE)
            && entry
                .manager
                .as_deref()
                .is_some_and(|m| self.names_manager(m))
    }

    /// Whether `manager` is one of the named managers (exactly).
    pub fn names_manager(&self, manager: &str) -> bool {
        self.named.iter().any(|n| n == manager)
    }

    /// Whether `entry` is taken over: [`takes_over_for`] the owner, or a named one.
    pub fn takes(&self, entry: &ManagedFieldsEntry) -> bool {
        takes_over_for(entry, self.owner) || self.names(entry)
    }

    /// Whether the object has an entry of a named manager (what an adoption looks for).
    pub fn named_in(&self, meta: &ObjectMeta) -> bool {
        !self.named.is_empty() && meta.managed_fields.iter().flatten().any(|e| self.names(e))
    }
}

/// Most names in `spec.takeOverFieldManagers`.
pub const MAX_NAMED: usize = 16;

/// Longest field manager name the API server accepts.
pub const MAX_NAME_LEN: usize = 128;

/// Why `spec.takeOverFieldManagers` is refused (ValidationFailed, Stalled).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NamedError {
    #[error(
        "spec.takeOverFieldManagers has {count} names, more than {MAX_NAMED}; name only the managers of the tool this set replaces"
    )]
    TooMany { count: usize },
    #[error(
        "spec.takeOverFieldManagers[{index}] is empty; name a field manager exactly as metadata.managedFields shows it, e.g. kustomize-controller"
    )]
    Empty { index: usize },
    #[error(
        "spec.takeOverFieldManagers[{index}] is {len} characters long, more than {MAX_NAME_LEN} (no field manager is longer); name it exactly as metadata.managedFields shows it"
    )]
    TooLong { index: usize, len: usize },
    #[error(
        "spec.takeOverFieldManagers[{index}] ({name:?}) has a control character or a space at either end; name a field manager exactly as metadata.managedFields shows it"
    )]
    Unprintable { index: usize, name: String },
    #[error(
        "spec.takeOverFieldManagers[{index}] ({name:?}) is a pattern, and names are exact: write each manager's full name as metadata.managedFields shows it (kubectl managers are taken over without being named)"
    )]
    Pattern { index: usize, name: String },
    #[error(
        "spec.takeOverFieldManagers[{index}] ({name:?}) is this set's own field manager, whose fields are the set's already; remove the entry"
    )]
    Own { index: usize, name: String },
    #[error(
        "spec.takeOverFieldManagers[{index}] ({name:?}) is a field manager of this operator ({what}), not of another tool; remove the entry"
    )]
    Operator {
        index: usize,
        name: String,
        what: &'static str,
    },
    #[error(
        "spec.takeOverFieldManagers[{index}] ({name:?}) is a field manager of Kubernetes itself: taking over a controller's fields makes the set's next apply remove them, and the controller and the set then fight over them; remove the entry"
    )]
    Kubernetes { index: usize, name: String },
}

/// The field managers of Kubernetes' own components, refused in `spec.takeOverFieldManagers`
/// (exact names): their fields are the components' to keep.
pub const KUBERNETES_MANAGERS: [&str; 4] = [
    "kube-controller-manager",
    "kube-scheduler",
    "kubelet",
    "kube-apiserver",
];

/// Checks `spec.takeOverFieldManagers` (`named`) of the set whose member manager is `own`:
/// at most [`MAX_NAMED`] exact names, none empty, longer than [`MAX_NAME_LEN`], with a
/// control character or a space at either end, with a `*`, the set's own manager, another
/// set's or the operator's (`applyset.dev/...`), the plugin's ([`PLUGIN_FIELD_MANAGER`]), or
/// one of Kubernetes' own components ([`KUBERNETES_MANAGERS`]).
pub fn validate(named: &[String], own: &str) -> Result<(), NamedError> {
    if named.len() > MAX_NAMED {
        return Err(NamedError::TooMany { count: named.len() });
    }
    match named
        .iter()
        .enumerate()
        .find_map(|(i, n)| refusal(i, n, own))
    {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Why the name at `index` is refused, if it is.
fn refusal(index: usize, name: &str, own: &str) -> Option<NamedError> {
    let len = name.chars().count();
    let named = || name.to_string();
    if name.is_empty() {
        Some(NamedError::Empty { index })
    } else if len > MAX_NAME_LEN {
        Some(NamedError::TooLong { index, len })
    } else if name.chars().any(char::is_control) || name.trim() != name {
        Some(NamedError::Unprintable {
            index,
            name: named(),
        })
    } else if name.contains('*') {
        Some(NamedError::Pattern {
            index,
            name: named(),
        })
    } else if name == own {
        Some(NamedError::Own {
            index,
            name: named(),
        })
    } else if KUBERNETES_MANAGERS.contains(&name) {
        Some(NamedError::Kubernetes {
            index,
            name: named(),
        })
    } else {
        let what = operator_manager(name)?;
        Some(NamedError::Operator {
            index,
            name: named(),
            what,
        })
    }
}

/// Which of the operator's own managers `name` is, if it is one.
fn operator_manager(name: &str) -> Option<&'static str> {
    if name == PLUGIN_FIELD_MANAGER {
        Some("the kubectl plugin's")
    } else if name.starts_with(&format!("{}/", super::FIELD_MANAGER_PREFIX)) {
        Some("a set's, or the operator's adoption or parent writes")
    } else {
        None
    }
}

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
    shows_work_for(meta, Takers::new(owner, &[]))
}

/// [`shows_work`] for `takers`: a named manager's entry counts whatever it owns.
pub fn shows_work_for(meta: &ObjectMeta, takers: Takers<'_>) -> bool {
    let has = |m: Option<&BTreeMap<String, String>>, keys: &[&str]| {
        m.is_some_and(|m| keys.iter().any(|k| m.contains_key(*k)))
    };
    meta.managed_fields
        .iter()
        .flatten()
        .any(|e| takers.names(e) || (takes_over_for(e, takers.owner) && !controls_only(e)))
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

/// [`FLUX_OWNER_LABELS`] present on the object (`meta`) that the manifest (`declared`) does
/// not declare: those a take-over of an object never applied again removes.
pub fn flux_labels_to_remove(meta: &ObjectMeta, declared: &ObjectMeta) -> Vec<&'static str> {
    let has = |m: &ObjectMeta, k: &str| m.labels.as_ref().is_some_and(|l| l.contains_key(k));
    FLUX_OWNER_LABELS
        .into_iter()
        .filter(|k| has(meta, k) && !has(declared, k))
        .collect()
}

/// Whether the object carries one of [`FLUX_OWNER_LABELS`] (kustomize-controller applied it).
pub fn flux_labelled(meta: &ObjectMeta) -> bool {
    let labels = meta.labels.as_ref();
    FLUX_OWNER_LABELS
        .iter()
        .any(|k| labels.is_some_and(|l| l.contains_key(*k)))
}

/// The labels `keys` as JSON pointers.
pub fn label_paths(keys: &[&str]) -> Vec<String> {
    keys.iter()
        .map(|k| format!("/metadata/labels/{}", escape(k)))
        .collect()
}

/// `entries` without any ownership of the labels `keys` (the labels a patch removes); an
/// entry left owning nothing is dropped (the API server keeps no empty entry either).
pub fn without_labels(entries: Vec<ManagedFieldsEntry>, keys: &[&str]) -> Vec<ManagedFieldsEntry> {
    entries
        .into_iter()
        .filter_map(|mut e| {
            let Some(FieldsV1(Value::Object(root))) = e.fields_v1.as_mut() else {
                return Some(e);
            };
            let labels = root
                .get_mut("f:metadata")
                .and_then(Value::as_object_mut)
                .and_then(|m| m.get_mut("f:labels"))
                .and_then(Value::as_object_mut);
            let Some(labels) = labels else {
                return Some(e);
            };
            for key in keys {
                labels.remove(&format!("f:{key}"));
            }
            prune_empty(root);
            (!root.is_empty()).then_some(e)
        })
        .collect()
}

/// Removes `f:labels` and then `f:metadata` when a removal left them empty (a map that kept
/// only its own membership, `.`, stays: it says the entry owns the map itself).
fn prune_empty(root: &mut Map<String, Value>) {
    let Some(Value::Object(meta)) = root.get_mut("f:metadata") else {
        return;
    };
    if meta
        .get("f:labels")
        .and_then(Value::as_object)
        .is_some_and(Map::is_empty)
    {
        meta.remove("f:labels");
    }
    if meta.is_empty() {
        root.remove("f:metadata");
    }
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
    taken_over_by(managed, Takers::new(owner, &[]))
}

/// [`taken_over`] for `takers`: a named manager's entry is merged whole, its control keys
/// with it (they come from the replaced tool's manifests, which the set now declares).
pub fn taken_over_by(
    managed: &[ManagedFieldsEntry],
    takers: Takers<'_>,
) -> Option<Vec<ManagedFieldsEntry>> {
    let owner = takers.owner;
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
        let named = takers.names(entry);
        if !named && (!takes_over_for(entry, owner) || controls_only(entry)) {
            kept.push(entry.clone());
            continue;
        }
        edited = true;
        let (own, rest) = match named {
            true => (None, entry.fields_v1.clone()),
            false => split_controls(entry.fields_v1.as_ref()),
        };
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

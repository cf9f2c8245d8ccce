//! The pure parts of the handover: a Kustomization's `status.inventory` read into object
//! identities (fluxcd/cli-utils' `ObjMetadata` strings, `<namespace>_<name>_<group>_<kind>`),
//! what an inventory object still lacks to be the set's alone ([`pending`]), whether the set is
//! Ready for its generation ([`set_state`]), which inventory objects Flux never owned
//! ([`never_flux`]), whether Flux applied anything while being suspended ([`applied_since`]),
//! and the Kustomization's state before its deletion ([`safe_to_delete`]).
//!
//! No I/O: the requests are `handover`'s.

use applyset_operator::{
    api::ApplySetStatus,
    applyset::{LABEL_PART_OF, controls::Marks},
    convert::FluxRef,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;

/// kustomize-controller's field manager.
pub const FLUX_MANAGER: &str = "kustomize-controller";

/// kustomize-controller's owner labels.
pub const FLUX_LABELS: [&str; 2] = [
    "kustomize.toolkit.fluxcd.io/name",
    "kustomize.toolkit.fluxcd.io/namespace",
];

/// Most inventory entries read: a bound on the objects the wait reads (Flux's own inventories
/// are far smaller; a larger one is refused rather than polled).
pub const MAX_INVENTORY: usize = 5_000;

/// One object of a Kustomization's inventory.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct InventoryId {
    /// Empty for a cluster-scoped object.
    pub namespace: String,
    pub name: String,
    /// Empty for the core group.
    pub group: String,
    pub kind: String,
    /// The entry's `v`: the version it was applied at.
    pub version: String,
}

impl std::fmt::Display for InventoryId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = if self.group.is_empty() {
            self.kind.clone()
        } else {
            format!("{}.{}", self.kind, self.group)
        };
        if self.namespace.is_empty() {
            write!(f, "{kind} {}", self.name)
        } else {
            write!(f, "{kind} {}/{}", self.namespace, self.name)
        }
    }
}

/// Why an inventory could not be read.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum InventoryError {
    #[error(
        "status.inventory.entries[{index}].id: {id:?} is not <namespace>_<name>_<group>_<kind>"
    )]
    Id { index: usize, id: String },
    #[error("status.inventory.entries[{index}]: {field} is missing or not a string")]
    Field { index: usize, field: &'static str },
    #[error(
        "status.inventory lists {count} objects, more than the {MAX_INVENTORY} a handover checks"
    )]
    TooLarge { count: usize },
}

/// Parses an inventory id as fluxcd/cli-utils' `ParseObjMetadata` does: the namespace up to
/// the first `_`, the kind after the last, the group before it, the name in between (with
/// `__` read back as `:`, as RBAC names are written). `None` when a field is missing.
pub fn parse_id(id: &str) -> Option<(String, String, String, String)> {
    let (namespace, rest) = id.split_once('_')?;
    let (rest, kind) = rest.rsplit_once('_')?;
    let (name, group) = rest.rsplit_once('_')?;
    if name.is_empty() || kind.is_empty() {
        return None;
    }
    Some((
        namespace.to_owned(),
        name.replace("__", ":"),
        group.to_owned(),
        kind.to_owned(),
    ))
}

/// The objects of a Kustomization's `status.inventory` (none without an inventory).
pub fn inventory(kustomization: &Value) -> Result<Vec<InventoryId>, InventoryError> {
    let entries = kustomization
        .pointer("/status/inventory/entries")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    if entries.len() > MAX_INVENTORY {
        return Err(InventoryError::TooLarge {
            count: entries.len(),
        });
    }
    let mut out = Vec::with_capacity(entries.len());
    for (index, entry) in entries.iter().enumerate() {
        let text = |field: &'static str| {
            entry
                .get(field)
                .and_then(Value::as_str)
                .ok_or(InventoryError::Field { index, field })
        };
        let id = text("id")?;
        let version = text("v")?;
        let (namespace, name, group, kind) = parse_id(id).ok_or_else(|| InventoryError::Id {
            index,
            id: id.to_owned(),
        })?;
        out.push(InventoryId {
            namespace,
            name,
            group,
            kind,
            version: version.to_owned(),
        });
    }
    Ok(out)
}

/// What an inventory object still lacks to be the set's alone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pending {
    /// The object does not exist (the set does not create it: its build differs from the
    /// Kustomization's).
    Missing,
    /// It does not carry the set's part-of label (yet; or the set does not declare it).
    NotPartOf,
    /// kustomize-controller still owns fields of it (its operations).
    FluxFields(Vec<String>),
    /// It still carries Flux's owner label.
    FluxLabel(&'static str),
}

impl std::fmt::Display for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Pending::Missing => write!(f, "does not exist (the set does not create it)"),
            Pending::NotPartOf => write!(f, "does not carry the set's {LABEL_PART_OF} label"),
            Pending::FluxFields(ops) => write!(
                f,
                "{FLUX_MANAGER} still owns fields of it ({})",
                ops.join(", ")
            ),
            Pending::FluxLabel(label) => write!(f, "still carries the label {label}"),
        }
    }
}

/// Why an inventory object keeps kustomize-controller's fields and Flux's owner labels after
/// the handover, by design: its live marks (either prefix, see
/// [`applyset_operator::applyset::controls`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exempt {
    /// `reconcile: disabled` or `ssa: Ignore`: the set does not apply it at all.
    Skipped(&'static str),
    /// `ssa: Merge`: the set applies it (its label) but keeps the other managers' fields.
    Merge,
    /// Before the handover, neither a Flux owner label nor a field of kustomize-controller:
    /// Flux never applied it (e.g. an `ssa: IfNotPresent` object made by hand), and the set
    /// does not adopt it either.
    NotFlux,
}

impl std::fmt::Display for Exempt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Exempt::Skipped(mark) => write!(
                f,
                "carries {mark}: the set does not apply it, so it stays as it is, with {FLUX_MANAGER}'s fields and Flux's owner labels, and is no member of the set"
            ),
            Exempt::Merge => write!(
                f,
                "carries ssa: Merge: the set applies it but keeps {FLUX_MANAGER}'s fields and Flux's owner labels on it"
            ),
            Exempt::NotFlux => write!(
                f,
                "not made by {FLUX_MANAGER}: the set leaves it as Flux did"
            ),
        }
    }
}

/// Why the object with metadata `meta` is exempt from the take-over, if it is.
pub fn exempt(meta: &ObjectMeta) -> Option<Exempt> {
    let marks = Marks::of_meta(meta);
    if marks.reconcile_disabled {
        Some(Exempt::Skipped("reconcile: disabled"))
    } else if marks.ssa_ignore {
        Some(Exempt::Skipped("ssa: Ignore"))
    } else if marks.ssa_merge {
        Some(Exempt::Merge)
    } else {
        None
    }
}

/// Whether the inventory object with metadata `meta`, read before the handover, was never
/// Flux's: no Flux owner label and no managedFields entry of kustomize-controller (see
/// [`applied_by_parent`]). Such an object is not waited for: the set leaves it as it is.
pub fn never_flux(meta: &ObjectMeta) -> Option<Exempt> {
    applied_by_parent(meta).is_none().then_some(Exempt::NotFlux)
}

/// What the object with metadata `meta` (`None`: it does not exist) still lacks to be the
/// set `set_id`'s alone: its part-of label, no managedFields entry of kustomize-controller
/// (any operation, any subresource), no Flux owner label. Empty when handed over. An object
/// [`exempt`] lacks nothing (skipped) or only the label (`ssa: Merge`).
pub fn pending(meta: Option<&ObjectMeta>, set_id: &str) -> Vec<Pending> {
    let Some(meta) = meta else {
        return vec![Pending::Missing];
    };
    let mut out = Vec::new();
    let exempt = exempt(meta);
    if matches!(exempt, Some(Exempt::Skipped(_))) {
        return out;
    }
    let labels = meta.labels.as_ref();
    if labels
        .and_then(|l| l.get(LABEL_PART_OF))
        .map(String::as_str)
        != Some(set_id)
    {
        out.push(Pending::NotPartOf);
    }
    if exempt == Some(Exempt::Merge) {
        return out;
    }
    let flux: Vec<String> = meta
        .managed_fields
        .iter()
        .flatten()
        .filter(|e| e.manager.as_deref() == Some(FLUX_MANAGER))
        .map(|e| {
            let op = e.operation.clone().unwrap_or_default();
            match e.subresource.as_deref().filter(|s| !s.is_empty()) {
                Some(sub) => format!("{op} /{sub}"),
                None => op,
            }
        })
        .collect();
    if !flux.is_empty() {
        out.push(Pending::FluxFields(flux));
    }
    for label in FLUX_LABELS {
        if labels.is_some_and(|l| l.contains_key(label)) {
            out.push(Pending::FluxLabel(label));
        }
    }
    out
}

/// The set's state for the handover.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SetState {
    /// Ready=True for the generation applied.
    Ready,
    /// Not yet: what it says (no status yet, an older generation, its Ready condition).
    NotYet(String),
}

/// Whether a set whose generation is `generation` and status `status` is Ready for that
/// generation: `status.observedGeneration` and the Ready condition's own observedGeneration
/// (when it has one) are the generation, and Ready is True.
pub fn set_state(status: Option<&ApplySetStatus>, generation: Option<i64>) -> SetState {
    let Some(status) = status else {
        return SetState::NotYet("no status yet (is the operator running?)".into());
    };
    if generation.is_some() && status.observed_generation != generation {
        return SetState::NotYet(format!(
            "the operator has not handled generation {} yet",
            generation.unwrap_or_default()
        ));
    }
    let Some(ready) = status.conditions.iter().find(|c| c.type_ == "Ready") else {
        return SetState::NotYet("no Ready condition yet".into());
    };
    let current = ready.observed_generation.is_none() || ready.observed_generation == generation;
    if ready.status == "True" && current {
        SetState::Ready
    } else {
        SetState::NotYet(format!(
            "Ready={} {}: {}",
            ready.status, ready.reason, ready.message
        ))
    }
}

/// Why a Kustomization may not be deleted yet: `None` when it is suspended with
/// `deletionPolicy: Orphan` (kustomize-controller's finalizer then deletes nothing), else
/// what is not so (someone resumed it, or changed its policy, since it was suspended).
pub fn safe_to_delete(kustomization: &Value) -> Option<String> {
    let suspended = kustomization.pointer("/spec/suspend") == Some(&Value::Bool(true));
    let policy = kustomization
        .pointer("/spec/deletionPolicy")
        .and_then(Value::as_str);
    match (suspended, policy) {
        (true, Some("Orphan")) => None,
        (false, _) => Some("spec.suspend is no longer true".into()),
        (true, other) => Some(format!(
            "spec.deletionPolicy is {}, not Orphan",
            other.map_or_else(|| "unset".to_owned(), |p| format!("{p:?}"))
        )),
    }
}

/// The annotation in which the handover records, on the Kustomization it suspends, the
/// `spec.suspend` and `spec.deletionPolicy` it had (JSON: `{"suspend":false,
/// "deletionPolicy":null}`): a handover run again converts the Kustomization as it was, not
/// as suspended, and the way back restores them.
pub const ANNOTATION_ORIGINAL: &str = "applyset.dev/handover-original";

/// A Kustomization's `spec.suspend` and `spec.deletionPolicy` before the handover.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Original {
    pub suspend: bool,
    #[serde(rename = "deletionPolicy")]
    pub deletion_policy: Option<String>,
}

/// The recorded original of `kustomization`, if a handover suspended it (an annotation that
/// does not parse is not one).
pub fn recorded(kustomization: &Value) -> Option<Original> {
    let text = kustomization
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(ANNOTATION_ORIGINAL))
        .and_then(Value::as_str)?;
    serde_json::from_str(text).ok()
}

/// What `kustomization` had before the handover: the recorded original, else its spec now.
pub fn original(kustomization: &Value) -> Original {
    recorded(kustomization).unwrap_or_else(|| Original {
        suspend: kustomization.pointer("/spec/suspend") == Some(&Value::Bool(true)),
        deletion_policy: kustomization
            .pointer("/spec/deletionPolicy")
            .and_then(Value::as_str)
            .map(str::to_owned),
    })
}

/// Puts the recorded original `spec.suspend` and `spec.deletionPolicy` back into a
/// Kustomization read from the cluster (for its conversion); unchanged without a record.
pub fn restore_original(kustomization: &mut Value) {
    let Some(original) = recorded(kustomization) else {
        return;
    };
    if let Some(spec) = kustomization.get_mut("spec").and_then(Value::as_object_mut) {
        spec.insert("suspend".into(), Value::Bool(original.suspend));
        match original.deletion_policy {
            Some(p) => spec.insert("deletionPolicy".into(), Value::String(p)),
            None => spec.remove("deletionPolicy"),
        };
    }
}

/// The merge patch that makes kustomize-controller stop applying and, on deletion, delete
/// nothing: `spec.suspend: true` (its finalizer deletes nothing when suspended) and
/// `spec.deletionPolicy: Orphan` (nor when resumed later), with the original recorded
/// ([`ANNOTATION_ORIGINAL`]) unless a record is there already (a handover run again).
///
/// The patch also requests a reconcile with `token` (Flux's `reconcile.fluxcd.io/requestedAt`),
/// which kustomize-controller records in `status.lastHandledReconcileAt` at the end of every
/// reconcile, a suspended one included: [`acknowledged`] says when it has.
pub fn suspend_patch(kustomization: &Value, token: &str) -> Result<Value, serde_json::Error> {
    let mut annotations = serde_json::Map::new();
    annotations.insert(RECONCILE_REQUESTED_AT.into(), Value::String(token.into()));
    if recorded(kustomization).is_none() {
        let text = serde_json::to_string(&original(kustomization))?;
        annotations.insert(ANNOTATION_ORIGINAL.into(), Value::String(text));
    }
    Ok(serde_json::json!({
        "metadata": {"annotations": annotations},
        "spec": {"suspend": true, "deletionPolicy": "Orphan"},
    }))
}

/// Flux's annotation that asks its controllers for a reconcile now (what `flux reconcile`
/// sets); its value comes back in `status.lastHandledReconcileAt` once handled.
pub const RECONCILE_REQUESTED_AT: &str = "reconcile.fluxcd.io/requestedAt";

/// Whether kustomize-controller has handled the reconcile requested with `token`: it runs one
/// reconcile of an object at a time, so once it records the token of the request made with
/// the suspension, it has seen `suspend: true` and no apply of its own is still in flight.
pub fn acknowledged(kustomization: &Value, token: &str) -> bool {
    kustomization
        .pointer("/status/lastHandledReconcileAt")
        .and_then(Value::as_str)
        == Some(token)
}

/// What Flux applied since step 1 read `read`, if anything: the acknowledged suspended
/// Kustomization `live` must have the same `status.lastAppliedRevision` and
/// `status.inventory`, else Flux applied another revision before it saw the suspension (and
/// the set's pin would be stale). `None` when both are unchanged.
pub fn applied_since(read: &Value, live: &Value) -> Option<String> {
    let revision = |k: &Value| k.pointer("/status/lastAppliedRevision").cloned();
    let inventory = |k: &Value| k.pointer("/status/inventory").cloned();
    if revision(read) != revision(live) {
        let shown = |v: Option<Value>| v.map_or_else(|| "none".to_owned(), |v| v.to_string());
        return Some(format!(
            "status.lastAppliedRevision is {}, not {} as read",
            shown(revision(live)),
            shown(revision(read))
        ));
    }
    (inventory(read) != inventory(live)).then(|| "status.inventory is not the one read".to_owned())
}

/// Why `kustomization` (its metadata) is applied by another Kustomization, if it is: Flux's
/// owner labels, or a managedFields entry of kustomize-controller (its server-side apply; its
/// own status and finalizer are written as `gotk-kustomize-controller`).
pub fn applied_by_parent(meta: &ObjectMeta) -> Option<String> {
    let labels = meta.labels.as_ref();
    for label in FLUX_LABELS {
        if let Some(value) = labels.and_then(|l| l.get(label)) {
            return Some(format!("it carries the label {label}: {value}"));
        }
    }
    meta.managed_fields
        .iter()
        .flatten()
        .any(|e| e.manager.as_deref() == Some(FLUX_MANAGER))
        .then(|| format!("{FLUX_MANAGER} manages fields of it (metadata.managedFields)"))
}

/// The refusal of a Kustomization applied by another one (`why`: [`applied_by_parent`]).
pub fn parent_refusal(why: &str) -> String {
    format!(
        "it is applied by another Kustomization ({why}): once deleted, its parent would re-create it and kustomize-controller would fight the set, and its removal from Git later would run its finalizer and delete the objects. Follow the GitOps flow of docs/migrating-from-flux.md instead: suspend it in Git (spec.suspend: true, spec.deletionPolicy: Orphan), commit the converted sets, then remove the Kustomizations from Git"
    )
}

/// The Kustomizations in `listed` whose `spec.dependsOn` names `from` (an entry without a
/// namespace names one in the dependent's namespace), as `namespace/name`, sorted.
pub fn dependents(listed: &[Value], from: &FluxRef) -> Vec<String> {
    let mut out: Vec<String> = listed
        .iter()
        .filter_map(|k| {
            let namespace = k.pointer("/metadata/namespace").and_then(Value::as_str)?;
            let name = k.pointer("/metadata/name").and_then(Value::as_str)?;
            let depends = k.pointer("/spec/dependsOn").and_then(Value::as_array)?;
            depends
                .iter()
                .any(|d| {
                    let ns = d
                        .get("namespace")
                        .and_then(Value::as_str)
                        .unwrap_or(namespace);
                    d.get("name").and_then(Value::as_str) == Some(from.name.as_str())
                        && ns == from.namespace
                })
                .then(|| format!("{namespace}/{name}"))
        })
        .collect();
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ManagedFieldsEntry, Time};
    use serde_json::json;

    fn parsed(id: &str) -> Option<(String, String, String, String)> {
        parse_id(id)
    }

    fn four(ns: &str, name: &str, group: &str, kind: &str) -> (String, String, String, String) {
        (ns.into(), name.into(), group.into(), kind.into())
    }

    #[test]
    fn the_suspension_requests_a_reconcile_whose_handling_acknowledges_it() {
        let k = json!({"spec": {"suspend": false}});
        let patch = suspend_patch(&k, "applyset-handover-1").expect("patch");
        assert_eq!(
            patch["spec"],
            json!({"suspend": true, "deletionPolicy": "Orphan"})
        );
        assert_eq!(
            patch["metadata"]["annotations"][RECONCILE_REQUESTED_AT],
            "applyset-handover-1"
        );
        assert!(patch["metadata"]["annotations"][ANNOTATION_ORIGINAL].is_string());
        assert!(!acknowledged(&k, "applyset-handover-1"));
        let earlier = json!({"status": {"lastHandledReconcileAt": "applyset-handover-0"}});
        assert!(!acknowledged(&earlier, "applyset-handover-1"));
        let handled = json!({"status": {"lastHandledReconcileAt": "applyset-handover-1"}});
        assert!(acknowledged(&handled, "applyset-handover-1"));
    }

    #[test]
    fn inventory_ids_parse_as_cli_utils_does() {
        assert_eq!(
            parsed("team_web__ConfigMap"),
            Some(four("team", "web", "", "ConfigMap"))
        );
        assert_eq!(
            parsed("team_web_apps_Deployment"),
            Some(four("team", "web", "apps", "Deployment"))
        );
        // Cluster-scoped: an empty namespace.
        assert_eq!(
            parsed("_team__Namespace"),
            Some(four("", "team", "", "Namespace"))
        );
        // An RBAC name's colon is written as a double underscore.
        assert_eq!(
            parsed("_system__web_rbac.authorization.k8s.io_ClusterRole"),
            Some(four(
                "",
                "system:web",
                "rbac.authorization.k8s.io",
                "ClusterRole"
            ))
        );
        // A name with an underscore-free dotted group and a dashed name.
        assert_eq!(
            parsed("team_my-app_example.com_Widget"),
            Some(four("team", "my-app", "example.com", "Widget"))
        );
        for bad in [
            "",
            "team",
            "team_web",
            "team_web_apps",
            "team__apps_Deployment",
            "a_b_c_",
        ] {
            assert_eq!(parsed(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn an_inventory_is_read_with_its_versions_and_errors_name_the_entry() {
        let k = json!({"status": {"inventory": {"entries": [
            {"id": "team_web_apps_Deployment", "v": "v1"},
            {"id": "team_conf__ConfigMap", "v": "v1"},
        ]}}});
        let ids = inventory(&k).expect("inventory");
        assert_eq!(ids.len(), 2);
        assert_eq!(ids[0].kind, "Deployment");
        assert_eq!(ids[0].version, "v1");
        assert_eq!(ids[0].to_string(), "Deployment.apps team/web");
        assert_eq!(ids[1].to_string(), "ConfigMap team/conf");
        assert_eq!(inventory(&json!({"status": {}})), Ok(vec![]));
        assert_eq!(inventory(&json!({})), Ok(vec![]));
        let bad = json!({"status": {"inventory": {"entries": [{"id": "nope", "v": "v1"}]}}});
        assert_eq!(
            inventory(&bad),
            Err(InventoryError::Id {
                index: 0,
                id: "nope".into()
            })
        );
        let no_v = json!({"status": {"inventory": {"entries": [{"id": "a_b__C"}]}}});
        assert_eq!(
            inventory(&no_v),
            Err(InventoryError::Field {
                index: 0,
                field: "v"
            })
        );
        let many: Vec<Value> = (0..=MAX_INVENTORY)
            .map(|i| json!({"id": format!("a_n{i}__ConfigMap"), "v": "v1"}))
            .collect();
        let big = json!({"status": {"inventory": {"entries": many}}});
        assert_eq!(
            inventory(&big),
            Err(InventoryError::TooLarge {
                count: MAX_INVENTORY + 1
            })
        );
    }

    fn entry(manager: &str, operation: &str, subresource: Option<&str>) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            manager: Some(manager.into()),
            operation: Some(operation.into()),
            subresource: subresource.map(Into::into),
            ..ManagedFieldsEntry::default()
        }
    }

    fn meta(labels: &[(&str, &str)], managers: Vec<ManagedFieldsEntry>) -> ObjectMeta {
        ObjectMeta {
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            ),
            managed_fields: Some(managers),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn an_object_is_handed_over_when_only_the_set_holds_it() {
        let set = "applyset-abc-v1";
        let done = meta(
            &[(LABEL_PART_OF, set)],
            vec![entry("applyset.dev/ns/team/web", "Apply", None)],
        );
        assert_eq!(pending(Some(&done), set), vec![]);
        assert_eq!(pending(None, set), vec![Pending::Missing]);
        let flux = meta(
            &[
                ("kustomize.toolkit.fluxcd.io/name", "web"),
                ("kustomize.toolkit.fluxcd.io/namespace", "team"),
            ],
            vec![
                entry(FLUX_MANAGER, "Apply", None),
                entry(FLUX_MANAGER, "Update", Some("status")),
                entry("kube-controller-manager", "Update", Some("status")),
            ],
        );
        assert_eq!(
            pending(Some(&flux), set),
            vec![
                Pending::NotPartOf,
                Pending::FluxFields(vec!["Apply".into(), "Update /status".into()]),
                Pending::FluxLabel("kustomize.toolkit.fluxcd.io/name"),
                Pending::FluxLabel("kustomize.toolkit.fluxcd.io/namespace"),
            ]
        );
        // Another set's label is not this set's.
        let other = meta(&[(LABEL_PART_OF, "applyset-other-v1")], vec![]);
        assert_eq!(pending(Some(&other), set), vec![Pending::NotPartOf]);
        // A manager whose name only starts with kustomize-controller is not it.
        let near = meta(
            &[(LABEL_PART_OF, set)],
            vec![entry("kustomize-controller-x", "Apply", None)],
        );
        assert_eq!(pending(Some(&near), set), vec![]);
        assert_eq!(
            Pending::FluxFields(vec!["Apply".into()]).to_string(),
            "kustomize-controller still owns fields of it (Apply)"
        );
    }

    fn status(observed: Option<i64>, ready: Option<(&str, Option<i64>)>) -> ApplySetStatus {
        ApplySetStatus {
            observed_generation: observed,
            conditions: ready
                .map(|(s, g)| Condition {
                    type_: "Ready".into(),
                    status: s.into(),
                    reason: "Reason".into(),
                    message: "message".into(),
                    observed_generation: g,
                    last_transition_time: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
                })
                .into_iter()
                .collect(),
            ..ApplySetStatus::default()
        }
    }

    #[test]
    fn a_set_is_ready_only_for_its_generation() {
        let g = Some(2);
        assert_eq!(
            set_state(Some(&status(g, Some(("True", g)))), g),
            SetState::Ready
        );
        assert_eq!(
            set_state(Some(&status(g, Some(("True", None)))), g),
            SetState::Ready
        );
        assert!(matches!(set_state(None, g), SetState::NotYet(_)));
        assert!(matches!(
            set_state(Some(&status(Some(1), Some(("True", Some(1))))), g),
            SetState::NotYet(m) if m.contains("generation 2")
        ));
        assert!(matches!(
            set_state(Some(&status(g, Some(("True", Some(1))))), g),
            SetState::NotYet(_)
        ));
        assert!(matches!(
            set_state(Some(&status(g, Some(("False", g)))), g),
            SetState::NotYet(m) if m == "Ready=False Reason: message"
        ));
        assert!(matches!(
            set_state(Some(&status(g, None)), g),
            SetState::NotYet(_)
        ));
    }

    #[test]
    fn a_kustomization_is_deleted_only_suspended_with_orphan() {
        let k = |spec: Value| json!({ "spec": spec });
        assert_eq!(
            safe_to_delete(&k(json!({"suspend": true, "deletionPolicy": "Orphan"}))),
            None
        );
        assert!(
            safe_to_delete(&k(json!({"suspend": false, "deletionPolicy": "Orphan"}))).is_some()
        );
        assert!(safe_to_delete(&k(json!({"deletionPolicy": "Orphan"}))).is_some());
        assert_eq!(
            safe_to_delete(&k(json!({"suspend": true, "deletionPolicy": "Delete"}))),
            Some("spec.deletionPolicy is \"Delete\", not Orphan".into())
        );
        assert_eq!(
            safe_to_delete(&k(json!({"suspend": true}))),
            Some("spec.deletionPolicy is unset, not Orphan".into())
        );
        // The patch makes a Kustomization safe to delete.
        let mut patched = k(json!({"suspend": false, "prune": true}));
        let patch = suspend_patch(&patched, "t").expect("patch");
        json_patch_merge(&mut patched, &patch);
        assert_eq!(safe_to_delete(&patched), None);
    }

    #[test]
    fn the_original_is_recorded_once_and_restored_for_the_conversion() {
        let mut k = json!({"metadata": {"name": "web"},
            "spec": {"prune": true, "deletionPolicy": "Delete"}});
        let first = suspend_patch(&k, "t1").expect("patch");
        let text = first["metadata"]["annotations"][ANNOTATION_ORIGINAL]
            .as_str()
            .expect("recorded");
        assert_eq!(text, r#"{"suspend":false,"deletionPolicy":"Delete"}"#);
        json_patch_merge(&mut k, &first);
        assert_eq!(k["spec"]["suspend"], json!(true));
        // Run again: the record stays the first one.
        let again = suspend_patch(&k, "t2").expect("patch");
        assert!(
            again["metadata"]["annotations"]
                .get(ANNOTATION_ORIGINAL)
                .is_none(),
            "{again}"
        );
        assert_eq!(
            original(&k),
            Original {
                suspend: false,
                deletion_policy: Some("Delete".into())
            }
        );
        // The conversion reads the Kustomization as it was.
        let mut read = k.clone();
        restore_original(&mut read);
        assert_eq!(
            read["spec"],
            json!({"prune": true, "suspend": false, "deletionPolicy": "Delete"})
        );
        // Without a deletionPolicy before, none after; without a record, nothing changes.
        let mut unset = json!({"spec": {"suspend": true, "deletionPolicy": "Orphan"}, "metadata": {
            "annotations": {ANNOTATION_ORIGINAL: r#"{"suspend":false,"deletionPolicy":null}"#}}});
        restore_original(&mut unset);
        assert_eq!(unset["spec"], json!({"suspend": false}));
        let mut plain = json!({"spec": {"suspend": true}});
        restore_original(&mut plain);
        assert_eq!(plain["spec"], json!({"suspend": true}));
        // A record that does not parse is not one.
        let bad = json!({"spec": {"suspend": true}, "metadata": {"annotations": {ANNOTATION_ORIGINAL: "x"}}});
        assert_eq!(recorded(&bad), None);
        assert!(original(&bad).suspend);
    }

    #[test]
    fn objects_whose_marks_skip_them_or_merge_keep_fluxs_fields() {
        let set = "applyset-abc-v1";
        let flux_entries = || vec![entry(FLUX_MANAGER, "Apply", None)];
        let owner = ("kustomize.toolkit.fluxcd.io/name", "web");
        for (key, value, exempted) in [
            (
                "kustomize.toolkit.fluxcd.io/reconcile",
                "disabled",
                Exempt::Skipped("reconcile: disabled"),
            ),
            (
                "applyset.dev/reconcile",
                "Disabled",
                Exempt::Skipped("reconcile: disabled"),
            ),
            (
                "kustomize.toolkit.fluxcd.io/ssa",
                "Ignore",
                Exempt::Skipped("ssa: Ignore"),
            ),
            ("applyset.dev/ssa", "ignore", Exempt::Skipped("ssa: Ignore")),
        ] {
            let mut m = meta(&[owner], flux_entries());
            m.annotations = Some([(key.to_owned(), value.to_owned())].into());
            assert_eq!(exempt(&m), Some(exempted), "{key}");
            assert_eq!(pending(Some(&m), set), vec![], "{key}");
            // As a label too (Flux reads either).
            let m = meta(&[owner, (key, value)], flux_entries());
            assert_eq!(pending(Some(&m), set), vec![], "{key} label");
        }
        // Merge: the label is still needed, Flux's fields and labels are not.
        let mut merge = meta(&[owner], flux_entries());
        merge.annotations = Some(
            [(
                "kustomize.toolkit.fluxcd.io/ssa".to_owned(),
                "Merge".to_owned(),
            )]
            .into(),
        );
        assert_eq!(exempt(&merge), Some(Exempt::Merge));
        assert_eq!(pending(Some(&merge), set), vec![Pending::NotPartOf]);
        let merged = meta(
            &[owner, (LABEL_PART_OF, set), ("applyset.dev/ssa", "Merge")],
            flux_entries(),
        );
        assert_eq!(pending(Some(&merged), set), vec![]);
        assert!(
            Exempt::Merge
                .to_string()
                .contains("keeps kustomize-controller's fields")
        );
        // IfNotPresent, Override, an empty value: no exemption.
        for value in ["IfNotPresent", "Override", ""] {
            let m = meta(
                &[owner, ("kustomize.toolkit.fluxcd.io/ssa", value)],
                flux_entries(),
            );
            assert_eq!(exempt(&m), None, "{value}");
            assert_eq!(pending(Some(&m), set).len(), 3, "{value}");
        }
    }

    #[test]
    fn a_kustomization_applied_by_another_is_refused() {
        let labelled = meta(&[("kustomize.toolkit.fluxcd.io/name", "apps")], vec![]);
        assert_eq!(
            applied_by_parent(&labelled).as_deref(),
            Some("it carries the label kustomize.toolkit.fluxcd.io/name: apps")
        );
        let ns_label = meta(
            &[("kustomize.toolkit.fluxcd.io/namespace", "flux-system")],
            vec![],
        );
        assert!(applied_by_parent(&ns_label).is_some());
        let applied = meta(&[], vec![entry(FLUX_MANAGER, "Apply", None)]);
        assert!(applied_by_parent(&applied).is_some_and(|w| w.contains("managedFields")));
        // Its own status and finalizer writes are not a parent's.
        let own = meta(
            &[("app", "web")],
            vec![
                entry("gotk-kustomize-controller", "Update", Some("status")),
                entry("gotk-kustomize-controller", "Update", None),
                entry("kubectl-client-side-apply", "Update", None),
            ],
        );
        assert_eq!(applied_by_parent(&own), None);
        let text = parent_refusal("x");
        assert!(
            text.contains("Follow the GitOps flow of docs/migrating-from-flux.md"),
            "{text}"
        );
        assert!(text.contains("spec.deletionPolicy: Orphan"), "{text}");
    }

    #[test]
    fn an_object_flux_never_owned_is_exempt() {
        assert_eq!(
            never_flux(&meta(&[("app", "web")], vec![])),
            Some(Exempt::NotFlux)
        );
        let other = meta(
            &[],
            vec![entry("kubectl-client-side-apply", "Update", None)],
        );
        assert_eq!(never_flux(&other), Some(Exempt::NotFlux));
        let labelled = meta(&[("kustomize.toolkit.fluxcd.io/name", "web")], vec![]);
        assert_eq!(never_flux(&labelled), None);
        let applied = meta(&[], vec![entry(FLUX_MANAGER, "Apply", None)]);
        assert_eq!(never_flux(&applied), None);
        assert_eq!(
            Exempt::NotFlux.to_string(),
            "not made by kustomize-controller: the set leaves it as Flux did"
        );
    }

    #[test]
    fn what_flux_applied_while_being_suspended_is_seen() {
        let k = |rev: &str, id: &str| {
            json!({"status": {"lastAppliedRevision": rev,
                "inventory": {"entries": [{"id": id, "v": "v1"}]}}})
        };
        let read = k("main@sha1:aaa", "team_web__ConfigMap");
        let mut live = read.clone();
        live["status"]["lastHandledReconcileAt"] = json!("t");
        assert_eq!(applied_since(&read, &live), None);
        let moved = applied_since(&read, &k("main@sha1:bbb", "team_web__ConfigMap"));
        assert_eq!(
            moved.as_deref(),
            Some("status.lastAppliedRevision is \"main@sha1:bbb\", not \"main@sha1:aaa\" as read")
        );
        let other = applied_since(&read, &k("main@sha1:aaa", "team_other__ConfigMap"));
        assert_eq!(
            other.as_deref(),
            Some("status.inventory is not the one read")
        );
        let gone = applied_since(&read, &json!({"status": {}}));
        assert!(gone.is_some_and(|w| w.contains("is none")));
    }

    #[test]
    fn the_dependents_are_those_whose_depends_on_names_it() {
        let from = FluxRef {
            kind: "Kustomization".into(),
            namespace: "team".into(),
            name: "web".into(),
        };
        let k = |ns: &str, name: &str, depends: Value| json!({"metadata": {"namespace": ns, "name": name}, "spec": {"dependsOn": depends}});
        let listed = vec![
            k("team", "b", json!([{"name": "web"}])),
            k("other", "c", json!([{"name": "web", "namespace": "team"}])),
            k("other", "d", json!([{"name": "web"}])),
            k(
                "team",
                "a",
                json!([{"name": "db"}, {"name": "web", "namespace": "team"}]),
            ),
            json!({"metadata": {"namespace": "team", "name": "e"}, "spec": {}}),
            k("team", "web", json!([{"name": "db"}])),
        ];
        assert_eq!(
            dependents(&listed, &from),
            vec!["other/c", "team/a", "team/b"]
        );
        assert_eq!(dependents(&[], &from), Vec::<String>::new());
    }

    /// RFC 7386 merge, for the test of the patch.
    fn json_patch_merge(target: &mut Value, patch: &Value) {
        if let (Some(t), Some(p)) = (target.as_object_mut(), patch.as_object()) {
            for (k, v) in p {
                if v.is_object() {
                    json_patch_merge(t.entry(k.clone()).or_insert(json!({})), v);
                } else {
                    t.insert(k.clone(), v.clone());
                }
            }
        }
    }
}

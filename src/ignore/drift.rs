//! What a member's apply does with its ignored fields, given the live object (Flux's
//! `computeDriftedPaths` and `isFieldOwnedByOtherApplyManager`, fluxcd/pkg/ssa). Pure.
//!
//! For each ignored path whose value differs between the live object and the body (or is
//! present in one only):
//! - another Apply manager (not ours, not a subresource entry) owns it in the live
//!   `managedFields` → the body gives it up (**strip**: removed from the body);
//! - our manager owns it → the body carries the live value (**adopt**), so server-side apply
//!   neither removes nor resets it (`replicas` would otherwise fall back to 1);
//! - a manager that Override takes over (`kubectl*`, `before-first-apply`, the set's own
//!   Update entry: `applyset::field_managers::takes_over_for`, and the managers the set names
//!   in `spec.takeOverFieldManagers`; not under `ssa: Merge`) owns
//!   it → adopt, as for our
//!   own: Override makes its fields ours right after this apply, and a field ours but not
//!   sent would then be removed;
//! - otherwise (an Update manager such as an HPA through `/scale`, or no one) → strip:
//!   server-side apply leaves alone a field we do not own, so the live value stays and
//!   nothing is written. Flux adopts here too; the value is the same, but adopting would make
//!   us co-owner with a write (a new resourceVersion, "configured") each time the autoscaler
//!   moves it.
//!
//! A path through a list is mapped to `managedFields` by the live item's merge key
//! (`k:{"name":"app"}`), as Flux resolves it; a path that cannot be mapped counts as ours
//! (adopt), as in Flux. A path equal on both sides is left in the body as it is.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
use serde_json::{Map, Value};

use super::{Pointer, pointer::index};
use crate::applyset::field_managers::{APPLY, Takers};

/// What [`settle`] did to a body.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Settled {
    /// Paths removed from the body.
    pub stripped: Vec<String>,
    /// Paths set to the live value.
    pub adopted: Vec<String>,
}

impl Settled {
    pub fn is_empty(&self) -> bool {
        self.stripped.is_empty() && self.adopted.is_empty()
    }
}

/// Settles `body` against `live` for `paths`, as field manager `manager` (see the module);
/// `overrides`: Override takes the `kubectl*` and `before-first-apply` managers' fields over
/// after this apply (false under `ssa: Merge`, where they stay theirs and are stripped).
pub fn settle(
    body: &mut Value,
    live: &Value,
    paths: &[Pointer],
    manager: &str,
    overrides: bool,
) -> Settled {
    settle_for(body, live, paths, Takers::new(manager, &[]), overrides)
}

/// [`settle`] for a set that also takes over the managers `takers` names
/// (`spec.takeOverFieldManagers`): their fields count as the set's, as Override's do.
pub fn settle_for(
    body: &mut Value,
    live: &Value,
    paths: &[Pointer],
    takers: Takers<'_>,
    overrides: bool,
) -> Settled {
    let manager = takers.owner;
    let entries = main_entries(live);
    let fields: Vec<(&str, &Map<String, Value>)> =
        entries.iter().map(|e| (e.manager, e.fields)).collect();
    let mut settled = Settled::default();
    for path in paths {
        let live_value = path.get(live);
        if path.get(body) == live_value {
            continue;
        }
        let segments = fields_v1_segments(live, path, &fields);
        let owned_by = |pick: &dyn Fn(&Entry) -> bool| {
            segments.as_ref().is_some_and(|s| {
                (entries.iter())
                    .filter(|e| pick(e))
                    .any(|e| contains(e.fields, s))
            })
        };
        let ours_now = |e: &Entry| {
            (e.manager == manager && e.operation == APPLY) || (overrides && e.taken_over_by(takers))
        };
        let others = owned_by(&|e| e.operation == APPLY && !ours_now(e));
        let ours = segments.is_none() || owned_by(&ours_now);
        match live_value {
            Some(v) if ours && !others => {
                if path.set(body, v.clone()) {
                    settled.adopted.push(path.to_string());
                }
            }
            _ => {
                path.remove(body);
                settled.stripped.push(path.to_string());
            }
        }
    }
    settled
}

/// One entry of the live object's `managedFields` without a subresource.
struct Entry<'a> {
    manager: &'a str,
    operation: &'a str,
    fields: &'a Map<String, Value>,
}

impl Entry<'_> {
    /// Whether Override takes this entry over for `takers` (the set's manager, and the
    /// managers the set names).
    fn taken_over_by(&self, takers: Takers<'_>) -> bool {
        takers.takes(&ManagedFieldsEntry {
            manager: Some(self.manager.to_string()),
            operation: Some(self.operation.to_string()),
            ..ManagedFieldsEntry::default()
        })
    }
}

/// The live object's `managedFields` entries without a subresource.
fn main_entries(live: &Value) -> Vec<Entry<'_>> {
    let Some(entries) = live
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
    else {
        return Vec::new();
    };
    entries
        .iter()
        .filter(|e| {
            e.get("subresource")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
        })
        .filter_map(|e| {
            Some(Entry {
                manager: e.get("manager").and_then(Value::as_str)?,
                operation: e.get("operation").and_then(Value::as_str)?,
                fields: e.get("fieldsV1").and_then(Value::as_object)?,
            })
        })
        .collect()
}

/// The fieldsV1 segments of `path` (`f:spec`, `f:replicas`; a list index as the `k:{…}` key
/// of the live item it points at, found among the entries' keys at that level), or `None`
/// when a list index cannot be mapped.
fn fields_v1_segments(
    live: &Value,
    path: &Pointer,
    entries: &[(&str, &Map<String, Value>)],
) -> Option<Vec<String>> {
    let mut segments: Vec<String> = Vec::new();
    let mut at = Some(live);
    for token in path.tokens() {
        let list = at.and_then(Value::as_array);
        match (list, index(token)) {
            (Some(items), Some(i)) => {
                let item = items.get(i)?.as_object()?;
                let key = merge_key(item, &segments, entries)?;
                segments.push(key);
                at = items.get(i);
            }
            _ => {
                segments.push(format!("f:{token}"));
                at = at.and_then(|v| v.get(token));
            }
        }
    }
    Some(segments)
}

/// The `k:{…}` key, among the entries' keys under `parent`, whose fields all equal `item`'s.
fn merge_key(
    item: &Map<String, Value>,
    parent: &[String],
    entries: &[(&str, &Map<String, Value>)],
) -> Option<String> {
    entries
        .iter()
        .filter_map(|(_, fields)| walk(fields, parent))
        .flat_map(|node| node.keys())
        .filter(|k| k.starts_with("k:"))
        .find(|k| {
            serde_json::from_str::<Map<String, Value>>(&k[2..])
                .is_ok_and(|kv| kv.iter().all(|(k, v)| item.get(k) == Some(v)))
        })
        .cloned()
}

fn walk<'f>(fields: &'f Map<String, Value>, segments: &[String]) -> Option<&'f Map<String, Value>> {
    segments
        .iter()
        .try_fold(fields, |node, s| node.get(s).and_then(Value::as_object))
}

/// Whether fieldsV1 `fields` holds the field at `segments`.
fn contains(fields: &Map<String, Value>, segments: &[String]) -> bool {
    match segments.split_last() {
        Some((last, parent)) => walk(fields, parent).is_some_and(|n| n.contains_key(last)),
        None => false,
    }
}

#[cfg(test)]
mod tests;

//! What a member's apply does with its ignored fields, given the live object (Flux's
//! `computeDriftedPaths` and `isFieldOwnedByOtherApplyManager`, fluxcd/pkg/ssa). Pure.
//!
//! For each ignored path whose value differs between the live object and the body (or is
//! present in one only):
//! - another Apply manager (not ours, not a subresource entry) owns it in the live
//!   `managedFields` → the body gives it up (**strip**: removed from the body);
//! - our manager owns it → the body carries the live value (**adopt**), so server-side apply
//!   neither removes nor resets it (`replicas` would otherwise fall back to 1);
//! - nobody's Apply entry owns it (an Update manager such as an HPA through `/scale` or
//!   `kubectl edit` took it, or no one) → strip: server-side apply leaves alone a field we
//!   do not own, so the live value stays and nothing is written. Flux adopts here too; the
//!   value is the same, but adopting would make us co-owner with a write (a new
//!   resourceVersion, "configured") each time the autoscaler moves it.
//!
//! A path through a list is mapped to `managedFields` by the live item's merge key
//! (`k:{"name":"app"}`), as Flux resolves it; a path that cannot be mapped counts as ours
//! (adopt), as in Flux. A path equal on both sides is left in the body as it is.

use serde_json::{Map, Value};

use super::{Pointer, pointer::index};

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

/// Settles `body` against `live` for `paths`, as field manager `manager` (see the module).
pub fn settle(body: &mut Value, live: &Value, paths: &[Pointer], manager: &str) -> Settled {
    let entries = apply_entries(live);
    let mut settled = Settled::default();
    for path in paths {
        let live_value = path.get(live);
        if path.get(body) == live_value {
            continue;
        }
        let segments = fields_v1_segments(live, path, &entries);
        let others = segments.as_ref().is_some_and(|s| {
            (entries.iter())
                .filter(|(m, _)| *m != manager)
                .any(|(_, f)| contains(f, s))
        });
        let ours = segments.as_ref().is_none_or(|s| {
            (entries.iter())
                .filter(|(m, _)| *m == manager)
                .any(|(_, f)| contains(f, s))
        });
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

/// The live object's Apply entries of `managedFields` without a subresource: (manager,
/// fieldsV1).
fn apply_entries(live: &Value) -> Vec<(&str, &Map<String, Value>)> {
    let Some(entries) = live
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
    else {
        return Vec::new();
    };
    entries
        .iter()
        .filter(|e| e.get("operation").and_then(Value::as_str) == Some("Apply"))
        .filter(|e| {
            e.get("subresource")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
        })
        .filter_map(|e| {
            let manager = e.get("manager").and_then(Value::as_str)?;
            let fields = e.get("fieldsV1").and_then(Value::as_object)?;
            Some((manager, fields))
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

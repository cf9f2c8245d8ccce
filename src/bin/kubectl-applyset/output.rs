//! Output helpers of `build` and `diff`: objects as YAML, Secret values masked as `kubectl
//! diff` masks them, unified diffs and the names `kubectl diff` gives objects. (What a diff
//! leaves out of an object is the library's: `applyset_operator::engine::shown`.)

use std::collections::BTreeSet;

use applyset_operator::{api::MemberRef, render::Member};
use serde_json::Value;

use crate::error::CliError;

/// The body the operator applies for `member`: its object with the `part-of` label.
pub fn applied_object(member: &Member, id: &str) -> Value {
    applyset_operator::engine::body(member, id)
}

/// `v1.ConfigMap.team.a`, `apps.v1.Deployment.team.web`, `v1.Namespace.team`: how an object
/// is named in the diff's headers (as `kubectl diff` names its files).
pub fn file_name(api_version: &str, r: &MemberRef) -> String {
    let mut name = format!("{}.{}", api_version.replace('/', "."), r.kind);
    if let Some(ns) = &r.namespace {
        name.push('.');
        name.push_str(ns);
    }
    name.push('.');
    name.push_str(&r.name);
    name
}

/// Whether `v` is a core Secret.
pub fn is_secret(v: &Value) -> bool {
    v.get("apiVersion").and_then(Value::as_str) == Some("v1")
        && v.get("kind").and_then(Value::as_str) == Some("Secret")
}

/// Masks the values of Secrets as `kubectl diff` does: `***` where both sides hold the same
/// value (or only one side has the key), `*** (before)` / `*** (after)` where it changes.
pub fn mask(before: Option<&mut Value>, after: Option<&mut Value>) {
    let (mut before, mut after) = (
        before.filter(|v| is_secret(v)),
        after.filter(|v| is_secret(v)),
    );
    for field in ["data", "stringData"] {
        let keys: BTreeSet<String> = [before.as_deref(), after.as_deref()]
            .into_iter()
            .flatten()
            .filter_map(|v| v.get(field).and_then(Value::as_object))
            .flat_map(|m| m.keys().cloned())
            .collect();
        for key in keys {
            let old = before
                .as_deref()
                .and_then(|v| v.get(field))
                .and_then(|m| m.get(&key))
                .cloned();
            let new = after
                .as_deref()
                .and_then(|v| v.get(field))
                .and_then(|m| m.get(&key))
                .cloned();
            let changed = old.is_some() && new.is_some() && old != new;
            let set = |side: &mut Option<&mut Value>, text: &str| {
                if let Some(slot) = side
                    .as_deref_mut()
                    .and_then(|v| v.get_mut(field))
                    .and_then(|m| m.get_mut(&key))
                {
                    *slot = Value::String(text.to_string());
                }
            };
            if changed {
                set(&mut before, "*** (before)");
                set(&mut after, "*** (after)");
            } else {
                set(&mut before, "***");
                set(&mut after, "***");
            }
        }
    }
    // A Secret's last-applied-configuration annotation (client-side `kubectl apply`) holds
    // its values in clear.
    for side in [before, after].into_iter().flatten() {
        if let Some(a) = side
            .pointer_mut("/metadata/annotations")
            .and_then(Value::as_object_mut)
            && let Some(v) = a.get_mut(LAST_APPLIED)
        {
            *v = Value::String("***".into());
        }
    }
}

/// Masks every value of an object a Secret's value was substituted into, on both sides, as
/// [`mask`] masks a Secret's: `***` where both sides hold the same value (or one side only
/// has it), `*** (before)` / `*** (after)` where it changes. Only the object's identity
/// (apiVersion, kind, metadata.name, metadata.namespace) and the keys of its maps are kept.
pub fn mask_all(mut before: Option<&mut Value>, mut after: Option<&mut Value>) {
    let identity = |v: &Value| {
        [
            v.get("apiVersion").cloned(),
            v.get("kind").cloned(),
            v.pointer("/metadata/name").cloned(),
            v.pointer("/metadata/namespace").cloned(),
        ]
    };
    let kept = [before.as_deref(), after.as_deref()].map(|v| v.map(identity));
    mask_pair(before.as_deref_mut(), after.as_deref_mut());
    let paths = [
        "/apiVersion",
        "/kind",
        "/metadata/name",
        "/metadata/namespace",
    ];
    for (side, kept) in [before, after].into_iter().zip(kept) {
        let (Some(side), Some(kept)) = (side, kept) else {
            continue;
        };
        for (path, value) in paths.iter().zip(kept) {
            if let (Some(slot), Some(value)) = (side.pointer_mut(path), value) {
                *slot = value;
            }
        }
    }
}

/// [`mask_all`] of two values at the same path (`None`: absent on that side).
fn mask_pair(before: Option<&mut Value>, after: Option<&mut Value>) {
    match (before, after) {
        (Some(Value::Object(old)), Some(Value::Object(new))) => {
            let keys: BTreeSet<String> = old.keys().chain(new.keys()).cloned().collect();
            for key in keys {
                mask_pair(old.get_mut(&key), new.get_mut(&key));
            }
        }
        (Some(Value::Array(old)), Some(Value::Array(new))) => {
            for i in 0..old.len().max(new.len()) {
                mask_pair(old.get_mut(i), new.get_mut(i));
            }
        }
        (Some(old), Some(new)) if old == new => {
            mask_pair(Some(old), None);
            mask_pair(None, Some(new));
        }
        (Some(old), Some(new)) => {
            *old = Value::String("*** (before)".into());
            *new = Value::String("*** (after)".into());
        }
        (Some(one), None) | (None, Some(one)) => match one {
            Value::Object(map) => map.values_mut().for_each(|v| mask_pair(Some(v), None)),
            Value::Array(items) => items.iter_mut().for_each(|v| mask_pair(Some(v), None)),
            leaf => *leaf = Value::String("***".into()),
        },
        (None, None) => {}
    }
}

/// The annotation client-side `kubectl apply` keeps the whole applied object in.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// A YAML document of `v`.
pub fn to_yaml(v: &Value) -> Result<String, CliError> {
    serde_saphyr::to_string(v).map_err(|e| CliError::Yaml(e.to_string()))
}

/// The unified diff of two versions of an object (`None`: it does not exist on that side),
/// Secret values masked.
pub fn unified(
    old_name: &str,
    new_name: &str,
    before: Option<&Value>,
    after: Option<&Value>,
) -> Result<String, CliError> {
    let (mut before, mut after) = (before.cloned(), after.cloned());
    mask(before.as_mut(), after.as_mut());
    let old = before
        .as_ref()
        .map(to_yaml)
        .transpose()?
        .unwrap_or_default();
    let new = after.as_ref().map(to_yaml).transpose()?.unwrap_or_default();
    let diff = similar::TextDiff::from_lines(&old, &new);
    let mut out = diff
        .unified_diff()
        .context_radius(3)
        .header(old_name, new_name)
        .to_string();
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn secret(data: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": data})
    }

    #[test]
    fn secret_values_are_masked_and_changes_marked() {
        let mut before = secret(json!({"same": "c2FtZQ==", "changed": "b2xk", "gone": "eA=="}));
        let mut after = secret(json!({"same": "c2FtZQ==", "changed": "bmV3", "added": "eQ=="}));
        mask(Some(&mut before), Some(&mut after));
        assert_eq!(
            before["data"],
            json!({"same": "***", "changed": "*** (before)", "gone": "***"})
        );
        assert_eq!(
            after["data"],
            json!({"same": "***", "changed": "*** (after)", "added": "***"})
        );
        let mut cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": "v"}});
        mask(None, Some(&mut cm));
        assert_eq!(cm["data"]["k"], "v");
        // The copy client-side `kubectl apply` left in an annotation is masked too.
        let mut applied = secret(json!({"k": "c2VjcmV0"}));
        applied["metadata"]["annotations"] =
            json!({LAST_APPLIED: "{\"data\":{\"k\":\"c2VjcmV0\"}}", "other": "kept"});
        mask(Some(&mut applied), None);
        assert_eq!(
            applied["metadata"]["annotations"],
            json!({LAST_APPLIED: "***", "other": "kept"})
        );
    }

    #[test]
    fn every_value_of_a_secret_substituted_object_is_masked_on_both_sides() {
        let pem = "-----BEGIN KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END KEY-----\n";
        let cm = |data: Value, labels: Value| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "app", "namespace": "team", "labels": labels},
                "data": data})
        };
        // The Secret rotated: the live side holds the old value; a multi-line value, one YAML
        // quotes and escapes, a 1-byte one; a list; a key only one side has.
        let mut before = cm(
            json!({"pem": pem, "quoted": "a\"b\\: *c", "pin": "7", "url": "https://u:old@h",
                "ports": [1, 2], "gone": "x"}),
            json!({"tier": "s"}),
        );
        let mut after = cm(
            json!({"pem": pem, "quoted": "a\"b\\: *c", "pin": "8", "url": "https://u:new@h",
                "ports": [1, 3, 4], "added": true}),
            json!({"tier": "s"}),
        );
        mask_all(Some(&mut before), Some(&mut after));
        assert_eq!(
            before,
            cm(
                json!({"pem": "***", "quoted": "***", "pin": "*** (before)",
                    "url": "*** (before)", "ports": ["***", "*** (before)"], "gone": "***"}),
                json!({"tier": "***"})
            )
        );
        assert_eq!(
            after,
            cm(
                json!({"pem": "***", "quoted": "***", "pin": "*** (after)",
                    "url": "*** (after)", "ports": ["***", "*** (after)", "***"], "added": "***"}),
                json!({"tier": "***"})
            )
        );
        let mut created = cm(json!({"pem": pem, "nested": {"a": [pem]}}), json!({}));
        mask_all(None, Some(&mut created));
        assert_eq!(
            created,
            cm(json!({"pem": "***", "nested": {"a": ["***"]}}), json!({}))
        );
        // The diff shows that the value changed, and none of it.
        let text = unified("live/x", "merged/x", Some(&before), Some(&after)).expect("diff");
        let line = |prefix: &str| {
            text.lines()
                .find(|l| l.starts_with(prefix))
                .unwrap_or_default()
                .to_string()
        };
        assert!(line("-  pin:").contains("*** (before)"), "{text}");
        assert!(line("+  pin:").contains("*** (after)"), "{text}");
        for secret in ["old", "new", "MIIE", "BEGIN", "a\\\"b", "pin: 7", "pin: 8"] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
    }

    #[test]
    fn unified_diff_of_a_change() {
        let before = json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": "old"}});
        let after = json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": "new"}});
        let d = unified("live/x", "merged/x", Some(&before), Some(&after)).expect("diff");
        assert!(d.starts_with("--- live/x\n+++ merged/x\n@@"), "{d}");
        assert!(d.contains("-  k: old\n+  k: new\n"), "{d}");
        let same = unified("live/x", "merged/x", Some(&before), Some(&before)).expect("diff");
        assert_eq!(same, "");
    }
}

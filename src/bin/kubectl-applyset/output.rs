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

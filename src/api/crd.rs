//! The two CRDs as installed (`applyset-operator crd`, the chart, docs/api.md): kube's
//! generated schemas with their descriptions reflowed for `kubectl explain`, and the status
//! defaulted to "not observed yet".

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

use super::{ApplySet, ClusterApplySet, status::NOT_OBSERVED};

/// Both CRDs, as installed: the generated schemas with their descriptions reflowed (see
/// [`reflow`]), so that `kubectl explain` prints paragraphs, and the status defaulted to
/// "not observed yet" (see [`default_status`]).
pub fn crds() -> Vec<CustomResourceDefinition> {
    use kube::CustomResourceExt;
    [ApplySet::crd(), ClusterApplySet::crd()]
        .into_iter()
        .map(|crd| {
            let mut value = match serde_json::to_value(&crd) {
                Ok(v) => v,
                Err(_) => return crd,
            };
            reflow_descriptions(&mut value["spec"]["versions"]);
            default_status(&mut value["spec"]["versions"]);
            serde_json::from_value(value).unwrap_or(crd)
        })
        .collect()
}

/// Both CRDs, as YAML documents (what `applyset-operator crd` prints).
pub fn crds_yaml() -> Result<String, serde_saphyr::SerializeError> {
    let mut out = String::new();
    for crd in crds() {
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(&crd)?);
    }
    Ok(out)
}

/// Gives the `status` of each version's schema (`versions`, the CRD's spec.versions) the
/// default `{observedGeneration: -1}` ([`NOT_OBSERVED`]). The API server applies it when the
/// object has no status (defaulting is applied on every read), so a set the operator has not
/// reconciled yet has observedGeneration < generation, which kstatus reads as InProgress.
fn default_status(versions: &mut serde_json::Value) {
    let Some(versions) = versions.as_array_mut() else {
        return;
    };
    for version in versions {
        if let Some(status) = version
            .pointer_mut("/schema/openAPIV3Schema/properties/status")
            .and_then(serde_json::Value::as_object_mut)
        {
            status.insert(
                "default".into(),
                serde_json::json!({"observedGeneration": NOT_OBSERVED}),
            );
        }
    }
}

/// Reflows every `description` string under `v` (the schemas of the CRD's versions).
fn reflow_descriptions(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(map) => {
            for (k, item) in map.iter_mut() {
                match item {
                    serde_json::Value::String(s) if k == "description" => *s = reflow(s),
                    _ => reflow_descriptions(item),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(reflow_descriptions),
        _ => {}
    }
}

/// A doc comment as a description: the line breaks of the source (comments wrap at 100
/// columns) become spaces, so `kubectl explain` wraps the text itself; a blank line (a new
/// paragraph) and a line break before a list item (`- `, `* `) stay.
pub fn reflow(doc: &str) -> String {
    let mut out = String::new();
    for (i, paragraph) in doc.split("\n\n").enumerate() {
        if i > 0 {
            out.push_str("\n\n");
        }
        for (j, line) in paragraph.lines().map(str::trim).enumerate() {
            if j > 0 {
                let item = line.starts_with("- ") || line.starts_with("* ");
                out.push(if item { '\n' } else { ' ' });
            }
            out.push_str(line);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ApplySetStatus;

    #[test]
    fn reflow_joins_wrapped_lines_and_keeps_paragraphs_and_lists() {
        assert_eq!(reflow("One line."), "One line.");
        assert_eq!(
            reflow("Allow a reconcile. Without it such a\nreconcile is refused."),
            "Allow a reconcile. Without it such a reconcile is refused."
        );
        assert_eq!(
            reflow("First.\n\nSecond\nparagraph."),
            "First.\n\nSecond paragraph."
        );
        assert_eq!(
            reflow("Kinds:\n- ConfigMap\n- Secret, and\n  more"),
            "Kinds:\n- ConfigMap\n- Secret, and more"
        );
        assert_eq!(reflow("  padded \n  lines  "), "padded lines");
        assert_eq!(reflow(""), "");
    }

    #[test]
    fn the_crds_have_no_line_broken_mid_sentence() {
        let yaml = crds_yaml().expect("crds");
        let crds: Vec<serde_json::Value> = crds()
            .iter()
            .map(|c| serde_json::to_value(c).expect("json"))
            .collect();
        assert_eq!(crds.len(), 2);
        fn check(v: &serde_json::Value) {
            match v {
                serde_json::Value::Object(map) => {
                    for (k, item) in map {
                        if let (true, Some(s)) = (k == "description", item.as_str()) {
                            for line in s.split('\n').skip(1) {
                                assert!(
                                    line.is_empty()
                                        || line.starts_with("- ")
                                        || line.starts_with("* "),
                                    "a line broken mid-sentence: {s:?}"
                                );
                            }
                        } else {
                            check(item);
                        }
                    }
                }
                serde_json::Value::Array(items) => items.iter().for_each(check),
                _ => {}
            }
        }
        crds.iter().for_each(check);
        let allow_empty = &crds[0]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
            ["spec"]["properties"]["allowEmpty"]["description"];
        assert!(
            allow_empty
                .as_str()
                .is_some_and(|d| d.contains("Without it such a reconcile is refused")),
            "reflowed: {allow_empty}"
        );
        // The YAML may fold long lines (`>-`); parsed, they are the same text.
        let parsed: Vec<serde_json::Value> = yaml
            .split("---\n")
            .filter(|d| !d.trim().is_empty())
            .map(|d| serde_saphyr::from_str(d).expect("yaml"))
            .collect();
        assert_eq!(parsed, crds);
    }

    #[test]
    fn the_status_defaults_to_not_observed() {
        let mut versions = serde_json::json!([
            {"name": "v1", "schema": {"openAPIV3Schema": {"properties": {
                "spec": {"type": "object"},
                "status": {"type": "object", "nullable": true}}}}},
            {"name": "v2"},
        ]);
        default_status(&mut versions);
        assert_eq!(
            versions[0]["schema"]["openAPIV3Schema"]["properties"]["status"],
            serde_json::json!({"type": "object", "nullable": true,
                               "default": {"observedGeneration": -1}})
        );
        assert_eq!(
            versions[0]["schema"]["openAPIV3Schema"]["properties"]["spec"],
            serde_json::json!({"type": "object"}),
            "only the status is defaulted"
        );
        assert_eq!(
            versions[1],
            serde_json::json!({"name": "v2"}),
            "no schema, no default"
        );
        // Not an array: left alone.
        let mut other = serde_json::json!({"a": 1});
        default_status(&mut other);
        assert_eq!(other, serde_json::json!({"a": 1}));

        for crd in crds() {
            let crd = serde_json::to_value(&crd).expect("json");
            let status =
                &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"];
            assert_eq!(
                status["default"],
                serde_json::json!({"observedGeneration": NOT_OBSERVED}),
                "{}",
                crd["metadata"]["name"]
            );
            // The default is a valid status.
            let s: ApplySetStatus =
                serde_json::from_value(status["default"].clone()).expect("a status");
            assert_eq!(s.observed_generation, Some(NOT_OBSERVED));
        }
    }
}

//! Post-build variable substitution (`spec.postBuild`), as Flux's kustomize-controller does
//! it: on each member's YAML text, re-parsed after, so `replicas: ${n}` becomes a number.
//!
//! - Syntax: `${var}`, `${var:=default}` and `${var:-default}` (the default when the
//!   variable is unset or empty), `$${var}` for a literal `${var}`. Names match
//!   `[_a-zA-Z][_a-zA-Z0-9]*`; a `${…}` whose content is not a name and an operator is left
//!   as it is, and so is `$var` without braces.
//! - Strict (Flux's `StrictPostBuildSubstitutions`): a variable without a value and without a
//!   default is an error naming it and the member; `${var:=}` gives an empty default.
//! - Values: `spec.postBuild.substituteFrom` (ConfigMaps and Secrets of the set's namespace,
//!   read as the set's identity; a later entry's values win, a missing `optional` one is
//!   skipped), then `spec.postBuild.substitute`, which wins over all.
//! - A member labelled or annotated `kustomize.toolkit.fluxcd.io/substitute: disabled` or
//!   `applyset.dev/substitute: disabled` is left as it is.
//! - Values from Secrets never reach messages: errors name variables and members, never
//!   values, and a member whose substituted text does not parse is named without the parser's
//!   message when any value came from a Secret.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;

use crate::{
    api::{ApplySetSpec, PostBuild, SubstituteKind},
    applyset::ParentRef,
    manifest::{Manifest, parse_documents},
    set_reads::{ReadError, SetReader},
};

/// The opt-out keys (label or annotation, value `disabled`).
pub const OPT_OUT: [&str; 2] = [
    "kustomize.toolkit.fluxcd.io/substitute",
    "applyset.dev/substitute",
];

/// Why substitution failed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SubstituteError {
    #[error(
        "{member}: variable {var} has no value and no default (spec.postBuild); give it a value in substitute or substituteFrom, or a default: ${{{var}:=default}} (${{{var}:=}} for an empty one)"
    )]
    Missing { member: String, var: String },
    #[error(
        "spec.postBuild.{field}: {name:?} is not a valid variable name; names match [_a-zA-Z][_a-zA-Z0-9]*"
    )]
    BadName { field: String, name: String },
    #[error("{member}: an unterminated ${{ (a variable reference without its closing }})")]
    Unterminated { member: String },
    #[error("{member}: after substitution it is not a valid manifest{cause}")]
    Reparse { member: String, cause: String },
    #[error("{member}: substitution must give one object, it gave {count}")]
    NotOne { member: String, count: usize },
    #[error(
        "spec.postBuild.substituteFrom[{index}]: {kind} {namespace}/{name} does not exist; create it, or mark the entry optional: true"
    )]
    NotFound {
        index: usize,
        kind: String,
        namespace: String,
        name: String,
    },
    /// Entry `index` could not be read as the set's identity (see [`crate::set_reads`]).
    #[error("spec.postBuild.substituteFrom[{index}]: {error}")]
    Read { index: usize, error: ReadError },
    #[error(
        "spec.postBuild.substituteFrom: a ClusterApplySet has no namespace to read ConfigMaps and Secrets from; use spec.postBuild.substitute"
    )]
    Cluster,
}

impl SubstituteError {
    /// Whether it may go away by itself (the API server did not answer): retried, not the
    /// spec's fault.
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Read { error, .. } if error.is_transient())
    }

    /// Whether a later attempt may succeed without a spec change (a grant may be given).
    pub fn retry(&self) -> bool {
        matches!(self, Self::Read { .. })
    }
}

/// The variables of a set, and whether any came from a Secret.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Vars {
    values: BTreeMap<String, String>,
    from_secret: bool,
}

impl Vars {
    pub fn get(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }
}

/// Whether `name` is a variable name.
pub fn is_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

/// Merges `layers` (in order; later values win) into variables, refusing invalid names.
pub fn merge(
    layers: Vec<(String, BTreeMap<String, String>, bool)>,
) -> Result<Vars, SubstituteError> {
    let mut vars = Vars::default();
    for (field, values, secret) in layers {
        for (k, v) in values {
            if !is_name(&k) {
                return Err(SubstituteError::BadName { field, name: k });
            }
            vars.from_secret |= secret && !v.is_empty();
            vars.values.insert(k, v);
        }
    }
    Ok(vars)
}

/// `text` with every variable reference replaced (see the module documentation); `member`
/// names it in errors.
pub fn substitute(text: &str, vars: &Vars, member: &str) -> Result<String, SubstituteError> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        if let Some(after) = tail.strip_prefix("$${") {
            // `$${…}` is a literal `${…}`.
            out.push_str("${");
            rest = after;
            continue;
        }
        let Some(body) = tail.strip_prefix("${") else {
            out.push('$');
            rest = &tail[1..];
            continue;
        };
        let Some(end) = body.find('}') else {
            return Err(SubstituteError::Unterminated {
                member: member.into(),
            });
        };
        let inner = &body[..end];
        match reference(inner) {
            Some((name, default)) => {
                let value = vars
                    .get(name)
                    .filter(|v| !v.is_empty() || default.is_none());
                match (value, default) {
                    (Some(v), _) => out.push_str(v),
                    (None, Some(d)) => out.push_str(d),
                    (None, None) => {
                        return Err(SubstituteError::Missing {
                            member: member.into(),
                            var: name.into(),
                        });
                    }
                }
            }
            // Not a variable reference: left as written.
            None => {
                out.push_str("${");
                out.push_str(inner);
                out.push('}');
            }
        }
        rest = &body[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The name and default of a reference's inside (`var`, `var:=d`, `var:-d`).
fn reference(inner: &str) -> Option<(&str, Option<&str>)> {
    let (name, default) = match inner.find(':') {
        None => (inner, None),
        Some(i) => {
            let op = &inner[i..];
            let d = op.strip_prefix(":=").or_else(|| op.strip_prefix(":-"))?;
            (&inner[..i], Some(d))
        }
    };
    is_name(name).then_some((name, default))
}

/// Whether `m` opted out (label or annotation [`OPT_OUT`] `disabled`).
pub fn opted_out(m: &Manifest) -> bool {
    let meta = m.object.get("metadata");
    ["labels", "annotations"].iter().any(|field| {
        let map = meta.and_then(|md| md.get(*field));
        OPT_OUT.iter().any(|k| {
            map.and_then(|l| l.get(*k))
                .and_then(|v| v.as_str())
                .is_some_and(|v| v == "disabled")
        })
    })
}

/// Substitutes `vars` in every member of `manifests` that did not opt out.
pub fn apply(manifests: Vec<Manifest>, vars: &Vars) -> Result<Vec<Manifest>, SubstituteError> {
    let mut out = Vec::with_capacity(manifests.len());
    for m in manifests {
        if opted_out(&m) {
            out.push(m);
            continue;
        }
        out.push(apply_one(m, vars)?);
    }
    Ok(out)
}

/// One member, through its YAML text; unchanged text keeps the member as it is.
fn apply_one(m: Manifest, vars: &Vars) -> Result<Manifest, SubstituteError> {
    let member = format!("{} {}", m.kind, m.name);
    let value = serde_json::Value::Object(m.object.clone());
    let text = serde_saphyr::to_string(&value).map_err(|e| SubstituteError::Reparse {
        member: member.clone(),
        cause: format!(": {e}"),
    })?;
    if !text.contains("${") {
        return Ok(m);
    }
    let done = substitute(&text, vars, &format!("{} ({member})", m.origin))?;
    if done == text {
        return Ok(m);
    }
    let mut parsed = parse_documents(&done, &m.origin).map_err(|e| SubstituteError::Reparse {
        member: format!("{} ({member})", m.origin),
        cause: if vars.from_secret {
            String::new()
        } else {
            format!(": {e}")
        },
    })?;
    if parsed.len() != 1 {
        return Err(SubstituteError::NotOne {
            member,
            count: parsed.len(),
        });
    }
    Ok(parsed.remove(0))
}

/// The variables of `spec` for `parent`: `substituteFrom` read by `reader` (as the set's
/// identity), then `substitute`. `None` without `spec.postBuild`.
pub async fn variables(
    reader: &SetReader<'_>,
    parent: &ParentRef,
    spec: &ApplySetSpec,
) -> Result<Option<Vars>, SubstituteError> {
    let Some(pb) = &spec.post_build else {
        return Ok(None);
    };
    let mut layers = Vec::new();
    if !pb.substitute_from.is_empty() {
        let ns = parent
            .namespace
            .as_deref()
            .ok_or(SubstituteError::Cluster)?;
        for (index, r) in pb.substitute_from.iter().enumerate() {
            if let Some(values) = read(reader, ns, index, r).await? {
                let secret = r.kind == SubstituteKind::Secret;
                layers.push((format!("substituteFrom[{index}]"), values, secret));
            }
        }
    }
    layers.push(("substitute".into(), pb.substitute.clone(), false));
    merge(layers).map(Some)
}

/// The data of entry `index`, read by `reader` (`None`: optional and missing).
async fn read(
    reader: &SetReader<'_>,
    ns: &str,
    index: usize,
    r: &crate::api::SubstituteReference,
) -> Result<Option<BTreeMap<String, String>>, SubstituteError> {
    let data = match r.kind {
        SubstituteKind::ConfigMap => reader
            .config_map(ns, &r.name)
            .await
            .map(|cm| cm.data.unwrap_or_default()),
        SubstituteKind::Secret => reader.secret(ns, &r.name).await.map(secret_values),
    };
    match data {
        Ok(d) => Ok(Some(d)),
        Err(e) if e.is_not_found() && r.optional => Ok(None),
        Err(e) if e.is_not_found() => Err(SubstituteError::NotFound {
            index,
            kind: format!("{:?}", r.kind),
            namespace: ns.into(),
            name: r.name.clone(),
        }),
        Err(error) => Err(SubstituteError::Read { index, error }),
    }
}

/// A Secret's values as text (data decoded; stringData on top).
fn secret_values(s: Secret) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> = s
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned()))
        .collect();
    out.extend(s.string_data.unwrap_or_default());
    out
}

/// The ConfigMaps and Secrets `spec.postBuild.substituteFrom` references, for the watches
/// that reconcile a set when one changes (none for a ClusterApplySet, which may not use them).
pub fn references(
    parent: &ParentRef,
    pb: Option<&PostBuild>,
) -> Vec<(SubstituteKind, String, String)> {
    let (Some(pb), Some(ns)) = (pb, parent.namespace.as_deref()) else {
        return vec![];
    };
    pb.substitute_from
        .iter()
        .map(|r| (r.kind, ns.to_string(), r.name.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::Origin;

    fn vars(pairs: &[(&str, &str)]) -> Vars {
        let values = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        merge(vec![("substitute".into(), values, false)]).expect("valid")
    }

    #[test]
    fn every_syntax_form() {
        let v = vars(&[("name", "web"), ("n", "3"), ("empty", "")]);
        let s = |t: &str| substitute(t, &v, "m");
        assert_eq!(s("a ${name} b").as_deref(), Ok("a web b"));
        assert_eq!(s("${name}${n}").as_deref(), Ok("web3"));
        assert_eq!(s("${missing:=dflt}").as_deref(), Ok("dflt"));
        assert_eq!(s("${missing:-dflt}").as_deref(), Ok("dflt"));
        assert_eq!(s("${name:=dflt}").as_deref(), Ok("web"));
        assert_eq!(
            s("${empty:-dflt}").as_deref(),
            Ok("dflt"),
            "empty uses the default"
        );
        assert_eq!(
            s("${empty}").as_deref(),
            Ok(""),
            "empty without default is empty"
        );
        assert_eq!(s("${missing:=}").as_deref(), Ok(""));
        assert_eq!(s("$${name}").as_deref(), Ok("${name}"), "escaped");
        assert_eq!(s("cost: $5, $name, $").as_deref(), Ok("cost: $5, $name, $"));
        assert_eq!(
            s("${not a name} ${a.b}").as_deref(),
            Ok("${not a name} ${a.b}")
        );
        assert_eq!(
            s("x ${missing} y"),
            Err(SubstituteError::Missing {
                member: "m".into(),
                var: "missing".into()
            })
        );
        let msg = s("${missing}")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            msg.contains("variable missing has no value") && msg.contains("${missing:=}"),
            "{msg}"
        );
        assert!(matches!(
            s("${name"),
            Err(SubstituteError::Unterminated { .. })
        ));
    }

    #[test]
    fn names_and_precedence() {
        for ok in ["a", "_x", "A_1", "cluster_name"] {
            assert!(is_name(ok), "{ok}");
        }
        for bad in ["", "1a", "a-b", "a.b", "a b"] {
            assert!(!is_name(bad), "{bad}");
        }
        let layer = |pairs: &[(&str, &str)], secret| {
            (
                "substituteFrom[0]".to_string(),
                pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                secret,
            )
        };
        let v = merge(vec![
            layer(&[("a", "1"), ("b", "1")], false),
            layer(&[("b", "2"), ("c", "2")], true),
            layer(&[("c", "3")], false),
        ])
        .expect("valid");
        assert_eq!(
            (v.get("a"), v.get("b"), v.get("c")),
            (Some("1"), Some("2"), Some("3"))
        );
        assert!(v.from_secret);
        let err = merge(vec![layer(&[("app.properties", "x")], false)]).expect_err("bad name");
        assert!(
            err.to_string()
                .contains("\"app.properties\" is not a valid variable name")
        );
    }

    fn manifest(text: &str) -> Manifest {
        parse_documents(text, &Origin::source("test"))
            .expect("parses")
            .remove(0)
    }

    #[test]
    fn members_are_substituted_on_their_text_and_reparsed() {
        let m = manifest(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: ${name}\nspec:\n  replicas: ${n}\n  paused: ${flag}\n  template:\n    metadata:\n      annotations: {note: \"x ${name} y\", literal: \"$${name}\"}\n",
        );
        let v = vars(&[("name", "web"), ("n", "3"), ("flag", "true")]);
        let out = apply(vec![m], &v).expect("substituted");
        let o = &out[0];
        assert_eq!(o.name, "web");
        assert_eq!(
            o.object["spec"]["replicas"],
            serde_json::json!(3),
            "a number"
        );
        assert_eq!(
            o.object["spec"]["paused"],
            serde_json::json!(true),
            "a bool"
        );
        assert_eq!(
            o.object["spec"]["template"]["metadata"]["annotations"],
            serde_json::json!({"note": "x web y", "literal": "${name}"})
        );
        // Opted out: left as is, by label or annotation, Flux's key or ours.
        for (field, key) in [("labels", OPT_OUT[0]), ("annotations", OPT_OUT[1])] {
            let text = format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  {field}:\n    {key}: disabled\ndata:\n  v: ${{missing}}\n"
            );
            let out = apply(vec![manifest(&text)], &v).expect("left as is");
            assert_eq!(out[0].object["data"]["v"], "${missing}");
        }
        // Strict: a missing variable names the member.
        let m = manifest(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  v: ${missing}\n",
        );
        let err = apply(vec![m], &v).expect_err("missing");
        assert!(err.to_string().contains("ConfigMap a"), "{err}");
        assert!(err.to_string().contains("variable missing"), "{err}");
    }

    #[test]
    fn secret_values_stay_out_of_messages() {
        let m =
            manifest("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  v: ${s}\n");
        let secret = merge(vec![(
            "substituteFrom[0]".into(),
            [("s".to_string(), "x: [unclosed".to_string())].into(),
            true,
        )])
        .expect("valid");
        let err = apply(vec![m], &secret).expect_err("does not parse");
        let msg = err.to_string();
        assert!(msg.contains("is not a valid manifest"), "{msg}");
        assert!(!msg.contains("unclosed"), "{msg}");
    }
}

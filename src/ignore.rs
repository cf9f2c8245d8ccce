//! Drift-ignore rules (`spec.ignore`, Flux's Kustomization `spec.ignore`, its Go option
//! `DriftIgnoreRules`): which fields of which members the set neither corrects nor reports.
//! Pure.
//!
//! Contract:
//! - [`Rules::compile`] validates the rules: at most [`MAX_RULES`] rules of at most
//!   [`MAX_PATHS`] paths of at most [`MAX_PATH_LEN`] characters (the CRD says so too; the
//!   plugin renders without it); every path an RFC 6901 JSON pointer (Flux silently ignores a
//!   malformed one; here it is refused), none touching what the set relies on to know its
//!   members ([`PROTECTED`]); a target's group, version, kind, name and namespace regular
//!   expressions anchored `^(?:…)$` (the `regex` crate, size-limited), its labelSelector and
//!   annotationSelector Kubernetes selectors ([`selector`]); an empty field matches anything.
//!   Errors name `spec.ignore[i].paths[j]` or `spec.ignore[i].target.<field>` and the fix.
//! - [`Rules::paths_for`]: the paths of the rules whose target matches a member (Flux
//!   evaluates the selector on the dry-run object; the rendered member is ours).
//! - [`drift::settle`] decides, per ignored path that differs between the live object and
//!   the body, whether the body gives the field up or carries the live value; [`strip`]
//!   removes the paths from what a diff shows.

use std::collections::BTreeMap;

use regex::{Regex, RegexBuilder};
use serde_json::{Map, Value};

use crate::api::{IgnoreRule, KustomizeSelector};

pub mod drift;
pub mod pointer;
pub mod selector;

pub use pointer::{Pointer, PointerError};
use selector::{Selector, SelectorError};

/// Most rules in `spec.ignore` (the CRD's maxItems).
pub const MAX_RULES: usize = 64;
/// Most paths in one rule (the CRD's maxItems).
pub const MAX_PATHS: usize = 64;
/// Longest path, in characters (the CRD's maxLength).
pub const MAX_PATH_LEN: usize = 1024;
/// Longest target field (regular expression or selector), in characters.
pub const MAX_TARGET_LEN: usize = 1024;
/// Compiled size limit of one target regular expression, in bytes.
const REGEX_SIZE_LIMIT: usize = 256 * 1024;

/// Paths the set relies on to know its members (identity, our `part-of` label and adoption
/// mark, what the server keeps per object). A path that is one of them, leads to one
/// (`/metadata`, `/metadata/labels`, the whole object) or lies under one is refused.
pub const PROTECTED: &[(&str, &str)] = &[
    ("/apiVersion", "the object's apiVersion"),
    ("/kind", "the object's kind"),
    ("/metadata/name", "the object's name"),
    ("/metadata/namespace", "the object's namespace"),
    (
        "/metadata/labels/applyset.kubernetes.io~1part-of",
        "the set's part-of label",
    ),
    (
        "/metadata/annotations/applyset.dev~1adopted",
        "the set's adoption mark",
    ),
    ("/metadata/uid", "the object's uid"),
    ("/metadata/resourceVersion", "the object's resourceVersion"),
    ("/metadata/generation", "the object's generation"),
    ("/metadata/managedFields", "the object's managedFields"),
    (
        "/metadata/creationTimestamp",
        "the object's creationTimestamp",
    ),
    (
        "/metadata/deletionTimestamp",
        "the object's deletionTimestamp",
    ),
];

/// Why `spec.ignore` is refused (ValidationFailed, Stalled).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum IgnoreError {
    #[error(
        "spec.ignore has {count} rules, more than {MAX_RULES}; merge rules that share a target"
    )]
    TooManyRules { count: usize },
    #[error("spec.ignore[{rule}].paths is empty; name at least one field, e.g. /spec/replicas")]
    NoPaths { rule: usize },
    #[error(
        "spec.ignore[{rule}].paths has {count} paths, more than {MAX_PATHS}; split the rule in two"
    )]
    TooManyPaths { rule: usize, count: usize },
    #[error(
        "spec.ignore[{rule}].paths[{index}] is {len} characters long, more than {MAX_PATH_LEN}; name a shorter path"
    )]
    PathTooLong {
        rule: usize,
        index: usize,
        len: usize,
    },
    #[error(
        "spec.ignore[{rule}].paths[{index}] ({path:?}) is not a JSON pointer (RFC 6901): {cause}; write it as /spec/replicas, with ~1 for a / and ~0 for a ~ inside a key"
    )]
    Malformed {
        rule: usize,
        index: usize,
        path: String,
        cause: PointerError,
    },
    #[error(
        "spec.ignore[{rule}].paths[{index}] ({path:?}) touches {what}, which the set relies on to know its members; remove the path, or name a field below metadata that is not the set's"
    )]
    Protected {
        rule: usize,
        index: usize,
        path: String,
        what: &'static str,
    },
    #[error("spec.ignore[{rule}].target.{field}: {cause}")]
    Target {
        rule: usize,
        field: &'static str,
        cause: TargetError,
    },
}

/// Why a target field is refused.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum TargetError {
    #[error("{len} characters long, more than {MAX_TARGET_LEN}; shorten it")]
    TooLong { len: usize },
    #[error("not a regular expression (it is matched against the whole value): {0}")]
    Regex(regex::Error),
    #[error("not a Kubernetes selector ({0}); write it as app=web,tier in (a,b)")]
    Selector(SelectorError),
}

/// One compiled target; `None` fields match anything.
#[derive(Clone, Debug, Default)]
struct Target {
    group: Option<Regex>,
    version: Option<Regex>,
    kind: Option<Regex>,
    name: Option<Regex>,
    namespace: Option<Regex>,
    labels: Option<Selector>,
    annotations: Option<Selector>,
}

#[derive(Clone, Debug)]
struct Rule {
    target: Option<Target>,
    paths: Vec<Pointer>,
}

/// `spec.ignore`, compiled.
#[derive(Clone, Debug, Default)]
pub struct Rules(Vec<Rule>);

impl Rules {
    /// Validates and compiles `spec.ignore` (see the module's contract).
    pub fn compile(rules: &[IgnoreRule]) -> Result<Self, IgnoreError> {
        if rules.len() > MAX_RULES {
            return Err(IgnoreError::TooManyRules { count: rules.len() });
        }
        let compiled = rules
            .iter()
            .enumerate()
            .map(|(i, r)| compile_rule(i, r))
            .collect::<Result<_, _>>()?;
        Ok(Rules(compiled))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The paths of the rules whose target matches `object` (a member as rendered), each
    /// once, in the rules' order.
    pub fn paths_for(&self, object: &Map<String, Value>) -> Vec<Pointer> {
        let mut out: Vec<Pointer> = Vec::new();
        for rule in &self.0 {
            if rule.target.as_ref().is_none_or(|t| t.matches(object)) {
                for p in &rule.paths {
                    if !out.contains(p) {
                        out.push(p.clone());
                    }
                }
            }
        }
        out
    }
}

fn compile_rule(rule: usize, r: &IgnoreRule) -> Result<Rule, IgnoreError> {
    if r.paths.is_empty() {
        return Err(IgnoreError::NoPaths { rule });
    }
    if r.paths.len() > MAX_PATHS {
        let count = r.paths.len();
        return Err(IgnoreError::TooManyPaths { rule, count });
    }
    let paths = r
        .paths
        .iter()
        .enumerate()
        .map(|(index, p)| checked_path(rule, index, p))
        .collect::<Result<_, _>>()?;
    let target = r
        .target
        .as_ref()
        .map(|t| compile_target(rule, t))
        .transpose()?;
    Ok(Rule { target, paths })
}

fn checked_path(rule: usize, index: usize, path: &str) -> Result<Pointer, IgnoreError> {
    let len = path.chars().count();
    if len > MAX_PATH_LEN {
        return Err(IgnoreError::PathTooLong { rule, index, len });
    }
    let pointer = Pointer::parse(path).map_err(|cause| IgnoreError::Malformed {
        rule,
        index,
        path: path.to_string(),
        cause,
    })?;
    if let Some(what) = protected(&pointer) {
        let path = path.to_string();
        return Err(IgnoreError::Protected {
            rule,
            index,
            path,
            what,
        });
    }
    Ok(pointer)
}

/// What of [`PROTECTED`] `pointer` touches: it is one, leads to one or lies under one.
fn protected(pointer: &Pointer) -> Option<&'static str> {
    if pointer.tokens().is_empty() {
        return Some("the whole object");
    }
    PROTECTED.iter().find_map(|(path, what)| {
        let p = Pointer::parse(path).ok()?;
        let (a, b) = (pointer.tokens(), p.tokens());
        let n = a.len().min(b.len());
        (a[..n] == b[..n]).then_some(*what)
    })
}

fn compile_target(rule: usize, t: &KustomizeSelector) -> Result<Target, IgnoreError> {
    let fail = |field, cause| IgnoreError::Target { rule, field, cause };
    let regex = |field: &'static str, v: &Option<String>| {
        let Some(v) = v.as_deref().filter(|v| !v.is_empty()) else {
            return Ok(None);
        };
        bounded(v).map_err(|c| fail(field, c))?;
        RegexBuilder::new(&format!("^(?:{v})$"))
            .size_limit(REGEX_SIZE_LIMIT)
            .dfa_size_limit(REGEX_SIZE_LIMIT)
            .build()
            .map(Some)
            .map_err(|e| fail(field, TargetError::Regex(e)))
    };
    let selector = |field: &'static str, v: &Option<String>| {
        let Some(v) = v.as_deref().filter(|v| !v.is_empty()) else {
            return Ok(None);
        };
        bounded(v).map_err(|c| fail(field, c))?;
        Selector::parse(v)
            .map(Some)
            .map_err(|e| fail(field, TargetError::Selector(e)))
    };
    Ok(Target {
        group: regex("group", &t.group)?,
        version: regex("version", &t.version)?,
        kind: regex("kind", &t.kind)?,
        name: regex("name", &t.name)?,
        namespace: regex("namespace", &t.namespace)?,
        labels: selector("labelSelector", &t.label_selector)?,
        annotations: selector("annotationSelector", &t.annotation_selector)?,
    })
}

fn bounded(v: &str) -> Result<(), TargetError> {
    let len = v.chars().count();
    match len > MAX_TARGET_LEN {
        true => Err(TargetError::TooLong { len }),
        false => Ok(()),
    }
}

impl Target {
    /// Whether `object` matches every field of the target (an absent namespace is "").
    fn matches(&self, object: &Map<String, Value>) -> bool {
        let text = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or("").to_string();
        let api_version = text(object.get("apiVersion"));
        let (group, version) = match api_version.split_once('/') {
            Some((g, v)) => (g.to_string(), v.to_string()),
            None => (String::new(), api_version),
        };
        let meta = object.get("metadata");
        let field = |k: &str| text(meta.and_then(|m| m.get(k)));
        let map = |k: &str| string_map(meta.and_then(|m| m.get(k)));
        let is = |re: &Option<Regex>, v: &str| re.as_ref().is_none_or(|re| re.is_match(v));
        is(&self.group, &group)
            && is(&self.version, &version)
            && is(&self.kind, &text(object.get("kind")))
            && is(&self.name, &field("name"))
            && is(&self.namespace, &field("namespace"))
            && self
                .labels
                .as_ref()
                .is_none_or(|s| s.matches(&map("labels")))
            && (self.annotations.as_ref()).is_none_or(|s| s.matches(&map("annotations")))
    }
}

fn string_map(v: Option<&Value>) -> BTreeMap<String, String> {
    v.and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// `value` without the fields at `paths` (what a diff shows of a member: ignored fields are
/// never shown). A path that is not there is nothing to remove.
pub fn strip(paths: &[Pointer], value: &mut Value) {
    for p in paths {
        p.remove(value);
    }
}

#[cfg(test)]
mod tests;

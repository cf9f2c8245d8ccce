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
//!   message when any value came from a Secret. The values themselves are kept
//!   ([`Vars::secret_values`]) so that the render withholds them, as it withholds decrypted
//!   values, from what the API server says about a member and from a diff.

use std::{
    collections::{BTreeMap, BTreeSet},
    time::Duration,
};

use k8s_openapi::api::core::v1::Secret;

use crate::{
    api::{ApplySetSpec, PostBuild, SubstituteKind},
    applyset::ParentRef,
    manifest::{DEFAULT_SET_YAML_BYTES, Manifest, object_cost, parse_documents},
    set_reads::{ReadError, SetReader},
    sops::redact::Redaction,
    sources::memory::MemoryError,
    stage::{Exceeded, StageBudget},
};

/// Copies of a substituted member the reconcile holds at a time, charged to the operator-wide
/// budget for as long as the set is: the parsed member, and one serialized copy (the render's
/// digest, then each apply's request body). Measured: a 57 MiB member parses into 57 MiB and
/// serializes into 57 MiB more.
const KEPT_COPIES: u64 = 2;

/// How much longer than its JSON a member's YAML text may be: the substituted text of one
/// member is bounded at this many times `--max-member-kib` while it is counted, before any of
/// it is written (YAML's indentation can make the text several times its JSON; the exact
/// bound is checked on the parsed member, [`crate::render::check_limits`]). A member past it
/// could never be applied, and is refused before it takes memory.
pub const MEMBER_TEXT_FACTOR: usize = 8;

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
    /// The substituted members would pass the set's YAML text bound; `var` is the variable
    /// whose value (or the text after it) passed it.
    #[error(
        "{member}: {} takes the set's manifests past {limit} bytes ({} MiB) of YAML/JSON, the most the operator allows per set (--max-yaml-mib-per-set); use shorter values or fewer references, or raise the flag",
        what_passed(var.as_deref()),
        limit >> 20
    )]
    TooLarge {
        member: String,
        var: Option<String>,
        limit: u64,
    },
    /// One member's substituted text would pass `limit` bytes: many times what the API
    /// server reads in one request (`--max-member-kib`), so it could never be applied.
    #[error(
        "{member}: {} makes it more than {limit} bytes of YAML/JSON, far more than the API server accepts in one request (the operator's --max-member-kib, {} KiB, times {MEMBER_TEXT_FACTOR} for the text's layout): it could never be applied; use shorter values or fewer references, or split it into smaller objects",
        what_passed(var.as_deref()),
        (limit / MEMBER_TEXT_FACTOR as u64) >> 10
    )]
    MemberTooLarge {
        member: String,
        var: Option<String>,
        limit: u64,
    },
    /// The operator-wide memory budget had no room for the substituted text.
    #[error("{member}: substituting its variables: {cause}")]
    Memory { member: String, cause: MemoryError },
    /// The set's render deadline passed while its members were substituted.
    #[error(
        "{member}: substitution stopped: rendering the set took longer than the {allowed:?} the operator allows (--source-timeout)"
    )]
    TimedOut { member: String, allowed: Duration },
}

/// What passed the bound: the value of `var`, or the member's own text.
fn what_passed(var: Option<&str>) -> String {
    match var {
        Some(var) => format!("substituting ${{{var}}}"),
        None => "its text".to_string(),
    }
}

impl SubstituteError {
    /// Whether it may go away by itself (the API server did not answer): retried, not the
    /// spec's fault.
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Read { error, .. } => error.is_transient(),
            Self::TimedOut { .. } => true,
            Self::Memory { cause, .. } => Exceeded::Memory(cause.clone()).is_transient(),
            _ => false,
        }
    }

    /// Whether a later attempt may succeed without a spec change: what is transient, and a
    /// refused read (a grant may be given).
    pub fn retry(&self) -> bool {
        self.is_transient() || matches!(self, Self::Read { .. })
    }

    /// The error of a stage budget that stopped the substitution of `member` while it wrote
    /// the value of `var` (`None`: its own text).
    fn stopped(member: &str, var: Option<&str>, e: Exceeded) -> SubstituteError {
        let member = member.to_string();
        match e {
            Exceeded::Bytes { limit } => SubstituteError::TooLarge {
                member,
                var: var.map(str::to_string),
                limit,
            },
            Exceeded::Memory(cause) => SubstituteError::Memory { member, cause },
            Exceeded::Time { allowed } => SubstituteError::TimedOut { member, allowed },
        }
    }
}

/// The variables of a set, whether any came from a Secret, and the values that did (to
/// withhold from every message and diff about the set).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Vars {
    values: BTreeMap<String, String>,
    from_secret: bool,
    secret_values: Redaction,
    /// The variables some Secret gave a value (whether or not a later layer overrode it).
    secret_names: BTreeSet<String>,
}

impl Vars {
    pub fn get(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }

    /// The non-empty values read from Secrets (whether or not a later layer overrode them),
    /// to withhold as decrypted values are withheld.
    pub fn secret_values(&self) -> &Redaction {
        &self.secret_values
    }

    /// Whether `text` references a variable some Secret gave a value (with or without a
    /// default): the member made of it then holds, or may hold, a Secret's value.
    pub fn references_secret(&self, text: &str) -> bool {
        if self.secret_names.is_empty() {
            return false;
        }
        let mut uses = Uses {
            vars: self,
            secret: false,
        };
        // Only references are looked at: an unterminated one is the substitution's error.
        let _ = expand(text, self, "", &mut uses);
        uses.secret
    }
}

/// Records whether an expansion references a Secret's variable, writing nothing.
struct Uses<'v> {
    vars: &'v Vars,
    secret: bool,
}

impl Sink for Uses<'_> {
    fn put(&mut self, _: &str, _: Option<&str>) -> Result<(), SubstituteError> {
        Ok(())
    }

    fn used(&mut self, name: &str) {
        self.secret |= self.vars.secret_names.contains(name);
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
    let mut secret_values = Vec::new();
    for (field, values, secret) in layers {
        for (k, v) in values {
            if !is_name(&k) {
                return Err(SubstituteError::BadName { field, name: k });
            }
            vars.from_secret |= secret && !v.is_empty();
            if secret {
                vars.secret_names.insert(k.clone());
            }
            if secret && !v.is_empty() {
                secret_values.push(v.clone());
            }
            vars.values.insert(k, v);
        }
    }
    vars.secret_values = Redaction::new(secret_values);
    Ok(vars)
}

/// `text` with every variable reference replaced (see the module documentation); `member`
/// names it in errors. The output is counted against `budget` as it is expanded (the bound
/// applies to the expansion, not to the finished text): a first pass counts what each piece
/// would add and stops at the piece that passes the bound, having written nothing; then the
/// text's room is taken from the operator-wide budget, and only then is it written, into a
/// buffer of exactly its size.
pub fn substitute(
    text: &str,
    vars: &Vars,
    member: &str,
    budget: &mut StageBudget,
) -> Result<String, SubstituteError> {
    let mut counted = Counted {
        budget: &mut *budget,
        member,
        bytes: 0,
    };
    expand(text, vars, member, &mut counted)?;
    let size = counted.bytes;
    budget
        .reserve(size as u64)
        .map_err(|e| SubstituteError::stopped(member, None, e))?;
    let mut out = String::with_capacity(size);
    expand(text, vars, member, &mut out)?;
    Ok(out)
}

/// Where an expansion writes: [`Counted`] (nothing kept) or a `String`.
trait Sink {
    /// Adds `piece`, written from the value of variable `var` (`None`: the member's text).
    fn put(&mut self, piece: &str, var: Option<&str>) -> Result<(), SubstituteError>;

    /// Told of each variable a reference names, before its value (or default) is put.
    fn used(&mut self, _name: &str) {}
}

impl Sink for String {
    fn put(&mut self, piece: &str, _: Option<&str>) -> Result<(), SubstituteError> {
        self.push_str(piece);
        Ok(())
    }
}

/// Counts an expansion against a [`StageBudget`] without writing it.
struct Counted<'b> {
    budget: &'b mut StageBudget,
    member: &'b str,
    bytes: usize,
}

impl Sink for Counted<'_> {
    fn put(&mut self, piece: &str, var: Option<&str>) -> Result<(), SubstituteError> {
        if let Some(limit) = self.budget.member_text()
            && (self.bytes + piece.len()) as u64 > limit
        {
            return Err(SubstituteError::MemberTooLarge {
                member: self.member.to_string(),
                var: var.map(str::to_string),
                limit,
            });
        }
        self.budget
            .count(piece.len() as u64)
            .map_err(|e| SubstituteError::stopped(self.member, var, e))?;
        self.bytes += piece.len();
        Ok(())
    }
}

/// Writes `text` into `out` with every reference replaced; a value is written as it is (a
/// `${…}` inside a value or a default is not expanded again).
fn expand(
    text: &str,
    vars: &Vars,
    member: &str,
    out: &mut impl Sink,
) -> Result<(), SubstituteError> {
    // The variable last written: the text after it is charged to it (without it, the text
    // would have fit).
    let mut last: Option<&str> = None;
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.put(&rest[..at], last)?;
        let tail = &rest[at..];
        if let Some(after) = tail.strip_prefix("$${") {
            // `$${…}` is a literal `${…}`.
            out.put("${", last)?;
            rest = after;
            continue;
        }
        let Some(body) = tail.strip_prefix("${") else {
            out.put("$", last)?;
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
                out.used(name);
                let value = vars
                    .get(name)
                    .filter(|v| !v.is_empty() || default.is_none());
                let Some(piece) = value.or(default) else {
                    return Err(SubstituteError::Missing {
                        member: member.into(),
                        var: name.into(),
                    });
                };
                out.put(piece, Some(name))?;
                last = Some(name);
            }
            // Not a variable reference: left as written.
            None => {
                out.put("${", last)?;
                out.put(&body[..=end], last)?;
            }
        }
        rest = &body[end + 1..];
    }
    out.put(rest, last)
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

/// Substitutes `vars` in every member of `manifests` that did not opt out, within the default
/// per-set bound (`--max-yaml-mib-per-set`'s default) and without the operator-wide budget:
/// for callers outside a render. A render uses [`apply_within`].
pub fn apply(manifests: Vec<Manifest>, vars: &Vars) -> Result<Vec<Manifest>, SubstituteError> {
    let mut budget = StageBudget::bytes_only(DEFAULT_SET_YAML_BYTES as u64);
    apply_within(manifests, vars, &mut budget)
}

/// Substitutes `vars` in every member of `manifests` that did not opt out, counting the set's
/// members against `budget` as they are made (see [`crate::stage`]): a member left as it is
/// counts its size as the set's limits count it (its compact JSON), a substituted member its
/// substituted text, counted as it is expanded; the text and its parse take their room in the
/// operator-wide budget before they are made, and a parsed member keeps its estimated size
/// there. The set's deadline is looked at before each member.
pub fn apply_within(
    manifests: Vec<Manifest>,
    vars: &Vars,
    budget: &mut StageBudget,
) -> Result<Vec<Manifest>, SubstituteError> {
    let mut out = Vec::with_capacity(manifests.len());
    for m in manifests {
        let named = format!("{} ({} {})", m.origin, m.kind, m.name);
        budget
            .check_time()
            .map_err(|e| SubstituteError::stopped(&named, None, e))?;
        if opted_out(&m) {
            budget
                .count(object_cost(&m.object).bytes as u64)
                .map_err(|e| SubstituteError::stopped(&named, None, e))?;
            out.push(m);
            continue;
        }
        out.push(apply_one(m, vars, &named, budget)?);
    }
    Ok(out)
}

/// One member, through its YAML text; unchanged text keeps the member as it is. `named`
/// names it in errors.
fn apply_one(
    m: Manifest,
    vars: &Vars,
    named: &str,
    budget: &mut StageBudget,
) -> Result<Manifest, SubstituteError> {
    let stopped = |e| SubstituteError::stopped(named, None, e);
    let member = format!("{} {}", m.kind, m.name);
    let value = serde_json::Value::Object(m.object.clone());
    let text = serde_saphyr::to_string(&value).map_err(|e| SubstituteError::Reparse {
        member: member.clone(),
        cause: format!(": {e}"),
    })?;
    if !text.contains("${") {
        budget
            .count(object_cost(&m.object).bytes as u64)
            .map_err(stopped)?;
        return Ok(m);
    }
    let done = substitute(&text, vars, named, budget)?;
    let size = done.len() as u64;
    if done == text {
        budget.release(size);
        return Ok(m);
    }
    let secret = vars.references_secret(&text);
    drop(text);
    // The parse takes about as much again as the text while both are held.
    budget.reserve(size).map_err(stopped)?;
    let parsed = parse_documents(&done, &m.origin).map_err(|e| SubstituteError::Reparse {
        member: named.to_string(),
        cause: if vars.from_secret {
            String::new()
        } else {
            format!(": {e}")
        },
    });
    drop(done);
    budget.release(2 * size);
    let mut parsed = parsed?;
    if parsed.len() != 1 {
        return Err(SubstituteError::NotOne {
            member,
            count: parsed.len(),
        });
    }
    // What the member keeps while the set is rendered and applied: itself, and the one
    // serialized copy of it the render's digest or the apply's request makes at a time.
    budget
        .reserve(crate::sources::estimate_bytes(&parsed).saturating_mul(KEPT_COPIES))
        .map_err(stopped)?;
    let mut member = parsed.remove(0);
    member.secret_substituted = secret;
    Ok(member)
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
        let s = |t: &str| substitute(t, &v, "m", &mut StageBudget::bytes_only(1 << 20));
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
    fn one_members_text_is_bounded_before_it_is_written_naming_the_variable_and_the_flag() {
        let v = vars(&[("b", "0123456789")]);
        let mut budget = StageBudget::bytes_only(1 << 20);
        budget.limit_member_text(8 * 30);
        // 30 bytes of value per reference: 8 references fit exactly, a 9th does not.
        let text = |n: usize| "${b}${b}${b}".repeat(n);
        assert_eq!(
            substitute(&text(8), &v, "m", &mut budget).map(|s| s.len()),
            Ok(240)
        );
        let mut budget = StageBudget::bytes_only(1 << 20);
        budget.limit_member_text(8 * 30);
        let err = substitute(
            &text(9),
            &v,
            "spec.manifests[0] (ConfigMap near)",
            &mut budget,
        )
        .expect_err("past the member's bound");
        assert!(
            matches!(&err, SubstituteError::MemberTooLarge { var: Some(b), limit: 240, .. } if b == "b"),
            "{err:?}"
        );
        let said = err.to_string();
        assert!(
            said.starts_with("spec.manifests[0] (ConfigMap near): substituting ${b}"),
            "{said}"
        );
        assert!(said.contains("--max-member-kib"), "{said}");
        assert!(!err.is_transient() && !err.retry());
        // Counted only: nothing of the set's bound is taken past the refusal.
        assert!(budget.used() <= 240, "{}", budget.used());
    }

    /// `text` substituted within a per-set bound of `limit` bytes: the output, or the
    /// variable named by the error at the bound (`Some(None)`: the text itself).
    fn bounded(text: &str, v: &Vars, limit: u64) -> Result<String, Option<Option<String>>> {
        let mut budget = StageBudget::bytes_only(limit);
        let out = substitute(text, v, "m", &mut budget);
        assert!(budget.used() <= limit, "counted past the bound");
        out.map_err(|e| match e {
            SubstituteError::TooLarge {
                member,
                var,
                limit: l,
            } => {
                assert_eq!((member.as_str(), l), ("m", limit));
                Some(var)
            }
            _ => None,
        })
    }

    #[test]
    fn expansion_stops_at_the_bound_naming_the_variable() {
        let v = vars(&[("b", "0123456789")]);
        let text = "a ${b} c";
        // 2 + 10 + 2 bytes: exactly at the bound passes, one byte less fails.
        assert_eq!(bounded(text, &v, 14).as_deref(), Ok("a 0123456789 c"));
        let b = Err(Some(Some("b".to_string())));
        assert_eq!(bounded(text, &v, 13), b, "the text after ${{b}}");
        assert_eq!(bounded(text, &v, 12), b);
        assert_eq!(bounded(text, &v, 11), b, "within the value");
        assert_eq!(bounded(text, &v, 1), Err(Some(None)), "the text before");
        // Many references: stops at the first one past the bound.
        let many = "${b}".repeat(1000);
        assert_eq!(bounded(&many, &v, 10_000).map(|o| o.len()), Ok(10_000));
        assert_eq!(bounded(&many, &v, 9_999), b);
        let msg = substitute(&many, &v, "spec.manifests[0] (ConfigMap x)", &mut {
            StageBudget::bytes_only(64 << 20)
        });
        assert!(msg.is_ok());
        let err = substitute(&many, &v, "spec.manifests[0] (ConfigMap x)", &mut {
            StageBudget::bytes_only(9_999)
        })
        .expect_err("over")
        .to_string();
        for part in [
            "spec.manifests[0] (ConfigMap x): substituting ${b}",
            "9999 bytes (0 MiB)",
            "--max-yaml-mib-per-set",
        ] {
            assert!(err.contains(part), "{part:?} not in {err}");
        }
        assert!(!err.contains("0123456789"), "the value: {err}");
    }

    #[test]
    fn defaults_escapes_and_nested_forms_count_what_they_write() {
        let v = vars(&[("b", "0123456789"), ("refs", "${b}${b}"), ("e", "")]);
        // A default counts its own length.
        assert_eq!(bounded("${x:=dddd}", &v, 4).as_deref(), Ok("dddd"));
        let x = Err(Some(Some("x".to_string())));
        assert_eq!(bounded("${x:=dddd}", &v, 3), x);
        assert_eq!(bounded("${e:-dd}", &v, 1), Err(Some(Some("e".to_string()))));
        // An escape writes the literal `${b}` (4 bytes), not the value.
        assert_eq!(bounded("$${b}", &v, 4).as_deref(), Ok("${b}"));
        assert_eq!(bounded("$${b}", &v, 3), Err(Some(None)));
        // A value (or default) is written as it is, never expanded again: no blow-up.
        assert_eq!(bounded("${refs}", &v, 8).as_deref(), Ok("${b}${b}"));
        assert_eq!(bounded("${x:=${b}}", &v, 4).as_deref(), Ok("${b}"));
        assert_eq!(bounded("${x:=${b}}", &v, 3), x);
        // Not a reference: written as it is, counted.
        assert_eq!(bounded("${a b}", &v, 6).as_deref(), Ok("${a b}"));
        assert_eq!(bounded("${a b}", &v, 5), Err(Some(None)));
        // A missing variable is still reported as such, within the bound.
        assert!(matches!(
            substitute("${nope}", &v, "m", &mut StageBudget::bytes_only(100)),
            Err(SubstituteError::Missing { .. })
        ));
    }

    #[test]
    fn the_sets_members_share_one_bound() {
        let plain =
            manifest("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  k: v\n");
        let templ =
            manifest("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b\ndata:\n  k: ${b}\n");
        let v = vars(&[("b", "abcdefghij")]);
        let first = object_cost(&plain.object).bytes as u64;
        let text = serde_saphyr::to_string(&serde_json::Value::Object(templ.object.clone()))
            .expect("yaml");
        let second = (text.len() - "${b}".len() + 10) as u64;
        let run = |limit: u64| {
            let mut budget = StageBudget::bytes_only(limit);
            apply_within(vec![plain.clone(), templ.clone()], &v, &mut budget)
        };
        let out = run(first + second).expect("exactly at the bound");
        assert_eq!(out[1].object["data"]["k"], "abcdefghij");
        let err = run(first + second - 1).expect_err("one byte over");
        assert!(
            matches!(&err, SubstituteError::TooLarge { var: Some(v), .. } if v == "b"),
            "{err:?}"
        );
        assert!(
            err.to_string()
                .starts_with("test, document 1 (line 1) (ConfigMap b): substituting ${b}"),
            "{err}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_operator_wide_budget_bounds_a_set_within_its_own_bound() {
        use crate::sources::memory::MemoryBudget;
        use std::time::Instant;
        let memory = MemoryBudget::new(1 << 20, Duration::from_millis(50));
        let v = vars(&[("b", &"v".repeat(100_000))]);
        let m = manifest(&format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  k: \"{}\"\n",
            "${b}".repeat(20)
        ));
        let allowed = Duration::from_secs(60);
        let budget = StageBudget::new(64 << 20, &memory, Instant::now() + allowed, allowed);
        let vv = v.clone();
        let (out, held) = budget.run(move |b| apply_within(vec![m], &vv, b)).await;
        let err = out.expect_err("2 MB of text is more than the 1 MiB budget");
        assert!(
            matches!(
                &err,
                SubstituteError::Memory {
                    cause: MemoryError::TooLarge { .. },
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(!err.is_transient());
        assert!(err.to_string().contains("--source-memory-mib=1"), "{err}");
        assert!(held.is_none());
        assert_eq!(memory.held_bytes(), 0);

        // Within both: the parsed member keeps its estimated size until the lease goes.
        let m =
            manifest("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  k: ${b}\n");
        let budget = StageBudget::new(64 << 20, &memory, Instant::now() + allowed, allowed);
        let (out, held) = budget.run(move |b| apply_within(vec![m], &v, b)).await;
        let out = out.expect("fits");
        let held = held.expect("a lease");
        assert_eq!(
            held.bytes(),
            crate::sources::estimate_bytes(&out) * KEPT_COPIES
        );
        assert_eq!(memory.held_bytes(), held.bytes().div_ceil(1024) * 1024);
        drop(held);
        assert_eq!(memory.held_bytes(), 0);

        // A passed deadline stops the substitution before the member.
        let m = manifest("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n");
        let budget = StageBudget::new(64 << 20, &memory, Instant::now(), allowed);
        let (out, _) = budget
            .run(move |b| apply_within(vec![m], &Vars::default(), b))
            .await;
        let err = out.expect_err("deadline");
        assert!(matches!(err, SubstituteError::TimedOut { .. }), "{err:?}");
        assert!(err.is_transient());
        assert!(err.to_string().contains("--source-timeout"), "{err}");
    }

    #[test]
    fn names_and_precedence() {
        for ok in ["a", "_x", "A_1", "cluster_name"] {
            assert!(is_name(ok), "{ok}");
        }
        for bad in ["", "1a", "a-b", "a.b", "a b"] {
            assert!(!is_name(bad), "{bad}");
        }
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

    /// One layer of variables, from a Secret when `secret`.
    fn layer(pairs: &[(&str, &str)], secret: bool) -> (String, BTreeMap<String, String>, bool) {
        let values = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        ("substituteFrom[0]".to_string(), values, secret)
    }

    #[test]
    fn members_a_secret_variable_was_substituted_into_are_marked() {
        // A 1-byte Secret value, an empty one, and one a later plain layer overrode: each
        // marks the members that reference it.
        let v = merge(vec![
            layer(&[("region", "eu")], false),
            layer(&[("pin", "7"), ("empty", ""), ("over", "s")], true),
            layer(&[("over", "plain")], false),
        ])
        .expect("valid");
        let cm = |data: &str| {
            manifest(&format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n{data}"
            ))
        };
        let cases = [
            ("  v: ${region}\n", false),
            ("  v: ${pin}\n", true),
            ("  v: x${empty:=d}\n", true),
            ("  v: ${over}\n", true),
            ("  v: ${region}\n  w: $${pin}\n", false),
            ("  v: plain\n", false),
        ];
        for (data, marked) in cases {
            let out = apply(vec![cm(data)], &v).expect("substituted");
            assert_eq!(out[0].secret_substituted, marked, "{data}");
        }
        assert!(v.references_secret("${pin}") && !v.references_secret("$${pin}"));
        assert!(!vars(&[("pin", "7")]).references_secret("${pin}"));
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

//! A set's member tree for its page: the members and their health as `kubectl applyset tree`
//! reads them ([`crate::tree::assessed`]: the engine's listing, the status's members not
//! found, the set's health expressions), joined with the status's `failures` (the members the
//! last reconcile could not apply: shown failed, with the failure's reason as their word and
//! its message; a failure whose member was not listed gets a row of its own), grouped by
//! namespace then kind, failures first. No object's content is kept: a member is its
//! reference, its health word and its message; a Secret shows its name, its health word and
//! its keys only (no message: a health expression could quote a value). The listings are
//! shared between viewers by the set page's reads.

use std::collections::BTreeMap;

use applyset_operator::{
    api::{MemberFailure, MemberRef},
    discovery::Resolver,
    health::Status,
    parent::AnyParent,
};
use kube::Client;

use crate::tree::{self, Assessed, Reader};

/// Objects per page of a member LIST.
const PAGE_SIZE: u32 = 500;

/// One member as the page shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    pub reference: MemberRef,
    /// `current`, `in-progress`, `failed`, `terminating`, `not-found`, `unknown` (its CSS
    /// class).
    pub health: &'static str,
    /// The health's word (`Current`, `InProgress`, …), or a failure's reason (`Conflict`).
    pub status: String,
    pub message: String,
    /// `group/Kind/namespace/name` (the `data-member` attribute).
    pub id: String,
    /// A Secret's keys, comma-separated (never its values).
    pub keys: String,
}

/// The members of one kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KindGroup {
    /// `Kind` or `Kind.group`.
    pub kind: String,
    pub rows: Vec<Row>,
    pub failing: usize,
}

/// The members of one namespace (`(cluster-scoped)` for those without).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamespaceGroup {
    pub namespace: String,
    pub kinds: Vec<KindGroup>,
    pub failing: usize,
}

/// The CSS class of a health.
pub fn class(s: Status) -> &'static str {
    match s {
        Status::Current => "current",
        Status::InProgress => "in-progress",
        Status::Failed => "failed",
        Status::Terminating => "terminating",
        Status::NotFound => "not-found",
        Status::Unknown => "unknown",
    }
}

/// Whether a health counts as a failure on the page (not current, not on its way).
fn failing(s: Status) -> bool {
    s.urgency() <= Status::NotFound.urgency()
}

/// One member to show: its reference, health, word, message and a Secret's keys.
struct Entry<'a> {
    reference: &'a MemberRef,
    status: Status,
    word: String,
    message: &'a str,
    keys: &'a [String],
}

/// The members of one namespace by kind.
type ByKind<'a> = BTreeMap<String, Vec<Entry<'a>>>;

/// The entries shown: every member, a member of `failures` as failed with the failure's
/// reason and message, then each failure whose member is not among `members`.
fn entries<'a>(members: &'a [Assessed], failures: &'a [MemberFailure]) -> Vec<Entry<'a>> {
    let failure = |r: &MemberRef| failures.iter().find(|f| f.member == *r);
    let mut shown: Vec<Entry<'a>> = members
        .iter()
        .map(|m| match failure(&m.reference) {
            Some(f) => Entry {
                reference: &m.reference,
                status: Status::Failed,
                word: f.reason.clone(),
                message: &f.message,
                keys: &m.secret_keys,
            },
            None => Entry {
                reference: &m.reference,
                status: m.health.status,
                word: m.health.status.as_str().to_string(),
                message: &m.health.message,
                keys: &m.secret_keys,
            },
        })
        .collect();
    for f in failures {
        if !members.iter().any(|m| m.reference == f.member) {
            shown.push(Entry {
                reference: &f.member,
                status: Status::Failed,
                word: f.reason.clone(),
                message: &f.message,
                keys: &[],
            });
        }
    }
    shown
}

/// The members (joined with the status's `failures`) grouped by namespace, then kind; within
/// each, members sorted by health (failures first) then name, and groups with more failures
/// first, then by name.
pub fn group(members: &[Assessed], failures: &[MemberFailure]) -> Vec<NamespaceGroup> {
    let mut by_ns: BTreeMap<String, ByKind<'_>> = BTreeMap::new();
    for e in entries(members, failures) {
        let r = e.reference;
        let ns = r
            .namespace
            .clone()
            .unwrap_or_else(|| "(cluster-scoped)".into());
        let kind = match r.group.is_empty() {
            true => r.kind.clone(),
            false => format!("{}.{}", r.kind, r.group),
        };
        by_ns
            .entry(ns)
            .or_default()
            .entry(kind)
            .or_default()
            .push(e);
    }
    let mut groups: Vec<NamespaceGroup> = by_ns
        .into_iter()
        .map(|(namespace, kinds)| {
            let mut kinds: Vec<KindGroup> = kinds
                .into_iter()
                .map(|(kind, mut es)| {
                    es.sort_by(|a, b| {
                        (a.status.urgency(), &a.reference.name)
                            .cmp(&(b.status.urgency(), &b.reference.name))
                    });
                    let failing = es.iter().filter(|e| failing(e.status)).count();
                    let rows = es.into_iter().map(row).collect();
                    KindGroup {
                        kind,
                        rows,
                        failing,
                    }
                })
                .collect();
            kinds.sort_by(|a, b| b.failing.cmp(&a.failing).then(a.kind.cmp(&b.kind)));
            let failing = kinds.iter().map(|k| k.failing).sum();
            NamespaceGroup {
                namespace,
                kinds,
                failing,
            }
        })
        .collect();
    groups.sort_by(|a, b| {
        b.failing
            .cmp(&a.failing)
            .then(a.namespace.cmp(&b.namespace))
    });
    groups
}

/// A Secret (core group): shown without a message.
fn is_secret(r: &MemberRef) -> bool {
    r.group.is_empty() && r.kind == "Secret"
}

fn row(e: Entry<'_>) -> Row {
    let r = e.reference;
    Row {
        reference: r.clone(),
        health: class(e.status),
        status: e.word,
        message: match is_secret(r) {
            true => String::new(),
            false => e.message.to_string(),
        },
        keys: e.keys.join(", "),
        id: format!(
            "{}/{}/{}/{}",
            r.group,
            r.kind,
            r.namespace.as_deref().unwrap_or_default(),
            r.name
        ),
    }
}

/// The members of `p` with their health, listed as the user (`client`).
pub async fn list(client: &Client, p: &AnyParent) -> Result<Vec<Assessed>, String> {
    let resolver = Resolver::new(client.clone());
    let reader = Reader {
        client,
        resolver: &resolver,
        page_size: PAGE_SIZE,
    };
    tree::assessed(&reader, p).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use applyset_operator::health::Health;

    fn member(group: &str, kind: &str, ns: Option<&str>, name: &str, s: Status) -> Assessed {
        Assessed {
            reference: MemberRef {
                group: group.into(),
                kind: kind.into(),
                namespace: ns.map(String::from),
                name: name.into(),
            },
            exists: s != Status::NotFound,
            health: Health::new(s, format!("{name} is {s}")),
            secret_keys: match kind {
                "Secret" => vec!["password".into(), "user".into()],
                _ => Vec::new(),
            },
        }
    }

    #[test]
    fn members_are_grouped_by_namespace_then_kind_failures_first() {
        let members = [
            member("", "ConfigMap", Some("a"), "cfg", Status::Current),
            member("apps", "Deployment", Some("a"), "api", Status::Current),
            member("apps", "Deployment", Some("a"), "web", Status::Failed),
            member("", "Secret", Some("b"), "token", Status::Current),
            member("", "Namespace", None, "a", Status::Current),
            member("", "ConfigMap", Some("c"), "gone", Status::NotFound),
            member("apps", "Deployment", Some("a"), "zed", Status::InProgress),
        ];
        let groups = group(&members, &[]);
        let names: Vec<(&str, usize)> = groups
            .iter()
            .map(|g| (g.namespace.as_str(), g.failing))
            .collect();
        assert_eq!(
            names,
            [("a", 1), ("c", 1), ("(cluster-scoped)", 0), ("b", 0)]
        );
        let a = &groups[0];
        let kinds: Vec<&str> = a.kinds.iter().map(|k| k.kind.as_str()).collect();
        assert_eq!(kinds, ["Deployment.apps", "ConfigMap"]);
        let deployments: Vec<(&str, &str)> = a.kinds[0]
            .rows
            .iter()
            .map(|r| (r.reference.name.as_str(), r.health))
            .collect();
        assert_eq!(
            deployments,
            [
                ("web", "failed"),
                ("zed", "in-progress"),
                ("api", "current")
            ]
        );
        let web = &a.kinds[0].rows[0];
        assert_eq!(web.id, "apps/Deployment/a/web");
        assert_eq!(web.status, "Failed");
        assert_eq!(web.message, "web is Failed");
        assert_eq!(groups[1].kinds[0].rows[0].health, "not-found");
        assert_eq!(groups[2].kinds[0].rows[0].id, "/Namespace//a");
        assert_eq!(groups[3].kinds[0].rows[0].keys, "password, user");
        assert_eq!(web.keys, "");
        assert!(group(&[], &[]).is_empty());
        assert_eq!(
            groups[3].kinds[0].rows[0].message, "",
            "a Secret shows no health message"
        );
    }

    #[test]
    fn failures_are_failed_rows_first_with_their_reason() {
        let members = [
            member("", "ConfigMap", Some("shop"), "app", Status::Current),
            member(
                "",
                "ConfigMap",
                Some("shop"),
                "postgres-config",
                Status::Current,
            ),
        ];
        let failure = |ns: &str, name: &str, reason: &str| MemberFailure {
            member: MemberRef {
                group: String::new(),
                kind: "ConfigMap".into(),
                namespace: Some(ns.into()),
                name: name.into(),
            },
            reason: reason.into(),
            message: format!("{name} failed"),
        };
        let failures = [
            failure("shop", "postgres-config", "Conflict"),
            failure("other", "orphan", "ApplyFailed"),
        ];
        let groups = group(&members, &failures);
        let rows: Vec<(&str, &str, &str, &str)> = groups
            .iter()
            .flat_map(|g| g.kinds.iter().flat_map(|k| k.rows.iter()))
            .map(|r| {
                (
                    r.reference.name.as_str(),
                    r.health,
                    r.status.as_str(),
                    r.message.as_str(),
                )
            })
            .collect();
        assert_eq!(
            rows,
            [
                ("orphan", "failed", "ApplyFailed", "orphan failed"),
                (
                    "postgres-config",
                    "failed",
                    "Conflict",
                    "postgres-config failed"
                ),
                ("app", "current", "Current", "app is Current"),
            ]
        );
        assert_eq!(groups[1].failing, 1);
    }

    #[test]
    fn every_health_has_a_class_and_a_rank() {
        let classes: Vec<&str> = Status::ALL.iter().map(|s| class(*s)).collect();
        assert_eq!(
            classes,
            [
                "current",
                "in-progress",
                "failed",
                "terminating",
                "not-found",
                "unknown"
            ]
        );
        assert!(failing(Status::Failed) && failing(Status::NotFound) && failing(Status::Unknown));
        assert!(!failing(Status::Current) && !failing(Status::InProgress));
        assert!(!failing(Status::Terminating));
    }
}

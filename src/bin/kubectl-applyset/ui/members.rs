//! A set's member tree for its page: the members and their health as `kubectl applyset tree`
//! reads them ([`crate::tree::assessed`]: the engine's listing, the status's members not
//! found, the set's health expressions), grouped by namespace then kind, failures first; and
//! a short-lived cache of those listings shared by every viewer, keyed by the set's
//! resourceVersion, so that many viewers of one set make one listing. No object's content is
//! kept: a member is its reference, its health word and its message (a Secret shows its name
//! only).

use std::collections::BTreeMap;

use applyset_operator::{api::MemberRef, discovery::Resolver, health::Status, parent::AnyParent};
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
    /// The health's word (`Current`, `InProgress`, …).
    pub status: &'static str,
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

/// How bad a health is: failures first.
fn severity(s: Status) -> u8 {
    match s {
        Status::Failed => 0,
        Status::Unknown => 1,
        Status::NotFound => 2,
        Status::Terminating => 3,
        Status::InProgress => 4,
        Status::Current => 5,
    }
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
    severity(s) <= severity(Status::NotFound)
}

/// The members of one namespace by kind, with their health.
type ByKind<'a> = BTreeMap<String, Vec<(&'a Assessed, Status)>>;

/// The members grouped by namespace, then kind; within each, members sorted by health
/// (failures first) then name, and groups with more failures first, then by name.
pub fn group(members: &[Assessed]) -> Vec<NamespaceGroup> {
    let mut by_ns: BTreeMap<String, ByKind<'_>> = BTreeMap::new();
    for m in members {
        let r = &m.reference;
        let ns = r
            .namespace
            .clone()
            .unwrap_or_else(|| "(cluster-scoped)".into());
        let kind = match r.group.is_empty() {
            true => r.kind.clone(),
            false => format!("{}.{}", r.kind, r.group),
        };
        let entry = by_ns.entry(ns).or_default().entry(kind).or_default();
        entry.push((m, m.health.status));
    }
    let mut groups: Vec<NamespaceGroup> = by_ns
        .into_iter()
        .map(|(namespace, kinds)| {
            let mut kinds: Vec<KindGroup> = kinds
                .into_iter()
                .map(|(kind, mut ms)| {
                    ms.sort_by(|a, b| {
                        (severity(a.1), &a.0.reference.name)
                            .cmp(&(severity(b.1), &b.0.reference.name))
                    });
                    let failing = ms.iter().filter(|(_, s)| failing(*s)).count();
                    let rows = ms.into_iter().map(|(m, s)| row(m, s)).collect();
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

fn row(m: &Assessed, s: Status) -> Row {
    let r = &m.reference;
    Row {
        reference: r.clone(),
        health: class(s),
        status: s.as_str(),
        message: m.health.message.clone(),
        keys: m.secret_keys.join(", "),
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
        let groups = group(&members);
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
        assert!(group(&[]).is_empty());
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

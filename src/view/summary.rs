//! One set as a view lists it: a small projection of the parent (no manifests, no managed
//! fields), its state in one word, and the KEY naming it in a view's URLs and live feed
//! ([`key`]). Pure.

use k8s_openapi::{apimachinery::pkg::apis::meta::v1::Condition, jiff::Timestamp};

use crate::{
    api::{ApplySetStatus, Mode, ObjectSource, Source},
    applyset::{ParentKind, ParentRef},
    dependencies::{self, NotReady},
    parent::AnyParent,
    status::{self, Reason},
};

/// A set's state in one word, for the sets page's filter, its colour and the summary bar.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum State {
    /// Ready True (or, in Plan mode, the plan made: Ready False for PlanReady).
    Ready,
    /// Ready False for a reason other than waiting for dependencies, or Stalled.
    Failing,
    /// Ready False with reason DependencyNotReady: `waiting for <set>`.
    Waiting,
    /// `spec.suspend: true`.
    Suspended,
    /// Not reconciled for its generation yet, or Reconciling.
    Reconciling,
    /// Being deleted.
    Deleting,
}

impl State {
    /// The CSS class and filter value: `ready`, `failing`, …
    pub fn as_str(&self) -> &'static str {
        match self {
            State::Ready => "ready",
            State::Failing => "failing",
            State::Waiting => "waiting",
            State::Suspended => "suspended",
            State::Reconciling => "reconciling",
            State::Deleting => "deleting",
        }
    }
}

/// One source of a set as the view shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceView {
    /// `git`, `oci`, `http`, `configMap`, `secret`, …
    pub kind: &'static str,
    /// The URL or object name, as the spec says it (tenant data: shown as text).
    pub location: String,
    /// `spec.sources[].path`, when set.
    pub path: Option<String>,
    /// The ref as written (branch, tag, commit, digest), when the kind has one.
    pub reference: Option<String>,
}

/// One set, projected for a view.
#[derive(Clone, Debug, PartialEq)]
pub struct SetSummary {
    pub parent: ParentRef,
    pub uid: String,
    pub resource_version: String,
    pub generation: i64,
    pub created: Option<Timestamp>,
    pub state: State,
    /// Ready's status (`True`, `False`, `Unknown`), reason and message, when it has one.
    pub ready: Option<(String, String, String)>,
    /// Healthy's status and reason, when it has one.
    pub healthy: Option<(String, String)>,
    pub reconciling: bool,
    pub stalled: bool,
    pub suspended: bool,
    /// `spec.mode: Plan`.
    pub plan_only: bool,
    /// `status.summary.members` and `.pruned` (of the last reconcile).
    pub members: i64,
    pub pruned: i64,
    pub sources: Vec<SourceView>,
    pub last_applied_revision: Option<String>,
    pub last_attempted_revision: Option<String>,
    /// When the operator last changed Ready (its lastTransitionTime), or handled a request.
    pub last_reconcile: Option<Timestamp>,
    /// `spec.dependsOn`, resolved (namespaces defaulted; empty when it does not resolve).
    pub depends_on: Vec<ParentRef>,
    /// Whether a set depending on this one may go ([`dependencies::verdict`] on this set):
    /// why not, when not.
    pub as_dependency: Result<(), NotReady>,
    /// The dependency it waits for and why (from Ready's reason DependencyNotReady, named
    /// through the cache), when it waits.
    pub waiting_for: Option<(ParentRef, String)>,
}

/// The length at which a summary cuts Ready's message (the operator's may reach 32 KiB; the
/// set's page reads the whole condition from the live parent).
pub const MESSAGE_LIMIT: usize = 1024;

/// The KEY of a set in the view's URLs and live feed: `namespace/name` for an ApplySet,
/// `cluster/name` for a ClusterApplySet.
pub fn key(parent: &ParentRef) -> String {
    match parent.kind {
        ParentKind::ApplySet => format!(
            "{}/{}",
            parent.namespace.as_deref().unwrap_or_default(),
            parent.name
        ),
        ParentKind::ClusterApplySet => format!("cluster/{}", parent.name),
    }
}

/// The set a KEY names ([`key`]'s inverse): `cluster/name` is a ClusterApplySet, any other
/// `namespace/name` an ApplySet; `None` without exactly one `/` or with an empty part.
pub fn from_key(key: &str) -> Option<ParentRef> {
    let (first, name) = key.split_once('/')?;
    if first.is_empty() || name.is_empty() || name.contains('/') {
        return None;
    }
    Some(if first == "cluster" {
        ParentRef::cluster(name)
    } else {
        ParentRef::applyset(first, name)
    })
}

/// What the state of a set is decided from (see [`State::decide`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Signals<'a> {
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// `spec.suspend`.
    pub suspended: bool,
    /// The status describes the current generation (`status.observedGeneration`).
    pub observed: bool,
    /// Reconciling is True.
    pub reconciling: bool,
    /// Ready's status and reason, when it has one.
    pub ready: Option<(&'a str, &'a str)>,
    /// Stalled is True.
    pub stalled: bool,
}

impl State {
    /// The state: Deleting when being deleted; else Suspended when suspended; else
    /// Reconciling when the status does not describe this generation or Reconciling is True;
    /// else Waiting when Ready is False for DependencyNotReady; else Ready when Ready is False
    /// for PlanReady (a Plan-mode set that planned: not a failure) and not Stalled; else
    /// Failing when Ready is False or Stalled is True; else Ready when Ready is True; else
    /// (Ready Unknown or absent) Reconciling.
    pub fn decide(s: Signals<'_>) -> State {
        let ready_false = matches!(s.ready, Some(("False", _)));
        if s.deleting {
            State::Deleting
        } else if s.suspended {
            State::Suspended
        } else if !s.observed || s.reconciling {
            State::Reconciling
        } else if s.ready == Some(("False", Reason::DependencyNotReady.as_str())) {
            State::Waiting
        } else if s.ready == Some(("False", Reason::PlanReady.as_str())) && !s.stalled {
            State::Ready
        } else if ready_false || s.stalled {
            State::Failing
        } else if matches!(s.ready, Some(("True", _))) {
            State::Ready
        } else {
            State::Reconciling
        }
    }
}

impl SourceView {
    /// The view of one `spec.sources` entry (`None` for an entry with no kind set, which the
    /// CRD refuses).
    pub fn of(source: &Source) -> Option<SourceView> {
        let object = |o: &ObjectSource| match o.namespace.as_deref().filter(|n| !n.is_empty()) {
            Some(ns) => format!("{ns}/{}", o.name),
            None => o.name.clone(),
        };
        let view = |kind, location, path: &Option<String>, reference: Option<&String>| {
            Some(SourceView {
                kind,
                location,
                path: path.clone(),
                reference: reference.cloned(),
            })
        };
        if let Some(g) = &source.git {
            let r = &g.reference;
            let reference = r.branch.as_ref().or(r.tag.as_ref()).or(r.commit.as_ref());
            view("git", g.url.clone(), &g.path, reference)
        } else if let Some(o) = &source.oci {
            let reference = o.tag.as_ref().or(o.digest.as_ref());
            view("oci", o.url.clone(), &o.path, reference)
        } else if let Some(h) = &source.http {
            view("http", h.url.clone(), &h.path, None)
        } else if let Some(c) = &source.config_map {
            view("configMap", object(c), &None, None)
        } else if let Some(s) = &source.secret {
            view("secret", object(s), &None, None)
        } else {
            None
        }
    }
}

impl SetSummary {
    /// A set known only by its reference, not yet reconciled: no status, no sources, no
    /// dependencies; `Reconciling`, and not ready as a dependency. The base the tests of the
    /// views build their sets from.
    pub fn unobserved(parent: ParentRef) -> SetSummary {
        SetSummary {
            as_dependency: Err(NotReady::NotReconciled {
                dependency: parent.clone(),
                generation: 1,
            }),
            parent,
            uid: String::new(),
            resource_version: String::new(),
            generation: 1,
            created: None,
            state: State::Reconciling,
            ready: None,
            healthy: None,
            reconciling: false,
            stalled: false,
            suspended: false,
            plan_only: false,
            members: 0,
            pruned: 0,
            sources: Vec::new(),
            last_applied_revision: None,
            last_attempted_revision: None,
            last_reconcile: None,
            depends_on: Vec::new(),
            waiting_for: None,
        }
    }

    /// The summary of `parent` (its `waiting_for` is left to the cache, which knows the
    /// other sets).
    pub fn of(parent: &AnyParent) -> SetSummary {
        let meta = parent.meta();
        let spec = parent.spec();
        let status = parent.status();
        let reference = parent.parent_ref();
        let generation = meta.generation.unwrap_or_default();
        let conditions = status.map(|s| s.conditions.as_slice()).unwrap_or_default();
        let condition = |t: &str| conditions.iter().find(|c| c.type_ == t);
        let is_true = |t: &str| condition(t).is_some_and(|c| c.status == "True");
        let ready = condition(status::READY);
        let counts = status.and_then(|s| s.summary.as_ref());
        let state = State::decide(Signals {
            deleting: meta.deletion_timestamp.is_some(),
            suspended: spec.suspend,
            observed: status.and_then(ApplySetStatus::observed) == Some(generation),
            reconciling: is_true(status::RECONCILING),
            ready: ready.map(|c| (c.status.as_str(), c.reason.as_str())),
            stalled: is_true(status::STALLED),
        });
        SetSummary {
            uid: meta.uid.clone().unwrap_or_default(),
            resource_version: meta.resource_version.clone().unwrap_or_default(),
            generation,
            created: meta.creation_timestamp.as_ref().map(|t| t.0),
            state,
            ready: ready.map(|c| {
                let message = crate::status::truncate(&c.message, MESSAGE_LIMIT);
                (c.status.clone(), c.reason.clone(), message)
            }),
            healthy: condition(status::HEALTHY).map(|c| (c.status.clone(), c.reason.clone())),
            reconciling: is_true(status::RECONCILING),
            stalled: is_true(status::STALLED),
            suspended: spec.suspend,
            plan_only: spec.mode == Mode::Plan,
            members: counts.map_or(0, |c| c.members),
            pruned: counts.map_or(0, |c| c.pruned),
            sources: spec.sources.iter().filter_map(SourceView::of).collect(),
            last_applied_revision: status.and_then(|s| s.last_applied_revision.clone()),
            last_attempted_revision: status.and_then(|s| s.last_attempted_revision.clone()),
            last_reconcile: last_reconcile(ready, status),
            depends_on: dependencies::resolve(&reference, spec).unwrap_or_default(),
            as_dependency: dependencies::verdict(&reference, Some((meta, status))),
            waiting_for: None,
            parent: reference,
        }
    }

    /// Whether `other` shows the same as `self` (everything but the resourceVersion, which
    /// every write of the parent moves).
    pub fn same_view(&self, other: &SetSummary) -> bool {
        let mut same = self.clone();
        same.resource_version.clone_from(&other.resource_version);
        same == *other
    }
}

/// The newest of Ready's lastTransitionTime and `status.lastHandledReconcileAt` (when it
/// parses as a timestamp).
fn last_reconcile(ready: Option<&Condition>, status: Option<&ApplySetStatus>) -> Option<Timestamp> {
    let transition = ready.map(|c| c.last_transition_time.0);
    let handled = status
        .and_then(|s| s.last_handled_reconcile_at.as_deref())
        .and_then(|t| t.parse::<Timestamp>().ok());
    transition.max(handled)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::api::{ApplySet, ClusterApplySet};

    const READY_TRUE: Option<(&str, &str)> = Some(("True", "ReconciliationSucceeded"));
    const WAITING: Option<(&str, &str)> = Some(("False", "DependencyNotReady"));
    const FAILED: Option<(&str, &str)> = Some(("False", "ApplyFailed"));
    const UNKNOWN: Option<(&str, &str)> = Some(("Unknown", "Progressing"));
    const PLANNED: Option<(&str, &str)> = Some(("False", "PlanReady"));

    fn settled(ready: Option<(&'static str, &'static str)>) -> Signals<'static> {
        Signals {
            observed: true,
            ready,
            ..Signals::default()
        }
    }

    #[test]
    fn each_state_from_its_signals() {
        let cases = [
            (settled(READY_TRUE), State::Ready),
            (settled(FAILED), State::Failing),
            (settled(WAITING), State::Waiting),
            (settled(UNKNOWN), State::Reconciling),
            (settled(PLANNED), State::Ready),
            (settled(None), State::Reconciling),
            (
                Signals {
                    stalled: true,
                    ..settled(READY_TRUE)
                },
                State::Failing,
            ),
            (
                Signals {
                    reconciling: true,
                    ..settled(READY_TRUE)
                },
                State::Reconciling,
            ),
            (
                Signals {
                    observed: false,
                    ..settled(READY_TRUE)
                },
                State::Reconciling,
            ),
            (
                Signals {
                    suspended: true,
                    ..settled(FAILED)
                },
                State::Suspended,
            ),
            (
                Signals {
                    deleting: true,
                    suspended: true,
                    ..settled(FAILED)
                },
                State::Deleting,
            ),
        ];
        for (signals, want) in cases {
            assert_eq!(State::decide(signals), want, "{signals:?}");
        }
    }

    /// Every combination of the signals: the rule's precedence, each step checked on its own.
    #[test]
    fn exhaustively_the_precedence_of_the_rule() {
        let readies = [
            None,
            READY_TRUE,
            WAITING,
            FAILED,
            UNKNOWN,
            Some(("False", "")),
        ];
        for bits in 0u8..32 {
            for ready in readies {
                let s = Signals {
                    deleting: bits & 1 != 0,
                    suspended: bits & 2 != 0,
                    observed: bits & 4 != 0,
                    reconciling: bits & 8 != 0,
                    stalled: bits & 16 != 0,
                    ready,
                };
                let got = State::decide(s);
                let ready_false = ready.is_some_and(|(st, _)| st == "False");
                let want = if s.deleting {
                    State::Deleting
                } else if s.suspended {
                    State::Suspended
                } else if !s.observed || s.reconciling {
                    State::Reconciling
                } else if ready == WAITING {
                    State::Waiting
                } else if ready == PLANNED && !s.stalled {
                    State::Ready
                } else if ready_false || s.stalled {
                    State::Failing
                } else if ready == READY_TRUE {
                    State::Ready
                } else {
                    State::Reconciling
                };
                assert_eq!(got, want, "{s:?}");
                // Ready only when nothing else is said.
                if got == State::Ready {
                    assert!(!s.deleting && !s.suspended && !s.reconciling && !s.stalled);
                    assert!(s.observed);
                }
            }
        }
    }

    #[test]
    fn keys_name_sets_both_ways() {
        let a = ParentRef::applyset("team-a", "web");
        let c = ParentRef::cluster("infra");
        assert_eq!(key(&a), "team-a/web");
        assert_eq!(key(&c), "cluster/infra");
        assert_eq!(from_key("team-a/web"), Some(a));
        assert_eq!(from_key("cluster/infra"), Some(c));
        for bad in ["", "web", "/web", "team-a/", "a/b/c", "cluster/"] {
            assert_eq!(from_key(bad), None, "{bad}");
        }
    }

    fn condition(type_: &str, status: &str, reason: &str, at: &str) -> serde_json::Value {
        json!({"type": type_, "status": status, "reason": reason, "message": format!("{type_} says {reason}"),
            "lastTransitionTime": at, "observedGeneration": 3})
    }

    fn applyset(spec: serde_json::Value, status: serde_json::Value) -> AnyParent {
        let o: ApplySet = serde_json::from_value(json!({
            "apiVersion": "applyset.dev/v1alpha1", "kind": "ApplySet",
            "metadata": {"name": "web", "namespace": "team-a", "uid": "u-1",
                "resourceVersion": "42", "generation": 3,
                "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": spec, "status": status,
        }))
        .expect("an ApplySet");
        AnyParent::ApplySet(Arc::new(o))
    }

    #[test]
    fn a_set_is_projected_field_by_field() {
        let spec = json!({
            "mode": "Plan",
            "dependsOn": [{"kind": "ApplySet", "name": "db"},
                {"kind": "ClusterApplySet", "name": "crds"}],
            "sources": [
                {"git": {"url": "https://git.example/r.git", "ref": {"tag": "v1"}, "path": "deploy"}},
                {"oci": {"url": "oci://reg/repo", "digest": format!("sha256:{}", "a".repeat(64))}},
                {"http": {"url": "https://example.com/m.yaml"}},
                {"configMap": {"name": "cm"}},
                {"secret": {"name": "s", "namespace": "other"}},
            ],
        });
        let status = json!({
            "observedGeneration": 3,
            "conditions": [
                condition("Ready", "True", "ReconciliationSucceeded", "2026-01-02T00:00:00Z"),
                condition("Healthy", "True", "Current", "2026-01-02T00:00:00Z"),
            ],
            "summary": {"members": 7, "created": 0, "configured": 0, "unchanged": 7, "pruned": 2,
                "failed": 0, "conflicts": 0, "retained": 0, "skipped": 0},
            "lastAppliedRevision": "sha256:x; v1@abc",
            "lastAttemptedRevision": "sha256:y; v1@abc",
            "lastHandledReconcileAt": "2026-01-03T00:00:00Z",
        });
        let s = SetSummary::of(&applyset(spec, status));
        let source =
            |kind, location: &str, path: Option<&str>, reference: Option<&str>| SourceView {
                kind,
                location: location.into(),
                path: path.map(Into::into),
                reference: reference.map(Into::into),
            };
        let digest = format!("sha256:{}", "a".repeat(64));
        let want = SetSummary {
            parent: ParentRef::applyset("team-a", "web"),
            uid: "u-1".into(),
            resource_version: "42".into(),
            generation: 3,
            created: Some("2026-01-01T00:00:00Z".parse().expect("a time")),
            state: State::Ready,
            ready: Some((
                "True".into(),
                "ReconciliationSucceeded".into(),
                "Ready says ReconciliationSucceeded".into(),
            )),
            healthy: Some(("True".into(), "Current".into())),
            reconciling: false,
            stalled: false,
            suspended: false,
            plan_only: true,
            members: 7,
            pruned: 2,
            sources: vec![
                source(
                    "git",
                    "https://git.example/r.git",
                    Some("deploy"),
                    Some("v1"),
                ),
                source("oci", "oci://reg/repo", None, Some(&digest)),
                source("http", "https://example.com/m.yaml", None, None),
                source("configMap", "cm", None, None),
                source("secret", "other/s", None, None),
            ],
            last_applied_revision: Some("sha256:x; v1@abc".into()),
            last_attempted_revision: Some("sha256:y; v1@abc".into()),
            last_reconcile: Some("2026-01-03T00:00:00Z".parse().expect("a time")),
            depends_on: vec![
                ParentRef::applyset("team-a", "db"),
                ParentRef::cluster("crds"),
            ],
            as_dependency: Ok(()),
            waiting_for: None,
        };
        assert_eq!(s, want);
    }

    #[test]
    fn a_new_set_is_reconciling_and_not_yet_a_ready_dependency() {
        let s = SetSummary::of(&applyset(json!({}), json!({"observedGeneration": -1})));
        assert_eq!(s.state, State::Reconciling);
        assert_eq!(
            (s.members, s.ready.clone(), s.last_reconcile),
            (0, None, None)
        );
        assert_eq!(
            s.as_dependency.map_err(|e| e.to_string()),
            Err("ApplySet team-a/web has not reconciled generation 3 yet".into())
        );
    }

    #[test]
    fn a_waiting_set_a_suspended_one_and_the_newest_reconcile_time() {
        let waiting = json!({"observedGeneration": 3, "conditions": [
            condition("Ready", "False", "DependencyNotReady", "2026-01-05T00:00:00Z")],
            "lastHandledReconcileAt": "not a time"});
        let s = SetSummary::of(&applyset(json!({}), waiting.clone()));
        assert_eq!(s.state, State::Waiting);
        assert_eq!(
            s.last_reconcile,
            Some("2026-01-05T00:00:00Z".parse().expect("a time"))
        );
        let s = SetSummary::of(&applyset(json!({"suspend": true}), waiting));
        assert_eq!((s.state, s.suspended), (State::Suspended, true));
    }

    #[test]
    fn a_long_message_is_cut_and_a_bad_depends_on_is_empty() {
        let long = "é".repeat(MESSAGE_LIMIT);
        let status = json!({"observedGeneration": 1, "conditions": [{"type": "Ready",
            "status": "False", "reason": "ApplyFailed", "message": long,
            "lastTransitionTime": "2026-01-05T00:00:00Z"},
            {"type": "Stalled", "status": "True", "reason": "ApplyFailed", "message": "",
            "lastTransitionTime": "2026-01-05T00:00:00Z"}]});
        let o: ClusterApplySet = serde_json::from_value(json!({
            "apiVersion": "applyset.dev/v1alpha1", "kind": "ClusterApplySet",
            "metadata": {"name": "infra", "generation": 1},
            "spec": {"dependsOn": [{"kind": "ApplySet", "name": "db"}]}, "status": status,
        }))
        .expect("a ClusterApplySet");
        let s = SetSummary::of(&AnyParent::ClusterApplySet(Arc::new(o)));
        assert_eq!((s.state, s.stalled), (State::Failing, true));
        let (_, _, message) = s.ready.expect("Ready");
        assert!(message.len() <= MESSAGE_LIMIT + '…'.len_utf8());
        assert!(message.ends_with('…'));
        // A ClusterApplySet must name an ApplySet dependency's namespace: not resolved.
        assert!(s.depends_on.is_empty());
    }

    #[test]
    fn only_the_resource_version_is_not_part_of_the_view() {
        let s = SetSummary::of(&applyset(json!({}), json!({"observedGeneration": 3})));
        let mut other = s.clone();
        other.resource_version = "43".into();
        assert!(s.same_view(&other));
        other.members = 1;
        assert!(!s.same_view(&other));
    }
}

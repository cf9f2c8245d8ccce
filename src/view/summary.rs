//! One set as a view lists it: a small projection of the parent (no manifests, no managed
//! fields), and its state in one word. Pure.

use k8s_openapi::jiff::Timestamp;

use crate::applyset::ParentRef;

/// A set's state in one word, for the sets page's filter, its colour and the summary bar.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum State {
    /// Ready True.
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
    /// `spec.dependsOn`, resolved (namespaces defaulted).
    pub depends_on: Vec<ParentRef>,
    /// The dependency it waits for and why (from Ready's reason DependencyNotReady, named
    /// through the cache), when it waits.
    pub waiting_for: Option<(ParentRef, String)>,
}

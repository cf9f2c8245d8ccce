//! The values a reconcile's verbs ([`super::SetEngine`]) share: the rendered set and what is
//! derived from it ([`Desired`]), the parent's record ([`Before`]), the clock, the empty-set
//! guard, and what a plan found ([`Plan`]: each member's dry-run and the prune decision).
//! Plan mode (the reconcile) and `kubectl applyset diff` both run
//! [`super::SetEngine::plan`] and only present its [`Plan`].

use std::{
    collections::HashMap,
    sync::Arc,
    time::{Duration, Instant},
};

use kube::api::ObjectMeta;

use super::{
    outcome::MemberResult,
    prune::{Declared, Selection},
};
use crate::{
    Error, Result,
    api::{ApplySetSpec, ApplySetStatus},
    applyset::{ConventionError, GroupKind},
    discovery::{Resolved, Resolver},
    parent::{self, Recorded},
    render::DesiredSet,
    sources::memory::Lease,
};

/// The reconcile's time bounds: `spec.timeout` from now, and now as Unix seconds (objects
/// created at or after it were created by this reconcile).
pub struct Clock {
    pub deadline: Instant,
    pub epoch: i64,
}

impl Clock {
    pub fn start(spec: &ApplySetSpec) -> Self {
        let now = Instant::now();
        Clock {
            deadline: now.checked_add(spec.timeout()).unwrap_or(now),
            epoch: k8s_openapi::jiff::Timestamp::now().as_second(),
        }
    }
}

/// The rendered set and what is derived from it once.
pub struct Desired {
    pub set: DesiredSet,
    /// How each declared kind resolved.
    pub known: HashMap<GroupKind, Resolved>,
    /// The declared members (what prune must keep).
    pub declared: Declared,
    /// The sources' share of the operator's memory budget, held while the set they rendered
    /// is in use (given back when it is dropped).
    _source_memory: Vec<Arc<Lease>>,
}

impl Desired {
    pub fn new(set: DesiredSet, source_memory: Vec<Arc<Lease>>) -> Self {
        Desired {
            known: set.resolutions(),
            declared: set.declared(),
            set,
            _source_memory: source_memory,
        }
    }

    /// What the parent records for exactly this set.
    pub fn recorded(&self) -> Recorded {
        Recorded {
            group_kinds: self.set.group_kinds(),
            namespaces: self.set.namespaces(),
        }
    }
}

/// What the parent recorded before this reconcile.
#[derive(Clone, Debug, Default)]
pub struct Before {
    /// Its annotations, and what `missing` adds to them.
    pub recorded: Recorded,
    /// What the last complete reconcile applied (status.members) that the annotations do not
    /// record: not empty when they were replaced or edited since.
    pub missing: Recorded,
}

/// What a live parent recorded: its annotations, completed with what its status says was
/// applied last, so that nothing applied is forgotten. The inner error: the annotations are
/// malformed.
pub async fn before(
    meta: &ObjectMeta,
    status: Option<&ApplySetStatus>,
    resolver: &Resolver,
) -> Result<std::result::Result<Before, ConventionError>> {
    let annotations = match parent::recorded(meta, resolver).await? {
        Ok(a) => a,
        Err(e) => return Ok(Err(e)),
    };
    let last = parent::last_applied(status);
    let missing = parent::unrecorded(&annotations, &last, meta.namespace.as_deref());
    Ok(Ok(Before {
        recorded: annotations.union(&missing),
        missing,
    }))
}

/// `kinds ConfigMap,Secret; namespaces a,b`.
pub fn describe(r: &Recorded) -> String {
    let mut parts = Vec::new();
    if !r.group_kinds.is_empty() {
        parts.push(format!(
            "kinds {}",
            crate::applyset::encode_group_kinds(&r.group_kinds)
        ));
    }
    if !r.namespaces.is_empty() {
        let ns: Vec<&str> = r.namespaces.iter().map(String::as_str).collect();
        parts.push(format!("namespaces {}", ns.join(",")));
    }
    parts.join("; ")
}

/// The empty-set guard: an empty set would prune everything recorded. (An empty set with
/// nothing recorded, or with prune off, deletes nothing and is allowed.)
pub fn empty_set_refused(spec: &ApplySetSpec, empty: bool, before: &Recorded) -> bool {
    empty && !spec.allow_empty && spec.prune && !before.group_kinds.is_empty()
}

/// Whether an apply writes or only dry-runs (Plan mode, `kubectl applyset diff`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Run {
    Apply,
    /// A server-side dry-run; `preview`: keep what it showed of each member.
    DryRun {
        preview: bool,
    },
}

/// The apply did not finish within `spec.timeout`.
#[derive(Debug, thiserror::Error)]
#[error("did not finish within spec.timeout ({timeout:?})")]
pub struct TimedOut {
    pub timeout: Duration,
}

/// What a set would do.
pub struct Plan {
    /// Each member's dry-run, in apply order.
    pub members: Vec<MemberResult>,
    pub prune: Pruning,
}

/// The prune part of a [`Plan`].
pub enum Pruning {
    /// `spec.prune: false`.
    Off,
    /// The empty-set guard refuses the set (EmptySetRefused).
    EmptySetRefused,
    /// What would be deleted and what kept.
    Decided(Selection),
    /// The decision could not be made (nothing would be pruned).
    Undecided(Error),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(prune: bool, allow_empty: bool) -> ApplySetSpec {
        serde_json::from_value(serde_json::json!({"prune": prune, "allowEmpty": allow_empty}))
            .expect("spec")
    }

    fn recorded(kinds: &[&str]) -> Recorded {
        Recorded {
            group_kinds: kinds.iter().map(|k| GroupKind::new("", *k)).collect(),
            namespaces: Default::default(),
        }
    }

    #[test]
    fn the_empty_set_guard_refuses_only_an_empty_set_that_would_prune() {
        let cm = recorded(&["ConfigMap"]);
        assert!(empty_set_refused(&spec(true, false), true, &cm));
        // Not empty, allowed, prune off, or nothing recorded: nothing to refuse.
        assert!(!empty_set_refused(&spec(true, false), false, &cm));
        assert!(!empty_set_refused(&spec(true, true), true, &cm));
        assert!(!empty_set_refused(&spec(false, false), true, &cm));
        assert!(!empty_set_refused(&spec(true, false), true, &recorded(&[])));
    }
}

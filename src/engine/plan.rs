//! What applying a set would do, and the pieces of a reconcile both modes share: the
//! rendered set and what is derived from it ([`Desired`]), the parent's record
//! ([`Before`]), the empty-set guard, the apply under the set's timeout ([`apply_set`]), and
//! [`plan`]: a server-side dry-run of every member and the prune decision, writing nothing.
//! Plan mode (the reconcile) and `kubectl applyset diff` both run [`plan`] and only present
//! its [`Plan`].

use std::{
    collections::HashMap,
    sync::Arc,
    time::{Duration, Instant},
};

use kube::api::ObjectMeta;

use super::{
    Extent, SetScope, adopt, apply,
    live::Live,
    outcome::MemberResult,
    prune::{self, Declared, Keep, Listing, Selection},
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

/// Applies (or dry-runs) the members within spec.timeout, after looking up which members
/// exist unlabelled (they are adopted only if allowed). The outer `Result` is I/O of the
/// lookup.
pub async fn apply_set(
    scope: &SetScope,
    spec: &ApplySetSpec,
    desired: &Desired,
    live: &Live,
    clock: &Clock,
    run: Run,
) -> Result<std::result::Result<Vec<MemberResult>, TimedOut>> {
    let members = &desired.set.members;
    let dry_run = run != Run::Apply;
    let applying = async {
        // A plan looks at what exists first; an apply creates what is absent without a look
        // (see engine::create) and looks only at what exists.
        let lookup = match dry_run {
            true => adopt::unlabelled(scope, members, &live.owned).await?,
            false => adopt::Lookup::default(),
        };
        let opts = apply::Options {
            force: spec.force,
            dry_run,
            existing: &live.existing,
            started: clock.epoch,
            deadline: clock.deadline,
            lookup: &lookup,
            adopt_existing: spec.adopt_existing,
            preview: run == Run::DryRun { preview: true },
            create_only: (!dry_run).then_some(&live.owned),
        };
        Ok::<_, Error>(apply::apply_staged(scope, members, &opts).await)
    };
    let remaining = clock.deadline.saturating_duration_since(Instant::now());
    match tokio::time::timeout(remaining, applying).await {
        Ok(results) => Ok(Ok(results?)),
        Err(_) => Ok(Err(TimedOut {
            timeout: spec.timeout(),
        })),
    }
}

/// One reconcile's view of its set: who acts, what is declared, over which extent, and what
/// is live.
pub struct SetView<'a> {
    pub scope: &'a SetScope,
    pub resolver: &'a Resolver,
    pub desired: &'a Desired,
    pub extent: &'a Extent,
    pub live: &'a Live,
}

impl SetView<'_> {
    /// What to prune, keeping the declared members and what `applied` just wrote (see
    /// [`prune::decide`] for `listing`).
    pub async fn decide_prune(
        &self,
        applied: &[MemberResult],
        listing: Listing,
    ) -> Result<Selection> {
        let keep = Keep::new(&self.desired.known, &self.desired.declared, applied);
        prune::decide(
            self.scope,
            self.resolver,
            self.extent,
            &keep,
            self.live,
            listing,
        )
        .await
    }
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

/// Plans a set: every member dry-run with server-side apply as the set would apply it (within
/// spec.timeout), then — unless the empty-set guard refuses it (`before`: what the parent
/// recorded) or prune is off — the prune decision, keeping what the dry-run found (decided
/// even when a member would fail, so that a diff shows it; Plan mode reports the failure
/// instead). `preview`: keep what the dry-run showed of each member. Writes nothing.
pub async fn plan(
    view: &SetView<'_>,
    spec: &ApplySetSpec,
    before: &Recorded,
    clock: &Clock,
    preview: bool,
) -> Result<std::result::Result<Plan, TimedOut>> {
    let run = Run::DryRun { preview };
    let applied = apply_set(view.scope, spec, view.desired, view.live, clock, run).await?;
    let members = match applied {
        Ok(members) => members,
        Err(timed_out) => return Ok(Err(timed_out)),
    };
    let prune = if empty_set_refused(spec, view.desired.set.members.is_empty(), before) {
        Pruning::EmptySetRefused
    } else if !spec.prune {
        Pruning::Off
    } else {
        match view.decide_prune(&members, Listing::Earlier).await {
            Ok(selection) => Pruning::Decided(selection),
            Err(e) => Pruning::Undecided(e),
        }
    };
    Ok(Ok(Plan { members, prune }))
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

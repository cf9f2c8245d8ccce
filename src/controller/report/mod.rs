//! What a reconcile reports: its outcome as a [`Report`], built by the pure functions here
//! from the members' results (read through the engine's one classification,
//! [`crate::engine::class`]), the status it leads to and when to look again. Fitting the
//! status into the object's size bound is [`fit`]'s; the writes of status and events are
//! [`write`]'s; the reconcile's control-flow types ([`Step`], [`Stop`]) are [`step`]'s.

mod fit;
mod step;
mod write;

pub use fit::{MAX_OBJECT_BYTES, SpecSizes, fit, other_bytes};
pub(super) use step::{Step, Stop};
pub use write::{announce_changes, mark_progressing, orphaned, write};

use crate::{
    api::{ApplySetStatus, MemberFailure, MemberRef, Plan, PlanSkip, Summary},
    engine::{
        class::{Class, ConflictKind, Refusal},
        outcome::MemberResult,
    },
    status::{self, Reason},
};

use super::MAX_LISTED;

/// The outcome of one reconcile, as reported in status.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    pub ready: bool,
    pub reason: Reason,
    pub message: String,
    pub summary: Option<Summary>,
    pub members: Option<Vec<MemberRef>>,
    pub plan: Option<Plan>,
    /// The members not applied, and why (status.failures).
    pub failures: Vec<MemberFailure>,
    pub attempted: Option<String>,
    pub applied: Option<String>,
    /// Retry with backoff even if the reason is a stalled one (something the operator does
    /// not watch may fix it, e.g. a CRD installed by someone else).
    pub retry: bool,
    /// Look again after this long at the latest (a set waiting for its health: when its
    /// wait times out).
    pub requeue_after: Option<std::time::Duration>,
    /// What this reconcile changed (members created, configured, adopted, pruned), for its
    /// event; not part of status.
    pub changes: Option<String>,
}

impl Report {
    pub fn failed(reason: Reason, message: String) -> Self {
        Report {
            ready: false,
            reason,
            message,
            summary: None,
            members: None,
            plan: None,
            failures: Vec::new(),
            attempted: None,
            applied: None,
            retry: false,
            requeue_after: None,
            changes: None,
        }
    }

    /// The same report, carrying what the reconcile changed (see [`changes`]).
    pub fn with_changes(self, changes: Option<String>) -> Self {
        Report { changes, ..self }
    }

    /// The same report, for an attempt at `revision`.
    pub fn attempted(self, revision: &str) -> Self {
        Report {
            attempted: Some(revision.to_string()),
            ..self
        }
    }
}

/// At most five messages, then how many more.
fn listing(messages: &[&str]) -> String {
    let mut msg = messages
        .iter()
        .take(5)
        .copied()
        .collect::<Vec<_>>()
        .join("; ");
    if messages.len() > 5 {
        msg.push_str(&format!("; and {} more", messages.len() - 5));
    }
    msg
}

/// The report for members that failed to apply, if any: ownership first, then refused
/// adoptions, then conflicts, then other failures (the reason is the first kind present;
/// the message lists that kind).
pub fn apply_failure(results: &[MemberResult], revision: &str) -> Option<Report> {
    let mut owned = Vec::new();
    let mut refused = Vec::new();
    let mut conflicts = Vec::new();
    let mut failed = Vec::new();
    let mut terminating = std::collections::BTreeMap::<&str, usize>::new();
    let failures = failures(results);
    for r in results {
        match r.outcome.class() {
            Class::Refused(Refusal::NamespaceTerminating { namespace }) => {
                *terminating.entry(namespace).or_default() += 1
            }
            Class::Conflict { kind, message } => match kind {
                ConflictKind::Owned => owned.push(message),
                ConflictKind::AdoptionRefused => refused.push(message),
                ConflictKind::Fields => conflicts.push(message),
            },
            Class::Failed { message, .. } => failed.push(message),
            _ => {}
        }
    }
    let (reason, list) = if !owned.is_empty() {
        (Reason::OwnershipConflict, owned)
    } else if !refused.is_empty() {
        (Reason::AdoptionRefused, refused)
    } else if !conflicts.is_empty() {
        (Reason::Conflict, conflicts)
    } else if !failed.is_empty() {
        (Reason::ApplyFailed, failed)
    } else if !terminating.is_empty() {
        let r = namespace_terminating(&terminating);
        return Some(Report { failures, ..r }.attempted(revision));
    } else {
        return None;
    };
    let msg = format!(
        "{} member(s) not applied, nothing pruned: {}",
        list.len(),
        listing(&list)
    );
    let r = Report::failed(reason, msg);
    Some(Report { failures, ..r }.attempted(revision))
}

/// Failures listed in status at most, and the length of each message.
pub const MAX_FAILURES: usize = 20;
const FAILURE_MESSAGE: usize = 512;

/// The members not applied, with the reason each leads to and its message: the most
/// serious first (another set's object, a refused adoption, a conflict, a failed apply, a
/// namespace being terminated), at most [`MAX_FAILURES`].
pub fn failures(results: &[MemberResult]) -> Vec<MemberFailure> {
    let mut out: Vec<(u8, MemberFailure)> = results
        .iter()
        .filter_map(|r| {
            let (rank, reason, message) = match r.outcome.class() {
                Class::Conflict { kind, message } => match kind {
                    ConflictKind::Owned => (0, Reason::OwnershipConflict, message.to_string()),
                    ConflictKind::AdoptionRefused => {
                        (1, Reason::AdoptionRefused, message.to_string())
                    }
                    ConflictKind::Fields => (2, Reason::Conflict, message.to_string()),
                },
                Class::Failed { message, .. } => (3, Reason::ApplyFailed, message.to_string()),
                Class::Refused(Refusal::NamespaceTerminating { namespace }) => (
                    4,
                    Reason::NamespaceTerminating,
                    format!("namespace {namespace} is being terminated"),
                ),
                _ => return None,
            };
            let failure = MemberFailure {
                member: r.reference.clone(),
                reason: reason.as_str().to_string(),
                message: status::truncate(&message, FAILURE_MESSAGE),
            };
            Some((rank, failure))
        })
        .collect();
    out.sort_by(|a, b| (a.0, &a.1.member).cmp(&(b.0, &b.1.member)));
    out.into_iter().take(MAX_FAILURES).map(|(_, f)| f).collect()
}

/// How soon a set with members in a namespace being terminated looks again (whether the
/// namespace is gone or back is looked up at most every [`crate::terminating::RECHECK`],
/// once for all sets).
pub const TERMINATING_RETRY: std::time::Duration = std::time::Duration::from_secs(10);

/// The report for members not applied because their namespace is being terminated (member
/// count by namespace): NamespaceTerminating, naming them, looked at again after
/// [`TERMINATING_RETRY`] (no backoff burst, no failure count).
fn namespace_terminating(by_namespace: &std::collections::BTreeMap<&str, usize>) -> Report {
    let named: Vec<String> = by_namespace
        .iter()
        .map(|(ns, n)| format!("{n} member(s) in namespace {ns}"))
        .collect();
    let msg = format!(
        "{} not applied, nothing pruned: the namespace is being terminated; applied again once it is gone or back",
        named.join(", ")
    );
    Report {
        requeue_after: Some(TERMINATING_RETRY),
        ..Report::failed(Reason::NamespaceTerminating, msg)
    }
}

/// The report for a prune that did not finish (a delete failed, or an object changed or was
/// re-created while being pruned), if so: the parent keeps recording every kind.
pub fn prune_failure(parent: &str, results: &[MemberResult], revision: &str) -> Option<Report> {
    let mut errors = Vec::new();
    let mut changed = Vec::new();
    for r in results {
        let class = r.outcome.class();
        match class {
            Class::Unfinished {
                message: Some(message),
            } => errors.push(message.to_string()),
            _ if class.is_unfinished_prune() => changed.push(r.reference.to_string()),
            _ => {}
        }
    }
    if errors.is_empty() && changed.is_empty() {
        return None;
    }
    let mut parts = Vec::new();
    if !errors.is_empty() {
        parts.push(format!(
            "{} delete(s) failed: {}",
            errors.len(),
            errors.join("; ")
        ));
    }
    if !changed.is_empty() {
        parts.push(format!(
            "changed while being pruned (looked at again next time): {}",
            changed.join(", ")
        ));
    }
    let msg = format!(
        "{parent}: prune incomplete, the parent keeps recording every kind: {}",
        parts.join("; ")
    );
    Some(Report::failed(Reason::PruneFailed, msg).attempted(revision))
}

/// The report of Plan mode from the dry-run's results and what would be pruned: lists sorted
/// and capped at [`MAX_LISTED`] each.
pub fn plan(results: &[MemberResult], prune: Vec<MemberRef>, revision: &str) -> Report {
    let mut plan = Plan {
        prune,
        ..Plan::default()
    };
    for r in results {
        match r.outcome.class() {
            Class::Create => plan.create.push(r.reference.clone()),
            Class::Change => plan.update.push(r.reference.clone()),
            Class::Skipped(why) => plan.skip.push(PlanSkip {
                member: r.reference.clone(),
                reason: why.to_string(),
            }),
            _ => plan.unchanged += 1,
        }
    }
    for list in [&mut plan.create, &mut plan.update, &mut plan.prune] {
        list.sort();
        if list.len() > MAX_LISTED {
            list.truncate(MAX_LISTED);
            plan.truncated = true;
        }
    }
    plan.skip.sort();
    if plan.skip.len() > MAX_LISTED {
        plan.skip.truncate(MAX_LISTED);
        plan.truncated = true;
    }
    let skipped = match plan.skip.len() {
        0 => String::new(),
        n => format!(", {n} skipped"),
    };
    let msg = format!(
        "plan: {} to create, {} to update, {} to prune, {} unchanged{skipped} (mode: Plan writes nothing)",
        plan.create.len(),
        plan.update.len(),
        plan.prune.len(),
        plan.unchanged
    );
    Report {
        plan: Some(plan),
        failures: failures(results),
        ..Report::failed(Reason::PlanReady, msg).attempted(revision)
    }
}

/// The report of a complete reconcile.
pub fn succeeded(summary: Summary, members: Vec<MemberRef>, revision: &str) -> Report {
    let skipped = match summary.skipped {
        0 => String::new(),
        n => format!(", {n} skipped"),
    };
    let msg = format!(
        "applied {} members ({} created, {} configured, {} unchanged{skipped}), pruned {}",
        summary.members, summary.created, summary.configured, summary.unchanged, summary.pruned
    );
    Report {
        ready: true,
        reason: Reason::ReconciliationSucceeded,
        message: msg,
        summary: Some(summary),
        members: Some(members),
        plan: None,
        failures: Vec::new(),
        attempted: Some(revision.to_string()),
        applied: Some(revision.to_string()),
        retry: false,
        requeue_after: None,
        changes: None,
    }
}

/// The status that `r` leads to from `previous`.
pub fn next_status(
    previous: &ApplySetStatus,
    generation: Option<i64>,
    id: &str,
    r: Report,
) -> ApplySetStatus {
    let mut next = previous.clone();
    next.observed_generation = generation;
    next.applyset_id = Some(id.to_string());
    next.conditions = status::conditions_for(
        &previous.conditions,
        r.ready,
        r.reason,
        &r.message,
        false,
        generation,
    );
    if let Some(s) = r.summary {
        next.summary = Some(s);
    }
    if let Some(m) = r.members {
        next.members_truncated = m.len() > MAX_LISTED;
        next.members = m.into_iter().take(MAX_LISTED).collect();
    }
    next.plan = r.plan;
    next.failures = r.failures;
    if let Some(a) = r.attempted {
        if previous.last_attempted_revision.as_deref() != Some(a.as_str()) {
            let now = k8s_openapi::jiff::Timestamp::now();
            next.last_attempted_revision_time =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now));
        }
        next.last_attempted_revision = Some(a);
    }
    if let Some(a) = r.applied {
        next.last_applied_revision = Some(a);
    }
    let not_a_failure = [Reason::PlanReady, Reason::Suspended, Reason::Progressing];
    next.last_error = if r.ready || not_a_failure.contains(&r.reason) {
        None
    } else {
        Some(status::truncate(&r.message, 1024))
    };
    next
}

/// When to look again after a report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// At the interval (and the failure count is reset when `reset`).
    Interval { reset: bool },
    /// With backoff.
    Backoff,
    /// Only on a change (suspended).
    AwaitChange,
    /// After this long (or on a change before).
    After(std::time::Duration),
}

pub fn next(r: &Report) -> Next {
    if let Some(d) = r.requeue_after {
        Next::After(d)
    } else if r.ready || r.reason == Reason::PlanReady {
        Next::Interval { reset: true }
    } else if r.reason == Reason::Suspended {
        Next::AwaitChange
    } else if r.reason.is_stalled() && !r.retry {
        // Only a change fixes it (which triggers a reconcile); still look at the interval.
        Next::Interval { reset: false }
    } else {
        Next::Backoff
    }
}

/// Members named in the event of what a reconcile changed (the rest are counted).
const CHANGES_NAMED: usize = 15;

/// What `results` changed — members created, configured (drift corrected included),
/// adopted and pruned — for the reconcile's event; `None` when nothing changed.
pub fn changes(results: &[MemberResult]) -> Option<String> {
    let note = crate::engine::outcome::changes(results, CHANGES_NAMED)?;
    tracing::info!("{note}");
    Some(note)
}
/// The status of a reconcile of `generation` in progress; `previous` itself when it already
/// observed that generation. Before the first reconcile (observedGeneration absent or the
/// CRD's default -1) Ready describes no generation, and observedGeneration stays as it was.
pub fn progressing(previous: &ApplySetStatus, generation: Option<i64>, id: &str) -> ApplySetStatus {
    let ready = previous
        .conditions
        .iter()
        .find(|c| c.type_ == status::READY);
    let observed = previous.observed();
    if observed.is_some() && observed == generation && ready.is_some() {
        return previous.clone();
    }
    let (ready, reason, message) = ready
        .map(|c| (c.status == "True", c.reason.clone(), c.message.clone()))
        .unwrap_or((
            false,
            Reason::Progressing.as_str().into(),
            "reconciling".into(),
        ));
    let mut next = previous.clone();
    status::set(
        &mut next.conditions,
        status::READY,
        ready,
        &reason,
        &message,
        observed,
    );
    status::set(
        &mut next.conditions,
        status::RECONCILING,
        true,
        Reason::Progressing.as_str(),
        &format!("reconciling generation {}", generation.unwrap_or_default()),
        generation,
    );
    next.applyset_id = Some(id.to_string());
    next
}

#[cfg(test)]
mod tests;

//! What a reconcile reports: its outcome as a [`Report`] (built by pure functions from the
//! members' results), the status it leads to, when to look again, and the writes of status
//! and events (none when nothing changed).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{
    ResourceExt,
    api::{Patch, PatchParams},
    runtime::controller::Action,
};
use serde_json::json;

use super::{Context, MAX_LISTED, STATUS_FIELD_MANAGER, events::EventType};
use crate::{
    Error, Result,
    api::{ApplySetStatus, MemberRef, Plan, Summary},
    engine::{
        SetScope,
        outcome::{MemberResult, Outcome, Retained},
    },
    parent::Parent,
    status::{self, Reason},
};

/// The outcome of one reconcile, as reported in status.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    pub ready: bool,
    pub reason: Reason,
    pub message: String,
    pub summary: Option<Summary>,
    pub members: Option<Vec<MemberRef>>,
    pub plan: Option<Plan>,
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
    for r in results {
        match &r.outcome {
            Outcome::NamespaceTerminating { namespace } => {
                *terminating.entry(namespace.as_str()).or_default() += 1
            }
            Outcome::Owned { message } => owned.push(message.as_str()),
            Outcome::AdoptionRefused { message } => refused.push(message.as_str()),
            Outcome::Conflict { message, .. } => conflicts.push(message.as_str()),
            Outcome::Forbidden { message } | Outcome::Failed { message } => {
                failed.push(message.as_str())
            }
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
        return Some(namespace_terminating(&terminating).attempted(revision));
    } else {
        return None;
    };
    let msg = format!(
        "{} member(s) not applied, nothing pruned: {}",
        list.len(),
        listing(&list)
    );
    Some(Report::failed(reason, msg).attempted(revision))
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
        match &r.outcome {
            Outcome::DeleteFailed { message } => errors.push(message.clone()),
            Outcome::Changed | Outcome::Retained(Retained::Recreated) => {
                changed.push(r.reference.to_string())
            }
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
        match r.outcome {
            Outcome::Created => plan.create.push(r.reference.clone()),
            Outcome::Configured | Outcome::Adopted => plan.update.push(r.reference.clone()),
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
    let msg = format!(
        "plan: {} to create, {} to update, {} to prune, {} unchanged (mode: Plan writes nothing)",
        plan.create.len(),
        plan.update.len(),
        plan.prune.len(),
        plan.unchanged
    );
    Report {
        plan: Some(plan),
        ..Report::failed(Reason::PlanReady, msg).attempted(revision)
    }
}

/// The report of a complete reconcile.
pub fn succeeded(summary: Summary, members: Vec<MemberRef>, revision: &str) -> Report {
    let msg = format!(
        "applied {} members ({} created, {} configured, {} unchanged), pruned {}",
        summary.members, summary.created, summary.configured, summary.unchanged, summary.pruned
    );
    Report {
        ready: true,
        reason: Reason::ReconciliationSucceeded,
        message: msg,
        summary: Some(summary),
        members: Some(members),
        plan: None,
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
    if let Some(a) = r.attempted {
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

/// The most a parent's spec and status (and its labels and annotations) may take together,
/// in bytes of JSON: well under what the API server and etcd store (1.5 MiB by default), so
/// that a status write never fails because the object grew too large.
pub const MAX_OBJECT_BYTES: usize = 1 << 20;

/// Shortest a message is cut to while other entries remain to cut.
const MIN_MESSAGE: usize = 64;

/// Bytes of `status` as JSON.
fn json_len(status: &ApplySetStatus) -> usize {
    serde_json::to_vec(status)
        .map(|v| v.len())
        .unwrap_or(usize::MAX)
}

/// `status`, cut so that it takes at most `MAX_OBJECT_BYTES - other` bytes (`other`: what the
/// rest of the object takes). First the lists shrink — `members` (then `membersTruncated`
/// is set) and the plan's create, update and prune lists (then `plan.truncated`), all to the
/// longest common length that fits — then the messages (conditions and `lastError`) are cut,
/// to the longest common length that fits. A status that fits is returned unchanged. When even
/// empty lists and messages of [`MIN_MESSAGE`] bytes do not fit (the spec alone is too large),
/// that smallest status is returned.
pub fn fit(status: ApplySetStatus, other: usize) -> ApplySetStatus {
    let room = MAX_OBJECT_BYTES.saturating_sub(other);
    if json_len(&status) <= room {
        return status;
    }
    let fits = |s: &ApplySetStatus| json_len(s) <= room;
    let longest_list = status.members.len().max(
        status
            .plan
            .as_ref()
            .map(|p| p.create.len().max(p.update.len()).max(p.prune.len()))
            .unwrap_or(0),
    );
    // The largest number of list entries that fits (binary search; 0 always is a candidate).
    let keep = largest(longest_list, |n| fits(&with_lists(&status, n)));
    let status = with_lists(&status, keep);
    if fits(&status) {
        return status;
    }
    let longest_message = status
        .conditions
        .iter()
        .map(|c| c.message.len())
        .chain(status.last_error.iter().map(String::len))
        .max()
        .unwrap_or(0);
    let cut = largest(longest_message, |n| {
        fits(&with_messages(&status, n.max(MIN_MESSAGE)))
    });
    with_messages(&status, cut.max(MIN_MESSAGE))
}

/// The largest `n` in `0..=max` for which `ok(n)` holds, assuming `ok` holds for every
/// smaller `n` once it holds for one; 0 when none does.
fn largest(max: usize, ok: impl Fn(usize) -> bool) -> usize {
    let (mut low, mut high) = (0, max);
    while low < high {
        let mid = low + (high - low).div_ceil(2);
        if ok(mid) {
            low = mid;
        } else {
            high = mid - 1;
        }
    }
    low
}

/// `status` with `members` and each plan list cut to at most `n` entries, flagged when cut.
fn with_lists(status: &ApplySetStatus, n: usize) -> ApplySetStatus {
    let mut s = status.clone();
    if s.members.len() > n {
        s.members.truncate(n);
        s.members_truncated = true;
    }
    if let Some(plan) = &mut s.plan {
        for list in [&mut plan.create, &mut plan.update, &mut plan.prune] {
            if list.len() > n {
                list.truncate(n);
                plan.truncated = true;
            }
        }
    }
    s
}

/// `status` with every condition message and `lastError` cut to at most `n` bytes.
fn with_messages(status: &ApplySetStatus, n: usize) -> ApplySetStatus {
    let mut s = status.clone();
    for c in &mut s.conditions {
        if c.message.len() > n {
            c.message = status::truncate(&c.message, n);
        }
    }
    if let Some(e) = &mut s.last_error
        && e.len() > n
    {
        *e = status::truncate(e, n);
    }
    s
}

/// Bytes of what a parent holds besides its status: its spec, labels and annotations. The
/// spec's size is measured once per generation (a spec of thousands of manifests is
/// megabytes of JSON, and most reconciles change nothing).
pub fn other_bytes<P: Parent>(ctx: &Context, obj: &P) -> usize {
    let meta = obj.meta();
    let len = |v: Result<Vec<u8>, serde_json::Error>| v.map(|v| v.len()).unwrap_or(0);
    let spec = ctx
        .spec_sizes
        .get_or_measure(meta.uid.as_deref(), meta.generation, || {
            len(serde_json::to_vec(obj.spec()))
        });
    spec + len(serde_json::to_vec(&meta.labels)) + len(serde_json::to_vec(&meta.annotations))
}

/// Parents whose spec size [`SpecSizes`] remembers at most (beyond, it starts over).
const SPEC_SIZES_KEPT: usize = 10_000;

/// The size of each parent's spec, by UID, with the generation it was measured at.
#[derive(Default)]
pub struct SpecSizes(std::sync::Mutex<std::collections::HashMap<String, (i64, usize)>>);

impl SpecSizes {
    /// The size of a parent's spec (`measure`), measured once per UID and generation (the
    /// spec changes only with the generation); measured every time when either is unknown.
    pub fn get_or_measure(
        &self,
        uid: Option<&str>,
        generation: Option<i64>,
        measure: impl FnOnce() -> usize,
    ) -> usize {
        let (Some(uid), Some(generation)) = (uid, generation) else {
            return measure();
        };
        if let Ok(sizes) = self.0.lock()
            && let Some((g, n)) = sizes.get(uid)
            && *g == generation
        {
            return *n;
        }
        let n = measure();
        if let Ok(mut sizes) = self.0.lock() {
            if sizes.len() >= SPEC_SIZES_KEPT {
                sizes.clear();
            }
            sizes.insert(uid.to_string(), (generation, n));
        }
        n
    }

    /// Forgets the size of the parent of `uid` (deleted).
    pub fn forget(&self, uid: &str) {
        if let Ok(mut sizes) = self.0.lock() {
            sizes.remove(uid);
        }
    }

    /// Parents whose size is remembered.
    pub fn len(&self) -> usize {
        self.0.lock().map_or(0, |s| s.len())
    }
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

/// Counts the members' outcomes of a report in the metrics.
fn count(ctx: &Context, s: &Summary) {
    let m = &ctx.metrics;
    let n = |v: i64| u64::try_from(v).unwrap_or_default();
    m.applied("created", n(s.created));
    m.applied("configured", n(s.configured));
    m.applied("unchanged", n(s.unchanged));
    m.applied("conflict", n(s.conflicts));
    m.applied("failed", n(s.failed));
    m.conflicts(n(s.conflicts));
    m.pruned(n(s.pruned));
}

/// Writes the status a report leads to (only when it changed), publishes an event when the
/// outcome changed, counts the members' outcomes, and returns when to look again.
pub async fn write<P: Parent>(
    ctx: &Context,
    scope: &SetScope,
    obj: &P,
    mut r: Report,
) -> Result<Action> {
    let min = ctx.config.min_interval;
    if let Some(raised) = obj.spec().interval_raised(min) {
        r.message = format!("{} ({raised})", r.message);
    }
    let when = next(&r);
    let changes = r.changes.take();
    if r.reason != Reason::Progressing {
        // Whatever stopped or ended this reconcile, it no longer waits for health.
        ctx.health.end_wait(&scope.id);
    }
    if r.reason != Reason::PlanReady
        && let Some(s) = &r.summary
    {
        count(ctx, s);
    }
    let previous = obj.status().cloned().unwrap_or_default();
    let mut next = next_status(&previous, obj.meta().generation, &scope.id, r);
    if let Some(at) = reconcile_requested_at(obj) {
        next.last_handled_reconcile_at = Some(at);
    }
    let next = fit(next, other_bytes(ctx, obj));
    let info = info(scope, obj, &next);
    write_status(ctx, obj, &previous, &next).await?;
    announce(ctx, obj, &previous, &next, changes).await;
    let key = scope.parent.to_string();
    ctx.metrics.set_info(&key, Some(&info));
    let spec = obj.spec();
    Ok(match when {
        Next::Interval { reset } => {
            if reset {
                ctx.succeeded(&key);
            }
            Action::requeue(spec.interval_at_least(min))
        }
        Next::AwaitChange => {
            ctx.succeeded(&key);
            Action::await_change()
        }
        Next::Backoff => {
            ctx.metrics.retried(scope.parent.kind.kind());
            let cap = spec.interval_at_least(min);
            Action::requeue(ctx.backoff(&key, spec.retry_interval(), cap))
        }
        Next::After(d) => Action::requeue(d.min(spec.interval_at_least(min))),
    })
}

/// The parent's `applyset.dev/reconcile-requested-at` annotation: the request this reconcile
/// handled (echoed in `status.lastHandledReconcileAt`).
fn reconcile_requested_at<P: Parent>(obj: &P) -> Option<String> {
    obj.meta()
        .annotations
        .as_ref()
        .and_then(|a| a.get(crate::applyset::ANNOTATION_RECONCILE_REQUESTED_AT))
        .cloned()
}

/// What `applyset_info` says of a parent with status `status`.
fn info<P: Parent>(scope: &SetScope, obj: &P, status: &ApplySetStatus) -> crate::metrics::Info {
    let ready = status.conditions.iter().find(|c| c.type_ == status::READY);
    crate::metrics::Info {
        name: scope.parent.name.clone(),
        namespace: scope.parent.namespace.clone().unwrap_or_default(),
        kind: scope.parent.kind.kind().to_string(),
        ready: ready.map_or_else(|| "Unknown".to_string(), |c| c.status.clone()),
        reason: ready.map(|c| c.reason.clone()).unwrap_or_default(),
        suspended: obj.spec().suspend,
        revision: status.last_applied_revision.clone().unwrap_or_default(),
    }
}

/// Applies `next` to the status subresource unless it equals `previous`.
async fn write_status<P: Parent>(
    ctx: &Context,
    obj: &P,
    previous: &ApplySetStatus,
    next: &ApplySetStatus,
) -> Result<()> {
    if previous == next {
        return Ok(());
    }
    patch_status(ctx, obj, next).await
}

/// At most one event per reconcile: when the Ready condition's status or reason changed,
/// one with its reason and message, followed by what the reconcile changed; otherwise, when
/// it changed members, `MembersChanged` listing them; otherwise none.
async fn announce<P: Parent>(
    ctx: &Context,
    obj: &P,
    previous: &ApplySetStatus,
    next: &ApplySetStatus,
    changes: Option<String>,
) {
    if let Some(c) = changed_outcome(previous, next) {
        return publish(ctx, obj, c, changes.as_deref()).await;
    }
    if let Some(note) = changes {
        members_changed(ctx, obj, &note).await;
    }
}

/// The Ready condition of `next` when its status or reason differs from `previous`'s (or
/// `previous` has none), else `None`.
fn changed_outcome<'a>(
    previous: &ApplySetStatus,
    next: &'a ApplySetStatus,
) -> Option<&'a Condition> {
    let ready = |s: &'a ApplySetStatus| s.conditions.iter().find(|c| c.type_ == status::READY);
    let new = ready(next)?;
    let old = previous
        .conditions
        .iter()
        .find(|c| c.type_ == status::READY);
    match old {
        Some(o) if o.status == new.status && o.reason == new.reason => None,
        _ => Some(new),
    }
}

/// Server-side applies `status` to the parent's status subresource, without the `Healthy`
/// condition and `status.health`: those belong to the health reporter's field manager.
pub async fn patch_status<P: Parent>(
    ctx: &Context,
    obj: &P,
    status: &ApplySetStatus,
) -> Result<()> {
    let name = obj.meta().name.clone().ok_or(Error::Unnamed("parent"))?;
    let mut ours = status.clone();
    ours.health = None;
    ours.conditions.retain(|c| c.type_ != status::HEALTHY);
    let body = json!({"apiVersion": P::api_version(&()), "kind": P::kind(&()), "status": ours});
    P::api(ctx.client.clone(), obj.namespace().as_deref())
        .patch_status(
            &name,
            // Serialized from our own types, with no unknown or duplicate field to report:
            // Ignore spares the server a second, strict parse of the body.
            &PatchParams::apply(STATUS_FIELD_MANAGER)
                .force()
                .validation_ignore(),
            &Patch::Apply(body),
        )
        .await?;
    Ok(())
}

/// Publishes one event about the parent (its note capped at 1000 bytes); a failure to
/// publish is only logged. None goes into a namespace known to be terminating (creating it
/// would be refused).
async fn event<P: Parent>(
    ctx: &Context,
    obj: &P,
    type_: EventType,
    reason: &str,
    action: &str,
    note: &str,
) {
    if let Some(ns) = obj.meta().namespace.as_deref()
        && ctx.members.terminating().contains(ns)
    {
        return;
    }
    let note = status::truncate(note, 1000);
    let regarding = obj.object_ref(&());
    if let Err(e) = ctx
        .events
        .publish(&regarding, type_, reason, action, &note)
        .await
    {
        tracing::debug!(error = %e, "publishing an event failed");
    }
}

/// An event for a new Ready condition (Normal when ready or planned, else Warning): its
/// message, then `; changed: ` and what the reconcile changed, if anything.
async fn publish<P: Parent>(ctx: &Context, obj: &P, c: &Condition, changes: Option<&str>) {
    let type_ = match c.status == "True" || c.reason == Reason::PlanReady.as_str() {
        true => EventType::Normal,
        false => EventType::Warning,
    };
    let note = match changes {
        Some(changes) => format!("{}; changed: {changes}", c.message),
        None => c.message.clone(),
    };
    event(ctx, obj, type_, &c.reason, "Reconcile", &note).await;
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

/// A `MembersChanged` event with `note`, what a reconcile changed.
async fn members_changed<P: Parent>(ctx: &Context, obj: &P, note: &str) {
    event(ctx, obj, EventType::Normal, "MembersChanged", "Apply", note).await;
}

/// A `MembersChanged` event now, for a reconcile that changed members and then failed
/// without a report (its error is reported as ApplyFailed, with no list of changes).
pub async fn announce_changes<P: Parent>(ctx: &Context, obj: &P, changes: Option<String>) {
    if let Some(note) = changes {
        members_changed(ctx, obj, &note).await;
    }
}

/// A Warning event: the parent was deleted without its members being deleted, and why.
pub async fn orphaned<P: Parent>(ctx: &Context, obj: &P, why: &str) {
    let note = format!("{why}its members were left in place");
    event(
        ctx,
        obj,
        EventType::Warning,
        "MembersOrphaned",
        "Delete",
        &note,
    )
    .await;
}

/// Marks a new generation as in progress (visible while a long apply runs): Reconciling=True,
/// Ready as it was (observed for the previous generation).
pub async fn mark_progressing<P: Parent>(ctx: &Context, scope: &SetScope, obj: &P) -> Result<()> {
    let previous = obj.status().cloned().unwrap_or_default();
    let next = fit(
        progressing(&previous, obj.meta().generation, &scope.id),
        other_bytes(ctx, obj),
    );
    if next == previous {
        return Ok(());
    }
    patch_status(ctx, obj, &next).await
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

/// Why a reconcile stops before its end: a report to write, or an error of the operator's
/// own I/O (reported as ApplyFailed and retried).
pub(super) enum Stop {
    Report(Box<Report>),
    Error(Error),
}

impl From<Error> for Stop {
    fn from(e: Error) -> Self {
        Stop::Error(e)
    }
}

impl From<kube::Error> for Stop {
    fn from(e: kube::Error) -> Self {
        Stop::Error(e.into())
    }
}

impl From<Report> for Stop {
    fn from(r: Report) -> Self {
        Stop::Report(Box::new(r))
    }
}

pub(super) type Step<T> = std::result::Result<T, Stop>;

#[cfg(test)]
mod tests {
    use super::*;

    fn member(name: &str) -> MemberRef {
        MemberRef {
            group: String::new(),
            kind: "ConfigMap".into(),
            namespace: Some("team".into()),
            name: name.into(),
        }
    }

    fn r(name: &str, outcome: Outcome) -> MemberResult {
        MemberResult::new(member(name), outcome)
    }

    fn failed(m: &str) -> Outcome {
        Outcome::Failed { message: m.into() }
    }

    #[test]
    fn no_failure_report_when_every_member_applied() {
        let results = [
            r("a", Outcome::Created),
            r("b", Outcome::Unchanged),
            r("c", Outcome::Configured),
        ];
        assert_eq!(apply_failure(&results, "rev"), None);
    }

    #[test]
    fn ownership_comes_before_conflicts_before_failures() {
        let conflict = Outcome::Conflict {
            managers: vec!["kubectl".into()],
            message: "c: conflict".into(),
        };
        let owned = Outcome::Owned {
            message: "o: owned".into(),
        };
        let all = [
            r("f", failed("f: broken")),
            r("c", conflict.clone()),
            r("o", owned),
        ];
        let report = apply_failure(&all, "rev").expect("a failure");
        assert_eq!(report.reason, Reason::OwnershipConflict);
        assert_eq!(
            report.message,
            "1 member(s) not applied, nothing pruned: o: owned"
        );
        assert_eq!(report.attempted.as_deref(), Some("rev"));
        assert!(!report.ready);
        let report = apply_failure(&all[..2], "rev").expect("a failure");
        assert_eq!(report.reason, Reason::Conflict);
        assert_eq!(
            report.message,
            "1 member(s) not applied, nothing pruned: c: conflict"
        );
        let report = apply_failure(&all[..1], "rev").expect("a failure");
        assert_eq!(report.reason, Reason::ApplyFailed);
    }

    #[test]
    fn a_long_failure_list_names_five_and_counts_the_rest() {
        let results: Vec<MemberResult> = (0..7)
            .map(|i| r(&format!("m{i}"), failed(&format!("m{i}: x"))))
            .collect();
        let report = apply_failure(&results, "rev").expect("a failure");
        assert_eq!(
            report.message,
            "7 member(s) not applied, nothing pruned: m0: x; m1: x; m2: x; m3: x; m4: x; and 2 more"
        );
    }

    #[test]
    fn prune_failure_names_failed_deletes_and_changed_objects() {
        let ok = [
            r("a", Outcome::Pruned),
            r("b", Outcome::Gone),
            r("c", Outcome::Retained(Retained::PruneDisabled)),
        ];
        assert_eq!(prune_failure("ApplySet team/web", &ok, "rev"), None);
        let bad = [
            r("a", Outcome::Pruned),
            r(
                "d",
                Outcome::DeleteFailed {
                    message: "d: forbidden".into(),
                },
            ),
            r("e", Outcome::Changed),
            r("f", Outcome::Retained(Retained::Recreated)),
        ];
        let report = prune_failure("ApplySet team/web", &bad, "rev").expect("a failure");
        assert_eq!(report.reason, Reason::PruneFailed);
        assert_eq!(
            report.message,
            "ApplySet team/web: prune incomplete, the parent keeps recording every kind: 1 delete(s) failed: d: forbidden; changed while being pruned (looked at again next time): ConfigMap team/e, ConfigMap team/f"
        );
        assert_eq!(report.attempted.as_deref(), Some("rev"));
    }

    #[test]
    fn a_plan_lists_creates_updates_and_prunes_sorted() {
        let results = [
            r("z", Outcome::Created),
            r("a", Outcome::Created),
            r("u", Outcome::Configured),
            r("s", Outcome::Unchanged),
            r("t", Outcome::Unchanged),
        ];
        let report = plan(&results, vec![member("p2"), member("p1")], "rev");
        assert_eq!(report.reason, Reason::PlanReady);
        assert!(!report.ready);
        let p = report.plan.expect("a plan");
        assert_eq!(p.create, [member("a"), member("z")]);
        assert_eq!(p.update, [member("u")]);
        assert_eq!(p.prune, [member("p1"), member("p2")]);
        assert_eq!(p.unchanged, 2);
        assert!(!p.truncated);
        assert_eq!(
            report.message,
            "plan: 2 to create, 1 to update, 2 to prune, 2 unchanged (mode: Plan writes nothing)"
        );
        assert_eq!(
            next(&Report {
                plan: None,
                ..report
            }),
            Next::Interval { reset: true }
        );
    }

    #[test]
    fn a_plan_caps_each_list() {
        let results: Vec<MemberResult> = (0..MAX_LISTED + 3)
            .map(|i| r(&format!("m{i:04}"), Outcome::Created))
            .collect();
        let p = plan(&results, Vec::new(), "rev").plan.expect("a plan");
        assert_eq!(p.create.len(), MAX_LISTED);
        assert!(p.truncated);
    }

    #[test]
    fn success_counts_and_records_the_revision() {
        let summary = Summary {
            members: 3,
            created: 1,
            configured: 1,
            unchanged: 1,
            pruned: 2,
            ..Summary::default()
        };
        let report = succeeded(summary, vec![member("a")], "rev");
        assert!(report.ready);
        assert_eq!(
            report.message,
            "applied 3 members (1 created, 1 configured, 1 unchanged), pruned 2"
        );
        assert_eq!(report.applied.as_deref(), Some("rev"));
        let s = next_status(&ApplySetStatus::default(), Some(4), "id", report);
        assert_eq!(s.observed_generation, Some(4));
        assert_eq!(s.last_applied_revision.as_deref(), Some("rev"));
        assert_eq!(s.last_error, None);
        assert_eq!(s.members, [member("a")]);
        assert_eq!(s.applyset_id.as_deref(), Some("id"));
    }

    #[test]
    fn a_failure_keeps_the_last_applied_revision_and_members() {
        let ok = succeeded(Summary::default(), vec![member("a")], "rev1");
        let before = next_status(&ApplySetStatus::default(), Some(1), "id", ok);
        let bad = Report::failed(Reason::ApplyFailed, "broken".into()).attempted("rev2");
        let after = next_status(&before, Some(2), "id", bad);
        assert_eq!(after.last_applied_revision.as_deref(), Some("rev1"));
        assert_eq!(after.last_attempted_revision.as_deref(), Some("rev2"));
        assert_eq!(after.members, [member("a")]);
        assert_eq!(after.last_error.as_deref(), Some("broken"));
    }

    #[test]
    fn members_beyond_the_cap_are_truncated() {
        let members: Vec<MemberRef> = (0..MAX_LISTED + 1)
            .map(|i| member(&format!("{i}")))
            .collect();
        let s = next_status(
            &ApplySetStatus::default(),
            Some(1),
            "id",
            succeeded(Summary::default(), members, "rev"),
        );
        assert_eq!(s.members.len(), MAX_LISTED);
        assert!(s.members_truncated);
    }

    fn big_status(members: usize, plan: usize, message: usize) -> ApplySetStatus {
        let refs = |prefix: &str, n: usize| -> Vec<MemberRef> {
            (0..n).map(|i| member(&format!("{prefix}{i:05}"))).collect()
        };
        let r = Report {
            plan: (plan > 0).then(|| Plan {
                create: refs("c", plan),
                update: refs("u", plan),
                prune: refs("p", plan),
                ..Plan::default()
            }),
            members: Some(refs("m", members)),
            ..Report::failed(Reason::ApplyFailed, "é".repeat(message / 2))
        };
        let mut s = next_status(&ApplySetStatus::default(), Some(1), "id", r);
        s.last_error = Some("x".repeat(message.min(1024)));
        s
    }

    #[test]
    fn a_status_that_fits_is_left_alone() {
        let s = big_status(MAX_LISTED, MAX_LISTED, 30_000);
        assert!(json_len(&s) < MAX_OBJECT_BYTES / 2);
        assert_eq!(fit(s.clone(), 0), s);
        assert_eq!(fit(s.clone(), MAX_OBJECT_BYTES - json_len(&s)), s);
    }

    #[test]
    fn the_lists_shrink_first_to_the_longest_length_that_fits() {
        let s = big_status(MAX_LISTED, MAX_LISTED, 1000);
        let room = json_len(&s) / 2;
        let fitted = fit(s.clone(), MAX_OBJECT_BYTES - room);
        assert!(json_len(&fitted) <= room);
        assert!(fitted.members_truncated);
        let plan = fitted.plan.as_ref().expect("plan kept");
        assert!(plan.truncated);
        let n = fitted.members.len();
        assert!(n > 0 && n < MAX_LISTED, "{n}");
        assert_eq!(
            (plan.create.len(), plan.update.len(), plan.prune.len()),
            (n, n, n)
        );
        // The first entries are kept, messages untouched, and one entry more would not fit.
        assert_eq!(fitted.members[..], s.members[..n]);
        assert_eq!(fitted.conditions, s.conditions);
        assert!(json_len(&with_lists(&s, n + 1)) > room);
        // Fitting again changes nothing (so an unchanged outcome writes nothing).
        assert_eq!(fit(fitted.clone(), MAX_OBJECT_BYTES - room), fitted);
    }

    #[test]
    fn messages_are_cut_only_when_empty_lists_do_not_fit() {
        let s = big_status(100, 100, 30_000);
        let empty_lists = with_lists(&s, 0);
        let room = json_len(&empty_lists) - 10_000;
        let fitted = fit(s.clone(), MAX_OBJECT_BYTES - room);
        assert!(json_len(&fitted) <= room, "{}", json_len(&fitted));
        assert!(fitted.members.is_empty() && fitted.members_truncated);
        let ready = &fitted.conditions[0];
        assert!(ready.message.len() < 30_000 && ready.message.len() > MIN_MESSAGE);
        assert!(ready.message.ends_with('…'), "cut messages say so");
        assert!(
            s.conditions[0]
                .message
                .starts_with(ready.message.trim_end_matches('…'))
        );
        assert_eq!(ready.reason, "ApplyFailed", "the reason is never cut");
        assert_eq!(fit(fitted.clone(), MAX_OBJECT_BYTES - room), fitted);
    }

    #[test]
    fn a_spec_too_large_for_any_status_leaves_the_smallest_status() {
        let s = big_status(MAX_LISTED, MAX_LISTED, 30_000);
        let fitted = fit(s, MAX_OBJECT_BYTES + 1);
        assert!(fitted.members.is_empty() && fitted.members_truncated);
        let plan = fitted.plan.expect("plan");
        assert!(plan.create.is_empty() && plan.truncated);
        for c in &fitted.conditions {
            assert!(
                c.message.len() <= MIN_MESSAGE + '…'.len_utf8(),
                "{}",
                c.message
            );
        }
        assert_eq!(fitted.last_error.map(|e| e.len()), Some(MIN_MESSAGE + 3));
    }

    #[test]
    fn largest_finds_the_boundary() {
        for limit in 0..20 {
            assert_eq!(largest(19, |n| n <= limit), limit);
        }
        assert_eq!(largest(0, |_| false), 0);
        assert_eq!(largest(1000, |n| n <= 5000), 1000);
    }

    #[test]
    fn a_spec_is_measured_once_per_generation() {
        let sizes = SpecSizes::default();
        let measured = std::cell::Cell::new(0);
        let measure = |n: usize| {
            measured.set(measured.get() + 1);
            n
        };
        assert_eq!(sizes.get_or_measure(Some("u"), Some(1), || measure(10)), 10);
        assert_eq!(sizes.get_or_measure(Some("u"), Some(1), || measure(99)), 10);
        assert_eq!(
            measured.get(),
            1,
            "the same generation is not measured again"
        );
        assert_eq!(sizes.get_or_measure(Some("u"), Some(2), || measure(20)), 20);
        assert_eq!(sizes.get_or_measure(Some("v"), Some(2), || measure(30)), 30);
        assert_eq!(sizes.get_or_measure(None, Some(2), || measure(40)), 40);
        assert_eq!(sizes.get_or_measure(None, Some(2), || measure(41)), 41);
        assert_eq!(measured.get(), 5, "without a UID, every time");
    }

    #[test]
    fn when_to_look_again() {
        let failed = |reason| Report::failed(reason, String::new());
        assert_eq!(next(&failed(Reason::Suspended)), Next::AwaitChange);
        assert_eq!(next(&failed(Reason::ApplyFailed)), Next::Backoff);
        assert_eq!(next(&failed(Reason::SourceFailed)), Next::Backoff);
        assert_eq!(
            next(&failed(Reason::ValidationFailed)),
            Next::Interval { reset: false }
        );
        let retried = Report {
            retry: true,
            ..failed(Reason::ValidationFailed)
        };
        assert_eq!(next(&retried), Next::Backoff);
    }

    #[test]
    fn progressing_marks_a_new_generation_only() {
        let done = next_status(
            &ApplySetStatus::default(),
            Some(1),
            "id",
            succeeded(Summary::default(), Vec::new(), "rev"),
        );
        assert_eq!(progressing(&done, Some(1), "id"), done);
        let marked = progressing(&done, Some(2), "id");
        let types: Vec<&str> = marked.conditions.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(types, [status::READY, status::RECONCILING]);
        // Ready stays as observed for generation 1.
        assert_eq!(marked.conditions[0].status, "True");
        assert_eq!(marked.conditions[0].observed_generation, Some(1));
        assert_eq!(marked.conditions[1].message, "reconciling generation 2");
        let fresh = progressing(&ApplySetStatus::default(), Some(1), "id");
        assert_eq!(fresh.conditions[0].status, "False");
        assert_eq!(fresh.conditions[0].reason, "Progressing");
        assert_eq!(fresh.conditions[0].observed_generation, None);
    }

    #[test]
    fn the_crd_default_of_observed_generation_is_not_observed() {
        // A new set as the API server returns it: status defaulted to {observedGeneration: -1}.
        let new = ApplySetStatus {
            observed_generation: Some(crate::api::NOT_OBSERVED),
            ..ApplySetStatus::default()
        };
        let marked = progressing(&new, Some(1), "id");
        assert_eq!(
            marked.observed_generation,
            Some(crate::api::NOT_OBSERVED),
            "still not observed while the first reconcile runs"
        );
        // Ready describes no generation yet; Reconciling the one being reconciled. -1 is
        // never a condition's generation.
        assert_eq!(marked.conditions[0].type_, status::READY);
        assert_eq!(marked.conditions[0].reason, "Progressing");
        assert_eq!(marked.conditions[0].observed_generation, None);
        assert_eq!(marked.conditions[1].type_, status::RECONCILING);
        assert_eq!(marked.conditions[1].observed_generation, Some(1));
        // The outcome replaces it with the generation reconciled, and is then stable.
        let done = next_status(
            &marked,
            Some(1),
            "id",
            succeeded(Summary::default(), Vec::new(), "rev"),
        );
        assert_eq!(done.observed_generation, Some(1));
        assert!(
            done.conditions
                .iter()
                .all(|c| c.observed_generation == Some(1))
        );
        assert_eq!(progressing(&done, Some(1), "id"), done);
        let again = next_status(
            &done,
            Some(1),
            "id",
            succeeded(Summary::default(), Vec::new(), "rev"),
        );
        assert_eq!(again, done, "a no-op reconcile writes nothing");
    }
}

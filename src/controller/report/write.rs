//! The writes of a report: the status it leads to (only when it changed, fitted into the
//! size bound), at most one event per reconcile, the metrics of the members' outcomes, and
//! when to look again; plus the other events and status marks of a reconcile.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{
    ResourceExt,
    api::{Patch, PatchParams},
    runtime::controller::Action,
};
use serde_json::json;

use super::{
    super::{Context, STATUS_FIELD_MANAGER, events::EventType},
    Next, Report, fit, next, next_status, other_bytes, progressing,
};
use crate::{
    Error, Result,
    api::{ApplySetStatus, Summary},
    engine::SetScope,
    parent::Parent,
    status::{self, Reason},
};

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
pub(super) fn changed_outcome<'a>(
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

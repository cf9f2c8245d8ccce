//! Deletion of a parent: with `deletionPolicy: Delete` every member is pruned (same safety
//! rules, reverse order) before the finalizer goes; `WaitForTermination` does too and then
//! waits (at most `spec.timeout`) until the members it deleted are gone, saying so in status;
//! `MirrorPrune` is `Delete` when `spec.prune` is true and `Orphan` otherwise; with `Orphan`
//! the members stay.

use std::{
    collections::HashMap,
    sync::Arc,
    time::{Duration, Instant},
};

use kube::{
    ResourceExt,
    api::{ApiResource, DynamicObject, Patch, PatchParams},
    runtime::controller::Action,
};

use super::{
    Context,
    report::{self, Report},
};
use crate::{
    Error, PruneError, Result,
    api::MemberRef,
    applyset::FINALIZER,
    dependencies::Waiting,
    engine::{
        Extent, SetScope, live,
        outcome::{Outcome, Retained, tally},
        prune::{self, Keep},
    },
    parent::{self, Parent, Recorded},
    status::Reason,
};

/// The finalizer's cleanup; it is removed when this returns Ok. A failure keeps the
/// finalizer and is reported in status (setting `deletionPolicy: Orphan` lets the deletion
/// finish).
pub async fn cleanup<P: Parent>(obj: Arc<P>, ctx: &Context, scope: &SetScope) -> Result<Action> {
    match delete_members(&*obj, ctx, scope).await {
        Ok(action) => Ok(action),
        // Under --shards auto, another replica claimed the set: it deletes and reports.
        Err(Error::Fenced { .. }) => Ok(Action::requeue(super::shards::FENCED_RETRY)),
        Err(e) => {
            let msg = format!(
                "{}: deleting its members failed: {e}. The object stays until this succeeds; set spec.deletionPolicy: Orphan to delete it without its members",
                scope.parent
            );
            tracing::warn!(error = %e, "cleanup failed");
            report::write(ctx, scope, &*obj, Report::failed(Reason::PruneFailed, msg)).await?;
            Err(e)
        }
    }
}

/// The deletion order of dependsOn: `Some` (when to look again) while a set that depends on
/// this one is being deleted too and has not deleted its members yet (see
/// [`crate::dependencies::blocking_dependent`]); the wait is reported in status. The
/// dependent's disappearance triggers a reconcile of this set (see
/// [`crate::dependencies::Dependencies::on_event`]); the requeue is a safety net.
pub async fn wait_for_dependents<P: Parent>(
    obj: &P,
    ctx: &Context,
    scope: &SetScope,
) -> Result<Option<Action>> {
    let spec = obj.spec();
    let now = k8s_openapi::jiff::Timestamp::now();
    match ctx.dependencies.waiting_for(&scope.parent, spec, now) {
        Waiting::No => Ok(None),
        Waiting::Caches => Ok(Some(Action::requeue(Duration::from_secs(1)))),
        Waiting::For {
            dependent,
            remaining,
        } => {
            let msg = format!(
                "{}: being deleted; waiting for {dependent}, which depends on it and is being deleted too, to delete its members first (at most spec.timeout, {}, from the start of its deletion)",
                scope.parent, spec.timeout
            );
            tracing::info!(dependent = %dependent, "waiting for a dependent to delete its members");
            let again = remaining
                .min(spec.retry_interval())
                .max(Duration::from_secs(1));
            let r = Report {
                requeue_after: Some(again),
                ..Report::failed(Reason::Progressing, msg)
            };
            report::write(ctx, scope, obj, r).await?;
            Ok(Some(Action::requeue(again)))
        }
    }
}

/// Forgets the parent, then (when its deletionPolicy deletes members) prunes every member it
/// recorded, and with `WaitForTermination` waits for them to be gone.
async fn delete_members<P: Parent>(obj: &P, ctx: &Context, scope: &SetScope) -> Result<Action> {
    ctx.members.forget(&scope.id);
    ctx.health.forget(&scope.id);
    ctx.sources.index.remove(&scope.parent);
    ctx.dependencies.forget(&scope.parent);
    ctx.metrics.set_members(&scope.parent.to_string(), 0);
    let (policy, prune) = (obj.spec().deletion_policy, obj.spec().prune);
    if !policy.deletes_members(prune) {
        tracing::info!(
            ?policy,
            prune,
            "deleted with a deletionPolicy that deletes nothing; members left in place"
        );
        return Ok(Action::await_change());
    }
    // Acting as a ServiceAccount that is gone (typically deleted with its namespace, which
    // takes the members there too), nothing can be deleted as it: the members stay, and the
    // finalizer goes rather than block the deletion for ever.
    let missing = super::reconcile::missing_service_account(ctx, scope).await;
    if !missing.is_empty() {
        tracing::warn!(
            "{missing}its members are left in place (deleted without its ServiceAccount)"
        );
        report::orphaned(ctx, obj, &missing).await;
        return Ok(Action::await_change());
    }
    let extent = deletion_extent(obj, ctx, scope).await?;
    if left_to_namespace_deletion(ctx, scope, &extent).await? {
        tracing::info!(
            "its namespace is being deleted, and every member with it: nothing to delete"
        );
        return Ok(Action::await_change());
    }
    let deleted = prune_recorded(ctx, scope, &extent).await?;
    if policy.waits_for_termination() {
        wait_for_termination(obj, ctx, scope, deleted).await?;
    }
    Ok(Action::await_change())
}

/// Deletes every member the set recorded within `extent`, by prune's rules (§6.1); returns
/// the members it deleted (for `WaitForTermination`). A delete that failed, or a member that
/// changed meanwhile, is an error: the finalizer stays and the cleanup is tried again.
async fn prune_recorded(ctx: &Context, scope: &SetScope, extent: &Extent) -> Result<Vec<Deleted>> {
    let (known, nothing) = (HashMap::new(), HashMap::new());
    let listed = live::list(
        scope,
        &ctx.resolver,
        &known,
        &extent.prune_kinds,
        &extent.prune_namespaces,
    )
    .await?;
    let keep = Keep::new(&known, &nothing, &[]);
    let selection = prune::select(&listed, &keep, extent, &scope.manager);
    let mut deleting: HashMap<MemberRef, Deleted> = selection
        .delete
        .iter()
        .map(|m| (m.reference.clone(), Deleted::of(m)))
        .collect();
    if !selection.delete.is_empty() {
        super::shards::check(ctx, scope).await?;
    }
    let results = prune::prune(scope, selection).await;
    let summary = tally(&results);
    ctx.metrics
        .pruned(u64::try_from(summary.pruned).unwrap_or_default());
    let problems: Vec<String> = results
        .iter()
        .filter_map(|r| match &r.outcome {
            Outcome::DeleteFailed { message } => Some(message.clone()),
            Outcome::Changed | Outcome::Retained(Retained::Recreated) => Some(format!(
                "{} changed or was re-created while being deleted",
                r.reference
            )),
            _ => None,
        })
        .collect();
    if !problems.is_empty() {
        return Err(Error::Prune(PruneError::Incomplete(problems)));
    }
    tracing::info!(
        pruned = summary.pruned,
        retained = summary.retained,
        "deleted with its members"
    );
    Ok(results
        .iter()
        .filter(|r| matches!(r.outcome, Outcome::Pruned))
        .filter_map(|r| deleting.remove(&r.reference))
        .collect())
}

/// A member the deletion deleted: where to look for it, and its UID (an object re-created
/// under the same name is not waited for).
struct Deleted {
    resource: ApiResource,
    reference: MemberRef,
    uid: Option<String>,
}

impl Deleted {
    fn of(m: &live::LiveMember) -> Self {
        Deleted {
            resource: m.resource.clone(),
            reference: m.reference.clone(),
            uid: m.meta.uid.clone(),
        }
    }
}

/// How often the members being terminated are looked at (as Flux's `WaitForSetTermination`).
const TERMINATION_POLL: Duration = Duration::from_secs(2);

/// `WaitForTermination`: waits until every member in `pending` is gone, at most `spec.timeout`
/// (one metadata GET per member still there every 2 s). Meanwhile Ready says so (reason
/// Progressing, with its event); at the timeout the finalizer is released anyway, as Flux
/// does, saying so (reason PruneFailed, a Warning event).
async fn wait_for_termination<P: Parent>(
    obj: &P,
    ctx: &Context,
    scope: &SetScope,
    mut pending: Vec<Deleted>,
) -> Result<()> {
    let timeout = obj.spec().timeout();
    let deadline = Instant::now() + timeout;
    let mut reported = false;
    loop {
        pending = still_there(scope, pending).await;
        if pending.is_empty() {
            tracing::info!("the deleted members are gone");
            return Ok(());
        }
        let names = pending
            .iter()
            .take(5)
            .map(|d| d.reference.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        if Instant::now() >= deadline {
            let msg = format!(
                "{}: being deleted (deletionPolicy WaitForTermination); {} deleted member(s) still there after spec.timeout ({}): {names}; the ApplySet is deleted anyway",
                scope.parent,
                pending.len(),
                obj.spec().timeout
            );
            tracing::warn!("{msg}");
            report::write(ctx, scope, obj, Report::failed(Reason::PruneFailed, msg)).await?;
            return Ok(());
        }
        if !reported {
            let msg = format!(
                "{}: being deleted (deletionPolicy WaitForTermination); waiting for {} deleted member(s) to be gone (at most spec.timeout, {}): {names}",
                scope.parent,
                pending.len(),
                obj.spec().timeout
            );
            report::write(ctx, scope, obj, Report::failed(Reason::Progressing, msg)).await?;
            reported = true;
        }
        tokio::time::sleep(
            TERMINATION_POLL.min(deadline.saturating_duration_since(Instant::now())),
        )
        .await;
    }
}

/// The members of `pending` that still exist (with their UID); one that cannot be looked at
/// counts as still there, but one the set's identity may not get is not waited for (the
/// prune needs only list and delete): waiting could only end at the timeout.
async fn still_there(scope: &SetScope, pending: Vec<Deleted>) -> Vec<Deleted> {
    let mut left = Vec::with_capacity(pending.len());
    for d in pending {
        let api: kube::Api<DynamicObject> =
            crate::discovery::api_in(&scope.client, d.reference.namespace.as_deref(), &d.resource);
        match api.get_metadata_opt(&d.reference.name).await {
            Ok(Some(o)) if d.uid.is_none() || o.metadata.uid == d.uid => left.push(d),
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.is_forbidden() => {
                tracing::warn!(member = %d.reference, "not waited for (deletionPolicy WaitForTermination): the set's identity may not get it; grant it get on that kind to wait for it");
            }
            Err(e) => {
                tracing::debug!(member = %d.reference, error = %e, "looking for a deleted member");
                left.push(d);
            }
        }
    }
    left
}

/// What the set's deletion may delete: every member it recorded (the annotations, completed
/// with what status says was applied last, in case the annotations were replaced or edited),
/// since nothing is declared any more.
async fn deletion_extent<P: Parent>(obj: &P, ctx: &Context, scope: &SetScope) -> Result<Extent> {
    let recorded = parent::recorded(obj.meta(), &ctx.resolver)
        .await?
        .map_err(|e| Error::Prune(PruneError::MalformedRecord(e.to_string())))?
        .union(&parent::last_applied(obj.status()));
    Ok(Extent::new(
        scope.parent.namespace.as_deref(),
        &recorded,
        Recorded::default(),
    ))
}

/// Removes our finalizer from a set not yet deleted whose namespace is known to be
/// terminating (nothing is looked up otherwise), when its deletion would have nothing to do: every member it recorded lives in that
/// namespace (the namespace controller deletes them), or its policy deletes nothing (`Orphan`,
/// or `MirrorPrune` without `spec.prune`). The
/// namespace controller then deletes the set at once instead of waiting for the finalizer
/// (it looks again only some seconds later). The merge patch carries the parent's
/// resourceVersion, so a parent changed meanwhile keeps its finalizer (its deletion then
/// cleans up as usual).
pub async fn release_to_namespace_deletion<P: Parent>(
    obj: &P,
    ctx: &Context,
    scope: &SetScope,
) -> Result<()> {
    let terminating = match scope.parent.namespace.as_deref() {
        Some(ns) => ctx.members.terminating().contains(ns),
        None => false,
    };
    if !terminating || !obj.finalizers().iter().any(|f| f == FINALIZER) {
        return Ok(());
    }
    if obj.spec().deletion_policy.deletes_members(obj.spec().prune) {
        let extent = deletion_extent(obj, ctx, scope).await?;
        if !left_to_namespace_deletion(ctx, scope, &extent).await? {
            return Ok(());
        }
    }
    let others: Vec<&String> = obj
        .finalizers()
        .iter()
        .filter(|f| *f != FINALIZER)
        .collect();
    let patch = serde_json::json!({"metadata": {
        "finalizers": others,
        "resourceVersion": obj.meta().resource_version,
    }});
    let api = P::api(ctx.client.clone(), scope.parent.namespace.as_deref());
    let name = obj.meta().name.as_deref().unwrap_or_default();
    match api
        .patch_metadata(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => {
            tracing::info!(
                "its namespace is being deleted, and every member with it: finalizer removed"
            );
            Ok(())
        }
        // Gone, or changed since read: the deletion, if any, cleans up.
        Err(kube::Error::Api(s)) if s.code == 404 || s.is_conflict() => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Whether every member the set recorded lives in its own namespace, and that namespace is
/// being deleted (the namespace controller deletes every member there): then the cleanup has
/// nothing to list or delete. Only namespaced kinds in the set's own namespace qualify; the
/// namespace is looked at (one metadata GET) unless already known to be terminating.
async fn left_to_namespace_deletion(
    ctx: &Context,
    scope: &SetScope,
    extent: &Extent,
) -> Result<bool> {
    let Some(home) = scope.parent.namespace.as_deref() else {
        return Ok(false);
    };
    if extent.prune_namespaces.iter().any(|n| n != home) {
        return Ok(false);
    }
    let kinds: Vec<_> = extent.prune_kinds.iter().cloned().collect();
    let resolved = ctx.resolver.resolve_group_kinds(&kinds).await?;
    if resolved.values().any(|r| !r.namespaced) {
        return Ok(false);
    }
    Ok(ctx.members.terminating().confirms(home).await)
}

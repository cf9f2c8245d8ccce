//! The reconcile of a parent that is not being deleted: docs/design.md §4 as a straight line
//! of named steps — gate → render → health checks → record → empty-set guard → observe →
//! superset → apply → prune → shrink → report → wait — with Plan mode a step of its own.
//! One [`Reconcile`] value per reconcile; its methods are the steps, in the order they run. Each step returns what the next one needs, or stops the
//! reconcile with the [`Report`] to write.

use std::{sync::Arc, time::Duration};

use k8s_openapi::api::core::v1::ServiceAccount;
use kube::{Api, runtime::controller::Action};

use super::{
    Context,
    healthy::{POLL_UNWATCHED, Verdict, health_checks, observed_health},
    report::{self, Report, Step, Stop},
};
use crate::{
    Error, Result,
    api::{ApplySetSpec, Mode},
    dependencies::Refusal,
    engine::{
        Extent, SetEngine, SetScope, SetView,
        live::Live,
        outcome::{MemberResult, Outcome, tally},
        plan::{self, Before, Desired, Pruning, Run},
        prune::Listing,
    },
    members::Targets,
    parent::{self, Parent, Shrink},
    render::{self, KeySource, KindLookup, Readers, RenderError, RenderInput, SetError},
    set_reads::SetReader,
    sources::Sources,
    status::Reason,
    tenancy::Identity,
};

/// A reconcile running longer than this marks the parent Reconciling in status.
const PROGRESS_AFTER: Duration = Duration::from_secs(1);

/// Reconciles the parent's set and reports the outcome; failures of the API itself (not of
/// what was declared) are reported as ApplyFailed and retried with backoff.
pub async fn reconcile_set<P: Parent>(
    obj: Arc<P>,
    ctx: &Context,
    scope: &SetScope,
) -> Result<Action> {
    if own_namespace_terminating(ctx, scope).await {
        tracing::debug!("the set's own namespace is being terminated: nothing applied");
        return Ok(Action::requeue(report::TERMINATING_RETRY));
    }
    match reported(obj.clone(), ctx, scope).await {
        Ok(action) => Ok(action),
        // Another replica owns the set now: it writes the status.
        Err(e @ Error::Fenced { .. }) => {
            tracing::warn!(error = %e, "fenced: stopped");
            Ok(Action::requeue(super::shards::FENCED_RETRY))
        }
        // Another tool took the parent while this reconcile wrote it: nothing more is written.
        Err(e @ Error::NotOurs { .. }) => {
            let r = Report::failed(Reason::OwnershipConflict, e.to_string());
            report::write(ctx, scope, &*obj, r).await
        }
        Err(e) => {
            let hint = forbidden_hint(ctx, scope, matches!(e, Error::Forbidden { .. })).await;
            let msg = format!("{}: {hint}{e}; retrying", scope.parent);
            tracing::warn!(error = %e, "reconcile failed");
            report::write(ctx, scope, &*obj, Report::failed(Reason::ApplyFailed, msg)).await
        }
    }
}

async fn reported<P: Parent>(obj: Arc<P>, ctx: &Context, scope: &SetScope) -> Result<Action> {
    if obj.spec().suspend {
        let msg = "reconciliation is suspended (spec.suspend)".to_string();
        return report::write(ctx, scope, &*obj, Report::failed(Reason::Suspended, msg)).await;
    }
    // A reconcile still running after PROGRESS_AFTER says so in status (Reconciling=True);
    // a quicker one goes straight to its outcome, sparing a write of a possibly large
    // object. A mark that has started is finished before the outcome is written, so the
    // outcome is always the last word.
    let run = Reconcile::new(ctx, scope, &*obj);
    let work = run.outcome();
    tokio::pin!(work);
    let outcome = tokio::select! {
        outcome = &mut work => outcome,
        () = tokio::time::sleep(PROGRESS_AFTER) => {
            let (marked, outcome) =
                tokio::join!(report::mark_progressing(ctx, scope, &*obj), &mut work);
            marked?;
            outcome
        }
    };
    let decided = outcome?;
    // Under --shards auto, a set that moved while this reconcile ran is its new owner's to
    // report (a health wait can be long).
    if !super::shards::owns(ctx, &scope.id) {
        return Ok(Action::await_change());
    }
    // A refusal learnt during this reconcile: the set's own deletion is coming.
    if decided.reason == Reason::NamespaceTerminating && own_namespace_terminating(ctx, scope).await
    {
        return Ok(Action::requeue(report::TERMINATING_RETRY));
    }
    report::write(ctx, scope, &*obj, decided).await
}

/// Whether the set's own namespace is being terminated (see [`crate::terminating`]): then
/// it applies nothing and writes no status, since its own deletion is coming (the cleanup,
/// which deletes, still runs when it does).
async fn own_namespace_terminating(ctx: &Context, scope: &SetScope) -> bool {
    match &scope.parent.namespace {
        Some(ns) => ctx.members.terminating().blocks(ns).await,
        None => false,
    }
}

/// `ServiceAccount ns/name does not exist: …; ` when `forbidden` and the set acts as a
/// ServiceAccount that does not exist (impersonating it is then forbidden everything), else
/// nothing: the hint put before the message of a forbidden request.
pub async fn forbidden_hint(ctx: &Context, scope: &SetScope, forbidden: bool) -> String {
    if !forbidden {
        return String::new();
    }
    missing_service_account(ctx, scope).await
}

/// `ServiceAccount ns/name does not exist: …; ` when the set acts as a ServiceAccount that
/// does not exist, else nothing.
pub async fn missing_service_account(ctx: &Context, scope: &SetScope) -> String {
    let Identity::ServiceAccount { namespace, name } = &scope.identity else {
        return String::new();
    };
    let accounts: Api<ServiceAccount> = Api::namespaced(ctx.client.clone(), namespace);
    match accounts.get_metadata_opt(name).await {
        Ok(None) => format!(
            "{} does not exist: create it and bind it to the Roles this set needs, or change spec.serviceAccountName; ",
            scope.identity
        ),
        _ => String::new(),
    }
}

/// One reconcile of one parent: what every step reads.
struct Reconcile<'a, P: Parent> {
    ctx: &'a Context,
    scope: &'a SetScope,
    obj: &'a P,
    spec: &'a ApplySetSpec,
    /// The set's verbs, and the reconcile's clock.
    engine: SetEngine<'a>,
}

impl<'a, P: Parent> Reconcile<'a, P> {
    fn new(ctx: &'a Context, scope: &'a SetScope, obj: &'a P) -> Self {
        let spec = obj.spec();
        Reconcile {
            ctx,
            scope,
            obj,
            spec,
            engine: SetEngine::new(scope, &ctx.resolver, spec),
        }
    }

    /// What to report: the steps' outcome, or the report one of them stopped with.
    async fn outcome(self) -> Result<Report> {
        match self.steps().await {
            Ok(r) => Ok(r),
            Err(Stop::Report(r)) => Ok(*r),
            Err(Stop::Error(e)) => Err(e),
        }
    }

    /// docs/design.md §4, steps 0 to 6, then the wait for the set's health (step 7).
    async fn steps(mut self) -> Step<Report> {
        self.dependencies().await?;
        self.engine.restart_clock();
        let desired = self.render().await?;
        let checks = health_checks(self.ctx, self.scope, self.spec).await?;
        let before = self.recorded().await?;
        self.guard_empty(&desired, &before.recorded)?;
        let extent = self.engine.extent(&before.recorded, &desired);
        let live = self.observe(&extent, &desired).await?;
        let labelled = super::shards::all_labelled(self.scope, &live);
        let view = SetView {
            desired: &desired,
            extent: &extent,
            live: &live,
        };
        if self.spec.mode == Mode::Plan {
            return self.plan(&view, &before).await;
        }
        let stored = self.superset(&extent).await?;
        let mut results = self.apply(&view).await?;
        self.prune_unless_in_doubt(&before, &desired, &results)
            .await?;
        let pruned = self.prune(&view, &results).await?;
        results.extend(pruned);
        let changes = report::changes(&results);
        let finished = match self.shrink(&stored, &extent, labelled).await {
            Ok(()) => {
                let done = self.succeeded(&desired, &results);
                let members = super::healthy::wait_targets(self.spec.wait, &desired, &results);
                let targets = Targets { members, checks };
                self.wait(&desired, targets, done).await
            }
            Err(stop) => Err(stop),
        };
        self.with_changes(finished, changes).await
    }

    /// Stops the reconcile with `r`, carrying its summary and what `results` changed all
    /// the same (announced in the reconcile's event).
    async fn stop(&self, results: &[MemberResult], r: Report) -> Stop {
        let summary = Some(tally(results));
        Report { summary, ..r }
            .with_changes(report::changes(results))
            .into()
    }

    /// The reconcile's report carrying `changes`, for its event; a reconcile that ends in
    /// an error after changing members announces them now (the error's report has no list).
    async fn with_changes(&self, finished: Step<Report>, changes: Option<String>) -> Step<Report> {
        match finished {
            Ok(r) => Ok(r.with_changes(changes)),
            Err(Stop::Report(r)) => Err((*r).with_changes(changes).into()),
            Err(Stop::Error(e)) => {
                report::announce_changes(self.ctx, self.obj, changes).await;
                Err(Stop::Error(e))
            }
        }
    }

    /// Step 0, the gate: every `dependsOn` set is ready (see [`crate::dependencies`]);
    /// nothing is rendered or written before. The other sets of a cycle are reconciled, so
    /// that they refuse it too.
    async fn dependencies(&self) -> Step<()> {
        let (ctx, parent) = (self.ctx, &self.scope.parent);
        self.dependencies_readable().await?;
        let gate = ctx
            .dependencies
            .gate(&ctx.client, parent, self.spec, &ctx.config.tenancy);
        let refusal = match gate.await {
            Ok(()) => return Ok(()),
            Err(refusal) => refusal,
        };
        let r = match refusal {
            Refusal::Invalid(e) => {
                Report::failed(Reason::ValidationFailed, format!("{parent}: {e}"))
            }
            Refusal::Cycle { cycle, others } => {
                ctx.members.trigger_parents(others);
                let message = crate::dependencies::describe_cycle(&cycle);
                Report::failed(Reason::ValidationFailed, format!("{parent}: {message}"))
            }
            Refusal::NotReady(why) => {
                tracing::debug!(why = %why, "dependency not ready");
                let msg =
                    format!("{parent}: dependency {why}; nothing is applied until it is ready");
                Report::failed(Reason::DependencyNotReady, msg)
            }
        };
        Err(r.into())
    }

    /// A set that acts as a ServiceAccount learns about an ApplySet of another namespace
    /// only what that account may read: each such dependency is first read as the account
    /// (one GET each); one it may not get refuses the entry (ValidationFailed, retried: a
    /// RoleBinding granted later is not watched). ClusterApplySets, and ApplySets of the
    /// set's own namespace, are not checked.
    async fn dependencies_readable(&self) -> Step<()> {
        use crate::{api::ApplySet, applyset::ParentKind};
        let scope = self.scope;
        if scope.identity == Identity::Operator || self.spec.depends_on.is_empty() {
            return Ok(());
        }
        // An invalid dependsOn is the gate's to report.
        let Ok(dependencies) = crate::dependencies::resolve(&scope.parent, self.spec) else {
            return Ok(());
        };
        let elsewhere = dependencies.iter().filter(|d| {
            d.kind == ParentKind::ApplySet
                && d.namespace.is_some()
                && d.namespace != scope.parent.namespace
        });
        for d in elsewhere {
            let ns = d.namespace.as_deref().unwrap_or_default();
            let api: Api<ApplySet> = Api::namespaced(scope.client.clone(), ns);
            match api.get_metadata_opt(&d.name).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.is_forbidden() => {
                    let msg = format!(
                        "{}: spec.dependsOn: {} may not get {d}, in another namespace; grant it get on applysets.applyset.dev in {ns}, or remove the dependency",
                        scope.parent, scope.identity
                    );
                    return Err(Report {
                        retry: true,
                        ..Report::failed(Reason::ValidationFailed, msg)
                    }
                    .into());
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Step 1, render and validate (see [`render::render_set`]): inline manifests, then
    /// every source. The referenced ConfigMaps and Secrets are indexed first, so that
    /// creating a missing one triggers a reconcile.
    async fn render(&self) -> Step<Desired> {
        let (ctx, parent) = (self.ctx, &self.scope.parent);
        ctx.sources
            .index
            .set(parent, Sources::references(parent, self.spec));
        let input = RenderInput {
            parent,
            spec: self.spec,
            identity: &self.scope.identity,
            tenancy: &ctx.config.tenancy,
            limits: &ctx.config.set_limits,
        };
        // Source credentials are the operator's to read; whatever lands in the set's objects
        // is read as the set's identity.
        let readers = Readers {
            sources: &ctx.sources,
            client: &ctx.client,
            set: SetReader::new(&self.scope.client, &self.scope.identity),
            kinds: KindLookup::Discovery {
                resolver: &ctx.resolver,
                beside: &|_| None,
            },
            keys: KeySource::Cluster,
            worker: self.scope.worker(),
        };
        let rendered = match render::render_set(&input, &readers).await? {
            Ok(rendered) => rendered,
            Err(e) => return Err(self.render_failure(e).into()),
        };
        for f in &rendered.fetched {
            let result = if f.downloaded { "downloaded" } else { "cached" };
            ctx.metrics.source_fetched(f.kind, result);
        }
        tracing::debug!(members = rendered.set.members.len(), "rendered");
        let memory = rendered.fetched.iter().filter_map(|f| f.memory.clone());
        let memory = memory.chain(rendered.stage_memory.iter().cloned());
        Ok(Desired::new(rendered.set, memory.collect()))
    }

    /// The report of a set that does not render: SourceFailed (retried) for a source that
    /// cannot be read now, nothing applied or pruned; otherwise ValidationFailed (Stalled),
    /// except that a kind nobody serves yet may be installed by someone else (a CRD of
    /// another set), so that one is looked at again with backoff.
    fn render_failure(&self, e: SetError) -> Report {
        let r = render_report(&e, &self.scope.parent);
        if let SetError::Source(_) = e.inner() {
            self.ctx.metrics.source_fetched("any", "failed");
            tracing::info!(reason = %r.reason, message = %r.message, "source not usable");
        }
        r
    }

    /// Step 1c, what the parent recorded before this reconcile (see [`plan::before`]).
    async fn recorded(&self) -> Step<Before> {
        let status = self.obj.status();
        let before = plan::before(self.obj.meta(), status, &self.ctx.resolver).await?;
        let before = before.map_err(|e| {
            let msg = format!(
                "{}: its ApplySet annotations are malformed ({e}); fix or remove them",
                self.scope.parent
            );
            Report::failed(Reason::ValidationFailed, msg)
        })?;
        if !before.missing.is_empty() {
            tracing::warn!(missing = %plan::describe(&before.missing), "the parent's ApplySet annotations do not record members its status lists; recording them again, no prune this time");
        }
        Ok(before)
    }

    /// Step 1d, the empty-set guard (see [`plan::empty_set_refused`]).
    fn guard_empty(&self, desired: &Desired, before: &parent::Recorded) -> Step<()> {
        let set = &desired.set;
        if !plan::empty_set_refused(self.spec, set.members.is_empty(), before) {
            return Ok(());
        }
        let msg = format!(
            "{}: the desired set is empty; refusing to prune every member. Set spec.allowEmpty: true to allow it",
            self.scope.parent
        );
        Err(Report::failed(Reason::EmptySetRefused, msg)
            .attempted(&set.revision)
            .into())
    }

    /// Step 1e, what of the set is live (the set registered with the member watches first:
    /// it no longer holds the kinds it does not declare).
    async fn observe(&self, extent: &Extent, desired: &Desired) -> Step<Live> {
        let (ctx, scope) = (self.ctx, self.scope);
        let t0 = std::time::Instant::now();
        ctx.members.register(
            &scope.id,
            &scope.parent,
            &desired.declared.keys().cloned().collect(),
        );
        let live = self.engine.observe(extent, desired).await?;
        tracing::debug!(
            live = live.existing.len(),
            ms = t0.elapsed().as_millis(),
            "observed"
        );
        Ok(live)
    }

    /// Plan mode, instead of steps 2 to 7 (see [`SetEngine::plan`]): a server-side dry-run of
    /// the apply and the prune decision; nothing is written.
    async fn plan(&self, view: &SetView<'_>, before: &Before) -> Step<Report> {
        let revision = &view.desired.set.revision;
        let planned = self.engine.plan(view, &before.recorded, false).await?;
        let planned =
            planned.map_err(|_| self.timed_out(Run::DryRun { preview: false }, revision))?;
        self.accepted(view.desired, &planned.members);
        if let Some(r) = report::apply_failure(&planned.members, revision) {
            return Ok(r);
        }
        let prune = match planned.prune {
            Pruning::Off | Pruning::EmptySetRefused => Vec::new(),
            Pruning::Decided(selection) => {
                selection.delete.into_iter().map(|m| m.reference).collect()
            }
            Pruning::Undecided(e) => return Err(e.into()),
        };
        Ok(report::plan(&planned.members, prune, revision))
    }

    /// The kinds of which the API server accepted an apply (or a dry-run) for this set are
    /// held by it: watched from now on, until no set declares them (see
    /// [`crate::members::watch_refs`]). A kind never accepted (not served, or nobody may write it) is
    /// never watched.
    fn accepted(&self, desired: &Desired, results: &[MemberResult]) {
        let kinds: std::collections::HashSet<crate::applyset::GroupKind> = results
            .iter()
            .filter(|r| r.outcome.is_applied())
            .map(|r| {
                crate::applyset::GroupKind::new(r.reference.group.clone(), r.reference.kind.clone())
            })
            .collect();
        self.ctx.members.accepted(
            &self.scope.id,
            desired.known.iter().filter(|(gk, _)| kinds.contains(*gk)),
        );
    }

    /// The report of an apply (or plan) that did not finish within spec.timeout.
    fn timed_out(&self, run: Run, revision: &str) -> Stop {
        let msg = format!(
            "{}: {} did not finish within spec.timeout ({}); nothing was pruned. Raise spec.timeout if the set is large or slow to apply",
            self.scope.parent,
            if run == Run::Apply {
                "the apply"
            } else {
                "the plan"
            },
            self.spec.timeout
        );
        Report::failed(Reason::ApplyFailed, msg)
            .attempted(revision)
            .into()
    }

    /// Step 2, parent superset: the parent records what it recorded and what is declared
    /// now (and carries our finalizer) before any member is touched. Returns the parent as
    /// stored.
    async fn superset(&self, extent: &Extent) -> Step<P> {
        let (ctx, scope, set) = (self.ctx, self.scope, &extent.superset);
        let stored = super::shards::write_parent(ctx, scope, self.obj, set, Shrink::Keep);
        Ok(stored.await?)
    }

    /// Step 3, apply, staged and concurrent; any member not applied stops the reconcile
    /// (nothing is pruned).
    async fn apply(&self, view: &SetView<'_>) -> Step<Vec<MemberResult>> {
        let t0 = std::time::Instant::now();
        let revision = &view.desired.set.revision;
        let results = self
            .engine
            .apply(view)
            .await?
            .map_err(|_| self.timed_out(Run::Apply, revision))?;
        // Under --shards auto, another replica claimed the set before a member was written.
        if let Some(fenced) = super::shards::refused(self.scope) {
            return Err(Stop::Error(fenced));
        }
        self.accepted(view.desired, &results);
        tracing::debug!(
            members = results.len(),
            ms = t0.elapsed().as_millis(),
            "applied"
        );
        let Some(r) = report::apply_failure(&results, revision) else {
            return Ok(results);
        };
        // What was applied before the failure changed all the same.
        let forbidden = results
            .iter()
            .any(|r| matches!(&r.outcome, Outcome::Forbidden { .. }));
        let message = format!(
            "{}{}",
            forbidden_hint(self.ctx, self.scope, forbidden).await,
            r.message
        );
        Err(self.stop(&results, Report { message, ..r }).await)
    }

    /// When the parent's record had to be completed from its status (its annotations were
    /// replaced or edited), there is a doubt: nothing is pruned this time. The superset
    /// written before the apply records everything again, and the next reconcile prunes.
    async fn prune_unless_in_doubt(
        &self,
        before: &Before,
        desired: &Desired,
        applied: &[MemberResult],
    ) -> Step<()> {
        if before.missing.is_empty() || !self.spec.prune {
            return Ok(());
        }
        let msg = format!(
            "{}: prune skipped: the parent's ApplySet annotations did not record {} that status.members lists (they were replaced or edited); recorded again now, the next reconcile prunes",
            self.scope.parent,
            plan::describe(&before.missing)
        );
        let r = Report::failed(Reason::PruneFailed, msg).attempted(&desired.set.revision);
        Err(self.stop(applied, r).await)
    }

    /// Step 4, prune, only after every member applied (see [`crate::engine::prune::decide`] for the
    /// listing a decision is made on); a prune that cannot be decided or does not finish
    /// stops the reconcile with PruneFailed (the parent keeps its superset).
    /// `applied`: the apply's results, for the summary of a stop.
    async fn prune(&self, view: &SetView<'_>, applied: &[MemberResult]) -> Step<Vec<MemberResult>> {
        if !self.spec.prune {
            return Ok(Vec::new());
        }
        let (scope, revision) = (self.scope, &view.desired.set.revision);
        let t0 = std::time::Instant::now();
        let selection = match self
            .engine
            .decide_prune(view, applied, Listing::Fresh)
            .await
        {
            Ok(selection) => selection,
            Err(e) => {
                // Every member applied: a prune that cannot be decided is a prune failure.
                let forbidden = matches!(e, Error::Forbidden { .. });
                let msg = format!(
                    "{}: {}{e}; nothing was pruned, the parent keeps recording every kind",
                    scope.parent,
                    forbidden_hint(self.ctx, scope, forbidden).await
                );
                let r = Report::failed(Reason::PruneFailed, msg).attempted(revision);
                return Err(self.stop(applied, r).await);
            }
        };
        if !selection.delete.is_empty() {
            super::shards::check(self.ctx, scope).await?;
        }
        let results = self.engine.prune(selection).await;
        tracing::debug!(ms = t0.elapsed().as_millis(), "pruned");
        let parent = scope.parent.to_string();
        if let Some(r) = report::prune_failure(&parent, &results, revision) {
            let all: Vec<MemberResult> = applied.iter().chain(&results).cloned().collect();
            return Err(self.stop(&all, r).await);
        }
        Ok(results)
    }

    /// Step 5, parent shrink after a complete prune: the parent records exactly the
    /// declared set (and drops the deprecated `contains-group-resources`).
    async fn shrink(&self, stored: &P, extent: &Extent, labelled: Option<bool>) -> Step<()> {
        if self.spec.prune {
            let (ctx, scope, set) = (self.ctx, self.scope, &extent.declared);
            let shrink = Shrink::DropDeprecated;
            super::shards::write_parent(ctx, scope, stored, set, shrink).await?;
        }
        // Under --shards auto: a set whose listed members all carry its bucket label is seen
        // whole by the member watches from now on.
        if labelled == Some(true) {
            self.ctx.members.complete(&self.scope.id);
        }
        Ok(())
    }

    /// Step 6, the report of a complete reconcile.
    fn succeeded(&self, desired: &Desired, results: &[MemberResult]) -> Report {
        let summary = tally(results);
        self.ctx
            .metrics
            .set_members(&self.scope.parent.to_string(), summary.members);
        let members = desired
            .set
            .members
            .iter()
            .map(|m| m.reference.clone())
            .collect();
        report::succeeded(summary, members, &desired.set.revision)
    }

    /// Step 7: see [`wait`].
    async fn wait(&self, desired: &Desired, targets: Targets, done: Report) -> Step<Report> {
        wait(self.ctx, self.obj, self.scope, desired, targets, done).await
    }
}

/// The report of a set that does not render (see [`Reconcile::render_failure`]).
fn render_report(e: &SetError, parent: &crate::applyset::ParentRef) -> Report {
    if e.is_source_failure() {
        let msg = format!("{}, retrying", e.message(parent));
        return Report::failed(Reason::SourceFailed, msg);
    }
    Report {
        retry: match e.inner() {
            SetError::Render(RenderError::UnknownKind { .. }) => true,
            SetError::Decryption(d) => d.retry(),
            SetError::Substitute(e) => e.retry(),
            _ => false,
        },
        ..Report::failed(Reason::ValidationFailed, e.message(parent))
    }
}

/// Step 7, wait (spec.wait, spec.healthChecks): the set's health as the member watches see it
/// — its members when it waits, and its checked objects. Ready once everything is Current;
/// HealthCheckFailed (retried) when something failed or the wait outlasted spec.timeout;
/// otherwise Progressing, and the reconcile ends: the health reporter reconciles the set
/// again as soon as its health is decisive, and the requeue at the timeout ends the wait.
/// A set that neither waits nor checks stops being tracked.
async fn wait<P: Parent>(
    ctx: &Context,
    obj: &P,
    scope: &SetScope,
    desired: &Desired,
    targets: Targets,
    done: Report,
) -> Step<Report> {
    let spec = obj.spec();
    if !spec.wait && spec.health_checks.is_empty() {
        ctx.members.untrack(&scope.id);
        ctx.health.forget(&scope.id);
        super::healthy::clear(ctx, &scope.parent, obj.status()).await;
        return Ok(done);
    }
    ctx.health
        .seed(&scope.id, obj.status(), obj.meta().generation);
    ctx.members.track(&scope.id, &scope.parent, targets);
    let Some((health, polled)) = observed_health(ctx, scope, desired).await else {
        return Ok(done);
    };
    let health = health.summary;
    let key = (obj.meta().generation, desired.set.revision.clone());
    let parent = &scope.parent;
    let failed = |message: String| Report {
        ready: false,
        reason: Reason::HealthCheckFailed,
        message,
        ..done.clone()
    };
    Ok(
        match ctx
            .health
            .wait_verdict(&scope.id, key, health.status(), spec.timeout())
        {
            Verdict::Current => Report {
                message: format!("{}; {}", done.message, health.message()),
                ..done
            },
            Verdict::Failed => failed(format!("{parent}: {}; retrying", health.message())),
            Verdict::TimedOut(_) => failed(format!(
                "{parent}: not healthy within spec.timeout ({}): {}; retrying",
                spec.timeout,
                health.message()
            )),
            Verdict::Waiting(left) => {
                // The health may have become decisive since it was read, before the wait
                // was registered: the reporter looks again, now that the set waits.
                ctx.members.touch(&scope.id);
                Report {
                    ready: false,
                    reason: Reason::Progressing,
                    message: format!("{}; waiting: {}", done.message, health.message()),
                    // Members the operator cannot watch are read again (no event will come).
                    requeue_after: Some(if polled {
                        left.min(POLL_UNWATCHED)
                    } else {
                        left
                    }),
                    ..done
                }
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_failures_are_stalled_except_unknown_kinds() {
        let unknown = RenderError::UnknownKind {
            origin: crate::manifest::Origin::inline(0),
            api_version: "example.com/v1".into(),
            kind: "Widget".into(),
            name: "w".into(),
        };
        let parent = crate::applyset::ParentRef::applyset("ns", "set");
        let r = render_report(&SetError::Render(unknown), &parent);
        assert_eq!(r.reason, Reason::ValidationFailed);
        assert!(r.retry);
        assert_eq!(report::next(&r), report::Next::Backoff);
    }
}

//! The reconcile of a parent that is not being deleted: SPEC §4 as a straight line of named
//! steps — dependencies → render → guard → superset → apply → prune → shrink → report — with
//! Plan mode a step of its own. Each step returns what the next one needs, or stops the
//! reconcile with the [`Report`] to write.

use std::{
    collections::HashMap,
    sync::Arc,
    time::{Duration, Instant},
};

use k8s_openapi::api::core::v1::ServiceAccount;
use kube::{Api, runtime::controller::Action};

use super::{
    Context,
    healthy::Verdict,
    report::{self, Report},
};
use crate::{
    Error, Result,
    api::{ApplySetSpec, MemberRef, Mode},
    applyset::GroupKind,
    dependencies::Refusal,
    discovery::Resolved,
    engine::{
        Extent, SetScope, adopt, apply,
        live::{self, Live},
        outcome::{MemberResult, Outcome, tally},
        prune::{self, Declared, Keep},
    },
    members::{CheckTarget, Targets},
    parent::{self, Parent, Recorded},
    render::{self, DesiredSet, RenderError},
    sources::{self, Fetched, SourceError, Sources},
    status::Reason,
    tenancy::{self, Identity},
};

/// A reconcile running longer than this marks the parent Reconciling in status.
const PROGRESS_AFTER: Duration = Duration::from_secs(1);

/// Why a reconcile stops before its end: a report to write, or an error of the operator's
/// own I/O (reported as ApplyFailed and retried).
enum Stop {
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

type Step<T> = std::result::Result<T, Stop>;

/// Applies the parent's set and reports the outcome; failures of the API itself (not of
/// what was declared) are reported as ApplyFailed and retried with backoff.
pub async fn apply<P: Parent>(obj: Arc<P>, ctx: &Context, scope: &SetScope) -> Result<Action> {
    match apply_reported(obj.clone(), ctx, scope).await {
        Ok(action) => Ok(action),
        Err(e) => {
            let missing = match e {
                Error::Forbidden { .. } => missing_service_account(ctx, scope).await,
                _ => String::new(),
            };
            let msg = format!("{}: {missing}{e}; retrying", scope.parent);
            tracing::warn!(error = %e, "reconcile failed");
            report::write(ctx, scope, &*obj, Report::failed(Reason::ApplyFailed, msg)).await
        }
    }
}

async fn apply_reported<P: Parent>(obj: Arc<P>, ctx: &Context, scope: &SetScope) -> Result<Action> {
    if obj.spec().suspend {
        let msg = "reconciliation is suspended (spec.suspend)".to_string();
        return report::write(ctx, scope, &*obj, Report::failed(Reason::Suspended, msg)).await;
    }
    // A reconcile still running after PROGRESS_AFTER says so in status (Reconciling=True);
    // a quicker one goes straight to its outcome, sparing a write of a possibly large
    // object. A mark that has started is finished before the outcome is written, so the
    // outcome is always the last word.
    let work = decide(&*obj, ctx, scope);
    tokio::pin!(work);
    let decided = tokio::select! {
        decided = &mut work => decided,
        () = tokio::time::sleep(PROGRESS_AFTER) => {
            let (marked, decided) =
                tokio::join!(report::mark_progressing(ctx, scope, &*obj), &mut work);
            marked?;
            decided
        }
    };
    report::write(ctx, scope, &*obj, decided?).await
}

/// What to report: the steps' outcome, or the report one of them stopped with.
async fn decide<P: Parent>(obj: &P, ctx: &Context, scope: &SetScope) -> Result<Report> {
    match steps(obj, ctx, scope).await {
        Ok(r) => Ok(r),
        Err(Stop::Report(r)) => Ok(*r),
        Err(Stop::Error(e)) => Err(e),
    }
}

/// SPEC §4, steps 0 to 6, then the wait for the set's health (step 7).
async fn steps<P: Parent>(obj: &P, ctx: &Context, scope: &SetScope) -> Step<Report> {
    let spec = obj.spec();
    dependencies(ctx, scope, spec).await?;
    let clock = Clock::start(spec);
    let desired = render(ctx, scope, spec).await?;
    let checks = health_checks(ctx, scope, spec).await?;
    let before = recorded(ctx, scope, obj).await?;
    guard_empty(scope, spec, &desired.set, &before.recorded)?;
    let extent = Extent::new(
        scope.parent.namespace.as_deref(),
        &before.recorded,
        desired.recorded(),
    );
    let live = observe(ctx, scope, &extent, &desired).await?;
    if spec.mode == Mode::Plan {
        return plan(ctx, scope, spec, &desired, &extent, &live, &clock).await;
    }
    let stored = superset(ctx, obj, &extent).await?;
    let mut results = apply_members(ctx, obj, scope, &desired, &live, &clock).await?;
    if let Err(stop) = doubt(scope, spec, &before, &desired, &results) {
        report::announce_changes(ctx, obj, &results).await;
        return Err(stop);
    }
    let pruned = prune_members(ctx, obj, scope, &desired, &extent, &live, &results).await?;
    results.extend(pruned);
    report::announce_changes(ctx, obj, &results).await;
    if spec.prune {
        shrink(ctx, &stored, &extent).await?;
    }
    let done = succeeded(ctx, scope, &desired, &results);
    wait(ctx, obj, scope, &desired, checks, done).await
}

/// The reconcile's time bounds: `spec.timeout` from now, and now as Unix seconds (objects
/// created at or after it were created by this reconcile).
struct Clock {
    deadline: Instant,
    epoch: i64,
}

impl Clock {
    fn start(spec: &ApplySetSpec) -> Self {
        let now = Instant::now();
        Clock {
            deadline: now.checked_add(spec.timeout()).unwrap_or(now),
            epoch: k8s_openapi::jiff::Timestamp::now().as_second(),
        }
    }
}

/// The rendered set and what is derived from it once.
struct Desired {
    set: DesiredSet,
    /// How each declared kind resolved.
    known: HashMap<GroupKind, Resolved>,
    /// The declared members (what prune must keep).
    declared: Declared,
    /// The sources' share of the operator's memory budget, held while the set they rendered
    /// is in use (given back when the reconcile ends).
    _source_memory: Vec<Arc<sources::memory::Lease>>,
}

impl Desired {
    fn new(set: DesiredSet) -> Self {
        Desired {
            known: set.resolutions(),
            declared: set.declared(),
            set,
            _source_memory: Vec::new(),
        }
    }

    /// What the parent records for exactly this set.
    fn recorded(&self) -> Recorded {
        Recorded {
            group_kinds: self.set.group_kinds(),
            namespaces: self.set.namespaces(),
        }
    }
}

/// Step 0, the gate: every `dependsOn` set is ready (see [`crate::dependencies`]); nothing is
/// rendered or written before. The other sets of a cycle are reconciled, so that they refuse
/// it too.
async fn dependencies(ctx: &Context, scope: &SetScope, spec: &ApplySetSpec) -> Step<()> {
    let parent = &scope.parent;
    dependencies_readable(scope, spec).await?;
    let refusal = match ctx
        .dependencies
        .gate(&ctx.client, parent, spec, &ctx.config.tenancy)
        .await
    {
        Ok(()) => return Ok(()),
        Err(refusal) => refusal,
    };
    let r = match refusal {
        Refusal::Invalid(msg) => {
            Report::failed(Reason::ValidationFailed, format!("{parent}: {msg}"))
        }
        Refusal::Cycle { message, others } => {
            ctx.members.trigger_parents(others);
            Report::failed(Reason::ValidationFailed, format!("{parent}: {message}"))
        }
        Refusal::NotReady(why) => {
            tracing::debug!(why = %why, "dependency not ready");
            let msg = format!("{parent}: dependency {why}; nothing is applied until it is ready");
            Report::failed(Reason::DependencyNotReady, msg)
        }
    };
    Err(r.into())
}

/// A set that acts as a ServiceAccount learns about an ApplySet of another namespace only what
/// that account may read: each such dependency is first read as the account (one GET each);
/// one it may not get refuses the entry (ValidationFailed, retried: a RoleBinding granted
/// later is not watched). ClusterApplySets, and ApplySets of the set's own namespace, are not
/// checked.
async fn dependencies_readable(scope: &SetScope, spec: &ApplySetSpec) -> Step<()> {
    use crate::{api::ApplySet, applyset::ParentKind};
    if scope.identity == Identity::Operator || spec.depends_on.is_empty() {
        return Ok(());
    }
    // An invalid dependsOn is the gate's to report.
    let Ok(dependencies) = crate::dependencies::resolve(&scope.parent, spec) else {
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
            Err(kube::Error::Api(s)) if s.code == 403 => {
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

/// Step 1, render and validate: inline manifests, then every source. The referenced ConfigMaps
/// and Secrets are indexed first, so that creating a missing one triggers a reconcile.
async fn render(ctx: &Context, scope: &SetScope, spec: &ApplySetSpec) -> Step<Desired> {
    let parent = &scope.parent;
    ctx.sources
        .index
        .set(parent, Sources::references(parent, spec));
    if let Err(msg) = sources::validate(parent, spec) {
        return Err(Report::failed(Reason::ValidationFailed, format!("{parent}: {msg}")).into());
    }
    let mut manifests = render::inline_manifests(spec)
        .map_err(|e| Report::failed(Reason::ValidationFailed, e.to_string()))?;
    let fetched = fetch(ctx, scope, spec).await?;
    for f in &fetched {
        manifests.extend(f.manifests.iter().cloned());
    }
    decrypt(scope, spec, &mut manifests).await?;
    render::check_limits(&manifests, &ctx.config.set_limits)
        .map_err(|e| Report::failed(Reason::ValidationFailed, format!("{parent}: {e}")))?;
    let mut set = render::render(parent, spec, manifests, &ctx.resolver)
        .await?
        .map_err(render_failure)?;
    set.revision = sources::combined_revision(&set.revision, &fetched);
    let members = set.members.iter().map(|m| (&m.reference, m.namespaced));
    tenancy::check_scope(parent, &scope.identity, &ctx.config.tenancy, members)
        .map_err(|e| Report::failed(Reason::ValidationFailed, format!("{parent}: {e}")))?;
    tracing::debug!(members = set.members.len(), "rendered");
    let mut desired = Desired::new(set);
    desired._source_memory = fetched.iter().filter_map(|f| f.memory.clone()).collect();
    Ok(desired)
}

/// Decrypts the SOPS-encrypted members in memory (spec.decryption), reading the key Secret as
/// the set's identity only when a member needs it. A member that cannot be decrypted stops
/// the reconcile before anything is written (ValidationFailed, naming the member and why).
async fn decrypt(
    scope: &SetScope,
    spec: &ApplySetSpec,
    manifests: &mut [crate::manifest::Manifest],
) -> Step<()> {
    use crate::decryption::{self, DecryptionError};
    let parent = &scope.parent;
    let failed = |e: DecryptionError| -> Report {
        Report {
            retry: e.retry(),
            ..Report::failed(
                Reason::ValidationFailed,
                format!("{parent}: {e}; nothing applied or pruned"),
            )
        }
    };
    if !decryption::needs_keys(manifests) {
        return Ok(());
    }
    let keys = match decryption::secret_ref(spec) {
        Some(r) => Some(
            decryption::read_keys(&scope.client, parent, &scope.identity, r)
                .await
                .map_err(failed)?,
        ),
        None => None,
    };
    let count =
        decryption::decrypt_members(manifests, keys.as_ref(), &crate::sops::Limits::default())
            .map_err(failed)?;
    tracing::debug!(members = count, "decrypted");
    Ok(())
}

/// The sources' manifests; a source that cannot be used stops the reconcile (SourceFailed,
/// retried) before anything is written.
async fn fetch(ctx: &Context, scope: &SetScope, spec: &ApplySetSpec) -> Step<Vec<Fetched>> {
    let parent = &scope.parent;
    match ctx.sources.fetch_all(&ctx.client, parent, spec).await {
        Ok(fetched) => {
            for f in &fetched {
                let result = if f.downloaded { "downloaded" } else { "cached" };
                ctx.metrics.source_fetched(f.kind, result);
            }
            Ok(fetched)
        }
        Err(e) => {
            let (reason, msg) = match &e {
                SourceError::Failed(m) => (
                    Reason::SourceFailed,
                    format!("{parent}: {m}; nothing applied or pruned, retrying"),
                ),
                SourceError::Invalid(m) => (Reason::ValidationFailed, format!("{parent}: {m}")),
                SourceError::Manifest(m) => (Reason::ValidationFailed, m.to_string()),
            };
            ctx.metrics.source_fetched("any", "failed");
            tracing::info!(reason = %reason, message = %msg, "source not usable");
            Err(Report::failed(reason, msg).into())
        }
    }
}

/// A render failure: ValidationFailed (Stalled); a kind nobody serves yet may be installed
/// by someone else (a CRD of another set), so that one is looked at again with backoff.
fn render_failure(e: RenderError) -> Report {
    Report {
        retry: matches!(e, RenderError::UnknownKind { .. }),
        ..Report::failed(Reason::ValidationFailed, e.to_string())
    }
}

/// What the parent recorded before this reconcile.
struct Before {
    /// Its annotations, and what `missing` adds to them.
    recorded: Recorded,
    /// What the last complete reconcile applied (status.members) that the annotations do not
    /// record: not empty when they were replaced or edited since.
    missing: Recorded,
}

/// What the parent recorded before this reconcile: its annotations, completed with what its
/// status says was applied last, so that nothing applied is forgotten.
async fn recorded<P: Parent>(ctx: &Context, scope: &SetScope, obj: &P) -> Step<Before> {
    let annotations = parent::recorded(obj.meta(), &ctx.resolver)
        .await?
        .map_err(|e| {
            let msg = format!(
                "{}: its ApplySet annotations are malformed ({e}); fix or remove them",
                scope.parent
            );
            Report::failed(Reason::ValidationFailed, msg)
        })?;
    let last = parent::last_applied(obj.status());
    let missing = parent::unrecorded(&annotations, &last, scope.parent.namespace.as_deref());
    if !missing.is_empty() {
        tracing::warn!(missing = %describe(&missing), "the parent's ApplySet annotations do not record members its status lists; recording them again, no prune this time");
    }
    Ok(Before {
        recorded: annotations.union(&missing),
        missing,
    })
}

/// `kinds ConfigMap,Secret; namespaces a,b`.
fn describe(r: &Recorded) -> String {
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

/// When the parent's record had to be completed from its status (its annotations were
/// replaced or edited), there is a doubt: nothing is pruned this time. The superset written
/// before the apply records everything again, and the next reconcile prunes.
fn doubt(
    scope: &SetScope,
    spec: &ApplySetSpec,
    before: &Before,
    desired: &Desired,
    applied: &[MemberResult],
) -> Step<()> {
    if before.missing.is_empty() || !spec.prune {
        return Ok(());
    }
    let msg = format!(
        "{}: prune skipped: the parent's ApplySet annotations did not record {} that status.members lists (they were replaced or edited); recorded again now, the next reconcile prunes",
        scope.parent,
        describe(&before.missing)
    );
    let r = Report {
        summary: Some(tally(applied)),
        ..Report::failed(Reason::PruneFailed, msg).attempted(&desired.set.revision)
    };
    Err(r.into())
}

/// The empty-set guard: an empty set would prune everything recorded. (An empty set with
/// nothing recorded, or with prune off, deletes nothing and is allowed.)
fn guard_empty(
    scope: &SetScope,
    spec: &ApplySetSpec,
    set: &DesiredSet,
    before: &Recorded,
) -> Step<()> {
    match empty_set_refused(spec, set.members.is_empty(), before) {
        false => Ok(()),
        true => {
            let msg = format!(
                "{}: the desired set is empty; refusing to prune every member. Set spec.allowEmpty: true to allow it",
                scope.parent
            );
            Err(Report::failed(Reason::EmptySetRefused, msg)
                .attempted(&set.revision)
                .into())
        }
    }
}

/// Whether the empty-set guard refuses a reconcile.
fn empty_set_refused(spec: &ApplySetSpec, empty: bool, before: &Recorded) -> bool {
    empty && !spec.allow_empty && spec.prune && !before.group_kinds.is_empty()
}

/// What of the set is live (the member watches registered first, so they cover it next
/// time).
async fn observe(
    ctx: &Context,
    scope: &SetScope,
    extent: &Extent,
    desired: &Desired,
) -> Step<Live> {
    let t0 = Instant::now();
    ctx.members.ensure_watched(&desired.known);
    ctx.members.register(
        &scope.id,
        &scope.parent,
        &desired.declared.keys().cloned().collect(),
    );
    let live = live::observe(
        scope,
        &ctx.resolver,
        extent,
        &desired.known,
        &desired.declared,
    )
    .await?;
    tracing::debug!(
        live = live.existing.len(),
        ms = t0.elapsed().as_millis(),
        "observed"
    );
    Ok(live)
}

/// Plan mode: a server-side dry-run of the apply and the prune decision; nothing is written.
async fn plan(
    ctx: &Context,
    scope: &SetScope,
    spec: &ApplySetSpec,
    desired: &Desired,
    extent: &Extent,
    live: &Live,
    clock: &Clock,
) -> Step<Report> {
    let results = apply_within_timeout(scope, spec, desired, live, clock).await?;
    if let Some(r) = report::apply_failure(&results, &desired.set.revision) {
        return Ok(r);
    }
    let mut prune = Vec::new();
    if spec.prune {
        let selection = decide_prune(ctx, scope, desired, extent, live, &results, false).await?;
        prune = selection.delete.into_iter().map(|m| m.reference).collect();
    }
    Ok(report::plan(&results, prune, &desired.set.revision))
}

/// Step 2, parent superset: the parent records what it recorded and what is declared now
/// (and carries our finalizer) before any member is touched. Returns the parent as stored.
async fn superset<P: Parent>(ctx: &Context, obj: &P, extent: &Extent) -> Step<P> {
    Ok(parent::write(&ctx.client, obj, &extent.superset, false).await?)
}

/// Step 3, apply, staged and concurrent; any member not applied stops the reconcile (nothing is
/// pruned).
async fn apply_members<P: Parent>(
    ctx: &Context,
    obj: &P,
    scope: &SetScope,
    desired: &Desired,
    live: &Live,
    clock: &Clock,
) -> Step<Vec<MemberResult>> {
    let spec = obj.spec();
    let t0 = Instant::now();
    let results = apply_within_timeout(scope, spec, desired, live, clock).await?;
    tracing::debug!(
        members = results.len(),
        ms = t0.elapsed().as_millis(),
        "applied"
    );
    if let Some(r) = report::apply_failure(&results, &desired.set.revision) {
        // What was applied before the failure changed all the same.
        report::announce_changes(ctx, obj, &results).await;
        let summary = Some(tally(&results));
        let forbidden = results.iter().any(
            |r| matches!(&r.outcome, Outcome::Failed { message } if message.contains("forbidden")),
        );
        let mut message = r.message.clone();
        if forbidden {
            message.insert_str(0, &missing_service_account(ctx, scope).await);
        }
        return Err(Report {
            summary,
            message,
            ..r
        }
        .into());
    }
    Ok(results)
}

/// `ServiceAccount ns/name does not exist: …; ` when the set acts as a ServiceAccount that
/// does not exist (impersonating it is then forbidden everything), else nothing.
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

/// Applies (or, in Plan mode, dry-runs) within spec.timeout, after looking up which members
/// exist unlabelled (they are adopted only if allowed); a timeout prunes nothing.
async fn apply_within_timeout(
    scope: &SetScope,
    spec: &ApplySetSpec,
    desired: &Desired,
    live: &Live,
    clock: &Clock,
) -> Step<Vec<MemberResult>> {
    let members = &desired.set.members;
    let applying = async {
        let lookup = adopt::unlabelled(scope, members, &live.owned).await?;
        let opts = apply::Options {
            force: spec.force,
            dry_run: spec.mode == Mode::Plan,
            existing: &live.existing,
            started: clock.epoch,
            deadline: clock.deadline,
            lookup: &lookup,
            adopt_existing: spec.adopt_existing,
        };
        Ok::<_, Error>(apply::apply_staged(scope, members, &opts).await)
    };
    let remaining = clock.deadline.saturating_duration_since(Instant::now());
    let dry_run = spec.mode == Mode::Plan;
    let results = tokio::time::timeout(remaining, applying).await.map_err(|_| {
        let msg = format!(
            "{}: {} did not finish within spec.timeout ({}); nothing was pruned. Raise spec.timeout if the set is large or slow to apply",
            scope.parent,
            if dry_run { "the plan" } else { "the apply" },
            spec.timeout
        );
        Stop::from(Report::failed(Reason::ApplyFailed, msg).attempted(&desired.set.revision))
    })?;
    Ok(results?)
}

/// Step 4, prune, only after every member applied (see [`prune::decide`] for the listing a
/// decision is made on); a prune that cannot be decided or does not finish stops the
/// reconcile with PruneFailed (the parent keeps its superset).
/// `applied`: the apply's results, for the summary of a stop.
async fn prune_members<P: Parent>(
    ctx: &Context,
    obj: &P,
    scope: &SetScope,
    desired: &Desired,
    extent: &Extent,
    live: &Live,
    applied: &[MemberResult],
) -> Step<Vec<MemberResult>> {
    if !obj.spec().prune {
        return Ok(Vec::new());
    }
    let t0 = Instant::now();
    let selection = match decide_prune(ctx, scope, desired, extent, live, applied, true).await {
        Ok(selection) => selection,
        Err(e) => {
            // Every member applied: a prune that cannot be decided is a prune failure.
            let missing = match e {
                Error::Forbidden { .. } => missing_service_account(ctx, scope).await,
                _ => String::new(),
            };
            let msg = format!(
                "{}: {missing}{e}; nothing was pruned, the parent keeps recording every kind",
                scope.parent
            );
            let r = Report::failed(Reason::PruneFailed, msg).attempted(&desired.set.revision);
            let summary = Some(tally(applied));
            report::announce_changes(ctx, obj, applied).await;
            return Err(Report { summary, ..r }.into());
        }
    };
    let results = prune::prune(scope, selection).await;
    tracing::debug!(ms = t0.elapsed().as_millis(), "pruned");
    let parent = scope.parent.to_string();
    if let Some(r) = report::prune_failure(&parent, &results, &desired.set.revision) {
        let all: Vec<MemberResult> = applied.iter().chain(&results).cloned().collect();
        let summary = Some(tally(&all));
        report::announce_changes(ctx, obj, &all).await;
        return Err(Report { summary, ..r }.into());
    }
    Ok(results)
}

/// Step 5, parent shrink after a complete prune: the parent records exactly the declared
/// set (and drops the deprecated `contains-group-resources`).
async fn shrink<P: Parent>(ctx: &Context, stored: &P, extent: &Extent) -> Step<()> {
    parent::write(&ctx.client, stored, &extent.declared, true).await?;
    Ok(())
}

/// What to prune, keeping the declared members and what `applied` just wrote (see
/// [`prune::decide`] for `fresh`).
async fn decide_prune(
    ctx: &Context,
    scope: &SetScope,
    desired: &Desired,
    extent: &Extent,
    live: &Live,
    applied: &[MemberResult],
    fresh: bool,
) -> Result<prune::Selection> {
    let keep = Keep::new(&desired.known, &desired.declared, applied);
    prune::decide(scope, &ctx.resolver, extent, &keep, live, fresh).await
}

/// Step 6, the report of a complete reconcile.
fn succeeded(
    ctx: &Context,
    scope: &SetScope,
    desired: &Desired,
    results: &[MemberResult],
) -> Report {
    let summary = tally(results);
    ctx.metrics
        .set_members(&scope.parent.to_string(), summary.members);
    let members = desired
        .set
        .members
        .iter()
        .map(|m| m.reference.clone())
        .collect();
    report::succeeded(summary, members, &desired.set.revision)
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
    checks: Vec<CheckTarget>,
    done: Report,
) -> Step<Report> {
    let spec = obj.spec();
    if !spec.wait && spec.health_checks.is_empty() {
        ctx.members.untrack(&scope.id);
        ctx.health.forget(&scope.id);
        super::healthy::clear(ctx, &scope.parent, obj.status()).await;
        return Ok(done);
    }
    let members = match spec.wait {
        true => desired
            .set
            .members
            .iter()
            .map(|m| m.reference.clone())
            .collect(),
        false => Vec::new(),
    };
    ctx.health
        .seed(&scope.id, obj.status(), obj.meta().generation);
    ctx.members
        .track(&scope.id, &scope.parent, Targets { members, checks });
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
            .decide(&scope.id, key, health.status(), spec.timeout())
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

/// How long a reconcile waits for its objects to be observed by the watches (a kind whose
/// watch has just started lists first; a version just applied arrives a moment after the
/// apply's answer) before deciding on what it has.
const SETTLE: Duration = Duration::from_secs(3);

/// How often a set waiting for members the operator cannot watch reads them again.
const POLL_UNWATCHED: Duration = Duration::from_secs(10);

/// The set's health once its objects are observed (waiting at most [`SETTLE`] for the
/// watches); members of kinds whose watch has not listed by then (the operator may not watch
/// them cluster-wide: a namespaced install) are read with GETs as the set's identity, and
/// `true` says so (they are read again while the set waits). `None`: not tracked.
async fn observed_health(
    ctx: &Context,
    scope: &SetScope,
    desired: &Desired,
) -> Option<(crate::members::SetHealth, bool)> {
    let deadline = tokio::time::Instant::now() + SETTLE;
    let mut changes = ctx.members.changes();
    let mut health = ctx.members.health(&scope.id)?;
    while health.unobserved > 0 {
        match tokio::time::timeout_at(deadline, changes.changed()).await {
            Ok(Ok(())) => health = ctx.members.health(&scope.id)?,
            _ => break,
        }
    }
    // Read afresh every time (what an earlier reconcile read is stale by now).
    let unwatched = ctx.members.unwatched(&scope.id);
    if unwatched.is_empty() {
        return Some((health, false));
    }
    let targets: Vec<(MemberRef, kube::discovery::ApiResource)> = desired
        .set
        .members
        .iter()
        .filter(|m| unwatched.contains(&m.reference))
        .map(|m| (m.reference.clone(), m.resource.clone()))
        .collect();
    let fetched = read_healths(scope.client.clone(), targets, scope.concurrency).await;
    ctx.members.fetched(&scope.id, fetched);
    Some((ctx.members.health(&scope.id)?, true))
}

/// The health of each member read with a GET by `client` (the set's identity), `concurrency`
/// at a time.
async fn read_healths(
    client: kube::Client,
    targets: Vec<(MemberRef, kube::discovery::ApiResource)>,
    concurrency: usize,
) -> Vec<(MemberRef, crate::health::Health)> {
    use crate::health::{Health, Status};
    use futures::StreamExt;
    futures::stream::iter(targets)
        .map(move |(r, resource)| {
            let api: Api<kube::core::DynamicObject> = match &r.namespace {
                Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
                None => Api::all_with(client.clone(), &resource),
            };
            async move {
                let h = match api.get_opt(&r.name).await {
                    Ok(Some(o)) => crate::members::assess(&o, &r.group, &r.kind),
                    Ok(None) => Health::not_found(),
                    Err(e) => Health::new(Status::Unknown, format!("cannot be read: {e}")),
                };
                (r, h)
            }
        })
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await
}

/// Step 1b, the objects of spec.healthChecks, resolved before anything is written: each kind
/// served, each object within the set's scope (as a member would be) and readable by the
/// set's identity — otherwise ValidationFailed, naming the entry, and the set's health is no
/// longer kept. A failure of the API itself is retried (ApplyFailed).
async fn health_checks(
    ctx: &Context,
    scope: &SetScope,
    spec: &ApplySetSpec,
) -> Step<Vec<CheckTarget>> {
    let resolved = resolve_checks(ctx, scope, spec).await;
    if let Err(Stop::Report(_)) = &resolved {
        ctx.members.untrack(&scope.id);
        ctx.health.forget(&scope.id);
    }
    resolved
}

/// Most entries spec.healthChecks may have (the CRD says so too).
const MAX_HEALTH_CHECKS: usize = 64;

async fn resolve_checks(
    ctx: &Context,
    scope: &SetScope,
    spec: &ApplySetSpec,
) -> Step<Vec<CheckTarget>> {
    let parent = &scope.parent;
    if spec.health_checks.is_empty() {
        return Ok(Vec::new());
    }
    if spec.health_checks.len() > MAX_HEALTH_CHECKS {
        let msg = format!(
            "{parent}: spec.healthChecks has {} entries, more than the {MAX_HEALTH_CHECKS} allowed",
            spec.health_checks.len()
        );
        return Err(Report::failed(Reason::ValidationFailed, msg).into());
    }
    let invalid = |i: usize, why: String| {
        Stop::from(Report {
            retry: true,
            ..Report::failed(
                Reason::ValidationFailed,
                format!("{parent}: spec.healthChecks[{i}]: {why}"),
            )
        })
    };
    let gvks: Vec<(String, String, String)> = spec
        .health_checks
        .iter()
        .map(|c| {
            let (group, version) = match c.api_version.split_once('/') {
                Some((g, v)) => (g.to_string(), v.to_string()),
                None => (String::new(), c.api_version.clone()),
            };
            (group, version, c.kind.clone())
        })
        .collect();
    let resolved = ctx.resolver.resolve_all(&gvks).await?;
    let mut targets = Vec::with_capacity(gvks.len());
    for (i, (c, gvk)) in spec.health_checks.iter().zip(&gvks).enumerate() {
        let Some(r) = resolved.get(gvk) else {
            let why = format!("{} {} is not served by the cluster", c.api_version, c.kind);
            return Err(invalid(i, why));
        };
        let namespace = match (r.namespaced, &c.namespace, &parent.namespace) {
            (false, _, _) => None,
            (true, Some(ns), _) | (true, None, Some(ns)) => Some(ns.clone()),
            (true, None, None) => {
                let why = format!("{} is namespaced: name its namespace", c.kind);
                return Err(invalid(i, why));
            }
        };
        let reference = MemberRef {
            group: gvk.0.clone(),
            kind: c.kind.clone(),
            namespace,
            name: c.name.clone(),
        };
        tenancy::check_scope(
            parent,
            &scope.identity,
            &ctx.config.tenancy,
            [(&reference, r.namespaced)],
        )
        .map_err(|e| invalid(i, e))?;
        if let Some(why) = readable(scope, &reference, &r.resource).await? {
            return Err(invalid(i, why));
        }
        targets.push(CheckTarget {
            reference,
            resource: r.resource.clone(),
        });
    }
    Ok(targets)
}

/// Why the set's identity may not get `reference` (its health is the set's to know only if
/// it may), if so. An object that does not exist is readable (it is reported NotFound).
async fn readable(
    scope: &SetScope,
    reference: &MemberRef,
    resource: &kube::discovery::ApiResource,
) -> Step<Option<String>> {
    let api: Api<kube::core::DynamicObject> = match &reference.namespace {
        Some(ns) => Api::namespaced_with(scope.client.clone(), ns, resource),
        None => Api::all_with(scope.client.clone(), resource),
    };
    match api.get_metadata_opt(&reference.name).await {
        Ok(_) => Ok(None),
        Err(kube::Error::Api(s)) if s.code == 403 => Ok(Some(format!(
            "{} may not get {reference}; grant it get on {} or remove the check",
            scope.identity, resource.plural
        ))),
        Err(e) => Err(e.into()),
    }
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

    #[test]
    fn render_failures_are_stalled_except_unknown_kinds() {
        let unknown = RenderError::UnknownKind {
            origin: crate::manifest::Origin::inline(0),
            api_version: "example.com/v1".into(),
            kind: "Widget".into(),
            name: "w".into(),
        };
        let r = render_failure(unknown);
        assert_eq!(r.reason, Reason::ValidationFailed);
        assert!(r.retry);
        assert_eq!(report::next(&r), report::Next::Backoff);
    }
}

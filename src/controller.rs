//! The reconcile loop: SPEC §4 in order — render, parent superset, staged apply, prune,
//! parent shrink, status and events — over both parent kinds.

use std::{
    collections::{BTreeSet, HashMap},
    hash::{DefaultHasher, Hash, Hasher},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::{
    Api, Client, ResourceExt,
    api::{PartialObjectMeta, Patch, PatchParams},
    runtime::{
        Controller, WatchStreamExt,
        controller::{self, Action},
        events::{Event as KubeEvent, EventType, Recorder, Reporter},
        finalizer::{Event as Finalizer, finalizer},
        reflector,
        reflector::ObjectRef,
        watcher,
    },
};
use serde_json::json;
use tokio::{
    sync::{Semaphore, watch},
    task::JoinHandle,
};

use crate::{
    Error, Result,
    api::{
        ApplySet, ApplySetStatus, ClusterApplySet, DeletionPolicy, MemberRef, Mode, Plan, Summary,
    },
    apply::{self, LiveObject, Outcome},
    applyset::{self, ANNOTATION_TOOLING, FINALIZER, GroupKind, LABEL_ID},
    discovery::Resolver,
    members::MemberWatches,
    metrics::Metrics,
    parent::{self, Parent, Recorded},
    prune::{self, Deleted},
    render::{self, RenderError},
    sources::{self, ObjectKey, ObjectKind, SourceError, Sources},
    status::{self, Reason},
};

/// The field manager of status writes.
pub const STATUS_FIELD_MANAGER: &str = "applyset.dev/status";
/// A reconcile running longer than this marks the parent Reconciling in status.
const PROGRESS_AFTER: Duration = Duration::from_secs(1);
/// status.members and the plan lists are capped at this many entries.
pub const MAX_LISTED: usize = 500;

/// How the operator runs.
#[derive(Clone, Debug)]
pub struct Config {
    /// Parents reconciled at once.
    pub concurrency: u16,
    /// Member writes (applies and deletes) in flight, across all parents at once: one large
    /// set may use them all, many small ones share them.
    pub apply_concurrency: usize,
    /// Only ApplySets in this namespace (ClusterApplySets are always watched).
    pub watch_namespace: Option<String>,
    /// Only parents (both kinds) whose labels match this selector.
    pub label_selector: Option<String>,
    /// Bounds on what sources may download and unpack.
    pub source_limits: sources::Limits,
    /// Scratch directory of the sources (default: the system's temporary directory).
    pub source_dir: Option<std::path::PathBuf>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            concurrency: 8,
            apply_concurrency: 64,
            watch_namespace: None,
            label_selector: None,
            source_limits: sources::Limits::default(),
            source_dir: None,
        }
    }
}

/// Shared by every reconcile.
pub struct Context {
    pub client: Client,
    pub resolver: Resolver,
    pub members: Arc<MemberWatches>,
    pub metrics: Arc<Metrics>,
    pub recorder: Recorder,
    pub config: Config,
    /// Source fetching: HTTP client, content cache, index of referenced ConfigMaps/Secrets.
    pub sources: Sources,
    /// Permits for member writes in flight ([`Config::apply_concurrency`]).
    pub writes: Arc<Semaphore>,
    failures: Mutex<HashMap<String, u32>>,
}

impl Context {
    pub fn new(
        client: Client,
        config: Config,
        metrics: Arc<Metrics>,
        members: Arc<MemberWatches>,
    ) -> Self {
        let reporter = Reporter {
            controller: "applyset-operator".into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        Self {
            sources: Sources::new(config.source_limits.clone(), config.source_dir.clone()),
            resolver: Resolver::new(client.clone()),
            writes: Arc::new(Semaphore::new(config.apply_concurrency.max(1))),
            members,
            recorder: Recorder::new(client.clone(), reporter),
            client,
            metrics,
            config,
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// The delay before retrying a failed parent: `retry` doubled per consecutive failure,
    /// at most `cap`.
    fn backoff(&self, key: &str, retry: Duration, cap: Duration) -> Duration {
        let n = self
            .failures
            .lock()
            .map(|mut f| {
                let n = f.entry(key.to_string()).or_insert(0);
                *n = n.saturating_add(1);
                *n
            })
            .unwrap_or(1);
        let factor = 2u32.saturating_pow(n.saturating_sub(1).min(16));
        retry.saturating_mul(factor).min(cap.max(retry))
    }

    fn succeeded(&self, key: &str) {
        if let Ok(mut f) = self.failures.lock() {
            f.remove(key);
        }
    }
}

/// Whether the caches (reflector stores) of both controllers have synced.
#[derive(Default)]
pub struct Readiness {
    applysets: std::sync::atomic::AtomicBool,
    cluster_applysets: std::sync::atomic::AtomicBool,
}

impl Readiness {
    fn mark(&self, kind: applyset::ParentKind) {
        use std::sync::atomic::Ordering::SeqCst;
        match kind {
            applyset::ParentKind::ApplySet => self.applysets.store(true, SeqCst),
            applyset::ParentKind::ClusterApplySet => self.cluster_applysets.store(true, SeqCst),
        }
    }

    fn is_synced(&self, kind: applyset::ParentKind) -> bool {
        use std::sync::atomic::Ordering::SeqCst;
        match kind {
            applyset::ParentKind::ApplySet => self.applysets.load(SeqCst),
            applyset::ParentKind::ClusterApplySet => self.cluster_applysets.load(SeqCst),
        }
    }

    /// `None` when both caches synced, else which kinds are still listing.
    pub fn waiting_for(&self) -> Option<String> {
        use std::sync::atomic::Ordering::SeqCst;
        let mut waiting = Vec::new();
        if !self.applysets.load(SeqCst) {
            waiting.push("applysets.applyset.dev");
        }
        if !self.cluster_applysets.load(SeqCst) {
            waiting.push("clusterapplysets.applyset.dev");
        }
        (!waiting.is_empty()).then(|| waiting.join(", "))
    }
}

/// A running operator (both controllers).
pub struct Operator {
    metrics: Arc<Metrics>,
    readiness: Arc<Readiness>,
    members: Arc<MemberWatches>,
    shutdown: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl Operator {
    /// Starts the controllers for ApplySet and ClusterApplySet on the current runtime.
    pub fn start(client: Client, config: Config) -> Operator {
        let metrics = Arc::new(Metrics::new());
        Self::start_with(client, config, metrics)
    }

    pub fn start_with(client: Client, config: Config, metrics: Arc<Metrics>) -> Operator {
        let (tx, rx) = watch::channel(false);
        let (members, triggers) = MemberWatches::new(client.clone());
        let ctx = Arc::new(Context::new(
            client,
            config,
            metrics.clone(),
            members.clone(),
        ));
        let readiness = Arc::new(Readiness::default());
        let ready = readiness.clone();
        let stop_watches = members.clone();
        let task = tokio::spawn(async move {
            tokio::join!(
                run_controller::<ApplySet>(
                    ctx.clone(),
                    rx.clone(),
                    ready.clone(),
                    triggers.applysets
                ),
                run_controller::<ClusterApplySet>(
                    ctx.clone(),
                    rx.clone(),
                    ready.clone(),
                    triggers.cluster_applysets
                )
            );
            stop_watches.stop();
        });
        Operator {
            metrics,
            readiness,
            members,
            shutdown: tx,
            task,
        }
    }

    pub fn metrics(&self) -> Arc<Metrics> {
        self.metrics.clone()
    }

    /// Whether the controllers' caches have synced (for `/readyz`).
    pub fn readiness(&self) -> Arc<Readiness> {
        self.readiness.clone()
    }

    /// Stops taking new work, lets in-flight reconciles finish, and returns.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        let _ = self.task.await;
    }

    /// Stops at once: in-flight reconciles end at their next await point (like SIGKILL).
    pub fn abort(self) {
        self.task.abort();
        self.members.stop();
    }

    /// Resolves when the controllers have ended by themselves (they only do on a fatal
    /// error); does not consume the operator, so it can be raced against a shutdown signal.
    pub async fn finished(&mut self) {
        let _ = (&mut self.task).await;
    }
}

/// What triggers a reconcile: spec changes (generation), deletion, a new
/// `applyset.dev/reconcile-requested-at`, and whether the parent passes the ownership checks
/// (so removing a wrong id label repairs it at once) — not status writes, and not the
/// operator's own metadata writes (labels, annotations, the finalizer it adds on the way).
fn trigger_hash<P: Parent>(obj: &P) -> Option<u64> {
    let meta = obj.meta();
    let mut h = DefaultHasher::new();
    meta.generation.hash(&mut h);
    meta.deletion_timestamp.is_some().hash(&mut h);
    parent::check_ownership(meta, &obj.parent_ref())
        .is_ok()
        .hash(&mut h);
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(applyset::ANNOTATION_RECONCILE_REQUESTED_AT))
        .hash(&mut h);
    Some(h.finish())
}

async fn run_controller<P: Parent>(
    ctx: Arc<Context>,
    mut shutdown: watch::Receiver<bool>,
    ready: Arc<Readiness>,
    drift: futures::channel::mpsc::UnboundedReceiver<kube::runtime::reflector::ObjectRef<P>>,
) {
    let api = P::api(ctx.client.clone(), ctx.config.watch_namespace.as_deref());
    let mut wc = watcher::Config::default().any_semantic();
    if let Some(sel) = &ctx.config.label_selector {
        wc = wc.labels(sel);
    }
    let (reader, writer) = reflector::store();
    let synced = {
        let reader = reader.clone();
        let ready = ready.clone();
        async move {
            if reader.wait_until_ready().await.is_ok() {
                ready.mark(P::KIND);
                tracing::info!(kind = P::KIND.kind(), "cache synced");
            }
        }
    };
    let stream = watcher(api, wc)
        .default_backoff()
        .modify(|o: &mut P| o.managed_fields_mut().clear())
        .reflect(writer)
        .applied_objects()
        .predicate_filter(trigger_hash::<P>, Default::default());
    let mut shutdown_unsynced = shutdown.clone();
    let stop = async move {
        let _ = shutdown.wait_for(|s| *s).await;
    };
    let controller = Controller::for_stream(stream, reader)
        .reconcile_on(drift)
        .watches_stream(
            referenced_watch::<ConfigMap>(&ctx),
            referenced_mapper::<P, ConfigMap>(ctx.clone(), ObjectKind::ConfigMap),
        )
        .watches_stream(
            referenced_watch::<Secret>(&ctx),
            referenced_mapper::<P, Secret>(ctx.clone(), ObjectKind::Secret),
        )
        .with_config(controller::Config::default().concurrency(ctx.config.concurrency))
        .graceful_shutdown_on(stop)
        .run(reconcile::<P>, error_policy::<P>, ctx)
        .for_each(|r| async move {
            if let Err(e) = r {
                match e {
                    controller::Error::ObjectNotFound(_) => {}
                    e => tracing::warn!(error = %e, "controller"),
                }
            }
        });
    // The sync watcher ends with the controller (it never outlives it). A shutdown before
    // the cache synced ends the controller at once: kube-runtime does not reconcile before
    // its store is ready (so nothing is in flight), and its graceful shutdown would wait for
    // a store that can no longer fill.
    let unsynced_shutdown = async {
        let _ = shutdown_unsynced.wait_for(|s| *s).await;
        if ready.is_synced(P::KIND) {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        _ = controller => {}
        _ = async { synced.await; std::future::pending::<()>().await } => {}
        _ = unsynced_shutdown => tracing::info!(kind = P::KIND.kind(), "stopped before the cache synced"),
    }
}

/// A metadata-only watch of ConfigMaps or Secrets (in the watch namespace, if any): their
/// changes reconcile the parents that reference them (sources and secretRefs). Only
/// referenced objects trigger anything (see [`referenced_mapper`]); nothing is cached.
fn referenced_watch<K>(
    ctx: &Context,
) -> impl futures::Stream<Item = Result<PartialObjectMeta<K>, watcher::Error>> + Send + 'static
where
    K: kube::Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let api: Api<PartialObjectMeta<K>> = match &ctx.config.watch_namespace {
        Some(ns) => Api::namespaced(ctx.client.clone(), ns),
        None => Api::all(ctx.client.clone()),
    };
    watcher(api, watcher::Config::default().any_semantic())
        .default_backoff()
        .touched_objects()
}

/// Maps a changed ConfigMap / Secret to the parents of kind `P` that reference it.
fn referenced_mapper<P: Parent, K>(
    ctx: Arc<Context>,
    kind: ObjectKind,
) -> impl Fn(PartialObjectMeta<K>) -> Vec<ObjectRef<P>> + Send + Sync + 'static
where
    K: kube::Resource<DynamicType = ()> + Send + Sync + 'static,
{
    move |obj: PartialObjectMeta<K>| {
        if ctx.sources.index.is_empty() {
            return Vec::new();
        }
        let key = ObjectKey {
            kind,
            namespace: obj.namespace().unwrap_or_default(),
            name: obj.name_any(),
        };
        ctx.sources
            .index
            .parents_of(&key, P::KIND)
            .into_iter()
            .map(|p| {
                let r = ObjectRef::<P>::new(&p.name);
                match p.namespace {
                    Some(ns) => r.within(&ns),
                    None => r,
                }
            })
            .collect()
    }
}

fn key_of<P: Parent>(obj: &P) -> String {
    obj.parent_ref().to_string()
}

async fn reconcile<P: Parent>(obj: Arc<P>, ctx: Arc<Context>) -> Result<Action> {
    use futures::FutureExt;
    let started = Instant::now();
    // A panic must not take both controllers down with it: it becomes this parent's error.
    let result = std::panic::AssertUnwindSafe(reconcile_parent(obj.clone(), &ctx))
        .catch_unwind()
        .await
        .unwrap_or_else(|panic| {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            Err(Error::Panic(what))
        });
    let label = match &result {
        Ok(_) => "success",
        Err(e) => e.metric_label(),
    };
    ctx.metrics
        .reconciled(P::KIND.kind(), label, started.elapsed());
    tracing::info!(parent = %obj.parent_ref(), took_ms = started.elapsed().as_millis() as u64, result = label, "reconciled");
    result
}

fn error_policy<P: Parent>(obj: Arc<P>, error: &Error, ctx: Arc<Context>) -> Action {
    tracing::warn!(parent = %obj.parent_ref(), error = %error, "reconcile failed");
    let spec = obj.spec();
    Action::requeue(ctx.backoff(&key_of(&*obj), spec.retry_interval(), spec.interval()))
}

async fn reconcile_parent<P: Parent>(obj: Arc<P>, ctx: &Context) -> Result<Action> {
    let parent = obj.parent_ref();
    // A parent that is not ours is not touched at all: no finalizer, no metadata.
    if obj.meta().deletion_timestamp.is_none()
        && let Err(e) = parent::check_ownership(obj.meta(), &parent)
    {
        let msg = format!("{parent}: {e}");
        return report(ctx, &*obj, Report::failed(Reason::OwnershipConflict, msg)).await;
    }
    // Not being deleted: apply. The finalizer is not added on its own first (and the
    // reconcile ended, as `kube::runtime::finalizer` does): it goes with the parent's ApplySet
    // metadata (`parent::write`), which precedes any member write, so a new parent is applied
    // in its first reconcile.
    if obj.meta().deletion_timestamp.is_none() {
        return apply_parent(obj, ctx).await;
    }
    // Being deleted: the cleanup, if our finalizer is there; then the finalizer goes.
    let api = P::api(ctx.client.clone(), parent.namespace.as_deref());
    finalizer(&api, FINALIZER, obj, |event| async {
        match event {
            Finalizer::Apply(obj) => apply_parent(obj, ctx).await,
            Finalizer::Cleanup(obj) => cleanup(obj, ctx).await,
        }
    })
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)))
}

/// The outcome of one reconcile, as reported in status.
struct Report {
    ready: bool,
    reason: Reason,
    message: String,
    summary: Option<Summary>,
    members: Option<Vec<MemberRef>>,
    plan: Option<Plan>,
    attempted: Option<String>,
    applied: Option<String>,
    /// Retry with backoff even if the reason is a stalled one (something the operator does
    /// not watch may fix it, e.g. a CRD installed by someone else).
    retry: bool,
}

impl Report {
    fn failed(reason: Reason, message: String) -> Self {
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
        }
    }
}

/// Writes status (only when it changed), publishes an event when the outcome changed, and
/// returns when to look again.
async fn report<P: Parent>(ctx: &Context, obj: &P, r: Report) -> Result<Action> {
    let previous = obj.status().cloned().unwrap_or_default();
    let generation = obj.meta().generation;
    let mut next = previous.clone();
    next.observed_generation = generation;
    next.applyset_id = Some(obj.parent_ref().id());
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
    next.last_error = if r.ready || r.reason == Reason::PlanReady || r.reason == Reason::Suspended {
        None
    } else {
        Some(status::truncate(&r.message, 1024))
    };
    write_status(ctx, obj, &previous, next).await?;

    let key = key_of(obj);
    let spec = obj.spec();
    if r.ready || r.reason == Reason::PlanReady {
        ctx.succeeded(&key);
        Ok(Action::requeue(spec.interval()))
    } else if r.reason == Reason::Suspended {
        ctx.succeeded(&key);
        Ok(Action::await_change())
    } else if r.reason.is_stalled() && !r.retry {
        // Only a change fixes it (which triggers a reconcile); still look at the interval.
        Ok(Action::requeue(spec.interval()))
    } else {
        Ok(Action::requeue(ctx.backoff(
            &key,
            spec.retry_interval(),
            spec.interval(),
        )))
    }
}

async fn write_status<P: Parent>(
    ctx: &Context,
    obj: &P,
    previous: &ApplySetStatus,
    next: ApplySetStatus,
) -> Result<()> {
    if *previous == next {
        return Ok(());
    }
    let old_ready = previous
        .conditions
        .iter()
        .find(|c| c.type_ == status::READY);
    let new_ready = next.conditions.iter().find(|c| c.type_ == status::READY);
    let changed_outcome = match (old_ready, new_ready) {
        (Some(o), Some(n)) => o.status != n.status || o.reason != n.reason,
        _ => true,
    };
    let parent = obj.parent_ref();
    let name = obj.meta().name.clone().ok_or(Error::Unnamed("parent"))?;
    let body = json!({"apiVersion": P::api_version(&()), "kind": P::kind(&()), "status": next});
    P::api(ctx.client.clone(), parent.namespace.as_deref())
        .patch_status(
            &name,
            &PatchParams::apply(STATUS_FIELD_MANAGER).force(),
            &Patch::Apply(body),
        )
        .await?;
    if changed_outcome && let Some(c) = new_ready {
        let event = KubeEvent {
            type_: if c.status == "True" || c.reason == Reason::PlanReady.as_str() {
                EventType::Normal
            } else {
                EventType::Warning
            },
            reason: c.reason.clone(),
            note: Some(status::truncate(&c.message, 1000)),
            action: "Reconcile".into(),
            secondary: None,
        };
        if let Err(e) = ctx.recorder.publish(&event, &obj.object_ref(&())).await {
            tracing::debug!(error = %e, "publishing an event failed");
        }
    }
    Ok(())
}

/// Marks a new generation as in progress (visible while a long apply runs).
async fn mark_progressing<P: Parent>(ctx: &Context, obj: &P) -> Result<()> {
    let previous = obj.status().cloned().unwrap_or_default();
    if previous.observed_generation == obj.meta().generation
        && previous.conditions.iter().any(|c| c.type_ == status::READY)
    {
        return Ok(());
    }
    let mut next = previous.clone();
    let (ready, reason, message) = previous
        .conditions
        .iter()
        .find(|c| c.type_ == status::READY)
        .map(|c| (c.status == "True", c.reason.clone(), c.message.clone()))
        .unwrap_or((
            false,
            Reason::Progressing.as_str().into(),
            "reconciling".into(),
        ));
    let generation = obj.meta().generation;
    status::set(
        &mut next.conditions,
        status::READY,
        ready,
        &reason,
        &message,
        previous.observed_generation,
    );
    status::set(
        &mut next.conditions,
        status::RECONCILING,
        true,
        Reason::Progressing.as_str(),
        &format!("reconciling generation {}", generation.unwrap_or_default()),
        generation,
    );
    next.applyset_id = Some(obj.parent_ref().id());
    if next == previous {
        return Ok(());
    }
    let name = obj.meta().name.clone().ok_or(Error::Unnamed("parent"))?;
    let body = json!({"apiVersion": P::api_version(&()), "kind": P::kind(&()), "status": next});
    P::api(ctx.client.clone(), obj.parent_ref().namespace.as_deref())
        .patch_status(
            &name,
            &PatchParams::apply(STATUS_FIELD_MANAGER).force(),
            &Patch::Apply(body),
        )
        .await?;
    Ok(())
}

fn render_reason(e: &RenderError) -> Reason {
    match e {
        RenderError::Ownership(_) => Reason::OwnershipConflict,
        _ => Reason::ValidationFailed,
    }
}

/// Apply, with failures of the API itself (not of what was declared) reported in status as
/// ApplyFailed and retried with backoff.
async fn apply_parent<P: Parent>(obj: Arc<P>, ctx: &Context) -> Result<Action> {
    match apply_declared(obj.clone(), ctx).await {
        Ok(action) => Ok(action),
        Err(e) => {
            let msg = format!("{}: {e}; retrying", obj.parent_ref());
            tracing::warn!(parent = %obj.parent_ref(), error = %e, "reconcile failed");
            report(ctx, &*obj, Report::failed(Reason::ApplyFailed, msg)).await
        }
    }
}

async fn apply_declared<P: Parent>(obj: Arc<P>, ctx: &Context) -> Result<Action> {
    let spec = obj.spec();
    if spec.suspend {
        return report(
            ctx,
            &*obj,
            Report::failed(
                Reason::Suspended,
                "reconciliation is suspended (spec.suspend)".into(),
            ),
        )
        .await;
    }
    // A reconcile still running after PROGRESS_AFTER says so in status (Reconciling=True);
    // a quicker one goes straight to its outcome, sparing a write of a possibly large
    // object. A mark that has started is finished before the outcome is written, so the
    // outcome is always the last word.
    let work = decide(&obj, ctx);
    tokio::pin!(work);
    let decided = tokio::select! {
        decided = &mut work => decided,
        () = tokio::time::sleep(PROGRESS_AFTER) => {
            let (marked, decided) = tokio::join!(mark_progressing(ctx, &*obj), &mut work);
            marked?;
            decided
        }
    };
    report(ctx, &*obj, decided?).await
}

/// Steps 1 to 5 of the reconcile: what to report.
async fn decide<P: Parent>(obj: &Arc<P>, ctx: &Context) -> Result<Report> {
    let t0 = Instant::now();
    let spec = obj.spec();
    let parent = obj.parent_ref();

    // 1. Render and validate: inline manifests, then every source. The referenced
    // ConfigMaps and Secrets are indexed first, so that creating a missing one triggers us.
    ctx.sources
        .index
        .set(&parent, Sources::references(&parent, spec));
    if let Err(msg) = sources::validate(&parent, spec) {
        let msg = format!("{parent}: {msg}");
        return Ok(Report::failed(Reason::ValidationFailed, msg));
    }
    let mut manifests = match render::inline_manifests(spec) {
        Ok(m) => m,
        Err(e) => {
            return Ok(Report::failed(Reason::ValidationFailed, e.to_string()));
        }
    };
    let fetched = match ctx.sources.fetch_all(&ctx.client, &parent, spec).await {
        Ok(f) => f,
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
            tracing::info!(parent = %parent, reason = %reason, message = %msg, "source not usable");
            return Ok(Report::failed(reason, msg));
        }
    };
    for f in &fetched {
        let result = if f.downloaded { "downloaded" } else { "cached" };
        ctx.metrics.source_fetched(f.kind, result);
        manifests.extend(f.manifests.iter().cloned());
    }
    let mut desired = match render::render(&parent, spec, manifests, &ctx.resolver).await? {
        Ok(d) => d,
        Err(e) => {
            // A kind nobody serves yet may be installed by someone else (a CRD of another
            // set): look again with backoff rather than only at the interval.
            let retry = matches!(e, RenderError::UnknownKind { .. });
            let r = Report {
                retry,
                ..Report::failed(render_reason(&e), e.to_string())
            };
            return Ok(r);
        }
    };
    desired.revision = sources::combined_revision(&desired.revision, &fetched);
    tracing::debug!(parent = %parent, ms = t0.elapsed().as_millis(), "rendered");
    let recorded_before = match parent::recorded(obj.meta(), &ctx.resolver).await? {
        Ok(r) => r,
        Err(e) => {
            let msg = format!(
                "{parent}: its ApplySet annotations are malformed ({e}); fix or remove them"
            );
            return Ok(Report::failed(Reason::ValidationFailed, msg));
        }
    };
    // The empty-set guard: an empty set would prune everything recorded. (An empty set with
    // nothing recorded, or with prune off, deletes nothing and is allowed.)
    if desired.members.is_empty()
        && !spec.allow_empty
        && spec.prune
        && !recorded_before.group_kinds.is_empty()
    {
        let msg = format!(
            "{parent}: the desired set is empty; refusing to prune every member. Set spec.allowEmpty: true to allow it"
        );
        return Ok(Report {
            attempted: Some(desired.revision),
            ..Report::failed(Reason::EmptySetRefused, msg)
        });
    }
    let new_set = Recorded {
        group_kinds: desired.group_kinds(),
        namespaces: desired.namespaces(),
    };
    let listed_kinds: BTreeSet<GroupKind> = recorded_before
        .group_kinds
        .union(&new_set.group_kinds)
        .cloned()
        .collect();
    let listed_namespaces = applyset::prune_namespaces(
        parent.namespace.as_deref(),
        &recorded_before
            .namespaces
            .union(&new_set.namespaces)
            .cloned()
            .collect(),
    );
    let known = desired.resolutions();
    let declared = desired.declared();
    ctx.members.ensure_watched(&known);
    ctx.members
        .register(&parent, &declared.keys().cloned().collect());
    // Prune candidates come only from what was recorded before this reconcile.
    let prune_namespaces =
        applyset::prune_namespaces(parent.namespace.as_deref(), &recorded_before.namespaces);
    let id = parent.id();
    let manager = parent.member_field_manager();
    let conc = ctx.config.apply_concurrency;
    let now = Instant::now();
    let deadline = now.checked_add(spec.timeout()).unwrap_or(now);
    let started = k8s_openapi::jiff::Timestamp::now().as_second();

    // What of this set is live already: counts the apply's outcomes and gives the prune
    // candidates. The member watches know it when they cover every kind involved; if they do
    // not, it is listed (metadata only). A prune is decided on a LIST made after the apply,
    // never on the watches: they only tell whether there is anything to decide (an object
    // labelled ours that is no longer declared). Reading touches no member.
    let list_for_prune = || {
        prune::list(
            &ctx.client,
            &ctx.resolver,
            &known,
            &recorded_before.group_kinds,
            &prune_namespaces,
            &id,
            conc,
        )
    };
    let (live, existing) = match ctx.members.members_of(&id, &listed_kinds) {
        Some(c) => {
            let undeclared = c.keys().any(|r| !declared.contains_key(r));
            let existing = c
                .into_iter()
                .map(|(r, resource_version)| (r, LiveObject { resource_version }))
                .collect();
            (Live::Watched { undeclared }, existing)
        }
        None => {
            let live = prune::list(
                &ctx.client,
                &ctx.resolver,
                &known,
                &listed_kinds,
                &listed_namespaces,
                &id,
                conc,
            )
            .await?;
            let existing = prune::by_reference(&live);
            (Live::Listed(live), existing)
        }
    };
    tracing::debug!(parent = %parent, listed = matches!(live, Live::Listed(_)), live = existing.len(), ms = t0.elapsed().as_millis(), "listed");
    let opts = apply::Options {
        field_manager: &manager,
        id: &id,
        force: spec.force,
        dry_run: spec.mode == Mode::Plan,
        concurrency: conc,
        existing: &existing,
        started,
        deadline,
        watches: Some(&ctx.members),
        writes: Some(&ctx.writes),
    };

    // Applies (or plans) within spec.timeout; a timeout prunes nothing.
    let apply_in_time = async {
        let remaining = deadline.saturating_duration_since(Instant::now());
        let applying = apply::apply_all(&ctx.client, &desired.members, &opts);
        tokio::time::timeout(remaining, applying).await.map_err(|_| {
            let msg = format!(
                "{parent}: {} did not finish within spec.timeout ({}); nothing was pruned. Raise spec.timeout if the set is large or slow to apply",
                if spec.mode == Mode::Plan { "the plan" } else { "the apply" },
                spec.timeout
            );
            Report {
                attempted: Some(desired.revision.clone()),
                ..Report::failed(Reason::ApplyFailed, msg)
            }
        })
    };

    if spec.mode == Mode::Plan {
        let results = match apply_in_time.await {
            Ok(r) => r,
            Err(r) => return Ok(r),
        };
        if let Some(r) = failure_report(&results, &desired.revision) {
            return Ok(r);
        }
        let mut plan = Plan::default();
        for r in &results {
            match r.outcome {
                Outcome::Created => plan.create.push(r.reference.clone()),
                Outcome::Configured => plan.update.push(r.reference.clone()),
                _ => plan.unchanged += 1,
            }
        }
        if spec.prune {
            let listed = match live {
                Live::Listed(l) => l,
                Live::Watched { undeclared: true } => list_for_prune().await?,
                Live::Watched { undeclared: false } => Vec::new(),
            };
            let sel = prune::select(
                &listed,
                &declared,
                &recorded_before.group_kinds,
                &prune_namespaces,
                &manager,
            );
            plan.prune = sel.delete.iter().map(|m| m.reference.clone()).collect();
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
        let r = Report {
            plan: Some(plan),
            attempted: Some(desired.revision),
            ..Report::failed(Reason::PlanReady, msg)
        };
        return Ok(r);
    }

    // 2. Parent superset, before any member is touched.
    let superset = recorded_before.union(&new_set);
    let mut live_parent = (**obj).clone();
    if parent::write(&ctx.client, &live_parent, &superset, false).await? {
        set_recorded(&mut live_parent, &parent, &superset);
    }

    // 3. Apply, staged and concurrent.
    let results = match apply_in_time.await {
        Ok(r) => r,
        Err(r) => return Ok(r),
    };
    let mut summary = summarize(&results);
    tracing::debug!(parent = %parent, members = results.len(), ms = t0.elapsed().as_millis(), "applied");
    count_applied(ctx, &summary);
    if let Some(r) = failure_report(&results, &desired.revision) {
        return Ok(Report {
            summary: Some(summary),
            ..r
        });
    }

    // 4. Prune, only after every member applied. The decision is made on a listing made
    // now (one from before the apply may be as old as the apply), and each delete is
    // conditional on the object being unchanged since that listing.
    if spec.prune {
        let select = |live: &[prune::LiveMember]| {
            prune::select(
                live,
                &declared,
                &recorded_before.group_kinds,
                &prune_namespaces,
                &manager,
            )
        };
        let sel = match &live {
            Live::Listed(l) => {
                let earlier = select(l);
                if earlier.delete.is_empty() {
                    earlier
                } else {
                    select(&list_for_prune().await?)
                }
            }
            Live::Watched { undeclared: true } => select(&list_for_prune().await?),
            Live::Watched { undeclared: false } => prune::Selection::default(),
        };
        summary.retained = count(sel.retained.len());
        for (m, why) in &sel.retained {
            tracing::info!(parent = %parent, member = %m.reference, reason = ?why, "not pruned");
        }
        let deleted = prune::delete_all(&ctx.client, &sel.delete, conc, Some(&ctx.writes)).await;
        let mut errors = Vec::new();
        let mut changed = Vec::new();
        for (reference, r) in deleted {
            match r {
                Ok(Deleted::Deleted) => {
                    summary.pruned += 1;
                    tracing::info!(parent = %parent, member = %reference, "pruned");
                }
                Ok(Deleted::Gone) => {}
                Ok(Deleted::UidMismatch) => {
                    summary.retained += 1;
                    tracing::info!(parent = %parent, member = %reference, "re-created meanwhile; not pruned");
                }
                Ok(Deleted::Changed) => changed.push(reference.to_string()),
                Err(e) => errors.push(e),
            }
        }
        ctx.metrics
            .pruned(u64::try_from(summary.pruned).unwrap_or_default());
        let attempted = sel.delete.len();
        let unfinished = attempted > 0 && (!errors.is_empty() || !changed.is_empty());
        if unfinished {
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
            let r = Report {
                summary: Some(summary),
                attempted: Some(desired.revision),
                ..Report::failed(Reason::PruneFailed, msg)
            };
            return Ok(r);
        }
        // 5. Parent shrink: exactly the new set.
        parent::write(&ctx.client, &live_parent, &new_set, true).await?;
    }

    // 6. Status.
    tracing::debug!(parent = %parent, ms = t0.elapsed().as_millis(), "pruned");
    ctx.metrics
        .set_members(&parent.to_string(), summary.members);
    let msg = format!(
        "applied {} members ({} created, {} configured, {} unchanged), pruned {}",
        summary.members, summary.created, summary.configured, summary.unchanged, summary.pruned
    );
    let r = Report {
        ready: true,
        reason: Reason::ReconciliationSucceeded,
        message: msg,
        summary: Some(summary),
        members: Some(
            desired
                .members
                .iter()
                .map(|m| m.reference.clone())
                .collect(),
        ),
        plan: None,
        attempted: Some(desired.revision.clone()),
        applied: Some(desired.revision),
        retry: false,
    };
    Ok(r)
}

/// What a reconcile knows of the set's live members before the apply.
enum Live {
    /// Listed (metadata only).
    Listed(Vec<prune::LiveMember>),
    /// From the member watches, which cover every kind involved; `undeclared`: they show an
    /// object labelled with this set that is no longer declared.
    Watched { undeclared: bool },
}

/// What `parent::write` wrote, on our copy of the parent.
fn set_recorded<P: Parent>(obj: &mut P, parent: &applyset::ParentRef, set: &Recorded) {
    let meta = obj.meta_mut();
    let finalizers = meta.finalizers.get_or_insert_with(Default::default);
    if !finalizers.iter().any(|f| f == FINALIZER) {
        finalizers.push(FINALIZER.into());
    }
    meta.labels
        .get_or_insert_with(Default::default)
        .insert(LABEL_ID.into(), parent.id());
    let a = meta.annotations.get_or_insert_with(Default::default);
    a.insert(ANNOTATION_TOOLING.into(), parent::tooling());
    a.insert(
        applyset::ANNOTATION_CONTAINS_GROUP_KINDS.into(),
        applyset::encode_group_kinds(&set.group_kinds),
    );
    a.insert(
        applyset::ANNOTATION_ADDITIONAL_NAMESPACES.into(),
        applyset::encode_namespaces(
            set.namespaces.iter().map(String::as_str),
            parent.namespace.as_deref(),
        ),
    );
}

fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn summarize(results: &[apply::MemberResult]) -> Summary {
    let mut s = Summary {
        members: count(results.len()),
        ..Default::default()
    };
    for r in results {
        match r.outcome {
            Outcome::Created => s.created += 1,
            Outcome::Configured => s.configured += 1,
            Outcome::Unchanged => s.unchanged += 1,
            Outcome::Conflict { .. } => s.conflicts += 1,
            Outcome::Owned { .. } | Outcome::Failed { .. } => s.failed += 1,
        }
    }
    s
}

fn count_applied(ctx: &Context, s: &Summary) {
    let m = &ctx.metrics;
    m.applied("created", u64::try_from(s.created).unwrap_or_default());
    m.applied(
        "configured",
        u64::try_from(s.configured).unwrap_or_default(),
    );
    m.applied("unchanged", u64::try_from(s.unchanged).unwrap_or_default());
    m.applied("conflict", u64::try_from(s.conflicts).unwrap_or_default());
    m.applied("failed", u64::try_from(s.failed).unwrap_or_default());
    m.conflicts(u64::try_from(s.conflicts).unwrap_or_default());
}

/// The report for failed members, if any: ownership first, then conflicts, then failures.
fn failure_report(results: &[apply::MemberResult], revision: &str) -> Option<Report> {
    let mut owned = Vec::new();
    let mut conflicts = Vec::new();
    let mut failed = Vec::new();
    for r in results {
        match &r.outcome {
            Outcome::Owned { message } => owned.push(message.as_str()),
            Outcome::Conflict { message, .. } => conflicts.push(message.as_str()),
            Outcome::Failed { message } => failed.push(message.as_str()),
            _ => {}
        }
    }
    let (reason, list) = if !owned.is_empty() {
        (Reason::OwnershipConflict, owned)
    } else if !conflicts.is_empty() {
        (Reason::Conflict, conflicts)
    } else if !failed.is_empty() {
        (Reason::ApplyFailed, failed)
    } else {
        return None;
    };
    let total = list.len();
    let mut msg = format!(
        "{total} member(s) not applied, nothing pruned: {}",
        list.iter().take(5).copied().collect::<Vec<_>>().join("; ")
    );
    if total > 5 {
        msg.push_str(&format!("; and {} more", total - 5));
    }
    Some(Report {
        attempted: Some(revision.to_string()),
        ..Report::failed(reason, msg)
    })
}

/// Deletion: with `deletionPolicy: Delete` prune every member (same safety rules, reverse
/// order); the finalizer is removed when this returns Ok. A failure keeps the finalizer and
/// is reported in status (setting `deletionPolicy: Orphan` lets the deletion finish).
async fn cleanup<P: Parent>(obj: Arc<P>, ctx: &Context) -> Result<Action> {
    match cleanup_members(obj.clone(), ctx).await {
        Ok(action) => Ok(action),
        Err(e) => {
            let msg = format!(
                "{}: deleting its members failed: {e}. The object stays until this succeeds; set spec.deletionPolicy: Orphan to delete it without its members",
                obj.parent_ref()
            );
            tracing::warn!(parent = %obj.parent_ref(), error = %e, "cleanup failed");
            report(ctx, &*obj, Report::failed(Reason::PruneFailed, msg)).await?;
            Err(e)
        }
    }
}

async fn cleanup_members<P: Parent>(obj: Arc<P>, ctx: &Context) -> Result<Action> {
    let parent = obj.parent_ref();
    ctx.members.forget(&parent.id());
    ctx.sources.index.remove(&parent);
    ctx.metrics.set_members(&parent.to_string(), 0);
    if obj.spec().deletion_policy == DeletionPolicy::Orphan {
        tracing::info!(parent = %parent, "deleted with deletionPolicy Orphan; members left in place");
        return Ok(Action::await_change());
    }
    let recorded = match parent::recorded(obj.meta(), &ctx.resolver).await? {
        Ok(r) => r,
        Err(e) => {
            return Err(Error::Prune(format!(
                "its ApplySet annotations are malformed ({e})"
            )));
        }
    };
    let namespaces = applyset::prune_namespaces(parent.namespace.as_deref(), &recorded.namespaces);
    let id = parent.id();
    let conc = ctx.config.apply_concurrency;
    let live = prune::list(
        &ctx.client,
        &ctx.resolver,
        &HashMap::new(),
        &recorded.group_kinds,
        &namespaces,
        &id,
        conc,
    )
    .await?;
    let sel = prune::select(
        &live,
        &HashMap::new(),
        &recorded.group_kinds,
        &namespaces,
        &parent.member_field_manager(),
    );
    let results = prune::delete_all(&ctx.client, &sel.delete, conc, Some(&ctx.writes)).await;
    let mut pruned = 0u64;
    let mut problems = Vec::new();
    for (reference, r) in results {
        match r {
            Ok(Deleted::Deleted) => pruned += 1,
            Ok(Deleted::Gone | Deleted::UidMismatch) => {}
            Ok(Deleted::Changed) => {
                problems.push(format!("{reference} changed while being deleted"))
            }
            Err(e) => problems.push(e),
        }
    }
    ctx.metrics.pruned(pruned);
    if !problems.is_empty() {
        return Err(Error::Prune(problems.join("; ")));
    }
    tracing::info!(parent = %parent, pruned, retained = sel.retained.len(), "deleted with its members");
    Ok(Action::await_change())
}

//! The controllers: one per parent kind (ApplySet, ClusterApplySet), what triggers a
//! reconcile, and the reconcile's entry point (a span per reconcile, panics contained,
//! deletion through the finalizer). The reconcile itself, docs/design.md §4 as a straight line of
//! steps, is in [`reconcile`]; deletion in [`cleanup`]; what is written to status in
//! [`report`]; the workers shared between namespaces in [`workers`]; `/readyz`'s answer in
//! [`readiness`]. The metrics read the controller's state through [`crate::metrics::Observed`].

mod cached;
mod cleanup;
mod config;
mod events;
mod forget;
mod healthy;
pub mod impersonate;
mod readiness;
mod reconcile;
mod report;
mod shards;
mod workers;

use std::{
    collections::HashMap,
    hash::{DefaultHasher, Hash, Hasher},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::{
    Api, Client, ResourceExt,
    api::PartialObjectMeta,
    runtime::{
        Controller, WatchStreamExt,
        controller::{self, Action},
        finalizer::{Event as Finalizer, finalizer},
        reflector,
        reflector::ObjectRef,
        watcher,
    },
};
use parking_lot::Mutex;
use tokio::{
    sync::{Semaphore, watch},
    task::JoinHandle,
};
use tracing::Instrument;

use crate::{
    Error, Result,
    api::{ApplySet, ClusterApplySet},
    applyset::{self, FINALIZER, ParentRef},
    dependencies::Dependencies,
    discovery::Resolver,
    engine::SetScope,
    fair,
    members::MemberWatches,
    metrics::Metrics,
    parent::{self, Parent},
    sources::{self, ObjectKey, ObjectKind, Sources},
    status::Reason,
    tenancy::{self, Identity},
};
pub use config::{Config, DEFAULT_MIN_INTERVAL};
pub use readiness::Readiness;
pub use report::MAX_OBJECT_BYTES;
use report::Report;
pub use workers::Workers;

/// The field manager of status writes.
pub const STATUS_FIELD_MANAGER: &str = "applyset.dev/status";
/// status.members and the plan lists are capped at this many entries.
pub const MAX_LISTED: usize = 500;

/// Shared by every reconcile.
pub struct Context {
    pub client: Client,
    pub resolver: Resolver,
    pub members: Arc<MemberWatches>,
    pub metrics: Arc<Metrics>,
    pub events: events::Events,
    pub config: Config,
    /// Source fetching: HTTP client, content cache, index of referenced ConfigMaps/Secrets.
    pub sources: Sources,
    /// Permits for member writes in flight ([`Config::apply_concurrency`]).
    pub writes: Arc<Semaphore>,
    failures: Mutex<HashMap<String, u32>>,
    /// The user each set acts as (an impersonating client no set uses is dropped).
    identities: Mutex<forget::Identities>,
    /// Clients impersonating a ServiceAccount, by user name, at most
    /// [`Config::max_impersonation_clients`] (they share the operator's connections).
    impersonated: Mutex<impersonate::Clients>,
    /// The size of each parent's spec in bytes, measured once per generation.
    pub spec_sizes: report::SpecSizes,
    /// The health reporter's memory (sets that wait or have health checks).
    health: healthy::Reporter,
    /// `spec.dependsOn`: the index from dependencies to dependents, and what the rules keep of
    /// every parent listed.
    pub dependencies: Dependencies,
    /// The controllers' workers ([`Config::concurrency`]).
    pub workers: Workers,
}

impl Context {
    pub fn new(
        client: Client,
        config: Config,
        metrics: Arc<Metrics>,
        members: Arc<MemberWatches>,
    ) -> Self {
        let resolver = Resolver::new(client.clone());
        let invalidate = resolver.invalidator();
        members.on_kind_gone(Arc::new(move |_| invalidate()));
        let impersonated = Mutex::new(impersonate::Clients::new(config.max_impersonation_clients));
        let sources = Sources::new(
            config.source_limits.clone(),
            config.source_policy.clone(),
            config.source_dir.clone(),
        );
        metrics.register_kustomize_builds(sources.kustomize.counter());
        let workers = Workers::new(usize::from(config.concurrency), members.clone());
        Self {
            sources,
            resolver,
            writes: Arc::new(Semaphore::new(config.apply_concurrency.max(1))),
            members,
            events: events::Events::new(
                client.clone(),
                "applyset-operator",
                std::env::var("POD_NAME").ok(),
            ),
            client,
            metrics,
            config,
            failures: Mutex::new(HashMap::new()),
            identities: Mutex::new(forget::Identities::default()),
            impersonated,
            spec_sizes: report::SpecSizes::default(),
            health: healthy::Reporter::default(),
            dependencies: Dependencies::default(),
            workers,
        }
    }

    /// The delay before retrying a failed parent: `retry` doubled per consecutive failure,
    /// at most `cap`.
    fn backoff(&self, key: &str, retry: Duration, cap: Duration) -> Duration {
        let n = {
            let mut failures = self.failures.lock();
            let n = failures.entry(key.to_string()).or_insert(0);
            *n = n.saturating_add(1);
            *n
        };
        let factor = 2u32.saturating_pow(n.saturating_sub(1).min(16));
        retry.saturating_mul(factor).min(cap.max(retry))
    }

    /// The scope of one parent's reconcile: acting as `identity`, within the shared write
    /// bound, with the member watches. None when `identity` cannot be impersonated.
    fn scope(&self, parent: ParentRef, identity: Identity) -> Option<SetScope> {
        let scope = SetScope::new(parent, self.client.clone(), self.config.apply_concurrency)
            .with_writes(self.writes.clone())
            .with_watches(self.members.clone())
            .with_terminating(self.members.terminating());
        let user = identity.user();
        self.acting_as(&scope.parent, user.as_deref());
        match user {
            None => Some(scope),
            Some(user) => {
                let client = self.impersonating(&user)?;
                Some(scope.acting_as(identity, client))
            }
        }
    }

    /// The scope of a parent acting as the operator (to report on it).
    fn operator_scope(&self, parent: ParentRef) -> SetScope {
        SetScope::new(parent, self.client.clone(), self.config.apply_concurrency)
    }

    /// The client impersonating `user`, kept among the most recently used.
    fn impersonating(&self, user: &str) -> Option<Client> {
        let make = || impersonate::client(&self.client, user);
        self.impersonated.lock().get_or_make(user, make)
    }

    /// How many impersonating clients are kept (`applyset_impersonation_clients`).
    pub fn impersonation_clients(&self) -> usize {
        self.impersonated.lock().len()
    }

    fn succeeded(&self, key: &str) {
        self.failures.lock().remove(key);
    }
}

/// What the operator's sampled gauges read ([`Metrics::sample_operator`]).
impl crate::metrics::Observed for Context {
    fn member_watches(&self) -> usize {
        self.members.watch_count()
    }

    fn health_watches(&self) -> usize {
        self.members.health_watch_count()
    }

    fn reconciling_namespaces(&self) -> usize {
        self.workers.in_progress.keys()
    }

    fn workers(&self, kind: applyset::ParentKind) -> usize {
        self.workers.gate(kind).in_use()
    }

    fn build_slots_in_use(&self) -> usize {
        self.sources.kustomize.slots().in_use()
    }

    fn builds_waiting(&self) -> (usize, usize) {
        self.sources.kustomize.slots().waiting()
    }

    fn tracked_sets(&self) -> Vec<(&'static str, usize)> {
        Context::tracked_sets(self)
    }

    fn member_objects(&self) -> usize {
        self.members.object_count()
    }

    fn shard_buckets(&self) -> usize {
        self.config.shards.as_ref().map_or(0, |s| s.buckets().len())
    }

    fn impersonation_clients(&self) -> usize {
        Context::impersonation_clients(self)
    }
}

/// A running operator (both controllers).
pub struct Operator {
    metrics: Arc<Metrics>,
    source_memory: sources::memory::MemoryBudget,
    readiness: Arc<Readiness>,
    members: Arc<MemberWatches>,
    workers: Workers,
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
        members.set_check_cap(config.max_health_watches);
        if let Some(shards) = &config.shards {
            members.use_buckets(&shards.buckets());
        }
        let ctx = Arc::new(Context::new(
            client,
            config,
            metrics.clone(),
            members.clone(),
        ));
        let source_memory = ctx.sources.memory.clone();
        let workers = ctx.workers.clone();
        metrics.watch_source_memory(source_memory.clone());
        metrics.set_max_concurrent_reconciles(ctx.config.concurrency);
        metrics.sample_operator(&ctx);
        let readiness = Arc::new(Readiness::default());
        let ready = readiness.clone();
        let stop_watches = members.clone();
        let task = tokio::spawn(async move {
            let controllers = async {
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
                )
            };
            // The health reporter and the namespace watch run as long as the controllers.
            // A namespace learnt terminating reconciles its sets, which may let their
            // deletion go before the namespace controller reaches them.
            let terminating = ctx.members.terminating();
            let sets = ctx.members.clone();
            tokio::select! {
                _ = controllers => {}
                () = healthy::run(ctx.clone()) => {}
                () = terminating.follow(|ns| sets.trigger_namespace(ns)) => {}
                () = shards::follow(ctx.clone()) => {}
            }
            stop_watches.stop();
        });
        Operator {
            metrics,
            source_memory,
            readiness,
            members,
            workers,
            shutdown: tx,
            task,
        }
    }

    pub fn metrics(&self) -> Arc<Metrics> {
        self.metrics.clone()
    }

    /// The memory budget of the sources (`--source-memory-mib`): what is held, the peak.
    pub fn source_memory(&self) -> sources::memory::MemoryBudget {
        self.source_memory.clone()
    }

    /// Whether the controllers' caches have synced (for `/readyz`).
    pub fn readiness(&self) -> Arc<Readiness> {
        self.readiness.clone()
    }

    /// Stops taking new work, lets in-flight reconciles finish (those still waiting for a
    /// worker end at once: the next operator reconciles every set), and returns.
    pub async fn shutdown(self) {
        self.workers.close();
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
/// `applyset.dev/reconcile-requested-at`, whether the parent passes the ownership checks
/// (so removing a wrong id label repairs it at once), and a new watch (`incarnation`: under
/// `--shards auto` the watch starts again at every change of this replica's buckets, and
/// every set of its list reconciles once: the ones gained start) — not status writes, and
/// not the operator's own metadata writes (labels, annotations, the finalizer it adds on the
/// way).
fn trigger_hash<P: Parent>(obj: &P, incarnation: u64) -> Option<u64> {
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
    incarnation.hash(&mut h);
    Some(h.finish())
}

/// The watch of parents of kind `P` (in the watch namespace, with the label selector): every
/// parent it lists is known to the dependency rules; the ones this replica reconciles are
/// reflected into `writer`'s store ([`cached`]), and trigger the controller.
fn parent_stream<P: Parent>(
    ctx: &Arc<Context>,
    writer: reflector::store::Writer<P>,
) -> impl futures::Stream<Item = std::result::Result<P, watcher::Error>> + Send + use<P> {
    let api = P::api(ctx.client.clone(), ctx.config.watch_namespace.as_deref());
    let mut wc = watcher::Config::default().any_semantic();
    if let Some(sel) = &ctx.config.label_selector {
        wc = wc.labels(sel);
    }
    let (queued, gone, deps, owner) = (ctx.metrics.clone(), ctx.clone(), ctx.clone(), ctx.clone());
    // Under --shards auto the watch starts again at every change of this replica's buckets
    // (the new one's list caches the sets it owns now).
    let incarnation = Arc::new(AtomicU64::new(0));
    let started = incarnation.clone();
    let watch = move || {
        started.fetch_add(1, Ordering::Relaxed);
        watcher(api.clone(), wc.clone())
            .backoff(crate::backoff::backoff())
            .boxed()
    };
    let mut cache = cached::Cached::default();
    shards::restarting(watch, shards::assignment_changes(ctx))
        .modify(|o: &mut P| o.managed_fields_mut().clear())
        // dependsOn: a parent whose readiness changed reconciles its dependents, one gone the
        // dependencies it held up; every parent counts, whichever replica owns it (and
        // before the filter: status changes count here).
        .inspect(move |e| {
            if let Ok(e) = e {
                deps.members.trigger_parents(deps.dependencies.on_event(e));
            }
        })
        // Only the sets this replica reconciles are cached. At the end of a list, one that
        // left the cache without a Delete (moved to another replica, or deleted while the
        // watch was away) is forgotten; a reconcile of it still running may record it again,
        // so it is triggered too: the controller runs that only after the running one ended,
        // finds it gone and forgets it then (`ended`). One that entered the cache is
        // triggered: its list's own trigger may have looked for it before the store had it.
        .filter(move |e| {
            let cache = match e {
                Ok(e) => {
                    let admitted = cache.admit(e, |id| shards::owns(&owner, id));
                    for parent in &admitted.left {
                        owner.forget(parent);
                    }
                    // Sent before the store takes the list (`reflect`, in this same poll):
                    // the controller looks for them after it.
                    let mut trigger = admitted.left;
                    trigger.extend(admitted.entered);
                    if !trigger.is_empty() {
                        owner.members.trigger_parents(trigger);
                    }
                    admitted.cache
                }
                Err(_) => true,
            };
            std::future::ready(cache)
        })
        .reflect(writer)
        // A parent deleted, or no longer selected (moved to another shard by its label):
        // its info series goes (another operator, if any, reports it now), and so does what
        // is kept of it (its cleanup, if it ran, forgot it already; one that did not run —
        // a finalizer removed by hand, a move to another shard — must not leave it behind).
        .inspect(move |e| {
            if let Ok(watcher::Event::Delete(o)) = e {
                gone.forget(&o.parent_ref());
            }
        })
        .applied_objects()
        .predicate_filter(
            move |o: &P| trigger_hash(o, incarnation.load(Ordering::Relaxed)),
            Default::default(),
        )
        .inspect(move |o| {
            if let Ok(o) = o {
                queued.triggered(P::KIND.kind(), &o.parent_ref().to_string());
            }
        })
}

async fn run_controller<P: Parent>(
    ctx: Arc<Context>,
    mut shutdown: watch::Receiver<bool>,
    ready: Arc<Readiness>,
    drift: futures::channel::mpsc::UnboundedReceiver<kube::runtime::reflector::ObjectRef<P>>,
) {
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
    let stream = parent_stream::<P>(&ctx, writer);
    let (queued, known) = (ctx.metrics.clone(), reader.clone());
    // Drift of a parent already gone (its members deleted by its own cleanup) starts no
    // reconcile: it does not count as queued.
    let drift = drift.inspect(move |r| {
        if known.get(r).is_some() {
            queued.triggered(P::KIND.kind(), &queue_key(r));
        }
    });
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
        // Every due reconcile starts at once: it is parked when its namespace has as many in
        // progress as it may, else it waits for a worker in its namespace's turn
        // ([`Workers`]). The bounds on work are those, not kube-runtime's.
        .with_config(controller::Config::default().concurrency(0))
        // Each trigger stream backs off by itself; a wait here would pause them all.
        .trigger_backoff(crate::backoff::NoWait)
        .graceful_shutdown_on(stop)
        .run(reconcile::<P>, error_policy::<P>, ctx.clone())
        .for_each(|r| {
            ended::<P>(&ctx, r);
            std::future::ready(())
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

/// What the controller says of a reconcile that ended: a parent triggered but gone (a retry,
/// or a parked one woken, after a deletion the watch did not see) is forgotten; another
/// error is logged.
fn ended<P: Parent>(
    ctx: &Context,
    r: std::result::Result<
        (kube::runtime::reflector::ObjectRef<P>, Action),
        controller::Error<Error, watcher::Error>,
    >,
) {
    match r {
        Ok(_) => {}
        Err(controller::Error::ObjectNotFound(gone)) => {
            let parent = ParentRef {
                kind: P::KIND,
                name: gone.name.clone(),
                namespace: gone.namespace.clone(),
            };
            ctx.forget(&parent);
        }
        Err(e) => tracing::warn!(error = %e, "controller"),
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
        .backoff(crate::backoff::backoff())
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
                ctx.metrics.triggered(P::KIND.kind(), &p.to_string());
                let r = ObjectRef::<P>::new(&p.name);
                match p.namespace {
                    Some(ns) => r.within(&ns),
                    None => r,
                }
            })
            .collect()
    }
}

/// The queue key of a triggered parent (`workqueue_depth`): its [`ParentRef`] text, as
/// [`reconcile`] removes it.
fn queue_key<P: Parent>(r: &ObjectRef<P>) -> String {
    ParentRef {
        kind: P::KIND,
        name: r.name.clone(),
        namespace: r.namespace.clone(),
    }
    .to_string()
}

/// One reconcile of one parent, in a span that carries the parent (every log line of the
/// reconcile, engine and sources included, is tied to it). It first waits (in the queue)
/// for a worker in its namespace's turn, or is parked (it returns at once, and is
/// triggered again when one of its namespace's reconciles ends).
async fn reconcile<P: Parent>(obj: Arc<P>, ctx: Arc<Context>) -> Result<Action> {
    let parent = obj.parent_ref();
    // Under --shards auto, a set that moved to another replica since it was triggered:
    // nothing of it is kept here (it comes back, if it does, in the list that follows a
    // change of the assignment).
    if !shards::owns(&ctx, &parent.id()) {
        ctx.forget(&parent);
        return Ok(Action::await_change());
    }
    let worker = match ctx.workers.start(&parent).await {
        fair::Start::Working(worker) => worker,
        // Reconciled again (woken) when one of its namespace's reconciles ends.
        fair::Start::Parked => return Ok(Action::await_change()),
        // The operator is stopping: the next one reconciles every set when it starts.
        fair::Start::Closed => return Ok(Action::await_change()),
    };
    ctx.metrics.started(P::KIND.kind(), &parent.to_string());
    let span = tracing::info_span!("reconcile", parent = %parent, replica = tracing::field::Empty);
    if let Some(shards) = &ctx.config.shards {
        span.record("replica", shards.holder.as_str());
    }
    // Boxed: a reconcile waiting for a worker holds only the small future above.
    Box::pin(reconcile_contained(obj, ctx, Arc::new(worker)).instrument(span)).await
}

async fn reconcile_contained<P: Parent>(
    obj: Arc<P>,
    ctx: Arc<Context>,
    worker: Arc<fair::Worker>,
) -> Result<Action> {
    use futures::FutureExt;
    let started = Instant::now();
    let parent = obj.parent_ref().to_string();
    // A panic must not take both controllers down with it: it becomes this parent's error.
    let result = std::panic::AssertUnwindSafe(reconcile_parent(obj, &ctx, worker))
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
    ctx.metrics.finished(P::KIND.kind(), &parent);
    ctx.metrics
        .reconciled(P::KIND.kind(), label, started.elapsed());
    tracing::info!(
        took_ms = started.elapsed().as_millis() as u64,
        result = label,
        "reconciled"
    );
    result
}

fn error_policy<P: Parent>(obj: Arc<P>, error: &Error, ctx: Arc<Context>) -> Action {
    tracing::warn!(parent = %obj.parent_ref(), error = %error, "reconcile failed");
    let spec = obj.spec();
    let key = obj.parent_ref().to_string();
    ctx.metrics.retried(P::KIND.kind());
    let cap = spec.interval_at_least(ctx.config.min_interval);
    Action::requeue(ctx.backoff(&key, spec.retry_interval(), cap))
}

/// Refuses a parent that is not ours; otherwise applies it, or, when it is being deleted,
/// cleans up behind the finalizer. `worker` is given back while sources are read.
async fn reconcile_parent<P: Parent>(
    obj: Arc<P>,
    ctx: &Context,
    worker: Arc<fair::Worker>,
) -> Result<Action> {
    let parent = obj.parent_ref();
    // Under --shards auto, the set may have moved while this reconcile waited for its
    // worker: its new owner writes everything of it, status included.
    if !shards::owns(ctx, &parent.id()) {
        return Ok(Action::await_change());
    }
    let scope = match tenancy::identity(&parent, obj.spec(), &ctx.config.tenancy) {
        Err(e) => Err(e.to_string()),
        Ok(id) => {
            let who = id.to_string();
            ctx.scope(parent.clone(), id)
                .ok_or_else(|| format!("{who} cannot be impersonated (not a valid user name)"))
        }
    };
    let scope = match scope {
        Ok(scope) => scope.with_worker(worker),
        Err(e) => {
            // Nothing is done as anyone: the refusal is only reported.
            let scope = ctx.operator_scope(parent);
            let r = Report::failed(Reason::ValidationFailed, format!("{}: {e}", scope.parent));
            return report::write(ctx, &scope, &*obj, r).await;
        }
    };
    let deleting = obj.meta().deletion_timestamp.is_some();
    // A parent that is not ours is not touched at all: no finalizer, no metadata.
    if !deleting && let Err(e) = parent::check_ownership(obj.meta(), &scope.parent) {
        let msg = format!("{}: {e}", scope.parent);
        let r = Report::failed(Reason::OwnershipConflict, msg);
        return report::write(ctx, &scope, &*obj, r).await;
    }
    // Under --shards auto: this replica's fence of the set (its claim goes with the first
    // write of the parent's metadata, or, for a deletion, before it deletes anything).
    let scope = shards::fence(&*obj, ctx, scope)?;
    // Not being deleted: apply. The finalizer is not added on its own first (and the
    // reconcile ended, as `kube::runtime::finalizer` does): it goes with the parent's ApplySet
    // metadata (`parent::write`), which precedes any member write, so a new parent is applied
    // in its first reconcile.
    if !deleting {
        cleanup::release_to_namespace_deletion(&*obj, ctx, &scope).await?;
        return reconcile::reconcile_set(obj, ctx, &scope).await;
    }
    // Being deleted, with members to delete: first the sets that depend on it and are being
    // deleted too delete theirs.
    if obj.spec().deletion_policy.deletes_members(obj.spec().prune)
        && obj.finalizers().iter().any(|f| f == FINALIZER)
        && let Some(action) = cleanup::wait_for_dependents(&*obj, ctx, &scope).await?
    {
        return Ok(action);
    }
    // Being deleted: the cleanup, if our finalizer is there; then the finalizer goes.
    if obj.finalizers().iter().any(|f| f == FINALIZER) {
        match shards::claim_to_delete(&*obj, ctx, &scope).await {
            Err(Error::Fenced { .. }) => return Ok(Action::requeue(shards::FENCED_RETRY)),
            claimed => claimed?,
        }
    }
    let api = P::api(ctx.client.clone(), scope.parent.namespace.as_deref());
    finalizer(&api, FINALIZER, obj, |event| async {
        match event {
            Finalizer::Apply(obj) => reconcile::reconcile_set(obj, ctx, &scope).await,
            Finalizer::Cleanup(obj) => cleanup::cleanup(obj, ctx, &scope).await,
        }
    })
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The size of what `f` returns, without calling it.
    fn returned_size<A, B, R>(_: impl Fn(A, B) -> R) -> usize {
        std::mem::size_of::<R>()
    }

    fn returned_size3<A, B, C, R>(_: impl Fn(A, B, C) -> R) -> usize {
        std::mem::size_of::<R>()
    }

    #[test]
    fn a_reconcile_is_triggered_by_the_spec_deletion_a_request_ownership_and_a_new_watch() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        let mut base = ApplySet::new("web", Default::default());
        base.metadata.namespace = Some("team".into());
        base.metadata.generation = Some(1);
        let hash = |o: &ApplySet| trigger_hash(o, 1);
        let changed = |f: &dyn Fn(&mut ApplySet)| {
            let mut o = base.clone();
            f(&mut o);
            hash(&o) != hash(&base)
        };
        let annotate = |o: &mut ApplySet, k: &str, v: &str| {
            o.metadata
                .annotations
                .get_or_insert_default()
                .insert(k.into(), v.into());
        };
        // What triggers.
        assert!(changed(&|o| o.metadata.generation = Some(2)));
        assert!(changed(&|o| o.metadata.deletion_timestamp =
            Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH))));
        assert!(changed(&|o| annotate(
            o,
            applyset::ANNOTATION_RECONCILE_REQUESTED_AT,
            "now"
        )));
        assert!(changed(&|o| annotate(
            o,
            applyset::ANNOTATION_TOOLING,
            "kubectl/v1.37"
        )));
        assert_ne!(trigger_hash(&base, 2), hash(&base), "a new watch");
        // What does not: status, and the operator's own metadata (a tooling value that
        // passes the ownership checks, the finalizer, other annotations).
        assert!(!changed(&|o| o.status = Some(Default::default())));
        assert!(!changed(&|o| annotate(
            o,
            applyset::ANNOTATION_TOOLING,
            &parent::tooling()
        )));
        assert!(!changed(
            &|o| o.metadata.finalizers = Some(vec![FINALIZER.into()])
        ));
        assert!(!changed(&|o| annotate(o, "example.com/note", "x")));
    }

    /// Every due reconcile starts at once and waits for a worker: what it holds meanwhile is
    /// its small outer future (the reconcile proper is boxed once it has a worker).
    #[test]
    fn a_reconcile_waiting_for_a_worker_holds_a_small_future() {
        let waiting = returned_size(reconcile::<ApplySet>);
        let proper = returned_size3(reconcile_contained::<ApplySet>);
        eprintln!("waiting: {waiting} bytes, the reconcile proper: {proper} bytes");
        assert!(waiting <= 512, "{waiting} bytes");
    }
}

//! Prometheus metrics (docs/operations.md, "Observe"), in one registry per operator instance: our own
//! (`applyset_*`), the process's (`process_*`, on Linux), and the families the Kubernetes
//! controller ecosystem's dashboards query under controller-runtime's and client-go's names
//! (the work queue's in [`workqueue`]).

pub mod workqueue;

use std::{
    collections::HashMap,
    sync::{
        Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

pub struct Metrics {
    registry: Registry,
    reconcile_duration: HistogramVec,
    reconciles_total: IntCounterVec,
    members_applied_total: IntCounterVec,
    members_pruned_total: IntCounter,
    conflicts_total: IntCounter,
    managed_members: IntGauge,
    api_requests_total: IntCounterVec,
    source_fetches_total: IntCounterVec,
    source_memory_bytes: IntGauge,
    source_memory_peak_bytes: IntGauge,
    /// The sources' memory budget, read when the metrics are encoded.
    source_memory: Mutex<Option<crate::sources::memory::MemoryBudget>>,
    managed_by_parent: Mutex<HashMap<String, i64>>,
    reconciles: AtomicU64,
    /// The series the Kubernetes controller ecosystem's dashboards query (controller-runtime
    /// and client-go names), besides our own.
    ecosystem: Ecosystem,
    /// `applyset_info`: one series per parent, its label values by parent.
    info: IntGaugeVec,
    info_labels: Mutex<HashMap<String, Vec<String>>>,
    /// controller-runtime's work-queue families and worker gauges.
    workqueue: workqueue::WorkQueue,
    /// Gauges read from the operator's state when the metrics are encoded, by name.
    sampled: Mutex<HashMap<&'static str, (IntGauge, Sampler)>>,
    /// Labelled gauges read when the metrics are encoded, by name.
    sampled_labelled: Mutex<HashMap<&'static str, (IntGaugeVec, LabelledSampler)>>,
}

/// Reads a gauge's value (see [`Metrics::sample_gauge`]).
pub type Sampler = Box<dyn Fn() -> usize + Send + Sync>;

/// Reads a labelled gauge's values, by label value (see [`Metrics::sample_labelled`]).
pub type LabelledSampler = Box<dyn Fn() -> Vec<(&'static str, usize)> + Send + Sync>;

/// controller-runtime's and client-go's metric names.
struct Ecosystem {
    reconcile_total: IntCounterVec,
    reconcile_errors_total: IntCounterVec,
    reconcile_time: HistogramVec,
    workqueue_depth: IntGaugeVec,
    rest_client_requests_total: IntCounterVec,
    rest_client_request_duration: HistogramVec,
}

impl Ecosystem {
    fn new() -> Self {
        Ecosystem {
            reconcile_total: IntCounterVec::new(
                Opts::new(
                    "controller_runtime_reconcile_total",
                    "Reconciles by controller and result (success, error), as controller-runtime names it",
                ),
                &["controller", "result"],
            )
            .expect("valid metric"),
            reconcile_errors_total: IntCounterVec::new(
                Opts::new(
                    "controller_runtime_reconcile_errors_total",
                    "Reconciles that ended in an error, by controller",
                ),
                &["controller"],
            )
            .expect("valid metric"),
            reconcile_time: HistogramVec::new(
                HistogramOpts::new(
                    "controller_runtime_reconcile_time_seconds",
                    "Duration of one reconcile, by controller",
                )
                .buckets(vec![
                    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
                ]),
                &["controller"],
            )
            .expect("valid metric"),
            workqueue_depth: IntGaugeVec::new(
                Opts::new(
                    "workqueue_depth",
                    "Parents whose reconcile was triggered and has not started yet, by controller",
                ),
                &["name"],
            )
            .expect("valid metric"),
            rest_client_requests_total: IntCounterVec::new(
                Opts::new(
                    "rest_client_requests_total",
                    "Requests to the API server by HTTP status code (<error>: no answer) and method",
                ),
                &["code", "method"],
            )
            .expect("valid metric"),
            rest_client_request_duration: HistogramVec::new(
                HistogramOpts::new(
                    "rest_client_request_duration_seconds",
                    "Request latency in seconds. Broken down by verb, and host",
                )
                .buckets(vec![
                    0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0,
                ]),
                &["verb", "host"],
            )
            .expect("valid metric"),
        }
    }

    /// Every series a dashboard or alert queries exists from the start (at 0), so a query
    /// of a quiet operator returns 0 rather than nothing.
    fn start_at_zero(&self) {
        for controller in ["applyset", "clusterapplyset"] {
            for result in ["success", "error"] {
                self.reconcile_total
                    .with_label_values(&[controller, result]);
            }
            self.reconcile_errors_total.with_label_values(&[controller]);
            self.workqueue_depth.with_label_values(&[controller]);
        }
    }

    fn collectors(&self) -> Vec<Box<dyn prometheus::core::Collector>> {
        vec![
            Box::new(self.reconcile_total.clone()),
            Box::new(self.reconcile_errors_total.clone()),
            Box::new(self.reconcile_time.clone()),
            Box::new(self.workqueue_depth.clone()),
            Box::new(self.rest_client_requests_total.clone()),
            Box::new(self.rest_client_request_duration.clone()),
        ]
    }
}

/// The labels of `applyset_info`, in order.
pub const INFO_LABELS: [&str; 7] = [
    "name",
    "namespace",
    "kind",
    "ready",
    "reason",
    "suspended",
    "revision",
];

/// What `applyset_info` says of one parent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Info {
    pub name: String,
    /// Empty for a ClusterApplySet.
    pub namespace: String,
    pub kind: String,
    /// The Ready condition's status ("True", "False", "Unknown").
    pub ready: String,
    pub reason: String,
    pub suspended: bool,
    /// The revision last applied (empty when none).
    pub revision: String,
}

impl Info {
    fn values(&self) -> Vec<String> {
        vec![
            self.name.clone(),
            self.namespace.clone(),
            self.kind.clone(),
            self.ready.clone(),
            self.reason.clone(),
            self.suspended.to_string(),
            self.revision.clone(),
        ]
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let registry = Registry::new();
        let reconcile_duration = reconcile_histogram();
        let reconciles_total = counter_vec(
            "applyset_reconciles_total",
            "Reconciles by result",
            &["result"],
        );
        let members_applied_total = counter_vec(
            "applyset_members_applied_total",
            "Member applies by result",
            &["result"],
        );
        let members_pruned_total =
            counter("applyset_members_pruned_total", "Members deleted by prune");
        let conflicts_total = counter(
            "applyset_conflicts_total",
            "Field-manager conflicts reported",
        );
        let managed_members = gauge("applyset_managed_members", "Members of all ApplySets");
        let api_requests_total = counter_vec(
            "applyset_api_requests_total",
            "Requests the operator sent to the API server, by verb (WATCH apart from GET)",
            &["verb"],
        );
        let source_fetches_total = counter_vec(
            "applyset_source_fetches_total",
            "Source reads by kind and result: downloaded (new content), cached (the cheap check found the revision cached), failed",
            &["kind", "result"],
        );
        let source_memory_bytes = gauge(
            "applyset_source_memory_bytes",
            "Bytes of the sources' memory budget (--source-memory-mib) held now by fetches and their results",
        );
        let source_memory_peak_bytes = gauge(
            "applyset_source_memory_peak_bytes",
            "The most bytes of the sources' memory budget held at once since the start",
        );
        let ecosystem = Ecosystem::new();
        ecosystem.start_at_zero();
        let info = IntGaugeVec::new(
            Opts::new(
                "applyset_info",
                "1 per ApplySet and ClusterApplySet, labelled with where it stands",
            ),
            &INFO_LABELS,
        )
        .expect("valid metric");
        let workqueue = workqueue::WorkQueue::new().expect("valid metrics");
        let metrics = Self {
            registry,
            reconcile_duration,
            reconciles_total,
            members_applied_total,
            members_pruned_total,
            conflicts_total,
            managed_members,
            api_requests_total,
            source_fetches_total,
            source_memory_bytes,
            source_memory_peak_bytes,
            source_memory: Mutex::new(None),
            managed_by_parent: Mutex::new(HashMap::new()),
            reconciles: AtomicU64::new(0),
            ecosystem,
            info,
            info_labels: Mutex::new(HashMap::new()),
            workqueue,
            sampled: Mutex::new(HashMap::new()),
            sampled_labelled: Mutex::new(HashMap::new()),
        };
        metrics.register_all();
        metrics
    }

    /// Registers every family, and this process's own on Linux
    /// (process_resident_memory_bytes, process_cpu_seconds_total, process_open_fds,
    /// process_start_time_seconds, ..., read from /proc at each scrape).
    fn register_all(&self) {
        let mut collectors = self.ecosystem.collectors();
        collectors.extend(self.workqueue.collectors());
        collectors.extend([
            Box::new(self.info.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(self.api_requests_total.clone()),
            Box::new(self.source_memory_bytes.clone()),
            Box::new(self.source_memory_peak_bytes.clone()),
            Box::new(self.reconcile_duration.clone()),
            Box::new(self.reconciles_total.clone()),
            Box::new(self.members_applied_total.clone()),
            Box::new(self.members_pruned_total.clone()),
            Box::new(self.conflicts_total.clone()),
            Box::new(self.managed_members.clone()),
            Box::new(self.source_fetches_total.clone()),
        ]);
        #[cfg(target_os = "linux")]
        collectors.push(Box::new(
            prometheus::process_collector::ProcessCollector::for_self(),
        ));
        for c in collectors {
            // Registering distinct names in a fresh registry cannot fail.
            let _ = self.registry.register(c);
        }
    }

    /// A gauge `name` whose value `read` gives when the metrics are encoded (the size of a
    /// cache, the number of watches). Registering a name again replaces its reader.
    pub fn sample_gauge(&self, name: &'static str, help: &str, read: Sampler) {
        let Ok(mut sampled) = self.sampled.lock() else {
            return;
        };
        if let Some(entry) = sampled.get_mut(name) {
            entry.1 = read;
            return;
        }
        let Ok(gauge) = IntGauge::new(name, help) else {
            return;
        };
        if self.registry.register(Box::new(gauge.clone())).is_ok() {
            sampled.insert(name, (gauge, read));
        }
    }

    /// A gauge `name` with one label, `label`, whose series `read` gives (label value and
    /// value) when the metrics are encoded. Registering a name again replaces its reader.
    pub fn sample_labelled(
        &self,
        name: &'static str,
        help: &str,
        label: &str,
        read: LabelledSampler,
    ) {
        let Ok(mut sampled) = self.sampled_labelled.lock() else {
            return;
        };
        if let Some(entry) = sampled.get_mut(name) {
            entry.1 = read;
            return;
        }
        let Ok(gauge) = IntGaugeVec::new(Opts::new(name, help), &[label]) else {
            return;
        };
        if self.registry.register(Box::new(gauge.clone())).is_ok() {
            sampled.insert(name, (gauge, read));
        }
    }

    /// The size of the metrics' own per-set maps (`applyset_tracked_sets`): the
    /// `applyset_info` series, the member counts, the sets in the work queue.
    pub fn tracked_sets(&self) -> [(&'static str, usize); 3] {
        fn len<V>(m: &Mutex<HashMap<String, V>>) -> usize {
            m.lock().map_or(0, |m| m.len())
        }
        [
            ("info_series", len(&self.info_labels)),
            ("member_counts", len(&self.managed_by_parent)),
            ("queue", self.workqueue.tracked()),
        ]
    }

    /// Reconciles finished by this operator instance (any result).
    pub fn reconciles(&self) -> u64 {
        self.reconciles.load(Ordering::SeqCst)
    }

    /// One finished reconcile of a parent of `kind` (`result`: "success" or an error class).
    pub fn reconciled(&self, kind: &str, result: &str, took: Duration) {
        self.reconcile_duration
            .with_label_values(&[kind])
            .observe(took.as_secs_f64());
        self.reconciles_total.with_label_values(&[result]).inc();
        let controller = controller_name(kind);
        let e = &self.ecosystem;
        e.reconcile_time
            .with_label_values(&[&controller])
            .observe(took.as_secs_f64());
        let outcome = if result == "success" {
            "success"
        } else {
            "error"
        };
        e.reconcile_total
            .with_label_values(&[&controller, outcome])
            .inc();
        if outcome == "error" {
            e.reconcile_errors_total
                .with_label_values(&[&controller])
                .inc();
        }
        self.reconciles.fetch_add(1, Ordering::SeqCst);
    }

    /// A reconcile of `parent` (of `kind`) was requested: it waits in the queue until
    /// [`Metrics::started`].
    pub fn triggered(&self, kind: &str, parent: &str) {
        let controller = controller_name(kind);
        let depth = self.workqueue.added(&controller, parent);
        self.set_depth(&controller, depth);
    }

    /// `parent` is gone before its reconcile started: it leaves the queue.
    pub fn gone(&self, kind: &str, parent: &str) {
        let controller = controller_name(kind);
        let depth = self.workqueue.gone(&controller, parent);
        self.set_depth(&controller, depth);
    }

    /// A reconcile of `parent` started: it left the queue and runs until
    /// [`Metrics::finished`].
    pub fn started(&self, kind: &str, parent: &str) {
        let controller = controller_name(kind);
        let depth = self.workqueue.started(&controller, parent);
        self.set_depth(&controller, depth);
    }

    /// A reconcile of `parent` ended (whatever its result).
    pub fn finished(&self, kind: &str, parent: &str) {
        self.workqueue.finished(&controller_name(kind), parent);
    }

    /// A reconcile of a parent of `kind` comes back with backoff (an error or a failure).
    pub fn retried(&self, kind: &str) {
        self.workqueue.retried(&controller_name(kind));
    }

    /// `read` tells how many workers the controller of `kind` holds now
    /// (`controller_runtime_active_workers`).
    pub fn sample_workers(&self, kind: &str, read: Sampler) {
        self.workqueue.sample_workers(&controller_name(kind), read);
    }

    /// The most reconciles each controller runs at once (`--concurrency`).
    pub fn set_max_concurrent_reconciles(&self, n: u16) {
        self.workqueue.set_max_concurrent(n);
    }

    fn set_depth(&self, controller: &str, depth: usize) {
        self.ecosystem
            .workqueue_depth
            .with_label_values(&[controller])
            .set(i64::try_from(depth).unwrap_or(i64::MAX));
    }

    /// Sets the `applyset_info` series of `parent` (replacing its earlier one), or removes it
    /// (`None`: the parent is gone).
    pub fn set_info(&self, parent: &str, info: Option<&Info>) {
        let Ok(mut labels) = self.info_labels.lock() else {
            return;
        };
        let new = info.map(Info::values);
        let old = labels.get(parent).cloned();
        if old == new {
            return;
        }
        if let Some(old) = old {
            let old: Vec<&str> = old.iter().map(String::as_str).collect();
            let _ = self.info.remove_label_values(&old);
        }
        match new {
            Some(values) => {
                let v: Vec<&str> = values.iter().map(String::as_str).collect();
                self.info.with_label_values(&v).set(1);
                labels.insert(parent.to_string(), values);
            }
            None => {
                labels.remove(parent);
            }
        }
    }

    /// One answer (or failure: `code` "<error>") of the API server `host` to a request
    /// `method`, `took` after it was sent.
    pub fn answered(&self, code: &str, method: &str, host: &str, took: Duration) {
        self.ecosystem
            .rest_client_requests_total
            .with_label_values(&[code, method])
            .inc();
        self.ecosystem
            .rest_client_request_duration
            .with_label_values(&[method, host])
            .observe(took.as_secs_f64());
    }

    pub fn applied(&self, result: &str, n: u64) {
        if n > 0 {
            self.members_applied_total
                .with_label_values(&[result])
                .inc_by(n);
        }
    }

    /// One source read of `kind` with `result` (downloaded, cached, failed).
    pub fn source_fetched(&self, kind: &str, result: &str) {
        self.source_fetches_total
            .with_label_values(&[kind, result])
            .inc();
    }

    /// The count of source reads of `kind` with `result`.
    pub fn source_fetches(&self, kind: &str, result: &str) -> u64 {
        self.source_fetches_total
            .with_label_values(&[kind, result])
            .get()
    }

    pub fn pruned(&self, n: u64) {
        self.members_pruned_total.inc_by(n);
    }

    pub fn conflicts(&self, n: u64) {
        self.conflicts_total.inc_by(n);
    }

    /// Records the member count of one parent (0 when it goes away).
    pub fn set_members(&self, parent: &str, n: i64) {
        // The gauge moves by the difference: summing every parent's count on each call would
        // cost a reconcile time in proportion to the number of sets.
        if let Ok(mut m) = self.managed_by_parent.lock() {
            let before = match n {
                0 => m.remove(parent),
                n => m.insert(parent.to_string(), n),
            };
            self.managed_members.add(n - before.unwrap_or(0));
        }
    }

    /// Counts one API request.
    pub fn request(&self, verb: &str) {
        self.api_requests_total.with_label_values(&[verb]).inc();
    }

    /// Requests sent so far with this verb.
    pub fn requests(&self, verb: &str) -> u64 {
        self.api_requests_total.with_label_values(&[verb]).get()
    }

    /// Reports the use of the sources' memory budget `b` (read at each encoding).
    pub fn watch_source_memory(&self, b: crate::sources::memory::MemoryBudget) {
        if let Ok(mut m) = self.source_memory.lock() {
            *m = Some(b);
        }
    }

    /// Registers a metric another part of the operator owns (the kustomize builds).
    pub fn register(&self, collector: Box<dyn prometheus::core::Collector>) {
        // Registering a name twice fails; the first registration stands.
        let _ = self.registry.register(collector);
    }

    /// The Prometheus text exposition of every metric.
    pub fn encode(&self) -> String {
        self.workqueue.refresh();
        if let Ok(m) = self.source_memory.lock()
            && let Some(b) = m.as_ref()
        {
            self.source_memory_bytes
                .set(i64::try_from(b.held_bytes()).unwrap_or(i64::MAX));
            self.source_memory_peak_bytes
                .set(i64::try_from(b.peak_bytes()).unwrap_or(i64::MAX));
        }
        if let Ok(sampled) = self.sampled.lock() {
            for (gauge, read) in sampled.values() {
                gauge.set(i64::try_from(read()).unwrap_or(i64::MAX));
            }
        }
        if let Ok(sampled) = self.sampled_labelled.lock() {
            for (gauge, read) in sampled.values() {
                for (value, n) in read() {
                    gauge
                        .with_label_values(&[value])
                        .set(i64::try_from(n).unwrap_or(i64::MAX));
                }
            }
        }
        let mut buf = Vec::new();
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut buf);
        String::from_utf8(buf).unwrap_or_default()
    }
}

/// The controller label of the ecosystem's series: the parent kind in lower case, as
/// controller-runtime names a controller after its kind.
pub fn controller_name(kind: &str) -> String {
    kind.to_ascii_lowercase()
}

/// The verb of a request: the HTTP method, with watches told apart from reads.
pub fn verb<B>(req: &http::Request<B>) -> &'static str {
    match *req.method() {
        http::Method::GET
            if req
                .uri()
                .query()
                .is_some_and(|q| q.contains("watch=true") || q.contains("watch=1")) =>
        {
            "WATCH"
        }
        http::Method::GET => "GET",
        http::Method::POST => "POST",
        http::Method::PUT => "PUT",
        http::Method::PATCH => "PATCH",
        http::Method::DELETE => "DELETE",
        _ => "OTHER",
    }
}

/// `applyset_reconcile_duration_seconds`, by parent kind.
fn reconcile_histogram() -> HistogramVec {
    HistogramVec::new(
        HistogramOpts::new(
            "applyset_reconcile_duration_seconds",
            "Duration of one reconcile",
        )
        .buckets(vec![
            0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
        ]),
        &["kind"],
    )
    .expect("valid metric")
}

/// An `IntCounterVec` of a valid name and labels (the names here are constants).
fn counter_vec(name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric")
}

/// An `IntCounter` of a valid name.
fn counter(name: &str, help: &str) -> IntCounter {
    IntCounter::new(name, help).expect("valid metric")
}

/// An `IntGauge` of a valid name.
fn gauge(name: &str, help: &str) -> IntGauge {
    IntGauge::new(name, help).expect("valid metric")
}

/// A client that counts every request it sends in `metrics`, and every answer by status
/// code.
pub fn counting_client(
    config: kube::Config,
    metrics: std::sync::Arc<Metrics>,
) -> Result<kube::Client, kube::Error> {
    let host = config.cluster_url.host().unwrap_or_default().to_string();
    let layer = tower::layer::layer_fn(move |inner| Counted {
        inner,
        metrics: metrics.clone(),
        host: host.clone(),
    });
    Ok(kube::client::ClientBuilder::try_from(config)?
        .with_layer(&layer)
        .build())
}

/// The service of [`counting_client`]: counts each request, then its answer.
#[derive(Clone)]
struct Counted<S> {
    inner: S,
    metrics: std::sync::Arc<Metrics>,
    /// The API server's host (client-go's `host` label).
    host: String,
}

impl<S, B, R> tower::Service<http::Request<B>> for Counted<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
    S::Error: 'static,
    R: 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = futures::future::BoxFuture<'static, Result<S::Response, S::Error>>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        self.metrics.request(verb(&req));
        let method = req.method().as_str().to_owned();
        let (metrics, host) = (self.metrics.clone(), self.host.clone());
        let sent = std::time::Instant::now();
        let answer = self.inner.call(req);
        Box::pin(async move {
            let answer = answer.await;
            let code = match &answer {
                Ok(resp) => resp.status().as_u16().to_string(),
                Err(_) => "<error>".to_string(),
            };
            metrics.answered(&code, &method, &host, sent.elapsed());
            answer
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbs() {
        let r = |m: http::Method, uri: &str| {
            http::Request::builder()
                .method(m)
                .uri(uri)
                .body(())
                .expect("request")
        };
        assert_eq!(
            verb(&r(
                http::Method::GET,
                "/api/v1/configmaps?watch=true&labelSelector=x"
            )),
            "WATCH"
        );
        assert_eq!(
            verb(&r(http::Method::GET, "/api/v1/configmaps?labelSelector=x")),
            "GET"
        );
        assert_eq!(
            verb(&r(http::Method::PATCH, "/api/v1/namespaces/a/configmaps/b")),
            "PATCH"
        );
    }

    #[test]
    fn the_ecosystem_series_follow_reconciles_queue_and_info() {
        let m = Metrics::new();
        m.reconciled("ApplySet", "success", Duration::from_millis(20));
        m.reconciled("ApplySet", "apply", Duration::from_millis(20));
        m.triggered("ApplySet", "ApplySet a/x");
        m.triggered("ApplySet", "ApplySet a/x");
        m.triggered("ApplySet", "ApplySet a/y");
        m.started("ApplySet", "ApplySet a/x");
        let info = Info {
            name: "x".into(),
            namespace: "a".into(),
            kind: "ApplySet".into(),
            ready: "False".into(),
            reason: "ApplyFailed".into(),
            suspended: false,
            revision: String::new(),
        };
        m.set_info("ApplySet a/x", Some(&info));
        let ready = Info {
            ready: "True".into(),
            reason: "ReconciliationSucceeded".into(),
            ..info.clone()
        };
        m.set_info("ApplySet a/x", Some(&ready));
        m.answered("200", "PATCH", "127.0.0.1", Duration::from_millis(20));
        let text = m.encode();
        for line in [
            "controller_runtime_reconcile_total{controller=\"applyset\",result=\"success\"} 1",
            "controller_runtime_reconcile_total{controller=\"applyset\",result=\"error\"} 1",
            "controller_runtime_reconcile_errors_total{controller=\"applyset\"} 1",
            "controller_runtime_reconcile_time_seconds_count{controller=\"applyset\"} 2",
            "workqueue_depth{name=\"applyset\"} 1",
            "rest_client_requests_total{code=\"200\",method=\"PATCH\"} 1",
            "rest_client_request_duration_seconds_bucket{host=\"127.0.0.1\",verb=\"PATCH\",le=\"0.025\"} 1",
            // a/x triggered twice while waiting is one add; a/y another.
            "workqueue_adds_total{controller=\"applyset\",name=\"applyset\"} 2",
            "reason=\"ReconciliationSucceeded\"",
        ] {
            assert!(text.contains(line), "{line} in:\n{text}");
        }
        assert!(
            !text.contains("ApplyFailed"),
            "the earlier info series is gone"
        );
        m.set_info("ApplySet a/x", None);
        assert!(
            !m.encode().contains("applyset_info{"),
            "gone with its parent"
        );
    }

    #[test]
    fn the_managed_members_gauge_is_the_sum_of_every_parents_count() {
        let m = Metrics::new();
        m.set_members("ns/a", 3);
        m.set_members("ns/b", 2);
        assert_eq!(m.managed_members.get(), 5);
        m.set_members("ns/a", 1);
        assert_eq!(m.managed_members.get(), 3);
        m.set_members("ns/b", 0);
        m.set_members("ns/b", 0);
        assert_eq!(m.managed_members.get(), 1);
        m.set_members("ns/a", 0);
        assert_eq!(m.managed_members.get(), 0);
    }

    #[test]
    fn request_counts_show_in_the_exposition() {
        let m = Metrics::new();
        m.request("PATCH");
        m.request("PATCH");
        assert_eq!(m.requests("PATCH"), 2);
        assert!(
            m.encode()
                .contains("applyset_api_requests_total{verb=\"PATCH\"} 2")
        );
    }
}

//! Prometheus metrics (docs/operations.md, "Observe"), in one registry per operator instance: our own
//! (`applyset_*`), the process's (`process_*`, on Linux), and the families the Kubernetes
//! controller ecosystem's dashboards query under controller-runtime's and client-go's names
//! (the work queue's in [`workqueue`]).
//!
//! The one place where every metric is defined (name, help, labels) and registered: the rest
//! of the operator counts through [`Metrics`]' methods, the kustomize builder through its
//! [`KustomizeBuilds`], and the gauges of [`sampled`] read the controller's state through
//! [`Observed`]. Files: this one (the registry, our own families, the exposition),
//! [`ecosystem`] (controller-runtime's and client-go's names), [`workqueue`], [`info`]
//! (`applyset_info`), [`sampled`] (gauges read at each scrape), [`client`] (the client that
//! counts API requests).

pub mod client;
pub mod ecosystem;
pub mod info;
pub mod sampled;
pub mod workqueue;

use std::{
    collections::HashMap,
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};

use parking_lot::Mutex;
use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

pub use client::{counting_client, verb};
pub use ecosystem::controller_name;
pub use info::{INFO_LABELS, Info};
pub use sampled::{LabelledSampler, Observed, Sampler};

use ecosystem::Ecosystem;

pub struct Metrics {
    registry: Registry,
    reconcile_duration: HistogramVec,
    reconciles_total: IntCounterVec,
    members_applied_total: IntCounterVec,
    members_pruned_total: IntCounter,
    conflicts_total: IntCounter,
    /// `--shards auto`: claims of sets and fenced reconciles.
    shard_events_total: IntCounterVec,
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
        let shard_events_total = counter_vec(
            "applyset_shard_events_total",
            "Under --shards auto: sets this replica claimed (claimed), and reconciles it stopped because another replica had claimed the set since (fenced)",
            &["event"],
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
            shard_events_total,
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
            Box::new(self.shard_events_total.clone()),
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

    /// The size of the metrics' own per-set maps (`applyset_tracked_sets`): the
    /// `applyset_info` series, the member counts, the sets in the work queue.
    pub fn tracked_sets(&self) -> [(&'static str, usize); 3] {
        [
            ("info_series", self.info_labels.lock().len()),
            ("member_counts", self.managed_by_parent.lock().len()),
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

    /// This replica claimed a set (`--shards auto`).
    pub fn shard_claimed(&self) {
        self.shard_events_total
            .with_label_values(&["claimed"])
            .inc();
    }

    /// A reconcile stopped at the fence: another replica claimed the set since.
    pub fn shard_fenced(&self) {
        self.shard_events_total.with_label_values(&["fenced"]).inc();
    }

    /// Records the member count of one parent (0 when it goes away).
    pub fn set_members(&self, parent: &str, n: i64) {
        // The gauge moves by the difference: summing every parent's count on each call would
        // cost a reconcile time in proportion to the number of sets.
        let mut m = self.managed_by_parent.lock();
        let before = match n {
            0 => m.remove(parent),
            n => m.insert(parent.to_string(), n),
        };
        self.managed_members.add(n - before.unwrap_or(0));
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
        *self.source_memory.lock() = Some(b);
    }

    /// Registers the kustomize builder's count of builds (`applyset_kustomize_builds_total`).
    pub fn register_kustomize_builds(&self, builds: &KustomizeBuilds) {
        // Registering a name twice fails; the first registration stands.
        let _ = self.registry.register(Box::new(builds.0.clone()));
    }

    /// The Prometheus text exposition of every metric.
    pub fn encode(&self) -> String {
        self.workqueue.refresh();
        if let Some(b) = self.source_memory.lock().as_ref() {
            self.source_memory_bytes
                .set(i64::try_from(b.held_bytes()).unwrap_or(i64::MAX));
            self.source_memory_peak_bytes
                .set(i64::try_from(b.peak_bytes()).unwrap_or(i64::MAX));
        }
        self.read_sampled();
        let mut buf = Vec::new();
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut buf);
        String::from_utf8(buf).unwrap_or_default()
    }
}

/// `applyset_kustomize_builds_total{result}`: kustomize builds run, by result (`built`,
/// `failed`), both results present from the start. The kustomize builder holds it and counts;
/// the operator's registry registers it ([`Metrics::register_kustomize_builds`]).
#[derive(Clone)]
pub struct KustomizeBuilds(IntCounterVec);

impl Default for KustomizeBuilds {
    fn default() -> Self {
        let c = counter_vec(
            "applyset_kustomize_builds_total",
            "Kustomize builds run, by result (built, failed); a source whose revision is cached is not built again, except a build that reads SOPS files (per set, each reconcile)",
            &["result"],
        );
        for r in ["built", "failed"] {
            c.with_label_values(&[r]);
        }
        KustomizeBuilds(c)
    }
}

impl KustomizeBuilds {
    /// One build ended: built (`ok`) or failed.
    pub fn counted(&self, ok: bool) {
        self.0
            .with_label_values(&[if ok { "built" } else { "failed" }])
            .inc();
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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn kustomize_builds_are_exported_by_result_from_the_start() {
        let m = Metrics::new();
        let builds = KustomizeBuilds::default();
        m.register_kustomize_builds(&builds);
        let text = m.encode();
        for r in ["built", "failed"] {
            let line = format!("applyset_kustomize_builds_total{{result=\"{r}\"}} 0");
            assert!(text.contains(&line), "{line} in:\n{text}");
        }
        builds.counted(true);
        builds.counted(false);
        builds.counted(true);
        let text = m.encode();
        assert!(text.contains("applyset_kustomize_builds_total{result=\"built\"} 2"));
        assert!(text.contains("applyset_kustomize_builds_total{result=\"failed\"} 1"));
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

//! Prometheus metrics of SPEC §6, in one registry per operator instance.

use std::{
    collections::HashMap,
    sync::{
        Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts, Registry,
    TextEncoder,
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
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let registry = Registry::new();
        let reconcile_duration = HistogramVec::new(
            HistogramOpts::new(
                "applyset_reconcile_duration_seconds",
                "Duration of one reconcile",
            )
            .buckets(vec![
                0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
            ]),
            &["kind"],
        )
        .expect("valid metric");
        let reconciles_total = IntCounterVec::new(
            Opts::new("applyset_reconciles_total", "Reconciles by result"),
            &["result"],
        )
        .expect("valid metric");
        let members_applied_total = IntCounterVec::new(
            Opts::new("applyset_members_applied_total", "Member applies by result"),
            &["result"],
        )
        .expect("valid metric");
        let members_pruned_total =
            IntCounter::new("applyset_members_pruned_total", "Members deleted by prune")
                .expect("valid metric");
        let conflicts_total = IntCounter::new(
            "applyset_conflicts_total",
            "Field-manager conflicts reported",
        )
        .expect("valid metric");
        let managed_members = IntGauge::new("applyset_managed_members", "Members of all ApplySets")
            .expect("valid metric");
        let api_requests_total = IntCounterVec::new(
            Opts::new(
                "applyset_api_requests_total",
                "Requests the operator sent to the API server, by verb (WATCH apart from GET)",
            ),
            &["verb"],
        )
        .expect("valid metric");
        let source_fetches_total = IntCounterVec::new(
            Opts::new(
                "applyset_source_fetches_total",
                "Source reads by kind and result: downloaded (new content), cached (the cheap check found the revision cached), failed",
            ),
            &["kind", "result"],
        )
        .expect("valid metric");
        let source_memory_bytes = IntGauge::new(
            "applyset_source_memory_bytes",
            "Bytes of the sources' memory budget (--source-memory-mib) held now by fetches and their results",
        )
        .expect("valid metric");
        let source_memory_peak_bytes = IntGauge::new(
            "applyset_source_memory_peak_bytes",
            "The most bytes of the sources' memory budget held at once since the start",
        )
        .expect("valid metric");
        for c in [
            Box::new(api_requests_total.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(source_memory_bytes.clone()),
            Box::new(source_memory_peak_bytes.clone()),
            Box::new(reconcile_duration.clone()),
            Box::new(reconciles_total.clone()),
            Box::new(members_applied_total.clone()),
            Box::new(members_pruned_total.clone()),
            Box::new(conflicts_total.clone()),
            Box::new(managed_members.clone()),
            Box::new(source_fetches_total.clone()),
        ] {
            // Registering distinct names in a fresh registry cannot fail.
            let _ = registry.register(c);
        }
        Self {
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
        }
    }

    /// Reconciles finished by this operator instance (any result).
    pub fn reconciles(&self) -> u64 {
        self.reconciles.load(Ordering::SeqCst)
    }

    pub fn reconciled(&self, kind: &str, result: &str, took: Duration) {
        self.reconcile_duration
            .with_label_values(&[kind])
            .observe(took.as_secs_f64());
        self.reconciles_total.with_label_values(&[result]).inc();
        self.reconciles.fetch_add(1, Ordering::SeqCst);
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
        if let Ok(mut m) = self.managed_by_parent.lock() {
            if n == 0 {
                m.remove(parent);
            } else {
                m.insert(parent.to_string(), n);
            }
            self.managed_members.set(m.values().sum());
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

    /// The Prometheus text exposition of every metric.
    pub fn encode(&self) -> String {
        if let Ok(m) = self.source_memory.lock()
            && let Some(b) = m.as_ref()
        {
            self.source_memory_bytes
                .set(i64::try_from(b.held_bytes()).unwrap_or(i64::MAX));
            self.source_memory_peak_bytes
                .set(i64::try_from(b.peak_bytes()).unwrap_or(i64::MAX));
        }
        let mut buf = Vec::new();
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut buf);
        String::from_utf8(buf).unwrap_or_default()
    }
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

/// A client that counts every request it sends in `metrics`.
pub fn counting_client(
    config: kube::Config,
    metrics: std::sync::Arc<Metrics>,
) -> Result<kube::Client, kube::Error> {
    let layer = tower::util::MapRequestLayer::new(move |req: http::Request<kube::client::Body>| {
        metrics.request(verb(&req));
        req
    });
    Ok(kube::client::ClientBuilder::try_from(config)?
        .with_layer(&layer)
        .build())
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

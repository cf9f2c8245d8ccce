//! The families the Kubernetes controller ecosystem's dashboards query, under
//! controller-runtime's and client-go's names and labels: reconciles, their errors and time,
//! the work queue's depth, the API client's requests and their latency.
//!
//! Promises: every series a dashboard or alert queries exists from the start (at 0); the
//! `controller` label is the parent kind in lower case, as controller-runtime names it.

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts};

/// controller-runtime's and client-go's metric names.
pub(super) struct Ecosystem {
    pub(super) reconcile_total: IntCounterVec,
    pub(super) reconcile_errors_total: IntCounterVec,
    pub(super) reconcile_time: HistogramVec,
    pub(super) workqueue_depth: IntGaugeVec,
    pub(super) rest_client_requests_total: IntCounterVec,
    pub(super) rest_client_request_duration: HistogramVec,
}

impl Ecosystem {
    pub(super) fn new() -> Self {
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
    pub(super) fn start_at_zero(&self) {
        for controller in ["applyset", "clusterapplyset"] {
            for result in ["success", "error"] {
                self.reconcile_total
                    .with_label_values(&[controller, result]);
            }
            self.reconcile_errors_total.with_label_values(&[controller]);
            self.workqueue_depth.with_label_values(&[controller]);
        }
    }

    pub(super) fn collectors(&self) -> Vec<Box<dyn prometheus::core::Collector>> {
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

/// The controller label of the ecosystem's series: the parent kind in lower case, as
/// controller-runtime names a controller after its kind.
pub fn controller_name(kind: &str) -> String {
    kind.to_ascii_lowercase()
}

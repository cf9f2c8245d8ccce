//! controller-runtime's work-queue families (`workqueue_*`) and worker gauges
//! (`controller_runtime_active_workers`, `controller_runtime_max_concurrent_reconciles`),
//! with its names, labels (`name` and `controller`, both the controller's name) and meanings.
//!
//! kube-runtime's controller has no hook into its queue, so the queue is measured on our own
//! trigger path: a parent is *added* when something triggers its reconcile (its own change,
//! a member's drift, a referenced ConfigMap or Secret, a dependency) and it is not waiting
//! already; it leaves the queue when its reconcile starts (the time between is
//! `workqueue_queue_duration_seconds`). A reconcile that comes back at its interval or after
//! a requested delay is not an add (client-go's `AddAfter` is not counted until it fires,
//! and kube-runtime does not tell when it fires); one that comes back with backoff after a
//! failure is a retry (`workqueue_retries_total`, as client-go's `AddRateLimited`).
//!
//! The reconciles of a controller share its workers fairly between namespaces
//! ([`crate::fair`]): a triggered parent waits in the queue until it has a worker (that wait
//! is part of its queue duration), and `controller_runtime_active_workers` counts the
//! workers held, read from the controller's worker gate when the metrics are encoded (a
//! reconcile reading its sources gives its worker back meanwhile, so it runs without being
//! an active worker).

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use parking_lot::Mutex;
use prometheus::{
    GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, core::Collector,
};

/// The controllers, by the names the series carry.
pub const CONTROLLERS: [&str; 2] = ["applyset", "clusterapplyset"];

/// What one controller's queue holds now.
#[derive(Default)]
struct Queue {
    /// Parents triggered and not started yet, since when.
    waiting: HashMap<String, Instant>,
    /// Parents being reconciled, since when.
    running: HashMap<String, Instant>,
}

/// The work-queue families of both controllers.
pub struct WorkQueue {
    adds: IntCounterVec,
    queue_duration: HistogramVec,
    work_duration: HistogramVec,
    retries: IntCounterVec,
    unfinished: GaugeVec,
    longest: GaugeVec,
    active_workers: IntGaugeVec,
    max_concurrent: IntGaugeVec,
    queues: Mutex<HashMap<String, Queue>>,
    /// Each controller's workers held now.
    workers: Mutex<HashMap<String, super::Sampler>>,
}

/// client-go's work-queue buckets: 10 ns to 1000 s, by tens.
fn buckets() -> Vec<f64> {
    prometheus::exponential_buckets(10e-9, 10.0, 12).unwrap_or_default()
}

const QUEUE_LABELS: [&str; 2] = ["name", "controller"];

impl WorkQueue {
    pub fn new() -> prometheus::Result<Self> {
        let counter =
            |name: &str, help: &str| IntCounterVec::new(Opts::new(name, help), &QUEUE_LABELS);
        let gauge = |name: &str, help: &str| GaugeVec::new(Opts::new(name, help), &QUEUE_LABELS);
        let histogram = |name: &str, help: &str| {
            HistogramVec::new(
                HistogramOpts::new(name, help).buckets(buckets()),
                &QUEUE_LABELS,
            )
        };
        let q = WorkQueue {
            adds: counter(
                "workqueue_adds_total",
                "Total number of adds handled by workqueue",
            )?,
            queue_duration: histogram(
                "workqueue_queue_duration_seconds",
                "How long in seconds an item stays in workqueue before being requested",
            )?,
            work_duration: histogram(
                "workqueue_work_duration_seconds",
                "How long in seconds processing an item from workqueue takes",
            )?,
            retries: counter(
                "workqueue_retries_total",
                "Total number of retries handled by workqueue",
            )?,
            unfinished: gauge(
                "workqueue_unfinished_work_seconds",
                "How many seconds of work has been done that is in progress and hasn't been observed by work_duration. Large values indicate stuck threads",
            )?,
            longest: gauge(
                "workqueue_longest_running_processor_seconds",
                "How many seconds has the longest running processor for workqueue been running",
            )?,
            active_workers: IntGaugeVec::new(
                Opts::new(
                    "controller_runtime_active_workers",
                    "Number of currently used workers per controller",
                ),
                &["controller"],
            )?,
            max_concurrent: IntGaugeVec::new(
                Opts::new(
                    "controller_runtime_max_concurrent_reconciles",
                    "Maximum number of concurrent reconciles per controller",
                ),
                &["controller"],
            )?,
            queues: Mutex::new(HashMap::new()),
            workers: Mutex::new(HashMap::new()),
        };
        // Every series exists from the start, at 0.
        for c in CONTROLLERS {
            q.adds.with_label_values(&[c, c]);
            q.retries.with_label_values(&[c, c]);
            q.queue_duration.with_label_values(&[c, c]);
            q.work_duration.with_label_values(&[c, c]);
            q.unfinished.with_label_values(&[c, c]);
            q.longest.with_label_values(&[c, c]);
            q.active_workers.with_label_values(&[c]);
            q.max_concurrent.with_label_values(&[c]);
        }
        Ok(q)
    }

    pub fn collectors(&self) -> Vec<Box<dyn Collector>> {
        vec![
            Box::new(self.adds.clone()),
            Box::new(self.queue_duration.clone()),
            Box::new(self.work_duration.clone()),
            Box::new(self.retries.clone()),
            Box::new(self.unfinished.clone()),
            Box::new(self.longest.clone()),
            Box::new(self.active_workers.clone()),
            Box::new(self.max_concurrent.clone()),
        ]
    }

    /// Runs `f` on `controller`'s queue; returns its result.
    fn with<T>(&self, controller: &str, f: impl FnOnce(&mut Queue) -> T) -> T {
        f(self
            .queues
            .lock()
            .entry(controller.to_string())
            .or_default())
    }

    /// `parent` was triggered: an add unless it waits already. Returns the queue's depth.
    pub fn added(&self, controller: &str, parent: &str) -> usize {
        self.with(controller, |q| {
            if !q.waiting.contains_key(parent) {
                q.waiting.insert(parent.to_string(), Instant::now());
                self.adds.with_label_values(&[controller, controller]).inc();
            }
            q.waiting.len()
        })
    }

    /// `parent`'s reconcile started: it leaves the queue (its wait observed, if it was
    /// triggered) and runs. Returns the queue's depth.
    pub fn started(&self, controller: &str, parent: &str) -> usize {
        let now = Instant::now();
        self.with(controller, |q| {
            if let Some(since) = q.waiting.remove(parent) {
                self.queue_duration
                    .with_label_values(&[controller, controller])
                    .observe(now.duration_since(since).as_secs_f64());
            }
            q.running.insert(parent.to_string(), now);
            q.waiting.len()
        })
    }

    /// `parent` is gone (deleted, or no longer selected) before its reconcile started (a
    /// reconcile parked for its namespace's turn, say): it leaves the queue. Returns the
    /// queue's depth.
    pub fn gone(&self, controller: &str, parent: &str) -> usize {
        self.with(controller, |q| {
            q.waiting.remove(parent);
            q.waiting.len()
        })
    }

    /// Sets waiting in the queues or being reconciled, both controllers together.
    pub fn tracked(&self) -> usize {
        (self.queues.lock().values())
            .map(|q| q.waiting.len() + q.running.len())
            .sum()
    }

    /// `parent`'s reconcile ended.
    pub fn finished(&self, controller: &str, parent: &str) {
        self.with(controller, |q| {
            if let Some(since) = q.running.remove(parent) {
                self.work_duration
                    .with_label_values(&[controller, controller])
                    .observe(since.elapsed().as_secs_f64());
            }
        });
    }

    /// `read` tells how many of `controller`'s workers are held
    /// (`controller_runtime_active_workers`).
    pub fn sample_workers(&self, controller: &str, read: super::Sampler) {
        self.workers.lock().insert(controller.to_string(), read);
    }

    /// A reconcile of `controller` comes back with backoff (after an error or a failure).
    pub fn retried(&self, controller: &str) {
        self.retries
            .with_label_values(&[controller, controller])
            .inc();
    }

    /// The most reconciles each controller runs at once.
    pub fn set_max_concurrent(&self, n: u16) {
        for c in CONTROLLERS {
            self.max_concurrent
                .with_label_values(&[c])
                .set(i64::from(n));
        }
    }

    /// Brings the gauges of work in progress up to now (before an encoding).
    pub fn refresh(&self) {
        for (controller, read) in self.workers.lock().iter() {
            self.active_workers
                .with_label_values(&[controller])
                .set(i64::try_from(read()).unwrap_or(i64::MAX));
        }
        let queues = self.queues.lock();
        let now = Instant::now();
        for (controller, q) in queues.iter() {
            let (total, longest) = in_progress(q.running.values().copied(), now);
            let labels = [controller.as_str(), controller.as_str()];
            self.unfinished
                .with_label_values(&labels)
                .set(total.as_secs_f64());
            self.longest
                .with_label_values(&labels)
                .set(longest.as_secs_f64());
        }
    }
}

/// The work in progress since each of `starts`, at `now`: its sum and its longest.
fn in_progress(starts: impl Iterator<Item = Instant>, now: Instant) -> (Duration, Duration) {
    starts.fold((Duration::ZERO, Duration::ZERO), |(sum, longest), s| {
        let d = now.saturating_duration_since(s);
        (sum + d, longest.max(d))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_in_progress_sums_and_takes_the_longest() {
        let now = Instant::now();
        let starts = [now - Duration::from_secs(3), now - Duration::from_secs(1)];
        assert_eq!(
            in_progress(starts.into_iter(), now),
            (Duration::from_secs(4), Duration::from_secs(3))
        );
        assert_eq!(
            in_progress(std::iter::empty(), now),
            (Duration::ZERO, Duration::ZERO)
        );
    }

    #[test]
    fn a_parent_waiting_already_is_not_added_twice() {
        let q = WorkQueue::new().expect("metrics");
        assert_eq!(q.added("applyset", "a"), 1);
        assert_eq!(q.added("applyset", "a"), 1);
        assert_eq!(q.added("applyset", "b"), 2);
        assert_eq!(q.adds.with_label_values(&["applyset", "applyset"]).get(), 2);
        assert_eq!(q.started("applyset", "a"), 1);
        assert_eq!(
            q.queue_duration
                .with_label_values(&["applyset", "applyset"])
                .get_sample_count(),
            1
        );
        q.finished("applyset", "a");
        assert_eq!(
            q.gone("applyset", "b"),
            0,
            "b left the queue without starting"
        );
        assert_eq!(
            q.work_duration
                .with_label_values(&["applyset", "applyset"])
                .get_sample_count(),
            1
        );
    }
}

#[cfg(test)]
mod worker_tests {
    use std::sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    };

    use super::*;

    #[test]
    fn active_workers_are_the_workers_held_when_encoded() {
        let q = WorkQueue::new().expect("metrics");
        let held = Arc::new(AtomicUsize::new(3));
        let read = held.clone();
        q.sample_workers("applyset", Box::new(move || read.load(Ordering::SeqCst)));
        q.refresh();
        assert_eq!(q.active_workers.with_label_values(&["applyset"]).get(), 3);
        // A reconcile running (its sources read, say) without a worker is not one.
        q.started("applyset", "a");
        held.store(0, Ordering::SeqCst);
        q.refresh();
        assert_eq!(q.active_workers.with_label_values(&["applyset"]).get(), 0);
    }
}

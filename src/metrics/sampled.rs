//! Gauges read from the operator's state when the metrics are encoded (at each scrape): the
//! watches, the workers, the kustomize build slots, the per-set maps, the impersonating
//! clients. Their names and help are defined here; the controller's state answers them
//! through [`Observed`].
//!
//! Promises: a gauge reads 0 once the state it reads is gone; registering a name again
//! replaces its reader (one series per name).

use std::sync::{Arc, Weak};

use prometheus::{IntGauge, IntGaugeVec, Opts};

use super::{Metrics, controller_name};
use crate::applyset::ParentKind;

/// Reads a gauge's value (see [`Metrics::sample_operator`]).
pub type Sampler = Box<dyn Fn() -> usize + Send + Sync>;

/// Reads a labelled gauge's values, by label value (see [`Metrics::sample_operator`]).
pub type LabelledSampler = Box<dyn Fn() -> Vec<(&'static str, usize)> + Send + Sync>;

/// What the sampled gauges read of the operator's state (the controller's state answers).
pub trait Observed: Send + Sync + 'static {
    /// Member kinds watched now.
    fn member_watches(&self) -> usize;
    /// Objects of `spec.healthChecks` watched now.
    fn health_watches(&self) -> usize;
    /// Namespaces with reconciles in progress or waiting to start.
    fn reconciling_namespaces(&self) -> usize;
    /// Workers of the controller of parents of `kind` held now.
    fn workers(&self, kind: ParentKind) -> usize;
    /// Kustomize build slots held now.
    fn build_slots_in_use(&self) -> usize;
    /// Kustomize builds waiting for a slot now, and the namespaces they wait in.
    fn builds_waiting(&self) -> (usize, usize);
    /// The sets (or namespaces) each per-set map holds now, by map.
    fn tracked_sets(&self) -> Vec<(&'static str, usize)>;
    /// Impersonating clients kept now.
    fn impersonation_clients(&self) -> usize;
    /// Objects the member watches know now (labelled `part-of`, under `--shards auto` of
    /// this replica's buckets).
    fn member_objects(&self) -> usize;
    /// Buckets this replica owns now under `--shards auto` (0 without).
    fn shard_buckets(&self) -> usize;
}

impl Metrics {
    /// The gauges of what the sets make the operator hold (each bounded per set; see the
    /// bounds table of docs/security.md), read from `state` at each encoding.
    pub fn sample_operator<T: Observed>(&self, state: &Arc<T>) {
        let gauge = |name: &'static str, help: &str, read: fn(&T) -> usize| {
            self.sample_gauge(name, help, reader(Arc::downgrade(state), read));
        };
        gauge(
            "applyset_member_watches",
            "Member kinds watched now (one watch each; a kind is watched while some set declares it)",
            T::member_watches,
        );
        gauge(
            "applyset_health_watches",
            "Objects of spec.healthChecks watched now (one watch each; at most 2000, 64 per set)",
            T::health_watches,
        );
        gauge(
            "applyset_reconciling_namespaces",
            "Namespaces with reconciles in progress or waiting to start (each at most --concurrency in progress)",
            T::reconciling_namespaces,
        );
        for kind in [ParentKind::ApplySet, ParentKind::ClusterApplySet] {
            let s = Arc::downgrade(state);
            let read = Box::new(move || s.upgrade().map_or(0, |s| s.workers(kind)));
            self.sample_workers(kind.kind(), read);
        }
        gauge(
            "applyset_kustomize_build_slots_in_use",
            "Kustomize build slots held now by running builds (at most --kustomize-concurrency; one namespace alone holds at most all but one)",
            T::build_slots_in_use,
        );
        gauge(
            "applyset_kustomize_builds_waiting",
            "Kustomize builds waiting for a build slot now (served round robin between namespaces)",
            |s| s.builds_waiting().0,
        );
        gauge(
            "applyset_kustomize_build_namespaces_waiting",
            "Namespaces with kustomize builds waiting for a build slot now",
            |s| s.builds_waiting().1,
        );
        let s = Arc::downgrade(state);
        self.sample_labelled(
            "applyset_tracked_sets",
            "Sets (or namespaces) each per-set map of the operator holds now, by map; a deleted set is forgotten by every one",
            "map",
            Box::new(move || s.upgrade().map_or_else(Vec::new, |s| s.tracked_sets())),
        );
        gauge(
            "applyset_member_objects",
            "Objects the member watches know now (labelled part-of; under --shards auto, of this replica's buckets only)",
            T::member_objects,
        );
        gauge(
            "applyset_shard_buckets",
            "Buckets of sets this replica owns now under --shards auto (of 1024; 0 without sharding or while its own Lease is not valid)",
            T::shard_buckets,
        );
        gauge(
            "applyset_impersonation_clients",
            "Impersonating clients kept (--max-impersonation-clients, least recently used out)",
            T::impersonation_clients,
        );
    }

    /// A gauge `name` whose value `read` gives when the metrics are encoded (the size of a
    /// cache, the number of watches). Registering a name again replaces its reader.
    fn sample_gauge(&self, name: &'static str, help: &str, read: Sampler) {
        let mut sampled = self.sampled.lock();
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
    fn sample_labelled(&self, name: &'static str, help: &str, label: &str, read: LabelledSampler) {
        let mut sampled = self.sampled_labelled.lock();
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

    /// `read` tells how many workers the controller of `kind` holds now
    /// (`controller_runtime_active_workers`).
    fn sample_workers(&self, kind: &str, read: Sampler) {
        self.workqueue.sample_workers(&controller_name(kind), read);
    }

    /// Sets every sampled gauge to what its reader says now.
    pub(super) fn read_sampled(&self) {
        for (gauge, read) in self.sampled.lock().values() {
            gauge.set(i64::try_from(read()).unwrap_or(i64::MAX));
        }
        for (gauge, read) in self.sampled_labelled.lock().values() {
            for (value, n) in read() {
                gauge
                    .with_label_values(&[value])
                    .set(i64::try_from(n).unwrap_or(i64::MAX));
            }
        }
    }
}

/// A gauge's reader of `state`: `read` of it while it lives, 0 once it is gone.
fn reader<T: Observed>(state: Weak<T>, read: fn(&T) -> usize) -> Sampler {
    Box::new(move || state.upgrade().map_or(0, |s| read(&s)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A state that answers `n` to every gauge.
    struct Fixed(usize);

    impl Observed for Fixed {
        fn member_watches(&self) -> usize {
            self.0
        }
        fn health_watches(&self) -> usize {
            self.0
        }
        fn reconciling_namespaces(&self) -> usize {
            self.0
        }
        fn workers(&self, _: ParentKind) -> usize {
            self.0
        }
        fn build_slots_in_use(&self) -> usize {
            self.0
        }
        fn builds_waiting(&self) -> (usize, usize) {
            (self.0, self.0)
        }
        fn tracked_sets(&self) -> Vec<(&'static str, usize)> {
            vec![("member_applies", self.0)]
        }
        fn impersonation_clients(&self) -> usize {
            self.0
        }
        fn member_objects(&self) -> usize {
            self.0
        }
        fn shard_buckets(&self) -> usize {
            self.0
        }
    }

    const GAUGES: [&str; 10] = [
        "applyset_member_watches ",
        "applyset_health_watches ",
        "applyset_reconciling_namespaces ",
        "controller_runtime_active_workers{controller=\"applyset\"} ",
        "controller_runtime_active_workers{controller=\"clusterapplyset\"} ",
        "applyset_kustomize_build_slots_in_use ",
        "applyset_kustomize_builds_waiting ",
        "applyset_kustomize_build_namespaces_waiting ",
        "applyset_tracked_sets{map=\"member_applies\"} ",
        "applyset_impersonation_clients ",
    ];

    #[test]
    fn every_sampled_gauge_reads_the_state_and_zero_once_it_is_gone() {
        let m = Metrics::new();
        let state = Arc::new(Fixed(3));
        m.sample_operator(&state);
        let text = m.encode();
        for g in GAUGES {
            assert!(text.contains(&format!("{g}3\n")), "{g}3 in:\n{text}");
        }
        drop(state);
        let text = m.encode();
        for g in GAUGES.iter().filter(|g| !g.contains("tracked_sets")) {
            assert!(text.contains(&format!("{g}0\n")), "{g}0 in:\n{text}");
        }
    }
}

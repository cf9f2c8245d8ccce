//! Readiness for `/readyz`: whether the caches (reflector stores) of both controllers have
//! synced.
//!
//! Promises: ready only once both have listed; never unready again after that.

use crate::applyset;

/// Whether the caches (reflector stores) of both controllers have synced.
#[derive(Default)]
pub struct Readiness {
    applysets: std::sync::atomic::AtomicBool,
    cluster_applysets: std::sync::atomic::AtomicBool,
}

impl Readiness {
    pub(super) fn mark(&self, kind: applyset::ParentKind) {
        use std::sync::atomic::Ordering::SeqCst;
        match kind {
            applyset::ParentKind::ApplySet => self.applysets.store(true, SeqCst),
            applyset::ParentKind::ClusterApplySet => self.cluster_applysets.store(true, SeqCst),
        }
    }

    pub(super) fn is_synced(&self, kind: applyset::ParentKind) -> bool {
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

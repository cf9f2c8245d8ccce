//! The workers of both controllers, each shared round robin between namespaces
//! ([`crate::fair`]), and the per-namespace bound on reconciles in progress.
//!
//! Promises: a reconcile holds a worker only while it works (not while it reads its
//! sources); a namespace has at most as many reconciles in progress as a controller has
//! workers, the others parked and reconciled again, in order, when one of its reconciles
//! ends.

use std::sync::Arc;

use crate::{
    applyset::{self, ParentRef},
    fair,
    members::MemberWatches,
};

/// The workers of both controllers, each shared round robin between namespaces, and the
/// per-namespace bound on reconciles in progress (reading sources, which they do without a
/// worker, included).
#[derive(Clone)]
pub struct Workers {
    applysets: fair::Gate,
    cluster_applysets: fair::Gate,
    pub(super) in_progress: fair::Slots<ParentRef>,
}

impl Workers {
    /// `per_controller` workers each; a parked parent is reconciled again through `members`'
    /// triggers.
    pub fn new(per_controller: usize, members: Arc<MemberWatches>) -> Self {
        Workers {
            applysets: fair::Gate::new(per_controller),
            cluster_applysets: fair::Gate::new(per_controller),
            in_progress: fair::Slots::new(per_controller, move |p| {
                members.trigger_parents(vec![p]);
            }),
        }
    }

    pub(super) fn gate(&self, kind: applyset::ParentKind) -> &fair::Gate {
        match kind {
            applyset::ParentKind::ApplySet => &self.applysets,
            applyset::ParentKind::ClusterApplySet => &self.cluster_applysets,
        }
    }

    /// A worker of `parent`'s controller, in its namespace's turn, if its namespace (`""`:
    /// cluster-scoped) has fewer reconciles in progress than its bound; else it is parked.
    pub(super) async fn start(&self, parent: &ParentRef) -> fair::Start {
        let key = parent.namespace.as_deref().unwrap_or_default();
        let gate = self.gate(parent.kind);
        fair::Worker::start(gate, key, &self.in_progress, parent.clone()).await
    }

    /// `parent` is gone: it is no longer parked, nor a slot kept for it.
    pub(super) fn forget(&self, parent: &ParentRef) {
        let key = parent.namespace.as_deref().unwrap_or_default();
        self.in_progress.forget(key, parent);
    }

    /// Stops handing out workers: reconciles still waiting for one end at once.
    pub(super) fn close(&self) {
        self.applysets.close();
        self.cluster_applysets.close();
    }
}

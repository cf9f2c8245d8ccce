//! The view's cache: one watch per kind (per namespace when the viewer may not watch every
//! namespace), each parent projected into a [`SetSummary`] on arrival, and a feed of changes.
//! One cache serves every viewer of a `kubectl applyset ui`: viewers never reach the API server
//! for the sets list.

use std::sync::Arc;

use kube::Client;
use tokio::sync::broadcast;

use super::{DepIndex, SetSummary, Watched};
use crate::applyset::ParentRef;

/// A set that changed (added, modified or deleted): read its summary from a fresh snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    pub parent: ParentRef,
}

/// The sets at one moment, sorted by kind, namespace and name, with their dependsOn index.
#[derive(Debug, Default)]
pub struct Snapshot {
    pub sets: Vec<Arc<SetSummary>>,
    pub deps: DepIndex,
}

impl Snapshot {
    /// The summary of `parent`, if cached.
    pub fn get(&self, parent: &ParentRef) -> Option<&Arc<SetSummary>> {
        let _ = parent;
        todo!("view::Snapshot::get")
    }
}

/// The cache (cheap to clone: every clone shares it).
#[derive(Clone)]
pub struct SetCache {
    watched: Watched,
    _changes: broadcast::Sender<Change>,
}

impl SetCache {
    /// Starts the watches of `watched` on `client` (tasks on the current runtime, stopped
    /// when the last clone is dropped).
    pub fn start(client: Client, watched: Watched) -> SetCache {
        let _ = client;
        let (tx, _) = broadcast::channel(1024);
        SetCache {
            watched,
            _changes: tx,
        }
    }

    /// Whether every watch has listed once (the sets page is complete).
    pub fn is_ready(&self) -> bool {
        todo!("view::SetCache::is_ready")
    }

    /// The sets now (shared; rebuilt only after a change).
    pub fn snapshot(&self) -> Arc<Snapshot> {
        todo!("view::SetCache::snapshot")
    }

    /// Every change from now on; a receiver that lags is told so (the viewer reloads).
    pub fn subscribe(&self) -> broadcast::Receiver<Change> {
        self._changes.subscribe()
    }

    /// What is watched.
    pub fn watched(&self) -> &Watched {
        &self.watched
    }

    /// The last error of each watch that failed (e.g. forbidden), to show on the page.
    pub fn errors(&self) -> Vec<String> {
        todo!("view::SetCache::errors")
    }
}

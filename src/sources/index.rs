//! The index of referenced objects: which parents reference which ConfigMaps and Secrets
//! (sources, secretRefs, the decryption key, substituteFrom), so that a change of one of them
//! reconciles exactly the parents that use it. Pure bookkeeping under one lock that cannot
//! poison.

use std::collections::{BTreeSet, HashMap};

use parking_lot::Mutex;

use crate::applyset::{ParentKind, ParentRef};

/// Objects a parent references (ConfigMaps and Secrets), for the watches.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    pub kind: ObjectKind,
    pub namespace: String,
    pub name: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ObjectKind {
    ConfigMap,
    Secret,
}

/// Which parents reference which ConfigMaps and Secrets (sources and secretRefs), so that a
/// change of one of them reconciles exactly the parents that use it.
#[derive(Default)]
pub struct Index {
    by_parent: Mutex<HashMap<ParentRef, BTreeSet<ObjectKey>>>,
}

impl Index {
    /// Records what `parent` references now (replacing what it referenced before).
    pub fn set(&self, parent: &ParentRef, refs: BTreeSet<ObjectKey>) {
        let mut m = self.by_parent.lock();
        if refs.is_empty() {
            m.remove(parent);
        } else {
            m.insert(parent.clone(), refs);
        }
    }

    pub fn remove(&self, parent: &ParentRef) {
        self.by_parent.lock().remove(parent);
    }

    /// The parents of `kind` that reference `key`.
    pub fn parents_of(&self, key: &ObjectKey, kind: ParentKind) -> Vec<ParentRef> {
        self.by_parent
            .lock()
            .iter()
            .filter(|(p, refs)| p.kind == kind && refs.contains(key))
            .map(|(p, _)| p.clone())
            .collect()
    }

    /// Parents that reference something.
    pub fn len(&self) -> usize {
        self.by_parent.lock().len()
    }

    /// Whether any parent references an object of `kind` (the watch skips work otherwise).
    pub fn is_empty(&self) -> bool {
        self.by_parent.lock().is_empty()
    }
}

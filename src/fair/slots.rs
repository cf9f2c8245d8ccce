//! At most `per_key` reconciles in progress per key (namespace), none across keys. One that
//! finds its key full does not wait (a waiting reconcile would hold a place in kube-runtime's
//! runner, which polls every reconcile it holds on every wake-up): it is *parked*, and when a
//! slot of its key frees, the first parked one is woken (reconciled again through `wake`),
//! the slot reserved for it until its reconcile comes or it is forgotten (deleted).

use std::{
    collections::{HashMap, HashSet, VecDeque},
    hash::Hash,
    sync::Arc,
};

use parking_lot::Mutex;

/// The slots of every key, and who is parked on them.
pub struct Slots<P> {
    inner: Arc<Inner<P>>,
}

impl<P> Clone for Slots<P> {
    fn clone(&self) -> Self {
        Slots {
            inner: self.inner.clone(),
        }
    }
}

type Wake<P> = Box<dyn Fn(P) + Send + Sync>;

struct Inner<P> {
    per_key: usize,
    keys: Mutex<HashMap<Arc<str>, Key<P>>>,
    wake: Wake<P>,
}

/// One key's slots.
struct Key<P> {
    held: usize,
    /// Woken, with a slot kept for them until their reconcile comes.
    woken: HashSet<P>,
    /// Parked, in the order they came, and as a set.
    parked: VecDeque<P>,
    parked_set: HashSet<P>,
}

impl<P> Default for Key<P> {
    fn default() -> Self {
        Key {
            held: 0,
            woken: HashSet::new(),
            parked: VecDeque::new(),
            parked_set: HashSet::new(),
        }
    }
}

impl<P: Hash + Eq + Clone> Key<P> {
    fn full(&self, per_key: usize) -> bool {
        self.held + self.woken.len() >= per_key
    }

    /// The parked to wake while slots are free (each then has one kept for it).
    fn wake_parked(&mut self, per_key: usize) -> Vec<P> {
        let mut woken = Vec::new();
        while !self.full(per_key) {
            let Some(p) = self.parked.pop_front() else {
                break;
            };
            self.parked_set.remove(&p);
            self.woken.insert(p.clone());
            woken.push(p);
        }
        woken
    }

    fn unpark(&mut self, parent: &P) {
        if self.parked_set.remove(parent) {
            self.parked.retain(|p| p != parent);
        }
    }

    fn idle(&self) -> bool {
        self.held == 0 && self.woken.is_empty() && self.parked.is_empty()
    }
}

impl<P: Hash + Eq + Clone + Send + 'static> Slots<P> {
    /// `per_key` slots per key (at least 1); `wake` reconciles a parked one again.
    pub fn new(per_key: usize, wake: impl Fn(P) + Send + Sync + 'static) -> Self {
        Slots {
            inner: Arc::new(Inner {
                per_key: per_key.max(1),
                keys: Mutex::new(HashMap::new()),
                wake: Box::new(wake),
            }),
        }
    }

    /// A slot of `key` for `parent`: the one kept for it if it was woken, else a free one;
    /// None when `key` has none free (then `parent` is parked, once).
    pub fn try_acquire(&self, key: &str, parent: P) -> Option<Slot> {
        let mut keys = self.inner.keys.lock();
        let k = keys.entry(Arc::from(key)).or_default();
        let kept = k.woken.remove(&parent);
        if !kept && k.full(self.inner.per_key) {
            if k.parked_set.insert(parent.clone()) {
                k.parked.push_back(parent);
            }
            return None;
        }
        // Come by itself (a trigger of its own) before it was woken: no longer parked.
        k.unpark(&parent);
        k.held += 1;
        let owner: Arc<dyn Release> = self.inner.clone();
        Some(Slot {
            owner,
            key: Arc::from(key),
        })
    }

    /// `parent` is gone: it is no longer parked, and a slot kept for it goes to the next.
    pub fn forget(&self, key: &str, parent: &P) {
        let woken = {
            let mut keys = self.inner.keys.lock();
            let Some(k) = keys.get_mut(key) else {
                return;
            };
            k.unpark(parent);
            k.woken.remove(parent);
            let woken = k.wake_parked(self.inner.per_key);
            if k.idle() {
                keys.remove(key);
            }
            woken
        };
        self.inner.wake_all(woken);
    }

    /// Keys with a slot held or kept, or a reconcile parked.
    pub fn keys(&self) -> usize {
        self.inner.keys.lock().len()
    }

    /// Reconciles parked now.
    pub fn parked(&self) -> usize {
        self.inner
            .keys
            .lock()
            .values()
            .map(|k| k.parked.len())
            .sum()
    }
}

impl<P> Inner<P> {
    fn wake_all(&self, parents: Vec<P>) {
        for p in parents {
            (self.wake)(p);
        }
    }
}

/// How a [`Slot`] gives its slot back without knowing the parked ones' type.
trait Release: Send + Sync {
    fn release(&self, key: &str);
}

impl<P: Hash + Eq + Clone + Send> Release for Inner<P> {
    fn release(&self, key: &str) {
        let woken = {
            let mut keys = self.keys.lock();
            let Some(k) = keys.get_mut(key) else {
                return;
            };
            k.held = k.held.saturating_sub(1);
            let woken = k.wake_parked(self.per_key);
            if k.idle() {
                keys.remove(key);
            }
            woken
        };
        self.wake_all(woken);
    }
}

/// A slot of [`Slots`], given back when dropped (the first parked of its key is woken).
pub struct Slot {
    owner: Arc<dyn Release>,
    key: Arc<str>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.owner.release(&self.key);
    }
}

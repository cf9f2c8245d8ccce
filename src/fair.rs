//! Reconcile workers shared fairly between namespaces.
//!
//! A controller has N workers (`--concurrency`): a reconcile does its work holding one of
//! them. Reconciles waiting for a worker queue per namespace (first come, first served
//! within one), and the namespaces that have reconciles waiting are served round robin: a
//! worker given back goes to the first waiter of the next namespace in turn. So
//!
//! - work-conserving: a worker is free only when nobody waits (one namespace alone may use
//!   every worker),
//! - fair: while several namespaces wait, each gets a worker in turn, whatever the length of
//!   its queue; a namespace that starts waiting is served after at most one worker given
//!   back per namespace ahead of it,
//! - a wait on the network (reading a set's sources) holds no worker: [`Worker::away`] gives
//!   the worker back for the wait and takes one again, in turn, after. What a namespace has
//!   in progress is bounded per namespace instead ([`Slots`]: at most N reconciles of one
//!   namespace between their start and their end, waits included; the others are parked,
//!   holding nothing, and woken one by one as slots free), so a namespace's slow sources
//!   queue only its own sets, and what the reconciles in progress hold (their state, what
//!   their sources returned) is bounded per namespace, as it was with N workers.
//!
//! [`RoundRobin`] is the scheduling rule, pure; [`Gate`] hands out its permits to async
//! waiters ([`Permit`]s go back when dropped, a waiter that goes away stops waiting).
//!
//! The kustomize build slots are shared between namespaces too ([`BuildSlots`]: round
//! robin, and the last free slot kept for a namespace with no build running, since a
//! running build cannot be taken back).

use std::{
    collections::{HashMap, VecDeque},
    hash::Hash,
    sync::Arc,
};

use parking_lot::Mutex;
use tokio::sync::oneshot;

mod builds;
mod slots;
pub use builds::{BuildSlot, BuildSlots, Lanes};
pub use slots::{Slot, Slots};

/// One request for a permit.
pub type Ticket = u64;

/// Round-robin scheduling of a fixed number of permits between keys (namespaces).
#[derive(Debug)]
pub struct RoundRobin<K> {
    /// Permits nobody holds; more than 0 only when nobody waits.
    free: usize,
    /// Keys with waiters, in the order they are served.
    ring: VecDeque<K>,
    /// Each key's waiters, in the order they asked.
    queues: HashMap<K, VecDeque<Ticket>>,
    /// The key of each waiting ticket.
    keys: HashMap<Ticket, K>,
}

impl<K: Eq + Hash + Clone> RoundRobin<K> {
    pub fn new(permits: usize) -> Self {
        RoundRobin {
            free: permits,
            ring: VecDeque::new(),
            queues: HashMap::new(),
            keys: HashMap::new(),
        }
    }

    /// `ticket` asks for a permit for `key`: true when it has one at once (one was free),
    /// otherwise it waits behind `key`'s earlier waiters.
    pub fn request(&mut self, key: K, ticket: Ticket) -> bool {
        if self.free > 0 {
            self.free -= 1;
            return true;
        }
        let queue = self.queues.entry(key.clone()).or_default();
        if queue.is_empty() {
            self.ring.push_back(key.clone());
        }
        queue.push_back(ticket);
        self.keys.insert(ticket, key);
        false
    }

    /// A permit is given back: the ticket it goes to (the first waiter of the next key in
    /// turn, which then goes to the back of the ring), or None when nobody waits.
    pub fn release(&mut self) -> Option<Ticket> {
        while let Some(key) = self.ring.pop_front() {
            // A key in the ring always has waiters; one without is skipped all the same.
            let Some(queue) = self.queues.get_mut(&key) else {
                continue;
            };
            let Some(ticket) = queue.pop_front() else {
                self.queues.remove(&key);
                continue;
            };
            if queue.is_empty() {
                self.queues.remove(&key);
            } else {
                self.ring.push_back(key);
            }
            self.keys.remove(&ticket);
            return Some(ticket);
        }
        self.free += 1;
        None
    }

    /// `ticket` stops waiting; false when it was not waiting (it has its permit already).
    pub fn cancel(&mut self, ticket: Ticket) -> bool {
        let Some(key) = self.keys.remove(&ticket) else {
            return false;
        };
        if let Some(queue) = self.queues.get_mut(&key) {
            queue.retain(|t| *t != ticket);
            if queue.is_empty() {
                self.queues.remove(&key);
                self.ring.retain(|k| *k != key);
            }
        }
        true
    }

    /// Permits nobody holds.
    pub fn free(&self) -> usize {
        self.free
    }

    /// Tickets waiting.
    pub fn waiting(&self) -> usize {
        self.keys.len()
    }

    /// Keys with tickets waiting.
    pub fn keys_waiting(&self) -> usize {
        self.ring.len()
    }
}

/// The permits of one controller's workers, handed out by [`RoundRobin`] to async waiters.
#[derive(Clone)]
pub struct Gate {
    permits: usize,
    shared: Arc<Mutex<Shared>>,
}

struct Shared {
    order: RoundRobin<Arc<str>>,
    /// Where each waiting ticket is told it has its permit.
    senders: HashMap<Ticket, oneshot::Sender<Permit>>,
    next: Ticket,
    closed: bool,
}

impl Gate {
    /// A gate of `permits` permits (at least 1).
    pub fn new(permits: usize) -> Self {
        let permits = permits.max(1);
        Gate {
            permits,
            shared: Arc::new(Mutex::new(Shared {
                order: RoundRobin::new(permits),
                senders: HashMap::new(),
                next: 0,
                closed: false,
            })),
        }
    }

    /// A permit for `key`, in turn; None once the gate is closed. Dropping the future stops
    /// the wait (a permit handed to it meanwhile goes to the next waiter).
    pub async fn acquire(&self, key: &str) -> Option<Permit> {
        let (ticket, granted) = {
            let mut s = self.shared.lock();
            if s.closed {
                return None;
            }
            let ticket = s.next;
            s.next = s.next.wrapping_add(1);
            if s.order.request(Arc::from(key), ticket) {
                return Some(Permit::of(self));
            }
            let (tx, rx) = oneshot::channel();
            s.senders.insert(ticket, tx);
            (ticket, rx)
        };
        // Dropped with the future: the ticket stops waiting (a permit sent to it meanwhile
        // is dropped with `granted`, and so given back).
        let mut waiting = Waiting {
            gate: self,
            ticket,
            armed: true,
        };
        let permit = granted.await.ok();
        waiting.armed = false;
        permit
    }

    /// Hands a given-back permit to the next waiter in turn, or frees it.
    fn give_back(&self) {
        loop {
            let sender = {
                let mut s = self.shared.lock();
                match s.order.release() {
                    None => return,
                    Some(ticket) => s.senders.remove(&ticket),
                }
            };
            // A waiter gone meanwhile (or none to tell, which cannot be): the permit goes
            // to the next one.
            let Some(tx) = sender else {
                continue;
            };
            match tx.send(Permit::of(self)) {
                Ok(()) => return,
                Err(mut unused) => unused.gate = None,
            }
        }
    }

    /// No permit is handed out any more: waiters get None at once (permits held are given
    /// back as usual).
    pub fn close(&self) {
        let mut s = self.shared.lock();
        s.closed = true;
        let waiting: Vec<Ticket> = s.senders.keys().copied().collect();
        for ticket in waiting {
            s.order.cancel(ticket);
        }
        s.senders.clear();
    }

    /// Permits held now (workers in use).
    pub fn in_use(&self) -> usize {
        self.permits.saturating_sub(self.shared.lock().order.free())
    }

    /// `(reconciles, namespaces)` waiting for a permit now.
    pub fn waiting(&self) -> (usize, usize) {
        let s = self.shared.lock();
        (s.order.waiting(), s.order.keys_waiting())
    }
}

/// A ticket's wait, ended (the ticket cancelled) when the waiting future is dropped.
struct Waiting<'a> {
    gate: &'a Gate,
    ticket: Ticket,
    armed: bool,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let mut s = self.gate.shared.lock();
        if s.order.cancel(self.ticket) {
            s.senders.remove(&self.ticket);
        }
    }
}

/// One worker of a [`Gate`], given back when dropped.
pub struct Permit {
    gate: Option<Gate>,
}

impl Permit {
    fn of(gate: &Gate) -> Self {
        Permit {
            gate: Some(gate.clone()),
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if let Some(gate) = self.gate.take() {
            gate.give_back();
        }
    }
}

/// The worker of one reconcile: one of its namespace's [`Slots`] for the whole reconcile,
/// and a permit of its controller's [`Gate`], which it gives back for its waits on the
/// network ([`Worker::away`]).
pub struct Worker {
    gate: Gate,
    key: Arc<str>,
    permit: Mutex<Option<Permit>>,
    _in_progress: Slot,
}

/// How a reconcile's start went.
pub enum Start {
    /// It has its namespace's slot and a worker.
    Working(Worker),
    /// Its namespace has as many reconciles in progress as it may: it is parked, and
    /// reconciled again (woken) when one of them ends.
    Parked,
    /// The gate is closed (the operator is stopping).
    Closed,
}

impl Worker {
    /// Takes one of `key`'s slots for `parent` (or parks it), then waits for a worker of
    /// `gate` in `key`'s turn.
    pub async fn start<P: Hash + Eq + Clone + Send + 'static>(
        gate: &Gate,
        key: &str,
        in_progress: &Slots<P>,
        parent: P,
    ) -> Start {
        let Some(slot) = in_progress.try_acquire(key, parent) else {
            return Start::Parked;
        };
        match gate.acquire(key).await {
            None => Start::Closed,
            Some(permit) => Start::Working(Worker {
                gate: gate.clone(),
                key: Arc::from(key),
                permit: Mutex::new(Some(permit)),
                _in_progress: slot,
            }),
        }
    }

    /// Runs `wait` without holding the worker: the permit is given back, and taken again in
    /// turn once `wait` is over (none once the gate is closed: the reconcile ends without
    /// one). The reconcile keeps its namespace's slot.
    pub async fn away<F: Future>(&self, wait: F) -> F::Output {
        drop(self.take());
        let out = wait.await;
        let permit = self.gate.acquire(&self.key).await;
        *self.permit.lock() = permit;
        out
    }

    fn take(&self) -> Option<Permit> {
        self.permit.lock().take()
    }
}

#[cfg(test)]
mod tests;

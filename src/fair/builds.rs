//! The kustomize build slots (`--kustomize-concurrency`), shared between namespaces.
//!
//! A build runs a child process for as long as its overlay takes (a heavy overlay: a minute),
//! and a running build cannot be taken back, so round robin alone is not fair: with N slots,
//! a namespace holding all N makes a newcomer wait for one of its builds to end. So:
//!
//! - **the last free slot is kept for a namespace with no build running**: a namespace that
//!   has a build running takes another slot only while two or more are free. One namespace
//!   alone holds at most N − 1 slots (N ≥ 2), and a namespace that starts building gets a
//!   slot at once unless N namespaces each have one running;
//! - **waiting builds queue per namespace** (first come, first served within one), and the
//!   namespaces with builds waiting are served **round robin**: a slot given back goes to the
//!   first waiter of the next namespace in turn that may take it (namespaces that may not,
//!   under the rule above, keep their place);
//! - with one slot (`--kustomize-concurrency 1`) there is nothing to keep: the slot goes
//!   round robin.
//!
//! [`Lanes`] is the scheduling rule, pure; [`BuildSlots`] hands out its slots to async
//! waiters ([`BuildSlot`]s go back when dropped, a waiter that goes away stops waiting).

use std::{
    collections::{HashMap, VecDeque},
    hash::Hash,
    sync::Arc,
};

use parking_lot::Mutex;
use tokio::sync::oneshot;

use super::Ticket;

/// Slots shared between keys (namespaces): round robin, the last free slot kept for a key
/// holding none (see the module documentation).
#[derive(Debug)]
pub struct Lanes<K> {
    slots: usize,
    free: usize,
    /// Slots each key holds (keys holding none are not kept).
    held: HashMap<K, usize>,
    /// Keys with waiters, in the order they are served.
    ring: VecDeque<K>,
    /// Each key's waiters, in the order they asked.
    queues: HashMap<K, VecDeque<Ticket>>,
    /// The key of each waiting ticket.
    keys: HashMap<Ticket, K>,
}

impl<K: Eq + Hash + Clone> Lanes<K> {
    /// `slots` slots (at least 1).
    pub fn new(slots: usize) -> Self {
        let slots = slots.max(1);
        Lanes {
            slots,
            free: slots,
            held: HashMap::new(),
            ring: VecDeque::new(),
            queues: HashMap::new(),
            keys: HashMap::new(),
        }
    }

    /// Whether `key` may take a slot now: one is free, and it is not the last one while
    /// `key` already holds one.
    fn may_take(&self, key: &K) -> bool {
        let holds = self.held.get(key).copied().unwrap_or(0);
        self.free > 0 && (holds == 0 || self.free >= 2)
    }

    fn take(&mut self, key: K) {
        self.free -= 1;
        *self.held.entry(key).or_insert(0) += 1;
    }

    /// `ticket` asks for a slot for `key`: true when it has one at once, otherwise it waits
    /// behind `key`'s earlier waiters.
    pub fn request(&mut self, key: K, ticket: Ticket) -> bool {
        let queue_empty = self.queues.get(&key).is_none_or(VecDeque::is_empty);
        if queue_empty && self.may_take(&key) {
            self.take(key);
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

    /// A slot of `key` is given back; returns the tickets that now have a slot, with their
    /// keys (each the first waiter of the next key in turn that may take one).
    pub fn release(&mut self, key: &K) -> Vec<(Ticket, K)> {
        if let Some(n) = self.held.get_mut(key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.held.remove(key);
            }
            self.free = (self.free + 1).min(self.slots);
        }
        let mut granted = Vec::new();
        while let Some(grant) = self.next_granted() {
            granted.push(grant);
        }
        granted
    }

    /// The first waiter of the first key in the ring that may take a slot, given one (its key
    /// goes to the back of the ring if it has more waiters); None when no waiter may.
    fn next_granted(&mut self) -> Option<(Ticket, K)> {
        let at = self.ring.iter().position(|k| self.may_take(k))?;
        let key = self.ring.remove(at)?;
        let queue = self.queues.get_mut(&key)?;
        let ticket = queue.pop_front()?;
        if queue.is_empty() {
            self.queues.remove(&key);
        } else {
            self.ring.push_back(key.clone());
        }
        self.keys.remove(&ticket);
        self.take(key.clone());
        Some((ticket, key))
    }

    /// `ticket` stops waiting; false when it was not waiting (it has its slot already).
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

    /// Slots held now.
    pub fn in_use(&self) -> usize {
        self.slots - self.free
    }

    /// Tickets waiting.
    pub fn waiting(&self) -> usize {
        self.keys.len()
    }

    /// Keys with tickets waiting.
    pub fn keys_waiting(&self) -> usize {
        self.ring.len()
    }

    /// Keys kept in memory: holding a slot or waiting for one.
    pub fn keys(&self) -> usize {
        let waiting_only = self
            .queues
            .keys()
            .filter(|k| !self.held.contains_key(*k))
            .count();
        self.held.len() + waiting_only
    }
}

/// The build slots of the operator, handed out by [`Lanes`] to async waiters.
#[derive(Clone)]
pub struct BuildSlots {
    slots: usize,
    shared: Arc<Mutex<Shared>>,
}

struct Shared {
    lanes: Lanes<Arc<str>>,
    /// Where each waiting ticket is told it has its slot.
    senders: HashMap<Ticket, oneshot::Sender<BuildSlot>>,
    next: Ticket,
}

impl BuildSlots {
    /// `slots` slots (at least 1).
    pub fn new(slots: usize) -> Self {
        let slots = slots.max(1);
        BuildSlots {
            slots,
            shared: Arc::new(Mutex::new(Shared {
                lanes: Lanes::new(slots),
                senders: HashMap::new(),
                next: 0,
            })),
        }
    }

    /// A slot for a build of namespace `key`, in turn. Dropping the future stops the wait (a
    /// slot handed to it meanwhile goes to the next waiter).
    pub async fn acquire(&self, key: &str) -> BuildSlot {
        let key: Arc<str> = Arc::from(key);
        let (ticket, granted) = {
            let mut s = self.shared.lock();
            let ticket = s.next;
            s.next = s.next.wrapping_add(1);
            if s.lanes.request(key.clone(), ticket) {
                return BuildSlot::of(self, key);
            }
            let (tx, rx) = oneshot::channel();
            s.senders.insert(ticket, tx);
            (ticket, rx)
        };
        let mut waiting = Waiting {
            slots: self,
            ticket,
            armed: true,
        };
        // The sender is dropped only with the slots' state, which `self` holds: a slot
        // always comes. Were it ever dropped, waiting for ever is what the caller's deadline
        // bounds.
        let slot = match granted.await {
            Ok(slot) => slot,
            Err(_) => std::future::pending().await,
        };
        waiting.armed = false;
        slot
    }

    /// Gives back a slot of `key`, handing what frees to the next waiters in turn.
    fn give_back(&self, key: &Arc<str>) {
        let mut grants = self.shared.lock().lanes.release(key);
        while let Some((ticket, granted)) = grants.pop() {
            let sender = self.shared.lock().senders.remove(&ticket);
            let slot = BuildSlot::of(self, granted.clone());
            let unused = match sender {
                Some(tx) => tx.send(slot).err(),
                None => Some(slot),
            };
            // The waiter went away meanwhile: its slot is given back, in turn.
            if let Some(mut unused) = unused {
                unused.slots = None;
                grants.extend(self.shared.lock().lanes.release(&granted));
            }
        }
    }

    /// Slots held now.
    pub fn in_use(&self) -> usize {
        self.shared.lock().lanes.in_use()
    }

    /// `(builds, namespaces)` waiting for a slot now.
    pub fn waiting(&self) -> (usize, usize) {
        let s = self.shared.lock();
        (s.lanes.waiting(), s.lanes.keys_waiting())
    }

    /// Namespaces kept in memory (holding a slot or waiting for one).
    pub fn namespaces(&self) -> usize {
        self.shared.lock().lanes.keys()
    }

    /// The number of slots.
    pub fn slots(&self) -> usize {
        self.slots
    }
}

/// A ticket's wait, ended (the ticket cancelled) when the waiting future is dropped.
struct Waiting<'a> {
    slots: &'a BuildSlots,
    ticket: Ticket,
    armed: bool,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let mut s = self.slots.shared.lock();
        if s.lanes.cancel(self.ticket) {
            s.senders.remove(&self.ticket);
        }
    }
}

/// One build slot of a namespace, given back when dropped.
pub struct BuildSlot {
    slots: Option<BuildSlots>,
    key: Arc<str>,
}

impl BuildSlot {
    fn of(slots: &BuildSlots, key: Arc<str>) -> Self {
        BuildSlot {
            slots: Some(slots.clone()),
            key,
        }
    }
}

impl Drop for BuildSlot {
    fn drop(&mut self) {
        if let Some(slots) = self.slots.take() {
            slots.give_back(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Asks for a slot for each of `keys` in turn (tickets from `first`); which got one.
    fn ask(l: &mut Lanes<&'static str>, first: Ticket, keys: &[&'static str]) -> Vec<bool> {
        keys.iter()
            .enumerate()
            .map(|(i, k)| l.request(*k, first + i as Ticket))
            .collect()
    }

    fn tickets(grants: Vec<(Ticket, &'static str)>) -> Vec<Ticket> {
        grants.into_iter().map(|(t, _)| t).collect()
    }

    #[test]
    fn one_namespace_alone_leaves_the_last_slot_free() {
        let mut l = Lanes::new(2);
        assert_eq!(ask(&mut l, 0, &["a", "a", "a"]), [true, false, false]);
        assert_eq!((l.in_use(), l.waiting(), l.keys_waiting()), (1, 2, 1));
        // The newcomer gets the kept slot at once.
        assert!(l.request("b", 10));
        assert_eq!(l.in_use(), 2);
        // b's build ends: a may not take the last free slot while it holds one.
        assert!(l.release(&"b").is_empty());
        // a's build ends: its next waiter takes the freed slot.
        assert_eq!(tickets(l.release(&"a")), [1]);
        assert_eq!(tickets(l.release(&"a")), [2]);
        assert!(l.release(&"a").is_empty());
        assert_eq!((l.in_use(), l.waiting(), l.keys()), (0, 0, 0));
    }

    #[test]
    fn with_more_slots_a_namespace_takes_all_but_one() {
        let mut l = Lanes::new(4);
        assert_eq!(
            ask(&mut l, 0, &["a", "a", "a", "a", "a"]),
            [true, true, true, false, false]
        );
        // Every newcomer gets a slot while one is free; then they queue round robin.
        assert!(l.request("b", 10));
        assert!(!l.request("c", 11));
        assert_eq!(l.keys_waiting(), 2);
        // One of a's ends: a, first in the ring, may not take the last free slot (it holds
        // two); c, with no build running, may.
        assert_eq!(tickets(l.release(&"a")), [11]);
        assert_eq!(l.keys_waiting(), 1);
        // b ends: one slot is free, the last, and a holds two.
        assert!(l.release(&"b").is_empty());
        // c ends: two free, a takes one of them, leaving the last.
        assert_eq!(tickets(l.release(&"c")), [3]);
        assert_eq!(l.in_use(), 3);
    }

    #[test]
    fn namespaces_waiting_are_served_round_robin_each_in_order() {
        let mut l = Lanes::new(1);
        assert!(l.request("held", 100));
        ask(&mut l, 0, &["a", "a", "a", "b", "b", "c"]);
        let mut order = Vec::new();
        let mut holder = "held";
        for _ in 0..6 {
            let granted = l.release(&holder);
            assert_eq!(granted.len(), 1, "one slot, one grant");
            order.push(granted[0].0);
            holder = granted[0].1;
        }
        assert_eq!(order, [0, 3, 5, 1, 4, 2]);
        assert!(l.release(&holder).is_empty());
        assert_eq!((l.in_use(), l.keys()), (0, 0));
    }

    #[test]
    fn a_cancelled_waiter_is_forgotten_and_its_namespace_too() {
        let mut l = Lanes::new(2);
        assert_eq!(ask(&mut l, 0, &["a", "a", "b"]), [true, false, true]);
        assert!(!l.request("c", 3));
        assert_eq!(l.keys(), 3);
        assert!(l.cancel(3));
        assert!(!l.cancel(3), "no longer waiting");
        assert!(!l.cancel(0), "has its slot");
        assert_eq!((l.waiting(), l.keys_waiting(), l.keys()), (1, 1, 2));
        assert!(l.release(&"b").is_empty(), "a may not take the last slot");
        assert_eq!(tickets(l.release(&"a")), [1]);
        assert!(l.release(&"a").is_empty());
        assert_eq!((l.in_use(), l.waiting(), l.keys()), (0, 0, 0));
    }

    /// Whatever the order of requests, releases and cancels: no key holds every slot while
    /// another waits (slots ≥ 2), a key holding none never waits while a slot is free, and
    /// the counts add up.
    #[test]
    fn no_namespace_holds_every_slot_while_another_waits() {
        use proptest::prelude::*;
        let op = (0u8..3, 0u8..4);
        proptest!(|(slots in 1usize..5, ops in proptest::collection::vec(op, 1..200))| {
            let keys = ["a", "b", "c", "d"];
            let mut l = Lanes::new(slots);
            let mut holders: Vec<&'static str> = Vec::new();
            let mut waiting: Vec<(Ticket, &'static str)> = Vec::new();
            for (i, (what, k)) in ops.into_iter().enumerate() {
                let key = keys[usize::from(k)];
                match what {
                    0 => {
                        if l.request(key, i as Ticket) {
                            holders.push(key);
                        } else {
                            waiting.push((i as Ticket, key));
                        }
                    }
                    1 => {
                        if let Some(at) = holders.iter().position(|h| *h == key) {
                            let h = holders.remove(at);
                            for (t, g) in l.release(&h) {
                                waiting.retain(|(w, _)| *w != t);
                                holders.push(g);
                            }
                        }
                    }
                    _ => {
                        if let Some(at) = waiting.iter().position(|(_, w)| *w == key) {
                            let (t, _) = waiting.remove(at);
                            prop_assert!(l.cancel(t));
                        }
                    }
                }
                prop_assert_eq!(l.in_use(), holders.len());
                prop_assert_eq!(l.waiting(), waiting.len());
                let free = slots - holders.len();
                for (_, w) in &waiting {
                    let holds = holders.iter().filter(|h| *h == w).count();
                    prop_assert!(free == 0 || (holds > 0 && free < 2), "{w} waits while it may take a slot");
                    if slots >= 2 {
                        for k in keys {
                            let n = holders.iter().filter(|h| **h == k).count();
                            prop_assert!(n < slots, "{k} holds every slot while {w} waits");
                        }
                    }
                }
            }
        });
    }

    #[tokio::test]
    async fn a_waiter_gets_its_slot_when_one_is_given_back_and_a_dropped_one_gives_it_on() {
        let slots = BuildSlots::new(2);
        let a1 = slots.acquire("a").await;
        let b1 = slots.acquire("b").await;
        let (s2, s3) = (slots.clone(), slots.clone());
        let a2 = tokio::spawn(async move { s2.acquire("a").await });
        let c1 = tokio::spawn(async move { s3.acquire("c").await });
        tokio::time::timeout(Duration::from_secs(5), async {
            while slots.waiting() != (2, 2) {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("both wait");
        // b's slot goes to c: a, first in turn, may not take the last free slot.
        drop(b1);
        let c1 = tokio::time::timeout(Duration::from_secs(5), c1)
            .await
            .expect("c gets a slot")
            .expect("joined");
        assert_eq!(slots.waiting(), (1, 1));
        // A waiter that goes away stops waiting.
        a2.abort();
        let _ = a2.await;
        assert_eq!(slots.waiting(), (0, 0));
        drop((a1, c1));
        assert_eq!((slots.in_use(), slots.namespaces()), (0, 0));
    }
}

use std::{
    collections::{HashMap, VecDeque},
    sync::Arc,
    time::Duration,
};

use parking_lot::Mutex;
use proptest::prelude::*;

use super::*;

/// Tickets 0.. of `rr`, one per key in `keys`, in order; returns which were granted at once.
fn ask(rr: &mut RoundRobin<&'static str>, first: Ticket, keys: &[&'static str]) -> Vec<bool> {
    keys.iter()
        .enumerate()
        .map(|(i, k)| rr.request(*k, first + i as Ticket))
        .collect()
}

/// The tickets `n` releases go to.
fn releases(rr: &mut RoundRobin<&'static str>, n: usize) -> Vec<Option<Ticket>> {
    (0..n).map(|_| rr.release()).collect()
}

#[test]
fn one_key_alone_takes_every_permit() {
    let mut rr = RoundRobin::new(3);
    assert_eq!(
        ask(&mut rr, 0, &["a", "a", "a", "a"]),
        [true, true, true, false]
    );
    assert_eq!(rr.free(), 0);
    assert_eq!(rr.waiting(), 1);
    assert_eq!(releases(&mut rr, 1), [Some(3)]);
    // Nobody waits: permits given back are free again, and taken at once.
    assert_eq!(releases(&mut rr, 3), [None, None, None]);
    assert_eq!(rr.free(), 3);
    assert_eq!(ask(&mut rr, 10, &["a", "a", "a"]), [true, true, true]);
}

#[test]
fn waiting_keys_are_served_round_robin_and_each_in_order() {
    let mut rr = RoundRobin::new(1);
    assert!(rr.request("held", 100));
    // a asks 5 times, then b twice, then c once.
    ask(&mut rr, 0, &["a", "a", "a", "a", "a", "b", "b", "c"]);
    assert_eq!(rr.keys_waiting(), 3);
    let order: Vec<Ticket> = releases(&mut rr, 8).into_iter().flatten().collect();
    assert_eq!(order, [0, 5, 7, 1, 6, 2, 3, 4]);
    assert_eq!(rr.waiting(), 0);
    assert_eq!(rr.keys_waiting(), 0);
    assert_eq!(rr.free(), 0, "the last permit is still held by ticket 4");
    assert_eq!(rr.release(), None);
    assert_eq!(rr.free(), 1);
}

#[test]
fn a_key_that_starts_waiting_joins_the_back_of_the_ring() {
    let mut rr = RoundRobin::new(1);
    assert!(rr.request("a", 0));
    ask(&mut rr, 1, &["a", "a", "a"]);
    assert_eq!(rr.release(), Some(1));
    // b arrives while a still has 2 waiting: served right after a's next.
    assert!(!rr.request("b", 10));
    assert_eq!(releases(&mut rr, 3), [Some(2), Some(10), Some(3)]);
}

#[test]
fn a_cancelled_ticket_stops_waiting_and_its_key_leaves_the_ring() {
    let mut rr = RoundRobin::new(1);
    assert!(rr.request("x", 0));
    ask(&mut rr, 1, &["a", "b", "a"]);
    assert!(rr.cancel(2), "b's only ticket");
    assert!(!rr.cancel(2), "twice");
    assert!(!rr.cancel(0), "a granted ticket is not waiting");
    assert!(!rr.cancel(99), "unknown");
    assert_eq!(rr.keys_waiting(), 1);
    assert!(rr.cancel(1));
    assert_eq!(releases(&mut rr, 2), [Some(3), None]);
    assert_eq!(rr.free(), 1);
}

/// What the scheduler is asked to do in the property test.
#[derive(Clone, Debug)]
enum Op {
    Request(u8),
    Release,
    Cancel(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u8..4).prop_map(Op::Request),
        Just(Op::Release),
        (0u8..16).prop_map(Op::Cancel),
    ]
}

proptest! {
    /// Whatever happens: a permit is free only when nobody waits (work-conserving); permits
    /// are never made up nor lost; each key's tickets are served in order; and a ticket
    /// first of its key is served within as many releases as keys waited when it became
    /// first, plus one (round robin: no starvation).
    #[test]
    fn permits_are_conserved_and_nobody_starves(
        permits in 1usize..4,
        ops in proptest::collection::vec(op(), 1..200),
    ) {
        let mut rr = RoundRobin::new(permits);
        let mut held = 0usize;
        let mut next: Ticket = 0;
        // The model: each key's waiting tickets in order.
        let mut model: HashMap<u8, VecDeque<Ticket>> = HashMap::new();
        // For a ticket first of its key: releases it may still wait for.
        let mut budget: HashMap<Ticket, usize> = HashMap::new();
        let mut waiting_tickets: Vec<Ticket> = Vec::new();
        for op in ops {
            match op {
                Op::Request(k) => {
                    let t = next;
                    next += 1;
                    if rr.request(k, t) {
                        held += 1;
                    } else {
                        let q = model.entry(k).or_default();
                        q.push_back(t);
                        waiting_tickets.push(t);
                        if q.len() == 1 {
                            budget.insert(t, rr.keys_waiting());
                        }
                    }
                }
                Op::Release if held > 0 => {
                    held -= 1;
                    match rr.release() {
                        None => prop_assert!(model.values().all(|q| q.is_empty())),
                        Some(t) => {
                            held += 1;
                            let (&k, _) = model
                                .iter()
                                .find(|(_, q)| q.front() == Some(&t))
                                .expect("granted ticket is first of its key");
                            let q = model.get_mut(&k).expect("key");
                            q.pop_front();
                            budget.remove(&t);
                            waiting_tickets.retain(|w| *w != t);
                            if let Some(&n) = q.front() {
                                budget.insert(n, rr.keys_waiting());
                            }
                            for b in budget.values_mut() {
                                prop_assert!(*b > 0, "a ticket waited longer than its turn");
                                *b -= 1;
                            }
                        }
                    }
                }
                Op::Release => {}
                Op::Cancel(i) => {
                    let Some(&t) = waiting_tickets.get(usize::from(i)) else { continue };
                    prop_assert!(rr.cancel(t));
                    waiting_tickets.retain(|w| *w != t);
                    budget.remove(&t);
                    for q in model.values_mut() {
                        let was_first = q.front() == Some(&t);
                        q.retain(|w| *w != t);
                        if was_first && let Some(&n) = q.front() {
                            budget.insert(n, rr.keys_waiting());
                        }
                    }
                }
            }
            prop_assert_eq!(rr.free() + held, permits, "permits conserved");
            let waiting: usize = model.values().map(VecDeque::len).sum();
            prop_assert_eq!(rr.waiting(), waiting);
            prop_assert!(rr.free() == 0 || waiting == 0, "work-conserving");
        }
    }
}

#[tokio::test]
async fn a_permit_dropped_goes_to_the_next_namespace_in_turn() {
    let gate = Gate::new(1);
    let held = gate.acquire("a").await.expect("free");
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for (i, ns) in ["a", "a", "b"].into_iter().enumerate() {
        let (waiter, order) = (gate.clone(), order.clone());
        tasks.push(tokio::spawn(async move {
            let p = waiter.acquire(ns).await;
            order.lock().push(i);
            drop(p);
        }));
        // Each asks before the next.
        wait_until(|| gate.waiting().0 == i + 1).await;
    }
    assert_eq!(gate.waiting(), (3, 2));
    assert_eq!(gate.in_use(), 1);
    drop(held);
    for t in tasks {
        t.await.expect("task");
    }
    assert_eq!(*order.lock(), [0, 2, 1]);
    assert_eq!(gate.in_use(), 0);
}

#[tokio::test]
async fn a_waiter_that_goes_away_stops_waiting_and_loses_no_permit() {
    let gate = Gate::new(1);
    let held = gate.acquire("a").await.expect("free");
    // Gone before a permit came.
    let wait = tokio::time::timeout(Duration::from_millis(20), gate.acquire("b")).await;
    assert!(wait.is_err());
    assert_eq!(gate.waiting(), (0, 0));
    // Gone after a permit was sent, before it was received: the permit is given back.
    let mut pending = Box::pin(gate.acquire("c"));
    assert!(futures::poll!(&mut pending).is_pending());
    drop(held);
    drop(pending);
    assert_eq!(gate.in_use(), 0);
    assert!(gate.acquire("d").await.is_some());
}

#[tokio::test]
async fn a_closed_gate_answers_its_waiters_and_hands_out_nothing() {
    let gate = Gate::new(1);
    let held = gate.acquire("a").await.expect("free");
    let waiter = tokio::spawn({
        let gate = gate.clone();
        async move { gate.acquire("b").await.is_some() }
    });
    wait_until(|| gate.waiting().0 == 1).await;
    gate.close();
    assert!(!waiter.await.expect("task"), "closed: no permit");
    assert!(gate.acquire("c").await.is_none());
    drop(held);
    assert_eq!(gate.in_use(), 0);
}

/// Slots whose woken parents are recorded in `woken`.
fn recorded_slots(per_key: usize) -> (Slots<u32>, Arc<Mutex<Vec<u32>>>) {
    let woken = Arc::new(Mutex::new(Vec::new()));
    let record = woken.clone();
    let slots = Slots::new(per_key, move |p| record.lock().push(p));
    (slots, woken)
}

#[test]
fn slots_bound_each_key_alone_park_the_rest_and_wake_them_in_order() {
    let (slots, woken) = recorded_slots(2);
    let a1 = slots.try_acquire("a", 1).expect("free");
    let a2 = slots.try_acquire("a", 2).expect("free");
    assert!(slots.try_acquire("a", 3).is_none(), "a is full: 3 parked");
    assert!(slots.try_acquire("a", 4).is_none(), "4 parked");
    assert!(slots.try_acquire("a", 3).is_none(), "3 again: parked once");
    assert_eq!(slots.parked(), 2);
    let b = slots
        .try_acquire("b", 10)
        .expect("b is not queued behind a");
    drop(b);
    assert_eq!(slots.keys(), 1, "b forgotten once idle");
    // A slot frees: the first parked is woken, and the slot kept for it.
    drop(a1);
    assert_eq!(*woken.lock(), [3]);
    assert!(
        slots.try_acquire("a", 5).is_none(),
        "kept for 3, not taken by 5"
    );
    let a3 = slots.try_acquire("a", 3).expect("kept for 3");
    drop(a2);
    assert_eq!(*woken.lock(), [3, 4]);
    let a4 = slots.try_acquire("a", 4).expect("kept for 4");
    drop((a3, a4));
    assert_eq!(*woken.lock(), [3, 4, 5]);
    // 5 never comes back (deleted): forgetting it frees its slot.
    slots.forget("a", &5);
    assert_eq!(slots.keys(), 0, "nothing held, kept or parked");
}

#[test]
fn a_parked_parent_that_comes_by_itself_is_no_longer_parked() {
    let (slots, woken) = recorded_slots(1);
    let held = slots.try_acquire("a", 1).expect("free");
    assert!(slots.try_acquire("a", 2).is_none());
    assert!(slots.try_acquire("a", 3).is_none());
    drop(held);
    assert_eq!(*woken.lock(), [2]);
    // 3 is forgotten while parked; 2 is forgotten while woken: its slot is free again.
    slots.forget("a", &3);
    slots.forget("a", &2);
    assert_eq!(slots.keys(), 0);
    let again = slots.try_acquire("a", 3).expect("free");
    drop(again);
    assert_eq!(*woken.lock(), [2], "3 was not parked any more");
}

#[tokio::test]
async fn a_worker_away_holds_no_permit_and_takes_one_again_in_turn() {
    let gate = Gate::new(1);
    let (slots, _) = recorded_slots(1);
    let Start::Working(worker) = Worker::start(&gate, "slow", &slots, 1).await else {
        panic!("a worker is free");
    };
    // The namespace's one slot is the worker's: its next reconcile is parked.
    assert!(matches!(
        Worker::start(&gate, "slow", &slots, 2).await,
        Start::Parked
    ));
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    {
        let away = worker.away(async {
            let _ = rx.await;
            7
        });
        tokio::pin!(away);
        assert!(futures::poll!(&mut away).is_pending());
        assert_eq!(gate.in_use(), 0, "the worker was given back for the wait");
        // Another namespace works meanwhile.
        let other = gate.acquire("other").await.expect("free while slow waits");
        let _ = tx.send(());
        assert!(
            futures::poll!(&mut away).is_pending(),
            "back in turn, after other"
        );
        drop(other);
        assert_eq!(away.await, 7);
    }
    assert_eq!(gate.in_use(), 1, "the worker holds a permit again");
    drop(worker);
    assert_eq!(gate.in_use(), 0);
    assert_eq!(slots.keys(), 1, "the slot is kept for 2, woken");
    gate.close();
    assert!(matches!(
        Worker::start(&gate, "slow", &slots, 2).await,
        Start::Closed
    ));
}

/// Polls `check` until it holds (a few seconds at most).
async fn wait_until(check: impl Fn() -> bool) {
    for _ in 0..500 {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("condition not reached");
}

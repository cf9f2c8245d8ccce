//! The model-based randomized test (docs/testing.md): a seeded random walk of steps over five
//! parents (three ApplySets, two ClusterApplySets) on a real control plane, checked after
//! every step against a reference model of what the cluster must contain.
//!
//! Steps: add, change, remove and move members (ConfigMaps, Secrets, Services, Widgets of a
//! CRD the test installs, Namespaces, and a Gadget CRD with its Gadgets, across namespaces
//! and between parents); toggle `prune`, `suspend`, `deletionPolicy`, `allowEmpty`, `force`;
//! delete and re-create parents; foreign actors (a field taken with force, the `part-of` label
//! copied onto a foreign object, a member deleted, `prune: disabled` added, the parent's
//! annotations edited, its `tooling` set to another tool); a drop racing a foreign
//! `prune: disabled`; and faults: SIGKILL of the operator process at a random moment or
//! between apply and prune, a restart of kube-apiserver (etcd keeps its data), the
//! operator's connections — its watches — cut, a namespace deleted under live sets and
//! created again, the operator throttled by kube-apiserver (HTTP 429, [`throttle`]), and,
//! for two seeds in three, which run replicas under `--shards auto` ([`replicas`]), a
//! replica SIGKILLed (started again under its name or not) and a replica started.
//!
//! After each step the walk waits until the cluster matches the model ([`check`]): every
//! declared member exists with its content and label; nothing the model keeps was deleted or
//! written (fatal at once); nothing labelled by a parent remains that the model says is gone
//! (no leaks); every parent shows the model's Ready condition and annotations that describe
//! at least its live members.
//!
//! `MODEL_SEED` (a number, or `random`) and `MODEL_STEPS` (default 150) choose the walk of
//! `walk_with_seed` (default: a fixed seed); `walk_with_random_seed` runs a random seed,
//! printed first, unless `MODEL_SEED` is set. A failure names the seed and step and lists
//! the steps; the same seed replays the same walk: `make soak SEED=… STEPS=…`. Both run in
//! `make test`.
//!
//! Each walk has a control plane of its own: restarting its kube-apiserver must not disturb
//! other tests. The walk's sets act as the operator across namespaces (the operator runs
//! with `--allow-cross-namespace-sets`) and never declare an object someone else created, so
//! the tenancy rules (tests/tenancy.rs) do not change what the model expects.

// The one #[path]: the walk is a test target one directory down from tests/support.
#[path = "../support/mod.rs"]
mod support;

use support::{operator, process};

mod bugs;
mod check;
mod proxy;
mod replicas;
mod rng;
mod state;
mod steps;
mod throttle;
mod universe;
mod walk;
mod world;

use std::{io::Write as _, time::Instant};

use steps::Enabled;
use walk::Walk;

/// The seed of `walk_with_seed` when `MODEL_SEED` is not set.
const DEFAULT_SEED: u64 = 1111;
/// Steps of a walk when `MODEL_STEPS` is not set.
const DEFAULT_STEPS: usize = 150;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn walk_with_seed() {
    let seed = match std::env::var("MODEL_SEED").ok().as_deref() {
        None | Some("") => DEFAULT_SEED,
        Some("random") => rng::random_seed(),
        Some(s) => parse_seed(s),
    };
    walk(seed, steps()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn walk_with_random_seed() {
    if std::env::var("MODEL_SEED").is_ok_and(|s| !s.is_empty()) {
        announce("walk_with_random_seed: skipped, MODEL_SEED is set");
        return;
    }
    walk(rng::random_seed(), steps()).await;
}

fn parse_seed(s: &str) -> u64 {
    let parsed = match s.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => s.parse(),
    };
    parsed.unwrap_or_else(|e| panic!("MODEL_SEED={s:?} is not a number or \"random\": {e}"))
}

fn steps() -> usize {
    std::env::var("MODEL_STEPS")
        .ok()
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse()
                .unwrap_or_else(|e| panic!("MODEL_STEPS={s:?} is not a number: {e}"))
        })
        .unwrap_or(DEFAULT_STEPS)
}

/// Prints to the real stderr, past the test harness's capture (the seed must show even when
/// the walk passes).
fn announce(msg: &str) {
    let _ = writeln!(std::io::stderr(), "{msg}");
}

/// A flag of the environment: `MODEL_NO_FAULTS=1` etc.
fn env_flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| !v.is_empty() && v != "0")
}

async fn walk(seed: u64, steps: usize) {
    announce(&format!(
        "model walk: seed {seed}, {steps} steps (replay: make soak SEED={seed} STEPS={steps})"
    ));
    let started = Instant::now();
    // MODEL_VERBOSE=1 prints every step as it passes, with the time it took.
    let verbose = env_flag("MODEL_VERBOSE");
    let enabled = Enabled {
        faults: !env_flag("MODEL_NO_FAULTS"),
        races: !env_flag("MODEL_NO_RACES"),
        apiserver_restarts: !env_flag("MODEL_NO_APISERVER_RESTART"),
        namespace_deletions: !env_flag("MODEL_NO_NAMESPACE_DELETION"),
    };
    // MODEL_THROTTLE=off: kube-apiserver without priority and fairness, the operator as
    // system:masters (no 429s); =always: the operator throttled all along, not only in the
    // throttling steps.
    let throttling = match std::env::var("MODEL_THROTTLE").ok().as_deref() {
        None | Some("") | Some("steps") => world::Throttling::Steps,
        Some("off") => world::Throttling::Off,
        Some("always") => world::Throttling::Always,
        Some(v) => panic!("MODEL_THROTTLE={v:?}: steps, off or always"),
    };
    let setup = world::Setup {
        throttling,
        mode: replicas::Mode::of_seed(seed),
    };
    let mut w = Walk::start(seed, steps, setup).await;
    for i in 1..=steps {
        let step = if i <= universe::SETS.len() {
            steps::initial(&mut w.rng, &w.model, i - 1)
        } else {
            steps::at(i, &mut w.rng, &w.model, enabled)
        };
        w.log.push(format!("{i:>5}. {step}"));
        *w.tally.entry(step.kind_name()).or_default() += 1;
        let t0 = Instant::now();
        if let Err(e) = w.perform(&step).await {
            w.fail(i, &e);
        }
        if verbose {
            announce(&format!("{i:>5}. {step} [{:.1?}]", t0.elapsed()));
        }
        // A long soak says how far it got, so that one stopped by hand still has its figures.
        if i % PROGRESS_EVERY == 0 && i < steps {
            announce(&format!(
                "model walk: seed {seed}, {i} of {steps} steps passed in {:.0?}: {}",
                started.elapsed(),
                faults(&w).await
            ));
        }
    }
    let tally: Vec<String> = w.tally.iter().map(|(k, n)| format!("{n} {k}")).collect();
    let mode = match w.world.operators.mode() {
        replicas::Mode::Single => "one operator".to_owned(),
        replicas::Mode::Sharded(n) => format!("{n} replicas under --shards auto"),
    };
    announce(&format!(
        "model walk: seed {seed}, {steps} steps passed in {:.0?} ({mode}): 0 wrong deletions, 0 leaks, every set converged (slowest settle {:.1?}); {}; races: {} annotations landed, {} found the object pruned; steps: {}",
        started.elapsed(),
        w.slowest,
        faults(&w).await,
        w.race_aim.landed,
        w.race_aim.pruned,
        tally.join(", ")
    ));
}

/// Steps between two progress lines of a long walk.
const PROGRESS_EVERY: usize = 500;

/// The faults of the walk so far, each kind counted, with the 429s the operator received.
async fn faults(w: &Walk) -> String {
    let count = |k: &str| w.tally.get(k).copied().unwrap_or(0);
    let rejected = match w.world.rejected().await {
        Ok(n) => n.to_string(),
        Err(e) => format!("unknown ({e})"),
    };
    format!(
        "faults: {} replica SIGKILLs ({} started again at once), {} replicas started, {} namespaces deleted, {} throttled steps, {rejected} 429s received by the operator; SIGKILLs between apply and prune: {}",
        count("fault: replica SIGKILL") + count("fault: replica SIGKILL, started again"),
        count("fault: replica SIGKILL, started again"),
        count("fault: replica started"),
        count("fault: namespace deleted"),
        count("fault: throttled"),
        w.hits,
    )
}

//! The model-based randomized test (issue 11): a seeded random walk of steps over five
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
//! between apply and prune, a restart of kube-apiserver (etcd keeps its data), and the
//! operator's connections — its watches — cut.
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
//! the steps; the same seed replays the same walk: `make soak SEED=… STEPS=…`.
//!
//! Each walk has a control plane of its own: restarting its kube-apiserver must not disturb
//! other tests.

#[path = "../support/operator.rs"]
mod operator;
#[path = "../support/process.rs"]
mod process;
#[path = "../support/mod.rs"]
mod support;

mod check;
mod proxy;
mod rng;
mod state;
mod steps;
mod universe;
mod world;

use std::{
    collections::BTreeMap,
    io::Write as _,
    time::{Duration, Instant},
};

use rng::Rng;
use state::Model;
use steps::{Enabled, Step};
use world::World;

/// The seed of `walk_with_seed` when `MODEL_SEED` is not set.
const DEFAULT_SEED: u64 = 1111;
/// Steps of a walk when `MODEL_STEPS` is not set.
const DEFAULT_STEPS: usize = 150;
/// How long the cluster may take to settle after a step.
const SETTLE: Duration = Duration::from_secs(90);
/// ... for a while (`RESTART_RECOVERY`) after kube-apiserver was restarted: the operator's
/// watches resume only after tens of seconds (measured 5–45 s, more after back-to-back
/// restarts).
const SETTLE_AFTER_RESTART: Duration = Duration::from_secs(180);
const RESTART_RECOVERY: Duration = Duration::from_secs(180);

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
    };
    let world = World::start(seed)
        .await
        .unwrap_or_else(|e| panic!("model walk (seed {seed}): setting up: {e}"));
    let mut w = Walk {
        seed,
        steps,
        rng: Rng::new(seed),
        model: Model::new(&universe::foreign_keys()),
        world,
        log: Vec::new(),
        tally: BTreeMap::new(),
        hits: 0,
        race_aim: RaceAim {
            ms: 20,
            landed: 0,
            late: 0,
        },
        restarted: None,
        slowest: Duration::ZERO,
    };
    // The foreign objects exist: learn their UIDs.
    if let Err(e) = w.settle(SETTLE).await {
        w.fail(0, &e);
    }
    for i in 1..=steps {
        let step = if i <= universe::SETS.len() {
            steps::initial(&mut w.rng, &w.model, i - 1)
        } else {
            steps::next(&mut w.rng, &w.model, enabled)
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
    }
    let tally: Vec<String> = w.tally.iter().map(|(k, n)| format!("{n} {k}")).collect();
    announce(&format!(
        "model walk: seed {seed}, {steps} steps passed in {:.0?} (slowest settle {:.1?}); SIGKILLs between apply and prune: {}; races: {} annotations landed, {} found the object pruned; steps: {}",
        started.elapsed(),
        w.slowest,
        w.hits,
        w.race_aim.landed,
        w.race_aim.late,
        tally.join(", ")
    ));
}

/// A walk in progress.
struct Walk {
    seed: u64,
    steps: usize,
    rng: Rng,
    model: Model,
    world: World,
    /// The steps so far, as printed on failure.
    log: Vec<String>,
    tally: BTreeMap<String, u32>,
    /// SIGKILLs that landed between an apply and its prune (the dropped member still there).
    hits: u32,
    race_aim: RaceAim,
    /// When kube-apiserver was last restarted.
    restarted: Option<Instant>,
    /// The longest the cluster took to settle after a step.
    slowest: Duration,
}

/// When a racing annotation is sent after the spec write that drops its object: aimed at
/// the moment the operator prunes, learnt from the earlier races of the walk (one that landed
/// was early, one that found the object gone was late). The window that matters, between the
/// prune's listing and its delete, is a few milliseconds wide.
struct RaceAim {
    ms: u64,
    /// Races whose annotation landed (the object was retained), and that found it pruned.
    landed: u32,
    late: u32,
}

impl RaceAim {
    fn delay(&self, offset_ms: i64) -> u64 {
        self.ms.saturating_add_signed(offset_ms)
    }

    fn learn(&mut self, landed: bool) {
        if landed {
            self.landed += 1;
            self.ms += 3;
        } else {
            self.late += 1;
            self.ms = self.ms.saturating_sub(3);
        }
    }
}

impl Walk {
    /// Carries out a step, lets the operator react, and checks the invariants.
    async fn perform(&mut self, step: &Step) -> Result<(), String> {
        match step {
            Step::Kill { payload, delay_ms } => {
                self.act(payload).await?;
                // The moment of the fault: a random delay, not a wait for anything.
                tokio::time::sleep(Duration::from_millis(*delay_ms)).await;
                self.world.kill_operator();
                self.world.start_operator();
            }
            Step::KillBetweenApplyAndPrune { set, add, drop, .. } => {
                step.apply(&mut self.model);
                self.world
                    .write_spec(*set, &self.model.sets[*set].spec)
                    .await?;
                self.wait_exists(add).await?;
                self.world.kill_operator();
                if self.world.exists(drop).await == Some(true) {
                    self.hits += 1;
                }
                self.world.start_operator();
            }
            Step::RestartApiserver { payload, delay_ms } => {
                self.act(payload).await?;
                tokio::time::sleep(Duration::from_millis(*delay_ms)).await;
                self.world.restart_apiserver()?;
                self.restarted = Some(Instant::now());
            }
            Step::DropWatches { payload, blind_ms } => {
                self.world.proxy.refuse(true);
                self.world.proxy.cut();
                let acted = self.act(payload).await;
                // How long the operator stays cut off: the fault's length.
                tokio::time::sleep(Duration::from_millis(*blind_ms)).await;
                self.world.proxy.refuse(false);
                acted?;
            }
            Step::DropRacingAnnotation {
                set,
                key,
                offset_ms,
            } => {
                let delay = self.race_aim.delay(*offset_ms);
                return self.race(step, *set, key, delay).await;
            }
            _ => self.act(step).await?,
        }
        self.model.converge();
        self.settle(SETTLE).await
    }

    /// A plain step: the model first, then the cluster's writes from the model.
    async fn act(&mut self, step: &Step) -> Result<(), String> {
        let uid = match step {
            Step::ForeignDelete { key } => self.model.objects.get(key).and_then(|o| o.uid.clone()),
            _ => None,
        };
        step.apply(&mut self.model);
        let w = &self.world;
        match step {
            Step::Create { set, .. } => w.create_parent(*set, &self.model.sets[*set].spec).await,
            Step::Edit { .. } | Step::Move { .. } => {
                for s in step.spec_writes() {
                    w.write_spec(s, &self.model.sets[s].spec).await?;
                }
                Ok(())
            }
            Step::Delete { set } => w.delete_parent(*set).await,
            Step::TakeField { key, value } => w.take_field(key, value).await,
            Step::CopyLabel { key, set } => w.copy_label(key, *set).await,
            Step::ForeignDelete { key } => match w.delete_object(key, uid.as_deref()).await? {
                true => Ok(()),
                false => Err(format!("the foreign actor found {key} gone already")),
            },
            Step::ForeignPruneDisabled { key } => match w.annotate_prune_disabled(key).await? {
                true => Ok(()),
                false => Err(format!("the foreign actor found {key} gone")),
            },
            Step::EditAnnotations { set, .. } => {
                w.write_recorded(*set, &self.model.sets[*set].recorded)
                    .await
            }
            Step::Hijack { set } => w.hijack(*set, true).await,
            Step::Release { set } => w.hijack(*set, false).await,
            _ => unreachable!("not a plain step: {step}"),
        }
    }

    /// Drops a member and annotates it `prune: disabled` as a foreign actor `delay_ms` later,
    /// racing the prune. If the annotation landed, the object existed then and must not be
    /// deleted after it; if it found the object gone, the prune was first. Either way the
    /// foreign actor deletes what is left, so the model (and the rest of the walk) does not
    /// depend on who won.
    async fn race(
        &mut self,
        step: &Step,
        set: usize,
        key: &universe::Key,
        delay_ms: u64,
    ) -> Result<(), String> {
        step.apply(&mut self.model);
        let uid = self.model.objects.get(key).and_then(|o| o.uid.clone());
        let spec = self.model.sets[set].spec.clone();
        let world = &self.world;
        let annotate = async {
            tokio::time::sleep(Duration::from_millis(delay_ms)).await;
            world.annotate_prune_disabled(key).await
        };
        let (written, landed) = tokio::join!(world.write_spec(set, &spec), annotate);
        written?;
        let landed = landed?;
        self.race_aim.learn(landed);
        if landed {
            self.model.foreign_prune_disabled(key);
        } else {
            self.model.foreign_delete(key);
        }
        self.model.converge();
        self.settle(SETTLE).await?;
        if self.model.objects.contains_key(key) {
            self.world.delete_object(key, uid.as_deref()).await?;
            self.model.foreign_delete(key);
            self.model.converge();
            self.settle(SETTLE).await?;
        }
        Ok(())
    }

    /// Polls (tightly: the kill must land before the prune) until `key` exists, within the
    /// time the cluster has to settle.
    async fn wait_exists(&self, key: &universe::Key) -> Result<(), String> {
        let timeout = self.settle_timeout(SETTLE);
        let deadline = Instant::now() + timeout;
        while self.world.exists(key).await != Some(true) {
            if Instant::now() > deadline {
                return Err(format!("{key} was not applied within {timeout:?}"));
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        Ok(())
    }

    /// How long the cluster may take to settle: longer for a while after a kube-apiserver
    /// restart (the operator's watches take tens of seconds to resume: see the report of
    /// this test in the README).
    fn settle_timeout(&self, normal: Duration) -> Duration {
        match self.restarted {
            Some(t) if t.elapsed() < RESTART_RECOVERY => normal.max(SETTLE_AFTER_RESTART),
            _ => normal,
        }
    }

    /// Waits until the cluster matches the model; a fatal finding fails at once.
    async fn settle(&mut self, timeout: Duration) -> Result<(), String> {
        self.model.check_consistent()?;
        let timeout = self.settle_timeout(timeout);
        let started = Instant::now();
        let deadline = started + timeout;
        let mut last;
        loop {
            if let Some(why) = self.world.operator_exited() {
                return Err(why);
            }
            match check::observe(&self.world).await {
                Ok(obs) => {
                    let v = check::compare(&self.model, &obs);
                    if !v.fatal.is_empty() {
                        return Err(format!("invariant broken:\n  {}", v.fatal.join("\n  ")));
                    }
                    if v.pending.is_empty() {
                        check::learn(&mut self.model, &obs);
                        self.slowest = self.slowest.max(started.elapsed());
                        return Ok(());
                    }
                    last = v.pending;
                }
                Err(e) => last = vec![format!("observing the cluster: {e}")],
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "the cluster did not settle as the model says within {timeout:?}:\n  {}",
                    last.join("\n  ")
                ));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Fails the test with everything needed to replay and understand the failure.
    fn fail(&self, step: usize, problem: &str) -> ! {
        let logs: Vec<String> = self
            .world
            .logs
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        panic!(
            "model walk failed at step {step} of {} (seed {seed})\n\
             replay: make soak SEED={seed} STEPS={step}\n\n\
             {problem}\n\n\
             the model expected:\n{}\n\
             steps:\n{}\n\n\
             operator logs: {}",
            self.steps,
            check::describe_model(&self.model),
            self.log.join("\n"),
            logs.join(" "),
            seed = self.seed,
        );
    }
}

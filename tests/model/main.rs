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

/// The latency of the operator's connections while a drop races a foreign annotation.
const RACE_LATENCY: Duration = Duration::from_millis(80);
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

/// The operator notices a parent's change promptly after kube-apiserver restarted (etcd
/// keeping its data). Ignored: it does not yet — the walk found that after a restart the
/// operator's watches resume only after 5 to 45 s (median about 35 s over 22 restarts), and
/// after back-to-back restarts more than 150 s; meanwhile it reconciles its stale cache.
/// The minimal sequence: a0 declares one ConfigMap and is Ready; kube-apiserver restarts
/// (about 2 s); a second ConfigMap is added to a0. Run it with
/// `cargo test --test model -- --ignored apiserver_restart`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "operator bug: its watches resume tens of seconds after a kube-apiserver restart"]
async fn a_change_after_an_apiserver_restart_is_applied_within_10_seconds() {
    let mut w = Walk::start(DEFAULT_SEED, 3).await;
    w.rerun = Some("cargo test --test model -- --ignored apiserver_restart");
    let decl = universe::Decl {
        rev: 1,
        prune_disabled: false,
        explicit_ns: false,
    };
    let cms: Vec<universe::Key> = universe::member_keys()
        .into_iter()
        .filter(|k| k.kind == universe::Kind::ConfigMap)
        .collect();
    let spec = state::Spec {
        members: [(cms[0].clone(), decl.clone())].into(),
        ..state::Spec::default()
    };
    let steps = [
        Step::Create { set: 0, spec },
        Step::Edit {
            set: 0,
            edits: vec![steps::Edit::Add(cms[1].clone(), decl.clone())],
        },
    ];
    w.log.push(format!("    1. {}", steps[0]));
    if let Err(e) = w.perform(&steps[0]).await {
        w.fail(1, &e);
    }
    w.log.push("    2. restart kube-apiserver".into());
    if let Err(e) = w.world.restart_apiserver() {
        w.fail(2, &e);
    }
    w.log.push(format!("    3. {}", steps[1]));
    steps[1].apply(&mut w.model);
    w.model.converge();
    let written = w.world.write_spec(0, &w.model.sets[0].spec).await;
    if let Err(e) = written {
        w.fail(3, &e);
    }
    // Straight to the check, with the normal deadline of a step that is not a fault.
    if let Err(e) = w.check_within(Duration::from_secs(10)).await {
        w.fail(3, &e);
    }
}

/// An object annotated `applyset.dev/prune: disabled` while its parent prunes it is kept:
/// once the annotation is in the API server, the operator must not delete the object.
/// Ignored: the operator deletes it — prune decides on a listing and deletes with a UID
/// precondition only, so an annotation added between the two is not seen. The minimal
/// sequence (found by the walk, seed 7 with the race step weighted up, step 9): model-c1
/// declares Widget model-home/w0 and is Ready; model-c1 drops w0 and, while the operator
/// prunes it, a foreign actor's merge patch adds `applyset.dev/prune: disabled` to w0 (200
/// OK); the operator logs `pruned member=Widget… model-home/w0` and w0 is gone. Each round
/// here races one drop (the operator's network slowed down by [`RACE_LATENCY`] widens the
/// window), up to 20 rounds. Run it with `cargo test --test model -- --ignored
/// prune_disabled_while_being_pruned`; the walk's race step is behind
/// `MODEL_RACE_PRUNE_DISABLED=1` meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "operator bug: an object annotated prune: disabled between the prune's listing and its delete is deleted"]
async fn a_member_annotated_prune_disabled_while_being_pruned_is_kept() {
    let mut w = Walk::start(DEFAULT_SEED, 40).await;
    w.rerun = Some("cargo test --test model -- --ignored prune_disabled_while_being_pruned");
    let cms: Vec<universe::Key> = universe::member_keys()
        .into_iter()
        .filter(|k| k.kind == universe::Kind::ConfigMap)
        .collect();
    let decl = universe::Decl {
        rev: 1,
        prune_disabled: false,
        explicit_ns: true,
    };
    // A parent that keeps one member, so that dropping another is not an empty set.
    let spec = state::Spec {
        members: [(cms[0].clone(), decl.clone())].into(),
        ..state::Spec::default()
    };
    let mut steps = vec![Step::Create { set: 3, spec }];
    for (round, key) in cms[1..].iter().cycle().take(20).enumerate() {
        steps.push(Step::Edit {
            set: 3,
            edits: vec![steps::Edit::Add(key.clone(), decl.clone())],
        });
        steps.push(Step::DropRacingAnnotation {
            set: 3,
            key: key.clone(),
            offset_ms: (round % 9) as i64 - 4,
        });
    }
    for (i, step) in steps.iter().enumerate() {
        w.log.push(format!("{:>5}. {step}", i + 1));
        if let Err(e) = w.perform(step).await {
            w.fail(i + 1, &e);
        }
    }
    announce(&format!(
        "{} annotations landed (kept), {} found the object pruned",
        w.race_aim.landed, w.race_aim.pruned
    ));
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
        // Off by default while the operator bug it finds is open (see
        // `a_member_annotated_prune_disabled_while_being_pruned_is_kept`).
        races: env_flag("MODEL_RACE_PRUNE_DISABLED"),
        apiserver_restarts: !env_flag("MODEL_NO_APISERVER_RESTART"),
    };
    let mut w = Walk::start(seed, steps).await;
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
        w.race_aim.pruned,
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
    /// How to run a failed sequence again, when it is not a walk of `make soak`.
    rerun: Option<&'static str>,
}

/// When a racing annotation is sent after the spec write that drops its object: aimed at
/// the moment the operator prunes, searched between the earlier races of the walk (one that
/// landed was early, one that found the object gone was late). The window that matters,
/// between the prune's listing and its delete, is a few milliseconds wide, and about twice
/// [`RACE_LATENCY`] while the races slow the operator's network down.
struct RaceAim {
    /// The latest delay that landed before the prune, and the earliest that came after it.
    early: Option<u64>,
    late: Option<u64>,
    /// Races whose annotation landed (the object was retained), and that found it pruned.
    landed: u32,
    pruned: u32,
}

impl RaceAim {
    fn new() -> RaceAim {
        RaceAim {
            early: None,
            late: None,
            landed: 0,
            pruned: 0,
        }
    }

    /// The delay of the next race, `offset_ms` off the aim.
    fn delay(&self, offset_ms: i64) -> u64 {
        let aim = match (self.early, self.late) {
            (Some(e), Some(l)) => (e + l) / 2,
            (Some(e), None) => e * 2 + 20,
            (None, Some(l)) => l / 2,
            (None, None) => 3 * RACE_LATENCY.as_millis() as u64,
        };
        aim.saturating_add_signed(offset_ms)
    }

    fn learn(&mut self, delay: u64, landed: bool) {
        if landed {
            self.landed += 1;
            self.early = Some(delay);
            self.late = self.late.filter(|&l| l > delay);
        } else {
            self.pruned += 1;
            self.late = Some(delay);
            self.early = self.early.filter(|&e| e < delay);
        }
    }
}

impl Walk {
    /// Sets up the world of a walk (nothing declared yet) and learns the foreign objects.
    async fn start(seed: u64, steps: usize) -> Walk {
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
            race_aim: RaceAim::new(),
            restarted: None,
            slowest: Duration::ZERO,
            rerun: None,
        };
        if let Err(e) = w.settle(SETTLE).await {
            w.fail(0, &e);
        }
        w
    }

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
        // A slow network between the operator and the API server widens the moment between
        // the prune's listing and its delete, where the annotation must still count.
        world.proxy.set_latency(RACE_LATENCY);
        let (written, landed) = tokio::join!(world.write_spec(set, &spec), annotate);
        world.proxy.set_latency(Duration::ZERO);
        written?;
        let landed = landed?;
        self.race_aim.learn(delay_ms, landed);
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
        let timeout = self.settle_timeout(timeout);
        self.check_within(timeout).await
    }

    /// Polls until the cluster matches the model, at most `timeout`; a fatal finding fails
    /// at once.
    async fn check_within(&mut self, timeout: Duration) -> Result<(), String> {
        self.model.check_consistent()?;
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
        let replay = match self.rerun {
            Some(r) => r.to_owned(),
            None => format!("make soak SEED={} STEPS={step}", self.seed),
        };
        panic!(
            "model walk failed at step {step} of {} (seed {seed})\n\
             replay: {replay}\n\n\
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

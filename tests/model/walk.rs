//! A walk in progress: the steps it carries out in the cluster and the model, the wait for
//! the cluster to settle as the model says, and the failure report.

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use crate::{
    check,
    rng::Rng,
    state::Model,
    steps::Step,
    universe,
    world::{Setup, World},
};

/// The latency of the operator's connections while a drop races a foreign annotation.
pub const RACE_LATENCY: Duration = Duration::from_millis(80);
/// How long the cluster may take to settle after a step (a restart of kube-apiserver
/// included: the operator's watches resume within seconds, see `src/watch.rs`).
pub const SETTLE: Duration = Duration::from_secs(90);
/// How often the walk observes the cluster while it waits for it to settle (an observation
/// is one round of concurrent reads: 10–20 ms, about 95 ms right after a write).
const POLL: Duration = Duration::from_millis(50);
/// How long a deleted namespace may take to be gone: the namespace controller deletes what it
/// holds, and nothing the operator does may keep it from finishing (it may not create
/// anything there, and its patches of what is there end with the objects). It starts 5 s
/// after the deletion, once its informer has seen it. After kube-apiserver restarts less than
/// 2 minutes apart, as the walk's are, kube-controller-manager's informers wait 30–60 s
/// before they list and watch again (client-go's reflector backoff, reset only after 2
/// minutes without one): a namespace deleted in that wait takes about a minute longer.
pub const NAMESPACE_GONE: Duration = Duration::from_secs(120);

/// A walk in progress.
pub struct Walk {
    pub seed: u64,
    pub steps: usize,
    pub rng: Rng,
    pub model: Model,
    pub world: World,
    /// The steps so far, as printed on failure.
    pub log: Vec<String>,
    pub tally: BTreeMap<String, u32>,
    /// SIGKILLs that landed between an apply and its prune (the dropped member still there).
    pub hits: u32,
    pub race_aim: RaceAim,
    /// The longest the cluster took to settle after a step.
    pub slowest: Duration,
    /// How to run a failed sequence again, when it is not a walk of `make soak`.
    pub rerun: Option<&'static str>,
}

/// When a racing annotation is sent after the spec write that drops its object: aimed at
/// the moment the operator prunes, searched between the earlier races of the walk (one that
/// landed was early, one that found the object gone was late). The window that matters,
/// between the prune's listing and its delete, is a few milliseconds wide, and about twice
/// [`RACE_LATENCY`] while the races slow the operator's network down.
pub struct RaceAim {
    /// The latest delay that landed before the prune, and the earliest that came after it.
    pub early: Option<u64>,
    pub late: Option<u64>,
    /// Races whose annotation landed (the object was retained), and that found it pruned.
    pub landed: u32,
    pub pruned: u32,
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
    pub async fn start(seed: u64, steps: usize, setup: Setup) -> Walk {
        let world = World::start(seed, setup)
            .await
            .unwrap_or_else(|e| panic!("model walk (seed {seed}): setting up: {e}"));
        let mut model = Model::new(&universe::foreign_keys());
        if let crate::replicas::Mode::Sharded(n) = setup.mode {
            model.replicas = vec![true; n];
        }
        let mut w = Walk {
            seed,
            steps,
            rng: Rng::new(seed),
            model,
            world,
            log: Vec::new(),
            tally: BTreeMap::new(),
            hits: 0,
            race_aim: RaceAim::new(),
            slowest: Duration::ZERO,
            rerun: None,
        };
        if let Err(e) = w.settle(SETTLE).await {
            w.fail(0, &e);
        }
        w
    }

    /// Carries out a step, lets the operator react, and checks the invariants.
    pub async fn perform(&mut self, step: &Step) -> Result<(), String> {
        match step {
            Step::Kill { payload, delay_ms } => {
                self.act(payload).await?;
                // The moment of the fault: a random delay, not a wait for anything.
                tokio::time::sleep(Duration::from_millis(*delay_ms)).await;
                for i in self.world.kill_all() {
                    self.world.operators.start(i);
                }
            }
            Step::KillReplica {
                payload,
                delay_ms,
                replica,
                restart,
            } => {
                self.act(payload).await?;
                tokio::time::sleep(Duration::from_millis(*delay_ms)).await;
                self.world.operators.kill(*replica);
                if *restart {
                    self.world.operators.start(*replica);
                }
            }
            Step::StartReplica {
                payload,
                delay_ms,
                replica,
            } => {
                self.act(payload).await?;
                tokio::time::sleep(Duration::from_millis(*delay_ms)).await;
                self.world.operators.start(*replica);
            }
            Step::KillBetweenApplyAndPrune { set, add, drop, .. } => {
                step.apply(&mut self.model);
                self.world
                    .write_spec(*set, &self.model.sets[*set].spec)
                    .await?;
                self.wait_exists(add).await?;
                // The replica that applied it (under `--shards auto`), else every one.
                let killed = match self.world.owner_of(*set).await {
                    Some(i) if self.world.operators.live().contains(&i) => {
                        self.world.operators.kill(i);
                        vec![i]
                    }
                    _ => self.world.kill_all(),
                };
                if self.world.exists(drop).await == Some(true) {
                    self.hits += 1;
                }
                for i in killed {
                    self.world.operators.start(i);
                }
            }
            Step::RestartApiserver { payload, delay_ms } => {
                self.act(payload).await?;
                tokio::time::sleep(Duration::from_millis(*delay_ms)).await;
                self.world.restart_apiserver().await?;
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
            Step::Throttled {
                payloads,
                window_ms,
            } => return self.throttled(payloads, *window_ms).await,
            Step::DeleteNamespace {
                ns,
                payload,
                gap_ms,
            } => {
                self.delete_namespace(*ns, payload.as_deref(), *gap_ms)
                    .await?
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

    /// Carries out `steps` in order, each logged and settled; fails at the first that breaks
    /// an invariant or does not settle.
    pub async fn perform_all(&mut self, steps: &[Step]) {
        for (i, step) in steps.iter().enumerate() {
            self.log.push(format!("{:>5}. {step}", i + 1));
            if let Err(e) = self.perform(step).await {
                self.fail(i + 1, &e);
            }
        }
    }

    /// The operator throttled for `window_ms` while `payloads` happen, each settled before
    /// the next. The window bounds how long kube-client's retries of a 429 back off (their
    /// wait doubles from 5 ms), so that the operator recovers within seconds of its end.
    async fn throttled(&mut self, payloads: &[Step], window_ms: u64) -> Result<(), String> {
        self.world.throttle(true).await?;
        let end = self
            .world
            .unthrottle_after(Duration::from_millis(window_ms));
        let mut settled = Ok(());
        for p in payloads {
            settled = self.act(p).await;
            if settled.is_ok() {
                self.model.converge();
                settled = self.settle(SETTLE).await;
            }
            if settled.is_err() {
                break;
            }
        }
        let ended = end.await.map_err(|e| e.to_string()).and_then(|r| r);
        self.world.throttle(false).await?;
        settled.and(ended)
    }

    /// Namespace `ns` deleted, `payload` while it terminates; once it is gone (and settled
    /// when nothing is declared there any more), `gap_ms` later, created again.
    async fn delete_namespace(
        &mut self,
        ns: usize,
        payload: Option<&Step>,
        gap_ms: u64,
    ) -> Result<(), String> {
        self.model.delete_namespace(ns);
        self.world.delete_namespace(ns).await?;
        if let Some(p) = payload {
            self.act(p).await?;
        }
        self.world.wait_namespace_gone(ns, NAMESPACE_GONE).await?;
        // Nothing declared there any more: the sets converge without it.
        if !self.model.declares_in(ns) {
            self.model.converge();
            self.settle(SETTLE).await?;
        }
        // How long the namespace stays away: the fault's length.
        tokio::time::sleep(Duration::from_millis(gap_ms)).await;
        self.world.recreate_namespace(ns).await?;
        self.model.recreate_namespace(ns, &universe::foreign_keys());
        Ok(())
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
        let timeout = SETTLE;
        let deadline = Instant::now() + timeout;
        while self.world.exists(key).await != Some(true) {
            if Instant::now() > deadline {
                return Err(format!("{key} was not applied within {timeout:?}"));
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        Ok(())
    }

    /// Waits until the cluster matches the model; a fatal finding fails at once.
    pub async fn settle(&mut self, timeout: Duration) -> Result<(), String> {
        self.check_within(timeout).await
    }

    /// Polls until the cluster matches the model, at most `timeout`; a fatal finding fails
    /// at once. Namespaces still terminating once nothing else is pending get
    /// `NAMESPACE_GONE` from then on: that wait is kube-controller-manager's, not the
    /// operator's.
    pub async fn check_within(&mut self, timeout: Duration) -> Result<(), String> {
        self.model.check_consistent()?;
        let started = Instant::now();
        let mut deadline = started + timeout;
        let mut last;
        // When the operator's part settled, while namespaces were still terminating.
        let mut terminating_since: Option<Instant> = None;
        loop {
            if let Some(why) = self.world.operators.exited() {
                return Err(why);
            }
            match check::observe(&self.world).await {
                Ok(obs) => {
                    let mut v = check::compare(&self.model, &obs);
                    if !v.fatal.is_empty() {
                        return Err(format!("invariant broken:\n  {}", v.fatal.join("\n  ")));
                    }
                    v.pending.extend(self.unsettled_owners(&obs));
                    if v.pending.is_empty() && v.terminating.is_empty() {
                        check::learn(&mut self.model, &obs);
                        self.slowest = self.slowest.max(started.elapsed());
                        return Ok(());
                    }
                    last = if v.pending.is_empty() {
                        let since = *terminating_since.get_or_insert_with(Instant::now);
                        deadline = deadline.max(since + NAMESPACE_GONE);
                        v.terminating
                    } else {
                        v.pending
                    };
                }
                Err(e) => last = vec![format!("observing the cluster: {e}")],
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "the cluster did not settle as the model says within {:.0?}:\n  {}",
                    started.elapsed(),
                    last.join("\n  ")
                ));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Under `--shards auto`: the active parents not yet held by their owner among the
    /// running replicas ([`crate::replicas::Operators::unsettled_owners`]), then the members
    /// not yet applied under their set's current claim ([`check::unstamped`]): a handover
    /// ends before the walk goes on.
    fn unsettled_owners(&self, obs: &check::Observation) -> Vec<String> {
        // A set whose reconcile stops before it writes the parent is never claimed.
        let ids: Vec<(usize, String)> = (0..universe::SETS.len())
            .filter(|&s| self.model.active(s) && self.model.writes_parent(s))
            .map(|s| (s, universe::set_id(s)))
            .collect();
        let owners: Vec<Option<String>> = obs
            .parents
            .iter()
            .map(|p| p.as_ref().and_then(|p| p.shard_owner.clone()))
            .collect();
        let mut out = self.world.operators.unsettled_owners(&ids, &owners);
        if out.is_empty() && self.world.operators.mode() != crate::replicas::Mode::Single {
            out = check::unstamped(&self.model, obs);
        }
        out
    }

    /// Fails the test with everything needed to replay and understand the failure.
    pub fn fail(&self, step: usize, problem: &str) -> ! {
        let logs: Vec<String> = self
            .world
            .operators
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

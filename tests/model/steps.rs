//! The steps of a walk, how each changes the model, and how the next one is chosen: from the
//! seeded PRNG and the model alone (never from what the cluster answered), so the same seed
//! replays the same walk.

use std::fmt;

use crate::{
    replicas::{MAX_LIVE, MAX_NAMES},
    rng::Rng,
    state::{Expect, Model, Owner, Spec},
    universe::{Decl, HOME, Key, Kind, NAMESPACES, SETS, foreign_keys, member_keys, set_name},
};

/// A spec field the walk toggles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flag {
    Prune,
    Suspend,
    /// `deletionPolicy` Delete ↔ Orphan.
    Orphan,
    AllowEmpty,
    Force,
}

/// One change of a parent's spec.
#[derive(Clone, Debug)]
pub enum Edit {
    Add(Key, Decl),
    Change(Key, Decl),
    Remove(Key),
    Toggle(Flag),
}

/// A foreign actor's edit of a parent's ApplySet annotations.
#[derive(Clone, Copy, Debug)]
pub enum AnnotationEdit {
    AddKind(Kind),
    RemoveKind(Kind),
    AddNamespace(usize),
    RemoveNamespace(usize),
}

/// One step of the walk.
#[derive(Clone, Debug)]
pub enum Step {
    /// Create parent `set` with `spec`.
    Create { set: usize, spec: Spec },
    /// Change parent `set`'s spec (one write).
    Edit { set: usize, edits: Vec<Edit> },
    /// Move members from one parent to another (two writes; `to_first`: the receiver's
    /// first).
    Move {
        from: usize,
        to: usize,
        members: Vec<(Key, Decl)>,
        to_first: bool,
    },
    /// Delete parent `set`.
    Delete { set: usize },
    /// A foreign manager takes a ConfigMap's data key with force.
    TakeField { key: Key, value: String },
    /// A foreign actor copies parent `set`'s `part-of` label onto its own object (None:
    /// removes it again).
    CopyLabel { key: Key, set: Option<usize> },
    /// A foreign actor deletes an object.
    ForeignDelete { key: Key },
    /// A foreign actor annotates an object `applyset.dev/prune: disabled`.
    ForeignPruneDisabled { key: Key },
    /// A foreign actor edits a parent's `contains-group-kinds` / `additional-namespaces`.
    EditAnnotations { set: usize, edit: AnnotationEdit },
    /// A foreign actor sets the parent's `tooling` annotation to another tool.
    Hijack { set: usize },
    /// ... and removes it again.
    Release { set: usize },
    /// Drop a member and, racing its prune, annotate it `applyset.dev/prune: disabled` as
    /// a foreign actor: at the moment earlier races found the prune at, `offset_ms` off.
    DropRacingAnnotation {
        set: usize,
        key: Key,
        offset_ms: i64,
    },
    /// `payload`, then SIGKILL of the operator `delay_ms` later, and a new operator.
    Kill { payload: Box<Step>, delay_ms: u64 },
    /// Add `add` and drop `drop` in one write; SIGKILL the operator as soon as `add` exists
    /// (its apply done, the prune of `drop` maybe not yet), and start a new one.
    KillBetweenApplyAndPrune {
        set: usize,
        add: Key,
        decl: Decl,
        drop: Key,
    },
    /// `payload`, then kube-apiserver killed `delay_ms` later and restarted (etcd keeps its
    /// data).
    RestartApiserver { payload: Box<Step>, delay_ms: u64 },
    /// Every connection of the operator cut and refused for `blind_ms`, during which
    /// `payload` happens.
    DropWatches { payload: Box<Step>, blind_ms: u64 },
    /// The operator throttled by kube-apiserver (HTTP 429 for what its priority level cannot
    /// run at once) for `window_ms`, while `payloads` happen, each followed by the cluster
    /// settling (throttled or not by then).
    Throttled { payloads: Vec<Step>, window_ms: u64 },
    /// Under `--shards auto`: `payload`, then SIGKILL of replica `replica` `delay_ms` later,
    /// started again under its name (a new incarnation) at once when `restart`; else its sets
    /// move to the others once its Lease expires.
    KillReplica {
        payload: Box<Step>,
        delay_ms: u64,
        replica: usize,
        restart: bool,
    },
    /// Under `--shards auto`: `payload`, then replica `replica` started `delay_ms` later (one
    /// killed earlier, under its name again, or a new one): some sets move to it.
    StartReplica {
        payload: Box<Step>,
        delay_ms: u64,
        replica: usize,
    },
    /// Namespace `ns` deleted (the parents living there with it), `payload` while it
    /// terminates, and, `gap_ms` after it is gone, the namespace and its foreign objects
    /// created again. When no parent declares anything there any more, the cluster settles
    /// before the namespace comes back.
    DeleteNamespace {
        ns: usize,
        payload: Option<Box<Step>>,
        gap_ms: u64,
    },
}

impl Step {
    /// A short name of the step's kind (for the tally of a walk).
    pub fn kind_name(&self) -> String {
        match self {
            Step::Create { .. } => "create parent".into(),
            Step::Edit { edits, .. } => match edits.as_slice() {
                [Edit::Add(..)] => "add member".into(),
                [Edit::Change(..)] => "change member".into(),
                [Edit::Remove(..)] => "remove member".into(),
                [Edit::Toggle(f)] => format!("toggle {}", flag_name(*f)),
                [Edit::Remove(a), Edit::Add(b, _)] if a.name == b.name && a.kind == b.kind => {
                    "move member to another namespace".into()
                }
                _ => "several edits".into(),
            },
            Step::Move { .. } => "move members".into(),
            Step::Delete { .. } => "delete parent".into(),
            Step::TakeField { .. } => "foreign: take a field".into(),
            Step::CopyLabel { .. } => "foreign: copy part-of label".into(),
            Step::ForeignDelete { .. } => "foreign: delete".into(),
            Step::ForeignPruneDisabled { .. } => "foreign: prune disabled".into(),
            Step::EditAnnotations { .. } => "foreign: edit parent annotations".into(),
            Step::Hijack { .. } => "foreign: tooling of another tool".into(),
            Step::Release { .. } => "foreign: tooling removed".into(),
            Step::DropRacingAnnotation { .. } => "race: drop vs prune disabled".into(),
            Step::Kill { .. } => "fault: SIGKILL".into(),
            Step::KillBetweenApplyAndPrune { .. } => {
                "fault: SIGKILL between apply and prune".into()
            }
            Step::RestartApiserver { .. } => "fault: kube-apiserver restart".into(),
            Step::DropWatches { .. } => "fault: watches dropped".into(),
            Step::DeleteNamespace { .. } => "fault: namespace deleted".into(),
            Step::Throttled { .. } => "fault: throttled".into(),
            Step::KillReplica { restart: true, .. } => {
                "fault: replica SIGKILL, started again".into()
            }
            Step::KillReplica { .. } => "fault: replica SIGKILL".into(),
            Step::StartReplica { .. } => "fault: replica started".into(),
        }
    }

    /// Applies what the step does to the model (not what the operator does in response:
    /// that is [`Model::converge`]). Races and faults apply their payload; the racing
    /// annotation is applied by the runner, which knows whether it landed.
    pub fn apply(&self, m: &mut Model) {
        match self {
            Step::Create { set, spec } => m.create(*set, spec.clone()),
            Step::Edit { set, edits } => {
                for e in edits {
                    edit_spec(&mut m.sets[*set].spec, e);
                }
            }
            Step::Move {
                from, to, members, ..
            } => {
                for (k, d) in members {
                    m.sets[*from].spec.members.remove(k);
                    m.sets[*to].spec.members.insert(k.clone(), d.clone());
                }
            }
            Step::Delete { set } => m.delete(*set),
            Step::TakeField { key, value } => m.take_field(key, value),
            Step::CopyLabel { key, set } => m.copy_label(key, *set),
            Step::ForeignDelete { key } => m.foreign_delete(key),
            Step::ForeignPruneDisabled { key } => m.foreign_prune_disabled(key),
            Step::EditAnnotations { set, edit } => {
                let r = &mut m.sets[*set].recorded;
                match *edit {
                    AnnotationEdit::AddKind(k) => {
                        r.kinds.insert(k);
                    }
                    AnnotationEdit::RemoveKind(k) => {
                        r.kinds.remove(&k);
                    }
                    AnnotationEdit::AddNamespace(ns) => {
                        r.namespaces.insert(ns);
                    }
                    AnnotationEdit::RemoveNamespace(ns) => {
                        r.namespaces.remove(&ns);
                    }
                }
            }
            Step::Hijack { set } => m.sets[*set].hijacked = true,
            Step::Release { set } => m.sets[*set].hijacked = false,
            Step::DropRacingAnnotation { set, key, .. } => {
                m.sets[*set].spec.members.remove(key);
            }
            Step::KillBetweenApplyAndPrune {
                set,
                add,
                decl,
                drop,
            } => {
                let members = &mut m.sets[*set].spec.members;
                members.insert(add.clone(), decl.clone());
                members.remove(drop);
            }
            Step::Kill { payload, .. }
            | Step::RestartApiserver { payload, .. }
            | Step::DropWatches { payload, .. } => payload.apply(m),
            Step::Throttled { payloads, .. } => {
                for p in payloads {
                    p.apply(m);
                    m.converge();
                }
            }
            Step::KillReplica {
                payload,
                replica,
                restart,
                ..
            } => {
                payload.apply(m);
                m.replicas[*replica] = *restart;
            }
            Step::StartReplica {
                payload, replica, ..
            } => {
                payload.apply(m);
                if *replica == m.replicas.len() {
                    m.replicas.push(true);
                } else {
                    m.replicas[*replica] = true;
                }
            }
            Step::DeleteNamespace { ns, payload, .. } => {
                m.delete_namespace(*ns);
                if let Some(p) = payload {
                    p.apply(m);
                }
                m.recreate_namespace(*ns, &foreign_keys());
            }
        }
    }

    /// The parents whose spec this step writes (in order), and whether it creates them.
    pub fn spec_writes(&self) -> Vec<usize> {
        match self {
            Step::Edit { set, .. }
            | Step::DropRacingAnnotation { set, .. }
            | Step::KillBetweenApplyAndPrune { set, .. } => vec![*set],
            Step::Move {
                from, to, to_first, ..
            } => {
                if *to_first {
                    vec![*to, *from]
                } else {
                    vec![*from, *to]
                }
            }
            _ => Vec::new(),
        }
    }
}

fn flag_name(f: Flag) -> &'static str {
    match f {
        Flag::Prune => "prune",
        Flag::Suspend => "suspend",
        Flag::Orphan => "deletionPolicy",
        Flag::AllowEmpty => "allowEmpty",
        Flag::Force => "force",
    }
}

/// Applies one edit to a spec.
pub fn edit_spec(spec: &mut Spec, e: &Edit) {
    match e {
        Edit::Add(k, d) | Edit::Change(k, d) => {
            spec.members.insert(k.clone(), d.clone());
        }
        Edit::Remove(k) => {
            spec.members.remove(k);
        }
        Edit::Toggle(f) => {
            let v = match f {
                Flag::Prune => &mut spec.prune,
                Flag::Suspend => &mut spec.suspend,
                Flag::Orphan => &mut spec.orphan,
                Flag::AllowEmpty => &mut spec.allow_empty,
                Flag::Force => &mut spec.force,
            };
            *v = !*v;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Display (the step list of a failure message)

struct DeclFmt<'a>(&'a Decl);

impl fmt::Display for DeclFmt<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rev {}", self.0.rev)?;
        if self.0.prune_disabled {
            f.write_str(" prune-disabled")?;
        }
        Ok(())
    }
}

impl fmt::Display for Edit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Edit::Add(k, d) => write!(f, "+{k} ({})", DeclFmt(d)),
            Edit::Change(k, d) => write!(f, "~{k} ({})", DeclFmt(d)),
            Edit::Remove(k) => write!(f, "-{k}"),
            Edit::Toggle(flag) => write!(f, "flip {}", flag_name(*flag)),
        }
    }
}

fn spec_summary(spec: &Spec) -> String {
    let members: Vec<String> = spec
        .members
        .iter()
        .map(|(k, d)| format!("{k} ({})", DeclFmt(d)))
        .collect();
    format!(
        "prune={} suspend={} deletionPolicy={} allowEmpty={} force={} [{}]",
        spec.prune,
        spec.suspend,
        if spec.orphan { "Orphan" } else { "Delete" },
        spec.allow_empty,
        spec.force,
        members.join(", ")
    )
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = |s: &usize| set_name(*s);
        match self {
            Step::Create { set, spec } => write!(f, "create {} {}", name(set), spec_summary(spec)),
            Step::Edit { set, edits } => {
                let e: Vec<String> = edits.iter().map(ToString::to_string).collect();
                write!(f, "edit {}: {}", name(set), e.join("; "))
            }
            Step::Move {
                from,
                to,
                members,
                to_first,
            } => {
                let k: Vec<String> = members.iter().map(|(k, _)| k.to_string()).collect();
                write!(
                    f,
                    "move {} from {} to {} ({} written first)",
                    k.join(", "),
                    name(from),
                    name(to),
                    if *to_first { name(to) } else { name(from) }
                )
            }
            Step::Delete { set } => write!(f, "delete {}", name(set)),
            Step::TakeField { key, value } => {
                write!(f, "foreign manager takes data.k={value:?} of {key} (force)")
            }
            Step::CopyLabel { key, set } => match set {
                Some(s) => write!(f, "foreign actor labels its {key} part-of={}", name(s)),
                None => write!(f, "foreign actor removes the part-of label of its {key}"),
            },
            Step::ForeignDelete { key } => write!(f, "foreign actor deletes {key}"),
            Step::ForeignPruneDisabled { key } => {
                write!(f, "foreign actor annotates {key} prune: disabled")
            }
            Step::EditAnnotations { set, edit } => {
                let e = match edit {
                    AnnotationEdit::AddKind(k) => format!("adds kind {}", k.group_kind()),
                    AnnotationEdit::RemoveKind(k) => format!("removes kind {}", k.group_kind()),
                    AnnotationEdit::AddNamespace(ns) => {
                        format!("adds namespace {}", NAMESPACES[*ns])
                    }
                    AnnotationEdit::RemoveNamespace(ns) => {
                        format!("removes namespace {}", NAMESPACES[*ns])
                    }
                };
                write!(f, "foreign actor {e} on parent {}", name(set))
            }
            Step::Hijack { set } => write!(
                f,
                "foreign actor sets tooling of {} to another tool",
                name(set)
            ),
            Step::Release { set } => write!(
                f,
                "foreign actor removes the tooling annotation of {}",
                name(set)
            ),
            Step::DropRacingAnnotation {
                set,
                key,
                offset_ms,
            } => write!(
                f,
                "edit {}: -{key}, and a foreign actor annotates it prune: disabled when the prune is expected ({offset_ms:+} ms)",
                name(set)
            ),
            Step::Kill { payload, delay_ms } => {
                write!(f, "{payload}; SIGKILL the operator {delay_ms} ms later")
            }
            Step::KillBetweenApplyAndPrune {
                set,
                add,
                decl,
                drop,
            } => write!(
                f,
                "edit {}: +{add} ({}); -{drop}; SIGKILL the operator once {add} exists",
                name(set),
                DeclFmt(decl)
            ),
            Step::RestartApiserver { payload, delay_ms } => {
                write!(f, "{payload}; restart kube-apiserver {delay_ms} ms later")
            }
            Step::DropWatches { payload, blind_ms } => write!(
                f,
                "cut the operator's connections, {payload}, reconnect after {blind_ms} ms"
            ),
            Step::Throttled {
                payloads,
                window_ms,
            } => {
                let p: Vec<String> = payloads.iter().map(ToString::to_string).collect();
                write!(
                    f,
                    "the operator throttled (429s) for {window_ms} ms while: {}",
                    p.join("; ")
                )
            }
            Step::KillReplica {
                payload,
                delay_ms,
                replica,
                restart,
            } => {
                write!(
                    f,
                    "{payload}; SIGKILL replica r{replica} {delay_ms} ms later"
                )?;
                if *restart {
                    f.write_str(", started again at once")?;
                }
                Ok(())
            }
            Step::StartReplica {
                payload,
                delay_ms,
                replica,
            } => write!(f, "{payload}; start replica r{replica} {delay_ms} ms later"),
            Step::DeleteNamespace {
                ns,
                payload,
                gap_ms,
            } => {
                write!(f, "delete namespace {}", NAMESPACES[*ns])?;
                if let Some(p) = payload {
                    write!(f, ", {p} while it terminates")?;
                }
                write!(f, ", create it again {gap_ms} ms after it is gone")
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Choosing the next step

/// Step kinds and their weights.
#[derive(Clone, Copy, Debug)]
enum Choice {
    Add,
    Change,
    Remove,
    Batch,
    Toggle,
    Move,
    Relocate,
    Create,
    Delete,
    TakeField,
    CopyLabel,
    ForeignDelete,
    ForeignPruneDisabled,
    EditAnnotations,
    Hijack,
    Race,
    Kill,
    KillBetweenApplyAndPrune,
    RestartApiserver,
    DropWatches,
    DeleteNamespace,
    KillReplica,
    StartReplica,
    Throttled,
    Unstick,
}

const CHOICES: [(Choice, u32); 25] = [
    (Choice::Add, 14),
    (Choice::Change, 8),
    (Choice::Remove, 8),
    (Choice::Batch, 4),
    (Choice::Toggle, 10),
    (Choice::Move, 6),
    (Choice::Relocate, 3),
    (Choice::Create, 8),
    (Choice::Delete, 3),
    (Choice::TakeField, 4),
    (Choice::CopyLabel, 3),
    (Choice::ForeignDelete, 5),
    (Choice::ForeignPruneDisabled, 3),
    (Choice::EditAnnotations, 3),
    (Choice::Hijack, 1),
    (Choice::Race, 4),
    (Choice::Kill, 4),
    (Choice::KillBetweenApplyAndPrune, 3),
    (Choice::RestartApiserver, 1),
    (Choice::DropWatches, 3),
    (Choice::DeleteNamespace, 1),
    (Choice::KillReplica, 3),
    (Choice::StartReplica, 3),
    (Choice::Throttled, 6),
    (Choice::Unstick, 12),
];

/// Which fault kinds a walk may use (all by default; a fault that reveals an operator bug
/// can be switched off while the bug is open).
#[derive(Clone, Copy, Debug)]
pub struct Enabled {
    pub faults: bool,
    pub races: bool,
    /// Restarts of kube-apiserver (slow to recover from: see `SETTLE_AFTER_RESTART`).
    pub apiserver_restarts: bool,
    /// Namespaces deleted under live sets.
    pub namespace_deletions: bool,
}

/// The first steps: every parent created.
pub fn initial(rng: &mut Rng, m: &Model, set: usize) -> Step {
    Step::Create {
        set,
        spec: random_spec(rng, m, set),
    }
}

/// The faults every walk long enough has once at a fixed step (after the parents are
/// created), whatever its seed draws later: `make test`'s short walks cover each.
const SCHEDULED: [(usize, Choice); 4] = [
    (10, Choice::Throttled),
    (20, Choice::DeleteNamespace),
    (30, Choice::KillReplica),
    (40, Choice::StartReplica),
];

/// The step of walk step `i` (1-based) when a fault is scheduled then and can be taken
/// (a replica fault only under `--shards auto`), else the next step ([`next`]).
pub fn at(i: usize, rng: &mut Rng, m: &Model, enabled: Enabled) -> Step {
    let scheduled = SCHEDULED
        .iter()
        .find(|(at, _)| *at == i)
        .filter(|(_, c)| enabled.faults && allowed(*c, enabled))
        .and_then(|(_, c)| choose(*c, rng, m));
    match scheduled {
        Some(step) => step,
        None => next(rng, m, enabled),
    }
}

/// Whether a choice is switched on (faults aside).
fn allowed(choice: Choice, enabled: Enabled) -> bool {
    match choice {
        Choice::Race => enabled.races,
        Choice::RestartApiserver => enabled.apiserver_restarts,
        Choice::DeleteNamespace => enabled.namespace_deletions,
        _ => true,
    }
}

/// The next step, from the PRNG and the model.
pub fn next(rng: &mut Rng, m: &Model, enabled: Enabled) -> Step {
    let total: u32 = CHOICES.iter().map(|(_, w)| w).sum();
    loop {
        let mut n = rng.below(total as usize) as u32;
        let choice = CHOICES
            .iter()
            .find(|(_, w)| {
                let hit = n < *w;
                n = n.saturating_sub(*w);
                hit
            })
            .map(|(c, _)| *c)
            .expect("a choice");
        let is_fault = matches!(
            choice,
            Choice::Kill
                | Choice::KillBetweenApplyAndPrune
                | Choice::RestartApiserver
                | Choice::DropWatches
                | Choice::DeleteNamespace
                | Choice::KillReplica
                | Choice::StartReplica
                | Choice::Throttled
        );
        if (is_fault && !enabled.faults) || !allowed(choice, enabled) {
            continue;
        }
        if let Some(step) = choose(choice, rng, m) {
            return step;
        }
    }
}

fn choose(choice: Choice, rng: &mut Rng, m: &Model) -> Option<Step> {
    match choice {
        Choice::Add => add(rng, m),
        Choice::Change => change(rng, m),
        Choice::Remove => remove(rng, m),
        Choice::Batch => batch(rng, m),
        Choice::Toggle => toggle(rng, m),
        Choice::Move => move_members(rng, m),
        Choice::Relocate => relocate(rng, m),
        Choice::Create => create(rng, m),
        Choice::Delete => delete(rng, m),
        Choice::TakeField => take_field(rng, m),
        Choice::CopyLabel => copy_label(rng, m),
        Choice::ForeignDelete => foreign_delete(rng, m),
        Choice::ForeignPruneDisabled => foreign_prune_disabled(rng, m),
        Choice::EditAnnotations => edit_annotations(rng, m),
        Choice::Hijack => hijack(rng, m),
        Choice::Race => race(rng, m),
        // Under `--shards auto` half as often: every replica's new incarnation then waits
        // for its Lease (seconds), and the replica faults kill replicas too.
        Choice::Kill if !m.replicas.is_empty() && rng.chance(50) => None,
        Choice::Kill => Some(Step::Kill {
            payload: Box::new(plain(rng, m)),
            delay_ms: rng.range(0, 1500),
        }),
        Choice::KillBetweenApplyAndPrune => kill_between_apply_and_prune(rng, m),
        Choice::RestartApiserver => Some(Step::RestartApiserver {
            payload: Box::new(plain(rng, m)),
            delay_ms: rng.range(0, 500),
        }),
        Choice::DropWatches => Some(Step::DropWatches {
            payload: Box::new(plain(rng, m)),
            blind_ms: rng.range(200, 2500),
        }),
        Choice::DeleteNamespace => delete_namespace(rng, m),
        Choice::KillReplica => kill_replica(rng, m),
        Choice::StartReplica => start_replica(rng, m),
        Choice::Throttled => Some(throttled(rng, m)),
        Choice::Unstick => unstick(rng, m),
    }
}

/// A step that is neither a fault nor a race (the payload of a fault).
fn plain(rng: &mut Rng, m: &Model) -> Step {
    let enabled = Enabled {
        faults: false,
        races: false,
        apiserver_restarts: false,
        namespace_deletions: false,
    };
    next(rng, m, enabled)
}

/// One to three plain steps, each chosen from the model as the ones before it leave it once
/// the operator settled, while the operator is throttled.
fn throttled(rng: &mut Rng, m: &Model) -> Step {
    let mut after = m.clone();
    let mut payloads = Vec::new();
    for _ in 0..rng.range(1, 3) {
        let p = plain(rng, &after);
        p.apply(&mut after);
        after.converge();
        payloads.push(p);
    }
    Step::Throttled {
        payloads,
        window_ms: rng.range(1000, 4000),
    }
}

/// A running replica killed (under `--shards auto`): started again at once when it is the
/// last one, else sometimes.
fn kill_replica(rng: &mut Rng, m: &Model) -> Option<Step> {
    let live: Vec<usize> = (0..m.replicas.len()).filter(|&i| m.replicas[i]).collect();
    let replica = *rng.pick_opt(&live)?;
    let restart = live.len() < 2 || rng.chance(40);
    Some(Step::KillReplica {
        payload: Box::new(plain(rng, m)),
        delay_ms: rng.range(0, 1500),
        replica,
        restart,
    })
}

/// A replica started (under `--shards auto`): half the time one that was killed, under its
/// name, else a new one; at most [`MAX_LIVE`] run, under at most [`MAX_NAMES`] names.
fn start_replica(rng: &mut Rng, m: &Model) -> Option<Step> {
    let live = m.replicas.iter().filter(|&&l| l).count();
    if m.replicas.is_empty() || live >= MAX_LIVE {
        return None;
    }
    let dead: Vec<usize> = (0..m.replicas.len()).filter(|&i| !m.replicas[i]).collect();
    let replica = match rng.pick_opt(&dead) {
        Some(&i) if rng.chance(50) || m.replicas.len() >= MAX_NAMES => i,
        _ if m.replicas.len() < MAX_NAMES => m.replicas.len(),
        _ => return None,
    };
    Some(Step::StartReplica {
        payload: Box::new(plain(rng, m)),
        delay_ms: rng.range(0, 1500),
        replica,
    })
}

/// A namespace of the universe deleted. Its own namespace takes the ApplySets with it: not
/// while one of them is suspended with `deletionPolicy: Delete` (see [`delete`]). Another
/// one gets a payload while it terminates half the time, chosen from the model as it is once
/// the namespace is gone: a plain step, or one parent dropping what it declares there.
fn delete_namespace(rng: &mut Rng, m: &Model) -> Option<Step> {
    let ns = rng.below(NAMESPACES.len());
    let home_sets = (0..SETS.len()).filter(|&s| !crate::universe::is_cluster(s));
    if ns == HOME
        && home_sets
            .into_iter()
            .any(|s| m.sets[s].exists && m.sets[s].spec.suspend && !m.sets[s].spec.orphan)
    {
        return None;
    }
    let mut after = m.clone();
    after.delete_namespace(ns);
    let payload = match ns != HOME && rng.chance(50) {
        true if rng.chance(50) => drop_namespace(rng, &after, ns).map(Box::new),
        true => Some(Box::new(plain(rng, &after))),
        false => None,
    };
    Some(Step::DeleteNamespace {
        ns,
        payload,
        gap_ms: rng.range(0, 3000),
    })
}

/// A parent that declares members in namespace `ns` stops declaring them (one write).
fn drop_namespace(rng: &mut Rng, m: &Model, ns: usize) -> Option<Step> {
    let sets: Vec<usize> = existing(m)
        .into_iter()
        .filter(|&s| m.sets[s].spec.members.keys().any(|k| k.ns == Some(ns)))
        .collect();
    let s = *rng.pick_opt(&sets)?;
    let edits = m.sets[s]
        .spec
        .members
        .keys()
        .filter(|k| k.ns == Some(ns))
        .map(|k| Edit::Remove(k.clone()))
        .collect();
    Some(Step::Edit { set: s, edits })
}

fn existing(m: &Model) -> Vec<usize> {
    (0..SETS.len()).filter(|&s| m.sets[s].exists).collect()
}

fn random_decl(rng: &mut Rng, key: &Key) -> Decl {
    Decl {
        rev: rng.range(1, 9) as u32,
        prune_disabled: key.kind.may_be_retained() && rng.chance(20),
        explicit_ns: rng.chance(50),
    }
}

/// Whether parent `s`, whose members are `members`, may declare `key`: nobody else
/// declares it, it is not foreign, a Gadget only with its CRD, and its object (if any) is
/// `s`'s own — or, with `taken`, another parent's (the walk then expects an
/// OwnershipConflict).
fn addable(m: &Model, s: usize, members: &Spec, key: &Key, taken: bool) -> bool {
    if members.members.contains_key(key) || m.declarer(key).is_some_and(|t| t != s) {
        return false;
    }
    if key.kind == Kind::Gadget && !members.members.keys().any(|k| k.kind == Kind::Crd) {
        return false;
    }
    match m.objects.get(key).map(|o| o.owner) {
        None => true,
        Some(Owner::Set(t)) => t == s || taken,
        Some(Owner::Foreign { .. }) => false,
    }
}

fn addable_keys(rng: &mut Rng, m: &Model, s: usize, spec: &Spec) -> Vec<Key> {
    let taken = rng.chance(10);
    member_keys()
        .into_iter()
        .filter(|k| addable(m, s, spec, k, taken))
        .collect()
}

/// A spec for a new parent: up to three members and random flags.
fn random_spec(rng: &mut Rng, m: &Model, s: usize) -> Spec {
    let mut spec = Spec {
        prune: rng.chance(85),
        suspend: rng.chance(5),
        orphan: rng.chance(30),
        allow_empty: rng.chance(30),
        force: rng.chance(20),
        ..Spec::default()
    };
    for _ in 0..rng.range(0, 3) {
        let keys = addable_keys(rng, m, s, &spec);
        if let Some(k) = rng.pick_opt(&keys).cloned() {
            let d = random_decl(rng, &k);
            spec.members.insert(k, d);
        }
    }
    spec
}

/// Removing `key` from `s`'s members: with the Gadget CRD go its Gadgets.
fn removal(spec: &Spec, key: &Key) -> Vec<Edit> {
    let mut edits = vec![Edit::Remove(key.clone())];
    if key.kind == Kind::Crd {
        edits.extend(
            spec.members
                .keys()
                .filter(|k| k.kind == Kind::Gadget)
                .map(|k| Edit::Remove(k.clone())),
        );
    }
    edits
}

fn one_edit(rng: &mut Rng, m: &Model, s: usize, spec: &Spec) -> Option<Vec<Edit>> {
    let members: Vec<Key> = spec.members.keys().cloned().collect();
    match rng.below(3) {
        0 => {
            let keys = addable_keys(rng, m, s, spec);
            let k = rng.pick_opt(&keys)?.clone();
            let d = random_decl(rng, &k);
            Some(vec![Edit::Add(k, d)])
        }
        1 => {
            let k = rng.pick_opt(&members)?.clone();
            let mut d = spec.members[&k].clone();
            match rng.below(3) {
                0 if k.kind.may_be_retained() => d.prune_disabled = !d.prune_disabled,
                1 => d.explicit_ns = !d.explicit_ns,
                _ => d.rev = d.rev % 9 + 1,
            }
            Some(vec![Edit::Change(k, d)])
        }
        _ => {
            let k = rng.pick_opt(&members)?.clone();
            Some(removal(spec, &k))
        }
    }
}

fn edit_with(rng: &mut Rng, m: &Model, want: usize) -> Option<Step> {
    let sets = existing(m);
    let s = *rng.pick_opt(&sets)?;
    let spec = &m.sets[s].spec;
    let members: Vec<Key> = spec.members.keys().cloned().collect();
    let edits = match want {
        0 => {
            let keys = addable_keys(rng, m, s, spec);
            let k = rng.pick_opt(&keys)?.clone();
            let d = random_decl(rng, &k);
            vec![Edit::Add(k, d)]
        }
        1 => {
            let k = rng.pick_opt(&members)?.clone();
            let mut d = spec.members[&k].clone();
            if k.kind.may_be_retained() && rng.chance(30) {
                d.prune_disabled = !d.prune_disabled;
            } else {
                d.rev = d.rev % 9 + 1;
            }
            vec![Edit::Change(k, d)]
        }
        _ => {
            let k = rng.pick_opt(&members)?.clone();
            removal(spec, &k)
        }
    };
    Some(Step::Edit { set: s, edits })
}

fn add(rng: &mut Rng, m: &Model) -> Option<Step> {
    edit_with(rng, m, 0)
}

fn change(rng: &mut Rng, m: &Model) -> Option<Step> {
    edit_with(rng, m, 1)
}

fn remove(rng: &mut Rng, m: &Model) -> Option<Step> {
    edit_with(rng, m, 2)
}

/// Two to four edits of one parent in one write.
fn batch(rng: &mut Rng, m: &Model) -> Option<Step> {
    let sets = existing(m);
    let s = *rng.pick_opt(&sets)?;
    let mut spec = m.sets[s].spec.clone();
    let mut edits = Vec::new();
    for _ in 0..rng.range(2, 4) {
        if let Some(es) = one_edit(rng, m, s, &spec) {
            for e in &es {
                edit_spec(&mut spec, e);
            }
            edits.extend(es);
        }
    }
    (edits.len() >= 2).then_some(Step::Edit { set: s, edits })
}

fn toggle(rng: &mut Rng, m: &Model) -> Option<Step> {
    let sets = existing(m);
    let s = *rng.pick_opt(&sets)?;
    let flag = *rng.pick(&[
        Flag::Prune,
        Flag::Suspend,
        Flag::Orphan,
        Flag::AllowEmpty,
        Flag::Force,
    ]);
    Some(Step::Edit {
        set: s,
        edits: vec![Edit::Toggle(flag)],
    })
}

/// A member (with the Gadget CRD: its Gadgets too) moves to another parent.
fn move_members(rng: &mut Rng, m: &Model) -> Option<Step> {
    let sets = existing(m);
    let from = *rng.pick_opt(&sets)?;
    let to = *rng.pick_opt(&sets)?;
    if from == to {
        return None;
    }
    let spec = &m.sets[from].spec;
    let movable: Vec<Key> = spec
        .members
        .keys()
        .filter(|k| k.kind != Kind::Gadget)
        // Mostly members the sender will let go of (a retained one stays the sender's).
        .filter(|k| m.prunable_by(from, k) || !m.objects.contains_key(*k) || rng.chance(20))
        .cloned()
        .collect();
    let key = rng.pick_opt(&movable)?.clone();
    let mut members = vec![(key.clone(), spec.members[&key].clone())];
    if key.kind == Kind::Crd {
        members.extend(
            spec.members
                .iter()
                .filter(|(k, _)| k.kind == Kind::Gadget)
                .map(|(k, d)| (k.clone(), d.clone())),
        );
    }
    Some(Step::Move {
        from,
        to,
        members,
        to_first: rng.chance(50),
    })
}

/// A member moves to another namespace (same kind and name) within its parent: one write.
fn relocate(rng: &mut Rng, m: &Model) -> Option<Step> {
    let sets = existing(m);
    let s = *rng.pick_opt(&sets)?;
    let spec = &m.sets[s].spec;
    let mut moves = Vec::new();
    for (k, d) in &spec.members {
        let mut rest = spec.clone();
        rest.members.remove(k);
        for other in member_keys() {
            if other.kind == k.kind
                && other.name == k.name
                && other.ns != k.ns
                && addable(m, s, &rest, &other, false)
            {
                moves.push((k.clone(), other, d.clone()));
            }
        }
    }
    let (from, to, decl) = rng.pick_opt(&moves)?.clone();
    Some(Step::Edit {
        set: s,
        edits: vec![Edit::Remove(from), Edit::Add(to, decl)],
    })
}

fn create(rng: &mut Rng, m: &Model) -> Option<Step> {
    let missing: Vec<usize> = (0..SETS.len()).filter(|&s| !m.sets[s].exists).collect();
    let s = *rng.pick_opt(&missing)?;
    Some(Step::Create {
        set: s,
        spec: random_spec(rng, m, s),
    })
}

/// Deleting a parent. Not a suspended one with `deletionPolicy: Delete`: whether its
/// members go then is not specified (see the report of this test).
fn delete(rng: &mut Rng, m: &Model) -> Option<Step> {
    let sets: Vec<usize> = existing(m)
        .into_iter()
        .filter(|&s| !m.sets[s].spec.suspend || m.sets[s].spec.orphan)
        .collect();
    Some(Step::Delete {
        set: *rng.pick_opt(&sets)?,
    })
}

/// Objects whose `part-of` label a parent's manager owns (members, retained, orphans).
fn set_objects(m: &Model, filter: impl Fn(&Key) -> bool) -> Vec<Key> {
    m.objects
        .iter()
        .filter(|(k, o)| matches!(o.owner, Owner::Set(_)) && filter(k))
        .map(|(k, _)| k.clone())
        .collect()
}

fn take_field(rng: &mut Rng, m: &Model) -> Option<Step> {
    let cms = set_objects(m, |k| k.kind == Kind::ConfigMap);
    let key = rng.pick_opt(&cms)?.clone();
    // Sometimes the value the object has: the field is then shared, not taken.
    let value = if rng.chance(25) {
        m.objects[&key].data.clone()
    } else {
        format!("f{}", rng.range(1, 3))
    };
    Some(Step::TakeField { key, value })
}

fn copy_label(rng: &mut Rng, m: &Model) -> Option<Step> {
    let key = rng.pick(&foreign_keys()).clone();
    let current = match m.objects.get(&key)?.owner {
        Owner::Foreign { copied } => copied,
        Owner::Set(_) => return None,
    };
    let set = if rng.chance(25) {
        None
    } else {
        Some(rng.below(SETS.len()))
    };
    (set != current).then_some(Step::CopyLabel { key, set })
}

fn foreign_delete(rng: &mut Rng, m: &Model) -> Option<Step> {
    // Half the time an object nobody declares (retained, orphaned): it frees the name.
    let undeclared = rng.chance(50);
    let keys = set_objects(m, |k| (m.declarer(k).is_none()) == undeclared);
    Some(Step::ForeignDelete {
        key: rng.pick_opt(&keys)?.clone(),
    })
}

fn foreign_prune_disabled(rng: &mut Rng, m: &Model) -> Option<Step> {
    let keys = set_objects(m, |k| {
        k.kind.may_be_retained() && !m.objects[k].prune_disabled()
    });
    Some(Step::ForeignPruneDisabled {
        key: rng.pick_opt(&keys)?.clone(),
    })
}

fn edit_annotations(rng: &mut Rng, m: &Model) -> Option<Step> {
    let sets: Vec<usize> = existing(m)
        .into_iter()
        .filter(|&s| !m.sets[s].hijacked)
        .collect();
    let s = *rng.pick_opt(&sets)?;
    let r = &m.sets[s].recorded;
    let edit = match rng.below(4) {
        0 => {
            let kinds: Vec<Kind> = Kind::ALL
                .into_iter()
                .filter(|k| !r.kinds.contains(k))
                .collect();
            AnnotationEdit::AddKind(*rng.pick_opt(&kinds)?)
        }
        1 => {
            let kinds: Vec<Kind> = r.kinds.iter().copied().collect();
            AnnotationEdit::RemoveKind(*rng.pick_opt(&kinds)?)
        }
        2 => {
            let own = (!crate::universe::is_cluster(s)).then_some(HOME);
            let nss: Vec<usize> = (0..NAMESPACES.len())
                .filter(|ns| !r.namespaces.contains(ns) && Some(*ns) != own)
                .collect();
            AnnotationEdit::AddNamespace(*rng.pick_opt(&nss)?)
        }
        _ => {
            let nss: Vec<usize> = r.namespaces.iter().copied().collect();
            AnnotationEdit::RemoveNamespace(*rng.pick_opt(&nss)?)
        }
    };
    Some(Step::EditAnnotations { set: s, edit })
}

fn hijack(rng: &mut Rng, m: &Model) -> Option<Step> {
    let sets: Vec<usize> = existing(m)
        .into_iter()
        .filter(|&s| !m.sets[s].hijacked)
        .collect();
    Some(Step::Hijack {
        set: *rng.pick_opt(&sets)?,
    })
}

/// A parent that prunes now (active, Ready) and one of its members it would prune
/// (`keep_one`: not its last one unless it allows an empty set; `instant`: not a Namespace,
/// whose deletion takes a while).
fn pruning_member(rng: &mut Rng, m: &Model, keep_one: bool, instant: bool) -> Option<(usize, Key)> {
    let sets: Vec<usize> = existing(m)
        .into_iter()
        .filter(|&s| m.active(s) && m.sets[s].spec.prune && m.sets[s].expect == Expect::Ready)
        .collect();
    let s = *rng.pick_opt(&sets)?;
    let spec = &m.sets[s].spec;
    if keep_one && spec.members.len() < 2 && !spec.allow_empty {
        return None;
    }
    let keys: Vec<Key> = spec
        .members
        .keys()
        .filter(|k| !k.in_gadget_bundle() && m.prunable_by(s, k))
        .filter(|k| !instant || k.kind != Kind::Namespace)
        .cloned()
        .collect();
    Some((s, rng.pick_opt(&keys)?.clone()))
}

fn race(rng: &mut Rng, m: &Model) -> Option<Step> {
    let (set, key) = pruning_member(rng, m, true, true)?;
    Some(Step::DropRacingAnnotation {
        set,
        key,
        offset_ms: rng.range(0, 8) as i64 - 4,
    })
}

fn kill_between_apply_and_prune(rng: &mut Rng, m: &Model) -> Option<Step> {
    let (set, drop) = pruning_member(rng, m, false, false)?;
    let spec = &m.sets[set].spec;
    let fresh: Vec<Key> = member_keys()
        .into_iter()
        .filter(|k| {
            k.kind == Kind::ConfigMap
                && !m.objects.contains_key(k)
                && addable(m, set, spec, k, false)
        })
        .collect();
    let add = rng.pick_opt(&fresh)?.clone();
    let decl = Decl {
        prune_disabled: false,
        ..random_decl(rng, &add)
    };
    Some(Step::KillBetweenApplyAndPrune {
        set,
        add,
        decl,
        drop,
    })
}

/// A step that lets a parent that cannot settle Ready move on: what a user or the other
/// tool would do.
fn unstick(rng: &mut Rng, m: &Model) -> Option<Step> {
    let stuck: Vec<usize> = existing(m)
        .into_iter()
        .filter(|&s| m.sets[s].expect != Expect::Ready)
        .collect();
    let s = *rng.pick_opt(&stuck)?;
    let set = &m.sets[s];
    let flip = |f: Flag| Step::Edit {
        set: s,
        edits: vec![Edit::Toggle(f)],
    };
    if set.spec.suspend {
        return Some(flip(Flag::Suspend));
    }
    if set.hijacked {
        return Some(Step::Release { set: s });
    }
    match set.expect {
        Expect::NotReady("OwnershipConflict") => {
            let blocked: Vec<Key> = set
                .spec
                .members
                .keys()
                .filter(|k| {
                    m.objects
                        .get(*k)
                        .is_some_and(|o| matches!(o.owner, Owner::Set(t) if t != s))
                })
                .cloned()
                .collect();
            let key = rng.pick_opt(&blocked)?.clone();
            Some(if rng.chance(50) {
                Step::ForeignDelete { key }
            } else {
                Step::Edit {
                    set: s,
                    edits: removal(&set.spec, &key),
                }
            })
        }
        Expect::NotReady("Conflict") => Some(flip(Flag::Force)),
        Expect::NotReady("EmptySetRefused") => Some(flip(Flag::AllowEmpty)),
        _ => None,
    }
}

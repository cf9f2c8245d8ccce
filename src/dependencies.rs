//! `spec.dependsOn`: sets that must be ready before a set is applied.
//!
//! - **The rules**, pure: which sets a spec names ([`resolve`]), which of them the tenancy
//!   conventions allow ([`check_scope`]), whether a dependency is ready ([`verdict`]), the
//!   cycle through a set ([`find_cycle`]), and which dependent a set being deleted waits for
//!   ([`blocking_dependent`]).
//! - **The index** ([`Dependencies`]): each set's dependencies as of its last reconcile, and
//!   the reverse (each dependency's dependents), updated by every reconcile and cleared on
//!   deletion. The parent watches report every event to [`Dependencies::on_event`], which
//!   keeps what the rules read of every parent listed, whichever replica owns it (a few
//!   hundred bytes each: the controllers' caches hold only the sets this replica reconciles),
//!   and names the sets to reconcile: the dependents of a set whose readiness changed, and the
//!   dependencies (being deleted) of a set that is gone.

use std::{
    collections::{HashMap, HashSet},
    time::Duration,
};

use k8s_openapi::jiff::Timestamp;
use kube::{Client, ResourceExt, api::ObjectMeta, runtime::watcher};
use parking_lot::Mutex;

use crate::{
    api::{ApplySetSpec, ApplySetStatus, DependencyKind},
    applyset::{FINALIZER, ParentKind, ParentRef},
    parent::{AnyParent, Parent},
    status,
    tenancy::Defaults,
};

/// Most entries `spec.dependsOn` may have (the CRD says so too).
pub const MAX_DEPENDENCIES: usize = 64;

/// Why a spec's dependsOn is refused (ValidationFailed, Stalled).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DependencyError {
    /// More entries than [`MAX_DEPENDENCIES`].
    #[error("spec.dependsOn has {0} entries, more than the {MAX_DEPENDENCIES} allowed")]
    TooMany(usize),
    /// Entry `spec.dependsOn[index]` is not valid.
    #[error("spec.dependsOn[{index}] ({kind:?} {name}): {problem}")]
    Entry {
        index: usize,
        kind: DependencyKind,
        name: String,
        problem: EntryProblem,
    },
    /// An ApplySet dependency in another namespace, under the operator's lock-down.
    #[error(
        "spec.dependsOn: {dependency} is in another namespace; under the operator's lock-down (--default-service-account) an ApplySet may only depend on ApplySets in its own namespace {own} and on ClusterApplySets. Depend on it from a ClusterApplySet, or run the operator with --allow-cross-namespace-sets"
    )]
    CrossNamespace { dependency: ParentRef, own: String },
}

/// What is wrong with one `spec.dependsOn` entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EntryProblem {
    #[error("name is empty")]
    EmptyName,
    #[error("namespace is only for an ApplySet dependency: a ClusterApplySet has none")]
    NamespaceOnClusterApplySet,
    #[error(
        "a ClusterApplySet must name the namespace of an ApplySet it depends on (set namespace)"
    )]
    NamespaceMissing,
}

/// Why a dependency is not ready (DependencyNotReady, retried).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotReady {
    #[error("{0} does not exist")]
    Missing(ParentRef),
    #[error("{0} is being deleted")]
    Deleting(ParentRef),
    #[error("{dependency} has not reconciled generation {generation} yet")]
    NotReconciled {
        dependency: ParentRef,
        generation: i64,
    },
    #[error("{dependency} is not ready: Ready={status} ({reason})")]
    Unready {
        dependency: ParentRef,
        status: String,
        reason: String,
    },
    #[error("{dependency} is not healthy: Healthy={status} ({reason})")]
    Unhealthy {
        dependency: ParentRef,
        status: String,
        reason: String,
    },
    /// Reading it failed (the cause as the API reported it).
    #[error("{dependency} could not be read: {cause}")]
    Unreadable {
        dependency: ParentRef,
        cause: String,
    },
}

// ---------------------------------------------------------------------------------------------
// Rules (pure)

/// The sets `spec.dependsOn` of `parent` names, in spec order: an ApplySet dependency without
/// a namespace is in the depending ApplySet's namespace; a ClusterApplySet must name it.
pub fn resolve(parent: &ParentRef, spec: &ApplySetSpec) -> Result<Vec<ParentRef>, DependencyError> {
    if spec.depends_on.len() > MAX_DEPENDENCIES {
        return Err(DependencyError::TooMany(spec.depends_on.len()));
    }
    let mut out = Vec::with_capacity(spec.depends_on.len());
    for (i, d) in spec.depends_on.iter().enumerate() {
        let at = |problem| DependencyError::Entry {
            index: i,
            kind: d.kind,
            name: d.name.clone(),
            problem,
        };
        if d.name.is_empty() {
            return Err(at(EntryProblem::EmptyName));
        }
        let namespace = d.namespace.as_deref().filter(|n| !n.is_empty());
        out.push(match d.kind {
            DependencyKind::ClusterApplySet => {
                if namespace.is_some() {
                    return Err(at(EntryProblem::NamespaceOnClusterApplySet));
                }
                ParentRef::cluster(&d.name)
            }
            DependencyKind::ApplySet => match (namespace, parent.effective_namespace()) {
                (Some(ns), _) | (None, Some(ns)) => ParentRef::applyset(ns, &d.name),
                (None, None) => {
                    return Err(at(EntryProblem::NamespaceMissing));
                }
            },
        });
    }
    Ok(out)
}

/// The dependencies of `parent` that resolve (those that do not are left out): what a set
/// gone or being deleted depended on.
fn resolve_lenient(parent: &ParentRef, spec: &ApplySetSpec) -> Vec<ParentRef> {
    spec.depends_on
        .iter()
        .filter_map(|d| {
            let one = ApplySetSpec {
                depends_on: vec![d.clone()],
                ..ApplySetSpec::default()
            };
            resolve(parent, &one).ok()?.pop()
        })
        .collect()
}

/// What the tenancy conventions allow: cross-namespace dependencies are allowed (as in
/// Flux), except under the operator's lock-down (`--default-service-account`, the
/// counterpart of Flux's `--no-cross-namespace-refs`), where an ApplySet may only depend on
/// ApplySets of its own namespace and on ClusterApplySets — unless the operator also runs with
/// `--allow-cross-namespace-sets`. A ClusterApplySet may depend on any set.
pub fn check_scope(
    parent: &ParentRef,
    dependencies: &[ParentRef],
    defaults: &Defaults,
) -> Result<(), DependencyError> {
    if parent.kind != ParentKind::ApplySet
        || defaults.namespaced.is_none()
        || defaults.allow_cross_namespace
    {
        return Ok(());
    }
    let own = parent.effective_namespace();
    match dependencies
        .iter()
        .find(|d| d.kind == ParentKind::ApplySet && d.effective_namespace() != own)
    {
        None => Ok(()),
        Some(d) => Err(DependencyError::CrossNamespace {
            dependency: d.clone(),
            own: own.unwrap_or_default().to_string(),
        }),
    }
}

/// Whether a dependency is ready: `Err` says why not. Ready means Ready=True for the
/// dependency's current generation (the Ready condition's observedGeneration, else the
/// status', equals metadata.generation), not being deleted, and Healthy=True when it has a
/// Healthy condition. `found`: the dependency's metadata and status, `None` when it does not
/// exist.
pub fn verdict(
    dependency: &ParentRef,
    found: Option<(&ObjectMeta, Option<&ApplySetStatus>)>,
) -> Result<(), NotReady> {
    let Some((meta, status)) = found else {
        return Err(NotReady::Missing(dependency.clone()));
    };
    if meta.deletion_timestamp.is_some() {
        return Err(NotReady::Deleting(dependency.clone()));
    }
    let generation = meta.generation.unwrap_or_default();
    let conditions = status.map(|s| s.conditions.as_slice()).unwrap_or_default();
    let condition = |type_: &str| conditions.iter().find(|c| c.type_ == type_);
    let ready = condition(status::READY);
    let observed = ready
        .and_then(|c| c.observed_generation)
        .or_else(|| status.and_then(ApplySetStatus::observed));
    match ready {
        Some(c) if observed == Some(generation) => {
            if c.status != "True" {
                return Err(NotReady::Unready {
                    dependency: dependency.clone(),
                    status: c.status.clone(),
                    reason: c.reason.clone(),
                });
            }
        }
        _ => {
            return Err(NotReady::NotReconciled {
                dependency: dependency.clone(),
                generation,
            });
        }
    }
    match condition(status::HEALTHY) {
        Some(h) if h.status != "True" => Err(NotReady::Unhealthy {
            dependency: dependency.clone(),
            status: h.status.clone(),
            reason: h.reason.clone(),
        }),
        _ => Ok(()),
    }
}

/// The cycle through `start`, if any: `[start, …, start]`, following each set's dependencies
/// in order (`edges`), the first cycle found by a depth-first search. A set that depends on
/// itself is a cycle `[start, start]`. Cycles elsewhere in the graph (not through `start`) are
/// not reported: they are refused when their own members are reconciled.
pub fn find_cycle(
    start: &ParentRef,
    edges: impl Fn(&ParentRef) -> Vec<ParentRef>,
) -> Option<Vec<ParentRef>> {
    // `path[k]`'s successors are `stack[k]`, of which the first `.1` were looked at.
    let mut path = vec![start.clone()];
    let mut stack = vec![(edges(start), 0usize)];
    // A set explored once without reaching `start` never will: it is not explored again.
    let mut seen: HashSet<ParentRef> = HashSet::from([start.clone()]);
    while let Some((next, i)) = stack.last_mut() {
        let Some(n) = next.get(*i).cloned() else {
            stack.pop();
            path.pop();
            continue;
        };
        *i += 1;
        if n == *start {
            path.push(n);
            return Some(path);
        }
        if seen.insert(n.clone()) {
            stack.push((edges(&n), 0));
            path.push(n);
        }
    }
    None
}

/// `dependsOn cycle: ApplySet a/x → ApplySet a/y → ApplySet a/x`.
pub fn describe_cycle(cycle: &[ParentRef]) -> String {
    let names: Vec<String> = cycle.iter().map(ToString::to_string).collect();
    format!("dependsOn cycle: {}", names.join(" → "))
}

/// A set as the deletion order looks at it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub parent: ParentRef,
    /// What it depends on.
    pub depends_on: Vec<ParentRef>,
    /// When its deletion began (Unix seconds), if it is being deleted.
    pub deleting_since: Option<i64>,
    /// Whether it still holds our finalizer with deletionPolicy Delete: its cleanup will delete
    /// its members.
    pub deletes_members: bool,
}

/// Keeps, of what `c` depends on, only what the gate's confinement allows without asking
/// anyone: ApplySets of its own namespace. Any other dependency counts only if `accepted`
/// has it (the dependencies `c`'s last gate in this process let through, after the scope
/// and account checks). So a set cannot hold up the deletion of a set it was never allowed
/// to depend on (another tenant's).
pub fn confined(mut c: Candidate, accepted: &[ParentRef]) -> Candidate {
    let own = c.parent.effective_namespace().map(str::to_string);
    c.depends_on.retain(|d| {
        let same_namespace = c.parent.kind == ParentKind::ApplySet
            && d.kind == ParentKind::ApplySet
            && d.effective_namespace().map(str::to_string) == own;
        same_namespace || accepted.contains(d)
    });
    c
}

/// The set that `me`, being deleted, waits for, and how much longer at most: a set that
/// depends on `me`, is being deleted too and will delete its members (our finalizer,
/// deletionPolicy Delete) — for at most `patience` after its deletion began. A dependent that
/// `me` also depends on (directly or not: a cycle) is not waited for (both would wait for
/// each other). The first such set by name. `now`: Unix seconds.
pub fn blocking_dependent(
    me: &ParentRef,
    candidates: &[Candidate],
    patience: Duration,
    now: i64,
) -> Option<(ParentRef, Duration)> {
    let edges: HashMap<&ParentRef, &Vec<ParentRef>> = candidates
        .iter()
        .map(|c| (&c.parent, &c.depends_on))
        .collect();
    let mut blocking: Vec<(ParentRef, Duration)> = candidates
        .iter()
        .filter(|c| c.parent != *me && c.deletes_members && c.depends_on.contains(me))
        .filter_map(|c| {
            let since = c.deleting_since?;
            let waited = Duration::from_secs(u64::try_from(now.saturating_sub(since)).unwrap_or(0));
            let remaining = patience.checked_sub(waited).filter(|r| !r.is_zero())?;
            // `me` reaching `c` through the dependencies: a cycle through both.
            let cycle = find_cycle(&c.parent, |p| {
                edges.get(p).map(|e| e.to_vec()).unwrap_or_default()
            })
            .is_some_and(|path| path.contains(me));
            (!cycle).then(|| (c.parent.clone(), remaining))
        })
        .collect();
    blocking.sort_by_key(|(p, _)| p.to_string());
    blocking.into_iter().next()
}

// ---------------------------------------------------------------------------------------------
// The index and the parents listed

/// What the rules read of one parent: its [`verdict`] as a dependency, and what the deletion
/// order reads ([`Candidate`]).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Seen {
    verdict: Result<(), NotReady>,
    depends_on: Vec<ParentRef>,
    deleting_since: Option<i64>,
    deletes_members: bool,
}

impl Seen {
    fn of<P: Parent>(o: &P) -> Seen {
        let (meta, spec, parent) = (o.meta(), o.spec(), o.parent_ref());
        Seen {
            verdict: verdict(&parent, Some((meta, o.status()))),
            depends_on: resolve_lenient(&parent, spec),
            deleting_since: meta.deletion_timestamp.as_ref().map(|t| t.0.as_second()),
            deletes_members: spec.deletion_policy.deletes_members(spec.prune)
                && meta.finalizers.iter().flatten().any(|f| f == FINALIZER),
        }
    }

    fn candidate(&self, parent: &ParentRef) -> Candidate {
        Candidate {
            parent: parent.clone(),
            depends_on: self.depends_on.clone(),
            deleting_since: self.deleting_since,
            deletes_members: self.deletes_members,
        }
    }
}

/// The parents of one kind as its watch lists them ([`Seen`]): the last full list with the
/// changes since. A new list replaces it when it ends, as the kube-runtime store does (a
/// parent deleted while the watch was away is gone then).
#[derive(Default)]
struct Listed {
    now: HashMap<ParentRef, Seen>,
    /// A list in progress.
    listing: Option<HashMap<ParentRef, Seen>>,
    /// Whether a list has ended once.
    synced: bool,
}

impl Listed {
    fn apply<P: Parent>(&mut self, event: &watcher::Event<P>) {
        match event {
            watcher::Event::Init => self.listing = Some(HashMap::new()),
            watcher::Event::InitApply(o) => {
                let into = self.listing.as_mut().unwrap_or(&mut self.now);
                into.insert(o.parent_ref(), Seen::of(o));
            }
            watcher::Event::InitDone => {
                if let Some(listed) = self.listing.take() {
                    self.now = listed;
                }
                self.synced = true;
            }
            watcher::Event::Apply(o) => {
                self.now.insert(o.parent_ref(), Seen::of(o));
            }
            watcher::Event::Delete(o) => {
                self.now.remove(&o.parent_ref());
            }
        }
    }
}

/// Why the gate stops a reconcile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The spec's dependsOn is invalid or not allowed (ValidationFailed, Stalled).
    Invalid(DependencyError),
    /// A cycle (ValidationFailed, Stalled): `cycle` as [`find_cycle`] found it; `others`: the
    /// other sets of the cycle not yet refused for it by their own gate (to reconcile, so that
    /// they refuse it too).
    Cycle {
        cycle: Vec<ParentRef>,
        others: Vec<ParentRef>,
    },
    /// A dependency is not ready (DependencyNotReady, retried).
    NotReady(NotReady),
}

/// What a set being deleted waits for before it deletes its members.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Waiting {
    /// Nothing: go ahead.
    No,
    /// The parent watches have not listed every parent yet.
    Caches,
    /// `dependent`, at most `remaining` longer.
    For {
        dependent: ParentRef,
        remaining: Duration,
    },
}

#[derive(Default)]
struct Index {
    /// Each set's dependencies as of its last reconcile.
    depends_on: HashMap<ParentRef, Vec<ParentRef>>,
    /// The reverse: each dependency's dependents.
    dependents: HashMap<ParentRef, HashSet<ParentRef>>,
    /// The last verdict seen of each set that has dependents.
    verdicts: HashMap<ParentRef, Result<(), NotReady>>,
    /// The sets whose last gate refused them for a dependsOn cycle.
    in_cycle: HashSet<ParentRef>,
}

impl Index {
    fn set(&mut self, parent: &ParentRef, dependencies: Vec<ParentRef>) {
        // Unchanged (every reconcile of a set whose dependsOn did not change): the verdicts
        // of its dependencies are kept, so their next event triggers only on a real change.
        if self.depends_on.get(parent) == Some(&dependencies) {
            return;
        }
        if let Some(old) = self.depends_on.remove(parent) {
            for d in old.into_iter().filter(|d| !dependencies.contains(d)) {
                if let Some(ds) = self.dependents.get_mut(&d) {
                    ds.remove(parent);
                    if ds.is_empty() {
                        self.dependents.remove(&d);
                        self.verdicts.remove(&d);
                    }
                }
            }
        }
        if dependencies.is_empty() {
            self.in_cycle.remove(parent);
            return;
        }
        for d in &dependencies {
            self.dependents
                .entry(d.clone())
                .or_default()
                .insert(parent.clone());
        }
        self.depends_on.insert(parent.clone(), dependencies);
    }

    fn dependents_of(&self, parent: &ParentRef) -> Vec<ParentRef> {
        let mut out: Vec<ParentRef> = self
            .dependents
            .get(parent)
            .map(|d| d.iter().cloned().collect())
            .unwrap_or_default();
        out.sort_by_key(ToString::to_string);
        out
    }
}

/// The dependency index and the parents listed, shared by every reconcile.
#[derive(Default)]
pub struct Dependencies {
    index: Mutex<Index>,
    applysets: Mutex<Listed>,
    cluster_applysets: Mutex<Listed>,
}

impl Dependencies {
    fn listed(&self, kind: ParentKind) -> &Mutex<Listed> {
        match kind {
            ParentKind::ApplySet => &self.applysets,
            ParentKind::ClusterApplySet => &self.cluster_applysets,
        }
    }

    /// What the rules read of `parent`, if its watch listed it.
    fn seen(&self, parent: &ParentRef) -> Option<Seen> {
        self.listed(parent.kind).lock().now.get(parent).cloned()
    }

    /// Records what `parent` depends on now (replacing what it depended on before).
    pub fn set(&self, parent: &ParentRef, dependencies: Vec<ParentRef>) {
        self.index.lock().set(parent, dependencies);
    }

    /// Forgets what `parent` depends on (it is deleted).
    pub fn forget(&self, parent: &ParentRef) {
        self.set(parent, Vec::new());
    }

    /// How many sets the index holds (`applyset_tracked_sets`): sets with dependencies, and
    /// dependencies with dependents; and how many parents of each kind are listed.
    pub fn tracked_sets(&self) -> [(&'static str, usize); 4] {
        let (depends_on, dependents) = {
            let i = self.index.lock();
            (i.depends_on.len(), i.dependents.len())
        };
        [
            ("depends_on", depends_on),
            ("dependents", dependents),
            ("listed_applysets", self.applysets.lock().now.len()),
            (
                "listed_cluster_applysets",
                self.cluster_applysets.lock().now.len(),
            ),
        ]
    }

    /// The sets that depend on `parent`, as of their last reconcile, sorted.
    pub fn dependents_of(&self, parent: &ParentRef) -> Vec<ParentRef> {
        self.index.lock().dependents_of(parent)
    }

    /// What `parent` depends on, as of its last reconcile.
    fn depends_on(&self, parent: &ParentRef) -> Vec<ParentRef> {
        self.index
            .lock()
            .depends_on
            .get(parent)
            .cloned()
            .unwrap_or_default()
    }

    /// The [`verdict`] on `dependency`: as listed, else read from the API server (a set the
    /// watches do not list: outside the operator's namespace or label selector, or not
    /// listed yet).
    async fn verdict_now(&self, client: &Client, dependency: &ParentRef) -> Result<(), NotReady> {
        if let Some(seen) = self.seen(dependency) {
            return seen.verdict;
        }
        let found = AnyParent::get(client, dependency)
            .await
            .map_err(|e| NotReady::Unreadable {
                dependency: dependency.clone(),
                cause: e.to_string(),
            })?;
        verdict(dependency, found.as_ref().map(|f| (f.meta(), f.status())))
    }

    /// The gate of a reconcile (docs/design.md §4, step 0): records what `parent` depends on, then
    /// refuses an invalid or disallowed dependsOn, a cycle through `parent` (from the index:
    /// the others' dependencies as of their last reconcile, and `parent`'s from `spec`), and
    /// a dependency that is not ready (the first one, in spec order). `client` reads a
    /// dependency the caches do not hold.
    pub async fn gate(
        &self,
        client: &Client,
        parent: &ParentRef,
        spec: &ApplySetSpec,
        tenancy: &Defaults,
    ) -> Result<(), Refusal> {
        let resolved = resolve(parent, spec).and_then(|deps| {
            check_scope(parent, &deps, tenancy)?;
            Ok(deps)
        });
        let dependencies = match resolved {
            Ok(deps) => deps,
            Err(e) => {
                self.forget(parent);
                return Err(Refusal::Invalid(e));
            }
        };
        // Recorded before any dependency is looked at: a dependency that becomes ready after
        // the look finds this set in the index (see `on_event`).
        self.set(parent, dependencies.clone());
        if dependencies.is_empty() {
            return Ok(());
        }
        let edges = |p: &ParentRef| {
            if p == parent {
                dependencies.clone()
            } else {
                self.depends_on(p)
            }
        };
        let cycle = find_cycle(parent, edges);
        let refused = self.mark_cycle(parent, cycle.is_some());
        if let Some(cycle) = cycle {
            let others = cycle
                .iter()
                .filter(|p| *p != parent && !refused.contains(*p))
                .cloned()
                .collect::<HashSet<_>>()
                .into_iter()
                .collect();
            return Err(Refusal::Cycle { cycle, others });
        }
        for d in &dependencies {
            self.verdict_now(client, d)
                .await
                .map_err(Refusal::NotReady)?;
        }
        Ok(())
    }

    /// Records whether `parent`'s gate refused it for a cycle; returns the sets so refused.
    fn mark_cycle(&self, parent: &ParentRef, in_cycle: bool) -> HashSet<ParentRef> {
        let mut index = self.index.lock();
        if in_cycle {
            index.in_cycle.insert(parent.clone());
        } else {
            index.in_cycle.remove(parent);
        }
        index.in_cycle.clone()
    }

    /// Records what the rules read of the parent of `event` (an event of the watch of parents
    /// of kind `P`), and names the sets to reconcile after it:
    /// - a set added or changed whose verdict as a dependency changed: when it became ready,
    ///   its dependents; otherwise its dependents that are not ready themselves (so that what
    ///   they say stays true; one that is ready finds out at its own next reconcile).
    /// - a set gone: its dependents that are not ready, and its dependencies being deleted
    ///   (they may have been waiting for it). Its own dependencies are forgotten.
    pub fn on_event<P: Parent>(&self, event: &watcher::Event<P>) -> Vec<ParentRef> {
        self.listed(P::KIND).lock().apply(event);
        match event {
            watcher::Event::Apply(o) | watcher::Event::InitApply(o) => {
                let parent = o.parent_ref();
                let verdict = verdict(&parent, Some((o.meta(), o.status())));
                let dependents = {
                    let mut index = self.index.lock();
                    if !index.dependents.contains_key(&parent) {
                        return Vec::new();
                    }
                    let previous = index.verdicts.insert(parent.clone(), verdict.clone());
                    if previous.as_ref() == Some(&verdict) {
                        return Vec::new();
                    }
                    index.dependents_of(&parent)
                };
                if verdict.is_ok() {
                    dependents
                } else {
                    self.not_ready(dependents)
                }
            }
            watcher::Event::Delete(o) => {
                let parent = o.parent_ref();
                let dependents = {
                    let mut index = self.index.lock();
                    index.verdicts.remove(&parent);
                    index.set(&parent, Vec::new());
                    index.dependents_of(&parent)
                };
                let mut out = self.not_ready(dependents);
                out.extend(
                    resolve_lenient(&parent, o.spec())
                        .into_iter()
                        .filter(|d| self.seen(d).is_some_and(|s| s.deleting_since.is_some())),
                );
                out
            }
            watcher::Event::Init | watcher::Event::InitDone => Vec::new(),
        }
    }

    /// The sets of `parents` that are not ready themselves (or not listed).
    fn not_ready(&self, parents: Vec<ParentRef>) -> Vec<ParentRef> {
        parents
            .into_iter()
            .filter(|p| self.seen(p).is_none_or(|s| s.verdict.is_err()))
            .collect()
    }

    /// Which dependent `me`, being deleted with `spec`, waits for (see
    /// [`blocking_dependent`]; patience: `spec.timeout`), looked up in the parents listed of
    /// both kinds — not in the index, which is empty after a restart until every set
    /// reconciled. `now`: the current time.
    pub fn waiting_for(&self, me: &ParentRef, spec: &ApplySetSpec, now: Timestamp) -> Waiting {
        let mut candidates = Vec::new();
        for kind in [ParentKind::ApplySet, ParentKind::ClusterApplySet] {
            let listed = self.listed(kind).lock();
            if !listed.synced {
                return Waiting::Caches;
            }
            candidates.extend(listed.now.iter().map(|(p, s)| s.candidate(p)));
        }
        // Only the dependencies the gate would let through (see `confined`).
        let candidates: Vec<Candidate> = candidates
            .into_iter()
            .map(|c| {
                let accepted = self.depends_on(&c.parent);
                confined(c, &accepted)
            })
            .collect();
        match blocking_dependent(me, &candidates, spec.timeout(), now.as_second()) {
            None => Waiting::No,
            Some((dependent, remaining)) => Waiting::For {
                dependent,
                remaining,
            },
        }
    }
}

/// Whether `obj` has our finalizer.
pub fn has_finalizer<P: Parent>(obj: &P) -> bool {
    obj.finalizers().iter().any(|f| f == FINALIZER)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

    use super::*;
    use crate::api::{ApplySet, Dependency};

    fn a(ns: &str, name: &str) -> ParentRef {
        ParentRef::applyset(ns, name)
    }

    fn c(name: &str) -> ParentRef {
        ParentRef::cluster(name)
    }

    fn dep(name: &str, namespace: Option<&str>, kind: DependencyKind) -> Dependency {
        Dependency {
            name: name.into(),
            namespace: namespace.map(str::to_string),
            kind,
        }
    }

    fn spec(deps: Vec<Dependency>) -> ApplySetSpec {
        ApplySetSpec {
            depends_on: deps,
            ..ApplySetSpec::default()
        }
    }

    // ----- resolve and check_scope -----

    #[test]
    fn an_applyset_dependency_defaults_to_the_dependents_namespace() {
        let s = spec(vec![
            dep("crds", None, DependencyKind::ApplySet),
            dep("db", Some("data"), DependencyKind::ApplySet),
            dep("platform", None, DependencyKind::ClusterApplySet),
        ]);
        assert_eq!(
            resolve(&a("team", "web"), &s),
            Ok(vec![a("team", "crds"), a("data", "db"), c("platform")])
        );
    }

    #[test]
    fn a_cluster_applyset_must_name_the_namespace_of_an_applyset_dependency() {
        let s = spec(vec![dep("crds", None, DependencyKind::ApplySet)]);
        let err = resolve(&c("platform"), &s)
            .expect_err("no namespace")
            .to_string();
        assert_eq!(
            err,
            "spec.dependsOn[0] (ApplySet crds): a ClusterApplySet must name the namespace of an ApplySet it depends on (set namespace)"
        );
        let s = spec(vec![dep("crds", Some("x"), DependencyKind::ApplySet)]);
        assert_eq!(resolve(&c("platform"), &s), Ok(vec![a("x", "crds")]));
    }

    #[test]
    fn a_cluster_applyset_dependency_has_no_namespace() {
        let s = spec(vec![dep(
            "base",
            Some("x"),
            DependencyKind::ClusterApplySet,
        )]);
        let err = resolve(&a("team", "web"), &s)
            .expect_err("namespace")
            .to_string();
        assert!(
            err.contains("namespace is only for an ApplySet dependency"),
            "{err}"
        );
    }

    #[test]
    fn dependencies_are_bounded_and_named() {
        let many = (0..=MAX_DEPENDENCIES)
            .map(|i| dep(&format!("d{i}"), None, DependencyKind::ApplySet))
            .collect();
        let err = resolve(&a("t", "w"), &spec(many))
            .expect_err("too many")
            .to_string();
        assert!(
            err.contains("65 entries, more than the 64 allowed"),
            "{err}"
        );
        let err = resolve(
            &a("t", "w"),
            &spec(vec![dep("", None, DependencyKind::ApplySet)]),
        )
        .expect_err("empty name")
        .to_string();
        assert!(err.contains("name is empty"), "{err}");
        // The lenient reading keeps what resolves.
        let s = spec(vec![
            dep("", None, DependencyKind::ApplySet),
            dep("ok", None, DependencyKind::ClusterApplySet),
        ]);
        assert_eq!(resolve_lenient(&a("t", "w"), &s), vec![c("ok")]);
    }

    #[test]
    fn cross_namespace_dependencies_are_refused_only_under_the_lock_down() {
        let open = Defaults::default();
        let locked = Defaults {
            namespaced: Some("deployer".into()),
            ..Defaults::default()
        };
        let locked_but_allowed = Defaults {
            allow_cross_namespace: true,
            ..locked.clone()
        };
        let me = a("team", "web");
        let other_ns = vec![a("team", "crds"), a("data", "db")];
        assert_eq!(check_scope(&me, &other_ns, &open), Ok(()));
        let err = check_scope(&me, &other_ns, &locked)
            .expect_err("refused")
            .to_string();
        assert!(
            err.starts_with("spec.dependsOn: ApplySet data/db is in another namespace"),
            "{err}"
        );
        assert_eq!(check_scope(&me, &other_ns, &locked_but_allowed), Ok(()));
        // Its own namespace and ClusterApplySets are always allowed; a ClusterApplySet may
        // depend on any set.
        let own = vec![a("team", "crds"), c("platform")];
        assert_eq!(check_scope(&me, &own, &locked), Ok(()));
        assert_eq!(check_scope(&c("platform"), &other_ns, &locked), Ok(()));
    }

    // ----- verdict -----

    fn condition(type_: &str, status: &str, reason: &str, generation: Option<i64>) -> Condition {
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: String::new(),
            observed_generation: generation,
            last_transition_time: Time(Timestamp::UNIX_EPOCH),
        }
    }

    fn meta(generation: i64) -> ObjectMeta {
        ObjectMeta {
            generation: Some(generation),
            ..ObjectMeta::default()
        }
    }

    fn status(observed: i64, conditions: Vec<Condition>) -> ApplySetStatus {
        ApplySetStatus {
            observed_generation: Some(observed),
            conditions,
            ..ApplySetStatus::default()
        }
    }

    #[test]
    fn a_dependency_is_ready_with_ready_true_for_its_current_generation() {
        let d = a("team-a", "crds");
        let ready = status(
            3,
            vec![condition(
                "Ready",
                "True",
                "ReconciliationSucceeded",
                Some(3),
            )],
        );
        assert_eq!(verdict(&d, Some((&meta(3), Some(&ready)))), Ok(()));
        assert_eq!(
            verdict(&d, Some((&meta(4), Some(&ready)))).map_err(|e| e.to_string()),
            Err("ApplySet team-a/crds has not reconciled generation 4 yet".into())
        );
        assert_eq!(
            verdict(&d, None).map_err(|e| e.to_string()),
            Err("ApplySet team-a/crds does not exist".into())
        );
        assert_eq!(
            verdict(&d, Some((&meta(1), None))).map_err(|e| e.to_string()),
            Err("ApplySet team-a/crds has not reconciled generation 1 yet".into())
        );
        let failed = status(3, vec![condition("Ready", "False", "ApplyFailed", Some(3))]);
        assert_eq!(
            verdict(&d, Some((&meta(3), Some(&failed)))).map_err(|e| e.to_string()),
            Err("ApplySet team-a/crds is not ready: Ready=False (ApplyFailed)".into())
        );
    }

    #[test]
    fn the_ready_conditions_own_generation_counts() {
        let d = c("base");
        // A reconcile of generation 4 in progress: status.observedGeneration is 4 but Ready
        // still describes 3.
        let marking = status(
            4,
            vec![
                condition("Ready", "True", "ReconciliationSucceeded", Some(3)),
                condition("Reconciling", "True", "Progressing", Some(4)),
            ],
        );
        assert_eq!(
            verdict(&d, Some((&meta(4), Some(&marking)))).map_err(|e| e.to_string()),
            Err("ClusterApplySet base has not reconciled generation 4 yet".into())
        );
        // A Ready condition without observedGeneration falls back to the status'.
        let old = status(
            4,
            vec![condition("Ready", "True", "ReconciliationSucceeded", None)],
        );
        assert_eq!(verdict(&d, Some((&meta(4), Some(&old)))), Ok(()));
        // -1 is "not observed yet".
        let new = status(-1, vec![condition("Ready", "False", "Progressing", None)]);
        assert!(verdict(&d, Some((&meta(1), Some(&new)))).is_err());
    }

    #[test]
    fn a_dependency_with_a_healthy_condition_must_be_healthy() {
        let d = a("t", "db");
        let ready = condition("Ready", "True", "ReconciliationSucceeded", Some(2));
        let unhealthy = status(
            2,
            vec![
                ready.clone(),
                condition("Healthy", "False", "HealthCheckFailed", Some(2)),
            ],
        );
        assert_eq!(
            verdict(&d, Some((&meta(2), Some(&unhealthy)))).map_err(|e| e.to_string()),
            Err("ApplySet t/db is not healthy: Healthy=False (HealthCheckFailed)".into())
        );
        let healthy = status(
            2,
            vec![ready, condition("Healthy", "True", "Current", Some(2))],
        );
        assert_eq!(verdict(&d, Some((&meta(2), Some(&healthy)))), Ok(()));
    }

    #[test]
    fn a_dependency_being_deleted_is_not_ready() {
        let d = a("t", "db");
        let ready = status(
            2,
            vec![condition(
                "Ready",
                "True",
                "ReconciliationSucceeded",
                Some(2),
            )],
        );
        let mut m = meta(2);
        m.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        assert_eq!(
            verdict(&d, Some((&m, Some(&ready)))).map_err(|e| e.to_string()),
            Err("ApplySet t/db is being deleted".into())
        );
    }

    // ----- cycles -----

    fn graph(
        edges: &[(&ParentRef, &[&ParentRef])],
    ) -> impl Fn(&ParentRef) -> Vec<ParentRef> + use<> {
        let map: HashMap<ParentRef, Vec<ParentRef>> = edges
            .iter()
            .map(|(k, v)| ((*k).clone(), v.iter().map(|p| (*p).clone()).collect()))
            .collect();
        move |p| map.get(p).cloned().unwrap_or_default()
    }

    #[test]
    fn cycles_through_the_start_are_found_and_named() {
        let (x, y, z) = (a("a", "x"), a("a", "y"), c("z"));
        // Self-dependency.
        let g = graph(&[(&x, &[&x])]);
        assert_eq!(find_cycle(&x, g), Some(vec![x.clone(), x.clone()]));
        // Two sets.
        let g = graph(&[(&x, &[&y]), (&y, &[&x])]);
        let cycle = find_cycle(&x, &g).expect("a cycle");
        assert_eq!(
            describe_cycle(&cycle),
            "dependsOn cycle: ApplySet a/x → ApplySet a/y → ApplySet a/x"
        );
        assert_eq!(
            describe_cycle(&find_cycle(&y, &g).expect("a cycle")),
            "dependsOn cycle: ApplySet a/y → ApplySet a/x → ApplySet a/y"
        );
        // Three, across kinds.
        let g = graph(&[(&x, &[&y]), (&y, &[&z]), (&z, &[&x])]);
        assert_eq!(
            describe_cycle(&find_cycle(&z, &g).expect("a cycle")),
            "dependsOn cycle: ClusterApplySet z → ApplySet a/x → ApplySet a/y → ClusterApplySet z"
        );
    }

    #[test]
    fn no_cycle_in_a_dag_nor_for_a_set_outside_a_cycle() {
        let (w, x, y, z) = (a("a", "w"), a("a", "x"), a("a", "y"), a("a", "z"));
        // A diamond: w → x, y → z.
        let g = graph(&[(&w, &[&x, &y]), (&x, &[&z]), (&y, &[&z])]);
        for p in [&w, &x, &y, &z] {
            assert_eq!(find_cycle(p, &g), None, "{p}");
        }
        // w depends on a cycle x ⇄ y it is not part of.
        let g = graph(&[(&w, &[&x]), (&x, &[&y]), (&y, &[&x])]);
        assert_eq!(find_cycle(&w, &g), None);
        assert!(find_cycle(&x, &g).is_some());
    }

    #[test]
    fn the_first_cycle_in_spec_order_is_named() {
        let (s, x, y) = (a("a", "s"), a("a", "x"), a("a", "y"));
        let g = graph(&[(&s, &[&y, &x]), (&x, &[&s]), (&y, &[&x])]);
        assert_eq!(find_cycle(&s, &g), Some(vec![s.clone(), y, x, s.clone()]));
    }

    #[test]
    fn a_long_chain_does_not_overflow_the_stack() {
        let n = 50_000;
        let node = |i: usize| a("a", &format!("n{i}"));
        let next = move |p: &ParentRef| {
            let i: usize = p.name[1..].parse().unwrap_or(0);
            vec![node((i + 1) % n)]
        };
        let cycle = find_cycle(&node(0), next).expect("the chain closes");
        assert_eq!(cycle.len(), n + 1);
    }

    /// Every graph of four sets (every subset of the 16 possible edges, self-dependencies
    /// included), from every start: a cycle is reported exactly when the start reaches itself,
    /// and what is reported is a path of real edges from the start back to it.
    #[test]
    fn exhaustively_every_graph_of_four_sets() {
        let nodes: Vec<ParentRef> = (0..4).map(|i| a("a", &format!("s{i}"))).collect();
        for bits in 0u32..(1 << 16) {
            let has = |i: usize, j: usize| bits & (1 << (i * 4 + j)) != 0;
            let index = |p: &ParentRef| nodes.iter().position(|n| n == p).unwrap_or(0);
            let edges = |p: &ParentRef| {
                let i = index(p);
                (0..4)
                    .filter(|&j| has(i, j))
                    .map(|j| nodes[j].clone())
                    .collect()
            };
            for start in 0..4 {
                // Reachability by a closure over ≥ 1 edge.
                let mut reach = [false; 4];
                let mut todo: Vec<usize> = (0..4).filter(|&j| has(start, j)).collect();
                while let Some(k) = todo.pop() {
                    if !reach[k] {
                        reach[k] = true;
                        todo.extend((0..4).filter(|&j| has(k, j)));
                    }
                }
                let found = find_cycle(&nodes[start], edges);
                assert_eq!(
                    found.is_some(),
                    reach[start],
                    "graph {bits:#b} from {start}"
                );
                if let Some(path) = found {
                    assert_eq!(path.first(), Some(&nodes[start]));
                    assert_eq!(path.last(), Some(&nodes[start]));
                    for w in path.windows(2) {
                        assert!(has(index(&w[0]), index(&w[1])), "{bits:#b}: {path:?}");
                    }
                    // No set twice, but the start at both ends.
                    let inner: HashSet<&ParentRef> = path[..path.len() - 1].iter().collect();
                    assert_eq!(inner.len(), path.len() - 1, "{path:?}");
                }
            }
        }
    }

    // ----- deletion order -----

    fn candidate(
        p: &ParentRef,
        deps: &[&ParentRef],
        since: Option<i64>,
        deletes: bool,
    ) -> Candidate {
        Candidate {
            parent: p.clone(),
            depends_on: deps.iter().map(|d| (*d).clone()).collect(),
            deleting_since: since,
            deletes_members: deletes,
        }
    }

    #[test]
    fn a_set_waits_for_dependents_being_deleted_that_delete_members() {
        let (base, app, other) = (c("base"), a("t", "app"), a("t", "other"));
        let patience = Duration::from_secs(300);
        let me = candidate(&base, &[], Some(1000), true);
        // A dependent being deleted for 10 s: wait, at most 290 s more.
        let all = [me.clone(), candidate(&app, &[&base], Some(1000), true)];
        assert_eq!(
            blocking_dependent(&base, &all, patience, 1010),
            Some((app.clone(), Duration::from_secs(290)))
        );
        // Not being deleted, Orphan or finalizer gone, a set that does not depend on it, or
        // waited for long enough: no wait.
        for others in [
            candidate(&app, &[&base], None, true),
            candidate(&app, &[&base], Some(1000), false),
            candidate(&other, &[], Some(1000), true),
        ] {
            assert_eq!(
                blocking_dependent(&base, &[me.clone(), others.clone()], patience, 1010),
                None,
                "{others:?}"
            );
        }
        assert_eq!(blocking_dependent(&base, &all, patience, 1300), None);
        // A set is never its own dependent.
        let itself = [candidate(&base, &[&base], Some(1000), true)];
        assert_eq!(blocking_dependent(&base, &itself, patience, 1010), None);
    }

    #[test]
    fn sets_in_a_cycle_do_not_wait_for_each_other() {
        let (x, y, z) = (a("t", "x"), a("t", "y"), a("t", "z"));
        let all = [
            candidate(&x, &[&y], Some(1), true),
            candidate(&y, &[&z], Some(1), true),
            candidate(&z, &[&x], Some(1), true),
        ];
        for p in [&x, &y, &z] {
            assert_eq!(
                blocking_dependent(p, &all, Duration::from_secs(60), 2),
                None
            );
        }
    }

    #[test]
    fn the_first_dependent_by_name_is_named() {
        let base = c("base");
        let all = [
            candidate(&a("t", "zeta"), &[&base], Some(1), true),
            candidate(&a("t", "alpha"), &[&base], Some(1), true),
        ];
        let (first, _) =
            blocking_dependent(&base, &all, Duration::from_secs(60), 2).expect("a wait");
        assert_eq!(first, a("t", "alpha"));
    }

    // ----- the index and watch events -----

    fn applyset(ns: &str, name: &str, generation: i64, st: Option<ApplySetStatus>) -> ApplySet {
        let mut o = ApplySet::new(name, ApplySetSpec::default());
        o.metadata.namespace = Some(ns.into());
        o.metadata.generation = Some(generation);
        o.status = st;
        o
    }

    fn ready(generation: i64) -> Option<ApplySetStatus> {
        Some(status(
            generation,
            vec![condition(
                "Ready",
                "True",
                "ReconciliationSucceeded",
                Some(generation),
            )],
        ))
    }

    #[test]
    fn the_index_follows_each_sets_last_dependencies() {
        let d = Dependencies::default();
        let (web, api, crds, base) = (a("t", "web"), a("t", "api"), a("t", "crds"), c("base"));
        d.set(&web, vec![crds.clone(), base.clone()]);
        d.set(&api, vec![crds.clone()]);
        assert_eq!(d.dependents_of(&crds), vec![a("t", "api"), a("t", "web")]);
        assert_eq!(d.dependents_of(&base), vec![web.clone()]);
        d.set(&web, vec![crds.clone()]);
        assert_eq!(d.dependents_of(&base), Vec::<ParentRef>::new());
        d.forget(&api);
        d.forget(&web);
        assert_eq!(d.dependents_of(&crds), Vec::<ParentRef>::new());
        let index = d.index.lock();
        assert!(index.depends_on.is_empty() && index.dependents.is_empty());
    }

    #[test]
    fn a_dependency_that_becomes_ready_triggers_its_dependents_once() {
        let d = Dependencies::default();
        let (web, crds) = (a("t", "web"), a("t", "crds"));
        // Without dependents, nothing is tracked.
        let event = |o: ApplySet| watcher::Event::Apply(o);
        assert!(
            d.on_event(&event(applyset("t", "crds", 1, None)))
                .is_empty()
        );
        d.set(&web, vec![crds.clone()]);
        // Not ready: the dependents not ready themselves (not in the caches here) hear of it,
        // once per change of what it says.
        assert_eq!(
            d.on_event(&event(applyset("t", "crds", 1, None))),
            vec![web.clone()]
        );
        assert!(
            d.on_event(&event(applyset("t", "crds", 1, None)))
                .is_empty()
        );
        assert_eq!(
            d.on_event(&event(applyset("t", "crds", 1, ready(1)))),
            vec![web.clone()]
        );
        assert!(
            d.on_event(&event(applyset("t", "crds", 1, ready(1))))
                .is_empty()
        );
        // A new generation, then ready again.
        assert_eq!(
            d.on_event(&event(applyset("t", "crds", 2, ready(1)))),
            vec![web.clone()]
        );
        assert_eq!(
            d.on_event(&event(applyset("t", "crds", 2, ready(2)))),
            vec![web.clone()]
        );
        // The dependent reconciled again with the same dependsOn: nothing changed.
        d.set(&web, vec![crds.clone()]);
        assert!(
            d.on_event(&event(applyset("t", "crds", 2, ready(2))))
                .is_empty()
        );
        // Gone: its dependents hear of it; what it depended on is forgotten.
        d.set(&crds, vec![c("base")]);
        let gone = watcher::Event::Delete(applyset("t", "crds", 2, ready(2)));
        assert_eq!(d.on_event(&gone), vec![web]);
        assert!(d.dependents_of(&c("base")).is_empty());
    }

    #[test]
    fn every_parent_listed_is_known_to_the_rules_and_a_new_list_replaces_the_last() {
        use crate::api::ClusterApplySet;
        let d = Dependencies::default();
        let crds = a("t", "crds");
        // `web` depends on `crds` and is being deleted, deleting its members.
        let web = || {
            let mut o = applyset("t", "web", 1, None);
            o.spec.depends_on = vec![dep("crds", None, DependencyKind::ApplySet)];
            o.metadata.finalizers = Some(vec![FINALIZER.to_string()]);
            o.metadata.deletion_timestamp = Some(Time(Timestamp::from_second(1000).unwrap()));
            o
        };
        let now = Timestamp::from_second(1010).unwrap();
        let list = |objects: Vec<ApplySet>| {
            d.on_event::<ApplySet>(&watcher::Event::Init);
            for o in objects {
                d.on_event(&watcher::Event::InitApply(o));
            }
            d.on_event::<ApplySet>(&watcher::Event::InitDone);
        };
        // Until both kinds are listed, a set being deleted cannot tell who waits for it.
        list(vec![web(), applyset("t", "crds", 1, ready(1))]);
        assert_eq!(d.waiting_for(&crds, &spec(vec![]), now), Waiting::Caches);
        d.on_event::<ClusterApplySet>(&watcher::Event::Init);
        d.on_event::<ClusterApplySet>(&watcher::Event::InitDone);
        assert!(matches!(
            d.waiting_for(&crds, &spec(vec![]), now),
            Waiting::For { dependent, .. } if dependent == a("t", "web")
        ));
        assert_eq!(d.seen(&crds).map(|s| s.verdict), Some(Ok(())));
        assert_eq!(d.tracked_sets()[2], ("listed_applysets", 2));
        // Listed again without `web` (deleted while the watch was away): gone from the rules.
        list(vec![applyset("t", "crds", 2, ready(1))]);
        assert_eq!(d.waiting_for(&crds, &spec(vec![]), now), Waiting::No);
        assert!(d.seen(&a("t", "web")).is_none());
        assert!(matches!(
            d.seen(&crds).map(|s| s.verdict),
            Some(Err(NotReady::NotReconciled { generation: 2, .. }))
        ));
        // Deleted: forgotten.
        d.on_event(&watcher::Event::Delete(applyset("t", "crds", 2, None)));
        assert_eq!(d.tracked_sets()[2], ("listed_applysets", 0));
    }

    #[test]
    fn the_deletion_order_counts_only_dependencies_the_gate_allows() {
        let web = ParentRef::applyset("team-a", "web");
        let db = ParentRef::applyset("team-a", "db");
        let victim = ParentRef::applyset("team-b", "victim");
        let platform = ParentRef::cluster("platform");
        let c = |depends_on: Vec<ParentRef>| Candidate {
            parent: web.clone(),
            depends_on,
            deleting_since: Some(1000),
            deletes_members: true,
        };
        let all = vec![db.clone(), victim.clone(), platform.clone()];
        // Never let through by a gate: only its own namespace counts.
        assert_eq!(confined(c(all.clone()), &[]).depends_on, vec![db.clone()]);
        // What its gate accepted counts too.
        let accepted = [platform.clone()];
        assert_eq!(
            confined(c(all.clone()), &accepted).depends_on,
            vec![db.clone(), platform.clone()]
        );
        // So another namespace's set being deleted is not held up by it.
        let me = confined(c(all), &[]);
        assert_eq!(
            blocking_dependent(
                &victim,
                std::slice::from_ref(&me),
                Duration::from_secs(60),
                1001
            ),
            None
        );
        assert!(blocking_dependent(&db, &[me], Duration::from_secs(60), 1001).is_some());
    }
}

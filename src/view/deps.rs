//! The dependsOn index over the cached sets, both ways, and the part of it a set's graph
//! draws; which changes concern a set's page ([`Near`]); and which dependency a waiting set
//! waits for. Pure.

use std::{
    collections::{BTreeMap, HashMap, HashSet, VecDeque},
    sync::Arc,
};

use super::{
    cache::{Change, Snapshot},
    summary::{SetSummary, State, key},
};
use crate::{applyset::ParentRef, dependencies::NotReady};

/// Edges `dependency -> dependents` and back, by set.
#[derive(Debug, Default)]
pub struct DepIndex {
    /// By the KEY of a set ([`key`]): the sets it depends on, in spec order (only sets with
    /// dependencies have an entry).
    pub upstream: BTreeMap<String, Vec<ParentRef>>,
    /// By the KEY of a set (cached or not): the cached sets that depend on it, sorted by
    /// kind, namespace and name.
    pub downstream: BTreeMap<String, Vec<ParentRef>>,
}

/// The sets around one set: every set it depends on, transitively, and every set that
/// depends on it, at most `limit` of them (the focus first), with the edges among them
/// (`(dependency, dependent)` indexes into `sets`) and how many were left out.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Neighbourhood {
    pub sets: Vec<ParentRef>,
    pub edges: Vec<(usize, usize)>,
    pub left_out: usize,
}

/// Which way a set of a neighbourhood was reached from the focus.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Way {
    Focus,
    Up,
    Down,
}

impl DepIndex {
    /// The index of `sets` (each set's resolved `depends_on`).
    pub fn build<'a>(sets: impl IntoIterator<Item = &'a SetSummary>) -> DepIndex {
        let mut index = DepIndex::default();
        for s in sets {
            if s.depends_on.is_empty() {
                continue;
            }
            for d in &s.depends_on {
                index
                    .downstream
                    .entry(key(d))
                    .or_default()
                    .push(s.parent.clone());
            }
            index.upstream.insert(key(&s.parent), s.depends_on.clone());
        }
        for dependents in index.downstream.values_mut() {
            dependents.sort_by(|a, b| order(a).cmp(&order(b)));
            dependents.dedup();
        }
        index
    }

    /// The sets `parent` depends on (spec order).
    pub fn dependencies(&self, parent: &ParentRef) -> &[ParentRef] {
        self.upstream.get(&key(parent)).map_or(&[], Vec::as_slice)
    }

    /// The cached sets that depend on `parent`.
    pub fn dependents(&self, parent: &ParentRef) -> &[ParentRef] {
        self.downstream.get(&key(parent)).map_or(&[], Vec::as_slice)
    }

    /// The upstream and downstream closure of `focus`, bounded by `limit` sets: a
    /// breadth-first walk from the focus (its dependencies before its dependents at each
    /// step, each in index order), so the nearest sets are kept when some are left out. A
    /// dependency that is not cached is a set of it too (a missing one).
    pub fn neighbourhood(&self, focus: &ParentRef, limit: usize) -> Neighbourhood {
        let (mut sets, _, mut at) = self.walk(focus, usize::MAX);
        let left_out = sets.len().saturating_sub(limit.max(1));
        sets.truncate(limit.max(1));
        at.retain(|_, i| *i < sets.len());
        let mut edges: Vec<(usize, usize)> = sets
            .iter()
            .enumerate()
            .flat_map(|(i, s)| {
                let at = &at;
                self.dependencies(s)
                    .iter()
                    .filter_map(move |d| at.get(d).map(|&j| (j, i)))
            })
            .collect();
        edges.sort_unstable();
        edges.dedup();
        Neighbourhood {
            sets,
            edges,
            left_out,
        }
    }

    /// The sets of [`DepIndex::neighbourhood`] (the same `limit` first), without walking
    /// further nor finding the edges; and those of them whose dependents belong to it (the
    /// focus and the sets reached downstream).
    fn near(&self, focus: &ParentRef, limit: usize) -> (HashSet<ParentRef>, HashSet<ParentRef>) {
        let (sets, ways, _) = self.walk(focus, limit.max(1));
        let down = sets
            .iter()
            .zip(ways)
            .filter(|(_, way)| *way != Way::Up)
            .map(|(s, _)| s.clone())
            .collect();
        (sets.into_iter().collect(), down)
    }

    /// The breadth-first walk of [`DepIndex::neighbourhood`], stopped once `stop` sets are
    /// found: the sets in walk order, the way each was reached, and where each is.
    fn walk(&self, focus: &ParentRef, stop: usize) -> Walk {
        let mut ways = vec![Way::Focus];
        let mut sets = vec![focus.clone()];
        let mut at: HashMap<ParentRef, usize> = HashMap::from([(focus.clone(), 0)]);
        let mut queue = VecDeque::from([(focus.clone(), Way::Focus)]);
        while let Some((p, way)) = queue.pop_front() {
            let up = matches!(way, Way::Focus | Way::Up).then(|| (self.dependencies(&p), Way::Up));
            let down =
                matches!(way, Way::Focus | Way::Down).then(|| (self.dependents(&p), Way::Down));
            for (next, way) in [up, down].into_iter().flatten() {
                for n in next {
                    if sets.len() >= stop {
                        return (sets, ways, at);
                    }
                    if !at.contains_key(n) {
                        at.insert(n.clone(), sets.len());
                        sets.push(n.clone());
                        ways.push(way);
                        queue.push_back((n.clone(), way));
                    }
                }
            }
        }
        (sets, ways, at)
    }
}

/// A walk: the sets in walk order, the way each was reached, and where each is.
type Walk = (Vec<ParentRef>, Vec<Way>, HashMap<ParentRef, usize>);

/// What a set page's live stream follows: its set, and the sets of its neighbourhood (the
/// first `limit`, as [`DepIndex::neighbourhood`] finds them) as of one snapshot version,
/// found again only when the snapshot moved.
#[derive(Debug)]
pub struct Near {
    focus: ParentRef,
    limit: usize,
    version: u64,
    sets: HashSet<ParentRef>,
    /// The focus and the sets reached downstream: a set depending on one of them joins.
    down: HashSet<ParentRef>,
}

impl Near {
    /// The neighbourhood of `focus` in `snapshot`.
    pub fn new(focus: ParentRef, limit: usize, snapshot: &Snapshot) -> Near {
        let (sets, down) = snapshot.deps.near(&focus, limit);
        Near {
            sets,
            down,
            version: snapshot.version,
            focus,
            limit,
        }
    }

    /// Whether `change` concerns the page: any change of its set; a summary change of a set
    /// of the neighbourhood as it was, of a set that now depends on its set or on a set
    /// downstream of it, or of a set of the neighbourhood as `snapshot` (called only for a
    /// summary change) now has it.
    pub fn concerns(&mut self, change: &Change, snapshot: impl FnOnce() -> Arc<Snapshot>) -> bool {
        let own = change.parent == self.focus;
        if !change.summary_changed {
            return own;
        }
        let joins = |s: &Arc<SetSummary>| s.depends_on.iter().any(|d| self.down.contains(d));
        let before =
            self.sets.contains(&change.parent) || change.summary.as_ref().is_some_and(joins);
        let now = snapshot();
        if now.version != self.version {
            (self.sets, self.down) = now.deps.near(&self.focus, self.limit);
            self.version = now.version;
        }
        own || before || self.sets.contains(&change.parent)
    }
}

/// The order of a view's sets: kind, namespace, name.
pub fn order(p: &ParentRef) -> (crate::applyset::ParentKind, &str, &str) {
    (
        p.kind,
        p.namespace.as_deref().unwrap_or_default(),
        p.name.as_str(),
    )
}

/// What a view knows of a dependency.
#[derive(Clone, Copy, Debug)]
pub enum Found<'a> {
    /// Cached: its summary.
    Cached(&'a SetSummary),
    /// Watched but not cached: it does not exist.
    Absent,
    /// Outside what the view watches: unknown.
    Unwatched,
}

/// The dependency a waiting set waits for and why: the first of its dependencies, in spec
/// order, that is not ready by [`crate::dependencies::verdict`] on what the view holds
/// (absent: it does not exist); failing that, the first it cannot see, with the reason the
/// operator wrote in Ready's message. `None` when the set is not [`State::Waiting`], or when
/// every dependency it can see is ready and it sees them all (the operator has not caught
/// up yet).
pub fn waiting_for<'a>(
    set: &SetSummary,
    find: impl Fn(&ParentRef) -> Found<'a>,
) -> Option<(ParentRef, String)> {
    if set.state != State::Waiting {
        return None;
    }
    let mut unseen = None;
    for d in &set.depends_on {
        match find(d) {
            Found::Cached(s) => {
                if let Err(why) = &s.as_dependency {
                    return Some((d.clone(), why.to_string()));
                }
            }
            Found::Absent => return Some((d.clone(), NotReady::Missing(d.clone()).to_string())),
            Found::Unwatched => {
                unseen.get_or_insert(d);
            }
        }
    }
    let message = set.ready.as_ref().map(|(_, _, m)| m.clone());
    unseen.map(|d| (d.clone(), message.unwrap_or_default()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dependencies::NotReady;

    fn a(name: &str) -> ParentRef {
        ParentRef::applyset("t", name)
    }

    fn set(p: &ParentRef, deps: &[&ParentRef]) -> SetSummary {
        SetSummary {
            state: State::Ready,
            depends_on: deps.iter().map(|d| (*d).clone()).collect(),
            as_dependency: Ok(()),
            ..SetSummary::unobserved(p.clone())
        }
    }

    fn names(n: &Neighbourhood) -> Vec<&str> {
        n.sets.iter().map(|p| p.name.as_str()).collect()
    }

    #[test]
    fn the_index_goes_both_ways_and_keeps_missing_dependencies() {
        let (web, api, db, gone) = (a("web"), a("api"), a("db"), a("gone"));
        let sets = [
            set(&web, &[&db, &api]),
            set(&api, &[&db, &gone]),
            set(&db, &[]),
        ];
        let index = DepIndex::build(&sets);
        assert_eq!(index.dependencies(&web), [db.clone(), api.clone()]);
        assert_eq!(index.dependents(&db), [api.clone(), web.clone()]);
        assert_eq!(index.dependents(&gone), std::slice::from_ref(&api));
        assert!(index.dependencies(&db).is_empty());
        assert_eq!(index.upstream.len(), 2);
    }

    #[test]
    fn the_neighbourhood_is_the_closure_both_ways_focus_first() {
        // crds <- db <- api <- web, api <- cli; other is unrelated; db depends on a missing set.
        let (crds, db, api, web, cli, other, gone) = (
            ParentRef::cluster("crds"),
            a("db"),
            a("api"),
            a("web"),
            a("cli"),
            a("other"),
            a("gone"),
        );
        let sets = [
            set(&crds, &[]),
            set(&db, &[&crds, &gone]),
            set(&api, &[&db]),
            set(&web, &[&api]),
            set(&cli, &[&api]),
            set(&other, &[&crds]),
        ];
        let index = DepIndex::build(&sets);
        let n = index.neighbourhood(&api, 100);
        assert_eq!(names(&n), ["api", "db", "cli", "web", "crds", "gone"]);
        // Edges (dependency, dependent) among them; `other` (a sibling via crds) is not in.
        assert_eq!(
            n.edges,
            vec![(1, 0), (0, 2), (0, 3), (4, 1), (5, 1)]
                .into_iter()
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect::<Vec<_>>()
        );
        assert_eq!(n.left_out, 0);
        // Bounded: the nearest are kept, the rest counted.
        let n = index.neighbourhood(&api, 3);
        assert_eq!((names(&n), n.left_out), (vec!["api", "db", "cli"], 3));
        assert_eq!(n.edges, vec![(0, 2), (1, 0)]);
        // A set with no edges, and one not cached at all, is alone.
        let alone = index.neighbourhood(&a("nobody"), 10);
        assert_eq!(
            (names(&alone), alone.edges.len(), alone.left_out),
            (vec!["nobody"], 0, 0)
        );
        // A missing dependency's neighbourhood holds its dependents.
        assert_eq!(
            names(&index.neighbourhood(&gone, 10)),
            ["gone", "db", "api", "cli", "web"]
        );
    }

    #[test]
    fn a_cycle_is_walked_once() {
        let (x, y) = (a("x"), a("y"));
        let sets = [set(&x, &[&y]), set(&y, &[&x])];
        let n = DepIndex::build(&sets).neighbourhood(&x, 10);
        assert_eq!(names(&n), ["x", "y"]);
        assert_eq!(n.edges, vec![(0, 1), (1, 0)]);
    }

    #[test]
    fn a_waiting_set_names_its_first_dependency_not_ready() {
        let (web, db, api, far) = (a("web"), a("db"), a("api"), ParentRef::applyset("x", "far"));
        let mut waiting = set(&web, &[&far, &db, &api]);
        waiting.state = State::Waiting;
        waiting.ready = Some((
            "False".into(),
            "DependencyNotReady".into(),
            "op says".into(),
        ));
        let mut unready = set(&api, &[]);
        unready.as_dependency = Err(NotReady::Deleting(api.clone()));
        let ready = set(&db, &[]);
        let cached = [ready, unready];
        let find = |d: &ParentRef| match cached.iter().find(|s| &s.parent == d) {
            Some(s) => Found::Cached(s),
            None if d.namespace.as_deref() == Some("t") => Found::Absent,
            None => Found::Unwatched,
        };
        assert_eq!(
            waiting_for(&waiting, find),
            Some((api.clone(), "ApplySet t/api is being deleted".into()))
        );
        // A watched dependency that is not cached does not exist.
        waiting.depends_on = vec![db.clone(), a("nope")];
        assert_eq!(
            waiting_for(&waiting, find),
            Some((a("nope"), "ApplySet t/nope does not exist".into()))
        );
        // Only unseen ones left: the first of them, with the operator's message.
        waiting.depends_on = vec![db.clone(), far.clone()];
        assert_eq!(waiting_for(&waiting, find), Some((far, "op says".into())));
        // Every one ready, or the set not waiting: nothing.
        waiting.depends_on = vec![db.clone()];
        assert_eq!(waiting_for(&waiting, find), None);
        waiting.depends_on = vec![api.clone()];
        waiting.state = State::Failing;
        assert_eq!(waiting_for(&waiting, find), None);
    }

    /// A change of `p` (its summary `s`; `None`: gone).
    fn change(p: &ParentRef, summary_changed: bool, s: Option<SetSummary>) -> Change {
        Change {
            parent: p.clone(),
            summary_changed,
            summary: s.map(Arc::new),
        }
    }

    fn snapshot(sets: &[SetSummary], version: u64) -> Arc<Snapshot> {
        Arc::new(Snapshot {
            sets: Vec::new(),
            deps: DepIndex::build(sets),
            version,
        })
    }

    #[test]
    fn a_set_page_hears_its_set_always_and_its_neighbourhood_when_it_moves() {
        // db <- api <- web; other depends on db too (upstream of api: not in api's graph).
        let (db, api, web, other, new) = (a("db"), a("api"), a("web"), a("other"), a("new"));
        let sets = [
            set(&db, &[]),
            set(&api, &[&db]),
            set(&web, &[&api]),
            set(&other, &[&db]),
        ];
        let mut near = Near::new(api.clone(), 10, &snapshot(&sets, 1));
        let mut builds = 0;
        let mut hears = |near: &mut Near, c: Change, now: &Arc<Snapshot>| {
            near.concerns(&c, || {
                builds += 1;
                now.clone()
            })
        };
        let same = snapshot(&sets, 1);
        // Its own set: every change, even one its summary does not show.
        assert!(hears(
            &mut near,
            change(&api, false, Some(set(&api, &[&db]))),
            &same
        ));
        // A neighbour: summary changes only.
        assert!(!hears(
            &mut near,
            change(&web, false, Some(set(&web, &[&api]))),
            &same
        ));
        assert!(hears(
            &mut near,
            change(&db, true, Some(set(&db, &[]))),
            &same
        ));
        // A sibling through db: not heard.
        assert!(!hears(
            &mut near,
            change(&other, true, Some(set(&other, &[&db]))),
            &same
        ));
        // A new set depending on api joins: heard before any snapshot has it.
        let joined = set(&new, &[&api]);
        assert!(hears(
            &mut near,
            change(&new, true, Some(joined.clone())),
            &same
        ));
        // web leaves (no longer depends on api): heard, then no longer followed.
        let mut moved = vec![set(&db, &[]), set(&api, &[&db]), set(&web, &[]), joined];
        let left = snapshot(&moved, 2);
        assert!(hears(
            &mut near,
            change(&web, true, Some(set(&web, &[]))),
            &left
        ));
        assert!(!hears(
            &mut near,
            change(&web, true, Some(set(&web, &[]))),
            &left
        ));
        // The joined set, now in the snapshot, is followed; a deleted neighbour is heard.
        assert!(hears(&mut near, change(&new, true, None), &left));
        moved.pop();
        assert!(hears(
            &mut near,
            change(&db, true, None),
            &snapshot(&moved, 3)
        ));
        // The neighbourhood is the newest snapshot's.
        assert!(!near.sets.contains(&web) && !near.sets.contains(&new));
        assert_eq!(
            builds, 7,
            "the snapshot is asked for once per summary change"
        );
    }
}

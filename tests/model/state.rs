//! The reference model: in plain Rust, what the cluster must contain. It knows each parent's
//! spec and recorded kinds and namespaces, and each object of the universe: who owns its
//! `part-of` label, its content, and whether it is annotated `applyset.dev/prune: disabled`.
//!
//! [`Model::converge`] runs the product rules (docs/design.md §4 and §6) as reconciles of
//! every parent until nothing changes: the state the operator must settle in, and the Ready
//! condition each parent must report then.

use std::collections::{BTreeMap, BTreeSet};

use crate::universe::{Decl, HOME, Key, Kind, SETS, is_cluster};

/// A parent's spec, as far as the walk varies it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spec {
    pub members: BTreeMap<Key, Decl>,
    pub prune: bool,
    pub suspend: bool,
    /// `deletionPolicy: Orphan` (else `Delete`).
    pub orphan: bool,
    pub allow_empty: bool,
    pub force: bool,
}

impl Default for Spec {
    fn default() -> Self {
        Spec {
            members: BTreeMap::new(),
            prune: true,
            suspend: false,
            orphan: false,
            allow_empty: false,
            force: false,
        }
    }
}

/// What a parent's annotations record: kinds, and namespaces other than its own.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recorded {
    pub kinds: BTreeSet<Kind>,
    pub namespaces: BTreeSet<usize>,
}

impl Recorded {
    /// What parent `s` records for exactly these members.
    fn of(s: usize, members: &BTreeMap<Key, Decl>) -> Recorded {
        Recorded {
            kinds: members.keys().map(|k| k.kind).collect(),
            namespaces: members
                .keys()
                .filter_map(|k| k.ns)
                .filter(|&ns| is_cluster(s) || ns != HOME)
                .collect(),
        }
    }

    fn union(&self, other: &Recorded) -> Recorded {
        Recorded {
            kinds: self.kinds.union(&other.kinds).copied().collect(),
            namespaces: self.namespaces.union(&other.namespaces).copied().collect(),
        }
    }

    /// Whether an object of `key` is within what parent `s` records (its own namespace
    /// always is; cluster-scoped objects are in every namespace).
    pub fn covers(&self, s: usize, key: &Key) -> bool {
        self.kinds.contains(&key.kind)
            && key
                .ns
                .is_none_or(|ns| (!is_cluster(s) && ns == HOME) || self.namespaces.contains(&ns))
    }
}

/// Who manages an object's `part-of` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Owner {
    /// Labelled with parent `s`'s ID by its member field manager: `s`'s, even while `s` does
    /// not exist (an orphan, adopted again when `s` is re-created).
    Set(usize),
    /// An object of a foreign actor, maybe with a `part-of` label it copied from parent `s`.
    Foreign { copied: Option<usize> },
}

/// One live object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Obj {
    pub owner: Owner,
    /// The revision last applied (the content).
    pub rev: u32,
    /// Annotated `applyset.dev/prune: disabled` by its parent's manifest.
    pub decl_pd: bool,
    /// Annotated `applyset.dev/prune: disabled` by a foreign actor.
    pub foreign_pd: bool,
    /// The value of the data key (ConfigMaps and Secrets).
    pub data: String,
    /// A value a foreign manager took the data key with (a ConfigMap's field it owns now).
    pub foreign_field: Option<String>,
    /// UID and resourceVersion, learnt from the cluster once it settled with this object.
    pub uid: Option<String>,
    pub rv: Option<String>,
}

impl Obj {
    /// Annotated `applyset.dev/prune: disabled` (by anyone): never deleted by the operator.
    pub fn prune_disabled(&self) -> bool {
        self.decl_pd || self.foreign_pd
    }

    /// The same content (what the cluster shows, UID and resourceVersion aside).
    fn same_content(&self, other: &Obj) -> bool {
        (
            self.owner,
            self.rev,
            self.decl_pd,
            self.foreign_pd,
            &self.data,
        ) == (
            other.owner,
            other.rev,
            other.decl_pd,
            other.foreign_pd,
            &other.data,
        )
    }
}

/// The Ready condition a parent must show once settled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expect {
    /// The parent does not exist.
    Gone,
    /// `Ready=True`, `ReconciliationSucceeded`, for its current generation.
    Ready,
    /// `Ready=False` with this reason, for its current generation.
    NotReady(&'static str),
}

/// One parent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetModel {
    pub exists: bool,
    pub spec: Spec,
    pub recorded: Recorded,
    /// What the parent's `status.members` lists: the declared set of its last complete
    /// reconcile. The operator adds it to what the annotations record (a record edited away
    /// is not forgotten), for the empty-set guard, the prune and the deletion.
    pub applied: Recorded,
    /// A foreign actor set the `tooling` annotation to another tool.
    pub hijacked: bool,
    pub expect: Expect,
}

/// Whether an apply of `value` (without force unless `force`) over `o` is refused: another
/// manager holds its data key with another value.
fn conflicts(o: &Obj, value: &str, force: bool) -> bool {
    !force && o.foreign_field.as_ref().is_some_and(|f| f != value)
}

/// Why a member was not applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Refused {
    /// Its `part-of` label belongs to another parent: `OwnershipConflict`.
    Owned,
    /// Another manager owns a field with another value, and the spec does not force.
    Conflict,
}

/// The model of the whole universe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Model {
    pub sets: Vec<SetModel>,
    pub objects: BTreeMap<Key, Obj>,
    /// Under `--shards auto`: which replicas (by index) run. Empty with a single operator.
    /// Not the cluster's content: what the next replica fault may do.
    pub replicas: Vec<bool>,
}

impl Model {
    /// No parent yet; the foreign objects exist, unlabelled.
    pub fn new(foreign: &[Key]) -> Model {
        let sets = SETS
            .iter()
            .map(|_| SetModel {
                exists: false,
                spec: Spec::default(),
                recorded: Recorded::default(),
                applied: Recorded::default(),
                hijacked: false,
                expect: Expect::Gone,
            })
            .collect();
        let objects = foreign
            .iter()
            .map(|k| (k.clone(), foreign_object(None)))
            .collect();
        Model {
            sets,
            objects,
            replicas: Vec::new(),
        }
    }

    // -----------------------------------------------------------------------------------------
    // Queries

    /// The existing parent that declares `key`, if any (at most one does: the walk never
    /// declares an object in two parents at once).
    pub fn declarer(&self, key: &Key) -> Option<usize> {
        (0..self.sets.len())
            .find(|&s| self.sets[s].exists && self.sets[s].spec.members.contains_key(key))
    }

    /// Whether an existing parent declares a member in namespace `ns`.
    pub fn declares_in(&self, ns: usize) -> bool {
        self.sets
            .iter()
            .any(|set| set.exists && set.spec.members.keys().any(|k| k.ns == Some(ns)))
    }

    /// Whether parent `s`'s reconcile writes the parent's metadata (its superset: under
    /// `--shards auto`, the write that claims it): not when it stops before, on its ownership,
    /// its suspension or the empty-set guard.
    pub fn writes_parent(&self, s: usize) -> bool {
        let set = &self.sets[s];
        !set.hijacked
            && !matches!(
                set.expect,
                Expect::NotReady("Suspended" | "EmptySetRefused")
            )
    }

    /// Whether parent `s`'s reconcile writes member `key` (under `--shards auto`, the write
    /// that stamps it with the set's claim): `s` reconciles, gets as far as its applies, is
    /// the parent that declares `key`, holds it, and its apply is not refused on a field
    /// another manager holds. A set refused on another member (`OwnershipConflict`,
    /// `Conflict`) or on its prune still writes this one.
    pub fn writes_member(&self, s: usize, key: &Key) -> bool {
        let set = &self.sets[s];
        let (Some(decl), Some(o)) = (set.spec.members.get(key), self.objects.get(key)) else {
            return false;
        };
        self.active(s)
            && self.writes_parent(s)
            && self.declarer(key) == Some(s)
            && o.owner == Owner::Set(s)
            && !conflicts(o, &decl.data(), set.spec.force)
    }

    /// Whether parent `s` reconciles (exists, not suspended, not taken by another tool).
    pub fn active(&self, s: usize) -> bool {
        let set = &self.sets[s];
        set.exists && !set.spec.suspend && !set.hijacked
    }

    /// Whether `key` would be deleted by parent `s`'s prune if `s` stopped declaring it.
    pub fn prunable_by(&self, s: usize, key: &Key) -> bool {
        self.objects
            .get(key)
            .is_some_and(|o| o.owner == Owner::Set(s) && !o.prune_disabled())
    }

    // -----------------------------------------------------------------------------------------
    // Transitions (what a step does, before the operator reacts)

    pub fn create(&mut self, s: usize, spec: Spec) {
        let set = &mut self.sets[s];
        set.exists = true;
        set.spec = spec;
        set.recorded = Recorded::default();
        set.applied = Recorded::default();
        set.hijacked = false;
    }

    /// Deletes parent `s`: with `deletionPolicy: Delete` its recorded members are pruned
    /// (same safety rules), with `Orphan` they stay, labelled.
    pub fn delete(&mut self, s: usize) {
        if !self.sets[s].spec.orphan {
            let recorded = self.sets[s].recorded.union(&self.sets[s].applied);
            self.prune(s, &recorded, &BTreeMap::new());
        }
        let set = &mut self.sets[s];
        set.exists = false;
        set.spec = Spec::default();
        set.recorded = Recorded::default();
        set.applied = Recorded::default();
        set.hijacked = false;
    }

    /// Namespace `ns` of the universe is deleted: the parents living there are deleted (their
    /// cleanup as [`Model::delete`] says: what they record elsewhere is pruned or orphaned),
    /// and the namespace controller deletes every object in it, retained and foreign ones
    /// included (docs/design.md §6.4).
    pub fn delete_namespace(&mut self, ns: usize) {
        for s in 0..self.sets.len() {
            if self.sets[s].exists && !is_cluster(s) && ns == HOME {
                self.delete(s);
            }
        }
        self.objects.retain(|k, _| k.ns != Some(ns));
    }

    /// Namespace `ns` is created again, and the foreign actors create their objects there
    /// again (unlabelled). The parents' members come back as they reconcile.
    pub fn recreate_namespace(&mut self, ns: usize, foreign: &[Key]) {
        for k in foreign.iter().filter(|k| k.ns == Some(ns)) {
            self.objects.insert(k.clone(), foreign_object(None));
        }
    }

    /// A foreign manager takes the data key of a ConfigMap with `value` (force).
    pub fn take_field(&mut self, key: &Key, value: &str) {
        let o = self.object_mut(key);
        o.data = value.to_owned();
        o.foreign_field = Some(value.to_owned());
        o.rv = None;
    }

    /// A foreign actor labels its own object `part-of=<copied>` (or removes the label).
    pub fn copy_label(&mut self, key: &Key, copied: Option<usize>) {
        let o = self.object_mut(key);
        o.owner = Owner::Foreign { copied };
        o.rv = None;
    }

    /// A foreign actor deletes an object (a CRD takes its custom resources along).
    pub fn foreign_delete(&mut self, key: &Key) {
        self.remove(key);
    }

    /// A foreign actor annotates an object `applyset.dev/prune: disabled`.
    pub fn foreign_prune_disabled(&mut self, key: &Key) {
        let o = self.object_mut(key);
        o.foreign_pd = true;
        o.rv = None;
    }

    fn object_mut(&mut self, key: &Key) -> &mut Obj {
        self.objects
            .get_mut(key)
            .unwrap_or_else(|| panic!("model: {key} does not exist"))
    }

    fn remove(&mut self, key: &Key) {
        self.objects.remove(key);
        if key.kind == Kind::Crd {
            self.objects.retain(|k, _| k.kind != Kind::Gadget);
        }
    }

    // -----------------------------------------------------------------------------------------
    // The operator

    /// Reconciles every parent until nothing changes; sets each parent's expectation.
    pub fn converge(&mut self) {
        for _ in 0..20 {
            let before = self.clone();
            for s in 0..self.sets.len() {
                self.sets[s].expect = self.reconcile(s);
            }
            if *self == before {
                return;
            }
        }
        panic!("model: the reconciles did not converge in 20 rounds");
    }

    /// One reconcile of parent `s` (docs/design.md §4); returns its Ready condition.
    fn reconcile(&mut self, s: usize) -> Expect {
        let set = &self.sets[s];
        if !set.exists {
            return Expect::Gone;
        }
        // Ownership is checked before anything else, suspension included.
        if set.hijacked {
            return Expect::NotReady("OwnershipConflict");
        }
        if set.spec.suspend {
            return Expect::NotReady("Suspended");
        }
        let spec = set.spec.clone();
        let before = set.recorded.union(&set.applied);
        // The empty-set guard, before anything is written.
        if spec.members.is_empty() && !spec.allow_empty && spec.prune && !before.kinds.is_empty() {
            return Expect::NotReady("EmptySetRefused");
        }
        // Parent superset, then apply.
        let declared = Recorded::of(s, &spec.members);
        self.sets[s].recorded = before.union(&declared);
        let mut refused = Vec::new();
        for (key, decl) in &spec.members {
            if let Err(r) = self.apply(s, key, decl, spec.force) {
                refused.push(r);
            }
        }
        if refused.contains(&Refused::Owned) {
            return Expect::NotReady("OwnershipConflict");
        }
        if refused.contains(&Refused::Conflict) {
            return Expect::NotReady("Conflict");
        }
        // Prune, then shrink the parent to exactly the declared set; status.members lists it.
        if spec.prune {
            if self.no_namespace_to_look_in(s, &before, &spec.members) {
                return Expect::NotReady("PruneFailed");
            }
            self.prune(s, &before, &spec.members);
            self.sets[s].recorded = declared.clone();
        }
        self.sets[s].applied = declared;
        Expect::Ready
    }

    /// Server-side apply of one member by parent `s`.
    fn apply(&mut self, s: usize, key: &Key, decl: &Decl, force: bool) -> Result<(), Refused> {
        let value = decl.data();
        let old = self.objects.get(key).cloned();
        let (uid, rv, foreign_pd, foreign_field) = match &old {
            Some(o) => {
                match o.owner {
                    Owner::Set(t) if t != s => return Err(Refused::Owned),
                    Owner::Foreign { .. } => panic!("model: {key} is foreign and declared"),
                    Owner::Set(_) => {}
                }
                if conflicts(o, &value, force) {
                    return Err(Refused::Conflict);
                }
                let taken = o.foreign_field.as_ref().filter(|f| **f != value);
                // With force, a field with another value is ours now; one with our value
                // stays shared.
                let field = if taken.is_some() {
                    None
                } else {
                    o.foreign_field.clone()
                };
                (o.uid.clone(), o.rv.clone(), o.foreign_pd, field)
            }
            None => (None, None, false, None),
        };
        let mut new = Obj {
            owner: Owner::Set(s),
            rev: decl.rev,
            decl_pd: decl.prune_disabled,
            foreign_pd,
            data: value,
            foreign_field,
            uid,
            rv,
        };
        if old.as_ref().is_none_or(|o| !o.same_content(&new)) {
            new.rv = None;
        }
        self.objects.insert(key.clone(), new);
        Ok(())
    }

    /// Whether the prune of parent `s` refuses (docs/design.md §6.3): a ClusterApplySet whose
    /// record names a namespaced kind but no namespace, once it shows an object labelled with
    /// it that it does not declare (retained, or a foreign copy of its label), cannot tell
    /// where that kind's members are. Nothing is pruned and the record stays the superset.
    fn no_namespace_to_look_in(
        &self,
        s: usize,
        before: &Recorded,
        declared: &BTreeMap<Key, Decl>,
    ) -> bool {
        let listed = before.union(&Recorded::of(s, declared));
        is_cluster(s)
            && before.namespaces.is_empty()
            && before.kinds.iter().any(|k| k.namespaced())
            && self.objects.iter().any(|(k, o)| {
                matches!(o.owner, Owner::Set(t) | Owner::Foreign { copied: Some(t) } if t == s)
                    && listed.kinds.contains(&k.kind)
                    && !declared.contains_key(k)
            })
    }

    /// Prunes, as parent `s`, what it recorded `before` and no longer declares: objects whose
    /// `part-of` label its manager owns, except those annotated `prune: disabled`.
    fn prune(&mut self, s: usize, before: &Recorded, declared: &BTreeMap<Key, Decl>) {
        let doomed: Vec<Key> = self
            .objects
            .iter()
            .filter(|(k, o)| {
                o.owner == Owner::Set(s)
                    && !declared.contains_key(*k)
                    && before.covers(s, k)
                    && !o.prune_disabled()
            })
            .map(|(k, _)| k.clone())
            .collect();
        for k in doomed {
            self.remove(&k);
        }
    }

    /// Whether the model holds something it cannot tell the outcome of (the walk never
    /// leaves it so: checked after every step).
    pub fn check_consistent(&self) -> Result<(), String> {
        for (s, set) in self.sets.iter().enumerate() {
            if !set.exists {
                continue;
            }
            for key in set.spec.members.keys() {
                if let Some(t) = (0..self.sets.len()).find(|&t| {
                    t != s && self.sets[t].exists && self.sets[t].spec.members.contains_key(key)
                }) {
                    return Err(format!("model: {key} declared by sets {s} and {t}"));
                }
                if key.kind == Kind::Gadget && !set.spec.members.keys().any(|k| k.kind == Kind::Crd)
                {
                    return Err(format!("model: set {s} declares {key} without its CRD"));
                }
            }
        }
        Ok(())
    }
}

/// A foreign object as created by its owner.
pub fn foreign_object(copied: Option<usize>) -> Obj {
    Obj {
        owner: Owner::Foreign { copied },
        rev: 0,
        decl_pd: false,
        foreign_pd: false,
        data: crate::universe::FOREIGN_DATA.to_owned(),
        foreign_field: None,
        uid: None,
        rv: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::universe::{foreign_keys, member_keys};

    fn key(name: &str) -> Key {
        member_keys()
            .into_iter()
            .find(|k| k.name == name && k.ns.is_none_or(|n| n == HOME))
            .expect("a key of the universe")
    }

    fn decl(rev: u32, pd: bool) -> Decl {
        Decl {
            rev,
            prune_disabled: pd,
            explicit_ns: false,
        }
    }

    fn spec(members: &[(&str, u32, bool)]) -> Spec {
        Spec {
            members: members
                .iter()
                .map(|(n, r, pd)| (key(n), decl(*r, *pd)))
                .collect(),
            ..Spec::default()
        }
    }

    #[test]
    fn a_dropped_member_is_pruned_unless_prune_is_disabled() {
        let mut m = Model::new(&foreign_keys());
        m.create(
            0,
            spec(&[("cm0", 1, false), ("cm1", 1, true), ("s0", 1, false)]),
        );
        m.converge();
        assert_eq!(m.sets[0].expect, Expect::Ready);
        m.sets[0].spec = spec(&[("s0", 1, false)]);
        m.converge();
        assert!(!m.objects.contains_key(&key("cm0")));
        assert!(
            m.objects.contains_key(&key("cm1")),
            "prune: disabled retains"
        );
        assert_eq!(m.sets[0].recorded.kinds, BTreeSet::from([Kind::Secret]));
    }

    #[test]
    fn a_move_settles_with_the_new_owner_and_a_stuck_one_conflicts() {
        let mut m = Model::new(&foreign_keys());
        m.create(0, spec(&[("cm0", 1, false), ("cm1", 1, true)]));
        m.create(1, spec(&[]));
        m.converge();
        m.sets[0].spec = spec(&[]);
        m.sets[0].spec.allow_empty = true;
        m.sets[1].spec = spec(&[("cm0", 2, false), ("cm1", 2, false)]);
        m.converge();
        assert_eq!(m.objects[&key("cm0")].owner, Owner::Set(1));
        // cm1 is retained by set 0 (prune: disabled): set 1 may not take it.
        assert_eq!(m.objects[&key("cm1")].owner, Owner::Set(0));
        assert_eq!(m.sets[1].expect, Expect::NotReady("OwnershipConflict"));
    }

    #[test]
    fn a_set_refused_on_one_member_still_writes_the_others() {
        let mut m = Model::new(&foreign_keys());
        m.create(0, spec(&[("cm0", 1, false), ("cm1", 1, true)]));
        m.create(1, spec(&[]));
        m.converge();
        // Set 0 drops cm1 (retained: prune disabled); set 1 declares it, and cm2.
        m.sets[0].spec = spec(&[("cm0", 1, false)]);
        m.sets[1].spec = spec(&[("cm1", 2, false), ("cm2", 1, false)]);
        m.converge();
        assert_eq!(m.sets[1].expect, Expect::NotReady("OwnershipConflict"));
        assert!(m.writes_member(1, &key("cm2")));
        assert!(!m.writes_member(1, &key("cm1")));
        assert!(m.writes_member(0, &key("cm0")));
        assert!(!m.writes_member(0, &key("cm1")));
    }

    #[test]
    fn a_member_whose_field_another_manager_holds_is_written_only_with_force() {
        let mut m = Model::new(&foreign_keys());
        m.create(0, spec(&[("cm0", 1, false), ("cm1", 1, false)]));
        m.converge();
        m.take_field(&key("cm0"), "f2");
        m.converge();
        assert_eq!(m.sets[0].expect, Expect::NotReady("Conflict"));
        assert!(!m.writes_member(0, &key("cm0")));
        assert!(m.writes_member(0, &key("cm1")));
        m.sets[0].spec.force = true;
        m.converge();
        assert_eq!(m.sets[0].expect, Expect::Ready);
        assert!(m.writes_member(0, &key("cm0")));
        m.sets[0].spec.suspend = true;
        m.converge();
        assert!(!m.writes_member(0, &key("cm0")));
    }

    #[test]
    fn a_deleted_namespace_takes_its_objects_and_its_sets_cleanup_runs() {
        let mut m = Model::new(&foreign_keys());
        let in_n1 = member_keys()
            .into_iter()
            .find(|k| k.ns == Some(1))
            .expect("a member key in model-n1");
        let mut home = spec(&[("cm0", 1, false), ("cm1", 1, true)]);
        home.members.insert(in_n1.clone(), decl(1, false));
        m.create(0, home);
        m.converge();
        m.delete_namespace(HOME);
        assert!(!m.sets[0].exists, "the ApplySet went with its namespace");
        assert!(
            !m.objects.contains_key(&in_n1),
            "its cleanup pruned model-n1"
        );
        assert!(m.objects.keys().all(|k| k.ns != Some(HOME)));
        m.recreate_namespace(HOME, &foreign_keys());
        m.converge();
        let foreign_home = foreign_keys().into_iter().filter(|k| k.ns == Some(HOME));
        assert!(foreign_home.into_iter().all(|k| m.objects.contains_key(&k)));
    }

    #[test]
    fn the_empty_set_guard_and_orphans() {
        let mut m = Model::new(&foreign_keys());
        m.create(0, spec(&[("cm0", 1, false)]));
        m.converge();
        m.sets[0].spec = spec(&[]);
        m.converge();
        assert_eq!(m.sets[0].expect, Expect::NotReady("EmptySetRefused"));
        assert!(m.objects.contains_key(&key("cm0")));
        m.sets[0].spec.orphan = true;
        m.delete(0);
        m.converge();
        assert!(m.objects.contains_key(&key("cm0")), "Orphan leaves members");
        // Re-created, the parent adopts what it declares and prunes the rest of what it
        // records from the second reconcile on.
        m.create(0, spec(&[("cm1", 1, false)]));
        m.converge();
        assert!(!m.objects.contains_key(&key("cm0")));
    }
}

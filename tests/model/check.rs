//! The invariants, checked against the cluster itself: what is there (every object of the
//! universe and anything labelled by a parent, every parent with its status and annotations)
//! is observed with plain GETs and LISTs, and compared with the model.
//!
//! Two kinds of findings:
//! - **fatal** at once: an object the model keeps was deleted (missing, being deleted, or
//!   there with another UID), or an object nobody declares (a foreign object, one retained or
//!   orphaned) was written (its resourceVersion moved). Those cannot be undone by waiting.
//! - **pending** until the operator settles: a declared member missing or with other content
//!   or label, an object labelled by a parent that the model does not expect (a leak), a
//!   parent whose Ready condition or annotations differ from the model's.
//!
//! A namespace the model says is gone and that is being deleted is **terminating**, not
//! pending: kube-controller-manager finishes that deletion, not the operator.

use std::collections::{BTreeMap, BTreeSet};

use kube::{
    Api, ResourceExt,
    api::{DynamicObject, ListParams},
};
use serde_json::Value;

use crate::{
    operator::{
        ANNOTATION_GROUP_KINDS, ANNOTATION_NAMESPACES, ANNOTATION_PRUNE, LABEL_ID, LABEL_PART_OF,
        dyn_api, parse_status,
    },
    state::{Expect, Model, Obj, Owner},
    universe::{
        DATA_KEY, FOREIGN_DATA, FOREIGN_MANAGER, GADGET_CRD, Key, Kind, MEMBER_NAMESPACES,
        NAMESPACES, REV_ANNOTATION, SETS, in_universe, is_cluster, set_display, set_id,
        set_manager,
    },
    world::World,
};

/// An object as observed.
#[derive(Clone, Debug)]
pub struct Seen {
    pub uid: String,
    pub rv: String,
    pub part_of: Option<String>,
    /// Managers that own the `part-of` label (managedFields).
    pub part_of_managers: Vec<String>,
    pub rev: Option<String>,
    pub prune_disabled: bool,
    pub data: Option<String>,
    pub size: Option<i64>,
    /// The epoch of its set's claim it was last applied under (`--shards auto`).
    pub shard_epoch: Option<String>,
    pub deleting: bool,
}

/// A parent as observed.
#[derive(Clone, Debug)]
pub struct ParentSeen {
    pub generation: Option<i64>,
    pub observed_generation: Option<i64>,
    /// The Ready condition: status and reason.
    pub ready: Option<(String, String)>,
    pub kinds: Option<String>,
    pub namespaces: Option<String>,
    pub id_label: Option<String>,
    /// The replica that holds it under `--shards auto` (`NAME/INCARNATION`), and the epoch
    /// of its claim.
    pub shard_owner: Option<String>,
    pub shard_epoch: Option<String>,
    pub deleting: bool,
}

pub struct Observation {
    pub objects: BTreeMap<Key, Seen>,
    pub parents: Vec<Option<ParentSeen>>,
}

/// The annotation of a parent naming the replica that holds it (`NAME/INCARNATION`).
pub const ANNOTATION_SHARD_OWNER: &str = "applyset.dev/shard-owner";

/// The annotation of a parent, and of its members, with the epoch of the set's claim.
pub const ANNOTATION_SHARD_EPOCH: &str = "applyset.dev/shard-epoch";

/// What a check found.
#[derive(Debug, Default)]
pub struct Verdict {
    pub fatal: Vec<String>,
    pub pending: Vec<String>,
    /// Namespaces the model says are gone that the API server is deleting. The operator's
    /// part (its delete) is done; kube-controller-manager's namespace controller empties and
    /// removes them, on its own schedule (see `walk::NAMESPACE_GONE`).
    pub terminating: Vec<String>,
}

// ---------------------------------------------------------------------------------------------
// Observing

/// Where objects of each namespaced kind may be (the universe's namespaces for that kind).
const LISTED: [(Kind, &[usize]); 5] = [
    (Kind::ConfigMap, &[0, 1, 2]),
    (Kind::Secret, &[0, 1]),
    (Kind::Service, &[0, 2]),
    (Kind::Widget, &[0, 1]),
    (Kind::Gadget, &[0]),
];

/// Observes the universe: objects of every kind where they may be, then the parents. The
/// reads of each of the two are sent together (an observation takes one round trip, not
/// eighteen); the parents are read after the objects, as before.
pub async fn observe(world: &World) -> Result<Observation, String> {
    let lists = LISTED.iter().flat_map(|&(kind, namespaces)| {
        namespaces.iter().map(move |&ns| async move {
            let api = dyn_api(&world.client, &kind.api_resource(), Some(NAMESPACES[ns]));
            list(&api, kind).await.map(|items| (kind, ns, items))
        })
    });
    let cluster_scoped = MEMBER_NAMESPACES
        .iter()
        .map(|n| (Kind::Namespace, *n))
        .chain([(Kind::Crd, GADGET_CRD)])
        .map(|(kind, name)| async move {
            let api = dyn_api(&world.client, &kind.api_resource(), None);
            api.get_opt(name)
                .await
                .map(|o| (kind, name, o))
                .map_err(|e| format!("reading {kind:?} {name}: {e}"))
        });
    let (listed, got) = futures::try_join!(
        futures::future::try_join_all(lists),
        futures::future::try_join_all(cluster_scoped)
    )?;
    let mut objects = BTreeMap::new();
    for (kind, ns, items) in listed {
        for o in items {
            if in_universe(kind, &o.name_any()) || o.labels().contains_key(LABEL_PART_OF) {
                let key = Key {
                    kind,
                    ns: Some(ns),
                    name: o.name_any(),
                };
                objects.insert(key, seen(&o, kind));
            }
        }
    }
    for (kind, name, o) in got {
        if let Some(o) = o {
            let key = Key {
                kind,
                ns: None,
                name: name.to_owned(),
            };
            objects.insert(key, seen(&o, kind));
        }
    }
    let parents = (0..SETS.len()).map(|s| async move {
        let p = world.parent(s);
        p.api()
            .get_opt(&p.name)
            .await
            .map(|o| o.as_ref().map(parent_seen))
            .map_err(|e| format!("reading {}: {e}", p.display()))
    });
    let parents = futures::future::try_join_all(parents).await?;
    Ok(Observation { objects, parents })
}

/// Every object of `kind` in the API's namespace; none when the kind is not served (the
/// Gadget CRD does not exist).
async fn list(api: &Api<DynamicObject>, kind: Kind) -> Result<Vec<DynamicObject>, String> {
    match api.list(&ListParams::default()).await {
        Ok(l) => Ok(l.items),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(Vec::new()),
        Err(e) => Err(format!("listing {kind:?}: {e}")),
    }
}

fn seen(o: &DynamicObject, kind: Kind) -> Seen {
    let data = o
        .data
        .get("data")
        .and_then(|d| d.get(DATA_KEY))
        .and_then(Value::as_str);
    let data = match kind {
        Kind::Secret => data.map(|d| {
            use base64::Engine as _;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(d)
                .unwrap_or_default();
            String::from_utf8_lossy(&bytes).into_owned()
        }),
        _ => data.map(str::to_owned),
    };
    Seen {
        uid: o.uid().unwrap_or_default(),
        rv: o.resource_version().unwrap_or_default(),
        part_of: o.labels().get(LABEL_PART_OF).cloned(),
        part_of_managers: label_managers(o),
        rev: o.annotations().get(REV_ANNOTATION).cloned(),
        prune_disabled: o
            .annotations()
            .get(ANNOTATION_PRUNE)
            .is_some_and(|v| v == "disabled"),
        data,
        size: o
            .data
            .get("spec")
            .and_then(|s| s.get("size"))
            .and_then(Value::as_i64),
        shard_epoch: o.annotations().get(ANNOTATION_SHARD_EPOCH).cloned(),
        deleting: o.metadata.deletion_timestamp.is_some(),
    }
}

/// The managers whose managedFields entry holds the `part-of` label.
fn label_managers(o: &DynamicObject) -> Vec<String> {
    let field = format!("f:{LABEL_PART_OF}");
    o.managed_fields()
        .iter()
        .filter(|mf| {
            mf.fields_v1
                .as_ref()
                .and_then(|f| f.0.get("f:metadata"))
                .and_then(|m| m.get("f:labels"))
                .and_then(|l| l.get(&field))
                .is_some()
        })
        .filter_map(|mf| mf.manager.clone())
        .collect()
}

fn parent_seen(o: &DynamicObject) -> ParentSeen {
    let status = parse_status(o);
    let ready = status.as_ref().and_then(|st| {
        st.conditions
            .iter()
            .find(|c| c.type_ == "Ready")
            .map(|c| (c.status.clone(), c.reason.clone()))
    });
    ParentSeen {
        generation: o.metadata.generation,
        observed_generation: status.as_ref().and_then(|st| st.observed_generation),
        ready,
        kinds: o.annotations().get(ANNOTATION_GROUP_KINDS).cloned(),
        namespaces: o.annotations().get(ANNOTATION_NAMESPACES).cloned(),
        id_label: o.labels().get(LABEL_ID).cloned(),
        shard_owner: o.annotations().get(ANNOTATION_SHARD_OWNER).cloned(),
        shard_epoch: o.annotations().get(ANNOTATION_SHARD_EPOCH).cloned(),
        deleting: o.metadata.deletion_timestamp.is_some(),
    }
}

// ---------------------------------------------------------------------------------------------
// Comparing

/// Compares an observation with the model.
pub fn compare(m: &Model, obs: &Observation) -> Verdict {
    let mut v = Verdict::default();
    for (key, o) in &m.objects {
        match obs.objects.get(key) {
            None => expected_missing(&mut v, key, o),
            Some(seen) => expected_present(&mut v, m, key, o, seen),
        }
    }
    for (key, seen) in &obs.objects {
        if !m.objects.contains_key(key) {
            unexpected(&mut v, key, seen);
        }
    }
    for s in 0..SETS.len() {
        parent(&mut v, m, s, obs.parents[s].as_ref(), obs);
    }
    v
}

fn expected_missing(v: &mut Verdict, key: &Key, o: &Obj) {
    match &o.uid {
        Some(uid) => v.fatal.push(format!(
            "WRONG DELETION: {key} (uid {uid}) is gone, though nothing may delete it ({})",
            describe(o)
        )),
        None => v
            .pending
            .push(format!("{key} does not exist yet ({})", describe(o))),
    }
}

fn expected_present(v: &mut Verdict, m: &Model, key: &Key, o: &Obj, seen: &Seen) {
    if let Some(uid) = &o.uid {
        if *uid != seen.uid {
            v.fatal.push(format!(
                "WRONG DELETION: {key} was deleted and re-created (uid {uid} → {}), though nothing may delete it ({})",
                seen.uid,
                describe(o)
            ));
            return;
        }
        if seen.deleting {
            v.fatal.push(format!(
                "WRONG DELETION: {key} (uid {uid}) is being deleted, though nothing may delete it ({})",
                describe(o)
            ));
            return;
        }
    }
    if seen.deleting {
        v.pending
            .push(format!("{key}: the old object is still being deleted"));
        return;
    }
    if let Some(rv) = &o.rv
        && *rv != seen.rv
        && m.declarer(key).is_none()
    {
        v.fatal.push(format!(
            "WRONG CHANGE: {key} was written (resourceVersion {rv} → {}), though nobody declares it ({})",
            seen.rv,
            describe(o)
        ));
    }
    for problem in content(key, o, seen) {
        v.pending.push(format!("{key}: {problem}"));
    }
}

/// How the object differs from the model's content.
fn content(key: &Key, o: &Obj, seen: &Seen) -> Vec<String> {
    let mut out = Vec::new();
    let part_of = |s: Option<usize>| format!("{:?}", s.map(set_id));
    match o.owner {
        Owner::Set(s) => {
            out.extend(differs(
                "label part-of",
                part_of(Some(s)),
                format!("{:?}", seen.part_of),
            ));
            let manager = set_manager(s);
            if !seen.part_of_managers.contains(&manager) {
                out.push(format!(
                    "its part-of label is managed by {:?}, expected {manager}",
                    seen.part_of_managers
                ));
            }
            out.extend(differs(
                "revision",
                format!("{:?}", Some(o.rev.to_string())),
                format!("{:?}", seen.rev),
            ));
            out.extend(match key.kind {
                Kind::ConfigMap | Kind::Secret => differs(
                    "data.k",
                    format!("{:?}", Some(&o.data)),
                    format!("{:?}", seen.data.as_ref()),
                ),
                Kind::Widget | Kind::Gadget => differs(
                    "spec.size",
                    format!("{:?}", Some(i64::from(o.rev))),
                    format!("{:?}", seen.size),
                ),
                _ => None,
            });
        }
        Owner::Foreign { copied } => {
            out.extend(differs(
                "label part-of",
                part_of(copied),
                format!("{:?}", seen.part_of),
            ));
            if copied.is_some() && !seen.part_of_managers.iter().any(|m| m == FOREIGN_MANAGER) {
                out.push(format!(
                    "its part-of label is managed by {:?}, expected {FOREIGN_MANAGER}",
                    seen.part_of_managers
                ));
            }
            out.extend(differs(
                "data.k",
                format!("{:?}", Some(FOREIGN_DATA)),
                format!("{:?}", seen.data.as_deref()),
            ));
        }
    }
    out.extend(differs(
        "annotation prune: disabled",
        o.prune_disabled().to_string(),
        seen.prune_disabled.to_string(),
    ));
    out
}

/// `what is <got>, expected <want>` when they differ.
fn differs(what: &str, want: String, got: String) -> Option<String> {
    (want != got).then(|| format!("{what} is {got}, expected {want}"))
}

fn unexpected(v: &mut Verdict, key: &Key, seen: &Seen) {
    if seen.deleting {
        let why = format!("{key} is still being deleted");
        match key.kind {
            Kind::Namespace => v.terminating.push(why),
            _ => v.pending.push(why),
        }
        return;
    }
    match &seen.part_of {
        Some(id) => v.pending.push(format!(
            "LEAK: {key} is labelled part-of={} (label managed by {:?}) but the model says it is gone",
            crate::universe::set_of_id(id)
                .map(crate::universe::set_name)
                .unwrap_or(id),
            seen.part_of_managers
        )),
        None => v
            .pending
            .push(format!("{key} exists, but the model says it does not")),
    }
}

fn parent(v: &mut Verdict, m: &Model, s: usize, seen: Option<&ParentSeen>, obs: &Observation) {
    let set = &m.sets[s];
    let name = set_display(s);
    let Some(p) = seen else {
        if set.exists {
            v.pending.push(format!("{name} does not exist"));
        }
        return;
    };
    if !set.exists {
        v.pending
            .push(format!("{name} still exists (deleting: {})", p.deleting));
        return;
    }
    if p.deleting {
        v.pending.push(format!("{name} is being deleted"));
        return;
    }
    let want = match &set.expect {
        Expect::Ready => ("True".to_owned(), "ReconciliationSucceeded".to_owned()),
        Expect::NotReady(reason) => ("False".to_owned(), (*reason).to_owned()),
        Expect::Gone => unreachable!("an existing parent is expected Ready or not"),
    };
    if p.observed_generation != p.generation || p.ready.as_ref() != Some(&want) {
        v.pending.push(format!(
            "{name}: Ready is {:?} for generation {:?} (generation {:?}), expected {want:?}",
            p.ready, p.observed_generation, p.generation
        ));
    }
    if set.expect == Expect::Ready && p.id_label.as_deref() != Some(set_id(s).as_str()) {
        v.pending.push(format!("{name}: id label {:?}", p.id_label));
    }
    annotations(v, m, s, p, obs);
}

/// The parent's annotations: those the model expects, and — the invariant — at least every
/// live object of the set that the set must still find (members, and what it has yet to
/// prune).
fn annotations(v: &mut Verdict, m: &Model, s: usize, p: &ParentSeen, obs: &Observation) {
    let name = set_display(s);
    let kinds: BTreeSet<String> = split(p.kinds.as_deref());
    let namespaces: BTreeSet<String> = split(p.namespaces.as_deref());
    let recorded = &m.sets[s].recorded;
    let want_kinds: BTreeSet<String> = recorded.kinds.iter().map(|k| k.group_kind()).collect();
    let want_namespaces: BTreeSet<String> = recorded
        .namespaces
        .iter()
        .map(|&ns| NAMESPACES[ns].to_owned())
        .collect();
    if kinds != want_kinds || namespaces != want_namespaces {
        v.pending.push(format!(
            "{name}: records kinds {kinds:?} and namespaces {namespaces:?}, the model {want_kinds:?} and {want_namespaces:?}"
        ));
    }
    for (key, o) in &m.objects {
        if o.owner != Owner::Set(s) || !recorded.covers(s, key) || !obs.objects.contains_key(key) {
            continue;
        }
        let kind_ok = kinds.contains(&key.kind.group_kind());
        let ns_ok = key.namespace().is_none_or(|ns| {
            (!is_cluster(s) && ns == NAMESPACES[crate::universe::HOME]) || namespaces.contains(ns)
        });
        if !kind_ok || !ns_ok {
            v.pending.push(format!(
                "{name}: its annotations (kinds {kinds:?}, namespaces {namespaces:?}) do not describe its live member {key}"
            ));
        }
    }
}

fn split(v: Option<&str>) -> BTreeSet<String> {
    v.unwrap_or_default()
        .split(',')
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

fn describe(o: &Obj) -> String {
    let owner = match o.owner {
        Owner::Set(s) => format!("of {}", crate::universe::set_name(s)),
        Owner::Foreign { copied: None } => "foreign".to_owned(),
        Owner::Foreign { copied: Some(s) } => {
            format!("foreign, labelled part-of={}", crate::universe::set_name(s))
        }
    };
    let mut d = format!("{owner}, rev {}", o.rev);
    if o.decl_pd {
        d.push_str(", prune disabled by its manifest");
    }
    if o.foreign_pd {
        d.push_str(", prune disabled by a foreign actor");
    }
    d
}

/// Under `--shards auto`: the members a parent's reconcile writes ([`Model::writes_member`],
/// whether the parent ends Ready or not) not yet applied under their set's current claim (the
/// first reconcile of a set's new owner rewrites them all).
pub fn unstamped(m: &Model, obs: &Observation) -> Vec<String> {
    let mut out = Vec::new();
    for (key, o) in &m.objects {
        let Owner::Set(s) = o.owner else { continue };
        if !m.writes_member(s, key) {
            continue;
        }
        let epoch = obs.parents[s].as_ref().and_then(|p| p.shard_epoch.as_ref());
        let seen = obs.objects.get(key).and_then(|o| o.shard_epoch.as_ref());
        if epoch.is_some() && seen != epoch {
            out.push(format!(
                "{key}: applied under epoch {seen:?} of {}, which is at {epoch:?}",
                set_display(s)
            ));
        }
    }
    out
}

/// Learns UIDs and resourceVersions of the model's objects from a settled observation.
pub fn learn(m: &mut Model, obs: &Observation) {
    for (key, o) in m.objects.iter_mut() {
        if let Some(seen) = obs.objects.get(key) {
            o.uid = Some(seen.uid.clone());
            o.rv = Some(seen.rv.clone());
        }
    }
}

/// The model's expectations, for a failure message.
pub fn describe_model(m: &Model) -> String {
    let mut out = String::new();
    for (s, set) in m.sets.iter().enumerate() {
        let kinds: Vec<String> = set.recorded.kinds.iter().map(|k| k.group_kind()).collect();
        let namespaces: Vec<&str> = set
            .recorded
            .namespaces
            .iter()
            .map(|&n| NAMESPACES[n])
            .collect();
        out.push_str(&format!(
            "  {}: {:?}{}, records {kinds:?} {namespaces:?}, declares {:?}\n",
            set_display(s),
            set.expect,
            if set.hijacked {
                " (tooling of another tool)"
            } else {
                ""
            },
            set.spec
                .members
                .keys()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
        ));
    }
    for (key, o) in &m.objects {
        out.push_str(&format!("  {key}: {}\n", describe(o)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deleting() -> Seen {
        Seen {
            uid: "u".into(),
            rv: "1".into(),
            part_of: None,
            part_of_managers: Vec::new(),
            rev: None,
            prune_disabled: false,
            data: None,
            size: None,
            shard_epoch: None,
            deleting: true,
        }
    }

    #[test]
    fn a_namespace_being_deleted_waits_for_the_namespace_controller_and_any_other_object_for_the_operator()
     {
        let namespace = Key {
            kind: Kind::Namespace,
            ns: None,
            name: "model-m1".into(),
        };
        let mut v = Verdict::default();
        unexpected(&mut v, &namespace, &deleting());
        assert_eq!(
            v.terminating,
            vec!["Namespace model-m1 is still being deleted"]
        );
        assert!(v.pending.is_empty() && v.fatal.is_empty());

        for kind in Kind::ALL.into_iter().filter(|k| *k != Kind::Namespace) {
            let key = Key {
                kind,
                ns: kind.namespaced().then_some(0),
                name: "x".into(),
            };
            let mut v = Verdict::default();
            unexpected(&mut v, &key, &deleting());
            assert_eq!(v.pending.len(), 1, "{key}");
            assert!(v.terminating.is_empty() && v.fatal.is_empty(), "{key}");
        }
    }
}

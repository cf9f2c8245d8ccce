//! Apply: server-side apply of the members, staged (CRDs and Namespaces first, waiting for
//! CRDs to be Established) and concurrent within a stage, with no read before a write (but
//! for a member a drift-ignore rule names: [`ignore`]).
//!
//! A member is first applied without force. A conflict on the `part-of` label means the live
//! object belongs to another ApplySet: that is reported and the object is left alone. Other
//! conflicts are reported naming the managers, or, with `force`, applied again with force.
//!
//! This file holds the stages and one member's way through them (skipped by its own
//! controls — `ssa: Ignore`, `reconcile: disabled`, `ssa: IfNotPresent` on an object that
//! exists, see [`crate::applyset::controls`] — or when the member watches know it
//! unchanged, create-only first for a member not known to be the set's,
//! adoption, the outcome); [`request`] the requests and the server's answer; [`conflict`]
//! what a conflict means; [`recreate`] the re-creation after an immutable change;
//! [`ignore`] the body of a member with ignored fields, settled against its live object;
//! [`crd_wait`] the wait for CRDs to be Established; [`take_over`] Override (and the managers
//! the set names); [`if_not_present`] the adoption of an `ssa: IfNotPresent` object that
//! exists (by its metadata only).

use std::{collections::HashMap, time::Instant};

use futures::{StreamExt, stream};
use kube::{Api, api::DynamicObject};
use serde_json::Value;

use super::{
    SetScope, adopt,
    live::LiveObject,
    outcome::{MemberResult, Outcome, Preview},
};
use crate::{
    api::MemberRef,
    applyset::{
        LABEL_PART_OF,
        controls::{self, Marks, Skip},
    },
    kind_order::Stage,
    members::Applied,
    render::Member,
};

mod conflict;
mod crd_wait;
mod if_not_present;
mod ignore;
mod recreate;
mod request;
pub(crate) mod take_over;

use conflict::refuse_conflict;
use crd_wait::wait_for_crds;
use recreate::{is_immutable, recreate_for_immutable};
use request::{Answer, Request, answer};

/// How to apply (what the scope does not say).
pub struct Options<'a> {
    pub force: bool,
    pub dry_run: bool,
    /// Live members by reference, learnt before the apply.
    pub existing: &'a HashMap<MemberRef, LiveObject>,
    /// Seconds since the epoch when the reconcile started: an object created at or after it
    /// was created by this apply.
    pub started: i64,
    /// CRDs must be Established by then.
    pub deadline: Instant,
    /// Which members exist without a `part-of` label, and which could not be looked at
    /// (see [`super::adopt::unlabelled`]).
    pub lookup: &'a adopt::Lookup,
    /// `spec.adoptExisting`: every unlabelled member may be taken over.
    pub adopt_existing: bool,
    /// `spec.takeOverFieldManagers`: the managers whose fields the set takes over on its own
    /// members (see [`take_over`]).
    pub take_over: &'a [String],
    /// With `dry_run`: keep what the dry-run showed of each member that would change
    /// ([`MemberResult::preview`]; one more GET each), for `kubectl applyset diff`.
    pub preview: bool,
    /// When set, the members known to be the set's own; every other member is first sent
    /// create-only (see [`super::create`]) and looked at only if it exists (`lookup` is then
    /// empty: nothing was looked at before). `None`: `lookup` says it all (a plan).
    pub create_only: Option<&'a std::collections::HashSet<MemberRef>>,
}

/// Applies the members stage by stage. Every member gets a result.
pub async fn apply_staged(
    scope: &SetScope,
    members: &[Member],
    opts: &Options<'_>,
) -> Vec<MemberResult> {
    let mut results = Vec::with_capacity(members.len());
    for stage in [Stage::Definitions, Stage::Resources] {
        let staged: Vec<&Member> = members.iter().filter(|m| m.stage == stage).collect();
        // Indices, not references, keep the closure free of higher-ranked lifetimes.
        let mut stage_results: Vec<MemberResult> = stream::iter(0..staged.len())
            .map(|i| {
                let m = staged[i];
                async move {
                    let (outcome, answer) = apply_one(scope, m, opts).await;
                    let uid = answer.as_ref().and_then(|a| a.uid.clone());
                    let mut result = MemberResult::new(m.reference.clone(), outcome).with_uid(uid);
                    if opts.preview && opts.dry_run && result.outcome.is_applied() {
                        preview(scope, m, answer, &mut result).await;
                    }
                    result
                }
            })
            .buffer_unordered(scope.concurrency)
            .collect()
            .await;
        if stage == Stage::Definitions && !opts.dry_run {
            wait_for_crds(scope, &mut stage_results, opts.deadline).await;
        }
        results.extend(stage_results);
    }
    results
}

/// The object to send: the member with our `part-of` label.
/// The body applied for `member` of the set of ID `id`: its object with the `part-of` label
/// (what `kubectl applyset build` prints and `diff` dry-runs).
pub fn body(member: &Member, id: &str) -> Value {
    let mut object = member.object.clone();
    let meta = object
        .entry("metadata")
        .or_insert_with(|| Value::Object(Default::default()));
    if let Value::Object(meta) = meta {
        let labels = meta
            .entry("labels")
            .or_insert_with(|| Value::Object(Default::default()));
        if let Value::Object(labels) = labels {
            labels.insert(LABEL_PART_OF.into(), Value::String(id.into()));
        }
    }
    Value::Object(object)
}

/// The body applied for `member` in `scope`: [`body`], marked with the scope's shard fence
/// (its bucket and epoch) under `--shards auto`.
fn scoped_body(scope: &SetScope, member: &Member) -> Value {
    let mut b = body(member, &scope.id);
    if let Some(fence) = &scope.fence {
        crate::shard::fence::mark(&mut b, fence);
    }
    b
}

fn member_api(scope: &SetScope, member: &Member) -> Api<DynamicObject> {
    let namespace = member.reference.namespace.as_deref();
    crate::discovery::api_in(&scope.client, namespace, &member.resource)
}

/// What a dry-run would change of `member` (its live object, read now, and the server's
/// answer, or the body when the dry-run could not run because the set creates the member's
/// namespace or CRD), kept in `result`; an unchanged member shows nothing.
async fn preview(
    scope: &SetScope,
    member: &Member,
    answer: Option<Answer>,
    result: &mut MemberResult,
) {
    if result.outcome == Outcome::Unchanged {
        return;
    }
    let mut after = answer
        .and_then(|a| a.object)
        .unwrap_or_else(|| scoped_body(scope, member));
    crate::ignore::strip(&member.ignore, &mut after);
    match member_api(scope, member)
        .get_opt(&member.reference.name)
        .await
    {
        Ok(live) => {
            let mut before = live.and_then(|o| serde_json::to_value(o).ok());
            before
                .iter_mut()
                .for_each(|b| crate::ignore::strip(&member.ignore, b));
            result.preview = Some(Box::new(Preview { before, after }));
        }
        Err(e) => {
            let message = format!(
                "{}: reading the live object for the plan: {e}",
                member.reference
            );
            result.outcome = Outcome::Failed { message };
        }
    }
}

/// Applies one member unless the watches know it unchanged; records a success there.
/// Returns the outcome and, where known, the server's answer (its UID at least).
async fn apply_one(
    scope: &SetScope,
    member: &Member,
    opts: &Options<'_>,
) -> (Outcome, Option<Answer>) {
    // A member's own controls win over the "known unchanged" shortcut: a skip is reported.
    if let Some(skip) = skip_of(member, opts, opts.lookup) {
        return skipped(scope, member, skip, opts);
    }
    let api = member_api(scope, member);
    let body = scoped_body(scope, member);
    let hash = take_over::body_hash(ignore::body_hash(member, &body), opts.take_over);
    let watches = scope.watches().filter(|_| !opts.dry_run);
    if let Some(uid) = watches.and_then(|w| w.unchanged(&scope.id, &member.reference, hash)) {
        return (Outcome::Unchanged, Some(Answer::uid(uid)));
    }
    // Under --shards auto, nothing is written before this reconcile proved its claim.
    if let Some(first) = scope.first_write.as_ref().filter(|_| !opts.dry_run)
        && !first.holds().await
    {
        let message = format!(
            "{}: not written: another replica claimed the set",
            member.reference
        );
        return (Outcome::Failed { message }, None);
    }
    let applying = watches.map(|w| w.applying(&scope.id, &member.reference));
    let _permit = scope.write_permit().await;
    // Checked once the permit is held: a refusal learnt while this write waited counts.
    if let Some(refused) = into_terminating(scope, member).await {
        return (refused, None);
    }
    let r = &member.reference;
    let exists = opts.existing.contains_key(r) || opts.lookup.existing.contains_key(r);
    let takers = take_over::takers(scope, opts);
    let body = match ignore::settled(&api, member, body, takers, exists).await {
        Ok(body) => body,
        Err(failed) => return (failed, None),
    };
    let (outcome, answer) = match create_first(&api, scope, member, &body, opts).await {
        First::Done(outcome, answer) => (outcome, answer),
        First::Looked(lookup) => {
            // It exists after all (the create-only attempt was refused): settled now.
            match ignore::settled(&api, member, body, takers, true).await {
                Ok(body) => apply_looked(&api, scope, member, &body, opts, &lookup).await,
                Err(failed) => (failed, None),
            }
        }
        First::Apply => apply_looked(&api, scope, member, &body, opts, opts.lookup).await,
    };
    if let (
        Some(applying),
        Some(Answer {
            rv: Some(rv),
            uid: Some(uid),
            shape,
            ..
        }),
    ) = (applying, &answer)
        && outcome.is_applied()
    {
        applying.record(Applied {
            hash,
            rv: rv.clone(),
            uid: uid.clone(),
            shape: *shape,
            marks: Marks::of_object(&member.object),
        });
    }
    (outcome, answer)
}

/// What the create-only first attempt (see [`super::create`]) left to do.
enum First {
    /// Decided: created, or failed.
    Done(Outcome, Option<Answer>),
    /// It exists and was looked at: apply it as that look says.
    Looked(adopt::Lookup),
    /// No create-only attempt (a plan, or a member known to be the set's): apply as the
    /// reconcile's look says.
    Apply,
}

/// A member not known to be the set's own is first sent create-only: created if absent;
/// if it exists, left untouched and looked at (one metadata GET, as the set's identity).
async fn create_first(
    api: &Api<DynamicObject>,
    scope: &SetScope,
    member: &Member,
    body: &Value,
    opts: &Options<'_>,
) -> First {
    let Some(owned) = opts.create_only else {
        return First::Apply;
    };
    if owned.contains(&member.reference) {
        return First::Apply;
    }
    let create_only = super::create::body(body);
    let request = Request {
        api,
        name: &member.reference.name,
        body: &create_only,
        manager: &scope.manager,
        dry_run: false,
    };
    match request.send_settled(opts.deadline).await {
        Ok(created) => First::Done(
            Outcome::Created,
            Some(answer(member, &created, opts.preview)),
        ),
        Err(e) if super::create::exists(&e) => {
            match adopt::unlabelled(scope, std::slice::from_ref(member), owned).await {
                Ok(lookup) => First::Looked(lookup),
                Err(e) => First::Done(
                    Outcome::Failed {
                        message: format!(
                            "{}: looking at the existing object: {e}",
                            member.reference
                        ),
                    },
                    None,
                ),
            }
        }
        Err(e) => First::Done(refused(scope, member, e, false), None),
    }
}

/// Applies a member as the look at it (`lookup`) says: not at all when it could not be
/// looked at, or is someone else's and may not be adopted; otherwise applied, adopted
/// (marked first where needed, taking the declared fields over from its makers).
async fn apply_looked(
    api: &Api<DynamicObject>,
    scope: &SetScope,
    member: &Member,
    body: &Value,
    opts: &Options<'_>,
    lookup: &adopt::Lookup,
) -> (Outcome, Option<Answer>) {
    // What the look found of an existing object's controls (IfNotPresent: it exists).
    if let Some(skip) = skip_of(member, opts, lookup) {
        return skipped(scope, member, skip, opts);
    }
    if let Some(why) = lookup.unknown.get(&member.reference) {
        // The lookup could not look at it: its identity may not get or list the kind.
        let message = format!("{}: {why}; not applied", member.reference);
        return (Outcome::Forbidden { message }, None);
    }
    let adopting = lookup.unlabelled.contains(&member.reference);
    if adopting && !(opts.adopt_existing || member.adopt) {
        return (refuse_adoption(member), None);
    }
    if adopting && let Err(refused) = mark_adopted(api, scope, member, opts.dry_run).await {
        return (refused, None);
    }
    if adopting && Marks::of_object(&member.object).ssa_if_not_present {
        // IfNotPresent: made the set's without touching its data (see [`if_not_present`]).
        return if_not_present::adopt(api, scope, member, opts).await;
    }
    let (outcome, answer) = if adopting {
        adopt_applying(api, scope, member, body, opts, lookup).await
    } else {
        // The set's own: Override takes over what kubectl changed (see [`take_over`]).
        take_over::apply_overriding(api, scope, member, body, opts).await
    };
    match outcome {
        o if adopting && o.is_applied() => (Outcome::Adopted, answer),
        o => (o, answer),
    }
}

/// Adopts `member` by applying `body`: what only its makers own (kubectl create, ...) is
/// taken over from them, once (a forced apply); then the managers the set names are taken
/// over (see [`take_over::after_adoption`]). A conflict (with a named manager too) is
/// reported as it is: the set would change a value that manager set.
async fn adopt_applying(
    api: &Api<DynamicObject>,
    scope: &SetScope,
    member: &Member,
    body: &Value,
    opts: &Options<'_>,
    lookup: &adopt::Lookup,
) -> (Outcome, Option<Answer>) {
    let handover = lookup.handover.contains(&member.reference);
    let adopted = apply_body(api, scope, member, body, opts, handover).await;
    take_over::after_adoption(api, scope, member, body, opts, adopted).await
}

/// Why the member is not applied by its own controls (see [`controls::skip_apply`]), if it
/// is not: read from its manifest and from what is already known of its live object — the
/// member watches or the LISTs (`opts.existing`), or the look at an object not known as the
/// set's (`lookup`). No request. `ssa: IfNotPresent` on an object that exists without being
/// the set's does not skip it when it may be adopted ([`if_not_present::adoptable`]).
fn skip_of(member: &Member, opts: &Options<'_>, lookup: &adopt::Lookup) -> Option<Skip> {
    let r = &member.reference;
    let live = (opts.existing.get(r).map(|l| l.marks)).or_else(|| lookup.existing.get(r).copied());
    let skip = controls::skip_apply(Marks::of_object(&member.object), live);
    match skip {
        Some(Skip::IfNotPresentExists) if if_not_present::adoptable(member, opts, lookup) => None,
        skip => skip,
    }
}

/// The outcome of a member skipped by its own controls: nothing is sent, and what the set
/// last applied of it is forgotten (another writer's changes to it are not drift; it is
/// sent in full once it is no longer skipped).
fn skipped(
    scope: &SetScope,
    member: &Member,
    skip: Skip,
    opts: &Options<'_>,
) -> (Outcome, Option<Answer>) {
    if let Some(w) = scope.watches().filter(|_| !opts.dry_run) {
        w.skipped(&scope.id, &member.reference);
    }
    tracing::debug!(member = %member.reference, reason = %skip, "skipped by its controls");
    (Outcome::Skipped(skip), None)
}

/// The outcome of a member whose namespace is known to be terminating (nothing is sent), if
/// it is.
async fn into_terminating(scope: &SetScope, member: &Member) -> Option<Outcome> {
    let namespace = member.reference.namespace.as_deref()?;
    let terminating = scope.terminating()?;
    terminating
        .blocks(namespace)
        .await
        .then(|| Outcome::NamespaceTerminating {
            namespace: namespace.to_string(),
        })
}

/// The outcome of a member whose object exists unlabelled, when adoption is not allowed.
fn refuse_adoption(member: &Member) -> Outcome {
    Outcome::AdoptionRefused {
        message: format!(
            "{}: exists without the label {LABEL_PART_OF}, so it is someone else's and is left alone; to take it over, set spec.adoptExisting: true or annotate the manifest applyset.dev/adopt: enabled",
            member.reference
        ),
    }
}

/// Before a Namespace or CRD is taken over, it is marked as adopted (the set then never
/// deletes it); a mark that cannot be written stops its adoption. Other kinds, and plans,
/// need no mark.
async fn mark_adopted(
    api: &Api<DynamicObject>,
    scope: &SetScope,
    member: &Member,
    dry_run: bool,
) -> Result<(), Outcome> {
    if dry_run || !adopt::needs_mark(&member.reference) {
        return Ok(());
    }
    adopt::mark(api, scope, member)
        .await
        .map_err(|e| Outcome::Failed {
            message: format!(
                "{}: not adopted: marking it as adopted failed ({e})",
                member.reference
            ),
        })
}

/// Applies one body; returns the outcome and, for a successful request, the server's answer.
/// `handover`: a conflict is forced even without `opts.force` (an adoption from its makers).
async fn apply_body(
    api: &Api<DynamicObject>,
    scope: &SetScope,
    member: &Member,
    body: &Value,
    opts: &Options<'_>,
    handover: bool,
) -> (Outcome, Option<Answer>) {
    let request = Request {
        api,
        name: &member.reference.name,
        body,
        manager: &scope.manager,
        dry_run: opts.dry_run,
    };
    let mut result = request.send_settled(opts.deadline).await;
    if let Err(kube::Error::Api(status)) = &result
        && status.is_conflict()
    {
        if let Some(refused) = refuse_conflict(member, status, opts.force || handover) {
            return (refused, None);
        }
        result = request.send(true).await;
    }
    if let Err(kube::Error::Api(status)) = &result
        && is_immutable(status)
    {
        if let Some(refused) = recreate_for_immutable(api, scope, member, status, opts).await {
            return (refused, None);
        }
        result = request.send(opts.force || handover).await;
    }
    match result {
        Ok(applied) => (
            classify(api, member, &applied, opts).await,
            Some(answer(member, &applied, opts.preview)),
        ),
        Err(e) => (refused(scope, member, e, opts.dry_run), None),
    }
}

/// The outcome of a refused apply: a namespace being terminated is learnt (see
/// [`crate::terminating`]); anything else failed.
fn refused(scope: &SetScope, member: &Member, e: kube::Error, dry_run: bool) -> Outcome {
    match e {
        kube::Error::Api(status) if crate::terminating::is_refusal(&status) => {
            let namespace = member.reference.namespace.clone().unwrap_or_default();
            if let Some(t) = scope.terminating() {
                let _newly = t.learn(&namespace);
            }
            Outcome::NamespaceTerminating { namespace }
        }
        e => failed(member, e, dry_run),
    }
}

/// The outcome of a failed request. In a plan, an object whose namespace or CRD the plan
/// itself creates cannot be dry-run yet: it would be created.
fn failed(member: &Member, e: kube::Error, dry_run: bool) -> Outcome {
    match e {
        kube::Error::Api(status) if dry_run && status.is_not_found() => Outcome::Created,
        kube::Error::Api(status) if status.is_forbidden() => Outcome::Forbidden {
            message: format!("{}: {}", member.reference, status.message),
        },
        kube::Error::Api(status) => Outcome::Failed {
            message: member.withhold_decrypted(format!("{}: {}", member.reference, status.message)),
        },
        e => Outcome::Failed {
            message: member.withhold_decrypted(format!("{}: {e}", member.reference)),
        },
    }
}

/// Created, configured or unchanged, from what was live before and the server's answer.
async fn classify(
    api: &Api<DynamicObject>,
    member: &Member,
    applied: &DynamicObject,
    opts: &Options<'_>,
) -> Outcome {
    let Some(live) = opts.existing.get(&member.reference) else {
        let created_now = applied
            .metadata
            .creation_timestamp
            .as_ref()
            .is_none_or(|t| t.0.as_second() >= opts.started);
        // Not ours before: created now, or an existing object adopted into the set.
        return if created_now {
            Outcome::Created
        } else {
            Outcome::Configured
        };
    };
    if !opts.dry_run {
        return if applied.metadata.resource_version.as_deref()
            == Some(live.resource_version.as_str())
        {
            Outcome::Unchanged
        } else {
            Outcome::Configured
        };
    }
    // A dry-run does not move the resourceVersion: compare with the live object.
    match api.get(&member.reference.name).await {
        Ok(current) if comparable(&current) == comparable(applied) => Outcome::Unchanged,
        Ok(_) => Outcome::Configured,
        Err(e) => Outcome::Failed {
            message: format!(
                "{}: reading the live object for the plan: {e}",
                member.reference
            ),
        },
    }
}

/// The object without the fields that change on every write.
fn comparable(o: &DynamicObject) -> Value {
    let mut v = serde_json::to_value(o).unwrap_or(Value::Null);
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        for k in ["managedFields", "resourceVersion", "generation"] {
            meta.remove(k);
        }
    }
    v
}

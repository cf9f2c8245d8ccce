//! Apply: server-side apply of the members, staged (CRDs and Namespaces first, waiting for
//! CRDs to be Established) and concurrent within a stage, with no read before a write.
//!
//! A member is first applied without force. A conflict on the `part-of` label means the live
//! object belongs to another ApplySet: that is reported and the object is left alone. Other
//! conflicts are reported naming the managers, or, with `force`, applied again with force.

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use futures::{StreamExt, stream};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api,
    api::{DeleteParams, DynamicObject, Patch, PatchParams},
    core::Status,
};
use serde_json::Value;

use super::{
    SetScope, adopt,
    live::{LiveObject, label_owned_by},
    outcome::{MemberResult, Outcome, Preview},
};
use crate::{
    api::MemberRef,
    applyset::LABEL_PART_OF,
    kinds::{self, Stage},
    members::Applied,
    render::Member,
};

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
    let after = answer
        .and_then(|a| a.object)
        .unwrap_or_else(|| body(member, &scope.id));
    match member_api(scope, member)
        .get_opt(&member.reference.name)
        .await
    {
        Ok(live) => {
            let before = live.and_then(|o| serde_json::to_value(o).ok());
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
    let api = member_api(scope, member);
    let body = body(member, &scope.id);
    let hash = crate::members::body_hash(&body);
    let watches = scope.watches().filter(|_| !opts.dry_run);
    if let Some(uid) = watches.and_then(|w| w.unchanged(&scope.id, &member.reference, hash)) {
        return (Outcome::Unchanged, Some(Answer::uid(uid)));
    }
    let applying = watches.map(|w| w.applying(&scope.id, &member.reference));
    let _permit = scope.write_permit().await;
    // Checked once the permit is held: a refusal learnt while this write waited counts.
    if let Some(refused) = into_terminating(scope, member).await {
        return (refused, None);
    }
    let (outcome, answer) = match create_first(&api, scope, member, &body, opts).await {
        First::Done(outcome, answer) => (outcome, answer),
        First::Looked(lookup) => apply_looked(&api, scope, member, &body, opts, &lookup).await,
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
    // Adopting what only its makers own (kubectl create, ...) takes the declared fields
    // over from them, once: the object is the set's afterwards.
    let handover = adopting && lookup.handover.contains(&member.reference);
    let (outcome, answer) = apply_body(api, scope, member, body, opts, handover).await;
    match outcome {
        o if adopting && o.is_applied() => (Outcome::Adopted, answer),
        o => (o, answer),
    }
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

/// What the server answered a successful apply with.
struct Answer {
    rv: Option<String>,
    uid: Option<String>,
    /// Its [`crate::members::shape`], for kinds the member watches see whole.
    shape: Option<u64>,
    /// The object itself, for a dry-run's preview.
    object: Option<Value>,
}

impl Answer {
    /// What the watches know of a member known unchanged: its UID.
    fn uid(uid: String) -> Self {
        Answer {
            rv: None,
            uid: Some(uid),
            shape: None,
            object: None,
        }
    }
}

/// One member's apply requests: the parameters and the body.
struct Request<'a> {
    api: &'a Api<DynamicObject>,
    name: &'a str,
    body: &'a Value,
    manager: &'a str,
    dry_run: bool,
}

impl Request<'_> {
    async fn send(&self, force: bool) -> kube::Result<DynamicObject> {
        let mut p = PatchParams::apply(self.manager);
        p.force = force;
        p.dry_run = self.dry_run;
        self.api
            .patch(self.name, &p, &Patch::Apply(self.body))
            .await
    }

    /// Sends without force; a server-side apply creates missing objects, so a 404 means the
    /// route is not served (a CRD Established a moment ago) or the namespace does not exist
    /// yet (being created concurrently). Both settle within seconds: retried up to 10 s.
    async fn send_settled(&self, deadline: Instant) -> kube::Result<DynamicObject> {
        let mut result = self.send(false).await;
        let settle = Instant::now() + Duration::from_secs(10);
        while !self.dry_run
            && matches!(&result, Err(kube::Error::Api(s)) if s.code == 404)
            && Instant::now() < settle.min(deadline)
        {
            tokio::time::sleep(Duration::from_millis(250)).await;
            result = self.send(false).await;
        }
        result
    }
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

/// What the server answered a successful apply of `member` with (the whole object too when
/// `preview`: what a dry-run would make of it, for `kubectl applyset diff`).
fn answer(member: &Member, applied: &DynamicObject, preview: bool) -> Answer {
    Answer {
        rv: applied.metadata.resource_version.clone(),
        uid: applied.metadata.uid.clone(),
        shape: crate::health::needs_object(&member.reference.group, &member.reference.kind)
            .then(|| crate::members::shape(applied)),
        object: preview
            .then(|| serde_json::to_value(applied).ok())
            .flatten(),
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

/// The outcome of a conflict, unless `force` takes the fields over (`None`): a conflict on
/// the `part-of` label is never forced (the object belongs to another ApplySet).
fn refuse_conflict(member: &Member, status: &Status, force: bool) -> Option<Outcome> {
    let conflict = Conflict::from_status(status);
    if conflict.on_part_of {
        let message = format!(
            "{}: the live object belongs to another ApplySet (its {LABEL_PART_OF} label is managed by {}); it is left alone. Remove it from one of the two sets",
            member.reference,
            conflict.managers.join(", ")
        );
        return Some(Outcome::Owned { message });
    }
    if !conflict.fields_known() {
        let message = format!(
            "{}: the API server reported a conflict without naming its fields ({}); nothing is forced, since the {LABEL_PART_OF} label may be among them",
            member.reference, status.message
        );
        return Some(Outcome::Conflict {
            message,
            managers: conflict.managers,
        });
    }
    if force {
        return None;
    }
    let message = format!(
        "{}: conflict with field manager(s) {}: {}; set spec.force: true to take the fields over",
        member.reference,
        conflict
            .managers
            .iter()
            .map(|m| format!("\"{m}\""))
            .collect::<Vec<_>>()
            .join(", "),
        conflict.fields.join(", ")
    );
    Some(Outcome::Conflict {
        message,
        managers: conflict.managers,
    })
}

/// After an immutable-field error: deletes and re-creates a member annotated
/// `applyset.dev/force: enabled` (`None`: apply again), else the outcome to report. A plan
/// reports it as configured.
async fn recreate_for_immutable(
    api: &Api<DynamicObject>,
    scope: &SetScope,
    member: &Member,
    status: &Status,
    opts: &Options<'_>,
) -> Option<Outcome> {
    if !member.force_recreate {
        let message = member.redact(format!(
            "{}: {}; annotate the manifest with applyset.dev/force: enabled to allow deleting and re-creating it",
            member.reference, status.message
        ));
        return Some(Outcome::Failed { message });
    }
    if opts.dry_run {
        return Some(Outcome::Configured);
    }
    match recreate(api, scope, &member.reference, opts.deadline).await {
        Ok(()) => None,
        Err(e) => Some(Outcome::Failed {
            message: format!(
                "{}: re-creating after an immutable change: {e}",
                member.reference
            ),
        }),
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
            message: member.redact(format!("{}: {}", member.reference, status.message)),
        },
        e => Outcome::Failed {
            message: member.redact(format!("{}: {e}", member.reference)),
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

/// Deletes the live object — only if it is this set's (its `part-of` label ours and owned
/// by our member field manager) and the rules of deletion allow it (see
/// [`not_deletable`]), and only that one (UID precondition) — and waits until it is gone.
async fn recreate(
    api: &Api<DynamicObject>,
    scope: &SetScope,
    member: &MemberRef,
    deadline: Instant,
) -> Result<(), String> {
    let name = member.name.as_str();
    let Some(live) = api.get_opt(name).await.map_err(|e| e.to_string())? else {
        return Ok(());
    };
    if let Some(why) = not_ours(&live.metadata, &scope.id, &scope.manager) {
        return Err(format!(
            "not deleted: the live object is not this set's ({why}); only objects the set created or adopted are re-created"
        ));
    }
    if let Some(why) = not_deletable(member, &live.metadata, scope.parent.namespace.as_deref()) {
        return Err(format!("not deleted: {why}"));
    }
    let params = DeleteParams::foreground().preconditions(kube::api::Preconditions {
        uid: live.metadata.uid.clone(),
        resource_version: None,
    });
    match api.delete(name, &params).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.is_not_found() => return Ok(()),
        Err(e) => return Err(e.to_string()),
    }
    while Instant::now() < deadline {
        match api.get_opt(name).await {
            Ok(None) => return Ok(()),
            Ok(Some(o)) if o.metadata.uid != live.metadata.uid => return Ok(()),
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
    Err("the old object was still being deleted at the reconcile timeout".into())
}

/// Why a live object is not this set's, if it is not: its `part-of` label is absent or
/// another set's, or our member field manager does not own it.
fn not_ours(meta: &kube::api::ObjectMeta, id: &str, manager: &str) -> Option<String> {
    let label = meta.labels.as_ref().and_then(|l| l.get(LABEL_PART_OF));
    match label {
        None => Some(format!("it has no label {LABEL_PART_OF}")),
        Some(v) if v != id => Some(format!("its label {LABEL_PART_OF} is {v}")),
        Some(_) if !label_owned_by(meta, manager) => Some(format!(
            "its label {LABEL_PART_OF} is not owned by the field manager {manager}"
        )),
        Some(_) => None,
    }
}

/// Why the set may never delete `member` (live metadata `meta`), whoever's it is: the same
/// rules as prune's — an adopted Namespace or CRD (deleting it deletes what others put in it),
/// the Namespace the parent lives in, an object another controller owns. `home`: the
/// parent's namespace.
pub fn not_deletable(
    member: &MemberRef,
    meta: &kube::api::ObjectMeta,
    home: Option<&str>,
) -> Option<String> {
    let (group, kind) = (&member.group, &member.kind);
    let container = kinds::is_namespace(group, kind) || kinds::is_crd(group, kind);
    if container && crate::applyset::is_adopted(meta.annotations.as_ref()) {
        return Some(format!(
            "it was adopted (annotation {}); an adopted Namespace or CRD is never deleted",
            crate::applyset::ANNOTATION_ADOPTED
        ));
    }
    if kinds::is_namespace(group, kind) && home == Some(member.name.as_str()) {
        return Some("it is the Namespace the set lives in".into());
    }
    let owner = meta
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true));
    owner.map(|o| format!("it is controlled by {} {}", o.kind, o.name))
}

/// The details Kubernetes gives a change to a field that cannot change: apimachinery's
/// exported `validation.FieldImmutableErrorMsg` (Jobs' selector, Services' clusterIP, a CRD's
/// scope, …) and the refusal of a change to an `immutable: true` ConfigMap or Secret. The API
/// has no reason or cause type of its own for it (a cause is `FieldValueInvalid` or
/// `FieldValueForbidden` like any bad value), so the detail is the one signal it gives.
const IMMUTABLE_DETAILS: [&str; 2] = [
    "field is immutable",
    "field is immutable when `immutable` is set",
];

/// The detail of a field cause: its message after the type and the value (apimachinery's
/// `field.Error` renders `Invalid value: <value>: <detail>`, `Forbidden: <detail>`).
fn cause_detail(message: &str) -> &str {
    message
        .rsplit_once(": ")
        .map_or(message, |(_, detail)| detail)
}

/// Whether an apply was refused because it changes an immutable field: a 422 `Invalid` with a
/// field cause (the API server always lists them for `Invalid`) whose detail is exactly one
/// of [`IMMUTABLE_DETAILS`] (a value that merely mentions "immutable" is not).
fn is_immutable(status: &Status) -> bool {
    let causes = status.details.as_ref().map(|d| d.causes.as_slice());
    status.is_invalid()
        && causes.unwrap_or_default().iter().any(|c| {
            matches!(
                c.reason.as_str(),
                "FieldValueInvalid" | "FieldValueForbidden"
            ) && IMMUTABLE_DETAILS.contains(&cause_detail(&c.message))
        })
}

/// The managers and fields of a server-side apply conflict, from the status's
/// `FieldManagerConflict` causes (one per field; the API server always lists them).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Conflict {
    /// For the message only: the managers quoted in the causes.
    pub managers: Vec<String>,
    pub fields: Vec<String>,
    /// The `part-of` label is among the fields: the object is another set's.
    pub on_part_of: bool,
}

impl Conflict {
    pub fn from_status(status: &Status) -> Conflict {
        let mut c = Conflict::default();
        let causes = status
            .details
            .as_ref()
            .map(|d| d.causes.as_slice())
            .unwrap_or_default();
        for cause in causes.iter().filter(|c| c.reason == "FieldManagerConflict") {
            c.managers.extend(quoted(&cause.message));
            if !cause.field.is_empty() {
                c.fields.push(cause.field.clone());
            }
        }
        c.managers.sort();
        c.managers.dedup();
        let part_of_field = format!(".metadata.labels.{LABEL_PART_OF}");
        c.on_part_of = c.fields.iter().any(|f| f == &part_of_field);
        c
    }

    /// Whether the conflicting fields are known: without them nothing can show that the
    /// `part-of` label is not among them, so nothing is forced.
    pub fn fields_known(&self) -> bool {
        !self.fields.is_empty()
    }
}

/// Every `"…"`-quoted string following `conflict with` / `conflicts with`.
fn quoted(message: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = message;
    while let Some(i) = rest.find("with \"") {
        rest = &rest[i + "with \"".len()..];
        if let Some(end) = rest.find('"') {
            out.push(rest[..end].to_string());
            rest = &rest[end..];
        } else {
            break;
        }
    }
    out
}

/// Waits until every CRD applied in `results` is Established (polling its status), turning a
/// CRD that is not by `deadline` into a failure: its custom resources are not applied.
async fn wait_for_crds(scope: &SetScope, results: &mut [MemberResult], deadline: Instant) {
    let crds: Api<CustomResourceDefinition> = Api::all(scope.client.clone());
    for result in results.iter_mut() {
        let r = &result.reference;
        if !kinds::is_crd(&r.group, &r.kind) || !result.outcome.is_applied() {
            continue;
        }
        let failure = match wait_for_crd(&crds, &r.name, deadline).await {
            CrdState::Established => continue,
            // It will not become Established: fail now (the reconcile is retried, and
            // creates it again), not at the reconcile's timeout.
            CrdState::Gone(why) => format!("{r}: {why}; applied again on the next attempt"),
            CrdState::Waiting(why) => format!(
                "{r}: not Established before the reconcile timeout ({why}); its custom resources were not applied"
            ),
        };
        result.outcome = Outcome::Failed { message: failure };
    }
}

/// Waits until CRD `name` is Established, gone or being deleted, or `deadline` passes. One
/// GET first: a CRD applied unchanged is Established already, and a reconcile that changed
/// nothing costs no more than that. Otherwise a watch of that one object (kube's
/// `await_condition`); should the watch fail (e.g. the set's identity may get but not watch
/// CRDs), it is looked at every 100 ms instead.
async fn wait_for_crd(
    crds: &Api<CustomResourceDefinition>,
    name: &str,
    deadline: Instant,
) -> CrdState {
    let now = look(crds, name).await;
    if !matches!(now, CrdState::Waiting(_)) {
        return now;
    }
    let decided =
        |crd: Option<&CustomResourceDefinition>| !matches!(crd_state(crd), CrdState::Waiting(_));
    let watched = tokio::time::timeout_at(
        tokio::time::Instant::from_std(deadline),
        kube::runtime::wait::await_condition(crds.clone(), name, decided),
    )
    .await;
    match watched {
        Ok(Ok(crd)) => crd_state(crd.as_ref()),
        Ok(Err(e)) => {
            tracing::debug!(crd = name, error = %e, "watching a CRD failed; polling it");
            poll_crd(crds, name, deadline).await
        }
        // The deadline passed: one last look says why.
        Err(_) => look(crds, name).await,
    }
}

/// [`wait_for_crd`] by GETs every 100 ms.
async fn poll_crd(crds: &Api<CustomResourceDefinition>, name: &str, deadline: Instant) -> CrdState {
    loop {
        let state = look(crds, name).await;
        if !matches!(state, CrdState::Waiting(_)) || Instant::now() >= deadline {
            return state;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Where CRD `name` stands now (one GET; a failed GET is waited on).
async fn look(crds: &Api<CustomResourceDefinition>, name: &str) -> CrdState {
    match crds.get_opt(name).await {
        Ok(crd) => crd_state(crd.as_ref()),
        Err(e) => CrdState::Waiting(e.to_string()),
    }
}

/// Where a CRD just applied stands, as far as waiting for it goes.
#[derive(Debug, PartialEq, Eq)]
enum CrdState {
    Established,
    /// Gone or being deleted: it will not become Established (a foreign actor deleted it
    /// while this reconcile applied it — the apply of an object being deleted succeeds).
    Gone(String),
    /// Not yet: why.
    Waiting(String),
}

/// The state of a CRD read back after applying it (`None`: not found).
fn crd_state(crd: Option<&CustomResourceDefinition>) -> CrdState {
    match crd {
        None => CrdState::Gone("deleted while being applied".into()),
        Some(c) if c.metadata.deletion_timestamp.is_some() => {
            CrdState::Gone("being deleted (deletionTimestamp is set)".into())
        }
        Some(c) if established(c) => CrdState::Established,
        Some(c) => CrdState::Waiting(not_established_reason(c)),
    }
}

/// The messages of a CRD's false conditions (e.g. NamesAccepted=False: a name clash).
fn not_established_reason(crd: &CustomResourceDefinition) -> String {
    let conditions = crd.status.as_ref().and_then(|s| s.conditions.as_ref());
    let problems: Vec<String> = conditions
        .into_iter()
        .flatten()
        .filter(|c| c.status != "True")
        .map(|c| {
            format!(
                "{}={}: {}",
                c.type_,
                c.status,
                c.message.clone().unwrap_or_default()
            )
        })
        .collect();
    if problems.is_empty() {
        "waiting for Established".into()
    } else {
        problems.join("; ")
    }
}

fn established(crd: &CustomResourceDefinition) -> bool {
    crd.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::response::{StatusCause, StatusDetails};

    #[test]
    fn a_force_recreate_never_deletes_what_prune_would_keep() {
        let r = |group: &str, kind: &str, name: &str| MemberRef {
            group: group.into(),
            kind: kind.into(),
            namespace: None,
            name: name.into(),
        };
        let meta = |v: serde_json::Value| -> kube::api::ObjectMeta {
            serde_json::from_value(v).expect("meta")
        };
        let adopted = meta(serde_json::json!({"annotations": {"applyset.dev/adopted": "x"}}));
        let plain = meta(serde_json::json!({}));
        let crd = r(
            "apiextensions.k8s.io",
            "CustomResourceDefinition",
            "gadgets.example.com",
        );
        let ns = r("", "Namespace", "team");
        let cm = r("", "ConfigMap", "c");
        let why = not_deletable(&crd, &adopted, None).expect("adopted CRD");
        assert!(why.contains("adopted"), "{why}");
        assert!(
            not_deletable(&ns, &adopted, None).is_some(),
            "adopted Namespace"
        );
        assert!(
            not_deletable(&crd, &plain, None).is_none(),
            "the set's own CRD"
        );
        assert!(
            not_deletable(&cm, &adopted, None).is_none(),
            "only containers"
        );
        let why = not_deletable(&ns, &plain, Some("team")).expect("home");
        assert!(why.contains("lives in"), "{why}");
        assert!(not_deletable(&ns, &plain, Some("other")).is_none());
        let controlled = meta(
            serde_json::json!({"ownerReferences": [{"apiVersion": "apps/v1",
            "kind": "ReplicaSet", "name": "rs", "uid": "u", "controller": true}]}),
        );
        let why = not_deletable(&cm, &controlled, None).expect("controlled");
        assert!(why.contains("ReplicaSet rs"), "{why}");
    }

    fn conflict_status(message: &str, causes: Vec<(&str, &str)>) -> Status {
        let mut s = Status::failure(message, "Conflict").with_code(409);
        s.details = Some(StatusDetails {
            causes: causes
                .into_iter()
                .map(|(m, f)| StatusCause {
                    reason: "FieldManagerConflict".into(),
                    message: m.into(),
                    field: f.into(),
                })
                .collect(),
            name: String::new(),
            group: String::new(),
            kind: String::new(),
            uid: String::new(),
            retry_after_seconds: 0,
        });
        s
    }

    fn crd(conditions: &[(&str, &str)], deleting: bool) -> CustomResourceDefinition {
        let mut c: CustomResourceDefinition = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "gadgets.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced",
                     "names": {"plural": "gadgets", "kind": "Gadget"}, "versions": []},
            "status": {"conditions": conditions.iter().map(|(t, s)| serde_json::json!(
                {"type": t, "status": s, "message": format!("{t} is {s}")})).collect::<Vec<_>>()},
        }))
        .expect("a CRD");
        if deleting {
            c.metadata.deletion_timestamp =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::now(),
                ));
        }
        c
    }

    #[test]
    fn a_crd_gone_or_being_deleted_is_not_waited_for() {
        assert_eq!(
            crd_state(None),
            CrdState::Gone("deleted while being applied".into())
        );
        // Being deleted, even while still Established: it goes away, with its resources.
        assert!(matches!(
            crd_state(Some(&crd(&[("Established", "True")], true))),
            CrdState::Gone(_)
        ));
        assert_eq!(
            crd_state(Some(&crd(&[("Established", "True")], false))),
            CrdState::Established
        );
        assert_eq!(
            crd_state(Some(&crd(&[("NamesAccepted", "False")], false))),
            CrdState::Waiting("NamesAccepted=False: NamesAccepted is False".into())
        );
        assert_eq!(
            crd_state(Some(&crd(&[], false))),
            CrdState::Waiting("waiting for Established".into())
        );
    }

    #[test]
    fn conflict_from_causes() {
        let s = conflict_status(
            "Apply failed with 2 conflicts: conflicts with \"alice\" using v1:\n- .data.a\n- .data.b",
            vec![
                ("conflict with \"alice\" using v1", ".data.a"),
                ("conflict with \"bob\"", ".data.b"),
            ],
        );
        let c = Conflict::from_status(&s);
        assert_eq!(c.managers, ["alice", "bob"]);
        assert_eq!(c.fields, [".data.a", ".data.b"]);
        assert!(!c.on_part_of);
    }

    #[test]
    fn a_conflict_without_causes_names_no_field() {
        let s = conflict_status(
            "Apply failed with 1 conflict: conflict with \"kubectl\" using v1: .metadata.labels.applyset.kubernetes.io/part-of",
            vec![],
        );
        let c = Conflict::from_status(&s);
        assert!(!c.fields_known());
        assert!(!c.on_part_of);
        assert!(c.managers.is_empty());
    }

    #[test]
    fn part_of_conflict_from_cause_field() {
        let s = conflict_status(
            "conflict",
            vec![(
                "conflict with \"applyset.dev/ns/a/b\"",
                ".metadata.labels.applyset.kubernetes.io/part-of",
            )],
        );
        let c = Conflict::from_status(&s);
        assert!(c.on_part_of);
        assert_eq!(c.managers, ["applyset.dev/ns/a/b"]);
    }

    fn invalid(causes: Vec<(&str, &str)>) -> Status {
        let mut s = Status::failure("Job.batch \"x\" is invalid", "Invalid").with_code(422);
        s.details = Some(StatusDetails {
            causes: causes
                .into_iter()
                .map(|(reason, message)| StatusCause {
                    reason: reason.into(),
                    message: message.into(),
                    field: "spec.selector".into(),
                })
                .collect(),
            name: "x".into(),
            group: "batch".into(),
            kind: "Job".into(),
            uid: String::new(),
            retry_after_seconds: 0,
        });
        s
    }

    #[test]
    fn immutable_detection() {
        let immutable = "Invalid value: {\"matchLabels\":{\"a\":\"b\"}}: field is immutable";
        assert!(is_immutable(&invalid(vec![(
            "FieldValueInvalid",
            immutable
        )])));
        let configmap = "Forbidden: field is immutable when `immutable` is set";
        assert!(is_immutable(&invalid(vec![(
            "FieldValueForbidden",
            configmap
        )])));
        // A value that mentions immutability is not the detail.
        let mentions = "Invalid value: \"field is immutable\": must be no more than 5 characters";
        assert!(!is_immutable(&invalid(vec![(
            "FieldValueInvalid",
            mentions
        )])));
        // Another invalid value, the text in another kind of cause, no causes, another code.
        assert!(!is_immutable(&invalid(vec![(
            "FieldValueInvalid",
            "Invalid value: \"-\""
        )])));
        assert!(!is_immutable(&invalid(vec![(
            "FieldValueRequired",
            immutable
        )])));
        assert!(!is_immutable(&invalid(vec![])));
        let s = Status::failure("field is immutable", "Invalid").with_code(422);
        assert!(!is_immutable(&s));
        let mut conflict = invalid(vec![("FieldValueInvalid", immutable)]);
        conflict.code = 409;
        conflict.reason = "Conflict".into();
        assert!(!is_immutable(&conflict));
    }
}

//! The health of sets that wait or have health checks: the `Healthy` condition and
//! `status.health`, written by the health reporter whenever the member watches see a tracked
//! set's health change (between reconciles too), under a field manager of their own; and the
//! wait of a reconcile (spec.wait, spec.healthChecks), decided without holding a worker: a
//! reconcile that finds its set not yet current reports Progressing and ends, and the reporter
//! reconciles the set again when its health becomes decisive (Current or Failed).

use std::{
    collections::HashMap,
    sync::Arc,
    time::{Duration, Instant},
};

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{
    Api,
    api::{Patch, PatchParams},
};
use parking_lot::Mutex;
use serde_json::json;

use super::{
    Context,
    report::{Report, Step, Stop},
};
use crate::{
    api::{
        ApplySet, ApplySetSpec, ApplySetStatus, ClusterApplySet, HealthStatus, MemberRef,
        NotCurrentObject,
    },
    applyset::{ParentKind, ParentRef},
    engine::{SetScope, plan::Desired},
    health::{self, HealthExprs, Status, exprs::ExprError},
    members::{CheckTarget, SetHealth},
    status::{self, HEALTHY, Reason},
    tenancy,
};

/// The field manager of the `Healthy` condition and `status.health` (the reconcile's status
/// writes leave both out, so each field has one writer).
pub const HEALTH_FIELD_MANAGER: &str = "applyset.dev/health";

/// Health statuses written at once.
const WRITES_AT_ONCE: usize = 16;

/// `status.health` for a summary.
pub fn health_status(s: &health::Summary) -> HealthStatus {
    let n = |v: usize| i64::try_from(v).unwrap_or(i64::MAX);
    HealthStatus {
        current: n(s.current),
        in_progress: n(s.in_progress),
        failed: n(s.failed),
        terminating: n(s.terminating),
        not_found: n(s.not_found),
        unknown: n(s.unknown),
        not_current: s
            .not_current
            .iter()
            .map(|e| NotCurrentObject {
                object: e.object.clone(),
                status: e.status.to_string(),
                message: status::truncate(&e.message, 256),
            })
            .collect(),
    }
}

/// The `Healthy` condition for a summary: True when everything is Current, False when
/// something failed, Unknown otherwise (in progress, not found, being deleted, unknown). Its
/// lastTransitionTime is `previous`'s while the status stays the same (as every condition's,
/// [`status::set_status`]).
pub fn healthy_condition(
    previous: Option<&Condition>,
    s: &health::Summary,
    generation: Option<i64>,
) -> Option<Condition> {
    let (state, reason) = match s.status() {
        Status::Current => ("True", "Current"),
        Status::Failed => ("False", "HealthCheckFailed"),
        Status::Unknown => ("Unknown", "Unknown"),
        _ => ("Unknown", "Progressing"),
    };
    let mut conditions: Vec<Condition> = previous.cloned().into_iter().collect();
    status::set_status(
        &mut conditions,
        HEALTHY,
        state,
        reason,
        &s.message(),
        generation,
    );
    conditions.pop()
}

/// What the reporter last wrote (or found) for a set.
#[derive(Clone, Debug, PartialEq)]
struct Written {
    generation: Option<i64>,
    health: Option<HealthStatus>,
    condition: Option<Condition>,
    /// When the reporter last wrote them (`None`: found in the parent's status).
    at: Option<Instant>,
}

/// Shortest time between two health writes of one set that change only counts or messages
/// (a rollout of many replicas changes its message at every step); a change of the Healthy
/// condition's status is written at once.
pub const DETAIL_WRITE_INTERVAL: Duration = Duration::from_secs(5);

/// How long to hold a health write back: `None` to write now, else how long until it may be
/// written. `status_changed`: the Healthy condition's status changes; `since`: time since the
/// last write (`None`: not written by this process).
pub fn hold_back(status_changed: bool, since: Option<Duration>) -> Option<Duration> {
    match since {
        Some(since) if !status_changed && since < DETAIL_WRITE_INTERVAL => {
            Some(DETAIL_WRITE_INTERVAL - since)
        }
        _ => None,
    }
}

/// A reconcile's wait in progress: for which generation and revision, since when.
#[derive(Clone, Debug)]
struct Waiting {
    key: (Option<i64>, String),
    since: Instant,
}

/// What a reconcile concludes of its set's health.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// Everything is Current.
    Current,
    /// Something failed.
    Failed,
    /// The wait took longer than `spec.timeout`.
    TimedOut(Duration),
    /// Still waiting; decide again within this long at the latest.
    Waiting(Duration),
}

/// The verdict on a summary of status `now_status` for a wait that began `waited` ago, with
/// `timeout` to wait in all.
pub fn verdict(now_status: Status, waited: Duration, timeout: Duration) -> Verdict {
    match now_status {
        Status::Current => Verdict::Current,
        Status::Failed => Verdict::Failed,
        _ if waited >= timeout => Verdict::TimedOut(timeout),
        _ => Verdict::Waiting(timeout - waited),
    }
}

/// The health reporter's memory: what it wrote per set, and the waits in progress.
#[derive(Default)]
pub struct Reporter {
    written: Mutex<HashMap<String, Written>>,
    waits: Mutex<HashMap<String, Waiting>>,
    /// Sets the reporter will look at again (a write held back).
    later: Arc<Mutex<std::collections::HashSet<String>>>,
    /// Each set's spec.healthCheckExprs as last compiled (compiled again only when they
    /// change).
    compiled: Mutex<HashMap<String, Arc<HealthExprs>>>,
}

impl Reporter {
    /// Notes what the parent's status already says of its health (so an unchanged health
    /// is not written again, after a restart too) and the generation to report it for.
    pub fn seed(&self, id: &str, status: Option<&ApplySetStatus>, generation: Option<i64>) {
        let mut w = self.written.lock();
        let found = Written {
            generation,
            health: status.and_then(|s| s.health.clone()),
            condition: status
                .and_then(|s| s.conditions.iter().find(|c| c.type_ == HEALTHY).cloned()),
            at: None,
        };
        match w.get_mut(id) {
            // Written by this process: it knows better than a possibly older cached status.
            Some(known) => known.generation = generation,
            None => {
                w.insert(id.to_string(), found);
            }
        }
    }

    /// Has the reporter look at set `id` again after `wait` (once, however often asked
    /// meanwhile).
    fn look_again(&self, members: &Arc<crate::members::MemberWatches>, id: &str, wait: Duration) {
        if !self.later.lock().insert(id.to_string()) {
            return;
        }
        let members = members.clone();
        let id = id.to_string();
        let later = self.later.clone();
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            later.lock().remove(&id);
            members.touch(&id);
        });
    }

    /// Forgets a set (no longer tracked).
    pub fn forget(&self, id: &str) {
        self.written.lock().remove(id);
        self.compiled.lock().remove(id);
        self.end_wait(id);
    }

    /// Decides a reconcile's wait for `id` at generation and revision `key`, given its
    /// health's status: a wait starts at the first undecided look and lasts `timeout`.
    pub fn wait_verdict(
        &self,
        id: &str,
        key: (Option<i64>, String),
        now_status: Status,
        timeout: Duration,
    ) -> Verdict {
        let mut waits = self.waits.lock();
        let now = Instant::now();
        let waited = match waits.get(id) {
            Some(w) if w.key == key => now.saturating_duration_since(w.since),
            _ => Duration::ZERO,
        };
        let v = verdict(now_status, waited, timeout);
        match v {
            Verdict::Waiting(_) if waited.is_zero() => {
                waits.insert(id.to_string(), Waiting { key, since: now });
            }
            Verdict::Waiting(_) => {}
            _ => {
                waits.remove(id);
            }
        }
        v
    }

    /// How many sets the reporter's maps hold (`applyset_tracked_sets`).
    pub fn tracked_sets(&self) -> [(&'static str, usize); 2] {
        [
            ("health_reports", self.written.lock().len()),
            ("health_waits", self.waits.lock().len()),
        ]
    }

    /// Set `id`'s spec.healthCheckExprs compiled: as compiled last time when they did not
    /// change, else compiled now (on a thread of their own, see [`HealthExprs`]).
    pub async fn compile_exprs(
        &self,
        id: &str,
        entries: &[crate::api::CustomHealthCheck],
    ) -> Result<Arc<HealthExprs>, ExprError> {
        if let Some(known) = self.compiled.lock().get(id)
            && known.source() == entries
        {
            return Ok(known.clone());
        }
        let compiled = Arc::new(HealthExprs::compile_async(entries).await?);
        self.compiled
            .lock()
            .insert(id.to_string(), compiled.clone());
        Ok(compiled)
    }

    /// Ends a wait in progress, if any.
    pub fn end_wait(&self, id: &str) {
        self.waits.lock().remove(id);
    }

    fn is_waiting(&self, id: &str) -> bool {
        self.waits.lock().contains_key(id)
    }
}

/// Runs the health reporter until the operator stops: each tracked set whose health may have
/// changed gets its `Healthy` condition and `status.health` written (when they changed), and
/// a set waiting for its health is reconciled again once its health is decisive.
pub async fn run(ctx: Arc<Context>) {
    loop {
        ctx.members.health_changed().await;
        let dirty: Vec<(String, ParentRef, SetHealth)> = ctx
            .members
            .take_dirty()
            .into_iter()
            .filter_map(|(id, parent)| {
                let health = ctx.members.health(&id)?;
                Some((id, parent, health))
            })
            // Not everything observed yet (a kind still listing): nothing to say until it is.
            .filter(|(_, _, h)| h.unobserved == 0)
            .collect();
        // First the waits that are decided (a reconcile each), then the writes.
        let decided: Vec<ParentRef> = dirty
            .iter()
            .filter(|(id, _, h)| is_decisive(&h.summary) && ctx.health.is_waiting(id))
            .map(|(_, parent, _)| parent.clone())
            .collect();
        ctx.members.trigger_parents(decided);
        futures::stream::iter(dirty)
            .for_each_concurrent(WRITES_AT_ONCE, |(id, parent, health)| {
                let ctx = ctx.clone();
                async move { report(&ctx, &id, &parent, &health.summary).await }
            })
            .await;
    }
}

/// Whether a wait on this health is over: everything Current, or something Failed.
fn is_decisive(s: &health::Summary) -> bool {
    matches!(s.status(), Status::Current | Status::Failed)
}

/// How long one health write may take (a slow one must not hold the others up for long).
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// Writes one set's health if it changed since the reporter last wrote (or found) it.
async fn report(ctx: &Context, id: &str, parent: &ParentRef, summary: &health::Summary) {
    let Some(previous) = ctx.health.written.lock().get(id).cloned() else {
        return;
    };
    let health = Some(health_status(summary));
    let condition = healthy_condition(previous.condition.as_ref(), summary, previous.generation);
    if health == previous.health && condition == previous.condition {
        return;
    }
    let status_changed =
        previous.condition.as_ref().map(|c| &c.status) != condition.as_ref().map(|c| &c.status);
    if let Some(wait) = hold_back(status_changed, previous.at.map(|at| at.elapsed())) {
        // Written later (the set is looked at again then, with what is current then).
        ctx.health.look_again(&ctx.members, id, wait);
        return;
    }
    let body =
        json!({"status": {"health": health, "conditions": condition.iter().collect::<Vec<_>>()}});
    match tokio::time::timeout(WRITE_TIMEOUT, patch(ctx, parent, body)).await {
        Ok(Ok(())) => {
            // Merged under the lock: a reconcile may have moved the generation meanwhile.
            if let Some(known) = ctx.health.written.lock().get_mut(id) {
                known.health = health;
                known.condition = condition;
                known.at = Some(Instant::now());
            }
        }
        Ok(Err(e)) => tracing::debug!(parent = %parent, error = %e, "writing health failed"),
        Err(_) => tracing::debug!(parent = %parent, "writing health timed out"),
    }
}

/// Removes `status.health` and the `Healthy` condition from a parent that no longer waits
/// nor checks (what the health field manager owned goes).
pub async fn clear(ctx: &Context, parent: &ParentRef, status: Option<&ApplySetStatus>) {
    let shown = status
        .is_some_and(|s| s.health.is_some() || s.conditions.iter().any(|c| c.type_ == HEALTHY));
    if !shown {
        return;
    }
    if let Err(e) = patch(ctx, parent, json!({"status": {}})).await {
        tracing::debug!(parent = %parent, error = %e, "clearing health failed");
    }
}

/// Server-side applies `body` (a `status` fragment) to the parent's status as the health
/// field manager.
async fn patch(ctx: &Context, parent: &ParentRef, mut body: serde_json::Value) -> kube::Result<()> {
    // A typed body: no unknown or duplicate field to report (see `report::patch_status`).
    let params = PatchParams::apply(HEALTH_FIELD_MANAGER)
        .force()
        .validation_ignore();
    let name = parent.name.as_str();
    body["apiVersion"] = json!("applyset.dev/v1alpha1");
    match (parent.kind, &parent.namespace) {
        (ParentKind::ApplySet, Some(ns)) => {
            body["kind"] = json!("ApplySet");
            let api: Api<ApplySet> = Api::namespaced(ctx.client.clone(), ns);
            api.patch_status(name, &params, &Patch::Apply(body)).await?;
        }
        _ => {
            body["kind"] = json!("ClusterApplySet");
            let api: Api<ClusterApplySet> = Api::all(ctx.client.clone());
            api.patch_status(name, &params, &Patch::Apply(body)).await?;
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The reconcile's reading of its set's health (its wait, step 7, and spec.healthChecks).

/// How long a reconcile waits for its objects to be observed by the watches (a kind whose
/// watch has just started lists first; a version just applied arrives a moment after the
/// apply's answer) before deciding on what it has.
const SETTLE: Duration = Duration::from_secs(3);

/// The members a set assesses: none unless it waits (`wait`); then every declared member but
/// those skipped by their own controls (see [`crate::applyset::controls`]; Flux leaves
/// skipped objects out of its health checks too).
pub(super) fn wait_targets(
    wait: bool,
    desired: &crate::engine::plan::Desired,
    results: &[crate::engine::outcome::MemberResult],
) -> Vec<MemberRef> {
    if !wait {
        return Vec::new();
    }
    let skipped: std::collections::HashSet<&MemberRef> = results
        .iter()
        .filter(|r| matches!(r.outcome.class(), crate::engine::class::Class::Skipped(_)))
        .map(|r| &r.reference)
        .collect();
    desired
        .set
        .members
        .iter()
        .map(|m| &m.reference)
        .filter(|r| !skipped.contains(r))
        .cloned()
        .collect()
}

/// How often a set waiting for members the operator cannot watch reads them again.
pub(super) const POLL_UNWATCHED: Duration = Duration::from_secs(10);

/// The set's health once its objects are observed (waiting at most [`SETTLE`] for the
/// watches); members of kinds whose watch has not listed by then (the operator may not watch
/// them cluster-wide: a namespaced install) are read with GETs as the set's identity, and
/// `true` says so (they are read again while the set waits). `None`: not tracked.
pub(super) async fn observed_health(
    ctx: &Context,
    scope: &SetScope,
    desired: &Desired,
) -> Option<(crate::members::SetHealth, bool)> {
    let deadline = tokio::time::Instant::now() + SETTLE;
    let mut changes = ctx.members.changes();
    let mut health = ctx.members.health(&scope.id)?;
    while health.unobserved > 0 {
        match tokio::time::timeout_at(deadline, changes.changed()).await {
            Ok(Ok(())) => health = ctx.members.health(&scope.id)?,
            _ => break,
        }
    }
    // Read afresh every time (what an earlier reconcile read is stale by now).
    let unwatched = ctx.members.unwatched(&scope.id);
    if unwatched.is_empty() {
        return Some((health, false));
    }
    let targets: Vec<(MemberRef, kube::discovery::ApiResource)> = desired
        .set
        .members
        .iter()
        .filter(|m| unwatched.contains(&m.reference))
        .map(|m| (m.reference.clone(), m.resource.clone()))
        .collect();
    let exprs = ctx.members.exprs(&scope.id);
    let fetched = read_healths(scope.client.clone(), targets, scope.concurrency, exprs).await;
    ctx.members.fetched(&scope.id, fetched);
    Some((ctx.members.health(&scope.id)?, true))
}

/// The health of each member read with a GET by `client` (the set's identity), `concurrency`
/// at a time, by the set's `exprs` where they have an entry for its kind.
async fn read_healths(
    client: kube::Client,
    targets: Vec<(MemberRef, kube::discovery::ApiResource)>,
    concurrency: usize,
    exprs: Option<Arc<HealthExprs>>,
) -> Vec<(MemberRef, crate::health::Health)> {
    use crate::health::{Health, Status};
    use futures::StreamExt;
    futures::stream::iter(targets)
        .map(move |(r, resource)| {
            let api: Api<kube::core::DynamicObject> =
                crate::discovery::api_in(&client, r.namespace.as_deref(), &resource);
            let exprs = exprs.clone();
            async move {
                let h = match api.get_opt(&r.name).await {
                    Ok(Some(o)) => {
                        crate::members::health_of(&o, &r.group, &r.kind, exprs.as_deref())
                    }
                    Ok(None) => Health::not_found(),
                    Err(e) => Health::new(Status::Unknown, format!("cannot be read: {e}")),
                };
                (r, h)
            }
        })
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await
}

/// Step 1b, the objects of spec.healthChecks, resolved before anything is written: each kind
/// served, each object within the set's scope (as a member would be) and readable by the
/// set's identity — otherwise ValidationFailed, naming the entry, and the set's health is no
/// longer kept. A failure of the API itself is retried (ApplyFailed). Then
/// spec.healthCheckExprs, compiled (ValidationFailed naming the entry when one does not) and
/// handed to the member watches when the set waits or checks (before any member is applied,
/// so that every event of its members is assessed with them).
pub(super) async fn health_checks(
    ctx: &Context,
    scope: &SetScope,
    spec: &ApplySetSpec,
) -> Step<Vec<CheckTarget>> {
    let resolved = match health_exprs(ctx, scope, spec).await {
        Ok(()) => resolve_checks(ctx, scope, spec).await,
        Err(stop) => Err(stop),
    };
    if let Err(Stop::Report(_)) = &resolved {
        ctx.members.untrack(&scope.id);
        ctx.health.forget(&scope.id);
    }
    resolved
}

/// spec.healthCheckExprs compiled (see [`health_checks`]).
async fn health_exprs(ctx: &Context, scope: &SetScope, spec: &ApplySetSpec) -> Step<()> {
    let compiled = ctx
        .health
        .compile_exprs(&scope.id, &spec.health_check_exprs)
        .await
        .map_err(|e| {
            let msg = format!("{}: {e}", scope.parent);
            Stop::from(Report::failed(Reason::ValidationFailed, msg))
        })?;
    let used = spec.wait || !spec.health_checks.is_empty();
    let exprs = if used { compiled } else { Arc::default() };
    ctx.members.use_exprs(&scope.id, exprs);
    Ok(())
}

/// Most entries spec.healthChecks may have (the CRD says so too).
const MAX_HEALTH_CHECKS: usize = 64;

async fn resolve_checks(
    ctx: &Context,
    scope: &SetScope,
    spec: &ApplySetSpec,
) -> Step<Vec<CheckTarget>> {
    let parent = &scope.parent;
    if spec.health_checks.is_empty() {
        return Ok(Vec::new());
    }
    if spec.health_checks.len() > MAX_HEALTH_CHECKS {
        let msg = format!(
            "{parent}: spec.healthChecks has {} entries, more than the {MAX_HEALTH_CHECKS} allowed",
            spec.health_checks.len()
        );
        return Err(Report::failed(Reason::ValidationFailed, msg).into());
    }
    let invalid = |i: usize, why: String| {
        Stop::from(Report {
            retry: true,
            ..Report::failed(
                Reason::ValidationFailed,
                format!("{parent}: spec.healthChecks[{i}]: {why}"),
            )
        })
    };
    let gvks: Vec<(String, String, String)> = spec
        .health_checks
        .iter()
        .map(|c| {
            let (group, version) = match c.api_version.split_once('/') {
                Some((g, v)) => (g.to_string(), v.to_string()),
                None => (String::new(), c.api_version.clone()),
            };
            (group, version, c.kind.clone())
        })
        .collect();
    let resolved = ctx.resolver.resolve_all(&gvks).await?;
    let mut targets = Vec::with_capacity(gvks.len());
    for (i, (c, gvk)) in spec.health_checks.iter().zip(&gvks).enumerate() {
        let Some(r) = resolved.get(gvk) else {
            let why = format!("{} {} is not served by the cluster", c.api_version, c.kind);
            return Err(invalid(i, why));
        };
        let namespace = match (r.namespaced, &c.namespace, &parent.namespace) {
            (false, _, _) => None,
            (true, Some(ns), _) | (true, None, Some(ns)) => Some(ns.clone()),
            (true, None, None) => {
                let why = format!("{} is namespaced: name its namespace", c.kind);
                return Err(invalid(i, why));
            }
        };
        let reference = MemberRef {
            group: gvk.0.clone(),
            kind: c.kind.clone(),
            namespace,
            name: c.name.clone(),
        };
        tenancy::check_scope(
            parent,
            &scope.identity,
            &ctx.config.tenancy,
            [(&reference, r.namespaced)],
        )
        .map_err(|e| invalid(i, e.to_string()))?;
        if let Some(why) = readable(scope, &reference, &r.resource).await? {
            return Err(invalid(i, why));
        }
        targets.push(CheckTarget {
            reference,
            resource: r.resource.clone(),
        });
    }
    Ok(targets)
}

/// Why the set's identity may not get `reference` (its health is the set's to know only if
/// it may), if so. An object that does not exist is readable (it is reported NotFound).
async fn readable(
    scope: &SetScope,
    reference: &MemberRef,
    resource: &kube::discovery::ApiResource,
) -> Step<Option<String>> {
    let api: Api<kube::core::DynamicObject> =
        crate::discovery::api_in(&scope.client, reference.namespace.as_deref(), resource);
    match api.get_metadata_opt(&reference.name).await {
        Ok(_) => Ok(None),
        Err(kube::Error::Api(s)) if s.is_forbidden() => Ok(Some(format!(
            "{} may not get {reference}; grant it get on {} or remove the check",
            scope.identity, resource.plural
        ))),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::Health;

    fn summary(statuses: &[Status]) -> health::Summary {
        let healths: Vec<(String, Health)> = statuses
            .iter()
            .enumerate()
            .map(|(i, s)| (format!("Deployment ns/d{i}"), Health::new(*s, "why")))
            .collect();
        health::summarize(healths.iter().map(|(n, h)| (n.as_str(), h)), 5)
    }

    #[test]
    fn details_are_written_at_most_every_few_seconds_a_new_status_at_once() {
        let i = DETAIL_WRITE_INTERVAL;
        assert_eq!(
            hold_back(false, None),
            None,
            "never written by this process"
        );
        assert_eq!(
            hold_back(true, Some(Duration::ZERO)),
            None,
            "Healthy's status changed"
        );
        assert_eq!(
            hold_back(false, Some(Duration::from_secs(1))),
            Some(i - Duration::from_secs(1))
        );
        assert_eq!(hold_back(false, Some(i)), None);
    }

    #[test]
    fn the_verdict_follows_the_health_and_the_clock() {
        let t = Duration::from_secs(60);
        assert_eq!(verdict(Status::Current, t * 2, t), Verdict::Current);
        assert_eq!(verdict(Status::Failed, Duration::ZERO, t), Verdict::Failed);
        for s in [
            Status::InProgress,
            Status::NotFound,
            Status::Terminating,
            Status::Unknown,
        ] {
            assert_eq!(
                verdict(s, Duration::from_secs(20), t),
                Verdict::Waiting(Duration::from_secs(40))
            );
            assert_eq!(verdict(s, t, t), Verdict::TimedOut(t));
        }
    }

    #[test]
    fn a_wait_lasts_from_its_first_look_and_starts_over_for_a_new_generation() {
        let r = Reporter::default();
        let t = Duration::from_secs(3600);
        let key = |g| (Some(g), "rev".to_string());
        assert!(
            matches!(r.wait_verdict("a", key(1), Status::InProgress, t), Verdict::Waiting(d) if d == t)
        );
        assert!(r.is_waiting("a"));
        assert!(
            matches!(r.wait_verdict("a", key(1), Status::InProgress, t), Verdict::Waiting(d) if d < t)
        );
        // A new generation waits anew.
        assert!(
            matches!(r.wait_verdict("a", key(2), Status::InProgress, t), Verdict::Waiting(d) if d == t)
        );
        // A decisive look ends the wait; the next undecided one starts a new one.
        assert_eq!(
            r.wait_verdict("a", key(2), Status::Current, t),
            Verdict::Current
        );
        assert!(!r.is_waiting("a"));
        assert_eq!(
            r.wait_verdict("a", key(2), Status::InProgress, Duration::ZERO),
            Verdict::TimedOut(Duration::ZERO)
        );
        assert!(!r.is_waiting("a"));
    }

    #[test]
    fn healthy_is_true_false_or_unknown_and_keeps_its_transition_time() {
        let current =
            healthy_condition(None, &summary(&[Status::Current]), Some(1)).expect("a condition");
        assert_eq!(
            (current.status.as_str(), current.reason.as_str()),
            ("True", "Current")
        );
        assert_eq!(current.message, "1 of 1 current");
        let again = healthy_condition(
            Some(&current),
            &summary(&[Status::Current, Status::Current]),
            Some(2),
        )
        .expect("a condition");
        assert_eq!(again.last_transition_time, current.last_transition_time);
        assert_eq!(again.observed_generation, Some(2));
        let failed = healthy_condition(
            Some(&current),
            &summary(&[Status::Failed, Status::Current]),
            Some(2),
        )
        .expect("a condition");
        assert_eq!(
            (failed.status.as_str(), failed.reason.as_str()),
            ("False", "HealthCheckFailed")
        );
        assert_eq!(
            failed.message,
            "1 of 2 not current (1 failed): Deployment ns/d0: why"
        );
        let waiting =
            healthy_condition(None, &summary(&[Status::InProgress]), Some(1)).expect("a condition");
        assert_eq!(
            (waiting.status.as_str(), waiting.reason.as_str()),
            ("Unknown", "Progressing")
        );
        let unknown =
            healthy_condition(None, &summary(&[Status::Unknown]), Some(1)).expect("a condition");
        assert_eq!(
            (unknown.status.as_str(), unknown.reason.as_str()),
            ("Unknown", "Unknown")
        );
    }

    #[test]
    fn the_health_status_counts_and_names_what_is_not_current() {
        let h = health_status(&summary(&[
            Status::Current,
            Status::InProgress,
            Status::NotFound,
        ]));
        assert_eq!(
            (h.current, h.in_progress, h.not_found, h.failed),
            (1, 1, 1, 0)
        );
        assert_eq!(
            h.not_current
                .iter()
                .map(|e| (e.object.as_str(), e.status.as_str()))
                .collect::<Vec<_>>(),
            [
                ("Deployment ns/d2", "NotFound"),
                ("Deployment ns/d1", "InProgress")
            ]
        );
    }
}

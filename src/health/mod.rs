//! Health of Kubernetes objects (pure, no I/O): whether an object works, not only whether it was
//! written.
//!
//! [`assess`] reads one object (its whole JSON, as the API server returns it) and gives a
//! [`Health`]: a [`Status`] and a short message. The rules are those of kstatus
//! (`sigs.k8s.io/cli-utils`, `pkg/kstatus/status`), rewritten here:
//!
//! 1. Generic rules, for every kind, in this order: an object with `metadata.deletionTimestamp`
//!    is `Terminating`; an object whose `metadata.generation` differs from
//!    `status.observedGeneration` is `InProgress`; a `Reconciling=True` condition is
//!    `InProgress` and a `Stalled=True` condition is `Failed`.
//! 2. Rules per built-in kind (Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, Pod,
//!    PersistentVolumeClaim, Service, PodDisruptionBudget, CustomResourceDefinition, Namespace,
//!    and the kinds that are current once they exist: ConfigMap, Secret, CronJob).
//! 3. Other kinds: a `Ready` condition decides (`True` is `Current`, `False` or `Unknown` is
//!    `InProgress`); without one the object is `Current` once it exists.
//!
//! Where this module departs from kstatus it says so at the rule (search for "kstatus says").
//! A malformed object (a field of the wrong type, a negative count) is `Unknown`, with a
//! message naming the field; nothing here panics on input.
//!
//! Messages name no object: a caller renders them after the object's identity, as in
//! `Deployment demo/web: 0 of 1 replicas available` ([`NotCurrent`]'s `Display`).
//!
//! [`summarize`] folds many healths into counts and the first few objects that are not current,
//! for a set's `status.health`.
//!
//! Files: this one (the statuses, the generic rules and the condition helpers), `apps`
//! (Deployment, StatefulSet, DaemonSet, ReplicaSet), `batch` (Job), `core_group` (Pod,
//! PersistentVolumeClaim, Service, Namespace), `summary`; each kind's tests beside its rules,
//! the rest in `tests`.

use std::fmt;

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::DynamicObject;
use serde_json::Value;

mod apps;
mod batch;
mod core_group;
pub mod exprs;
mod summary;
#[cfg(test)]
mod tests;

pub use exprs::HealthExprs;
pub use summary::{NotCurrent, Summary, summarize};

/// The status of one object, kstatus's vocabulary.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    /// The object's controller has acted on its latest spec and the object works.
    Current,
    /// Its controller has not yet caught up with its spec, or the object is not yet working.
    InProgress,
    /// The object will not become current without a change (a failed Job, a crash loop).
    Failed,
    /// The object is being deleted.
    Terminating,
    /// The object does not exist.
    NotFound,
    /// The object could not be assessed (it is malformed).
    Unknown,
}

impl Status {
    /// Every status.
    pub const ALL: [Status; 6] = [
        Status::Current,
        Status::InProgress,
        Status::Failed,
        Status::Terminating,
        Status::NotFound,
        Status::Unknown,
    ];

    /// The name kstatus gives this status (`Current`, `InProgress`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Current => "Current",
            Status::InProgress => "InProgress",
            Status::Failed => "Failed",
            Status::Terminating => "Terminating",
            Status::NotFound => "NotFound",
            Status::Unknown => "Unknown",
        }
    }

    /// How urgently a user should look at an object in this status: 0 first. Orders the
    /// objects listed by [`summarize`] and the ui's member tree.
    pub fn urgency(self) -> u8 {
        match self {
            Status::Failed => 0,
            Status::Unknown => 1,
            Status::NotFound => 2,
            Status::Terminating => 3,
            Status::InProgress => 4,
            Status::Current => 5,
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The health of one object: its status and why, in a few words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Health {
    pub status: Status,
    /// Short and human, without the object's identity (e.g. `0 of 1 replicas available`).
    pub message: String,
}

impl Health {
    pub fn new(status: Status, message: impl Into<String>) -> Self {
        Health {
            status,
            message: message.into(),
        }
    }

    /// The health of an object that does not exist.
    pub fn not_found() -> Self {
        Health::new(Status::NotFound, "not found")
    }

    pub fn is_current(&self) -> bool {
        self.status == Status::Current
    }

    fn current(message: impl Into<String>) -> Self {
        Health::new(Status::Current, message)
    }

    fn in_progress(message: impl Into<String>) -> Self {
        Health::new(Status::InProgress, message)
    }

    fn failed(message: impl Into<String>) -> Self {
        Health::new(Status::Failed, message)
    }
}

/// How long a Pod may stay unschedulable after its creation before it is `Failed` (kstatus's
/// `ScheduleWindow`).
pub const SCHEDULE_WINDOW: SignedDuration = SignedDuration::from_secs(15);

/// Built-in kinds that have no status to assess: by the generic rules such an object is Current
/// as soon as it exists, so its health needs only its existence (the member watches watch them
/// by metadata alone). Every other kind, custom resources included, is assessed from the whole
/// object.
const WITHOUT_STATUS: [(&str, &str); 18] = [
    ("", "ConfigMap"),
    ("", "Secret"),
    ("", "ServiceAccount"),
    ("", "Endpoints"),
    ("", "LimitRange"),
    ("", "PodTemplate"),
    ("rbac.authorization.k8s.io", "Role"),
    ("rbac.authorization.k8s.io", "RoleBinding"),
    ("rbac.authorization.k8s.io", "ClusterRole"),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
    (
        "admissionregistration.k8s.io",
        "ValidatingWebhookConfiguration",
    ),
    (
        "admissionregistration.k8s.io",
        "MutatingWebhookConfiguration",
    ),
    ("scheduling.k8s.io", "PriorityClass"),
    ("storage.k8s.io", "StorageClass"),
    ("networking.k8s.io", "IngressClass"),
    ("node.k8s.io", "RuntimeClass"),
    ("discovery.k8s.io", "EndpointSlice"),
    ("coordination.k8s.io", "Lease"),
];

/// Whether objects of this kind must be read whole to assess their health (false for the
/// built-in kinds without status, which are Current once they exist).
pub fn needs_object(group: &str, kind: &str) -> bool {
    !WITHOUT_STATUS.contains(&(group, kind))
}

/// The health of an object given as its whole JSON (`apiVersion`, `kind`, `metadata`, `spec`,
/// `status`). `now` is only read by the Pod rule (how long a Pod has been unschedulable).
pub fn assess(object: &Value, now: Timestamp) -> Health {
    match Object::from_value(object) {
        Ok(o) => o.assess(now),
        Err(m) => m.into_health(),
    }
}

/// The health of an object given as its whole JSON, by the entry of `exprs` for its kind if
/// it has one ([`exprs::HealthExprs::for_kind`]; an object being deleted is `Terminating`
/// all the same), else by [`assess`].
pub fn assess_with(object: &Value, now: Timestamp, exprs: &HealthExprs) -> Health {
    let api_version = object
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    let kind = object.get("kind").and_then(Value::as_str).unwrap_or("");
    let deleting = object
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null());
    match exprs.for_kind(group_of(api_version), kind) {
        Some(check) if !deleting => check.assess(&exprs::ObjectFields::Json(object)),
        _ => assess(object, now),
    }
}

/// The health of a [`DynamicObject`] of kind `group`/`kind` (its `data` holds `spec` and
/// `status`), without converting it to JSON first. Same rules as [`assess`]. The kind is the
/// caller's: the items of a LIST (a watch's first events) carry no apiVersion and kind.
pub fn assess_dynamic(object: &DynamicObject, group: &str, kind: &str, now: Timestamp) -> Health {
    let meta = &object.metadata;
    let o = Object {
        group,
        kind,
        generation: meta.generation,
        deleting: meta.deletion_timestamp.is_some(),
        created: meta.creation_timestamp.as_ref().map(|t| t.0),
        body: &object.data,
    };
    o.assess(now)
}

/// A field that is not what the API promises: the object is assessed `Unknown`.
#[derive(Debug)]
struct Malformed(String);

impl Malformed {
    fn into_health(self) -> Health {
        Health::new(Status::Unknown, format!("cannot assess: {}", self.0))
    }
}

type Rule<T> = Result<T, Malformed>;

/// What the rules read of an object: its group and kind, three metadata fields, and the body
/// that holds `spec` and `status`.
struct Object<'a> {
    group: &'a str,
    kind: &'a str,
    generation: Option<i64>,
    deleting: bool,
    created: Option<Timestamp>,
    body: &'a Value,
}

/// The API group of an `apiVersion` (`apps/v1` → `apps`, `v1` → the core group, ``).
fn group_of(api_version: &str) -> &str {
    api_version.split_once('/').map_or("", |(group, _)| group)
}

impl<'a> Object<'a> {
    /// Reads the identity and metadata the rules need from a whole object.
    fn from_value(object: &'a Value) -> Rule<Self> {
        if !object.is_object() {
            return Err(Malformed("the object is not a JSON object".into()));
        }
        let api_version = string_at(object, &["apiVersion"])?.unwrap_or("");
        let kind = string_at(object, &["kind"])?.unwrap_or("");
        let generation = int_at(object, &["metadata", "generation"])?;
        let deleting =
            string_at(object, &["metadata", "deletionTimestamp"])?.is_some_and(|t| !t.is_empty());
        // An unparseable creation time counts as long ago, as in kstatus (Go's zero time).
        let created = string_at(object, &["metadata", "creationTimestamp"])?
            .and_then(|t| t.parse::<Timestamp>().ok());
        Ok(Object {
            group: group_of(api_version),
            kind,
            generation,
            deleting,
            created,
            body: object,
        })
    }

    /// Applies the rules; a malformed field makes the object `Unknown`.
    fn assess(&self, now: Timestamp) -> Health {
        self.rules(now).unwrap_or_else(Malformed::into_health)
    }

    /// The generic rules, then the kind's rules, then the `Ready` condition (kstatus's
    /// `Compute`, status.go).
    fn rules(&self, now: Timestamp) -> Rule<Health> {
        if self.deleting {
            return Ok(Health::new(Status::Terminating, "being deleted"));
        }
        if let Some(h) = self.generation_rule()? {
            return Ok(h);
        }
        let conditions = conditions(self.body)?;
        if let Some(h) = standard_conditions(&conditions) {
            return Ok(h);
        }
        match (self.group, self.kind) {
            ("apps" | "extensions", "Deployment") => self.deployment(&conditions),
            ("apps", "StatefulSet") => self.stateful_set(),
            ("apps" | "extensions", "DaemonSet") => self.daemon_set(),
            ("apps" | "extensions", "ReplicaSet") => self.replica_set(&conditions),
            ("batch", "Job") => self.job(&conditions),
            ("", "Pod") => self.pod(&conditions, now),
            ("", "PersistentVolumeClaim") => self.persistent_volume_claim(),
            ("", "Service") => self.service(),
            ("", "Namespace") => self.namespace(),
            ("policy", "PodDisruptionBudget") => {
                Ok(Health::current("allowed disruptions computed"))
            }
            ("apiextensions.k8s.io", "CustomResourceDefinition") => Ok(crd(&conditions)),
            ("", "ConfigMap" | "Secret") | ("batch", "CronJob") => Ok(Health::current("exists")),
            _ => Ok(ready_condition(&conditions).unwrap_or_else(|| Health::current("current"))),
        }
    }

    /// `metadata.generation` against `status.observedGeneration` (generic.go,
    /// `checkGeneration`): checked only when both are set.
    fn generation_rule(&self) -> Rule<Option<Health>> {
        let Some(generation) = self.generation else {
            return Ok(None);
        };
        let observed = int_at(self.body, &["status", "observedGeneration"])?;
        Ok(match observed {
            Some(observed) if observed != generation => Some(Health::in_progress(format!(
                "generation {generation} not yet observed (observed {observed})"
            ))),
            _ => None,
        })
    }

    /// A count under `spec` or `status`: `default` when absent, an error when negative or not an
    /// integer.
    fn count(&self, path: &[&str], default: i64) -> Rule<i64> {
        match int_at(self.body, path)? {
            None => Ok(default),
            Some(n) if n >= 0 => Ok(n),
            Some(_) => Err(Malformed(format!("{} is negative", path.join(".")))),
        }
    }

    /// A string under `spec` or `status`, `""` when absent.
    fn text(&self, path: &[&str]) -> Rule<&'a str> {
        Ok(string_at(self.body, path)?.unwrap_or(""))
    }
}

/// CustomResourceDefinition (core.go, `CRDConditions`): the first decisive condition in order.
fn crd(conditions: &[Condition<'_>]) -> Health {
    for c in conditions {
        match (c.type_, c.status) {
            ("NamesAccepted", "False") => {
                return Health::failed(with_detail("names not accepted", c.message, c.reason));
            }
            ("Established", "False") if c.reason != "Installing" => {
                return Health::failed(with_detail("not established", c.message, c.reason));
            }
            ("Established", "True") => return Health::current("established"),
            _ => {}
        }
    }
    Health::in_progress("installing")
}

/// One entry of `status.conditions`; absent fields are empty.
#[derive(Debug)]
struct Condition<'a> {
    type_: &'a str,
    status: &'a str,
    reason: &'a str,
    message: &'a str,
}

/// The object's `status.conditions`; an error when they are not a list of objects with string
/// fields (kstatus fails to decode them then).
fn conditions(body: &Value) -> Rule<Vec<Condition<'_>>> {
    let Some(list) = array_at(body, &["status", "conditions"])? else {
        return Ok(Vec::new());
    };
    list.iter()
        .map(|c| {
            if !c.is_object() {
                return Err(Malformed("status.conditions holds a non-object".into()));
            }
            let field = |name: &str| -> Rule<&str> {
                string_at(c, &[name])
                    .map(Option::unwrap_or_default)
                    .map_err(|_| Malformed(format!("a condition's {name} is not a string")))
            };
            Ok(Condition {
                type_: field("type")?,
                status: field("status")?,
                reason: field("reason")?,
                message: field("message")?,
            })
        })
        .collect()
}

/// The first condition of this type with this status.
fn find<'c, 'a>(
    conditions: &'c [Condition<'a>],
    type_: &str,
    status: &str,
) -> Option<&'c Condition<'a>> {
    conditions
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
}

/// kstatus's own conditions, for every kind (generic.go, `checkGenericProperties`): the first
/// `Reconciling=True` or `Stalled=True` in the list decides.
fn standard_conditions(conditions: &[Condition<'_>]) -> Option<Health> {
    conditions.iter().find_map(|c| match (c.type_, c.status) {
        ("Reconciling", "True") => Some(Health::in_progress(with_detail(
            "reconciling",
            c.message,
            c.reason,
        ))),
        ("Stalled", "True") => Some(Health::failed(with_detail("stalled", c.message, c.reason))),
        _ => None,
    })
}

/// The `Ready` condition of kinds without rules of their own (status.go,
/// `checkReadyCondition`): the first one whose status is True, False or Unknown decides.
fn ready_condition(conditions: &[Condition<'_>]) -> Option<Health> {
    conditions
        .iter()
        .filter(|c| c.type_ == "Ready")
        .find_map(|c| match c.status {
            "True" => Some(Health::current("ready")),
            "False" => Some(Health::in_progress(with_detail(
                "not ready",
                c.message,
                c.reason,
            ))),
            "Unknown" => Some(Health::in_progress(with_detail(
                "readiness unknown",
                c.message,
                c.reason,
            ))),
            _ => None,
        })
}

/// `what: message`, or `what: reason` without a message, or `what` alone.
fn with_detail(what: &str, message: &str, reason: &str) -> String {
    let detail = if message.is_empty() { reason } else { message };
    if detail.is_empty() {
        what.to_string()
    } else {
        format!("{what}: {detail}")
    }
}

/// The value at `path`; `None` when a step is absent or null, an error when a step is not an
/// object.
fn at<'v>(value: &'v Value, path: &[&str]) -> Rule<Option<&'v Value>> {
    let mut here = value;
    for (i, step) in path.iter().enumerate() {
        here = match here {
            Value::Object(map) => match map.get(*step) {
                Some(next) => next,
                None => return Ok(None),
            },
            Value::Null => return Ok(None),
            _ => {
                return Err(Malformed(format!(
                    "{} is not an object",
                    path[..i].join(".")
                )));
            }
        };
    }
    Ok(Some(here))
}

/// The string at `path`; `None` when absent or null, an error when not a string.
fn string_at<'v>(value: &'v Value, path: &[&str]) -> Rule<Option<&'v str>> {
    match at(value, path)? {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(Malformed(format!("{} is not a string", path.join(".")))),
    }
}

/// The integer at `path`; `None` when absent or null, an error when not an integer.
fn int_at(value: &Value, path: &[&str]) -> Rule<Option<i64>> {
    match at(value, path)? {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_i64()
            .map(Some)
            .ok_or_else(|| Malformed(format!("{} is not an integer", path.join(".")))),
    }
}

/// The array at `path`; `None` when absent or null, an error when not an array.
fn array_at<'v>(value: &'v Value, path: &[&str]) -> Rule<Option<&'v Vec<Value>>> {
    match at(value, path)? {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(a)) => Ok(Some(a)),
        Some(_) => Err(Malformed(format!("{} is not a list", path.join(".")))),
    }
}

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

use std::fmt;

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::DynamicObject;
use serde_json::Value;

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
    /// objects listed by [`summarize`].
    fn urgency(self) -> u8 {
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

    /// Deployment (core.go, `deploymentConditions`).
    fn deployment(&self, conditions: &[Condition<'_>]) -> Rule<Health> {
        // Without spec.progressDeadlineSeconds (or with the controller's "never" value) the
        // controller sets no Progressing condition, so it is not waited for.
        let deadline = int_at(self.body, &["spec", "progressDeadlineSeconds"])?;
        let mut progressing = deadline.is_none_or(|d| d == i64::from(i32::MAX));
        let mut available = false;
        for c in conditions {
            match c.type_ {
                "Progressing" if c.reason == "ProgressDeadlineExceeded" => {
                    return Ok(Health::failed(with_detail(
                        "progress deadline exceeded",
                        c.message,
                        "",
                    )));
                }
                "Progressing" if c.status == "True" && c.reason == "NewReplicaSetAvailable" => {
                    progressing = true;
                }
                "Available" if c.status == "True" => available = true,
                _ => {}
            }
        }
        let spec = self.count(&["spec", "replicas"], 1)?;
        let replicas = self.count(&["status", "replicas"], 0)?;
        let updated = self.count(&["status", "updatedReplicas"], 0)?;
        let ready = self.count(&["status", "readyReplicas"], 0)?;
        let avail = self.count(&["status", "availableReplicas"], 0)?;

        // kstatus says a paused Deployment is InProgress until its rollout is resumed (its
        // Progressing condition turns Unknown, reason DeploymentPaused, so it never counts as
        // progressing). A pause is the user's decision to hold the rollout, so waiting on it
        // cannot end: here a paused Deployment whose spec is observed is Current, as Helm treats
        // it (Argo CD calls it Suspended).
        if self.spec_bool("paused")? {
            return Ok(Health::current(format!(
                "paused, rollout on hold ({avail} of {spec} replicas available)"
            )));
        }
        if spec > replicas {
            return Ok(Health::in_progress(format!(
                "{replicas} of {spec} replicas created"
            )));
        }
        if spec > updated {
            return Ok(Health::in_progress(format!(
                "{updated} of {spec} replicas updated"
            )));
        }
        if replicas > spec {
            return Ok(Health::in_progress(format!(
                "{} old replicas pending termination",
                replicas - spec
            )));
        }
        if updated > avail {
            return Ok(Health::in_progress(format!(
                "{avail} of {updated} replicas available"
            )));
        }
        if spec > ready {
            return Ok(Health::in_progress(format!(
                "{ready} of {spec} replicas ready"
            )));
        }
        if !progressing {
            return Ok(Health::in_progress("new ReplicaSet not yet available"));
        }
        if !available {
            return Ok(Health::in_progress("minimum availability not met"));
        }
        Ok(Health::current(format!(
            "{avail} of {spec} replicas available"
        )))
    }

    /// `spec.<field>` as a boolean, false when absent.
    fn spec_bool(&self, field: &str) -> Rule<bool> {
        match at(self.body, &["spec", field])? {
            None | Some(Value::Null) => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(_) => Err(Malformed(format!("spec.{field} is not a boolean"))),
        }
    }

    /// StatefulSet (core.go, `stsConditions`). Its controller sets no conditions, so only the
    /// counts and revisions tell.
    fn stateful_set(&self) -> Rule<Health> {
        if self.text(&["spec", "updateStrategy", "type"])? == "OnDelete" {
            return Ok(Health::current(
                "OnDelete update strategy: pods are updated when deleted",
            ));
        }
        let spec = self.count(&["spec", "replicas"], 1)?;
        let ready = self.count(&["status", "readyReplicas"], 0)?;
        let current = self.count(&["status", "currentReplicas"], 0)?;
        let updated = self.count(&["status", "updatedReplicas"], 0)?;
        let replicas = self.count(&["status", "replicas"], 0)?;
        // The API server defaults the partition to 0 for rolling updates, so on a live object
        // the partitioned branch below is the usual one.
        let partition = int_at(
            self.body,
            &["spec", "updateStrategy", "rollingUpdate", "partition"],
        )?;
        if spec > replicas {
            return Ok(Health::in_progress(format!(
                "{replicas} of {spec} replicas created"
            )));
        }
        if spec > ready {
            return Ok(Health::in_progress(format!(
                "{ready} of {spec} replicas ready"
            )));
        }
        if replicas > spec {
            return Ok(Health::in_progress(format!(
                "{} extra replicas pending termination",
                replicas - spec
            )));
        }
        if let Some(partition) = partition {
            if partition < 0 {
                return Err(Malformed(
                    "spec.updateStrategy.rollingUpdate.partition is negative".into(),
                ));
            }
            // Only the pods at ordinals >= partition are updated.
            let to_update = spec - partition;
            if updated < to_update {
                return Ok(Health::in_progress(format!(
                    "{updated} of {to_update} replicas updated (partition {partition})"
                )));
            }
            return Ok(Health::current(format!(
                "partitioned rollout complete: {updated} replicas updated (partition {partition})"
            )));
        }
        if spec > current {
            return Ok(Health::in_progress(format!(
                "{current} of {spec} replicas at the current revision"
            )));
        }
        let current_revision = self.text(&["status", "currentRevision"])?;
        let update_revision = self.text(&["status", "updateRevision"])?;
        if current_revision != update_revision {
            return Ok(Health::in_progress(format!(
                "rolling out revision {update_revision}"
            )));
        }
        Ok(Health::current(format!("{ready} of {spec} replicas ready")))
    }

    /// DaemonSet (core.go, `daemonsetConditions`). Its controller always writes
    /// `status.observedGeneration`, so a DaemonSet without it has not been seen yet.
    fn daemon_set(&self) -> Rule<Health> {
        if self.generation.is_none() {
            return Ok(Health::in_progress("no metadata.generation yet"));
        }
        if int_at(self.body, &["status", "observedGeneration"])?.is_none() {
            return Ok(Health::in_progress("not yet observed by its controller"));
        }
        if int_at(self.body, &["status", "desiredNumberScheduled"])?.is_none() {
            return Ok(Health::in_progress(
                "desired number of pods not yet computed",
            ));
        }
        let desired = self.count(&["status", "desiredNumberScheduled"], 0)?;
        let scheduled = self.count(&["status", "currentNumberScheduled"], 0)?;
        let updated = self.count(&["status", "updatedNumberScheduled"], 0)?;
        let available = self.count(&["status", "numberAvailable"], 0)?;
        let ready = self.count(&["status", "numberReady"], 0)?;
        if desired > scheduled {
            return Ok(Health::in_progress(format!(
                "{scheduled} of {desired} pods scheduled"
            )));
        }
        if desired > updated {
            return Ok(Health::in_progress(format!(
                "{updated} of {desired} pods updated"
            )));
        }
        if desired > available {
            return Ok(Health::in_progress(format!(
                "{available} of {desired} pods available"
            )));
        }
        if desired > ready {
            return Ok(Health::in_progress(format!(
                "{ready} of {desired} pods ready"
            )));
        }
        Ok(Health::current(format!("{ready} of {desired} pods ready")))
    }

    /// ReplicaSet (core.go, `replicasetConditions`).
    fn replica_set(&self, conditions: &[Condition<'_>]) -> Rule<Health> {
        if let Some(c) = find(conditions, "ReplicaFailure", "True") {
            // kstatus keeps this InProgress: the controller retries creating pods.
            return Ok(Health::in_progress(with_detail(
                "replica failure",
                c.message,
                c.reason,
            )));
        }
        let spec = self.count(&["spec", "replicas"], 1)?;
        let replicas = self.count(&["status", "replicas"], 0)?;
        let ready = self.count(&["status", "readyReplicas"], 0)?;
        let available = self.count(&["status", "availableReplicas"], 0)?;
        let labeled = self.count(&["status", "fullyLabeledReplicas"], 0)?;
        if spec > labeled {
            return Ok(Health::in_progress(format!(
                "{labeled} of {spec} replicas labeled"
            )));
        }
        if spec > available {
            return Ok(Health::in_progress(format!(
                "{available} of {spec} replicas available"
            )));
        }
        if spec > ready {
            return Ok(Health::in_progress(format!(
                "{ready} of {spec} replicas ready"
            )));
        }
        if replicas > spec {
            return Ok(Health::in_progress(format!(
                "{} extra replicas pending termination",
                replicas - spec
            )));
        }
        Ok(Health::current(format!(
            "{available} of {spec} replicas available"
        )))
    }

    /// Job (core.go, `jobConditions`), the first decisive condition in order.
    fn job(&self, conditions: &[Condition<'_>]) -> Rule<Health> {
        let parallelism = self.count(&["spec", "parallelism"], 1)?;
        let completions = self.count(&["spec", "completions"], parallelism)?;
        let succeeded = self.count(&["status", "succeeded"], 0)?;
        let active = self.count(&["status", "active"], 0)?;
        let failed = self.count(&["status", "failed"], 0)?;
        let suspend = self.spec_bool("suspend")?;
        for c in conditions {
            match (c.type_, c.status) {
                ("Complete", "True") => {
                    return Ok(Health::current(format!(
                        "complete: {succeeded} of {completions} succeeded"
                    )));
                }
                ("Failed", "True") => {
                    let reason = if c.reason.is_empty() {
                        "JobFailed"
                    } else {
                        c.reason
                    };
                    let mut message = format!("failed: {reason}");
                    if !c.message.is_empty() {
                        message.push_str(&format!(" ({})", c.message));
                    }
                    return Ok(Health::failed(message));
                }
                // A Job suspended on purpose is as its user wants it; one on its way in or out
                // of suspension is not.
                ("Suspended", "True") if suspend => return Ok(Health::current("suspended")),
                _ => {}
            }
        }
        if self.text(&["status", "startTime"])?.is_empty() {
            return Ok(Health::in_progress("not started"));
        }
        // kstatus says a started Job is Current, which lets a wait end while the Job still runs.
        // Here a Job is Current only once complete, as Flux's own Job reader decides for its
        // `wait`: waiting on a Job means waiting for its work.
        Ok(Health::in_progress(format!(
            "running: {succeeded} of {completions} succeeded, {active} active, {failed} failed"
        )))
    }

    /// Pod (core.go, `podConditions`), by phase.
    fn pod(&self, conditions: &[Condition<'_>], now: Timestamp) -> Rule<Health> {
        match self.text(&["status", "phase"])? {
            "Succeeded" => Ok(Health::current("completed")),
            // kstatus says a Failed Pod is Current (it has completed). A Pod that ended in
            // failure does not work, and it never runs again: here it is Failed.
            "Failed" => {
                let reason = self.text(&["status", "reason"])?;
                let message = self.text(&["status", "message"])?;
                Ok(Health::failed(with_detail("failed", message, reason)))
            }
            "Running" => {
                if find(conditions, "Ready", "True").is_some() {
                    return Ok(Health::current("ready"));
                }
                if let Some(failing) = self.failing_containers()? {
                    return Ok(Health::failed(failing));
                }
                Ok(Health::in_progress("running, not ready"))
            }
            "Pending" => {
                if let Some(c) = find(conditions, "PodScheduled", "False")
                    && c.reason == "Unschedulable"
                {
                    let young = self
                        .created
                        .is_some_and(|created| now.duration_since(created) < SCHEDULE_WINDOW);
                    if young {
                        return Ok(Health::in_progress("not yet scheduled"));
                    }
                    return Ok(Health::failed(with_detail("unschedulable", c.message, "")));
                }
                // kstatus says only a running Pod fails by its containers, and only by
                // CrashLoopBackOff. Image pulls fail while the Pod is still Pending, so here the
                // containers are looked at in both phases.
                if let Some(failing) = self.failing_containers()? {
                    return Ok(Health::failed(failing));
                }
                Ok(Health::in_progress("pending"))
            }
            "" => Ok(Health::in_progress("not yet observed by the kubelet")),
            other => Err(Malformed(format!("unknown Pod phase {other:?}"))),
        }
    }

    /// The containers (init containers included) waiting for a reason that does not pass by
    /// itself, as `failing: name (Reason), ...`; `None` when there are none.
    fn failing_containers(&self) -> Rule<Option<String>> {
        let mut failing = Vec::new();
        for list in ["initContainerStatuses", "containerStatuses"] {
            let Some(statuses) = array_at(self.body, &["status", list])? else {
                continue;
            };
            for s in statuses {
                if !s.is_object() {
                    return Err(Malformed(format!("status.{list} holds a non-object")));
                }
                // Errors name the field from the object's root.
                let in_list = |Malformed(m)| Malformed(format!("status.{list}[].{m}"));
                let name = string_at(s, &["name"]).map_err(in_list)?.unwrap_or("");
                let reason = string_at(s, &["state", "waiting", "reason"])
                    .map_err(in_list)?
                    .unwrap_or("");
                if FAILING_WAIT_REASONS.contains(&reason) {
                    failing.push(format!("{name} ({reason})"));
                }
            }
        }
        Ok((!failing.is_empty()).then(|| format!("failing: {}", failing.join(", "))))
    }

    /// PersistentVolumeClaim (core.go, `pvcConditions`): current once bound.
    fn persistent_volume_claim(&self) -> Rule<Health> {
        match self.text(&["status", "phase"])? {
            "Bound" => Ok(Health::current("bound")),
            "" => Ok(Health::in_progress("not bound")),
            phase => Ok(Health::in_progress(format!("not bound (phase {phase})"))),
        }
    }

    /// Service (core.go, `serviceConditions`).
    fn service(&self) -> Rule<Health> {
        let type_ = self.text(&["spec", "type"])?;
        if type_ != "LoadBalancer" {
            return Ok(Health::current("exists"));
        }
        // kstatus says a LoadBalancer Service is Current with a cluster IP, which the API server
        // assigns at creation. A load balancer works once it has an address: here it is
        // InProgress until `status.loadBalancer.ingress` lists one, as Argo CD decides.
        let ingress = array_at(self.body, &["status", "loadBalancer", "ingress"])?;
        if ingress.is_none_or(|i| i.is_empty()) {
            return Ok(Health::in_progress("load balancer not yet provisioned"));
        }
        Ok(Health::current("load balancer provisioned"))
    }

    /// Namespace: kstatus has no rule of its own (its deletion is the generic Terminating); a
    /// namespace whose phase says Terminating is Terminating too.
    fn namespace(&self) -> Rule<Health> {
        match self.text(&["status", "phase"])? {
            "Terminating" => Ok(Health::new(Status::Terminating, "being deleted")),
            _ => Ok(Health::current("active")),
        }
    }
}

/// Waiting reasons of a container that mean a Pod will not start without a change. kstatus
/// says only `CrashLoopBackOff`; the others are kubelet's back-offs and refusals for a bad
/// image or a bad container configuration. `ErrImagePull` is not here: the first failed pull
/// may be transient, and its back-off follows.
const FAILING_WAIT_REASONS: [&str; 6] = [
    "CrashLoopBackOff",
    "ImagePullBackOff",
    "InvalidImageName",
    "ErrImageNeverPull",
    "CreateContainerConfigError",
    "CreateContainerError",
];

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

/// The health of many objects: how many are in each status, and the first few that are not
/// current, the most urgent first (Failed, Unknown, NotFound, Terminating, InProgress; in the
/// given order within a status).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub current: usize,
    pub in_progress: usize,
    pub failed: usize,
    pub terminating: usize,
    pub not_found: usize,
    pub unknown: usize,
    /// At most the `limit` given to [`summarize`].
    pub not_current: Vec<NotCurrent>,
}

/// An object that is not current, named by the caller (e.g. `Deployment demo/web`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotCurrent {
    pub object: String,
    pub status: Status,
    pub message: String,
}

impl fmt::Display for NotCurrent {
    /// `Deployment demo/web: 0 of 1 replicas available`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.object, self.message)
    }
}

/// Counts `healths` (each with the caller's name for its object) and keeps the first `limit`
/// that are not current, the most urgent first. Only the kept entries are copied.
pub fn summarize<'a, I>(healths: I, limit: usize) -> Summary
where
    I: IntoIterator<Item = (&'a str, &'a Health)>,
{
    let mut summary = Summary::default();
    for (object, health) in healths {
        let count = match health.status {
            Status::Current => &mut summary.current,
            Status::InProgress => &mut summary.in_progress,
            Status::Failed => &mut summary.failed,
            Status::Terminating => &mut summary.terminating,
            Status::NotFound => &mut summary.not_found,
            Status::Unknown => &mut summary.unknown,
        };
        *count += 1;
        if health.status == Status::Current {
            continue;
        }
        // After every kept entry at least as urgent, so the order within a status is kept.
        let urgency = health.status.urgency();
        let at = summary
            .not_current
            .iter()
            .position(|e| e.status.urgency() > urgency)
            .unwrap_or(summary.not_current.len());
        if at < limit {
            summary.not_current.insert(
                at,
                NotCurrent {
                    object: object.to_string(),
                    status: health.status,
                    message: health.message.clone(),
                },
            );
            summary.not_current.truncate(limit);
        }
    }
    summary
}

impl Summary {
    /// How many objects were summarized.
    pub fn total(&self) -> usize {
        self.current
            + self.in_progress
            + self.failed
            + self.terminating
            + self.not_found
            + self.unknown
    }

    /// How many objects are not current.
    pub fn not_current_count(&self) -> usize {
        self.total() - self.current
    }

    /// The status of the whole, as kstatus aggregates towards Current
    /// (`pkg/kstatus/polling/aggregator`): any Failed makes it Failed, else any Unknown makes it
    /// Unknown, else all Current (or nothing at all) makes it Current, else InProgress.
    pub fn status(&self) -> Status {
        if self.failed > 0 {
            Status::Failed
        } else if self.unknown > 0 {
            Status::Unknown
        } else if self.not_current_count() == 0 {
            Status::Current
        } else {
            Status::InProgress
        }
    }

    /// One line for a condition message: the counts, then the listed objects, e.g.
    /// `1 of 3 not current (1 in progress): Deployment demo/web: 0 of 1 replicas available`.
    pub fn message(&self) -> String {
        let total = self.total();
        let not_current = self.not_current_count();
        if not_current == 0 {
            return format!("{total} of {total} current");
        }
        let counts: Vec<String> = [
            (self.failed, "failed"),
            (self.unknown, "unknown"),
            (self.not_found, "not found"),
            (self.terminating, "terminating"),
            (self.in_progress, "in progress"),
        ]
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, what)| format!("{n} {what}"))
        .collect();
        let listed: Vec<String> = self.not_current.iter().map(ToString::to_string).collect();
        let mut line = format!(
            "{not_current} of {total} not current ({})",
            counts.join(", ")
        );
        if !listed.is_empty() {
            line.push_str(": ");
            line.push_str(&listed.join("; "));
        }
        let unlisted = not_current - self.not_current.len();
        if unlisted > 0 && !listed.is_empty() {
            line.push_str(&format!("; and {unlisted} more"));
        }
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn kinds_without_status_need_no_object() {
        assert!(!needs_object("", "ConfigMap"));
        assert!(!needs_object("rbac.authorization.k8s.io", "ClusterRole"));
        assert!(needs_object("apps", "Deployment"));
        assert!(needs_object("", "Service"));
        assert!(needs_object("", "Pod"));
        assert!(
            needs_object("example.com", "ConfigMap"),
            "by group and kind"
        );
        assert!(needs_object("example.com", "Widget"));
        // Each listed kind is Current once it exists, by the generic rules.
        for (group, kind) in WITHOUT_STATUS {
            let api_version = if group.is_empty() {
                "v1".to_string()
            } else {
                format!("{group}/v1")
            };
            let object = json!({"apiVersion": api_version, "kind": kind,
                "metadata": {"name": "x", "generation": 1}});
            assert_eq!(assess(&object, now()).status, Status::Current, "{kind}");
        }
    }

    /// The clock of every test: objects created "just now" are created at this instant.
    fn now() -> Timestamp {
        "2025-01-01T12:00:00Z".parse().unwrap()
    }

    /// Merges `extra` into `base`, objects key by key, anything else replaced.
    fn merge(base: &mut Value, extra: Value) {
        match (base, extra) {
            (Value::Object(b), Value::Object(e)) => {
                for (k, v) in e {
                    merge(b.entry(k).or_insert(Value::Null), v);
                }
            }
            (b, e) => *b = e,
        }
    }

    /// An object of this kind with generation 1, plus `extra` (spec, status, metadata).
    fn object(api_version: &str, kind: &str, extra: Value) -> Value {
        let mut o = json!({
            "apiVersion": api_version,
            "kind": kind,
            "metadata": {"name": "test", "namespace": "qual", "generation": 1},
        });
        merge(&mut o, extra);
        o
    }

    /// One named case of a table: the object and the health it must have.
    struct Case {
        name: &'static str,
        object: Value,
        status: Status,
        message: &'static str,
    }

    fn case(name: &'static str, object: Value, status: Status, message: &'static str) -> Case {
        Case {
            name,
            object,
            status,
            message,
        }
    }

    /// Checks every case, and reports all the failing ones by name.
    fn check(cases: Vec<Case>) {
        let failures: Vec<String> = cases
            .iter()
            .filter_map(|c| {
                let got = assess(&c.object, now());
                let want = Health::new(c.status, c.message);
                (got != want).then(|| format!("{}: got {got:?}, want {want:?}", c.name))
            })
            .collect();
        assert!(failures.is_empty(), "\n{}", failures.join("\n"));
    }

    use Status::*;

    fn cr(extra: Value) -> Value {
        object("example.com/v1", "Widget", extra)
    }

    fn conditions(list: Value) -> Value {
        json!({"status": {"conditions": list}})
    }

    #[test]
    fn generic_deletion_is_terminating() {
        check(vec![
            case(
                "ready Deployment being deleted",
                object(
                    "apps/v1",
                    "Deployment",
                    json!({
                        "metadata": {"deletionTimestamp": "2025-01-01T11:59:00Z"},
                        "status": {"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1,
                                   "readyReplicas": 1, "availableReplicas": 1},
                    }),
                ),
                Terminating,
                "being deleted",
            ),
            case(
                "custom resource being deleted, generation behind",
                cr(json!({
                    "metadata": {"generation": 2, "deletionTimestamp": "2025-01-01T11:59:00Z"},
                    "status": {"observedGeneration": 1},
                })),
                Terminating,
                "being deleted",
            ),
            case(
                "empty deletionTimestamp is not a deletion",
                cr(json!({"metadata": {"deletionTimestamp": ""}})),
                Current,
                "current",
            ),
        ]);
    }

    #[test]
    fn generic_observed_generation() {
        check(vec![
            case(
                "generation behind (crdMismatchStatusGeneration)",
                cr(json!({"metadata": {"generation": 2}, "status": {"observedGeneration": 1}})),
                InProgress,
                "generation 2 not yet observed (observed 1)",
            ),
            case(
                "observedGeneration defaulted to -1, as Flux's CRDs do",
                cr(json!({"status": {"observedGeneration": -1}})),
                InProgress,
                "generation 1 not yet observed (observed -1)",
            ),
            case(
                "generation behind wins over Ready=True",
                cr(json!({
                    "metadata": {"generation": 3},
                    "status": {"observedGeneration": 2,
                               "conditions": [{"type": "Ready", "status": "True"}]},
                })),
                InProgress,
                "generation 3 not yet observed (observed 2)",
            ),
            case(
                "generation observed",
                cr(json!({"metadata": {"generation": 2}, "status": {"observedGeneration": 2}})),
                Current,
                "current",
            ),
            case(
                "no observedGeneration: not checked",
                cr(json!({"metadata": {"generation": 5}, "status": {}})),
                Current,
                "current",
            ),
            case(
                "no generation: not checked",
                object(
                    "example.com/v1",
                    "Widget",
                    json!({"metadata": {"generation": null}, "status": {"observedGeneration": 7}}),
                ),
                Current,
                "current",
            ),
        ]);
    }

    #[test]
    fn generic_kinds_without_status_are_current_once_they_exist() {
        check(vec![
            case(
                "custom resource without status (crdNoStatus)",
                cr(json!({})),
                Current,
                "current",
            ),
            case(
                "object without apiVersion and kind",
                json!({"metadata": {"name": "x"}}),
                Current,
                "current",
            ),
            case(
                "unrelated condition only (crdNoCondition)",
                cr(conditions(
                    json!([{"type": "SomeCondition", "status": "False"}]),
                )),
                Current,
                "current",
            ),
            case(
                "a core kind without rules (ServiceAccount)",
                object("v1", "ServiceAccount", json!({})),
                Current,
                "current",
            ),
        ]);
    }

    #[test]
    fn generic_reconciling_and_stalled_conditions() {
        check(vec![
            case(
                "Reconciling=True",
                cr(conditions(json!([{"type": "Reconciling", "status": "True",
                    "reason": "Progressing", "message": "applying 3 objects"}]))),
                InProgress,
                "reconciling: applying 3 objects",
            ),
            case(
                "Reconciling=True without message: the reason",
                cr(conditions(
                    json!([{"type": "Reconciling", "status": "True", "reason": "Progressing"}]),
                )),
                InProgress,
                "reconciling: Progressing",
            ),
            case(
                "Reconciling=True, nothing else",
                cr(conditions(
                    json!([{"type": "Reconciling", "status": "True"}]),
                )),
                InProgress,
                "reconciling",
            ),
            case(
                "Reconciling=False is normal",
                cr(conditions(
                    json!([{"type": "Reconciling", "status": "False"}]),
                )),
                Current,
                "current",
            ),
            case(
                "Stalled=True",
                cr(conditions(json!([{"type": "Stalled", "status": "True",
                    "reason": "ValidationFailed", "message": "spec.size must be positive"}]))),
                Failed,
                "stalled: spec.size must be positive",
            ),
            case(
                "Stalled=False is normal",
                cr(conditions(json!([{"type": "Stalled", "status": "False"},
                                     {"type": "Ready", "status": "True"}]))),
                Current,
                "ready",
            ),
            case(
                "the first of Stalled and Reconciling decides",
                cr(conditions(json!([
                    {"type": "Stalled", "status": "True", "reason": "Broken"},
                    {"type": "Reconciling", "status": "True", "reason": "Working"},
                ]))),
                Failed,
                "stalled: Broken",
            ),
            case(
                "Reconciling=True wins over Ready=True",
                cr(conditions(json!([
                    {"type": "Ready", "status": "True"},
                    {"type": "Reconciling", "status": "True", "reason": "Working"},
                ]))),
                InProgress,
                "reconciling: Working",
            ),
            case(
                "Stalled=True applies to built-in kinds too",
                object(
                    "apps/v1",
                    "Deployment",
                    conditions(json!([{"type": "Stalled", "status": "True", "reason": "Stuck"}])),
                ),
                Failed,
                "stalled: Stuck",
            ),
        ]);
    }

    #[test]
    fn generic_ready_condition() {
        check(vec![
            case(
                "Ready=True (crdReady)",
                cr(conditions(json!([{"type": "Ready", "status": "True",
                    "reason": "AllOk", "message": "All looks ok"}]))),
                Current,
                "ready",
            ),
            case(
                "Ready=False (crdNotReady): InProgress, not Failed",
                cr(json!({"status": {"observedGeneration": 1,
                    "conditions": [{"type": "Ready", "status": "False", "reason": "NotReadyYet"}]}})),
                InProgress,
                "not ready: NotReadyYet",
            ),
            case(
                "Ready=False with a message",
                cr(conditions(json!([{"type": "Ready", "status": "False",
                    "reason": "DependencyNotReady", "message": "waiting for db"}]))),
                InProgress,
                "not ready: waiting for db",
            ),
            case(
                "Ready=Unknown",
                cr(conditions(
                    json!([{"type": "Ready", "status": "Unknown", "reason": "Progressing"}]),
                )),
                InProgress,
                "readiness unknown: Progressing",
            ),
            case(
                "Ready with an unrecognised status is ignored",
                cr(conditions(json!([{"type": "Ready", "status": "Maybe"}]))),
                Current,
                "current",
            ),
            case(
                "a kind with its own rules ignores Ready (CronJob)",
                object(
                    "batch/v1",
                    "CronJob",
                    conditions(json!([{"type": "Ready", "status": "False"}])),
                ),
                Current,
                "exists",
            ),
        ]);
    }

    fn deployment(spec: Value, status: Value) -> Value {
        object(
            "apps/v1",
            "Deployment",
            json!({"spec": spec, "status": status}),
        )
    }

    /// The conditions of a Deployment whose rollout is done.
    fn rolled_out() -> Value {
        json!([
            {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"},
            {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
        ])
    }

    #[test]
    fn deployment_rules() {
        check(vec![
            case(
                "no status (depNoStatus)",
                object("apps/v1", "Deployment", json!({})),
                InProgress,
                "0 of 1 replicas created",
            ),
            case(
                "rolled out (depOK)",
                deployment(
                    json!({}),
                    json!({"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1,
                           "readyReplicas": 1, "availableReplicas": 1, "conditions": rolled_out()}),
                ),
                Current,
                "1 of 1 replicas available",
            ),
            case(
                "Progressing=False with a deadline (depNotProgressing)",
                deployment(
                    json!({"progressDeadlineSeconds": 45}),
                    json!({"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1,
                           "readyReplicas": 1, "availableReplicas": 1, "conditions": [
                               {"type": "Progressing", "status": "False", "reason": "Some reason"},
                               {"type": "Available", "status": "True"}]}),
                ),
                InProgress,
                "new ReplicaSet not yet available",
            ),
            case(
                "no progress deadline: Progressing not needed (depNoProgressDeadlineSeconds)",
                deployment(
                    json!({}),
                    json!({"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1,
                           "readyReplicas": 1, "availableReplicas": 1,
                           "conditions": [{"type": "Available", "status": "True"}]}),
                ),
                Current,
                "1 of 1 replicas available",
            ),
            case(
                "deadline of i32::MAX means none",
                deployment(
                    json!({"progressDeadlineSeconds": 2147483647}),
                    json!({"replicas": 1, "updatedReplicas": 1, "readyReplicas": 1,
                           "availableReplicas": 1,
                           "conditions": [{"type": "Available", "status": "True"}]}),
                ),
                Current,
                "1 of 1 replicas available",
            ),
            case(
                "Available=False (depNotAvailable)",
                deployment(
                    json!({}),
                    json!({"replicas": 1, "updatedReplicas": 1, "readyReplicas": 1,
                           "availableReplicas": 1, "conditions": [
                               {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"},
                               {"type": "Available", "status": "False"}]}),
                ),
                InProgress,
                "minimum availability not met",
            ),
            case(
                "progress deadline exceeded",
                deployment(
                    json!({"replicas": 2, "progressDeadlineSeconds": 600}),
                    json!({"replicas": 2, "updatedReplicas": 1, "availableReplicas": 1, "conditions": [
                        {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
                         "message": "ReplicaSet \"web-5d4f\" has timed out progressing."}]}),
                ),
                Failed,
                "progress deadline exceeded: ReplicaSet \"web-5d4f\" has timed out progressing.",
            ),
            case(
                "pods not yet created",
                deployment(json!({"replicas": 3}), json!({"replicas": 1})),
                InProgress,
                "1 of 3 replicas created",
            ),
            case(
                "rollout: not all replicas updated",
                deployment(
                    json!({"replicas": 3}),
                    json!({"replicas": 3, "updatedReplicas": 2}),
                ),
                InProgress,
                "2 of 3 replicas updated",
            ),
            case(
                "rollout: old replicas still terminating",
                deployment(
                    json!({"replicas": 3}),
                    json!({"replicas": 4, "updatedReplicas": 3}),
                ),
                InProgress,
                "1 old replicas pending termination",
            ),
            case(
                "the issue's example: 0 of 1 available",
                deployment(
                    json!({"replicas": 1}),
                    json!({"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1,
                           "unavailableReplicas": 1}),
                ),
                InProgress,
                "0 of 1 replicas available",
            ),
            case(
                "available but not ready",
                deployment(
                    json!({"replicas": 2}),
                    json!({"replicas": 2, "updatedReplicas": 2, "availableReplicas": 2,
                           "readyReplicas": 1}),
                ),
                InProgress,
                "1 of 2 replicas ready",
            ),
            case(
                "scaled to zero",
                deployment(json!({"replicas": 0}), json!({"conditions": rolled_out()})),
                Current,
                "0 of 0 replicas available",
            ),
            case(
                "paused mid-rollout: Current (kstatus: InProgress)",
                deployment(
                    json!({"replicas": 3, "paused": true, "progressDeadlineSeconds": 600}),
                    json!({"observedGeneration": 1, "replicas": 3, "updatedReplicas": 1,
                           "readyReplicas": 3, "availableReplicas": 3, "conditions": [
                               {"type": "Progressing", "status": "Unknown", "reason": "DeploymentPaused"},
                               {"type": "Available", "status": "True"}]}),
                ),
                Current,
                "paused, rollout on hold (3 of 3 replicas available)",
            ),
            case(
                "paused, its spec not yet observed",
                object(
                    "apps/v1",
                    "Deployment",
                    json!({"metadata": {"generation": 2}, "spec": {"paused": true},
                           "status": {"observedGeneration": 1}}),
                ),
                InProgress,
                "generation 2 not yet observed (observed 1)",
            ),
            case(
                "paused: false is not paused",
                deployment(json!({"paused": false}), json!({})),
                InProgress,
                "0 of 1 replicas created",
            ),
            case(
                "extensions/v1beta1 Deployment has the same rules",
                object("extensions/v1beta1", "Deployment", json!({})),
                InProgress,
                "0 of 1 replicas created",
            ),
        ]);
    }

    fn stateful_set(spec: Value, status: Value) -> Value {
        object(
            "apps/v1",
            "StatefulSet",
            json!({"spec": spec, "status": status}),
        )
    }

    #[test]
    fn stateful_set_rules() {
        check(vec![
            case(
                "no status (stsNoStatus)",
                object("apps/v1", "StatefulSet", json!({})),
                InProgress,
                "0 of 1 replicas created",
            ),
            case(
                "only currentReplicas (stsBadStatus)",
                stateful_set(
                    json!({}),
                    json!({"observedGeneration": 1, "currentReplicas": 1}),
                ),
                InProgress,
                "0 of 1 replicas created",
            ),
            case(
                "all ready (stsOK)",
                stateful_set(
                    json!({"replicas": 4}),
                    json!({"observedGeneration": 1, "currentReplicas": 4, "readyReplicas": 4,
                           "replicas": 4}),
                ),
                Current,
                "4 of 4 replicas ready",
            ),
            case(
                "fewer ready (stsLessReady)",
                stateful_set(
                    json!({"replicas": 4}),
                    json!({"currentReplicas": 4, "readyReplicas": 2, "replicas": 4}),
                ),
                InProgress,
                "2 of 4 replicas ready",
            ),
            case(
                "fewer current (stsLessCurrent)",
                stateful_set(
                    json!({"replicas": 4}),
                    json!({"currentReplicas": 2, "readyReplicas": 4, "replicas": 4}),
                ),
                InProgress,
                "2 of 4 replicas at the current revision",
            ),
            case(
                "extra pods (stsExtraPods)",
                stateful_set(
                    json!({"replicas": 4}),
                    json!({"currentReplicas": 4, "readyReplicas": 4, "replicas": 8}),
                ),
                InProgress,
                "4 extra replicas pending termination",
            ),
            case(
                "revision rolling out",
                stateful_set(
                    json!({"replicas": 2}),
                    json!({"currentReplicas": 2, "readyReplicas": 2, "replicas": 2,
                           "currentRevision": "db-1", "updateRevision": "db-2"}),
                ),
                InProgress,
                "rolling out revision db-2",
            ),
            case(
                "revisions equal",
                stateful_set(
                    json!({"replicas": 2}),
                    json!({"currentReplicas": 2, "readyReplicas": 2, "replicas": 2,
                           "currentRevision": "db-2", "updateRevision": "db-2"}),
                ),
                Current,
                "2 of 2 replicas ready",
            ),
            case(
                "OnDelete: Current whatever the counts",
                stateful_set(
                    json!({"replicas": 3, "updateStrategy": {"type": "OnDelete"}}),
                    json!({}),
                ),
                Current,
                "OnDelete update strategy: pods are updated when deleted",
            ),
            case(
                "partitioned rollout in progress",
                stateful_set(
                    json!({"replicas": 4, "updateStrategy": {"type": "RollingUpdate",
                           "rollingUpdate": {"partition": 2}}}),
                    json!({"replicas": 4, "readyReplicas": 4, "currentReplicas": 3,
                           "updatedReplicas": 1}),
                ),
                InProgress,
                "1 of 2 replicas updated (partition 2)",
            ),
            case(
                "partitioned rollout complete: pods below the partition stay old",
                stateful_set(
                    json!({"replicas": 4, "updateStrategy": {"type": "RollingUpdate",
                           "rollingUpdate": {"partition": 2}}}),
                    json!({"replicas": 4, "readyReplicas": 4, "currentReplicas": 2,
                           "updatedReplicas": 2, "currentRevision": "db-1", "updateRevision": "db-2"}),
                ),
                Current,
                "partitioned rollout complete: 2 replicas updated (partition 2)",
            ),
            case(
                "partition 0 (the API server's default) waits for every replica",
                stateful_set(
                    json!({"replicas": 4, "updateStrategy": {"type": "RollingUpdate",
                           "rollingUpdate": {"partition": 0}}}),
                    json!({"replicas": 4, "readyReplicas": 4, "updatedReplicas": 3}),
                ),
                InProgress,
                "3 of 4 replicas updated (partition 0)",
            ),
            case(
                "partition above replicas: nothing to update",
                stateful_set(
                    json!({"replicas": 2, "updateStrategy": {"rollingUpdate": {"partition": 5}}}),
                    json!({"replicas": 2, "readyReplicas": 2}),
                ),
                Current,
                "partitioned rollout complete: 0 replicas updated (partition 5)",
            ),
            case(
                "partitioned, but not all ready",
                stateful_set(
                    json!({"replicas": 4, "updateStrategy": {"rollingUpdate": {"partition": 2}}}),
                    json!({"replicas": 4, "readyReplicas": 3, "updatedReplicas": 2}),
                ),
                InProgress,
                "3 of 4 replicas ready",
            ),
        ]);
    }

    fn daemon_set(status: Value) -> Value {
        object("apps/v1", "DaemonSet", json!({"status": status}))
    }

    #[test]
    fn daemon_set_rules() {
        check(vec![
            case(
                "no status (dsNoStatus)",
                object("apps/v1", "DaemonSet", json!({})),
                InProgress,
                "not yet observed by its controller",
            ),
            case(
                "no generation",
                object(
                    "apps/v1",
                    "DaemonSet",
                    json!({"metadata": {"generation": null}}),
                ),
                InProgress,
                "no metadata.generation yet",
            ),
            case(
                "no desiredNumberScheduled (dsBadStatus)",
                daemon_set(json!({"observedGeneration": 1, "currentReplicas": 1})),
                InProgress,
                "desired number of pods not yet computed",
            ),
            case(
                "all scheduled and ready (dsOK)",
                daemon_set(json!({"observedGeneration": 1, "desiredNumberScheduled": 4,
                    "currentNumberScheduled": 4, "updatedNumberScheduled": 4,
                    "numberAvailable": 4, "numberReady": 4})),
                Current,
                "4 of 4 pods ready",
            ),
            case(
                "generation behind (dsDifferentGeneration)",
                object(
                    "apps/v1",
                    "DaemonSet",
                    json!({"metadata": {"generation": 2}, "status": {"observedGeneration": 1,
                        "desiredNumberScheduled": 4, "currentNumberScheduled": 4,
                        "updatedNumberScheduled": 4, "numberAvailable": 4, "numberReady": 4}}),
                ),
                InProgress,
                "generation 2 not yet observed (observed 1)",
            ),
            case(
                "fewer scheduled",
                daemon_set(json!({"observedGeneration": 1, "desiredNumberScheduled": 4,
                    "currentNumberScheduled": 3})),
                InProgress,
                "3 of 4 pods scheduled",
            ),
            case(
                "fewer updated",
                daemon_set(json!({"observedGeneration": 1, "desiredNumberScheduled": 4,
                    "currentNumberScheduled": 4, "updatedNumberScheduled": 1})),
                InProgress,
                "1 of 4 pods updated",
            ),
            case(
                "fewer available (dsLessAvailable)",
                daemon_set(json!({"observedGeneration": 1, "desiredNumberScheduled": 4,
                    "currentNumberScheduled": 4, "updatedNumberScheduled": 4,
                    "numberAvailable": 2, "numberReady": 4})),
                InProgress,
                "2 of 4 pods available",
            ),
            case(
                "fewer ready (dsLessReady)",
                daemon_set(json!({"observedGeneration": 1, "desiredNumberScheduled": 4,
                    "currentNumberScheduled": 4, "updatedNumberScheduled": 4,
                    "numberAvailable": 4, "numberReady": 2})),
                InProgress,
                "2 of 4 pods ready",
            ),
            case(
                "no nodes to run on",
                daemon_set(json!({"observedGeneration": 1, "desiredNumberScheduled": 0})),
                Current,
                "0 of 0 pods ready",
            ),
        ]);
    }

    fn replica_set(status: Value) -> Value {
        object(
            "apps/v1",
            "ReplicaSet",
            json!({"spec": {"replicas": 4}, "status": status}),
        )
    }

    #[test]
    fn replica_set_rules() {
        check(vec![
            case(
                "no status (rsNoStatus)",
                object("apps/v1", "ReplicaSet", json!({})),
                InProgress,
                "0 of 1 replicas labeled",
            ),
            case(
                "ReplicaFailure=False is fine (rsOK1)",
                replica_set(
                    json!({"replicas": 4, "readyReplicas": 4, "availableReplicas": 4,
                    "fullyLabeledReplicas": 4,
                    "conditions": [{"type": "ReplicaFailure", "status": "False"}]}),
                ),
                Current,
                "4 of 4 replicas available",
            ),
            case(
                "all available (rsOK2)",
                replica_set(
                    json!({"replicas": 4, "readyReplicas": 4, "availableReplicas": 4,
                    "fullyLabeledReplicas": 4}),
                ),
                Current,
                "4 of 4 replicas available",
            ),
            case(
                "fewer available (rsLessAvailable)",
                replica_set(
                    json!({"replicas": 4, "readyReplicas": 4, "availableReplicas": 2,
                    "fullyLabeledReplicas": 4}),
                ),
                InProgress,
                "2 of 4 replicas available",
            ),
            case(
                "fewer ready (rsLessReady)",
                replica_set(
                    json!({"replicas": 4, "readyReplicas": 2, "availableReplicas": 4,
                    "fullyLabeledReplicas": 4}),
                ),
                InProgress,
                "2 of 4 replicas ready",
            ),
            case(
                "ReplicaFailure=True: InProgress, the controller retries (rsReplicaFailure)",
                replica_set(
                    json!({"replicas": 4, "readyReplicas": 4, "availableReplicas": 4,
                    "fullyLabeledReplicas": 4, "conditions": [{"type": "ReplicaFailure",
                    "status": "True", "reason": "FailedCreate",
                    "message": "pods \"web-1\" is forbidden: exceeded quota"}]}),
                ),
                InProgress,
                "replica failure: pods \"web-1\" is forbidden: exceeded quota",
            ),
            case(
                "extra replicas",
                replica_set(
                    json!({"replicas": 5, "readyReplicas": 4, "availableReplicas": 4,
                    "fullyLabeledReplicas": 4}),
                ),
                InProgress,
                "1 extra replicas pending termination",
            ),
        ]);
    }

    fn job(spec: Value, status: Value) -> Value {
        object("batch/v1", "Job", json!({"spec": spec, "status": status}))
    }

    #[test]
    fn job_rules() {
        check(vec![
            case(
                "no status (jobNoStatus)",
                object("batch/v1", "Job", json!({})),
                InProgress,
                "not started",
            ),
            case(
                "complete (jobComplete)",
                job(
                    json!({}),
                    json!({"succeeded": 1, "active": 0,
                    "conditions": [{"type": "Complete", "status": "True"}]}),
                ),
                Current,
                "complete: 1 of 1 succeeded",
            ),
            case(
                "failed (jobFailed)",
                job(
                    json!({"completions": 4}),
                    json!({"succeeded": 3, "failed": 1,
                    "conditions": [{"type": "Failed", "status": "True", "reason": "JobFailed"}]}),
                ),
                Failed,
                "failed: JobFailed",
            ),
            case(
                "backoff limit exceeded",
                job(
                    json!({"backoffLimit": 2}),
                    json!({"failed": 3, "conditions": [
                    {"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded"},
                    {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                     "message": "Job has reached the specified backoff limit"}]}),
                ),
                Failed,
                "failed: BackoffLimitExceeded (Job has reached the specified backoff limit)",
            ),
            case(
                "Failed=True without a reason",
                job(
                    json!({}),
                    json!({"conditions": [{"type": "Failed", "status": "True"}]}),
                ),
                Failed,
                "failed: JobFailed",
            ),
            case(
                "running: InProgress (kstatus: Current) (jobInProgress)",
                job(
                    json!({"completions": 10, "parallelism": 2}),
                    json!({
                    "startTime": "2019-06-04T01:17:13Z", "succeeded": 3, "failed": 1, "active": 2,
                    "conditions": [{"type": "Failed", "status": "False"},
                                   {"type": "Complete", "status": "False"}]}),
                ),
                InProgress,
                "running: 3 of 10 succeeded, 2 active, 1 failed",
            ),
            case(
                "completions default to parallelism",
                job(
                    json!({"parallelism": 3}),
                    json!({"startTime": "2025-01-01T11:00:00Z", "active": 3}),
                ),
                InProgress,
                "running: 0 of 3 succeeded, 3 active, 0 failed",
            ),
            case(
                "suspended on purpose (TestSuspendedJobConditions)",
                job(
                    json!({"suspend": true}),
                    json!({"conditions": [{"type": "Suspended", "status": "True"}]}),
                ),
                Current,
                "suspended",
            ),
            case(
                "resumed, not yet started (TestPreviouslySuspendedJobConditions)",
                job(
                    json!({"suspend": false}),
                    json!({"conditions": [{"type": "Suspended", "status": "False"}]}),
                ),
                InProgress,
                "not started",
            ),
            case(
                "on its way into suspension (TestSuspendedJobTransitionConditions)",
                job(
                    json!({"suspend": true}),
                    json!({"conditions": [{"type": "Suspended", "status": "False"}]}),
                ),
                InProgress,
                "not started",
            ),
            case(
                "on its way out of suspension (TestSuspendedJobTransitionConditions)",
                job(
                    json!({"suspend": false}),
                    json!({"conditions": [{"type": "Suspended", "status": "True"}]}),
                ),
                InProgress,
                "not started",
            ),
        ]);
    }

    fn pod(extra: Value) -> Value {
        object("v1", "Pod", extra)
    }

    #[test]
    fn pod_rules() {
        let unschedulable = json!([{"type": "PodScheduled", "status": "False",
            "reason": "Unschedulable", "message": "0/3 nodes are available"}]);
        check(vec![
            case(
                "no status (podNoStatus)",
                pod(json!({})),
                InProgress,
                "not yet observed by the kubelet",
            ),
            case(
                "running and ready (podReady)",
                pod(json!({"status": {"phase": "Running",
                    "conditions": [{"type": "Ready", "status": "True"}]}})),
                Current,
                "ready",
            ),
            case(
                "succeeded (podCompletedOK)",
                pod(json!({"status": {"phase": "Succeeded", "conditions": [
                    {"type": "Ready", "status": "False", "reason": "PodCompleted"}]}})),
                Current,
                "completed",
            ),
            case(
                "failed: Failed (kstatus: Current) (podCompletedFail)",
                pod(json!({"status": {"phase": "Failed", "conditions": [
                    {"type": "Ready", "status": "False", "reason": "PodCompleted"}]}})),
                Failed,
                "failed",
            ),
            case(
                "failed, evicted",
                pod(json!({"status": {"phase": "Failed", "reason": "Evicted",
                    "message": "The node was low on resource: memory."}})),
                Failed,
                "failed: The node was low on resource: memory.",
            ),
            case(
                "unschedulable for less than 15s (podBeingScheduled)",
                pod(
                    json!({"metadata": {"creationTimestamp": "2025-01-01T11:59:50Z"},
                    "status": {"phase": "Pending", "conditions": unschedulable}}),
                ),
                InProgress,
                "not yet scheduled",
            ),
            case(
                "unschedulable for longer",
                pod(
                    json!({"metadata": {"creationTimestamp": "2025-01-01T11:59:00Z"},
                    "status": {"phase": "Pending", "conditions": unschedulable}}),
                ),
                Failed,
                "unschedulable: 0/3 nodes are available",
            ),
            case(
                "unschedulable, no creation time (podUnschedulable)",
                pod(json!({"status": {"phase": "Pending", "conditions": unschedulable}})),
                Failed,
                "unschedulable: 0/3 nodes are available",
            ),
            case(
                "pending, scheduled",
                pod(json!({"status": {"phase": "Pending",
                    "conditions": [{"type": "PodScheduled", "status": "True"}]}})),
                InProgress,
                "pending",
            ),
            case(
                "crash looping (podCrashLooping)",
                pod(json!({"status": {"phase": "Running",
                    "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
                    "containerStatuses": [{"name": "nginx",
                        "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}})),
                Failed,
                "failing: nginx (CrashLoopBackOff)",
            ),
            case(
                "running, not ready, containers starting",
                pod(json!({"status": {"phase": "Running",
                    "conditions": [{"type": "Ready", "status": "False"}],
                    "containerStatuses": [{"name": "app", "state": {"running": {}}},
                        {"name": "sidecar", "state": {"waiting": {"reason": "ContainerCreating"}}}]}})),
                InProgress,
                "running, not ready",
            ),
            case(
                "ready wins over a crash-looping container",
                pod(json!({"status": {"phase": "Running",
                    "conditions": [{"type": "Ready", "status": "True"}],
                    "containerStatuses": [{"name": "a",
                        "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}})),
                Current,
                "ready",
            ),
            case(
                "image pull back-off while pending (kstatus: InProgress)",
                pod(json!({"status": {"phase": "Pending",
                    "containerStatuses": [{"name": "app",
                        "state": {"waiting": {"reason": "ImagePullBackOff",
                            "message": "Back-off pulling image \"nope:1\""}}}]}})),
                Failed,
                "failing: app (ImagePullBackOff)",
            ),
            case(
                "first failed pull is not yet a failure",
                pod(json!({"status": {"phase": "Pending",
                    "containerStatuses": [{"name": "app",
                        "state": {"waiting": {"reason": "ErrImagePull"}}}]}})),
                InProgress,
                "pending",
            ),
            case(
                "init container crash looping, several failing",
                pod(json!({"status": {"phase": "Pending",
                    "initContainerStatuses": [{"name": "migrate",
                        "state": {"waiting": {"reason": "CrashLoopBackOff"}}}],
                    "containerStatuses": [{"name": "app",
                        "state": {"waiting": {"reason": "CreateContainerConfigError"}}}]}})),
                Failed,
                "failing: migrate (CrashLoopBackOff), app (CreateContainerConfigError)",
            ),
            case(
                "unknown phase",
                pod(json!({"status": {"phase": "Unknown"}})),
                Unknown,
                "cannot assess: unknown Pod phase \"Unknown\"",
            ),
        ]);
    }

    #[test]
    fn persistent_volume_claim_rules() {
        let pvc = |extra| object("v1", "PersistentVolumeClaim", extra);
        check(vec![
            case(
                "no status (pvcNoStatus)",
                pvc(json!({})),
                InProgress,
                "not bound",
            ),
            case(
                "bound (pvcBound)",
                pvc(json!({"status": {"phase": "Bound"}})),
                Current,
                "bound",
            ),
            case(
                "pending",
                pvc(json!({"status": {"phase": "Pending"}})),
                InProgress,
                "not bound (phase Pending)",
            ),
            case(
                "lost",
                pvc(json!({"status": {"phase": "Lost"}})),
                InProgress,
                "not bound (phase Lost)",
            ),
        ]);
    }

    #[test]
    fn service_rules() {
        let service = |extra| object("v1", "Service", extra);
        check(vec![
            case(
                "default type (serviceDefault)",
                service(json!({})),
                Current,
                "exists",
            ),
            case(
                "NodePort (serviceNodePort)",
                service(json!({"spec": {"type": "NodePort"}})),
                Current,
                "exists",
            ),
            case(
                "LoadBalancer without cluster IP (serviceLBnok)",
                service(json!({"spec": {"type": "LoadBalancer"}})),
                InProgress,
                "load balancer not yet provisioned",
            ),
            case(
                "LoadBalancer with a cluster IP only: InProgress (kstatus: Current) (serviceLBok)",
                service(json!({"spec": {"type": "LoadBalancer", "clusterIP": "1.2.3.4"}})),
                InProgress,
                "load balancer not yet provisioned",
            ),
            case(
                "LoadBalancer with an empty ingress list",
                service(json!({"spec": {"type": "LoadBalancer"},
                    "status": {"loadBalancer": {"ingress": []}}})),
                InProgress,
                "load balancer not yet provisioned",
            ),
            case(
                "LoadBalancer with an address",
                service(
                    json!({"spec": {"type": "LoadBalancer", "clusterIP": "10.0.0.7"},
                    "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.9"}]}}}),
                ),
                Current,
                "load balancer provisioned",
            ),
        ]);
    }

    #[test]
    fn pod_disruption_budget_rules() {
        check(vec![
            case(
                "generation not observed (pdbNotObserved)",
                object(
                    "policy/v1",
                    "PodDisruptionBudget",
                    json!({"metadata": {"generation": 2}, "status": {"observedGeneration": 1}}),
                ),
                InProgress,
                "generation 2 not yet observed (observed 1)",
            ),
            case(
                "generation observed (pdbObserved)",
                object(
                    "policy/v1",
                    "PodDisruptionBudget",
                    json!({"status": {"observedGeneration": 1, "disruptionsAllowed": 0}}),
                ),
                Current,
                "allowed disruptions computed",
            ),
        ]);
    }

    #[test]
    fn custom_resource_definition_rules() {
        let crd = |list| {
            object(
                "apiextensions.k8s.io/v1",
                "CustomResourceDefinition",
                conditions(list),
            )
        };
        check(vec![
            case(
                "no conditions (crdNoConditions)",
                object(
                    "apiextensions.k8s.io/v1",
                    "CustomResourceDefinition",
                    json!({}),
                ),
                InProgress,
                "installing",
            ),
            case(
                "installing (crdInstalling)",
                crd(
                    json!([{"type": "NamesAccepted", "status": "True", "reason": "NoConflicts"},
                           {"type": "Established", "status": "False", "reason": "Installing"}]),
                ),
                InProgress,
                "installing",
            ),
            case(
                "names not accepted (crdNamesNotAccepted)",
                crd(json!([{"type": "NamesAccepted", "status": "False", "reason": "SomeReason"}])),
                Failed,
                "names not accepted: SomeReason",
            ),
            case(
                "names conflict, with a message",
                crd(
                    json!([{"type": "NamesAccepted", "status": "False", "reason": "MultipleNameConflict",
                    "message": "\"widgets\" is already in use"},
                           {"type": "Established", "status": "False", "reason": "NotAccepted"}]),
                ),
                Failed,
                "names not accepted: \"widgets\" is already in use",
            ),
            case(
                "not established for another reason",
                crd(json!([{"type": "Established", "status": "False", "reason": "NotAccepted"}])),
                Failed,
                "not established: NotAccepted",
            ),
            case(
                "established (crdEstablished)",
                crd(
                    json!([{"type": "NamesAccepted", "status": "True", "reason": "NoConflicts"},
                           {"type": "Established", "status": "True", "reason": "InitialNamesAccepted"}]),
                ),
                Current,
                "established",
            ),
        ]);
    }

    #[test]
    fn namespace_rules() {
        let ns = |extra| object("v1", "Namespace", extra);
        check(vec![
            case(
                "active",
                ns(json!({"status": {"phase": "Active"}})),
                Current,
                "active",
            ),
            case("no status yet", ns(json!({})), Current, "active"),
            case(
                "being deleted",
                ns(
                    json!({"metadata": {"deletionTimestamp": "2025-01-01T11:00:00Z"},
                    "status": {"phase": "Terminating"}}),
                ),
                Terminating,
                "being deleted",
            ),
            case(
                "phase Terminating",
                ns(json!({"status": {"phase": "Terminating"}})),
                Terminating,
                "being deleted",
            ),
        ]);
    }

    #[test]
    fn kinds_current_once_they_exist() {
        check(vec![
            case(
                "ConfigMap",
                object("v1", "ConfigMap", json!({"data": {"a": "b"}})),
                Current,
                "exists",
            ),
            case(
                "Secret",
                object("v1", "Secret", json!({})),
                Current,
                "exists",
            ),
            case(
                "CronJob without status (cronjobNoStatus)",
                object("batch/v1", "CronJob", json!({})),
                Current,
                "exists",
            ),
            case(
                "CronJob with a null status (cronjobWithStatus)",
                object("batch/v1", "CronJob", json!({"status": null})),
                Current,
                "exists",
            ),
            case(
                "a ConfigMap named like a kind of another group is generic",
                object(
                    "example.com/v1",
                    "ConfigMap",
                    conditions(json!([{"type": "Ready", "status": "False"}])),
                ),
                InProgress,
                "not ready",
            ),
        ]);
    }

    #[test]
    fn malformed_input_is_unknown_with_the_field_named() {
        check(vec![
            case(
                "an array",
                json!([1, 2]),
                Unknown,
                "cannot assess: the object is not a JSON object",
            ),
            case(
                "a string",
                json!("Deployment"),
                Unknown,
                "cannot assess: the object is not a JSON object",
            ),
            case(
                "kind not a string",
                json!({"apiVersion": "v1", "kind": 7}),
                Unknown,
                "cannot assess: kind is not a string",
            ),
            case(
                "metadata not an object",
                json!({"apiVersion": "v1", "kind": "Pod", "metadata": "x"}),
                Unknown,
                "cannot assess: metadata is not an object",
            ),
            case(
                "generation a string",
                cr(json!({"metadata": {"generation": "1"}})),
                Unknown,
                "cannot assess: metadata.generation is not an integer",
            ),
            case(
                "deletionTimestamp a number",
                cr(json!({"metadata": {"deletionTimestamp": 5}})),
                Unknown,
                "cannot assess: metadata.deletionTimestamp is not a string",
            ),
            case(
                "status a string",
                cr(json!({"status": "fine"})),
                Unknown,
                "cannot assess: status is not an object",
            ),
            case(
                "observedGeneration a float",
                cr(json!({"status": {"observedGeneration": 1.5}})),
                Unknown,
                "cannot assess: status.observedGeneration is not an integer",
            ),
            case(
                "conditions an object",
                cr(json!({"status": {"conditions": {"type": "Ready"}}})),
                Unknown,
                "cannot assess: status.conditions is not a list",
            ),
            case(
                "a condition not an object",
                cr(conditions(json!(["Ready"]))),
                Unknown,
                "cannot assess: status.conditions holds a non-object",
            ),
            case(
                "a condition's status a boolean",
                cr(conditions(json!([{"type": "Ready", "status": true}]))),
                Unknown,
                "cannot assess: a condition's status is not a string",
            ),
            case(
                "replicas a string",
                deployment(json!({"replicas": "3"}), json!({})),
                Unknown,
                "cannot assess: spec.replicas is not an integer",
            ),
            case(
                "negative replicas",
                deployment(json!({}), json!({"replicas": -2})),
                Unknown,
                "cannot assess: status.replicas is negative",
            ),
            case(
                "paused not a boolean",
                deployment(json!({"paused": "yes"}), json!({})),
                Unknown,
                "cannot assess: spec.paused is not a boolean",
            ),
            case(
                "negative partition",
                stateful_set(
                    json!({"replicas": 1, "updateStrategy": {"rollingUpdate": {"partition": -1}}}),
                    json!({"replicas": 1, "readyReplicas": 1}),
                ),
                Unknown,
                "cannot assess: spec.updateStrategy.rollingUpdate.partition is negative",
            ),
            case(
                "container status not an object",
                pod(json!({"status": {"phase": "Running", "containerStatuses": [3]}})),
                Unknown,
                "cannot assess: status.containerStatuses holds a non-object",
            ),
            case(
                "waiting state a string",
                pod(json!({"status": {"phase": "Pending",
                    "containerStatuses": [{"name": "a", "state": {"waiting": "CrashLoopBackOff"}}]}})),
                Unknown,
                "cannot assess: status.containerStatuses[].state.waiting is not an object",
            ),
            case(
                "phase a number",
                pod(json!({"status": {"phase": 1}})),
                Unknown,
                "cannot assess: status.phase is not a string",
            ),
            case(
                "ingress not a list",
                object(
                    "v1",
                    "Service",
                    json!({"spec": {"type": "LoadBalancer"},
                    "status": {"loadBalancer": {"ingress": "1.2.3.4"}}}),
                ),
                Unknown,
                "cannot assess: status.loadBalancer.ingress is not a list",
            ),
        ]);
    }

    /// Every kind with rules, fed junk in every field the rules read: no panic, and a health
    /// with a message.
    #[test]
    fn junk_never_panics() {
        let kinds = [
            ("apps/v1", "Deployment"),
            ("apps/v1", "StatefulSet"),
            ("apps/v1", "DaemonSet"),
            ("apps/v1", "ReplicaSet"),
            ("batch/v1", "Job"),
            ("batch/v1", "CronJob"),
            ("v1", "Pod"),
            ("v1", "PersistentVolumeClaim"),
            ("v1", "Service"),
            ("v1", "Namespace"),
            ("v1", "ConfigMap"),
            ("policy/v1", "PodDisruptionBudget"),
            ("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
            ("example.com/v1", "Widget"),
        ];
        let junk = [
            json!(null),
            json!(true),
            json!(-1),
            json!(i64::MIN),
            json!(u64::MAX),
            json!(1e300),
            json!("x"),
            json!([]),
            json!([null, 1, "a", {}]),
            json!({}),
            json!({"a": {"b": []}}),
        ];
        let fields = [
            &["spec"][..],
            &["status"],
            &["metadata"],
            &["spec", "replicas"],
            &["spec", "paused"],
            &["spec", "type"],
            &["spec", "updateStrategy"],
            &["spec", "updateStrategy", "rollingUpdate", "partition"],
            &["spec", "progressDeadlineSeconds"],
            &["status", "replicas"],
            &["status", "phase"],
            &["status", "conditions"],
            &["status", "containerStatuses"],
            &["status", "loadBalancer"],
            &["status", "observedGeneration"],
            &["status", "desiredNumberScheduled"],
            &["status", "startTime"],
            &["metadata", "generation"],
            &["metadata", "creationTimestamp"],
        ];
        for (api_version, kind) in kinds {
            for field in fields {
                for value in &junk {
                    let mut extra = value.clone();
                    for step in field.iter().rev() {
                        extra = json!({ *step: extra });
                    }
                    let o = object(api_version, kind, extra);
                    let h = assess(&o, now());
                    assert!(
                        !h.message.is_empty(),
                        "{kind} {field:?}={value}: empty message"
                    );
                }
            }
        }
    }

    #[test]
    fn dynamic_objects_are_assessed_like_their_json() {
        let objects = [
            deployment(
                json!({"replicas": 1}),
                json!({"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1}),
            ),
            deployment(
                json!({}),
                json!({"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1,
                "readyReplicas": 1, "availableReplicas": 1, "conditions": rolled_out()}),
            ),
            cr(json!({"metadata": {"generation": 2}, "status": {"observedGeneration": 1}})),
            cr(json!({"metadata": {"deletionTimestamp": "2025-01-01T11:59:00Z"}})),
            pod(
                json!({"metadata": {"creationTimestamp": "2025-01-01T11:59:50Z"},
                "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled",
                    "status": "False", "reason": "Unschedulable"}]}}),
            ),
            object("apps/v1", "DaemonSet", json!({})),
            cr(json!({"status": {"conditions": "bad"}})),
        ];
        for o in objects {
            let mut dynamic: DynamicObject = serde_json::from_value(o.clone()).unwrap();
            let (api_version, kind) = (
                o["apiVersion"].as_str().unwrap(),
                o["kind"].as_str().unwrap(),
            );
            let group = group_of(api_version);
            assert_eq!(
                assess_dynamic(&dynamic, group, kind, now()),
                assess(&o, now()),
                "{o}"
            );
            // As a LIST's item: without apiVersion and kind, the caller's kind decides.
            dynamic.types = None;
            assert_eq!(
                assess_dynamic(&dynamic, group, kind, now()),
                assess(&o, now()),
                "{o}"
            );
        }
    }

    #[test]
    fn not_found_is_its_own_status() {
        let h = Health::not_found();
        assert_eq!(h.status, NotFound);
        assert!(!h.is_current());
        assert!(Health::new(Current, "ready").is_current());
        let names: Vec<&str> = Status::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(
            names,
            [
                "Current",
                "InProgress",
                "Failed",
                "Terminating",
                "NotFound",
                "Unknown"
            ]
        );
        assert_eq!(InProgress.to_string(), "InProgress");
    }

    #[test]
    fn summary_counts_and_lists_the_most_urgent_first() {
        let healths = [
            ("ConfigMap demo/a", Health::new(Current, "exists")),
            (
                "Deployment demo/web",
                Health::new(InProgress, "0 of 1 replicas available"),
            ),
            (
                "Job demo/migrate",
                Health::new(Failed, "failed: BackoffLimitExceeded"),
            ),
            ("Service demo/web", Health::new(Current, "exists")),
            (
                "Widget demo/w",
                Health::new(Unknown, "cannot assess: status is not an object"),
            ),
            (
                "StatefulSet demo/db",
                Health::new(InProgress, "1 of 3 replicas ready"),
            ),
            ("Secret demo/s", Health::not_found()),
            ("Pod demo/p", Health::new(Terminating, "being deleted")),
        ];
        let s = summarize(healths.iter().map(|(o, h)| (*o, h)), 10);
        assert_eq!(
            (
                s.current,
                s.in_progress,
                s.failed,
                s.terminating,
                s.not_found,
                s.unknown
            ),
            (2, 2, 1, 1, 1, 1)
        );
        assert_eq!(s.total(), 8);
        assert_eq!(s.not_current_count(), 6);
        let listed: Vec<String> = s.not_current.iter().map(ToString::to_string).collect();
        assert_eq!(
            listed,
            [
                "Job demo/migrate: failed: BackoffLimitExceeded",
                "Widget demo/w: cannot assess: status is not an object",
                "Secret demo/s: not found",
                "Pod demo/p: being deleted",
                "Deployment demo/web: 0 of 1 replicas available",
                "StatefulSet demo/db: 1 of 3 replicas ready",
            ]
        );
        assert_eq!(s.status(), Failed);
    }

    #[test]
    fn summary_keeps_only_the_first_few() {
        let healths: Vec<(String, Health)> = (0..50)
            .map(|i| {
                let status = if i == 40 { Failed } else { InProgress };
                (
                    format!("Deployment demo/d{i}"),
                    Health::new(status, format!("m{i}")),
                )
            })
            .collect();
        let s = summarize(healths.iter().map(|(o, h)| (o.as_str(), h)), 3);
        assert_eq!(s.in_progress, 49);
        assert_eq!(s.failed, 1);
        let objects: Vec<&str> = s.not_current.iter().map(|e| e.object.as_str()).collect();
        assert_eq!(
            objects,
            [
                "Deployment demo/d40",
                "Deployment demo/d0",
                "Deployment demo/d1"
            ]
        );
        assert_eq!(
            s.message(),
            "50 of 50 not current (1 failed, 49 in progress): Deployment demo/d40: m40; \
             Deployment demo/d0: m0; Deployment demo/d1: m1; and 47 more"
        );
        assert!(
            summarize(healths.iter().map(|(o, h)| (o.as_str(), h)), 0)
                .not_current
                .is_empty()
        );
    }

    #[test]
    fn summary_status_aggregates_like_kstatus() {
        let of = |statuses: &[Status]| {
            let healths: Vec<Health> = statuses.iter().map(|s| Health::new(*s, "m")).collect();
            summarize(healths.iter().map(|h| ("x", h)), 5).status()
        };
        assert_eq!(of(&[]), Current, "nothing to wait for");
        assert_eq!(of(&[Current, Current]), Current);
        assert_eq!(of(&[Current, InProgress]), InProgress);
        assert_eq!(of(&[Current, Terminating]), InProgress);
        assert_eq!(of(&[Current, NotFound]), InProgress);
        assert_eq!(of(&[InProgress, Unknown]), Unknown);
        assert_eq!(of(&[Unknown, Failed, InProgress]), Failed);
    }

    #[test]
    fn summary_message_when_all_current() {
        let healths = [
            Health::new(Current, "ready"),
            Health::new(Current, "exists"),
        ];
        let s = summarize(healths.iter().map(|h| ("x", h)), 5);
        assert_eq!(s.message(), "2 of 2 current");
        assert_eq!(summarize(std::iter::empty(), 5).message(), "0 of 0 current");
    }
}

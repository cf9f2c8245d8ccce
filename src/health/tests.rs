//! Tests of the generic rules, of kinds without a file of their own, of malformed input and
//! of summaries; and the helpers every test of the health rules uses.

use super::*;
use super::{
    apps::tests::{deployment, rolled_out, stateful_set},
    core_group::tests::pod,
};
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
pub(super) fn now() -> Timestamp {
    "2025-01-01T12:00:00Z".parse().unwrap()
}

/// Merges `extra` into `base`, objects key by key, anything else replaced.
pub(super) fn merge(base: &mut Value, extra: Value) {
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
pub(super) fn object(api_version: &str, kind: &str, extra: Value) -> Value {
    let mut o = json!({
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": "test", "namespace": "qual", "generation": 1},
    });
    merge(&mut o, extra);
    o
}

/// One named case of a table: the object and the health it must have.
pub(super) struct Case {
    name: &'static str,
    object: Value,
    status: Status,
    message: &'static str,
}

pub(super) fn case(
    name: &'static str,
    object: Value,
    status: Status,
    message: &'static str,
) -> Case {
    Case {
        name,
        object,
        status,
        message,
    }
}

/// Checks every case, and reports all the failing ones by name.
pub(super) fn check(cases: Vec<Case>) {
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

pub(super) fn cr(extra: Value) -> Value {
    object("example.com/v1", "Widget", extra)
}

pub(super) fn conditions(list: Value) -> Value {
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
    ]);
}

#[test]
fn malformed_workload_fields_are_unknown_with_the_field_named() {
    check(vec![
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

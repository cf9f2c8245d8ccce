//! Health rules of core kinds: Pod (and its failing containers), PersistentVolumeClaim,
//! Service, Namespace (kstatus's core.go), with their tests.

use super::*;

impl<'a> Object<'a> {
    /// Pod (core.go, `podConditions`), by phase.
    pub(super) fn pod(&self, conditions: &[Condition<'_>], now: Timestamp) -> Rule<Health> {
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
    pub(super) fn failing_containers(&self) -> Rule<Option<String>> {
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
    pub(super) fn persistent_volume_claim(&self) -> Rule<Health> {
        match self.text(&["status", "phase"])? {
            "Bound" => Ok(Health::current("bound")),
            "" => Ok(Health::in_progress("not bound")),
            phase => Ok(Health::in_progress(format!("not bound (phase {phase})"))),
        }
    }

    /// Service (core.go, `serviceConditions`).
    pub(super) fn service(&self) -> Rule<Health> {
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
    pub(super) fn namespace(&self) -> Rule<Health> {
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

#[cfg(test)]
pub(super) mod tests {
    use serde_json::{Value, json};

    use super::super::{Status::*, tests::*};

    pub(in crate::health) fn pod(extra: Value) -> Value {
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
}

//! Health rules of the workloads of the `apps` group: Deployment, StatefulSet, DaemonSet,
//! ReplicaSet (kstatus's core.go), with their tests.

use super::*;

impl<'a> Object<'a> {
    /// Deployment (core.go, `deploymentConditions`).
    pub(super) fn deployment(&self, conditions: &[Condition<'_>]) -> Rule<Health> {
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
    pub(super) fn spec_bool(&self, field: &str) -> Rule<bool> {
        match at(self.body, &["spec", field])? {
            None | Some(Value::Null) => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(_) => Err(Malformed(format!("spec.{field} is not a boolean"))),
        }
    }

    /// StatefulSet (core.go, `stsConditions`). Its controller sets no conditions, so only the
    /// counts and revisions tell.
    pub(super) fn stateful_set(&self) -> Rule<Health> {
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
    pub(super) fn daemon_set(&self) -> Rule<Health> {
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
    pub(super) fn replica_set(&self, conditions: &[Condition<'_>]) -> Rule<Health> {
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
}

#[cfg(test)]
pub(super) mod tests {
    use serde_json::{Value, json};

    use super::super::{Status::*, tests::*};

    pub(in crate::health) fn deployment(spec: Value, status: Value) -> Value {
        object(
            "apps/v1",
            "Deployment",
            json!({"spec": spec, "status": status}),
        )
    }

    /// The conditions of a Deployment whose rollout is done.
    pub(in crate::health) fn rolled_out() -> Value {
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

    pub(in crate::health) fn stateful_set(spec: Value, status: Value) -> Value {
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
}

//! Health rule of a Job (kstatus's core.go, `jobConditions`), with its tests.

use super::*;

impl<'a> Object<'a> {
    /// Job (core.go, `jobConditions`), the first decisive condition in order.
    pub(super) fn job(&self, conditions: &[Condition<'_>]) -> Rule<Health> {
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
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::super::{Status::*, tests::*};

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
}

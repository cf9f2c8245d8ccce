//! Conditions (kstatus conventions) without timestamp churn: `lastTransitionTime` moves only
//! when a condition's status changes, so recomputing an unchanged outcome yields an equal
//! status and no write.

use k8s_openapi::{
    apimachinery::pkg::apis::meta::v1::{Condition, Time},
    jiff::Timestamp,
};

pub const READY: &str = "Ready";
pub const RECONCILING: &str = "Reconciling";
pub const STALLED: &str = "Stalled";
/// Sets that wait or have health checks: whether their members and checked objects are
/// Current, kept up to date from the watches (written by the operator's health reporter).
pub const HEALTHY: &str = "Healthy";

/// Reasons of the Ready condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    ReconciliationSucceeded,
    Progressing,
    ValidationFailed,
    SourceFailed,
    ApplyFailed,
    Conflict,
    OwnershipConflict,
    AdoptionRefused,
    PruneFailed,
    EmptySetRefused,
    Suspended,
    PlanReady,
    HealthCheckFailed,
    /// A `dependsOn` set is not ready (retried; not stalled).
    DependencyNotReady,
    /// Members in a namespace being terminated were not applied (retried when it is gone or
    /// back; not stalled).
    NamespaceTerminating,
}

impl Reason {
    pub fn as_str(&self) -> &'static str {
        match self {
            Reason::ReconciliationSucceeded => "ReconciliationSucceeded",
            Reason::Progressing => "Progressing",
            Reason::ValidationFailed => "ValidationFailed",
            Reason::SourceFailed => "SourceFailed",
            Reason::ApplyFailed => "ApplyFailed",
            Reason::Conflict => "Conflict",
            Reason::OwnershipConflict => "OwnershipConflict",
            Reason::AdoptionRefused => "AdoptionRefused",
            Reason::PruneFailed => "PruneFailed",
            Reason::EmptySetRefused => "EmptySetRefused",
            Reason::Suspended => "Suspended",
            Reason::PlanReady => "PlanReady",
            Reason::HealthCheckFailed => "HealthCheckFailed",
            Reason::DependencyNotReady => "DependencyNotReady",
            Reason::NamespaceTerminating => "NamespaceTerminating",
        }
    }

    /// Failures that only a change of the spec or the cluster fixes (retrying does not).
    pub fn is_stalled(&self) -> bool {
        matches!(
            self,
            Reason::ValidationFailed
                | Reason::OwnershipConflict
                | Reason::AdoptionRefused
                | Reason::EmptySetRefused
        )
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Sets (or replaces) condition `type_` in `conditions`, keeping its lastTransitionTime when
/// the status does not change.
pub fn set(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: bool,
    reason: &str,
    message: &str,
    generation: Option<i64>,
) {
    let status = if status { "True" } else { "False" };
    set_status(conditions, type_, status, reason, message, generation);
}

/// Sets (or replaces) condition `type_` with status `True`, `False` or `Unknown`, keeping its
/// lastTransitionTime when the status does not change.
pub fn set_status(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    generation: Option<i64>,
) {
    let previous = conditions.iter().find(|c| c.type_ == type_);
    let last_transition_time = match previous {
        Some(p) if p.status == status => p.last_transition_time.clone(),
        _ => Time(Timestamp::now()),
    };
    let condition = Condition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: reason.to_string(),
        message: truncate(message, 32 * 1024),
        observed_generation: generation,
        last_transition_time,
    };
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => *c = condition,
        None => conditions.push(condition),
    }
}

/// Removes condition `type_` (kstatus: abnormal-true conditions are absent when false).
pub fn remove(conditions: &mut Vec<Condition>, type_: &str) {
    conditions.retain(|c| c.type_ != type_);
}

/// The conditions for an outcome: Ready with `reason` (Unknown for Progressing, a set waiting
/// for its members' health); Stalled=True for stalled reasons; Reconciling=True while
/// `reconciling` or Progressing.
pub fn conditions_for(
    previous: &[Condition],
    ready: bool,
    reason: Reason,
    message: &str,
    reconciling: bool,
    generation: Option<i64>,
) -> Vec<Condition> {
    let mut c = previous.to_vec();
    // Progressing (a set waiting for its members' health): Ready is not known yet.
    let waiting = reason == Reason::Progressing;
    let status = match (waiting, ready) {
        (true, _) => "Unknown",
        (false, true) => "True",
        (false, false) => "False",
    };
    set_status(&mut c, READY, status, reason.as_str(), message, generation);
    let reconciling = reconciling || waiting;
    if reason.is_stalled() {
        set(&mut c, STALLED, true, reason.as_str(), message, generation);
    } else {
        remove(&mut c, STALLED);
    }
    if reconciling {
        set(
            &mut c,
            RECONCILING,
            true,
            Reason::Progressing.as_str(),
            message,
            generation,
        );
    } else {
        remove(&mut c, RECONCILING);
    }
    // Stable order: Ready, Reconciling, Stalled.
    c.sort_by_key(|c| match c.type_.as_str() {
        READY => 0,
        RECONCILING => 1,
        STALLED => 2,
        HEALTHY => 3,
        _ => 4,
    });
    c
}

/// At most `max` bytes, cut at a character boundary.
pub fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transition_time_kept_while_status_unchanged() {
        let first = conditions_for(
            &[],
            true,
            Reason::ReconciliationSucceeded,
            "ok",
            false,
            Some(1),
        );
        let t = first[0].last_transition_time.clone();
        let again = conditions_for(
            &first,
            true,
            Reason::ReconciliationSucceeded,
            "ok",
            false,
            Some(1),
        );
        assert_eq!(first, again, "recomputing the same outcome is a no-op");
        let other_reason = conditions_for(
            &first,
            true,
            Reason::ReconciliationSucceeded,
            "ok 2",
            false,
            Some(2),
        );
        assert_eq!(other_reason[0].last_transition_time, t);
        assert_eq!(other_reason[0].observed_generation, Some(2));
    }

    #[test]
    fn stalled_and_reconciling_appear_and_disappear() {
        let c = conditions_for(&[], false, Reason::ValidationFailed, "bad", false, Some(1));
        assert_eq!(
            c.iter().map(|c| c.type_.as_str()).collect::<Vec<_>>(),
            [READY, STALLED]
        );
        assert_eq!(c[1].status, "True");
        let c = conditions_for(&c, false, Reason::ApplyFailed, "later", true, Some(2));
        assert_eq!(
            c.iter().map(|c| c.type_.as_str()).collect::<Vec<_>>(),
            [READY, RECONCILING]
        );
        let c = conditions_for(
            &c,
            true,
            Reason::ReconciliationSucceeded,
            "ok",
            false,
            Some(2),
        );
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].status, "True");
    }

    #[test]
    fn waiting_is_ready_unknown_and_reconciling() {
        let c = conditions_for(&[], false, Reason::Progressing, "waiting", false, Some(1));
        assert_eq!(
            c.iter()
                .map(|c| (c.type_.as_str(), c.status.as_str()))
                .collect::<Vec<_>>(),
            [(READY, "Unknown"), (RECONCILING, "True")]
        );
        let c = conditions_for(
            &c,
            false,
            Reason::HealthCheckFailed,
            "failed",
            false,
            Some(1),
        );
        assert_eq!(
            c.iter()
                .map(|c| (c.type_.as_str(), c.status.as_str()))
                .collect::<Vec<_>>(),
            [(READY, "False")]
        );
        assert!(!Reason::HealthCheckFailed.is_stalled());
    }

    #[test]
    fn stalled_reasons() {
        assert!(Reason::OwnershipConflict.is_stalled());
        assert!(Reason::AdoptionRefused.is_stalled());
        assert!(Reason::ValidationFailed.is_stalled());
        assert!(!Reason::ApplyFailed.is_stalled());
        assert!(!Reason::Conflict.is_stalled());
        assert!(!Reason::PruneFailed.is_stalled());
    }

    #[test]
    fn truncation_respects_char_boundaries() {
        assert_eq!(truncate("héllo", 2), "h…");
        assert_eq!(truncate("abc", 3), "abc");
    }
}

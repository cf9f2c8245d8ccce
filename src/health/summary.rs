//! Summaries of many objects' health (a set's `status.health`).

use std::fmt;

use super::{Health, Status};

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

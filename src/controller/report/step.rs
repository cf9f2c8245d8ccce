//! The reconcile's control flow: each step returns what the next needs, or [`Stop`]s the
//! reconcile with a report to write or an error of the operator's own I/O.

use super::Report;
use crate::Error;

/// Why a reconcile stops before its end: a report to write, or an error of the operator's
/// own I/O (reported as ApplyFailed and retried).
pub(in crate::controller) enum Stop {
    Report(Box<Report>),
    Error(Error),
}

impl From<Error> for Stop {
    fn from(e: Error) -> Self {
        Stop::Error(e)
    }
}

impl From<kube::Error> for Stop {
    fn from(e: kube::Error) -> Self {
        Stop::Error(e.into())
    }
}

impl From<Report> for Stop {
    fn from(r: Report) -> Self {
        Stop::Report(Box::new(r))
    }
}

pub(in crate::controller) type Step<T> = std::result::Result<T, Stop>;

//! The one classification of an [`Outcome`] that every view reads: the status summary and
//! the reconcile's failure report (`controller::report`), the events, and `kubectl applyset
//! diff`. Pure; a view decides only how to show a class, never which class an outcome is,
//! so two views of one plan cannot disagree.

use std::fmt;

use super::outcome::{Outcome, Retained};
use crate::applyset::controls::Skip;

/// What an outcome means to a reader of the set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class<'a> {
    /// The member is (or would be) created.
    Create,
    /// The member is (or would be) changed: configured, or an existing object adopted.
    Change,
    /// The member is already as declared.
    Unchanged,
    /// The member is not applied: it is someone else's (fields, object, or an adoption not
    /// allowed). `message` names it and the fix.
    Conflict {
        kind: ConflictKind,
        message: &'a str,
    },
    /// The operator refuses to apply the member, for `reason`; nothing is sent.
    Refused(Refusal<'a>),
    /// The member's apply failed (forbidden, or any other error).
    Failed { forbidden: bool, message: &'a str },
    /// The member is not applied by its own controls (`ssa: Ignore`, `reconcile: disabled`,
    /// `ssa: IfNotPresent` on an object that exists): not a failure, and not assessed.
    Skipped(Skip),
    /// A candidate deleted (or that would be).
    Prune,
    /// A candidate kept (see [`Retained`]); one re-created meanwhile
    /// ([`Retained::Recreated`]) leaves the prune unfinished.
    Retained(&'a Retained),
    /// A candidate left for the next reconcile: changed since it was listed, or its delete
    /// failed (`message`, when it failed).
    Unfinished { message: Option<&'a str> },
    /// A candidate already gone.
    Gone,
}

/// Whose a conflicting member is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConflictKind {
    /// Another ApplySet's object (its `part-of` label).
    Owned,
    /// An existing object without a `part-of` label, and adoption is not allowed.
    AdoptionRefused,
    /// Fields owned by other field managers.
    Fields,
}

/// Why the operator refuses to apply a member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal<'a> {
    /// Its namespace is being terminated.
    NamespaceTerminating { namespace: &'a str },
}

impl fmt::Display for Refusal<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::NamespaceTerminating { namespace } => {
                write!(f, "namespace {namespace} is being terminated")
            }
        }
    }
}

impl Outcome {
    /// The outcome's class (see [`Class`]).
    pub fn class(&self) -> Class<'_> {
        match self {
            Outcome::Created => Class::Create,
            Outcome::Configured | Outcome::Adopted => Class::Change,
            Outcome::Unchanged => Class::Unchanged,
            Outcome::Conflict { message, .. } => conflict(ConflictKind::Fields, message),
            Outcome::Owned { message } => conflict(ConflictKind::Owned, message),
            Outcome::AdoptionRefused { message } => {
                conflict(ConflictKind::AdoptionRefused, message)
            }
            Outcome::NamespaceTerminating { namespace } => {
                Class::Refused(Refusal::NamespaceTerminating { namespace })
            }
            Outcome::Forbidden { message } => Class::Failed {
                forbidden: true,
                message,
            },
            Outcome::Failed { message } => Class::Failed {
                forbidden: false,
                message,
            },
            Outcome::Skipped(why) => Class::Skipped(*why),
            Outcome::Pruned => Class::Prune,
            Outcome::Changed => Class::Unfinished { message: None },
            Outcome::DeleteFailed { message } => Class::Unfinished {
                message: Some(message),
            },
            Outcome::Retained(why) => Class::Retained(why),
            Outcome::Gone => Class::Gone,
        }
    }
}

impl Class<'_> {
    /// An apply that succeeded (or would).
    pub fn is_applied(&self) -> bool {
        matches!(self, Class::Create | Class::Change | Class::Unchanged)
    }

    /// The class of a declared member's apply (as opposed to a prune candidate's).
    pub fn is_member(&self) -> bool {
        self.is_applied()
            || matches!(
                self,
                Class::Conflict { .. }
                    | Class::Refused(_)
                    | Class::Failed { .. }
                    | Class::Skipped(_)
            )
    }

    /// A prune that did not finish (see [`Outcome::is_unfinished_prune`]).
    pub fn is_unfinished_prune(&self) -> bool {
        matches!(
            self,
            Class::Unfinished { .. } | Class::Retained(Retained::Recreated)
        )
    }
}

fn conflict(kind: ConflictKind, message: &str) -> Class<'_> {
    Class::Conflict { kind, message }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_outcome() -> Vec<Outcome> {
        let m = || "m".to_string();
        vec![
            Outcome::Created,
            Outcome::Configured,
            Outcome::Unchanged,
            Outcome::Adopted,
            Outcome::Conflict {
                managers: vec!["kubectl".into()],
                message: m(),
            },
            Outcome::Owned { message: m() },
            Outcome::AdoptionRefused { message: m() },
            Outcome::Forbidden { message: m() },
            Outcome::NamespaceTerminating {
                namespace: "gone".into(),
            },
            Outcome::Failed { message: m() },
            Outcome::Skipped(Skip::Ignore),
            Outcome::Pruned,
            Outcome::Retained(Retained::PruneDisabled),
            Outcome::Retained(Retained::Recreated),
            Outcome::Gone,
            Outcome::Changed,
            Outcome::DeleteFailed { message: m() },
        ]
    }

    #[test]
    fn every_outcome_has_its_class() {
        let outcomes = every_outcome();
        let got: Vec<Class<'_>> = outcomes.iter().map(Outcome::class).collect();
        let want = [
            Class::Create,
            Class::Change,
            Class::Unchanged,
            Class::Change,
            Class::Conflict {
                kind: ConflictKind::Fields,
                message: "m",
            },
            Class::Conflict {
                kind: ConflictKind::Owned,
                message: "m",
            },
            Class::Conflict {
                kind: ConflictKind::AdoptionRefused,
                message: "m",
            },
            Class::Failed {
                forbidden: true,
                message: "m",
            },
            Class::Refused(Refusal::NamespaceTerminating { namespace: "gone" }),
            Class::Failed {
                forbidden: false,
                message: "m",
            },
            Class::Skipped(Skip::Ignore),
            Class::Prune,
            Class::Retained(&Retained::PruneDisabled),
            Class::Retained(&Retained::Recreated),
            Class::Gone,
            Class::Unfinished { message: None },
            Class::Unfinished { message: Some("m") },
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn applied_member_and_unfinished_prune_classes() {
        let outcomes = every_outcome();
        let which = |q: &dyn Fn(&Class<'_>) -> bool| -> Vec<usize> {
            (0..outcomes.len())
                .filter(|i| q(&outcomes[*i].class()))
                .collect()
        };
        assert_eq!(which(&|c| c.is_applied()), vec![0, 1, 2, 3]);
        assert_eq!(which(&|c| c.is_member()), (0..11).collect::<Vec<_>>());
        assert_eq!(which(&|c| c.is_unfinished_prune()), vec![13, 15, 16]);
    }

    #[test]
    fn a_refusal_names_its_reason() {
        let r = Refusal::NamespaceTerminating { namespace: "team" };
        assert_eq!(r.to_string(), "namespace team is being terminated");
    }
}

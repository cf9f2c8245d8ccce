//! What happened to each member in one reconcile: one vocabulary for the apply and the
//! prune, classified once ([`super::class`]) and tallied from that class into the status
//! summary ([`tally`]).

use super::class::{Class, ConflictKind};
use crate::{
    api::{MemberRef, Summary},
    applyset::controls::{Keep, Skip},
};

/// What happened to one member (or prune candidate).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Applied: the object did not exist before.
    Created,
    /// Applied: its live state changed (or an existing object joined the set).
    Configured,
    /// Applied (or skipped as known unchanged): already as declared.
    Unchanged,
    /// Applied: an object that existed without a `part-of` label, taken over as allowed.
    Adopted,
    /// Not applied: fields owned by other managers (without `force`).
    Conflict {
        managers: Vec<String>,
        message: String,
    },
    /// Not applied: the live object carries the `part-of` label of another ApplySet.
    Owned { message: String },
    /// Not applied: the object exists without a `part-of` label and adoption is not allowed.
    AdoptionRefused { message: String },
    /// Not applied: the set's identity may not (the API server answered 403 Forbidden).
    Forbidden { message: String },
    /// Not applied: its namespace is being terminated (no write was sent, or the write was
    /// refused for that).
    NamespaceTerminating { namespace: String },
    /// Not applied: any other failure.
    Failed { message: String },
    /// Not applied, by its own controls (see [`crate::applyset::controls`]): `ssa: Ignore` or
    /// `reconcile: disabled` on the manifest or the live object, or `ssa: IfNotPresent` on
    /// the manifest of an object that exists. Nothing is sent; not a failure.
    Skipped(Skip),
    /// No longer declared, and deleted.
    Pruned,
    /// No longer declared, and kept.
    Retained(Retained),
    /// No longer declared, and already gone when deleted.
    Gone,
    /// No longer declared, but changed since it was listed: left alone this time.
    Changed,
    /// No longer declared, and its delete failed.
    DeleteFailed { message: String },
}

impl Outcome {
    /// An apply that succeeded (see [`Class::is_applied`]).
    pub fn is_applied(&self) -> bool {
        self.class().is_applied()
    }

    /// A prune that did not finish: the parent must keep recording every kind (and the
    /// later deletion groups wait: a Namespace or CRD is not deleted while something that
    /// should go before it may still be there). An object re-created meanwhile counts: it is
    /// left alone, and may live in a Namespace the prune would delete next.
    pub fn is_unfinished_prune(&self) -> bool {
        self.class().is_unfinished_prune()
    }
}

/// What a reconcile changed, as an event note: "ConfigMap demo/web configured,
/// Deployment.apps demo/api created, Secret demo/old pruned, ConfigMap demo/ca skipped (ssa:
/// Ignore)" in the order of the results, at most `cap` named and the rest counted. None
/// when nothing changed (unchanged members, failures, retained candidates and skipped
/// members are not changes; skipped members are named only beside a change).
pub fn changes(results: &[MemberResult], cap: usize) -> Option<String> {
    let mut changed = false;
    let named: Vec<String> = results
        .iter()
        .filter_map(|r| {
            let verb = match (r.outcome.class(), &r.outcome) {
                (Class::Create, _) => "created",
                (Class::Change, Outcome::Adopted) => "adopted",
                (Class::Change, _) => "configured",
                (Class::Prune, _) => "pruned",
                (Class::Skipped(why), _) => {
                    return Some(format!("{} skipped ({why})", r.reference));
                }
                _ => return None,
            };
            changed = true;
            Some(format!("{} {verb}", r.reference))
        })
        .collect();
    if !changed {
        return None;
    }
    let changed = named;
    let mut note = changed[..changed.len().min(cap)].join(", ");
    if changed.len() > cap {
        note.push_str(&format!(", and {} more", changed.len() - cap));
    }
    Some(note)
}

/// Why a prune candidate is kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Retained {
    /// Marked `prune: disabled` (either prefix, label or annotation).
    PruneDisabled,
    /// Marked `reconcile: disabled` (either prefix, label or annotation).
    ReconcileDisabled,
    /// Marked `ssa: Ignore` (either prefix, label or annotation).
    SsaIgnore,
    /// Its `part-of` label is not managed by our member field manager (someone copied it).
    LabelNotOurs,
    /// It has a controller owner reference (something else manages its life).
    Controlled(String),
    /// A Namespace or CRD whose deletion would take a kept object with it.
    HoldsRetained(String),
    /// A Namespace or CRD the set adopted rather than created.
    Adopted,
    /// The Namespace the parent itself lives in.
    ParentNamespace,
    /// An object of that name was re-created meanwhile (another UID).
    Recreated,
}

/// One member's outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberResult {
    pub reference: MemberRef,
    pub outcome: Outcome,
    /// The live object's UID, where known: the server's answer to an apply (a dry-run one
    /// too, for an object that exists), or the watches' record of a member known unchanged.
    pub uid: Option<String>,
    /// A dry-run's objects, when the apply was asked to keep them (`apply::Options::preview`).
    pub preview: Option<Box<Preview>>,
}

/// What a dry-run showed of one member: the live object before (none when it does not
/// exist) and the object the apply would leave, as the server answered them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Preview {
    pub before: Option<serde_json::Value>,
    pub after: serde_json::Value,
}

impl MemberResult {
    pub fn new(reference: MemberRef, outcome: Outcome) -> Self {
        Self {
            reference,
            outcome,
            uid: None,
            preview: None,
        }
    }

    pub(super) fn with_uid(self, uid: Option<String>) -> Self {
        Self { uid, ..self }
    }
}

/// The status summary of a reconcile's results: `members` counts the declared members
/// (every apply outcome, failed ones included), the rest one field per outcome (an adopted
/// member counts as configured, a refused adoption as failed). `Gone`, `Changed` and
/// `DeleteFailed` count nowhere (the message reports the last two).
pub fn tally(results: &[MemberResult]) -> Summary {
    let mut s = Summary::default();
    for r in results {
        let class = r.outcome.class();
        if class.is_member() {
            s.members += 1;
        }
        match class {
            Class::Create => s.created += 1,
            Class::Change => s.configured += 1,
            Class::Unchanged => s.unchanged += 1,
            Class::Conflict {
                kind: ConflictKind::Fields,
                ..
            } => s.conflicts += 1,
            Class::Conflict { .. } | Class::Refused(_) | Class::Failed { .. } => s.failed += 1,
            Class::Prune => s.pruned += 1,
            Class::Retained(_) => s.retained += 1,
            Class::Skipped(_) => s.skipped += 1,
            Class::Gone | Class::Unfinished { .. } => {}
        }
    }
    s
}

impl From<Keep> for Retained {
    fn from(keep: Keep) -> Self {
        match keep {
            Keep::PruneDisabled => Retained::PruneDisabled,
            Keep::ReconcileDisabled => Retained::ReconcileDisabled,
            Keep::SsaIgnore => Retained::SsaIgnore,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(name: &str, outcome: Outcome) -> MemberResult {
        MemberResult::new(
            MemberRef {
                group: String::new(),
                kind: "ConfigMap".into(),
                namespace: Some("team".into()),
                name: name.into(),
            },
            outcome,
        )
    }

    fn failed() -> Outcome {
        Outcome::Failed {
            message: "x".into(),
        }
    }

    #[test]
    fn changes_name_what_changed_in_order_and_nothing_else() {
        assert_eq!(changes(&[], 10), None);
        let quiet = [
            r("a", Outcome::Unchanged),
            r("b", failed()),
            r("c", Outcome::Retained(Retained::PruneDisabled)),
            r("d", Outcome::Gone),
            r("e", Outcome::Changed),
            r("f", Outcome::Skipped(Skip::Ignore)),
        ];
        assert_eq!(changes(&quiet, 10), None, "no change, no note");
        let skipped = [
            r("ca", Outcome::Skipped(Skip::IfNotPresentExists)),
            r("web", Outcome::Configured),
        ];
        assert_eq!(
            changes(&skipped, 10).as_deref(),
            Some("ConfigMap team/ca skipped (IfNotPresent, exists), ConfigMap team/web configured")
        );
        let results = [
            r("web", Outcome::Configured),
            r("same", Outcome::Unchanged),
            r("api", Outcome::Created),
            r("theirs", Outcome::Adopted),
            r("old", Outcome::Pruned),
        ];
        assert_eq!(
            changes(&results, 10).as_deref(),
            Some(
                "ConfigMap team/web configured, ConfigMap team/api created, \
                 ConfigMap team/theirs adopted, ConfigMap team/old pruned"
            )
        );
    }

    #[test]
    fn changes_beyond_the_cap_are_counted() {
        let results: Vec<MemberResult> = (0..7)
            .map(|i| r(&format!("m{i}"), Outcome::Created))
            .collect();
        assert_eq!(
            changes(&results, 3).as_deref(),
            Some(
                "ConfigMap team/m0 created, ConfigMap team/m1 created, ConfigMap team/m2 created, and 4 more"
            )
        );
        assert_eq!(
            changes(&results[..3], 3).map(|n| n.contains("more")),
            Some(false)
        );
    }

    #[test]
    fn empty_results_are_an_empty_summary() {
        assert_eq!(tally(&[]), Summary::default());
    }

    #[test]
    fn every_outcome_counts_in_its_own_field() {
        let results = [
            r("a", Outcome::Created),
            r("b", Outcome::Created),
            r("c", Outcome::Configured),
            r("d", Outcome::Unchanged),
            r(
                "e",
                Outcome::Conflict {
                    managers: vec!["kubectl".into()],
                    message: "m".into(),
                },
            ),
            r(
                "f",
                Outcome::Owned {
                    message: "m".into(),
                },
            ),
            r("g", failed()),
            r(
                "g2",
                Outcome::AdoptionRefused {
                    message: "m".into(),
                },
            ),
            r("c2", Outcome::Adopted),
            r("h", Outcome::Pruned),
            r("i", Outcome::Retained(Retained::PruneDisabled)),
            r("j", Outcome::Retained(Retained::Recreated)),
            r("k", Outcome::Gone),
            r("l", Outcome::Changed),
            r(
                "m",
                Outcome::DeleteFailed {
                    message: "m".into(),
                },
            ),
            r("n", Outcome::Skipped(Skip::ReconcileDisabled)),
            r("o", Outcome::Retained(Retained::SsaIgnore)),
        ];
        let s = tally(&results);
        assert_eq!(
            s,
            Summary {
                members: 10,
                created: 2,
                configured: 2,
                unchanged: 1,
                pruned: 1,
                failed: 3,
                conflicts: 1,
                retained: 3,
                skipped: 1,
            }
        );
    }

    #[test]
    fn prune_outcomes_are_not_members() {
        let s = tally(&[r("x", Outcome::Pruned), r("y", Outcome::Gone)]);
        assert_eq!(s.members, 0);
        assert_eq!(s.pruned, 1);
    }

    #[test]
    fn classification() {
        assert!(Outcome::Unchanged.is_applied());
        assert!(!failed().is_applied());
        assert!(failed().class().is_member());
        assert!(!Outcome::Pruned.class().is_member());
        assert!(Outcome::Changed.is_unfinished_prune());
        assert!(
            Outcome::DeleteFailed {
                message: "m".into()
            }
            .is_unfinished_prune()
        );
        assert!(!Outcome::Gone.is_unfinished_prune());
        assert!(Outcome::Retained(Retained::Recreated).is_unfinished_prune());
        assert!(!Outcome::Retained(Retained::PruneDisabled).is_unfinished_prune());
    }
}

//! Conflicts of a server-side apply: which managers and fields the API server names, and
//! what the set does about them.
//!
//! Promises: a conflict on the `part-of` label (the object is another set's) is never
//! forced; a conflict whose fields are not named is never forced (the label may be among
//! them); any other conflict is forced only with `spec.force` (or an adoption from its
//! makers), and otherwise reported naming the managers and fields.

use kube::core::Status;

use crate::{applyset::LABEL_PART_OF, engine::outcome::Outcome, render::Member};

/// The outcome of a conflict, unless `force` takes the fields over (`None`): a conflict on
/// the `part-of` label is never forced (the object belongs to another ApplySet).
pub(super) fn refuse_conflict(member: &Member, status: &Status, force: bool) -> Option<Outcome> {
    let conflict = Conflict::from_status(status);
    if conflict.on_part_of {
        let message = format!(
            "{}: the live object belongs to another ApplySet (its {LABEL_PART_OF} label is managed by {}); it is left alone. Remove it from one of the two sets",
            member.reference,
            conflict.managers.join(", ")
        );
        return Some(Outcome::Owned { message });
    }
    if !conflict.fields_known() {
        let message = format!(
            "{}: the API server reported a conflict without naming its fields ({}); nothing is forced, since the {LABEL_PART_OF} label may be among them",
            member.reference, status.message
        );
        return Some(Outcome::Conflict {
            message,
            managers: conflict.managers,
        });
    }
    if force {
        return None;
    }
    let message = format!(
        "{}: conflict with field manager(s) {}: {}; set spec.force: true to take the fields over",
        member.reference,
        conflict
            .managers
            .iter()
            .map(|m| format!("\"{m}\""))
            .collect::<Vec<_>>()
            .join(", "),
        conflict.fields.join(", ")
    );
    Some(Outcome::Conflict {
        message,
        managers: conflict.managers,
    })
}

/// The managers and fields of a server-side apply conflict, from the status's
/// `FieldManagerConflict` causes (one per field; the API server always lists them).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Conflict {
    /// For the message only: the managers quoted in the causes.
    pub managers: Vec<String>,
    pub fields: Vec<String>,
    /// The `part-of` label is among the fields: the object is another set's.
    pub on_part_of: bool,
}

impl Conflict {
    pub fn from_status(status: &Status) -> Conflict {
        let mut c = Conflict::default();
        let causes = status
            .details
            .as_ref()
            .map(|d| d.causes.as_slice())
            .unwrap_or_default();
        for cause in causes.iter().filter(|c| c.reason == "FieldManagerConflict") {
            c.managers.extend(quoted(&cause.message));
            if !cause.field.is_empty() {
                c.fields.push(cause.field.clone());
            }
        }
        c.managers.sort();
        c.managers.dedup();
        let part_of_field = format!(".metadata.labels.{LABEL_PART_OF}");
        c.on_part_of = c.fields.iter().any(|f| f == &part_of_field);
        c
    }

    /// Whether the conflicting fields are known: without them nothing can show that the
    /// `part-of` label is not among them, so nothing is forced.
    pub fn fields_known(&self) -> bool {
        !self.fields.is_empty()
    }
}

/// Every `"…"`-quoted string following `conflict with` / `conflicts with`.
fn quoted(message: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = message;
    while let Some(i) = rest.find("with \"") {
        rest = &rest[i + "with \"".len()..];
        if let Some(end) = rest.find('"') {
            out.push(rest[..end].to_string());
            rest = &rest[end..];
        } else {
            break;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::response::{StatusCause, StatusDetails};

    fn conflict_status(message: &str, causes: Vec<(&str, &str)>) -> Status {
        let mut s = Status::failure(message, "Conflict").with_code(409);
        s.details = Some(StatusDetails {
            causes: causes
                .into_iter()
                .map(|(m, f)| StatusCause {
                    reason: "FieldManagerConflict".into(),
                    message: m.into(),
                    field: f.into(),
                })
                .collect(),
            name: String::new(),
            group: String::new(),
            kind: String::new(),
            uid: String::new(),
            retry_after_seconds: 0,
        });
        s
    }

    #[test]
    fn conflict_from_causes() {
        let s = conflict_status(
            "Apply failed with 2 conflicts: conflicts with \"alice\" using v1:\n- .data.a\n- .data.b",
            vec![
                ("conflict with \"alice\" using v1", ".data.a"),
                ("conflict with \"bob\"", ".data.b"),
            ],
        );
        let c = Conflict::from_status(&s);
        assert_eq!(c.managers, ["alice", "bob"]);
        assert_eq!(c.fields, [".data.a", ".data.b"]);
        assert!(!c.on_part_of);
    }

    #[test]
    fn a_conflict_without_causes_names_no_field() {
        let s = conflict_status(
            "Apply failed with 1 conflict: conflict with \"kubectl\" using v1: .metadata.labels.applyset.kubernetes.io/part-of",
            vec![],
        );
        let c = Conflict::from_status(&s);
        assert!(!c.fields_known());
        assert!(!c.on_part_of);
        assert!(c.managers.is_empty());
    }

    #[test]
    fn part_of_conflict_from_cause_field() {
        let s = conflict_status(
            "conflict",
            vec![(
                "conflict with \"applyset.dev/ns/a/b\"",
                ".metadata.labels.applyset.kubernetes.io/part-of",
            )],
        );
        let c = Conflict::from_status(&s);
        assert!(c.on_part_of);
        assert_eq!(c.managers, ["applyset.dev/ns/a/b"]);
    }
}

//! What a conversion says besides the sets: one [`Note`] per field with no equivalent, per
//! refusal and per choice the reader should know, each naming the Flux object and the field.

use super::FluxRef;

/// How much a note matters (ordered: `--strict` fails from [`Severity::Dropped`] on).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    /// A choice made for the reader (a default made explicit, a name given, a scope decided).
    Info,
    /// A field with no equivalent: left out of the set, which behaves differently there.
    Dropped,
    /// The object cannot be converted: no set is made for it.
    Refused,
}

/// One note: `Kustomization ns/name: spec.field: why`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    pub object: FluxRef,
    /// The field's path in the Flux object (`spec.kubeConfig`, `spec.ref.semver`); empty for
    /// the object as a whole.
    pub field: String,
    pub severity: Severity,
    pub why: String,
}

impl std::fmt::Display for Note {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.field.is_empty() {
            write!(f, "{}: {}", self.object, self.why)
        } else {
            write!(f, "{}: {}: {}", self.object, self.field, self.why)
        }
    }
}

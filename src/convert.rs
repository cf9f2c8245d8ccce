//! Conversion of Flux objects into sets: each `Kustomization`
//! (kustomize.toolkit.fluxcd.io/v1), with the `GitRepository` or `OCIRepository`
//! (source.toolkit.fluxcd.io) it points at, becomes an ApplySet or a ClusterApplySet that
//! applies the same objects, with Flux's meaning of every field carried onto ours (Flux's
//! `force` and `targetNamespace` do not mean what ours do: see [`kustomization`]).
//!
//! Pure: the objects are read by the caller (the kubectl plugin's `convert`: files, or the
//! cluster through [`cluster::read`], this module's only I/O).
//! What has no equivalent is not dropped silently: every such field is a [`Note`] naming the
//! object, the field and why; a Kustomization that cannot be converted at all (a Bucket
//! source, a remote cluster's kubeConfig, a semver ref) is a [`Note`] of severity
//! [`Severity::Refused`] and gives no set.

pub mod cluster;
pub mod flux;
pub mod kustomization;
mod names;
pub mod notes;
pub mod scope;
pub mod source;

use std::collections::{BTreeMap, BTreeSet};

use crate::api::{ApplySet, ClusterApplySet};
pub use notes::{Note, Severity};
pub use scope::{Scope, Written};

/// A Flux object's identity: `Kind namespace/name`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FluxRef {
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

impl std::fmt::Display for FluxRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
    }
}

/// The Flux objects to convert, as read (JSON of whole objects: apiVersion, kind, metadata,
/// spec, and status when read from a cluster). Objects of other kinds are ignored by
/// [`convert`]; a document that is not an object with a kind is the caller's to report.
#[derive(Clone, Debug, Default)]
pub struct Input {
    pub objects: Vec<serde_json::Value>,
    /// What each Kustomization is known to write (from its `status.inventory`, or a build of
    /// the converted set), by the Kustomization: decides ApplySet or ClusterApplySet (see
    /// [`scope`]). A Kustomization without an entry is decided from its spec alone, with a
    /// note saying so.
    pub written: BTreeMap<FluxRef, Written>,
    /// `--service-account NAMESPACE/NAME`: the ServiceAccount of a ClusterApplySet made from a
    /// Kustomization that names none (Flux acted as kustomize-controller).
    pub cluster_service_account: Option<(String, String)>,
}

/// One converted set.
#[derive(Clone, Debug)]
pub enum Set {
    Namespaced(ApplySet),
    Cluster(ClusterApplySet),
}

/// A Kustomization's set, with where it came from.
#[derive(Clone, Debug)]
pub struct Converted {
    /// The Kustomization.
    pub from: FluxRef,
    /// Its source (GitRepository or OCIRepository).
    pub source: FluxRef,
    pub set: Set,
}

/// What [`convert`] made: the sets (in the order of the Kustomizations read) and the notes
/// (every field with no equivalent, every refusal, every choice the reader should know).
#[derive(Clone, Debug, Default)]
pub struct Conversion {
    pub sets: Vec<Converted>,
    pub notes: Vec<Note>,
}

impl Conversion {
    /// Whether `--strict` fails: a note of severity [`Severity::Dropped`] or
    /// [`Severity::Refused`].
    pub fn fails_strict(&self) -> bool {
        self.notes.iter().any(|n| n.severity >= Severity::Dropped)
    }
}

/// Converts every Kustomization of `input` (see the module's contract): each one's draft
/// (its spec, scope and dependencies), then the ClusterApplySets' names (a collision among
/// them: `<namespace>-<name>`, with a note), then every set's `dependsOn` (a ClusterApplySet
/// when the dependency converts to one here; else an ApplySet of its namespace).
pub fn convert(input: &Input) -> Conversion {
    let mut notes = Vec::new();
    let objects: Vec<flux::Object> = input
        .objects
        .iter()
        .filter_map(|o| flux::read(o, "default"))
        .collect();
    let sources: BTreeMap<FluxRef, flux::Object> = objects
        .iter()
        .filter(|o| o.id.kind != "Kustomization")
        .map(|o| (o.id.clone(), o.clone()))
        .collect();
    let kustomizations: Vec<&flux::Object> = objects
        .iter()
        .filter(|o| o.id.kind == "Kustomization")
        .collect();
    let drafts: Vec<kustomization::Draft> = kustomizations
        .iter()
        .filter_map(|k| {
            let cx = kustomization::Context {
                sources: &sources,
                written: input.written.get(&k.id),
                cluster_service_account: input.cluster_service_account.as_ref(),
            };
            kustomization::convert(k, &cx, &mut notes)
        })
        .collect();
    let names = names::cluster_names(&drafts, &mut notes);
    let known: BTreeSet<&FluxRef> = kustomizations.iter().map(|k| &k.id).collect();
    let sets = drafts
        .into_iter()
        .map(|d| names::finish(d, &names, &known, &mut notes))
        .collect();
    dedup(&mut notes);
    Conversion { sets, notes }
}

/// Drops repeated notes (a source shared by Kustomizations is noted once), keeping the order.
fn dedup(notes: &mut Vec<Note>) {
    let mut seen = Vec::new();
    notes.retain(|n| {
        if seen.contains(n) {
            false
        } else {
            seen.push(n.clone());
            true
        }
    });
}

#[cfg(test)]
mod tests;

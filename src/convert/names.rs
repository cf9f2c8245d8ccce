//! The last step of a conversion: the sets' names (an ApplySet: the Kustomization's name in
//! its namespace; a ClusterApplySet: the Kustomization's name, or `<namespace>-<name>` when
//! two converted ClusterApplySets would share it) and their `dependsOn`, which need every
//! Kustomization's scope and name.

use std::collections::{BTreeMap, BTreeSet};

use super::{Converted, FluxRef, Note, Scope, Set, Severity, kustomization::Draft};
use crate::api::{ApplySet, ClusterApplySet, ClusterApplySetSpec, Dependency, DependencyKind};

/// Each converted Kustomization's set: `Some(name)` of a ClusterApplySet, `None` for an
/// ApplySet (of the Kustomization's name and namespace).
pub type Names = BTreeMap<FluxRef, Option<String>>;

/// The names of the sets of `drafts` (see the module's contract); a renamed ClusterApplySet
/// gets an Info note.
pub fn cluster_names(drafts: &[Draft], notes: &mut Vec<Note>) -> Names {
    let mut count: BTreeMap<&str, usize> = BTreeMap::new();
    for d in drafts.iter().filter(|d| d.scope == Scope::Cluster) {
        *count.entry(d.from.name.as_str()).or_default() += 1;
    }
    drafts
        .iter()
        .map(|d| {
            let name = (d.scope == Scope::Cluster).then(|| {
                if count.get(d.from.name.as_str()).copied().unwrap_or(0) > 1 {
                    let renamed = format!("{}-{}", d.from.namespace, d.from.name);
                    notes.push(Note {
                        object: d.from.clone(),
                        field: "metadata.name".into(),
                        severity: Severity::Info,
                        why: format!("another converted ClusterApplySet is named {}: this one is named {renamed}", d.from.name),
                    });
                    renamed
                } else {
                    d.from.name.clone()
                }
            });
            (d.from.clone(), name)
        })
        .collect()
}

/// The set of `d`, with its name and its `dependsOn` resolved against `names`; `known` are
/// the Kustomizations read (converted or refused).
pub fn finish(
    d: Draft,
    names: &Names,
    known: &BTreeSet<&FluxRef>,
    notes: &mut Vec<Note>,
) -> Converted {
    let mut spec = d.spec;
    for (i, dep) in d.depends_on.iter().enumerate() {
        let note = |why: String| Note {
            object: d.from.clone(),
            field: format!("spec.dependsOn[{i}]"),
            severity: Severity::Info,
            why,
        };
        spec.depends_on.push(match names.get(dep) {
            Some(Some(name)) => Dependency {
                name: name.clone(),
                namespace: None,
                kind: DependencyKind::ClusterApplySet,
            },
            found => {
                if found.is_none() {
                    let what = if known.contains(dep) {
                        "was not converted (refused)"
                    } else {
                        "is not among the objects read"
                    };
                    notes.push(note(format!(
                        "{dep} {what}: assumed to become the ApplySet {}/{}",
                        dep.namespace, dep.name
                    )));
                }
                Dependency {
                    name: dep.name.clone(),
                    namespace: Some(dep.namespace.clone()),
                    kind: DependencyKind::ApplySet,
                }
            }
        });
    }
    let set = match names.get(&d.from) {
        Some(Some(name)) => Set::Cluster(ClusterApplySet::new(name, ClusterApplySetSpec(spec))),
        _ => {
            let mut a = ApplySet::new(&d.from.name, spec);
            a.metadata.namespace = Some(d.from.namespace.clone());
            Set::Namespaced(a)
        }
    };
    Converted {
        from: d.from,
        source: d.source,
        set,
    }
}

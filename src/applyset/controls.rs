//! Per-object controls: what an object's labels and annotations tell the apply and the prune,
//! with the meaning Flux's kustomize-controller gives them (its `kustomize.toolkit.fluxcd.io/`
//! keys, read by fluxcd/pkg/ssa), under both that prefix and ours (`applyset.dev/`).
//!
//! Matching is Flux's `AnyInMetadata`: a key matches when the object has it as a label **or**
//! an annotation, its value is not empty and equals the expected value ignoring ASCII case
//! (`Disabled`, `disabled`, `DISABLED`); the key itself is exact.
//!
//! | key (both prefixes) | value | the decision, and on which object (desired = rendered, live = in the cluster) |
//! |---|---|---|
//! | `ssa` | `Ignore` | no apply (desired or live); never pruned (live) |
//! | `reconcile` | `disabled` | no apply (desired or live); never pruned (live) |
//! | `ssa` | `IfNotPresent` | no apply once the object exists (desired only); pruned as any member |
//! | `ssa` | `Merge` | fields of other managers are kept (desired or live) |
//! | `ssa` | `Override` (or none) | fields of `kubectl*` and `before-first-apply` managers are taken over |
//! | `force` | `enabled` | re-created on an immutable-field change (desired or live) |
//! | `prune` | `disabled` | never pruned (live) |
//!
//! Pure: no I/O. The engine reads [`Marks`] of the desired object (the rendered member) and of
//! the live one (the member watches, a LIST or a GET), and asks the functions below.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Map, Value};

/// The two key prefixes, ours first.
pub const PREFIXES: [&str; 2] = ["applyset.dev/", "kustomize.toolkit.fluxcd.io/"];

/// Key suffixes and values (under each of [`PREFIXES`]).
pub const SSA: &str = "ssa";
pub const SSA_OVERRIDE: &str = "Override";
pub const SSA_MERGE: &str = "Merge";
pub const SSA_IF_NOT_PRESENT: &str = "IfNotPresent";
pub const SSA_IGNORE: &str = "Ignore";
pub const PRUNE: &str = "prune";
pub const PRUNE_DISABLED: &str = "disabled";
pub const FORCE: &str = "force";
pub const FORCE_ENABLED: &str = "enabled";
pub const RECONCILE: &str = "reconcile";
pub const RECONCILE_DISABLED: &str = "disabled";

/// What one object's labels and annotations say, key by key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Marks {
    /// `ssa: Merge`.
    pub ssa_merge: bool,
    /// `ssa: IfNotPresent`.
    pub ssa_if_not_present: bool,
    /// `ssa: Ignore`.
    pub ssa_ignore: bool,
    /// `prune: disabled`.
    pub prune_disabled: bool,
    /// `force: enabled`.
    pub force_enabled: bool,
    /// `reconcile: disabled`.
    pub reconcile_disabled: bool,
}

/// Why a declared member is not applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Skip {
    /// `ssa: Ignore` on the desired or the live object.
    Ignore,
    /// `reconcile: disabled` on the desired or the live object.
    ReconcileDisabled,
    /// `ssa: IfNotPresent` on the desired object, and the object exists.
    IfNotPresentExists,
}

impl std::fmt::Display for Skip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Skip::Ignore => "ssa: Ignore",
            Skip::ReconcileDisabled => "reconcile: disabled",
            Skip::IfNotPresentExists => "IfNotPresent, exists",
        })
    }
}

/// Why a prune candidate is kept because of its own marks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Keep {
    /// `prune: disabled`.
    PruneDisabled,
    /// `reconcile: disabled`.
    ReconcileDisabled,
    /// `ssa: Ignore`.
    SsaIgnore,
}

type Strings = BTreeMap<String, String>;

/// Flux's `AnyInMetadata` for one key: `<prefix><suffix>` as a label or an annotation, under
/// either prefix, with a non-empty value equal to `value` ignoring ASCII case.
fn any_in(
    labels: Option<&Strings>,
    annotations: Option<&Strings>,
    suffix: &str,
    value: &str,
) -> bool {
    PREFIXES.iter().any(|prefix| {
        let key = format!("{prefix}{suffix}");
        [labels, annotations].into_iter().flatten().any(|m| {
            m.get(&key)
                .is_some_and(|v| !v.is_empty() && v.eq_ignore_ascii_case(value))
        })
    })
}

impl Marks {
    /// The marks of an object's labels and annotations.
    pub fn of(labels: Option<&Strings>, annotations: Option<&Strings>) -> Self {
        let is = |suffix, value| any_in(labels, annotations, suffix, value);
        Self {
            ssa_merge: is(SSA, SSA_MERGE),
            ssa_if_not_present: is(SSA, SSA_IF_NOT_PRESENT),
            ssa_ignore: is(SSA, SSA_IGNORE),
            prune_disabled: is(PRUNE, PRUNE_DISABLED),
            force_enabled: is(FORCE, FORCE_ENABLED),
            reconcile_disabled: is(RECONCILE, RECONCILE_DISABLED),
        }
    }

    /// The marks of an object's metadata.
    pub fn of_meta(meta: &ObjectMeta) -> Self {
        Self::of(meta.labels.as_ref(), meta.annotations.as_ref())
    }

    /// The marks of an object as JSON (a rendered member); labels or annotations that are not
    /// maps of strings count as absent (the API server refuses them anyway).
    pub fn of_object(object: &Map<String, Value>) -> Self {
        let strings = |field: &str| -> Option<Strings> {
            let map = object.get("metadata")?.get(field)?.as_object()?;
            Some(
                map.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                    .collect(),
            )
        };
        Self::of(strings("labels").as_ref(), strings("annotations").as_ref())
    }

    /// Whether any mark is set (an object with none is applied and pruned as usual).
    pub fn any(&self) -> bool {
        *self != Self::default()
    }
}

/// Whether a declared member is applied: `None` applies it. `live` is `None` when the object
/// does not exist. Ignore is checked before reconcile-disabled, then IfNotPresent (Flux's
/// exclusion selector, then its if-not-present selector).
pub fn skip_apply(desired: Marks, live: Option<Marks>) -> Option<Skip> {
    let live_marks = live.unwrap_or_default();
    if desired.ssa_ignore || live_marks.ssa_ignore {
        return Some(Skip::Ignore);
    }
    if desired.reconcile_disabled || live_marks.reconcile_disabled {
        return Some(Skip::ReconcileDisabled);
    }
    if desired.ssa_if_not_present && live.is_some() {
        return Some(Skip::IfNotPresentExists);
    }
    None
}

/// Whether the fields of `kubectl*` and `before-first-apply` managers are taken over before
/// the apply (Override, the default): not when Merge is on the desired or the live object.
pub fn overrides_managers(desired: Marks, live: Marks) -> bool {
    !(desired.ssa_merge || live.ssa_merge)
}

/// Whether an immutable-field change re-creates the object: `force: enabled` on the desired or
/// the live object (the engine's own ownership rules still apply).
pub fn force_recreate(desired: Marks, live: Marks) -> bool {
    desired.force_enabled || live.force_enabled
}

/// Whether a prune candidate is kept for its own (live) marks. IfNotPresent does not keep it.
pub fn keep_on_prune(live: Marks) -> Option<Keep> {
    if live.prune_disabled {
        Some(Keep::PruneDisabled)
    } else if live.reconcile_disabled {
        Some(Keep::ReconcileDisabled)
    } else if live.ssa_ignore {
        Some(Keep::SsaIgnore)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> Strings {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn both_prefixes_labels_and_annotations_any_case() {
        for prefix in PREFIXES {
            let key = format!("{prefix}ssa");
            for value in ["Ignore", "ignore", "IGNORE"] {
                let m = map(&[(key.as_str(), value)]);
                assert!(Marks::of(Some(&m), None).ssa_ignore, "label {key}={value}");
                assert!(
                    Marks::of(None, Some(&m)).ssa_ignore,
                    "annotation {key}={value}"
                );
            }
        }
    }

    #[test]
    fn key_is_exact_and_empty_never_matches() {
        for (k, v) in [
            ("Applyset.dev/ssa", "Ignore"),
            ("applyset.dev/ssa ", "Ignore"),
            ("example.com/ssa", "Ignore"),
            ("applyset.dev/ssa", ""),
            ("applyset.dev/ssa", " Ignore"),
        ] {
            let m = map(&[(k, v)]);
            assert!(!Marks::of(Some(&m), Some(&m)).any(), "{k}={v:?}");
        }
    }

    #[test]
    fn every_key_is_read() {
        let cases = [
            (
                "ssa",
                "Merge",
                Marks {
                    ssa_merge: true,
                    ..Marks::default()
                },
            ),
            (
                "ssa",
                "IfNotPresent",
                Marks {
                    ssa_if_not_present: true,
                    ..Marks::default()
                },
            ),
            (
                "ssa",
                "Ignore",
                Marks {
                    ssa_ignore: true,
                    ..Marks::default()
                },
            ),
            ("ssa", "Override", Marks::default()),
            (
                "prune",
                "disabled",
                Marks {
                    prune_disabled: true,
                    ..Marks::default()
                },
            ),
            (
                "force",
                "enabled",
                Marks {
                    force_enabled: true,
                    ..Marks::default()
                },
            ),
            (
                "reconcile",
                "disabled",
                Marks {
                    reconcile_disabled: true,
                    ..Marks::default()
                },
            ),
            ("prune", "enabled", Marks::default()),
            ("reconcile", "enabled", Marks::default()),
        ];
        for prefix in PREFIXES {
            for (suffix, value, want) in cases {
                let m = map(&[(format!("{prefix}{suffix}").as_str(), value)]);
                assert_eq!(Marks::of(None, Some(&m)), want, "{prefix}{suffix}={value}");
            }
        }
    }

    #[test]
    fn marks_of_a_rendered_object() {
        let object = serde_json::json!({
            "metadata": {
                "labels": {"kustomize.toolkit.fluxcd.io/prune": "Disabled"},
                "annotations": {"applyset.dev/force": "enabled", "n": 3}
            }
        });
        let Value::Object(object) = object else {
            unreachable!()
        };
        let marks = Marks::of_object(&object);
        assert!(marks.prune_disabled && marks.force_enabled);
        assert!(!Marks::of_object(&Map::new()).any());
    }

    #[test]
    fn skip_apply_follows_flux() {
        let none = Marks::default();
        let ignore = Marks {
            ssa_ignore: true,
            ..none
        };
        let disabled = Marks {
            reconcile_disabled: true,
            ..none
        };
        let if_not_present = Marks {
            ssa_if_not_present: true,
            ..none
        };
        assert_eq!(skip_apply(none, None), None);
        assert_eq!(skip_apply(none, Some(none)), None);
        assert_eq!(skip_apply(ignore, None), Some(Skip::Ignore));
        assert_eq!(skip_apply(none, Some(ignore)), Some(Skip::Ignore));
        assert_eq!(skip_apply(disabled, None), Some(Skip::ReconcileDisabled));
        assert_eq!(
            skip_apply(none, Some(disabled)),
            Some(Skip::ReconcileDisabled)
        );
        // IfNotPresent counts on the desired object only, and only once it exists.
        assert_eq!(skip_apply(if_not_present, None), None);
        assert_eq!(
            skip_apply(if_not_present, Some(none)),
            Some(Skip::IfNotPresentExists)
        );
        assert_eq!(skip_apply(none, Some(if_not_present)), None);
        let both = Marks {
            ssa_ignore: true,
            reconcile_disabled: true,
            ..none
        };
        assert_eq!(skip_apply(both, None), Some(Skip::Ignore));
    }

    #[test]
    fn override_force_and_prune() {
        let none = Marks::default();
        let merge = Marks {
            ssa_merge: true,
            ..none
        };
        assert!(overrides_managers(none, none));
        assert!(!overrides_managers(merge, none));
        assert!(!overrides_managers(none, merge));
        let force = Marks {
            force_enabled: true,
            ..none
        };
        assert!(!force_recreate(none, none));
        assert!(force_recreate(force, none) && force_recreate(none, force));
        assert_eq!(keep_on_prune(none), None);
        assert_eq!(
            keep_on_prune(Marks {
                prune_disabled: true,
                ..none
            }),
            Some(Keep::PruneDisabled)
        );
        assert_eq!(
            keep_on_prune(Marks {
                reconcile_disabled: true,
                ..none
            }),
            Some(Keep::ReconcileDisabled)
        );
        assert_eq!(
            keep_on_prune(Marks {
                ssa_ignore: true,
                ..none
            }),
            Some(Keep::SsaIgnore)
        );
        assert_eq!(
            keep_on_prune(Marks {
                ssa_if_not_present: true,
                ..none
            }),
            None
        );
    }
}

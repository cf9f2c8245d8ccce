//! What a handover that stopped leaves behind, and how to go on or back ([`Left`]'s display:
//! the commands to run, in order).
//!
//! Pure: no I/O.

use applyset_operator::convert::FluxRef;

use super::checks;

/// The set applied by a handover: how kubectl names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AppliedSet {
    /// `applyset/NAME` or `clusterapplyset/NAME` (as the plugin names it).
    pub shown: String,
    /// `applysets.applyset.dev NAME -n NS` or `clusterapplysets.applyset.dev NAME` (kubectl).
    pub kubectl: String,
}

/// What is left, and how to go on or back, after a handover stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Left {
    /// Nothing was changed.
    Unchanged,
    /// The Kustomization is suspended (and maybe the set applied): `original` is what it had.
    Suspended {
        kustomization: FluxRef,
        original: checks::Original,
        set: Option<AppliedSet>,
    },
    /// The Kustomization is being deleted, suspended with `Orphan`: its finalizer deletes
    /// nothing; the set holds the objects, pinned (`sources`: as in [`Left::Pinned`]).
    Deleting {
        kustomization: FluxRef,
        set: AppliedSet,
        sources: String,
    },
    /// The Kustomization is gone and the set holds the objects, but its sources are still
    /// pinned to the revision Flux applied: `sources` is the converted `spec.sources` (JSON).
    Pinned { set: AppliedSet, sources: String },
}

impl std::fmt::Display for Left {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Left::Unchanged => write!(f, "nothing was changed"),
            Left::Suspended {
                kustomization: k,
                original,
                set,
            } => suspended(f, k, original, set.as_ref()),
            Left::Deleting {
                kustomization: k,
                set,
                sources,
            } => write!(
                f,
                "{k} is being deleted, suspended with deletionPolicy: Orphan, so its finalizer deletes nothing; \
kustomize-controller removes the finalizer: check that it runs (`kubectl -n {} get kustomization {} -o yaml`); {} already holds the objects, \
its sources pinned to the revision Flux applied: once the Kustomization is gone, follow the branch or tag again with {}",
                k.namespace,
                k.name,
                set.shown,
                unpin(set, sources)
            ),
            Left::Pinned { set, sources } => write!(
                f,
                "the Kustomization is gone and {} holds its objects, but its sources are still pinned to the revision Flux applied: \
to follow the branch or tag again, {}",
                set.shown,
                unpin(set, sources)
            ),
        }
    }
}

/// The command that gives the set its converted sources back.
fn unpin(set: &AppliedSet, sources: &str) -> String {
    format!(
        "`kubectl patch {} --type=merge -p '{{\"spec\":{{\"sources\":{sources}}}}}'`",
        set.kubectl
    )
}
/// The way back from a suspended Kustomization: the set (if applied) made to orphan its
/// members and deleted, then the Kustomization's own suspend and deletionPolicy restored.
fn suspended(
    f: &mut std::fmt::Formatter<'_>,
    k: &FluxRef,
    original: &checks::Original,
    set: Option<&AppliedSet>,
) -> std::fmt::Result {
    let policy = original
        .deletion_policy
        .as_ref()
        .map_or_else(|| "null".to_owned(), |p| format!("{p:?}"));
    let suspend = original.suspend;
    let annotation = checks::ANNOTATION_ORIGINAL;
    write!(
        f,
        "{k} is suspended (spec.deletionPolicy: Orphan) and in place; nothing was deleted. \
To go on: fix the cause and run the same command again. To go back: "
    )?;
    if let Some(set) = set {
        write!(
            f,
            "`kubectl patch {} --type=merge -p '{{\"spec\":{{\"deletionPolicy\":\"Orphan\"}}}}'`, then `kubectl delete {}` (it leaves its members in place), then ",
            set.kubectl, set.kubectl
        )?;
    }
    write!(
        f,
        "`kubectl -n {} patch kustomizations.kustomize.toolkit.fluxcd.io {} --type=merge -p '{{\"metadata\":{{\"annotations\":{{\"{annotation}\":null}}}},\"spec\":{{\"suspend\":{suspend},\"deletionPolicy\":{policy}}}}}'` (or `flux resume kustomization {} -n {}`, which leaves deletionPolicy Orphan)",
        k.namespace, k.name, k.name, k.namespace
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn web() -> FluxRef {
        FluxRef {
            kind: "Kustomization".into(),
            namespace: "team".into(),
            name: "web".into(),
        }
    }

    fn applied() -> AppliedSet {
        AppliedSet {
            shown: "applyset/web".into(),
            kubectl: "applysets.applyset.dev web -n team".into(),
        }
    }

    #[test]
    fn what_is_left_says_how_to_go_back_orphaning_the_set_first() {
        let left = Left::Suspended {
            kustomization: web(),
            original: checks::Original {
                suspend: false,
                deletion_policy: Some("Delete".into()),
            },
            set: Some(applied()),
        };
        let text = left.to_string();
        assert!(
            text.contains("Kustomization team/web is suspended"),
            "{text}"
        );
        let orphan = text
            .find(r#"`kubectl patch applysets.applyset.dev web -n team --type=merge -p '{"spec":{"deletionPolicy":"Orphan"}}'`"#)
            .expect(&text);
        let delete = text
            .find("then `kubectl delete applysets.applyset.dev web -n team`")
            .expect(&text);
        let restore = text
            .find(r#"-p '{"metadata":{"annotations":{"applyset.dev/handover-original":null}},"spec":{"suspend":false,"deletionPolicy":"Delete"}}'"#)
            .expect(&text);
        assert!(orphan < delete && delete < restore, "{text}");
        assert!(
            text.contains("flux resume kustomization web -n team"),
            "{text}"
        );
        let before_apply = Left::Suspended {
            kustomization: web(),
            original: checks::Original {
                suspend: false,
                deletion_policy: None,
            },
            set: None,
        }
        .to_string();
        assert!(!before_apply.contains("Orphan\"}}'"), "{before_apply}");
        assert!(!before_apply.contains("kubectl delete"), "{before_apply}");
        assert!(
            before_apply.contains(r#""deletionPolicy":null"#),
            "{before_apply}"
        );
        let deleting = Left::Deleting {
            kustomization: web(),
            set: applied(),
            sources: "[]".into(),
        }
        .to_string();
        assert!(
            deleting.contains("its finalizer deletes nothing"),
            "{deleting}"
        );
        assert!(
            deleting.ends_with(r#"`kubectl patch applysets.applyset.dev web -n team --type=merge -p '{"spec":{"sources":[]}}'`"#),
            "{deleting}"
        );
        let pinned = Left::Pinned {
            set: applied(),
            sources: r#"[{"git":{"url":"u","ref":{"branch":"main"}}}]"#.into(),
        }
        .to_string();
        assert!(
            pinned.ends_with(r#"`kubectl patch applysets.applyset.dev web -n team --type=merge -p '{"spec":{"sources":[{"git":{"url":"u","ref":{"branch":"main"}}}]}}'`"#),
            "{pinned}"
        );
    }
}

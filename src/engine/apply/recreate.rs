//! Re-creation after an immutable change: a member marked `force: enabled` (on its manifest
//! or its live object, either prefix, label or annotation: see
//! [`crate::applyset::controls`]) whose apply changes a field that cannot change is deleted
//! and created again.
//!
//! Promises: only a refusal the API server gives for an immutable field counts (the exact
//! details apimachinery gives, not a message that mentions immutability); only the set's own
//! object is deleted (its `part-of` label ours and owned by the member field manager), never
//! what prune would keep ([`not_deletable`]), and only that one (UID precondition); a plan
//! deletes nothing and reports it configured.

use std::time::{Duration, Instant};

use kube::{
    Api,
    api::{DeleteParams, DynamicObject},
    core::Status,
};

use super::Options;
use crate::{
    api::MemberRef,
    applyset::{
        LABEL_PART_OF,
        controls::{self, Marks},
    },
    engine::{SetScope, live::label_owned_by, outcome::Outcome},
    kind_order,
    render::Member,
};

/// After an immutable-field error: deletes and re-creates a member marked `force: enabled`
/// (`None`: apply again), else the outcome to report. A plan reports it as configured.
pub(super) async fn recreate_for_immutable(
    api: &Api<DynamicObject>,
    scope: &SetScope,
    member: &Member,
    status: &Status,
    opts: &Options<'_>,
) -> Option<Outcome> {
    if !force_recreate(member, opts) {
        let message = member.withhold_decrypted(format!(
            "{}: {}; annotate the manifest with applyset.dev/force: enabled to allow deleting and re-creating it",
            member.reference, status.message
        ));
        return Some(Outcome::Failed { message });
    }
    if opts.dry_run {
        return Some(Outcome::Configured);
    }
    match recreate(api, scope, &member.reference, opts.deadline).await {
        Ok(()) => None,
        Err(e) => Some(Outcome::Failed {
            message: format!(
                "{}: re-creating after an immutable change: {e}",
                member.reference
            ),
        }),
    }
}

/// Whether `force: enabled` is on the manifest or on the live object as already known (the
/// member watches or the LISTs; no request), under either prefix, as a label or an
/// annotation (see [`controls::force_recreate`]).
fn force_recreate(member: &Member, opts: &Options<'_>) -> bool {
    let desired = Marks {
        force_enabled: member.force_recreate,
        ..Marks::default()
    };
    let live = opts.existing.get(&member.reference).map(|l| l.marks);
    controls::force_recreate(desired, live.unwrap_or_default())
}

/// Deletes the live object — only if it is this set's (its `part-of` label ours and owned
/// by our member field manager) and the rules of deletion allow it (see
/// [`not_deletable`]), and only that one (UID precondition) — and waits until it is gone.
async fn recreate(
    api: &Api<DynamicObject>,
    scope: &SetScope,
    member: &MemberRef,
    deadline: Instant,
) -> Result<(), String> {
    let name = member.name.as_str();
    let Some(live) = api.get_opt(name).await.map_err(|e| e.to_string())? else {
        return Ok(());
    };
    if let Some(why) = not_ours(&live.metadata, &scope.id, &scope.manager) {
        return Err(format!(
            "not deleted: the live object is not this set's ({why}); only objects the set created or adopted are re-created"
        ));
    }
    if let Some(why) = not_deletable(member, &live.metadata, scope.parent.namespace.as_deref()) {
        return Err(format!("not deleted: {why}"));
    }
    let params = DeleteParams::foreground().preconditions(kube::api::Preconditions {
        uid: live.metadata.uid.clone(),
        resource_version: None,
    });
    match api.delete(name, &params).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.is_not_found() => return Ok(()),
        Err(e) => return Err(e.to_string()),
    }
    while Instant::now() < deadline {
        match api.get_opt(name).await {
            Ok(None) => return Ok(()),
            Ok(Some(o)) if o.metadata.uid != live.metadata.uid => return Ok(()),
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
    Err("the old object was still being deleted at the reconcile timeout".into())
}

/// Why a live object is not this set's, if it is not: its `part-of` label is absent or
/// another set's, or our member field manager does not own it.
fn not_ours(meta: &kube::api::ObjectMeta, id: &str, manager: &str) -> Option<String> {
    let label = meta.labels.as_ref().and_then(|l| l.get(LABEL_PART_OF));
    match label {
        None => Some(format!("it has no label {LABEL_PART_OF}")),
        Some(v) if v != id => Some(format!("its label {LABEL_PART_OF} is {v}")),
        Some(_) if !label_owned_by(meta, manager) => Some(format!(
            "its label {LABEL_PART_OF} is not owned by the field manager {manager}"
        )),
        Some(_) => None,
    }
}

/// Why the set may never delete `member` (live metadata `meta`), whoever's it is: the same
/// rules as prune's — an adopted Namespace or CRD (deleting it deletes what others put in it),
/// the Namespace the parent lives in, an object another controller owns. `home`: the
/// parent's namespace.
pub fn not_deletable(
    member: &MemberRef,
    meta: &kube::api::ObjectMeta,
    home: Option<&str>,
) -> Option<String> {
    let (group, kind) = (&member.group, &member.kind);
    let container = kind_order::is_namespace(group, kind) || kind_order::is_crd(group, kind);
    if container && crate::applyset::is_adopted(meta.annotations.as_ref()) {
        return Some(format!(
            "it was adopted (annotation {}); an adopted Namespace or CRD is never deleted",
            crate::applyset::ANNOTATION_ADOPTED
        ));
    }
    if kind_order::is_namespace(group, kind) && home == Some(member.name.as_str()) {
        return Some("it is the Namespace the set lives in".into());
    }
    let owner = meta
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true));
    owner.map(|o| format!("it is controlled by {} {}", o.kind, o.name))
}

/// The details Kubernetes gives a change to a field that cannot change: apimachinery's
/// exported `validation.FieldImmutableErrorMsg` (Jobs' selector, Services' clusterIP, a CRD's
/// scope, …) and the refusal of a change to an `immutable: true` ConfigMap or Secret. The API
/// has no reason or cause type of its own for it (a cause is `FieldValueInvalid` or
/// `FieldValueForbidden` like any bad value), so the detail is the one signal it gives.
const IMMUTABLE_DETAILS: [&str; 2] = [
    "field is immutable",
    "field is immutable when `immutable` is set",
];

/// The detail of a field cause: its message after the type and the value (apimachinery's
/// `field.Error` renders `Invalid value: <value>: <detail>`, `Forbidden: <detail>`).
fn cause_detail(message: &str) -> &str {
    message
        .rsplit_once(": ")
        .map_or(message, |(_, detail)| detail)
}

/// Whether an apply was refused because it changes an immutable field: a 422 `Invalid` with a
/// field cause (the API server always lists them for `Invalid`) whose detail is exactly one
/// of [`IMMUTABLE_DETAILS`] (a value that merely mentions "immutable" is not).
pub(super) fn is_immutable(status: &Status) -> bool {
    let causes = status.details.as_ref().map(|d| d.causes.as_slice());
    status.is_invalid()
        && causes.unwrap_or_default().iter().any(|c| {
            matches!(
                c.reason.as_str(),
                "FieldValueInvalid" | "FieldValueForbidden"
            ) && IMMUTABLE_DETAILS.contains(&cause_detail(&c.message))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::response::{StatusCause, StatusDetails};

    #[test]
    fn a_force_recreate_never_deletes_what_prune_would_keep() {
        let r = |group: &str, kind: &str, name: &str| MemberRef {
            group: group.into(),
            kind: kind.into(),
            namespace: None,
            name: name.into(),
        };
        let meta = |v: serde_json::Value| -> kube::api::ObjectMeta {
            serde_json::from_value(v).expect("meta")
        };
        let adopted = meta(serde_json::json!({"annotations": {"applyset.dev/adopted": "x"}}));
        let plain = meta(serde_json::json!({}));
        let crd = r(
            "apiextensions.k8s.io",
            "CustomResourceDefinition",
            "gadgets.example.com",
        );
        let ns = r("", "Namespace", "team");
        let cm = r("", "ConfigMap", "c");
        let why = not_deletable(&crd, &adopted, None).expect("adopted CRD");
        assert!(why.contains("adopted"), "{why}");
        assert!(
            not_deletable(&ns, &adopted, None).is_some(),
            "adopted Namespace"
        );
        assert!(
            not_deletable(&crd, &plain, None).is_none(),
            "the set's own CRD"
        );
        assert!(
            not_deletable(&cm, &adopted, None).is_none(),
            "only containers"
        );
        let why = not_deletable(&ns, &plain, Some("team")).expect("home");
        assert!(why.contains("lives in"), "{why}");
        assert!(not_deletable(&ns, &plain, Some("other")).is_none());
        let controlled = meta(
            serde_json::json!({"ownerReferences": [{"apiVersion": "apps/v1",
            "kind": "ReplicaSet", "name": "rs", "uid": "u", "controller": true}]}),
        );
        let why = not_deletable(&cm, &controlled, None).expect("controlled");
        assert!(why.contains("ReplicaSet rs"), "{why}");
    }

    fn invalid(causes: Vec<(&str, &str)>) -> Status {
        let mut s = Status::failure("Job.batch \"x\" is invalid", "Invalid").with_code(422);
        s.details = Some(StatusDetails {
            causes: causes
                .into_iter()
                .map(|(reason, message)| StatusCause {
                    reason: reason.into(),
                    message: message.into(),
                    field: "spec.selector".into(),
                })
                .collect(),
            name: "x".into(),
            group: "batch".into(),
            kind: "Job".into(),
            uid: String::new(),
            retry_after_seconds: 0,
        });
        s
    }

    #[test]
    fn immutable_detection() {
        let immutable = "Invalid value: {\"matchLabels\":{\"a\":\"b\"}}: field is immutable";
        assert!(is_immutable(&invalid(vec![(
            "FieldValueInvalid",
            immutable
        )])));
        let configmap = "Forbidden: field is immutable when `immutable` is set";
        assert!(is_immutable(&invalid(vec![(
            "FieldValueForbidden",
            configmap
        )])));
        // A value that mentions immutability is not the detail.
        let mentions = "Invalid value: \"field is immutable\": must be no more than 5 characters";
        assert!(!is_immutable(&invalid(vec![(
            "FieldValueInvalid",
            mentions
        )])));
        // Another invalid value, the text in another kind of cause, no causes, another code.
        assert!(!is_immutable(&invalid(vec![(
            "FieldValueInvalid",
            "Invalid value: \"-\""
        )])));
        assert!(!is_immutable(&invalid(vec![(
            "FieldValueRequired",
            immutable
        )])));
        assert!(!is_immutable(&invalid(vec![])));
        let s = Status::failure("field is immutable", "Invalid").with_code(422);
        assert!(!is_immutable(&s));
        let mut conflict = invalid(vec![("FieldValueInvalid", immutable)]);
        conflict.code = 409;
        conflict.reason = "Conflict".into();
        assert!(!is_immutable(&conflict));
    }
}

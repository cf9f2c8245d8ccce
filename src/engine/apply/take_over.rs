//! Override (`ssa: Override`, the default): the fields of `kubectl*` and `before-first-apply`
//! managers, and of the managers the set names in `spec.takeOverFieldManagers` (exact names,
//! see [`Takers`]), are merged into the set's own Apply entry (one JSON patch of
//! `metadata.managedFields`, as kustomize-controller does), so that the apply that follows
//! reverts what they changed and removes what only they added (Flux's owner labels among
//! them, when kustomize-controller is named).
//!
//! Promises:
//! - No read in the steady state: the apply's answer carries the object's `managedFields`;
//!   only when it shows entries to take over (or Flux's leftover annotations and labels, see
//!   [`field_managers::cleanup_paths`]) is the object patched and applied again (two more
//!   writes, once). An apply refused by a conflict whose managers all look like ones to take
//!   over (a `kubectl edit` of a field the set declares, or a named manager's) costs one
//!   metadata GET more.
//! - Only objects that are already the set's own, or right after the apply that adopted one
//!   ([`after_adoption`]: only when its answer shows an entry of a named manager, so that a
//!   handover completes in one reconcile); never in a dry-run (a plan reports what the apply
//!   would do without it), never when `ssa: Merge` is on the rendered or the live object.
//!   An adoption refused by a conflict (with a named manager too) is never forced: the set
//!   would change a value that manager set, and the member reports the Conflict naming it.
//! - Never on an object whose live marks skip it (`ssa: Ignore`, `reconcile: disabled`, added
//!   while the apply was in flight): nothing is written to a skipped object.
//! - The patch tests the `resourceVersion` it was computed from: a concurrent change makes it
//!   fail (nothing overwritten). After a failed patch the object's metadata is read: only when
//!   its `resourceVersion` moved (a race) is the member applied again and looked at anew, at
//!   most [`ROUNDS`] times; an answer that still shows something to take over then is not
//!   recorded with the member watches, so the next reconcile applies the member again. A patch
//!   refused otherwise (a policy forbidding `managedFields` edits, ...) is logged as a warning
//!   naming the member and the apply's answer is recorded: the steady state sends nothing, and
//!   the fields stay the other managers' until the object changes.
//! - The patch removes `kubectl.kubernetes.io/last-applied-configuration` and Flux v1's
//!   checksum annotations and GC label, as Flux's cleanup does, unless the manifest declares
//!   them; for an object never applied again (see [`super::if_not_present`]), Flux's owner
//!   labels too, unless the manifest declares them ([`patch`]).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta};
use kube::{Api, api::DynamicObject};
use serde_json::{Value, json};

use super::{Answer, Options, apply_body};
use crate::{
    applyset::{
        LABEL_PART_OF,
        controls::{Marks, overrides_managers, skip_apply},
        field_managers::{self, Takers, taken_over_by},
    },
    engine::{SetScope, outcome::Outcome},
    render::Member,
};

/// What [`take_over`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TakeOver {
    /// Nothing to take over (or the object is gone, or Merge is set on it).
    Nothing,
    /// The managers' fields are the set's now.
    Done,
}

/// At most this many take-overs per apply: a `kubectl` change racing the take-over is taken
/// over in the next round; one that keeps racing waits for the next reconcile.
const ROUNDS: usize = 3;

/// A take-over's patch (or the read before it) that failed, with the `resourceVersion` it was
/// computed from (`None` when the read failed).
struct Failure {
    error: kube::Error,
    rv: Option<String>,
}

impl From<kube::Error> for Failure {
    fn from(error: kube::Error) -> Self {
        Self { error, rv: None }
    }
}

/// The managers whose fields the set takes over on `scope`'s members.
pub(super) fn takers<'a>(scope: &'a SetScope, opts: &Options<'a>) -> Takers<'a> {
    Takers::new(&scope.manager, opts.take_over)
}

/// The hash the member watches know an applied body by (`hash`), with the managers the set
/// names when it names any: a change of `spec.takeOverFieldManagers` applies every member
/// again once (its answer shows what to take over), where the watches would otherwise know it
/// unchanged. `hash` itself without names (no cost when unused).
pub(super) fn body_hash(hash: u64, named: &[String]) -> u64 {
    if named.is_empty() {
        return hash;
    }
    let mut h = std::hash::DefaultHasher::new();
    std::hash::Hash::hash(&hash, &mut h);
    std::hash::Hash::hash(named, &mut h);
    std::hash::Hasher::finish(&h)
}

/// Applies a member that is already the set's own (see [`apply_body`]), taking over the fields
/// of `kubectl*` and `before-first-apply` managers (and of the managers the set names) first
/// where the answer or a conflict shows them, and then applying again. Returns the last
/// apply's outcome and answer.
pub(super) async fn apply_overriding(
    api: &Api<DynamicObject>,
    scope: &SetScope,
    member: &Member,
    body: &Value,
    opts: &Options<'_>,
) -> (Outcome, Option<Answer>) {
    let first = apply_body(api, scope, member, body, opts, false).await;
    if opts.dry_run {
        return first;
    }
    override_rounds(api, scope, member, body, opts, first).await
}

/// After an adoption's apply (`adopted`): when its answer shows an entry of a manager the set
/// names (`spec.takeOverFieldManagers`), the object, the set's own now, is taken over as
/// [`apply_overriding`] does and applied again, in the same reconcile. Otherwise (and in a
/// dry-run) `adopted` as it is.
pub(super) async fn after_adoption(
    api: &Api<DynamicObject>,
    scope: &SetScope,
    member: &Member,
    body: &Value,
    opts: &Options<'_>,
    adopted: (Outcome, Option<Answer>),
) -> (Outcome, Option<Answer>) {
    let shows = match &adopted {
        (o, Some(a)) => {
            o.is_applied()
                && a.meta
                    .as_deref()
                    .is_some_and(|m| takers(scope, opts).named_in(m))
        }
        _ => false,
    };
    if opts.dry_run || !shows {
        return adopted;
    }
    override_rounds(api, scope, member, body, opts, adopted).await
}

/// The take-over rounds after an apply of the set's own object (`applied`, its outcome and
/// answer): take over what the answer (or a conflict's read) shows, apply again.
async fn override_rounds(
    api: &Api<DynamicObject>,
    scope: &SetScope,
    member: &Member,
    body: &Value,
    opts: &Options<'_>,
    applied: (Outcome, Option<Answer>),
) -> (Outcome, Option<Answer>) {
    let (mut outcome, mut answer) = applied;
    let takers = takers(scope, opts);
    let desired = Marks::of_object(&member.object);
    let name = &member.reference.name;
    let mut refused = false;
    for _ in 0..ROUNDS {
        let taken = match (&outcome, &answer) {
            (
                o,
                Some(Answer {
                    meta: Some(live), ..
                }),
            ) if o.is_applied() => take_over_known(api, name, takers, live, member).await,
            (Outcome::Conflict { managers, .. }, _) if conflict_takes_over(managers, takers) => {
                take_over_read(api, scope, member, desired, takers).await
            }
            _ => break,
        };
        match taken {
            Ok(TakeOver::Nothing) => break,
            Ok(TakeOver::Done) => {}
            // The object changed since it was read: apply again and look at it anew.
            Err(f) if moved(api, name, f.rv.as_deref()).await => {}
            Err(f) => {
                tracing::warn!(member = %member.reference, error = %f.error, "taking over the fields of other managers was refused; they stay theirs until the object changes");
                refused = true;
                break;
            }
        }
        (outcome, answer) = apply_body(api, scope, member, body, opts, false).await;
    }
    // Still something to take over (a change that kept racing): not recorded as known, so the
    // member watches do not skip the member next time.
    if !refused
        && let Some(a) = answer.as_mut()
        && a.meta
            .as_deref()
            .is_some_and(|live| pending(live, member, takers))
    {
        a.rv = None;
    }
    (outcome, answer)
}

/// Whether the object's `resourceVersion` is no longer `rv` (a race the next round resolves);
/// `false` when it is the same, the object is gone, it cannot be read or `rv` is unknown.
async fn moved(api: &Api<DynamicObject>, name: &str, rv: Option<&str>) -> bool {
    let Some(rv) = rv else {
        return false;
    };
    match api.get_metadata_opt(name).await {
        Ok(Some(now)) => now.metadata.resource_version.as_deref() != Some(rv),
        Ok(None) | Err(_) => false,
    }
}

/// Whether `live` shows something to take over that neither Merge nor a skip mark forbids.
fn pending(live: &ObjectMeta, member: &Member, takers: Takers<'_>) -> bool {
    acts_on(live, Marks::of_object(&member.object), takers)
        && patch(live, &declared(member), takers, false).is_some()
}

/// Whether Override acts on `live` for a member whose manifest carries `desired`: it shows
/// something to take over, Merge is on neither side, and no mark (desired or live) skips it
/// (`ssa: IfNotPresent` aside: an object it skips is taken over once, when it is adopted).
pub(super) fn acts_on(live: &ObjectMeta, desired: Marks, takers: Takers<'_>) -> bool {
    let live_marks = Marks::of_meta(live);
    let desired = Marks {
        ssa_if_not_present: false,
        ..desired
    };
    field_managers::shows_work_for(live, takers)
        && overrides_managers(desired, live_marks)
        && skip_apply(desired, Some(live_marks)).is_none()
}

/// The labels and annotations the member declares.
pub(super) fn declared(member: &Member) -> ObjectMeta {
    member
        .object
        .get("metadata")
        .and_then(|m| serde_json::from_value(m.clone()).ok())
        .unwrap_or_default()
}

/// Whether a conflict may be one a take-over resolves: every manager it names looks like a
/// manager [`field_managers::takes_over`] selects, or is one the set names (the operation is
/// checked on the object).
fn conflict_takes_over(managers: &[String], takers: Takers<'_>) -> bool {
    !managers.is_empty()
        && managers.iter().all(|m| {
            takers.names_manager(m)
                || field_managers::PREFIXES
                    .iter()
                    .any(|(prefix, _)| m.starts_with(prefix))
        })
}

/// After a conflict: reads the object's metadata and takes over when the object is the set's
/// own (our `part-of` label, owned by our member manager) and Merge is on neither side.
async fn take_over_read(
    api: &Api<DynamicObject>,
    scope: &SetScope,
    member: &Member,
    desired: Marks,
    takers: Takers<'_>,
) -> Result<TakeOver, Failure> {
    let Some(live) = api.get_metadata_opt(&member.reference.name).await? else {
        return Ok(TakeOver::Nothing);
    };
    if !overrides_managers(desired, Marks::of_meta(&live.metadata))
        || !is_ours(&live.metadata, &scope.id, &scope.manager)
    {
        return Ok(TakeOver::Nothing);
    }
    take_over_known(api, &member.reference.name, takers, &live.metadata, member).await
}

/// Whether the object carries the set's `part-of` label under the set's member manager.
pub(super) fn is_ours(meta: &ObjectMeta, id: &str, manager: &str) -> bool {
    let labelled = meta
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_PART_OF))
        .is_some_and(|v| v == id);
    let field = format!("f:{LABEL_PART_OF}");
    labelled
        && meta.managed_fields.iter().flatten().any(|e| {
            e.manager.as_deref() == Some(manager)
                && e.fields_v1
                    .as_ref()
                    .and_then(|f| f.0.pointer("/f:metadata/f:labels"))
                    .and_then(|labels| labels.get(&field))
                    .is_some()
        })
}

/// Takes over what `live` (the object as last seen, with its `resourceVersion`) shows, unless
/// Merge is set or a live mark skips the object; one JSON patch, or none when there is nothing
/// to take over.
async fn take_over_known(
    api: &Api<DynamicObject>,
    name: &str,
    takers: Takers<'_>,
    live: &ObjectMeta,
    member: &Member,
) -> Result<TakeOver, Failure> {
    if !acts_on(live, Marks::of_object(&member.object), takers) {
        return Ok(TakeOver::Nothing);
    }
    let Some(patch) = patch(live, &declared(member), takers, false) else {
        return Ok(TakeOver::Nothing);
    };
    send(api, name, takers.owner, &patch)
        .await
        .map_err(|error| Failure {
            error,
            rv: live.resource_version.clone(),
        })?;
    Ok(TakeOver::Done)
}

/// The take-over's JSON patch: a test of the `resourceVersion`, the cleanup removals and the
/// managed fields replaced; `None` when there is nothing to change. With `flux_labels`,
/// Flux's owner labels the manifest does not declare are removed too, with their ownership
/// (for an object the set never applies again, whose next apply cannot remove them).
pub(crate) fn patch(
    live: &ObjectMeta,
    declared: &ObjectMeta,
    takers: Takers<'_>,
    flux_labels: bool,
) -> Option<Value> {
    let managed: &[ManagedFieldsEntry] = live.managed_fields.as_deref().unwrap_or_default();
    let mut replaced = taken_over_by(managed, takers);
    let mut removals = field_managers::cleanup_paths(live, declared);
    let keys: Vec<&str> = match flux_labels {
        true => field_managers::flux_labels_to_remove(live, declared),
        false => Vec::new(),
    };
    if !keys.is_empty() {
        let entries = replaced.unwrap_or_else(|| managed.to_vec());
        replaced = Some(field_managers::without_labels(entries, &keys));
        removals.extend(field_managers::label_paths(&keys));
    }
    let rv = live.resource_version.as_deref()?;
    if replaced.is_none() && removals.is_empty() {
        return None;
    }
    let mut ops = vec![json!({"op": "test", "path": "/metadata/resourceVersion", "value": rv})];
    ops.extend(removals.iter().map(|p| json!({"op": "remove", "path": p})));
    if let Some(entries) = replaced {
        ops.push(json!({"op": "replace", "path": "/metadata/managedFields", "value": entries}));
    }
    Some(Value::Array(ops))
}

/// Sends a JSON patch (RFC 6902) as `manager`.
pub(super) async fn send(
    api: &Api<DynamicObject>,
    name: &str,
    manager: &str,
    patch: &Value,
) -> kube::Result<()> {
    let manager: String = url::form_urlencoded::byte_serialize(manager.as_bytes()).collect();
    let uri = format!("{}/{name}?fieldManager={manager}", api.resource_url());
    let body = serde_json::to_vec(patch).map_err(kube::Error::SerdeError)?;
    let request = http::Request::patch(uri)
        .header(http::header::CONTENT_TYPE, "application/json-patch+json")
        .body(body)
        .map_err(kube::Error::HttpError)?;
    api.clone()
        .into_client()
        .request::<ObjectMeta>(request)
        .await
        .map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::FieldsV1;

    fn entry(manager: &str, operation: &str, fields: Value) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            manager: Some(manager.into()),
            operation: Some(operation.into()),
            fields_v1: Some(FieldsV1(fields)),
            ..Default::default()
        }
    }

    #[test]
    fn conflicts_of_kubectl_managers_only_are_taken_over() {
        let names = |n: &[&str]| n.iter().map(|s| (*s).to_string()).collect::<Vec<_>>();
        let me = Takers::new("me", &[]);
        assert!(conflict_takes_over(&names(&["kubectl-edit"]), me));
        assert!(conflict_takes_over(
            &names(&["kubectl", "before-first-apply"]),
            me
        ));
        assert!(!conflict_takes_over(&names(&["kubectl-edit", "helm"]), me));
        assert!(!conflict_takes_over(&[], me));
    }

    #[test]
    fn naming_managers_changes_the_known_hash_and_no_name_keeps_it() {
        let named = |n: &[&str]| n.iter().map(|s| (*s).to_string()).collect::<Vec<_>>();
        assert_eq!(body_hash(42, &[]), 42);
        let flux = body_hash(42, &named(&["kustomize-controller"]));
        assert_ne!(flux, 42);
        assert_eq!(flux, body_hash(42, &named(&["kustomize-controller"])));
        assert_ne!(flux, body_hash(42, &named(&["helm-controller"])));
        assert_ne!(flux, body_hash(43, &named(&["kustomize-controller"])));
    }

    #[test]
    fn conflicts_of_named_managers_are_taken_over_by_exact_name() {
        let names = |n: &[&str]| n.iter().map(|s| (*s).to_string()).collect::<Vec<_>>();
        let named = names(&["kustomize-controller"]);
        let takers = Takers::new("me", &named);
        assert!(conflict_takes_over(
            &names(&["kustomize-controller"]),
            takers
        ));
        assert!(conflict_takes_over(
            &names(&["kustomize-controller", "kubectl-edit"]),
            takers
        ));
        assert!(!conflict_takes_over(
            &names(&["kustomize-controller-x"]),
            takers
        ));
        assert!(!conflict_takes_over(&names(&["kustomize"]), takers));
        assert!(!conflict_takes_over(
            &names(&["kustomize-controller"]),
            Takers::new("me", &[])
        ));
    }

    #[test]
    fn the_patch_tests_the_version_and_removes_leftovers() {
        let live = ObjectMeta {
            resource_version: Some("42".into()),
            annotations: Some(
                [(
                    "kubectl.kubernetes.io/last-applied-configuration".to_string(),
                    "{}".to_string(),
                )]
                .into(),
            ),
            managed_fields: Some(vec![
                entry("me", "Apply", json!({"f:data": {"f:a": {}}})),
                entry("kubectl-edit", "Update", json!({"f:data": {"f:b": {}}})),
            ]),
            ..Default::default()
        };
        let p = patch(&live, &ObjectMeta::default(), Takers::new("me", &[]), false).unwrap();
        assert_eq!(
            p[0],
            json!({"op": "test", "path": "/metadata/resourceVersion", "value": "42"})
        );
        assert_eq!(
            p[1],
            json!({"op": "remove", "path": "/metadata/annotations/kubectl.kubernetes.io~1last-applied-configuration"})
        );
        assert_eq!(p[2]["op"], "replace");
        assert_eq!(
            p[2]["value"][0]["fieldsV1"],
            json!({"f:data": {"f:a": {}, "f:b": {}}})
        );
        assert_eq!(p.as_array().unwrap().len(), 3);
    }

    #[test]
    fn a_skip_mark_or_merge_on_either_side_stops_override() {
        let live = |key: &str, value: &str| ObjectMeta {
            resource_version: Some("1".into()),
            annotations: Some([(key.to_string(), value.to_string())].into()),
            managed_fields: Some(vec![
                entry("me", "Apply", json!({"f:data": {"f:a": {}}})),
                entry("kubectl-edit", "Update", json!({"f:data": {"f:b": {}}})),
            ]),
            ..Default::default()
        };
        let none = Marks::default();
        let me = Takers::new("me", &[]);
        assert!(acts_on(&live("example.com/x", "y"), none, me));
        for (key, value) in [
            ("applyset.dev/ssa", "Ignore"),
            ("kustomize.toolkit.fluxcd.io/reconcile", "Disabled"),
            ("applyset.dev/ssa", "Merge"),
        ] {
            assert!(!acts_on(&live(key, value), none, me), "{key}: {value}");
        }
        let ignored = Marks {
            ssa_ignore: true,
            ..Marks::default()
        };
        assert!(!acts_on(&live("example.com/x", "y"), ignored, me));
        // IfNotPresent on the manifest does not stop it (an adopted object is taken over once).
        let if_not_present = Marks {
            ssa_if_not_present: true,
            ..Marks::default()
        };
        assert!(acts_on(&live("example.com/x", "y"), if_not_present, me));
    }

    #[test]
    fn nothing_to_take_over_is_no_patch() {
        let live = ObjectMeta {
            resource_version: Some("1".into()),
            managed_fields: Some(vec![
                entry("me", "Apply", json!({})),
                entry("helm", "Update", json!({})),
            ]),
            ..Default::default()
        };
        assert_eq!(
            patch(&live, &ObjectMeta::default(), Takers::new("me", &[]), true),
            None
        );
    }

    /// An object as kustomize-controller left it, once the set's metadata-only apply made it
    /// the set's: Flux's labels, its Apply entry, the set's entry owning the part-of label.
    fn adopted_from_flux() -> ObjectMeta {
        let labels = [
            ("kustomize.toolkit.fluxcd.io/name", "app"),
            ("kustomize.toolkit.fluxcd.io/namespace", "flux-system"),
            (LABEL_PART_OF, "id"),
        ];
        ObjectMeta {
            resource_version: Some("7".into()),
            labels: Some(labels.map(|(k, v)| (k.to_string(), v.to_string())).into()),
            managed_fields: Some(vec![
                entry(
                    "kustomize-controller",
                    "Apply",
                    json!({"f:data": {"f:a": {}}, "f:metadata": {"f:labels": {
                        "f:kustomize.toolkit.fluxcd.io/name": {},
                        "f:kustomize.toolkit.fluxcd.io/namespace": {}}}}),
                ),
                entry(
                    "me",
                    "Apply",
                    json!({"f:metadata": {"f:labels": {format!("f:{LABEL_PART_OF}"): {}}}}),
                ),
            ]),
            ..Default::default()
        }
    }

    #[test]
    fn a_flux_object_kept_as_it_is_loses_flux_labels_in_the_patch() {
        let named = vec!["kustomize-controller".to_string()];
        let takers = Takers::new("me", &named);
        let p = patch(&adopted_from_flux(), &ObjectMeta::default(), takers, true).unwrap();
        let ops = p.as_array().unwrap();
        assert_eq!(ops[0]["op"], "test");
        assert_eq!(ops[0]["value"], "7");
        assert_eq!(
            ops[1],
            json!({"op": "remove", "path": "/metadata/labels/kustomize.toolkit.fluxcd.io~1name"})
        );
        assert_eq!(
            ops[2],
            json!({"op": "remove", "path": "/metadata/labels/kustomize.toolkit.fluxcd.io~1namespace"})
        );
        assert_eq!(ops[3]["op"], "replace");
        let entries = ops[3]["value"].as_array().unwrap();
        assert_eq!(entries.len(), 1, "{entries:?}");
        assert_eq!(entries[0]["manager"], "me");
        assert_eq!(
            entries[0]["fieldsV1"],
            json!({"f:data": {"f:a": {}}, "f:metadata": {"f:labels": {format!("f:{LABEL_PART_OF}"): {}}}})
        );
        assert_eq!(ops.len(), 4);
    }

    #[test]
    fn flux_labels_the_manifest_declares_are_kept_with_their_ownership() {
        let named = vec!["kustomize-controller".to_string()];
        let takers = Takers::new("me", &named);
        let declared = ObjectMeta {
            labels: Some(
                [(
                    "kustomize.toolkit.fluxcd.io/name".to_string(),
                    "app".to_string(),
                )]
                .into(),
            ),
            ..Default::default()
        };
        let p = patch(&adopted_from_flux(), &declared, takers, true).unwrap();
        let ops = p.as_array().unwrap();
        assert_eq!(
            ops[1],
            json!({"op": "remove", "path": "/metadata/labels/kustomize.toolkit.fluxcd.io~1namespace"})
        );
        assert_eq!(ops[2]["op"], "replace");
        let labels = &ops[2]["value"][0]["fieldsV1"]["f:metadata"]["f:labels"];
        assert!(labels.get("f:kustomize.toolkit.fluxcd.io/name").is_some());
        assert!(
            labels
                .get("f:kustomize.toolkit.fluxcd.io/namespace")
                .is_none()
        );
        assert_eq!(ops.len(), 3);
    }

    #[test]
    fn without_named_managers_flux_labels_stay_to_the_next_apply() {
        let named = vec!["kustomize-controller".to_string()];
        let takers = Takers::new("me", &named);
        let p = patch(&adopted_from_flux(), &ObjectMeta::default(), takers, false).unwrap();
        let ops = p.as_array().unwrap();
        assert_eq!(ops.len(), 2, "a test and the managed fields: {ops:?}");
        let fields = &ops[1]["value"][0]["fieldsV1"]["f:metadata"]["f:labels"];
        assert!(fields.get("f:kustomize.toolkit.fluxcd.io/name").is_some());
        // A set that names no manager takes over nothing of kustomize-controller's.
        let none = Takers::new("me", &[]);
        assert_eq!(
            patch(&adopted_from_flux(), &ObjectMeta::default(), none, false),
            None
        );
    }

    #[test]
    fn ours_needs_our_label_under_our_manager() {
        let fields = json!({"f:metadata": {"f:labels": {format!("f:{LABEL_PART_OF}"): {}}}});
        let mut meta = ObjectMeta {
            labels: Some([(LABEL_PART_OF.to_string(), "id".to_string())].into()),
            managed_fields: Some(vec![entry("me", "Apply", fields.clone())]),
            ..Default::default()
        };
        assert!(is_ours(&meta, "id", "me"));
        assert!(!is_ours(&meta, "other", "me"));
        assert!(!is_ours(&meta, "id", "you"));
        meta.managed_fields = Some(vec![entry("me", "Apply", json!({}))]);
        assert!(!is_ours(&meta, "id", "me"));
    }
}

//! `ssa: IfNotPresent` on a member whose object exists but is not the set's, when the set may
//! adopt it (`spec.adoptExisting`, or `applyset.dev/adopt: enabled` on the manifest) and the
//! object is another tool's to hand over (a manager in `spec.takeOverFieldManagers` owns
//! fields on it, or it carries Flux's owner labels; see [`handed_over`]): the object is made
//! the set's without its data being touched, so that a handover from another tool leaves no
//! object behind (Flux's Kustomization listed it in its inventory). Any other existing object
//! (one made by hand) is skipped as before, never adopted (and so never pruned), as is one on
//! which the set's own member manager owns more than the `part-of` label (the metadata-only
//! apply would release that data and the server remove it).
//!
//! Promises:
//! - The object becomes the set's by a metadata-only apply: `apiVersion`, `kind`, name,
//!   namespace and the set's `part-of` label ([`metadata_only`]), as the set's member manager,
//!   never forced (a Namespace or CRD is marked adopted first, as any adoption). Its data is
//!   neither sent nor changed; it is reported Adopted (in a plan too, by the dry-run of the
//!   same apply).
//! - When the set names managers (`spec.takeOverFieldManagers`) and the apply's answer shows
//!   an entry of one of them: one JSON patch takes over their fields (and those of `kubectl*`
//!   and `before-first-apply`) into the set's Apply entry and removes Flux's owner labels
//!   with their ownership (the object is never applied again, so no apply would remove
//!   them). The patch tests the `resourceVersion`; after a race (the object's
//!   `resourceVersion` moved) its metadata is read again and the patch computed anew, at most
//!   [`ROUNDS`] times, and only while the object is still the set's. A patch refused
//!   otherwise is logged as a warning naming the member; the object stays the set's.
//! - Never re-applied with that metadata-only body (it would drop the data the set now owns):
//!   later reconciles skip the member (IfNotPresent, exists) as before. Not with `ssa: Merge`
//!   or a live skip mark (`ssa: Ignore`, `reconcile: disabled`): the take-over is left out.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Api, api::DynamicObject};
use serde_json::{Map, Value, json};

use super::{Answer, Options, apply_body, take_over};
use crate::{
    applyset::{LABEL_PART_OF, controls::Marks, field_managers::Takers},
    engine::{SetScope, adopt, outcome::Outcome},
    render::Member,
};

/// At most this many patches (a race moves the object between the read and the patch).
const ROUNDS: usize = 3;

/// Whether an IfNotPresent member is adopted rather than skipped: its object exists without
/// being the set's (`lookup`), adoption is allowed, and the object is another tool's to hand
/// over ([`handed_over`]).
pub(super) fn adoptable(member: &Member, opts: &Options<'_>, lookup: &adopt::Lookup) -> bool {
    lookup.unlabelled.contains(&member.reference)
        && (opts.adopt_existing || member.adopt)
        && lookup
            .holders
            .get(&member.reference)
            .is_some_and(|h| handed_over(h, opts.take_over))
}

/// Whether an existing object held by `holders` is handed over to the set by its metadata
/// only: a manager the set names (`named`) owns fields on it, or it carries Flux's owner
/// labels and the set names `kustomize-controller` (an object made by hand, or one Flux
/// still claims for a set that does not replace it, is skipped: adopted, it would be pruned
/// later); and the set's own member manager owns nothing on it but the `part-of` label (the
/// metadata-only apply would release the rest, and the server remove it).
pub(super) fn handed_over(holders: &adopt::Holders, named: &[String]) -> bool {
    let replaces_flux = named.iter().any(|m| m == FLUX_FIELD_MANAGER);
    let claimed = (holders.flux_labelled && replaces_flux)
        || holders.managers.iter().any(|m| named.contains(m));
    claimed && !holders.ours_beyond_label
}

/// kustomize-controller's field manager, whose owner labels hand an object over only to a
/// set that names it.
const FLUX_FIELD_MANAGER: &str = "kustomize-controller";

/// The body that makes the object the set's and nothing else: `apiVersion`, `kind`,
/// `metadata.name`, `metadata.namespace` (when the member has one) and the `part-of` label.
pub(super) fn metadata_only(member: &Member, id: &str) -> Value {
    let mut meta = Map::new();
    meta.insert("name".into(), json!(member.reference.name));
    if let Some(ns) = &member.reference.namespace {
        meta.insert("namespace".into(), json!(ns));
    }
    meta.insert("labels".into(), json!({ LABEL_PART_OF: id }));
    json!({
        "apiVersion": member.resource.api_version,
        "kind": member.resource.kind,
        "metadata": meta,
    })
}

/// Adopts the member by [`metadata_only`], then takes over the named managers' fields (not
/// in a dry-run). Adopted, or the apply's outcome when it failed.
pub(super) async fn adopt(
    api: &Api<DynamicObject>,
    scope: &SetScope,
    member: &Member,
    opts: &Options<'_>,
) -> (Outcome, Option<Answer>) {
    let body = metadata_only(member, &scope.id);
    let (outcome, mut answer) = apply_body(api, scope, member, &body, opts, false).await;
    if !outcome.is_applied() {
        return (outcome, answer);
    }
    let takers = take_over::takers(scope, opts);
    if !opts.dry_run
        && let Some(a) = answer.as_mut()
        && let Some(live) = a.meta.as_deref()
        && take_over_adopted(api, scope, member, takers, live.clone()).await
    {
        // The object moved past the answer: nothing of it is recorded as known.
        a.rv = None;
    }
    (Outcome::Adopted, answer)
}

/// Takes over what `live` shows of the named managers, with Flux's owner labels removed (see
/// the module). Whether a patch was applied.
async fn take_over_adopted(
    api: &Api<DynamicObject>,
    scope: &SetScope,
    member: &Member,
    takers: Takers<'_>,
    mut live: ObjectMeta,
) -> bool {
    let name = &member.reference.name;
    let declared = take_over::declared(member);
    for _ in 0..ROUNDS {
        let Some(patch) = patch_for(&live, &declared, member, takers) else {
            return false;
        };
        let error = match take_over::send(api, name, takers.owner, &patch).await {
            Ok(()) => return true,
            Err(e) => e,
        };
        // A race moves the resourceVersion: look again, while the object is still the set's.
        match api.get_metadata_opt(name).await {
            Ok(Some(now))
                if now.metadata.resource_version != live.resource_version
                    && take_over::is_ours(&now.metadata, &scope.id, &scope.manager) =>
            {
                live = now.metadata;
            }
            _ => {
                tracing::warn!(member = %member.reference, error = %error, "taking over the fields of other managers on an adopted IfNotPresent object was refused; they stay theirs");
                return false;
            }
        }
    }
    tracing::warn!(member = %member.reference, "taking over the fields of other managers on an adopted IfNotPresent object kept racing with other writes; they stay theirs");
    false
}

/// The patch for an adopted IfNotPresent object as `live` shows it: only when it carries an
/// entry of a named manager and nothing (Merge, a skip mark) forbids a take-over.
fn patch_for(
    live: &ObjectMeta,
    declared: &ObjectMeta,
    member: &Member,
    takers: Takers<'_>,
) -> Option<Value> {
    let acts =
        takers.named_in(live) && take_over::acts_on(live, Marks::of_object(&member.object), takers);
    acts.then(|| take_over::patch(live, declared, takers, true))
        .flatten()
}

#[cfg(test)]
mod tests;

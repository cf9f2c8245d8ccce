//! Override (`ssa: Override`, the default): which field managers' fields the set takes over
//! before it applies, and the object's `managedFields` once taken over, as fluxcd/pkg/ssa's
//! `PatchReplaceFieldsManagers` computes them for kustomize-controller.
//!
//! STUB (to be written): the pure rules only; the request is `engine::apply::take_over`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta};

/// Whether `entry` is one the set takes over (a `kubectl*` Apply or Update entry, or a
/// `before-first-apply` Update entry, never one of a subresource).
pub fn takes_over(_entry: &ManagedFieldsEntry) -> bool {
    false
}

/// Whether the object has any entry the set would take over (what the member watches note of
/// each labelled object, so that a member with none costs no read).
pub fn has_takeover(meta: &ObjectMeta) -> bool {
    meta.managed_fields.iter().flatten().any(takes_over)
}

/// The `managedFields` once every entry [`takes_over`] matches is merged into `owner`'s Apply
/// entry; `None` when there is nothing to take over.
pub fn taken_over(_managed: &[ManagedFieldsEntry], _owner: &str) -> Option<Vec<ManagedFieldsEntry>> {
    None
}

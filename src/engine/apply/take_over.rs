//! Override's request: before a member is applied, the fields of `kubectl*` and
//! `before-first-apply` managers are merged into the set's own Apply entry (one JSON patch of
//! `metadata.managedFields`, as kustomize-controller does), so that the apply that follows
//! reverts what they changed and removes what only they added.
//!
//! STUB (to be written).
#![allow(dead_code)]

use kube::{Api, api::DynamicObject};

/// What [`take_over`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TakeOver {
    /// Nothing to take over (or the object is gone).
    Nothing,
    /// The managers' fields are the set's now.
    Done,
}

/// Takes over the fields of the object `name` that [`crate::applyset::field_managers::takes_over`]
/// selects, as the set's member field manager `manager`; reads the object's metadata first.
pub(crate) async fn take_over(
    _api: &Api<DynamicObject>,
    _name: &str,
    _manager: &str,
) -> Result<TakeOver, kube::Error> {
    Ok(TakeOver::Nothing)
}

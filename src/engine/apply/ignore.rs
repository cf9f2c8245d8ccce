//! Drift-ignore rules at the apply (see [`crate::ignore`]): a member that a rule names and
//! that exists (the reconcile saw it live, or an object being adopted) has its body settled against its live object,
//! read now with one GET as the set's identity: the ignored fields that drifted are given
//! up or carry the live value ([`crate::ignore::drift::settle`]). A member no rule names
//! costs nothing more; one being created is sent whole (its ignored fields set from the
//! manifest, as Flux does); in a dry-run (a plan, `diff`) the same body is sent.

use std::hash::{DefaultHasher, Hash, Hasher};

use kube::{Api, api::DynamicObject};
use serde_json::Value;

use crate::{
    applyset::{
        controls::{self, Marks},
        field_managers::Takers,
    },
    engine::outcome::Outcome,
    render::Member,
};

/// The hash the member watches know an applied body of `member` by: the body's, with the
/// member's ignored paths when it has any (so that a rule added or removed applies it again,
/// rather than it being known unchanged).
pub(super) fn body_hash(member: &Member, body: &Value) -> u64 {
    let hash = crate::members::body_hash(body);
    if member.ignore.is_empty() {
        return hash;
    }
    let mut h = DefaultHasher::new();
    hash.hash(&mut h);
    for p in &member.ignore {
        p.as_str().hash(&mut h);
    }
    h.finish()
}

/// The body to send for `member`, as field manager `takers.owner` (taking over the managers
/// `takers` names): `body` settled against the
/// live object when a rule names the member and it `exists` (the reconcile saw it live, or it
/// exists without the set's label and is being adopted: adoption forces, so an ignored field
/// sent whole would be reset); `body` itself otherwise, or when it is gone since. A failed
/// read is the member's outcome.
pub(super) async fn settled(
    api: &Api<DynamicObject>,
    member: &Member,
    mut body: Value,
    takers: Takers<'_>,
    exists: bool,
) -> Result<Value, Outcome> {
    if member.ignore.is_empty() || !exists {
        return Ok(body);
    }
    let failed = |why: String| {
        let message = format!(
            "{}: reading it for spec.ignore: {why}; not applied",
            member.reference
        );
        Outcome::Failed { message }
    };
    let live = match api.get_opt(&member.reference.name).await {
        Ok(Some(live)) => live,
        Ok(None) => return Ok(body),
        Err(kube::Error::Api(s)) if s.is_forbidden() => {
            let message = format!(
                "{}: reading it for spec.ignore: {}; not applied",
                member.reference, s.message
            );
            return Err(Outcome::Forbidden { message });
        }
        Err(e) => return Err(failed(e.to_string())),
    };
    let overrides = controls::overrides_managers(
        Marks::of_object(&member.object),
        Marks::of_meta(&live.metadata),
    );
    // A live object that cannot be read as JSON is not settled against nothing (that would
    // strip every ignored field, ours included): the member fails.
    let live = serde_json::to_value(live).map_err(|e| failed(e.to_string()))?;
    let settled =
        crate::ignore::drift::settle_for(&mut body, &live, &member.ignore, takers, overrides);
    if !settled.is_empty() {
        tracing::debug!(member = %member.reference, stripped = ?settled.stripped,
            adopted = ?settled.adopted, "ignored fields settled against the live object");
    }
    Ok(body)
}

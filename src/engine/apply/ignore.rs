//! Drift-ignore rules at the apply (see [`crate::ignore`]): a member that a rule names and
//! that exists (the reconcile saw it live) has its body settled against its live object,
//! read now with one GET as the set's identity: the ignored fields that drifted are given
//! up or carry the live value ([`crate::ignore::drift::settle`]). A member no rule names
//! costs nothing more; one being created is sent whole (its ignored fields set from the
//! manifest, as Flux does); in a dry-run (a plan, `diff`) the same body is sent.

use std::{
    collections::HashMap,
    hash::{DefaultHasher, Hash, Hasher},
};

use kube::{Api, api::DynamicObject};
use serde_json::Value;

use crate::{
    api::MemberRef,
    engine::{live::LiveObject, outcome::Outcome},
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

/// The body to send for `member`, as field manager `manager`: `body` settled against the
/// live object when a rule names the member and `existing` knows it; `body` itself
/// otherwise, or when it is gone since. A failed read is the member's outcome.
pub(super) async fn settled(
    api: &Api<DynamicObject>,
    member: &Member,
    mut body: Value,
    manager: &str,
    existing: &HashMap<MemberRef, LiveObject>,
) -> Result<Value, Outcome> {
    if member.ignore.is_empty() || !existing.contains_key(&member.reference) {
        return Ok(body);
    }
    let live = match api.get_opt(&member.reference.name).await {
        Ok(Some(live)) => serde_json::to_value(live).unwrap_or(Value::Null),
        Ok(None) => return Ok(body),
        Err(kube::Error::Api(s)) if s.is_forbidden() => {
            let message = format!(
                "{}: reading it for spec.ignore: {}; not applied",
                member.reference, s.message
            );
            return Err(Outcome::Forbidden { message });
        }
        Err(e) => {
            let message = format!(
                "{}: reading it for spec.ignore: {e}; not applied",
                member.reference
            );
            return Err(Outcome::Failed { message });
        }
    };
    let settled = crate::ignore::drift::settle(&mut body, &live, &member.ignore, manager);
    if !settled.is_empty() {
        tracing::debug!(member = %member.reference, stripped = ?settled.stripped,
            adopted = ?settled.adopted, "ignored fields settled against the live object");
    }
    Ok(body)
}

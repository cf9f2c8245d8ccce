//! Creation without a look first. A member not known to be the set's own is first sent as a
//! *create-only* server-side apply: its body with `metadata.resourceVersion` set to a value
//! no live object has ([`NO_VERSION`]). The API server ignores the resourceVersion of an
//! apply that creates the object, and holds it as a precondition against an object that
//! exists: then the apply is refused (409 Conflict) and nothing is changed. So an absent
//! object is created with no read before it, atomically (there is no window between a look
//! and the write at all), and an existing one, whoever's it is, is left untouched and looked
//! at as before (one metadata GET: ours, or someone else's to adopt or refuse; its window is
//! today's) before it is applied. A new set of N members costs N requests, not 2 N.

use serde_json::Value;

/// A resourceVersion no live object has: etcd revision 1 is the cluster's first write.
pub const NO_VERSION: &str = "1";

/// The create-only form of an apply body (the body hashed and recorded stays the plain one).
pub fn body(body: &Value) -> Value {
    let mut out = body.clone();
    if let Some(meta) = out.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("resourceVersion".into(), Value::String(NO_VERSION.into()));
    }
    out
}

/// Whether a create-only apply was refused because the object exists: a 409 (the
/// precondition failed, or a field conflict, which only an existing object can have).
pub fn exists(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.is_conflict())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;
    use serde_json::json;

    #[test]
    fn the_create_only_body_carries_the_impossible_version_only() {
        let plain = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "labels": {"x": "y"}}, "data": {"k": "v"}});
        let b = body(&plain);
        assert_eq!(b["metadata"]["resourceVersion"], NO_VERSION);
        assert_eq!(b["metadata"]["labels"], plain["metadata"]["labels"]);
        assert_eq!(b["data"], plain["data"]);
        assert!(plain["metadata"].get("resourceVersion").is_none());
    }

    #[test]
    fn only_a_conflict_means_it_exists() {
        let conflict = Status::failure("the object has been modified", "Conflict").with_code(409);
        assert!(exists(&kube::Error::Api(Box::new(conflict))));
        let forbidden = Status::failure("no", "Forbidden").with_code(403);
        assert!(!exists(&kube::Error::Api(Box::new(forbidden))));
    }
}

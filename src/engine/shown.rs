//! Objects as a view shows them: without what the server sets on every write or keeps for its
//! own bookkeeping (managedFields, resourceVersion, generation, uid, creationTimestamp). Pure;
//! `kubectl applyset diff` shows a plan's objects (and the objects it would prune) this way.

use kube::api::DynamicObject;
use serde_json::Value;

/// The metadata fields a view leaves out.
pub const SERVER_SET: [&str; 5] = [
    "managedFields",
    "resourceVersion",
    "generation",
    "uid",
    "creationTimestamp",
];

/// `o` as shown: its JSON without the server-set metadata ([`SERVER_SET`]).
pub fn object(o: &DynamicObject) -> Value {
    let mut v = serde_json::to_value(o).unwrap_or(Value::Null);
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        for k in SERVER_SET {
            meta.remove(k);
        }
    }
    v
}

/// An object given as JSON (a dry-run's answer, a live object) as shown; a value that does
/// not read as an object is shown as it is.
pub fn value(v: &Value) -> Value {
    match serde_json::from_value::<DynamicObject>(v.clone()) {
        Ok(o) => object(&o),
        Err(_) => v.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn server_set_metadata_is_left_out_and_the_rest_kept() {
        let live = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "team", "labels": {"k": "v"},
                "uid": "u", "resourceVersion": "7", "generation": 2,
                "creationTimestamp": "2024-01-01T00:00:00Z",
                "managedFields": [{"manager": "m"}]},
            "data": {"x": "y"}
        });
        assert_eq!(
            value(&live),
            json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "a", "namespace": "team", "labels": {"k": "v"}},
                "data": {"x": "y"}
            })
        );
        assert_eq!(
            value(&json!(["not", "an object"])),
            json!(["not", "an object"])
        );
    }
}

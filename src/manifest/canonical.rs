//! Normalization of an apply body and the digest of a set (canonical JSON).

use super::*;

// ---------------------------------------------------------------------------------------------
// Normalization and digest
// ---------------------------------------------------------------------------------------------

/// Metadata fields the server owns. Sending them in a server-side apply body is wrong:
/// `managedFields` in an apply request replaces the object's field ownership (or is rejected),
/// `resourceVersion` turns the apply into an optimistic-concurrency update that fails with a
/// conflict as soon as the live object changes, `uid` is a precondition that fails when the
/// object is re-created, and the others are read-only fields that only make a manifest copied
/// from `kubectl get -o yaml` fail or churn.
const SERVER_OWNED_METADATA: [&str; 7] = [
    "managedFields",
    "resourceVersion",
    "uid",
    "creationTimestamp",
    "generation",
    "selfLink",
    "deletionTimestamp",
];

/// Removes what must never be sent in a server-side apply body (see `SERVER_OWNED_METADATA`),
/// plus top-level `status` (server-owned for almost every kind: an apply of the main resource
/// ignores it, and declaring it would make the desired set look changed whenever a copied
/// status differs), and `null` labels/annotations (a `null` map or value in an apply body
/// means "remove", which a declaration never intends and which the API server may reject).
pub fn normalize(object: &mut Map<String, Value>) {
    object.remove("status");
    let Some(Value::Object(metadata)) = object.get_mut("metadata") else {
        return;
    };
    for field in SERVER_OWNED_METADATA {
        metadata.remove(field);
    }
    for field in ["labels", "annotations"] {
        match metadata.get_mut(field) {
            Some(Value::Null) => {
                metadata.remove(field);
            }
            Some(Value::Object(map)) => map.retain(|_, value| !value.is_null()),
            _ => {}
        }
    }
}

/// A stable digest of a rendered desired set (its objects after namespaces were resolved):
/// `sha256:<64 hex digits>`.
///
/// Independent of the order of the objects (sorted by content) and of the order of keys in
/// them (canonical JSON with byte-wise sorted keys). Origins do not contribute: moving an
/// object to another file does not change the revision. Pass normalized objects so that
/// server-owned fields do not affect it.
pub fn digest<'a>(objects: impl IntoIterator<Item = &'a serde_json::Map<String, Value>>) -> String {
    let mut entries: Vec<String> = objects
        .into_iter()
        .map(|object| {
            let mut canonical = String::new();
            write_canonical_object(object, &mut canonical);
            canonical
        })
        .collect();
    entries.sort();
    let mut hasher = Sha256::new();
    for canonical in &entries {
        // Canonical JSON never contains a raw newline, so newline-terminated entries are
        // unambiguous.
        hasher.update(canonical.as_bytes());
        hasher.update(b"\n");
    }
    let hash = hasher.finalize();
    let mut out = String::with_capacity("sha256:".len() + 64);
    out.push_str("sha256:");
    push_hex(&mut out, hash.as_slice());
    out
}

const HEX: &[u8; 16] = b"0123456789abcdef";

fn push_hex(out: &mut String, bytes: &[u8]) {
    for byte in bytes {
        out.push(char::from(HEX[usize::from(byte >> 4)]));
        out.push(char::from(HEX[usize::from(byte & 0x0f)]));
    }
}

/// Compact JSON with object keys sorted byte-wise, regardless of serde_json's map order.
fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(number) => out.push_str(&number.to_string()),
        Value::String(s) => write_json_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => write_canonical_object(map, out),
    }
}

/// [`write_canonical`] of a mapping (read in place: no copy of it is made).
fn write_canonical_object(map: &serde_json::Map<String, Value>, out: &mut String) {
    let mut keys: Vec<&String> = map.keys().collect();
    keys.sort();
    out.push('{');
    for (i, key) in keys.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_json_string(key, out);
        out.push(':');
        if let Some(value) = map.get(key) {
            write_canonical(value, out);
        }
    }
    out.push('}');
}

fn write_json_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => {
                out.push_str("\\u00");
                // c < 0x20, so it fits one byte.
                push_hex(out, &[u8::try_from(u32::from(c)).unwrap_or(0)]);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::super::tests::*;
    use super::*;

    // ----- normalize -----

    #[test]
    fn normalize_removes_each_server_field() {
        for field in SERVER_OWNED_METADATA {
            let mut object = obj(json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "a", "namespace": "n", field: "x"}
            }));
            normalize(&mut object);
            assert_eq!(
                Value::Object(object),
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "n"}}),
                "{field}"
            );
        }
    }

    #[test]
    fn normalize_full_object_from_kubectl_get() {
        let mut object = obj(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {
                "name": "web", "namespace": "prod",
                "labels": {"app": "web", "gone": null},
                "annotations": null,
                "managedFields": [{"manager": "kubectl"}],
                "resourceVersion": "123", "uid": "u-1",
                "creationTimestamp": "2024-01-01T00:00:00Z", "generation": 4,
                "selfLink": "/apis/apps/v1/x", "deletionTimestamp": "2024-01-02T00:00:00Z"
            },
            "spec": {"replicas": 1, "status": "kept"},
            "status": {"readyReplicas": 1}
        }));
        normalize(&mut object);
        assert_eq!(
            Value::Object(object),
            json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "web", "namespace": "prod", "labels": {"app": "web"}},
                "spec": {"replicas": 1, "status": "kept"}
            })
        );
    }

    #[test]
    fn normalize_status_and_nulls() {
        let mut object = obj(json!({"kind": "X", "status": {}}));
        normalize(&mut object);
        assert_eq!(Value::Object(object), json!({"kind": "X"}));

        let mut object =
            obj(json!({"metadata": {"labels": null, "annotations": {"a": null, "b": "c"}}}));
        normalize(&mut object);
        assert_eq!(
            Value::Object(object),
            json!({"metadata": {"annotations": {"b": "c"}}})
        );

        // Odd shapes are left alone.
        let mut object = obj(json!({"metadata": "x"}));
        normalize(&mut object);
        assert_eq!(Value::Object(object), json!({"metadata": "x"}));
    }

    // ----- digest -----

    fn digest_of<'a>(manifests: impl IntoIterator<Item = &'a Manifest>) -> String {
        digest(manifests.into_iter().map(|m| &m.object))
    }

    fn set(texts: &[&str]) -> Vec<Manifest> {
        texts
            .iter()
            .flat_map(|t| parse_documents(t, &cm_origin()).expect("valid"))
            .collect()
    }

    const A: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  namespace: ns\ndata:\n  x: '1'\n  y: '2'\n";
    const A_REORDERED: &str = "kind: ConfigMap\ndata:\n  y: '2'\n  x: '1'\nmetadata:\n  namespace: ns\n  name: a\napiVersion: v1\n";
    const B: &str =
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: b\nspec:\n  replicas: 1\n";

    #[test]
    fn digest_format() {
        let d = digest_of(&set(&[A]));
        assert!(d.starts_with("sha256:"));
        assert_eq!(d.len(), "sha256:".len() + 64);
        assert!(
            d["sha256:".len()..]
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        );
    }

    #[test]
    fn digest_of_empty_set_is_sha256_of_nothing() {
        assert_eq!(
            digest_of(std::iter::empty()),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn digest_stable_under_key_order() {
        assert_eq!(digest_of(&set(&[A, B])), digest_of(&set(&[A_REORDERED, B])));
    }

    #[test]
    fn digest_stable_under_input_order_and_origin() {
        let forward = set(&[A, B]);
        let mut backward = set(&[B, A]);
        for m in &mut backward {
            m.origin = Origin::inline(9);
        }
        assert_eq!(digest_of(&forward), digest_of(&backward));
    }

    #[test]
    fn digest_changes_with_content() {
        let base = digest_of(&set(&[A, B]));
        assert_ne!(base, digest_of(&set(&[A])));
        assert_ne!(
            base,
            digest_of(&set(&[A, &B.replace("replicas: 1", "replicas: 2")]))
        );
        assert_ne!(base, digest_of(&set(&[&A.replace("'1'", "'3'"), B])));
        assert_ne!(
            base,
            digest_of(&set(&[A, &B.replace("name: b", "name: c")]))
        );
        // A string "1" and a number 1 differ.
        assert_ne!(
            digest_of(&set(&[A])),
            digest_of(&set(&[&A.replace("'1'", "1")]))
        );
    }

    #[test]
    fn canonical_json_escapes_and_sorts() {
        let mut out = String::new();
        write_canonical(
            &json!({"b": [1, 2.5, null, true, false], "a": "q\"\\\n\r\t\u{1}é"}),
            &mut out,
        );
        assert_eq!(
            out,
            r#"{"a":"q\"\\\n\r\t\u0001é","b":[1,2.5,null,true,false]}"#
        );
        // Same as serde_json's own encoding, so it round-trips.
        let parsed: Value = serde_json::from_str(&out).expect("json");
        assert_eq!(parsed["a"], json!("q\"\\\n\r\t\u{1}é"));
    }
}

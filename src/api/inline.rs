//! `spec.manifests`: inline manifests as read from the API server. An entry is kept as its
//! JSON text, checked (depth, JSON) without building a value, so that reading a parent never
//! fails because of what a tenant declared; its schema bounds entries and fields.

use serde::{Deserialize, Serialize};

/// Most entries `spec.manifests` may have (the CRD's `maxItems`, enforced by the API server):
/// the operator's default bound on members per set. Their size in all is bounded by the
/// operator (`--max-inline-manifests-kib`), since a schema can bound lists, strings and
/// mappings but not the size of an object whose fields it does not know.
pub const MAX_INLINE_MANIFESTS: usize = 10_000;

/// Most top-level fields an entry of `spec.manifests` may have (the CRD's `maxProperties`):
/// an object has a handful (apiVersion, kind, metadata, spec, data, ...).
pub const MAX_MANIFEST_FIELDS: usize = 64;

pub(super) fn manifests_schema(_: &mut schemars::generate::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "description": "Inline Kubernetes objects, each a full object with apiVersion, kind and metadata.name. A `kind: List` is flattened into its items. At most 512 KiB of JSON in all (the operator's --max-inline-manifests-kib): more belongs in a source.",
        "maxItems": MAX_INLINE_MANIFESTS,
        "items": {"type": "object", "maxProperties": MAX_MANIFEST_FIELDS, "x-kubernetes-preserve-unknown-fields": true}
    })
}

/// Deepest nesting of mappings and lists a manifest may have (the object itself is level 1),
/// inline or in a source (the YAML reader's own bound is the same). Real objects stay far
/// below it; a deeper one could not be read back from the API server by JSON readers with a
/// recursion limit (serde_json's is 128).
pub const MAX_MANIFEST_DEPTH: usize = 64;

/// One entry of `spec.manifests` as read from the API server.
///
/// Reading a parent must never fail because of what a tenant declared: a parent that cannot
/// be read breaks the list and watch of every parent (the typed watcher fails the whole
/// list). So each entry is taken as raw JSON text (serde_json skips it without recursion) and
/// checked (its depth, and that it reads as JSON, without building a value); an entry that
/// cannot be read (nested deeper than [`MAX_MANIFEST_DEPTH`], or anything else a JSON reader
/// refuses) is kept as [`InlineManifest::Unreadable`], written back unchanged, and reported
/// by the reconcile of its own parent only.
///
/// A readable entry is kept as its text too ([`InlineManifest::Json`]) and read into a value
/// only when a reconcile renders the set ([`InlineManifest::value`]): the reflector keeps
/// every parent, and text costs one byte per byte the API server sent, where a parsed value
/// costs up to 16 (a list of small numbers: 32 bytes of `serde_json::Value` for every two
/// bytes of text) and a B-tree node per mapping.
#[derive(Clone, Debug)]
pub enum InlineManifest {
    /// The entry's JSON text, as read.
    Json(Box<serde_json::value::RawValue>),
    /// The entry could not be read: its raw JSON text and why.
    Unreadable {
        raw: Box<serde_json::value::RawValue>,
        problem: String,
    },
}

impl InlineManifest {
    /// Reads one entry from its raw JSON text: kept as text when it reads as a value, or why
    /// it cannot be one. Builds no value.
    pub fn from_raw(raw: Box<serde_json::value::RawValue>) -> Self {
        let depth = json_depth(raw.get());
        if depth > MAX_MANIFEST_DEPTH {
            let problem = format!(
                "it is nested {depth} levels deep, more than the {MAX_MANIFEST_DEPTH} levels a manifest may have; flatten it or remove it"
            );
            return InlineManifest::Unreadable { raw, problem };
        }
        match serde_json::from_str::<serde::de::IgnoredAny>(raw.get()) {
            Ok(_) => InlineManifest::Json(raw),
            Err(e) => InlineManifest::Unreadable {
                problem: unreadable_problem(&e),
                raw,
            },
        }
    }

    /// The entry as a JSON value (read from its text at each call), or why it cannot be one.
    pub fn value(&self) -> Result<serde_json::Value, UnreadableManifest> {
        match self {
            InlineManifest::Json(raw) => serde_json::from_str(raw.get())
                .map_err(|e| UnreadableManifest(unreadable_problem(&e))),
            InlineManifest::Unreadable { problem, .. } => Err(UnreadableManifest(problem.clone())),
        }
    }

    /// The length of the entry's JSON text in bytes.
    pub fn text_len(&self) -> usize {
        match self {
            InlineManifest::Json(raw) | InlineManifest::Unreadable { raw, .. } => raw.get().len(),
        }
    }
}

/// Why an inline manifest cannot be read as a JSON value (too deep, or not JSON).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct UnreadableManifest(pub String);

fn unreadable_problem(e: &serde_json::Error) -> String {
    format!("it cannot be read as JSON ({e}); fix it or remove it")
}

impl From<serde_json::Value> for InlineManifest {
    fn from(value: serde_json::Value) -> Self {
        // A `Value` always serializes (its keys are strings, its numbers finite).
        match serde_json::value::to_raw_value(&value) {
            Ok(raw) => InlineManifest::Json(raw),
            Err(e) => InlineManifest::Unreadable {
                raw: serde_json::value::RawValue::NULL.to_owned(),
                problem: unreadable_problem(&e),
            },
        }
    }
}

impl PartialEq for InlineManifest {
    /// Entries are equal when they read as equal values (texts may differ in spacing and the
    /// order of keys); unreadable ones when their texts are equal.
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (InlineManifest::Json(a), InlineManifest::Json(b)) => {
                a.get() == b.get()
                    || matches!((self.value(), other.value()), (Ok(x), Ok(y)) if x == y)
            }
            (
                InlineManifest::Unreadable { raw: a, .. },
                InlineManifest::Unreadable { raw: b, .. },
            ) => a.get() == b.get(),
            _ => false,
        }
    }
}

impl Serialize for InlineManifest {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            InlineManifest::Json(raw) | InlineManifest::Unreadable { raw, .. } => {
                raw.serialize(serializer)
            }
        }
    }
}

impl<'de> Deserialize<'de> for InlineManifest {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = Box::<serde_json::value::RawValue>::deserialize(deserializer)?;
        Ok(InlineManifest::from_raw(raw))
    }
}

/// The nesting depth of JSON text: how many mappings and lists are open at most (brackets
/// inside strings do not count). Text that is not JSON gives a meaningless but finite number.
pub fn json_depth(text: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for b in text.bytes() {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ApplySetSpec;

    #[test]
    fn json_depth_counts_open_brackets_outside_strings() {
        assert_eq!(json_depth("1"), 0);
        assert_eq!(json_depth("{}"), 1);
        assert_eq!(json_depth(r#"{"a":[{"b":[]}],"c":{}}"#), 4);
        assert_eq!(json_depth(r#"{"a":"[[[{{{\"[["}"#), 1);
        assert_eq!(json_depth("]]]}}}"), 0);
    }

    fn nested(depth: usize) -> String {
        let mut text = String::from("1");
        for _ in 0..depth {
            text = format!("{{\"a\":{text}}}");
        }
        text
    }

    #[test]
    fn a_manifest_nested_too_deep_is_unreadable_not_an_error_of_the_parent() {
        let deep = nested(MAX_MANIFEST_DEPTH + 1);
        let spec = format!(r#"{{"manifests":[{{"kind":"A"}},{deep}]}}"#);
        let spec: ApplySetSpec = serde_json::from_str(&spec).expect("the parent reads");
        assert_eq!(
            spec.manifests[0],
            InlineManifest::from(serde_json::json!({"kind": "A"}))
        );
        let InlineManifest::Unreadable { problem, .. } = &spec.manifests[1] else {
            panic!("unreadable expected: {:?}", spec.manifests[1]);
        };
        assert!(problem.contains("nested 65 levels deep"), "{problem}");
        // Written back unchanged.
        let back = serde_json::to_value(&spec).expect("serializes");
        assert_eq!(back["manifests"][1].to_string(), deep);
        // Far beyond serde_json's recursion limit too, and from a Value.
        let deeper = nested(1000);
        let spec = format!(r#"{{"manifests":[{deeper}]}}"#);
        let spec: ApplySetSpec = serde_json::from_str(&spec).expect("the parent reads");
        assert!(matches!(
            spec.manifests[0],
            InlineManifest::Unreadable { .. }
        ));
        let at_limit = nested(MAX_MANIFEST_DEPTH);
        let value: serde_json::Value =
            serde_json::from_str(&format!(r#"{{"manifests":[{at_limit}]}}"#)).expect("json");
        let spec: ApplySetSpec = serde_json::from_value(value).expect("from a value");
        assert!(matches!(spec.manifests[0], InlineManifest::Json(_)));
    }
}

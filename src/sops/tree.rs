//! The ordered value tree that SOPS walks: mappings keep their entries in file order (the MAC
//! hashes values in that order), keys are strings (as SOPS requires), scalars keep their type.

use std::collections::HashSet;
use std::fmt;

use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// One value of a SOPS tree.
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    /// A decrypted string that is not UTF-8 (a binary file's content).
    Bytes(Vec<u8>),
    Seq(Vec<Node>),
    Map(Vec<(String, Node)>),
}

impl Node {
    /// The value of `key` in a mapping (the first entry of that name).
    pub fn get(&self, key: &str) -> Option<&Node> {
        match self {
            Node::Map(entries) => entries.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The text of a string scalar.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Node::Str(s) => Some(s),
            _ => None,
        }
    }
}

/// The shape of a tree: its deepest nesting and how many nodes it has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Shape {
    pub depth: usize,
    pub nodes: usize,
}

/// Measures `node`, stopping early once `max_depth` is passed (the caller reports that).
pub fn shape(node: &Node, max_depth: usize) -> Shape {
    let mut out = Shape::default();
    let mut stack = vec![(node, 1usize)];
    while let Some((node, depth)) = stack.pop() {
        out.nodes += 1;
        out.depth = out.depth.max(depth);
        if depth > max_depth {
            return out;
        }
        match node {
            Node::Seq(items) => stack.extend(items.iter().map(|n| (n, depth + 1))),
            Node::Map(entries) => stack.extend(entries.iter().map(|(_, n)| (n, depth + 1))),
            _ => {}
        }
    }
    out
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a YAML or JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Node, E> {
        Ok(Node::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Node, E> {
        Ok(Node::Int(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Node, E> {
        // SOPS reads integers as Go ints (64 bits); a larger one is read as a float.
        Ok(i64::try_from(v).map_or(Node::Float(v as f64), Node::Int))
    }
    fn visit_i128<E: de::Error>(self, v: i128) -> Result<Node, E> {
        Ok(i64::try_from(v).map_or(Node::Float(v as f64), Node::Int))
    }
    fn visit_u128<E: de::Error>(self, v: u128) -> Result<Node, E> {
        Ok(i64::try_from(v).map_or(Node::Float(v as f64), Node::Int))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Node, E> {
        Ok(Node::Float(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Node, E> {
        Ok(Node::Str(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Node, E> {
        Ok(Node::Str(v))
    }
    fn visit_unit<E>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }
    fn visit_none<E>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Node, D::Error> {
        Node::deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Node>()? {
            items.push(item);
        }
        Ok(Node::Seq(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut entries: Vec<(String, Node)> = Vec::new();
        let mut seen = HashSet::new();
        while let Some(key) = map.next_key::<Key>()? {
            if !seen.insert(key.0.clone()) {
                return Err(de::Error::custom(format_args!("duplicate key `{}`", key.0)));
            }
            entries.push((key.0, map.next_value::<Node>()?));
        }
        Ok(Node::Map(entries))
    }
}

/// A mapping key: SOPS supports string keys only.
struct Key(String);

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string key (SOPS supports string keys only)")
            }
            fn visit_str<E>(self, v: &str) -> Result<Key, E> {
                Ok(Key(v.to_string()))
            }
            fn visit_string<E>(self, v: String) -> Result<Key, E> {
                Ok(Key(v))
            }
        }
        deserializer.deserialize_any(KeyVisitor)
    }
}

impl Serialize for Node {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Node::Null => s.serialize_unit(),
            Node::Bool(b) => s.serialize_bool(*b),
            Node::Int(i) => s.serialize_i64(*i),
            Node::Float(f) => serialize_float(*f, s),
            Node::Str(v) => s.serialize_str(v),
            Node::Bytes(_) => Err(serde::ser::Error::custom(
                "a decrypted value is not UTF-8 text",
            )),
            Node::Seq(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            Node::Map(entries) => {
                let mut map = s.serialize_map(Some(entries.len()))?;
                for (k, v) in entries {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
        }
    }
}

/// Go's `strconv.FormatFloat(f, 'f', -1, 64)`: the shortest digits that read back as `f`, in
/// positional notation (Rust's `Display` for f64 is the same, but for the special values).
pub fn go_float(f: f64) -> String {
    if f.is_nan() {
        "NaN".to_string()
    } else if f.is_infinite() {
        if f > 0.0 { "+Inf" } else { "-Inf" }.to_string()
    } else {
        format!("{f}")
    }
}

/// A float as Go's `encoding/json` writes it, which is what `sops decrypt` prints: a whole
/// number below 1e21 without a fraction (`12`, not `12.0`), so that an integer field reads back
/// as one.
fn serialize_float<S: Serializer>(f: f64, s: S) -> Result<S::Ok, S::Error> {
    if f.fract() == 0.0 && f.abs() < 1e21 {
        // Go's shortest digits, zero-padded (12345678901234567000, not …168).
        let digits = go_float(f);
        if let Ok(i) = digits.parse::<i64>() {
            return s.serialize_i64(i);
        }
        if let Ok(u) = digits.parse::<u64>() {
            return s.serialize_u64(u);
        }
    }
    s.serialize_f64(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_keeps_order_and_types() {
        let node: Node = serde_json::from_str(r#"{"b":1,"a":[true,null,1.5,"x"]}"#).unwrap();
        assert_eq!(
            node,
            Node::Map(vec![
                ("b".into(), Node::Int(1)),
                (
                    "a".into(),
                    Node::Seq(vec![
                        Node::Bool(true),
                        Node::Null,
                        Node::Float(1.5),
                        Node::Str("x".into())
                    ])
                ),
            ])
        );
        assert_eq!(
            serde_json::to_string(&node).unwrap(),
            r#"{"b":1,"a":[true,null,1.5,"x"]}"#
        );
    }

    #[test]
    fn duplicate_keys_and_non_string_keys_are_refused() {
        assert!(serde_json::from_str::<Node>(r#"{"a":1,"a":2}"#).is_err());
        assert!(serde_saphyr::from_str::<Node>("1: a\n").is_err());
    }

    #[test]
    fn whole_floats_are_written_as_integers() {
        let node = Node::Seq(vec![
            Node::Float(12.0),
            Node::Float(1.5),
            Node::Float(1.2345678901234567e19),
        ]);
        assert_eq!(
            serde_json::to_string(&node).unwrap(),
            "[12,1.5,12345678901234567000]"
        );
    }

    #[test]
    fn big_unsigned_integers_become_floats() {
        let node: Node = serde_json::from_str("18446744073709551615").unwrap();
        assert!(matches!(node, Node::Float(_)));
    }

    #[test]
    fn shape_counts_depth_and_nodes() {
        let node: Node = serde_json::from_str(r#"{"a":{"b":[1,2]}}"#).unwrap();
        assert_eq!(shape(&node, 10), Shape { depth: 4, nodes: 5 });
    }
}

//! Decryption of Kubernetes objects that carry SOPS metadata (a top-level `sops` entry), as
//! members reach the apply: each encrypted value is authenticated by its AES-GCM tag under its
//! path, but the file MAC is not compared, because the object's entries are no longer in the
//! file's order (and a build may have changed names, labels and namespaces, as Flux notes).
//! A Secret whose `data` entries are themselves SOPS files has them decrypted whole, MAC
//! included.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Value};

use super::error::SopsError;
use super::tree::{self, Node};
use super::{AgeKeys, Format, Limits};

/// Whether `object` carries SOPS metadata (a `sops` mapping with a `mac`).
pub fn is_encrypted(object: &Map<String, Value>) -> bool {
    object
        .get("sops")
        .and_then(Value::as_object)
        .is_some_and(|m| m.contains_key("mac"))
}

/// Decrypts the values of `object` in place and removes its `sops` entry. `name` names the
/// object in errors. Returns the decrypted values as text.
pub fn decrypt_object(
    name: &str,
    object: &mut Map<String, Value>,
    keys: &AgeKeys,
    limits: &Limits,
) -> Result<Vec<String>, SopsError> {
    let meta = object.remove("sops").ok_or_else(|| SopsError::NoMetadata {
        file: name.to_string(),
    })?;
    let mut document = to_node(&Value::Object(std::mem::take(object)));
    let shape = tree::shape(&document, limits.max_depth);
    if shape.depth > limits.max_depth {
        return Err(SopsError::TooDeep {
            file: name.to_string(),
            limit: limits.max_depth,
        });
    }
    if shape.nodes > limits.max_values {
        return Err(SopsError::TooManyValues {
            file: name.to_string(),
            limit: limits.max_values,
        });
    }
    let plaintexts = super::decrypt_unverified(
        name,
        &to_node(&meta),
        std::slice::from_mut(&mut document),
        keys,
        limits,
    )?;
    let Value::Object(map) = to_value(document, name)? else {
        return Err(SopsError::Parse {
            file: name.to_string(),
            format: Format::Json,
            message: "not an object".to_string(),
        });
    };
    *object = map;
    Ok(plaintexts)
}

/// Decrypts, in a Secret's `data`, each entry whose content is a SOPS file (its format from
/// the key's name, as SOPS picks it). Returns the decrypted contents as text.
pub fn decrypt_secret_data(
    name: &str,
    object: &mut Map<String, Value>,
    keys: &AgeKeys,
    limits: &Limits,
) -> Result<Vec<String>, SopsError> {
    let Some(Value::Object(data)) = object.get_mut("data") else {
        return Ok(Vec::new());
    };
    let mut plaintexts = Vec::new();
    for (key, value) in data.iter_mut() {
        let Some(bytes) = value.as_str().and_then(|s| STANDARD.decode(s).ok()) else {
            continue;
        };
        let format = Format::from_path(key);
        if !super::carries_metadata(&bytes, format) {
            continue;
        }
        let file = format!("{name} data[{key}]");
        let plain = super::decrypt(&file, &bytes, format, keys, limits)?;
        *value = Value::String(STANDARD.encode(&plain));
        plaintexts.push(String::from_utf8_lossy(&plain).into_owned());
    }
    Ok(plaintexts)
}

fn to_node(value: &Value) -> Node {
    match value {
        Value::Null => Node::Null,
        Value::Bool(b) => Node::Bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Node::Int(i),
            None => Node::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => Node::Str(s.clone()),
        Value::Array(items) => Node::Seq(items.iter().map(to_node).collect()),
        Value::Object(map) => Node::Map(map.iter().map(|(k, v)| (k.clone(), to_node(v))).collect()),
    }
}

fn to_value(node: Node, name: &str) -> Result<Value, SopsError> {
    serde_json::to_value(&node).map_err(|e| SopsError::Parse {
        file: name.to_string(),
        format: Format::Json,
        message: e.to_string(),
    })
}

//! JSON files as SOPS reads them: one top-level object; integers that fit 64 bits are
//! integers, other numbers floats. A binary file is stored by SOPS as JSON with one `data`
//! entry holding the whole content.

use super::Format;
use super::error::SopsError;
use super::tree::Node;

/// Reads a JSON file's top-level object.
pub fn load(text: &str, file: &str, format: Format) -> Result<Node, SopsError> {
    let parse_error = |message: String| SopsError::Parse {
        file: file.to_string(),
        format,
        message,
    };
    let node: Node = serde_json::from_str(text).map_err(|e| parse_error(e.to_string()))?;
    if !matches!(node, Node::Map(_)) {
        return Err(parse_error("the top level must be an object".to_string()));
    }
    Ok(node)
}

/// Writes a decrypted JSON object (keys in file order).
pub fn emit(node: &Node, file: &str) -> Result<Vec<u8>, SopsError> {
    let mut out = serde_json::to_vec(node).map_err(|e| SopsError::Parse {
        file: file.to_string(),
        format: Format::Json,
        message: e.to_string(),
    })?;
    out.push(b'\n');
    Ok(out)
}

/// A decrypted binary file: the content of its `data` entry.
pub fn emit_binary(node: &Node, file: &str) -> Result<Vec<u8>, SopsError> {
    let parse_error = |message: &str| SopsError::Parse {
        file: file.to_string(),
        format: Format::Binary,
        message: message.to_string(),
    };
    match node {
        Node::Map(entries) if entries.len() == 1 => match entries.first() {
            Some((key, Node::Str(text))) if key == "data" => Ok(text.as_bytes().to_vec()),
            Some((key, Node::Bytes(bytes))) if key == "data" => Ok(bytes.clone()),
            _ => Err(parse_error("the `data` entry is not a string")),
        },
        _ => Err(parse_error("a binary file holds exactly one `data` entry")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_level_must_be_an_object() {
        assert!(load("[1]", "f", Format::Json).is_err());
        assert!(load("{\"a\":1", "f", Format::Json).is_err());
        assert!(load("{\"a\":1}", "f", Format::Json).is_ok());
    }

    #[test]
    fn binary_is_the_data_entry() {
        let node = Node::Map(vec![("data".into(), Node::Bytes(vec![0xff, 0]))]);
        assert_eq!(emit_binary(&node, "f").unwrap(), vec![0xff, 0]);
        let two = Node::Map(vec![("data".into(), Node::Null), ("x".into(), Node::Null)]);
        assert!(emit_binary(&two, "f").is_err());
    }
}

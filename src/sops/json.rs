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

/// Writes a decrypted JSON object (keys in file order), at most `limit` bytes.
pub fn emit(node: &Node, file: &str, limit: usize) -> Result<Vec<u8>, SopsError> {
    let mut out = Capped::new(limit);
    write_document(&mut out, node, file, Format::Json)?;
    out.put(b"\n", file)?;
    Ok(out.bytes)
}

/// Plaintext being written, refused past `limit` bytes (the bound of one file's plaintext):
/// the writing stops at the bound, before the buffer grows past it.
pub(super) struct Capped {
    pub(super) bytes: Vec<u8>,
    limit: usize,
    full: bool,
}

impl Capped {
    pub(super) fn new(limit: usize) -> Capped {
        Capped {
            bytes: Vec::new(),
            limit,
            full: false,
        }
    }

    /// Appends `piece`, or the error of a plaintext past the bound.
    pub(super) fn put(&mut self, piece: &[u8], file: &str) -> Result<(), SopsError> {
        std::io::Write::write_all(self, piece).map_err(|_| self.too_large(file))
    }

    fn too_large(&self, file: &str) -> SopsError {
        SopsError::PlaintextTooLarge {
            file: file.to_string(),
            limit: self.limit,
        }
    }
}

impl std::io::Write for Capped {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.bytes.len().saturating_add(buf.len()) > self.limit {
            self.full = true;
            return Err(std::io::Error::other("the plaintext bound"));
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Writes `node` as JSON into `out`; `format` names the file's format in a parse error.
pub(super) fn write_document(
    out: &mut Capped,
    node: &Node,
    file: &str,
    format: Format,
) -> Result<(), SopsError> {
    serde_json::to_writer(&mut *out, node).map_err(|e| match out.full {
        true => out.too_large(file),
        false => SopsError::Parse {
            file: file.to_string(),
            format,
            message: e.to_string(),
        },
    })
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
    fn the_plaintext_is_written_up_to_its_bound() {
        let node = load("{\"a\":\"xyz\"}", "f", Format::Json).expect("json");
        let full = emit(&node, "f", 1 << 10).expect("fits");
        assert_eq!(full, b"{\"a\":\"xyz\"}\n");
        assert_eq!(emit(&node, "f", full.len()).as_deref(), Ok(&full[..]));
        assert_eq!(
            emit(&node, "f", full.len() - 1),
            Err(SopsError::PlaintextTooLarge {
                file: "f".into(),
                limit: full.len() - 1
            })
        );
    }

    #[test]
    fn binary_is_the_data_entry() {
        let node = Node::Map(vec![("data".into(), Node::Bytes(vec![0xff, 0]))]);
        assert_eq!(emit_binary(&node, "f").unwrap(), vec![0xff, 0]);
        let two = Node::Map(vec![("data".into(), Node::Null), ("x".into(), Node::Null)]);
        assert!(emit_binary(&two, "f").is_err());
    }
}

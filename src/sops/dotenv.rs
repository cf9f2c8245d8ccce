//! Dotenv files as SOPS reads them: `KEY=value` lines (the value up to the end of the line,
//! `\n` written as `\\n`), `#` comments, the metadata in `sops_…` entries.

use super::Format;
use super::error::SopsError;
use super::flatten;
use super::tree::Node;

const SOPS_PREFIX: &str = "sops_";

/// A dotenv file: its entries (a mapping, in file order) and its metadata tree, if any.
pub struct Dotenv {
    pub entries: Node,
    pub metadata: Option<Node>,
}

/// Reads a dotenv file. Comments are dropped (SOPS leaves them out of the MAC).
pub fn load(text: &str, file: &str, max_values: usize) -> Result<Dotenv, SopsError> {
    let parse_error = |message: String| SopsError::Parse {
        file: file.to_string(),
        format: Format::Dotenv,
        message,
    };
    let mut entries = Vec::new();
    let mut metadata = Vec::new();
    for (index, line) in text.split('\n').enumerate() {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (key, value) = line
            .split_once('=')
            .ok_or_else(|| parse_error(format!("line {} has no `=`", index + 1)))?;
        let value = Node::Str(value.replace("\\n", "\n"));
        match key.strip_prefix(SOPS_PREFIX) {
            Some(meta_key) => metadata.push((meta_key.to_string(), value)),
            None => entries.push((key.to_string(), value)),
        }
        if entries.len() + metadata.len() > max_values {
            return Err(SopsError::TooManyValues {
                file: file.to_string(),
                limit: max_values,
            });
        }
    }
    let metadata = if metadata.is_empty() {
        None
    } else {
        Some(
            flatten::unflatten(metadata).map_err(|e| SopsError::BadMetadata {
                file: file.to_string(),
                field: "sops_*".to_string(),
                problem: e.to_string(),
            })?,
        )
    };
    Ok(Dotenv {
        entries: Node::Map(entries),
        metadata,
    })
}

/// Writes decrypted entries as SOPS does: `KEY=value`, a newline in a value as `\n`.
pub fn emit(entries: &Node) -> Vec<u8> {
    let mut out = Vec::new();
    if let Node::Map(entries) = entries {
        for (key, value) in entries {
            out.extend_from_slice(key.as_bytes());
            out.push(b'=');
            match value {
                Node::Str(s) => out.extend_from_slice(s.replace('\n', "\\n").as_bytes()),
                Node::Bytes(b) => out.extend_from_slice(b),
                other => {
                    out.extend_from_slice(&super::mac::scalar_bytes(other).unwrap_or_default())
                }
            }
            out.push(b'\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_entries_comments_and_metadata() {
        let text = "#c\nA=1=2\nB=x\\ny\n\nsops_mac=m\nsops_age__list_0__map_enc=a\\nb\n";
        let env = load(text, "f.env", 100).unwrap();
        assert_eq!(
            env.entries,
            Node::Map(vec![
                ("A".into(), Node::Str("1=2".into())),
                ("B".into(), Node::Str("x\ny".into()))
            ])
        );
        let meta = env.metadata.unwrap();
        assert_eq!(meta.get("mac"), Some(&Node::Str("m".into())));
        assert_eq!(emit(&env.entries), b"A=1=2\nB=x\\ny\n");
    }

    #[test]
    fn a_line_without_equals_or_too_many_lines_is_refused() {
        let err = load("A=1\nsecret-ish\n", "f.env", 100).err().unwrap();
        assert!(err.to_string().contains("line 2") && !err.to_string().contains("secret-ish"));
        assert!(matches!(
            load("A=1\nB=2\n", "f", 1),
            Err(SopsError::TooManyValues { .. })
        ));
    }
}

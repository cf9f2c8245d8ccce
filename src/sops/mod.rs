//! SOPS decryption with age keys, in memory: a file's bytes, its format and a set of age
//! identities in; the plaintext bytes (as `sops --decrypt` would print them, JSON documents
//! for YAML) or a [`SopsError`] naming the file and the cause out. The file's MAC is verified
//! over the file as it stands, as SOPS computes it. Every input is bounded ([`Limits`]).
//!
//! One concept per module: [`cipher`] (the `ENC[…]` values), [`mac`], [`rules`] (which values
//! are encrypted), [`keys`] (age identities, the data key), [`metadata`], [`tree`] and
//! [`walk`] (the decrypting walk), and a reader per format: [`yaml`], [`json`] (also binary
//! files), [`dotenv`] (with [`flatten`]).

pub mod cipher;
pub mod dotenv;
pub mod error;
pub mod flatten;
pub mod json;
pub mod keys;
pub mod mac;
pub mod metadata;
pub mod object;
pub mod redact;
pub mod rules;
pub mod tree;
pub mod walk;
pub mod yaml;

use std::fmt;

pub use error::{IdentityError, SopsError};
pub use keys::AgeKeys;
use tree::Node;

/// A file format as SOPS stores it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Yaml,
    Json,
    Dotenv,
    Ini,
    /// Any other file: SOPS stores it as JSON with one `data` entry.
    Binary,
}

impl Format {
    /// The format SOPS picks for a file name (its `FormatForPath`).
    pub fn from_path(path: &str) -> Format {
        let name = path.rsplit('/').next().unwrap_or(path);
        match name.rsplit_once('.').map(|(_, ext)| ext) {
            Some("yaml" | "yml") => Format::Yaml,
            Some("json") => Format::Json,
            Some("env") => Format::Dotenv,
            Some("ini") => Format::Ini,
            _ => Format::Binary,
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(match self {
            Format::Yaml => "YAML",
            Format::Json => "JSON",
            Format::Dotenv => "dotenv",
            Format::Ini => "INI",
            Format::Binary => "binary (SOPS JSON)",
        })
    }
}

/// Default of `--sops-max-file-kib`: a SOPS file's text, and its plaintext, in KiB.
pub const DEFAULT_MAX_FILE_KIB: usize = 8 << 10;
/// Default of `--sops-max-values`: the values (nodes) of one SOPS file.
pub const DEFAULT_MAX_VALUES: usize = 100_000;
/// Default of `--sops-max-age-identities`: the age identities of one set's keys. Each is tried
/// on every recipient stanza of every file (an X25519 exchange each); real key files hold a
/// handful.
pub const DEFAULT_MAX_IDENTITIES: usize = 32;
/// Default of `--sops-max-age-recipients`: the age recipient stanzas of one file (all its
/// `sops.age` entries together). Real files carry one to a few; with
/// [`DEFAULT_MAX_IDENTITIES`], a file costs at most 1,024 X25519 exchanges (tens of ms).
pub const DEFAULT_MAX_STANZAS: usize = 32;

/// Bounds on one file, and on the keys tried on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The file's text, and the plaintext it decrypts to, in bytes (`--sops-max-file-kib`).
    pub max_bytes: usize,
    pub max_depth: usize,
    /// `--sops-max-values`.
    pub max_values: usize,
    /// Age identities tried (`--sops-max-age-identities`).
    pub max_identities: usize,
    /// Age recipient stanzas of one file (`--sops-max-age-recipients`).
    pub max_stanzas: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_bytes: DEFAULT_MAX_FILE_KIB << 10,
            max_depth: 64,
            max_values: DEFAULT_MAX_VALUES,
            max_identities: DEFAULT_MAX_IDENTITIES,
            max_stanzas: DEFAULT_MAX_STANZAS,
        }
    }
}

/// Whether `bytes` look like a SOPS file of `format` (a cheap look at the text, for choosing
/// the files to decrypt; [`decrypt`] does the real check).
pub fn carries_metadata(bytes: &[u8], format: Format) -> bool {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return false;
    };
    match format {
        Format::Yaml => text.lines().any(|l| l.starts_with("sops:")) && text.contains("mac:"),
        Format::Json | Format::Binary => {
            text.trim_start().starts_with('{')
                && text.contains("\"sops\"")
                && text.contains("\"mac\"")
        }
        Format::Dotenv => text.lines().any(|l| l.starts_with("sops_mac=")),
        Format::Ini => text.lines().any(|l| l.trim() == "[sops]") && text.contains("mac"),
    }
}

/// Decrypts a SOPS file with `keys`, after checking every value's tag and the file's MAC.
/// `file` names the file in errors. The result is the plaintext as `sops --decrypt` prints it
/// (YAML files as a stream of JSON documents), at most `limits.max_bytes` long: the writing
/// stops at the bound.
pub fn decrypt(
    file: &str,
    bytes: &[u8],
    format: Format,
    keys: &AgeKeys,
    limits: &Limits,
) -> Result<Vec<u8>, SopsError> {
    decrypt_revealing(file, bytes, format, keys, limits).map(|(plaintext, _)| plaintext)
}

/// [`decrypt`], and the values that were encrypted, as text (to withhold them from messages
/// about what was built from the file).
pub fn decrypt_revealing(
    file: &str,
    bytes: &[u8],
    format: Format,
    keys: &AgeKeys,
    limits: &Limits,
) -> Result<(Vec<u8>, Vec<String>), SopsError> {
    if bytes.len() > limits.max_bytes {
        return Err(SopsError::TooLarge {
            file: file.to_string(),
            size: bytes.len(),
            limit: limits.max_bytes,
        });
    }
    let text = std::str::from_utf8(bytes).map_err(|_| SopsError::Parse {
        file: file.to_string(),
        format,
        message: "not UTF-8 text".to_string(),
    })?;
    match format {
        Format::Yaml => {
            let mut documents = yaml::load(text, file, limits)?;
            let values = decrypt_documents(file, &mut documents, keys, limits)?;
            Ok((yaml::emit(&documents, file, limits.max_bytes)?, values))
        }
        Format::Json | Format::Binary => {
            let mut documents = vec![json::load(text, file, format)?];
            let values = decrypt_documents(file, &mut documents, keys, limits)?;
            let plaintext = match format {
                Format::Json => json::emit(&documents[0], file, limits.max_bytes)?,
                _ => json::emit_binary(&documents[0], file)?,
            };
            Ok((plaintext, values))
        }
        Format::Dotenv => {
            let env = dotenv::load(text, file, limits.max_values)?;
            let meta = env.metadata.ok_or_else(|| SopsError::NoMetadata {
                file: file.to_string(),
            })?;
            let mut documents = vec![env.entries];
            let values = decrypt_with(file, &meta, &mut documents, keys, limits)?;
            let plain = dotenv::emit(&documents[0]);
            if plain.len() > limits.max_bytes {
                return Err(SopsError::PlaintextTooLarge {
                    file: file.to_string(),
                    limit: limits.max_bytes,
                });
            }
            Ok((plain, values))
        }
        Format::Ini => Err(SopsError::Unsupported {
            file: file.to_string(),
            what: "an INI file".to_string(),
        }),
    }
}

/// Takes the `sops` entry out of the documents (read from the first), checks the bounds, and
/// decrypts them; returns the decrypted values.
fn decrypt_documents(
    file: &str,
    documents: &mut [Node],
    keys: &AgeKeys,
    limits: &Limits,
) -> Result<Vec<String>, SopsError> {
    let mut meta = None;
    for (index, document) in documents.iter_mut().enumerate() {
        if let Node::Map(entries) = document
            && let Some(at) = entries.iter().position(|(k, _)| k == "sops")
        {
            let (_, value) = entries.remove(at);
            if index == 0 {
                meta = Some(value);
            }
        }
    }
    let meta = meta.ok_or_else(|| SopsError::NoMetadata {
        file: file.to_string(),
    })?;
    let mut values = 0usize;
    for document in documents.iter() {
        let shape = tree::shape(document, limits.max_depth);
        if shape.depth > limits.max_depth {
            return Err(SopsError::TooDeep {
                file: file.to_string(),
                limit: limits.max_depth,
            });
        }
        values += shape.nodes;
    }
    if values > limits.max_values {
        return Err(SopsError::TooManyValues {
            file: file.to_string(),
            limit: limits.max_values,
        });
    }
    decrypt_with(file, &meta, documents, keys, limits)
}

/// Unwraps the data key, decrypts every encrypted value and verifies the MAC; returns the
/// decrypted values.
fn decrypt_with(
    file: &str,
    meta: &Node,
    documents: &mut [Node],
    keys: &AgeKeys,
    limits: &Limits,
) -> Result<Vec<String>, SopsError> {
    let meta = metadata::parse(meta, file)?;
    let key = keys::data_key(&meta, keys, file, limits)?;
    let walked = walk(file, &meta, &key, documents)?;
    walk::verify_mac(file, &key, &meta.mac, &meta.lastmodified, &walked.mac)?;
    Ok(walked.plaintexts)
}

/// Unwraps the data key and decrypts every encrypted value (each authenticated by its tag
/// under its path), without comparing the file MAC (see [`object`]); returns the decrypted
/// values as text.
fn decrypt_unverified(
    file: &str,
    meta: &Node,
    documents: &mut [Node],
    keys: &AgeKeys,
    limits: &Limits,
) -> Result<Vec<String>, SopsError> {
    let meta = metadata::parse(meta, file)?;
    let key = keys::data_key(&meta, keys, file, limits)?;
    walk(file, &meta, &key, documents).map(|w| w.plaintexts)
}

fn walk(
    file: &str,
    meta: &metadata::Metadata,
    key: &[u8; 32],
    documents: &mut [Node],
) -> Result<walk::Walked, SopsError> {
    walk::Walk {
        file,
        key,
        rule: &meta.rule,
        mac_only_encrypted: meta.mac_only_encrypted,
    }
    .run(documents)
}

#[cfg(test)]
mod tests;

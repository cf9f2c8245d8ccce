//! The errors of reading a SOPS file: each names the file and, where there is one, the field
//! path, and never carries a decrypted value.

use super::Format;

/// Why a SOPS file could not be decrypted. `file` is the name the caller gave the file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SopsError {
    #[error(
        "{file}: {size} bytes is more than the {limit} bytes a SOPS file may have (the operator's --sops-max-file-kib)"
    )]
    TooLarge {
        file: String,
        size: usize,
        limit: usize,
    },
    /// The plaintext would pass the bound (writing stopped there).
    #[error(
        "{file}: its plaintext is more than the {limit} bytes a SOPS file may decrypt to (the operator's --sops-max-file-kib)"
    )]
    PlaintextTooLarge { file: String, limit: usize },
    /// More age recipient stanzas than the operator tries.
    #[error(
        "{file}: its data key is wrapped for {count} age recipients (stanzas), more than the {limit} the operator tries per file (--sops-max-age-recipients); re-encrypt it for fewer recipients (sops updatekeys)"
    )]
    TooManyStanzas {
        file: String,
        count: usize,
        limit: usize,
    },
    #[error("{file}: nested more than {limit} levels deep")]
    TooDeep { file: String, limit: usize },
    #[error("{file}: more than {limit} values")]
    TooManyValues { file: String, limit: usize },
    #[error("{file}: not a valid {format} file: {message}")]
    Parse {
        file: String,
        format: Format,
        message: String,
    },
    #[error("{file}: carries no SOPS metadata (no `sops` entry)")]
    NoMetadata { file: String },
    #[error("{file}: SOPS metadata field `{field}`: {problem}")]
    BadMetadata {
        file: String,
        field: String,
        problem: String,
    },
    #[error("{file}: {what} is not supported")]
    Unsupported { file: String, what: String },
    #[error(
        "{file}: none of the age keys given matches a recipient of the file (recipients: {})",
        recipients_text(.recipients)
    )]
    NoMatchingKey {
        file: String,
        recipients: Vec<String>,
    },
    #[error("{file}: the data key could not be unwrapped with age: {cause}")]
    DataKey { file: String, cause: String },
    #[error("{file}: value at `{path}` is not a SOPS encrypted value: {problem}")]
    MalformedValue {
        file: String,
        path: String,
        problem: String,
    },
    #[error(
        "{file}: value at `{path}` failed authentication (AES-GCM tag): it was altered, moved or encrypted with another data key"
    )]
    TamperedValue { file: String, path: String },
    #[error(
        "{file}: MAC mismatch: the file was changed after it was encrypted (an unencrypted field, a value, or the order of entries)"
    )]
    MacMismatch { file: String },
}

fn recipients_text(recipients: &[String]) -> String {
    if recipients.is_empty() {
        "none of age".to_string()
    } else {
        recipients.join(", ")
    }
}

impl SopsError {
    /// The name of the file the error is about.
    pub fn file(&self) -> &str {
        match self {
            SopsError::TooLarge { file, .. }
            | SopsError::PlaintextTooLarge { file, .. }
            | SopsError::TooManyStanzas { file, .. }
            | SopsError::TooDeep { file, .. }
            | SopsError::TooManyValues { file, .. }
            | SopsError::Parse { file, .. }
            | SopsError::NoMetadata { file }
            | SopsError::BadMetadata { file, .. }
            | SopsError::Unsupported { file, .. }
            | SopsError::NoMatchingKey { file, .. }
            | SopsError::DataKey { file, .. }
            | SopsError::MalformedValue { file, .. }
            | SopsError::TamperedValue { file, .. }
            | SopsError::MacMismatch { file } => file,
        }
    }
}

/// The error of an age identity (a `.agekey` entry) that cannot be read. Never carries the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    #[error("{source_name}: line {line} is not an age X25519 identity (AGE-SECRET-KEY-1…)")]
    NotAnIdentity { source_name: String, line: usize },
    #[error("{source_name}: holds no age identity")]
    Empty { source_name: String },
    #[error("{source_name}: more than {limit} bytes")]
    TooLarge { source_name: String, limit: usize },
}

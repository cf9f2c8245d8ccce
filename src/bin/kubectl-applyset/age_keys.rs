//! The local age identities `build` and `diff` decrypt SOPS-encrypted members with, found as
//! sops finds them: `--sops-age-key-file`, else `$SOPS_AGE_KEY_FILE`, plus `$SOPS_AGE_KEY`
//! (the identities themselves) and `$XDG_CONFIG_HOME/sops/age/keys.txt` (default
//! `~/.config/sops/age/keys.txt`) when it exists.

use std::path::{Path, PathBuf};

use applyset_operator::sops::AgeKeys;

/// Why local age identities could not be read.
#[derive(Debug, thiserror::Error)]
pub enum AgeKeyError {
    /// A key file that is named or present could not be read.
    #[error("SOPS age key file {}: {source}", .path.display())]
    File {
        path: PathBuf,
        source: std::io::Error,
    },
    /// An identity that does not parse (the error names where it came from).
    #[error("SOPS age key: {0}")]
    Identity(#[from] applyset_operator::sops::IdentityError),
}

/// The identities found, `None` when there are none; a key file named but unreadable, or an
/// identity that does not parse, is an error naming where it came from.
pub fn local_keys(flag: Option<&Path>) -> Result<Option<AgeKeys>, AgeKeyError> {
    let mut keys = AgeKeys::new();
    let named = flag.map(Path::to_path_buf).or_else(|| {
        std::env::var_os("SOPS_AGE_KEY_FILE")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    });
    let read = |path: PathBuf| match std::fs::read_to_string(&path) {
        Ok(text) => Ok((path.display().to_string(), text)),
        Err(source) => Err(AgeKeyError::File { path, source }),
    };
    if let Some(path) = named {
        let (name, text) = read(path)?;
        keys.add_text(&name, &text)?;
    }
    if let Some(text) = std::env::var("SOPS_AGE_KEY")
        .ok()
        .filter(|t| !t.trim().is_empty())
    {
        keys.add_text("$SOPS_AGE_KEY", &text)?;
    }
    if let Some(path) = default_key_file().filter(|p| p.is_file()) {
        let (name, text) = read(path)?;
        keys.add_text(&name, &text)?;
    }
    Ok((!keys.is_empty()).then_some(keys))
}

/// sops's default key file: `$XDG_CONFIG_HOME/sops/age/keys.txt`, else under `~/.config`.
fn default_key_file() -> Option<PathBuf> {
    let config = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(config.join("sops/age/keys.txt"))
}

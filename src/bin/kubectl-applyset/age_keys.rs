//! The local age identities `build` and `diff` decrypt SOPS-encrypted members with, found as
//! sops finds them: `--sops-age-key-file`, else `$SOPS_AGE_KEY_FILE`, plus `$SOPS_AGE_KEY`
//! (the identities themselves) and `$XDG_CONFIG_HOME/sops/age/keys.txt` (default
//! `~/.config/sops/age/keys.txt`) when it exists.

use std::path::{Path, PathBuf};

use applyset_operator::sops::AgeKeys;

/// The identities found, `None` when there are none; a key file named but unreadable, or an
/// identity that does not parse, is an error naming where it came from.
pub fn local_keys(flag: Option<&Path>) -> Result<Option<AgeKeys>, String> {
    let mut keys = AgeKeys::new();
    let mut add = |name: &str, text: &str| {
        keys.add_text(name, text)
            .map(|_| ())
            .map_err(|e| format!("SOPS age key: {e}"))
    };
    let named = flag.map(Path::to_path_buf).or_else(|| {
        std::env::var_os("SOPS_AGE_KEY_FILE")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    });
    if let Some(path) = named {
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("SOPS age key file {}: {e}", path.display()))?;
        add(&path.display().to_string(), &text)?;
    }
    if let Some(text) = std::env::var("SOPS_AGE_KEY")
        .ok()
        .filter(|t| !t.trim().is_empty())
    {
        add("$SOPS_AGE_KEY", &text)?;
    }
    if let Some(path) = default_key_file().filter(|p| p.is_file()) {
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("SOPS age key file {}: {e}", path.display()))?;
        add(&path.display().to_string(), &text)?;
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

//! Which values of a SOPS file are encrypted: SOPS's `shouldBeEncrypted` for the path rules
//! (`unencrypted_suffix`, `encrypted_suffix`, `unencrypted_regex`, `encrypted_regex`). A file
//! has at most one rule; none means `unencrypted_suffix: _unencrypted`.

use regex::Regex;

/// The rule a file was encrypted with.
#[derive(Debug, Clone)]
pub enum Rule {
    /// Encrypted unless a key on the path ends with the suffix.
    UnencryptedSuffix(String),
    /// Encrypted only if a key on the path ends with the suffix.
    EncryptedSuffix(String),
    /// Encrypted unless a key on the path matches.
    UnencryptedRegex(Regex),
    /// Encrypted only if a key on the path matches.
    EncryptedRegex(Regex),
}

/// SOPS's suffix when a file names no rule.
pub const DEFAULT_UNENCRYPTED_SUFFIX: &str = "_unencrypted";

impl Default for Rule {
    fn default() -> Rule {
        Rule::UnencryptedSuffix(DEFAULT_UNENCRYPTED_SUFFIX.to_string())
    }
}

impl Rule {
    /// Whether the value at `path` (its mapping keys from the root; list positions are not part
    /// of it) is encrypted.
    pub fn encrypts<S: AsRef<str>>(&self, path: &[S]) -> bool {
        let mut keys = path.iter().map(AsRef::as_ref);
        match self {
            Rule::UnencryptedSuffix(suffix) => !keys.any(|k| k.ends_with(suffix.as_str())),
            Rule::EncryptedSuffix(suffix) => keys.any(|k| k.ends_with(suffix.as_str())),
            Rule::UnencryptedRegex(re) => !keys.any(|k| re.is_match(k)),
            Rule::EncryptedRegex(re) => keys.any(|k| re.is_match(k)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_rule_encrypts_all_but_unencrypted_suffix() {
        let rule = Rule::default();
        assert!(rule.encrypts(&["data", "password"]));
        assert!(!rule.encrypts(&["data_unencrypted", "password"]));
        assert!(!rule.encrypts(&["data", "note_unencrypted"]));
        assert!(rule.encrypts::<&str>(&[]));
    }

    #[test]
    fn encrypted_suffix_and_regexes_match_any_key_on_the_path() {
        assert!(Rule::EncryptedSuffix("_secret".into()).encrypts(&["a_secret", "b"]));
        assert!(!Rule::EncryptedSuffix("_secret".into()).encrypts(&["a", "b"]));
        let re = Regex::new("^(data|stringData)$").unwrap();
        assert!(Rule::EncryptedRegex(re.clone()).encrypts(&["data", "x"]));
        assert!(!Rule::EncryptedRegex(re.clone()).encrypts(&["metadata", "name"]));
        assert!(!Rule::UnencryptedRegex(re.clone()).encrypts(&["stringData", "x"]));
        assert!(Rule::UnencryptedRegex(re).encrypts(&["kind"]));
        // Unanchored, as Go's regexp.Match.
        assert!(Rule::EncryptedRegex(Regex::new("ata").unwrap()).encrypts(&["metadata"]));
    }
}

//! Age identities (the `AGE-SECRET-KEY-1…` lines of a `.agekey` entry or a `keys.txt`) and the
//! unwrapping of a file's data key, an armored age file per recipient in its metadata.

use std::fmt;
use std::io::Read;
use std::str::FromStr;

use age::armor::ArmoredReader;
use age::x25519::Identity;
use zeroize::Zeroizing;

use super::error::{IdentityError, SopsError};
use super::metadata::Metadata;

/// Bound on the text of one source of identities.
pub const MAX_IDENTITY_TEXT: usize = 64 * 1024;

/// A set of age X25519 identities. Its `Debug` shows only the public recipients.
#[derive(Default, Clone)]
pub struct AgeKeys {
    identities: Vec<Identity>,
}

impl fmt::Debug for AgeKeys {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.debug_struct("AgeKeys")
            .field("recipients", &self.recipients())
            .finish()
    }
}

impl AgeKeys {
    pub fn new() -> AgeKeys {
        AgeKeys::default()
    }

    /// Adds the identities in `text` (one per line; empty lines and `#` comments skipped, as
    /// age-keygen writes them). `source_name` names the text in errors. Returns how many.
    pub fn add_text(&mut self, source_name: &str, text: &str) -> Result<usize, IdentityError> {
        if text.len() > MAX_IDENTITY_TEXT {
            return Err(IdentityError::TooLarge {
                source_name: source_name.to_string(),
                limit: MAX_IDENTITY_TEXT,
            });
        }
        let mut found = Vec::new();
        for (index, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let identity = Identity::from_str(line).map_err(|_| IdentityError::NotAnIdentity {
                source_name: source_name.to_string(),
                line: index + 1,
            })?;
            found.push(identity);
        }
        if found.is_empty() {
            return Err(IdentityError::Empty {
                source_name: source_name.to_string(),
            });
        }
        let count = found.len();
        self.identities.extend(found);
        Ok(count)
    }

    pub fn is_empty(&self) -> bool {
        self.identities.is_empty()
    }

    /// The public recipients (`age1…`) of the identities.
    pub fn recipients(&self) -> Vec<String> {
        self.identities
            .iter()
            .map(|i| i.to_public().to_string())
            .collect()
    }
}

/// The file's 32-byte data key, unwrapped from the first age stanza one of `keys` opens.
pub fn data_key(
    meta: &Metadata,
    keys: &AgeKeys,
    file: &str,
) -> Result<Zeroizing<[u8; 32]>, SopsError> {
    let mut failure = None;
    for stanza in &meta.age {
        match unwrap(&stanza.enc, keys) {
            Ok(key) => return Ok(key),
            Err(Unwrap::NoMatch) => {}
            Err(Unwrap::Failed(cause)) => failure = Some(cause),
        }
    }
    if let Some(cause) = failure {
        return Err(SopsError::DataKey {
            file: file.to_string(),
            cause,
        });
    }
    let mut recipients: Vec<String> = meta.age.iter().map(|s| s.recipient.clone()).collect();
    recipients.extend(meta.other_keys.iter().map(|k| format!("({k} keys)")));
    Err(SopsError::NoMatchingKey {
        file: file.to_string(),
        recipients,
    })
}

enum Unwrap {
    NoMatch,
    Failed(String),
}

fn unwrap(enc: &str, keys: &AgeKeys) -> Result<Zeroizing<[u8; 32]>, Unwrap> {
    let failed = |what: &str| Unwrap::Failed(what.to_string());
    let decryptor = age::Decryptor::new(ArmoredReader::new(enc.as_bytes()))
        .map_err(|e| Unwrap::Failed(format!("not an age file: {e}")))?;
    let identities = keys.identities.iter().map(|i| i as &dyn age::Identity);
    let reader = match decryptor.decrypt(identities) {
        Ok(reader) => reader,
        Err(age::DecryptError::NoMatchingKeys) => return Err(Unwrap::NoMatch),
        Err(e) => return Err(Unwrap::Failed(e.to_string())),
    };
    let mut bytes = Zeroizing::new(Vec::with_capacity(33));
    reader
        .take(33)
        .read_to_end(&mut bytes)
        .map_err(|_| failed("the wrapped data key does not authenticate"))?;
    let key: [u8; 32] = bytes
        .as_slice()
        .try_into()
        .map_err(|_| failed("the data key is not 32 bytes"))?;
    Ok(Zeroizing::new(key))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use age::secrecy::ExposeSecret;
    use std::io::Write;

    /// Wraps `key` for `recipient` as SOPS does (armored age), for unit tests.
    pub(crate) fn wrap(key: &[u8; 32], recipient: &age::x25519::Recipient) -> String {
        let encryptor =
            age::Encryptor::with_recipients(std::iter::once(recipient as &dyn age::Recipient))
                .unwrap();
        let mut out = Vec::new();
        let armor =
            age::armor::ArmoredWriter::wrap_output(&mut out, age::armor::Format::AsciiArmor)
                .unwrap();
        let mut writer = encryptor.wrap_output(armor).unwrap();
        writer.write_all(key).unwrap();
        writer.finish().unwrap().finish().unwrap();
        String::from_utf8(out).unwrap()
    }

    pub(crate) fn identity_text(identity: &Identity) -> String {
        format!(
            "# created: 2026-01-01\n# public key: {}\n{}\n",
            identity.to_public(),
            identity.to_string().expose_secret()
        )
    }

    #[test]
    fn reads_identities_and_skips_comments() {
        let id = Identity::generate();
        let mut keys = AgeKeys::new();
        assert_eq!(keys.add_text("k.agekey", &identity_text(&id)), Ok(1));
        assert_eq!(keys.recipients(), vec![id.to_public().to_string()]);
        assert!(!format!("{keys:?}").contains("AGE-SECRET-KEY"));
    }

    #[test]
    fn bad_identity_text_is_refused_without_echoing_it() {
        let mut keys = AgeKeys::new();
        let err = keys
            .add_text("k.agekey", "# c\nAGE-SECRET-KEY-1NOPE\n")
            .unwrap_err();
        assert_eq!(
            err,
            IdentityError::NotAnIdentity {
                source_name: "k.agekey".into(),
                line: 2
            }
        );
        assert!(!err.to_string().contains("NOPE"));
        assert!(matches!(
            keys.add_text("e", "# only\n"),
            Err(IdentityError::Empty { .. })
        ));
        let big = "#".repeat(MAX_IDENTITY_TEXT + 1);
        assert!(matches!(
            keys.add_text("b", &big),
            Err(IdentityError::TooLarge { .. })
        ));
    }

    fn meta_for(enc: String) -> Metadata {
        Metadata {
            age: vec![super::super::metadata::AgeStanza {
                recipient: "age1r".into(),
                enc,
            }],
            other_keys: vec!["pgp".into()],
            lastmodified: String::new(),
            mac: String::new(),
            rule: Default::default(),
            mac_only_encrypted: false,
        }
    }

    #[test]
    fn unwraps_the_data_key_or_names_the_recipients() {
        let id = Identity::generate();
        let meta = meta_for(wrap(&[9; 32], &id.to_public()));
        let mut keys = AgeKeys::new();
        keys.add_text("k", &identity_text(&id)).unwrap();
        assert_eq!(*data_key(&meta, &keys, "f").unwrap(), [9; 32]);
        let mut other = AgeKeys::new();
        other
            .add_text("k", &identity_text(&Identity::generate()))
            .unwrap();
        match data_key(&meta, &other, "f") {
            Err(SopsError::NoMatchingKey { recipients, .. }) => {
                assert_eq!(
                    recipients,
                    vec!["age1r".to_string(), "(pgp keys)".to_string()]
                )
            }
            other => panic!("{other:?}"),
        }
        let garbage = meta_for("-----BEGIN AGE ENCRYPTED FILE-----\nxx\n".into());
        assert!(matches!(
            data_key(&garbage, &keys, "f"),
            Err(SopsError::DataKey { .. })
        ));
    }
}
